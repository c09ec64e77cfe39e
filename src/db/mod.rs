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

pub(crate) use clean::{AssetCount, Batch, DagCount};
pub(crate) use dialect::OnConflict;
pub(crate) use doctor::{Finding, FoundRow, Place};
pub(crate) use restore::{RestoreRow, Restored};
pub(crate) use sandbox::Sandbox;
pub(crate) use schema::{SchemaProblem, SchemaVersion};
pub(crate) use stats::{AssetGroup, EXPIRY_DAYS, ExpirySpread, TaskGroup};
pub(crate) use store::{AssetRestore, AssetWrite, AssetWriter, TaskWrite};

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

/// One metastore's state-store tables, behind the connection that reaches them.
pub(crate) struct Store {
    conn: Box<dyn Connection>,
}

/// Opens the database named by the URL and checks its schema.
pub(crate) fn open(url: &DbUrl, schema: Option<&str>, access: Access) -> Result<Store> {
    let (store, finding) = recognise(url, schema, access)?;
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
pub(crate) fn diagnose(url: &DbUrl, schema: Option<&str>, access: Access) -> Result<Diagnosis> {
    Ok(match recognise(url, schema, access)? {
        (store, Ok(version)) => Diagnosis::Recognised(version, store),
        (_, Err(problem)) => Diagnosis::Unrecognised(problem),
    })
}

/// Opens a database for `state-store sandbox`: created when it is a SQLite file that does not
/// exist yet, and never checked for Airflow's schema (a sandbox starts empty).
pub(crate) fn open_sandbox(url: &DbUrl, schema: Option<&str>) -> Result<Sandbox> {
    Ok(Sandbox::new(connect(url, schema, Access::ReadWrite, Purpose::Sandbox)?))
}

/// A sandbox in an in-memory SQLite database, Airflow's tables created: the operations' unit
/// tests fill it, then work on it as a [`Store`] ([`Sandbox::into_store`]).
#[cfg(all(test, feature = "sqlite"))]
pub(crate) fn memory_sandbox() -> Result<Sandbox> {
    let url = DbUrl::parse("sqlite://").map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut conn = sqlite::SqliteConnection::open(&url, Access::ReadWrite, Purpose::Metastore)?;
    conn.create_tables()?;
    Ok(Sandbox::new(Box::new(conn)))
}

fn recognise(url: &DbUrl, schema: Option<&str>, access: Access) -> Result<(Store, SchemaFinding)> {
    let mut conn = connect(url, schema, access, Purpose::Metastore)?;
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
) -> Result<Box<dyn Connection>> {
    Ok(match url.dialect {
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => Box::new(sqlite::SqliteConnection::open(url, access, purpose)?),
        #[cfg(feature = "postgres")]
        Dialect::Postgres => Box::new(postgres::PostgresConnection::open(url, schema, access)?),
        #[cfg(feature = "mysql")]
        Dialect::Mysql => Box::new(mysql::MysqlConnection::open(url, access)?),
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
