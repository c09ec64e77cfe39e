//! Finding state rows, reading them and writing them: what `get`, `set`, `delete`, `clear`,
//! `list`, `export` and `import` do to the tables, written once for every database.
//!
//! Text sort keys sort by their bytes (`BYTES(…)`), the order SQLite gives, so `list` pages
//! and exports come out in the same order on every database. A lookup by text that a column
//! cannot hold (MySQL's `utf8mb3` columns and emoji) matches nothing and is answered without
//! a query; a write of such text is refused before anything is written.

use std::collections::HashMap;
use std::ops::ControlFlow;

use super::Store;
use super::dialect::{OnConflict, Upsert, all, count, each, first};
use super::query::{DecodeError, Decoded, Fields, Param, Query};
use crate::error::Result;
use crate::model::{
    Asset, AssetEntry, AssetFilter, AssetSelector, EXTERNAL_REF_LIKE, Page, StoredTime, TaskEntry,
    TaskFilter, TaskScope,
};
use crate::text::quote;
use crate::time::Timestamp;

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

pub(super) const TASK_COLUMNS: &str =
    r#"dag_id, run_id, task_id, map_index, "key", value, updated_at, expires_at"#;

/// An asset row with its asset's name and uri (`s` joined with `a`).
pub(super) const ASSET_ROWS: &str = r#"s.asset_id, a.name, a.uri, s."key", s.value, s.updated_at,
    s.last_updated_by_kind, s.last_updated_by_dag_id, s.last_updated_by_run_id, s.last_updated_by_task_id,
    s.last_updated_by_map_index FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id"#;

/// An asset is active when `asset_active` has a row with the same name AND uri.
/// The order `list` shows task rows in, and `clear --archive` archives them in.
const TASK_LIST_ORDER: &str =
    r#" ORDER BY BYTES(dag_id), BYTES(run_id), BYTES(task_id), map_index, BYTES("key")"#;
const ACTIVE_ASSET: &str =
    "SELECT a.id, a.name, a.uri, 1 FROM asset a JOIN asset_active aa ON aa.name = a.name AND aa.uri = a.uri";

pub(super) const TASK_UPSERT: Upsert = Upsert {
    table: "task_state_store",
    columns: r#"dag_run_id, task_id, map_index, "key", dag_id, run_id, value, updated_at, expires_at"#,
    key: r#"dag_run_id, task_id, map_index, "key""#,
    update: "value, expires_at, updated_at",
};

pub(super) const ASSET_UPSERT: Upsert = Upsert {
    table: "asset_state_store",
    columns: "asset_id, \"key\", value, updated_at, last_updated_by_kind, last_updated_by_dag_id, \
        last_updated_by_run_id, last_updated_by_task_id, last_updated_by_map_index",
    key: r#"asset_id, "key""#,
    update: "value, last_updated_by_kind, last_updated_by_dag_id, last_updated_by_run_id, \
        last_updated_by_task_id, last_updated_by_map_index, updated_at",
};

/// The dag_id, run_id, task_id and map_index of a task row, from the next four columns. A
/// map_index that is not an integer (SQLite stores any value in any column) is an error that
/// names the row.
pub(super) fn task_scope(f: &mut Fields) -> Decoded<TaskScope> {
    let (dag_id, run_id, task_id) = (f.text(), f.text(), f.text());
    match f.int_or_text() {
        Ok(map_index) => Ok(TaskScope { dag_id, run_id, task_id, map_index }),
        Err(found) => Err(damaged_map_index(&dag_id, &run_id, &task_id, None, &found)),
    }
}

/// The error of a task row whose map_index is not an integer: which row, what it holds, and
/// where to look further.
fn damaged_map_index(
    dag_id: &str,
    run_id: &str,
    task_id: &str,
    key: Option<&str>,
    found: &str,
) -> DecodeError {
    let key = key.map(|key| format!(" key {}", quote(key))).unwrap_or_default();
    DecodeError::new(format!(
        "the task row dag_id={} run_id={} task_id={}{key} has map_index {found}, not an integer; \
         `state-store doctor` lists such rows",
        quote(dag_id),
        quote(run_id),
        quote(task_id),
        found = quote(found)
    ))
}

