//! Errors, the way cargo has them: the library returns [`anyhow::Error`]s, each a chain of
//! context over its cause; where a caller decides by kind (the exit code, a closed pipe, a
//! database error to locate), the chain holds one of the typed [`Error`] kinds, found by
//! downcasting; at the command-line edge [`exit_code`] reads the exit code from it.
//!
//! Every failure ends as one line on stderr (`error: …`) and a documented exit code, so cron
//! jobs and CI scripts can tell "not found" from "bad input" from "database down". The line is
//! the error's chain of causes joined by ": ", outermost first. An error that reaches the edge
//! without a kind is a defect of this tool (exit 70): no `?` gives a kind by accident, so an
//! I/O error of reading a file can never pass for the output error.

use std::io;

/// Exit codes, documented in `--help` and `docs/exit-codes.md`.
pub(crate) mod exit {
    pub(crate) const SUCCESS: i32 = 0;
    pub(crate) const NOT_FOUND: i32 = 1;
    pub(crate) const USAGE: i32 = 2;
    pub(crate) const CONFIG: i32 = 3;
    pub(crate) const DATABASE: i32 = 4;
    pub(crate) const SCHEMA: i32 = 5;
    /// Writing to stdout failed for another reason than a closed pipe (disk full, …).
    pub(crate) const OUTPUT: i32 = 6;
    /// Another `clean` of the same database is running.
    pub(crate) const BUSY: i32 = 7;
    /// `doctor` found at least one problem in a database whose schema it recognised.
    pub(crate) const UNHEALTHY: i32 = 8;
    /// `import --on-conflict fail` found a row whose key is already stored.
    pub(crate) const CONFLICT: i32 = 9;
    /// The REST API refused the credentials or the user's permission: 401 or 403, a login
    /// refused, no token to be had.
    pub(crate) const AUTH: i32 = 10;
    /// `import --skip-damaged` restored every whole line and skipped damaged ones.
    pub(crate) const DAMAGED: i32 = 11;
    /// An error that was given no kind: a defect of this tool (EX_SOFTWARE).
    pub(crate) const INTERNAL: i32 = 70;
    /// A process a signal ended: 128 + the signal's number, as a shell reports a process the
    /// signal killed (130 for SIGINT, 143 for SIGTERM).
    pub(crate) const fn by_signal(signal: i32) -> i32 {
        128 + signal
    }
    // `by_signal` of the signals that end a run, named for the help's tables.
    pub(crate) const SIGHUP: i32 = 129;
    pub(crate) const SIGINT: i32 = 130;
    pub(crate) const SIGQUIT: i32 = 131;
    pub(crate) const SIGTERM: i32 = 143;
}

/// A cause from outside the tool (a driver, the operating system), kept as an error value.
pub(crate) type Cause = Box<dyn std::error::Error + Send + Sync>;

/// The kinds of failure, each with its exit code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// A flag, argument or value given on the command line (or stdin) is invalid: exit 2.
    #[error("{0}")]
    Usage(String),
    /// The configuration (file, environment, `_cmd`, URL) is invalid: exit 3. `config` and
    /// `url` build it from their own errors (`From<ConfigError>`, `UrlError::into_error`).
    #[error("{0}")]
    Config(String),
    /// The key, scope, dag run or asset asked for does not exist: exit 1.
    #[error("{0}")]
    NotFound(String),
    /// The database could not be opened, read or written: exit 4.
    #[error("{context}")]
    Database {
        context: String,
        #[source]
        cause: Cause,
    },
    /// Airflow's REST API could not be reached, timed out, failed (5xx) or answered what is not
    /// its API (an HTML page): exit 4, as for the database.
    #[error("{0}")]
    Remote(String),
    /// Airflow's REST API refused the credentials (401, 403), or none could be had: exit 10,
    /// so a cron job can tell an expired token from a server that is down.
    #[error("{0}")]
    Auth(String),
    /// The database is reachable but its tables are not an Airflow 3.3 state store: exit 5.
    #[error("{0}")]
    Schema(String),
    /// Another clean holds the database's clean lock: exit 7, so cron can tell "still running"
    /// from a failure.
    #[error("{0}")]
    Busy(String),
    /// `doctor` found problems (its report was already printed): exit 8, so a script can tell
    /// a damaged state store from a database it could not check.
    #[error("{0}")]
    Unhealthy(String),
    /// `import --on-conflict fail` found a row of the file whose key is already stored: exit 9,
    /// so a script can tell "already there" from a malformed file (2) or a missing parent (1).
    #[error("{0}")]
    Conflict(String),
    /// `import --skip-damaged` skipped damaged lines (its summary was already printed): exit
    /// 10, so a script can tell "restored, but the file was damaged" from a clean import.
    #[error("{0}")]
    Damaged(String),
    /// A signal stopped the command (the report, if any, was already printed): exit 128 + its
    /// number (129 SIGHUP, 130 SIGINT, 131 SIGQUIT, 143 SIGTERM). Built by
    /// `signals::interrupted`, which names the signal.
    #[error("stopped by {name}")]
    Interrupted { signal: i32, name: &'static str },
    /// Writing the report (to stdout, or to the file `target` names) failed. A closed stdout
    /// pipe ends the process quietly (exit 0); anything else (a full disk) is exit 6, since
    /// neither the input nor the database is wrong. Only the output's own writes build this
    /// kind: no `io::Error` turns into it by `?`.
    #[error("cannot write the output{}", target.as_ref().map(|t| format!(": {t}")).unwrap_or_default())]
    Output {
        target: Option<String>,
        #[source]
        cause: io::Error,
    },
}

