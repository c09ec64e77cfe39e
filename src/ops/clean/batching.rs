//! A run's batching: the batch size and auto's time per batch chosen from the flag and the
//! configuration, their names and texts, and how many batches a run needs.

use std::time::Duration;

use super::{AUTO_BATCH_TIME, AUTO_FIRST_ROWS, AUTO_MAX_ROWS, AUTO_MIN_ROWS, AUTO_PAUSE_RATIO};
use crate::config::Sourced;
use crate::error::Result;
use crate::ops::usage;

/// A run's batching from `--batch-size` (`Some(None)` for auto, `Some(Some(n))` for `n`
/// rows) over the configured `state_cleanup_batch_size`: the batch size, auto's time per batch
/// beside other sessions' writes (`busy`) when it is auto, and where a configured 0 that runs
/// as auto came from. Auto when asked for, and in place of the configured 0: Airflow's default,
/// which Airflow writes into every `airflow.cfg` it generates, so it says nothing of the
/// user's wishes. Its one transaction would hold the clean's locks for the whole run (on
/// SQLite the one write lock every Airflow writer needs). `--batch-size 0` still asks for it.
pub(crate) fn choose_batching(
    flag: Option<Option<u64>>,
    configured: &Sourced<u64>,
    busy: Duration,
) -> (u64, Option<Duration>, Option<String>) {
    match (flag, configured.value) {
        (Some(None), _) => (AUTO_FIRST_ROWS, Some(busy), None),
        (None, 0) => {
            let from = format!("state_cleanup_batch_size = 0 from {}", configured.source);
            (AUTO_FIRST_ROWS, Some(busy), Some(from))
        }
        (Some(Some(rows)), _) | (None, rows) => (rows, None, None),
    }
}

/// [`choose_batching`] with `--batch-time` (`batch_time`; [`AUTO_BATCH_TIME`] when not
/// given), which must be above 0 and applies to auto only.
pub(crate) fn batching(
    flag: Option<Option<u64>>,
    configured: &Sourced<u64>,
    batch_time: Option<Duration>,
) -> Result<(u64, Option<Duration>, Option<String>)> {
    let busy = batch_time.unwrap_or(AUTO_BATCH_TIME);
    if busy.is_zero() {
        return usage("invalid --batch-time: give a duration above 0, e.g. 10ms");
    }
    let chosen = choose_batching(flag, configured, busy);
    if chosen.1.is_none() && batch_time.is_some() {
        return usage(format!(
            "--batch-time needs --batch-size auto; the batch size is {} (from {})",
            configured.value, configured.source
        ));
    }
    Ok(chosen)
}

/// Why a clean does nothing with these settings: a custom `[state_store] backend` keeps its
/// state elsewhere (Airflow's own clean skips it too).
pub(crate) fn skipped(settings: &crate::config::Settings) -> Option<String> {
    (!settings.is_builtin_backend()).then(|| format!(
        "[state_store] backend is {} (from {}), not the metastore backend: skipping cleanup (not supported)",
        settings.backend.value, settings.backend.source
    ))
}

/// How a run sizes its batches, for scripts: `auto`, `rows` or `one_transaction`.
pub(crate) fn batching_name(batch_size: Option<u64>, batch_time: Option<Duration>) -> &'static str {
    match (batch_time, batch_size) {
        (Some(_), _) => "auto",
        (None, Some(0)) => "one_transaction",
        (None, _) => "rows",
    }
}

/// A run's batching in the words every report uses (the summary line, the dry run, `-v`,
/// doctor): `10000 rows`, `0 (one transaction)`, or `auto (…)` with auto's pacing, the last
/// batch's size once one ran, and where a configured 0 that runs as auto came from.
pub(crate) fn batching_text(
    batch_size: Option<u64>,
    batch_time: Option<Duration>,
    auto_from: Option<&str>,
) -> String {
    match (batch_time, batch_size) {
        (Some(time), last) => {
            let last = last.map(|n| format!(", last {n} rows")).unwrap_or_default();
            let from = auto_from
                .map(|from| format!("; {from} runs as auto, --batch-size 0 for one transaction"))
                .unwrap_or_default();
            format!(
                "auto ({} ms a batch and a pause while other sessions write, full speed while none do{last}{from})",
                time.as_millis()
            )
        }
        (None, Some(0)) => "0 (one transaction)".to_string(),
        (None, Some(rows)) => format!("{rows} rows"),
        (None, None) => "auto".to_string(),
    }
}

/// A run's batching named in a few words, for the summary lines: `auto`, `auto (last 1680
/// rows)` once a batch ran, `0 (one transaction)`, `10000 rows`. [`batching_text`] explains it.
pub(crate) fn batching_brief(batch_size: Option<u64>, batch_time: Option<Duration>) -> String {
    match (batch_time, batch_size) {
        (Some(_), Some(last)) => format!("auto (last {last} rows)"),
        (Some(_), None) => "auto".to_string(),
        (None, _) => batching_text(batch_size, None, None),
    }
}

/// `--batch-size auto`'s time per batch in whole milliseconds, for the JSON documents.
pub(crate) fn batch_time_ms(batch_time: Option<Duration>) -> Option<u64> {
    batch_time.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
}

/// How many batches a run would take now, for `clean --dry-run --verbose`: the fewest it can
/// take, which is the count on SQLite and MySQL; on PostgreSQL a batch is the expired rows among
/// the next `batch_size` rows, so sparse expired rows take more (docs/commands/clean.md). A run
/// that stops at `--max-rows` skips the orphan sweep.
pub(crate) fn batches_needed(
    task_rows: u64,
    asset_rows: u64,
    batch_size: u64,
    batch_time: Option<Duration>,
    max_rows: Option<u64>,
) -> String {
    let stops = max_rows.is_some_and(|max| max < task_rows);
    let (task_rows, asset_rows) = if stops { (max_rows.unwrap_or(0), 0) } else { (task_rows, asset_rows) };
    let text = if let Some(time) = batch_time {
        format!(
            "batches sized by their pace ({AUTO_MIN_ROWS} to {AUTO_MAX_ROWS} rows) for {task_rows} expired task row(s) and {asset_rows} orphaned asset row(s): about {} ms each with a pause {AUTO_PAUSE_RATIO} times as long while other sessions write, full speed while none do (batch size auto)",
            time.as_millis()
        )
    } else if batch_size == 0 {
        format!(
            "one transaction for {task_rows} expired task row(s) and one for {asset_rows} orphaned asset row(s) (batch size 0)"
        )
    } else {
        format!(
            "at least {} batch(es) of at most {batch_size} expired task row(s) and {} of orphaned asset rows",
            task_rows.div_ceil(batch_size),
            asset_rows.div_ceil(batch_size)
        )
    };
    if stops { format!("{text}, then stop at --max-rows") } else { text }
}
