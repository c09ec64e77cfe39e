//! Progress of a long `clean`, on stderr: a bar redrawn in place at a terminal (rows, rate,
//! ETA), and a plain line every few seconds otherwise, so a cron log shows a run is alive.
//! `--verbose` detail lines go through here too, so that they never land inside the bar.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// At a terminal, redraw no more often than this.
const REDRAW: Duration = Duration::from_millis(100);
const BAR_WIDTH: usize = 30;

pub(crate) struct Progress {
    terminal: bool,
    total: Option<u64>,
    /// Between plain lines; `None` (`--progress-every 0`) prints none.
    every: Option<Duration>,
    started: Instant,
    last: Instant,
    drawn: bool,
}

impl Progress {
    /// `total` is the number of rows expected (known at a terminal only: counting costs a
    /// query). `every` is the interval between plain lines, zero for none; it does not apply
    /// at a terminal, where the bar is drawn instead.
    pub(crate) fn new(total: Option<u64>, every: Duration) -> Progress {
        let now = Instant::now();
        let every = (!every.is_zero()).then_some(every);
        Progress { terminal: stderr_is_terminal(), total, every, started: now, last: now, drawn: false }
    }

    /// Reports `done` rows deleted in `batches` batches so far.
    pub(crate) fn update(&mut self, done: u64, batches: u64) {
        let now = Instant::now();
        let due = if self.terminal {
            REDRAW
        } else {
            match self.every {
                Some(every) => every,
                None => return,
            }
        };
        if now.duration_since(self.last) < due {
            return;
        }
        self.last = now;
        let elapsed = now.duration_since(self.started).as_secs_f64();
        #[allow(clippy::cast_precision_loss)]
        let rate = if elapsed > 0.0 { done as f64 / elapsed } else { 0.0 };
        let mut err = std::io::stderr().lock();
        if self.terminal {
            let _ = write!(err, "\r\x1b[2K{}", bar(done, self.total, rate));
            self.drawn = true;
        } else {
            let of = self.total.map(|t| format!(" of {t}")).unwrap_or_default();
            let _ = writeln!(
                err,
                "clean: progress: {done}{of} expired task row(s) deleted in {batches} batch(es), {rate:.0} rows/s, {elapsed:.0}s"
            );
        }
        let _ = err.flush();
    }

    /// Clears the bar, so the summary line starts on a clean line.
    pub(crate) fn finish(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.drawn = false;
        }
    }

    /// A line of detail (`--verbose`), on a line of its own: the bar, if drawn, is cleared
    /// first and redrawn by the next update.
    pub(crate) fn detail(&mut self, line: &str) {
        self.finish();
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
        let _ = err.flush();
    }
}

pub(crate) fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn bar(done: u64, total: Option<u64>, rate: f64) -> String {
    match total {
        Some(total) if total > 0 => {
            let share = (done as f64 / total as f64).clamp(0.0, 1.0);
            let filled = (share * BAR_WIDTH as f64).round() as usize;
            let eta = if rate > 0.0 {
                format!("{:.0}s", total.saturating_sub(done) as f64 / rate)
            } else {
                "?".into()
            };
            format!(
                "clean [{}{}] {done}/{total} rows {:>3.0}% {rate:.0} rows/s ETA {eta}",
                "#".repeat(filled),
                ".".repeat(BAR_WIDTH - filled),
                share * 100.0
            )
        }
        _ => format!("clean: {done} rows deleted, {rate:.0} rows/s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_shows_share_rate_and_eta() {
        assert_eq!(
            bar(50, Some(200), 10.0),
            "clean [########......................] 50/200 rows  25% 10 rows/s ETA 15s"
        );
        assert_eq!(bar(0, None, 0.0), "clean: 0 rows deleted, 0 rows/s");
        assert!(bar(300, Some(200), 1.0).contains("[##############################] 300/200 rows 100%"));
    }
}
