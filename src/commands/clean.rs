//! `clean`: flags to [`ops::clean::Options`], the engine's run, and one [`Outcome`] of it,
//! from which everything the run tells is rendered: stdout's document, the summary line on
//! stderr, the metrics file and the exit status, on every ending. With `-o json` or `-o yaml`
//! every run prints exactly one document on stdout, a failed one included (see [`Sinks`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

use super::{Context, ErrorMember};
use crate::cli::{BatchSize, CleanArgs, GlobalArgs};
use crate::db::Access;
use crate::error::{Error, Result};
use crate::metrics::{self, MetricsFile};
use crate::ops::{
    self,
    clean::{Options, Stop, Summary, Watch},
};
use crate::output::Format;
use crate::output::{self, Rendered};
use crate::progress::{self, Progress};
use crate::signals::{self, Ending};
use crate::time::{self, Timestamp};

pub(crate) fn run(global: &GlobalArgs, args: &CleanArgs) -> Result<()> {
    let sinks = Sinks::new(global.output);
    let outcome = clean(global, args, &sinks);
    sinks.render(outcome)
}

/// A `clean -o json` (or `-o yaml`) whose command line clap rejected: its one document is the
/// error alone. `message` is the stderr line without its `error: ` prefix, already masked.
pub(crate) fn command_line_rejected(format: Format, message: &str) {
    let sinks = Sinks::new(format);
    let _ =
        sinks.print(&Ending::Failed { message: message.to_string(), exit_code: crate::error::exit::USAGE });
}

/// What one run came to. Every sink is rendered from it, and from nothing else, so that the
/// document, the summary line, the metrics file and the exit status agree on every ending.
struct Outcome {
    /// What the batches did, when the run got as far as its first batch: rows and batches
    /// committed, what stopped it, the archive.
    summary: Option<Summary>,
    /// What the run left to delete (expired task rows, orphaned asset rows), counted for the
    /// metrics after a run that completed.
    backlog: Option<(u64, u64)>,
    /// What a run that did its work prints.
    done: Done,
    /// Why the run failed; `None` for a success. A run stopped by a signal between batches
    /// failed with [`Error::Interrupted`] (130, 143).
    error: Option<anyhow::Error>,
}

enum Done {
    /// The summary of the batches.
    Clean,
    /// A custom `[state_store] backend`: nothing done, for this reason (exit 0, no success).
    Skipped(String),
    /// A dry run's counts, its tables, and its line for stderr.
    DryRun(Box<Rendered<ops::clean::DryRunDoc>>, String),
}

/// Where a run's outcome goes, and what an ending that stops the process at once (a second
/// signal, a first one the run does not answer, the hard deadline) needs to render it there
/// too: the format of stdout's document, the metrics file, the summary of the batches
/// committed so far. Every document starts with `started_at`, when the run started (RFC 3339,
/// UTC), so that documents appended to a log can be placed in time. Nothing is printed after
/// a document: a stdout that failed gets no second one. The metrics file is written after the
/// document, with the exit code the process ends with. A clone shares what the run has come
/// to so far.
#[derive(Clone)]
struct Sinks {
    format: Format,
    started: Instant,
    started_at: String,
    shared: Arc<Mutex<Shared>>,
}

/// What the run has come to so far, which the at-once ending reads from another thread.
#[derive(Default)]
struct Shared {
    /// `--metrics-file`, once validated (every run that gets past its command line writes it).
    metrics: Option<MetricsFile>,
    /// The batches committed so far.
    so_far: Option<Summary>,
}

/// A document with the time its run started in front: `{"started_at": …, …}`.
#[derive(Serialize)]
struct Stamped<'a, D> {
    started_at: &'a str,
    #[serde(flatten)]
    doc: &'a D,
}

impl Sinks {
    /// The sinks of a run starting now; from now on an ending that stops the process at once
    /// renders what the run has done to them.
    fn new(format: Format) -> Sinks {
        let sinks = Sinks {
            format,
            started: Instant::now(),
            started_at: Timestamp::now().to_rfc3339(),
            shared: Arc::new(Mutex::new(Shared::default())),
        };
        let at_once = sinks.clone();
        signals::on_exit_print(move |ending| at_once.ending(ending));
        sinks
    }

