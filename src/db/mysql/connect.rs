//! Connecting to MySQL and MariaDB: the options SQLAlchemy users put in the URL for
//! mysqlclient and PyMySQL (`unix_socket`, `connect_timeout`, the `ssl_*` family), and the
//! session set-up every connection runs first.

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use mysql::{Conn, OptsBuilder, SslOpts};

use crate::db::Timeouts;
use crate::error::{Error, Result};
use crate::text::quote;
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

/// The bounds of `timeouts` on a session, whole seconds of at least 1: lock waits on rows
/// (InnoDB waits 50 s by default) and on tables' metadata (`LOCK TABLES`, `ALTER`, `airflow db
/// migrate`: a day by default, reads included); how long the server waits for a client in the
/// middle of a packet; and `wait_timeout`, how long it keeps a session nobody uses (8 hours by
/// default), which also frees the `GET_LOCK` of a clean whose client is gone. The values are
/// numbers formatted here, never text from outside.
fn session_bounds(timeouts: &Timeouts) -> [String; 2] {
    let secs = |d: Duration| d.as_secs().max(1);
    let lock = secs(timeouts.lock);
    let stall = secs(timeouts.stall());
    [
        format!("SET SESSION innodb_lock_wait_timeout = {lock}, SESSION lock_wait_timeout = {lock}"),
        format!(
            "SET SESSION wait_timeout = {}, SESSION net_read_timeout = {stall}, SESSION net_write_timeout = {stall}",
            secs(timeouts.idle)
        ),
    ]
}

/// 1 GiB, the largest `max_allowed_packet` MySQL and MariaDB know.
const CLIENT_MAX_PACKET: usize = 1 << 30;

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
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConnectPlan {
    endpoint: Endpoint,
    user: Option<String>,
    password: Option<Password>,
    database: String,
    tls: Option<Tls>,
    connect_timeout: Duration,
}

/// A password, which `Debug` never shows.
#[derive(Clone, PartialEq, Eq)]
struct Password(String);

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
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
        _ => Err(invalid(url, key, value, "true or false")),
    }
}

/// The URL refused, its words `before` and `after` it.
fn refused(url: &DbUrl, before: &str, after: &str) -> anyhow::Error {
    Error::Config(format!("{before}[database] sql_alchemy_conn {}{after}", url.redacted())).into()
}

/// `key=value` of the URL's query refused: not one of what was `expected`.
fn invalid(url: &DbUrl, key: &str, value: &str, expected: &str) -> anyhow::Error {
    refused(url, &format!("invalid {key}={} in ", quote(value)), &format!(": expected {expected}"))
}

/// The query keys understood here, for the message that refuses any other (as PostgreSQL's
/// are refused): a key this tool ignored could send it elsewhere than Airflow goes
/// (`read_default_file`, `read_default_group` make mysqlclient read host, user and password
/// from an option file). `charset` (utf8mb4, which every session sets), `use_unicode`,
/// `binary_prefix`, `local_infile` and `program_name` change nothing of where or how this tool
/// connects, and are taken so that Airflow's usual URLs work; the `ssl_*` keys are
/// [`tls_from_url`]'s.
const KNOWN_KEYS: &str = "unix_socket, connect_timeout, user, password, passwd, ssl_mode, ssl, ssl_disabled, \
     ssl_ca, ssl_check_hostname, ssl_verify_cert, ssl_verify_identity, charset, use_unicode, binary_prefix, \
     local_infile, program_name";

/// Keys [`tls_from_url`] refuses with its own words.
const UNSUPPORTED_TLS_KEYS: [&str; 4] = ["ssl_cert", "ssl_key", "ssl_capath", "ssl_cipher"];

/// Refuses every query key not in [`KNOWN_KEYS`], all of them named at once, and a charset
/// other than UTF-8's.
fn check_keys(url: &DbUrl) -> Result<()> {
    let mut unknown: Vec<String> = Vec::new();
    for (key, _) in &url.query {
        let known = KNOWN_KEYS.split(", ").any(|k| k == key) || UNSUPPORTED_TLS_KEYS.contains(&key.as_str());
        if !known && !unknown.contains(&quote(key)) {
            unknown.push(quote(key));
        }
    }
    if !unknown.is_empty() {
        let unknown = unknown.join(", ");
        let problem =
            format!(": unsupported connection parameter(s) {unknown} (state-store understands {KNOWN_KEYS})");
        return Err(refused(url, "", &problem));
    }
    if let Some(charset) = url.query_value("charset")
        && !["utf8mb4", "utf8", "utf8mb3"].contains(&charset.trim().to_ascii_lowercase().as_str())
    {
        let problem = format!(
            ": charset={charset}: state-store talks utf8mb4, which holds any text Airflow stores; give \
             charset=utf8mb4 or leave it out"
        );
        return Err(refused(url, "", &problem));
    }
    Ok(())
}

