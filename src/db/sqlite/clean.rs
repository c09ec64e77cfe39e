//! What a clean does its own way on SQLite: its lock, its session settings, and the delete of
//! every expired row at once.

use std::time::Duration;

use rusqlite::params;

use super::SqliteConnection;
use crate::error::{Error, Result};
use crate::time::Timestamp;

/// Page cache of a clean's connection, in KiB (see `tune`).
const CLEAN_CACHE_KIB: i64 = 32 * 1024;
/// The least the WAL may grow to before a clean's commit copies it back into the database
/// file, in bytes: what it always was before the budget grew with the database (see
/// [`wal_budget`]).
const WAL_BUDGET_MIN: u64 = 64 << 20;
/// The most, in bytes.
const WAL_BUDGET_MAX: u64 = 1 << 30;
/// Between those, this many times the database (see [`wal_budget`]).
const WAL_BUDGET_DATABASES: u64 = 4;
/// The WAL may take at most this share of the free space of the database's filesystem.
const WAL_BUDGET_FREE_SHARE: u64 = 4;
/// The longest a clean's last checkpoint waits to empty the WAL file (see `finish`).
const TRUNCATE_WAIT: Duration = Duration::from_millis(50);
/// Appended to the database's path to name the clean lock file beside it.
const CLEAN_LOCK_SUFFIX: &str = ".state-store-clean.lock";

/// The one-clean-at-a-time guard of a SQLite database: an exclusive `flock` on
/// `<database>.state-store-clean.lock`, a file that exists only while a clean holds it.
/// `<database>` is the file's real path (every symlink and `..` resolved), so two cleans that
/// name one database by different paths take the same lock. The file is opened with
/// `O_NOFOLLOW` (`fs::open_lock`): a symlink planted at its name never makes a clean (run as
/// root, say) create or open the link's target. It is created 0600, so only its owner (and
/// root) can open it to `flock` it: no other local user can hold a clean off.
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
///
/// A file a crashed run of another user left (a root clean killed, then the airflow user's)
/// cannot be opened. When the kernel's table of locks (`/proc/locks`) shows a process holding
/// it, the run is held off and names that process. Otherwise it is taken over only by whoever
/// may replace it: renamed away to a random name beside it (write on the directory, and in a
/// sticky one owning the file or the directory; else exit 4, naming the file and its owner),
/// then the table is read again for the file renamed. A run that opened it before the rename
/// and locked it meanwhile, and passed its path check, holds it: the file is renamed back
/// (never over a file created at the name since) and this run is held off. Otherwise the
/// file is unlinked and the run starts over: a run that opened it before the rename and
/// locks it after fails its path check (the name no longer names that file) and starts over
/// too, so the file renamed away is never a lock anyone counts.
pub(super) struct CleanLock {
    file: std::fs::File,
    path: std::path::PathBuf,
}

/// What [`CleanLock::acquire`] found.
pub(super) enum Acquired {
    Lock(CleanLock),
    /// Another clean holds the lock: its process id, when the kernel shows it.
    Held(Option<i64>),
}

