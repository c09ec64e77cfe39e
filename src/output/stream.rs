//! Entries written as they are read (`list`): JSON, YAML and plain write each entry as it
//! comes and hold none of them, and their text is byte for byte what the whole document
//! rendered at once would be (one JSON array, one YAML sequence, one line per row). A table
//! needs every row before it can size its columns, so it holds them, at most [`TABLE_ROWS`]:
//! `list` asks the database for no more than that in a table, and says so when rows are left.
//!
//! Measured on a million task rows (peak RSS): holding them all took 2.4 GB as plain text,
//! 5.0 GB as a table and 5.7 GB as JSON; written as they come, 20 MB in every format, and
//! 54 MB for a table of 10,000 rows.

use std::io::{self, BufWriter, IsTerminal, Write};
use std::marker::PhantomData;

use super::Format;
use super::entries::{Entry, Parsed, plain_row};
use super::{Table, yaml};
use crate::error::{Error, Result};
use crate::json::{self, Style, Value};
use crate::time::Timestamp;

/// The most rows a table holds. A table of 10,000 rows is about 2 MB of text, already more than
/// anyone reads at a terminal; plain, JSON and YAML have no such limit.
pub(crate) const TABLE_ROWS: u64 = 10_000;

/// A list of entries, written to stdout as they are pushed.
pub(crate) struct EntryStream<E: Entry, W: Write = BufWriter<io::StdoutLock<'static>>> {
    format: Format,
    out: W,
    /// The JSON style of the whole document: indented at a terminal, one line elsewhere.
    style: Style,
    now: Timestamp,
    written: u64,
    table: Table,
    entry: PhantomData<E>,
}

impl<E: Entry> EntryStream<E> {
    pub(crate) fn stdout(format: Format) -> Self {
        let style = if io::stdout().is_terminal() { Style::Pretty(2) } else { Style::Unicode };
        EntryStream::new(BufWriter::new(io::stdout().lock()), format, style)
    }
}

impl<E: Entry, W: Write> EntryStream<E, W> {
    fn new(out: W, format: Format, style: Style) -> Self {
        EntryStream {
            format,
            out,
            style,
            now: Timestamp::now(),
            written: 0,
            table: Table { title: None, headers: E::HEADERS.to_vec(), rows: Vec::new() },
            entry: PhantomData,
        }
    }

    /// Writes one entry (a table keeps its row until [`Self::finish`]).
    pub(crate) fn push(&mut self, entry: &E) -> Result<()> {
        Ok(self.write(entry).map_err(Error::stdout)?)
    }

    /// Makes only the form the format shows (the value is parsed in every format, so a
    /// damaged one is warned about in all of them).
    fn write(&mut self, entry: &E) -> io::Result<()> {
        let parsed = Parsed::of(entry);
        match self.format {
            Format::Plain => writeln!(self.out, "{}", plain_row(entry, json::dumps_unicode(&parsed.value)))?,
            Format::Table => {
                let text = json::dumps_unicode(&parsed.value);
                self.table.rows.push(parsed.row(entry, &text, true, self.now));
            }
            Format::Json => {
                let doc = entry.doc(parsed.value, parsed.reference, self.now);
                let text = json::to_text(&serde_json::to_value(&doc)?, self.style);
                match self.style {
                    // Inside the array each line of the item is one level deeper; a JSON text
                    // has no newline but those the indentation puts there.
                    Style::Pretty(indent) => {
                        self.out.write_all(if self.written == 0 { b"[" } else { b"," })?;
                        for line in text.lines() {
                            write!(self.out, "\n{:indent$}{line}", "")?;
                        }
                    }
                    _ => {
                        self.out.write_all(if self.written == 0 { b"[" } else { b", " })?;
                        self.out.write_all(text.as_bytes())?;
                    }
                }
            }
            // A sequence of one item is that item's `- …` lines: the items follow one another.
            Format::Yaml => {
                let doc = entry.doc(parsed.value, parsed.reference, self.now);
                let item = Value::Array(vec![serde_json::to_value(&doc)?]);
                self.out.write_all(yaml::render(&item)?.as_bytes())?;
            }
        }
        self.written += 1;
        Ok(())
    }

