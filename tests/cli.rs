//! The contract of the `state-store` binary, driven as a user drives it: every command, output
//! format and exit code against a real SQLite metastore with the Airflow 3.3.2 schema.

mod support;

use support::Bench;

const DAG: &str = "incremental_orders";
const RUN: &str = "scheduled__2026-11-28T00:00:00+00:00";

fn task<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--dag-id", DAG, "--run-id", RUN, "--task-id", "load"];
    args.extend_from_slice(extra);
    args
}

fn with_run() -> Bench {
    let bench = Bench::new();
    bench.add_dag_run(DAG, RUN);
    bench
}

fn cmd<'a>(head: &[&'a str], tail: &[&'a str]) -> Vec<&'a str> {
    let mut v = head.to_vec();
    v.extend_from_slice(tail);
    v
}

fn stored(bench: &Bench, key: &str) -> (String, String, Option<String>) {
    bench
        .sqlite()
        .query_row(
            "SELECT value, updated_at, expires_at FROM task_state_store WHERE key = ?1",
            [key],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("stored row")
}

/// Python's own `json.dumps(json.loads(text))`: the bytes Airflow stores for this value.
fn python_dumps(text: &str) -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import json,sys; sys.stdout.write(json.dumps(json.loads(sys.argv[1])))", text])
        .output()
        .expect("python3 is required by the test suite");
    assert!(out.status.success());
    String::from_utf8(out.stdout).expect("utf8")
}

fn is_airflow_sqlite_time(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 26
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b' ',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            _ => c.is_ascii_digit(),
        })
}

/// Seconds between two Airflow SQLite timestamps, computed by Python.
fn seconds_between(a: &str, b: &str) -> f64 {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys,datetime as d; f='%Y-%m-%d %H:%M:%S.%f'; print((d.datetime.strptime(sys.argv[2],f)-d.datetime.strptime(sys.argv[1],f)).total_seconds())",
            a,
            b,
        ])
        .output()
        .expect("python3");
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("seconds")
}

// ---------------------------------------------------------------- help and usage

#[test]
fn help_lists_commands_and_exit_codes() {
    let bench = Bench::bare();
    let run = bench.run(&["--help"]).success();
    for word in ["get", "set", "delete", "clear", "list", "clean", "Exit codes", "130", "AIRFLOW__SECTION__KEY"] {
        assert!(run.stdout.contains(word), "--help lacks {word}: {}", run.stdout);
    }
    for sub in ["get", "set", "delete", "clear", "list", "clean", "sandbox"] {
        let run = bench.run(&[sub, "--help"]).success();
        assert!(run.stdout.contains("Usage: state-store"), "{sub} --help: {}", run.stdout);
    }
}

#[test]
fn unknown_flag_is_a_one_line_usage_error() {
    Bench::bare().run(&["get", "k", "--frobnicate"]).fails(2, "--frobnicate");
    Bench::bare().run(&["frobnicate"]).fails(2, "frobnicate");
    Bench::bare().run(&["list", "--limit", "ten"]).fails(2, "ten");
}

// ---------------------------------------------------------------- set and get

#[test]
fn set_then_get_in_every_format() {
    let bench = with_run();
    bench.run(&cmd(&["set", "watermark", "\"2026-11-28T00:00:00Z\""], &task(&[]))).success();

    bench.run(&cmd(&["get", "watermark", "-o", "plain"], &task(&[]))).success().stdout_is("2026-11-28T00:00:00Z\n");

    let run = bench.run(&cmd(&["get", "watermark", "-o", "json"], &task(&[]))).success();
    let v = run.json();
    assert_eq!(v.py("v['key']"), "'watermark'");
    assert_eq!(v.py("v['value']"), "'2026-11-28T00:00:00Z'");
    assert_eq!(v.py("(v['dag_id'], v['run_id'], v['task_id'], v['map_index'])"), format!("('{DAG}', '{RUN}', 'load', -1)"));
    assert_eq!(v.py("v['updated_at'].endswith('Z') and v['expires_at'] > v['updated_at']"), "True");

    let run = bench.run(&cmd(&["get", "watermark", "-o", "yaml"], &task(&[]))).success();
    assert!(run.stdout.contains("\nvalue: \"2026-11-28T00:00:00Z\"\n"), "{}", run.stdout);

    let run = bench.run(&cmd(&["get", "watermark"], &task(&[]))).success();
    assert!(run.stdout.starts_with("dag_id"), "table header: {}", run.stdout);
    assert!(run.stdout.contains("\"2026-11-28T00:00:00Z\""), "{}", run.stdout);
}

