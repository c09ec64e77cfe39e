//! `clear <scope>`: removes every key of a task instance (one map index, or all of them) or of
//! an asset. It deletes many rows at once, so it asks first on a terminal and needs `--yes`
//! anywhere else; the database is untouched until the user agrees. With `--archive`, the rows
//! are appended to a file in the export format and synced before they are deleted.

use anyhow::Context as _;
use std::io::{BufRead, IsTerminal, Write};

use serde::Serialize;

use super::{
    Context, Doing, MissingTaskInstance, Scope, Transport, describe_asset, refuse_over_api, require_asset,
    require_task_instance, scope_from_args,
};
use crate::api::Api;
use crate::archive::{Sink, archive_error};
use crate::cli::{ClearArgs, GlobalArgs};
use crate::db::{Access, Store};
use crate::error::{Error, Result};
use crate::model::TaskScope;
use crate::model::{AssetFilter, Page, TaskFilter};
use crate::output::{self, Rendered};
use crate::text::quote;

pub(crate) fn run(global: &GlobalArgs, args: &ClearArgs) -> Result<()> {
    let scope = scope_from_args(&args.scope)?;
    if args.all_map_indices && matches!(scope, Scope::Asset(_)) {
        return Err(Error::Usage("--all-map-indices is for task scopes, not assets".to_string()).into());
    }
    if let Transport::Api(options) = Transport::choose(global)? {
        if args.allow_missing_task_instance {
            refuse_over_api(
                "--allow-missing-task-instance",
                "the API refuses a clear of a task instance that does not exist",
            )?;
        }
        return over_api(&Api::open(options)?, global, args, scope);
    }
    let ctx = Context::load(global, None)?;
    let mut store = ctx.open(Access::ReadWrite)?;
    let (target, place) = match &scope {
        Scope::Task(task) => {
            require_task_instance(
                &mut store,
                task,
                args.all_map_indices,
                MissingTaskInstance::from_flag(args.allow_missing_task_instance),
                Doing::Clear,
            )?;
            (Target::Task(task), task_place(task, args.all_map_indices))
        }
        Scope::Asset(selector) => {
            let asset = require_asset(&mut store, selector)?;
            let place = describe_asset(&asset);
            (Target::Asset(asset.id), place)
        }
    };
    let present = target.count(&mut store, args.all_map_indices)?;
    let deleted = if present == 0 {
        0
    } else if confirmed(args.yes, present, &place)? {
        match &args.archive {
            Some(path) => archive_then_clear(&mut store, &target, args.all_map_indices, path)?,
            None => target.clear(&mut store, args.all_map_indices)?,
        }
    } else {
        output::note("cancelled; nothing deleted");
        return Ok(());
    };
    report(ctx.format, deleted, &place)
}

fn report(format: crate::cli::Format, deleted: u64, place: &str) -> Result<()> {
    output::note(&format!("removed {deleted} key{} of {place}", if deleted == 1 { "" } else { "s" }));
    output::emit(
        format,
        &Rendered { doc: Cleared { deleted }, tables: Vec::new(), plain: Some(deleted.to_string()) },
    )
}

fn task_place(task: &TaskScope, all_map_indices: bool) -> String {
    if all_map_indices {
        format!(
            "task dag_id={} run_id={} task_id={} (every map index)",
            quote(&task.dag_id),
            quote(&task.run_id),
            quote(&task.task_id)
        )
    } else {
        format!("task {task}")
    }
}

/// `clear` over Airflow's REST API. The keys are counted first (the API's DELETE says
/// nothing of how many went), for the question and the report. The DELETE is sent even when
/// there is nothing to delete, for the API's own check that the task instance exists. With
/// `--archive`, the keys are read and synced to the file first, then deleted one by one, so
/// that a key written after the archive was read is left alone rather than deleted unarchived.
fn over_api(api: &Api, global: &GlobalArgs, args: &ClearArgs, scope: Scope) -> Result<()> {
    let mut asset = None;
    let (present, place) = match &scope {
        Scope::Task(task) => {
            let indexes = if args.all_map_indices { api.map_indexes(task)? } else { vec![task.map_index] };
            let mut present = 0;
            for map_index in indexes {
                present += api.count_task(&TaskScope { map_index, ..task.clone() })?;
            }
            (present, task_place(task, args.all_map_indices))
        }
        Scope::Asset(selector) => {
            let found = asset.insert(api.asset(selector)?);
            (api.count_asset(found)?, describe_asset(found))
        }
    };
    if present > 0 && !confirmed(args.yes, present, &place)? {
        output::note("cancelled; nothing deleted");
        return Ok(());
    }
    let deleted = match (&scope, &args.archive) {
        (_, Some(path)) if present > 0 => {
            archive_then_clear_over_api(api, &scope, args.all_map_indices, path)?
        }
        (Scope::Task(task), _) => {
            api.clear_task(task, args.all_map_indices)?;
            present
        }
        (Scope::Asset(selector), _) => {
            match &asset {
                Some(asset) => api.clear_asset(asset)?,
                None => api.clear_asset(&api.asset(selector)?)?,
            }
            present
        }
    };
    report(global.output, deleted, &place)
}

