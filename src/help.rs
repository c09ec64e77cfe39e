//! The texts of `--help` and of the manual pages beyond each flag's own: what each command can
//! exit with, and what a command's help says after its flags (doctor's checks, notes,
//! examples). Each is written once, here. `--help` prints a command's sections after its flags
//! (clap's after-help, [`after_help`]); `state-store man` puts each under a heading of its own
//! and gives every page an EXIT STATUS from [`exit_status`] (`commands/generated.rs`), where
//! clap_mangen would put all of the after-help under one section named EXTRA and no exit status.

use std::fmt::Write as _;

use crate::error::exit;

/// Codes a command can end with, and when.
pub(crate) struct Exit {
    pub codes: &'static [i32],
    pub when: &'static str,
}

const fn code(codes: &'static [i32], when: &'static str) -> Exit {
    Exit { codes, when }
}

impl Exit {
    /// The codes as a manual page and `--help` show them: `130, 143`.
    pub(crate) fn label(&self) -> String {
        self.codes.iter().map(i32::to_string).collect::<Vec<_>>().join(", ")
    }
}

const USAGE: Exit = code(&[exit::USAGE], "an invalid flag, argument or value");
const CONFIG: Exit =
    code(&[exit::CONFIG], "a configuration error (airflow.cfg, the environment, _cmd, sql_alchemy_conn)");
const DATABASE: Exit = code(
    &[exit::DATABASE],
    "a database error: it cannot be opened, reached, read or written, a lock is not granted in time, \
     or it stopped answering",
);
const SCHEMA: Exit = code(&[exit::SCHEMA], "the schema is not an Airflow 3.3 state store");
const OUTPUT: Exit = code(&[exit::OUTPUT], "stdout cannot be written (a closed pipe ends with 0)");
const INTERNAL: Exit =
    code(&[exit::INTERNAL], "an internal error: a defect of state-store itself (please report it)");
const SIGNALS: Exit = code(
    &[exit::SIGHUP, exit::SIGINT, exit::SIGQUIT, exit::SIGTERM],
    "stopped by SIGHUP, SIGINT, SIGQUIT or SIGTERM; 128 + the number of any other signal that ends the \
     process",
);

// The same over --api-url, for the commands that go over Airflow's REST API.
const REST_CONFIG: Exit = code(
    &[exit::CONFIG],
    "a configuration error (airflow.cfg, the environment, _cmd, sql_alchemy_conn); over --api-url, \
     the server's own configuration (400)",
);
const REST_DATABASE: Exit = code(
    &[exit::DATABASE],
    "a database error: it cannot be opened, reached, read or written, a lock is not granted in time, \
     or it stopped answering; over --api-url, the API cannot be reached, times out, fails (5xx), \
     redirects or answers what is not Airflow's API",
);
const REST_SCHEMA: Exit = code(
    &[exit::SCHEMA],
    "the schema is not an Airflow 3.3 state store; over --api-url, a server before Airflow 3.3",
);
const AUTH: Exit = code(
    &[exit::AUTH],
    "over --api-url: the API refused the token or the login (401, 403), or the user's permission \
     (403), or no token could be had",
);
const SCOPE_NOT_FOUND: Exit = code(
    &[exit::NOT_FOUND],
    "the dag run, the task instance or the asset does not exist, or --asset or --asset-uri names an \
     inactive asset",
);
const REST_SCOPE: &str = "an incomplete or mixed scope, or another invalid flag or value; over \
     --api-url, also a flag the API cannot honour or a request it refuses (422)";

/// A command's exit codes: its own, then an internal error and the signals, as every command
/// but `clean` ends.
macro_rules! exits {
    ($($exit:expr),* $(,)?) => {
        &[$($exit,)* INTERNAL, SIGNALS]
    };
}

/// [`exits!`] for a command that also goes over --api-url: its own codes, then what every such
/// command shares.
macro_rules! over_api {
    ($($exit:expr),* $(,)?) => {
        exits![$($exit,)* REST_CONFIG, REST_DATABASE, REST_SCHEMA, OUTPUT, AUTH]
    };
}

