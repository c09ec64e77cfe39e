//! What differs between SQLite, PostgreSQL and MySQL, and nothing else.
//!
//! Statements are written once, in a neutral form that [`Dialect::render`] spells for each
//! database:
//! - `?` is the next parameter: PostgreSQL's `$n`, with a cast to the parameter's type, so the
//!   server never has to guess it (`$1 IS NULL`, an `integer` column compared with a 64-bit id);
//! - `"name"` is a quoted identifier: MySQL's backquotes;
//! - `BYTES(x)` is `x` compared and sorted by its bytes, the order SQLite gives text: PostgreSQL's
//!   `COLLATE "C"`, MySQL's `CAST(… AS BINARY)` (Airflow's `_bin` collations pad with spaces, and
//!   a metastore upgraded from 3.2 has case-insensitive keys);
//! - `OCTETS(x)` and `CHARS(x)` are the length of `x` in bytes and in characters;
//! - `SAME(x, ?)` is `x = ?` compared exactly: MySQL's PAD SPACE collations take `'x '` for
//!   `'x'`, so MySQL also compares the lengths, binding the parameter a second time.
//!
//! A `'…'` literal is copied as it is. An upsert is the one statement whose shape differs, so
//! [`Upsert`] builds it. What a connection does differently beyond SQL text (what its columns
//! can hold, its clean statements, its catalogue) is the [`Connection`] trait.

use std::ops::ControlFlow;
use std::time::Duration;

use super::TaskWrite;
use super::query::{Decoded, Fields, Param, Query, Row};
use crate::error::{Cause, Error, Result};
use crate::model::TaskScope;
use crate::time::Timestamp;
pub(crate) use crate::url::Dialect;

/// What [`Connection::begin_clean`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CleanLock {
    /// This run holds the clean lock.
    Taken,
    /// Another clean holds it: who, as far as this session may see (a PostgreSQL role and
    /// pid, a MySQL connection and its user, a process id), or `None` when it cannot tell.
    Held(Option<String>),
}

