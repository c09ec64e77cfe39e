//! What a clean does its own way on MySQL and MariaDB: the name of its named lock, which only
//! an account with a privilege on the table can read (the lock is taken by `begin_clean` in
//! `mysql/mod.rs`); MariaDB's `DELETE … RETURNING`, which finds and deletes a batch in one statement; and, on servers with `SKIP
//! LOCKED` (MariaDB 10.6+, MySQL 8.0.1+), batches that skip the rows a worker holds instead of
//! waiting for them, as on PostgreSQL. Older servers wait up to `--lock-timeout` for a held
//! row, then fail the batch (exit 4).

use mysql::prelude::Queryable;
use mysql::{Params, Value};

use super::{MysqlConnection, cause};
use crate::db::dialect::Batch;
use crate::db::dialect::{Connection, all, first};
use crate::db::query::{Fields, Query};
use crate::error::{Error, Result};
use crate::time::Timestamp;

/// One statement (one autocommitted transaction) instead of a SELECT of the batch's
/// last id and a DELETE up to it. The rows' ids come back in primary-key order and are
/// counted as they stream in, never held. EXPLAIN shows a `range` scan of PRIMARY from
/// `after_id`, like the SELECT it replaces, so batches still walk forward.
/// Measured on MariaDB 10.11 (1,000,000 rows, 500,012 expired, batch 10,000, 128 MB
/// buffer pool), interleaved on a shared 2-core machine: 7.20-7.62 s against 6.51-7.57 s
/// for the SELECT + DELETE pair and 4.28-4.76 s for one plain DELETE, so the saving is
/// within the noise. The rest of the gap is InnoDB's purge, not the statements: a
/// batch's purge runs while the next batches delete, whereas one DELETE's purge starts
/// after it returns. With purge held back by another session's open read view the same
/// run took 4.05-4.49 s against the floor's 3.87 s. Purge is server-wide
/// (`innodb_purge_*` are global) and holding a read view stalls it for every table, so
/// no session setting is used for it; `foreign_key_checks = 0` made no difference
/// (7.14-7.25 s) and is not set.
pub(super) fn batch_by_returning(
    my: &mut MysqlConnection,
    cutoff: Timestamp,
    after_id: i64,
    n: u64,
) -> Result<Batch> {
    let context = format!("cannot delete expired rows in {}", my.location);
    let params =
        Params::Positional(vec![after_id.into(), Value::from(cutoff.to_sqlite_text()), Value::UInt(n)]);
    let result = my
        .conn
        .exec_iter(
            "DELETE FROM task_state_store WHERE id > ? AND expires_at < ? ORDER BY id LIMIT ? RETURNING id",
            params,
        )
        .map_err(|e| Error::db(&context, cause(e)))?;
    let (mut deleted, mut last) = (0_u64, None);
    for row in result {
        let row = row.map_err(|e| Error::db(&context, cause(e)))?;
        last = Some(Fields::new(super::cells(row)).int().map_err(|e| Error::db(&context, e))?);
        deleted += 1;
    }
    // Fewer than `n` rows: no expired row was left after the last one, the run is complete.
    Ok(Batch { deleted, last_id: if deleted == n { last } else { None } })
}

/// Deletes every expired row after `after_id` in one transaction, as one DELETE would, but in
/// statements of [`crate::db::clean::DELETE_WINDOW_IDS`] ids each. MySQL cannot bound a DELETE on the server,
/// so the client's read timeout (`database_timeout` + 5 s) bounds each statement; one DELETE
/// of every expired row ran past it at about 1.5 million rows on a 2-core machine and ended
/// with exit 4 (and a deletion in doubt). A window of 100,000 ids is about a second's work
/// there at any table size. Each window starts at the next existing id, so gaps cost nothing.
///
/// On a server with `SKIP LOCKED` a window does not wait for a row lock: one that meets a row
/// a worker holds is taken again skipping held rows ([`take_and_delete`]), in the same
/// transaction. A lock wait error undoes the statement, not the transaction, unless
/// `innodb_rollback_on_timeout` is on; there windows wait for held rows (up to
/// `--lock-timeout`) as on older servers.
pub(super) fn delete_all_windowed(my: &mut MysqlConnection, cutoff: Timestamp, after_id: i64) -> Result<u64> {
    let what = "cannot delete expired rows";
    let skips = skips_locked_rows(&my.version)
        && first(my, what, &Query::new("SELECT @@innodb_rollback_on_timeout"), Fields::opt_int)?.flatten()
            == Some(0);
    in_transaction(my, |my| windows(my, cutoff, after_id, skips))
}

