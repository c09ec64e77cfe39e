//! SIGINT and SIGTERM.
//!
//! Most commands are one short transaction: a signal ends the process at once with 130/143,
//! and the database discards the unfinished transaction. `clean` runs for minutes, so while it
//! runs a signal only raises a flag; the current batch commits or rolls back as a whole, the
//! summary is printed with `interrupted: true`, and a second signal ends the process at once.
//! A process ended at once still prints the one document `clean -o json` promises, if one is
//! registered (see [`on_exit_print`]).

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

static GRACEFUL: AtomicBool = AtomicBool::new(false);
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// Builds, from the signal's number, what stdout gets when a signal ends the process at once.
type LastWords = Box<dyn Fn(i32) -> String + Send>;
static LAST_WORDS: Mutex<Option<LastWords>> = Mutex::new(None);

/// Starts the thread that receives SIGINT/SIGTERM. Without it the defaults apply (the
/// process dies by the signal), which is still safe; so a failure here is not fatal.
pub(crate) fn install() {
    let Ok(mut signals) = Signals::new([SIGINT, SIGTERM]) else {
        return;
    };
    std::thread::spawn(move || {
        for signal in signals.forever() {
            let first = RECEIVED.swap(signal, Ordering::SeqCst) == 0;
            if !(GRACEFUL.load(Ordering::SeqCst) && first) {
                // Held until the process ends: whoever prints the document holds this lock, so
                // it is printed once, whole, by the signal or by the command.
                let words = LAST_WORDS.lock();
                if let Ok(words) = &words
                    && let Some(words) = words.as_ref()
                {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(words(signal).as_bytes());
                    let _ = out.flush();
                }
                // Temporary files exist by name only while being written: none may outlive
                // the process.
                crate::fs::remove_temporaries();
                std::process::exit(128 + signal);
            }
        }
    });
}

/// What to print on stdout if a signal ends the process at once from now on (replacing what
/// was registered before).
pub(crate) fn on_exit_print(words: impl Fn(i32) -> String + Send + 'static) {
    if let Ok(mut last) = LAST_WORDS.lock() {
        *last = Some(Box::new(words));
    }
}

/// Prints the command's own document with `print` instead of the registered one: a signal
/// that ends the process meanwhile or later prints nothing more.
pub(crate) fn print_instead<T>(print: impl FnOnce() -> T) -> T {
    let mut last = LAST_WORDS.lock();
    if let Ok(last) = &mut last {
        last.take();
    }
    print()
}

/// From now on a first signal is only recorded, for [`stop_requested`] to report.
pub(crate) fn defer() {
    GRACEFUL.store(true, Ordering::SeqCst);
}

/// Sleeps for `pause`, returning early when a signal arrives, so `--sleep` never delays a
/// stop by more than a few milliseconds.
pub(crate) fn sleep(pause: std::time::Duration) {
    let until = std::time::Instant::now() + pause;
    while stop_requested().is_none() {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(std::time::Duration::from_millis(20)));
    }
}

/// The signal received since [`defer`], if any.
pub(crate) fn stop_requested() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}
