//! `clear --archive` on the database: every row of the scope read once and appended to the
//! archive, the file synced, then exactly the rows archived deleted, page by page, each page
//! in its own short transaction (on SQLite, the write lock held for one page): only the rows
//! whose `updated_at` is still the one archived are deleted (see [`delete_read_tasks`]), and
//! a key written since is left with its new value and reported as kept.
//! Every statement goes through the primary key, so the cost is linear in the rows; SQLite's
//! write lock is held for one page at a time, never for the run.

use std::collections::HashSet;
use std::ops::ControlFlow;

use crate::archive::Sink;
use crate::db::{EXACT_PAGE, Store};
use crate::error::Result;
use crate::model::{Cleared, KeptKey, StoredTime, TaskScope};
use crate::time::Timestamp;

/// Archives and deletes every key of a task instance (of each instance of the task with
/// `all_map_indices`).
pub(crate) fn task(
    store: &mut Store,
    scope: &TaskScope,
    all_map_indices: bool,
    sink: &mut Sink,
) -> Result<Cleared> {
    // Each row's id and updated_at, and its place for a report of it as kept.
    let mut read: Vec<(i64, StoredTime)> = Vec::new();
    let mut places: Vec<(i64, String)> = Vec::new();
    store.each_task_in_scope(scope, all_map_indices, |(id, row)| {
        sink.task(&row).map_err(|e| sink.failed(e))?;
        read.push((id, row.updated_at));
        places.push((row.scope.map_index, row.key));
        Ok(ControlFlow::Continue(()))
    })?;
    sink.sync().map_err(|e| sink.failed(e))?;
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
    delete_read_tasks_locking(store, read, expired_before)
}

/// [`delete_read_tasks`] the way that tells every row apart: page by page, a locking read and
/// a DELETE of the unchanged rows, in one transaction. The way after a snapshot DELETE met a
/// row written since, which a `DELETE … RETURNING` would only meet again.
pub(crate) fn delete_read_tasks_locking(
    store: &mut Store,
    read: &[(i64, StoredTime)],
    expired_before: Option<Timestamp>,
) -> Result<(u64, HashSet<i64>)> {
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
    let mut read: Vec<(String, StoredTime)> = Vec::new();
    let filter = crate::model::AssetFilter { asset_id: Some(asset_id), external_only: false };
    let every = crate::model::Page { limit: None, offset: 0 };
    store.each_asset(&filter, every, |row| {
        sink.asset(&row).map_err(|e| sink.failed(e))?;
        read.push((row.key, row.updated_at));
        Ok(ControlFlow::Continue(()))
    })?;
    sink.sync().map_err(|e| sink.failed(e))?;
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
