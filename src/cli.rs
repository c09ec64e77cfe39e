//! The command line, as clap definitions. Nothing here touches a database: these types are
//! turned into validated options by the command modules before any connection is opened.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::help;
use crate::ops::import::Mode;
use crate::output::Format;

/// The help heading of the flags every command accepts, so that each command's own flags are
/// listed apart from them rather than interleaved.
const GLOBAL: &str = "Global options";
/// The help headings of the scope flags.
const TASK: &str = "Task scope";
const ASSET: &str = "Asset scope";
/// The help heading of the REST transport's flags.
pub(crate) const API: &str = "REST transport (Airflow's API instead of the database; docs/rest.md)";

/// The commands that go over Airflow's REST API when `--api-url` names one: the only ones whose
/// help, manual page and completions show the REST transport's flags.
const REST_COMMANDS: &[&str] = &["get", "set", "delete", "clear", "list"];

/// Inspect, edit and garbage-collect the Apache Airflow 3.3 task and asset state store,
/// directly in the metastore database or over Airflow's REST API.
#[derive(Debug, Parser)]
#[command(name = "state-store", version, about, after_help = help::after_help(&[]), max_term_width = 100)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// Airflow configuration file (airflow.cfg, or a .toml file with the same sections)
    #[arg(long, global = true, value_name = "PATH", help_heading = GLOBAL)]
    pub config: Option<PathBuf>,
    /// Database URL, overriding [database] sql_alchemy_conn (e.g. sqlite:////path/airflow.db)
    #[arg(long, global = true, value_name = "URL", help_heading = GLOBAL)]
    pub conn: Option<String>,
    /// Output format: table for people, json/yaml for programs, plain for shell variables
    #[arg(
        short = 'o',
        long,
        global = true,
        value_enum,
        value_name = "FORMAT",
        default_value_t = Format::Table,
        help_heading = GLOBAL
    )]
    pub output: Format,
    /// Detail on stderr: the database opened, or over --api-url the API server's version and
    /// each request with its answer and time (never a password or a token); for clean, a line
    /// per batch (its number, rows deleted, range of ids or of dag runs, milliseconds), for the
    /// orphan sweep too, and per query of a dry run (Airflow's `clean -v`)
    #[arg(short = 'v', long, global = true, help_heading = GLOBAL)]
    pub verbose: bool,
    /// No status lines on stderr: the summaries of delete, clear, export, import, clean and the
    /// other commands, list's paging note, progress bars and lines. Warnings, errors and the
    /// data on stdout stay
    #[arg(short = 'q', long, global = true, conflicts_with = "verbose", help_heading = GLOBAL)]
    pub quiet: bool,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// The REST transport's flags (docs/rest.md). No flag takes a token or a password: a command
