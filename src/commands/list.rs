//! `list`: task keys filtered by any part of their scope, or asset keys; ordered by scope,
//! then key; a page at a time (100 rows unless `--limit` says otherwise). Rows are written as
//! the database hands them over, so `--limit 0` of any table takes the memory of a few rows;
//! a table, which must hold its rows to size its columns, shows at most [`TABLE_ROWS`].

use std::ops::ControlFlow;

use super::{Context, Transport, asset_selector, check_map_index, has_task_flags, require_asset};
use crate::api::Api;
use crate::cli::{Format, GlobalArgs, ListArgs};
use crate::db::Access;
use crate::error::{Error, Result};
use crate::model::{AssetEntry, AssetFilter, Page, TaskEntry, TaskFilter, external_ref};
use crate::model::{AssetSelector, TaskScope};
use crate::output::{self, Entry, EntryStream, TABLE_ROWS};
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
    if let Transport::Api(options) = Transport::choose(global)? {
        let scope = api_scope(args, selector)?;
        return over_api(&Api::open(options)?, global.output, args, scope);
    }
    let ctx = Context::load(global, None)?;
    let mut store = ctx.open(Access::ReadOnly)?;
    let shown = Shown::new(ctx.format, args);
    // One row more than shown tells whether more follow, without a count query.
    let page = Page { limit: shown.rows.map(|n| n.saturating_add(1)), offset: args.offset };

    if assets {
        let asset_id = match &selector {
            Some(selector) => Some(require_asset(&mut store, selector)?.id),
            None => None,
        };
        let filter = AssetFilter { asset_id, external_only: args.external };
        shown.write(ctx.format, args, |each| store.each_asset(&filter, page, each))
    } else {
        let filter = TaskFilter {
            dag_id: args.scope.dag_id.clone(),
            run_id: args.scope.run_id.clone(),
            task_id: args.scope.task_id.clone(),
            map_index: args.scope.map_index,
            expired_before: args.expired.then(Timestamp::now),
            external_only: args.external,
        };
        shown.write(ctx.format, args, |each| store.each_task(&filter, page, each))
    }
}

/// What a list over the REST API reads: the API lists one task instance or one asset.
enum ApiScope {
    /// A task, at one map index or (`None`) at each of its map indexes in turn.
    Task(TaskScope, Option<i64>),
    Asset(AssetSelector),
}

/// The scope of a list over the API, or the refusal of one it cannot list.
fn api_scope(args: &ListArgs, selector: Option<AssetSelector>) -> Result<ApiScope> {
    if let Some(selector) = selector {
        return Ok(ApiScope::Asset(selector));
    }
    let refuse = |what: &str| -> Result<ApiScope> {
        Err(Error::Usage(format!(
            "over Airflow's REST API, list reads one task instance (--dag-id, --run-id, --task-id, and \
             --map-index or each map index) or one asset (--asset, --asset-uri, --asset-id); {what}: \
             the API cannot list across them, the database transport can"
        ))
        .into())
    };
    if args.assets {
        return refuse("--assets without one asset lists every asset");
    }
    match (&args.scope.dag_id, &args.scope.run_id, &args.scope.task_id) {
        (Some(dag_id), Some(run_id), Some(task_id)) => {
            for (flag, value) in [("--dag-id", dag_id), ("--run-id", run_id), ("--task-id", task_id)] {
                super::check_identifier(flag, value)?;
            }
            let scope = TaskScope {
                dag_id: dag_id.clone(),
                run_id: run_id.clone(),
                task_id: task_id.clone(),
                map_index: -1,
            };
            Ok(ApiScope::Task(scope, args.scope.map_index))
        }
        _ => refuse("this list names no single task instance"),
    }
}

