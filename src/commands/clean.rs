//! `clean`: Airflow's garbage collection, done so a cron job can trust it.
//!
//! Task rows with `expires_at < cutoff` are deleted in primary-key range batches of
//! `state_cleanup_batch_size` rows, each batch its own short transaction whose DELETE re-checks
//! the expiry, so a key a worker refreshes mid-run survives. A batch size of 0 is one DELETE
//! statement with no id list, so it works on any table size (Airflow's own selects every id
//! and binds them all, which SQLite refuses past its variable limit). Then the rows of inactive
//! assets are swept. One summary line always ends the run; SIGINT/SIGTERM stop it between
//! batches with the summary marked `interrupted`.

use std::time::{Duration, Instant};

use super::Context;
use crate::cli::{CleanArgs, GlobalArgs};
use crate::db::{Access, Metastore};
use crate::error::{Error, Result};
use crate::json::Json;
use crate::model::{Page, TaskFilter};
use crate::output::{self, Rendered, Table, int, obj};
use crate::signals;
use crate::time::{self, Timestamp};

pub(crate) fn run(global: &GlobalArgs, args: &CleanArgs) -> Result<()> {
    let now = Timestamp::now();
    let cutoff = match &args.before {
        Some(text) => {
            let before =
                Timestamp::parse_rfc3339(text).map_err(|e| Error::Usage(format!("invalid --before: {e}")))?;
            if before > now {
                return Err(Error::Usage(format!(
                    "--before {} is in the future: it would delete keys that have not expired yet",
                    before.to_rfc3339()
                )));
            }
            before
        }
        None => now,
    };
    let duration = |flag: &str, text: &Option<String>| -> Result<Option<Duration>> {
        text.as_deref()
            .map(|t| time::parse_duration(t).map_err(|e| Error::Usage(format!("invalid {flag}: {e}"))))
            .transpose()
    };
    let limits = Limits {
        max_rows: args.max_rows,
        max_duration: duration("--max-duration", &args.max_duration)?,
        sleep: duration("--sleep", &args.sleep)?,
    };
    let ctx = Context::load(global, args.batch_size.map(|n| n.to_string()).as_deref())?;
    if !ctx.settings.is_builtin_backend() {
        // Airflow's own clean does the same: a custom backend keeps its state elsewhere.
        let reason = format!(
            "[state_store] backend is {} (from {}), not the metastore backend: skipping cleanup (not supported)",
            ctx.settings.backend.value, ctx.settings.backend.source
        );
        output::note(&reason);
        let doc = obj(vec![
            ("task_rows_deleted", int(0u64)),
            ("asset_rows_deleted", int(0u64)),
            ("batches", int(0u64)),
            ("cutoff", Json::Str(cutoff.to_rfc3339())),
            ("dry_run", Json::Bool(args.dry_run)),
            ("interrupted", Json::Bool(false)),
            ("skipped", Json::Str(reason)),
        ]);
        output::emit(ctx.format, &Rendered { doc, tables: Vec::new(), plain: None })?;
        return Ok(());
    }
    let batch_size = ctx.settings.state_cleanup_batch_size.value;
    if args.dry_run {
        let mut store = ctx.open(Access::ReadOnly)?;
        return dry_run(&ctx, store.as_mut(), cutoff, args.sample);
    }
    let mut store = ctx.open(Access::ReadWrite)?;
    signals::defer();
    let started = Instant::now();
    let mut summary = Summary {
        task_rows_deleted: 0,
        asset_rows_deleted: 0,
        batches: 0,
        cutoff,
        batch_size,
        stopped_by: None,
        seconds: 0.0,
    };
    let result = delete_all(store.as_mut(), &mut summary, &limits, started);
    summary.seconds = started.elapsed().as_secs_f64();
    output::note(&summary.line());
    result?;
    output::emit(ctx.format, &Rendered { doc: summary.to_json(), tables: Vec::new(), plain: None })?;
    match summary.stopped_by {
        Some(Stop::Signal(signal)) => Err(Error::Interrupted { signal }),
        _ => Ok(()),
    }
}

