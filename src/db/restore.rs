//! `import`'s writes: rows put back exactly as exported, many at a time, with a count of what
//! each did to the row already stored with its key.
//!
//! A batch of rows is cut into chunks of at most [`CHUNK_ROWS`] rows and [`CHUNK_BYTES`] of
//! values, with no unique key twice in a chunk, and each chunk goes to the connection's
//! [`Connection::restore_rows`]. Each database writes a chunk with one multi-row upsert and
//! learns what it did to each row from the server: `RETURNING` on SQLite (rowids above the
//! largest before) and PostgreSQL (`xmax`), MySQL's counts of records and duplicates. The
//! portable way, [`row_by_row`], reads the stored row's `updated_at` and then upserts, one row
//! at a time; it is left for what the others cannot count (one MySQL row, SQLite rowids at
//! their limit).

use anyhow::bail;

use std::collections::{HashMap, HashSet};

use super::Store;
use super::dialect::{Connection, Dialect, OnConflict, Restored, Upsert, all, first};
use super::query::{Fields, Param, Query};
use super::store::{ASSET_UPSERT, TASK_UPSERT, asset_restore_values, in_list, task_values};
use super::{AssetRestore, TaskWrite};
use crate::error::{Error, Result};
use crate::model::{MAX_ID_CHARS, MAX_KEY_CHARS, StoredTime};

/// Rows in one statement: 9,000 parameters, below every database's limit (SQLite 32,766;
/// PostgreSQL and MySQL 65,535).
const CHUNK_ROWS: usize = 1000;
/// Value bytes in one statement, so that a chunk of large values stays far below MySQL's
/// `max_allowed_packet` (16 MiB by default on MariaDB); a larger value is a chunk of its own.
const CHUNK_BYTES: usize = 4 << 20;

/// Keys in one lookup of [`Store::stored_updated_at_all`]: an `IN` list of one task instance's
/// (or asset's) keys, far below every dialect's limit on parameters.
const LOOKUP_ROWS: usize = 1000;

/// A row of an import, its dag run or asset found.
pub(crate) enum RestoreRow<'a> {
    Task(TaskWrite<'a>),
    Asset(AssetRestore<'a>),
}

impl RestoreRow<'_> {
    fn upsert(&self) -> &'static Upsert {
        match self {
            RestoreRow::Task(_) => &TASK_UPSERT,
            RestoreRow::Asset(_) => &ASSET_UPSERT,
        }
    }

    fn values(&self) -> [Param<'_>; 9] {
        match self {
            RestoreRow::Task(w) => task_values(w),
            RestoreRow::Asset(w) => asset_restore_values(w),
        }
    }
}

impl Store {
    /// Whether the columns can hold the row, checked without writing (`import` checks every
    /// row before it writes any, so that nothing the database would refuse fails a batch
    /// after others committed). The writes check again. On every dialect: what `set` refuses
    /// (an empty key or id) and the lengths Airflow's columns declare (SQLite does not enforce
    /// them, but Airflow's API and `set` do); then each text as its column holds it (NUL on
    /// PostgreSQL, MySQL's character sets) and the connection's own limits.
    pub(crate) fn check_restore(&self, row: &RestoreRow<'_>) -> Result<()> {
        let (table, texts, map_index, value) = match row {
            RestoreRow::Task(w) => {
                let texts = [
                    ("dag_id", Some(w.scope.dag_id.as_str())),
                    ("run_id", Some(&w.scope.run_id)),
                    ("task_id", Some(&w.scope.task_id)),
                    ("key", Some(w.key)),
                    ("value", Some(w.value)),
                ];
                ("task_state_store", texts, Some(("map_index", w.scope.map_index)), w.value)
            }
            RestoreRow::Asset(w) => {
                let texts = [
                    ("key", Some(w.key)),
                    ("value", Some(w.value)),
                    ("last_updated_by_dag_id", w.writer.dag_id.as_deref()),
                    ("last_updated_by_run_id", w.writer.run_id.as_deref()),
                    ("last_updated_by_task_id", w.writer.task_id.as_deref()),
                ];
                let map_index = w.writer.map_index.map(|n| ("last_updated_by_map_index", n));
                ("asset_state_store", texts, map_index, w.value)
            }
        };
        for (column, text) in texts {
            let Some(text) = text else { continue };
            if let Some(chars) = declared_chars(column) {
                check_chars(column, text, chars, table != "asset_state_store" || column == "key")?;
            }
            self.conn.check_text(table, column, text)?;
        }
        if let Some((column, n)) = map_index {
            check_map_index(column, n)?;
        }
        let max = self.conn.max_value_bytes();
        if value.len() as u64 > max {
            bail!(Error::Usage(format!(
                "the value is {} bytes; the database's {table}.value column holds at most {max}",
                value.len()
            )));
        }
        match row {
            RestoreRow::Task(w) => self.conn.check_task_row(w),
            RestoreRow::Asset(w) => {
                self.conn.check_asset_row(w.key, w.value, w.updated_at, w.writer.map_index)
            }
        }
    }

