//! The clean's statements: counts for a dry run, the expired rows a batch deletes, and the
//! state of inactive assets.
//!
//! A batch is a range of the walk (a [`Cursor`] to the next): the first `n` expired rows after
//! the last batch's end, deleted by `<after> AND <up to> AND expires_at < ?`. The DELETE checks
//! the expiry again, so a key a worker refreshes during the run survives, and each batch starts
//! where the last one ended instead of at the head of the `expires_at` index. The walk follows
//! the primary key, or, where the database asks for it (SQLite), the dag runs: see [`Cursor`].
//! This is the portable way; a dialect with a cheaper one overrides
//! [`Connection::delete_expired_batch`] for the walk by id.

use super::Store;
use super::dialect::Dialect;
use super::dialect::{Batch, Connection, all, count, first};
use super::query::{Fields, Param, Query};
use super::store::{ASSET_ROWS, TASK_COLUMNS, asset_entry, task_entry};
use crate::error::Result;
use crate::model::{AssetEntry, TaskEntry};
use crate::time::Timestamp;

/// Expired task rows grouped by dag, for a dry run (and its document).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct DagCount {
    pub dag_id: String,
    pub rows: u64,
}

/// Orphaned asset rows grouped by asset, for a dry run (and its document).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct AssetCount {
    pub asset_id: i64,
    pub asset_name: Option<String>,
    pub rows: u64,
}

/// Where a clean's walk of the task table stands: after the last row its batches covered.
///
/// The walk by id is every database's. The walk by dag run is SQLite's, for batches, on a
/// table whose ids scatter the rows of its dag runs (the first key of every dag run, then the
/// second, as concurrent runs write them): there a batch of ids holds rows of every dag run,
/// with entries on nearly every page of the unique `(dag_run_id, task_id, map_index, key)` and
/// the lookup `(dag_id, run_id, …)` index, which each batch's commit then rewrites. Walked by
/// dag run, a batch's entries sit together in both (docs/performance.md, ids that do not
/// follow the dag runs). The unique index serves the order up to the dag run; within one,
/// SQLite sorts its rows by id. Where a clean may walk by dag run is the dialect's call
/// ([`Connection::walks_by_run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cursor {
    /// After this id, in id order.
    Id(i64),
    /// After row `id` of dag run `dag_run`, in order of dag run, then id.
    Run { dag_run: i64, id: i64 },
}

impl Cursor {
    /// Before every row of the walk by id.
    pub(crate) const IDS: Cursor = Cursor::Id(i64::MIN);
    /// Before every row of the walk by dag run.
    pub(crate) const RUNS: Cursor = Cursor::Run { dag_run: i64::MIN, id: i64::MIN };

    /// Whether no row is behind it yet.
    pub(crate) fn at_start(self) -> bool {
        self == Cursor::IDS || self == Cursor::RUNS
    }

    /// How far along the walk's leading column it is: the id, or the dag run's id.
    pub(crate) fn position(self) -> i64 {
        match self {
            Cursor::Id(id) => id,
            Cursor::Run { dag_run, .. } => dag_run,
        }
    }

    /// The id of the row it is at.
    pub(crate) fn id(self) -> i64 {
        match self {
            Cursor::Id(id) | Cursor::Run { id, .. } => id,
        }
    }

    /// How many values of the walk's leading column, from `first`, it has walked: the ids up
    /// to its own, or the dag runs before its own, which it has walked only in part.
    pub(crate) fn walked(self, first: i64) -> i64 {
        match self {
            Cursor::Id(id) => id.saturating_sub(first).saturating_add(1),
            Cursor::Run { dag_run, .. } => dag_run.saturating_sub(first),
        }
    }

