//! What `stats` sums up: rows, value bytes and expiry per dag (or task) and per asset, the
//! largest values, and the tables' size on disk.

use std::sync::LazyLock;

use serde::Serialize;

use super::Store;
use super::dialect::{all, count};
use super::query::{Param, Query};
use super::store::task_scope;
use crate::error::Result;
use crate::model::StoredTime;
use crate::model::{asset_scope_label, task_scope_label};
use crate::time::Timestamp;

/// Task rows of one dag (or one task of a dag), summed; serialized as `stats -o json` prints
/// it, `task_id` only when grouped by task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct TaskGroup {
    pub dag_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    pub rows: u64,
    pub value_bytes: u64,
    pub expired: u64,
    #[serde(rename = "expiring_7d")]
    pub expiring_soon: u64,
    pub never_expiring: u64,
    pub oldest_update: Option<StoredTime>,
    pub newest_update: Option<StoredTime>,
}

/// Asset rows of one asset, summed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct AssetGroup {
    pub asset_id: i64,
    pub asset_name: Option<String>,
    pub rows: u64,
    pub value_bytes: u64,
    pub oldest_update: Option<StoredTime>,
    pub newest_update: Option<StoredTime>,
}

/// One of the largest stored values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LargeValue {
    /// `task dag/run/task[index]` or `asset <name>`.
    pub scope: String,
    pub key: String,
    pub bytes: u64,
}

/// How many calendar days (UTC) the expiry spread covers, today first.
pub(crate) const EXPIRY_DAYS: usize = 30;

/// When task rows expire, from `now`: already expired, on each of the [`EXPIRY_DAYS`] UTC
/// calendar days starting with today (today's from `now` to midnight), later, and never.
/// Asset rows have no expiry and are not counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExpirySpread {
    pub now: Timestamp,
    pub expired: u64,
    /// Midnight UTC starting each day, and the rows expiring that day.
    pub days: Vec<(Timestamp, u64)>,
    pub later: u64,
    pub never: u64,
}

/// Each task row's bucket, its `expires_at` compared once against 31 bound instants: `now`,
/// then the midnights ending each of the 30 days. -2 is never (NULL), -1 expired (`< now`,
/// as clean compares), 0 to 29 the days, 30 later. The same comparison as clean's, so on
/// SQLite text is compared as text, exactly as Airflow's clean would see it.
static EXPIRY_BUCKET: LazyLock<String> = LazyLock::new(|| {
    let days: String = (0..EXPIRY_DAYS).map(|day| format!("WHEN expires_at < ? THEN {day} ")).collect();
    format!(
        "SELECT b, count(*) FROM (SELECT CASE WHEN expires_at IS NULL THEN -2 WHEN expires_at < ? THEN -1 \
         {days}ELSE {EXPIRY_DAYS} END AS b FROM task_state_store) buckets GROUP BY b"
    )
});

/// The sums after the group's columns: the expiry counts compare with `now` and `soon`.
const TASK_SUMS: &str = "count(*), coalesce(sum(OCTETS(value)), 0), \
     coalesce(sum(CASE WHEN expires_at < ? THEN 1 ELSE 0 END), 0), \
     coalesce(sum(CASE WHEN expires_at >= ? AND expires_at < ? THEN 1 ELSE 0 END), 0), \
     coalesce(sum(CASE WHEN expires_at IS NULL THEN 1 ELSE 0 END), 0), min(updated_at), max(updated_at) \
     FROM task_state_store";

impl Store {
    /// Task rows per dag (per task with `by_task`): rows, value bytes, expired before `now`,
    /// expiring before `soon`, never expiring, and the oldest and newest `updated_at`.
    pub(crate) fn task_groups(
        &mut self,
        now: Timestamp,
        soon: Timestamp,
        by_task: bool,
    ) -> Result<Vec<TaskGroup>> {
        let (select, group) = if by_task {
            ("SELECT dag_id, task_id, ", " GROUP BY dag_id, task_id ORDER BY BYTES(dag_id), BYTES(task_id)")
        } else {
            ("SELECT dag_id, NULL, ", " GROUP BY dag_id ORDER BY BYTES(dag_id)")
        };
        let query = Query::new(select).push(TASK_SUMS).push(group);
        all(&mut **self, "cannot read task_state_store", &query.bind(now).bind(now).bind(soon), |f| {
            Ok(TaskGroup {
                dag_id: f.text(),
                task_id: f.opt_text(),
                rows: f.count()?,
                value_bytes: f.count()?,
                expired: f.count()?,
                expiring_soon: f.count()?,
                never_expiring: f.count()?,
                oldest_update: f.time(),
                newest_update: f.time(),
            })
        })
    }

