//! Progress of a long command, on stderr. `clean`: at a terminal, an indicatif bar (rows,
//! rate, ETA) redrawn in place; otherwise a plain line every few seconds, so a cron log shows a
//! run is alive. `--verbose` detail lines go through here too, so that they never land inside
//! the bar. `import` ([`FileProgress`]) and `export` ([`RowProgress`]) draw the same kind of
//! bar at a terminal and print nothing elsewhere: their runs are not scheduled, and a pipe's
//! reader wants their summary line alone. With `-q` there is no progress at all.

use std::fs::File;
use std::io::{Seek, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressFinish, ProgressState, ProgressStyle};

/// The bar when the rows to delete are known: `clean [####....] 50/200 rows  25% 10 rows/s ETA 15s`.
const BAR: &str = "clean [{bar:30}] {pos}/{len} rows {percent:>3}% {rate} ETA {eta}";
/// Without a total: `clean: 50 rows deleted, 10 rows/s`.
const COUNT: &str = "clean: {pos} rows deleted, {rate}";

pub(crate) struct Progress {
    /// At a terminal: the bar, which indicatif redraws at most 20 times a second.
    bar: Option<ProgressBar>,
    /// Between plain lines; `None` (`--progress-every 0`) prints none.
    every: Option<Duration>,
    started: Instant,
    last: Instant,
    /// The share of the table walked so far (of its ids, or of its dag runs), for plain lines.
    walked: Option<f64>,
    /// Where the estimate starts: the share walked, the rows deleted and the time when the
    /// first batch that deleted rows ended (see [`estimate`]).
    basis: Option<Basis>,
}

/// A point of the walk: the share of the table walked, the rows deleted and the seconds
/// since the start.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Basis {
    share: f64,
    done: u64,
    elapsed: f64,
}

/// The rows a run deletes in all and the seconds it has left, from the walk since `basis` (the
/// end of the first batch that deleted rows) to `now`: the expired rows per share of the
/// table and the time per share in that part, carried over the part still to walk.
/// Counted from the start instead, a run that goes on where an earlier one stopped takes the
/// range the earlier one emptied for one with no expired rows (observed: `about 37411 in all
/// … ETA 2s` with 114,748 rows and about 10 s left). The first batch itself is left out, since
/// it covers the ids from the lowest, whatever an earlier run emptied there. `None` until
/// the walk has gone past it.
fn estimate(basis: Option<Basis>, now: Basis) -> Option<(f64, f64)> {
    let basis = basis?;
    let walked = now.share - basis.share;
    if walked <= 0.0 || now.elapsed <= basis.elapsed {
        return None;
    }
    let left = 1.0 - now.share;
    #[allow(clippy::cast_precision_loss)]
    let rows = now.done.saturating_sub(basis.done) as f64;
    #[allow(clippy::cast_precision_loss)]
    let total = now.done as f64 + rows / walked * left;
    Some((total, (now.elapsed - basis.elapsed) / walked * left))
}

impl Progress {
    /// `total` is the number of rows expected (known at a terminal only: counting costs a
    /// query). `every` is the interval between plain lines, zero for none; it does not apply
    /// at a terminal, where the bar is drawn instead.
    pub(crate) fn new(total: Option<u64>, every: Duration) -> Progress {
        let now = Instant::now();
        let bar = bar_drawn().then(|| {
            let (bar, template) = match total {
                Some(total) if total > 0 => (ProgressBar::new(total), BAR),
                _ => (ProgressBar::no_length(), COUNT),
            };
            bar.with_style(style(template))
        });
        let every = (!every.is_zero() && !crate::output::quiet()).then_some(every);
        Progress { bar, every, started: now, last: now, walked: None, basis: None }
    }

    /// Whether plain lines are printed: they say how far the run has walked the table.
    pub(crate) fn wants_walk(&self) -> bool {
        self.bar.is_none() && self.every.is_some()
    }

    /// The share of the table the run has walked (0 to 1).
    pub(crate) fn walked(&mut self, share: f64) {
        self.walked = Some(share.clamp(0.0, 1.0));
    }