/// What ends a run before every expired row is gone.
struct Limits {
    max_rows: Option<u64>,
    max_duration: Option<Duration>,
    sleep: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Signal(i32),
    MaxRows,
    MaxDuration,
}

impl Stop {
    fn name(self) -> &'static str {
        match self {
            Stop::Signal(15) => "SIGTERM",
            Stop::Signal(_) => "SIGINT",
            Stop::MaxRows => "max_rows",
            Stop::MaxDuration => "max_duration",
        }
    }
}

#[derive(Debug)]
struct Summary {
    task_rows_deleted: u64,
    asset_rows_deleted: u64,
    batches: u64,
    cutoff: Timestamp,
    batch_size: u64,
    stopped_by: Option<Stop>,
    seconds: f64,
}

impl Summary {
    fn line(&self) -> String {
        let stopped = match self.stopped_by {
            Some(Stop::MaxRows) => "; stopped at --max-rows, run again to go on".to_string(),
            Some(Stop::MaxDuration) => "; stopped at --max-duration, run again to go on".to_string(),
            Some(stop) => format!("; stopped by {}, run again to finish", stop.name()),
            None => String::new(),
        };
        format!(
            "clean: deleted {} expired task row(s) in {} batch(es) and {} orphaned asset row(s); cutoff {}, batch size {}, {:.2}s{stopped}",
            self.task_rows_deleted,
            self.batches,
            self.asset_rows_deleted,
            self.cutoff.to_rfc3339(),
            self.batch_size,
            self.seconds
        )
    }

    fn to_json(&self) -> Json {
        obj(vec![
            ("task_rows_deleted", int(self.task_rows_deleted)),
            ("asset_rows_deleted", int(self.asset_rows_deleted)),
            ("batches", int(self.batches)),
            ("cutoff", Json::Str(self.cutoff.to_rfc3339())),
            ("batch_size", int(self.batch_size)),
            ("dry_run", Json::Bool(false)),
            ("interrupted", Json::Bool(matches!(self.stopped_by, Some(Stop::Signal(_))))),
            ("stopped_by", self.stopped_by.map_or(Json::Null, |s| Json::Str(s.name().to_string()))),
            ("seconds", Json::Float((self.seconds * 1000.0).round() / 1000.0)),
        ])
    }
}

/// Walks the primary key in batches; between batches it stops for a signal or a limit. The
/// orphan sweep runs only after every expired task row is gone, so a stopped run leaves the
/// database as a later run expects to find it.
fn delete_all(
    store: &mut dyn Metastore,
    summary: &mut Summary,
    limits: &Limits,
    started: Instant,
) -> Result<()> {
    let mut after_id = i64::MIN;
    loop {
        if let Some(stop) = should_stop(summary, limits, started) {
            summary.stopped_by = Some(stop);
            return Ok(());
        }
        let remaining = limits.max_rows.map(|max| max - summary.task_rows_deleted);
        // `--max-rows` caps the batch so that no run deletes more than it was allowed.
        let batch = match (summary.batch_size, remaining) {
            (0, None) => None,
            (0, Some(r)) => Some(r),
            (b, Some(r)) => Some(b.min(r)),
            (b, None) => Some(b),
        };
        let up_to_id = match batch {
            None => None,
            Some(n) => store.nth_expired_id(summary.cutoff, after_id, n)?,
        };
        let deleted = store.delete_expired_range(summary.cutoff, after_id, up_to_id)?;
        if deleted > 0 {
            summary.batches += 1;
            summary.task_rows_deleted += deleted;
        }
        let Some(id) = up_to_id else { break };
        after_id = id;
        if limits.max_rows.is_some_and(|max| summary.task_rows_deleted >= max)
            && store.nth_expired_id(summary.cutoff, after_id, 1)?.is_none()
        {
            // The limit was reached exactly by the last expired row: the run is complete.
            break;
        }
        if let Some(pause) = limits.sleep {
            signals::sleep(pause);
        }
    }
    if let Some(stop) = should_stop(summary, limits, started).filter(|s| matches!(s, Stop::Signal(_))) {
        summary.stopped_by = Some(stop);
        return Ok(());
    }
    summary.asset_rows_deleted = store.delete_orphans()?;
    Ok(())
}

