//! The test bench: a throw-away metastore per test, the binary run as a user runs it, and
//! assertions that read like sentences.
//!
//! `Bench::new()` creates a SQLite sandbox in a temp dir (through `state-store sandbox create`,
//! the project's own schema code) and points the tool at it through `AIRFLOW_HOME`, with every
//! `AIRFLOW__*` variable of the outer environment removed so tests never see a developer's
//! Airflow configuration.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

pub const BIN: &str = env!("CARGO_BIN_EXE_state-store");

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A directory removed when the test ends.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!("state-store-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct Bench {
    pub dir: TempDir,
    pub db: PathBuf,
    env: Vec<(String, String)>,
}

impl Bench {
    /// An empty Airflow 3.3.2 metastore (SQLite) with the tool pointed at it.
    pub fn new() -> Bench {
        let bench = Bench::bare();
        bench.run(&["sandbox", "create"]).success();
        bench
    }

    /// The tool pointed at a database file that does not exist yet.
    pub fn bare() -> Bench {
        let dir = TempDir::new();
        let db = dir.path().join("airflow.db");
        Bench { dir, db, env: Vec::new() }
    }

    pub fn url(&self) -> String {
        format!("sqlite:///{}", self.db.display())
    }

    /// Sets an environment variable for every later run.
    pub fn env(&mut self, key: &str, value: &str) -> &mut Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn write_config(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write config");
        path
    }

    /// A command as a user would type it, with the database given by the default config
    /// lookup ($AIRFLOW_HOME/airflow.cfg is absent, so AIRFLOW__DATABASE__SQL_ALCHEMY_CONN).
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args);
        for (key, _) in std::env::vars() {
            if key.starts_with("AIRFLOW") {
                cmd.env_remove(key);
            }
        }
        cmd.env("AIRFLOW_HOME", self.dir.path());
        cmd.env("HOME", self.dir.path());
        cmd.env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", self.url());
        for (key, value) in &self.env {
            cmd.env(key, value);
        }
        cmd.stdin(Stdio::null());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.cmd(args).output().expect("run state-store"), args)
    }

    pub fn run_with_stdin(&self, args: &[&str], stdin: &str) -> Run {
        use std::io::Write;
        let mut child = self
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn state-store");
        child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write stdin");
        Run::from(child.wait_with_output().expect("wait"), args)
    }

    pub fn add_dag_run(&self, dag_id: &str, run_id: &str) {
        self.run(&["sandbox", "add-dag-run", "--dag-id", dag_id, "--run-id", run_id]).success();
    }

    /// Adds an asset and returns its id.
    pub fn add_asset(&self, name: &str, uri: &str, active: bool) -> i64 {
        let mut args = vec!["sandbox", "add-asset", "--name", name, "--uri", uri, "-o", "plain"];
        if !active {
            args.push("--inactive");
        }
        self.run(&args).success().stdout.trim().parse().expect("asset id")
    }

    pub fn sqlite(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(&self.db).expect("open test database")
    }

    /// Every row of both state-store tables, for "the database is unchanged" checks.
    pub fn snapshot(&self) -> Vec<String> {
        let conn = self.sqlite();
        let mut rows = Vec::new();
        for sql in [
            "SELECT id, dag_run_id, task_id, map_index, key, dag_id, run_id, value, updated_at, expires_at FROM task_state_store ORDER BY id",
            "SELECT asset_id, key, value, updated_at, last_updated_by_kind, last_updated_by_dag_id, last_updated_by_run_id, last_updated_by_task_id, last_updated_by_map_index FROM asset_state_store ORDER BY asset_id, key",
            "SELECT id, dag_id, run_id FROM dag_run ORDER BY id",
            "SELECT id, name, uri FROM asset ORDER BY id",
        ] {
            let mut stmt = conn.prepare(sql).expect("prepare snapshot");
            let n = stmt.column_count();
            let mapped = stmt
                .query_map([], |row| {
                    let mut cells = Vec::new();
                    for i in 0..n {
                        cells.push(format!("{:?}", row.get_ref(i)?));
                    }
                    Ok(cells.join("|"))
                })
                .expect("query snapshot");
            rows.extend(mapped.map(|r| r.expect("row")));
        }
        rows
    }

    /// Runs `f` and asserts the state-store tables are exactly as before.
    pub fn unchanged<T>(&self, f: impl FnOnce() -> T) -> T {
        let before = self.snapshot();
        let out = f();
        assert_eq!(before, self.snapshot(), "the database changed");
        out
    }

    /// Inserts a task row directly, bypassing the tool (to seed what Airflow would have written).
    pub fn insert_task_row(&self, dag_id: &str, run_id: &str, task_id: &str, map_index: i64, key: &str, value: &str, updated_at: &str, expires_at: Option<&str>) {
        let conn = self.sqlite();
        let dag_run_id: i64 = conn
            .query_row("SELECT id FROM dag_run WHERE dag_id = ?1 AND run_id = ?2", [dag_id, run_id], |r| r.get(0))
            .expect("dag run for seeded row");
        conn.execute(
            "INSERT INTO task_state_store (dag_run_id, task_id, map_index, key, dag_id, run_id, value, updated_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            rusqlite::params![dag_run_id, task_id, map_index, key, dag_id, run_id, value, updated_at, expires_at],
        )
        .expect("insert task row");
    }
}