    /// The columns that place a row in this walk, as [`Cursor::read`] reads them.
    fn columns(self) -> &'static str {
        if matches!(self, Cursor::Id(_)) { "id" } else { "dag_run_id, id" }
    }

    /// ` WHERE <after this>`; at the start of the walk, every row: the row with id -2^63, and
    /// one whose dag run id SQLite holds as a real below -2^63, are no more before the start
    /// than any other.
    fn after<'a>(self, query: Query<'a>) -> Query<'a> {
        match self {
            Cursor::IDS => query.and(" WHERE id >= ?", i64::MIN),
            Cursor::RUNS => query.push(" WHERE TRUE"),
            Cursor::Id(id) => query.and(" WHERE id > ?", id),
            Cursor::Run { dag_run, id } => {
                query.push(" WHERE (dag_run_id, id) > (?, ?)").bind(dag_run).bind(id)
            }
        }
    }

    /// ` AND <at or before up_to>`, each bound in its own walk's terms; nothing at the end of
    /// the walk (`None`).
    fn up_to(query: Query<'_>, up_to: Option<Cursor>) -> Query<'_> {
        match up_to {
            None => query,
            Some(Cursor::Id(id)) => query.and(" AND id <= ?", id),
            Some(Cursor::Run { dag_run, id }) => {
                query.push(" AND (dag_run_id, id) <= (?, ?)").bind(dag_run).bind(id)
            }
        }
    }

    /// ` AND <the row has expired>`. In the walk by dag run the `expires_at` index is kept out
    /// of the plan (SQLite's unary `+`): given the choice, SQLite 3.50 read a batch's end from
    /// that index and sorted every expired row of the table by dag run to find it, once per
    /// batch, where the unique index walks only the batch's rows.
    fn expired(self) -> &'static str {
        if matches!(self, Cursor::Id(_)) { " AND expires_at < ?" } else { " AND +expires_at < ?" }
    }

    /// ` ORDER BY` the walk.
    fn order(self) -> &'static str {
        if matches!(self, Cursor::Id(_)) { " ORDER BY id" } else { " ORDER BY dag_run_id, id" }
    }

    /// A row's place in this walk, from the cursor's columns.
    fn read(self, f: &mut Fields) -> super::query::Decoded<Cursor> {
        Ok(match self {
            Cursor::Id(_) => Cursor::Id(f.int()?),
            Cursor::Run { .. } => Cursor::Run { dag_run: f.int()?, id: f.int()? },
        })
    }
}

impl std::fmt::Display for Cursor {
    /// The row a cursor is at, for `--verbose`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cursor::Id(id) => write!(f, "id {id}"),
            // Two ids of two tables: the dag run's, and the row's within it (not in order
            // from one dag run to the next).
            Cursor::Run { dag_run, id } => write!(f, "dag_run_id {dag_run} (task_state_store id {id})"),
        }
    }
}

/// What one batch of a clean's walk did: rows deleted, and where it ended (`None` when no
/// expired row is left after it, which ends the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Walked {
    pub deleted: u64,
    pub last: Option<Cursor>,
}

/// Width, in ids, of one statement of an unbatched clean where a dialect deletes every expired
/// row in one transaction but several statements (SQLite, MySQL): about a second's work on a
/// 2-core machine at any table size.
pub(super) const DELETE_WINDOW_IDS: i64 = 100_000;

/// The rows of `asset_state_store s` whose asset is not active: no `asset_active` row with the
/// same name AND uri, or no asset row at all (possible when foreign keys were off).
pub(super) const ORPHAN: &str = "NOT EXISTS (SELECT 1 FROM asset oa JOIN asset_active oaa \
     ON oaa.name = oa.name AND oaa.uri = oa.uri WHERE oa.id = s.asset_id)";

/// [`ORPHAN`] for a DELETE, which names the table itself.
pub(super) const ORPHAN_ROW: &str = "NOT EXISTS (SELECT 1 FROM asset oa JOIN asset_active oaa \
     ON oaa.name = oa.name AND oaa.uri = oa.uri WHERE oa.id = asset_state_store.asset_id)";

