//! MySQL and MariaDB, through the synchronous `mysql` driver.
//!
//! Airflow's MySQL schema can hold less than the other dialects, and this module refuses what
//! it cannot hold before the server sees it:
//! - `TIMESTAMP(6)` columns hold naive UTC from 1970-01-01 00:00:01 to 2038-01-19
//!   03:14:07.999999. Every connection runs `SET time_zone = '+00:00'`, as Airflow does, so the
//!   server neither shifts what is written nor what is read; instants are bound as
//!   `YYYY-MM-DD HH:MM:SS.ffffff` text and read back as the exact calendar fields of the binary
//!   protocol.
//! - `value` is MEDIUMTEXT (16,777,215 bytes).
//! - keys and dag/run/task ids are `utf8mb3_bin`: no characters outside the Basic
//!   Multilingual Plane. Asset names and uris are latin1 (MySQL's cp1252).
//!
//! A lookup by text such a column cannot hold matches nothing, so it is answered without a
//! query: the server would fail it with "Illegal mix of collations" instead.

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use mysql::prelude::Queryable;
use mysql::{Conn, OptsBuilder, Params, Row, SslOpts, TxOpts, Value};

use super::{
    Access, AssetCount, AssetGroup, AssetRestore, AssetWrite, Batch, Cleanup, DagCount, Diagnose, Finding,
    FoundRow, LargeValue, Place, Reads, STATE_TABLES, SchemaFinding, SchemaProblem, Stats, TaskGroup,
    TaskInstances, TaskWrite, Writes, asset_scope_label, diagnose_schema, largest_first, orphan_condition,
    schema, task_scope_label,
};
use crate::error::{Error, Result};
use crate::model::{
    Asset, AssetEntry, AssetFilter, AssetSelector, EXTERNAL_REF_LIKE, Page, StoredTime, TaskEntry,
    TaskFilter, TaskScope,
};
use crate::text::quote;
use crate::time::Timestamp;
use crate::url::DbUrl;

/// How long connecting may take, from the TCP connect to the end of the session setup: a
/// host or server that does not answer fails in bounded time. `?connect_timeout=N` (seconds, as mysqlclient and PyMySQL read it) overrides it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_PORT: u16 = 3306;

/// What every connection runs first, as Airflow's own connections are set up: the charset
/// that can carry any text the tool is given; UTC as the session time zone, so TIMESTAMP
/// values are naive UTC; and READ COMMITTED, which Airflow's engine uses on MySQL instead of
/// InnoDB's REPEATABLE READ (it also keeps a DELETE from holding gap locks and the locks of
/// rows it scanned but did not delete, which a worker writing during `clean` would wait on).
const SESSION_SETUP: [&str; 3] = [
    "SET NAMES utf8mb4",
    "SET time_zone = '+00:00'",
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
];

/// The first and last instants a MySQL `TIMESTAMP(6)` column can hold, in microseconds since
/// the Unix epoch: 1970-01-01 00:00:01 and 2038-01-19 03:14:07.999999 UTC.
const TIMESTAMP_FIRST_MICROS: i64 = 1_000_000;
const TIMESTAMP_LAST_MICROS: i64 = 2_147_483_647_999_999;

/// `MEDIUMTEXT` holds at most 2^24 - 1 bytes.
const MEDIUMTEXT_BYTES: usize = 16_777_215;

/// 1 GiB, the largest `max_allowed_packet` MySQL and MariaDB know.
const CLIENT_MAX_PACKET: usize = 1 << 30;

/// `LIMIT` has no "no limit" value in MySQL; its manual suggests the largest unsigned integer.
const NO_LIMIT: u64 = u64::MAX;

// ---------------------------------------------------------------------------------------------
// Connecting

/// Where the server is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Endpoint {
    Tcp { host: String, port: u16 },
    Socket(PathBuf),
}

/// TLS as the URL asks for it; `None` in [`ConnectPlan`] is a plain connection.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tls {
    /// A CA bundle (PEM or DER) trusted in addition to the system's.
    ca: Option<PathBuf>,
    /// The server certificate must chain to a trusted CA.
    verify_ca: bool,
    /// ... and name the host connected to.
    verify_identity: bool,
}

/// Everything needed to connect, decided from the URL alone (so it can be tested without a
/// server). `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
struct ConnectPlan {
    endpoint: Endpoint,
    user: Option<String>,
    password: Option<String>,
    database: String,
    tls: Option<Tls>,
    connect_timeout: Duration,
}

impl fmt::Debug for ConnectPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectPlan")
            .field("endpoint", &self.endpoint)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("database", &self.database)
            .field("tls", &self.tls)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// SQLAlchemy-style booleans in query strings.
fn query_bool(url: &DbUrl, key: &str) -> Result<Option<bool>> {
    let Some(value) = url.query_value(key) else {
        return Ok(None);
    };
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "y" | "t" | "1" => Ok(Some(true)),
        "false" | "no" | "off" | "n" | "f" | "0" => Ok(Some(false)),
        _ => Err(Error::Config(format!(
            "invalid {key}={} in [database] sql_alchemy_conn {}: expected true or false",
            quote(value),
            url.redacted()
        ))),
    }
}

impl ConnectPlan {
    fn from_url(url: &DbUrl) -> Result<ConnectPlan> {
        let database = url.database.clone().filter(|d| !d.is_empty()).ok_or_else(|| {
            Error::Config(format!(
                "[database] sql_alchemy_conn {} names no database: expected mysql://user:password@host:3306/airflow",
                url.redacted()
            ))
        })?;
        let endpoint = match url.query_value("unix_socket").filter(|s| !s.is_empty()) {
            Some(path) => Endpoint::Socket(PathBuf::from(path)),
            // PyMySQL's default; mysqlclient would take the default socket for "localhost",
            // which this tool only uses when `unix_socket` names it.
            None => Endpoint::Tcp {
                host: url.host.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| "localhost".to_string()),
                port: url.port.unwrap_or(DEFAULT_PORT),
            },
        };
        let connect_timeout = match url.query_value("connect_timeout") {
            None => CONNECT_TIMEOUT,
            Some(text) => match text.trim().parse::<u64>() {
                Ok(secs) if secs > 0 => Duration::from_secs(secs),
                _ => {
                    return Err(Error::Config(format!(
                        "invalid connect_timeout={} in [database] sql_alchemy_conn {}: expected whole seconds > 0",
                        quote(text),
                        url.redacted()
                    )));
                }
            },
        };
        // As SQLAlchemy passes them to the driver: the query's user and password (mysqlclient
        // also says `passwd`) win over the URL's own.
        let query = |key: &str| url.query_value(key).map(str::to_string);
        Ok(ConnectPlan {
            endpoint,
            user: query("user").or_else(|| url.username.clone()),
            password: query("password").or_else(|| query("passwd")).or_else(|| url.password.clone()),
            database,
            tls: tls_from_url(url)?,
            connect_timeout,
        })
    }

    /// How messages name the database: never with user or password.
    fn location(&self) -> String {
        match &self.endpoint {
            Endpoint::Tcp { host, port } if host.contains(':') => {
                format!("MySQL database {} on [{host}]:{port}", self.database)
            }
            Endpoint::Tcp { host, port } => format!("MySQL database {} on {host}:{port}", self.database),
            Endpoint::Socket(path) => {
                format!("MySQL database {} on socket {}", self.database, path.display())
            }
        }
    }

    fn opts(&self) -> OptsBuilder {
        let builder = OptsBuilder::new()
            .user(self.user.clone())
            .pass(self.password.clone())
            .db_name(Some(self.database.clone()))
            // The driver would otherwise switch a loopback TCP connection to the server's
            // socket behind the user's back.
            .prefer_socket(false)
            .tcp_connect_timeout(Some(self.connect_timeout))
            // The largest packet this client accepts (MySQL's own upper bound). Left unset, the
            // driver takes the server's `max_allowed_packet` (16 MiB on MariaDB) and then
            // refuses to read back a row whose MEDIUMTEXT value is close to 16 MiB.
            .max_allowed_packet(Some(CLIENT_MAX_PACKET))
            .init(SESSION_SETUP.to_vec());
        let builder = match &self.endpoint {
            Endpoint::Tcp { host, port } => builder.ip_or_hostname(Some(host.clone())).tcp_port(*port),
            Endpoint::Socket(path) => builder.socket(Some(path.to_string_lossy().into_owned())),
        };
        match &self.tls {
            None => builder,
            Some(tls) => builder.ssl_opts(
                SslOpts::default()
                    .with_root_cert_path(tls.ca.clone().map(Cow::Owned))
                    .with_danger_accept_invalid_certs(!tls.verify_ca)
                    .with_danger_skip_domain_validation(!tls.verify_identity),
            ),
        }
    }
}

