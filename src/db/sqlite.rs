//! SQLite, Airflow's embedded default metastore.
//!
//! Airflow stores SQLite timestamps as text `YYYY-MM-DD HH:MM:SS.ffffff` (UTC, no offset) and
//! compares `expires_at < ?` as strings, so every bound timestamp uses exactly that form. Each
//! connection turns foreign keys on (as Airflow does, so a write for a vanished dag run fails
//! instead of leaving an orphan) and waits for a busy database instead of failing at once.

use std::path::Path;
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, params, params_from_iter};

use super::{
    Access, AssetCount, AssetGroup, AssetRestore, AssetWrite, Cleanup, DagCount, Diagnose, Finding, FoundRow,
    LargeValue, Place, Reads, STATE_TABLES, SchemaFinding, SchemaProblem, Stats, TaskGroup, TaskInstances,
    TaskWrite, Writes, asset_scope_label, diagnose_schema, largest_first, orphan_condition, schema,
    task_scope_label, unsigned,
};
use crate::error::{Error, Result};
use crate::model::{
    Asset, AssetEntry, AssetFilter, AssetSelector, EXTERNAL_REF_LIKE, Page, StoredTime, TaskEntry,
    TaskFilter, TaskScope,
};
use crate::text::quote;
use crate::time::Timestamp;
use crate::url::{DbUrl, SqliteTarget};

/// How long a statement waits for another connection's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Page cache of a clean's connection, in KiB (see `tune_for_clean`).
const CLEAN_CACHE_KIB: i64 = 32 * 1024;
/// WAL pages after which a clean's commit copies the WAL back into the database file.
const CLEAN_WAL_AUTOCHECKPOINT_PAGES: i64 = 16_384;
/// Width, in ids, of one window of an unbounded delete (see `delete_expired_unbounded`).
const DELETE_WINDOW_IDS: i64 = 100_000;
/// Appended to the database's path to name the clean lock file beside it.
const CLEAN_LOCK_SUFFIX: &str = ".state-store-clean.lock";

/// The one-clean-at-a-time guard of a SQLite database: an exclusive `flock` on
/// `<database>.state-store-clean.lock`, a file that exists only while a clean holds it.
///
/// Removing a lock file races with the next run taking it: a run may open the file, and the
/// holder unlink it and let go, before that run's `flock`, which then succeeds on a file no
/// path names any more, while a third run creates a new file and locks that too. So a lock
/// counts only once the path is seen to name the very file locked (the path's inode, by
/// `stat`, is the descriptor's, by `fstat`); otherwise the run lets go and starts over. Only a
/// holder ever unlinks the path, and it does so before it lets go: as long as a run holds a
/// lock it checked, the path names that file, so no other run's check can pass. A file a
/// crashed run left behind (SIGKILL, a second signal) is not locked: the next run locks it,
/// finds it named by the path, uses it and removes it at its end.
struct CleanLock {
    file: std::fs::File,
    path: std::path::PathBuf,
}

impl CleanLock {
    /// The lock, or `None` when another clean holds it.
    fn acquire(path: std::path::PathBuf) -> Result<Option<CleanLock>> {
        use std::os::unix::fs::MetadataExt;
        let shown = path.display().to_string();
        let fail = |what: &str, e: std::io::Error| {
            Error::db(format!("cannot {what} the clean lock file {shown}"), e)
        };
        loop {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(|e| fail("open", e))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
                Err(std::fs::TryLockError::Error(e)) => return Err(fail("lock", e)),
            }
            let locked = file.metadata().map_err(|e| fail("read", e))?;
            match std::fs::metadata(&path) {
                Ok(named) if (named.dev(), named.ino()) == (locked.dev(), locked.ino()) => {
                    return Ok(Some(CleanLock { file, path }));
                }
                // Unlinked, or replaced, by the holder that ended meanwhile: start over.
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(fail("read", e)),
            }
        }
    }
}

impl Drop for CleanLock {
    fn drop(&mut self) {
        // Unlinked while still locked: see `CleanLock`. Closing the file then lets go.
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

pub(crate) struct SqliteStore {
    conn: Connection,
    location: String,
    path: Option<std::path::PathBuf>,
    /// Held while a clean runs: the one-clean-at-a-time guard. Declared after `conn`, so the
    /// connection is closed (and its WAL checkpointed) before the lock is let go.
    clean_lock: Option<CleanLock>,
}

fn sql_err(context: &str) -> impl Fn(rusqlite::Error) -> Error + '_ {
    move |e| Error::db(context.to_string(), Cause(e))
}

/// SQLite's own words, plus what to check when they are about permissions: "attempt to write
/// a readonly database" also comes from a read, when the directory of a WAL database is not
/// writable and SQLite cannot create the `-wal` and `-shm` files it needs beside the file.
#[derive(Debug)]
struct Cause(rusqlite::Error);

impl std::error::Error for Cause {}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        match self.0.sqlite_error_code() {
            Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen) => f.write_str(
                " (SQLite needs write access to the database file and to its directory, where it \
                 creates the -wal, -shm and -journal files; check their permissions)",
            ),
            _ => Ok(()),
        }
    }
}

impl SqliteStore {
    pub(crate) fn open(url: &DbUrl, access: Access) -> Result<Self> {
        let (store, finding) = Self::connect(url, access)?;
        finding.map_err(SchemaProblem::into_error)?;
        Ok(store)
    }

    /// Opens the file and checks its schema, handing back what the check found.
    pub(crate) fn connect(url: &DbUrl, access: Access) -> Result<(Self, SchemaFinding)> {
        let target = url.sqlite_target().ok_or_else(|| {
            Error::Config(format!("[database] sql_alchemy_conn {} is not a SQLite URL", url.redacted()))
        })?;
        let (conn, location, path) = match target {
            SqliteTarget::Memory => (
                Connection::open_in_memory().map_err(sql_err("cannot open an in-memory SQLite database"))?,
                "the in-memory SQLite database".to_string(),
                None,
            ),
            SqliteTarget::File(path) => {
                let location = format!("SQLite database {}", path.display());
                (open_existing_file(&path, &location)?, location, Some(path))
            }
        };
        let store = SqliteStore { conn, location, path, clean_lock: None };
        store.prepare_connection(access)?;
        let finding = diagnose_schema(&store.location, |table| store.columns(table))?;
        // SQLite opens a file it may not write read-only without a word, and the first write
        // fails deep inside a command (a clean after printing its summary); say it up front.
        if access == Access::ReadWrite
            && finding.is_ok()
            && store.conn.is_readonly(rusqlite::MAIN_DB).map_err(sql_err(&store.location))?
        {
            return Err(Error::Database {
                context: format!("cannot write to {}", store.location),
                cause: "the file is read-only for this user; commands that only read \
                        (get, list, stats, export, clean --dry-run) still work"
                    .into(),
            });
        }
        Ok((store, finding))
    }

