//! Where values come from and which wins: Airflow's config file lookup, the file's values, and
//! the precedence of flag, environment, file, command, secret and default.

use super::*;

/// A parsed config file of either format: `ini::IniFile` or `toml_file::TomlFile`.
pub(super) trait ConfigFile {
    fn path(&self) -> &Path;

    /// The value of `key` in `section` and its line, `None` when the file does not set it.
    fn get(&self, section: &str, key: &str) -> Result<Option<ini::IniValue>, ConfigError>;
}

/// Reads and parses a config file, and says who could have chosen what it holds (see
/// `trust`), judged on the descriptors it was read through.
pub(super) fn read_config_file(
    path: &Path,
) -> Result<(Box<dyn ConfigFile>, crate::fs::ReadFile), ConfigError> {
    let mut read = crate::fs::read_with_holders(path)
        .map_err(|e| ConfigError::Io { path: path.to_path_buf(), reason: e.to_string() })?;
    let bytes = std::mem::take(&mut read.bytes);
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..valid].split(|b| *b == b'\n').count();
        ini::parse_error(path, line, "the file is not valid UTF-8")
    })?;
    let is_toml = path.extension().is_some_and(|ext| ext.eq_ignore_ascii_case("toml"));
    let file: Box<dyn ConfigFile> =
        if is_toml { Box::new(parse_toml(&text, path)?) } else { Box::new(parse_ini(&text, path)?) };
    Ok((file, read))
}

/// Whether a config file is there to read: `Ok(false)` when nothing exists at `path`.
pub(super) fn config_file_exists(path: &Path) -> Result<bool, ConfigError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            Err(ConfigError::Io { path: path.to_path_buf(), reason: "it is a directory".to_owned() })
        }
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(ConfigError::Io { path: path.to_path_buf(), reason: e.to_string() }),
    }
}

/// The file to read: the `--config` path (which must exist), else `$AIRFLOW_CONFIG`, else
/// `$AIRFLOW_HOME/airflow.cfg`, as Airflow's `get_airflow_config` picks it.
///
/// When the chosen file does not exist, Airflow reads nothing, goes on with its defaults and
/// the environment, and afterwards (in its CLI) writes a file holding just those defaults. So
/// "no file, defaults" gives exactly the values Airflow uses, without creating anything.
pub(super) fn find_config_file(
    overrides: &Overrides,
    vars: &Vars<'_>,
    airflow_home: &Path,
) -> Result<Result<PathBuf, MissingConfig>, ConfigError> {
    if let Some(path) = &overrides.config_path {
        return if config_file_exists(path)? {
            Ok(Ok(path.clone()))
        } else {
            Err(ConfigError::Io { path: path.clone(), reason: "no such file".to_owned() })
        };
    }
    let named_by = if vars.raw("AIRFLOW_CONFIG").is_some() {
        "$AIRFLOW_CONFIG"
    } else if vars.raw("AIRFLOW_HOME").is_some() {
        "$AIRFLOW_HOME/airflow.cfg"
    } else {
        "$AIRFLOW_HOME/airflow.cfg, AIRFLOW_HOME unset"
    };
    let candidate = match vars.raw("AIRFLOW_CONFIG").map(|value| path_or_text("AIRFLOW_CONFIG", value)) {
        Some(Err(e)) => return Err(e),
        // Bytes that are not UTF-8: a path, as Python's surrogateescape keeps it.
        Some(Ok(Err(path))) => path,
        // Airflow takes "" as the current directory and fails on it.
        Some(Ok(Ok(value))) if value.is_empty() => {
            return Err(ConfigError::environment("AIRFLOW_CONFIG", "is set but empty"));
        }
        Some(Ok(Ok(value))) => {
            PathBuf::from(expand_env_var(&value, vars).ok_or_else(|| never_settles("AIRFLOW_CONFIG"))?)
        }
        None => airflow_home.join("airflow.cfg"),
    };
    Ok(if config_file_exists(&candidate)? {
        Ok(candidate)
    } else {
        Err(MissingConfig { path: candidate, named_by })
    })
}

/// Looks options up in Airflow's order.
pub(super) struct Resolver<'a> {
    pub(super) vars: &'a Vars<'a>,
    pub(super) file: Option<&'a dyn ConfigFile>,
    /// Why the file may not run commands, when another user could have written it.
    pub(super) untrusted: Option<&'a trust::Untrusted>,
    /// The run's effective user, for the message that refuses a command.
    pub(super) euid: u32,
    /// How long a `_cmd` command may run.
    pub(super) cmd_timeout: std::time::Duration,
}

