//! libpq's environment: what Airflow's psycopg connections take from `PGHOST`, `PGPASSWORD`,
//! `PGSSLMODE`, … and the password file (`PGPASSFILE`, `~/.pgpass`) for the parts of the URL
//! that are missing, so that a deployment relying on them reaches the same server, as the same
//! user, with the same TLS, from this tool. libpq's order is kept: the URL and its query
//! first, then the environment, then the password file (only when no password was given),
//! then the defaults. The environment is read once into an [`Environment`], so that tests give
//! their own. A variable libpq honours that this tool cannot (a service file, `hostaddr`) is
//! refused, since ignoring it could reach another server; the ones that only tune a session
//! this tool sets itself (`PGTZ`, `PGDATESTYLE`) are left alone. Nothing here is printed but
//! libpq's own warning about a password file others can read; a password never is.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::url::DbUrl;

/// Each variable and the connection parameter it fills when the URL gives none, as libpq maps
/// them.
pub(super) const VARIABLES: &[(&str, &str)] = &[
    ("PGHOST", "host"),
    ("PGPORT", "port"),
    ("PGDATABASE", "dbname"),
    ("PGUSER", "user"),
    ("PGPASSWORD", "password"),
    ("PGSSLMODE", "sslmode"),
    ("PGSSLROOTCERT", "sslrootcert"),
    ("PGSSLCERT", "sslcert"),
    ("PGSSLKEY", "sslkey"),
    ("PGCONNECT_TIMEOUT", "connect_timeout"),
    ("PGAPPNAME", "application_name"),
    ("PGOPTIONS", "options"),
    ("PGTARGETSESSIONATTRS", "target_session_attrs"),
    ("PGCLIENTENCODING", "client_encoding"),
    ("PGGSSENCMODE", "gssencmode"),
];

/// Variables libpq honours that would change which server is reached or how it is trusted,
/// and that this tool does not implement: refused rather than ignored.
pub(super) const REFUSED: &[(&str, &str)] = &[
    ("PGSERVICE", "connection service files are not supported; put the service's parameters in the URL"),
    ("PGHOSTADDR", "hostaddr is not supported; give the address as the host"),
    ("PGREQUIREAUTH", "require_auth is not supported"),
    ("PGSSLCRL", "certificate revocation lists are not supported"),
    ("PGSSLCRLDIR", "certificate revocation lists are not supported"),
];

/// The process environment as far as libpq reads it.
#[derive(Debug, Clone, Default)]
pub(super) struct Environment {
    vars: HashMap<String, String>,
    /// The home directory, for `~/.pgpass` and `~/.postgresql/`.
    pub(super) home: Option<PathBuf>,
    /// The operating system's user name: libpq's default user.
    pub(super) os_user: Option<String>,
}

impl Environment {
    /// The running process's. A `PG…` variable whose value is not UTF-8 is refused by name
    /// (exit 3): taken for unset, a `PGHOST` or `PGPASSWORD` would quietly become libpq's
    /// default.
    pub(super) fn current() -> crate::error::Result<Environment> {
        let mut vars = HashMap::new();
        for (name, value) in crate::env::os_with_prefix("PG") {
            // A name that is not UTF-8 is none that libpq reads.
            if let Ok(name) = name.into_string() {
                let value = crate::env::text(&name, value)?;
                vars.insert(name, value);
            }
        }
        Ok(Environment {
            vars,
            home: crate::env::os("HOME").map(PathBuf::from),
            os_user: whoami::username().ok(),
        })
    }

    #[cfg(test)]
    pub(super) fn of(vars: &[(&str, &str)]) -> Environment {
        Environment {
            vars: vars.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect(),
            home: None,
            os_user: Some("osuser".to_string()),
        }
    }

    /// A variable's value; an empty one counts as unset.
    pub(super) fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// The password file libpq reads: `PGPASSFILE`, else `~/.pgpass`.
    pub(super) fn passfile(&self) -> Option<PathBuf> {
        match self.var("PGPASSFILE") {
            Some(path) => Some(PathBuf::from(path)),
            None => self.home.as_ref().map(|home| home.join(".pgpass")),
        }
    }
}

/// The URL with each missing part filled from the environment, as query parameters (which
/// the connection layer reads as it reads the URL's own), and the variables that filled one.
pub(super) fn fill(url: &DbUrl, env: &Environment) -> (DbUrl, Vec<&'static str>) {
    let mut filled = url.clone();
    let mut used = Vec::new();
    let has = |key: &str| url.query.iter().any(|(k, _)| k == key);
    for (var, key) in VARIABLES {
        let given = has(key)
            || match *key {
                "host" => url.host.is_some(),
                "port" => url.port.is_some(),
                "user" => url.username.as_deref().is_some_and(|u| !u.is_empty()),
                "password" => url.password.is_some(),
                "dbname" => url.database.as_deref().is_some_and(|d| !d.is_empty()),
                _ => false,
            };
        if given {
            continue;
        }
        if let Some(value) = env.var(var) {
            filled.query.push(((*key).to_string(), value.to_string()));
            used.push(*var);
        }
    }
    (filled, used)
}

/// One line of a password file: `hostname:port:database:username:password`, each of the first
/// four `*` for any value (`None`), `\` escaping `:` and `\`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    fields: [Option<String>; 4],
    password: String,
}

