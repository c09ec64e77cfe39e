//! PostgreSQL, Airflow's most common production metastore.
//!
//! Every connection is set up the way Airflow's own is used: session time zone UTC, and, when
//! `[database] sql_alchemy_schema` names a schema, a `search_path` of that schema alone (Airflow
//! qualifies every table with it, so nothing may resolve anywhere else). Timestamps travel in
//! PostgreSQL's binary form, an integer count of microseconds, so reads and writes are exact to
//! the microsecond with no text or floating-point step in between. Every statement is prepared
//! once per connection: a clean's batch, or an import's row, then costs one round trip.

mod clean;
mod connect;
mod environment;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use postgres::fallible_iterator::FallibleIterator;
use postgres::types::{FromSql, ToSql, Type};
use postgres::{Client, Statement};

use super::dialect::{Batch, CleanLock, Restored, WriteMark};
use super::dialect::{Connection, Dialect, OnConflict, Upsert, count, first, in_transaction};
use super::query::{Cell, Fields, Param, Query, Row};
use super::restore::ChunkSql;
use super::schema::{SchemaProblem, ddl_statements};
use super::{Access, TaskWrite, Timeouts, sandbox};
use crate::error::{Cause, Error, Result};
use crate::signals::{Stall, StallGuard};
use crate::text::quote;
use crate::time::Timestamp;
use crate::url::DbUrl;
use connect::{describe, pg_err};

/// The tables of a sandbox, as `airflow db migrate` leaves them.
const SCHEMA: &str = include_str!("schema.sql");

/// Prepared statements kept per connection.
const PREPARED: usize = 64;

pub(crate) struct PostgresConnection {
    client: Client,
    location: String,
    /// `[database] sql_alchemy_schema`, when it names one.
    schema: Option<String>,
    prepared: HashMap<String, Statement>,
    chunks: ChunkSql,
    timeouts: Timeouts,
    /// Whether a clean's batch met a row another session held and skipped it.
    skipped_locked: bool,
}

/// The driver's error in the server's own words (see [`describe`]), kept whole so that a
/// caller can still tell its SQLSTATE.
#[derive(Debug, thiserror::Error)]
#[error("{}", describe(.error))]
struct PgError {
    error: postgres::Error,
    /// It failed inside a transaction this tool opened and never committed, so whatever it
    /// was, nothing of it was committed (see [`Connection::outcome_unknown`]).
    uncommitted: bool,
}

fn cause(error: postgres::Error) -> Cause {
    Box::new(PgError { error, uncommitted: false })
}

/// Whether `e` is PostgreSQL's `lock_not_available` (55P03): a lock the statement needed was
/// not granted within `lock_timeout`.
fn lock_not_available(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        let pg = match cause.downcast_ref::<Error>() {
            Some(Error::Database { cause, .. }) => cause.downcast_ref::<PgError>(),
            _ => cause.downcast_ref::<PgError>(),
        };
        pg.and_then(|pg| pg.error.code()) == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE)
    })
}

/// The error of a statement inside a transaction whose COMMIT was never sent.
fn uncommitted(error: postgres::Error) -> Cause {
    Box::new(PgError { error, uncommitted: true })
}

/// A timestamp as the binary protocol carries it: exact microseconds, no text round trip.
type PgTime = postgres::types::Timestamp<SystemTime>;

fn to_system_time(ts: Timestamp) -> SystemTime {
    let micros = ts.micros();
    // SystemTime counts i64 seconds, so any i64 of microseconds fits either way.
    if micros >= 0 {
        UNIX_EPOCH + Duration::from_micros(micros.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_micros(micros.unsigned_abs())
    }
}

fn from_system_time(t: SystemTime) -> Timestamp {
    let micros = match t.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_micros()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_micros()).map_or(i64::MIN, |m| -m),
    };
    Timestamp::from_micros(micros)
}

/// Any column, decoded by its type. Airflow's ids and map indexes are `integer`; a `bigint`
/// one is read as well. `infinity` is a valid timestamptz that Airflow never writes: it is
/// shown rather than refused.
struct PgCell(Cell);

