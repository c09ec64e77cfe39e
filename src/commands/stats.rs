//! `stats`: how big the state store is and what will happen to it — rows and value bytes per
//! dag (or task) and per asset, expired / expiring within 7 days / never-expiring counts, the
//! oldest and newest writes, the largest values, and each table's size as the database
//! reports it.

use super::Context;
use crate::cli::{GlobalArgs, StatsArgs, StatsBy};
use crate::db::{Access, AssetGroup, TaskGroup};
use crate::error::Result;
use crate::json::Json;
use crate::model::StoredTime;
use crate::output::{self, Rendered, Table, int, obj};
use crate::time::Timestamp;

/// "Expiring soon" means within this many microseconds (7 days).
const SOON: i64 = 7 * 24 * 3_600_000_000;

fn time_cell(t: Option<&StoredTime>) -> String {
    t.map(StoredTime::display).unwrap_or_default()
}

fn time_json(t: Option<&StoredTime>) -> Json {
    t.map_or(Json::Null, |t| Json::Str(t.display()))
}

pub(crate) fn run(global: &GlobalArgs, args: &StatsArgs) -> Result<()> {
    let ctx = Context::load(global, None)?;
    let mut store = ctx.open(Access::ReadOnly)?;
    let now = Timestamp::now();
    let soon = now.checked_add(SOON).unwrap_or(now);
    let by_task = args.by == StatsBy::Task;
    let tasks = store.task_groups(now, soon, by_task)?;
    let assets = store.asset_groups()?;
    let largest = store.largest_values(args.largest)?;
    let sizes = store.table_sizes()?;

    let total = |f: fn(&TaskGroup) -> u64| tasks.iter().map(f).sum::<u64>();
    let (rows, bytes, expired, soon_n, never) = (
        total(|g| g.rows),
        total(|g| g.value_bytes),
        total(|g| g.expired),
        total(|g| g.expiring_soon),
        total(|g| g.never_expiring),
    );
    let asset_rows: u64 = assets.iter().map(|a| a.rows).sum();
    let asset_bytes: u64 = assets.iter().map(|a| a.value_bytes).sum();
    output::note(&format!(
        "{rows} task key(s) ({bytes} value bytes): {expired} expired, {soon_n} expiring within 7 days, {never} never \
         expiring; {asset_rows} asset key(s) ({asset_bytes} value bytes)"
    ));

    let mut headers = vec!["dag_id"];
    if by_task {
        headers.push("task_id");
    }
    headers.extend([
        "rows",
        "value_bytes",
        "expired",
        "expiring_7d",
        "never",
        "oldest_update",
        "newest_update",
    ]);
    let task_rows = tasks
        .iter()
        .map(|g| {
            let mut row = vec![g.dag_id.clone()];
            if by_task {
                row.push(g.task_id.clone().unwrap_or_default());
            }
            row.extend([
                g.rows.to_string(),
                g.value_bytes.to_string(),
                g.expired.to_string(),
                g.expiring_soon.to_string(),
                g.never_expiring.to_string(),
                time_cell(g.oldest_update.as_ref()),
                time_cell(g.newest_update.as_ref()),
            ]);
            row
        })
        .collect();
    let asset_rows_table = assets.iter().map(asset_row).collect();
    let tables = vec![
        Table {
            title: Some(format!("Task keys by {}:", if by_task { "task" } else { "dag" })),
            headers,
            rows: task_rows,
        },
        Table {
            title: Some("Asset keys by asset:".to_string()),
            headers: vec!["asset_id", "asset", "rows", "value_bytes", "oldest_update", "newest_update"],
            rows: asset_rows_table,
        },
        Table {
            title: Some(format!("Largest values (at most {}):", args.largest)),
            headers: vec!["scope", "key", "bytes"],
            rows: largest.iter().map(|v| vec![v.scope.clone(), v.key.clone(), v.bytes.to_string()]).collect(),
        },
        Table {
            title: Some("Table sizes on disk:".to_string()),
            headers: vec!["table", "bytes"],
            rows: sizes.iter().map(|(t, n)| vec![t.clone(), n.to_string()]).collect(),
        },
    ];

    let doc = obj(vec![
        (
            "totals",
            obj(vec![
                ("task_rows", int(rows)),
                ("task_value_bytes", int(bytes)),
                ("expired", int(expired)),
                ("expiring_7d", int(soon_n)),
                ("never_expiring", int(never)),
                ("asset_rows", int(asset_rows)),
                ("asset_value_bytes", int(asset_bytes)),
            ]),
        ),
        ("tasks", Json::Array(tasks.iter().map(|g| task_json(g, by_task)).collect())),
        ("assets", Json::Array(assets.iter().map(asset_json).collect())),
        (
            "largest_values",
            Json::Array(
                largest
                    .iter()
                    .map(|v| {
                        obj(vec![
                            ("scope", Json::Str(v.scope.clone())),
                            ("key", Json::Str(v.key.clone())),
                            ("bytes", int(v.bytes)),
                        ])
                    })
                    .collect(),
            ),
        ),
        ("table_sizes", Json::Object(sizes.iter().map(|(t, n)| (t.clone(), int(*n))).collect())),
    ]);
    output::emit(ctx.format, &Rendered { doc, tables, plain: Some(format!("{rows} {asset_rows}")) })?;
    Ok(())
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

fn task_json(g: &TaskGroup, by_task: bool) -> Json {
    let mut fields = vec![("dag_id", Json::Str(g.dag_id.clone()))];
    if by_task {
        fields.push(("task_id", g.task_id.clone().map_or(Json::Null, Json::Str)));
    }
    fields.extend([
        ("rows", int(g.rows)),
        ("value_bytes", int(g.value_bytes)),
        ("expired", int(g.expired)),
        ("expiring_7d", int(g.expiring_soon)),
        ("never_expiring", int(g.never_expiring)),
        ("oldest_update", time_json(g.oldest_update.as_ref())),
        ("newest_update", time_json(g.newest_update.as_ref())),
    ]);
    obj(fields)
}

fn asset_json(a: &AssetGroup) -> Json {
    obj(vec![
        ("asset_id", int(a.asset_id)),
        ("asset_name", a.asset_name.clone().map_or(Json::Null, Json::Str)),
        ("rows", int(a.rows)),
        ("value_bytes", int(a.value_bytes)),
        ("oldest_update", time_json(a.oldest_update.as_ref())),
        ("newest_update", time_json(a.newest_update.as_ref())),
    ])
}