impl Dialect {
    /// The statement text this database runs for a neutral `text` bound to `params`.
    pub(crate) fn render(self, text: &str, params: &[Param<'_>]) -> String {
        self.render_bound(text, params).0
    }

    /// The statement text, with the parameters in the order its placeholders take them: the
    /// same as `params` except where a dialect spells a token with a parameter twice (MySQL's
    /// `SAME`).
    pub(crate) fn render_bound<'a>(self, text: &str, params: &[Param<'a>]) -> (String, Vec<Param<'a>>) {
        let mut out = String::with_capacity(text.len() + 32);
        let mut bound = Bound { next: 0, order: Vec::with_capacity(params.len()) };
        self.spell(text, params, &mut bound, &mut out);
        let params = bound.order.into_iter().filter_map(|i| params.get(i).copied()).collect();
        (out, params)
    }

    /// Spells `text` into `out`, noting in `bound` the parameter each placeholder takes.
    fn spell(self, text: &str, params: &[Param<'_>], bound: &mut Bound, out: &mut String) {
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if c == '\'' || c == '"' {
                let end = rest[1..].find(c).map_or(rest.len(), |i| i + 2);
                match (c, self) {
                    ('"', Dialect::Mysql) => {
                        out.push('`');
                        out.push_str(&rest[1..end - 1]);
                        out.push('`');
                    }
                    _ => out.push_str(&rest[..end]),
                }
                rest = &rest[end..];
            } else if c == '?' {
                let n = bound.next;
                bound.next += 1;
                bound.order.push(n);
                self.placeholder(n + 1, params.get(n), out);
                rest = &rest[1..];
            } else if let Some((function, inner, after)) = function_call(rest) {
                let mut spelt = String::new();
                self.spell(inner, params, bound, &mut spelt);
                if function == "SAME" {
                    self.same(&spelt, bound, out);
                    rest = after;
                    continue;
                }
                out.push_str(&match (function, self) {
                    ("BYTES", Dialect::Sqlite) => spelt,
                    ("BYTES", Dialect::Postgres) => format!("{spelt} COLLATE \"C\""),
                    ("BYTES", Dialect::Mysql) => format!("CAST({spelt} AS BINARY)"),
                    ("OCTETS", Dialect::Sqlite) => format!("length(CAST({spelt} AS BLOB))"),
                    ("OCTETS", Dialect::Postgres) => format!("octet_length({spelt})"),
                    ("OCTETS", Dialect::Mysql) => format!("LENGTH({spelt})"),
                    ("CHARS", Dialect::Sqlite) => format!("length({spelt})"),
                    (_, Dialect::Postgres) => format!("char_length({spelt})"),
                    _ => format!("CHAR_LENGTH({spelt})"),
                });
                rest = after;
            } else {
                // Whole words, so that a name such as `TASK_CHARS(` is never taken for a token.
                let word =
                    rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
                let end = if word == 0 { c.len_utf8() } else { word };
                out.push_str(&rest[..end]);
                rest = &rest[end..];
            }
        }
    }

    /// `SAME(x, ?)`, spelt as `x, ?` in `spelt`: `x` equals the text exactly. MySQL's `_bin`
    /// collations are PAD SPACE, where `'x' = 'x '`; the same length in characters as well
    /// makes the comparison exact, whatever the column's character set, and the `=` alone
    /// still finds the row through its index.
    fn same(self, spelt: &str, bound: &mut Bound, out: &mut String) {
        let (column, value) = spelt.rsplit_once(", ").unwrap_or((spelt, "NULL"));
        out.push_str(&format!("{column} = {value}"));
        if self == Dialect::Mysql {
            if let Some(last) = bound.order.last().copied() {
                bound.order.push(last);
            }
            out.push_str(&format!(" AND CHAR_LENGTH({column}) = CHAR_LENGTH({value})"));
        }
    }

    fn placeholder(self, n: usize, param: Option<&Param<'_>>, out: &mut String) {
        if self != Dialect::Postgres {
            out.push('?');
            return;
        }
        out.push_str(&format!("${n}"));
        out.push_str(match param {
            Some(Param::Int(_) | Param::Limit(_)) => "::bigint",
            Some(Param::Text(_)) => "::text",
            Some(Param::Time(_)) => "::timestamptz",
            None => "",
        });
    }

    /// The statement that starts a transaction. SQLite's IMMEDIATE takes the write lock at
    /// once, so a batch never fails half-way on a busy database.
    pub(crate) fn begin(self) -> &'static str {
        match self {
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::Postgres => "BEGIN",
            Dialect::Mysql => "START TRANSACTION",
        }
    }

    /// The end of a SELECT that locks the rows it reads until the transaction ends, so that
    /// what it found is still so when a DELETE in the same transaction follows. SQLite has no
    /// row locks: its `BEGIN IMMEDIATE` already holds every writer off.
    pub(crate) fn lock_rows(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::Postgres | Dialect::Mysql => " FOR UPDATE",
        }
    }

    /// The names of a table's columns, in order: its catalogue, read as the statements that
    /// follow will resolve the name.
    fn columns_query(self) -> &'static str {
        match self {
            Dialect::Sqlite => "SELECT name FROM pragma_table_info(?)",
            // `to_regclass` resolves the name through `search_path`.
            Dialect::Postgres => {
                "SELECT attname::text FROM pg_catalog.pg_attribute \
                 WHERE attrelid = to_regclass(quote_ident(?)) AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
            }
            // information_schema compares names without regard to case; table names are not so
            // compared on most servers, so only an exact match counts.
            Dialect::Mysql => {
                "SELECT column_name FROM information_schema.columns \
                 WHERE table_schema = DATABASE() AND BYTES(table_name) = BYTES(?) ORDER BY ordinal_position"
            }
        }
    }

    /// Bytes on disk of a table with its indexes, as the database reports them.
    pub(super) fn table_size_query(self) -> &'static str {
        match self {
            // dbstat counts the pages of each b-tree; an index's pages belong to its table.
            Dialect::Sqlite => {
                "SELECT coalesce(sum(d.pgsize), 0) FROM dbstat d JOIN sqlite_master m ON m.name = d.name \
                 WHERE m.tbl_name = ?"
            }
            Dialect::Postgres => "SELECT pg_total_relation_size(to_regclass(?))",
            // InnoDB's own estimate, as SHOW TABLE STATUS reports it.
            Dialect::Mysql => {
                "SELECT coalesce(sum(data_length + index_length), 0) FROM information_schema.tables \
                 WHERE table_schema = DATABASE() AND table_name = ?"
            }
        }
    }

    /// A new random uuid, for a sandbox's `task_instance` key.
    pub(crate) fn random_uuid(self) -> &'static str {
        match self {
            // The 32 hex digits of SQLAlchemy's CHAR(32) uuid type.
            Dialect::Sqlite => "lower(hex(randomblob(16)))",
            // md5(…)::uuid works on every server version (gen_random_uuid needs PostgreSQL 13).
            Dialect::Postgres => "md5(random()::text || clock_timestamp()::text)::uuid",
            // Without dashes, which both MariaDB's UUID type and CHAR(32) take.
            Dialect::Mysql => "REPLACE(UUID(), '-', '')",
        }
    }
}

/// The parameters a statement's text takes: the next one, and the one each placeholder
/// written so far takes.
struct Bound {
    next: usize,
    order: Vec<usize>,
}