/// Every code, as the top page and `state-store --help` list them (docs/exit-codes.md).
const TOP: &[Exit] = &[
    code(&[exit::SUCCESS], "success"),
    code(
        &[exit::NOT_FOUND],
        "not found: the key, dag run, task instance or asset does not exist (404 over --api-url)",
    ),
    code(
        &[exit::USAGE],
        "invalid usage or input (flags, values, JSON); over --api-url, a request the API refuses \
         (422) or a flag it cannot honour",
    ),
    code(
        &[exit::CONFIG],
        "configuration error (airflow.cfg, environment, _cmd, sql_alchemy_conn); over --api-url, the \
         server's own configuration (400)",
    ),
    code(
        &[exit::DATABASE],
        "database error (cannot open, connect, read or write); over --api-url, the API cannot be \
         reached, times out, fails (5xx) or answers what is not Airflow's API",
    ),
    code(
        &[exit::SCHEMA],
        "schema not recognised (not an Airflow 3.3 state store); over --api-url, Airflow before 3.3",
    ),
    code(
        &[exit::OUTPUT],
        "cannot write the output (other than a closed pipe, which exits 0), --file, --archive, \
         --metrics-file or a manual page",
    ),
    code(
        &[exit::BUSY],
        "another clean of the same database is running, or another run appends to the same --archive",
    ),
    code(&[exit::UNHEALTHY], "doctor found problems in the state store"),
    code(&[exit::CONFLICT], "import --on-conflict fail: a row of the file is already stored"),
    code(
        &[exit::AUTH],
        "the REST API refused the credentials or the user's permission (401, 403, a login refused, \
         no token to be had)",
    ),
    code(&[exit::DAMAGED], "import --skip-damaged: the whole lines were restored, damaged lines skipped"),
    code(&[exit::INTERNAL], "internal error: a defect of state-store itself (please report it)"),
    code(&[exit::SIGHUP], "stopped by SIGHUP (a dropped ssh session)"),
    code(&[exit::SIGINT], "stopped by SIGINT"),
    code(&[exit::SIGQUIT], "stopped by SIGQUIT; the terminal's echo is put back first"),
    code(&[exit::SIGTERM], "stopped by SIGTERM; 128 + N for any other signal N that ends the process"),
];

const GET: &[Exit] = over_api![
    code(&[exit::SUCCESS], "the key was found and printed"),
    code(
        &[exit::NOT_FOUND],
        "the key does not exist; or the dag run, the task instance or the asset does not exist, or \
         --asset or --asset-uri names an inactive asset, and the message says so",
    ),
    code(&[exit::USAGE], REST_SCOPE),
];

const SET: &[Exit] = over_api![
    code(&[exit::SUCCESS], "the key was written"),
    code(
        &[exit::NOT_FOUND],
        "the dag run, the task instance or the asset does not exist, or the asset is inactive; with \
         --keep-expiry, the key does not exist",
    ),
    code(
        &[exit::USAGE],
        "the value is not JSON Airflow can store (null, NaN, Infinity, nested too deep) or is over \
         max_value_storage_bytes without --allow-large; an invalid --retention or --expires-at; an \
         incomplete or mixed scope; over --api-url, also a flag the API cannot honour or a request \
         it refuses (422)",
    ),
];

const DELETE: &[Exit] = over_api![
    code(&[exit::SUCCESS], "the key was deleted, or it did not exist"),
    SCOPE_NOT_FOUND,
    code(&[exit::USAGE], REST_SCOPE),
];

const CLEAR: &[Exit] = exits![
    code(
        &[exit::SUCCESS],
        "the keys were deleted; the scope had none; the confirmation was answered with no; over \
         --api-url, keys at map index -1 whose DELETE the API refused were left, with a warning",
    ),
    SCOPE_NOT_FOUND,
    code(
        &[exit::USAGE],
        "keys exist but --yes is missing and stdin or stderr is not a terminal; an incomplete or mixed \
         scope; --all-map-indices with --map-index or an asset; an --archive that is not a regular \
         file, or is the database; over --api-url, also a flag the API cannot honour",
    ),
    REST_CONFIG,
    code(
        &[exit::DATABASE],
        "a database error: it cannot be opened, reached, read or written, a lock is not granted in time, \
         or it stopped answering; over --api-url, the API cannot be reached, times out, fails (5xx), \
         redirects or answers what is not Airflow's API, a key is still there after its DELETE was \
         answered, or the keys change faster than the listing can follow; a DELETE that fails after \
         others reports the keys already removed (the document's \"deleted\")",
    ),
    REST_SCHEMA,
    code(
        &[exit::OUTPUT],
        "the --archive or stdout cannot be written (an archive not written deletes nothing)",
    ),
    code(&[exit::BUSY], "another run is appending to the --archive; nothing is deleted"),
    AUTH,
];

