//! The clean engine: Airflow's garbage collection, done so a cron job can trust it.
//!
//! Task rows with `expires_at < cutoff` are deleted in batches of `state_cleanup_batch_size`
//! rows, ranges of a walk of the table by id or by dag run ([`Cursor`]), each batch its own
//! short transaction whose DELETE re-checks the expiry, so a key a worker refreshes mid-run
//! survives. A batch size of 0 is one transaction with no id list, so it works on any table
//! size (Airflow's own selects every id and binds them all, which SQLite refuses past its
//! variable limit). Then the rows of inactive assets are swept. A signal, `--max-rows` or
//! `--max-duration` stops a run between batches; the [`Summary`] says what was done. The
//! engine prints nothing: a [`Watch`] hears of each batch.

mod batching;
mod dry_run;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use serde::Serialize;

use crate::archive::Sink;
use crate::db::{CleanLock, Cursor, EXACT_PAGE, QuietPace, Store, WriteMark};
use crate::error::{Error, Result};
use crate::model::StoredTime;
use crate::ops::usage;
use crate::signals;
use crate::time::Timestamp;

pub(crate) use batching::*;
pub(crate) use dry_run::*;

/// What a run deletes and what bounds it.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Task rows with `expires_at` before this instant are expired.
    pub(crate) cutoff: Timestamp,
    /// Rows per batch; 0 is one transaction. With `batch_time`, the first batch's size.
    pub(crate) batch_size: u64,
    /// `--batch-size auto`: while other sessions write, each batch sized to take about this
    /// long and followed by a pause [`AUTO_PAUSE_RATIO`] times as long as the batch took,
    /// unless `sleep` says otherwise; while none does, [`QUIET_BATCH_TIME`] and no pause (see
    /// [`Pacer`]).
    pub(crate) batch_time: Option<Duration>,
    /// Where the configured value came from, when it runs as auto though it says 0 (see
    /// [`choose_batching`]).
    pub(crate) auto_from: Option<String>,
    /// Which of the two phases run: expired task rows, orphaned asset rows.
    pub(crate) tasks: bool,
    pub(crate) orphans: bool,
    pub(crate) max_rows: Option<u64>,
    pub(crate) max_duration: Option<Duration>,
    /// The pause after each batch that deleted rows.
    pub(crate) sleep: Option<Duration>,
    /// A detail line for every batch, to [`Watch::detail`].
    pub(crate) verbose: bool,
    /// How long the run waits for a lock (the clean lock's included).
    pub(crate) lock_timeout: Duration,
    /// `--archive`: the rows deleted are appended here first.
    pub(crate) archive: Option<PathBuf>,
    /// For `--verbose`: the database (its URL, masked) and what the run deletes and what
    /// bounds it, as the command line gave them.
    pub(crate) database: String,
    pub(crate) deleting: String,
}

impl Options {
    /// Rows per batch when they are fixed, not sized as the run goes (auto).
    fn fixed_size(&self) -> Option<u64> {
        self.batch_time.is_none().then_some(self.batch_size)
    }

    /// The first `--verbose` line of a run: what it reads, what it deletes (or counts) and
    /// what bounds it, the cutoff and the batching.
    fn first_line(&self, reading: &str, deleting: &str) -> String {
        let batching = batching_text(self.fixed_size(), self.batch_time, self.auto_from.as_deref());
        let cutoff = self.cutoff.to_rfc3339();
        format!(
            "{reading} {}; {deleting} {}; cutoff {cutoff}, batch size {batching}",
            self.database, self.deleting
        )
    }
}

#[cfg(test)]
impl Options {
    /// A run of everything, in one transaction, with no limit: what the fields a test sets
    /// start from.
    pub(crate) fn new(cutoff: Timestamp) -> Options {
        Options {
            cutoff,
            batch_size: 0,
            batch_time: None,
            auto_from: None,
            tasks: true,
            orphans: true,
            max_rows: None,
            max_duration: None,
            sleep: None,
            verbose: false,
            lock_timeout: Duration::ZERO,
            archive: None,
            database: String::new(),
            deleting: String::new(),
        }
    }
}

/// Who hears of a run while it goes: a progress bar, the last words a second signal prints.
pub(crate) trait Watch {
    /// Before the first batch and after every batch, with the summary so far; `deleted` when
    /// the batch deleted rows (and at the start).
    fn batch(&mut self, summary: &Summary, deleted: bool);
    /// A line about a batch, with `--verbose`.
    fn detail(&mut self, line: &str);
    /// Whether it wants to hear how far the walk of the table has gone.
    fn wants_walk(&self) -> bool {
        false
    }
    /// The share of the walk's leading column (ids, or dag run ids) walked so far (0 to 1).
    fn walked(&mut self, _share: f64) {}
    /// Once the clean lock is taken, before the first batch, with the expired rows when
    /// counted.
    fn start(&mut self, _total: Option<u64>) {}
    /// After the last batch, the clean lock released.
    fn finish(&mut self) {}
}

/// The cutoff of a run that starts now: `--before`, which must not be in the future, or now.
pub(crate) fn cutoff(before: Option<&str>) -> Result<Timestamp> {
    let now = Timestamp::now();
    let Some(text) = before else { return Ok(now) };
    let before =
        Timestamp::parse_rfc3339(text).with_context(|| Error::Usage("invalid --before".to_string()))?;
    if before > now {
        return usage(format!(
            "--before {} is in the future: it would delete keys that have not expired yet",
            before.to_rfc3339()
        ));
    }
    Ok(before)
}

/// The hard deadline of `--max-duration` (`shown` as given): a run that has not stopped by
/// itself [`MAX_DURATION_GRACE`] after it (a batch blocked on a database or a file that does
/// not answer) ends at once, with the document of the batches committed until then.
pub(crate) fn hard_deadline(max: Duration, shown: String) {
    signals::after(max.saturating_add(MAX_DURATION_GRACE), move || signals::Ending::Failed {
        message: format!(
            "--max-duration {shown} passed {} s ago and the run has not stopped (a database or file \
             that does not answer): stopped at once; the batch in progress, if any, is rolled back",
            MAX_DURATION_GRACE.as_secs()
        ),
        exit_code: crate::error::exit::DATABASE,
    });
}

/// How long after `--max-duration` a run that has not stopped on its own is ended at once.
/// A responsive run stops at its next batch boundary, well within it.
pub(crate) const MAX_DURATION_GRACE: Duration = Duration::from_secs(15);

