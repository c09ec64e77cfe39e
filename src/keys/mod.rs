//! The one interface of the per-scope commands (get, set, delete, clear, list): the keys of
//! one task instance or one asset, read and written through a transport. Two implement it:
//! the metastore database ([`database::Database`], over [`crate::db::Store`]) and
//! Airflow's REST API ([`crate::api::Remote`]). A command calls these methods and renders what
//! they return, so its output, exit codes and scopes are the same over both; a transport
//! refuses, before it reads or sends anything, what it cannot do (docs/rest.md).

pub(crate) mod database;

use std::ops::ControlFlow;

use crate::archive::Sink;
use crate::error::Result;
use crate::json::Value;
use crate::model::{
    Asset, AssetEntry, AssetSelector, Cleared, KeptKey, Page, TaskEntry, TaskFilter, TaskScope,
};
use crate::time::Retention;

/// A task key's expiry, as `set` was asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// `--keep-expiry`: the stored key's (Airflow's PATCH); the key must exist.
    Keep,
    /// `[state_store] default_retention_days`: the configuration's on the database, the
    /// server's over the API.
    Default,
    /// `--retention`, from the moment of the write.
    Retention(Retention),
    /// `--expires-at`.
    At(crate::time::Timestamp),
}

/// What `set`, `delete` and `clear` do when the task instance of their scope does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MissingTaskInstance {
    /// Refuse, as Airflow's REST API does ("Task instance not found").
    Refuse,
    /// Go on (`--allow-missing-task-instance`), with a note on stderr.
    Allow,
}

impl MissingTaskInstance {
    pub(crate) fn from_flag(allow: bool) -> Self {
        if allow { MissingTaskInstance::Allow } else { MissingTaskInstance::Refuse }
    }
}

/// A `set` of a task key.
pub(crate) struct TaskSet<'a> {
    pub scope: &'a TaskScope,
    pub key: &'a str,
    pub value: &'a Value,
    pub expiry: Expiry,
    pub missing: MissingTaskInstance,
    /// `--allow-large`: past `[state_store] max_value_storage_bytes`.
    pub allow_large: bool,
}

/// A `set` of an asset key.
pub(crate) struct AssetSet<'a> {
    pub key: &'a str,
    pub value: &'a Value,
    /// `--keep-expiry`: asset keys have no expiry, so only an existing key is changed.
    pub must_exist: bool,
    pub allow_large: bool,
}

/// The keys a delete of many removed before an error stopped it, where the transport has no
/// transaction (the REST API: one `DELETE` a key): the context of that error, so that the
/// command reports them with it (`clear`'s document and summary, then the error's exit code).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("stopped after removing {} key{}", .0, if *.0 == 1 { "" } else { "s" })]
pub(crate) struct Removed(pub u64);

/// Hands over rows one at a time; `Break` ends the reading.
pub(crate) type Each<'a, E> = &'a mut dyn FnMut(E) -> Result<ControlFlow<()>>;

pub(crate) trait Keys {
    /// One task key, expired or not (Airflow 3.3 returns both); `None` when it is not there.
    fn task_entry(&mut self, scope: &TaskScope, key: &str) -> Result<Option<TaskEntry>>;

    /// The error of a task key that is not there, with what the transport can tell of why
    /// (no such dag run; a mapped task asked for without `--map-index`).
    fn task_key_missing(&mut self, scope: &TaskScope, key: &str, map_index_given: bool) -> anyhow::Error;