impl CleanLock {
    fn acquire(path: std::path::PathBuf) -> Result<Acquired> {
        use std::os::fd::AsFd;
        use std::os::unix::fs::MetadataExt;
        let shown = path.display().to_string();
        let fail = |what: &str, e: std::io::Error| {
            Error::db(format!("cannot {what} the clean lock file {shown}"), e)
        };
        loop {
            let file = match crate::fs::open_lock(&path).map_err(|e| fail("open", e))? {
                crate::fs::LockFile::Opened(file) => file,
                crate::fs::LockFile::Denied(denied) => match Self::take_over(&path, &denied)? {
                    Some(held) => return Ok(held),
                    None => continue,
                },
            };
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    let stat = rustix::fs::fstat(file.as_fd()).map_err(|e| fail("read", e.into()))?;
                    let holder = crate::fs::flock_holder((stat.st_dev, stat.st_ino)).ok().flatten();
                    return Ok(Acquired::Held(holder));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(fail("lock", e).into()),
            }
            let locked = file.metadata().map_err(|e| fail("read", e))?;
            match std::fs::symlink_metadata(&path) {
                Ok(named) if (named.dev(), named.ino()) == (locked.dev(), locked.ino()) => {
                    // Removed by an ending that stops the process at once too (a hard
                    // deadline, a second signal), still locked, as `drop` removes it.
                    crate::fs::remove_at_exit(&path);
                    return Ok(Acquired::Lock(CleanLock { file, path }));
                }
                // Unlinked, or replaced, by the holder that ended meanwhile: start over.
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(fail("read", e).into()),
            }
        }
    }

    /// A lock file this run may not open (see [`CleanLock`]): held off when a process holds
    /// it, else renamed away and removed (`None`: start over).
    fn take_over(path: &std::path::Path, denied: &crate::fs::Denied) -> Result<Option<Acquired>> {
        let shown = path.display();
        let fail = |what: &str, e| Error::db(format!("cannot {what} the clean lock file {shown}"), e);
        let unknown = |e: std::io::Error| {
            Error::db(
                format!(
                    "cannot tell whether a clean holds the lock file {shown} (uid {}'s, which this user \
                     cannot open)",
                    denied.uid
                ),
                e,
            )
        };
        if let Some(pid) = crate::fs::flock_holder(denied.id).map_err(unknown)? {
            return Ok(Some(Acquired::Held(Some(pid))));
        }
        let aside = match crate::fs::set_aside(path) {
            Ok(Some(aside)) => aside,
            Ok(None) => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                anyhow::bail!(Error::db(
                    format!(
                        "cannot take over the clean lock file {shown}: uid {} owns it, no process holds it, \
                         and removing it takes write on its directory (remove it as that user or root)",
                        denied.uid
                    ),
                    e,
                ));
            }
            Err(e) => return Err(fail("take over", e).into()),
        };
        match crate::fs::flock_holder(aside.id) {
            Ok(None) => {
                aside.remove().map_err(|e| fail("remove", e))?;
                Ok(None)
            }
            held => {
                let holder = held.ok().flatten();
                aside.put_back().map_err(|e| {
                    Error::db(
                        format!("cannot rename back the clean lock file {shown}, which a clean holds"),
                        e,
                    )
                })?;
                Ok(Some(Acquired::Held(holder)))
            }
        }
    }
}

impl Drop for CleanLock {
    fn drop(&mut self) {
        // Unlinked while still locked: see `CleanLock`. Closing the file then lets go. Only
        // while the path names this file: a run taking over another user's file may have
        // renamed it away and failed to put it back over a file created since, which is
        // another run's.
        use std::os::unix::fs::MetadataExt;
        let ours = |m: &std::fs::Metadata| (m.dev(), m.ino());
        if let (Ok(named), Ok(locked)) = (std::fs::symlink_metadata(&self.path), self.file.metadata())
            && ours(&named) == ours(&locked)
        {
            let _ = std::fs::remove_file(&self.path);
        }
        crate::fs::keep_at_exit(&self.path);
        let _ = self.file.unlock();
    }
}

pub(super) fn begin(
    sqlite: &mut SqliteConnection,
    lock_timeout: Duration,
) -> Result<crate::db::dialect::CleanLock> {
    let fail = |e| sqlite.error("cannot prepare the clean", e);
    sqlite.conn.busy_timeout(lock_timeout).map_err(fail)?;
    let batch_bound = tune(&sqlite.conn, sqlite.path.as_deref()).map_err(fail)?;
    // A batch's dirty pages stay in the page cache until its commit, however many they are.
    // When a table's ids do not follow its dag runs (the rows of one key of every dag run
    // side by side, as concurrent runs write them), each batch of 10,000 rows rewrites
    // entries on nearly every page of the unique and the lookup index: about 60 MB at
    // 1,000,000 rows, twice the cache. SQLite then spilled them into the WAL mid-batch, wrote
    // them again at the commit and read them back: 4.45 GiB written and 5.84 GiB read for
    // 500,000 rows, against 2.56 and 3.46 GiB without spilling (docs/performance.md). A
    // batch's dirty pages are bounded by its rows; batch 0's one transaction is not, so it
    // lets the cache spill again (`windows`).
    sqlite.conn.pragma_update(None, "cache_spill", false).map_err(fail)?;
    sqlite.batch_bound = batch_bound;
    // SQLite's own locks cannot say "a clean is running" without blocking Airflow's writers
    // too (a lock on the database, or on a table of it, is a write lock), so the guard is a
    // lock file beside the database (see `CleanLock`).
    let Some(path) = &sqlite.path else { return Ok(crate::db::dialect::CleanLock::Taken) };
    // Keyed by the file, not by how the URL spells its path (see `CleanLock`).
    let real = std::fs::canonicalize(path)
        .map_err(|e| Error::db(format!("cannot resolve the path of {}", sqlite.location), e))?;
    let mut lock_path = real.into_os_string();
    lock_path.push(CLEAN_LOCK_SUFFIX);
    match CleanLock::acquire(lock_path.into())? {
        Acquired::Lock(lock) => {
            sqlite.clean_lock = Some(lock);
            Ok(crate::db::dialect::CleanLock::Taken)
        }
        Acquired::Held(pid) => Ok(crate::db::dialect::CleanLock::Held(pid.map(|pid| format!("pid {pid}")))),
    }
}