impl ConnectPlan {
    fn from_url(url: &DbUrl) -> Result<ConnectPlan> {
        check_keys(url)?;
        let database = url.database.clone().filter(|d| !d.is_empty()).ok_or_else(|| {
            refused(url, "", " names no database: expected mysql://<user>:<password>@<host>:3306/<database>")
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
                _ => return Err(invalid(url, "connect_timeout", text, "whole seconds > 0")),
            },
        };
        // As SQLAlchemy passes them to the driver: the query's user and password (mysqlclient
        // also says `passwd`) win over the URL's own.
        let query = |key: &str| url.query_value(key).map(str::to_string);
        Ok(ConnectPlan {
            endpoint,
            user: query("user").or_else(|| url.username.clone()),
            password: query("password")
                .or_else(|| query("passwd"))
                .or_else(|| url.password.clone())
                .map(Password),
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

    fn opts(&self, timeouts: &Timeouts) -> OptsBuilder {
        let stall = timeouts.stall();
        let mut init: Vec<String> = SESSION_SETUP.iter().map(|s| (*s).to_string()).collect();
        init.extend(session_bounds(timeouts));
        let builder = OptsBuilder::new()
            .user(self.user.clone())
            .pass(self.password.as_ref().map(|p| p.0.clone()))
            .db_name(Some(self.database.clone()))
            // The driver would otherwise switch a loopback TCP connection to the server's
            // socket behind the user's back.
            .prefer_socket(false)
            .tcp_connect_timeout(Some(self.connect_timeout))
            // The largest packet this client accepts (MySQL's own upper bound). Left unset, the
            // driver takes the server's `max_allowed_packet` (16 MiB on MariaDB) and then
            // refuses to read back a row whose MEDIUMTEXT value is close to 16 MiB.
            .max_allowed_packet(Some(CLIENT_MAX_PACKET))
            // Socket timeouts: a server or a network that stops answering (a proxy or NAT that
            // stalls, a failover without a reset) fails the call in `stall`, exit 4. Keepalives
            // find a peer that is gone in about 25 s while nothing is being sent.
            .read_timeout(Some(stall))
            .write_timeout(Some(stall))
            .tcp_keepalive_time_ms(Some(10_000))
            .tcp_keepalive_probe_interval_secs(Some(5))
            .tcp_keepalive_probe_count(Some(3))
            .tcp_user_timeout_ms(u32::try_from(stall.as_millis()).ok())
            .init(init);
        let builder = match &self.endpoint {
            Endpoint::Tcp { host, port } => builder.ip_or_hostname(Some(host.clone())).tcp_port(*port),
            Endpoint::Socket(path) => builder.socket(Some(path.to_string_lossy().into_owned())),
        };
        match &self.tls {
            None => builder,
            Some(tls) => builder.ssl_opts(
                SslOpts::default()
                    .with_root_cert_path(tls.ca.clone().map(Cow::Owned))
                    // `ssl_ca` is the only trust anchor, as PyMySQL's context built from it
                    // alone: the system's roots are not added to it.
                    .with_disable_built_in_roots(tls.ca.is_some())
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
    for key in UNSUPPORTED_TLS_KEYS {
        if url.query_value(key).is_some() {
            let supported =
                "ssl_mode, ssl, ssl_ca, ssl_check_hostname, ssl_verify_cert and ssl_verify_identity";
            let after = format!(" is not supported by state-store (it supports {supported})");
            return Err(refused(url, &format!("{key} in "), &after));
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
                let expected = "DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY";
                return Err(invalid(url, "ssl_mode", text, expected));
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
pub(super) fn describe(e: &mysql::Error) -> String {
    match e {
        // What the socket's read and write timeouts give (EAGAIN on Linux).
        e if timed_out(e) => "no answer from the server in time: the connection stalled ([state_store] \
             database_timeout bounds every wait)"
            .to_string(),
        mysql::Error::IoError(inner) => inner.to_string(),
        mysql::Error::CodecError(inner) => inner.to_string(),
        mysql::Error::MySqlError(inner) => inner.to_string(),
        mysql::Error::DriverError(inner) => inner.to_string(),
        mysql::Error::UrlError(inner) => inner.to_string(),
        mysql::Error::TlsError(inner) => format!("TLS: {inner}"),
        other => other.to_string(),
    }
}

/// Whether the error is a socket timeout, directly or in the packet codec's error.
fn timed_out(e: &mysql::Error) -> bool {
    // The driver's own error does not name its source: start from the inner ones.
    let mut source: Option<&(dyn std::error::Error + 'static)> = match e {
        mysql::Error::IoError(inner) => Some(inner),
        mysql::Error::CodecError(inner) => Some(inner),
        other => Some(other),
    };
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && matches!(io.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        source = error.source();
    }
    false
}

/// Connects within the plan's timeout, handshake, TLS, login and session setup included.
pub(super) fn connect(url: &DbUrl, timeouts: &Timeouts) -> Result<(Conn, String)> {
    let plan = ConnectPlan::from_url(url)?;
    let location = plan.location();
    let context = format!("cannot connect to {location}");
    let opts = plan.opts(timeouts);
    match crate::db::within(plan.connect_timeout, move || Conn::new(opts)) {
        Some(Ok(conn)) => Ok((conn, location)),
        Some(Err(e)) => Err(Error::db(context, describe(&e)).into()),
        None => {
            Err(Error::db(context, format!("no answer within {} s", plan.connect_timeout.as_secs())).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::kind;

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
        assert_eq!(p.password.as_ref().map(|p| p.0.as_str()), Some("p/ss"));
        assert_eq!(p.database, "airflow");
        assert_eq!(p.tls, None);
        assert_eq!(p.connect_timeout, CONNECT_TIMEOUT);
        assert_eq!(p.location(), "MySQL database airflow on db.example:3307");
        assert!(!format!("{p:?}").contains("p/ss"));
    }

    #[test]
    fn unknown_parameters_are_refused_and_airflows_usual_ones_taken() {
        let err =
            plan("mysql://u:secret@h/db?read_default_file=/etc/my.cnf&ssl_mode=REQUIRED&x=1").unwrap_err();
        let text = err.to_string();
        assert!(matches!(kind(&err), Some(Error::Config(_))), "{text}");
        assert!(
            text.contains("parameter(s) \"read_default_file\", \"x\" (state-store understands"),
            "{text}"
        );
        assert!(!text.contains("secret"), "{text}");
        assert!(plan("mysql://u@h/db?charset=latin1").unwrap_err().to_string().contains("charset=latin1"));
        let p =
            plan("mysql+mysqldb://u@h/db?charset=utf8mb4&use_unicode=1&binary_prefix=true&local_infile=0")
                .expect("plan");
        assert_eq!(p.endpoint, Endpoint::Tcp { host: "h".into(), port: 3306 });
        assert!(plan("mysql://u@h/db?ssl_cert=/c.pem").unwrap_err().to_string().contains("ssl_cert in"));
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
            assert!(matches!(kind(&err), Some(Error::Config(_))), "{url}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }

    #[test]
    fn every_session_gets_the_bounds() {
        let t = Timeouts::new(Duration::from_secs(30));
        assert_eq!(
            session_bounds(&t),
            [
                "SET SESSION innodb_lock_wait_timeout = 10, SESSION lock_wait_timeout = 10".to_string(),
                "SET SESSION wait_timeout = 120, SESSION net_read_timeout = 35, SESSION net_write_timeout = 35"
                    .to_string(),
            ]
        );
        // Whole seconds, at least 1: 0 is not a wait MySQL takes.
        assert!(session_bounds(&t.with_lock(Duration::from_millis(300)))[0].contains("= 1,"));
    }

    #[test]
    fn connect_timeout_is_bounded_and_overridable() {
        assert_eq!(
            plan("mysql://db/a?connect_timeout=3").expect("plan").connect_timeout,
            Duration::from_secs(3)
        );
        assert!(matches!(
            plan("mysql://db/a?connect_timeout=0").err().as_ref().and_then(kind),
            Some(Error::Config(_))
        ));
        assert!(matches!(
            plan("mysql://db/a?connect_timeout=soon").err().as_ref().and_then(kind),
            Some(Error::Config(_))
        ));
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
            assert!(matches!(kind(&err), Some(Error::Config(_))), "{url}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }
}
