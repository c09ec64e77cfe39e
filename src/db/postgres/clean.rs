//! What a clean does its own way on PostgreSQL: an advisory lock that only a role that may
//! delete from the table can hold a clean off with, session settings for a session that only
//! deletes, batches bounded by the primary key alone, and deletes that skip the rows a worker
//! holds instead of waiting for them.

use super::PostgresConnection;
use crate::db::dialect::Batch;
use crate::db::dialect::CleanLock;
use crate::db::dialect::{Connection, first};
use crate::db::query::{Fields, Query};
use crate::error::{Error, Result};
use crate::time::Timestamp;

/// The class of the clean lock's advisory keys: the first of the two `int4` keys, the same
/// for every clean of the schema, so that two Airflow installations sharing a server in
/// different schemas do not hold off each other's cleans.
const CLASS: &str = "hashtext('state-store clean ' || current_schema())";

/// Tries at a random key of the class before giving up: another session (anyone may take any
/// advisory key) holding each of them in turn is not a clean, and costs one round trip each.
const KEY_TRIES: u32 = 8;

/// The session's lock wait is already `--lock-timeout`, set as it connected
/// (`connect::session_setup`).
///
/// The clean lock. Advisory locks are the only lock PostgreSQL has that needs no transaction
/// (a row or table lock would hold an xid or a snapshot across every batch, which holds back
/// vacuum, and the table lock modes that conflict with themselves conflict with autovacuum or
/// with Airflow's writers), and any role that may connect may take any advisory key. So only
/// holders whose role may delete from `task_state_store` are counted:
///
/// 1. a clean takes the class's front-door key, `(class, 0)`, a session lock. Of two cleans
///    that start together exactly one gets it; the other finds it held by a role that may
///    delete, and is held off (naming that role and pid);
/// 2. when the front door is held by a role that may not delete (anyone may take any key), the
///    clean announces itself under a random key of the class instead (another if that one is
///    taken);
/// 3. either way it then reads `pg_locks` and `pg_stat_activity` (both readable by every role)
///    for granted keys of the class in this database held by other sessions whose role has
///    DELETE on the table; any → it lets its key go and is held off.
///
/// Every clean holds a key of the class before it looks, so of two cleans the one that looks
/// second sees the other's key: they never both run. Two that start at the same moment while
/// a stranger holds the front door may both see each other and both be held off (exit 7),
/// which is safe. A role without DELETE is never counted, so it cannot hold off a clean, and
/// it cannot take a random key before it is drawn.
pub(super) fn begin(pg: &mut PostgresConnection) -> Result<CleanLock> {
    let what = "cannot take the clean lock";
    let take = Query::new("SELECT pg_try_advisory_lock(").push(CLASS).push(", CAST(? AS integer))");
    let mut key = None;
    if first(pg, what, &take.clone().bind(0_i64), Fields::bool)?.unwrap_or(false) {
        key = Some(0);
    } else if let Some(holder) = holder(pg, Holding::FrontDoor)? {
        return Ok(CleanLock::Held(Some(holder)));
    } else {
        for _ in 0..KEY_TRIES {
            let random = random_key();
            if random != 0
                && first(pg, what, &take.clone().bind(i64::from(random)), Fields::bool)?.unwrap_or(false)
            {
                key = Some(random);
                break;
            }
        }
    }
    // Every key tried was taken: by whom is unknown, and no clean can be told from anyone.
    let Some(key) = key else { return Ok(CleanLock::Held(None)) };
    if let Some(holder) = holder(pg, Holding::AnyOther)? {
        let release = Query::new("SELECT pg_advisory_unlock(").push(CLASS).push(", CAST(? AS integer))");
        pg.run(what, &release.bind(i64::from(key)))?;
        return Ok(CleanLock::Held(Some(holder)));
    }
    // A batch lost in a crash is simply deleted again by the next run, so its commit need
    // not wait for the WAL flush: for this session only, commits return at once.
    pg.run(
        "cannot set synchronous_commit",
        &Query::new("SELECT set_config('synchronous_commit', 'off', false)"),
    )?;
    // Statements are prepared once per connection. After five runs PostgreSQL may switch a
    // prepared statement to a generic plan, made without knowing the bounds; a range DELETE
    // planned blind could scan more than its window. Each run is planned for its own bounds,
    // as an unprepared statement is (on the benchmark the two measured the same).
    let custom = Query::new("SELECT set_config('plan_cache_mode', 'force_custom_plan', false)");
    pg.run("cannot set plan_cache_mode", &custom)?;
    Ok(CleanLock::Taken)
}

/// Which keys of the class [`holder`] looks at.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holding {
    /// The front door, `(class, 0)`, whoever holds it.
    FrontDoor,
    /// Every key held by another session.
    AnyOther,
}

/// The first session that holds a key of the class (`which`) and whose role may delete from
/// `task_state_store`, as `role NAME, pid N`.
fn holder(pg: &mut PostgresConnection, which: Holding) -> Result<Option<String>> {
    // The two-key form keeps the first key in `classid` and the second in `objid` (as `oid`,
    // the same 32 bits), with `objsubid` 2; the one-key form of earlier versions, 1.
    let which = match which {
        Holding::FrontDoor => " AND l.objid = 0",
        Holding::AnyOther => " AND l.pid <> pg_backend_pid()",
    };
    let query = Query::new(
        "SELECT a.usename, l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 \
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND l.classid = CAST(",
    )
    .push(CLASS)
    .push(" AS oid)")
    .push(which)
    .push(" AND has_table_privilege(a.usesysid, to_regclass('task_state_store'), 'DELETE') ORDER BY l.pid LIMIT 1");
    let found = first(pg, "cannot take the clean lock", &query, |f| Ok((f.opt_text(), f.int()?)))?;
    Ok(found.map(|(role, pid)| {
        let role = role.map_or_else(|| "an unknown role".to_string(), |r| format!("role {r}"));
        format!("{role}, pid {pid}")
    }))
}

