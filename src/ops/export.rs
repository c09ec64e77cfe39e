//! The rows of an export, read a page at a time and appended to the sink as they come, so
//! memory stays bounded whatever the table holds.

use std::path::Path;

use crate::archive::Sink;
use crate::db::Store;
use crate::error::{Error, Result};
use crate::model::{AssetFilter, Page, TaskFilter, keep_external};

/// Rows read per query: small enough to bound memory, large enough that the round trips do
/// not dominate.
const PAGE_ROWS: u64 = 1000;

/// Appends the task rows `tasks` selects, then the asset rows `assets` selects, to `sink`,
/// telling `progress` the rows written after each page. A row the sink cannot take fails
/// as [`file_error`] says.
pub(crate) fn rows(
    store: &mut Store,
    tasks: Option<&TaskFilter>,
    assets: Option<&AssetFilter>,
    sink: &mut Sink,
    file: Option<&Path>,
    progress: &dyn Fn(u64),
) -> Result<()> {
    let file_error = |e| file_error(file, e);
    if let Some(filter) = tasks {
        // Pages along the primary key: each page starts where the last one ended, so the
        // cost per page stays the same however large the table is.
        let mut after_id = i64::MIN;
        loop {
            let rows = store.task_rows_after(filter, after_id, PAGE_ROWS)?;
            let Some((last_id, _)) = rows.last() else { break };
            after_id = *last_id;
            let read = rows.len();
            let entries: Vec<_> = rows.into_iter().map(|(_, entry)| entry).collect();
            for row in &keep_external(entries, filter.external_only, |e| &e.value) {
                sink.task(row).map_err(file_error)?;
            }
            progress(sink.written());
            if (read as u64) < PAGE_ROWS {
                break;
            }
        }
    }
    if let Some(filter) = assets {
        let mut offset = 0;
        loop {
            let rows = store.list_asset(filter, Page { limit: Some(PAGE_ROWS), offset })?;
            let read = rows.len();
            for row in &keep_external(rows, filter.external_only, |e| &e.value) {
                sink.asset(row).map_err(file_error)?;
            }
            progress(sink.written());
            if read == 0 {
                break;
            }
            offset += PAGE_ROWS;
        }
    }
    Ok(())
}

/// A file that cannot be written is an output error (exit 6), naming the file; `None` is stdout.
pub(crate) fn file_error(file: Option<&Path>, e: std::io::Error) -> Error {
    match file {
        Some(path) => Error::output_file(path.display().to_string(), e),
        None => Error::stdout(e),
    }
}
