//! The export format shared by `export`, `import` and the `--archive` of `clean` and `clear`:
//! JSON Lines, one object per stored row, carrying everything needed to put the row back
//! exactly as it was.
//!
//! The value is the stored text itself, as a JSON string, not the decoded value: decoding and
//! re-encoding could change its bytes (key order, float forms, escapes), and a damaged value
//! that is not JSON must survive too. Timestamps are RFC 3339 in UTC with microseconds, the
//! resolution of every dialect's column.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::db::AssetWriter;
use crate::json::{self, Json};
use crate::model::{AssetEntry, StoredTime, TaskEntry, TaskScope};
use crate::text::quote;
use crate::time::Timestamp;

/// One task row of an export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskRecord {
    pub scope: TaskScope,
    pub key: String,
    pub value: String,
    pub updated_at: Timestamp,
    pub expires_at: Option<Timestamp>,
}

/// One asset row of an export. The asset is found again by name and uri when both were
/// known (ids differ between databases), else by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AssetRecord {
    pub asset_id: i64,
    pub asset_name: Option<String>,
    pub asset_uri: Option<String>,
    pub key: String,
    pub value: String,
    pub updated_at: Timestamp,
    pub writer: AssetWriter,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    Task(TaskRecord),
    Asset(AssetRecord),
}

fn text(s: &str) -> Json {
    Json::Str(s.to_string())
}

fn opt_text(s: Option<&str>) -> Json {
    s.map_or(Json::Null, text)
}

fn int(n: i64) -> Json {
    Json::Int(n.to_string())
}

/// A stored timestamp that is not one (text another writer left) is written as it is, and
/// `import` refuses that line rather than guess.
fn time(t: &StoredTime) -> Json {
    Json::Str(t.display())
}

/// The export line of a task row (without the newline).
pub(crate) fn task_line(entry: &TaskEntry) -> String {
    let doc = Json::Object(vec![
        ("kind".to_string(), text("task")),
        ("dag_id".to_string(), text(&entry.scope.dag_id)),
        ("run_id".to_string(), text(&entry.scope.run_id)),
        ("task_id".to_string(), text(&entry.scope.task_id)),
        ("map_index".to_string(), int(entry.scope.map_index)),
        ("key".to_string(), text(&entry.key)),
        ("value".to_string(), text(&entry.value)),
        ("updated_at".to_string(), time(&entry.updated_at)),
        ("expires_at".to_string(), entry.expires_at.as_ref().map_or(Json::Null, time)),
    ]);
    json::dumps_unicode(&doc)
}

/// The export line of an asset row (without the newline).
pub(crate) fn asset_line(entry: &AssetEntry) -> String {
    let doc = Json::Object(vec![
        ("kind".to_string(), text("asset")),
        ("asset_id".to_string(), int(entry.asset_id)),
        ("asset_name".to_string(), opt_text(entry.asset_name.as_deref())),
        ("asset_uri".to_string(), opt_text(entry.asset_uri.as_deref())),
        ("key".to_string(), text(&entry.key)),
        ("value".to_string(), text(&entry.value)),
        ("updated_at".to_string(), time(&entry.updated_at)),
        ("last_updated_by_kind".to_string(), opt_text(entry.last_updated_by_kind.as_deref())),
        ("last_updated_by_dag_id".to_string(), opt_text(entry.last_updated_by_dag_id.as_deref())),
        ("last_updated_by_run_id".to_string(), opt_text(entry.last_updated_by_run_id.as_deref())),
        ("last_updated_by_task_id".to_string(), opt_text(entry.last_updated_by_task_id.as_deref())),
        ("last_updated_by_map_index".to_string(), entry.last_updated_by_map_index.map_or(Json::Null, int)),
    ]);
    json::dumps_unicode(&doc)
}

/// The fields of one line's object, taken by name; every problem names the field.
struct Fields(Vec<(String, Json)>);

impl Fields {
    fn take(&mut self, name: &str) -> Option<Json> {
        let at = self.0.iter().position(|(k, _)| k == name)?;
        Some(self.0.remove(at).1)
    }

    fn string(&mut self, name: &str) -> Result<String, String> {
        match self.take(name) {
            Some(Json::Str(s)) => Ok(s),
            Some(other) => Err(format!("\"{name}\" must be a string, not {}", other.type_name())),
            None => Err(format!("\"{name}\" is missing")),
        }
    }