/// A run from its clean lock to the lock's release: the lock taken (refused while another
/// clean holds it), the archive opened, the expired rows counted for `watch` with `total`, the
/// batches run ([`run`]), and with `backlog` what the run left (expired task rows before its
/// cutoff, orphaned asset rows). It comes to the summary of its batches, that backlog, and
/// how the run ended: a run stopped by a signal with [`Error::Interrupted`].
pub(crate) fn clean(
    store: &mut Store,
    options: &Options,
    (total, backlog): (bool, bool),
    watch: &mut dyn Watch,
) -> Result<(Summary, Option<Backlog>, Result<()>)> {
    if let CleanLock::Held(holder) = store.begin_clean(options.lock_timeout)? {
        let holder = holder.map(|h| format!(" (held by {h})")).unwrap_or_default();
        return Err(Error::Busy(format!(
            "another state-store clean is running on {}{holder}; this one deleted nothing (try again when it ends)",
            options.database
        ))
        .into());
    }
    let mut archive = options.archive.as_deref().map(Sink::archive).transpose()?;
    signals::defer();
    // Counting costs a query, worth it only for someone watching a bar.
    watch.start(if total { Some(store.count_expired(options.cutoff)?) } else { None });
    if options.verbose {
        watch.detail(&options.first_line("clean: took the clean lock of", "deleting"));
    }
    let (mut summary, mut result) = run(store, options, archive.as_mut(), watch);
    summary.wal_left = store.finish_clean();
    watch.finish();
    let backlog = if backlog && result.is_ok() { left(store, options.cutoff).ok() } else { None };
    // A run stopped by a signal exits 130 or 143, so its summary carries the error too.
    if let (Ok(()), Some(Stop::Signal(signal))) = (&result, summary.stopped_by) {
        result = Err(crate::signals::interrupted(signal).into());
    }
    Ok((summary, backlog, result))
}

/// What a run left for the next one: expired task rows before its cutoff, orphaned asset rows.
pub(crate) type Backlog = (u64, u64);

fn left(store: &mut Store, cutoff: Timestamp) -> Result<Backlog> {
    let orphans = store.orphans_by_asset()?.iter().map(|a| a.rows).sum();
    Ok((store.count_expired(cutoff)?, orphans))
}

/// Runs a clean on a store whose clean lock this process holds. The summary comes back with
/// the outcome, so that a run that failed part-way still says what it did.
pub(crate) fn run(
    store: &mut Store,
    options: &Options,
    archive: Option<&mut Sink>,
    watch: &mut dyn Watch,
) -> (Summary, Result<()>) {
    let summary = Summary { archive: archive.as_deref().map(archived), ..Summary::empty(options) };
    let started = Instant::now();
    let pacer = options.batch_time.map(|busy| Pacer::new(busy, store));
    let size = pacer.as_ref().map_or(options.batch_size, |pacer| pacer.bounded(options.batch_size));
    if let Some(bound) = pacer.as_ref().and_then(|pacer| pacer.bound).filter(|&b| b < AUTO_MAX_ROWS)
        && options.verbose
    {
        watch.detail(&format!(
            "clean: batches of at most {bound} row(s): the pages a batch changes must fit in the free \
             space beside the database"
        ));
    }
    let mut run = Run { store, summary, options, started, archive, watch, size, pacer };
    run.watch.batch(&run.summary, true);
    let result = run.delete_all();
    run.summary.seconds = started.elapsed().as_secs_f64();
    run.summary.archive = run.archive.as_deref().map(archived);
    (run.summary, result)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Signal(i32),
    MaxRows,
    MaxDuration,
}

impl Stop {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Stop::Signal(signal) => crate::signals::signal_name(signal),
            Stop::MaxRows => "max_rows",
            Stop::MaxDuration => "max_duration",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Summary {
    pub(crate) task_rows_deleted: u64,
    pub(crate) asset_rows_deleted: u64,
    pub(crate) batches: u64,
    pub(crate) orphan_batches: u64,
    /// Expired task rows a complete expired phase left behind: rows another session held
    /// locked, which the batches skipped. `None` when the phase did not run to its end.
    pub(crate) task_rows_skipped: Option<u64>,
    pub(crate) cutoff: Timestamp,
    /// Rows per batch; with `batch_time` (`--batch-size auto`), the size of the last batch,
    /// `None` before one ran.
    pub(crate) batch_size: Option<u64>,
    pub(crate) batch_time: Option<Duration>,
    /// See [`Options::auto_from`].
    pub(crate) auto_from: Option<String>,
    pub(crate) stopped_by: Option<Stop>,
    pub(crate) seconds: f64,
    /// The `--archive` file and the rows appended to it by this run.
    pub(crate) archive: Option<(String, u64)>,
    /// Task rows archived and then left, not deleted: another session wrote them (or made
    /// them live again) after they were read. Each is in the archive as it was read and in
    /// the table as written since.
    pub(crate) archived_kept: u64,
    /// Bytes of the SQLite WAL file the run's last checkpoint could not empty (another
    /// connection was in a transaction, reading or writing: SQLite's checkpoint says busy for
    /// both alike): they stay on disk until a later checkpoint.
    pub(crate) wal_left: Option<u64>,
    /// The batch whose DELETE failed, when one did (`Some(None)`: the open-ended last batch).
    /// A connection lost after the server committed the DELETE but before it answered leaves
    /// that batch deleted without the count knowing it (observed with MariaDB's `KILL`).
    pub(crate) in_doubt: Option<Option<u64>>,
}

impl Summary {
    /// The summary of a run with these options that has done nothing yet.
    pub(crate) fn empty(options: &Options) -> Summary {
        Summary {
            task_rows_deleted: 0,
            asset_rows_deleted: 0,
            batches: 0,
            orphan_batches: 0,
            task_rows_skipped: None,
            cutoff: options.cutoff,
            batch_size: options.fixed_size(),
            batch_time: options.batch_time,
            auto_from: options.auto_from.clone(),
            stopped_by: None,
            seconds: 0.0,
            archive: None,
            archived_kept: 0,
            wal_left: None,
            in_doubt: None,
        }
    }