/// The entries of a password file's text, in order; comments (`#`) and lines with fewer than
/// five fields are skipped, as libpq skips them.
fn parse(text: &str) -> Vec<Entry> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Entry> {
    let line = line.trim_end_matches('\r');
    if line.starts_with('#') || line.is_empty() {
        return None;
    }
    // Each field split at an unescaped `:` and unescaped; whether it held an escape tells a
    // `*` from a `\*`.
    let mut fields = Vec::new();
    let (mut current, mut escaped) = (String::new(), false);
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                escaped = true;
                current.extend(chars.next());
            }
            ':' if fields.len() < 4 => {
                let field = std::mem::take(&mut current);
                fields.push(Some(field).filter(|field| escaped || field != "*"));
                escaped = false;
            }
            _ => current.push(c),
        }
    }
    Some(Entry { fields: fields.try_into().ok()?, password: current })
}

/// What the password file is matched on for one server: libpq's host name (`localhost` for a
/// Unix socket), port, database and user, each with its default applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target<'a> {
    pub(super) host: &'a str,
    pub(super) port: u16,
    pub(super) database: &'a str,
    pub(super) user: &'a str,
}

/// The password of the first entry of `text` that matches `target`.
fn lookup(text: &str, target: &Target<'_>) -> Option<String> {
    let port = target.port.to_string();
    parse(text)
        .into_iter()
        .find(|e| {
            let values = [target.host, &port, target.database, target.user];
            e.fields.iter().zip(values).all(|(field, value)| field.as_deref().is_none_or(|f| f == value))
        })
        .map(|e| e.password)
}

/// The password the password file `path` gives the first of `targets` it has an entry for.
/// A missing file is no password; one that is not a plain file, or that the group or others
/// may read or write, is ignored with libpq's warning, which `warn` hears.
pub(super) fn password_from_file(
    path: &Path,
    targets: &[Target<'_>],
    warn: &mut dyn FnMut(String),
) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        warn(format!("password file \"{}\" is not a plain file", path.display()));
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            warn(format!(
                "password file \"{}\" has group or world access; permissions should be u=rw (0600) or less",
                path.display()
            ));
            return None;
        }
    }
    let text = String::from_utf8(crate::fs::read_bounded(path).ok()?).ok()?;
    targets.iter().find_map(|target| lookup(&text, target))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target<'a>(host: &'a str, port: u16, database: &'a str, user: &'a str) -> Target<'a> {
        Target { host, port, database, user }
    }

    #[test]
    fn password_file_lines_and_escapes() {
        let e = parse_line(r"db.example:5432:airflow:airflow:s\:e\\cret").unwrap();
        assert_eq!(e.password, r"s:e\cret");
        assert_eq!(e.fields[0], Some("db.example".into()));
        // A password may hold unescaped colons: the fifth field is the rest of the line.
        assert_eq!(parse_line("h:1:d:u:a:b").unwrap().password, "a:b");
        // `\*` is a literal star, `*` any value.
        let e = parse_line(r"\*:*:*:*:pw").unwrap();
        assert_eq!(e.fields[0], Some("*".into()));
        assert_eq!(e.fields[1], None);
        assert_eq!(parse_line("h:p:d:u:pw\r").unwrap().password, "pw");
        for skipped in ["# h:1:d:u:pw", "", "h:1:d:u", "only text"] {
            assert_eq!(parse_line(skipped), None, "{skipped:?}");
        }
        assert_eq!(parse_line("h:1:d:u:").unwrap().password, "");
    }

    #[test]
    fn password_file_first_matching_line_wins() {
        let text = "\
# comment
db:5432:airflow:airflow:first
db:*:*:airflow:second
*:*:*:*:fallback
localhost:5433:*:*:socket
";
        assert_eq!(lookup(text, &target("db", 5432, "airflow", "airflow")).as_deref(), Some("first"));
        assert_eq!(lookup(text, &target("db", 6432, "other", "airflow")).as_deref(), Some("second"));
        assert_eq!(lookup(text, &target("x", 1, "y", "z")).as_deref(), Some("fallback"));
        assert_eq!(
            lookup("localhost:5433:*:*:socket", &target("localhost", 5433, "d", "u")).as_deref(),
            Some("socket")
        );
        assert_eq!(lookup("db:5432:airflow:airflow:pw", &target("db", 5432, "airflow", "Airflow")), None);
    }

    #[test]
    fn environment_fills_only_what_the_url_lacks() {
        let env = Environment::of(&[
            ("PGHOST", "envhost"),
            ("PGPORT", "6000"),
            ("PGUSER", "envuser"),
            ("PGPASSWORD", "envpw"),
            ("PGDATABASE", "envdb"),
            ("PGSSLMODE", "require"),
            ("PGAPPNAME", ""),
        ]);
        let url = DbUrl::parse("postgresql://urluser@urlhost/urldb?sslmode=disable").unwrap();
        let (filled, used) = fill(&url, &env);
        assert_eq!(used, ["PGPORT", "PGPASSWORD"]);
        assert_eq!(filled.query_value("sslmode"), Some("disable"));
        assert_eq!(filled.query_value("password"), Some("envpw"));
        assert_eq!(filled.query_value("user"), None);
        let (filled, used) = fill(&DbUrl::parse("postgresql://").unwrap(), &env);
        assert_eq!(used, ["PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGSSLMODE"]);
        assert_eq!(filled.query_value("host"), Some("envhost"));
        // A URL query parameter counts as given.
        let url = DbUrl::parse("postgresql:///?host=/tmp&port=1&dbname=d&user=u&password=p").unwrap();
        assert_eq!(fill(&url, &env).1, ["PGSSLMODE"]);
    }
}
