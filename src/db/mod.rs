//! The database layer: one [`Metastore`] trait, one implementation per dialect.
//!
//! The operations (get, set, clean, …) are written once against the trait; each dialect keeps
//! its own SQL next to its driver (`sqlite.rs`, …), as plain statements with bound parameters.
//! Opening a database also checks that its tables are the Airflow 3.3 state store we know, so a
//! wrong or half-migrated database is refused before anything is read or written.

#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod schema;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

use crate::error::{Error, Result};
use crate::model::{
    Asset, AssetEntry, AssetFilter, AssetSelector, Page, StoredTime, TaskEntry, TaskFilter, TaskScope,
};
use crate::time::Timestamp;
use crate::url::{DbUrl, Dialect};

/// What a write to a task scope stores.
pub(crate) struct TaskWrite<'a> {
    pub dag_run_id: i64,
    pub scope: &'a TaskScope,
    pub key: &'a str,
    pub value: &'a str,
    pub updated_at: Timestamp,
    pub expires_at: Option<Timestamp>,
}

/// What a write to an asset scope stores. Writes from this tool are Airflow `api` writes.
pub(crate) struct AssetWrite<'a> {
    pub asset_id: i64,
    pub key: &'a str,
    pub value: &'a str,
    pub updated_at: Timestamp,
}

/// Who last wrote an asset row, as Airflow records it: `kind` is `task`, `watcher` or `api`,
/// and the four task fields are set by `task` writes only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AssetWriter {
    pub kind: Option<String>,
    pub dag_id: Option<String>,
    pub run_id: Option<String>,
    pub task_id: Option<String>,
    pub map_index: Option<i64>,
}

/// An asset row restored by `import`, exactly as exported: value text, updated_at and writer.
pub(crate) struct AssetRestore<'a> {
    pub asset_id: i64,
    pub key: &'a str,
    pub value: &'a str,
    pub updated_at: Timestamp,
    pub writer: &'a AssetWriter,
}

/// Expired task rows grouped by dag, for a dry run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DagCount {
    pub dag_id: String,
    pub rows: u64,
}

/// Orphaned asset rows grouped by asset, for a dry run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AssetCount {
    pub asset_id: i64,
    pub asset_name: Option<String>,
    pub rows: u64,
}

/// Task rows of one dag (or one task of a dag), summed for `stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskGroup {
    pub dag_id: String,
    pub task_id: Option<String>,
    pub rows: u64,
    pub value_bytes: u64,
    pub expired: u64,
    pub expiring_soon: u64,
    pub never_expiring: u64,
    pub oldest_update: Option<StoredTime>,
    pub newest_update: Option<StoredTime>,
}

/// Asset rows of one asset, summed for `stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AssetGroup {
    pub asset_id: i64,
    pub asset_name: Option<String>,
    pub rows: u64,
    pub value_bytes: u64,
    pub oldest_update: Option<StoredTime>,
    pub newest_update: Option<StoredTime>,
}

/// One of the largest stored values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LargeValue {
    /// `task dag/run/task[index]` or `asset <name>`.
    pub scope: String,
    pub key: String,
    pub bytes: u64,
}

/// The task instances of a dag run, as far as a "task instance not found" message needs them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TaskInstances {
    /// The first task ids of the run in byte order, at most the `limit` asked for.
    pub task_ids: Vec<String>,
    /// How many task ids the run has in all.
    pub task_count: u64,
    /// The instances of the task asked about: how many, and their lowest and highest map
    /// index (`None` when the task has no instance in the run).
    pub map_indexes: Option<(u64, i64, i64)>,
}

/// How the connection is used: read-only commands cannot change anything even by mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    ReadOnly,
    ReadWrite,
}

/// What one batch of a clean did: see [`Metastore::delete_expired_batch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Batch {
    pub deleted: u64,
    pub last_id: Option<i64>,
}