    fn prepare_connection(&self, access: Access) -> Result<()> {
        let context = format!("cannot use {}", self.location);
        self.conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| Error::db(&context, Cause(e)))?;
        // Reading sqlite_master is the first real read: a file that is not a database fails here.
        self.conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get::<_, i64>(0))
            .map_err(|e| Error::db(&context, Cause(e)))?;
        self.conn.execute_batch("PRAGMA foreign_keys = ON").map_err(|e| Error::db(&context, Cause(e)))?;
        if access == Access::ReadOnly {
            self.conn.execute_batch("PRAGMA query_only = ON").map_err(|e| Error::db(&context, Cause(e)))?;
        }
        Ok(())
    }

    /// Settings for the clean's own connection only; they end with it. Measured on 1,000,000
    /// rows with 500,012 expired at batch 10,000 (docs/performance.md): each batch deletes
    /// entries spread over the whole expired part of the `expires_at` index.
    fn tune_for_clean(&self) -> rusqlite::Result<()> {
        // SQLite's default 2 MiB page cache spills those dirty pages to the WAL several times
        // within one batch; 32 MiB holds most of one batch's pages, so each is written about once per
        // commit (64 MiB measured no faster, at 35 MB more memory).
        self.conn.pragma_update(None, "cache_size", -CLEAN_CACHE_KIB)?;
        let mode: String = self.conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
        if mode.eq_ignore_ascii_case("wal") {
            // With the default 1,000-page auto-checkpoint every batch ends in a checkpoint that
            // writes the same index pages back into the file again (809 MiB for 51 batches
            // against 239 MiB for one DELETE); 16,384 pages let many batches share one.
            self.conn.pragma_update(None, "wal_autocheckpoint", CLEAN_WAL_AUTOCHECKPOINT_PAGES)?;
            // In WAL mode NORMAL skips the fsync of each commit. A power loss can then undo the
            // last batches, never corrupt the file, and undoing a delete of expired rows is
            // safe: the next clean deletes them again. (In rollback-journal mode NORMAL can
            // corrupt on some filesystems, so it stays as Airflow left it there.)
            self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        }
        Ok(())
    }

    /// Deletes every expired row after `after_id` in one transaction, in windows of the
    /// primary key. With foreign keys on, SQLite collects the rowids of all the rows a DELETE
    /// matches before it deletes them (about 24 bytes each); windows keep that memory
    /// bounded on any table size while the deletion stays one atomic change, as one DELETE is.
    fn delete_expired_unbounded(&mut self, cutoff: &str, after_id: i64) -> rusqlite::Result<u64> {
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut deleted = 0;
        let mut from = after_id;
        {
            let mut next = tx.prepare("SELECT min(id) FROM task_state_store WHERE id > ?1")?;
            let mut delete =
                tx.prepare("DELETE FROM task_state_store WHERE id > ?1 AND id <= ?2 AND expires_at < ?3")?;
            // Each window starts at the next existing id, so gaps in the ids cost nothing.
            while let Some(first) = next.query_row([from], |r| r.get::<_, Option<i64>>(0))? {
                let to = first.saturating_add(DELETE_WINDOW_IDS - 1);
                deleted += count(delete.execute(params![from, to, cutoff])?);
                if to == i64::MAX {
                    break;
                }
                from = to;
            }
        }
        tx.commit()?;
        Ok(deleted)
    }

    fn columns(&self, table: &str) -> Result<Option<Vec<String>>> {
        let mut stmt = self
            .conn
            .prepare("SELECT name FROM pragma_table_info(?1)")
            .map_err(|e| Error::db(format!("cannot read the tables of {}", self.location), Cause(e)))?;
        let names = stmt
            .query_map([table], |row| row.get::<_, String>(0))
            .and_then(Iterator::collect::<rusqlite::Result<Vec<String>>>)
            .map_err(|e| Error::db(format!("cannot read the tables of {}", self.location), Cause(e)))?;
        Ok(if names.is_empty() { None } else { Some(names) })
    }

    /// The task upsert, with an optional condition on the update (`restore_task`'s
    /// keep-the-newer-row rule). The conflict target is Airflow's own unique key, so a
    /// concurrent Airflow worker writing the same key updates the same row instead of failing
    /// or duplicating it.
    fn write_task(&mut self, w: &TaskWrite<'_>, only_if: &str, what: &str) -> Result<()> {
        let ctx = self.ctx(what);
        self.conn
            .execute(
                &format!(
                    r#"INSERT INTO task_state_store
                           (dag_run_id, task_id, map_index, "key", dag_id, run_id, value, updated_at, expires_at)
                       VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                       ON CONFLICT (dag_run_id, task_id, map_index, "key") DO UPDATE SET
                           value = excluded.value, updated_at = excluded.updated_at,
                           expires_at = excluded.expires_at
                       {only_if}"#
                ),
                params![
                    w.dag_run_id,
                    w.scope.task_id,
                    w.scope.map_index,
                    w.key,
                    w.scope.dag_id,
                    w.scope.run_id,
                    w.value,
                    w.updated_at.to_sqlite_text(),
                    w.expires_at.map(Timestamp::to_sqlite_text),
                ],
            )
            .map(drop)
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn ctx(&self, what: &str) -> String {
        format!("{what} in {}", self.location)
    }
}

/// Never creates a file: a mistyped path must be an error, not a new empty database.
fn open_existing_file(path: &Path, location: &str) -> Result<Connection> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::Database {
                context: format!("cannot open {location}"),
                cause: "the file does not exist".into(),
            });
        }
        Err(e) => return Err(Error::db(format!("cannot open {location}"), e)),
        Ok(meta) if meta.is_dir() => {
            return Err(Error::Database {
                context: format!("cannot open {location}"),
                cause: "it is a directory".into(),
            });
        }
        Ok(_) => {}
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    Connection::open_with_flags(path, flags)
        .map_err(|e| Error::db(format!("cannot open {location}"), Cause(e)))
}

fn stored_time(value: ValueRef<'_>) -> Option<StoredTime> {
    match value {
        ValueRef::Null => None,
        ValueRef::Text(bytes) => {
            let text = String::from_utf8_lossy(bytes);
            Some(match Timestamp::parse_db_text(&text) {
                Ok(ts) => StoredTime::At(ts),
                Err(_) => StoredTime::Unreadable(text.into_owned()),
            })
        }
        ValueRef::Integer(i) => Some(StoredTime::Unreadable(i.to_string())),
        ValueRef::Real(f) => Some(StoredTime::Unreadable(f.to_string())),
        ValueRef::Blob(b) => Some(StoredTime::Unreadable(String::from_utf8_lossy(b).into_owned())),
    }
}

fn required_time(row: &Row<'_>, idx: usize) -> rusqlite::Result<StoredTime> {
    Ok(stored_time(row.get_ref(idx)?).unwrap_or_else(|| StoredTime::Unreadable(String::new())))
}

/// Values are TEXT, but a damaged or foreign row may hold anything: show it rather than fail.
fn text_lossy(row: &Row<'_>, idx: usize) -> rusqlite::Result<String> {
    Ok(match row.get_ref(idx)? {
        ValueRef::Null => String::new(),
        ValueRef::Text(b) | ValueRef::Blob(b) => String::from_utf8_lossy(b).into_owned(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
    })
}

const TASK_COLUMNS: &str = r#"dag_id, run_id, task_id, map_index, "key", value, updated_at, expires_at"#;

fn task_entry(row: &Row<'_>) -> rusqlite::Result<TaskEntry> {
    Ok(TaskEntry {
        scope: TaskScope {
            dag_id: row.get(0)?,
            run_id: row.get(1)?,
            task_id: row.get(2)?,
            map_index: row.get(3)?,
        },
        key: row.get(4)?,
        value: text_lossy(row, 5)?,
        updated_at: required_time(row, 6)?,
        expires_at: stored_time(row.get_ref(7)?),
    })
}

const ASSET_COLUMNS: &str = r#"s.asset_id, a.name, a.uri, s."key", s.value, s.updated_at, s.last_updated_by_kind,
    s.last_updated_by_dag_id, s.last_updated_by_run_id, s.last_updated_by_task_id, s.last_updated_by_map_index"#;

fn asset_entry(row: &Row<'_>) -> rusqlite::Result<AssetEntry> {
    Ok(AssetEntry {
        asset_id: row.get(0)?,
        asset_name: row.get(1)?,
        asset_uri: row.get(2)?,
        key: row.get(3)?,
        value: text_lossy(row, 4)?,
        updated_at: required_time(row, 5)?,
        last_updated_by_kind: row.get(6)?,
        last_updated_by_dag_id: row.get(7)?,
        last_updated_by_run_id: row.get(8)?,
        last_updated_by_task_id: row.get(9)?,
        last_updated_by_map_index: row.get(10)?,
    })
}

/// `LIMIT -1` is SQLite's "no limit".
fn limit_value(page: Page) -> i64 {
    page.limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX))
}

