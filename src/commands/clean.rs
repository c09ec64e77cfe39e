//! `clean`: Airflow's garbage collection, done so a cron job can trust it.
//!
//! Task rows with `expires_at < cutoff` are deleted in primary-key range batches of
//! `state_cleanup_batch_size` rows, each batch its own short transaction whose DELETE re-checks
//! the expiry, so a key a worker refreshes mid-run survives. A batch size of 0 is one DELETE
//! statement with no id list, so it works on any table size (Airflow's own selects every id
//! and binds them all, which SQLite refuses past its variable limit). Then the rows of inactive
//! assets are swept. One summary line always ends the run; SIGINT/SIGTERM stop it between
//! batches with the summary marked `interrupted`.

use std::time::Instant;

use super::Context;
use crate::cli::{CleanArgs, GlobalArgs};
use crate::db::{Access, Metastore};
use crate::error::{Error, Result};
use crate::json::Json;
use crate::model::{Page, TaskFilter};
use crate::output::{self, Rendered, Table, int, obj};
use crate::signals;
use crate::time::Timestamp;

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
    let ctx = Context::load(global, args.batch_size.as_deref())?;
    if !ctx.settings.is_builtin_backend() {
        // Airflow's own clean does the same: a custom backend keeps its state elsewhere.
        output::note(&format!(
            "[state_store] backend is {} (from {}), not the metastore backend: skipping cleanup (not supported)",
            ctx.settings.backend.value, ctx.settings.backend.source
        ));
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
        interrupted: None,
        seconds: 0.0,
    };
    let result = delete_all(store.as_mut(), &mut summary);
    summary.seconds = started.elapsed().as_secs_f64();
    output::note(&summary.line());
    result?;
    output::emit(ctx.format, &Rendered { doc: summary.to_json(), tables: Vec::new(), plain: None })?;
    match summary.interrupted {
        Some(signal) => Err(Error::Interrupted { signal }),
        None => Ok(()),
    }
}

#[derive(Debug)]
struct Summary {
    task_rows_deleted: u64,
    asset_rows_deleted: u64,
    batches: u64,
    cutoff: Timestamp,
    batch_size: u64,
    interrupted: Option<i32>,
    seconds: f64,
}

impl Summary {
    fn line(&self) -> String {
        let stopped = match self.interrupted {
            Some(15) => "; stopped by SIGTERM, run again to finish",
            Some(_) => "; stopped by SIGINT, run again to finish",
            None => "",
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
            ("interrupted", Json::Bool(self.interrupted.is_some())),
            ("seconds", Json::Float((self.seconds * 1000.0).round() / 1000.0)),
        ])
    }
}

/// Walks the primary key in batches; stops between batches when a signal arrived.
fn delete_all(store: &mut dyn Metastore, summary: &mut Summary) -> Result<()> {
    let mut after_id = i64::MIN;
    loop {
        if let Some(signal) = signals::stop_requested() {
            summary.interrupted = Some(signal);
            return Ok(());
        }
        let up_to_id = match summary.batch_size {
            0 => None,
            n => store.nth_expired_id(summary.cutoff, after_id, n)?,
        };
        let deleted = store.delete_expired_range(summary.cutoff, after_id, up_to_id)?;
        if deleted > 0 {
            summary.batches += 1;
            summary.task_rows_deleted += deleted;
        }
        match up_to_id {
            Some(id) => after_id = id,
            None => break,
        }
    }
    if let Some(signal) = signals::stop_requested() {
        summary.interrupted = Some(signal);
        return Ok(());
    }
    summary.asset_rows_deleted = store.delete_orphans()?;
    Ok(())
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

    let mut counts = Table { title: Some("Would delete:".to_string()), headers: vec!["kind", "scope", "rows"], rows: Vec::new() };
    counts.rows.extend(by_dag.iter().map(|d| vec!["expired task rows".to_string(), format!("dag {}", d.dag_id), d.rows.to_string()]));
    counts.rows.extend(by_asset.iter().map(|a| {
        let name = a.asset_name.as_deref().map_or_else(|| "(deleted asset)".to_string(), |n| format!("{n:?}"));
        vec!["orphaned asset rows".to_string(), format!("asset {name} (id {})", a.asset_id), a.rows.to_string()]
    }));
    let mut tables = vec![counts];
    let mut sample_docs = Vec::new();
    if !task_sample.is_empty() {
        let mut table = Table {
            title: Some(format!("Sample of expired task rows (at most {sample}):")),
            headers: output::TASK_HEADERS.to_vec(),
            rows: Vec::new(),
        };
        for entry in &task_sample {
            let value = output::stored_value(&entry.key, &entry.value);
            table.rows.push(output::task_row(entry, &value, true));
            sample_docs.push(output::task_entry_json(entry, value));
        }
        tables.push(table);
    }
    let mut orphan_docs = Vec::new();
    if !asset_sample.is_empty() {
        let mut table = Table {
            title: Some(format!("Sample of orphaned asset rows (at most {sample}):")),
            headers: output::ASSET_HEADERS.to_vec(),
            rows: Vec::new(),
        };
        for entry in &asset_sample {
            let value = output::stored_value(&entry.key, &entry.value);
            table.rows.push(output::asset_row(entry, &value, true));
            orphan_docs.push(output::asset_entry_json(entry, value));
        }
        tables.push(table);
    }
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
            Json::Array(by_dag.iter().map(|d| obj(vec![("dag_id", Json::Str(d.dag_id.clone())), ("rows", int(d.rows))])).collect()),
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
