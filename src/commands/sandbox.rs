//! `sandbox`: a throw-away Airflow 3.3 metastore, for trying the tool (the README's demo) and
//! for tests, which add their own dag runs and assets through it on every dialect alike.

use serde::Serialize;

use super::Context;
use crate::cli::{GlobalArgs, SandboxCommand};
use crate::db::{self, Access, AssetWrite, TaskWrite};
use crate::error::{Error, Result};
use crate::model::TaskScope;
use crate::output::{self, Rendered};
use crate::time::Timestamp;

pub(crate) fn run(global: &GlobalArgs, command: &SandboxCommand) -> Result<()> {
    super::refuse_api(global, "sandbox")?;
    let ctx = Context::load(global, None)?;
    if matches!(command, SandboxCommand::Create { .. }) && global.conn.is_none() {
        // The configured database is Airflow's own (or the default ~/airflow/airflow.db it
        // would create): a sandbox there would pass for a real metastore.
        return Err(Error::Usage(format!(
            "sandbox create needs --conn URL naming the new database: a sandbox is never created at \
             the configured Airflow database ({} from {})",
            ctx.url.redacted(),
            ctx.settings.sql_alchemy_conn.source
        ))
        .into());
    }
    let mut sandbox = ctx.located(db::open_sandbox(
        &ctx.url,
        ctx.settings.sql_alchemy_schema.value.as_deref(),
        &ctx.timeouts(),
    ))?;
    // The new id is the one thing a caller needs: table and plain print it alone.
    let (doc, id) = match command {
        SandboxCommand::Create { sample_data } => {
            sandbox.create()?;
            drop(sandbox);
            if *sample_data {
                add_sample_data(&ctx)?;
            }
            output::status(&format!(
                "created an Airflow 3.3.2 state-store sandbox at {}{}",
                ctx.url.redacted(),
                if *sample_data { " with sample data" } else { "" }
            ));
            (Sandboxed::Created { created: true, sample_data: *sample_data }, None)
        }
        SandboxCommand::AddDagRun { dag_id, run_id, task_id } => {
            let id = sandbox.add_dag_run(dag_id, run_id)?;
            for task_id in task_id {
                sandbox.add_task_instance(dag_id, run_id, task_id, -1)?;
            }
            (Sandboxed::DagRun { dag_run_id: id }, Some(id.to_string()))
        }
        SandboxCommand::AddTaskInstance { dag_id, run_id, task_id, map_index } => {
            let indexes = if map_index.is_empty() { vec![-1] } else { map_index.clone() };
            for index in &indexes {
                super::check_map_index(*index)?;
            }
            for index in &indexes {
                sandbox.add_task_instance(dag_id, run_id, task_id, *index)?;
            }
            (Sandboxed::TaskInstances { task_instances: indexes.len() }, Some(indexes.len().to_string()))
        }
        SandboxCommand::AddAsset { name, uri, inactive } => {
            let id = sandbox.add_asset(name, uri, !inactive)?;
            (Sandboxed::Asset { asset_id: id }, Some(id.to_string()))
        }
    };
    let format =
        if ctx.format == crate::output::Format::Table { crate::output::Format::Plain } else { ctx.format };
    output::emit(format, &Rendered { doc, tables: Vec::new(), plain: id })
}

/// What a sandbox command prints in JSON: `{"created": true, "sample_data": …}`, or the new
/// row's id (`{"dag_run_id": N}`, `{"task_instances": N}`, `{"asset_id": N}`).
#[derive(Serialize)]
#[serde(untagged)]
enum Sandboxed {
    Created { created: bool, sample_data: bool },
    DagRun { dag_run_id: i64 },
    TaskInstances { task_instances: usize },
    Asset { asset_id: i64 },
}

