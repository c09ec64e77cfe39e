//! `state-store`: the Apache Airflow 3.3 task and asset state store (AIP-103), read and
//! written directly in the metastore database, with a safe, batched garbage collector.
//!
//! The flow of every run: parse the command line ([`cli`]), load and validate Airflow's
//! configuration ([`config`]) and the database URL ([`url`]) before any connection is opened,
//! open the metastore and recognise its schema ([`db`]), run one command ([`commands`]), and
//! render its report ([`output`]). Errors become exit codes in one place ([`error`]).

mod api;
mod archive;
mod cli;
mod commands;
mod config;
mod db;
mod env;
mod error;
mod fs;
mod help;
mod json;
mod keys;
mod metrics;
mod model;
mod ops;
mod output;
mod progress;
mod redact;
mod signals;
#[cfg(test)]
mod test_rng;
mod text;
mod time;
mod url;

use std::any::Any;
use std::io::Write;
use std::panic::{AssertUnwindSafe, Location};

use clap::error::ErrorKind;

use crate::error::{ERROR_LINE_CHARS, exit};

/// Runs the command line of this process and returns its exit code.
#[must_use]
pub fn main_exit_code() -> i32 {
    signals::install();
    // A `_cmd` command's process group is the config's to run, and an ending's to kill.
    config::watch_commands(config::CommandWatch {
        started: signals::child_started,
        ended: signals::child_ended,
    });
    install_panic_hook();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match cli::parse(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = clap_exit(&e);
            // `clean -o json` prints one document on every run, a rejected command line's too.
            if code == exit::USAGE
                && let Some(format) = cli::rejected_clean_format(&args)
            {
                commands::clean_command_line_rejected(format, &clap_message(&e));
            }
            return code;
        }
    };
    guarded(|| {
        let outcome = commands::run(cli);
        // An ending at once that has begun says how the process ends, whatever the command
        // returned meanwhile.
        signals::yield_to_ending();
        let Err(e) = outcome else { return exit::SUCCESS };
        let code = error::exit_code(&e);
        // A closed pipe ends quietly (exit 0, error::exit_code), and a signal's report was
        // already printed: the exit code says the rest.
        if code != exit::SUCCESS && !matches!(error::kind(&e), Some(error::Error::Interrupted { .. })) {
            print_error(&error::message(e.as_ref()));
        }
        code
    })
}

/// The one place an `error:` line is printed (see [`error_line`]).
fn print_error(message: &str) {
    output::note(&error_line(message));
}

/// A failure's line on stderr: any password masked first (so that no cut can leave part of
/// one), then control and other hidden characters escaped as in tables (a URL or a path from
/// the configuration may hold a terminal escape sequence), then cut to [`ERROR_LINE_CHARS`].
fn error_line(message: &str) -> String {
    let line = format!("error: {}", redact::mask(message));
    text::cut(&text::cell(&line), ERROR_LINE_CHARS)
}

/// Runs the command; a panic that unwinds out of it (its line already printed by the hook,
/// and every destructor on the way run: transactions rolled back, temporary files removed)
/// ends as exit 70.
fn guarded(run: impl FnOnce() -> i32) -> i32 {
    std::panic::catch_unwind(AssertUnwindSafe(run)).unwrap_or(exit::INTERNAL)
}

/// A panic is a defect: it prints the documented `error:` line instead of Rust's message and
/// ends as exit 70 (`EX_SOFTWARE`), never 101. On the main thread it unwinds to [`guarded`];
/// on any other thread (the signal thread, a parser) the process ends here.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        print_error(&panic_message(info.payload(), info.location()));
        if std::thread::current().name() != Some("main") {
            std::process::exit(exit::INTERNAL);
        }
    }));
}

/// What a panic says, where, and that it is the tool's defect.
fn panic_message(payload: &(dyn Any + Send), location: Option<&Location<'_>>) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message");
    let place = location.map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
    format!(
        "internal error: {what}{place}; this is a defect of state-store {}, please report it",
        env!("CARGO_PKG_VERSION")
    )
}

