//! The REST transport of the per-scope commands: [`Keys`] over Airflow's REST API v2. The
//! server is checked and the token fetched at the first call that sends anything, after what
//! the API cannot do has been refused: nothing reaches the network for a command that cannot
//! run over it.

use std::ops::ControlFlow;

use super::{Api, MAX_ENTRIES, MapIndexes, Options};
use crate::archive::{Sink, archive_error};
use crate::error::{Error, Result};
use crate::json::Value;
use crate::keys::{AssetSet, Each, Expiry, Keys, MissingTaskInstance, Removed, TaskSet};
use crate::model::{
    Asset, AssetEntry, AssetSelector, Cleared, Page, StoredTime, TaskEntry, TaskFilter, TaskScope,
};
use crate::output;
use crate::text::quote;
use crate::time::Timestamp;
use anyhow::bail;

/// A refusal of what the API cannot do, when it was asked for (`given`), before anything is
/// sent.
fn refuse(given: bool, flag: &str, why: &str) -> Result<()> {
    if given {
        bail!(Error::Usage(format!(
            "{flag} cannot be honoured over Airflow's REST API: {why}; use the database transport"
        )));
    }
    Ok(())
}

/// `--allow-large`, which the API cannot honour.
fn refuse_large(allow_large: bool) -> Result<()> {
    let why = "the API refuses a value over its [state_store] max_value_storage_bytes";
    refuse(allow_large, "--allow-large", why)
}

/// `--allow-missing-task-instance`, which the API cannot honour.
fn refuse_missing(missing: MissingTaskInstance) -> Result<()> {
    let why = "the API refuses a task instance that does not exist";
    refuse(missing == MissingTaskInstance::Allow, "--allow-missing-task-instance", why)
}

/// What the API's routes cannot address is refused before anything is sent (exit 2):
///
/// - a `/` in a dag, run or task id: the server decodes `%2F` before it routes, so
///   `--run-id 'r1/taskInstances/t1/state-store/k'` would reach another task instance's key;
/// - a dag, run or task id that is `.` or `..`, or a key with such a `/`-separated segment:
///   a proxy or server that normalises paths resolves it, so `DELETE …/state-store/..`
///   would reach the task instance's collection;
/// - a line break in a key: the key route's pattern stops at one, so a key ending in `\n`
///   would be stored without it (over the key of that name) and one with `\n` inside is
///   "not found".
fn addressable(scope: &TaskScope) -> Result<()> {
    for (flag, id) in
        [("--dag-id", &scope.dag_id), ("--run-id", &scope.run_id), ("--task-id", &scope.task_id)]
    {
        let why = if id == "." || id == ".." {
            "is a path segment of its own, which Airflow's REST API cannot address: a proxy or server that \
             normalises paths would resolve it and reach another path"
        } else if id.contains('/') {
            "holds a `/`, which Airflow's REST API cannot address: its server decodes `%2F` before routing, \
             so the request would reach another path"
        } else {
            continue;
        };
        bail!(unaddressable(&format!("{flag} {}", quote(id)), why));
    }
    Ok(())
}

/// The refusal of a name the API's routes cannot address: `why`, and that nothing was sent.
fn unaddressable(name: &str, why: &str) -> anyhow::Error {
    Error::Usage(format!("{name} {why}; nothing was sent (use the database transport)")).into()
}

fn key_addressable(key: &str) -> Result<()> {
    let why = if key.split('/').any(|segment| segment == "." || segment == "..") {
        "holds a `.` or `..` segment, which Airflow's REST API cannot address: a proxy or server that \
         normalises paths would resolve it (`…/state-store/..` is the task instance itself)"
    } else if key.contains(['\n', '\r']) {
        "holds a line break, which Airflow's REST API cannot address (its key route stops at one, and \
         would reach another key)"
    } else {
        return Ok(());
    };
    Err(unaddressable(&format!("key {}", quote(key)), why))
}

/// A key a `clear` deletes, read when they are counted: the count the question and the
/// summary give is exactly what is deleted, key by key, and a key written since is left. Each
/// with its map index (-1 for an asset's) and the `updated_at` it was read with, so that the
/// keys listed again after the deletes tell a key that was there at the start (deleted again)
/// from one written since (left).
type Planned = (i64, String, StoredTime);