impl Resolver<'_> {
    pub(super) fn expanded(
        &self,
        spec: &Spec,
        value: &str,
        source: Source,
    ) -> Result<Sourced<String>, ConfigError> {
        let expanded = expand_env_var(value, self.vars);
        // A `$VARIABLE` that is not UTF-8 is refused, not left unexpanded.
        self.vars.check()?;
        match expanded {
            Some(value) => Ok(Sourced { value, source }),
            None => Err(ConfigError::Invalid {
                option: spec.name(),
                value: None,
                origin: source,
                reason: "expanding its $VARIABLES never settles (a variable that contains \
                         itself?)"
                    .to_owned(),
            }),
        }
    }

    pub(super) fn command(
        &self,
        spec: &Spec,
        command: &str,
        source: Source,
    ) -> Result<Sourced<String>, ConfigError> {
        match run_command(command, self.cmd_timeout) {
            Ok(value) => Ok(Sourced { value, source }),
            Err(reason) => Err(ConfigError::Command { option: spec.name(), origin: source, reason }),
        }
    }

    pub(super) fn file_source(file: &dyn ConfigFile, line: usize) -> Source {
        Source::File { path: file.path().to_path_buf(), line: Some(line) }
    }

    /// The raw text of an option, and where it came from.
    pub(super) fn resolve(
        &self,
        spec: &Spec,
        flag: Option<(&'static str, &str)>,
        default: &str,
    ) -> Result<Sourced<String>, ConfigError> {
        if let Some((flag, value)) = flag {
            return Ok(Sourced { value: value.to_owned(), source: Source::Flag(flag) });
        }
        for (section, key) in spec.locations() {
            let var = env_var_name(section, key);
            if let Some(value) = self.vars.get(&var) {
                return self.expanded(spec, &value, Source::Env(var));
            }
            // An override that is not UTF-8 is refused, never passed over for the next source.
            self.vars.check()?;
            if !spec.sensitive {
                continue;
            }
            let cmd_var = format!("{var}_CMD");
            if let Some(command) = self.vars.get(&cmd_var) {
                return self.command(spec, &command, Source::EnvCmd(cmd_var));
            }
            let secret_var = format!("{var}_SECRET");
            if self.vars.get(&secret_var).is_some() {
                return Err(ConfigError::Secret {
                    option: format!("[{section}] {key}_secret"),
                    origin: Source::Env(secret_var),
                });
            }
        }
        // A `_CMD` or `_SECRET` variable that is not UTF-8 is refused before the file's
        // `_cmd` could run in its place.
        self.vars.check()?;
        if let Some(file) = self.file {
            for (section, key) in spec.locations() {
                if let Some(found) = file.get(section, key)? {
                    return self.expanded(spec, &found.value, Self::file_source(file, found.line));
                }
            }
            if spec.sensitive {
                for (section, key) in spec.locations() {
                    if let Some(found) = file.get(section, &format!("{key}_cmd"))? {
                        if let Some(untrusted) = self.untrusted {
                            return Err(ConfigError::UntrustedCommand {
                                option: format!("[{section}] {key}_cmd"),
                                location: Self::file_source(file, found.line),
                                untrusted: Box::new(untrusted.clone()),
                                euid: self.euid,
                            });
                        }
                        let source =
                            Source::FileCmd { path: file.path().to_path_buf(), line: Some(found.line) };
                        return self.command(spec, &found.value, source);
                    }
                }
                for (section, key) in spec.locations() {
                    if let Some(found) = file.get(section, &format!("{key}_secret"))? {
                        return Err(ConfigError::Secret {
                            option: format!("[{section}] {key}_secret"),
                            origin: Self::file_source(file, found.line),
                        });
                    }
                }
            }
        }
        self.expanded(spec, default, Source::Default)
    }
}

/// A path variable's value: its text when it is UTF-8, else its bytes as a path. Bytes are
/// not expanded, so a `$` or a leading `~` among them is refused.
fn path_or_text(var: &str, value: std::ffi::OsString) -> Result<Result<String, PathBuf>, ConfigError> {
    match value.into_string() {
        Ok(text) => Ok(Ok(text)),
        Err(bytes) => {
            let raw = bytes.as_encoded_bytes();
            if raw.contains(&b'$') || raw.starts_with(b"~") {
                return Err(ConfigError::environment(
                    var,
                    "is not valid UTF-8 and holds a $ or a leading ~, which state-store expands only in text",
                ));
            }
            Ok(Err(PathBuf::from(bytes)))
        }
    }
}

/// Airflow's `AIRFLOW_HOME` as a path, and as text when it is UTF-8 (the default
/// `sql_alchemy_conn` is built from the text).
pub(super) fn airflow_home_path(vars: &Vars<'_>) -> Result<(PathBuf, Option<String>), ConfigError> {
    if let Some(raw) = vars.raw("AIRFLOW_HOME")
        && let Err(path) = path_or_text("AIRFLOW_HOME", raw)?
    {
        return Ok((path, None));
    }
    let home = airflow_home(vars)?;
    Ok((PathBuf::from(&home), Some(home)))
}

/// Airflow's `AIRFLOW_HOME`: the variable, else `~/airflow`, expanded.
pub(super) fn airflow_home(vars: &Vars<'_>) -> Result<String, ConfigError> {
    let raw = vars.get("AIRFLOW_HOME");
    expand_env_var(raw.as_deref().unwrap_or("~/airflow"), vars).ok_or_else(|| never_settles("AIRFLOW_HOME"))
}

fn never_settles(var: &str) -> ConfigError {
    ConfigError::environment(var, "cannot be expanded: its $VARIABLES never settle")
}