#[test]
fn values_are_stored_exactly_as_python_json_dumps_writes_them() {
    let bench = with_run();
    let inputs = [
        r#"{"b":1,"a":[1.0,1e16,1E-5,0.1,-0.0,"é😀\n\u0007/"],"nested":{"x":null,"y":true}}"#,
        "123456789012345678901234567890",
        "[]",
        "\"\"",
        r#"{"a":1,"a":2,"b":3}"#,
        " 5e-324 ",
        "1.7976931348623157e308",
    ];
    for (i, input) in inputs.iter().enumerate() {
        let key = format!("k{i}");
        bench.run(&cmd(&["set", &key, input], &task(&[]))).success();
        assert_eq!(stored(&bench, &key).0, python_dumps(input), "stored text for {input}");
    }
}

#[test]
fn value_from_stdin() {
    let bench = with_run();
    bench.run_with_stdin(&cmd(&["set", "cfg", "-"], &task(&[])), "{\"rows\": [1, 2]}\n").success();
    assert_eq!(stored(&bench, "cfg").0, "{\"rows\": [1, 2]}");
}

#[test]
fn negative_numbers_are_values_not_flags() {
    let bench = with_run();
    bench.run(&cmd(&["set", "delta", "-5"], &task(&[]))).success();
    assert_eq!(stored(&bench, "delta").0, "-5");
}

#[test]
fn timestamps_use_airflow_sqlite_text_form() {
    let bench = with_run();
    bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
    let (_, updated, expires) = stored(&bench, "k");
    assert!(is_airflow_sqlite_time(&updated), "{updated}");
    let expires = expires.expect("default retention gives an expiry");
    assert!(is_airflow_sqlite_time(&expires), "{expires}");
    let days = seconds_between(&updated, &expires) / 86_400.0;
    assert!((days - 30.0).abs() < 1e-6, "default_retention_days = 30, got {days}");
}

#[test]
fn retention_forms() {
    let mut bench = with_run();
    bench.run(&cmd(&["set", "never", "1", "--retention", "never"], &task(&[]))).success();
    assert_eq!(stored(&bench, "never").2, None);

    bench.run(&cmd(&["set", "six", "1", "--retention", "6h"], &task(&[]))).success();
    let (_, updated, expires) = stored(&bench, "six");
    assert!((seconds_between(&updated, &expires.expect("expiry")) - 21_600.0).abs() < 1e-6);

    bench.run(&cmd(&["set", "at", "1", "--expires-at", "2027-01-02T03:04:05.5+02:00"], &task(&[]))).success();
    assert_eq!(stored(&bench, "at").2.as_deref(), Some("2027-01-02 01:04:05.500000"));

    bench.env("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", "0");
    bench.run(&cmd(&["set", "zero", "1"], &task(&[]))).success();
    assert_eq!(stored(&bench, "zero").2, None, "0 days means never expire");

    bench.env("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", "2");
    bench.run(&cmd(&["set", "two", "1"], &task(&[]))).success();
    let (_, updated, expires) = stored(&bench, "two");
    assert!((seconds_between(&updated, &expires.expect("expiry")) - 172_800.0).abs() < 1e-6);
}

