//! `clean`: Airflow's garbage collection, done so a cron job can trust it.
//!
//! Task rows with `expires_at < cutoff` are deleted in primary-key range batches of
//! `state_cleanup_batch_size` rows, each batch its own short transaction whose DELETE re-checks
//! the expiry, so a key a worker refreshes mid-run survives. A batch size of 0 is one
//! transaction with no id list, so it works on any table size (Airflow's own selects every id
//! and binds them all, which SQLite refuses past its variable limit). Then the rows of inactive
//! assets are swept. One summary line always ends the run; SIGINT/SIGTERM stop it between
//! batches with the summary marked `interrupted`. With `-o json` or `-o yaml` every run prints
//! exactly one document on stdout, a failed one included: see [`Report`].

use anyhow::Context as _;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::Context;
use crate::archive::{Sink, archive_error};
use crate::cli::{CleanArgs, Format, GlobalArgs};
use crate::db::{Access, Store};
use crate::error::{Error, Result};
use crate::model::{Page, TaskFilter};
use crate::output::{self, AssetEntryDoc, Rendered, Table, TaskEntryDoc};
use crate::progress::{self, Progress};
use crate::redact;
use crate::signals;
use crate::text::quote;
use crate::time::{self, Timestamp};

pub(crate) fn run(global: &GlobalArgs, args: &CleanArgs) -> Result<()> {
    let mut report = Report::new(global.output);
    let result = clean(global, args, &mut report);
    if let Err(e) = &result {
        report.failed(&redact::mask(&crate::error::message(e.as_ref())), crate::error::exit_code(e));
    }
    result
}

/// A `clean -o json` (or `-o yaml`) whose command line clap rejected: its one document is the
/// error alone. `message` is the stderr line without its `error: ` prefix, already masked.
pub(crate) fn command_line_rejected(format: Format, message: &str) {
    Report::new(format).failed(message, crate::error::exit::USAGE);
}

/// The one document a `clean -o json` or `-o yaml` prints on stdout, so that a job appending
/// them to a log gets one per run: the summary (or the dry-run object), or, when the exit code
/// is not 0, an `error` member, `{"message": …, "exit_code": …}`, added to the summary of the
/// batches run so far, or alone when none ran. Nothing is printed after a document: a stdout
/// that failed gets no second one. A signal that ends the process at once (any signal before
/// the run starts, a second one during it) prints the document instead (see `signals`).
struct Report {
    format: Format,
    printed: bool,
    /// The summary of a run that failed part-way, for its error document.
    so_far: Option<SummaryDoc>,
}

impl Report {
    fn new(format: Format) -> Report {
        let report = Report { format, printed: false, so_far: None };
        if report.structured() {
            signals::on_exit_print(move |signal| {
                let stop = Error::Interrupted { signal };
                let message = redact::mask(&stop.to_string());
                output::document(format, &Failed::new(None, &message, stop.exit_code()), false)
                    .unwrap_or_default()
            });
        }
        report
    }

    fn structured(&self) -> bool {
        matches!(self.format, Format::Json | Format::Yaml)
    }

    fn emit<D: Serialize>(&mut self, rendered: &Rendered<D>) -> Result<()> {
        self.printed = true;
        signals::print_instead(|| output::emit(self.format, rendered))?;
        Ok(())
    }

    /// `message` is the error as printed on stderr (masked the same way), without `error: `.
    fn failed(&mut self, message: &str, exit_code: i32) {
        if self.printed || !self.structured() {
            return;
        }
        let doc = Failed::new(self.so_far.take(), message, exit_code);
        // The run already failed: a stdout that fails too changes neither its message nor its
        // exit code.
        let _ = self.emit(&Rendered::doc(doc));
    }
}

/// The document of a run that failed: the summary of the batches run so far, if any, with an
/// `error` member.
#[derive(Serialize)]
struct Failed<'a> {
    #[serde(flatten)]
    summary: Option<SummaryDoc>,
    error: ErrorMember<'a>,
}

#[derive(Serialize)]
struct ErrorMember<'a> {
    message: &'a str,
    exit_code: i32,
}

