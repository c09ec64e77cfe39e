//! `clean`: flags to [`ops::clean::Options`], the engine's run, and its one summary. With `-o
//! json` or `-o yaml` every run prints exactly one document on stdout, a failed one included:
//! see [`Report`].

use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

use super::Context;
use crate::archive::Sink;
use crate::cli::{BatchSize, CleanArgs, Format, GlobalArgs};
use crate::db::{Access, Store};
use crate::error::{Error, Result};
use crate::metrics::{self, MetricsFile};
use crate::ops::{
    self,
    clean::{Options, Stop, Summary, SummaryDoc, Watch},
};
use crate::output::{self, AssetEntryDoc, Rendered, Table, TaskEntryDoc};
use crate::progress::{self, Progress};
use crate::redact;
use crate::signals::{self, Ending};
use crate::text::quote;
use crate::time::{self, Timestamp};

/// How long after `--max-duration` a run that has not stopped on its own is ended at once.
/// A responsive run stops at its next batch boundary, well within it.
pub(crate) const MAX_DURATION_GRACE: Duration = Duration::from_secs(15);

/// `--batch-time`'s default: each batch of `--batch-size auto` about this long. At 10 ms a
/// batch deletes a few hundred rows on MariaDB and several thousand on PostgreSQL on a 2-core
/// machine; the workers beside it wait less for shorter ones (docs/performance.md), but below
/// that a batch's round trips and commit become most of it.
const AUTO_BATCH_TIME: Duration = Duration::from_millis(10);

