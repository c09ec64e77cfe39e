//! The clean's statements: counts for a dry run, the expired rows a batch deletes, and the
//! state of inactive assets.
//!
//! A batch is a primary-key range: the first `n` expired rows after the last batch's end, found
//! by their ids and deleted by `id > ? AND id <= ? AND expires_at < ?`. The DELETE checks the
//! expiry again, so a key a worker refreshes during the run survives, and each batch starts
//! where the last one ended instead of at the head of the `expires_at` index. This is the
//! portable way; a dialect with a cheaper one overrides [`Connection::delete_expired_batch`].

use std::time::Duration;

use super::Store;
use super::dialect::{Connection, all, count, first};
use super::query::{Fields, Param, Query};
use super::store::{ASSET_ROWS, TASK_COLUMNS, asset_entry, task_entry_and_id};
use crate::error::Result;
use crate::model::{AssetEntry, TaskEntry};
use crate::time::Timestamp;

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

/// What one batch of a clean did: rows deleted, and the last id it covered (`None` when no
/// expired row is left after it, which ends the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Batch {
    pub deleted: u64,
    pub last_id: Option<i64>,
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

/// The id of the `n`-th expired row after `after_id`: where a batch of `n` ends.
pub(super) fn nth_expired_id<C: Connection + ?Sized>(
    conn: &mut C,
    cutoff: Timestamp,
    after_id: i64,
    n: u64,
) -> Result<Option<i64>> {
    let query = Query::new(
        "SELECT id FROM task_state_store WHERE id > ? AND expires_at < ? ORDER BY id LIMIT 1 OFFSET ?",
    );
    let query = query.bind(after_id).bind(cutoff).bind(n.saturating_sub(1));
    first(conn, "cannot find the next batch of expired rows", &query, Fields::int)
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
    let query = Query::new("DELETE FROM task_state_store WHERE id > ? AND id <= ? AND expires_at < ?");
    let query = query.bind(after_id).bind(up_to_id.unwrap_or(i64::MAX)).bind(cutoff);
    conn.run("cannot delete expired rows", &query)
}

/// The lowest and the highest id of the task table, `None` when it is empty: two index
/// lookups.
pub(super) fn id_bounds<C: Connection + ?Sized>(conn: &mut C) -> Result<Option<(i64, i64)>> {
    let query = Query::new("SELECT min(id), max(id) FROM task_state_store");
    let bounds = first(conn, "cannot read the ids", &query, |f| Ok((f.opt_int()?, f.opt_int()?)))?;
    Ok(bounds.and_then(|(low, high)| low.zip(high)))
}

impl Store {
    /// Expired task rows in all, for the progress bar of a clean run at a terminal.
    pub(crate) fn count_expired(&mut self, cutoff: Timestamp) -> Result<u64> {
        let query = Query::new("SELECT count(*) FROM task_state_store WHERE expires_at < ?").bind(cutoff);
        count(self.connection(), "cannot count expired rows", &query)
    }

    /// The lowest and the highest id of the task table, `None` when it is empty or when
    /// reading them would wait for a lock (see [`Connection::id_bounds_at_once`]).
    pub(crate) fn id_bounds(&mut self) -> Result<Option<(i64, i64)>> {
        self.connection().id_bounds_at_once()
    }