fn offset_value(page: Page) -> i64 {
    i64::try_from(page.offset).unwrap_or(i64::MAX)
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// An asset is active when `asset_active` has a row with the same name AND uri.
const ACTIVE_JOIN: &str = "JOIN asset_active aa ON aa.name = a.name AND aa.uri = a.uri";

impl Reads for SqliteStore {
    fn task_instance_exists(&mut self, scope: &TaskScope, any_map_index: bool) -> Result<bool> {
        let ctx = self.ctx("cannot look up the task instance");
        let map_index = (!any_map_index).then_some(scope.map_index);
        self.conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM task_instance WHERE dag_id = ?1 AND task_id = ?2 AND run_id = ?3 \
                 AND (?4 IS NULL OR map_index = ?4))",
                params![scope.dag_id, scope.task_id, scope.run_id, map_index],
                |r| r.get(0),
            )
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn task_instances_hint(
        &mut self,
        dag_id: &str,
        run_id: &str,
        task_id: &str,
        limit: u64,
    ) -> Result<TaskInstances> {
        let ctx = self.ctx("cannot look up the task instances");
        let run = |e| Error::db(&ctx, Cause(e));
        let task_ids = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT task_id FROM task_instance WHERE dag_id = ?1 AND run_id = ?2 ORDER BY task_id LIMIT ?3",
            )
            .and_then(|mut stmt| {
                stmt.query_map(params![dag_id, run_id, sql_limit(limit)], |r| r.get(0))?.collect()
            })
            .map_err(run)?;
        let task_count: i64 = self
            .conn
            .query_row(
                "SELECT count(DISTINCT task_id) FROM task_instance WHERE dag_id = ?1 AND run_id = ?2",
                params![dag_id, run_id],
                |r| r.get(0),
            )
            .map_err(run)?;
        let map_indexes: (i64, Option<i64>, Option<i64>) = self
            .conn
            .query_row(
                "SELECT count(*), min(map_index), max(map_index) FROM task_instance \
                 WHERE dag_id = ?1 AND task_id = ?2 AND run_id = ?3",
                params![dag_id, task_id, run_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .map_err(run)?;
        Ok(TaskInstances {
            task_ids,
            task_count: unsigned(task_count),
            map_indexes: match map_indexes {
                (n, Some(low), Some(high)) if n > 0 => Some((unsigned(n), low, high)),
                _ => None,
            },
        })
    }

    fn dag_run_id(&mut self, dag_id: &str, run_id: &str) -> Result<Option<i64>> {
        let ctx = self.ctx("cannot look up the dag run");
        self.conn
            .query_row(
                "SELECT id FROM dag_run WHERE dag_id = ?1 AND run_id = ?2",
                params![dag_id, run_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn find_asset(&mut self, selector: &AssetSelector) -> Result<Option<Asset>> {
        let ctx = self.ctx("cannot look up the asset");
        let base = "SELECT a.id, a.name, a.uri, EXISTS (SELECT 1 FROM asset_active aa \
                    WHERE aa.name = a.name AND aa.uri = a.uri) FROM asset a";
        let map = |r: &Row<'_>| -> rusqlite::Result<Asset> {
            Ok(Asset { id: r.get(0)?, name: r.get(1)?, uri: r.get(2)?, active: r.get(3)? })
        };
        let result = match selector {
            AssetSelector::Id(id) => {
                self.conn.query_row(&format!("{base} WHERE a.id = ?1"), [id], map).optional()
            }
            AssetSelector::Name(name) => self
                .conn
                .query_row(
                    &format!("SELECT a.id, a.name, a.uri, 1 FROM asset a {ACTIVE_JOIN} WHERE a.name = ?1"),
                    [name],
                    map,
                )
                .optional(),
            AssetSelector::Uri(uri) => self
                .conn
                .query_row(
                    &format!("SELECT a.id, a.name, a.uri, 1 FROM asset a {ACTIVE_JOIN} WHERE a.uri = ?1"),
                    [uri],
                    map,
                )
                .optional(),
        };
        result.map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn asset_id_by_name_uri(&mut self, name: &str, uri: &str) -> Result<Option<i64>> {
        let ctx = self.ctx("cannot look up the asset");
        self.conn
            .query_row(
                "SELECT id FROM asset WHERE name = ?1 AND uri = ?2 ORDER BY id DESC LIMIT 1",
                params![name, uri],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn active_assets(&mut self, limit: u64) -> Result<Vec<Asset>> {
        let ctx = self.ctx("cannot read the assets");
        self.conn
            .prepare(&format!(
                "SELECT a.id, a.name, a.uri, 1 FROM asset a {ACTIVE_JOIN} ORDER BY a.id LIMIT ?1"
            ))
            .and_then(|mut stmt| {
                stmt.query_map([sql_limit(limit)], |r| {
                    Ok(Asset { id: r.get(0)?, name: r.get(1)?, uri: r.get(2)?, active: true })
                })?
                .collect()
            })
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn asset_exists_inactive(&mut self, selector: &AssetSelector) -> Result<bool> {
        let ctx = self.ctx("cannot look up the asset");
        let (sql, arg) = match selector {
            AssetSelector::Name(name) => {
                ("SELECT EXISTS (SELECT 1 FROM asset WHERE name = ?1)", name.as_str())
            }
            AssetSelector::Uri(uri) => ("SELECT EXISTS (SELECT 1 FROM asset WHERE uri = ?1)", uri.as_str()),
            AssetSelector::Id(_) => return Ok(false),
        };
        self.conn.query_row(sql, [arg], |r| r.get(0)).map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn task_entry(&mut self, scope: &TaskScope, key: &str) -> Result<Option<TaskEntry>> {
        let ctx = self.ctx("cannot read task_state_store");
        self.conn
            .query_row(
                &format!(
                    r#"SELECT {TASK_COLUMNS} FROM task_state_store
                       WHERE dag_id = ?1 AND run_id = ?2 AND task_id = ?3 AND map_index = ?4 AND "key" = ?5"#
                ),
                params![scope.dag_id, scope.run_id, scope.task_id, scope.map_index, key],
                task_entry,
            )
            .optional()
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn asset_entry(&mut self, asset: &Asset, key: &str) -> Result<Option<AssetEntry>> {
        let ctx = self.ctx("cannot read asset_state_store");
        self.conn
            .query_row(
                &format!(
                    r#"SELECT {ASSET_COLUMNS} FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id
                       WHERE s.asset_id = ?1 AND s."key" = ?2"#
                ),
                params![asset.id, key],
                asset_entry,
            )
            .optional()
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn list_task(&mut self, filter: &TaskFilter, page: Page) -> Result<Vec<TaskEntry>> {
        let ctx = self.ctx("cannot read task_state_store");
        let (where_sql, mut args) = task_filter_where(filter, None);
        args.push(limit_value(page).into());
        args.push(offset_value(page).into());
        let sql = format!(
            r#"SELECT {TASK_COLUMNS} FROM task_state_store {where_sql}
               ORDER BY dag_id, run_id, task_id, map_index, "key" LIMIT ? OFFSET ?"#
        );
        let mut stmt = self.conn.prepare(&sql).map_err(sql_err(&ctx))?;
        stmt.query_map(params_from_iter(args), task_entry)
            .and_then(Iterator::collect)
            .map_err(|e| Error::db(ctx.clone(), Cause(e)))
    }

    fn list_asset(&mut self, filter: &AssetFilter, page: Page) -> Result<Vec<AssetEntry>> {
        let ctx = self.ctx("cannot read asset_state_store");
        let where_sql = if filter.asset_id.is_some() { "WHERE s.asset_id = ?1" } else { "WHERE ?1 IS NULL" };
        let sql = format!(
            r#"SELECT {ASSET_COLUMNS} FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id
               {where_sql} AND (?4 IS NULL OR s.value LIKE ?4 ESCAPE '!')
               ORDER BY s.asset_id, s."key" LIMIT ?2 OFFSET ?3"#
        );
        let like = filter.external_only.then_some(EXTERNAL_REF_LIKE);
        let mut stmt = self.conn.prepare(&sql).map_err(sql_err(&ctx))?;
        stmt.query_map(params![filter.asset_id, limit_value(page), offset_value(page), like], asset_entry)
            .and_then(Iterator::collect)
            .map_err(|e| Error::db(ctx.clone(), Cause(e)))
    }

    fn task_rows_after(
        &mut self,
        filter: &TaskFilter,
        after_id: i64,
        limit: u64,
    ) -> Result<Vec<(i64, TaskEntry)>> {
        let ctx = self.ctx("cannot read task_state_store");
        let (where_sql, mut args) = task_filter_where(filter, Some(after_id));
        args.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
        let sql = format!("SELECT {TASK_COLUMNS}, id FROM task_state_store {where_sql} ORDER BY id LIMIT ?");
        let mut stmt = self.conn.prepare(&sql).map_err(sql_err(&ctx))?;
        stmt.query_map(params_from_iter(args), |row| Ok((row.get(8)?, task_entry(row)?)))
            .and_then(Iterator::collect)
            .map_err(|e| Error::db(ctx.clone(), Cause(e)))
    }
}

impl Writes for SqliteStore {
    fn upsert_task(&mut self, w: &TaskWrite<'_>) -> Result<()> {
        self.write_task(w, "", "cannot write task_state_store")
    }

    fn upsert_asset(&mut self, w: &AssetWrite<'_>) -> Result<()> {
        let ctx = self.ctx("cannot write asset_state_store");
        // An `api` write records no task, so the four writer columns are reset to NULL.
        self.conn
            .execute(
                r#"INSERT INTO asset_state_store
                       (asset_id, "key", value, updated_at, last_updated_by_kind, last_updated_by_dag_id,
                        last_updated_by_run_id, last_updated_by_task_id, last_updated_by_map_index)
                   VALUES (?1, ?2, ?3, ?4, 'api', NULL, NULL, NULL, NULL)
                   ON CONFLICT (asset_id, "key") DO UPDATE SET
                       value = excluded.value, updated_at = excluded.updated_at,
                       last_updated_by_kind = excluded.last_updated_by_kind,
                       last_updated_by_dag_id = NULL, last_updated_by_run_id = NULL,
                       last_updated_by_task_id = NULL, last_updated_by_map_index = NULL"#,
                params![w.asset_id, w.key, w.value, w.updated_at.to_sqlite_text()],
            )
            .map(drop)
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn restore_task(&mut self, w: &TaskWrite<'_>) -> Result<()> {
        // A restore never overwrites a row written since the export.
        self.write_task(
            w,
            "WHERE task_state_store.updated_at <= excluded.updated_at",
            "cannot restore into task_state_store",
        )
    }

    fn restore_asset(&mut self, w: &AssetRestore<'_>) -> Result<()> {
        let ctx = self.ctx("cannot restore into asset_state_store");
        self.conn
            .execute(
                r#"INSERT INTO asset_state_store
                       (asset_id, "key", value, updated_at, last_updated_by_kind, last_updated_by_dag_id,
                        last_updated_by_run_id, last_updated_by_task_id, last_updated_by_map_index)
                   VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                   ON CONFLICT (asset_id, "key") DO UPDATE SET
                       value = excluded.value, updated_at = excluded.updated_at,
                       last_updated_by_kind = excluded.last_updated_by_kind,
                       last_updated_by_dag_id = excluded.last_updated_by_dag_id,
                       last_updated_by_run_id = excluded.last_updated_by_run_id,
                       last_updated_by_task_id = excluded.last_updated_by_task_id,
                       last_updated_by_map_index = excluded.last_updated_by_map_index
                   WHERE asset_state_store.updated_at <= excluded.updated_at"#,
                params![
                    w.asset_id,
                    w.key,
                    w.value,
                    w.updated_at.to_sqlite_text(),
                    w.writer.kind,
                    w.writer.dag_id,
                    w.writer.run_id,
                    w.writer.task_id,
                    w.writer.map_index,
                ],
            )
            .map(drop)
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn begin(&mut self) -> Result<()> {
        // IMMEDIATE takes the write lock now, so a batch never fails half-way on a busy lock.
        let ctx = self.ctx("cannot begin a transaction");
        self.conn.execute_batch("BEGIN IMMEDIATE").map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn commit(&mut self) -> Result<()> {
        let ctx = self.ctx("cannot commit");
        self.conn.execute_batch("COMMIT").map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn rollback(&mut self) -> Result<()> {
        let ctx = self.ctx("cannot roll back");
        self.conn.execute_batch("ROLLBACK").map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn delete_task(&mut self, scope: &TaskScope, key: &str) -> Result<u64> {
        let ctx = self.ctx("cannot delete from task_state_store");
        self.conn
            .execute(
                r#"DELETE FROM task_state_store
                   WHERE dag_id = ?1 AND run_id = ?2 AND task_id = ?3 AND map_index = ?4 AND "key" = ?5"#,
                params![scope.dag_id, scope.run_id, scope.task_id, scope.map_index, key],
            )
            .map(count)
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn delete_asset(&mut self, asset_id: i64, key: &str) -> Result<u64> {
        let ctx = self.ctx("cannot delete from asset_state_store");
        self.conn
            .execute(
                r#"DELETE FROM asset_state_store WHERE asset_id = ?1 AND "key" = ?2"#,
                params![asset_id, key],
            )
            .map(count)
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn count_task_scope(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64> {
        let ctx = self.ctx("cannot read task_state_store");
        let (sql, map_index) = task_scope_where(scope, all_map_indices);
        self.conn
            .query_row(
                &format!("SELECT count(*) FROM task_state_store WHERE {sql}"),
                params![scope.dag_id, scope.run_id, scope.task_id, map_index],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn clear_task(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64> {
        let ctx = self.ctx("cannot delete from task_state_store");
        let (sql, map_index) = task_scope_where(scope, all_map_indices);
        self.conn
            .execute(
                &format!("DELETE FROM task_state_store WHERE {sql}"),
                params![scope.dag_id, scope.run_id, scope.task_id, map_index],
            )
            .map(count)
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn count_asset_scope(&mut self, asset_id: i64) -> Result<u64> {
        let ctx = self.ctx("cannot read asset_state_store");
        self.conn
            .query_row("SELECT count(*) FROM asset_state_store WHERE asset_id = ?1", [asset_id], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn clear_asset(&mut self, asset_id: i64) -> Result<u64> {
        let ctx = self.ctx("cannot delete from asset_state_store");
        self.conn
            .execute("DELETE FROM asset_state_store WHERE asset_id = ?1", [asset_id])
            .map(count)
            .map_err(|e| Error::db(ctx, Cause(e)))
    }
}

impl Cleanup for SqliteStore {
    fn count_expired(&mut self, cutoff: Timestamp) -> Result<u64> {
        let ctx = self.ctx("cannot count expired rows");
        self.conn
            .query_row(
                "SELECT count(*) FROM task_state_store WHERE expires_at < ?1",
                [cutoff.to_sqlite_text()],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn expired_by_dag(&mut self, cutoff: Timestamp) -> Result<Vec<DagCount>> {
        let ctx = self.ctx("cannot count expired rows");
        let mut stmt = self
            .conn
            .prepare(
                "SELECT dag_id, count(*) FROM task_state_store WHERE expires_at < ?1 \
                 GROUP BY dag_id ORDER BY dag_id",
            )
            .map_err(sql_err(&ctx))?;
        stmt.query_map([cutoff.to_sqlite_text()], |r| {
            Ok(DagCount { dag_id: r.get(0)?, rows: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0) })
        })
        .and_then(Iterator::collect)
        .map_err(|e| Error::db(ctx.clone(), Cause(e)))
    }

    fn orphans_by_asset(&mut self) -> Result<Vec<AssetCount>> {
        let ctx = self.ctx("cannot count orphaned asset rows");
        let sql = format!(
            "SELECT s.asset_id, a.name, count(*) FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id \
             WHERE {} GROUP BY s.asset_id, a.name ORDER BY s.asset_id",
            orphan_condition("s")
        );
        let mut stmt = self.conn.prepare(&sql).map_err(sql_err(&ctx))?;
        stmt.query_map([], |r| {
            Ok(AssetCount {
                asset_id: r.get(0)?,
                asset_name: r.get(1)?,
                rows: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
            })
        })
        .and_then(Iterator::collect)
        .map_err(|e| Error::db(ctx.clone(), Cause(e)))
    }

    fn orphan_sample(&mut self, limit: u64) -> Result<Vec<AssetEntry>> {
        let ctx = self.ctx("cannot read orphaned asset rows");
        let sql = format!(
            r#"SELECT {ASSET_COLUMNS} FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id
               WHERE {} ORDER BY s.asset_id, s."key" LIMIT ?1"#,
            orphan_condition("s")
        );
        let mut stmt = self.conn.prepare(&sql).map_err(sql_err(&ctx))?;
        stmt.query_map([i64::try_from(limit).unwrap_or(i64::MAX)], asset_entry)
            .and_then(Iterator::collect)
            .map_err(|e| Error::db(ctx.clone(), Cause(e)))
    }

    fn begin_clean(&mut self, lock_timeout: Duration) -> Result<bool> {
        let ctx = self.ctx("cannot prepare the clean");
        self.conn.busy_timeout(lock_timeout).map_err(|e| Error::db(&ctx, Cause(e)))?;
        self.tune_for_clean().map_err(|e| Error::db(&ctx, Cause(e)))?;
        // SQLite's own locks cannot say "a clean is running" without blocking Airflow's
        // writers too (a lock on the database, or on a table of it, is a write lock), so the
        // guard is a lock file beside the database (see `CleanLock`).
        let Some(path) = &self.path else { return Ok(true) };
        let mut lock_path = path.clone().into_os_string();
        lock_path.push(CLEAN_LOCK_SUFFIX);
        self.clean_lock = CleanLock::acquire(lock_path.into())?;
        Ok(self.clean_lock.is_some())
    }

    fn finish_clean(&mut self) {
        // The WAL this session let grow (see `tune_for_clean`) is copied back into the database
        // now, by the clean, instead of by the next Airflow worker that commits. PASSIVE never
        // waits for readers; whatever it cannot copy yet, a later checkpoint will.
        let _ = self.conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
    }

    fn nth_expired_id(&mut self, cutoff: Timestamp, after_id: i64, n: u64) -> Result<Option<i64>> {
        let ctx = self.ctx("cannot find the next batch of expired rows");
        let offset = i64::try_from(n.saturating_sub(1)).unwrap_or(i64::MAX);
        self.conn
            .query_row(
                "SELECT id FROM task_state_store WHERE id > ?1 AND expires_at < ?2 ORDER BY id LIMIT 1 OFFSET ?3",
                params![after_id, cutoff.to_sqlite_text(), offset],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn delete_expired_range(
        &mut self,
        cutoff: Timestamp,
        after_id: i64,
        up_to_id: Option<i64>,
    ) -> Result<u64> {
        let ctx = self.ctx("cannot delete expired rows");
        let cutoff = cutoff.to_sqlite_text();
        let Some(up_to_id) = up_to_id else {
            return self.delete_expired_unbounded(&cutoff, after_id).map_err(|e| Error::db(ctx, Cause(e)));
        };
        self.conn
            .execute(
                "DELETE FROM task_state_store WHERE id > ?1 AND id <= ?2 AND expires_at < ?3",
                params![after_id, up_to_id, cutoff],
            )
            .map(count)
            .map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn expired_rows(
        &mut self,
        cutoff: Timestamp,
        after_id: i64,
        up_to_id: Option<i64>,
        limit: u64,
    ) -> Result<Vec<(i64, TaskEntry)>> {
        let ctx = self.ctx("cannot read expired rows");
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {TASK_COLUMNS}, id FROM task_state_store \
                 WHERE id > ?1 AND id <= ?2 AND expires_at < ?3 ORDER BY id LIMIT ?4"
            ))
            .map_err(sql_err(&ctx))?;
        stmt.query_map(
            params![
                after_id,
                up_to_id.unwrap_or(i64::MAX),
                cutoff.to_sqlite_text(),
                i64::try_from(limit).unwrap_or(i64::MAX)
            ],
            |row| Ok((row.get(8)?, task_entry(row)?)),
        )
        .and_then(Iterator::collect)
        .map_err(|e| Error::db(ctx.clone(), Cause(e)))
    }

    fn delete_orphan_row(&mut self, asset_id: i64, key: &str) -> Result<u64> {
        let ctx = self.ctx("cannot delete orphaned asset rows");
        let sql = format!(
            r#"DELETE FROM asset_state_store WHERE asset_id = ?1 AND "key" = ?2 AND {}"#,
            orphan_condition("asset_state_store")
        );
        self.conn.execute(&sql, params![asset_id, key]).map(count).map_err(|e| Error::db(ctx, Cause(e)))
    }

    fn delete_orphans(&mut self, limit: Option<u64>) -> Result<u64> {
        let ctx = self.ctx("cannot delete orphaned asset rows");
        let sql = format!(
            "DELETE FROM asset_state_store WHERE rowid IN (SELECT s.rowid FROM asset_state_store s WHERE {} LIMIT ?1)",
            orphan_condition("s")
        );
        let limit = limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        self.conn.execute(&sql, [limit]).map(count).map_err(|e| Error::db(ctx, Cause(e)))
    }
}

impl Stats for SqliteStore {
    fn task_groups(&mut self, now: Timestamp, soon: Timestamp, by_task: bool) -> Result<Vec<TaskGroup>> {
        let ctx = self.ctx("cannot read task_state_store");
        let task = if by_task { "task_id" } else { "NULL" };
        let group = if by_task { "dag_id, task_id" } else { "dag_id" };
        let sql = format!(
            "SELECT dag_id, {task}, count(*), coalesce(sum(length(CAST(value AS BLOB))), 0), \
             sum(CASE WHEN expires_at < ?1 THEN 1 ELSE 0 END), \
             sum(CASE WHEN expires_at >= ?1 AND expires_at < ?2 THEN 1 ELSE 0 END), \
             sum(CASE WHEN expires_at IS NULL THEN 1 ELSE 0 END), min(updated_at), max(updated_at) \
             FROM task_state_store GROUP BY {group} ORDER BY {group}"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(sql_err(&ctx))?;
        stmt.query_map(params![now.to_sqlite_text(), soon.to_sqlite_text()], |r| {
            Ok(TaskGroup {
                dag_id: r.get(0)?,
                task_id: r.get(1)?,
                rows: unsigned(r.get(2)?),
                value_bytes: unsigned(r.get(3)?),
                expired: unsigned(r.get(4)?),
                expiring_soon: unsigned(r.get(5)?),
                never_expiring: unsigned(r.get(6)?),
                oldest_update: stored_time(r.get_ref(7)?),
                newest_update: stored_time(r.get_ref(8)?),
            })
        })
        .and_then(Iterator::collect)
        .map_err(|e| Error::db(ctx.clone(), Cause(e)))
    }

    fn asset_groups(&mut self) -> Result<Vec<AssetGroup>> {
        let ctx = self.ctx("cannot read asset_state_store");
        let mut stmt = self
            .conn
            .prepare(
                "SELECT s.asset_id, a.name, count(*), coalesce(sum(length(CAST(s.value AS BLOB))), 0), \
                 min(s.updated_at), max(s.updated_at) FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id \
                 GROUP BY s.asset_id, a.name ORDER BY s.asset_id",
            )
            .map_err(sql_err(&ctx))?;
        stmt.query_map([], |r| {
            Ok(AssetGroup {
                asset_id: r.get(0)?,
                asset_name: r.get(1)?,
                rows: unsigned(r.get(2)?),
                value_bytes: unsigned(r.get(3)?),
                oldest_update: stored_time(r.get_ref(4)?),
                newest_update: stored_time(r.get_ref(5)?),
            })
        })
        .and_then(Iterator::collect)
        .map_err(|e| Error::db(ctx.clone(), Cause(e)))
    }

    fn largest_values(&mut self, limit: u64) -> Result<Vec<LargeValue>> {
        let ctx = self.ctx("cannot read the largest values");
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut found = Vec::new();
        let mut stmt = self
            .conn
            .prepare(
                r#"SELECT dag_id, run_id, task_id, map_index, "key", length(CAST(value AS BLOB)) AS n
                   FROM task_state_store ORDER BY n DESC LIMIT ?1"#,
            )
            .map_err(sql_err(&ctx))?;
        let tasks = stmt
            .query_map([limit], |r| {
                Ok(LargeValue {
                    scope: task_scope_label(
                        &r.get::<_, String>(0)?,
                        &r.get::<_, String>(1)?,
                        &r.get::<_, String>(2)?,
                        r.get(3)?,
                    ),
                    key: r.get(4)?,
                    bytes: unsigned(r.get(5)?),
                })
            })
            .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
            .map_err(|e| Error::db(ctx.clone(), Cause(e)))?;
        found.extend(tasks);
        let mut stmt = self
            .conn
            .prepare(
                r#"SELECT s.asset_id, a.name, s."key", length(CAST(s.value AS BLOB)) AS n
                   FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id ORDER BY n DESC LIMIT ?1"#,
            )
            .map_err(sql_err(&ctx))?;
        let assets = stmt
            .query_map([limit], |r| {
                Ok(LargeValue {
                    scope: asset_scope_label(r.get(0)?, r.get::<_, Option<String>>(1)?.as_deref()),
                    key: r.get(2)?,
                    bytes: unsigned(r.get(3)?),
                })
            })
            .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
            .map_err(|e| Error::db(ctx.clone(), Cause(e)))?;
        found.extend(assets);
        Ok(largest_first(found, limit))
    }

    fn table_sizes(&mut self) -> Result<Vec<(String, u64)>> {
        let ctx = self.ctx("cannot read the table sizes");
        // dbstat counts the pages of each b-tree; an index's pages belong to its table.
        let mut sizes = Vec::new();
        for table in STATE_TABLES {
            let bytes: i64 = self
                .conn
                .query_row(
                    "SELECT coalesce(sum(d.pgsize), 0) FROM dbstat d JOIN sqlite_master m ON m.name = d.name \
                     WHERE m.tbl_name = ?1",
                    [table],
                    |r| r.get(0),
                )
                .map_err(|e| Error::db(ctx.clone(), Cause(e)))?;
            sizes.push(((*table).to_string(), unsigned(bytes)));
        }
        Ok(sizes)
    }
}

/// Airflow's stored timestamp text, `YYYY-MM-DD HH:MM:SS.ffffff`, as a GLOB pattern: a GLOB
/// without `*` or `?` matches text of exactly this length.
const AIRFLOW_TIME_GLOB: &str = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]";

/// The same test as [`AIRFLOW_TIME_GLOB`], for the sample's words.
fn is_airflow_time_text(value: ValueRef<'_>) -> bool {
    let ValueRef::Text(b) = value else { return false };
    b.len() == 26
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b' ',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            _ => c.is_ascii_digit(),
        })
}

/// A timestamp column that is not Airflow's text, in words: its text, or its storage type.
fn describe_stored_time(column: &str, value: ValueRef<'_>) -> Option<String> {
    if is_airflow_time_text(value) {
        return None;
    }
    Some(match value {
        ValueRef::Null => format!("{column} is NULL"),
        ValueRef::Text(b) => format!("{column} {}", quote(&String::from_utf8_lossy(b))),
        ValueRef::Integer(i) => format!("{column} {i} (an integer)"),
        ValueRef::Real(f) => format!("{column} {f} (a real)"),
        ValueRef::Blob(_) => format!("{column} is a blob"),
    })
}

/// `dag_id, run_id, task_id, map_index` from `start` on.
fn task_place(row: &Row<'_>, start: usize) -> rusqlite::Result<Place> {
    Ok(Place::Task(TaskScope {
        dag_id: text_lossy(row, start)?,
        run_id: text_lossy(row, start + 1)?,
        task_id: text_lossy(row, start + 2)?,
        map_index: row.get(start + 3)?,
    }))
}

fn sql_limit(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl SqliteStore {
    fn count_rows(&self, what: &str, sql: &str, params: impl rusqlite::Params) -> Result<u64> {
        let ctx = self.ctx(what);
        self.conn.query_row(sql, params, |r| r.get::<_, i64>(0)).map(unsigned).map_err(|e| Error::db(ctx, e))
    }

    fn found_rows(
        &self,
        what: &str,
        sql: &str,
        params: impl rusqlite::Params,
        map: impl FnMut(&Row<'_>) -> rusqlite::Result<FoundRow>,
    ) -> Result<Vec<FoundRow>> {
        let ctx = self.ctx(what);
        let mut stmt = self.conn.prepare(sql).map_err(sql_err(&ctx))?;
        stmt.query_map(params, map).and_then(Iterator::collect).map_err(|e| Error::db(ctx.clone(), e))
    }

    /// Rows of both tables whose `measure` (an SQL expression over the row's own columns,
    /// e.g. the key's length) exceeds `bound`, task rows first.
    fn over_bound(&self, what: &str, measure: &str, bound: u64, sample: u64, unit: &str) -> Result<Finding> {
        let bound = sql_limit(bound);
        let detail = |n: i64| format!("{n} {unit}");
        let tasks = Finding {
            count: self.count_rows(
                what,
                &format!("SELECT count(*) FROM task_state_store t WHERE {measure} > ?1"),
                [bound],
            )?,
            sample: self.found_rows(
                what,
                &format!(
                    r#"SELECT t.dag_id, t.run_id, t.task_id, t.map_index, t."key", {measure}
                       FROM task_state_store t WHERE {measure} > ?1 ORDER BY t.id LIMIT ?2"#
                ),
                [bound, sql_limit(sample)],
                |r| {
                    Ok(FoundRow {
                        place: task_place(r, 0)?,
                        key: text_lossy(r, 4)?,
                        detail: detail(r.get(5)?),
                    })
                },
            )?,
        };
        let assets = Finding {
            count: self.count_rows(
                what,
                &format!("SELECT count(*) FROM asset_state_store t WHERE {measure} > ?1"),
                [bound],
            )?,
            sample: self.found_rows(
                what,
                &format!(
                    r#"SELECT t.asset_id, a.name, t."key", {measure}
                       FROM asset_state_store t LEFT JOIN asset a ON a.id = t.asset_id
                       WHERE {measure} > ?1 ORDER BY t.asset_id, t."key" LIMIT ?2"#
                ),
                [bound, sql_limit(sample)],
                |r| {
                    Ok(FoundRow {
                        place: Place::Asset { asset_id: r.get(0)?, asset_name: r.get(1)? },
                        key: text_lossy(r, 2)?,
                        detail: detail(r.get(3)?),
                    })
                },
            )?,
        };
        Ok(tasks.and(assets, sample))
    }
}

impl Diagnose for SqliteStore {
    fn mismatched_dag_runs(&mut self, sample: u64) -> Result<Finding> {
        let what = "cannot compare task rows with their dag runs";
        let from = "FROM task_state_store t JOIN dag_run d ON d.id = t.dag_run_id \
                    WHERE t.dag_id <> d.dag_id OR t.run_id <> d.run_id";
        Ok(Finding {
            count: self.count_rows(what, &format!("SELECT count(*) {from}"), [])?,
            sample: self.found_rows(
                what,
                &format!(
                    r#"SELECT t.dag_id, t.run_id, t.task_id, t.map_index, t."key", t.dag_run_id, d.dag_id, d.run_id
                       {from} ORDER BY t.id LIMIT ?1"#
                ),
                [sql_limit(sample)],
                |r| {
                    Ok(FoundRow {
                        place: task_place(r, 0)?,
                        key: text_lossy(r, 4)?,
                        detail: format!(
                            "dag_run {} is dag_id={} run_id={}",
                            r.get::<_, i64>(5)?,
                            quote(&text_lossy(r, 6)?),
                            quote(&text_lossy(r, 7)?)
                        ),
                    })
                },
            )?,
        })
    }

    fn task_rows_without_dag_run(&mut self, sample: u64) -> Result<Finding> {
        let what = "cannot look for task rows without a dag run";
        let from =
            "FROM task_state_store t WHERE NOT EXISTS (SELECT 1 FROM dag_run d WHERE d.id = t.dag_run_id)";
        Ok(Finding {
            count: self.count_rows(what, &format!("SELECT count(*) {from}"), [])?,
            sample: self.found_rows(
                what,
                &format!(
                    r#"SELECT t.dag_id, t.run_id, t.task_id, t.map_index, t."key", t.dag_run_id
                       {from} ORDER BY t.id LIMIT ?1"#
                ),
                [sql_limit(sample)],
                |r| {
                    Ok(FoundRow {
                        place: task_place(r, 0)?,
                        key: text_lossy(r, 4)?,
                        detail: format!("dag_run_id {} does not exist", r.get::<_, i64>(5)?),
                    })
                },
            )?,
        })
    }

    fn asset_rows_without_asset(&mut self, sample: u64) -> Result<Finding> {
        let what = "cannot look for asset rows without an asset";
        let from =
            "FROM asset_state_store s WHERE NOT EXISTS (SELECT 1 FROM asset a WHERE a.id = s.asset_id)";
        Ok(Finding {
            count: self.count_rows(what, &format!("SELECT count(*) {from}"), [])?,
            sample: self.found_rows(
                what,
                &format!(r#"SELECT s.asset_id, s."key" {from} ORDER BY s.asset_id, s."key" LIMIT ?1"#),
                [sql_limit(sample)],
                |r| {
                    let asset_id: i64 = r.get(0)?;
                    Ok(FoundRow {
                        place: Place::Asset { asset_id, asset_name: None },
                        key: text_lossy(r, 1)?,
                        detail: format!("asset id {asset_id} does not exist"),
                    })
                },
            )?,
        })
    }

    fn long_keys(&mut self, max_chars: u64, sample: u64) -> Result<Finding> {
        // length() of TEXT counts characters.
        self.over_bound("cannot measure the keys", r#"length(t."key")"#, max_chars, sample, "characters")
    }

    fn large_values(&mut self, max_bytes: u64, sample: u64) -> Result<Finding> {
        self.over_bound(
            "cannot measure the values",
            "length(CAST(t.value AS BLOB))",
            max_bytes,
            sample,
            "bytes",
        )
    }

    fn malformed_timestamps(&mut self, sample: u64) -> Result<Option<Finding>> {
        let what = "cannot read the timestamps";
        let bad = |column: &str| format!("NOT (typeof({column}) = 'text' AND {column} GLOB ?1)");
        let task_where =
            format!("{} OR (t.expires_at IS NOT NULL AND {})", bad("t.updated_at"), bad("t.expires_at"));
        let asset_where = bad("s.updated_at");
        let tasks = Finding {
            count: self.count_rows(
                what,
                &format!("SELECT count(*) FROM task_state_store t WHERE {task_where}"),
                [AIRFLOW_TIME_GLOB],
            )?,
            sample: self.found_rows(
                what,
                &format!(
                    r#"SELECT t.dag_id, t.run_id, t.task_id, t.map_index, t."key", t.updated_at, t.expires_at
                       FROM task_state_store t WHERE {task_where} ORDER BY t.id LIMIT ?2"#
                ),
                params![AIRFLOW_TIME_GLOB, sql_limit(sample)],
                |r| {
                    let expires = r.get_ref(6)?;
                    let details: Vec<String> = [
                        describe_stored_time("updated_at", r.get_ref(5)?),
                        (expires != ValueRef::Null)
                            .then(|| describe_stored_time("expires_at", expires))
                            .flatten(),
                    ]
                    .into_iter()
                    .flatten()
                    .collect();
                    Ok(FoundRow {
                        place: task_place(r, 0)?,
                        key: text_lossy(r, 4)?,
                        detail: details.join(", "),
                    })
                },
            )?,
        };
        let assets = Finding {
            count: self.count_rows(
                what,
                &format!("SELECT count(*) FROM asset_state_store s WHERE {asset_where}"),
                [AIRFLOW_TIME_GLOB],
            )?,
            sample: self.found_rows(
                what,
                &format!(
                    r#"SELECT s.asset_id, a.name, s."key", s.updated_at
                       FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id
                       WHERE {asset_where} ORDER BY s.asset_id, s."key" LIMIT ?2"#
                ),
                params![AIRFLOW_TIME_GLOB, sql_limit(sample)],
                |r| {
                    Ok(FoundRow {
                        place: Place::Asset { asset_id: r.get(0)?, asset_name: r.get(1)? },
                        key: text_lossy(r, 2)?,
                        detail: describe_stored_time("updated_at", r.get_ref(3)?).unwrap_or_default(),
                    })
                },
            )?,
        };
        Ok(Some(tasks.and(assets, sample)))
    }

    fn asset_rows_after(&mut self, after: Option<(i64, &str)>, limit: u64) -> Result<Vec<AssetEntry>> {
        let ctx = self.ctx("cannot read asset_state_store");
        let sql = format!(
            r#"SELECT {ASSET_COLUMNS} FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id
               WHERE ?1 IS NULL OR s.asset_id > ?1 OR (s.asset_id = ?1 AND s."key" > ?2)
               ORDER BY s.asset_id, s."key" LIMIT ?3"#
        );
        let mut stmt = self.conn.prepare(&sql).map_err(sql_err(&ctx))?;
        stmt.query_map(params![after.map(|a| a.0), after.map(|a| a.1), sql_limit(limit)], asset_entry)
            .and_then(Iterator::collect)
            .map_err(|e| Error::db(ctx.clone(), e))
    }
}

/// The WHERE clause of `list`'s task filters (and of a primary-key page), with its values.
fn task_filter_where(filter: &TaskFilter, after_id: Option<i64>) -> (String, Vec<rusqlite::types::Value>) {
    let mut clauses: Vec<&str> = Vec::new();
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    for (clause, value) in
        [("dag_id = ?", &filter.dag_id), ("run_id = ?", &filter.run_id), ("task_id = ?", &filter.task_id)]
    {
        if let Some(v) = value {
            clauses.push(clause);
            args.push(v.clone().into());
        }
    }
    if let Some(map_index) = filter.map_index {
        clauses.push("map_index = ?");
        args.push(map_index.into());
    }
    if let Some(cutoff) = filter.expired_before {
        clauses.push("expires_at < ?");
        args.push(cutoff.to_sqlite_text().into());
    }
    if filter.external_only {
        clauses.push("value LIKE ? ESCAPE '!'");
        args.push(EXTERNAL_REF_LIKE.to_string().into());
    }
    if let Some(after_id) = after_id {
        clauses.push("id > ?");
        args.push(after_id.into());
    }
    let where_sql =
        if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
    (where_sql, args)
}

/// The WHERE clause of a task scope, with map_index bound as NULL-matching-anything when all
/// map indices are meant (`?4 IS NULL`), so one statement serves both forms of `clear`.
fn task_scope_where(scope: &TaskScope, all_map_indices: bool) -> (&'static str, Option<i64>) {
    (
        "dag_id = ?1 AND run_id = ?2 AND task_id = ?3 AND (?4 IS NULL OR map_index = ?4)",
        if all_map_indices { None } else { Some(scope.map_index) },
    )
}

/// A sandbox file: created when missing, never an existing Airflow metastore.
pub(crate) struct SqliteSandbox {
    conn: Connection,
    location: String,
}

impl SqliteSandbox {
    pub(crate) fn open(url: &DbUrl) -> Result<Self> {
        let Some(SqliteTarget::File(path)) = url.sqlite_target() else {
            return Err(Error::Usage(
                "a sandbox needs a SQLite file (an in-memory database would vanish at exit)".to_string(),
            ));
        };
        let location = format!("SQLite database {}", path.display());
        let conn =
            Connection::open(&path).map_err(|e| Error::db(format!("cannot open {location}"), Cause(e)))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| Error::db(&location, Cause(e)))?;
        conn.execute_batch("PRAGMA foreign_keys = ON").map_err(|e| Error::db(&location, Cause(e)))?;
        Ok(SqliteSandbox { conn, location })
    }

    fn require_marker(&self) -> Result<()> {
        let marked: bool = self
            .conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
                [schema::SANDBOX_MARKER_TABLE],
                |r| r.get(0),
            )
            .map_err(|e| Error::db(format!("cannot read {}", self.location), Cause(e)))?;
        if marked {
            Ok(())
        } else {
            Err(Error::Usage(format!(
                "{} was not created by `state-store sandbox create`; sandbox commands never change a real metastore",
                self.location
            )))
        }
    }
}

impl super::Sandbox for SqliteSandbox {
    fn create(&mut self) -> Result<()> {
        let mut existing = 0;
        for table in schema::AIRFLOW_TABLES {
            let found: bool = self
                .conn
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
                    [table],
                    |r| r.get(0),
                )
                .map_err(|e| Error::db(format!("cannot read {}", self.location), Cause(e)))?;
            existing += usize::from(found);
        }
        if existing > 0 {
            return Err(Error::Usage(format!(
                "{} already has Airflow tables; a sandbox starts empty",
                self.location
            )));
        }
        let ctx = format!("cannot create the tables in {}", self.location);
        // Airflow switches every SQLite metastore to WAL; a sandbox behaves the same way.
        self.conn.pragma_update(None, "journal_mode", "wal").map_err(|e| Error::db(&ctx, Cause(e)))?;
        let tx = self.conn.transaction().map_err(|e| Error::db(&ctx, Cause(e)))?;
        for statement in schema::SQLITE_DDL {
            tx.execute_batch(statement).map_err(|e| Error::db(&ctx, Cause(e)))?;
        }
        tx.execute(
            "INSERT INTO alembic_version (version_num) VALUES (?1)",
            [schema::AIRFLOW_33_ALEMBIC_REVISION],
        )
        .map_err(|e| Error::db(&ctx, Cause(e)))?;
        tx.execute_batch(&format!(
            "CREATE TABLE {} (created_at TIMESTAMP NOT NULL)",
            schema::SANDBOX_MARKER_TABLE
        ))
        .map_err(|e| Error::db(&ctx, Cause(e)))?;
        tx.execute(
            &format!("INSERT INTO {} (created_at) VALUES (?1)", schema::SANDBOX_MARKER_TABLE),
            [Timestamp::now().to_sqlite_text()],
        )
        .map_err(|e| Error::db(&ctx, Cause(e)))?;
        tx.commit().map_err(|e| Error::db(&ctx, Cause(e)))
    }

    fn add_dag_run(&mut self, dag_id: &str, run_id: &str) -> Result<i64> {
        self.require_marker()?;
        let now = Timestamp::now().to_sqlite_text();
        self.conn
            .execute(
                "INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, queued_at, start_date, created_at, updated_at) \
                 VALUES (?1, ?2, 'manual', 'running', ?3, ?3, ?3, ?3, ?3)",
                params![dag_id, run_id, now],
            )
            .map_err(|e| Error::db(format!("cannot add the dag run to {}", self.location), Cause(e)))?;
        Ok(self.conn.last_insert_rowid())
    }

    fn add_task_instance(&mut self, dag_id: &str, run_id: &str, task_id: &str, map_index: i64) -> Result<()> {
        self.require_marker()?;
        // As the scheduler creates it: no state yet, try 0, the default pool; the key is a
        // random uuid in the 32 hex digits of SQLAlchemy's CHAR(32) uuid type.
        self.conn
            .execute(
                "INSERT INTO task_instance (id, task_id, dag_id, run_id, map_index, try_number, max_tries, \
                 pool, pool_slots, queue, priority_weight, operator, updated_at) \
                 VALUES (lower(hex(randomblob(16))), ?1, ?2, ?3, ?4, 0, 0, 'default_pool', 1, 'default', 1, \
                 'PythonOperator', ?5)",
                params![task_id, dag_id, run_id, map_index, Timestamp::now().to_sqlite_text()],
            )
            .map_err(|e| Error::db(format!("cannot add the task instance to {}", self.location), Cause(e)))?;
        Ok(())
    }

    fn add_asset(&mut self, name: &str, uri: &str, active: bool) -> Result<i64> {
        self.require_marker()?;
        let ctx = format!("cannot add the asset to {}", self.location);
        let now = Timestamp::now().to_sqlite_text();
        let tx = self.conn.transaction().map_err(|e| Error::db(&ctx, Cause(e)))?;
        tx.execute(
            r#"INSERT INTO asset (name, uri, "group", extra, created_at, updated_at) VALUES (?1, ?2, 'asset', '{}', ?3, ?3)"#,
            params![name, uri, now],
        )
        .map_err(|e| Error::db(&ctx, Cause(e)))?;
        let id = tx.last_insert_rowid();
        if active {
            tx.execute("INSERT INTO asset_active (name, uri) VALUES (?1, ?2)", params![name, uri])
                .map_err(|e| Error::db(&ctx, Cause(e)))?;
        }
        tx.commit().map_err(|e| Error::db(&ctx, Cause(e)))?;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Many runs taking and ending the clean lock as fast as they can, from threads (`flock`
    /// locks are per open file, so threads contend as processes do): never two holders at once,
    /// and no file left. Without the check that the path still names the locked file, two
    /// holders show up within a few thousand rounds.
    #[test]
    fn the_clean_lock_has_one_holder_at_a_time_and_leaves_no_file() {
        let dir = std::env::temp_dir().join(format!("state-store-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("airflow.db{CLEAN_LOCK_SUFFIX}"));
        let holders = AtomicUsize::new(0);
        let (taken, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for _ in 0..6 {
                scope.spawn(|| {
                    for _ in 0..3000 {
                        if let Some(lock) = CleanLock::acquire(path.clone()).unwrap() {
                            let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            taken.fetch_add(1, Ordering::SeqCst);
                            std::thread::yield_now();
                            holders.fetch_sub(1, Ordering::SeqCst);
                            drop(lock);
                        }
                    }
                });
            }
        });
        assert_eq!(most.load(Ordering::SeqCst), 1, "two runs held the clean lock at once");
        assert!(taken.load(Ordering::SeqCst) > 100, "the lock was taken");
        assert!(!path.exists(), "the lock file is removed by its last holder");

        // A file left by a killed run is taken over, and removed at the end.
        std::fs::write(&path, b"").unwrap();
        let lock = CleanLock::acquire(path.clone()).unwrap().expect("a stale file is no lock");
        assert!(CleanLock::acquire(path.clone()).unwrap().is_none(), "held");
        drop(lock);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
