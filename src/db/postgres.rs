//! PostgreSQL, Airflow's most common production metastore.
//!
//! Every connection is set up the way Airflow's own is used: session time zone UTC, and, when
//! `[database] sql_alchemy_schema` names a schema, a `search_path` of that schema alone (Airflow
//! qualifies every table with it, so nothing may resolve anywhere else). Timestamps travel in
//! PostgreSQL's binary form, an integer count of microseconds, so reads and writes are exact to
//! the microsecond with no text or floating-point step in between. Text sort keys use
//! `COLLATE "C"`, byte order, which for UTF-8 is the order SQLite gives the same rows.
//!
//! The connection takes the libpq parameters that Airflow users put in the URL's query
//! (`sslmode`, `sslrootcert`, `host=/socket/dir`, `connect_timeout`, …) with libpq's meaning;
//! a parameter this tool does not understand is refused rather than silently dropped, since
//! dropping one such as `sslmode` could weaken the connection.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode};
use postgres::config::{SslMode, TargetSessionAttrs};
use postgres::types::{ToSql, Type};
use postgres::{Client, Row, Statement};
use postgres_openssl::MakeTlsConnector;

use super::{
    Access, AssetCount, AssetGroup, AssetRestore, AssetWrite, Batch, Cleanup, DagCount, Diagnose, Finding,
    FoundRow, LargeValue, Place, Reads, STATE_TABLES, SchemaFinding, SchemaProblem, Stats, TaskGroup,
    TaskInstances, TaskWrite, Writes, asset_scope_label, diagnose_schema, largest_first, orphan_condition,
    schema, task_scope_label, unsigned,
};
use crate::error::{Error, Result};
use crate::model::{
    Asset, AssetEntry, AssetFilter, AssetSelector, EXTERNAL_REF_LIKE, Page, StoredTime, TaskEntry,
    TaskFilter, TaskScope,
};
use crate::text::quote;
use crate::time::Timestamp;
use crate::url::DbUrl;

/// Without `connect_timeout` in the URL libpq waits for as long as the kernel does (minutes);
/// a cron job against a server that is down must fail fast instead.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// libpq's floor for `connect_timeout`.
const MIN_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const DEFAULT_PORT: u16 = 5432;
/// Where libpq looks for the server's socket when the URL names no host: Debian's build (the
/// one in Airflow's images and psycopg's wheels) uses the first, upstream PostgreSQL the second.
const DEFAULT_SOCKET_DIRS: &[&str] = &["/var/run/postgresql", "/tmp"];
/// PostgreSQL truncates longer identifiers (NAMEDATALEN - 1 bytes).
const MAX_IDENTIFIER_BYTES: usize = 63;

// ---------------------------------------------------------------- connection options

/// libpq's `sslmode`, whose default is `prefer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TlsMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl TlsMode {
    fn parse(text: &str) -> Option<TlsMode> {
        Some(match text {
            "disable" => TlsMode::Disable,
            "allow" => TlsMode::Allow,
            "prefer" => TlsMode::Prefer,
            "require" => TlsMode::Require,
            "verify-ca" => TlsMode::VerifyCa,
            "verify-full" => TlsMode::VerifyFull,
            _ => return None,
        })
    }
}

/// One place to reach the server.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Endpoint {
    Tcp {
        host: String,
        port: u16,
    },
    /// A directory holding the socket `.s.PGSQL.<port>`, as libpq takes it.
    Socket {
        dir: PathBuf,
        port: u16,
    },
}

impl Endpoint {
    fn describe(&self) -> String {
        match self {
            Endpoint::Tcp { host, port } if host.contains(':') => format!("[{host}]:{port}"),
            Endpoint::Tcp { host, port } => format!("{host}:{port}"),
            Endpoint::Socket { dir, port } => format!("{}/.s.PGSQL.{port}", dir.display()),
        }
    }
}

/// Everything the URL says about the connection, checked before any socket is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConnectOptions {
    endpoints: Vec<Endpoint>,
    user: Option<String>,
    password: Option<String>,
    dbname: Option<String>,
    tls: TlsMode,
    /// `sslrootcert`: a file, or `system` for the system's trusted roots.
    root_cert: Option<String>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
    connect_timeout: Duration,
    application_name: String,
    options: Option<String>,
    read_write_only: bool,
    keepalives: Option<bool>,
    keepalives_idle: Option<Duration>,
    keepalives_interval: Option<Duration>,
    keepalives_count: Option<u32>,
    tcp_user_timeout: Option<Duration>,
}

/// The query keys understood here, for the message that refuses any other.
const KNOWN_KEYS: &[&str] = &[
    "user",
    "password",
    "dbname",
    "host",
    "port",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "connect_timeout",
    "application_name",
    "options",
    "target_session_attrs",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "client_encoding",
    "gssencmode",
];

fn config_error(url: &DbUrl, problem: &str) -> Error {
    Error::Config(format!("[database] sql_alchemy_conn {}: {problem}", url.redacted()))
}

/// A non-negative whole number of seconds, as libpq's integer options take it.
fn seconds(url: &DbUrl, key: &str, text: &str) -> Result<i64> {
    text.trim()
        .parse::<i64>()
        .map_err(|_| config_error(url, &format!("{key}={text} is not a whole number of seconds")))
}