/// The API, opened at its first use.
pub(crate) struct Remote {
    options: Option<Options>,
    api: Option<Api>,
    /// The map indexes learnt for a task (a command reads them once).
    indexes: Option<(TaskScope, MapIndexes)>,
    /// The keys `count_task_keys` or `count_asset_keys` read, which `clear_task` and
    /// `clear_asset` delete.
    planned: Option<Vec<Planned>>,
}

impl Remote {
    pub(crate) fn new(options: Options) -> Remote {
        Remote { options: Some(options), api: None, indexes: None, planned: None }
    }

    fn api(&mut self) -> Result<&Api> {
        if let Some(options) = self.options.take() {
            self.api = Some(Api::open(options)?);
        }
        self.api.as_ref().ok_or_else(|| Error::Remote("the API could not be opened".to_string()).into())
    }

    /// The map indexes a task's keys are read from: the one asked for, or each of the task's.
    fn indexes(&mut self, scope: &TaskScope, all: bool) -> Result<MapIndexes> {
        if !all {
            return Ok(MapIndexes {
                indexes: vec![scope.map_index],
                whole: true,
                mapped: scope.map_index >= 0,
            });
        }
        let task = TaskScope { map_index: -1, ..scope.clone() };
        if let Some((known, indexes)) = &self.indexes
            && *known == task
        {
            return Ok(indexes.clone());
        }
        let indexes = self.api()?.map_indexes(scope)?;
        self.indexes = Some((task, indexes.clone()));
        Ok(indexes)
    }

    /// Every key of the task at these map indexes, read before any is deleted.
    fn task_keys(&mut self, scope: &TaskScope, indexes: &[i64]) -> Result<Vec<Planned>> {
        let api = self.api()?;
        let mut keys = Vec::new();
        for &map_index in indexes {
            let scope = TaskScope { map_index, ..scope.clone() };
            let _: ControlFlow<()> = api.each_task(&scope, 0, &mut |row| {
                keys.push((map_index, row.key, row.updated_at));
                Ok(ControlFlow::Continue(()))
            })?;
        }
        Ok(keys)
    }

    /// One DELETE per key: the API has no transaction. Across the map indexes of a mapped
    /// task, a 404 to the DELETE of a key at map index -1 is the API's refusal (no task
    /// instance there, which `listMapped` cannot tell): the keys at -1 are left, said to be in
    /// a warning, and the others are still deleted. Any other refusal ends the run.
    /// Then the scope listed again (the map indexes it deleted at, but -1 where its keys were
    /// left): see [`settled`].
    fn remove_task_keys(&mut self, scope: &TaskScope, plan: &[Planned]) -> Result<u64> {
        addressable(scope)?;
        let mapped = self.mapped(scope);
        let api = self.api()?;
        let (mut deleted, mut deleted_unmapped) = (0, 0);
        let mut unmapped_refused = false;
        for (map_index, key, _) in plan {
            key_addressable(key)?;
            if *map_index < 0 && unmapped_refused {
                continue;
            }
            match api.delete_task(&TaskScope { map_index: *map_index, ..scope.clone() }, key) {
                Ok(()) => {
                    deleted += 1;
                    deleted_unmapped += usize::from(*map_index < 0);
                }
                Err(e)
                    if *map_index < 0
                        && mapped
                        && matches!(crate::error::kind(&e), Some(Error::NotFound(_))) =>
                {
                    unmapped_refused = true;
                    let left =
                        plan.iter().filter(|(map_index, ..)| *map_index < 0).count() - deleted_unmapped;
                    output::warn(&format!(
                        "{left} key(s) at map index -1 of mapped task {} are left: {}; no task instance \
                         holds them, and the API deletes only keys of task instances (the database \
                         transport deletes them)",
                        scope.task_label(),
                        crate::error::message(e.as_ref())
                    ));
                }
                Err(e) => return Err(e.context(Removed(deleted))),
            }
        }
        let mut indexes: Vec<i64> = plan
            .iter()
            .map(|(map_index, _, _)| *map_index)
            .filter(|map_index| !(*map_index < 0 && unmapped_refused))
            .collect();
        indexes.sort_unstable();
        indexes.dedup();
        let now = self.task_keys(scope, &indexes).map_err(|e| e.context(Removed(deleted)))?;
        settled(plan, now, deleted)
    }

