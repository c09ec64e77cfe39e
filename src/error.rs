//! The one error type of the tool, and the single place where an error becomes an exit code.
//!
//! Every failure ends as one line on stderr (`error: …`) and a documented exit code, so cron
//! jobs and CI scripts can tell "not found" from "bad input" from "database down".

use std::fmt;

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
    pub(crate) const SIGINT: i32 = 130;
    pub(crate) const SIGTERM: i32 = 143;
}

#[derive(Debug)]
pub(crate) enum Error {
    /// A flag, argument or value given on the command line (or stdin) is invalid: exit 2.
    Usage(String),
    /// The configuration (file, environment, `_cmd`, URL) is invalid: exit 3.
    Config(String),
    /// The key, scope, dag run or asset asked for does not exist: exit 1.
    NotFound(String),
    /// The database could not be opened, read or written: exit 4.
    Database { context: String, cause: String },
    /// The database is reachable but its tables are not an Airflow 3.3 state store: exit 5.
    Schema(String),
    /// Another clean holds the database's clean lock: exit 7, so cron can tell "still running"
    /// from a failure.
    Busy(String),
    /// `doctor` found problems (its report was already printed): exit 8, so a script can tell
    /// a damaged state store from a database it could not check.
    Unhealthy(String),
    /// A signal stopped the command (the report, if any, was already printed): exit 130/143.
    Interrupted { signal: i32 },
    /// Writing the report to stdout failed. A closed pipe ends the process quietly (exit 0);
    /// anything else (a full disk) is exit 6, since neither the input nor the database is wrong.
    Output(std::io::Error),
}

impl Error {
    pub(crate) fn db(context: impl Into<String>, cause: impl fmt::Display) -> Self {
        Error::Database { context: context.into(), cause: one_line(&cause.to_string()) }
    }

    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => exit::USAGE,
            Error::Config(_) => exit::CONFIG,
            Error::NotFound(_) => exit::NOT_FOUND,
            Error::Database { .. } => exit::DATABASE,
            Error::Schema(_) => exit::SCHEMA,
            Error::Interrupted { signal } => {
                if *signal == 15 {
                    exit::SIGTERM
                } else {
                    exit::SIGINT
                }
            }
            Error::Output(_) => exit::OUTPUT,
            Error::Busy(_) => exit::BUSY,
            Error::Unhealthy(_) => exit::UNHEALTHY,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(msg)
            | Error::Config(msg)
            | Error::NotFound(msg)
            | Error::Schema(msg)
            | Error::Busy(msg)
            | Error::Unhealthy(msg) => f.write_str(msg),
            Error::Database { context, cause } => write!(f, "{context}: {cause}"),
            Error::Interrupted { signal } => {
                let name = if *signal == 15 { "SIGTERM" } else { "SIGINT" };
                write!(f, "stopped by {name}")
            }
            Error::Output(e) => write!(f, "cannot write the output: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Output(e)
    }
}

/// Database drivers put newlines in some messages; the contract is one line per error.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;
