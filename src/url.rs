//! SQLAlchemy database URLs, as Airflow users write them in `[database] sql_alchemy_conn`.
//!
//! The split into user, password, host, port, database and query follows SQLAlchemy's own
//! URL grammar, quirks included, so that this tool reaches the same database Airflow does.
//! Where SQLAlchemy would accept text that no driver can connect with (an `@` left in a host,
//! a port that is not a number, a SQLite URL with a host), parsing fails here instead, with a
//! message that never repeats the password.

use std::fmt;
use std::path::PathBuf;

use crate::redact::{MASK, Secrets, is_password_key};
use crate::text::{encode_query_part, percent_decode, percent_encode};

/// The database families Airflow's metastore can live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
    Mysql,
}

impl Dialect {
    /// The dialect's name as SQLAlchemy spells it (`mariadb` is folded into `mysql`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgresql",
            Dialect::Mysql => "mysql",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A parsed `sql_alchemy_conn`. `Debug` and `Display` hide the password.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct DbUrl {
    /// The scheme exactly as written (`mariadb+pymysql`), so messages echo the user's text.
    pub(crate) scheme: String,
    pub(crate) dialect: Dialect,
    /// The Python driver after `+`; only recorded, this tool has its own drivers.
    pub(crate) driver: Option<String>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    /// For IPv6 the address without its brackets, as SQLAlchemy reports it.
    pub(crate) host: Option<String>,
    pub(crate) port: Option<u16>,
    pub(crate) database: Option<String>,
    /// Decoded pairs in the order written; repeated keys are all kept.
    pub(crate) query: Vec<(String, String)>,
}

/// Where a SQLite URL points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SqliteTarget {
    Memory,
    /// As written: a relative path is relative to the working directory, as in SQLAlchemy.
    File(PathBuf),
}

/// Why a `sql_alchemy_conn` value was refused. No variant carries user, password, host, port
/// or database text: a malformed URL can put a password in any of those places.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UrlError {
    #[error("[database] sql_alchemy_conn is empty")]
    Empty,
    /// No `scheme://` at the start. The example's user and password are placeholders in angle
    /// brackets, where no URL's userinfo is read: an example such as `airflow:secret@db` is
    /// masked like any URL's password in a message, and showed `airflow:***@db`.
    #[error(
        "[database] sql_alchemy_conn is not a database URL: expected \
         dialect[+driver]://[<user>[:<password>]@]<host>[:<port>]/<database>, \
         e.g. postgresql://<user>:<password>@<host>:5432/<database> or sqlite:////path/to/airflow.db"
    )]
    NotAUrl,
    #[error(
        "unsupported database scheme \"{scheme}\" in [database] sql_alchemy_conn \
         (supported: sqlite, postgresql, mysql)"
    )]
    UnsupportedScheme { scheme: String },
    /// A known dialect with an empty driver (`mysql+`) or more than one `+`.
    #[error(
        "malformed database scheme \"{scheme}\" in [database] sql_alchemy_conn: \
         expected dialect or dialect+driver, e.g. postgresql+psycopg2"
    )]
    BadDriver { scheme: String },
    /// Encrypted SQLite needs SQLCipher, which this tool does not link.
    #[error(
        "encrypted SQLite (\"{scheme}\" in [database] sql_alchemy_conn) is not supported: \
         state-store can only open plain SQLite files"
    )]
    SqlCipher { scheme: String },
    #[error(
        "invalid port in [database] sql_alchemy_conn ({scheme} URL): expected a number from 1 to \
         65535 after the host; an '@' inside the password must be written %40"
    )]
    BadPort { scheme: String },
    #[error("invalid host in [database] sql_alchemy_conn ({scheme} URL): {problem}")]
    BadHost { scheme: String, problem: &'static str },
    /// SQLite URLs name a file only; SQLAlchemy refuses user, password, host and port too.
    #[error(
        "a SQLite URL takes no user, password, host or port ({scheme} URL in \
         [database] sql_alchemy_conn): use sqlite:////absolute/path/to/airflow.db"
    )]
    SqliteNetloc { scheme: String },
    /// `?uri=true` with a database part that SQLite would not read as the file meant: a
    /// `file:` URI naming a remote host, or a plain path to which SQLAlchemy would append the
    /// URL's options (`/x.db?mode=ro` as the file's name).
    #[error(
        "this SQLite URI filename (uri=true, {scheme} URL in [database] sql_alchemy_conn) is not \
         supported: use sqlite:///file:/absolute/path/to/airflow.db?mode=ro&uri=true, or \
         sqlite:////absolute/path/to/airflow.db?mode=ro without uri=true"
    )]
    SqliteUriFilename { scheme: String },
    /// A query option neither Python's `sqlite3.connect` (through SQLAlchemy) nor SQLite's URI
    /// filenames take: most likely a misspelt `mode=ro`, which must not pass for a read-write URL.
    #[error(
        "unsupported SQLite URL option \"{key}\" in [database] sql_alchemy_conn ({scheme} URL; \
         state-store understands {SQLITE_KEYS})"
    )]
    SqliteOption { scheme: String, key: String },
    #[error(
        "invalid SQLite URL option {key}={value} in [database] sql_alchemy_conn ({scheme} URL): \
         expected {expected}"
    )]
    SqliteOptionValue { scheme: String, key: &'static str, value: String, expected: &'static str },
}

impl UrlError {
    /// The configuration error (exit 3) of a URL refused, naming where the value came from.
    pub(crate) fn into_error(self, origin: &impl fmt::Display) -> crate::error::Error {
        crate::error::Error::Config(format!("{self} (from {origin})"))
    }
}