/// Finding state rows and reading them: the lookups commands start from, `get`, `list` and
/// `export`.
pub(crate) trait Reads {
    fn dag_run_id(&mut self, dag_id: &str, run_id: &str) -> Result<Option<i64>>;
    /// Whether `task_instance` has the task instance of `scope`, or any instance of its task
    /// with `any_map_index`: Airflow's API refuses state writes to a task instance that does
    /// not exist, while the database's own keys check only the dag run.
    fn task_instance_exists(&mut self, scope: &TaskScope, any_map_index: bool) -> Result<bool>;
    /// What a dag run holds, for the message when a task instance is not found.
    fn task_instances_hint(
        &mut self,
        dag_id: &str,
        run_id: &str,
        task_id: &str,
        limit: u64,
    ) -> Result<TaskInstances>;
    fn find_asset(&mut self, selector: &AssetSelector) -> Result<Option<Asset>>;
    /// The asset with exactly this name and uri, active or not (Airflow keeps the pair
    /// unique), for `import`: ids differ from one database to another, name and uri do not.
    fn asset_id_by_name_uri(&mut self, name: &str, uri: &str) -> Result<Option<i64>>;
    /// Whether an asset with this name or uri exists at all, active or not (for messages).
    fn asset_exists_inactive(&mut self, selector: &AssetSelector) -> Result<bool>;
    /// Up to `limit` active assets in id order, for the message when a name or uri matches
    /// none: the close ones are named.
    fn active_assets(&mut self, limit: u64) -> Result<Vec<Asset>>;
    fn task_entry(&mut self, scope: &TaskScope, key: &str) -> Result<Option<TaskEntry>>;
    fn asset_entry(&mut self, asset: &Asset, key: &str) -> Result<Option<AssetEntry>>;
    fn list_task(&mut self, filter: &TaskFilter, page: Page) -> Result<Vec<TaskEntry>>;
    fn list_asset(&mut self, filter: &AssetFilter, page: Page) -> Result<Vec<AssetEntry>>;
    /// Up to `limit` task rows matching `filter` with `id > after_id`, in primary-key order,
    /// with their ids: `export` pages through a large table along the primary key, where an
    /// `OFFSET` in list order would sort and skip ever more rows per page.
    fn task_rows_after(
        &mut self,
        filter: &TaskFilter,
        after_id: i64,
        limit: u64,
    ) -> Result<Vec<(i64, TaskEntry)>>;
}