/// `BYTES(…)`, `OCTETS(…)`, `CHARS(…)` or `SAME(…)` at the start of `text`: the token, its argument and
/// what follows the closing parenthesis.
fn function_call(text: &str) -> Option<(&'static str, &str, &str)> {
    let function = ["BYTES", "OCTETS", "CHARS", "SAME"]
        .into_iter()
        .find(|f| text.strip_prefix(f).is_some_and(|rest| rest.starts_with('(')))?;
    let body = &text[function.len() + 1..];
    let mut depth = 1;
    for (i, c) in body.char_indices() {
        depth += match c {
            '(' => 1,
            ')' => -1,
            _ => 0,
        };
        if depth == 0 {
            return Some((function, &body[..i], &body[i + 1..]));
        }
    }
    None
}

/// An insert that updates the row already holding the same unique key: `ON CONFLICT … DO
/// UPDATE` on SQLite and PostgreSQL, `ON DUPLICATE KEY UPDATE` on MySQL. The conflict target is
/// Airflow's own unique key, so a concurrent Airflow worker writing the same key updates the
/// same row instead of failing or duplicating it.
pub(crate) struct Upsert {
    pub(crate) table: &'static str,
    /// Every column written, separated by `, `, the unique key's first.
    pub(crate) columns: &'static str,
    /// The unique key's columns, as `columns` begins.
    pub(crate) key: &'static str,
    /// The columns an existing row takes from the new one, `updated_at` last: MySQL assigns
    /// left to right, and the keep-the-newer-row test reads the old `updated_at`.
    pub(crate) update: &'static str,
}

/// What an [`Upsert`] does to the row already holding the same unique key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum OnConflict {
    /// The new values replace it.
    Replace,
    /// The new values replace it unless its `updated_at` is later than theirs.
    KeepNewer,
    /// It is left as it is: only a missing row is inserted, and the statement's count of
    /// changed rows is 1 for an insert and 0 otherwise on every database (MySQL counts an
    /// update that changes nothing as 0, without the `CLIENT_FOUND_ROWS` flag, which this
    /// tool never sets).
    Keep,
}

impl Upsert {
    /// The statement for one row's `values` (one per column), with what it does to an existing
    /// row.
    pub(crate) fn query<'a>(
        &self,
        dialect: Dialect,
        values: &[Param<'a>],
        existing: OnConflict,
    ) -> Query<'a> {
        self.rows(dialect, &[values], existing)
    }

    /// The statement for several rows at once, no unique key twice among them (PostgreSQL
    /// refuses to update a row twice in one statement).
    ///
    /// MySQL rebinds a single row's new values rather than reading them with `VALUES(col)`,
    /// which MySQL 8.0.20 deprecated; MariaDB lacks MySQL's replacement syntax, so several rows
    /// read them with `VALUES(col)`, and a `KeepNewer` of several rows counts the rows it keeps
    /// in the session variable `@kept` (the number the MySQL connection reports as left alone).
    pub(crate) fn rows<'a>(
        &self,
        dialect: Dialect,
        rows: &[&[Param<'a>]],
        existing: OnConflict,
    ) -> Query<'a> {
        const MARKS: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?";
        let mut query = Query::new("INSERT INTO ").push(self.table).push(" (").push(self.columns);
        let mut glue = ") VALUES ";
        for values in rows {
            let marks = MARKS.get(..(values.len() * 3).saturating_sub(1)).unwrap_or(MARKS);
            query = query.push(std::mem::replace(&mut glue, ", ")).push(marks).push(")");
            query = values.iter().fold(query, |q, v| q.bind(*v));
        }
        let mysql = dialect == Dialect::Mysql;
        if existing == OnConflict::Keep {
            // MySQL has no DO NOTHING, and INSERT IGNORE would also turn other errors
            // (a value too long, a NULL) into warnings: an update to itself changes nothing.
            return if mysql {
                query.push(" ON DUPLICATE KEY UPDATE updated_at = updated_at")
            } else {
                query.push(" ON CONFLICT (").push(self.key).push(") DO NOTHING")
            };
        }
        let keep_newer = existing == OnConflict::KeepNewer;
        let columns: Vec<&str> = self.columns.split(", ").collect();
        let value_of = |column: &str| {
            let at = columns.iter().position(|c| *c == column);
            at.and_then(|i| rows.first().and_then(|values| values.get(i)).copied())
                .unwrap_or(Param::Text(None))
        };
        let mut glue = " ON DUPLICATE KEY UPDATE ";
        if !mysql {
            query = query.push(" ON CONFLICT (").push(self.key);
            glue = ") DO UPDATE SET ";
        }
        for column in self.update.split(", ") {
            query = query.push(std::mem::replace(&mut glue, ", ")).push(column);
            query = match (mysql, keep_newer, rows.len() == 1) {
                (true, true, true) => {
                    let newer = query.and(" = IF(updated_at <= ?", value_of("updated_at"));
                    newer.and(", ?, ", value_of(column)).push(column).push(")")
                }
                (true, false, true) => query.and(" = ?", value_of(column)),
                (true, true, false) if column == "updated_at" => query.push(
                    " = IF(updated_at <= VALUES(updated_at), VALUES(updated_at), \
                     IF((@kept := @kept + 1) > 0, updated_at, updated_at))",
                ),
                (true, true, false) => query
                    .push(" = IF(updated_at <= VALUES(updated_at), VALUES(")
                    .push(column)
                    .push("), ")
                    .push(column)
                    .push(")"),
                (true, false, false) => query.push(" = VALUES(").push(column).push(")"),
                (false, _, _) => query.push(" = excluded.").push(column),
            };
        }
        if keep_newer && !mysql {
            query = query.push(" WHERE ").push(self.table).push(".updated_at <= excluded.updated_at");
        }
        query
    }

    /// The names of the unique key's columns.
    pub(crate) fn key_columns(&self) -> impl Iterator<Item = &'static str> {
        self.key.split(", ")
    }

    /// Where `column` is among the values of a row.
    pub(crate) fn position(&self, column: &str) -> Option<usize> {
        self.columns.split(", ").position(|c| c == column)
    }
}