/// `work` in one transaction of deletions: committed when it succeeds, rolled back when not.
fn in_transaction<T>(
    my: &mut MysqlConnection,
    work: impl FnOnce(&mut MysqlConnection) -> Result<T>,
) -> Result<T> {
    let what = ["cannot start a transaction", "cannot commit the deletion of expired rows"];
    crate::db::dialect::in_transaction(my, what, work)
}

fn windows(my: &mut MysqlConnection, cutoff: Timestamp, mut from: i64, skips: bool) -> Result<u64> {
    let next = Query::new("SELECT min(id) FROM task_state_store WHERE id > ?");
    let mut deleted = 0;
    while let Some(first_id) =
        first(my, "cannot delete expired rows", &next.clone().bind(from), Fields::opt_int)?.flatten()
    {
        let to = first_id.saturating_add(crate::db::clean::DELETE_WINDOW_IDS - 1);
        let window = |my: &mut MysqlConnection| crate::db::clean::delete_range(my, cutoff, from, Some(to));
        deleted += if skips {
            // The statement alone was undone when a row was held; the rows it locked before the
            // held one stay this transaction's, which `SKIP LOCKED` does not skip.
            without_waiting(my, window, |my| Ok(take_and_delete(my, cutoff, from, to, None)?.deleted))?
        } else {
            window(my)?
        };
        if to == i64::MAX {
            break;
        }
        from = to;
    }
    Ok(deleted)
}

/// Whether the server has `SELECT … FOR UPDATE SKIP LOCKED`: MariaDB 10.6 and MySQL 8.0.1
/// added it. `version` is `SELECT VERSION()`'s text (`10.11.6-MariaDB-0+deb12u1`, `8.0.36`).
pub(super) fn skips_locked_rows(version: &str) -> bool {
    // The handshake's `5.5.5-` prefix of MariaDB, should the text come from there.
    let numbers = super::version_numbers(version.strip_prefix("5.5.5-").unwrap_or(version));
    numbers >= if version.contains("MariaDB") { (10, 6, 0) } else { (8, 0, 1) }
}

/// Rows one locking read takes: a batch of up to this size is one, and a batch size of 0 (one
/// transaction) takes the table this many rows at a time, never every id in memory at once.
const CHUNK: u64 = 10_000;

/// A batch as on a server without `SKIP LOCKED` ([`batch_by_returning`]), but with no wait for
/// a row lock; when a row of the batch is held, the batch again, skipping it
/// ([`delete_skipping_locked`]).
pub(super) fn batch_skipping_locked(
    my: &mut MysqlConnection,
    cutoff: Timestamp,
    after_id: i64,
    n: u64,
) -> Result<Batch> {
    without_waiting(
        my,
        |my| batch_by_returning(my, cutoff, after_id, n),
        |my| delete_skipping_locked(my, cutoff, after_id, None, Some(n)),
    )
}

/// The expired rows of an id range as on a server without `SKIP LOCKED`, but with no wait for
/// a row lock; when a row of the range is held, the range again, skipping it.
pub(super) fn range_skipping_locked(
    my: &mut MysqlConnection,
    cutoff: Timestamp,
    after_id: i64,
    up_to_id: Option<i64>,
) -> Result<u64> {
    without_waiting(
        my,
        |my| crate::db::clean::delete_range(my, cutoff, after_id, up_to_id),
        |my| Ok(delete_skipping_locked(my, cutoff, after_id, up_to_id, None)?.deleted),
    )
}