    /// The one line that ends every run, on stderr: within 200 characters on an ordinary run,
    /// so the batching is named, not explained (`-v`, `--help` and the document explain it).
    pub(crate) fn line(&self) -> String {
        let stopped = match self.stopped_by {
            Some(Stop::MaxRows) => "; stopped at --max-rows, run again to go on".to_string(),
            Some(Stop::MaxDuration) => "; stopped at --max-duration, run again to go on".to_string(),
            Some(stop) => format!("; stopped by {}, run again to finish", stop.name()),
            None => String::new(),
        };
        let archived = match &self.archive {
            Some((path, rows)) if self.archived_kept > 0 => format!(
                "; archived {rows} row(s) to {path}, of which {} were written by another session after they were read \
                 and are left as written, not deleted",
                self.archived_kept
            ),
            Some((path, rows)) => format!("; archived {rows} row(s) to {path}"),
            None => String::new(),
        };
        let in_doubt = match self.in_doubt {
            Some(rows) => format!(
                "; the batch that failed ({}) is deleted too if the server committed it before the error reached state-store",
                rows.map_or_else(
                    || "the remaining expired rows".to_string(),
                    |n| format!("up to {n} row(s)")
                )
            ),
            None => String::new(),
        };
        let wal = match self.wal_left {
            Some(bytes) => format!(
                "; the -wal file keeps {} MiB, which another connection (a reader or a writer) kept from \
                 being emptied (a later checkpoint gives the space back)",
                bytes.div_ceil(1 << 20)
            ),
            None => String::new(),
        };
        let skipped = match self.task_rows_skipped {
            Some(rows) if rows > 0 => format!(
                "; skipped {rows} expired task row(s) another session held locked, left for the next run"
            ),
            _ => String::new(),
        };
        format!(
            "clean: deleted {} expired task row(s) in {} batch(es) and {} orphaned asset row(s); cutoff {}, batch size {}, {:.2}s{skipped}{archived}{wal}{in_doubt}{stopped}",
            self.task_rows_deleted,
            self.batches,
            self.asset_rows_deleted,
            self.cutoff.to_rfc3339(),
            batching_brief(self.batch_size, self.batch_time),
            self.seconds
        )
    }
}

/// The summary of a run in JSON (docs/output.md#clean-summary): `batching` is `auto`, `rows` or
/// `one_transaction` (see [`batching_name`]), `batching_from` where the configured 0 that runs
/// as auto came from (see [`Options::auto_from`]), `batch_size` with `auto` the last batch's
/// size (`null` before one ran), `batch_time_ms` `--batch-size auto`'s time per batch beside
/// other sessions' writes, `seconds` to the millisecond, `archived_rows_kept` with `--archive`
/// the rows archived and then left (see [`Summary::archived_kept`]), and `wal_bytes_left`
/// SQLite's bytes the `-wal` file keeps after the run (see [`Summary::wal_left`]).
impl Serialize for Summary {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let mut doc = serializer.serialize_struct("Summary", 18)?;
        doc.serialize_field("task_rows_deleted", &self.task_rows_deleted)?;
        doc.serialize_field("asset_rows_deleted", &self.asset_rows_deleted)?;
        doc.serialize_field("batches", &self.batches)?;
        doc.serialize_field("orphan_batches", &self.orphan_batches)?;
        doc.serialize_field("cutoff", &self.cutoff.to_rfc3339())?;
        doc.serialize_field("batching", batching_name(self.batch_size, self.batch_time))?;
        if let Some(from) = &self.auto_from {
            doc.serialize_field("batching_from", from)?;
        }
        doc.serialize_field("batch_size", &self.batch_size)?;
        if let Some(ms) = batch_time_ms(self.batch_time) {
            doc.serialize_field("batch_time_ms", &ms)?;
        }
        doc.serialize_field("dry_run", &false)?;
        doc.serialize_field("interrupted", &matches!(self.stopped_by, Some(Stop::Signal(_))))?;
        doc.serialize_field("stopped_by", &self.stopped_by.map(Stop::name))?;
        doc.serialize_field("seconds", &((self.seconds * 1000.0).round() / 1000.0))?;
        doc.serialize_field("archive", &self.archive.as_ref().map(|(path, _)| path))?;
        doc.serialize_field("archived_rows", &self.archive.as_ref().map(|(_, rows)| rows))?;
        if self.archive.is_some() {
            doc.serialize_field("archived_rows_kept", &self.archived_kept)?;
        }
        doc.serialize_field("task_rows_skipped", &self.task_rows_skipped)?;
        if let Some(bytes) = self.wal_left {
            doc.serialize_field("wal_bytes_left", &bytes)?;
        }
        doc.end()
    }
}

/// One clean in progress: the connection, what has been done so far, what may stop it, and
/// where deleted rows are archived first.
struct Run<'a> {
    store: &'a mut Store,
    summary: Summary,
    options: &'a Options,
    started: Instant,
    archive: Option<&'a mut Sink>,
    watch: &'a mut dyn Watch,
    /// Rows of the next batch: the batch size, or what the pacer made of it.
    size: u64,
    /// `--batch-size auto`'s pacing.
    pacer: Option<Pacer>,
}

/// Smallest and largest batch `--batch-size auto` makes, in rows.
pub(crate) const AUTO_MIN_ROWS: u64 = 100;
pub(crate) const AUTO_MAX_ROWS: u64 = 100_000;
/// The first batch of `--batch-size auto`, in rows.
pub(crate) const AUTO_FIRST_ROWS: u64 = 1_000;
/// `--batch-size auto` pauses this many times as long as each batch took, while other
/// sessions write. Measured beside two workers writing on a 2-core machine
/// (docs/performance.md#workers-beside-a-clean): a workers' p99 rises less the less of the
/// time the clean keeps the server busy; at half the time (a ratio of 1) MariaDB's p99 rose
/// 1.5 to 1.6 times, at a quarter 1.4 times.
pub(crate) const AUTO_PAUSE_RATIO: u32 = 3;
/// `--batch-time`'s default: while other sessions write, each batch of `--batch-size auto`
/// about this long. At 10 ms a batch deletes a few hundred rows on MariaDB and several thousand
/// on PostgreSQL on a 2-core machine; the workers beside it wait less for shorter ones
/// (docs/performance.md), but below that a batch's round trips and commit become most of it.
pub(crate) const AUTO_BATCH_TIME: Duration = Duration::from_millis(10);
/// After another session's write is seen, `--batch-size auto` stays gentle at least this
/// long: a worker that writes every few hundred milliseconds is never met at full speed.
pub(crate) const QUIET_AFTER: Duration = Duration::from_secs(1);

/// How much earlier than the last reading of the write counter another session's activity in
/// this database still counts for the writes it saw: the two readings are not one instant.
const ACTIVE_MARGIN: Duration = Duration::from_millis(50);

/// `--batch-size auto`: batches bounded by time rather than rows, as pt-archiver's and gh-ost's
/// chunks are, and paced by what other sessions do, as gh-ost's `--max-load` throttles on the
/// server's load. Between batches the pacer reads the database's count of committed writes
/// ([`Store::write_mark`]), and where that count is the whole server's, which sessions of this
/// database were busy ([`Store::others_active_here`]): when another session of this database
/// wrote since the last batch (or within
/// [`QUIET_AFTER`]), each batch is sized to take about `busy` (`--batch-time`) and followed by
/// a pause [`AUTO_PAUSE_RATIO`] times as long, so that the clean keeps the database busy at
/// most a quarter of the time. Once two readings in a row show no one else writing, the run
/// goes at full speed: batches of the dialect's [`QuietPace`] (250 ms back to back on a server;
/// 500 ms on SQLite, each followed by a pause a fifth as long (at most 100 ms), since its waiting
/// writers are otherwise unseen). A
/// database that cannot tell is taken as busy. A size grows at most twofold from one batch to
/// the next (one fast batch says little) and shrinks as far as the pace says.
#[derive(Debug, Clone)]
struct Pacer {
    busy: Duration,
    quiet_pace: QuietPace,
    /// The last reading of the write counter, and when it was read.
    mark: Option<WriteMark>,
    read_at: Instant,
    /// Until when the run stays gentle, after another session's write.
    busy_until: Instant,
    /// Readings in a row that showed no other session's write.
    calm: u32,
    /// No other session wrote within [`QUIET_AFTER`], nor in the last two readings: full speed.
    quiet: bool,
    /// The most rows a batch may delete for the space its changes take before the commit
    /// ([`Store::batch_rows_bound`]): below [`AUTO_MIN_ROWS`] too, when that is all that fits.
    bound: Option<u64>,
}

