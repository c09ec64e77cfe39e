//! The one way a statement reaches a database, and the one way a row comes back.
//!
//! A [`Query`] is statement text made only of `&'static str` pieces, plus bound parameters: no
//! key, dag id, asset name or any other value can become SQL text, because the type has no way
//! to take a runtime string. Statements are written once, in a neutral form that
//! [`Dialect::render`](crate::url::Dialect) spells for each database (see `dialect.rs`).
//!
//! Every driver hands its rows back as [`Cell`]s; [`Fields`] reads them left to right into the
//! domain's types, so a row of `task_state_store` is decoded once for all three databases. A
//! value of an unexpected type is an error naming the column, never a panic: a damaged or
//! foreign row must not stop a viewer.

use crate::model::StoredTime;
use crate::time::Timestamp;

/// A value bound to a `?` of a statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Param<'a> {
    Int(Option<i64>),
    Text(Option<&'a str>),
    Time(Option<Timestamp>),
    /// The row count of a `LIMIT`; `None` is no limit, which each database spells its own way.
    Limit(Option<u64>),
}

/// Parameters from the values the statements bind. Counts and bounds given as `u64` (a sample
/// size, a byte bound) past `i64::MAX` mean "all", which `i64::MAX` still is.
macro_rules! param_from {
    ($($value:ty => |$v:ident| $param:expr;)*) => {
        $(impl<'a> From<$value> for Param<'a> {
            fn from($v: $value) -> Self {
                $param
            }
        })*
    };
}

param_from! {
    i64 => |n| Param::Int(Some(n));
    Option<i64> => |n| Param::Int(n);
    u64 => |n| Param::Int(Some(i64::try_from(n).unwrap_or(i64::MAX)));
    &'a str => |text| Param::Text(Some(text));
    &'a String => |text| Param::Text(Some(text));
    Option<&'a str> => |text| Param::Text(text);
    Timestamp => |at| Param::Time(Some(at));
    Option<Timestamp> => |at| Param::Time(at);
}

/// A statement in the neutral form of `dialect.rs`, with its parameters in order.
#[derive(Debug, Clone)]
pub(crate) struct Query<'a> {
    pieces: Vec<&'static str>,
    params: Vec<Param<'a>>,
    compared: Vec<(&'static str, &'static str, &'a str)>,
}

impl<'a> Query<'a> {
    pub(crate) fn new(sql: &'static str) -> Self {
        Query { pieces: vec![sql], params: Vec::new(), compared: Vec::new() }
    }

    /// Binds the next `?`.
    #[must_use]
    pub(crate) fn bind(mut self, param: impl Into<Param<'a>>) -> Self {
        self.params.push(param.into());
        self
    }

    /// Appends text (a clause, a column list).
    #[must_use]
    pub(crate) fn push(mut self, sql: &'static str) -> Self {
        self.pieces.push(sql);
        self
    }

    /// Appends a clause with one `?` and binds it.
    #[must_use]
    pub(crate) fn and(self, sql: &'static str, param: impl Into<Param<'a>>) -> Self {
        self.push(sql).bind(param)
    }

    /// Appends a clause that compares `(table, column)` with `text` (its one `?`) and binds it,
    /// as the database compares: on MySQL, whose collations ignore trailing spaces, `k ` finds
    /// `k`, as Airflow's own lookups (its API, its workers) do on the same database. Text the
    /// column cannot hold (MySQL's `utf8mb3` and emoji) equals no stored value: the statement
    /// then matches no row, and is answered without asking the database, which would refuse the
    /// comparison outright.
    #[must_use]
    pub(crate) fn matching(
        mut self,
        sql: &'static str,
        (table, column): (&'static str, &'static str),
        text: &'a str,
    ) -> Self {
        self.compared.push((table, column, text));
        self.and(sql, text)
    }

    /// [`Query::matching`], but exact on every database, for `list`'s and `export`'s filters,
    /// which are documented to match exactly: spelt `SAME(x, ?)`, which MySQL compares by
    /// length too (and still through the column's index).
    #[must_use]
    pub(crate) fn exactly(
        mut self,
        sql: &'static str,
        (table, column): (&'static str, &'static str),
        text: &'a str,
    ) -> Self {
        self.compared.push((table, column, text));
        // `sql` is `<glue> x = ?<rest>`, `x` the last word before ` = ?`.
        let Some((head, rest)) = sql.split_once(" = ?") else { return self.and(sql, text) };
        let at = head.rfind(' ').map_or(0, |i| i + 1);
        self.push(&head[..at]).push("SAME(").push(&head[at..]).push(", ?)").bind(text).push(rest)
    }

    /// The `(table, column, text)` of every [`Query::matching`] and [`Query::exactly`] clause.
    pub(crate) fn compared(&self) -> &[(&'static str, &'static str, &'a str)] {
        &self.compared
    }

    /// The neutral text, before a dialect spells it.
    pub(crate) fn text(&self) -> String {
        self.pieces.concat()
    }

    pub(crate) fn params(&self) -> &[Param<'a>] {
        &self.params
    }
}

/// One value of a row, as a driver hands it over.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Null,
    /// An integer; a boolean is 0 or 1.
    Int(i64),
    Text(String),
    /// A timestamp the driver decoded (PostgreSQL's binary form); SQLite and MySQL give text.
    Time(Timestamp),
    /// Anything else, shown as the driver prints it (a float, `infinity`).
    Other(String),
}