/// Runs `statement` with InnoDB's row-lock wait and the table (metadata) lock wait at 0 for
/// this session (MariaDB gives up at once; MySQL's shortest waits are 1 s), then puts back the
/// waits `begin_clean` set from `--lock-timeout`, which the orphan sweep keeps; when a lock was not
/// granted ([`lock_not_granted`]), `held` runs instead, the way round the held row. As on PostgreSQL,
/// the plain statement is the rule and skipping the way round a held row: locking first costs
/// a round trip per row. Both locks fail with the same error (1205), so both waits are off
/// here: with only the row wait off, a table another session holds (`LOCK TABLES … WRITE`)
/// made the statement wait all of `--lock-timeout`, and the retry that skips held rows wait
/// all of it again.
pub(super) fn without_waiting<T>(
    my: &mut MysqlConnection,
    statement: impl FnOnce(&mut MysqlConnection) -> Result<T>,
    held: impl FnOnce(&mut MysqlConnection) -> Result<T>,
) -> Result<T> {
    let what = "cannot set the lock timeouts";
    my.run(
        what,
        &Query::new(
            "SET @state_store_wait = @@SESSION.innodb_lock_wait_timeout, \
             @state_store_table_wait = @@SESSION.lock_wait_timeout, \
             SESSION innodb_lock_wait_timeout = 0, SESSION lock_wait_timeout = 0",
        ),
    )?;
    let done = statement(my);
    let restored = my.run(
        what,
        &Query::new(
            "SET SESSION innodb_lock_wait_timeout = @state_store_wait, \
             SESSION lock_wait_timeout = @state_store_table_wait",
        ),
    );
    // The statement's own error first: a connection that is gone fails both.
    match done {
        Err(e) if lock_not_granted(&e) => held(my),
        done => done.and_then(|done| restored.map(|_| done)),
    }
}

/// Whether `e` is InnoDB's "Lock wait timeout exceeded" (1205): a row the statement needed was
/// held by another session, and the statement was rolled back.
fn lock_not_granted(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        let mysql = match cause.downcast_ref::<Error>() {
            Some(Error::Database { cause, .. }) => cause.downcast_ref::<super::MysqlError>(),
            _ => cause.downcast_ref::<super::MysqlError>(),
        };
        matches!(mysql, Some(super::MysqlError { error: mysql::Error::MySqlError(server), .. }) if server.code == 1205)
    })
}

/// Deletes, in one transaction, the expired rows with `after_id < id <= up_to_id` (no upper
/// bound when `None`), at most `limit` of them in id order, skipping any row another session
/// holds locked (a worker writing that key right now) instead of waiting for it: that row is
/// not expired any more once the worker commits, or the next run takes it. The batch's
/// `last_id` is the last row deleted when the limit stopped it, `None` when no expired row it
/// could take is left in the range.
///
/// InnoDB's DELETE locks every row it examines, an unexpired row in the range included, so a
/// plain DELETE behind one held row waits until `--lock-timeout` fails the whole batch. Here a
/// locking read with `SKIP LOCKED` takes the expired rows no one holds, and one DELETE of
/// their ids, without waiting, deletes them. On a small table the optimizer may scan the
/// table for `id IN (…)` instead (EXPLAIN `ALL`) and meet the held row; that DELETE is then
/// rolled back and each row is deleted by its primary key alone, which examines no other row.
/// (A join to the ids was no surer: it scanned too once its prepared statement ran a third
/// time.) `FORCE INDEX (PRIMARY)` keeps the read a walk of the primary key, as the plain
/// batches are. A
/// locking read reads the newest committed version of a row and checks `expires_at` on it, so
/// a key a worker refreshed since the run began is never taken, and the rows taken stay locked
/// by this transaction until it commits, so none can be refreshed before its DELETE. The
/// session is READ COMMITTED (`connect.rs`): the unexpired rows the read examines are released
/// at once.
///
/// Measured on MariaDB 10.11 (200,000 rows, 100,000 expired, batch 10,000, a debug build):
/// 1.2-1.8 s for the run with no row held; with one row held in each of the ten batches, all
/// of which then take this way, 3.9-4.9 s with one DELETE per chunk, and 16.7 s when every
/// row was deleted by its own statement (a round trip each), the fallback. A batch pays it only
/// when a worker holds one of its rows at that moment.
pub(super) fn delete_skipping_locked(
    my: &mut MysqlConnection,
    cutoff: Timestamp,
    after_id: i64,
    up_to_id: Option<i64>,
    limit: Option<u64>,
) -> Result<Batch> {
    in_transaction(my, |my| take_and_delete(my, cutoff, after_id, up_to_id.unwrap_or(i64::MAX), limit))
}