    /// `text` as the unique keys compare it: without its trailing spaces where they pad
    /// (MySQL), so that two texts are one key exactly when they are for the database.
    pub(crate) fn key_text<'t>(&self, text: &'t str) -> &'t str {
        if self.conn.pads_spaces() { text.trim_end_matches(' ') } else { text }
    }

    /// Whether any row of a dag run (`task`) or asset has a key or task id that ends in a
    /// space: only then can a row without one be the same key as a stored one to a PAD SPACE
    /// collation. Answered from the unique key's index (its first column is the parent).
    pub(crate) fn stores_spaced_keys(&mut self, task: bool, parent: i64) -> Result<bool> {
        let query = if task {
            Query::new(
                r#"SELECT 1 FROM task_state_store WHERE dag_run_id = ? AND ("key" LIKE '% ' OR task_id LIKE '% ') LIMIT 1"#,
            )
        } else {
            Query::new(r#"SELECT 1 FROM asset_state_store WHERE asset_id = ? AND "key" LIKE '% ' LIMIT 1"#)
        };
        let what = "cannot read the stored keys";
        Ok(first(&mut *self.conn, what, &query.bind(parent), |f: &mut Fields| f.int())?.is_some())
    }

    /// The key (and for a task row the task id) of the row stored under the row's unique key
    /// as the database compares it, when its text is not the row's: the stored row a write of
    /// this one would update under another name (a PAD SPACE collation).
    pub(crate) fn stored_twin(&mut self, row: &RestoreRow<'_>) -> Result<Option<(String, String)>> {
        let upsert = row.upsert();
        let values = row.values();
        let query = match row {
            RestoreRow::Task(_) => Query::new(r#"SELECT task_id, "key" FROM "#),
            RestoreRow::Asset(_) => Query::new(r#"SELECT '', "key" FROM "#),
        };
        let query = by_unique_key(query, upsert, &values);
        let what = format!("cannot read {}", upsert.table);
        let stored = first(&mut *self.conn, &what, &query, |f: &mut Fields| Ok((f.text(), f.text())))?;
        let (task_id, key) = match row {
            RestoreRow::Task(w) => (w.scope.task_id.as_str(), w.key),
            RestoreRow::Asset(w) => ("", w.key),
        };
        Ok(stored.filter(|(t, k)| t != task_id || k != key))
    }

    /// The `updated_at` of the row stored now with the row's unique key, if there is one.
    pub(crate) fn stored_updated_at(&mut self, row: &RestoreRow<'_>) -> Result<Option<StoredTime>> {
        stored_updated_at(&mut *self.conn, row.upsert(), &row.values())
    }

    /// The `updated_at` of the row stored now with each row's unique key, in the rows' order:
    /// a batch of `import`'s first pass read a task instance (or asset) at a time, its keys in
    /// `IN` lists of [`LOOKUP_ROWS`], where a statement per row took 121 s for 1,000,000 rows on
    /// MariaDB, and an `OR` of 200 whole keys cost PostgreSQL's planner as much as the lookups.
    /// The rows of an export come a task instance at a time, so a batch is a few statements. A
    /// stored row counts only when its key equals the row's exactly (the map below), so that on
    /// MySQL `'x'` does not take `'x '`'s row: the first pass has refused such pairs already.
    pub(crate) fn stored_updated_at_all(
        &mut self,
        rows: &[RestoreRow<'_>],
    ) -> Result<Vec<Option<StoredTime>>> {
        // The rows' keys by their scope (dag run or asset, task id, map index).
        let mut scopes: HashMap<LookupScope<'_>, Vec<&str>> = HashMap::new();
        for row in rows {
            let (scope, key) = match row {
                RestoreRow::Task(w) => ((w.dag_run_id, w.scope.task_id.as_str(), w.scope.map_index), w.key),
                // An asset row's task id is '' and its map index -2, apart from any task's.
                RestoreRow::Asset(w) => ((w.asset_id, "", -2), w.key),
            };
            scopes.entry(scope).or_default().push(key);
        }
        let mut found: HashMap<StoredKey, StoredTime> = HashMap::new();
        for ((parent, task_id, map_index), keys) in &scopes {
            let task = *map_index != -2;
            for chunk in keys.chunks(LOOKUP_ROWS) {
                let query = if task {
                    Query::new(
                        r#"SELECT dag_run_id, task_id, map_index, "key", updated_at FROM task_state_store"#,
                    )
                    .and(" WHERE dag_run_id = ?", *parent)
                    .and(" AND task_id = ?", *task_id)
                    .and(" AND map_index = ?", *map_index)
                } else {
                    Query::new(r#"SELECT asset_id, '', -1, "key", updated_at FROM asset_state_store"#)
                        .and(" WHERE asset_id = ?", *parent)
                };
                let query = in_list(query.push(r#" AND "key" IN"#), chunk.iter().copied());
                let what =
                    if task { "cannot read task_state_store" } else { "cannot read asset_state_store" };
                let stored = all(&mut *self.conn, what, &query, |f: &mut Fields| {
                    Ok(((f.int()?, f.text(), f.int()?, f.text()), f.required_time()))
                })?;
                found.extend(stored);
            }
        }
        Ok(rows.iter().map(|row| found.get(&stored_key(row)).cloned()).collect())
    }

    /// Writes the rows in the open transaction, every column as given (nothing is stamped
    /// now), what happens to a stored row with the same key being `existing`'s; the task rows'
    /// counts, then the asset rows'.
    pub(crate) fn restore(
        &mut self,
        rows: &[RestoreRow<'_>],
        existing: OnConflict,
    ) -> Result<(Restored, Restored)> {
        let mut counts = (Restored::default(), Restored::default());
        for row in rows {
            self.check_restore(row)?;
        }
        for (upsert, count) in [(&TASK_UPSERT, &mut counts.0), (&ASSET_UPSERT, &mut counts.1)] {
            let values: Vec<[Param<'_>; 9]> = rows
                .iter()
                .filter(|row| row.upsert().table == upsert.table)
                .map(RestoreRow::values)
                .collect();
            for chunk in chunks(upsert, &values) {
                count.add(self.conn.restore_rows(upsert, &chunk, existing)?);
            }
        }
        Ok(counts)
    }
}

/// The rows [`Store::stored_updated_at_all`] looks up together: a dag run's task id and map
/// index, or an asset (`''` and -2).
type LookupScope<'a> = (i64, &'a str, i64);

/// A unique key as [`Store::stored_updated_at_all`] reads it back: the dag run or asset, the
/// task id and map index (`''` and -1 for an asset row) and the key.
type StoredKey = (i64, String, i64, String);

fn stored_key(row: &RestoreRow<'_>) -> StoredKey {
    match row {
        RestoreRow::Task(w) => (w.dag_run_id, w.scope.task_id.clone(), w.scope.map_index, w.key.to_string()),
        RestoreRow::Asset(w) => (w.asset_id, String::new(), -1, w.key.to_string()),
    }
}

/// The length in characters a column of the state tables declares: `VARCHAR(512)` for keys,
/// `VARCHAR(250)` for Airflow's ids, the same on every dialect (see each `schema.sql`).
fn declared_chars(column: &str) -> Option<usize> {
    match column {
        "key" => Some(MAX_KEY_CHARS),
        "dag_id"
        | "run_id"
        | "task_id"
        | "last_updated_by_dag_id"
        | "last_updated_by_run_id"
        | "last_updated_by_task_id" => Some(MAX_ID_CHARS),
        _ => None,
    }
}

/// Refuses text longer than its column's `VARCHAR(chars)`, and empty text where `set` refuses
/// it (`required`: keys and a task row's ids).
fn check_chars(column: &str, text: &str, chars: usize, required: bool) -> Result<()> {
    if required && text.is_empty() {
        return Err(Error::Usage(format!("\"{column}\" must not be empty")).into());
    }
    // Bytes bound characters from above: most texts are counted without decoding them.
    if text.len() > chars {
        let n = text.chars().count();
        if n > chars {
            bail!(Error::Usage(format!(
                "\"{column}\" is {n} characters long; Airflow's column (VARCHAR({chars})) holds at most {chars}"
            )));
        }
    }
    Ok(())
}

/// Airflow's map index columns are 32-bit `INTEGER`s on every dialect, and -1 means unmapped;
/// SQLite would store a wider number, which Airflow's own reads and writes never make.
fn check_map_index(column: &str, n: i64) -> Result<()> {
    if n < -1 || i32::try_from(n).is_err() {
        bail!(Error::Usage(format!(
            "\"{column}\" {n} is out of range: Airflow's column (INTEGER) holds -1 (unmapped) to {}",
            i32::MAX
        )));
    }
    Ok(())
}

/// The rows cut into statements: at most [`CHUNK_ROWS`] rows and [`CHUNK_BYTES`] of text
/// each, and a new one wherever a unique key would come twice.
fn chunks<'r, 'a>(upsert: &Upsert, rows: &'r [[Param<'a>; 9]]) -> Vec<Vec<&'r [Param<'a>]>> {
    let key_len = upsert.key_columns().count();
    let mut chunks = Vec::new();
    let mut chunk: Vec<&[Param<'a>]> = Vec::new();
    let mut keys = HashSet::new();
    let mut bytes = 0;
    for row in rows {
        let size: usize = row.iter().map(|p| if let Param::Text(Some(t)) = p { t.len() } else { 8 }).sum();
        let full = chunk.len() >= CHUNK_ROWS || (bytes + size > CHUNK_BYTES && !chunk.is_empty());
        if full || keys.contains(&row[..key_len]) {
            chunks.push(std::mem::take(&mut chunk));
            keys.clear();
            bytes = 0;
        }
        keys.insert(&row[..key_len]);
        bytes += size;
        chunk.push(&row[..]);
    }
    if !chunk.is_empty() {
        chunks.push(chunk);
    }
    chunks
}

/// The SQL of a connection's chunk upserts, built and rendered once per table, mode and
/// number of rows rather than once per chunk: on MariaDB that, and the driver parsing each
/// new text, took 2.7 s of 18.6 s for 1,000,000 rows.
#[derive(Default)]
pub(super) struct ChunkSql(HashMap<(&'static str, OnConflict, usize), String>);

impl ChunkSql {
    /// The statement of `upsert` for `rows`, followed by the connection's `suffix`; only the
    /// number of rows matters, not their values.
    pub(super) fn get(
        &mut self,
        dialect: Dialect,
        upsert: &Upsert,
        rows: &[&[Param<'_>]],
        existing: OnConflict,
        suffix: &'static str,
    ) -> String {
        /// Full chunks, and the shorter ones that end batches.
        const KEPT: usize = 32;
        let key = (upsert.table, existing, rows.len());
        if let Some(sql) = self.0.get(&key) {
            return sql.clone();
        }
        if self.0.len() >= KEPT {
            self.0.clear();
        }
        let query = upsert.rows(dialect, rows, existing).push(suffix);
        let sql = dialect.render(&query.text(), query.params());
        self.0.insert(key, sql.clone());
        sql
    }
}

/// `query`, the table and a `WHERE` on its unique key, bound to the values that begin `values`:
/// a plain `=`, as the unique key compares, not [`Query::matching`]'s exact one.
fn by_unique_key<'a>(query: Query<'a>, upsert: &Upsert, values: &[Param<'a>]) -> Query<'a> {
    let mut glue = " WHERE ";
    upsert.key_columns().zip(values).fold(query.push(upsert.table), |query, (column, value)| {
        query.push(std::mem::replace(&mut glue, " AND ")).push(column).and(" = ?", *value)
    })
}

/// The `updated_at` of the row stored with the unique key that begins `values`.
fn stored_updated_at<C: Connection + ?Sized>(
    conn: &mut C,
    upsert: &Upsert,
    values: &[Param<'_>],
) -> Result<Option<StoredTime>> {
    let query = by_unique_key(Query::new("SELECT updated_at FROM "), upsert, values);
    let what = format!("cannot read {}", upsert.table);
    first(conn, &what, &query, |f: &mut Fields| Ok(f.required_time()))
}

/// The portable [`Connection::restore_rows`]: each row's stored `updated_at` read, then the row
/// written unless the stored one is newer. `Keep` needs no read: its insert changes a row only
/// when it inserts one.
pub(super) fn row_by_row<C: Connection + ?Sized>(
    conn: &mut C,
    upsert: &Upsert,
    rows: &[&[Param<'_>]],
    existing: OnConflict,
) -> Result<Restored> {
    let what = format!("cannot restore into {}", upsert.table);
    let updated_at = upsert.position("updated_at");
    let mut done = Restored::default();
    for values in rows {
        let write = upsert.query(conn.dialect(), values, existing);
        if existing == OnConflict::Keep {
            match conn.run(&what, &write)? {
                0 => done.left += 1,
                _ => done.inserted += 1,
            }
            continue;
        }
        let new = updated_at.and_then(|i| match values.get(i) {
            Some(Param::Time(at)) => *at,
            _ => None,
        });
        match stored_updated_at(conn, upsert, values)? {
            None => done.inserted += 1,
            Some(StoredTime::At(at))
                if existing == OnConflict::KeepNewer && new.is_some_and(|new| at > new) =>
            {
                done.left += 1;
                continue;
            }
            Some(_) => done.replaced += 1,
        }
        conn.run(&what, &write)?;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;

    fn row(key: &'static str, value: &'static str) -> [Param<'static>; 9] {
        let at = Param::Time(Some(Timestamp::from_micros(0)));
        [1_i64.into(), "t".into(), (-1_i64).into(), key.into(), "d".into(), "r".into(), value.into(), at, at]
    }

    #[test]
    fn a_key_twice_starts_a_new_chunk() {
        let rows = [row("a", "1"), row("b", "1"), row("a", "2"), row("c", "1"), row("b", "2")];
        let sizes: Vec<usize> = chunks(&TASK_UPSERT, &rows).iter().map(Vec::len).collect();
        assert_eq!(sizes, [2, 3]);
    }

    #[test]
    fn chunks_are_bounded_in_rows_and_bytes() {
        let keys: Vec<String> = (0..2500).map(|i| format!("k{i}")).collect();
        let rows: Vec<_> = keys
            .iter()
            .map(|k| {
                let mut r = row("", "1");
                r[3] = Param::Text(Some(k));
                r
            })
            .collect();
        let sizes: Vec<usize> = chunks(&TASK_UPSERT, &rows).iter().map(Vec::len).collect();
        assert_eq!(sizes, [1000, 1000, 500]);
        let big = "x".repeat(5 << 20);
        let rows = [
            row("a", "1"),
            {
                let mut r = row("b", "");
                r[6] = Param::Text(Some(&big));
                r
            },
            row("c", "1"),
        ];
        let sizes: Vec<usize> = chunks(&TASK_UPSERT, &rows).iter().map(Vec::len).collect();
        assert_eq!(sizes, [1, 1, 1], "a value that would take a chunk past the bound is one of its own");
    }
}
