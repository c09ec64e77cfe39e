//! Connecting to PostgreSQL: the libpq parameters that Airflow users put in the URL's query
//! (`sslmode`, `sslrootcert`, `host=/socket/dir`, `connect_timeout`, …) with libpq's meaning,
//! TLS, and the session set-up. A parameter this tool does not understand is refused rather
//! than silently dropped, since dropping one such as `sslmode` could weaken the connection.

use std::path::{Path, PathBuf};
use std::time::Duration;

use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode};
use openssl::x509::X509;
use openssl::x509::store::{X509Store, X509StoreBuilder};
use postgres::Client;
use postgres::config::{SslMode, TargetSessionAttrs};
use postgres_openssl::MakeTlsConnector;

use super::environment::{self, Environment, REFUSED, Target};
use crate::db::{Access, Timeouts};
use crate::error::{Error, Result};
use crate::text::quote;
use crate::url::DbUrl;

/// Without `connect_timeout` in the URL libpq waits for as long as the kernel does (minutes);
/// a cron job against a server that is down must fail fast instead.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// TCP keepalive defaults (libpq's `keepalives_idle`, `keepalives_interval`,
/// `keepalives_count`), when the URL gives none.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_COUNT: u32 = 3;
/// libpq's floor for `connect_timeout`.
const MIN_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const DEFAULT_PORT: u16 = 5432;
/// Where libpq looks for the server's socket when the URL names no host: Debian's build (the
/// one in Airflow's images and psycopg's wheels) uses the first, upstream PostgreSQL the second.
const DEFAULT_SOCKET_DIRS: &[&str] = &["/var/run/postgresql", "/tmp"];
/// PostgreSQL truncates longer identifiers (NAMEDATALEN - 1 bytes).
const MAX_IDENTIFIER_BYTES: usize = 63;

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

/// Everything the URL says about the connection, checked before any socket is opened: the
/// driver's configuration, and what the TLS connector and the messages need.
#[derive(Debug, Clone)]
struct ConnectOptions {
    config: postgres::Config,
    endpoints: Vec<Endpoint>,
    dbname: Option<String>,
    tls: TlsMode,
    /// `sslrootcert`: a file, or `system` for the system's trusted roots.
    root_cert: Option<String>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
    connect_timeout: Duration,
    /// libpq's warnings about the password file, for the caller to show.
    warnings: Vec<String>,
}

/// The query keys understood here, for the message that refuses any other.
const KNOWN_KEYS: &str = "user, password, dbname, host, port, sslmode, sslrootcert, sslcert, sslkey, \
     connect_timeout, application_name, options, target_session_attrs, keepalives, keepalives_idle, \
     keepalives_interval, keepalives_count, tcp_user_timeout, client_encoding, gssencmode";

fn config_error(url: &DbUrl, problem: &str) -> anyhow::Error {
    Error::Config(format!("[database] sql_alchemy_conn {}: {problem}", url.redacted())).into()
}

/// The URL's `key` as a whole number, as libpq's integer options take it; `unit` says what it
/// counts in the message that refuses anything else.
fn whole<T: std::str::FromStr>(url: &DbUrl, key: &str, unit: &str) -> Result<Option<T>> {
    let number = |text: &str| {
        text.trim()
            .parse()
            .map_err(|_| config_error(url, &format!("{key}={text} is not a whole number{unit}")))
    };
    url.query_value(key).map(number).transpose()
}

impl ConnectOptions {
    /// The URL's connection, each part it lacks taken from libpq's environment variables, then
    /// the password from the password file when none was given, as libpq does.
    fn from_url(url: &DbUrl, env: &Environment) -> Result<ConnectOptions> {
        if let Some((var, why)) = REFUSED.iter().find(|(var, _)| env.var(var).is_some()) {
            return Err(config_error(url, &format!("{var} is set: {why}")));
        }
        let (filled, used) = environment::fill(url, env);
        let mut options = ConnectOptions::from_filled(&filled).map_err(|e| match e.downcast::<Error>() {
            // The message shows the URL as filled (its password masked); it names the variables too.
            Ok(Error::Config(message)) if !used.is_empty() => {
                Error::Config(format!("{message} ({} from the environment)", used.join(", "))).into()
            }
            Ok(other) => other.into(),
            Err(e) => e,
        })?;
        if options.config.get_password().is_none_or(<[u8]>::is_empty) {
            options.password_from_file(env);
        }
        Ok(options)
    }

