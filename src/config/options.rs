//! The options this tool reads, as Airflow defines them (section, key, older locations,
//! sensitivity), and Airflow's rules for reading their values as integers and booleans.

use super::*;

/// One option as Airflow defines it.
pub(super) struct Spec {
    pub(super) section: &'static str,
    pub(super) key: &'static str,
    /// Airflow's `deprecated_options`: an older location still read when the current one is
    /// unset, after it at each level (environment, file, command, secret).
    pub(super) deprecated: Option<(&'static str, &'static str)>,
    /// Airflow's `sensitive` flag: only such options have `_cmd`/`_secret` forms, and their
    /// values never appear in messages.
    pub(super) sensitive: bool,
}

impl Spec {
    /// An option with no deprecated name and nothing to hide.
    const fn plain(section: &'static str, key: &'static str) -> Spec {
        Spec { section, key, deprecated: None, sensitive: false }
    }

    pub(super) fn name(&self) -> String {
        format!("[{}] {}", self.section, self.key)
    }

    pub(super) fn locations(&self) -> impl Iterator<Item = (&'static str, &'static str)> {
        std::iter::once((self.section, self.key)).chain(self.deprecated)
    }
}

pub(super) const BACKEND: Spec = Spec::plain("state_store", "backend");

pub(super) const DEFAULT_RETENTION_DAYS: Spec = Spec::plain("state_store", "default_retention_days");

pub(super) const STATE_CLEANUP_BATCH_SIZE: Spec = Spec::plain("state_store", "state_cleanup_batch_size");

pub(super) const CLEAR_ON_SUCCESS: Spec = Spec::plain("state_store", "clear_on_success");

pub(super) const MAX_VALUE_STORAGE_BYTES: Spec = Spec::plain("state_store", "max_value_storage_bytes");

pub(super) const DATABASE_TIMEOUT: Spec = Spec::plain("state_store", "database_timeout");

pub(super) const CMD_TIMEOUT: Spec = Spec::plain("state_store", "cmd_timeout");

pub(super) const SQL_ALCHEMY_CONN: Spec = Spec {
    section: "database",
    key: "sql_alchemy_conn",
    deprecated: Some(("core", "sql_alchemy_conn")),
    sensitive: true,
};

pub(super) const SQL_ALCHEMY_SCHEMA: Spec = Spec::plain("database", "sql_alchemy_schema");

/// Airflow's environment variable for an option.
pub(super) fn env_var_name(section: &str, key: &str) -> String {
    format!("AIRFLOW__{}__{}", section.replace('.', "_").to_uppercase(), key.to_uppercase())
}

pub(super) fn invalid(spec: &Spec, raw: Sourced<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        option: spec.name(),
        value: (!spec.sensitive).then_some(raw.value),
        origin: raw.source,
        reason: reason.into(),
    }
}

/// Airflow 3.3's `getint`: `int(value)`, else `float(value)` when that is a whole number
/// (so `"3.0"` and `"1e3"` are accepted, `"3.5"` is not).
pub(super) fn airflow_int(text: &str) -> Option<i128> {
    python_int(text).or_else(|| {
        let f = python_float(text)?;
        // `as` saturates beyond i128, which the range checks then reject.
        #[allow(clippy::cast_possible_truncation)]
        let whole = f as i128;
        (f.fract() == 0.0).then_some(whole)
    })
}

pub(super) fn non_negative<T: TryFrom<i128>>(
    spec: &Spec,
    raw: Sourced<String>,
) -> Result<Sourced<T>, ConfigError> {
    let Some(n) = airflow_int(&raw.value) else {
        return Err(invalid(spec, raw, "not an integer"));
    };
    if n < 0 {
        return Err(invalid(spec, raw, "must be >= 0"));
    }
    match T::try_from(n) {
        Ok(value) => Ok(Sourced { value, source: raw.source }),
        Err(_) => Err(invalid(spec, raw, "too large")),
    }
}

/// A whole number of seconds, at least 1: a bound of 0 would refuse every wait.
pub(super) fn positive_seconds(spec: &Spec, raw: Sourced<String>) -> Result<Sourced<u64>, ConfigError> {
    let copy = raw.clone();
    let seconds = non_negative::<u64>(spec, raw)?;
    if seconds.value == 0 {
        return Err(invalid(spec, copy, "must be at least 1 (seconds)"));
    }
    Ok(seconds)
}

/// Airflow's `getboolean`: case-insensitive `t`/`true`/`1` or `f`/`false`/`0`, and anything from
/// a `#` on is ignored (so `True # comment` is true, although airflow.cfg has no inline
/// comments otherwise).
pub(super) fn airflow_bool(text: &str) -> Option<bool> {
    let lowered = text.to_lowercase();
    match lowered.split('#').next().unwrap_or_default().trim_matches(py_space) {
        "t" | "true" | "1" => Some(true),
        "f" | "false" | "0" => Some(false),
        _ => None,
    }
}