    fn structured(&self) -> bool {
        matches!(self.format, Format::Json | Format::Yaml)
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What an ending that stops the process at once leaves: the metrics of the batches
    /// committed so far, and stdout's document (returned, for `signals` to print).
    fn ending(&self, ending: &Ending) -> String {
        let (mut summary, metrics) = {
            let shared = self.shared();
            (shared.so_far.clone(), shared.metrics.clone())
        };
        let message = match ending {
            Ending::Signal(signal) => match &mut summary {
                Some(summary) => {
                    summary.stopped_by = Some(Stop::Signal(signals::stop_requested().unwrap_or(*signal)));
                    format!(
                        "stopped at once by a second signal ({}); the batch in progress, if any, is rolled back",
                        Stop::Signal(*signal).name()
                    )
                }
                None => signals::interrupted(*signal).to_string(),
            },
            Ending::GraceOver(signal) => {
                if let Some(summary) = &mut summary {
                    summary.stopped_by = Some(Stop::Signal(*signal));
                }
                ending.message().unwrap_or_default()
            }
            Ending::Failed { .. } => ending.message().unwrap_or_default(),
        };
        if let Some(summary) = &mut summary {
            summary.seconds = self.started.elapsed().as_secs_f64();
        }
        if let Some(metrics) = metrics {
            // Nothing more can be said of a failure here: the process is ending.
            let _ = metrics.write(&self.metrics_of(summary.as_ref(), None, false, ending.exit_code()));
        }
        if !self.structured() {
            return String::new();
        }
        let doc = Failed { summary: summary.as_ref(), error: ErrorMember::new(&message, ending.exit_code()) };
        output::document(self.format, &Stamped { started_at: &self.started_at, doc: &doc }, false)
            .unwrap_or_default()
    }

    /// The document of an ending that has no outcome of the run's own (a command line clap
    /// refused), printed at once.
    fn print(&self, ending: &Ending) -> Result<()> {
        let text = self.ending(ending);
        signals::print_instead(|| {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(Error::stdout)
        })?;
        Ok(())
    }

    /// Renders the outcome to every sink, in this order: the summary line on stderr, the
    /// document on stdout, the metrics file; and returns the run's error, for its `error:`
    /// line and its exit code. A stdout or a metrics file that cannot be written makes a
    /// successful run fail (exit 6); a run that failed already keeps its own error.
    fn render(&self, outcome: Outcome) -> Result<()> {
        let Outcome { summary, backlog, done, error } = outcome;
        match (&done, &summary) {
            (Done::Skipped(reason), _) => output::note(reason),
            (Done::DryRun(_, line), _) => output::status(line),
            (Done::Clean, Some(summary)) => output::status(&summary.line()),
            (Done::Clean, None) => {}
        }
        let skipped = matches!(done, Done::Skipped(_));
        let mut result = error.map_or(Ok(()), Err);
        // Held through both, so that an ending meanwhile renders neither a second time.
        signals::print_instead(|| {
            let printed = self.document(done, summary.as_ref(), result.as_ref().err());
            if let Err(e) = printed
                && result.is_ok()
            {
                result = Err(e);
            }
            let Some(metrics) = self.shared().metrics.take() else { return };
            let exit_code =
                result.as_ref().err().map_or(crate::error::exit::SUCCESS, crate::error::exit_code);
            match metrics.write(&self.metrics_of(summary.as_ref(), backlog, skipped, exit_code)) {
                // A success so far (a closed stdout pipe is one) fails now.
                Err(e) if exit_code == crate::error::exit::SUCCESS => result = Err(e),
                // The run already failed: its error, not this one, decides the exit code.
                Err(e) => output::warn(&crate::error::message(e.as_ref())),
                Ok(()) => {}
            }
        });
        result
    }

    /// stdout's part: the document of a success, in every format; of a failure, in JSON and
    /// YAML only, its `error` member beside the summary of the batches committed.
    fn document(&self, done: Done, summary: Option<&Summary>, error: Option<&anyhow::Error>) -> Result<()> {
        if let Some(error) = error {
            if !self.structured() {
                return Ok(());
            }
            let doc = Failed { summary, error: ErrorMember::of(error) };
            return self.emit(Rendered::doc(doc));
        }
        match done {
            Done::DryRun(rendered, _) => self.emit(*rendered),
            Done::Skipped(reason) => self.emit(Rendered::doc(Skipped { summary, skipped: reason })),
            Done::Clean => self.emit(Rendered::doc(summary)),
        }
    }

    fn emit<D: Serialize>(&self, rendered: Rendered<D>) -> Result<()> {
        let Rendered { doc, tables, plain } = rendered;
        output::emit(
            self.format,
            &Rendered { doc: Stamped { started_at: &self.started_at, doc: &doc }, tables, plain },
        )
    }

    /// The metrics of a run: its batches, or zeroes before the first one.
    fn metrics_of(
        &self,
        summary: Option<&Summary>,
        backlog: Option<(u64, u64)>,
        skipped: bool,
        exit_code: i32,
    ) -> metrics::CleanRun {
        let mut run = metrics::CleanRun {
            seconds: self.started.elapsed().as_secs_f64(),
            exit_code,
            backlog,
            skipped,
            ended: Timestamp::now().micros() as f64 / 1e6,
            ..metrics::CleanRun::default()
        };
        if let Some(summary) = summary {
            run.task_rows_deleted = summary.task_rows_deleted;
            run.asset_rows_deleted = summary.asset_rows_deleted;
            run.batches = summary.batches;
            run.orphan_batches = summary.orphan_batches;
            run.locked_rows_skipped = summary.task_rows_skipped;
            run.seconds = summary.seconds;
            run.interrupted = matches!(summary.stopped_by, Some(Stop::Signal(_)));
            run.limit = summary.stopped_by.filter(|s| !matches!(s, Stop::Signal(_))).map(Stop::name);
        }
        run
    }
}

/// The document of a run that failed: the summary of the batches run so far, if any, with an
/// `error` member.
#[derive(Serialize)]
struct Failed<'a> {
    #[serde(flatten)]
    summary: Option<&'a Summary>,
    error: ErrorMember,
}