pub(crate) type Row = Vec<Cell>;

/// A value that is not what its column should hold.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct DecodeError(String);

impl DecodeError {
    pub(crate) fn new(message: String) -> DecodeError {
        DecodeError(message)
    }
}

pub(crate) type Decoded<T> = std::result::Result<T, DecodeError>;

/// The values of one row, taken left to right.
pub(crate) struct Fields {
    cells: std::vec::IntoIter<Cell>,
    at: usize,
}

impl Fields {
    pub(crate) fn new(row: Row) -> Fields {
        Fields { cells: row.into_iter(), at: 0 }
    }

    fn next(&mut self) -> Cell {
        self.at += 1;
        self.cells.next().unwrap_or(Cell::Null)
    }

    pub(crate) fn int(&mut self) -> Decoded<i64> {
        match self.next() {
            Cell::Int(n) => Ok(n),
            // MySQL hands sums over as DECIMAL text.
            Cell::Text(text) => text.trim().parse().map_err(|_| self.wrong("an integer", &text)),
            Cell::Null => Err(self.wrong("an integer", "NULL")),
            Cell::Time(at) => Err(self.wrong("an integer", &at.to_rfc3339())),
            Cell::Other(text) => Err(self.wrong("an integer", &text)),
        }
    }

    /// An integer column that may hold anything (SQLite keeps `'abc'` in an INTEGER column):
    /// the integer, or the text of what the column holds instead.
    pub(crate) fn int_or_text(&mut self) -> std::result::Result<i64, String> {
        match self.next() {
            Cell::Int(n) => Ok(n),
            Cell::Text(text) | Cell::Other(text) => text.trim().parse().map_err(|_| text),
            Cell::Null => Err("NULL".to_string()),
            Cell::Time(at) => Err(at.to_rfc3339()),
        }
    }

    pub(crate) fn opt_int(&mut self) -> Decoded<Option<i64>> {
        if self.cells.as_slice().first().is_none_or(|cell| *cell == Cell::Null) {
            self.next();
            return Ok(None);
        }
        self.int().map(Some)
    }

    /// A count, sum or size: never negative.
    pub(crate) fn count(&mut self) -> Decoded<u64> {
        Ok(u64::try_from(self.int()?).unwrap_or(0))
    }

    pub(crate) fn bool(&mut self) -> Decoded<bool> {
        Ok(self.int()? != 0)
    }

    /// Text columns; a damaged row may hold anything, which is shown rather than refused.
    pub(crate) fn text(&mut self) -> String {
        self.opt_text().unwrap_or_default()
    }

    pub(crate) fn opt_text(&mut self) -> Option<String> {
        match self.next() {
            Cell::Null => None,
            Cell::Int(n) => Some(n.to_string()),
            Cell::Text(text) | Cell::Other(text) => Some(text),
            Cell::Time(at) => Some(at.to_sqlite_text()),
        }
    }

    /// A timestamp column: text that is not Airflow's form is kept as it is, to be shown.
    pub(crate) fn time(&mut self) -> Option<StoredTime> {
        Some(match self.next() {
            Cell::Null => return None,
            Cell::Time(at) => StoredTime::At(at),
            Cell::Text(text) => match Timestamp::parse_db_text(&text) {
                Ok(at) => StoredTime::At(at),
                Err(_) => StoredTime::Unreadable(text),
            },
            Cell::Int(n) => StoredTime::Unreadable(n.to_string()),
            Cell::Other(text) => StoredTime::Unreadable(text),
        })
    }

    /// A `NOT NULL` timestamp column (a NULL there is shown as empty text).
    pub(crate) fn required_time(&mut self) -> StoredTime {
        self.time().unwrap_or_else(|| StoredTime::Unreadable(String::new()))
    }

    fn wrong(&self, expected: &str, found: &str) -> DecodeError {
        DecodeError(format!("column {}: expected {expected}, found {found}", self.at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_literals_become_statement_text() {
        let key = String::from("k'; DROP TABLE x; --");
        let query = Query::new("SELECT 1 FROM t WHERE a = ?").bind(&key).and(" AND b = ?", 3_i64);
        assert_eq!(query.text(), "SELECT 1 FROM t WHERE a = ? AND b = ?");
        assert_eq!(query.params(), &[Param::Text(Some(key.as_str())), Param::Int(Some(3))]);
    }

    #[test]
    fn fields_decode_what_each_driver_hands_over() {
        let mut f = Fields::new(vec![
            Cell::Text("12".into()),
            Cell::Null,
            Cell::Int(7),
            Cell::Text("2026-11-28 00:00:00.000001".into()),
            Cell::Text("yesterday".into()),
            Cell::Int(1),
            Cell::Other("1.5".into()),
        ]);
        assert_eq!(f.int().unwrap(), 12);
        assert_eq!(f.opt_int().unwrap(), None);
        assert_eq!(f.text(), "7");
        assert_eq!(f.time().map(|t| t.display()).as_deref(), Some("2026-11-28T00:00:00.000001Z"));
        assert_eq!(f.time(), Some(StoredTime::Unreadable("yesterday".into())));
        assert!(f.bool().unwrap());
        assert_eq!(f.int().unwrap_err().to_string(), "column 7: expected an integer, found 1.5");
        assert_eq!(f.opt_text(), None, "past the last column");
    }
}
