//! The database layer: every query written once, over a small abstraction of what each
//! database does differently.
//!
//! - [`Store`] is what the commands use: lookups, reads and writes (`store.rs`), the clean
//!   engine's bookkeeping (`clean.rs`), `import`'s batched writes (`restore.rs`), `stats`'
//!   sums (`stats.rs`) and `doctor`'s checks (`doctor.rs`); [`Sandbox`] creates and fills
//!   throw-away metastores (`sandbox.rs`).
//! - They build [`query::Query`]s: statement text made only of string literals, with bound
//!   parameters, in the neutral form that [`dialect`] spells for each database.
//! - A [`dialect::Connection`] runs them. Each dialect module (`sqlite/`, `postgres/`,
//!   `mysql/`) holds only what is its own: connecting and its URL options, its best clean
//!   statements, its catalogue (columns, table sizes) and its sandbox DDL.
//!
//! Opening a database also checks that its tables are the Airflow 3.3 state store we know
//! (`schema.rs`), so a wrong or half-migrated database is refused before anything is read or
//! written.

mod clean;
mod dialect;
mod doctor;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
mod query;
mod restore;
mod sandbox;
mod schema;
#[cfg(feature = "sqlite")]
mod sqlite;
mod stats;
mod store;

pub(crate) use clean::{AssetCount, Cursor, DagCount};
pub(crate) use dialect::{
    Batch, CleanLock, Finding, FoundRow, OnConflict, Place, QuietPace, Restored, WriteMark,
};
pub(crate) use restore::RestoreRow;
pub(crate) use sandbox::Sandbox;
pub(crate) use schema::{SchemaProblem, SchemaVersion};
pub(crate) use stats::{AssetGroup, EXPIRY_DAYS, ExpirySpread, LargeValue, TaskGroup};
pub(crate) use store::{AssetRestore, AssetWrite, AssetWriter, EXACT_PAGE, TaskWrite};

use std::time::Duration;

use crate::error::{Error, Result};
use crate::url::{DbUrl, Dialect};
use dialect::Connection;
use schema::SchemaFinding;

/// How the connection is used: read-only commands cannot change anything even by mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    ReadOnly,
    ReadWrite,
}

/// The bounds of every wait of a session, set up in one place per dialect when it connects, so
/// that every command gets them:
///
/// - `statement`: the longest a statement may run on the server (`[state_store]
///   database_timeout`); the client gives up on a database that does not answer
///   [`STALL_MARGIN`] after it ([`Timeouts::stall`]), so the server's own error comes first
///   whenever the server is still there;
/// - `lock`: the longest a statement waits for a lock another session holds (row locks and
///   table or metadata locks), 10 s unless a command says otherwise (`clean --lock-timeout`);
/// - `idle`: how long the server keeps a session nobody uses, in or out of a transaction, so
///   that the locks of a client that is gone (a clean's lock among them) are freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeouts {
    pub(crate) statement: Duration,
    pub(crate) lock: Duration,
    pub(crate) idle: Duration,
}

/// How much longer than a statement may run the client waits for an answer.
pub(crate) const STALL_MARGIN: Duration = Duration::from_secs(5);
/// The default bound of a lock wait.
pub(crate) const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// The server ends a session idle for this many statement bounds.
const IDLE_STATEMENTS: u32 = 4;

impl Timeouts {
    /// The bounds that follow from `[state_store] database_timeout`.
    pub(crate) fn new(statement: Duration) -> Timeouts {
        Timeouts {
            statement,
            lock: DEFAULT_LOCK_TIMEOUT.min(statement),
            idle: statement.saturating_mul(IDLE_STATEMENTS),
        }
    }

    /// With another lock wait; a statement may always run at least as long as it waits.
    #[must_use]
    pub(crate) fn with_lock(self, lock: Duration) -> Timeouts {
        let lock = lock.max(Duration::from_millis(1));
        Timeouts { lock, statement: self.statement.max(lock), ..self }
    }

    /// For a session that rests `pause` between its statements (`clean --sleep`).
    #[must_use]
    pub(crate) fn with_pause(self, pause: Duration) -> Timeouts {
        Timeouts { idle: self.idle.saturating_add(pause), ..self }
    }

    /// How long the client waits for any one answer of the server.
    pub(crate) fn stall(&self) -> Duration {
        self.statement.saturating_add(STALL_MARGIN)
    }
}

/// One metastore's state-store tables, behind the connection that reaches them.
pub(crate) struct Store {
    conn: Box<dyn Connection>,
}

/// What the database does its own way (a clean's lock and pace, an import's commits,
/// `doctor`'s dialect checks) is asked of the [`Connection`] itself.
impl std::ops::Deref for Store {
    type Target = dyn Connection;
    fn deref(&self) -> &Self::Target {
        &*self.conn
    }
}

impl std::ops::DerefMut for Store {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut *self.conn
    }
}

/// Opens the database named by the URL and checks its schema.
pub(crate) fn open(url: &DbUrl, schema: Option<&str>, access: Access, timeouts: &Timeouts) -> Result<Store> {
    let (store, finding) = recognise(url, schema, access, timeouts)?;
    finding.map_err(SchemaProblem::into_error)?;
    Ok(store)
}

/// What `doctor` found on opening a database: a recognised schema, with the store to look
/// further, or the schema problem that every other command would fail with.
pub(crate) enum Diagnosis {
    Recognised(SchemaVersion, Store),
    Unrecognised(SchemaProblem),
}

