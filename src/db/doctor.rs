//! `doctor`'s searches for rows Airflow's schema should not hold: read-only, each giving a
//! count and the first rows found in primary-key order.

use super::Store;
use super::dialect::{Connection, Finding, FoundRow, Place, all, count};
use super::query::{Decoded, Fields, Param, Query};
use super::store::{ASSET_ROWS, asset_entry};
use crate::error::Result;
use crate::model::{AssetEntry, TaskScope};
use crate::text::quote;

/// A task row's place and key from the next five columns (`t.dag_id … t."key"`). A row whose
/// map_index is not an integer is sampled all the same: doctor reports damage, it does not
/// stop at it.
pub(super) fn task_row(f: &mut Fields) -> Decoded<(Place, String)> {
    let (dag_id, run_id, task_id) = (f.text(), f.text(), f.text());
    let place = match f.int_or_text() {
        Ok(map_index) => Place::Task(TaskScope { dag_id, run_id, task_id, map_index }),
        Err(map_index) => Place::DamagedTask { dag_id, run_id, task_id, map_index },
    };
    Ok((place, f.text()))
}

/// The count and the sample of one check: `[columns, from, order]` are what the sample
/// selects, the check's `FROM … WHERE …` (with `params`), and its primary-key order.
pub(super) fn find<C: Connection + ?Sized>(
    conn: &mut C,
    what: &str,
    check: [&'static str; 3],
    params: &[Param<'_>],
    sample: u64,
    map: impl Fn(&mut Fields) -> Decoded<FoundRow>,
) -> Result<Finding> {
    let [columns, from, order] = check;
    let counted = params.iter().fold(Query::new("SELECT count(*) ").push(from), |q, p| q.bind(*p));
    let sampled =
        params.iter().fold(Query::new("SELECT ").push(columns).push(" ").push(from), |q, p| q.bind(*p));
    let sampled = sampled.push(" ORDER BY ").push(order).and(" LIMIT ?", Param::Limit(Some(sample)));
    Ok(Finding { count: count(conn, what, &counted)?, sample: all(conn, what, &sampled, map)? })
}

impl Store {
    /// Task rows whose `dag_id` or `run_id` differ from those of the dag run their
    /// `dag_run_id` points at.
    pub(crate) fn mismatched_dag_runs(&mut self, sample: u64) -> Result<Finding> {
        let check = [
            r#"t.dag_id, t.run_id, t.task_id, t.map_index, t."key", t.dag_run_id, d.dag_id, d.run_id"#,
            "FROM task_state_store t JOIN dag_run d ON d.id = t.dag_run_id WHERE t.dag_id <> d.dag_id OR t.run_id <> d.run_id",
            "t.id",
        ];
        find(&mut **self, "cannot compare task rows with their dag runs", check, &[], sample, |f| {
            let (place, key) = task_row(f)?;
            let detail =
                format!("dag_run {} is dag_id={} run_id={}", f.text(), quote(&f.text()), quote(&f.text()));
            Ok(FoundRow { place, key, detail })
        })
    }

    /// Task rows whose dag run no longer exists (only possible with foreign keys off).
    pub(crate) fn task_rows_without_dag_run(&mut self, sample: u64) -> Result<Finding> {
        let check = [
            r#"t.dag_id, t.run_id, t.task_id, t.map_index, t."key", t.dag_run_id"#,
            "FROM task_state_store t WHERE NOT EXISTS (SELECT 1 FROM dag_run d WHERE d.id = t.dag_run_id)",
            "t.id",
        ];
        find(&mut **self, "cannot look for task rows without a dag run", check, &[], sample, |f| {
            let (place, key) = task_row(f)?;
            Ok(FoundRow { place, key, detail: format!("dag_run_id {} does not exist", f.text()) })
        })
    }

    /// Task rows whose task instance (dag_id, run_id, task_id, map_index) has no
    /// `task_instance` row, among the rows whose dag run exists and agrees with them (the
    /// others are [`Self::task_rows_without_dag_run`]'s and [`Self::mismatched_dag_runs`]'s).
    /// One anti-join (`NOT EXISTS`) that task_instance's unique index (dag_id, task_id, run_id,
    /// map_index) answers for each row. Text is compared with the columns' own equality, the question
    /// [`Self::task_instance_exists`] and Airflow's REST API ask: on MySQL, whose `_bin`
    /// collations ignore trailing spaces, `load ` has the instance `load`, as Airflow finds it.
    /// (A byte comparison beside the index probe is no way out there: MariaDB 10.11 answered it
    /// wrongly in both directions, passing a padded key and failing an exact one.)
    /// The sample says how many instances the task has in the run, which tells a missing map
    /// index from a task the run never had.
    pub(crate) fn task_rows_without_task_instance(&mut self, sample: u64) -> Result<Finding> {
        let check = [
            r#"t.dag_id, t.run_id, t.task_id, t.map_index, t."key", (SELECT count(*) FROM task_instance o
               WHERE o.dag_id = t.dag_id AND o.task_id = t.task_id AND o.run_id = t.run_id)"#,
            "FROM task_state_store t JOIN dag_run d ON d.id = t.dag_run_id AND d.dag_id = t.dag_id \
             AND d.run_id = t.run_id WHERE NOT EXISTS (SELECT 1 FROM task_instance i \
             WHERE i.dag_id = t.dag_id AND i.task_id = t.task_id AND i.run_id = t.run_id \
             AND i.map_index = t.map_index)",
            "t.id",
        ];
        let what = "cannot look for task rows without a task instance";
        find(&mut **self, what, check, &[], sample, |f| {
            let (place, key) = task_row(f)?;
            let detail = match f.count()? {
                0 => "no task instance of this task in the run".to_string(),
                n => format!(
                    "no task instance with this map index; the task has {n} other instance(s) in the run"
                ),
            };
            Ok(FoundRow { place, key, detail })
        })
    }

    /// Asset rows whose asset no longer exists (only possible with foreign keys off).
    pub(crate) fn asset_rows_without_asset(&mut self, sample: u64) -> Result<Finding> {
        let check = [
            r#"s.asset_id, s."key""#,
            "FROM asset_state_store s WHERE NOT EXISTS (SELECT 1 FROM asset a WHERE a.id = s.asset_id)",
            r#"s.asset_id, s."key""#,
        ];
        find(&mut **self, "cannot look for asset rows without an asset", check, &[], sample, |f| {
            let asset_id = f.int()?;
            Ok(FoundRow {
                place: Place::Asset { asset_id, asset_name: None },
                key: f.text(),
                detail: format!("asset id {asset_id} does not exist"),
            })
        })
    }

    /// Keys of either table longer than `max_chars` characters (not bytes).
    pub(crate) fn long_keys(&mut self, max_chars: u64, sample: u64) -> Result<Finding> {
        let measures = [TASK_KEY_CHARS, ASSET_KEY_CHARS];
        self.over_bound("cannot measure the keys", measures, max_chars, sample, "characters")
    }

    /// Values of either table longer than `max_bytes` bytes as stored, measured as `set`
    /// measures a value against `max_value_storage_bytes`.
    pub(crate) fn large_values(&mut self, max_bytes: u64, sample: u64) -> Result<Finding> {
        let measures = [TASK_VALUE_OCTETS, ASSET_VALUE_OCTETS];
        self.over_bound("cannot measure the values", measures, max_bytes, sample, "bytes")
    }

    /// Rows of both tables whose measure exceeds `bound`, task rows first; each measure is the
    /// selected columns, then the `FROM … WHERE <measure> > ?` of its table.
    fn over_bound(
        &mut self,
        what: &str,
        [task, asset]: [[&'static str; 3]; 2],
        bound: u64,
        sample: u64,
        unit: &str,
    ) -> Result<Finding> {
        let bound = [Param::from(bound)];
        let tasks = find(&mut **self, what, task, &bound, sample, |f| {
            let (place, key) = task_row(f)?;
            Ok(FoundRow { place, key, detail: format!("{} {unit}", f.int()?) })
        })?;
        let assets = find(&mut **self, what, asset, &bound, sample, |f| {
            let place = Place::Asset { asset_id: f.int()?, asset_name: f.opt_text() };
            Ok(FoundRow { place, key: f.text(), detail: format!("{} {unit}", f.int()?) })
        })?;
        Ok(tasks.and(assets, sample))
    }

    /// Up to `limit` task rows with `id > after_id` in primary-key order: their ids, places,
    /// keys and values, so that the JSON check reads every value a page at a time, rows with a
    /// damaged map_index included.
    pub(crate) fn task_values_after(
        &mut self,
        after_id: i64,
        limit: u64,
    ) -> Result<Vec<(i64, Place, String, String)>> {
        let query = Query::new(
            r#"SELECT dag_id, run_id, task_id, map_index, "key", value, id FROM task_state_store"#,
        )
        // At the start (`i64::MIN`) the row with id -2^63 is read too.
        .and(if after_id == i64::MIN { " WHERE id >= ?" } else { " WHERE id > ?" }, after_id)
        .and(" ORDER BY id LIMIT ?", Param::Limit(Some(limit)));
        all(&mut **self, "cannot read task_state_store", &query, |f| {
            let (place, key) = task_row(f)?;
            let value = f.text();
            Ok((f.int()?, place, key, value))
        })
    }

    /// Up to `limit` asset rows after `(asset_id, key)` in primary-key order (from the first
    /// when `None`), so a check can read every value a page at a time. The key comparison and
    /// the ORDER BY both use the column's own collation, so the pages follow one order.
    pub(crate) fn asset_rows_after(
        &mut self,
        after: Option<(i64, &str)>,
        limit: u64,
    ) -> Result<Vec<AssetEntry>> {
        let mut query = Query::new("SELECT ").push(ASSET_ROWS);
        if let Some((asset_id, key)) = after {
            query = query
                .and(" WHERE s.asset_id > ?", asset_id)
                .and(" OR (s.asset_id = ?", asset_id)
                .and(r#" AND s."key" > ?)"#, key);
        }
        let query = query.and(r#" ORDER BY s.asset_id, s."key" LIMIT ?"#, Param::Limit(Some(limit)));
        all(&mut **self, "cannot read asset_state_store", &query, asset_entry)
    }
}

const TASK_KEY_CHARS: [&str; 3] = [
    r#"t.dag_id, t.run_id, t.task_id, t.map_index, t."key", CHARS(t."key")"#,
    r#"FROM task_state_store t WHERE CHARS(t."key") > ?"#,
    "t.id",
];
const ASSET_KEY_CHARS: [&str; 3] = [
    r#"t.asset_id, a.name, t."key", CHARS(t."key")"#,
    r#"FROM asset_state_store t LEFT JOIN asset a ON a.id = t.asset_id WHERE CHARS(t."key") > ?"#,
    r#"t.asset_id, t."key""#,
];
const TASK_VALUE_OCTETS: [&str; 3] = [
    r#"t.dag_id, t.run_id, t.task_id, t.map_index, t."key", OCTETS(t.value)"#,
    "FROM task_state_store t WHERE OCTETS(t.value) > ?",
    "t.id",
];
const ASSET_VALUE_OCTETS: [&str; 3] = [
    r#"t.asset_id, a.name, t."key", OCTETS(t.value)"#,
    "FROM asset_state_store t LEFT JOIN asset a ON a.id = t.asset_id WHERE OCTETS(t.value) > ?",
    r#"t.asset_id, t."key""#,
];
