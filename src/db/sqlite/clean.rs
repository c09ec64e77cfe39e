//! What a clean does its own way on SQLite: its lock, its session settings, and the delete of
//! every expired row at once.

use std::time::Duration;

use rusqlite::params;

use super::SqliteConnection;
use crate::error::{Error, Result};
use crate::time::Timestamp;

/// Page cache of a clean's connection, in KiB (see `tune`).
const CLEAN_CACHE_KIB: i64 = 32 * 1024;
/// WAL pages after which a clean's commit copies the WAL back into the database file.
const CLEAN_WAL_AUTOCHECKPOINT_PAGES: i64 = 16_384;
/// Width, in ids, of one window of an unbounded delete (see `delete_all_expired`).
const DELETE_WINDOW_IDS: i64 = 100_000;
/// Appended to the database's path to name the clean lock file beside it.
const CLEAN_LOCK_SUFFIX: &str = ".state-store-clean.lock";

/// The one-clean-at-a-time guard of a SQLite database: an exclusive `flock` on
/// `<database>.state-store-clean.lock`, a file that exists only while a clean holds it.
/// `<database>` is the file's real path (every symlink and `..` resolved), so two cleans that
/// name one database by different paths take the same lock. The file is opened with
/// `O_NOFOLLOW` (`fs::open_lock`): a symlink planted at its name never makes a clean (run as
/// root, say) create or open the link's target.
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
pub(super) struct CleanLock {
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
            let file = crate::fs::open_lock(&path).map_err(|e| fail("open", e))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
                Err(std::fs::TryLockError::Error(e)) => return Err(fail("lock", e).into()),
            }
            let locked = file.metadata().map_err(|e| fail("read", e))?;
            match std::fs::symlink_metadata(&path) {
                Ok(named) if (named.dev(), named.ino()) == (locked.dev(), locked.ino()) => {
                    return Ok(Some(CleanLock { file, path }));
                }
                // Unlinked, or replaced, by the holder that ended meanwhile: start over.
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(fail("read", e).into()),
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

pub(super) fn begin(sqlite: &mut SqliteConnection, lock_timeout: Duration) -> Result<bool> {
    let fail = |e| sqlite.error("cannot prepare the clean", e);
    sqlite.conn.busy_timeout(lock_timeout).map_err(fail)?;
    tune(&sqlite.conn).map_err(fail)?;
    // SQLite's own locks cannot say "a clean is running" without blocking Airflow's writers
    // too (a lock on the database, or on a table of it, is a write lock), so the guard is a
    // lock file beside the database (see `CleanLock`).
    let Some(path) = &sqlite.path else { return Ok(true) };
    // Keyed by the file, not by how the URL spells its path (see `CleanLock`).
    let real = std::fs::canonicalize(path)
        .map_err(|e| Error::db(format!("cannot resolve the path of {}", sqlite.location), e))?;
    let mut lock_path = real.into_os_string();
    lock_path.push(CLEAN_LOCK_SUFFIX);
    sqlite.clean_lock = CleanLock::acquire(lock_path.into())?;
    Ok(sqlite.clean_lock.is_some())
}

/// The WAL this session let grow (see `tune`) is copied back into the database now, by the
/// clean, instead of by the next Airflow worker that commits. PASSIVE never waits for
/// readers; whatever it cannot copy yet, a later checkpoint will.
pub(super) fn finish(sqlite: &mut SqliteConnection) {
    let _ = sqlite.conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
}

/// Settings for the clean's own connection only; they end with it. Measured on 1,000,000
/// rows with 500,012 expired at batch 10,000 (docs/performance.md): each batch deletes
/// entries spread over the whole expired part of the `expires_at` index.
pub(super) fn tune(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    // SQLite's default 2 MiB page cache spills those dirty pages to the WAL several times
    // within one batch; 32 MiB holds most of one batch's pages, so each is written about once per
    // commit (64 MiB measured no faster, at 35 MB more memory).
    conn.pragma_update(None, "cache_size", -CLEAN_CACHE_KIB)?;
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    if mode.eq_ignore_ascii_case("wal") {
        // With the default 1,000-page auto-checkpoint every batch ends in a checkpoint that
        // writes the same index pages back into the file again (809 MiB for 51 batches
        // against 239 MiB for one DELETE); 16,384 pages let many batches share one.
        conn.pragma_update(None, "wal_autocheckpoint", CLEAN_WAL_AUTOCHECKPOINT_PAGES)?;
        // In WAL mode NORMAL skips the fsync of each commit. A power loss can then undo the
        // last batches, never corrupt the file, and undoing a delete of expired rows is
        // safe: the next clean deletes them again. (In rollback-journal mode NORMAL can
        // corrupt on some filesystems, so it stays as Airflow left it there.)
        conn.pragma_update(None, "synchronous", "NORMAL")?;
    }
    Ok(())
}

/// Deletes every expired row after `after_id` in one transaction, in windows of the
/// primary key. With foreign keys on, SQLite collects the rowids of all the rows a DELETE
/// matches before it deletes them (about 24 bytes each); windows keep that memory
/// bounded on any table size while the deletion stays one atomic change, as one DELETE is.
pub(super) fn delete_all_expired(
    sqlite: &mut SqliteConnection,
    cutoff: Timestamp,
    after_id: i64,
) -> Result<u64> {
    Ok(windows(&mut sqlite.conn, &cutoff.to_sqlite_text(), after_id)
        .map_err(|e| sqlite.error("cannot delete expired rows", e))?)
}

fn windows(conn: &mut rusqlite::Connection, cutoff: &str, after_id: i64) -> rusqlite::Result<u64> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut deleted = 0;
    let mut from = after_id;
    {
        let mut next = tx.prepare("SELECT min(id) FROM task_state_store WHERE id > ?1")?;
        let mut delete =
            tx.prepare("DELETE FROM task_state_store WHERE id > ?1 AND id <= ?2 AND expires_at < ?3")?;
        // Each window starts at the next existing id, so gaps in the ids cost nothing.
        while let Some(first) = next.query_row([from], |r| r.get::<_, Option<i64>>(0))? {
            let to = first.saturating_add(DELETE_WINDOW_IDS - 1);
            deleted += u64::try_from(delete.execute(params![from, to, cutoff])?).unwrap_or(u64::MAX);
            if to == i64::MAX {
                break;
            }
            from = to;
        }
    }
    tx.commit()?;
    Ok(deleted)
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
                    // Rounds until this thread has held the lock 200 times: on a loaded
                    // machine a holder can be descheduled while the others spin past it.
                    let mut mine = 0;
                    for _ in 0..1_000_000 {
                        if mine == 200 {
                            break;
                        }
                        if let Some(lock) = CleanLock::acquire(path.clone()).unwrap() {
                            mine += 1;
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
        assert_eq!(taken.load(Ordering::SeqCst), 6 * 200, "every thread took the lock");
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