impl ConnectOptions {
    fn from_url(url: &DbUrl) -> Result<ConnectOptions> {
        for (key, _) in &url.query {
            if !KNOWN_KEYS.contains(&key.as_str()) {
                return Err(config_error(
                    url,
                    &format!(
                        "unsupported connection parameter \"{key}\" (state-store understands {})",
                        KNOWN_KEYS.join(", ")
                    ),
                ));
            }
        }
        let endpoints = endpoints(url)?;
        let tls = match url.query_value("sslmode") {
            None => TlsMode::Prefer,
            Some(text) => TlsMode::parse(text).ok_or_else(|| {
                config_error(
                    url,
                    &format!(
                        "sslmode={text} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                    ),
                )
            })?,
        };
        let connect_timeout = match url.query_value("connect_timeout") {
            None => DEFAULT_CONNECT_TIMEOUT,
            // libpq waits forever for zero or less; a bounded wait is the point here.
            Some(text) => match seconds(url, "connect_timeout", text)? {
                n if n <= 0 => DEFAULT_CONNECT_TIMEOUT,
                n => Duration::from_secs(n.unsigned_abs()).max(MIN_CONNECT_TIMEOUT),
            },
        };
        let read_write_only = match url.query_value("target_session_attrs") {
            None | Some("any") => false,
            Some("read-write") => true,
            Some(other) => {
                return Err(config_error(
                    url,
                    &format!("target_session_attrs={other} is not supported (use any or read-write)"),
                ));
            }
        };
        if let Some(encoding) = url.query_value("client_encoding") {
            // The driver always talks UTF-8; any other encoding would change what is stored.
            if !matches!(encoding.to_ascii_lowercase().replace(['-', '_'], "").as_str(), "utf8" | "unicode") {
                return Err(config_error(
                    url,
                    &format!("client_encoding={encoding} is not supported (only UTF8)"),
                ));
            }
        }
        if let Some(mode) = url.query_value("gssencmode") {
            // GSSAPI encryption is not built in; "prefer" falls back to TLS or plain as in libpq.
            if !matches!(mode, "disable" | "prefer") {
                return Err(config_error(
                    url,
                    &format!("gssencmode={mode} is not supported (GSSAPI encryption)"),
                ));
            }
        }
        let optional_seconds = |key: &str| -> Result<Option<Duration>> {
            url.query_value(key)
                .map(|text| seconds(url, key, text).map(|n| Duration::from_secs(n.max(0).unsigned_abs())))
                .transpose()
        };
        let keepalives = url.query_value("keepalives").map(|v| v.trim() != "0");
        let keepalives_count = url
            .query_value("keepalives_count")
            .map(|text| {
                text.trim()
                    .parse::<u32>()
                    .map_err(|_| config_error(url, &format!("keepalives_count={text} is not a whole number")))
            })
            .transpose()?;
        // libpq's tcp_user_timeout is in milliseconds.
        let tcp_user_timeout = url
            .query_value("tcp_user_timeout")
            .map(|text| {
                text.trim().parse::<u64>().map(Duration::from_millis).map_err(|_| {
                    config_error(
                        url,
                        &format!("tcp_user_timeout={text} is not a whole number of milliseconds"),
                    )
                })
            })
            .transpose()?;
        let non_empty = |v: Option<String>| v.filter(|s| !s.is_empty());
        // As SQLAlchemy passes them to psycopg2: the query's user, password and dbname win
        // over the URL's own.
        let query = |key: &str| url.query_value(key).map(str::to_string);
        Ok(ConnectOptions {
            endpoints,
            user: non_empty(query("user").or_else(|| url.username.clone())),
            password: query("password").or_else(|| url.password.clone()),
            dbname: non_empty(query("dbname").or_else(|| url.database.clone())),
            tls,
            root_cert: url.query_value("sslrootcert").map(str::to_string),
            client_cert: url.query_value("sslcert").map(PathBuf::from),
            client_key: url.query_value("sslkey").map(PathBuf::from),
            connect_timeout,
            application_name: url.query_value("application_name").unwrap_or("state-store").to_string(),
            options: url.query_value("options").map(str::to_string),
            read_write_only,
            keepalives,
            keepalives_idle: optional_seconds("keepalives_idle")?,
            keepalives_interval: optional_seconds("keepalives_interval")?,
            keepalives_count,
            tcp_user_timeout,
        })
    }

    /// Where the connection goes, for messages: never the user's password.
    fn location(&self, schema: Option<&str>) -> String {
        let database = match &self.dbname {
            Some(name) => format!("PostgreSQL database {name}"),
            None => "the default PostgreSQL database".to_string(),
        };
        let at: Vec<String> = self.endpoints.iter().map(Endpoint::describe).collect();
        let mut text = format!("{database} on {}", at.join(","));
        if let Some(schema) = schema {
            text.push_str(&format!(" (schema {})", quote(schema)));
        }
        text
    }

    /// How long the whole connection set-up may take: `connect_timeout` per place to try, as
    /// libpq applies it per host.
    fn connect_deadline(&self) -> Duration {
        self.connect_timeout.saturating_mul(u32::try_from(self.endpoints.len()).unwrap_or(u32::MAX).max(1))
    }

    fn config(&self) -> postgres::Config {
        let mut config = postgres::Config::new();
        for endpoint in &self.endpoints {
            match endpoint {
                Endpoint::Tcp { host, port } => config.host(host).port(*port),
                Endpoint::Socket { dir, port } => config.host_path(dir).port(*port),
            };
        }
        if let Some(user) = &self.user {
            config.user(user);
        }
        if let Some(password) = &self.password {
            config.password(password);
        }
        if let Some(dbname) = &self.dbname {
            config.dbname(dbname);
        }
        if let Some(options) = &self.options {
            config.options(options);
        }
        config.application_name(&self.application_name);
        config.connect_timeout(self.connect_timeout);
        // libpq never uses TLS over a Unix socket, whatever sslmode says.
        let all_sockets = self.endpoints.iter().all(|e| matches!(e, Endpoint::Socket { .. }));
        config.ssl_mode(match self.tls {
            _ if all_sockets => SslMode::Disable,
            TlsMode::Disable => SslMode::Disable,
            // `allow` tries plain first; the driver only knows TLS-first, which reaches the
            // same servers.
            TlsMode::Allow | TlsMode::Prefer => SslMode::Prefer,
            TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => SslMode::Require,
        });
        if self.read_write_only {
            config.target_session_attrs(TargetSessionAttrs::ReadWrite);
        }
        if let Some(on) = self.keepalives {
            config.keepalives(on);
        }
        if let Some(idle) = self.keepalives_idle {
            config.keepalives_idle(idle);
        }
        if let Some(interval) = self.keepalives_interval {
            config.keepalives_interval(interval);
        }
        if let Some(count) = self.keepalives_count {
            config.keepalives_retries(count);
        }
        if let Some(timeout) = self.tcp_user_timeout {
            config.tcp_user_timeout(timeout);
        }
        config
    }

    /// The TLS side of the connection, with libpq's rules: `prefer` and `require` encrypt
    /// without checking the certificate, unless `require` finds a root certificate, which
    /// makes it `verify-ca`; `verify-ca` checks the chain, `verify-full` the host name too.
    fn tls_connector(&self, url: &DbUrl) -> Result<MakeTlsConnector> {
        let tls_err = |e: openssl::error::ErrorStack| config_error(url, &format!("cannot set up TLS: {e}"));
        let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(tls_err)?;
        let home_file =
            |name: &str| std::env::var_os("HOME").map(|h| Path::new(&h).join(".postgresql").join(name));
        let verify_chain = match self.tls {
            TlsMode::Disable | TlsMode::Allow | TlsMode::Prefer => false,
            TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => {
                let explicit = self.root_cert.as_deref();
                let root = explicit.map(PathBuf::from).or_else(|| home_file("root.crt"));
                match (explicit, root) {
                    // SslConnector starts with the system's default trust store.
                    (Some("system"), _) => true,
                    (_, Some(path)) if path.is_file() => {
                        builder.set_ca_file(&path).map_err(|e| {
                            config_error(
                                url,
                                &format!("cannot read root certificate {}: {e}", path.display()),
                            )
                        })?;
                        true
                    }
                    (Some(_), Some(path)) => {
                        return Err(config_error(
                            url,
                            &format!("root certificate file {} does not exist", path.display()),
                        ));
                    }
                    _ if self.tls == TlsMode::Require => false,
                    (_, path) => {
                        let shown = path.map_or_else(
                            || "~/.postgresql/root.crt".to_string(),
                            |p| p.display().to_string(),
                        );
                        return Err(config_error(
                            url,
                            &format!(
                                "sslmode={} needs a root certificate: {shown} does not exist; give sslrootcert=<file> \
                                 (or sslrootcert=system), or use sslmode=require",
                                if self.tls == TlsMode::VerifyCa { "verify-ca" } else { "verify-full" }
                            ),
                        ));
                    }
                }
            }
        };
        if !verify_chain {
            builder.set_verify(SslVerifyMode::NONE);
        }
        let cert = self.client_cert.clone().or_else(|| home_file("postgresql.crt").filter(|p| p.is_file()));
        if let Some(cert) = cert {
            let key = self.client_key.clone().or_else(|| home_file("postgresql.key")).unwrap_or_default();
            builder.set_certificate_chain_file(&cert).map_err(|e| {
                config_error(url, &format!("cannot read client certificate {}: {e}", cert.display()))
            })?;
            builder
                .set_private_key_file(&key, SslFiletype::PEM)
                .map_err(|e| config_error(url, &format!("cannot read client key {}: {e}", key.display())))?;
        }
        let mut connector = MakeTlsConnector::new(builder.build());
        if self.tls != TlsMode::VerifyFull {
            connector.set_callback(|ssl, _| {
                ssl.set_verify_hostname(false);
                Ok(())
            });
        }
        Ok(connector)
    }
}

/// The places the URL names, in order. The host is in the URL, or in `?host=` (repeated or
/// comma-separated, each `name`, `name:port` or a socket directory), never both, as in
/// SQLAlchemy; with neither, libpq's default socket directories.
fn endpoints(url: &DbUrl) -> Result<Vec<Endpoint>> {
    let query_hosts: Vec<&str> = url
        .query
        .iter()
        .filter(|(k, _)| k == "host")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    let query_ports: Vec<u16> = url
        .query
        .iter()
        .filter(|(k, _)| k == "port")
        .flat_map(|(_, v)| v.split(','))
        .map(|p| {
            p.trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| config_error(url, &format!("port={p} is not a port number")))
        })
        .collect::<Result<_>>()?;
    if url.host.is_some() && !query_hosts.is_empty() {
        return Err(config_error(url, "give the host either in the URL or as ?host=, not both"));
    }
    if url.port.is_some() && !query_ports.is_empty() {
        return Err(config_error(url, "give the port either in the URL or as ?port=, not both"));
    }
    let default_port = url.port.or_else(|| query_ports.first().copied()).unwrap_or(DEFAULT_PORT);
    let endpoint = |host: &str, port: u16| {
        if host.starts_with('/') {
            Endpoint::Socket { dir: PathBuf::from(host), port }
        } else {
            Endpoint::Tcp { host: host.to_string(), port }
        }
    };
    if let Some(host) = &url.host {
        return Ok(vec![endpoint(host, default_port)]);
    }
    if query_hosts.is_empty() {
        return Ok(DEFAULT_SOCKET_DIRS.iter().map(|dir| endpoint(dir, default_port)).collect());
    }
    if query_ports.len() > 1 && query_ports.len() != query_hosts.len() {
        return Err(config_error(url, "?port= lists a different number of ports than ?host= lists hosts"));
    }
    query_hosts
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let listed_port = query_ports.get(i).copied().unwrap_or(default_port);
            if item.starts_with('/') {
                return Ok(endpoint(item, listed_port));
            }
            // `name:port`, `[v6]:port`, `[v6]`, or a bare name.
            let (host, port) = if let Some(rest) = item.strip_prefix('[') {
                let (inside, after) = rest
                    .split_once(']')
                    .ok_or_else(|| config_error(url, &format!("host={item} has an unclosed [")))?;
                (inside, after.strip_prefix(':'))
            } else {
                match item.rsplit_once(':') {
                    Some((host, port)) if !host.contains(':') => (host, Some(port)),
                    _ => (*item, None),
                }
            };
            let port = match port {
                None => listed_port,
                Some(text) => text
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| config_error(url, &format!("host={item} has an invalid port")))?,
            };
            Ok(endpoint(host, port))
        })
        .collect()
}

/// `[database] sql_alchemy_schema` as an identifier to splice into `SET search_path`: Airflow
/// uses the text as is (SQLAlchemy quotes it where needed), so it is always quoted here, which
/// keeps its exact spelling and case.
fn quote_schema(name: &str) -> Result<String> {
    let problem = if name.contains('\0') {
        Some("contains a NUL character".to_string())
    } else if name.chars().any(char::is_control) {
        // PostgreSQL would take it quoted, but a newline or tab in a schema name is a mistake
        // (an indented line after the option continues its value in airflow.cfg), not a schema.
        Some("contains a control character (a newline, tab, …)".to_string())
    } else if name.len() > MAX_IDENTIFIER_BYTES {
        Some(format!("is {} bytes long; PostgreSQL names hold at most {MAX_IDENTIFIER_BYTES}", name.len()))
    } else if name.is_empty() {
        Some("is empty".to_string())
    } else {
        None
    };
    match problem {
        Some(problem) => {
            Err(Error::Config(format!("[database] sql_alchemy_schema {} {problem}", quote(name))))
        }
        None => Ok(format!("\"{}\"", name.replace('"', "\"\""))),
    }
}

/// The driver's error as one readable line: the server's own message (severity, text, detail,
/// hint) when there is one, otherwise the driver's words followed by their causes.
fn describe(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return db.to_string();
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        // OpenSSL's errors repeat their own sources in their text.
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn pg_err(context: impl Into<String>) -> impl FnOnce(postgres::Error) -> Error {
    let context = context.into();
    move |e| Error::db(context, describe(&e))
}

/// Opens a connection and prepares the session; the schema, when given, is already quoted.
fn connect(url: &DbUrl, schema: Option<&str>, access: Access) -> Result<(Client, String)> {
    let quoted = schema.map(quote_schema).transpose()?;
    let options = ConnectOptions::from_url(url)?;
    let location = options.location(schema);
    let tls = options.tls_connector(url)?;
    let mut client = connect_bounded(options.config(), tls, options.connect_deadline())
        .map_err(|cause| Error::db(format!("cannot connect to {location}"), cause))?;
    // One round trip. Airflow's sessions run in UTC; the schema name is the only identifier
    // ever spliced into SQL here, validated and quoted above.
    let mut setup = String::from("SET TIME ZONE 'UTC';");
    if let Some(quoted) = &quoted {
        setup.push_str(&format!(" SET search_path TO {quoted};"));
    }
    if access == Access::ReadOnly {
        setup.push_str(" SET default_transaction_read_only = on;");
    } else {
        // PostgreSQL waits for a row lock forever by default; a `set` behind a stuck worker
        // fails after 10 s with a message instead (clean sets its own --lock-timeout).
        setup.push_str(" SET lock_timeout = '10s';");
    }
    client.batch_execute(&setup).map_err(pg_err(format!("cannot use {location}")))?;
    Ok((client, location))
}

/// The driver's `connect_timeout` covers opening the socket only; a server (or a proxy) that
/// accepts the connection and then never answers would hold the start-up handshake for as long
/// as the kernel keeps the socket. So the whole handshake (socket, TLS, authentication) runs on
/// its own thread and is given up after the deadline; the process is about to exit with the
/// error then, which closes the abandoned socket.
fn connect_bounded(
    config: postgres::Config,
    tls: MakeTlsConnector,
    deadline: Duration,
) -> std::result::Result<Client, String> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // The receiver is gone only when the deadline has passed; nothing is waiting then.
        let _ = sender.send(config.connect(tls));
    });
    match receiver.recv_timeout(deadline) {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(describe(&e)),
        Err(_) => Err(format!("no answer from the server within {} s (connect_timeout)", deadline.as_secs())),
    }
}

// ---------------------------------------------------------------- values in and out

/// A timestamp as the binary protocol carries it: exact microseconds, no text round trip.
type PgTime = postgres::types::Timestamp<SystemTime>;

