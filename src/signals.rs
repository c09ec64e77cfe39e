//! Signals, and every other way the process is ended from outside its main thread.
//!
//! Every signal whose default action ends the process and that can be caught is handled here,
//! one set for every command ([`ENDING`]): SIGHUP (a dropped ssh session), SIGINT (Ctrl-C),
//! SIGQUIT (Ctrl-\), SIGTERM, and SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU,
//! SIGIO and SIGPWR, which nothing should send but which would otherwise end a clean with no
//! summary, no metrics file and its lock file left. Each is answered as SIGTERM is, with
//! exit code 128 + its number. SIGXFSZ is caught and does nothing, so that a write past a
//! file size limit fails with `EFBIG` as a full disk does (exit 6, the file named) instead
//! of killing the process; SIGPIPE is ignored (Rust's runtime does it before `main`), so a
//! closed pipe is a write error too. Left to the kernel: SIGKILL and SIGSTOP, which cannot be
//! caught; SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP and SIGSYS, the process's own
//! faults, whose core is what a report needs; and the real-time signals, which only a
//! process that asks for them is sent.
//!
//! Most commands are one short transaction: a signal ends the process at once with 128 + its
//! number (130 for SIGINT, 143 for SIGTERM), and the database discards the unfinished
//! transaction. `clean` runs for minutes, so while it
//! runs a signal only raises a flag; the current batch commits or rolls back as a whole, the
//! summary is printed with `interrupted: true`, and a second signal ends the process at once.
//! A first signal that the run does not answer within [`SIGNAL_GRACE`] (a batch blocked on a
//! database that does not answer, an `open` of a FIFO) ends it at once too: a blocked system
//! call is restarted after the handler, so only a timer can keep that promise.
//!
//! The same ending serves the other watchdogs: a database call that gets no answer within its
//! bound ([`Stall`]), and `clean --max-duration`'s hard deadline ([`after`]). A process ended
//! at once still prints the one document `clean -o json` promises, if one is registered (see
//! [`on_exit_print`]), and kills the process group of a `_cmd` command still running (see
//! [`child_started`]), so that nothing the tool started outlives it. What the command would
//! say once such an ending has begun is not said: an error the ending itself caused (the
//! `_cmd` it killed) must not end the process first, with its own exit code and document
//! (see [`yield_to_ending`]).

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use signal_hook::consts::{
    SIGALRM, SIGHUP, SIGINT, SIGIO, SIGPROF, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGVTALRM, SIGXCPU, SIGXFSZ,
};
use signal_hook::iterator::Signals;

/// Not among signal-hook's constants; rustix has every signal's number.
const SIGPWR: i32 = rustix::process::Signal::POWER.as_raw();

/// Each signal named with its constant's own name.
macro_rules! named {
    ($($signal:ident),*) => { [$(($signal, stringify!($signal))),*] };
}

/// The signals that would end the process, each answered as SIGTERM is (see the module's
/// paragraph for those left out, and why), with the name every report gives it.
const ENDING: [(i32, &str); 12] = named![
    SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU, SIGIO, SIGPWR
];

/// How long a first signal may wait for a clean to stop on its own, after which the process
/// ends at once. A responsive clean stops well within it: its batches are bounded, and its
/// sleeps end early on a signal.
pub(crate) const SIGNAL_GRACE: Duration = Duration::from_secs(10);

static GRACEFUL: AtomicBool = AtomicBool::new(false);
static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// Set once [`end_now`] has begun: the process is ending, with the ending's code and words.
static ENDING_NOW: AtomicBool = AtomicBool::new(false);
/// The process group of the `_cmd` command running now (0: none).
static CHILD_GROUP: AtomicI32 = AtomicI32::new(0);

/// Why the process ends at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ending {
    /// A signal, by number: a second one, or a first one outside a clean's run.
    Signal(i32),
    /// A first signal the run did not answer within [`SIGNAL_GRACE`].
    GraceOver(i32),
    /// A watchdog's verdict: the `error:` line's text and the exit code.
    Failed { message: String, exit_code: i32 },
}