/// Writing and deleting state rows: `set`, `delete`, `clear` and `import`.
pub(crate) trait Writes {
    fn upsert_task(&mut self, write: &TaskWrite<'_>) -> Result<()>;
    fn upsert_asset(&mut self, write: &AssetWrite<'_>) -> Result<()>;
    /// The upserts of `import`: every column as given (nothing is stamped now), and an existing
    /// row whose `updated_at` is newer than the given one is left as it is, so restoring an
    /// old archive never overwrites a value written since.
    fn restore_task(&mut self, write: &TaskWrite<'_>) -> Result<()>;
    fn restore_asset(&mut self, write: &AssetRestore<'_>) -> Result<()>;
    /// Whether the dialect's columns can hold the row, checked without writing (`import`
    /// checks every row before it writes any). The restore methods check again.
    fn check_restore_task(&self, write: &TaskWrite<'_>) -> Result<()> {
        let _ = write;
        Ok(())
    }
    fn check_restore_asset(&self, write: &AssetRestore<'_>) -> Result<()> {
        let _ = write;
        Ok(())
    }
    /// An explicit transaction around several statements (one batch of an import); without
    /// it every statement commits on its own.
    fn begin(&mut self) -> Result<()>;
    fn commit(&mut self) -> Result<()>;
    fn rollback(&mut self) -> Result<()>;
    fn delete_task(&mut self, scope: &TaskScope, key: &str) -> Result<u64>;
    fn delete_asset(&mut self, asset_id: i64, key: &str) -> Result<u64>;
    fn count_task_scope(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64>;
    fn clear_task(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64>;
    fn count_asset_scope(&mut self, asset_id: i64) -> Result<u64>;
    fn clear_asset(&mut self, asset_id: i64) -> Result<u64>;
}

/// What `clean` needs: counts for a dry run, its lock and session, and deletion in batches.
pub(crate) trait Cleanup {
    /// Expired task rows in all, for the progress bar of a clean run at a terminal.
    fn count_expired(&mut self, cutoff: Timestamp) -> Result<u64>;
    /// Counts for a dry run: expired task rows per dag, orphaned asset rows per asset.
    fn expired_by_dag(&mut self, cutoff: Timestamp) -> Result<Vec<DagCount>>;
    fn orphans_by_asset(&mut self) -> Result<Vec<AssetCount>>;
    fn orphan_sample(&mut self, limit: u64) -> Result<Vec<AssetEntry>>;
    /// Prepares this connection for a clean: takes the lock that keeps two cleans of the same
    /// database from running at once (`false` when another clean holds it; the lock lasts as
    /// long as the connection) and bounds every lock wait of later statements by
    /// `lock_timeout`, so a clean never queues for long behind Airflow's workers.
    fn begin_clean(&mut self, lock_timeout: std::time::Duration) -> Result<bool>;
    /// Ends a clean's work on this connection, whatever its outcome: a dialect that let the
    /// session defer work (SQLite's WAL checkpoints) does it here. Best effort, never fails.
    fn finish_clean(&mut self) {}
    /// The id of the `n`-th expired task row after `after_id` in primary-key order, or `None`
    /// when fewer than `n` remain. Batches are primary-key ranges: each batch starts where the
    /// previous one ended instead of re-scanning the expires_at index from its head, which
    /// Airflow's clean does and which slows down as dead index entries pile up there.
    fn nth_expired_id(&mut self, cutoff: Timestamp, after_id: i64, n: u64) -> Result<Option<i64>>;
    /// Deletes expired rows with `after_id < id <= up_to_id` (no upper bound when `None`), in
    /// one transaction. The expiry test is part of the DELETE itself, so a row a worker
    /// refreshed after it was picked is never deleted.
    fn delete_expired_range(
        &mut self,
        cutoff: Timestamp,
        after_id: i64,
        up_to_id: Option<i64>,
    ) -> Result<u64>;
    /// One batch: deletes at most `n` expired rows after `after_id`, in one transaction.
    /// `last_id` is where the next batch starts, `None` when the run is complete. By default a
    /// batch is the first `n` expired rows in primary-key order, found and deleted by this pair
    /// of statements; a dialect that can do so in one statement overrides it. A dialect may
    /// instead end a batch after the next `n` rows, expired or not (fewer deletions, possibly
    /// none, but never more), where finding that boundary is much cheaper than finding the
    /// `n`-th expired row: see PostgreSQL's.
    fn delete_expired_batch(&mut self, cutoff: Timestamp, after_id: i64, n: u64) -> Result<Batch> {
        let last_id = self.nth_expired_id(cutoff, after_id, n)?;
        let deleted = self.delete_expired_range(cutoff, after_id, last_id)?;
        Ok(Batch { deleted, last_id })
    }
    /// Up to `limit` expired task rows with `after_id < id <= up_to_id`, in id order, with
    /// their ids: what [`Metastore::delete_expired_range`] with the same bounds would delete,
    /// read page by page for `clean --archive`.
    fn expired_rows(
        &mut self,
        cutoff: Timestamp,
        after_id: i64,
        up_to_id: Option<i64>,
        limit: u64,
    ) -> Result<Vec<(i64, TaskEntry)>>;
    /// Deletes one asset row if its asset is still inactive (`clean --archive` deletes the
    /// orphans it archived, one key at a time, instead of any `limit` of them).
    fn delete_orphan_row(&mut self, asset_id: i64, key: &str) -> Result<u64>;
    /// Deletes up to `limit` state rows of inactive assets (see [`orphan_condition`]), all of
    /// them when `None`, in one transaction.
    fn delete_orphans(&mut self, limit: Option<u64>) -> Result<u64>;
}

/// What `stats` reports.
pub(crate) trait Stats {
    /// Task rows per dag (per task with `by_task`): rows, value bytes, expired before `now`,
    /// expiring before `soon`, never expiring, and the oldest and newest `updated_at`.
    fn task_groups(&mut self, now: Timestamp, soon: Timestamp, by_task: bool) -> Result<Vec<TaskGroup>>;
    fn asset_groups(&mut self) -> Result<Vec<AssetGroup>>;
    /// The `limit` largest values of either table, largest first.
    fn largest_values(&mut self, limit: u64) -> Result<Vec<LargeValue>>;
    /// Bytes on disk of each state-store table with its indexes, as the database reports them.
    fn table_sizes(&mut self) -> Result<Vec<(String, u64)>>;
}

/// Every operation the commands need, in the dialect-neutral vocabulary of the domain, in four
/// parts by concern; each dialect implements the four, and is a `Metastore` by that alone.
pub(crate) trait Metastore: Reads + Writes + Cleanup + Stats {}

impl<T: Reads + Writes + Cleanup + Stats + ?Sized> Metastore for T {}

/// The exact check after a `LIKE` prefix match of [`crate::model::EXTERNAL_REF_LIKE`]: a value
/// such as `{"__airflow_state_ref__": 1}` starts the same way but is no reference. Applied by
/// the commands, after paging, so that a page that comes back short still says more may follow.
pub(crate) fn keep_external<T>(rows: Vec<T>, external_only: bool, value: impl Fn(&T) -> &str) -> Vec<T> {
    if external_only {
        rows.into_iter().filter(|row| crate::model::external_ref(value(row)).is_some()).collect()
    } else {
        rows
    }
}

/// The rows of `outer` (an asset_state_store table or alias) whose asset is not active: no
/// `asset_active` row with the same name AND uri, or no asset row at all (possible when foreign
/// keys were off). Plain SQL every dialect reads alike.
pub(crate) fn orphan_condition(outer: &str) -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM asset oa JOIN asset_active oaa ON oaa.name = oa.name AND oaa.uri = oa.uri \
         WHERE oa.id = {outer}.asset_id)"
    )
}

/// The two tables of the state store.
pub(crate) const STATE_TABLES: &[&str] = &["task_state_store", "asset_state_store"];

/// A count read as the database's signed integer; never negative.
pub(crate) fn unsigned(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// How `stats` names a task scope: `dag/run/task`, with `[index]` for a mapped task.
pub(crate) fn task_scope_label(dag_id: &str, run_id: &str, task_id: &str, map_index: i64) -> String {
    let index = if map_index >= 0 { format!("[{map_index}]") } else { String::new() };
    format!("task {dag_id}/{run_id}/{task_id}{index}")
}

pub(crate) fn asset_scope_label(asset_id: i64, name: Option<&str>) -> String {
    name.map_or_else(
        || format!("asset #{asset_id} (deleted)"),
        |name| format!("asset {name} (id {asset_id})"),
    )
}

/// The `limit` largest of both tables' candidates, largest first.
pub(crate) fn largest_first(mut values: Vec<LargeValue>, limit: i64) -> Vec<LargeValue> {
    values.sort_by(|a, b| {
        b.bytes.cmp(&a.bytes).then_with(|| a.scope.cmp(&b.scope)).then_with(|| a.key.cmp(&b.key))
    });
    values.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    values
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
    fn new(found: &'static str, message: String) -> SchemaProblem {
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
pub(crate) const REQUIRED_COLUMNS: &[(&str, &[&str])] = &[
    (
        "task_state_store",
        &[
            "id",
            "dag_run_id",
            "task_id",
            "map_index",
            "key",
            "dag_id",
            "run_id",
            "value",
            "updated_at",
            "expires_at",
        ],
    ),
    (
        "asset_state_store",
        &[
            "asset_id",
            "key",
            "value",
            "updated_at",
            "last_updated_by_kind",
            "last_updated_by_dag_id",
            "last_updated_by_run_id",
            "last_updated_by_task_id",
            "last_updated_by_map_index",
        ],
    ),
    ("dag_run", &["id", "dag_id", "run_id"]),
    ("task_instance", &["dag_id", "run_id", "task_id", "map_index"]),
    ("asset", &["id", "name", "uri"]),
    ("asset_active", &["name", "uri"]),
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
    let task = columns("task_state_store")?;
    let asset = columns("asset_state_store")?;
    if task.is_none() && asset.is_none() {
        for (task_name, asset_name) in PRE_RELEASE_TABLES {
            let found: Vec<&str> = [*task_name, *asset_name]
                .into_iter()
                .filter(|name| matches!(columns(name), Ok(Some(_))))
                .collect();
            if !found.is_empty() {
                return Ok(Err(SchemaProblem::new(
                    "pre-release Airflow 3.3",
                    format!(
                        "{location} has the pre-release Airflow 3.3 table(s) {}, not task_state_store/asset_state_store: \
                         upgrade the metastore with `airflow db migrate` on Airflow 3.3.0 or later",
                        found.join(", ")
                    ),
                )));
            }
        }
        return Ok(Err(SchemaProblem::new(
            "no state-store tables",
            format!(
                "{location} has no task_state_store or asset_state_store table: is it an Airflow 3.3 metastore? \
                 (`airflow db migrate` creates them)"
            ),
        )));
    }
    if let Some(cols) = &task
        && cols.iter().any(|c| c == "region_id")
    {
        return Ok(Err(SchemaProblem::new(
            "Airflow 3.4",
            format!(
                "{location} has the Airflow 3.4 state-store schema (task_state_store.region_id), \
                 which this version of state-store does not support; it supports Airflow 3.3"
            ),
        )));
    }
    for (table, required) in REQUIRED_COLUMNS {
        let found = match *table {
            "task_state_store" => task.clone(),
            "asset_state_store" => asset.clone(),
            other => columns(other)?,
        };
        let Some(found) = found else {
            return Ok(Err(SchemaProblem::new(
                "incomplete Airflow 3.3 schema",
                format!("{location} has no {table} table, which an Airflow 3.3 metastore has"),
            )));
        };
        let missing: Vec<&str> =
            required.iter().copied().filter(|c| !found.iter().any(|f| f.eq_ignore_ascii_case(c))).collect();
        if !missing.is_empty() {
            return Ok(Err(SchemaProblem::new(
                "unrecognised schema",
                format!(
                    "{location}: table {table} lacks column(s) {} that Airflow 3.3 has; the schema is not recognised",
                    missing.join(", ")
                ),
            )));
        }
    }
    Ok(Ok(SchemaVersion::Airflow33))
}

/// Opens the database named by the URL and checks its schema.
pub(crate) fn open(url: &DbUrl, schema: Option<&str>, access: Access) -> Result<Box<dyn Metastore>> {
    match url.dialect {
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => {
            let _ = schema;
            Ok(Box::new(sqlite::SqliteStore::open(url, access)?))
        }
        #[cfg(feature = "postgres")]
        Dialect::Postgres => Ok(Box::new(postgres::PostgresStore::open(url, schema, access)?)),
        #[cfg(feature = "mysql")]
        Dialect::Mysql => {
            let _ = schema;
            Ok(Box::new(mysql::MysqlStore::open(url, access)?))
        }
        #[allow(unreachable_patterns)]
        _ => Err(not_built(url)),
    }
}

/// Where a damaged row lives, for `doctor`'s samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    Task(TaskScope),
    /// An asset row; the name is `None` when the asset row is gone.
    Asset {
        asset_id: i64,
        asset_name: Option<String>,
    },
}

/// One damaged row: where it is, its key, and what is wrong with it in a few words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FoundRow {
    pub place: Place,
    pub key: String,
    pub detail: String,
}

/// The rows one `doctor` check found: how many in all, and the first few of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Finding {
    pub count: u64,
    pub sample: Vec<FoundRow>,
}

impl Finding {
    /// Two tables' findings as one (task rows first), the sample still at most `limit` rows.
    pub(crate) fn and(mut self, other: Finding, limit: u64) -> Finding {
        self.count += other.count;
        self.sample.extend(other.sample);
        self.sample.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        self
    }
}

/// What `doctor` asks of a database beyond the commands' own operations: read-only searches
/// for rows Airflow's schema should not hold, each giving a count and the first `sample` rows
/// in primary-key order. Kept apart from [`Metastore`] so that no other command sees them.
pub(crate) trait Diagnose: Metastore {
    /// Task rows whose `dag_id` or `run_id` differ from those of the dag run their
    /// `dag_run_id` points at.
    fn mismatched_dag_runs(&mut self, sample: u64) -> Result<Finding>;
    /// Task rows whose dag run no longer exists (only possible with foreign keys off).
    fn task_rows_without_dag_run(&mut self, sample: u64) -> Result<Finding>;
    /// Asset rows whose asset no longer exists (only possible with foreign keys off).
    fn asset_rows_without_asset(&mut self, sample: u64) -> Result<Finding>;
    /// Keys of either table longer than `max_chars` characters (not bytes).
    fn long_keys(&mut self, max_chars: u64, sample: u64) -> Result<Finding>;
    /// Values of either table longer than `max_bytes` bytes as stored, measured as `set`
    /// measures a value against `max_value_storage_bytes`.
    fn large_values(&mut self, max_bytes: u64, sample: u64) -> Result<Finding>;
    /// Timestamps stored as text that is not Airflow's `YYYY-MM-DD HH:MM:SS.ffffff`; `None`
    /// where the dialect stores real timestamps and the question does not arise.
    fn malformed_timestamps(&mut self, sample: u64) -> Result<Option<Finding>> {
        let _ = sample;
        Ok(None)
    }
    /// Up to `limit` asset rows after `(asset_id, key)` in primary-key order (from the first
    /// when `None`), so a check can read every value a page at a time.
    fn asset_rows_after(&mut self, after: Option<(i64, &str)>, limit: u64) -> Result<Vec<AssetEntry>>;
}

/// What `doctor` found on opening a database: a recognised schema, with the connection to
/// look further, or the schema problem that every other command would fail with.
pub(crate) enum Diagnosis {
    Recognised(SchemaVersion, Box<dyn Diagnose>),
    Unrecognised(SchemaProblem),
}

/// Opens the database like [`open`], but reports an unrecognised schema instead of failing.
pub(crate) fn diagnose(url: &DbUrl, schema: Option<&str>, access: Access) -> Result<Diagnosis> {
    fn boxed<S: Diagnose + 'static>((store, finding): (S, SchemaFinding)) -> Diagnosis {
        match finding {
            Ok(version) => Diagnosis::Recognised(version, Box::new(store)),
            Err(problem) => Diagnosis::Unrecognised(problem),
        }
    }
    match url.dialect {
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => {
            let _ = schema;
            Ok(boxed(sqlite::SqliteStore::connect(url, access)?))
        }
        #[cfg(feature = "postgres")]
        Dialect::Postgres => Ok(boxed(postgres::PostgresStore::connect(url, schema, access)?)),
        #[cfg(feature = "mysql")]
        Dialect::Mysql => {
            let _ = schema;
            Ok(boxed(mysql::MysqlStore::connect(url, access)?))
        }
        #[allow(unreachable_patterns)]
        _ => Err(not_built(url)),
    }
}

/// Creating and filling a throw-away metastore (`state-store sandbox`). Kept apart from
/// [`Metastore`]: nothing here may ever run against a real Airflow database, so every method
/// but `create` first checks for the sandbox marker table.
pub(crate) trait Sandbox {
    /// Creates the Airflow 3.3.2 tables; refuses when any of them exists already.
    fn create(&mut self) -> Result<()>;
    fn add_dag_run(&mut self, dag_id: &str, run_id: &str) -> Result<i64>;
    /// Adds a task instance to a dag run, as the scheduler creates it (no state yet).
    fn add_task_instance(&mut self, dag_id: &str, run_id: &str, task_id: &str, map_index: i64) -> Result<()>;
    fn add_asset(&mut self, name: &str, uri: &str, active: bool) -> Result<i64>;
}

pub(crate) fn open_sandbox(url: &DbUrl, schema: Option<&str>) -> Result<Box<dyn Sandbox>> {
    match url.dialect {
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => {
            let _ = schema;
            Ok(Box::new(sqlite::SqliteSandbox::open(url)?))
        }
        #[cfg(feature = "postgres")]
        Dialect::Postgres => Ok(Box::new(postgres::PostgresSandbox::open(url, schema)?)),
        #[cfg(feature = "mysql")]
        Dialect::Mysql => {
            let _ = schema;
            Ok(Box::new(mysql::MysqlSandbox::open(url)?))
        }
        #[allow(unreachable_patterns)]
        _ => Err(not_built(url)),
    }
}

/// Each dialect is a Cargo feature (all on by default); a build without one says so.
#[allow(dead_code)]
fn not_built(url: &DbUrl) -> Error {
    Error::Config(format!(
        "this build of state-store has no {} support (Cargo feature \"{}\"); from [database] sql_alchemy_conn {}",
        url.dialect.name(),
        match url.dialect {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
        },
        url.redacted()
    ))
}

#[cfg(test)]
mod tests {
    /// The dialect sources, as they are compiled.
    const SOURCES: &[(&str, &str)] = &[
        ("sqlite.rs", include_str!("sqlite.rs")),
        ("postgres.rs", include_str!("postgres.rs")),
        ("mysql.rs", include_str!("mysql.rs")),
    ];

    /// What SQL text may be built from: fixed fragments of this module and the dialects
    /// (column lists, joins, WHERE clauses whose values are all bound parameters), placeholder
    /// numbers, and `quoted`, the validated and quoted `[database] sql_alchemy_schema`.
    /// Anything else spliced into a statement (a key, a dag id, a name) fails this test.
    const ALLOWED_NAMES: &[&str] = &[
        "only_if",
        "ACTIVE_JOIN",
        "TASK_COLUMNS",
        "ASSET_COLUMNS",
        "TASK_SCOPE_WHERE",
        "sql",
        "where_sql",
        "task",
        "group",
        "order",
        "limit",
        "offset",
        "condition",
        "marker",
        "table",
        "quoted",
        // doctor's fixed fragments: length expressions (literals at every `over_bound` call)
        // and each check's literal `FROM … WHERE …`
        "measure",
        "from",
        "task_where",
        "asset_where",
    ];
    const ALLOWED_ARGS: &[&str] = &[
        "orphan_condition(\"s\")",
        "orphan_condition(\"asset_state_store\")",
        "schema::SANDBOX_MARKER_TABLE",
        "args.len()",
    ];
    const SQL_WORDS: &[&str] =
        &["SELECT ", "INSERT ", "DELETE ", "UPDATE ", "CREATE ", "DROP ", "ALTER ", "SET "];

    /// The text of each `format!(…)` call outside the file's own tests.
    fn format_calls(source: &str) -> Vec<&str> {
        let code = source.split("#[cfg(test)]").next().unwrap_or(source);
        let mut calls = Vec::new();
        let mut rest = code;
        while let Some(at) = rest.find("format!(") {
            let body = &rest[at + "format!(".len()..];
            let mut depth = 1;
            let mut end = body.len();
            for (i, c) in body.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    end = i;
                    break;
                }
            }
            calls.push(&body[..end]);
            rest = &body[end..];
        }
        calls
    }