/// The WAL this session let grow (see `tune`) is copied back into the database now, by the
/// clean, instead of by the next Airflow worker that commits. PASSIVE never waits for
/// readers or blocks writers; whatever it cannot copy yet, a later checkpoint will. Then, when
/// everything was copied, one try at giving the WAL's space back to the filesystem (without
/// it the file keeps its largest size, up to the budget, until the database's last connection
/// closes): TRUNCATE holds off writers while it waits for readers, so it waits at most
/// [`TRUNCATE_WAIT`], and a busy database just keeps its WAL file.
pub(super) fn finish(sqlite: &mut SqliteConnection) -> Option<u64> {
    let passive = sqlite.conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
    });
    // (busy, frames in the WAL, frames copied): -1 frames when not in WAL mode.
    let Ok((busy, log, copied)) = passive else { return None };
    if log <= 0 {
        return None;
    }
    if busy == 0 && log == copied && sqlite.conn.busy_timeout(TRUNCATE_WAIT).is_ok() {
        let _ = sqlite.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }
    // What is left of the WAL file: emptied, or kept by another connection's transaction
    // (a reader's snapshot, or a writer's lock: the checkpoint cannot tell which).
    let mut wal = sqlite.path.clone()?.into_os_string();
    wal.push("-wal");
    std::fs::metadata(wal).ok().map(|m| m.len()).filter(|&bytes| bytes > 0)
}

