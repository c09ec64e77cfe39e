//! The contract of the `state-store` binary, driven as a user drives it: every command, output
//! format and exit code, against real metastores with the Airflow 3.3.2 schema. The tests in
//! `contract!` run once per dialect (SQLite always; PostgreSQL and MySQL with their features,
//! against the servers named by `STATE_STORE_TEST_POSTGRES_URL` / `STATE_STORE_TEST_MYSQL_URL`,
//! by default this machine's). The rest are about SQLite files and the command line itself.

#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

mod support;

use support::{Bench, Dialect};

const DAG: &str = "incremental_orders";
const RUN: &str = "scheduled__2026-11-28T00:00:00+00:00";

fn task<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--dag-id", DAG, "--run-id", RUN, "--task-id", "load"];
    args.extend_from_slice(extra);
    args
}

fn with_run(dialect: Dialect) -> Bench {
    let bench = Bench::on(dialect);
    bench.add_dag_run(DAG, RUN);
    bench
}

fn cmd<'a>(head: &[&'a str], tail: &[&'a str]) -> Vec<&'a str> {
    let mut v = head.to_vec();
    v.extend_from_slice(tail);
    v
}

/// (value, updated_at, expires_at) of a task key, timestamps in Airflow's SQLite text form.
fn stored(bench: &Bench, key: &str) -> (String, String, Option<String>) {
    let row = bench.scalar(&format!(
        "SELECT value, {}, {} FROM task_state_store WHERE {} = {}",
        bench.ts("updated_at"),
        bench.ts("expires_at"),
        bench.key_col(),
        bench.lit(key)
    ));
    let mut parts = row.splitn(3, '|').map(str::to_string);
    let (value, updated, expires) =
        (parts.next().unwrap_or_default(), parts.next().unwrap_or_default(), parts.next());
    (value, updated, expires.filter(|e| e != "NULL"))
}

fn count(bench: &Bench, table: &str) -> i64 {
    bench.scalar(&format!("SELECT count(*) FROM {table}")).parse().expect("count")
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
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("seconds between {a:?} and {b:?}"))
}

/// Seeds `n` task rows: every `expired_every`-th expired, the others never expiring or far in
/// the future. Returns the keys that must survive a clean, in order.
fn seed_expiring(bench: &Bench, n: usize, expired_every: usize) -> Vec<String> {
    let mut survivors = Vec::new();
    let mut rows = Vec::new();
    let keys: Vec<String> = (0..n).map(|i| format!("k{i:05}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let expires = if i % expired_every == 0 {
            Some("2020-01-01 00:00:00.000000")
        } else if i % 5 == 1 {
            None
        } else {
            Some("2037-01-01 00:00:00.000000")
        };
        if i % expired_every != 0 {
            survivors.push(key.clone());
        }
        rows.push(("t", -1, key.as_str(), "1", "2020-01-01 00:00:00.000000", expires));
    }
    bench.insert_task_rows(DAG, RUN, &rows);
    survivors
}

fn remaining_keys(bench: &Bench) -> Vec<String> {
    let k = bench.key_col();
    bench.rows(&format!("SELECT {k} FROM task_state_store ORDER BY {k}"))
}

