//! One module per subcommand, each thin: turn arguments into validated options, call the
//! database layer, hand a report to [`crate::output`]. This module holds what they share:
//! loading the configuration, opening the metastore, and validating scopes and keys.

mod clean;
mod clear;
mod config_cmd;
mod delete;
mod doctor;
mod export;
mod generated;
mod get;
mod import;
mod list;
mod sandbox;
mod set;
mod stats;

use crate::api;
use crate::cli::{Cli, Command, GlobalArgs, ScopeArgs};
use crate::config::{self, Overrides, Settings, Source};
use crate::db::{self, Access, Store, Timeouts};
use crate::error::{Error, Result};
use crate::keys::Keys;
use crate::keys::database::Database;
use crate::model::{AssetSelector, MAX_ID_CHARS, MAX_KEY_CHARS, TaskFilter, TaskScope};
use crate::ops::usage;
use crate::output;
use crate::output::Format;
use crate::url::{DbUrl, SqliteTarget};
use anyhow::Context as _;
pub(crate) use clean::command_line_rejected as clean_command_line_rejected;

pub(crate) fn run(cli: Cli) -> Result<()> {
    let Cli { global, command } = cli;
    output::set_quiet(global.quiet);
    match command {
        Command::Get(args) => get::run(&global, &args),
        Command::Set(args) => set::run(&global, &args),
        Command::Delete(args) => delete::run(&global, &args),
        Command::Clear(args) => clear::run(&global, &args),
        Command::List(args) => list::run(&global, &args),
        Command::Clean(args) => clean::run(&global, &args),
        Command::Stats(args) => stats::run(&global, &args),
        Command::Doctor(args) => doctor::run(&global, &args),
        Command::Export(args) => export::run(&global, &args),
        Command::Import(args) => import::run(&global, &args),
        Command::Config(args) => config_cmd::run(&global, &args),
        Command::Completions { shell } => generated::completions(shell),
        Command::Man(args) => generated::man(&args),
        Command::Sandbox(args) => sandbox::run(&global, &args),
    }
}

/// The keys of the per-scope commands (get, set, delete, clear, list), through the metastore
/// database or, when `--api-url` or `$STATE_STORE_API_URL` names one, Airflow's REST API. The
/// API is never chosen by anything else (an `[api] base_url` in airflow.cfg is the server's own
/// address, not a request). Nothing is opened yet: the database at the first call that needs
/// it, the API at the first request.
pub(crate) fn open_keys(global: &GlobalArgs, access: Access) -> Result<Box<dyn Keys>> {
    match api_options(global)? {
        Some(options) => Ok(Box::new(api::Remote::new(options))),
        None => {
            let ctx = Context::load(global, None)?;
            Ok(Box::new(Database::new(ctx.settings.clone(), Box::new(move || ctx.open(access)))))
        }
    }
}

/// The REST transport's settings, checked, when a URL names it.
fn api_options(global: &GlobalArgs) -> Result<Option<api::Options>> {
    let Some((url, origin)) = api_url(global)? else { return Ok(None) };
    let database = [("--conn", global.conn.is_some()), ("--config", global.config.is_some())];
    if let Some((flag, _)) = database.iter().find(|(_, given)| *given) {
        return usage(format!(
            "{origin} sends the command to Airflow's REST API and {flag} names a database: give one or the other"
        ));
    }
    let base = api::BaseUrl::parse(&url, origin)?;
    // Read before anything is chosen: a token or password that is not UTF-8 is refused by
    // name (exit 3), never taken for unset.
    let vars = crate::env::vars(&[
        "AIRFLOW_CLI_TOKEN",
        "STATE_STORE_API_TOKEN_CMD",
        "STATE_STORE_API_USERNAME",
        "STATE_STORE_API_PASSWORD",
        "STATE_STORE_API_CA_FILE",
    ])?;
    let env = |name: &str| vars.get(name).cloned();
    let flags = &global.api;
    let credentials =
        api::Credentials::choose(flags.api_token_cmd.as_deref(), flags.api_username.as_deref(), &env);
    let ca_file = flags
        .api_ca_file
        .clone()
        .or_else(|| env("STATE_STORE_API_CA_FILE").filter(|f| !f.is_empty()).map(std::path::PathBuf::from));
    let seconds = std::time::Duration::from_secs;
    let settings = api::Settings {
        connect_timeout: seconds(flags.api_connect_timeout.unwrap_or(10)),
        timeout: seconds(flags.api_timeout.unwrap_or(30)),
        ca_file,
        verbose: global.verbose,
    };
    Ok(Some(api::Options { base, credentials, settings }))
}