    /// Ends the document (the table is written now) and flushes it.
    pub(crate) fn finish(mut self) -> Result<()> {
        Ok(self.end().map_err(Error::stdout)?)
    }

    fn end(&mut self) -> io::Result<()> {
        match (self.format, self.written) {
            (Format::Json, 0) => self.out.write_all(b"[]\n")?,
            (Format::Json, _) if matches!(self.style, Style::Pretty(_)) => self.out.write_all(b"\n]\n")?,
            (Format::Json, _) => self.out.write_all(b"]\n")?,
            (Format::Yaml, 0) => self.out.write_all(yaml::render(&Value::Array(Vec::new()))?.as_bytes())?,
            (Format::Table, _) => self.out.write_all(self.table.render().as_bytes())?,
            _ => {}
        }
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AssetEntry, StoredTime, TaskEntry, TaskScope};
    use crate::output::entries;

    fn task(n: i64, value: &str) -> TaskEntry {
        TaskEntry {
            scope: TaskScope {
                dag_id: format!("dag_{n}"),
                run_id: "r\t1".to_string(),
                task_id: "t é".to_string(),
                map_index: n - 1,
            },
            key: format!("k{n}"),
            value: value.to_string(),
            updated_at: StoredTime::Unreadable("2026-11-28 00:00:00.000001".to_string()),
            expires_at: None,
        }
    }

    fn streamed<E: Entry>(list: &[E], format: Format, style: Style) -> String {
        let mut out = Vec::new();
        let mut stream = EntryStream::new(&mut out, format, style);
        for entry in list {
            stream.write(entry).unwrap();
        }
        stream.end().unwrap();
        drop(stream);
        String::from_utf8(out).unwrap()
    }

    /// What `list` printed when it rendered the whole document at once.
    fn whole<E: Entry>(list: &[E], format: Format, style: Style) -> String {
        let view = entries(list, true, None);
        match format {
            Format::Json => format!("{}\n", json::to_text(&serde_json::to_value(&view.docs).unwrap(), style)),
            Format::Yaml => yaml::render(&serde_json::to_value(&view.docs).unwrap()).unwrap(),
            Format::Plain if view.plain_rows.is_empty() => String::new(),
            Format::Plain => format!("{}\n", view.plain_rows.join("\n")),
            Format::Table => view.table.render(),
        }
    }

    #[test]
    fn every_format_streams_the_text_of_the_whole_document() {
        let values = [r#"{"a": [1, {"b": []}], "c": {}}"#, "[]", r#""x\ny""#, "not json", "1e-05"];
        let tasks: Vec<TaskEntry> = values.iter().zip(1..).map(|(value, n)| task(n, value)).collect();
        let asset = AssetEntry {
            asset_id: 3,
            asset_name: Some("orders".to_string()),
            asset_uri: None,
            key: "k".to_string(),
            value: r#"{"n": 1}"#.to_string(),
            updated_at: StoredTime::Unreadable("x".to_string()),
            last_updated_by_kind: Some("api".to_string()),
            last_updated_by_dag_id: None,
            last_updated_by_run_id: None,
            last_updated_by_task_id: None,
            last_updated_by_map_index: None,
        };
        // The value that is not JSON is warned of once per rendering that reads it, the
        // streamed one and the whole one alike: kept here, not left in the test log.
        let ((), notes) = crate::output::capture_notes(|| {
            for format in [Format::Json, Format::Yaml, Format::Plain, Format::Table] {
                for style in [Style::Unicode, Style::Pretty(2)] {
                    for n in [0, 1, tasks.len()] {
                        let list = &tasks[..n];
                        assert_eq!(
                            streamed(list, format, style),
                            whole(list, format, style),
                            "{format:?} {n}"
                        );
                    }
                    let assets = [asset.clone(), asset.clone()];
                    assert_eq!(streamed(&assets, format, style), whole(&assets, format, style));
                }
            }
        });
        let warning = "warning: the value of key \"k4\" is not valid JSON (Expecting value: line 1 column 1 \
                       (char 0)); shown as text";
        assert!(notes.iter().all(|note| note == warning), "{notes:?}");
        assert_eq!(notes.len(), 16, "{notes:?}");
    }
}
