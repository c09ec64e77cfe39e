//! The domain's nouns, in Airflow's own words: a task scope (dag_id, run_id, task_id,
//! map_index), an asset selector, and the entries stored under them.

use serde::{Serialize, Serializer};

use crate::text::quote;
use crate::time::Timestamp;

/// Airflow's column sizes: longer identifiers can never match a stored row.
pub(crate) const MAX_KEY_CHARS: usize = 512;
pub(crate) const MAX_ID_CHARS: usize = 250;

/// One task instance's key/value namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct TaskScope {
    pub dag_id: String,
    pub run_id: String,
    pub task_id: String,
    pub map_index: i64,
}

impl TaskScope {
    /// The task without its map index: `dag_id="d" run_id="r" task_id="t"`.
    pub(crate) fn task_label(&self) -> String {
        format!(
            "dag_id={} run_id={} task_id={}",
            quote(&self.dag_id),
            quote(&self.run_id),
            quote(&self.task_id)
        )
    }
}

impl std::fmt::Display for TaskScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} map_index={}", self.task_label(), self.map_index)
    }
}

/// How the user named an asset. Name and URI address active assets only (as tasks do);
/// an inactive asset is reachable by id alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AssetSelector {
    Name(String),
    Uri(String),
    Id(i64),
}

impl std::fmt::Display for AssetSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AssetSelector::Name(name) => write!(f, "asset name {}", quote(name)),
            AssetSelector::Uri(uri) => write!(f, "asset uri {}", quote(uri)),
            AssetSelector::Id(id) => write!(f, "asset id {id}"),
        }
    }
}

/// What two asset URIs have in common when they differ only in ways Airflow's normalisation of
/// asset URIs may change (a trailing `/`, the case of the scheme and host, user info, the order
/// of query parameters, a fragment). The exact normalisation depends on the providers
/// installed with Airflow, so the tool does not rewrite a URI it is given; it uses this to name
/// the stored URI the user probably meant.
pub(crate) fn uri_likeness(uri: &str) -> String {
    let uri = uri.trim();
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.trim_end_matches('/').to_string();
    };
    let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let mut params: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    params.sort_unstable();
    format!(
        "{}://{}{}?{}",
        scheme.to_ascii_lowercase(),
        host.to_ascii_lowercase(),
        path.trim_end_matches('/'),
        params.join("&")
    )
}

/// An asset row, resolved from a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Asset {
    pub id: i64,
    pub name: String,
    pub uri: String,
    pub active: bool,
}

impl Asset {
    /// How messages name it: `asset "orders" (id 3)`.
    pub(crate) fn described(&self) -> String {
        format!("asset {} (id {})", quote(&self.name), self.id)
    }
}

/// A timestamp column as read back. Rows written by other tools may hold text that is not a
/// timestamp at all; a viewer must still show them, so the raw text is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoredTime {
    At(Timestamp),
    Unreadable(String),
}

impl StoredTime {
    /// The instant, when the stored text is one.
    pub(crate) fn instant(&self) -> Option<Timestamp> {
        if let StoredTime::At(at) = self { Some(*at) } else { None }
    }

    pub(crate) fn display(&self) -> String {
        match self {
            StoredTime::At(ts) => ts.to_rfc3339(),
            StoredTime::Unreadable(raw) => raw.clone(),
        }
    }
}

/// As it is shown: RFC 3339, or the raw text that is not a timestamp.
impl Serialize for StoredTime {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.display())
    }
}

/// One row of `task_state_store`. Serialized, it is a line of the export format
/// (docs/output.md#export-format), whose field order is the order here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct TaskEntry {
    #[serde(flatten)]
    pub scope: TaskScope,
    pub key: String,
    pub value: String,
    pub updated_at: StoredTime,
    pub expires_at: Option<StoredTime>,
}

impl TaskEntry {
    /// Whether the row has expired by `now` (`expires_at < now`, as a clean decides) and so is
    /// still here only until the next clean. An unreadable expiry counts as not expired.
    pub(crate) fn is_expired(&self, now: Timestamp) -> bool {
        matches!(self.expires_at, Some(StoredTime::At(at)) if at < now)
    }
}

/// One row of `asset_state_store`, with the asset it belongs to; serialized, a line of the
/// export format, in this order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct AssetEntry {
    pub asset_id: i64,
    pub asset_name: Option<String>,
    pub asset_uri: Option<String>,
    pub key: String,
    pub value: String,
    pub updated_at: StoredTime,
    pub last_updated_by_kind: Option<String>,
    /// Set by Airflow's `task` writes only; kept so that an export restores them exactly.
    pub last_updated_by_dag_id: Option<String>,
    pub last_updated_by_run_id: Option<String>,
    pub last_updated_by_task_id: Option<String>,
    pub last_updated_by_map_index: Option<i64>,
}