/// One `#[test]` per dialect for each function: `on_sqlite::name`, `on_postgres::name`, …
macro_rules! contract {
    ($(fn $name:ident($d:ident: Dialect) $body:block)*) => {
        $(fn $name($d: Dialect) $body)*
        mod on_sqlite {
            $(#[test] fn $name() { super::$name(super::Dialect::Sqlite) })*
        }
        #[cfg(feature = "postgres")]
        mod on_postgres {
            $(#[test] fn $name() { super::$name(super::Dialect::Postgres) })*
        }
        #[cfg(feature = "mysql")]
        mod on_mysql {
            $(#[test] fn $name() { super::$name(super::Dialect::Mysql) })*
        }
    };
}

contract! {
    // ------------------------------------------------------------ set and get

    fn set_then_get_in_every_format(d: Dialect) {
        let bench = with_run(d);
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

    fn values_are_stored_exactly_as_python_json_dumps_writes_them(d: Dialect) {
        let bench = with_run(d);
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
            let expected = python_dumps(input);
            let expected = if d == Dialect::Mysql { expected.replace('\\', "\\\\") } else { expected };
            assert_eq!(stored(&bench, &key).0, expected, "stored text for {input}");
        }
    }

    fn value_from_stdin(d: Dialect) {
        let bench = with_run(d);
        bench.run_with_stdin(&cmd(&["set", "cfg", "-"], &task(&[])), "{\"rows\": [1, 2]}\n").success();
        assert_eq!(stored(&bench, "cfg").0, "{\"rows\": [1, 2]}");
    }

    fn negative_numbers_are_values_not_flags(d: Dialect) {
        let bench = with_run(d);
        bench.run(&cmd(&["set", "delta", "-5"], &task(&[]))).success();
        assert_eq!(stored(&bench, "delta").0, "-5");
    }

    fn default_retention_is_thirty_days_from_the_write(d: Dialect) {
        let bench = with_run(d);
        bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
        let (_, updated, expires) = stored(&bench, "k");
        let days = seconds_between(&updated, &expires.expect("default retention gives an expiry")) / 86_400.0;
        assert!((days - 30.0).abs() < 1e-6, "default_retention_days = 30, got {days}");
    }

    fn retention_forms(d: Dialect) {
        let mut bench = with_run(d);
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

    fn overwrite_without_retention_resets_the_expiry(d: Dialect) {
        let bench = with_run(d);
        bench.run(&cmd(&["set", "k", "1", "--retention", "never"], &task(&[]))).success();
        bench.run(&cmd(&["set", "k", "2"], &task(&[]))).success();
        let (value, _, expires) = stored(&bench, "k");
        assert_eq!(value, "2");
        assert!(expires.is_some(), "as in Airflow, a set without retention applies the default again");
        assert_eq!(count(&bench, "task_state_store"), 1, "an upsert, not a second row");
    }

    fn bad_values_are_refused_and_change_nothing(d: Dialect) {
        let bench = with_run(d);
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
            (vec!["set", "k", "1", "--retention", "0s"], "--retention"),
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

    fn value_size_limit_follows_max_value_storage_bytes(d: Dialect) {
        let mut bench = with_run(d);
        let big = format!("\"{}\"", "x".repeat(70_000));
        bench.unchanged(|| bench.run(&cmd(&["set", "big", &big], &task(&[]))).fails(2, "max_value_storage_bytes"));
        bench.run(&cmd(&["set", "big", &big, "--allow-large"], &task(&[]))).success();
        bench.env("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "10");
        bench.unchanged(|| bench.run(&cmd(&["set", "small", "\"12345678901\""], &task(&[]))).fails(2, "13 bytes"));
        bench.env("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "0");
        bench.run(&cmd(&["set", "big2", &big], &task(&[]))).success();
    }

    fn missing_dag_run_is_not_found_and_never_inserted(d: Dialect) {
        let bench = with_run(d);
        let args = ["set", "k", "1", "--dag-id", DAG, "--run-id", "no_such_run", "--task-id", "t"];
        bench.unchanged(|| bench.run(&args).fails(1, "no dag run found"));
        bench.run(&["get", "k", "--dag-id", DAG, "--run-id", "no_such_run", "--task-id", "t"]).fails(1, "no dag run");
    }

    fn get_missing_key_exits_1(d: Dialect) {
        let bench = with_run(d);
        bench.run(&cmd(&["get", "absent"], &task(&[]))).fails(1, "not found");
    }

    fn reads_rows_airflow_wrote(d: Dialect) {
        let bench = with_run(d);
        let text = r#"{"s": "\u00e9\ud83d\ude00", "f": 1e+16, "big": 123456789012345678901234567890}"#;
        bench.insert_task_row(DAG, RUN, "load", 3, "written/by airflow", text, "2026-11-28 10:00:00.000001", None);
        let run = bench
            .run(&["get", "written/by airflow", "--dag-id", DAG, "--run-id", RUN, "--task-id", "load", "--map-index", "3", "-o", "json"])
            .success();
        let v = run.json();
        assert_eq!(v.py(&format!("v['value'] == json.loads({text:?})")), "True");
        assert_eq!(v.py("(v['updated_at'], v['expires_at'])"), "('2026-11-28T10:00:00.000001Z', None)");
        assert_eq!(v.py("v['value']['big']"), "123456789012345678901234567890");
    }

    // ------------------------------------------------------------ delete and clear

    fn delete_removes_one_key_and_tolerates_a_missing_one(d: Dialect) {
        let bench = with_run(d);
        bench.run(&cmd(&["set", "a", "1"], &task(&[]))).success();
        bench.run(&cmd(&["set", "b", "2"], &task(&[]))).success();
        bench.run(&cmd(&["delete", "a", "-o", "json"], &task(&[]))).success().stdout_is("{\"key\": \"a\", \"deleted\": 1}\n");
        bench.run(&cmd(&["delete", "a"], &task(&[]))).success().stderr_has("not found");
        bench.run(&cmd(&["get", "b", "-o", "plain"], &task(&[]))).success().stdout_is("2\n");
        bench.run(&["delete", "b", "--dag-id", DAG, "--run-id", "gone", "--task-id", "load"]).fails(1, "no dag run");
    }

    fn clear_needs_confirmation_off_a_terminal(d: Dialect) {
        let bench = with_run(d);
        for (key, idx) in [("a", "-1"), ("b", "-1"), ("c", "0"), ("d", "1")] {
            bench.run(&cmd(&["set", key, "1", "--map-index", idx], &task(&[]))).success();
        }
        bench.unchanged(|| bench.run(&cmd(&["clear"], &task(&[]))).fails(2, "--yes"));
        bench.run(&cmd(&["clear", "--yes", "-o", "json"], &task(&[]))).success().stdout_is("{\"deleted\": 2}\n");
        bench.run(&cmd(&["clear", "--yes", "--all-map-indices", "-o", "plain"], &task(&[]))).success().stdout_is("2\n");
        bench.run(&cmd(&["clear", "--yes", "-o", "plain"], &task(&[]))).success().stdout_is("0\n");
    }

    // ------------------------------------------------------------ list

    fn list_filters_orders_and_pages(d: Dialect) {
        let bench = with_run(d);
        bench.add_dag_run("other_dag", "r1");
        for key in ["b", "a", "c", "B", "é"] {
            bench.run(&cmd(&["set", key, "1"], &task(&[]))).success();
        }
        bench.run(&["set", "z", "\"x\"", "--dag-id", "other_dag", "--run-id", "r1", "--task-id", "t"]).success();

        // Byte order on every dialect: upper case before lower case, non-ASCII last.
        bench.run(&["list", "-o", "plain"]).success().stdout_is("B\na\nb\nc\né\nz\n");
        bench.run(&["list", "--dag-id", "other_dag", "-o", "plain"]).success().stdout_is("z\n");
        bench.run(&["list", "--limit", "2", "-o", "plain"]).success().stdout_is("B\na\n").stderr_has("--offset 2");
        bench.run(&["list", "--limit", "2", "--offset", "4", "-o", "plain"]).success().stdout_is("é\nz\n");
        let run = bench.run(&["list", "-o", "json"]).success();
        assert_eq!(run.json().py("[e['key'] for e in v]"), "['B', 'a', 'b', 'c', 'é', 'z']");
        assert_eq!(
            run.json().py("sorted(v[0])"),
            "['dag_id', 'expires_at', 'key', 'map_index', 'run_id', 'task_id', 'updated_at', 'value']"
        );
        bench.run(&["list", "--dag-id", "nothing", "-o", "json"]).success().stdout_is("[]\n");
    }

    fn list_expired_shows_only_expired_rows(d: Dialect) {
        let bench = with_run(d);
        bench.insert_task_row(DAG, RUN, "load", -1, "old", "1", "2020-01-01 00:00:00.000000", Some("2020-01-02 00:00:00.000000"));
        bench.run(&cmd(&["set", "fresh", "1"], &task(&[]))).success();
        bench.run(&["list", "--expired", "-o", "plain"]).success().stdout_is("old\n");
    }

    // ------------------------------------------------------------ assets

    fn asset_keys_by_name_uri_and_id(d: Dialect) {
        let bench = Bench::on(d);
        let id = bench.add_asset("orders", "s3://bucket/orders/", true).to_string();
        bench.run(&["set", "watermark", "\"2026-11-28\"", "--asset", "orders"]).success();
        bench.run(&["get", "watermark", "--asset-uri", "s3://bucket/orders/", "-o", "plain"]).success().stdout_is("2026-11-28\n");
        let run = bench.run(&["get", "watermark", "--asset-id", &id, "-o", "json"]).success();
        assert_eq!(run.json().py("(v['asset_name'], v['last_updated_by_kind'])"), "('orders', 'api')");
        let writer = bench.scalar(
            "SELECT last_updated_by_kind, last_updated_by_dag_id, last_updated_by_run_id, last_updated_by_task_id, last_updated_by_map_index FROM asset_state_store",
        );
        assert_eq!(writer, "api|NULL|NULL|NULL|NULL");
        bench.run(&["set", "x", "1", "--asset", "orders", "--retention", "1d"]).fails(2, "never expire");
        bench.run(&["list", "--assets", "-o", "plain"]).success().stdout_is("watermark\n");
        bench.run(&["delete", "watermark", "--asset", "orders"]).success();
        assert_eq!(count(&bench, "asset_state_store"), 0);
    }

    fn inactive_and_unknown_assets(d: Dialect) {
        let bench = Bench::on(d);
        let id = bench.add_asset("old", "s3://old/", false).to_string();
        bench.unchanged(|| bench.run(&["set", "k", "1", "--asset", "old"]).fails(1, "not active"));
        bench.unchanged(|| bench.run(&["set", "k", "1", "--asset-id", &id]).fails(1, "inactive"));
        bench.run(&["get", "k", "--asset", "nope"]).fails(1, "no asset found");
        bench.run(&["get", "k", "--asset", "ünïcode-name"]).fails(1, "no asset found");
        bench.run(&["get", "k", "--asset-id", &id]).fails(1, "not found");
    }

    // ------------------------------------------------------------ clean

    fn clean_leaves_exactly_the_unexpired_rows_for_every_batch_size(d: Dialect) {
        // 40 rows, 14 expired (every third): batch sizes around the expired count and the edges.
        for batch in ["0", "1", "7", "13", "14", "15", "1000"] {
            let bench = with_run(d);
            let survivors = seed_expiring(&bench, 40, 3);
            let run = bench.run(&["clean", "--batch-size", batch, "-o", "json"]).success();
            assert_eq!(remaining_keys(&bench), survivors, "batch size {batch}");
            let v = run.json();
            assert_eq!(v.py("v['task_rows_deleted']"), "14", "batch size {batch}");
            let batches: u64 = v.py("v['batches']").parse().unwrap();
            let expected = match batch {
                "0" => 1,
                b => 14u64.div_ceil(b.parse().unwrap()),
            };
            assert_eq!(batches, expected, "batch size {batch}");
            assert_eq!(v.py("(v['dry_run'], v['interrupted'], v['asset_rows_deleted'])"), "(False, False, 0)");
            assert!(run.stderr.contains("clean: deleted 14 expired task row(s)"), "{}", run.stderr);
        }
    }

    fn clean_batch_size_comes_from_config_unless_flagged(d: Dialect) {
        let mut bench = with_run(d);
        seed_expiring(&bench, 10, 2);
        bench.env("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE", "2");
        let run = bench.run(&["clean", "--dry-run", "-o", "json"]).success();
        assert_eq!(run.json().py("v['batch_size']"), "2");
        let run = bench.run(&["clean", "--batch-size", "3", "-o", "json"]).success();
        assert_eq!(run.json().py("(v['batch_size'], v['batches'], v['task_rows_deleted'])"), "(3, 2, 5)");
    }

    fn clean_sweeps_orphaned_asset_rows_only(d: Dialect) {
        let bench = Bench::on(d);
        let active = bench.add_asset("orders", "s3://orders/", true);
        let inactive = bench.add_asset("legacy", "s3://legacy/", false);
        for (asset, key) in [(active, "keep"), (inactive, "drop1"), (inactive, "drop2")] {
            bench.exec(&format!(
                "INSERT INTO asset_state_store (asset_id, {}, value, updated_at, last_updated_by_kind) VALUES ({asset}, '{key}', '1', {}, 'task')",
                bench.key_col(),
                bench.ts_lit(Some("2020-01-01 00:00:00.000000"))
            ));
        }
        let run = bench.unchanged(|| bench.run(&["clean", "--dry-run", "-o", "json"]).success());
        assert_eq!(run.json().py("(v['asset_rows_to_delete'], v['orphans_by_asset'][0]['asset_name'])"), "(2, 'legacy')");
        let run = bench.run(&["clean", "-o", "json"]).success();
        assert_eq!(run.json().py("v['asset_rows_deleted']"), "2");
        assert_eq!(bench.rows(&format!("SELECT {} FROM asset_state_store", bench.key_col())), vec!["keep".to_string()]);
    }

    fn clean_dry_run_counts_and_samples_without_deleting(d: Dialect) {
        let bench = with_run(d);
        seed_expiring(&bench, 60, 2);
        let run = bench.unchanged(|| bench.run(&["clean", "--dry-run", "--sample", "3", "-o", "json"]).success());
        let v = run.json();
        assert_eq!(v.py("(v['dry_run'], v['task_rows_to_delete'], len(v['sample']))"), "(True, 30, 3)");
        assert_eq!(v.py("v['expired_by_dag']"), format!("[{{'dag_id': '{DAG}', 'rows': 30}}]"));
        let run = bench.run(&["clean", "--dry-run"]).success();
        assert!(run.stdout.contains("Would delete:"), "{}", run.stdout);
        assert!(run.stdout.lines().count() < 20, "a dry run never prints every row: {}", run.stdout);
    }

    fn clean_before_a_past_instant_and_never_the_future(d: Dialect) {
        let bench = with_run(d);
        bench.insert_task_row(DAG, RUN, "t", -1, "old", "1", "2019-01-01 00:00:00.000000", Some("2020-01-01 00:00:00.000000"));
        bench.insert_task_row(DAG, RUN, "t", -1, "newer", "1", "2019-01-01 00:00:00.000000", Some("2021-01-01 00:00:00.000000"));
        bench.unchanged(|| bench.run(&["clean", "--before", "2999-01-01T00:00:00Z"]).fails(2, "future"));
        bench.run(&["clean", "--before", "2020-06-01T00:00:00Z"]).success();
        assert_eq!(remaining_keys(&bench), vec!["newer".to_string()]);
    }

    fn clean_stops_at_max_rows_and_a_rerun_goes_on(d: Dialect) {
        let bench = with_run(d);
        let survivors = seed_expiring(&bench, 40, 3);
        let run = bench.run(&["clean", "--batch-size", "4", "--max-rows", "6", "-o", "json"]).success();
        assert_eq!(
            run.json().py("(v['task_rows_deleted'], v['batches'], v['stopped_by'], v['interrupted'])"),
            "(6, 2, 'max_rows', False)"
        );
        assert_eq!(remaining_keys(&bench).len(), 40 - 6);
        let run = bench.run(&["clean", "--batch-size", "0", "--max-rows", "5", "-o", "json"]).success();
        assert_eq!(run.json().py("(v['task_rows_deleted'], v['batches'])"), "(5, 1)");
        // A limit met exactly by the last expired row is a complete run, not a stop.
        let run = bench.run(&["clean", "--max-rows", "3", "-o", "json"]).success();
        assert_eq!(run.json().py("(v['task_rows_deleted'], v['stopped_by'])"), "(3, None)");
        assert_eq!(remaining_keys(&bench), survivors);
        bench.run(&["clean", "--max-rows", "0"]).fails(2, "--max-rows");
    }

    fn clean_stops_at_max_duration(d: Dialect) {
        let bench = with_run(d);
        seed_expiring(&bench, 40, 2);
        let run = bench
            .run(&["clean", "--batch-size", "1", "--sleep", "100ms", "--max-duration", "250ms", "-o", "json"])
            .success();
        let v = run.json();
        assert_eq!(v.py("v['stopped_by']"), "'max_duration'");
        let deleted: usize = v.py("v['task_rows_deleted']").parse().unwrap();
        assert!((1..20).contains(&deleted), "deleted {deleted}");
        assert_eq!(remaining_keys(&bench).len(), 40 - deleted, "the summary counts exactly what is gone");
        bench.run(&["clean", "--max-duration", "soon"]).fails(2, "--max-duration");
    }

    fn clean_sigterm_ends_between_batches_and_a_rerun_finishes(d: Dialect) {
        let bench = with_run(d);
        let survivors = seed_expiring(&bench, 40, 2);
        let child = bench
            .cmd(&["clean", "--batch-size", "1", "--sleep", "150ms", "-o", "json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(600));
        let killed = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
        assert!(killed.success());
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(143), "{stderr}");
        assert!(stderr.contains("stopped by SIGTERM"), "{stderr}");
        let v = support::serde_like::parse(&stdout);
        assert_eq!(v.py("(v['interrupted'], v['stopped_by'])"), "(True, 'SIGTERM')");
        let deleted: usize = v.py("v['task_rows_deleted']").parse().unwrap();
        assert!((1..20).contains(&deleted), "deleted {deleted}");
        assert_eq!(remaining_keys(&bench).len(), 40 - deleted, "only whole batches are gone");
        bench.run(&["clean"]).success();
        assert_eq!(remaining_keys(&bench), survivors);
    }

    fn clean_skips_a_custom_backend(d: Dialect) {
        let mut bench = with_run(d);
        seed_expiring(&bench, 10, 2);
        bench.env("AIRFLOW__STATE_STORE__BACKEND", "mypackage.state.CustomStateBackend");
        let run = bench.unchanged(|| bench.run(&["clean", "-o", "json"]).success().stderr_has("skipping cleanup"));
        assert_eq!(run.json().py("(v['task_rows_deleted'], 'CustomStateBackend' in v['skipped'])"), "(0, True)");
    }

    // ------------------------------------------------------------ schemas and hostile text

    fn a_newer_airflow_schema_is_refused(d: Dialect) {
        let bench = Bench::on(d);
        bench.exec("ALTER TABLE task_state_store ADD COLUMN region_id VARCHAR(250)");
        bench.run(&["list"]).fails(5, "3.4");
    }

    fn hostile_text_is_stored_and_matched_literally(d: Dialect) {
        let bench = Bench::on(d);
        let dag = "d'; DROP TABLE dag_run; --";
        let run_id = "r%_\\\"\n";
        bench.add_dag_run(dag, run_id);
        for key in ["a'b", "x; DELETE FROM task_state_store", "%", "_", "a/b c", "ключ", "back\\slash"] {
            bench.run(&["set", key, "\"v\"", "--dag-id", dag, "--run-id", run_id, "--task-id", "t"]).success();
            bench.run(&["get", key, "--dag-id", dag, "--run-id", run_id, "--task-id", "t", "-o", "plain"]).success().stdout_is("v\n");
        }
        bench.run(&["get", "a_b", "--dag-id", dag, "--run-id", run_id, "--task-id", "t"]).fails(1, "not found");
        assert_eq!(count(&bench, "task_state_store"), 7);
        assert_eq!(count(&bench, "dag_run"), 1);
    }

    fn a_closed_pipe_ends_quietly(d: Dialect) {
        let bench = with_run(d);
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
}

// ---------------------------------------------------------------- the command line itself

#[test]
fn help_lists_commands_and_exit_codes() {
    let bench = Bench::bare();
    let run = bench.run(&["--help"]).success();
    for word in
        ["get", "set", "delete", "clear", "list", "clean", "Exit codes", "130", "AIRFLOW__SECTION__KEY"]
    {
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
    Bench::bare().run(&["get"]).fails(2, "<KEY>");
    Bench::bare().run(&["clean", "--batch-size", "-1"]).fails(2, "--batch-size");
}

#[test]
fn scope_flags_must_be_complete_and_not_mixed() {
    let bench = Bench::bare();
    bench.run(&["get", "k"]).fails(2, "task scope");
    bench.run(&["get", "k", "--dag-id", DAG]).fails(2, "--run-id, --task-id");
    bench.run(&cmd(&["get", "k", "--asset", "orders"], &task(&[]))).fails(2, "not both");
    bench.run(&["get", "k", "--asset", "a", "--asset-id", "1"]).fails(2, "only one");
    assert!(!bench.db.exists(), "usage errors never open the database");
}

// ---------------------------------------------------------------- SQLite specifics

#[test]
fn sqlite_timestamps_use_airflow_text_form() {
    let bench = with_run(Dialect::Sqlite);
    bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
    let (_, updated, expires) = stored(&bench, "k");
    assert!(is_airflow_sqlite_time(&updated), "{updated}");
    assert!(is_airflow_sqlite_time(&expires.expect("expiry")), "expires_at");
}

#[test]
fn sqlite_file_problems_have_their_own_exit_codes() {
    let bench = Bench::bare();
    bench.run(&["list"]).fails(4, "does not exist");
    assert!(!bench.db.exists(), "a missing database is never created");

    std::fs::write(&bench.db, "this is not a database, just text that is long enough to be a header")
        .unwrap();
    bench.run(&["list"]).fails(4, "not a database");

    std::fs::remove_file(&bench.db).unwrap();
    rusqlite::Connection::open(&bench.db).unwrap().execute_batch("CREATE TABLE unrelated (x)").unwrap();
    bench.run(&["list"]).fails(5, "no task_state_store");
}

#[test]
fn sqlite_pre_release_table_names_are_recognised_and_refused() {
    let bench = Bench::bare();
    rusqlite::Connection::open(&bench.db)
        .unwrap()
        .execute_batch(
            "CREATE TABLE task_state (id INTEGER PRIMARY KEY); CREATE TABLE asset_state (asset_id INTEGER)",
        )
        .unwrap();
    bench.run(&["list"]).fails(5, "pre-release");
}

// ---------------------------------------------------------------- configuration

#[test]
fn configuration_precedence_flag_env_file_default() {
    let mut bench = with_run(Dialect::Sqlite);
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
    let mut c = bench.cmd(&["clean", "--dry-run", "-o", "json"]);
    c.env_remove("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE");
    let out = c.output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"batch_size\": 11"),
        "$AIRFLOW_CONFIG beats $AIRFLOW_HOME"
    );
    std::fs::remove_file(&cfg).unwrap();
    std::fs::remove_file(&other).unwrap();
    let mut c = bench.cmd(&["clean", "--dry-run", "-o", "json"]);
    c.env_remove("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE").env_remove("AIRFLOW_CONFIG");
    let out = c.output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"batch_size\": 0"),
        "no file: Airflow's default 0"
    );
}

#[test]
fn config_file_lookup_and_conn_override() {
    let bench = with_run(Dialect::Sqlite);
    bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
    let elsewhere = Bench::new();
    // --conn beats the environment: the other database has no such dag run.
    bench.run(&cmd(&["get", "k", "--conn", &elsewhere.url()], &task(&[]))).fails(1, "no dag run");
    // --config names the file explicitly.
    let cfg =
        bench.write_config("explicit.cfg", &format!("[database]\nsql_alchemy_conn = {}\n", elsewhere.url()));
    let mut c = bench.cmd(&cmd(&["get", "k", "--config", cfg.to_str().unwrap()], &task(&[])));
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN");
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn bad_configuration_fails_before_the_database_is_opened() {
    let mut bench = with_run(Dialect::Sqlite);
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
    let bench = with_run(Dialect::Sqlite);
    bench.run(&cmd(&["set", "k", "\"v\""], &task(&[]))).success();
    let url = bench.url();
    let mut c = bench.cmd(&cmd(&["get", "k", "-o", "plain"], &task(&[])));
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
        .env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD", format!("echo {url}"));
    let out = c.output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "v\n", "{}", String::from_utf8_lossy(&out.stderr));

    let mut c = bench.cmd(&["list"]);
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
        .env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD", "false");
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));

    let mut c = bench.cmd(&["list"]);
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
        .env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_SECRET", "conn/airflow");
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("secrets backend"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn toml_configuration() {
    let bench = with_run(Dialect::Sqlite);
    seed_expiring(&bench, 4, 2);
    let cfg = bench.write_config(
        "airflow.toml",
        "[state_store]\nstate_cleanup_batch_size = 5\nclear_on_success = true\n",
    );
    let run = bench.run(&["clean", "--dry-run", "-o", "json", "--config", cfg.to_str().unwrap()]).success();
    assert_eq!(run.json().py("v['batch_size']"), "5");
}

/// What Airflow's MySQL schema cannot hold is refused before anything is written, and lookups
/// by such text simply find nothing.
#[cfg(feature = "mysql")]
mod mysql_limits {
    use super::{DAG, RUN, cmd, task, with_run};
    use crate::support::Dialect;

    #[test]
    fn expiries_after_2038_are_refused_before_writing() {
        let bench = with_run(Dialect::Mysql);
        for extra in [["--expires-at", "2038-01-19T03:14:08Z"], ["--retention", "700w"]] {
            bench.unchanged(|| {
                bench.run(&cmd(&["set", "k", "1"], &task(&extra))).fails(
                    2,
                    "MySQL TIMESTAMP ends at 2038-01-19 03:14:07 UTC; use a shorter retention or never",
                )
            });
        }
        bench.unchanged(|| {
            bench
                .run(&cmd(&["set", "k", "1"], &task(&["--expires-at", "1969-07-20T20:17:00Z"])))
                .fails(2, "1970")
        });
        let last = "2038-01-19T03:14:07.999999Z";
        bench.run(&cmd(&["set", "k", "1"], &task(&["--expires-at", last]))).success();
        let run = bench.run(&cmd(&["get", "k", "-o", "json"], &task(&[]))).success();
        assert_eq!(run.json().py("v['expires_at']"), format!("'{last}'"));
    }

    #[test]
    fn characters_outside_the_bmp_are_refused_in_keys_and_match_nothing() {
        let bench = with_run(Dialect::Mysql);
        bench.unchanged(|| bench.run(&cmd(&["set", "🚀", "1"], &task(&[]))).fails(2, "key \"🚀\""));
        bench.run(&cmd(&["get", "🚀"], &task(&[]))).fails(1, "not found");
        bench.run(&cmd(&["delete", "🚀"], &task(&[]))).success();
        bench
            .run(&["get", "k", "--dag-id", "d🚀", "--run-id", RUN, "--task-id", "load"])
            .fails(1, "no dag run");
        bench.run(&["list", "--dag-id", "d🚀", "-o", "json"]).success().stdout_is("[]\n");
        bench.run(&["sandbox", "add-dag-run", "--dag-id", "d🚀", "--run-id", "r"]).fails(2, "dag_id");
        // The rest of the BMP is stored and read back as written.
        bench.run(&cmd(&["set", "키/ü€", "\"값\""], &task(&[]))).success();
        bench.run(&cmd(&["get", "키/ü€", "-o", "plain"], &task(&[]))).success().stdout_is("값\n");
        assert_eq!(
            bench.scalar(&format!("SELECT count(*) FROM task_state_store WHERE dag_id = '{DAG}'")),
            "1"
        );
    }

    #[test]
    fn asset_names_latin1_cannot_hold_match_nothing() {
        let bench = with_run(Dialect::Mysql);
        bench.add_asset("café €", "s3://bucket/café", true);
        bench.run(&["set", "k", "1", "--asset", "café €"]).success();
        bench.run(&["get", "k", "--asset-uri", "s3://bucket/café", "-o", "plain"]).success().stdout_is("1\n");
        for name in ["cafā", "주문", "🚀"] {
            bench.run(&["get", "k", "--asset", name]).fails(1, "no asset found");
            bench.run(&["get", "k", "--asset-uri", name]).fails(1, "no asset found");
        }
        bench.run(&["sandbox", "add-asset", "--name", "주문", "--uri", "s3://x"]).fails(2, "latin1");
    }
}

// ---------------------------------------------------------------- terminals and signals

/// Runs the tool under a pseudo-terminal (util-linux `script`), typing `answer`.
fn on_terminal(bench: &Bench, args: &[&str], answer: &str) -> (i32, String) {
    let line = std::iter::once(support::BIN.to_string())
        .chain(args.iter().map(|a| format!("'{}'", a.replace('\'', "'\\''"))))
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", bench.url())
        .env("AIRFLOW_HOME", bench.dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("util-linux script(1) is required by the test suite");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(answer.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn clear_asks_on_a_terminal() {
    let bench = with_run(Dialect::Sqlite);
    for key in ["a", "b"] {
        bench.run(&cmd(&["set", key, "1"], &task(&[]))).success();
    }
    let (code, screen) = bench.unchanged(|| on_terminal(&bench, &cmd(&["clear"], &task(&[])), "n\n"));
    assert_eq!(code, 0);
    assert!(screen.contains("Remove 2 key(s)") && screen.contains("cancelled"), "{screen}");
    let (code, screen) = on_terminal(&bench, &cmd(&["clear"], &task(&[])), "y\n");
    assert_eq!(code, 0, "{screen}");
    assert!(screen.contains("removed 2 keys"), "{screen}");
    assert_eq!(count(&bench, "task_state_store"), 0);
}

#[test]
fn sigint_stops_clean_with_exit_130() {
    let bench = with_run(Dialect::Sqlite);
    seed_expiring(&bench, 20, 1);
    let child = bench
        .cmd(&["clean", "--batch-size", "1", "--sleep", "5s"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("deleted 1 expired task row(s)") && stderr.contains("stopped by SIGINT"),
        "{stderr}"
    );
    assert_eq!(remaining_keys(&bench).len(), 19, "the signal cut the 5 s pause short after one batch");
}

/// `[database] sql_alchemy_schema` puts Airflow's tables in that schema; the tool must read and
/// write there and nowhere else (here a second sandbox shadows the one in `public`).
#[cfg(feature = "postgres")]
#[test]
fn postgres_sql_alchemy_schema_is_honoured() {
    let mut bench = Bench::on(Dialect::Postgres);
    bench.env("AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA", "Air \"Flow\"");
    bench.run(&["sandbox", "create"]).success();
    bench.add_dag_run(DAG, RUN);
    bench.run(&cmd(&["set", "k", "\"in schema\""], &task(&[]))).success();
    bench.run(&cmd(&["get", "k", "-o", "plain"], &task(&[]))).success().stdout_is("in schema\n");
    assert_eq!(bench.scalar(r#"SELECT count(*) FROM "Air ""Flow""".task_state_store"#), "1");
    assert_eq!(bench.scalar("SELECT count(*) FROM public.task_state_store"), "0");
    assert_eq!(bench.scalar("SELECT count(*) FROM public.dag_run"), "0");

    bench.env("AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA", "");
    bench.run(&cmd(&["get", "k"], &task(&[]))).fails(1, "no dag run");
    bench.env("AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA", "air \"flow\"");
    bench.run(&["list"]).fails(5, "does not exist");
    bench.env("AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA", &"s".repeat(64));
    bench.run(&["list"]).fails(3, "sql_alchemy_schema");
}