const LIST: &[Exit] = over_api![
    code(&[exit::SUCCESS], "the rows were listed, including none"),
    code(
        &[exit::NOT_FOUND],
        "the asset of --asset, --asset-uri or --asset-id does not exist, or a name or URI matches only \
         an inactive asset; over --api-url, also a dag run or task instance that does not exist",
    ),
    code(
        &[exit::USAGE],
        "conflicting or invalid filters (task flags or --expired with an asset, two asset flags, a \
         --map-index out of range); over --api-url, also a list across task instances, which the API \
         cannot make",
    ),
];

/// What `clean` exits with: its manual page is the one the systemd unit's `Documentation=`
/// names.
const CLEAN: &[Exit] = &[
    code(
        &[exit::SUCCESS],
        "the run completed, or stopped at --max-rows or --max-duration; a dry run; a custom \
         [state_store] backend, skipped with a notice",
    ),
    code(
        &[exit::USAGE],
        "an invalid flag or value, such as a --metrics-file whose directory does not exist, refused \
         before the database is opened; also --api-url, which clean refuses",
    ),
    CONFIG,
    code(
        &[exit::DATABASE],
        "a database error: it cannot be opened or reached, a lock not granted within --lock-timeout, a \
         database that stopped answering, the --max-duration hard deadline",
    ),
    SCHEMA,
    code(&[exit::OUTPUT], "the --archive file, the --metrics-file or stdout cannot be written"),
    code(
        &[exit::BUSY],
        "another clean of the same database is running, or another run is appending to the --archive; \
         this one deleted nothing (no failure for cron or systemd)",
    ),
    INTERNAL,
    code(
        &[exit::SIGHUP, exit::SIGINT, exit::SIGQUIT, exit::SIGTERM],
        "stopped by SIGHUP, SIGINT, SIGQUIT or SIGTERM, after the batch in progress committed (143 at a \
         shutdown or systemctl stop: no failure for the shipped unit); 128 + the number of any other \
         signal that ends a run",
    ),
];

const STATS: &[Exit] = exits![
    code(&[exit::SUCCESS], "the statistics were printed"),
    code(&[exit::USAGE], "an invalid flag or value; also --api-url, which stats refuses"),
    CONFIG,
    DATABASE,
    SCHEMA,
    OUTPUT,
];

const DOCTOR: &[Exit] = exits![
    code(&[exit::SUCCESS], "no problem (warnings and information never fail the run)"),
    code(&[exit::USAGE], "an invalid flag or value; also --api-url, which doctor refuses"),
    code(&[exit::CONFIG], "a configuration error, as for every command: no report"),
    code(&[exit::DATABASE], "the database cannot be opened or read, as for every command: no report"),
    code(&[exit::SCHEMA], "the schema is not recognised (after the report)"),
    OUTPUT,
    code(&[exit::UNHEALTHY], "a check found a problem (after the report)"),
];

const EXPORT: &[Exit] = exits![
    code(&[exit::SUCCESS], "the rows were written, including none"),
    code(&[exit::NOT_FOUND], "the asset of --asset, --asset-uri or --asset-id does not exist"),
    code(
        &[exit::USAGE],
        "conflicting filters, a --file that is a directory or the database, another invalid flag; also \
         --api-url, which export refuses",
    ),
    CONFIG,
    DATABASE,
    SCHEMA,
    code(&[exit::OUTPUT], "the --file or stdout cannot be written (a failed export leaves the old file)"),
];

const IMPORT: &[Exit] = exits![
    code(&[exit::SUCCESS], "the rows were restored (with --dry-run, checked)"),
    code(
        &[exit::NOT_FOUND],
        "a row's dag run or asset does not exist (without --skip-missing); nothing is written",
    ),
    code(
        &[exit::USAGE],
        "a malformed line (without --skip-damaged), a row the database cannot hold or over \
         max_value_storage_bytes, a file that changed between the passes, an invalid flag; also \
         --api-url, which import refuses",
    ),
    CONFIG,
    code(&[exit::DATABASE], "a database error; the batches committed before it stay"),
    SCHEMA,
    code(&[exit::OUTPUT], "stdin cannot be copied to its temporary file, or stdout cannot be written"),
    code(&[exit::CONFLICT], "--on-conflict fail: a row's key is already stored, or repeated in the file"),
    code(
        &[exit::DAMAGED],
        "--skip-damaged: every whole line was restored (with --dry-run, checked), damaged lines skipped",
    ),
];