#[test]
fn overwrite_without_retention_resets_the_expiry() {
    let bench = with_run();
    bench.run(&cmd(&["set", "k", "1", "--retention", "never"], &task(&[]))).success();
    bench.run(&cmd(&["set", "k", "2"], &task(&[]))).success();
    let (value, _, expires) = stored(&bench, "k");
    assert_eq!(value, "2");
    assert!(expires.is_some(), "as in Airflow, a set without retention applies the default again");
    let count: i64 = bench.sqlite().query_row("SELECT count(*) FROM task_state_store", [], |r| r.get(0)).unwrap();
    assert_eq!(count, 1, "an upsert, not a second row");
}

#[test]
fn bad_values_are_refused_and_change_nothing() {
    let bench = with_run();
    bench.run(&cmd(&["set", "keep", "1"], &task(&[]))).success();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["set", "k", "{not json"], "not JSON"),
        (vec!["set", "k", "null"], "null"),
        (vec!["set", "k", "NaN"], "NaN"),
        (vec!["set", "k", "[Infinity]"], "Infinity"),
        (vec!["set", "k", "1e400"], "Infinity"),
        (vec!["set", "k", "text-without-quotes"], "not JSON"),
        (vec!["set", "", "1"], "empty"),
        (vec!["set", "k", "1", "--retention", "soon"], "--retention"),
        (vec!["set", "k", "1", "--expires-at", "tomorrow"], "--expires-at"),
        (vec!["set", "k", "1", "--map-index", "-2"], "-2"),
    ];
    for (head, needle) in cases {
        bench.unchanged(|| bench.run(&cmd(&head, &task(&[]))).fails(2, needle));
    }
    let long_key = "k".repeat(513);
    bench.unchanged(|| bench.run(&cmd(&["set", &long_key, "1"], &task(&[]))).fails(2, "512"));
    let ok_key = "k".repeat(512);
    bench.run(&cmd(&["set", &ok_key, "1"], &task(&[]))).success();
}

