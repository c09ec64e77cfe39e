//! The clean engine: Airflow's garbage collection, done so a cron job can trust it.
//!
//! Task rows with `expires_at < cutoff` are deleted in primary-key range batches of
//! `state_cleanup_batch_size` rows, each batch its own short transaction whose DELETE re-checks
//! the expiry, so a key a worker refreshes mid-run survives. A batch size of 0 is one
//! transaction with no id list, so it works on any table size (Airflow's own selects every id
//! and binds them all, which SQLite refuses past its variable limit). Then the rows of inactive
//! assets are swept. A signal, `--max-rows` or `--max-duration` stops a run between batches;
//! the [`Summary`] says what was done. The engine prints nothing: a [`Watch`] hears of each
//! batch.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::archive::{Sink, archive_error};
use crate::db::{AssetCount, DagCount, Store};
use crate::error::Result;
use crate::model::{AssetEntry, Page, TaskEntry, TaskFilter};
use crate::signals;
use crate::time::Timestamp;

/// What a run deletes and what bounds it.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Task rows with `expires_at` before this instant are expired.
    pub(crate) cutoff: Timestamp,
    /// Rows per batch; 0 is one transaction. With `batch_time`, the first batch's size.
    pub(crate) batch_size: u64,
    /// `--batch-size auto`: each batch sized to take about this long, and followed by a pause
    /// [`AUTO_PAUSE_RATIO`] times as long as the batch took, unless `sleep` says otherwise (see
    /// [`Pacer`]).
    pub(crate) batch_time: Option<Duration>,
    /// Which of the two phases run: expired task rows, orphaned asset rows.
    pub(crate) tasks: bool,
    pub(crate) orphans: bool,
    pub(crate) max_rows: Option<u64>,
    pub(crate) max_duration: Option<Duration>,
    /// The pause after each batch that deleted rows.
    pub(crate) sleep: Option<Duration>,
    /// A detail line for every batch, to [`Watch::detail`].
    pub(crate) verbose: bool,
}

/// Who hears of a run while it goes: a progress bar, the last words a second signal prints.
pub(crate) trait Watch {
    /// Before the first batch and after every batch, with the summary so far; `deleted` when
    /// the batch deleted rows (and at the start).
    fn batch(&mut self, summary: &Summary, deleted: bool);
    /// A line about a batch, with `--verbose`.
    fn detail(&mut self, line: &str);
}

/// Runs a clean on a store whose clean lock this process holds. The summary comes back with
/// the outcome, so that a run that failed part-way still says what it did.
pub(crate) fn run(
    store: &mut Store,
    options: &Options,
    archive: Option<&mut Sink>,
    watch: &mut dyn Watch,
) -> (Summary, Result<()>) {
    let summary = Summary {
        archive: archive.as_deref().map(archived),
        batch_time: options.batch_time,
        ..Summary::empty(options.cutoff, options.batch_size)
    };
    let started = Instant::now();
    let size = options.batch_size;
    let mut run = Run { store, summary, options, started, archive, watch, size };
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
            Stop::Signal(15) => "SIGTERM",
            Stop::Signal(_) => "SIGINT",
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
    /// Rows per batch; with `batch_time` (`--batch-size auto`), the size of the last batch.
    pub(crate) batch_size: u64,
    pub(crate) batch_time: Option<Duration>,
    pub(crate) stopped_by: Option<Stop>,
    pub(crate) seconds: f64,
    /// The `--archive` file and the rows appended to it by this run.
    pub(crate) archive: Option<(String, u64)>,
    /// The batch whose DELETE failed, when one did (`Some(None)`: the open-ended last batch).
    /// A connection lost after the server committed the DELETE but before it answered leaves
    /// that batch deleted without the count knowing it (observed with MariaDB's `KILL`).
    pub(crate) in_doubt: Option<Option<u64>>,
}

impl Summary {
    /// The summary of a run that has done nothing yet.
    pub(crate) fn empty(cutoff: Timestamp, batch_size: u64) -> Summary {
        Summary {
            task_rows_deleted: 0,
            asset_rows_deleted: 0,
            batches: 0,
            orphan_batches: 0,
            task_rows_skipped: None,
            cutoff,
            batch_size,
            batch_time: None,
            stopped_by: None,
            seconds: 0.0,
            archive: None,
            in_doubt: None,
        }
    }

