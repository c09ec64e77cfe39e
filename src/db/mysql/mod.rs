//! MySQL and MariaDB, through the synchronous `mysql` driver.
//!
//! Every connection runs `SET time_zone = '+00:00'`, as Airflow does, so the server neither
//! shifts what is written nor what is read; instants are bound as `YYYY-MM-DD HH:MM:SS.ffffff`
//! text and read back as the exact calendar fields of the binary protocol. Airflow's MySQL
//! schema holds less than the other dialects' (see `columns.rs`), and this module refuses what
//! it cannot hold before the server sees it.

mod clean;
mod columns;
mod connect;

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::time::Duration;

use mysql::prelude::Queryable;
use mysql::{Conn, Params, Value};

use super::dialect::{CleanLock, Restored, WriteMark};
use super::dialect::{Connection, Dialect, OnConflict, Upsert, all, count, first, in_transaction};
use super::query::{Cell, Fields, Param, Query, Row};
use super::restore::ChunkSql;
use super::schema::ddl_statements;
use super::{Access, Batch, TaskWrite, Timeouts, sandbox};
use crate::error::{Cause, Error, Result};
use crate::time::Timestamp;
use crate::url::DbUrl;
use columns::{
    MEDIUMTEXT_BYTES, fits_latin1, fits_utf8mb3, require_latin1, require_storable_time, require_utf8mb3,
    require_value_size,
};
use connect::describe;

/// The tables of a sandbox, as `airflow db migrate` leaves them.
const SCHEMA: &str = include_str!("schema.sql");

/// `(native, fallback)`: the uuid column type in `schema.sql` (dag_version's key, the columns
/// that point at it, task_instance's key) and what replaces it on a server without a UUID type
/// (MySQL, MariaDB before 10.7), which is what SQLAlchemy creates there.
const UUID_FALLBACK: (&str, &str) = (" UUID ", " CHAR(32) ");

/// `net_write_timeout` and `wait_timeout` while a result streams to a reader that may pause:
/// a day.
const LIFTED_TIMEOUT: u64 = 86_400;

pub(crate) struct MysqlConnection {
    conn: Conn,
    location: String,
    /// `(table, column)` of the text columns that are 3-byte `utf8mb3`. Airflow's models make
    /// key and id columns `utf8mb3_bin`, but a metastore upgraded from 3.2 has its `key`
    /// columns in `utf8mb4`, which holds any character: read, never assumed.
    narrow: Vec<(String, String)>,
    /// The server's `VERSION()`.
    version: String,
    chunks: ChunkSql,
    /// Whether a clean's batch met a row another session held and skipped it.
    skipped_locked: bool,
    /// Whether this user holds `PROCESS`, and so sees every session's database in the
    /// process list (read once, by a clean's pacing).
    sees_all_sessions: Option<bool>,
}

/// The driver's error in plain words. A write of a large value that the server cuts off is,
/// in practice, a value over its `max_allowed_packet`; the server only says so in its own log.
#[derive(Debug)]
struct MysqlError {
    error: mysql::Error,
    /// The largest text bound to the statement, when it is large.
    large_value: Option<usize>,
}

impl std::fmt::Display for MysqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&describe(&self.error))?;
        let lost = matches!(self.error, mysql::Error::IoError(_) | mysql::Error::CodecError(_));
        match self.large_value {
            Some(bytes) if lost => write!(
                f,
                " (the server closed the connection: a value of {bytes} bytes may exceed its max_allowed_packet)"
            ),
            _ => Ok(()),
        }
    }
}

impl std::error::Error for MysqlError {}

fn cause(error: mysql::Error) -> Cause {
    Box::new(MysqlError { error, large_value: None })
}

/// `LIMIT` has no "no limit" value in MySQL; its manual suggests the largest unsigned integer.
fn value(param: &Param<'_>) -> Value {
    match *param {
        Param::Int(n) => n.map_or(Value::NULL, Value::Int),
        Param::Text(text) => text.map_or(Value::NULL, Value::from),
        // MySQL reads the text as naive UTC in a `+00:00` session.
        Param::Time(at) => at.map_or(Value::NULL, |at| Value::from(at.to_sqlite_text())),
        Param::Limit(n) => Value::UInt(n.unwrap_or(u64::MAX)),
    }
}

