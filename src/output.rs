//! Everything that reaches the terminal goes through here.
//!
//! A command returns a report; this module renders it as a table (people), JSON or YAML
//! (programs) or plain text (shell variables) on stdout. Messages for people go to stderr. A
//! closed stdout (`state-store list | head`) is not an error: the process ends quietly.
//! Every message, and every report about the configuration or the database itself, passes
//! through [`redact::mask`] on its way out; stored keys and values are printed as they are.

use std::io::{self, IsTerminal, Write};

use crate::cli::Format;
use crate::json::{self, Json};
use crate::model::{AssetEntry, StoredTime, TaskEntry, external_ref};
use crate::redact;
use crate::text;
use crate::text::quote;
use crate::time::Timestamp;

/// A rendered document: what JSON/YAML show, what a table shows, what plain shows.
pub(crate) struct Rendered {
    pub doc: Json,
    pub tables: Vec<Table>,
    pub plain: Option<String>,
}

pub(crate) struct Table {
    /// Printed above the table when a report has several.
    pub title: Option<String>,
    pub headers: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

/// Writes a report to stdout in the chosen format.
pub(crate) fn emit(format: Format, rendered: &Rendered) -> crate::error::Result<()> {
    write(format, rendered).map_err(crate::error::Error::stdout)
}

fn write(format: Format, rendered: &Rendered) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match format {
        Format::Json | Format::Yaml => out.write_all(document(format, &rendered.doc).as_bytes())?,
        Format::Table => {
            for (i, table) in rendered.tables.iter().enumerate() {
                if i > 0 {
                    writeln!(out)?;
                }
                if let Some(title) = &table.title {
                    writeln!(out, "{title}")?;
                }
                out.write_all(render_table(table).as_bytes())?;
            }
        }
        Format::Plain => {
            if let Some(text) = &rendered.plain {
                writeln!(out, "{text}")?;
            }
        }
    }
    out.flush()
}

/// Writes a report about the configuration or the database itself (`config`, `doctor`), with
/// every text in it masked. Stored keys and values (`get`, `list`, `export`) go through
/// [`emit`] as they are: they are the user's data, and an export must import unchanged.
pub(crate) fn emit_report(format: Format, rendered: &Rendered) -> crate::error::Result<()> {
    let masked = Rendered {
        doc: mask_json(&rendered.doc),
        tables: rendered
            .tables
            .iter()
            .map(|table| Table {
                title: table.title.as_deref().map(redact::mask),
                headers: table.headers.clone(),
                rows: table
                    .rows
                    .iter()
                    .map(|row| row.iter().map(|cell| redact::mask(cell)).collect())
                    .collect(),
            })
            .collect(),
        plain: rendered.plain.as_deref().map(redact::mask),
    };
    emit(format, &masked)
}

fn mask_json(value: &Json) -> Json {
    match value {
        Json::Str(text) => Json::Str(redact::mask(text)),
        Json::Array(items) => Json::Array(items.iter().map(mask_json).collect()),
        Json::Object(fields) => Json::Object(fields.iter().map(|(k, v)| (k.clone(), mask_json(v))).collect()),
        other => other.clone(),
    }
}

/// The text of a JSON or YAML document as [`emit`] writes it, final newline included.
pub(crate) fn document(format: Format, doc: &Json) -> String {
    match format {
        // Indented for a person at a terminal, one line for a pipe or a file (`jq`, logs).
        Format::Json if io::stdout().is_terminal() => format!("{}\n", json::dumps_pretty(doc, 2)),
        Format::Json => format!("{}\n", json::dumps_unicode(doc)),
        _ => to_yaml(doc),
    }
}

/// A message for people, on stderr, with any password in it masked. Failing to write it is
/// not worth failing the command.
pub(crate) fn note(message: &str) {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "{}", redact::mask(message));
}

pub(crate) fn warn(message: &str) {
    note(&format!("warning: {message}"));
}

