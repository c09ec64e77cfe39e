//! The export format shared by `export`, `import` and the `--archive` of `clean` and `clear`:
//! JSON Lines, one object per stored row, carrying everything needed to put the row back
//! exactly as it was.
//!
//! The value is the stored text itself, as a JSON string, not the decoded value: decoding and
//! re-encoding could change its bytes (key order, float forms, escapes), and a damaged value
//! that is not JSON must survive too. Timestamps are RFC 3339 in UTC with microseconds, the
//! resolution of every dialect's column. A line is a serde type, written and read by derive;
//! reading goes field by field so that an error names the field it is about.

use std::fmt;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize, de};

use crate::db::AssetWriter;
use crate::fs::{self, AppendLines, LineKind, Output, Tail};
use crate::json::{self, Style, Value};
use crate::model::{AssetEntry, TaskEntry, TaskScope};
use crate::text::quote;
use crate::time::Timestamp;

/// An archive's lines, as [`AppendLines`] checks a file before it appends to it: each a line
/// [`parse_line`] reads, starting as `export` writes them.
pub(crate) const ARCHIVE_LINES: LineKind = LineKind {
    whole: |line| std::str::from_utf8(line).is_ok_and(|text| parse_line(text).is_ok()),
    start: br#"{"kind": ""#,
    name: "archive lines",
};

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

/// A row as a line of the export format: which table it belongs to, then the row's own fields
/// ([`TaskEntry`] and [`AssetEntry`] serialize in the documented order). A stored timestamp
/// that is not one (text another writer left) is written as it is, and `import` refuses that
/// line rather than guess.
#[derive(Serialize)]
struct Line<'a, R> {
    kind: &'static str,
    #[serde(flatten)]
    row: &'a R,
}

/// A task line as `import` reads it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskLine {
    dag_id: String,
    run_id: String,
    task_id: String,
    map_index: i64,
    key: String,
    value: String,
    updated_at: String,
    expires_at: Option<String>,
}

/// An asset line as `import` reads it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AssetLine {
    asset_id: i64,
    asset_name: Option<String>,
    asset_uri: Option<String>,
    key: String,
    value: String,
    updated_at: String,
    last_updated_by_kind: Option<String>,
    last_updated_by_dag_id: Option<String>,
    last_updated_by_run_id: Option<String>,
    last_updated_by_task_id: Option<String>,
    last_updated_by_map_index: Option<i64>,
}

/// What is wrong with one line, for the caller to put after its line number.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct LineError(String);

impl de::Error for LineError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        LineError(message.to_string())
    }

    fn missing_field(field: &'static str) -> Self {
        LineError(format!("{} is missing", quote(field)))
    }

    /// A field the format does not have is refused: it may be a typo that would otherwise
    /// silently restore a different row.
    fn unknown_field(field: &str, _expected: &'static [&'static str]) -> Self {
        LineError(format!("unknown field {}", quote(field)))
    }
}

/// One line's object as serde reads it, field by field, so that an error says which field is
/// wrong: serde_json's own messages (`invalid type: string "2", expected i64`) do not.
struct Fields {
    entries: serde_json::map::IntoIter,
    value: Option<(String, Value)>,
}

impl<'de> de::Deserializer<'de> for Fields {
    type Error = LineError;