    /// The one line that ends every run, on stderr.
    pub(crate) fn line(&self) -> String {
        let stopped = match self.stopped_by {
            Some(Stop::MaxRows) => "; stopped at --max-rows, run again to go on".to_string(),
            Some(Stop::MaxDuration) => "; stopped at --max-duration, run again to go on".to_string(),
            Some(stop) => format!("; stopped by {}, run again to finish", stop.name()),
            None => String::new(),
        };
        let archived = match &self.archive {
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
        let skipped = match self.task_rows_skipped {
            Some(rows) if rows > 0 => {
                format!(
                    "; skipped {rows} expired task row(s) another session held locked, left for the next run"
                )
            }
            _ => String::new(),
        };
        format!(
            "clean: deleted {} expired task row(s) in {} batch(es) and {} orphaned asset row(s); cutoff {}, batch size {}, {:.2}s{skipped}{archived}{in_doubt}{stopped}",
            self.task_rows_deleted,
            self.batches,
            self.asset_rows_deleted,
            self.cutoff.to_rfc3339(),
            self.batch_size_text(),
            self.seconds
        )
    }

    /// `10000`, or `auto (10 ms a batch, last 4200)`.
    pub(crate) fn batch_size_text(&self) -> String {
        batch_size_text(self.batch_size, self.batch_time)
    }

    pub(crate) fn doc(&self) -> SummaryDoc {
        SummaryDoc {
            task_rows_deleted: self.task_rows_deleted,
            asset_rows_deleted: self.asset_rows_deleted,
            batches: self.batches,
            orphan_batches: self.orphan_batches,
            cutoff: self.cutoff.to_rfc3339(),
            batch_size: self.batch_size,
            batch_time_ms: batch_time_ms(self.batch_time),
            dry_run: false,
            interrupted: matches!(self.stopped_by, Some(Stop::Signal(_))),
            stopped_by: self.stopped_by.map(Stop::name),
            seconds: (self.seconds * 1000.0).round() / 1000.0,
            archive: self.archive.as_ref().map(|(path, _)| path.clone()),
            archived_rows: self.archive.as_ref().map(|(_, rows)| *rows),
            task_rows_skipped: self.task_rows_skipped,
        }
    }
}

/// The summary of a run in JSON (docs/output.md#clean-summary).
#[derive(Serialize)]
pub(crate) struct SummaryDoc {
    pub(crate) task_rows_deleted: u64,
    pub(crate) asset_rows_deleted: u64,
    pub(crate) batches: u64,
    pub(crate) orphan_batches: u64,
    pub(crate) cutoff: String,
    pub(crate) batch_size: u64,
    /// `--batch-size auto`'s time per batch, in ms; `batch_size` is then the last batch's size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) batch_time_ms: Option<u64>,
    pub(crate) dry_run: bool,
    interrupted: bool,
    pub(crate) stopped_by: Option<&'static str>,
    /// To the millisecond.
    pub(crate) seconds: f64,
    pub(crate) archive: Option<String>,
    archived_rows: Option<u64>,
    pub(crate) task_rows_skipped: Option<u64>,
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
}

/// Smallest and largest batch `--batch-size auto` makes, in rows.
pub(crate) const AUTO_MIN_ROWS: u64 = 100;
pub(crate) const AUTO_MAX_ROWS: u64 = 100_000;
/// The first batch of `--batch-size auto`, in rows.
pub(crate) const AUTO_FIRST_ROWS: u64 = 1_000;
/// `--batch-size auto` pauses this many times as long as each batch took. Measured beside two
/// workers writing on a 2-core machine (docs/performance.md#workers-beside-a-clean): a
/// workers' p99 rises less the less of the time the clean keeps the server busy; at half the
/// time (a ratio of 1) MariaDB's p99 rose 1.5 to 1.6 times, at a quarter 1.4 times.
pub(crate) const AUTO_PAUSE_RATIO: u32 = 3;

/// `--batch-size auto`: batches bounded by time rather than rows, as pt-archiver's and gh-ost's
/// chunks are. Each batch is sized from the last one's pace to take about `target`, and is
/// followed by a pause [`AUTO_PAUSE_RATIO`] times as long as it took, so a clean holds a
/// transaction open for one short spell at a time and keeps the database busy at most a
/// quarter of the time, whatever the server's speed, the table's size or the load on the
/// machine. A size grows at most twofold from one batch to the next (one fast batch says
/// little) and shrinks as far as the pace says.
#[derive(Debug, Clone, Copy)]
struct Pacer {
    target: Duration,
}

impl Pacer {
    /// The next batch's size after one of `rows` that took `took`.
    fn next(self, rows: u64, took: Duration) -> u64 {
        let took = took.as_secs_f64().max(1e-4);
        let paced = (rows as f64 * self.target.as_secs_f64() / took) as u64;
        paced.min(rows.saturating_mul(2)).clamp(AUTO_MIN_ROWS, AUTO_MAX_ROWS)
    }
}

impl Run<'_> {
    /// `--batch-size auto`'s pacer, when the run has one.
    fn pacer(&self) -> Option<Pacer> {
        self.options.batch_time.map(|target| Pacer { target })
    }

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

