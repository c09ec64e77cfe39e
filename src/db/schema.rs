//! Which Airflow schema a database holds, and the tables a sandbox creates.
//!
//! Opening a database checks that its tables are the Airflow 3.3 state store this tool is
//! written for, so a wrong or half-migrated database is refused before anything is read or
//! written, with the same words on every dialect. A sandbox gets Airflow 3.3.2's own tables,
//! as `airflow db migrate` creates them (each dialect's `schema.sql`), plus a marker table, so
//! the commands that add dag runs and assets refuse to run against a real metastore.

use crate::error::{Error, Result};

/// The Alembic revision of Airflow 3.3.2.
pub(crate) const AIRFLOW_33_ALEMBIC_REVISION: &str = "d2f4e1b3c5a7";

/// The Airflow tables a sandbox creates, which `sandbox create` refuses to overwrite.
pub(crate) const AIRFLOW_TABLES: &str =
    "dag_run task_instance asset asset_active task_state_store asset_state_store alembic_version";

/// Present only in databases created by `state-store sandbox create`.
pub(crate) const SANDBOX_MARKER_TABLE: &str = "state_store_sandbox";

/// The statements of a `schema.sql`: separated by `;` at the end of a line, each after its
/// `--` comment lines, and each exactly as Airflow's migrations leave it (SQLite keeps the
/// text of every `CREATE` in `sqlite_master`, where the interoperability tests compare it).
pub(crate) fn ddl_statements(ddl: &'static str) -> impl Iterator<Item = &'static str> {
    ddl.split(";\n").filter_map(|chunk| {
        let mut text = chunk.trim_start_matches('\n');
        while text.starts_with("--") {
            text = text.split_once('\n').map_or("", |(_, rest)| rest).trim_start_matches('\n');
        }
        (!text.trim().is_empty()).then_some(text)
    })
}

/// Which Airflow schema the database holds, found by looking at its tables and columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SchemaVersion {
    /// Airflow 3.3.x: the tables and columns this tool is written for.
    Airflow33,
}

impl SchemaVersion {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            SchemaVersion::Airflow33 => "Airflow 3.3",
        }
    }
}

/// A schema the tool does not work on: what was found, in a few words (`doctor` names it),
/// and the message every other command fails with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SchemaProblem {
    pub found: &'static str,
    pub message: String,
}

impl SchemaProblem {
    pub(crate) fn new(found: &'static str, message: String) -> SchemaProblem {
        SchemaProblem { found, message }
    }

    /// The error every command but `doctor` fails with: exit 5.
    pub(crate) fn into_error(self) -> Error {
        Error::Schema(self.message)
    }
}

/// The schema check's outcome: the version recognised, or why it was not.
pub(crate) type SchemaFinding = std::result::Result<SchemaVersion, SchemaProblem>;

/// Columns the tool reads or writes, per table. Anything else may exist (newer Airflow
/// versions add columns); a missing one means a schema we do not understand.
const REQUIRED_COLUMNS: &[(&str, &str)] = &[
    ("task_state_store", "id dag_run_id task_id map_index key dag_id run_id value updated_at expires_at"),
    (
        "asset_state_store",
        "asset_id key value updated_at last_updated_by_kind last_updated_by_dag_id last_updated_by_run_id \
         last_updated_by_task_id last_updated_by_map_index",
    ),
    ("dag_run", "id dag_id run_id"),
    ("task_instance", "dag_id run_id task_id map_index"),
    ("asset", "id name uri"),
    ("asset_active", "name uri"),
];

/// Table names that pre-release 3.3 builds used under the same Alembic revision.
const PRE_RELEASE_TABLES: &[(&str, &str)] = &[("task_state", "asset_state"), ("task_store", "asset_store")];

/// Decides what a database holds from a column lister (`None` = table missing). Shared by all
/// dialects so every one of them refuses the same schemas with the same words. The outer error
/// is a database that could not be read at all; an unknown schema is the inner one, which the
/// commands turn into [`Error::Schema`] and `doctor` reports.
pub(crate) fn diagnose_schema(
    location: &str,
    mut columns: impl FnMut(&str) -> Result<Option<Vec<String>>>,
) -> Result<SchemaFinding> {
    let problem = |found, message: String| Ok(Err(SchemaProblem::new(found, format!("{location}{message}"))));
    let task = columns("task_state_store")?;
    let asset = columns("asset_state_store")?;
    if task.is_none() && asset.is_none() {
        for (task_name, asset_name) in PRE_RELEASE_TABLES {
            let found: Vec<&str> = [*task_name, *asset_name]
                .into_iter()
                .filter(|name| matches!(columns(name), Ok(Some(_))))
                .collect();
            if !found.is_empty() {
                return problem(
                    "pre-release Airflow 3.3",
                    format!(
                        " has the pre-release Airflow 3.3 table(s) {}, not task_state_store/asset_state_store: \
                         upgrade the metastore with `airflow db migrate` on Airflow 3.3.0 or later",
                        found.join(", ")
                    ),
                );
            }
        }
        return problem(
            "no state-store tables",
            " has no task_state_store or asset_state_store table: is it an Airflow 3.3 metastore? \
             (`airflow db migrate` creates them)"
                .to_string(),
        );
    }
    if task.as_ref().is_some_and(|columns| columns.iter().any(|c| c == "region_id")) {
        return problem(
            "Airflow 3.4",
            " has the Airflow 3.4 state-store schema (task_state_store.region_id), which this version of \
             state-store does not support; it supports Airflow 3.3"
                .to_string(),
        );
    }
    for (table, required) in REQUIRED_COLUMNS {
        let found = match *table {
            "task_state_store" => task.clone(),
            "asset_state_store" => asset.clone(),
            other => columns(other)?,
        };
        let Some(found) = found else {
            return problem(
                "incomplete Airflow 3.3 schema",
                format!(" has no {table} table, which an Airflow 3.3 metastore has"),
            );
        };
        let missing: Vec<&str> = required
            .split_whitespace()
            .filter(|c| !found.iter().any(|f| f.eq_ignore_ascii_case(c)))
            .collect();
        if !missing.is_empty() {
            return problem(
                "unrecognised schema",
                format!(
                    ": table {table} lacks column(s) {} that Airflow 3.3 has; the schema is not recognised",
                    missing.join(", ")
                ),
            );
        }
    }
    Ok(Ok(SchemaVersion::Airflow33))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddl_statements_are_cut_at_their_semicolons_without_comments() {
        let ddl = "-- file\n--\n\n-- why\nCREATE TABLE a (\n\tid INTEGER, \n\tb TEXT\n);\n\nCREATE INDEX i ON a (b);\n";
        let statements: Vec<&str> = ddl_statements(ddl).collect();
        assert_eq!(statements, ["CREATE TABLE a (\n\tid INTEGER, \n\tb TEXT\n)", "CREATE INDEX i ON a (b)"]);
    }
}