/// line shows in `ps`.
#[derive(Debug, Args)]
pub(crate) struct ApiArgs {
    /// Base URL of Airflow's web server (with its path prefix, if any): get, set, delete, clear
    /// and list then go over its REST API v2, and no database is read. Also
    /// $STATE_STORE_API_URL
    #[arg(long, global = true, value_name = "URL", help_heading = API)]
    pub api_url: Option<String>,
    /// Command whose stdout is the bearer token, e.g. 'gcloud auth print-access-token'. Also
    /// $STATE_STORE_API_TOKEN_CMD; $AIRFLOW_CLI_TOKEN, a token itself, comes first
    #[arg(long, global = true, value_name = "CMD", help_heading = API)]
    pub api_token_cmd: Option<String>,
    /// User to log in as at /auth/token, with the password from $STATE_STORE_API_PASSWORD or
    /// asked for at a terminal. Also $STATE_STORE_API_USERNAME
    #[arg(long, global = true, value_name = "USER", help_heading = API)]
    pub api_username: Option<String>,
    /// PEM file of the certificate authorities to trust for an https URL, instead of the
    /// system's. Also $STATE_STORE_API_CA_FILE
    #[arg(long, global = true, value_name = "PATH", help_heading = API)]
    pub api_ca_file: Option<PathBuf>,
    /// Seconds to wait for a connection to the API [default: 10]
    #[arg(long, global = true, value_name = "SECONDS", value_parser = positive, help_heading = API)]
    pub api_connect_timeout: Option<u64>,
    /// Seconds one request may take, its answer read [default: 30]
    #[arg(long, global = true, value_name = "SECONDS", value_parser = positive, help_heading = API)]
    pub api_timeout: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Print the value stored under a key (exit 1 when it does not exist)
    Get(GetArgs),
    /// Store a JSON value under a key (an upsert, as Airflow does)
    Set(SetArgs),
    /// Delete one key (a missing key is not an error, as in Airflow)
    Delete(DeleteArgs),
    /// Delete every key of a task instance or an asset
    Clear(ClearArgs),
    /// List keys with their values, filtered by scope
    #[command(after_help = help::after_help(&["list"]))]
    List(ListArgs),
    /// Delete expired task keys and the keys of inactive assets, in batches
    Clean(CleanArgs),
    /// How big the state store is: rows, bytes and expiry per dag (or task) and per asset,
    /// task keys expiring per day over the next 30 days, the largest values and the tables'
    /// size on disk
    #[command(after_help = help::after_help(&["stats"]))]
    Stats(StatsArgs),
    /// Check the state store for damage and say what is wrong, check by check (exit 0 only
    /// when healthy, 8 when a check finds a problem, 5 when the schema is not recognised)
    #[command(after_help = help::after_help(&["doctor"]))]
    Doctor(DoctorArgs),
    /// Write rows as JSON Lines that `import` restores exactly (values, timestamps, writers)
    #[command(after_help = help::after_help(&["export"]))]
    Export(ExportArgs),
    /// Restore rows from an `export` file or a `--archive` of clean/clear, by upsert
    Import(ImportArgs),
    /// Show the configuration state-store reads, and where each value comes from
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Create and fill a throw-away Airflow 3.3 metastore, for trying the tool and for tests
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// Print a shell completion script for bash, zsh or fish: it completes commands, their flags
    /// and the values of flags that have a fixed set (-o formats, stats --by)
    #[command(after_help = help::after_help(&["completions"]))]
    Completions {
        /// The shell to complete for
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print a manual page in roff: the top page, or one command's page (`man clean`,
    /// `man config show`); --out-dir writes them all
    #[command(after_help = help::after_help(&["man"]))]
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// The command whose page to print, e.g. `clean` or `config show`; none for the top page
    #[arg(value_name = "COMMAND", conflicts_with = "out_dir")]
    pub command: Vec<String>,
    /// Write every page, one file per command, into this directory (created if missing)
    #[arg(long, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub out_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// Group task keys per dag or per task
    #[arg(long, value_enum, default_value_t = StatsBy::Dag)]
    pub by: StatsBy,
    /// How many of the largest values to show
    #[arg(long, value_name = "N", default_value_t = 5, allow_negative_numbers = true, value_parser = count)]
    pub largest: u64,
}

#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// How many offending rows each check shows
    #[arg(long, value_name = "N", default_value_t = 5, allow_negative_numbers = true, value_parser = count)]
    pub sample: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StatsBy {
    Dag,
    Task,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Every option with its value and source (flag, environment, _cmd, file and line, default);
    /// the database password is masked
    Show,
    /// One option's value, for scripts (exit 1 when it is unset or not an option state-store
    /// reads): `config get database sql_alchemy_conn`, or `config get database.sql_alchemy_conn`
    /// as `config show -o plain` names it
    Get {
        /// Section, e.g. state_store or database; or SECTION.KEY in one word
        section: String,
        /// Option, e.g. state_cleanup_batch_size (none when the first word is SECTION.KEY)
        key: Option<String>,
    },
}

/// Where a key lives: a task instance (--dag-id, --run-id, --task-id, --map-index) or an asset
/// (--asset, --asset-uri or --asset-id).
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct ScopeArgs {
    /// Dag id of the task instance
    #[arg(long, value_name = "DAG_ID", help_heading = TASK)]
    pub dag_id: Option<String>,
    /// Run id of the dag run
    #[arg(long, value_name = "RUN_ID", help_heading = TASK)]
    pub run_id: Option<String>,
    /// Task id of the task instance
    #[arg(long, value_name = "TASK_ID", help_heading = TASK)]
    pub task_id: Option<String>,
    /// Map index of a mapped task; -1 (the default) for an unmapped task
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = map_index, help_heading = TASK)]
    pub map_index: Option<i64>,
    /// Asset by name (active assets only)
    #[arg(long, value_name = "NAME", help_heading = ASSET)]
    pub asset: Option<String>,
    /// Asset by URI (active assets only)
    #[arg(long, value_name = "URI", help_heading = ASSET)]
    pub asset_uri: Option<String>,
    /// Asset by id (also reaches inactive assets)
    #[arg(long, value_name = "ID", allow_negative_numbers = true, value_parser = asset_id, help_heading = ASSET)]
    pub asset_id: Option<i64>,
}