/// Where the `n`-th expired row after `after` is: where a batch of `n` ends. A dag run whose
/// id SQLite holds as something else than an integer (written with foreign keys off) is never
/// such an end: the batch whose range holds its rows deletes them, and the last batch, open at
/// its end, whatever sorts after every integer.
pub(super) fn nth_expired<C: Connection + ?Sized>(
    conn: &mut C,
    cutoff: Timestamp,
    after: Cursor,
    n: u64,
) -> Result<Option<Cursor>> {
    let select = Query::new("SELECT ").push(after.columns()).push(" FROM task_state_store");
    let query = after.after(select).and(after.expired(), cutoff);
    let query = match after {
        Cursor::Id(_) => query,
        Cursor::Run { .. } => query.push(" AND typeof(dag_run_id) = 'integer'"),
    };
    let query = query.push(after.order()).and(" LIMIT 1 OFFSET ?", n.saturating_sub(1));
    first(conn, "cannot find the next batch of expired rows", &query, |f| after.read(f))
}

/// [`nth_expired`] in the walk by id.
pub(super) fn nth_expired_id<C: Connection + ?Sized>(
    conn: &mut C,
    cutoff: Timestamp,
    after_id: i64,
    n: u64,
) -> Result<Option<i64>> {
    Ok(nth_expired(conn, cutoff, Cursor::Id(after_id), n)?.map(Cursor::position))
}

/// A batch found by its `n`-th expired row and deleted up to it: two statements, each of
/// them an index range scan from `after_id`.
pub(super) fn batch_by_nth_expired<C: Connection + ?Sized>(
    conn: &mut C,
    cutoff: Timestamp,
    after_id: i64,
    n: u64,
) -> Result<Batch> {
    let last_id = nth_expired_id(conn, cutoff, after_id, n)?;
    let deleted = conn.delete_expired_range(cutoff, after_id, last_id)?;
    Ok(Batch { deleted, last_id })
}

/// The expired rows of an id range, in one statement (one transaction under autocommit).
pub(super) fn delete_range<C: Connection + ?Sized>(
    conn: &mut C,
    cutoff: Timestamp,
    after_id: i64,
    up_to_id: Option<i64>,
) -> Result<u64> {
    delete_walked(conn, cutoff, Cursor::Id(after_id), up_to_id.map(Cursor::Id))
}

/// The expired rows after `after` up to `up_to` in its walk (to the end when `None`), in one
/// statement.
fn delete_walked<C: Connection + ?Sized>(
    conn: &mut C,
    cutoff: Timestamp,
    after: Cursor,
    up_to: Option<Cursor>,
) -> Result<u64> {
    let query = after.after(Query::new("DELETE FROM task_state_store"));
    let query = Cursor::up_to(query, up_to).and(after.expired(), cutoff);
    conn.run("cannot delete expired rows", &query)
}

/// The lowest and the highest id of the task table, `None` when it is empty: two index
/// lookups.
pub(super) fn id_bounds<C: Connection + ?Sized>(conn: &mut C) -> Result<Option<(i64, i64)>> {
    bounds(conn, Query::new(ID_BOUNDS))
}

/// The ends of the ids, one index lookup each. (`SELECT min(id), max(id)` is two lookups on
/// PostgreSQL and MySQL, but SQLite answers both aggregates of one query by scanning a whole
/// index: 6.8 s at 10,000,000 rows.)
pub(super) const ID_BOUNDS: &str =
    "SELECT (SELECT min(id) FROM task_state_store), (SELECT max(id) FROM task_state_store)";
/// The ends of the dag run ids, one lookup each in the unique index, which leads with them.
const RUN_BOUNDS: &str = "SELECT (SELECT min(dag_run_id) FROM task_state_store), \
     (SELECT max(dag_run_id) FROM task_state_store)";

fn bounds<C: Connection + ?Sized>(conn: &mut C, query: Query<'_>) -> Result<Option<(i64, i64)>> {
    let bounds = first(conn, "cannot read the ids", &query, |f| Ok((f.opt_int()?, f.opt_int()?)))?;
    Ok(bounds.and_then(|(low, high)| low.zip(high)))
}

impl Store {
    /// Expired task rows in all, for the progress bar of a clean run at a terminal.
    pub(crate) fn count_expired(&mut self, cutoff: Timestamp) -> Result<u64> {
        let query = Query::new("SELECT count(*) FROM task_state_store WHERE expires_at < ?").bind(cutoff);
        count(&mut **self, "cannot count expired rows", &query)
    }

