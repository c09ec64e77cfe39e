//! `doctor`'s checks: what Airflow's state store should not hold, check by check, with how
//! many rows and a sample of them: an unknown schema, task rows that disagree with their dag
//! run or lost it, task rows whose task instance does not exist, asset rows that lost their
//! asset, values Airflow cannot read back, keys and values over Airflow's limits, (SQLite)
//! timestamp text Airflow's clean compares wrongly, and the state of inactive assets; and, as
//! information, the database, backend and settings in use and what a clean would do now.
//! Read-only.

use serde::Serialize;

use crate::config::Settings;
use crate::db::{Diagnosis, Finding, FoundRow, Place, Store};
use crate::error::Result;
use crate::json::{self, ParseErrorKind};
use crate::model::MAX_KEY_CHARS;
use crate::text::cut;
use crate::time::Timestamp;
use crate::url::{DbUrl, Dialect};

/// Rows read per page by the JSON check: memory stays bounded whatever the table's size.
const PAGE_ROWS: u64 = 500;

/// Keys and values are cut to this many characters in the table's samples (JSON has them whole).
pub(crate) const SAMPLE_TEXT_CHARS: usize = 60;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Ok,
    Problem,
    Warning,
    Info,
    Skipped,
}

impl Status {
    /// Its name in every output: the variant's, in lowercase, as serde spells it.
    pub(crate) fn name(self) -> String {
        format!("{self:?}").to_lowercase()
    }
}

/// One check's outcome, as every output format shows it; in JSON, one of `checks`
/// (docs/commands/doctor.md#json-fields).
#[derive(Serialize)]
pub(crate) struct Check {
    pub(crate) name: &'static str,
    pub(crate) status: Status,
    pub(crate) message: String,
    /// Rows found; `None` where a count means nothing (information, skipped, the schema).
    pub(crate) count: Option<u64>,
    pub(crate) sample: Vec<FoundRow>,
    pub(crate) details: Details,
}

/// Facts beyond a check's message: an object in JSON (empty for most checks), and for the
/// backend a table of its own.
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum Details {
    None {},
    Schema { found: String },
    Backend(Box<Backend>),
}

/// The database and backend in use and the settings a clean uses, each with where it came
/// from; with a known schema, what a clean would delete now.
#[derive(Serialize)]
pub(crate) struct Backend {
    dialect: &'static str,
    database: String,
    backend: String,
    backend_from: String,
    state_cleanup_batch_size: u64,
    state_cleanup_batch_size_from: String,
    /// How `state-store clean` sizes its batches with that setting: `auto` (the configured 0),
    /// `rows` or `one_transaction` (`--batch-size 0` only).
    batching: &'static str,
    default_retention_days: u32,
    default_retention_days_from: String,
    max_value_storage_bytes: u64,
    max_value_storage_bytes_from: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    expired_task_rows: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    orphaned_asset_rows: Option<u64>,
}

impl Check {
    fn new(name: &'static str, status: Status, message: String) -> Check {
        Check { name, status, message, count: None, sample: Vec::new(), details: Details::None {} }
    }

    /// A check that counts rows: ok when there are none, `status_if_found` otherwise, its
    /// message then the count and `found`.
    fn counted(
        name: &'static str,
        finding: Finding,
        status_if_found: Status,
        ok: impl Into<String>,
        found: &str,
    ) -> Check {
        let (status, message) = match finding.count {
            0 => (Status::Ok, ok.into()),
            n => (status_if_found, format!("{n} {found}")),
        };
        Check { count: Some(finding.count), sample: finding.sample, ..Check::new(name, status, message) }
    }
}

/// The checks that read the state-store tables, in report order; all skipped when the schema
/// is not recognised.
const TABLE_CHECKS: &[&str] = &[
    "dag_run_match",
    "dangling_task_rows",
    "missing_task_instance",
    "dangling_asset_rows",
    "json_values",
    "key_length",
    "value_size",
    "sqlite_timestamps",
    "sqlite_integers",
    "inactive_asset_rows",
];