#[derive(Debug, Args)]
pub(crate) struct GetArgs {
    /// The key (up to 512 characters; `/` and any other character allowed)
    pub key: String,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

#[derive(Debug, Args)]
pub(crate) struct SetArgs {
    /// The key (up to 512 characters; `/` and any other character allowed)
    pub key: String,
    /// The value as JSON text, e.g. '42', '"text"', '{"a": [1, 2]}'; `-` reads it from stdin
    #[arg(allow_hyphen_values = true)]
    pub value: String,
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Keep the key for this long (90s, 15m, 6h, 7d, 2w, 1h30m) or `never`;
    /// default: [state_store] default_retention_days. Task scope only
    #[arg(long, value_name = "DURATION", conflicts_with = "expires_at")]
    pub retention: Option<String>,
    /// Expire the key at this instant: RFC 3339 with Z or an offset (2026-12-31T00:00:00Z), or a
    /// date, taken as midnight UTC. Task scope only
    #[arg(long, value_name = "TIMESTAMP")]
    pub expires_at: Option<String>,
    /// Update an existing key: change its value and keep its expires_at, as Airflow's REST API
    /// PATCH does; a missing key is not found (exit 1). Not with --retention or --expires-at
    #[arg(long, conflicts_with_all = ["retention", "expires_at"])]
    pub keep_expiry: bool,
    /// Write a value longer than [state_store] max_value_storage_bytes anyway
    #[arg(long)]
    pub allow_large: bool,
    /// Write even when the task instance does not exist (yet), e.g. ahead of a mapped task's
    /// expansion; by default such a write is refused, as Airflow's REST API refuses it
    #[arg(long, help_heading = TASK)]
    pub allow_missing_task_instance: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DeleteArgs {
    /// The key to delete
    pub key: String,
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Delete even when the task instance does not exist (keys written without one); by
    /// default refused, as Airflow's REST API refuses it
    #[arg(long, help_heading = TASK)]
    pub allow_missing_task_instance: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ClearArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Clear every map index of the task, not only --map-index
    #[arg(long, conflicts_with = "map_index")]
    pub all_map_indices: bool,
    /// Clear even when the task instance does not exist (keys written without one); by
    /// default refused, as Airflow's REST API refuses it
    #[arg(long, help_heading = TASK)]
    pub allow_missing_task_instance: bool,
    /// Do not ask for confirmation (required when not on a terminal)
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// Before deleting, append the rows to this file in the export format (whole lines,
    /// fsynced first), then delete only the rows archived: a key rewritten since it was read
    /// is kept and named; `import` restores them
    #[arg(long, value_name = "FILE")]
    pub archive: Option<PathBuf>,
}

/// `--map-index` where the task flags filter (list, export): without it, every map index.
const MAP_INDEX_FILTER: &str =
    "Only this map index (-1 for an unmapped task); without it, every map index of the task";

#[derive(Debug, Args)]
#[command(mut_arg("map_index", |arg| arg.help(MAP_INDEX_FILTER)))]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// List the keys of every asset, orphans included
    #[arg(long, help_heading = ASSET, conflicts_with_all = ["asset", "asset_uri", "asset_id"])]
    pub assets: bool,
    /// Only task keys that have expired and not yet been cleaned
    #[arg(long)]
    pub expired: bool,
    /// Only keys whose value was offloaded by a worker-side backend ([workers]
    /// state_store_backend): a stored {"__airflow_state_ref__": "<ref>"}
    #[arg(long)]
    pub external: bool,
    /// At most this many rows; 0 means no limit. Default: 100 when stdout is a terminal (a note
    /// on stderr names the next --offset), every row when it is not (a pipe, a file, a
    /// script's $(...)). A table shows at most 10,000: -o plain, json or yaml for more
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = count)]
    pub limit: Option<u64>,
    /// Skip this many rows first
    #[arg(long, value_name = "N", default_value_t = 0, allow_negative_numbers = true, value_parser = count)]
    pub offset: u64,
}