const CONFIG_SHOW: &[Exit] =
    exits![code(&[exit::SUCCESS], "the configuration was printed"), USAGE, CONFIG, OUTPUT];

const CONFIG_GET: &[Exit] = exits![
    code(&[exit::SUCCESS], "the value was printed"),
    code(&[exit::NOT_FOUND], "the option is unset, or is not one state-store reads"),
    USAGE,
    CONFIG,
    OUTPUT,
];

const CONFIG_COMMANDS: &[Exit] = exits![
    code(&[exit::SUCCESS], "the configuration or the value was printed"),
    code(&[exit::NOT_FOUND], "config get: the option is unset, or is not one state-store reads"),
    code(&[exit::USAGE], "a missing or unknown command, argument or flag"),
    CONFIG,
    OUTPUT,
];

const SANDBOX_CREATE: &[Exit] = exits![
    code(&[exit::SUCCESS], "the sandbox was created"),
    code(
        &[exit::USAGE],
        "no --conn, a database that already has Airflow tables, an in-memory SQLite URL; also \
         --api-url, which sandbox refuses",
    ),
    CONFIG,
    DATABASE,
    OUTPUT,
];

const SANDBOX_ADD: &[Exit] = exits![
    code(&[exit::SUCCESS], "the row was added (its id, or the count of task instances, printed)"),
    code(
        &[exit::USAGE],
        "a database not made by sandbox create, or a row the sandbox already has; a missing flag; \
         also --api-url, which sandbox refuses",
    ),
    CONFIG,
    code(&[exit::DATABASE], "a database error, such as a task instance of a dag run that does not exist"),
    OUTPUT,
];

const SANDBOX_COMMANDS: &[Exit] = exits![
    code(&[exit::SUCCESS], "the sandbox was created, or the row added"),
    code(
        &[exit::USAGE],
        "create without --conn or on a database that already has Airflow tables; an add on a database \
         not made by sandbox create, or of a row the sandbox already has; a missing command or flag",
    ),
    CONFIG,
    DATABASE,
    OUTPUT,
];

const COMPLETIONS: &[Exit] = exits![
    code(&[exit::SUCCESS], "the script was printed"),
    code(&[exit::USAGE], "a missing or unknown shell"),
    OUTPUT,
];

const MAN: &[Exit] = exits![
    code(&[exit::SUCCESS], "the page was printed, or the pages were written"),
    code(
        &[exit::USAGE],
        "a command that has no page, COMMAND with --out-dir, an --out-dir that is the database",
    ),
    code(&[exit::OUTPUT], "stdout cannot be written, or a page cannot be written into --out-dir"),
];

/// What the command at `path` (the words after `state-store`; none for the top page) can exit
/// with. Every command has its table: a test holds every manual page to it.
pub(crate) fn exit_status(path: &[&str]) -> &'static [Exit] {
    match path {
        [] => TOP,
        ["get"] => GET,
        ["set"] => SET,
        ["delete"] => DELETE,
        ["clear"] => CLEAR,
        ["list"] => LIST,
        ["clean"] => CLEAN,
        ["stats"] => STATS,
        ["doctor"] => DOCTOR,
        ["export"] => EXPORT,
        ["import"] => IMPORT,
        ["config"] => CONFIG_COMMANDS,
        ["config", "show"] => CONFIG_SHOW,
        ["config", "get"] => CONFIG_GET,
        ["sandbox"] => SANDBOX_COMMANDS,
        ["sandbox", "create"] => SANDBOX_CREATE,
        ["sandbox", _] => SANDBOX_ADD,
        ["completions"] => COMPLETIONS,
        ["man"] => MAN,
        _ => &[],
    }
}