fn to_system_time(ts: Timestamp) -> SystemTime {
    let micros = ts.micros();
    // SystemTime counts i64 seconds, so any i64 of microseconds fits either way.
    if micros >= 0 {
        UNIX_EPOCH + Duration::from_micros(micros.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_micros(micros.unsigned_abs())
    }
}

fn from_system_time(t: SystemTime) -> Timestamp {
    let micros = match t.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_micros()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_micros()).map_or(i64::MIN, |m| -m),
    };
    Timestamp::from_micros(micros)
}

/// `infinity` is a valid timestamptz that Airflow never writes; show it rather than fail.
fn stored_time(value: PgTime) -> StoredTime {
    match value {
        PgTime::Value(t) => StoredTime::At(from_system_time(t)),
        PgTime::PosInfinity => StoredTime::Unreadable("infinity".to_string()),
        PgTime::NegInfinity => StoredTime::Unreadable("-infinity".to_string()),
    }
}

/// Airflow's id and map_index columns are `integer`; a `bigint` one is read as well.
fn int_column(row: &Row, idx: usize) -> std::result::Result<i64, postgres::Error> {
    if row.columns().get(idx).is_some_and(|c| *c.type_() == Type::INT8) {
        row.try_get::<_, i64>(idx)
    } else {
        row.try_get::<_, i32>(idx).map(i64::from)
    }
}

/// A non-negative bigint column (count, sum, size).
fn count_at(row: &Row, idx: usize) -> std::result::Result<u64, postgres::Error> {
    Ok(unsigned(row.try_get::<_, i64>(idx)?))
}

fn count_value(row: &Row) -> std::result::Result<u64, postgres::Error> {
    Ok(u64::try_from(row.try_get::<_, i64>(0)?).unwrap_or(0))
}

const TASK_COLUMNS: &str = r#"dag_id, run_id, task_id, map_index, "key", value, updated_at, expires_at"#;

fn task_entry(row: &Row) -> std::result::Result<TaskEntry, postgres::Error> {
    Ok(TaskEntry {
        scope: TaskScope {
            dag_id: row.try_get(0)?,
            run_id: row.try_get(1)?,
            task_id: row.try_get(2)?,
            map_index: int_column(row, 3)?,
        },
        key: row.try_get(4)?,
        value: row.try_get(5)?,
        updated_at: stored_time(row.try_get(6)?),
        expires_at: row.try_get::<_, Option<PgTime>>(7)?.map(stored_time),
    })
}

const ASSET_COLUMNS: &str = r#"s.asset_id, a.name, a.uri, s."key", s.value, s.updated_at, s.last_updated_by_kind,
    s.last_updated_by_dag_id, s.last_updated_by_run_id, s.last_updated_by_task_id, s.last_updated_by_map_index"#;

fn asset_entry(row: &Row) -> std::result::Result<AssetEntry, postgres::Error> {
    Ok(AssetEntry {
        asset_id: int_column(row, 0)?,
        asset_name: row.try_get(1)?,
        asset_uri: row.try_get(2)?,
        key: row.try_get(3)?,
        value: row.try_get(4)?,
        updated_at: stored_time(row.try_get(5)?),
        last_updated_by_kind: row.try_get(6)?,
        last_updated_by_dag_id: row.try_get(7)?,
        last_updated_by_run_id: row.try_get(8)?,
        last_updated_by_task_id: row.try_get(9)?,
        last_updated_by_map_index: row.try_get::<_, Option<i32>>(10)?.map(i64::from),
    })
}

fn map_rows<T>(
    rows: Vec<Row>,
    f: impl Fn(&Row) -> std::result::Result<T, postgres::Error>,
) -> std::result::Result<Vec<T>, postgres::Error> {
    rows.iter().map(f).collect()
}

/// `LIMIT NULL` is PostgreSQL's "no limit".
fn limit_value(page: Page) -> Option<i64> {
    page.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX))
}

fn offset_value(page: Page) -> i64 {
    i64::try_from(page.offset).unwrap_or(i64::MAX)
}

/// An asset is active when `asset_active` has a row with the same name AND uri.
const ACTIVE_JOIN: &str = "JOIN asset_active aa ON aa.name = a.name AND aa.uri = a.uri";

/// Lists a table's columns, `None` when the name does not resolve. `to_regclass` resolves the
/// name through `search_path` exactly as the statements that follow will.
fn columns(client: &mut Client, location: &str, table: &str) -> Result<Option<Vec<String>>> {
    let rows = client
        .query(
            "SELECT attname::text FROM pg_catalog.pg_attribute \
             WHERE attrelid = to_regclass(quote_ident($1)) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            &[&table],
        )
        .map_err(pg_err(format!("cannot read the tables of {location}")))?;
    let names = rows
        .iter()
        .map(|r| r.try_get::<_, String>(0))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(pg_err(format!("cannot read the tables of {location}")))?;
    Ok(if names.is_empty() { None } else { Some(names) })
}

// ---------------------------------------------------------------- the metastore

pub(crate) struct PostgresStore {
    client: Client,
    location: String,
    /// See [`PostgresStore::clean_statements`].
    clean_statements: Option<CleanStatements>,
}

/// The two statements of a clean batch on PostgreSQL.
#[derive(Clone)]
struct CleanStatements {
    /// The id of the `n`-th row after a given id: where a batch ends.
    window_end: Statement,
    /// The expired rows in an id range.
    range_delete: Statement,
}

impl PostgresStore {
    pub(crate) fn open(url: &DbUrl, schema: Option<&str>, access: Access) -> Result<Self> {
        let (store, finding) = Self::connect(url, schema, access)?;
        finding.map_err(SchemaProblem::into_error)?;
        Ok(store)
    }

    /// Connects and checks the schema, handing back what the check found.
    pub(crate) fn connect(
        url: &DbUrl,
        schema: Option<&str>,
        access: Access,
    ) -> Result<(Self, SchemaFinding)> {
        let (mut client, location) = connect(url, schema, access)?;
        if let Some(name) = schema {
            let exists: bool = client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)",
                    &[&name],
                )
                .and_then(|r| r.try_get(0))
                .map_err(pg_err(format!("cannot read the schemas of {location}")))?;
            if !exists {
                let problem = SchemaProblem {
                    found: "no such schema",
                    message: format!(
                        "{location}: schema {} does not exist ([database] sql_alchemy_schema names the schema \
                         that holds Airflow's tables)",
                        quote(name)
                    ),
                };
                return Ok((PostgresStore { client, location, clean_statements: None }, Err(problem)));
            }
        }
        let finding = diagnose_schema(&location, |table| columns(&mut client, &location, table))?;
        Ok((PostgresStore { client, location, clean_statements: None }, finding))
    }

    fn ctx(&self, what: &str) -> String {
        format!("{what} in {}", self.location)
    }

    fn rows(&mut self, what: &str, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        let ctx = self.ctx(what);
        self.client.query(sql, params).map_err(pg_err(ctx))
    }

    /// The first row, as SQLite's `query_row` gives it.
    fn first<T>(
        &mut self,
        what: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        f: impl Fn(&Row) -> std::result::Result<T, postgres::Error>,
    ) -> Result<Option<T>> {
        let ctx = self.ctx(what);
        let rows = self.client.query(sql, params).map_err(pg_err(&ctx))?;
        rows.first().map(f).transpose().map_err(pg_err(ctx))
    }

    /// A clean's plain DELETE of the expired rows in `after_id < id <= up_to_id`, in a
    /// transaction that gives up after 1 ms on any lock: `None` (nothing deleted) when a row is
    /// locked by another session, and the caller then skips such rows instead. The DELETE
    /// re-checks `expires_at` on the newest version of each row, so a key refreshed since the
    /// statement began survives. With no bounds at all it is the floor's statement exactly:
    /// id predicates on every row cost ~10 % of a whole-table DELETE.
    fn delete_expired_unless_locked(
        &mut self,
        cutoff: std::time::SystemTime,
        after_id: i64,
        up_to_id: Option<i64>,
    ) -> Result<Option<u64>> {
        let ctx = self.ctx("cannot delete expired rows");
        let range = match (after_id, up_to_id) {
            (i64::MIN, None) => None,
            _ => Some(self.clean_statements()?.range_delete),
        };
        // BEGIN and SET LOCAL in one round trip.
        self.client.batch_execute("BEGIN; SET LOCAL lock_timeout = '1ms'").map_err(pg_err(&ctx))?;
        let deleted = match &range {
            None => self.client.execute("DELETE FROM task_state_store WHERE expires_at < $1", &[&cutoff]),
            Some(range) => self.client.execute(range, &[&after_id, &up_to_id.unwrap_or(i64::MAX), &cutoff]),
        };
        match deleted {
            Ok(n) => self.client.batch_execute("COMMIT").map(|()| Some(n)).map_err(pg_err(ctx)),
            Err(e) => {
                // The transaction is aborted either way; a connection that is gone has none
                // left to roll back, and the first error is the one to report.
                let rolled_back = self.client.batch_execute("ROLLBACK");
                if e.code() != Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) {
                    return Err(pg_err(ctx)(e));
                }
                rolled_back.map(|()| None).map_err(pg_err(ctx))
            }
        }
    }

    /// A clean's batch statements, prepared on first use and kept for the connection: a batch
    /// then costs one round trip for each instead of two.
    fn clean_statements(&mut self) -> Result<CleanStatements> {
        if let Some(statements) = &self.clean_statements {
            return Ok(statements.clone());
        }
        let ctx = self.ctx("cannot delete expired rows");
        let statements = CleanStatements {
            window_end: self
                .client
                .prepare("SELECT id FROM task_state_store WHERE id > $1::bigint ORDER BY id LIMIT 1 OFFSET $2")
                .map_err(pg_err(&ctx))?,
            range_delete: self
                .client
                .prepare("DELETE FROM task_state_store WHERE id > $1::bigint AND id <= $2::bigint AND expires_at < $3")
                .map_err(pg_err(&ctx))?,
        };
        self.clean_statements = Some(statements.clone());
        Ok(statements)
    }

    fn execute(&mut self, what: &str, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        let ctx = self.ctx(what);
        self.client.execute(sql, params).map_err(pg_err(ctx))
    }

    /// The task upsert, with an optional condition on the update (`restore_task`'s
    /// keep-the-newer-row rule). The conflict target is Airflow's own unique key
    /// (task_state_store_uq), so a concurrent Airflow worker writing the same key updates the
    /// same row instead of failing.
    fn write_task(&mut self, w: &TaskWrite<'_>, only_if: &str, what: &str) -> Result<()> {
        let sql = format!(
            r#"INSERT INTO task_state_store
                   (dag_run_id, task_id, map_index, "key", dag_id, run_id, value, updated_at, expires_at)
               VALUES ($1::bigint, $2, $3::bigint, $4, $5, $6, $7, $8, $9)
               ON CONFLICT (dag_run_id, task_id, map_index, "key") DO UPDATE SET
                   value = excluded.value, updated_at = excluded.updated_at, expires_at = excluded.expires_at
               {only_if}"#
        );
        self.execute(
            what,
            &sql,
            &[
                &w.dag_run_id,
                &w.scope.task_id,
                &w.scope.map_index,
                &w.key,
                &w.scope.dag_id,
                &w.scope.run_id,
                &w.value,
                &to_system_time(w.updated_at),
                &w.expires_at.map(to_system_time),
            ],
        )
        .map(drop)
    }

    fn count(&mut self, what: &str, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        Ok(self.first(what, sql, params, count_value)?.unwrap_or(0))
    }
}