    /// `{name}` and `{name:…}` placeholders, and the positional arguments after the string.
    fn interpolations(call: &str) -> (Vec<String>, Vec<String>) {
        let mut names = Vec::new();
        let mut positional = 0;
        let mut chars = call.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '{' {
                if chars.peek() == Some(&'{') {
                    chars.next();
                    continue;
                }
                let inner: String = chars.by_ref().take_while(|c| *c != '}').collect();
                let name = inner.split(':').next().unwrap_or("").to_string();
                if name.is_empty() {
                    positional += 1;
                } else {
                    names.push(name);
                }
            }
        }
        let tail = &call[literal_end(call)..];
        let args: Vec<String> = tail
            .split(',')
            .map(|a| a.split_whitespace().collect::<String>())
            .filter(|a| !a.is_empty())
            .collect();
        assert!(args.len() >= positional.min(1), "arguments of {call}");
        (names, args)
    }

    /// Where the format string literal (`"…"` or `r#"…"#`) at the start of `call` ends.
    fn literal_end(call: &str) -> usize {
        let start = call.len() - call.trim_start().len();
        let text = &call[start..];
        if let Some(raw) = text.strip_prefix("r#\"") {
            return start + 3 + raw.find("\"#").map_or(raw.len(), |i| i + 2);
        }
        let mut escaped = false;
        for (i, c) in text.char_indices().skip(1) {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => return start + i + 1,
                _ => escaped = false,
            }
        }
        call.len()
    }

    #[test]
    fn statements_splice_no_user_value() {
        let mut checked = 0;
        for (file, source) in SOURCES {
            for call in format_calls(source) {
                if !SQL_WORDS.iter().any(|w| call.contains(w)) {
                    continue;
                }
                checked += 1;
                let (names, args) = interpolations(call);
                for name in &names {
                    assert!(
                        ALLOWED_NAMES.contains(&name.as_str()),
                        "{file}: `{{{name}}}` spliced into SQL: {call}"
                    );
                    if name == "quoted" {
                        assert_eq!(*file, "postgres.rs", "only PostgreSQL's schema name is an identifier");
                    }
                }
                for arg in &args {
                    assert!(ALLOWED_ARGS.contains(&arg.as_str()), "{file}: `{arg}` spliced into SQL: {call}");
                }
            }
        }
        assert!(checked > 40, "the scan found the statements ({checked})");
        // The check itself catches a spliced value.
        let (names, args) = interpolations("\"DELETE FROM t WHERE k = '{key}' AND d = '{}'\", scope.dag_id");
        assert_eq!((names, args), (vec!["key".to_string()], vec!["scope.dag_id".to_string()]));
    }
}