/// A command that works on the metastore database only refuses the REST transport, before
/// anything is read or sent.
pub(crate) fn refuse_api(global: &GlobalArgs, command: &str) -> Result<()> {
    match api_url(global)? {
        Some((_, origin)) => usage(format!(
            "{command} works on the metastore database only: Airflow's REST API has no endpoint for it; \
             unset {origin} and give the database (--conn or airflow.cfg), see docs/rest.md"
        )),
        None => Ok(()),
    }
}

/// The API's base URL and where it came from, when one is given. A `STATE_STORE_API_URL`
/// that is not UTF-8 is refused (exit 3): taken for unset, it would run the command on the
/// database instead.
fn api_url(global: &GlobalArgs) -> Result<Option<(String, &'static str)>> {
    if let Some(url) = &global.api.api_url {
        return Ok(Some((url.clone(), "--api-url")));
    }
    Ok(crate::env::var("STATE_STORE_API_URL")?
        .filter(|u| !u.trim().is_empty())
        .map(|u| (u, "$STATE_STORE_API_URL")))
}

/// The validated configuration of one run: everything is checked before a database is opened.
pub(crate) struct Context {
    pub settings: Settings,
    pub url: DbUrl,
    pub format: Format,
    /// `-v`: say on stderr which database is opened and how long it took.
    pub verbose: bool,
}

impl Context {
    pub(crate) fn load(global: &GlobalArgs, batch_size: Option<&str>) -> Result<Context> {
        let overrides = Overrides {
            config_path: global.config.clone(),
            conn: global.conn.clone().map(crate::redact::Masked),
            batch_size: batch_size.map(str::to_string),
            schema: None,
        };
        let settings = config::load(&overrides, &crate::env::os).map_err(Error::from)?;
        let conn = &settings.sql_alchemy_conn;
        let url = DbUrl::parse(&conn.value.0).map_err(|error| error.into_error(&conn.source))?;
        for password in url.passwords() {
            crate::redact::register(password);
        }
        // No output of this run may be the SQLite database or a file beside it: known from
        // here on, so that a command refuses such an output before the database is opened.
        if let Some(crate::url::SqliteTarget::File(path)) = url.sqlite_target() {
            crate::fs::protect_database(&path);
        }
        // Once per run, whatever number of its values are used.
        if let Some(untrusted) = &settings.untrusted_config {
            output::warn(&untrusted.warning());
        }
        if let Some(missing) = settings.missing_config.as_ref().filter(|m| m.named_by == "$AIRFLOW_CONFIG") {
            output::warn(&format!(
                "$AIRFLOW_CONFIG names {}, which does not exist: Airflow's defaults and the environment apply",
                missing.path.display()
            ));
        }
        Ok(Context { settings, url, format: global.output, verbose: global.verbose })
    }

    /// The format of a command that prints one value: its table is the plain line.
    pub(crate) fn one_value_format(&self) -> Format {
        if self.format == Format::Table { Format::Plain } else { self.format }
    }

    /// Opens the metastore's state-store tables; a failure names where its URL came from. With a
    /// custom `[state_store] backend` the tables are not where Airflow keeps its state, and every
    /// command that reads or writes them says so (`clean` skips before it gets here, as
    /// Airflow's does).
    pub(crate) fn open(&self, access: Access) -> Result<Store> {
        self.open_with(access, &self.timeouts())
    }

    /// [`Context::open`] with other bounds than the configured ones (clean's `--lock-timeout`).
    pub(crate) fn open_with(&self, access: Access, timeouts: &Timeouts) -> Result<Store> {
        self.warn_custom_backend();
        let started = std::time::Instant::now();
        let store = self.located(db::open(
            &self.url,
            self.settings.sql_alchemy_schema.value.as_deref(),
            access,
            timeouts,
        ))?;
        if self.verbose {
            output::note(&format!(
                "db: {} opened in {} ms ([database] sql_alchemy_conn from {})",
                self.url.redacted(),
                started.elapsed().as_millis(),
                self.settings.sql_alchemy_conn.source
            ));
        }
        Ok(store)
    }

    /// The bounds of every wait on the database, from `[state_store] database_timeout`.
    pub(crate) fn timeouts(&self) -> Timeouts {
        Timeouts::new(std::time::Duration::from_secs(self.settings.database_timeout.value))
    }