/// The JSON value of a stored value. Text that is not JSON (a damaged row) is shown as a
/// string, with a warning, rather than hiding the row.
pub(crate) fn stored_value(key: &str, text: &str) -> Json {
    match json::parse(text) {
        Ok(value) => value,
        Err(e) => {
            warn(&format!("the value of key {} is not valid JSON ({e}); shown as text", quote(key)));
            Json::Str(text.to_string())
        }
    }
}

fn time_json(t: &StoredTime) -> Json {
    Json::Str(t.display())
}

fn opt_time_json(t: Option<&StoredTime>) -> Json {
    t.map_or(Json::Null, time_json)
}

fn opt_str_json(s: Option<&str>) -> Json {
    s.map_or(Json::Null, |s| Json::Str(s.to_string()))
}

pub(crate) fn int(n: impl Into<i128>) -> Json {
    Json::Int(n.into().to_string())
}

pub(crate) fn obj(fields: Vec<(&str, Json)>) -> Json {
    Json::Object(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// A stored row as every command shows it: its table row and its JSON object (the field names
/// are part of the documented interface).
pub(crate) trait Entry {
    const HEADERS: &'static [&'static str];
    fn key(&self) -> &str;
    fn value_text(&self) -> &str;
    /// Its table row; an expiry before `now` is marked `(expired)`.
    fn row(&self, value: &str, truncate: bool, now: Timestamp) -> Vec<String>;
    /// The scope columns and the key, as the first fields of a line of `list -o plain`.
    fn plain_fields(&self) -> Vec<String>;
    /// `external_ref` is the reference of an offloaded value, or null.
    fn to_json(&self, value: Json, external_ref: Json, now: Timestamp) -> Json;
}

impl Entry for TaskEntry {
    const HEADERS: &'static [&'static str] =
        &["dag_id", "run_id", "task_id", "map_index", "key", "value", "updated_at", "expires_at"];

    fn key(&self) -> &str {
        &self.key
    }

    fn value_text(&self) -> &str {
        &self.value
    }

    fn row(&self, value: &str, truncate: bool, now: Timestamp) -> Vec<String> {
        let expires_at = self.expires_at.as_ref().map_or_else(|| "never".to_string(), StoredTime::display);
        vec![
            self.scope.dag_id.clone(),
            self.scope.run_id.clone(),
            self.scope.task_id.clone(),
            self.scope.map_index.to_string(),
            self.key.clone(),
            cut_cell(value, truncate),
            self.updated_at.display(),
            if self.is_expired(now) { format!("{expires_at} (expired)") } else { expires_at },
        ]
    }

    fn plain_fields(&self) -> Vec<String> {
        vec![
            self.scope.dag_id.clone(),
            self.scope.run_id.clone(),
            self.scope.task_id.clone(),
            self.scope.map_index.to_string(),
            self.key.clone(),
        ]
    }

    fn to_json(&self, value: Json, external_ref: Json, now: Timestamp) -> Json {
        obj(vec![
            ("dag_id", Json::Str(self.scope.dag_id.clone())),
            ("run_id", Json::Str(self.scope.run_id.clone())),
            ("task_id", Json::Str(self.scope.task_id.clone())),
            ("map_index", int(self.scope.map_index)),
            ("key", Json::Str(self.key.clone())),
            ("value", value),
            ("external_ref", external_ref),
            ("updated_at", time_json(&self.updated_at)),
            ("expires_at", opt_time_json(self.expires_at.as_ref())),
            ("expired", Json::Bool(self.is_expired(now))),
        ])
    }
}