#[derive(Debug, Args)]
#[command(mut_arg("map_index", |arg| arg.help(MAP_INDEX_FILTER)))]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Export the keys of every asset, orphans included (with task filters too: both)
    #[arg(long, help_heading = ASSET, conflicts_with_all = ["asset", "asset_uri", "asset_id"])]
    pub assets: bool,
    /// Only task keys that have expired and not yet been cleaned
    #[arg(long)]
    pub expired: bool,
    /// Only keys whose value is an external reference ({"__airflow_state_ref__": "<ref>"})
    #[arg(long)]
    pub external: bool,
    /// Write to this file instead of stdout: written beside it, fsynced and renamed over it once
    /// complete, so a failed export leaves the old file (a pipe or FIFO is written in place);
    /// `-` is stdout (./- for a file of that name)
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// The export file, or `-` for stdin
    #[arg(value_name = "FILE", allow_hyphen_values = true)]
    pub file: PathBuf,
    /// Check every line and count what would be restored; write nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Skip (and count) rows whose dag run or asset no longer exists, instead of refusing the file
    #[arg(long)]
    pub skip_missing: bool,
    /// Rows per transaction (at least 1); each is written in multi-row statements of up to 1,000
    #[arg(long, value_name = "N", default_value_t = 10_000, allow_negative_numbers = true, value_parser = positive)]
    pub batch_size: u64,
    /// Restore every whole line of a damaged file (cut by a crash or a full disk): each damaged
    /// line is named on stderr and counted, and the import exits 11 instead of 0
    #[arg(long)]
    pub skip_damaged: bool,
    /// Import values longer than [state_store] max_value_storage_bytes too
    #[arg(long)]
    pub allow_large: bool,
    /// When a row's key is already stored: newer keeps the later by updated_at, overwrite takes
    /// the file's row, skip keeps the stored one, fail refuses the file before writing (exit 9)
    #[arg(long, value_enum, value_name = "MODE", default_value_t = Mode::Newer)]
    pub on_conflict: Mode,
}