#[test]
fn value_size_limit_follows_max_value_storage_bytes() {
    let mut bench = with_run();
    let big = format!("\"{}\"", "x".repeat(70_000));
    bench.unchanged(|| bench.run(&cmd(&["set", "big", &big], &task(&[]))).fails(2, "max_value_storage_bytes"));
    bench.run(&cmd(&["set", "big", &big, "--allow-large"], &task(&[]))).success();
    bench.env("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "10");
    bench.unchanged(|| bench.run(&cmd(&["set", "small", "\"12345678901\""], &task(&[]))).fails(2, "13 bytes"));
    bench.env("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "0");
    bench.run(&cmd(&["set", "big2", &big], &task(&[]))).success();
}

#[test]
fn missing_dag_run_is_not_found_and_never_inserted() {
    let bench = with_run();
    let args = ["set", "k", "1", "--dag-id", DAG, "--run-id", "no_such_run", "--task-id", "t"];
    bench.unchanged(|| bench.run(&args).fails(1, "no dag run found"));
    bench.run(&["get", "k", "--dag-id", DAG, "--run-id", "no_such_run", "--task-id", "t"]).fails(1, "no dag run");
}

#[test]
fn scope_flags_must_be_complete_and_not_mixed() {
    let bench = with_run();
    bench.run(&["get", "k"]).fails(2, "task scope");
    bench.run(&["get", "k", "--dag-id", DAG]).fails(2, "--run-id, --task-id");
    bench.run(&cmd(&["get", "k", "--asset", "orders"], &task(&[]))).fails(2, "not both");
    bench.run(&["get", "k", "--asset", "a", "--asset-id", "1"]).fails(2, "only one");
}

#[test]
fn get_missing_key_exits_1() {
    let bench = with_run();
    bench.run(&cmd(&["get", "absent"], &task(&[]))).fails(1, "not found");
}

#[test]
fn reads_rows_airflow_wrote() {
    let bench = with_run();
    let text = r#"{"s": "\u00e9\ud83d\ude00", "f": 1e+16, "big": 123456789012345678901234567890}"#;
    bench.insert_task_row(DAG, RUN, "load", 3, "written/by airflow", text, "2026-11-28 10:00:00.000001", None);
    let run = bench.run(&["get", "written/by airflow", "--dag-id", DAG, "--run-id", RUN, "--task-id", "load", "--map-index", "3", "-o", "json"]).success();
    let v = run.json();
    assert_eq!(v.py(&format!("v['value'] == json.loads({text:?})")), "True");
    assert_eq!(v.py("(v['updated_at'], v['expires_at'])"), "('2026-11-28T10:00:00.000001Z', None)");
    assert_eq!(v.py("v['value']['big']"), "123456789012345678901234567890");
}

// ---------------------------------------------------------------- delete and clear

#[test]
fn delete_removes_one_key_and_tolerates_a_missing_one() {
    let bench = with_run();
    bench.run(&cmd(&["set", "a", "1"], &task(&[]))).success();
    bench.run(&cmd(&["set", "b", "2"], &task(&[]))).success();
    bench.run(&cmd(&["delete", "a", "-o", "json"], &task(&[]))).success().stdout_is("{\"key\": \"a\", \"deleted\": 1}\n");
    bench.run(&cmd(&["delete", "a"], &task(&[]))).success().stderr_has("not found");
    bench.run(&cmd(&["get", "b", "-o", "plain"], &task(&[]))).success().stdout_is("2\n");
    bench.run(&["delete", "b", "--dag-id", DAG, "--run-id", "gone", "--task-id", "load"]).fails(1, "no dag run");
}

#[test]
fn clear_needs_confirmation_off_a_terminal() {
    let bench = with_run();
    for (key, idx) in [("a", "-1"), ("b", "-1"), ("c", "0"), ("d", "1")] {
        bench.run(&cmd(&["set", key, "1", "--map-index", idx], &task(&[]))).success();
    }
    bench.unchanged(|| bench.run(&cmd(&["clear"], &task(&[]))).fails(2, "--yes"));
    bench.run(&cmd(&["clear", "--yes", "-o", "json"], &task(&[]))).success().stdout_is("{\"deleted\": 2}\n");
    bench.run(&cmd(&["clear", "--yes", "--all-map-indices", "-o", "plain"], &task(&[]))).success().stdout_is("2\n");
    bench.run(&cmd(&["clear", "--yes", "-o", "plain"], &task(&[]))).success().stdout_is("0\n");
}

// ---------------------------------------------------------------- list

#[test]
fn list_filters_orders_and_pages() {
    let bench = with_run();
    bench.add_dag_run("other_dag", "r1");
    for key in ["b", "a", "c"] {
        bench.run(&cmd(&["set", key, "1"], &task(&[]))).success();
    }
    bench.run(&["set", "z", "\"x\"", "--dag-id", "other_dag", "--run-id", "r1", "--task-id", "t"]).success();

    bench.run(&["list", "-o", "plain"]).success().stdout_is("a\nb\nc\nz\n");
    bench.run(&["list", "--dag-id", "other_dag", "-o", "plain"]).success().stdout_is("z\n");
    bench.run(&["list", "--limit", "2", "-o", "plain"]).success().stdout_is("a\nb\n").stderr_has("--offset 2");
    bench.run(&["list", "--limit", "2", "--offset", "2", "-o", "plain"]).success().stdout_is("c\nz\n");
    let run = bench.run(&["list", "-o", "json"]).success();
    assert_eq!(run.json().py("[e['key'] for e in v]"), "['a', 'b', 'c', 'z']");
    assert_eq!(run.json().py("sorted(v[0])"), "['dag_id', 'expires_at', 'key', 'map_index', 'run_id', 'task_id', 'updated_at', 'value']");
    bench.run(&["list", "--dag-id", "nothing", "-o", "json"]).success().stdout_is("[]\n");
}

#[test]
fn list_expired_shows_only_expired_rows() {
    let bench = with_run();
    bench.insert_task_row(DAG, RUN, "load", -1, "old", "1", "2020-01-01 00:00:00.000000", Some("2020-01-02 00:00:00.000000"));
    bench.run(&cmd(&["set", "fresh", "1"], &task(&[]))).success();
    bench.run(&["list", "--expired", "-o", "plain"]).success().stdout_is("old\n");
}

// ---------------------------------------------------------------- assets

#[test]
fn asset_keys_by_name_uri_and_id() {
    let bench = Bench::new();
    let id = bench.add_asset("orders", "s3://bucket/orders/", true).to_string();
    bench.run(&["set", "watermark", "\"2026-11-28\"", "--asset", "orders"]).success();
    bench.run(&["get", "watermark", "--asset-uri", "s3://bucket/orders/", "-o", "plain"]).success().stdout_is("2026-11-28\n");
    let run = bench.run(&["get", "watermark", "--asset-id", &id, "-o", "json"]).success();
    assert_eq!(run.json().py("(v['asset_name'], v['last_updated_by_kind'])"), "('orders', 'api')");
    let writer: (Option<String>, Option<String>, Option<i64>) = bench
        .sqlite()
        .query_row("SELECT last_updated_by_kind, last_updated_by_dag_id, last_updated_by_map_index FROM asset_state_store", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(writer, (Some("api".to_string()), None, None));
    bench.run(&["set", "x", "1", "--asset", "orders", "--retention", "1d"]).fails(2, "never expire");
    bench.run(&["list", "--assets", "-o", "plain"]).success().stdout_is("watermark\n");
}

#[test]
fn inactive_and_unknown_assets() {
    let bench = Bench::new();
    let id = bench.add_asset("old", "s3://old/", false).to_string();
    bench.unchanged(|| bench.run(&["set", "k", "1", "--asset", "old"]).fails(1, "not active"));
    bench.unchanged(|| bench.run(&["set", "k", "1", "--asset-id", &id]).fails(1, "inactive"));
    bench.run(&["get", "k", "--asset", "nope"]).fails(1, "no asset found");
    bench.run(&["get", "k", "--asset-id", &id]).fails(1, "not found");
}

// ---------------------------------------------------------------- clean

fn seed_expiring(bench: &Bench, n: usize, expired_every: usize) -> Vec<String> {
    let conn = bench.sqlite();
    let dag_run_id: i64 = conn.query_row("SELECT id FROM dag_run WHERE dag_id = ?1", [DAG], |r| r.get(0)).unwrap();
    let mut survivors = Vec::new();
    for i in 0..n {
        let key = format!("k{i:05}");
        let expires = match i % 5 {
            _ if i % expired_every == 0 => Some("2020-01-01 00:00:00.000000"),
            1 => None,
            _ => Some("2999-01-01 00:00:00.000000"),
        };
        if i % expired_every != 0 {
            survivors.push(key.clone());
        }
        conn.execute(
            "INSERT INTO task_state_store (dag_run_id, task_id, map_index, key, dag_id, run_id, value, updated_at, expires_at) VALUES (?1, 't', -1, ?2, ?3, ?4, '1', '2020-01-01 00:00:00.000000', ?5)",
            rusqlite::params![dag_run_id, key, DAG, RUN, expires],
        )
        .unwrap();
    }
    survivors
}

fn remaining_keys(bench: &Bench) -> Vec<String> {
    let conn = bench.sqlite();
    let mut stmt = conn.prepare("SELECT key FROM task_state_store ORDER BY key").unwrap();
    stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
}

#[test]
fn clean_leaves_exactly_the_unexpired_rows_for_every_batch_size() {
    // 40 rows, 14 expired (every third): batch sizes around the expired count and the edges.
    for batch in ["0", "1", "7", "13", "14", "15", "1000"] {
        let bench = with_run();
        let survivors = seed_expiring(&bench, 40, 3);
        let run = bench.run(&["clean", "--batch-size", batch, "-o", "json"]).success();
        assert_eq!(remaining_keys(&bench), survivors, "batch size {batch}");
        let v = run.json();
        assert_eq!(v.py("v['task_rows_deleted']"), "14", "batch size {batch}");
        let batches: u64 = v.py("v['batches']").parse().unwrap();
        let expected = match batch { "0" => 1, b => 14u64.div_ceil(b.parse().unwrap()) };
        assert_eq!(batches, expected, "batch size {batch}");
        assert_eq!(v.py("(v['dry_run'], v['interrupted'], v['asset_rows_deleted'])"), "(False, False, 0)");
        assert!(run.stderr.contains("clean: deleted 14 expired task row(s)"), "{}", run.stderr);
    }
}

#[test]
fn clean_batch_size_comes_from_config_unless_flagged() {
    let mut bench = with_run();
    seed_expiring(&bench, 10, 2);
    bench.env("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE", "2");
    let run = bench.run(&["clean", "--dry-run", "-o", "json"]).success();
    assert_eq!(run.json().py("v['batch_size']"), "2");
    let run = bench.run(&["clean", "--batch-size", "3", "-o", "json"]).success();
    assert_eq!(run.json().py("(v['batch_size'], v['batches'], v['task_rows_deleted'])"), "(3, 2, 5)");
}

#[test]
fn clean_sweeps_orphaned_asset_rows_only() {
    let bench = Bench::new();
    let active = bench.add_asset("orders", "s3://orders/", true);
    let inactive = bench.add_asset("legacy", "s3://legacy/", false);
    let conn = bench.sqlite();
    for (asset, key) in [(active, "keep"), (inactive, "drop1"), (inactive, "drop2")] {
        conn.execute(
            "INSERT INTO asset_state_store (asset_id, key, value, updated_at, last_updated_by_kind) VALUES (?1, ?2, '1', '2020-01-01 00:00:00.000000', 'task')",
            rusqlite::params![asset, key],
        )
        .unwrap();
    }
    let run = bench.unchanged(|| bench.run(&["clean", "--dry-run", "-o", "json"]).success());
    assert_eq!(run.json().py("(v['asset_rows_to_delete'], v['orphans_by_asset'][0]['asset_name'])"), "(2, 'legacy')");
    let run = bench.run(&["clean", "-o", "json"]).success();
    assert_eq!(run.json().py("v['asset_rows_deleted']"), "2");
    let left: Vec<String> = conn.prepare("SELECT key FROM asset_state_store").unwrap().query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
    assert_eq!(left, vec!["keep".to_string()]);
}

#[test]
fn clean_dry_run_counts_and_samples_without_deleting() {
    let bench = with_run();
    seed_expiring(&bench, 60, 2);
    let run = bench.unchanged(|| bench.run(&["clean", "--dry-run", "--sample", "3", "-o", "json"]).success());
    let v = run.json();
    assert_eq!(v.py("(v['dry_run'], v['task_rows_to_delete'], len(v['sample']))"), "(True, 30, 3)");
    assert_eq!(v.py("v['expired_by_dag']"), format!("[{{'dag_id': '{DAG}', 'rows': 30}}]"));
    let run = bench.run(&["clean", "--dry-run"]).success();
    assert!(run.stdout.contains("Would delete:"), "{}", run.stdout);
    assert!(run.stdout.lines().count() < 20, "a dry run never prints every row: {}", run.stdout);
}

#[test]
fn clean_before_a_past_instant_and_never_the_future() {
    let bench = with_run();
    bench.insert_task_row(DAG, RUN, "t", -1, "old", "1", "2019-01-01 00:00:00.000000", Some("2020-01-01 00:00:00.000000"));
    bench.insert_task_row(DAG, RUN, "t", -1, "newer", "1", "2019-01-01 00:00:00.000000", Some("2021-01-01 00:00:00.000000"));
    bench.unchanged(|| bench.run(&["clean", "--before", "2999-01-01T00:00:00Z"]).fails(2, "future"));
    bench.run(&["clean", "--before", "2020-06-01T00:00:00Z"]).success();
    assert_eq!(remaining_keys(&bench), vec!["newer".to_string()]);
}

#[test]
fn clean_skips_a_custom_backend() {
    let mut bench = with_run();
    seed_expiring(&bench, 10, 2);
    bench.env("AIRFLOW__STATE_STORE__BACKEND", "mypackage.state.CustomStateBackend");
    bench.unchanged(|| bench.run(&["clean"]).success().stderr_has("skipping cleanup"));
}

// ---------------------------------------------------------------- configuration

#[test]
fn configuration_precedence_flag_env_file_default() {
    let mut bench = with_run();
    seed_expiring(&bench, 4, 2);
    let cfg = bench.write_config("airflow.cfg", "[state_store]\nstate_cleanup_batch_size = 7\n");
    let batch = |b: &Bench, extra: &[&str]| -> String {
        let mut args = vec!["clean", "--dry-run", "-o", "json"];
        args.extend_from_slice(extra);
        b.run(&args).success().json().py("v['batch_size']")
    };
    assert_eq!(batch(&bench, &[]), "7", "$AIRFLOW_HOME/airflow.cfg is read");
    bench.env("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE", "8");
    assert_eq!(batch(&bench, &[]), "8", "environment beats the file");
    assert_eq!(batch(&bench, &["--batch-size", "9"]), "9", "a flag beats the environment");
    let other = bench.write_config("other.cfg", "[state_store]\nstate_cleanup_batch_size = 11\n");
    bench.env("AIRFLOW_CONFIG", other.to_str().unwrap());
    assert_eq!(batch(&bench, &["--batch-size", "9"]), "9");
    let mut c = bench.cmd(&["clean", "--dry-run", "-o", "json"]);
    c.env_remove("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE");
    let out = c.output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"batch_size\": 11"), "$AIRFLOW_CONFIG beats $AIRFLOW_HOME");
    std::fs::remove_file(&cfg).unwrap();
    std::fs::remove_file(&other).unwrap();
    let mut c = bench.cmd(&["clean", "--dry-run", "-o", "json"]);
    c.env_remove("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE").env_remove("AIRFLOW_CONFIG");
    let out = c.output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"batch_size\": 0"), "no file: Airflow's default 0");
}