/// Airflow's map_index column is a 32-bit `integer`; a larger value can never be stored.
fn check_storable_map_index(map_index: i64) -> Result<()> {
    if i32::try_from(map_index).is_err() {
        return Err(Error::Usage(format!(
            "--map-index {map_index} is too large: Airflow's map_index column holds at most {}",
            i32::MAX
        )));
    }
    Ok(())
}

impl Reads for PostgresStore {
    fn task_instance_exists(&mut self, scope: &TaskScope, any_map_index: bool) -> Result<bool> {
        let what = "cannot look up the task instance";
        let found = if any_map_index {
            self.first(
                what,
                "SELECT 1 FROM task_instance WHERE dag_id = $1 AND task_id = $2 AND run_id = $3 LIMIT 1",
                &[&scope.dag_id, &scope.task_id, &scope.run_id],
                |_| Ok(()),
            )?
        } else {
            self.first(
                what,
                "SELECT 1 FROM task_instance WHERE dag_id = $1 AND task_id = $2 AND run_id = $3 \
                 AND map_index = $4::bigint",
                &[&scope.dag_id, &scope.task_id, &scope.run_id, &scope.map_index],
                |_| Ok(()),
            )?
        };
        Ok(found.is_some())
    }

    fn task_instances_hint(
        &mut self,
        dag_id: &str,
        run_id: &str,
        task_id: &str,
        limit: u64,
    ) -> Result<TaskInstances> {
        let what = "cannot look up the task instances";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let task_ids = self
            .rows(
                what,
                "SELECT DISTINCT task_id COLLATE \"C\" FROM task_instance WHERE dag_id = $1 AND run_id = $2 \
                 ORDER BY 1 LIMIT $3",
                &[&dag_id, &run_id, &limit],
            )?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<std::result::Result<Vec<String>, _>>()
            .map_err(pg_err(self.ctx(what)))?;
        let task_count = self
            .first(
                what,
                "SELECT count(DISTINCT task_id) FROM task_instance WHERE dag_id = $1 AND run_id = $2",
                &[&dag_id, &run_id],
                |r| r.try_get::<_, i64>(0),
            )?
            .map_or(0, unsigned);
        let map_indexes = self
            .first(
                what,
                "SELECT count(*), min(map_index), max(map_index) FROM task_instance \
                 WHERE dag_id = $1 AND task_id = $2 AND run_id = $3",
                &[&dag_id, &task_id, &run_id],
                |r| {
                    Ok((
                        r.try_get::<_, i64>(0)?,
                        r.try_get::<_, Option<i32>>(1)?,
                        r.try_get::<_, Option<i32>>(2)?,
                    ))
                },
            )?
            .and_then(|(n, low, high)| Some((unsigned(n), i64::from(low?), i64::from(high?))));
        Ok(TaskInstances { task_ids, task_count, map_indexes })
    }

    fn dag_run_id(&mut self, dag_id: &str, run_id: &str) -> Result<Option<i64>> {
        self.first(
            "cannot look up the dag run",
            "SELECT id FROM dag_run WHERE dag_id = $1 AND run_id = $2",
            &[&dag_id, &run_id],
            |r| int_column(r, 0),
        )
    }

    fn find_asset(&mut self, selector: &AssetSelector) -> Result<Option<Asset>> {
        let map = |r: &Row| -> std::result::Result<Asset, postgres::Error> {
            Ok(Asset {
                id: int_column(r, 0)?,
                name: r.try_get(1)?,
                uri: r.try_get(2)?,
                active: r.try_get(3)?,
            })
        };
        let what = "cannot look up the asset";
        match selector {
            AssetSelector::Id(id) => self.first(
                what,
                "SELECT a.id, a.name, a.uri, EXISTS (SELECT 1 FROM asset_active aa \
                 WHERE aa.name = a.name AND aa.uri = a.uri) FROM asset a WHERE a.id = $1::bigint",
                &[id],
                map,
            ),
            AssetSelector::Name(name) => self.first(
                what,
                &format!("SELECT a.id, a.name, a.uri, true FROM asset a {ACTIVE_JOIN} WHERE a.name = $1"),
                &[name],
                map,
            ),
            AssetSelector::Uri(uri) => self.first(
                what,
                &format!("SELECT a.id, a.name, a.uri, true FROM asset a {ACTIVE_JOIN} WHERE a.uri = $1"),
                &[uri],
                map,
            ),
        }
    }

    fn asset_id_by_name_uri(&mut self, name: &str, uri: &str) -> Result<Option<i64>> {
        self.first(
            "cannot look up the asset",
            "SELECT id FROM asset WHERE name = $1 AND uri = $2 ORDER BY id DESC LIMIT 1",
            &[&name, &uri],
            |r| int_column(r, 0),
        )
    }

    fn active_assets(&mut self, limit: u64) -> Result<Vec<Asset>> {
        let what = "cannot read the assets";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.rows(
            what,
            &format!("SELECT a.id, a.name, a.uri FROM asset a {ACTIVE_JOIN} ORDER BY a.id LIMIT $1"),
            &[&limit],
        )?;
        rows.iter()
            .map(|r| {
                Ok(Asset { id: int_column(r, 0)?, name: r.try_get(1)?, uri: r.try_get(2)?, active: true })
            })
            .collect::<std::result::Result<Vec<_>, postgres::Error>>()
            .map_err(pg_err(self.ctx(what)))
    }

    fn asset_exists_inactive(&mut self, selector: &AssetSelector) -> Result<bool> {
        let (sql, arg) = match selector {
            AssetSelector::Name(name) => {
                ("SELECT EXISTS (SELECT 1 FROM asset WHERE name = $1)", name.as_str())
            }
            AssetSelector::Uri(uri) => ("SELECT EXISTS (SELECT 1 FROM asset WHERE uri = $1)", uri.as_str()),
            AssetSelector::Id(_) => return Ok(false),
        };
        Ok(self.first("cannot look up the asset", sql, &[&arg], |r| r.try_get(0))?.unwrap_or(false))
    }

    fn task_entry(&mut self, scope: &TaskScope, key: &str) -> Result<Option<TaskEntry>> {
        self.first(
            "cannot read task_state_store",
            &format!(
                r#"SELECT {TASK_COLUMNS} FROM task_state_store
                   WHERE dag_id = $1 AND run_id = $2 AND task_id = $3 AND map_index = $4::bigint AND "key" = $5"#
            ),
            &[&scope.dag_id, &scope.run_id, &scope.task_id, &scope.map_index, &key],
            task_entry,
        )
    }

    fn asset_entry(&mut self, asset: &Asset, key: &str) -> Result<Option<AssetEntry>> {
        self.first(
            "cannot read asset_state_store",
            &format!(
                r#"SELECT {ASSET_COLUMNS} FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id
                   WHERE s.asset_id = $1::bigint AND s."key" = $2"#
            ),
            &[&asset.id, &key],
            asset_entry,
        )
    }

    fn list_task(&mut self, filter: &TaskFilter, page: Page) -> Result<Vec<TaskEntry>> {
        let (sql, args) = list_task_statement(filter, page);
        let params: Vec<&(dyn ToSql + Sync)> =
            args.iter().map(|a| a.as_ref() as &(dyn ToSql + Sync)).collect();
        let rows = self.rows("cannot read task_state_store", &sql, &params)?;
        map_rows(rows, task_entry).map_err(pg_err(self.ctx("cannot read task_state_store")))
    }

    fn list_asset(&mut self, filter: &AssetFilter, page: Page) -> Result<Vec<AssetEntry>> {
        let where_sql = if filter.asset_id.is_some() {
            "WHERE s.asset_id = $1::bigint"
        } else {
            "WHERE $1::bigint IS NULL"
        };
        let sql = format!(
            r#"SELECT {ASSET_COLUMNS} FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id
               {where_sql} AND ($4::text IS NULL OR s.value LIKE $4::text ESCAPE '!')
               ORDER BY s.asset_id, s."key" COLLATE "C" LIMIT $2 OFFSET $3"#
        );
        let like = filter.external_only.then_some(EXTERNAL_REF_LIKE);
        let rows = self.rows(
            "cannot read asset_state_store",
            &sql,
            &[&filter.asset_id, &limit_value(page), &offset_value(page), &like],
        )?;
        map_rows(rows, asset_entry).map_err(pg_err(self.ctx("cannot read asset_state_store")))
    }

    fn task_rows_after(
        &mut self,
        filter: &TaskFilter,
        after_id: i64,
        limit: u64,
    ) -> Result<Vec<(i64, TaskEntry)>> {
        let (where_sql, mut args) = task_filter_where(filter, Some(after_id));
        args.push(Box::new(i64::try_from(limit).unwrap_or(i64::MAX)));
        let sql = format!(
            "SELECT {TASK_COLUMNS}, id FROM task_state_store {where_sql} ORDER BY id LIMIT ${}",
            args.len()
        );
        let params: Vec<&(dyn ToSql + Sync)> =
            args.iter().map(|a| a.as_ref() as &(dyn ToSql + Sync)).collect();
        let rows = self.rows("cannot read task_state_store", &sql, &params)?;
        map_rows(rows, |row| Ok((int_column(row, 8)?, task_entry(row)?)))
            .map_err(pg_err(self.ctx("cannot read task_state_store")))
    }
}

impl Writes for PostgresStore {
    fn upsert_task(&mut self, w: &TaskWrite<'_>) -> Result<()> {
        check_storable_map_index(w.scope.map_index)?;
        self.write_task(w, "", "cannot write task_state_store")
    }

    fn upsert_asset(&mut self, w: &AssetWrite<'_>) -> Result<()> {
        // An `api` write records no task, so the four writer columns are reset to NULL.
        self.execute(
            "cannot write asset_state_store",
            r#"INSERT INTO asset_state_store
                   (asset_id, "key", value, updated_at, last_updated_by_kind, last_updated_by_dag_id,
                    last_updated_by_run_id, last_updated_by_task_id, last_updated_by_map_index)
               VALUES ($1::bigint, $2, $3, $4, 'api', NULL, NULL, NULL, NULL)
               ON CONFLICT (asset_id, "key") DO UPDATE SET
                   value = excluded.value, updated_at = excluded.updated_at,
                   last_updated_by_kind = excluded.last_updated_by_kind,
                   last_updated_by_dag_id = NULL, last_updated_by_run_id = NULL,
                   last_updated_by_task_id = NULL, last_updated_by_map_index = NULL"#,
            &[&w.asset_id, &w.key, &w.value, &to_system_time(w.updated_at)],
        )
        .map(drop)
    }