impl Error {
    pub(crate) fn db(context: impl Into<String>, cause: impl Into<Cause>) -> Self {
        Error::Database { context: context.into(), cause: cause.into() }
    }

    /// A write to stdout failed.
    pub(crate) fn stdout(cause: io::Error) -> Self {
        Error::Output { target: None, cause }
    }

    /// A write to a file the command writes (an export, an archive, a page) failed.
    pub(crate) fn output_file(target: impl Into<String>, cause: io::Error) -> Self {
        Error::Output { target: Some(target.into()), cause }
    }

    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => exit::USAGE,
            Error::Config(_) => exit::CONFIG,
            Error::NotFound(_) => exit::NOT_FOUND,
            Error::Database { .. } | Error::Remote(_) => exit::DATABASE,
            Error::Auth(_) => exit::AUTH,
            Error::Schema(_) => exit::SCHEMA,
            Error::Interrupted { signal, .. } => exit::by_signal(*signal),
            Error::Output { .. } => exit::OUTPUT,
            Error::Busy(_) => exit::BUSY,
            Error::Unhealthy(_) => exit::UNHEALTHY,
            Error::Conflict(_) => exit::CONFLICT,
            Error::Damaged(_) => exit::DAMAGED,
        }
    }
}

/// The kind of an error nearest the top of its chain, if it has one: anyhow finds a kind given
/// as context as well as one at the root.
pub(crate) fn kind(error: &anyhow::Error) -> Option<&Error> {
    error.downcast_ref::<Error>().or_else(|| error.chain().find_map(|cause| cause.downcast_ref::<Error>()))
}

/// The exit code an error ends the process with: its kind's, or 70 when it has none; 0 for a
/// closed pipe at stdout or a stream output, a quiet success. The one place it is decided: the exit status and
/// every sink that reports it (clean's document and metrics file) take it from here.
pub(crate) fn exit_code(error: &anyhow::Error) -> i32 {
    if is_broken_pipe(error) {
        return exit::SUCCESS;
    }
    kind(error).map_or(exit::INTERNAL, Error::exit_code)
}

/// A closed pipe at an output (`state-store list | head`, `export --file /dev/stdout |
/// head`, a FIFO whose reader went away), which ends the process quietly, whichever way
/// the pipe was named: the reader had what it wanted. Only a stream output can be a pipe
/// (an archive or a replaced file is a regular file), so this is the rule of streams.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    matches!(kind(error), Some(Error::Output { cause, .. }) if cause.kind() == io::ErrorKind::BrokenPipe)
}

/// An error as its one line: its chain of causes outermost first, joined by ": ". A cause
/// that spans lines (a driver's) is folded onto one; the tool's own messages are one line
/// already (they quote user text with its whitespace escaped) and are kept as written.
pub(crate) fn message(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut next = Some(error);
    while let Some(cause) = next {
        let text = cause.to_string();
        parts.push(if text.contains(['\n', '\r']) { one_line(&text) } else { text });
        next = cause.source();
    }
    parts.retain(|text| !text.is_empty());
    parts.join(": ")
}

/// The longest `error:` line, in characters: a driver's message can quote a whole statement,
/// and a path or URL can be any length; a cron mail or a log line needs the start of it.
pub(crate) const ERROR_LINE_CHARS: usize = 500;

/// Database drivers put newlines in some messages; the contract is one line per error.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(crate) type Result<T, E = anyhow::Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_is_one_line_and_the_kind_sets_the_exit_code() {
        let driver = io::Error::other("connection refused\n  is the server running?");
        let error =
            anyhow::Error::new(Error::db("cannot open the metastore", driver)).context("listing keys");
        assert_eq!(exit_code(&error), exit::DATABASE);
        assert_eq!(
            message(error.as_ref()),
            "listing keys: cannot open the metastore: connection refused is the server running?"
        );
    }

    #[test]
    fn only_a_closed_pipe_is_a_quiet_end() {
        let pipe = || io::Error::from(io::ErrorKind::BrokenPipe);
        assert!(is_broken_pipe(&Error::stdout(pipe()).into()));
        assert_eq!(exit_code(&Error::stdout(pipe()).into()), exit::SUCCESS);
        let file = Error::output_file("/dev/stdout", pipe()).into();
        assert!(is_broken_pipe(&file));
        assert_eq!(exit_code(&file), exit::SUCCESS);
        let full: anyhow::Error =
            Error::output_file("a.jsonl", io::Error::from(io::ErrorKind::StorageFull)).into();
        assert!(!is_broken_pipe(&full));
        assert_eq!(exit_code(&full), exit::OUTPUT);
        assert_eq!(message(full.as_ref()), "cannot write the output: a.jsonl: no storage space");
    }

    #[test]
    fn an_error_without_a_kind_is_internal() {
        assert_eq!(exit_code(&anyhow::anyhow!("unexpected")), exit::INTERNAL);
    }
}