/// A task row in [`TASK_COLUMNS`] order.
pub(super) fn task_entry(f: &mut Fields) -> Decoded<TaskEntry> {
    let (dag_id, run_id, task_id) = (f.text(), f.text(), f.text());
    let map_index = f.int_or_text();
    let key = f.text();
    let map_index =
        map_index.map_err(|found| damaged_map_index(&dag_id, &run_id, &task_id, Some(&key), &found))?;
    Ok(TaskEntry {
        scope: TaskScope { dag_id, run_id, task_id, map_index },
        key,
        value: f.text(),
        updated_at: f.required_time(),
        expires_at: f.time(),
    })
}

/// A task row and then its id.
pub(super) fn task_entry_and_id(f: &mut Fields) -> Decoded<(i64, TaskEntry)> {
    let entry = task_entry(f)?;
    Ok((f.int()?, entry))
}

/// An asset row in [`ASSET_ROWS`] order.
pub(super) fn asset_entry(f: &mut Fields) -> Decoded<AssetEntry> {
    Ok(AssetEntry {
        asset_id: f.int()?,
        asset_name: f.opt_text(),
        asset_uri: f.opt_text(),
        key: f.text(),
        value: f.text(),
        updated_at: f.required_time(),
        last_updated_by_kind: f.opt_text(),
        last_updated_by_dag_id: f.opt_text(),
        last_updated_by_run_id: f.opt_text(),
        last_updated_by_task_id: f.opt_text(),
        last_updated_by_map_index: f.opt_int()?,
    })
}

fn asset(f: &mut Fields) -> Decoded<Asset> {
    Ok(Asset { id: f.int()?, name: f.text(), uri: f.text(), active: f.bool()? })
}

/// Rows per statement of a delete of rows read before ([`Store::lock_task_rows`]): their ids
/// or keys are bound one parameter each, below every database's bound on parameters (SQLite's
/// 32,766, PostgreSQL's and MySQL's 65,535). Measured at 200,000 rows, 100,016 expired, with
/// `clean --archive` at batch 10,000: 500 a page took 2.30 s on PostgreSQL and 4.77 s on
/// MariaDB (each statement's own cost), 5,000 a page 1.24 s and 2.24 s.
pub(crate) const EXACT_PAGE: usize = 5000;

/// `DELETE` of these keys of one asset, through the primary key `(asset_id, key)`.
pub(super) fn delete_asset_keys<'a>(asset_id: i64, keys: &[&'a str]) -> Query<'a> {
    let delete = Query::new("DELETE FROM asset_state_store WHERE asset_id = ?").bind(asset_id);
    in_list(delete.push(r#" AND "key" IN"#), keys.iter().copied())
}

/// `DELETE` of the task rows with ids from `first` to `last` that are expired at `cutoff`.
fn delete_expired_ids(first: i64, last: i64, cutoff: Timestamp) -> Query<'static> {
    let delete = Query::new("DELETE FROM task_state_store WHERE id >= ?").bind(first);
    delete.and(" AND id <= ?", last).and(" AND expires_at < ?", cutoff)
}

/// ` (?, ?, …)`, one `?` for each of `values` (at least one).
pub(super) fn in_list<'a, P: Into<Param<'a>>>(
    mut query: Query<'a>,
    values: impl IntoIterator<Item = P>,
) -> Query<'a> {
    let mut glue = " (?";
    for value in values {
        query = query.and(std::mem::replace(&mut glue, ", ?"), value);
    }
    query.push(")")
}

/// A `LIMIT … OFFSET …` of a page.
fn page<'a>(query: Query<'a>, page: Page) -> Query<'a> {
    query.and(" LIMIT ?", Param::Limit(page.limit)).and(" OFFSET ?", page.offset)
}

/// A task row's values in [`TASK_UPSERT`]'s column order.
pub(super) fn task_values<'a>(w: &TaskWrite<'a>) -> [Param<'a>; 9] {
    [
        w.dag_run_id.into(),
        w.scope.task_id.as_str().into(),
        w.scope.map_index.into(),
        w.key.into(),
        w.scope.dag_id.as_str().into(),
        w.scope.run_id.as_str().into(),
        w.value.into(),
        w.updated_at.into(),
        w.expires_at.into(),
    ]
}