impl Pacer {
    /// A pacer that starts gentle, with the counter as it is before the first batch.
    fn new(busy: Duration, store: &mut Store) -> Pacer {
        let mark = store.write_mark().ok().flatten();
        let quiet_pace = store.quiet_pace();
        let bound = store.batch_rows_bound();
        let now = Instant::now();
        Pacer { busy, quiet_pace, mark, read_at: now, busy_until: now, calm: 0, quiet: false, bound }
    }

    /// `rows` within [`Pacer::bound`].
    fn bounded(&self, rows: u64) -> u64 {
        self.bound.map_or(rows, |bound| rows.min(bound))
    }

    /// Reads the counter after a batch that committed `own` write transactions of this
    /// session's, and says whether the run may go at full speed. A server's counter counts the
    /// writes of every database on it: when it moved, the writes count only if another session
    /// of this database was busy since the last reading ([`Store::others_active_here`]), so
    /// that another tenant of the server does not slow the clean (one write a second into
    /// another database made MariaDB's default clean 3.3 times slower).
    fn observe(&mut self, store: &mut Store, own: u64) {
        let now = store.write_mark().ok().flatten();
        let at = Instant::now();
        let others_wrote = match (self.mark, now) {
            (Some(before), Some(after)) => {
                let own = if after.counts_own { own } else { 0 };
                after.value.saturating_sub(before.value) > own
                    && store
                        .others_active_here(at.duration_since(self.read_at) + ACTIVE_MARGIN)
                        .ok()
                        .flatten()
                        .unwrap_or(true)
            }
            // Nothing to compare: the database cannot tell, or a reading failed.
            _ => true,
        };
        self.mark = now;
        self.read_at = at;
        if others_wrote {
            self.busy_until = at + QUIET_AFTER;
            self.calm = 0;
        } else {
            self.calm += 1;
        }
        self.quiet = self.calm >= 2 && at >= self.busy_until;
    }

    /// The pace in words for `-v`, a gentle one with what keeps it gentle, so that it never
    /// reads as "no one writes" followed by the same words at full speed.
    fn mode(&self) -> &'static str {
        match (self.quiet, self.calm) {
            (true, _) => "full speed: no other session writes",
            (false, 0) => "gentle: another session writes",
            (false, 1) => "gentle until two readings in a row see no other session's write (one so far)",
            (false, _) => "gentle for 1 s after another session's last write",
        }
    }

    fn target(&self) -> Duration {
        if self.quiet { self.quiet_pace.batch } else { self.busy }
    }

    /// The next batch's size after one of `rows` that took `took`.
    fn next(&self, rows: u64, took: Duration) -> u64 {
        let took = took.as_secs_f64().max(1e-4);
        let paced = (rows as f64 * self.target().as_secs_f64() / took) as u64;
        self.bounded(paced.min(rows.saturating_mul(2)).clamp(AUTO_MIN_ROWS, AUTO_MAX_ROWS))
    }

    /// The pause after a batch that took `took`.
    fn pause(&self, took: Duration) -> Duration {
        if self.quiet {
            took.mul_f64(self.quiet_pace.pause_share).min(self.quiet_pace.max_pause)
        } else {
            took * AUTO_PAUSE_RATIO
        }
    }
}