/// Filters of `list` over task rows; `None` means "any".
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskFilter {
    pub dag_id: Option<String>,
    pub run_id: Option<String>,
    pub task_id: Option<String>,
    pub map_index: Option<i64>,
    /// Only rows with `expires_at < expired_before`.
    pub expired_before: Option<Timestamp>,
    /// Only rows whose value is an external reference (see [`external_ref`]).
    pub external_only: bool,
}

/// Filters of `list` over asset rows.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AssetFilter {
    /// One asset's rows, or every asset's when `None`.
    pub asset_id: Option<i64>,
    /// Only rows whose value is an external reference (see [`external_ref`]).
    pub external_only: bool,
}

/// The key of the object a worker-side backend ([workers] state_store_backend) stores in place
/// of a value it offloaded: `{"__airflow_state_ref__": "<ref>"}`.
pub(crate) const EXTERNAL_REF_KEY: &str = "__airflow_state_ref__";

/// The start of the stored text of every external reference, as Python's `json.dumps` writes
/// it, in SQL `LIKE` form with `!` as the escape character (`_` is a LIKE wildcard). The
/// database narrows rows down with it; [`external_ref`] then checks each row exactly.
pub(crate) const EXTERNAL_REF_LIKE: &str = r#"{"!_!_airflow!_state!_ref!_!_": %"#;

/// The reference of a stored value of exactly the form `{"__airflow_state_ref__": "<ref>"}`
/// (an object with that single key and a string), or `None` for any other value.
pub(crate) fn external_ref(stored: &str) -> Option<String> {
    if !stored.trim_start().starts_with('{') || !stored.contains(EXTERNAL_REF_KEY) {
        return None;
    }
    match crate::json::parse(stored).ok()? {
        crate::json::Value::Object(fields) if fields.len() == 1 => {
            fields.get(EXTERNAL_REF_KEY)?.as_str().map(str::to_string)
        }
        _ => None,
    }
}

/// How `stats` and `doctor` name a task scope: `dag/run/task`, with `[index]` for a mapped task.
pub(crate) fn task_scope_label(dag_id: &str, run_id: &str, task_id: &str, map_index: i64) -> String {
    let index = if map_index >= 0 { format!("[{map_index}]") } else { String::new() };
    format!("task {dag_id}/{run_id}/{task_id}{index}")
}

pub(crate) fn asset_scope_label(asset_id: i64, name: Option<&str>) -> String {
    name.map_or_else(
        || format!("asset #{asset_id} (deleted)"),
        |name| format!("asset {name} (id {asset_id})"),
    )
}

/// The exact check after a `LIKE` prefix match of [`EXTERNAL_REF_LIKE`]: a value
/// such as `{"__airflow_state_ref__": 1}` starts the same way but is no reference. Applied by
/// the commands, after paging, so that a page that comes back short still says more may follow.
pub(crate) fn keep_external<T>(rows: Vec<T>, external_only: bool, value: impl Fn(&T) -> &str) -> Vec<T> {
    rows.into_iter().filter(|row| !external_only || external_ref(value(row)).is_some()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_likeness_ignores_what_normalisation_changes() {
        let like = |a: &str, b: &str| uri_likeness(a) == uri_likeness(b);
        assert!(like("s3://b/orders/", "s3://b/orders"));
        assert!(like("S3://B/orders", "s3://b/orders"));
        assert!(like("s3://user:pw@b/orders", "s3://b/orders"));
        assert!(like("postgres://h/db/s/t?b=2&a=1", "postgres://h/db/s/t?a=1&b=2"));
        assert!(like("file:///tmp/x#frag", "file:///tmp/x"));
        assert!(like(" orders/ ", "orders"));
        assert!(!like("s3://b/Orders", "s3://b/orders"), "paths keep their case");
        assert!(!like("s3://b/orders/2026", "s3://b/orders"));
        assert!(!like("gs://b/orders", "s3://b/orders"));
    }

    #[test]
    fn external_ref_is_exactly_one_key_with_a_string() {
        assert_eq!(external_ref(r#"{"__airflow_state_ref__": "s3://b/k"}"#).as_deref(), Some("s3://b/k"));
        assert_eq!(external_ref(r#"{"__airflow_state_ref__":"x"}"#).as_deref(), Some("x"));
        assert_eq!(external_ref(r#"{"__airflow_state_ref__": 1}"#), None);
        assert_eq!(external_ref(r#"{"__airflow_state_ref__": "x", "b": 1}"#), None);
        assert_eq!(external_ref(r#""__airflow_state_ref__""#), None);
        assert_eq!(external_ref(r#"[{"__airflow_state_ref__": "x"}]"#), None);
    }
}

/// A window of rows. `limit = None` means every row.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Page {
    pub limit: Option<u64>,
    pub offset: u64,
}

/// What a clear that archived first did: the rows it deleted, and the keys it archived but
/// left because another session wrote them after they were read (they keep their new value).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Cleared {
    pub deleted: u64,
    pub kept: Vec<KeptKey>,
}

/// A key archived and then left, written after it was read: a task key with its map index,
/// an asset key without.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct KeptKey {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map_index: Option<i64>,
    pub key: String,
}