    fn restore_task(&mut self, w: &TaskWrite<'_>) -> Result<()> {
        self.check_restore_task(w)?;
        // A restore never overwrites a row written since the export.
        self.write_task(
            w,
            "WHERE task_state_store.updated_at <= excluded.updated_at",
            "cannot restore into task_state_store",
        )
    }

    fn restore_asset(&mut self, w: &AssetRestore<'_>) -> Result<()> {
        self.check_restore_asset(w)?;
        self.execute(
            "cannot restore into asset_state_store",
            r#"INSERT INTO asset_state_store
                   (asset_id, "key", value, updated_at, last_updated_by_kind, last_updated_by_dag_id,
                    last_updated_by_run_id, last_updated_by_task_id, last_updated_by_map_index)
               VALUES ($1::bigint, $2, $3, $4, $5, $6, $7, $8, $9::bigint)
               ON CONFLICT (asset_id, "key") DO UPDATE SET
                   value = excluded.value, updated_at = excluded.updated_at,
                   last_updated_by_kind = excluded.last_updated_by_kind,
                   last_updated_by_dag_id = excluded.last_updated_by_dag_id,
                   last_updated_by_run_id = excluded.last_updated_by_run_id,
                   last_updated_by_task_id = excluded.last_updated_by_task_id,
                   last_updated_by_map_index = excluded.last_updated_by_map_index
               WHERE asset_state_store.updated_at <= excluded.updated_at"#,
            &[
                &w.asset_id,
                &w.key,
                &w.value,
                &to_system_time(w.updated_at),
                &w.writer.kind,
                &w.writer.dag_id,
                &w.writer.run_id,
                &w.writer.task_id,
                &w.writer.map_index,
            ],
        )
        .map(drop)
    }

    fn check_restore_task(&self, w: &TaskWrite<'_>) -> Result<()> {
        check_storable_map_index(w.scope.map_index)
    }

    fn check_restore_asset(&self, w: &AssetRestore<'_>) -> Result<()> {
        w.writer.map_index.map_or(Ok(()), check_storable_map_index)
    }

    fn begin(&mut self) -> Result<()> {
        let ctx = self.ctx("cannot begin a transaction");
        self.client.batch_execute("BEGIN").map_err(pg_err(ctx))
    }

    fn commit(&mut self) -> Result<()> {
        let ctx = self.ctx("cannot commit");
        self.client.batch_execute("COMMIT").map_err(pg_err(ctx))
    }

    fn rollback(&mut self) -> Result<()> {
        let ctx = self.ctx("cannot roll back");
        self.client.batch_execute("ROLLBACK").map_err(pg_err(ctx))
    }

    fn delete_task(&mut self, scope: &TaskScope, key: &str) -> Result<u64> {
        self.execute(
            "cannot delete from task_state_store",
            r#"DELETE FROM task_state_store
               WHERE dag_id = $1 AND run_id = $2 AND task_id = $3 AND map_index = $4::bigint AND "key" = $5"#,
            &[&scope.dag_id, &scope.run_id, &scope.task_id, &scope.map_index, &key],
        )
    }

    fn delete_asset(&mut self, asset_id: i64, key: &str) -> Result<u64> {
        self.execute(
            "cannot delete from asset_state_store",
            r#"DELETE FROM asset_state_store WHERE asset_id = $1::bigint AND "key" = $2"#,
            &[&asset_id, &key],
        )
    }

    fn count_task_scope(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64> {
        let map_index = (!all_map_indices).then_some(scope.map_index);
        self.count(
            "cannot read task_state_store",
            &format!("SELECT count(*) FROM task_state_store WHERE {TASK_SCOPE_WHERE}"),
            &[&scope.dag_id, &scope.run_id, &scope.task_id, &map_index],
        )
    }

    fn clear_task(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64> {
        let map_index = (!all_map_indices).then_some(scope.map_index);
        self.execute(
            "cannot delete from task_state_store",
            &format!("DELETE FROM task_state_store WHERE {TASK_SCOPE_WHERE}"),
            &[&scope.dag_id, &scope.run_id, &scope.task_id, &map_index],
        )
    }

    fn count_asset_scope(&mut self, asset_id: i64) -> Result<u64> {
        self.count(
            "cannot read asset_state_store",
            "SELECT count(*) FROM asset_state_store WHERE asset_id = $1::bigint",
            &[&asset_id],
        )
    }

    fn clear_asset(&mut self, asset_id: i64) -> Result<u64> {
        self.execute(
            "cannot delete from asset_state_store",
            "DELETE FROM asset_state_store WHERE asset_id = $1::bigint",
            &[&asset_id],
        )
    }
}

impl Cleanup for PostgresStore {
    fn count_expired(&mut self, cutoff: Timestamp) -> Result<u64> {
        self.count(
            "cannot count expired rows",
            "SELECT count(*) FROM task_state_store WHERE expires_at < $1",
            &[&to_system_time(cutoff)],
        )
    }

    fn expired_by_dag(&mut self, cutoff: Timestamp) -> Result<Vec<DagCount>> {
        let what = "cannot count expired rows";
        let rows = self.rows(
            what,
            r#"SELECT dag_id, count(*) FROM task_state_store WHERE expires_at < $1
               GROUP BY dag_id ORDER BY dag_id COLLATE "C""#,
            &[&to_system_time(cutoff)],
        )?;
        map_rows(rows, |r| {
            Ok(DagCount { dag_id: r.try_get(0)?, rows: u64::try_from(r.try_get::<_, i64>(1)?).unwrap_or(0) })
        })
        .map_err(pg_err(self.ctx(what)))
    }

    fn orphans_by_asset(&mut self) -> Result<Vec<AssetCount>> {
        let what = "cannot count orphaned asset rows";
        let sql = format!(
            "SELECT s.asset_id, a.name, count(*) FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id \
             WHERE {} GROUP BY s.asset_id, a.name ORDER BY s.asset_id",
            orphan_condition("s")
        );
        let rows = self.rows(what, &sql, &[])?;
        map_rows(rows, |r| {
            Ok(AssetCount {
                asset_id: int_column(r, 0)?,
                asset_name: r.try_get(1)?,
                rows: u64::try_from(r.try_get::<_, i64>(2)?).unwrap_or(0),
            })
        })
        .map_err(pg_err(self.ctx(what)))
    }

    fn orphan_sample(&mut self, limit: u64) -> Result<Vec<AssetEntry>> {
        let what = "cannot read orphaned asset rows";
        let sql = format!(
            r#"SELECT {ASSET_COLUMNS} FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id
               WHERE {} ORDER BY s.asset_id, s."key" COLLATE "C" LIMIT $1"#,
            orphan_condition("s")
        );
        let rows = self.rows(what, &sql, &[&i64::try_from(limit).unwrap_or(i64::MAX)])?;
        map_rows(rows, asset_entry).map_err(pg_err(self.ctx(what)))
    }

    fn begin_clean(&mut self, lock_timeout: Duration) -> Result<bool> {
        // A session-level advisory lock, keyed by the schema so that two Airflow installations
        // sharing a server in different schemas do not block each other's cleans.
        let locked = self
            .first(
                "cannot take the clean lock",
                "SELECT pg_try_advisory_lock(hashtext('state-store clean ' || current_schema()))",
                &[],
                |r| r.try_get::<_, bool>(0),
            )?
            .unwrap_or(false);
        // A batch lost in a crash is simply deleted again by the next run, so its commit need
        // not wait for the WAL flush: for this session only, commits return at once.
        self.first(
            "cannot set synchronous_commit",
            "SELECT set_config('synchronous_commit', 'off', false)",
            &[],
            |r| r.try_get::<_, String>(0),
        )?;
        // The batch statements are prepared once (see `clean_statements`). After five runs
        // PostgreSQL may switch a prepared statement to a generic plan, made without knowing
        // the bounds; a range DELETE planned blind could scan more than its window. Each run
        // is planned for its own bounds, as an unprepared statement is (on the benchmark the
        // two measured the same).
        self.first(
            "cannot set plan_cache_mode",
            "SELECT set_config('plan_cache_mode', 'force_custom_plan', false)",
            &[],
            |r| r.try_get::<_, String>(0),
        )?;
        let millis = i64::try_from(lock_timeout.as_millis()).unwrap_or(i64::MAX).max(1);
        // SET takes no bind parameters; set_config does the same for this session.
        self.first(
            "cannot set lock_timeout",
            "SELECT set_config('lock_timeout', $1, false)",
            &[&format!("{millis}ms")],
            |r| r.try_get::<_, String>(0),
        )?;
        Ok(locked)
    }

    fn nth_expired_id(&mut self, cutoff: Timestamp, after_id: i64, n: u64) -> Result<Option<i64>> {
        let offset = i64::try_from(n.saturating_sub(1)).unwrap_or(i64::MAX);
        // `id` is selected and ordered as the bare column, so the primary key's index serves
        // both the range and the order.
        self.first(
            "cannot find the next batch of expired rows",
            "SELECT id FROM task_state_store WHERE id > $1::bigint AND expires_at < $2 ORDER BY id LIMIT 1 OFFSET $3",
            &[&after_id, &to_system_time(cutoff), &offset],
            |r| int_column(r, 0),
        )
    }

    /// A batch is the expired rows among the next `n` rows in primary-key order. Finding the
    /// `n`-th expired row (the default) reads every row's heap tuple for its `expires_at`, a
    /// second pass over what the DELETE reads anyway; finding the `n`-th row is an index-only
    /// scan of the primary key wherever the visibility map marks pages all-visible, which
    /// vacuum does for a metastore's settled rows. The DELETE is [`Cleanup::delete_expired_range`]'s,
    /// and both statements are prepared once: four round trips a batch instead of seven.
    ///
    /// Measured (1,000,000 rows, 500,012 expired, batch 10,000, server log): the boundary
    /// scans took 130 ms over 100 batches against 470 ms over 51 for the n-th expired row.
    /// One statement for both (a CTE for the boundary, the DELETE's count by `RETURNING`) was
    /// slower: `RETURNING` fetches every deleted row again, twice the buffer reads of the plain
    /// DELETE. A batch still touches at most `n` rows; where expired rows are sparse, more
    /// batches delete fewer rows each.
    fn delete_expired_batch(&mut self, cutoff: Timestamp, after_id: i64, n: u64) -> Result<Batch> {
        let ctx = self.ctx("cannot delete expired rows");
        let offset = i64::try_from(n.saturating_sub(1)).unwrap_or(i64::MAX);
        let window_end = self.clean_statements()?.window_end;
        let last_id = match self.client.query_opt(&window_end, &[&after_id, &offset]).map_err(pg_err(&ctx))? {
            Some(row) => Some(int_column(&row, 0).map_err(pg_err(&ctx))?),
            None => None,
        };
        let deleted = self.delete_expired_range(cutoff, after_id, last_id)?;
        Ok(Batch { deleted, last_id })
    }

    fn delete_expired_range(
        &mut self,
        cutoff: Timestamp,
        after_id: i64,
        up_to_id: Option<i64>,
    ) -> Result<u64> {
        let cutoff = to_system_time(cutoff);
        if let Some(deleted) = self.delete_expired_unless_locked(cutoff, after_id, up_to_id)? {
            return Ok(deleted);
        }
        // Rows another session holds locked (a worker writing that key right now) are skipped,
        // not waited for: they are not expired any more, or the next run takes them. The
        // inner SELECT … FOR UPDATE re-checks the expiry on the row version it locks, and the
        // DELETE goes straight to those versions by ctid. Locking first writes every deleted
        // row twice (1.9x the plain DELETE's time measured at batch 10,000), so this is only
        // the way round a locked row, not the rule.
        self.execute(
            "cannot delete expired rows",
            "DELETE FROM task_state_store WHERE ctid = ANY(ARRAY(
                 SELECT ctid FROM task_state_store
                 WHERE id > $1::bigint AND id <= $2::bigint AND expires_at < $3
                 FOR UPDATE SKIP LOCKED))",
            &[&after_id, &up_to_id.unwrap_or(i64::MAX), &cutoff],
        )
    }

