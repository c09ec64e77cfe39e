//! The one reader of the process environment. A value that is not UTF-8 is never taken for
//! an unset variable (`std::env::var(…).ok()` does that, and then the tool would quietly
//! open another database, send no token, or pick another transport): [`var`] refuses it
//! with exit 3, naming the variable, and a variable that is only ever a path is read as
//! bytes ([`os`]). Every other module reads the environment through here; clippy's
//! `disallowed-methods` (clippy.toml) refuses `std::env::var` and its kin anywhere else.

use std::collections::HashMap;
use std::ffi::OsString;

use crate::error::{Error, Result};

/// A variable as the operating system holds it: bytes, for a value that is a path and
/// nothing else (`HOME`, `AIRFLOW_HOME`), or for a reader that checks the text itself.
#[allow(clippy::disallowed_methods)] // the one place the environment is read
pub(crate) fn os(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

/// Every variable whose name starts with `prefix`, as bytes.
#[allow(clippy::disallowed_methods)] // the one place the environment is read
pub(crate) fn os_with_prefix(prefix: &str) -> Vec<(OsString, OsString)> {
    std::env::vars_os().filter(|(name, _)| name.as_encoded_bytes().starts_with(prefix.as_bytes())).collect()
}

/// A variable as text: `None` when unset, an error (exit 3) naming it when its value is not
/// UTF-8.
pub(crate) fn var(name: &str) -> Result<Option<String>> {
    os(name).map(|value| text(name, value)).transpose()
}

/// A value read as bytes, as text: an error (exit 3) naming the variable when it is not UTF-8.
pub(crate) fn text(name: &str, value: OsString) -> Result<String> {
    value.into_string().map_err(|_| Error::Config(not_utf8(name)).into())
}

/// Why a variable is refused: the words every reader of text uses.
pub(crate) fn not_utf8(name: &str) -> String {
    format!(
        "environment variable {name} is not valid UTF-8: state-store refuses it rather than read it as \
         unset; give it as UTF-8 text, or unset it"
    )
}

/// Several variables as text, read at once, for a reader that looks them up by name later
/// (the REST transport's credentials and proxies): the first that is not UTF-8 is an error.
pub(crate) fn vars(names: &[&'static str]) -> Result<HashMap<&'static str, String>> {
    names.iter().filter_map(|name| var(name).transpose().map(|value| value.map(|v| (*name, v)))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_that_is_not_utf8_is_refused_by_name() {
        let bytes = std::os::unix::ffi::OsStringExt::from_vec(b"/tmp/\xff".to_vec());
        let e = text("AIRFLOW_CLI_TOKEN", bytes).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), crate::error::exit::CONFIG);
        assert!(
            e.to_string().starts_with("environment variable AIRFLOW_CLI_TOKEN is not valid UTF-8"),
            "{e}"
        );
        assert_eq!(text("X", OsString::from("ok")).unwrap(), "ok");
    }
}