    /// A database or schema error of opening the metastore, with where its URL came from: the
    /// flag, the environment, the config file and line, or the default when no config file
    /// was found (and which one was looked for). When no config file was found and the default
    /// URL's SQLite file does not exist either, nothing names a database: the configuration is
    /// what is missing (exit 3), not the database (4).
    pub(crate) fn located<T>(&self, result: Result<T>) -> Result<T> {
        let conn = &self.settings.sql_alchemy_conn;
        if let (Source::Default, Some(missing), Err(e)) =
            (&conn.source, &self.settings.missing_config, &result)
            && matches!(crate::error::kind(e), Some(Error::Database { .. }))
            && let Some(SqliteTarget::File(path)) = self.url.sqlite_target()
            && !path.exists()
        {
            let database = path.display().to_string();
            return result.map_err(|_| Error::Config(no_configuration(missing, &database)).into());
        }
        let origin = match (&conn.source, &self.settings.missing_config) {
            (Source::Default, Some(missing)) => {
                format!("the default [database] sql_alchemy_conn: the configuration file {missing}")
            }
            (source, _) => format!("[database] sql_alchemy_conn from {source}"),
        };
        result.map_err(|mut e| {
            match e.downcast_mut::<Error>() {
                Some(Error::Database { context, .. }) => context.push_str(&format!(" ({origin})")),
                Some(Error::Schema(message)) => message.push_str(&format!(" ({origin})")),
                _ => {}
            }
            e
        })
    }

    /// Says on stderr when `[state_store] backend` is not Airflow's metastore backend: Airflow
    /// then keeps task state in that backend, not in the tables this tool reads and writes.
    fn warn_custom_backend(&self) {
        if !self.settings.is_builtin_backend() {
            output::warn(&format!(
                "[state_store] backend is {} (from {}), not the metastore backend: Airflow keeps its state \
                 there, not in the tables state-store reads and writes",
                self.settings.backend.value, self.settings.backend.source
            ));
        }
    }
}

/// The `error` member of a document whose command failed after it did part of its work: the
/// message, masked, and the exit code.
#[derive(serde::Serialize)]
pub(crate) struct ErrorMember {
    message: String,
    exit_code: i32,
}

impl ErrorMember {
    pub(crate) fn new(message: &str, exit_code: i32) -> ErrorMember {
        ErrorMember { message: crate::redact::mask(message), exit_code }
    }

    pub(crate) fn of(error: &anyhow::Error) -> ErrorMember {
        ErrorMember::new(&crate::error::message(error.as_ref()), crate::error::exit_code(error))
    }
}

/// Where a command acts: one task instance, or one asset.
pub(crate) enum Scope {
    Task(TaskScope),
    Asset(AssetSelector),
}

/// `value` (`what` in messages) not empty and at most `max` characters, which is what `holds`.
fn check_length(what: &str, value: &str, max: usize, holds: &str) -> Result<()> {
    match value.chars().count() {
        0 => usage(format!("{what} must not be empty")),
        chars if chars > max => usage(format!("{what} is {chars} characters long; {holds} at most {max}")),
        _ => Ok(()),
    }
}

/// A key to look up or delete: anything but empty. Longer keys than Airflow's 512 are still
/// found, as SQLite does not enforce the column's length and Airflow may have stored them.
pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() { usage("the key must not be empty") } else { Ok(()) }
}

/// A key to write: not empty and within Airflow's `VARCHAR(512)`.
pub(crate) fn check_new_key(key: &str) -> Result<()> {
    check_length("the key", key, MAX_KEY_CHARS, "Airflow keys hold")
}

/// Every command that takes `--map-index` checks it here, before any database is opened:
/// Airflow's column is a 32-bit `INTEGER` on every database, and SQLite, which would store a
/// larger number, must refuse it as PostgreSQL and MySQL do (a lookup would only say "not
/// found").
pub(crate) fn check_map_index(map_index: i64) -> Result<()> {
    if map_index < -1 {
        return usage(format!(
            "--map-index {map_index} is invalid: use -1 for an unmapped task, or 0 and up"
        ));
    }
    if i32::try_from(map_index).is_err() {
        return usage(format!(
            "--map-index {map_index} is out of range: Airflow's map_index column holds at most {}",
            i32::MAX
        ));
    }
    Ok(())
}

pub(crate) fn has_task_flags(args: &ScopeArgs) -> bool {
    args.dag_id.is_some() || args.run_id.is_some() || args.task_id.is_some() || args.map_index.is_some()
}