/// The query options of a SQLite URL: those SQLAlchemy hands to Python's `sqlite3.connect`
/// (`timeout`, `check_same_thread`, …: the Python driver's own settings, which mean nothing
/// here and are accepted so that Airflow's URL works unchanged), and SQLite's URI parameters.
/// Of these, `mode=ro` and `immutable=1` make the database read-only; the others change
/// nothing this tool reads or writes.
const SQLITE_KEYS: &str = "timeout, isolation_level, detect_types, check_same_thread, cached_statements, \
     uri, mode, immutable, cache, nolock, psow, modeof";

/// The options SQLAlchemy keeps for Python's `sqlite3.connect` rather than the URI.
const PYSQLITE_KEYS: &str =
    "timeout, isolation_level, detect_types, check_same_thread, cached_statements, uri";

/// The file a SQLite `file:` URI names (what follows `file:`): `file:x.db`, `file:/abs/x.db`,
/// `file:///abs/x.db` or `file://localhost/abs/x.db`, percent-decoded as SQLite decodes it;
/// `None` for another host, which SQLite refuses.
fn file_uri_path(uri: &str) -> Option<String> {
    let path = match uri.strip_prefix("//") {
        Some(rest) => {
            let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
            if !(authority.is_empty() || authority == "localhost") {
                return None;
            }
            path
        }
        None => uri,
    };
    Some(percent_decode(path))
}

/// SQLite's boolean URI parameter values (`sqlite3_uri_boolean`).
fn sqlite_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "yes" | "true" | "on" => Some(true),
        "0" | "no" | "false" | "off" => Some(false),
        _ => None,
    }
}

impl DbUrl {
    /// Parses a URL the way SQLAlchemy's `make_url` splits it, then checks what a driver
    /// would need.
    pub(crate) fn parse(url: &str) -> Result<DbUrl, UrlError> {
        if url.is_empty() {
            return Err(UrlError::Empty);
        }
        let scheme_len =
            url.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '+')).unwrap_or(url.len());
        let scheme = &url[..scheme_len];
        let Some(rest) = url[scheme_len..].strip_prefix("://").filter(|_| !scheme.is_empty()) else {
            return Err(UrlError::NotAUrl);
        };
        let (dialect, driver) = split_scheme(scheme)?;

        let (userinfo, after_userinfo) = split_userinfo(rest);
        let (username, password) = userinfo
            .map_or((None, None), |(user, pass)| (Some(percent_decode(user)), pass.map(percent_decode)));
        let (host, port_text, after_host) = split_host_port(after_userinfo, scheme)?;
        let port = port_text
            .map(|text| parse_port(text).ok_or_else(|| UrlError::BadPort { scheme: scheme.to_string() }));
        let port = port.transpose()?;

        let (database, query_text) =
            after_host.split_once('?').map_or((after_host, None), |(path, query)| (path, Some(query)));
        // SQLAlchemy's grammar leaves nothing between the host part and `/database` or
        // `?query`; `split_host_port` has checked that.
        let database = database.strip_prefix('/').map(percent_decode);
        let query = query_text.map(parse_query).unwrap_or_default();

        let parsed = DbUrl {
            scheme: scheme.to_string(),
            dialect,
            driver,
            username,
            password,
            host,
            port,
            database,
            query,
        };
        if dialect == Dialect::Sqlite {
            parsed.check_sqlite()?;
        }
        Ok(parsed)
    }

    fn check_sqlite(&self) -> Result<(), UrlError> {
        if self.driver.as_deref() == Some("pysqlcipher") {
            return Err(UrlError::SqlCipher { scheme: self.scheme.clone() });
        }
        // SQLAlchemy tests truthiness: `sqlite://@/x.db` (an empty user) still passes there.
        let non_empty = |part: &Option<String>| part.as_deref().is_some_and(|s| !s.is_empty());
        if non_empty(&self.username)
            || non_empty(&self.password)
            || self.host.is_some()
            || self.port.is_some()
        {
            return Err(UrlError::SqliteNetloc { scheme: self.scheme.clone() });
        }
        if self.sqlite_uri() {
            let uri_options = self.query.iter().any(|(key, _)| !PYSQLITE_KEYS.split(", ").any(|k| k == key));
            let usable = match self.database.as_deref().and_then(|d| d.strip_prefix("file:")) {
                Some(uri) => file_uri_path(uri).is_some(),
                // SQLAlchemy appends the other options to the name: `x.db?mode=ro` is no file.
                None => !uri_options,
            };
            if !usable {
                return Err(UrlError::SqliteUriFilename { scheme: self.scheme.clone() });
            }
        }
        for (key, value) in &self.query {
            if !SQLITE_KEYS.split(", ").any(|known| known == key) {
                return Err(UrlError::SqliteOption { scheme: self.scheme.clone(), key: key.clone() });
            }
            let invalid = |key, expected| UrlError::SqliteOptionValue {
                scheme: self.scheme.clone(),
                key,
                value: value.clone(),
                expected,
            };
            match key.as_str() {
                // `memory` would be an empty database, never the metastore.
                "mode" if !matches!(value.as_str(), "ro" | "rw" | "rwc") => {
                    return Err(invalid("mode", "ro (read-only), rw or rwc"));
                }
                "immutable" if sqlite_bool(value).is_none() => return Err(invalid("immutable", "1 or 0")),
                _ => {}
            }
        }
        Ok(())
    }

    /// `?uri=true`: SQLAlchemy hands the database part to SQLite as a URI filename, with the
    /// URL's other options appended as the URI's parameters.
    fn sqlite_uri(&self) -> bool {
        // SQLAlchemy's `asbool`, which reads the flag.
        self.query_value("uri").is_some_and(|v| {
            matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "yes" | "on" | "y" | "t" | "1")
        })
    }

    /// Why a SQLite URL opens its database read-only (`mode=ro` or `immutable=1`), if it does.
    /// SQLAlchemy passes these to SQLite only with `uri=true`; a URL that writes them means
    /// read-only all the same, so they are honoured: a write is refused, never made.
    pub(crate) fn sqlite_read_only(&self) -> Option<&'static str> {
        if self.dialect != Dialect::Sqlite {
            return None;
        }
        if self.query_value("mode") == Some("ro") {
            Some("mode=ro")
        } else if self.query_value("immutable").and_then(sqlite_bool) == Some(true) {
            Some("immutable=1")
        } else {
            None
        }
    }

    /// Every password the URL holds: the userinfo's, and the value of each query option that
    /// names a password (`?password=`, `?sslpassword=`), which drivers also read.
    pub(crate) fn passwords(&self) -> impl Iterator<Item = &str> {
        let in_query = self.query.iter().filter(|(k, _)| is_password_key(k)).map(|(_, v)| v.as_str());
        self.password.as_deref().into_iter().chain(in_query)
    }

    /// The URL as text with the password shown as `***`, for messages and logs.
    pub(crate) fn redacted(&self) -> String {
        self.render(true)
    }

    /// Renders the URL so that parsing the result gives back the same `DbUrl`. Percent-encodes
    /// like SQLAlchemy's `render_as_string`, except that query keys keep their written order
    /// and `/` and `:` stay readable in query values (socket paths).
    fn render(&self, hide_password: bool) -> String {
        let mut s = format!("{}://", self.scheme);
        if let Some(user) = &self.username {
            s.push_str(&percent_encode(user, b" +"));
            if let Some(password) = &self.password {
                let shown = if hide_password { MASK.to_string() } else { percent_encode(password, b" +") };
                s.push_str(&format!(":{shown}"));
            }
            s.push('@');
        }
        if let Some(host) = &self.host {
            s.push_str(&if host.contains(':') { format!("[{host}]") } else { host.clone() });
        }
        if let Some(port) = self.port {
            s.push_str(&format!(":{port}"));
        }
        if let Some(database) = &self.database {
            s.push_str(&format!("/{}", percent_encode(database, b" +/")));
        }
        if !self.query.is_empty() {
            s.push('?');
            let pairs: Vec<String> = self
                .query
                .iter()
                .map(|(k, v)| {
                    // Drivers take a password from the query too (`?password=`, libpq's
                    // `sslpassword`), so such a value is hidden like the userinfo's.
                    let value = if hide_password && is_password_key(k) {
                        MASK.to_string()
                    } else {
                        encode_query_part(v)
                    };
                    format!("{}={value}", encode_query_part(k))
                })
                .collect();
            s.push_str(&pairs.join("&"));
        }
        s
    }

    /// Where a SQLite URL points; `None` for other dialects.
    pub(crate) fn sqlite_target(&self) -> Option<SqliteTarget> {
        if self.dialect != Dialect::Sqlite {
            return None;
        }
        let database = self.database.as_deref();
        let path = match database.and_then(|d| d.strip_prefix("file:")) {
            Some(uri) if self.sqlite_uri() => file_uri_path(uri),
            _ => database.map(str::to_string),
        };
        Some(match path.as_deref() {
            None | Some("" | ":memory:") => SqliteTarget::Memory,
            Some(path) => SqliteTarget::File(PathBuf::from(path)),
        })
    }

    /// The last value given for `key` in the query string, as drivers read repeated keys.
    pub(crate) fn query_value(&self, key: &str) -> Option<&str> {
        self.query.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

impl fmt::Display for DbUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// The URL as [`DbUrl::redacted`] shows it, every password masked.
impl fmt::Debug for DbUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DbUrl").field(&self.redacted()).finish()
    }
}