impl<'a> FromSql<'a> for PgCell {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(PgCell(match *ty {
            Type::INT2 => Cell::Int(i16::from_sql(ty, raw)?.into()),
            Type::INT4 => Cell::Int(i32::from_sql(ty, raw)?.into()),
            Type::INT8 => Cell::Int(i64::from_sql(ty, raw)?),
            Type::BOOL => Cell::Int(bool::from_sql(ty, raw)?.into()),
            Type::TIMESTAMPTZ | Type::TIMESTAMP => match PgTime::from_sql(ty, raw)? {
                PgTime::Value(t) => Cell::Time(from_system_time(t)),
                PgTime::PosInfinity => Cell::Other("infinity".to_string()),
                PgTime::NegInfinity => Cell::Other("-infinity".to_string()),
            },
            _ => Cell::Text(String::from_sql(ty, raw)?),
        }))
    }

    fn from_sql_null(_: &Type) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(PgCell(Cell::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// The parameters as the driver binds them; each `?` is cast to its type (see `dialect.rs`).
fn bound<'a>(params: &[Param<'a>]) -> Vec<Box<dyn ToSql + Sync + 'a>> {
    params
        .iter()
        .map(|param| -> Box<dyn ToSql + Sync + 'a> {
            match *param {
                Param::Int(n) => Box::new(n),
                Param::Text(text) => Box::new(text),
                Param::Time(at) => Box::new(at.map(to_system_time)),
                // `LIMIT NULL` is PostgreSQL's "no limit".
                Param::Limit(n) => Box::new(n.map(|n| i64::try_from(n).unwrap_or(i64::MAX))),
            }
        })
        .collect()
}

/// Airflow's map_index column is a 32-bit `integer`; a larger value can never be stored.
fn check_storable_map_index(map_index: i64) -> Result<()> {
    if i32::try_from(map_index).is_err() {
        anyhow::bail!(Error::Usage(format!(
            "--map-index {map_index} is too large: Airflow's map_index column holds at most {}",
            i32::MAX
        )));
    }
    Ok(())
}

impl PostgresConnection {
    pub(super) fn open(
        url: &DbUrl,
        schema: Option<&str>,
        access: Access,
        timeouts: &Timeouts,
    ) -> Result<Self> {
        let (client, location) = connect::connect(url, schema, access, timeouts)?;
        Ok(PostgresConnection {
            client,
            location,
            timeouts: *timeouts,
            schema: schema.map(str::to_string),
            prepared: HashMap::new(),
            chunks: ChunkSql::default(),
            skipped_locked: false,
        })
    }

    /// The statement `query` spells, prepared on first use.
    fn prepare(
        &mut self,
        query: &Query<'_>,
        suffix: &str,
    ) -> std::result::Result<Statement, postgres::Error> {
        self.prepare_sql(Dialect::Postgres.render(&query.text(), query.params()) + suffix)
    }

    /// The statement of rendered SQL, prepared on first use.
    fn prepare_sql(&mut self, sql: String) -> std::result::Result<Statement, postgres::Error> {
        if let Some(statement) = self.prepared.get(&sql) {
            return Ok(statement.clone());
        }
        // The tool's statements are a fixed set, but for an import's multi-row upserts, one
        // per chunk size: a few are kept, the server freeing those dropped.
        if self.prepared.len() >= PREPARED {
            self.prepared.clear();
        }
        let statement = {
            let _stall = self.stall_guard();
            self.client.prepare(&sql)?
        };
        self.prepared.insert(sql, statement.clone());
        Ok(statement)
    }

    /// Runs a statement and hands back the driver's rows, or its error as it is.
    fn rows_of(
        &mut self,
        query: &Query<'_>,
        suffix: &str,
    ) -> std::result::Result<Vec<postgres::Row>, postgres::Error> {
        let statement = self.prepare(query, suffix)?;
        let _stall = self.stall_guard();
        self.client.query(&statement, &refs(&bound(query.params())))
    }

    fn execute_raw(&mut self, query: &Query<'_>) -> std::result::Result<u64, postgres::Error> {
        let statement = self.prepare(query, "")?;
        let _stall = self.stall_guard();
        self.client.execute(&statement, &refs(&bound(query.params())))
    }

    /// Runs `sql`, one or more statements without parameters, in one round trip.
    fn batch(&mut self, sql: &str) -> std::result::Result<(), postgres::Error> {
        let _stall = self.stall_guard();
        self.client.batch_execute(sql)
    }

    /// Bounds the driver's call that follows (see [`stall_guard`]).
    fn stall_guard(&self) -> StallGuard {
        stall_guard(&self.location, &self.timeouts)
    }
}

