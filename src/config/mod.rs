//! The settings `state-store` shares with Apache Airflow 3.3, found the way Airflow's
//! `conf.get` finds them, so that the tool works on the same database with the same limits as
//! the Airflow installation around it.
//!
//! For each option the first of these wins: the command-line flag (where there is one), the
//! `AIRFLOW__{SECTION}__{KEY}` environment variable, its `_CMD` and `_SECRET` forms, the config
//! file's option, its `_cmd` and `_secret` forms, the built-in default. `_cmd` and `_secret`
//! exist only for the options Airflow marks sensitive (here `[database] sql_alchemy_conn`), and
//! that option is also still looked up under its pre-3.0 name `[core] sql_alchemy_conn`. Values
//! from the environment, the file and the defaults get Airflow's `$VAR`/`~` expansion; command
//! output does not. Every value is checked here, before any database is opened, and every
//! answer says where it came from.
//!
//! Nothing is printed and nothing is written: where Airflow would create a missing config file,
//! this module just uses the defaults that Airflow would have used.

mod ini;
mod options;
mod python;
mod sources;
mod toml_file;
mod trust;

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::redact::Masked;
use crate::text::quote;
use ini::{parse_ini, py_space};
use options::*;
use python::*;
use sources::*;
use toml_file::parse_toml;
use trust::Trust;
pub(crate) use trust::Untrusted;

/// The built-in state store backend, the default of `[state_store] backend`.
pub(crate) const METASTORE_BACKEND: &str = "airflow.state.metastore.MetastoreBackend";

/// The REST transport's token command runs as a `_cmd` does.
pub(crate) use python::run_command_bounded_by;
/// Who is told of each `_cmd` command's process group (`signals`, given by `lib.rs`), and how
/// an ending kills a group still running.
pub(crate) use python::{CommandWatch, kill_group, watch_commands};

/// How long a `_cmd` command may run before reading `[state_store] cmd_timeout` (which has no
/// `_cmd` form itself, so nothing runs before it is known).
const DEFAULT_CMD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Other dotted paths that name that very class. Airflow's clean checks
/// `isinstance(backend, MetastoreBackend)` on whatever `import_string` returns, and these two
/// Airflow modules import the class under its own name, so they resolve to it too.
const METASTORE_BACKEND_REEXPORTS: &[&str] = &[
    "airflow.cli.commands.state_store_command.MetastoreBackend",
    "airflow.api_fastapi.execution_api.routes.asset_state_store.MetastoreBackend",
];

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// A command-line flag, e.g. `--batch-size`.
    Flag(&'static str),
    /// An environment variable, by name.
    Env(String),
    /// The output of the command in this environment variable.
    EnvCmd(String),
    /// An option in the config file.
    File { path: PathBuf, line: Option<usize> },
    /// The output of the command in this `_cmd` option of the config file.
    FileCmd { path: PathBuf, line: Option<usize> },
    /// Airflow's built-in default.
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag(flag) => write!(f, "{flag} flag"),
            Source::Env(var) => write!(f, "environment variable {var}"),
            Source::EnvCmd(var) => write!(f, "command in environment variable {var}"),
            Source::File { path, line } | Source::FileCmd { path, line } => {
                let command = if matches!(self, Source::FileCmd { .. }) { "command in " } else { "" };
                write!(f, "{command}{}", path.display())?;
                line.map_or(Ok(()), |line| write!(f, " line {line}"))
            }
            Source::Default => f.write_str("default"),
        }
    }
}

/// A setting's value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

impl<T> Sourced<T> {
    /// The value made another, from the same source.
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Sourced<U> {
        Sourced { value: f(self.value), source: self.source }
    }
}

/// What the command line says about configuration. `batch_size` is the flag's raw text, so
/// that it is checked by the same rules, with the same messages, as the other sources.
#[derive(Debug, Clone, Default)]
pub(crate) struct Overrides {
    pub config_path: Option<PathBuf>,
    pub conn: Option<Masked<String>>,
    pub batch_size: Option<String>,
    pub schema: Option<String>,
}

/// The config file Airflow would read when it does not exist, and what named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MissingConfig {
    pub path: PathBuf,
    /// `$AIRFLOW_CONFIG`, or `$AIRFLOW_HOME/airflow.cfg` (`AIRFLOW_HOME` set or not).
    pub named_by: &'static str,
}

impl fmt::Display for MissingConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (named by {}) does not exist", self.path.display(), self.named_by)
    }
}

/// The checked settings.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The config file actually read, if any.
    pub config_file: Option<PathBuf>,
    /// The config file looked for and not found, when none was read.
    pub missing_config: Option<MissingConfig>,
    /// Why the config file read may not run commands, when another user could have written
    /// it: its plain values are used, and the caller warns once.
    pub untrusted_config: Option<Untrusted>,
    pub backend: Sourced<String>,
    pub default_retention_days: Sourced<u32>,
    pub state_cleanup_batch_size: Sourced<u64>,
    pub clear_on_success: Sourced<bool>,
    /// 0 disables the limit.
    pub max_value_storage_bytes: Sourced<u64>,
    /// An SQLAlchemy URL, possibly with a password: never print it whole.
    pub sql_alchemy_conn: Sourced<Masked<String>>,
    pub sql_alchemy_schema: Sourced<Option<String>>,
    /// Seconds: how long a database statement may run, and with a few seconds more, how long
    /// the tool waits for a database that does not answer (see `db::Timeouts`).
    pub database_timeout: Sourced<u64>,
    /// Seconds a `_cmd` command may run.
    pub cmd_timeout: Sourced<u64>,
}

impl Settings {
    /// Whether `[state_store] backend` is Airflow's built-in metastore backend, the only one
    /// Airflow's own clean works on. A user's subclass cannot be recognised from its name and
    /// counts as custom.
    pub(crate) fn is_builtin_backend(&self) -> bool {
        let name = self.backend.value.as_str();
        name == METASTORE_BACKEND || METASTORE_BACKEND_REEXPORTS.contains(&name)
    }
}

/// Why the settings could not be loaded. Messages never contain the value of a sensitive
/// option nor the output of a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConfigError {
    /// The config file cannot be read.
    #[error("cannot read config file {}: {reason}", path.display())]
    Io { path: PathBuf, reason: String },
    /// The config file is malformed, or a value in it cannot be `%`-expanded.
    #[error("{}{}: {message}", path.display(), line.map(|n| format!(" line {n}")).unwrap_or_default())]
    Parse { path: PathBuf, line: Option<usize>, message: String },
    /// A value was found but is not acceptable. `value` is `None` for sensitive options.
    #[error("invalid {option}{} (from {origin}): {reason}", value.as_deref().map(|v| format!(" {}", quote(v))).unwrap_or_default())]
    Invalid { option: String, value: Option<String>, origin: Source, reason: String },
    /// A `_cmd` command could not be run, failed or printed nothing.
    #[error("cannot get {option} from {origin}: {reason}")]
    Command { option: String, origin: Source, reason: String },
    /// A `_secret` reference, which only Airflow's secrets backend can resolve.
    #[error(
        "{option} (from {origin}) needs Airflow's secrets backend, which state-store cannot \
         reach; set the value directly or use _cmd"
    )]
    Secret { option: String, origin: Source },
    /// An Airflow environment variable that locates the configuration is unusable.
    #[error("environment variable {var} {reason}")]
    Environment { var: String, reason: String },
    /// A `_cmd` option in a config file that another user could have written (see `trust`).
    #[error("{}", untrusted.refusal(option, location, *euid))]
    UntrustedCommand { option: String, location: Source, untrusted: Box<trust::Untrusted>, euid: u32 },
    /// A variable read is not UTF-8: refused rather than taken for unset.
    #[error("{}", crate::env::not_utf8(var))]
    NotUtf8 { var: String },
}