    fn opt_string(&mut self, name: &str) -> Result<Option<String>, String> {
        match self.take(name) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::Str(s)) => Ok(Some(s)),
            Some(other) => Err(format!("\"{name}\" must be a string or null, not {}", other.type_name())),
        }
    }

    fn opt_int(&mut self, name: &str) -> Result<Option<i64>, String> {
        match self.take(name) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::Int(n)) => n.parse().map(Some).map_err(|_| format!("\"{name}\" {n} is out of range")),
            Some(other) => Err(format!("\"{name}\" must be an integer, not {}", other.type_name())),
        }
    }

    fn int(&mut self, name: &str) -> Result<i64, String> {
        self.opt_int(name)?.ok_or_else(|| format!("\"{name}\" is missing"))
    }

    fn time(&mut self, name: &str) -> Result<Timestamp, String> {
        let text = self.string(name)?;
        Timestamp::parse_rfc3339(&text).map_err(|e| format!("\"{name}\": {e}"))
    }

    fn opt_time(&mut self, name: &str) -> Result<Option<Timestamp>, String> {
        match self.opt_string(name)? {
            None => Ok(None),
            Some(text) => Timestamp::parse_rfc3339(&text).map(Some).map_err(|e| format!("\"{name}\": {e}")),
        }
    }

    /// A field the format does not have is refused: it may be a typo that would otherwise
    /// silently restore a different row.
    fn done(self) -> Result<(), String> {
        match self.0.first() {
            Some((name, _)) => Err(format!("unknown field \"{name}\"")),
            None => Ok(()),
        }
    }
}

/// The kinds Airflow's REST API can read back; anything else breaks it.
const WRITER_KINDS: &[&str] = &["task", "watcher", "api"];

/// Parses one line of an export. The message of an error says what is wrong, not where:
/// the caller adds the line number.
pub(crate) fn parse_line(line: &str) -> Result<Record, String> {
    let doc = json::parse(line).map_err(|e| format!("not JSON: {e}"))?;
    let Json::Object(fields) = doc else {
        return Err(format!("expected an object, got {}", doc.type_name()));
    };
    let mut f = Fields(fields);
    let record = match f.string("kind")?.as_str() {
        "task" => {
            let record = TaskRecord {
                scope: TaskScope {
                    dag_id: f.string("dag_id")?,
                    run_id: f.string("run_id")?,
                    task_id: f.string("task_id")?,
                    map_index: f.int("map_index")?,
                },
                key: f.string("key")?,
                value: f.string("value")?,
                updated_at: f.time("updated_at")?,
                expires_at: f.opt_time("expires_at")?,
            };
            if record.scope.map_index < -1 {
                return Err(format!("\"map_index\" {} is invalid", record.scope.map_index));
            }
            Record::Task(record)
        }
        "asset" => {
            let record = AssetRecord {
                asset_id: f.int("asset_id")?,
                asset_name: f.opt_string("asset_name")?,
                asset_uri: f.opt_string("asset_uri")?,
                key: f.string("key")?,
                value: f.string("value")?,
                updated_at: f.time("updated_at")?,
                writer: AssetWriter {
                    kind: f.opt_string("last_updated_by_kind")?,
                    dag_id: f.opt_string("last_updated_by_dag_id")?,
                    run_id: f.opt_string("last_updated_by_run_id")?,
                    task_id: f.opt_string("last_updated_by_task_id")?,
                    map_index: f.opt_int("last_updated_by_map_index")?,
                },
            };
            if let Some(kind) = &record.writer.kind
                && !WRITER_KINDS.contains(&kind.as_str())
            {
                return Err(format!(
                    "\"last_updated_by_kind\" {} is not one of task, watcher, api (Airflow's API cannot read it)",
                    quote(kind)
                ));
            }
            Record::Asset(record)
        }
        other => return Err(format!("\"kind\" must be \"task\" or \"asset\", not {}", quote(other))),
    };
    if matches!(&record, Record::Task(TaskRecord { key, .. }) | Record::Asset(AssetRecord { key, .. }) if key.is_empty())
    {
        return Err("\"key\" must not be empty".to_string());
    }
    f.done()?;
    Ok(record)
}

