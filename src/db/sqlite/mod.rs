//! SQLite, Airflow's embedded default metastore.
//!
//! Airflow stores SQLite timestamps as text `YYYY-MM-DD HH:MM:SS.ffffff` (UTC, no offset) and
//! compares `expires_at < ?` as strings, so every bound timestamp uses exactly that form. Each
//! connection turns foreign keys on (as Airflow does, so a write for a vanished dag run fails
//! instead of leaving an orphan) and waits for a busy database instead of failing at once.

mod clean;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{OpenFlags, params_from_iter};

use super::dialect::{Connection, Dialect, OnConflict, Upsert, first};
use super::dialect::{Finding, FoundRow, Place, QuietPace, Restored, WriteMark, in_transaction};
use super::doctor::{find, task_row};
use super::query::{Cell, Fields, Param, Query, Row};
use super::restore::ChunkSql;
use super::schema::ddl_statements;
use super::{Access, Purpose, sandbox};
use crate::error::{Cause, Error, Result};
use crate::text::quote;
use crate::time::Timestamp;
use crate::url::{DbUrl, SqliteTarget};

/// How long a statement waits for another connection's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The tables of a sandbox, as `airflow db migrate` leaves them.
const SCHEMA: &str = include_str!("schema.sql");

pub(crate) struct SqliteConnection {
    conn: rusqlite::Connection,
    location: String,
    path: Option<PathBuf>,
    /// Held while a clean runs: the one-clean-at-a-time guard. Declared after `conn`, so the
    /// connection is closed (and its WAL checkpointed) before the lock is let go.
    clean_lock: Option<clean::CleanLock>,
    chunks: ChunkSql,
    /// The URL's `mode=ro` or `immutable=1`: the file is opened read-only, and a command that
    /// writes is refused up front.
    read_only_url: Option<&'static str>,
    /// The most rows a clean's batch may delete for its pages to fit in the free space beside
    /// the database (see `clean::batch_rows_bound`), set when a clean begins.
    batch_bound: Option<u64>,
}

/// SQLite's own words, plus what to check when they are about permissions: "attempt to write
/// a readonly database" also comes from a read, when the directory of a WAL database is not
/// writable and SQLite cannot create the `-wal` and `-shm` files it needs beside the file.
/// When the file system itself is mounted read-only for this process, permissions are not the
/// cause and look right: the hint names the mount instead (a systemd unit's
/// `ProtectHome=read-only` makes `/home`, Airflow's default home, such a mount).
#[derive(Debug)]
struct SqliteError {
    error: rusqlite::Error,
    read_only_mount: bool,
}

impl std::error::Error for SqliteError {}

impl std::fmt::Display for SqliteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.error)?;
        match self.error.sqlite_error_code() {
            Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen) if self.read_only_mount => {
                f.write_str(READ_ONLY_MOUNT)
            }
            Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen) => f.write_str(
                " (SQLite needs write access to the database file and to its directory, where it \
                 creates the -wal, -shm and -journal files; check their permissions)",
            ),
            _ => Ok(()),
        }
    }
}

/// Why a database on a read-only mount cannot be used, whatever its permissions say.
const READ_ONLY_MOUNT: &str = " (the file system holding it is read-only for this process: a read-only \
     mount, or a systemd unit's ProtectHome=read-only or ProtectSystem=; SQLite writes beside the \
     file, even to read it in WAL mode: make its directory writable, e.g. ReadWritePaths= in a \
     drop-in, see docs/operations.md)";

fn cause(e: rusqlite::Error) -> Cause {
    Box::new(SqliteError { error: e, read_only_mount: false })
}

/// [`cause`] for an error of the file at `path`, which says when its mount is read-only.
fn cause_at(e: rusqlite::Error, path: Option<&Path>) -> Cause {
    Box::new(SqliteError { error: e, read_only_mount: path.is_some_and(on_read_only_mount) })
}

/// Whether the file system holding `path` is mounted read-only for this process.
fn on_read_only_mount(path: &Path) -> bool {
    rustix::fs::statvfs(path).is_ok_and(|stat| stat.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
}

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Param::Int(Some(n)) => ToSqlOutput::Owned(Value::Integer(n)),
            Param::Text(Some(text)) => ToSqlOutput::Borrowed(ValueRef::Text(text.as_bytes())),
            Param::Time(Some(at)) => ToSqlOutput::Owned(Value::Text(at.to_sqlite_text())),
            // `LIMIT -1` is SQLite's "no limit".
            Param::Limit(n) => {
                ToSqlOutput::Owned(Value::Integer(n.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX))))
            }
            Param::Int(None) | Param::Text(None) | Param::Time(None) => ToSqlOutput::Owned(Value::Null),
        })
    }
}