    fn expired_rows(
        &mut self,
        cutoff: Timestamp,
        after_id: i64,
        up_to_id: Option<i64>,
        limit: u64,
    ) -> Result<Vec<(i64, TaskEntry)>> {
        let rows = self.rows(
            "cannot read expired rows",
            &format!(
                "SELECT {TASK_COLUMNS}, id FROM task_state_store \
                 WHERE id > $1::bigint AND id <= $2::bigint AND expires_at < $3 ORDER BY id LIMIT $4"
            ),
            &[
                &after_id,
                &up_to_id.unwrap_or(i64::MAX),
                &to_system_time(cutoff),
                &i64::try_from(limit).unwrap_or(i64::MAX),
            ],
        )?;
        map_rows(rows, |row| Ok((int_column(row, 8)?, task_entry(row)?)))
            .map_err(pg_err(self.ctx("cannot read expired rows")))
    }

    fn delete_orphan_row(&mut self, asset_id: i64, key: &str) -> Result<u64> {
        self.execute(
            "cannot delete orphaned asset rows",
            &format!(
                r#"DELETE FROM asset_state_store WHERE asset_id = $1::bigint AND "key" = $2 AND {}"#,
                orphan_condition("asset_state_store")
            ),
            &[&asset_id, &key],
        )
    }

    fn delete_orphans(&mut self, limit: Option<u64>) -> Result<u64> {
        // As for task rows: rows a writer holds are skipped, the next run takes them.
        let sql = format!(
            "DELETE FROM asset_state_store WHERE ctid = ANY(ARRAY(
                 SELECT s.ctid FROM asset_state_store s WHERE {} LIMIT $1 FOR UPDATE OF s SKIP LOCKED))",
            orphan_condition("s")
        );
        let limit = limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        self.execute("cannot delete orphaned asset rows", &sql, &[&limit])
    }
}