    fn deserialize_any<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, LineError> {
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de> de::MapAccess<'de> for Fields {
    type Error = LineError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, LineError> {
        let Some((name, value)) = self.entries.next() else { return Ok(None) };
        let key = seed.deserialize(de::value::StrDeserializer::<LineError>::new(&name))?;
        self.value = Some((name, value));
        Ok(Some(key))
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, LineError> {
        let (name, value) =
            self.value.take().ok_or_else(|| LineError("a field without a value".to_string()))?;
        seed.deserialize(value).map_err(|e| LineError(format!("{}: {e}", quote(&name))))
    }
}

/// The kinds Airflow's REST API can read back; anything else breaks it.
const WRITER_KINDS: &[&str] = &["task", "watcher", "api"];

fn timestamp(name: &str, text: &str) -> Result<Timestamp, String> {
    Timestamp::parse_rfc3339(text).map_err(|e| format!("{}: {e}", quote(name)))
}

/// A line as serde_json reads it in one step, the way every line `export` writes is read.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum AnyLine {
    Task(TaskLine),
    Asset(AssetLine),
}

/// Parses one line of an export. The message of an error says what is wrong, not where:
/// the caller adds the line number.
pub(crate) fn parse_line(line: &str) -> Result<Record, String> {
    // `export` writes the kind first; the rest of such a line is read straight into its
    // struct, without the buffering of every field that a tagged enum needs (measured: a third
    // less time per line).
    let braced = |rest: &str| ["{", rest].concat();
    if let Some(rest) = line.strip_prefix(r#"{"kind": "task", "#)
        && let Ok(task) = serde_json::from_str::<TaskLine>(&braced(rest))
    {
        return task_record(task);
    }
    if let Some(rest) = line.strip_prefix(r#"{"kind": "asset", "#)
        && let Ok(asset) = serde_json::from_str::<AssetLine>(&braced(rest))
    {
        return asset_record(asset);
    }
    // A line serde_json refuses is read again field by field, for a message that names the
    // field, and by json.loads's rules, which accept some texts serde_json does not (a key
    // given twice, the last one winning).
    match serde_json::from_str::<AnyLine>(line) {
        Ok(AnyLine::Task(task)) => task_record(task),
        Ok(AnyLine::Asset(asset)) => asset_record(asset),
        // json.loads keeps the last of a field given twice; like an unknown field (a typo), a
        // line that says two things could restore a row nobody meant, so it is refused.
        Err(_) => match repeated_field(line) {
            Some(field) => Err(format!("{} is given twice", quote(&field))),
            None => parse_fields(line),
        },
    }
}

/// The first field of a line's object given twice, if any. The values are skipped unread,
/// so a line serde_json cannot read otherwise (a `NaN`, a lone surrogate) is not refused
/// here: `parse_fields` judges it by json.loads's rules.
fn repeated_field(line: &str) -> Option<String> {
    struct Keys;
    impl<'de> de::Visitor<'de> for Keys {
        type Value = Option<String>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }

        fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<de::IgnoredAny>()?;
                if !seen.insert(key.clone()) {
                    return Ok(Some(key));
                }
            }
            Ok(None)
        }
    }
    let mut deserializer = serde_json::Deserializer::from_str(line);
    de::Deserializer::deserialize_map(&mut deserializer, Keys).ok().flatten()
}

fn parse_fields(line: &str) -> Result<Record, String> {
    let mut fields = match json::parse(line).map_err(|e| format!("not JSON: {e}"))? {
        Value::Object(fields) => fields,
        other => return Err(format!("expected an object, got {}", json::type_name(&other))),
    };
    let kind = match fields.shift_remove("kind") {
        Some(Value::String(kind)) if kind == "task" || kind == "asset" => kind,
        Some(Value::String(other)) => {
            return Err(format!("\"kind\" must be \"task\" or \"asset\", not {}", quote(&other)));
        }
        Some(other) => return Err(format!("\"kind\" must be a string, not {}", json::type_name(&other))),
        None => return Err("\"kind\" is missing".to_string()),
    };
    let fields = Fields { entries: fields.into_iter(), value: None };
    match kind.as_str() {
        "task" => task_record(TaskLine::deserialize(fields).map_err(|e| e.0)?),
        _ => asset_record(AssetLine::deserialize(fields).map_err(|e| e.0)?),
    }
}

fn task_record(line: TaskLine) -> Result<Record, String> {
    if line.map_index < -1 {
        return Err(format!("\"map_index\" {} is invalid", line.map_index));
    }
    let updated_at = timestamp("updated_at", &line.updated_at)?;
    let expires_at = line.expires_at.as_deref().map(|at| timestamp("expires_at", at)).transpose()?;
    non_empty(&line.key)?;
    Ok(Record::Task(TaskRecord {
        updated_at,
        expires_at,
        scope: TaskScope {
            dag_id: line.dag_id,
            run_id: line.run_id,
            task_id: line.task_id,
            map_index: line.map_index,
        },
        key: line.key,
        value: line.value,
    }))
}