fn split_scheme(scheme: &str) -> Result<(Dialect, Option<String>), UrlError> {
    let (backend, driver) =
        scheme.split_once('+').map_or((scheme, None), |(backend, driver)| (backend, Some(driver)));
    // Names are case-sensitive: SQLAlchemy cannot load a `PostgreSQL` dialect either.
    let dialect = match backend {
        "sqlite" => Dialect::Sqlite,
        // `postgres` stopped working in SQLAlchemy 1.4, but Airflow rewrites it to
        // `postgresql` when it loads the configuration, so old configs still run.
        "postgresql" | "postgres" => Dialect::Postgres,
        "mysql" | "mariadb" => Dialect::Mysql,
        _ => return Err(UrlError::UnsupportedScheme { scheme: scheme.to_string() }),
    };
    match driver {
        None => Ok((dialect, None)),
        Some(d) if !d.is_empty() && !d.contains('+') => Ok((dialect, Some(d.to_string()))),
        Some(_) => Err(UrlError::BadDriver { scheme: scheme.to_string() }),
    }
}

/// Splits off `user[:password]@` the way SQLAlchemy's pattern
/// `(?:([^:/]*)(?::([^@]*))?@)?` settles: the user name runs to the first `:` or `/`; with a
/// `:` there, the password runs to the NEXT `@` (it may hold `:`, `/`, `?`, but not `@`);
/// without a password, the user name ends at the LAST `@` before that first `:` or `/`.
/// Returns the raw (still encoded) parts and the text after the `@`.
fn split_userinfo(rest: &str) -> (Option<(&str, Option<&str>)>, &str) {
    let user_end = rest.find([':', '/']).unwrap_or(rest.len());
    if let Some(after_colon) = rest[user_end..].strip_prefix(':')
        && let Some(at) = after_colon.find('@')
    {
        return (Some((&rest[..user_end], Some(&after_colon[..at]))), &after_colon[at + 1..]);
    }
    match rest[..user_end].rfind('@') {
        Some(at) => (Some((&rest[..at], None)), &rest[at + 1..]),
        None => (None, rest),
    }
}