/// Opens the database like [`open`], but reports an unrecognised schema instead of failing.
pub(crate) fn diagnose(
    url: &DbUrl,
    schema: Option<&str>,
    access: Access,
    timeouts: &Timeouts,
) -> Result<Diagnosis> {
    Ok(match recognise(url, schema, access, timeouts)? {
        (store, Ok(version)) => Diagnosis::Recognised(version, store),
        (_, Err(problem)) => Diagnosis::Unrecognised(problem),
    })
}

/// Opens a database for `state-store sandbox`: created when it is a SQLite file that does not
/// exist yet, and never checked for Airflow's schema (a sandbox starts empty).
pub(crate) fn open_sandbox(url: &DbUrl, schema: Option<&str>, timeouts: &Timeouts) -> Result<Sandbox> {
    Ok(Sandbox::new(connect(url, schema, Access::ReadWrite, Purpose::Sandbox, timeouts)?))
}

/// A sandbox in an in-memory SQLite database, Airflow's tables created: the operations' unit
/// tests fill it, then work on it as a [`Store`] ([`Sandbox::into_store`]).
#[cfg(all(test, feature = "sqlite"))]
pub(crate) fn memory_sandbox() -> Result<Sandbox> {
    let url = DbUrl::parse("sqlite://").map_err(|e| anyhow::anyhow!("{e}"))?;
    let timeouts = Timeouts::new(Duration::from_secs(30));
    let mut conn = sqlite::SqliteConnection::open(&url, Access::ReadWrite, Purpose::Metastore, &timeouts)?;
    conn.create_tables()?;
    Ok(Sandbox::new(Box::new(conn)))
}

fn recognise(
    url: &DbUrl,
    schema: Option<&str>,
    access: Access,
    timeouts: &Timeouts,
) -> Result<(Store, SchemaFinding)> {
    let mut conn = connect(url, schema, access, Purpose::Metastore, timeouts)?;
    let finding = match conn.schema_problem()? {
        Some(problem) => Err(problem),
        None => {
            let location = conn.location().to_string();
            schema::diagnose_schema(&location, |table| dialect::columns(&mut *conn, table))?
        }
    };
    if access == Access::ReadWrite && finding.is_ok() {
        conn.check_writable()?;
    }
    Ok((Store { conn }, finding))
}

/// Whether a connection opens an Airflow metastore or a sandbox, which SQLite may create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Metastore,
    Sandbox,
}

#[allow(unused_variables)]
fn connect(
    url: &DbUrl,
    schema: Option<&str>,
    access: Access,
    purpose: Purpose,
    timeouts: &Timeouts,
) -> Result<Box<dyn Connection>> {
    Ok(match url.dialect {
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => Box::new(sqlite::SqliteConnection::open(url, access, purpose, timeouts)?),
        #[cfg(feature = "postgres")]
        Dialect::Postgres => Box::new(postgres::PostgresConnection::open(url, schema, access, timeouts)?),
        #[cfg(feature = "mysql")]
        Dialect::Mysql => Box::new(mysql::MysqlConnection::open(url, access, timeouts)?),
        #[allow(unreachable_patterns)]
        _ => return Err(not_built(url).into()),
    })
}

/// Runs a driver's `connect` on a thread of its own and waits for it at most `deadline`. A
/// driver bounds only the TCP connect; a server (or a proxy) that accepts connections and then
/// never answers would hold the handshake (TLS, authentication, session set-up) for as long as
/// the kernel keeps the socket. An abandoned thread's socket closes when the process exits,
/// which it is about to do with the error.
#[allow(dead_code)]
fn within<T: Send + 'static>(
    deadline: std::time::Duration,
    connect: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (sender, receiver) = std::sync::mpsc::channel();
    // The receiver is gone only when the deadline has passed; nothing is waiting then. A
    // thread that cannot be started is a connection that never answers.
    std::thread::Builder::new().spawn(move || sender.send(connect())).ok()?;
    receiver.recv_timeout(deadline).ok()
}

/// Each dialect is a Cargo feature (all on by default); a build without one says so.
#[allow(dead_code)]
fn not_built(url: &DbUrl) -> Error {
    Error::Config(format!(
        "this build of state-store has no {} support (Cargo feature \"{}\"); from [database] sql_alchemy_conn {}",
        url.dialect.name(),
        match url.dialect {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
        },
        url.redacted()
    ))
}

/// The two tables of the state store.
pub(crate) const STATE_TABLES: &[&str] = &["task_state_store", "asset_state_store"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_follow_database_timeout_and_clean_flags() {
        let t = Timeouts::new(Duration::from_secs(30));
        assert_eq!(
            (t.statement, t.lock, t.idle),
            (Duration::from_secs(30), DEFAULT_LOCK_TIMEOUT, Duration::from_secs(120))
        );
        assert_eq!(t.stall(), Duration::from_secs(35));
        // A short database_timeout caps the lock wait; a longer --lock-timeout raises the
        // statement bound, so a lock wait is never cut short by it.
        assert_eq!(Timeouts::new(Duration::from_secs(3)).lock, Duration::from_secs(3));
        let long = t.with_lock(Duration::from_secs(60));
        assert_eq!(
            (long.lock, long.statement, long.stall()),
            (Duration::from_secs(60), Duration::from_secs(60), Duration::from_secs(65))
        );
        // 0 would mean "wait forever" to PostgreSQL.
        assert_eq!(t.with_lock(Duration::ZERO).lock, Duration::from_millis(1));
        assert_eq!(t.with_pause(Duration::from_secs(5)).idle, Duration::from_secs(125));
    }
}