impl Run<'_> {
    /// The two phases of a run. The orphan sweep starts only after every expired task row is
    /// gone, so a stopped run leaves the database as a later run expects to find it.
    fn delete_all(&mut self) -> Result<()> {
        if self.options.tasks {
            self.delete_expired()?;
            if self.summary.stopped_by.is_some() {
                return Ok(());
            }
            // Every batch ran: an expired row still there was held by another session (a worker
            // writing that key) when its batch came, and skipped (PostgreSQL, MySQL 8.0.1+ and
            // MariaDB 10.6+). The next run takes it. Counted only when a batch skipped one: on
            // PostgreSQL the count walks every dead entry the run left in the `expires_at`
            // index and visits its row, as long as the DELETE took again (10,000,000 rows: the
            // run took 2.7 times the floor with it). A row a worker re-set to an expired
            // time behind the run is left for the next run without being counted.
            let skipped = self.store.skipped_locked_rows();
            self.summary.task_rows_skipped =
                Some(if skipped { self.store.count_expired(self.summary.cutoff)? } else { 0 });
        }
        if let Some(stop) = self.should_stop().filter(|s| matches!(s, Stop::Signal(_))) {
            self.summary.stopped_by = Some(stop);
            return Ok(());
        }
        if self.options.orphans {
            if self.archive.is_some() { self.sweep_orphans_archived()? } else { self.sweep_orphans()? }
        }
        Ok(())
    }

    /// Walks the table in batches (by id, or by dag run: see [`Cursor`]); between batches it
    /// stops for a signal or a limit.
    fn delete_expired(&mut self) -> Result<()> {
        let cutoff = self.summary.cutoff;
        let mut after = self.store.walk_start(self.size > 0, self.archive.is_some());
        // The ends of the walk's leading column, for how far it has gone: two index lookups.
        let bounds =
            if self.watch.wants_walk() { self.store.walk_bounds(after).ok().flatten() } else { None };
        loop {
            if let Some(stop) = self.should_stop() {
                self.summary.stopped_by = Some(stop);
                return Ok(());
            }
            let batch_started = Instant::now();
            let remaining = self.options.max_rows.map(|max| max - self.summary.task_rows_deleted);
            // `--max-rows` caps the batch so that no run deletes more than it was allowed.
            let batch = (self.size > 0).then_some(self.size).into_iter().chain(remaining).min();
            let capped = batch.is_some_and(|n| n != self.size);
            // What a failed batch may have deleted all the same: up to `n` rows, or an unknown
            // number for the open-ended one.
            let (deleted, up_to, at_most) = match (self.archive.as_deref_mut(), batch) {
                (None, None) => (self.store.delete_expired_range(cutoff, after, None), None, None),
                // A batch capped by `--max-rows` is exactly the next `n` expired rows, on every
                // dialect, so that the run ends at the limit instead of creeping up to it.
                (None, Some(n)) if capped => {
                    let up_to = self.store.nth_expired(cutoff, after, n)?;
                    (self.store.delete_expired_range(cutoff, after, up_to), up_to, Some(n))
                }
                (None, Some(n)) => match self.store.delete_expired_batch(cutoff, after, n) {
                    Ok(done) => (Ok(done.deleted), done.last, Some(n)),
                    Err(e) => (Err(e), None, Some(n)),
                },
                (Some(sink), batch) => {
                    let up_to = match batch {
                        None => None,
                        Some(n) => self.store.nth_expired(cutoff, after, n)?,
                    };
                    let done = archive_and_delete(self.store, sink, cutoff, after, up_to);
                    if let Ok((_, kept)) = &done {
                        self.summary.archived_kept += kept;
                    }
                    (done.map(|(deleted, _)| deleted), up_to, up_to.and(batch))
                }
            };
            // Only a batch whose commit went unanswered may be gone all the same; a lock wait
            // or a timeout the server answered deleted nothing.
            if let Err(e) = &deleted
                && self.store.outcome_unknown(e)
            {
                self.summary.in_doubt = Some(at_most);
            }
            let deleted = deleted?;
            if deleted > 0 {
                self.summary.batches += 1;
                self.summary.task_rows_deleted += deleted;
            }
            if self.options.verbose {
                let (ids, ms) = (walked_range(after, up_to), millis(batch_started));
                self.watch.detail(&if deleted > 0 {
                    format!(
                        "clean: batch {}: deleted {deleted} expired task row(s), {ids}, {ms} ms",
                        self.summary.batches
                    )
                } else {
                    // Not counted in `batches` (PostgreSQL's windows without an expired row, or
                    // a last batch that found nothing left).
                    format!("clean: no expired task row in {ids}, {ms} ms")
                });
            }
            // How far the walk has gone, heard before the batch's end so that both describe
            // the same point.
            if let Some((first, last)) = bounds {
                #[allow(clippy::cast_precision_loss)]
                let share =
                    up_to.map_or(1.0, |to| to.walked(first) as f64 / (last as f64 - first as f64 + 1.0));
                self.watch.walked(share);
            }
            self.batch_done(deleted > 0);
            let took = batch_started.elapsed();
            // Auto's size is the one the pacer chose for this batch; a fixed size never changes.
            // Neither is the batch `--max-rows` cut short.
            if self.pacer.is_some() && batch.is_some() {
                self.summary.batch_size = Some(self.size);
            }
            self.pace(batch, deleted > 0, took);
            let Some(to) = up_to else { return Ok(()) };
            after = to;
            if self.options.max_rows.is_some_and(|max| self.summary.task_rows_deleted >= max)
                && self.store.nth_expired(cutoff, after, 1)?.is_none()
            {
                // The limit was reached exactly by the last expired row: the run is complete.
                return Ok(());
            }
            // A batch that found nothing to delete (see `delete_expired_batch`) put no load on
            // the database worth a pause.
            if deleted > 0 {
                self.pause(took);
            }
        }
    }

    /// The orphan sweep with an archive: each batch is a set of orphaned rows read first,
    /// archived and synced, then exactly those deleted in one transaction, by asset and key,
    /// each only while it still has the `updated_at` archived and its asset is still inactive.
    /// (Without an archive, a batch is any `LIMIT` rows.)
    fn sweep_orphans_archived(&mut self) -> Result<()> {
        let page = if self.size > 0 { self.size } else { ARCHIVE_PAGE };
        loop {
            if self.stop_sweep() {
                return Ok(());
            }
            let batch_started = Instant::now();
            let rows = self.store.orphan_sample(page)?;
            if rows.is_empty() {
                return Ok(());
            }
            if let Some(sink) = self.archive.as_deref_mut() {
                for row in &rows {
                    sink.asset(row).map_err(|e| sink.failed(e))?;
                }
                sink.sync().map_err(|e| sink.failed(e))?;
            }
            // Each asset's archived keys, deleted only while each is as it was read and the
            // asset still inactive. A key left is in a later batch again while it is orphaned.
            let deleted = self.store.in_transaction(|store| {
                let mut deleted = 0;
                for group in rows.chunk_by(|a, b| a.asset_id == b.asset_id) {
                    for page in group.chunks(EXACT_PAGE) {
                        let read: Vec<(String, StoredTime)> =
                            page.iter().map(|r| (r.key.clone(), r.updated_at.clone())).collect();
                        deleted +=
                            crate::ops::clear::delete_read_assets(store, page[0].asset_id, &read, true)?.0;
                    }
                }
                Ok(deleted)
            })?;
            self.orphans_deleted(deleted, batch_started);
            if deleted == 0 || (rows.len() as u64) < page {
                return Ok(());
            }
            let took = batch_started.elapsed();
            self.pace(None, true, took);
            self.pause(took);
        }
    }

    /// The orphan sweep, in batches of the same size as the task rows.
    fn sweep_orphans(&mut self) -> Result<()> {
        let batch = (self.size > 0).then_some(self.size);
        loop {
            if self.stop_sweep() {
                return Ok(());
            }
            let batch_started = Instant::now();
            let deleted = self.store.delete_orphans(batch)?;
            self.orphans_deleted(deleted, batch_started);
            if batch.is_none_or(|b| deleted < b) {
                return Ok(());
            }
            let took = batch_started.elapsed();
            self.pace(None, true, took);
            self.pause(took);
        }
    }

    fn orphans_deleted(&mut self, deleted: u64, batch_started: Instant) {
        if deleted > 0 {
            self.summary.orphan_batches += 1;
            self.summary.asset_rows_deleted += deleted;
        }
        if self.options.verbose {
            let ms = millis(batch_started);
            self.watch.detail(&if deleted > 0 {
                format!(
                    "clean: orphan batch {}: deleted {deleted} orphaned asset row(s), {ms} ms",
                    self.summary.orphan_batches
                )
            } else {
                format!("clean: orphan sweep: no orphaned asset row deleted, {ms} ms")
            });
        }
        self.batch_done(deleted > 0);
    }

    /// The sweep stops for a signal or the time limit; `--max-rows` counts task rows only.
    fn stop_sweep(&mut self) -> bool {
        let stop = self.should_stop().filter(|s| matches!(s, Stop::Signal(_) | Stop::MaxDuration));
        self.summary.stopped_by = stop.or(self.summary.stopped_by);
        stop.is_some()
    }

    /// Tells the watcher of a batch's end; `deleted` when it deleted rows.
    fn batch_done(&mut self, deleted: bool) {
        self.summary.archive = self.archive.as_deref().map(archived);
        self.watch.batch(&self.summary, deleted);
    }

    /// `--batch-size auto` after a batch of `rows` (task rows; `None` for the orphan sweep,
    /// whose batches keep their size) that took `took`: whether other sessions write, then
    /// the next batch's size.
    fn pace(&mut self, rows: Option<u64>, committed: bool, took: Duration) {
        let Some(pacer) = self.pacer.as_mut() else { return };
        pacer.observe(self.store, u64::from(committed));
        if let Some(n) = rows {
            self.size = pacer.next(n, took);
        }
        if self.options.verbose {
            self.watch.detail(&format!("clean: pace: {}; next batch {} row(s)", pacer.mode(), self.size));
        }
    }

    /// After a batch that took `took`: `--sleep`, or with `--batch-size auto` what the pacer
    /// says.
    fn pause(&self, took: Duration) {
        let pause = self.options.sleep.or(self.pacer.as_ref().map(|p| p.pause(took)));
        if let Some(pause) = pause.filter(|p| !p.is_zero()) {
            signals::sleep(pause);
        }
    }

    fn should_stop(&self) -> Option<Stop> {
        if let Some(signal) = signals::stop_requested() {
            return Some(Stop::Signal(signal));
        }
        if self.options.max_rows.is_some_and(|max| self.summary.task_rows_deleted >= max) {
            return Some(Stop::MaxRows);
        }
        if self.options.max_duration.is_some_and(|max| self.started.elapsed() >= max) {
            return Some(Stop::MaxDuration);
        }
        None
    }
}