pub(crate) fn run(global: &GlobalArgs, args: &CleanArgs) -> Result<()> {
    let mut report = Report::new(global.output);
    let result = clean(global, args, &mut report);
    if let Err(e) = &result {
        let exit_code = crate::error::exit_code(e);
        report.failed(&redact::mask(&crate::error::message(e.as_ref())), exit_code);
        if let Err(unwritten) = report.write_metrics(exit_code) {
            // The run already failed: its error, not this one, decides the exit code.
            output::warn(&crate::error::message(unwritten.as_ref()));
        }
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
/// batches run so far, or alone when none ran. Every document starts with `started_at`, when
/// the run started (RFC 3339, UTC), so that documents appended to a log can be placed in time.
/// Nothing is printed after a document: a stdout that failed gets no second one. A signal
/// that ends the process at once (any signal before the run starts, a second one during it)
/// prints the document instead (see `signals`). The metrics file is written after the
/// document, with the exit code the process ends with.
struct Report {
    format: Format,
    printed: bool,
    /// The summary of the batches run, for the error document of a run that failed part-way
    /// and for the metrics.
    so_far: Option<Summary>,
    /// `--metrics-file`, until it is written.
    metrics: Option<MetricsFile>,
    /// What the run left to delete (expired task rows, orphaned asset rows), for the metrics.
    backlog: Option<(u64, u64)>,
    /// A custom `[state_store] backend` made the run skip its work.
    skipped: bool,
    started: Instant,
    /// `started_at` of every document (RFC 3339, UTC).
    started_at: String,
}

/// A document with the time its run started in front: `{"started_at": …, …}`.
#[derive(Serialize)]
struct Stamped<'a, D> {
    started_at: &'a str,
    #[serde(flatten)]
    doc: &'a D,
}

impl Report {
    fn new(format: Format) -> Report {
        let report = Report {
            format,
            printed: false,
            so_far: None,
            metrics: None,
            backlog: None,
            skipped: false,
            started: Instant::now(),
            started_at: Timestamp::now().to_rfc3339(),
        };
        if report.structured() {
            let started_at = report.started_at.clone();
            signals::on_exit_print(move |ending| {
                let message = match ending {
                    Ending::Signal(signal) => Error::Interrupted { signal: *signal }.to_string(),
                    other => other.message().unwrap_or_default(),
                };
                let message = redact::mask(&message);
                let doc = Failed::new(None, &message, ending.exit_code());
                output::document(format, &Stamped { started_at: &started_at, doc: &doc }, false)
                    .unwrap_or_default()
            });
        }
        report
    }

    fn structured(&self) -> bool {
        matches!(self.format, Format::Json | Format::Yaml)
    }

    fn emit<D: Serialize>(&mut self, rendered: Rendered<D>) -> Result<()> {
        self.printed = true;
        let Rendered { doc, tables, plain } = rendered;
        let stamped = Rendered { doc: Stamped { started_at: &self.started_at, doc: &doc }, tables, plain };
        signals::print_instead(|| output::emit(self.format, &stamped))?;
        Ok(())
    }

    /// `message` is the error as printed on stderr (masked the same way), without `error: `.
    fn failed(&mut self, message: &str, exit_code: i32) {
        if self.printed || !self.structured() {
            return;
        }
        let doc = Failed::new(self.so_far.take().map(|s| s.doc()), message, exit_code);
        // The run already failed: a stdout that fails too changes neither its message nor its
        // exit code.
        let _ = self.emit(Rendered::doc(doc));
    }

    /// Replaces the `--metrics-file`, if one was given, with what the run did; once, after the
    /// document is on stdout, so that `exit_code` is the process's own even when stdout fails.
    fn write_metrics(&mut self, exit_code: i32) -> Result<()> {
        let Some(file) = self.metrics.take() else { return Ok(()) };
        let mut run = metrics::CleanRun {
            seconds: self.started.elapsed().as_secs_f64(),
            exit_code,
            backlog: self.backlog,
            skipped: self.skipped,
            ended: Timestamp::now().micros() as f64 / 1e6,
            ..metrics::CleanRun::default()
        };
        if let Some(summary) = &self.so_far {
            run.task_rows_deleted = summary.task_rows_deleted;
            run.asset_rows_deleted = summary.asset_rows_deleted;
            run.batches = summary.batches;
            run.orphan_batches = summary.orphan_batches;
            run.locked_rows_skipped = summary.task_rows_skipped;
            run.seconds = summary.seconds;
            run.interrupted = matches!(summary.stopped_by, Some(Stop::Signal(_)));
            run.limit = summary.stopped_by.filter(|s| !matches!(s, Stop::Signal(_))).map(Stop::name);
        }
        file.write(&run)
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
    report.metrics = args.metrics_file.as_deref().map(MetricsFile::new).transpose()?;
    super::refuse_api(global, "clean")?;
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
    let lock_timeout = duration("--lock-timeout", &Some(args.lock_timeout.clone()))?.unwrap_or_default();
    let progress_every =
        duration("--progress-every", &Some(args.progress_every.clone()))?.unwrap_or_default();
    let (max_duration, sleep) =
        (duration("--max-duration", &args.max_duration)?, duration("--sleep", &args.sleep)?);
    if let Some(max) = max_duration {
        // The hard deadline: a run that has not stopped by itself MAX_DURATION_GRACE after
        // --max-duration (a batch blocked on a database or a file that does not answer)
        // ends at once, with the document of the batches committed until then.
        let shown = args.max_duration.clone().unwrap_or_default();
        signals::after(max.saturating_add(MAX_DURATION_GRACE), move || Ending::Failed {
            message: format!(
                "--max-duration {shown} passed {} s ago and the run has not stopped (a database or file \
                 that does not answer): stopped at once; the batch in progress, if any, is rolled back",
                MAX_DURATION_GRACE.as_secs()
            ),
            exit_code: crate::error::exit::DATABASE,
        });
    }
    let rows_flag = match args.batch_size {
        Some(BatchSize::Rows(n)) => Some(n.to_string()),
        _ => None,
    };
    let mut ctx = Context::load(global, rows_flag.as_deref())?;
    // `auto` when asked for, and in place of the configured 0: Airflow's default, which Airflow
    // writes into every airflow.cfg it generates, so it says nothing of the user's wishes. Its
    // one transaction would hold the clean's locks for the whole run (on SQLite the one write
    // lock every Airflow writer needs). `--batch-size 0` still asks for it.
    let batch_time = match (args.batch_size, ctx.settings.state_cleanup_batch_size.value) {
        (Some(BatchSize::Auto), _) | (None, 0) => {
            let time = duration("--batch-time", &args.batch_time)?.unwrap_or(AUTO_BATCH_TIME);
            if time.is_zero() {
                return Err(
                    Error::Usage("invalid --batch-time: give a duration above 0, e.g. 10ms".into()).into()
                );
            }
            Some(time)
        }
        _ if args.batch_time.is_some() => {
            let size = &ctx.settings.state_cleanup_batch_size;
            return Err(Error::Usage(format!(
                "--batch-time needs --batch-size auto; the batch size is {} (from {})",
                size.value, size.source
            ))
            .into());
        }
        _ => None,
    };
    let batch_size = if batch_time.is_some() {
        ops::clean::AUTO_FIRST_ROWS
    } else {
        ctx.settings.state_cleanup_batch_size.value
    };
    // clean's own first `-v` line names the database, with what the run is about to do.
    ctx.verbose = false;
    if !ctx.settings.is_builtin_backend() {
        // Airflow's own clean does the same: a custom backend keeps its state elsewhere.
        let reason = format!(
            "[state_store] backend is {} (from {}), not the metastore backend: skipping cleanup (not supported)",
            ctx.settings.backend.value, ctx.settings.backend.source
        );
        output::note(&reason);
        // The summary of a run that deleted nothing, with the reason: not a success, so its
        // metrics say `skipped` and leave the last success where it was.
        let mut summary = Summary { batch_time, ..Summary::empty(cutoff, batch_size) }.doc();
        summary.dry_run = args.dry_run;
        report.skipped = true;
        report.emit(Rendered::doc(Skipped { summary, skipped: reason }))?;
        return report.write_metrics(crate::error::exit::SUCCESS);
    }
    let options = Options {
        cutoff,
        batch_size,
        batch_time,
        tasks: !args.orphans_only,
        orphans: !args.no_orphans,
        max_rows: args.max_rows,
        max_duration,
        sleep,
        verbose: global.verbose,
    };
    // --lock-timeout bounds every lock wait of the run, a dry run's reads included; the
    // server keeps the session through --sleep's pauses.
    let timeouts = ctx.timeouts().with_lock(lock_timeout).with_pause(sleep.unwrap_or_default());
    if args.dry_run {
        let mut store = ctx.open_with(Access::ReadOnly, &timeouts)?;
        return dry_run(&ctx, &mut store, &options, args, report);
    }
    let mut store = ctx.open_with(Access::ReadWrite, &timeouts)?;
    if let Some(Err(e)) = report.metrics.as_ref().map(MetricsFile::check) {
        // The metrics file is the database: the failed run's metrics must not be written either.
        report.metrics = None;
        return Err(e);
    }
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
    let mut watcher = Watcher {
        progress: Progress::new(total, progress_every),
        last_words: report.structured().then_some(report.format),
        started: Instant::now(),
        started_at: report.started_at.clone(),
    };
    if global.verbose {
        watcher.progress.detail(&format!(
            "clean: took the clean lock of {}; deleting {}; cutoff {}, batch size {}",
            ctx.url.redacted(),
            describe(args),
            cutoff.to_rfc3339(),
            ops::clean::batch_size_text(options.batch_size, options.batch_time)
        ));
    }
    let (summary, result) = ops::clean::run(&mut store, &options, archive.as_mut(), &mut watcher);
    store.finish_clean();
    watcher.progress.finish();
    output::status(&summary.line());
    if report.metrics.is_some() && result.is_ok() {
        report.backlog = backlog(&mut store, cutoff).ok();
    }
    // A run stopped by a signal exits 130 or 143, so its summary carries the error too.
    let result = result.and(match summary.stopped_by {
        Some(Stop::Signal(signal)) => Err(Error::Interrupted { signal }.into()),
        _ => Ok(()),
    });
    let doc = summary.doc();
    report.so_far = Some(summary);
    result?;
    report.emit(Rendered::doc(doc))?;
    report.write_metrics(crate::error::exit::SUCCESS)
}

/// What a run left for the next one: expired task rows before its cutoff, orphaned asset rows.
fn backlog(store: &mut Store, cutoff: Timestamp) -> Result<(u64, u64)> {
    let orphans = store.orphans_by_asset()?.iter().map(|a| a.rows).sum();
    Ok((store.count_expired(cutoff)?, orphans))
}

/// The progress of a run on stderr, and the document a second signal prints: it ends the
/// process at once, in the middle of a batch, which the database then rolls back, so the
/// document holds the batches committed until then.
struct Watcher {
    progress: Progress,
    /// With `-o json` or `-o yaml`, the format of the document a second signal prints.
    last_words: Option<Format>,
    started: Instant,
    /// The documents' `started_at`.
    started_at: String,
}

impl Watch for Watcher {
    fn batch(&mut self, summary: &Summary, deleted: bool) {
        self.progress.update(
            summary.task_rows_deleted + summary.asset_rows_deleted,
            summary.batches + summary.orphan_batches,
        );
        let Some(format) = self.last_words.filter(|_| deleted) else { return };
        let (summary, started, started_at) = (summary.clone(), self.started, self.started_at.clone());
        signals::on_exit_print(move |ending| {
            let mut summary = summary.clone();
            summary.seconds = started.elapsed().as_secs_f64();
            let message = match ending {
                Ending::Signal(signal) => {
                    summary.stopped_by = Some(Stop::Signal(signals::stop_requested().unwrap_or(*signal)));
                    format!(
                        "stopped at once by a second signal ({}); the batch in progress, if any, is rolled back",
                        Stop::Signal(*signal).name()
                    )
                }
                Ending::GraceOver(signal) => {
                    summary.stopped_by = Some(Stop::Signal(*signal));
                    ending.message().unwrap_or_default()
                }
                Ending::Failed { .. } => ending.message().unwrap_or_default(),
            };
            let message = redact::mask(&message);
            let doc = Failed::new(Some(summary.doc()), &message, ending.exit_code());
            output::document(format, &Stamped { started_at: &started_at, doc: &doc }, false)
                .unwrap_or_default()
        });
    }

    fn detail(&mut self, line: &str) {
        self.progress.detail(line);
    }
}

/// `--verbose` notes of a dry run go straight to stderr: it draws no progress bar.
struct Notes;

impl Watch for Notes {
    fn batch(&mut self, _: &Summary, _: bool) {}

    fn detail(&mut self, line: &str) {
        output::note(line);
    }
}

/// What a clean with a custom `[state_store] backend` prints: the summary of a run that did
/// nothing, and the reason.
#[derive(Serialize)]
struct Skipped {
    #[serde(flatten)]
    summary: SummaryDoc,
    skipped: String,
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

/// Counts per dag and per orphaned asset, plus a bounded sample: never every row.
fn dry_run(
    ctx: &Context,
    store: &mut Store,
    options: &Options,
    args: &CleanArgs,
    report: &mut Report,
) -> Result<()> {
    let (sample, batch_size, cutoff) = (args.sample, options.batch_size, options.cutoff);
    let shown = ops::clean::batch_size_text(batch_size, options.batch_time);
    if options.verbose {
        output::note(&format!(
            "clean --dry-run: reading {}; counting {}; cutoff {}, batch size {shown}",
            ctx.url.redacted(),
            describe(args),
            cutoff.to_rfc3339()
        ));
    }
    let found = ops::clean::dry_run(store, options, sample, &mut Notes)?;
    let (task_rows, asset_rows) = (found.task_rows(), found.asset_rows());
    let ops::clean::DryRun { by_dag, by_asset, task_sample, asset_sample } = found;
    if options.verbose {
        output::note(&format!(
            "clean --dry-run: a run now would take {}",
            ops::clean::batches_needed(
                task_rows,
                asset_rows,
                batch_size,
                options.batch_time,
                options.max_rows
            )
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
    // Nothing to delete is one line, not the header of an empty table; json, yaml and plain
    // keep their shapes (empty lists, zero counts), which their readers rely on.
    if counts.rows.is_empty() {
        let tasks = options.tasks.then(|| format!("no task key expired before {}", cutoff.to_rfc3339()));
        let orphans = options.orphans.then(|| "no key of an inactive asset".to_string());
        let none: Vec<String> = [tasks, orphans].into_iter().flatten().collect();
        counts = Table::line(format!("Nothing to delete: {}.", none.join(" and ")));
    }
    let mut tables = vec![counts];
    tables.extend([tasks.table, orphans.table].into_iter().filter(|t| !t.rows.is_empty()));
    let doc = DryRun {
        dry_run: true,
        cutoff: cutoff.to_rfc3339(),
        batch_size,
        batch_time_ms: ops::clean::batch_time_ms(options.batch_time),
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
    output::status(&format!(
        "clean --dry-run: would delete {task_rows} expired task row(s) of {} dag(s) and {asset_rows} orphaned asset row(s) of {} asset(s); cutoff {}",
        by_dag.len(),
        by_asset.len(),
        cutoff.to_rfc3339()
    ));
    report.emit(Rendered { doc, tables, plain: Some(format!("{task_rows} {asset_rows}")) })?;
    Ok(())
}

/// What `clean --dry-run -o json` prints (docs/output.md#dry-run-object).
#[derive(Serialize)]
struct DryRun<'a> {
    dry_run: bool,
    cutoff: String,
    batch_size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    batch_time_ms: Option<u64>,
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