impl Ending {
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Ending::Signal(signal) | Ending::GraceOver(signal) => crate::error::exit::by_signal(*signal),
            Ending::Failed { exit_code, .. } => *exit_code,
        }
    }

    /// The `error:` line's text, when the ending has one (an ending by a signal has none).
    pub(crate) fn message(&self) -> Option<String> {
        match self {
            Ending::Signal(_) => None,
            Ending::GraceOver(signal) => Some(format!(
                "{} was not answered within {} s (the run is blocked): stopped at once; the batch in \
                 progress, if any, is rolled back",
                signal_name(*signal),
                SIGNAL_GRACE.as_secs()
            )),
            Ending::Failed { message, .. } => Some(message.clone()),
        }
    }
}

/// `SIGTERM`, `SIGHUP`, `SIGPWR`, …: the name of a signal of [`ENDING`] (only those end a
/// run); `a signal` for any other number.
pub(crate) fn signal_name(signal: i32) -> &'static str {
    ENDING.iter().find(|(number, _)| *number == signal).map_or("a signal", |(_, name)| name)
}

/// The error of a command a signal stopped ("stopped by SIGTERM", exit 128 + its number).
pub(crate) fn interrupted(signal: i32) -> crate::error::Error {
    crate::error::Error::Interrupted { signal, name: signal_name(signal) }
}

/// What puts the terminal back as it was (its echo, after a password prompt), run when the
/// process ends at once meanwhile.
type Restore = Box<dyn FnOnce() + Send>;
static RESTORE: Mutex<Option<Restore>> = Mutex::new(None);

/// Runs `restore` if the process ends at once (Ctrl-C at a prompt) before [`restored`].
pub(crate) fn on_exit_restore(restore: impl FnOnce() + Send + 'static) {
    if let Ok(mut slot) = RESTORE.lock() {
        *slot = Some(Box::new(restore));
    }
}

/// The terminal was put back by its owner: nothing is left to restore.
pub(crate) fn restored() {
    if let Ok(mut slot) = RESTORE.lock() {
        slot.take();
    }
}

/// Builds, from the ending, what stdout gets when the process ends at once.
type LastWords = Box<dyn Fn(&Ending) -> String + Send>;
static LAST_WORDS: Mutex<Option<LastWords>> = Mutex::new(None);

/// Starts the thread that receives the signals of [`ENDING`] (and SIGXFSZ, to let it pass).
/// Without it the defaults apply (the process dies by the signal), which is still safe; so a
/// failure here is not fatal.
pub(crate) fn install() {
    let Ok(mut signals) = Signals::new(ENDING.iter().map(|(signal, _)| *signal).chain([SIGXFSZ])) else {
        return;
    };
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if signal == SIGXFSZ {
                // Caught only so that the write past the limit fails (EFBIG) instead.
                continue;
            }
            let first = RECEIVED.swap(signal, Ordering::SeqCst) == 0;
            if GRACEFUL.load(Ordering::SeqCst) && first {
                after(SIGNAL_GRACE, move || Ending::GraceOver(signal));
            } else {
                end_now(&Ending::Signal(signal));
            }
        }
    });
}

/// How long the last words of a process ended at once (the terminal put back, the document,
/// the `error:` line) may take before it ends without the rest of them.
const LAST_WORDS_PATIENCE: Duration = Duration::from_secs(3);

/// Ends the process now: kills a running `_cmd` command's process group, prints the
/// registered document on stdout and the ending's `error:` line on stderr, and exits.
///
/// Any of those writes may block for good: a stdout or stderr that is a pipe nobody reads, or
/// the lock of a stream whose writer is blocked so (a clean whose `--verbose` lines filled
/// the pipe). So they are made on a thread of their own, which gets [`LAST_WORDS_PATIENCE`];
/// the process ends then whatever it is blocked on, without what was not written.
pub(crate) fn end_now(ending: &Ending) -> ! {
    // Before the kill: whatever fails because of it waits for this ending (yield_to_ending).
    ENDING_NOW.store(true, Ordering::SeqCst);
    kill_child_group();
    let (said, code) = (ending.clone(), ending.exit_code());
    let (done, written) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        last_words(&said);
        let _ = done.send(());
    });
    let _ = written.recv_timeout(LAST_WORDS_PATIENCE);
    // Temporary files exist by name only while being written: none may outlive the process.
    crate::fs::remove_temporaries();
    std::process::exit(code);
}

