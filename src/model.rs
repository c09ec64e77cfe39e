//! The domain's nouns, in Airflow's own words: a task scope (dag_id, run_id, task_id,
//! map_index), an asset selector, and the entries stored under them.

use crate::time::Timestamp;

/// Airflow's column sizes: longer identifiers can never match a stored row.
pub(crate) const MAX_KEY_CHARS: usize = 512;
pub(crate) const MAX_ID_CHARS: usize = 250;

/// One task instance's key/value namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskScope {
    pub dag_id: String,
    pub run_id: String,
    pub task_id: String,
    pub map_index: i64,
}

impl std::fmt::Display for TaskScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "dag_id={:?} run_id={:?} task_id={:?} map_index={}",
            self.dag_id, self.run_id, self.task_id, self.map_index
        )
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
            AssetSelector::Name(name) => write!(f, "asset name {name:?}"),
            AssetSelector::Uri(uri) => write!(f, "asset uri {uri:?}"),
            AssetSelector::Id(id) => write!(f, "asset id {id}"),
        }
    }
}

/// An asset row, resolved from a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Asset {
    pub id: i64,
    pub name: String,
    pub uri: String,
    pub active: bool,
}

/// A timestamp column as read back. Rows written by other tools may hold text that is not a
/// timestamp at all; a viewer must still show them, so the raw text is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoredTime {
    At(Timestamp),
    Unreadable(String),
}

impl StoredTime {
    pub(crate) fn display(&self) -> String {
        match self {
            StoredTime::At(ts) => ts.to_rfc3339(),
            StoredTime::Unreadable(raw) => raw.clone(),
        }
    }
}

/// One row of `task_state_store`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskEntry {
    pub scope: TaskScope,
    pub key: String,
    pub value: String,
    pub updated_at: StoredTime,
    pub expires_at: Option<StoredTime>,
}

/// One row of `asset_state_store`, with the asset it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AssetEntry {
    pub asset_id: i64,
    pub asset_name: Option<String>,
    pub asset_uri: Option<String>,
    pub key: String,
    pub value: String,
    pub updated_at: StoredTime,
    pub last_updated_by_kind: Option<String>,
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
}

/// A window of rows. `limit = None` means every row.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Page {
    pub limit: Option<u64>,
    pub offset: u64,
}