    /// Reports `done` rows deleted in `batches` batches so far.
    pub(crate) fn update(&mut self, done: u64, batches: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            return;
        }
        let Some(every) = self.every else { return };
        let now = Instant::now();
        let elapsed = now.duration_since(self.started).as_secs_f64();
        let point = self.walked.map(|share| Basis { share, done, elapsed });
        if self.basis.is_none() && done > 0 {
            self.basis = point;
        }
        if now.duration_since(self.last) < every {
            return;
        }
        self.last = now;
        #[allow(clippy::cast_precision_loss)]
        let rate = if elapsed > 0.0 { done as f64 / elapsed } else { 0.0 };
        // How far: the walk's position in the table, which each batch moves forward; the
        // time a run takes follows it. (A count of the expired rows left would say it in rows,
        // but on PostgreSQL it visits every row the run has deleted: as long as the DELETEs.)
        let (walked, eta) = match point {
            Some(point) => {
                let share = format!("{:.0}% of the table walked", (point.share * 100.0).floor());
                match estimate(self.basis, point) {
                    Some((total, left)) => {
                        (format!(", {share} (about {total:.0} in all)"), format!(", ETA {left:.0}s"))
                    }
                    None => (format!(", {share}"), ", ETA not known yet".to_string()),
                }
            }
            None => (String::new(), String::new()),
        };
        let _ = writeln!(
            std::io::stderr().lock(),
            "clean: progress: {done} expired task row(s) deleted in {batches} batch(es){walked}, {rate:.0} rows/s, {elapsed:.0}s{eta}"
        );
    }

    /// Clears the bar, so the summary line starts on a clean line.
    pub(crate) fn finish(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    /// A line of detail (`--verbose`), on a line of its own: the bar, if drawn, is cleared
    /// while it is printed and drawn again after it.
    pub(crate) fn detail(&mut self, line: &str) {
        // stderr is unbuffered: each line is written whole, at once.
        let print = || {
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        };
        if let Some(bar) = &self.bar { bar.suspend(print) } else { print() }
    }
}

/// A pass over a file of known size: `import: checking [####....] 12.00 MiB/96.00 MiB  12% ETA 8s`.
const FILE_BAR: &str = "{prefix} [{bar:30}] {bytes}/{total_bytes} {percent:>3}% ETA {eta}";
/// A pass over a file of unknown size (a FIFO): `import: checking 12.00 MiB`.
const FILE_COUNT: &str = "{prefix} {bytes}";
/// Rows written, the total unknown: `export: 12000 rows, 3000 rows/s`.
const ROWS: &str = "{prefix}: {pos} rows, {rate}";

/// How often the bar of a file reads the file's offset.
const FILE_TICK: Duration = Duration::from_millis(100);

/// The bar of a file read in passes by code that knows nothing of progress (the import
/// engine, which opens the file itself for each pass). Each file handed over through
/// [`FileProgress::opened`] is kept as a duplicate, which shares the reader's offset: the bar
/// follows that offset, read by a thread of its own, so the engine needs no hook. At a
/// terminal only; elsewhere it does nothing.
pub(crate) struct FileProgress {
    bar: Option<ProgressBar>,
    /// What each pass is doing, in order (`checking`, `writing`); the last is kept for any
    /// further pass.
    passes: &'static [&'static str],
    command: &'static str,
    opened: AtomicUsize,
    watched: Mutex<Option<File>>,
}

impl FileProgress {
    pub(crate) fn new(command: &'static str, passes: &'static [&'static str]) -> FileProgress {
        let bar = bar_drawn().then(|| {
            ProgressBar::no_length().with_style(style(FILE_COUNT)).with_finish(ProgressFinish::AndClear)
        });
        FileProgress { bar, passes, command, opened: AtomicUsize::new(0), watched: Mutex::new(None) }
    }

    /// Takes the file a pass is about to read from its first byte, and returns it: the bar
    /// starts over, labelled with the pass.
    pub(crate) fn opened(&self, file: File) -> std::io::Result<File> {
        let pass = self.opened.fetch_add(1, Ordering::SeqCst);
        let Some(bar) = &self.bar else { return Ok(file) };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len > 0 {
            bar.set_style(style(FILE_BAR));
            bar.set_length(len);
        }
        bar.set_prefix(pass_label(self.command, self.passes, pass));
        bar.reset();
        let watched = file.try_clone()?;
        if let Ok(mut slot) = self.watched.lock() {
            *slot = Some(watched);
        }
        Ok(file)
    }

    /// Runs `work`, the bar redrawn from the file's offset meanwhile, then cleared.
    pub(crate) fn during<T>(&self, work: impl FnOnce() -> T) -> T {
        let Some(bar) = &self.bar else { return work() };
        let (stop, stopped) = mpsc::channel::<()>();
        let result = std::thread::scope(|scope| {
            scope.spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(FILE_TICK) {
                    if let Some(at) = self.position() {
                        bar.set_position(at);
                    }
                }
            });
            let result = work();
            drop(stop);
            result
        });
        bar.finish_and_clear();
        result
    }

    /// Prints a line (a warning) without it landing inside the bar.
    pub(crate) fn suspend(&self, print: impl FnOnce()) {
        if let Some(bar) = &self.bar { bar.suspend(print) } else { print() }
    }

    /// The offset of the file being read, shared with the reader's handle.
    fn position(&self) -> Option<u64> {
        let slot = self.watched.lock().ok()?;
        let mut file = slot.as_ref()?;
        file.stream_position().ok()
    }
}