    /// Walks the primary key in batches; between batches it stops for a signal or a limit.
    fn delete_expired(&mut self) -> Result<()> {
        let cutoff = self.summary.cutoff;
        let mut after_id = i64::MIN;
        loop {
            if let Some(stop) = self.should_stop() {
                self.summary.stopped_by = Some(stop);
                return Ok(());
            }
            let batch_started = Instant::now();
            let remaining = self.options.max_rows.map(|max| max - self.summary.task_rows_deleted);
            // `--max-rows` caps the batch so that no run deletes more than it was allowed.
            let batch = match (self.size, remaining) {
                (0, None) => None,
                (0, Some(r)) => Some(r),
                (b, Some(r)) => Some(b.min(r)),
                (b, None) => Some(b),
            };
            let capped = batch.is_some_and(|n| n != self.size);
            // What a failed batch may have deleted all the same: up to `n` rows, or an unknown
            // number for the open-ended one.
            let (deleted, up_to_id, at_most) = match (self.archive.as_deref_mut(), batch) {
                (None, None) => (self.store.delete_expired_range(cutoff, after_id, None), None, None),
                // A batch capped by `--max-rows` is exactly the next `n` expired rows, on every
                // dialect, so that the run ends at the limit instead of creeping up to it.
                (None, Some(n)) if capped => {
                    let up_to_id = self.store.nth_expired_id(cutoff, after_id, n)?;
                    (self.store.delete_expired_range(cutoff, after_id, up_to_id), up_to_id, Some(n))
                }
                (None, Some(n)) => match self.store.delete_expired_batch(cutoff, after_id, n) {
                    Ok(done) => (Ok(done.deleted), done.last_id, Some(n)),
                    Err(e) => (Err(e), None, Some(n)),
                },
                (Some(sink), batch) => {
                    let up_to_id = match batch {
                        None => None,
                        Some(n) => self.store.nth_expired_id(cutoff, after_id, n)?,
                    };
                    // The open-ended last batch is bounded by the last row archived, so a row
                    // that expires after the archive was read is never deleted unarchived.
                    let deleted = match archive_expired(self.store, sink, cutoff, after_id, up_to_id)? {
                        Some(last_id) => {
                            self.store.delete_expired_range(cutoff, after_id, up_to_id.or(Some(last_id)))
                        }
                        None => Ok(0),
                    };
                    (deleted, up_to_id, up_to_id.and(batch))
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
                let (ids, ms) = (id_range(after_id, up_to_id), millis(batch_started));
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
            self.batch_done(deleted > 0);
            let took = batch_started.elapsed();
            if let (Some(pacer), Some(n)) = (self.pacer(), batch) {
                self.summary.batch_size = n;
                self.size = pacer.next(n, took);
            }
            let Some(id) = up_to_id else { return Ok(()) };
            after_id = id;
            if self.options.max_rows.is_some_and(|max| self.summary.task_rows_deleted >= max)
                && self.store.nth_expired_id(cutoff, after_id, 1)?.is_none()
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
    /// archived and synced, then deleted key by key in one transaction, each DELETE checking
    /// again that the asset is still inactive. (Without an archive, a batch is any `LIMIT` rows.)
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
                let path = sink.path().map(std::path::Path::to_path_buf).unwrap_or_default();
                for row in &rows {
                    sink.asset(row).map_err(|e| archive_error(&path, e))?;
                }
                sink.sync().map_err(|e| archive_error(&path, e))?;
            }
            self.store.begin()?;
            let mut deleted = 0;
            for row in &rows {
                match self.store.delete_orphan_row(row.asset_id, &row.key) {
                    Ok(n) => deleted += n,
                    Err(e) => {
                        let _ = self.store.rollback();
                        return Err(e);
                    }
                }
            }
            self.store.commit()?;
            self.orphans_deleted(deleted, batch_started);
            if deleted == 0 || (rows.len() as u64) < page {
                return Ok(());
            }
            self.pause(batch_started.elapsed());
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
            self.pause(batch_started.elapsed());
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
        match self.should_stop().filter(|s| matches!(s, Stop::Signal(_) | Stop::MaxDuration)) {
            Some(stop) => {
                self.summary.stopped_by = Some(stop);
                true
            }
            None => false,
        }
    }

    /// Tells the watcher of a batch's end; `deleted` when it deleted rows.
    fn batch_done(&mut self, deleted: bool) {
        self.summary.archive = self.archive.as_deref().map(archived);
        self.watch.batch(&self.summary, deleted);
    }

    /// After a batch that took `took`: `--sleep`, or with `--batch-size auto`
    /// [`AUTO_PAUSE_RATIO`] times as long.
    fn pause(&self, took: Duration) {
        if let Some(pause) = self.options.sleep.or(self.pacer().map(|_| took * AUTO_PAUSE_RATIO)) {
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

/// The primary-key range a batch covered, `after_id < id <= up_to_id`, for `--verbose`.
fn id_range(after_id: i64, up_to_id: Option<i64>) -> String {
    match (after_id, up_to_id) {
        (i64::MIN, None) => "every id".to_string(),
        (i64::MIN, Some(last)) => format!("ids up to {last}"),
        (after, None) => format!("ids from {}", after.saturating_add(1)),
        (after, Some(last)) if last == after.saturating_add(1) => format!("id {last}"),
        (after, Some(last)) => format!("ids {} to {last}", after.saturating_add(1)),
    }
}

/// Milliseconds since `started`, to a tenth: most batches of a small run take less than one.
fn millis(started: Instant) -> String {
    format!("{:.1}", started.elapsed().as_secs_f64() * 1000.0)
}

/// Rows read per query while archiving: a batch size of 0 (one DELETE) is archived in pages
/// of this many rows, so memory stays bounded.
const ARCHIVE_PAGE: u64 = 1000;

/// Appends the rows the batch `after_id < id <= up_to_id` will delete to the archive, page by
/// page with the same bounds as its DELETE, and syncs the file. Returns the last id archived.
fn archive_expired(
    store: &mut Store,
    sink: &mut Sink,
    cutoff: Timestamp,
    after_id: i64,
    up_to_id: Option<i64>,
) -> Result<Option<i64>> {
    let path = sink.path().map(std::path::Path::to_path_buf).unwrap_or_default();
    let mut from = after_id;
    let mut last = None;
    loop {
        let rows = store.expired_rows(cutoff, from, up_to_id, ARCHIVE_PAGE)?;
        for (id, entry) in &rows {
            sink.task(entry).map_err(|e| archive_error(&path, e))?;
            last = Some(*id);
        }
        match last {
            Some(id) if rows.len() == usize::try_from(ARCHIVE_PAGE).unwrap_or(usize::MAX) => from = id,
            _ => break,
        }
    }
    sink.sync().map_err(|e| archive_error(&path, e))?;
    Ok(last)
}

/// What a dry run finds: counts per dag and per orphaned asset, and a bounded sample of each,
/// never every row.
pub(crate) struct DryRun {
    pub(crate) by_dag: Vec<DagCount>,
    pub(crate) by_asset: Vec<AssetCount>,
    pub(crate) task_sample: Vec<TaskEntry>,
    pub(crate) asset_sample: Vec<AssetEntry>,
}

impl DryRun {
    pub(crate) fn task_rows(&self) -> u64 {
        self.by_dag.iter().map(|d| d.rows).sum()
    }

    pub(crate) fn asset_rows(&self) -> u64 {
        self.by_asset.iter().map(|a| a.rows).sum()
    }
}

/// Counts what a run with `options` would delete, and reads up to `sample` rows of each kind.
/// With `--verbose`, each query's finding and time go to `watch`.
pub(crate) fn dry_run(
    store: &mut Store,
    options: &Options,
    sample: u64,
    watch: &mut dyn Watch,
) -> Result<DryRun> {
    let mut timed = |what: String, started: Instant| {
        if options.verbose {
            watch.detail(&format!("clean --dry-run: {what}, {} ms", millis(started)));
        }
    };
    let (cutoff, mut found) = (
        options.cutoff,
        DryRun {
            by_dag: Vec::new(),
            by_asset: Vec::new(),
            task_sample: Vec::new(),
            asset_sample: Vec::new(),
        },
    );
    if options.tasks {
        let started = Instant::now();
        found.by_dag = store.expired_by_dag(cutoff)?;
        timed(
            format!("counted {} expired task row(s) of {} dag(s)", found.task_rows(), found.by_dag.len()),
            started,
        );
    }
    if options.orphans {
        let started = Instant::now();
        found.by_asset = store.orphans_by_asset()?;
        timed(
            format!(
                "counted {} orphaned asset row(s) of {} asset(s)",
                found.asset_rows(),
                found.by_asset.len()
            ),
            started,
        );
    }
    if options.tasks {
        let started = Instant::now();
        let expired = TaskFilter { expired_before: Some(cutoff), ..TaskFilter::default() };
        found.task_sample = store.list_task(&expired, Page { limit: Some(sample), offset: 0 })?;
        timed(format!("read a sample of {} expired task row(s)", found.task_sample.len()), started);
    }
    if options.orphans {
        let started = Instant::now();
        found.asset_sample = store.orphan_sample(sample)?;
        timed(format!("read a sample of {} orphaned asset row(s)", found.asset_sample.len()), started);
    }
    Ok(found)
}

/// A batch size as the summary lines show it: `10000`, or `auto (10 ms a batch, last 4200)`.
pub(crate) fn batch_size_text(batch_size: u64, batch_time: Option<Duration>) -> String {
    match batch_time {
        Some(time) => format!("auto ({} ms a batch, last {batch_size})", time.as_millis()),
        None => batch_size.to_string(),
    }
}

/// `--batch-size auto`'s time per batch in whole milliseconds, for the JSON documents.
pub(crate) fn batch_time_ms(batch_time: Option<Duration>) -> Option<u64> {
    batch_time.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
}

/// How many batches a run would take now, for `clean --dry-run --verbose`: the fewest it can
/// take, which is the count on SQLite and MySQL; on PostgreSQL a batch is the expired rows among
/// the next `batch_size` rows, so sparse expired rows take more (docs/commands/clean.md). A run
/// that stops at `--max-rows` skips the orphan sweep.
pub(crate) fn batches_needed(
    task_rows: u64,
    asset_rows: u64,
    batch_size: u64,
    batch_time: Option<Duration>,
    max_rows: Option<u64>,
) -> String {
    let stops = max_rows.is_some_and(|max| max < task_rows);
    let (task_rows, asset_rows) = if stops { (max_rows.unwrap_or(0), 0) } else { (task_rows, asset_rows) };
    let text = if let Some(time) = batch_time {
        format!(
            "batches of about {} ms each, sized by their pace ({AUTO_MIN_ROWS} to {AUTO_MAX_ROWS} rows), for {task_rows} expired task row(s) and {asset_rows} orphaned asset row(s), each followed by a pause {AUTO_PAUSE_RATIO} times as long (batch size auto)",
            time.as_millis()
        )
    } else if batch_size == 0 {
        format!(
            "one transaction for {task_rows} expired task row(s) and one for {asset_rows} orphaned asset row(s) (batch size 0)"
        )
    } else {
        format!(
            "at least {} batch(es) of at most {batch_size} expired task row(s) and {} of orphaned asset rows",
            task_rows.div_ceil(batch_size),
            asset_rows.div_ceil(batch_size)
        )
    };
    if stops { format!("{text}, then stop at --max-rows") } else { text }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{AssetWrite, TaskWrite, memory_sandbox};
    use crate::model::TaskScope;

    const HOUR: i64 = 3_600_000_000;

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
        Options {
            cutoff: Timestamp::now(),
            batch_size,
            batch_time: None,
            tasks: true,
            orphans: true,
            max_rows: None,
            max_duration: None,
            sleep: None,
            verbose: true,
        }
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
            auto.starts_with("batches of about 20 ms each") && auto.ends_with("(batch size auto)"),
            "{auto}"
        );
    }

    /// `--batch-size auto` sizes each batch from the last one's pace: a batch that took twice
    /// the target halves the next, a fast one at most doubles it, and the size stays within its
    /// bounds however fast or slow the database is.
    #[test]
    fn auto_batches_follow_their_pace_within_bounds() {
        let pacer = Pacer { target: Duration::from_millis(20) };
        let ms = Duration::from_millis;
        assert_eq!(pacer.next(1_000, ms(40)), 500);
        assert_eq!(pacer.next(1_000, ms(20)), 1_000);
        assert_eq!(pacer.next(1_000, ms(5)), 2_000, "at most twice the last");
        assert_eq!(pacer.next(1_000, ms(10)), 2_000);
        assert_eq!(pacer.next(1_000, Duration::ZERO), 2_000);
        assert_eq!(pacer.next(1_000, Duration::from_secs(60)), AUTO_MIN_ROWS);
        assert_eq!(pacer.next(90_000, ms(1)), AUTO_MAX_ROWS);
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
        assert!(summary.batch_size > 100, "{}", summary.batch_size);
        assert!(
            summary.line().contains(&format!("batch size auto (20 ms a batch, last {})", summary.batch_size))
        );
        assert_eq!(summary.doc().batch_time_ms, Some(20));
    }
}