#[test]
fn config_file_lookup_and_conn_override() {
    let bench = with_run();
    bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
    let elsewhere = Bench::new();
    // --conn beats the environment: the other database has no such dag run.
    bench.run(&cmd(&["get", "k", "--conn", &elsewhere.url()], &task(&[]))).fails(1, "no dag run");
    // --config names the file explicitly.
    let cfg = bench.write_config("explicit.cfg", &format!("[database]\nsql_alchemy_conn = {}\n", elsewhere.url()));
    let mut cmd_ = bench.cmd(&cmd(&["get", "k", "--config", cfg.to_str().unwrap()], &task(&[])));
    cmd_.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN");
    let out = cmd_.output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn bad_configuration_fails_before_the_database_is_opened() {
    let mut bench = with_run();
    bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
    bench.write_config("airflow.cfg", "[state_store]\nstate_cleanup_batch_size = ten\n");
    bench.unchanged(|| bench.run(&["clean"]).fails(3, "airflow.cfg line 2"));
    bench.write_config("airflow.cfg", "[state_store]\nclear_on_success = maybe\n");
    bench.run(&["clean"]).fails(3, "clear_on_success");
    bench.write_config("airflow.cfg", "[state_store]\ndefault_retention_days = -1\n");
    bench.unchanged(|| bench.run(&cmd(&["set", "k", "2"], &task(&[]))).fails(3, "default_retention_days"));
    bench.write_config("airflow.cfg", "this is not ini\n");
    bench.run(&["list"]).fails(3, "airflow.cfg");
    bench.write_config("airflow.cfg", "");
    bench.run(&["list", "--config", "/nonexistent/airflow.cfg"]).fails(3, "/nonexistent/airflow.cfg");
    bench.env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "oracle://u:secretpw@h/db");
    let run = bench.run(&["list"]).fails(3, "oracle");
    assert!(!run.stderr.contains("secretpw"), "{}", run.stderr);
    bench.env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "not a url");
    bench.run(&["list"]).fails(3, "sql_alchemy_conn");
}

