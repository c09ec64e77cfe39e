//! The settings of `airflow.cfg` read from a TOML file instead: tables named like the sections
//! (`[state_store]`, `[database]`), keys like the options (case kept, as Airflow keeps it).
//!
//! Airflow itself only reads INI, so the rule is to hand on the text Airflow would have seen in
//! an `airflow.cfg`: strings as they are (no `%` interpolation, which is an INI feature),
//! integers in decimal, booleans as Python writes them (`True`/`False`). Any other TOML type
//! has no single such text and is refused, but only when that key is actually asked for, as an
//! odd value in an unrelated section would not stop Airflow either. There is no `[DEFAULT]`
//! inheritance: a table named `DEFAULT` is just a table.

use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};

use super::ConfigError;
use super::ini::{IniValue, parse_error};
use super::sources::ConfigFile;

/// One key of a table (TOML has no two tables, nor two keys in one, of the same name).
#[derive(Debug, Clone)]
struct Entry {
    table: String,
    key: String,
    /// The text `airflow.cfg` would hold, or the TOML name of a type with no such text.
    value: Result<String, &'static str>,
    line: usize,
}

/// A parsed TOML settings file.
#[derive(Debug, Clone)]
pub(crate) struct TomlFile {
    path: PathBuf,
    entries: Vec<Entry>,
}

/// 1-based line of byte offset `at`.
fn line_of(text: &str, at: usize) -> usize {
    let at = at.min(text.len());
    text.as_bytes()[..at].split(|b| *b == b'\n').count()
}

fn scalar(value: &DeValue<'_>) -> Result<String, &'static str> {
    match value {
        DeValue::String(s) => Ok(s.to_string()),
        DeValue::Integer(i) => i128::from_str_radix(i.as_str(), i.radix())
            .map(|n| n.to_string())
            .map_err(|_| "integer out of range"),
        DeValue::Boolean(b) => Ok(if *b { "True" } else { "False" }.to_owned()),
        other => Err(other.type_str()),
    }
}

/// Parses `text` (already decoded) read from `path`. Only the file's structure is checked here:
/// every top-level key must be a table, as every `airflow.cfg` option lives in a section.
pub(crate) fn parse_toml(text: &str, path: &Path) -> Result<TomlFile, ConfigError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let document = DeTable::parse(text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        line: e.span().map(|span| line_of(text, span.start)),
        // The message only describes the problem; the error's own Display would quote the
        // offending line, which may hold a password.
        message: format!("invalid TOML: {}", e.message()),
    })?;
    let mut entries = Vec::new();
    for (name, value) in document.get_ref() {
        let line = line_of(text, name.span().start);
        let DeValue::Table(table) = value.get_ref() else {
            return Err(parse_error(
                path,
                line,
                format!(
                    "`{}` is not inside a table; settings belong in tables named like the \
                     airflow.cfg sections, e.g. [database]",
                    name.get_ref()
                ),
            ));
        };
        entries.extend(table.iter().map(|(key, value)| Entry {
            table: name.get_ref().to_string(),
            key: key.get_ref().to_string(),
            value: scalar(value.get_ref()),
            line: line_of(text, key.span().start),
        }));
    }
    Ok(TomlFile { path: path.to_path_buf(), entries })
}

impl ConfigFile for TomlFile {
    fn path(&self) -> &Path {
        &self.path
    }

