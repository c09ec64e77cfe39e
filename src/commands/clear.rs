//! `clear <scope>`: removes every key of a task instance (one map index, or all of them) or of
//! an asset. It deletes many rows at once, so it asks first on a terminal and needs `--yes`
//! anywhere else; the database is untouched until the user agrees. With `--archive`, the rows
//! are appended to a file in the export format and synced before they are deleted, and only
//! the rows archived are deleted: a key written since it was read is kept and named.

use anyhow::Context as _;
use std::io::{BufRead, IsTerminal, Write};

use serde::Serialize;

use super::{ErrorMember, Scope, open_keys, scope_from_args};
use crate::cli::{ClearArgs, GlobalArgs};
use crate::db::Access;
use crate::error::{Error, Result};
use crate::keys::{MissingTaskInstance, Target};
use crate::model::{KeptKey, TaskScope};
use crate::ops::usage;

use crate::output::{self, Rendered};
use crate::text::quote;

pub(crate) fn run(global: &GlobalArgs, args: &ClearArgs) -> Result<()> {
    let scope = scope_from_args(&args.scope)?;
    if args.all_map_indices && matches!(scope, Scope::Asset(_)) {
        return usage("--all-map-indices is for task scopes, not assets");
    }
    if let Some(archive) = &args.archive {
        crate::fs::check_append("archive", archive)?;
    }
    let mut keys = open_keys(global, Access::ReadWrite)?;
    if let Some(archive) = &args.archive {
        crate::fs::refuse_database("--archive", archive)?;
    }
    let all = args.all_map_indices;
    let (place, target) = match &scope {
        Scope::Task(task) => (task_place(task, all), Target::Task(task)),
        Scope::Asset(selector) => keys.asset(selector, false).map(|a| (a.described(), Target::Asset(a)))?,
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
    // Over the REST API (no transaction) an error may stop the deletes half-way: the keys
    // removed before it are reported as a finished run's are, with the error, then its exit.
    let (deleted, kept, stopped) =
        crate::keys::clear(keys.as_mut(), &target, all, present, args.archive.as_deref())?;
    let s = if deleted == 1 { "" } else { "s" };
    let error = stopped.as_ref().map(ErrorMember::of);
    output::status(&format!(
        "removed {deleted} key{s} of {place}{}",
        if error.is_some() { " before an error" } else { "" }
    ));
    if let Some(kept) = kept.as_deref().filter(|kept| !kept.is_empty()) {
        output::warn(&kept_line(kept, &place));
    }
    let plain = Some(deleted.to_string());
    output::emit(
        global.output,
        &Rendered { doc: Cleared { deleted, kept, error }, tables: Vec::new(), plain },
    )?;
    stopped.map_or(Ok(()), Err)
}

/// `{"deleted": N}`; with `--archive` the keys archived but kept: `"kept": [{"map_index": M,
/// "key": K}, …]` (an asset's without `map_index`), `[]` when none; and the error that stopped
/// a clear half-way.
#[derive(Serialize)]
struct Cleared {
    deleted: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    kept: Option<Vec<KeptKey>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorMember>,
}

/// Keys named in the warning; the document names every one.
const KEPT_NAMED: usize = 10;

/// The warning of keys archived and then kept, written after they were read.
fn kept_line(kept: &[KeptKey], place: &str) -> String {
    let names: Vec<String> = kept
        .iter()
        .take(KEPT_NAMED)
        .map(|k| match k.map_index {
            Some(map_index) if map_index >= 0 => format!("{} (map index {map_index})", quote(&k.key)),
            _ => quote(&k.key),
        })
        .collect();
    let more = kept.len().saturating_sub(KEPT_NAMED);
    let more = if more > 0 { format!(" and {more} more") } else { String::new() };
    let (n, s) = (kept.len(), if kept.len() == 1 { "" } else { "s" });
    format!(
        "kept {n} key{s} of {place}, written by another session after {} archived: {}{more}; \
         the archive holds the value{s} read before",
        if n == 1 { "it was" } else { "they were" },
        names.join(", ")
    )
}

fn task_place(task: &TaskScope, all_map_indices: bool) -> String {
    if all_map_indices {
        format!("task {} (every map index)", task.task_label())
    } else {
        format!("task {task}")
    }
}

/// `--yes`, or a "y" typed at a terminal. Without a terminal there is nobody to ask.
fn confirmed(yes: bool, present: u64, place: &str) -> Result<bool> {
    if yes {
        return Ok(true);
    }
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return usage(format!(
            "clear would remove {present} key(s) of {place}; pass --yes to confirm when not on a terminal"
        ));
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