impl Failed<'_> {
    fn new(summary: Option<SummaryDoc>, message: &str, exit_code: i32) -> Failed<'_> {
        Failed { summary, error: ErrorMember { message, exit_code } }
    }
}

fn clean(global: &GlobalArgs, args: &CleanArgs, report: &mut Report) -> Result<()> {
    let now = Timestamp::now();
    let cutoff = match &args.before {
        Some(text) => {
            let before = Timestamp::parse_rfc3339(text)
                .with_context(|| Error::Usage("invalid --before".to_string()))?;
            if before > now {
                return Err(Error::Usage(format!(
                    "--before {} is in the future: it would delete keys that have not expired yet",
                    before.to_rfc3339()
                ))
                .into());
            }
            before
        }
        None => now,
    };
    let duration = |flag: &str, text: &Option<String>| -> Result<Option<Duration>> {
        text.as_deref()
            .map(|t| time::parse_duration(t).with_context(|| Error::Usage(format!("invalid {flag}"))))
            .transpose()
    };
    let limits = Limits {
        tasks: !args.orphans_only,
        orphans: !args.no_orphans,
        max_rows: args.max_rows,
        max_duration: duration("--max-duration", &args.max_duration)?,
        sleep: duration("--sleep", &args.sleep)?,
    };
    let lock_timeout = duration("--lock-timeout", &Some(args.lock_timeout.clone()))?.unwrap_or_default();
    let progress_every =
        duration("--progress-every", &Some(args.progress_every.clone()))?.unwrap_or_default();
    let ctx = Context::load(global, args.batch_size.map(|n| n.to_string()).as_deref())?;
    if !ctx.settings.is_builtin_backend() {
        // Airflow's own clean does the same: a custom backend keeps its state elsewhere.
        let reason = format!(
            "[state_store] backend is {} (from {}), not the metastore backend: skipping cleanup (not supported)",
            ctx.settings.backend.value, ctx.settings.backend.source
        );
        output::note(&reason);
        let doc = Skipped {
            task_rows_deleted: 0,
            asset_rows_deleted: 0,
            batches: 0,
            cutoff: cutoff.to_rfc3339(),
            dry_run: args.dry_run,
            interrupted: false,
            skipped: reason,
        };
        report.emit(&Rendered::doc(doc))?;
        return Ok(());
    }
    let batch_size = ctx.settings.state_cleanup_batch_size.value;
    if args.dry_run {
        let mut store = ctx.open(Access::ReadOnly)?;
        return dry_run(&ctx, &mut store, cutoff, args, &limits, report);
    }
    let mut store = ctx.open(Access::ReadWrite)?;
    if !store.begin_clean(lock_timeout)? {
        return Err(Error::Busy(format!(
            "another state-store clean is running on {}; this one deleted nothing (try again when it ends)",
            ctx.url.redacted()
        ))
        .into());
    }
    let mut archive = args.archive.as_deref().map(Sink::archive).transpose()?;
    signals::defer();
    // Counting costs a query, worth it only for someone watching a bar.
    let total = if progress::stderr_is_terminal() { Some(store.count_expired(cutoff)?) } else { None };
    let mut progress = Progress::new(total, progress_every);
    if args.verbose {
        progress.detail(&format!(
            "clean: took the clean lock of {}; deleting {}; cutoff {}, batch size {batch_size}",
            ctx.url.redacted(),
            describe(args),
            cutoff.to_rfc3339()
        ));
    }
    let started = Instant::now();
    let mut summary = Summary {
        task_rows_deleted: 0,
        asset_rows_deleted: 0,
        batches: 0,
        orphan_batches: 0,
        cutoff,
        batch_size,
        stopped_by: None,
        seconds: 0.0,
        archive: None,
        in_doubt: None,
    };
    let mut run = Run {
        store: &mut store,
        summary: &mut summary,
        limits: &limits,
        started,
        progress: &mut progress,
        archive: archive.as_mut(),
        verbose: args.verbose,
        last_words: report.structured().then_some(report.format),
    };
    run.update_last_words();
    let result = run.delete_all();
    store.finish_clean();
    progress.finish();
    summary.seconds = started.elapsed().as_secs_f64();
    summary.archive = archive.as_ref().map(archived);
    output::note(&summary.line());
    // A run stopped by a signal exits 130 or 143, so its summary carries the error too.
    let result = result.and(match summary.stopped_by {
        Some(Stop::Signal(signal)) => Err(Error::Interrupted { signal }.into()),
        _ => Ok(()),
    });
    if let Err(e) = result {
        report.so_far = Some(summary.doc());
        return Err(e);
    }
    report.emit(&Rendered::doc(summary.doc()))
}

