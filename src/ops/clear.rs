//! `clear --archive` on the database: every row of the scope read once and appended to the
//! archive, the file synced, then exactly the rows archived deleted, page by page, each page
//! in its own short transaction (on SQLite, the write lock held for one page): only the rows
//! whose `updated_at` is still the one archived are deleted (see [`delete_read_tasks`]), and
//! a key written since is left with its new value and reported as kept.
//! Every statement goes through the primary key, so the cost is linear in the rows; SQLite's
//! write lock is held for one page at a time, never for the run.

use std::collections::HashSet;
use std::ops::ControlFlow;

use crate::archive::{Sink, archive_error};
use crate::db::{EXACT_PAGE, Store};
use crate::error::Result;
use crate::keys::{Keys, Removed};
use crate::model::{Asset, Cleared, KeptKey, StoredTime, TaskScope};
use crate::time::Timestamp;

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

/// Archives and deletes every key of a task instance (of each instance of the task with
/// `all_map_indices`).
pub(crate) fn task(
    store: &mut Store,
    scope: &TaskScope,
    all_map_indices: bool,
    sink: &mut Sink,
) -> Result<Cleared> {
    let path = sink.path().map(std::path::Path::to_path_buf).unwrap_or_default();
    // Each row's id and updated_at, and its place for a report of it as kept.
    let mut read: Vec<(i64, StoredTime)> = Vec::new();
    let mut places: Vec<(i64, String)> = Vec::new();
    store.each_task_in_scope(scope, all_map_indices, |(id, row)| {
        sink.task(&row).map_err(|e| archive_error(&path, e))?;
        read.push((id, row.updated_at));
        places.push((row.scope.map_index, row.key));
        Ok(ControlFlow::Continue(()))
    })?;
    sink.sync().map_err(|e| archive_error(&path, e))?;
    let mut cleared = Cleared::default();
    for (page, places) in read.chunks(EXACT_PAGE).zip(places.chunks(EXACT_PAGE)) {
        let (deleted, changed) = delete_read_tasks(store, page, None)?;
        cleared.deleted += deleted;
        for ((id, _), (map_index, key)) in page.iter().zip(places) {
            if changed.contains(id) {
                cleared.kept.push(KeptKey { map_index: Some(*map_index), key: key.clone() });
            }
        }
    }
    Ok(cleared)
}

/// Rows of one statement of a delete by id range: about a second's work on a 2-core machine,
/// as [`crate::db::clean`]'s windows of ids are.
const RANGE_PAGE: usize = 100_000;

/// Deletes the task rows read (ids and the `updated_at` each had), in one transaction, each
/// only while it is unchanged (and, given `expired_before`, still expired then): how many, and
/// the ids of those found written since, which stay. Where the database returns what a DELETE
/// deleted, one statement a page deletes them by id and the rows come back to be compared; if
/// one had been written since, the transaction is rolled back and the rows are taken again,
/// page by page, by a locking read and a DELETE of the unchanged ones. Elsewhere (MySQL) that
/// is the only way.
pub(crate) fn delete_read_tasks(
    store: &mut Store,
    read: &[(i64, StoredTime)],
    expired_before: Option<Timestamp>,
) -> Result<(u64, HashSet<i64>)> {
    if read.is_empty() {
        return Ok((0, HashSet::new()));
    }
    if store.deletes_returning() {
        // Rows in id order with an expiry to check (a clean's) go by id range, whose statement
        // binds no id: pages as large as a statement's bounded work allows.
        let by_range = expired_before.is_some() && read.windows(2).all(|pair| pair[0].0 < pair[1].0);
        let size = if by_range { RANGE_PAGE } else { EXACT_PAGE };
        store.begin()?;
        let mut returning = || -> Result<Option<u64>> {
            let mut deleted = 0;
            for page in read.chunks(size) {
                match store.delete_task_rows_returning(page, expired_before)? {
                    Some(n) => deleted += n,
                    None => return Ok(None),
                }
            }
            Ok(Some(deleted))
        };
        match returning() {
            Ok(Some(deleted)) => {
                store.commit()?;
                return Ok((deleted, HashSet::new()));
            }
            Ok(None) => store.rollback()?,
            Err(e) => {
                let _ = store.rollback();
                return Err(e);
            }
        }
    }
    store.in_transaction(|store| {
        let (mut deleted, mut changed) = (0, HashSet::new());
        for page in read.chunks(EXACT_PAGE) {
            let found = store.lock_task_rows(page, expired_before)?;
            let unchanged: Vec<i64> = found.iter().filter(|(_, same)| *same).map(|(id, _)| *id).collect();
            changed.extend(found.into_iter().filter(|(_, same)| !*same).map(|(id, _)| id));
            deleted += store.delete_task_ids(&unchanged)?;
        }
        Ok((deleted, changed))
    })
}

/// Archives and deletes every key of an asset.
pub(crate) fn asset(store: &mut Store, asset_id: i64, sink: &mut Sink) -> Result<Cleared> {
    let path = sink.path().map(std::path::Path::to_path_buf).unwrap_or_default();
    let mut read: Vec<(String, StoredTime)> = Vec::new();
    let filter = crate::model::AssetFilter { asset_id: Some(asset_id), external_only: false };
    let every = crate::model::Page { limit: None, offset: 0 };
    store.each_asset(&filter, every, |row| {
        sink.asset(&row).map_err(|e| archive_error(&path, e))?;
        read.push((row.key, row.updated_at));
        Ok(ControlFlow::Continue(()))
    })?;
    sink.sync().map_err(|e| archive_error(&path, e))?;
    let mut cleared = Cleared::default();
    for page in read.chunks(EXACT_PAGE) {
        let (deleted, changed) =
            store.in_transaction(|store| delete_read_assets(store, asset_id, page, false))?;
        cleared.deleted += deleted;
        for (key, _) in page.iter().filter(|(key, _)| changed.contains(key)) {
            cleared.kept.push(KeptKey { map_index: None, key: key.clone() });
        }
    }
    Ok(cleared)
}

/// Deletes the keys of one asset read (at most [`EXACT_PAGE`], with the `updated_at` each
/// had), inside the caller's transaction, each only while unchanged (and, for `orphans`, only
/// while the asset is still inactive): how many, and the keys found written since, which stay.
pub(crate) fn delete_read_assets(
    store: &mut Store,
    asset_id: i64,
    read: &[(String, StoredTime)],
    orphans: bool,
) -> Result<(u64, HashSet<String>)> {
    let found = store.lock_asset_rows(asset_id, read)?;
    let unchanged: Vec<&str> = found.iter().filter(|(_, same)| *same).map(|(key, _)| key.as_str()).collect();
    let deleted = if orphans {
        store.delete_orphan_keys(asset_id, &unchanged)?
    } else {
        store.delete_asset_keys(asset_id, &unchanged)?
    };
    let changed = found.into_iter().filter(|(_, same)| !*same).map(|(key, _)| key).collect();
    Ok((deleted, changed))
}