#[derive(Debug, Args)]
pub(crate) struct CleanArgs {
    /// Show what would be deleted (counts and a sample), delete nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Delete task keys that expired before this instant (RFC 3339) instead of now; never later than now
    #[arg(long, value_name = "TIMESTAMP")]
    pub before: Option<String>,
    /// Most rows deleted per batch, each its own transaction; 0: one transaction; auto: full
    /// speed while no other session of the database writes (0.8x to 1.3x the time of 10000),
    /// else batches of --batch-time with pauses 3 times as long (several times slower).
    /// Default: [state_store] state_cleanup_batch_size, where 0 (Airflow's default) means auto
    #[arg(long, value_name = "N|auto", allow_negative_numbers = true, value_parser = batch_size)]
    pub batch_size: Option<BatchSize>,
    /// With --batch-size auto: about how long each batch's transaction takes (default 10ms)
    #[arg(long, value_name = "DURATION")]
    pub batch_time: Option<String>,
    /// Rows shown in the sample of a dry run
    #[arg(long, value_name = "N", default_value_t = 10, allow_negative_numbers = true, value_parser = count)]
    pub sample: u64,
    /// Stop after deleting this many task rows, at least 1 (the rest is left for the next run)
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = positive)]
    pub max_rows: Option<u64>,
    /// Stop starting new batches after this long (e.g. 90s, 10m, 1h); the process ends by this
    /// + 15 s whatever the database or the network does (exit 4)
    #[arg(long, value_name = "DURATION")]
    pub max_duration: Option<String>,
    /// Pause after each batch that deleted rows, to throttle the load on the database (e.g.
    /// 200ms, 1s); with --batch-size auto, instead of its own pause
    #[arg(long, value_name = "DURATION")]
    pub sleep: Option<String>,
    /// Leave the keys of inactive assets alone; delete expired task keys only
    #[arg(long, conflicts_with = "orphans_only")]
    pub no_orphans: bool,
    /// Delete the keys of inactive assets only; leave expired task keys alone
    #[arg(long)]
    pub orphans_only: bool,
    /// Longest wait for a lock held by another session before a batch (or a dry run's read)
    /// fails
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub lock_timeout: String,
    /// Interval between plain progress lines on stderr when it is not a terminal; 0 prints
    /// none (at a terminal the bar is drawn instead, whatever this is)
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub progress_every: String,
    /// Before each batch's DELETE, append its expired rows to this file in the export format
    /// (whole lines, fsynced first), then delete only those, each if unchanged since it was
    /// read; `import` restores them
    #[arg(long, value_name = "FILE", conflicts_with = "dry_run")]
    pub archive: Option<PathBuf>,
    /// At the end of every run, success or failure, replace this file with the run's metrics
    /// in Prometheus's text format, for node_exporter's textfile collector (written to a
    /// temporary file in the same directory, then renamed)
    #[arg(long, value_name = "PATH", conflicts_with = "dry_run", value_hint = clap::ValueHint::FilePath)]
    pub metrics_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SandboxCommand {
    /// Create the Airflow 3.3.2 state-store tables in a new, empty database, named by --conn
    /// (required: never the configured Airflow database)
    Create {
        /// Also add example dag runs, assets and keys (some of them expired)
        #[arg(long)]
        sample_data: bool,
    },
    /// Add a dag run to a sandbox (refused on a real metastore); prints its id
    AddDagRun {
        /// Dag id of the new run
        #[arg(long)]
        dag_id: String,
        /// Run id of the new run
        #[arg(long)]
        run_id: String,
        /// Also create an unmapped task instance of this task in the run, as the scheduler
        /// does when it creates a run (repeat for several tasks)
        #[arg(long, value_name = "TASK_ID")]
        task_id: Vec<String>,
    },
    /// Add task instances to a dag run of a sandbox (refused on a real metastore): one per
    /// --map-index, or an unmapped one (map index -1) without it
    AddTaskInstance {
        /// Dag id of the run
        #[arg(long)]
        dag_id: String,
        /// Run id of the run
        #[arg(long)]
        run_id: String,
        /// Task id of the new task instance
        #[arg(long)]
        task_id: String,
        /// Map index of a mapped task instance (repeat for several, as a mapped task expands)
        #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = map_index)]
        map_index: Vec<i64>,
    },
    /// Add an asset to a sandbox (refused on a real metastore); prints its id
    AddAsset {
        /// Asset name
        #[arg(long)]
        name: String,
        /// Asset URI
        #[arg(long)]
        uri: String,
        /// Do not mark the asset active (its keys are then orphans that clean removes)
        #[arg(long)]
        inactive: bool,
    },
}

