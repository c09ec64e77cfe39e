//! `stats`: how big the state store is and what will happen to it — rows and value bytes per
//! dag (or task) and per asset, expired / expiring within 7 days / never-expiring counts, the
//! oldest and newest writes, how expiry is spread over the next 30 UTC calendar days (a bar
//! chart at the terminal), the largest values, and each table's size as the database reports
//! it.

use super::Context;
use crate::cli::{GlobalArgs, StatsArgs, StatsBy};
use crate::db::{Access, AssetGroup, EXPIRY_DAYS, ExpirySpread, TaskGroup};
use crate::error::Result;
use crate::model::StoredTime;
use crate::ops;
use crate::output::{self, Rendered, Table};

/// The longest bar of the expiry chart, in characters: with the date, the count and the
/// separators a line stays well within 80 columns.
const BAR_WIDTH: u64 = 40;

fn time_cell(t: Option<&StoredTime>) -> String {
    t.map(StoredTime::display).unwrap_or_default()
}

pub(crate) fn run(global: &GlobalArgs, args: &StatsArgs) -> Result<()> {
    super::refuse_api(global, "stats")?;
    let ctx = Context::load(global, None)?;
    let mut store = ctx.open(Access::ReadOnly)?;
    let by_task = args.by == StatsBy::Task;
    let stats = ops::stats::read(&mut store, by_task, args.largest)?;
    let t = &stats.totals;
    output::status(&format!(
        "{} task key(s) ({} value bytes): {} expired, {} expiring within 7 days, {} never expiring; {} \
         asset key(s) ({} value bytes)",
        t.task_rows,
        t.task_value_bytes,
        t.expired,
        t.expiring_7d,
        t.never_expiring,
        t.asset_rows,
        t.asset_value_bytes
    ));
    let tables = vec![
        task_table(&stats.tasks, by_task),
        expiry_table(&stats.expiry),
        Table {
            title: Some("Asset keys by asset:".to_string()),
            headers: vec!["asset_id", "asset", "rows", "value_bytes", "oldest_update", "newest_update"],
            rows: stats.assets.iter().map(asset_row).collect(),
        },
        Table {
            title: Some(format!("Largest values (at most {}):", args.largest)),
            headers: vec!["scope", "key", "bytes"],
            rows: stats
                .largest_values
                .iter()
                .map(|v| vec![v.scope.clone(), v.key.clone(), v.bytes.to_string()])
                .collect(),
        },
        Table {
            title: Some("Table sizes on disk:".to_string()),
            headers: vec!["table", "bytes"],
            rows: stats.table_sizes.iter().map(|(t, n)| vec![t.clone(), n.to_string()]).collect(),
        },
    ];
    let plain = format!("{} {}\n{}", t.task_rows, t.asset_rows, expiry_plain(&stats.expiry));
    output::emit(ctx.format, &Rendered { doc: &stats, tables, plain: Some(plain) })?;
    Ok(())
}

/// Task keys by dag, or by task with `by_task`.
fn task_table(tasks: &[TaskGroup], by_task: bool) -> Table {
    let columns =
        ["rows", "value_bytes", "expired", "expiring_7d", "never", "oldest_update", "newest_update"];
    let headers = ["dag_id"].into_iter().chain(by_task.then_some("task_id")).chain(columns).collect();
    let rows = tasks
        .iter()
        .map(|g| {
            let task_id = by_task.then(|| g.task_id.clone().unwrap_or_default());
            let counts =
                [g.rows, g.value_bytes, g.expired, g.expiring_soon, g.never_expiring].map(|n| n.to_string());
            let times = [&g.oldest_update, &g.newest_update].map(|t| time_cell(t.as_ref()));
            [g.dag_id.clone()].into_iter().chain(task_id).chain(counts).chain(times).collect()
        })
        .collect();
    Table { title: Some(format!("Task keys by {}:", if by_task { "task" } else { "dag" })), headers, rows }
}