/// `list` over Airflow's REST API: the same rows in the same order (map index, then key) and
/// documents, read a page of 100 at a time and written as they come. `--expired` and
/// `--external` are decided here, before `--offset` and `--limit` count, as the database's
/// `WHERE` does; without them and for one map index, the offset is the API's own.
fn over_api(api: &Api, format: Format, args: &ListArgs, scope: ApiScope) -> Result<()> {
    let shown = Shown::new(format, args);
    let now = Timestamp::now();
    let filtered = args.expired || args.external;
    match scope {
        ApiScope::Task(scope, map_index) => {
            let indexes = match map_index {
                Some(index) => vec![index],
                None => api.map_indexes(&scope)?,
            };
            let server_offset = indexes.len() == 1 && !filtered;
            let mut skip = if server_offset { 0 } else { args.offset };
            let offset = if server_offset { args.offset } else { 0 };
            shown.write(format, args, |each| {
                for map_index in indexes {
                    let scope = TaskScope { map_index, ..scope.clone() };
                    let flow = api.each_task(&scope, offset, &mut |entry: TaskEntry| {
                        if (args.expired && !entry.is_expired(now))
                            || (args.external && !looks_external(&entry.value))
                        {
                            return Ok(ControlFlow::Continue(()));
                        }
                        if skip > 0 {
                            skip -= 1;
                            return Ok(ControlFlow::Continue(()));
                        }
                        each(entry)
                    })?;
                    if flow.is_break() {
                        break;
                    }
                }
                Ok(())
            })
        }
        ApiScope::Asset(selector) => {
            let asset = api.asset(&selector)?;
            let mut skip = if filtered { args.offset } else { 0 };
            let offset = if filtered { 0 } else { args.offset };
            shown.write(format, args, |each| {
                let _: ControlFlow<()> = api.each_asset(&asset, offset, &mut |entry: AssetEntry| {
                    if args.external && !looks_external(&entry.value) {
                        return Ok(ControlFlow::Continue(()));
                    }
                    if skip > 0 {
                        skip -= 1;
                        return Ok(ControlFlow::Continue(()));
                    }
                    each(entry)
                })?;
                Ok(())
            })
        }
    }
}

/// The database's `LIKE` narrowing of `--external` (see [`crate::model::EXTERNAL_REF_LIKE`]):
/// the stored text starts as every reference does; `Shown::write` then checks it exactly.
fn looks_external(stored: &str) -> bool {
    stored.starts_with(r#"{"__airflow_state_ref__": "#)
}

/// How many rows a list shows: `--limit` (0 for all), and in a table at most
/// [`TABLE_ROWS`], which is all a table holds in memory.
struct Shown {
    rows: Option<u64>,
    /// The table's bound cut the list shorter than `--limit` asked.
    capped: bool,
}

impl Shown {
    fn new(format: Format, args: &ListArgs) -> Shown {
        let asked = (args.limit > 0).then_some(args.limit);
        match format {
            Format::Table if asked.is_none_or(|n| n > TABLE_ROWS) => {
                Shown { rows: Some(TABLE_ROWS), capped: true }
            }
            _ => Shown { rows: asked, capped: false },
        }
    }

    /// Writes the rows `read` hands over as they come, then says whether more follow. With
    /// `--external`, the SQL prefix match is checked exactly here.
    fn write<E: Entry>(
        &self,
        format: Format,
        args: &ListArgs,
        read: impl FnOnce(&mut dyn FnMut(E) -> Result<ControlFlow<()>>) -> Result<()>,
    ) -> Result<()> {
        let mut stream = EntryStream::<E>::stdout(format);
        let (mut seen, mut more) = (0_u64, false);
        read(&mut |entry: E| {
            if self.rows == Some(seen) {
                more = true;
                return Ok(ControlFlow::Break(()));
            }
            seen += 1;
            if !args.external || external_ref(entry.value_text()).is_some() {
                stream.push(&entry)?;
            }
            Ok(ControlFlow::Continue(()))
        })?;
        stream.finish()?;
        if more {
            let next = args.offset.saturating_add(seen);
            output::note(&if self.capped {
                format!(
                    "showing {seen} rows from offset {}; more follow (a table shows at most {TABLE_ROWS} rows: \
                     -o plain, json or yaml for all, --offset {next} for the next page)",
                    args.offset
                )
            } else {
                format!(
                    "showing {seen} rows from offset {}; more follow (--offset {next} for the next page, \
                     --limit 0 for all)",
                    args.offset
                )
            });
        }
        Ok(())
    }
}