/// `import: checking` for the first pass, `import: writing` for the second.
fn pass_label(command: &str, passes: &[&str], pass: usize) -> String {
    let doing = passes.get(pass).or(passes.last()).copied().unwrap_or("reading");
    format!("{command}: {doing}")
}

/// A count of rows written, at a terminal only.
pub(crate) struct RowProgress {
    bar: Option<ProgressBar>,
}

impl RowProgress {
    /// `shown`: whether the bar may be drawn at all (not when the rows themselves go to the
    /// terminal, where the bar would be drawn over them).
    pub(crate) fn new(command: &'static str, shown: bool) -> RowProgress {
        let bar = (shown && bar_drawn()).then(|| {
            ProgressBar::no_length()
                .with_style(style(ROWS))
                .with_prefix(command)
                .with_finish(ProgressFinish::AndClear)
        });
        RowProgress { bar }
    }

    pub(crate) fn update(&self, rows: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(rows);
        }
    }

    /// Clears the bar, so the summary line starts on a clean line.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// A bar is drawn at a terminal, unless `-q` turned progress off with the status lines.
fn bar_drawn() -> bool {
    stderr_is_terminal() && !crate::output::quiet()
}

pub(crate) fn stderr_is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("#.")
        .with_key("rate", |state: &ProgressState, out: &mut dyn std::fmt::Write| {
            let _ = write!(out, "{:.0} rows/s", state.per_sec());
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_templates_are_indicatif_templates() {
        for template in [BAR, COUNT, FILE_BAR, FILE_COUNT, ROWS] {
            assert!(ProgressStyle::with_template(template).is_ok(), "{template}");
        }
    }

    /// The estimate is taken from the walk after the first batch that deleted rows: on a run
    /// that goes on where an earlier one stopped (the first 60% of the ids emptied of expired
    /// rows, 1,000 expired rows per 10% after it), the first batch walks to 62% and the total
    /// comes out right; counted from the start, it would say a third of it.
    #[test]
    fn the_estimate_leaves_out_the_range_an_earlier_run_emptied() {
        let first = Basis { share: 0.62, done: 200, elapsed: 1.0 };
        assert_eq!(estimate(None, first), None, "nothing walked since the first batch");
        assert_eq!(estimate(Some(first), first), None);
        let now = Basis { share: 0.7, done: 1_000, elapsed: 2.0 };
        let (total, left) = estimate(Some(first), now).unwrap();
        assert!((total - 4_000.0).abs() < 1.0, "{total}");
        assert!((left - 3.75).abs() < 1e-9, "{left}");
        // From the start, the old way: 1,000 / 0.7.
        assert!(1_000.0 / 0.7 < total / 2.0);
    }

    #[test]
    fn each_pass_is_named_and_any_further_one_as_the_last() {
        let passes = &["checking", "writing"];
        assert_eq!(pass_label("import", passes, 0), "import: checking");
        assert_eq!(pass_label("import", passes, 1), "import: writing");
        assert_eq!(pass_label("import", passes, 2), "import: writing");
        assert_eq!(pass_label("import", &[], 0), "import: reading");
    }

    /// The bar follows the reader without a hook in it: the handle kept shares the offset of
    /// the one handed over.
    #[test]
    fn the_watched_handle_follows_the_readers_offset() {
        use std::io::Read;
        let dir = std::env::temp_dir().join(format!("state-store-progress-{}", std::process::id()));
        std::fs::write(&dir, b"0123456789").unwrap();
        let progress = FileProgress {
            bar: None,
            passes: &["checking"],
            command: "import",
            opened: AtomicUsize::new(0),
            watched: Mutex::new(None),
        };
        let mut file = File::open(&dir).unwrap();
        *progress.watched.lock().unwrap() = Some(file.try_clone().unwrap());
        let mut four = [0_u8; 4];
        file.read_exact(&mut four).unwrap();
        assert_eq!(progress.position(), Some(4));
        std::fs::remove_file(&dir).unwrap();
    }
}