/// The expiry spread at the terminal: the rows already expired, a line per day that has rows
/// with its bar scaled to the largest day, then the rows expiring later and never. The bar
/// follows the count in the `rows` cell, the counts padded to one width so that the bars start
/// in one column: a column of its own would have no name, and an empty cell on the rows that
/// have no bar (expired, later, never), each line ending in a dangling `|`.
fn expiry_table(spread: &ExpirySpread) -> Table {
    let largest = spread.days.iter().map(|(_, n)| *n).max().unwrap_or(0);
    let counts =
        [spread.expired, spread.later, spread.never].into_iter().chain(spread.days.iter().map(|(_, n)| *n));
    let width = counts.map(|n| n.to_string().len()).max().unwrap_or(0).max("rows".len());
    let cell = |n: u64, bar: String| {
        if bar.is_empty() { n.to_string() } else { format!("{n:<width$} {bar}") }
    };
    let line = |label: &str, n: u64| vec![label.to_string(), n.to_string()];
    let mut rows = vec![line("expired", spread.expired)];
    rows.extend(
        spread
            .days
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(day, n)| vec![day.utc_date(), cell(*n, bar(*n, largest))]),
    );
    rows.push(line("later", spread.later));
    rows.push(line("never", spread.never));
    Table {
        title: Some(format!(
            "Task keys by day of expiry (UTC, today and the next {} days):",
            EXPIRY_DAYS - 1
        )),
        headers: vec!["expires", "rows"],
        rows,
    }
}

/// `n` as a bar of `█`, [`BAR_WIDTH`] long for `largest`; any row at all shows as one.
fn bar(n: u64, largest: u64) -> String {
    if n == 0 || largest == 0 {
        return String::new();
    }
    let width = (u128::from(n) * u128::from(BAR_WIDTH)).div_ceil(u128::from(largest));
    "█".repeat(usize::try_from(width).unwrap_or(0))
}

/// `-o plain`'s lines after the counts: `expired N`, `YYYY-MM-DD N` for each day, `later N`,
/// `never N`.
fn expiry_plain(spread: &ExpirySpread) -> String {
    let mut lines = vec![format!("expired {}", spread.expired)];
    lines.extend(spread.days.iter().map(|(day, n)| format!("{} {n}", day.utc_date())));
    lines.push(format!("later {}", spread.later));
    lines.push(format!("never {}", spread.never));
    lines.join("\n")
}

fn asset_row(a: &AssetGroup) -> Vec<String> {
    vec![
        a.asset_id.to_string(),
        a.asset_name.clone().unwrap_or_else(|| "(deleted)".to_string()),
        a.rows.to_string(),
        a.value_bytes.to_string(),
        time_cell(a.oldest_update.as_ref()),
        time_cell(a.newest_update.as_ref()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;

    #[test]
    fn bars_scale_to_the_largest_day_and_show_any_row() {
        assert_eq!(bar(0, 10), "");
        assert_eq!(bar(10, 10).chars().count(), 40);
        assert_eq!(bar(5, 10).chars().count(), 20);
        assert_eq!(bar(1, 1_000_000).chars().count(), 1, "one row is still seen");
        assert_eq!(bar(u64::MAX, u64::MAX).chars().count(), 40, "no overflow");
    }

    #[test]
    fn the_chart_lists_days_with_rows_and_fits_80_columns() {
        let now = Timestamp::parse_rfc3339("2026-12-02T15:00:00Z").unwrap();
        let mut days: Vec<(Timestamp, u64)> = (0..30).map(|d| (now.utc_midnight(d), 0)).collect();
        days[0].1 = 3;
        days[29].1 = 123_456_789;
        let spread = ExpirySpread { now, expired: 4, days, later: 5, never: 6 };
        let table = expiry_table(&spread);
        assert_eq!(
            table.title.as_deref(),
            Some("Task keys by day of expiry (UTC, today and the next 29 days):")
        );
        // Two named columns, no empty one: the bar follows the count, the counts padded to one
        // width so that the bars start in one column.
        assert_eq!(table.headers, ["expires", "rows"]);
        assert!(table.rows.iter().all(|r| r.len() == 2));
        let cells: Vec<(&str, &str, usize)> = table
            .rows
            .iter()
            .map(|r| {
                let count = r[1].split(' ').next().unwrap_or_default();
                (r[0].as_str(), count, r[1].chars().filter(|&c| c == '█').count())
            })
            .collect();
        assert_eq!(table.rows[1][1], format!("3{} █", " ".repeat(8)));
        assert_eq!(
            cells,
            [
                ("expired", "4", 0),
                ("2026-12-02", "3", 1),
                ("2026-12-31", "123456789", 40),
                ("later", "5", 0),
                ("never", "6", 0)
            ]
        );
        let widest = 10 + 3 + 9 + 1 + 40;
        assert!(widest <= 80);
        let plain = expiry_plain(&spread);
        let lines: Vec<&str> = plain.lines().collect();
        assert_eq!(lines.len(), 33);
        assert_eq!((lines[0], lines[1], lines[30]), ("expired 4", "2026-12-02 3", "2026-12-31 123456789"));
        assert_eq!((lines[31], lines[32]), ("later 5", "never 6"));
    }
}