/// Values are TEXT, but a damaged or foreign row may hold anything: it is shown, not refused.
fn cell(value: ValueRef<'_>) -> Cell {
    match value {
        ValueRef::Null => Cell::Null,
        ValueRef::Integer(n) => Cell::Int(n),
        ValueRef::Real(f) => Cell::Other(f.to_string()),
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => {
            Cell::Text(String::from_utf8_lossy(bytes).into_owned())
        }
    }
}

impl SqliteConnection {
    /// SQLite waits only for another connection's lock, a file on this machine: its own busy
    /// timeout bounds that (clean's --lock-timeout sets it), and `timeouts` has nothing more
    /// to bound.
    pub(super) fn open(
        url: &DbUrl,
        access: Access,
        purpose: Purpose,
        _timeouts: &super::Timeouts,
    ) -> Result<Self> {
        let target = url.sqlite_target().ok_or_else(|| {
            Error::Config(format!("[database] sql_alchemy_conn {} is not a SQLite URL", url.redacted()))
        })?;
        let (conn, location, path) = match (target, purpose) {
            (SqliteTarget::Memory, Purpose::Sandbox) => {
                anyhow::bail!(Error::Usage(
                    "a sandbox needs a SQLite file (an in-memory database would vanish at exit)".to_string(),
                ));
            }
            (SqliteTarget::Memory, Purpose::Metastore) => (
                rusqlite::Connection::open_in_memory()
                    .map_err(|e| Error::db("cannot open an in-memory SQLite database", cause(e)))?,
                "the in-memory SQLite database".to_string(),
                None,
            ),
            (SqliteTarget::File(path), purpose) => {
                let location = format!("SQLite database {}", path.display());
                let read_only = url.sqlite_read_only();
                if let (Some(why), Purpose::Sandbox) = (read_only, purpose) {
                    return Err(read_only_refusal(&location, why));
                }
                let conn = open_file(&path, &location, purpose, read_only.is_some())?;
                // From now on no output of this process may be this file or its -wal, -shm
                // or -journal.
                crate::fs::protect_database(&path);
                (conn, location, Some(path))
            }
        };
        let connection = SqliteConnection {
            conn,
            location,
            path,
            clean_lock: None,
            chunks: ChunkSql::default(),
            read_only_url: url.sqlite_read_only(),
            batch_bound: None,
        };
        connection.prepare(access)?;
        Ok(connection)
    }

    fn prepare(&self, access: Access) -> Result<()> {
        let fail = |e| Error::db(format!("cannot use {}", self.location), cause_at(e, self.path.as_deref()));
        self.conn.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
        // Reading sqlite_master is the first real read: a file that is not a database fails here.
        self.conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get::<_, i64>(0))
            .map_err(fail)?;
        self.conn.execute_batch("PRAGMA foreign_keys = ON").map_err(fail)?;
        if access == Access::ReadOnly {
            self.conn.execute_batch("PRAGMA query_only = ON").map_err(fail)?;
        }
        // Every statement of the tool is prepared once per connection, clean's batches and
        // import's upserts most of all.
        self.conn.set_prepared_statement_cache_capacity(64);
        Ok(())
    }

    fn error(&self, what: &str, e: rusqlite::Error) -> Error {
        Error::db(format!("{what} in {}", self.location), cause_at(e, self.path.as_deref()))
    }
}

/// Opens a database file. A metastore is never created: a mistyped path must be an error, not
/// a new empty database; a sandbox is.
/// A write through a URL that says read-only: the configuration's doing (exit 3), not the
/// database's.
fn read_only_refusal(location: &str, why: &str) -> anyhow::Error {
    Error::Config(format!(
        "cannot write to {location}: [database] sql_alchemy_conn opens it read-only ({why}); commands that \
         only read (get, list, stats, export, doctor, clean --dry-run) still work"
    ))
    .into()
}