/// Every check of a database, in report order. With a schema that is not recognised, the table
/// checks are skipped; the configuration is still reported.
pub(crate) fn checks(
    settings: &Settings,
    url: &DbUrl,
    diagnosis: Diagnosis,
    sample: u64,
) -> Result<Vec<Check>> {
    let now = Timestamp::now();
    let mut checks = Vec::new();
    match diagnosis {
        Diagnosis::Recognised(version, mut store) => {
            let found = version.name();
            let message = format!(
                "{found} state store: task_state_store and asset_state_store have the expected columns"
            );
            checks.push(schema(Status::Ok, message, found.to_string()));
            checks.extend(table_checks(settings, url, &mut store, sample)?);
            checks.push(backend_check(settings, url, Some((&mut store, now)))?);
        }
        Diagnosis::Unrecognised(problem) => {
            checks.push(schema(Status::Problem, problem.message.clone(), problem.found.to_string()));
            checks.extend(TABLE_CHECKS.iter().map(|name| {
                Check::new(name, Status::Skipped, "not checked: the schema is not recognised".to_string())
            }));
            checks.push(backend_check(settings, url, None)?);
        }
    }
    Ok(checks)
}

/// The schema check, with what it found in its details too.
fn schema(status: Status, message: String, found: String) -> Check {
    Check { details: Details::Schema { found }, ..Check::new("schema", status, message) }
}

fn table_checks(settings: &Settings, url: &DbUrl, store: &mut Store, sample: u64) -> Result<Vec<Check>> {
    let mut checks = vec![
        Check::counted(
            "dag_run_match",
            store.mismatched_dag_runs(sample)?,
            Status::Problem,
            "every task row's dag_id and run_id match its dag run",
            "task row(s) disagree with their dag run: dag_id or run_id differ from the dag_run row \
             their dag_run_id points at, so Airflow finds them under another run",
        ),
        Check::counted(
            "dangling_task_rows",
            store.task_rows_without_dag_run(sample)?,
            Status::Problem,
            "every task row's dag run exists",
            "task row(s) point at a dag run that no longer exists (written while foreign keys were \
             off); Airflow deletes a run's keys with the run",
        ),
        // A warning, not a problem: only Airflow's REST API refuses to write keys of a task
        // instance that does not exist; its reads, its clean and the database itself accept them.
        Check::counted(
            "missing_task_instance",
            store.task_rows_without_task_instance(sample)?,
            Status::Warning,
            "every task row's task instance exists",
            "task row(s) belong to a task instance that does not exist (written by another tool, or \
             before the scheduler created it); Airflow reads and cleans them, its REST API refuses to \
             change them",
        ),
        Check::counted(
            "dangling_asset_rows",
            store.asset_rows_without_asset(sample)?,
            Status::Problem,
            "every asset row's asset exists",
            "asset row(s) point at an asset that no longer exists (written while foreign keys were \
             off); the next clean deletes them",
        ),
        json_check(store, sample)?,
        Check::counted(
            "key_length",
            store.long_keys(MAX_KEY_CHARS as u64, sample)?,
            Status::Problem,
            format!("every key is at most {MAX_KEY_CHARS} characters"),
            &format!(
                "key(s) are longer than Airflow's {MAX_KEY_CHARS} characters; Airflow cannot write them, \
                 and other databases cannot hold them"
            ),
        ),
        value_size_check(settings, store, sample)?,
        sqlite_only(
            "sqlite_timestamps",
            store.malformed_timestamps(sample)?,
            "every timestamp is stored in Airflow's form YYYY-MM-DD HH:MM:SS.ffffff",
            "row(s) hold a timestamp not in Airflow's stored form YYYY-MM-DD HH:MM:SS.ffffff; \
             Airflow's clean compares them as text and gets them wrong",
            url,
            "stores timestamps as timestamps, not text",
        ),
        sqlite_only(
            "sqlite_integers",
            store.mistyped_integers(sample)?,
            "every map_index and dag_run_id is an integer",
            "task row(s) hold a map_index or dag_run_id that is not an integer; Airflow cannot \
             read them, and list and export stop at them",
            url,
            "enforces its integer columns",
        ),
    ];
    let orphans = store.orphans_by_asset()?.iter().map(|a| a.rows).sum::<u64>();
    let orphan_sample = store.orphan_sample(sample)?;
    let finding = Finding {
        count: orphans,
        sample: orphan_sample
            .into_iter()
            .map(|e| FoundRow {
                place: Place::Asset { asset_id: e.asset_id, asset_name: e.asset_name.clone() },
                key: e.key,
                detail: match e.asset_name {
                    Some(_) => "asset is not active (no asset_active row with its name and uri)".to_string(),
                    None => "asset no longer exists".to_string(),
                },
            })
            .collect(),
    };
    checks.push(Check::counted(
        "inactive_asset_rows",
        finding,
        Status::Warning,
        "no keys of inactive assets",
        "asset row(s) belong to inactive assets; state-store clean deletes them, and so does \
         Airflow's scheduler (not `airflow state-store clean`, which deletes expired task rows only)",
    ));
    Ok(checks)
}