    /// When the task rows expire, counted from `now` in UTC calendar days; one scan.
    pub(crate) fn expiry_spread(&mut self, now: Timestamp) -> Result<ExpirySpread> {
        let days: Vec<Timestamp> = (0..EXPIRY_DAYS as i64).map(|day| now.utc_midnight(day)).collect();
        let ends = (1..=EXPIRY_DAYS as i64).map(|day| now.utc_midnight(day));
        let query = ends.fold(Query::new(&EXPIRY_BUCKET).bind(now), Query::bind);
        let counts =
            all(&mut **self, "cannot read task_state_store", &query, |f| Ok((f.int()?, f.count()?)))?;
        let mut spread = ExpirySpread {
            now,
            expired: 0,
            days: days.into_iter().map(|day| (day, 0)).collect(),
            later: 0,
            never: 0,
        };
        for (bucket, rows) in counts {
            let slot = match bucket {
                -2 => &mut spread.never,
                -1 => &mut spread.expired,
                30 => &mut spread.later,
                day => match usize::try_from(day).ok().and_then(|day| spread.days.get_mut(day)) {
                    Some((_, n)) => n,
                    None => continue,
                },
            };
            *slot += rows;
        }
        Ok(spread)
    }

    pub(crate) fn asset_groups(&mut self) -> Result<Vec<AssetGroup>> {
        let query = Query::new(
            "SELECT s.asset_id, a.name, count(*), coalesce(sum(OCTETS(s.value)), 0), min(s.updated_at), \
             max(s.updated_at) FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id \
             GROUP BY s.asset_id, a.name ORDER BY s.asset_id",
        );
        all(&mut **self, "cannot read asset_state_store", &query, |f| {
            Ok(AssetGroup {
                asset_id: f.int()?,
                asset_name: f.opt_text(),
                rows: f.count()?,
                value_bytes: f.count()?,
                oldest_update: f.time(),
                newest_update: f.time(),
            })
        })
    }

    /// The `limit` largest values of either table, largest first.
    pub(crate) fn largest_values(&mut self, limit: u64) -> Result<Vec<LargeValue>> {
        let what = "cannot read the largest values";
        let tasks = Query::new(
            r#"SELECT dag_id, run_id, task_id, map_index, "key", OCTETS(value) AS n FROM task_state_store
               ORDER BY n DESC LIMIT ?"#,
        );
        let mut found = all(&mut **self, what, &tasks.bind(Param::Limit(Some(limit))), |f| {
            let scope = task_scope(f)?;
            Ok(LargeValue {
                scope: task_scope_label(&scope.dag_id, &scope.run_id, &scope.task_id, scope.map_index),
                key: f.text(),
                bytes: f.count()?,
            })
        })?;
        let assets = Query::new(
            r#"SELECT s.asset_id, a.name, s."key", OCTETS(s.value) AS n
               FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id ORDER BY n DESC LIMIT ?"#,
        );
        found.extend(all(&mut **self, what, &assets.bind(Param::Limit(Some(limit))), |f| {
            let (asset_id, name) = (f.int()?, f.opt_text());
            Ok(LargeValue {
                scope: asset_scope_label(asset_id, name.as_deref()),
                key: f.text(),
                bytes: f.count()?,
            })
        })?);
        found.sort_by(|a, b| {
            b.bytes.cmp(&a.bytes).then_with(|| a.scope.cmp(&b.scope)).then_with(|| a.key.cmp(&b.key))
        });
        found.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        Ok(found)
    }