/// TLS from the options SQLAlchemy users write for mysqlclient and PyMySQL:
/// - `ssl_mode` = `DISABLED`, `PREFERRED` (plain, see below), `REQUIRED` (encrypted, not
///   verified unless `ssl_ca` is given), `VERIFY_CA`, `VERIFY_IDENTITY`;
/// - `ssl=true|false`, `ssl_disabled=true` (PyMySQL);
/// - `ssl_ca=/path` (turns TLS on and verifies the certificate and, unless
///   `ssl_check_hostname=false`, the host name), `ssl_verify_cert`, `ssl_verify_identity`.
///
/// The driver cannot fall back to plain text, so `PREFERRED` connects plainly, as it does
/// with a server that offers no TLS. Client certificates and cipher lists are refused, not
/// ignored: a connection weaker than the one configured must not happen silently.
fn tls_from_url(url: &DbUrl) -> Result<Option<Tls>> {
    for key in ["ssl_cert", "ssl_key", "ssl_capath", "ssl_cipher"] {
        if url.query_value(key).is_some() {
            return Err(Error::Config(format!(
                "{key} in [database] sql_alchemy_conn {} is not supported by state-store \
                 (it supports ssl_mode, ssl, ssl_ca, ssl_check_hostname, ssl_verify_cert and ssl_verify_identity)",
                url.redacted()
            )));
        }
    }
    let ca = url.query_value("ssl_ca").filter(|s| !s.is_empty()).map(PathBuf::from);
    let mode = match url.query_value("ssl_mode") {
        None => None,
        Some(text) => Some(match text.trim().to_ascii_uppercase().replace('-', "_").as_str() {
            "DISABLED" => SslMode::Disabled,
            "PREFERRED" => SslMode::Preferred,
            "REQUIRED" => SslMode::Required,
            "VERIFY_CA" => SslMode::VerifyCa,
            "VERIFY_IDENTITY" => SslMode::VerifyIdentity,
            _ => {
                return Err(Error::Config(format!(
                    "invalid ssl_mode={} in [database] sql_alchemy_conn {}: expected DISABLED, PREFERRED, \
                     REQUIRED, VERIFY_CA or VERIFY_IDENTITY",
                    quote(text),
                    url.redacted()
                )));
            }
        }),
    };
    let ssl = query_bool(url, "ssl")?;
    let disabled = query_bool(url, "ssl_disabled")?;
    let verify_cert = query_bool(url, "ssl_verify_cert")?;
    let verify_identity = query_bool(url, "ssl_verify_identity")?;
    let check_hostname = query_bool(url, "ssl_check_hostname")?;

    if mode == Some(SslMode::Disabled) || disabled == Some(true) || (mode.is_none() && ssl == Some(false)) {
        return Ok(None);
    }
    let mode = match mode {
        Some(mode) => mode,
        None if ca.is_some() => {
            if check_hostname == Some(false) {
                SslMode::VerifyCa
            } else {
                SslMode::VerifyIdentity
            }
        }
        None if verify_identity == Some(true) => SslMode::VerifyIdentity,
        None if verify_cert == Some(true) => SslMode::VerifyCa,
        None if ssl == Some(true) => SslMode::Required,
        None => return Ok(None),
    };
    let (verify_ca, verify_identity) = match mode {
        SslMode::Disabled | SslMode::Preferred => return Ok(None),
        // As MySQL's own client does: REQUIRED with a CA given verifies against that CA.
        SslMode::Required => (ca.is_some(), false),
        SslMode::VerifyCa => (true, false),
        SslMode::VerifyIdentity => (true, true),
    };
    Ok(Some(Tls { ca, verify_ca, verify_identity }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SslMode {
    Disabled,
    Preferred,
    Required,
    VerifyCa,
    VerifyIdentity,
}

/// A driver error in plain words: the driver's own `Display` wraps each kind in its Rust
/// name (`MySqlError { ERROR 1045 (28000): … }`), which means nothing to a user.
fn describe(e: &mysql::Error) -> String {
    match e {
        mysql::Error::IoError(inner) => inner.to_string(),
        mysql::Error::CodecError(inner) => inner.to_string(),
        mysql::Error::MySqlError(inner) => inner.to_string(),
        mysql::Error::DriverError(inner) => inner.to_string(),
        mysql::Error::UrlError(inner) => inner.to_string(),
        mysql::Error::TlsError(inner) => format!("TLS: {inner}"),
        other => other.to_string(),
    }
}

fn db_err(context: impl Into<String>, e: &mysql::Error) -> Error {
    Error::db(context, describe(e))
}

/// A write of a large value that the server cuts off is, in practice, a value over its
/// `max_allowed_packet`; the server only says so in its own log.
fn write_error(context: String, e: &mysql::Error, value: &str) -> Error {
    const LARGE: usize = 1 << 20;
    let lost = matches!(e, mysql::Error::IoError(_) | mysql::Error::CodecError(_));
    if lost && value.len() > LARGE {
        Error::db(
            context,
            format!(
                "{} (the server closed the connection: a value of {} bytes may exceed its max_allowed_packet)",
                describe(e),
                value.len()
            ),
        )
    } else {
        db_err(context, e)
    }
}

/// Connects within the plan's timeout, handshake, TLS, login and session setup included. The
/// driver bounds only the TCP connect; a server that accepts connections but never answers
/// (hung, or not a MySQL server at all) would otherwise block forever, so the driver runs on
/// a helper thread that is abandoned when the time is up.
fn connect(url: &DbUrl) -> Result<(Conn, String)> {
    let plan = ConnectPlan::from_url(url)?;
    let location = plan.location();
    let context = format!("cannot connect to {location}");
    let opts = plan.opts();
    let (sender, receiver) = mpsc::channel();
    std::thread::Builder::new()
        .name("mysql-connect".to_string())
        .spawn(move || {
            // The receiver is gone only when the wait below has given up.
            let _ = sender.send(Conn::new(opts));
        })
        .map_err(|e| Error::db(&context, e))?;
    match receiver.recv_timeout(plan.connect_timeout) {
        Ok(Ok(conn)) => Ok((conn, location)),
        Ok(Err(e)) => Err(db_err(context, &e)),
        Err(_) => Err(Error::Database {
            context,
            cause: format!("no answer within {} s", plan.connect_timeout.as_secs()).into(),
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// What the columns can hold

/// Whether `utf8mb3` (MySQL's three-byte UTF-8) can hold the text: only characters of the
/// Basic Multilingual Plane.
fn fits_utf8mb3(text: &str) -> bool {
    text.chars().all(|c| u32::from(c) <= 0xFFFF)
}

/// Whether MySQL's `latin1` can hold the text. That charset is Windows-1252, with its five
/// unassigned bytes (0x81, 0x8D, 0x8F, 0x90, 0x9D) mapped to the C1 controls of the same
/// number; every other C1 control maps to nothing.
fn fits_latin1(text: &str) -> bool {
    text.chars().all(|c| match u32::from(c) {
        0x00..=0x7F | 0xA0..=0xFF => true,
        0x81 | 0x8D | 0x8F | 0x90 | 0x9D => true,
        _ => matches!(
            c,
            '€' | '‚'
                | 'ƒ'
                | '„'
                | '…'
                | '†'
                | '‡'
                | 'ˆ'
                | '‰'
                | 'Š'
                | '‹'
                | 'Œ'
                | 'Ž'
                | '‘'
                | '’'
                | '“'
                | '”'
                | '•'
                | '–'
                | '—'
                | '˜'
                | '™'
                | 'š'
                | '›'
                | 'œ'
                | 'ž'
                | 'Ÿ'
        ),
    })
}

/// Refuses text a `utf8mb3` column cannot store, naming the column.
fn require_utf8mb3(column: &str, text: &str) -> Result<()> {
    if fits_utf8mb3(text) {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "{column} {} contains characters outside the Basic Multilingual Plane (such as emoji), \
             which Airflow's MySQL schema cannot store (utf8mb3 column)",
            quote(text)
        )))
    }
}

fn require_latin1(column: &str, text: &str) -> Result<()> {
    if fits_latin1(text) {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "{column} {} contains characters that Airflow's MySQL schema cannot store (latin1 column)",
            quote(text)
        )))
    }
}

/// Refuses an instant a `TIMESTAMP(6)` column cannot hold, before anything is written.
fn require_storable_time(column: &str, at: Timestamp) -> Result<()> {
    if at.micros() > TIMESTAMP_LAST_MICROS {
        return Err(Error::Usage(format!(
            "cannot store {column} {at}: MySQL TIMESTAMP ends at 2038-01-19 03:14:07 UTC; use a shorter retention or never"
        )));
    }
    if at.micros() < TIMESTAMP_FIRST_MICROS {
        return Err(Error::Usage(format!(
            "cannot store {column} {at}: MySQL TIMESTAMP starts at 1970-01-01 00:00:01 UTC"
        )));
    }
    Ok(())
}

fn require_value_size(column: &str, value: &str) -> Result<()> {
    if value.len() > MEDIUMTEXT_BYTES {
        return Err(Error::Usage(format!(
            "the value is {} bytes as stored; Airflow's MySQL column {column} (MEDIUMTEXT) holds at most {MEDIUMTEXT_BYTES}",
            value.len()
        )));
    }
    Ok(())
}

/// The text form bound for every instant: MySQL reads it as naive UTC in a `+00:00` session.
fn time_param(at: Timestamp) -> Value {
    Value::from(at.to_sqlite_text())
}

// ---------------------------------------------------------------------------------------------
// Reading rows

/// One row's values, taken left to right. A value of an unexpected type becomes an error
/// naming the column, never a panic.
struct Fields {
    values: std::vec::IntoIter<Value>,
    names: Vec<String>,
    at: usize,
}

impl Fields {
    fn new(row: Row) -> Fields {
        let names = row.columns_ref().iter().map(|c| c.name_str().into_owned()).collect();
        Fields { values: row.unwrap().into_iter(), names, at: 0 }
    }

    fn next(&mut self) -> (Value, String) {
        let name = self.names.get(self.at).cloned().unwrap_or_default();
        self.at += 1;
        (self.values.next().unwrap_or(Value::NULL), name)
    }

    fn int(&mut self) -> std::result::Result<i64, String> {
        let (value, name) = self.next();
        match value {
            Value::Int(i) => Ok(i),
            Value::UInt(u) => i64::try_from(u).map_err(|_| format!("column {name}: {u} is out of range")),
            Value::Bytes(b) => String::from_utf8_lossy(&b).parse().map_err(|_| {
                format!("column {name}: {} is not an integer", quote(&String::from_utf8_lossy(&b)))
            }),
            other => Err(format!("column {name}: expected an integer, got {other:?}")),
        }
    }

    fn opt_int(&mut self) -> std::result::Result<Option<i64>, String> {
        if self.values.as_slice().first().is_none_or(|v| *v == Value::NULL) {
            self.next();
            return Ok(None);
        }
        self.int().map(Some)
    }

    fn count(&mut self) -> std::result::Result<u64, String> {
        self.int().map(|n| u64::try_from(n).unwrap_or(0))
    }

    fn opt_text(&mut self) -> Option<String> {
        match self.next().0 {
            Value::NULL => None,
            Value::Bytes(b) => Some(String::from_utf8_lossy(&b).into_owned()),
            Value::Int(i) => Some(i.to_string()),
            Value::UInt(u) => Some(u.to_string()),
            other => Some(other.as_sql(true)),
        }
    }

    /// Text columns; a damaged row may hold anything, which is shown rather than refused.
    fn text(&mut self) -> String {
        self.opt_text().unwrap_or_default()
    }

    fn bool(&mut self) -> std::result::Result<bool, String> {
        self.int().map(|n| n != 0)
    }

    fn time(&mut self) -> Option<StoredTime> {
        match self.next().0 {
            Value::NULL => None,
            // The binary protocol sends the calendar fields as integers: exact to the
            // microsecond. MySQL's zero date and other impossible dates are shown as stored.
            Value::Date(y, mo, d, h, mi, s, us) => {
                let text = format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.{us:06}");
                Some(match Timestamp::parse_db_text(&text) {
                    Ok(ts) => StoredTime::At(ts),
                    Err(_) => StoredTime::Unreadable(text),
                })
            }
            Value::Bytes(b) => {
                let text = String::from_utf8_lossy(&b).into_owned();
                Some(match Timestamp::parse_db_text(&text) {
                    Ok(ts) => StoredTime::At(ts),
                    Err(_) => StoredTime::Unreadable(text),
                })
            }
            other => Some(StoredTime::Unreadable(other.as_sql(true))),
        }
    }

    fn required_time(&mut self) -> StoredTime {
        self.time().unwrap_or_else(|| StoredTime::Unreadable(String::new()))
    }
}

const TASK_COLUMNS: &str = "dag_id, run_id, task_id, map_index, `key`, value, updated_at, expires_at";

fn task_entry(row: Row) -> std::result::Result<TaskEntry, String> {
    task_fields(&mut Fields::new(row))
}

/// A task entry from the next columns of `f` (in [`TASK_COLUMNS`] order).
fn task_fields(f: &mut Fields) -> std::result::Result<TaskEntry, String> {
    Ok(TaskEntry {
        scope: TaskScope { dag_id: f.text(), run_id: f.text(), task_id: f.text(), map_index: f.int()? },
        key: f.text(),
        value: f.text(),
        updated_at: f.required_time(),
        expires_at: f.time(),
    })
}

const ASSET_COLUMNS: &str = "s.asset_id, a.name, a.uri, s.`key`, s.value, s.updated_at, s.last_updated_by_kind, \
     s.last_updated_by_dag_id, s.last_updated_by_run_id, s.last_updated_by_task_id, s.last_updated_by_map_index";

fn asset_entry(row: Row) -> std::result::Result<AssetEntry, String> {
    let mut f = Fields::new(row);
    Ok(AssetEntry {
        asset_id: f.int()?,
        asset_name: f.opt_text(),
        asset_uri: f.opt_text(),
        key: f.text(),
        value: f.text(),
        updated_at: f.required_time(),
        last_updated_by_kind: f.opt_text(),
        last_updated_by_dag_id: f.opt_text(),
        last_updated_by_run_id: f.opt_text(),
        last_updated_by_task_id: f.opt_text(),
        last_updated_by_map_index: f.opt_int()?,
    })
}

fn asset(row: Row) -> std::result::Result<Asset, String> {
    let mut f = Fields::new(row);
    Ok(Asset { id: f.int()?, name: f.text(), uri: f.text(), active: f.bool()? })
}

fn single_int(row: Row) -> std::result::Result<i64, String> {
    Fields::new(row).int()
}

fn single_count(row: Row) -> std::result::Result<u64, String> {
    Fields::new(row).count()
}

fn page_params(page: Page) -> [Value; 2] {
    [Value::UInt(page.limit.unwrap_or(NO_LIMIT)), Value::UInt(page.offset)]
}

/// An asset is active when `asset_active` has a row with the same name AND uri.
const ACTIVE_JOIN: &str = "JOIN asset_active aa ON aa.name = a.name AND aa.uri = a.uri";

// ---------------------------------------------------------------------------------------------
// The metastore

pub(crate) struct MysqlStore {
    conn: Conn,
    location: String,
    /// `(table, column)` of the text columns that are 3-byte `utf8mb3`. Airflow's models make
    /// key and id columns `utf8mb3_bin`, but a metastore upgraded from 3.2 has its `key`
    /// columns in `utf8mb4`, which holds any character: read, never assumed.
    narrow: Vec<(String, String)>,
    /// Whether the server is MariaDB, whose `DELETE … RETURNING` finds and deletes a batch of
    /// `clean` in one statement; read once, on the first batch.
    is_mariadb: Option<bool>,
}

impl MysqlStore {
    pub(crate) fn open(url: &DbUrl, access: Access) -> Result<Self> {
        let (store, finding) = Self::connect(url, access)?;
        finding.map_err(SchemaProblem::into_error)?;
        Ok(store)
    }

    /// Connects and checks the schema, handing back what the check found.
    pub(crate) fn connect(url: &DbUrl, access: Access) -> Result<(Self, SchemaFinding)> {
        let (conn, location) = connect(url)?;
        let mut store = MysqlStore { conn, location, narrow: Vec::new(), is_mariadb: None };
        if access == Access::ReadOnly {
            // Every later statement, autocommitted or not, runs in a read-only transaction.
            store.execute("cannot use", "SET SESSION TRANSACTION READ ONLY", Vec::new())?;
        } else {
            // InnoDB waits 50 s for a row lock by default; a write behind a stuck worker fails
            // after 10 s with a message instead, as on PostgreSQL (clean sets --lock-timeout).
            store.execute("cannot use", "SET SESSION innodb_lock_wait_timeout = 10", Vec::new())?;
        }
        let location = store.location.clone();
        let finding = diagnose_schema(&location, |table| columns(&mut store.conn, &location, table))?;
        store.narrow = store.rows(
            "cannot read the column character sets",
            "SELECT table_name, column_name FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND character_set_name IN ('utf8', 'utf8mb3') \
             AND table_name IN ('task_state_store', 'asset_state_store', 'dag_run', 'task_instance')",
            Vec::new(),
            |row| {
                let mut f = Fields::new(row);
                Ok((f.text(), f.text()))
            },
        )?;
        Ok((store, finding))
    }

    /// Whether `table.column` can hold `text` (only a `utf8mb3` column cannot hold characters
    /// outside the Basic Multilingual Plane).
    fn fits(&self, table: &str, column: &str, text: &str) -> bool {
        fits_utf8mb3(text) || !self.narrow.iter().any(|(t, c)| t == table && c == column)
    }

    fn require(&self, table: &str, column: &str, text: &str) -> Result<()> {
        if self.fits(table, column, text) { Ok(()) } else { require_utf8mb3(column, text) }
    }

    fn scope_fits(&self, scope: &TaskScope) -> bool {
        self.fits("task_state_store", "dag_id", &scope.dag_id)
            && self.fits("task_state_store", "run_id", &scope.run_id)
            && self.fits("task_state_store", "task_id", &scope.task_id)
    }

    fn ctx(&self, what: &str) -> String {
        format!("{what} in {}", self.location)
    }

    /// Whether the server is MariaDB rather than MySQL (read once per connection).
    fn is_mariadb(&mut self) -> Result<bool> {
        if let Some(known) = self.is_mariadb {
            return Ok(known);
        }
        let version: Option<String> = self
            .conn
            .query_first("SELECT VERSION()")
            .map_err(|e| db_err(format!("cannot read {}", self.location), &e))?;
        let known = version.is_some_and(|v| v.contains("MariaDB"));
        self.is_mariadb = Some(known);
        Ok(known)
    }

    fn rows<T>(
        &mut self,
        what: &str,
        sql: &str,
        params: Vec<Value>,
        map: impl Fn(Row) -> std::result::Result<T, String>,
    ) -> Result<Vec<T>> {
        let rows: Vec<Row> =
            self.conn.exec(sql, Params::Positional(params)).map_err(|e| db_err(self.ctx(what), &e))?;
        rows.into_iter().map(|row| map(row).map_err(|e| Error::db(self.ctx(what), e))).collect()
    }

    fn first<T>(
        &mut self,
        what: &str,
        sql: &str,
        params: Vec<Value>,
        map: impl Fn(Row) -> std::result::Result<T, String>,
    ) -> Result<Option<T>> {
        Ok(self.rows(what, sql, params, map)?.into_iter().next())
    }

    /// Writes one row holding `value` (for the message when the server refuses its size).
    fn write(&mut self, what: &str, sql: &str, params: Vec<Value>, value: &str) -> Result<()> {
        self.conn
            .exec_drop(sql, Params::Positional(params))
            .map_err(|e| write_error(self.ctx(what), &e, value))
    }

    /// Runs a statement that changes rows and returns how many it changed.
    fn execute(&mut self, what: &str, sql: &str, params: Vec<Value>) -> Result<u64> {
        self.conn.exec_drop(sql, Params::Positional(params)).map_err(|e| db_err(self.ctx(what), &e))?;
        Ok(self.conn.affected_rows())
    }
}

/// The WHERE clause of `list`'s task filters (and of a primary-key page), with its values;
/// `None` when a filter holds text the utf8mb3 columns cannot, which matches no row.
fn task_filter_where(
    filter: &TaskFilter,
    after_id: Option<i64>,
    fits: impl Fn(&str, &str) -> bool,
) -> Option<(String, Vec<Value>)> {
    let mut clauses: Vec<&str> = Vec::new();
    let mut params: Vec<Value> = Vec::new();
    for (clause, column, value) in [
        ("dag_id = ?", "dag_id", &filter.dag_id),
        ("run_id = ?", "run_id", &filter.run_id),
        ("task_id = ?", "task_id", &filter.task_id),
    ] {
        if let Some(v) = value {
            if !fits(column, v) {
                return None;
            }
            clauses.push(clause);
            params.push(v.as_str().into());
        }
    }
    if let Some(map_index) = filter.map_index {
        clauses.push("map_index = ?");
        params.push(map_index.into());
    }
    if let Some(cutoff) = filter.expired_before {
        clauses.push("expires_at < ?");
        params.push(time_param(cutoff));
    }
    if filter.external_only {
        clauses.push("value LIKE ? ESCAPE '!'");
        params.push(EXTERNAL_REF_LIKE.into());
    }
    if let Some(after_id) = after_id {
        clauses.push("id > ?");
        params.push(after_id.into());
    }
    let where_sql =
        if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
    Some((where_sql, params))
}

/// The columns of `table` in the connection's database, `None` when there is no such table.
/// information_schema compares names without regard to case; table names are not so
/// compared on most servers, so only an exact match counts.
fn columns(conn: &mut Conn, location: &str, table: &str) -> Result<Option<Vec<String>>> {
    let rows: Vec<(String, String)> = conn
        .exec(
            "SELECT table_name, column_name FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position",
            (table,),
        )
        .map_err(|e| db_err(format!("cannot read the tables of {location}"), &e))?;
    let names: Vec<String> = rows.into_iter().filter(|(t, _)| t == table).map(|(_, c)| c).collect();
    Ok(if names.is_empty() { None } else { Some(names) })
}

fn task_scope_params(scope: &TaskScope) -> Vec<Value> {
    vec![
        Value::from(scope.dag_id.as_str()),
        Value::from(scope.run_id.as_str()),
        Value::from(scope.task_id.as_str()),
        Value::from(scope.map_index),
    ]
}

impl Reads for MysqlStore {
    fn task_instance_exists(&mut self, scope: &TaskScope, any_map_index: bool) -> Result<bool> {
        if !(self.fits("task_instance", "dag_id", &scope.dag_id)
            && self.fits("task_instance", "run_id", &scope.run_id)
            && self.fits("task_instance", "task_id", &scope.task_id))
        {
            return Ok(false);
        }
        let what = "cannot look up the task instance";
        let mut params: Vec<Value> =
            vec![scope.dag_id.as_str().into(), scope.task_id.as_str().into(), scope.run_id.as_str().into()];
        let sql = if any_map_index {
            "SELECT 1 FROM task_instance WHERE dag_id = ? AND task_id = ? AND run_id = ? LIMIT 1"
        } else {
            params.push(scope.map_index.into());
            "SELECT 1 FROM task_instance WHERE dag_id = ? AND task_id = ? AND run_id = ? AND map_index = ?"
        };
        Ok(self.first(what, sql, params, single_int)?.is_some())
    }

    fn task_instances_hint(
        &mut self,
        dag_id: &str,
        run_id: &str,
        task_id: &str,
        limit: u64,
    ) -> Result<TaskInstances> {
        if !(self.fits("task_instance", "dag_id", dag_id) && self.fits("task_instance", "run_id", run_id)) {
            return Ok(TaskInstances::default());
        }
        let what = "cannot look up the task instances";
        let run: Vec<Value> = vec![dag_id.into(), run_id.into()];
        let mut page = run.clone();
        page.push(limit.into());
        let task_ids = self.rows(
            what,
            "SELECT DISTINCT task_id FROM task_instance WHERE dag_id = ? AND run_id = ? ORDER BY task_id LIMIT ?",
            page,
            |row| Ok(Fields::new(row).text()),
        )?;
        let task_count = self
            .first(
                what,
                "SELECT count(DISTINCT task_id) FROM task_instance WHERE dag_id = ? AND run_id = ?",
                run,
                single_count,
            )?
            .unwrap_or(0);
        let map_indexes = if self.fits("task_instance", "task_id", task_id) {
            self.first(
                what,
                "SELECT count(*), min(map_index), max(map_index) FROM task_instance \
                 WHERE dag_id = ? AND task_id = ? AND run_id = ?",
                vec![dag_id.into(), task_id.into(), run_id.into()],
                |row| {
                    let mut f = Fields::new(row);
                    Ok((f.count()?, f.opt_int()?, f.opt_int()?))
                },
            )?
            .and_then(|(n, low, high)| Some((n, low?, high?)))
        } else {
            None
        };
        Ok(TaskInstances { task_ids, task_count, map_indexes })
    }

    fn dag_run_id(&mut self, dag_id: &str, run_id: &str) -> Result<Option<i64>> {
        if !(self.fits("dag_run", "dag_id", dag_id) && self.fits("dag_run", "run_id", run_id)) {
            return Ok(None);
        }
        self.first(
            "cannot look up the dag run",
            "SELECT id FROM dag_run WHERE dag_id = ? AND run_id = ?",
            vec![dag_id.into(), run_id.into()],
            single_int,
        )
    }

    fn find_asset(&mut self, selector: &AssetSelector) -> Result<Option<Asset>> {
        let what = "cannot look up the asset";
        match selector {
            AssetSelector::Id(id) => self.first(
                what,
                "SELECT a.id, a.name, a.uri, EXISTS (SELECT 1 FROM asset_active aa \
                 WHERE aa.name = a.name AND aa.uri = a.uri) FROM asset a WHERE a.id = ?",
                vec![Value::from(*id)],
                asset,
            ),
            AssetSelector::Name(name) => {
                if !fits_latin1(name) {
                    return Ok(None);
                }
                self.first(
                    what,
                    &format!("SELECT a.id, a.name, a.uri, 1 FROM asset a {ACTIVE_JOIN} WHERE a.name = ?"),
                    vec![name.as_str().into()],
                    asset,
                )
            }
            AssetSelector::Uri(uri) => {
                if !fits_latin1(uri) {
                    return Ok(None);
                }
                self.first(
                    what,
                    &format!("SELECT a.id, a.name, a.uri, 1 FROM asset a {ACTIVE_JOIN} WHERE a.uri = ?"),
                    vec![uri.as_str().into()],
                    asset,
                )
            }
        }
    }

    fn asset_id_by_name_uri(&mut self, name: &str, uri: &str) -> Result<Option<i64>> {
        if !(fits_latin1(name) && fits_latin1(uri)) {
            return Ok(None);
        }
        self.first(
            "cannot look up the asset",
            "SELECT id FROM asset WHERE name = ? AND uri = ? ORDER BY id DESC LIMIT 1",
            vec![name.into(), uri.into()],
            single_int,
        )
    }

    fn active_assets(&mut self, limit: u64) -> Result<Vec<Asset>> {
        self.rows(
            "cannot read the assets",
            &format!("SELECT a.id, a.name, a.uri, 1 FROM asset a {ACTIVE_JOIN} ORDER BY a.id LIMIT ?"),
            vec![limit.into()],
            asset,
        )
    }

    fn asset_exists_inactive(&mut self, selector: &AssetSelector) -> Result<bool> {
        let (sql, arg) = match selector {
            AssetSelector::Name(name) => {
                ("SELECT EXISTS (SELECT 1 FROM asset WHERE name = ?)", name.as_str())
            }
            AssetSelector::Uri(uri) => ("SELECT EXISTS (SELECT 1 FROM asset WHERE uri = ?)", uri.as_str()),
            AssetSelector::Id(_) => return Ok(false),
        };
        if !fits_latin1(arg) {
            return Ok(false);
        }
        let found = self.first("cannot look up the asset", sql, vec![arg.into()], single_int)?;
        Ok(found.unwrap_or(0) != 0)
    }

    fn task_entry(&mut self, scope: &TaskScope, key: &str) -> Result<Option<TaskEntry>> {
        if !(self.scope_fits(scope) && self.fits("task_state_store", "key", key)) {
            return Ok(None);
        }
        let mut params = task_scope_params(scope);
        params.push(key.into());
        self.first(
            "cannot read task_state_store",
            &format!(
                "SELECT {TASK_COLUMNS} FROM task_state_store \
                 WHERE dag_id = ? AND run_id = ? AND task_id = ? AND map_index = ? AND `key` = ?"
            ),
            params,
            task_entry,
        )
    }

    fn asset_entry(&mut self, asset: &Asset, key: &str) -> Result<Option<AssetEntry>> {
        if !self.fits("asset_state_store", "key", key) {
            return Ok(None);
        }
        self.first(
            "cannot read asset_state_store",
            &format!(
                "SELECT {ASSET_COLUMNS} FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id \
                 WHERE s.asset_id = ? AND s.`key` = ?"
            ),
            vec![asset.id.into(), key.into()],
            asset_entry,
        )
    }

    // Text sorts on the bytes (`CAST(… AS BINARY)`), the order SQLite and PostgreSQL's
    // `COLLATE "C"` give: Airflow's `_bin` collations pad with spaces when comparing, and a
    // metastore upgraded from 3.2 has its keys in the case-insensitive `utf8mb4_unicode_ci`.
    fn list_task(&mut self, filter: &TaskFilter, page: Page) -> Result<Vec<TaskEntry>> {
        let Some((where_sql, mut params)) =
            task_filter_where(filter, None, |c, v| self.fits("task_state_store", c, v))
        else {
            return Ok(Vec::new());
        };
        params.extend(page_params(page));
        self.rows(
            "cannot read task_state_store",
            &format!(
                "SELECT {TASK_COLUMNS} FROM task_state_store {where_sql} \
                 ORDER BY CAST(dag_id AS BINARY), CAST(run_id AS BINARY), CAST(task_id AS BINARY), map_index, \
                 CAST(`key` AS BINARY) LIMIT ? OFFSET ?"
            ),
            params,
            task_entry,
        )
    }

    fn list_asset(&mut self, filter: &AssetFilter, page: Page) -> Result<Vec<AssetEntry>> {
        let mut clauses = Vec::new();
        let mut params = Vec::new();
        if let Some(id) = filter.asset_id {
            clauses.push("s.asset_id = ?");
            params.push(Value::from(id));
        }
        if filter.external_only {
            clauses.push("s.value LIKE ? ESCAPE '!'");
            params.push(EXTERNAL_REF_LIKE.into());
        }
        let where_sql =
            if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
        params.extend(page_params(page));
        self.rows(
            "cannot read asset_state_store",
            &format!(
                "SELECT {ASSET_COLUMNS} FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id \
                 {where_sql} ORDER BY s.asset_id, CAST(s.`key` AS BINARY) LIMIT ? OFFSET ?"
            ),
            params,
            asset_entry,
        )
    }

    fn task_rows_after(
        &mut self,
        filter: &TaskFilter,
        after_id: i64,
        limit: u64,
    ) -> Result<Vec<(i64, TaskEntry)>> {
        let Some((where_sql, mut params)) =
            task_filter_where(filter, Some(after_id), |c, v| self.fits("task_state_store", c, v))
        else {
            return Ok(Vec::new());
        };
        params.push(Value::UInt(limit));
        self.rows(
            "cannot read task_state_store",
            &format!("SELECT {TASK_COLUMNS}, id FROM task_state_store {where_sql} ORDER BY id LIMIT ?"),
            params,
            |row| {
                let mut f = Fields::new(row);
                let entry = task_fields(&mut f)?;
                Ok((f.int()?, entry))
            },
        )
    }
}

impl Writes for MysqlStore {
    fn upsert_task(&mut self, w: &TaskWrite<'_>) -> Result<()> {
        // What the columns can hold is the same for a write and a restore.
        self.check_restore_task(w)?;
        let expires_at = w.expires_at.map_or(Value::NULL, time_param);
        // The duplicate key is Airflow's own unique key (task_state_store_uq), so a concurrent
        // Airflow worker writing the same key updates the same row instead of failing or
        // duplicating it. The new values are bound again rather than read with VALUES(),
        // which MySQL 8.0.20 deprecated and MariaDB's replacement syntax does not exist.
        self.write(
            "cannot write task_state_store",
            "INSERT INTO task_state_store \
                 (dag_run_id, task_id, map_index, `key`, dag_id, run_id, value, updated_at, expires_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE value = ?, updated_at = ?, expires_at = ?",
            vec![
                w.dag_run_id.into(),
                w.scope.task_id.as_str().into(),
                w.scope.map_index.into(),
                w.key.into(),
                w.scope.dag_id.as_str().into(),
                w.scope.run_id.as_str().into(),
                w.value.into(),
                time_param(w.updated_at),
                expires_at.clone(),
                w.value.into(),
                time_param(w.updated_at),
                expires_at,
            ],
            w.value,
        )
    }

    fn upsert_asset(&mut self, w: &AssetWrite<'_>) -> Result<()> {
        self.require("asset_state_store", "key", w.key)?;
        require_value_size("asset_state_store.value", w.value)?;
        require_storable_time("updated_at", w.updated_at)?;
        // An `api` write records no task, so the four writer columns are reset to NULL.
        self.write(
            "cannot write asset_state_store",
            "INSERT INTO asset_state_store \
                 (asset_id, `key`, value, updated_at, last_updated_by_kind, last_updated_by_dag_id, \
                  last_updated_by_run_id, last_updated_by_task_id, last_updated_by_map_index) \
             VALUES (?, ?, ?, ?, 'api', NULL, NULL, NULL, NULL) \
             ON DUPLICATE KEY UPDATE value = ?, updated_at = ?, last_updated_by_kind = 'api', \
                 last_updated_by_dag_id = NULL, last_updated_by_run_id = NULL, \
                 last_updated_by_task_id = NULL, last_updated_by_map_index = NULL",
            vec![
                w.asset_id.into(),
                w.key.into(),
                w.value.into(),
                time_param(w.updated_at),
                w.value.into(),
                time_param(w.updated_at),
            ],
            w.value,
        )
    }

    fn restore_task(&mut self, w: &TaskWrite<'_>) -> Result<()> {
        self.check_restore_task(w)?;
        let expires_at = w.expires_at.map_or(Value::NULL, time_param);
        let updated_at = time_param(w.updated_at);
        // MySQL applies the assignments left to right: updated_at, which the other conditions
        // read, is assigned last.
        self.write(
            "cannot restore into task_state_store",
            "INSERT INTO task_state_store \
                 (dag_run_id, task_id, map_index, `key`, dag_id, run_id, value, updated_at, expires_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE value = IF(updated_at <= ?, ?, value), \
                 expires_at = IF(updated_at <= ?, ?, expires_at), \
                 updated_at = IF(updated_at <= ?, ?, updated_at)",
            vec![
                w.dag_run_id.into(),
                w.scope.task_id.as_str().into(),
                w.scope.map_index.into(),
                w.key.into(),
                w.scope.dag_id.as_str().into(),
                w.scope.run_id.as_str().into(),
                w.value.into(),
                updated_at.clone(),
                expires_at.clone(),
                updated_at.clone(),
                w.value.into(),
                updated_at.clone(),
                expires_at,
                updated_at.clone(),
                updated_at,
            ],
            w.value,
        )
    }

    fn restore_asset(&mut self, w: &AssetRestore<'_>) -> Result<()> {
        self.check_restore_asset(w)?;
        let updated_at = time_param(w.updated_at);
        let writer = |v: &Option<String>| v.as_deref().map_or(Value::NULL, Value::from);
        let map_index = w.writer.map_index.map_or(Value::NULL, Value::from);
        let mut params = vec![
            w.asset_id.into(),
            w.key.into(),
            w.value.into(),
            updated_at.clone(),
            writer(&w.writer.kind),
            writer(&w.writer.dag_id),
            writer(&w.writer.run_id),
            writer(&w.writer.task_id),
            map_index.clone(),
        ];
        for value in [
            w.value.into(),
            writer(&w.writer.kind),
            writer(&w.writer.dag_id),
            writer(&w.writer.run_id),
            writer(&w.writer.task_id),
            map_index,
            updated_at.clone(),
        ] {
            params.push(updated_at.clone());
            params.push(value);
        }
        self.write(
            "cannot restore into asset_state_store",
            "INSERT INTO asset_state_store \
                 (asset_id, `key`, value, updated_at, last_updated_by_kind, last_updated_by_dag_id, \
                  last_updated_by_run_id, last_updated_by_task_id, last_updated_by_map_index) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE value = IF(updated_at <= ?, ?, value), \
                 last_updated_by_kind = IF(updated_at <= ?, ?, last_updated_by_kind), \
                 last_updated_by_dag_id = IF(updated_at <= ?, ?, last_updated_by_dag_id), \
                 last_updated_by_run_id = IF(updated_at <= ?, ?, last_updated_by_run_id), \
                 last_updated_by_task_id = IF(updated_at <= ?, ?, last_updated_by_task_id), \
                 last_updated_by_map_index = IF(updated_at <= ?, ?, last_updated_by_map_index), \
                 updated_at = IF(updated_at <= ?, ?, updated_at)",
            params,
            w.value,
        )
    }

    fn check_restore_task(&self, w: &TaskWrite<'_>) -> Result<()> {
        self.require("task_state_store", "dag_id", &w.scope.dag_id)?;
        self.require("task_state_store", "run_id", &w.scope.run_id)?;
        self.require("task_state_store", "task_id", &w.scope.task_id)?;
        self.require("task_state_store", "key", w.key)?;
        if i32::try_from(w.scope.map_index).is_err() {
            return Err(Error::Usage(format!(
                "map_index {} does not fit Airflow's MySQL column (INTEGER, at most {})",
                w.scope.map_index,
                i32::MAX
            )));
        }
        require_value_size("task_state_store.value", w.value)?;
        require_storable_time("updated_at", w.updated_at)?;
        if let Some(expires_at) = w.expires_at {
            require_storable_time("expires_at", expires_at)?;
        }
        Ok(())
    }

    fn check_restore_asset(&self, w: &AssetRestore<'_>) -> Result<()> {
        self.require("asset_state_store", "key", w.key)?;
        require_value_size("asset_state_store.value", w.value)?;
        require_storable_time("updated_at", w.updated_at)
    }

    fn begin(&mut self) -> Result<()> {
        let ctx = self.ctx("cannot begin a transaction");
        self.conn.query_drop("START TRANSACTION").map_err(|e| db_err(ctx, &e))
    }

    fn commit(&mut self) -> Result<()> {
        let ctx = self.ctx("cannot commit");
        self.conn.query_drop("COMMIT").map_err(|e| db_err(ctx, &e))
    }

    fn rollback(&mut self) -> Result<()> {
        let ctx = self.ctx("cannot roll back");
        self.conn.query_drop("ROLLBACK").map_err(|e| db_err(ctx, &e))
    }

    fn delete_task(&mut self, scope: &TaskScope, key: &str) -> Result<u64> {
        if !(self.scope_fits(scope) && self.fits("task_state_store", "key", key)) {
            return Ok(0);
        }
        let mut params = task_scope_params(scope);
        params.push(key.into());
        self.execute(
            "cannot delete from task_state_store",
            "DELETE FROM task_state_store \
             WHERE dag_id = ? AND run_id = ? AND task_id = ? AND map_index = ? AND `key` = ?",
            params,
        )
    }

    fn delete_asset(&mut self, asset_id: i64, key: &str) -> Result<u64> {
        if !self.fits("asset_state_store", "key", key) {
            return Ok(0);
        }
        self.execute(
            "cannot delete from asset_state_store",
            "DELETE FROM asset_state_store WHERE asset_id = ? AND `key` = ?",
            vec![asset_id.into(), key.into()],
        )
    }

    fn count_task_scope(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64> {
        if !self.scope_fits(scope) {
            return Ok(0);
        }
        let (sql, params) = task_scope_where(scope, all_map_indices);
        let found = self.first(
            "cannot read task_state_store",
            &format!("SELECT count(*) FROM task_state_store WHERE {sql}"),
            params,
            single_count,
        )?;
        Ok(found.unwrap_or(0))
    }

    fn clear_task(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64> {
        if !self.scope_fits(scope) {
            return Ok(0);
        }
        let (sql, params) = task_scope_where(scope, all_map_indices);
        self.execute(
            "cannot delete from task_state_store",
            &format!("DELETE FROM task_state_store WHERE {sql}"),
            params,
        )
    }

    fn count_asset_scope(&mut self, asset_id: i64) -> Result<u64> {
        let found = self.first(
            "cannot read asset_state_store",
            "SELECT count(*) FROM asset_state_store WHERE asset_id = ?",
            vec![asset_id.into()],
            single_count,
        )?;
        Ok(found.unwrap_or(0))
    }

    fn clear_asset(&mut self, asset_id: i64) -> Result<u64> {
        self.execute(
            "cannot delete from asset_state_store",
            "DELETE FROM asset_state_store WHERE asset_id = ?",
            vec![asset_id.into()],
        )
    }
}

impl Cleanup for MysqlStore {
    fn count_expired(&mut self, cutoff: Timestamp) -> Result<u64> {
        Ok(self
            .first(
                "cannot count expired rows",
                "SELECT count(*) FROM task_state_store WHERE expires_at < ?",
                vec![time_param(cutoff)],
                |row| Fields::new(row).count(),
            )?
            .unwrap_or(0))
    }

    fn expired_by_dag(&mut self, cutoff: Timestamp) -> Result<Vec<DagCount>> {
        self.rows(
            "cannot count expired rows",
            "SELECT dag_id, count(*) FROM task_state_store WHERE expires_at < ? GROUP BY dag_id ORDER BY CAST(dag_id AS BINARY)",
            vec![time_param(cutoff)],
            |row| {
                let mut f = Fields::new(row);
                Ok(DagCount { dag_id: f.text(), rows: f.count()? })
            },
        )
    }

    fn orphans_by_asset(&mut self) -> Result<Vec<AssetCount>> {
        self.rows(
            "cannot count orphaned asset rows",
            &format!(
                "SELECT s.asset_id, a.name, count(*) FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id \
                 WHERE {} GROUP BY s.asset_id, a.name ORDER BY s.asset_id",
                orphan_condition("s")
            ),
            Vec::new(),
            |row| {
                let mut f = Fields::new(row);
                Ok(AssetCount { asset_id: f.int()?, asset_name: f.opt_text(), rows: f.count()? })
            },
        )
    }

    fn orphan_sample(&mut self, limit: u64) -> Result<Vec<AssetEntry>> {
        self.rows(
            "cannot read orphaned asset rows",
            &format!(
                "SELECT {ASSET_COLUMNS} FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id \
                 WHERE {} ORDER BY s.asset_id, CAST(s.`key` AS BINARY) LIMIT ?",
                orphan_condition("s")
            ),
            vec![Value::UInt(limit)],
            asset_entry,
        )
    }

    fn begin_clean(&mut self, lock_timeout: std::time::Duration) -> Result<bool> {
        let database = self
            .first("cannot take the clean lock", "SELECT DATABASE()", Vec::new(), |row| {
                row.get_opt::<Option<String>, usize>(0).and_then(Result::ok).flatten().ok_or_else(String::new)
            })?
            .unwrap_or_default();
        let locked = self
            .first(
                "cannot take the clean lock",
                "SELECT GET_LOCK(?, 0)",
                vec![clean_lock_name(&database).into()],
                |row| {
                    row.get_opt::<Option<i64>, usize>(0)
                        .and_then(Result::ok)
                        .flatten()
                        .ok_or_else(String::new)
                },
            )?
            .is_some_and(|v| v == 1);
        // Both timeouts are whole seconds, at least 1: row locks (InnoDB) and table metadata.
        let seconds = lock_timeout.as_secs().max(1);
        self.execute(
            "cannot set the lock timeouts",
            "SET SESSION innodb_lock_wait_timeout = ?, SESSION lock_wait_timeout = ?",
            vec![seconds.into(), seconds.into()],
        )?;
        Ok(locked)
    }

    fn nth_expired_id(&mut self, cutoff: Timestamp, after_id: i64, n: u64) -> Result<Option<i64>> {
        self.first(
            "cannot find the next batch of expired rows",
            "SELECT id FROM task_state_store WHERE id > ? AND expires_at < ? ORDER BY id LIMIT 1 OFFSET ?",
            vec![after_id.into(), time_param(cutoff), Value::UInt(n.saturating_sub(1))],
            single_int,
        )
    }

    fn delete_expired_range(
        &mut self,
        cutoff: Timestamp,
        after_id: i64,
        up_to_id: Option<i64>,
    ) -> Result<u64> {
        // One statement is one transaction under autocommit.
        self.execute(
            "cannot delete expired rows",
            "DELETE FROM task_state_store WHERE id > ? AND id <= ? AND expires_at < ?",
            vec![after_id.into(), up_to_id.unwrap_or(i64::MAX).into(), time_param(cutoff)],
        )
    }

    fn delete_expired_batch(&mut self, cutoff: Timestamp, after_id: i64, n: u64) -> Result<Batch> {
        if !self.is_mariadb()? {
            // MySQL has no DELETE … RETURNING: find the batch's last id, then delete up to it.
            let last_id = self.nth_expired_id(cutoff, after_id, n)?;
            let deleted = self.delete_expired_range(cutoff, after_id, last_id)?;
            return Ok(Batch { deleted, last_id });
        }
        // One statement (one autocommitted transaction) instead of a SELECT of the batch's
        // last id and a DELETE up to it. The rows' ids come back in primary-key order and are
        // counted as they stream in, never held. EXPLAIN shows a `range` scan of PRIMARY from
        // `after_id`, like the SELECT it replaces, so batches still walk forward.
        // Measured on MariaDB 10.11 (1,000,000 rows, 500,012 expired, batch 10,000, 128 MB
        // buffer pool), interleaved on a shared 2-core machine: 7.20-7.62 s against 6.51-7.57 s
        // for the SELECT + DELETE pair and 4.28-4.76 s for one plain DELETE, so the saving is
        // within the noise. The rest of the gap is InnoDB's purge, not the statements: a
        // batch's purge runs while the next batches delete, whereas one DELETE's purge starts
        // after it returns. With purge held back by another session's open read view the same
        // run took 4.05-4.49 s against the floor's 3.87 s. Purge is server-wide
        // (`innodb_purge_*` are global) and holding a read view stalls it for every table, so
        // no session setting is used for it; `foreign_key_checks = 0` made no difference
        // (7.14-7.25 s) and is not set.
        let ctx = self.ctx("cannot delete expired rows");
        let result = self
            .conn
            .exec_iter(
                "DELETE FROM task_state_store WHERE id > ? AND expires_at < ? ORDER BY id LIMIT ? RETURNING id",
                Params::Positional(vec![after_id.into(), time_param(cutoff), Value::UInt(n)]),
            )
            .map_err(|e| db_err(&ctx, &e))?;
        let (mut deleted, mut last) = (0_u64, None);
        for row in result {
            let row = row.map_err(|e| db_err(&ctx, &e))?;
            last = Some(single_int(row).map_err(|e| Error::db(&ctx, e))?);
            deleted += 1;
        }
        // Fewer than `n` rows: no expired row was left after the last one, the run is complete.
        Ok(Batch { deleted, last_id: if deleted == n { last } else { None } })
    }

    fn expired_rows(
        &mut self,
        cutoff: Timestamp,
        after_id: i64,
        up_to_id: Option<i64>,
        limit: u64,
    ) -> Result<Vec<(i64, TaskEntry)>> {
        self.rows(
            "cannot read expired rows",
            &format!(
                "SELECT {TASK_COLUMNS}, id FROM task_state_store \
                 WHERE id > ? AND id <= ? AND expires_at < ? ORDER BY id LIMIT ?"
            ),
            vec![
                after_id.into(),
                up_to_id.unwrap_or(i64::MAX).into(),
                time_param(cutoff),
                Value::UInt(limit),
            ],
            |row| {
                let mut f = Fields::new(row);
                let entry = task_fields(&mut f)?;
                Ok((f.int()?, entry))
            },
        )
    }

    fn delete_orphan_row(&mut self, asset_id: i64, key: &str) -> Result<u64> {
        if !self.fits("asset_state_store", "key", key) {
            return Ok(0);
        }
        self.execute(
            "cannot delete orphaned asset rows",
            &format!(
                "DELETE FROM asset_state_store WHERE asset_id = ? AND `key` = ? AND {}",
                orphan_condition("asset_state_store")
            ),
            vec![asset_id.into(), key.into()],
        )
    }

    fn delete_orphans(&mut self, limit: Option<u64>) -> Result<u64> {
        // MySQL cannot select from the table a DELETE changes, but a single-table DELETE
        // takes a LIMIT of its own.
        let condition = orphan_condition("asset_state_store");
        match limit {
            Some(limit) => self.execute(
                "cannot delete orphaned asset rows",
                &format!("DELETE FROM asset_state_store WHERE {condition} LIMIT ?"),
                vec![limit.into()],
            ),
            None => self.execute(
                "cannot delete orphaned asset rows",
                &format!("DELETE FROM asset_state_store WHERE {condition}"),
                Vec::new(),
            ),
        }
    }
}

impl Stats for MysqlStore {
    fn task_groups(&mut self, now: Timestamp, soon: Timestamp, by_task: bool) -> Result<Vec<TaskGroup>> {
        let task = if by_task { "task_id" } else { "NULL" };
        let group = if by_task { "dag_id, task_id" } else { "dag_id" };
        let order = if by_task {
            "CAST(dag_id AS BINARY), CAST(task_id AS BINARY)"
        } else {
            "CAST(dag_id AS BINARY)"
        };
        self.rows(
            "cannot read task_state_store",
            &format!(
                "SELECT dag_id, {task}, count(*), coalesce(sum(LENGTH(value)), 0), \
                 coalesce(sum(expires_at < ?), 0), coalesce(sum(expires_at >= ? AND expires_at < ?), 0), \
                 coalesce(sum(expires_at IS NULL), 0), min(updated_at), max(updated_at) \
                 FROM task_state_store GROUP BY {group} ORDER BY {order}"
            ),
            vec![time_param(now), time_param(now), time_param(soon)],
            |row| {
                let mut f = Fields::new(row);
                Ok(TaskGroup {
                    dag_id: f.text(),
                    task_id: f.opt_text(),
                    rows: f.count()?,
                    value_bytes: f.count()?,
                    expired: f.count()?,
                    expiring_soon: f.count()?,
                    never_expiring: f.count()?,
                    oldest_update: f.time(),
                    newest_update: f.time(),
                })
            },
        )
    }

    fn asset_groups(&mut self) -> Result<Vec<AssetGroup>> {
        self.rows(
            "cannot read asset_state_store",
            "SELECT s.asset_id, a.name, count(*), coalesce(sum(LENGTH(s.value)), 0), min(s.updated_at), \
             max(s.updated_at) FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id \
             GROUP BY s.asset_id, a.name ORDER BY s.asset_id",
            Vec::new(),
            |row| {
                let mut f = Fields::new(row);
                Ok(AssetGroup {
                    asset_id: f.int()?,
                    asset_name: f.opt_text(),
                    rows: f.count()?,
                    value_bytes: f.count()?,
                    oldest_update: f.time(),
                    newest_update: f.time(),
                })
            },
        )
    }

    fn largest_values(&mut self, limit: u64) -> Result<Vec<LargeValue>> {
        let what = "cannot read the largest values";
        let mut found = self.rows(
            what,
            "SELECT dag_id, run_id, task_id, map_index, `key`, LENGTH(value) AS n FROM task_state_store \
             ORDER BY n DESC LIMIT ?",
            vec![limit.into()],
            |row| {
                let mut f = Fields::new(row);
                let (dag_id, run_id, task_id, map_index) = (f.text(), f.text(), f.text(), f.int()?);
                Ok(LargeValue {
                    scope: task_scope_label(&dag_id, &run_id, &task_id, map_index),
                    key: f.text(),
                    bytes: f.count()?,
                })
            },
        )?;
        found.extend(self.rows(
            what,
            "SELECT s.asset_id, a.name, s.`key`, LENGTH(s.value) AS n \
             FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id ORDER BY n DESC LIMIT ?",
            vec![limit.into()],
            |row| {
                let mut f = Fields::new(row);
                let (asset_id, name) = (f.int()?, f.opt_text());
                Ok(LargeValue {
                    scope: asset_scope_label(asset_id, name.as_deref()),
                    key: f.text(),
                    bytes: f.count()?,
                })
            },
        )?);
        Ok(largest_first(found, i64::try_from(limit).unwrap_or(i64::MAX)))
    }

    fn table_sizes(&mut self) -> Result<Vec<(String, u64)>> {
        // InnoDB's own estimate, as SHOW TABLE STATUS reports it.
        let sizes = self.rows(
            "cannot read the table sizes",
            "SELECT table_name, data_length + index_length FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name IN ('task_state_store', 'asset_state_store')",
            Vec::new(),
            |row| {
                let mut f = Fields::new(row);
                Ok((f.text(), f.count()?))
            },
        )?;
        Ok(STATE_TABLES
            .iter()
            .map(|t| ((*t).to_string(), sizes.iter().find(|(name, _)| name == t).map_or(0, |(_, n)| *n)))
            .collect())
    }
}

/// The longest user-level lock name MySQL 5.7+ accepts (MariaDB takes longer ones).
const LOCK_NAME_MAX: usize = 64;

/// The name of the clean lock of `database`: `state-store clean <database>` when it fits in
/// [`LOCK_NAME_MAX`] bytes (a database name alone may be 64 characters), otherwise
/// `state-store clean~<hash> <start of the name>`, where the hash is FNV-1a of the whole
/// name, so that every run on the same database takes the same lock on any build. The `~`
/// where the plain form has its space keeps the two forms from ever naming the same lock.
fn clean_lock_name(database: &str) -> String {
    const PREFIX: &str = "state-store clean";
    let plain = format!("{PREFIX} {database}");
    if plain.len() <= LOCK_NAME_MAX {
        return plain;
    }
    let hash = database
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let mut name = format!("{PREFIX}~{hash:016x} ");
    let room = LOCK_NAME_MAX - name.len();
    let cut = (0..=room.min(database.len())).rev().find(|&i| database.is_char_boundary(i)).unwrap_or(0);
    name.push_str(&database[..cut]);
    name
}

/// `dag_id, run_id, task_id, map_index` as the next columns of `f`.
fn task_place(f: &mut Fields) -> std::result::Result<Place, String> {
    Ok(Place::Task(TaskScope { dag_id: f.text(), run_id: f.text(), task_id: f.text(), map_index: f.int()? }))
}

impl MysqlStore {
    /// Rows of both tables whose `measure` (an SQL expression over the row's own columns,
    /// e.g. the key's length) exceeds `bound`, task rows first.
    fn over_bound(
        &mut self,
        what: &str,
        measure: &str,
        bound: u64,
        sample: u64,
        unit: &str,
    ) -> Result<Finding> {
        let tasks = Finding {
            count: self
                .first(
                    what,
                    &format!("SELECT count(*) FROM task_state_store t WHERE {measure} > ?"),
                    vec![Value::UInt(bound)],
                    single_count,
                )?
                .unwrap_or(0),
            sample: self.rows(
                what,
                &format!(
                    "SELECT t.dag_id, t.run_id, t.task_id, t.map_index, t.`key`, {measure} \
                     FROM task_state_store t WHERE {measure} > ? ORDER BY t.id LIMIT ?"
                ),
                vec![Value::UInt(bound), Value::UInt(sample)],
                |row| {
                    let mut f = Fields::new(row);
                    Ok(FoundRow {
                        place: task_place(&mut f)?,
                        key: f.text(),
                        detail: format!("{} {unit}", f.int()?),
                    })
                },
            )?,
        };
        let assets = Finding {
            count: self
                .first(
                    what,
                    &format!("SELECT count(*) FROM asset_state_store t WHERE {measure} > ?"),
                    vec![Value::UInt(bound)],
                    single_count,
                )?
                .unwrap_or(0),
            sample: self.rows(
                what,
                &format!(
                    "SELECT t.asset_id, a.name, t.`key`, {measure} \
                     FROM asset_state_store t LEFT JOIN asset a ON a.id = t.asset_id \
                     WHERE {measure} > ? ORDER BY t.asset_id, t.`key` LIMIT ?"
                ),
                vec![Value::UInt(bound), Value::UInt(sample)],
                |row| {
                    let mut f = Fields::new(row);
                    Ok(FoundRow {
                        place: Place::Asset { asset_id: f.int()?, asset_name: f.opt_text() },
                        key: f.text(),
                        detail: format!("{} {unit}", f.int()?),
                    })
                },
            )?,
        };
        Ok(tasks.and(assets, sample))
    }
}

impl Diagnose for MysqlStore {
    fn mismatched_dag_runs(&mut self, sample: u64) -> Result<Finding> {
        let what = "cannot compare task rows with their dag runs";
        let from = "FROM task_state_store t JOIN dag_run d ON d.id = t.dag_run_id \
                    WHERE t.dag_id <> d.dag_id OR t.run_id <> d.run_id";
        Ok(Finding {
            count: self.first(what, &format!("SELECT count(*) {from}"), Vec::new(), single_count)?.unwrap_or(0),
            sample: self.rows(
                what,
                &format!(
                    "SELECT t.dag_id, t.run_id, t.task_id, t.map_index, t.`key`, t.dag_run_id, d.dag_id, d.run_id \
                     {from} ORDER BY t.id LIMIT ?"
                ),
                vec![Value::UInt(sample)],
                |row| {
                    let mut f = Fields::new(row);
                    let place = task_place(&mut f)?;
                    let key = f.text();
                    let detail =
                        format!("dag_run {} is dag_id={} run_id={}", f.int()?, quote(&f.text()), quote(&f.text()));
                    Ok(FoundRow { place, key, detail })
                },
            )?,
        })
    }

    fn task_rows_without_dag_run(&mut self, sample: u64) -> Result<Finding> {
        let what = "cannot look for task rows without a dag run";
        let from =
            "FROM task_state_store t WHERE NOT EXISTS (SELECT 1 FROM dag_run d WHERE d.id = t.dag_run_id)";
        Ok(Finding {
            count: self
                .first(what, &format!("SELECT count(*) {from}"), Vec::new(), single_count)?
                .unwrap_or(0),
            sample: self.rows(
                what,
                &format!(
                    "SELECT t.dag_id, t.run_id, t.task_id, t.map_index, t.`key`, t.dag_run_id \
                     {from} ORDER BY t.id LIMIT ?"
                ),
                vec![Value::UInt(sample)],
                |row| {
                    let mut f = Fields::new(row);
                    let place = task_place(&mut f)?;
                    let key = f.text();
                    Ok(FoundRow { place, key, detail: format!("dag_run_id {} does not exist", f.int()?) })
                },
            )?,
        })
    }

    fn asset_rows_without_asset(&mut self, sample: u64) -> Result<Finding> {
        let what = "cannot look for asset rows without an asset";
        let from =
            "FROM asset_state_store s WHERE NOT EXISTS (SELECT 1 FROM asset a WHERE a.id = s.asset_id)";
        Ok(Finding {
            count: self
                .first(what, &format!("SELECT count(*) {from}"), Vec::new(), single_count)?
                .unwrap_or(0),
            sample: self.rows(
                what,
                &format!("SELECT s.asset_id, s.`key` {from} ORDER BY s.asset_id, s.`key` LIMIT ?"),
                vec![Value::UInt(sample)],
                |row| {
                    let mut f = Fields::new(row);
                    let asset_id = f.int()?;
                    Ok(FoundRow {
                        place: Place::Asset { asset_id, asset_name: None },
                        key: f.text(),
                        detail: format!("asset id {asset_id} does not exist"),
                    })
                },
            )?,
        })
    }

    fn long_keys(&mut self, max_chars: u64, sample: u64) -> Result<Finding> {
        self.over_bound("cannot measure the keys", "CHAR_LENGTH(t.`key`)", max_chars, sample, "characters")
    }

    fn large_values(&mut self, max_bytes: u64, sample: u64) -> Result<Finding> {
        // LENGTH() counts bytes.
        self.over_bound("cannot measure the values", "LENGTH(t.value)", max_bytes, sample, "bytes")
    }

    fn asset_rows_after(&mut self, after: Option<(i64, &str)>, limit: u64) -> Result<Vec<AssetEntry>> {
        // The key comparison and the ORDER BY both use the column's own collation, so the
        // pages follow one order.
        let (where_sql, mut params) = match after {
            None => (String::new(), Vec::new()),
            Some((asset_id, key)) => (
                "WHERE s.asset_id > ? OR (s.asset_id = ? AND s.`key` > ?)".to_string(),
                vec![Value::from(asset_id), Value::from(asset_id), Value::from(key)],
            ),
        };
        params.push(Value::UInt(limit));
        self.rows(
            "cannot read asset_state_store",
            &format!(
                "SELECT {ASSET_COLUMNS} FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id \
                 {where_sql} ORDER BY s.asset_id, s.`key` LIMIT ?"
            ),
            params,
            asset_entry,
        )
    }
}

/// The WHERE clause of a task scope; all map indices when `all_map_indices`.
fn task_scope_where(scope: &TaskScope, all_map_indices: bool) -> (&'static str, Vec<Value>) {
    let mut params = task_scope_params(scope);
    if all_map_indices {
        params.pop();
        ("dag_id = ? AND run_id = ? AND task_id = ?", params)
    } else {
        ("dag_id = ? AND run_id = ? AND task_id = ? AND map_index = ?", params)
    }
}

// ---------------------------------------------------------------------------------------------
// The sandbox

/// A sandbox inside an existing, empty database: never an existing Airflow metastore.
pub(crate) struct MysqlSandbox {
    conn: Conn,
    location: String,
}

impl MysqlSandbox {
    pub(crate) fn open(url: &DbUrl) -> Result<Self> {
        let (conn, location) = connect(url)?;
        Ok(MysqlSandbox { conn, location })
    }

    /// Which of `names` exist in the connection's database (exact, case-sensitive names).
    fn existing_tables(&mut self, names: &[&str]) -> Result<Vec<String>> {
        let found: Vec<String> = self
            .conn
            .exec(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()",
                Params::Empty,
            )
            .map_err(|e| db_err(format!("cannot read {}", self.location), &e))?;
        Ok(found.into_iter().filter(|t| names.contains(&t.as_str())).collect())
    }

    fn require_marker(&mut self) -> Result<()> {
        if self.existing_tables(&[schema::SANDBOX_MARKER_TABLE])?.is_empty() {
            Err(Error::Usage(format!(
                "{} was not created by `state-store sandbox create`; sandbox commands never change a real metastore",
                self.location
            )))
        } else {
            Ok(())
        }
    }

    /// MariaDB 10.7 and later have a UUID column type; MySQL has none.
    fn has_uuid_type(&mut self) -> Result<bool> {
        let version: Option<String> = self
            .conn
            .query_first("SELECT VERSION()")
            .map_err(|e| db_err(format!("cannot read {}", self.location), &e))?;
        Ok(version.as_deref().is_some_and(mariadb_with_uuid))
    }

    fn create_tables(&mut self, ddl: &[String], created: &mut Vec<String>) -> Result<()> {
        let ctx = format!("cannot create the tables in {}", self.location);
        // Airflow refuses to migrate a MySQL server where this is off (the first TIMESTAMP
        // column would silently get DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP).
        self.conn
            .query_drop("SET SESSION explicit_defaults_for_timestamp = 1")
            .map_err(|e| db_err(&ctx, &e))?;
        for statement in ddl {
            self.conn.query_drop(statement).map_err(|e| db_err(&ctx, &e))?;
            if let Some(name) = created_table(statement) {
                created.push(name.to_string());
            }
        }
        let marker = schema::SANDBOX_MARKER_TABLE;
        self.conn
            .query_drop(format!(
                "CREATE TABLE {marker} (created_at TIMESTAMP(6) NOT NULL) \
                 ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci"
            ))
            .map_err(|e| db_err(&ctx, &e))?;
        created.push(marker.to_string());
        let mut tx = self.conn.start_transaction(TxOpts::default()).map_err(|e| db_err(&ctx, &e))?;
        tx.exec_drop(
            "INSERT INTO alembic_version (version_num) VALUES (?)",
            (schema::AIRFLOW_33_ALEMBIC_REVISION,),
        )
        .map_err(|e| db_err(&ctx, &e))?;
        tx.exec_drop(
            format!("INSERT INTO {marker} (created_at) VALUES (?)"),
            (Timestamp::now().to_sqlite_text(),),
        )
        .map_err(|e| db_err(&ctx, &e))?;
        tx.commit().map_err(|e| db_err(&ctx, &e))
    }
}

/// `VERSION()` of MariaDB 10.7 or later (`10.11.6-MariaDB-0+deb12u1`, `11.4.2-MariaDB`).
fn mariadb_with_uuid(version: &str) -> bool {
    if !version.contains("MariaDB") {
        return false;
    }
    let mut parts = version.split(|c: char| !c.is_ascii_digit()).filter(|p| !p.is_empty());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor) >= (10, 7)
}

/// The table a `CREATE TABLE name (…` statement creates.
fn created_table(statement: &str) -> Option<&str> {
    statement.strip_prefix("CREATE TABLE ")?.split_whitespace().next()
}

impl super::Sandbox for MysqlSandbox {
    fn create(&mut self) -> Result<()> {
        let mut checked: Vec<&str> = schema::AIRFLOW_TABLES.to_vec();
        checked.push(schema::SANDBOX_MARKER_TABLE);
        let existing = self.existing_tables(&checked)?;
        if !existing.is_empty() {
            return Err(Error::Usage(format!(
                "{} already has Airflow tables ({}); a sandbox starts empty",
                self.location,
                existing.join(", ")
            )));
        }
        let (native, fallback) = schema::MYSQL_UUID_FALLBACK;
        let uuid = self.has_uuid_type()?;
        let ddl: Vec<String> = schema::MYSQL_DDL
            .iter()
            .map(|s| if uuid { (*s).to_string() } else { s.replace(native, fallback) })
            .collect();
        // MySQL commits every CREATE TABLE at once, so a failure half-way is undone by hand:
        // nothing is left that a second `sandbox create` would refuse.
        let mut created = Vec::new();
        let result = self.create_tables(&ddl, &mut created);
        if result.is_err() {
            for table in created.iter().rev() {
                let _ = self.conn.query_drop(format!("DROP TABLE IF EXISTS {table}"));
            }
        }
        result
    }

    fn add_dag_run(&mut self, dag_id: &str, run_id: &str) -> Result<i64> {
        self.require_marker()?;
        require_utf8mb3("dag_id", dag_id)?;
        require_utf8mb3("run_id", run_id)?;
        let now = Timestamp::now().to_sqlite_text();
        let ctx = format!("cannot add the dag run to {}", self.location);
        self.conn
            .exec_drop(
                "INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, queued_at, start_date, created_at, updated_at) \
                 VALUES (?, ?, 'manual', 'running', ?, ?, ?, ?, ?)",
                (dag_id, run_id, &now, &now, &now, &now, &now),
            )
            .map_err(|e| db_err(&ctx, &e))?;
        i64::try_from(self.conn.last_insert_id()).map_err(|e| Error::db(&ctx, e))
    }

    fn add_task_instance(&mut self, dag_id: &str, run_id: &str, task_id: &str, map_index: i64) -> Result<()> {
        self.require_marker()?;
        require_utf8mb3("dag_id", dag_id)?;
        require_utf8mb3("run_id", run_id)?;
        require_utf8mb3("task_id", task_id)?;
        // As the scheduler creates it: no state yet, try 0, the default pool. The key is a
        // random uuid without dashes, which both MariaDB's UUID type and CHAR(32) take.
        self.conn
            .exec_drop(
                "INSERT INTO task_instance (id, task_id, dag_id, run_id, map_index, try_number, max_tries, \
                 pool, pool_slots, queue, priority_weight, operator, updated_at) \
                 VALUES (REPLACE(UUID(), '-', ''), ?, ?, ?, ?, 0, 0, 'default_pool', 1, 'default', 1, \
                 'PythonOperator', ?)",
                (task_id, dag_id, run_id, map_index, Timestamp::now().to_sqlite_text()),
            )
            .map_err(|e| db_err(format!("cannot add the task instance to {}", self.location), &e))
    }

    fn add_asset(&mut self, name: &str, uri: &str, active: bool) -> Result<i64> {
        self.require_marker()?;
        require_latin1("asset name", name)?;
        require_latin1("asset uri", uri)?;
        let ctx = format!("cannot add the asset to {}", self.location);
        let now = Timestamp::now().to_sqlite_text();
        let mut tx = self.conn.start_transaction(TxOpts::default()).map_err(|e| db_err(&ctx, &e))?;
        tx.exec_drop(
            "INSERT INTO asset (name, uri, `group`, extra, created_at, updated_at) VALUES (?, ?, 'asset', '{}', ?, ?)",
            (name, uri, &now, &now),
        )
        .map_err(|e| db_err(&ctx, &e))?;
        let id = tx.last_insert_id().unwrap_or(0);
        if active {
            tx.exec_drop("INSERT INTO asset_active (name, uri) VALUES (?, ?)", (name, uri))
                .map_err(|e| db_err(&ctx, &e))?;
        }
        tx.commit().map_err(|e| db_err(&ctx, &e))?;
        i64::try_from(id).map_err(|e| Error::db(&ctx, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(url: &str) -> Result<ConnectPlan> {
        ConnectPlan::from_url(&DbUrl::parse(url).expect("valid URL"))
    }

    fn tls(url: &str) -> Option<Tls> {
        plan(url).expect("valid plan").tls
    }

    #[test]
    fn url_parts_become_connect_options() {
        let p =
            plan("mysql+mysqldb://air%40flow:p%2Fss@db.example:3307/airflow?charset=utf8mb4").expect("plan");
        assert_eq!(p.endpoint, Endpoint::Tcp { host: "db.example".into(), port: 3307 });
        assert_eq!(p.user.as_deref(), Some("air@flow"));
        assert_eq!(p.password.as_deref(), Some("p/ss"));
        assert_eq!(p.database, "airflow");
        assert_eq!(p.tls, None);
        assert_eq!(p.connect_timeout, CONNECT_TIMEOUT);
        assert_eq!(p.location(), "MySQL database airflow on db.example:3307");
        assert!(!format!("{p:?}").contains("p/ss"));
    }

    #[test]
    fn defaults_are_localhost_3306() {
        let p = plan("mariadb://root@/airflow").expect("plan");
        assert_eq!(p.endpoint, Endpoint::Tcp { host: "localhost".into(), port: 3306 });
        assert_eq!(p.password, None);
        let p = plan("mysql://u@[::1]/airflow").expect("plan");
        assert_eq!(p.location(), "MySQL database airflow on [::1]:3306");
    }

    #[test]
    fn unix_socket_wins_over_host() {
        let p =
            plan("mysql+pymysql://u:p@localhost/airflow?unix_socket=/run/mysqld/mysqld.sock&charset=utf8mb4")
                .expect("plan");
        assert_eq!(p.endpoint, Endpoint::Socket(PathBuf::from("/run/mysqld/mysqld.sock")));
        assert_eq!(p.location(), "MySQL database airflow on socket /run/mysqld/mysqld.sock");
    }

    #[test]
    fn a_database_is_required() {
        for url in ["mysql://u:secret@db", "mysql://u:secret@db/", "mysql://u:secret@db/?charset=utf8mb4"] {
            let err = plan(url).expect_err(url);
            assert!(matches!(err, Error::Config(_)), "{url}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }

    #[test]
    fn connect_timeout_is_bounded_and_overridable() {
        assert_eq!(
            plan("mysql://db/a?connect_timeout=3").expect("plan").connect_timeout,
            Duration::from_secs(3)
        );
        assert!(matches!(plan("mysql://db/a?connect_timeout=0"), Err(Error::Config(_))));
        assert!(matches!(plan("mysql://db/a?connect_timeout=soon"), Err(Error::Config(_))));
    }

    #[test]
    fn ssl_options_as_sqlalchemy_users_write_them() {
        assert_eq!(tls("mysql://db/a"), None);
        assert_eq!(tls("mysql://db/a?ssl_mode=DISABLED"), None);
        assert_eq!(tls("mysql://db/a?ssl_mode=preferred"), None);
        assert_eq!(tls("mysql://db/a?ssl=false"), None);
        assert_eq!(tls("mysql://db/a?ssl=true&ssl_disabled=true"), None);
        let unverified = Some(Tls { ca: None, verify_ca: false, verify_identity: false });
        assert_eq!(tls("mysql://db/a?ssl_mode=REQUIRED"), unverified);
        assert_eq!(tls("mysql://db/a?ssl=true"), unverified);
        assert_eq!(tls("mysql://db/a?ssl=1"), unverified);
        assert_eq!(
            tls("mysql://db/a?ssl_mode=VERIFY_CA"),
            Some(Tls { ca: None, verify_ca: true, verify_identity: false })
        );
        assert_eq!(
            tls("mysql://db/a?ssl_mode=verify_identity"),
            Some(Tls { ca: None, verify_ca: true, verify_identity: true })
        );
        let ca = Some(PathBuf::from("/etc/ca.pem"));
        assert_eq!(
            tls("mysql://db/a?ssl_ca=/etc/ca.pem"),
            Some(Tls { ca: ca.clone(), verify_ca: true, verify_identity: true })
        );
        assert_eq!(
            tls("mysql://db/a?ssl_ca=/etc/ca.pem&ssl_check_hostname=false"),
            Some(Tls { ca: ca.clone(), verify_ca: true, verify_identity: false })
        );
        assert_eq!(
            tls("mysql://db/a?ssl_mode=REQUIRED&ssl_ca=/etc/ca.pem"),
            Some(Tls { ca, verify_ca: true, verify_identity: false })
        );
        assert_eq!(
            tls("mysql://db/a?ssl_verify_cert=true"),
            Some(Tls { ca: None, verify_ca: true, verify_identity: false })
        );
    }

    #[test]
    fn unsupported_or_malformed_ssl_options_are_refused() {
        for url in [
            "mysql://u:secret@db/a?ssl_cert=/c.pem&ssl_key=/k.pem",
            "mysql://u:secret@db/a?ssl_capath=/etc/ssl",
            "mysql://u:secret@db/a?ssl_mode=SOMETIMES",
            "mysql://u:secret@db/a?ssl=maybe",
        ] {
            let err = plan(url).expect_err(url);
            assert!(matches!(err, Error::Config(_)), "{url}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }

    fn ts(text: &str) -> Timestamp {
        Timestamp::parse_rfc3339(text).expect("timestamp")
    }

    #[test]
    fn timestamp_range_is_mysqls() {
        assert!(require_storable_time("expires_at", ts("2038-01-19T03:14:07.999999Z")).is_ok());
        assert!(require_storable_time("expires_at", ts("1970-01-01T00:00:01Z")).is_ok());
        let late = require_storable_time("expires_at", ts("2038-01-19T03:14:08Z")).expect_err("too late");
        assert!(matches!(late, Error::Usage(_)));
        assert!(late.to_string().contains("MySQL TIMESTAMP ends at 2038-01-19 03:14:07 UTC"), "{late}");
        let early =
            require_storable_time("expires_at", ts("1970-01-01T00:00:00.999999Z")).expect_err("too early");
        assert!(matches!(early, Error::Usage(_)));
        assert_eq!(TIMESTAMP_LAST_MICROS, ts("2038-01-19T03:14:07.999999Z").micros());
    }

    #[test]
    fn utf8mb3_holds_the_basic_multilingual_plane_only() {
        assert!(fits_utf8mb3("plain ascii/key"));
        assert!(fits_utf8mb3("한국어 ключ €\u{FFFF}"));
        assert!(!fits_utf8mb3("rocket 🚀"));
        assert!(!fits_utf8mb3("\u{10000}"));
        let err = require_utf8mb3("key", "🚀").expect_err("refused");
        assert!(matches!(err, Error::Usage(_)));
        assert!(err.to_string().starts_with("key "), "{err}");
    }

    #[test]
    fn latin1_is_windows_1252() {
        assert!(fits_latin1("s3://bucket/café"));
        assert!(fits_latin1("€‚ƒ„…†‡ˆ‰Š‹ŒŽ‘’“”•–—˜™š›œžŸ"));
        assert!(fits_latin1("\u{81}\u{8D}\u{8F}\u{90}\u{9D}\u{A0}ÿ"));
        assert!(!fits_latin1("\u{80}"));
        assert!(!fits_latin1("\u{9F}"));
        assert!(!fits_latin1("ā"));
        assert!(!fits_latin1("주문"));
        assert!(!fits_latin1("🚀"));
        // The full repertoire, as MariaDB 10.11 converts it: 256 characters.
        let count =
            (0..=0x10FFFF_u32).filter_map(char::from_u32).filter(|c| fits_latin1(&c.to_string())).count();
        assert_eq!(count, 256);
    }

    #[test]
    fn value_size_is_mediumtext() {
        assert!(require_value_size("v", &"x".repeat(MEDIUMTEXT_BYTES)).is_ok());
        assert!(matches!(require_value_size("v", &"x".repeat(MEDIUMTEXT_BYTES + 1)), Err(Error::Usage(_))));
    }

    #[test]
    fn clean_lock_names_fit_mysqls_64_characters() {
        assert_eq!(clean_lock_name("airflow"), "state-store clean airflow");
        let fits = "d".repeat(LOCK_NAME_MAX - "state-store clean ".len());
        assert_eq!(clean_lock_name(&fits), format!("state-store clean {fits}"));
        // The longest database names, ASCII and multi-byte, and names that differ only at the end.
        let long_a = format!("{}a", "d".repeat(63));
        let long_b = format!("{}b", "d".repeat(63));
        let wide = "데".repeat(64);
        for name in [&format!("{fits}x"), &long_a, &long_b, &wide] {
            let lock = clean_lock_name(name);
            assert!(lock.len() <= LOCK_NAME_MAX, "{lock}: {} bytes", lock.len());
            assert!(lock.starts_with("state-store clean~"), "{lock}");
            // Stable: the same name always gives the same lock.
            assert_eq!(lock, clean_lock_name(name));
        }
        assert_ne!(clean_lock_name(&long_a), clean_lock_name(&long_b));
        // FNV-1a is fixed, so the name is the same across builds and runs.
        assert_eq!(
            clean_lock_name(&long_a),
            "state-store clean~de613e777e6aa0a6 ddddddddddddddddddddddddddddd"
        );
    }

    #[test]
    fn uuid_type_only_on_mariadb_10_7_and_later() {
        assert!(mariadb_with_uuid("10.11.19-MariaDB-0+deb12u1"));
        assert!(mariadb_with_uuid("11.4.2-MariaDB"));
        assert!(mariadb_with_uuid("10.7.1-MariaDB-log"));
        assert!(!mariadb_with_uuid("10.6.16-MariaDB"));
        assert!(!mariadb_with_uuid("8.0.36"));
        assert!(!mariadb_with_uuid("8.4.0-0ubuntu0.24.04.1"));
    }

    #[test]
    fn the_ddl_falls_back_to_char32_uuids() {
        let (native, fallback) = schema::MYSQL_UUID_FALLBACK;
        let replaced: Vec<String> = schema::MYSQL_DDL.iter().map(|s| s.replace(native, fallback)).collect();
        assert_eq!(schema::MYSQL_DDL.iter().map(|s| s.matches(native).count()).sum::<usize>(), 4);
        assert!(replaced.iter().all(|s| !s.contains(native)));
        let mut expected = vec!["log_template", "backfill", "dag_version"];
        expected.extend(schema::AIRFLOW_TABLES.iter().filter(|t| **t != "task_instance"));
        let ti = expected.iter().position(|t| *t == "asset_active").map_or(0, |i| i + 1);
        expected.splice(ti..ti, ["`trigger`", "task_instance"]);
        assert_eq!(schema::MYSQL_DDL.iter().filter_map(|s| created_table(s)).collect::<Vec<_>>(), expected);
    }
}
