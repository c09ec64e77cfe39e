//! A dry run: what a clean would delete, counted per dag and per orphaned asset, with a
//! bounded sample of each, and its report.

use std::time::Instant;

use serde::Serialize;

use super::{Options, Watch, batch_time_ms, batches_needed, batching_brief, batching_name, millis};
use crate::db::{AssetCount, DagCount, Store};
use crate::error::Result;
use crate::model::{AssetEntry, Page, TaskEntry, TaskFilter};
use crate::output::{self, AssetEntryDoc, Rendered, Table, TaskEntryDoc};
use crate::text::quote;

/// What a dry run finds: counts per dag and per orphaned asset, and a bounded sample of each,
/// never every row.
#[derive(Default)]
pub(crate) struct DryRun {
    pub(crate) by_dag: Vec<DagCount>,
    pub(crate) by_asset: Vec<AssetCount>,
    pub(crate) task_sample: Vec<TaskEntry>,
    pub(crate) asset_sample: Vec<AssetEntry>,
}

impl DryRun {
    pub(crate) fn task_rows(&self) -> u64 {
        self.by_dag.iter().map(|d| d.rows).sum()
    }

    pub(crate) fn asset_rows(&self) -> u64 {
        self.by_asset.iter().map(|a| a.rows).sum()
    }
}

/// Counts what a run with `options` would delete, and reads up to `sample` rows of each kind.
/// With `--verbose`, each query's finding and time go to `watch`.
pub(crate) fn dry_run(
    store: &mut Store,
    options: &Options,
    sample: u64,
    watch: &mut dyn Watch,
) -> Result<DryRun> {
    if options.verbose {
        watch.detail(&options.first_line("clean --dry-run: reading", "counting"));
    }
    let mut timed = |what: String, started: Instant| {
        if options.verbose {
            watch.detail(&format!("clean --dry-run: {what}, {} ms", millis(started)));
        }
    };
    let (cutoff, mut found) = (options.cutoff, DryRun::default());
    if options.tasks {
        let started = Instant::now();
        found.by_dag = store.expired_by_dag(cutoff)?;
        timed(
            format!("counted {} expired task row(s) of {} dag(s)", found.task_rows(), found.by_dag.len()),
            started,
        );
    }
    if options.orphans {
        let started = Instant::now();
        found.by_asset = store.orphans_by_asset()?;
        timed(
            format!(
                "counted {} orphaned asset row(s) of {} asset(s)",
                found.asset_rows(),
                found.by_asset.len()
            ),
            started,
        );
    }
    if options.tasks {
        let started = Instant::now();
        let expired = TaskFilter { expired_before: Some(cutoff), ..TaskFilter::default() };
        found.task_sample = store.list_task(&expired, Page { limit: Some(sample), offset: 0 })?;
        timed(format!("read a sample of {} expired task row(s)", found.task_sample.len()), started);
    }
    if options.orphans {
        let started = Instant::now();
        found.asset_sample = store.orphan_sample(sample)?;
        timed(format!("read a sample of {} orphaned asset row(s)", found.asset_sample.len()), started);
    }
    if options.verbose {
        let (tasks, assets) = (found.task_rows(), found.asset_rows());
        let needed = batches_needed(tasks, assets, options.batch_size, options.batch_time, options.max_rows);
        watch.detail(&format!("clean --dry-run: a run now would take {needed}"));
    }
    Ok(found)
}

impl DryRun {
    /// What a dry run prints: the counts, a sample of each kind (at most `sample`), and the
    /// line for stderr.
    pub(crate) fn rendered(self, options: &Options, sample: u64) -> (Rendered<DryRunDoc>, String) {
        let (task_rows, asset_rows, cutoff) = (self.task_rows(), self.asset_rows(), options.cutoff);
        let DryRun { by_dag, by_asset, task_sample, asset_sample } = self;
        let fixed = options.fixed_size();
        let dags = by_dag.iter().map(|d| ("expired task rows", format!("dag {}", d.dag_id), d.rows));
        let assets = by_asset.iter().map(|a| {
            let name = a.asset_name.as_deref().map_or_else(|| "(deleted asset)".to_string(), quote);
            ("orphaned asset rows", format!("asset {name} (id {})", a.asset_id), a.rows)
        });
        let mut counts = Table {
            title: Some("Would delete:".to_string()),
            headers: vec!["kind", "scope", "rows"],
            rows: dags
                .chain(assets)
                .map(|(kind, scope, rows)| vec![kind.to_string(), scope, rows.to_string()])
                .collect(),
        };
        let title = |rows: &str| Some(format!("Sample of {rows} (at most {sample}):"));
        let tasks = output::entries(&task_sample, true, title("expired task rows"));
        let orphans = output::entries(&asset_sample, true, title("orphaned asset rows"));
        // Nothing to delete is one line, not the header of an empty table; json, yaml and plain
        // keep their shapes (empty lists, zero counts), which their readers rely on.
        if counts.rows.is_empty() {
            let tasks = options.tasks.then(|| format!("no task key expired before {}", cutoff.to_rfc3339()));
            let orphans = options.orphans.then(|| "no key of an inactive asset".to_string());
            let none: Vec<String> = [tasks, orphans].into_iter().flatten().collect();
            counts = Table::line(format!("Nothing to delete: {}.", none.join(" and ")));
        }
        let mut tables = vec![counts];
        tables.extend([tasks.table, orphans.table].into_iter().filter(|t| !t.rows.is_empty()));
        let line = format!(
            "clean --dry-run: would delete {task_rows} expired task row(s) of {} dag(s) and {asset_rows} orphaned asset row(s) of {} asset(s); cutoff {}, batch size {}",
            by_dag.len(),
            by_asset.len(),
            cutoff.to_rfc3339(),
            batching_brief(fixed, options.batch_time)
        );
        let doc = DryRunDoc {
            dry_run: true,
            cutoff: cutoff.to_rfc3339(),
            batching: batching_name(fixed, options.batch_time),
            batching_from: options.auto_from.clone(),
            batch_size: fixed,
            batch_time_ms: batch_time_ms(options.batch_time),
            task_rows_deleted: 0,
            asset_rows_deleted: 0,
            task_rows_to_delete: task_rows,
            asset_rows_to_delete: asset_rows,
            expired_by_dag: by_dag,
            orphans_by_asset: by_asset,
            sample: tasks.docs,
            orphan_sample: orphans.docs,
            interrupted: false,
            stopped_by: None,
        };
        (Rendered { doc, tables, plain: Some(format!("{task_rows} {asset_rows}")) }, line)
    }
}

/// What `clean --dry-run -o json` prints (docs/output.md#dry-run-object).
#[derive(Serialize)]
pub(crate) struct DryRunDoc {
    dry_run: bool,
    cutoff: String,
    batching: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    batching_from: Option<String>,
    /// Rows per batch; `null` for auto, whose batches are sized as the run goes.
    batch_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    batch_time_ms: Option<u64>,
    task_rows_deleted: u64,
    asset_rows_deleted: u64,
    task_rows_to_delete: u64,
    asset_rows_to_delete: u64,
    expired_by_dag: Vec<DagCount>,
    orphans_by_asset: Vec<AssetCount>,
    sample: Vec<TaskEntryDoc>,
    orphan_sample: Vec<AssetEntryDoc>,
    interrupted: bool,
    stopped_by: Option<&'static str>,
}