impl ConfigError {
    fn environment(var: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError::Environment { var: var.to_owned(), reason: reason.into() }
    }
}

/// A configuration that cannot be loaded is exit 3, its message the error's text.
impl From<ConfigError> for crate::error::Error {
    fn from(error: ConfigError) -> Self {
        crate::error::Error::Config(error.to_string())
    }
}

/// Finds, reads and checks the settings. `env` answers for environment variables (HOME
/// included), as bytes; production passes `crate::env::os`. A variable read as text whose
/// value is not UTF-8 is refused by name (`AIRFLOW__DATABASE__SQL_ALCHEMY_CONN` with a byte
/// `\xff` must not fall back to `~/airflow/airflow.db`); `AIRFLOW_HOME` and `AIRFLOW_CONFIG`
/// are paths, and find the file as bytes.
pub(crate) fn load(
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<Settings, ConfigError> {
    let vars = Vars::new(env);
    let trust = Trust::from_env(&vars)?;
    let (home_path, home) = airflow_home_path(&vars)?;
    vars.check()?;
    let found = find_config_file(overrides, &vars, &home_path)?;
    vars.check()?;
    let missing_config = found.as_ref().err().cloned();
    let config_file = found.ok();
    let read = config_file.as_deref().map(read_config_file).transpose()?;
    let (file, untrusted_config) =
        read.map_or((None, None), |(file, holders)| (Some(file), trust.judge(&holders)));
    let mut resolver = Resolver {
        vars: &vars,
        file: file.as_deref(),
        untrusted: untrusted_config.as_ref(),
        euid: trust.euid(),
        cmd_timeout: DEFAULT_CMD_TIMEOUT,
    };
    // Read before any option whose `_cmd` form runs a command: these two have none.
    let cmd_timeout = positive_seconds(&CMD_TIMEOUT, resolver.resolve(&CMD_TIMEOUT, None, "30")?)?;
    resolver.cmd_timeout = std::time::Duration::from_secs(cmd_timeout.value);
    let database_timeout =
        positive_seconds(&DATABASE_TIMEOUT, resolver.resolve(&DATABASE_TIMEOUT, None, "30")?)?;

    let backend = resolver.resolve(&BACKEND, None, METASTORE_BACKEND)?;
    let backend_problem = if backend.value.trim_matches(py_space).is_empty() {
        Some("empty; Airflow needs the dotted path of a state store backend class")
    } else if !backend.value.contains('.') {
        Some("not a dotted class path such as airflow.state.metastore.MetastoreBackend")
    } else {
        None
    };
    if let Some(problem) = backend_problem {
        return Err(invalid(&BACKEND, backend, problem));
    }

    let default_retention_days =
        non_negative(&DEFAULT_RETENTION_DAYS, resolver.resolve(&DEFAULT_RETENTION_DAYS, None, "30")?)?;
    let batch_flag = overrides.batch_size.as_deref().map(|v| ("--batch-size", v));
    let state_cleanup_batch_size = non_negative(
        &STATE_CLEANUP_BATCH_SIZE,
        resolver.resolve(&STATE_CLEANUP_BATCH_SIZE, batch_flag, "0")?,
    )?;

    let raw = resolver.resolve(&CLEAR_ON_SUCCESS, None, "False")?;
    let Some(value) = airflow_bool(&raw.value) else {
        return Err(invalid(&CLEAR_ON_SUCCESS, raw, "not a boolean (use true/false, t/f or 1/0)"));
    };
    let clear_on_success = Sourced { value, source: raw.source };

    let max_value_storage_bytes =
        non_negative(&MAX_VALUE_STORAGE_BYTES, resolver.resolve(&MAX_VALUE_STORAGE_BYTES, None, "65535")?)?;

    let conn_flag = overrides.conn.as_ref().map(|v| ("--conn", v.0.as_str()));
    let default_conn = home.as_ref().map(|home| format!("sqlite:///{home}/airflow.db")).unwrap_or_default();
    let sql_alchemy_conn = resolver.resolve(&SQL_ALCHEMY_CONN, conn_flag, &default_conn)?;
    if home.is_none() && sql_alchemy_conn.source == Source::Default {
        return Err(ConfigError::environment(
            "AIRFLOW_HOME",
            "is not valid UTF-8: its airflow.cfg is found by those bytes, but the default \
             [database] sql_alchemy_conn, sqlite:///$AIRFLOW_HOME/airflow.db, is a URL, which is \
             text; name the database in sql_alchemy_conn (the file, \
             AIRFLOW__DATABASE__SQL_ALCHEMY_CONN or --conn)",
        ));
    }

    let schema_flag = overrides.schema.as_deref().map(|v| ("--schema", v));
    let raw = resolver.resolve(&SQL_ALCHEMY_SCHEMA, schema_flag, "")?;
    // Airflow treats an empty or all-blank schema as no schema, and uses any other text as is.
    let sql_alchemy_schema = raw.map(|value| (!value.trim_matches(py_space).is_empty()).then_some(value));

    vars.check()?;
    Ok(Settings {
        config_file,
        missing_config,
        untrusted_config,
        backend,
        default_retention_days,
        state_cleanup_batch_size,
        clear_on_success,
        max_value_storage_bytes,
        sql_alchemy_conn: sql_alchemy_conn.map(Masked),
        sql_alchemy_schema,
        database_timeout,
        cmd_timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_cmd(command: &str) -> Result<String, String> {
        run_command(command, Duration::from_secs(30))
    }
    use std::collections::HashMap;

    /// A scratch directory removed again when the test ends.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            let path = std::env::temp_dir().join(format!("state-store-config-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).expect("create temp dir");
            TempDir(path)
        }

        fn path(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }

        fn write(&self, name: &str, content: impl AsRef<[u8]>) -> PathBuf {
            let path = self.path(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("create parent");
            }
            std::fs::write(&path, content).expect("write file");
            path
        }

        fn text(&self) -> String {
            self.0.display().to_string()
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<std::ffi::OsString> + use<> {
        let map: HashMap<String, String> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |key| map.get(key).map(Into::into)
    }

    fn load_with(overrides: &Overrides, pairs: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        load(overrides, &env_of(pairs))
    }

    fn ok(result: Result<Settings, ConfigError>) -> Settings {
        match result {
            Ok(settings) => settings,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    fn err(result: Result<Settings, ConfigError>) -> String {
        match result {
            Ok(settings) => panic!("expected an error, got {settings:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn file_source(path: &Path, line: usize) -> Source {
        Source::File { path: path.to_path_buf(), line: Some(line) }
    }

    #[test]
    fn defaults_without_any_file() {
        let dir = TempDir::new("defaults");
        let home = dir.text();
        let s = ok(load_with(&Overrides::default(), &[("HOME", &home)]));
        assert_eq!(s.config_file, None);
        assert_eq!(s.backend.value, METASTORE_BACKEND);
        assert!(s.is_builtin_backend());
        assert_eq!(s.default_retention_days.value, 30);
        assert_eq!(s.state_cleanup_batch_size.value, 0);
        assert!(!s.clear_on_success.value);
        assert_eq!(s.max_value_storage_bytes.value, 65535);
        assert_eq!(s.sql_alchemy_conn.value.0, format!("sqlite:///{home}/airflow/airflow.db"));
        assert_eq!(s.sql_alchemy_schema.value, None);
        for source in [
            &s.backend.source,
            &s.default_retention_days.source,
            &s.state_cleanup_batch_size.source,
            &s.clear_on_success.source,
            &s.max_value_storage_bytes.source,
            &s.sql_alchemy_conn.source,
            &s.sql_alchemy_schema.source,
        ] {
            assert_eq!(source, &Source::Default);
        }
        // the default URL is built from AIRFLOW_HOME as given, without normalising it
        let s = ok(load_with(&Overrides::default(), &[("HOME", &home), ("AIRFLOW_HOME", "rel/dir/")]));
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:///rel/dir//airflow.db");
    }

    #[test]
    fn file_lookup_order() {
        let dir = TempDir::new("lookup");
        let home = dir.text();
        let cfg = |n: u32| format!("[state_store]\ndefault_retention_days = {n}\n");
        let in_home = dir.write("home/airflow/airflow.cfg", cfg(1));
        let in_airflow_home = dir.write("ah/airflow.cfg", cfg(2));
        let in_airflow_config = dir.write("elsewhere/custom.cfg", cfg(3));
        let explicit = dir.write("explicit.cfg", cfg(4));
        let home_dir = dir.path("home").display().to_string();
        let ah = dir.path("ah").display().to_string();
        let ac = in_airflow_config.display().to_string();
        let none = Overrides::default();

        // ~/airflow/airflow.cfg when nothing else is set
        let s = ok(load_with(&none, &[("HOME", &home_dir)]));
        assert_eq!(s.config_file.as_deref(), Some(in_home.as_path()));
        assert_eq!(s.default_retention_days.value, 1);
        assert_eq!(s.default_retention_days.source, file_source(&in_home, 2));

        // $AIRFLOW_HOME/airflow.cfg
        let s = ok(load_with(&none, &[("HOME", &home_dir), ("AIRFLOW_HOME", &ah)]));
        assert_eq!(s.config_file.as_deref(), Some(in_airflow_home.as_path()));
        assert_eq!(s.default_retention_days.value, 2);
        assert_eq!(s.sql_alchemy_conn.value.0, format!("sqlite:///{ah}/airflow.db"));

        // $AIRFLOW_CONFIG beats $AIRFLOW_HOME, but the default URL still follows AIRFLOW_HOME
        let env = [("HOME", home_dir.as_str()), ("AIRFLOW_HOME", &ah), ("AIRFLOW_CONFIG", &ac)];
        let s = ok(load_with(&none, &env));
        assert_eq!(s.config_file.as_deref(), Some(in_airflow_config.as_path()));
        assert_eq!(s.default_retention_days.value, 3);
        assert_eq!(s.sql_alchemy_conn.value.0, format!("sqlite:///{ah}/airflow.db"));

        // the --config flag beats everything
        let flagged = Overrides { config_path: Some(explicit.clone()), ..Overrides::default() };
        let s = ok(load_with(&flagged, &env));
        assert_eq!(s.config_file.as_deref(), Some(explicit.as_path()));
        assert_eq!(s.default_retention_days.value, 4);

        // AIRFLOW_CONFIG is expanded like Airflow does ($VARS and ~)
        let s = ok(load_with(
            &none,
            &[("HOME", &home), ("SUB", "elsewhere"), ("AIRFLOW_CONFIG", "~/${SUB}/custom.cfg")],
        ));
        assert_eq!(s.default_retention_days.value, 3);

        // a missing $AIRFLOW_CONFIG means defaults, even if $AIRFLOW_HOME has a file
        let s = ok(load_with(
            &none,
            &[("HOME", &home), ("AIRFLOW_HOME", &ah), ("AIRFLOW_CONFIG", "/nonexistent/a.cfg")],
        ));
        assert_eq!(s.config_file, None);
        assert_eq!(
            s.missing_config,
            Some(MissingConfig { path: PathBuf::from("/nonexistent/a.cfg"), named_by: "$AIRFLOW_CONFIG" })
        );
        assert_eq!(s.default_retention_days.value, 30);
        assert_eq!(s.default_retention_days.source, Source::Default);
        assert!(!Path::new("/nonexistent/a.cfg").exists());

        // a missing --config file is an error
        let missing = Overrides { config_path: Some(dir.path("nope.cfg")), ..Overrides::default() };
        assert_eq!(
            err(load_with(&missing, &[("HOME", &home)])),
            format!("cannot read config file {home}/nope.cfg: no such file")
        );
        // AIRFLOW_CONFIG set but empty
        assert_eq!(
            err(load_with(&none, &[("HOME", &home), ("AIRFLOW_CONFIG", "")])),
            "environment variable AIRFLOW_CONFIG is set but empty"
        );
        // a directory where the file should be
        assert_eq!(
            err(load_with(&none, &[("HOME", &home), ("AIRFLOW_CONFIG", &ah)])),
            format!("cannot read config file {ah}: it is a directory")
        );
    }

    #[test]
    fn unreadable_files_name_the_path() {
        let dir = TempDir::new("unreadable");
        let home = dir.text();
        let bad = dir.write("bad.cfg", b"[state_store]\n# caf\xe9\n");
        let e =
            err(load_with(&Overrides { config_path: Some(bad), ..Overrides::default() }, &[("HOME", &home)]));
        assert_eq!(e, format!("{home}/bad.cfg line 2: the file is not valid UTF-8"));
        let broken = dir.write("broken.cfg", "sql_alchemy_conn = x\n");
        let e = err(load_with(
            &Overrides { config_path: Some(broken), ..Overrides::default() },
            &[("HOME", &home)],
        ));
        assert!(e.starts_with(&format!("{home}/broken.cfg line 1: File contains no section headers")));
    }

    /// A variable that is not UTF-8 is refused by name, never passed over for the next source:
    /// the file's `_cmd` does not run in place of an environment `_CMD` of such bytes.
    #[test]
    fn a_variable_that_is_not_utf8_is_refused_before_the_next_source_is_tried() {
        use std::os::unix::ffi::OsStringExt;
        let dir = TempDir::new("not-utf8");
        let home = dir.text();
        let ran = dir.path("ran");
        let cfg = dir.write(
            "airflow.cfg",
            format!("[database]\nsql_alchemy_conn_cmd = touch {}\n", ran.display()).as_bytes(),
        );
        let ac = cfg.display().to_string();
        for var in [
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD",
            "AIRFLOW__CORE__SQL_ALCHEMY_CONN_CMD",
            "HOME",
        ] {
            let env = |name: &str| match name {
                _ if name == var => Some(std::ffi::OsString::from_vec(b"printf x\xff".to_vec())),
                "HOME" => Some(home.clone().into()),
                "AIRFLOW_CONFIG" => Some(ac.clone().into()),
                _ => None,
            };
            let e = err(load(&Overrides::default(), &env));
            assert_eq!(e, crate::env::not_utf8(var));
            assert!(!ran.exists(), "{var}: the file's command ran");
        }
    }

    #[test]
    fn connection_precedence() {
        let dir = TempDir::new("conn-precedence");
        let home = dir.text();
        let cfg = dir.write(
            "airflow.cfg",
            "[database]\nsql_alchemy_conn = sqlite:////file.db\nsql_alchemy_conn_cmd = printf sqlite:////filecmd.db\n",
        );
        let cmd_only =
            dir.write("cmd-only.cfg", "[database]\n\nsql_alchemy_conn_cmd = printf sqlite:////filecmd.db\n");
        let ac = cfg.display().to_string();
        let flag = Overrides { conn: Some(Masked("sqlite:////flag.db".into())), ..Overrides::default() };
        let none = Overrides::default();
        let env_var = ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "sqlite:////env.db");
        let env_cmd = ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD", "printf sqlite:////envcmd.db");
        let base = [("HOME", home.as_str()), ("AIRFLOW_CONFIG", &ac)];

        let s = ok(load_with(&flag, &[base[0], base[1], env_var, env_cmd]));
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:////flag.db");
        assert_eq!(s.sql_alchemy_conn.source, Source::Flag("--conn"));

        let s = ok(load_with(&none, &[base[0], base[1], env_var, env_cmd]));
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:////env.db");
        assert_eq!(s.sql_alchemy_conn.source, Source::Env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN".into()));

        let s = ok(load_with(&none, &[base[0], base[1], env_cmd]));
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:////envcmd.db");
        assert_eq!(
            s.sql_alchemy_conn.source,
            Source::EnvCmd("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD".into())
        );

        let s = ok(load_with(&none, &base));
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:////file.db");
        assert_eq!(s.sql_alchemy_conn.source, file_source(&cfg, 2));

        let cc = cmd_only.display().to_string();
        let s = ok(load_with(&none, &[("HOME", &home), ("AIRFLOW_CONFIG", &cc)]));
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:////filecmd.db");
        assert_eq!(s.sql_alchemy_conn.source, Source::FileCmd { path: cmd_only.clone(), line: Some(3) });
        assert_eq!(s.sql_alchemy_conn.source.to_string(), format!("command in {cc} line 3"));
    }

    #[test]
    fn batch_size_and_retention_precedence() {
        let dir = TempDir::new("int-precedence");
        let home = dir.text();
        let cfg = dir.write(
            "airflow.cfg",
            "[state_store]\nstate_cleanup_batch_size = 200\ndefault_retention_days = 7\n",
        );
        let ac = cfg.display().to_string();
        let flag = Overrides { batch_size: Some(" 1_000 ".into()), ..Overrides::default() };
        let none = Overrides::default();
        let env = [
            ("HOME", home.as_str()),
            ("AIRFLOW_CONFIG", &ac),
            ("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE", "300"),
            ("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", "14"),
        ];
        let s = ok(load_with(&flag, &env));
        assert_eq!(s.state_cleanup_batch_size.value, 1000);
        assert_eq!(s.state_cleanup_batch_size.source, Source::Flag("--batch-size"));
        assert_eq!(s.default_retention_days.value, 14);

        let s = ok(load_with(&none, &env));
        assert_eq!(s.state_cleanup_batch_size.value, 300);
        assert_eq!(
            s.state_cleanup_batch_size.source.to_string(),
            "environment variable AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE"
        );

        let s = ok(load_with(&none, &env[..2]));
        assert_eq!(s.state_cleanup_batch_size.value, 200);
        assert_eq!(s.state_cleanup_batch_size.source, file_source(&cfg, 2));
        assert_eq!(s.default_retention_days.value, 7);
        assert_eq!(s.default_retention_days.source, file_source(&cfg, 3));
        assert_eq!(s.max_value_storage_bytes.source, Source::Default);
    }

    #[test]
    fn commands_only_for_sensitive_options() {
        let dir = TempDir::new("cmd-sensitive");
        let home = dir.text();
        let cfg = dir.write(
            "airflow.cfg",
            "[state_store]\ndefault_retention_days_cmd = printf 5\nbackend_secret = x\n",
        );
        let ac = cfg.display().to_string();
        let s = ok(load_with(
            &Overrides::default(),
            &[
                ("HOME", &home),
                ("AIRFLOW_CONFIG", &ac),
                ("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE_CMD", "printf 9"),
                ("AIRFLOW__STATE_STORE__BACKEND_SECRET", "x"),
            ],
        ));
        assert_eq!(s.default_retention_days.value, 30);
        assert_eq!(s.state_cleanup_batch_size.value, 0);
        assert_eq!(s.backend.value, METASTORE_BACKEND);
    }

    #[test]
    fn deprecated_core_location_of_the_connection() {
        let dir = TempDir::new("core-conn");
        let home = dir.text();
        let both = dir.write(
            "both.cfg",
            "[core]\nsql_alchemy_conn = sqlite:////core.db\n[database]\nsql_alchemy_conn = sqlite:////db.db\n",
        );
        let core_only = dir.write(
            "core.cfg",
            "[core]\nsql_alchemy_conn = sqlite:////core.db\n[database]\nsql_alchemy_conn_cmd = printf x\n",
        );
        let none = Overrides::default();
        let b = both.display().to_string();
        let c = core_only.display().to_string();
        let s = ok(load_with(&none, &[("HOME", &home), ("AIRFLOW_CONFIG", &b)]));
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:////db.db");
        // a plain value in [core] beats a command in [database], as in Airflow
        let s = ok(load_with(&none, &[("HOME", &home), ("AIRFLOW_CONFIG", &c)]));
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:////core.db");
        assert_eq!(s.sql_alchemy_conn.source, file_source(&core_only, 2));
        // any environment variable beats the file, the old name included
        let s = ok(load_with(
            &none,
            &[
                ("HOME", &home),
                ("AIRFLOW_CONFIG", &b),
                ("AIRFLOW__CORE__SQL_ALCHEMY_CONN_CMD", "printf sqlite:////corecmd.db"),
            ],
        ));
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:////corecmd.db");
        let s = ok(load_with(
            &none,
            &[
                ("HOME", &home),
                ("AIRFLOW__CORE__SQL_ALCHEMY_CONN", "sqlite:////coreenv.db"),
                ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD", "printf sqlite:////dbcmd.db"),
            ],
        ));
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:////dbcmd.db");
    }

    #[test]
    fn validation_errors() {
        let dir = TempDir::new("validation");
        let home = dir.text();
        let none = Overrides::default();
        let with_env = |pairs: &[(&str, &str)]| {
            let mut env = vec![("HOME", home.as_str())];
            env.extend_from_slice(pairs);
            load_with(&none, &env)
        };
        assert_eq!(
            err(with_env(&[("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE", "ten")])),
            "invalid [state_store] state_cleanup_batch_size \"ten\" (from environment variable \
             AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE): not an integer"
        );
        let cfg = dir.write("airflow.cfg", "[state_store]\n# retention\n\ndefault_retention_days = -1\n");
        assert_eq!(
            err(load_with(
                &Overrides { config_path: Some(cfg.clone()), ..Overrides::default() },
                &[("HOME", &home)]
            )),
            format!(
                "invalid [state_store] default_retention_days \"-1\" (from {} line 4): must be >= 0",
                cfg.display()
            )
        );
        assert_eq!(
            err(load_with(
                &Overrides { batch_size: Some("1.5".into()), ..Overrides::default() },
                &[("HOME", &home)]
            )),
            "invalid [state_store] state_cleanup_batch_size \"1.5\" (from --batch-size flag): \
             not an integer"
        );
        assert_eq!(
            err(with_env(&[("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE", "-5")])),
            "invalid [state_store] state_cleanup_batch_size \"-5\" (from environment variable \
             AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE): must be >= 0"
        );
        assert_eq!(
            err(with_env(&[("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "-1")])),
            "invalid [state_store] max_value_storage_bytes \"-1\" (from environment variable \
             AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES): must be >= 0"
        );
        assert_eq!(
            err(with_env(&[("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "18446744073709551616")])),
            "invalid [state_store] max_value_storage_bytes \"18446744073709551616\" (from \
             environment variable AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES): too large"
        );
        assert!(
            err(with_env(&[("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", "4294967296")]))
                .ends_with(": too large")
        );
        assert_eq!(
            err(with_env(&[("AIRFLOW__STATE_STORE__CLEAR_ON_SUCCESS", "yes")])),
            "invalid [state_store] clear_on_success \"yes\" (from environment variable \
             AIRFLOW__STATE_STORE__CLEAR_ON_SUCCESS): not a boolean (use true/false, t/f or 1/0)"
        );
        assert_eq!(
            err(with_env(&[("AIRFLOW__STATE_STORE__BACKEND", "")])),
            "invalid [state_store] backend \"\" (from environment variable \
             AIRFLOW__STATE_STORE__BACKEND): empty; Airflow needs the dotted path of a state \
             store backend class"
        );
        assert!(
            err(with_env(&[("AIRFLOW__STATE_STORE__BACKEND", "MetastoreBackend")]))
                .ends_with("not a dotted class path such as airflow.state.metastore.MetastoreBackend")
        );
        // an empty environment variable is a value, not an absence
        assert!(err(with_env(&[("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", "")])).ends_with(
            "(from environment variable AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS): not an integer"
        ));
    }

    #[test]
    fn sensitive_values_never_appear_in_errors() {
        let dir = TempDir::new("sensitive");
        let home = dir.text();
        let e = err(load_with(
            &Overrides::default(),
            &[
                ("HOME", &home),
                ("LOOP", "p4ssw0rd$LOOP"),
                ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://u:$LOOP@h/db"),
            ],
        ));
        assert_eq!(
            e,
            "invalid [database] sql_alchemy_conn (from environment variable \
             AIRFLOW__DATABASE__SQL_ALCHEMY_CONN): expanding its $VARIABLES never settles (a \
             variable that contains itself?)"
        );
        let cfg = dir.write("airflow.cfg", "[database]\nsql_alchemy_conn = postgresql://u:p4ss%word@h/db\n");
        let e = err(load_with(
            &Overrides { config_path: Some(cfg.clone()), ..Overrides::default() },
            &[("HOME", &home)],
        ));
        assert!(!e.contains("p4ss"), "{e}");
        assert!(e.starts_with(&format!(
            "{} line 2: cannot expand % in [database] sql_alchemy_conn",
            cfg.display()
        )));
    }

    #[test]
    fn integers_as_airflow_getint_reads_them() {
        // expectations printed by python3 running Airflow 3.3.2's getint steps on each text
        for (text, want) in [
            ("30", 30),
            (" 1_000 ", 1000),
            ("+5", 5),
            ("-0", 0),
            ("010", 10),
            ("\t7\n", 7),
            ("\u{a0}8\u{3000}", 8),
            // Airflow 3.3's getint falls back to float() for whole numbers
            ("3.0", 3),
            ("1e3", 1000),
            ("1_0.0_0", 10),
            (".5e1", 5),
            ("5.", 5),
            ("-2.0", -2),
            ("-1e2", -100),
            ("1E2", 100),
            ("1.e5", 100_000),
            ("1e1_0", 10_000_000_000),
            ("1e-400", 0),
            ("9007199254740993.0", 9_007_199_254_740_992),
        ] {
            assert_eq!(airflow_int(text), Some(want), "{text:?}");
        }
        for text in [
            "",
            " ",
            "ten",
            "1__0",
            "_1",
            "1_",
            "0x10",
            "1.5",
            "inf",
            "-infinity",
            "nan",
            "1e400",
            "1 0",
            "++1",
            "1e",
            "e3",
            ".",
            "30 # days",
            "1._5",
            "1_.5",
            "+.5e-0",
            "\u{1c}5\u{1c}",
        ] {
            assert_eq!(airflow_int(text), None, "{text:?}");
        }
        // Python's int() reads Arabic-Indic digits; this tool deliberately does not
        assert_eq!(airflow_int("\u{663}"), None);
    }

    #[test]
    fn booleans_as_airflow_getboolean_reads_them() {
        for (text, want) in [
            ("True", true),
            (" T ", true),
            ("1", true),
            ("TRUE # comment", true),
            ("false", false),
            ("F", false),
            ("0", false),
            ("False#x", false),
        ] {
            assert_eq!(airflow_bool(text), Some(want), "{text:?}");
        }
        for text in ["yes", "no", "", "# True", "on", "2", "tru"] {
            assert_eq!(airflow_bool(text), None, "{text:?}");
        }
    }

    #[test]
    fn commands_run_without_a_shell_and_are_trimmed() {
        // python3: shlex.split('echo "a  b"   $HOME | cat') == ['echo', 'a  b', '$HOME', '|', 'cat']
        assert_eq!(run_cmd("echo \"a  b\"   $HOME | cat").as_deref(), Ok("a  b $HOME | cat"));
        assert_eq!(run_cmd("printf 'x\\n\\r\\n\\n'").as_deref(), Ok("x"));
        assert_eq!(run_cmd("printf ' x \\n'").as_deref(), Ok(" x "));
        // undecodable bytes are dropped, like Airflow's decode(..., "ignore")
        assert_eq!(run_cmd("printf 'a\\377b'").as_deref(), Ok("ab"));
    }

    #[test]
    fn command_failures() {
        let e = run_cmd("sh -c 'echo s3cret; echo first >&2; echo second >&2; exit 3'").expect_err("fails");
        assert_eq!(e, "`sh` exited with status 3: first");
        assert_eq!(run_cmd("true"), Err("`true` printed nothing".to_owned()));
        assert_eq!(run_cmd("printf '\\n\\n'"), Err("`printf` printed nothing".to_owned()));
        assert_eq!(run_cmd("false"), Err("`false` exited with status 1".to_owned()));
        assert_eq!(run_cmd("   "), Err("the command is empty".to_owned()));
        assert_eq!(
            run_cmd("echo 'oops"),
            Err("cannot split the command: a quotation is not closed".to_owned())
        );
        let e = run_cmd("/nonexistent/state-store-test-program").expect_err("fails");
        assert!(e.starts_with("cannot run `/nonexistent/state-store-test-program`: "), "{e}");
        let e = run_cmd("sh -c 'kill -9 $$'").expect_err("fails");
        assert_eq!(e, "`sh` was killed by signal 9");
    }

    /// What a failing command printed on stdout is masked where its stderr echoes it, and only
    /// there: a URL (here with the one-letter password `e`) where its password stands, a bare
    /// password where it stands as a word. A URL cut at the excerpt's length is masked before
    /// it is cut.
    #[test]
    fn command_failures_mask_what_the_command_printed() {
        let e = run_cmd(
            "sh -c 'echo postgresql://u:e@h/db; echo \"error: e rejected for postgresql://u:e@h/db\" >&2; exit 1'",
        )
        .expect_err("fails");
        assert_eq!(e, "`sh` exited with status 1: error: e rejected for postgresql://u:***@h/db");
        let e =
            run_cmd("sh -c 'echo airflow; echo airflow_x: airflow expired >&2; exit 1'").expect_err("fails");
        assert_eq!(e, "`sh` exited with status 1: airflow_x: *** expired");
        let e = run_cmd(&format!(
            "sh -c 'echo {} postgresql://u:Zq7LongHiddenWord@h/db >&2; exit 1'",
            "x".repeat(MAX_STDERR_EXCERPT - 25)
        ))
        .expect_err("fails");
        assert!(!e.contains("Zq7"), "{e}");
        assert!(e.ends_with("postgresql://u:***@h/db"), "{e}");
    }

    #[test]
    fn commands_are_bounded_in_time_and_output() {
        let started = Instant::now();
        let e = run_command("sh -c 'sleep 100 & sleep 100'", Duration::from_secs(1)).expect_err("slow");
        assert!(e.contains("within 1 s ([state_store] cmd_timeout)"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        let e = run_command("head -c 10000000 /dev/zero", Duration::from_secs(30)).expect_err("long");
        assert!(e.contains("more than 64 KiB"), "{e}");
        // What a command leaves running in its group is killed, so the pipe closes at once.
        let started = Instant::now();
        assert_eq!(run_command("sh -c 'sleep 100 & echo ok'", Duration::from_secs(30)).as_deref(), Ok("ok"));
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        // A daemon in a session of its own outlives the group and holds the pipe open: what
        // was printed before the command exited is used, or the message says why nothing came.
        let started = Instant::now();
        // (The pause lets the daemon leave the command's group before the command ends.)
        assert_eq!(
            run_command("sh -c 'setsid sleep 3 & sleep 0.3; echo tok'", Duration::from_secs(30)).as_deref(),
            Ok("tok")
        );
        let e = run_command("sh -c 'setsid sleep 3 & sleep 0.3'", Duration::from_secs(30)).expect_err("held");
        assert!(e.contains("holds its stdout open"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }

    #[test]
    fn command_errors_name_the_source_not_the_output() {
        let dir = TempDir::new("cmd-errors");
        let home = dir.text();
        let e = err(load_with(
            &Overrides::default(),
            &[
                ("HOME", &home),
                (
                    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD",
                    "sh -c 'echo postgresql://u:s3cret@h/db; exit 2'",
                ),
            ],
        ));
        assert_eq!(
            e,
            "cannot get [database] sql_alchemy_conn from command in environment variable \
             AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD: `sh` exited with status 2"
        );
        let cfg = dir.write("airflow.cfg", "[database]\nsql_alchemy_conn_cmd = true\n");
        let e = err(load_with(
            &Overrides { config_path: Some(cfg.clone()), ..Overrides::default() },
            &[("HOME", &home)],
        ));
        assert_eq!(
            e,
            format!(
                "cannot get [database] sql_alchemy_conn from command in {} line 2: `true` printed nothing",
                cfg.display()
            )
        );
        // the command text gets % interpolation (it is read with configparser's get) but not
        // $VAR expansion, and its output is used as is
        let cfg =
            dir.write("pct.cfg", "[database]\nsql_alchemy_conn_cmd = echo 'sqlite:////$HOME/100%%.db'\n");
        let s =
            ok(load_with(&Overrides { config_path: Some(cfg), ..Overrides::default() }, &[("HOME", &home)]));
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:////$HOME/100%.db");
    }

    /// A config file that another user could have written: its `_cmd` never runs (exit 3,
    /// naming the option, the file and its owner), while its plain values, a `_CMD` variable
    /// of the caller's environment and anything that comes before the file still work.
    #[test]
    fn an_untrusted_file_runs_no_command() {
        let dir = TempDir::new("untrusted");
        let marker = dir.path("ran");
        let path = dir.path("airflow.cfg");
        let text = format!(
            "[database]\nsql_alchemy_conn_cmd = sh -c 'touch {}; echo sqlite:////cmd.db'\n\
             [state_store]\ndefault_retention_days = 4\n",
            marker.display()
        );
        let file = parse_ini(&text, &path).expect("parses");
        let holders = crate::fs::ReadFile {
            bytes: Vec::new(),
            file: crate::fs::Holder { path: path.clone(), uid: 65534, mode: 0o644 },
            dirs: vec![crate::fs::Holder { path: dir.0.clone(), uid: 0, mode: 0o755 }],
        };
        let untrusted = Trust::new(0, Vec::new()).judge(&holders);
        assert!(untrusted.is_some());
        let resolve = |pairs: &[(&str, &str)], untrusted: Option<&Untrusted>, spec: &Spec, flag| {
            let env = env_of(pairs);
            let vars = Vars::new(&env);
            let resolver = Resolver {
                vars: &vars,
                file: Some(&file),
                untrusted,
                euid: 0,
                cmd_timeout: DEFAULT_CMD_TIMEOUT,
            };
            resolver.resolve(spec, flag, "sqlite:////default.db")
        };
        let e = resolve(&[], untrusted.as_ref(), &SQL_ALCHEMY_CONN, None).expect_err("refused");
        assert!(matches!(e, ConfigError::UntrustedCommand { .. }), "{e:?}");
        let line = e.to_string();
        assert!(
            line.starts_with(&format!(
                "[database] sql_alchemy_conn_cmd in {} line 2 would run a command from a file that uid 65534",
                path.display()
            )),
            "{line}"
        );
        assert!(!marker.exists(), "the command ran");
        // Plain values of the file are read.
        let days = resolve(&[], untrusted.as_ref(), &DEFAULT_RETENTION_DAYS, None).expect("read");
        assert_eq!(days, Sourced { value: "4".to_owned(), source: file_source(&path, 4) });
        // What comes before the file: a flag, a variable, a _CMD variable (the caller's own).
        let flag = resolve(&[], untrusted.as_ref(), &SQL_ALCHEMY_CONN, Some(("--conn", "sqlite:////f.db")));
        assert_eq!(flag.expect("flag").value, "sqlite:////f.db");
        let env = resolve(
            &[("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "sqlite:////e.db")],
            untrusted.as_ref(),
            &SQL_ALCHEMY_CONN,
            None,
        );
        assert_eq!(env.expect("env").value, "sqlite:////e.db");
        let env_cmd = resolve(
            &[("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD", "echo sqlite:////c.db")],
            untrusted.as_ref(),
            &SQL_ALCHEMY_CONN,
            None,
        );
        assert_eq!(env_cmd.expect("env cmd").value, "sqlite:////c.db");
        assert!(!marker.exists(), "the file's command ran");
        // Trusted, the file's command runs.
        let ran = resolve(&[], None, &SQL_ALCHEMY_CONN, None).expect("runs");
        assert_eq!(ran.value, "sqlite:////cmd.db");
        assert!(marker.exists(), "the command did not run");
    }

    /// `load` judges the file it reads: one the run's user owns and only it can write is
    /// trusted and not warned of; a name in STATE_STORE_TRUSTED_CONFIG_OWNERS that is no
    /// account is refused by name.
    #[test]
    fn load_judges_the_file_it_read() {
        let dir = TempDir::new("judged");
        let home = dir.text();
        let cfg = dir.write("airflow.cfg", "[database]\nsql_alchemy_conn_cmd = echo sqlite:////t.db\n");
        let overrides = Overrides { config_path: Some(cfg.clone()), ..Overrides::default() };
        let s = ok(load_with(&overrides, &[("HOME", &home)]));
        assert_eq!(s.untrusted_config, None);
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:////t.db");
        let e = err(load_with(
            &overrides,
            &[("HOME", &home), ("STATE_STORE_TRUSTED_CONFIG_OWNERS", "no-such-user-here")],
        ));
        assert!(e.contains("\"no-such-user-here\", which is neither a uid nor a user"), "{e}");
        // Group-writable: untrusted whoever owns it.
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o664)).expect("chmod");
        let e = err(load_with(&overrides, &[("HOME", &home)]));
        assert!(e.contains("and group or others can write (mode 0664)"), "{e}");
        std::fs::write(&cfg, "[state_store]\ndefault_retention_days = 2\n").expect("write");
        let s = ok(load_with(&overrides, &[("HOME", &home)]));
        assert_eq!(s.default_retention_days.value, 2);
        let warning = s.untrusted_config.expect("untrusted").warning();
        assert!(warning.starts_with(&format!("{} is a file that uid ", cfg.display())), "{warning}");
    }

    #[test]
    fn secrets_are_refused_with_their_origin() {
        let dir = TempDir::new("secrets");
        let home = dir.text();
        let e = err(load_with(
            &Overrides::default(),
            &[("HOME", &home), ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_SECRET", "airflow/conn")],
        ));
        assert_eq!(
            e,
            "[database] sql_alchemy_conn_secret (from environment variable \
             AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_SECRET) needs Airflow's secrets backend, which \
             state-store cannot reach; set the value directly or use _cmd"
        );
        let cfg = dir.write("airflow.cfg", "[core]\nsql_alchemy_conn_secret = airflow/conn\n[database]\n");
        let e = err(load_with(
            &Overrides { config_path: Some(cfg.clone()), ..Overrides::default() },
            &[("HOME", &home)],
        ));
        assert_eq!(
            e,
            format!(
                "[core] sql_alchemy_conn_secret (from {} line 2) needs Airflow's secrets backend, \
                 which state-store cannot reach; set the value directly or use _cmd",
                cfg.display()
            )
        );
        // a direct value wins before the secret is ever consulted
        let s = ok(load_with(
            &Overrides { config_path: Some(cfg), ..Overrides::default() },
            &[("HOME", &home), ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "sqlite:///x")],
        ));
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:///x");
    }

    #[test]
    fn values_are_expanded_like_airflow() {
        let dir = TempDir::new("expand");
        let home = dir.text();
        let cfg = dir.write(
            "airflow.cfg",
            "[database]\nsql_alchemy_conn = sqlite:///$HOME/x.db\nsql_alchemy_schema = ~/s\n\
             [state_store]\ndefault_retention_days = ${DAYS}\n",
        );
        let s = ok(load_with(
            &Overrides { config_path: Some(cfg), ..Overrides::default() },
            &[("HOME", &home), ("DAYS", "9")],
        ));
        assert_eq!(s.sql_alchemy_conn.value.0, format!("sqlite:///{home}/x.db"));
        assert_eq!(s.sql_alchemy_schema.value, Some(format!("{home}/s")));
        assert_eq!(s.default_retention_days.value, 9);
        // flags are taken literally
        let s = ok(load_with(
            &Overrides { conn: Some(Masked("sqlite:///$HOME/y.db".into())), ..Overrides::default() },
            &[("HOME", &home)],
        ));
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:///$HOME/y.db");
    }

    #[test]
    fn expand_env_var_matches_python() {
        // each expectation printed by python3 with os.path.expandvars/expanduser in a loop
        let env = env_of(&[("HOME", "/home/t"), ("A", "1"), ("B", "${A}x"), ("E", "")]);
        let vars = Vars::new(&env);
        for (input, want) in [
            ("$A", "1"),
            ("${A}", "1"),
            ("$B", "1x"),
            ("$UNKNOWN/x", "$UNKNOWN/x"),
            ("${UNKNOWN}", "${UNKNOWN}"),
            ("$$A", "$1"),
            ("$", "$"),
            ("${}", "${}"),
            ("${A", "${A"),
            ("a$A-b", "a1-b"),
            ("$A_", "$A_"),
            ("$E.", "."),
            ("~", "/home/t"),
            ("~/x", "/home/t/x"),
            ("~root/x", "/root/x"),
            ("~nosuchuser-state-store/x", "~nosuchuser-state-store/x"),
            ("x~/y", "x~/y"),
            ("$HOME/y", "/home/t/y"),
            ("p@ss$word", "p@ss$word"),
            ("%(x)s", "%(x)s"),
        ] {
            assert_eq!(expand_env_var(input, &vars).as_deref(), Some(want), "{input:?}");
        }
        let root = env_of(&[("HOME", "/")]);
        let vars = Vars::new(&root);
        assert_eq!(expand_env_var("~", &vars).as_deref(), Some("/"));
        assert_eq!(expand_env_var("~/x", &vars).as_deref(), Some("/x"));
        let grow = env_of(&[("G", "$G$G")]);
        let vars = Vars::new(&grow);
        assert_eq!(expand_env_var("$G", &vars), None);
    }

    #[test]
    fn home_falls_back_to_the_account_database() {
        let output = Command::new("python3")
            .args(["-c", "import os, pwd; print(pwd.getpwuid(os.getuid()).pw_dir)"])
            .output()
            .expect("python3 is needed for this test and could not be run");
        let python_home = String::from_utf8(output.stdout).expect("UTF-8");
        let python_home = python_home.trim_end();
        let env = env_of(&[]);
        let vars = Vars::new(&env);
        assert_eq!(
            airflow_home(&vars).as_deref(),
            Ok(format!("{}/airflow", python_home.trim_end_matches('/')).as_str())
        );
    }

    #[test]
    fn shlex_split_matches_python() {
        // each expectation printed by python3's shlex.split
        let cases: &[(&str, &[&str])] = &[
            ("echo \"a  b\"   $HOME | cat", &["echo", "a  b", "$HOME", "|", "cat"]),
            ("a\\ b c", &["a b", "c"]),
            ("\"x\\y\" \"q\\\"\" \"\\\\\"", &["x\\y", "q\"", "\\"]),
            ("'' x", &["", "x"]),
            ("a'b c'd", &["ab cd"]),
            ("  ", &[]),
            ("# not comment", &["#", "not", "comment"]),
            ("a\tb\nc\rd", &["a", "b", "c", "d"]),
        ];
        for (line, want) in cases {
            let want: Vec<String> = want.iter().map(|s| (*s).to_owned()).collect();
            assert_eq!(shlex_split(line), Ok(want), "{line:?}");
        }
        assert!(shlex_split("x\\").is_err());
        assert!(shlex_split("\"unclosed").is_err());
        assert!(shlex_split("'unclosed").is_err());
    }

    #[test]
    fn schema_blank_means_none() {
        let dir = TempDir::new("schema");
        let home = dir.text();
        let none = Overrides::default();
        let s = ok(load_with(&none, &[("HOME", &home), ("AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA", "  ")]));
        assert_eq!(s.sql_alchemy_schema.value, None);
        assert_eq!(s.sql_alchemy_schema.source, Source::Env("AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA".into()));
        let s = ok(load_with(&none, &[("HOME", &home), ("AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA", " s ")]));
        assert_eq!(s.sql_alchemy_schema.value.as_deref(), Some(" s "));
        let s = ok(load_with(
            &Overrides { schema: Some("airflow".into()), ..Overrides::default() },
            &[("HOME", &home)],
        ));
        assert_eq!(s.sql_alchemy_schema.value.as_deref(), Some("airflow"));
        assert_eq!(s.sql_alchemy_schema.source, Source::Flag("--schema"));
    }

    #[test]
    fn builtin_backend_names() {
        let dir = TempDir::new("backend");
        let home = dir.text();
        for (name, builtin) in [
            ("airflow.state.metastore.MetastoreBackend", true),
            ("airflow.cli.commands.state_store_command.MetastoreBackend", true),
            ("airflow.api_fastapi.execution_api.routes.asset_state_store.MetastoreBackend", true),
            // the secrets backend of the same name is another class
            ("airflow.secrets.metastore.MetastoreBackend", false),
            ("mypackage.state.CustomStoreBackend", false),
            (" airflow.state.metastore.MetastoreBackend", false),
        ] {
            let s = ok(load_with(
                &Overrides::default(),
                &[("HOME", &home), ("AIRFLOW__STATE_STORE__BACKEND", name)],
            ));
            assert_eq!(s.is_builtin_backend(), builtin, "{name:?}");
        }
    }

    #[test]
    fn toml_file_gives_the_same_settings() {
        let dir = TempDir::new("toml");
        let home = dir.text();
        let path = dir.write(
            "settings.toml",
            "[state_store]\nbackend = \"mypackage.Backend\"\ndefault_retention_days = 7\n\
             state_cleanup_batch_size = 10_000\nclear_on_success = true\n\
             max_value_storage_bytes = 0\n[database]\nsql_alchemy_conn_cmd = \"printf sqlite:////t.db\"\n\
             sql_alchemy_schema = \"$SCHEMA\"\n",
        );
        let s = ok(load_with(
            &Overrides { config_path: Some(path.clone()), ..Overrides::default() },
            &[("HOME", &home), ("SCHEMA", "airflow")],
        ));
        assert_eq!(s.config_file.as_deref(), Some(path.as_path()));
        assert_eq!(s.backend.value, "mypackage.Backend");
        assert!(!s.is_builtin_backend());
        assert_eq!(s.default_retention_days.value, 7);
        assert_eq!(s.default_retention_days.source, file_source(&path, 3));
        assert_eq!(s.state_cleanup_batch_size.value, 10_000);
        assert!(s.clear_on_success.value);
        assert_eq!(s.clear_on_success.source, file_source(&path, 5));
        assert_eq!(s.max_value_storage_bytes.value, 0);
        assert_eq!(s.sql_alchemy_conn.value.0, "sqlite:////t.db");
        assert_eq!(s.sql_alchemy_conn.source, Source::FileCmd { path: path.clone(), line: Some(8) });
        assert_eq!(s.sql_alchemy_schema.value.as_deref(), Some("airflow"));

        let bad = dir.write("bad.toml", "[state_store]\ndefault_retention_days = 7.5\n");
        assert_eq!(
            err(load_with(
                &Overrides { config_path: Some(bad.clone()), ..Overrides::default() },
                &[("HOME", &home)]
            )),
            format!(
                "{} line 2: [state_store] default_retention_days is a TOML float; only strings, \
                 integers and booleans can stand for an airflow.cfg value",
                bad.display()
            )
        );
        let negative = dir.write("neg.TOML", "[state_store]\nstate_cleanup_batch_size = -1\n");
        assert_eq!(
            err(load_with(
                &Overrides { config_path: Some(negative.clone()), ..Overrides::default() },
                &[("HOME", &home)]
            )),
            format!(
                "invalid [state_store] state_cleanup_batch_size \"-1\" (from {} line 2): must be >= 0",
                negative.display()
            )
        );
        // AIRFLOW_CONFIG may name a TOML file too
        let ac = path.display().to_string();
        let s = ok(load_with(
            &Overrides::default(),
            &[("HOME", &home), ("AIRFLOW_CONFIG", &ac), ("SCHEMA", "x")],
        ));
        assert_eq!(s.default_retention_days.value, 7);
    }

    #[test]
    fn source_display() {
        let path = PathBuf::from("/etc/airflow/airflow.cfg");
        assert_eq!(Source::Flag("--conn").to_string(), "--conn flag");
        assert_eq!(Source::Env("X".into()).to_string(), "environment variable X");
        assert_eq!(Source::EnvCmd("X_CMD".into()).to_string(), "command in environment variable X_CMD");
        assert_eq!(
            Source::File { path: path.clone(), line: Some(12) }.to_string(),
            "/etc/airflow/airflow.cfg line 12"
        );
        assert_eq!(Source::File { path: path.clone(), line: None }.to_string(), "/etc/airflow/airflow.cfg");
        assert_eq!(
            Source::FileCmd { path, line: Some(3) }.to_string(),
            "command in /etc/airflow/airflow.cfg line 3"
        );
        assert_eq!(Source::Default.to_string(), "default");
    }

    #[test]
    fn debug_output_hides_the_connection() {
        let dir = TempDir::new("debug");
        let home = dir.text();
        let overrides =
            Overrides { conn: Some(Masked("postgresql://u:s3cret@h/db".into())), ..Overrides::default() };
        let s = ok(load_with(&overrides, &[("HOME", &home)]));
        assert!(!format!("{s:?}").contains("s3cret"));
        assert!(!format!("{overrides:?}").contains("s3cret"));
    }
}