/// A count one statement reads (a pragma's pages, a number of indexes); SQLite hands integers
/// over as i64, and none of these is negative.
fn count(conn: &rusqlite::Connection, sql: &str) -> rusqlite::Result<u64> {
    let n: i64 = conn.query_row(sql, [], |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Settings for the clean's own connection only; they end with it. Measured on 1,000,000
/// rows with 500,012 expired at batch 10,000 (docs/performance.md): each batch deletes
/// entries spread over the whole expired part of the `expires_at` index. `path` is the
/// database file, for the free space beside it. Returns the most rows a batch may delete for
/// its pages to fit in that free space (see [`batch_rows_bound`]).
pub(super) fn tune(
    conn: &rusqlite::Connection,
    path: Option<&std::path::Path>,
) -> rusqlite::Result<Option<u64>> {
    // SQLite's default 2 MiB page cache spills those dirty pages to the WAL several times
    // within one batch; 32 MiB holds most of one batch's pages, so each is written about once per
    // commit (64 MiB measured no faster, at 35 MB more memory; at 10,000,000 rows 1 GiB gained
    // 13 % for 1 GB more).
    conn.pragma_update(None, "cache_size", -CLEAN_CACHE_KIB)?;
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    let page_size = count(conn, "PRAGMA page_size")?;
    let pages = count(conn, "PRAGMA page_count")?;
    let free = path.and_then(|p| free_bytes(p.parent().unwrap_or(p)));
    // The b-trees a deleted row is in: its table's and each index's, the larger table's count.
    let trees = count(
        conn,
        "SELECT 1 + max((SELECT count(*) FROM pragma_index_list('task_state_store')), \
                        (SELECT count(*) FROM pragma_index_list('asset_state_store')))",
    )?;
    let bound = free.and_then(|free| batch_rows_bound(free, page_size, pages, trees));
    if mode.eq_ignore_ascii_case("wal") {
        let budget = wal_budget(pages.saturating_mul(page_size), free);
        // At least a page: 0 would turn checkpoints off.
        let pages = i64::try_from((budget / page_size.max(1)).max(1)).unwrap_or(i64::MAX);
        conn.pragma_update(None, "wal_autocheckpoint", pages)?;
        // In WAL mode NORMAL skips the fsync of each commit. A power loss can then undo the
        // last batches, never corrupt the file, and undoing a delete of expired rows is
        // safe: the next clean deletes them again. (In rollback-journal mode NORMAL can
        // corrupt on some filesystems, so it stays as Airflow left it there.)
        conn.pragma_update(None, "synchronous", "NORMAL")?;
    }
    Ok(bound)
}

/// The most rows one batch may delete so that the pages it changes fit in half the free space
/// beside the database (`free`), or `None` when the whole database would. Until its commit a
/// batch's pages are in the `-wal` file (beside at most [`wal_budget`], a quarter of the free
/// space, left from earlier batches) or, with a rollback journal, their old content in the
/// journal. A deleted row changes a page of each b-tree it is in (`trees`: its table and
/// each index), and on a big table those pages are spread (a batch of 10,000 touched 9,500
/// pages of the `expires_at` index at 10,000,000 rows), so each row is counted as a page of
/// each, plus a WAL frame's header: with 4 MiB free and 4 KiB pages, 127 rows, where batches
/// grown to 16,922 rows filled the file system mid-run (exit 4).
fn batch_rows_bound(free: u64, page_size: u64, pages: u64, trees: u64) -> Option<u64> {
    let frame = page_size.saturating_add(WAL_FRAME_HEADER);
    let room = free / 2;
    if pages.saturating_mul(frame) <= room {
        return None;
    }
    Some((room / frame.saturating_mul(trees.max(1)).max(1)).max(1))
}

/// The bytes a WAL frame holds beside its page.
const WAL_FRAME_HEADER: u64 = 24;

/// How far a clean lets the WAL grow before its commit copies it back into the database
/// file (a checkpoint), in bytes: four times the database, between 64 MiB and 1 GiB, and
/// never more than a quarter of the free space beside it (`free`, when known), that floor
/// included: with 12 MB free, a floor of 64 MiB filled the file system mid-run, where
/// checkpoints as often as the space allows finish the same deletes.
///
/// Each batch rewrites the pages of the `expires_at` index that its rows' entries sit on, and
/// on a big table those are spread over the whole index (a batch of 10,000 touched 9,500 of
/// its 92,000 pages at 10,000,000 rows). Each checkpoint then writes them into the database
/// file and syncs it, and one page rewritten by many batches is copied once per checkpoint.
/// A WAL large against the index lets many batches share a checkpoint, so each page is
/// written and synced once for many batches instead of once for each. Measured at
/// 10,000,000 rows (4,999,987 expired, 2.8 GB, batch 10,000): checkpoints every 64 MiB,
/// 162 s; every 256 MiB, 124 s; every 1 GiB, 80 s, against 90 s for one `DELETE` by the
/// `sqlite3` shell (docs/performance.md). Where the ids do not follow the dag runs, every
/// batch rewrites nearly every page of the unique and the lookup index, a third of the file:
/// at 1,000,000 such rows (a 200 MB file, 500,000 expired) a WAL as large as the database
/// held four batches, and its checkpoints wrote 3.96 GiB in all; four times the database,
/// 2.61 GiB (docs/performance.md).
fn wal_budget(database_bytes: u64, free: Option<u64>) -> u64 {
    let budget = database_bytes.saturating_mul(WAL_BUDGET_DATABASES).clamp(WAL_BUDGET_MIN, WAL_BUDGET_MAX);
    free.map_or(budget, |free| budget.min(free / WAL_BUDGET_FREE_SHARE))
}

/// The bytes an unprivileged user may still write on the filesystem holding `dir`.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(dir).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// A dag run's rows are scattered when the ids between its first and its last are this many
/// times its rows, or more.
const SCATTERED: i64 = 16;

/// Whether the table's ids scatter the rows of its dag runs, so that a batched clean should
/// walk it by dag run (see [`crate::db::clean::Cursor`]). Sampled at three dag runs, those of
/// the lowest id, the middle one and the highest: a dag run is scattered when the ids from its
/// first row to its last span [`SCATTERED`] times its rows or more, and the table when two of
/// the three are. Each sample is a range of the unique index, which holds the ids.
///
/// Where each dag run's rows are together (rows written as its tasks ran, or a few dag runs at
/// a time), the walk by id is the faster, since it reads the table in order: walked by dag run,
/// a batch looks each row up from the index, which took 16 % longer at batch 10,000 on
/// 1,000,000 such rows and 50 % longer where 5 % of them had expired. Where the ids go key by
/// key across the dag runs (each dag run's rows 1,000 or 10,000 ids apart), the walk by dag run
/// wrote a fifth of what the walk by id did, and took 0.7 times one `DELETE` at 10,000,000 rows
/// against 1.7 times (docs/performance.md).
pub(super) fn dag_runs_scattered(conn: &rusqlite::Connection) -> rusqlite::Result<bool> {
    use rusqlite::OptionalExtension;
    let bounds = crate::db::clean::ID_BOUNDS;
    let ends: (Option<i64>, Option<i64>) = conn.query_row(bounds, [], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let (Some(low), Some(high)) = ends else { return Ok(false) };
    let mut scattered = 0;
    for at in [low, low.midpoint(high), high] {
        let dag_run: Option<rusqlite::types::Value> = conn
            .query_row(
                "SELECT dag_run_id FROM task_state_store WHERE id >= ?1 ORDER BY id LIMIT 1",
                [at],
                |r| r.get(0),
            )
            .optional()?;
        let Some(dag_run) = dag_run else { return Ok(false) };
        let (rows, span): (i64, i64) = conn.query_row(
            "SELECT count(*), max(id) - min(id) + 1 FROM task_state_store WHERE dag_run_id = ?1",
            [dag_run],
            |r| Ok((r.get(0)?, r.get::<_, Option<i64>>(1)?.unwrap_or(0))),
        )?;
        if span >= rows.saturating_mul(SCATTERED) {
            scattered += 1;
        }
    }
    Ok(scattered >= 2)
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
    // One transaction for every expired row: its dirty pages may be the whole table's, so
    // they spill as SQLite's default has them, and the batches' setting (`begin`) is put back
    // after it.
    let spill: i64 = conn.query_row("PRAGMA cache_spill", [], |r| r.get(0))?;
    conn.pragma_update(None, "cache_spill", true)?;
    let deleted = windows_in_one_transaction(conn, cutoff, after_id);
    conn.pragma_update(None, "cache_spill", spill != 0)?;
    deleted
}

fn windows_in_one_transaction(
    conn: &mut rusqlite::Connection,
    cutoff: &str,
    after_id: i64,
) -> rusqlite::Result<u64> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut deleted = 0;
    // The first id of the rest, inclusive: at the start of the walk (`i64::MIN`) that is the
    // row with id -2^63 too.
    let mut from = if after_id == i64::MIN { i64::MIN } else { after_id.saturating_add(1) };
    {
        let mut next = tx.prepare("SELECT min(id) FROM task_state_store WHERE id >= ?1")?;
        let mut delete =
            tx.prepare("DELETE FROM task_state_store WHERE id >= ?1 AND id <= ?2 AND expires_at < ?3")?;
        // Each window starts at the next existing id, so gaps in the ids cost nothing.
        while let Some(first) = next.query_row([from], |r| r.get::<_, Option<i64>>(0))? {
            let to = first.saturating_add(crate::db::clean::DELETE_WINDOW_IDS - 1);
            deleted += u64::try_from(delete.execute(params![first, to, cutoff])?).unwrap_or(u64::MAX);
            if to == i64::MAX {
                break;
            }
            from = to + 1;
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

    /// A batched clean's session keeps each batch's dirty pages in memory until the commit
    /// (no spill); batch 0's one transaction, which spills, leaves that setting as it was.
    #[test]
    fn batches_never_spill_the_page_cache_and_batch_0_leaves_that_so() {
        let dir = std::env::temp_dir().join(format!("state-store-spill-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("airflow.db");
        let url = crate::url::DbUrl::parse(&format!("sqlite:///{}", path.display())).unwrap();
        let timeouts = crate::db::Timeouts::new(Duration::from_secs(30));
        let mut sqlite = SqliteConnection::open(
            &url,
            crate::db::Access::ReadWrite,
            crate::db::Purpose::Sandbox,
            &timeouts,
        )
        .unwrap();
        crate::db::dialect::Connection::create_tables(&mut sqlite).unwrap();
        let spill = |sqlite: &SqliteConnection| {
            sqlite.conn.query_row("PRAGMA cache_spill", [], |r| r.get::<_, i64>(0)).unwrap()
        };
        assert!(spill(&sqlite) > 0, "SQLite's default spills");
        assert_eq!(begin(&mut sqlite, Duration::from_secs(1)).unwrap(), crate::db::dialect::CleanLock::Taken);
        assert_eq!(spill(&sqlite), 0, "a batch's dirty pages stay in the cache until its commit");

        sqlite
            .conn
            .execute_batch(
                "INSERT INTO dag_run (id, dag_id, run_id, run_type, run_after, clear_number, span_status) \
             VALUES (1, 'd', 'r', 'manual', '2026-01-01 00:00:00.000000', 0, 'not_started'); \
             INSERT INTO task_state_store (dag_run_id, dag_id, run_id, task_id, map_index, \"key\", value, \
             updated_at, expires_at) VALUES (1, 'd', 'r', 't', -1, 'k', '1', '2026-01-01 00:00:00.000000', \
             '2026-01-02 00:00:00.000000')",
            )
            .unwrap();
        let cutoff = Timestamp::parse_rfc3339("2026-06-01T00:00:00Z").unwrap();
        assert_eq!(delete_all_expired(&mut sqlite, cutoff, i64::MIN).unwrap(), 1);
        assert_eq!(spill(&sqlite), 0, "batch 0 puts the batches' setting back");
        drop(sqlite);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_batch_is_bounded_by_the_free_space_unless_the_whole_database_fits() {
        const MIB: u64 = 1 << 20;
        // 4 MiB free, 4 KiB pages, a table and 3 indexes: 2 MiB for 4 frames a row.
        assert_eq!(batch_rows_bound(4 * MIB, 4096, 100_000, 4), Some(2 * MIB / (4 * 4120)));
        assert_eq!(batch_rows_bound(4 * MIB, 4096, 100_000, 4), Some(127));
        // A database whose every page fits needs no bound; nor does plenty of room.
        assert_eq!(batch_rows_bound(4 * MIB, 4096, 500, 4), None);
        assert_eq!(batch_rows_bound(100_000 * MIB, 4096, 1_000_000, 4), None);
        assert_eq!(batch_rows_bound(100_000 * MIB, 4096, 100_000_000, 4), Some(3_181_359));
        // Nearly nothing free: one row a batch, never none.
        assert_eq!(batch_rows_bound(1_000, 4096, 100_000, 4), Some(1));
    }

    #[test]
    fn the_wal_budget_follows_the_database_within_its_bounds_and_the_free_space() {
        const MIB: u64 = 1 << 20;
        // A small database keeps the old 64 MiB; a large one is capped at 1 GiB; between,
        // four times the database.
        assert_eq!(wal_budget(10 * MIB, None), WAL_BUDGET_MIN);
        assert_eq!(wal_budget(70 * MIB, None), 280 * MIB);
        assert_eq!(wal_budget(280 * MIB, None), WAL_BUDGET_MAX);
        assert_eq!(wal_budget(2_800 * MIB, None), WAL_BUDGET_MAX);
        // A quarter of the free space at most, the 64 MiB floor included: a nearly full disk
        // gets checkpoints as often as it needs.
        assert_eq!(wal_budget(2_800 * MIB, Some(2_000 * MIB)), 500 * MIB);
        assert_eq!(wal_budget(2_800 * MIB, Some(100 * MIB)), 25 * MIB);
        assert_eq!(wal_budget(10 * MIB, Some(12 * MIB)), 3 * MIB);
        assert_eq!(wal_budget(2_800 * MIB, Some(80 << 30)), WAL_BUDGET_MAX);
        assert!(free_bytes(&std::env::temp_dir()).is_some_and(|free| free > 0));
    }

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
                        if let Acquired::Lock(lock) = CleanLock::acquire(path.clone()).unwrap() {
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
        let Acquired::Lock(lock) = CleanLock::acquire(path.clone()).unwrap() else {
            panic!("a stale file is no lock")
        };
        let held = CleanLock::acquire(path.clone()).unwrap();
        assert!(matches!(held, Acquired::Held(Some(pid)) if pid == i64::from(std::process::id())), "held");
        drop(lock);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