    /// Expired task rows per dag, for a dry run.
    pub(crate) fn expired_by_dag(&mut self, cutoff: Timestamp) -> Result<Vec<DagCount>> {
        let query = Query::new(
            "SELECT dag_id, count(*) FROM task_state_store WHERE expires_at < ? GROUP BY dag_id ORDER BY BYTES(dag_id)",
        );
        all(self.connection(), "cannot count expired rows", &query.bind(cutoff), |f| {
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
        all(self.connection(), "cannot count orphaned asset rows", &query, |f| {
            Ok(AssetCount { asset_id: f.int()?, asset_name: f.opt_text(), rows: f.count()? })
        })
    }

    pub(crate) fn orphan_sample(&mut self, limit: u64) -> Result<Vec<AssetEntry>> {
        let query = Query::new("SELECT ").push(ASSET_ROWS).push(" WHERE ").push(ORPHAN);
        let query = query.and(r#" ORDER BY s.asset_id, BYTES(s."key") LIMIT ?"#, Param::Limit(Some(limit)));
        all(self.connection(), "cannot read orphaned asset rows", &query, asset_entry)
    }

    /// See [`Connection::begin_clean`].
    pub(crate) fn begin_clean(&mut self, lock_timeout: Duration) -> Result<bool> {
        self.connection().begin_clean(lock_timeout)
    }

    /// See [`Connection::quiet_pace`].
    pub(crate) fn quiet_pace(&mut self) -> super::dialect::QuietPace {
        self.connection().quiet_pace()
    }

    /// See [`Connection::batch_rows_bound`].
    pub(crate) fn batch_rows_bound(&mut self) -> Option<u64> {
        self.connection().batch_rows_bound()
    }

    /// See [`Connection::write_mark`].
    pub(crate) fn write_mark(&mut self) -> Result<Option<super::dialect::WriteMark>> {
        self.connection().write_mark()
    }

    /// See [`Connection::others_active_here`].
    pub(crate) fn others_active_here(&mut self, within: Duration) -> Result<Option<bool>> {
        self.connection().others_active_here(within)
    }

    /// See [`Connection::skipped_locked_rows`].
    pub(crate) fn skipped_locked_rows(&mut self) -> bool {
        self.connection().skipped_locked_rows()
    }

    /// See [`Connection::finish_clean`].
    pub(crate) fn finish_clean(&mut self) -> Option<u64> {
        self.connection().finish_clean()
    }

    /// The id of the `n`-th expired row after `after_id`, where a batch of `n` rows ends.
    pub(crate) fn nth_expired_id(&mut self, cutoff: Timestamp, after_id: i64, n: u64) -> Result<Option<i64>> {
        nth_expired_id(self.connection(), cutoff, after_id, n)
    }

    /// One batch after `after_id`: the first `n` expired rows in primary-key order, or, where
    /// finding that boundary costs much more than the delete, the expired rows among the next
    /// `n` rows (fewer deletions, possibly none, but never more): see PostgreSQL's.
    pub(crate) fn delete_expired_batch(&mut self, cutoff: Timestamp, after_id: i64, n: u64) -> Result<Batch> {
        self.connection().delete_expired_batch(cutoff, after_id, n)
    }

    /// Whether the batch that failed with `error` may have been committed all the same (see
    /// [`super::dialect::Connection::outcome_unknown`]).
    pub(crate) fn outcome_unknown(&mut self, error: &anyhow::Error) -> bool {
        let conn = self.connection();
        error.chain().any(|cause| conn.outcome_unknown(cause))
    }

    /// Deletes the expired rows with `after < id <= up_to`, all after `after` when
    /// `None`, in one transaction.
    pub(crate) fn delete_expired_range(
        &mut self,
        cutoff: Timestamp,
        after: i64,
        up_to: Option<i64>,
    ) -> Result<u64> {
        self.connection().delete_expired_range(cutoff, after, up_to)
    }

    /// Up to `limit` expired task rows with `after_id < id <= up_to_id`, in id order, with
    /// their ids: what [`Store::delete_expired_range`] with the same bounds would delete, read
    /// page by page for `clean --archive`.
    pub(crate) fn expired_rows(
        &mut self,
        cutoff: Timestamp,
        after_id: i64,
        up_to_id: Option<i64>,
        limit: u64,
    ) -> Result<Vec<(i64, TaskEntry)>> {
        let query = Query::new("SELECT ").push(TASK_COLUMNS).push(
            ", id FROM task_state_store WHERE id > ? AND id <= ? AND expires_at < ? ORDER BY id LIMIT ?",
        );
        let query = query
            .bind(after_id)
            .bind(up_to_id.unwrap_or(i64::MAX))
            .bind(cutoff)
            .bind(Param::Limit(Some(limit)));
        all(self.connection(), "cannot read expired rows", &query, task_entry_and_id)
    }

    /// Deletes one asset row if its asset is still inactive (`clean --archive` deletes the
    /// orphans it archived, one key at a time, instead of any `limit` of them).
    pub(crate) fn delete_orphan_row(&mut self, asset_id: i64, key: &str) -> Result<u64> {
        if !self.connection().can_match("asset_state_store", "key", key) {
            return Ok(0);
        }
        let query = Query::new(r#"DELETE FROM asset_state_store WHERE asset_id = ? AND "key" = ? AND "#)
            .push(ORPHAN_ROW);
        self.connection().run("cannot delete orphaned asset rows", &query.bind(asset_id).bind(key))
    }

    /// Deletes up to `limit` state rows of inactive assets, all of them when `None`, in one
    /// transaction.
    pub(crate) fn delete_orphans(&mut self, limit: Option<u64>) -> Result<u64> {
        self.connection().delete_orphans(limit)
    }
}