/// What a clean with a custom `[state_store] backend` prints: zero counts and the reason.
#[derive(Serialize)]
struct Skipped {
    task_rows_deleted: u64,
    asset_rows_deleted: u64,
    batches: u64,
    cutoff: String,
    dry_run: bool,
    interrupted: bool,
    skipped: String,
}

/// What ends a run before every expired row is gone.
struct Limits {
    /// Which of the two phases run: expired task rows, orphaned asset rows.
    tasks: bool,
    orphans: bool,
    max_rows: Option<u64>,
    max_duration: Option<Duration>,
    sleep: Option<Duration>,
}

/// What a run deletes and what bounds it, as given on the command line, for `--verbose`.
fn describe(args: &CleanArgs) -> String {
    let mut text = if args.orphans_only {
        "orphaned asset rows only".to_string()
    } else if args.no_orphans {
        "expired task rows only".to_string()
    } else {
        "expired task rows, then orphaned asset rows".to_string()
    };
    for (flag, value) in [
        ("--max-rows", args.max_rows.map(|n| n.to_string())),
        ("--max-duration", args.max_duration.clone()),
        ("--sleep", args.sleep.clone()),
        ("--archive", args.archive.as_ref().map(|p| p.display().to_string())),
    ] {
        if let Some(value) = value {
            text.push_str(&format!(", {flag} {value}"));
        }
    }
    text
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Signal(i32),
    MaxRows,
    MaxDuration,
}

impl Stop {
    fn name(self) -> &'static str {
        match self {
            Stop::Signal(15) => "SIGTERM",
            Stop::Signal(_) => "SIGINT",
            Stop::MaxRows => "max_rows",
            Stop::MaxDuration => "max_duration",
        }
    }
}

#[derive(Debug, Clone)]
struct Summary {
    task_rows_deleted: u64,
    asset_rows_deleted: u64,
    batches: u64,
    orphan_batches: u64,
    cutoff: Timestamp,
    batch_size: u64,
    stopped_by: Option<Stop>,
    seconds: f64,
    /// The `--archive` file and the rows appended to it by this run.
    archive: Option<(String, u64)>,
    /// The batch whose DELETE failed, when one did (`Some(None)`: the open-ended last batch).
    /// A connection lost after the server committed the DELETE but before it answered leaves
    /// that batch deleted without the count knowing it (observed with MariaDB's `KILL`).
    in_doubt: Option<Option<u64>>,
}

impl Summary {
    fn line(&self) -> String {
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
        format!(
            "clean: deleted {} expired task row(s) in {} batch(es) and {} orphaned asset row(s); cutoff {}, batch size {}, {:.2}s{archived}{in_doubt}{stopped}",
            self.task_rows_deleted,
            self.batches,
            self.asset_rows_deleted,
            self.cutoff.to_rfc3339(),
            self.batch_size,
            self.seconds
        )
    }

    fn doc(&self) -> SummaryDoc {
        SummaryDoc {
            task_rows_deleted: self.task_rows_deleted,
            asset_rows_deleted: self.asset_rows_deleted,
            batches: self.batches,
            orphan_batches: self.orphan_batches,
            cutoff: self.cutoff.to_rfc3339(),
            batch_size: self.batch_size,
            dry_run: false,
            interrupted: matches!(self.stopped_by, Some(Stop::Signal(_))),
            stopped_by: self.stopped_by.map(Stop::name),
            seconds: (self.seconds * 1000.0).round() / 1000.0,
            archive: self.archive.as_ref().map(|(path, _)| path.clone()),
            archived_rows: self.archive.as_ref().map(|(_, rows)| *rows),
        }
    }
}