fn should_stop(summary: &Summary, limits: &Limits, started: Instant) -> Option<Stop> {
    if let Some(signal) = signals::stop_requested() {
        return Some(Stop::Signal(signal));
    }
    if limits.max_rows.is_some_and(|max| summary.task_rows_deleted >= max) {
        return Some(Stop::MaxRows);
    }
    if limits.max_duration.is_some_and(|max| started.elapsed() >= max) {
        return Some(Stop::MaxDuration);
    }
    None
}

/// Counts per dag and per orphaned asset, plus a bounded sample: never every row.
fn dry_run(ctx: &Context, store: &mut dyn Metastore, cutoff: Timestamp, sample: u64) -> Result<()> {
    let by_dag = store.expired_by_dag(cutoff)?;
    let by_asset = store.orphans_by_asset()?;
    let task_rows: u64 = by_dag.iter().map(|d| d.rows).sum();
    let asset_rows: u64 = by_asset.iter().map(|a| a.rows).sum();
    let task_sample = store.list_task(
        &TaskFilter { expired_before: Some(cutoff), ..TaskFilter::default() },
        Page { limit: Some(sample), offset: 0 },
    )?;
    let asset_sample = store.orphan_sample(sample)?;

    let mut counts = Table {
        title: Some("Would delete:".to_string()),
        headers: vec!["kind", "scope", "rows"],
        rows: Vec::new(),
    };
    counts.rows.extend(
        by_dag
            .iter()
            .map(|d| vec!["expired task rows".to_string(), format!("dag {}", d.dag_id), d.rows.to_string()]),
    );
    counts.rows.extend(by_asset.iter().map(|a| {
        let name =
            a.asset_name.as_deref().map_or_else(|| "(deleted asset)".to_string(), |n| format!("{n:?}"));
        vec![
            "orphaned asset rows".to_string(),
            format!("asset {name} (id {})", a.asset_id),
            a.rows.to_string(),
        ]
    }));
    let tasks =
        output::entries(&task_sample, true, Some(format!("Sample of expired task rows (at most {sample}):")));
    let orphans = output::entries(
        &asset_sample,
        true,
        Some(format!("Sample of orphaned asset rows (at most {sample}):")),
    );
    let mut tables = vec![counts];
    tables.extend([tasks.table, orphans.table].into_iter().filter(|t| !t.rows.is_empty()));
    let (sample_docs, orphan_docs) = (tasks.docs, orphans.docs);
    let doc = obj(vec![
        ("dry_run", Json::Bool(true)),
        ("cutoff", Json::Str(cutoff.to_rfc3339())),
        ("batch_size", int(ctx.settings.state_cleanup_batch_size.value)),
        ("task_rows_deleted", int(0u64)),
        ("asset_rows_deleted", int(0u64)),
        ("task_rows_to_delete", int(task_rows)),
        ("asset_rows_to_delete", int(asset_rows)),
        (
            "expired_by_dag",
            Json::Array(
                by_dag
                    .iter()
                    .map(|d| obj(vec![("dag_id", Json::Str(d.dag_id.clone())), ("rows", int(d.rows))]))
                    .collect(),
            ),
        ),
        (
            "orphans_by_asset",
            Json::Array(
                by_asset
                    .iter()
                    .map(|a| {
                        obj(vec![
                            ("asset_id", int(a.asset_id)),
                            ("asset_name", a.asset_name.clone().map_or(Json::Null, Json::Str)),
                            ("rows", int(a.rows)),
                        ])
                    })
                    .collect(),
            ),
        ),
        ("sample", Json::Array(sample_docs)),
        ("orphan_sample", Json::Array(orphan_docs)),
        ("interrupted", Json::Bool(false)),
        ("stopped_by", Json::Null),
    ]);
    output::note(&format!(
        "clean --dry-run: would delete {task_rows} expired task row(s) of {} dag(s) and {asset_rows} orphaned asset row(s) of {} asset(s); cutoff {}",
        by_dag.len(),
        by_asset.len(),
        cutoff.to_rfc3339()
    ));
    output::emit(ctx.format, &Rendered { doc, tables, plain: Some(format!("{task_rows} {asset_rows}")) })?;
    Ok(())
}