    /// Writes a task key and returns it as stored.
    fn set_task(&mut self, set: &TaskSet<'_>) -> Result<TaskEntry>;

    /// Deletes one task key: how many were deleted, 0 or 1.
    fn delete_task(&mut self, scope: &TaskScope, key: &str, missing: MissingTaskInstance) -> Result<u64>;

    /// How many keys a task instance (or each instance of the task) holds; its task instance
    /// must exist unless `missing` allows it.
    fn count_task_keys(
        &mut self,
        scope: &TaskScope,
        all_map_indices: bool,
        missing: MissingTaskInstance,
    ) -> Result<u64>;

    /// Deletes every key of the task instance (or of each instance of the task): how many.
    fn clear_task(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64>;

    /// `clear --archive`: appends every key of the task instance (of each instance of the
    /// task) to the archive, syncs it, then deletes the keys archived, leaving any key
    /// written since it was read where the transport can tell (see each transport's).
    fn archive_clear_task(
        &mut self,
        scope: &TaskScope,
        all_map_indices: bool,
        sink: &mut Sink,
    ) -> Result<Cleared>;

    /// The task keys the filter selects, in scope and key order, a page of them.
    fn each_task(&mut self, filter: &TaskFilter, page: Page, each: Each<'_, TaskEntry>) -> Result<()>;

    /// Refuses a key this transport cannot address, before anything is read or sent: for a
    /// command that resolves its asset before it names the key.
    fn addressable_key(&self, _key: &str) -> Result<()> {
        Ok(())
    }

    /// Resolves an asset selector: an id reaches any asset, a name or URI an active one. With
    /// `to_write`, whether the asset is active is known, also when found by id.
    fn asset(&mut self, selector: &AssetSelector, to_write: bool) -> Result<Asset>;

    /// The asset a write goes to, which must be active: the keys of an inactive one are
    /// removed by the next clean, Airflow's scheduler's or this tool's.
    fn active_asset(&mut self, selector: &AssetSelector) -> Result<Asset> {
        let asset = self.asset(selector, true)?;
        if asset.active {
            return Ok(asset);
        }
        Err(crate::error::Error::NotFound(format!(
            "{} is inactive: its keys are removed by the next clean, so state-store does not write to it",
            asset.described()
        ))
        .into())
    }

    fn asset_entry(&mut self, asset: &Asset, key: &str) -> Result<Option<AssetEntry>>;

    /// Writes a key of an active asset (an `api` write) and returns it as stored.
    fn set_asset(&mut self, selector: &AssetSelector, set: &AssetSet<'_>) -> Result<AssetEntry>;

    fn delete_asset(&mut self, asset: &Asset, key: &str) -> Result<u64>;

    fn count_asset_keys(&mut self, asset: &Asset) -> Result<u64>;

    fn clear_asset(&mut self, asset: &Asset) -> Result<u64>;

    /// [`Keys::archive_clear_task`] for the keys of an asset.
    fn archive_clear_asset(&mut self, asset: &Asset, sink: &mut Sink) -> Result<Cleared>;

    /// The keys of one asset, or of every asset (`None`), in asset and key order, a page of
    /// them; with `external_only`, narrowed to values that start as an external reference.
    fn each_asset(
        &mut self,
        asset: Option<&Asset>,
        external_only: bool,
        page: Page,
        each: Each<'_, AssetEntry>,
    ) -> Result<()>;
}

/// What `clear` removes: the keys of a task instance (or of each instance of the task), or of
/// an asset.
pub(crate) enum Target<'a> {
    Task(&'a TaskScope),
    Asset(Asset),
}

/// Removes the keys of `target` (with `all`, of every map index), of which `present` were
/// counted, through any transport: with `archive`, archived first and then exactly the rows
/// archived deleted. Returns the keys removed, with `archive` those archived but kept, and the
/// error that stopped the deletes half-way over the REST API (no transaction), after it had
/// removed that many.
pub(crate) fn clear(
    keys: &mut dyn Keys,
    target: &Target,
    all: bool,
    present: u64,
    archive: Option<&std::path::Path>,
) -> Result<(u64, Option<Vec<KeptKey>>, Option<anyhow::Error>)> {
    let result = match (target, archive) {
        // Archived, then exactly the rows archived deleted: a key written since it was read
        // is kept, where the transport can tell (see `Keys::archive_clear_task`).
        (_, Some(path)) if present > 0 => {
            let mut sink = Sink::archive(path)?;
            let cleared = match target {
                Target::Task(task) => keys.archive_clear_task(task, all, &mut sink),
                Target::Asset(asset) => keys.archive_clear_asset(asset, &mut sink),
            };
            cleared.map(|cleared| (cleared.deleted, Some(cleared.kept)))
        }
        // Nothing to delete: only the API's DELETE is sent, for its check that the task
        // instance exists; the database has checked it already.
        (Target::Task(task), _) => keys.clear_task(task, all).map(|deleted| (deleted, None)),
        (Target::Asset(asset), _) if present > 0 => keys.clear_asset(asset).map(|deleted| (deleted, None)),
        (Target::Asset(_), _) => Ok((0, None)),
    };
    match result {
        Ok((deleted, kept)) => Ok((deleted, kept, None)),
        Err(e) => match e.downcast_ref::<Removed>() {
            Some(&Removed(deleted)) => Ok((deleted, None, Some(e))),
            None => Err(e),
        },
    }
}