/// The command line as every user sees it: clap's definition, built, with the REST transport's
/// flags hidden under the commands they do not apply to (see [`scoped`]).
pub(crate) fn command() -> clap::Command {
    scoped(Cli::command())
}

/// Parses a command line with [`command`], as `Cli::try_parse_from` would with clap's own.
pub(crate) fn parse(args: &[OsString]) -> Result<Cli, clap::Error> {
    let mut command = command();
    let mut matches = command.try_get_matches_from_mut(args)?;
    Cli::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut command))
}

/// `command` with the REST transport's flags hidden on every command but [`REST_COMMANDS`], in
/// help, manual pages and completions alike: 14 of `clean --help`'s lines were flags clean
/// refuses. They stay global, so that `state-store --api-url URL get …` parses, and `clean
/// --api-url …` too, to be refused with the reason rather than as an unknown flag. clap hands
/// a global flag down to each command when it builds them, unless the command has a flag of
/// that id already: each other command is given a hidden copy first, which its own commands
/// inherit in turn. (Hiding them after the build instead leaves clap's index of flags stale,
/// and `clean --help` then asked for a value of --api-timeout.)
pub(crate) fn scoped(command: clap::Command) -> clap::Command {
    let hidden: Vec<clap::Arg> = api_args().into_iter().map(|arg| arg.hide(true)).collect();
    let names: Vec<String> = command
        .get_subcommands()
        .map(|sub| sub.get_name().to_string())
        .filter(|name| !REST_COMMANDS.contains(&name.as_str()))
        .collect();
    names.iter().fold(command, |command, name| command.mut_subcommand(name, |sub| sub.args(hidden.clone())))
}

/// The command line as the completion scripts offer it: the REST transport's flags on the top
/// command and on [`REST_COMMANDS`] only. clap_complete offers hidden flags too, so
/// [`scoped`]'s hidden copies would still be completed: here the flags are not global, and each
/// of those commands has its own. Only completions are built from this; nothing is parsed
/// with it.
pub(crate) fn for_completions() -> clap::Command {
    let local: Vec<clap::Arg> = api_args().into_iter().map(|arg| arg.global(false)).collect();
    let command = local
        .iter()
        .fold(Cli::command(), |command, arg| command.mut_arg(arg.get_id(), |arg| arg.global(false)));
    REST_COMMANDS
        .iter()
        .fold(command, |command, name| command.mut_subcommand(name, |sub| sub.args(local.clone())))
}

/// The REST transport's flags, as [`ApiArgs`] declares them.
fn api_args() -> Vec<clap::Arg> {
    ApiArgs::augment_args(clap::Command::new("api")).get_arguments().cloned().collect()
}

/// The format of a `clean -o json` (or `-o yaml`) whose command line clap rejected: such a run
/// still prints its one document on stdout, holding the error (docs/output.md). Clap stops at
/// the first word it rejects, so this is what the words before it say: `clean`, and `-o json`
/// or `-o yaml` before the subcommand or after it. `None` for any other command line.
pub(crate) fn rejected_clean_format(args: &[OsString]) -> Option<Format> {
    let partial = Cli::command().ignore_errors(true).try_get_matches_from(args).ok()?;
    let (name, clean) = partial.subcommand()?;
    if name != "clean" {
        return None;
    }
    let given = |m: &ArgMatches| {
        (m.value_source("output") == Some(ValueSource::CommandLine))
            .then(|| m.get_one::<Format>("output").copied())
            .flatten()
    };
    given(clean).or_else(|| given(&partial)).filter(|f| matches!(f, Format::Json | Format::Yaml))
}

/// A count of rows, 0 included. clap's own message for `-1` or `x` ("invalid digit found in
/// string") does not say what is expected.
fn count(text: &str) -> Result<u64, String> {
    whole(text, 0)
}