fn asset_record(line: AssetLine) -> Result<Record, String> {
    if let Some(kind) = &line.last_updated_by_kind
        && !WRITER_KINDS.contains(&kind.as_str())
    {
        return Err(format!(
            "\"last_updated_by_kind\" {} is not one of task, watcher, api (Airflow's API cannot read it)",
            quote(kind)
        ));
    }
    let updated_at = timestamp("updated_at", &line.updated_at)?;
    non_empty(&line.key)?;
    Ok(Record::Asset(AssetRecord {
        updated_at,
        asset_id: line.asset_id,
        asset_name: line.asset_name,
        asset_uri: line.asset_uri,
        key: line.key,
        value: line.value,
        writer: AssetWriter {
            kind: line.last_updated_by_kind,
            dag_id: line.last_updated_by_dag_id,
            run_id: line.last_updated_by_run_id,
            task_id: line.last_updated_by_task_id,
            map_index: line.last_updated_by_map_index,
        },
    }))
}

fn non_empty(key: &str) -> Result<(), String> {
    if key.is_empty() { Err("\"key\" must not be empty".to_string()) } else { Ok(()) }
}

/// Where export lines go: stdout, an `export --file` (replaced atomically when it is
/// complete), or an `--archive` (appended to in whole lines); with the rows counted. A row is
/// counted once its line is written whole: for an archive, once [`Sink::sync`] made it durable.
pub(crate) struct Sink {
    target: Target,
    path: Option<PathBuf>,
    pub task_rows: u64,
    pub asset_rows: u64,
    /// Rows written since the last sync, counted when it succeeds.
    held: (u64, u64),
}

enum Target {
    Stdout(BufWriter<io::Stdout>),
    File(Option<Output>),
    Archive(AppendLines),
}

impl Sink {
    fn new(target: Target, path: Option<&Path>) -> Sink {
        Sink { target, path: path.map(Path::to_path_buf), task_rows: 0, asset_rows: 0, held: (0, 0) }
    }

    pub(crate) fn stdout() -> Sink {
        Sink::new(Target::Stdout(BufWriter::new(io::stdout())), None)
    }

    /// `export --file`: a new file that replaces `path` only once it is complete
    /// ([`Sink::finish`]); until then the old file stays as it was.
    pub(crate) fn file(path: &Path) -> crate::error::Result<Sink> {
        let output = Output::create("--file", "", path, fs::default_mode(), Some(&ARCHIVE_LINES))?;
        Ok(Sink::new(Target::File(Some(output)), Some(path)))
    }

    /// Opens an `--archive` file for appending (an archive never loses what an earlier run put
    /// there), or says which file cannot be written. A partial last line, left by a run that
    /// was killed or ran out of space before its batch was synced (so before that batch's
    /// DELETE, which comes after the sync), is cut off, and the cut is reported.
    pub(crate) fn archive(path: &Path) -> crate::error::Result<Sink> {
        let (lines, tail) = AppendLines::open("--archive", "archive", path, &ARCHIVE_LINES)?;
        match tail {
            Tail::Whole => {}
            Tail::Cut(bytes) => crate::output::warn(&format!(
                "archive {} ended in a partial line (a run stopped before its batch was synced, \
                 so before its rows were deleted); cut its last {bytes} byte(s) so that it holds whole lines",
                path.display()
            )),
            Tail::Completed => crate::output::warn(&format!(
                "archive {} ended without a newline after its last line; added one",
                path.display()
            )),
        }
        Ok(Sink::new(Target::Archive(lines), Some(path)))
    }

    pub(crate) fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// A write to this `--archive` failed: see [`archive_error`].
    pub(crate) fn failed(&self, e: io::Error) -> crate::error::Error {
        archive_error(self.path.as_deref().unwrap_or(Path::new("")), e)
    }

    /// Rows written so far, those not yet flushed or synced included: for progress, not for
    /// the counts a summary reports.
    pub(crate) fn written(&self) -> u64 {
        self.task_rows + self.asset_rows + self.held.0 + self.held.1
    }

