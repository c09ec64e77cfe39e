//! `export`: the rows `list` would select, as JSON Lines that `import` restores exactly. Rows
//! are read a page at a time and written as they come, so memory stays bounded whatever the
//! table holds. A `--file` is written beside its path and renamed over it once complete and
//! fsynced (`fs::Output`), so a failed or stopped export leaves the previous file as it was.
//! At a terminal, a count of the rows written is drawn on stderr (`progress::RowProgress`).

use serde::Serialize;

use super::{Context, asset_selector, check_map_index, has_task_flags};
use crate::archive::Sink;
use crate::cli::{ExportArgs, Format, GlobalArgs};
use crate::db::Access;
use crate::error::{Error, Result};
use crate::keys::database::require_asset;
use crate::model::keep_external;
use crate::model::{AssetFilter, Page, TaskFilter};
use crate::output::{self, Rendered};
use crate::progress::RowProgress;
use crate::time::Timestamp;

/// Rows read per query: small enough to bound memory, large enough that the round trips do
/// not dominate.
const PAGE_ROWS: u64 = 1000;

pub(crate) fn run(global: &GlobalArgs, args: &ExportArgs) -> Result<()> {
    super::refuse_api(global, "export")?;
    let selector = asset_selector(&args.scope)?;
    let task_flags = has_task_flags(&args.scope);
    let asset_flags = args.assets || selector.is_some();
    // No filter at all is a whole backup: every task row and every asset row.
    let tasks = task_flags || args.expired || !asset_flags;
    let assets = asset_flags || (!task_flags && !args.expired);
    // `--expired` filters task rows only, so with one asset it is a task filter too.
    if selector.is_some() && (task_flags || args.expired) {
        return Err(Error::Usage(
            "export task keys by filter (task flags, --expired) together with every asset (--assets), \
             not with one asset"
                .to_string(),
        )
        .into());
    }
    if let Some(map_index) = args.scope.map_index {
        check_map_index(map_index)?;
    }
    // `--file -` is stdout, as `import -` and `set KEY -` read stdin (`--file ./-` for a file
    // of that name).
    let file = args.file.as_deref().filter(|path| path.as_os_str() != "-");
    if let Some(path) = file {
        crate::fs::check_output(
            "--file",
            path,
            crate::fs::Accepts::FileOrStream,
            Some(&crate::archive::ARCHIVE_LINES),
        )?;
    }
    let ctx = Context::load(global, None)?;
    if let Some(path) = file {
        crate::fs::refuse_database("--file", path)?;
    }
    let mut store = ctx.open(Access::ReadOnly)?;
    let asset_id = match &selector {
        Some(selector) => Some(require_asset(&mut store, selector)?.id),
        None => None,
    };
    // A file that cannot be written is an output error (exit 6), naming the file.
    let file_error = |e: std::io::Error| match file {
        Some(path) => Error::output_file(path.display().to_string(), e),
        None => Error::stdout(e),
    };
    let mut sink = match file {
        Some(path) => Sink::file(path)?,
        None => Sink::stdout(),
    };
    // Rows written to the terminal itself are their own progress; a bar would be drawn over them.
    let progress =
        RowProgress::new("export", file.is_some() || !std::io::IsTerminal::is_terminal(&std::io::stdout()));
    if tasks {
        let filter = TaskFilter {
            dag_id: args.scope.dag_id.clone(),
            run_id: args.scope.run_id.clone(),
            task_id: args.scope.task_id.clone(),
            map_index: args.scope.map_index,
            expired_before: args.expired.then(Timestamp::now),
            external_only: args.external,
        };
        // Pages along the primary key: each page starts where the last one ended, so the
        // cost per page stays the same however large the table is.
        let mut after_id = i64::MIN;
        loop {
            let rows = store.task_rows_after(&filter, after_id, PAGE_ROWS)?;
            let Some((last_id, _)) = rows.last() else { break };
            after_id = *last_id;
            let read = rows.len();
            let entries: Vec<_> = rows.into_iter().map(|(_, entry)| entry).collect();
            for row in &keep_external(entries, args.external, |e| &e.value) {
                sink.task(row).map_err(file_error)?;
            }
            progress.update(sink.written());
            if (read as u64) < PAGE_ROWS {
                break;
            }
        }
    }
    if assets {
        let filter = AssetFilter { asset_id, external_only: args.external };
        let mut offset = 0;
        loop {
            let rows = store.list_asset(&filter, Page { limit: Some(PAGE_ROWS), offset })?;
            let read = rows.len();
            for row in &keep_external(rows, args.external, |e| &e.value) {
                sink.asset(row).map_err(file_error)?;
            }
            progress.update(sink.written());
            if read == 0 {
                break;
            }
            offset += PAGE_ROWS;
        }
    }
    progress.finish();
    sink.finish().map_err(file_error)?;
    let place = sink.path().map_or_else(|| "stdout".to_string(), |p| p.display().to_string());
    output::status(&format!(
        "exported {} task row(s) and {} asset row(s) to {place}",
        sink.task_rows, sink.asset_rows
    ));
    if file.is_some() && matches!(ctx.format, Format::Json | Format::Yaml) {
        output::emit(
            ctx.format,
            &Rendered::doc(Exported { task_rows: sink.task_rows, asset_rows: sink.asset_rows }),
        )?;
    }
    Ok(())
}

/// What `export --file -o json` prints: `{"task_rows": N, "asset_rows": M}`.
#[derive(Serialize)]
struct Exported {
    task_rows: u64,
    asset_rows: u64,
}