/// `--archive` over the API: every key read and written to the archive, the archive synced,
/// then each archived key deleted by itself.
fn archive_then_clear_over_api(
    api: &Api,
    scope: &Scope,
    all_map_indices: bool,
    path: &std::path::Path,
) -> Result<u64> {
    let mut sink = Sink::archive(path)?;
    let write_error = |e: std::io::Error| archive_error(path, e);
    let mut deleted = 0;
    match scope {
        Scope::Task(task) => {
            let indexes = if all_map_indices { api.map_indexes(task)? } else { vec![task.map_index] };
            let mut keys: Vec<(i64, String)> = Vec::new();
            for map_index in indexes {
                let scope = TaskScope { map_index, ..task.clone() };
                let _: std::ops::ControlFlow<()> = api.each_task(&scope, 0, &mut |row| {
                    sink.task(&row).map_err(write_error)?;
                    keys.push((map_index, row.key));
                    Ok(std::ops::ControlFlow::Continue(()))
                })?;
            }
            sink.sync().map_err(write_error)?;
            for (map_index, key) in keys {
                api.delete_task(&TaskScope { map_index, ..task.clone() }, &key)?;
                deleted += 1;
            }
        }
        Scope::Asset(selector) => {
            let asset = api.asset(selector)?;
            let mut keys = Vec::new();
            let _: std::ops::ControlFlow<()> = api.each_asset(&asset, 0, &mut |row| {
                sink.asset(&row).map_err(write_error)?;
                keys.push(row.key);
                Ok(std::ops::ControlFlow::Continue(()))
            })?;
            sink.sync().map_err(write_error)?;
            for key in keys {
                api.delete_asset(&asset, &key)?;
                deleted += 1;
            }
        }
    }
    Ok(deleted)
}

/// `{"deleted": N}`.
#[derive(Serialize)]
struct Cleared {
    deleted: u64,
}

enum Target<'a> {
    Task(&'a crate::model::TaskScope),
    Asset(i64),
}

impl Target<'_> {
    fn count(&self, store: &mut Store, all: bool) -> Result<u64> {
        match self {
            Target::Task(scope) => store.count_task_scope(scope, all),
            Target::Asset(id) => store.count_asset_scope(*id),
        }
    }

    fn clear(&self, store: &mut Store, all: bool) -> Result<u64> {
        match self {
            Target::Task(scope) => store.clear_task(scope, all),
            Target::Asset(id) => store.clear_asset(*id),
        }
    }
}

/// Rows read per query while archiving.
const ARCHIVE_PAGE: u64 = 1000;

/// Archives every row of the scope, syncs the file, then deletes exactly the archived rows,
/// key by key in one transaction: a key written into the scope after the archive was read is
/// left alone rather than deleted unarchived.
fn archive_then_clear(
    store: &mut Store,
    target: &Target<'_>,
    all_map_indices: bool,
    path: &std::path::Path,
) -> Result<u64> {
    let mut sink = Sink::archive(path)?;
    let write_error = |e: std::io::Error| archive_error(path, e);
    let mut offset = 0;
    let mut keys: Vec<(i64, String)> = Vec::new();
    loop {
        let page = Page { limit: Some(ARCHIVE_PAGE), offset };
        let read = match target {
            Target::Task(scope) => {
                let filter = TaskFilter {
                    dag_id: Some(scope.dag_id.clone()),
                    run_id: Some(scope.run_id.clone()),
                    task_id: Some(scope.task_id.clone()),
                    map_index: (!all_map_indices).then_some(scope.map_index),
                    ..TaskFilter::default()
                };
                let rows = store.list_task(&filter, page)?;
                for row in &rows {
                    sink.task(row).map_err(write_error)?;
                    keys.push((row.scope.map_index, row.key.clone()));
                }
                rows.len()
            }
            Target::Asset(id) => {
                let rows =
                    store.list_asset(&AssetFilter { asset_id: Some(*id), external_only: false }, page)?;
                for row in &rows {
                    sink.asset(row).map_err(write_error)?;
                    keys.push((row.asset_id, row.key.clone()));
                }
                rows.len()
            }
        };
        if (read as u64) < ARCHIVE_PAGE {
            break;
        }
        offset += ARCHIVE_PAGE;
    }
    sink.sync().map_err(write_error)?;
    store.begin()?;
    let mut deleted = 0;
    for (number, key) in &keys {
        let result = match target {
            Target::Task(scope) => {
                let scope = crate::model::TaskScope { map_index: *number, ..(*scope).clone() };
                store.delete_task(&scope, key)
            }
            Target::Asset(id) => store.delete_asset(*id, key),
        };
        match result {
            Ok(n) => deleted += n,
            Err(e) => {
                let _ = store.rollback();
                return Err(e);
            }
        }
    }
    store.commit()?;
    Ok(deleted)
}

/// `--yes`, or a "y" typed at a terminal. Without a terminal there is nobody to ask.
fn confirmed(yes: bool, present: u64, place: &str) -> Result<bool> {
    if yes {
        return Ok(true);
    }
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(Error::Usage(format!(
            "clear would remove {present} key(s) of {place}; pass --yes to confirm when not on a terminal"
        ))
        .into());
    }
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "Remove {present} key(s) of {place}? [y/N] ");
    let _ = err.flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .with_context(|| Error::Usage("cannot read the answer".to_string()))?;
    Ok(matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
}