/// A check of what only SQLite lets a column hold: a problem when rows are found, skipped on
/// another database (`finding` is `None` there), where `elsewhere` says why.
fn sqlite_only(
    name: &'static str,
    finding: Option<Finding>,
    ok: &str,
    found: &str,
    url: &DbUrl,
    elsewhere: &str,
) -> Check {
    match finding {
        Some(finding) => Check::counted(name, finding, Status::Problem, ok, found),
        None => {
            Check::new(name, Status::Skipped, format!("not applicable: {} {elsewhere}", dialect_name(url)))
        }
    }
}

/// Reads every value, a page at a time in primary-key order, with the parser that mirrors
/// Python's `json.loads`: memory stays bounded on a table of any size.
fn json_check(store: &mut Store, sample: u64) -> Result<Check> {
    let limit = usize::try_from(sample).unwrap_or(usize::MAX);
    let mut finding = Finding::default();
    let note = |finding: &mut Finding, place: Place, key: &str, value: &str| {
        if let Some(error) = unreadable(value) {
            finding.count += 1;
            if finding.sample.len() < limit {
                finding.sample.push(FoundRow { place, key: key.to_string(), detail: error });
            }
        }
    };
    let (mut task_rows, mut asset_rows) = (0u64, 0u64);
    let mut after_id = i64::MIN;
    loop {
        let page = store.task_values_after(after_id, PAGE_ROWS)?;
        for (id, place, key, value) in page.iter().cloned() {
            note(&mut finding, place, &key, &value);
            after_id = id;
        }
        task_rows += page.len() as u64;
        if (page.len() as u64) < PAGE_ROWS {
            break;
        }
    }
    let mut after: Option<(i64, String)> = None;
    loop {
        let page = store.asset_rows_after(after.as_ref().map(|(id, key)| (*id, key.as_str())), PAGE_ROWS)?;
        for entry in &page {
            let place = Place::Asset { asset_id: entry.asset_id, asset_name: entry.asset_name.clone() };
            note(&mut finding, place, &entry.key, &entry.value);
        }
        asset_rows += page.len() as u64;
        match page.last() {
            Some(last) if page.len() as u64 == PAGE_ROWS => after = Some((last.asset_id, last.key.clone())),
            _ => break,
        }
    }
    Ok(Check::counted(
        "json_values",
        finding,
        Status::Problem,
        format!("every value is valid JSON ({task_rows} task and {asset_rows} asset row(s) read)"),
        "value(s) Airflow cannot read back: not JSON to json.loads, or nested deeper than Airflow reads",
    ))
}

/// Why Airflow could not read a stored value back, or `None` when it can: `json.loads` fails
/// on it, or it is nested deeper than Airflow reads. NaN, infinities and lone surrogates are
/// refused by this tool's parser but read by Python, so they pass.
fn unreadable(value: &str) -> Option<String> {
    let too_deep = |depth: &str| {
        format!(
            "nested {depth} levels deep: Airflow reads values nested at most {} levels deep; stored text: {}",
            json::MAX_AIRFLOW_DEPTH,
            cut(value, SAMPLE_TEXT_CHARS)
        )
    };
    match json::parse(value) {
        Ok(parsed) => {
            let depth = json::deepest_element(&parsed);
            (depth > json::MAX_AIRFLOW_DEPTH).then(|| too_deep(&depth.to_string()))
        }
        Err(e) if matches!(e.kind(), ParseErrorKind::NonFinite | ParseErrorKind::LoneSurrogate) => None,
        Err(e) if e.kind() == ParseErrorKind::TooDeep => Some(too_deep("more than 500")),
        Err(e) if value.is_empty() => Some(format!("{e}; the stored text is empty")),
        Err(e) => Some(format!("{e}; stored text: {}", cut(value, SAMPLE_TEXT_CHARS))),
    }
}