fn open_file(path: &Path, location: &str, purpose: Purpose, read_only: bool) -> Result<rusqlite::Connection> {
    let context = || format!("cannot open {location}");
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && purpose == Purpose::Metastore => {
            return Err(Error::db(context(), "the file does not exist").into());
        }
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::db(context(), e).into()),
        Ok(meta) if meta.is_dir() => return Err(Error::db(context(), "it is a directory").into()),
        _ => {}
    }
    let mut flags =
        if read_only { OpenFlags::SQLITE_OPEN_READ_ONLY } else { OpenFlags::SQLITE_OPEN_READ_WRITE };
    flags |= OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if purpose == Purpose::Sandbox {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    Ok(rusqlite::Connection::open_with_flags(path, flags)
        .map_err(|e| Error::db(context(), cause_at(e, Some(path))))?)
}

impl Connection for SqliteConnection {
    fn deletes_returning(&self) -> bool {
        true
    }

    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn location(&self) -> &str {
        &self.location
    }

    fn query_each(
        &mut self,
        query: &Query<'_>,
        each: &mut dyn FnMut(Row) -> ControlFlow<()>,
    ) -> std::result::Result<(), Cause> {
        let sql = Dialect::Sqlite.render(&query.text(), query.params());
        let mut statement = self.conn.prepare_cached(&sql).map_err(cause)?;
        let width = statement.column_count();
        let mut rows = statement.query(params_from_iter(query.params())).map_err(cause)?;
        while let Some(row) = rows.next().map_err(cause)? {
            let row = (0..width).map(|i| row.get_ref(i).map(cell)).collect::<rusqlite::Result<Row>>();
            if each(row.map_err(cause)?).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn execute(&mut self, query: &Query<'_>) -> std::result::Result<u64, Cause> {
        let sql = Dialect::Sqlite.render(&query.text(), query.params());
        let mut statement = self.conn.prepare_cached(&sql).map_err(cause)?;
        let changed = statement.execute(params_from_iter(query.params())).map_err(cause)?;
        Ok(u64::try_from(changed).unwrap_or(u64::MAX))
    }

    fn insert(&mut self, query: &Query<'_>) -> std::result::Result<i64, Cause> {
        self.execute(query)?;
        Ok(self.conn.last_insert_rowid())
    }

    /// SQLite opens a file it may not write read-only without a word, and the first write
    /// fails deep inside a command (a clean after printing its summary); say it up front.
    fn check_writable(&mut self) -> Result<()> {
        if let Some(why) = self.read_only_url {
            return Err(read_only_refusal(&self.location, why));
        }
        if self.conn.is_readonly(rusqlite::MAIN_DB).map_err(|e| Error::db(self.location.clone(), cause(e)))? {
            let why = if self.path.as_deref().is_some_and(on_read_only_mount) {
                READ_ONLY_MOUNT.trim_start().to_string()
            } else {
                "the file is read-only for this user; commands that only read \
                 (get, list, stats, export, clean --dry-run) still work"
                    .to_string()
            };
            return Err(Error::db(format!("cannot write to {}", self.location), why).into());
        }
        Ok(())
    }

    fn begin_clean(&mut self, lock_timeout: Duration) -> Result<super::dialect::CleanLock> {
        clean::begin(self, lock_timeout)
    }

    fn finish_clean(&mut self) -> Option<u64> {
        clean::finish(self)
    }

    fn batch_rows_bound(&self) -> Option<u64> {
        self.batch_bound
    }

    fn walks_by_run(&mut self) -> bool {
        // Only a faster walk hangs on it: if the sample cannot be read, the ids do.
        clean::dag_runs_scattered(&self.conn).unwrap_or(false)
    }

    /// A batch holds the database's one write lock, so a writer that comes meanwhile waits,
    /// unseen (its write is not committed), in SQLite's busy handler, which sleeps between
    /// tries about a third to a fifth of the time it has waited so far, at most 100 ms. A
    /// pause of a fifth of each batch (at most 100 ms) lets it in within a few tries, so that
    /// its write is seen and the clean turns gentle: with a try every 100 ms, the chance that
    /// each misses the pause is 5 in 6, and that 50 in a row do (Python's `sqlite3` gives up
    /// after 5 s) one in ten thousand. Idle, it costs a fifth of the run's time (measured:
    /// 100 ms after every batch cost 0.6x more on a 1.5 s clean of 1,000,000 rows).
    fn quiet_pace(&self) -> QuietPace {
        QuietPace {
            batch: Duration::from_millis(500),
            pause_share: 0.2,
            max_pause: Duration::from_millis(100),
        }
    }

    /// `PRAGMA data_version` changes when another connection commits, never for this one's.
    fn write_mark(&mut self) -> Result<Option<WriteMark>> {
        let version: i64 = self
            .conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(|e| self.error("cannot read the data version", e))?;
        Ok(Some(WriteMark { value: u64::try_from(version).unwrap_or(0), counts_own: false }))
    }

    /// An import's session is a clean's (see `clean::tune`): a batch's pages written about
    /// once, and in WAL mode commits that do not wait for the disk, until the last. Each
    /// multi-row upsert inside the transaction keeps a statement journal to undo itself on
    /// error; in a temporary file that was 237,000 page writes for 200,000 rows, and a chunk's
    /// journal is small (at most 1,000 rows), so it is kept in memory.
    fn begin_import(&mut self) -> Result<()> {
        let tune = || {
            clean::tune(&self.conn, self.path.as_deref())?;
            self.conn.pragma_update(None, "temp_store", "MEMORY")
        };
        Ok(tune().map_err(|e| self.error("cannot prepare the import", e))?)
    }

    /// In WAL mode a FULL commit syncs the whole log: every batch before it is durable too.
    fn durable_commits(&mut self) -> Result<()> {
        Ok(self
            .conn
            .pragma_update(None, "synchronous", "FULL")
            .map_err(|e| self.error("cannot commit", e))?)
    }

    fn delete_expired_range(&mut self, cutoff: Timestamp, after: i64, up_to: Option<i64>) -> Result<u64> {
        if up_to.is_some() {
            super::clean::delete_range(self, cutoff, after, up_to)
        } else {
            clean::delete_all_expired(self, cutoff, after)
        }
    }

    /// A chunk is one multi-row upsert. In the import's transaction, which holds the write
    /// lock, a new row's rowid is above every rowid stored before the statement, so the rowids
    /// it returns tell inserted rows from replaced ones; a row it leaves alone returns none.
    fn restore_rows(
        &mut self,
        upsert: &Upsert,
        rows: &[&[Param<'_>]],
        existing: OnConflict,
    ) -> Result<Restored> {
        let what = "cannot restore rows";
        let last = Query::new("SELECT max(rowid) FROM ").push(upsert.table);
        let last = first(self, what, &last, Fields::opt_int)?.flatten().unwrap_or(0);
        if last == i64::MAX {
            // Past the largest rowid SQLite picks free ones at random: ask row by row.
            return super::restore::row_by_row(self, upsert, rows, existing);
        }
        let sql = self.chunks.get(Dialect::Sqlite, upsert, rows, existing, " RETURNING rowid");
        let returned = self.conn.prepare_cached(&sql).and_then(|mut statement| {
            let ids = statement
                .query_map(params_from_iter(rows.iter().copied().flatten()), |row| row.get::<_, i64>(0))?;
            ids.collect::<rusqlite::Result<Vec<i64>>>()
        });
        let ids = returned.map_err(|e| self.error(what, e))?;
        Ok(Restored::of(rows.len(), ids.iter().filter(|id| **id > last).count(), ids.len()))
    }

    /// SQLite keeps whatever a writer gives it, so another tool can leave text that is not
    /// Airflow's form, which compares wrongly with every bound timestamp.
    /// SQLite keeps any value in an INTEGER column (type affinity converts `'5'`, not `'abc'`):
    /// such a row cannot be read as Airflow's, which decodes the column as an int.
    fn mistyped_integers(&mut self, sample: u64) -> Result<Option<Finding>> {
        let what = "cannot check the integer columns";
        let tasks = find(self, what, MISTYPED_TASK_INTEGERS, &[], sample, |f| {
            let (place, key) = task_row(f)?;
            let columns = [("map_index", f.text(), f.text()), ("dag_run_id", f.text(), f.text())];
            let detail: Vec<String> = columns
                .iter()
                .filter(|(_, kind, _)| kind != "integer")
                .map(|(column, kind, text)| format!("{column} holds {kind} {}, not an integer", quote(text)))
                .collect();
            Ok(FoundRow { place, key, detail: detail.join(", ") })
        })?;
        Ok(Some(tasks))
    }

    fn malformed_timestamps(&mut self, sample: u64) -> Result<Option<Finding>> {
        let what = "cannot read the timestamps";
        let tasks = find(self, what, MALFORMED_TASK_TIMES, &[AIRFLOW_TIME_GLOB.into(); 2], sample, |f| {
            let (place, key) = task_row(f)?;
            let updated = describe_stored_time("updated_at", &f.text(), &f.text());
            // A NULL expiry is a key that never expires, as Airflow writes it.
            let expires = Some((f.text(), f.text())).filter(|(kind, _)| kind != "null");
            let expires = expires.and_then(|(kind, text)| describe_stored_time("expires_at", &kind, &text));
            let detail: Vec<String> = [updated, expires].into_iter().flatten().collect();
            Ok(FoundRow { place, key, detail: detail.join(", ") })
        })?;
        let assets = find(self, what, MALFORMED_ASSET_TIMES, &[AIRFLOW_TIME_GLOB.into()], sample, |f| {
            let place = Place::Asset { asset_id: f.int()?, asset_name: f.opt_text() };
            let key = f.text();
            let detail = describe_stored_time("updated_at", &f.text(), &f.text()).unwrap_or_default();
            Ok(FoundRow { place, key, detail })
        })?;
        Ok(Some(tasks.and(assets, sample)))
    }

    fn create_tables(&mut self) -> Result<()> {
        let what = "cannot create the tables";
        // Airflow switches every SQLite metastore to WAL; a sandbox behaves the same way.
        self.conn.pragma_update(None, "journal_mode", "wal").map_err(|e| self.error(what, e))?;
        in_transaction(self, [what, what], |sqlite| {
            for statement in ddl_statements(SCHEMA) {
                sqlite.conn.execute_batch(statement).map_err(|e| sqlite.error(what, e))?;
            }
            sandbox::stamp(sqlite, what)
        })
    }
}

/// Airflow's text form of a timestamp, as a `GLOB` pattern.
const AIRFLOW_TIME_GLOB: &str = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]";

const MALFORMED_TASK_TIMES: [&str; 3] = [
    r#"t.dag_id, t.run_id, t.task_id, t.map_index, t."key", typeof(t.updated_at), t.updated_at,
       typeof(t.expires_at), t.expires_at"#,
    "FROM task_state_store t WHERE NOT (typeof(t.updated_at) = 'text' AND t.updated_at GLOB ?) \
     OR (t.expires_at IS NOT NULL AND NOT (typeof(t.expires_at) = 'text' AND t.expires_at GLOB ?))",
    "t.id",
];

const MISTYPED_TASK_INTEGERS: [&str; 3] = [
    r#"t.dag_id, t.run_id, t.task_id, t.map_index, t."key", typeof(t.map_index), t.map_index,
       typeof(t.dag_run_id), t.dag_run_id"#,
    "FROM task_state_store t WHERE typeof(t.map_index) <> 'integer' OR typeof(t.dag_run_id) <> 'integer'",
    "t.id",
];

const MALFORMED_ASSET_TIMES: [&str; 3] = [
    r#"s.asset_id, a.name, s."key", typeof(s.updated_at), s.updated_at"#,
    "FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id \
     WHERE NOT (typeof(s.updated_at) = 'text' AND s.updated_at GLOB ?)",
    r#"s.asset_id, s."key""#,
];

/// The same test as [`AIRFLOW_TIME_GLOB`], for the sample's words.
fn is_airflow_time_text(text: &str) -> bool {
    text.len() == 26
        && text.bytes().enumerate().all(|(i, c)| match i {
            4 | 7 => c == b'-',
            10 => c == b' ',
            13 | 16 => c == b':',
            19 => c == b'.',
            _ => c.is_ascii_digit(),
        })
}

/// A timestamp column that is not Airflow's text, in words: its text, or its storage type
/// (`kind` is SQLite's `typeof`).
fn describe_stored_time(column: &str, kind: &str, text: &str) -> Option<String> {
    Some(match kind {
        "text" if is_airflow_time_text(text) => return None,
        "text" => format!("{column} {}", quote(text)),
        "null" => format!("{column} is NULL"),
        "integer" => format!("{column} {text} (an integer)"),
        "real" => format!("{column} {text} (a real)"),
        _ => format!("{column} is a blob"),
    })
}
