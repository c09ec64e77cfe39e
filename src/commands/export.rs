//! `export`: the rows `list` would select, as JSON Lines that `import` restores exactly. Rows
//! are read a page at a time and written as they come, so memory stays bounded whatever the
//! table holds. A `--file` is written beside its path and renamed over it once complete and
//! fsynced (`fs::Output`), so a failed or stopped export leaves the previous file as it was.
//! At a terminal, a count of the rows written is drawn on stderr (`progress::RowProgress`).

use serde::Serialize;

use super::{Context, asset_selector, check_map_index, has_task_flags};
use crate::archive::Sink;
use crate::cli::{ExportArgs, GlobalArgs};
use crate::db::Access;
use crate::error::Result;
use crate::keys::database::require_asset;
use crate::model::AssetFilter;
use crate::ops;
use crate::ops::usage;
use crate::output::Format;
use crate::output::{self, Rendered};
use crate::progress::RowProgress;

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
        return usage(
            "export task keys by filter (task flags, --expired) together with every asset (--assets), \
             not with one asset",
        );
    }
    args.scope.map_index.map(check_map_index).transpose()?;
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
    let asset_id =
        selector.as_ref().map(|selector| require_asset(&mut store, selector)).transpose()?.map(|a| a.id);
    let mut sink = file.map_or_else(|| Ok(Sink::stdout()), Sink::file)?;
    // Rows written to the terminal itself are their own progress; a bar would be drawn over them.
    let progress =
        RowProgress::new("export", file.is_some() || !std::io::IsTerminal::is_terminal(&std::io::stdout()));
    let tasks = tasks.then(|| super::task_filter(&args.scope, args.expired, args.external));
    let assets = assets.then_some(AssetFilter { asset_id, external_only: args.external });
    let update = |rows| progress.update(rows);
    ops::export::rows(&mut store, tasks.as_ref(), assets.as_ref(), &mut sink, file, &update)?;
    progress.finish();
    sink.finish().map_err(|e| ops::export::file_error(file, e))?;
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
