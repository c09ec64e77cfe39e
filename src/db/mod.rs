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
use crate::model::{Asset, AssetEntry, AssetSelector, Page, TaskEntry, TaskFilter, TaskScope};
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

/// How the connection is used: read-only commands cannot change anything even by mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    ReadOnly,
    ReadWrite,
}

/// Every operation the commands need, in the dialect-neutral vocabulary of the domain.
pub(crate) trait Metastore {
    fn dag_run_id(&mut self, dag_id: &str, run_id: &str) -> Result<Option<i64>>;
    fn find_asset(&mut self, selector: &AssetSelector) -> Result<Option<Asset>>;
    /// Whether an asset with this name or uri exists at all, active or not (for messages).
    fn asset_exists_inactive(&mut self, selector: &AssetSelector) -> Result<bool>;

    fn task_entry(&mut self, scope: &TaskScope, key: &str) -> Result<Option<TaskEntry>>;
    fn asset_entry(&mut self, asset: &Asset, key: &str) -> Result<Option<AssetEntry>>;

    fn upsert_task(&mut self, write: &TaskWrite<'_>) -> Result<()>;
    fn upsert_asset(&mut self, write: &AssetWrite<'_>) -> Result<()>;

    fn delete_task(&mut self, scope: &TaskScope, key: &str) -> Result<u64>;
    fn delete_asset(&mut self, asset_id: i64, key: &str) -> Result<u64>;

    fn count_task_scope(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64>;
    fn clear_task(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64>;
    fn count_asset_scope(&mut self, asset_id: i64) -> Result<u64>;
    fn clear_asset(&mut self, asset_id: i64) -> Result<u64>;

    fn list_task(&mut self, filter: &TaskFilter, page: Page) -> Result<Vec<TaskEntry>>;
    fn list_asset(&mut self, asset_id: Option<i64>, page: Page) -> Result<Vec<AssetEntry>>;

    /// Counts for a dry run: expired task rows per dag, orphaned asset rows per asset.
    fn expired_by_dag(&mut self, cutoff: Timestamp) -> Result<Vec<DagCount>>;
    fn orphans_by_asset(&mut self) -> Result<Vec<AssetCount>>;
    fn orphan_sample(&mut self, limit: u64) -> Result<Vec<AssetEntry>>;

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
    /// Deletes the state rows of inactive assets (no `asset_active` row with the same name
    /// and uri), including rows whose asset row is gone altogether.
    fn delete_orphans(&mut self) -> Result<u64>;
}

/// Which Airflow schema the database holds, found by looking at its tables and columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SchemaVersion {
    /// Airflow 3.3.x: the tables and columns this tool is written for.
    Airflow33,
}

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
    ("asset", &["id", "name", "uri"]),
    ("asset_active", &["name", "uri"]),
];

/// Table names that pre-release 3.3 builds used under the same Alembic revision.
const PRE_RELEASE_TABLES: &[(&str, &str)] = &[("task_state", "asset_state"), ("task_store", "asset_store")];

/// Decides what a database holds from a column lister (`None` = table missing). Shared by all
/// dialects so every one of them refuses the same schemas with the same words.
pub(crate) fn recognise_schema(
    location: &str,
    mut columns: impl FnMut(&str) -> Result<Option<Vec<String>>>,
) -> Result<SchemaVersion> {
    let task = columns("task_state_store")?;
    let asset = columns("asset_state_store")?;
    if task.is_none() && asset.is_none() {
        for (task_name, asset_name) in PRE_RELEASE_TABLES {
            let found: Vec<&str> = [*task_name, *asset_name]
                .into_iter()
                .filter(|name| matches!(columns(name), Ok(Some(_))))
                .collect();
            if !found.is_empty() {
                return Err(Error::Schema(format!(
                    "{location} has the pre-release Airflow 3.3 table(s) {}, not task_state_store/asset_state_store: \
                     upgrade the metastore with `airflow db migrate` on Airflow 3.3.0 or later",
                    found.join(", ")
                )));
            }
        }
        return Err(Error::Schema(format!(
            "{location} has no task_state_store or asset_state_store table: is it an Airflow 3.3 metastore? \
             (`airflow db migrate` creates them)"
        )));
    }
    if let Some(cols) = &task {
        if cols.iter().any(|c| c == "region_id") {
            return Err(Error::Schema(format!(
                "{location} has the Airflow 3.4 state-store schema (task_state_store.region_id), \
                 which this version of state-store does not support; it supports Airflow 3.3"
            )));
        }
    }
    for (table, required) in REQUIRED_COLUMNS {
        let found = match *table {
            "task_state_store" => task.clone(),
            "asset_state_store" => asset.clone(),
            other => columns(other)?,
        };
        let Some(found) = found else {
            return Err(Error::Schema(format!(
                "{location} has no {table} table, which an Airflow 3.3 metastore has"
            )));
        };
        let missing: Vec<&str> =
            required.iter().copied().filter(|c| !found.iter().any(|f| f.eq_ignore_ascii_case(c))).collect();
        if !missing.is_empty() {
            return Err(Error::Schema(format!(
                "{location}: table {table} lacks column(s) {} that Airflow 3.3 has; the schema is not recognised",
                missing.join(", ")
            )));
        }
    }
    Ok(SchemaVersion::Airflow33)
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

/// Creating and filling a throw-away metastore (`state-store sandbox`). Kept apart from
/// [`Metastore`]: nothing here may ever run against a real Airflow database, so every method
/// but `create` first checks for the sandbox marker table.
pub(crate) trait Sandbox {
    /// Creates the Airflow 3.3.2 tables; refuses when any of them exists already.
    fn create(&mut self) -> Result<()>;
    fn add_dag_run(&mut self, dag_id: &str, run_id: &str) -> Result<i64>;
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
