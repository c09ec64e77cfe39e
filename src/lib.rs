//! `state-store`: the Apache Airflow 3.3 task and asset state store (AIP-103), read and
//! written directly in the metastore database, with a safe, batched garbage collector.
//!
//! The flow of every run: parse the command line ([`cli`]), load and validate Airflow's
//! configuration ([`config`]) and the database URL ([`url`]) before any connection is opened,
//! open the metastore and recognise its schema ([`db`]), run one command ([`commands`]), and
//! render its report ([`output`]). Errors become exit codes in one place ([`error`]).

mod archive;
mod cli;
mod commands;
mod config;
mod db;
mod error;
mod fs;
mod json;
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

use std::io::Write;

use clap::Parser;
use clap::error::ErrorKind;

use crate::error::{CliError, exit};

/// Runs the command line of this process and returns its exit code.
#[must_use]
pub fn main_exit_code() -> i32 {
    signals::install();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match cli::Cli::try_parse_from(&args) {
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
    match commands::run(cli).map_err(CliError::from) {
        Ok(()) => exit::SUCCESS,
        Err(e) if e.is_broken_pipe() => exit::SUCCESS,
        Err(e) => {
            // A signal's report was already printed; the exit code says the rest.
            if !matches!(e.kind(), Some(error::Error::Interrupted { .. })) {
                output::note(&format!("error: {}", e.message()));
            }
            e.exit_code
        }
    }
}

/// `--help` and `--version` print to stdout and succeed; any other clap error becomes the
/// one-line `error: …` of every other failure, with exit code 2.
fn clap_exit(e: &clap::Error) -> i32 {
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let text = e.render().to_string();
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                exit::USAGE
            } else {
                exit::SUCCESS
            }
        }
        _ => {
            output::note(&format!("error: {}", clap_message(e)));
            exit::USAGE
        }
    }
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