/// The `--archive` file and the rows this run appended to it, for the summary.
fn archived(sink: &Sink) -> (String, u64) {
    (sink.path().map(|p| p.display().to_string()).unwrap_or_default(), sink.task_rows + sink.asset_rows)
}

/// The range of the walk a batch covered, after `after` up to `up_to`, for `--verbose`: ids,
/// or dag runs and the ids within them.
fn walked_range(after: Cursor, up_to: Option<Cursor>) -> String {
    match (after, up_to) {
        (Cursor::Id(i64::MIN), None) => "every id".to_string(),
        (Cursor::Id(i64::MIN), Some(last)) => format!("ids up to {}", last.position()),
        (Cursor::Id(after), None) => format!("ids from {}", after.saturating_add(1)),
        (Cursor::Id(after), Some(last)) if last.position() == after.saturating_add(1) => format!("{last}"),
        (Cursor::Id(after), Some(last)) => format!("ids {} to {}", after.saturating_add(1), last.position()),
        (after, None) if after.at_start() => "every dag run".to_string(),
        (after, Some(last)) if after.at_start() => format!("dag runs up to {last}"),
        (after, None) => format!("dag runs after {after}"),
        (after, Some(last)) => format!("dag runs after {after} up to {last}"),
    }
}

/// Milliseconds since `started`, to a tenth: most batches of a small run take less than one.
fn millis(started: Instant) -> String {
    format!("{:.1}", started.elapsed().as_secs_f64() * 1000.0)
}

/// Rows read per query while archiving: a batch size of 0 (one DELETE) is archived in pages
/// of this many rows, so memory stays bounded.
const ARCHIVE_PAGE: u64 = 1000;

/// Appends the expired rows of the batch after `after` up to `up_to` to the archive, page by
/// page, and syncs the file. Returns each row archived: its id and its `updated_at`.
/// Archives the expired rows of one batch and deletes exactly those, each only while it is
/// still as it was read and still expired: a row that expires (or is rewritten) after the
/// archive was read is left for the next run, never deleted unarchived. How many deleted, and
/// how many were found written since, which stay (a row another session deleted is neither).
///
/// Where the database has a snapshot transaction (PostgreSQL's REPEATABLE READ), the archive
/// is read and the batch deleted by its id range in one: the DELETE sees the rows the archive
/// read and no others, and fails on one another session changed or deleted since, whose batch
/// then goes the row-by-row way of [`crate::ops::clear::delete_read_tasks_locking`]. The range DELETE
/// alone costs what the clean without `--archive` pays; comparing each deleted row returned
/// made PostgreSQL's `clean --archive` 1.4 times slower (docs/performance.md).
fn archive_and_delete(
    store: &mut Store,
    sink: &mut Sink,
    cutoff: Timestamp,
    after: Cursor,
    up_to: Option<Cursor>,
) -> Result<(u64, u64)> {
    if !store.begin_snapshot()? {
        let archived = archive_expired(store, sink, cutoff, after, up_to)?;
        let (deleted, changed) = crate::ops::clear::delete_read_tasks(store, &archived, Some(cutoff))?;
        return Ok((deleted, changed.len() as u64));
    }
    let mut archived = Vec::new();
    let mut in_snapshot = || -> Result<u64> {
        archived = archive_expired(store, sink, cutoff, after, up_to)?;
        match (archived.first(), archived.last()) {
            (Some((first, _)), Some((last, _))) => store.delete_expired_ids(*first, *last, cutoff),
            _ => Ok(0),
        }
    };
    match in_snapshot() {
        Ok(deleted) if deleted == archived.len() as u64 => {
            store.commit()?;
            return Ok((deleted, 0));
        }
        // Not the rows read (which a snapshot rules out): none stays deleted.
        Ok(_) => store.rollback()?,
        Err(e) if store.conflicted(&e) => store.rollback()?,
        Err(e) => {
            let _ = store.rollback();
            return Err(e);
        }
    }
    // A row was written or deleted since: only the locking read tells which.
    let (deleted, changed) = crate::ops::clear::delete_read_tasks_locking(store, &archived, Some(cutoff))?;
    Ok((deleted, changed.len() as u64))
}