/// Exactly one asset selector, or `None` when no asset flag was given.
pub(crate) fn asset_selector(args: &ScopeArgs) -> Result<Option<AssetSelector>> {
    let mut given: Vec<AssetSelector> = [
        args.asset.clone().map(AssetSelector::Name),
        args.asset_uri.clone().map(AssetSelector::Uri),
        args.asset_id.map(AssetSelector::Id),
    ]
    .into_iter()
    .flatten()
    .collect();
    match given.len() {
        0 => Ok(None),
        1 => Ok(given.pop()),
        _ => usage("give only one of --asset, --asset-uri and --asset-id"),
    }
}

/// The task keys the scope flags select (any part of a scope), for `list` and `export`.
pub(crate) fn task_filter(args: &ScopeArgs, expired: bool, external_only: bool) -> TaskFilter {
    TaskFilter {
        dag_id: args.dag_id.clone(),
        run_id: args.run_id.clone(),
        task_id: args.task_id.clone(),
        map_index: args.map_index,
        expired_before: expired.then(crate::time::Timestamp::now),
        external_only,
    }
}

/// Turns scope flags into one scope, refusing incomplete or mixed ones.
pub(crate) fn scope_from_args(args: &ScopeArgs) -> Result<Scope> {
    if let Some(selector) = asset_selector(args)? {
        if has_task_flags(args) {
            return usage(
                "give either a task scope (--dag-id, --run-id, --task-id) or an asset (--asset, --asset-uri, --asset-id), not both",
            );
        }
        return Ok(Scope::Asset(selector));
    }
    let missing: Vec<&str> =
        [("--dag-id", &args.dag_id), ("--run-id", &args.run_id), ("--task-id", &args.task_id)]
            .into_iter()
            .filter(|(_, v)| v.is_none())
            .map(|(flag, _)| flag)
            .collect();
    match (&args.dag_id, &args.run_id, &args.task_id) {
        (Some(dag_id), Some(run_id), Some(task_id)) => {
            for (flag, value) in [("--dag-id", dag_id), ("--run-id", run_id), ("--task-id", task_id)] {
                check_length(flag, value, MAX_ID_CHARS, "Airflow's column holds")?;
            }
            let map_index = args.map_index.unwrap_or(-1);
            check_map_index(map_index)?;
            Ok(Scope::Task(TaskScope {
                dag_id: dag_id.clone(),
                run_id: run_id.clone(),
                task_id: task_id.clone(),
                map_index,
            }))
        }
        _ if missing.len() == 3 && args.map_index.is_none() => usage(
            "give a task scope (--dag-id, --run-id, --task-id) or an asset (--asset, --asset-uri, --asset-id)",
        ),
        _ => usage(format!("a task scope also needs {}", missing.join(", "))),
    }
}

/// Reads a whole stream as UTF-8, for `set KEY -`.
pub(crate) fn read_stdin() -> Result<String> {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
        .with_context(|| Error::Usage("cannot read the value from stdin".to_string()))?;
    // JSON's own message for nothing ("Expecting value: line 1 column 1") would send the
    // user looking for a typo in text that never arrived: a pipe from a command that failed.
    if text.trim().is_empty() {
        let what = if text.is_empty() { "empty" } else { "only whitespace" };
        return usage(format!(
            "invalid value: stdin was {what}; `-` reads the value's JSON text from stdin (e.g. echo '{{\"a\": 1}}' | state-store set KEY - ...)"
        ));
    }
    Ok(text)
}

/// The error when neither the configuration file looked for nor the default database exists:
/// each said once, and the paths cut in their middle so that the line ends whole within
/// [`ERROR_LINE_CHARS`](crate::error::ERROR_LINE_CHARS) (the cause, SQLite's "the file does not
/// exist", says nothing more).
fn no_configuration(missing: &config::MissingConfig, database: &str) -> String {
    let text = |file: &str, database: &str| {
        format!(
            "no Airflow configuration: neither the configuration file {file} (named by {}) nor {database}, the \
             database of the default [database] sql_alchemy_conn, exists; give --config, or set $AIRFLOW_HOME or \
             $AIRFLOW_CONFIG as Airflow has them, or name the database with --conn or \
             AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
            missing.named_by
        )
    };
    let file = missing.path.display().to_string();
    let (file, database) = (crate::text::cell(&file).into_owned(), crate::text::cell(database).into_owned());
    let room = crate::error::ERROR_LINE_CHARS.saturating_sub("error: ".len() + text("", "").chars().count());
    let (f, d) = (file.chars().count(), database.chars().count());
    let (f, d) = if f + d <= room {
        (f, d)
    } else if f <= room / 2 {
        (f, room - f)
    } else if d <= room / 2 {
        (room - d, d)
    } else {
        (room / 2, room - room / 2)
    };
    text(&crate::text::cut_middle(&file, f), &crate::text::cut_middle(&database, d))
}