/// The outcome of one run.
#[derive(Debug)]
pub struct Run {
    pub args: Vec<String>,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from(out: Output, args: &[&str]) -> Run {
        Run {
            args: args.iter().map(|s| s.to_string()).collect(),
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    #[track_caller]
    pub fn code(self, expected: i32) -> Run {
        assert_eq!(self.code, expected, "exit code of {:?}\nstdout: {}\nstderr: {}", self.args, self.stdout, self.stderr);
        self
    }

    #[track_caller]
    pub fn success(self) -> Run {
        self.code(0)
    }

    /// A failure: the expected code, and exactly one line on stderr starting with `error:`
    /// that contains `needle`.
    #[track_caller]
    pub fn fails(self, code: i32, needle: &str) -> Run {
        let run = self.code(code);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "expected one stderr line for {:?}, got: {}", run.args, run.stderr);
        assert!(lines[0].starts_with("error: "), "stderr must start with 'error: ': {}", run.stderr);
        assert!(run.stderr.contains(needle), "stderr of {:?} lacks {needle:?}: {}", run.args, run.stderr);
        run
    }

    #[track_caller]
    pub fn stdout_is(self, expected: &str) -> Run {
        assert_eq!(self.stdout, expected, "stdout of {:?}; stderr: {}", self.args, self.stderr);
        self
    }

    #[track_caller]
    pub fn stderr_has(self, needle: &str) -> Run {
        assert!(self.stderr.contains(needle), "stderr of {:?} lacks {needle:?}: {}", self.args, self.stderr);
        self
    }

    /// stdout parsed as JSON (with Python, the reference parser, not our own).
    pub fn json(&self) -> serde_like::Value {
        serde_like::parse(&self.stdout)
    }
}

/// Parsing JSON output in tests without trusting the crate's own parser: python3 reads it
/// and answers the questions asked. Kept tiny on purpose.
pub mod serde_like {
    use std::process::Command;

    #[derive(Debug)]
    pub struct Value(pub String);

    pub fn parse(text: &str) -> Value {
        Value(text.to_string())
    }

    impl Value {
        /// Evaluates a Python expression over `v` (the parsed JSON) and returns its repr().
        #[track_caller]
        pub fn py(&self, expr: &str) -> String {
            let script = format!("import json,sys\nv=json.loads(sys.stdin.read())\nprint(repr({expr}))");
            let mut child = Command::new("python3")
                .args(["-c", &script])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("python3 is required by the test suite");
            use std::io::Write;
            child.stdin.take().expect("stdin").write_all(self.0.as_bytes()).expect("write");
            let out = child.wait_with_output().expect("python3");
            assert!(out.status.success(), "python3 failed on {:?}: {}", self.0, String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).trim_end().to_string()
        }
    }
}