/// The terminal put back, the registered document on stdout, the `error:` line on stderr.
fn last_words(ending: &Ending) {
    if let Some(restore) = lock_within(&RESTORE, Duration::from_secs(1)).and_then(|mut r| r.take()) {
        restore();
    }
    // Held until the process ends: whoever prints the document holds this lock, so it is
    // printed once, whole, by the ending or by the command. A command blocked while it prints
    // its own (a stdout nobody reads) must not block the ending too: after a short wait it
    // goes without.
    let words = lock_within(&LAST_WORDS, Duration::from_secs(1));
    if let Some(words) = &words
        && let Some(words) = words.as_ref()
    {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(words(ending).as_bytes());
        let _ = out.flush();
    }
    if let Some(message) = ending.message() {
        crate::output::note(&format!("error: {message}"));
    }
    // Held until the process ends, so that the command prints no document of its own.
    if let Some(words) = words {
        std::mem::forget(words);
    }
}

fn lock_within<T>(mutex: &Mutex<T>, patience: Duration) -> Option<std::sync::MutexGuard<'_, T>> {
    let until = Instant::now() + patience;
    loop {
        match mutex.try_lock() {
            Ok(guard) => return Some(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => return Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(std::sync::TryLockError::WouldBlock) => return None,
        }
    }
}

/// Ends the process with `ending()` once `delay` has passed, unless it has ended by then.
pub(crate) fn after(delay: Duration, ending: impl FnOnce() -> Ending + Send + 'static) {
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        end_now(&ending());
    });
}

/// What to print on stdout if the process ends at once from now on (replacing what was
/// registered before).
pub(crate) fn on_exit_print(words: impl Fn(&Ending) -> String + Send + 'static) {
    if let Ok(mut last) = LAST_WORDS.lock() {
        *last = Some(Box::new(words));
    }
}

/// Prints the command's own document with `print` instead of the registered one: an ending
/// meanwhile or later prints nothing more.
pub(crate) fn print_instead<T>(print: impl FnOnce() -> T) -> T {
    yield_to_ending();
    let mut last = LAST_WORDS.lock();
    if let Ok(last) = &mut last {
        last.take();
    }
    print()
}

/// Waits, for as long as the process lives, once an ending at once has begun ([`end_now`]
/// exits within its patience): the command's own outcome (its document, its `error:` line,
/// its exit code) would otherwise race the ending's, and an error the ending caused, such as
/// a `_cmd` command it killed, could end the process first. Returns at once otherwise.
pub(crate) fn yield_to_ending() {
    while ENDING_NOW.load(Ordering::SeqCst) {
        std::thread::park();
    }
}

/// From now on a first signal is only recorded, for [`stop_requested`] to report.
pub(crate) fn defer() {
    GRACEFUL.store(true, Ordering::SeqCst);
}

/// Sleeps for `pause`, returning early when a signal arrives, so `--sleep` never delays a
/// stop by more than a few milliseconds.
pub(crate) fn sleep(pause: Duration) {
    let until = Instant::now() + pause;
    while stop_requested().is_none() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(20)));
    }
}

/// The signal received since [`defer`], if any.
pub(crate) fn stop_requested() -> Option<i32> {
    Some(RECEIVED.load(Ordering::SeqCst)).filter(|signal| *signal != 0)
}

/// Records the process group of a `_cmd` command just started (its own group, `process_group(0)`),
/// so that an ending kills it with everything it started.
pub(crate) fn child_started(pid: u32) {
    CHILD_GROUP.store(i32::try_from(pid).unwrap_or(0), Ordering::SeqCst);
}

/// Forgets the process group of the `_cmd` command `pid` started: it is over, or is about to
/// be killed by its runner.
pub(crate) fn child_ended(pid: u32) {
    let group = i32::try_from(pid).unwrap_or(0);
    let _ = CHILD_GROUP.compare_exchange(group, 0, Ordering::SeqCst, Ordering::SeqCst);
}