    /// Where a clean's walk starts: by dag run where the database asks for it (SQLite) and
    /// the run deletes in batches, by id otherwise. An archived run walks by id: its last
    /// batch ends at the last row archived, and only in id order is every row written after
    /// the archive was read beyond that (a new row has a higher id, not a later dag run).
    pub(crate) fn walk_start(&mut self, batched: bool, archived: bool) -> Cursor {
        if batched && !archived && self.walks_by_run() { Cursor::RUNS } else { Cursor::IDS }
    }

    /// The lowest and the highest value of the walk's leading column (ids, or dag run ids),
    /// `None` when the table is empty or when reading them would wait for a lock (see
    /// [`Connection::id_bounds_at_once`]).
    pub(crate) fn walk_bounds(&mut self, start: Cursor) -> Result<Option<(i64, i64)>> {
        match start {
            Cursor::Id(_) => self.id_bounds_at_once(),
            // The unique index's ends; a dag run id that is not an integer (see
            // `nth_expired`) fails to decode, and the progress lines do without.
            Cursor::Run { .. } => bounds(&mut **self, Query::new(RUN_BOUNDS)),
        }
    }

    /// Expired task rows per dag, for a dry run.
    pub(crate) fn expired_by_dag(&mut self, cutoff: Timestamp) -> Result<Vec<DagCount>> {
        let query = Query::new(
            "SELECT dag_id, count(*) FROM task_state_store WHERE expires_at < ? GROUP BY dag_id ORDER BY BYTES(dag_id)",
        );
        all(&mut **self, "cannot count expired rows", &query.bind(cutoff), |f| {
            Ok(DagCount { dag_id: f.text(), rows: f.count()? })
        })
    }

    /// Orphaned asset rows per asset, for a dry run.
    pub(crate) fn orphans_by_asset(&mut self) -> Result<Vec<AssetCount>> {
        let query = Query::new(
            "SELECT s.asset_id, a.name, count(*) FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id WHERE ",
        )
        .push(ORPHAN)
        .push(" GROUP BY s.asset_id, a.name ORDER BY s.asset_id");
        all(&mut **self, "cannot count orphaned asset rows", &query, |f| {
            Ok(AssetCount { asset_id: f.int()?, asset_name: f.opt_text(), rows: f.count()? })
        })
    }

