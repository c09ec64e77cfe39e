//! What `stats` sums up: rows, value bytes and expiry per dag (or task) and per asset, the
//! largest values, and the tables' size on disk.

use super::dialect::all;
use super::query::{Param, Query};
use super::store::task_scope;
use super::{Store, asset_scope_label, task_scope_label};
use crate::error::Result;
use crate::model::StoredTime;
use crate::time::Timestamp;

/// Task rows of one dag (or one task of a dag), summed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskGroup {
    pub dag_id: String,
    pub task_id: Option<String>,
    pub rows: u64,
    pub value_bytes: u64,
    pub expired: u64,
    pub expiring_soon: u64,
    pub never_expiring: u64,
    pub oldest_update: Option<StoredTime>,
    pub newest_update: Option<StoredTime>,
}

/// Asset rows of one asset, summed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AssetGroup {
    pub asset_id: i64,
    pub asset_name: Option<String>,
    pub rows: u64,
    pub value_bytes: u64,
    pub oldest_update: Option<StoredTime>,
    pub newest_update: Option<StoredTime>,
}

/// One of the largest stored values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LargeValue {
    /// `task dag/run/task[index]` or `asset <name>`.
    pub scope: String,
    pub key: String,
    pub bytes: u64,
}

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
        let query = if by_task {
            Query::new("SELECT dag_id, task_id, ")
                .push(TASK_SUMS)
                .push(" GROUP BY dag_id, task_id ORDER BY BYTES(dag_id), BYTES(task_id)")
        } else {
            Query::new("SELECT dag_id, NULL, ")
                .push(TASK_SUMS)
                .push(" GROUP BY dag_id ORDER BY BYTES(dag_id)")
        };
        all(self.connection(), "cannot read task_state_store", &query.bind(now).bind(now).bind(soon), |f| {
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

    pub(crate) fn asset_groups(&mut self) -> Result<Vec<AssetGroup>> {
        let query = Query::new(
            "SELECT s.asset_id, a.name, count(*), coalesce(sum(OCTETS(s.value)), 0), min(s.updated_at), \
             max(s.updated_at) FROM asset_state_store s LEFT JOIN asset a ON a.id = s.asset_id \
             GROUP BY s.asset_id, a.name ORDER BY s.asset_id",
        );
        all(self.connection(), "cannot read asset_state_store", &query, |f| {
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
        let mut found = all(self.connection(), what, &tasks.bind(Param::Limit(Some(limit))), |f| {
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
        found.extend(all(self.connection(), what, &assets.bind(Param::Limit(Some(limit))), |f| {
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
        super::dialect::table_sizes(self.connection())
    }
}