#[test]
fn conn_from_cmd_and_secret() {
    let mut bench = with_run();
    bench.run(&cmd(&["set", "k", "\"v\""], &task(&[]))).success();
    let url = bench.url();
    bench.env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "");
    let mut c = bench.cmd(&cmd(&["get", "k", "-o", "plain"], &task(&[])));
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN").env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD", format!("echo {url}"));
    let out = c.output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "v\n", "{}", String::from_utf8_lossy(&out.stderr));

    let mut c = bench.cmd(&["list"]);
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN").env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD", "exit 3");
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));

    let mut c = bench.cmd(&["list"]);
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN").env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_SECRET", "conn/airflow");
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("secrets backend"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn toml_configuration() {
    let bench = with_run();
    seed_expiring(&bench, 4, 2);
    let cfg = bench.write_config("airflow.toml", "[state_store]\nstate_cleanup_batch_size = 5\nclear_on_success = true\n");
    let run = bench.run(&["clean", "--dry-run", "-o", "json", "--config", cfg.to_str().unwrap()]).success();
    assert_eq!(run.json().py("v['batch_size']"), "5");
}

// ---------------------------------------------------------------- database states

#[test]
fn database_problems_have_their_own_exit_codes() {
    let bench = Bench::bare();
    bench.run(&["list"]).fails(4, "does not exist");
    assert!(!bench.db.exists(), "a missing database is never created");

    std::fs::write(&bench.db, "this is not a database, just text that is long enough to be a header").unwrap();
    bench.run(&["list"]).fails(4, "not a database");

    std::fs::remove_file(&bench.db).unwrap();
    rusqlite::Connection::open(&bench.db).unwrap().execute_batch("CREATE TABLE unrelated (x)").unwrap();
    bench.run(&["list"]).fails(5, "no task_state_store");
}

#[test]
fn other_airflow_schemas_are_recognised_and_refused() {
    let bench = Bench::bare();
    rusqlite::Connection::open(&bench.db)
        .unwrap()
        .execute_batch("CREATE TABLE task_state (id INTEGER PRIMARY KEY); CREATE TABLE asset_state (asset_id INTEGER)")
        .unwrap();
    bench.run(&["list"]).fails(5, "pre-release");

    let bench = Bench::new();
    bench.sqlite().execute_batch("ALTER TABLE task_state_store ADD COLUMN region_id VARCHAR(250)").unwrap();
    bench.run(&["list"]).fails(5, "3.4");
}

// ---------------------------------------------------------------- hostile text and pipes

#[test]
fn hostile_text_is_stored_and_matched_literally() {
    let bench = Bench::new();
    let dag = "d'; DROP TABLE dag_run; --";
    let run_id = "r%_\\\"\n";
    bench.add_dag_run(dag, run_id);
    for key in ["a'b", "x; DELETE FROM task_state_store", "%", "_", "a/b c", "ключ"] {
        bench.run(&["set", key, "\"v\"", "--dag-id", dag, "--run-id", run_id, "--task-id", "t"]).success();
        bench.run(&["get", key, "--dag-id", dag, "--run-id", run_id, "--task-id", "t", "-o", "plain"]).success().stdout_is("v\n");
    }
    bench.run(&["get", "a_b", "--dag-id", dag, "--run-id", run_id, "--task-id", "t"]).fails(1, "not found");
    let n: i64 = bench.sqlite().query_row("SELECT count(*) FROM task_state_store", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 6);
}

#[test]
fn a_closed_pipe_ends_quietly() {
    let bench = with_run();
    seed_expiring(&bench, 3000, 2);
    let out = std::process::Command::new("bash")
        .args(["-c", &format!("set -o pipefail; '{}' list --limit 0 | head -n 1 >/dev/null", support::BIN)])
        .env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", bench.url())
        .env("AIRFLOW_HOME", bench.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}