fn archive_expired(
    store: &mut Store,
    sink: &mut Sink,
    cutoff: Timestamp,
    after: Cursor,
    up_to: Option<Cursor>,
) -> Result<Vec<(i64, StoredTime)>> {
    let mut from = after;
    let mut archived = Vec::new();
    loop {
        let rows = store.expired_rows(cutoff, from, up_to, ARCHIVE_PAGE)?;
        let full = rows.len() == usize::try_from(ARCHIVE_PAGE).unwrap_or(usize::MAX);
        for (at, entry) in rows {
            sink.task(&entry).map_err(|e| sink.failed(e))?;
            from = at;
            archived.push((at.id(), entry.updated_at));
        }
        if !full {
            break;
        }
    }
    sink.sync().map_err(|e| sink.failed(e))?;
    Ok(archived)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{AssetWrite, TaskWrite, memory_sandbox};
    use crate::model::{Page, TaskFilter, TaskScope};

    const HOUR: i64 = 3_600_000_000;

    /// `-v`'s range of a batch: ids as before, and in a walk by dag run the dag runs with the
    /// id within each end; the share walked counts the dag run a cursor is in as not walked.
    #[test]
    fn a_batch_says_what_range_of_the_walk_it_covered() {
        let run = |dag_run, id| Cursor::Run { dag_run, id };
        assert_eq!(walked_range(Cursor::IDS, None), "every id");
        assert_eq!(walked_range(Cursor::IDS, Some(Cursor::Id(7))), "ids up to 7");
        assert_eq!(walked_range(Cursor::Id(7), Some(Cursor::Id(8))), "id 8");
        assert_eq!(walked_range(Cursor::Id(7), Some(Cursor::Id(20))), "ids 8 to 20");
        assert_eq!(walked_range(Cursor::Id(7), None), "ids from 8");
        assert_eq!(walked_range(Cursor::RUNS, None), "every dag run");
        assert_eq!(
            walked_range(Cursor::RUNS, Some(run(3, 90))),
            "dag runs up to dag_run_id 3 (task_state_store id 90)"
        );
        assert_eq!(
            walked_range(run(3, 90), Some(run(5, 12))),
            "dag runs after dag_run_id 3 (task_state_store id 90) up to dag_run_id 5 (task_state_store id 12)"
        );
        assert_eq!(walked_range(run(3, 90), None), "dag runs after dag_run_id 3 (task_state_store id 90)");
        assert_eq!(Cursor::Id(10).walked(1), 10);
        assert_eq!(run(10, 500).walked(1), 9);
        assert_eq!(run(1, 500).walked(1), 0, "one dag run, partly walked: none yet");
        assert_eq!(Cursor::Id(i64::MAX).walked(i64::MIN), i64::MAX, "saturates");
    }

    /// `-v`'s pace line says why a gentle pace is gentle, and never that no other session
    /// writes while it stays gentle.
    #[test]
    fn the_pace_line_says_why_it_is_gentle() {
        let mut store = seeded(0, 0, 0);
        let mut pacer = Pacer::new(Duration::from_millis(10), &mut store);
        let modes: Vec<&str> = [(0, false), (1, false), (2, false), (2, true)]
            .into_iter()
            .map(|(calm, quiet)| {
                pacer.calm = calm;
                pacer.quiet = quiet;
                pacer.mode()
            })
            .collect();
        assert_eq!(modes[0], "gentle: another session writes");
        assert_eq!(modes[1], "gentle until two readings in a row see no other session's write (one so far)");
        assert_eq!(modes[2], "gentle for 1 s after another session's last write");
        assert_eq!(modes[3], "full speed: no other session writes");
        for mode in &modes[..3] {
            assert!(mode.starts_with("gentle") && !mode.contains("full speed"), "{mode}");
        }
    }

    /// `expired` rows that expired an hour ago and `live` ones that expire in an hour, in that
    /// order of ids, in one dag run; and an active asset with one key and an inactive one with
    /// `orphans` keys.
    fn seeded(expired: usize, live: usize, orphans: usize) -> Store {
        let mut sandbox = memory_sandbox().unwrap();
        let run = sandbox.add_dag_run("d", "r").unwrap();
        let active = sandbox.add_asset("kept", "s3://kept", true).unwrap();
        let inactive = sandbox.add_asset("gone", "s3://gone", false).unwrap();
        let mut store = sandbox.into_store();
        let now = Timestamp::now();
        let scope = TaskScope { dag_id: "d".into(), run_id: "r".into(), task_id: "t".into(), map_index: -1 };
        for i in 0..expired + live {
            let key = format!("k{i:03}");
            let offset = if i < expired { -HOUR } else { HOUR };
            let write = TaskWrite {
                dag_run_id: run,
                scope: &scope,
                key: &key,
                value: "1",
                updated_at: now,
                expires_at: now.checked_add(offset),
            };
            store.upsert_task(&write).unwrap();
        }
        let keys: Vec<(i64, String)> = std::iter::once((active, "k".to_string()))
            .chain((0..orphans).map(|i| (inactive, format!("o{i}"))))
            .collect();
        for (asset_id, key) in &keys {
            store
                .upsert_asset(&AssetWrite { asset_id: *asset_id, key, value: "1", updated_at: now })
                .unwrap();
        }
        store
    }

    fn options(batch_size: u64) -> Options {
        Options { batch_size, verbose: true, ..Options::new(Timestamp::now()) }
    }

    /// Every batch heard of, and the detail lines.
    #[derive(Default)]
    struct Heard {
        batches: Vec<(u64, u64)>,
        details: Vec<String>,
    }

    impl Watch for Heard {
        fn batch(&mut self, summary: &Summary, _: bool) {
            self.batches.push((summary.batches + summary.orphan_batches, summary.task_rows_deleted));
        }

        fn detail(&mut self, line: &str) {
            self.details.push(line.to_string());
        }
    }

    fn remaining(store: &mut Store) -> usize {
        store.list_task(&TaskFilter::default(), Page { limit: None, offset: 0 }).unwrap().len()
    }

    #[test]
    fn batches_delete_exactly_the_expired_rows_then_the_orphans() {
        let mut store = seeded(25, 5, 2);
        let mut heard = Heard::default();
        let (summary, result) = run(&mut store, &options(10), None, &mut heard);
        result.unwrap();
        assert_eq!((summary.task_rows_deleted, summary.batches), (25, 3));
        assert_eq!((summary.asset_rows_deleted, summary.orphan_batches), (2, 1));
        assert_eq!(summary.stopped_by, None);
        assert_eq!(remaining(&mut store), 5, "the live rows stay");
        assert_eq!(heard.batches.first(), Some(&(0, 0)), "heard of before the first batch");
        assert!(heard.batches.contains(&(3, 25)), "{:?}", heard.batches);
        assert!(
            heard.details.iter().any(|d| d.contains("batch 3: deleted 5 expired task row(s)")),
            "{:?}",
            heard.details
        );
        assert!(store.orphan_sample(10).unwrap().is_empty());
    }

    #[test]
    fn batch_size_zero_is_one_transaction() {
        let mut store = seeded(25, 5, 0);
        let (summary, result) = run(&mut store, &options(0), None, &mut Heard::default());
        result.unwrap();
        assert_eq!((summary.task_rows_deleted, summary.batches), (25, 1));
        assert_eq!(remaining(&mut store), 5);
    }

    #[test]
    fn max_rows_stops_at_the_limit_before_the_orphans() {
        let mut store = seeded(25, 5, 2);
        let limited = Options { max_rows: Some(15), ..options(10) };
        let (summary, result) = run(&mut store, &limited, None, &mut Heard::default());
        result.unwrap();
        assert_eq!(summary.task_rows_deleted, 15);
        assert_eq!(summary.stopped_by, Some(Stop::MaxRows));
        assert_eq!(summary.asset_rows_deleted, 0, "the sweep waits for every expired task row");
        assert!(summary.line().contains("stopped at --max-rows, run again to go on"), "{}", summary.line());
        let (summary, result) = run(&mut store, &options(10), None, &mut Heard::default());
        result.unwrap();
        assert_eq!((summary.task_rows_deleted, summary.asset_rows_deleted), (10, 2));
        assert_eq!(remaining(&mut store), 5);
    }

    #[test]
    fn the_phases_can_run_alone() {
        let mut store = seeded(3, 0, 2);
        let orphans_only = Options { tasks: false, ..options(10) };
        let (summary, _) = run(&mut store, &orphans_only, None, &mut Heard::default());
        assert_eq!((summary.task_rows_deleted, summary.asset_rows_deleted), (0, 2));
        let mut store = seeded(3, 0, 2);
        let tasks_only = Options { orphans: false, ..options(10) };
        let (summary, _) = run(&mut store, &tasks_only, None, &mut Heard::default());
        assert_eq!((summary.task_rows_deleted, summary.asset_rows_deleted), (3, 0));
    }

    #[test]
    fn a_dry_run_counts_and_samples_and_deletes_nothing() {
        let mut store = seeded(25, 5, 2);
        let found = dry_run(&mut store, &options(10), 4, &mut Heard::default()).unwrap();
        assert_eq!((found.task_rows(), found.asset_rows()), (25, 2));
        assert_eq!((found.task_sample.len(), found.asset_sample.len()), (4, 2));
        assert_eq!(found.by_dag.first().map(|d| d.dag_id.as_str()), Some("d"));
        assert_eq!(remaining(&mut store), 30);
    }

    #[test]
    fn the_batches_a_run_needs() {
        assert_eq!(
            batches_needed(25, 2, 10, None, None),
            "at least 3 batch(es) of at most 10 expired task row(s) and 1 of orphaned asset rows"
        );
        assert!(batches_needed(25, 2, 10, None, Some(15)).ends_with("then stop at --max-rows"));
        assert!(batches_needed(25, 2, 0, None, None).starts_with("one transaction for 25"));
        let auto = batches_needed(25, 2, AUTO_FIRST_ROWS, Some(Duration::from_millis(20)), None);
        assert!(
            auto.starts_with("batches sized by their pace") && auto.ends_with("(batch size auto)"),
            "{auto}"
        );
    }

    /// `--batch-size auto` sizes each batch from the last one's pace: a batch that took twice
    /// the target halves the next, a fast one at most doubles it, and the size stays within its
    /// bounds however fast or slow the database is.
    #[test]
    fn auto_batches_follow_their_pace_within_bounds() {
        let quiet_pace =
            QuietPace { batch: Duration::from_millis(250), pause_share: 0.0, max_pause: Duration::ZERO };
        let mut pacer = Pacer {
            busy: Duration::from_millis(20),
            quiet_pace,
            mark: None,
            read_at: Instant::now(),
            busy_until: Instant::now(),
            calm: 0,
            quiet: false,
            bound: None,
        };
        let ms = Duration::from_millis;
        assert_eq!(pacer.next(1_000, ms(40)), 500);
        assert_eq!(pacer.next(1_000, ms(20)), 1_000);
        assert_eq!(pacer.next(1_000, ms(5)), 2_000, "at most twice the last");
        assert_eq!(pacer.next(1_000, ms(10)), 2_000);
        assert_eq!(pacer.next(1_000, Duration::ZERO), 2_000);
        assert_eq!(pacer.next(1_000, Duration::from_secs(60)), AUTO_MIN_ROWS);
        assert_eq!(pacer.next(90_000, ms(1)), AUTO_MAX_ROWS);
        assert_eq!(pacer.pause(ms(10)), ms(30));
        // While no other session writes: the dialect's quiet pace.
        pacer.quiet = true;
        assert_eq!(pacer.next(1_000, ms(500)), 500);
        assert_eq!(pacer.next(1_000, ms(125)), 2_000);
        assert_eq!(pacer.pause(ms(10)), Duration::ZERO);
        // The space a batch's changes take bounds it, below the smallest pace too.
        pacer.bound = Some(1_500);
        assert_eq!(pacer.next(1_000, ms(125)), 1_500);
        assert_eq!(pacer.next(1_000, ms(500)), 500);
        pacer.bound = Some(40);
        assert_eq!(pacer.next(1_000, Duration::from_secs(60)), 40);
    }

    /// The pacer reads the database's count of writes between batches: another session's write
    /// (an upsert on another connection of the same database) makes it gentle for
    /// [`QUIET_AFTER`]; writes of its own do not, nor does nobody writing.
    #[test]
    fn the_pacer_is_gentle_while_other_sessions_write() {
        let dir = std::env::temp_dir().join(format!("state-store-pacer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("airflow.db");
        let url = crate::url::DbUrl::parse(&format!("sqlite:///{}", path.display())).unwrap();
        let timeouts = crate::db::Timeouts::new(Duration::from_secs(30));
        let mut other = crate::db::open_sandbox(&url, None, &timeouts).unwrap();
        other.create().unwrap();
        let run = other.add_dag_run("d", "r").unwrap();
        let mut mine = crate::db::open(&url, None, crate::db::Access::ReadWrite, &timeouts).unwrap();
        let mut pacer = Pacer::new(Duration::from_millis(10), &mut mine);
        assert!(pacer.mark.is_some(), "SQLite tells");
        pacer.observe(&mut mine, 0);
        assert!(!pacer.quiet, "one reading says little");
        pacer.observe(&mut mine, 0);
        assert!(pacer.quiet, "nobody wrote in two");
        let scope = TaskScope { dag_id: "d".into(), run_id: "r".into(), task_id: "t".into(), map_index: -1 };
        let now = Timestamp::now();
        let write = TaskWrite {
            dag_run_id: run,
            scope: &scope,
            key: "k",
            value: "1",
            updated_at: now,
            expires_at: None,
        };
        mine.upsert_task(&write).unwrap();
        pacer.observe(&mut mine, 1);
        assert!(pacer.quiet, "its own commit");
        let mut other = other.into_store();
        other.upsert_task(&write).unwrap();
        pacer.observe(&mut mine, 0);
        assert!(!pacer.quiet, "another connection wrote");
        pacer.observe(&mut mine, 0);
        assert!(!pacer.quiet, "gentle for a second after it");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A run in auto mode deletes exactly what a fixed one does, in batches whose size follows
    /// the pace (an in-memory database is fast: they grow), and reports the last size.
    #[test]
    fn an_auto_run_deletes_exactly_the_expired_rows() {
        let mut store = seeded(5_000, 300, 4);
        let options =
            Options { batch_size: 100, batch_time: Some(Duration::from_millis(20)), ..options(100) };
        let mut heard = Heard::default();
        let (summary, result) = run(&mut store, &options, None, &mut heard);
        result.unwrap();
        assert_eq!((summary.task_rows_deleted, summary.asset_rows_deleted), (5_000, 4));
        assert_eq!(remaining(&mut store), 300);
        assert!(summary.batches < 50, "the batches grew from 100 rows: {}", summary.batches);
        let last = summary.batch_size.unwrap();
        assert!(last > 100, "{last}");
        // The summary line names the mode and the last size; the explanation is `-v`'s.
        assert!(
            summary.line().contains(&format!(", batch size auto (last {last} rows), ")),
            "{}",
            summary.line()
        );
        let explained = batching_text(summary.batch_size, summary.batch_time, None);
        assert!(explained.starts_with("auto (20 ms a batch and a pause"), "{explained}");
        assert!(explained.ends_with(&format!(", last {last} rows)")), "{explained}");
        let doc = serde_json::to_value(&summary).unwrap();
        assert_eq!(
            (&doc["batching"], &doc["batch_time_ms"]),
            (&serde_json::json!("auto"), &serde_json::json!(20))
        );
    }
}
