//! The clean lock on PostgreSQL: an advisory lock that only a role that may delete from the
//! table can hold a clean off with, and session settings for a session that only deletes. The
//! rest a clean does its own way here, batches bounded by the primary key alone and deletes
//! that skip the rows a worker holds instead of waiting for them, is the connection's
//! (`delete_expired_batch` and `delete_expired_range` in `postgres/mod.rs`).

use super::PostgresConnection;
use crate::db::dialect::CleanLock;
use crate::db::dialect::{Connection, first};
use crate::db::query::{Fields, Query};
use crate::error::Result;

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