/// Kills the recorded `_cmd` process group, if any, and forgets it.
fn kill_child_group() {
    crate::config::kill_group(u32::try_from(CHILD_GROUP.swap(0, Ordering::SeqCst)).unwrap_or(0));
}

/// The watchdog of database calls: while a [`StallGuard`] is held, a call that has not
/// returned within its bound ends the process with exit 4 and the guard's message. It is for
/// drivers that cannot bound a read themselves (the PostgreSQL driver has no socket timeout,
/// and keepalives do not notice a peer whose kernel still acknowledges, such as a proxy that
/// stopped forwarding); one thread serves every call.
pub(crate) struct Stall;

struct Armed {
    until: Instant,
    bound: Duration,
    message: String,
}

/// Set while the holder of the armed guard does work of its own between two calls (see
/// [`StallGuard::pause`]); the watchdog then waits, polling, until the next call.
static PAUSED: AtomicBool = AtomicBool::new(false);
/// How often the watchdog looks again while the guard is paused.
const PAUSED_POLL: Duration = Duration::from_millis(500);

static ARMED: Mutex<Option<Armed>> = Mutex::new(None);
static ARMED_CHANGED: Condvar = Condvar::new();
static WATCHING: AtomicBool = AtomicBool::new(false);

/// Disarms the watchdog when the call returns.
pub(crate) struct StallGuard(());

impl Stall {
    /// Arms the watchdog for one call that must return within `bound`; `message` is the
    /// `error:` line if it does not.
    pub(crate) fn guard(bound: Duration, message: impl FnOnce() -> String) -> StallGuard {
        if !WATCHING.swap(true, Ordering::SeqCst) {
            std::thread::spawn(watch);
        }
        if let Ok(mut armed) = ARMED.lock() {
            *armed = Some(Armed { until: Instant::now() + bound, bound, message: message() });
            ARMED_CHANGED.notify_all();
        }
        StallGuard(())
    }
}

impl StallGuard {
    /// Stops the clock while the holder does work that is not a wait for the database (writing
    /// a streamed row to a stdout nobody reads yet); dropping the pause starts the bound of the
    /// next call afresh. Cheaper than a guard per call: no message, no wake-up of the watchdog.
    pub(crate) fn pause(&self) -> Paused<'_> {
        PAUSED.store(true, Ordering::SeqCst);
        Paused(std::marker::PhantomData)
    }
}

impl Drop for StallGuard {
    fn drop(&mut self) {
        PAUSED.store(false, Ordering::SeqCst);
        if let Ok(mut armed) = ARMED.lock() {
            *armed = None;
        }
    }
}

/// See [`StallGuard::pause`].
pub(crate) struct Paused<'a>(std::marker::PhantomData<&'a StallGuard>);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        if let Ok(mut armed) = ARMED.lock()
            && let Some(call) = armed.as_mut()
        {
            // Later than the watchdog's planned wake-up, so it need not be woken.
            call.until = Instant::now() + call.bound;
        }
        PAUSED.store(false, Ordering::SeqCst);
    }
}

fn watch() {
    let Ok(mut armed) = ARMED.lock() else { return };
    loop {
        let wait = match armed.as_ref() {
            None => Duration::from_secs(3600),
            Some(_) if PAUSED.load(Ordering::SeqCst) => PAUSED_POLL,
            Some(call) => {
                let left = call.until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let message = call.message.clone();
                    drop(armed);
                    end_now(&Ending::Failed { message, exit_code: crate::error::exit::DATABASE });
                }
                left
            }
        };
        armed = match ARMED_CHANGED.wait_timeout(armed, wait) {
            Ok((guard, _)) => guard,
            Err(_) => return,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each signal of the ending set has its own name, the one the system gives it: a report
    /// never says "a signal" for one of them.
    #[test]
    fn every_ending_signal_has_its_name() {
        for (signal, _) in ENDING {
            let name = signal_name(signal);
            assert_ne!(name, "a signal", "{signal}");
            if let Some(known) = signal_hook::low_level::signal_name(signal) {
                assert_eq!(name, known);
            }
        }
        assert_eq!(signal_name(SIGPWR), "SIGPWR");
        assert_eq!(signal_name(signal_hook::consts::SIGWINCH), "a signal");
    }
}