/// The binary protocol sends timestamps as calendar fields: exact to the microsecond. MySQL's
/// zero date and other impossible dates come out as text that is not Airflow's, and are shown
/// as stored.
fn cell(value: Value) -> Cell {
    match value {
        Value::NULL => Cell::Null,
        Value::Bytes(bytes) => Cell::Text(String::from_utf8_lossy(&bytes).into_owned()),
        Value::Int(n) => Cell::Int(n),
        Value::UInt(n) => i64::try_from(n).map_or_else(|_| Cell::Other(n.to_string()), Cell::Int),
        Value::Date(y, mo, d, h, mi, s, us) => {
            Cell::Text(format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.{us:06}"))
        }
        other => Cell::Other(other.as_sql(true)),
    }
}

/// A row's values as cells.
fn cells(row: mysql::Row) -> Row {
    row.unwrap().into_iter().map(cell).collect()
}

impl MysqlConnection {
    pub(super) fn open(url: &DbUrl, access: Access, timeouts: &Timeouts) -> Result<Self> {
        let (conn, location) = connect::connect(url, timeouts)?;
        let mut my = MysqlConnection {
            conn,
            location,
            narrow: Vec::new(),
            version: String::new(),
            chunks: ChunkSql::default(),
            skipped_locked: false,
            sees_all_sessions: None,
        };
        // Every later statement, autocommitted or not, runs in a read-only transaction. The
        // session's bounds are set as it connects (`connect::session_bounds`).
        if access == Access::ReadOnly {
            my.run("cannot use", &Query::new("SET SESSION TRANSACTION READ ONLY"))?;
        }
        let narrow = Query::new(
            "SELECT table_name, column_name FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND character_set_name IN ('utf8', 'utf8mb3') \
             AND table_name IN ('task_state_store', 'asset_state_store', 'dag_run', 'task_instance')",
        );
        my.narrow =
            all(&mut my, "cannot read the column character sets", &narrow, |f| Ok((f.text(), f.text())))?;
        let version = Query::new("SELECT VERSION()");
        my.version =
            first(&mut my, "cannot read the server version", &version, |f| Ok(f.text()))?.unwrap_or_default();
        Ok(my)
    }

    /// Runs rendered SQL; the count of rows it changed.
    fn exec_sql(&mut self, sql: &str, params: &[Param<'_>]) -> std::result::Result<u64, Cause> {
        let done = if params.is_empty() {
            // Without parameters, the text protocol: START TRANSACTION and ROLLBACK cannot be
            // prepared.
            self.conn.query_drop(sql)
        } else {
            self.conn.exec_drop(sql, Params::Positional(params.iter().map(value).collect()))
        };
        done.map_err(|error| {
            const LARGE: usize = 1 << 20;
            let largest = params.iter().filter_map(|p| match p {
                Param::Text(Some(text)) => Some(text.len()),
                _ => None,
            });
            Box::new(MysqlError { error, large_value: largest.max().filter(|n| *n > LARGE) }) as Cause
        })?;
        Ok(self.conn.affected_rows())
    }

    fn error(&self, what: &str, e: mysql::Error) -> Error {
        Error::db(format!("{what} {}", self.location), cause(e))
    }

    fn create_each(&mut self, created: &mut Vec<&'static str>) -> Result<()> {
        let what = "cannot create the tables";
        let uuid = mariadb_with_uuid(&self.version);
        // Airflow refuses to migrate a MySQL server where this is off (the first TIMESTAMP
        // column would silently get DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP).
        self.run(what, &Query::new("SET SESSION explicit_defaults_for_timestamp = 1"))?;
        for statement in ddl_statements(SCHEMA) {
            let (native, fallback) = UUID_FALLBACK;
            let ddl =
                if uuid { Cow::Borrowed(statement) } else { Cow::Owned(statement.replace(native, fallback)) };
            self.conn.query_drop(ddl.as_ref()).map_err(|e| self.error(&format!("{what} in"), e))?;
            created.extend(created_table(statement));
        }
        in_transaction(self, [what, what], |my| sandbox::stamp(my, what))
    }
}

/// `VERSION()` of MariaDB 10.7 or later (`10.11.6-MariaDB-0+deb12u1`, `11.4.2-MariaDB`), which
/// has a UUID column type; MySQL has none.
fn mariadb_with_uuid(version: &str) -> bool {
    version.contains("MariaDB") && version_numbers(version) >= (10, 7, 0)
}

/// The first three numbers of a `VERSION()`, 0 for each one missing.
fn version_numbers(version: &str) -> (u32, u32, u32) {
    let mut parts = version.split(|c: char| !c.is_ascii_digit()).filter(|p| !p.is_empty());
    let mut next = || parts.next().and_then(|p| p.parse::<u32>().ok()).unwrap_or(0);
    (next(), next(), next())
}

/// The table a `CREATE TABLE name (…` statement creates.
fn created_table(statement: &str) -> Option<&str> {
    statement.strip_prefix("CREATE TABLE ")?.split_whitespace().next()
}

impl Connection for MysqlConnection {
    fn deletes_returning(&self) -> bool {
        self.version.contains("MariaDB")
    }

    fn dialect(&self) -> Dialect {
        Dialect::Mysql
    }

    fn location(&self) -> &str {
        &self.location
    }

    fn query(&mut self, query: &Query<'_>) -> std::result::Result<Vec<Row>, Cause> {
        let (sql, params) = Dialect::Mysql.render_bound(&query.text(), query.params());
        let params = Params::Positional(params.iter().map(value).collect());
        let rows: Vec<mysql::Row> = self.conn.exec(sql, params).map_err(cause)?;
        Ok(rows.into_iter().map(cells).collect())
    }

    /// `exec_iter` reads each row off the socket as it is asked for.
    fn query_each(
        &mut self,
        query: &Query<'_>,
        each: &mut dyn FnMut(Row) -> ControlFlow<()>,
    ) -> std::result::Result<(), Cause> {
        let (sql, params) = Dialect::Mysql.render_bound(&query.text(), query.params());
        let params = Params::Positional(params.iter().map(value).collect());
        // The server gives up on a client that reads no more of a result for
        // `net_write_timeout`, and ends a session idle for `wait_timeout` (after the last row is
        // sent, before the reader takes it), both of which the session sets to bounds of its
        // own; a reader that pauses (`list | less`) is the user's to end, so they are lifted for
        // this statement and put back as they were after. A client that is gone still resets
        // the connection.
        let bounds: Option<(u64, u64)> = self
            .conn
            .query_first("SELECT @@SESSION.net_write_timeout, @@SESSION.wait_timeout")
            .map_err(cause)?;
        let (write, wait) = bounds.unwrap_or((60, 28_800));
        self.conn
            .query_drop(format!(
                "SET SESSION net_write_timeout = {LIFTED_TIMEOUT}, SESSION wait_timeout = {LIFTED_TIMEOUT}"
            ))
            .map_err(cause)?;
        let streamed: std::result::Result<(), Cause> = (|| {
            let mut result = self.conn.exec_iter(sql, params).map_err(cause)?;
            for row in result.by_ref() {
                if each(cells(row.map_err(cause)?)).is_break() {
                    break;
                }
            }
            Ok(())
        })();
        // A connection that broke has no session to put back, and asking would wait out
        // another bound. Once every row was delivered, a connection that failed meanwhile
        // fails the next statement, not this one.
        let broken = streamed.as_ref().err().is_some_and(|e| self.outcome_unknown(e.as_ref()));
        if !broken {
            let _ = self.conn.query_drop(format!(
                "SET SESSION net_write_timeout = {write}, SESSION wait_timeout = {wait}"
            ));
        }
        streamed
    }

    fn execute(&mut self, query: &Query<'_>) -> std::result::Result<u64, Cause> {
        let (sql, params) = Dialect::Mysql.render_bound(&query.text(), query.params());
        self.exec_sql(&sql, &params)
    }

    fn insert(&mut self, query: &Query<'_>) -> std::result::Result<i64, Cause> {
        self.execute(query)?;
        Ok(i64::try_from(self.conn.last_insert_id())?)
    }

    /// Every statement of a clean's batch is autocommitted: an error with no server reply in
    /// it (the connection dropped or was killed, an I/O error) may follow its commit.
    fn outcome_unknown(&self, cause: &(dyn std::error::Error + 'static)) -> bool {
        cause.downcast_ref::<MysqlError>().is_some_and(|e| !matches!(e.error, mysql::Error::MySqlError(_)))
    }

    fn can_match(&self, table: &str, column: &str, text: &str) -> bool {
        match (table, column) {
            ("asset", _) => fits_latin1(text),
            _ => fits_utf8mb3(text) || !self.narrow.iter().any(|(t, c)| t == table && c == column),
        }
    }

    fn pads_spaces(&self) -> bool {
        true
    }

    fn max_value_bytes(&self) -> u64 {
        MEDIUMTEXT_BYTES as u64
    }

    fn check_text(&self, table: &str, column: &str, text: &str) -> Result<()> {
        match table {
            "asset" => require_latin1(&format!("asset {column}"), text),
            // A sandbox's own tables are Airflow's, narrow as Airflow makes them.
            "dag_run" | "task_instance" => require_utf8mb3(column, text),
            _ if self.can_match(table, column, text) => Ok(()),
            _ => require_utf8mb3(column, text),
        }
    }

    fn check_task_row(&self, row: &TaskWrite<'_>) -> Result<()> {
        for (column, text) in [
            ("dag_id", row.scope.dag_id.as_str()),
            ("run_id", &row.scope.run_id),
            ("task_id", &row.scope.task_id),
            ("key", row.key),
        ] {
            self.check_text("task_state_store", column, text)?;
        }
        if i32::try_from(row.scope.map_index).is_err() {
            anyhow::bail!(Error::Usage(format!(
                "map_index {} does not fit Airflow's MySQL column (INTEGER, at most {})",
                row.scope.map_index,
                i32::MAX
            )));
        }
        require_value_size("task_state_store.value", row.value)?;
        require_storable_time("updated_at", row.updated_at)?;
        row.expires_at.map_or(Ok(()), |at| require_storable_time("expires_at", at))
    }

    fn check_asset_row(&self, key: &str, value: &str, updated_at: Timestamp, _: Option<i64>) -> Result<()> {
        self.check_text("asset_state_store", "key", key)?;
        require_value_size("asset_state_store.value", value)?;
        require_storable_time("updated_at", updated_at)
    }

    /// The session's lock waits are already `--lock-timeout`, set as it connected
    /// (`connect::session_bounds`).
    ///
    /// The clean lock is a named lock (`GET_LOCK`), the only lock MySQL has that needs no
    /// transaction (a row or table lock would keep a read view or block Airflow's writers), and
    /// any account may take any name, even one with no privilege at all on any database. So the
    /// name holds something only an account with a privilege on `task_state_store` can read: the
    /// table's `CREATE_TIME`, from `information_schema.TABLES`, which shows a table's row only to
    /// an account with some privilege on it (an account with `USAGE` alone sees none). The time
    /// is the same for every run until the table is created again or rebuilt (`ALTER TABLE`);
    /// the server shows it in the session's time zone, which every connection sets to UTC
    /// (`connect.rs`), so every run reads the same text.
    /// Where the server gives no creation time (`NULL`), the name is the plain one of earlier
    /// versions, which any account can take. An account with another privilege on the table than
    /// DELETE (SELECT, say) can still compute the name: MySQL and MariaDB have no lock that only
    /// the holders of a privilege can take without a transaction, and an unprivileged session
    /// cannot list the named locks or read another account's privileges (docs/architecture.md).
    fn begin_clean(&mut self, _lock_timeout: Duration) -> Result<CleanLock> {
        let what = "cannot take the clean lock";
        let database =
            first(self, what, &Query::new("SELECT DATABASE()"), |f| Ok(f.text()))?.unwrap_or_default();
        let created = Query::new(
            "SELECT CAST(CREATE_TIME AS CHAR) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'task_state_store'",
        );
        let created = first(self, what, &created, |f| Ok(f.opt_text()))?.flatten();
        let name = clean::clean_lock_name(&database, created.as_deref());
        let lock = Query::new("SELECT GET_LOCK(?, 0)").bind(name.as_str());
        if first(self, what, &lock, Fields::opt_int)?.flatten() == Some(1) {
            return Ok(CleanLock::Taken);
        }
        // The holder's connection, if it still holds the lock; its account is in the process list
        // for the same account, or one with the PROCESS privilege.
        let used = Query::new("SELECT IS_USED_LOCK(?)").bind(name.as_str());
        let Some(connection) = first(self, what, &used, Fields::opt_int)?.flatten() else {
            return Ok(CleanLock::Held(None));
        };
        let account =
            Query::new("SELECT USER, HOST FROM information_schema.PROCESSLIST WHERE ID = ?").bind(connection);
        let account = first(self, what, &account, |f| Ok((f.text(), f.opt_text())))?;
        Ok(CleanLock::Held(Some(match account {
            Some((user, host)) => {
                // A TCP client's host comes with its port.
                let host = host.unwrap_or_default();
                let host = host.rsplit_once(':').map_or(host.as_str(), |(h, _)| h);
                format!("connection {connection} of user {user}@{host}")
            }
            None => format!("connection {connection}; its user is shown only with the PROCESS privilege"),
        })))
    }

    /// The ends of the primary key with no wait for a lock: `None` behind a table another
    /// session holds, which the batches then wait for once.
    fn id_bounds_at_once(&mut self) -> Result<Option<(i64, i64)>> {
        clean::without_waiting(self, super::clean::id_bounds, |_| Ok(None))
    }

    fn delete_expired_batch(&mut self, cutoff: Timestamp, after_id: i64, n: u64) -> Result<Batch> {
        // A row a worker holds is skipped, not waited for, wherever the server can.
        if self.version.contains("MariaDB") && clean::skips_locked_rows(&self.version) {
            clean::batch_skipping_locked(self, cutoff, after_id, n)
        } else if self.version.contains("MariaDB") {
            // MariaDB finds and deletes a batch in one statement.
            clean::batch_by_returning(self, cutoff, after_id, n)
        } else {
            // MySQL has no DELETE … RETURNING: find the batch's last id, then delete up to it
            // (a held row skipped there, below).
            super::clean::batch_by_nth_expired(self, cutoff, after_id, n)
        }
    }

    fn skipped_locked_rows(&self) -> bool {
        self.skipped_locked
    }

    /// The server's count of statements that insert or update rows, in any session: a clean
    /// only deletes, so its own are not among them.
    fn write_mark(&mut self) -> Result<Option<WriteMark>> {
        let query = Query::new(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_insert', 'Com_insert_select', 'Com_update', \
             'Com_update_multi', 'Com_replace', 'Com_replace_select')",
        );
        let counts = all(self, "cannot read the server's status", &query, |f| {
            f.text();
            f.count()
        })?;
        Ok(Some(WriteMark { value: counts.iter().sum(), counts_own: false }))
    }

    /// Other sessions of this database in the process list (read at each call, about 0.5 ms):
    /// running a command, or idle since at most `within` (in whole seconds, as the list keeps
    /// them, so a session idle for up to a second more counts too). A session is of the database
    /// it named when it connected (`USE`), as Airflow's are; one with another or none does not
    /// count, even if it writes here by a qualified name. Without `PROCESS` the list shows this
    /// user's sessions only, so the server cannot tell: `None`.
    fn others_active_here(&mut self, within: Duration) -> Result<Option<bool>> {
        if self.sees_all_sessions.is_none() {
            let query = Query::new(
                "SELECT count(*) FROM information_schema.USER_PRIVILEGES WHERE PRIVILEGE_TYPE = 'PROCESS' \
                 AND GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', \
                 SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')",
            );
            let granted = count(self, "cannot read the user's privileges", &query)?;
            self.sees_all_sessions = Some(granted > 0);
        }
        if self.sees_all_sessions != Some(true) {
            return Ok(None);
        }
        let query = Query::new(
            "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() \
             AND DB = DATABASE() AND USER NOT IN ('system user', 'event_scheduler') \
             AND COMMAND NOT IN ('Daemon', 'Binlog Dump', 'Binlog Dump GTID') \
             AND (COMMAND <> 'Sleep' OR TIME <= ?)",
        )
        .bind(i64::try_from(within.as_secs() + 1).unwrap_or(i64::MAX));
        let active = count(self, "cannot read the server's process list", &query)?;
        Ok(Some(active > 0))
    }

    fn delete_expired_range(&mut self, cutoff: Timestamp, after: i64, up_to: Option<i64>) -> Result<u64> {
        if up_to.is_none() {
            return clean::delete_all_windowed(self, cutoff, after);
        }
        if clean::skips_locked_rows(&self.version) {
            return clean::range_skipping_locked(self, cutoff, after, up_to);
        }
        super::clean::delete_range(self, cutoff, after, up_to)
    }

    /// A chunk of several rows is one multi-row upsert. The server counts the rows it changed:
    /// 1 for each insert and 2 for each update that changed a row in its count of affected
    /// rows, the updates again in its info (`Records: 3  Duplicates: 1  Warnings: 0`).
    /// `KeepNewer` counts in `@kept` the rows it left as they were (see `Upsert::rows`); a row
    /// as it was stored is replaced by itself. A single row gets no info: it is read, then
    /// written.
    fn restore_rows(
        &mut self,
        upsert: &Upsert,
        rows: &[&[Param<'_>]],
        existing: OnConflict,
    ) -> Result<Restored> {
        let what = "cannot restore rows";
        if rows.len() < 2 {
            return super::restore::row_by_row(self, upsert, rows, existing);
        }
        if existing == OnConflict::KeepNewer {
            self.run(what, &Query::new("SET @kept = 0"))?;
        }
        let sql = self.chunks.get(Dialect::Mysql, upsert, rows, existing, "");
        let affected = self.exec_sql(&sql, &rows.concat());
        let affected = affected.map_err(|e| Error::db(format!("{what} in {}", self.location), e))?;
        let info = self.conn.info_str();
        let updated =
            info.split("Duplicates:").nth(1).and_then(|n| n.split_whitespace().next()?.parse().ok());
        let updated: u64 = updated.ok_or_else(|| {
            Error::db(
                format!("{what} in {}", self.location),
                format!("the server's count of rows is {info:?}"),
            )
        })?;
        let inserted = usize::try_from(affected.saturating_sub(2 * updated)).unwrap_or(usize::MAX);
        let left = match existing {
            OnConflict::Keep => rows.len().saturating_sub(inserted),
            OnConflict::Replace => 0,
            OnConflict::KeepNewer => {
                let kept = first(self, what, &Query::new("SELECT @kept"), Fields::count)?.unwrap_or(0);
                usize::try_from(kept).unwrap_or(usize::MAX)
            }
        };
        Ok(Restored::of(rows.len(), inserted, rows.len().saturating_sub(left)))
    }

    /// MySQL commits every CREATE TABLE at once, so a failure half-way is undone by hand:
    /// nothing is left that a second `sandbox create` would refuse.
    fn create_tables(&mut self) -> Result<()> {
        let mut created = Vec::new();
        let result = self.create_each(&mut created);
        if result.is_err() {
            for table in created.iter().rev() {
                let _ = self.conn.query_drop(format!("DROP TABLE IF EXISTS {table}"));
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_type_only_on_mariadb_10_7_and_later() {
        assert!(mariadb_with_uuid("10.11.19-MariaDB-0+deb12u1"));
        assert!(mariadb_with_uuid("11.4.2-MariaDB"));
        assert!(mariadb_with_uuid("10.7.1-MariaDB-log"));
        assert!(!mariadb_with_uuid("10.6.16-MariaDB"));
        assert!(!mariadb_with_uuid("8.0.36"));
        assert!(!mariadb_with_uuid("8.4.0-0ubuntu0.24.04.1"));
    }

    #[test]
    fn the_ddl_falls_back_to_char32_uuids() {
        let (native, fallback) = UUID_FALLBACK;
        let ddl: Vec<&str> = ddl_statements(SCHEMA).collect();
        assert_eq!(ddl.iter().map(|s| s.matches(native).count()).sum::<usize>(), 4);
        assert!(ddl.iter().all(|s| !s.replace(native, fallback).contains(native)));
        let mut expected = vec!["log_template", "backfill", "dag_version"];
        expected.extend(super::super::schema::AIRFLOW_TABLES.split(' ').filter(|t| *t != "task_instance"));
        let ti = expected.iter().position(|t| *t == "asset_active").map_or(0, |i| i + 1);
        expected.splice(ti..ti, ["`trigger`", "task_instance"]);
        expected.push("state_store_sandbox");
        assert_eq!(ddl.iter().filter_map(|s| created_table(s)).collect::<Vec<_>>(), expected);
    }
}
