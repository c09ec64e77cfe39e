//! Creating and filling a throw-away metastore (`state-store sandbox`): the demo, the tests,
//! trying the tool before pointing it at production. Nothing here may ever run against a real
//! Airflow database, so every method but `create` first checks for the marker table.

use anyhow::bail;

use super::dialect::{Connection, columns, count, first, in_transaction};
use super::query::Fields;
use super::query::Query;
use super::schema::{AIRFLOW_33_ALEMBIC_REVISION, AIRFLOW_TABLES, SANDBOX_MARKER_TABLE};
use crate::error::{Error, Result};
use crate::text::quote;
use crate::time::Timestamp;

/// A database opened for `state-store sandbox`.
pub(crate) struct Sandbox {
    conn: Box<dyn Connection>,
}

/// What every dialect's `create_tables` ends with, in its transaction: the Alembic revision
/// Airflow's commands check, and the marker row.
pub(super) fn stamp<C: Connection + ?Sized>(conn: &mut C, what: &str) -> Result<()> {
    let revision =
        Query::new("INSERT INTO alembic_version (version_num) VALUES (?)").bind(AIRFLOW_33_ALEMBIC_REVISION);
    conn.run(what, &revision)?;
    let marker = Query::new("INSERT INTO ").push(SANDBOX_MARKER_TABLE).push(" (created_at) VALUES (?)");
    conn.run(what, &marker.bind(Timestamp::now())).map(drop)
}

impl Sandbox {
    pub(super) fn new(conn: Box<dyn Connection>) -> Sandbox {
        Sandbox { conn }
    }

    /// The same database as a [`Store`], for tests that fill a sandbox and then work on it.
    #[cfg(test)]
    pub(crate) fn into_store(self) -> super::Store {
        super::Store { conn: self.conn }
    }

    /// Creates the Airflow 3.3.2 tables; refuses when any of them exists already.
    pub(crate) fn create(&mut self) -> Result<()> {
        let mut existing = Vec::new();
        for table in AIRFLOW_TABLES.split(' ').chain([SANDBOX_MARKER_TABLE]) {
            if columns(&mut *self.conn, table)?.is_some() {
                existing.push(table);
            }
        }
        if !existing.is_empty() {
            bail!(Error::Usage(format!(
                "{} already has Airflow tables ({}); a sandbox starts empty",
                self.conn.location(),
                existing.join(", ")
            )));
        }
        self.conn.create_tables()
    }

    fn require_marker(&mut self) -> Result<()> {
        if columns(&mut *self.conn, SANDBOX_MARKER_TABLE)?.is_some() {
            return Ok(());
        }
        Err(Error::Usage(format!(
            "{} was not created by `state-store sandbox create`; sandbox commands never change a real metastore",
            self.conn.location()
        )).into())
    }

    pub(crate) fn add_dag_run(&mut self, dag_id: &str, run_id: &str) -> Result<i64> {
        self.require_marker()?;
        self.conn.check_text("dag_run", "dag_id", dag_id)?;
        self.conn.check_text("dag_run", "run_id", run_id)?;
        // The unique index would refuse it with the driver's words (`Duplicate entry`, exit
        // 4); an existing run is the caller's input, not a database failure, so it is exit 2,
        // as `sandbox create` of a database that has the tables already. The comparison is the
        // columns' own, the one the unique index makes (MySQL pads trailing spaces).
        let existing =
            Query::new("SELECT id FROM dag_run WHERE dag_id = ?").bind(dag_id).and(" AND run_id = ?", run_id);
        if let Some(id) = first(&mut *self.conn, "cannot read the dag runs", &existing, Fields::int)? {
            bail!(Error::Usage(format!(
                "the sandbox already has a dag run dag_id={} run_id={} (dag_run id {id}); give another --run-id",
                quote(dag_id),
                quote(run_id)
            )));
        }
        let now = Timestamp::now();
        let query = Query::new(
            "INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, queued_at, start_date, created_at, \
             updated_at) VALUES (?, ?, 'manual', 'running', ?, ?, ?, ?, ?)",
        );
        let query = query.bind(dag_id).bind(run_id).bind(now).bind(now).bind(now).bind(now).bind(now);
        insert(&mut *self.conn, "cannot add the dag run", &query)
    }

    /// Adds a task instance to a dag run, as the scheduler creates it: no state yet, try 0,
    /// the default pool, a random uuid for its key.
    pub(crate) fn add_task_instance(
        &mut self,
        dag_id: &str,
        run_id: &str,
        task_id: &str,
        map_index: i64,
    ) -> Result<()> {
        self.require_marker()?;
        for (column, text) in [("dag_id", dag_id), ("run_id", run_id), ("task_id", task_id)] {
            self.conn.check_text("task_instance", column, text)?;
        }
        let existing = Query::new("SELECT count(*) FROM task_instance WHERE dag_id = ?")
            .bind(dag_id)
            .and(" AND run_id = ?", run_id)
            .and(" AND task_id = ?", task_id)
            .and(" AND map_index = ?", map_index);
        if count(&mut *self.conn, "cannot read the task instances", &existing)? > 0 {
            bail!(Error::Usage(format!(
                "the sandbox already has the task instance dag_id={} run_id={} task_id={} map_index={map_index}",
                quote(dag_id),
                quote(run_id),
                quote(task_id)
            )));
        }
        let query = Query::new(
            "INSERT INTO task_instance (id, task_id, dag_id, run_id, map_index, try_number, max_tries, pool, \
             pool_slots, queue, priority_weight, operator, updated_at) VALUES (",
        )
        .push(self.conn.dialect().random_uuid())
        .push(", ?, ?, ?, ?, 0, 0, 'default_pool', 1, 'default', 1, 'PythonOperator', ?)");
        let query = query.bind(task_id).bind(dag_id).bind(run_id).bind(map_index).bind(Timestamp::now());
        self.conn.run("cannot add the task instance", &query).map(drop)
    }

    pub(crate) fn add_asset(&mut self, name: &str, uri: &str, active: bool) -> Result<i64> {
        self.require_marker()?;
        self.conn.check_text("asset", "name", name)?;
        self.conn.check_text("asset", "uri", uri)?;
        let existing = Query::new("SELECT id FROM asset WHERE name = ?").bind(name).and(" AND uri = ?", uri);
        if let Some(id) = first(&mut *self.conn, "cannot read the assets", &existing, Fields::int)? {
            bail!(Error::Usage(format!(
                "the sandbox already has an asset name={} uri={} (asset id {id})",
                quote(name),
                quote(uri)
            )));
        }
        let what = "cannot add the asset";
        in_transaction(&mut *self.conn, [what, what], |conn| {
            let now = Timestamp::now();
            let asset = Query::new(
                r#"INSERT INTO asset (name, uri, "group", extra, created_at, updated_at) VALUES (?, ?, 'asset', '{}', ?, ?)"#,
            );
            let id = insert(conn, what, &asset.bind(name).bind(uri).bind(now).bind(now))?;
            if active {
                let active =
                    Query::new("INSERT INTO asset_active (name, uri) VALUES (?, ?)").bind(name).bind(uri);
                conn.run(what, &active)?;
            }
            Ok(id)
        })
    }
}

/// An insert's new id, a failure put in words.
fn insert<C: Connection + ?Sized>(conn: &mut C, what: &str, query: &Query<'_>) -> Result<i64> {
    Ok(conn.insert(query).map_err(|cause| Error::db(format!("{what} in {}", conn.location()), cause))?)
}