/// The run, up to its outcome: an error becomes the outcome's, beside the batches committed
/// before it.
fn clean(global: &GlobalArgs, args: &CleanArgs, sinks: &Sinks) -> Outcome {
    let mut outcome = Outcome { summary: None, backlog: None, done: Done::Clean, error: None };
    outcome.error = clean_into(global, args, sinks, &mut outcome).err();
    outcome
}

/// [`clean`], filling in `outcome` as the run goes.
fn clean_into(global: &GlobalArgs, args: &CleanArgs, sinks: &Sinks, outcome: &mut Outcome) -> Result<()> {
    // Before the metrics file is taken as the run's: when it is the archive, the failed run's
    // metrics must not replace it.
    if let (Some(archive), Some(metrics)) = (&args.archive, &args.metrics_file) {
        crate::fs::refuse_same(("--archive", archive), ("--metrics-file", metrics))?;
    }
    sinks.shared().metrics = args.metrics_file.as_deref().map(MetricsFile::new).transpose()?;
    if let Some(archive) = &args.archive {
        crate::fs::check_append("archive", archive)?;
    }
    super::refuse_api(global, "clean")?;
    let (mut options, progress_every) = options(global, args)?;
    let flag = args.batch_size.map(|size| match size {
        BatchSize::Auto => None,
        BatchSize::Rows(n) => Some(n),
    });
    let mut ctx = Context::load(global, flag.flatten().map(|n| n.to_string()).as_deref())?;
    // An output that is the SQLite database is refused before the database is opened; the
    // metrics of that refusal must not replace the database either.
    let metrics = sinks.shared().metrics.as_ref().map(|m| m.path().to_path_buf());
    if let Some(metrics) = metrics
        && let Err(e) = crate::fs::refuse_database("--metrics-file", &metrics)
    {
        sinks.shared().metrics = None;
        return Err(e);
    }
    if let Some(archive) = &args.archive {
        crate::fs::refuse_database("--archive", archive)?;
    }
    let (configured, batch_time) = (&ctx.settings.state_cleanup_batch_size, args.batch_time.as_deref());
    (options.batch_size, options.batch_time, options.auto_from) =
        ops::clean::batching(flag, configured, duration("--batch-time", batch_time)?)?;
    options.database = ctx.url.redacted().to_string();
    // clean's own first `-v` line names the database, with what the run is about to do.
    ctx.verbose = false;
    if let Some(reason) = ops::clean::skipped(&ctx.settings) {
        // The summary of a run that deleted nothing, with the reason: not a success, so its
        // metrics say `skipped` and leave the last success where it was.
        outcome.summary = Some(Summary::empty(&options));
        outcome.done = Done::Skipped(reason);
        return Ok(());
    }
    // --lock-timeout bounds every lock wait of the run, a dry run's reads included; the
    // server keeps the session through --sleep's pauses.
    let timeouts =
        ctx.timeouts().with_lock(options.lock_timeout).with_pause(options.sleep.unwrap_or_default());
    // A dry run draws no progress bar: its `--verbose` notes go straight to stderr.
    let mut watcher = Watcher { progress: None, every: progress_every, shared: Arc::clone(&sinks.shared) };
    if args.dry_run {
        let mut store = ctx.open_with(Access::ReadOnly, &timeouts)?;
        let found = ops::clean::dry_run(&mut store, &options, args.sample, &mut watcher)?;
        let (rendered, line) = found.rendered(&options, args.sample);
        outcome.done = Done::DryRun(Box::new(rendered), line);
        return Ok(());
    }
    let mut store = ctx.open_with(Access::ReadWrite, &timeouts)?;
    let checked = sinks.shared().metrics.as_ref().map(MetricsFile::check);
    if let Some(Err(e)) = checked {
        // The metrics file is the database: the failed run's metrics must not be written either.
        sinks.shared().metrics = None;
        return Err(e);
    }
    // Counting costs a query, worth it only for someone watching a bar.
    let counts = (progress::stderr_is_terminal(), sinks.shared().metrics.is_some());
    let (summary, backlog, result) = ops::clean::clean(&mut store, &options, counts, &mut watcher)?;
    outcome.summary = Some(summary);
    outcome.backlog = backlog;
    result
}

