//! `clear <scope>`: removes every key of a task instance (one map index, or all of them) or of
//! an asset. It deletes many rows at once, so it asks first on a terminal and needs `--yes`
//! anywhere else; the database is untouched until the user agrees. With `--archive`, the rows
//! are appended to a file in the export format and synced before they are deleted.

use anyhow::Context as _;
use std::io::{BufRead, IsTerminal, Write};

use serde::Serialize;

use super::{Scope, describe_asset, open_keys, scope_from_args};
use crate::archive::{Sink, archive_error};
use crate::cli::{ClearArgs, GlobalArgs};
use crate::db::Access;
use crate::error::{self, Error, Result};
use crate::keys::{Keys, MissingTaskInstance, Removed};
use crate::model::{Asset, Page, TaskFilter, TaskScope};
use crate::output::{self, Rendered};

pub(crate) fn run(global: &GlobalArgs, args: &ClearArgs) -> Result<()> {
    let scope = scope_from_args(&args.scope)?;
    if args.all_map_indices && matches!(scope, Scope::Asset(_)) {
        return Err(Error::Usage("--all-map-indices is for task scopes, not assets".to_string()).into());
    }
    if let Some(archive) = &args.archive {
        crate::fs::check_append("archive", archive)?;
    }
    let mut keys = open_keys(global, Access::ReadWrite)?;
    if let Some(archive) = &args.archive {
        crate::fs::refuse_database("--archive", archive)?;
    }
    let all = args.all_map_indices;
    let (target, place) = match &scope {
        Scope::Task(task) => (Target::Task(task), task_place(task, all)),
        Scope::Asset(selector) => {
            let asset = keys.asset(selector, false)?;
            let place = describe_asset(&asset);
            (Target::Asset(asset), place)
        }
    };
    let present = match &target {
        Target::Task(task) => {
            keys.count_task_keys(task, all, MissingTaskInstance::from_flag(args.allow_missing_task_instance))?
        }
        Target::Asset(asset) => keys.count_asset_keys(asset)?,
    };
    if present > 0 && !confirmed(args.yes, present, &place)? {
        output::status("cancelled; nothing deleted");
        return Ok(());
    }
    let result = match (&target, &args.archive) {
        (_, Some(path)) if present > 0 => archive_then_clear(keys.as_mut(), &target, all, path),
        // Nothing to delete: only the API's DELETE is sent, for its check that the task
        // instance exists; the database has checked it already.
        (Target::Task(task), _) => keys.clear_task(task, all),
        (Target::Asset(asset), _) if present > 0 => keys.clear_asset(asset),
        (Target::Asset(_), _) => Ok(0),
    };
    // Over the REST API (no transaction) an error may stop the deletes half-way: the keys
    // removed before it are reported as a finished run's are, with the error, then its exit.
    let (deleted, stopped) = match result {
        Ok(deleted) => (deleted, None),
        Err(e) => match e.downcast_ref::<Removed>() {
            Some(&Removed(deleted)) => (deleted, Some(e)),
            None => return Err(e),
        },
    };
    let s = if deleted == 1 { "" } else { "s" };
    let error = stopped.as_ref().map(|e| Stopped {
        message: crate::redact::mask(&error::message(e.as_ref())),
        exit_code: error::exit_code(e),
    });
    output::status(&format!(
        "removed {deleted} key{s} of {place}{}",
        if error.is_some() { " before an error" } else { "" }
    ));
    output::emit(
        global.output,
        &Rendered { doc: Cleared { deleted, error }, tables: Vec::new(), plain: Some(deleted.to_string()) },
    )?;
    stopped.map_or(Ok(()), Err)
}

/// `{"deleted": N}`, and the error that stopped a clear half-way.
#[derive(Serialize)]
struct Cleared {
    deleted: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<Stopped>,
}

#[derive(Serialize)]
struct Stopped {
    message: String,
    exit_code: i32,
}

enum Target<'a> {
    Task(&'a TaskScope),
    Asset(Asset),
}

fn task_place(task: &TaskScope, all_map_indices: bool) -> String {
    if all_map_indices {
        format!("task {} (every map index)", task.task_label())
    } else {
        format!("task {task}")
    }
}

/// Archives every row of the scope, syncs the file, then deletes exactly the archived rows,
/// key by key (in one transaction on the database): a key written into the scope after the
/// archive was read is left alone rather than deleted unarchived.
fn archive_then_clear(
    keys: &mut dyn Keys,
    target: &Target<'_>,
    all_map_indices: bool,
    path: &std::path::Path,
) -> Result<u64> {
    let mut sink = Sink::archive(path)?;
    let write_error = |e: std::io::Error| archive_error(path, e);
    let every = Page { limit: None, offset: 0 };
    match target {
        Target::Task(scope) => {
            let filter = TaskFilter {
                dag_id: Some(scope.dag_id.clone()),
                run_id: Some(scope.run_id.clone()),
                task_id: Some(scope.task_id.clone()),
                map_index: (!all_map_indices).then_some(scope.map_index),
                ..TaskFilter::default()
            };
            let mut archived: Vec<(i64, String)> = Vec::new();
            keys.each_task(&filter, every, &mut |row| {
                sink.task(&row).map_err(write_error)?;
                archived.push((row.scope.map_index, row.key));
                Ok(std::ops::ControlFlow::Continue(()))
            })?;
            sink.sync().map_err(write_error)?;
            keys.delete_task_keys(scope, &archived)
        }
        Target::Asset(asset) => {
            let mut archived: Vec<String> = Vec::new();
            keys.each_asset(Some(asset), false, every, &mut |row| {
                sink.asset(&row).map_err(write_error)?;
                archived.push(row.key);
                Ok(std::ops::ControlFlow::Continue(()))
            })?;
            sink.sync().map_err(write_error)?;
            keys.delete_asset_keys(asset, &archived)
        }
    }
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
