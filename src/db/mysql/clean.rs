//! What a clean does its own way on MySQL and MariaDB: a named lock, and MariaDB's
//! `DELETE … RETURNING`, which finds and deletes a batch in one statement.

use mysql::prelude::Queryable;
use mysql::{Params, Value};

use super::{MysqlConnection, cause};
use crate::db::clean::Batch;
use crate::db::dialect::first;
use crate::db::query::{Fields, Query};
use crate::error::{Error, Result};
use crate::time::Timestamp;

/// The session's lock waits are already `--lock-timeout`, set as it connected
/// (`connect::session_bounds`).
pub(super) fn begin(my: &mut MysqlConnection) -> Result<bool> {
    let what = "cannot take the clean lock";
    let database = first(my, what, &Query::new("SELECT DATABASE()"), |f| Ok(f.text()))?.unwrap_or_default();
    let name = clean_lock_name(&database);
    let lock = Query::new("SELECT GET_LOCK(?, 0)").bind(name.as_str());
    let locked = first(my, what, &lock, Fields::opt_int)?.flatten() == Some(1);
    Ok(locked)
}

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
        last = Some(
            Fields::new(row.unwrap().into_iter().map(super::cell).collect())
                .int()
                .map_err(|e| Error::db(&context, e))?,
        );
        deleted += 1;
    }
    // Fewer than `n` rows: no expired row was left after the last one, the run is complete.
    Ok(Batch { deleted, last_id: if deleted == n { last } else { None } })
}

/// The longest user-level lock name MySQL 5.7+ accepts (MariaDB takes longer ones).
const LOCK_NAME_MAX: usize = 64;

/// The name of the clean lock of `database`: `state-store clean <database>` when it fits in
/// [`LOCK_NAME_MAX`] bytes (a database name alone may be 64 characters), otherwise
/// `state-store clean~<hash> <start of the name>`, where the hash is FNV-1a of the whole
/// name, so that every run on the same database takes the same lock on any build. The `~`
/// where the plain form has its space keeps the two forms from ever naming the same lock.
fn clean_lock_name(database: &str) -> String {
    const PREFIX: &str = "state-store clean";
    let plain = format!("{PREFIX} {database}");
    if plain.len() <= LOCK_NAME_MAX {
        return plain;
    }
    let hash = database
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let mut name = format!("{PREFIX}~{hash:016x} ");
    let room = LOCK_NAME_MAX - name.len();
    let cut = (0..=room.min(database.len())).rev().find(|&i| database.is_char_boundary(i)).unwrap_or(0);
    name.push_str(&database[..cut]);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_lock_names_fit_mysqls_64_characters() {
        assert_eq!(clean_lock_name("airflow"), "state-store clean airflow");
        let fits = "d".repeat(LOCK_NAME_MAX - "state-store clean ".len());
        assert_eq!(clean_lock_name(&fits), format!("state-store clean {fits}"));
        // The longest database names, ASCII and multi-byte, and names that differ only at the end.
        let long_a = format!("{}a", "d".repeat(63));
        let long_b = format!("{}b", "d".repeat(63));
        let wide = "데".repeat(64);
        for name in [&format!("{fits}x"), &long_a, &long_b, &wide] {
            let lock = clean_lock_name(name);
            assert!(lock.len() <= LOCK_NAME_MAX, "{lock}: {} bytes", lock.len());
            assert!(lock.starts_with("state-store clean~"), "{lock}");
            // Stable: the same name always gives the same lock.
            assert_eq!(lock, clean_lock_name(name));
        }
        assert_ne!(clean_lock_name(&long_a), clean_lock_name(&long_b));
        // FNV-1a is fixed, so the name is the same across builds and runs.
        assert_eq!(
            clean_lock_name(&long_a),
            "state-store clean~de613e777e6aa0a6 ddddddddddddddddddddddddddddd"
        );
    }
}