type SampleRow = (usize, &'static str, i64, &'static str, &'static str, i64, Option<i64>);

const HOUR: i64 = 3_600_000_000;
const DAY: i64 = 24 * HOUR;

/// A small, realistic state store: dag runs with their task instances, watermarks, job ids and
/// mapped-task offsets, some keys already expired, one never expiring, and an inactive asset
/// whose keys are orphans.
fn add_sample_data(ctx: &Context) -> Result<()> {
    let mut sandbox =
        db::open_sandbox(&ctx.url, ctx.settings.sql_alchemy_schema.value.as_deref(), &ctx.timeouts())?;
    let runs = [
        ("incremental_orders", "scheduled__2026-11-20T00:00:00+00:00"),
        ("incremental_orders", "scheduled__2026-11-28T00:00:00+00:00"),
        ("spark_daily_etl", "manual__2026-11-28T06:00:00+00:00"),
    ];
    // The task instances the scheduler creates with each run; `transform` is mapped over two
    // inputs in every run of incremental_orders.
    let tasks: [&[(&str, &[i64])]; 3] = [
        &[("load_new_orders", &[-1]), ("transform", &[0, 1])],
        &[("load_new_orders", &[-1]), ("transform", &[0, 1])],
        &[("submit_job", &[-1])],
    ];
    let mut run_ids = Vec::new();
    for ((dag_id, run_id), tasks) in runs.into_iter().zip(tasks) {
        run_ids.push(sandbox.add_dag_run(dag_id, run_id)?);
        for (task_id, map_indexes) in tasks {
            for map_index in *map_indexes {
                sandbox.add_task_instance(dag_id, run_id, task_id, *map_index)?;
            }
        }
    }
    let orders = sandbox.add_asset("orders", "s3://warehouse/orders/", true)?;
    let legacy = sandbox.add_asset("legacy_orders", "s3://warehouse/orders-v1/", false)?;
    drop(sandbox);

    let mut store = ctx.open(Access::ReadWrite)?;
    let now = Timestamp::now();
    let at = |offset: i64| Timestamp::from_micros(now.micros() + offset);
    // (run, task, map_index, key, value, updated, expires), times relative to now
    let rows: [SampleRow; 8] = [
        (0, "load_new_orders", -1, "watermark", r#""2026-11-20T00:00:00Z""#, -9 * DAY, Some(-2 * DAY)),
        (0, "load_new_orders", -1, "rows_loaded", "1250", -9 * DAY, Some(-2 * DAY)),
        (1, "load_new_orders", -1, "watermark", r#""2026-11-28T00:00:00Z""#, -HOUR, Some(30 * DAY - HOUR)),
        (1, "load_new_orders", -1, "rows_loaded", "1312", -HOUR, Some(30 * DAY - HOUR)),
        (1, "transform", 0, "offset", "4096", -HOUR, Some(6 * HOUR)),
        (1, "transform", 1, "offset", "8192", -HOUR, Some(6 * HOUR)),
        (
            2,
            "submit_job",
            -1,
            "job",
            r#"{"cluster": "spark-prod", "job_id": "app-20261128-0042", "attempt": 2}"#,
            -2 * HOUR,
            None,
        ),
        (
            2,
            "submit_job",
            -1,
            "checkpoint/path",
            r#""s3://warehouse/checkpoints/daily/""#,
            -2 * HOUR,
            Some(-HOUR),
        ),
    ];
    for (run, task_id, map_index, key, value, updated, expires) in rows {
        let (dag_id, run_id) = runs[run];
        let scope =
            TaskScope { dag_id: dag_id.into(), run_id: run_id.into(), task_id: task_id.into(), map_index };
        store.upsert_task(&TaskWrite {
            dag_run_id: run_ids[run],
            scope: &scope,
            key,
            value,
            updated_at: at(updated),
            expires_at: expires.map(at),
        })?;
    }
    store.upsert_asset(&AssetWrite {
        asset_id: orders,
        key: "watermark",
        value: r#""2026-11-28T23:59:59Z""#,
        updated_at: at(-HOUR),
    })?;
    store.upsert_asset(&AssetWrite {
        asset_id: legacy,
        key: "cursor",
        value: "[17, \"page-3\"]",
        updated_at: at(-40 * DAY),
    })?;
    Ok(())
}