impl Stats for PostgresStore {
    fn task_groups(&mut self, now: Timestamp, soon: Timestamp, by_task: bool) -> Result<Vec<TaskGroup>> {
        let what = "cannot read task_state_store";
        let task = if by_task { "task_id" } else { "NULL::text" };
        let group = if by_task { "dag_id, task_id" } else { "dag_id" };
        let order =
            if by_task { r#"dag_id COLLATE "C", task_id COLLATE "C""# } else { r#"dag_id COLLATE "C""# };
        // Sums are cast to bigint: PostgreSQL sums bigints into numeric.
        let sql = format!(
            "SELECT dag_id, {task}, count(*), coalesce(sum(octet_length(value)), 0)::bigint, \
             count(*) FILTER (WHERE expires_at < $1), count(*) FILTER (WHERE expires_at >= $1 AND expires_at < $2), \
             count(*) FILTER (WHERE expires_at IS NULL), min(updated_at), max(updated_at) \
             FROM task_state_store GROUP BY {group} ORDER BY {order}"
        );
        let rows = self.rows(what, &sql, &[&to_system_time(now), &to_system_time(soon)])?;
        map_rows(rows, |r| {
            Ok(TaskGroup {
                dag_id: r.try_get(0)?,
                task_id: r.try_get(1)?,
                rows: count_at(r, 2)?,
                value_bytes: count_at(r, 3)?,
                expired: count_at(r, 4)?,
                expiring_soon: count_at(r, 5)?,
                never_expiring: count_at(r, 6)?,
                oldest_update: r.try_get::<_, Option<PgTime>>(7)?.map(stored_time),
                newest_update: r.try_get::<_, Option<PgTime>>(8)?.map(stored_time),
            })
        })
        .map_err(pg_err(self.ctx(what)))
    }

    fn asset_groups(&mut self) -> Result<Vec<AssetGroup>> {
        let what = "cannot read asset_state_store";
        let rows = self.rows(
            what,
            "SELECT s.asset_id, a.name, count(*), coalesce(sum(octet_length(s.value)), 0)::bigint, \
             min(s.updated_at), max(s.updated_at) FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id \
             GROUP BY s.asset_id, a.name ORDER BY s.asset_id",
            &[],
        )?;
        map_rows(rows, |r| {
            Ok(AssetGroup {
                asset_id: int_column(r, 0)?,
                asset_name: r.try_get(1)?,
                rows: count_at(r, 2)?,
                value_bytes: count_at(r, 3)?,
                oldest_update: r.try_get::<_, Option<PgTime>>(4)?.map(stored_time),
                newest_update: r.try_get::<_, Option<PgTime>>(5)?.map(stored_time),
            })
        })
        .map_err(pg_err(self.ctx(what)))
    }

    fn largest_values(&mut self, limit: u64) -> Result<Vec<LargeValue>> {
        let what = "cannot read the largest values";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.rows(
            what,
            r#"SELECT dag_id, run_id, task_id, map_index, "key", octet_length(value)::bigint AS n
               FROM task_state_store ORDER BY n DESC LIMIT $1"#,
            &[&limit],
        )?;
        let mut found = map_rows(rows, |r| {
            Ok(LargeValue {
                scope: task_scope_label(r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, int_column(r, 3)?),
                key: r.try_get(4)?,
                bytes: count_at(r, 5)?,
            })
        })
        .map_err(pg_err(self.ctx(what)))?;
        let rows = self.rows(
            what,
            r#"SELECT s.asset_id, a.name, s."key", octet_length(s.value)::bigint AS n
               FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id ORDER BY n DESC LIMIT $1"#,
            &[&limit],
        )?;
        found.extend(
            map_rows(rows, |r| {
                Ok(LargeValue {
                    scope: asset_scope_label(int_column(r, 0)?, r.try_get::<_, Option<&str>>(1)?),
                    key: r.try_get(2)?,
                    bytes: count_at(r, 3)?,
                })
            })
            .map_err(pg_err(self.ctx(what)))?,
        );
        Ok(largest_first(found, limit))
    }

    fn table_sizes(&mut self) -> Result<Vec<(String, u64)>> {
        let mut sizes = Vec::new();
        for table in STATE_TABLES {
            // to_regclass resolves the name through search_path, as every other statement does.
            let bytes = self.count(
                "cannot read the table sizes",
                "SELECT pg_total_relation_size(to_regclass($1))",
                &[table],
            )?;
            sizes.push(((*table).to_string(), bytes));
        }
        Ok(sizes)
    }
}

/// The WHERE clause of a task scope, with map_index bound as NULL-matching-anything when all
/// map indices are meant, so one statement serves both forms of `clear`.
/// `dag_id, run_id, task_id, map_index` from `start` on.
fn task_place(row: &Row, start: usize) -> std::result::Result<Place, postgres::Error> {
    Ok(Place::Task(TaskScope {
        dag_id: row.try_get(start)?,
        run_id: row.try_get(start + 1)?,
        task_id: row.try_get(start + 2)?,
        map_index: int_column(row, start + 3)?,
    }))
}

fn sql_limit(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl PostgresStore {
    fn found_rows(
        &mut self,
        what: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        map: impl Fn(&Row) -> std::result::Result<FoundRow, postgres::Error>,
    ) -> Result<Vec<FoundRow>> {
        let rows = self.rows(what, sql, params)?;
        map_rows(rows, map).map_err(pg_err(self.ctx(what)))
    }

    /// Rows of both tables whose `measure` (a bigint SQL expression over the row's own
    /// columns, e.g. the key's length) exceeds `bound`, task rows first.
    fn over_bound(
        &mut self,
        what: &str,
        measure: &str,
        bound: u64,
        sample: u64,
        unit: &str,
    ) -> Result<Finding> {
        let (bound, limit) = (sql_limit(bound), sql_limit(sample));
        let tasks = Finding {
            count: self.count(
                what,
                &format!("SELECT count(*) FROM task_state_store t WHERE {measure} > $1::bigint"),
                &[&bound],
            )?,
            sample: self.found_rows(
                what,
                &format!(
                    r#"SELECT t.dag_id, t.run_id, t.task_id, t.map_index, t."key", {measure}
                       FROM task_state_store t WHERE {measure} > $1::bigint ORDER BY t.id LIMIT $2"#
                ),
                &[&bound, &limit],
                |r| {
                    Ok(FoundRow {
                        place: task_place(r, 0)?,
                        key: r.try_get(4)?,
                        detail: format!("{} {unit}", r.try_get::<_, i64>(5)?),
                    })
                },
            )?,
        };
        let assets = Finding {
            count: self.count(
                what,
                &format!("SELECT count(*) FROM asset_state_store t WHERE {measure} > $1::bigint"),
                &[&bound],
            )?,
            sample: self.found_rows(
                what,
                &format!(
                    r#"SELECT t.asset_id, a.name, t."key", {measure}
                       FROM asset_state_store t LEFT JOIN asset a ON a.id = t.asset_id
                       WHERE {measure} > $1::bigint ORDER BY t.asset_id, t."key" LIMIT $2"#
                ),
                &[&bound, &limit],
                |r| {
                    Ok(FoundRow {
                        place: Place::Asset { asset_id: int_column(r, 0)?, asset_name: r.try_get(1)? },
                        key: r.try_get(2)?,
                        detail: format!("{} {unit}", r.try_get::<_, i64>(3)?),
                    })
                },
            )?,
        };
        Ok(tasks.and(assets, sample))
    }
}

impl Diagnose for PostgresStore {
    fn mismatched_dag_runs(&mut self, sample: u64) -> Result<Finding> {
        let what = "cannot compare task rows with their dag runs";
        let from = "FROM task_state_store t JOIN dag_run d ON d.id = t.dag_run_id \
                    WHERE t.dag_id <> d.dag_id OR t.run_id <> d.run_id";
        Ok(Finding {
            count: self.count(what, &format!("SELECT count(*) {from}"), &[])?,
            sample: self.found_rows(
                what,
                &format!(
                    r#"SELECT t.dag_id, t.run_id, t.task_id, t.map_index, t."key", t.dag_run_id, d.dag_id, d.run_id
                       {from} ORDER BY t.id LIMIT $1"#
                ),
                &[&sql_limit(sample)],
                |r| {
                    Ok(FoundRow {
                        place: task_place(r, 0)?,
                        key: r.try_get(4)?,
                        detail: format!(
                            "dag_run {} is dag_id={} run_id={}",
                            int_column(r, 5)?,
                            quote(&r.try_get::<_, String>(6)?),
                            quote(&r.try_get::<_, String>(7)?)
                        ),
                    })
                },
            )?,
        })
    }

    fn task_rows_without_dag_run(&mut self, sample: u64) -> Result<Finding> {
        let what = "cannot look for task rows without a dag run";
        let from =
            "FROM task_state_store t WHERE NOT EXISTS (SELECT 1 FROM dag_run d WHERE d.id = t.dag_run_id)";
        Ok(Finding {
            count: self.count(what, &format!("SELECT count(*) {from}"), &[])?,
            sample: self.found_rows(
                what,
                &format!(
                    r#"SELECT t.dag_id, t.run_id, t.task_id, t.map_index, t."key", t.dag_run_id
                       {from} ORDER BY t.id LIMIT $1"#
                ),
                &[&sql_limit(sample)],
                |r| {
                    Ok(FoundRow {
                        place: task_place(r, 0)?,
                        key: r.try_get(4)?,
                        detail: format!("dag_run_id {} does not exist", int_column(r, 5)?),
                    })
                },
            )?,
        })
    }

    fn asset_rows_without_asset(&mut self, sample: u64) -> Result<Finding> {
        let what = "cannot look for asset rows without an asset";
        let from =
            "FROM asset_state_store s WHERE NOT EXISTS (SELECT 1 FROM asset a WHERE a.id = s.asset_id)";
        Ok(Finding {
            count: self.count(what, &format!("SELECT count(*) {from}"), &[])?,
            sample: self.found_rows(
                what,
                &format!(r#"SELECT s.asset_id, s."key" {from} ORDER BY s.asset_id, s."key" LIMIT $1"#),
                &[&sql_limit(sample)],
                |r| {
                    let asset_id = int_column(r, 0)?;
                    Ok(FoundRow {
                        place: Place::Asset { asset_id, asset_name: None },
                        key: r.try_get(1)?,
                        detail: format!("asset id {asset_id} does not exist"),
                    })
                },
            )?,
        })
    }

    fn long_keys(&mut self, max_chars: u64, sample: u64) -> Result<Finding> {
        self.over_bound(
            "cannot measure the keys",
            r#"char_length(t."key")::bigint"#,
            max_chars,
            sample,
            "characters",
        )
    }

    fn large_values(&mut self, max_bytes: u64, sample: u64) -> Result<Finding> {
        self.over_bound(
            "cannot measure the values",
            "octet_length(t.value)::bigint",
            max_bytes,
            sample,
            "bytes",
        )
    }

    fn asset_rows_after(&mut self, after: Option<(i64, &str)>, limit: u64) -> Result<Vec<AssetEntry>> {
        // The key comparison and the ORDER BY both use the column's own collation, so the
        // pages follow one order.
        let sql = format!(
            r#"SELECT {ASSET_COLUMNS} FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id
               WHERE $1::bigint IS NULL OR s.asset_id > $1::bigint OR (s.asset_id = $1::bigint AND s."key" > $2::text)
               ORDER BY s.asset_id, s."key" LIMIT $3"#
        );
        let rows = self.rows(
            "cannot read asset_state_store",
            &sql,
            &[&after.map(|a| a.0), &after.map(|a| a.1), &sql_limit(limit)],
        )?;
        map_rows(rows, asset_entry).map_err(pg_err(self.ctx("cannot read asset_state_store")))
    }
}

const TASK_SCOPE_WHERE: &str =
    "dag_id = $1 AND run_id = $2 AND task_id = $3 AND ($4::bigint IS NULL OR map_index = $4::bigint)";

type Param = Box<dyn ToSql + Sync>;

/// `list`'s statement and its parameters: only the filters given become clauses. Text keys
/// sort in byte order (`COLLATE "C"`), as SQLite sorts them, whatever the database's collation.
fn list_task_statement(filter: &TaskFilter, page: Page) -> (String, Vec<Param>) {
    let (where_sql, mut args) = task_filter_where(filter, None);
    args.push(Box::new(limit_value(page)));
    let limit = args.len();
    args.push(Box::new(offset_value(page)));
    let offset = args.len();
    let sql = format!(
        r#"SELECT {TASK_COLUMNS} FROM task_state_store {where_sql}
           ORDER BY dag_id COLLATE "C", run_id COLLATE "C", task_id COLLATE "C", map_index, "key" COLLATE "C"
           LIMIT ${limit} OFFSET ${offset}"#
    );
    (sql, args)
}

/// The WHERE clause of `list`'s task filters (and of a primary-key page), with its values.
fn task_filter_where(filter: &TaskFilter, after_id: Option<i64>) -> (String, Vec<Param>) {
    let mut clauses: Vec<String> = Vec::new();
    let mut args: Vec<Param> = Vec::new();
    let mut bind = |clauses: &mut Vec<String>, template: &str, value: Param| {
        args.push(value);
        clauses.push(template.replace('?', &format!("${}", args.len())));
    };
    for (template, value) in
        [("dag_id = ?", &filter.dag_id), ("run_id = ?", &filter.run_id), ("task_id = ?", &filter.task_id)]
    {
        if let Some(v) = value {
            bind(&mut clauses, template, Box::new(v.clone()));
        }
    }
    if let Some(map_index) = filter.map_index {
        bind(&mut clauses, "map_index = ?::bigint", Box::new(map_index));
    }
    if let Some(cutoff) = filter.expired_before {
        bind(&mut clauses, "expires_at < ?", Box::new(to_system_time(cutoff)));
    }
    if filter.external_only {
        bind(&mut clauses, "value LIKE ? ESCAPE '!'", Box::new(EXTERNAL_REF_LIKE));
    }
    if let Some(after_id) = after_id {
        bind(&mut clauses, "id > ?::bigint", Box::new(after_id));
    }
    let where_sql =
        if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
    (where_sql, args)
}

// ---------------------------------------------------------------- the sandbox

/// A sandbox: Airflow's tables in an existing database (and schema, created when missing).
pub(crate) struct PostgresSandbox {
    client: Client,
    location: String,
    quoted_schema: Option<String>,
}

impl PostgresSandbox {
    pub(crate) fn open(url: &DbUrl, schema: Option<&str>) -> Result<Self> {
        let quoted_schema = schema.map(quote_schema).transpose()?;
        let (client, location) = connect(url, schema, Access::ReadWrite)?;
        Ok(PostgresSandbox { client, location, quoted_schema })
    }

    fn table_exists(&mut self, name: &str) -> Result<bool> {
        self.client
            .query_one("SELECT to_regclass(quote_ident($1)) IS NOT NULL", &[&name])
            .and_then(|r| r.try_get(0))
            .map_err(pg_err(format!("cannot read {}", self.location)))
    }

    fn require_marker(&mut self) -> Result<()> {
        if self.table_exists(schema::SANDBOX_MARKER_TABLE)? {
            Ok(())
        } else {
            Err(Error::Usage(format!(
                "{} was not created by `state-store sandbox create`; sandbox commands never change a real metastore",
                self.location
            )))
        }
    }
}

impl super::Sandbox for PostgresSandbox {
    fn create(&mut self) -> Result<()> {
        let ctx = format!("cannot create the tables in {}", self.location);
        let mut tx = self.client.transaction().map_err(pg_err(&ctx))?;
        if let Some(quoted) = &self.quoted_schema {
            tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {quoted}")).map_err(pg_err(&ctx))?;
        }
        let tables: Vec<&str> = schema::AIRFLOW_TABLES.to_vec();
        let existing: i64 = tx
            .query_one(
                "SELECT count(*) FROM unnest($1::text[]) AS t(name) WHERE to_regclass(quote_ident(t.name)) IS NOT NULL",
                &[&tables],
            )
            .and_then(|r| r.try_get(0))
            .map_err(pg_err(format!("cannot read {}", self.location)))?;
        if existing > 0 {
            return Err(Error::Usage(format!(
                "{} already has Airflow tables; a sandbox starts empty",
                self.location
            )));
        }
        for statement in schema::POSTGRES_DDL {
            tx.batch_execute(statement).map_err(pg_err(&ctx))?;
        }
        tx.execute(
            "INSERT INTO alembic_version (version_num) VALUES ($1)",
            &[&schema::AIRFLOW_33_ALEMBIC_REVISION],
        )
        .map_err(pg_err(&ctx))?;
        tx.batch_execute(&format!(
            "CREATE TABLE {} (created_at TIMESTAMP WITH TIME ZONE NOT NULL)",
            schema::SANDBOX_MARKER_TABLE
        ))
        .map_err(pg_err(&ctx))?;
        tx.execute(
            &format!("INSERT INTO {} (created_at) VALUES ($1)", schema::SANDBOX_MARKER_TABLE),
            &[&to_system_time(Timestamp::now())],
        )
        .map_err(pg_err(&ctx))?;
        tx.commit().map_err(pg_err(ctx))
    }

    fn add_dag_run(&mut self, dag_id: &str, run_id: &str) -> Result<i64> {
        self.require_marker()?;
        let now = to_system_time(Timestamp::now());
        let ctx = format!("cannot add the dag run to {}", self.location);
        let row = self
            .client
            .query_one(
                "INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, queued_at, start_date, created_at, updated_at) \
                 VALUES ($1, $2, 'manual', 'running', $3, $3, $3, $3, $3) RETURNING id",
                &[&dag_id, &run_id, &now],
            )
            .map_err(pg_err(&ctx))?;
        int_column(&row, 0).map_err(pg_err(ctx))
    }

    fn add_task_instance(&mut self, dag_id: &str, run_id: &str, task_id: &str, map_index: i64) -> Result<()> {
        self.require_marker()?;
        // As the scheduler creates it: no state yet, try 0, the default pool. `md5(…)::uuid`
        // makes a random uuid on every server version (gen_random_uuid needs PostgreSQL 13).
        self.client
            .execute(
                "INSERT INTO task_instance (id, task_id, dag_id, run_id, map_index, try_number, max_tries, \
                 pool, pool_slots, queue, priority_weight, operator, updated_at) \
                 VALUES (md5(random()::text || clock_timestamp()::text)::uuid, $1, $2, $3, $4::bigint, 0, 0, \
                 'default_pool', 1, 'default', 1, 'PythonOperator', $5)",
                &[&task_id, &dag_id, &run_id, &map_index, &to_system_time(Timestamp::now())],
            )
            .map_err(pg_err(format!("cannot add the task instance to {}", self.location)))?;
        Ok(())
    }

    fn add_asset(&mut self, name: &str, uri: &str, active: bool) -> Result<i64> {
        self.require_marker()?;
        let ctx = format!("cannot add the asset to {}", self.location);
        let now = to_system_time(Timestamp::now());
        let mut tx = self.client.transaction().map_err(pg_err(&ctx))?;
        let row = tx
            .query_one(
                r#"INSERT INTO asset (name, uri, "group", extra, created_at, updated_at)
                   VALUES ($1, $2, 'asset', '{}', $3, $3) RETURNING id"#,
                &[&name, &uri, &now],
            )
            .map_err(pg_err(&ctx))?;
        let id = int_column(&row, 0).map_err(pg_err(&ctx))?;
        if active {
            tx.execute("INSERT INTO asset_active (name, uri) VALUES ($1, $2)", &[&name, &uri])
                .map_err(pg_err(&ctx))?;
        }
        tx.commit().map_err(pg_err(ctx))?;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> DbUrl {
        DbUrl::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn options(text: &str) -> ConnectOptions {
        ConnectOptions::from_url(&url(text)).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn refused(text: &str) -> String {
        match ConnectOptions::from_url(&url(text)) {
            Ok(o) => panic!("{text} accepted: {o:?}"),
            Err(e) => {
                assert!(matches!(e, Error::Config(_)), "{text}: {e:?}");
                e.to_string()
            }
        }
    }

    fn tcp(host: &str, port: u16) -> Endpoint {
        Endpoint::Tcp { host: host.to_string(), port }
    }

    fn socket(dir: &str, port: u16) -> Endpoint {
        Endpoint::Socket { dir: PathBuf::from(dir), port }
    }

    #[test]
    fn url_parts_become_connect_options() {
        let o = options("postgresql+psycopg2://airflow:s%40cret@db.example:6432/airflow_db");
        assert_eq!(o.endpoints, vec![tcp("db.example", 6432)]);
        assert_eq!(o.user.as_deref(), Some("airflow"));
        assert_eq!(o.password.as_deref(), Some("s@cret"));
        assert_eq!(o.dbname.as_deref(), Some("airflow_db"));
        // libpq's default: TLS when the server offers it, no certificate check.
        assert_eq!(o.tls, TlsMode::Prefer);
        assert_eq!(o.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(o.application_name, "state-store");
        assert_eq!(
            o.location(Some("airflow")),
            "PostgreSQL database airflow_db on db.example:6432 (schema \"airflow\")"
        );
        assert!(!o.location(None).contains("s@cret"));

        let o = options("postgres://h/db");
        assert_eq!(o.endpoints, vec![tcp("h", 5432)]);
        assert_eq!((o.user, o.password), (None, None));
        let o = options("postgresql+psycopg://u@[::1]:5433/db");
        assert_eq!(o.endpoints, vec![tcp("::1", 5433)]);
        assert_eq!(o.location(None), "PostgreSQL database db on [::1]:5433");
        // An empty user or database is libpq's default, not an empty name.
        let o = options("postgresql://@h/");
        assert_eq!((o.user, o.dbname), (None, None));
    }

    #[test]
    fn sockets_and_host_lists() {
        let o = options("postgresql://airflow@/airflow?host=/var/run/postgresql");
        assert_eq!(o.endpoints, vec![socket("/var/run/postgresql", 5432)]);
        assert_eq!(o.location(None), "PostgreSQL database airflow on /var/run/postgresql/.s.PGSQL.5432");
        let o = options("postgresql://u@/db?host=/tmp&port=5433");
        assert_eq!(o.endpoints, vec![socket("/tmp", 5433)]);
        // No host at all: libpq's socket directories.
        let o = options("postgresql:///db");
        assert_eq!(o.endpoints, vec![socket("/var/run/postgresql", 5432), socket("/tmp", 5432)]);
        let o = options("postgresql://:6000/db");
        assert_eq!(o.endpoints, vec![socket("/var/run/postgresql", 6000), socket("/tmp", 6000)]);
        // SQLAlchemy's multi-host forms.
        let o = options("postgresql://u:p@/db?host=a:5433&host=b");
        assert_eq!(o.endpoints, vec![tcp("a", 5433), tcp("b", 5432)]);
        let o = options("postgresql://u:p@/db?host=a,b&port=1,2");
        assert_eq!(o.endpoints, vec![tcp("a", 1), tcp("b", 2)]);
        let o = options("postgresql://u:p@/db?host=[fe80::1]:7,[::2]");
        assert_eq!(o.endpoints, vec![tcp("fe80::1", 7), tcp("::2", 5432)]);

        assert!(refused("postgresql://u@h/db?host=/tmp").contains("not both"));
        assert!(refused("postgresql://u@h:1/db?port=2").contains("not both"));
        assert!(refused("postgresql://u@/db?host=a,b,c&port=1,2").contains("number of ports"));
        assert!(refused("postgresql://u@/db?host=a:x").contains("invalid port"));
        assert!(refused("postgresql://u@/db?host=a&port=0").contains("port=0"));
    }

    #[test]
    fn tls_and_timeouts() {
        for (mode, expected) in [
            ("disable", TlsMode::Disable),
            ("allow", TlsMode::Allow),
            ("prefer", TlsMode::Prefer),
            ("require", TlsMode::Require),
            ("verify-ca", TlsMode::VerifyCa),
            ("verify-full", TlsMode::VerifyFull),
        ] {
            assert_eq!(options(&format!("postgresql://h/db?sslmode={mode}")).tls, expected);
        }
        assert!(refused("postgresql://h/db?sslmode=required").contains("sslmode=required"));
        let o = options(
            "postgresql://h/db?sslmode=verify-full&sslrootcert=/etc/ca.pem&sslcert=/c.pem&sslkey=/k.pem",
        );
        assert_eq!(o.root_cert.as_deref(), Some("/etc/ca.pem"));
        assert_eq!(o.client_cert, Some(PathBuf::from("/c.pem")));
        assert_eq!(o.client_key, Some(PathBuf::from("/k.pem")));
        // TLS never runs over a Unix socket, as in libpq.
        let config = options("postgresql://u@/db?host=/tmp&sslmode=require").config();
        assert_eq!(config.get_ssl_mode(), SslMode::Disable);
        let config = options("postgresql://u@h/db?sslmode=verify-ca").config();
        assert_eq!(config.get_ssl_mode(), SslMode::Require);

        assert_eq!(options("postgresql://h/db?connect_timeout=30").connect_timeout, Duration::from_secs(30));
        assert_eq!(options("postgresql://h/db?connect_timeout=1").connect_timeout, MIN_CONNECT_TIMEOUT);
        // libpq's "forever" is bounded here.
        assert_eq!(options("postgresql://h/db?connect_timeout=0").connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        assert!(refused("postgresql://h/db?connect_timeout=10s").contains("connect_timeout=10s"));
        let config = options("postgresql://h/db").config();
        assert_eq!(config.get_connect_timeout(), Some(&DEFAULT_CONNECT_TIMEOUT));
    }

    #[test]
    fn other_parameters() {
        let o = options(
            "postgresql://h/db?application_name=nightly&options=-c%20statement_timeout%3D5000\
             &target_session_attrs=read-write&keepalives_idle=30&tcp_user_timeout=1500&client_encoding=utf8",
        );
        assert_eq!(o.application_name, "nightly");
        assert_eq!(o.options.as_deref(), Some("-c statement_timeout=5000"));
        assert!(o.read_write_only);
        assert_eq!(o.keepalives_idle, Some(Duration::from_secs(30)));
        assert_eq!(o.tcp_user_timeout, Some(Duration::from_millis(1500)));
        // Unknown keys are refused, so a misspelt sslmode cannot silently weaken the link.
        let msg = refused("postgresql://u:pw@h/db?ssl_mode=require");
        assert!(msg.contains("\"ssl_mode\"") && msg.contains("sslmode"), "{msg}");
        assert!(!msg.contains("pw@"), "{msg}");
        assert!(refused("postgresql://h/db?client_encoding=latin1").contains("UTF8"));
        assert!(refused("postgresql://h/db?target_session_attrs=standby").contains("standby"));
        assert!(refused("postgresql://h/db?gssencmode=require").contains("GSSAPI"));
    }

    #[test]
    fn schema_names_are_quoted_exactly() {
        assert_eq!(quote_schema("airflow").ok(), Some("\"airflow\"".to_string()));
        assert_eq!(quote_schema("Airflow Prod").ok(), Some("\"Airflow Prod\"".to_string()));
        assert_eq!(quote_schema("a\"b; DROP TABLE x").ok(), Some("\"a\"\"b; DROP TABLE x\"".to_string()));
        assert_eq!(quote_schema(&"é".repeat(31)).map(|q| q.len()).ok(), Some(64));
        for bad in ["", "a\0b", "air\nflow", "tab\there", "\u{7f}", &"x".repeat(64), &"é".repeat(32)] {
            let e = quote_schema(bad);
            assert!(matches!(e, Err(Error::Config(_))), "{bad:?}: {e:?}");
        }
    }

    #[test]
    fn timestamps_round_trip_to_the_microsecond() {
        for micros in [0, 1, -1, 1_764_288_000_123_456, -62_135_596_800_000_000, 253_402_300_799_999_999] {
            let ts = Timestamp::from_micros(micros);
            assert_eq!(from_system_time(to_system_time(ts)), ts, "{micros}");
        }
        assert_eq!(stored_time(PgTime::PosInfinity), StoredTime::Unreadable("infinity".to_string()));
        assert_eq!(stored_time(PgTime::NegInfinity), StoredTime::Unreadable("-infinity".to_string()));
    }

    #[test]
    fn list_statement_binds_only_the_filters_given() {
        let page = Page { limit: None, offset: 0 };
        let (sql, args) = list_task_statement(&TaskFilter::default(), page);
        assert_eq!(args.len(), 2);
        assert!(sql.contains("LIMIT $1 OFFSET $2") && !sql.contains("WHERE"), "{sql}");
        let filter = TaskFilter {
            dag_id: Some("d".into()),
            task_id: Some("t".into()),
            map_index: Some(3),
            expired_before: Some(Timestamp::now()),
            ..TaskFilter::default()
        };
        let (sql, args) = list_task_statement(&filter, Page { limit: Some(5), offset: 10 });
        assert_eq!(args.len(), 6);
        assert!(
            sql.contains("WHERE dag_id = $1 AND task_id = $2 AND map_index = $3::bigint AND expires_at < $4"),
            "{sql}"
        );
        assert!(sql.contains("LIMIT $5 OFFSET $6"), "{sql}");
        assert!(sql.contains(r#""key" COLLATE "C""#), "{sql}");
    }

    #[test]
    fn map_index_must_fit_the_integer_column() {
        assert!(check_storable_map_index(i64::from(i32::MAX)).is_ok());
        assert!(matches!(check_storable_map_index(i64::from(i32::MAX) + 1), Err(Error::Usage(_))));
    }
}