/// Splits `host[:port]` (or `[v6][:port]`) from the front of `rest`, returning the host, the
/// raw port text and what follows (empty, or starting with `/` or `?`).
fn split_host_port<'a>(
    rest: &'a str,
    scheme: &str,
) -> Result<(Option<String>, Option<&'a str>, &'a str), UrlError> {
    let bad_host = |problem| UrlError::BadHost { scheme: scheme.to_string(), problem };
    let host_part_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let host_part = &rest[..host_part_end];
    let after = &rest[host_part_end..];

    // SQLAlchemy takes the bracketed form up to the last `]` before any `/` or `?`.
    let bracketed = host_part
        .strip_prefix('[')
        .and_then(|s| s.rfind(']').filter(|close| *close > 0).map(|close| (s, close)));
    if let Some((inner_and_tail, close)) = bracketed {
        let inner = &inner_and_tail[..close];
        let tail = &inner_and_tail[close + 1..];
        // SQLAlchemy silently drops anything between `]` and `:port`, `/` or `?`.
        let port = match tail {
            "" => None,
            _ => Some(
                tail.strip_prefix(':')
                    .ok_or_else(|| bad_host("unexpected text after the closing ']' of an IPv6 address"))?,
            ),
        };
        if inner.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad_host("whitespace inside an IPv6 address"));
        }
        return Ok((Some(inner.to_string()), port, after));
    }

    let (host, port) = host_part.split_once(':').map_or((host_part, None), |(host, port)| (host, Some(port)));
    if host.contains('@') {
        // `user:p@ss@host`: SQLAlchemy ends the password at the first `@` and keeps the rest
        // in the host.
        return Err(bad_host("it contains '@'; an '@' inside the user name or password must be written %40"));
    }
    if host.contains(['[', ']']) {
        return Err(bad_host("unbalanced '[' or ']'; an IPv6 address is written [::1]"));
    }
    if host.chars().any(|c| c.is_whitespace() || c.is_control() || c == '#') {
        return Err(bad_host("it contains whitespace or '#'"));
    }
    let host = (!host.is_empty()).then(|| host.to_string());
    Ok((host, port, after))
}

/// ASCII digits only, 1 to 65535. Python's `int()` would also take `+5432`, ` 5432`, `5_432`
/// and non-ASCII digits; nobody means those in a URL.
fn parse_port(text: &str) -> Option<u16> {
    // `parse` alone would also take a leading `+`; leading zeros it reads as Python does.
    let digits = text.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| text.parse::<u16>().ok()).flatten().filter(|p| *p != 0)
}

/// `urllib.parse.parse_qsl` with its defaults: pairs split on `&`, `+` means space, pairs
/// without `=` or with an empty value are dropped.
fn parse_query(text: &str) -> Vec<(String, String)> {
    text.split('&')
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            if value.is_empty() {
                return None;
            }
            Some((percent_decode(&key.replace('+', " ")), percent_decode(&value.replace('+', " "))))
        })
        .collect()
}