fn take_and_delete(
    my: &mut MysqlConnection,
    cutoff: Timestamp,
    mut after_id: i64,
    up_to_id: i64,
    limit: Option<u64>,
) -> Result<Batch> {
    let what = "cannot delete expired rows";
    my.skipped_locked = true;
    let take = Query::new(
        "SELECT id FROM task_state_store FORCE INDEX (PRIMARY) WHERE id > ? AND id <= ? \
         AND expires_at < ? ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED",
    );
    let mut deleted = 0_u64;
    loop {
        let n = limit.map_or(CHUNK, |limit| CHUNK.min(limit.saturating_sub(deleted)));
        if n == 0 {
            return Ok(Batch { deleted, last_id: Some(after_id) });
        }
        let query = take.clone().bind(after_id).bind(up_to_id).bind(cutoff).bind(n);
        let ids = all(my, what, &query, Fields::int)?;
        let Some(&last) = ids.last() else { return Ok(Batch { deleted, last_id: None }) };
        // The rows are this transaction's until it commits; the expiry is checked again all
        // the same, for free on rows already read.
        let mut taken =
            Query::new("DELETE FROM task_state_store WHERE expires_at < ? AND id IN (").bind(cutoff);
        for (i, id) in ids.iter().enumerate() {
            taken = taken.push(if i == 0 { "?" } else { ", ?" }).bind(*id);
        }
        // When the optimizer scanned the table instead and met a held row, the statement alone
        // was rolled back: each row by its primary key then.
        deleted += without_waiting(
            my,
            |my| my.run(what, &taken.push(")")),
            |my| {
                let one = Query::new("DELETE FROM task_state_store WHERE id = ? AND expires_at < ?");
                ids.iter().try_fold(0, |sum, id| Ok(sum + my.run(what, &one.clone().bind(*id).bind(cutoff))?))
            },
        )?;
        after_id = last;
        if (ids.len() as u64) < n {
            return Ok(Batch { deleted, last_id: None });
        }
        if limit.is_some_and(|limit| deleted >= limit) {
            return Ok(Batch { deleted, last_id: Some(last) });
        }
    }
}

/// The longest user-level lock name MySQL 5.7+ accepts (MariaDB takes longer ones).
const LOCK_NAME_MAX: usize = 64;