    pub(crate) fn orphan_sample(&mut self, limit: u64) -> Result<Vec<AssetEntry>> {
        let query = Query::new("SELECT ").push(ASSET_ROWS).push(" WHERE ").push(ORPHAN);
        let query = query.and(r#" ORDER BY s.asset_id, BYTES(s."key") LIMIT ?"#, Param::Limit(Some(limit)));
        all(&mut **self, "cannot read orphaned asset rows", &query, asset_entry)
    }

    /// Where the `n`-th expired row after `after` is, where a batch of `n` rows ends.
    pub(crate) fn nth_expired(&mut self, cutoff: Timestamp, after: Cursor, n: u64) -> Result<Option<Cursor>> {
        nth_expired(&mut **self, cutoff, after, n)
    }

    /// One batch after `after`: the first `n` expired rows of the walk, or, where finding that
    /// boundary costs much more than the delete, the expired rows among the next `n` rows
    /// (fewer deletions, possibly none, but never more): see PostgreSQL's.
    pub(crate) fn delete_expired_batch(
        &mut self,
        cutoff: Timestamp,
        after: Cursor,
        n: u64,
    ) -> Result<Walked> {
        match after {
            Cursor::Id(after_id) => {
                let batch = self.conn.delete_expired_batch(cutoff, after_id, n)?;
                Ok(Walked { deleted: batch.deleted, last: batch.last_id.map(Cursor::Id) })
            }
            Cursor::Run { .. } => {
                let conn = &mut **self;
                let last = nth_expired(conn, cutoff, after, n)?;
                Ok(Walked { deleted: delete_walked(conn, cutoff, after, last)?, last })
            }
        }
    }

    /// Whether the batch that failed with `error` may have been committed all the same (see
    /// [`super::dialect::Connection::outcome_unknown`]).
    pub(crate) fn outcome_unknown(&mut self, error: &anyhow::Error) -> bool {
        let conn = &mut **self;
        error.chain().any(|cause| conn.outcome_unknown(cause))
    }

    /// Deletes the expired rows after `after` up to `up_to` in its walk, all after `after`
    /// when `None`, in one transaction.
    pub(crate) fn delete_expired_range(
        &mut self,
        cutoff: Timestamp,
        after: Cursor,
        up_to: Option<Cursor>,
    ) -> Result<u64> {
        match (after, up_to) {
            (Cursor::Id(after), None) => self.conn.delete_expired_range(cutoff, after, None),
            (Cursor::Id(after), Some(Cursor::Id(up_to))) => {
                self.conn.delete_expired_range(cutoff, after, Some(up_to))
            }
            _ => delete_walked(&mut **self, cutoff, after, up_to),
        }
    }

    /// Up to `limit` expired task rows after `after` up to `up_to` in its walk, in its order,
    /// with their places in it: what [`Store::delete_expired_range`] with the same bounds
    /// would delete, read page by page for `clean --archive`.
    pub(crate) fn expired_rows(
        &mut self,
        cutoff: Timestamp,
        after: Cursor,
        up_to: Option<Cursor>,
        limit: u64,
    ) -> Result<Vec<(Cursor, TaskEntry)>> {
        let select = Query::new("SELECT ").push(TASK_COLUMNS).push(", ").push(after.columns());
        let query = after.after(select.push(" FROM task_state_store"));
        let query = Cursor::up_to(query, up_to).and(after.expired(), cutoff).push(after.order());
        let query = query.and(" LIMIT ?", Param::Limit(Some(limit)));
        all(&mut **self, "cannot read expired rows", &query, |f| {
            let entry = task_entry(f)?;
            Ok((after.read(f)?, entry))
        })
    }

    /// Deletes these keys of one asset (at most [`super::EXACT_PAGE`]) if the asset is still
    /// inactive: `clean --archive` deletes the orphans it archived, and still finds as it
    /// read them ([`Store::lock_asset_rows`]), instead of any `limit` of them.
    pub(crate) fn delete_orphan_keys(&mut self, asset_id: i64, keys: &[&str]) -> Result<u64> {
        if keys.is_empty() {
            return Ok(0);
        }
        let query = super::store::delete_asset_keys(asset_id, keys).push(" AND ").push(ORPHAN_ROW);
        self.run("cannot delete orphaned asset rows", &query)
    }

    /// Deletes up to `limit` state rows of inactive assets (all of them when `None`) in one
    /// statement; selecting and deleting from one table is spelt differently by each database.
    pub(crate) fn delete_orphans(&mut self, limit: Option<u64>) -> Result<u64> {
        let (select, tail) = match self.dialect() {
            Dialect::Sqlite => ("rowid IN (SELECT s.rowid", " LIMIT ?)"),
            // As for task rows: rows a writer holds are skipped, the next run takes them.
            Dialect::Postgres => ("ctid = ANY(ARRAY(SELECT s.ctid", " LIMIT ? FOR UPDATE OF s SKIP LOCKED))"),
            // MySQL cannot select from the table a DELETE changes, but a single-table DELETE
            // takes a LIMIT of its own.
            Dialect::Mysql => {
                let query = Query::new("DELETE FROM asset_state_store WHERE ").push(ORPHAN_ROW);
                let query =
                    if let Some(n) = limit { query.and(" LIMIT ?", Param::Limit(Some(n))) } else { query };
                return self.run("cannot delete orphaned asset rows", &query);
            }
        };
        let query = Query::new("DELETE FROM asset_state_store WHERE ").push(select);
        let query =
            query.push(" FROM asset_state_store s WHERE ").push(ORPHAN).and(tail, Param::Limit(limit));
        self.run("cannot delete orphaned asset rows", &query)
    }
}