    /// Bytes on disk of each state-store table with its indexes, as the database reports them.
    pub(crate) fn table_sizes(&mut self) -> Result<Vec<(String, u64)>> {
        let query = Query::new(self.dialect().table_size_query());
        let mut size =
            |table: &str| count(&mut **self, "cannot read the table sizes", &query.clone().bind(table));
        super::STATE_TABLES.iter().map(|table| Ok(((*table).to_string(), size(table)?))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{AssetWrite, TaskWrite, memory_sandbox};
    use crate::model::TaskScope;

    const HOUR: i64 = 3_600_000_000;

    #[test]
    fn the_expiry_bucket_compares_against_each_bound_in_turn() {
        assert_eq!(EXPIRY_BUCKET.matches('?').count(), EXPIRY_DAYS + 1, "now and the end of each day");
        for day in 0..EXPIRY_DAYS {
            assert!(EXPIRY_BUCKET.contains(&format!("WHEN expires_at < ? THEN {day} ")), "day {day}");
        }
        assert!(EXPIRY_BUCKET.contains(&format!("ELSE {EXPIRY_DAYS} END")));
    }

    #[test]
    fn expiry_is_spread_over_utc_calendar_days_from_now() {
        let mut sandbox = memory_sandbox().unwrap();
        let run = sandbox.add_dag_run("d", "r").unwrap();
        let asset = sandbox.add_asset("orders", "s3://orders", true).unwrap();
        let mut store = sandbox.into_store();
        let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
        let now = at("2026-12-02T15:00:00Z");
        let rows = [
            ("gone", Some(at("2026-12-02T14:59:59.999999Z"))),
            ("long_gone", Some(at("2020-01-01T00:00:00Z"))),
            ("now", Some(now)),
            ("tonight", Some(at("2026-12-02T23:59:59.999999Z"))),
            ("midnight", Some(at("2026-12-03T00:00:00Z"))),
            ("tomorrow", Some(at("2026-12-03T23:59:59.999999Z"))),
            ("last_day", Some(at("2026-12-31T23:59:59.999999Z"))),
            ("day_31", Some(at("2027-01-01T00:00:00Z"))),
            ("now_plus_30d", now.checked_add(30 * 24 * HOUR)),
            ("never", None),
        ];
        let scope = TaskScope { dag_id: "d".into(), run_id: "r".into(), task_id: "t".into(), map_index: -1 };
        for (key, expires_at) in rows {
            let write =
                TaskWrite { dag_run_id: run, scope: &scope, key, value: "1", updated_at: now, expires_at };
            store.upsert_task(&write).unwrap();
        }
        store.upsert_asset(&AssetWrite { asset_id: asset, key: "w", value: "1", updated_at: now }).unwrap();
        let spread = store.expiry_spread(now).unwrap();
        assert_eq!((spread.now, spread.expired, spread.later, spread.never), (now, 2, 2, 1));
        assert_eq!(spread.days.len(), EXPIRY_DAYS);
        let dates: Vec<String> = spread.days.iter().map(|(day, _)| day.utc_date()).collect();
        assert_eq!((dates[0].as_str(), dates[29].as_str()), ("2026-12-02", "2026-12-31"));
        let counted: Vec<(usize, u64)> =
            spread.days.iter().enumerate().filter(|(_, (_, n))| *n > 0).map(|(i, (_, n))| (i, *n)).collect();
        assert_eq!(counted, [(0, 2), (1, 2), (29, 1)], "now and tonight today, midnight on the next day");
        assert_eq!(spread.days[1].0, at("2026-12-03T00:00:00Z"));
    }

    #[test]
    fn groups_sum_rows_bytes_and_expiry() {
        let mut sandbox = memory_sandbox().unwrap();
        let run = sandbox.add_dag_run("d", "r").unwrap();
        sandbox.add_dag_run("e", "r").unwrap();
        let asset = sandbox.add_asset("orders", "s3://orders", true).unwrap();
        let mut store = sandbox.into_store();
        let now = Timestamp::now();
        let rows = [("t", "a", "\"é\"", Some(-HOUR)), ("t", "b", "12", Some(HOUR)), ("u", "c", "1", None)];
        for (task_id, key, value, expires) in rows {
            let scope =
                TaskScope { dag_id: "d".into(), run_id: "r".into(), task_id: task_id.into(), map_index: -1 };
            let expires_at = expires.and_then(|offset| now.checked_add(offset));
            store
                .upsert_task(&TaskWrite {
                    dag_run_id: run,
                    scope: &scope,
                    key,
                    value,
                    updated_at: now,
                    expires_at,
                })
                .unwrap();
        }
        store
            .upsert_asset(&AssetWrite { asset_id: asset, key: "w", value: "[1, 2]", updated_at: now })
            .unwrap();
        let soon = now.checked_add(2 * HOUR).unwrap();
        let dags = store.task_groups(now, soon, false).unwrap();
        assert_eq!(dags.len(), 1);
        let d = &dags[0];
        assert_eq!((d.dag_id.as_str(), d.task_id.as_deref(), d.rows), ("d", None, 3));
        assert_eq!(d.value_bytes, 4 + 2 + 1, "bytes as stored, UTF-8");
        assert_eq!((d.expired, d.expiring_soon, d.never_expiring), (1, 1, 1));
        let tasks = store.task_groups(now, soon, true).unwrap();
        let by_task: Vec<(Option<&str>, u64)> =
            tasks.iter().map(|g| (g.task_id.as_deref(), g.rows)).collect();
        assert_eq!(by_task, [(Some("t"), 2), (Some("u"), 1)]);
        let assets = store.asset_groups().unwrap();
        assert_eq!(
            (assets[0].asset_name.as_deref(), assets[0].rows, assets[0].value_bytes),
            (Some("orders"), 1, 6)
        );
        let largest = store.largest_values(2).unwrap();
        let sizes: Vec<(&str, u64)> = largest.iter().map(|v| (v.key.as_str(), v.bytes)).collect();
        assert_eq!(sizes, [("w", 6), ("a", 4)]);
        let tables: Vec<String> = store.table_sizes().unwrap().into_iter().map(|(t, _)| t).collect();
        assert_eq!(tables, ["task_state_store", "asset_state_store"]);
    }
}