/// What one batch of a clean did: rows deleted, and the last id it covered (`None` when no
/// expired row is left after it, which ends the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Batch {
    pub deleted: u64,
    pub last_id: Option<i64>,
}

/// What restored rows did to the table: `left` counts the rows that left the stored row with
/// their key as it was (newer than they are, or `OnConflict::Keep`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Restored {
    pub inserted: u64,
    pub replaced: u64,
    pub left: u64,
}

impl Restored {
    /// The counts of a statement that was sent `sent` rows and wrote `written` of them,
    /// `inserted` as new rows.
    pub(super) fn of(sent: usize, inserted: usize, written: usize) -> Restored {
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        Restored {
            inserted: count(inserted),
            replaced: count(written.saturating_sub(inserted)),
            left: count(sent.saturating_sub(written)),
        }
    }

    pub(super) fn add(&mut self, other: Restored) {
        self.inserted += other.inserted;
        self.replaced += other.replaced;
        self.left += other.left;
    }
}

/// Where a damaged row lives, for `doctor`'s samples: in JSON, its `table` and its columns.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "table")]
pub(crate) enum Place {
    #[serde(rename = "task_state_store")]
    Task(TaskScope),
    /// A task row whose map_index is not an integer (SQLite stores any value in any column):
    /// the text it holds in place of the index.
    #[serde(rename = "task_state_store")]
    DamagedTask { dag_id: String, run_id: String, task_id: String, map_index: String },
    /// An asset row; the name is `None` when the asset row is gone.
    #[serde(rename = "asset_state_store")]
    Asset { asset_id: i64, asset_name: Option<String> },
}

/// One damaged row: where it is, its key, and what is wrong with it in a few words.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct FoundRow {
    #[serde(flatten)]
    pub place: Place,
    pub key: String,
    pub detail: String,
}

/// The rows one check found: how many in all, and the first few of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Finding {
    pub count: u64,
    pub sample: Vec<FoundRow>,
}

impl Finding {
    /// Two tables' findings as one (task rows first), the sample still at most `limit` rows.
    pub(crate) fn and(mut self, other: Finding, limit: u64) -> Finding {
        self.count += other.count;
        self.sample.extend(other.sample);
        self.sample.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        self
    }
}