    /// libpq's password file, matched on each place to try in turn.
    fn password_from_file(&mut self, env: &Environment) {
        let Some(path) = env.passfile() else { return };
        let user = self.config.get_user().map(str::to_string).or_else(|| env.os_user.clone());
        let Some(user) = user else { return };
        let database = self.dbname.clone().unwrap_or_else(|| user.clone());
        let targets: Vec<Target<'_>> = self
            .endpoints
            .iter()
            .map(|endpoint| match endpoint {
                Endpoint::Tcp { host, port } => {
                    Target { host, port: *port, database: &database, user: &user }
                }
                // libpq matches a Unix socket as `localhost`.
                Endpoint::Socket { port, .. } => {
                    Target { host: "localhost", port: *port, database: &database, user: &user }
                }
            })
            .collect();
        let mut warnings = Vec::new();
        let found = environment::password_from_file(&path, &targets, &mut |w| warnings.push(w));
        self.warnings.extend(warnings);
        if let Some(password) = found {
            self.config.password(password);
        }
    }

    fn from_filled(url: &DbUrl) -> Result<ConnectOptions> {
        if let Some((key, _)) = url.query.iter().find(|(key, _)| !KNOWN_KEYS.split(", ").any(|k| k == key)) {
            let problem =
                format!("unsupported connection parameter \"{key}\" (state-store understands {KNOWN_KEYS})");
            return Err(config_error(url, &problem));
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
        let connect_timeout = match whole::<i64>(url, "connect_timeout", " of seconds")? {
            // libpq waits forever for zero or less; a bounded wait is the point here.
            None => DEFAULT_CONNECT_TIMEOUT,
            Some(n) if n <= 0 => DEFAULT_CONNECT_TIMEOUT,
            Some(n) => Duration::from_secs(n.unsigned_abs()).max(MIN_CONNECT_TIMEOUT),
        };
        let mut config = postgres::Config::new();
        for endpoint in &endpoints {
            match endpoint {
                Endpoint::Tcp { host, port } => config.host(host).port(*port),
                Endpoint::Socket { dir, port } => config.host_path(dir).port(*port),
            };
        }
        type Supported = fn(&str) -> bool;
        let supported: [(&str, Supported, &str); 3] = [
            ("target_session_attrs", |v| matches!(v, "any" | "read-write"), "use any or read-write"),
            // The driver always talks UTF-8; any other encoding would change what is stored.
            (
                "client_encoding",
                |v| matches!(v.to_ascii_lowercase().replace(['-', '_'], "").as_str(), "utf8" | "unicode"),
                "only UTF8",
            ),
            // GSSAPI encryption is not built in; "prefer" falls back to TLS or plain as in libpq.
            ("gssencmode", |v| matches!(v, "disable" | "prefer"), "GSSAPI encryption"),
        ];
        for (key, supported, why) in supported {
            if let Some(value) = url.query_value(key).filter(|v| !supported(v)) {
                return Err(config_error(url, &format!("{key}={value} is not supported ({why})")));
            }
        }
        if url.query_value("target_session_attrs") == Some("read-write") {
            config.target_session_attrs(TargetSessionAttrs::ReadWrite);
        }
        let whole_seconds = |key: &str| -> Result<Option<Duration>> {
            Ok(whole::<i64>(url, key, " of seconds")?.map(|n| Duration::from_secs(n.max(0).unsigned_abs())))
        };
        // Unless the URL says otherwise, a peer that is gone (a NAT or firewall that dropped
        // the connection, a failover without a reset) is noticed in about 25 s instead of the
        // kernel's two hours and more: probes after 10 s of silence, every 5 s, 3 of them.
        config.keepalives_idle(whole_seconds("keepalives_idle")?.unwrap_or(KEEPALIVE_IDLE));
        config.keepalives_interval(whole_seconds("keepalives_interval")?.unwrap_or(KEEPALIVE_INTERVAL));
        config.keepalives_retries(whole(url, "keepalives_count", "")?.unwrap_or(KEEPALIVE_COUNT));
        // libpq's tcp_user_timeout is in milliseconds.
        if let Some(millis) = whole(url, "tcp_user_timeout", " of milliseconds")? {
            config.tcp_user_timeout(Duration::from_millis(millis));
        }
        if let Some(on) = url.query_value("keepalives") {
            config.keepalives(on.trim() != "0");
        }
        let non_empty = |v: Option<String>| v.filter(|s| !s.is_empty());
        // As SQLAlchemy passes them to psycopg2: the query's user, password and dbname win
        // over the URL's own.
        let query = |key: &str| url.query_value(key).map(str::to_string);
        if let Some(user) = non_empty(query("user").or_else(|| url.username.clone())) {
            config.user(&user);
        }
        if let Some(password) = query("password").or_else(|| url.password.clone()) {
            config.password(password);
        }
        let dbname = non_empty(query("dbname").or_else(|| url.database.clone()));
        if let Some(dbname) = &dbname {
            config.dbname(dbname);
        }
        if let Some(options) = url.query_value("options") {
            config.options(options);
        }
        config.application_name(url.query_value("application_name").unwrap_or("state-store"));
        config.connect_timeout(connect_timeout);
        // libpq never uses TLS over a Unix socket, whatever sslmode says.
        let all_sockets = endpoints.iter().all(|e| matches!(e, Endpoint::Socket { .. }));
        config.ssl_mode(match tls {
            _ if all_sockets => SslMode::Disable,
            TlsMode::Disable => SslMode::Disable,
            // `allow` tries plain first; the driver only knows TLS-first, which reaches the
            // same servers.
            TlsMode::Allow | TlsMode::Prefer => SslMode::Prefer,
            TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => SslMode::Require,
        });
        Ok(ConnectOptions {
            config,
            endpoints,
            dbname,
            tls,
            root_cert: url.query_value("sslrootcert").map(str::to_string),
            client_cert: url.query_value("sslcert").map(PathBuf::from),
            client_key: url.query_value("sslkey").map(PathBuf::from),
            connect_timeout,
            warnings: Vec::new(),
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

    /// The TLS side of the connection, with libpq's rules: `prefer` and `require` encrypt
    /// without checking the certificate, unless `require` finds a root certificate, which
    /// makes it `verify-ca`; `verify-ca` checks the chain, `verify-full` the host name too.
    fn tls_connector(&self, url: &DbUrl) -> Result<MakeTlsConnector> {
        let tls_err = |e: openssl::error::ErrorStack| config_error(url, &format!("cannot set up TLS: {e}"));
        let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(tls_err)?;
        let home_file =
            |name: &str| crate::env::os("HOME").map(|h| Path::new(&h).join(".postgresql").join(name));
        let verify_chain = match self.tls {
            TlsMode::Disable | TlsMode::Allow | TlsMode::Prefer => false,
            TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => {
                let explicit = self.root_cert.as_deref();
                let root = explicit.map(PathBuf::from).or_else(|| home_file("root.crt"));
                match (explicit, root) {
                    // SslConnector starts with OpenSSL's default trust store; an OpenSSL linked
                    // in (the wheel's) does not know where this machine keeps its roots, so they
                    // are found the way native-tls finds them for MySQL.
                    (Some("system"), _) => {
                        let found = openssl_probe::probe();
                        if let Some(file) = &found.cert_file {
                            builder.load_verify_locations(Some(file), None).map_err(tls_err)?;
                        }
                        for dir in &found.cert_dir {
                            builder.load_verify_locations(None, Some(dir)).map_err(tls_err)?;
                        }
                        true
                    }
                    // libpq's rule: a root certificate file is the only trust anchor. The
                    // store SslConnector starts with (OpenSSL's default paths, which
                    // SSL_CERT_FILE and SSL_CERT_DIR also fill) is replaced, not added to, so
                    // that no public CA can vouch for a server under verify-ca.
                    (_, Some(path)) if path.is_file() => {
                        let store = anchors_of(&path).map_err(|problem| {
                            config_error(url, &format!("root certificate {}: {problem}", path.display()))
                        })?;
                        builder.set_cert_store(store);
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

/// A store holding only the certificates of the PEM file `path` (read bounded), as libpq
/// trusts `sslrootcert`.
fn anchors_of(path: &Path) -> std::result::Result<X509Store, String> {
    let pem = crate::fs::read_bounded(path).map_err(|e| format!("cannot read it: {e}"))?;
    let certs = X509::stack_from_pem(&pem).map_err(|e| format!("is not a PEM file: {e}"))?;
    if certs.is_empty() {
        return Err("holds no PEM certificate".to_string());
    }
    let mut store = X509StoreBuilder::new().map_err(|e| e.to_string())?;
    for cert in certs {
        store.add_cert(cert).map_err(|e| format!("cannot use a certificate of it: {e}"))?;
    }
    Ok(store.build())
}

/// The places the URL names, in order. The host is in the URL, or in `?host=` (repeated or
/// comma-separated, each `name`, `name:port` or a socket directory), never both, as in
/// SQLAlchemy; with neither, libpq's default socket directories.
fn endpoints(url: &DbUrl) -> Result<Vec<Endpoint>> {
    // Every value of `?name=`, repeated or comma-separated.
    let listed =
        |name: &'static str| url.query.iter().filter(move |(k, _)| k == name).flat_map(|(_, v)| v.split(','));
    let query_hosts: Vec<&str> = listed("host").map(str::trim).filter(|h| !h.is_empty()).collect();
    let query_ports: Vec<u16> = listed("port")
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

/// `[database] sql_alchemy_schema` as the identifier `search_path` holds: Airflow
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
            Err(Error::Config(format!("[database] sql_alchemy_schema {} {problem}", quote(name))).into())
        }
        None => Ok(format!("\"{}\"", name.replace('"', "\"\""))),
    }
}

/// The driver's error as one readable line: the server's own message (severity, text, detail,
/// hint) when there is one, otherwise the driver's words followed by their causes.
pub(super) fn describe(e: &postgres::Error) -> String {
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

pub(super) fn pg_err(context: impl Into<String>) -> impl FnOnce(postgres::Error) -> Error {
    let context = context.into();
    move |e| Error::db(context, super::cause(e))
}

/// What every session runs first, one round trip: UTC as Airflow's sessions, read-only for the
/// commands that only read, and the bounds of `timeouts`: a lock wait (PostgreSQL waits for
/// a lock forever by default, reads behind `LOCK TABLE` or `ALTER` included), a statement's
/// run, and how long the server keeps a session that is idle in a transaction or idle at all
/// (`idle_session_timeout`, PostgreSQL 14+), so that the advisory lock of a clean whose client
/// is gone is freed. A setting the URL's `options` names is left as it says; one the server
/// does not know (an older version) is skipped by the `pg_settings` join. Every value is a
/// number formatted here, never text from outside.
fn session_setup(access: Access, timeouts: &Timeouts, url_options: Option<&str>) -> String {
    let ms = |d: Duration| d.as_millis().to_string();
    let mut settings = vec![
        ("lock_timeout", ms(timeouts.lock)),
        ("statement_timeout", ms(timeouts.statement)),
        ("idle_in_transaction_session_timeout", ms(timeouts.idle)),
        ("idle_session_timeout", ms(timeouts.idle)),
        // The server's side of the socket: its unacknowledged writes to a client that is gone.
        ("tcp_user_timeout", ms(timeouts.stall())),
    ];
    settings.retain(|(name, _)| !url_options.is_some_and(|options| options.contains(name)));
    let mut sql = String::from("SET TIME ZONE 'UTC'; ");
    if access == Access::ReadOnly {
        sql.push_str("SET default_transaction_read_only = on; ");
    }
    if !settings.is_empty() {
        let values: Vec<String> =
            settings.iter().map(|(name, value)| format!("('{name}', '{value}')")).collect();
        sql.push_str(&format!(
            "SELECT set_config(v.name, v.value, false) FROM (VALUES {}) AS v(name, value) \
             JOIN pg_settings s ON s.name = v.name",
            values.join(", ")
        ));
    }
    sql
}

/// Opens a connection and prepares the session; the schema, when given, is already quoted.
pub(super) fn connect(
    url: &DbUrl,
    schema: Option<&str>,
    access: Access,
    timeouts: &Timeouts,
) -> Result<(Client, String)> {
    let quoted = schema.map(quote_schema).transpose()?;
    let mut options = ConnectOptions::from_url(url, &Environment::current()?)?;
    for warning in &options.warnings {
        // libpq's own warning, on stderr as psql shows it: the only output of this layer.
        crate::output::warn(warning);
    }
    // The kernel gives up on data the server never acknowledges (a peer that is gone) when
    // the client would give up on an answer anyway.
    if url.query_value("tcp_user_timeout").is_none() {
        options.config.tcp_user_timeout(timeouts.stall());
    }
    let location = options.location(schema);
    let tls = options.tls_connector(url)?;
    let (config, deadline) = (options.config.clone(), options.connect_deadline());
    let mut client = match crate::db::within(deadline, move || config.connect(tls)) {
        Some(Ok(client)) => client,
        Some(Err(e)) => {
            return Err(Error::db(format!("cannot connect to {location}"), super::cause(e)).into());
        }
        None => {
            let waited =
                format!("no answer from the server within {} s (connect_timeout)", deadline.as_secs());
            return Err(Error::db(format!("cannot connect to {location}"), waited).into());
        }
    };
    let _stall = super::stall_guard(&location, timeouts);
    let setup = session_setup(access, timeouts, url.query_value("options"));
    client.batch_execute(&setup).map_err(pg_err(format!("cannot use {location}")))?;
    if let Some(quoted) = &quoted {
        // The quoted name is the setting's bound value, never statement text.
        client
            .query("SELECT set_config('search_path', $1, false)", &[quoted])
            .map_err(pg_err(format!("cannot use {location}")))?;
    }
    Ok((client, location))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::kind;

    fn url(text: &str) -> DbUrl {
        DbUrl::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn options(text: &str) -> ConnectOptions {
        ConnectOptions::from_url(&url(text), &Environment::default())
            .unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn refused(text: &str) -> String {
        match ConnectOptions::from_url(&url(text), &Environment::default()) {
            Ok(o) => panic!("{text} accepted: {o:?}"),
            Err(e) => {
                assert!(matches!(kind(&e), Some(Error::Config(_))), "{text}: {e:?}");
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
        assert_eq!(o.config.get_user(), Some("airflow"));
        assert_eq!(o.config.get_password(), Some(&b"s@cret"[..]));
        assert_eq!(o.dbname.as_deref(), Some("airflow_db"));
        // libpq's default: TLS when the server offers it, no certificate check.
        assert_eq!(o.tls, TlsMode::Prefer);
        assert_eq!(o.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(o.config.get_application_name(), Some("state-store"));
        assert_eq!(
            o.location(Some("airflow")),
            "PostgreSQL database airflow_db on db.example:6432 (schema \"airflow\")"
        );
        assert!(!o.location(None).contains("s@cret"));

        let o = options("postgres://h/db");
        assert_eq!(o.endpoints, vec![tcp("h", 5432)]);
        assert_eq!((o.config.get_user(), o.config.get_password()), (None, None));
        let o = options("postgresql+psycopg://u@[::1]:5433/db");
        assert_eq!(o.endpoints, vec![tcp("::1", 5433)]);
        assert_eq!(o.location(None), "PostgreSQL database db on [::1]:5433");
        // An empty user or database is libpq's default, not an empty name.
        let o = options("postgresql://@h/");
        assert_eq!((o.config.get_user(), o.dbname), (None, None));
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
        let config = options("postgresql://u@/db?host=/tmp&sslmode=require").config;
        assert_eq!(config.get_ssl_mode(), SslMode::Disable);
        let config = options("postgresql://u@h/db?sslmode=verify-ca").config;
        assert_eq!(config.get_ssl_mode(), SslMode::Require);

        assert_eq!(options("postgresql://h/db?connect_timeout=30").connect_timeout, Duration::from_secs(30));
        assert_eq!(options("postgresql://h/db?connect_timeout=1").connect_timeout, MIN_CONNECT_TIMEOUT);
        // libpq's "forever" is bounded here.
        assert_eq!(options("postgresql://h/db?connect_timeout=0").connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        assert!(refused("postgresql://h/db?connect_timeout=10s").contains("connect_timeout=10s"));
        let config = options("postgresql://h/db").config;
        assert_eq!(config.get_connect_timeout(), Some(&DEFAULT_CONNECT_TIMEOUT));
    }

    #[test]
    fn other_parameters() {
        let o = options(
            "postgresql://h/db?application_name=nightly&options=-c%20statement_timeout%3D5000\
             &target_session_attrs=read-write&keepalives_idle=30&tcp_user_timeout=1500&client_encoding=utf8",
        );
        assert_eq!(o.config.get_application_name(), Some("nightly"));
        assert_eq!(o.config.get_options(), Some("-c statement_timeout=5000"));
        assert_eq!(o.config.get_target_session_attrs(), TargetSessionAttrs::ReadWrite);
        assert_eq!(o.config.get_keepalives_idle(), Duration::from_secs(30));
        assert_eq!(o.config.get_tcp_user_timeout(), Some(&Duration::from_millis(1500)));
        // Unknown keys are refused, so a misspelt sslmode cannot silently weaken the link.
        let msg = refused("postgresql://u:pw@h/db?ssl_mode=require");
        assert!(msg.contains("\"ssl_mode\"") && msg.contains("sslmode"), "{msg}");
        assert!(!msg.contains("pw@"), "{msg}");
        assert!(refused("postgresql://h/db?client_encoding=latin1").contains("UTF8"));
        assert!(refused("postgresql://h/db?target_session_attrs=standby").contains("standby"));
        assert!(refused("postgresql://h/db?gssencmode=require").contains("GSSAPI"));
    }

    #[test]
    fn every_session_gets_the_bounds() {
        let t = Timeouts::new(Duration::from_secs(30)).with_lock(Duration::from_secs(2));
        let sql = session_setup(Access::ReadWrite, &t, None);
        for part in [
            "('lock_timeout', '2000')",
            "('statement_timeout', '30000')",
            "('idle_in_transaction_session_timeout', '120000')",
            "('idle_session_timeout', '120000')",
            "('tcp_user_timeout', '35000')",
            "JOIN pg_settings",
        ] {
            assert!(sql.contains(part), "{part}: {sql}");
        }
        assert!(!sql.contains("read_only"), "{sql}");
        assert!(session_setup(Access::ReadOnly, &t, None).contains("default_transaction_read_only = on"));
        // What the URL's options set is left as they say.
        let sql = session_setup(Access::ReadOnly, &t, Some("-c statement_timeout=5000"));
        assert!(!sql.contains("statement_timeout'"), "{sql}");
        assert!(sql.contains("('lock_timeout', '2000')"), "{sql}");
    }

    /// A password file in a directory of its own, at `mode`.
    fn passfile(name: &str, text: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("state-store-pgpass-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pgpass");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    fn with_env(text: &str, vars: &[(&str, &str)]) -> ConnectOptions {
        ConnectOptions::from_url(&url(text), &Environment::of(vars)).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn libpq_environment_fills_what_the_url_lacks() {
        let vars = [
            ("PGHOST", "envhost"),
            ("PGPORT", "6000"),
            ("PGUSER", "envuser"),
            ("PGPASSWORD", "envpw"),
            ("PGDATABASE", "envdb"),
            ("PGSSLMODE", "require"),
            ("PGCONNECT_TIMEOUT", "30"),
            ("PGAPPNAME", "nightly"),
            ("PGOPTIONS", "-c work_mem=64MB"),
            ("PGTARGETSESSIONATTRS", "read-write"),
        ];
        let o = with_env("postgresql://", &vars);
        assert_eq!(o.endpoints, vec![tcp("envhost", 6000)]);
        assert_eq!(o.config.get_user(), Some("envuser"));
        assert_eq!(o.config.get_password(), Some(&b"envpw"[..]));
        assert_eq!(o.dbname.as_deref(), Some("envdb"));
        assert_eq!(o.tls, TlsMode::Require);
        assert_eq!(o.connect_timeout, Duration::from_secs(30));
        assert_eq!(o.config.get_application_name(), Some("nightly"));
        assert_eq!(o.config.get_options(), Some("-c work_mem=64MB"));
        assert_eq!(o.config.get_target_session_attrs(), TargetSessionAttrs::ReadWrite);
        // The URL and its query win over the environment.
        let o = with_env("postgresql://u:urlpw@h:5433/db?sslmode=disable&application_name=a", &vars);
        assert_eq!(o.endpoints, vec![tcp("h", 5433)]);
        assert_eq!((o.config.get_user(), o.config.get_password()), (Some("u"), Some(&b"urlpw"[..])));
        assert_eq!((o.dbname.as_deref(), o.tls), (Some("db"), TlsMode::Disable));
        assert_eq!(o.config.get_application_name(), Some("a"));
        // A URL host keeps PGPORT for its missing port; PGHOST lists and sockets as libpq reads them.
        assert_eq!(with_env("postgresql://h/db", &vars).endpoints, vec![tcp("h", 6000)]);
        let o = with_env("postgresql:///db", &[("PGHOST", "/run/pg,b:7")]);
        assert_eq!(o.endpoints, vec![socket("/run/pg", 5432), tcp("b", 7)]);
        // A bad value names where it came from, and never shows the password.
        let e = ConnectOptions::from_url(
            &url("postgresql://h/db"),
            &Environment::of(&[("PGSSLMODE", "on"), ("PGPASSWORD", "envpw")]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("sslmode=on") && e.contains("PGPASSWORD, PGSSLMODE from the environment"), "{e}");
        assert!(!e.contains("envpw"), "{e}");
        let e =
            ConnectOptions::from_url(&url("postgresql://h/db"), &Environment::of(&[("PGSERVICE", "prod")]))
                .unwrap_err()
                .to_string();
        assert!(e.contains("PGSERVICE is set"), "{e}");
    }

    #[test]
    fn libpq_password_file_comes_after_the_url_and_the_environment() {
        let text = "h:5432:db:u:filepw\nlocalhost:5432:*:u:socketpw\n*:*:*:osuser:ospw\n";
        let path = passfile("order", text, 0o600);
        let file = path.to_str().unwrap();
        let password = |url_text: &str, vars: &[(&str, &str)]| {
            let mut vars = vars.to_vec();
            vars.push(("PGPASSFILE", file));
            with_env(url_text, &vars).config.get_password().map(|p| String::from_utf8_lossy(p).into_owned())
        };
        assert_eq!(password("postgresql://u@h/db", &[]).as_deref(), Some("filepw"));
        assert_eq!(password("postgresql://u:urlpw@h/db", &[]).as_deref(), Some("urlpw"));
        assert_eq!(password("postgresql://u@h/db", &[("PGPASSWORD", "envpw")]).as_deref(), Some("envpw"));
        assert_eq!(
            password("postgresql://u@h/db?password=q", &[("PGPASSWORD", "envpw")]).as_deref(),
            Some("q")
        );
        // The environment's user, host and database are matched too; a socket is `localhost`.
        assert_eq!(
            password("postgresql:///db", &[("PGUSER", "u"), ("PGHOST", "h")]).as_deref(),
            Some("filepw")
        );
        assert_eq!(password("postgresql://u@/db?host=/tmp", &[]).as_deref(), Some("socketpw"));
        // No user anywhere: the OS user, as libpq; the database defaults to the user.
        assert_eq!(password("postgresql://h2/", &[]).as_deref(), Some("ospw"));
        assert_eq!(password("postgresql://u@h:5433/db", &[]), None);

        // A file others can read is ignored, with libpq's warning.
        let open = passfile("open", text, 0o644);
        let o = with_env("postgresql://u@h/db", &[("PGPASSFILE", open.to_str().unwrap())]);
        assert_eq!(o.config.get_password(), None);
        assert_eq!(o.warnings.len(), 1);
        assert!(o.warnings[0].contains("has group or world access"), "{:?}", o.warnings);
        assert!(!o.warnings[0].contains("filepw"));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
        let _ = std::fs::remove_dir_all(open.parent().unwrap());
    }

    #[test]
    fn a_root_certificate_file_without_certificates_is_refused() {
        let dir = std::env::temp_dir().join(format!("state-store-roots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        assert_eq!(anchors_of(&empty).err().as_deref(), Some("holds no PEM certificate"));
        assert!(anchors_of(&dir).is_err_and(|e| e.contains("not a regular file")));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn schema_names_are_quoted_exactly() {
        assert_eq!(quote_schema("airflow").ok(), Some("\"airflow\"".to_string()));
        assert_eq!(quote_schema("Airflow Prod").ok(), Some("\"Airflow Prod\"".to_string()));
        assert_eq!(quote_schema("a\"b; DROP TABLE x").ok(), Some("\"a\"\"b; DROP TABLE x\"".to_string()));
        assert_eq!(quote_schema(&"é".repeat(31)).map(|q| q.len()).ok(), Some(64));
        for bad in ["", "a\0b", "air\nflow", "tab\there", "\u{7f}", &"x".repeat(64), &"é".repeat(32)] {
            let e = quote_schema(bad);
            assert!(matches!(e.as_ref().err().and_then(kind), Some(Error::Config(_))), "{bad:?}: {e:?}");
        }
    }
}