/// `clean --batch-size`: a number of rows, or `auto` (see `ops::clean::Options::batch_time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchSize {
    Rows(u64),
    Auto,
}

fn batch_size(text: &str) -> Result<BatchSize, String> {
    if text.trim().eq_ignore_ascii_case("auto") {
        return Ok(BatchSize::Auto);
    }
    whole(text, 0).map(BatchSize::Rows).map_err(|e| format!("{e}, or auto"))
}

/// A count of rows, at least 1.
fn positive(text: &str) -> Result<u64, String> {
    whole(text, 1)
}

fn whole(text: &str, at_least: u64) -> Result<u64, String> {
    match text.parse::<i128>() {
        Ok(n) if n < i128::from(at_least) => Err(format!("give a whole number of {at_least} or more")),
        Ok(n) => u64::try_from(n).map_err(|_| format!("too large: at most {}", u64::MAX)),
        Err(_) => Err(format!("not a whole number: give {at_least} or more")),
    }
}

/// A map index: -1 for an unmapped task, 0 and up for the instances of a mapped one.
fn map_index(text: &str) -> Result<i64, String> {
    const GIVE: &str = "give -1 for an unmapped task, or 0 and up for a mapped one";
    match text.parse::<i128>() {
        Ok(n) => i64::try_from(n).map_err(|_| format!("out of range: {GIVE}")),
        Err(_) => Err(format!("not a whole number: {GIVE}")),
    }
}

/// An asset's id, 1 and up as the database numbers them. Parsed here rather than by clap's own
/// parser, whose messages ("number too large to fit in target type", or `-1` taken for a flag)
/// do not say what is expected.
fn asset_id(text: &str) -> Result<i64, String> {
    match text.parse::<i128>() {
        Ok(n) if n < 1 => Err("an asset id is a whole number of 1 or more".to_string()),
        Ok(n) => i64::try_from(n).map_err(|_| format!("too large: an asset id is at most {}", i64::MAX)),
        Err(_) => Err("not a whole number: an asset id is 1 or more".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_of(line: &str) -> Option<Format> {
        let args: Vec<OsString> = line.split_whitespace().map(OsString::from).collect();
        assert!(Cli::try_parse_from(&args).is_err(), "{line} is rejected by clap");
        rejected_clean_format(&args)
    }

    #[test]
    fn a_rejected_clean_keeps_the_format_given_before_the_error() {
        assert_eq!(format_of("state-store clean -o json --bogus"), Some(Format::Json));
        assert_eq!(format_of("state-store -o yaml clean --bogus"), Some(Format::Yaml));
        assert_eq!(format_of("state-store --output=json clean --max-rows 0"), Some(Format::Json));
        assert_eq!(format_of("state-store clean -ojson --batch-size abc"), Some(Format::Json));
        assert_eq!(format_of("state-store clean -v -o json --no-orphans --orphans-only"), Some(Format::Json));
        assert_eq!(format_of("state-store clean --no-orphans --orphans-only -o json"), Some(Format::Json));
        assert_eq!(format_of("state-store clean --dry-run --archive a.jsonl -o json"), Some(Format::Json));
        assert_eq!(format_of("state-store clean -o json --sample"), Some(Format::Json));
    }

    #[test]
    fn other_rejected_command_lines_have_no_document() {
        // Clap stopped before it read `-o json`: the words before the error decide.
        assert_eq!(format_of("state-store clean --bogus -o json"), None);
        assert_eq!(format_of("state-store --bogus clean -o json"), None);
        assert_eq!(format_of("state-store clean -o table --bogus"), None);
        assert_eq!(format_of("state-store clean -o plain --bogus"), None);
        assert_eq!(format_of("state-store clean -o jsn"), None);
        assert_eq!(format_of("state-store list -o json --bogus"), None);
        assert_eq!(format_of("state-store cleann -o json"), None);
        assert_eq!(format_of("state-store -o json"), None);
    }
}