impl Entry for AssetEntry {
    const HEADERS: &'static [&'static str] =
        &["asset_id", "asset", "key", "value", "updated_at", "updated_by"];

    fn key(&self) -> &str {
        &self.key
    }

    fn value_text(&self) -> &str {
        &self.value
    }

    fn row(&self, value: &str, truncate: bool, _now: Timestamp) -> Vec<String> {
        vec![
            self.asset_id.to_string(),
            self.asset_name.clone().unwrap_or_else(|| "(deleted)".to_string()),
            self.key.clone(),
            cut_cell(value, truncate),
            self.updated_at.display(),
            self.last_updated_by_kind.clone().unwrap_or_default(),
        ]
    }

    fn plain_fields(&self) -> Vec<String> {
        vec![self.asset_id.to_string(), self.asset_name.clone().unwrap_or_default(), self.key.clone()]
    }

    fn to_json(&self, value: Json, external_ref: Json, _now: Timestamp) -> Json {
        obj(vec![
            ("asset_id", int(self.asset_id)),
            ("asset_name", opt_str_json(self.asset_name.as_deref())),
            ("asset_uri", opt_str_json(self.asset_uri.as_deref())),
            ("key", Json::Str(self.key.clone())),
            ("value", value),
            ("external_ref", external_ref),
            ("updated_at", time_json(&self.updated_at)),
            ("last_updated_by_kind", opt_str_json(self.last_updated_by_kind.as_deref())),
        ])
    }
}

/// Entries rendered once for every format: each value is parsed a single time.
pub(crate) struct Entries {
    pub table: Table,
    pub docs: Vec<Json>,
    /// What `get -o plain` prints for each entry's value.
    pub plain_values: Vec<String>,
    /// What `list -o plain` prints for each entry: its scope columns, key and value (as JSON),
    /// tab-separated, each field escaped as [`text::field`] says.
    pub plain_rows: Vec<String>,
}

/// Long values would make a list unreadable, so `truncate` cuts them in the table; the JSON
/// forms always carry them whole.
pub(crate) fn entries<E: Entry>(list: &[E], truncate: bool, title: Option<String>) -> Entries {
    let mut view = Entries {
        table: Table { title, headers: E::HEADERS.to_vec(), rows: Vec::with_capacity(list.len()) },
        docs: Vec::with_capacity(list.len()),
        plain_values: Vec::with_capacity(list.len()),
        plain_rows: Vec::with_capacity(list.len()),
    };
    let now = Timestamp::now();
    for entry in list {
        let value = stored_value(entry.key(), entry.value_text());
        // An offloaded value is shown as its reference and never fetched or decoded: the
        // payload lives in the worker-side backend, out of this tool's reach.
        let reference = external_ref(entry.value_text());
        let cell = match &reference {
            Some(reference) => format!("→ ref: {reference}"),
            None => json::dumps_unicode(&value),
        };
        view.table.rows.push(entry.row(&cell, truncate, now));
        let mut fields = entry.plain_fields();
        fields.push(json::dumps_unicode(&value));
        view.plain_rows.push(fields.iter().map(|f| text::field(f)).collect::<Vec<_>>().join("\t"));
        view.plain_values.push(plain_value(&value));
        view.docs.push(entry.to_json(value, reference.map_or(Json::Null, Json::Str), now));
    }
    view
}

impl Entries {
    /// One entry (get, set): its value alone in plain form.
    pub(crate) fn single(mut self, plain: bool) -> Rendered {
        Rendered {
            doc: self.docs.pop().unwrap_or(Json::Null),
            plain: if plain { self.plain_values.pop() } else { None },
            tables: vec![self.table],
        }
    }
}

const LIST_VALUE_WIDTH: usize = 60;

fn cut_cell(text: &str, truncate: bool) -> String {
    if truncate && text.chars().count() > LIST_VALUE_WIDTH {
        let cut: String = text.chars().take(LIST_VALUE_WIDTH - 1).collect();
        format!("{cut}…")
    } else {
        text.to_string()
    }
}

/// How `get -o plain` prints a value: strings raw, so `wm=$(state-store get …)` works.
fn plain_value(value: &Json) -> String {
    match value {
        Json::Str(s) => s.clone(),
        other => json::dumps_unicode(other),
    }
}