/// Arms the watchdog for one call of the driver, which has no read timeout of its own: a server
/// or a network that stops answering (a proxy or NAT that stalls, which keepalives do not
/// notice when a kernel still acknowledges) ends the command with exit 4 in
/// [`Timeouts::stall`], after the server's own `statement_timeout` has had its chance.
fn stall_guard(location: &str, timeouts: &Timeouts) -> StallGuard {
    Stall::guard(timeouts.stall(), || {
        format!(
            "no answer from {location} within {} s: the connection stalled (a call waits at most \
             [state_store] database_timeout, or --lock-timeout when longer, + 5 s)",
            timeouts.stall().as_secs()
        )
    })
}

/// The rows of a prepared statement, handed to `each` as they arrive.
fn stream(
    client: &mut postgres::Client,
    statement: &Statement,
    params: &[Box<dyn ToSql + Sync + '_>],
    stall: &StallGuard,
    each: &mut dyn FnMut(Row) -> ControlFlow<()>,
) -> std::result::Result<(), Cause> {
    let mut rows = client.query_raw(statement, refs(params)).map_err(cause)?;
    loop {
        let next = rows.next().map_err(cause)?;
        let Some(row) = next else { break };
        let row = cells(&row).map_err(cause)?;
        let _paused = stall.pause();
        if each(row).is_break() {
            break;
        }
    }
    Ok(())
}

fn refs<'a>(params: &'a [Box<dyn ToSql + Sync + 'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    params.iter().map(|p| p.as_ref() as &(dyn ToSql + Sync)).collect()
}

fn cells(row: &postgres::Row) -> std::result::Result<Row, postgres::Error> {
    (0..row.len()).map(|i| row.try_get::<_, PgCell>(i).map(|c| c.0)).collect()
}

impl Connection for PostgresConnection {
    fn deletes_returning(&self) -> bool {
        true
    }

    fn snapshot_begin(&self) -> Option<&'static str> {
        Some("BEGIN ISOLATION LEVEL REPEATABLE READ")
    }

    fn conflicted(&self, cause: &(dyn std::error::Error + 'static)) -> bool {
        cause.downcast_ref::<PgError>().and_then(|e| e.error.code())
            == Some(&postgres::error::SqlState::T_R_SERIALIZATION_FAILURE)
    }

    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn location(&self) -> &str {
        &self.location
    }

    fn query(&mut self, query: &Query<'_>) -> std::result::Result<Vec<Row>, Cause> {
        let rows = self.rows_of(query, "").map_err(cause)?;
        rows.iter().map(cells).collect::<std::result::Result<_, _>>().map_err(cause)
    }

    /// `query_raw` reads the rows off the socket as they are asked for: the driver's channel
    /// holds a message or so, and TCP holds the server back, so nothing piles up here.
    fn query_each(
        &mut self,
        query: &Query<'_>,
        each: &mut dyn FnMut(Row) -> ControlFlow<()>,
    ) -> std::result::Result<(), Cause> {
        let statement = self.prepare(query, "").map_err(cause)?;
        let params = bound(query.params());
        // Each wait for the server is bounded; the time `each` takes (a stdout nobody reads
        // yet) is not the connection's, so the clock stops meanwhile.
        let stall = stall_guard(&self.location, &self.timeouts);
        // While the rows stream, the server's bounds count the reader's time too: its
        // statement_timeout the whole transfer, its tcp_user_timeout the time the client's
        // socket buffer stays full, its idle timeouts the time after the last row is sent and
        // before the reader takes it. A reader that pauses (`list | less`) is the user's to end,
        // so they are lifted for this statement (each read stays bounded by the guard, and a
        // client that is gone still resets the connection), and put back as they were after.
        // `pg_settings` names only the ones this server knows.
        let lifted: Vec<(String, String)> = self
            .client
            .query(
                "SELECT name, current_setting(name), set_config(name, '0', false) FROM pg_settings \
                 WHERE name IN ('statement_timeout', 'tcp_user_timeout', 'idle_session_timeout', \
                 'idle_in_transaction_session_timeout')",
                &[],
            )
            .and_then(|rows| rows.iter().map(|row| Ok((row.try_get(0)?, row.try_get(1)?))).collect())
            .map_err(cause)?;
        let streamed = stream(&mut self.client, &statement, &params, &stall, each);
        let (names, values): (Vec<String>, Vec<String>) = lifted.into_iter().unzip();
        // A connection that broke has no session to put back, and asking would wait out
        // another bound. Once every row was delivered, a connection that failed meanwhile
        // fails the next statement, not this one.
        let broken = streamed.as_ref().err().is_some_and(|e| self.outcome_unknown(e.as_ref()));
        if !broken {
            let _stall = stall_guard(&self.location, &self.timeouts);
            let _ = self.client.execute(
                "SELECT set_config(n, v, false) FROM unnest($1::text[], $2::text[]) AS bounds(n, v)",
                &[&names, &values],
            );
        }
        streamed
    }

    fn execute(&mut self, query: &Query<'_>) -> std::result::Result<u64, Cause> {
        self.execute_raw(query).map_err(cause)
    }

    fn insert(&mut self, query: &Query<'_>) -> std::result::Result<i64, Cause> {
        let rows = self.rows_of(query, " RETURNING id").map_err(cause)?;
        let row = rows.first().map(cells).transpose().map_err(cause)?;
        Ok(Fields::new(row.unwrap_or_default()).int()?)
    }

    /// PostgreSQL's text types cannot hold NUL: such text matches nothing (the server would
    /// refuse the parameter outright) and is refused before anything is written.
    fn can_match(&self, _table: &str, _column: &str, text: &str) -> bool {
        !text.contains('\0')
    }

    fn check_text(&self, table: &str, column: &str, text: &str) -> Result<()> {
        if let Some(at) = text.find('\0') {
            anyhow::bail!(Error::Usage(format!(
                "\"{column}\" holds a NUL character (byte {}), which PostgreSQL's {table}.{column} cannot store",
                at + 1
            )));
        }
        Ok(())
    }

    /// An error with no server reply in it (the connection closed, an I/O error, a timeout)
    /// is one whose statement may have run to its end, and so is a FATAL one: the server ends
    /// the session (`pg_terminate_backend`, a shutdown) when it next checks for interrupts,
    /// which a COMMIT does after its commit record is flushed, so the FATAL can be the answer
    /// to a COMMIT that took effect. `uncommitted` ones did not commit.
    fn outcome_unknown(&self, cause: &(dyn std::error::Error + 'static)) -> bool {
        cause.downcast_ref::<PgError>().is_some_and(|e| {
            !e.uncommitted
                && e.error.as_db_error().is_none_or(|db| matches!(db.severity(), "FATAL" | "PANIC"))
        })
    }

    fn check_task_row(&self, row: &TaskWrite<'_>) -> Result<()> {
        check_storable_map_index(row.scope.map_index)
    }

    fn check_asset_row(&self, _: &str, _: &str, _: Timestamp, writer_map_index: Option<i64>) -> Result<()> {
        writer_map_index.map_or(Ok(()), check_storable_map_index)
    }

    fn schema_problem(&mut self) -> Result<Option<SchemaProblem>> {
        let Some(name) = self.schema.clone() else { return Ok(None) };
        let query =
            Query::new("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = ?)").bind(&name);
        if first(self, "cannot read the schemas", &query, Fields::bool)?.unwrap_or(false) {
            return Ok(None);
        }
        Ok(Some(SchemaProblem::new(
            "no such schema",
            format!(
                "{}: schema {} does not exist ([database] sql_alchemy_schema names the schema that holds Airflow's tables)",
                self.location,
                quote(&name)
            ),
        )))
    }

    fn begin_clean(&mut self, _lock_timeout: Duration) -> Result<CleanLock> {
        clean::begin(self)
    }

    /// The ends of the primary key with no wait for a lock: `None` behind a table another
    /// session holds (`LOCK TABLE`, `ALTER`), which the batches then wait for once.
    fn id_bounds_at_once(&mut self) -> Result<Option<(i64, i64)>> {
        let context = format!("cannot read the ids in {}", self.location);
        self.batch("BEGIN READ ONLY; SET LOCAL lock_timeout = '1ms'").map_err(pg_err(&context))?;
        let bounds = crate::db::clean::id_bounds(self);
        let ended = self.batch(if bounds.is_ok() { "COMMIT" } else { "ROLLBACK" });
        match bounds {
            Err(e) if lock_not_available(&e) => Ok(None),
            Err(e) => Err(e),
            Ok(bounds) => {
                ended.map_err(pg_err(&context))?;
                Ok(bounds)
            }
        }
    }

    /// A batch is the expired rows among the next `n` rows in primary-key order. Finding the
    /// `n`-th expired row (the portable way) reads every row's heap tuple for its `expires_at`, a
    /// second pass over what the DELETE reads anyway; finding the `n`-th row is an index-only scan
    /// of the primary key wherever the visibility map marks pages all-visible, which vacuum does
    /// for a metastore's settled rows.
    ///
    /// Measured (1,000,000 rows, 500,012 expired, batch 10,000, server log): the boundary scans
    /// took 130 ms over 100 batches against 470 ms over 51 for the n-th expired row. One statement
    /// for both (a CTE for the boundary, the DELETE's count by `RETURNING`) was slower: `RETURNING`
    /// fetches every deleted row again, twice the buffer reads of the plain DELETE. A batch still
    /// touches at most `n` rows; where expired rows are sparse, more batches delete fewer rows each.
    fn delete_expired_batch(&mut self, cutoff: Timestamp, after_id: i64, n: u64) -> Result<Batch> {
        // `id` is selected and ordered as the bare column, so the primary key's index serves
        // both the range and the order.
        let window = Query::new("SELECT id FROM task_state_store WHERE id > ? ORDER BY id LIMIT 1 OFFSET ?");
        let last_id = first(
            self,
            "cannot delete expired rows",
            &window.bind(after_id).bind(n.saturating_sub(1)),
            Fields::int,
        )?;
        let deleted = self.delete_expired_range(cutoff, after_id, last_id)?;
        Ok(Batch { deleted, last_id })
    }

    /// The expired rows of an id range: a plain DELETE in a transaction that gives up after 1 ms
    /// on any lock, and, when a row is locked by another session (a worker writing that key right
    /// now), a DELETE that skips such rows instead: they are not expired any more, or the next
    /// run takes them. Either DELETE re-checks `expires_at` on the newest version of each row, so
    /// a key refreshed since the statement began survives. With no bounds at all it is the
    /// floor's statement exactly: id predicates on every row cost ~10 % of a whole-table DELETE.
    fn delete_expired_range(
        &mut self,
        cutoff: Timestamp,
        after_id: i64,
        up_to_id: Option<i64>,
    ) -> Result<u64> {
        let context = format!("cannot delete expired rows in {}", self.location);
        let plain = match (after_id, up_to_id) {
            (i64::MIN, None) => Query::new("DELETE FROM task_state_store WHERE expires_at < ?").bind(cutoff),
            _ => Query::new("DELETE FROM task_state_store WHERE id > ? AND id <= ? AND expires_at < ?")
                .bind(after_id)
                .bind(up_to_id.unwrap_or(i64::MAX))
                .bind(cutoff),
        };
        // BEGIN and SET LOCAL in one round trip.
        // Until COMMIT is sent nothing can be committed, whatever the error: only the COMMIT's own
        // failure leaves the batch's outcome unknown.
        let uncommitted = |e| Error::db(&context, uncommitted(e));
        self.batch("BEGIN; SET LOCAL lock_timeout = '1ms'").map_err(uncommitted)?;
        match self.execute_raw(&plain) {
            Ok(deleted) => {
                self.batch("COMMIT").map_err(pg_err(&context))?;
                return Ok(deleted);
            }
            Err(e) => {
                // The transaction is aborted either way; a connection that is gone has none left
                // to roll back, and the first error is the one to report.
                let rolled_back = self.batch("ROLLBACK");
                if e.code() != Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) {
                    return Err(uncommitted(e).into());
                }
                rolled_back.map_err(uncommitted)?;
            }
        }
        // The inner SELECT … FOR UPDATE re-checks the expiry on the row version it locks, and the
        // DELETE goes straight to those versions by ctid. Locking first writes every deleted row
        // twice (1.9x the plain DELETE's time measured at batch 10,000), so this is only the way
        // round a locked row, not the rule.
        self.skipped_locked = true;
        let skipping = Query::new(
            "DELETE FROM task_state_store WHERE ctid = ANY(ARRAY(SELECT ctid FROM task_state_store \
             WHERE id > ? AND id <= ? AND expires_at < ? FOR UPDATE SKIP LOCKED))",
        );
        self.run(
            "cannot delete expired rows",
            &skipping.bind(after_id).bind(up_to_id.unwrap_or(i64::MAX)).bind(cutoff),
        )
    }

    fn skipped_locked_rows(&self) -> bool {
        self.skipped_locked
    }

    /// The next transaction id to be given out: every transaction that writes takes one, in
    /// any database of the server, this session's batches included; reading it takes none.
    fn write_mark(&mut self) -> Result<Option<WriteMark>> {
        let query = Query::new("SELECT pg_snapshot_xmax(pg_current_snapshot())::text");
        let next = first(self, "cannot read the transaction counter", &query, |f| Ok(f.text()))?;
        Ok(next.and_then(|text| text.parse().ok()).map(|value| WriteMark { value, counts_own: true }))
    }

    /// Other client sessions of this database (`pg_stat_activity`, read from the server's
    /// shared memory at each call, so fresh; about 0.7 ms): in a statement or a transaction
    /// now, or their last one ended within `within` (`state_change`). A session of another
    /// role shows no state unless this one may read all statistics (`pg_read_all_stats`): it
    /// counts as active, so every write counts while one is connected.
    fn others_active_here(&mut self, within: Duration) -> Result<Option<bool>> {
        let query = Query::new(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND pid <> pg_backend_pid() AND backend_type = 'client backend' \
             AND (state IS NULL OR state <> 'idle' \
             OR state_change > clock_timestamp() - CAST(? AS bigint) * interval '1 millisecond')",
        )
        .bind(i64::try_from(within.as_millis()).unwrap_or(i64::MAX));
        let active = count(self, "cannot read the sessions of the database", &query)?;
        Ok(Some(active > 0))
    }

    /// A chunk is one multi-row upsert. A row it inserted has no `xmax` yet, a row it
    /// updated has this transaction's, and a row it leaves alone returns nothing.
    fn restore_rows(
        &mut self,
        upsert: &Upsert,
        rows: &[&[Param<'_>]],
        existing: OnConflict,
    ) -> Result<Restored> {
        let sql = self.chunks.get(Dialect::Postgres, upsert, rows, existing, " RETURNING xmax = 0");
        let returned = self.prepare_sql(sql).and_then(|statement| {
            let _stall = self.stall_guard();
            let rows = self.client.query(&statement, &refs(&bound(&rows.concat())))?;
            rows.iter().map(|row| row.try_get::<_, bool>(0)).collect::<std::result::Result<Vec<bool>, _>>()
        });
        let inserted =
            returned.map_err(|e| Error::db(format!("cannot restore rows in {}", self.location), cause(e)))?;
        Ok(Restored::of(rows.len(), inserted.iter().filter(|new| **new).count(), inserted.len()))
    }

    fn create_tables(&mut self) -> Result<()> {
        let what = "cannot create the tables";
        in_transaction(self, [what, what], |pg| {
            let context = format!("{what} in {}", pg.location);
            if let Some(name) = pg.schema.clone() {
                // CREATE SCHEMA takes no parameter: the name is bound as a setting of this
                // transaction, and quoted by the server's own `format('%I')`.
                let setting =
                    Query::new("SELECT set_config('state_store.sandbox_schema', ?, true)").bind(&name);
                pg.run(what, &setting)?;
                pg.batch(
                    "DO $$ BEGIN EXECUTE format('CREATE SCHEMA IF NOT EXISTS %I', \
                     current_setting('state_store.sandbox_schema')); END $$",
                )
                .map_err(pg_err(&context))?;
            }
            for statement in ddl_statements(SCHEMA) {
                pg.batch(statement).map_err(pg_err(&context))?;
            }
            sandbox::stamp(pg, what)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::kind;

    #[test]
    fn timestamps_round_trip_to_the_microsecond() {
        for micros in [0, 1, -1, 1_764_288_000_123_456, -62_135_596_800_000_000, 253_402_300_799_999_999] {
            let ts = Timestamp::from_micros(micros);
            assert_eq!(from_system_time(to_system_time(ts)), ts, "{micros}");
        }
    }

    #[test]
    fn map_index_must_fit_the_integer_column() {
        assert!(check_storable_map_index(i64::from(i32::MAX)).is_ok());
        assert!(matches!(
            check_storable_map_index(i64::from(i32::MAX) + 1).err().as_ref().and_then(kind),
            Some(Error::Usage(_))
        ));
    }
}
