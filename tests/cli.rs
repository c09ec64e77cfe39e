//! The contract of the `state-store` binary, driven as a user drives it: every command, output
//! format and exit code, against real metastores with the Airflow 3.3.2 schema. The tests in
//! `contract!` run once per dialect (SQLite always; PostgreSQL and MySQL with their features,
//! against the servers named by `STATE_STORE_TEST_POSTGRES_URL` / `STATE_STORE_TEST_MYSQL_URL`,
//! by default this machine's). The rest are about SQLite files and the command line itself.

// The suite reads its own settings (database URLs, seeds, PATH) from the environment; the
// rule of one reader that refuses what is not UTF-8 (src/env.rs) is the tool's.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

#[macro_use]
mod support;

use serde_json::{Value, json};
use support::{Bench, Dialect, clean_batches, fields};

const DAG: &str = "incremental_orders";
const RUN: &str = "scheduled__2026-11-28T00:00:00+00:00";

fn task<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--dag-id", DAG, "--run-id", RUN, "--task-id", "load"];
    args.extend_from_slice(extra);
    args
}

/// A metastore with one dag run of `DAG` and its unmapped task instance `load`.
fn with_run(dialect: Dialect) -> Bench {
    let bench = Bench::on(dialect);
    bench.add_dag_run_with(DAG, RUN, &["load"]);
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

/// Python's own `json.dumps(json.loads(text))` of each text, from one python3: the bytes Airflow
/// stores for these values.
fn python_dumps(texts: &[&str]) -> Vec<String> {
    let script = "import json,sys; print('\\n'.join(json.dumps(json.loads(t)) for t in sys.argv[1:]))";
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .args(texts)
        .output()
        .expect("python3 is required by the test suite");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf8").lines().map(str::to_string).collect()
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

/// Seconds between two Airflow SQLite timestamps.
fn seconds_between(a: &str, b: &str) -> f64 {
    assert!(is_airflow_sqlite_time(a) && is_airflow_sqlite_time(b), "{a:?} {b:?}");
    (micros_since_1970(b) - micros_since_1970(a)) as f64 / 1e6
}

/// The instant of an Airflow SQLite timestamp (UTC), in microseconds since 1970: the days of
/// its date by the proleptic Gregorian calendar (Howard Hinnant's `days_from_civil`), then its
/// time of day.
fn micros_since_1970(text: &str) -> i64 {
    let n = |range: std::ops::Range<usize>| text[range].parse::<i64>().unwrap();
    let (month, day) = (n(5..7), n(8..10));
    let year = if month <= 2 { n(0..4) - 1 } else { n(0..4) };
    let (era, year_of_era) = (year.div_euclid(400), year.rem_euclid(400));
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let days =
        era * 146_097 + year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year - 719_468;
    (((days * 24 + n(11..13)) * 60 + n(14..16)) * 60 + n(17..19)) * 1_000_000 + n(20..26)
}

/// The system clock, in microseconds since 1970.
fn micros_now() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    i64::try_from(since.as_micros()).unwrap()
}

/// An instant as Airflow's SQLite text, `YYYY-MM-DD HH:MM:SS.ffffff` in UTC.
fn sqlite_text(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros).unwrap().format("%Y-%m-%d %H:%M:%S%.6f").to_string()
}

/// The UTC calendar date of an instant.
fn utc_date(micros: i64) -> String {
    sqlite_text(micros)[..10].to_string()
}

