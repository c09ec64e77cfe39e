//! `sandbox create --sample-data`: a small, realistic state store in a new sandbox, for the
//! README's demo.

use crate::db::{AssetWrite, Sandbox, Store, TaskWrite};
use crate::error::Result;
use crate::model::TaskScope;
use crate::time::Timestamp;

type SampleRow = (usize, &'static str, i64, &'static str, &'static str, i64, Option<i64>);

const HOUR: i64 = 3_600_000_000;
const DAY: i64 = 24 * HOUR;

/// The sample's longer values.
const JOB: &str = r#"{"cluster": "spark-prod", "job_id": "app-20261128-0042", "attempt": 2}"#;
const CHECKPOINT: &str = r#""s3://warehouse/checkpoints/daily/""#;

/// A small, realistic state store: dag runs with their task instances, watermarks, job ids and
/// mapped-task offsets, some keys already expired, one never expiring, and an inactive asset
/// whose keys are orphans. The dag runs, task instances and assets go through `sandbox`, which
/// is closed before `open` opens the store the keys are written through.
pub(crate) fn add_sample_data(mut sandbox: Sandbox, open: impl FnOnce() -> Result<Store>) -> Result<()> {
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

    let mut store = open()?;
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
        (2, "submit_job", -1, "job", JOB, -2 * HOUR, None),
        (2, "submit_job", -1, "checkpoint/path", CHECKPOINT, -2 * HOUR, Some(-HOUR)),
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
    let assets = [
        (orders, "watermark", r#""2026-11-28T23:59:59Z""#, -HOUR),
        (legacy, "cursor", "[17, \"page-3\"]", -40 * DAY),
    ];
    for (asset_id, key, value, updated) in assets {
        store.upsert_asset(&AssetWrite { asset_id, key, value, updated_at: at(updated) })?;
    }
    Ok(())
}