    pub(crate) fn task(&mut self, entry: &TaskEntry) -> io::Result<()> {
        self.line(&Line { kind: "task", row: entry }).map(|()| self.held.0 += 1)
    }

    pub(crate) fn asset(&mut self, entry: &AssetEntry) -> io::Result<()> {
        self.line(&Line { kind: "asset", row: entry }).map(|()| self.held.1 += 1)
    }

    /// Non-ASCII text as UTF-8: the lines are for `import`, and for people reading the file.
    fn line(&mut self, line: &impl Serialize) -> io::Result<()> {
        let written = match &mut self.target {
            Target::Stdout(out) => write_line(out, line),
            Target::File(Some(out)) => write_line(out, line),
            Target::File(None) => Err(io::Error::other("the file was already finished")),
            Target::Archive(out) => write_line(out, line),
        };
        written.inspect_err(|_| self.drop_held())
    }

    /// A failed write: the rows since the last sync are not counted, and an archive is cut
    /// back to its last sync.
    fn drop_held(&mut self) {
        self.held = (0, 0);
        if let Target::Archive(out) = &mut self.target {
            out.rollback();
        }
    }

    /// Flushes, and for an archive waits until the lines are on disk: an archive must be
    /// durable before the rows it holds are deleted. On failure, the lines since the last
    /// sync are cut off the archive and not counted.
    pub(crate) fn sync(&mut self) -> io::Result<()> {
        let synced = match &mut self.target {
            Target::Stdout(out) => out.flush(),
            Target::File(Some(out)) => out.flush(),
            Target::File(None) => Ok(()),
            Target::Archive(out) => out.commit(),
        };
        synced.inspect_err(|_| self.drop_held())?;
        self.task_rows += self.held.0;
        self.asset_rows += self.held.1;
        self.held = (0, 0);
        Ok(())
    }

    /// The end of the output: an `export --file` is fsynced and renamed over its path.
    pub(crate) fn finish(&mut self) -> io::Result<()> {
        self.sync()?;
        if let Target::File(out) = &mut self.target
            && let Some(out) = out.take()
        {
            out.commit()?;
        }
        Ok(())
    }
}

fn write_line(out: &mut impl Write, line: &impl Serialize) -> io::Result<()> {
    json::write(&mut *out, line, Style::Unicode)?;
    out.write_all(b"\n")
}

/// A write to an archive file failed: the output error (exit 6), naming the file. Nothing is
/// deleted after it, since the rows could not be kept first.
pub(crate) fn archive_error(path: &Path, e: io::Error) -> crate::error::Error {
    crate::error::Error::output_file(format!("archive {}", path.display()), e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::StoredTime;

    fn entry() -> TaskEntry {
        TaskEntry {
            scope: TaskScope { dag_id: "d".into(), run_id: "r".into(), task_id: "t".into(), map_index: 2 },
            key: "k/é".into(),
            value: "{\"a\": 1.0, \"s\": \"\\u00e9\"}".into(),
            updated_at: StoredTime::At(Timestamp::from_micros(1_764_288_000_123_456)),
            expires_at: None,
        }
    }

    /// The export line of a task row (without the newline).
    fn task_line(entry: &TaskEntry) -> String {
        json::to_text(&serde_json::to_value(Line { kind: "task", row: entry }).unwrap(), Style::Unicode)
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
        // json.loads keeps the last of a field given twice; a line is refused instead.
        let twice = |field: &str, value: &str| {
            let mut line = task_line(&entry());
            line.pop();
            line.push_str(&format!(", \"{field}\": {value}}}"));
            parse_line(&line).unwrap_err()
        };
        assert_eq!(twice("key", "\"other\""), "\"key\" is given twice");
        assert_eq!(twice("kind", "\"asset\""), "\"kind\" is given twice");
        assert_eq!(twice("expires_at", "null"), "\"expires_at\" is given twice");
        assert_eq!(twice("updated_at", "1e400"), "\"updated_at\" is given twice");
    }
}