/// A connection to one metastore: the driver's way of running a [`Query`], and what the
/// database does its own way. Every default is the portable behaviour.
pub(crate) trait Connection {
    fn dialect(&self) -> Dialect;
    /// The database in words, for messages: never a password.
    fn location(&self) -> &str;
    /// Runs a statement and returns its rows; by default, those [`Connection::query_each`]
    /// hands over, collected.
    fn query(&mut self, query: &Query<'_>) -> std::result::Result<Vec<Row>, Cause> {
        let mut found = Vec::new();
        self.query_each(query, &mut |row| {
            found.push(row);
            ControlFlow::Continue(())
        })?;
        Ok(found)
    }
    /// Runs a statement and hands its rows to `each` one at a time, as the driver reads them
    /// off the database (SQLite's steps, PostgreSQL's row stream, MySQL's result iterator),
    /// so that memory stays flat however many rows it returns. `each` breaks to stop early.
    fn query_each(
        &mut self,
        query: &Query<'_>,
        each: &mut dyn FnMut(Row) -> ControlFlow<()>,
    ) -> std::result::Result<(), Cause>;
    /// Runs a statement and returns how many rows it changed.
    fn execute(&mut self, query: &Query<'_>) -> std::result::Result<u64, Cause>;
    /// Runs an insert of one row and returns the id the database gave it.
    fn insert(&mut self, query: &Query<'_>) -> std::result::Result<i64, Cause>;

    /// Whether `cause`, the failure of a statement that commits (an autocommitted DELETE, a
    /// COMMIT), leaves its outcome unknown: the statement was sent and no answer came back (the
    /// connection dropped, a read timed out), so the server may have committed it. An error the
    /// server answered with (a lock wait or statement timeout, a deadlock) committed nothing.
    /// SQLite runs in this process and always answers, hence the default.
    fn outcome_unknown(&self, _cause: &(dyn std::error::Error + 'static)) -> bool {
        false
    }

    /// Whether a `table.column` value can equal `text`: text a column cannot hold matches no
    /// row, and is answered without asking (MySQL refuses such a comparison outright).
    fn can_match(&self, _table: &str, _column: &str, _text: &str) -> bool {
        true
    }
    /// Whether the unique keys compare text with PAD SPACE (MySQL's `_bin` collations): `x`
    /// and `x ` are then one key, and a write of one updates the row stored with the other.
    fn pads_spaces(&self) -> bool {
        false
    }
    /// The largest value, in bytes, the `value` columns hold: SQLite's default
    /// `SQLITE_MAX_LENGTH` of a string, below PostgreSQL's 1 GiB per field.
    fn max_value_bytes(&self) -> u64 {
        1_000_000_000
    }
    /// Refuses text `table.column` cannot hold, before anything is written.
    fn check_text(&self, _table: &str, _column: &str, _text: &str) -> Result<()> {
        Ok(())
    }
    /// Refuses a task row the columns cannot hold, before anything is written.
    fn check_task_row(&self, _row: &TaskWrite<'_>) -> Result<()> {
        Ok(())
    }
    /// Refuses an asset row the columns cannot hold (`writer_map_index` is the map index of
    /// the task that last wrote it, restored by `import`).
    fn check_asset_row(
        &self,
        _key: &str,
        _value: &str,
        _at: Timestamp,
        _writer_map_index: Option<i64>,
    ) -> Result<()> {
        Ok(())
    }
    /// A database that opened read-only although writes were asked for says so up front.
    fn check_writable(&mut self) -> Result<()> {
        Ok(())
    }
    /// A problem found before the tables are looked at (PostgreSQL's missing schema).
    fn schema_problem(&mut self) -> Result<Option<super::schema::SchemaProblem>> {
        Ok(None)
    }

    /// Prepares this connection for a clean: takes the lock that keeps two cleans of the same
    /// database from running at once (the lock lasts as long as the connection; only a
    /// session or user that could itself delete from `task_state_store` can hold it, see
    /// docs/architecture.md) and bounds every lock wait of later statements by
    /// `lock_timeout`, so a clean never queues for long behind Airflow's workers.
    fn begin_clean(&mut self, lock_timeout: Duration) -> Result<CleanLock>;
    /// Ends a clean's work on this connection, whatever its outcome: work the session let the
    /// database defer (SQLite's WAL checkpoints) is done here. Best effort, never fails; it
    /// returns the bytes of that work left undone (a WAL file a reader kept from being
    /// emptied), for the summary to say so.
    fn finish_clean(&mut self) -> Option<u64> {
        None
    }
    /// The most rows a batch of `--batch-size auto` may delete, when the space its changes
    /// take before the commit is bounded (SQLite's `-wal` file or rollback journal, beside the
    /// database, on a file system that may be nearly full); `None`: no bound but the engine's.
    fn batch_rows_bound(&self) -> Option<u64> {
        None
    }
    /// Whether a batched clean walks the task table by dag run rather than by id (see
    /// [`super::clean::Cursor`]): on SQLite, whose one writer rewrites at each commit every
    /// index page its batch touched, when the table's ids scatter the rows of its dag runs.
    /// A server's batches do not pay that way, and their statements that skip rows a worker
    /// holds are written for the walk by id.
    fn walks_by_run(&mut self) -> bool {
        false
    }
    /// Whether a DELETE can return the rows it deleted (`RETURNING`): PostgreSQL, SQLite and
    /// MariaDB; MySQL cannot. A delete of rows read before then takes one statement a page
    /// ([`crate::db::Store::delete_task_rows_returning`]) instead of a locking read and a DELETE.
    fn deletes_returning(&self) -> bool {
        false
    }
    /// The BEGIN of a transaction whose statements all see the database as its first one did,
    /// and whose DELETE of a row another session has changed or deleted since fails
    /// ([`Connection::conflicted`]) instead of following the row: PostgreSQL's REPEATABLE
    /// READ. A DELETE in it by the bounds of a read removes exactly the rows read. `None`
    /// where a DELETE reads the latest rows whatever the isolation (InnoDB) or the writers
    /// wait for the transaction (SQLite's `BEGIN IMMEDIATE`).
    fn snapshot_begin(&self) -> Option<&'static str> {
        None
    }
    /// Whether `cause` is the failure of a statement of a [`Connection::snapshot_begin`]
    /// transaction that met a row changed since its snapshot (PostgreSQL's 40001).
    fn conflicted(&self, _cause: &(dyn std::error::Error + 'static)) -> bool {
        false
    }
    /// Deletes one batch of expired task rows after `after_id`; by default the portable way,
    /// `clean::batch_by_nth_expired`, which a dialect without a better statement keeps.
    fn delete_expired_batch(&mut self, cutoff: Timestamp, after_id: i64, n: u64) -> Result<Batch> {
        super::clean::batch_by_nth_expired(self, cutoff, after_id, n)
    }
    /// A counter of the writes the database has committed, read now, with whether this
    /// session's own commits count in it: two readings that differ by more than this
    /// session's own commits between them say that another session wrote. A clean's pacing
    /// reads it between batches (see `ops::clean`); `None` where the database cannot tell.
    fn write_mark(&mut self) -> Result<Option<WriteMark>> {
        Ok(None)
    }
    /// Whether another session of this database is in a statement or a transaction now, or
    /// ended one within `within`: where [`Connection::write_mark`] counts the writes of the
    /// whole server, it tells the writes a clean could disturb (this database's, among them
    /// the workers' on the state tables) from another tenant's. `None` where the server cannot
    /// tell: every write counts then.
    fn others_active_here(&mut self, _within: Duration) -> Result<Option<bool>> {
        Ok(None)
    }
    /// The lowest and the highest id of the task table (`None` when it is empty), read
    /// without waiting for a lock: a clean's progress lines only. Behind a table another
    /// session locked (`LOCK TABLE`, `ALTER`, `airflow db migrate`) the read fails at once
    /// instead of spending `--lock-timeout` before the batches spend it again.
    /// By default the portable read, `clean::id_bounds`.
    fn id_bounds_at_once(&mut self) -> Result<Option<(i64, i64)>> {
        super::clean::id_bounds(self)
    }
    /// How a clean paces itself while no other session writes ([`QuietPace`]): by default
    /// batches of about 250 ms back to back, since a server's row locks keep a batch from
    /// blocking writers of live rows.
    fn quiet_pace(&self) -> QuietPace {
        QuietPace { batch: Duration::from_millis(250), pause_share: 0.0, max_pause: Duration::ZERO }
    }
    /// Whether a batch of this session's clean met a row another session held and skipped it
    /// (PostgreSQL, MySQL 8.0.1+, MariaDB 10.6+); only then can a complete run leave expired
    /// rows behind.
    fn skipped_locked_rows(&self) -> bool {
        false
    }
    /// Deletes the expired rows with `after < id <= up_to` (every one after `after`
    /// when `None`) in one transaction; `clean::delete_range` is the portable statement.
    fn delete_expired_range(&mut self, cutoff: Timestamp, after: i64, up_to: Option<i64>) -> Result<u64>;
    /// Sets the session up for an import's batches. A database may let their commits return
    /// before they are on disk, as long as, after [`Connection::durable_commits`], the next
    /// commit waits for the disk and makes every commit before it durable as well.
    fn begin_import(&mut self) -> Result<()> {
        Ok(())
    }
    /// Called before the last transaction of an import begins; see
    /// [`Connection::begin_import`].
    fn durable_commits(&mut self) -> Result<()> {
        Ok(())
    }
    /// Upserts the rows of one chunk of an import in the open transaction (each row the
    /// upsert's values in its column order; no unique key twice) and counts what they did;
    /// `restore::row_by_row` is the portable way.
    fn restore_rows(
        &mut self,
        upsert: &Upsert,
        rows: &[&[Param<'_>]],
        existing: OnConflict,
    ) -> Result<Restored>;
    /// Rows whose integer columns hold something else (text, a float); `None` where the
    /// database enforces its column types and the question does not arise.
    fn mistyped_integers(&mut self, _sample: u64) -> Result<Option<Finding>> {
        Ok(None)
    }
    /// Timestamps stored as text that is not Airflow's form; `None` where the columns hold
    /// real timestamps and the question does not arise.
    fn malformed_timestamps(&mut self, _sample: u64) -> Result<Option<Finding>> {
        Ok(None)
    }
    /// Creates the sandbox's tables (Airflow 3.3.2's, and the marker table) in an empty database.
    fn create_tables(&mut self) -> Result<()>;

    /// Whether every [`Query::matching`] clause of `query` can match a stored value.
    fn can_match_all(&self, query: &Query<'_>) -> bool {
        query.compared().iter().all(|(table, column, text)| self.can_match(table, column, text))
    }
    /// A statement's rows, a failure put in words with what was being done and where.
    fn rows(&mut self, what: &str, query: &Query<'_>) -> Result<Vec<Row>> {
        if !self.can_match_all(query) {
            return Ok(Vec::new());
        }
        Ok(self.query(query).map_err(|cause| Error::db(format!("{what} in {}", self.location()), cause))?)
    }
    /// A statement's count of changed rows, a failure put in words.
    fn run(&mut self, what: &str, query: &Query<'_>) -> Result<u64> {
        if !self.can_match_all(query) {
            return Ok(0);
        }
        Ok(self.execute(query).map_err(|cause| Error::db(format!("{what} in {}", self.location()), cause))?)
    }
}

/// A statement's rows, each decoded by `map`.
pub(crate) fn all<C: Connection + ?Sized, T>(
    conn: &mut C,
    what: &str,
    query: &Query<'_>,
    map: impl Fn(&mut Fields) -> Decoded<T>,
) -> Result<Vec<T>> {
    let rows = conn.rows(what, query)?;
    rows.into_iter()
        .map(|row| {
            map(&mut Fields::new(row))
                .map_err(|e| Error::db(format!("{what} in {}", conn.location()), e).into())
        })
        .collect()
}

/// A statement's rows, each decoded by `map` and handed to `each` as it is read, none of them
/// held: `list --limit 0` of a million rows then takes the memory of one. A decoding error, or
/// one `each` returns, stops the reading and is returned.
pub(crate) fn each<C: Connection + ?Sized, T>(
    conn: &mut C,
    what: &str,
    query: &Query<'_>,
    map: impl Fn(&mut Fields) -> Decoded<T>,
    mut each: impl FnMut(T) -> Result<ControlFlow<()>>,
) -> Result<()> {
    if !conn.can_match_all(query) {
        return Ok(());
    }
    let location = conn.location().to_string();
    let mut failed = None;
    conn.query_each(query, &mut |row| {
        let step = map(&mut Fields::new(row))
            .map_err(|e| Error::db(format!("{what} in {location}"), e).into())
            .and_then(&mut each);
        step.unwrap_or_else(|e| {
            failed = Some(e);
            ControlFlow::Break(())
        })
    })
    .map_err(|cause| Error::db(format!("{what} in {location}"), cause))?;
    failed.map_or(Ok(()), Err)
}

/// How long a clean's batches take, and the pause after each, while no other session writes:
/// the pause is `pause_share` of the time the batch took, at most `max_pause`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct QuietPace {
    pub(crate) batch: Duration,
    pub(crate) pause_share: f64,
    pub(crate) max_pause: Duration,
}

/// A reading of [`Connection::write_mark`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteMark {
    pub(crate) value: u64,
    /// Each write transaction this session commits adds one to it.
    pub(crate) counts_own: bool,
}

/// A statement's first row, decoded by `map`.
pub(crate) fn first<C: Connection + ?Sized, T>(
    conn: &mut C,
    what: &str,
    query: &Query<'_>,
    map: impl Fn(&mut Fields) -> Decoded<T>,
) -> Result<Option<T>> {
    Ok(all(conn, what, query, map)?.into_iter().next())
}

/// The columns of `table`; `None` when there is no such table.
pub(crate) fn columns<C: Connection + ?Sized>(conn: &mut C, table: &str) -> Result<Option<Vec<String>>> {
    let query = Query::new(conn.dialect().columns_query()).bind(table);
    let names = all(conn, "cannot read the tables", &query, |f| Ok(f.text()))?;
    Ok(if names.is_empty() { None } else { Some(names) })
}

/// Runs `work` in one transaction, committed when it succeeds and rolled back when it fails;
/// `begin` and `commit` name what failed when the transaction cannot begin or commit.
pub(crate) fn in_transaction<C: Connection + ?Sized, T>(
    conn: &mut C,
    [begin, commit]: [&str; 2],
    work: impl FnOnce(&mut C) -> Result<T>,
) -> Result<T> {
    conn.run(begin, &Query::new(conn.dialect().begin()))?;
    let done = work(conn);
    if done.is_ok() {
        conn.run(commit, &Query::new("COMMIT"))?;
    } else {
        // The first error is the one to report; a failed rollback ends with the connection.
        let _ = conn.execute(&Query::new("ROLLBACK"));
    }
    done
}

/// A `SELECT count(*)`'s count.
pub(crate) fn count<C: Connection + ?Sized>(conn: &mut C, what: &str, query: &Query<'_>) -> Result<u64> {
    Ok(first(conn, what, query, Fields::count)?.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spelt(dialect: Dialect, text: &'static str, params: &[Param<'_>]) -> String {
        dialect.render(text, params)
    }

    #[test]
    fn placeholders_quotes_and_functions_are_spelt_per_dialect() {
        let text = r#"SELECT "key" FROM t WHERE id > ? AND "key" = ? AND OCTETS(t.value) > ? ORDER BY BYTES(s."key")"#;
        let params = [Param::Int(Some(1)), Param::Text(Some("k")), Param::Int(None)];
        assert_eq!(
            spelt(Dialect::Sqlite, text, &params),
            r#"SELECT "key" FROM t WHERE id > ? AND "key" = ? AND length(CAST(t.value AS BLOB)) > ? ORDER BY s."key""#
        );
        assert_eq!(
            spelt(Dialect::Postgres, text, &params),
            r#"SELECT "key" FROM t WHERE id > $1::bigint AND "key" = $2::text AND octet_length(t.value) > $3::bigint ORDER BY s."key" COLLATE "C""#
        );
        assert_eq!(
            spelt(Dialect::Mysql, text, &params),
            "SELECT `key` FROM t WHERE id > ? AND `key` = ? AND LENGTH(t.value) > ? ORDER BY CAST(s.`key` AS BINARY)"
        );
    }

    #[test]
    fn exact_matches_bind_twice_on_mysql_only() {
        let query = Query::new("SELECT id FROM t")
            .exactly(" WHERE dag_id = ?", ("t", "dag_id"), "x ")
            .exactly(r#" AND s."key" = ? ORDER BY id"#, ("t", "key"), "k")
            .and(" LIMIT ?", Param::Int(Some(5)));
        let (x, k, five) = (Param::Text(Some("x ")), Param::Text(Some("k")), Param::Int(Some(5)));
        let render = |dialect: Dialect| dialect.render_bound(&query.text(), query.params());
        assert_eq!(
            render(Dialect::Sqlite),
            (
                r#"SELECT id FROM t WHERE dag_id = ? AND s."key" = ? ORDER BY id LIMIT ?"#.to_string(),
                vec![x, k, five]
            )
        );
        assert_eq!(
            render(Dialect::Postgres).0,
            r#"SELECT id FROM t WHERE dag_id = $1::text AND s."key" = $2::text ORDER BY id LIMIT $3::bigint"#
        );
        assert_eq!(
            render(Dialect::Mysql),
            (
                "SELECT id FROM t WHERE dag_id = ? AND CHAR_LENGTH(dag_id) = CHAR_LENGTH(?) \
                 AND s.`key` = ? AND CHAR_LENGTH(s.`key`) = CHAR_LENGTH(?) ORDER BY id LIMIT ?"
                    .to_string(),
                vec![x, x, k, k, five]
            )
        );
    }

    #[test]
    fn literals_and_longer_names_are_left_alone() {
        let text = "SELECT 'a?\"b', CHAR_LENGTH(x), MY_CHARS(y), CHARS(z) FROM t";
        assert_eq!(
            spelt(Dialect::Postgres, text, &[]),
            "SELECT 'a?\"b', CHAR_LENGTH(x), MY_CHARS(y), char_length(z) FROM t"
        );
    }

    const TASK: Upsert = Upsert {
        table: "task_state_store",
        columns: r#"dag_run_id, "key", value, updated_at"#,
        key: r#"dag_run_id, "key""#,
        update: "value, updated_at",
    };

    #[test]
    fn an_upsert_keeps_the_newer_row_in_each_syntax() {
        let now = Timestamp::from_micros(0);
        let values =
            [Param::Int(Some(1)), Param::Text(Some("k")), Param::Text(Some("v")), Param::Time(Some(now))];
        let sqlite = TASK.query(Dialect::Sqlite, &values, OnConflict::KeepNewer);
        assert_eq!(
            Dialect::Sqlite.render(&sqlite.text(), sqlite.params()),
            r#"INSERT INTO task_state_store (dag_run_id, "key", value, updated_at) VALUES (?, ?, ?, ?) ON CONFLICT (dag_run_id, "key") DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at WHERE task_state_store.updated_at <= excluded.updated_at"#
        );
        let mysql = TASK.query(Dialect::Mysql, &values, OnConflict::KeepNewer);
        assert_eq!(
            Dialect::Mysql.render(&mysql.text(), mysql.params()),
            "INSERT INTO task_state_store (dag_run_id, `key`, value, updated_at) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE value = IF(updated_at <= ?, ?, value), updated_at = IF(updated_at <= ?, ?, updated_at)"
        );
        let rebound = &mysql.params()[4..];
        assert_eq!(rebound, &[values[3], values[2], values[3], values[3]]);
        let plain = TASK.query(Dialect::Mysql, &values, OnConflict::Replace);
        assert!(plain.text().ends_with("ON DUPLICATE KEY UPDATE value = ?, updated_at = ?"));
    }

    #[test]
    fn an_upsert_that_keeps_the_existing_row_inserts_only() {
        let now = Timestamp::from_micros(0);
        let values =
            [Param::Int(Some(1)), Param::Text(Some("k")), Param::Text(Some("v")), Param::Time(Some(now))];
        let insert =
            r#"INSERT INTO task_state_store (dag_run_id, "key", value, updated_at) VALUES (?, ?, ?, ?)"#;
        for (dialect, tail) in [
            (Dialect::Sqlite, r#" ON CONFLICT (dag_run_id, "key") DO NOTHING"#),
            (Dialect::Postgres, r#" ON CONFLICT (dag_run_id, "key") DO NOTHING"#),
            (Dialect::Mysql, " ON DUPLICATE KEY UPDATE updated_at = updated_at"),
        ] {
            let query = TASK.query(dialect, &values, OnConflict::Keep);
            assert_eq!(query.text(), format!("{insert}{tail}"), "{dialect:?}");
            assert_eq!(query.params(), &values, "{dialect:?}");
        }
    }
}