/// Midnight UTC starting a `YYYY-MM-DD` date, in microseconds since 1970.
fn micros_of_date(date: &str) -> i64 {
    micros_since_1970(&format!("{date} 00:00:00.000000"))
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

/// Waits (up to 30 s, however loaded the machine) until a clean running in the background has
/// deleted at least one of the `seeded` rows, so a test acts mid-run rather than after a guess.
fn until_some_rows_are_gone(bench: &Bench, seeded: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while remaining_keys(bench).len() >= seeded {
        assert!(std::time::Instant::now() < deadline, "the clean deleted nothing within 30 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `clean -o json` a row a batch with a pause after each, sent `signal` (kill(1)'s name) once
/// some of the `seeded` rows are gone; what it printed and how it ended.
fn slow_clean_stopped_by(bench: &Bench, signal: &str, seeded: usize) -> std::process::Output {
    let child = bench
        .cmd(&["clean", "--batch-size", "1", "--sleep", "150ms", "-o", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    until_some_rows_are_gone(bench, seeded);
    let killed =
        std::process::Command::new("kill").args(["-s", signal, &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    child.wait_with_output().unwrap()
}

/// Every signal of the ending set stops a clean between batches, and the document, the
/// summary and the exit code name it: SIGPWR, SIGIO, SIGUSR1 and SIGXCPU as SIGTERM.
#[test]
fn every_ending_signal_is_named_in_the_stop_of_a_clean() {
    for (signal, number) in [("PWR", 30), ("IO", 29), ("USR1", 10), ("XCPU", 24)] {
        let bench = with_run(Dialect::Sqlite);
        seed_expiring(&bench, 40, 2);
        let out = slow_clean_stopped_by(&bench, signal, 40);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(128 + number), "SIG{signal}: {stderr}");
        assert!(stderr.contains(&format!("stopped by SIG{signal}")), "{stderr}");
        let v: Value = serde_json::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
        assert_eq!(fields(&v, &["interrupted", "stopped_by"]), json!([true, format!("SIG{signal}")]));
        assert_eq!(v["error"]["exit_code"], 128 + number, "{v}");
    }
}

fn remaining_keys(bench: &Bench) -> Vec<String> {
    let k = bench.key_col();
    bench.rows(&format!("SELECT {k} FROM task_state_store ORDER BY {k}"))
}

/// stdout of a `-o json` run that is not a terminal: exactly one line, one JSON object.
#[track_caller]
fn one_document(run: &support::Run) -> Value {
    assert_eq!(run.stdout.lines().count(), 1, "one JSON document on stdout: {run:?}");
    let v = run.json();
    assert!(v.is_object(), "{run:?}");
    v
}

/// The document of a failed `clean -o json`: its `error` member holds the run's exit code and
/// the message of its one `error:` line on stderr, exactly.
#[track_caller]
fn error_document(run: &support::Run) -> Value {
    let v = one_document(run);
    let line = run.stderr.lines().find(|l| l.starts_with("error: ")).expect("an error line");
    assert_eq!(v["error"], json!({"message": &line["error: ".len()..], "exit_code": run.code}), "{run:?}");
    v
}

/// The names of an object's members, in order.
fn keys(v: &Value) -> Vec<&str> {
    v.as_object().expect("an object").keys().map(String::as_str).collect()
}

/// A member of every item of an array.
fn each<'a>(v: &'a Value, key: &str) -> Vec<&'a Value> {
    v.as_array().expect("an array").iter().map(|item| &item[key]).collect()
}

/// A worker's open transaction that has written these keys and holds their rows, and only
/// them: it names them by primary key, as Airflow's writes name a row by its unique key
/// (InnoDB's UPDATE by an unindexed column would lock every row it scans).
fn hold_rows(bench: &Bench, keys: &[&str]) -> support::Holder {
    let k = bench.key_col();
    let quoted: Vec<String> = keys.iter().map(|key| format!("'{key}'")).collect();
    let ids = bench.rows(&format!("SELECT id FROM task_state_store WHERE {k} IN ({})", quoted.join(", ")));
    assert_eq!(ids.len(), keys.len(), "{keys:?}");
    bench.hold(&format!("UPDATE task_state_store SET value = '2' WHERE id IN ({})", ids.join(", ")))
}

/// The output of a clean run in the background, once it ended.
fn finished(child: std::process::Child, args: &[&str]) -> support::Run {
    let out = child.wait_with_output().unwrap();
    support::Run {
        args: args.iter().map(|s| s.to_string()).collect(),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn sigterm(child: &std::process::Child) {
    let killed =
        std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
}

/// The samples of a `--metrics-file` by series (`name{labels}`), each checked to follow its
/// metric's `# HELP` and `# TYPE … gauge` lines; no temporary file may be left beside it.
#[track_caller]
fn metrics(path: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap();
    let (mut helped, mut typed, mut samples) = (None, None, std::collections::BTreeMap::new());
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped = rest.split(' ').next().map(str::to_string);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            assert_eq!(Some(rest.to_string()), helped.as_ref().map(|h| format!("{h} gauge")), "{text}");
            typed = helped.clone();
        } else {
            let (series, value) = line.rsplit_once(' ').unwrap();
            assert_eq!(series.split('{').next(), typed.as_deref(), "{text}");
            assert!(series.starts_with("state_store_clean_"), "{line}");
            value.parse::<f64>().unwrap();
            assert!(samples.insert(series.to_string(), value.to_string()).is_none(), "{text}");
        }
    }
    let dir: Vec<_> =
        std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(!dir.iter().any(|n| n.to_string_lossy().ends_with(".tmp")), "{dir:?}");
    samples
}

/// The names in a SQLite bench's directory (the database's, and AIRFLOW_HOME), sorted.
fn dir_entries(bench: &Bench) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(bench.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Runs `sql` with the database's foreign-key checks off, which is how a metastore comes to
/// hold rows whose parent is gone (SQLite opened without Airflow's PRAGMA, a MySQL restore with
/// foreign_key_checks=0, a PostgreSQL load in replica mode).
fn without_foreign_keys(bench: &Bench, sql: &str) {
    let off = match bench.dialect {
        Dialect::Sqlite => "PRAGMA foreign_keys = OFF;",
        Dialect::Postgres => "SET session_replication_role = replica;",
        Dialect::Mysql => "SET foreign_key_checks = 0;",
    };
    bench.exec(&format!("{off} {sql}"));
}

/// One check of `doctor -o json` output, by name.
#[track_caller]
fn doctor_check(run: &support::Run, name: &str) -> Value {
    let v = run.json();
    let found = v["checks"].as_array().and_then(|checks| checks.iter().find(|c| c["name"] == name));
    found.cloned().unwrap_or_else(|| panic!("no check {name}: {}", run.stdout))
}

/// The members `keys` of each sampled row of a check.
fn sample(check: &Value, keys: &[&str]) -> Vec<Value> {
    check["sample"].as_array().expect("a sample").iter().map(|row| fields(row, keys)).collect()
}

/// The text of a string member of a check.
fn text_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("{key} is not a string: {v}"))
}

/// `doctor -o json` with the database unchanged, its exit code checked.
fn doctor(bench: &Bench, code: i32, extra: &[&str]) -> support::Run {
    let args = cmd(&["doctor", "-o", "json"], extra);
    bench.unchanged(|| bench.run(&args).code(code))
}

/// Asserts the schema check of an unrecognised schema: the same words as every command's
/// error, the other checks skipped, the configured backend still shown.
#[track_caller]
fn assert_schema_problem(run: &support::Run, found: &str, message: &str) {
    let schema = doctor_check(run, "schema");
    assert_eq!(json!([schema["status"], schema["details"]["found"]]), json!(["problem", found]));
    assert!(text_of(&schema, "message").contains(message), "{}", run.stdout);
    let v = run.json();
    assert_eq!(v["healthy"], false);
    let checks = v["checks"].as_array().unwrap();
    let middle: std::collections::BTreeSet<&str> =
        checks[1..checks.len() - 1].iter().map(|c| text_of(c, "status")).collect();
    assert_eq!(middle, ["skipped"].into_iter().collect());
    let backend = doctor_check(run, "backend");
    assert_eq!(backend["status"], "info");
    assert!(text_of(&backend, "message").contains("schema is not recognised"), "{backend}");
    assert!(backend["details"].get("dialect").is_some(), "{backend}");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", run.stderr);
    assert!(lines[0].starts_with("error: ") && lines[0].contains(message), "{}", run.stderr);
}

/// Asserts one problem check of a damaged store: its status, count and plain words, and the
/// one `error:` line naming it.
#[track_caller]
fn assert_problem(run: &support::Run, name: &str, count: u64, message: &str) {
    let check = doctor_check(run, name);
    assert_eq!(fields(&check, &["status", "count"]), json!(["problem", count]));
    let text = text_of(&check, "message");
    assert!(text.contains(message), "{name} message {text} lacks {message:?}");
    assert_eq!(run.json()["healthy"], false);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one stderr line: {}", run.stderr);
    assert!(
        lines[0].starts_with("error: doctor found") && lines[0].contains(&format!("{name} ({count})")),
        "{}",
        run.stderr
    );
}

/// A metastore for export tests: task rows of two runs (mapped, expired, never expiring, an
/// external reference, a value that is not JSON) and asset rows, one of them written by a task.
fn seeded_for_export(d: Dialect) -> Bench {
    let bench = with_run(d);
    bench.add_dag_run_with(DAG, "r2", &["other"]);
    bench.insert_task_rows(
        DAG,
        RUN,
        &[
            ("load", -1, "k", r#"{"a": 1.0, "u": "\u00e9"}"#, "2026-11-01 10:00:00.123456", None),
            (
                "load",
                -1,
                "broken",
                "not json \\ é",
                "2026-11-01 10:00:00.000001",
                Some("2037-12-01 00:00:00.000000"),
            ),
            ("load", 0, "m", "[1, 2]", "2026-11-02 10:00:00.000000", Some("2030-01-01 00:00:00.500000")),
        ],
    );
    bench.insert_task_rows(
        DAG,
        "r2",
        &[
            ("other", -1, "old", "1", "2026-01-01 00:00:00.000000", Some("2026-01-02 00:00:00.000000")),
            (
                "other",
                -1,
                "ref",
                r#"{"__airflow_state_ref__": "s3://b/1"}"#,
                "2026-11-03 00:00:00.000000",
                None,
            ),
        ],
    );
    let orders = bench.add_asset("orders", "s3://warehouse/orders", true);
    let legacy = bench.add_asset("legacy", "s3://warehouse/legacy", false);
    assert_eq!(legacy, 2);
    let k = bench.key_col();
    bench.exec(&format!(
        "INSERT INTO asset_state_store (asset_id, {k}, value, updated_at, last_updated_by_kind, last_updated_by_dag_id, \
         last_updated_by_run_id, last_updated_by_task_id, last_updated_by_map_index) VALUES \
         ({orders}, 'from_task', '\"x\"', {}, 'task', {}, {}, 'load', 3), \
         ({orders}, 'from_api', '{{\"n\": 2}}', {}, 'api', NULL, NULL, NULL, NULL), \
         ({legacy}, 'cursor', '17', {}, 'watcher', NULL, NULL, NULL, NULL)",
        bench.ts_lit(Some("2026-11-04 01:02:03.456789")),
        bench.lit(DAG),
        bench.lit(RUN),
        bench.ts_lit(Some("2026-11-05 00:00:00.000000")),
        bench.ts_lit(Some("2026-10-01 00:00:00.000000")),
    ));
    bench
}

/// A database and an export of it (with one more row, whose dag run is gone) that then
/// differs from it: `k` was written since (newer), `m` was changed to an older row, and `old` was
/// deleted. The five other rows are as in the file.
fn conflicting_import(d: Dialect) -> (Bench, String) {
    let bench = seeded_for_export(d);
    let export = bench.run(&["export"]).success().stdout;
    let gone =
        export.lines().next().unwrap().replace(&format!("\"dag_id\": \"{DAG}\""), "\"dag_id\": \"gone_dag\"");
    let file = bench.dir.path().join("conflicts.jsonl");
    std::fs::write(&file, format!("{export}{gone}\n")).unwrap();
    bench.run(&cmd(&["set", "k", "\"fresh\""], &task(&[]))).success();
    let k = bench.key_col();
    bench.exec(&format!(
        "UPDATE task_state_store SET value = '\"stale\"', updated_at = {} WHERE {k} = 'm'",
        bench.ts_lit(Some("2020-01-01 00:00:00.000000"))
    ));
    bench.exec(&format!("DELETE FROM task_state_store WHERE {k} = 'old'"));
    let file = file.to_str().unwrap().to_string();
    (bench, file)
}

contract! {
    // ------------------------------------------------------------ archives of clean and clear

    fn clean_archive_holds_the_deleted_rows_and_import_restores_them(d: Dialect) {
        for batch_size in ["2", "0"] {
            let bench = seeded_for_export(d);
            let expired: Vec<String> = (0..5).map(|i| format!("e{i}")).collect();
            for key in &expired {
                bench.insert_task_row(DAG, RUN, "load", 1, key, "\"x\"", "2026-01-01 00:00:00.000000", Some("2026-01-01 00:00:00.000001"));
            }
            let before = bench.content_snapshot();
            let archive = bench.dir.path().join("clean-archive.jsonl");
            let archive = archive.to_str().unwrap();

            let run = bench.run(&["clean", "--archive", archive, "--batch-size", batch_size, "-o", "json"]).success();
            assert_eq!(fields(&run.json(), &["task_rows_deleted", "asset_rows_deleted", "archived_rows"]), json!([6, 1, 7]), "batch size {batch_size}");
            assert!(run.stderr.contains(&format!("; archived 7 row(s) to {archive}")), "{}", run.stderr);
            let text = std::fs::read_to_string(archive).unwrap();
            assert_eq!(text.lines().count(), 7, "{text}");
            assert!(text.contains("\"key\": \"old\"") && text.contains("\"key\": \"cursor\""), "{text}");
            assert_eq!(bench.content_snapshot().len(), before.len() - 7);

            bench.run(&["import", archive]).success().stderr_has("restored 6 task row(s) and 1 asset row(s)");
            assert_eq!(bench.content_snapshot(), before, "batch size {batch_size} ({d:?})");

            // A second clean appends to the same archive: nothing archived earlier is lost.
            bench.run(&["clean", "--archive", archive, "--batch-size", batch_size]).success();
            assert_eq!(std::fs::read_to_string(archive).unwrap().lines().count(), 14);
        }
    }

    fn importing_a_clean_archive_never_overwrites_a_row_written_since(d: Dialect) {
        let bench = seeded_for_export(d);
        let archive = bench.dir.path().join("a.jsonl");
        let archive = archive.to_str().unwrap();
        bench.run(&["clean", "--archive", archive, "--no-orphans"]).success();
        let scope = ["--dag-id", DAG, "--run-id", "r2", "--task-id", "other"];
        bench.run(&cmd(&["set", "old", "\"refreshed\""], &scope)).success();
        let fresh = stored(&bench, "old");
        let run = bench.run(&["import", archive, "-o", "json"]).success();
        assert_eq!(fields(&run.json(), &["task_rows", "kept_newer"]), json!([0, 1]));
        assert_eq!(stored(&bench, "old"), fresh);
    }

    fn clear_archive_then_import_restores_the_scope(d: Dialect) {
        let bench = seeded_for_export(d);
        let before = bench.content_snapshot();
        let archive = bench.dir.path().join("clear-archive.jsonl");
        let archive = archive.to_str().unwrap();
        bench.run(&cmd(&["clear", "--all-map-indices", "--yes", "--archive", archive], &task(&[])))
            .success()
            .stderr_has("removed 3 keys");
        bench.run(&["clear", "--asset", "orders", "--yes", "--archive", archive]).success().stderr_has("removed 2 keys");
        assert_eq!(std::fs::read_to_string(archive).unwrap().lines().count(), 5);
        assert_eq!(count(&bench, "task_state_store"), 2);
        bench.run(&["import", archive]).success();
        assert_eq!(bench.content_snapshot(), before, "{d:?}");
    }

    fn an_archive_that_cannot_be_written_deletes_nothing(d: Dialect) {
        let bench = seeded_for_export(d);
        let archive = bench.dir.path().join("no-such-dir").join("a.jsonl");
        let archive = archive.to_str().unwrap();
        bench.unchanged(|| bench.run(&["clean", "--archive", archive]).fails(6, "archive"));
        bench.unchanged(|| {
            bench.run(&cmd(&["clear", "--yes", "--archive", archive], &task(&[]))).fails(6, "archive")
        });
        bench.run(&["export", "--file", archive]).fails(6, "no-such-dir");
    }

    // ------------------------------------------------------------ export and import

    fn export_clear_import_round_trip_restores_identical_rows(d: Dialect) {
        let bench = seeded_for_export(d);
        let before = bench.content_snapshot();
        assert!(before.len() >= 7, "{before:?}");
        let file = bench.dir.path().join("backup.jsonl");
        let file = file.to_str().unwrap();
        bench.run(&["export", "--file", file]).success().stderr_has("exported 5 task row(s) and 3 asset row(s)");

        bench.run(&cmd(&["clear", "--all-map-indices", "--yes"], &task(&[]))).success();
        bench.run(&["clear", "--dag-id", DAG, "--run-id", "r2", "--task-id", "other", "--yes"]).success();
        bench.run(&["clear", "--asset", "orders", "--yes"]).success();
        bench.run(&["clear", "--asset-id", "2", "--yes"]).success();
        assert_eq!(count(&bench, "task_state_store") + count(&bench, "asset_state_store"), 0);

        let run = bench.run(&["import", file, "-o", "json"]).success();
        let v = run.json();
        assert_eq!(fields(&v, &["task_rows", "asset_rows", "kept_newer", "skipped_missing"]), json!([5, 3, 0, 0]));
        assert_eq!(bench.content_snapshot(), before, "restored rows differ ({d:?})");

        // Importing again changes nothing: every row is as new as the stored one.
        bench.unchanged(|| bench.run(&["import", file]).success().stderr_has("restored 5 task row(s) and 3 asset row(s)"));
    }

    fn export_selects_like_list_and_writes_the_stored_text(d: Dialect) {
        let bench = seeded_for_export(d);
        let run = bench.run(&["export", "--dag-id", DAG, "--task-id", "load"]).success();
        let v = support::json_lines(&run.stdout);
        let mut rows: Vec<Value> = v.iter().map(|e| fields(e, &["kind", "map_index", "key"])).collect();
        rows.sort_by_key(Value::to_string);
        assert_eq!(rows, [json!(["task", -1, "broken"]), json!(["task", -1, "k"]), json!(["task", 0, "m"])]);
        let line = |key: &str| v.iter().find(|e| e["key"] == key).unwrap();
        assert_eq!(line("broken")["value"], "not json \\ é");
        assert_eq!(line("k")["value"], r#"{"a": 1.0, "u": "\u00e9"}"#);
        assert_eq!(fields(line("k"), &["updated_at", "expires_at"]), json!(["2026-11-01T10:00:00.123456Z", null]));
        assert!(run.stderr.contains("exported 3 task row(s) and 0 asset row(s) to stdout"), "{}", run.stderr);

        let run = bench.run(&["export", "--assets"]).success();
        let v = support::json_lines(&run.stdout);
        let from_task: Vec<Value> = v
            .iter()
            .filter(|e| e["key"] == "from_task")
            .map(|e| fields(e, &["kind", "asset_name", "key", "last_updated_by_kind", "last_updated_by_dag_id", "last_updated_by_map_index"]))
            .collect();
        assert_eq!(from_task, [json!(["asset", "orders", "from_task", "task", DAG, 3])]);
        let run = bench.run(&["export", "--expired"]).success();
        assert_eq!(run.stdout.lines().count(), 1, "{}", run.stdout);
        for task_filter in [&["--dag-id", DAG][..], &["--expired"][..]] {
            let args = cmd(&["export", "--asset", "orders"], task_filter);
            bench.run(&args).fails(2, "not with one asset").stdout_is("");
        }
        assert!(run.stdout.contains("\"key\": \"old\""), "{}", run.stdout);
        let run = bench.run(&["export", "--external"]).success();
        assert_eq!(run.stdout.lines().count(), 1, "{}", run.stdout);
        assert!(run.stdout.contains("\"key\": \"ref\""), "{}", run.stdout);
    }

    fn export_pages_through_more_rows_than_a_page(d: Dialect) {
        let bench = with_run(d);
        let keys: Vec<String> = (0..2345).map(|i| format!("k{i:05}")).collect();
        let rows: Vec<_> = keys.iter().map(|k| ("t", -1, k.as_str(), "1", "2026-11-01 00:00:00.000000", None)).collect();
        bench.insert_task_rows(DAG, RUN, &rows);
        let run = bench.run(&["export", "--dag-id", DAG]).success();
        let mut exported: Vec<&str> =
            run.stdout.lines().map(|l| l.split("\"key\": \"").nth(1).unwrap().split('"').next().unwrap()).collect();
        exported.sort_unstable();
        exported.dedup();
        assert_eq!(exported.len(), 2345);
        assert!(run.stderr.contains("exported 2345 task row(s)"), "{}", run.stderr);
    }

    fn import_refuses_bad_lines_and_missing_parents_without_changing_anything(d: Dialect) {
        let bench = seeded_for_export(d);
        let export = bench.run(&["export"]).success().stdout;
        let lines: Vec<&str> = export.lines().collect();
        let file = bench.dir.path().join("in.jsonl");

        let malformed = format!("{}\n{{\"kind\": \"task\"\n", lines[0]);
        std::fs::write(&file, &malformed).unwrap();
        bench.unchanged(|| bench.run(&["import", file.to_str().unwrap()]).fails(2, "line 2: not JSON"));

        // A field given twice is refused, as an unknown one is: json.loads keeps the last, and
        // a line that says two things may restore a row nobody meant.
        let twice = format!("{}, \"key\": \"another\"}}", lines[1].strip_suffix('}').unwrap());
        std::fs::write(&file, format!("{}\n{twice}\n", lines[0])).unwrap();
        bench.unchanged(|| {
            bench.run(&["import", file.to_str().unwrap()]).fails(2, "line 2: \"key\" is given twice")
        });

        let gone = lines[1].replace(&format!("\"dag_id\": \"{DAG}\""), "\"dag_id\": \"gone_dag\"");
        std::fs::write(&file, format!("{}\n{gone}\n", lines[0])).unwrap();
        bench.exec("DELETE FROM task_state_store");
        bench.unchanged(|| {
            bench.run(&["import", file.to_str().unwrap()]).fails(1, "line 2: no dag run found for dag_id=\"gone_dag\"")
        });
        bench.unchanged(|| {
            bench.run(&["import", "--dry-run", file.to_str().unwrap(), "--skip-missing"])
                .success()
                .stderr_has("would restore 1 task row(s) and 0 asset row(s) from")
                .stderr_has("1 skipped")
        });
        bench.run(&["import", file.to_str().unwrap(), "--skip-missing", "-o", "plain"]).success().stdout_is("1\n");
        assert_eq!(count(&bench, "task_state_store"), 1);
    }

    fn import_keeps_a_newer_stored_row(d: Dialect) {
        let bench = seeded_for_export(d);
        let export = bench.run(&["export", "--dag-id", DAG, "--task-id", "load"]).success().stdout;
        bench.run(&cmd(&["set", "k", "\"fresh\""], &task(&[]))).success();
        let fresh = stored(&bench, "k");
        let run = bench.run_with_stdin(&["import", "-", "-o", "json"], &export).success();
        assert_eq!(fields(&run.json(), &["task_rows", "kept_newer"]), json!([2, 1]));
        assert!(run.stderr.contains("1 kept newer"), "{}", run.stderr);
        assert_eq!(stored(&bench, "k"), fresh);
    }

    /// The four --on-conflict modes on one file against the same database: a row the database
    /// holds newer (`k`), one it holds older (`m`), one it lacks (`old`), five as new as the
    /// stored ones, and one whose dag run is gone (--skip-missing). A dry run counts exactly
    /// what the import then does, and `fail` refuses the file naming its first stored row.
    fn import_on_conflict_modes_count_each_outcome(d: Dialect) {
        let doc_keys = ["dry_run", "on_conflict", "task_rows", "asset_rows", "inserted", "replaced", "kept_newer", "skipped_existing", "skipped_missing", "skipped_damaged"];
        let counted = &doc_keys[2..9];
        // task_rows, asset_rows, inserted, replaced, kept_newer, skipped_existing, skipped_missing
        for (mode, counts, k, m) in [
            ("newer", json!([4, 3, 1, 6, 1, 0, 1]), "\"fresh\"", "[1, 2]"),
            ("overwrite", json!([5, 3, 1, 7, 0, 0, 1]), "{\"a\": 1.0, \"u\": \"\\u00e9\"}", "[1, 2]"),
            ("skip", json!([1, 0, 1, 0, 0, 7, 1]), "\"fresh\"", "\"stale\""),
        ] {
            for batched in [true, false] {
                let (bench, file) = conflicting_import(d);
                let args = ["import", &file, "--skip-missing", "--on-conflict", mode, "-o", "json"];
                let dry = bench.unchanged(|| bench.run(&cmd(&args, &["--dry-run"])).success());
                let v = dry.json();
                assert_eq!(keys(&v), doc_keys, "{mode}");
                assert_eq!(fields(&v, &["dry_run", "on_conflict"]), json!([true, mode]));
                assert_eq!(fields(&v, counted), counts, "dry run, --on-conflict {mode} ({d:?})");
                // Two rows a transaction, and the default: the whole file in one statement per table.
                let batch: &[&str] = if batched { &["--batch-size", "2"] } else { &[] };
                let run = bench.run(&cmd(&args, batch)).success();
                let v = run.json();
                assert_eq!(fields(&v, &["dry_run", "on_conflict"]), json!([false, mode]));
                assert_eq!(fields(&v, counted), counts, "--on-conflict {mode} ({d:?}, batched: {batched})");
                let expected = if d == Dialect::Mysql { k.replace('\\', "\\\\") } else { k.to_string() };
                assert_eq!(stored(&bench, "k").0, expected, "{mode}");
                assert_eq!(stored(&bench, "m").0, m, "{mode}");
                assert_eq!(stored(&bench, "old").0, "1", "{mode}");
                if mode == "newer" {
                    assert_eq!(
                        run.stderr,
                        format!("import: restored 4 task row(s) and 3 asset row(s) from {file} (1 inserted, 6 replaced); 1 kept newer (the stored row is newer), 1 skipped (dag run or asset missing)\n")
                    );
                }
                if mode == "skip" {
                    run.stderr_has("(1 inserted, 0 replaced); 7 skipped (the key is already stored), 1 skipped (dag run or asset missing)");
                }
            }
        }

        let (bench, file) = conflicting_import(d);
        let lines: Vec<Value> = std::fs::read_to_string(&file).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        // The first line whose key is stored: every line but `old`'s and the gone dag's.
        let (at, first) = lines.iter().enumerate().find(|(_, l)| l["key"] != "old" && l["dag_id"] != "gone_dag").unwrap();
        assert_eq!(first["kind"], "task", "{first}");
        let message = format!(
            "error: {file} line {}: task key \"{}\" of dag_id=\"{}\" run_id=\"{}\" task_id=\"{}\" map_index={} is already stored; nothing was imported (--on-conflict fail)\n",
            at + 1,
            first["key"].as_str().unwrap(),
            first["dag_id"].as_str().unwrap(),
            first["run_id"].as_str().unwrap(),
            first["task_id"].as_str().unwrap(),
            first["map_index"]
        );
        for extra in [&[][..], &["--dry-run"][..]] {
            let run = bench.unchanged(|| bench.run(&cmd(&["import", &file, "--skip-missing", "--on-conflict", "fail"], extra)).code(9));
            assert_eq!(run.stderr, message);
            assert_eq!(run.stdout, "");
        }
        // Without the rows already stored, `fail` imports what is left.
        let missing: String = lines.iter().filter(|l| l["key"] == "old").map(|l| format!("{l}\n")).collect();
        let run = bench.run_with_stdin(&["import", "-", "--on-conflict", "fail", "-o", "json"], &missing).success();
        assert_eq!(fields(&run.json(), counted), json!([1, 0, 1, 0, 0, 0, 0]));
        bench.unchanged(|| bench.run_with_stdin(&["import", "-", "--on-conflict", "fail"], &missing).fails(9, "stdin line 1: task key \"old\""));
    }

    /// A file may hold a key twice (clean appends to its archive): the rows before count as
    /// stored, in a dry run as in the import itself, and `fail` refuses the repetition.
    fn import_on_conflict_follows_the_keys_the_file_repeats(d: Dialect) {
        let bench = seeded_for_export(d);
        let export = bench.run(&["export", "--dag-id", DAG, "--run-id", "r2"]).success().stdout;
        let line: Value = serde_json::from_str(export.lines().find(|l| l.contains("\"key\": \"old\"")).unwrap()).unwrap();
        let mut later = line.clone();
        later["value"] = json!("2");
        later["updated_at"] = json!("2026-06-01T00:00:00.000000Z");
        let forward = format!("{line}\n{later}\n");
        let backward = format!("{later}\n\n{line}\n");
        // inserted, replaced, kept_newer, skipped_existing; and the value stored after
        for (file, mode, counts, value) in [
            (&forward, "newer", json!([1, 1, 0, 0]), "2"),
            (&backward, "newer", json!([1, 0, 1, 0]), "2"),
            (&forward, "overwrite", json!([1, 1, 0, 0]), "2"),
            (&backward, "overwrite", json!([1, 1, 0, 0]), "1"),
            (&forward, "skip", json!([1, 0, 0, 1]), "1"),
            (&backward, "skip", json!([1, 0, 0, 1]), "2"),
        ] {
            bench.exec(&format!("DELETE FROM task_state_store WHERE {} = 'old'", bench.key_col()));
            let args = ["import", "-", "--on-conflict", mode, "--batch-size", "1", "-o", "json"];
            let dry = bench.unchanged(|| bench.run_with_stdin(&cmd(&args, &["--dry-run"]), file).success());
            let counted = ["inserted", "replaced", "kept_newer", "skipped_existing"];
            assert_eq!(fields(&dry.json(), &counted), counts, "dry run, {mode}: {file}");
            let run = bench.run_with_stdin(&args, file).success();
            assert_eq!(fields(&run.json(), &counted), counts, "{mode}: {file}");
            assert_eq!(stored(&bench, "old").0, value, "{mode}: {file}");
        }
        bench.exec(&format!("DELETE FROM task_state_store WHERE {} = 'old'", bench.key_col()));
        let run = bench.unchanged(|| bench.run_with_stdin(&["import", "-", "--on-conflict", "fail"], &backward).code(9));
        assert_eq!(
            run.stderr,
            "error: stdin line 3: task key \"old\" of dag_id=\"incremental_orders\" run_id=\"r2\" task_id=\"other\" map_index=-1 is also on line 1; nothing was imported (--on-conflict fail)\n"
        );
    }

    /// Archives of clean and clear restore with every mode; `fail` restores one once only.
    fn import_on_conflict_restores_clean_and_clear_archives(d: Dialect) {
        let bench = seeded_for_export(d);
        let before = bench.content_snapshot();
        let archive = bench.dir.path().join("archive.jsonl");
        let archive = archive.to_str().unwrap();
        bench.run(&["clean", "--archive", archive]).success();
        bench.run(&cmd(&["clear", "--all-map-indices", "--yes", "--archive", archive], &task(&[]))).success();
        let run = bench.run(&["import", archive, "--on-conflict", "fail", "-o", "json"]).success();
        assert_eq!(fields(&run.json(), &["task_rows", "asset_rows", "inserted", "replaced"]), json!([4, 1, 5, 0]));
        assert_eq!(bench.content_snapshot(), before, "{d:?}");
        bench.unchanged(|| bench.run(&["import", archive, "--on-conflict", "fail"]).fails(9, "line 1: "));
        let run = bench.unchanged(|| bench.run(&["import", archive, "--on-conflict", "skip", "-o", "json"]).success());
        assert_eq!(fields(&run.json(), &["inserted", "skipped_existing"]), json!([0, 5]));
        let run = bench.unchanged(|| bench.run(&["import", archive, "--on-conflict", "overwrite", "-o", "plain"]).success());
        assert_eq!(run.stdout, "5\n");
    }

    // ------------------------------------------------------------ set and get
    // ------------------------------------------------------------ external references

    fn external_references_are_shown_not_decoded(d: Dialect) {
        let bench = with_run(d);
        let reference = r#"{"__airflow_state_ref__": "s3://bucket/state/42"}"#;
        bench.run(&cmd(&["set", "big", reference], &task(&[]))).success();
        bench.run(&cmd(&["set", "small", "{\"__airflow_state_ref__\": 7}"], &task(&[]))).success();
        bench.run(&cmd(&["set", "two", "{\"__airflow_state_ref__\": \"x\", \"b\": 1}"], &task(&[]))).success();
        bench.run(&cmd(&["set", "plain", "1"], &task(&[]))).success();
        let asset = bench.add_asset("orders", "s3://warehouse/orders", true);
        bench.run(&["set", "cursor", "{\"__airflow_state_ref__\": \"gs://a/b\"}", "--asset", "orders"]).success();
        bench.run(&["set", "other", "\"__airflow_state_ref__\"", "--asset", "orders"]).success();

        let run = bench.run(&cmd(&["get", "big"], &task(&[]))).success();
        assert!(run.stdout.contains("→ ref: s3://bucket/state/42"), "{}", run.stdout);
        let v = bench.run(&cmd(&["get", "big", "-o", "json"], &task(&[]))).success().json();
        assert_eq!(v["external_ref"], "s3://bucket/state/42");
        assert_eq!(v["value"], json!({"__airflow_state_ref__": "s3://bucket/state/42"}));
        let v = bench.run(&cmd(&["get", "small", "-o", "json"], &task(&[]))).success().json();
        assert_eq!(v["external_ref"], Value::Null);

        let v = bench.run(&["list", "--external", "-o", "json"]).success().json();
        assert_eq!(each(&v, "key"), [&json!("big")]);
        assert_eq!(each(&v, "external_ref"), [&json!("s3://bucket/state/42")]);
        let v = bench.run(&["list", "-o", "json"]).success().json();
        let mut listed = each(&v, "key");
        listed.sort_by_key(|key| key.as_str());
        assert_eq!(listed, [&json!("big"), &json!("plain"), &json!("small"), &json!("two")]);
        let plain: Vec<&Value> = v.as_array().unwrap().iter().filter(|e| e["key"] == "plain").map(|e| &e["external_ref"]).collect();
        assert_eq!(plain, [&Value::Null]);

        let v = bench.run(&["list", "--assets", "--external", "-o", "json"]).success().json();
        let rows: Vec<Value> = v.as_array().unwrap().iter().map(|e| fields(e, &["asset_id", "key", "external_ref"])).collect();
        assert_eq!(rows, [json!([asset, "cursor", "gs://a/b"])]);
        let v = bench.run(&["list", "--asset", "orders", "--external", "-o", "plain"]).success();
        assert_eq!(v.stdout, format!("{asset}\torders\tcursor\t{{\"__airflow_state_ref__\": \"gs://a/b\"}}\n"));
        let run = bench.run(&["list", "--assets"]).success();
        assert!(run.stdout.contains("→ ref: gs://a/b"), "{}", run.stdout);
    }


    fn set_then_get_in_every_format(d: Dialect) {
        let bench = with_run(d);
        bench.run(&cmd(&["set", "watermark", "\"2026-11-28T00:00:00Z\""], &task(&[]))).success();

        bench.run(&cmd(&["get", "watermark", "-o", "plain"], &task(&[]))).success().stdout_is("2026-11-28T00:00:00Z\n");

        let run = bench.run(&cmd(&["get", "watermark", "-o", "json"], &task(&[]))).success();
        let v = run.json();
        assert_eq!(v["key"], "watermark");
        assert_eq!(v["value"], "2026-11-28T00:00:00Z");
        assert_eq!(fields(&v, &["dag_id", "run_id", "task_id", "map_index"]), json!([DAG, RUN, "load", -1]));
        let (updated_at, expires_at) = (text_of(&v, "updated_at"), text_of(&v, "expires_at"));
        assert!(updated_at.ends_with('Z') && expires_at > updated_at, "{v}");

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
        let python = python_dumps(&inputs);
        for (i, (input, expected)) in inputs.iter().zip(python).enumerate() {
            let key = format!("k{i}");
            bench.run(&cmd(&["set", &key, input], &task(&[]))).success();
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

    /// Airflow's REST API PATCH: the value and updated_at change, expires_at stays byte for
    /// byte, and the row is updated in place (same id), never deleted and inserted again.
    fn set_keep_expiry_changes_the_value_and_keeps_expires_at(d: Dialect) {
        let bench = with_run(d);
        bench.insert_task_rows(
            DAG,
            RUN,
            &[
                ("load", -1, "dated", "1", "2026-01-01 00:00:00.000000", Some("2031-02-03 04:05:06.123456")),
                ("load", -1, "forever", "\"a\"", "2026-01-01 00:00:00.000000", None),
            ],
        );
        let id = |key: &str| bench.scalar(&format!("SELECT id FROM task_state_store WHERE {} = {}", bench.key_col(), bench.lit(key)));
        let ids = (id("dated"), id("forever"));

        let run = bench.run(&cmd(&["set", "dated", "{\"n\": 2}", "--keep-expiry", "-o", "json"], &task(&[]))).success();
        let v = run.json();
        assert_eq!(fields(&v, &["key", "value", "expires_at", "expired"]), json!(["dated", {"n": 2}, "2031-02-03T04:05:06.123456Z", false]));
        let (value, updated, expires) = stored(&bench, "dated");
        assert_eq!((value.as_str(), expires.as_deref()), ("{\"n\": 2}", Some("2031-02-03 04:05:06.123456")));
        assert!(updated.as_str() > "2026-01-01 00:00:00.000000", "updated_at is stamped now: {updated}");
        assert_eq!(text_of(&v, "updated_at"), format!("{}Z", updated.replacen(' ', "T", 1)));

        bench.run(&cmd(&["set", "forever", "[1, 2]", "--keep-expiry", "-o", "plain"], &task(&[]))).success().stdout_is("");
        let (value, updated, expires) = stored(&bench, "forever");
        assert_eq!((value.as_str(), expires), ("[1, 2]", None));
        assert!(updated.as_str() > "2026-01-01 00:00:00.000000", "{updated}");

        assert_eq!((id("dated"), id("forever")), ids, "updated in place");
        assert_eq!(count(&bench, "task_state_store"), 2);
        if d == Dialect::Sqlite {
            // The stored text itself, not only its reading: Airflow's clean compares it as text.
            let raw = bench.scalar("SELECT expires_at || '|' || typeof(expires_at) FROM task_state_store WHERE \"key\" = 'dated'");
            assert_eq!(raw, "2031-02-03 04:05:06.123456|text");
        }

        // An expired key stays expired: said, not changed.
        bench.insert_task_row(DAG, RUN, "load", -1, "stale", "1", "2026-01-01 00:00:00.000000", Some("2026-01-02 00:00:00.000000"));
        bench
            .run(&cmd(&["set", "stale", "2", "--keep-expiry", "-o", "plain"], &task(&[])))
            .success()
            .stderr_has("warning: key \"stale\" expired at 2026-01-02T00:00:00.000000Z and --keep-expiry kept that expiry");
        assert_eq!(stored(&bench, "stale").2.as_deref(), Some("2026-01-02 00:00:00.000000"));
    }

    fn set_keep_expiry_of_a_missing_key_is_not_found_and_writes_nothing(d: Dialect) {
        let bench = with_run(d);
        bench.add_task_instance(DAG, RUN, "load", &[0]);
        bench.run(&cmd(&["set", "k", "1", "--map-index", "0"], &task(&[]))).success();
        let orders = bench.add_asset("orders", "s3://warehouse/orders", true);
        // The same key at another map index, or in another scope, is another key.
        let run = bench.unchanged(|| bench.run(&cmd(&["set", "k", "2", "--keep-expiry"], &task(&[]))).code(1));
        assert_eq!(
            run.stderr,
            format!("error: key \"k\" not found for task dag_id=\"{DAG}\" run_id=\"{RUN}\" task_id=\"load\" map_index=-1; --keep-expiry changes only an existing key\n")
        );
        assert_eq!(run.stdout, "");
        let run = bench.unchanged(|| bench.run(&["set", "k", "2", "--asset", "orders", "--keep-expiry"]).code(1));
        assert_eq!(
            run.stderr,
            format!("error: key \"k\" not found for asset \"orders\" (id {orders}); --keep-expiry changes only an existing key\n")
        );
        assert_eq!(count(&bench, "asset_state_store"), 0);
        assert_eq!(stored(&bench, "k").0, "1");
    }

    /// Everything else `set` checks still applies, and --keep-expiry takes no expiry of its own.
    fn set_keep_expiry_keeps_every_check_of_set(d: Dialect) {
        let mut bench = with_run(d);
        bench.run(&cmd(&["set", "k", "1", "--expires-at", "2031-01-01T00:00:00Z"], &task(&[]))).success();
        for (extra, needle) in [
            (&["--retention", "7d"][..], "error: the argument '--keep-expiry' cannot be used with '--retention <DURATION>'"),
            (&["--expires-at", "2032-01-01"][..], "error: the argument '--keep-expiry' cannot be used with '--expires-at <TIMESTAMP>'"),
        ] {
            bench.unchanged(|| bench.run(&cmd(&cmd(&["set", "k", "2", "--keep-expiry"], extra), &task(&[]))).fails(2, needle));
        }
        for (value, needle) in [("nope", "not JSON"), ("null", "null cannot be stored"), ("NaN", "NaN")] {
            bench.unchanged(|| bench.run(&cmd(&["set", "k", value, "--keep-expiry"], &task(&[]))).fails(2, needle));
        }
        bench.env("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "4");
        bench.unchanged(|| bench.run(&cmd(&["set", "k", "12345", "--keep-expiry"], &task(&[]))).fails(2, "max_value_storage_bytes"));
        bench.run(&cmd(&["set", "k", "12345", "--keep-expiry", "--allow-large"], &task(&[]))).success();
        assert_eq!(stored(&bench, "k").0, "12345");
        bench.env("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "0");

        // A key written without its task instance needs the flag to be updated too.
        let early = ["--dag-id", DAG, "--run-id", RUN, "--task-id", "report"];
        bench.run(&cmd(&["set", "e", "1", "--retention", "never", "--allow-missing-task-instance"], &early)).success();
        bench.unchanged(|| bench.run(&cmd(&["set", "e", "2", "--keep-expiry"], &early)).fails(1, "task instance not found"));
        bench.run(&cmd(&["set", "e", "2", "--keep-expiry", "--allow-missing-task-instance", "-o", "plain"], &early)).success();
        bench.run(&cmd(&["get", "e", "-o", "plain"], &early)).success().stdout_is("2\n");
        bench.unchanged(|| bench.run(&["set", "k", "2", "--keep-expiry", "--dag-id", DAG, "--run-id", "nope", "--task-id", "load"]).fails(1, "no dag run found"));
        // default_retention_days is not applied.
        bench.env("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", "5");
        bench.run(&cmd(&["set", "k", "3", "--keep-expiry", "-o", "plain"], &task(&[]))).success();
        assert_eq!(stored(&bench, "k").2.as_deref(), Some("2031-01-01 00:00:00.000000"));
    }

    /// An asset key has no expiry: --keep-expiry is a set (an `api` write) of a key that exists.
    fn set_keep_expiry_of_an_asset_key_is_an_api_write_of_an_existing_key(d: Dialect) {
        let bench = seeded_for_export(d);
        let k = bench.key_col();
        let writer = |key: &str| {
            bench.scalar(&format!(
                "SELECT value, last_updated_by_kind, last_updated_by_dag_id, last_updated_by_run_id, last_updated_by_task_id, last_updated_by_map_index \
                 FROM asset_state_store WHERE {k} = {}",
                bench.lit(key)
            ))
        };
        assert_eq!(writer("from_task"), format!("\"x\"|task|{DAG}|{RUN}|load|3"));
        let run = bench.run(&["set", "from_task", "\"y\"", "--asset", "orders", "--keep-expiry", "-o", "json"]).success();
        assert_eq!(fields(&run.json(), &["key", "value", "last_updated_by_kind"]), json!(["from_task", "y", "api"]));
        assert_eq!(writer("from_task"), "\"y\"|api|NULL|NULL|NULL|NULL");
        let updated = bench.scalar(&format!("SELECT {} FROM asset_state_store WHERE {k} = 'from_task'", bench.ts("updated_at")));
        assert!(updated.as_str() > "2026-11-04 01:02:03.456789", "{updated}");
        bench.unchanged(|| bench.run(&["set", "x", "1", "--asset", "orders", "--keep-expiry", "--retention", "7d"]).fails(2, "cannot be used with"));
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
        // Python's json.loads reads the same value from our output as from Airflow's text.
        let check = "import json,sys; print(json.loads(sys.argv[1])['value'] == json.loads(sys.argv[2]))";
        let python = std::process::Command::new("python3").args(["-c", check, &run.stdout, text]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&python.stdout), "True\n", "{}", String::from_utf8_lossy(&python.stderr));
        let v = run.json();
        assert_eq!(fields(&v, &["updated_at", "expires_at"]), json!(["2026-11-28T10:00:00.000001Z", null]));
        assert_eq!(v["value"]["big"].to_string(), "123456789012345678901234567890");
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
        bench.add_task_instance(DAG, RUN, "load", &[0, 1]);
        for (key, idx) in [("a", "-1"), ("b", "-1"), ("c", "0"), ("d", "1")] {
            bench.run(&cmd(&["set", key, "1", "--map-index", idx], &task(&[]))).success();
        }
        bench.unchanged(|| bench.run(&cmd(&["clear"], &task(&[]))).fails(2, "--yes"));
        bench.run(&cmd(&["clear", "--yes", "-o", "json"], &task(&[]))).success().stdout_is("{\"deleted\": 2}\n");
        bench.run(&cmd(&["clear", "--yes", "--all-map-indices", "-o", "plain"], &task(&[]))).success().stdout_is("2\n");
        bench.run(&cmd(&["clear", "--yes", "-o", "plain"], &task(&[]))).success().stdout_is("0\n");
    }

    // ------------------------------------------------------------ task instances

    /// As Airflow's REST API answers 404 "Task instance not found": a set, delete or clear of a
    /// task instance the scheduler never created is refused, with the run's tasks or the
    /// task's map indexes as a hint, and nothing is written; an explicit flag writes anyway.
    fn writes_need_the_task_instance(d: Dialect) {
        let bench = with_run(d);
        bench.add_dag_run_with(DAG, "r2", &["extract"]);
        bench.add_task_instance(DAG, "r2", "transform", &[0, 1, 2]);
        bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
        let r2 = |task_id: &'static str| vec!["--dag-id", DAG, "--run-id", "r2", "--task-id", task_id];

        let refused = [
            (cmd(&["set", "k", "1"], &r2("extrac")), "task instance not found", "tasks: \"extract\", \"transform\""),
            (cmd(&["set", "k", "1", "--map-index", "3"], &r2("transform")), "map_index=3", "map indexes 0 to 2"),
            (cmd(&["set", "k", "1"], &task(&["--map-index", "0"])), "map_index=0", "\"load\" is not mapped"),
            (cmd(&["delete", "k"], &r2("load")), "task instance not found", "delete the key anyway"),
            (cmd(&["clear", "--yes"], &r2("load")), "task instance not found", "clear its keys anyway"),
            (cmd(&["clear", "--yes", "--all-map-indices"], &r2("load")), "no task instance of", "\"extract\""),
        ];
        for (args, what, hint) in refused {
            let run = bench.unchanged(|| bench.run(&args).fails(1, what));
            let run = run.stderr_has(hint).stderr_has("--allow-missing-task-instance");
            assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        }
        // The unmapped index of a mapped task is told to give --map-index (shell_and_scripts).
        bench
            .unchanged(|| bench.run(&cmd(&["set", "k", "1"], &r2("transform"))).fails(1, "map_index=-1"))
            .stderr_has("3 instances, map indexes 0 to 2; give --map-index N");
        // The instances that exist take writes; all map indices need any instance of the task.
        bench.run(&cmd(&["set", "k", "1", "--map-index", "2"], &r2("transform"))).success();
        bench.run(&cmd(&["clear", "--yes", "--all-map-indices", "-o", "plain"], &r2("transform"))).success().stdout_is("1\n");
        bench.run(&cmd(&["delete", "k", "-o", "plain"], &task(&[]))).success().stdout_is("1\n");

        // Ahead of the scheduler, on request: a warning, then the key is there to read.
        bench
            .run(&cmd(&["set", "early", "7", "--allow-missing-task-instance"], &r2("report")))
            .success()
            .stderr_has("warning: task instance not found");
        bench.run(&cmd(&["get", "early", "-o", "plain"], &r2("report"))).success().stdout_is("7\n");
        bench.unchanged(|| bench.run(&cmd(&["delete", "early"], &r2("report"))).fails(1, "task instance not found"));
        bench
            .run(&cmd(&["delete", "early", "--allow-missing-task-instance", "-o", "plain"], &r2("report")))
            .success()
            .stdout_is("1\n");

        // Many tasks are counted, not listed; a run without any says so.
        let many: Vec<String> = (0..11).map(|i| format!("task_{i:02}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        bench.add_dag_run_with(DAG, "r3", &many);
        bench.add_dag_run(DAG, "r4");
        let run = bench.run(&["set", "k", "1", "--dag-id", DAG, "--run-id", "r3", "--task-id", "x"]).fails(1, "has 11 tasks");
        assert!(!run.stderr.contains("task_00"), "{}", run.stderr);
        bench.run(&["set", "k", "1", "--dag-id", DAG, "--run-id", "r4", "--task-id", "x"]).fails(1, "no task instances yet");
        // A missing dag run is still named as such, before any task instance.
        bench.run(&["set", "k", "1", "--dag-id", DAG, "--run-id", "nope", "--task-id", "x"]).fails(1, "no dag run found");
    }

    /// `get` without --map-index asks for the unmapped instance; on a mapped task it says so.
    fn get_on_a_mapped_task_hints_at_map_index(d: Dialect) {
        let bench = with_run(d);
        bench.add_task_instance(DAG, RUN, "transform", &[0, 1]);
        let mapped = ["--dag-id", DAG, "--run-id", RUN, "--task-id", "transform"];
        bench.run(&cmd(&["set", "offset", "4096", "--map-index", "1"], &mapped)).success();
        bench.run(&cmd(&["get", "offset"], &mapped)).fails(1, "is mapped (map indexes 0 to 1): give --map-index");
        let run = bench.run(&cmd(&["get", "offset", "--map-index", "0"], &mapped)).fails(1, "not found");
        assert!(!run.stderr.contains("give --map-index"), "{}", run.stderr);
        let run = bench.run(&cmd(&["get", "nothing"], &task(&[]))).fails(1, "not found");
        assert!(!run.stderr.contains("mapped"), "{}", run.stderr);
    }

    // ------------------------------------------------------------ hints for people at a shell

    /// Airflow stores asset URIs normalised: a URI that matches none, but differs from a stored
    /// one only in what normalisation changes, is answered with the stored one.
    fn a_close_asset_uri_is_named(d: Dialect) {
        let bench = Bench::on(d);
        let id = bench.add_asset("orders", "s3://b/orders", true);
        bench.run(&["set", "wm", "1", "--asset-uri", "s3://b/orders"]).success();
        let run = bench
            .run(&["get", "wm", "--asset-uri", "s3://b/orders/"])
            .fails(1, "no asset found with asset uri \"s3://b/orders/\"");
        run.stderr_has(&format!("did you mean \"s3://b/orders\" (\"orders\", id {id})?"));
        let run = bench.run(&["get", "wm", "--asset-uri", "s3://b/other"]).fails(1, "no asset found");
        assert!(!run.stderr.contains("did you mean"), "{}", run.stderr);
    }

    /// An expired key that no clean has removed yet is still returned, as Airflow 3.3 returns
    /// it, and marked as such in every format; an expiry set in the past is warned about.
    fn expired_keys_are_marked_in_every_format(d: Dialect) {
        let bench = with_run(d);
        bench
            .run(&cmd(&["set", "old", "1", "--expires-at", "2020-01-01T00:00:00Z"], &task(&[])))
            .success()
            .stderr_has("warning: --expires-at 2020-01-01T00:00:00.000000Z is in the past");
        bench.run(&cmd(&["set", "new", "2"], &task(&[]))).success();
        let warning = "warning: key \"old\" expired at 2020-01-01T00:00:00.000000Z";
        let run = bench.run(&cmd(&["get", "old", "-o", "json"], &task(&[]))).success().stderr_has(warning);
        assert_eq!(run.json()["expired"], true);
        bench.run(&cmd(&["get", "old", "-o", "yaml"], &task(&[]))).success().stderr_has(warning);
        bench.run(&cmd(&["get", "old", "-o", "plain"], &task(&[]))).success().stdout_is("1\n").stderr_has(warning);
        let table = bench.run(&cmd(&["get", "old"], &task(&[]))).success().stderr_has(warning).stdout;
        assert!(table.contains("2020-01-01T00:00:00.000000Z (expired)"), "{table}");
        let run = bench.run(&cmd(&["get", "new", "-o", "json"], &task(&[]))).success();
        assert_eq!(run.json()["expired"], false);
        assert_eq!(run.stderr, "");
        let run = bench.run(&["list", "-o", "json"]).success();
        let listed: Vec<Value> = run.json().as_array().unwrap().iter().map(|e| fields(e, &["key", "expired"])).collect();
        assert_eq!(listed, [json!(["new", false]), json!(["old", true])]);
    }

    /// A custom `[state_store] backend` keeps Airflow's state elsewhere: every command that
    /// reads or writes the tables says so, and clean skips, as Airflow's does.
    fn a_custom_backend_is_named_by_every_command(d: Dialect) {
        let mut bench = with_run(d);
        bench.env("AIRFLOW__STATE_STORE__BACKEND", "my_company.state.S3Backend");
        let warning = "warning: [state_store] backend is my_company.state.S3Backend (from environment variable AIRFLOW__STATE_STORE__BACKEND), not the metastore backend";
        for args in [
            cmd(&["set", "k", "1"], &task(&[])),
            cmd(&["get", "k"], &task(&[])),
            vec!["list"],
            vec!["stats"],
            vec!["export"],
            cmd(&["delete", "k"], &task(&[])),
            cmd(&["clear", "--yes"], &task(&[])),
        ] {
            let run = bench.run(&args).success().stderr_has(warning);
            assert_eq!(run.stderr.matches("warning: [state_store]").count(), 1, "{}", run.stderr);
        }
        bench.run(&["clean"]).success().stderr_has("skipping cleanup");
    }

    // ------------------------------------------------------------ list

    /// `--map-index` filters list and export: without it, every map index of the task is
    /// taken, and their help says so rather than a default of -1 (which is get's and set's).
    fn list_and_export_without_map_index_take_every_map_index(d: Dialect) {
        let bench = with_run(d);
        bench.add_task_instance(DAG, RUN, "mapped", &[0, 1]);
        let mapped = ["--dag-id", DAG, "--run-id", RUN, "--task-id", "mapped"];
        for map_index in ["0", "1"] {
            bench.run(&cmd(&["set", "offset", map_index, "--map-index", map_index], &mapped)).success();
        }
        let row = |map_index: &str| format!("{DAG}\t{RUN}\tmapped\t{map_index}\toffset\t{map_index}\n");
        bench.run(&cmd(&["list", "-o", "plain"], &mapped)).success().stdout_is(&(row("0") + &row("1")));
        bench.run(&cmd(&["list", "-o", "plain", "--map-index", "1"], &mapped)).success().stdout_is(&row("1"));
        let exported = bench.run(&cmd(&["export"], &mapped)).success().stdout;
        assert_eq!(exported.lines().count(), 2, "{exported}");
        for command in ["list", "export"] {
            let help = flag_help(&bench, command, "--map-index");
            assert!(help.contains("every map index") && !help.contains("default"), "{command} --help: {help}");
        }
        assert!(flag_help(&bench, "get", "--map-index").contains("-1 (the default)"));
    }

    fn list_filters_orders_and_pages(d: Dialect) {
        let bench = with_run(d);
        bench.add_dag_run_with("other_dag", "r1", &["t"]);
        for key in ["b", "a", "c", "B", "é"] {
            bench.run(&cmd(&["set", key, "1"], &task(&[]))).success();
        }
        bench.run(&["set", "z", "\"x\"", "--dag-id", "other_dag", "--run-id", "r1", "--task-id", "t"]).success();

        // Byte order on every dialect: upper case before lower case, non-ASCII last. Plain is a
        // line per row: dag_id, run_id, task_id, map_index, key and value, tab-separated.
        let load = |key: &str| format!("{DAG}\t{RUN}\tload\t-1\t{key}\t1\n");
        let other = "other_dag\tr1\tt\t-1\tz\t\"x\"\n";
        let all: String = ["B", "a", "b", "c", "é"].iter().map(|k| load(k)).collect::<String>() + other;
        bench.run(&["list", "-o", "plain"]).success().stdout_is(&all);
        bench.run(&["list", "--dag-id", "other_dag", "-o", "plain"]).success().stdout_is(other);
        bench.run(&["list", "--limit", "2", "-o", "plain"]).success().stdout_is(&(load("B") + &load("a"))).stderr_has("--offset 2");
        bench.run(&["list", "--limit", "2", "--offset", "4", "-o", "plain"]).success().stdout_is(&(load("é") + other));
        let run = bench.run(&["list", "-o", "json"]).success();
        let v = run.json();
        assert_eq!(each(&v, "key"), ["B", "a", "b", "c", "é", "z"].map(|k| json!(k)).iter().collect::<Vec<_>>());
        let mut members = keys(&v[0]);
        members.sort_unstable();
        assert_eq!(
            members,
            ["dag_id", "expired", "expires_at", "external_ref", "key", "map_index", "run_id", "task_id", "updated_at", "value"]
        );
        bench.run(&["list", "--dag-id", "nothing", "-o", "json"]).success().stdout_is("[]\n");
    }

    /// `list -o plain` is one line per row, its scope included, so the same key of two tasks or
    /// map indexes stays apart; tabs, newlines, backslashes and invisible characters are escaped
    /// in plain output, and shown the same way (backslashes aside) in tables and messages.
    fn plain_and_table_output_escape_hidden_characters(d: Dialect) {
        let bench = with_run(d);
        bench.add_task_instance(DAG, RUN, "load", &[0]);
        let key = "a\tb\nc\\d\u{202e}e\u{1b}";
        bench.run(&cmd(&["set", key, "\"v\\u202e\\n\""], &task(&[]))).success();
        bench.run(&cmd(&["set", key, "2", "--map-index", "0"], &task(&[]))).success();
        let shown = "a\\tb\\nc\\\\d\\u202ee\\x1b";
        bench.run(&["list", "-o", "plain"]).success().stdout_is(&format!(
            "{DAG}\t{RUN}\tload\t-1\t{shown}\t\"v\\u202e\\\\n\"\n{DAG}\t{RUN}\tload\t0\t{shown}\t2\n"
        ));
        // `get -o plain` stays the raw value.
        bench.run(&cmd(&["get", key, "-o", "plain"], &task(&[]))).success().stdout_is("v\u{202e}\n\n");
        // Tables escape the same characters the same way, and keep every row on one line.
        let table = bench.run(&["list"]).success().stdout;
        assert_eq!(table.lines().count(), 4, "{table}");
        assert!(table.contains("a\\tb\\nc\\d\\u202ee\\x1b"), "{table}");
        assert!(!table.contains('\u{202e}') && !table.contains('\u{1b}') && !table.contains("\\u{"), "{table}");
        // Messages quote the key with the same escapes.
        bench
            .run(&cmd(&["get", "x\u{202e}y\n"], &task(&[])))
            .fails(1, "key \"x\\u202ey\\n\" not found");
    }

    fn list_expired_shows_only_expired_rows(d: Dialect) {
        let bench = with_run(d);
        bench.insert_task_row(DAG, RUN, "load", -1, "old", "1", "2020-01-01 00:00:00.000000", Some("2020-01-02 00:00:00.000000"));
        bench.run(&cmd(&["set", "fresh", "1"], &task(&[]))).success();
        bench.run(&["list", "--expired", "-o", "plain"]).success().stdout_is(&format!("{DAG}\t{RUN}\tload\t-1\told\t1\n"));
    }

    // ------------------------------------------------------------ assets

    fn asset_keys_by_name_uri_and_id(d: Dialect) {
        let bench = Bench::on(d);
        let id = bench.add_asset("orders", "s3://bucket/orders/", true).to_string();
        bench.run(&["set", "watermark", "\"2026-11-28\"", "--asset", "orders"]).success();
        bench.run(&["get", "watermark", "--asset-uri", "s3://bucket/orders/", "-o", "plain"]).success().stdout_is("2026-11-28\n");
        let run = bench.run(&["get", "watermark", "--asset-id", &id, "-o", "json"]).success();
        assert_eq!(fields(&run.json(), &["asset_name", "last_updated_by_kind"]), json!(["orders", "api"]));
        let writer = bench.scalar(
            "SELECT last_updated_by_kind, last_updated_by_dag_id, last_updated_by_run_id, last_updated_by_task_id, last_updated_by_map_index FROM asset_state_store",
        );
        assert_eq!(writer, "api|NULL|NULL|NULL|NULL");
        bench.run(&["set", "x", "1", "--asset", "orders", "--retention", "1d"]).fails(2, "never expire");
        bench.run(&["list", "--assets", "-o", "plain"]).success().stdout_is(&format!("{id}\torders\twatermark\t\"2026-11-28\"\n"));
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

    fn clean_walks_sparse_ids_up_to_the_largest(d: Dialect) {
        // Ids far apart, and one at the very top of the id range: batch 0 and the open-ended
        // last batch walk the primary key in windows (SQLite), which must neither stop at a
        // gap nor overflow past the largest id.
        for batch in ["0", "4"] {
            let bench = with_run(d);
            let survivors = seed_expiring(&bench, 30, 3);
            // Airflow's id is a 64-bit integer on SQLite and a 32-bit one on the servers.
            let top = if d == Dialect::Sqlite { i64::MAX } else { i64::from(i32::MAX) };
            bench.exec("UPDATE task_state_store SET id = id * 777777");
            bench.exec(&format!(
                "UPDATE task_state_store SET id = {top} WHERE id = {}",
                bench.scalar("SELECT max(id) FROM task_state_store")
            ));
            let top_key =
                bench.scalar(&format!("SELECT {} FROM task_state_store WHERE id = {top}", bench.key_col()));
            assert_eq!(top_key, "k00029");
            bench.run(&["clean", "--batch-size", batch]).success().stderr_has("deleted 10 expired task row(s)");
            assert_eq!(remaining_keys(&bench), survivors, "batch size {batch}");
        }
    }

    fn clean_leaves_exactly_the_unexpired_rows_for_every_batch_size(d: Dialect) {
        // 40 rows, 14 expired (every third): batch sizes around the expired count and the edges.
        for batch in [0, 1, 7, 13, 14, 15, 1000] {
            let bench = with_run(d);
            let survivors = seed_expiring(&bench, 40, 3);
            let expired = bench.expired_in_id_order();
            let run = bench.run(&["clean", "--batch-size", &batch.to_string(), "-o", "json"]).success();
            assert_eq!(remaining_keys(&bench), survivors, "batch size {batch}");
            let v = run.json();
            assert_eq!(v["task_rows_deleted"], 14, "batch size {batch}");
            let batches = v["batches"].as_u64().unwrap() as usize;
            // 14 expired rows take ceil(14 / batch) batches; on PostgreSQL, a batch is the
            // expired rows among `batch` rows, so 40 rows take up to ceil(40 / batch).
            let expected = clean_batches(d, &expired, batch, None);
            assert_eq!(expected.last(), Some(&14));
            assert_eq!(batches, expected.len(), "batch size {batch}");
            if d != Dialect::Postgres {
                assert_eq!(batches, if batch == 0 { 1 } else { 14usize.div_ceil(batch) }, "batch size {batch}");
            }
            assert_eq!(fields(&v, &["dry_run", "interrupted", "asset_rows_deleted"]), json!([false, false, 0]));
            assert!(run.stderr.contains("clean: deleted 14 expired task row(s)"), "{}", run.stderr);
        }
    }

    /// At Airflow's default batch size (0), batches are sized by time (`auto`): the same rows go,
    /// the first batch is 1,000 rows and each next one follows the pace, `-v` shows every batch
    /// and the summary names the mode and the last size.
    fn clean_by_default_sizes_batches_by_time(d: Dialect) {
        let bench = with_run(d);
        let survivors = seed_expiring(&bench, 6000, 2);
        let run = bench.run(&["clean", "-o", "json", "-v"]).success();
        assert_eq!(remaining_keys(&bench), survivors);
        let v = run.json();
        assert_eq!(fields(&v, &["task_rows_deleted", "batch_time_ms"]), json!([3000, 10]));
        let (batches, last) = (v["batches"].as_u64().unwrap(), v["batch_size"].as_u64().unwrap());
        assert!((100..=100_000).contains(&last), "{last}");
        let lines = run.stderr.lines().filter(|l| l.starts_with("clean: batch ")).count() as u64;
        assert_eq!(lines, batches, "{}", run.stderr);
        assert!(batches >= 2, "3,000 expired rows of 6,000 take more than one batch of 1,000 rows: {}", run.stderr);
        // The summary line names the mode and the last size; `-v`'s first line explains it.
        assert!(run.stderr.contains(&format!(", batch size auto (last {last} rows), ")), "{}", run.stderr);
        let explained = "batch size auto (10 ms a batch and a pause while other sessions write, full speed \
                         while none do; state_cleanup_batch_size = 0 from default runs as auto, --batch-size 0 \
                         for one transaction)";
        let first = run.stderr.lines().find(|l| l.starts_with("clean: took the clean lock")).unwrap();
        assert!(first.ends_with(explained), "{}", run.stderr);
        assert_eq!(
            fields(&v, &["batching", "batching_from"]),
            json!(["auto", "state_cleanup_batch_size = 0 from default"])
        );
        // The same story everywhere the batch size is named: the dry run, `-v`, doctor,
        // `config get`.
        let dry = bench.run(&["clean", "--dry-run", "-o", "json", "-v"]).success();
        assert_eq!(fields(&dry.json(), &["batching", "batch_size"]), json!(["auto", null]));
        assert!(dry.stderr.contains("batch size auto (10 ms a batch"), "{}", dry.stderr);
        assert!(!dry.stderr.contains("last "), "no batch ran: {}", dry.stderr);
        let doctor = bench.run(&["doctor"]);
        assert!(doctor.stdout.contains("batch size auto (10 ms a batch"), "{}", doctor.stdout);
        let got = bench.run(&["config", "get", "state_store", "state_cleanup_batch_size", "-o", "json"]).success();
        assert!(got.json()["note"].as_str().unwrap().contains("clean runs 0 as --batch-size auto"), "{}", got.stdout);
        let one = bench.run(&["clean", "--batch-size", "0", "-o", "json"]).success();
        assert_eq!(fields(&one.json(), &["batching", "batch_size"]), json!(["one_transaction", 0]));
        assert!(one.stderr.contains("batch size 0 (one transaction)"), "{}", one.stderr);
    }

    fn clean_batch_size_comes_from_config_unless_flagged(d: Dialect) {
        let mut bench = with_run(d);
        seed_expiring(&bench, 10, 2);
        let batches = clean_batches(d, &bench.expired_in_id_order(), 3, None).len();
        bench.env("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE", "2");
        let run = bench.run(&["clean", "--dry-run", "-o", "json"]).success();
        assert_eq!(run.json()["batch_size"], 2);
        let run = bench.run(&["clean", "--batch-size", "3", "-o", "json"]).success();
        assert_eq!(fields(&run.json(), &["batch_size", "batches", "task_rows_deleted"]), json!([3, batches, 5]));
    }

    /// With Airflow's default configuration (`state_cleanup_batch_size = 0` in a file whose path
    /// is long), the summary line of a clean and of a dry run each stay within 200 characters:
    /// the batching is named there, and explained by `-v`, `--help` and the document.
    fn clean_summary_line_stays_short_with_airflows_default_configuration(d: Dialect) {
        let bench = with_run(d);
        seed_expiring(&bench, 10, 2);
        let dir = bench.dir.path().join("a".repeat(60)).join("b".repeat(60));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("airflow.cfg");
        std::fs::write(&cfg, "[state_store]\ndefault_retention_days = 30\nstate_cleanup_batch_size = 0\n").unwrap();
        let cfg = cfg.to_str().unwrap();
        for args in [&["clean", "--dry-run"][..], &["clean", "-o", "json"]] {
            let run = bench.run(&[args, &["--config", cfg]].concat()).success();
            let line = run.stderr.lines().rfind(|l| l.starts_with("clean")).unwrap();
            assert!(line.chars().count() <= 200, "{} characters: {line}", line.chars().count());
            assert!(line.contains(", batch size auto"), "{line}");
        }
        let run = bench.run(&["clean", "-o", "json", "--config", cfg]).success();
        let from = format!("state_cleanup_batch_size = 0 from {cfg} line 3");
        assert_eq!(fields(&run.json(), &["batching", "batching_from"]), json!(["auto", from]));
    }

    /// `--max-rows` cuts the last batch short, but the run's batch size stays the one it was
    /// given, in the document, the summary line and `-v`'s first line alike.
    fn clean_max_rows_reports_the_runs_batch_size_not_the_last_batchs(d: Dialect) {
        let bench = with_run(d);
        seed_expiring(&bench, 10, 2);
        let metrics = bench.dir.path().join("clean.prom");
        let run = bench
            .run(&["clean", "--batch-size", "2", "--max-rows", "3", "-o", "json", "--metrics-file", metrics.to_str().unwrap()])
            .success();
        let v = run.json();
        assert_eq!(fields(&v, &["batch_size", "task_rows_deleted", "stopped_by"]), json!([2, 3, "max_rows"]));
        assert!(run.stderr.contains(", batch size 2 rows, "), "{}", run.stderr);
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
        let v = run.json();
        assert_eq!(json!([v["asset_rows_to_delete"], v["orphans_by_asset"][0]["asset_name"]]), json!([2, "legacy"]));
        bench.unchanged(|| bench.run(&["clean", "--no-orphans"]).success());
        let run = bench.run(&["clean", "--orphans-only", "--batch-size", "1", "-o", "json"]).success();
        assert_eq!(fields(&run.json(), &["asset_rows_deleted", "orphan_batches", "task_rows_deleted"]), json!([2, 2, 0]));
        assert_eq!(bench.rows(&format!("SELECT {} FROM asset_state_store", bench.key_col())), vec!["keep".to_string()]);
        bench.run(&["clean", "--no-orphans", "--orphans-only"]).fails(2, "--orphans-only");
    }

    fn clean_dry_run_counts_and_samples_without_deleting(d: Dialect) {
        let bench = with_run(d);
        seed_expiring(&bench, 60, 2);
        let run = bench.unchanged(|| bench.run(&["clean", "--dry-run", "--sample", "3", "-o", "json"]).success());
        let v = run.json();
        assert_eq!(json!([v["dry_run"], v["task_rows_to_delete"], v["sample"].as_array().unwrap().len()]), json!([true, 30, 3]));
        assert_eq!(v["expired_by_dag"], json!([{"dag_id": DAG, "rows": 30}]));
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
        let batches = clean_batches(d, &bench.expired_in_id_order(), 4, Some(6));
        assert_eq!(batches.last(), Some(&6));
        let run = bench.run(&["clean", "--batch-size", "4", "--max-rows", "6", "-o", "json"]).success();
        assert_eq!(
            fields(&run.json(), &["task_rows_deleted", "batches", "stopped_by", "interrupted"]),
            json!([6, batches.len(), "max_rows", false])
        );
        if d != Dialect::Postgres {
            assert_eq!(batches.len(), 2);
        }
        assert_eq!(remaining_keys(&bench).len(), 40 - 6);
        let run = bench.run(&["clean", "--batch-size", "0", "--max-rows", "5", "-o", "json"]).success();
        assert_eq!(fields(&run.json(), &["task_rows_deleted", "batches"]), json!([5, 1]));
        // A limit met exactly by the last expired row is a complete run, not a stop.
        let run = bench.run(&["clean", "--max-rows", "3", "-o", "json"]).success();
        assert_eq!(fields(&run.json(), &["task_rows_deleted", "stopped_by"]), json!([3, null]));
        assert_eq!(remaining_keys(&bench), survivors);
        bench.run(&["clean", "--max-rows", "0"]).fails(2, "--max-rows");
    }

    fn clean_metrics_file_says_what_each_run_did(d: Dialect) {
        let bench = with_run(d);
        seed_expiring(&bench, 40, 2);
        let legacy = bench.add_asset("legacy", "s3://legacy/", false);
        bench.exec(&format!(
            "INSERT INTO asset_state_store (asset_id, {}, value, updated_at, last_updated_by_kind) VALUES ({legacy}, 'old', '1', {}, 'task')",
            bench.key_col(),
            bench.ts_lit(Some("2020-01-01 00:00:00.000000"))
        ));
        let dir = bench.dir.path().join("textfile");
        std::fs::create_dir(&dir).unwrap();
        let prom = dir.join("state_store.prom");
        let file = prom.to_str().unwrap();
        let series = |m: &std::collections::BTreeMap<String, String>, name: &str| m.get(name).cloned().unwrap_or_default();
        let task = r#"{table="task_state_store"}"#;
        let asset = r#"{table="asset_state_store"}"#;

        // Stopped by a limit: what it deleted, which limit, and the backlog it left.
        let batches = clean_batches(d, &bench.expired_in_id_order(), 4, Some(6)).len();
        bench.run(&["clean", "--batch-size", "4", "--max-rows", "6", "--no-orphans", "--metrics-file", file]).success();
        let m = metrics(&prom);
        let got: Vec<String> = [
            format!("state_store_clean_deleted_rows{task}"),
            format!("state_store_clean_deleted_rows{asset}"),
            r#"state_store_clean_batches{phase="expired"}"#.to_string(),
            r#"state_store_clean_limit_reached{limit="max_rows"}"#.to_string(),
            r#"state_store_clean_limit_reached{limit="max_duration"}"#.to_string(),
            "state_store_clean_interrupted".to_string(),
            "state_store_clean_exit_code".to_string(),
            format!("state_store_clean_backlog_rows{task}"),
            format!("state_store_clean_backlog_rows{asset}"),
        ]
        .iter()
        .map(|name| series(&m, name))
        .collect();
        assert_eq!(got, ["6", "0", &batches.to_string(), "1", "0", "0", "0", "14", "1"]);
        let success = series(&m, "state_store_clean_last_success_timestamp_seconds");
        assert_eq!(success, series(&m, "state_store_clean_last_run_timestamp_seconds"));
        let ended: f64 = success.parse().unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!((now - 60.0..=now).contains(&ended), "{ended} vs {now}");

        // Runs that fail, before or at the database, keep the last success and count nothing.
        std::thread::sleep(std::time::Duration::from_millis(5));
        bench.unchanged(|| bench.run(&["clean", "--max-duration", "soon", "--metrics-file", file]).fails(2, "--max-duration"));
        let m = metrics(&prom);
        assert_eq!(series(&m, "state_store_clean_exit_code"), "2");
        assert_eq!(series(&m, "state_store_clean_last_success_timestamp_seconds"), success);
        assert!(series(&m, "state_store_clean_last_run_timestamp_seconds").parse::<f64>().unwrap() > ended);
        assert_eq!(series(&m, &format!("state_store_clean_deleted_rows{task}")), "0");
        assert!(!m.keys().any(|k| k.starts_with("state_store_clean_backlog_rows")), "{m:?}");
        let missing = format!("sqlite:///{}", bench.dir.path().join("none.db").display());
        bench.run(&["clean", "--conn", &missing, "--metrics-file", file]).fails(4, "does not exist");
        assert_eq!(series(&metrics(&prom), "state_store_clean_exit_code"), "4");
        assert_eq!(series(&metrics(&prom), "state_store_clean_last_success_timestamp_seconds"), success);

        // A complete run: everything deleted, nothing left, a new last success.
        bench.run(&["clean", "--metrics-file", file]).success();
        let m = metrics(&prom);
        assert_eq!(series(&m, &format!("state_store_clean_deleted_rows{task}")), "14");
        assert_eq!(series(&m, &format!("state_store_clean_deleted_rows{asset}")), "1");
        assert_eq!(series(&m, &format!("state_store_clean_backlog_rows{task}")), "0");
        assert_eq!(series(&m, &format!("state_store_clean_backlog_rows{asset}")), "0");
        assert_eq!(series(&m, r#"state_store_clean_limit_reached{limit="max_rows"}"#), "0");
        assert!(series(&m, "state_store_clean_last_success_timestamp_seconds").parse::<f64>().unwrap() > ended);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "the metrics file alone");

        // A path that cannot be written is refused before the database is touched.
        bench.insert_task_row(DAG, RUN, "t", -1, "expired", "1", "2019-01-01 00:00:00.000000", Some("2020-01-01 00:00:00.000000"));
        let nowhere = bench.dir.path().join("no-such-dir").join("x.prom");
        bench.unchanged(|| {
            bench.run(&["clean", "--metrics-file", nowhere.to_str().unwrap()]).fails(2, "does not exist")
        });
        bench.unchanged(|| bench.run(&["clean", "--metrics-file", dir.to_str().unwrap()]).fails(2, "is a directory"));
        // Before the database is opened: a missing database is not reached (4) either.
        bench.run(&["clean", "--conn", &missing, "--metrics-file", nowhere.to_str().unwrap()]).fails(2, "the directory");
        bench.run(&["clean", "--dry-run", "--metrics-file", file]).fails(2, "--metrics-file");
    }

    fn clean_stops_at_max_duration(d: Dialect) {
        let bench = with_run(d);
        seed_expiring(&bench, 40, 2);
        let run = bench
            .run(&["clean", "--batch-size", "1", "--sleep", "100ms", "--max-duration", "250ms", "-o", "json"])
            .success();
        let v = run.json();
        assert_eq!(v["stopped_by"], "max_duration");
        let deleted = v["task_rows_deleted"].as_u64().unwrap() as usize;
        assert!((1..20).contains(&deleted), "deleted {deleted}");
        assert_eq!(remaining_keys(&bench).len(), 40 - deleted, "the summary counts exactly what is gone");
        bench.run(&["clean", "--max-duration", "soon"]).fails(2, "--max-duration");
    }

    fn clean_sigterm_ends_between_batches_and_a_rerun_finishes(d: Dialect) {
        let bench = with_run(d);
        let survivors = seed_expiring(&bench, 40, 2);
        let out = slow_clean_stopped_by(&bench, "TERM", 40);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(143), "{stderr}");
        assert!(stderr.contains("stopped by SIGTERM"), "{stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(fields(&v, &["interrupted", "stopped_by"]), json!([true, "SIGTERM"]));
        let deleted = v["task_rows_deleted"].as_u64().unwrap() as usize;
        assert!((1..20).contains(&deleted), "deleted {deleted}");
        assert_eq!(remaining_keys(&bench).len(), 40 - deleted, "only whole batches are gone");
        bench.run(&["clean"]).success();
        assert_eq!(remaining_keys(&bench), survivors);
    }

    fn a_second_clean_of_the_same_database_is_refused(d: Dialect) {
        let bench = with_run(d);
        seed_expiring(&bench, 20, 1);
        let (first_prom, second_prom) = (bench.dir.path().join("first.prom"), bench.dir.path().join("second.prom"));
        let mut first = bench
            .cmd(&["clean", "--batch-size", "1", "--sleep", "1s", "--metrics-file", first_prom.to_str().unwrap()])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Once a batch is gone, the first clean holds the lock; it sleeps long enough between
        // batches for the second one to start on a loaded machine, and is stopped after it.
        until_some_rows_are_gone(&bench, 20);
        let second = bench
            .run(&["clean", "-o", "json", "--metrics-file", second_prom.to_str().unwrap()])
            .fails(7, "another state-store clean is running");
        // It deleted nothing, so its one JSON document is the error alone, and when it ran.
        assert_eq!(keys(&error_document(&second)), ["started_at", "error"]);
        let m = metrics(&second_prom);
        assert_eq!(fields(&json!(m), &["state_store_clean_exit_code", "state_store_clean_interrupted"]), json!(["7", "0"]));
        assert!(std::process::Command::new("kill").args(["-TERM", &first.id().to_string()]).status().unwrap().success());
        assert_eq!(first.wait().unwrap().code(), Some(143));
        let m = metrics(&first_prom);
        assert_eq!(fields(&json!(m), &["state_store_clean_exit_code", "state_store_clean_interrupted"]), json!(["143", "1"]));
        let deleted: usize = m[r#"state_store_clean_deleted_rows{table="task_state_store"}"#].parse().unwrap();
        assert_eq!(remaining_keys(&bench).len(), 20 - deleted, "the metrics count the batches committed");
        assert_eq!(m[r#"state_store_clean_backlog_rows{table="task_state_store"}"#], (20 - deleted).to_string());
        // The lock goes with the process that held it.
        bench.run(&["clean"]).success();
        assert_eq!(remaining_keys(&bench), Vec::<String>::new());
    }

    fn keys_refreshed_during_a_clean_are_never_lost(d: Dialect) {
        let bench = with_run(d);
        let keys: Vec<String> = (0..30).map(|i| format!("k{i:05}")).collect();
        let rows: Vec<_> = keys
            .iter()
            .map(|k| ("load", -1, k.as_str(), "0", "2020-01-01 00:00:00.000000", Some("2020-01-02 00:00:00.000000")))
            .collect();
        bench.insert_task_rows(DAG, RUN, &rows);
        let mut clean = bench
            .cmd(&["clean", "--batch-size", "1", "--sleep", "30ms"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // A worker refreshing every third key while the clean walks the table.
        let mut refreshed = Vec::new();
        for key in keys.iter().step_by(3) {
            bench.run(&cmd(&["set", key, "\"fresh\""], &task(&[]))).success();
            refreshed.push(key.clone());
        }
        assert!(clean.wait().unwrap().success());
        for key in &refreshed {
            assert_eq!(stored(&bench, key).0, "\"fresh\"", "refreshed key {key} survives the clean");
        }
        assert_eq!(remaining_keys(&bench), refreshed, "every key not refreshed was expired and is gone");
    }

    fn clean_never_waits_long_behind_another_writer(d: Dialect) {
        let bench = with_run(d);
        seed_expiring(&bench, 10, 1);
        let holder = hold_rows(&bench, &["k00003"]);
        let started = std::time::Instant::now();
        let run = bench.run(&["clean", "--lock-timeout", "1s", "-o", "json"]);
        let waited = started.elapsed();
        assert!(waited < std::time::Duration::from_secs(8), "waited {waited:?}");
        match d {
            // PostgreSQL and MySQL skip the locked row and delete the others.
            Dialect::Postgres | Dialect::Mysql => {
                assert_eq!(run.code, 0, "{}", run.stderr);
                drop(holder);
                assert_eq!(remaining_keys(&bench), vec!["k00003".to_string()]);
            }
            // SQLite's lock is on the whole database: it waits up to --lock-timeout, then fails
            // with the database's error and the summary of what was done.
            _ => {
                let run = run.code(4);
                assert!(run.stderr.contains("clean: deleted"), "{}", run.stderr);
                drop(holder);
            }
        }
        bench.run(&["clean"]).success();
        assert_eq!(remaining_keys(&bench), Vec::<String>::new());
    }

    fn clean_in_batches_never_waits_long_behind_another_writer(d: Dialect) {
        let bench = with_run(d);
        seed_expiring(&bench, 12, 1);
        let holder = hold_rows(&bench, &["k00005"]);
        let run = bench.run(&["clean", "--batch-size", "4", "--lock-timeout", "1s", "-o", "json"]);
        if d != Dialect::Sqlite {
            // The batch holding the locked row deletes its other rows; the batches before and
            // after it are untouched by the lock.
            assert_eq!(run.code, 0, "{}", run.stderr);
            assert_eq!(run.json()["task_rows_deleted"], 11);
            drop(holder);
            assert_eq!(remaining_keys(&bench), vec!["k00005".to_string()]);
        } else {
            // SQLite's lock is on the whole database: it waits up to --lock-timeout and stops
            // with the summary.
            let run = run.code(4);
            assert!(run.stderr.contains("clean: deleted"), "{}", run.stderr);
            drop(holder);
        }
        bench.run(&["clean"]).success();
        assert_eq!(remaining_keys(&bench), Vec::<String>::new());
    }

    fn writes_behind_a_held_row_lock_fail_in_bounded_time(d: Dialect) {
        let bench = with_run(d);
        bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
        let k = bench.key_col();
        let holder = bench.hold(&format!("UPDATE task_state_store SET value = '2' WHERE {k} = 'k'"));
        let started = std::time::Instant::now();
        let run = bench.run(&cmd(&["set", "k", "3"], &task(&[])));
        let waited = started.elapsed();
        // SQLite's busy timeout is 5 s; PostgreSQL's and InnoDB's lock waits are set to 10 s.
        assert!(waited < std::time::Duration::from_secs(20), "waited {waited:?}");
        let run = run.code(4);
        assert!(run.stderr.lines().count() == 1 && run.stderr.contains("error:"), "{}", run.stderr);
        drop(holder);
        assert_eq!(stored(&bench, "k").0, "1");
    }

    fn clean_skips_a_custom_backend(d: Dialect) {
        let mut bench = with_run(d);
        seed_expiring(&bench, 10, 2);
        bench.env("AIRFLOW__STATE_STORE__BACKEND", "mypackage.state.CustomStateBackend");
        let run = bench.unchanged(|| bench.run(&["clean", "-o", "json"]).success().stderr_has("skipping cleanup"));
        let v = run.json();
        assert_eq!(v["task_rows_deleted"], 0);
        assert!(text_of(&v, "skipped").contains("CustomStateBackend"), "{v}");
    }

    fn clean_verbose_details_every_batch(d: Dialect) {
        let bench = with_run(d);
        seed_expiring(&bench, 40, 3);
        let inactive = bench.add_asset("legacy", "s3://legacy/", false);
        for key in ["a", "b", "c"] {
            bench.exec(&format!(
                "INSERT INTO asset_state_store (asset_id, {}, value, updated_at, last_updated_by_kind) VALUES ({inactive}, '{key}', '1', {}, 'task')",
                bench.key_col(),
                bench.ts_lit(Some("2020-01-01 00:00:00.000000"))
            ));
        }
        let run = bench.run(&["clean", "-v", "--batch-size", "4", "-o", "json"]).success();
        let v = one_document(&run);
        assert_eq!(fields(&v, &["task_rows_deleted", "asset_rows_deleted", "orphan_batches"]), json!([14, 3, 1]));
        // One line per batch counted in the summary, numbered from 1, each with its rows, its
        // id range and its time; the rows add up to the summary's.
        let batches = v["batches"].as_u64().unwrap() as usize;
        let lines: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("clean: batch ")).collect();
        assert_eq!(lines.len(), batches, "{}", run.stderr);
        let mut total = 0;
        for (i, line) in lines.iter().enumerate() {
            let rest = line.strip_prefix(&format!("clean: batch {}: deleted ", i + 1)).unwrap_or_else(|| panic!("{line}"));
            total += rest.split(' ').next().unwrap().parse::<usize>().unwrap();
            assert!(rest.contains(" expired task row(s), id") && line.ends_with(" ms"), "{line}");
        }
        assert_eq!(total, 14);
        assert!(run.stderr.contains("clean: orphan batch 1: deleted 3 orphaned asset row(s), "), "{}", run.stderr);
        assert!(bench.run(&["clean", "--help"]).success().stdout.contains("-v, --verbose"));
        // First what the run is about to do; last, as always, the summary.
        let first = run.stderr.lines().next().unwrap();
        assert!(first.contains("batch size 4") && first.contains("clean lock"), "{first}");
        assert!(run.stderr.lines().last().unwrap().starts_with("clean: deleted 14 expired task row(s)"));

        // The long form, and a dry run: its queries are detailed, stdout is as without it.
        let bench = with_run(d);
        seed_expiring(&bench, 10, 2);
        let quiet = bench.run(&["clean", "--dry-run", "--batch-size", "2", "-o", "plain"]).success();
        let run = bench.unchanged(|| {
            bench.run(&["clean", "--dry-run", "--verbose", "--batch-size", "2", "-o", "plain"]).success()
        });
        assert_eq!((quiet.stdout.as_str(), run.stdout.as_str()), ("5 0\n", "5 0\n"));
        for needle in [
            "clean --dry-run: counted 5 expired task row(s) of 1 dag(s), ",
            "clean --dry-run: counted 0 orphaned asset row(s) of 0 asset(s), ",
            "clean --dry-run: read a sample of 5 expired task row(s), ",
            "clean --dry-run: a run now would take at least 3 batch(es) of at most 2 expired task row(s)",
        ] {
            assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
        }
        assert!(!quiet.stderr.contains("counted"), "{}", quiet.stderr);
    }

    fn clean_progress_every_0_prints_no_progress_line(d: Dialect) {
        for (every, printed) in [("0", false), ("10ms", true)] {
            let bench = with_run(d);
            seed_expiring(&bench, 12, 1);
            let run =
                bench.run(&["clean", "--batch-size", "1", "--sleep", "30ms", "--progress-every", every]).success();
            let lines = run.stderr.lines().filter(|l| l.starts_with("clean: progress: ")).count();
            assert_eq!(lines > 0, printed, "--progress-every {every}: {}", run.stderr);
            assert_eq!(run.stderr.lines().count(), lines + 1, "progress lines and the summary: {}", run.stderr);
        }
    }

    fn clean_json_prints_one_document_on_every_run(d: Dialect) {
        let bench = with_run(d);
        seed_expiring(&bench, 6, 2);
        let v = one_document(&bench.run(&["clean", "-o", "json"]).success());
        assert_eq!((v.get("error"), &v["task_rows_deleted"]), (None, &json!(3)));

        // Refused before the database is opened: a flag's value (2), the command line itself
        // (2, when the words before the one clap rejects say `clean` and `-o json`), the
        // configuration (3). The document is the error alone.
        let v = error_document(&bench.run(&["clean", "-o", "json", "--before", "2999-01-01T00:00:00Z"]).fails(2, "future"));
        assert_eq!(keys(&v), ["started_at", "error"]);
        error_document(&bench.run(&["clean", "-o", "json", "--frobnicate"]).fails(2, "--frobnicate"));
        error_document(&bench.run(&["-o", "json", "clean", "--max-rows", "0"]).fails(2, "--max-rows"));
        error_document(&bench.run(&["clean", "--no-orphans", "--orphans-only", "-o", "json"]).fails(2, "--orphans-only"));
        bench.run(&["clean", "--frobnicate", "-o", "json"]).fails(2, "--frobnicate").stdout_is("");
        bench.run(&["clean", "-o", "table", "--frobnicate"]).fails(2, "--frobnicate").stdout_is("");
        bench.run(&["list", "-o", "json", "--frobnicate"]).fails(2, "--frobnicate").stdout_is("");
        let run = bench.run(&["clean", "-o", "yaml", "--sleep", "soon"]).fails(2, "--sleep");
        assert!(run.stdout.starts_with("started_at: "), "{}", run.stdout);
        assert!(run.stdout.contains("Z\"\nerror:\n  message: \"invalid --sleep: "), "{}", run.stdout);
        assert!(run.stdout.ends_with("\"\n  exit_code: 2\n"), "{}", run.stdout);
        let cfg = bench.write_config("bad.cfg", "[state_store]\nstate_cleanup_batch_size = many\n");
        error_document(&bench.run(&["clean", "-o", "json", "--config", cfg.to_str().unwrap()]).fails(3, "many"));

        // The database cannot be reached (4).
        let down = match d {
            Dialect::Sqlite => format!("sqlite:///{}/missing.db", bench.dir.path().display()),
            _ => Bench::server_url(d, &Bench::admin_auth(d), "x").replace(":5432/", ":1/").replace(":3306/", ":1/"),
        };
        error_document(&bench.run(&["clean", "-o", "json", "--conn", &down]).fails(4, ""));
        error_document(&bench.run(&["clean", "--dry-run", "-o", "json", "--conn", &down]).fails(4, ""));

        // Another clean is running (7); that one, stopped by SIGTERM, prints its summary once,
        // with the error its exit code stands for.
        bench.exec("DELETE FROM task_state_store");
        seed_expiring(&bench, 30, 1);
        let args = ["clean", "--batch-size", "1", "--sleep", "200ms", "-o", "json"];
        let first = bench.cmd(&args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        until_some_rows_are_gone(&bench, 30);
        let v = error_document(&bench.run(&["clean", "-o", "json"]).fails(7, "another state-store clean is running"));
        assert_eq!(keys(&v), ["started_at", "error"]);
        sigterm(&first);
        let first = finished(first, &args).code(143);
        let v = one_document(&first);
        assert_eq!(
            fields(&v, &["interrupted", "stopped_by", "error"]),
            json!([true, "SIGTERM", {"message": "stopped by SIGTERM", "exit_code": 143}])
        );
        assert_eq!(v["task_rows_deleted"], 30 - remaining_keys(&bench).len());

        // A batch that fails mid-run (4): the summary so far, and the error. (PostgreSQL and
        // MySQL skip a locked row instead: tests/faults.rs drops their connection mid-run.)
        if d == Dialect::Sqlite {
            bench.exec("DELETE FROM task_state_store");
            seed_expiring(&bench, 30, 1);
            let k = bench.key_col();
            let holder = bench.hold(&format!("UPDATE task_state_store SET value = '2' WHERE {k} = 'k00020'"));
            let run = bench.run(&["clean", "--batch-size", "2", "--lock-timeout", "1s", "-o", "json"]).code(4);
            drop(holder);
            let v = error_document(&run);
            let line = run.stderr.lines().find(|l| l.starts_with("clean: deleted ")).unwrap();
            let deleted = line["clean: deleted ".len()..].split(' ').next().unwrap();
            assert_eq!(fields(&v, &["task_rows_deleted", "interrupted"]), json!([deleted.parse::<u64>().unwrap(), false]));
        }

        // The schema is not Airflow 3.3's (5).
        bench.exec("ALTER TABLE task_state_store ADD COLUMN region_id VARCHAR(250)");
        error_document(&bench.run(&["clean", "-o", "json"]).fails(5, "3.4"));
    }

    fn two_cleans_started_together_refuse_one(d: Dialect) {
        for _ in 0..3 {
            let bench = with_run(d);
            seed_expiring(&bench, 20, 1);
            let args = ["clean", "--batch-size", "1", "--sleep", "100ms", "-o", "json"];
            let spawn = || bench.cmd(&args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
            let (a, b) = (spawn(), spawn());
            let (a, b) = (finished(a, &args), finished(b, &args));
            let mut codes = [a.code, b.code];
            codes.sort_unstable();
            assert_eq!(codes, [0, 7], "{a:?}\n{b:?}");
            assert_eq!(remaining_keys(&bench), Vec::<String>::new());
            if d == Dialect::Sqlite {
                assert_eq!(dir_entries(&bench), ["airflow.db"], "nothing is left beside the database");
            }
        }
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
        bench.add_dag_run_with(dag, run_id, &["t"]);
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
        // One rule for a pipe however it is named: stdout, or `--file /dev/stdout` (a stream
        // output written through).
        for file in ["", " --file /dev/stdout"] {
            let out = std::process::Command::new("bash")
                .args(["-c", &format!("set -o pipefail; '{}' export{file} | head -c 10 >/dev/null", support::BIN)])
                .env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", bench.url())
                .env("AIRFLOW_HOME", bench.dir.path())
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0), "export{file}: {out:?}");
            assert_eq!(String::from_utf8_lossy(&out.stderr), "", "export{file}");
        }
    }
    fn values_nested_deeper_than_airflow_reads_are_refused(d: Dialect) {
        let bench = with_run(d);
        let deepest_ok = format!("{}{}", "[".repeat(200), "]".repeat(200));
        bench.run(&cmd(&["set", "ok", &deepest_ok], &task(&[]))).success();
        let too_deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        bench.unchanged(|| bench.run(&cmd(&["set", "deep", &too_deep], &task(&[]))).fails(2, "nested 200 levels"));
        let beyond_the_parser = format!("{}{}", "[".repeat(600), "]".repeat(600));
        bench.unchanged(|| {
            bench.run(&cmd(&["set", "deep", &beyond_the_parser], &task(&[]))).fails(2, "nested more than 500 levels")
        });
    }

    /// Off a terminal (a pipe, a file, a script's `$(…)`), `list` without `--limit` lists every
    /// row in every format and says nothing on stderr: a script that drops stderr is never
    /// handed a cut list. A `--limit` still pages, with its note. (At a terminal:
    /// `list_shows_a_page_of_100_at_a_terminal`.)
    fn list_without_a_limit_lists_every_row_off_a_terminal(d: Dialect) {
        let bench = with_run(d);
        seed_expiring(&bench, 150, 1000);
        for args in [&["list", "-o", "plain"][..], &["list", "--limit", "0", "-o", "plain"]] {
            let run = bench.run(args).success();
            assert_eq!(run.stdout.lines().count(), 150, "{args:?}");
            assert_eq!(run.stderr, "", "{args:?}");
        }
        let json = bench.run(&["list", "-o", "json"]).success();
        assert_eq!((json.json().as_array().unwrap().len(), json.stderr.as_str()), (150, ""));
        let yaml = bench.run(&["list", "-o", "yaml"]).success();
        assert_eq!(yaml.stdout.lines().filter(|l| l.starts_with("- ")).count(), 150);
        let table = bench.run(&["list"]).success();
        assert_eq!((table.stdout.lines().count(), table.stderr.as_str()), (152, ""), "a header, its rule, 150 rows");
        let page = bench.run(&["list", "--limit", "100", "-o", "plain"]).success();
        assert_eq!(page.stdout.lines().count(), 100);
        page.stderr_has("showing 100 rows from offset 0; more follow (--offset 100 for the next page, --limit 0 for all)");
    }

    fn stats_counts_rows_bytes_and_expiry(d: Dialect) {
        let bench = with_run(d);
        bench.add_dag_run_with("other", "r", &["t"]);
        // 10 rows: 5 expired, 1 never expiring (i % 5 == 1 and not expired), 4 in 2037.
        seed_expiring(&bench, 10, 2);
        bench.run(&["set", "soon", "\"12345\"", "--dag-id", "other", "--run-id", "r", "--task-id", "t", "--retention", "1d"]).success();
        let asset = bench.add_asset("orders", "s3://orders/", true).to_string();
        bench.run(&["set", "wm", "[1, 2, 3]", "--asset-id", &asset]).success();
        let run = bench.run(&["stats", "-o", "json", "--largest", "2"]).success();
        let v = run.json();
        assert_eq!(
            v["totals"],
            json!({"task_rows": 11, "task_value_bytes": 17, "expired": 5, "expiring_7d": 1, "never_expiring": 1,
                   "asset_rows": 1, "asset_value_bytes": 9})
        );
        let pairs = |v: &Value, a: &str, b: &str| -> Vec<Value> { v.as_array().unwrap().iter().map(|x| fields(x, &[a, b])).collect() };
        assert_eq!(pairs(&v["tasks"], "dag_id", "rows"), [json!([DAG, 10]), json!(["other", 1])]);
        assert_eq!(pairs(&v["largest_values"], "key", "bytes"), [json!(["wm", 9]), json!(["soon", 7])]);
        assert!(v["table_sizes"]["task_state_store"].as_u64().unwrap() > 0, "{v}");
        assert_eq!(v["tasks"][0]["oldest_update"], "2020-01-01T00:00:00.000000Z");
        let run = bench.run(&["stats", "--by", "task", "-o", "json"]).success();
        assert_eq!(pairs(&run.json()["tasks"], "task_id", "rows"), [json!(["t", 10]), json!(["t", 1])]);
        bench.run(&["stats"]).success().stderr_has("11 task key(s)");
    }

    fn stats_spreads_expiry_over_the_next_30_utc_days(d: Dialect) {
        let bench = with_run(d);
        let now = micros_now();
        let (hour, day) = (3_600_000_000, 86_400_000_000);
        // Instants relative to now, each well inside its day bucket or category however the
        // clock moves during the test; their expected dates come from the same instants.
        let soon = now + day + hour;
        let later_on = now + 10 * day;
        let texts: Vec<String> = [now - hour, now - 3 * day, soon, later_on, now + 40 * day].map(sqlite_text).to_vec();
        bench.insert_task_rows(DAG, RUN, &[
            ("load", -1, "expired", "1", &texts[0], Some(&texts[0])),
            ("load", -1, "expired_long_ago", "1", &texts[0], Some(&texts[1])),
            ("load", -1, "a", "1", &texts[0], Some(&texts[2])),
            ("load", -1, "b", "1", &texts[0], Some(&texts[2])),
            ("load", -1, "c", "1", &texts[0], Some(&texts[2])),
            ("load", -1, "ten_days", "1", &texts[0], Some(&texts[3])),
            ("load", -1, "forty_days", "1", &texts[0], Some(&texts[4])),
            ("load", -1, "never", "1", &texts[0], None),
        ]);
        // Asset keys have no expiry: they are counted nowhere in the spread.
        let asset = bench.add_asset("orders", "s3://orders/", true).to_string();
        bench.run(&["set", "wm", "1", "--asset-id", &asset]).success();
        let today = utc_date(now);
        let run = bench.run(&["stats", "-o", "json"]).success();
        let v = run.json();
        let expiry = &v["expiry"];
        assert_eq!(keys(expiry), ["now", "expired", "days", "later", "never"]);
        assert_eq!(json!([expiry["expired"], expiry["later"], expiry["never"]]), json!([2, 1, 1]), "{expiry}");
        assert_eq!(v["totals"]["expired"], 2, "the same now as the totals");
        let days = expiry["days"].as_array().unwrap();
        assert_eq!(days.len(), 30, "zeros included: {expiry}");
        let first = text_of(&days[0], "date");
        assert!(first == today || first == utc_date(micros_now()), "day 0 is today in UTC: {first}");
        let dates: Vec<&str> = days.iter().map(|day| text_of(day, "date")).collect();
        let expected: Vec<String> = (0..30).map(|i| utc_date(micros_of_date(first) + i * day)).collect();
        assert_eq!(dates, expected, "consecutive calendar days");
        let counted: Vec<(&str, u64)> =
            days.iter().filter(|day| day["rows"] != 0).map(|day| (text_of(day, "date"), day["rows"].as_u64().unwrap())).collect();
        assert_eq!(counted, [(utc_date(soon).as_str(), 3), (utc_date(later_on).as_str(), 1)]);
        let yaml = bench.run(&["stats", "-o", "yaml"]).success();
        assert!(yaml.stdout.contains("\nexpiry:\n  now: \""), "{}", yaml.stdout);
        // At the terminal, a bar chart: a line per day that has rows, the largest day 40 wide.
        let table = bench.run(&["stats"]).success();
        let chart: Vec<&str> = table
            .stdout
            .lines()
            .skip_while(|line| !line.starts_with("Task keys by day of expiry"))
            .take_while(|line| !line.is_empty())
            .collect();
        assert_eq!(
            chart,
            [
                "Task keys by day of expiry (UTC, today and the next 29 days):".to_string(),
                "expires    | rows".to_string(),
                format!("========== | {}", "=".repeat(45)),
                "expired    | 2".to_string(),
                format!("{} | 3    {}", utc_date(soon), "█".repeat(40)),
                format!("{} | 1    {}", utc_date(later_on), "█".repeat(14)),
                "later      | 1".to_string(),
                "never      | 1".to_string(),
            ]
        );
        assert!(chart.iter().all(|line| line.chars().count() <= 80), "{chart:?}");
        let plain = bench.run(&["stats", "-o", "plain"]).success();
        let lines: Vec<&str> = plain.stdout.lines().collect();
        assert_eq!(lines.len(), 34, "{}", plain.stdout);
        assert_eq!((lines[0], lines[1], lines[32], lines[33]), ("8 1", "expired 2", "later 1", "never 1"));
        assert!(lines.contains(&format!("{} 3", utc_date(soon)).as_str()), "{}", plain.stdout);
        let zeros = lines[2..32].iter().filter(|line| line.ends_with(" 0")).count();
        assert_eq!(zeros, 28, "{}", plain.stdout);
    }

    // ------------------------------------------------------------ doctor

    fn doctor_finds_a_healthy_store_healthy(d: Dialect) {
        let mut bench = with_run(d);
        bench.run(&cmd(&["set", "wm", "\"2026-11-28T00:00:00Z\""], &task(&[]))).success();
        let asset = bench.add_asset("orders", "s3://orders/", true).to_string();
        bench.run(&["set", "cursor", "[17, \"page-3\"]", "--asset-id", &asset]).success();
        let run = doctor(&bench, 0, &[]);
        let timestamps = if d == Dialect::Sqlite { "ok" } else { "skipped" };
        let v = run.json();
        let statuses: Vec<Value> = v["checks"].as_array().unwrap().iter().map(|c| fields(c, &["name", "status"])).collect();
        assert_eq!(
            json!([v["healthy"], statuses]),
            json!([true, [["schema", "ok"], ["dag_run_match", "ok"], ["dangling_task_rows", "ok"],
                ["missing_task_instance", "ok"], ["dangling_asset_rows", "ok"], ["json_values", "ok"], ["key_length", "ok"], ["value_size", "ok"],
                ["sqlite_timestamps", timestamps], ["sqlite_integers", timestamps], ["inactive_asset_rows", "ok"],
                ["backend", "info"]]])
        );
        assert_eq!(doctor_check(&run, "schema")["details"]["found"], "Airflow 3.3");
        assert_eq!(doctor_check(&run, "json_values")["message"], "every value is valid JSON (1 task and 1 asset row(s) read)");
        run.stderr_has("doctor: healthy");
        let table = bench.unchanged(|| bench.run(&["doctor"]).success());
        assert!(table.stdout.contains("every task row's dag_id and run_id match its dag run"), "{}", table.stdout);
        assert_eq!(table.stderr.lines().count(), 1, "{}", table.stderr);
        // A custom backend changes nothing in the tables, only what a clean would do.
        bench.env("AIRFLOW__STATE_STORE__BACKEND", "mypackage.state.CustomStateBackend");
        let run = doctor(&bench, 0, &[]);
        let backend = doctor_check(&run, "backend");
        assert!(text_of(&backend, "message").contains("clean skip this database"), "{backend}");
        assert!(backend["details"].get("expired_task_rows").is_none(), "{backend}");
    }

    fn doctor_finds_task_rows_that_disagree_with_their_dag_run(d: Dialect) {
        let bench = with_run(d);
        bench.add_dag_run("other_dag", "other_run");
        bench.insert_task_rows(DAG, RUN, &[
            ("load", -1, "a", "1", "2026-11-28 00:00:00.000000", None),
            ("load", -1, "b", "1", "2026-11-28 00:00:00.000000", None),
            ("load", -1, "c", "1", "2026-11-28 00:00:00.000000", None),
            ("load", -1, "fine", "1", "2026-11-28 00:00:00.000000", None),
        ]);
        let k = bench.key_col();
        bench.exec(&format!("UPDATE task_state_store SET dag_id = 'other_dag' WHERE {k} = 'a'"));
        bench.exec(&format!("UPDATE task_state_store SET run_id = 'other_run' WHERE {k} IN ('b', 'c')"));
        let run = doctor(&bench, 8, &["--sample", "2"]);
        assert_problem(&run, "dag_run_match", 3, "3 task row(s) disagree with their dag run");
        let check = doctor_check(&run, "dag_run_match");
        assert_eq!(sample(&check, &["dag_id", "run_id", "key"]), [json!(["other_dag", RUN, "a"]), json!([DAG, "other_run", "b"])]);
        let detail = text_of(&check["sample"][0], "detail");
        assert!(detail.contains(&format!("is dag_id=\"{DAG}\" run_id=\"{RUN}\"")), "{detail}");
        assert_eq!(doctor_check(&run, "dangling_task_rows")["status"], "ok");
    }

    fn doctor_finds_task_rows_whose_dag_run_is_gone(d: Dialect) {
        let bench = with_run(d);
        bench.insert_task_row(DAG, RUN, "load", -1, "kept", "1", "2026-11-28 00:00:00.000000", None);
        without_foreign_keys(&bench, &format!(
            "INSERT INTO task_state_store (dag_run_id, task_id, map_index, {}, dag_id, run_id, value, updated_at, expires_at) \
             VALUES (999, 'load', 2, 'lost', 'gone_dag', 'gone_run', '1', {}, NULL)",
            bench.key_col(),
            bench.ts_lit(Some("2026-11-28 00:00:00.000000"))
        ));
        let run = doctor(&bench, 8, &[]);
        assert_problem(&run, "dangling_task_rows", 1, "1 task row(s) point at a dag run that no longer exists");
        assert_eq!(
            sample(&doctor_check(&run, "dangling_task_rows"), &["dag_id", "map_index", "key", "detail"]),
            [json!(["gone_dag", 2, "lost", "dag_run_id 999 does not exist"])]
        );
        assert_eq!(doctor_check(&run, "dag_run_match")["status"], "ok", "a missing run is not a mismatch");
    }

    fn doctor_warns_of_keys_whose_task_instance_does_not_exist(d: Dialect) {
        let bench = with_run(d);
        bench.add_task_instance(DAG, RUN, "map", &[0, 1]);
        bench.run(&cmd(&["set", "kept", "1"], &task(&[]))).success();
        bench.run(&cmd(&["set", "gone", "1", "--dag-id", DAG, "--run-id", RUN, "--task-id", "removed"], &["--allow-missing-task-instance"])).success();
        bench.insert_task_rows(DAG, RUN, &[
            ("map", 0, "offset", "1", "2026-11-28 00:00:00.000000", None),
            ("map", 2, "offset", "1", "2026-11-28 00:00:00.000000", None),
            // Compared as the database and Airflow compare: another case is another task
            // everywhere; trailing spaces are ignored by MySQL's `_bin` collations alone.
            ("Load", -1, "case", "1", "2026-11-28 00:00:00.000000", None),
            ("load ", -1, "padded", "1", "2026-11-28 00:00:00.000000", None),
        ]);
        let found = if d == Dialect::Mysql { 3 } else { 4 };
        // A warning, not damage: the run is healthy and exits 0.
        let run = doctor(&bench, 0, &["--sample", "3"]);
        assert_eq!(run.json()["healthy"], true);
        let check = doctor_check(&run, "missing_task_instance");
        assert_eq!(fields(&check, &["status", "count"]), json!(["warning", found]), "{check}");
        assert!(text_of(&check, "message").starts_with(&format!("{found} task row(s) belong to a task instance that does not exist")), "{check}");
        assert_eq!(
            sample(&check, &["table", "dag_id", "run_id", "task_id", "map_index", "key", "detail"]),
            [
                json!(["task_state_store", DAG, RUN, "removed", -1, "gone", "no task instance of this task in the run"]),
                json!(["task_state_store", DAG, RUN, "map", 2, "offset",
                       "no task instance with this map index; the task has 2 other instance(s) in the run"]),
                json!(["task_state_store", DAG, RUN, "Load", -1, "case", "no task instance of this task in the run"]),
            ]
        );
        let (ok, skipped) = if d == Dialect::Sqlite { (10, 0) } else { (8, 2) };
        run.stderr_has(&format!("doctor: healthy: {ok} check(s) ok, 1 warning(s), {skipped} skipped"));
        let table = bench.unchanged(|| bench.run(&["doctor", "--sample", "1"]).success());
        assert!(table.stdout.contains(&format!("\nmissing_task_instance: 1 of {found} row(s):\n")), "{}", table.stdout);
        let plain = bench.run(&["doctor", "-o", "plain"]).success();
        assert!(plain.stdout.contains(&format!("\ndangling_task_rows ok 0\nmissing_task_instance warning {found}\n")), "{}", plain.stdout);
        // A row whose dag run is gone, or disagrees with it, is the other checks' problem alone.
        without_foreign_keys(&bench, &format!(
            "INSERT INTO task_state_store (dag_run_id, task_id, map_index, {}, dag_id, run_id, value, updated_at, expires_at) \
             VALUES (999, 'lost', -1, 'lost', 'gone_dag', 'gone_run', '1', {}, NULL)",
            bench.key_col(),
            bench.ts_lit(Some("2026-11-28 00:00:00.000000"))
        ));
        bench.add_dag_run("other_dag", "other_run");
        bench.insert_task_row("other_dag", "other_run", "t", -1, "moved", "1", "2026-11-28 00:00:00.000000", None);
        bench.exec(&format!("UPDATE task_state_store SET run_id = {} WHERE {} = 'moved'", bench.lit(RUN), bench.key_col()));
        let run = doctor(&bench, 8, &[]);
        assert_eq!(fields(&doctor_check(&run, "missing_task_instance"), &["status", "count"]), json!(["warning", found]));
        assert_eq!(fields(&doctor_check(&run, "dangling_task_rows"), &["status", "count"]), json!(["problem", 1]));
        assert_eq!(fields(&doctor_check(&run, "dag_run_match"), &["status", "count"]), json!(["problem", 1]));
        run.stderr_has("error: doctor found 2 problem(s): dag_run_match (1), dangling_task_rows (1); 1 warning(s)");
        // Once the instances exist, nothing is left to report.
        bench.exec(&format!("DELETE FROM task_state_store WHERE {} IN ('lost', 'moved', 'case', 'padded')", bench.key_col()));
        bench.add_task_instance(DAG, RUN, "removed", &[]);
        bench.add_task_instance(DAG, RUN, "map", &[2]);
        let run = doctor(&bench, 0, &[]);
        let check = doctor_check(&run, "missing_task_instance");
        assert_eq!(fields(&check, &["status", "count", "message"]), json!(["ok", 0, "every task row's task instance exists"]));
    }

    fn doctor_finds_asset_rows_whose_asset_is_gone(d: Dialect) {
        let bench = Bench::on(d);
        let asset = bench.add_asset("orders", "s3://orders/", true).to_string();
        bench.run(&["set", "kept", "1", "--asset-id", &asset]).success();
        without_foreign_keys(&bench, &format!(
            "INSERT INTO asset_state_store (asset_id, {}, value, updated_at, last_updated_by_kind) VALUES (999, 'lost', '1', {}, 'api')",
            bench.key_col(),
            bench.ts_lit(Some("2026-11-28 00:00:00.000000"))
        ));
        let run = doctor(&bench, 8, &[]);
        assert_problem(&run, "dangling_asset_rows", 1, "1 asset row(s) point at an asset that no longer exists");
        assert_eq!(
            sample(&doctor_check(&run, "dangling_asset_rows"), &["asset_id", "asset_name", "key", "detail"]),
            [json!([999, null, "lost", "asset id 999 does not exist"])]
        );
        // The next clean deletes such a row with the keys of inactive assets: a warning too.
        assert_eq!(fields(&doctor_check(&run, "inactive_asset_rows"), &["status", "count"]), json!(["warning", 1]));
    }

    fn doctor_finds_values_that_are_not_json_reading_page_by_page(d: Dialect) {
        let bench = with_run(d);
        // More rows than one page of the check (500) in each table, the damaged ones last.
        seed_expiring(&bench, 1100, 1000);
        bench.insert_task_rows(DAG, RUN, &[
            ("load", -1, "broken", "not json", "2026-11-28 00:00:00.000000", None),
            ("load", -1, "nan", "NaN", "2026-11-28 00:00:00.000000", None),
        ]);
        let asset = bench.add_asset("orders", "s3://orders/", true);
        let k = bench.key_col();
        let rows: Vec<String> = (0..600)
            .map(|i| format!("({asset}, 'k{i:04}', '[{i}]', {})", bench.ts_lit(Some("2026-11-28 00:00:00.000000"))))
            .collect();
        bench.exec(&format!("INSERT INTO asset_state_store (asset_id, {k}, value, updated_at) VALUES {}", rows.join(", ")));
        bench.exec(&format!(
            "INSERT INTO asset_state_store (asset_id, {k}, value, updated_at) VALUES ({asset}, 'zz', '{{bad', {})",
            bench.ts_lit(Some("2026-11-28 00:00:00.000000"))
        ));
        let run = doctor(&bench, 8, &[]);
        assert_problem(&run, "json_values", 2, "2 value(s) Airflow cannot read back: not JSON to json.loads");
        assert_eq!(
            sample(&doctor_check(&run, "json_values"), &["table", "key", "detail"]),
            [
                json!(["task_state_store", "broken", "Expecting value: line 1 column 1 (char 0); stored text: not json"]),
                json!(["asset_state_store", "zz", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1); stored text: {bad"]),
            ]
        );
        // Valid JSON nested deeper than Airflow reads back (200 levels with its wrapper), and
        // deeper than this tool parses: both are values a task cannot read.
        let nested = |levels: usize| format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
        bench.insert_task_rows(DAG, RUN, &[
            ("load", -1, "deep199", &nested(199), "2026-11-28 00:00:00.000000", None),
            ("load", -1, "deep200", &nested(200), "2026-11-28 00:00:00.000000", None),
            ("load", -1, "deep600", &nested(600), "2026-11-28 00:00:00.000000", None),
        ]);
        let run = doctor(&bench, 8, &[]);
        assert_problem(&run, "json_values", 4, "4 value(s)");
        let check = doctor_check(&run, "json_values");
        let mut deep: Vec<(&str, &str)> = check["sample"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| text_of(r, "key").starts_with("deep"))
            .map(|r| (text_of(r, "key"), text_of(r, "detail").split(':').next().unwrap()))
            .collect();
        deep.sort_unstable();
        assert_eq!(deep, [("deep200", "nested 200 levels deep"), ("deep600", "nested more than 500 levels deep")]);
        bench.exec(&format!("DELETE FROM task_state_store WHERE {k} IN ('deep200', 'deep600')"));
        // Every row was read once: Python's json.loads reads NaN, so that row is no problem.
        bench.exec(&format!("DELETE FROM task_state_store WHERE {k} = 'broken'"));
        bench.exec(&format!("DELETE FROM asset_state_store WHERE {k} = 'zz'"));
        let run = doctor(&bench, 0, &[]);
        assert_eq!(doctor_check(&run, "json_values")["message"], "every value is valid JSON (1102 task and 600 asset row(s) read)");
    }

    fn doctor_finds_keys_longer_than_airflow_allows(d: Dialect) {
        let bench = with_run(d);
        if d != Dialect::Sqlite {
            // Airflow's VARCHAR(512) refuses longer keys on PostgreSQL and MySQL, so Airflow's
            // schema cannot hold this damage there; the column is widened (as a hand-altered
            // schema would be) so that the check's own SQL still runs on this dialect.
            bench.exec(match d {
                Dialect::Postgres => r#"ALTER TABLE task_state_store ALTER COLUMN "key" TYPE VARCHAR(600)"#,
                _ => "ALTER TABLE task_state_store MODIFY `key` VARCHAR(600) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL",
            });
        }
        let long = "k".repeat(513);
        // 400 characters, 800 bytes: the limit is in characters.
        let wide = "é".repeat(400);
        bench.insert_task_rows(DAG, RUN, &[
            ("load", -1, &long, "1", "2026-11-28 00:00:00.000000", None),
            ("load", -1, &wide, "1", "2026-11-28 00:00:00.000000", None),
        ]);
        let run = doctor(&bench, 8, &[]);
        assert_problem(&run, "key_length", 1, "1 key(s) are longer than Airflow's 512 characters");
        let check = doctor_check(&run, "key_length");
        let rows: Vec<(usize, &str)> = check["sample"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (text_of(r, "key").chars().count(), text_of(r, "detail")))
            .collect();
        assert_eq!(rows, [(513, "513 characters")]);
        let table = bench.run(&["doctor"]).code(8);
        assert!(table.stdout.contains(&format!("{}…", "k".repeat(59))), "the table cuts long keys: {}", table.stdout);
    }

    fn doctor_finds_values_over_max_value_storage_bytes(d: Dialect) {
        let mut bench = with_run(d);
        bench.insert_task_rows(DAG, RUN, &[
            ("load", -1, "small", "123456789", "2026-11-28 00:00:00.000000", None),
            // 7 characters, 12 bytes as stored: measured in bytes, as `set` measures.
            ("load", -1, "wide", "\"ééééé\"", "2026-11-28 00:00:00.000000", None),
        ]);
        let asset = bench.add_asset("orders", "s3://orders/", true).to_string();
        bench.run(&["set", "big", "[1, 2, 3, 4]", "--asset-id", &asset]).success();
        // The default limit, 65535 bytes, holds them all.
        doctor(&bench, 0, &[]);
        // Over the limit is a warning, not damage: Airflow's workers may write such values (its
        // task SDK only warns), so the metastore is still healthy and doctor exits 0.
        bench.env("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "10");
        let run = doctor(&bench, 0, &[]);
        let check = doctor_check(&run, "value_size");
        assert_eq!(fields(&check, &["status", "count"]), json!(["warning", 2]));
        let message = text_of(&check, "message");
        assert!(message.contains("2 value(s) are larger than [state_store] max_value_storage_bytes = 10 (from environment variable AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES); Airflow's workers may write them"), "{message}");
        assert_eq!(run.json()["healthy"], true);
        assert_eq!(
            sample(&check, &["table", "key", "detail"]),
            [json!(["task_state_store", "wide", "12 bytes"]), json!(["asset_state_store", "big", "12 bytes"])]
        );
        bench.env("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "0");
        let run = doctor(&bench, 0, &[]);
        assert_eq!(fields(&doctor_check(&run, "value_size"), &["status", "count"]), json!(["skipped", null]));
    }

    fn doctor_finds_sqlite_timestamps_airflow_compares_wrongly(d: Dialect) {
        let bench = with_run(d);
        if d != Dialect::Sqlite {
            // PostgreSQL and MySQL store timestamps as timestamps: the check does not apply.
            let run = doctor(&bench, 0, &[]);
            let check = doctor_check(&run, "sqlite_timestamps");
            assert_eq!(fields(&check, &["status", "count"]), json!(["skipped", null]));
            assert!(text_of(&check, "message").contains("not applicable"), "{check}");
            return;
        }
        bench.insert_task_rows(DAG, RUN, &[
            ("load", -1, "good", "1", "2026-11-28 00:00:00.000000", Some("2026-12-28 00:00:00.000000")),
            ("load", -1, "iso", "1", "2026-11-28T00:00:00Z", None),
            ("load", -1, "short", "1", "2026-11-28 00:00:00.000000", Some("2026-12-28 00:00:00")),
        ]);
        let asset = bench.add_asset("orders", "s3://orders/", true);
        bench.exec(&format!(
            "INSERT INTO asset_state_store (asset_id, \"key\", value, updated_at) VALUES ({asset}, 'offset', '1', '2026-11-28 00:00:00.000000+00:00')"
        ));
        let run = doctor(&bench, 8, &[]);
        assert_problem(&run, "sqlite_timestamps", 3, "3 row(s) hold a timestamp not in Airflow's stored form YYYY-MM-DD HH:MM:SS.ffffff");
        assert_eq!(
            sample(&doctor_check(&run, "sqlite_timestamps"), &["key", "detail"]),
            [
                json!(["iso", "updated_at \"2026-11-28T00:00:00Z\""]),
                json!(["short", "expires_at \"2026-12-28 00:00:00\""]),
                json!(["offset", "updated_at \"2026-11-28 00:00:00.000000+00:00\""]),
            ]
        );
    }

    fn doctor_names_pre_release_tables(d: Dialect) {
        let bench = with_run(d);
        bench.exec("ALTER TABLE task_state_store RENAME TO task_state");
        bench.exec("ALTER TABLE asset_state_store RENAME TO asset_state");
        let before = bench.rows("SELECT count(*) FROM task_state");
        let run = bench.run(&["doctor", "-o", "json"]).code(5);
        assert_eq!(before, bench.rows("SELECT count(*) FROM task_state"));
        assert_schema_problem(&run, "pre-release Airflow 3.3", "has the pre-release Airflow 3.3 table(s) task_state, asset_state");
    }

    fn doctor_names_an_airflow_3_4_schema(d: Dialect) {
        let bench = with_run(d);
        bench.exec("ALTER TABLE task_state_store ADD COLUMN region_id VARCHAR(250)");
        let run = bench.unchanged(|| bench.run(&["doctor", "-o", "json"]).code(5));
        assert_schema_problem(&run, "Airflow 3.4", "has the Airflow 3.4 state-store schema (task_state_store.region_id)");
    }

    fn doctor_names_missing_tables(d: Dialect) {
        let bench = with_run(d);
        bench.exec("DROP TABLE task_state_store");
        bench.exec("DROP TABLE asset_state_store");
        let runs = bench.rows("SELECT id, dag_id, run_id FROM dag_run");
        let run = bench.run(&["doctor", "-o", "json"]).code(5);
        assert_eq!(runs, bench.rows("SELECT id, dag_id, run_id FROM dag_run"));
        assert_schema_problem(&run, "no state-store tables", "has no task_state_store or asset_state_store table");
        // The table form says the same, and the error line is the one every command gives.
        let table = bench.run(&["doctor"]).fails(5, "no task_state_store or asset_state_store table");
        assert!(table.stdout.contains("schema                | problem"), "{}", table.stdout);
        bench.run(&["list"]).fails(5, "no task_state_store or asset_state_store table");
    }

    fn doctor_json_output_has_a_stable_shape(d: Dialect) {
        let bench = with_run(d);
        bench.insert_task_row(DAG, RUN, "load", 3, "broken", "{", "2026-11-28 00:00:00.000000", Some("2020-01-01 00:00:00.000000"));
        let inactive = bench.add_asset("legacy", "s3://legacy/", false).to_string();
        bench.exec(&format!(
            "INSERT INTO asset_state_store (asset_id, {}, value, updated_at) VALUES ({inactive}, 'cursor', '17', {})",
            bench.key_col(),
            bench.ts_lit(Some("2026-11-28 00:00:00.000000"))
        ));
        let run = doctor(&bench, 8, &[]);
        let v = run.json();
        let mut members = keys(&v);
        members.sort_unstable();
        assert_eq!(members, ["checks", "healthy"]);
        assert_eq!(
            each(&v["checks"], "name"),
            ["schema", "dag_run_match", "dangling_task_rows", "missing_task_instance", "dangling_asset_rows", "json_values", "key_length",
             "value_size", "sqlite_timestamps", "sqlite_integers", "inactive_asset_rows", "backend"].map(|n| json!(n)).iter().collect::<Vec<_>>()
        );
        let shapes: std::collections::BTreeSet<Vec<&str>> = v["checks"].as_array().unwrap().iter().map(keys).collect();
        assert_eq!(shapes, [vec!["name", "status", "message", "count", "sample", "details"]].into_iter().collect());
        assert_eq!(
            keys(&doctor_check(&run, "json_values")["sample"][0]),
            ["table", "dag_id", "run_id", "task_id", "map_index", "key", "detail"]
        );
        let inactive = doctor_check(&run, "inactive_asset_rows");
        assert_eq!(inactive["status"], "warning");
        assert_eq!(keys(&inactive["sample"][0]), ["table", "asset_id", "asset_name", "key", "detail"]);
        assert_eq!(inactive["sample"][0]["asset_name"], "legacy");
        let dialect = match d { Dialect::Sqlite => "SQLite", Dialect::Postgres => "PostgreSQL", Dialect::Mysql => "MySQL/MariaDB" };
        let backend = doctor_check(&run, "backend");
        let details = &backend["details"];
        assert_eq!(
            json!([backend["status"], backend["count"], details["dialect"], details["database"],
                details["state_cleanup_batch_size"], details["default_retention_days_from"],
                details["expired_task_rows"], details["orphaned_asset_rows"]]),
            json!(["info", null, dialect, bench.url(), 0, "default", 1, 1])
        );
        let yaml = bench.run(&["doctor", "-o", "yaml"]).code(8);
        assert!(yaml.stdout.starts_with("healthy: false\nchecks:\n  - name: \"schema\"\n"), "{}", yaml.stdout);
        let plain = bench.run(&["doctor", "-o", "plain"]).code(8);
        assert!(plain.stdout.starts_with("schema ok\ndag_run_match ok 0\n"), "{}", plain.stdout);
        assert!(plain.stdout.contains("\njson_values problem 1\n"), "{}", plain.stdout);
    }

}

// ---------------------------------------------------------------- the command line itself

#[test]
fn doctor_help_lists_its_checks_and_exit_codes() {
    let run = Bench::bare().run(&["doctor", "--help"]).success();
    for word in [
        "dag_run_match",
        "missing_task_instance",
        "sqlite_timestamps",
        "inactive_asset_rows",
        "backend",
        "--sample",
        "8    a check found a problem",
        "5    the schema is not recognised",
    ] {
        assert!(run.stdout.contains(word), "doctor --help lacks {word}: {}", run.stdout);
    }
    assert!(Bench::bare().run(&["--help"]).success().stdout.contains("8    doctor found problems"));
    assert!(Bench::bare().run(&["--help"]).success().stdout.contains("9    import --on-conflict fail"));
}

#[test]
fn help_lists_commands_and_exit_codes() {
    let bench = Bench::bare();
    let run = bench.run(&["--help"]).success();
    for word in [
        "get",
        "set",
        "delete",
        "clear",
        "list",
        "clean",
        "export",
        "import",
        "Exit codes",
        "130",
        "AIRFLOW__SECTION__KEY",
    ] {
        assert!(run.stdout.contains(word), "--help lacks {word}: {}", run.stdout);
    }
    for sub in ["get", "set", "delete", "clear", "list", "clean", "export", "import", "sandbox"] {
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
fn usage_errors_keep_clap_suggestions_on_their_one_line() {
    let bench = Bench::bare();
    let run = bench.run(&["lsit"]).fails(2, "unrecognized subcommand 'lsit'");
    assert!(run.stderr.contains("(did you mean 'list'"), "{}", run.stderr);
    assert!(run.stderr.trim_end().ends_with("(see --help)"), "{}", run.stderr);
    bench.run(&["list", "--dag_id", DAG]).fails(2, "'--dag_id' found (did you mean '--dag-id'?)");
    bench.run(&["config", "shwo"]).fails(2, "(did you mean 'show'?)");
    bench.run(&["list", "-o", "jsn"]).fails(2, "(did you mean 'json'?)");
    let run = bench.run(&["frobnicate"]).fails(2, "unrecognized subcommand 'frobnicate' (see --help)");
    assert!(!run.stderr.contains("did you mean"), "{}", run.stderr);
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

/// The clean's SQLite session settings follow the database's journal mode: a WAL database
/// (as Airflow leaves it) has its WAL copied back by the clean even while another connection
/// keeps it open, and the WAL file emptied when no reader is in a transaction; a
/// rollback-journal database is cleaned and stays in that mode.
#[test]
fn sqlite_clean_leaves_the_journal_as_it_found_it() {
    let bench = with_run(Dialect::Sqlite);
    let survivors = seed_expiring(&bench, 3000, 2);
    let reader = bench.sqlite();
    assert_eq!(reader.query_row("PRAGMA journal_mode", [], |r| r.get::<_, String>(0)).unwrap(), "wal");
    let wal = std::path::PathBuf::from(format!("{}-wal", bench.db.display()));
    let wal_size = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    bench.run(&["clean", "--batch-size", "100"]).success().stderr_has("deleted 1500 expired task row(s)");
    // Another connection is open, so closing the clean's did not checkpoint or remove the WAL:
    // the clean copied it back and emptied the file.
    assert!(wal.exists(), "the reader keeps the WAL");
    assert_eq!(wal_size(), 0, "the clean's last checkpoint truncates the WAL");
    assert_eq!(remaining_keys(&bench), survivors);

    drop(reader);

    // A reader inside a transaction: the clean copies back what it can, and its try at
    // emptying the WAL gives up at once instead of holding the writers off.
    let bench = with_run(Dialect::Sqlite);
    let survivors = seed_expiring(&bench, 3000, 2);
    let reader = bench.sqlite();
    reader.execute_batch("BEGIN; SELECT count(*) FROM task_state_store;").unwrap();
    let wal = std::path::PathBuf::from(format!("{}-wal", bench.db.display()));
    bench.run(&["clean", "--batch-size", "100"]).success().stderr_has("deleted 1500 expired task row(s)");
    assert!(std::fs::metadata(&wal).unwrap().len() > 0, "the WAL a reader still uses is kept");
    reader.execute_batch("COMMIT").unwrap();
    assert_eq!(remaining_keys(&bench), survivors);
    drop(reader);

    let bench = with_run(Dialect::Sqlite);
    bench.sqlite().pragma_update(None, "journal_mode", "delete").unwrap();
    let survivors = seed_expiring(&bench, 300, 3);
    bench.run(&["clean", "--batch-size", "7"]).success().stderr_has("deleted 100 expired task row(s)");
    assert_eq!(remaining_keys(&bench), survivors);
    let mode: String = bench.sqlite().query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "delete");
    assert!(!std::path::Path::new(&format!("{}-wal", bench.db.display())).exists());
    let check: String = bench.sqlite().query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
}

/// Rows written key by key across dag runs, as concurrent runs write them: ids 1 to `runs` hold
/// the first key of every dag run, the next ones the second key, and so on. Every key of an
/// even dag run has expired, and every other key of an odd one; returns the dag run ids.
fn seed_key_by_key(bench: &Bench, runs: usize, keys: usize) -> Vec<i64> {
    let ids: Vec<i64> = (0..runs)
        .map(|r| {
            let run = format!("run_{r}");
            bench.add_dag_run_with(DAG, &run, &["t"]);
            bench.scalar(&format!("SELECT id FROM dag_run WHERE run_id = '{run}'")).parse().unwrap()
        })
        .collect();
    let mut values = Vec::new();
    for k in 0..keys {
        for (r, id) in ids.iter().enumerate() {
            let expires = if r % 2 == 0 || k % 2 == 0 {
                "2020-01-01 00:00:00.000000"
            } else {
                "2037-01-01 00:00:00.000000"
            };
            values.push(format!(
                "({id}, 't', -1, 'k{k:03}', '{DAG}', 'run_{r}', '1', '2020-01-01 00:00:00.000000', '{expires}')"
            ));
        }
    }
    bench.exec(&format!(
        "INSERT INTO task_state_store (dag_run_id, task_id, map_index, \"key\", dag_id, run_id, value, updated_at, \
         expires_at) VALUES {}",
        values.join(", ")
    ));
    ids
}

/// Expired rows left per dag run, in dag run order.
fn expired_per_run(bench: &Bench, runs: &[i64]) -> Vec<i64> {
    runs.iter()
        .map(|id| {
            let sql = format!(
                "SELECT count(*) FROM task_state_store WHERE dag_run_id = {id} AND expires_at < '2026-01-01'"
            );
            bench.scalar(&sql).parse().unwrap()
        })
        .collect()
}

/// On SQLite a batched clean walks the table dag run by dag run when its ids scatter the
/// dag runs' rows: where the ids go key by key across the dag runs, each batch of ids held a
/// row of every dag run, and its commit rewrote nearly every page of the unique and the lookup
/// index (docs/performance.md). A run stopped by `--max-rows` has emptied the first dag runs
/// and left the others as they were (walked by id, it took the first keys of every dag run);
/// `-v` says which dag runs each batch covered, and the progress lines how far along the dag
/// runs the walk is; the next run deletes the rest and nothing live. A table whose dag runs
/// each have their ids together is walked by id (`clean_verbose_details_every_batch`).
#[test]
fn sqlite_batches_walk_the_dag_runs_not_the_ids() {
    let bench = Bench::on(Dialect::Sqlite);
    let runs = seed_key_by_key(&bench, 40, 20);
    let mut expired: Vec<i64> = (0..40).map(|r| if r % 2 == 0 { 20 } else { 10 }).collect();
    assert_eq!(expired_per_run(&bench, &runs), expired);
    let live: i64 = bench
        .scalar("SELECT count(*) FROM task_state_store WHERE expires_at > '2026-01-01'")
        .parse()
        .unwrap();
    let run = bench.run(&["clean", "--batch-size", "15", "--max-rows", "60", "-v", "-o", "json"]).success();
    assert_eq!(one_document(&run)["task_rows_deleted"], 60, "{}", run.stdout);
    expired[..4].fill(0);
    assert_eq!(expired_per_run(&bench, &runs), expired, "{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("clean: batch ")).collect();
    assert_eq!(lines.len(), 4, "{}", run.stderr);
    // Each id named for what it is: the dag run's, and the row's within it.
    assert!(
        lines[0].contains(&format!("dag runs up to dag_run_id {} (task_state_store id ", runs[0])),
        "{}",
        run.stderr
    );
    assert!(
        lines[3].contains(&format!("up to dag_run_id {} (task_state_store id ", runs[3])),
        "{}",
        run.stderr
    );

    // The walk goes on where it stopped, at a fixed size and with the default batches alike.
    bench.run(&["clean", "--batch-size", "7", "--max-rows", "50"]).success();
    expired[..7].fill(0);
    assert_eq!(expired_per_run(&bench, &runs), expired);
    let left: i64 = expired.iter().sum();
    let args = ["clean", "--batch-size", "10", "--sleep", "20ms", "--progress-every", "100ms", "-o", "json"];
    let run = bench.run(&args).success();
    assert_eq!(one_document(&run)["task_rows_deleted"], left, "{}", run.stderr);
    assert_eq!(expired_per_run(&bench, &runs), [0; 40]);
    let left_now: i64 = bench.scalar("SELECT count(*) FROM task_state_store").parse().unwrap();
    assert_eq!(left_now, live, "every live row stays");
    // How far along the dag runs, and the rows that makes in all once the walk is past its
    // first batch: the 7 dag runs emptied before are behind it then.
    let progress: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("clean: progress: ")).collect();
    assert!(progress.len() >= 2, "{}", run.stderr);
    let totals: Vec<f64> = progress
        .iter()
        .filter_map(|l| l.split("(about ").nth(1))
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(!totals.is_empty(), "{}", run.stderr);
    #[allow(clippy::cast_precision_loss)]
    let left = left as f64;
    assert!(totals.iter().all(|t| (left / 2.0..=left * 2.0).contains(t)), "{left} left: {}", run.stderr);
}

/// A dag run id that SQLite holds as text or as a real number (rows written with foreign keys
/// off) is no end of a batch in the walk by dag run, yet its expired rows are deleted: a real
/// one by the batch whose dag runs it sorts between, a text one, which sorts after every
/// integer, by the last batch. The run ends, and leaves the live rows.
#[test]
fn sqlite_batches_delete_rows_whose_dag_run_id_is_not_an_integer() {
    let bench = Bench::on(Dialect::Sqlite);
    let runs = seed_key_by_key(&bench, 40, 20);
    let row = |dag_run: &str, key: &str, expires: &str| {
        format!(
            "INSERT INTO task_state_store (dag_run_id, task_id, map_index, \"key\", dag_id, run_id, value, \
             updated_at, expires_at) VALUES ({dag_run}, 't', -1, '{key}', '{DAG}', 'gone', '1', \
             '2020-01-01 00:00:00.000000', '{expires}');"
        )
    };
    let (old, new) = ("2020-01-01 00:00:00.000000", "2037-01-01 00:00:00.000000");
    let middle = format!("{}.5", runs[1]);
    let sql = [
        row("'orphan'", "a", old),
        row("'orphan'", "b", new),
        row(&middle, "a", old),
        row(&middle, "b", old),
        row(&middle, "c", new),
        row("X'00'", "a", old),
    ]
    .concat();
    without_foreign_keys(&bench, &sql);
    let kinds = bench.scalar(
        "SELECT group_concat(kind) FROM (SELECT DISTINCT typeof(dag_run_id) AS kind FROM task_state_store ORDER BY kind)",
    );
    assert_eq!(kinds, "blob,integer,real,text");
    let expired: i64 = bench
        .scalar("SELECT count(*) FROM task_state_store WHERE expires_at < '2026-01-01'")
        .parse()
        .unwrap();
    let total: i64 = bench.scalar("SELECT count(*) FROM task_state_store").parse().unwrap();
    let run = bench.run(&["clean", "--batch-size", "2", "-v", "-o", "json"]).success();
    assert!(
        run.stderr.contains("expired task row(s), dag runs after dag_run_id "),
        "walked by dag run: {}",
        run.stderr
    );
    assert_eq!(one_document(&run)["task_rows_deleted"], expired, "{}", run.stderr);
    let left: i64 = bench.scalar("SELECT count(*) FROM task_state_store").parse().unwrap();
    assert_eq!(left, total - expired);
    let expired_left = bench.scalar("SELECT count(*) FROM task_state_store WHERE expires_at < '2026-01-01'");
    assert_eq!(expired_left, "0");
}

/// The first row of a clean's walk is walked too: an expired row whose id is -2^63 (the
/// least rowid SQLite gives) and one whose dag run id is a real below -2^63 (written with
/// foreign keys off) are deleted and counted, by a clean walking by dag run, by id, and in one
/// transaction (`--batch-size 0`).
#[test]
fn sqlite_clean_deletes_the_rows_at_the_very_start_of_its_walk() {
    for (scattered, batch) in [(true, "2"), (false, "2"), (false, "0")] {
        let bench = Bench::on(Dialect::Sqlite);
        if scattered {
            seed_key_by_key(&bench, 40, 20);
        } else {
            bench.add_dag_run_with(DAG, "run_0", &["t"]);
            for k in 0..40 {
                bench.exec(&format!(
                    "INSERT INTO task_state_store (dag_run_id, task_id, map_index, \"key\", dag_id, run_id, value, \
                     updated_at, expires_at) VALUES ((SELECT id FROM dag_run WHERE run_id = 'run_0'), 't', -1, \
                     'k{k:02}', '{DAG}', 'run_0', '1', '2020-01-01 00:00:00.000000', '{}')",
                    if k % 2 == 0 { "2020-01-01 00:00:00.000000" } else { "2037-01-01 00:00:00.000000" }
                ));
            }
        }
        // The least id only where the walk is by id: in the sample that chooses the walk by dag
        // run, its dag run would span every id.
        if !scattered {
            bench.exec(&format!(
                "INSERT INTO task_state_store (id, dag_run_id, task_id, map_index, \"key\", dag_id, run_id, value, \
                 updated_at, expires_at) VALUES (-9223372036854775808, (SELECT min(id) FROM dag_run), 't', -1, \
                 'least id', '{DAG}', 'run_0', '1', '2020-01-01 00:00:00.000000', '2020-01-01 00:00:00.000000')"
            ));
        }
        without_foreign_keys(
            &bench,
            &format!(
                "INSERT INTO task_state_store (dag_run_id, task_id, map_index, \"key\", dag_id, run_id, value, \
                 updated_at, expires_at) VALUES (-1e19, 't', -1, 'least dag run', '{DAG}', 'gone', '1', \
                 '2020-01-01 00:00:00.000000', '2020-01-01 00:00:00.000000');"
            ),
        );
        assert_eq!(
            bench.scalar("SELECT typeof(dag_run_id) FROM task_state_store WHERE \"key\" = 'least dag run'"),
            "real"
        );
        let expired: i64 = bench
            .scalar("SELECT count(*) FROM task_state_store WHERE expires_at < '2026-01-01'")
            .parse()
            .unwrap();
        let run = bench.run(&["clean", "--batch-size", batch, "-v", "-o", "json"]).success();
        if batch != "0" {
            let walk = if scattered { "dag runs" } else { "ids" };
            assert!(run.stderr.contains(&format!("expired task row(s), {walk}")), "{}", run.stderr);
        }
        assert_eq!(one_document(&run)["task_rows_deleted"], expired, "{}", run.stderr);
        let left = bench
            .scalar("SELECT coalesce(group_concat(\"key\"), '') FROM task_state_store WHERE expires_at < '2026-01-01'");
        assert_eq!(left, "", "scattered {scattered}, batch size {batch}: {}", run.stderr);
    }
}

/// `export` and `doctor` read the row with id -2^63 too: their walks along the primary key
/// start at the least id, inclusive.
#[test]
fn sqlite_export_and_doctor_read_the_row_with_the_least_id() {
    let bench = with_run(Dialect::Sqlite);
    bench.insert_task_row(DAG, RUN, "t", -1, "k", "1", "2020-01-01 00:00:00.000000", None);
    bench.exec(&format!(
        "INSERT INTO task_state_store (id, dag_run_id, task_id, map_index, \"key\", dag_id, run_id, value, \
         updated_at, expires_at) VALUES (-9223372036854775808, (SELECT min(id) FROM dag_run), 't', -1, \
         'least id', '{DAG}', '{RUN}', 'not json', '2020-01-01 00:00:00.000000', NULL)"
    ));
    let run = bench.run(&["export"]).success();
    assert_eq!(run.stdout.lines().count(), 2, "{}", run.stdout);
    assert!(run.stdout.contains("least id"), "{}", run.stdout);
    let run = bench.run(&["doctor", "-o", "json"]).code(8);
    let check = doctor_check(&run, "json_values");
    assert!(check.to_string().contains("least id"), "{check}");
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
        b.run(&args).success().json()["batch_size"].to_string()
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
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        fields(&doc, &["batching", "batching_from", "batch_size", "batch_time_ms"]),
        json!(["auto", "state_cleanup_batch_size = 0 from default", null, 10]),
        "nothing sets it: auto (batches of about 10 ms beside writers), not one transaction"
    );
    // Airflow's default, 0, which every airflow.cfg Airflow generates names, is auto too; the
    // flag's 0 is Airflow's one transaction.
    bench.write_config("other.cfg", "[state_store]\nstate_cleanup_batch_size = 0\n");
    bench.env("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE", "0");
    let doc = bench.run(&["clean", "--dry-run", "-o", "json"]).success().json();
    assert_eq!(
        fields(&doc, &["batching", "batching_from", "batch_size", "batch_time_ms"]),
        json!([
            "auto",
            "state_cleanup_batch_size = 0 from environment variable AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE",
            null,
            10
        ])
    );
    let doc = bench.run(&["clean", "--dry-run", "--batch-size", "0", "-o", "json"]).success().json();
    assert_eq!(
        fields(&doc, &["batching", "batching_from", "batch_size", "batch_time_ms"]),
        json!(["one_transaction", null, 0, null])
    );
    bench.env("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE", "5");
    bench.run(&["clean", "--dry-run", "--batch-time", "50ms"]).fails(
        2,
        "--batch-time needs --batch-size auto; the batch size is 5 (from environment variable AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE)",
    );
    let doc = bench
        .run(&["clean", "--dry-run", "--batch-size", "auto", "--batch-time", "50ms", "-o", "json"])
        .success()
        .json();
    assert_eq!(
        fields(&doc, &["batching", "batching_from", "batch_size", "batch_time_ms"]),
        json!(["auto", null, null, 50])
    );
    bench
        .run(&["clean", "--dry-run", "--batch-size", "auto", "--batch-time", "0s"])
        .fails(2, "invalid --batch-time");
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

/// A sandbox is created only where `--conn` says: never at the configured database, which is
/// Airflow's own, nor at the default `~/airflow/airflow.db`.
#[test]
fn sandbox_create_needs_an_explicit_target() {
    let bench = Bench::bare();
    let run = bench.run(&["sandbox", "create"]).fails(2, "sandbox create needs --conn URL");
    run.stderr_has("from environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_CONN");
    assert!(!bench.db.exists());
    // Nothing configured: the default under ~/airflow, which exists, stays untouched too.
    std::fs::create_dir_all(bench.dir.path().join("airflow")).unwrap();
    let mut c = bench.cmd(&["sandbox", "create", "--sample-data"]);
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN").env_remove("AIRFLOW_HOME");
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("airflow/airflow.db from default"));
    assert_eq!(std::fs::read_dir(bench.dir.path().join("airflow")).unwrap().count(), 0);
    let url = bench.url();
    bench.run(&["--conn", &url, "sandbox", "create"]).success();
    assert!(bench.db.exists());
}

/// `$AIRFLOW_CONFIG` naming a file that does not exist is said. When no configuration file is
/// found and Airflow's default database (`$AIRFLOW_HOME/airflow.db`) does not exist either,
/// the configuration is what is missing: exit 3, naming the file looked for and what to give,
/// where it used to be exit 4 ("cannot open SQLite database"). A home with its database and no
/// airflow.cfg still works, as Airflow's defaults point there.
#[test]
fn a_missing_airflow_config_is_named() {
    let bench = Bench::bare();
    let missing = bench.dir.path().join("etc/airflow.cfg");
    let mut c = bench.cmd(&["list"]);
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN").env("AIRFLOW_CONFIG", &missing);
    let out = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert_eq!(
        lines[0],
        format!(
            "warning: $AIRFLOW_CONFIG names {}, which does not exist: Airflow's defaults and the environment apply",
            missing.display()
        )
    );
    assert_eq!(
        lines[1],
        format!(
            "error: no Airflow configuration: neither the configuration file {} (named by $AIRFLOW_CONFIG) nor \
             {}, the database of the default [database] sql_alchemy_conn, exists; give --config, or set \
             $AIRFLOW_HOME or $AIRFLOW_CONFIG as Airflow has them, or name the database with --conn or \
             AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
            missing.display(),
            bench.dir.path().join("airflow.db").display()
        ),
        "{stderr}"
    );
    // $AIRFLOW_HOME without airflow.cfg or airflow.db: the same, for every command that opens it.
    for args in
        [&["list"][..], &["clean", "--dry-run"], &["doctor"], &["stats"], &["get", "k", "--asset-id", "1"]]
    {
        let mut c = bench.cmd(args);
        c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN");
        let run = support::Run::from(c.output().unwrap(), args);
        let run = run.fails(3, "no Airflow configuration: neither the configuration file");
        run.stderr_has("(named by $AIRFLOW_HOME/airflow.cfg) nor ");
    }
    // Without AIRFLOW_HOME, in a home whose path is long: each said once, and the line ends
    // whole within 500 characters, the paths cut in their middle.
    let home = bench.dir.path().join("h".repeat(200)).join("x".repeat(200));
    std::fs::create_dir_all(&home).unwrap();
    let out = std::process::Command::new(support::BIN)
        .arg("list")
        .env_clear()
        .env("HOME", &home)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let line = stderr.trim_end();
    assert!(line.chars().count() <= 500, "{} characters: {line}", line.chars().count());
    assert!(
        line.ends_with("or name the database with --conn or AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"),
        "{line}"
    );
    assert!(
        line.contains("/airflow/airflow.cfg (named by $AIRFLOW_HOME/airflow.cfg, AIRFLOW_HOME unset)"),
        "{line}"
    );
    assert!(line.contains("/airflow/airflow.db, the database of the default"), "{line}");
    assert_eq!(line.matches("exist").count(), 1, "{line}");
    // ... and with its database, Airflow's default, it works.
    let with_db = Bench::new();
    let mut c = with_db.cmd(&["list", "-o", "json"]);
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN");
    let run = support::Run::from(c.output().unwrap(), &["list"]).success();
    assert_eq!(run.stdout, "[]\n", "{run:?}");
    // A URL from elsewhere names where it came from when it fails.
    let run = bench.run(&["list"]).fails(4, "cannot open SQLite database");
    run.stderr_has(
        "([database] sql_alchemy_conn from environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_CONN)",
    );
}

/// Small refusals and hints of the command line, each with a message that says what to do.
#[test]
fn small_mistakes_get_messages_that_say_what_to_do() {
    let bench = with_run(Dialect::Sqlite);
    bench.unchanged(|| {
        bench.run(&cmd(&["set", "k", "1", "--retention", "0"], &task(&[]))).fails(2, "use never")
    });
    for (args, message) in [
        (
            vec!["clean", "--batch-size", "-1"],
            "invalid value '-1' for '--batch-size <N|auto>': give a whole number of 0 or more, or auto",
        ),
        (
            vec!["clean", "--max-rows", "0"],
            "invalid value '0' for '--max-rows <N>': give a whole number of 1 or more",
        ),
        (
            vec!["list", "--limit", "ten"],
            "invalid value 'ten' for '--limit <N>': not a whole number: give 0 or more",
        ),
        (
            vec!["list", "--offset", "-3"],
            "invalid value '-3' for '--offset <N>': give a whole number of 0 or more",
        ),
        (vec!["import", "f", "--batch-size", "0"], "give a whole number of 1 or more"),
    ] {
        let run = bench.unchanged(|| bench.run(&args).fails(2, message));
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    }
    bench.run(&cmd(&["get", "k", "--map-index", "x"], &task(&[]))).fails(2, "give -1 for an unmapped task");
    // The example URL of a message shows placeholders, which no masking hides (it used to show
    // `postgresql://airflow:***@db:5432/airflow`, its own example's password masked).
    for (conn, example) in [
        (
            "not a url",
            "e.g. postgresql://<user>:<password>@<host>:5432/<database> or sqlite:////path/to/airflow.db",
        ),
        ("postgresql//db/airflow", "dialect[+driver]://[<user>[:<password>]@]<host>[:<port>]/<database>"),
        ("mysql://root@127.0.0.1:3306", "expected mysql://<user>:<password>@<host>:3306/<database>"),
    ] {
        let run = bench.run(&["list", "--conn", conn]).fails(3, example);
        assert!(!run.stderr.contains("***"), "{run:?}");
    }
    // An '@' in a password must be percent-encoded: the message says how.
    bench
        .run(&["list", "--conn", "postgresql://airflow:p@ss@db.example/airflow"])
        .fails(3, "an '@' inside the user name or password must be written %40");
}

/// A MySQL URL parameter state-store does not understand is refused (exit 3, each named, the
/// known ones listed) before any connection, as PostgreSQL's are: `read_default_file` makes
/// mysqlclient take host, user and password from a file, and ignoring it connected elsewhere.
/// The parameters Airflow's URLs commonly carry that change nothing here (`charset=utf8mb4`, …)
/// are still taken.
#[test]
fn mysql_url_parameters_it_does_not_understand_are_refused() {
    let bench = Bench::bare();
    for (query, named) in [
        ("read_default_file=/etc/airflow/my.cnf", "\"read_default_file\""),
        ("charset=utf8mb4&read_default_group=client&sslmode=require", "\"read_default_group\", \"sslmode\""),
        ("charset=latin1", "charset=latin1: state-store talks utf8mb4"),
    ] {
        let conn = format!("mysql://root:secret@127.0.0.1:1/airflow?{query}");
        let run = bench.run(&["list", "--conn", &conn]).fails(3, named);
        let listed = query.starts_with("charset=latin1")
            || run.stderr.contains("(state-store understands unix_socket, ");
        assert!(listed && !run.stderr.contains("secret"), "{}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    }
    // Known parameters reach the connection (port 1: nothing listens).
    let conn =
        "mysql+mysqldb://root@127.0.0.1:1/airflow?charset=utf8mb4&binary_prefix=true&connect_timeout=2";
    bench.run(&["list", "--conn", conn]).fails(4, "MySQL database airflow on 127.0.0.1:1");
}

/// What `get -o plain` prints for a value that is not a string is what the pages say it is:
/// JSON as Python's `json.dumps` writes it, with the pages' own example, not "compact JSON",
/// which `{"a":1,"b":[1,2]}` would be.
#[test]
fn the_pages_name_the_plain_json_text_as_it_is() {
    let bench = with_run(Dialect::Sqlite);
    bench.run(&cmd(&["set", "k", r#"{"a":1,"b":[1,2]}"#], &task(&[]))).success();
    let example = r#"{"a": 1, "b": [1, 2]}"#;
    bench.run(&cmd(&["get", "k", "-o", "plain"], &task(&[]))).success().stdout_is(&format!("{example}\n"));
    let top = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for page in ["docs/output.md", "docs/commands/get.md", "docs/commands/list.md"] {
        let text = std::fs::read_to_string(top.join(page)).unwrap();
        assert!(!text.to_lowercase().contains("compact json"), "{page} says compact JSON");
        assert!(
            text.contains(&format!(
                "as Python's `json.dumps` writes it, a blank after each `,` and `:` (`{example}`)"
            )),
            "{page}"
        );
    }
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
    assert_eq!(run.json()["batch_size"], 5);
}

/// What Airflow's MySQL schema cannot hold is refused before anything is written, and lookups
/// by such text simply find nothing.
#[cfg(feature = "mysql")]
mod mysql_limits {
    use super::{DAG, RUN, cmd, task, with_run};
    use crate::support::Dialect;

    /// A row the schema cannot hold is found before the import writes anything, even when
    /// valid rows come before it.
    #[test]
    fn import_refuses_an_unstorable_row_before_writing_any() {
        let bench = with_run(Dialect::Mysql);
        let row = |key: &str, expires: &str| {
            format!(
                "{{\"kind\": \"task\", \"dag_id\": \"{DAG}\", \"run_id\": \"{RUN}\", \"task_id\": \"load\", \"map_index\": -1, \"key\": \"{key}\", \"value\": \"1\", \"updated_at\": \"2026-11-01T00:00:00.000000Z\", \"expires_at\": \"{expires}\"}}\n"
            )
        };
        let file = bench.dir.path().join("late.jsonl");
        std::fs::write(&file, row("a", "2030-01-01T00:00:00Z") + &row("b", "2040-01-01T00:00:00Z")).unwrap();
        bench.unchanged(|| {
            bench
                .run(&["import", file.to_str().unwrap(), "--batch-size", "1"])
                .fails(2, "line 2: cannot store expires_at 2040-01-01T00:00:00.000000Z: MySQL TIMESTAMP ends")
        });
    }

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
        assert_eq!(run.json()["expires_at"], last);
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

/// A terminal that reports 0 columns (script(1) with no terminal of its own, some container and
/// CI set-ups) has no width: `list` lays its table out as off a terminal, one row a line, not
/// one character a line.
#[test]
fn list_at_a_terminal_of_no_width_is_laid_out_as_off_one() {
    let bench = with_run(Dialect::Sqlite);
    for key in ["alpha", "beta", "gamma"] {
        bench.run(&cmd(&["set", key, "\"some value\""], &task(&[]))).success();
    }
    let out = std::process::Command::new("script")
        .args(["-qec", &format!("stty cols 0 rows 0 && exec '{}' list", support::BIN), "/dev/null"])
        .env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", bench.url())
        .env("AIRFLOW_HOME", bench.dir.path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("util-linux script(1) is required by the test suite");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{screen}");
    let off = bench.run(&["list"]).success().stdout;
    assert_eq!(screen.replace("\r\n", "\n"), off, "laid out as off a terminal");
}

/// At a terminal of 50 columns (the width the terminal reports, read from its descriptor),
/// `list`'s table fits them: a long value wraps within its cell. Off a terminal the same rows
/// take one line each, as wide as their cells.
#[test]
fn list_at_a_terminal_fits_its_width() {
    let bench = with_run(Dialect::Sqlite);
    let long = format!("\"{}\"", "word ".repeat(30).trim_end());
    bench.run(&cmd(&["set", "long", &long], &task(&[]))).success();
    let out = std::process::Command::new("script")
        .args(["-qec", &format!("stty cols 50 rows 40 && exec '{}' list", support::BIN), "/dev/null"])
        .env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", bench.url())
        .env("AIRFLOW_HOME", bench.dir.path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("util-linux script(1) is required by the test suite");
    let screen = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    assert_eq!(out.status.code(), Some(0), "{screen}");
    let lines: Vec<&str> = screen.lines().filter(|l| l.contains("word") || l.contains("long")).collect();
    assert!(lines.len() > 1, "the value wraps: {screen}");
    assert!(screen.lines().all(|l| l.chars().count() <= 50), "every line within 50 columns: {screen}");
    let off = bench.run(&["list"]).success().stdout;
    assert!(off.lines().any(|l| l.chars().count() > 100), "one line a row off a terminal: {off}");
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

/// At a terminal, `list` shows a page of 100 rows unless `--limit` says otherwise, and the note
/// after it names the next `--offset`.
#[test]
fn list_shows_a_page_of_100_at_a_terminal() {
    let bench = with_run(Dialect::Sqlite);
    seed_expiring(&bench, 150, 1000);
    let (code, screen) = on_terminal(&bench, &["list", "-o", "plain"], "");
    assert_eq!(code, 0, "{screen}");
    assert_eq!(screen.lines().filter(|l| l.starts_with(DAG)).count(), 100, "{screen}");
    assert!(
        screen.contains(
            "showing 100 rows from offset 0; more follow (--offset 100 for the next page, --limit 0 for all)"
        ),
        "{screen}"
    );
    let (code, screen) = on_terminal(&bench, &["list", "--limit", "0", "-o", "plain"], "");
    assert_eq!(code, 0, "{screen}");
    assert_eq!(screen.lines().filter(|l| l.starts_with(DAG)).count(), 150, "{screen}");
    assert!(!screen.contains("more follow"), "{screen}");
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
    until_some_rows_are_gone(&bench, 20);
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
    let url = bench.url();
    bench.run(&["--conn", &url, "sandbox", "create"]).success();
    bench.add_dag_run_with(DAG, RUN, &["load"]);
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

/// A reader in a transaction at the end of a clean keeps the WAL file from being emptied: the
/// summary line and the document say how much it keeps; without the reader it is emptied and
/// nothing is said.
#[test]
fn a_wal_file_a_reader_keeps_is_named_in_the_summary() {
    let bench = with_run(Dialect::Sqlite);
    let conn = bench.sqlite();
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    seed_expiring(&bench, 2_000, 2);
    let reader = bench.sqlite();
    reader.execute_batch("BEGIN; SELECT count(*) FROM dag_run;").unwrap();
    let run = bench.run(&["clean", "--batch-size", "100", "-o", "json"]).success();
    assert!(run.stderr.contains("; the -wal file keeps "), "{}", run.stderr);
    let left = one_document(&run)["wal_bytes_left"].as_u64().unwrap();
    assert!(left > 0, "{}", run.stdout);
    reader.execute_batch("COMMIT").unwrap();
    let run = bench.run(&["clean", "--batch-size", "100", "-o", "json"]).success();
    assert!(!run.stderr.contains("-wal file"), "{}", run.stderr);
    assert!(one_document(&run).get("wal_bytes_left").is_none(), "{}", run.stdout);
}

/// A writer holding SQLite's write lock when the clean's last checkpoint runs keeps the WAL
/// file from being emptied as a reader does, and the checkpoint cannot tell the two apart: the
/// summary names both. The writer takes the lock while the run sleeps after its last batch
/// (`--max-rows` reached, `--sleep` before the stop), so the checkpoint meets it every time.
#[test]
fn a_wal_file_a_writer_keeps_is_named_in_the_summary() {
    use std::io::BufRead;
    let bench = with_run(Dialect::Sqlite);
    let conn = bench.sqlite();
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    seed_expiring(&bench, 2_000, 2);
    let args = ["clean", "-v", "--batch-size", "100", "--max-rows", "200", "--sleep", "2s", "-o", "json"];
    let mut child = bench
        .cmd(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "the run ended before its second batch: {seen}");
        seen.push_str(&line);
        if line.starts_with("clean: batch 2: ") {
            break;
        }
    }
    let writer = bench.sqlite();
    writer.execute_batch("BEGIN IMMEDIATE; UPDATE dag_run SET clear_number = clear_number + 1;").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    writer.execute_batch("COMMIT").unwrap();
    let run = support::Run {
        args: args.iter().map(ToString::to_string).collect(),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: format!("{seen}{rest}"),
    };
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "MiB, which another connection (a reader or a writer) kept from being emptied (a later checkpoint gives the space back)"
        ),
        "{}",
        run.stderr
    );
    assert!(one_document(&run)["wal_bytes_left"].as_u64().unwrap() > 0, "{}", run.stdout);
}

#[test]
fn clean_reports_progress_on_stderr() {
    let bench = with_run(Dialect::Sqlite);
    seed_expiring(&bench, 12, 1);
    let run =
        bench.run(&["clean", "--batch-size", "1", "--sleep", "50ms", "--progress-every", "100ms"]).success();
    let lines: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("clean: progress: ")).collect();
    assert!(lines.len() >= 3, "periodic progress lines off a terminal: {}", run.stderr);
    assert!(run.stderr.lines().last().unwrap().starts_with("clean: deleted 12 expired task row(s)"));
    // How far the run has walked the table, the rows that makes in all and the time left, as
    // the bar at a terminal shows them.
    assert!(
        lines.iter().all(|l| l.contains("% of the table walked") && l.contains(", ETA ")),
        "{}",
        run.stderr
    );
    assert!(lines.iter().any(|l| l.contains("% of the table walked (about ")), "{}", run.stderr);

    let bench = with_run(Dialect::Sqlite);
    seed_expiring(&bench, 12, 1);
    let (code, screen) = on_terminal(&bench, &["clean", "--batch-size", "1", "--sleep", "50ms"], "");
    assert_eq!(code, 0, "{screen}");
    assert!(screen.contains("/12 rows") && screen.contains("ETA"), "a bar at a terminal: {screen}");
}

/// `--progress-every 0` turns the periodic lines off; at a terminal, where the bar stands in
/// for them, the bar is still drawn. `--verbose` lines there clear the bar first, so that each
/// starts a line of its own.
#[test]
fn clean_progress_every_0_keeps_the_bar_at_a_terminal() {
    let bench = with_run(Dialect::Sqlite);
    seed_expiring(&bench, 12, 1);
    let args = ["clean", "--batch-size", "1", "--sleep", "50ms", "--progress-every", "0", "-v"];
    let (code, screen) = on_terminal(&bench, &args, "");
    assert_eq!(code, 0, "{screen}");
    assert!(screen.contains("/12 rows") && screen.contains("ETA"), "a bar at a terminal: {screen}");
    assert!(!screen.contains("clean: progress:"), "{screen}");
    assert_eq!(screen.matches("clean: batch ").count(), 12, "{screen}");
    for line in screen.split(['\r', '\n']) {
        assert!(
            !(line.contains("rows/s") && line.contains("clean: batch")),
            "a detail line inside the bar: {line:?}"
        );
    }
}

/// `-q`/`--quiet` turns the status lines off (the summaries of delete, clear, export, import,
/// clean and its dry run, and clean's progress lines), as cargo's, git's and pip's do; stdout is
/// the same, and warnings and errors are still printed. It is a global flag, before or after
/// the command, and cannot go with `-v`.
#[test]
fn quiet_drops_status_lines_and_keeps_warnings_errors_and_data() {
    let bench = with_run(Dialect::Sqlite);
    seed_expiring(&bench, 12, 1);
    let file = bench.dir.path().join("e.jsonl");
    let file = file.to_str().unwrap();
    // What only reads: the same stdout and exit code as without -q, and nothing on stderr.
    let quiet = |args: &[&str]| {
        let loud = bench.run(args);
        let run = bench.run(&cmd(args, &["-q"]));
        assert_eq!((run.code, &run.stdout), (loud.code, &loud.stdout), "the same data: {args:?}");
        assert!(!loud.stderr.is_empty(), "{args:?} has a status line to silence");
        assert_eq!(run.stderr, "", "{args:?}");
    };
    quiet(&["export", "--dag-id", DAG, "--task-id", "t"]);
    quiet(&["clean", "--dry-run", "-o", "plain"]);
    bench
        .run(&["export", "--file", file, "-q", "-o", "json"])
        .success()
        .stdout_is("{\"task_rows\": 12, \"asset_rows\": 0}\n")
        .stderr_is("");
    quiet(&["import", "--dry-run", file, "-o", "json"]);
    // What writes: its data alone.
    let set = cmd(&["set", "k", "1"], &task(&[]));
    bench.run(&set).success();
    bench
        .run(&cmd(&["delete", "k", "-q", "-o", "plain"], &task(&[])))
        .success()
        .stdout_is("1\n")
        .stderr_is("");
    bench
        .run(&cmd(&["delete", "k", "-q", "-o", "plain"], &task(&[])))
        .success()
        .stdout_is("0\n")
        .stderr_is("");
    bench.run(&set).success();
    bench
        .run(&cmd(&["clear", "--yes", "-q", "-o", "plain"], &task(&[])))
        .success()
        .stdout_is("1\n")
        .stderr_is("");
    let run = bench.run(&[
        "--quiet",
        "clean",
        "--batch-size",
        "1",
        "--sleep",
        "30ms",
        "--progress-every",
        "10ms",
        "-o",
        "json",
    ]);
    let run = run.success();
    assert_eq!(
        (run.json()["task_rows_deleted"].as_u64(), run.stderr.as_str()),
        (Some(12), ""),
        "no progress, no summary"
    );
    let run = bench.run(&["-q", "import", file, "-o", "plain"]).success();
    assert_eq!((run.stdout.as_str(), run.stderr.as_str()), ("12\n", ""));
    // At a terminal, no bar either: the restored rows are all expired again.
    let (code, screen) = on_terminal(&bench, &["clean", "-q", "--batch-size", "1", "--sleep", "50ms"], "");
    assert_eq!((code, screen.trim()), (0, ""), "{screen}");
    assert_eq!(bench.scalar("SELECT COUNT(*) FROM task_state_store"), "0");

    // Warnings and errors stay.
    let past = cmd(&["set", "old", "1", "--expires-at", "2020-01-01T00:00:00Z", "-q"], &task(&[]));
    bench.run(&past).success().stderr_has("warning: ");
    bench.run(&cmd(&["get", "nosuch", "-q"], &task(&[]))).fails(1, "not found");
    std::fs::write(bench.dir.path().join("cut.jsonl"), "{\"kind\": \"task\"").unwrap();
    let cut = bench.dir.path().join("cut.jsonl");
    let run = bench.run(&["import", "-q", "--skip-damaged", cut.to_str().unwrap()]).code(11);
    assert!(run.stderr.contains("damaged, skipped") && run.stderr.contains("error: "), "{run:?}");
    assert!(!run.stderr.contains("import: restored"), "{run:?}");
    bench.run(&["list", "-q", "-v"]).fails(2, "cannot be used with");
}

/// A clean of a SQLite database leaves nothing beside it, however it ends: its lock file
/// exists only while it runs. A file a killed run left is no lock: the next run takes it over
/// and removes it.
#[test]
fn sqlite_clean_leaves_nothing_beside_the_database() {
    let bench = with_run(Dialect::Sqlite);
    let lock = bench.dir.path().join("airflow.db.state-store-clean.lock");
    let before = dir_entries(&bench);
    assert_eq!(before, ["airflow.db"]);
    let background = |bench: &Bench| {
        bench.exec("DELETE FROM task_state_store");
        seed_expiring(bench, 20, 1);
        let child = bench
            .cmd(&["clean", "--batch-size", "1", "--sleep", "200ms"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        until_some_rows_are_gone(bench, 20);
        child
    };

    seed_expiring(&bench, 10, 1);
    bench.run(&["clean", "--dry-run"]).success();
    bench.run(&["clean"]).success();
    assert_eq!(dir_entries(&bench), before, "after a clean");

    let first = background(&bench);
    assert!(lock.exists(), "the lock file exists while a clean runs");
    bench.run(&["clean"]).fails(7, "another state-store clean is running");
    sigterm(&first);
    assert_eq!(first.wait_with_output().unwrap().status.code(), Some(143));
    assert_eq!(dir_entries(&bench), before, "after a clean refused, and one stopped by SIGTERM");

    let holder = bench.hold("UPDATE task_state_store SET value = '2'");
    bench.run(&["clean", "--lock-timeout", "200ms"]).code(4);
    drop(holder);
    assert_eq!(dir_entries(&bench), before, "after a failed clean");

    let mut killed = background(&bench);
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &killed.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(killed.wait().unwrap().code(), None);
    assert!(lock.exists(), "a killed clean leaves its lock file");
    bench.run(&["clean"]).success().stderr_has("clean: deleted");
    assert_eq!(remaining_keys(&bench), Vec::<String>::new());
    assert_eq!(dir_entries(&bench), before, "the next clean removed it");
}

/// A signal that ends a `clean -o json` at once still leaves its one document: before the
/// run starts (here while `_cmd` runs), the error alone; a second signal during a batch, the
/// summary of the batches committed so far, and the error.
#[test]
fn clean_json_document_when_a_signal_ends_the_run_at_once() {
    use std::io::BufRead;
    let bench = with_run(Dialect::Sqlite);
    seed_expiring(&bench, 10, 1);
    let mut c = bench.cmd(&["clean", "-o", "json"]);
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
        .env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD", format!("sh -c 'sleep 2; echo {}'", bench.url()));
    let child = c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    // Once its `_cmd` runs, its signal handling is in place.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::process::Command::new("pgrep")
        .args(["-P", &child.id().to_string()])
        .output()
        .unwrap()
        .status
        .success()
    {
        assert!(std::time::Instant::now() < deadline, "the _cmd never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    sigterm(&child);
    let run = finished(child, &["clean", "-o", "json"]).code(143);
    let mut v = one_document(&run);
    assert!(v.as_object_mut().unwrap().remove("started_at").is_some(), "{v}");
    assert_eq!(v, json!({"error": {"message": "stopped by SIGTERM", "exit_code": 143}}));
    assert_eq!(remaining_keys(&bench).len(), 10);

    let holder = bench.hold("UPDATE task_state_store SET value = '2'");
    let args = ["clean", "-v", "--batch-size", "1", "--lock-timeout", "30s", "-o", "json"];
    let mut child = bench
        .cmd(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The first line of `-v` comes once the run has begun: a first signal only stops it
    // between batches, and the first batch waits for the write lock the holder keeps.
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("clean lock"), "{line}");
    // Give the run time to reach its first batch, which then waits behind the holder (a
    // signal before that would stop it between batches, with no batch begun).
    std::thread::sleep(std::time::Duration::from_millis(1000));
    sigterm(&child);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "a first signal waits for the batch");
    sigterm(&child);
    let run = finished(child, &args).code(143);
    drop(holder);
    assert_eq!(
        fields(&one_document(&run), &["task_rows_deleted", "interrupted", "stopped_by", "error"]),
        json!([0, true, "SIGTERM", {"message": "stopped at once by a second signal (SIGTERM); the batch in progress, if any, is rolled back", "exit_code": 143}])
    );
    assert_eq!(remaining_keys(&bench).len(), 10, "the batch was rolled back");
    bench.run(&["clean"]).success();
    assert_eq!(dir_entries(&bench), ["airflow.db"]);
}

// ---------------------------------------------------------------- servers that say no

/// Every failure to reach or use a server is one line, exit 4 (or 5 for missing tables), and
/// never shows the password, whichever way it failed.
fn server_problems(d: Dialect) {
    let bench = Bench::on(d);
    // The password S3cr3t:p@ss/w%rd, percent-encoded as a URL carries it.
    let encoded = "S3cr3t%3Ap%40ss%2Fw%25rd";
    let no_leak = |run: &support::Run| {
        for text in [&run.stdout, &run.stderr] {
            assert!(!text.contains("S3cr3t") && !text.contains("p@ss") && !text.contains("p%40ss"), "{text}");
        }
    };
    let user = format!("state_store_pw_{}", std::process::id());
    let host = if d == Dialect::Mysql { "@'%'" } else { "" };
    let create = match d {
        Dialect::Postgres => format!("CREATE ROLE {user} LOGIN PASSWORD 'right'"),
        _ => format!("CREATE USER '{user}'{host} IDENTIFIED BY 'right'"),
    };
    bench.admin_sql(&create);
    let cases = [
        // nothing listens on port 1
        (
            Bench::server_url(d, &format!("u:{encoded}"), "x")
                .replace(":5432/", ":1/")
                .replace(":3306/", ":1/"),
            4,
        ),
        // an unknown database
        (
            Bench::server_url(
                d,
                &format!("{}:{encoded}", if d == Dialect::Postgres { "postgres" } else { "root" }),
                "no_such_db_at_all",
            ),
            4,
        ),
    ];
    for (url, code) in cases {
        let started = std::time::Instant::now();
        let run = bench.run(&["list", "--conn", &url]).code(code);
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert!(started.elapsed() < std::time::Duration::from_secs(15));
        no_leak(&run);
    }
    // A wrong password (PostgreSQL here trusts local connections, so only MySQL can refuse).
    if d == Dialect::Mysql {
        let run = bench
            .run(&["list", "--conn", &Bench::server_url(d, &format!("{user}:{encoded}"), "mysql")])
            .fails(4, "denied");
        no_leak(&run);
    }
    // A reachable database without Airflow's tables.
    let empty = format!("state_store_empty_{}", std::process::id());
    bench.admin_sql(&format!("DROP DATABASE IF EXISTS {empty}"));
    bench.admin_sql(&format!("CREATE DATABASE {empty}"));
    let run = bench
        .run(&["list", "--conn", &Bench::server_url(d, &Bench::admin_auth(d), &empty)])
        .fails(5, "task_state_store");
    no_leak(&run);
    bench.admin_sql(&format!("DROP DATABASE {empty}"));
    let drop = match d {
        Dialect::Postgres => format!("DROP ROLE {user}"),
        _ => format!("DROP USER '{user}'{host}"),
    };
    bench.admin_sql(&drop);
}

/// `?user=` (and `?password=`) in the URL's query, which SQLAlchemy hands to the driver over
/// the URL's own user, as Airflow's drivers take them.
fn user_from_the_query(d: Dialect) {
    let bench = with_run(d);
    bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
    let admin = Bench::admin_auth(d);
    let (user, password) = admin.split_once(':').unwrap_or((admin.as_str(), ""));
    let url = bench.url();
    let base = url.replacen(&format!("{admin}@"), "nobody@", 1);
    let mut query = format!("?user={user}");
    if !password.is_empty() {
        query.push_str(&format!("&password={password}"));
    }
    bench
        .run(&cmd(&["get", "k", "-o", "plain", "--conn", &format!("{base}{query}")], &task(&[])))
        .success()
        .stdout_is("1\n");
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_user_from_the_query() {
    user_from_the_query(Dialect::Postgres);
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_user_from_the_query() {
    user_from_the_query(Dialect::Mysql);
}

/// The clean lock of PostgreSQL counts only sessions of roles that may delete from
/// `task_state_store`: a role that may only connect holds the old key and keys of the clean's
/// class, and the clean runs all the same; a session of a role that may delete, holding a key
/// of the class, holds it off (exit 7), and the message names that role and its pid.
#[cfg(feature = "postgres")]
#[test]
fn postgres_only_a_role_that_may_delete_holds_off_a_clean() {
    let bench = with_run(Dialect::Postgres);
    let role = format!("state_store_lock_{}", std::process::id());
    bench.admin_sql(&format!("DROP ROLE IF EXISTS {role}"));
    bench.admin_sql(&format!("CREATE ROLE {role} LOGIN"));
    let class = "hashtext('state-store clean ' || current_schema())";
    let stranger = bench.hold_as(
        &role,
        Some(bench.database()),
        &format!(
            "SELECT pg_advisory_lock({class}); \
             SELECT count(pg_advisory_lock({class}, k)) FROM generate_series(-50, 50) k"
        ),
    );
    seed_expiring(&bench, 6, 2);
    let run = bench.run(&["clean"]);
    assert_eq!(run.code, 0, "a role that may only connect held off the clean: {}", run.stderr);
    assert_eq!(remaining_keys(&bench).len(), 3);
    drop(stranger);

    bench.exec("DELETE FROM task_state_store");
    seed_expiring(&bench, 6, 2);
    let admin = Bench::admin_auth(Dialect::Postgres);
    let admin = admin.split(':').next().unwrap();
    let holder =
        bench.hold_as(admin, Some(bench.database()), &format!("SELECT pg_advisory_lock({class}, 7)"));
    let pid =
        bench.scalar("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = 7 AND objsubid = 2");
    let run = bench.run(&["clean"]).fails(7, "another state-store clean is running");
    assert!(run.stderr.contains(&format!("role {admin}, pid {pid}")), "{}", run.stderr);
    assert_eq!(remaining_keys(&bench).len(), 6, "a clean held off deletes nothing");
    drop(holder);
    bench.run(&["clean"]).success();
    bench.admin_sql(&format!("DROP ROLE {role}"));
}

/// The clean lock of MySQL and MariaDB cannot be named by an account with no privilege on
/// `task_state_store`: one with `USAGE` only holds the lock name every earlier version took,
/// and the clean runs all the same. A clean of an account that may delete holds off the next
/// one (exit 7), whose message names the holder's connection and its user.
#[cfg(feature = "mysql")]
#[test]
fn mysql_only_an_account_with_privileges_on_the_table_holds_off_a_clean() {
    let bench = with_run(Dialect::Mysql);
    let user = format!("state_store_lock_{}", std::process::id());
    bench.admin_sql(&format!("DROP USER IF EXISTS '{user}'@'%'"));
    bench.admin_sql(&format!("CREATE USER '{user}'@'%'"));
    let db = bench.database().to_string();
    let stranger = bench.hold_as(
        &user,
        None,
        &format!(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{db}'; \
             SELECT GET_LOCK('state-store clean {db}', 0)"
        ),
    );
    seed_expiring(&bench, 6, 2);
    let run = bench.run(&["clean"]);
    assert_eq!(run.code, 0, "an account with USAGE only held off the clean: {}", run.stderr);
    assert_eq!(remaining_keys(&bench).len(), 3);
    drop(stranger);
    bench.admin_sql(&format!("DROP USER '{user}'@'%'"));

    // The name is the same on every run of the database (its table's creation time is
    // stable), so a running clean holds off the next one.
    bench.exec("DELETE FROM task_state_store");
    seed_expiring(&bench, 20, 1);
    let mut first = bench
        .cmd(&["clean", "--batch-size", "1", "--sleep", "1s"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    until_some_rows_are_gone(&bench, 20);
    let run = bench.run(&["clean"]).fails(7, "another state-store clean is running");
    let admin = Bench::admin_auth(Dialect::Mysql);
    let admin = admin.split(':').next().unwrap();
    assert!(run.stderr.contains("held by connection "), "{}", run.stderr);
    assert!(run.stderr.contains(&format!("of user {admin}@")), "{}", run.stderr);
    sigterm(&first);
    assert_eq!(first.wait().unwrap().code(), Some(143));
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_server_problems() {
    server_problems(Dialect::Postgres);
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_server_problems() {
    server_problems(Dialect::Mysql);
}

/// The local server has TLS on (Debian's default, with its snakeoil certificate): `require`
/// encrypts without checking, `verify-full` checks the certificate against the host name.
#[cfg(feature = "postgres")]
#[test]
fn postgres_tls_modes() {
    let bench = with_run(Dialect::Postgres);
    bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
    let url = bench.url();
    let get = |query: &str| {
        bench.run(&cmd(&["get", "k", "-o", "plain", "--conn", &format!("{url}?{query}")], &task(&[])))
    };
    get("sslmode=require").success().stdout_is("1\n");
    get("sslmode=disable").success().stdout_is("1\n");
    get("sslmode=verify-full&sslrootcert=/etc/ssl/certs/ssl-cert-snakeoil.pem").fails(4, "");
    get("sslmode=verify-full&sslrootcert=/nonexistent/root.crt").fails(3, "/nonexistent/root.crt");
    get("sslmode=sometimes").fails(3, "sslmode");
}

#[test]
fn config_show_and_get_name_every_source_and_mask_the_password() {
    let mut bench = Bench::bare();
    bench.write_config("airflow.cfg", "[state_store]\n# retention\ndefault_retention_days = 7\n");
    bench.env("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE", "500");
    bench.env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://airflow:Pa55%40word@db:5432/airflow");
    let run = bench.run(&["config", "show", "-o", "json"]).success();
    let v = run.json();
    let options = v.as_array().unwrap();
    let option = |key: &str| -> Vec<&Value> { options.iter().filter(|o| o["key"] == key).collect() };
    let retention =
        options.iter().find(|o| o["section"] == "state_store" && o["key"] == "default_retention_days");
    assert_eq!(
        fields(retention.unwrap(), &["value", "source"]),
        json!(["7", format!("{}/airflow.cfg line 3", bench.dir.path().display())])
    );
    assert_eq!(
        option("state_cleanup_batch_size").iter().map(|o| &o["source"]).collect::<Vec<_>>(),
        [&json!("environment variable AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE")]
    );
    assert_eq!(
        option("sql_alchemy_conn").iter().map(|o| &o["value"]).collect::<Vec<_>>(),
        [&json!("postgresql://airflow:***@db:5432/airflow")]
    );
    assert_eq!(option("backend").iter().map(|o| &o["source"]).collect::<Vec<_>>(), [&json!("default")]);
    let table = bench.run(&["config", "show"]).success();
    assert!(!table.stdout.contains("Pa55") && !table.stderr.contains("Pa55"), "{}", table.stdout);

    bench.run(&["config", "get", "state_store", "default_retention_days"]).success().stdout_is("7\n");
    bench
        .run(&["config", "get", "state_store", "state_cleanup_batch_size", "--batch-size", "9"])
        .fails(2, "--batch-size");
    bench.run(&["config", "get", "database", "sql_alchemy_schema"]).fails(1, "not set");
    bench.run(&["config", "get", "core", "dags_folder"]).fails(1, "not an option");

    let mut c = bench.cmd(&["config", "get", "database", "sql_alchemy_conn"]);
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
        .env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD", "echo mysql://root:fromcmd@127.0.0.1/airflow");
    let out = c.output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "mysql://root:***@127.0.0.1/airflow\n");
}

#[test]
fn completions_and_man_page_come_from_the_cli_definition() {
    let bench = Bench::bare();
    for (shell, marker) in [
        ("bash", "complete -F _state__store"),
        ("zsh", "#compdef state-store"),
        ("fish", "complete -c state-store"),
    ] {
        let run = bench.run(&["completions", shell]).success();
        assert!(run.stdout.contains(marker), "{shell}: {}", &run.stdout[..200.min(run.stdout.len())]);
        assert!(run.stdout.contains("max-duration"), "{shell} completes clean's flags");
    }
    let man = bench.run(&["man"]).success();
    assert!(
        man.stdout.starts_with(".ie") && man.stdout.contains(".TH state-store 1"),
        "{}",
        &man.stdout[..100]
    );
    bench.run(&["completions", "powershell"]).fails(2, "powershell");
    let out = std::process::Command::new("bash")
        .args(["-c", &format!("set -o pipefail; '{}' completions zsh | head -c 10 >/dev/null", support::BIN)])
        .output()
        .unwrap();
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stderr).as_ref()), (Some(0), ""));
}

/// What a TAB completes in every shell: a command's own flags (also under a nested command with
/// a hyphen in its name), commands, and the values of flags that clap knows (formats, --by).
fn completes_as_help_says(shell: &str, complete: fn(&str) -> Vec<String>) {
    let sorted = |line: &str| {
        let mut words = complete(line);
        words.sort();
        words
    };
    let clean = complete("state-store clean --b");
    for flag in ["--batch-size", "--before"] {
        assert!(clean.iter().any(|w| w == flag), "{shell}: clean --b<TAB> lacks {flag}: {clean:?}");
    }
    assert_eq!(sorted("state-store clean --max-r"), ["--max-rows"], "{shell}");
    assert_eq!(sorted("state-store l"), ["list"], "{shell}");
    assert_eq!(sorted("state-store config s"), ["show"], "{shell}");
    let add = complete("state-store sandbox add-dag-run --");
    assert!(add.iter().any(|w| w == "--run-id"), "{shell}: sandbox add-dag-run --<TAB>: {add:?}");
    assert_eq!(sorted("state-store clean -o "), ["json", "plain", "table", "yaml"], "{shell}");
    assert_eq!(sorted("state-store -o j"), ["json"], "{shell}");
    assert_eq!(sorted("state-store stats --by "), ["dag", "task"], "{shell}");
    // The REST transport's flags where they apply only.
    assert_eq!(sorted("state-store get --api-u"), ["--api-url", "--api-username"], "{shell}");
    assert_eq!(sorted("state-store clean --api-u"), Vec::<String>::new(), "{shell}");
}

/// The values of an argument (not a flag) that clap knows: bash and zsh complete them; fish's
/// script from clap_complete has no line for them (docs/commands/completions.md says so).
fn completes_argument_values(shell: &str, complete: fn(&str) -> Vec<String>) {
    let shells = complete("state-store completions ");
    for name in ["bash", "zsh", "fish"] {
        assert!(shells.iter().any(|w| w == name), "{shell}: completions <TAB> lacks {name}: {shells:?}");
    }
}

#[test]
fn bash_completes_commands_flags_and_values() {
    let registered = support::shells::bash_registration();
    assert!(
        registered.starts_with("complete ") && registered.ends_with(" state-store"),
        "complete -p state-store: {registered}"
    );
    completes_as_help_says("bash", support::shells::bash_completes);
    completes_argument_values("bash", support::shells::bash_completes);
}

#[test]
fn zsh_completes_commands_flags_and_values() {
    if support::shells::installed("zsh", "zsh") {
        completes_as_help_says("zsh", support::shells::zsh_completes);
        completes_argument_values("zsh", support::shells::zsh_completes);
    }
}

#[test]
fn fish_completes_commands_flags_and_values() {
    if support::shells::installed("fish", "fish") {
        completes_as_help_says("fish", support::shells::fish_completes);
    }
}

/// The pages `man --out-dir` writes, by name (`state-store-clean`), as roff.
fn man_pages(bench: &Bench) -> std::collections::BTreeMap<String, String> {
    let dir = bench.dir.path().join("man/man1");
    let dir_arg = dir.display().to_string();
    let run = bench.run(&["man", "--out-dir", &dir_arg]).success().stdout_is("");
    let mut pages = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let name = name.strip_suffix(".1").unwrap_or_else(|| panic!("{name} is not a section 1 page"));
        pages.insert(name.to_string(), std::fs::read_to_string(&path).unwrap());
    }
    assert!(run.stderr.contains(&format!("wrote {} manual pages", pages.len())), "{}", run.stderr);
    pages
}

/// Roff as a reader sees it, near enough to search: no font changes, `\-` as `-`, one space
/// between words.
fn roff_text(roff: &str) -> String {
    let text = roff.replace("\\-", "-").replace("\\fB", "").replace("\\fR", "").replace("\\fI", "");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A flag's help text as `COMMAND --help` prints it, unwrapped.
fn flag_help(bench: &Bench, command: &str, flag: &str) -> String {
    let help = bench.run(&[command, "--help"]).success().stdout;
    let mut lines = help.lines().skip_while(|l| !l.trim_start().starts_with(flag));
    let first = lines.next().unwrap_or_else(|| panic!("{command} --help lacks {flag}"));
    let indent = first.find(|c: char| c != ' ').unwrap_or(0);
    let mut text = vec![first.trim_start().split_once("  ").map_or("", |(_, rest)| rest).to_string()];
    text.extend(
        lines
            .take_while(|l| l.find(|c: char| c != ' ').is_some_and(|i| i > indent))
            .map(|l| l.trim().to_string()),
    );
    text.join(" ").split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn man_pages_exist_for_every_command_they_name() {
    let bench = Bench::bare();
    let pages = man_pages(&bench);
    for name in
        ["state-store", "state-store-clean", "state-store-config-show", "state-store-sandbox-add-dag-run"]
    {
        assert!(pages.contains_key(name), "no {name}.1 among {:?}", pages.keys());
    }
    let mut named = 0;
    for (page, roff) in &pages {
        let text = roff_text(roff);
        for (at, _) in text.match_indices("(1)") {
            let start =
                text[..at].rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).map_or(0, |i| i + 1);
            let reference = &text[start..at];
            if reference.starts_with("state-store") {
                named += 1;
                assert!(
                    pages.contains_key(reference),
                    "{page}.1 names {reference}(1), which is not generated"
                );
            }
        }
    }
    assert!(named >= pages.len(), "the pages name each other: {named} references");
    let top = roff_text(&pages["state-store"]);
    assert!(top.contains("state-store-clean(1)") && !top.contains("state-store-help(1)"), "{top}");

    let clean = roff_text(&pages["state-store-clean"]);
    let help = flag_help(&bench, "clean", "--max-rows");
    assert!(help.len() > 20, "--max-rows help: {help:?}");
    assert!(
        clean.contains(&format!("--max-rows <N> {help}")),
        "the clean page lacks --max-rows {help:?}: {clean}"
    );

    bench.run(&["man"]).success().stdout_is(&pages["state-store"]);
    bench.run(&["man", "clean"]).success().stdout_is(&pages["state-store-clean"]);
    bench.run(&["man", "config", "show"]).success().stdout_is(&pages["state-store-config-show"]);
    bench
        .run(&["man", "sandbox", "add-dag-run"])
        .success()
        .stdout_is(&pages["state-store-sandbox-add-dag-run"]);
    bench.run(&["man", "frobnicate"]).fails(2, "no manual page for 'frobnicate'");
    bench.run(&["man", "config", "frobnicate"]).fails(2, "'config frobnicate'");
    bench.run(&["man", "clean", "--out-dir", "x"]).fails(2, "--out-dir");
    let file = bench.write_config("not-a-directory", "");
    let below_file = file.join("man1").display().to_string();
    bench.run(&["man", "--out-dir", &below_file]).fails(6, "not-a-directory");
}

/// The REST transport's flags are shown where they apply, on get, set, delete, clear and list
/// (and on the top page, whose flags every command takes), in `--help`, the manual pages and
/// the completions; not on the commands that refuse or ignore them. They are still accepted
/// there, before or after the command, and refused with the reason.
#[test]
fn rest_flags_are_shown_where_they_apply() {
    let bench = Bench::bare();
    let pages = man_pages(&bench);
    let rest = [
        "--api-url",
        "--api-token-cmd",
        "--api-username",
        "--api-ca-file",
        "--api-connect-timeout",
        "--api-timeout",
    ];
    let applies = ["get", "set", "delete", "clear", "list"];
    for (command, page) in [
        (vec!["get"], "state-store-get"),
        (vec!["set"], "state-store-set"),
        (vec!["delete"], "state-store-delete"),
        (vec!["clear"], "state-store-clear"),
        (vec!["list"], "state-store-list"),
        (vec!["clean"], "state-store-clean"),
        (vec!["stats"], "state-store-stats"),
        (vec!["doctor"], "state-store-doctor"),
        (vec!["export"], "state-store-export"),
        (vec!["import"], "state-store-import"),
        (vec!["config", "show"], "state-store-config-show"),
        (vec!["sandbox", "create"], "state-store-sandbox-create"),
        (vec!["man"], "state-store-man"),
    ] {
        let shown = applies.contains(&command[0]);
        let help = bench.run(&cmd(&command, &["--help"])).success().stdout;
        let man = roff_text(&pages[page]);
        for flag in rest {
            // Listed as a flag, with its value; `-v`'s help names --api-url everywhere.
            let listed = help.lines().any(|line| line.trim_start().starts_with(&format!("{flag} <")));
            assert_eq!(listed, shown, "{command:?} --help and {flag}: {help}");
            assert_eq!(man.contains(&format!("{flag} <")), shown, "{page}.1 and {flag}: {man}");
        }
        for global in ["--config", "--conn", "--output", "--verbose", "--quiet"] {
            assert!(help.contains(global) && man.contains(global), "{command:?} lacks {global}");
        }
    }
    let top = bench.run(&["--help"]).success().stdout;
    assert!(rest.iter().all(|flag| top.contains(flag)), "{top}");
    assert!(roff_text(&pages["state-store"]).contains("--api-url"));
    let clean = bench.run(&["clean", "--help"]).success().stdout;
    assert!(clean.lines().count() < 60, "{} lines: {clean}", clean.lines().count());
    // Still parsed, and refused with the reason, wherever it is given.
    for args in
        [&["clean", "--api-url", "http://127.0.0.1:9"][..], &["--api-url", "http://127.0.0.1:9", "stats"]]
    {
        bench.run(args).fails(2, "works on the metastore database only");
    }
}

/// A manual page's synopsis shows the command's own flags first, each with its value's name as
/// in `--help` (`[--before TIMESTAMP]`), then the global ones; the clean page, which the
/// systemd unit's `Documentation=` names, has an EXIT STATUS section with clean's codes.
#[test]
fn man_page_synopses_name_values_and_clean_has_an_exit_status() {
    let bench = Bench::bare();
    let pages = man_pages(&bench);
    let synopsis = |page: &str| {
        let roff = &pages[page];
        let at = roff.find(".SH SYNOPSIS\n").unwrap_or_else(|| panic!("{page}: no synopsis"));
        roff_text(roff[at..].lines().nth(1).unwrap())
    };
    let clean = synopsis("state-store-clean");
    for part in [
        "state-store clean [--dry-run] [--before TIMESTAMP] [--batch-size N|auto]",
        "[--max-rows N]",
        "[--archive FILE]",
        "[-o|--output FORMAT]",
        "[--config PATH]",
        "[-q|--quiet]",
    ] {
        assert!(clean.contains(part), "the clean synopsis lacks {part}: {clean}");
    }
    assert!(
        clean.find("--metrics-file").unwrap() < clean.find("--config").unwrap(),
        "own flags first: {clean}"
    );
    assert!(!clean.contains("--api-url"), "{clean}");
    assert!(synopsis("state-store-get").contains("[--dag-id DAG_ID]"), "{}", synopsis("state-store-get"));
    assert!(synopsis("state-store-get").contains("KEY"), "{}", synopsis("state-store-get"));
    assert!(synopsis("state-store-get").contains("[--api-url URL]"), "{}", synopsis("state-store-get"));
    assert!(synopsis("state-store-config").contains("COMMAND"), "{}", synopsis("state-store-config"));

    let page = &pages["state-store-clean"];
    let exit_status = page.split(".SH \"EXIT STATUS\"\n").nth(1).expect("clean has an EXIT STATUS section");
    let exit_status = roff_text(exit_status.split("\n.SH ").next().unwrap());
    for code in ["0 ", "2 ", "3 ", "4 ", "5 ", "6 ", "7 another clean", "130", "143"] {
        assert!(exit_status.contains(code), "EXIT STATUS lacks {code}: {exit_status}");
    }
    assert!(page.find("EXIT STATUS").unwrap() < page.find("SEE ALSO").unwrap());
}

/// The codes of a manual page's EXIT STATUS section (`.TP` then the codes, in bold).
fn exit_status_codes(page: &str) -> std::collections::BTreeSet<i32> {
    let section = page.split(".SH \"EXIT STATUS\"\n").nth(1).unwrap_or_default();
    let section = section.split("\n.SH ").next().unwrap_or_default();
    section
        .split(".TP\n")
        .skip(1)
        .flat_map(|item| {
            roff_text(item.lines().next().unwrap_or_default())
                .split(", ")
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .map(|code| code.parse().unwrap_or_else(|_| panic!("not a code: {code:?} in {section}")))
        .collect()
}

/// The codes of the first table of a markdown page's section (`## Exit codes`): `| 3, 4, 5 |`.
fn documented_codes(markdown: &str, heading: &str) -> std::collections::BTreeSet<i32> {
    let section = markdown.split(heading).nth(1).unwrap_or_else(|| panic!("no {heading}"));
    section
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .filter_map(|line| line.split('|').nth(1))
        .flat_map(|cell| cell.split(',').map(|code| code.trim().parse::<i32>()).collect::<Vec<_>>())
        .filter_map(Result::ok)
        .collect()
}

/// Every manual page has an EXIT STATUS section: the codes its command can end with, each a
/// code of docs/exit-codes.md, and at least those its page in docs/commands/ gives. The
/// after-help is under headings a manual page has (NOTES, EXAMPLES, …), never clap_mangen's
/// EXTRA, and the REST transport's flags under `REST TRANSPORT`.
#[test]
fn every_man_page_has_its_exit_status_and_headings_of_a_man_page() {
    let bench = Bench::bare();
    let pages = man_pages(&bench);
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let read = |name: &str| std::fs::read_to_string(docs.join(name)).unwrap();
    let all = documented_codes(&read("exit-codes.md"), "# Exit codes");
    assert!(all.contains(&0) && all.contains(&143), "{all:?}");
    for (name, page) in &pages {
        let codes = exit_status_codes(page);
        assert!(codes.contains(&0) && codes.contains(&70), "{name}.1's EXIT STATUS: {codes:?}");
        assert!(codes.is_subset(&all), "{name}.1 lists codes docs/exit-codes.md does not: {codes:?}");
        assert_eq!(page.lines().filter(|line| line.starts_with(".ie ")).count(), 1, "{name}.1: one preamble");
        let headings: Vec<&str> = page.lines().filter_map(|line| line.strip_prefix(".SH ")).collect();
        for heading in &headings {
            assert!(*heading != "EXTRA" && !heading.contains("DOCS/REST.MD"), "{name}.1: .SH {heading}");
        }
        let rest = roff_text(page).contains("--api-url <URL>");
        assert_eq!(headings.contains(&"\"REST TRANSPORT\""), rest, "{name}.1: {headings:?}");
    }
    assert_eq!(exit_status_codes(&pages["state-store"]), all, "the top page lists every code");
    let get = exit_status_codes(&pages["state-store-get"]);
    assert!([1, 10].iter().all(|code| get.contains(code)), "get: {get:?}");
    for (doc, page) in [
        ("get", "state-store-get"),
        ("set", "state-store-set"),
        ("delete", "state-store-delete"),
        ("clear", "state-store-clear"),
        ("list", "state-store-list"),
        ("clean", "state-store-clean"),
        ("stats", "state-store-stats"),
        ("doctor", "state-store-doctor"),
        ("export", "state-store-export"),
        ("import", "state-store-import"),
        ("config", "state-store-config"),
        ("sandbox", "state-store-sandbox"),
        ("completions", "state-store-completions"),
        ("completions", "state-store-man"),
    ] {
        let documented = documented_codes(&read(&format!("commands/{doc}.md")), "## Exit codes");
        let listed = exit_status_codes(&pages[page]);
        assert!(
            documented.is_subset(&listed),
            "{page}.1 lists {listed:?}, docs/commands/{doc}.md {documented:?}"
        );
    }
    for (page, heading) in [
        ("state-store", "CONFIGURATION"),
        ("state-store-list", "NOTES"),
        ("state-store-export", "NOTES"),
        ("state-store-completions", "EXAMPLES"),
        ("state-store-man", "EXAMPLES"),
    ] {
        assert!(pages[page].contains(&format!("\n.SH {heading}\n")), "{page}.1 lacks {heading}");
    }
    let doctor = roff_text(&pages["state-store-doctor"]);
    let description = &doctor[doctor.find("DESCRIPTION").unwrap()..doctor.find("OPTIONS").unwrap()];
    assert!(description.contains("Checks, read-only") && description.contains("missing_task_instance"));
}

/// The operations guide's table of what each exit code asks of a scheduler has every code
/// `clean` can end with, as its manual page's EXIT STATUS lists them (129, 131 and 70 too).
#[test]
fn the_operations_guides_exit_codes_are_those_clean_can_end_with() {
    let bench = Bench::bare();
    let pages = man_pages(&bench);
    let guide =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"))
            .unwrap();
    let table = documented_codes(&guide, "### What each exit code asks of a scheduler");
    assert_eq!(table, exit_status_codes(&pages["state-store-clean"]), "docs/operations.md's table");
}

#[test]
fn man_pages_render_without_warnings_and_install_where_man_finds_them() {
    if !support::shells::installed("man", "man-db groff-base") {
        return;
    }
    let bench = Bench::bare();
    let pages = man_pages(&bench);
    let man = |args: &[&str]| {
        let mut cmd = std::process::Command::new("man");
        cmd.args(args)
            .env("LC_ALL", "C.UTF-8")
            .env("MANWIDTH", "80")
            .env_remove("MANPAGER")
            .env_remove("PAGER");
        support::shells::output_within(&mut cmd, "man")
    };
    for name in pages.keys() {
        let path = bench.dir.path().join(format!("man/man1/{name}.1"));
        let path = path.to_str().unwrap();
        // -Z stops at troff's output, --warnings=w turns every troff warning on.
        let out = man(&["--warnings=w", "-E", "UTF-8", "-Tutf8", "-Z", "-l", path]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && stderr.is_empty(), "man -l {name}.1 warns: {stderr}");
    }
    // Installed as docs/commands/completions.md says: `man` finds a page in DIR/man1 by name.
    let out = man(&["-M", bench.dir.path().join("man").to_str().unwrap(), "state-store-clean"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "man state-store-clean: {}", String::from_utf8_lossy(&out.stderr));
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let help = flag_help(&bench, "clean", "--max-rows");
    let opening: Vec<&str> = help.split(' ').take(3).collect();
    assert!(words.contains(&format!("--max-rows <N> {}", opening.join(" "))), "{text}");
}

#[test]
fn keys_longer_than_airflow_allows_are_still_read_and_deleted_on_sqlite() {
    let bench = with_run(Dialect::Sqlite);
    let long = "k".repeat(600);
    bench.insert_task_row(DAG, RUN, "load", -1, &long, "\"v\"", "2026-01-01 00:00:00.000000", None);
    bench.run(&cmd(&["get", &long, "-o", "plain"], &task(&[]))).success().stdout_is("v\n");
    bench.run(&cmd(&["set", &long, "1"], &task(&[]))).fails(2, "512");
    bench.run(&cmd(&["delete", &long, "-o", "plain"], &task(&[]))).success().stdout_is("1\n");
}

/// The systemd units and the cron line of docs/operations.md, as an operator installs them:
/// the units pass `systemd-analyze verify` (with the manual page their `Documentation=` names
/// installed), and the service's `ExecStart=` and the cron command run as written against a
/// metastore found through `AIRFLOW_HOME`, paths aside: the cron line tolerates exit 7 and
/// reports any other failure.
#[test]
fn the_operations_guides_systemd_units_and_cron_line_work_as_written() {
    let ops = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations");
    let read = |name: &str| std::fs::read_to_string(ops.join(name)).unwrap();
    // A metastore where Airflow looks for it, $AIRFLOW_HOME/airflow.cfg, with three expired task
    // keys and one key of an inactive asset.
    let bench = with_run(Dialect::Sqlite);
    seed_expiring(&bench, 6, 2);
    let legacy = bench.add_asset("legacy", "s3://legacy/", false);
    bench.exec(&format!(
        "INSERT INTO asset_state_store (asset_id, key, value, updated_at, last_updated_by_kind) VALUES ({legacy}, 'old', '1', '2020-01-01 00:00:00.000000', 'task')"
    ));
    let dir = bench.dir.path();
    // `bin` stands for /usr/local/bin, `venv` for Airflow's virtualenv, where pip put the binary.
    let (bin, venv) = (dir.join("bin"), dir.join("venv"));
    std::fs::create_dir(&bin).unwrap();
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::copy(support::BIN, venv.join("bin/state-store")).unwrap();
    let (home, textfile, log) = (dir.join("home"), dir.join("textfile"), dir.join("log"));
    for d in [&home, &textfile, &log] {
        std::fs::create_dir(d).unwrap();
    }
    let local = |text: &str| {
        text.replace("/usr/local/bin", bin.to_str().unwrap())
            .replace("/opt/airflow/venv", venv.to_str().unwrap())
            .replace("/var/lib/node_exporter/textfile_collector", textfile.to_str().unwrap())
            .replace("/var/log/airflow", log.to_str().unwrap())
    };
    let service = local(&read("state-store-clean.service"));
    // The guide's systemd steps, followed as written for a pip install into Airflow's
    // virtualenv: the binary is linked where the unit and the cron line name it, before
    // `systemd-analyze verify`, which fails without it.
    let guide = std::fs::read_to_string(ops.with_file_name("operations.md")).unwrap();
    let steps = guide
        .split("```sh\n")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .find(|block| block.contains("systemd-analyze verify"))
        .unwrap();
    let link = steps.lines().position(|l| l.starts_with("sudo ln -sf /opt/airflow/venv/bin/state-store "));
    let verify = steps.lines().position(|l| l.contains("systemd-analyze verify"));
    assert!(link.is_some() && link < verify, "the steps link the binary before verify: {steps}");
    let link = local(steps.lines().nth(link.unwrap()).unwrap().strip_prefix("sudo ").unwrap());
    let out = std::process::Command::new("sh").args(["-c", &link]).output().unwrap();
    assert!(out.status.success(), "{link}: {}", String::from_utf8_lossy(&out.stderr));
    // The guide shows the cron line and the drop-in for a SQLite metastore under /home as the
    // files have them: its ini block holding `ReadWritePaths=` is verified with the units.
    let shipped_cron = read("state-store-clean.cron");
    let shipped_line = shipped_cron.lines().rfind(|l| l.starts_with(|c: char| c.is_ascii_digit())).unwrap();
    assert!(guide.contains(shipped_line), "docs/operations.md shows another cron line than {shipped_line}");
    let drop_in = guide
        .split("```ini\n")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .find(|block| block.contains("ReadWritePaths="))
        .expect("the guide's drop-in for a SQLite metastore under /home")
        .lines()
        .map(|l| l.trim_start().to_string() + "\n")
        .collect::<String>();
    assert!(
        read("state-store-clean.service").contains("ProtectHome=read-only")
            && drop_in.contains("[Service]\nReadWritePaths=/home/"),
        "{drop_in}"
    );

    if support::shells::installed("systemd-analyze", "systemd") {
        let units = dir.join("units");
        std::fs::create_dir(&units).unwrap();
        std::fs::write(units.join("state-store-clean.service"), &service).unwrap();
        std::fs::write(units.join("state-store-clean.timer"), read("state-store-clean.timer")).unwrap();
        std::fs::create_dir(units.join("state-store-clean.service.d")).unwrap();
        std::fs::write(units.join("state-store-clean.service.d/override.conf"), &drop_in).unwrap();
        bench.run(&["man", "--out-dir", dir.join("man/man1").to_str().unwrap()]).success();
        let out = std::process::Command::new("systemd-analyze")
            .args(["verify", "state-store-clean.service", "state-store-clean.timer"])
            .current_dir(&units)
            .env("MANPATH", dir.join("man"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && stderr.is_empty(), "systemd-analyze verify: {stderr}");
    }

    let conn = bench.url();
    std::fs::write(home.join("airflow.cfg"), format!("[database]\nsql_alchemy_conn = {conn}\n")).unwrap();
    let sh = |command: &str| {
        let out = std::process::Command::new("sh")
            .args(["-c", command])
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("AIRFLOW_HOME", &home)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let cron = local(&read("state-store-clean.cron"));
    let line = cron.lines().rfind(|l| l.starts_with(|c: char| c.is_ascii_digit())).unwrap();
    let words: Vec<&str> = line.splitn(7, ' ').collect();
    assert_eq!(words[..6], ["30", "3", "*", "*", "*", "airflow"], "minute, hour, day, month, weekday, user");
    let cron_command = words[6];
    // The command names the binary by its full path, the one the unit's ExecStart= names, so
    // that the user field cannot be read as the command.
    let exec_start = read("state-store-clean.service");
    let binary = exec_start.split("\nExecStart=").nth(1).unwrap().split(' ').next().unwrap();
    assert_eq!(binary, "/usr/local/bin/state-store");
    assert!(shipped_line.split(' ').nth(6) == Some(binary), "{shipped_line}");
    assert!(shipped_cron.contains("leave out \"airflow\""), "the file says what the sixth field is");
    let cron_log = log.join("state-store-clean.log");
    let expired = || bench.scalar("SELECT COUNT(*) FROM task_state_store WHERE expires_at < '2026-01-01'");

    // Another clean holds the lock: exit 7, which the cron line takes as no failure.
    let conn_arg = ["--conn", conn.as_str()];
    let mut holder = bench
        .cmd(&[&conn_arg[..], &["clean", "--batch-size", "1", "--sleep", "3s", "--no-orphans"]].concat())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while expired() == "3" {
        assert!(std::time::Instant::now() < deadline, "the holder deleted nothing within 30 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(sh(cron_command), (Some(0), String::new()), "exit 7 is quiet");
    let log_text = std::fs::read_to_string(&cron_log).unwrap();
    assert!(log_text.contains(r#""exit_code": 7}"#));
    assert!(log_text.contains("(held by pid "), "the log names the holder: {log_text}");
    // Held off again on the next run: that one is reported.
    let (code, mail) = sh(cron_command);
    assert_eq!(code, Some(0));
    assert_eq!(
        mail.trim_end(),
        format!(
            "state-store clean was held off by another clean (exit 7) on two runs in a row, see {}",
            cron_log.display()
        )
    );
    sigterm(&holder);
    assert_eq!(holder.wait().unwrap().code(), Some(143));

    // The cron line's own run: its document and summary in the log, nothing for cron to mail.
    assert_eq!(sh(cron_command), (Some(0), String::new()));
    let text = std::fs::read_to_string(&cron_log).unwrap();
    let last = json_documents(&text).pop().unwrap();
    assert_eq!(fields(&last, &["asset_rows_deleted", "stopped_by"]), json!([1, null]));
    assert_eq!(expired(), "0");
    assert!(text.contains("clean: deleted "), "{text}");
    let metrics_text = std::fs::read_to_string(textfile.join("state_store_clean.prom")).unwrap();
    assert!(metrics_text.contains("state_store_clean_exit_code 0\n"), "{metrics_text}");
    // A run that was not held off forgets the runs that were.
    assert_eq!(std::fs::read_dir(&log).unwrap().count(), 1, "only the log is left in its directory");

    // Any other failure is one line for cron to mail.
    std::fs::write(home.join("airflow.cfg"), "[database]\nsql_alchemy_conn = oracle://db/airflow\n").unwrap();
    let (code, mail) = sh(cron_command);
    assert_eq!(code, Some(0));
    assert_eq!(
        mail.trim_end(),
        format!("state-store clean failed with exit 3, see {}", cron_log.display()),
        "{}",
        std::fs::read_to_string(&cron_log).unwrap()
    );

    // The service's command line, continuation lines joined, as systemd runs it.
    std::fs::write(home.join("airflow.cfg"), format!("[database]\nsql_alchemy_conn = {conn}\n")).unwrap();
    bench.insert_task_row(
        DAG,
        RUN,
        "load",
        -1,
        "old",
        "1",
        "2019-01-01 00:00:00.000000",
        Some("2020-01-01 00:00:00.000000"),
    );
    let exec = service.split("\nExecStart=").nth(1).unwrap().replace("\\\n", " ");
    let exec = exec.lines().next().unwrap();
    let (code, output) = sh(exec);
    assert_eq!(code, Some(0), "{output}");
    assert_eq!(json_documents(&output).pop().unwrap()["task_rows_deleted"], 1, "{output}");
}

/// `~` expands as Python's `os.path.expanduser` does in Airflow: `$HOME`, else the system's
/// account lookup (getpwuid, getpwnam: NSS, so LDAP, SSSD or systemd's records count too), not
/// a reading of /etc/passwd. Played in a mount namespace whose /etc/passwd is empty, where the
/// lookup still knows the account (`getent passwd` says what it knows, e.g. systemd's root).
#[test]
fn a_tilde_expands_through_the_systems_account_lookup() {
    if !support::shells::installed("unshare", "util-linux") {
        return;
    }
    let bench = Bench::bare();
    let empty = bench.dir.path().join("passwd");
    std::fs::write(&empty, "").unwrap();
    let inside = |script: &str, envs: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new("unshare");
        cmd.args(["--mount", "--map-root-user", "sh", "-c"])
            .arg(format!(r#"mount --bind "$0" /etc/passwd && {script}"#))
            .arg(&empty)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .envs(envs.iter().copied());
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let known = inside("getent passwd 0 || true", &[]);
    let home = known.split(':').nth(5).map(str::to_string);
    let bin = support::BIN;
    for (envs, tilde) in [(&[][..], "~/airflow"), (&[("AIRFLOW_HOME", "~root/airflow")][..], "~root/airflow")]
    {
        let said = inside(&format!("exec '{bin}' list"), envs);
        let expected =
            home.as_ref().map_or(tilde.to_string(), |h| format!("{}/airflow", h.trim_end_matches('/')));
        assert!(
            said.contains(&format!("the configuration file {expected}/airflow.cfg ")),
            "{envs:?} {known}: {said}"
        );
    }
    // `$HOME` comes first.
    let said = inside(&format!("exec '{bin}' list"), &[("HOME", "/srv/home")]);
    assert!(said.contains("the configuration file /srv/home/airflow/airflow.cfg "), "{said}");
}

/// The Airflow DAG of the operations guide runs as shipped: its `bash_command`, read from the
/// file by Python (airflow's modules stood in for, to hand the command over) and run by bash as
/// the BashOperator runs it, cleans on a worker without node_exporter's directory, writes the
/// metrics where `STATE_STORE_METRICS_FILE` says, and writes none when it is empty; the guide
/// names the variable.
#[test]
fn the_operations_guides_airflow_dag_runs_as_shipped() {
    let top = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let bench = with_run(Dialect::Sqlite);
    seed_expiring(&bench, 6, 2);
    let dir = bench.dir.path();
    let stubs = dir.join("stubs");
    for module in ["airflow/providers/standard/operators", "airflow/sdk"] {
        std::fs::create_dir_all(stubs.join(module)).unwrap();
    }
    std::fs::write(
        stubs.join("airflow/providers/standard/operators/bash.py"),
        "import sys\nclass BashOperator:\n    def __init__(self, bash_command, **kwargs):\n        sys.stdout.write(bash_command)\n",
    )
    .unwrap();
    std::fs::write(
        stubs.join("airflow/sdk/__init__.py"),
        "class DAG:\n    def __init__(self, **kwargs): pass\n    def __enter__(self): return self\n    def __exit__(self, *a): return False\n",
    )
    .unwrap();
    let out = std::process::Command::new("python3")
        .arg(top.join("docs/operations/state_store_clean_dag.py"))
        .env("PYTHONPATH", &stubs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let command = String::from_utf8(out.stdout).unwrap();
    assert!(command.contains("/var/lib/node_exporter/textfile_collector"), "{command}");
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(support::BIN, bin.join("state-store")).unwrap();
    // node_exporter's directory stands in a path that does not exist here.
    let nowhere = dir.join("no-node-exporter");
    let command = command.replace("/var/lib/node_exporter/textfile_collector", nowhere.to_str().unwrap());
    let task = |metrics: Option<&str>| {
        let mut bash = std::process::Command::new("bash");
        bash.args(["-c", &command])
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", bench.url());
        if let Some(metrics) = metrics {
            bash.env("STATE_STORE_METRICS_FILE", metrics);
        }
        let out = bash.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, text) = task(None);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(json_documents(&text).pop().unwrap()["task_rows_deleted"], 3, "{text}");
    assert!(!nowhere.exists());
    let prom = dir.join("clean.prom");
    let (code, text) = task(Some(prom.to_str().unwrap()));
    assert_eq!(code, Some(0), "{text}");
    assert!(std::fs::read_to_string(&prom).unwrap().contains("state_store_clean_exit_code 0\n"));
    std::fs::remove_file(&prom).unwrap();
    let (code, text) = task(Some(""));
    assert_eq!(code, Some(0), "{text}");
    assert!(!prom.exists());
    // A file named where no directory is fails the task: a wrong path does not go unnoticed.
    let (code, text) = task(Some(nowhere.join("x.prom").to_str().unwrap()));
    assert_eq!(code, Some(2), "{text}");
    let guide = std::fs::read_to_string(top.join("docs/operations.md")).unwrap();
    let section = guide.split("## An Airflow DAG").nth(1).unwrap().split("\n## ").next().unwrap();
    let prose: String = section.split("```").step_by(2).collect();
    assert!(prose.contains("`STATE_STORE_METRICS_FILE`"), "the guide's prose names the variable");
}

/// What the systemd unit's `ProtectHome=read-only` does to a SQLite metastore under /home,
/// played with a read-only bind mount of its directory in a mount namespace of its own:
/// `clean` says the file system is read-only for it, where it used to say "check their
/// permissions" of a file and directory whose permissions are right. (A read fails too: in WAL
/// mode, which Airflow sets, SQLite's readers write the `-shm` file.) The same clean succeeds
/// once the directory is writable again.
#[test]
fn a_sqlite_metastore_on_a_read_only_mount_says_so() {
    if !support::shells::installed("unshare", "util-linux") {
        return;
    }
    let bench = with_run(Dialect::Sqlite);
    seed_expiring(&bench, 4, 2);
    let dir = bench.dir.path().to_str().unwrap().to_string();
    let read_only = |args: &[&str]| {
        let tool = bench.cmd(args);
        let mut cmd = std::process::Command::new("unshare");
        cmd.args(["--mount", "--map-root-user", "sh", "-c"])
            .arg(r#"mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@""#)
            .arg(&dir)
            .arg(support::BIN)
            .args(args);
        for (key, value) in tool.get_envs() {
            match value {
                Some(value) => cmd.env(key, value),
                None => cmd.env_remove(key),
            };
        }
        support::Run::from(cmd.output().unwrap(), args)
    };
    for args in [&["clean"][..], &["clean", "--dry-run"], &["list"]] {
        let run = bench.unchanged(|| read_only(args).fails(4, "cannot use SQLite database"));
        assert!(
            run.stderr.contains("the file system holding it is read-only for this process")
                && run.stderr.contains("ReadWritePaths=")
                && !run.stderr.contains("check their permissions"),
            "{run:?}"
        );
    }
    bench.run(&["clean", "-o", "plain"]).success();
    assert_eq!(bench.scalar("SELECT COUNT(*) FROM task_state_store"), "2");
}

/// A number the guides write in words, as they write those up to twelve.
fn number_word(word: &str) -> usize {
    let words = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve",
    ];
    words.iter().position(|w| *w == word).unwrap_or_else(|| panic!("{word:?} is not a number in words"))
}

/// Where the guides count what the tool has, the count is right: doctor's page says how many
/// checks `doctor -o json` always lists, and the operations guide how many rules of
/// alerts.yml follow the one it shows (and names each of them).
#[test]
fn the_guides_count_what_they_list() {
    let top = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| std::fs::read_to_string(top.join(path)).unwrap();

    let bench = with_run(Dialect::Sqlite);
    let checks = doctor(&bench, 0, &[]).json()["checks"].as_array().unwrap().len();
    let page = read("docs/commands/doctor.md");
    let said = page.split("the checks, always all ").nth(1).expect("doctor.md counts the checks");
    let said = said.split(|c: char| !c.is_ascii_alphabetic()).next().unwrap();
    assert_eq!(number_word(said), checks, "docs/commands/doctor.md says {said} checks");

    let alerts: Vec<String> = read("docs/operations/alerts.yml")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: ").map(str::to_string))
        .collect();
    let guide = read("docs/operations.md");
    let said = guide.split("The file has ").nth(1).expect("the guide counts the other rules");
    let said = said.split(' ').next().unwrap();
    assert_eq!(number_word(said), alerts.len() - 1, "docs/operations.md says {said} more rules: {alerts:?}");
    for alert in &alerts {
        assert!(guide.contains(&format!("`{alert}`")), "docs/operations.md does not name {alert}");
    }
}

/// The JSON documents among the lines of a log: those that are objects.
fn json_documents(text: &str) -> Vec<Value> {
    text.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Prometheus's own checker on what the operations guide ships: a metrics file as clean writes
/// it passes `promtool check metrics` (syntax and naming conventions), and the alerting rules
/// of docs/operations/alerts.yml pass `promtool check rules` and fire as their unit tests
/// (tests/promtool/alerts.test.yml) say.
#[test]
fn promtool_accepts_the_metrics_file_and_the_alerts() {
    if !support::shells::installed("promtool", "prometheus") {
        return;
    }
    let top = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let bench = with_run(Dialect::Sqlite);
    seed_expiring(&bench, 10, 2);
    let prom = bench.dir.path().join("clean.prom");
    bench.run(&["clean", "--max-rows", "2", "--metrics-file", prom.to_str().unwrap()]).success();
    let promtool = |args: &[&str], stdin: Option<&std::path::Path>| {
        let mut cmd = std::process::Command::new("promtool");
        cmd.args(args).current_dir(top);
        if let Some(path) = stdin {
            cmd.stdin(std::fs::File::open(path).unwrap());
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "promtool {args:?}: {text}");
        text
    };
    assert_eq!(promtool(&["check", "metrics"], Some(&prom)), "", "no lint about names or units");
    promtool(&["check", "rules", "docs/operations/alerts.yml"], None);
    let tested = promtool(&["test", "rules", "tests/promtool/alerts.test.yml"], None);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// The nightly clean as the docs run it, on every ending and in every format: the metrics
/// file says what the database shows was deleted, and so do the JSON and YAML documents and the
/// summary line where the ending prints them; `promtool check metrics` accepts every file; the
/// clean lock file is gone after every ending. Endings: success, `--max-rows`,
/// `--max-duration`, SIGINT, SIGTERM, a failure after committed batches (another connection
/// takes the write lock, `--lock-timeout 1s`), the hard deadline (`--max-duration` + 15 s, a
/// batch blocked on that lock), a SIGTERM the blocked run cannot answer (its 10 s grace),
/// SIGHUP (a dropped ssh session) and SIGQUIT (Ctrl-\) between batches, and a stdout closed
/// before the document (`| head`), which is a success. The metrics' exit code is the
/// process's on every ending.
#[test]
fn every_ending_of_every_format_writes_the_metrics_of_what_was_deleted() {
    use std::time::Duration;
    let promtool = support::shells::installed("promtool", "prometheus");
    let endings = [
        "success",
        "max_rows",
        "max_duration",
        "SIGINT",
        "SIGTERM",
        "SIGHUP",
        "SIGQUIT",
        "closed stdout",
        "failure after batches",
        "hard deadline",
        "blocked SIGTERM",
    ];
    std::thread::scope(|scope| {
        for format in ["json", "yaml", "table", "plain"] {
            scope.spawn(move || {
                for ending in endings {
                    one_ending(format, ending, promtool);
                }
            });
        }
    });

    fn one_ending(format: &str, ending: &str, promtool: bool) {
        use std::process::{Command, Stdio};
        let bench = with_run(Dialect::Sqlite);
        seed_expiring(&bench, 40, 2);
        let expired = || {
            bench
                .scalar("SELECT count(*) FROM task_state_store WHERE expires_at < '2026-01-01'")
                .parse::<u64>()
                .unwrap()
        };
        let before = expired();
        let prom = bench.dir.path().join("clean.prom");
        let prom_arg = prom.display().to_string();
        let mut args = vec!["clean", "-o", format, "--metrics-file", &prom_arg, "--batch-size", "1"];
        let lock_file = bench.dir.path().join("airflow.db.state-store-clean.lock");
        let mut holder = None;
        let (run, code) = match ending {
            "success" => (bench.run(&args), 0),
            "max_rows" => {
                args.extend(["--max-rows", "3"]);
                (bench.run(&args), 0)
            }
            "max_duration" => {
                args.extend(["--max-duration", "1s", "--sleep", "300ms"]);
                (bench.run(&args), 0)
            }
            "closed stdout" => {
                // The reader is gone before the run writes its document, as `| head` that
                // has read its lines already.
                args.extend(["--sleep", "100ms"]);
                let mut child =
                    bench.cmd(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
                drop(child.stdout.take());
                (finished(child, &args), 0)
            }
            _ => {
                let signal = match ending {
                    "SIGINT" => "-INT",
                    "SIGHUP" => "-HUP",
                    "SIGQUIT" => "-QUIT",
                    _ => "-TERM",
                };
                let blocked = matches!(ending, "hard deadline" | "blocked SIGTERM" | "failure after batches");
                args.extend(["--sleep", "300ms"]);
                args.extend(match ending {
                    "failure after batches" => ["--lock-timeout", "1s"],
                    "hard deadline" => ["--lock-timeout", "60s"],
                    _ => ["--lock-timeout", "60s"],
                });
                if ending == "hard deadline" {
                    args.extend(["--max-duration", "2s"]);
                }
                let child = bench.cmd(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
                // Two batches committed, then the ending.
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                while before - expired() < 2 {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "{format} {ending}: no two batches in 30 s"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
                if blocked {
                    holder = Some(bench.hold("DELETE FROM task_state_store WHERE 0"));
                }
                match ending {
                    "SIGINT" | "SIGTERM" | "SIGHUP" | "SIGQUIT" | "blocked SIGTERM" => {
                        if ending == "blocked SIGTERM" {
                            // Into the batch that waits for the lock.
                            std::thread::sleep(Duration::from_millis(800));
                        }
                        let sent =
                            Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
                        assert!(sent.success());
                    }
                    _ => {}
                }
                let code = match ending {
                    "SIGHUP" => 129,
                    "SIGINT" => 130,
                    "SIGQUIT" => 131,
                    "SIGTERM" | "blocked SIGTERM" => 143,
                    _ => 4,
                };
                (finished(child, &args), code)
            }
        };
        drop(holder);
        let what = format!("{format}, {ending}: {run:?}");
        assert_eq!(run.code, code, "{what}");
        let deleted = before - expired();
        let samples = metrics(&prom);
        let sample = |series: &str| samples.get(series).unwrap_or_else(|| panic!("{series}: {what}")).clone();
        assert_eq!(
            sample(r#"state_store_clean_deleted_rows{table="task_state_store"}"#),
            deleted.to_string(),
            "{what}"
        );
        assert_eq!(sample(r#"state_store_clean_batches{phase="expired"}"#), deleted.to_string(), "{what}");
        assert_eq!(sample("state_store_clean_exit_code"), run.code.to_string(), "{what}");
        let succeeded = samples.contains_key("state_store_clean_last_success_timestamp_seconds");
        assert_eq!(succeeded, code == 0, "a success is recorded exactly when the run succeeded: {what}");
        let signalled = matches!(ending, "SIGINT" | "SIGTERM" | "SIGHUP" | "SIGQUIT" | "blocked SIGTERM");
        assert_eq!(sample("state_store_clean_interrupted"), u8::from(signalled).to_string(), "{what}");
        assert!(deleted >= 2 || !signalled, "{what}");
        if promtool {
            let out = Command::new("promtool")
                .args(["check", "metrics"])
                .stdin(std::fs::File::open(&prom).unwrap())
                .output()
                .unwrap();
            assert!(out.status.success(), "promtool: {}", String::from_utf8_lossy(&out.stderr));
        }
        if format == "json" && ending != "closed stdout" {
            let doc = one_document(&run);
            assert_eq!(doc["task_rows_deleted"], json!(deleted), "{what}");
            assert_eq!(doc["batches"], json!(deleted), "{what}");
            assert_eq!(doc["interrupted"], json!(signalled), "{what}");
            if code != 0 {
                assert_eq!(doc["error"]["exit_code"], json!(code), "{what}");
            }
        }
        if format == "yaml" && ending != "closed stdout" {
            for line in [
                format!("\ntask_rows_deleted: {deleted}\n"),
                format!("\nbatches: {deleted}\n"),
                format!("\ninterrupted: {signalled}\n"),
            ] {
                assert!(format!("\n{}", run.stdout).contains(&line), "{line:?}: {what}");
            }
            if code != 0 {
                assert!(run.stdout.contains(&format!("\n  exit_code: {code}\n")), "{what}");
            }
        }
        if !matches!(ending, "hard deadline" | "blocked SIGTERM") {
            let line = run
                .stderr
                .lines()
                .find(|l| l.starts_with("clean: deleted "))
                .unwrap_or_else(|| panic!("{what}"));
            assert!(
                line.starts_with(&format!(
                    "clean: deleted {deleted} expired task row(s) in {deleted} batch(es)"
                )),
                "{what}"
            );
        }
        assert!(!lock_file.exists(), "the lock file is left: {what}");
    }
}

/// Clean behind rows another session holds, and what a run tells cron, systemd and Prometheus:
/// held rows skipped and counted, `started_at` in every document, the metrics written after
/// stdout with the real exit code, a custom backend that is no success, and a stop at shutdown
/// that is no failure.
mod clean_locks_and_metrics {
    use super::*;

    /// How far a neighbour of [`writing_neighbour`] has written.
    const NEIGHBOUR_WRITES: &str = "SELECT max(clear_number) FROM dag_run";

    /// Another tenant of `d`'s server: a database of its own and a session writing into it
    /// back to back, returned once it has written.
    fn writing_neighbour(d: Dialect) -> (Bench, support::Writer) {
        let neighbour = Bench::on(d);
        neighbour.add_dag_run("other", "run");
        let before = neighbour.scalar(NEIGHBOUR_WRITES);
        let writer = neighbour.writer("UPDATE dag_run SET clear_number = clear_number + 1");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while neighbour.scalar(NEIGHBOUR_WRITES) == before {
            assert!(std::time::Instant::now() < deadline, "the neighbour wrote nothing in 30 s");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        (neighbour, writer)
    }

    /// `date -u` to the second, as RFC 3339 begins: documents' `started_at` sort against it.
    fn utc_now() -> String {
        let out = std::process::Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%S"]).output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// `started_at` of a document: RFC 3339 in UTC (`…Z`), between `before` and `after`.
    #[track_caller]
    fn started_within(v: &Value, before: &str, after: &str) {
        let at = text_of(v, "started_at");
        assert!(at.len() > 20 && at.ends_with('Z') && at.as_bytes()[10] == b'T', "{v}");
        assert!(before <= &at[..19] && &at[..19] <= after, "{at} not in {before}..{after}");
    }

    contract! {
        /// The default clean (`--batch-size auto`) goes at full speed while no other session
        /// writes (its batches grow past 10,000 rows, no pause) and stays gentle while one does
        /// (a write every few milliseconds on another connection): it reads the database's
        /// count of writes between batches. Both runs delete exactly the expired rows.
        fn the_default_clean_goes_full_speed_only_while_nobody_else_writes(d: Dialect) {
            for writing in [false, true] {
                let bench = with_run(d);
                let survivors = seed_expiring(&bench, 40_000, 2);
                let writes = || bench.scalar("SELECT max(clear_number) FROM dag_run");
                let before = writes();
                let writer = writing.then(|| bench.writer("UPDATE dag_run SET clear_number = clear_number + 1"));
                // The writer's session is writing before the clean starts.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                while writing && writes() == before {
                    assert!(std::time::Instant::now() < deadline, "the writer wrote nothing in 30 s");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                let run = bench.run(&["clean", "-v"]).success();
                drop(writer);
                let paces: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("clean: pace: ")).collect();
                assert!(!paces.is_empty(), "{}", run.stderr);
                let fast = paces.iter().filter(|l| l.contains("full speed")).count();
                let largest = paces
                    .iter()
                    .filter_map(|l| l.split("next batch ").nth(1)?.split(' ').next()?.parse::<u64>().ok())
                    .max()
                    .unwrap();
                if writing {
                    assert_eq!(fast, 0, "{}", run.stderr);
                    let paused = run.stderr.lines().filter(|l| l.starts_with("clean: pace: gentle")).count();
                    assert_eq!(paused, paces.len(), "{}", run.stderr);
                } else {
                    // The first reading after the first batch is one of the two it needs.
                    assert_eq!(fast, paces.len() - 1, "{}", run.stderr);
                    assert!(largest > 10_000, "full-speed batches: {largest}");
                }
                assert_eq!(remaining_keys(&bench), survivors);
            }
        }

        /// A run that goes on where an earlier one stopped (`--max-rows`: three quarters of the
        /// ids emptied of expired rows) estimates what it has left from the walk after its first
        /// batch, not from the lowest id: every progress line off a terminal says a total within
        /// twice the rows the run deletes, or that it does not know it yet (before: about a
        /// quarter of them, and an ETA as short).
        fn progress_after_an_interrupted_run_estimates_what_is_left(d: Dialect) {
            let bench = with_run(d);
            let survivors = seed_expiring(&bench, 4_000, 2);
            let first = bench.run(&["clean", "--batch-size", "500", "--max-rows", "1500", "-o", "json"]).success();
            assert_eq!(one_document(&first)["task_rows_deleted"], 1500, "{}", first.stdout);
            let args = ["clean", "--batch-size", "20", "--sleep", "20ms", "--progress-every", "100ms", "-o", "json"];
            let run = bench.run(&args).success();
            assert_eq!(one_document(&run)["task_rows_deleted"], 500, "{}", run.stdout);
            let lines: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("clean: progress: ")).collect();
            assert!(lines.len() >= 2, "{}", run.stderr);
            let mut estimated = 0;
            for line in &lines {
                match line.split("(about ").nth(1) {
                    Some(rest) => {
                        let total: f64 = rest.split(' ').next().unwrap().parse().unwrap();
                        assert!((250.0..=1000.0).contains(&total), "500 rows left: {line}\n{}", run.stderr);
                        assert!(line.contains(", ETA ") && !line.contains("not known"), "{line}");
                        estimated += 1;
                    }
                    None => assert!(line.ends_with(", ETA not known yet"), "{line}"),
                }
            }
            assert!(estimated > 0, "{}", run.stderr);
            assert_eq!(remaining_keys(&bench), survivors);
        }

        /// A session writing into another database on the same server, every few milliseconds,
        /// does not slow the default clean: the server's count of writes moves, but no other
        /// session of this database was busy, so every batch after the first reading goes at
        /// full speed, as on an idle server (before: every batch gentle on PostgreSQL and
        /// MariaDB). SQLite's count is the file's own.
        fn writes_into_another_database_do_not_slow_the_default_clean(d: Dialect) {
            let bench = with_run(d);
            let survivors = seed_expiring(&bench, 40_000, 2);
            let (neighbour, writer) = writing_neighbour(d);
            let writes = || neighbour.scalar(NEIGHBOUR_WRITES);
            let started = writes();
            let run = bench.run(&["clean", "-v", "-o", "json"]).success();
            let during = writes();
            drop(writer);
            assert_ne!(started, during, "the neighbour wrote while the clean ran");
            let paces: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("clean: pace: ")).collect();
            assert!(paces.len() > 1, "{}", run.stderr);
            let fast = paces.iter().filter(|l| l.contains("full speed")).count();
            // The first reading after the first batch is one of the two it needs.
            assert_eq!(fast, paces.len() - 1, "{}", run.stderr);
            assert!(!run.stderr.contains("gentle: another session writes"), "{}", run.stderr);
            let v = one_document(&run);
            assert_eq!(v["batching"], "auto", "{v}");
            assert!(v["batch_size"].as_u64().unwrap() > 1_000, "batches grew past the first: {v}");
            assert_eq!(remaining_keys(&bench), survivors);
        }

        /// A worker holds an expired row and an unexpired one in the same id range. PostgreSQL
        /// and MySQL delete every other expired row at once, skip the held one and count it
        /// (summary, line, metrics, backlog); the next run takes it. SQLite's lock is on the
        /// whole database: it waits up to --lock-timeout, exit 4.
        fn clean_skips_held_rows_and_counts_them(d: Dialect) {
            for batch in ["4", "0"] {
                let bench = with_run(d);
                let survivors = seed_expiring(&bench, 12, 2);
                let holder = hold_rows(&bench, &["k00004", "k00005"]);
                let prom = bench.dir.path().join("clean.prom");
                let started = std::time::Instant::now();
                let args = ["clean", "--batch-size", batch, "--lock-timeout", "5s", "-o", "json"];
                let run = bench.run(&[&args[..], &["--metrics-file", prom.to_str().unwrap()]].concat());
                if d == Dialect::Sqlite {
                    let run = run.code(4);
                    assert!(run.stderr.contains("clean: deleted 0 expired"), "{}", run.stderr);
                    drop(holder);
                    continue;
                }
                let waited = started.elapsed();
                assert_eq!(run.code, 0, "batch {batch}: {}", run.stderr);
                assert!(waited < std::time::Duration::from_secs(4), "waited {waited:?} for a held row");
                let v = one_document(&run);
                assert_eq!(fields(&v, &["task_rows_deleted", "task_rows_skipped"]), json!([5, 1]), "batch {batch}");
                assert!(
                    run.stderr.contains("skipped 1 expired task row(s) another session held locked"),
                    "{}",
                    run.stderr
                );
                let m = metrics(&prom);
                assert_eq!(m[r#"state_store_clean_locked_rows_skipped{table="task_state_store"}"#], "1");
                assert_eq!(m[r#"state_store_clean_backlog_rows{table="task_state_store"}"#], "1");
                assert_eq!(m["state_store_clean_exit_code"], "0");
                drop(holder);
                let mut left = survivors.clone();
                left.push("k00004".to_string());
                left.sort();
                assert_eq!(remaining_keys(&bench), left, "the held expired row is left, nothing else");
                let v = one_document(&bench.run(&args).success());
                assert_eq!(fields(&v, &["task_rows_deleted", "task_rows_skipped"]), json!([1, 0]));
                assert_eq!(remaining_keys(&bench), survivors);
            }
        }
    }

    /// Where the server cannot tell which database a write was for, every write counts, as
    /// the clean page says: a MySQL user without `PROCESS` sees only its own sessions in the
    /// process list, so a neighbour writing into another database keeps its default clean
    /// gentle; granted `PROCESS`, the same user's clean goes at full speed beside it.
    #[test]
    fn without_process_a_mysql_clean_counts_every_write_on_the_server() {
        let d = Dialect::Mysql;
        let user = format!("state_store_np_{}", std::process::id());
        let admin = Bench::on(d);
        admin.admin_sql(&format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'right'"));
        let (_neighbour, writer) = writing_neighbour(d);
        let mut gentle = Vec::new();
        for grant in [false, true] {
            let bench = with_run(d);
            let url = bench.url();
            let database = url.rsplit('/').next().unwrap().to_string();
            bench.admin_sql(&format!("GRANT ALL ON `{database}`.* TO '{user}'@'%'"));
            if grant {
                bench.admin_sql(&format!("GRANT PROCESS ON *.* TO '{user}'@'%'"));
            }
            let survivors = seed_expiring(&bench, 20_000, 2);
            let conn = Bench::server_url(d, &format!("{user}:right"), &database);
            let run = bench.run(&["clean", "-v", "--conn", &conn]).success();
            gentle.push(run.stderr.contains("clean: pace: gentle: another session writes"));
            assert_eq!(remaining_keys(&bench), survivors);
        }
        drop(writer);
        admin.admin_sql(&format!("DROP USER '{user}'@'%'"));
        assert_eq!(gentle, [true, false], "gentle without PROCESS, not with it");
    }

    /// Every clean document carries `started_at`: a summary, a dry run, a refusal, a failure.
    #[test]
    fn every_clean_document_says_when_it_ran() {
        let bench = with_run(Dialect::Sqlite);
        seed_expiring(&bench, 6, 2);
        let before = utc_now();
        let runs = [
            bench.run(&["clean", "--dry-run", "-o", "json"]).success(),
            bench.run(&["clean", "-o", "json"]).success(),
            bench.run(&["clean", "-o", "json", "--sleep", "soon"]).code(2),
            bench.run(&["clean", "-o", "json", "--frobnicate"]).code(2),
            bench.run(&["clean", "-o", "json", "--conn", "sqlite:////nonexistent/dir/x.db"]).code(4),
        ];
        let after = utc_now();
        for run in &runs {
            let v = one_document(run);
            assert_eq!(keys(&v)[0], "started_at", "{v}");
            started_within(&v, &before, &after);
        }
        let yaml = bench.run(&["clean", "-o", "yaml"]).success();
        assert!(yaml.stdout.starts_with("started_at: "), "{}", yaml.stdout);
    }

    /// stdout that fails (`> /dev/full`): exit 6, and the metrics file says 6, not 0, and keeps
    /// the last success where the earlier run put it.
    #[test]
    fn metrics_record_the_exit_code_of_a_failed_stdout() {
        let bench = with_run(Dialect::Sqlite);
        seed_expiring(&bench, 6, 2);
        let prom = bench.dir.path().join("clean.prom");
        let prom_arg = prom.to_str().unwrap();
        bench.run(&["clean", "-o", "json", "--metrics-file", prom_arg]).success();
        let last_success = metrics(&prom)["state_store_clean_last_success_timestamp_seconds"].clone();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let out = bench
            .cmd(&["clean", "-o", "json", "--metrics-file", prom_arg])
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(6), "{}", String::from_utf8_lossy(&out.stderr));
        let m = metrics(&prom);
        assert_eq!(m["state_store_clean_exit_code"], "6");
        assert_eq!(m["state_store_clean_last_success_timestamp_seconds"], last_success);
    }

    /// A custom `[state_store] backend`: exit 0 and a summary of the usual shape with its
    /// reason, but no success: `state_store_clean_skipped 1` and the last success unchanged.
    #[test]
    fn a_custom_backend_is_a_skip_not_a_success() {
        let mut bench = with_run(Dialect::Sqlite);
        seed_expiring(&bench, 6, 2);
        let prom = bench.dir.path().join("clean.prom");
        let prom_arg = prom.to_str().unwrap();
        let normal = one_document(&bench.run(&["clean", "-o", "json", "--metrics-file", prom_arg]).success());
        let m = metrics(&prom);
        assert_eq!(m["state_store_clean_skipped"], "0");
        let last_success = m["state_store_clean_last_success_timestamp_seconds"].clone();
        bench.insert_task_row(
            DAG,
            RUN,
            "t",
            -1,
            "late",
            "1",
            "2020-01-01 00:00:00.000000",
            Some("2020-01-01 00:00:00.000000"),
        );
        bench.env("AIRFLOW__STATE_STORE__BACKEND", "mypackage.state.CustomStateBackend");
        let run = bench.unchanged(|| {
            bench
                .run(&["clean", "-o", "json", "--metrics-file", prom_arg])
                .success()
                .stderr_has("skipping cleanup")
        });
        let v = one_document(&run);
        let mut shape = keys(&normal);
        shape.push("skipped");
        assert_eq!(keys(&v), shape);
        assert_eq!(fields(&v, &["task_rows_deleted", "batches", "stopped_by"]), json!([0, 0, null]));
        assert!(text_of(&v, "skipped").contains("CustomStateBackend"), "{v}");
        let m = metrics(&prom);
        assert_eq!(m["state_store_clean_skipped"], "1");
        assert_eq!(m["state_store_clean_exit_code"], "0");
        assert_eq!(m["state_store_clean_last_success_timestamp_seconds"], last_success);
    }

    /// The shipped unit and cron line take exit 143 (SIGTERM: `systemctl stop`, shutdown) as no
    /// failure, as they take 7; any other code still fails (the operations test runs both).
    #[test]
    fn a_clean_stopped_at_shutdown_is_no_failure() {
        let ops = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations");
        let service = std::fs::read_to_string(ops.join("state-store-clean.service")).unwrap();
        let success: Vec<&str> = service
            .lines()
            .filter_map(|l| l.strip_prefix("SuccessExitStatus="))
            .flat_map(str::split_whitespace)
            .collect();
        assert_eq!(success, ["7", "143", "SIGTERM"], "{service}");

        let cron = std::fs::read_to_string(ops.join("state-store-clean.cron")).unwrap();
        let line = cron.lines().rfind(|l| l.starts_with(|c: char| c.is_ascii_digit())).unwrap();
        let dir = support::TempDir::new();
        let stub = dir.path().join("state-store");
        // The line names the binary by its full path: the stub stands in for it there.
        let command = line
            .splitn(7, ' ')
            .nth(6)
            .unwrap()
            .replace("/var/log/airflow", "/tmp")
            .replace("/usr/local/bin/state-store", stub.to_str().unwrap());
        for (code, mail) in [(143, false), (7, false), (0, false), (130, true), (4, true)] {
            std::fs::write(&stub, format!("#!/bin/sh\nexit {code}\n")).unwrap();
            std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
            let log = dir.path().join("state-store-clean.log");
            let command = command.replace("/tmp/state-store-clean.log", log.to_str().unwrap());
            let out = std::process::Command::new("sh")
                .args(["-c", &command])
                .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()))
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout).into_owned();
            assert_eq!(!said.is_empty(), mail, "exit {code}: {said:?}");
        }
    }
}

/// The tool at a shell prompt and in scripts: where help goes, how options and numbers are
/// named, what an empty stdin or a mapped task is told, what a dry run with nothing to do and
/// the expiry chart print, and that progress stays off a pipe.
mod shell_and_scripts {
    use super::*;

    #[test]
    fn a_command_line_without_its_command_prints_help_on_stderr() {
        let bench = Bench::bare();
        for args in [&[][..], &["config"], &["sandbox"]] {
            let run = bench.run(args).code(2);
            assert_eq!(run.stdout, "", "{args:?}: usage errors leave stdout empty");
            assert!(run.stderr.contains("Usage: state-store"), "{args:?}: {}", run.stderr);
        }
        // Asked for, help is data: stdout, exit 0.
        assert!(bench.run(&["--help"]).success().stdout.contains("Usage: state-store"));
    }

    #[test]
    fn config_get_takes_section_dot_key_as_config_show_prints_it() {
        let bench = Bench::bare();
        let url = format!("{}\n", bench.url());
        bench.run(&["config", "get", "database.sql_alchemy_conn"]).success().stdout_is(&url);
        bench.run(&["config", "get", "database", "sql_alchemy_conn"]).success().stdout_is(&url);
        let days = bench.run(&["config", "get", "state_store", "default_retention_days"]).success().stdout;
        bench.run(&["config", "get", "state_store.default_retention_days"]).success().stdout_is(&days);
        let plain = bench.run(&["config", "show", "-o", "plain"]).success().stdout;
        let shown = plain.lines().find(|l| l.starts_with("state_store.")).unwrap();
        let name = shown.split('=').next().unwrap();
        bench.run(&["config", "get", name]).success();
        bench.run(&["config", "get", "database.sql_alchemy_conn", "x"]).fails(2, "not both");
        bench.run(&["config", "get", "database"]).fails(2, "SECTION KEY or SECTION.KEY");
        bench.run(&["config", "get", "database.nope"]).fails(1, "[database] nope is not an option");
    }

    /// Every number flag, refused in the tool's words: never clap's "number too large to fit in
    /// target type", "invalid digit", nor `-1` taken for an unknown flag.
    #[test]
    fn number_flags_are_refused_in_words() {
        let bench = Bench::bare();
        let t = ["--dag-id", DAG, "--run-id", RUN, "--task-id", "load"];
        let flags: Vec<(Vec<&str>, &str)> = vec![
            (vec!["get", "k"], "--asset-id"),
            (vec!["set", "k", "1"], "--asset-id"),
            (vec!["delete", "k"], "--asset-id"),
            (vec!["clear", "-y"], "--asset-id"),
            (vec!["list"], "--asset-id"),
            (vec!["export"], "--asset-id"),
            ([&["get", "k"][..], &t].concat(), "--map-index"),
            (
                vec!["sandbox", "add-task-instance", "--dag-id", "d", "--run-id", "r", "--task-id", "t"],
                "--map-index",
            ),
            (vec!["list"], "--limit"),
            (vec!["list"], "--offset"),
            (vec!["stats"], "--largest"),
            (vec!["doctor"], "--sample"),
            (vec!["import", "f.jsonl"], "--batch-size"),
            (vec!["clean"], "--batch-size"),
            (vec!["clean"], "--sample"),
            (vec!["clean"], "--max-rows"),
        ];
        let raw = ["too large to fit", "unexpected argument", "invalid digit", "cannot parse"];
        for (head, flag) in &flags {
            for value in ["99999999999999999999", "-99999999999999999999", "x", "1.5"] {
                let run = bench.run(&[&head[..], &[flag, value]].concat()).code(2);
                let line = run.stderr.trim_end();
                assert_eq!(line.lines().count(), 1, "{head:?} {flag} {value}: {}", run.stderr);
                assert!(line.contains(&format!("for '{flag} ")), "{head:?} {flag} {value}: {line}");
                assert!(!raw.iter().any(|r| line.contains(r)), "{head:?} {flag} {value}: {line}");
            }
        }
        // A negative number reaches the parser, which says what is wanted instead.
        bench.run(&["get", "k", "--asset-id", "-1"]).fails(2, "an asset id is a whole number of 1 or more");
        bench.run(&["get", "k", "--asset-id", "0"]).fails(2, "an asset id is a whole number of 1 or more");
        bench
            .run(&["get", "k", "--asset-id", "99999999999999999999"])
            .fails(2, "too large: an asset id is at most");
        bench.run(&["list", "--limit", "-1"]).fails(2, "give a whole number of 0 or more");
        bench.run(&["clean", "--max-rows", "0"]).fails(2, "give a whole number of 1 or more");
        bench
            .run(&[&["get", "k"][..], &t, &["--map-index", "99999999999999999999"]].concat())
            .fails(2, "out of range");
        assert!(!bench.db.exists(), "usage errors never open the database");
    }

    /// `export --file -` is stdout, as `import -` and `set KEY -` read stdin: the lines reach
    /// stdout (and `import -` takes them back), the summary names stdout, and no file named `-`
    /// appears; `--file ./-` still names a file of that name.
    #[test]
    fn export_file_dash_is_stdout() {
        let bench = with_run(Dialect::Sqlite);
        bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
        let in_dir = |args: &[&str]| {
            let out = bench.cmd(args).current_dir(bench.dir.path()).output().unwrap();
            support::Run::from(out, args)
        };
        let run = in_dir(&["export", "--file", "-", "-o", "json"]).success();
        let lines = support::json_lines(&run.stdout);
        assert_eq!(fields(&lines[0], &["kind", "key"]), json!(["task", "k"]), "{run:?}");
        assert_eq!(lines.len(), 1, "the rows alone, no counts document: {run:?}");
        let run = run.stderr_has("exported 1 task row(s) and 0 asset row(s) to stdout");
        assert!(!bench.dir.path().join("-").exists(), "a file named - was written");
        bench.run(&cmd(&["delete", "k"], &task(&[]))).success();
        bench.run_with_stdin(&["import", "-"], &run.stdout).success();
        bench.run(&cmd(&["get", "k", "-o", "plain"], &task(&[]))).success().stdout_is("1\n");

        let run = in_dir(&["export", "--file", "./-"]).success().stdout_is("");
        run.stderr_has("to ./-");
        assert!(std::fs::read_to_string(bench.dir.path().join("-")).unwrap().contains("\"key\": \"k\""));
    }

    #[test]
    fn set_from_an_empty_stdin_says_stdin_was_empty() {
        let bench = with_run(Dialect::Sqlite);
        let before = bench.snapshot();
        let run = bench.run_with_stdin(&cmd(&["set", "k", "-"], &task(&[])), "").fails(2, "stdin was empty");
        assert!(!run.stderr.contains("Expecting value"), "{}", run.stderr);
        bench
            .run_with_stdin(&cmd(&["set", "k", "-"], &task(&[])), " \n")
            .fails(2, "stdin was only whitespace");
        assert_eq!(bench.snapshot(), before);
        bench.run_with_stdin(&cmd(&["set", "k", "-"], &task(&[])), "[1]\n").success();
    }

    /// The shell script of docs/operations/cronjob.yaml (the container's `args`), dedented.
    fn cronjob_script() -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations/cronjob.yaml");
        let text = std::fs::read_to_string(path).unwrap();
        let mut lines = text.lines().skip_while(|l| l.trim() != "args:").skip(1);
        assert_eq!(lines.next().map(str::trim), Some("- |"), "args is one block scalar");
        let body: Vec<&str> =
            lines.take_while(|l| l.trim().is_empty() || l.starts_with("                  ")).collect();
        let indent = body[0].len() - body[0].trim_start().len();
        body.iter().map(|l| format!("{}\n", l.get(indent..).unwrap_or(""))).collect()
    }

    /// A drained node or a deleted pod stops the CronJob's clean with SIGTERM: the script
    /// passes it on (its shell is the container's PID 1, which gets no signal it does not
    /// handle), pushes the metrics (exit code 143) and exits 0, not a failed Job.
    #[test]
    fn the_cronjob_script_passes_sigterm_on_and_takes_143_as_no_failure() {
        let bench = with_run(Dialect::Sqlite);
        seed_expiring(&bench, 40, 2);
        let bin = bench.dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(support::BIN, bin.join("state-store")).unwrap();
        let metrics = bench.dir.path().join("state_store_clean.prom");
        let script = cronjob_script()
            .replace("/metrics/state_store_clean.prom", metrics.to_str().unwrap())
            .replace("--batch-size 10000 --sleep 100ms", "--batch-size 1 --sleep 150ms");
        assert!(script.contains("--sleep 150ms"), "{script}");
        // The environment the tool's own runs get (the bench's database), for the shell.
        let mut sh = std::process::Command::new("sh");
        for (key, value) in bench.cmd(&[]).get_envs() {
            if let Some(value) = value {
                sh.env(key, value);
            }
        }
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
        let child = sh
            .args(["-c", &script])
            .env("PATH", path)
            .env("PUSHGATEWAY_URL", "http://127.0.0.1:9")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        until_some_rows_are_gone(&bench, 40);
        assert!(
            std::process::Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .unwrap()
                .success()
        );
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(stderr.contains("stopped by SIGTERM"), "the clean heard the signal: {stderr}");
        assert!(stderr.contains("cannot push the metrics"), "{stderr}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(fields(&v, &["interrupted", "stopped_by"]), json!([true, "SIGTERM"]));
        let prom = std::fs::read_to_string(&metrics).unwrap();
        assert!(prom.contains("state_store_clean_exit_code 143\n"), "{prom}");
    }

    /// What the guides tell an operator to type: the wheel from this repository, never a
    /// package of that name from an index (anyone could register it); the manual pages
    /// installed before `systemd-analyze verify`, which checks the unit's `Documentation=`;
    /// and, beside "drop the airflow prefix", that this clean deletes more than Airflow's.
    #[test]
    fn the_guides_install_from_this_repository_and_say_what_clean_deletes() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
        for path in ["README.md", "docs/operations.md", "docs/operations/cronjob.yaml"] {
            for line in read(path).lines().filter(|l| l.contains("pip install state-store")) {
                assert!(line.contains("never"), "{path}: {line}");
            }
        }
        let cronjob = read("docs/operations/cronjob.yaml");
        assert!(cronjob.contains("./scripts/wheel.sh build"), "{cronjob}");
        assert!(cronjob.contains("pip install --no-index --no-deps /tmp/state_store-*.whl"), "{cronjob}");

        let guide = read("docs/operations.md");
        let verify = guide.lines().position(|l| l.contains("systemd-analyze verify /etc/systemd")).unwrap();
        let man = guide
            .lines()
            .position(|l| l.contains("state-store man --out-dir /usr/local/share/man/man1"))
            .unwrap();
        assert!(man < verify, "the manual pages are installed before the units are verified");

        let clean = read("docs/commands/clean.md");
        let prefix = clean.split("\n\n").find(|p| p.contains("drop the `airflow` prefix")).unwrap();
        assert!(prefix.contains("inactive assets") && prefix.contains("--no-orphans"), "{prefix}");
    }

    /// The README's install section says what each way links: a binary built with the default
    /// features (this one, as `cargo install --locked --path .` builds it) needs the system's
    /// libssl, so the cargo line says so, and only the wheel and the release binaries (built
    /// with `vendored-openssl`) are called self-contained.
    #[test]
    fn the_readme_says_which_install_links_the_systems_openssl() {
        let readme =
            std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
                .unwrap();
        let install = readme.split("## Install").nth(1).unwrap().split("\n## ").next().unwrap();
        let out = std::process::Command::new("ldd").arg(support::BIN).output();
        let dynamic = out.is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("libssl"));
        let default_line = install
            .lines()
            .find(|l| l.starts_with("cargo install --locked --path .") && !l.contains("vendored-openssl"))
            .expect("the cargo line with the default features");
        assert_eq!(default_line.contains("links the system's libssl"), dynamic, "{default_line}");
        assert!(
            install
                .lines()
                .any(|l| l.starts_with("cargo install") && l.contains("--features vendored-openssl"))
        );
        assert!(!install.contains("each puts one self-contained binary"), "{install}");
    }

    /// The README's demo, its output captured as a reader who pipes or saves it: each step's
    /// result is under its command on stdout, `clean`'s summary line (stderr's) too, and nothing
    /// is left on stderr.
    #[test]
    fn the_demo_shows_each_commands_result_under_it() {
        let bench = Bench::bare();
        let top = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = std::process::Command::new("bash")
            .arg(top.join("scripts/demo.sh"))
            .env("STATE_STORE_DEMO_BIN", support::BIN)
            .env("STATE_STORE_DEMO_DIR", bench.dir.path().join("demo"))
            .output()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{stdout}{stderr}");
        assert_eq!(stderr, "", "stderr");
        let clean = stdout.split("$ state-store clean\u{1b}[0m\n").nth(1).expect("the clean step");
        let result = clean.split("\n\n").next().unwrap();
        assert!(result.starts_with("clean: deleted "), "under `clean`: {result:?}");
    }

    /// At a terminal (script(1)), import and export show clean's kind of bar on stderr:
    /// import per pass through the file, in bytes; export in rows written. Not over rows that
    /// go to the terminal themselves.
    #[test]
    fn import_and_export_draw_a_bar_at_a_terminal() {
        let bench = with_run(Dialect::Sqlite);
        let keys: Vec<String> = (0..20_000).map(|i| format!("k{i:05}")).collect();
        let rows: Vec<_> =
            keys.iter().map(|k| ("load", -1, k.as_str(), "1", "2026-01-01 00:00:00.000000", None)).collect();
        bench.insert_task_rows(DAG, RUN, &rows);
        let file = bench.dir.path().join("e.jsonl");
        let file = file.to_str().unwrap();
        let (code, screen) = on_terminal(&bench, &["export", "--file", file], "");
        assert_eq!(code, 0, "{screen}");
        assert!(screen.contains("export: ") && screen.contains(" rows, "), "a count at a terminal: {screen}");
        assert!(screen.contains("exported 20000 task row(s)"), "{screen}");
        let (code, screen) = on_terminal(&bench, &["import", "--dry-run", file], "");
        assert_eq!(code, 0, "{screen}");
        assert!(screen.contains("import: checking [") && screen.contains("ETA"), "{screen}");
        assert!(!screen.contains("import: writing"), "a dry run reads the file once: {screen}");
        let (code, screen) = on_terminal(&bench, &["import", file], "");
        assert_eq!(code, 0, "{screen}");
        assert!(screen.contains("import: checking [") && screen.contains("import: writing ["), "{screen}");
        assert!(screen.contains("import: restored 20000 task row(s)"), "{screen}");
        let (code, screen) = on_terminal(&bench, &["export", "--dag-id", DAG], "");
        assert_eq!(code, 0);
        assert!(!screen.contains("export: "), "no bar over the rows on the terminal");
    }

    contract! {
        /// The unmapped index of a mapped task: the advice is the flag the user forgot, not the
        /// one that writes a key no instance reads.
        fn a_mapped_task_without_map_index_is_told_to_give_one(d: Dialect) {
            let bench = with_run(d);
            bench.add_task_instance(DAG, RUN, "fan", &[0, 1]);
            let fan = ["--dag-id", DAG, "--run-id", RUN, "--task-id", "fan"];
            for (head, advice) in [
                (&["clear", "-y"][..], "give --map-index N or --all-map-indices"),
                (&["set", "k", "1"], "give --map-index N"),
                (&["delete", "k"], "give --map-index N"),
            ] {
                let run = bench.unchanged(|| bench.run(&[head, &fan[..]].concat()).fails(1, advice));
                assert!(run.stderr.contains("map indexes 0 to 1"), "{head:?}: {}", run.stderr);
                assert!(!run.stderr.contains("--allow-missing-task-instance"), "{head:?}: {}", run.stderr);
                if head[0] != "clear" {
                    assert!(!run.stderr.contains("--all-map-indices"), "{head:?}: {}", run.stderr);
                }
            }
            // A map index the task has not expanded to (yet) is written ahead with the flag.
            bench
                .run(&[&["set", "k", "1"][..], &fan, &["--map-index", "5"]].concat())
                .fails(1, "pass --allow-missing-task-instance to write the key anyway");
            bench.run(&[&["set", "k", "1"][..], &fan, &["--map-index", "1"]].concat()).success();
            bench.run(&[&["clear", "-y", "--all-map-indices"][..], &fan].concat()).success();
        }

        /// Nothing to delete: one line at the terminal, not an empty table; the documents keep
        /// their shape.
        fn a_dry_run_with_nothing_to_delete_says_so_in_one_line(d: Dialect) {
            let bench = with_run(d);
            let run = bench.run(&["clean", "--dry-run"]).success();
            assert!(!run.stdout.contains("Would delete") && !run.stdout.contains("===="), "{}", run.stdout);
            assert_eq!(run.stdout.lines().count(), 1, "{}", run.stdout);
            assert!(
                run.stdout.starts_with("Nothing to delete: no task key expired before ")
                    && run.stdout.ends_with(" and no key of an inactive asset.\n"),
                "{}",
                run.stdout
            );
            let tasks = bench.run(&["clean", "--dry-run", "--no-orphans"]).success();
            assert!(!tasks.stdout.contains("inactive asset"), "{}", tasks.stdout);
            let orphans = bench.run(&["clean", "--dry-run", "--orphans-only"]).success();
            assert_eq!(orphans.stdout, "Nothing to delete: no key of an inactive asset.\n");
            let v = bench.run(&["clean", "--dry-run", "-o", "json"]).success().json();
            assert_eq!(
                fields(&v, &["task_rows_to_delete", "asset_rows_to_delete", "expired_by_dag", "orphans_by_asset", "sample"]),
                json!([0, 0, [], [], []])
            );
            bench.run(&["clean", "--dry-run", "-o", "plain"]).success().stdout_is("0 0\n");
            let yaml = bench.run(&["clean", "--dry-run", "-o", "yaml"]).success().stdout;
            assert!(yaml.contains("\nexpired_by_dag: []\n"), "{yaml}");
        }

        /// Off a terminal, import and export print their summary line and nothing else: no bar,
        /// no control characters for a log or a pipe's reader.
        fn import_and_export_draw_no_progress_off_a_terminal(d: Dialect) {
            let bench = with_run(d);
            bench.run(&cmd(&["set", "a", "1"], &task(&[]))).success();
            bench.run(&cmd(&["set", "b", "2"], &task(&[]))).success();
            let file = bench.dir.path().join("e.jsonl");
            let export = bench.run(&["export", "--file", file.to_str().unwrap()]).success();
            assert_eq!(export.stderr, "exported 2 task row(s) and 0 asset row(s) to ".to_string() + file.to_str().unwrap() + "\n");
            let piped = bench.run(&["export"]).success();
            assert_eq!(piped.stderr, "exported 2 task row(s) and 0 asset row(s) to stdout\n");
            for args in [&["import", "--dry-run"][..], &["import"]] {
                let run = bench.run(&[args, &[file.to_str().unwrap()]].concat()).success();
                assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {}", run.stderr);
                assert!(run.stderr.starts_with("import"), "{args:?}: {}", run.stderr);
                assert!(!run.stderr.contains('\u{1b}') && !run.stderr.contains('\r'), "{args:?}: {:?}", run.stderr);
            }
        }
    }
}

/// `-v` says which database a command opened; quiet without it.
#[test]
fn verbose_names_the_database_opened_and_masks_its_password() {
    let bench = Bench::new();
    let run = bench.run(&["-v", "list"]).success();
    assert!(
        run.stderr.contains(&format!("db: sqlite:///{} opened in", bench.db.display())),
        "{}",
        run.stderr
    );
    assert!(!bench.run(&["list"]).success().stderr.contains("db:"));
    // A password is masked (the server is never reached: nothing listens on port 9).
    let run = bench.run(&["-v", "--conn", "postgresql://u:pw-Secret-9@127.0.0.1:9/x", "list"]).code(4);
    assert!(!run.stderr.contains("pw-Secret-9"), "{}", run.stderr);
}

/// The environment is read by one reader that never takes bytes that are not UTF-8 for an
/// unset variable: such a value is refused with exit 3 naming the variable, or, for a path
/// and nothing else (`AIRFLOW_HOME`), used as bytes. Each case is one that, read as unset,
/// ran the command somewhere else: on `~/airflow/airflow.db`, which `HOME` holds here with
/// expired rows that must survive, on the database instead of the API, or without a token.
mod environment_not_utf8 {
    use super::*;
    use std::ffi::{OsStr, OsString};
    use std::os::unix::ffi::{OsStrExt, OsStringExt};

    fn with_ff(text: &str) -> OsString {
        let mut bytes = text.as_bytes().to_vec();
        bytes.push(0xff);
        OsString::from_vec(bytes)
    }

    fn expired(db: &std::path::Path) -> i64 {
        rusqlite::Connection::open(db)
            .unwrap()
            .query_row("SELECT count(*) FROM task_state_store WHERE expires_at < '2026-01-01'", [], |r| {
                r.get(0)
            })
            .unwrap()
    }

    fn run(bench: &Bench, args: &[&str], env: &[(&str, &OsStr)], unset: &[&str]) -> support::Run {
        let mut cmd = bench.cmd(args);
        for name in unset {
            cmd.env_remove(name);
        }
        for (name, value) in env {
            cmd.env(name, value);
        }
        support::Run::from(cmd.output().unwrap(), args)
    }

    #[test]
    fn a_value_that_is_not_utf8_is_refused_by_name_or_used_as_a_path() {
        let bench = with_run(Dialect::Sqlite);
        seed_expiring(&bench, 20, 2);
        let db = bench.dir.path().join("airflow.db");
        // ~/airflow/airflow.db: the database a variable read as unset falls back to.
        let home = bench.dir.path().join("home");
        std::fs::create_dir_all(home.join("airflow")).unwrap();
        let fallback = home.join("airflow/airflow.db");
        std::fs::copy(&db, &fallback).unwrap();
        let before = expired(&fallback);
        assert!(before > 0);
        let home = home.as_os_str();

        // The database's URL: refused, and ~/airflow/airflow.db left alone.
        let conn = with_ff(&format!("sqlite:///{}/x", bench.dir.path().display()));
        let refused = run(
            &bench,
            &["clean"],
            &[("HOME", home), ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", &conn)],
            &["AIRFLOW_HOME"],
        )
        .fails(3, "environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_CONN is not valid UTF-8");
        assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");
        assert_eq!(expired(&fallback), before);

        // AIRFLOW_HOME is a path: its airflow.cfg is read by those bytes.
        let airflow_home = bench.dir.path().join(with_ff("airflow-home-"));
        std::fs::create_dir(&airflow_home).unwrap();
        std::fs::write(
            airflow_home.join("airflow.cfg"),
            format!("[database]\nsql_alchemy_conn = sqlite:///{}\n", db.display()),
        )
        .unwrap();
        let cleaned_before = expired(&db);
        run(
            &bench,
            &["clean"],
            &[("HOME", home), ("AIRFLOW_HOME", airflow_home.as_os_str())],
            &["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"],
        )
        .success();
        assert!(cleaned_before > 0);
        assert_eq!(expired(&db), 0, "the database AIRFLOW_HOME's airflow.cfg names is cleaned");
        assert_eq!(expired(&fallback), before, "~/airflow/airflow.db is left alone");

        // Without an airflow.cfg there, the default URL would have to hold those bytes: refused.
        let empty_home = bench.dir.path().join(with_ff("empty-home-"));
        std::fs::create_dir(&empty_home).unwrap();
        run(
            &bench,
            &["clean"],
            &[("HOME", home), ("AIRFLOW_HOME", empty_home.as_os_str())],
            &["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"],
        )
        .fails(3, "environment variable AIRFLOW_HOME is not valid UTF-8");
        assert_eq!(expired(&fallback), before);

        // A `$VARIABLE` in a value, and another option's override, are refused the same way.
        run(&bench, &["stats"], &[("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", &with_ff("3"))], &[])
            .fails(3, "environment variable AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS is not valid UTF-8");
    }

    /// The REST transport's variables: the URL (read as unset, the command ran on the
    /// database), the token (requests went without one) and the password (reported as not set).
    #[test]
    fn the_rest_transports_variables_that_are_not_utf8_are_refused_by_name() {
        let bench = with_run(Dialect::Sqlite);
        let url = with_ff("http://127.0.0.1:1/");
        run(&bench, &["stats"], &[("STATE_STORE_API_URL", &url)], &[])
            .fails(3, "environment variable STATE_STORE_API_URL is not valid UTF-8");
        let get = [
            "--api-url",
            "http://127.0.0.1:1",
            "get",
            "k",
            "--dag-id",
            "d",
            "--run-id",
            "r",
            "--task-id",
            "t",
        ];
        run(&bench, &get, &[("AIRFLOW_CLI_TOKEN", &with_ff("token"))], &[])
            .fails(3, "environment variable AIRFLOW_CLI_TOKEN is not valid UTF-8");
        let mut login = vec!["--api-username", "ann"];
        login.extend_from_slice(&get);
        let refused = run(&bench, &login, &[("STATE_STORE_API_PASSWORD", &with_ff("secret"))], &[])
            .fails(3, "environment variable STATE_STORE_API_PASSWORD is not valid UTF-8");
        assert!(!refused.stderr.contains("secret"), "{refused:?}");
        run(&bench, &get, &[("http_proxy", OsStr::from_bytes(b"http://\xff:3128"))], &[])
            .fails(3, "environment variable http_proxy is not valid UTF-8");
    }
}