fn value_size_check(settings: &Settings, store: &mut Store, sample: u64) -> Result<Check> {
    let limit = &settings.max_value_storage_bytes;
    if limit.value == 0 {
        return Ok(Check::new(
            "value_size",
            Status::Skipped,
            format!(
                "[state_store] max_value_storage_bytes is 0 (from {}): values have no limit",
                limit.source
            ),
        ));
    }
    // A warning, not a problem: Airflow's task SDK only warns when a worker writes such a value,
    // so a healthy metastore can hold them; only its REST API refuses to write them.
    Ok(Check::counted(
        "value_size",
        store.large_values(limit.value, sample)?,
        Status::Warning,
        format!(
            "every value is at most {} bytes ([state_store] max_value_storage_bytes, from {})",
            limit.value, limit.source
        ),
        &format!(
            "value(s) are larger than [state_store] max_value_storage_bytes = {} (from {}); Airflow's \
             workers may write them (its task SDK only warns), its REST API refuses to",
            limit.value, limit.source
        ),
    ))
}

fn dialect_name(url: &DbUrl) -> &'static str {
    match url.dialect {
        Dialect::Sqlite => "SQLite",
        Dialect::Postgres => "PostgreSQL",
        Dialect::Mysql => "MySQL/MariaDB",
    }
}