/// Where export lines go: stdout or a file, buffered, with the rows written counted.
pub(crate) struct Sink {
    out: BufWriter<Box<dyn Write>>,
    file: Option<(File, PathBuf)>,
    pub task_rows: u64,
    pub asset_rows: u64,
}

impl Sink {
    pub(crate) fn stdout() -> Sink {
        Sink { out: BufWriter::new(Box::new(io::stdout())), file: None, task_rows: 0, asset_rows: 0 }
    }

    /// A file, created or emptied (`export --file`), or appended to (`--archive`: an archive
    /// never loses what an earlier run put there).
    pub(crate) fn file(path: &Path, append: bool) -> io::Result<Sink> {
        let mut options = File::options();
        options.create(true);
        if append {
            options.append(true);
        } else {
            options.write(true).truncate(true);
        }
        let file = options.open(path)?;
        let writer = file.try_clone()?;
        Ok(Sink {
            out: BufWriter::new(Box::new(writer)),
            file: Some((file, path.to_path_buf())),
            task_rows: 0,
            asset_rows: 0,
        })
    }

    /// Opens an `--archive` file for appending, or says which file cannot be written.
    pub(crate) fn archive(path: &Path) -> crate::error::Result<Sink> {
        Sink::file(path, true).map_err(|e| archive_error(path, e))
    }

    pub(crate) fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|(_, p)| p.as_path())
    }

    pub(crate) fn task(&mut self, entry: &TaskEntry) -> io::Result<()> {
        writeln!(self.out, "{}", task_line(entry))?;
        self.task_rows += 1;
        Ok(())
    }

    pub(crate) fn asset(&mut self, entry: &AssetEntry) -> io::Result<()> {
        writeln!(self.out, "{}", asset_line(entry))?;
        self.asset_rows += 1;
        Ok(())
    }

    /// Flushes, and for a file waits until the lines are on disk: an archive must be durable
    /// before the rows it holds are deleted.
    pub(crate) fn sync(&mut self) -> io::Result<()> {
        self.out.flush()?;
        if let Some((file, _)) = &self.file {
            file.sync_all()?;
        }
        Ok(())
    }
}

/// A write to an archive file failed: the output error (exit 6), naming the file. Nothing is
/// deleted after it, since the rows could not be kept first.
pub(crate) fn archive_error(path: &Path, e: io::Error) -> crate::error::Error {
    crate::error::Error::output_file(format!("archive {}", path.display()), e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> TaskEntry {
        TaskEntry {
            scope: TaskScope { dag_id: "d".into(), run_id: "r".into(), task_id: "t".into(), map_index: 2 },
            key: "k/é".into(),
            value: "{\"a\": 1.0, \"s\": \"\\u00e9\"}".into(),
            updated_at: StoredTime::At(Timestamp::from_micros(1_764_288_000_123_456)),
            expires_at: None,
        }
    }

    #[test]
    fn task_lines_round_trip_with_the_value_text_verbatim() {
        let line = task_line(&entry());
        assert!(line.starts_with(r#"{"kind": "task", "dag_id": "d""#), "{line}");
        assert!(
            line.contains(r#""updated_at": "2025-11-28T00:00:00.123456Z", "expires_at": null"#),
            "{line}"
        );
        let Ok(Record::Task(record)) = parse_line(&line) else { panic!("{line}") };
        assert_eq!(record.value, entry().value);
        assert_eq!(record.key, "k/é");
        assert_eq!(record.scope.map_index, 2);
        assert_eq!(record.updated_at, Timestamp::from_micros(1_764_288_000_123_456));
    }

    #[test]
    fn bad_lines_say_what_is_wrong() {
        assert!(parse_line("{").unwrap_err().starts_with("not JSON"));
        assert!(parse_line("[]").unwrap_err().contains("expected an object"));
        assert!(parse_line(r#"{"kind": "x"}"#).unwrap_err().contains("\"kind\""));
        let line = task_line(&entry()).replace("\"map_index\": 2", "\"map_index\": \"2\"");
        assert!(parse_line(&line).unwrap_err().contains("map_index"));
        let mut line = task_line(&entry());
        line.pop();
        line.push_str(", \"extra\": 1}");
        assert!(parse_line(&line).unwrap_err().contains("unknown field \"extra\""));
    }
}