/// The flags of a run as [`ops::clean::Options`], but for the batching and the database,
/// which the configuration decides; and `--progress-every`. From now on `--max-duration` has
/// its hard deadline.
fn options(global: &GlobalArgs, args: &CleanArgs) -> Result<(Options, Duration)> {
    let cutoff = ops::clean::cutoff(args.before.as_deref())?;
    let lock_timeout = duration("--lock-timeout", Some(&args.lock_timeout))?.unwrap_or_default();
    let progress_every = duration("--progress-every", Some(&args.progress_every))?.unwrap_or_default();
    let max_duration = duration("--max-duration", args.max_duration.as_deref())?;
    let sleep = duration("--sleep", args.sleep.as_deref())?;
    if let Some(max) = max_duration {
        ops::clean::hard_deadline(max, args.max_duration.clone().unwrap_or_default());
    }
    let options = Options {
        cutoff,
        batch_size: 0,
        batch_time: None,
        auto_from: None,
        tasks: !args.orphans_only,
        orphans: !args.no_orphans,
        max_rows: args.max_rows,
        max_duration,
        sleep,
        verbose: global.verbose,
        lock_timeout,
        archive: args.archive.clone(),
        database: String::new(),
        deleting: describe(args),
    };
    Ok((options, progress_every))
}

fn duration(flag: &str, text: Option<&str>) -> Result<Option<Duration>> {
    text.map(|t| time::parse_duration(t).with_context(|| Error::Usage(format!("invalid {flag}")))).transpose()
}

/// The progress of a run on stderr, and the batches committed so far, for an ending that
/// stops the process at once in the middle of a batch (which the database then rolls back).
struct Watcher {
    /// Drawn from the start of the run, with its total when at a terminal.
    progress: Option<Progress>,
    every: Duration,
    shared: Arc<Mutex<Shared>>,
}

impl Watch for Watcher {
    fn batch(&mut self, summary: &Summary, _deleted: bool) {
        if let Some(progress) = &mut self.progress {
            progress.update(
                summary.task_rows_deleted + summary.asset_rows_deleted,
                summary.batches + summary.orphan_batches,
            );
        }
        self.shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner).so_far = Some(summary.clone());
    }

    fn detail(&mut self, line: &str) {
        match &mut self.progress {
            Some(progress) => progress.detail(line),
            None => output::note(line),
        }
    }

    fn wants_walk(&self) -> bool {
        self.progress.as_ref().is_some_and(Progress::wants_walk)
    }

    fn walked(&mut self, share: f64) {
        if let Some(progress) = &mut self.progress {
            progress.walked(share);
        }
    }

    fn start(&mut self, total: Option<u64>) {
        self.progress = Some(Progress::new(total, self.every));
    }

    fn finish(&mut self) {
        if let Some(progress) = &mut self.progress {
            progress.finish();
        }
    }
}

/// What a clean with a custom `[state_store] backend` prints: the summary of a run that did
/// nothing, and the reason.
#[derive(Serialize)]
struct Skipped<'a> {
    #[serde(flatten)]
    summary: Option<&'a Summary>,
    skipped: String,
}

/// What a run deletes and what bounds it, as given on the command line, for `--verbose`.
fn describe(args: &CleanArgs) -> String {
    let mut text = match (args.orphans_only, args.no_orphans) {
        (true, _) => "orphaned asset rows only",
        (_, true) => "expired task rows only",
        _ => "expired task rows, then orphaned asset rows",
    }
    .to_string();
    let bounds = [
        ("--max-rows", args.max_rows.map(|n| n.to_string())),
        ("--max-duration", args.max_duration.clone()),
        ("--sleep", args.sleep.clone()),
        ("--archive", args.archive.as_ref().map(|p| p.display().to_string())),
    ];
    for (flag, value) in bounds.into_iter().filter_map(|(flag, value)| Some((flag, value?))) {
        text.push_str(&format!(", {flag} {value}"));
    }
    text
}
