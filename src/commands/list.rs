//! `list`: task keys filtered by any part of their scope, or asset keys; ordered by scope,
//! then key; a page at a time (100 rows unless `--limit` says otherwise).

use super::{Context, asset_selector, check_map_index, has_task_flags, require_asset};
use crate::cli::{Format, GlobalArgs, ListArgs};
use crate::db::Access;
use crate::error::{Error, Result};
use crate::model::keep_external;
use crate::model::{AssetFilter, Page, TaskFilter};
use crate::output::{self, Entries, Entry, Rendered};
use crate::time::Timestamp;

pub(crate) fn run(global: &GlobalArgs, args: &ListArgs) -> Result<()> {
    let selector = asset_selector(&args.scope)?;
    let assets = args.assets || selector.is_some();
    if assets && has_task_flags(&args.scope) {
        return Err(Error::Usage(
            "list either task keys (--dag-id, …) or asset keys (--asset, --assets, …), not both".to_string(),
        )
        .into());
    }
    if assets && args.expired {
        return Err(Error::Usage("--expired is for task keys: asset keys never expire".to_string()).into());
    }
    if let Some(map_index) = args.scope.map_index {
        check_map_index(map_index)?;
    }
    let ctx = Context::load(global, None)?;
    let mut store = ctx.open(Access::ReadOnly)?;
    // One row more than asked tells whether the page was cut short, without a count query.
    let page = Page { limit: (args.limit > 0).then(|| args.limit.saturating_add(1)), offset: args.offset };

    if assets {
        let asset_id = match &selector {
            Some(selector) => Some(require_asset(&mut store, selector)?.id),
            None => None,
        };
        show(
            ctx.format,
            args,
            store.list_asset(&AssetFilter { asset_id, external_only: args.external }, page)?,
        )
    } else {
        let filter = TaskFilter {
            dag_id: args.scope.dag_id.clone(),
            run_id: args.scope.run_id.clone(),
            task_id: args.scope.task_id.clone(),
            map_index: args.scope.map_index,
            expired_before: args.expired.then(Timestamp::now),
            external_only: args.external,
        };
        show(ctx.format, args, store.list_task(&filter, page)?)
    }
}

/// Prints the rows of one page (one more was fetched to tell whether more follow). With
/// `--external`, the SQL prefix match is checked exactly here.
fn show<E: Entry>(format: Format, args: &ListArgs, mut rows: Vec<E>) -> Result<()> {
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    let more = limit > 0 && rows.len() > limit;
    if more {
        rows.truncate(limit);
        output::note(&format!(
            "showing {} rows from offset {}; more follow (--offset {} for the next page, --limit 0 for all)",
            args.limit,
            args.offset,
            args.offset.saturating_add(args.limit)
        ));
    }
    let rows = keep_external(rows, args.external, Entry::value_text);
    let Entries { table, docs, plain_rows, .. } = output::entries(&rows, true, None);
    // Plain is one line per row: its scope, key and value, tab-separated and escaped, for
    // `state-store list … -o plain | while IFS=$'\t' read -r …`.
    let rendered = Rendered {
        plain: (!plain_rows.is_empty()).then(|| plain_rows.join("\n")),
        tables: vec![table],
        doc: docs,
    };
    output::emit(format, &rendered)
}
