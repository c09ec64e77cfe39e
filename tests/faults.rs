//! Fault injection: what the tool does when its input, its configuration, its database or its
//! own process goes wrong, and proof that it loses nothing on the way. Each case asserts the
//! exit code, the one `error:` line that names the problem, and that the database holds what
//! it held before (for `clean`: that only whole committed batches are gone, and that a rerun
//! finishes). `docs/reliability.md` lists every case with the command that reproduces it.
//!
//! The tests in `contract!` run once per dialect, as in `tests/cli.rs` (the macro is in `support`).
//! Randomised tests draw from a seeded xorshift generator; the seed is printed in every
//! failure, and `STATE_STORE_TEST_SEED=<n>` replays it.

// The suite reads its own settings (database URLs, seeds, PATH) from the environment; the
// rule of one reader that refuses what is not UTF-8 (src/env.rs) is the tool's.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr, clippy::type_complexity)]

#[macro_use]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Bench, Dialect, Run, clean_batches, fields};

const DAG: &str = "fault_orders";
const RUN: &str = "manual__2026-11-28T00:00:00+00:00";

fn task<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--dag-id", DAG, "--run-id", RUN, "--task-id", "load"];
    args.extend_from_slice(extra);
    args
}

fn cmd<'a>(head: &[&'a str], tail: &[&'a str]) -> Vec<&'a str> {
    let mut v = head.to_vec();
    v.extend_from_slice(tail);
    v
}

/// A metastore with one dag run and its unmapped task instance `load`.
fn with_run(d: Dialect) -> Bench {
    let bench = Bench::on(d);
    bench.add_dag_run_with(DAG, RUN, &["load"]);
    bench
}

fn count(bench: &Bench, sql_from_where: &str) -> i64 {
    bench.scalar(&format!("SELECT count(*) FROM {sql_from_where}")).parse().expect("count")
}

/// The ids of the expired task rows, in order. A stopped clean has deleted the first ones of
/// them: batches walk the primary key.
fn expired_ids(bench: &Bench) -> Vec<String> {
    bench.rows(&format!("SELECT id FROM {EXPIRED} ORDER BY id"))
}

/// The name of a server bench's own database (the last segment of its URL).
fn database_name(bench: &Bench) -> String {
    bench.url().rsplit('/').next().unwrap().to_string()
}

/// Polls `done` every 20 ms until it holds, failing after `secs` seconds however loaded the
/// machine is, so a test acts on an observed state instead of a guessed sleep.
#[track_caller]
fn wait_until(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A timestamp literal the dialect takes in any expression (PostgreSQL needs the type when the
/// literal is a CASE branch).
fn ts_expr(bench: &Bench, text: &str) -> String {
    match bench.dialect {
        Dialect::Postgres => format!("TIMESTAMPTZ '{text}+00'"),
        _ => format!("'{text}'"),
    }
}

/// Seeds `n` task rows of the bench's run in one statement (a cross join of digits, which
/// every dialect reads alike): key `k1xxxxx`, expired when `i % expired_every == 0`, otherwise
/// never expiring (`i % 5 == 1`) or expiring in 2037.
fn seed_bulk(bench: &Bench, n: u32, expired_every: u32) {
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
                  UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)";
    let key = match bench.dialect {
        Dialect::Mysql => "CONCAT('k', s.i + 100000)".to_string(),
        Dialect::Postgres => "'k' || (s.i + 100000)::text".to_string(),
        Dialect::Sqlite => "'k' || (s.i + 100000)".to_string(),
    };
    bench.exec(&format!(
        "INSERT INTO task_state_store (dag_run_id, task_id, map_index, {k}, dag_id, run_id, value, updated_at, expires_at) \
         SELECT (SELECT id FROM dag_run WHERE dag_id = {dag} AND run_id = {run}), 't', -1, {key}, {dag}, {run}, '1', {updated}, \
         CASE WHEN s.i % {expired_every} = 0 THEN {expired} WHEN s.i % 5 = 1 THEN NULL ELSE {future} END \
         FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS i \
               FROM {digits} a, {digits} b, {digits} c, {digits} e, {digits} f) s WHERE s.i < {n}",
        k = bench.key_col(),
        dag = bench.lit(DAG),
        run = bench.lit(RUN),
        updated = ts_expr(bench, "2020-01-01 00:00:00.000000"),
        expired = ts_expr(bench, "2020-01-02 00:00:00.000000"),
        future = ts_expr(bench, "2037-01-01 00:00:00.000000"),
    ));
}

const EXPIRED: &str = "task_state_store WHERE expires_at < '2021-01-01'";
const ALIVE: &str = "task_state_store WHERE expires_at IS NULL OR expires_at > '2030-01-01'";

/// The one `error:` line of a failed `clean`, which also prints its summary line first.
#[track_caller]
fn clean_error_line(stderr: &str) -> String {
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "one error line: {stderr}");
    let others: Vec<&str> =
        stderr.lines().filter(|l| !l.starts_with("error: ") && !l.starts_with("clean: ")).collect();
    assert!(others.is_empty(), "only the summary and the error: {stderr}");
    errors[0].to_string()
}

/// The task rows a failed or stopped clean says it deleted, from its summary line.
#[track_caller]
fn summary_deleted(stderr: &str) -> i64 {
    let line =
        stderr.lines().find(|l| l.starts_with("clean: deleted ")).unwrap_or_else(|| panic!("{stderr}"));
    line["clean: deleted ".len()..].split(' ').next().unwrap().parse().unwrap()
}

// ---------------------------------------------------------------- a seeded generator

/// xorshift64*: small, deterministic, enough to draw test data from.
struct Rng(u64);

impl Rng {
    /// `STATE_STORE_TEST_SEED` when set (to replay a failure), else a fresh seed per run.
    fn seeded(salt: u64) -> (Rng, u64) {
        let seed =
            std::env::var("STATE_STORE_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
                let nanos =
                    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
                u64::try_from(nanos % u128::from(u64::MAX)).unwrap() ^ salt
            });
        (Rng(seed.max(1)), seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---------------------------------------------------------------- one test per dialect

contract! {
    // ------------------------------------------------------------ bad input

    /// What `tests/cli.rs` does not already refuse: bad timestamps and durations in every
    /// flag that takes one, flags that contradict each other, unknown and inactive assets,
    /// a missing dag run, for every write command.
    fn bad_input_is_refused_before_anything_is_written(d: Dialect) {
        let bench = with_run(d);
        bench.run(&cmd(&["set", "keep", "1"], &task(&[]))).success();
        let inactive = bench.add_asset("retired", "s3://retired/", false).to_string();
        bench.add_asset("orders", "s3://orders/", true);
        let cases: Vec<(Vec<&str>, i32, &str)> = vec![
            (cmd(&["set", "k", "1", "--expires-at", "2026-13-01T00:00:00Z"], &task(&[])), 2, "--expires-at"),
            (cmd(&["set", "k", "1", "--expires-at", "2026-12-31T00:00:00"], &task(&[])), 2, "no time zone"),
            (cmd(&["set", "k", "1", "--retention", "1h30"], &task(&[])), 2, "--retention"),
            (cmd(&["set", "k", "1", "--retention", "-5m"], &task(&[])), 2, "-5"),
            (cmd(&["set", "k", "1", "--map-index", "-7"], &task(&[])), 2, "-7"),
            (cmd(&["delete", "keep", "--map-index", "-2"], &task(&[])), 2, "-2"),
            (cmd(&["clear", "--yes", "--map-index", "-3"], &task(&[])), 2, "-3"),
            (cmd(&["set", "k", "1", "--retention", "1d", "--expires-at", "2030-01-01T00:00:00Z"], &task(&[])), 2, "--expires-at"),
            (cmd(&["set", "k", "1", "--asset", "orders"], &task(&[])), 2, "not both"),
            (vec!["set", "k", "1", "--asset", "orders", "--asset-uri", "s3://orders/"], 2, "only one"),
            (vec!["clear", "--yes", "--asset", "orders", "--all-map-indices"], 2, "--all-map-indices"),
            (vec!["set", "k", "1", "--asset", "orders", "--expires-at", "2030-01-01T00:00:00Z"], 2, "never expire"),
            (vec!["clean", "--before", "yesterday"], 2, "--before"),
            (vec!["clean", "--sleep", "5 minutes"], 2, "--sleep"),
            (vec!["clean", "--lock-timeout", "forever"], 2, "--lock-timeout"),
            (vec!["set", "k", "1", "--asset", "no_such_asset"], 1, "no asset found"),
            (vec!["set", "k", "1", "--asset-uri", "s3://nowhere/"], 1, "no asset found"),
            (vec!["set", "k", "1", "--asset-id", "987654"], 1, "no asset found"),
            (vec!["set", "k", "1", "--asset", "retired"], 1, "not active"),
            (vec!["set", "k", "1", "--asset-id", &inactive], 1, "inactive"),
            (vec!["clear", "--yes", "--asset", "retired"], 1, "not active"),
            (vec!["set", "k", "1", "--dag-id", DAG, "--run-id", "no_such_run", "--task-id", "load"], 1, "no dag run found"),
            (vec!["clear", "--yes", "--dag-id", "no_such_dag", "--run-id", RUN, "--task-id", "load"], 1, "no dag run found"),
            (vec!["delete", "keep", "--dag-id", DAG, "--run-id", "no_such_run", "--task-id", "load"], 1, "no dag run found"),
        ];
        for (args, code, needle) in cases {
            bench.unchanged(|| bench.run(&args).fails(code, needle));
        }
        // A value over the limit and a key over 512 characters, from stdin too.
        let big = format!("\"{}\"", "x".repeat(65_534));
        bench.unchanged(|| bench.run_with_stdin(&cmd(&["set", "big", "-"], &task(&[])), &big).fails(2, "65536 bytes"));
        bench.unchanged(|| bench.run_with_stdin(&cmd(&["set", "nan", "-"], &task(&[])), "[1, NaN]").fails(2, "NaN"));
        bench.unchanged(|| bench.run_with_stdin(&cmd(&["set", "null", "-"], &task(&[])), "null\n").fails(2, "null"));
        bench.unchanged(|| bench.run_with_stdin(&cmd(&["set", "bad", "-"], &task(&[])), "{\"a\": }").fails(2, "not JSON"));
        let long = "é".repeat(513);
        bench.unchanged(|| bench.run(&cmd(&["set", &long, "1"], &task(&[]))).fails(2, "512"));
        bench.unchanged(|| bench.run(&["set", &long, "1", "--asset", "orders"]).fails(2, "512"));
        bench.unchanged(|| bench.run(&["set", "", "1", "--asset", "orders"]).fails(2, "empty"));
    }

    // ------------------------------------------------------------ bad database

    /// SIGKILL (nothing to catch, nothing flushed) in the middle of a clean of 20,000 expired
    /// rows: what is gone is whole batches, SQLite's file passes its integrity check, and a
    /// rerun (not refused: the clean lock died with the process) finishes the job.
    fn sigkill_mid_clean_leaves_whole_batches(d: Dialect) {
        let bench = with_run(d);
        seed_bulk(&bench, 30_000, 3);
        let expired = count(&bench, EXPIRED);
        assert_eq!((expired, count(&bench, ALIVE)), (10_000, 20_000));
        let batches = clean_batches(d, &bench.expired_in_id_order(), 100, None);
        let expired_before = expired_ids(&bench);
        let mut child = bench
            .cmd(&["clean", "--batch-size", "100", "--sleep", "10ms"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_until(30, "the clean deletes a batch", || count(&bench, EXPIRED) < expired);
        assert!(Command::new("kill").args(["-KILL", &child.id().to_string()]).status().unwrap().success());
        let status = child.wait().unwrap();
        assert_eq!(status.code(), None, "killed by the signal, not finished: {status:?}");
        let lock_file = bench.dir.path().join("airflow.db.state-store-clean.lock");
        if d == Dialect::Sqlite {
            assert_eq!(bench.rows("PRAGMA integrity_check"), vec!["ok".to_string()]);
            assert_eq!(bench.rows("PRAGMA foreign_key_check"), Vec::<String>::new());
            assert!(lock_file.exists(), "a killed clean leaves its lock file, which locks nothing");
        }
        let left = count(&bench, EXPIRED);
        assert!(left > 0, "killed before the end");
        let gone = usize::try_from(expired - left).unwrap();
        assert!(batches.contains(&gone), "whole batches of 100 only: {left} left");
        assert_eq!(expired_ids(&bench), expired_before[gone..], "the first expired rows in id order");
        assert_eq!(count(&bench, ALIVE), 20_000);
        // The server ends the dead client's session (and its clean lock) on its own.
        let db = database_name(&bench);
        match d {
            Dialect::Postgres => wait_until(10, "the session ends", || {
                bench.scalar(&format!(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' AND application_name = 'state-store'"
                )) == "0"
            }),
            Dialect::Mysql => wait_until(10, "the session ends", || {
                bench.scalar(&format!(
                    "SELECT count(*) FROM information_schema.processlist WHERE db = '{db}' AND id <> CONNECTION_ID()"
                )) == "0"
            }),
            Dialect::Sqlite => {}
        }
        let run = bench.run(&["clean", "-o", "json"]).success();
        assert_eq!(run.json()["task_rows_deleted"], left);
        assert_eq!((count(&bench, EXPIRED), count(&bench, ALIVE)), (0, 20_000));
        assert!(!lock_file.exists(), "the rerun took the lock file over and removed it");
    }

    // ------------------------------------------------------------ hostile input

    /// Quotes, `;`, `--`, LIKE's `%` and `_`, backslashes, newlines and non-ASCII in keys, dag,
    /// run and task ids and asset names and uris are stored and matched literally by every
    /// command and every filter: `%` and `_` never act as wildcards.
    fn hostile_text_is_matched_literally_in_every_filter(d: Dialect) {
        let bench = Bench::on(d);
        // MySQL's columns compare without trailing spaces (documented), so none end in one.
        let dags = ["a%", "a_", "ab", "a\\", "a\\%", "a'; DELETE FROM dag_run; --", "a\"b", "ä\nb"];
        let tasks = ["t%", "t_", "tx", "t'--"];
        for (i, dag) in dags.iter().enumerate() {
            let run = format!("r{}%_\\'", i);
            bench.add_dag_run_with(dag, &run, &tasks);
            for task in tasks {
                for key in ["k%", "k_", "kx", "k\\", "k'); DROP TABLE task_state_store; --", "ключ/\n"] {
                    let value = format!("\"{}\"", key.replace('\\', "\\\\").replace('\n', "\\n"));
                    bench.run(&["set", key, &value, "--dag-id", dag, "--run-id", &run, "--task-id", task]).success();
                }
            }
        }
        assert_eq!(count(&bench, "task_state_store"), 8 * 4 * 6);
        for (i, dag) in dags.iter().enumerate() {
            let run = format!("r{}%_\\'", i);
            let v = bench.run(&["list", "--dag-id", dag, "--limit", "0", "-o", "json"]).success().json();
            let entries = v.as_array().unwrap();
            assert_eq!(entries.len(), 24, "dag {dag:?}");
            assert!(entries.iter().all(|e| e["dag_id"] == *dag), "dag {dag:?}");
            let v = bench.run(&["list", "--run-id", &run, "--limit", "0", "-o", "json"]).success().json();
            assert_eq!(v.as_array().unwrap().len(), 24, "run {run:?}");
            for task in tasks {
                let scope = ["--dag-id", dag, "--run-id", &run, "--task-id", task];
                let run_list = bench.run(&cmd(&["list", "-o", "json"], &scope)).success();
                let mut keys: Vec<String> =
                    run_list.json().as_array().unwrap().iter().map(|e| e["key"].as_str().unwrap().to_string()).collect();
                keys.sort();
                assert_eq!(keys, ["k%", "k'); DROP TABLE task_state_store; --", "k\\", "k_", "kx", "ключ/\n"], "{scope:?}");
                bench.run(&cmd(&["get", "k_", "-o", "plain"], &scope)).success().stdout_is("k_\n");
                bench.run(&cmd(&["get", "k?", "-o", "plain"], &scope)).fails(1, "not found");
                bench.run(&cmd(&["get", "k\n", "-o", "plain"], &scope)).fails(1, "not found");
            }
            let v = bench.run(&["list", "--dag-id", dag, "--task-id", "t_", "-o", "json"]).success().json();
            let entries = v.as_array().unwrap();
            assert!(!entries.is_empty() && entries.iter().all(|e| e["task_id"] == "t_"), "dag {dag:?}");
            let exported = bench.run(&["export", "--dag-id", dag, "--task-id", "t%"]).success();
            assert_eq!(exported.stdout.lines().count(), 6, "export --dag-id {dag:?} --task-id t%");
        }
        for filter in ["%", "_", "a", "a%%", "a__", "a\\\\", "t", "t%%", "r%"] {
            bench.run(&["list", "--dag-id", filter, "-o", "json"]).success().stdout_is("[]\n");
            bench.run(&["list", "--task-id", filter, "-o", "json"]).success().stdout_is("[]\n");
            bench.run(&["list", "--run-id", filter, "-o", "json"]).success().stdout_is("[]\n");
        }
        // Deleting and clearing a hostile scope touch that scope only.
        let scope = ["--dag-id", "a%", "--run-id", "r0%_\\'", "--task-id", "t_"];
        bench.run(&cmd(&["delete", "k%", "-o", "plain"], &scope)).success().stdout_is("1\n");
        bench.run(&cmd(&["clear", "--yes", "-o", "plain"], &scope)).success().stdout_is("5\n");
        assert_eq!(count(&bench, "task_state_store"), 8 * 4 * 6 - 6);
        assert_eq!(count(&bench, "dag_run"), 8);

        // Assets: names and uris with the same characters (latin1 on MySQL: no Cyrillic there).
        let names = ["as%", "as_", "asx", "a's\"; --", "a\\s", "é\ts"];
        for (i, name) in names.iter().enumerate() {
            bench.add_asset(name, &format!("s3://b/{i}%_'\\\"/"), true);
        }
        for (i, name) in names.iter().enumerate() {
            let value = format!("{i}");
            bench.run(&["set", "k%_", &value, "--asset", name]).success();
            let uri = format!("s3://b/{i}%_'\\\"/");
            bench.run(&["get", "k%_", "--asset-uri", &uri, "-o", "plain"]).success().stdout_is(&format!("{i}\n"));
            bench.run(&["get", "k%", "--asset", name]).fails(1, "not found");
            let v = bench.run(&["list", "--asset", name, "-o", "json"]).success().json();
            let rows: Vec<Value> = v.as_array().unwrap().iter().map(|e| fields(e, &["asset_name", "key", "value"])).collect();
            assert_eq!(rows, [json!([name, "k%_", i])]);
        }
        for name in ["as", "a%", "%", "_", "as%%", "a\\\\s"] {
            bench.run(&["get", "k%_", "--asset", name]).fails(1, "no asset found");
        }
        bench.run(&["clear", "--yes", "--asset", "as_", "-o", "plain"]).success().stdout_is("1\n");
        assert_eq!(count(&bench, "asset_state_store"), 5);
        let v = bench.run(&["list", "--assets", "-o", "json"]).success().json();
        let mut left: Vec<&str> = names.iter().copied().filter(|n| *n != "as_").collect();
        left.sort_unstable();
        let mut listed: Vec<&str> = v.as_array().unwrap().iter().map(|e| e["asset_name"].as_str().unwrap()).collect();
        listed.sort_unstable();
        assert_eq!(listed, left);
    }

    // ------------------------------------------------------------ property: batch deletion

    /// Generated tables (a random mix of expired, never-expiring and future rows under random
    /// ids with gaps) cleaned with batch sizes 0, 1, E-1, E, E+1 and a random one, where E is
    /// the number of expired rows: exactly the expired rows are gone, in ceil(E/size) batches.
    fn generated_tables_lose_exactly_their_expired_rows(d: Dialect) {
        let (mut rng, seed) = Rng::seeded(0xC1EA);
        let bench = with_run(d);
        let dag_run_id = bench.scalar("SELECT id FROM dag_run");
        let k = bench.key_col();
        for table in 0..4 {
            let n = match table { 0 => 0, 1 => 1 + rng.below(3), _ => 5 + rng.below(60) };
            let mut id = 1 + rng.below(1000);
            let mut rows = Vec::new();
            for _ in 0..n {
                id += 1 + if rng.below(4) == 0 { rng.below(5000) } else { 0 };
                let expires = match rng.below(5) {
                    0 | 1 => Some(format!(
                        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}",
                        1971 + rng.below(55), 1 + rng.below(12), 1 + rng.below(28),
                        rng.below(24), rng.below(60), rng.below(60), rng.below(1_000_000)
                    )),
                    2 => None,
                    _ => Some(format!("{}-06-01 00:00:00.{:06}", 2030 + rng.below(7), rng.below(1_000_000))),
                };
                rows.push((id, expires));
            }
            let expired = rows.iter().filter(|(_, e)| e.as_deref().is_some_and(|e| e < "2026")).count() as u64;
            let survivors: Vec<String> =
                rows.iter().filter(|(_, e)| e.as_deref().is_none_or(|e| e >= "2026")).map(|(id, _)| id.to_string()).collect();
            let mut sizes = vec![0, 1, expired.saturating_sub(1), expired, expired + 1, 1 + rng.below(70)];
            sizes.sort_unstable();
            sizes.dedup();
            for size in sizes {
                let context = format!("seed {seed} (STATE_STORE_TEST_SEED={seed}), table {table}, {n} rows, {expired} expired, batch size {size}, {d:?}");
                bench.exec("DELETE FROM task_state_store");
                if !rows.is_empty() {
                    let values: Vec<String> = rows
                        .iter()
                        .map(|(id, e)| {
                            format!(
                                "({id}, {dag_run_id}, 't', -1, 'k{id}', {}, {}, '1', {}, {})",
                                bench.lit(DAG), bench.lit(RUN),
                                bench.ts_lit(Some("2020-01-01 00:00:00.000000")), bench.ts_lit(e.as_deref())
                            )
                        })
                        .collect();
                    bench.exec(&format!(
                        "INSERT INTO task_state_store (id, dag_run_id, task_id, map_index, {k}, dag_id, run_id, value, updated_at, expires_at) VALUES {}",
                        values.join(", ")
                    ));
                }
                let model = clean_batches(d, &bench.expired_in_id_order(), usize::try_from(size).unwrap(), None);
                let run = bench.run(&["clean", "--batch-size", &size.to_string(), "--no-orphans", "-o", "json"]);
                assert_eq!(run.code, 0, "{context}: {}", run.stderr);
                let v = run.json();
                let batches = model.len();
                if d != Dialect::Postgres {
                    assert_eq!(batches as u64, match size { 0 => u64::from(expired > 0), s => expired.div_ceil(s) });
                }
                assert_eq!(fields(&v, &["task_rows_deleted", "batches"]), json!([expired, batches]), "{context}");
                assert_eq!(bench.rows("SELECT id FROM task_state_store ORDER BY id"), survivors, "{context}");
            }
        }
    }

    // ------------------------------------------------------------ security

}

// ---------------------------------------------------------------- SQLite files

/// A writer holding the rows a command needs, past the wait the tool allows: `set` and
/// `delete` give up with exit 4 and one line, and change nothing. (`clean` behind a held
/// row: `tests/cli.rs` `clean_never_waits_long_behind_another_writer`.)
/// PostgreSQL and MySQL wait for a row lock as the server allows, as Airflow's own sessions
/// do (see docs/reliability.md).
#[test]
fn sqlite_write_behind_a_held_lock_fails_in_bounded_time() {
    let bench = with_run(Dialect::Sqlite);
    bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
    let holder = bench.hold("UPDATE task_state_store SET value = '2'");
    let started = Instant::now();
    let run = bench.run(&cmd(&["set", "k", "3"], &task(&[]))).fails(4, "database is locked");
    assert!(started.elapsed() < Duration::from_secs(15), "{run:?}");
    bench.run(&cmd(&["delete", "k"], &task(&[]))).fails(4, "database is locked");
    drop(holder);
    bench.run(&cmd(&["get", "k", "-o", "plain"], &task(&[]))).success().stdout_is("1\n");
}

/// Whether this process runs as root, for whom file modes do not apply.
fn running_as_root() -> bool {
    let out = Command::new("id").arg("-u").output().expect("id(1)");
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

/// A small file system of its own (tmpfs, mounted as root), unmounted when dropped.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(dir: std::path::PathBuf, bytes: u64) -> Option<SmallDisk> {
        std::fs::create_dir_all(&dir).unwrap();
        let size = format!("size={bytes}");
        let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", &size, "tmpfs"]).arg(&dir).status();
        mounted.is_ok_and(|s| s.success()).then_some(SmallDisk(dir))
    }

    fn free(&self) -> u64 {
        let out = Command::new("df").args(["-B1", "--output=avail"]).arg(&self.0).output().unwrap();
        String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap().trim().parse().unwrap()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The default clean (`--batch-size auto`) on a SQLite database with 4 MiB free beside it, in
/// WAL mode and with a rollback journal: its batches grow while nobody else writes (up to
/// 100,000 rows), and each batch's pages go to the `-wal` file or the journal before its
/// commit. The batch is bounded by the free space too, so the run deletes every expired row
/// and ends 0, where a batch that outgrew the space failed with exit 4 part-way.
#[test]
fn sqlite_auto_batches_fit_in_the_free_space_beside_the_database() {
    if !running_as_root() {
        println!("skipped: mounting a small tmpfs needs root");
        return;
    }
    for mode in ["wal", "delete"] {
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 100_000, 2);
        let source = bench.dir.path().join("airflow.db");
        let size = std::fs::metadata(&source).unwrap().len();
        let Some(disk) = SmallDisk::mount(bench.dir.path().join("small"), size + (4 << 20)) else {
            println!("skipped: mount -t tmpfs is not allowed here");
            return;
        };
        let db = disk.0.join("airflow.db");
        std::fs::copy(&source, &db).unwrap();
        let conn = rusqlite::Connection::open(&db).unwrap();
        let _: String = conn.query_row(&format!("PRAGMA journal_mode = {mode}"), [], |r| r.get(0)).unwrap();
        let expired = |conn: &rusqlite::Connection| -> i64 {
            conn.query_row(&format!("SELECT count(*) FROM {EXPIRED}"), [], |r| r.get(0)).unwrap()
        };
        assert_eq!(expired(&conn), 50_000);
        let free = disk.free();
        assert!(free < 5 << 20, "{free} bytes free");
        let url = format!("sqlite:///{}", db.display());
        let run = bench.run(&["--conn", &url, "clean", "-v"]);
        let what = format!("{mode}, {free} bytes free: {run:?}");
        assert_eq!(run.code, 0, "{what}");
        assert_eq!(expired(&conn), 0, "{what}");
        drop(conn);
    }
}

/// Runs a command of the bench so that file permissions apply to it: as root, without the
/// capabilities that bypass them (util-linux `setpriv`), otherwise as it is.
fn run_without_override(bench: &Bench, args: &[&str]) -> Run {
    let plain = bench.cmd(args);
    let mut c = if running_as_root() {
        let mut c = Command::new("setpriv");
        c.args(["--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]);
        c.arg(plain.get_program()).args(plain.get_args());
        for (key, value) in plain.get_envs() {
            match value {
                Some(value) => c.env(key, value),
                None => c.env_remove(key),
            };
        }
        c
    } else {
        plain
    };
    let out =
        c.stdin(Stdio::null()).output().expect("setpriv (util-linux) is required when tests run as root");
    Run {
        args: args.iter().map(|s| s.to_string()).collect(),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Gives `path` (a symlink itself, not its target) to `owner`.
fn chown(owner: &str, path: &std::path::Path) {
    assert!(Command::new("chown").args(["-h", owner]).arg(path).status().unwrap().success());
}

fn file_bytes(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// A read-only database file: every write command fails at once with exit 4 and a line that
/// says the file is read-only (before a clean starts, so no summary of nothing), the file is
/// byte for byte unchanged, and reading commands still work.
#[test]
fn sqlite_read_only_file() {
    let bench = with_run(Dialect::Sqlite);
    bench.run(&cmd(&["set", "k", "\"v\""], &task(&[]))).success();
    seed_bulk(&bench, 10, 2);
    // A checkpointed file with no -wal beside it, as after Airflow stops.
    bench.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    set_mode(&bench.db, 0o444);
    let before = file_bytes(&bench.db);
    for args in [
        cmd(&["set", "k", "1"], &task(&[])),
        cmd(&["delete", "k"], &task(&[])),
        cmd(&["clear", "--yes"], &task(&[])),
        vec!["clean"],
        vec!["import", "/dev/null"],
    ] {
        let run = run_without_override(&bench, &args).fails(4, "read-only");
        assert!(run.stderr.contains(&bench.db.display().to_string()), "{}", run.stderr);
    }
    run_without_override(&bench, &cmd(&["get", "k", "-o", "plain"], &task(&[]))).success().stdout_is("v\n");
    let listed = run_without_override(&bench, &["list", "-o", "plain"]).success();
    assert_eq!(listed.stdout.lines().count(), 11);
    run_without_override(&bench, &["clean", "--dry-run", "-o", "plain"]).success().stdout_is("5 0\n");
    run_without_override(&bench, &["stats", "-o", "json"]).success();
    set_mode(&bench.db, 0o644);
    assert!(before == file_bytes(&bench.db), "the file changed");
}

/// A read-only directory: SQLite cannot create the -wal and -shm files a WAL database needs,
/// even to read it, so every command fails with exit 4 and a line that says what to check;
/// the file is unchanged and nothing is created beside it.
#[test]
fn sqlite_read_only_directory() {
    let bench = with_run(Dialect::Sqlite);
    bench.run(&cmd(&["set", "k", "\"v\""], &task(&[]))).success();
    let dir = bench.dir.path().join("ro");
    std::fs::create_dir(&dir).unwrap();
    let db = dir.join("airflow.db");
    std::fs::rename(&bench.db, &db).unwrap();
    let url = format!("sqlite:///{}", db.display());
    let before = file_bytes(&db);
    set_mode(&dir, 0o555);
    for args in [
        cmd(&["set", "k", "1", "--conn", &url], &task(&[])),
        vec!["clean", "--conn", &url],
        cmd(&["get", "k", "--conn", &url], &task(&[])),
        vec!["list", "--conn", &url],
    ] {
        let run = run_without_override(&bench, &args)
            .fails(4, "write access to the database file and to its directory");
        assert!(run.stderr.contains(&db.display().to_string()), "{}", run.stderr);
    }
    set_mode(&dir, 0o755);
    assert!(before == file_bytes(&db), "the file changed");
    let mut beside: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    beside.sort();
    assert_eq!(beside, vec!["airflow.db".to_string()]);
}

/// Missing file, a file that is not a database, missing tables, pre-release and 3.4 schemas:
/// `tests/cli.rs` has them (`sqlite_file_problems_have_their_own_exit_codes`,
/// `sqlite_pre_release_table_names_are_recognised_and_refused`, `a_newer_airflow_schema_is_refused`).
/// Here, the same refusals leave the file unchanged, and a directory or an empty file given as
/// the database.
#[test]
fn sqlite_files_that_are_not_metastores_are_left_alone() {
    let bench = Bench::bare();
    std::fs::create_dir(&bench.db).unwrap();
    bench.run(&["list"]).fails(4, "it is a directory");
    std::fs::remove_dir(&bench.db).unwrap();
    std::fs::write(&bench.db, "").unwrap();
    bench.run(&["clean"]).fails(5, "no task_state_store");
    assert_eq!(std::fs::read(&bench.db).unwrap(), Vec::<u8>::new(), "an empty file stays empty");
    let junk: Vec<u8> = (0..4096u32).map(|i| u8::try_from(i * 7 % 251).unwrap()).collect();
    std::fs::write(&bench.db, &junk).unwrap();
    for args in [vec!["clean"], cmd(&["set", "k", "1"], &task(&[]))] {
        bench.run(&args).fails(4, "not a database");
    }
    assert!(std::fs::read(&bench.db).unwrap() == junk);
    // A pre-release schema with rows in it: refused, rows untouched.
    std::fs::remove_file(&bench.db).unwrap();
    let conn = rusqlite::Connection::open(&bench.db).unwrap();
    conn.execute_batch(
        "CREATE TABLE task_state (id INTEGER PRIMARY KEY, expires_at TEXT); \
         INSERT INTO task_state (expires_at) VALUES ('2020-01-01 00:00:00.000000')",
    )
    .unwrap();
    drop(conn);
    bench.run(&["clean"]).fails(5, "pre-release");
    assert_eq!(bench.scalar("SELECT count(*) FROM task_state"), "1");
}

// ---------------------------------------------------------------- configuration

/// Configuration faults `tests/cli.rs` does not already cover (it has a bad INI line, an
/// unknown boolean, a non-numeric batch size, a failing environment `_cmd`, an unknown scheme
/// and an environment `_secret`): each is exit 3 with one line naming the option or file,
/// before the database is opened.
#[test]
fn configuration_faults_fail_before_the_database_is_opened() {
    let bench = with_run(Dialect::Sqlite);
    bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
    let check = |bench: &Bench, args: &[&str], needle: &str| {
        bench.unchanged(|| bench.run(args).fails(3, needle));
    };
    // An unreadable file (permissions) and a directory given as the file.
    let cfg = bench.write_config("locked.cfg", "[state_store]\nstate_cleanup_batch_size = 5\n");
    set_mode(&cfg, 0o000);
    let run =
        run_without_override(&bench, &["clean", "--config", cfg.to_str().unwrap()]).fails(3, "locked.cfg");
    assert!(run.stderr.to_lowercase().contains("permission denied"), "{}", run.stderr);
    set_mode(&cfg, 0o644);
    check(&bench, &["clean", "--config", bench.dir.path().to_str().unwrap()], "directory");
    // A _cmd in the file that prints nothing.
    let empty = bench.write_config("cmd.cfg", "[database]\nsql_alchemy_conn_cmd = true\n");
    let mut c = bench.cmd(&["list", "--config", empty.to_str().unwrap()]);
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN");
    let out = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!((out.status.code(), stderr.lines().count()), (Some(3), 1), "{stderr}");
    assert!(
        stderr.contains("printed nothing") && stderr.contains("sql_alchemy_conn from command in"),
        "{stderr}"
    );

    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (vec![("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD", "printf ''")], "printed nothing"),
        (vec![("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD", "/nonexistent/vault-read conn")], "cannot run"),
        (
            vec![(
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD",
                "sh -c 'echo cannot fetch postgresql://airflow:Zk8Hidden@db/airflow >&2; exit 2'",
            )],
            "cannot fetch postgresql://airflow:***@db/airflow",
        ),
        (vec![("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "mssql+pyodbc://u:p@h/db")], "mssql"),
        (vec![("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "sqlite:relative.db")], "sql_alchemy_conn"),
        (vec![("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE", "2.5")], "state_cleanup_batch_size"),
        (vec![("AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE", "-5")], "state_cleanup_batch_size"),
        (vec![("AIRFLOW__STATE_STORE__CLEAR_ON_SUCCESS", "yes please")], "clear_on_success"),
        (vec![("AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES", "64k")], "max_value_storage_bytes"),
        (vec![("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", "7d")], "default_retention_days"),
    ];
    for (env, needle) in cases {
        let mut c = bench.cmd(&["clean"]);
        for (key, value) in &env {
            if key.ends_with("_CMD") {
                c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN");
            }
            c.env(key, value);
        }
        let before = bench.snapshot();
        let out = c.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!((out.status.code(), stderr.lines().count()), (Some(3), 1), "{env:?}: {stderr}");
        assert!(stderr.starts_with("error: ") && stderr.contains(needle), "{env:?}: {stderr}");
        assert!(!stderr.contains("Zk8Hidden"), "{stderr}");
        assert_eq!(before, bench.snapshot());
    }
    // In the file: a _secret option, a _cmd that fails, an interpolation that goes nowhere.
    for (text, needle) in [
        ("[database]\nsql_alchemy_conn_secret = airflow/conn\n", "secrets backend"),
        ("[database]\nsql_alchemy_conn_cmd = false\n", "exited with status 1"),
        ("[state_store]\nstate_cleanup_batch_size = %(nowhere)s\n", "state_cleanup_batch_size"),
        ("[state_store]\nstate_cleanup_batch_size = 10\n  20\n", "state_cleanup_batch_size"),
    ] {
        let cfg = bench.write_config("faulty.cfg", text);
        let mut c = bench.cmd(&["clean", "--config", cfg.to_str().unwrap()]);
        c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN");
        let out = c.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!((out.status.code(), stderr.lines().count()), (Some(3), 1), "{text:?}: {stderr}");
        assert!(stderr.contains(needle), "{text:?}: {stderr}");
    }
}

/// A `_cmd` option in a config file that another user could have written never runs: as root,
/// with `AIRFLOW_HOME` a directory that `nobody` owns and an `airflow.cfg` that `nobody` owns,
/// whose `sql_alchemy_conn_cmd` would create a marker file, `list` and `config show` end with
/// exit 3 and one line naming the option, the file and its owner, and the marker is never
/// created. `STATE_STORE_TRUSTED_CONFIG_OWNERS=nobody` (or its uid) lets it run; a name that
/// is no account is exit 3 naming it. A file root owns that group or others can write, or one
/// in a directory that `nobody` owns or that others can write (without the sticky bit), is
/// refused too; a sticky directory is not. Plain values of nobody's file are still read, with
/// one warning that names the file and its owner.
#[test]
fn a_cmd_in_a_config_file_another_user_could_write_never_runs() {
    if !running_as_root() {
        eprintln!("skipped: needs root, to own a config file as another user");
        return;
    }
    let bench = with_run(Dialect::Sqlite);
    bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
    let nobody_uid = {
        let out = Command::new("id").args(["-u", "nobody"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let home = bench.dir.path().join("nobody-home");
    std::fs::create_dir(&home).unwrap();
    let cfg = home.join("airflow.cfg");
    let marker = bench.dir.path().join("ran-the-command");
    let with_cmd = format!(
        "[database]\nsql_alchemy_conn_cmd = sh -c \"id > {}; echo {}\"\n",
        marker.display(),
        bench.url().replace('%', "%%")
    );
    std::fs::write(&cfg, &with_cmd).unwrap();
    chown("nobody", &home);
    chown("nobody", &cfg);
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut c = bench.cmd(args);
        c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN").env("AIRFLOW_HOME", &home);
        for (key, value) in env {
            c.env(key, value);
        }
        Run::from(c.output().unwrap(), args)
    };
    let list = cmd(&["list"], &task(&[]));
    let show: &[&str] = &["config", "show"];
    let refused = |args: &[&str], env: &[(&str, &str)], needles: &[&str]| {
        let r = bench.unchanged(|| run(args, env)).code(3);
        assert_eq!(r.stderr.lines().count(), 1, "{r:?}");
        assert!(r.stderr.starts_with("error: "), "{r:?}");
        for needle in needles {
            assert!(r.stderr.contains(needle), "{needle:?} in {r:?}");
        }
        assert!(!marker.exists(), "the command ran: {r:?}");
        r
    };
    let file = cfg.display().to_string();
    let owner = format!("uid {nobody_uid} (nobody)");
    for args in [&list[..], show] {
        refused(
            args,
            &[],
            &["sql_alchemy_conn_cmd", &file, &owner, "STATE_STORE_TRUSTED_CONFIG_OWNERS=nobody"],
        );
    }
    refused(&list, &[("STATE_STORE_TRUSTED_CONFIG_OWNERS", "no-such-user-here")], &["no-such-user-here"]);
    // Trusted by name or by uid, the command runs, and nothing is warned of.
    for trusted in ["nobody", nobody_uid.as_str(), "root, nobody"] {
        let r = run(&list, &[("STATE_STORE_TRUSTED_CONFIG_OWNERS", trusted)]).success();
        assert!(r.stdout.contains('k') && r.stderr.is_empty(), "{trusted}: {r:?}");
        assert!(marker.exists(), "{trusted}: the command did not run");
        std::fs::remove_file(&marker).unwrap();
    }
    // A file root owns in nobody's directory.
    chown("root", &cfg);
    refused(&list, &[], &[&file, "uid 0 (root)", &owner]);
    // A file root owns that group or others can write, in a directory root owns.
    chown("root", &home);
    for mode in [0o664, 0o646] {
        set_mode(&cfg, mode);
        refused(&list, &[], &[&file, "uid 0 (root)", "can write"]);
        refused(&list, &[("STATE_STORE_TRUSTED_CONFIG_OWNERS", "nobody")], &[&file, "can write"]);
    }
    set_mode(&cfg, 0o644);
    // A directory others can write: refused, unless it is sticky (as /tmp is).
    set_mode(&home, 0o777);
    refused(&list, &[], &[&file, "can write"]);
    set_mode(&home, 0o1777);
    run(&list, &[]).success();
    assert!(marker.exists(), "the command did not run in a sticky directory");
    std::fs::remove_file(&marker).unwrap();
    set_mode(&home, 0o755);
    run(&list, &[]).success();
    std::fs::remove_file(&marker).unwrap();
    // Plain values of nobody's file are read, with one warning naming the file and its owner.
    std::fs::write(
        &cfg,
        format!(
            "[database]\nsql_alchemy_conn = {}\n[state_store]\ndefault_retention_days = 9\n",
            bench.url().replace('%', "%%")
        ),
    )
    .unwrap();
    chown("nobody", &cfg);
    let r = run(&list, &[]).success();
    assert!(r.stdout.contains('k'), "{r:?}");
    let warnings: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(warnings.len(), 1, "{r:?}");
    assert!(warnings[0].starts_with("warning: ") && warnings[0].contains(&file), "{r:?}");
    assert!(warnings[0].contains(&owner), "{r:?}");
    let r = run(show, &[]).success();
    assert!(r.stdout.contains("default_retention_days") && r.stdout.contains('9'), "{r:?}");
    assert_eq!(r.stderr.lines().filter(|l| l.starts_with("warning: ")).count(), 1, "{r:?}");
    let r = run(&list, &[("STATE_STORE_TRUSTED_CONFIG_OWNERS", "nobody")]).success();
    assert!(r.stderr.is_empty(), "{r:?}");
}

/// A config file root owns, reached through a symlink `nobody` made in a directory of
/// nobody's: whoever can write that directory chose where the path leads, so the file's
/// `_cmd` never runs (exit 3, naming the directory's owner), while its plain values are read,
/// with one warning, as from any file another user could have chosen.
#[test]
fn a_config_reached_through_another_users_symlink_is_read_and_runs_no_command() {
    if !running_as_root() {
        eprintln!("skipped: needs root, to own a symlink as another user");
        return;
    }
    let bench = with_run(Dialect::Sqlite);
    bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
    let real = bench.dir.path().join("real-home");
    std::fs::create_dir(&real).unwrap();
    let theirs = bench.dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    let link = theirs.join("home");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    chown("nobody", &theirs);
    chown("nobody", &link);
    let marker = bench.dir.path().join("ran-the-command");
    let url = bench.url().replace('%', "%%");
    let cfg = real.join("airflow.cfg");
    std::fs::write(
        &cfg,
        format!("[database]\nsql_alchemy_conn_cmd = sh -c \"touch {}; echo {url}\"\n", marker.display()),
    )
    .unwrap();
    let list = cmd(&["list"], &task(&[]));
    let run = || {
        let mut c = bench.cmd(&list);
        c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN").env("AIRFLOW_HOME", &link);
        Run::from(c.output().unwrap(), &list)
    };
    let r = run().fails(3, "sql_alchemy_conn_cmd");
    assert!(r.stderr.contains("(nobody)"), "{r:?}");
    assert!(!marker.exists(), "the command ran: {r:?}");
    std::fs::write(&cfg, format!("[database]\nsql_alchemy_conn = {url}\n")).unwrap();
    let r = run().success();
    assert!(r.stdout.contains('k'), "{r:?}");
    assert_eq!(r.stderr.lines().filter(|l| l.starts_with("warning: ")).count(), 1, "{r:?}");
}

/// `[database] sql_alchemy_schema` is the one identifier the session takes from the configuration,
/// as the bound value of `search_path`. Text built to break out of its quoting is taken as a
/// (missing) schema name and runs nothing; a name with a control character is refused as a
/// configuration error before connecting.
#[cfg(feature = "postgres")]
#[test]
fn postgres_hostile_schema_names() {
    let mut bench = with_run(Dialect::Postgres);
    bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
    for name in [
        "public\"; DROP TABLE task_state_store; --",
        "public'; DROP TABLE task_state_store; --",
        "public\"\"; DELETE FROM dag_run; --",
        "x\\\"; SELECT pg_sleep(30); --",
    ] {
        bench.env("AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA", name);
        bench.unchanged(|| bench.run(&["clean"]).fails(5, "does not exist"));
        bench.unchanged(|| bench.run(&cmd(&["set", "k", "2"], &task(&[]))).fails(5, "does not exist"));
    }
    for (name, needle) in
        [("public\n; DROP TABLE task_state_store", "control character"), ("pub\tlic", "control character")]
    {
        bench.env("AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA", name);
        bench.unchanged(|| bench.run(&["list"]).fails(3, needle));
    }
    // From airflow.cfg, an indented line continues the value: the newline is refused too.
    bench.env("AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA", "public");
    let cfg =
        bench.write_config("schema.cfg", "[database]\nsql_alchemy_schema = public\n  DROP TABLE dag_run\n");
    let mut c = bench.cmd(&["list", "--config", cfg.to_str().unwrap()]);
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA");
    let out = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("sql_alchemy_schema") && stderr.contains("control character"), "{stderr}");
    assert_eq!(count(&bench, "task_state_store"), 1);
    assert_eq!(count(&bench, "dag_run"), 1);
}

// ---------------------------------------------------------------- servers only

/// A clean whose database connection dies between batches (the server ends the session):
/// exit 4 with one error line, the summary counts exactly the rows that are gone, those are
/// whole batches, and a rerun is not refused and finishes. SQLite has no session to end;
/// its counterpart is `sigkill_mid_clean_leaves_whole_batches`.
fn connection_dropped_mid_clean(d: Dialect) {
    let bench = with_run(d);
    seed_bulk(&bench, 4000, 2);
    assert_eq!(count(&bench, EXPIRED), 2000);
    let batches = clean_batches(d, &bench.expired_in_id_order(), 20, None);
    let expired_before = expired_ids(&bench);
    let child = bench
        .cmd(&["clean", "--batch-size", "20", "--sleep", "20ms", "-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(30, "the clean deletes a batch", || count(&bench, EXPIRED) < 2000);
    let db = database_name(&bench);
    match d {
        Dialect::Postgres => {
            let killed = bench.scalar(&format!(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = '{db}' AND application_name = 'state-store' AND pid <> pg_backend_pid()"
            ));
            assert_eq!(killed, "1", "the clean's session");
        }
        _ => {
            let ids = bench.rows(&format!(
                "SELECT id FROM information_schema.processlist WHERE db = '{db}' AND id <> CONNECTION_ID()"
            ));
            assert_eq!(ids.len(), 1, "the clean's session: {ids:?}");
            bench.exec(&format!("KILL {}", ids[0]));
        }
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    let error = clean_error_line(&stderr);
    assert!(error.contains("cannot") && error.contains(&db), "names what failed and where: {error}");
    // One JSON document: the summary so far, as on stderr, and the error line's message.
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(stdout.lines().count(), 1, "one JSON document for a failed run: {stdout}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        fields(&v, &["task_rows_deleted", "error"]),
        json!([summary_deleted(&stderr), {"message": &error["error: ".len()..], "exit_code": 4}])
    );
    let gone = 2000 - count(&bench, EXPIRED);
    assert!(gone > 0 && gone < 2000, "stopped mid-run: {gone}");
    // The summary counts what is gone; when the session died inside a DELETE, that batch
    // may have been committed before the server let go, and the summary says so.
    let reported = summary_deleted(&stderr);
    let in_doubt =
        stderr.contains("the batch that failed (up to 20 row(s)) is deleted too if the server committed it");
    let gone_rows = usize::try_from(gone).unwrap();
    let reported_rows = usize::try_from(reported).unwrap();
    let next_batch = batches.iter().find(|&&total| total > reported_rows);
    assert!(gone == reported || (in_doubt && next_batch == Some(&gone_rows)), "{gone} gone: {stderr}");
    assert!(batches.contains(&gone_rows), "whole batches of 20 only: {gone} gone");
    assert_eq!(expired_ids(&bench), expired_before[gone_rows..], "the first expired rows in id order");
    assert_eq!(count(&bench, ALIVE), 2000, "no unexpired row touched");
    let run = bench.run(&["clean", "-o", "json"]).success();
    assert_eq!(run.json()["task_rows_deleted"], 2000 - gone);
    assert_eq!((count(&bench, EXPIRED), count(&bench, ALIVE)), (0, 2000));
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_connection_dropped_mid_clean() {
    connection_dropped_mid_clean(Dialect::Postgres);
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_connection_dropped_mid_clean() {
    connection_dropped_mid_clean(Dialect::Mysql);
}

/// A distinctive password, given by every route the tool reads a URL from, never shows in
/// any output: not in connection errors, not in `config show` / `config get` in any format,
/// not in the summary or progress of a clean, not in the "another clean is running" error.
fn the_password_never_appears_in_any_output(d: Dialect) {
    let mut bench = with_run(d);
    const PASSWORD: &str = "Qv7Sekr1t@x:y/z%";
    const ENCODED: &str = "Qv7Sekr1t%40x%3Ay%2Fz%25";
    let leaks = |run: &Run| {
        for text in [&run.stdout, &run.stderr] {
            assert!(
                !text.contains("Qv7Sekr1t") && !text.contains("qv7sekr1t"),
                "{:?} leaked the password: {text}",
                run.args
            );
        }
    };
    let user = format!("state_store_leak_{}", std::process::id());
    let (create, drop) = match d {
        Dialect::Postgres => {
            (format!("CREATE ROLE {user} LOGIN PASSWORD '{PASSWORD}'"), format!("DROP ROLE IF EXISTS {user}"))
        }
        _ => (
            format!(
                "CREATE USER '{user}'@'%' IDENTIFIED BY '{PASSWORD}'; GRANT ALL ON {}.* TO '{user}'@'%'",
                database_name(&bench)
            ),
            format!("DROP USER IF EXISTS '{user}'@'%'"),
        ),
    };
    bench.admin_sql(&drop);
    bench.admin_sql(&create);
    if d == Dialect::Postgres {
        bench.exec(&format!("GRANT ALL ON ALL TABLES IN SCHEMA public TO {user}; GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {user}"));
    }
    let good = Bench::server_url(d, &format!("{user}:{ENCODED}"), &database_name(&bench));
    // Another password that still holds the distinctive text (refused by MySQL; this
    // machine's PostgreSQL trusts local connections whatever the password).
    let wrong = good.replace("%25@", "%25%25@");
    let down = good.replace(":5432/", ":1/").replace(":3306/", ":1/");
    let formats = ["table", "json", "yaml", "plain"];
    let wrong_code = if d == Dialect::Mysql { 4 } else { 0 };
    for (url, code) in [(&down, 4), (&wrong, wrong_code), (&good, 0)] {
        // --conn, the environment, the config file, and _cmd from either.
        let cfg = bench.write_config(
            "leak.cfg",
            &format!("[database]\nsql_alchemy_conn = {}\n", url.replace('%', "%%")),
        );
        let cmd_cfg = bench.write_config(
            "leak-cmd.cfg",
            &format!("[database]\nsql_alchemy_conn_cmd = echo {}\n", url.replace('%', "%%")),
        );
        let routes: Vec<(Vec<String>, Vec<(&str, String)>)> = vec![
            (vec!["--conn".into(), url.clone()], vec![]),
            (vec![], vec![("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", url.clone())]),
            (vec!["--config".into(), cfg.to_str().unwrap().into()], vec![]),
            (vec!["--config".into(), cmd_cfg.to_str().unwrap().into()], vec![]),
            (vec![], vec![("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD", format!("echo {url}"))]),
        ];
        for (i, (flags, env)) in routes.iter().enumerate() {
            // Commands that connect, in one format per route; `config`, which does not
            // connect, in every format (once, for the URL that works).
            let mut runs: Vec<Vec<&str>> = vec![
                vec!["list", "-o", formats[i % 4]],
                vec!["clean", "--dry-run", "-o", formats[(i + 1) % 4]],
            ];
            if url == &good {
                for format in formats {
                    runs.push(vec!["config", "show", "-o", format]);
                    runs.push(vec!["config", "get", "database", "sql_alchemy_conn", "-o", format]);
                }
            }
            for args in runs {
                let mut all: Vec<&str> = args.clone();
                all.extend(flags.iter().map(String::as_str));
                let mut c = bench.cmd(&all);
                if flags.iter().any(|f| f == "--config") || !env.is_empty() {
                    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN");
                }
                for (key, value) in env {
                    c.env(key, value);
                }
                let out = c.output().unwrap();
                let run = Run {
                    args: all.iter().map(|s| s.to_string()).collect(),
                    code: out.status.code().unwrap_or(-1),
                    stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                    stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                };
                leaks(&run);
                let expected = if args[0] == "config" { 0 } else { code };
                assert_eq!(run.code, expected, "{run:?}");
                if run.code != 0 {
                    assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
                }
                if args[0] == "config" && args[1] == "get" {
                    assert!(run.stdout.contains(":***@"), "{run:?}");
                }
            }
        }
    }
    // A clean through the good URL: its progress lines, its summary, and a second clean's
    // "another clean is running" error, which names the database.
    seed_bulk(&bench, 200, 1);
    bench.env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", &good);
    let child = bench
        // 40 batches 200 ms apart: the four busy cleans below start well within its 8 s, even
        // on a loaded machine.
        .cmd(&["clean", "--batch-size", "5", "--sleep", "200ms", "--progress-every", "10ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(30, "the clean deletes a batch", || count(&bench, EXPIRED) < 200);
    for format in formats {
        let busy = bench.run(&["clean", "-o", format]).fails(7, "another state-store clean is running");
        leaks(&busy);
        assert!(busy.stderr.contains(":***@"), "the URL is shown masked: {}", busy.stderr);
        if matches!(format, "json" | "yaml") {
            assert!(busy.stdout.contains(":***@"), "and masked in the error document: {}", busy.stdout);
        }
    }
    let out = child.wait_with_output().unwrap();
    let run = Run {
        args: vec!["clean".into()],
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.contains("clean: progress: "), "progress lines were printed: {}", run.stderr);
    leaks(&run);
    if d == Dialect::Postgres {
        bench.exec(&format!("DROP OWNED BY {user}"));
    }
    bench.admin_sql(&drop);
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_password_never_appears_in_any_output() {
    the_password_never_appears_in_any_output(Dialect::Postgres);
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_password_never_appears_in_any_output() {
    the_password_never_appears_in_any_output(Dialect::Mysql);
}

// ---------------------------------------------------------------- passwords that are words

/// Passwords that are a letter or a word of the messages around them, and a long random one.
const WORD_PASSWORDS: &[&str] = &["e", "airflow", "database", "denied", "for", LONG_PASSWORD];
const LONG_PASSWORD: &str = "Xk4vR9tQ2mWz7LpB5nHc8JdF3sGy6Ue1";
/// The password every run is compared with: one that occurs in no message.
const REFERENCE_PASSWORD: &str = "Rq8ZjW3xT5";

/// One run of the binary with the database given only by `args` and `env`.
fn run_with(bench: &Bench, args: &[String], env: &[(String, String)]) -> Run {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut c = bench.cmd(&args);
    c.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN");
    for (key, value) in env {
        c.env(key, value);
    }
    let out = c.output().unwrap();
    Run {
        args: args.iter().map(|s| s.to_string()).chain(env.iter().map(|(k, v)| format!("{k}={v}"))).collect(),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// What a user runs, for a given password: a label, the arguments, the environment.
type Case = (String, Vec<String>, Vec<(String, String)>);

/// The same failures, reports and `_cmd` errors, with the password `password` in every URL:
/// nothing listens; a user or role that does not exist; a database that does not exist; a
/// database without Airflow's tables (exit 5, with its `airflow db migrate` hint); `doctor` on
/// that database and on a real metastore, and `config show` / `config get`, in every format;
/// a failing `_cmd` whose stderr quotes the URL, and one that printed the bare password and
/// whose stderr repeats it. On MySQL also a wrong password.
fn word_password_cases(d: Dialect, password: &str, user: &str, metastore: &str) -> Vec<Case> {
    let pid = std::process::id();
    let at = |user: &str, database: &str| Bench::server_url(d, &format!("{user}:{password}"), database);
    let down = at("airflow", "airflow_x").replace(":5432/", ":1/").replace(":3306/", ":1/");
    let empty = at(user, &format!("airflow_x_{pid}"));
    let conn = |url: &str| vec![("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN".to_string(), url.to_string())];
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut cases: Vec<Case> = vec![
        ("server down".into(), args(&["list", "--conn", &down]), vec![]),
        ("no such user".into(), args(&["list", "--conn", &at("airflow", "airflow_x")]), vec![]),
        (
            "no such database".into(),
            args(&["list", "--conn", &at(user, &format!("airflow_y_{pid}"))]),
            vec![],
        ),
        ("no tables".into(), args(&["list"]), conn(&empty)),
    ];
    if d == Dialect::Mysql {
        let url = at(&format!("airflow_{pid}_w"), &format!("airflow_x_{pid}"));
        cases.push(("wrong password".into(), args(&["list", "--conn", &url]), vec![]));
    }
    for format in ["table", "json", "yaml", "plain"] {
        cases.push((format!("doctor, no tables, {format}"), args(&["doctor", "-o", format]), conn(&empty)));
        cases.push((
            format!("doctor, {format}"),
            args(&["doctor", "-o", format]),
            conn(&at(user, metastore)),
        ));
        cases.push((format!("config show, {format}"), args(&["config", "show", "-o", format]), conn(&empty)));
        cases.push((
            format!("config get, {format}"),
            args(&["config", "get", "database", "sql_alchemy_conn", "-o", format]),
            conn(&empty),
        ));
    }
    let cmd = |command: String| vec![("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD".to_string(), command)];
    cases.push((
        "failing _cmd quoting the URL".into(),
        args(&["list"]),
        cmd(format!("sh -c 'echo {empty}; echo vault: cannot renew the lease for {empty} >&2; exit 1'")),
    ));
    cases.push((
        "failing _cmd that printed the bare password".into(),
        args(&["list"]),
        cmd(format!("sh -c 'echo {password}; echo vault: {password} is not a URL >&2; exit 1'")),
    ));
    cases
}

/// A password that is a letter (`e`) or a word the messages hold (`airflow`, with user
/// `airflow` and database `airflow_x…`; `database`; `denied`; `for`) changes nothing in any
/// output but the password's own position: every run gives exactly what the same run gives
/// with a password that occurs nowhere. The URL still shows `user:***@`, and the long random
/// password appears in no output at all. On PostgreSQL (which trusts local connections here)
/// each run also equals the run without any password, once `user@` reads `user:***@`.
fn word_passwords_change_nothing_but_their_position(d: Dialect) {
    let bench = with_run(d);
    let pid = std::process::id();
    let metastore = database_name(&bench);
    let (empty, missing) = (format!("airflow_x_{pid}"), format!("airflow_y_{pid}"));
    bench.admin_sql(&format!("DROP DATABASE IF EXISTS {empty}"));
    bench.admin_sql(&format!("CREATE DATABASE {empty}"));
    // MySQL: a user of the test's own whose password is set to each one in turn, and one
    // whose password is none of them.
    let user = if d == Dialect::Mysql {
        format!("airflow_{pid}")
    } else {
        Bench::admin_auth(d).split(':').next().unwrap().to_string()
    };
    let wrong_user = format!("airflow_{pid}_w");
    let set_password = |password: &str| {
        if d == Dialect::Mysql {
            bench.admin_sql(&format!("ALTER USER '{user}'@'%' IDENTIFIED BY '{password}'"));
        }
    };
    if d == Dialect::Mysql {
        for u in [&user, &wrong_user] {
            bench.admin_sql(&format!("DROP USER IF EXISTS '{u}'@'%'"));
            bench.admin_sql(&format!("CREATE USER '{u}'@'%' IDENTIFIED BY 'right-{pid}'"));
        }
        for database in [&empty, &missing, &metastore] {
            bench.admin_sql(&format!("GRANT ALL ON {database}.* TO '{user}'@'%'"));
        }
    }

    let run_all = |password: &str| -> Vec<(String, Run)> {
        set_password(password);
        word_password_cases(d, password, &user, &metastore)
            .into_iter()
            .map(|(label, args, env)| (label, run_with(&bench, &args, &env)))
            .collect()
    };
    let reference = run_all(REFERENCE_PASSWORD);
    for (label, run) in &reference {
        let expected = match label.as_str() {
            l if l.starts_with("config") => 0,
            l if l.starts_with("doctor,") && !l.contains("no tables") => 0,
            l if l.contains("no tables") => 5,
            l if l.contains("_cmd") => 3,
            _ => 4,
        };
        assert_eq!(run.code, expected, "{label}: {run:?}");
        if run.code != 0 {
            let errors: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("error: ")).collect();
            assert_eq!((errors.len(), run.stderr.lines().count()), (1, 1), "{label}: {run:?}");
        }
        let names_the_url =
            label.starts_with("config") || label.starts_with("doctor") || label.contains("quoting");
        // doctor's plain format lists check names and statuses only.
        if names_the_url && !(label.starts_with("doctor") && label.ends_with("plain")) {
            assert!(format!("{}{}", run.stdout, run.stderr).contains(":***@"), "{label}: {run:?}");
        }
        assert!(!run.stderr.contains(REFERENCE_PASSWORD) && !run.stdout.contains(REFERENCE_PASSWORD));
    }
    let hint = reference.iter().find(|(l, _)| l == "no tables").map(|(_, r)| &r.stderr).unwrap();
    assert!(
        hint.contains(&format!("{empty} on")) && hint.contains("(`airflow db migrate` creates them)"),
        "{hint}"
    );
    if d == Dialect::Mysql {
        let denied = reference.iter().find(|(l, _)| l == "wrong password").map(|(_, r)| &r.stderr).unwrap();
        assert!(denied.contains(&format!("Access denied for user '{wrong_user}'@")), "{denied}");
        assert!(denied.contains("(using password: YES)"), "{denied}");
    }
    let bare = reference.iter().find(|(l, _)| l.contains("bare password")).map(|(_, r)| &r.stderr).unwrap();
    assert!(bare.ends_with("`sh` exited with status 1: vault: *** is not a URL\n"), "{bare}");

    for password in WORD_PASSWORDS {
        for ((label, expected), (_, run)) in reference.iter().zip(run_all(password)) {
            assert_eq!(
                (run.code, &run.stdout, &run.stderr),
                (expected.code, &expected.stdout, &expected.stderr),
                "password {password:?}, {label}"
            );
            if *password == LONG_PASSWORD {
                for text in [&run.stdout, &run.stderr] {
                    assert!(!text.to_lowercase().contains(&LONG_PASSWORD.to_lowercase()), "{label}: {text}");
                }
            }
        }
    }

    // Without any password (PostgreSQL trusts local connections): the same text, the URL
    // apart. The bare-password `_cmd` case has no password-free form.
    if d == Dialect::Postgres {
        let free = word_password_cases(d, "", &user, &metastore);
        for ((label, expected), (_, args, env)) in reference.iter().zip(free) {
            if label.contains("bare password") {
                continue;
            }
            let strip = |s: &String| s.replace(":@", "@");
            let args: Vec<String> = args.iter().map(strip).collect();
            let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), strip(v))).collect();
            let run = run_with(&bench, &args, &env);
            // A table pads its columns to the longest cell, which the mask lengthens.
            let unpadded = |text: &str| {
                let mut out = String::new();
                for c in text.chars() {
                    if !(matches!(c, ' ' | '=') && out.ends_with(c)) {
                        out.push(c);
                    }
                }
                out
            };
            let with_mask = |text: &str| {
                unpadded(
                    &text
                        .replace(&format!("://{user}@"), &format!("://{user}:***@"))
                        .replace("://airflow@", "://airflow:***@"),
                )
            };
            assert_eq!(
                (run.code, with_mask(&run.stdout), with_mask(&run.stderr)),
                (expected.code, unpadded(&expected.stdout), unpadded(&expected.stderr)),
                "no password, {label}"
            );
        }
    }

    if d == Dialect::Mysql {
        for u in [&user, &wrong_user] {
            bench.admin_sql(&format!("DROP USER IF EXISTS '{u}'@'%'"));
        }
    }
    bench.admin_sql(&format!("DROP DATABASE IF EXISTS {empty}"));
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_word_passwords_change_nothing_but_their_position() {
    word_passwords_change_nothing_but_their_position(Dialect::Postgres);
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_word_passwords_change_nothing_but_their_position() {
    word_passwords_change_nothing_but_their_position(Dialect::Mysql);
}

/// SQLite takes no password: a SQLite URL with one is refused, and the message is the same
/// whatever the password.
#[test]
fn sqlite_word_passwords_change_nothing_in_the_refusal() {
    let bench = Bench::new();
    let refuse = |password: &str| {
        let url = format!("sqlite://airflow:{password}@/airflow_x.db");
        run_with(&bench, &["list".to_string(), "--conn".to_string(), url], &[])
    };
    let expected = refuse(REFERENCE_PASSWORD);
    assert_eq!(expected.code, 3, "{expected:?}");
    assert!(expected.stderr.contains("a SQLite URL takes no user, password, host or port"), "{expected:?}");
    for password in WORD_PASSWORDS {
        let run = refuse(password);
        assert_eq!((run.code, &run.stderr), (3, &expected.stderr), "password {password:?}");
    }
}

/// Passwords outside a URL's userinfo, each once shown: a `?password=` option (in
/// `config show`, and when the connection it is for fails), a URL given where clap expects no
/// argument, and a URL on a failing `_cmd`'s stderr that the excerpt's length limit cuts
/// inside the password.
#[test]
fn passwords_outside_the_userinfo_are_masked_too() {
    let bench = Bench::bare();
    let conn = |url: &str| vec![("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN".to_string(), url.to_string())];
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let query = format!("postgresql://airflow@127.0.0.1:1/airflow?password={LONG_PASSWORD}&sslmode=disable");
    let shown = "postgresql://airflow@127.0.0.1:1/airflow?password=***&sslmode=disable";
    let run = run_with(&bench, &args(&["config", "get", "database", "sql_alchemy_conn"]), &conn(&query));
    assert_eq!((run.code, run.stdout.as_str()), (0, format!("{shown}\n").as_str()), "{run:?}");
    // The query's password is PostgreSQL's password, as SQLAlchemy hands it to psycopg2;
    // nothing listens on port 1.
    let run = run_with(&bench, &args(&["list"]), &conn(&query));
    assert_eq!(run.code, 4, "{run:?}");
    assert!(
        run.stderr.starts_with("error: cannot connect to PostgreSQL database airflow on 127.0.0.1:1"),
        "{run:?}"
    );
    assert!(!run.stderr.contains(LONG_PASSWORD) && !run.stdout.contains(LONG_PASSWORD), "{run:?}");
    let bad = query.replace("sslmode=disable", "sslmode=nonsense");
    let run = run_with(&bench, &args(&["list"]), &conn(&bad));
    assert_eq!(run.code, 3, "{run:?}");
    assert!(
        run.stderr.starts_with(&format!(
            "error: [database] sql_alchemy_conn {}: ",
            shown.replace("sslmode=disable", "sslmode=nonsense")
        )),
        "{run:?}"
    );

    let url = format!("postgresql://airflow:{LONG_PASSWORD}@db/airflow");
    let run = run_with(&bench, &args(&["list", &url]), &[]);
    assert_eq!(
        (run.code, run.stderr.as_str()),
        (2, "error: unexpected argument 'postgresql://airflow:***@db/airflow' found (see --help)\n"),
        "{run:?}"
    );

    // 160 characters, then the URL: its password starts inside the 200 characters quoted,
    // and its `@` lies past them.
    let command = format!("sh -c 'echo {} {url} >&2; exit 1'", "x".repeat(160));
    let env = vec![("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD".to_string(), command)];
    let run = run_with(&bench, &args(&["list"]), &env);
    assert_eq!(run.code, 3, "{run:?}");
    assert!(run.stderr.ends_with(" postgresql://airflow:***@db/airflow\n"), "{run:?}");
    assert!(!run.stderr.contains(&LONG_PASSWORD[..4]), "{run:?}");
}

// ---------------------------------------------------------------- files and paths

/// The files the tool writes: archives always whole lines, an export replaced only when
/// complete, no output path that is the database, temporary and lock files other users cannot
/// redirect (docs/reliability.md, "Files and paths").
mod files {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::{Path, PathBuf};

    /// Runs a command of the bench with its file size limit (`RLIMIT_FSIZE`) at `bytes`, and
    /// SIGXFSZ ignored, so a write past the limit fails with EFBIG as a full disk fails with
    /// ENOSPC (a tmpfs of a chosen size needs root).
    fn run_with_file_limit(bench: &Bench, bytes: u64, args: &[&str]) -> Run {
        run_with_file_limit_as(bench, bytes, args, "trap '' XFSZ; ")
    }

    /// [`run_with_file_limit`], SIGXFSZ as `trap` (a shell command, or nothing) leaves it.
    fn run_with_file_limit_as(bench: &Bench, bytes: u64, args: &[&str], trap: &str) -> Run {
        let plain = bench.cmd(args);
        let mut c = Command::new("sh");
        c.arg("-c").arg(format!("{trap}exec prlimit --fsize={bytes} -- \"$0\" \"$@\""));
        c.arg(plain.get_program()).args(plain.get_args());
        for (key, value) in plain.get_envs() {
            match value {
                Some(value) => c.env(key, value),
                None => c.env_remove(key),
            };
        }
        let out = c.stdin(Stdio::null()).output().expect("sh and prlimit (util-linux)");
        Run::from(out, args)
    }

    /// The file holds whole lines only, each a JSON object; their number.
    #[track_caller]
    /// A file size limit (`ulimit -f`) with SIGXFSZ at its default, which would kill the
    /// process mid-write: the tool catches it, so the write fails with EFBIG as on a full disk,
    /// and the export ends with exit 6 naming its file, the old file kept.
    #[test]
    fn sqlite_a_file_size_limit_fails_the_write_instead_of_killing_the_process() {
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 2_000, 2);
        let file = bench.dir.path().join("backup.jsonl");
        std::fs::write(&file, "old\n").unwrap();
        let path = file.to_str().unwrap();
        let run = run_with_file_limit_as(&bench, 100_000, &["export", "--file", path], "");
        let what = format!("{run:?}");
        assert_eq!(run.code, 6, "{what}");
        assert!(
            run.stderr.contains(&format!("error: cannot write the output: {path}: File too large")),
            "{what}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "old\n");
    }

    fn whole_lines(path: &Path) -> usize {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.is_empty() || text.ends_with('\n'), "{} ends in a partial line", path.display());
        support::json_lines(&text).len()
    }

    /// The rows a clean's summary line says it archived.
    #[track_caller]
    fn summary_archived(stderr: &str) -> usize {
        let line = stderr.lines().find(|l| l.starts_with("clean: ")).unwrap_or_else(|| panic!("{stderr}"));
        let rest = line.split("; archived ").nth(1).unwrap_or_else(|| panic!("{line}"));
        rest.split(' ').next().unwrap().parse().unwrap()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn temporaries(dir: &Path) -> Vec<String> {
        names(dir).into_iter().filter(|n| n.ends_with(".tmp")).collect()
    }

    fn mkfifo(path: &Path) {
        assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
    }

    contract! {
        /// An archive a killed run left with a partial last line: the next `clean --archive`
        /// (and `clear --archive`) cuts it off with a warning that names the file and the bytes
        /// dropped, appends whole lines, and `import` restores every row of the file.
        fn archive_cut_mid_line_is_repaired_and_importable(d: Dialect) {
            let bench = with_run(d);
            seed_bulk(&bench, 300, 3);
            let archive = bench.dir.path().join("expired.jsonl");
            let path = archive.display().to_string();
            bench.run(&["clean", "--archive", &path, "--batch-size", "10", "--max-rows", "50"]).success();
            assert_eq!(whole_lines(&archive), 50);
            // What a run killed between its write and its fsync leaves: the start of a line of
            // a row it never deleted.
            let next = bench.run(&["export", "--expired"]).success().stdout;
            let partial = &next.lines().next().unwrap()[..60];
            let mut file = std::fs::OpenOptions::new().append(true).open(&archive).unwrap();
            std::io::Write::write_all(&mut file, partial.as_bytes()).unwrap();
            let run = bench.run(&["clean", "--archive", &path, "--batch-size", "10"]).success();
            assert!(
                run.stderr.contains(&format!("warning: archive {path} ended in a partial line"))
                    && run.stderr.contains("cut its last 60 byte(s)"),
                "{}",
                run.stderr
            );
            assert_eq!(summary_archived(&run.stderr), 50);
            assert_eq!(whole_lines(&archive), 100);
            assert_eq!(count(&bench, EXPIRED), 0);
            // A file cut short (truncated) before `clear --archive`.
            bench.run(&cmd(&["set", "kept", "1"], &task(&[]))).success();
            let len = std::fs::metadata(&archive).unwrap().len();
            file.set_len(len - 25).unwrap();
            let run = bench.run(&cmd(&["clear", "--yes", "--archive", &path], &task(&[]))).success();
            assert!(run.stderr.contains("cut its last"), "{}", run.stderr);
            assert_eq!(whole_lines(&archive), 100, "99 whole lines and the cleared key");
            let run = bench.run(&["import", &path]).success();
            assert!(run.stderr.contains("100 task row(s)"), "{}", run.stderr);
            assert_eq!(count(&bench, EXPIRED), 99);
        }

        /// A write that fails mid-batch (a full disk; here a file size limit): the batch is cut
        /// off the archive and not deleted, the file is whole lines, the summary counts exactly
        /// the rows whose lines are in it, and a rerun finishes with an importable archive.
        fn archive_write_failure_leaves_whole_lines(d: Dialect) {
            let bench = with_run(d);
            seed_bulk(&bench, 600, 1);
            let archive = bench.dir.path().join("expired.jsonl");
            let path = archive.display().to_string();
            // An archive of earlier runs, larger than the database's own files, so that only
            // the archive reaches the limit.
            let earlier = bench.run(&["export"]).success().stdout.repeat(12);
            std::fs::write(&archive, &earlier).unwrap();
            let before = earlier.lines().count();
            let limit = earlier.len() as u64 + 20_000;
            let run = run_with_file_limit(&bench, limit, &["clean", "--archive", &path, "--batch-size", "20"]);
            assert_eq!(run.code, 6, "{run:?}");
            assert!(clean_error_line(&run.stderr).contains(&path), "{}", run.stderr);
            let appended = whole_lines(&archive) - before;
            let deleted = usize::try_from(600 - count(&bench, EXPIRED)).unwrap();
            assert!(deleted > 0 && deleted < 600, "stopped part-way: {deleted}");
            assert_eq!((appended, summary_archived(&run.stderr)), (deleted, deleted), "{}", run.stderr);
            bench.run(&["clean", "--archive", &path, "--batch-size", "20"]).success();
            assert_eq!(whole_lines(&archive), before + 600);
            bench.run(&["import", &path]).success();
            assert_eq!(count(&bench, EXPIRED), 600);
        }

        /// `export --file` over an earlier backup: a write that fails (a file size limit), or a
        /// SIGTERM, leaves the old backup byte for byte and no temporary file; a complete export
        /// replaces it and keeps its mode.
        fn export_file_is_replaced_only_when_complete(d: Dialect) {
            let bench = with_run(d);
            seed_bulk(&bench, 30_000, 2);
            let backup = bench.dir.path().join("backup.jsonl");
            let path = backup.display().to_string();
            std::fs::write(&backup, "the old backup\n").unwrap();
            set_mode(&backup, 0o640);
            let run = run_with_file_limit(&bench, 64 * 1024, &["export", "--file", &path]);
            assert_eq!(run.code, 6, "{run:?}");
            assert_eq!(std::fs::read_to_string(&backup).unwrap(), "the old backup\n");
            assert_eq!(temporaries(bench.dir.path()), Vec::<String>::new());
            // SIGTERM while the new file is being written.
            let mut stopped = false;
            for _ in 0..5 {
                let mut child = bench.cmd(&["export", "--file", &path]).stderr(Stdio::null()).spawn().unwrap();
                let deadline = Instant::now() + Duration::from_secs(30);
                while temporaries(bench.dir.path()).is_empty() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(2));
                }
                let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
                let status = child.wait().unwrap();
                if status.code() == Some(143) {
                    stopped = true;
                    break;
                }
                // Finished before the signal: try again from the old file.
                std::fs::write(&backup, "the old backup\n").unwrap();
                set_mode(&backup, 0o640);
            }
            assert!(stopped, "no export was stopped mid-file in five tries");
            assert_eq!(std::fs::read_to_string(&backup).unwrap(), "the old backup\n");
            assert_eq!(temporaries(bench.dir.path()), Vec::<String>::new(), "the signal removed it");
            let inode = std::fs::metadata(&backup).unwrap().ino();
            bench.run(&["export", "--file", &path]).success();
            assert_eq!(whole_lines(&backup), 30_000);
            let meta = std::fs::metadata(&backup).unwrap();
            assert_ne!(meta.ino(), inode, "renamed over, not written in place");
            assert_eq!(meta.permissions().mode() & 0o777, 0o640);
            assert_eq!(temporaries(bench.dir.path()), Vec::<String>::new());
        }

        /// `export --file` to what cannot be fsynced or renamed over: `/dev/stdout` (a pipe, or
        /// a regular file the shell opened), a FIFO. The lines arrive, exit 0.
        fn export_file_to_a_pipe_or_fifo_is_streamed(d: Dialect) {
            let bench = with_run(d);
            seed_bulk(&bench, 30, 2);
            let run = bench.run(&["export", "--file", "/dev/stdout"]).success();
            assert_eq!(support::json_lines(&run.stdout).len(), 30);
            let out = bench.dir.path().join("redirected.jsonl");
            let status = bench
                .cmd(&["export", "--file", "/dev/stdout"])
                .stdout(std::fs::File::create(&out).unwrap())
                .status()
                .unwrap();
            assert_eq!(status.code(), Some(0));
            assert_eq!(whole_lines(&out), 30);
            let fifo = bench.dir.path().join("fifo");
            mkfifo(&fifo);
            let reader = {
                let fifo = fifo.clone();
                std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
            };
            bench.run(&["export", "--file", &fifo.display().to_string()]).success();
            assert_eq!(support::json_lines(&reader.join().unwrap()).len(), 30);
        }

        /// `import -` copies stdin to a file no other user can open and no exit leaves
        /// behind: it has no name in `$TMPDIR` while the import runs, is 0600, and a `kill -9`
        /// leaves nothing; a `$TMPDIR` that does not exist is an output error (exit 6).
        fn import_from_stdin_leaves_no_file_behind(d: Dialect) {
            let bench = with_run(d);
            bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
            let lines = bench.run(&["export"]).success().stdout;
            let tmp = bench.dir.path().join("tmp");
            std::fs::create_dir(&tmp).unwrap();
            let mut child = bench
                .cmd(&["import", "-"])
                .env("TMPDIR", &tmp)
                .stdin(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut stdin = child.stdin.take().unwrap();
            std::io::Write::write_all(&mut stdin, lines.as_bytes()).unwrap();
            // The spool is open once a descriptor of the process leads into $TMPDIR.
            let fds = PathBuf::from(format!("/proc/{}/fd", child.id()));
            let mut spool = None;
            wait_until(30, "import opens its spool", || {
                spool = std::fs::read_dir(&fds).ok().and_then(|entries| {
                    entries.filter_map(Result::ok).map(|e| e.path()).find(|fd| {
                        std::fs::read_link(fd).is_ok_and(|target| target.starts_with(&tmp))
                    })
                });
                spool.is_some()
            });
            assert_eq!(names(&tmp), Vec::<String>::new(), "the spool has no name");
            let meta = std::fs::metadata(spool.unwrap()).unwrap();
            assert_eq!((meta.permissions().mode() & 0o777, meta.nlink()), (0o600, 0));
            assert!(Command::new("kill").args(["-KILL", &child.id().to_string()]).status().unwrap().success());
            child.wait().unwrap();
            drop(stdin);
            assert_eq!(names(&tmp), Vec::<String>::new());
            let mut bench = bench;
            bench.env("TMPDIR", &tmp.display().to_string());
            bench.run_with_stdin(&["import", "-"], &lines).success();
            assert_eq!(names(&tmp), Vec::<String>::new());
            bench.env("TMPDIR", &bench.dir.path().join("missing").display().to_string());
            bench.unchanged(|| bench.run_with_stdin(&["import", "-"], &lines).fails(6, "a copy of stdin"));
        }
    }

    /// Every output path that names the open SQLite database or a file SQLite keeps beside it,
    /// however it is spelt (the path, `x/../`, a symlink, a hard link, the `-wal` and
    /// `-journal` that do not exist yet), is refused with exit 2 before anything is written:
    /// the file is byte for byte as it was. A `--metrics-file` that is not a regular file is
    /// refused before the database is opened.
    #[test]
    fn sqlite_output_paths_that_name_the_database_are_refused() {
        let bench = with_run(Dialect::Sqlite);
        bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
        seed_bulk(&bench, 20, 2);
        bench.exec("PRAGMA wal_checkpoint(TRUNCATE)");
        let dir = bench.dir.path();
        std::fs::create_dir(dir.join("x")).unwrap();
        std::os::unix::fs::symlink(&bench.db, dir.join("link.db")).unwrap();
        std::fs::hard_link(&bench.db, dir.join("hard.db")).unwrap();
        let spellings: Vec<String> =
            ["airflow.db", "x/../airflow.db", "link.db", "hard.db", "airflow.db-wal", "airflow.db-journal"]
                .iter()
                .map(|name| dir.join(name).display().to_string())
                .collect();
        let before = file_bytes(&bench.db);
        for spelt in &spellings {
            let cases: Vec<Vec<&str>> = vec![
                vec!["export", "--file", spelt],
                vec!["clean", "--archive", spelt],
                vec!["clean", "--metrics-file", spelt],
                cmd(&["clear", "--yes", "--archive", spelt], &task(&[])),
            ];
            for args in cases {
                let run = bench.unchanged(|| bench.run(&args).code(2));
                // The database has two names here (`hard.db`), and `link.db` is a symlink: an
                // archive, checked before the database is opened, is refused for that first.
                let early = ["has 2 hard links", "is a symbolic link"];
                let early = args.contains(&"--archive") && early.iter().any(|why| run.stderr.contains(why));
                assert!(run.stderr.contains("refusing to write over it") || early, "{run:?}");
                assert!(before == file_bytes(&bench.db), "{args:?} changed the file");
            }
        }
        assert!(!dir.join("airflow.db-journal").exists());
        // Not a regular file: refused before the database is opened (it does not exist).
        let fifo = dir.join("fifo");
        mkfifo(&fifo);
        let nowhere = format!("sqlite:///{}", dir.join("no-such.db").display());
        for path in ["/dev/null".to_string(), fifo.display().to_string(), dir.display().to_string()] {
            bench.run(&["clean", "--conn", &nowhere, "--metrics-file", &path]).code(2);
        }
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
        // An output that names the database is refused before the database is opened: for a
        // database that does not exist, the refusal (exit 2), not the failed open (exit 4).
        let missing = dir.join("no-such.db").display().to_string();
        for args in [
            vec!["--conn", &nowhere, "export", "--file", &missing],
            vec!["--conn", &nowhere, "clean", "--archive", &missing],
            vec!["--conn", &nowhere, "clean", "--metrics-file", &missing],
        ] {
            let run = bench.run(&args).code(2);
            assert!(run.stderr.contains("refusing to write over it"), "{run:?}");
            assert!(!dir.join("no-such.db").exists(), "{args:?} created the database or wrote there");
        }
    }

    /// Another user who can create names in the directory of an output (a 0777 directory, as a
    /// shared spool is) plants a symlink to a file root owns, a hard link to it, or a FIFO
    /// they read, at the path of the archive, the metrics file, the export file and the clean
    /// lock; the run is root's. The file root owns is byte for byte as it was: the archive
    /// refuses all three (exit 2) before anything is opened for writing; a metrics or export
    /// file replaces the planted name by a rename (a FIFO of another user's is refused, exit
    /// 2); the lock file is never followed, never written and never blocks.
    #[test]
    fn sqlite_planted_links_and_fifos_never_change_a_file_root_owns() {
        if !running_as_root() {
            eprintln!("skipped: needs root, to plant files as another user");
            return;
        }
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 20, 2);
        let shared = bench.dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        set_mode(&shared, 0o777);
        let precious = bench.dir.path().join("precious.conf");
        let text = b"line 1\nlast line without newline";
        std::fs::write(&precious, text).unwrap();
        let as_nobody = |path: &Path| {
            assert!(Command::new("chown").args(["-h", "nobody"]).arg(path).status().unwrap().success());
        };
        let plant = |name: &str, how: &str| -> PathBuf {
            let path = shared.join(name);
            let _ = std::fs::remove_file(&path);
            match how {
                "symlink" => std::os::unix::fs::symlink(&precious, &path).unwrap(),
                "hard link" => std::fs::hard_link(&precious, &path).unwrap(),
                _ => mkfifo(&path),
            }
            if how != "hard link" {
                as_nobody(&path);
            }
            path
        };
        for how in ["symlink", "hard link", "fifo"] {
            let archive = plant("archive.jsonl", how);
            let path = archive.display().to_string();
            let run = bench.run(&["clean", "--archive", &path]).code(2);
            assert!(run.stderr.contains("nothing was written"), "{how}: {run:?}");
            bench.run(&cmd(&["set", "kept", "1"], &task(&[]))).success();
            let run = bench.run(&cmd(&["clear", "--yes", "--archive", &path], &task(&[]))).code(2);
            assert!(run.stderr.contains("nothing was written"), "{how}: {run:?}");
            assert_eq!(std::fs::read(&precious).unwrap(), text, "{how} at the archive");

            for flags in [["clean", "--metrics-file"], ["export", "--file"]] {
                let output = plant("output", how);
                let path = output.display().to_string();
                let run = bench.run(&[flags[0], flags[1], &path]);
                if how == "fifo" {
                    // The metrics file refuses any FIFO (a collector reads files), export one
                    // of another user's.
                    let run = run.code(2);
                    assert!(run.stderr.contains("belongs to another user") || flags[0] == "clean", "{run:?}");
                    assert!(!run.stderr.contains("  "), "a run of spaces in the message: {run:?}");
                } else {
                    run.success();
                    assert!(
                        std::fs::symlink_metadata(&output).unwrap().is_file(),
                        "{how}: replaced by a file"
                    );
                }
                assert_eq!(std::fs::read(&precious).unwrap(), text, "{how} at {flags:?}");
            }
        }
        // The lock file beside the database: a hard link is locked but never written, a FIFO
        // fails the open at once instead of blocking it.
        let lock = bench.dir.path().join("airflow.db.state-store-clean.lock");
        std::fs::hard_link(&precious, &lock).unwrap();
        bench.run(&["clean"]).success();
        assert_eq!(std::fs::read(&precious).unwrap(), text, "hard link at the lock");
        let _ = std::fs::remove_file(&lock);
        mkfifo(&lock);
        let started = Instant::now();
        bench.run(&["clean"]).fails(4, "clean lock file");
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    }

    /// An archive that another user owns (planted in a 1777 directory, holding a valid archive
    /// line) is never appended to: `clean --archive` and `clear --archive` refuse it with exit
    /// 2, before the database is opened (a database that does not exist is not created),
    /// nothing is deleted and the file is byte for byte as it was.
    #[test]
    fn sqlite_an_archive_another_user_owns_is_never_appended_to() {
        if !running_as_root() {
            eprintln!("skipped: needs root, to plant a file as another user");
            return;
        }
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 20, 2);
        let shared = bench.dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        set_mode(&shared, 0o1777);
        let archive = shared.join("archive.jsonl");
        let line = bench.run(&["export"]).success().stdout.lines().next().unwrap().to_string() + "\n";
        std::fs::write(&archive, &line).unwrap();
        assert!(Command::new("chown").arg("nobody").arg(&archive).status().unwrap().success());
        let path = archive.display().to_string();
        for args in
            [vec!["clean", "--archive", &path], cmd(&["clear", "--yes", "--archive", &path], &task(&[]))]
        {
            let run = bench.unchanged(|| bench.run(&args).fails(2, "belongs to another user"));
            assert!(run.stderr.contains("nothing was written or deleted"), "{run:?}");
            assert_eq!(std::fs::read_to_string(&archive).unwrap(), line, "{args:?}");
        }
        let nowhere = bench.dir.path().join("no-such.db");
        let url = format!("sqlite:///{}", nowhere.display());
        bench.run(&["clean", "--conn", &url, "--archive", &path]).fails(2, "belongs to another user");
        assert!(!nowhere.exists(), "the database was opened");
    }

    /// The mode a new file gets here: 0666 less the umask (the tests' own, which the runs
    /// inherit).
    fn new_file_mode() -> u32 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let umask = status.lines().find_map(|l| l.strip_prefix("Umask:")).unwrap();
        0o666 & !u32::from_str_radix(umask.trim(), 8).unwrap()
    }

    /// Another user plants a file with mode 06777 at the path of a root run's `--metrics-file`,
    /// `export --file` or `man --out-dir` page, in a directory that user owns (as
    /// node_exporter's textfile directory often is) and in a sticky 1777 one. The file root
    /// puts there is created as any new file is (0666 less the umask): never setuid, never
    /// writable by others; a mode is kept only from a file root or the run's user owned, and
    /// then without the bits above 0777 or write for others that the umask takes away.
    #[test]
    fn sqlite_a_replaced_file_never_takes_another_users_mode() {
        if !running_as_root() {
            eprintln!("skipped: needs root, to plant files as another user");
            return;
        }
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 20, 2);
        for (dir_name, dir_mode, owner) in [("owned", 0o755, "nobody"), ("sticky", 0o1777, "root")] {
            let dir = bench.dir.path().join(dir_name);
            std::fs::create_dir(&dir).unwrap();
            chown(owner, &dir);
            set_mode(&dir, dir_mode);
            let plant = |name: &str| -> PathBuf {
                let path = dir.join(name);
                std::fs::write(&path, "planted\n").unwrap();
                chown("nobody", &path);
                set_mode(&path, 0o6777);
                path
            };
            let metrics = plant("state.prom");
            bench.run(&["clean", "--metrics-file", metrics.to_str().unwrap()]).success();
            let export = plant("export.jsonl");
            bench.run(&["export", "--file", export.to_str().unwrap()]).success();
            let pages = dir.join("man");
            std::fs::create_dir(&pages).unwrap();
            chown(owner, &pages);
            set_mode(&pages, dir_mode);
            let page = pages.join("state-store.1");
            std::fs::write(&page, "planted\n").unwrap();
            chown("nobody", &page);
            set_mode(&page, 0o6777);
            bench.run(&["man", "--out-dir", pages.to_str().unwrap()]).success();
            for (path, mode) in [(&metrics, 0o644), (&export, new_file_mode()), (&page, new_file_mode())] {
                let meta = std::fs::metadata(path).unwrap();
                assert_eq!(meta.uid(), 0, "{}", path.display());
                assert_eq!(
                    meta.permissions().mode() & 0o7777,
                    mode,
                    "{} in the {dir_name} directory",
                    path.display()
                );
            }
        }
        // A file root owns keeps its permission bits, less the setuid, setgid and sticky bits
        // and less the write for others that the umask takes away.
        let own = bench.dir.path().join("own.prom");
        std::fs::write(&own, "old\n").unwrap();
        set_mode(&own, 0o6777);
        bench.run(&["clean", "--metrics-file", own.to_str().unwrap()]).success();
        let kept = std::fs::metadata(&own).unwrap().permissions().mode() & 0o7777;
        assert_eq!(kept, 0o777 & !(0o022 & !new_file_mode()), "{kept:o}");
    }

    /// Another user who owns a directory on the way to an output makes a name in it a symlink
    /// into a 0700 directory of root's. A root run writing through that name never follows the
    /// link: the output is refused (exit 2) and root's file is byte for byte as it was. A
    /// symlink root made there, or one in a directory no other user can write, is followed as
    /// before.
    #[test]
    fn sqlite_a_directory_symlink_another_user_planted_is_never_followed() {
        if !running_as_root() {
            eprintln!("skipped: needs root, to plant files as another user");
            return;
        }
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 20, 2);
        let private = bench.dir.path().join("private");
        std::fs::create_dir(&private).unwrap();
        set_mode(&private, 0o700);
        let precious = private.join("out.jsonl");
        std::fs::write(&precious, "precious\n").unwrap();
        let theirs = bench.dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        chown("nobody", &theirs);
        let sub = theirs.join("sub");
        std::os::unix::fs::symlink(&private, &sub).unwrap();
        chown("nobody", &sub);
        let through = sub.join("out.jsonl");
        let path = through.to_str().unwrap();
        for args in [
            vec!["export", "--file", path],
            vec!["clean", "--metrics-file", path],
            vec!["clean", "--archive", path],
        ] {
            let run = bench.unchanged(|| bench.run(&args).fails(2, "symbolic link"));
            assert!(run.stderr.contains("nobody") || run.stderr.contains("uid"), "{run:?}");
            assert_eq!(std::fs::read_to_string(&precious).unwrap(), "precious\n", "{args:?}");
        }
        // Followed: the same link made root's, and a link of nobody's in a directory only root
        // can write.
        chown("root", &sub);
        bench.run(&["export", "--file", path]).success();
        assert_eq!(whole_lines(&precious), 20);
        let mine = bench.dir.path().join("mine");
        std::os::unix::fs::symlink(&private, &mine).unwrap();
        chown("nobody", &mine);
        std::fs::remove_file(&precious).unwrap();
        bench.run(&["export", "--file", mine.join("out.jsonl").to_str().unwrap()]).success();
        assert_eq!(whole_lines(&precious), 20);
    }

    /// An archive (a file whose first line is an archive line) is never replaced by a metrics
    /// file or an export: exit 2, the file byte for byte as it was.
    #[test]
    fn sqlite_an_archive_is_never_replaced_by_metrics_or_an_export() {
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 40, 2);
        let archive = bench.dir.path().join("expired.jsonl");
        let path = archive.to_str().unwrap();
        bench.run(&["clean", "--archive", path]).success();
        let before = std::fs::read(&archive).unwrap();
        assert_eq!(whole_lines(&archive), 20);
        bench.run(&["clean", "--metrics-file", path]).fails(2, "archive");
        bench.run(&["export", "--file", path]).fails(2, "archive");
        assert!(std::fs::read(&archive).unwrap() == before, "the archive changed");
        assert_eq!(temporaries(bench.dir.path()), Vec::<String>::new());
    }

    /// Two paths of one clean that are the same file, however spelt (the same path, `x/../`,
    /// a symlink, a name that does not exist yet): `--metrics-file` would be renamed over the
    /// archive the run appended to. Refused with exit 2 before the database is opened: nothing
    /// deleted, the archive as it was, no file created.
    #[test]
    fn sqlite_the_outputs_of_one_run_are_never_the_same_file() {
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 20, 2);
        let dir = bench.dir.path();
        std::fs::create_dir(dir.join("x")).unwrap();
        let archive = dir.join("archive.jsonl");
        let line = bench.run(&["export"]).success().stdout.lines().next().unwrap().to_string() + "\n";
        std::fs::write(&archive, &line).unwrap();
        std::os::unix::fs::symlink(&archive, dir.join("link.prom")).unwrap();
        let spelt = |name: &str| dir.join(name).display().to_string();
        for (archived, metrics) in [
            ("archive.jsonl", "archive.jsonl"),
            ("archive.jsonl", "x/../archive.jsonl"),
            ("archive.jsonl", "link.prom"),
            ("new.jsonl", "x/../new.jsonl"),
        ] {
            let args = ["clean", "--archive", &spelt(archived), "--metrics-file", &spelt(metrics)];
            bench.unchanged(|| bench.run(&args).fails(2, "are the same file"));
            assert_eq!(std::fs::read_to_string(&archive).unwrap(), line, "{args:?}");
            assert!(!dir.join("new.jsonl").exists(), "{args:?}");
        }
        // Not the same file: both written.
        bench
            .run(&["clean", "--archive", &spelt("archive.jsonl"), "--metrics-file", &spelt("m.prom")])
            .success();
        assert_eq!(whole_lines(&archive), 11);
    }

    /// An archive a clean is writing holds its lock: `export --file` or `clean --metrics-file`
    /// naming it (however spelt) refuses with exit 2, saying a clean is writing it, instead of
    /// renaming a new file over it; and a clean whose archive is then removed under it says so
    /// and exits 6, having deleted only rows whose archive lines were still in the named file
    /// (at most the one batch between its last check and its commit more).
    #[test]
    fn sqlite_an_archive_being_written_is_never_replaced_and_its_removal_stops_the_clean() {
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 2000, 1);
        let dir = bench.dir.path();
        std::fs::create_dir(dir.join("x")).unwrap();
        let archive = dir.join("archive.jsonl");
        let shown = archive.display().to_string();
        let mut clean = bench
            .cmd(&["clean", "--batch-size", "1", "--sleep", "100ms", "--archive", &shown])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_until(30, "the clean appends to its archive", || {
            std::fs::read_to_string(&archive).is_ok_and(|t| t.lines().count() >= 2)
        });
        let other = dir.join("x/../archive.jsonl").display().to_string();
        for path in [&shown, &other] {
            bench.run(&["export", "--file", path]).fails(2, "a clean is writing");
            bench.run(&["clean", "--metrics-file", path]).fails(2, "a clean is writing");
        }
        let before_removal = std::fs::read_to_string(&archive).unwrap().lines().count() as i64;
        std::fs::remove_file(&archive).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while clean.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if clean.try_wait().unwrap().is_none() {
            let _ = clean.kill();
            panic!("the clean went on after its archive was removed");
        }
        let out = clean.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(6), "{stderr}");
        assert!(stderr.contains("was removed or replaced by another file"), "{stderr}");
        let deleted = 2000 - count(&bench, "task_state_store");
        assert!(deleted <= before_removal + 1, "{deleted} rows deleted, {before_removal} archived: {stderr}");
    }

    /// A clean as root that died (`kill -9`) left its lock file; a later clean as the user who
    /// owns the database takes the lock over (no process holds it) and removes it, instead of
    /// failing with "Permission denied" until someone deletes the file.
    #[test]
    fn sqlite_a_lock_file_a_dead_root_clean_left_is_taken_over_by_another_user() {
        if !running_as_root() {
            eprintln!("skipped: needs root, to clean as another user");
            return;
        }
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 2000, 1);
        let lock = bench.dir.path().join("airflow.db.state-store-clean.lock");
        let mut first = bench
            .cmd(&["clean", "--batch-size", "1", "--sleep", "100ms"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_until(30, "the first clean takes its lock", || lock.exists());
        first.kill().unwrap();
        first.wait().unwrap();
        assert!(lock.exists(), "kill -9 leaves the lock file");
        assert_eq!(std::fs::metadata(&lock).unwrap().uid(), 0);
        // The database and its directory become nobody's; the lock file stays root's.
        for entry in std::fs::read_dir(bench.dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path != lock {
                assert!(Command::new("chown").args(["-R", "nobody"]).arg(&path).status().unwrap().success());
            }
        }
        assert!(Command::new("chown").arg("nobody").arg(bench.dir.path()).status().unwrap().success());
        let plain = bench.cmd(&["clean"]);
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]);
        c.arg(plain.get_program()).args(plain.get_args());
        for (key, value) in plain.get_envs() {
            if let Some(value) = value {
                c.env(key, value);
            }
        }
        let run = Run::from(c.stdin(Stdio::null()).output().unwrap(), &["clean"]);
        run.success();
        assert!(!lock.exists(), "the lock file is removed at the end");
        assert_eq!(count(&bench, EXPIRED), 0);
    }

    /// `command` as `nobody`, with no supplementary groups (util-linux `setpriv`).
    fn as_nobody(command: &Command) -> Command {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]);
        c.arg(command.get_program()).args(command.get_args());
        for (key, value) in command.get_envs() {
            if let Some(value) = value {
                c.env(key, value);
            }
        }
        c
    }

    /// A clean as root killed with `kill -9`, leaving its lock file behind: the path of the file.
    fn lock_file_of_a_killed_root_clean(bench: &Bench) -> PathBuf {
        let lock = bench.dir.path().join("airflow.db.state-store-clean.lock");
        let mut first = bench
            .cmd(&["clean", "--batch-size", "1", "--sleep", "100ms"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_until(30, "the first clean takes its lock", || lock.exists());
        first.kill().unwrap();
        first.wait().unwrap();
        assert!(lock.exists(), "kill -9 leaves the lock file");
        lock
    }

    /// A lock file a killed root clean left cannot be held by another local user: it is
    /// 0600, so `nobody`, who can search the directory but not write it, cannot open it to
    /// `flock` it, and the next clean runs. It used to be 0444: any user who could reach it
    /// held it, and every clean exited 7.
    #[test]
    fn sqlite_a_lock_file_left_behind_cannot_be_held_by_another_user() {
        if !running_as_root() {
            eprintln!("skipped: needs root, to lock as another user");
            return;
        }
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 2000, 1);
        let lock = lock_file_of_a_killed_root_clean(&bench);
        let mode = std::fs::metadata(&lock).unwrap().permissions().mode() & 0o777;
        std::fs::set_permissions(bench.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut flock = Command::new("flock");
        flock.args(["-n"]).arg(&lock).args(["sleep", "60"]);
        let mut stranger = as_nobody(&flock).stderr(Stdio::null()).spawn().unwrap();
        // Given the time to open and lock it, were it able to.
        std::thread::sleep(Duration::from_millis(500));
        let run = bench.run(&["clean"]);
        let _ = stranger.kill();
        let _ = stranger.wait();
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(count(&bench, EXPIRED), 0);
        assert!(!lock.exists(), "the lock file is removed at the end");
        assert_eq!(mode, 0o600, "the lock file is readable by its owner alone");
    }

    /// A lock file a killed root clean left in a directory where `nobody` may create files but
    /// not remove root's (sticky, as /tmp is): `nobody`'s clean cannot take it over, and says
    /// which file, whose it is, and what removing it takes (exit 4).
    #[test]
    fn sqlite_a_lock_file_another_user_cannot_replace_is_named() {
        if !running_as_root() {
            eprintln!("skipped: needs root, to clean as another user");
            return;
        }
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 2000, 1);
        let lock = lock_file_of_a_killed_root_clean(&bench);
        for entry in std::fs::read_dir(bench.dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path != lock {
                assert!(Command::new("chown").arg("nobody").arg(&path).status().unwrap().success());
            }
        }
        std::fs::set_permissions(bench.dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let out = as_nobody(&bench.cmd(&["clean"])).stdin(Stdio::null()).output().unwrap();
        let run = Run::from(out, &["clean"]);
        let run = run.fails(4, "airflow.db.state-store-clean.lock");
        assert!(
            run.stderr.contains("uid 0") && run.stderr.contains("write on its directory"),
            "{}",
            run.stderr
        );
        assert!(lock.exists());
        std::fs::remove_file(&lock).unwrap();
        let out = as_nobody(&bench.cmd(&["clean"])).stdin(Stdio::null()).output().unwrap();
        Run::from(out, &["clean"]).success();
    }

    /// A symlink planted where the clean lock file goes: the clean refuses it (exit 4) and
    /// never creates the link's target (as root, that could be any file).
    #[test]
    fn sqlite_clean_lock_file_never_follows_a_symlink() {
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 20, 2);
        let victim = bench.dir.path().join("victim");
        let lock = bench.dir.path().join("airflow.db.state-store-clean.lock");
        std::os::unix::fs::symlink(&victim, &lock).unwrap();
        bench.unchanged(|| bench.run(&["clean"]).fails(4, "clean lock file"));
        assert!(!victim.exists(), "the symlink's target was created");
        std::fs::remove_file(&lock).unwrap();
        bench.run(&["clean"]).success();
    }

    /// One clean at a time per database file, whatever path names it: while a clean runs
    /// through the real path, one through a symlink or `x/../` exits 7.
    #[test]
    fn sqlite_one_clean_at_a_time_whatever_the_path_spelling() {
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 2000, 1);
        let dir = bench.dir.path();
        std::fs::create_dir(dir.join("x")).unwrap();
        std::os::unix::fs::symlink(&bench.db, dir.join("link.db")).unwrap();
        let mut first = bench
            .cmd(&["clean", "--batch-size", "1", "--sleep", "100ms"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let lock = dir.join("airflow.db.state-store-clean.lock");
        wait_until(30, "the first clean takes its lock", || lock.exists());
        for other in ["link.db", "x/../airflow.db"] {
            let url = format!("sqlite:///{}", dir.join(other).display());
            let run = bench.run(&["clean", "--conn", &url]).fails(7, "another state-store clean is running");
            // The holder, as `/proc/locks` shows it.
            assert!(run.stderr.contains(&format!("held by pid {}", first.id())), "{}", run.stderr);
        }
        assert!(Command::new("kill").args(["-TERM", &first.id().to_string()]).status().unwrap().success());
        assert_eq!(first.wait().unwrap().code(), Some(143));
    }

    /// The name the race attacker cycles, and the file root owns that it points a symlink at:
    /// set only for the attacker's own process (see `sqlite_file_race_never_changes_a_file_root_owns`).
    const RACE_NAME: &str = "STATE_STORE_TEST_RACE_NAME";
    const RACE_VICTIM: &str = "STATE_STORE_TEST_RACE_VICTIM";

    /// The attacker of the file-race harness, run by it as `nobody` in a directory `nobody`
    /// owns: as fast as it can, it renames a FIFO, a symlink to the file root owns and a file
    /// of its own (holding an archive line, so an archive would take it for one) over the
    /// name, and removes it, in turns. It ends by itself after two minutes, should the harness
    /// fail to kill it. Run by hand, it does nothing.
    #[test]
    #[ignore = "the attacker of sqlite_file_race_never_changes_a_file_root_owns, run by it as another user"]
    fn file_race_attacker() {
        let (Some(name), Some(victim)) = (std::env::var_os(RACE_NAME), std::env::var_os(RACE_VICTIM)) else {
            return;
        };
        let name = PathBuf::from(name);
        let dir = name.parent().unwrap().to_path_buf();
        let (fifo, link, own) = (dir.join(".a-fifo"), dir.join(".a-link"), dir.join(".a-own"));
        let line = std::fs::read(&victim).unwrap_or_default();
        let until = Instant::now() + Duration::from_secs(120);
        let mode = rustix::fs::Mode::from_raw_mode(0o666);
        let make_fifo = || {
            let _ = rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, mode, 0);
        };
        let mut kept = 0;
        while Instant::now() < until {
            make_fifo();
            let _ = std::fs::rename(&fifo, &name);
            let _ = std::fs::remove_file(&name);
            let _ = std::os::unix::fs::symlink(&victim, &link);
            let _ = std::fs::rename(&link, &name);
            let _ = std::fs::remove_file(&name);
            let _ = std::fs::write(&own, &line);
            let _ = std::fs::rename(&own, &name);
            // Its own file, taken back and kept a while: a file of nobody's that grows
            // received what a run wrote (see `leaked`).
            kept = (kept + 1) % 16;
            let _ = std::fs::rename(&name, dir.join(format!(".a-kept-{kept}")));
        }
    }

    /// The files of nobody's in `dir` that are longer than the attacker wrote them: a run
    /// wrote into them.
    fn leaked(dir: &Path, written: u64) -> Vec<String> {
        let nobody = |m: &std::fs::Metadata| m.uid() != 0;
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.metadata().is_ok_and(|m| m.is_file() && nobody(&m) && m.len() > written))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// The attacker's process group, killed when dropped: at the end of a phase, and when the
    /// harness fails.
    struct Attacker(std::process::Child);

    impl Attacker {
        fn start(name: &Path, victim: &Path) -> Attacker {
            use std::os::unix::process::CommandExt;
            let exe = std::env::current_exe().unwrap();
            let child = Command::new("setpriv")
                .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
                .arg(exe)
                .args([
                    "--exact",
                    "files::file_race_attacker",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(RACE_NAME, name)
                .env(RACE_VICTIM, victim)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .process_group(0)
                .spawn()
                .expect("setpriv (util-linux)");
            Attacker(child)
        }
    }

    impl Drop for Attacker {
        fn drop(&mut self) {
            let group = format!("-{}", self.0.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            let _ = self.0.wait();
        }
    }

    /// The file-race harness. Another user (`nobody`) owns the directory of the outputs (as
    /// node_exporter's textfile directory often is) and of the database, and cycles each
    /// output's name between a FIFO, nothing, a symlink to a file root owns and a file of its
    /// own, while root's `export --file`, `clean --metrics-file`, `clean --archive` and a
    /// clean's lock file use that name, run after run, for about 12 s each. After every run
    /// the file root owns is byte for byte as it was, and no run panics.
    #[test]
    fn sqlite_file_race_never_changes_a_file_root_owns() {
        if !running_as_root() || Command::new("setpriv").arg("--version").output().is_err() {
            eprintln!("skipped: needs root and setpriv (util-linux), to race as another user");
            return;
        }
        let bench = with_run(Dialect::Sqlite);
        let dir = bench.dir.path();
        // The victim lies outside the attacker's directory, holding an archive line.
        let outside = support::TempDir::new();
        let victim = outside.path().join("precious.jsonl");
        bench.run(&cmd(&["set", "victim", "1"], &task(&[]))).success();
        let line = bench.run(&["export"]).success().stdout;
        std::fs::write(&victim, &line).unwrap();
        bench.run(&cmd(&["delete", "victim"], &task(&[]))).success();
        assert!(Command::new("chown").arg("nobody").arg(dir).status().unwrap().success());
        let name = dir.join("out");
        let shown = name.display().to_string();
        let lock = dir.join("airflow.db.state-store-clean.lock");
        let phases: Vec<(&Path, Vec<&str>)> = vec![
            (&name, vec!["export", "--file", &shown]),
            (&name, vec!["clean", "--metrics-file", &shown]),
            (&name, vec!["clean", "--archive", &shown]),
            (&lock, vec!["clean"]),
        ];
        let mut runs = 0;
        for (target, args) in &phases {
            let attacker = Attacker::start(target, &victim);
            let until = Instant::now() + Duration::from_secs(12);
            while Instant::now() < until {
                if args[0] == "clean" {
                    bench.exec("DELETE FROM task_state_store");
                    seed_bulk(&bench, 3, 1);
                }
                let run = bench.run(args);
                runs += 1;
                assert!(matches!(run.code, 0 | 2 | 4 | 6), "{run:?}");
                assert!(
                    std::fs::read(&victim).unwrap() == line.as_bytes(),
                    "run {runs} of {args:?} changed the file root owns: {run:?}"
                );
                let leaked = leaked(target.parent().unwrap(), line.len() as u64);
                assert!(
                    leaked.is_empty(),
                    "run {runs} of {args:?} wrote into {leaked:?} of nobody's: {run:?}"
                );
            }
            drop(attacker);
        }
        eprintln!("file race: {runs} runs, the file root owns unchanged");
    }
}

// ---------------------------------------------------------------- import_edges
//
// What `import` does with a file a crash cut short, with rows the database cannot hold, with
// a file that changes between its two passes, and with keys MySQL's collation takes for one.

mod import_edges {
    use super::*;

    /// An export line of a task row of the bench's run, as `export` writes it.
    fn import_line(run_id: &str, key: &str, value: &str) -> String {
        let value = serde_json::to_string(value).unwrap();
        let key = serde_json::to_string(key).unwrap();
        format!(
            r#"{{"kind": "task", "dag_id": "{DAG}", "run_id": "{run_id}", "task_id": "load", "map_index": -1, "key": {key}, "value": {value}, "updated_at": "2026-01-01T00:00:00.000000Z", "expires_at": null}}"#
        )
    }

    /// `import` started in the background, its stderr in a file that `wait_for` polls.
    struct Importing {
        child: std::process::Child,
        stderr: std::path::PathBuf,
    }

    impl Importing {
        fn start(bench: &Bench, args: &[&str]) -> Importing {
            let stderr = bench.dir.path().join(format!("import-{}.err", std::process::id()));
            let child = bench
                .cmd(args)
                .stdout(Stdio::piped())
                .stderr(std::fs::File::create(&stderr).unwrap())
                .spawn()
                .unwrap();
            Importing { child, stderr }
        }

        fn wait_for(&self, needle: &str) {
            wait_until(60, needle, || {
                std::fs::read_to_string(&self.stderr).unwrap_or_default().contains(needle)
            });
        }

        fn finish(self) -> Run {
            let out = self.child.wait_with_output().unwrap();
            Run {
                args: Vec::new(),
                code: out.status.code().unwrap_or(-1),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: std::fs::read_to_string(&self.stderr).unwrap(),
            }
        }
    }

    contract! {
        /// An archive cut by a crash: its last line half a row, or a half row with the next run's
        /// rows appended after it. Without --skip-damaged the file is refused and nothing is
        /// written; with it every whole row is restored, each damaged line is named, counted and
        /// the exit code is 11, in a dry run too.
        fn restore_every_whole_line_of_a_cut_archive(d: Dialect) {
            let bench = with_run(d);
            let lines: Vec<String> = (0..4).map(|i| import_line(RUN, &format!("k{i}"), &i.to_string())).collect();
            let half = |line: &str| line[..line.len() / 2].to_string();
            let file = bench.dir.path().join("archive.jsonl");
            let path = file.to_str().unwrap();
            let cut_last = format!("{}\n{}\n{}", lines[0], lines[1], half(&lines[2]));
            let glued = format!("{}\n{}{}\n{}\n", lines[0], half(&lines[1]), lines[2], lines[3]);
            for (text, restored, bad_line, why) in
                [(&cut_last, 2, 3, "cut short"), (&glued, 3, 2, "cut short, and the whole row after them is restored")]
            {
                std::fs::write(&file, text).unwrap();
                let refused = bench.unchanged(|| bench.run(&["import", path]).code(2));
                assert!(refused.stderr.starts_with(&format!("error: {path} line {bad_line}: ")), "{refused:?}");
                assert!(refused.stderr.contains("--skip-damaged"), "{refused:?}");
                let dry = bench.unchanged(|| bench.run(&["import", path, "--skip-damaged", "--dry-run", "-o", "json"]).code(11));
                assert_eq!(fields(&dry.json(), &["task_rows", "skipped_damaged"]), json!([restored, 1]), "{dry:?}");
                let run = bench.run(&["import", path, "--skip-damaged", "--batch-size", "1", "-o", "json"]).code(11);
                assert_eq!(fields(&run.json(), &["task_rows", "inserted", "skipped_damaged"]), json!([restored, restored, 1]));
                assert!(run.stderr.contains(&format!("warning: {path} line {bad_line}: damaged, skipped: ")), "{run:?}");
                assert!(run.stderr.contains(why), "{run:?}");
                assert!(run.stderr.contains(", 1 damaged line(s) skipped"), "{run:?}");
                assert!(
                    run.stderr.ends_with(&format!("error: {path}: 1 damaged line(s) skipped (line {bad_line}); every whole line was restored\n")),
                    "{run:?}"
                );
                assert_eq!(count(&bench, "task_state_store"), restored);
                bench.exec("DELETE FROM task_state_store");
            }
        }

        /// Rows the database cannot hold fail the first pass, naming their line, with nothing
        /// written, however many good rows come before them and however small the batches.
        fn refuse_rows_the_database_cannot_hold_before_writing(d: Dialect) {
            let bench = with_run(d);
            let good: String = (0..5).map(|i| import_line(RUN, &format!("k{i}"), "1") + "\n").collect();
            let long_task = import_line(RUN, "k", "1").replace("\"task_id\": \"load\"", &format!("\"task_id\": \"{}\"", "t".repeat(251)));
            let mut cases = vec![
                (import_line(RUN, &"é".repeat(513), "1"), "\"key\" is 513 characters long"),
                (long_task, "\"task_id\" is 251 characters long"),
                (import_line(RUN, "k", "1").replace("\"map_index\": -1", "\"map_index\": 2147483648"), "\"map_index\" 2147483648 is out of range"),
                (import_line(RUN, "big", &"x".repeat(65_536)), "max_value_storage_bytes = 65535"),
            ];
            if d == Dialect::Postgres {
                cases.push((import_line(RUN, "nul\u{0}key", "1"), "NUL"));
            }
            let file = bench.dir.path().join("in.jsonl");
            let path = file.to_str().unwrap();
            for (bad, needle) in cases {
                std::fs::write(&file, format!("{good}{bad}\n")).unwrap();
                for extra in [&["--batch-size", "1"][..], &["--dry-run"][..]] {
                    let run = bench.unchanged(|| bench.run(&cmd(&["import", path], extra)).code(2));
                    assert!(run.stderr.starts_with(&format!("error: {path} line 6: ")), "{run:?}");
                    assert!(run.stderr.contains(needle), "{needle}: {run:?}");
                }
            }
            // --allow-large takes a value over the configured limit.
            std::fs::write(&file, import_line(RUN, "big", &"x".repeat(65_536)) + "\n").unwrap();
            bench.run(&["import", path, "--allow-large"]).success();
            // A line longer than any row the limits allow is refused by its length, unread.
            std::fs::write(&file, format!("{good}{}\n", import_line(RUN, "huge", &"x".repeat(2 << 20)))).unwrap();
            let run = bench.unchanged(|| bench.run(&["import", path]).code(2));
            assert!(run.stderr.starts_with(&format!("error: {path} line 6: the line is longer than 458746 bytes")), "{run:?}");
        }

        /// The second pass reads exactly what the first checked. Each import is held between its
        /// passes by a lock on the row its first batch writes; meanwhile the file is appended to
        /// (the rows appended are not imported, and nothing goes uncounted), rewritten near its
        /// end (the import stops before the changed lines, saying how many rows the batches before
        /// committed), or a dag run is deleted (the batch that fails names its line and the rows
        /// committed before it).
        fn pass_two_reads_the_bytes_pass_one_checked(d: Dialect) {
            use std::io::Write;
            let bench = with_run(d);
            bench.add_dag_run_with(DAG, "second", &["load"]);
            let k = bench.key_col();
            let rows: String = (0..3000).map(|i| import_line(RUN, &format!("k{i:04}"), "1") + "\n").collect();
            let cut = &import_line(RUN, "cut", "1")[..40];
            let file = bench.dir.path().join("archive.jsonl");
            let path = file.to_str().unwrap();
            let args = ["import", path, "--skip-damaged", "--batch-size", "1000", "--on-conflict", "overwrite", "-o", "json"];
            let hold = || {
                bench.run(&cmd(&["set", "k0000", "0"], &task(&[]))).success();
                bench.hold(&format!("UPDATE task_state_store SET value = '2' WHERE {k} = 'k0000'"))
            };

            // Appended to: only the checked bytes are read.
            std::fs::write(&file, format!("{rows}{cut}")).unwrap();
            let holder = hold();
            let import = Importing::start(&bench, &args);
            import.wait_for("damaged, skipped");
            let mut append = std::fs::OpenOptions::new().append(true).open(&file).unwrap();
            write!(append, "\n{}\n{}\n", import_line(RUN, "late", "1"), import_line("no_such_run", "late", "1")).unwrap();
            holder.commit_with("");
            let run = import.finish().code(11);
            assert_eq!(fields(&run.json(), &["task_rows", "skipped_missing", "skipped_damaged"]), json!([3000, 0, 1]));
            assert_eq!(count(&bench, &format!("task_state_store WHERE {k} = 'late'")), 0);

            // Rewritten near its end: the import stops before the changed lines.
            bench.exec("DELETE FROM task_state_store");
            std::fs::write(&file, format!("{rows}{cut}")).unwrap();
            let holder = hold();
            let import = Importing::start(&bench, &args);
            import.wait_for("damaged, skipped");
            // One byte of line 2999's value, in place, so that the lines before stay as they were.
        let at = rows.find("\"k2999\", \"value\": \"1\"").unwrap() + "\"k2999\", \"value\": \"".len();
        std::os::unix::fs::FileExt::write_at(&std::fs::OpenOptions::new().write(true).open(&file).unwrap(), b"7", at as u64).unwrap();
            holder.commit_with("");
            let run = import.finish().code(2);
            assert!(
                run.stderr.contains(&format!(
                    "error: import of {path} stopped: the 2000 row(s) the batches before committed stay imported: {path} changed after the first pass checked it"
                )),
                "{run:?}"
            );
            assert_eq!(count(&bench, "task_state_store"), 2000);

            // A dag run deleted between the passes: its batch fails, and says where.
        bench.exec("DELETE FROM task_state_store");
        let lines = [import_line(RUN, "k0000", "1"), import_line(RUN, "a", "1"), import_line("second", "b", "1"), import_line(RUN, "c", "1")];
        std::fs::write(&file, format!("{}\n{cut}", lines.join("\n"))).unwrap();
        let holder = hold();
        let import = Importing::start(&bench, &["import", path, "--skip-damaged", "--batch-size", "2", "--on-conflict", "overwrite"]);
        import.wait_for("damaged, skipped");
        holder.commit_with("DELETE FROM dag_run WHERE run_id = 'second';");
        let run = import.finish().code(4);
        assert!(
            run.stderr.contains(&format!(
                "error: import of {path} stopped: the 2 row(s) the batches before committed stay imported: {path} line 3: this batch (lines 3-4) was rolled back: "
            )),
            "{run:?}"
        );
        assert_eq!(count(&bench, "task_state_store"), 2);
    }
    }

    /// MySQL's `_bin` collations are PAD SPACE: `'x'` and `'x '` are one key to its unique keys
    /// and equal to its `=`. `list`'s filters still match exactly; a lookup (a key, a dag run,
    /// an asset) compares as the database does, as Airflow's own lookups do (the interop tier
    /// checks that against Airflow); and `import` refuses two rows the database would merge, in
    /// a dry run and with `--on-conflict fail` too, naming both lines, before anything is
    /// written.
    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_pad_space_keys_are_one_row_and_filters_match_exactly() {
        let bench = with_run(Dialect::Mysql);
        bench.add_dag_run_with("padded", "r1", &["load"]);
        bench.add_dag_run_with("padded ", "r2", &["load"]);
        for (dag, run) in [("padded", "r1"), ("padded ", "r2")] {
            bench.run(&["set", "k", "1", "--dag-id", dag, "--run-id", run, "--task-id", "load"]).success();
        }
        let listed = |args: &[&str]| {
            let run = bench.run(&cmd(&["list", "-o", "json"], args)).success();
            run.json()
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["run_id"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(listed(&["--dag-id", "padded"]), ["r1"]);
        assert_eq!(listed(&["--dag-id", "padded "]), ["r2"]);
        assert_eq!(listed(&["--dag-id", "padded", "--task-id", "load "]), Vec::<String>::new());
        // Lookups compare as MySQL (and so Airflow) does: `k ` is the stored `k`.
        let scope = ["--dag-id", "padded", "--run-id", "r1", "--task-id", "load"];
        let got = bench.run(&cmd(&["get", "k ", "-o", "json"], &scope)).success();
        assert_eq!(got.json()["key"], "k");
        bench.add_asset("orders", "s3://orders/", true);
        bench.run(&["set", "a", "1", "--asset", "orders "]).success();
        bench.run(&["get", "a", "--asset", "orders"]).success();
        let spaced = ["--dag-id", "padded", "--run-id", "r1 ", "--task-id", "load"];
        bench.run(&cmd(&["clear", "--yes"], &spaced)).success();
        assert_eq!(listed(&["--dag-id", "padded"]), Vec::<String>::new());
        assert_eq!(listed(&["--dag-id", "padded "]), ["r2"]);
        bench.run(&["set", "k", "1", "--dag-id", "padded", "--run-id", "r1", "--task-id", "load"]).success();

        let file = bench.dir.path().join("padded.jsonl");
        let path = file.to_str().unwrap();
        std::fs::write(&file, format!("{}\n{}\n", import_line(RUN, "p", "1"), import_line(RUN, "p ", "2")))
            .unwrap();
        for extra in [&[][..], &["--dry-run"][..], &["--on-conflict", "fail"][..]] {
            let run = bench.unchanged(|| bench.run(&cmd(&["import", path], extra)).code(2));
            assert!(
                run.stderr.starts_with(&format!("error: {path} line 2: task key \"p \" of dag_id=\"{DAG}\"")),
                "{run:?}"
            );
            assert!(run.stderr.contains("differs from the one on line 1 only in trailing spaces"), "{run:?}");
        }
        // A row of the file and a stored row that MySQL takes for one, either way round.
        bench.run(&cmd(&["set", "q ", "1"], &task(&[]))).success();
        bench.run(&cmd(&["set", "s", "1"], &task(&[]))).success();
        for (line, stored) in [("q", "\"q \" of task_id=\"load\""), ("s ", "\"s\" of task_id=\"load\"")] {
            std::fs::write(
                &file,
                format!("{}\n{}\n", import_line(RUN, "new", "1"), import_line(RUN, line, "2")),
            )
            .unwrap();
            for extra in [&[][..], &["--dry-run"][..]] {
                let run = bench.unchanged(|| bench.run(&cmd(&["import", path], extra)).code(2));
                assert!(run.stderr.contains(&format!("line 2: task key \"{line}\"")), "{run:?}");
                assert!(
                    run.stderr
                        .contains(&format!("differs from the stored key {stored} only in trailing spaces")),
                    "{run:?}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------- hangs and timeouts

/// Every wait has an edge: a connection that stalls (through a proxy that stops forwarding),
/// a lock held by another session, a `_cmd` command that never ends or never stops printing,
/// and a signal that reaches a blocked clean. Each run is bounded here too, so a regression
/// fails the test instead of hanging it.
mod hangs {
    use super::*;
    use std::process::Child;

    /// The outcome of a run that the test ends itself if it outlives `limit`.
    struct Ended {
        code: Option<i32>,
        stdout: String,
        stderr: String,
        took: Duration,
    }

    fn spawn(bench: &Bench, args: &[&str]) -> (Child, Instant) {
        let mut command = bench.cmd(args);
        if bench.dialect == Dialect::Sqlite {
            // The `_cmd` tests' URL comes from the config file's command.
            command.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN");
        }
        let child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn state-store");
        (child, Instant::now())
    }

    /// Waits for `child` at most `limit` from `started`; kills it (and fails) past that.
    #[track_caller]
    fn ended_within(mut child: Child, started: Instant, limit: Duration, what: &str) -> Ended {
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > limit {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "{what}: still running after {:?}; stderr: {}",
                    limit,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let took = started.elapsed();
        let out = child.wait_with_output().unwrap();
        Ended {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            took,
        }
    }

    fn run_within(bench: &Bench, args: &[&str], limit: Duration) -> Ended {
        let (child, started) = spawn(bench, args);
        ended_within(child, started, limit, &args.join(" "))
    }

    /// A lock another session holds on the task table, which every read of it waits for.
    fn table_lock(bench: &Bench) -> support::Holder {
        bench.hold(match bench.dialect {
            Dialect::Postgres => "LOCK TABLE task_state_store IN ACCESS EXCLUSIVE MODE",
            _ => "LOCK TABLES task_state_store WRITE",
        })
    }

    /// Whether a session of the bench's database is waiting for a lock now.
    fn waiting_for_lock(bench: &Bench) -> bool {
        let db = database_name(bench);
        let sql = match bench.dialect {
            Dialect::Postgres => format!(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' AND wait_event_type = 'Lock'"
            ),
            _ => format!(
                "SELECT count(*) FROM information_schema.processlist WHERE db = '{db}' \
                 AND state LIKE 'Waiting for table%'"
            ),
        };
        bench.scalar(&sql).trim() != "0"
    }

    /// Whether the bench's database has a session of the tool (through the proxy or not).
    fn tool_sessions(bench: &Bench) -> usize {
        let db = database_name(bench);
        let sql = match bench.dialect {
            Dialect::Postgres => format!(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' AND application_name = 'state-store'"
            ),
            _ => format!(
                "SELECT count(*) FROM information_schema.processlist WHERE db = '{db}' AND id <> CONNECTION_ID()"
            ),
        };
        bench.scalar(&sql).trim().parse().unwrap()
    }

    /// Reads behind a table lock (`LOCK TABLE`, `LOCK TABLES … WRITE`: what `ALTER` and
    /// `airflow db migrate` take) end with exit 4 after the bounded lock wait, `clean
    /// --dry-run` after its `--lock-timeout`. They used to wait for as long as the lock was held.
    fn reads_behind_a_table_lock_end_in_bounded_time(d: Dialect) {
        let mut bench = with_run(d);
        seed_bulk(&bench, 10, 2);
        bench.env("AIRFLOW__STATE_STORE__DATABASE_TIMEOUT", "3");
        let _lock = table_lock(&bench);
        let get = ["get", "--dag-id", DAG, "--run-id", RUN, "--task-id", "t", "k100001"];
        let dry_run = ["clean", "--dry-run", "--lock-timeout", "1s"];
        for (args, bound) in [
            (&get[..], 3),
            (&["list"][..], 3),
            (&["export"][..], 3),
            (&["stats"][..], 3),
            (&["doctor"][..], 3),
            (&dry_run[..], 1),
        ] {
            let ended = run_within(&bench, args, Duration::from_secs(20));
            assert_eq!(ended.code, Some(4), "{args:?}: {}", ended.stderr);
            assert!(ended.stderr.contains("error: "), "{args:?}: {}", ended.stderr);
            assert!(ended.took < Duration::from_secs(bound + 4), "{args:?} took {:?}", ended.took);
        }
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_reads_behind_a_table_lock_end_in_bounded_time() {
        reads_behind_a_table_lock_end_in_bounded_time(Dialect::Postgres);
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_reads_behind_a_table_lock_end_in_bounded_time() {
        reads_behind_a_table_lock_end_in_bounded_time(Dialect::Mysql);
    }

    /// The default clean off a terminal behind a table lock (`LOCK TABLES … WRITE`, `LOCK
    /// TABLE … ACCESS EXCLUSIVE`) waits for the table once, `--lock-timeout`, and ends with exit
    /// 4 or 7. On MariaDB its first statement, which does not wait for a row lock, did wait for
    /// the table, and its retry that skips held rows waited again; then the read of the primary
    /// key's ends for the progress lines waited before either, on both servers.
    fn clean_behind_a_table_lock_waits_once(d: Dialect) {
        let bench = with_run(d);
        seed_bulk(&bench, 20, 2);
        let _lock = table_lock(&bench);
        let ended = run_within(&bench, &["clean", "--lock-timeout", "3s"], Duration::from_secs(30));
        assert!(matches!(ended.code, Some(4 | 7)), "{}", ended.stderr);
        assert!(ended.took < Duration::from_millis(5500), "took {:?}: {}", ended.took, ended.stderr);
        assert!(ended.took >= Duration::from_secs(3), "took {:?}: {}", ended.took, ended.stderr);
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_clean_behind_a_table_lock_waits_once() {
        clean_behind_a_table_lock_waits_once(Dialect::Mysql);
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_clean_behind_a_table_lock_waits_once() {
        clean_behind_a_table_lock_waits_once(Dialect::Postgres);
    }

    /// `list` and `get` whose connection stalls mid-statement (the proxy stops forwarding while
    /// the statement waits behind a lock, so the server's own answer never arrives) end with
    /// exit 4 within `database_timeout` + 5 s of the statement. They used to hang for good.
    fn stalled_reads_end_with_exit_4(d: Dialect) {
        for args in
            [&["list"][..], &["get", "--dag-id", DAG, "--run-id", RUN, "--task-id", "t", "k100001"][..]]
        {
            let mut bench = with_run(d);
            seed_bulk(&bench, 10, 2);
            let (proxy, url) = bench.via_proxy();
            bench.env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", &url);
            bench.env("AIRFLOW__STATE_STORE__DATABASE_TIMEOUT", "3");
            let lock = table_lock(&bench);
            let (child, started) = spawn(&bench, args);
            wait_until(20, "the read waits for the lock", || waiting_for_lock(&bench));
            proxy.stall();
            let ended = ended_within(child, started, Duration::from_secs(30), &args.join(" "));
            drop(lock);
            assert_eq!(ended.code, Some(4), "{args:?}: {}", ended.stderr);
            assert!(ended.stderr.contains("stalled"), "{args:?}: {}", ended.stderr);
            assert!(ended.stderr.contains("127.0.0.1") || d == Dialect::Mysql, "{}", ended.stderr);
            // 3 s statement bound + 5 s, plus the start-up and a loaded machine's slack.
            assert!(ended.took < Duration::from_secs(8 + 4), "{args:?} took {:?}", ended.took);
        }
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_stalled_reads_end_with_exit_4() {
        stalled_reads_end_with_exit_4(Dialect::Postgres);
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_stalled_reads_end_with_exit_4() {
        stalled_reads_end_with_exit_4(Dialect::Mysql);
    }

    /// A clean running through a proxy: `n` expired rows deleted one per batch with a pause,
    /// stalled once the first batch is gone.
    fn stalled_clean(bench: &mut Bench, extra: &[&str]) -> (Child, Instant) {
        seed_bulk(bench, 200, 2);
        let (proxy, url) = bench.via_proxy();
        bench.env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", &url);
        let mut args = vec!["clean", "--batch-size", "1", "--sleep", "200ms", "-o", "json"];
        args.extend_from_slice(extra);
        let (child, started) = spawn(bench, &args);
        wait_until(30, "the clean deletes a batch", || count(bench, EXPIRED) < 100);
        proxy.stall();
        // The proxy, and the stalled connections with it, live as long as the test.
        std::mem::forget(proxy);
        (child, started)
    }

    /// `clean --max-duration 2s` whose connection stalls ends by 2 s + the 15 s grace, exit 4,
    /// with its one JSON document (the batches committed so far and the error), however long
    /// the connection's own bound (35 s by default). It used to run on for good.
    fn stalled_clean_ends_by_its_max_duration(d: Dialect) {
        let mut bench = with_run(d);
        let (child, started) = stalled_clean(&mut bench, &["--max-duration", "2s"]);
        let ended = ended_within(child, started, Duration::from_secs(2 + 15 + 10), "stalled clean");
        println!("stalled clean --max-duration 2s on {d:?} ended after {:?}", ended.took);
        assert_eq!(ended.code, Some(4), "{}", ended.stderr);
        assert!(ended.stderr.contains("--max-duration 2s passed 15 s ago"), "{}", ended.stderr);
        assert!(ended.took < Duration::from_secs(2 + 15 + 3), "took {:?}", ended.took);
        let doc: Value =
            serde_json::from_str(ended.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", ended.stdout));
        assert_eq!(doc["error"]["exit_code"], 4, "{doc}");
        let deleted = doc["task_rows_deleted"].as_i64().unwrap();
        assert!(deleted >= 1, "{doc}");
        assert!(100 - count(&bench, EXPIRED) >= deleted, "{doc}");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_stalled_clean_ends_by_its_max_duration() {
        stalled_clean_ends_by_its_max_duration(Dialect::Postgres);
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_stalled_clean_ends_by_its_max_duration() {
        stalled_clean_ends_by_its_max_duration(Dialect::Mysql);
    }

    /// A clean whose connection stalls ends with exit 4 within `database_timeout` + 5 s, and the
    /// server ends the abandoned session within `database_timeout` × 4 (+ `--sleep`) of its
    /// last statement, freeing the clean lock: a later clean is refused (exit 7) no longer than
    /// that. (A 2 s bound here keeps the test short; by default it is 30 s, so 2 min idle.)
    /// The lock used to stay taken, every later clean refused, for hours.
    fn stalled_clean_ends_and_frees_its_lock(d: Dialect) {
        let mut bench = with_run(d);
        bench.env("AIRFLOW__STATE_STORE__DATABASE_TIMEOUT", "2");
        let (child, started) = stalled_clean(&mut bench, &["--lock-timeout", "1s"]);
        let stalled = Instant::now();
        let ended = ended_within(child, started, Duration::from_secs(30), "stalled clean");
        println!("stalled clean (database_timeout 2) on {d:?} ended after {:?}", ended.took);
        assert_eq!(ended.code, Some(4), "{}", ended.stderr);
        assert!(ended.stderr.contains("stalled"), "{}", ended.stderr);
        assert!(stalled.elapsed() < Duration::from_secs(2 + 5 + 3), "took {:?}", ended.took);
        let doc: Value =
            serde_json::from_str(ended.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", ended.stdout));
        assert_eq!(doc["error"]["exit_code"], 4, "{doc}");
        // A later clean, straight to the server (the proxy still holds the stalled connection
        // open), is taken once the server has ended the abandoned session.
        let mut refused = 0;
        loop {
            let run = bench
                .cmd(&["clean"])
                .env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", bench.url())
                .output()
                .unwrap();
            match run.status.code() {
                Some(0) => break,
                Some(7) => refused += 1,
                other => panic!("{other:?}: {}", String::from_utf8_lossy(&run.stderr)),
            }
            assert!(
                stalled.elapsed() < Duration::from_secs(30),
                "still locked out {:?} after the stall",
                stalled.elapsed()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        println!(
            "a later clean on {d:?} was refused {refused} time(s); taken {:?} after the stall",
            stalled.elapsed()
        );
        // 2 s × 4 idle + 0.2 s sleep, from the last statement the server saw.
        assert!(stalled.elapsed() < Duration::from_secs(8 + 4), "{:?}", stalled.elapsed());
        assert_eq!(tool_sessions(&bench), 0, "the abandoned session is gone");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_stalled_clean_ends_and_frees_its_lock() {
        stalled_clean_ends_and_frees_its_lock(Dialect::Postgres);
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_stalled_clean_ends_and_frees_its_lock() {
        stalled_clean_ends_and_frees_its_lock(Dialect::Mysql);
    }

    /// A first SIGTERM to a clean blocked on a write to a stderr nobody reads (a pipe its
    /// `--verbose` lines filled) ends it within the 10 s grace, exit 143: the ending's own
    /// words may not be written, but nothing they wait for keeps the process alive.
    #[test]
    fn first_sigterm_ends_a_clean_blocked_on_a_full_stderr_within_the_grace() {
        let bench = with_run(Dialect::Sqlite);
        seed_bulk(&bench, 20_000, 1);
        let mut command = bench.cmd(&["clean", "--batch-size", "1", "-v", "-o", "json"]);
        // Never read until the process has ended: its 64 KiB fill within a few hundred batches.
        let child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn state-store");
        let pid = child.id().to_string();
        // The clean is blocked once its stderr is full: the rows stop going.
        let mut left = count(&bench, EXPIRED);
        loop {
            std::thread::sleep(Duration::from_millis(1000));
            let now = count(&bench, EXPIRED);
            if now == left {
                break;
            }
            assert!(now > 0, "the clean ended before its stderr was full");
            left = now;
        }
        let signalled = Instant::now();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let ended = ended_within(
            child,
            signalled,
            Duration::from_secs(10 + 15),
            "SIGTERM to a clean blocked on stderr",
        );
        println!("a clean blocked on its stderr ended {:?} after SIGTERM", ended.took);
        assert_eq!(ended.code, Some(143), "{}", ended.stderr.lines().last().unwrap_or(""));
        assert!(ended.took < Duration::from_secs(10 + 5), "took {:?}", ended.took);
    }

    /// A first SIGTERM to a clean blocked on a stalled connection ends it within the 10 s grace,
    /// exit 143, with its document; it used to do nothing until the network came back.
    fn first_sigterm_ends_a_stalled_clean_within_the_grace(d: Dialect) {
        let mut bench = with_run(d);
        let (child, _) = stalled_clean(&mut bench, &[]);
        // Let the clean block on its next statement first.
        std::thread::sleep(Duration::from_millis(500));
        let signalled = Instant::now();
        Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
        let ended =
            ended_within(child, signalled, Duration::from_secs(10 + 10), "SIGTERM to a stalled clean");
        println!("stalled clean on {d:?} ended {:?} after SIGTERM", ended.took);
        assert_eq!(ended.code, Some(143), "{}", ended.stderr);
        assert!(ended.took < Duration::from_secs(10 + 3), "took {:?}", ended.took);
        assert!(ended.stderr.contains("SIGTERM was not answered within 10 s"), "{}", ended.stderr);
        let doc: Value =
            serde_json::from_str(ended.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", ended.stdout));
        assert_eq!(doc["error"]["exit_code"], 143, "{doc}");
        assert_eq!(doc["interrupted"], true, "{doc}");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_first_sigterm_ends_a_stalled_clean_within_the_grace() {
        first_sigterm_ends_a_stalled_clean_within_the_grace(Dialect::Postgres);
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_first_sigterm_ends_a_stalled_clean_within_the_grace() {
        first_sigterm_ends_a_stalled_clean_within_the_grace(Dialect::Mysql);
    }

    /// Whether a process group has a live member. `kill -0 -- -PGID` would say so, but it also
    /// counts zombies, which stay where PID 1 does not reap orphans (some container inits):
    /// a member counts here when /proc shows it in the group and not a zombie.
    fn group_alive(pgid: &str) -> bool {
        let pgid = pgid.trim();
        let signalled = Command::new("kill")
            .args(["-0", "--", &format!("-{pgid}")])
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success();
        signalled
            && std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
                let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { return false };
                // pid (comm) state ppid pgrp …, where comm may hold spaces.
                let Some((_, rest)) = stat.rsplit_once(") ") else { return false };
                let fields: Vec<&str> = rest.split(' ').collect();
                fields.len() > 2 && fields[2] == pgid && fields[0] != "Z"
            })
    }

    /// A bench whose URL comes from a `_cmd` that records its pid (its process group's id, as
    /// the tool starts it in a group of its own), leaves a child behind, and never ends.
    fn endless_cmd() -> (Bench, std::path::PathBuf) {
        let mut bench = Bench::new();
        let pid_file = bench.dir.path().join("cmd.pid");
        let cfg = bench.write_config(
            "airflow.cfg",
            &format!(
                "[database]\nsql_alchemy_conn_cmd = sh -c 'echo $$ > {}; sleep 1000 & sleep 1000'\n",
                pid_file.display()
            ),
        );
        bench.env("AIRFLOW_CONFIG", cfg.to_str().unwrap());
        (bench, pid_file)
    }

    /// A `_cmd` that never ends is stopped after `[state_store] cmd_timeout`, exit 3 naming the
    /// option, and its whole process group is killed. It used to hang the tool for good.
    #[test]
    fn endless_cmd_times_out_and_its_group_is_killed() {
        let (mut bench, pid_file) = endless_cmd();
        bench.env("AIRFLOW__STATE_STORE__CMD_TIMEOUT", "1");
        let ended = run_within(&bench, &["list"], Duration::from_secs(20));
        assert_eq!(ended.code, Some(3), "{}", ended.stderr);
        assert!(ended.stderr.contains("[state_store] cmd_timeout"), "{}", ended.stderr);
        assert!(ended.took < Duration::from_secs(5), "took {:?}", ended.took);
        let pgid = std::fs::read_to_string(&pid_file).unwrap();
        assert!(!group_alive(pgid.trim()), "the command's process group is gone");
    }

    /// A SIGTERM while a `_cmd` runs ends the tool (143) and kills the command's group.
    #[test]
    fn sigterm_kills_a_running_cmds_group() {
        let (bench, pid_file) = endless_cmd();
        let (child, _) = spawn(&bench, &["list"]);
        wait_until(10, "the command starts", || {
            std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n'))
        });
        Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
        let ended = ended_within(child, Instant::now(), Duration::from_secs(10), "SIGTERM during _cmd");
        assert_eq!(ended.code, Some(143), "{}", ended.stderr);
        let pgid = std::fs::read_to_string(&pid_file).unwrap();
        assert!(!group_alive(pgid.trim()), "the command's process group is gone");
    }

    /// A `_cmd` that prints 10 MB is refused (exit 3, never its output) once it passes 64 KiB,
    /// with the tool's memory bounded: it used to hold all of it (500 MB took 984 MB).
    #[test]
    fn a_cmd_printing_10_mb_is_refused_with_bounded_memory() {
        let mut bench = Bench::new();
        let cfg = bench.write_config(
            "airflow.cfg",
            "[database]\nsql_alchemy_conn_cmd = sh -c 'yes sqlite:////x.db | head -c 10000000'\n",
        );
        bench.env("AIRFLOW_CONFIG", cfg.to_str().unwrap());
        let mut command = Command::new("/usr/bin/time");
        let mut probe = bench.cmd(&["list"]);
        probe.env_remove("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN");
        command.args(["-f", "maxrss_kb=%M", probe.get_program().to_str().unwrap(), "list"]);
        for (key, value) in probe.get_envs() {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        let out = command.stdin(Stdio::null()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tool_lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(tool_lines.len(), 1, "{stderr}");
        assert!(tool_lines[0].contains("more than 64 KiB"), "{stderr}");
        assert!(!tool_lines[0].contains("x.db"), "never the output: {stderr}");
        let rss: u64 = stderr
            .lines()
            .find_map(|l| l.strip_prefix("maxrss_kb="))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{stderr}"));
        assert!(rss < 64 * 1024, "peak RSS {rss} KiB");
    }
}

// ---------------------------------------------------------------- messages and memory

/// What the tool says when something is wrong, with which exit code, and how much it holds:
/// `list` streams its rows, error lines are escaped and bounded, a defect is exit 70.
mod messages {
    use super::*;

    contract! {
        /// `list --limit 0` writes rows as it reads them; a table, which holds its rows to size its
        /// columns, shows at most 10,000 and says how to see the rest.
        fn list_streams_and_bounds_a_table(d: Dialect) {
            let bench = with_run(d);
            let keys: Vec<String> = (0..10_001).map(|i| format!("k{i:05}")).collect();
            let rows: Vec<_> =
                keys.iter().map(|k| ("load", -1, k.as_str(), "1", "2020-01-01 00:00:00.000000", None)).collect();
            bench.insert_task_rows(DAG, RUN, &rows);
            let plain = bench.run(&["list", "--limit", "0", "-o", "plain"]).success();
            assert_eq!(plain.stdout.lines().count(), 10_001);
            assert_eq!(plain.stderr, "");
            let json = bench.run(&["list", "--limit", "0", "-o", "json"]).success();
            assert_eq!(json.json().as_array().unwrap().len(), 10_001);
            let yaml = bench.run(&["list", "--limit", "0", "-o", "yaml"]).success();
            assert_eq!(yaml.stdout.lines().filter(|l| l.starts_with("- ")).count(), 10_001);
            let table = bench
                .run(&["list", "--limit", "0"])
                .success()
                .stderr_has("showing 10000 rows from offset 0; more follow (a table shows at most 10000 rows");
            assert_eq!(table.stdout.lines().count(), 10_002, "a header, its rule and 10,000 rows");
            assert!(table.stdout.contains("k09999") && !table.stdout.contains("k10000"));
            // The next page starts where the table stopped; a --limit under the bound is as before.
            let next = bench.run(&["list", "--offset", "10000", "--limit", "0"]).success();
            assert!(next.stdout.contains("k10000") && next.stderr.is_empty(), "{}", next.stderr);
            bench.run(&["list", "--limit", "3"]).success().stderr_has("--offset 3 for the next page, --limit 0 for all");
        }

        /// A reader that stops reading a long list for a while (`list | less`) is the user's to
        /// end: the list waits for it past every bound of the session (`database_timeout` 1 s,
        /// so a stall bound of 6 s; the pause is 9 s), where the server's statement_timeout and
        /// tcp_user_timeout (PostgreSQL) or net_write_timeout (MySQL) cut it off before.
        fn a_paused_reader_of_a_long_list_is_not_cut_off(d: Dialect) {
            let bench = with_run(d);
            let keys: Vec<String> = (0..20_000).map(|i| format!("k{i:05}")).collect();
            let rows: Vec<_> =
                keys.iter().map(|k| ("load", -1, k.as_str(), "1", "2020-01-01 00:00:00.000000", None)).collect();
            bench.insert_task_rows(DAG, RUN, &rows);
            let mut list = bench.cmd(&["list", "--limit", "0", "-o", "plain"]);
            list.env("AIRFLOW__STATE_STORE__DATABASE_TIMEOUT", "1")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = list.spawn().unwrap();
            let mut stdout = child.stdout.take().unwrap();
            let mut first = [0u8; 4096];
            std::io::Read::read_exact(&mut stdout, &mut first).unwrap();
            std::thread::sleep(std::time::Duration::from_secs(9));
            let mut rest = Vec::new();
            std::io::Read::read_to_end(&mut stdout, &mut rest).unwrap();
            let out = child.wait_with_output().unwrap();
            let text = [&first[..], &rest[..]].concat();
            assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
            assert_eq!(text.iter().filter(|&&b| b == b'\n').count(), 20_000);
        }

        /// A database name or path with a terminal escape in it, and 700 characters long: the
        /// `error:` line escapes it, keeps the password masked, and stops at 500 characters.
        fn error_lines_are_escaped_and_bounded(d: Dialect) {
            let bench = Bench::on(d);
            let name = format!("no\u{1b}[31m{}", "x".repeat(700));
            let url = match d {
                Dialect::Sqlite => format!("sqlite:////nonexistent/{name}.db"),
                _ => Bench::server_url(d, "someone:hunter2secret", &name),
            };
            let run = bench.run(&["list", "--conn", &url]).fails(4, "no\\x1b[31mxxx");
            let line = run.stderr.trim_end_matches('\n');
            assert!(!line.contains('\u{1b}') && !run.stderr.contains("hunter2"), "{line}");
            assert_eq!(line.chars().count(), 500, "{line}");
            assert!(line.ends_with('…'));
        }

        /// A map index past Airflow's 32-bit column is "out of range" (exit 2) for every command
        /// that takes `--map-index`, before the database is asked; SQLite said "not found".
        fn a_map_index_past_32_bits_is_out_of_range(d: Dialect) {
            let bench = with_run(d);
            bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
            bench.add_asset("orders", "s3://orders/", true);
            let big = "2147483648";
            for head in [
                vec!["set", "k", "1", "--map-index", big],
                vec!["set", "k", "1", "--allow-missing-task-instance", "--map-index", big],
                vec!["get", "k", "--map-index", big],
                vec!["delete", "k", "--map-index", big],
                vec!["clear", "--yes", "--map-index", big],
                vec!["list", "--map-index", big],
                vec!["export", "--map-index", big],
            ] {
                let args = if head[0] == "list" || head[0] == "export" {
                    cmd(&head, &["--dag-id", DAG])
                } else {
                    cmd(&head, &task(&[]))
                };
                bench.unchanged(|| bench.run(&args).fails(2, "--map-index 2147483648 is out of range"));
            }
            bench.run(&cmd(&["get", "k", "--map-index", "2147483647"], &task(&[]))).fails(1, "not found");
        }

        /// Adding to a sandbox what it already has is the caller's input (exit 2, as `sandbox
        /// create` of a database with tables), in words, not the driver's `Duplicate entry`
        /// or `UNIQUE constraint failed` (exit 4).
        fn a_sandbox_refuses_what_it_already_has_in_words(d: Dialect) {
            let bench = with_run(d);
            bench.add_asset("orders", "s3://orders/", true);
            let cases: [(&[&str], &str); 3] = [
                (&["sandbox", "add-dag-run", "--dag-id", DAG, "--run-id", RUN], "already has a dag run dag_id=\"fault_orders\""),
                (&["sandbox", "add-task-instance", "--dag-id", DAG, "--run-id", RUN, "--task-id", "load"], "already has the task instance"),
                (&["sandbox", "add-asset", "--name", "orders", "--uri", "s3://orders/"], "already has an asset name=\"orders\""),
            ];
            for (args, needle) in cases {
                bench.unchanged(|| bench.run(args).fails(2, needle));
            }
            bench.run(&["sandbox", "add-dag-run", "--dag-id", DAG, "--run-id", "another"]).success();
        }

        /// An unbatched clean is one transaction however far apart the ids are: on SQLite and
        /// MySQL it deletes in windows of 100,000 ids (each statement short enough for
        /// `database_timeout`), here twelve of them with gaps between. On the servers an
        /// expired row a worker holds (re-setting that key) is skipped within its window, and
        /// the rows around it deleted in the same transaction; a wait would end at the lock
        /// timeout, exit 4.
        fn an_unbatched_clean_covers_every_id_window_in_one_transaction(d: Dialect) {
            let bench = with_run(d);
            seed_bulk(&bench, 40, 2);
            bench.exec("UPDATE task_state_store SET id = id * 30011");
            // k100000 is expired (seed_bulk: i % 2 == 0). Held by its id: an UPDATE by key
            // would scan, and lock, every row.
            let k = bench.key_col();
            let held = bench.scalar(&format!("SELECT id FROM task_state_store WHERE {k} = 'k100000'"));
            let holder = (d != Dialect::Sqlite)
                .then(|| bench.hold(&format!("UPDATE task_state_store SET value = '2' WHERE id = {}", held.trim())));
            let run = bench.run(&["clean", "--batch-size", "0", "--lock-timeout", "5s", "-o", "json"]).success();
            drop(holder);
            let skipped = i64::from(d != Dialect::Sqlite);
            assert_eq!(
                fields(&run.json(), &["task_rows_deleted", "batches", "task_rows_skipped"]),
                json!([20 - skipped, 1, skipped])
            );
            assert_eq!(count(&bench, EXPIRED), skipped);
            assert_eq!(count(&bench, ALIVE), 20);
        }

        /// A batch whose DELETE waited for a lock and timed out was answered by the server:
        /// nothing of it was committed, so the summary does not say it may be deleted (only a
        /// commit that went unanswered, `connection_dropped_mid_clean`, leaves that in doubt).
        fn a_lock_timeout_leaves_no_batch_in_doubt(d: Dialect) {
            let bench = with_run(d);
            seed_bulk(&bench, 40, 2);
            let holder = bench.hold(match d {
                Dialect::Sqlite => "UPDATE task_state_store SET value = value",
                // SELECTs go on; the DELETE (ROW EXCLUSIVE) waits, locked rows or not.
                Dialect::Postgres => "LOCK TABLE task_state_store IN SHARE MODE",
                // Held rows are skipped (SKIP LOCKED); a table lock is waited for.
                Dialect::Mysql => "LOCK TABLES task_state_store READ",
            });
            let run = bench.unchanged(|| bench.run(&["clean", "--lock-timeout", "1s"]).code(4));
            drop(holder);
            assert!(run.stderr.contains("clean: deleted 0 expired task row(s)"), "{}", run.stderr);
            assert!(!run.stderr.contains("deleted too"), "{}", run.stderr);
            assert_eq!(count(&bench, EXPIRED), 20);
        }
    }

    /// A SQLite row whose map_index is text: doctor reports the row (exit 8) where it exited 4
    /// at the first check that read it; list and export name the row in their error.
    #[test]
    fn a_text_map_index_is_a_damaged_row_doctor_reports() {
        let bench = with_run(Dialect::Sqlite);
        bench.run(&cmd(&["set", "good", "1"], &task(&[]))).success();
        bench.run(&cmd(&["set", "bad", "2"], &task(&[]))).success();
        bench.exec(r#"UPDATE task_state_store SET map_index = 'abc' WHERE "key" = 'bad'"#);
        let run = bench.run(&["doctor", "-o", "json"]).code(8).stderr_has("sqlite_integers (1)");
        let check =
            run.json()["checks"].as_array().unwrap().iter().find(|c| c["name"] == "sqlite_integers").cloned();
        let check = check.unwrap();
        assert_eq!(fields(&check, &["status", "count"]), json!(["problem", 1]));
        assert_eq!(
            fields(&check["sample"][0], &["task_id", "map_index", "key", "detail"]),
            json!(["load", "abc", "bad", "map_index holds text \"abc\", not an integer"])
        );
        let row = format!(
            "the task row dag_id=\"{DAG}\" run_id=\"{RUN}\" task_id=\"load\" key \"bad\" has map_index \"abc\", not an integer"
        );
        bench.run(&["list"]).fails(4, &row);
        bench.run(&["export"]).fails(4, &row);
        bench.run(&["doctor"]).code(8).stderr_has("sqlite_integers (1)");
    }

    /// A SQLite URL's `mode=ro` and `immutable=1` are honoured: every write is refused (exit
    /// 3, the URL's doing) with the database unchanged, reads work. An option SQLAlchemy and
    /// SQLite do not know (`mod=ro`) is refused by name, as on PostgreSQL; the options Airflow's
    /// own URLs carry (`timeout`, `check_same_thread`, `file:…?mode=ro&uri=true`) are not.
    #[test]
    fn sqlite_url_options_are_honoured_or_refused() {
        let bench = with_run(Dialect::Sqlite);
        bench.run(&cmd(&["set", "k", "1"], &task(&[]))).success();
        let export = bench.dir.path().join("backup.jsonl");
        bench.run(&["export", "--file", export.to_str().unwrap()]).success();
        // The `uri=true` form SQLAlchemy hands to SQLite as a URI filename, as Airflow does.
        let path = bench.url().strip_prefix("sqlite:///").unwrap().to_string();
        for url in [
            format!("{}?mode=ro", bench.url()),
            format!("{}?immutable=1", bench.url()),
            format!("{}?immutable=true&timeout=30", bench.url()),
            format!("sqlite:///file:{path}?mode=ro&uri=true"),
        ] {
            let option = url.rsplit('?').next().unwrap().to_string();
            let with = |args: &[&str]| -> Vec<String> {
                args.iter().map(ToString::to_string).chain(["--conn".to_string(), url.clone()]).collect()
            };
            let run = |args: Vec<String>| bench.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
            let why = if option.starts_with("mode") { "(mode=ro)" } else { "(immutable=1)" };
            for args in [
                cmd(&["set", "k", "2"], &task(&[])),
                cmd(&["delete", "k"], &task(&[])),
                cmd(&["clear", "--yes"], &task(&[])),
                vec!["import", export.to_str().unwrap()],
                vec!["clean"],
            ] {
                bench.unchanged(|| run(with(&args)).fails(3, &format!("opens it read-only {why}")));
            }
            run(with(&cmd(&["get", "k", "-o", "plain"], &task(&[])))).success().stdout_is("1\n");
            run(with(&["list", "-o", "plain"])).success();
            run(with(&["clean", "--dry-run"])).success();
        }
        for (option, needle) in [
            ("mod=ro", "unsupported SQLite URL option \"mod\""),
            ("mode=memory", "mode=memory"),
            ("immutable=maybe", "immutable=maybe"),
            ("vfs=unix-none", "\"vfs\""),
        ] {
            let url = format!("{}?{option}", bench.url());
            bench.unchanged(|| {
                bench.run(&cmd(&["set", "k", "2", "--conn", &url], &task(&[]))).fails(3, needle)
            });
        }
        let airflow = format!("{}?timeout=30&check_same_thread=false&mode=rw", bench.url());
        bench.run(&cmd(&["set", "k", "2", "--conn", &airflow], &task(&[]))).success();
    }
}

/// PostgreSQL's own environment (`PGHOST`, `PGPASSWORD`, `~/.pgpass`, …) fills what the URL
/// lacks, as libpq does for Airflow; a password found there is never shown.
#[cfg(feature = "postgres")]
mod libpq_environment {
    use super::*;

    /// The bench's server and database, as libpq's variables.
    fn server_vars(bench: &Bench) -> Vec<(String, String)> {
        let url = bench.url();
        let rest = url.split_once("://").unwrap().1;
        let (auth, rest) = rest.rsplit_once('@').unwrap_or(("", rest));
        let (hostport, database) = rest.split_once('/').unwrap();
        let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, "5432"));
        let user = auth.split(':').next().unwrap_or("postgres");
        [("PGHOST", host), ("PGPORT", port), ("PGUSER", user), ("PGDATABASE", database)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// `args` with the URL `conn` and only the given libpq variables set.
    fn run(bench: &Bench, conn: &str, vars: &[(String, String)], args: &[&str]) -> Run {
        let mut cmd = bench.cmd(&cmd(&["--conn", conn], args));
        for (key, _) in std::env::vars() {
            if key.starts_with("PG") {
                cmd.env_remove(key);
            }
        }
        cmd.envs(vars.iter().map(|(k, v)| (k, v)));
        Run::from(cmd.output().unwrap(), args)
    }

    fn task<'a>(args: &[&'a str]) -> Vec<&'a str> {
        cmd(args, &["--dag-id", DAG, "--run-id", RUN, "--task-id", "load"])
    }

    #[test]
    fn pg_variables_choose_the_server_database_and_user() {
        let bench = with_run(Dialect::Postgres);
        bench.run(&task(&["set", "k", "\"from the URL\""])).success();
        let vars = server_vars(&bench);
        // A URL that names nothing: everything comes from the environment.
        let got = run(&bench, "postgresql://", &vars, &task(&["get", "k"])).success();
        assert!(got.stdout.contains("\"from the URL\""), "{got:?}");
        // The URL's own parts win: a database that does not exist is reported as the URL's.
        let url =
            Bench::server_url(Dialect::Postgres, &Bench::admin_auth(Dialect::Postgres), "no_such_db_here");
        run(&bench, &url, &vars, &task(&["get", "k"])).fails(4, "no_such_db_here");
        // PGPORT is used for a URL without a port: a closed port fails.
        let mut closed = vars.clone();
        closed.retain(|(k, _)| k != "PGPORT");
        closed.push(("PGPORT".to_string(), "1".to_string()));
        let run_closed = run(&bench, "postgresql://", &closed, &task(&["get", "k"]));
        assert_ne!(run_closed.code, 0, "{run_closed:?}");
        assert!(run_closed.stderr.contains(":1"), "{run_closed:?}");
    }

    #[test]
    fn a_password_file_others_can_read_is_ignored_with_libpqs_warning() {
        use std::os::unix::fs::PermissionsExt;
        let bench = with_run(Dialect::Postgres);
        let vars = server_vars(&bench);
        let pgpass = bench.dir.path().join(".pgpass");
        std::fs::write(&pgpass, "*:*:*:*:pgpass-secret-1\n").unwrap();
        std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o644)).unwrap();
        let got = run(&bench, "postgresql://", &vars, &task(&["list"])).success();
        assert!(got.stderr.contains("has group or world access"), "{got:?}");
        assert!(got.stderr.contains(".pgpass"), "{got:?}");
        std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
        let got = run(&bench, "postgresql://", &vars, &task(&["list"])).success();
        assert!(!got.stderr.contains("warning"), "{got:?}");
    }

    #[test]
    fn no_password_from_the_environment_is_ever_shown() {
        use std::os::unix::fs::PermissionsExt;
        let bench = with_run(Dialect::Postgres);
        let pgpass = bench.dir.path().join("pass");
        std::fs::write(&pgpass, "*:*:*:*:pgpass-secret-2\n").unwrap();
        std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut vars = server_vars(&bench);
        vars.push(("PGPASSFILE".to_string(), pgpass.to_str().unwrap().to_string()));
        let with_password = |extra: &[(&str, &str)]| {
            let mut v = vars.clone();
            v.extend(extra.iter().map(|(k, x)| ((*k).to_string(), (*x).to_string())));
            v
        };
        let env_pw = with_password(&[("PGPASSWORD", "env-secret-3")]);
        let bad_tls = with_password(&[("PGPASSWORD", "env-secret-3"), ("PGSSLMODE", "sometimes")]);
        let mut closed = env_pw.clone();
        closed.retain(|(k, _)| k != "PGPORT");
        closed.push(("PGPORT".to_string(), "1".to_string()));
        let runs = [
            run(&bench, "postgresql://", &vars, &task(&["-v", "get", "k"])),
            run(&bench, "postgresql://", &env_pw, &task(&["-v", "list"])),
            run(&bench, "postgresql://", &env_pw, &["config", "show"]),
            run(&bench, "postgresql://", &bad_tls, &task(&["get", "k"])),
            run(&bench, "postgresql://", &closed, &task(&["-v", "get", "k"])),
            run(&bench, "postgresql://", &vars, &["doctor"]),
        ];
        for r in &runs {
            for secret in ["pgpass-secret-2", "env-secret-3"] {
                assert!(!r.stdout.contains(secret) && !r.stderr.contains(secret), "{r:?}");
            }
        }
        // The refused sslmode names the variable it came from.
        assert!(runs[3].stderr.contains("PGSSLMODE"), "{:?}", runs[3]);
        assert_eq!(runs[3].code, 3, "{:?}", runs[3]);
    }
}

/// A CA the user names for a connection is its only trust anchor, as libpq (`sslrootcert`,
/// `~/.postgresql/root.crt`, `PGSSLROOTCERT`) and PyMySQL (`ssl_ca`) read it: a server whose
/// certificate another CA issued is refused before the password is sent, even when the system
/// store (here `SSL_CERT_FILE`, which OpenSSL's default paths read) trusts that CA. Each case
/// runs against a stand-in server (`support::tls`), once with the right CA to show the
/// stand-in completes a handshake.
mod trust_anchors {
    use super::*;
    use support::tls::{Ca, Seen, StandIn, Wire};

    const PASSWORD: &str = "Tls-Secret-Pw-61";

    /// The user's CA, an "attacker" CA the system store trusts, a server certificate from each.
    struct Pki {
        dir: support::TempDir,
        ours: Ca,
        theirs: Ca,
    }

    impl Pki {
        fn new() -> Pki {
            let dir = support::TempDir::new();
            let (ours, theirs) = (Ca::new(dir.path(), "our-ca"), Ca::new(dir.path(), "public-ca"));
            Pki { dir, ours, theirs }
        }

        /// A stand-in presenting a certificate `ca` issued.
        fn stand_in(&self, wire: Wire, ca: &Ca, name: &str) -> StandIn {
            let (cert, key) = ca.server(self.dir.path(), name);
            StandIn::start(wire, &cert, &key)
        }

        fn ours(&self) -> &str {
            self.ours.cert.to_str().unwrap()
        }
    }

    /// `list` over `conn`, with the attacker's CA as the system store and `env` set.
    fn run(bench: &Bench, pki: &Pki, conn: &str, env: &[(&str, &str)]) -> Run {
        let args = cmd(&["--conn", conn, "list"], &task(&[]));
        let mut cmd = bench.cmd(&args);
        for (key, _) in std::env::vars() {
            if key.starts_with("PG") || key.starts_with("SSL_CERT") {
                cmd.env_remove(key);
            }
        }
        cmd.env("SSL_CERT_FILE", &pki.theirs.cert);
        cmd.envs(env.iter().copied());
        Run::from(cmd.output().unwrap(), &args)
    }

    /// The run failed with exit 4, one line naming the certificate, no password; the stand-in
    /// never completed a handshake.
    #[track_caller]
    fn refused(run: Run, server: &StandIn) {
        let seen = server.take();
        let all_refused = !seen.is_empty() && seen.iter().all(|s| matches!(s, Seen::Refused(_)));
        assert!(all_refused, "the handshake passed, or never began: {seen:?} {run:?}");
        let run = run.fails(4, "certificate");
        assert!(!run.stderr.contains(PASSWORD) && !run.stdout.contains(PASSWORD), "{run:?}");
    }

    #[test]
    fn postgres_trusts_only_the_ca_it_is_given() {
        let pki = Pki::new();
        let bench = Bench::bare();
        let home_ca = bench.dir.path().join(".postgresql");
        let url = |server: &StandIn, query: &str| {
            format!("postgresql://airflow:{PASSWORD}@127.0.0.1:{}/airflow?{query}", server.port)
        };
        let theirs = pki.stand_in(Wire::Postgres, &pki.theirs, "pg-theirs");
        let verify_ca = format!("sslmode=verify-ca&sslrootcert={}", pki.ours());
        refused(run(&bench, &pki, &url(&theirs, &verify_ca), &[]), &theirs);
        let verify_full = format!("sslmode=verify-full&sslrootcert={}", pki.ours());
        refused(run(&bench, &pki, &url(&theirs, &verify_full), &[]), &theirs);
        refused(
            run(&bench, &pki, &url(&theirs, "sslmode=verify-ca"), &[("PGSSLROOTCERT", pki.ours())]),
            &theirs,
        );
        // `require` with ~/.postgresql/root.crt is libpq's verify-ca with that file.
        std::fs::create_dir_all(&home_ca).unwrap();
        std::fs::copy(&pki.ours.cert, home_ca.join("root.crt")).unwrap();
        refused(run(&bench, &pki, &url(&theirs, "sslmode=require"), &[]), &theirs);
        // `sslrootcert=system` is the system store, whatever it holds.
        run(&bench, &pki, &url(&theirs, "sslmode=verify-full&sslrootcert=system"), &[]).code(4);
        assert!(matches!(theirs.take().as_slice(), [Seen::Passed(_)]), "system trusts SSL_CERT_FILE");

        // The stand-in with a certificate of the named CA gets the startup message and the
        // password: the handshake itself works.
        let ours = pki.stand_in(Wire::Postgres, &pki.ours, "pg-ours");
        let run = run(&bench, &pki, &url(&ours, &verify_ca), &[]).code(4);
        let seen = ours.take();
        let Some(Seen::Passed(bytes)) = seen.first() else { panic!("{seen:?} {run:?}") };
        let text = String::from_utf8_lossy(bytes);
        assert!(text.contains("user\0airflow") && text.contains(PASSWORD), "{text:?}");
        assert!(!run.stderr.contains(PASSWORD), "{run:?}");
    }

    #[test]
    fn mysql_trusts_only_the_ca_it_is_given() {
        let pki = Pki::new();
        let bench = Bench::bare();
        let url = |server: &StandIn, query: &str| {
            format!("mysql://airflow:{PASSWORD}@127.0.0.1:{}/airflow?{query}", server.port)
        };
        let theirs = pki.stand_in(Wire::Mysql, &pki.theirs, "my-theirs");
        for query in [
            format!("ssl_mode=VERIFY_CA&ssl_ca={}", pki.ours()),
            format!("ssl_mode=VERIFY_IDENTITY&ssl_ca={}", pki.ours()),
            format!("ssl_ca={}", pki.ours()),
            format!("ssl_mode=REQUIRED&ssl_ca={}", pki.ours()),
        ] {
            refused(run(&bench, &pki, &url(&theirs, &query), &[]), &theirs);
        }

        // With a certificate of the named CA the stand-in gets the login packet.
        let ours = pki.stand_in(Wire::Mysql, &pki.ours, "my-ours");
        let query = format!("ssl_mode=VERIFY_CA&ssl_ca={}", pki.ours());
        let run = run(&bench, &pki, &url(&ours, &query), &[]).code(4);
        let seen = ours.take();
        let Some(Seen::Passed(bytes)) = seen.first() else { panic!("{seen:?} {run:?}") };
        assert!(String::from_utf8_lossy(bytes).contains("airflow\0"), "{bytes:?}");
        assert!(!run.stderr.contains(PASSWORD), "{run:?}");
    }
}

/// `import --dry-run` reads the stored rows a batch at a time, as the import writes them.
mod import_dry_run {
    use super::*;

    fn line(key: &str) -> String {
        format!(
            r#"{{"kind": "task", "dag_id": "{DAG}", "run_id": "{RUN}", "task_id": "load", "map_index": -1, "key": "{key}", "value": "1", "updated_at": "2026-01-01T00:00:00.000000Z", "expires_at": null}}"#
        )
    }

    /// A dry run of 3,000 rows (1,000 of them stored) on PostgreSQL, whose statistics count
    /// each statement run outside a transaction as a commit of the database: a lookup per row
    /// made thousands, a lookup per batch makes a handful. The counts are the real import's.
    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_dry_run_reads_stored_keys_in_few_statements() {
        let bench = with_run(Dialect::Postgres);
        let file = bench.dir.path().join("rows.jsonl");
        let path = file.to_str().unwrap();
        let stored: String = (0..1000).map(|i| line(&format!("k{i}")) + "\n").collect();
        std::fs::write(&file, &stored).unwrap();
        bench.run(&["import", path]).success();
        let all: String = (0..3000).map(|i| line(&format!("k{i}")) + "\n").collect();
        std::fs::write(&file, &all).unwrap();

        // The statistics reach the view within a second of a session's end.
        let commits = || {
            std::thread::sleep(Duration::from_millis(1500));
            let sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()";
            bench.scalar(sql).parse::<i64>().unwrap()
        };
        let before = commits();
        let run = bench.unchanged(|| bench.run(&["import", "--dry-run", "-o", "json", path]).success());
        let statements = commits() - before;
        assert!(statements < 200, "the dry run of 3,000 rows ran {statements} transactions");
        let counts = fields(&run.json(), &["task_rows", "inserted", "replaced", "kept_newer"]);
        assert_eq!(counts, json!([3000, 2000, 1000, 0]));
    }
}

/// The REST transport's edges (docs/rest.md): what is refused before anything is sent, and
/// what a server that is down, silent, not Airflow's, too old or redirecting gets. A local
/// server plays those; Airflow's own API is the interoperability tier's (tests/interop).
mod rest_transport {
    use super::*;
    use support::http::{FakeApi, Reply, html, json, no_content, response};

    const TASK: [&str; 6] = ["--dag-id", "d", "--run-id", "r", "--task-id", "t"];

    fn args<'a>(api: &'a str, head: &[&'a str], tail: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec!["--api-url", api];
        all.extend_from_slice(head);
        all.extend_from_slice(tail);
        all
    }

    /// A server that must never be asked anything.
    fn untouchable() -> FakeApi {
        FakeApi::start(|_, _| Reply::Send(json(500, r#"{"detail": "nothing should reach this server"}"#)))
    }

    #[test]
    fn database_only_commands_refuse_the_api_and_leave_the_database_alone() {
        let bench = Bench::new();
        bench.add_dag_run("d", "r");
        bench.insert_task_row("d", "r", "t", -1, "k", "1", "2026-01-01 00:00:00.000000", None);
        let api = untouchable();
        bench.unchanged(|| {
            for command in [&["clean"][..], &["stats"], &["doctor"], &["export"], &["import", "-"]] {
                let run = bench.run(&args(&api.url, command, &[])).code(2);
                assert!(
                    run.stderr.contains("metastore database only") && run.stderr.contains("--api-url"),
                    "{run:?}"
                );
            }
            // The environment's URL counts as the flag does, and clean still prints its document.
            let run =
                bench.cmd(&["clean", "-o", "json"]).env("STATE_STORE_API_URL", &api.url).output().unwrap();
            let run = support::Run::from(run, &["clean"]).code(2);
            assert!(run.stderr.contains("$STATE_STORE_API_URL"), "{run:?}");
            let doc: Value = serde_json::from_str(&run.stdout).expect("clean's JSON document");
            assert_eq!(doc["error"]["exit_code"], 2, "{doc}");
        });
        assert!(api.requests().is_empty(), "{:?}", api.requests());
    }

    #[test]
    fn what_the_api_cannot_honour_is_refused_before_anything_is_sent() {
        let bench = Bench::bare();
        let api = untouchable();
        let refused: Vec<Vec<&str>> = vec![
            args(&api.url, &["set", "k", "1", "--allow-large"], &TASK),
            args(&api.url, &["set", "k", "1", "--allow-missing-task-instance"], &TASK),
            args(&api.url, &["delete", "k", "--allow-missing-task-instance"], &TASK),
            args(&api.url, &["clear", "--yes", "--allow-missing-task-instance"], &TASK),
            args(&api.url, &["set", "k", "1", "--asset", "a", "--keep-expiry"], &[]),
            args(&api.url, &["set", "k", "NaN"], &TASK),
            args(&api.url, &["set", "k", "[Infinity]"], &TASK),
            args(&api.url, &["set", "", "1"], &TASK),
            args(&api.url, &["get", ""], &TASK),
            args(&api.url, &["list", "--dag-id", "d"], &[]),
            args(&api.url, &["list", "--assets"], &[]),
            args(&api.url, &["list"], &[]),
            args(&api.url, &["--conn", "sqlite:////nowhere/airflow.db", "get", "k"], &TASK),
        ];
        for line in &refused {
            bench.run(line).code(2);
        }
        assert!(api.requests().is_empty(), "{:?}", api.requests());
    }

    #[test]
    fn a_base_url_that_cannot_be_right_is_refused_with_its_password_masked() {
        let bench = Bench::bare();
        for url in ["ftp://h", "h:8080", "https://h/api/v2", "https://h/?x=1", "https://ann:pw-S3cret@h/"] {
            let run = bench.run(&args(url, &["get", "k"], &TASK)).code(2);
            assert!(run.stderr.contains("invalid --api-url"), "{run:?}");
            assert!(!run.stderr.contains("pw-S3cret"), "{run:?}");
        }
    }

    #[test]
    fn a_server_that_is_down_is_tried_four_times_then_exit_4() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        let run = Bench::bare().run(&args(&url, &["get", "k"], &TASK)).code(4);
        assert!(run.stderr.contains("after 4 tries") && run.stderr.contains(&url), "{run:?}");
        // Three pauses: 0.5 s, 1 s and 2 s.
        assert!(started.elapsed() >= Duration::from_millis(3400), "{:?}", started.elapsed());
    }

    #[test]
    fn a_server_that_accepts_and_never_answers_ends_at_the_request_timeout() {
        let api = FakeApi::start(|_, _| Reply::Silence);
        let started = Instant::now();
        let run = Bench::bare().run(&args(&api.url, &["--api-timeout", "1", "get", "k"], &TASK)).code(4);
        assert!(run.stderr.contains("no answer within 1 s (--api-timeout)"), "{run:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        assert_eq!(api.requests().len(), 1, "a request that may have been carried out is not retried");
    }

    #[test]
    fn an_html_page_is_not_airflows_api() {
        let api = FakeApi::start(|_, _| Reply::Send(html(200, "<!doctype html><title>Airflow</title>")));
        let run = Bench::bare().run(&args(&api.url, &["get", "k"], &TASK)).code(4);
        assert!(run.stderr.contains("an HTML page") && run.stderr.contains("path prefix"), "{run:?}");
    }

    /// https against a server that speaks plain HTTP: the TLS handshake gets an HTTP answer,
    /// which OpenSSL reports as "wrong version number". The message says the server does not
    /// speak TLS and gives the http:// URL to try, without OpenSSL's internals.
    #[test]
    fn https_against_a_plain_http_server_says_it_does_not_speak_tls() {
        // What an HTTP server (uvicorn, Python's http.server, nginx) answers to a TLS
        // ClientHello: a 400 in plain text.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut hello = [0_u8; 512];
                let _ = std::io::Read::read(&mut stream, &mut hello);
                let answer = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                let _ = std::io::Write::write_all(&mut stream, answer.as_bytes());
            }
        });
        let run =
            Bench::bare().run(&args(&format!("https://127.0.0.1:{port}"), &["get", "k"], &TASK)).code(4);
        assert!(run.stderr.contains("does not speak TLS"), "{run:?}");
        assert!(run.stderr.contains(&format!("give --api-url http://127.0.0.1:{port}")), "{run:?}");
        assert!(!run.stderr.contains("ssl3_get_record") && !run.stderr.contains(".c:"), "{run:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
    }

    /// A URL whose path is not the deployment's prefix (`--api-url http://host:8080/ui`, the
    /// UI's address): the web server's catch-all answers an HTML page, or a 404. The message
    /// names the path as the one to check, where it used to say a prefix may be missing; a
    /// URL without a path still hears of a missing prefix.
    #[test]
    fn a_path_that_is_not_the_prefix_is_named_as_one_too_many() {
        let ui = FakeApi::start(|_, _| Reply::Send(html(200, "<!doctype html><title>Airflow</title>")));
        let bench = Bench::bare();
        let with_path = format!("{}/ui", ui.url);
        let run = bench.run(&args(&with_path, &["get", "k"], &TASK)).code(4);
        assert!(run.stderr.contains("an HTML page"), "{run:?}");
        assert!(run.stderr.contains("/ui") && run.stderr.contains("one too many"), "{run:?}");
        assert!(
            run.stderr.contains(&format!("--api-url {} ", ui.url))
                || run.stderr.contains(&format!("--api-url {})", ui.url)),
            "{run:?}"
        );
        assert!(!run.stderr.contains("lack the deployment's path prefix"), "{run:?}");
        let run = bench.run(&args(&ui.url, &["get", "k"], &TASK)).code(4);
        assert!(run.stderr.contains("lack the deployment's path prefix"), "{run:?}");

        let missing = FakeApi::start(|_, _| Reply::Send(json(404, r#"{"detail": "Not Found"}"#)));
        let with_path = format!("{}/ui", missing.url);
        let run = bench.run(&args(&with_path, &["get", "k"], &TASK)).code(4);
        assert!(run.stderr.contains("answered 404") && run.stderr.contains("one too many"), "{run:?}");
        assert!(!run.stderr.contains("belongs in it"), "{run:?}");
        let run = bench.run(&args(&missing.url, &["get", "k"], &TASK)).code(4);
        assert!(run.stderr.contains("a path prefix, such as Astronomer's, belongs in it"), "{run:?}");
    }

    /// A viewer's token on a write: Airflow reads the key for it (200) and refuses the write
    /// with `403: Forbidden`. The credentials are good: the message says the user lacks the
    /// permission to change that dag's state (asset state for an asset), still exit 10. A token
    /// the server refuses (`403: Invalid JWT token`) is not called a permission problem.
    #[test]
    fn a_write_refused_after_the_token_was_accepted_is_a_missing_permission() {
        const ORDERS: &str = r#"{"id": 7, "name": "orders", "uri": "s3://orders"}"#;
        let viewer = FakeApi::airflow(|request, _| match request.method.as_str() {
            "GET" if request.target.starts_with("/api/v2/assets/7") => Reply::Send(json(200, ORDERS)),
            "GET" if request.target.starts_with("/api/v2/assets?") => {
                Reply::Send(json(200, &format!(r#"{{"assets": [{ORDERS}], "total_entries": 1}}"#)))
            }
            "GET" => Reply::Send(json(
                200,
                r#"{"key": "k", "value": 1, "updated_at": "2026-12-01T00:00:00Z", "expires_at": null}"#,
            )),
            _ => Reply::Send(json(403, r#"{"detail": "Forbidden"}"#)),
        });
        let mut bench = Bench::bare();
        bench.env("AIRFLOW_CLI_TOKEN", "viewer-token");
        for (command, scope, what) in [
            (&["set", "k", "1"][..], &TASK[..], "change the state of dag \"d\""),
            (&["delete", "k"], &TASK, "delete the state of dag \"d\""),
            (&["set", "k", "1"], &["--asset-id", "7"], "change the state of assets"),
        ] {
            let run = bench.run(&args(&viewer.url, command, scope)).code(10);
            assert!(run.stderr.contains("answered 403: Forbidden"), "{run:?}");
            assert!(
                run.stderr.contains("the token was accepted") && run.stderr.contains(what),
                "{what}: {run:?}"
            );
        }
        let invalid = FakeApi::airflow(|_, _| Reply::Send(json(403, r#"{"detail": "Invalid JWT token"}"#)));
        let run = bench.run(&args(&invalid.url, &["set", "k", "1"], &TASK)).code(10);
        assert!(run.stderr.contains("Invalid JWT token") && !run.stderr.contains("permission"), "{run:?}");
    }

    #[test]
    fn a_proxy_that_is_busy_is_retried_and_a_refusal_is_not() {
        let api = FakeApi::start(|request, n| match n {
            0 | 1 => Reply::Send(html(503, "<h1>Service Unavailable</h1>")),
            _ if request.target == "/api/v2/version" => Reply::Send(json(200, r#"{"version": "3.3.2"}"#)),
            _ => Reply::Send(json(404, r#"{"detail": "Task state store key 'k' not found"}"#)),
        });
        let run = Bench::bare().run(&args(&api.url, &["get", "k"], &TASK)).code(1);
        assert!(run.stderr.contains(r#"key "k" not found"#), "{run:?}");
        let paths: Vec<String> = api.requests().iter().map(|r| r.target.clone()).collect();
        assert_eq!(
            paths,
            [
                "/api/v2/version",
                "/api/v2/version",
                "/api/v2/version",
                "/api/v2/dags/d/dagRuns/r/taskInstances/t/state-store/k?map_index=-1"
            ]
        );
    }

    #[test]
    fn a_redirect_is_reported_and_never_followed() {
        let api = FakeApi::start(|_, _| {
            Reply::Send(response(
                308,
                "text/plain",
                "",
                "Location: https://elsewhere.example/api/v2/version\r\n",
            ))
        });
        let run = Bench::bare().run(&args(&api.url, &["get", "k"], &TASK)).code(4);
        assert!(run.stderr.contains("redirect to https://elsewhere.example"), "{run:?}");
        assert_eq!(api.requests().len(), 1);
    }

    #[test]
    fn an_airflow_before_3_3_has_no_state_store() {
        let api = FakeApi::start(|_, _| Reply::Send(json(200, r#"{"version": "3.2.1"}"#)));
        let run = Bench::bare().run(&args(&api.url, &["get", "k"], &TASK)).code(5);
        assert!(run.stderr.contains("Airflow 3.2.1") && run.stderr.contains("3.3"), "{run:?}");
    }

    #[test]
    fn no_token_is_exit_10_with_where_to_get_one() {
        let api = FakeApi::airflow(|_, _| Reply::Send(json(401, r#"{"detail": "Not authenticated"}"#)));
        let run = Bench::bare().run(&args(&api.url, &["get", "k"], &TASK)).code(10);
        assert!(
            run.stderr.contains("Not authenticated") && run.stderr.contains("AIRFLOW_CLI_TOKEN"),
            "{run:?}"
        );
    }

    /// Each source of a token, first come first served, sent as a bearer token and never
    /// printed: not in an error that quotes it back, not with -v.
    #[test]
    fn tokens_are_sent_and_never_shown() {
        let api = FakeApi::airflow(|request, _| {
            let said = request.header("authorization").unwrap_or("none").to_string();
            if request.target.starts_with("/auth/token") {
                return Reply::Send(json(201, r#"{"access_token": "jwt-From-Login-77"}"#));
            }
            Reply::Send(json(403, &format!(r#"{{"detail": "Forbidden: {said} may not"}}"#)))
        });
        let bench = Bench::bare();
        let cases: [(&[(&str, &str)], &[&str], &str); 4] = [
            (
                &[("AIRFLOW_CLI_TOKEN", "tok-Env-11")],
                &["--api-token-cmd", "printf tok-Cmd-22"],
                "Bearer tok-Env-11",
            ),
            (&[], &["--api-token-cmd", "printf tok-Cmd-22"], "Bearer tok-Cmd-22"),
            (&[("STATE_STORE_API_TOKEN_CMD", "printf tok-Var-33")], &[], "Bearer tok-Var-33"),
            (
                &[("STATE_STORE_API_PASSWORD", "pw-Login-44")],
                &["--api-username", "ann"],
                "Bearer jwt-From-Login-77",
            ),
        ];
        for (env, flags, sent) in cases {
            let before = api.requests().len();
            let mut line = args(&api.url, &["-v"], flags);
            line.extend(["get", "k"]);
            line.extend(TASK);
            let mut command = bench.cmd(&line);
            for (name, value) in env {
                command.env(name, value);
            }
            let run = support::Run::from(command.output().unwrap(), &line).code(10);
            let last = api.requests().last().cloned().unwrap();
            assert_eq!(last.header("authorization"), Some(sent), "{:?}", &api.requests()[before..]);
            for secret in ["tok-Env-11", "tok-Cmd-22", "tok-Var-33", "pw-Login-44", "jwt-From-Login-77"] {
                let shown = run.stderr.contains(secret) || run.stdout.contains(secret);
                assert!(!shown, "{secret} shown: {run:?}");
            }
            assert!(run.stderr.contains("may not"), "{run:?}");
        }
        let login = api.requests().into_iter().find(|r| r.target == "/auth/token").expect("a login");
        assert_eq!(login.method, "POST");
        let body: Value = serde_json::from_str(&login.body).unwrap();
        assert_eq!(
            (body["username"].as_str(), body["password"].as_str()),
            (Some("ann"), Some("pw-Login-44"))
        );
    }

    #[test]
    fn a_failing_token_command_or_a_missing_password_is_exit_10() {
        let api = FakeApi::airflow(|_, _| Reply::Send(no_content()));
        let bench = Bench::bare();
        let run = bench.run(&args(
            &api.url,
            &["--api-token-cmd", "sh -c 'echo denied >&2; exit 3'", "get", "k"],
            &TASK,
        ));
        let run = run.code(10);
        assert!(run.stderr.contains("cannot get a token") && run.stderr.contains("denied"), "{run:?}");
        let run = bench.run(&args(&api.url, &["--api-username", "ann", "get", "k"], &TASK)).code(10);
        assert!(run.stderr.contains("STATE_STORE_API_PASSWORD"), "{run:?}");
        assert!(api.requests().iter().all(|r| r.target == "/api/v2/version"), "{:?}", api.requests());
    }

    /// `http_proxy` carries the requests (through a `CONNECT` tunnel), and `no_proxy` takes a
    /// host out.
    #[test]
    fn requests_go_through_the_proxy_of_the_environment_unless_no_proxy_names_the_host() {
        let proxy = FakeApi::start(|request, _| match (request.method.as_str(), request.target.as_str()) {
            ("CONNECT", _) => Reply::Send("HTTP/1.1 200 Connection established\r\n\r\n".to_string()),
            (_, "/api/v2/version") => Reply::Send(json(200, r#"{"version": "3.3.2"}"#)),
            _ => Reply::Send(json(404, r#"{"detail": "not found"}"#)),
        });
        let bench = Bench::bare();
        let line = args("http://airflow.invalid:9", &["get", "k"], &TASK);
        let run = bench.cmd(&line).env("http_proxy", &proxy.url).output().unwrap();
        support::Run::from(run, &line).code(1);
        let seen: Vec<String> =
            proxy.requests().iter().map(|r| format!("{} {}", r.method, r.target)).collect();
        assert_eq!(seen.first().map(String::as_str), Some("CONNECT airflow.invalid:9"), "{seen:?}");
        assert!(seen.contains(
            &"GET /api/v2/dags/d/dagRuns/r/taskInstances/t/state-store/k?map_index=-1".to_string()
        ));
        let before = seen.len();
        let run =
            bench.cmd(&line).env("http_proxy", &proxy.url).env("NO_PROXY", ".invalid").output().unwrap();
        support::Run::from(run, &line).code(4);
        assert_eq!(proxy.requests().len(), before, "no_proxy sends nothing to the proxy");
    }

    /// An https URL is verified against the system's roots, or the CAs of `--api-ca-file`
    /// instead: a self-signed server (`openssl s_server`, which answers an HTML page) fails
    /// verification without the file and is reached with it.
    #[test]
    fn tls_trusts_the_system_roots_or_the_ca_file_given() {
        let dir = support::TempDir::new();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        let made = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"])
            .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("openssl req");
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut server = Command::new("openssl")
            .args(["s_server", "-quiet", "-www", "-accept", &port.to_string(), "-cert"])
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl s_server");
        let url = format!("https://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let bench = Bench::bare();
        let untrusted = bench.run(&args(&url, &["get", "k"], &TASK));
        let ca = cert.to_str().unwrap();
        let trusted = bench.run(&args(&url, &["--api-ca-file", ca, "get", "k"], &TASK));
        let not_pem = bench.run(&args(&url, &["--api-ca-file", "/dev/null", "get", "k"], &TASK));
        let _ = server.kill();
        let _ = server.wait();
        let untrusted = untrusted.code(4);
        assert!(untrusted.stderr.to_lowercase().contains("certificate"), "{untrusted:?}");
        let trusted = trusted.code(4);
        assert!(trusted.stderr.contains("an HTML page"), "the TLS handshake passed: {trusted:?}");
        not_pem.code(2);
    }

    /// What is not JSON is not Airflow's API, whatever its status (an HTML 404 from another
    /// web server is not "key not found"); a server too busy for now is exit 4, as a 5xx.
    #[test]
    fn a_page_that_is_not_json_and_a_busy_server_are_exit_4() {
        let bench = Bench::bare();
        let page = FakeApi::airflow(|_, _| Reply::Send(html(404, "<h1>Not Found</h1>")));
        let run = bench.run(&args(&page.url, &["get", "k"], &TASK)).code(4);
        assert!(run.stderr.contains("answered 404 with an HTML page"), "{run:?}");
        for status in [408, 429] {
            let busy = FakeApi::airflow(move |_, _| Reply::Send(json(status, r#"{"detail": "slow down"}"#)));
            let run = bench.run(&args(&busy.url, &["get", "k"], &TASK)).code(4);
            assert!(run.stderr.contains(&format!("answered {status}: slow down")), "{run:?}");
        }
    }

    /// Off a terminal, `list` over the API reads every page, as it does on the database: 250 keys
    /// in three requests of 100, nothing on stderr; `--limit` still pages.
    #[test]
    fn list_without_a_limit_reads_every_page_off_a_terminal() {
        let api = FakeApi::airflow(|request, _| {
            let number = |name: &str| -> usize {
                let query = request.target.split_once('?').map_or("", |(_, q)| q);
                query
                    .split('&')
                    .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            let (offset, limit) = (number("offset"), number("limit"));
            let items: Vec<String> = (offset..(offset + limit).min(250))
                .map(|i| format!(r#"{{"key": "k{i:03}", "value": {i}, "updated_at": "2026-12-01T00:00:00Z", "expires_at": null}}"#))
                .collect();
            Reply::Send(json(
                200,
                &format!(r#"{{"task_state_store": [{}], "total_entries": 250}}"#, items.join(", ")),
            ))
        });
        let bench = Bench::bare();
        let run = bench.run(&args(&api.url, &["list", "--map-index", "-1", "-o", "plain"], &TASK)).success();
        assert_eq!(run.stdout.lines().count(), 250, "{run:?}");
        assert!(run.stdout.ends_with("d\tr\tt\t-1\tk249\t249\n"), "{run:?}");
        assert_eq!(run.stderr, "");
        let pages = api.requests().iter().filter(|r| r.target.contains("/state-store?")).count();
        assert_eq!(pages, 3);
        let page = bench.run(&args(
            &api.url,
            &["list", "--map-index", "-1", "--limit", "120", "-o", "plain"],
            &TASK,
        ));
        let page = page.success();
        assert_eq!(page.stdout.lines().count(), 120);
        assert!(page.stderr.contains("--offset 120 for the next page"), "{page:?}");
    }

    /// `clear --all-map-indices` when the server cannot name the task's map indexes (a dag it
    /// has not parsed): only the keys it counted, asked about and reported are deleted, one by
    /// one; the collection's DELETE, which would take every map index, is never sent.
    #[test]
    fn clear_of_every_map_index_deletes_only_what_it_counted_when_the_indexes_are_unknown() {
        // A DELETE removes the key, as Airflow's does: the clear lists the keys again after.
        let gone = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let deleted = std::sync::Arc::clone(&gone);
        let api = FakeApi::airflow(move |request, _| {
            let (method, target) = (request.method.as_str(), request.target.as_str());
            if target.contains("/listMapped") {
                return Reply::Send(json(404, r#"{"detail": "The Dag with ID: `d` was not found"}"#));
            }
            match method {
                "GET" if target.contains("limit=1&") => {
                    Reply::Send(json(200, r#"{"task_state_store": [], "total_entries": 2}"#))
                }
                "GET" => {
                    let gone = deleted.lock().unwrap();
                    let items: Vec<String> = [("a", 1), ("b", 2)]
                        .iter()
                        .filter(|(key, _)| !gone.iter().any(|t| t.contains(&format!("/state-store/{key}?"))))
                        .map(|(key, value)| format!(r#"{{"key": "{key}", "value": {value}, "updated_at": "2026-12-01T00:00:00Z", "expires_at": null}}"#))
                        .collect();
                    Reply::Send(json(
                        200,
                        &format!(
                            r#"{{"task_state_store": [{}], "total_entries": {}}}"#,
                            items.join(", "),
                            items.len()
                        ),
                    ))
                }
                _ => {
                    deleted.lock().unwrap().push(target.to_string());
                    Reply::Send(no_content())
                }
            }
        });
        let run = Bench::bare().run(&args(
            &api.url,
            &["clear", "--all-map-indices", "--yes", "-o", "plain"],
            &TASK,
        ));
        let run = run.success();
        assert_eq!(run.stdout.trim(), "2");
        assert!(run.stderr.contains("does not name this task's map indexes"), "{run:?}");
        let deletes: Vec<String> =
            api.requests().iter().filter(|r| r.method == "DELETE").map(|r| r.target.clone()).collect();
        assert_eq!(
            deletes,
            [
                "/api/v2/dags/d/dagRuns/r/taskInstances/t/state-store/a?map_index=-1",
                "/api/v2/dags/d/dagRuns/r/taskInstances/t/state-store/b?map_index=-1"
            ]
        );
    }

    /// Ctrl-C at the password prompt ends the run (130) with the terminal's echo back on:
    /// it was turned off to read the password; so do Ctrl-\ (SIGQUIT) and SIGHUP. A
    /// pseudo-terminal (Python's `pty`) plays the user's terminal.
    #[test]
    fn ctrl_c_at_the_password_prompt_puts_the_echo_back() {
        let api = FakeApi::airflow(|_, _| Reply::Send(json(404, r#"{"detail": "not found"}"#)));
        let script = r#"
import os, pty, signal, sys, termios, time
how = sys.argv[1]
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
seen, deadline = b"", time.time() + 20
while b"Password for" not in seen and time.time() < deadline:
    seen += os.read(fd, 1024)
time.sleep(0.2)
if how == "hup":
    os.kill(pid, signal.SIGHUP)
else:
    os.write(fd, {"ctrl-c": b"\x03", "ctrl-backslash": b"\x1c"}[how])
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status), bool(termios.tcgetattr(fd)[3] & termios.ECHO))
"#;
        let mut line = vec!["--api-url", &api.url, "--api-username", "ann", "get", "k"];
        line.extend_from_slice(&TASK);
        let tool = Bench::bare().cmd(&line);
        // Ctrl-C is SIGINT, Ctrl-\ SIGQUIT; a dropped ssh session sends SIGHUP.
        for (how, code) in [("ctrl-c", 130), ("ctrl-backslash", 131), ("hup", 129)] {
            let mut python = Command::new("python3");
            python.arg("-c").arg(script).arg(how).arg(tool.get_program()).args(tool.get_args());
            for (key, value) in tool.get_envs() {
                match value {
                    Some(value) => python.env(key, value),
                    None => python.env_remove(key),
                };
            }
            let out = python.env_remove("STATE_STORE_API_PASSWORD").output().expect("python3");
            let said = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                said.trim(),
                format!("{code} True"),
                "{how}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    #[test]
    fn every_path_segment_is_encoded_and_none_ends_with_a_slash() {
        let api = FakeApi::airflow(|_, _| Reply::Send(json(404, r#"{"detail": "not found"}"#)));
        let bench = Bench::bare();
        bench
            .run(&args(
                &api.url,
                &["get", "a/b?c#d%e .."],
                &["--dag-id", "x+y", "--run-id", "r 1", "--task-id", "é"],
            ))
            .code(1);
        let last = api.requests().last().cloned().unwrap();
        assert_eq!(
            last.target,
            "/api/v2/dags/x%2By/dagRuns/r%201/taskInstances/%C3%A9/state-store/a%2Fb%3Fc%23d%25e%20%2E%2E?map_index=-1"
        );
    }

    /// A task instance's keys as Airflow 3.3.2 serves them: `ORDER BY key`, offset paging cut
    /// to `[api] maximum_page_limit` (50 here), a `total_entries` from a separate count, and
    /// a `DELETE` that answers 204 whether the key was there or not. `churn`: after each page,
    /// someone else deletes the first key already listed, which moves the next page's first
    /// key onto the page already read. `total_short_by`: a count that lags behind the keys.
    /// `failing_delete`: that `DELETE` (from 1) answers 500 and deletes nothing.
    struct Keyspace {
        keys: std::collections::BTreeSet<String>,
        listed: std::collections::BTreeSet<String>,
        churn: bool,
        total_short_by: usize,
        failing_delete: Option<usize>,
        deletes: usize,
        /// Keys whose `DELETE` answers 204 and leaves them.
        deaf: Vec<String>,
    }

    fn keyspace(
        count: usize,
        churn: bool,
        total_short_by: usize,
        failing_delete: Option<usize>,
    ) -> (FakeApi, std::sync::Arc<std::sync::Mutex<Keyspace>>) {
        let state = std::sync::Arc::new(std::sync::Mutex::new(Keyspace {
            keys: (0..count).map(|i| format!("k{i:04}")).collect(),
            listed: std::collections::BTreeSet::new(),
            churn,
            total_short_by,
            failing_delete,
            deletes: 0,
            deaf: Vec::new(),
        }));
        let shared = std::sync::Arc::clone(&state);
        let api = FakeApi::airflow(move |request, _| {
            let mut state = shared.lock().unwrap();
            let (path, query) = request.target.split_once('?').unwrap_or((&request.target, ""));
            let number = |name: &str| -> Option<usize> {
                query
                    .split('&')
                    .find_map(|p| p.strip_prefix(&format!("{name}=")))
                    .and_then(|v| v.parse().ok())
            };
            let prefix = "/api/v2/dags/d/dagRuns/r/taskInstances/t/state-store";
            match (request.method.as_str(), path.strip_prefix(prefix)) {
                ("GET", Some("")) => {
                    let (offset, limit) = (number("offset").unwrap_or(0), number("limit").unwrap_or(50));
                    let page: Vec<String> =
                        state.keys.iter().skip(offset).take(limit.min(50)).cloned().collect();
                    let total = state.keys.len().saturating_sub(state.total_short_by);
                    let items: Vec<String> = page
                        .iter()
                        .map(|k| format!(r#"{{"key": "{k}", "value": 1, "updated_at": "2026-12-01T00:00:00Z", "expires_at": null}}"#))
                        .collect();
                    state.listed.extend(page);
                    if state.churn {
                        let first = state.listed.iter().find(|k| state.keys.contains(*k)).cloned();
                        if let Some(first) = first {
                            state.keys.remove(&first);
                        }
                    }
                    Reply::Send(json(
                        200,
                        &format!(
                            r#"{{"task_state_store": [{}], "total_entries": {total}}}"#,
                            items.join(", ")
                        ),
                    ))
                }
                ("DELETE", Some(key)) if key.starts_with('/') => {
                    state.deletes += 1;
                    if state.failing_delete == Some(state.deletes) {
                        return Reply::Send(json(500, r#"{"detail": "Internal Server Error"}"#));
                    }
                    if !state.deaf.iter().any(|deaf| deaf == &key[1..]) {
                        state.keys.remove(&key[1..]);
                    }
                    Reply::Send(no_content())
                }
                ("GET", _) if path == "/api/v2/dags/d/dagRuns/r/taskInstances/t/-1" => {
                    Reply::Send(json(200, r#"{"task_id": "t", "map_index": -1}"#))
                }
                _ => Reply::Send(json(404, r#"{"detail": "not found"}"#)),
            }
        });
        (api, state)
    }

    /// Someone else deletes a key already listed after every page: `list` still shows every
    /// key that existed throughout (and each once), and `clear` removes every key.
    #[test]
    fn a_walk_under_concurrent_deletes_misses_no_key_that_stayed() {
        let bench = Bench::bare();
        let (api, state) = keyspace(250, true, 0, None);
        let run =
            bench.run(&args(&api.url, &["list", "--limit", "0", "--map-index", "-1", "-o", "plain"], &TASK));
        let run = run.success();
        let shown: Vec<&str> = run.stdout.lines().map(|l| l.split('\t').nth(4).unwrap()).collect();
        let unique: std::collections::BTreeSet<&str> = shown.iter().copied().collect();
        assert_eq!(unique.len(), shown.len(), "each key once: {run:?}");
        for key in &state.lock().unwrap().keys {
            assert!(unique.contains(key.as_str()), "{key} existed throughout and is not listed: {run:?}");
        }
        assert_eq!(unique.len(), 250, "every key was there when its page was read: {run:?}");

        let (api, state) = keyspace(250, true, 0, None);
        let run = bench.run(&args(&api.url, &["clear", "--yes", "-o", "json"], &TASK)).success();
        let doc: Value = serde_json::from_str(&run.stdout).unwrap();
        assert!(doc["deleted"].as_u64().unwrap() <= 250, "{doc}");
        let left = state.lock().unwrap().keys.clone();
        assert!(left.is_empty(), "{} keys left: {left:?}: {run:?}", left.len());
    }

    /// A `total_entries` below the keys (a count that lags, a buggy server) does not end a
    /// walk whose pages are full.
    #[test]
    fn a_total_below_the_keys_does_not_end_a_walk_of_full_pages() {
        let bench = Bench::bare();
        for short_by in [150, 249, 250] {
            let (api, _) = keyspace(250, false, short_by, None);
            let run = bench.run(&args(
                &api.url,
                &["list", "--limit", "0", "--map-index", "-1", "-o", "plain"],
                &TASK,
            ));
            let run = run.success();
            assert_eq!(run.stdout.lines().count(), 250, "total short by {short_by}: {run:?}");
            let (api, state) = keyspace(250, false, short_by, None);
            let run = bench.run(&args(&api.url, &["clear", "--yes", "-o", "plain"], &TASK)).success();
            assert_eq!(run.stdout.trim(), "250", "{run:?}");
            assert!(state.lock().unwrap().keys.is_empty(), "{run:?}");
        }
    }

    /// A clear lists its keys again after its deletes: a key still there as it was read (its
    /// `DELETE` answered 204 and left it) is named, and the run exits 4 with the keys it did
    /// remove reported.
    #[test]
    fn a_clear_names_a_key_its_delete_left() {
        let (api, state) = keyspace(30, false, 0, None);
        state.lock().unwrap().deaf = vec!["k0003".to_string()];
        let run = Bench::bare().run(&args(&api.url, &["clear", "--yes", "-o", "json"], &TASK)).code(4);
        let doc: Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(doc["deleted"], 29, "{doc}");
        assert_eq!(doc["error"]["exit_code"], 4, "{doc}");
        assert!(run.stderr.contains("1 key(s) are still there") && run.stderr.contains("k0003"), "{run:?}");
        assert_eq!(state.lock().unwrap().keys.len(), 1);
    }

    /// A clear over the API has no transaction: one stopped by a failed `DELETE` (the 11th
    /// answered 500) says what it removed in every format, and exits with the error's code.
    #[test]
    fn a_clear_stopped_half_way_reports_what_it_removed_in_every_format() {
        let bench = Bench::bare();
        for format in ["json", "yaml", "plain", "table"] {
            let (api, state) = keyspace(30, false, 0, Some(11));
            let run = bench.run(&args(&api.url, &["clear", "--yes", "-o", format], &TASK)).code(4);
            assert_eq!(state.lock().unwrap().keys.len(), 20, "{run:?}");
            assert!(run.stderr.contains("answered 500"), "{run:?}");
            assert!(run.stderr.contains("removed 10 keys"), "{format}: {run:?}");
            match format {
                "json" => {
                    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
                    assert_eq!(doc["deleted"], 10, "{doc}");
                    assert_eq!(doc["error"]["exit_code"], 4, "{doc}");
                }
                "yaml" => assert!(run.stdout.contains("deleted: 10"), "{run:?}"),
                "plain" => assert_eq!(run.stdout, "10\n", "{run:?}"),
                _ => assert_eq!(run.stdout, "", "{run:?}"),
            }
        }
    }
}

/// The REST transport against a hostile or broken server (docs/reliability.md, "A hostile
/// server"): a stand-in that repeats pages, lies in `total_entries`, answers huge or endless
/// bodies, echoes secrets in every spelling, answers 504 after forwarding a write, drips, and
/// sends control characters. Each case asserts the exit code, a bound on time and on memory
/// (the binary runs under `prlimit --data`, so an allocation past the bound fails the run),
/// and that no secret and no control character reaches stdout or stderr. The last test
/// draws a few hundred servers from a seed.
mod hostile_server {
    use super::*;
    use std::path::Path;
    use support::http::{FakeApi, Reply, Request, Socks5, json, no_content, response};

    const TASK: [&str; 6] = ["--dag-id", "d", "--run-id", "r", "--task-id", "t"];
    /// The most memory (`RLIMIT_DATA`) a run may take against a hostile server.
    const MEMORY: u64 = 192 << 20;
    /// A token longer than the 300 characters of a server's reason that a message quotes.
    fn token() -> String {
        let mut token = String::from("eyJhbGciOiJIUzUxMiJ9.");
        while token.len() < 375 {
            token.push_str("Zm9vYmFyLWJhei1xdXV4LTAxMjM0NTY3ODk");
        }
        token.truncate(375);
        token
    }
    /// A password with letters `ensure_ascii` escapes, a quote, a backslash and a blank.
    const PASSWORD: &str = "Pässwörd \"q\" \\b/1";

    /// A run of the tool against `api` under the memory bound, with its wall time.
    fn bounded(api: &str, head: &[&str], env: &[(&str, &str)]) -> (Run, Duration) {
        let mut all: Vec<&str> = vec!["--api-url", api];
        all.extend_from_slice(head);
        let plain = Bench::bare().cmd(&all);
        let mut c = Command::new("prlimit");
        c.arg(format!("--data={MEMORY}:{MEMORY}")).arg("--").arg(plain.get_program()).args(plain.get_args());
        for (key, value) in plain.get_envs() {
            match value {
                Some(value) => c.env(key, value),
                None => c.env_remove(key),
            };
        }
        for var in [
            "http_proxy",
            "https_proxy",
            "all_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "no_proxy",
            "NO_PROXY",
        ] {
            c.env_remove(var);
        }
        for (key, value) in env {
            c.env(key, value);
        }
        let started = Instant::now();
        let out = c.stdin(Stdio::null()).output().expect("prlimit (util-linux)");
        (Run::from(out, &all), started.elapsed())
    }

    /// Every spelling of `secret` a server might echo: raw, percent-encoded, JSON-escaped
    /// (with and without `ensure_ascii`), and for a long one every 24-character piece.
    fn spellings(secret: &str) -> Vec<String> {
        let mut forms = vec![secret.to_string()];
        let percent: String = secret
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() { char::from(b).to_string() } else { format!("%{b:02X}") })
            .collect();
        forms.push(percent);
        let escaped = serde_json::to_string(secret).unwrap();
        forms.push(escaped[1..escaped.len() - 1].to_string());
        let ascii: String = escaped[1..escaped.len() - 1]
            .chars()
            .map(|c| if c.is_ascii() { c.to_string() } else { format!("\\u{:04x}", u32::from(c)) })
            .collect();
        forms.push(ascii);
        if secret.len() > 48 {
            forms.extend(
                secret.as_bytes().windows(24).step_by(12).map(|w| String::from_utf8_lossy(w).into_owned()),
            );
        }
        forms
    }

    /// Nothing of a secret and no control character reached the terminal. A secret in the
    /// data a run printed on stdout (a key or value the server sent) is the server's data,
    /// printed as it is, as stored keys and values always are: stdout is checked for secrets
    /// only when the run failed.
    #[track_caller]
    fn clean(run: &Run, secrets: &[&str]) {
        for secret in secrets {
            for form in spellings(secret) {
                assert!(!run.stderr.contains(&form), "{form:?} leaked on stderr: {run:?}");
                assert!(run.code == 0 || !run.stdout.contains(&form), "{form:?} leaked on stdout: {run:?}");
            }
        }
        for (name, text) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
            let hidden = text.chars().find(|c| c.is_control() && !matches!(c, '\n' | '\t'));
            assert!(hidden.is_none(), "{name} holds {hidden:?}: {run:?}");
        }
    }

    fn page(field: &str, items: &[&str], total: u64) -> String {
        json(200, &format!(r#"{{"{field}": [{}], "total_entries": {total}}}"#, items.join(", ")))
    }

    const ENTRY: &str =
        r#"{"key": "a", "value": 1, "updated_at": "2026-12-01T00:00:00Z", "expires_at": null}"#;

    #[test]
    fn a_page_repeated_or_a_total_that_lies_ends_the_command() {
        // The same page at every offset, as a cache that ignores `offset` would answer.
        let api = FakeApi::airflow(|request, _| {
            if request.target.contains("/listMapped") {
                Reply::Send(page("task_instances", &[r#"{"id": "x", "map_index": 0}"#], 500))
            } else if request.target.starts_with("/api/v2/assets?") {
                Reply::Send(page("assets", &[r#"{"id": 1, "name": "other", "uri": "s3://other"}"#], 500))
            } else {
                Reply::Send(page("task_state_store", &[ENTRY], 500))
            }
        });
        for head in [
            vec!["list", "--limit", "0", "--map-index", "-1"],
            vec!["list", "--limit", "0"],
            vec!["get", "k", "--asset", "mine"],
        ] {
            let mut args = head.clone();
            if head[0] == "list" {
                args.extend_from_slice(&TASK);
            }
            let before = api.requests().len();
            let (run, took) = bounded(&api.url, &args, &[]);
            let run = run.code(4);
            assert!(run.stderr.contains("the API repeats itself"), "{run:?}");
            assert!(took < Duration::from_secs(10), "{took:?}");
            assert!(
                api.requests().len() - before <= 4,
                "{head:?}: {} requests",
                api.requests().len() - before
            );
            clean(&run, &[]);
        }
        // A total past what the transport reads: refused at the first page.
        let api =
            FakeApi::airflow(|_, _| Reply::Send(page("task_state_store", &[ENTRY], 1_000_000_000_000_000)));
        let mut args = vec!["list", "--limit", "0"];
        args.extend_from_slice(&TASK);
        args.extend_from_slice(&["--map-index", "0"]);
        let (run, _) = bounded(&api.url, &args, &[]);
        let run = run.code(4);
        assert!(run.stderr.contains("reads at most 1000000"), "{run:?}");
        assert_eq!(api.requests().len(), 2, "the version and one page");
    }

    #[test]
    fn an_answer_past_the_body_limit_is_refused_in_bounded_memory() {
        // 250 MiB of a JSON array of zeros: a parse of it all would take gigabytes.
        let api = FakeApi::airflow(|_, _| Reply::Stream {
            head: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 262144002"
                .to_string(),
            chunk: b"0,".repeat(32 * 1024),
            times: 4000,
            every: Duration::ZERO,
        });
        let mut args = vec!["get", "k"];
        args.extend_from_slice(&TASK);
        let (run, took) = bounded(&api.url, &args, &[]);
        let run = run.code(4);
        assert!(run.stderr.contains("larger than 16 MiB"), "{run:?}");
        assert!(took < Duration::from_secs(30), "{took:?}");
        // Just under the limit, the largest answer that is read: still within the bound.
        let body = format!(
            r#"{{"key": "k", "value": [{}0], "updated_at": "2026-12-01T00:00:00Z"}}"#,
            "0,".repeat(8_000_000)
        );
        let api = FakeApi::airflow(move |_, _| Reply::Send(json(200, &body)));
        let (run, _) = bounded(&api.url, &args, &[]);
        assert!(matches!(run.code, 0 | 4), "{run:?}");
        assert!(!run.stderr.contains("memory allocation"), "{run:?}");
    }

    #[test]
    fn a_body_that_drips_or_never_ends_stops_at_the_request_timeout() {
        for (times, every) in [(u64::MAX, Duration::from_millis(200)), (u64::MAX, Duration::ZERO)] {
            let api = FakeApi::airflow(move |_, _| Reply::Stream {
                head: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
                    .to_string(),
                chunk: b"2\r\n  \r\n".to_vec(),
                times,
                every,
            });
            let mut args = vec!["--api-timeout", "2", "get", "k"];
            args.extend_from_slice(&TASK);
            let (run, took) = bounded(&api.url, &args, &[]);
            let run = run.code(4);
            assert!(run.stderr.contains("no answer within 2 s (--api-timeout)"), "{run:?}");
            assert!(took < Duration::from_secs(10), "{took:?}");
        }
    }

    /// The answer to every request but the version's and the login's.
    fn echoing(answer: impl Fn(&Request) -> String + Send + Sync + 'static) -> FakeApi {
        FakeApi::airflow(move |request, _| {
            if request.target == "/auth/token" {
                Reply::Send(json(201, r#"{"access_token": "minted-token-0123456789abcdef"}"#))
            } else {
                Reply::Send(answer(request))
            }
        })
    }

    #[test]
    fn secrets_are_masked_in_every_spelling_a_server_echoes_them() {
        let token = token();
        let quoted = serde_json::to_string(&token).unwrap();
        let percent: String = token
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() { char::from(b).to_string() } else { format!("%{b:02X}") })
            .collect();
        let padding = "y".repeat(280);
        let answers: Vec<String> = vec![
            // Quoted past the 300 characters a message keeps.
            json(401, &format!(r#"{{"detail": "{padding} token {token}"}}"#)),
            // In an object, and in a body without `detail`.
            json(403, &format!(r#"{{"detail": {{"given": {quoted}, "why": "expired"}}}}"#)),
            json(500, &format!(r#"{{"error": {quoted}, "pad": "{padding}"}}"#)),
            // In a validation error's place and message.
            json(422, &format!(r#"{{"detail": [{{"loc": ["query", {quoted}], "msg": "bad {token}"}}]}}"#)),
            // In a redirect's Location, raw and percent-encoded.
            response(
                302,
                "application/json",
                "{}",
                &format!("Location: http://elsewhere/{padding}?t={token}&u={percent}\r\n"),
            ),
            // In a Content-Type.
            response(200, &format!("text/x-{token}"), "x", ""),
        ];
        for answer in answers {
            let api = echoing(move |_| answer.clone());
            let mut args = vec!["get", "k"];
            args.extend_from_slice(&TASK);
            let (run, _) = bounded(&api.url, &args, &[("AIRFLOW_CLI_TOKEN", &token)]);
            assert!(matches!(run.code, 2 | 4 | 10), "{run:?}");
            clean(&run, &[&token]);
        }
        // A login whose password the server echoes, escaped by JSON, near the cut, in an object.
        let escaped = serde_json::to_string(PASSWORD).unwrap();
        let answers: Vec<String> = vec![
            json(401, &format!(r#"{{"detail": "{} {}"}}"#, "z".repeat(290), &escaped[1..escaped.len() - 1])),
            json(401, &format!(r#"{{"detail": {{"password": {escaped}}}}}"#)),
            json(
                400,
                &format!(r#"{{"input": {{"username": "ann", "password": {escaped}}}, "pad": "{padding}"}}"#),
            ),
        ];
        for answer in answers {
            let api = FakeApi::airflow(move |_, _| Reply::Send(answer.clone()));
            let mut args = vec!["--api-username", "ann", "get", "k"];
            args.extend_from_slice(&TASK);
            let (run, _) = bounded(&api.url, &args, &[("STATE_STORE_API_PASSWORD", PASSWORD)]);
            let run = run.code(10);
            clean(&run, &[PASSWORD]);
        }
    }

    #[test]
    fn control_characters_from_the_server_never_reach_the_terminal() {
        let api = FakeApi::start(|request, _| {
            if request.target == "/api/v2/version" {
                Reply::Send(json(200, r#"{"version": "3.3.2\u001b]0;owned\u0007\u001b[2J"}"#))
            } else {
                Reply::Send(json(404, r#"{"detail": "no \u001b[31mkey\u001b[0m\r\nerror: forged line"}"#))
            }
        });
        let mut args = vec!["-v", "get", "k"];
        args.extend_from_slice(&TASK);
        let (run, _) = bounded(&api.url, &args, &[]);
        let run = run.code(1);
        assert!(run.stderr.contains("3.3.2\\x1b]0;owned"), "{run:?}");
        assert!(!run.stderr.lines().any(|l| l.starts_with("error: forged")), "{run:?}");
        clean(&run, &[]);
    }

    #[test]
    fn a_write_that_may_have_been_carried_out_is_never_sent_again() {
        // A gateway that forwarded the write, then answered 504 or lost the connection.
        for lost in [Reply::Send(json(504, r#"{"detail": "Gateway Timeout"}"#)), Reply::Close] {
            let lost = std::sync::Mutex::new(Some(lost));
            let api = FakeApi::airflow(move |request, _| match request.method.as_str() {
                "PUT" | "DELETE" => lost.lock().unwrap().take().unwrap_or(Reply::Close),
                _ => Reply::Send(page("task_state_store", &[ENTRY], 1)),
            });
            let mut args = vec!["set", "race", "\"tool-old\""];
            args.extend_from_slice(&TASK);
            let (run, _) = bounded(&api.url, &args, &[]);
            let run = run.code(4);
            assert!(run.stderr.contains("may have been carried out"), "{run:?}");
            let writes = api.requests().iter().filter(|r| r.method == "PUT").count();
            assert_eq!(writes, 1, "{:?}", api.requests());
        }
        // A clear whose DELETE a gateway answered 504: not sent again either.
        let api = FakeApi::airflow(|request, _| match request.method.as_str() {
            "DELETE" => Reply::Send(json(504, "{}")),
            _ => Reply::Send(page("task_state_store", &[ENTRY], 1)),
        });
        let mut args = vec!["clear", "--yes"];
        args.extend_from_slice(&TASK);
        bounded(&api.url, &args, &[]).0.code(4);
        assert_eq!(api.requests().iter().filter(|r| r.method == "DELETE").count(), 1);
        // A 503 that says the server did nothing (Retry-After) is tried again, and a GET after
        // a 502 too: neither can change anything twice.
        let api = FakeApi::airflow(|request, n| match (request.method.as_str(), n) {
            ("PUT", 1) => Reply::Send(response(503, "application/json", "{}", "Retry-After: 1\r\n")),
            ("PUT", _) => Reply::Send(no_content()),
            ("GET", 3) => Reply::Send(json(502, "{}")),
            _ => Reply::Send(json(
                200,
                r#"{"key": "race", "value": "tool-old", "updated_at": "2026-12-01T00:00:00Z", "expires_at": null}"#,
            )),
        });
        let mut args = vec!["set", "race", "\"tool-old\""];
        args.extend_from_slice(&TASK);
        bounded(&api.url, &args, &[]).0.success();
        let methods: Vec<String> = api.requests().iter().map(|r| r.method.clone()).collect();
        assert_eq!(methods, ["GET", "PUT", "PUT", "GET", "GET"], "{:?}", api.requests());
    }

    /// A write answered 503 with `Retry-After` every time is sent four times, and the message
    /// says so: how many times, and that the server did nothing each time.
    #[test]
    fn a_write_retried_after_503_says_how_many_times_it_was_sent() {
        let api = FakeApi::airflow(|request, _| match request.method.as_str() {
            "PUT" => {
                Reply::Send(response(503, "application/json", r#"{"detail": "busy"}"#, "Retry-After: 1\r\n"))
            }
            _ => Reply::Send(json(404, r#"{"detail": "not found"}"#)),
        });
        let mut args = vec!["set", "k", "1"];
        args.extend_from_slice(&TASK);
        let (run, _) = bounded(&api.url, &args, &[]);
        let run = run.code(4);
        assert_eq!(api.requests().iter().filter(|r| r.method == "PUT").count(), 4, "{:?}", api.requests());
        assert!(run.stderr.contains("answered 503: busy; sent 4 times"), "{run:?}");
        assert!(run.stderr.contains("the server did nothing"), "{run:?}");
        assert!(!run.stderr.contains("may have been carried out"), "{run:?}");
        // A GET is sent again after a gateway's 502 too, and says so as well.
        let api = FakeApi::start(|_, _| Reply::Send(json(502, r#"{"detail": "bad gateway"}"#)));
        let (run, _) = bounded(&api.url, &args, &[]);
        let run = run.code(4);
        assert!(run.stderr.contains("answered 502: bad gateway; sent 4 times"), "{run:?}");
        assert_eq!(api.requests().len(), 4);
    }

    /// A body that is not UTF-8 is no JSON (RFC 8259): refused, never shown with replacement
    /// characters as if the server held them.
    #[test]
    fn an_answer_that_is_not_utf8_is_refused() {
        let raw = |body: &[u8]| -> Reply {
            let mut reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            reply.extend_from_slice(body);
            Reply::Bytes(reply)
        };
        let entry: &[u8] =
            b"{\"key\": \"k\", \"value\": \"caf\xe9\", \"updated_at\": \"2026-12-01T00:00:00Z\", \"expires_at\": null}";
        let page: &[u8] = b"{\"task_state_store\": [{\"key\": \"k\xff\", \"value\": 1, \"updated_at\": \"2026-12-01T00:00:00Z\", \"expires_at\": null}], \"total_entries\": 1}";
        for (body, head) in [(entry, vec!["get", "k"]), (page, vec!["list", "--map-index", "-1"])] {
            let body = body.to_vec();
            let api = FakeApi::airflow(move |_, _| raw(&body));
            let mut args = head.clone();
            args.extend_from_slice(&TASK);
            let (run, _) = bounded(&api.url, &args, &[]);
            let run = run.code(4);
            assert!(run.stderr.contains("not UTF-8") && run.stderr.contains("RFC 8259"), "{run:?}");
            assert!(!run.stdout.contains('\u{fffd}') && !run.stderr.contains('\u{fffd}'), "{run:?}");
            clean(&run, &[]);
        }
    }

    /// Standard base64, with and without padding, and its URL-safe alphabet.
    fn base64_forms(bytes: &[u8]) -> Vec<String> {
        const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut padded = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().enumerate().fold(0_u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
            for i in 0..4 {
                if i <= chunk.len() {
                    padded.push(char::from(STANDARD[(n >> (18 - 6 * i) & 63) as usize]));
                } else {
                    padded.push('=');
                }
            }
        }
        let bare = padded.trim_end_matches('=').to_string();
        let url = padded.replace('+', "-").replace('/', "_");
        let url_bare = bare.replace('+', "-").replace('/', "_");
        vec![padded, bare, url, url_bare]
    }

    /// `text`, or a 24-character piece of it, on stderr (or on stdout of a failed run).
    #[track_caller]
    fn never_shown(run: &Run, text: &str) {
        let mut pieces = vec![text.to_string()];
        pieces
            .extend(text.as_bytes().windows(24).step_by(8).map(|w| String::from_utf8_lossy(w).into_owned()));
        for piece in pieces {
            assert!(!run.stderr.contains(&piece), "{piece:?} of {text:?} leaked on stderr: {run:?}");
            assert!(run.code == 0 || !run.stdout.contains(&piece), "{piece:?} leaked on stdout: {run:?}");
        }
    }

    /// What a server may echo beyond the raw and JSON spellings: a token or a login in base64
    /// (a Basic header carries `base64(user:password)`), and a password percent-encoded with
    /// lower-case or mixed-case hex, which RFC 3986 makes the same encoding, whichever
    /// characters the encoder left alone.
    #[test]
    fn secrets_in_base64_and_in_any_percent_encoding_are_masked() {
        let token = token();
        let mut echoes: Vec<String> = base64_forms(token.as_bytes());
        echoes.extend(base64_forms(format!("{token}\n").as_bytes()));
        for echo in echoes {
            let shown = echo.clone();
            let api = echoing(move |_| json(401, &format!(r#"{{"detail": "Basic {shown} refused"}}"#)));
            let mut args = vec!["get", "k"];
            args.extend_from_slice(&TASK);
            let (run, _) = bounded(&api.url, &args, &[("AIRFLOW_CLI_TOKEN", &token)]);
            let run = run.code(10);
            never_shown(&run, &echo);
            clean(&run, &[&token]);
        }
        let every: String = PASSWORD
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() { char::from(b).to_string() } else { format!("%{b:02x}") })
            .collect();
        // Python's `quote` (`/` left alone), in lower case.
        let quoted: String = PASSWORD
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b == b'/' {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02x}")
                }
            })
            .collect();
        let mixed: String = PASSWORD
            .bytes()
            .enumerate()
            .map(|(i, b)| match (b.is_ascii_alphanumeric(), i % 2) {
                (true, _) => char::from(b).to_string(),
                (false, 0) => format!("%{b:02x}"),
                (false, _) => format!("%{b:02X}"),
            })
            .collect();
        let mut echoes = vec![every, quoted, mixed];
        echoes.extend(base64_forms(format!("ann:{PASSWORD}").as_bytes()));
        echoes.extend(base64_forms(PASSWORD.as_bytes()));
        for echo in echoes {
            let shown = echo.clone();
            let api = FakeApi::airflow(move |_, _| {
                Reply::Send(json(401, &format!(r#"{{"detail": "bad login Basic {shown} for ann"}}"#)))
            });
            let mut args = vec!["--api-username", "ann", "get", "k"];
            args.extend_from_slice(&TASK);
            let (run, _) = bounded(&api.url, &args, &[("STATE_STORE_API_PASSWORD", PASSWORD)]);
            let run = run.code(10);
            assert!(run.stderr.contains("bad login Basic ***"), "{run:?}");
            never_shown(&run, &echo);
            clean(&run, &[PASSWORD]);
        }
    }

    /// The `offset` and `limit` of a page request.
    fn window(request: &Request) -> (u64, u64) {
        let query = request.target.split_once('?').map_or("", |(_, q)| q);
        let number = |name: &str| {
            query.split('&').find_map(|p| p.strip_prefix(&format!("{name}="))).and_then(|v| v.parse().ok())
        };
        (number("offset").unwrap_or(0), number("limit").unwrap_or(0))
    }

    /// A server whose every page holds one new entry cannot keep a command paging: the pages a
    /// walk makes follow from its first page's size and `total_entries` (docs/rest.md), and a
    /// page shorter than the first is the last.
    #[test]
    fn one_entry_pages_end_within_the_bound_the_first_page_sets() {
        // Past 2,000 pages the server answers 500, so that a walk without a bound ends too.
        const GIVE_UP: usize = 2_000;
        let entry = |n: u64| ENTRY.replace(r#""a""#, &format!("\"k{n:07}\""));
        // One entry a page: a million said, or a total that grows with every page.
        for growing in [false, true] {
            let api = FakeApi::airflow(move |request, n| {
                if n > GIVE_UP {
                    return Reply::Send(json(500, r#"{"detail": "gave up"}"#));
                }
                let (offset, _) = window(request);
                let total = if growing { offset + 3 } else { 1_000_000 };
                Reply::Send(page("task_state_store", &[&entry(offset)], total))
            });
            for head in [
                vec!["list", "--limit", "0", "--map-index", "-1"],
                vec!["clear", "--yes", "--map-index", "-1"],
            ] {
                let mut args = head.clone();
                args.extend_from_slice(&TASK);
                let before = api.requests().len();
                let (run, took) = bounded(&api.url, &args, &[]);
                let run = run.code(4);
                let requests = api.requests().len() - before;
                assert!(requests <= 8, "{head:?} growing={growing}: {requests} requests: {run:?}");
                assert!(run.stderr.contains("pages of 1"), "{run:?}");
                assert!(took < Duration::from_secs(10), "{took:?}");
                assert!(api.requests().iter().all(|r| r.method == "GET"), "nothing deleted");
                clean(&run, &[]);
            }
        }
        // 103 keys, pages of 100: the short page is the last, whatever the total says.
        let api = FakeApi::airflow(move |request, _| {
            let (offset, limit) = window(request);
            let count = limit.min(103_u64.saturating_sub(offset));
            let items: Vec<String> = (offset..offset + count).map(entry).collect();
            let items: Vec<&str> = items.iter().map(String::as_str).collect();
            Reply::Send(page("task_state_store", &items, 1_000))
        });
        let mut args = vec!["list", "--limit", "0", "--map-index", "-1", "-o", "plain"];
        args.extend_from_slice(&TASK);
        let (run, _) = bounded(&api.url, &args, &[]);
        let run = run.success();
        assert_eq!(run.stdout.lines().count(), 103, "{run:?}");
        assert_eq!(api.requests().len(), 3, "the version and two pages: {:?}", api.requests());
    }

    /// A server whose maximum page is below the 100 asked for (`[api] maximum_page_limit`)
    /// is read whole: its first page sets the page size.
    #[test]
    fn a_server_with_smaller_pages_is_read_whole() {
        let api = FakeApi::airflow(|request, _| {
            let (offset, limit) = window(request);
            let items: Vec<String> = (offset..(offset + limit.min(30)).min(95))
                .map(|n| ENTRY.replace(r#""a""#, &format!("\"k{n:03}\"")))
                .collect();
            let items: Vec<&str> = items.iter().map(String::as_str).collect();
            Reply::Send(page("task_state_store", &items, 95))
        });
        let mut args = vec!["list", "--limit", "0", "--map-index", "-1", "-o", "plain"];
        args.extend_from_slice(&TASK);
        let (run, _) = bounded(&api.url, &args, &[]);
        let run = run.success();
        assert_eq!(run.stdout.lines().count(), 95, "{run:?}");
        assert_eq!(api.requests().len(), 5, "the version and four pages of 30, 30, 30, 5");
    }

    #[test]
    fn ids_and_keys_the_api_cannot_address_are_refused_before_anything_is_sent() {
        let api = FakeApi::start(|_, _| {
            Reply::Send(json(500, r#"{"detail": "nothing should reach this server"}"#))
        });
        let reaching =
            ["--dag-id", "smoke", "--run-id", "r1/taskInstances/t1/state-store/pwn", "--task-id", "nosuch"];
        let lines: Vec<Vec<&str>> = vec![
            [&["set", "k", "1"][..], &reaching].concat(),
            [&["get", "k"][..], &["--dag-id", "a/b", "--run-id", "r", "--task-id", "t"]].concat(),
            [&["clear", "--yes"][..], &["--dag-id", "d", "--run-id", "r", "--task-id", "t/x"]].concat(),
            [&["list"][..], &reaching].concat(),
            [&["set", "k\n", "1"][..], &TASK].concat(),
            [&["get", "a\nb"][..], &TASK].concat(),
            [&["delete", "a\r"][..], &TASK].concat(),
            vec!["set", "k\n", "1", "--asset-id", "1"],
            // A `.` or `..` segment, which a proxy that normalises paths would resolve:
            // `DELETE …/state-store/..` would reach the task instance's collection.
            [&["delete", ".."][..], &TASK].concat(),
            [&["delete", "."][..], &TASK].concat(),
            [&["get", "a/../b"][..], &TASK].concat(),
            [&["set", "a/./b", "1"][..], &TASK].concat(),
            [&["set", "x/..", "1"][..], &TASK].concat(),
            vec!["delete", "..", "--asset-id", "1"],
            [&["get", "k"][..], &["--dag-id", "..", "--run-id", "r", "--task-id", "t"]].concat(),
            [&["list"][..], &["--dag-id", "d", "--run-id", ".", "--task-id", "t"]].concat(),
        ];
        for line in &lines {
            let (run, _) = bounded(&api.url, line, &[]);
            let run = run.code(2);
            assert!(run.stderr.contains("cannot address"), "{run:?}");
        }
        assert!(api.requests().is_empty(), "{:?}", api.requests());
    }

    #[test]
    fn tokens_are_sent_alone_and_malformed_ones_refused() {
        let api = FakeApi::airflow(|_, _| Reply::Send(json(404, r#"{"detail": "not found"}"#)));
        let mut args = vec!["get", "k"];
        args.extend_from_slice(&TASK);
        bounded(&api.url, &args, &[("AIRFLOW_CLI_TOKEN", "Bearer eyJ.abc")]).0.code(1);
        let sent = api.requests().last().and_then(|r| r.header("authorization").map(str::to_string));
        assert_eq!(sent.as_deref(), Some("Bearer eyJ.abc"));
        let (run, _) = bounded(&api.url, &args, &[("AIRFLOW_CLI_TOKEN", "t0k\r\nX-Injected: 1")]);
        let run = run.code(10);
        assert!(run.stderr.contains("malformed") && run.stderr.contains("line break"), "{run:?}");
        assert!(!run.stderr.contains("t0k"), "{run:?}");
        assert!(api.requests().iter().all(|r| r.header("x-injected").is_none()));
        // The token command gets no API password: it is the tool's own secret.
        let before = api.requests().len();
        let cmd = "sh -c 'echo tok-${STATE_STORE_API_PASSWORD:-none}'";
        let mut with_cmd = vec!["--api-token-cmd", cmd];
        with_cmd.extend_from_slice(&args);
        bounded(&api.url, &with_cmd, &[("STATE_STORE_API_PASSWORD", "pw-inherited")]).0.code(1);
        let sent =
            api.requests()[before..].iter().find_map(|r| r.header("authorization").map(str::to_string));
        assert_eq!(sent.as_deref(), Some("Bearer tok-none"));
    }

    #[test]
    fn proxies_are_chosen_as_curl_chooses_them() {
        let api = FakeApi::airflow(|_, _| Reply::Send(json(404, r#"{"detail": "not found"}"#)));
        let proxy = FakeApi::start(|_, _| Reply::Send(json(502, r#"{"detail": "the proxy"}"#)));
        let mut args = vec!["get", "k"];
        args.extend_from_slice(&TASK);
        // Upper-case HTTP_PROXY is a request header under CGI (httpoxy): curl ignores it.
        bounded(&api.url, &args, &[("HTTP_PROXY", &proxy.url), ("AIRFLOW_CLI_TOKEN", "t0k")]).0.code(1);
        // A CIDR range in NO_PROXY, as curl reads it since 7.86.
        for no_proxy in ["127.0.0.0/8", "10.0.0.1,127.0.0.1/32", "::1,127.0.0.1"] {
            bounded(&api.url, &args, &[("http_proxy", &proxy.url), ("NO_PROXY", no_proxy)]).0.code(1);
        }
        assert!(proxy.requests().is_empty(), "{:?}", proxy.requests());
        // A SOCKS5 proxy that resolves the host (socks5h), as an ssh tunnel gives.
        let socks = Socks5::start();
        let all_proxy = format!("socks5h://127.0.0.1:{}", socks.port);
        bounded(&api.url, &args, &[("ALL_PROXY", &all_proxy)]).0.code(1);
        let port = api.url.rsplit(':').next().unwrap();
        assert_eq!(
            socks.connections().first().map(String::as_str),
            Some(format!("127.0.0.1:{port}").as_str())
        );
        let (run, _) = bounded(&api.url, &args, &[("ALL_PROXY", "ftp://127.0.0.1:21")]);
        assert!(run.code(2).stderr.contains("not supported"));
    }

    /// `NO_PROXY` is compared with the host the tool connects to, as curl compares it: an
    /// IPv4 address in another spelling is that address, a name is matched in any case and
    /// with a trailing dot. A host that ends in a number but is no IPv4 address, or one that
    /// the URL standard and the system's resolver read differently, is refused before
    /// anything is sent.
    #[test]
    fn no_proxy_names_the_host_however_the_url_spells_it() {
        let api = FakeApi::airflow(|_, _| Reply::Send(json(404, r#"{"detail": "not found"}"#)));
        let proxy = FakeApi::start(|_, _| Reply::Send(json(502, r#"{"detail": "the proxy"}"#)));
        let port = api.url.rsplit(':').next().unwrap().to_string();
        for (host_given, no_proxy) in [
            ("127.000.000.001", "127.0.0.1"),
            ("0x7f.1", "127.0.0.1"),
            ("2130706433", "127.0.0.0/8"),
            ("0177.0.0.1", "127.0.0.1"),
            ("127.0.0.1", "127.000.000.001"),
        ] {
            let url = format!("http://{host_given}:{port}");
            let mut args = vec!["get", "k"];
            args.extend_from_slice(&TASK);
            let env = [
                ("http_proxy", proxy.url.as_str()),
                ("NO_PROXY", no_proxy),
                ("AIRFLOW_CLI_TOKEN", "t0k-secret"),
            ];
            let (run, _) = bounded(&url, &args, &env);
            run.code(1);
            // The connection went to the address `NO_PROXY` was compared with.
            let host = api.requests().last().and_then(|r| r.header("host").map(str::to_string));
            assert_eq!(host, Some(format!("127.0.0.1:{port}")), "{host_given}");
        }
        assert!(proxy.requests().is_empty(), "the token went through the proxy: {:?}", proxy.requests());
        let before = api.requests().len();
        for host in ["1.2.3.256", "127.0.0.1.", "0x7f.0x.0.1", "08.0.0.1", "1.2.3.4.5", "[::1::2]"] {
            let url = format!("http://{host}:{port}");
            let (run, _) =
                bounded(&url, &["get", "k", "--dag-id", "d", "--run-id", "r", "--task-id", "t"], &[]);
            let run = run.code(2);
            assert!(run.stderr.contains("invalid --api-url"), "{run:?}");
        }
        assert_eq!(api.requests().len(), before, "nothing sent for a host that is refused");
    }

    #[test]
    fn files_that_never_end_or_block_are_refused() {
        let bench = Bench::bare();
        let dir = bench.dir.path();
        let zero = dir.join("zero.cfg");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let fifo = dir.join("fifo.cfg");
        assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let large = dir.join("large.cfg");
        let file = std::fs::File::create(&large).unwrap();
        file.set_len(17 << 20).unwrap();
        for (path, why) in
            [(&zero, "not a regular file"), (&fifo, "not a regular file"), (&large, "larger than 16 MiB")]
        {
            let started = Instant::now();
            let config = path.display().to_string();
            let run = bench.run(&["--config", &config, "list"]).code(3);
            assert!(run.stderr.contains(why), "{run:?}");
            assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        }
        let api = FakeApi::airflow(|_, _| Reply::Send(json(404, "{}")));
        let mut args = vec!["--api-ca-file", "/dev/zero", "get", "k"];
        args.extend_from_slice(&TASK);
        let https = api.url.replace("http://", "https://");
        let (run, _) = bounded(&https, &args, &[]);
        assert!(run.code(2).stderr.contains("not a regular file"));
        assert!(Path::new("/dev/zero").exists());
    }

    #[test]
    fn clear_of_every_map_index_deletes_exactly_what_it_counted() {
        // A DELETE removes the key, as Airflow's does: the clear lists the keys again after.
        let gone = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let deleted = std::sync::Arc::clone(&gone);
        let api = FakeApi::airflow(move |request, _| {
            let target = request.target.as_str();
            if target.contains("/listMapped") {
                return Reply::Send(page(
                    "task_instances",
                    &[r#"{"id": "i0", "map_index": 0}"#, r#"{"id": "i1", "map_index": 1}"#],
                    2,
                ));
            }
            if request.method == "DELETE" {
                deleted.lock().unwrap().push(target.to_string());
                return Reply::Send(no_content());
            }
            let map_index = if target.contains("map_index=0") { 0 } else { 1 };
            let here = |key: &&str| {
                let at = format!("/state-store/{key}?map_index={map_index}");
                !deleted.lock().unwrap().iter().any(|t| t.ends_with(&at))
            };
            let entry = |key: &str| ENTRY.replace(r#""a""#, &format!("\"{key}\""));
            let keys: Vec<String> = if target.contains("map_index=0") {
                ["a"].into_iter().filter(here).map(entry).collect()
            } else if target.contains("map_index=1") {
                ["b", "c"].into_iter().filter(here).map(entry).collect()
            } else {
                vec![]
            };
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            Reply::Send(page("task_state_store", &keys, keys.len() as u64))
        });
        let mut args = vec!["clear", "--yes", "--all-map-indices", "-o", "json"];
        args.extend_from_slice(&TASK);
        let (run, _) = bounded(&api.url, &args, &[]);
        let run = run.success();
        assert_eq!(run.json(), json!({"deleted": 3}));
        let deletes: Vec<String> =
            api.requests().iter().filter(|r| r.method == "DELETE").map(|r| r.target.clone()).collect();
        assert_eq!(
            deletes,
            [
                "/api/v2/dags/d/dagRuns/r/taskInstances/t/state-store/a?map_index=0",
                "/api/v2/dags/d/dagRuns/r/taskInstances/t/state-store/b?map_index=1",
                "/api/v2/dags/d/dagRuns/r/taskInstances/t/state-store/c?map_index=1",
            ]
        );
    }

    /// `clear --all-map-indices` of a task whose keys are at map index -1 and at 3: `listMapped`
    /// names only 3 (it lists map indexes of 0 and up), so whether a task instance holds the
    /// keys at -1 is the API's to say. They are deleted when it takes their DELETE; when it
    /// refuses it (404, no task instance), the one refused DELETE is not sent again, the other
    /// key at -1 is not tried, the keys at 3 are still deleted, and a warning names what is left.
    #[test]
    fn clear_of_every_map_index_tries_the_keys_at_minus_one_and_warns_only_when_refused() {
        for refused in [false, true] {
            // A DELETE removes the key, as Airflow's does: the clear lists the keys again after.
            let gone = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
            let deleted = std::sync::Arc::clone(&gone);
            let api = FakeApi::airflow(move |request, _| {
                let target = request.target.as_str();
                if target.contains("/listMapped") {
                    return Reply::Send(page("task_instances", &[r#"{"id": "i3", "map_index": 3}"#], 1));
                }
                if request.method == "DELETE" {
                    return Reply::Send(if refused && target.ends_with("map_index=-1") {
                        json(
                            404,
                            r#"{"detail": "Task instance not found for dag_id='d', run_id='r', task_id='t', map_index=-1"}"#,
                        )
                    } else {
                        deleted.lock().unwrap().push(target.to_string());
                        no_content()
                    });
                }
                let map_index = if target.contains("map_index=-1") { -1 } else { 3 };
                let here = |key: &&str| {
                    let at = format!("/state-store/{key}?map_index={map_index}");
                    !deleted.lock().unwrap().iter().any(|t| t.ends_with(&at))
                };
                let entry = |key: &str| ENTRY.replace(r#""a""#, &format!("\"{key}\""));
                let keys: Vec<String> = if target.contains("map_index=-1") {
                    ["x", "y"].into_iter().filter(here).map(entry).collect()
                } else if target.contains("map_index=3") {
                    ["z"].into_iter().filter(here).map(entry).collect()
                } else {
                    vec![]
                };
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                Reply::Send(page("task_state_store", &keys, keys.len() as u64))
            });
            let mut args = vec!["clear", "--yes", "--all-map-indices", "-o", "json"];
            args.extend_from_slice(&TASK);
            let (run, _) = bounded(&api.url, &args, &[]);
            let run = run.success();
            let deletes: Vec<String> =
                api.requests().iter().filter(|r| r.method == "DELETE").map(|r| r.target.clone()).collect();
            let at = |key: &str, map_index: i64| {
                format!("/api/v2/dags/d/dagRuns/r/taskInstances/t/state-store/{key}?map_index={map_index}")
            };
            if refused {
                assert_eq!(run.json(), json!({"deleted": 1}), "{run:?}");
                assert_eq!(deletes, [at("x", -1), at("z", 3)]);
                assert!(
                    run.stderr.contains("2 key(s) at map index -1")
                        && run.stderr.contains("answered 404: Task instance not found"),
                    "{run:?}"
                );
            } else {
                assert_eq!(run.json(), json!({"deleted": 3}), "{run:?}");
                assert_eq!(deletes, [at("x", -1), at("y", -1), at("z", 3)]);
                assert!(!run.stderr.contains("warning"), "{run:?}");
            }
        }
    }

    /// Servers drawn from a seed: random statuses, headers and bodies (JSON pages and entries
    /// with random fields, cut JSON, deep nesting, control characters, the token and the
    /// password echoed), for random commands. Whatever they answer, the tool ends within its
    /// bounds with a documented exit code, no panic, nothing of a secret and no control
    /// character on the terminal. `STATE_STORE_TEST_SEED` replays a failure.
    #[test]
    fn servers_drawn_at_random_never_crash_hang_or_leak() {
        const CASES: u64 = 240;
        let (mut rng, seed) = Rng::seeded(0x5e4e);
        let token = token();
        let cases: Vec<(u64, u64)> = (0..CASES).map(|i| (i, rng.next())).collect();
        let failures = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for chunk in cases.chunks(cases.len().div_ceil(4)) {
                let (token, failures) = (&token, &failures);
                scope.spawn(move || {
                    for &(case, draw) in chunk {
                        if let Err(e) = std::panic::catch_unwind(|| fuzz_case(draw, token)) {
                            let why = e.downcast_ref::<String>().cloned().unwrap_or_default();
                            failures.lock().unwrap().push(format!("case {case} (draw {draw}): {why}"));
                        }
                    }
                });
            }
        });
        let failures = failures.into_inner().unwrap();
        assert!(failures.is_empty(), "seed {seed} (STATE_STORE_TEST_SEED={seed}):\n{}", failures.join("\n"));
    }

    fn fuzz_case(draw: u64, token: &str) {
        let echoed = token.to_string();
        let responder = move |request: &Request, n: usize| -> Reply {
            let mut rng = Rng((draw ^ (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)).max(1));
            if request.target == "/api/v2/version" && rng.below(8) != 0 {
                return Reply::Send(json(200, r#"{"version": "3.3.2"}"#));
            }
            fuzz_reply(&mut rng, &echoed)
        };
        let api = FakeApi::start(responder);
        let mut rng = Rng(draw.max(1));
        let commands: [&[&str]; 7] = [
            &["get", "k"],
            &["list", "--limit", "0"],
            &["list"],
            &["set", "k", "{\"a\": 1}"],
            &["delete", "k"],
            &["clear", "--yes"],
            &["clear", "--yes", "--all-map-indices"],
        ];
        let mut args = vec!["--api-timeout", "3", "-v"];
        args.extend_from_slice(commands[usize::try_from(rng.below(7)).unwrap()]);
        let on_asset = rng.below(4) == 0 && !args.contains(&"--all-map-indices");
        if on_asset {
            args.extend_from_slice(&["--asset", "mine"]);
        } else {
            args.extend_from_slice(&TASK);
        }
        // The secret the run was given, which it must never show (the other one, echoed too,
        // is text the tool cannot know to be secret).
        let (env, secret): (Vec<(&str, &str)>, &str) = if rng.below(2) == 0 {
            (vec![("AIRFLOW_CLI_TOKEN", token)], token)
        } else {
            (vec![("STATE_STORE_API_USERNAME", "ann"), ("STATE_STORE_API_PASSWORD", PASSWORD)], PASSWORD)
        };
        let (run, took) = bounded(&api.url, &args, &env);
        assert!(matches!(run.code, 0 | 1 | 2 | 3 | 4 | 5 | 10), "exit {}: {run:?}", run.code);
        assert!(!run.stderr.contains("panicked"), "{run:?}");
        assert!(took < Duration::from_secs(25), "took {took:?}: {run:?}");
        clean(&run, &[secret]);
    }

    fn fuzz_reply(rng: &mut Rng, token: &str) -> Reply {
        const STATUSES: [u16; 16] =
            [200, 200, 200, 201, 204, 301, 400, 401, 403, 404, 405, 422, 429, 500, 503, 504];
        let status = STATUSES[usize::try_from(rng.below(16)).unwrap()];
        let echoes =
            [token.to_string(), serde_json::to_string(PASSWORD).unwrap().trim_matches('"').to_string()];
        let echo = &echoes[usize::try_from(rng.below(2)).unwrap()];
        let text = |rng: &mut Rng| -> String {
            match rng.below(6) {
                0 => format!("{} {echo}", "p".repeat(usize::try_from(rng.below(400)).unwrap())),
                1 => "\\u001b[31mred\\u0007\\r\\nerror: forged".to_string(),
                2 => "é日\\ud83d\\ude80".to_string(),
                3 => String::new(),
                _ => format!("k{}", rng.below(1000)),
            }
        };
        let entry = |rng: &mut Rng| -> String {
            let value = match rng.below(5) {
                0 => "1".to_string(),
                1 => format!("\"{}\"", text(rng)),
                2 => format!(
                    "{}1{}",
                    "[".repeat(usize::try_from(rng.below(600)).unwrap()),
                    "]".repeat(usize::try_from(rng.below(600)).unwrap())
                ),
                3 => "1e400".to_string(),
                _ => "{\"x\": null}".to_string(),
            };
            let updated = if rng.below(5) == 0 {
                "\"yesterday\"".to_string()
            } else {
                "\"2026-12-01T00:00:00Z\"".to_string()
            };
            format!(
                r#"{{"key": "{}", "value": {value}, "updated_at": {updated}, "expires_at": null, "id": {}, "name": "mine", "uri": "s3://m", "map_index": {}}}"#,
                text(rng),
                rng.below(3),
                i64::try_from(rng.below(4)).unwrap() - 1
            )
        };
        let body = match rng.below(7) {
            0 => {
                let field = ["task_state_store", "asset_state_store", "assets", "task_instances"]
                    [usize::try_from(rng.below(4)).unwrap()];
                let items: Vec<String> = (0..rng.below(5)).map(|_| entry(rng)).collect();
                format!(r#"{{"{field}": [{}], "total_entries": {}}}"#, items.join(", "), rng.below(1 << 40))
            }
            1 => entry(rng),
            2 => format!(r#"{{"detail": "{}"}}"#, text(rng)),
            3 => format!(r#"{{"detail": [{{"loc": ["body", "{}"], "msg": "{}"}}]}}"#, text(rng), text(rng)),
            4 => format!(r#"{{"detail": {{"nested": ["{}"]}}, "access_token": "{}"}}"#, text(rng), text(rng)),
            5 => "{\"cut\": [1, 2".to_string(),
            _ => String::new(),
        };
        let content_type = ["application/json", "application/json", "text/html", "text/plain\u{1b}[1m", ""]
            [usize::try_from(rng.below(5)).unwrap()];
        let mut extra = String::new();
        if rng.below(3) == 0 {
            extra.push_str(&format!("Location: http://elsewhere/{echo}?t={}\r\n", text(rng)));
        }
        if status == 503 && rng.below(2) == 0 {
            extra.push_str("Retry-After: 1\r\n");
        }
        match rng.below(12) {
            0 => Reply::Close,
            1 => Reply::Bytes(
                format!("HTTP/1.1 {status} X\r\nContent-Length: 4\r\n\r\n\u{ff}\u{fe}").into_bytes(),
            ),
            _ => Reply::Send(response(status, content_type, &body, &extra)),
        }
    }
}

/// A delete that follows a read deletes exactly the rows that were read, unchanged since: a
/// session that writes while `clear --archive` or `clean --archive` runs holds its transaction
/// open across the archive pass and commits once the archive holds every row, so its write
/// lands between the archive and the delete.
mod exact_delete {
    use super::*;
    use std::path::Path;

    /// The lines of a file being written, 0 until it exists.
    fn lines_so_far(path: &Path) -> usize {
        std::fs::read_to_string(path).map_or(0, |t| t.matches('\n').count())
    }

    fn finished(child: std::process::Child, args: &[&str]) -> Run {
        Run::from(child.wait_with_output().unwrap(), args)
    }

    contract! {
        /// `clear --archive`: a key another session rewrites after it was archived and before
        /// the delete is kept with its new value and named as kept; every other key is in the
        /// archive and gone.
        fn clear_archive_keeps_a_key_rewritten_after_it_was_archived(d: Dialect) {
            let bench = with_run(d);
            seed_bulk(&bench, 2000, 3);
            bench.exec("UPDATE task_state_store SET task_id = 'load'");
            let archive = bench.dir.path().join("cleared.jsonl");
            let path = archive.display().to_string();
            let holder = bench.hold(&format!(
                "UPDATE task_state_store SET value = '\"new\"', updated_at = {} WHERE {} = 'k100007'",
                ts_expr(&bench, "2026-12-01 00:00:00.000000"),
                bench.key_col()
            ));
            let args = cmd(&["clear", "--yes", "--archive", &path, "-o", "json"], &task(&[]));
            let child = bench.cmd(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
            wait_until(60, "the archive holds every key", || lines_so_far(&archive) == 2000);
            holder.commit_with("");
            let run = finished(child, &args).success();
            assert_eq!(run.json(), json!({"deleted": 1999, "kept": [{"map_index": -1, "key": "k100007"}]}));
            assert!(run.stderr.contains("kept 1 key"), "{}", run.stderr);
            assert!(run.stderr.contains("k100007"), "{}", run.stderr);
            let left = bench.rows(&format!("SELECT {}, value FROM task_state_store", bench.key_col()));
            assert_eq!(left, vec!["k100007|\"new\"".to_string()]);
            let archived = support::json_lines(&std::fs::read_to_string(&archive).unwrap());
            assert_eq!(archived.len(), 2000);
        }

        /// The same for an asset's keys, keyed by asset and key.
        fn clear_archive_keeps_an_asset_key_rewritten_after_it_was_archived(d: Dialect) {
            let bench = with_run(d);
            let asset = bench.add_asset("orders", "s3://bucket/orders", true);
            let at = ts_expr(&bench, "2020-01-01 00:00:00.000000");
            let rows: Vec<String> = (0..300).map(|i| format!("({asset}, 'a{i:03}', '1', {at}, 'api')")).collect();
            bench.exec(&format!(
                "INSERT INTO asset_state_store (asset_id, {}, value, updated_at, last_updated_by_kind) VALUES {}",
                bench.key_col(),
                rows.join(", ")
            ));
            let archive = bench.dir.path().join("cleared.jsonl");
            let path = archive.display().to_string();
            let holder = bench.hold(&format!(
                "UPDATE asset_state_store SET value = '\"new\"', updated_at = {} WHERE {} = 'a007'",
                ts_expr(&bench, "2026-12-01 00:00:00.000000"),
                bench.key_col()
            ));
            let args = ["clear", "--asset", "orders", "--yes", "--archive", &path, "-o", "json"];
            let child = bench.cmd(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
            wait_until(60, "the archive holds every key", || lines_so_far(&archive) == 300);
            holder.commit_with("");
            let run = finished(child, &args).success();
            assert_eq!(run.json(), json!({"deleted": 299, "kept": [{"key": "a007"}]}));
            let left = bench.rows(&format!("SELECT {}, value FROM asset_state_store", bench.key_col()));
            assert_eq!(left, vec!["a007|\"new\"".to_string()]);
        }
    }

    /// Runs `clean --archive --batch-size 0` while another session, once the archive holds
    /// every expired row and before the delete, sets the live row k100001 to an expired time
    /// and runs `more` (given the bench and the time it stamps). (On PostgreSQL the session
    /// holds the table in EXCLUSIVE mode, which the archive's reads pass and the delete's
    /// locks wait for; on SQLite it holds the write lock.) The bench, the expired rows before,
    /// the archive's path and the run.
    fn clean_archive_racing(d: Dialect, more: impl Fn(&Bench, &str) -> String) -> (Bench, i64, String, Run) {
        let bench = with_run(d);
        seed_bulk(&bench, 2000, 3);
        let expired = count(&bench, EXPIRED);
        let archive = bench.dir.path().join("expired.jsonl");
        let path = archive.display().to_string();
        let now = ts_expr(&bench, "2026-12-01 00:00:00.000000");
        let expire = format!(
            "UPDATE task_state_store SET expires_at = {}, updated_at = {now} WHERE {} = 'k100001'; {}",
            ts_expr(&bench, "2020-01-03 00:00:00.000000"),
            bench.key_col(),
            more(&bench, &now)
        );
        let holder = match d {
            Dialect::Postgres => bench.hold("LOCK TABLE task_state_store IN EXCLUSIVE MODE"),
            _ => bench.hold(&expire),
        };
        let args = ["clean", "--archive", &path, "--batch-size", "0", "-o", "json"];
        let child = bench.cmd(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let expected = usize::try_from(expired).unwrap();
        wait_until(60, "the archive holds every expired row", || lines_so_far(&archive) == expected);
        holder.commit_with(if d == Dialect::Postgres { &expire } else { "" });
        let run = finished(child, &args).success();
        (bench, expired, path, run)
    }

    /// `clean --archive --batch-size 0`: a live row another session sets to an expired time
    /// after the archive was read is left for the next run, not deleted unarchived, and an
    /// archived row it rewrites is left as written; the run deletes exactly the rows it
    /// archived and still finds as it read them. (On PostgreSQL the session holds the table in
    /// EXCLUSIVE mode, which the archive's reads pass and the delete's locks wait for; on
    /// SQLite it holds the write lock. MySQL's batches skip a row another session holds
    /// locked, so no lock of a test's makes them wait there.)
    fn clean_archive_leaves_a_row_that_expired_after_it_was_read(d: Dialect) {
        // k100001 is live and is set to expire; k100003, expired and archived, is rewritten.
        let (bench, expired, path, run) = clean_archive_racing(d, |bench, now| {
            format!(
                "UPDATE task_state_store SET value = '\"new\"', updated_at = {now} WHERE {} = 'k100003';",
                bench.key_col()
            )
        });
        let doc = run.json();
        assert_eq!(
            fields(&doc, &["archived_rows", "task_rows_deleted", "archived_rows_kept"]),
            json!([expired, expired - 1, 1]),
            "{doc}"
        );
        assert!(run.stderr.contains("of which 1 were written by another session"), "{}", run.stderr);
        let left = bench.rows(&format!("SELECT {k}, value FROM {EXPIRED} ORDER BY {k}", k = bench.key_col()));
        assert_eq!(left, ["k100001|1", "k100003|\"new\""], "left for the next run, as written");
        // The next run archives both and deletes them.
        let run = bench.run(&["clean", "--archive", &path, "-o", "json"]).success();
        let doc = run.json();
        assert_eq!(
            fields(&doc, &["archived_rows", "task_rows_deleted", "archived_rows_kept"]),
            json!([2, 2, 0])
        );
    }

    /// The same race with no archived row rewritten: the row that expires while its batch is
    /// archived is left for the next run, and every row archived is deleted (on PostgreSQL in
    /// the transaction that read them, by their id range).
    fn clean_archive_deletes_what_it_read_while_a_row_expires(d: Dialect) {
        let (bench, expired, _, run) = clean_archive_racing(d, |_, _| String::new());
        let doc = run.json();
        assert_eq!(
            fields(&doc, &["archived_rows", "task_rows_deleted", "archived_rows_kept"]),
            json!([expired, expired, 0]),
            "{doc}"
        );
        let left = bench.rows(&format!("SELECT {k} FROM {EXPIRED} ORDER BY {k}", k = bench.key_col()));
        assert_eq!(left, ["k100001"], "left for the next run");
    }

    #[test]
    fn sqlite_clean_archive_deletes_what_it_read_while_a_row_expires() {
        clean_archive_deletes_what_it_read_while_a_row_expires(Dialect::Sqlite);
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_clean_archive_deletes_what_it_read_while_a_row_expires() {
        clean_archive_deletes_what_it_read_while_a_row_expires(Dialect::Postgres);
    }

    #[test]
    fn sqlite_clean_archive_leaves_a_row_that_expired_after_it_was_read() {
        clean_archive_leaves_a_row_that_expired_after_it_was_read(Dialect::Sqlite);
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_clean_archive_leaves_a_row_that_expired_after_it_was_read() {
        clean_archive_leaves_a_row_that_expired_after_it_was_read(Dialect::Postgres);
    }
}