/// An asset row of `import` in [`ASSET_UPSERT`]'s column order, its writer as exported.
pub(super) fn asset_restore_values<'a>(w: &AssetRestore<'a>) -> [Param<'a>; 9] {
    let writer = w.writer;
    [
        w.asset_id.into(),
        w.key.into(),
        w.value.into(),
        w.updated_at.into(),
        writer.kind.as_deref().into(),
        writer.dag_id.as_deref().into(),
        writer.run_id.as_deref().into(),
        writer.task_id.as_deref().into(),
        writer.map_index.into(),
    ]
}

impl Store {
    /// `WHERE dag_id = ? AND run_id = ? AND task_id = ?`, and the map index unless all are meant.
    fn scope_where<'a>(
        query: Query<'a>,
        table: &'static str,
        scope: &'a TaskScope,
        all_map_indices: bool,
    ) -> Query<'a> {
        let query = query
            .matching(" WHERE dag_id = ?", (table, "dag_id"), &scope.dag_id)
            .matching(" AND run_id = ?", (table, "run_id"), &scope.run_id)
            .matching(" AND task_id = ?", (table, "task_id"), &scope.task_id);
        if all_map_indices { query } else { query.and(" AND map_index = ?", scope.map_index) }
    }

    /// The WHERE clause of `list`'s task filters (and of a primary-key page).
    fn task_filter<'a>(mut query: Query<'a>, filter: &'a TaskFilter, after_id: Option<i64>) -> Query<'a> {
        let mut glue = " WHERE ";
        let mut next = || std::mem::replace(&mut glue, " AND ");
        for (sql, column, value) in [
            ("dag_id = ?", "dag_id", &filter.dag_id),
            ("run_id = ?", "run_id", &filter.run_id),
            ("task_id = ?", "task_id", &filter.task_id),
        ] {
            if let Some(text) = value {
                query = query.push(next()).exactly(sql, ("task_state_store", column), text);
            }
        }
        if let Some(map_index) = filter.map_index {
            query = query.push(next()).and("map_index = ?", map_index);
        }
        if let Some(cutoff) = filter.expired_before {
            query = query.push(next()).and("expires_at < ?", cutoff);
        }
        if filter.external_only {
            query = query.push(next()).and("value LIKE ? ESCAPE '!'", EXTERNAL_REF_LIKE);
        }
        if let Some(after_id) = after_id {
            // At the start (`i64::MIN`) the row with id -2^63 is read too.
            query = query.push(next()).and(if after_id == i64::MIN { "id >= ?" } else { "id > ?" }, after_id);
        }
        query
    }

    pub(crate) fn dag_run_id(&mut self, dag_id: &str, run_id: &str) -> Result<Option<i64>> {
        let query = Query::new("SELECT id FROM dag_run")
            .matching(" WHERE dag_id = ?", ("dag_run", "dag_id"), dag_id)
            .matching(" AND run_id = ?", ("dag_run", "run_id"), run_id);
        first(&mut *self.conn, "cannot look up the dag run", &query, Fields::int)
    }

    /// Whether `task_instance` has the task instance of `scope`, or any instance of its task
    /// with `any_map_index`: Airflow's API refuses state writes to a task instance that does
    /// not exist, while the database's own keys check only the dag run.
    pub(crate) fn task_instance_exists(&mut self, scope: &TaskScope, any_map_index: bool) -> Result<bool> {
        let query = Self::scope_where(
            Query::new("SELECT 1 FROM task_instance"),
            "task_instance",
            scope,
            any_map_index,
        );
        let found =
            first(&mut *self.conn, "cannot look up the task instance", &query.push(" LIMIT 1"), Fields::int)?;
        Ok(found.is_some())
    }

    /// What a dag run holds, for the message when a task instance is not found.
    pub(crate) fn task_instances_hint(
        &mut self,
        dag_id: &str,
        run_id: &str,
        task_id: &str,
        limit: u64,
    ) -> Result<TaskInstances> {
        let what = "cannot look up the task instances";
        let run =
            |select: &'static str| {
                Query::new(select)
                    .matching(" WHERE dag_id = ?", ("task_instance", "dag_id"), dag_id)
                    .matching(" AND run_id = ?", ("task_instance", "run_id"), run_id)
            };
        let ids = run("SELECT DISTINCT BYTES(task_id) FROM task_instance");
        let ids = ids.and(" ORDER BY 1 LIMIT ?", Param::Limit(Some(limit)));
        let task_ids = all(&mut *self.conn, what, &ids, |f| Ok(f.text()))?;
        let task_count =
            count(&mut *self.conn, what, &run("SELECT count(DISTINCT task_id) FROM task_instance"))?;
        let task = run("SELECT count(*), min(map_index), max(map_index) FROM task_instance");
        let task = task.matching(" AND task_id = ?", ("task_instance", "task_id"), task_id);
        let map_indexes =
            first(&mut *self.conn, what, &task, |f| Ok((f.count()?, f.opt_int()?, f.opt_int()?)))?
                .and_then(|(n, low, high)| Some((n, low?, high?)).filter(|_| n > 0));
        Ok(TaskInstances { task_ids, task_count, map_indexes })
    }

    pub(crate) fn find_asset(&mut self, selector: &AssetSelector) -> Result<Option<Asset>> {
        let query = match selector {
            AssetSelector::Id(id) => Query::new(
                "SELECT a.id, a.name, a.uri, EXISTS (SELECT 1 FROM asset_active aa \
                 WHERE aa.name = a.name AND aa.uri = a.uri) FROM asset a WHERE a.id = ?",
            )
            .bind(*id),
            AssetSelector::Name(name) => {
                Query::new(ACTIVE_ASSET).matching(" WHERE a.name = ?", ("asset", "name"), name)
            }
            AssetSelector::Uri(uri) => {
                Query::new(ACTIVE_ASSET).matching(" WHERE a.uri = ?", ("asset", "uri"), uri)
            }
        };
        first(&mut *self.conn, "cannot look up the asset", &query, asset)
    }

    /// The asset with exactly this name and uri, active or not (Airflow keeps the pair
    /// unique), for `import`: ids differ from one database to another, name and uri do not.
    pub(crate) fn asset_id_by_name_uri(&mut self, name: &str, uri: &str) -> Result<Option<i64>> {
        let query = Query::new("SELECT id FROM asset")
            .matching(" WHERE name = ?", ("asset", "name"), name)
            .matching(" AND uri = ? ORDER BY id DESC LIMIT 1", ("asset", "uri"), uri);
        first(&mut *self.conn, "cannot look up the asset", &query, Fields::int)
    }

    /// Whether an asset with this name or uri exists at all, active or not (for messages).
    pub(crate) fn asset_exists_inactive(&mut self, selector: &AssetSelector) -> Result<bool> {
        let query = Query::new("SELECT EXISTS (SELECT 1 FROM asset");
        let query = match selector {
            AssetSelector::Name(name) => query.matching(" WHERE name = ?)", ("asset", "name"), name),
            AssetSelector::Uri(uri) => query.matching(" WHERE uri = ?)", ("asset", "uri"), uri),
            AssetSelector::Id(_) => return Ok(false),
        };
        Ok(first(&mut *self.conn, "cannot look up the asset", &query, Fields::bool)?.unwrap_or(false))
    }

    /// Up to `limit` active assets in id order, for the message when a name or uri matches
    /// none: the close ones are named.
    pub(crate) fn active_assets(&mut self, limit: u64) -> Result<Vec<Asset>> {
        let query = Query::new(ACTIVE_ASSET).and(" ORDER BY a.id LIMIT ?", Param::Limit(Some(limit)));
        all(&mut *self.conn, "cannot read the assets", &query, asset)
    }

    pub(crate) fn task_entry(&mut self, scope: &TaskScope, key: &str) -> Result<Option<TaskEntry>> {
        let query = Query::new("SELECT ").push(TASK_COLUMNS).push(" FROM task_state_store");
        let query = Self::scope_where(query, "task_state_store", scope, false);
        let query = query.matching(r#" AND "key" = ?"#, ("task_state_store", "key"), key);
        first(&mut *self.conn, "cannot read task_state_store", &query, task_entry)
    }

    pub(crate) fn asset_entry(&mut self, asset: &Asset, key: &str) -> Result<Option<AssetEntry>> {
        let query = Query::new("SELECT ").push(ASSET_ROWS).and(" WHERE s.asset_id = ?", asset.id);
        let query = query.matching(r#" AND s."key" = ?"#, ("asset_state_store", "key"), key);
        first(&mut *self.conn, "cannot read asset_state_store", &query, asset_entry)
    }

    pub(crate) fn list_task(&mut self, filter: &TaskFilter, window: Page) -> Result<Vec<TaskEntry>> {
        all(&mut *self.conn, "cannot read task_state_store", &Self::task_list(filter, window), task_entry)
    }

    /// [`Self::list_task`]'s rows handed to `each` one at a time as they are read, none held.
    pub(crate) fn each_task(
        &mut self,
        filter: &TaskFilter,
        window: Page,
        each_row: impl FnMut(TaskEntry) -> Result<ControlFlow<()>>,
    ) -> Result<()> {
        let query = Self::task_list(filter, window);
        each(&mut *self.conn, "cannot read task_state_store", &query, task_entry, each_row)
    }

    fn task_list<'a>(filter: &'a TaskFilter, window: Page) -> Query<'a> {
        let select = Query::new("SELECT ").push(TASK_COLUMNS).push(" FROM task_state_store");
        let query = Self::task_filter(select, filter, None).push(TASK_LIST_ORDER);
        page(query, window)
    }

    pub(crate) fn list_asset(&mut self, filter: &AssetFilter, window: Page) -> Result<Vec<AssetEntry>> {
        all(&mut *self.conn, "cannot read asset_state_store", &Self::asset_list(filter, window), asset_entry)
    }

    /// [`Self::list_asset`]'s rows handed to `each` one at a time as they are read, none held.
    pub(crate) fn each_asset(
        &mut self,
        filter: &AssetFilter,
        window: Page,
        each_row: impl FnMut(AssetEntry) -> Result<ControlFlow<()>>,
    ) -> Result<()> {
        let query = Self::asset_list(filter, window);
        each(&mut *self.conn, "cannot read asset_state_store", &query, asset_entry, each_row)
    }

    fn asset_list(filter: &AssetFilter, window: Page) -> Query<'static> {
        let mut query = Query::new("SELECT ").push(ASSET_ROWS).push(" WHERE 1 = 1");
        if let Some(asset_id) = filter.asset_id {
            query = query.and(" AND s.asset_id = ?", asset_id);
        }
        if filter.external_only {
            query = query.and(" AND s.value LIKE ? ESCAPE '!'", EXTERNAL_REF_LIKE);
        }
        page(query.push(r#" ORDER BY s.asset_id, BYTES(s."key")"#), window)
    }

    /// Up to `limit` task rows matching `filter` with `id > after_id`, in primary-key order,
    /// with their ids: `export` pages through a large table along the primary key, where an
    /// `OFFSET` in list order would sort and skip ever more rows per page.
    pub(crate) fn task_rows_after(
        &mut self,
        filter: &TaskFilter,
        after_id: i64,
        limit: u64,
    ) -> Result<Vec<(i64, TaskEntry)>> {
        let select = Query::new("SELECT ").push(TASK_COLUMNS).push(", id FROM task_state_store");
        let query = Self::task_filter(select, filter, Some(after_id));
        let query = query.and(" ORDER BY id LIMIT ?", Param::Limit(Some(limit)));
        all(&mut *self.conn, "cannot read task_state_store", &query, task_entry_and_id)
    }

    pub(crate) fn upsert_task(&mut self, w: &TaskWrite<'_>) -> Result<()> {
        self.conn.check_task_row(w)?;
        let query = TASK_UPSERT.query(self.conn.dialect(), &task_values(w), OnConflict::Replace);
        self.conn.run("cannot write task_state_store", &query).map(drop)
    }

    pub(crate) fn upsert_asset(&mut self, w: &AssetWrite<'_>) -> Result<()> {
        self.conn.check_asset_row(w.key, w.value, w.updated_at, None)?;
        // An `api` write records no task, so the four writer columns are reset to NULL.
        let none = Param::Text(None);
        let values = [w.asset_id.into(), w.key.into(), w.value.into(), w.updated_at.into(), "api".into()];
        let values = [&values[..], &[none, none, none, Param::Int(None)]].concat();
        let query = ASSET_UPSERT.query(self.conn.dialect(), &values, OnConflict::Replace);
        self.conn.run("cannot write asset_state_store", &query).map(drop)
    }

    /// `set --keep-expiry`, Airflow's PATCH: one statement that changes the value of an
    /// existing key and stamps `updated_at`, leaving `expires_at` as it is, and never inserts.
    /// The count of changed rows: 0 when the key does not exist (on MySQL also when the row
    /// already held this value and this `updated_at`, as MySQL counts changed rows).
    pub(crate) fn update_task_value(&mut self, w: &TaskWrite<'_>) -> Result<u64> {
        self.conn.check_task_row(w)?;
        let update = Query::new("UPDATE task_state_store SET value = ?").bind(w.value);
        let update = update.and(", updated_at = ?", w.updated_at);
        let query = Self::scope_where(update, "task_state_store", w.scope, false);
        let query = query.matching(r#" AND "key" = ?"#, ("task_state_store", "key"), w.key);
        self.conn.run("cannot write task_state_store", &query)
    }

    /// The asset side of [`Store::update_task_value`]: an `api` write, as `set` writes it
    /// (the writer columns reset), of a key that must exist.
    pub(crate) fn update_asset_value(&mut self, w: &AssetWrite<'_>) -> Result<u64> {
        self.conn.check_asset_row(w.key, w.value, w.updated_at, None)?;
        let update = Query::new("UPDATE asset_state_store SET value = ?").bind(w.value);
        let update = update.and(", updated_at = ?", w.updated_at).push(
            ", last_updated_by_kind = 'api', last_updated_by_dag_id = NULL, last_updated_by_run_id = NULL, \
             last_updated_by_task_id = NULL, last_updated_by_map_index = NULL",
        );
        let query = update.and(" WHERE asset_id = ?", w.asset_id);
        let query = query.matching(r#" AND "key" = ?"#, ("asset_state_store", "key"), w.key);
        self.conn.run("cannot write asset_state_store", &query)
    }

    /// An explicit transaction around several statements (one batch of an import); without
    /// it every statement commits on its own.
    pub(crate) fn begin(&mut self) -> Result<()> {
        let begin = Query::new(self.conn.dialect().begin());
        self.conn.run("cannot begin a transaction", &begin).map(drop)
    }

    pub(crate) fn commit(&mut self) -> Result<()> {
        self.conn.run("cannot commit", &Query::new("COMMIT")).map(drop)
    }

    pub(crate) fn rollback(&mut self) -> Result<()> {
        self.conn.run("cannot roll back", &Query::new("ROLLBACK")).map(drop)
    }

    /// `work` in one transaction: committed when it succeeds, rolled back when it fails (the
    /// first error is the one reported).
    pub(crate) fn in_transaction<T>(&mut self, work: impl FnOnce(&mut Store) -> Result<T>) -> Result<T> {
        self.begin()?;
        let done = work(self);
        if done.is_ok() {
            self.commit()?;
        } else {
            let _ = self.rollback();
        }
        done
    }

    pub(crate) fn delete_task(&mut self, scope: &TaskScope, key: &str) -> Result<u64> {
        let query =
            Self::scope_where(Query::new("DELETE FROM task_state_store"), "task_state_store", scope, false);
        let query = query.matching(r#" AND "key" = ?"#, ("task_state_store", "key"), key);
        self.conn.run("cannot delete from task_state_store", &query)
    }

    pub(crate) fn delete_asset(&mut self, asset_id: i64, key: &str) -> Result<u64> {
        let query = Query::new("DELETE FROM asset_state_store WHERE asset_id = ?").bind(asset_id);
        let query = query.matching(r#" AND "key" = ?"#, ("asset_state_store", "key"), key);
        self.conn.run("cannot delete from asset_state_store", &query)
    }

    /// Every row of a task instance (of each instance of the task with `all_map_indices`),
    /// with its id, handed to `each` one at a time in list order: what `clear --archive`
    /// archives, and then deletes by id.
    pub(crate) fn each_task_in_scope(
        &mut self,
        scope: &TaskScope,
        all_map_indices: bool,
        each_row: impl FnMut((i64, TaskEntry)) -> Result<ControlFlow<()>>,
    ) -> Result<()> {
        let select = Query::new("SELECT ").push(TASK_COLUMNS).push(", id FROM task_state_store");
        let query =
            Self::scope_where(select, "task_state_store", scope, all_map_indices).push(TASK_LIST_ORDER);
        each(&mut *self.conn, "cannot read task_state_store", &query, task_entry_and_id, each_row)
    }

    /// Of the task rows read before (at most [`EXACT_PAGE`]: their ids and the `updated_at`
    /// each had), those still there, locked until the transaction ends ([`Store::begin`]),
    /// each with whether it is unchanged since: the same `updated_at`, which every write
    /// stamps, and with `expired_before`, still expired then. A row deleted meanwhile is not in
    /// the answer. One statement, through the primary key.
    pub(crate) fn lock_task_rows(
        &mut self,
        read: &[(i64, StoredTime)],
        expired_before: Option<Timestamp>,
    ) -> Result<Vec<(i64, bool)>> {
        if read.is_empty() {
            return Ok(Vec::new());
        }
        let select = match expired_before {
            Some(cutoff) => {
                Query::new("SELECT id, updated_at, CASE WHEN expires_at < ? THEN 1 ELSE 0 END").bind(cutoff)
            }
            None => Query::new("SELECT id, updated_at, 1"),
        };
        let query =
            in_list(select.push(" FROM task_state_store WHERE id IN"), read.iter().map(|(id, _)| *id));
        let query = query.push(self.conn.dialect().lock_rows());
        let found = all(&mut *self.conn, "cannot read task_state_store", &query, |f| {
            Ok((f.int()?, f.required_time(), f.int()? == 1))
        })?;
        let read: HashMap<i64, &StoredTime> = read.iter().map(|(id, at)| (*id, at)).collect();
        Ok(found
            .into_iter()
            .map(|(id, at, expired)| (id, expired && read.get(&id).is_some_and(|was| **was == at)))
            .collect())
    }

    /// Begins a [`Connection::snapshot_begin`] transaction where the database has one: `false`
    /// (and nothing begun) elsewhere.
    pub(crate) fn begin_snapshot(&mut self) -> Result<bool> {
        let Some(begin) = self.conn.snapshot_begin() else { return Ok(false) };
        self.conn.run("cannot begin a transaction", &Query::new(begin)).map(|_| true)
    }

    /// Whether `error` is a statement of a [`Store::begin_snapshot`] transaction meeting a row
    /// changed or deleted since the snapshot.
    pub(crate) fn conflicted(&self, error: &anyhow::Error) -> bool {
        error.chain().any(|cause| self.conn.conflicted(cause))
    }

    /// Deletes the task rows with ids from `first` to `last` still expired at `cutoff`: in a
    /// [`Store::begin_snapshot`] transaction that read them, exactly the rows it read.
    pub(crate) fn delete_expired_ids(&mut self, first: i64, last: i64, cutoff: Timestamp) -> Result<u64> {
        self.conn.run("cannot delete from task_state_store", &delete_expired_ids(first, last, cutoff))
    }

    /// [`Store::lock_task_rows`] and the DELETE of the unchanged rows in one statement, where
    /// the database can return what a DELETE deleted ([`Connection::deletes_returning`]): the
    /// rows read (at most [`EXACT_PAGE`], unless in id order with `expired_before`, which goes
    /// by id range) deleted by id (those still expired, given
    /// `expired_before`), and each deleted row compared with those read, by id and
    /// `updated_at`. `Some(deleted)` when every row read was deleted unchanged; `None` when
    /// one had been written (or deleted) since, or was not read, which then must not stay deleted:
    /// the caller rolls back its transaction and takes the rows again with
    /// [`Store::lock_task_rows`]. `None` also when the database cannot return them.
    pub(crate) fn delete_task_rows_returning(
        &mut self,
        read: &[(i64, StoredTime)],
        expired_before: Option<Timestamp>,
    ) -> Result<Option<u64>> {
        if !self.deletes_returning() {
            return Ok(None);
        }
        if read.is_empty() {
            return Ok(Some(0));
        }
        // Rows read in id order with an expiry to check again (a clean's) are deleted by their
        // id range: any row of the range deleted that was not read (expired since) fails the
        // comparison below, as a row written since does. Bound one by one, the ids cost
        // PostgreSQL a plan of the whole list at every statement: clean --archive at 1,000,000
        // rows took 1.27 to 1.58 times the range delete of the commit before
        // (docs/performance.md has the figures by range).
        let (first, last) = (read[0].0, read[read.len() - 1].0);
        let query = match expired_before {
            Some(cutoff) if read.windows(2).all(|pair| pair[0].0 < pair[1].0) => {
                delete_expired_ids(first, last, cutoff)
            }
            _ => {
                let delete = Query::new("DELETE FROM task_state_store WHERE id IN");
                let query = in_list(delete, read.iter().map(|(id, _)| *id));
                match expired_before {
                    Some(cutoff) => query.and(" AND expires_at < ?", cutoff),
                    None => query,
                }
            }
        };
        let query = query.push(" RETURNING id, updated_at");
        let deleted = all(&mut *self.conn, "cannot delete from task_state_store", &query, |f| {
            Ok((f.int()?, f.required_time()))
        })?;
        let read: HashMap<i64, &StoredTime> = read.iter().map(|(id, at)| (*id, at)).collect();
        // Every row read deleted, as it was read: a row read that the DELETE did not find was
        // deleted by another session or changed since, which only the locking read tells apart.
        let unchanged = deleted.len() == read.len()
            && deleted.iter().all(|(id, at)| read.get(id).is_some_and(|was| *was == at));
        Ok(unchanged.then_some(deleted.len() as u64))
    }

    /// Deletes the task rows of these ids (at most [`EXACT_PAGE`]), through the primary key.
    pub(crate) fn delete_task_ids(&mut self, ids: &[i64]) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let query = in_list(Query::new("DELETE FROM task_state_store WHERE id IN"), ids.iter().copied());
        self.conn.run("cannot delete from task_state_store", &query)
    }

    /// [`Store::lock_task_rows`] for keys of one asset, read with their `updated_at`; through
    /// the primary key `(asset_id, key)`.
    pub(crate) fn lock_asset_rows(
        &mut self,
        asset_id: i64,
        read: &[(String, StoredTime)],
    ) -> Result<Vec<(String, bool)>> {
        if read.is_empty() {
            return Ok(Vec::new());
        }
        let select = Query::new(r#"SELECT "key", updated_at FROM asset_state_store WHERE asset_id = ?"#);
        let query =
            in_list(select.bind(asset_id).push(r#" AND "key" IN"#), read.iter().map(|(key, _)| key.as_str()));
        let query = query.push(self.conn.dialect().lock_rows());
        let found = all(&mut *self.conn, "cannot read asset_state_store", &query, |f| {
            Ok((f.text(), f.required_time()))
        })?;
        let read: HashMap<&str, &StoredTime> = read.iter().map(|(key, at)| (key.as_str(), at)).collect();
        Ok(found
            .into_iter()
            .map(|(key, at)| {
                let unchanged = read.get(key.as_str()).is_some_and(|was| **was == at);
                (key, unchanged)
            })
            .collect())
    }

    /// Deletes these keys of one asset (at most [`EXACT_PAGE`]), through the primary key.
    pub(crate) fn delete_asset_keys(&mut self, asset_id: i64, keys: &[&str]) -> Result<u64> {
        if keys.is_empty() {
            return Ok(0);
        }
        self.conn.run("cannot delete from asset_state_store", &delete_asset_keys(asset_id, keys))
    }

    pub(crate) fn count_task_scope(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64> {
        let select = Query::new("SELECT count(*) FROM task_state_store");
        let query = Self::scope_where(select, "task_state_store", scope, all_map_indices);
        count(&mut *self.conn, "cannot read task_state_store", &query)
    }

    pub(crate) fn clear_task(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64> {
        let delete = Query::new("DELETE FROM task_state_store");
        let query = Self::scope_where(delete, "task_state_store", scope, all_map_indices);
        self.conn.run("cannot delete from task_state_store", &query)
    }

    pub(crate) fn count_asset_scope(&mut self, asset_id: i64) -> Result<u64> {
        let query = Query::new("SELECT count(*) FROM asset_state_store WHERE asset_id = ?").bind(asset_id);
        count(&mut *self.conn, "cannot read asset_state_store", &query)
    }

    pub(crate) fn clear_asset(&mut self, asset_id: i64) -> Result<u64> {
        let query = Query::new("DELETE FROM asset_state_store WHERE asset_id = ?").bind(asset_id);
        self.conn.run("cannot delete from asset_state_store", &query)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_updated_column_is_a_written_one() {
        for upsert in [TASK_UPSERT, ASSET_UPSERT] {
            let columns: Vec<&str> = upsert.columns.split(", ").collect();
            assert_eq!(columns.len(), 9, "{}", upsert.table);
            assert!(upsert.columns.starts_with(upsert.key), "{}", upsert.table);
            for column in upsert.update.split(", ") {
                assert!(columns.contains(&column), "{}.{column}", upsert.table);
            }
            assert!(upsert.update.ends_with("updated_at"), "{}", upsert.table);
        }
    }
}