/// A key no other session can foresee: std's `RandomState` is keyed from the operating
/// system's random source (and changes on every use).
fn random_key() -> i32 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let [a, b, c, d, ..] = hasher.finish().to_le_bytes();
    i32::from_le_bytes([a, b, c, d])
}

/// A batch is the expired rows among the next `n` rows in primary-key order. Finding the
/// `n`-th expired row (the portable way) reads every row's heap tuple for its `expires_at`, a
/// second pass over what the DELETE reads anyway; finding the `n`-th row is an index-only scan
/// of the primary key wherever the visibility map marks pages all-visible, which vacuum does
/// for a metastore's settled rows.
///
/// Measured (1,000,000 rows, 500,012 expired, batch 10,000, server log): the boundary scans
/// took 130 ms over 100 batches against 470 ms over 51 for the n-th expired row. One statement
/// for both (a CTE for the boundary, the DELETE's count by `RETURNING`) was slower: `RETURNING`
/// fetches every deleted row again, twice the buffer reads of the plain DELETE. A batch still
/// touches at most `n` rows; where expired rows are sparse, more batches delete fewer rows each.
pub(super) fn batch_by_window(
    pg: &mut PostgresConnection,
    cutoff: Timestamp,
    after_id: i64,
    n: u64,
) -> Result<Batch> {
    // `id` is selected and ordered as the bare column, so the primary key's index serves
    // both the range and the order.
    let window = Query::new("SELECT id FROM task_state_store WHERE id > ? ORDER BY id LIMIT 1 OFFSET ?");
    let last_id = first(
        pg,
        "cannot delete expired rows",
        &window.bind(after_id).bind(n.saturating_sub(1)),
        Fields::int,
    )?;
    let deleted = delete_range(pg, cutoff, after_id, last_id)?;
    Ok(Batch { deleted, last_id })
}

/// The ends of the primary key with no wait for a lock: `None` behind a table another
/// session holds (`LOCK TABLE`, `ALTER`), which the batches then wait for once.
pub(super) fn id_bounds_at_once(pg: &mut PostgresConnection) -> Result<Option<(i64, i64)>> {
    let context = format!("cannot read the ids in {}", pg.location);
    pg.batch("BEGIN READ ONLY; SET LOCAL lock_timeout = '1ms'").map_err(super::pg_err(&context))?;
    let bounds = crate::db::clean::id_bounds(pg);
    let ended = pg.batch(if bounds.is_ok() { "COMMIT" } else { "ROLLBACK" });
    match bounds {
        Err(e) if super::lock_not_available(&e) => Ok(None),
        Err(e) => Err(e),
        Ok(bounds) => {
            ended.map_err(super::pg_err(&context))?;
            Ok(bounds)
        }
    }
}

/// The expired rows of an id range: a plain DELETE in a transaction that gives up after 1 ms
/// on any lock, and, when a row is locked by another session (a worker writing that key right
/// now), a DELETE that skips such rows instead: they are not expired any more, or the next
/// run takes them. Either DELETE re-checks `expires_at` on the newest version of each row, so
/// a key refreshed since the statement began survives. With no bounds at all it is the
/// floor's statement exactly: id predicates on every row cost ~10 % of a whole-table DELETE.
pub(super) fn delete_range(
    pg: &mut PostgresConnection,
    cutoff: Timestamp,
    after_id: i64,
    up_to_id: Option<i64>,
) -> Result<u64> {
    let context = format!("cannot delete expired rows in {}", pg.location);
    let plain = match (after_id, up_to_id) {
        (i64::MIN, None) => Query::new("DELETE FROM task_state_store WHERE expires_at < ?").bind(cutoff),
        _ => Query::new("DELETE FROM task_state_store WHERE id > ? AND id <= ? AND expires_at < ?")
            .bind(after_id)
            .bind(up_to_id.unwrap_or(i64::MAX))
            .bind(cutoff),
    };
    // BEGIN and SET LOCAL in one round trip.
    // Until COMMIT is sent nothing can be committed, whatever the error: only the COMMIT's own
    // failure leaves the batch's outcome unknown.
    let uncommitted = |e| Error::db(&context, super::uncommitted(e));
    pg.batch("BEGIN; SET LOCAL lock_timeout = '1ms'").map_err(uncommitted)?;
    match pg.execute_raw(&plain) {
        Ok(deleted) => {
            pg.batch("COMMIT").map_err(super::pg_err(&context))?;
            return Ok(deleted);
        }
        Err(e) => {
            // The transaction is aborted either way; a connection that is gone has none left
            // to roll back, and the first error is the one to report.
            let rolled_back = pg.batch("ROLLBACK");
            if e.code() != Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) {
                return Err(uncommitted(e).into());
            }
            rolled_back.map_err(uncommitted)?;
        }
    }
    // The inner SELECT … FOR UPDATE re-checks the expiry on the row version it locks, and the
    // DELETE goes straight to those versions by ctid. Locking first writes every deleted row
    // twice (1.9x the plain DELETE's time measured at batch 10,000), so this is only the way
    // round a locked row, not the rule.
    pg.skipped_locked = true;
    let skipping = Query::new(
        "DELETE FROM task_state_store WHERE ctid = ANY(ARRAY(SELECT ctid FROM task_state_store \
         WHERE id > ? AND id <= ? AND expires_at < ? FOR UPDATE SKIP LOCKED))",
    );
    pg.run(
        "cannot delete expired rows",
        &skipping.bind(after_id).bind(up_to_id.unwrap_or(i64::MAX)).bind(cutoff),
    )
}