fn render_table(table: &Table) -> String {
    let rows: Vec<Vec<String>> =
        table.rows.iter().map(|r| r.iter().map(|c| text::cell(c).into_owned()).collect()).collect();
    let mut widths: Vec<usize> = table.headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let mut s = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                s.push_str(" | ");
            }
            s.push_str(cell);
            let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(cell.chars().count());
            s.extend(std::iter::repeat_n(' ', pad));
        }
        format!("{}\n", s.trim_end())
    };
    let mut out = line(&mut table.headers.iter().copied());
    let rule: Vec<String> = widths.iter().map(|w| "=".repeat(*w)).collect();
    out.push_str(&line(&mut rule.iter().map(String::as_str)));
    for row in &rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// YAML in block style. Strings are always double-quoted with JSON escapes, which YAML reads
/// back as the same string whatever they contain (`yes`, `1.0`, `:`, newlines…).
pub(crate) fn to_yaml(doc: &Json) -> String {
    let mut out = String::new();
    yaml_node(doc, 0, &mut out);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// Field names print bare; any key YAML could read as something else is quoted.
fn yaml_key(key: &str) -> String {
    let bare = key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !matches!(
            key.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "y" | "n"
        );
    if bare { key.to_string() } else { json::dumps_unicode(&Json::Str(key.to_string())) }
}

fn yaml_scalar(value: &Json) -> Option<String> {
    match value {
        Json::Null => Some("null".to_string()),
        Json::Bool(b) => Some(if *b { "true" } else { "false" }.to_string()),
        Json::Int(_) | Json::Float(_) | Json::Str(_) => Some(json::dumps_unicode(value)),
        Json::Array(items) if items.is_empty() => Some("[]".to_string()),
        Json::Object(fields) if fields.is_empty() => Some("{}".to_string()),
        Json::Array(_) | Json::Object(_) => None,
    }
}

fn yaml_node(value: &Json, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Json::Array(items) if !items.is_empty() => {
            for item in items {
                out.push_str(&pad);
                out.push_str("- ");
                yaml_inline_child(item, indent + 2, out);
            }
        }
        Json::Object(fields) if !fields.is_empty() => {
            for (key, item) in fields {
                out.push_str(&pad);
                out.push_str(&yaml_key(key));
                out.push(':');
                match yaml_scalar(item) {
                    Some(s) => {
                        out.push(' ');
                        out.push_str(&s);
                        out.push('\n');
                    }
                    None => {
                        out.push('\n');
                        yaml_node(item, indent + 2, out);
                    }
                }
            }
        }
        scalar => {
            out.push_str(&pad);
            out.push_str(&yaml_scalar(scalar).unwrap_or_default());
            out.push('\n');
        }
    }
}

/// The first line of a sequence item continues after "- ": nested collections start there.
fn yaml_inline_child(item: &Json, indent: usize, out: &mut String) {
    if let Some(s) = yaml_scalar(item) {
        out.push_str(&s);
        out.push('\n');
        return;
    }
    let mut nested = String::new();
    yaml_node(item, indent, &mut nested);
    out.push_str(nested.get(indent..).unwrap_or(&nested));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_nests_sequences_and_mappings() {
        let doc = Json::Array(vec![
            obj(vec![("key", Json::Str("a".into())), ("value", Json::Array(vec![int(1), int(2)]))]),
            Json::Array(vec![Json::Str("x".into()), Json::Object(vec![])]),
        ]);
        assert_eq!(to_yaml(&doc), "- key: \"a\"\n  value:\n    - 1\n    - 2\n- - \"x\"\n  - {}\n");
    }

    #[test]
    fn table_escapes_control_characters_and_aligns() {
        let t =
            Table { title: None, headers: vec!["k", "value"], rows: vec![vec!["a\nb".into(), "1".into()]] };
        assert_eq!(render_table(&t), "k    | value\n==== | =====\na\\nb | 1\n");
    }
}