/// The summary of a run in JSON (docs/output.md#clean-summary).
#[derive(Serialize)]
struct SummaryDoc {
    task_rows_deleted: u64,
    asset_rows_deleted: u64,
    batches: u64,
    orphan_batches: u64,
    cutoff: String,
    batch_size: u64,
    dry_run: bool,
    interrupted: bool,
    stopped_by: Option<&'static str>,
    /// To the millisecond.
    seconds: f64,
    archive: Option<String>,
    archived_rows: Option<u64>,
}

/// One clean in progress: the connection, what has been done so far, what may stop it, and
/// where deleted rows are archived first.
struct Run<'a> {
    store: &'a mut Store,
    summary: &'a mut Summary,
    limits: &'a Limits,
    started: Instant,
    progress: &'a mut Progress,
    archive: Option<&'a mut Sink>,
    /// `--verbose`: a line on stderr for every batch.
    verbose: bool,
    /// With `-o json` or `-o yaml`, the format of the document a second signal prints.
    last_words: Option<Format>,
}

impl Run<'_> {
    /// A second signal ends the process at once, in the middle of a batch, which the database
    /// then rolls back: the document it prints holds the batches committed until now.
    fn update_last_words(&self) {
        let Some(format) = self.last_words else { return };
        let mut summary = self.summary.clone();
        summary.archive = self.archive.as_deref().map(archived);
        let started = self.started;
        signals::on_exit_print(move |signal| {
            let mut summary = summary.clone();
            summary.seconds = started.elapsed().as_secs_f64();
            summary.stopped_by = Some(Stop::Signal(signals::stop_requested().unwrap_or(signal)));
            let message = format!(
                "stopped at once by a second signal ({}); the batch in progress, if any, is rolled back",
                Stop::Signal(signal).name()
            );
            output::document(format, &Failed::new(Some(summary.doc()), &message, 128 + signal), false)
                .unwrap_or_default()
        });
    }

    /// The two phases of a run. The orphan sweep starts only after every expired task row is
    /// gone, so a stopped run leaves the database as a later run expects to find it.
    fn delete_all(&mut self) -> Result<()> {
        if self.limits.tasks {
            self.delete_expired()?;
            if self.summary.stopped_by.is_some() {
                return Ok(());
            }
        }
        if let Some(stop) = self.should_stop().filter(|s| matches!(s, Stop::Signal(_))) {
            self.summary.stopped_by = Some(stop);
            return Ok(());
        }
        if self.limits.orphans {
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
            let remaining = self.limits.max_rows.map(|max| max - self.summary.task_rows_deleted);
            // `--max-rows` caps the batch so that no run deletes more than it was allowed.
            let batch = match (self.summary.batch_size, remaining) {
                (0, None) => None,
                (0, Some(r)) => Some(r),
                (b, Some(r)) => Some(b.min(r)),
                (b, None) => Some(b),
            };
            let capped = batch.is_some_and(|n| n != self.summary.batch_size);
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
            let deleted = deleted.inspect_err(|_| self.summary.in_doubt = Some(at_most))?;
            if deleted > 0 {
                self.summary.batches += 1;
                self.summary.task_rows_deleted += deleted;
            }
            if self.verbose {
                let (ids, ms) = (id_range(after_id, up_to_id), millis(batch_started));
                self.progress.detail(&if deleted > 0 {
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
            self.progress.update(self.summary.task_rows_deleted, self.summary.batches);
            if deleted > 0 {
                self.update_last_words();
            }
            let Some(id) = up_to_id else { return Ok(()) };
            after_id = id;
            if self.limits.max_rows.is_some_and(|max| self.summary.task_rows_deleted >= max)
                && self.store.nth_expired_id(cutoff, after_id, 1)?.is_none()
            {
                // The limit was reached exactly by the last expired row: the run is complete.
                return Ok(());
            }
            // A batch that found nothing to delete (see `delete_expired_batch`) put no load on
            // the database worth a pause.
            if deleted > 0 {
                self.pause();
            }
        }
    }

    /// The orphan sweep with an archive: each batch is a set of orphaned rows read first,
    /// archived and synced, then deleted key by key in one transaction, each DELETE checking
    /// again that the asset is still inactive. (Without an archive, a batch is any `LIMIT` rows.)
    fn sweep_orphans_archived(&mut self) -> Result<()> {
        let page = if self.summary.batch_size > 0 { self.summary.batch_size } else { ARCHIVE_PAGE };
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
            self.pause();
        }
    }

    /// The orphan sweep, in batches of the same size as the task rows.
    fn sweep_orphans(&mut self) -> Result<()> {
        let batch = (self.summary.batch_size > 0).then_some(self.summary.batch_size);
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
            self.pause();
        }
    }

    fn orphans_deleted(&mut self, deleted: u64, batch_started: Instant) {
        if deleted > 0 {
            self.summary.orphan_batches += 1;
            self.summary.asset_rows_deleted += deleted;
        }
        if self.verbose {
            let ms = millis(batch_started);
            self.progress.detail(&if deleted > 0 {
                format!(
                    "clean: orphan batch {}: deleted {deleted} orphaned asset row(s), {ms} ms",
                    self.summary.orphan_batches
                )
            } else {
                format!("clean: orphan sweep: no orphaned asset row deleted, {ms} ms")
            });
        }
        self.progress.update(
            self.summary.task_rows_deleted + self.summary.asset_rows_deleted,
            self.summary.batches + self.summary.orphan_batches,
        );
        if deleted > 0 {
            self.update_last_words();
        }
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

    fn pause(&self) {
        if let Some(pause) = self.limits.sleep {
            signals::sleep(pause);
        }
    }

    fn should_stop(&self) -> Option<Stop> {
        if let Some(signal) = signals::stop_requested() {
            return Some(Stop::Signal(signal));
        }
        if self.limits.max_rows.is_some_and(|max| self.summary.task_rows_deleted >= max) {
            return Some(Stop::MaxRows);
        }
        if self.limits.max_duration.is_some_and(|max| self.started.elapsed() >= max) {
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

/// Counts per dag and per orphaned asset, plus a bounded sample: never every row.
fn dry_run(
    ctx: &Context,
    store: &mut Store,
    cutoff: Timestamp,
    args: &CleanArgs,
    limits: &Limits,
    report: &mut Report,
) -> Result<()> {
    let sample = args.sample;
    let batch_size = ctx.settings.state_cleanup_batch_size.value;
    // `--verbose`: each query of the dry run, with what it found and how long it took.
    let timed = |what: &str, started: Instant| {
        if args.verbose {
            output::note(&format!("clean --dry-run: {what}, {} ms", millis(started)));
        }
    };
    if args.verbose {
        output::note(&format!(
            "clean --dry-run: reading {}; counting {}; cutoff {}, batch size {batch_size}",
            ctx.url.redacted(),
            describe(args),
            cutoff.to_rfc3339()
        ));
    }
    let started = Instant::now();
    let by_dag = if limits.tasks { store.expired_by_dag(cutoff)? } else { Vec::new() };
    let task_rows: u64 = by_dag.iter().map(|d| d.rows).sum();
    if limits.tasks {
        timed(&format!("counted {task_rows} expired task row(s) of {} dag(s)", by_dag.len()), started);
    }
    let started = Instant::now();
    let by_asset = if limits.orphans { store.orphans_by_asset()? } else { Vec::new() };
    let asset_rows: u64 = by_asset.iter().map(|a| a.rows).sum();
    if limits.orphans {
        timed(&format!("counted {asset_rows} orphaned asset row(s) of {} asset(s)", by_asset.len()), started);
    }
    let started = Instant::now();
    let task_sample = if limits.tasks {
        store.list_task(
            &TaskFilter { expired_before: Some(cutoff), ..TaskFilter::default() },
            Page { limit: Some(sample), offset: 0 },
        )?
    } else {
        Vec::new()
    };
    if limits.tasks {
        timed(&format!("read a sample of {} expired task row(s)", task_sample.len()), started);
    }
    let started = Instant::now();
    let asset_sample = if limits.orphans { store.orphan_sample(sample)? } else { Vec::new() };
    if limits.orphans {
        timed(&format!("read a sample of {} orphaned asset row(s)", asset_sample.len()), started);
    }
    if args.verbose {
        output::note(&format!(
            "clean --dry-run: a run now would take {}",
            batches_needed(task_rows, asset_rows, batch_size, limits.max_rows)
        ));
    }

    let mut counts = Table {
        title: Some("Would delete:".to_string()),
        headers: vec!["kind", "scope", "rows"],
        rows: Vec::new(),
    };
    counts.rows.extend(
        by_dag
            .iter()
            .map(|d| vec!["expired task rows".to_string(), format!("dag {}", d.dag_id), d.rows.to_string()]),
    );
    counts.rows.extend(by_asset.iter().map(|a| {
        let name = a.asset_name.as_deref().map_or_else(|| "(deleted asset)".to_string(), quote);
        vec![
            "orphaned asset rows".to_string(),
            format!("asset {name} (id {})", a.asset_id),
            a.rows.to_string(),
        ]
    }));
    let tasks =
        output::entries(&task_sample, true, Some(format!("Sample of expired task rows (at most {sample}):")));
    let orphans = output::entries(
        &asset_sample,
        true,
        Some(format!("Sample of orphaned asset rows (at most {sample}):")),
    );
    let mut tables = vec![counts];
    tables.extend([tasks.table, orphans.table].into_iter().filter(|t| !t.rows.is_empty()));
    let doc = DryRun {
        dry_run: true,
        cutoff: cutoff.to_rfc3339(),
        batch_size,
        task_rows_deleted: 0,
        asset_rows_deleted: 0,
        task_rows_to_delete: task_rows,
        asset_rows_to_delete: asset_rows,
        expired_by_dag: by_dag.iter().map(|d| DagRows { dag_id: &d.dag_id, rows: d.rows }).collect(),
        orphans_by_asset: by_asset
            .iter()
            .map(|a| AssetRows { asset_id: a.asset_id, asset_name: a.asset_name.as_deref(), rows: a.rows })
            .collect(),
        sample: tasks.docs,
        orphan_sample: orphans.docs,
        interrupted: false,
        stopped_by: None,
    };
    output::note(&format!(
        "clean --dry-run: would delete {task_rows} expired task row(s) of {} dag(s) and {asset_rows} orphaned asset row(s) of {} asset(s); cutoff {}",
        by_dag.len(),
        by_asset.len(),
        cutoff.to_rfc3339()
    ));
    report.emit(&Rendered { doc, tables, plain: Some(format!("{task_rows} {asset_rows}")) })?;
    Ok(())
}

/// What `clean --dry-run -o json` prints (docs/output.md#dry-run-object).
#[derive(Serialize)]
struct DryRun<'a> {
    dry_run: bool,
    cutoff: String,
    batch_size: u64,
    task_rows_deleted: u64,
    asset_rows_deleted: u64,
    task_rows_to_delete: u64,
    asset_rows_to_delete: u64,
    expired_by_dag: Vec<DagRows<'a>>,
    orphans_by_asset: Vec<AssetRows<'a>>,
    sample: Vec<TaskEntryDoc>,
    orphan_sample: Vec<AssetEntryDoc>,
    interrupted: bool,
    stopped_by: Option<&'static str>,
}

#[derive(Serialize)]
struct DagRows<'a> {
    dag_id: &'a str,
    rows: u64,
}

#[derive(Serialize)]
struct AssetRows<'a> {
    asset_id: i64,
    asset_name: Option<&'a str>,
    rows: u64,
}

/// How many batches a run would take now, for `clean --dry-run --verbose`: the fewest it can
/// take, which is the count on SQLite and MySQL; on PostgreSQL a batch is the expired rows among
/// the next `batch_size` rows, so sparse expired rows take more (docs/commands/clean.md). A run
/// that stops at `--max-rows` skips the orphan sweep.
fn batches_needed(task_rows: u64, asset_rows: u64, batch_size: u64, max_rows: Option<u64>) -> String {
    let stops = max_rows.is_some_and(|max| max < task_rows);
    let (task_rows, asset_rows) = if stops { (max_rows.unwrap_or(0), 0) } else { (task_rows, asset_rows) };
    let text = if batch_size == 0 {
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