/// What a section of a command's after-help holds.
pub(crate) enum Body {
    /// Text as `--help` prints it: paragraphs apart by a blank line, indented lines (commands to
    /// type) kept as they are.
    Text(&'static str),
    /// A line, then a list of terms, each with its description.
    Terms { lead: &'static str, terms: &'static [(&'static str, &'static str)] },
    /// The command's [`exit_status`]: in `--help` where it is listed after the flags; every
    /// manual page has its own EXIT STATUS section.
    ExitCodes,
}

/// A section of what a command's `--help` says after its flags, with the heading of its manual
/// page section. `DESCRIPTION` continues the page's description.
pub(crate) struct Section {
    pub heading: &'static str,
    pub body: Body,
}

pub(crate) const DESCRIPTION: &str = "DESCRIPTION";
pub(crate) const EXIT_STATUS: &str = "EXIT STATUS";

const CONFIGURATION: &str = "\
Configuration is read like Airflow reads it: --config, else $AIRFLOW_CONFIG, else
$AIRFLOW_HOME/airflow.cfg, else ~/airflow/airflow.cfg; AIRFLOW__SECTION__KEY environment
variables override the file, and flags override both. A _cmd option in the file runs only when
root or the run's user owns the file and its directory and no other user can write them;
$STATE_STORE_TRUSTED_CONFIG_OWNERS (user names or uids, comma-separated) trusts other owners.";

const DOCTOR_CHECKS: &[(&str, &str)] = &[
    (
        "schema",
        "the state-store tables exist with Airflow 3.3's columns; otherwise names what it found: a \
         pre-release 3.3, a 3.4 or a missing schema",
    ),
    ("dag_run_match", "task rows whose dag_id/run_id differ from their dag_run row"),
    ("dangling_task_rows", "task rows whose dag run is gone (written with foreign keys off)"),
    (
        "missing_task_instance",
        "task rows whose task instance has no task_instance row (written by another tool, or with set \
         --allow-missing-task-instance): a warning",
    ),
    ("dangling_asset_rows", "asset rows whose asset is gone (written with foreign keys off)"),
    (
        "json_values",
        "values Airflow cannot read back: not JSON to Python's json.loads, or nested more than 199 \
         levels deep (every row, a page at a time)",
    ),
    ("key_length", "keys over Airflow's 512 characters"),
    (
        "value_size",
        "values over [state_store] max_value_storage_bytes, measured as `set` measures them: a \
         warning, as Airflow's workers may write them (skipped when the limit is 0)",
    ),
    (
        "sqlite_timestamps",
        "SQLite only: timestamps not stored as YYYY-MM-DD HH:MM:SS.ffffff, which Airflow's clean \
         compares wrongly",
    ),
    (
        "sqlite_integers",
        "SQLite only: task rows whose map_index or dag_run_id is not an integer (SQLite keeps text in \
         an INTEGER column), which Airflow cannot read",
    ),
    (
        "inactive_asset_rows",
        "keys of inactive assets: a warning; `state-store clean` deletes them, and so does Airflow's \
         scheduler",
    ),
    (
        "backend",
        "information: the database (password masked), the backend, and what a clean would do now \
         with the configured settings",
    ),
];

const STATS_EXPIRY: &str = "\
The expiry spread counts task keys by expires_at: expired (before now, as clean compares),
then each UTC calendar day from today (today's from now to midnight UTC) for 30 days, later,
and never (NULL). Asset keys have no expiry and are not in it. The table shows it as a bar
chart of the days that have keys; json, yaml and plain always give all 30 days.";

const COMPLETIONS_VALUES: &str =
    "Values without a fixed set (keys, ids, durations) complete as file names, the shell's default.";

const COMPLETIONS_INSTALL: &str = "\
Install one, then open a new shell:
  bash  add to ~/.bashrc:  source <(state-store completions bash)
  zsh   state-store completions zsh > ~/.zfunc/_state-store
        and in ~/.zshrc, before compinit:  fpath=(~/.zfunc $fpath)
  fish  state-store completions fish > ~/.config/fish/completions/state-store.fish";

const MAN_INSTALL: &str = "\
Read a page without installing it:
  state-store man clean | man -l -

Install every page (state-store.1, state-store-clean.1, state-store-config-show.1, ...), for you:
  state-store man --out-dir ~/.local/share/man/man1
man looks there when ~/.local/bin is on PATH; otherwise add ~/.local/share/man to MANPATH.

Or for everyone:
  sudo state-store man --out-dir /usr/local/share/man/man1

Then: man state-store-clean";

/// What the command at `path` says after its flags, section by section.
pub(crate) fn sections(path: &[&str]) -> &'static [Section] {
    match path {
        [] => &[
            Section { heading: EXIT_STATUS, body: Body::ExitCodes },
            Section { heading: "CONFIGURATION", body: Body::Text(CONFIGURATION) },
        ],
        ["list"] => &[Section {
            heading: "NOTES",
            body: Body::Text(
                "The task flags are optional filters here: with none of them, every task key is listed.",
            ),
        }],
        ["export"] => &[Section {
            heading: "NOTES",
            body: Body::Text(
                "With no filter, every task row and every asset row is exported. The task flags are \
                 optional filters; task filters alone export task rows only, asset flags alone asset \
                 rows only.",
            ),
        }],
        ["stats"] => &[Section { heading: DESCRIPTION, body: Body::Text(STATS_EXPIRY) }],
        ["doctor"] => &[
            Section {
                heading: DESCRIPTION,
                body: Body::Terms {
                    lead: "Checks, read-only, each reported as ok, problem, warning, info or skipped:",
                    terms: DOCTOR_CHECKS,
                },
            },
            Section { heading: EXIT_STATUS, body: Body::ExitCodes },
        ],
        ["completions"] => &[
            Section { heading: "NOTES", body: Body::Text(COMPLETIONS_VALUES) },
            Section { heading: "EXAMPLES", body: Body::Text(COMPLETIONS_INSTALL) },
        ],
        ["man"] => &[Section { heading: "EXAMPLES", body: Body::Text(MAN_INSTALL) }],
        _ => &[],
    }
}

/// The width `--help`'s after-help is laid out to: clap's `max_term_width`, less a column.
const WIDTH: usize = 99;

/// What `--help` of the command at `path` prints after its flags: its [`sections`], a blank
/// line apart.
pub(crate) fn after_help(path: &[&str]) -> String {
    let texts: Vec<String> = sections(path)
        .iter()
        .map(|section| match &section.body {
            Body::Text(text) => (*text).to_string(),
            Body::Terms { lead, terms } => format!("{lead}\n{}", columns(terms.iter().copied(), 19)),
            Body::ExitCodes => {
                let rows: Vec<(String, &str)> =
                    exit_status(path).iter().map(|exit| (exit.label(), exit.when)).collect();
                format!(
                    "Exit codes:\n{}",
                    columns(rows.iter().map(|(label, when)| (label.as_str(), *when)), 3)
                )
            }
        })
        .collect();
    texts.join("\n\n")
}

/// Terms and their descriptions in two columns, the first `term_width` wide and indented by 2,
/// each description wrapped to [`WIDTH`] under its own column; a longer term has a line of its
/// own.
fn columns<'a>(rows: impl Iterator<Item = (&'a str, &'a str)>, term_width: usize) -> String {
    let indent = 2 + term_width + 2;
    let mut out = String::new();
    for (term, text) in rows {
        let mut line = if term.len() > term_width {
            format!("  {term}\n{}", " ".repeat(indent))
        } else {
            format!("  {term:<term_width$}  ")
        };
        let mut fresh = true;
        for word in text.split_whitespace() {
            let width = line.len() - line.rfind('\n').map_or(0, |at| at + 1);
            if !fresh && width + 1 + word.len() > WIDTH {
                out.push_str(line.trim_end());
                out.push('\n');
                line = " ".repeat(indent);
                fresh = true;
            }
            if !fresh {
                line.push(' ');
            }
            line.push_str(word);
            fresh = false;
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_wrap_under_their_column() {
        let text =
            columns([("0", "success"), ("130, 143", "stopped"), ("2", &"word ".repeat(30))].into_iter(), 3);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "  0    success");
        assert_eq!(lines[1..3], ["  130, 143", "       stopped"]);
        assert!(lines[3].starts_with("  2    word word") && lines[3].len() <= WIDTH, "{text}");
        assert!(lines[4].starts_with("       word"), "{text}");
    }

    /// Every code of every table is an exit code of `error.rs` and a row of docs/exit-codes.md.
    #[test]
    fn every_code_listed_is_documented() {
        let doc = include_str!("../docs/exit-codes.md");
        let documented: Vec<i32> = doc
            .lines()
            .filter_map(|line| line.strip_prefix("| ")?.split(" |").next()?.parse().ok())
            .collect();
        let known = [
            exit::SUCCESS,
            exit::NOT_FOUND,
            exit::USAGE,
            exit::CONFIG,
            exit::DATABASE,
            exit::SCHEMA,
            exit::OUTPUT,
            exit::BUSY,
            exit::UNHEALTHY,
            exit::CONFLICT,
            exit::AUTH,
            exit::DAMAGED,
            exit::INTERNAL,
            exit::SIGHUP,
            exit::SIGINT,
            exit::SIGQUIT,
            exit::SIGTERM,
        ];
        assert_eq!(documented, known, "docs/exit-codes.md's table");
        let top: Vec<i32> = TOP.iter().flat_map(|exit| exit.codes.iter().copied()).collect();
        assert_eq!(top, known, "the top page lists every code, in order");
    }
}