/// Information, never a failure: the database and backend in use, the settings a clean uses,
/// and (when the schema is known) what a clean would delete now.
fn backend_check(settings: &Settings, url: &DbUrl, store: Option<(&mut Store, Timestamp)>) -> Result<Check> {
    let s = settings;
    let database = url.redacted();
    let batch = &s.state_cleanup_batch_size;
    // What `state-store clean` makes of it, in its own words: Airflow's 0 runs as auto.
    let (size, time, auto_from) =
        crate::ops::clean::choose_batching(None, batch, crate::ops::clean::AUTO_BATCH_TIME);
    let fixed = time.is_none().then_some(size);
    let batches =
        format!("batch size {}", crate::ops::clean::batching_text(fixed, time, auto_from.as_deref()));
    let mut details = Backend {
        dialect: dialect_name(url),
        database: database.clone(),
        backend: s.backend.value.clone(),
        backend_from: s.backend.source.to_string(),
        state_cleanup_batch_size: batch.value,
        state_cleanup_batch_size_from: batch.source.to_string(),
        batching: crate::ops::clean::batching_name(fixed, time),
        default_retention_days: s.default_retention_days.value,
        default_retention_days_from: s.default_retention_days.source.to_string(),
        max_value_storage_bytes: s.max_value_storage_bytes.value,
        max_value_storage_bytes_from: s.max_value_storage_bytes.source.to_string(),
        expired_task_rows: None,
        orphaned_asset_rows: None,
    };
    let clean = if !s.is_builtin_backend() {
        format!(
            "[state_store] backend is {}, not the metastore backend: Airflow's clean and state-store clean skip \
             this database",
            s.backend.value
        )
    } else if let Some((store, now)) = store {
        let expired = store.count_expired(now)?;
        let orphans = store.orphans_by_asset()?.iter().map(|a| a.rows).sum::<u64>();
        details.expired_task_rows = Some(expired);
        details.orphaned_asset_rows = Some(orphans);
        format!(
            "a clean now would delete {expired} expired task row(s) and {orphans} orphaned asset row(s), {batches}"
        )
    } else {
        "a clean would refuse this database: its schema is not recognised".to_string()
    };
    let mut check =
        Check::new("backend", Status::Info, format!("{} at {database}; {clean}", dialect_name(url)));
    check.details = Details::Backend(Box::new(details));
    Ok(check)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{self, Overrides};
    use crate::db::{AssetWrite, SchemaVersion, TaskWrite, memory_sandbox};
    use crate::model::TaskScope;

    /// A metastore with a good value, a value that is not JSON, a key over Airflow's length,
    /// keys of a map index and of a task that have no task instance, and a key of an inactive
    /// asset.
    fn checked() -> Vec<Check> {
        let mut sandbox = memory_sandbox().unwrap();
        let run = sandbox.add_dag_run("d", "r").unwrap();
        sandbox.add_task_instance("d", "r", "t", -1).unwrap();
        let inactive = sandbox.add_asset("gone", "s3://gone", false).unwrap();
        let mut store = sandbox.into_store();
        let scope = |task_id: &str, map_index| TaskScope {
            dag_id: "d".into(),
            run_id: "r".into(),
            task_id: task_id.into(),
            map_index,
        };
        let now = Timestamp::now();
        let long = "k".repeat(MAX_KEY_CHARS + 1);
        let rows = [
            (scope("t", -1), "good", "[1, 2]"),
            (scope("t", -1), "bad", "{\"a\": 1,}"),
            (scope("t", -1), long.as_str(), "1"),
            (scope("t", 3), "mapped", "1"),
            (scope("u", -1), "other", "1"),
        ];
        for (scope, key, value) in &rows {
            let write = TaskWrite { dag_run_id: run, scope, key, value, updated_at: now, expires_at: None };
            store.upsert_task(&write).unwrap();
        }
        store
            .upsert_asset(&AssetWrite { asset_id: inactive, key: "cursor", value: "1", updated_at: now })
            .unwrap();
        let overrides =
            Overrides { conn: Some(crate::redact::Masked("sqlite://".to_string())), ..Overrides::default() };
        let settings =
            config::load(&overrides, &|name| (name == "HOME").then(|| "/nonexistent".into())).unwrap();
        let url = DbUrl::parse("sqlite://").unwrap();
        checks(&settings, &url, Diagnosis::Recognised(SchemaVersion::Airflow33, store), 5).unwrap()
    }

    fn check<'a>(checks: &'a [Check], name: &str) -> &'a Check {
        checks.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn each_check_counts_and_samples_what_it_finds() {
        let checks = checked();
        let names: Vec<&str> = checks.iter().map(|c| c.name).collect();
        let mut expected = vec!["schema"];
        expected.extend(TABLE_CHECKS);
        expected.push("backend");
        assert_eq!(names, expected, "every check, in report order");
        assert_eq!(check(&checks, "schema").status, Status::Ok);
        let json = check(&checks, "json_values");
        assert_eq!((json.status, json.count), (Status::Problem, Some(1)));
        assert_eq!(json.sample[0].key, "bad");
        assert!(
            json.sample[0].detail.starts_with("Expecting property name enclosed in double quotes"),
            "{}",
            json.sample[0].detail
        );
        let keys = check(&checks, "key_length");
        assert_eq!((keys.status, keys.count), (Status::Problem, Some(1)));
        assert_eq!(keys.sample[0].detail, format!("{} characters", MAX_KEY_CHARS + 1));
        let missing = check(&checks, "missing_task_instance");
        assert_eq!((missing.status, missing.count), (Status::Warning, Some(2)));
        let found: Vec<(&str, &str)> =
            missing.sample.iter().map(|r| (r.key.as_str(), r.detail.as_str())).collect();
        assert_eq!(
            found,
            [
                (
                    "mapped",
                    "no task instance with this map index; the task has 1 other instance(s) in the run"
                ),
                ("other", "no task instance of this task in the run"),
            ]
        );
        let inactive = check(&checks, "inactive_asset_rows");
        assert_eq!((inactive.status, inactive.count), (Status::Warning, Some(1)));
        for name in ["dag_run_match", "dangling_task_rows", "dangling_asset_rows", "sqlite_timestamps"] {
            assert_eq!(check(&checks, name).status, Status::Ok, "{name}");
        }
        let backend = check(&checks, "backend");
        assert_eq!(backend.status, Status::Info);
        assert!(
            backend
                .message
                .contains("a clean now would delete 0 expired task row(s) and 1 orphaned asset row(s)"),
            "{}",
            backend.message
        );
    }

    #[test]
    fn values_python_reads_are_not_reported() {
        assert_eq!(unreadable(r#"{"a": [1, 2.5, "x"]}"#), None);
        assert_eq!(unreadable("NaN"), None, "json.loads reads NaN");
        assert_eq!(unreadable(r#""\ud800""#), None, "json.loads reads a lone surrogate");
        assert_eq!(unreadable("null"), None);
        assert_eq!(
            unreadable("not json").as_deref(),
            Some("Expecting value: line 1 column 1 (char 0); stored text: not json")
        );
        assert_eq!(
            unreadable("").as_deref(),
            Some("Expecting value: line 1 column 1 (char 0); the stored text is empty")
        );
        assert!(unreadable("{\"a\": 1,}").is_some());
    }
}