/// `--help` and `--version` print to stdout and succeed. A command line without its command
/// (`state-store`, `state-store config`) is a usage error: its help goes to stderr, as every
/// other usage error does, so that a script's captured stdout stays empty, with exit code 2.
/// Any other clap error becomes the one-line `error: …` of every other failure, exit code 2.
fn clap_exit(e: &clap::Error) -> i32 {
    let (code, mut out): (i32, Box<dyn Write>) = match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            (exit::SUCCESS, Box::new(std::io::stdout().lock()))
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            (exit::USAGE, Box::new(std::io::stderr().lock()))
        }
        _ => {
            print_error(&clap_message(e));
            return exit::USAGE;
        }
    };
    let _ = out.write_all(e.render().to_string().as_bytes());
    let _ = out.flush();
    code
}

/// clap's suggestions, which it renders as `tip:` lines of their own (dropped by
/// [`clap_message`]), taken from the error's context and worded to fit in the one-line error:
/// "did you mean 'list'?" for a misspelt subcommand, flag or value, and clap's other hints as
/// they are (`to pass '-x' as a value, use '-- -x'`).
fn clap_tips(e: &clap::Error) -> Vec<String> {
    use clap::error::{ContextKind, ContextValue};
    let mut tips = Vec::new();
    for kind in [ContextKind::SuggestedSubcommand, ContextKind::SuggestedArg, ContextKind::SuggestedValue] {
        // clap lists several candidates least similar first; the best is named first here.
        let quoted: Vec<String> = match e.get(kind) {
            Some(ContextValue::String(name)) => vec![format!("'{name}'")],
            Some(ContextValue::Strings(names)) => {
                names.iter().rev().map(|name| format!("'{name}'")).collect()
            }
            _ => Vec::new(),
        };
        match quoted.split_last() {
            None => {}
            Some((last, [])) => tips.push(format!("did you mean {last}?")),
            Some((last, rest)) => tips.push(format!("did you mean {} or {last}?", rest.join(", "))),
        }
    }
    if let Some(ContextValue::StyledStrs(hints)) = e.get(ContextKind::Suggested) {
        tips.extend(hints.iter().map(ToString::to_string));
    }
    tips
}

/// A clap error as the one line of every other failure, without its `error: ` prefix, with
/// clap's suggestions kept, masked as every error message is (a value clap quotes may be a URL
/// with its password).
fn clap_message(e: &clap::Error) -> String {
    // clap spreads one error over several lines (the message, the missing arguments, a usage
    // line, a tip); the contract is one line, so keep what comes before the usage line and
    // join it.
    let rendered = e.render().to_string();
    let message: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty() && !l.starts_with("tip:"))
        .collect();
    let message = message.join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    let tips: String = clap_tips(e).iter().map(|tip| format!(" ({tip})")).collect();
    redact::mask(&format!("{message}{tips} (see --help)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_line_is_masked_escaped_and_cut() {
        let line = error_line("cannot open postgresql://u:secret@db/x\u{1b}[2J\r\u{7}\u{202e}: gone");
        assert_eq!(line, "error: cannot open postgresql://u:***@db/x\\x1b[2J\\r\\x07\\u202e: gone");
        assert!(!line.chars().any(text::is_hidden));
        let long = error_line(&format!("cannot open {}", "x".repeat(10_000)));
        assert_eq!(long.chars().count(), ERROR_LINE_CHARS);
        assert!(long.starts_with("error: cannot open xxx") && long.ends_with("x…"));
        // A password near the cut is masked before the cut, so no part of it is left.
        let at_cut = error_line(&format!("{} mysql://u:{}@db/x", "y".repeat(470), "p".repeat(50)));
        assert!(!at_cut.contains("ppp"), "{at_cut}");
    }

    #[test]
    fn a_panic_is_one_error_line_and_exit_70() {
        let here = Location::caller();
        let message = panic_message(&"index out of bounds", Some(here));
        assert!(message.starts_with("internal error: index out of bounds at src/lib.rs:"), "{message}");
        assert!(message.ends_with("please report it"));
        let owned: Box<dyn Any + Send> = Box::new(String::from("boom\nagain"));
        assert_eq!(error_line(&panic_message(owned.as_ref(), None)).lines().count(), 1);
        assert!(panic_message(&42_u8, None).contains("a panic without a message"));
        assert_eq!(guarded(|| panic!("a defect")), exit::INTERNAL);
        assert_eq!(guarded(|| 3), 3);
    }
}