    /// The value of `key` in table `section`, as text; `None` when either is absent.
    fn get(&self, section: &str, key: &str) -> Result<Option<IniValue>, ConfigError> {
        let Some(entry) = self.entries.iter().find(|e| e.table == section && e.key == key) else {
            return Ok(None);
        };
        let value = entry.value.clone().map_err(|kind| {
            parse_error(
                &self.path,
                entry.line,
                format!(
                    "[{section}] {key} is a TOML {kind}; only strings, integers and \
                     booleans can stand for an airflow.cfg value"
                ),
            )
        })?;
        Ok(Some(IniValue { value, line: entry.line }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> TomlFile {
        match parse_toml(text, Path::new("/etc/airflow/state-store.toml")) {
            Ok(file) => file,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    fn get(file: &TomlFile, section: &str, key: &str) -> Option<(String, usize)> {
        match file.get(section, key) {
            Ok(v) => v.map(|v| (v.value, v.line)),
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    #[test]
    fn scalars_become_airflow_text() {
        let f = parse(
            "# settings\n[state_store]\nbackend = \"airflow.state.metastore.MetastoreBackend\"\n\
             default_retention_days = 7\nstate_cleanup_batch_size = 1_000\n\
             clear_on_success = true\nmax_value_storage_bytes = 0x10\nneg = -5\noff = false\n\
             [database]\nsql_alchemy_conn = 'postgresql://u:p%40ss@h/db'\n",
        );
        assert_eq!(
            get(&f, "state_store", "backend"),
            Some(("airflow.state.metastore.MetastoreBackend".into(), 3))
        );
        assert_eq!(get(&f, "state_store", "default_retention_days"), Some(("7".into(), 4)));
        assert_eq!(get(&f, "state_store", "state_cleanup_batch_size"), Some(("1000".into(), 5)));
        assert_eq!(get(&f, "state_store", "clear_on_success"), Some(("True".into(), 6)));
        assert_eq!(get(&f, "state_store", "max_value_storage_bytes"), Some(("16".into(), 7)));
        assert_eq!(get(&f, "state_store", "neg"), Some(("-5".into(), 8)));
        assert_eq!(get(&f, "state_store", "off"), Some(("False".into(), 9)));
        // no % interpolation in TOML
        assert_eq!(get(&f, "database", "sql_alchemy_conn"), Some(("postgresql://u:p%40ss@h/db".into(), 11)));
        assert_eq!(get(&f, "database", "missing"), None);
        assert_eq!(get(&f, "missing", "backend"), None);
    }

    #[test]
    fn keys_and_tables_are_case_sensitive_and_default_is_not_special() {
        let f = parse("[DEFAULT]\nsql_alchemy_conn = \"x\"\n[database]\nSQL_ALCHEMY_CONN = \"y\"\n");
        assert_eq!(get(&f, "database", "sql_alchemy_conn"), None);
        assert_eq!(get(&f, "Database", "SQL_ALCHEMY_CONN"), None);
        assert_eq!(get(&f, "database", "SQL_ALCHEMY_CONN"), Some(("y".into(), 4)));
    }

    #[test]
    fn other_types_are_refused_when_asked_for() {
        let f = parse(
            "[state_store]\nfloat = 30.0\narray = [1]\ntable = { a = 1 }\n\
             when = 2024-01-01T00:00:00Z\nok = 1\n[state_store.sub]\nx = 1\n",
        );
        let err = |key: &str| match f.get("state_store", key) {
            Ok(v) => panic!("expected an error, got {v:?}"),
            Err(e) => e.to_string(),
        };
        assert_eq!(
            err("float"),
            "/etc/airflow/state-store.toml line 2: [state_store] float is a TOML float; only \
             strings, integers and booleans can stand for an airflow.cfg value"
        );
        assert!(err("array").contains("line 3: [state_store] array is a TOML array"));
        assert!(err("table").contains("line 4: [state_store] table is a TOML table"));
        assert!(err("when").contains("line 5: [state_store] when is a TOML datetime"));
        assert!(err("sub").contains("[state_store] sub is a TOML table"));
        assert_eq!(get(&f, "state_store", "ok"), Some(("1".into(), 6)));
    }

    #[test]
    fn structure_errors() {
        let err = |text: &str| match parse_toml(text, Path::new("/x.toml")) {
            Ok(f) => panic!("expected an error, got {f:?}"),
            Err(e) => e.to_string(),
        };
        let e = err("[database]\nsql_alchemy_conn = \"postgresql://u:secret@h/db\nnext = 1\n");
        assert!(e.starts_with("/x.toml line 2: invalid TOML: "), "{e}");
        assert!(!e.contains("secret"), "{e}");
        assert!(err("[a]\nx = 1\nx = 2\n").starts_with("/x.toml line 3: invalid TOML"));
        assert_eq!(
            err("\nsql_alchemy_conn = \"x\"\n[database]\n"),
            "/x.toml line 2: `sql_alchemy_conn` is not inside a table; settings belong in \
             tables named like the airflow.cfg sections, e.g. [database]"
        );
    }

    #[test]
    fn bom_and_crlf() {
        let f = parse("\u{feff}[database]\r\nsql_alchemy_conn = \"sqlite:///a.db\"\r\n");
        assert_eq!(get(&f, "database", "sql_alchemy_conn"), Some(("sqlite:///a.db".into(), 2)));
    }
}