    /// The keys a clear of the task deletes: every key of the task's map indexes, -1
    /// included. `listMapped` names only map indexes of 0 and up, so it cannot say whether a
    /// task instance holds the keys at -1 of a mapped task: their DELETE asks the API, which
    /// refuses it (404) when none does (see [`Remote::remove_task_keys`]).
    fn plan_task(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<Vec<Planned>> {
        let known = self.indexes(scope, all_map_indices)?;
        if all_map_indices && !known.whole {
            output::warn(
                "the API does not name this task's map indexes (a dag its server has not parsed): \
                 only the keys of map index -1 are deleted",
            );
        }
        self.task_keys(scope, &known.indexes)
    }

    /// Whether the task is known as mapped (from `listMapped`, read for every map index): then
    /// the API alone knows whether a task instance holds its keys at map index -1.
    fn mapped(&self, scope: &TaskScope) -> bool {
        let task = TaskScope { map_index: -1, ..scope.clone() };
        self.indexes.as_ref().is_some_and(|(known, indexes)| *known == task && indexes.mapped)
    }

    /// One DELETE per key, an error saying how many were removed before it; then the asset
    /// listed again: see [`settled`].
    fn remove_asset_keys(&mut self, asset: &Asset, plan: &[Planned]) -> Result<u64> {
        let api = self.api()?;
        for (done, (_, key, _)) in (0_u64..).zip(plan) {
            key_addressable(key)?;
            api.delete_asset(asset, key).map_err(|e| e.context(Removed(done)))?;
        }
        let removed = plan.len() as u64;
        let now = self.asset_keys(asset).map_err(|e| e.context(Removed(removed)))?;
        settled(plan, now, removed)
    }

    /// Every key of the asset.
    fn asset_keys(&mut self, asset: &Asset) -> Result<Vec<Planned>> {
        let mut keys = Vec::new();
        let _: ControlFlow<()> = self.api()?.each_asset(asset, 0, &mut |row| {
            keys.push((-1, row.key, row.updated_at));
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(keys)
    }
}

impl Keys for Remote {
    fn task_entry(&mut self, scope: &TaskScope, key: &str) -> Result<Option<TaskEntry>> {
        addressable(scope)?;
        key_addressable(key)?;
        self.api()?.task_entry(scope, key)
    }

    /// The API says "not found" alike for a key, a task instance and a dag run.
    fn task_key_missing(&mut self, scope: &TaskScope, key: &str, _map_index_given: bool) -> anyhow::Error {
        Error::NotFound(format!("key {} not found for task {scope}", quote(key))).into()
    }

    /// `PUT` (`PATCH` for `--keep-expiry`), then the key read back, so that the output shows
    /// the server's own `updated_at` and expiry (over the API the default retention is the
    /// server's).
    fn set_task(&mut self, set: &TaskSet<'_>) -> Result<TaskEntry> {
        refuse_missing(set.missing)?;
        addressable(set.scope)?;
        key_addressable(set.key)?;
        refuse_large(set.allow_large)?;
        // The PUT's `expires_at`: the server's default, never (null) or a time; none for a PATCH.
        let at = |at: Timestamp| Value::String(at.to_rfc3339());
        let expires_at = match set.expiry {
            Expiry::Keep => None,
            Expiry::Default => Some(Value::String("default".to_string())),
            Expiry::At(time) => Some(at(time)),
            Expiry::Retention(retention) => Some(
                retention
                    .expires_at(Timestamp::now())
                    .map_err(|e| Error::Usage(format!("cannot compute the expiry: {e}")))?
                    .map_or(Value::Null, at),
            ),
        };
        let api = self.api()?;
        api.set_task(set.scope, set.key, set.value, expires_at)?;
        api.task_entry(set.scope, set.key)?.ok_or_else(|| gone(set.key))
    }

    /// The API's DELETE answers alike whether the key was there or not: the key is looked up
    /// first, so that the count says whether one was deleted. The DELETE is sent either way,
    /// for the API's own check that the task instance exists.
    fn delete_task(&mut self, scope: &TaskScope, key: &str, missing: MissingTaskInstance) -> Result<u64> {
        refuse_missing(missing)?;
        addressable(scope)?;
        key_addressable(key)?;
        let api = self.api()?;
        let present = api.task_entry(scope, key)?.is_some();
        api.delete_task(scope, key)?;
        Ok(u64::from(present))
    }

    /// The keys a clear would delete, read now (see [`Planned`]).
    fn count_task_keys(
        &mut self,
        scope: &TaskScope,
        all_map_indices: bool,
        missing: MissingTaskInstance,
    ) -> Result<u64> {
        refuse_missing(missing)?;
        addressable(scope)?;
        let keys = self.plan_task(scope, all_map_indices)?;
        Ok(self.planned.insert(keys).len() as u64)
    }

    /// The counted keys, one DELETE each, so that the count is exactly what goes and a key
    /// written since the count is left. With none, the task instance is only checked (any of
    /// the task's, across map indexes), as the database checks it.
    fn clear_task(&mut self, scope: &TaskScope, all_map_indices: bool) -> Result<u64> {
        addressable(scope)?;
        let keys = self.planned.take().map_or_else(|| self.plan_task(scope, all_map_indices), Ok)?;
        if !keys.is_empty() {
            return self.remove_task_keys(scope, &keys);
        }
        let known = self.indexes(scope, all_map_indices)?;
        if !(all_map_indices && known.indexes.len() > 1) {
            self.api()?.require_task_instance(scope)?;
        }
        Ok(0)
    }

    /// Over the API: the keys read and archived, the file synced, then one DELETE per key
    /// archived and the scope listed again, as [`Remote::clear_task`] does. The API's DELETE
    /// has no condition, so a key rewritten after it was read and before its DELETE is deleted
    /// with its new value (docs/rest.md); a key written into the scope after the read is left.
    fn archive_clear_task(
        &mut self,
        scope: &TaskScope,
        all_map_indices: bool,
        sink: &mut Sink,
    ) -> Result<Cleared> {
        addressable(scope)?;
        let path = sink.path().map(std::path::Path::to_path_buf).unwrap_or_default();
        let filter = TaskFilter {
            dag_id: Some(scope.dag_id.clone()),
            run_id: Some(scope.run_id.clone()),
            task_id: Some(scope.task_id.clone()),
            map_index: (!all_map_indices).then_some(scope.map_index),
            ..TaskFilter::default()
        };
        let mut archived = Vec::new();
        self.each_task(&filter, Page { limit: None, offset: 0 }, &mut |row| {
            sink.task(&row).map_err(|e| archive_error(&path, e))?;
            archived.push((row.scope.map_index, row.key, row.updated_at));
            Ok(ControlFlow::Continue(()))
        })?;
        sink.sync().map_err(|e| archive_error(&path, e))?;
        Ok(Cleared { deleted: self.remove_task_keys(scope, &archived)?, kept: Vec::new() })
    }

    /// One task instance's keys, or each of the task's instances' in turn (map index, then
    /// key, as the database orders them). `--expired` and `--external` are decided here,
    /// before the offset and the limit count, as the database's `WHERE` does; without them
    /// and for one map index, the offset is the API's own.
    fn each_task(&mut self, filter: &TaskFilter, page: Page, each: Each<'_, TaskEntry>) -> Result<()> {
        let (Some(dag_id), Some(run_id), Some(task_id)) =
            (filter.dag_id.clone(), filter.run_id.clone(), filter.task_id.clone())
        else {
            return Err(not_one_scope("this list names no single task instance"));
        };
        let scope = TaskScope { dag_id, run_id, task_id, map_index: filter.map_index.unwrap_or(-1) };
        addressable(&scope)?;
        let MapIndexes { indexes, whole, .. } = self.indexes(&scope, filter.map_index.is_none())?;
        if !whole {
            output::warn(
                "the API does not name this task's map indexes (a dag its server has not parsed): \
                 only map index -1 is listed; give --map-index for another",
            );
        }
        let filtered = filter.expired_before.is_some() || filter.external_only;
        let server_offset = indexes.len() == 1 && !filtered;
        let mut window = Window::new(page, !server_offset);
        let api = self.api()?;
        for map_index in indexes {
            let scope = TaskScope { map_index, ..scope.clone() };
            let offset = if server_offset { page.offset } else { 0 };
            let flow = api.each_task(&scope, offset, &mut |entry: TaskEntry| {
                let expired = filter.expired_before.is_none_or(|before| entry.is_expired(before));
                let wanted = expired && (!filter.external_only || looks_external(&entry.value));
                window.pass(wanted, entry, &mut *each)
            })?;
            if flow.is_break() {
                break;
            }
        }
        Ok(())
    }

    fn addressable_key(&self, key: &str) -> Result<()> {
        key_addressable(key)
    }

    fn asset(&mut self, selector: &AssetSelector, to_write: bool) -> Result<Asset> {
        let api = self.api()?;
        if to_write { api.asset_to_write(selector) } else { api.asset(selector) }
    }

    fn asset_entry(&mut self, asset: &Asset, key: &str) -> Result<Option<AssetEntry>> {
        key_addressable(key)?;
        self.api()?.asset_entry(asset, key)
    }

    fn set_asset(&mut self, selector: &AssetSelector, set: &AssetSet<'_>) -> Result<AssetEntry> {
        refuse(set.must_exist, "--keep-expiry on an asset key", "the API has no PATCH for asset keys")?;
        refuse_large(set.allow_large)?;
        key_addressable(set.key)?;
        let asset = &self.active_asset(selector)?;
        let api = self.api()?;
        api.put_asset(asset, set.key, set.value)?;
        api.asset_entry(asset, set.key)?.ok_or_else(|| gone(set.key))
    }

    fn delete_asset(&mut self, asset: &Asset, key: &str) -> Result<u64> {
        key_addressable(key)?;
        let api = self.api()?;
        let present = api.asset_entry(asset, key)?.is_some();
        api.delete_asset(asset, key)?;
        Ok(u64::from(present))
    }

    /// The keys a clear would delete, read now (see [`Planned`]).
    fn count_asset_keys(&mut self, asset: &Asset) -> Result<u64> {
        let keys = self.asset_keys(asset)?;
        Ok(self.planned.insert(keys).len() as u64)
    }

    /// The counted keys, one DELETE each, then the asset listed again (see
    /// [`Remote::clear_task`]).
    fn clear_asset(&mut self, asset: &Asset) -> Result<u64> {
        let plan = self.planned.take().map_or_else(|| self.asset_keys(asset), Ok)?;
        self.remove_asset_keys(asset, &plan)
    }

    /// See [`Remote::archive_clear_task`].
    fn archive_clear_asset(&mut self, asset: &Asset, sink: &mut Sink) -> Result<Cleared> {
        let path = sink.path().map(std::path::Path::to_path_buf).unwrap_or_default();
        let mut archived = Vec::new();
        self.each_asset(Some(asset), false, Page { limit: None, offset: 0 }, &mut |row| {
            sink.asset(&row).map_err(|e| archive_error(&path, e))?;
            archived.push((-1, row.key, row.updated_at));
            Ok(ControlFlow::Continue(()))
        })?;
        sink.sync().map_err(|e| archive_error(&path, e))?;
        Ok(Cleared { deleted: self.remove_asset_keys(asset, &archived)?, kept: Vec::new() })
    }

    fn each_asset(
        &mut self,
        asset: Option<&Asset>,
        external_only: bool,
        page: Page,
        each: Each<'_, AssetEntry>,
    ) -> Result<()> {
        let Some(asset) = asset else {
            return Err(not_one_scope("--assets without one asset lists every asset"));
        };
        let mut window = Window::new(page, external_only);
        let offset = if external_only { 0 } else { page.offset };
        let _: ControlFlow<()> = self.api()?.each_asset(asset, offset, &mut |entry: AssetEntry| {
            let wanted = !external_only || looks_external(&entry.value);
            window.pass(wanted, entry, &mut *each)
        })?;
        Ok(())
    }
}

/// A page of rows taken from a stream the server pages by itself: the offset skipped here
/// (when the rows are filtered here, so that it counts the rows kept, as the database's
/// `OFFSET` does), then at most the limit. Without a limit (`list` off a terminal, `--limit
/// 0`), at most [`MAX_ENTRIES`] rows in all, as for one collection: a task's map indexes are
/// each a collection of their own, and a server could otherwise keep a list going for as
/// many of them as it names. Past the bound the list fails; it is never cut in silence.
struct Window {
    skip: u64,
    left: Option<u64>,
    handed: u64,
}

impl Window {
    /// `skip_here`: the offset is skipped here rather than sent to the server.
    fn new(page: Page, skip_here: bool) -> Window {
        Window { skip: if skip_here { page.offset } else { 0 }, left: page.limit, handed: 0 }
    }

    /// Hands a row to `each` when it is `wanted` and within the page; ends the stream past it.
    fn pass<E>(&mut self, wanted: bool, row: E, each: Each<'_, E>) -> Result<ControlFlow<()>> {
        if !wanted {
            return Ok(ControlFlow::Continue(()));
        }
        if self.skip > 0 {
            self.skip -= 1;
            return Ok(ControlFlow::Continue(()));
        }
        if self.left == Some(0) {
            return Ok(ControlFlow::Break(()));
        }
        if self.left.is_none() && self.handed >= MAX_ENTRIES {
            bail!(Error::Remote(format!(
                "the API holds more than {MAX_ENTRIES} keys for this list, more than the REST transport \
                 reads in one (the database transport has no such limit): give --limit and --offset \
                 to read it a page at a time"
            )));
        }
        self.handed += 1;
        self.left = self.left.map(|n| n - 1);
        each(row)
    }
}

/// After a clear's deletes, its keys listed again (`now`): a key of the plan still there as it
/// was read is one a `DELETE` answered without deleting, and ends the run (exit 4), named,
/// with the keys removed reported (the others); a key written since the plan was read (new,
/// or with a newer `updated_at`) is left, and said to be. Otherwise the count removed.
fn settled(plan: &[Planned], now: Vec<Planned>, removed: u64) -> Result<u64> {
    let planned: std::collections::HashMap<(i64, &str), &StoredTime> =
        plan.iter().map(|(map_index, key, at)| ((*map_index, key.as_str()), at)).collect();
    let (left, newer): (Vec<_>, Vec<_>) = now
        .into_iter()
        .partition(|(map_index, key, at)| planned.get(&(*map_index, key.as_str())) == Some(&at));
    if !newer.is_empty() {
        output::warn(&format!(
            "{} key(s) written since the keys were counted are left: {}",
            newer.len(),
            named(&newer)
        ));
    }
    if left.is_empty() {
        return Ok(removed);
    }
    let count = left.len() as u64;
    Err(anyhow::Error::new(Error::Remote(format!(
        "{count} key(s) are still there, unchanged, after the API answered their DELETE: {}",
        named(&left)
    )))
    .context(Removed(removed.saturating_sub(count))))
}

/// Keys for a message: the first five, quoted, and how many more.
fn named(keys: &[Planned]) -> String {
    let mut said: Vec<String> = keys.iter().take(5).map(|(_, key, _)| quote(key)).collect();
    if keys.len() > 5 {
        said.push(format!("and {} more", keys.len() - 5));
    }
    said.join(", ")
}

/// A key written a moment ago and not there when read back.
fn gone(key: &str) -> anyhow::Error {
    Error::NotFound(format!("key {} was written but is gone already: another client deleted it", quote(key)))
        .into()
}

fn not_one_scope(what: &str) -> anyhow::Error {
    Error::Usage(format!(
        "over Airflow's REST API, list reads one task instance (--dag-id, --run-id, --task-id, and \
         --map-index or each map index) or one asset (--asset, --asset-uri, --asset-id); {what}: \
         the API cannot list across them, the database transport can"
    ))
    .into()
}

/// The database's `LIKE` narrowing of `--external` (see [`crate::model::EXTERNAL_REF_LIKE`]):
/// the stored text starts as every reference does; the command then checks it exactly.
fn looks_external(stored: &str) -> bool {
    stored.starts_with(r#"{"__airflow_state_ref__": "#)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list without a limit takes at most [`MAX_ENTRIES`] rows over the API, across every
    /// map index, and fails past them rather than stopping there; a page takes its limit
    /// and ends the stream.
    #[test]
    fn a_list_without_a_limit_fails_past_the_bound_and_a_page_ends_at_its_limit() {
        let mut handed = 0_u64;
        let mut count = |_: u64| -> Result<ControlFlow<()>> {
            handed += 1;
            Ok(ControlFlow::Continue(()))
        };
        let mut window = Window::new(Page { limit: None, offset: 0 }, false);
        for row in 0..MAX_ENTRIES {
            assert!(window.pass(true, row, &mut count).is_ok());
        }
        let past = window.pass(true, MAX_ENTRIES, &mut count).unwrap_err();
        assert_eq!(crate::error::exit_code(&past), crate::error::exit::DATABASE);
        assert!(past.to_string().contains("--limit and --offset"), "{past}");
        assert_eq!(handed, MAX_ENTRIES);

        let mut page = Window::new(Page { limit: Some(2), offset: 1 }, true);
        let flows: Vec<bool> = (0..5)
            .map(|row| page.pass(true, row, &mut |_| Ok(ControlFlow::Continue(()))).unwrap().is_break())
            .collect();
        assert_eq!(flows, [false, false, false, true, true], "one skipped, two handed, then the end");
    }
}