/// The name of the clean lock of `database`, with `created` the creation time of its
/// `task_state_store` (see `begin_clean` in `mysql/mod.rs`).
///
/// Without one, `state-store clean <database>` when it fits in [`LOCK_NAME_MAX`] bytes (a
/// database name alone may be 64 characters), otherwise `state-store clean~<hash> <start of
/// the name>`, where the hash is FNV-1a of the whole name, so that every run on the same
/// database takes the same lock on any build. The `~` where the plain form has its space
/// keeps the two forms from ever naming the same lock.
///
/// With one, `state-store clean@<hash> <start of the name>`, the hash of the name and the time
/// together: a name no account that cannot read the time can foresee, and never one of the
/// forms without it (`@`).
pub(super) fn clean_lock_name(database: &str, created: Option<&str>) -> String {
    const PREFIX: &str = "state-store clean";
    let fnv = |bytes: &mut dyn Iterator<Item = u8>| {
        bytes.fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
    };
    let mut name = match created {
        Some(created) => {
            let hash = fnv(&mut database.bytes().chain([0]).chain(created.bytes()));
            format!("{PREFIX}@{hash:016x} ")
        }
        None => {
            let plain = format!("{PREFIX} {database}");
            if plain.len() <= LOCK_NAME_MAX {
                return plain;
            }
            format!("{PREFIX}~{:016x} ", fnv(&mut database.bytes()))
        }
    };
    let room = LOCK_NAME_MAX - name.len();
    let cut = (0..=room.min(database.len())).rev().find(|&i| database.is_char_boundary(i)).unwrap_or(0);
    name.push_str(&database[..cut]);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_locked_from_mariadb_10_6_and_mysql_8_0_1() {
        for (version, skips) in [
            ("10.11.6-MariaDB-0+deb12u1", true),
            ("10.6.0-MariaDB", true),
            ("5.5.5-10.6.12-MariaDB", true),
            ("10.5.23-MariaDB-log", false),
            ("8.0.36", true),
            ("8.0.1", true),
            ("8.0.0-dmr", false),
            ("5.7.44-log", false),
            ("", false),
        ] {
            assert_eq!(skips_locked_rows(version), skips, "{version}");
        }
    }

    #[test]
    fn clean_lock_names_fit_mysqls_64_characters() {
        assert_eq!(clean_lock_name("airflow", None), "state-store clean airflow");
        let fits = "d".repeat(LOCK_NAME_MAX - "state-store clean ".len());
        assert_eq!(clean_lock_name(&fits, None), format!("state-store clean {fits}"));
        // The longest database names, ASCII and multi-byte, and names that differ only at the end.
        let long_a = format!("{}a", "d".repeat(63));
        let long_b = format!("{}b", "d".repeat(63));
        let wide = "데".repeat(64);
        for name in [&format!("{fits}x"), &long_a, &long_b, &wide] {
            let lock = clean_lock_name(name, None);
            assert!(lock.len() <= LOCK_NAME_MAX, "{lock}: {} bytes", lock.len());
            assert!(lock.starts_with("state-store clean~"), "{lock}");
            // Stable: the same name always gives the same lock.
            assert_eq!(lock, clean_lock_name(name, None));
        }
        assert_ne!(clean_lock_name(&long_a, None), clean_lock_name(&long_b, None));
        // FNV-1a is fixed, so the name is the same across builds and runs.
        assert_eq!(
            clean_lock_name(&long_a, None),
            "state-store clean~de613e777e6aa0a6 ddddddddddddddddddddddddddddd"
        );
    }

    /// With the table's creation time, the name is another lock for another time, never one
    /// of the names without it, and as stable and as short.
    #[test]
    fn clean_lock_names_with_the_creation_time_cannot_be_foreseen_without_it() {
        let at = |database: &str, created: &str| clean_lock_name(database, Some(created));
        let name = at("airflow", "2026-12-06 07:58:28");
        assert!(name.starts_with("state-store clean@") && name.ends_with(" airflow"), "{name}");
        assert_eq!(name, at("airflow", "2026-12-06 07:58:28"));
        assert_ne!(name, at("airflow", "2026-12-06 07:58:29"));
        assert_ne!(name, clean_lock_name("airflow", None));
        assert_ne!(at("a", "b"), at("ab", ""), "the name and the time are hashed apart");
        for database in ["d".repeat(64), "데".repeat(64)] {
            assert!(at(&database, "2026-12-06 07:58:28").len() <= LOCK_NAME_MAX);
        }
    }
}
