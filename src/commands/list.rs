//! `list`: task keys filtered by any part of their scope, or asset keys; ordered by scope,
//! then key; a page at a time (100 rows unless `--limit` says otherwise).

use super::{Context, asset_selector, check_map_index, has_task_flags, require_asset};
use crate::cli::{GlobalArgs, ListArgs};
use crate::db::Access;
use crate::error::{Error, Result};
use crate::json::Json;
use crate::model::{Page, TaskFilter};
use crate::output::{self, Entries, Rendered};
use crate::time::Timestamp;

pub(crate) fn run(global: &GlobalArgs, args: &ListArgs) -> Result<()> {
    let selector = asset_selector(&args.scope)?;
    let assets = args.assets || selector.is_some();
    if assets && has_task_flags(&args.scope) {
        return Err(Error::Usage(
            "list either task keys (--dag-id, …) or asset keys (--asset, --assets, …), not both".to_string(),
        ));
    }
    if assets && args.expired {
        return Err(Error::Usage("--expired is for task keys: asset keys never expire".to_string()));
    }
    if let Some(map_index) = args.scope.map_index {
        check_map_index(map_index)?;
    }
    let ctx = Context::load(global, None)?;
    let mut store = ctx.open(Access::ReadOnly)?;
    // One row more than asked tells whether the page was cut short, without a count query.
    let page = Page { limit: (args.limit > 0).then(|| args.limit.saturating_add(1)), offset: args.offset };
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);

    let (view, more) = if assets {
        let asset_id = match &selector {
            Some(selector) => Some(require_asset(store.as_mut(), selector)?.id),
            None => None,
        };
        let mut rows = store.list_asset(asset_id, page)?;
        let more = args.limit > 0 && rows.len() > limit;
        rows.truncate(limit);
        (output::entries(&rows, true, None), more)
    } else {
        let filter = TaskFilter {
            dag_id: args.scope.dag_id.clone(),
            run_id: args.scope.run_id.clone(),
            task_id: args.scope.task_id.clone(),
            map_index: args.scope.map_index,
            expired_before: args.expired.then(Timestamp::now),
        };
        let mut rows = store.list_task(&filter, page)?;
        let more = args.limit > 0 && rows.len() > limit;
        rows.truncate(limit);
        (output::entries(&rows, true, None), more)
    };
    if more {
        output::note(&format!(
            "showing {limit} rows from offset {}; more follow (--offset {} for the next page, --limit 0 for all)",
            args.offset,
            args.offset.saturating_add(args.limit)
        ));
    }
    let Entries { table, docs, keys, .. } = view;
    // Plain is one key per line, for `for key in $(state-store list … -o plain)`.
    let rendered = Rendered {
        plain: (!keys.is_empty()).then(|| keys.join("\n")),
        tables: vec![table],
        doc: Json::Array(docs),
    };
    output::emit(ctx.format, &rendered)?;
    Ok(())
}
