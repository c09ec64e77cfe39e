//! Progress of a long `clean`, on stderr: at a terminal, an indicatif bar (rows, rate, ETA)
//! redrawn in place; otherwise a plain line every few seconds, so a cron log shows a run is
//! alive. `--verbose` detail lines go through here too, so that they never land inside the bar.

use std::io::Write;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressState, ProgressStyle};

/// The bar when the rows to delete are known: `clean [####....] 50/200 rows  25% 10 rows/s ETA 15s`.
const BAR: &str = "clean [{bar:30}] {pos}/{len} rows {percent:>3}% {rate} ETA {eta}";
/// Without a total: `clean: 50 rows deleted, 10 rows/s`.
const COUNT: &str = "clean: {pos} rows deleted, {rate}";

pub(crate) struct Progress {
    /// At a terminal: the bar, which indicatif redraws at most 20 times a second.
    bar: Option<ProgressBar>,
    total: Option<u64>,
    /// Between plain lines; `None` (`--progress-every 0`) prints none.
    every: Option<Duration>,
    started: Instant,
    last: Instant,
}

impl Progress {
    /// `total` is the number of rows expected (known at a terminal only: counting costs a
    /// query). `every` is the interval between plain lines, zero for none; it does not apply
    /// at a terminal, where the bar is drawn instead.
    pub(crate) fn new(total: Option<u64>, every: Duration) -> Progress {
        let now = Instant::now();
        let bar = stderr_is_terminal().then(|| {
            let (bar, template) = match total {
                Some(total) if total > 0 => (ProgressBar::new(total), BAR),
                _ => (ProgressBar::no_length(), COUNT),
            };
            bar.with_style(style(template))
        });
        Progress { bar, total, every: (!every.is_zero()).then_some(every), started: now, last: now }
    }

    /// Reports `done` rows deleted in `batches` batches so far.
    pub(crate) fn update(&mut self, done: u64, batches: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            return;
        }
        let Some(every) = self.every else { return };
        let now = Instant::now();
        if now.duration_since(self.last) < every {
            return;
        }
        self.last = now;
        let elapsed = now.duration_since(self.started).as_secs_f64();
        #[allow(clippy::cast_precision_loss)]
        let rate = if elapsed > 0.0 { done as f64 / elapsed } else { 0.0 };
        let of = self.total.map(|t| format!(" of {t}")).unwrap_or_default();
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "clean: progress: {done}{of} expired task row(s) deleted in {batches} batch(es), {rate:.0} rows/s, {elapsed:.0}s"
        );
        let _ = err.flush();
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
        let print = || {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{line}");
            let _ = err.flush();
        };
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }
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
        for template in [BAR, COUNT] {
            assert!(ProgressStyle::with_template(template).is_ok(), "{template}");
        }
    }
}
