//! Stored rows as every command shows them: a table row, a typed JSON document (its field
//! names are the documented interface, docs/output.md#entries), and the plain forms. Each
//! value is parsed once for all of them.

use serde::Serialize;

use super::{Rendered, Table, stored_value};
use crate::json::{self, Value};
use crate::model::{AssetEntry, StoredTime, TaskEntry, TaskScope, external_ref};
use crate::text;
use crate::time::Timestamp;

/// A task key in JSON and YAML.
#[derive(Serialize)]
pub(crate) struct TaskEntryDoc {
    #[serde(flatten)]
    scope: TaskScope,
    key: String,
    value: Value,
    external_ref: Option<String>,
    updated_at: String,
    expires_at: Option<String>,
    expired: bool,
}

/// An asset key in JSON and YAML.
#[derive(Serialize)]
pub(crate) struct AssetEntryDoc {
    asset_id: i64,
    asset_name: Option<String>,
    asset_uri: Option<String>,
    key: String,
    value: Value,
    external_ref: Option<String>,
    updated_at: String,
    last_updated_by_kind: Option<String>,
}

/// A stored row as every command shows it.
pub(crate) trait Entry {
    const HEADERS: &'static [&'static str];
    type Doc: Serialize;
    /// Its key and its value's stored text.
    fn key_value(&self) -> (&str, &str);
    /// Its table row; an expiry before `now` is marked `(expired)`.
    fn row(&self, value: &str, truncate: bool, now: Timestamp) -> Vec<String>;
    /// The scope columns and the key, as the first fields of a line of `list -o plain`.
    fn plain_fields(&self) -> Vec<String>;
    /// `external_ref` is the reference of an offloaded value.
    fn doc(&self, value: Value, external_ref: Option<String>, now: Timestamp) -> Self::Doc;
}

impl Entry for TaskEntry {
    const HEADERS: &'static [&'static str] =
        &["dag_id", "run_id", "task_id", "map_index", "key", "value", "updated_at", "expires_at"];
    type Doc = TaskEntryDoc;

    fn key_value(&self) -> (&str, &str) {
        (&self.key, &self.value)
    }

    fn row(&self, value: &str, truncate: bool, now: Timestamp) -> Vec<String> {
        let expires_at = self.expires_at.as_ref().map_or_else(|| "never".to_string(), StoredTime::display);
        let mut row = self.plain_fields();
        row.extend([
            cut_cell(value, truncate),
            self.updated_at.display(),
            if self.is_expired(now) { format!("{expires_at} (expired)") } else { expires_at },
        ]);
        row
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

    fn doc(&self, value: Value, external_ref: Option<String>, now: Timestamp) -> TaskEntryDoc {
        TaskEntryDoc {
            scope: self.scope.clone(),
            key: self.key.clone(),
            value,
            external_ref,
            updated_at: self.updated_at.display(),
            expires_at: self.expires_at.as_ref().map(StoredTime::display),
            expired: self.is_expired(now),
        }
    }
}

impl Entry for AssetEntry {
    const HEADERS: &'static [&'static str] =
        &["asset_id", "asset", "key", "value", "updated_at", "updated_by"];
    type Doc = AssetEntryDoc;

    fn key_value(&self) -> (&str, &str) {
        (&self.key, &self.value)
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

    fn doc(&self, value: Value, external_ref: Option<String>, _now: Timestamp) -> AssetEntryDoc {
        AssetEntryDoc {
            asset_id: self.asset_id,
            asset_name: self.asset_name.clone(),
            asset_uri: self.asset_uri.clone(),
            key: self.key.clone(),
            value,
            external_ref,
            updated_at: self.updated_at.display(),
            last_updated_by_kind: self.last_updated_by_kind.clone(),
        }
    }
}

/// Entries rendered once for every format.
pub(crate) struct Entries<D> {
    pub table: Table,
    pub docs: Vec<D>,
    /// What `get -o plain` prints for each entry's value.
    pub plain_values: Vec<String>,
    /// What `list -o plain` prints for each entry: its scope columns, key and value (as JSON),
    /// tab-separated, each field escaped as [`text::field`] says.
    pub plain_rows: Vec<String>,
}

/// Long values would make a list unreadable, so `truncate` cuts them in the table; the JSON
/// forms always carry them whole.
pub(crate) fn entries<E: Entry>(list: &[E], truncate: bool, title: Option<String>) -> Entries<E::Doc> {
    let mut view = Entries {
        table: Table { title, headers: E::HEADERS.to_vec(), rows: Vec::with_capacity(list.len()) },
        docs: Vec::with_capacity(list.len()),
        plain_values: Vec::with_capacity(list.len()),
        plain_rows: Vec::with_capacity(list.len()),
    };
    let now = Timestamp::now();
    // Each entry in every form, its value parsed once for all of them.
    for entry in list {
        let parsed = Parsed::of(entry);
        let text = json::dumps_unicode(&parsed.value);
        view.table.rows.push(parsed.row(entry, &text, truncate, now));
        view.plain_values.push(plain_value(&parsed.value));
        view.plain_rows.push(plain_row(entry, text));
        view.docs.push(entry.doc(parsed.value, parsed.reference, now));
    }
    view
}

/// An entry's stored value, parsed (a damaged one warned about) and its external reference:
/// what every form starts from. A list written row by row makes only the form it shows.
pub(super) struct Parsed {
    pub value: Value,
    pub reference: Option<String>,
}

impl Parsed {
    pub(super) fn of<E: Entry>(entry: &E) -> Parsed {
        let (key, value) = entry.key_value();
        Parsed {
            value: stored_value(key, value),
            // An offloaded value is shown as its reference and never fetched or decoded: the
            // payload lives in the worker-side backend, out of this tool's reach.
            reference: external_ref(value),
        }
    }

    /// Its table row; `text` is the value's JSON text as `json.dumps` writes it.
    pub(super) fn row<E: Entry>(&self, entry: &E, text: &str, truncate: bool, now: Timestamp) -> Vec<String> {
        let reference = self.reference.as_ref().map(|reference| format!("→ ref: {reference}"));
        entry.row(reference.as_deref().unwrap_or(text), truncate, now)
    }
}

/// A line of `list -o plain`: the scope fields, the key and `text` (the value's JSON text as `json.dumps` writes it),
/// each escaped, tab-separated.
pub(super) fn plain_row<E: Entry>(entry: &E, text: String) -> String {
    let mut fields = entry.plain_fields();
    fields.push(text);
    fields.iter().map(|f| text::field(f)).collect::<Vec<_>>().join("\t")
}

impl<D> Entries<D> {
    /// One entry (get, set): its value alone in plain form.
    pub(crate) fn single(mut self, plain: bool) -> Rendered<Option<D>> {
        Rendered {
            doc: self.docs.pop(),
            plain: if plain { self.plain_values.pop() } else { None },
            tables: vec![self.table],
        }
    }
}

const LIST_VALUE_WIDTH: usize = 60;

fn cut_cell(text: &str, truncate: bool) -> String {
    if truncate { text::cut(text, LIST_VALUE_WIDTH) } else { text.to_string() }
}

/// How `get -o plain` prints a value: strings raw, so `wm=$(state-store get …)` works.
fn plain_value(value: &Value) -> String {
    if let Value::String(s) = value { s.clone() } else { json::dumps_unicode(value) }
}