/// Teaches `secrets` what a failing `_cmd` printed on stdout, line by line
/// (`Secrets::add_command_line`). A line that is the connection string itself gives its
/// passwords first: the URL grammar finds them exactly, blanks included, where foreign text
/// would end the URL at a blank.
pub(crate) fn add_command_output(secrets: &mut Secrets, output: &str) {
    for line in output.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Ok(url) = DbUrl::parse(line) {
            url.passwords().for_each(|password| secrets.add_password(password));
        }
        secrets.add_command_line(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PW: &str = "S3cr3t-pw";

    fn parse(url: &str) -> DbUrl {
        match DbUrl::parse(url) {
            Ok(u) => u,
            Err(e) => panic!("{url:?} should parse: {e}"),
        }
    }

    fn parse_err(url: &str) -> UrlError {
        match DbUrl::parse(url) {
            Ok(u) => panic!("{url:?} should fail, got {u:?}"),
            Err(e) => e,
        }
    }

    #[allow(clippy::unnecessary_wraps)] // shorthand for the optional fields
    fn s(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
    }

    #[test]
    fn every_supported_scheme() {
        let cases = [
            ("sqlite", Dialect::Sqlite, None),
            ("sqlite+pysqlite", Dialect::Sqlite, Some("pysqlite")),
            ("sqlite+aiosqlite", Dialect::Sqlite, Some("aiosqlite")),
            ("postgresql", Dialect::Postgres, None),
            ("postgres", Dialect::Postgres, None),
            ("postgres+psycopg2", Dialect::Postgres, Some("psycopg2")),
            ("postgresql+psycopg2", Dialect::Postgres, Some("psycopg2")),
            ("postgresql+psycopg", Dialect::Postgres, Some("psycopg")),
            ("postgresql+asyncpg", Dialect::Postgres, Some("asyncpg")),
            ("postgresql+pg8000", Dialect::Postgres, Some("pg8000")),
            ("postgresql+somethingnew", Dialect::Postgres, Some("somethingnew")),
            ("mysql", Dialect::Mysql, None),
            ("mysql+mysqldb", Dialect::Mysql, Some("mysqldb")),
            ("mysql+pymysql", Dialect::Mysql, Some("pymysql")),
            ("mysql+mysqlconnector", Dialect::Mysql, Some("mysqlconnector")),
            ("mariadb", Dialect::Mysql, None),
            ("mariadb+mysqldb", Dialect::Mysql, Some("mysqldb")),
            ("mariadb+pymysql", Dialect::Mysql, Some("pymysql")),
        ];
        for (scheme, dialect, driver) in cases {
            let text = if dialect == Dialect::Sqlite {
                format!("{scheme}:////tmp/airflow.db")
            } else {
                format!("{scheme}://airflow:{PW}@db.example:1234/airflow")
            };
            let u = parse(&text);
            assert_eq!(u.dialect, dialect, "{scheme}");
            assert_eq!(u.driver.as_deref(), driver, "{scheme}");
            assert_eq!(u.scheme, scheme);
            if dialect != Dialect::Sqlite {
                assert_eq!(u.username, s("airflow"));
                assert_eq!(u.password, s(PW));
                assert_eq!(u.host, s("db.example"));
                assert_eq!(u.port, Some(1234));
                assert_eq!(u.database, s("airflow"));
            }
        }
        assert_eq!(Dialect::Mysql.name(), "mysql");
        assert_eq!(Dialect::Postgres.to_string(), "postgresql");
        assert_eq!(Dialect::Sqlite.name(), "sqlite");
    }

    #[test]
    fn unsupported_scheme_is_named() {
        let e = parse_err(&format!("oracle://scott:{PW}@h/db"));
        assert_eq!(
            e.to_string(),
            "unsupported database scheme \"oracle\" in [database] sql_alchemy_conn \
             (supported: sqlite, postgresql, mysql)"
        );
        assert!(matches!(
            parse_err("mssql+pyodbc://h/db"),
            UrlError::UnsupportedScheme { scheme } if scheme == "mssql+pyodbc"
        ));
        // Case matters to SQLAlchemy's plugin loader too.
        assert!(matches!(parse_err("POSTGRESQL://h/db"), UrlError::UnsupportedScheme { .. }));
        assert!(matches!(parse_err("+pymysql://h/db"), UrlError::UnsupportedScheme { .. }));
    }

    #[test]
    fn malformed_driver() {
        assert!(matches!(parse_err("mysql+://h/db"), UrlError::BadDriver { .. }));
        assert!(matches!(parse_err("mysql+pymysql+x://h/db"), UrlError::BadDriver { .. }));
        assert!(matches!(parse_err("sqlite+pysqlcipher://:key@/x.db"), UrlError::SqlCipher { .. }));
    }

    #[test]
    fn spec_examples() {
        let u = parse("postgresql+psycopg2://user:pass@host:5432/db?sslmode=require");
        assert_eq!(u.host, s("host"));
        assert_eq!(u.query_value("sslmode"), Some("require"));
        let u = parse("mysql+mysqldb://user:pass@host:3306/db");
        assert_eq!((u.port, u.database), (Some(3306), s("db")));
    }

    #[test]
    fn password_may_hold_colon_slash_question_mark() {
        let u = parse("postgresql://user:a:b/c?d#e@host/db");
        assert_eq!(u.username, s("user"));
        assert_eq!(u.password, s("a:b/c?d#e"));
        assert_eq!(u.host, s("host"));
        assert_eq!(u.database, s("db"));
    }

    #[test]
    fn at_sign_splitting_matches_sqlalchemy() {
        // No password: the user name runs to the last '@' before the first ':' or '/'.
        let u = parse("postgresql://us@er@host/db");
        assert_eq!((u.username, u.password, u.host), (s("us@er"), None, s("host")));
        let u = parse("postgresql://us@er:pw@host/db");
        assert_eq!((u.username, u.password, u.host), (s("us@er"), s("pw"), s("host")));
        // With a password, SQLAlchemy ends it at the first '@' and leaves "ss@host" as the
        // host; refused here, with a hint and without the password.
        let e = parse_err("postgresql://user:p@ss@host/db");
        assert!(matches!(e, UrlError::BadHost { .. }));
        let msg = e.to_string();
        assert!(msg.contains("%40"), "{msg}");
        assert!(!msg.contains("ss@host"), "{msg}");
        // Encoded, it works.
        let u = parse("postgresql://user:p%40ss@host/db");
        assert_eq!((u.password, u.host), (s("p@ss"), s("host")));
    }

    #[test]
    fn query_at_sign_after_port_is_taken_as_userinfo_like_sqlalchemy() {
        // make_url("postgresql://host:5432/db?x=a@b") gives user "host", password
        // "5432/db?x=a", host "b": mirrored, so the tool fails where Airflow fails.
        let u = parse("postgresql://host:5432/db?x=a@b");
        assert_eq!(u.username, s("host"));
        assert_eq!(u.password, s("5432/db?x=a"));
        assert_eq!(u.host, s("b"));
        assert_eq!(u.database, None);
    }

    #[test]
    fn percent_decoding() {
        let u = parse("postgresql://u%40x:p%3Aw%2F%25%20+@h/d%2Fb");
        assert_eq!(u.username, s("u@x"));
        // unquote, not unquote_plus: '+' stays a plus in the password.
        assert_eq!(u.password, s("p:w/% +"));
        assert_eq!(u.database, s("d/b"));
        // Invalid escapes stay; bytes that are not UTF-8 become U+FFFD.
        let u = parse("postgresql://u:%zz%e9%C3%A9%4@h/db");
        assert_eq!(u.password, s("%zz\u{FFFD}\u{e9}%4"));
        // The host is not decoded (SQLAlchemy keeps it as written).
        let u = parse("postgresql://[fe80::1%25eth0]:5432/db");
        assert_eq!(u.host, s("fe80::1%25eth0"));
    }

    #[test]
    fn empty_user_and_password() {
        let u = parse("postgresql://u:@h/db");
        assert_eq!((u.username, u.password), (s("u"), s("")));
        let u = parse("postgresql://:pw@h/db");
        assert_eq!((u.username, u.password), (s(""), s("pw")));
        let u = parse("postgresql://@h/db");
        assert_eq!((u.username, u.password), (s(""), None));
        let u = parse("postgresql://h/db");
        assert_eq!((u.username, u.password), (None, None));
    }

    #[test]
    fn hosts_ports_and_databases() {
        let u = parse("postgresql://u:p@[::1]:5432/db");
        assert_eq!((u.host, u.port), (s("::1"), Some(5432)));
        let u = parse("postgresql://[2001:db8::7]/db");
        assert_eq!((u.host, u.port), (s("2001:db8::7"), None));
        let u = parse("mysql://10.0.0.5:3306/airflow");
        assert_eq!((u.host, u.port), (s("10.0.0.5"), Some(3306)));
        let u = parse("postgresql://:5432/db");
        assert_eq!((u.host, u.port), (None, Some(5432)));
        let u = parse("postgresql://u:pw@h:5432");
        assert_eq!((u.port, u.database), (Some(5432), None));
        let u = parse("postgresql://h?sslmode=require");
        assert_eq!(u.database, None);
        assert_eq!(u.query, pairs(&[("sslmode", "require")]));
        let u = parse("postgresql://h/db/x");
        assert_eq!(u.database, s("db/x"));
        let u = parse("postgresql://h/");
        assert_eq!(u.database, s(""));
        let u = parse("postgresql://h:065535/db");
        assert_eq!(u.port, Some(65535));
    }

    #[test]
    fn sockets_land_in_query() {
        let u = parse("postgresql://user@/db?host=/var/run/postgresql");
        assert_eq!(u.host, None);
        assert_eq!(u.username, s("user"));
        assert_eq!(u.query_value("host"), Some("/var/run/postgresql"));
        let u = parse("mysql://user@localhost/db?unix_socket=/run/mysqld/mysqld.sock");
        assert_eq!(u.host, s("localhost"));
        assert_eq!(u.query_value("unix_socket"), Some("/run/mysqld/mysqld.sock"));
    }

    #[test]
    fn query_like_parse_qsl() {
        let u = parse("postgresql://h/db?a=&b=1&c&a=2&a=3&d=x+y%2Bz&&e=1;f=2");
        assert_eq!(u.query, pairs(&[("b", "1"), ("a", "2"), ("a", "3"), ("d", "x y+z"), ("e", "1;f=2")]));
        assert_eq!(u.query_value("a"), Some("3"));
        assert_eq!(u.query_value("c"), None);
        assert_eq!(u.query_value("zz"), None);
        assert!(parse("postgresql://h/db?").query.is_empty());
        let u = parse("postgresql://h/db?options=-c%20search_path%3Dx&k=v=w");
        assert_eq!(u.query_value("options"), Some("-c search_path=x"));
        assert_eq!(u.query_value("k"), Some("v=w"));
    }

    #[test]
    fn sqlite_forms() {
        let file = |p: &str| Some(SqliteTarget::File(PathBuf::from(p)));
        assert_eq!(parse("sqlite:///rel.db").sqlite_target(), file("rel.db"));
        assert_eq!(parse("sqlite:////abs/x.db").sqlite_target(), file("/abs/x.db"));
        assert_eq!(parse("sqlite:////abs/x.db?timeout=30").sqlite_target(), file("/abs/x.db"));
        assert_eq!(parse("sqlite:///my%20db.db").sqlite_target(), file("my db.db"));
        assert_eq!(parse("sqlite+pysqlite:////a/b.db").sqlite_target(), file("/a/b.db"));
        assert_eq!(parse("sqlite://").sqlite_target(), Some(SqliteTarget::Memory));
        assert_eq!(parse("sqlite:///").sqlite_target(), Some(SqliteTarget::Memory));
        assert_eq!(parse("sqlite:///:memory:").sqlite_target(), Some(SqliteTarget::Memory));
        assert_eq!(parse("postgresql://h/db").sqlite_target(), None);
        // Without uri=true a "file:" name is a plain file name, as in SQLAlchemy.
        assert_eq!(parse("sqlite:///file:x.db").sqlite_target(), file("file:x.db"));
        // An empty user is falsy in SQLAlchemy's check, so it passes there too.
        assert_eq!(parse("sqlite://@/x.db").sqlite_target(), file("x.db"));
    }

    #[test]
    fn sqlite_refusals() {
        for url in [
            "sqlite://host/x.db",
            "sqlite://abs/path.db",
            "sqlite://u@/x.db",
            &format!("sqlite://:{PW}@/x.db"),
            "sqlite://:5/x.db",
        ] {
            assert!(matches!(parse_err(url), UrlError::SqliteNetloc { .. }), "{url}");
        }
        for url in ["sqlite:///file://host/x.db?uri=true", "sqlite:////x.db?mode=ro&uri=true"] {
            assert!(matches!(parse_err(url), UrlError::SqliteUriFilename { .. }), "{url}");
        }
        assert!(parse("sqlite:///x.db?uri=false").sqlite_target().is_some());
    }

    /// The `uri=true` forms SQLAlchemy hands to SQLite as URI filenames, as Airflow reads them.
    #[test]
    fn sqlite_uri_filenames() {
        let file = |p: &str| Some(SqliteTarget::File(PathBuf::from(p)));
        let ro = parse("sqlite:///file:/srv/air%2520flow.db?mode=ro&uri=true");
        assert_eq!((ro.sqlite_target(), ro.sqlite_read_only()), (file("/srv/air flow.db"), Some("mode=ro")));
        assert_eq!(parse("sqlite:///file:x.db?uri=1").sqlite_target(), file("x.db"));
        assert_eq!(parse("sqlite:///file:///a/x.db?uri=true&immutable=1").sqlite_target(), file("/a/x.db"));
        assert_eq!(parse("sqlite:///file://localhost/a/x.db?uri=true").sqlite_target(), file("/a/x.db"));
        assert_eq!(parse("sqlite:////a/x.db?uri=true&timeout=5").sqlite_target(), file("/a/x.db"));
    }

    #[test]
    fn sqlite_options_read_only_or_refused() {
        assert_eq!(parse("sqlite:////a.db?mode=ro").sqlite_read_only(), Some("mode=ro"));
        assert_eq!(
            parse("sqlite:////a.db?immutable=on&cache=shared").sqlite_read_only(),
            Some("immutable=1")
        );
        for url in
            ["sqlite:////a.db", "sqlite:////a.db?mode=rw&immutable=0&timeout=30", "postgresql://h/db?mode=ro"]
        {
            assert_eq!(DbUrl::parse(url).unwrap().sqlite_read_only(), None, "{url}");
        }
        assert!(
            matches!(parse_err("sqlite:////a.db?Mode=ro"), UrlError::SqliteOption { key, .. } if key == "Mode")
        );
        assert!(matches!(
            parse_err("sqlite:////a.db?mode=memory"),
            UrlError::SqliteOptionValue { key: "mode", .. }
        ));
        assert!(matches!(
            parse_err("sqlite:////a.db?immutable=2"),
            UrlError::SqliteOptionValue { key: "immutable", .. }
        ));
    }

    #[test]
    fn garbage_is_refused() {
        for url in [
            "foo",
            "postgresql:/x",
            "postgresql//h/db",
            " postgresql://h/db",
            "://h/db",
            "postgre sql://h/db",
            "user:pass@host/db",
        ] {
            assert_eq!(parse_err(url), UrlError::NotAUrl, "{url}");
        }
        assert_eq!(parse_err(""), UrlError::Empty);
        // Its example reaches the user as written: no masking takes a placeholder for a password.
        let message = UrlError::NotAUrl.to_string();
        assert_eq!(crate::redact::mask(&message), message);
        assert!(message.contains("postgresql://<user>:<password>@<host>:5432/<database>"), "{message}");
    }

    #[test]
    fn bad_ports() {
        for url in [
            "postgresql://h:abc/db",
            "postgresql://h:/db",
            "postgresql://h: 5432/db",
            "postgresql://h:+5432/db",
            "postgresql://h:5_432/db",
            "postgresql://h:0/db",
            "postgresql://h:65536/db",
            "postgresql://h:99999999999999999999/db",
            "postgresql://h:5432:1/db",
            "postgresql://h:\u{665}\u{664}/db",
            "postgresql://[::1]:x/db",
        ] {
            assert!(matches!(parse_err(url), UrlError::BadPort { .. }), "{url}");
        }
    }

    #[test]
    fn bad_hosts() {
        for url in [
            "postgresql://[::1]x:5432/db",
            "postgresql://[]/db",
            "postgresql://[::1",
            "postgresql://h]/db",
            "postgresql://h st/db",
            "postgresql://h#frag/db",
            "postgresql://u:p@w@h/db",
        ] {
            assert!(matches!(parse_err(url), UrlError::BadHost { .. }), "{url}");
        }
    }

    #[test]
    fn no_error_message_contains_the_password() {
        let urls = [
            // The password where a port belongs: "user:S3cr3t-pw/db" without "@host".
            format!("postgresql://user:{PW}/db"),
            format!("postgresql://user:{PW}@h:99999/db"),
            format!("postgresql://user:{PW}@h:{PW}/db"),
            format!("postgresql://user:{PW}@ho st/db"),
            format!("postgresql://user:a@{PW}@host/db"),
            format!("postgresql://user:{PW}@[::1]{PW}/db"),
            format!("oracle://user:{PW}@h/db"),
            format!("mysql+://user:{PW}@h/db"),
            format!("user:{PW}@h/db"),
            PW.to_string(),
            format!("sqlite://user:{PW}@/x.db"),
            format!("sqlite+pysqlcipher://:{PW}@/x.db"),
            format!("sqlite:///x.db?uri=true&password={PW}"),
        ];
        for url in &urls {
            let e = parse_err(url);
            let msg = e.to_string();
            assert!(!msg.contains(PW), "{url}: {msg}");
            assert!(!format!("{e:?}").contains(PW), "{url}: {e:?}");
            assert!(!msg.contains('\n'), "{msg}");
        }
    }

    #[test]
    fn redacted_hides_password_everywhere() {
        let u = parse(&format!("postgresql+psycopg2://airflow:{PW}@db:5432/airflow?sslmode=require"));
        assert_eq!(u.redacted(), "postgresql+psycopg2://airflow:***@db:5432/airflow?sslmode=require");
        assert_eq!(u.to_string(), u.redacted());
        assert!(!format!("{u:?}").contains(PW));
        let u = parse("mariadb+pymysql://u%20x@[::1]:3306/db?unix_socket=/run/m.sock&a=b%26c");
        assert_eq!(u.redacted(), "mariadb+pymysql://u x@[::1]:3306/db?unix_socket=/run/m.sock&a=b%26c");
        assert_eq!(parse("sqlite:////tmp/a b.db").redacted(), "sqlite:////tmp/a b.db");
        assert_eq!(parse("sqlite://").redacted(), "sqlite://");
        assert_eq!(parse("postgresql://u:@h/db").redacted(), "postgresql://u:***@h/db");
        // A password given as a query option is hidden too, and only its value.
        let u = parse("postgresql://u@h/db?sslmode=require&password=airflow&sslpassword=k%20y&passwords=1");
        assert_eq!(
            u.redacted(),
            "postgresql://u@h/db?sslmode=require&password=***&sslpassword=***&passwords=1"
        );
        assert_eq!(u.passwords().collect::<Vec<_>>(), ["airflow", "k y"]);
        let u = parse(&format!("mysql://u:{PW}@h/db?passwd=x"));
        assert_eq!(u.passwords().collect::<Vec<_>>(), [PW, "x"]);
        assert_eq!(parse("mysql://u@h/db").passwords().count(), 0);
    }

    #[test]
    fn render_round_trips() {
        let urls = [
            "postgresql://u%40x:p%3Aw%2F%25%20+%40@h/d%2Fb",
            "postgresql://us%3Aer:pa%2Fss%3F%23@h:1/db?a=1&b=x+y&a=%40%26%3D",
            "mysql+pymysql://%E6%97%A5%E6%9C%AC:%F0%9F%94%91@[::1]:3306/db",
            "postgresql://user@/db?host=/var/run/postgresql",
            "postgresql://@h/db",
            "postgresql://:pw@h/db",
            "postgresql://h:5432/d%40b%3Fc%23",
            "postgresql://h:5432/db?x=a%40b",
            "sqlite:////abs/with%20space/x.db?timeout=30",
            "sqlite:///rel.db",
            "sqlite:///",
            "sqlite://",
            "mariadb://h",
        ];
        for url in urls {
            let u = parse(url);
            let again = parse(&u.render(false));
            assert_eq!(again, u, "{url} -> {}", u.render(false));
            assert!(u.redacted().contains(":***@") == u.password.is_some(), "{url}");
        }
        // Raw values come back through an encode/decode cycle unchanged.
        for user in ["a@b", "c:d", "e/f", "g h", "i+j", "k%l", "ü"] {
            for password in ["p@ss", "p:w", "a/b?c#d", "x y+z", "100%", "ünï", ""] {
                let u = DbUrl {
                    scheme: "postgresql".into(),
                    dialect: Dialect::Postgres,
                    driver: None,
                    username: s(user),
                    password: s(password),
                    host: s("h"),
                    port: Some(5432),
                    database: s("db"),
                    query: pairs(&[("sslmode", "require")]),
                };
                assert_eq!(parse(&u.render(false)), u, "{user:?} {password:?}");
            }
        }
    }

    /// Generated URLs of every shape (user and password drawn from the characters URLs must
    /// encode, IPv4/IPv6/name/no host, ports, databases with `/`, `?`, `#`, socket and other
    /// query options) survive render → parse unchanged, and `redacted()` never holds the
    /// password. The seed is in every failure; the same seed gives the same URLs.
    #[test]
    fn generated_urls_round_trip() {
        use crate::test_rng::Rng;
        const CHARS: &[&str] = &[
            "a", "Z", "0", "@", ":", "/", "?", "#", "%", "+", " ", "&", "=", "[", "]", ";", "ü", "日", "🔑",
            "-", ".",
        ];
        let seed = 0x5eed_0123_4567_89ab_u64;
        let mut rng = Rng(seed);
        for i in 0..2000 {
            let (scheme, dialect) = match rng.next() % 3 {
                0 => ("postgresql", Dialect::Postgres),
                1 => ("mysql", Dialect::Mysql),
                _ => ("postgresql+psycopg2", Dialect::Postgres),
            };
            let host = match rng.next() % 5 {
                0 => None,
                1 => s("::1"),
                2 => s("2001:db8::7"),
                3 => s("10.0.0.5"),
                _ => s(rng.pick(&["db", "db.example.com", "localhost", "a-b"])),
            };
            let mut query = Vec::new();
            for _ in 0..rng.next() % 3 {
                let key = rng.pick(&["host", "unix_socket", "sslmode", "application_name", "x"]);
                let value = match key {
                    "host" => "/var/run/postgresql".to_string(),
                    "unix_socket" => "/run/mysqld/mysqld.sock".to_string(),
                    _ => rng.text(CHARS, 6),
                };
                query.push((key.to_string(), value));
            }
            // As in SQLAlchemy, a password is part of a URL only with a user (maybe empty).
            let username = (!rng.next().is_multiple_of(4)).then(|| rng.text(CHARS, 8));
            let password = (username.is_some() && !rng.next().is_multiple_of(4)).then(|| rng.text(CHARS, 12));
            let u = DbUrl {
                scheme: scheme.into(),
                dialect,
                driver: scheme.split_once('+').map(|(_, d)| d.to_string()),
                username,
                password,
                host,
                port: (rng.next().is_multiple_of(2))
                    .then(|| u16::try_from(1 + rng.next() % 65535).unwrap_or(1)),
                database: (!rng.next().is_multiple_of(5)).then(|| rng.text(CHARS, 8)),
                query,
            };
            let rendered = u.render(false);
            match DbUrl::parse(&rendered) {
                Ok(back) => assert_eq!(back, u, "seed {seed:#x}, case {i}: {rendered}"),
                Err(e) => panic!("seed {seed:#x}, case {i}: {rendered} does not parse: {e}"),
            }
            if let Some(password) = u.password.as_deref().filter(|p| p.len() > 2) {
                assert!(!u.redacted().contains(password), "seed {seed:#x}, case {i}: {}", u.redacted());
            }
            // Masking the URL as text, knowing its password, hides exactly what `redacted()`
            // hides, whatever the password holds (blanks, `@`, `:`, `%`).
            if let Some(password) = u.password.as_deref().filter(|p| !p.is_empty()) {
                let mut known = crate::redact::Secrets::new();
                known.add_password(password);
                assert_eq!(known.mask(&rendered), u.redacted(), "seed {seed:#x}, case {i}: {rendered}");
            }
        }
    }
}
