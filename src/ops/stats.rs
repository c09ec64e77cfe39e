//! `stats`: what the store holds, read in one go: task keys by dag (or task) with their
//! expiry, the spread of expiry over the next days, asset keys by asset, the largest values,
//! each table's size, and the totals of the groups.

use serde::{Serialize, Serializer};

use crate::db::{AssetGroup, ExpirySpread, LargeValue, Store, TaskGroup};
use crate::error::Result;
use crate::time::Timestamp;

/// "Expiring soon" means within this many microseconds (7 days).
const SOON: i64 = 7 * 24 * 3_600_000_000;

/// What `stats -o json` prints (docs/commands/stats.md).
#[derive(Serialize)]
pub(crate) struct Stats {
    pub totals: Totals,
    pub tasks: Vec<TaskGroup>,
    #[serde(serialize_with = "expiry")]
    pub expiry: ExpirySpread,
    pub assets: Vec<AssetGroup>,
    pub largest_values: Vec<LargeValue>,
    /// An object: the table's name, its bytes.
    #[serde(serialize_with = "as_object")]
    pub table_sizes: Vec<(String, u64)>,
}

/// The sums over the groups, as `stats -o json` prints them.
#[derive(Serialize)]
pub(crate) struct Totals {
    pub task_rows: u64,
    pub task_value_bytes: u64,
    pub expired: u64,
    pub expiring_7d: u64,
    pub never_expiring: u64,
    pub asset_rows: u64,
    pub asset_value_bytes: u64,
}

/// Reads the statistics as of now: task keys grouped by task with `by_task` (by dag without),
/// and at most `largest` of the largest values.
pub(crate) fn read(store: &mut Store, by_task: bool, largest: u64) -> Result<Stats> {
    let now = Timestamp::now();
    let soon = now.checked_add(SOON).unwrap_or(now);
    let tasks = store.task_groups(now, soon, by_task)?;
    let expiry = store.expiry_spread(now)?;
    let assets = store.asset_groups()?;
    let largest_values = store.largest_values(largest)?;
    let table_sizes = store.table_sizes()?;
    let total = |f: fn(&TaskGroup) -> u64| tasks.iter().map(f).sum::<u64>();
    let totals = Totals {
        task_rows: total(|g| g.rows),
        task_value_bytes: total(|g| g.value_bytes),
        expired: total(|g| g.expired),
        expiring_7d: total(|g| g.expiring_soon),
        never_expiring: total(|g| g.never_expiring),
        asset_rows: assets.iter().map(|a| a.rows).sum(),
        asset_value_bytes: assets.iter().map(|a| a.value_bytes).sum(),
    };
    Ok(Stats { totals, tasks, expiry, assets, largest_values, table_sizes })
}

/// When task rows expire (asset rows never do): counted against `now`, the day buckets are
/// UTC calendar days, today's from `now` to midnight; always [`crate::db::EXPIRY_DAYS`] of
/// them.
#[derive(Serialize)]
struct ExpiryDoc {
    now: String,
    expired: u64,
    days: Vec<ExpiryDay>,
    later: u64,
    never: u64,
}

#[derive(Serialize)]
struct ExpiryDay {
    date: String,
    rows: u64,
}

fn expiry<S: Serializer>(spread: &ExpirySpread, serializer: S) -> std::result::Result<S::Ok, S::Error> {
    let days = spread.days.iter().map(|(day, rows)| ExpiryDay { date: day.utc_date(), rows: *rows });
    let (now, expired, later, never) = (spread.now.to_rfc3339(), spread.expired, spread.later, spread.never);
    ExpiryDoc { now, expired, days: days.collect(), later, never }.serialize(serializer)
}

fn as_object<S: Serializer>(pairs: &[(String, u64)], serializer: S) -> std::result::Result<S::Ok, S::Error> {
    serializer.collect_map(pairs.iter().map(|(name, n)| (name, n)))
}
