//! The test bench: a throw-away metastore per test, the binary run as a user runs it, and
//! assertions that read like sentences.
//!
//! `Bench::new()` creates a SQLite sandbox in a temp dir (through `state-store sandbox create`,
//! the project's own schema code) and points the tool at it through `AIRFLOW_HOME`, with every
//! `AIRFLOW__*` variable of the outer environment removed so tests never see a developer's
//! Airflow configuration.

#![allow(dead_code, clippy::unwrap_used, clippy::too_many_arguments, clippy::type_complexity)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

pub mod http;
pub mod proxy;
pub mod shells;
pub mod tls;

/// One `#[test]` per dialect for each function: `on_sqlite::name` always, `on_postgres::name`
/// and `on_mysql::name` with their features, each calling `name(Dialect::…)`.
macro_rules! contract {
    ($($(#[$meta:meta])* fn $name:ident($d:ident: Dialect) $body:block)*) => {
        $($(#[$meta])* fn $name($d: Dialect) $body)*
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

/// The database a bench runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
    Mysql,
}

/// Server URLs for the PostgreSQL and MySQL benches: the servers this machine kind runs, unless
/// the environment names others. Each test creates its own database there and drops it.
fn admin_url(dialect: Dialect) -> String {
    let (var, default) = match dialect {
        Dialect::Postgres => {
            ("STATE_STORE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
        }
        Dialect::Mysql => ("STATE_STORE_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/"),
        Dialect::Sqlite => unreachable!("SQLite needs no server"),
    };
    std::env::var(var).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_string())
}

/// host, port, user and password of a server URL, for its command-line client.
struct Server {
    host: String,
    port: String,
    user: String,
    password: String,
    base: String,
}

fn server(dialect: Dialect) -> Server {
    let url = admin_url(dialect);
    let (scheme, rest) = url.split_once("://").expect("server URL has a scheme");
    let (auth, hostpart) = rest.rsplit_once('@').unwrap_or(("", rest));
    let (user, password) = auth.split_once(':').unwrap_or((auth, ""));
    let hostport = hostpart.split('/').next().unwrap_or("");
    let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, ""));
    Server {
        host: host.to_string(),
        port: port.to_string(),
        user: user.to_string(),
        password: password.to_string(),
        base: format!("{scheme}://{auth}{}{hostport}", if auth.is_empty() { "" } else { "@" }),
    }
}

pub struct Bench {
    pub dir: TempDir,
    pub db: PathBuf,
    pub dialect: Dialect,
    database: Option<String>,
    env: Vec<(String, String)>,
}

impl Bench {
    /// An empty Airflow 3.3.2 metastore (SQLite) with the tool pointed at it.
    pub fn new() -> Bench {
        Bench::on(Dialect::Sqlite)
    }

    /// An empty Airflow 3.3.2 metastore on `dialect`, created with the project's own schema
    /// code (`state-store sandbox create`).
    pub fn on(dialect: Dialect) -> Bench {
        let mut bench = Bench::bare();
        bench.dialect = dialect;
        if dialect != Dialect::Sqlite {
            let n = COUNTER.fetch_add(1, Ordering::SeqCst);
            let name = format!("state_store_test_{}_{n}", std::process::id());
            bench.admin(&format!("DROP DATABASE IF EXISTS {name}"));
            bench.admin(&format!("CREATE DATABASE {name}"));
            bench.database = Some(name);
        }
        let url = bench.url();
        bench.run(&["--conn", &url, "sandbox", "create"]).success();
        bench
    }

    /// The tool pointed at a SQLite file that does not exist yet.
    pub fn bare() -> Bench {
        let dir = TempDir::new();
        let db = dir.path().join("airflow.db");
        Bench { dir, db, dialect: Dialect::Sqlite, database: None, env: Vec::new() }
    }

    pub fn url(&self) -> String {
        match (self.dialect, &self.database) {
            (Dialect::Sqlite, _) => format!("sqlite:///{}", self.db.display()),
            (dialect, Some(name)) => format!("{}/{name}", server(dialect).base),
            (_, None) => unreachable!("server benches have a database"),
        }
    }

    /// The bench's URL with the server's host and port replaced by a [`proxy::Proxy`] to it,
    /// and the proxy.
    pub fn via_proxy(&self) -> (proxy::Proxy, String) {
        let srv = server(self.dialect);
        let default = if self.dialect == Dialect::Postgres { "5432" } else { "3306" };
        let port = if srv.port.is_empty() { default } else { &srv.port };
        let proxy = proxy::Proxy::to(&format!("{}:{port}", srv.host));
        let url = self.url();
        let hostport =
            if srv.port.is_empty() { srv.host.clone() } else { format!("{}:{}", srv.host, srv.port) };
        let url = url.replacen(&format!("@{hostport}/"), &format!("@127.0.0.1:{}/", proxy.port), 1);
        assert!(url.contains(&format!(":{}/", proxy.port)), "{url}");
        (proxy, url)
    }

    /// The URL of the server with other credentials and database, for connection tests.
    pub fn server_url(dialect: Dialect, user_pass: &str, database: &str) -> String {
        let srv = server(dialect);
        let scheme = if dialect == Dialect::Postgres { "postgresql" } else { "mysql" };
        let port = if srv.port.is_empty() { String::new() } else { format!(":{}", srv.port) };
        format!("{scheme}://{user_pass}@{}{port}/{database}", srv.host)
    }

    /// `user[:password]` of the server's admin account, for building URLs.
    pub fn admin_auth(dialect: Dialect) -> String {
        let srv = server(dialect);
        if srv.password.is_empty() { srv.user } else { format!("{}:{}", srv.user, srv.password) }
    }

    /// Runs SQL on the server as its admin, outside any test database.
    pub fn admin_sql(&self, sql: &str) {
        self.admin(sql);
    }

    /// Runs SQL on the server outside any test database (create/drop database).
    fn admin(&self, sql: &str) {
        self.client(None, sql);
    }

    /// Runs SQL with the dialect's own command-line client and returns its rows, one line
    /// each with `|` between columns (SQLite goes through rusqlite instead).
    fn client(&self, database: Option<&str>, sql: &str) -> String {
        let srv = server(self.dialect);
        let mut cmd = match self.dialect {
            Dialect::Postgres => {
                let mut c = Command::new("psql");
                c.args(["-X", "-q", "-A", "-t", "-F", "|", "-P", "null=NULL", "-v", "ON_ERROR_STOP=1"]);
                c.args(["-h", &srv.host, "-U", &srv.user]);
                if !srv.port.is_empty() {
                    c.args(["-p", &srv.port]);
                }
                c.args(["-d", database.unwrap_or("postgres")]);
                c.env("PGPASSWORD", &srv.password).env("PGTZ", "UTC");
                c.args(["-c", sql]);
                c
            }
            Dialect::Mysql => {
                let mut c = Command::new("mariadb");
                c.args(["--protocol=tcp", "-N", "-B", "-h", &srv.host, "-u", &srv.user]);
                if !srv.port.is_empty() {
                    c.args(["-P", &srv.port]);
                }
                if !srv.password.is_empty() {
                    c.arg(format!("-p{}", srv.password));
                }
                if let Some(db) = database {
                    c.arg(db);
                }
                c.args(["-e", &format!("SET time_zone = '+00:00'; {sql}")]);
                c
            }
            Dialect::Sqlite => unreachable!(),
        };
        let out = cmd.output().expect("the database's command-line client (psql / mariadb) is required");
        assert!(out.status.success(), "{sql}\n{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).replace('\t', "|")
    }

    /// Runs statements against the test database, outside the tool.
    pub fn exec(&self, sql: &str) {
        match self.dialect {
            Dialect::Sqlite => self.sqlite().execute_batch(sql).expect("sql"),
            _ => {
                self.client(self.database.as_deref(), sql);
            }
        }
    }

    /// The rows of a query as `a|b|c` lines (NULL shown as `NULL`).
    pub fn rows(&self, sql: &str) -> Vec<String> {
        match self.dialect {
            Dialect::Sqlite => {
                let conn = self.sqlite();
                let mut stmt = conn.prepare(sql).expect("prepare");
                let n = stmt.column_count();
                stmt.query_map([], |row| {
                    let mut cells = Vec::new();
                    for i in 0..n {
                        cells.push(match row.get_ref(i)? {
                            rusqlite::types::ValueRef::Null => "NULL".to_string(),
                            rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                            rusqlite::types::ValueRef::Real(v) => v.to_string(),
                            rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                                String::from_utf8_lossy(t).into_owned()
                            }
                        });
                    }
                    Ok(cells.join("|"))
                })
                .expect("query")
                .map(|r| r.expect("row"))
                .collect()
            }
            Dialect::Postgres => {
                self.client(self.database.as_deref(), sql).lines().map(str::to_string).collect()
            }
            Dialect::Mysql => {
                self.client(self.database.as_deref(), sql).lines().map(str::to_string).collect()
            }
        }
    }

    /// The first column of the first row.
    pub fn scalar(&self, sql: &str) -> String {
        self.rows(sql).into_iter().next().unwrap_or_default()
    }

    /// An SQL expression giving a timestamp column as Airflow's SQLite text
    /// (`YYYY-MM-DD HH:MM:SS.ffffff`, UTC) on every dialect.
    pub fn ts(&self, column: &str) -> String {
        match self.dialect {
            Dialect::Sqlite => column.to_string(),
            Dialect::Postgres => format!("to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"),
            Dialect::Mysql => format!("DATE_FORMAT({column}, '%Y-%m-%d %H:%i:%s.%f')"),
        }
    }

    /// A timestamp literal in Airflow's text form, as the dialect takes it.
    pub fn ts_lit(&self, text: Option<&str>) -> String {
        match (text, self.dialect) {
            (None, _) => "NULL".to_string(),
            (Some(t), Dialect::Postgres) => format!("'{t}+00'"),
            (Some(t), _) => format!("'{t}'"),
        }
    }

    /// The key column, quoted for the dialect (`key` is reserved in MySQL).
    pub fn key_col(&self) -> &'static str {
        if self.dialect == Dialect::Mysql { "`key`" } else { "\"key\"" }
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

    /// A command as a user would type it, with the database given by the environment
    /// ($AIRFLOW_HOME/airflow.cfg is absent, so AIRFLOW__DATABASE__SQL_ALCHEMY_CONN).
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args);
        for (key, _) in std::env::vars() {
            if key.starts_with("AIRFLOW")
                || key.starts_with("STATE_STORE_API")
                || key == "STATE_STORE_TRUSTED_CONFIG_OWNERS"
            {
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

    /// Adds a dag run with an unmapped task instance of each task, as the scheduler creates it.
    pub fn add_dag_run_with(&self, dag_id: &str, run_id: &str, task_ids: &[&str]) {
        let mut args = vec!["sandbox", "add-dag-run", "--dag-id", dag_id, "--run-id", run_id];
        for task_id in task_ids {
            args.extend(["--task-id", task_id]);
        }
        self.run(&args).success();
    }

    /// Adds task instances of a task to a dag run: one per map index (the expansion of a
    /// mapped task), or the unmapped one when `map_indexes` is empty.
    pub fn add_task_instance(&self, dag_id: &str, run_id: &str, task_id: &str, map_indexes: &[i64]) {
        let indexes: Vec<String> = map_indexes.iter().map(i64::to_string).collect();
        let mut args = vec![
            "sandbox",
            "add-task-instance",
            "--dag-id",
            dag_id,
            "--run-id",
            run_id,
            "--task-id",
            task_id,
        ];
        for index in &indexes {
            args.extend(["--map-index", index.as_str()]);
        }
        self.run(&args).success();
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
        assert_eq!(self.dialect, Dialect::Sqlite, "a SQLite-only helper");
        rusqlite::Connection::open(&self.db).expect("open test database")
    }

    /// Every row of both state-store tables and of the parents they point at, for "the
    /// database is unchanged" checks.
    pub fn snapshot(&self) -> Vec<String> {
        let k = self.key_col();
        let mut rows = Vec::new();
        for sql in [
            format!(
                "SELECT id, dag_run_id, task_id, map_index, {k}, dag_id, run_id, value, {}, {} FROM task_state_store ORDER BY id",
                self.ts("updated_at"),
                self.ts("expires_at")
            ),
            format!(
                "SELECT asset_id, {k}, value, {}, last_updated_by_kind, last_updated_by_dag_id, last_updated_by_run_id, last_updated_by_task_id, last_updated_by_map_index FROM asset_state_store ORDER BY asset_id, {k}",
                self.ts("updated_at")
            ),
            "SELECT id, dag_id, run_id FROM dag_run ORDER BY id".to_string(),
            "SELECT id, name, uri FROM asset ORDER BY id".to_string(),
        ] {
            rows.extend(self.rows(&sql));
        }
        rows
    }

    /// Every column of both state-store tables except task_state_store's own `id`, which a
    /// row deleted and restored cannot keep, for "restored exactly" checks.
    pub fn content_snapshot(&self) -> Vec<String> {
        let k = self.key_col();
        let mut rows = self.rows(&format!(
            "SELECT dag_run_id, task_id, map_index, {k}, dag_id, run_id, value, {}, {} FROM task_state_store ORDER BY dag_id, run_id, task_id, map_index, {k}",
            self.ts("updated_at"),
            self.ts("expires_at")
        ));
        rows.extend(self.rows(&format!(
            "SELECT asset_id, {k}, value, {}, last_updated_by_kind, last_updated_by_dag_id, last_updated_by_run_id, last_updated_by_task_id, last_updated_by_map_index FROM asset_state_store ORDER BY asset_id, {k}",
            self.ts("updated_at")
        )));
        rows
    }

    /// Runs `f` and asserts the state-store tables are exactly as before.
    pub fn unchanged<T>(&self, f: impl FnOnce() -> T) -> T {
        let before = self.snapshot();
        let out = f();
        assert_eq!(before, self.snapshot(), "the database changed ({:?})", self.dialect);
        out
    }

    /// Inserts task rows directly, bypassing the tool (to seed what Airflow would have
    /// written): (task_id, map_index, key, value, updated_at, expires_at) for one dag run.
    pub fn insert_task_rows(
        &self,
        dag_id: &str,
        run_id: &str,
        rows: &[(&str, i64, &str, &str, &str, Option<&str>)],
    ) {
        let dag_run_id = self.scalar(&format!(
            "SELECT id FROM dag_run WHERE dag_id = {} AND run_id = {}",
            self.lit(dag_id),
            self.lit(run_id)
        ));
        for chunk in rows.chunks(500) {
            let values: Vec<String> = chunk
                .iter()
                .map(|(task_id, map_index, key, value, updated, expires)| {
                    format!(
                        "({dag_run_id}, {}, {map_index}, {}, {}, {}, {}, {}, {})",
                        self.lit(task_id),
                        self.lit(key),
                        self.lit(dag_id),
                        self.lit(run_id),
                        self.lit(value),
                        self.ts_lit(Some(updated)),
                        self.ts_lit(*expires)
                    )
                })
                .collect();
            self.exec(&format!(
                "INSERT INTO task_state_store (dag_run_id, task_id, map_index, {}, dag_id, run_id, value, updated_at, expires_at) VALUES {}",
                self.key_col(),
                values.join(", ")
            ));
        }
    }

    pub fn insert_task_row(
        &self,
        dag_id: &str,
        run_id: &str,
        task_id: &str,
        map_index: i64,
        key: &str,
        value: &str,
        updated_at: &str,
        expires_at: Option<&str>,
    ) {
        self.insert_task_rows(dag_id, run_id, &[(task_id, map_index, key, value, updated_at, expires_at)]);
    }

    /// A string literal for test-written SQL (tests choose their text; the tool binds).
    pub fn lit(&self, text: &str) -> String {
        let escaped = text.replace('\'', "''");
        if self.dialect == Dialect::Mysql {
            format!("'{}'", escaped.replace('\\', "\\\\"))
        } else {
            format!("'{escaped}'")
        }
    }
}

impl Bench {
    /// Whether each task row, in id order, expired before 2026 (every test seeds its expired
    /// rows before 2021 or in generated years up to 2025, and the others from 2030 on or never).
    pub fn expired_in_id_order(&self) -> Vec<bool> {
        self.rows(
            "SELECT CASE WHEN expires_at < '2026-01-01' THEN 1 ELSE 0 END FROM task_state_store ORDER BY id",
        )
        .iter()
        .map(|flag| flag == "1")
        .collect()
    }
}

/// What a clean with batch size `size` and an optional `--max-rows` does to task rows whose
/// expiry, in id order, is `expired` (see [`Bench::expired_in_id_order`]): the running total
/// of deleted rows after each batch that deleted at least one. This is the contract of
/// docs/commands/clean.md written out: a batch is the next `size` expired rows in id order, except
/// on PostgreSQL, where it is the expired rows among the next `size` rows; a batch shortened to
/// what `--max-rows` still allows is the next expired rows on every dialect; batch size 0 is
/// one batch of everything (or of `--max-rows` rows).
pub fn clean_batches(d: Dialect, expired: &[bool], size: usize, max_rows: Option<usize>) -> Vec<usize> {
    let expired_at: Vec<usize> = (0..expired.len()).filter(|&i| expired[i]).collect();
    let (mut totals, mut total, mut pos) = (Vec::new(), 0, 0);
    loop {
        let remaining = max_rows.map(|max| max - total);
        let n = match (size, remaining) {
            (0, None) => expired.len().max(1),
            (0, Some(r)) => r,
            (s, r) => r.map_or(s, |r| s.min(r)),
        };
        let capped = size != 0 && n != size;
        let (deleted, next) = if d == Dialect::Postgres && size != 0 && !capped {
            let end = (pos + n).min(expired.len());
            (expired[pos..end].iter().filter(|e| **e).count(), (pos + n < expired.len()).then_some(pos + n))
        } else {
            let after: Vec<usize> = expired_at.iter().copied().filter(|&i| i >= pos).collect();
            match after.get(n - 1) {
                Some(&last) if size != 0 || max_rows.is_some() => (n, Some(last + 1)),
                _ => (after.len().min(n), None),
            }
        };
        if deleted > 0 {
            total += deleted;
            totals.push(total);
        }
        match next {
            Some(at) if max_rows.is_none_or(|max| total < max) => pos = at,
            _ => return totals,
        }
    }
}

/// A session of another client holding locks, until it is dropped.
pub enum Holder {
    Sqlite(rusqlite::Connection),
    Client(std::process::Child),
}

impl Bench {
    /// Opens a session outside the tool, runs `sql` in an open transaction and keeps it (and
    /// its locks) until the returned holder is dropped.
    pub fn hold(&self, sql: &str) -> Holder {
        if self.dialect == Dialect::Sqlite {
            let conn = self.sqlite();
            conn.execute_batch(&format!("BEGIN IMMEDIATE; {sql}")).expect("hold");
            return Holder::Sqlite(conn);
        }
        let srv = server(self.dialect);
        let db = self.database.clone().expect("database");
        let (child, _) = keep_session(self.session_client(&srv.user, Some(&db)), &format!("BEGIN; {sql}"));
        Holder::Client(child)
    }
}

impl Bench {
    /// The name of the bench's own database on a server.
    pub fn database(&self) -> &str {
        self.database.as_deref().expect("server benches have a database")
    }

    /// Opens a session as `user` (no password: the test servers trust local connections on
    /// PostgreSQL, and the test creates its MySQL accounts without one), in `database` when
    /// given, runs `sql` outside any transaction and keeps the session (and the session-level
    /// locks it took) until the returned holder is dropped.
    pub fn hold_as(&self, user: &str, database: Option<&str>, sql: &str) -> Holder {
        let default = if self.dialect == Dialect::Postgres { "postgres" } else { "" };
        let mut cmd = self.session_client(user, Some(database.unwrap_or(default)));
        if self.dialect == Dialect::Postgres {
            cmd.args(["-v", "ON_ERROR_STOP=1"]);
        }
        let (child, line) = keep_session(cmd, sql);
        assert!(line.contains("holding"), "the session as {user} ended early: {line}");
        Holder::Client(child)
    }

    /// The database server's own client (`psql`, `mariadb`) as `user`, in `database` when it
    /// is given (and not empty), reading statements from its stdin.
    fn session_client(&self, user: &str, database: Option<&str>) -> Command {
        let srv = server(self.dialect);
        let database = database.filter(|db| !db.is_empty());
        let (mut c, port) = if self.dialect == Dialect::Postgres {
            let mut c = Command::new("psql");
            c.args(["-X", "-q", "-A", "-t", "-h", &srv.host, "-U", user]);
            if let Some(db) = database {
                c.args(["-d", db]);
            }
            (c, "-p")
        } else {
            let mut c = Command::new("mariadb");
            c.args(["--protocol=tcp", "-N", "-B", "-n", "-h", &srv.host, "-u", user]);
            if let Some(db) = database {
                c.arg(db);
            }
            (c, "-P")
        };
        if !srv.port.is_empty() {
            c.args([port, &srv.port]);
        }
        c
    }
}

/// Runs `sql` in the client `cmd` and keeps its session until the child is dropped; what the
/// client printed up to its `holding` line (empty when it ended before).
fn keep_session(mut cmd: Command, sql: &str) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader, Write};
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("client");
    let stdin = child.stdin.as_mut().expect("stdin");
    writeln!(stdin, "{sql}; SELECT 'holding';").expect("write");
    stdin.flush().expect("flush");
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    while out.read_line(&mut line).expect("read") > 0 && !line.contains("holding") {}
    (child, line)
}

/// Another session writing beside the tool: a statement that changes a row every few
/// milliseconds, committed at once, as an Airflow worker's writes are. Stops when dropped.
pub struct Writer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Bench {
    /// Starts a [`Writer`] that runs `sql` again and again, in its own session.
    pub fn writer(&self, sql: &str) -> Writer {
        use std::io::Write;
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let sql = sql.to_string();
        let thread = match self.dialect {
            Dialect::Sqlite => {
                let conn = self.sqlite();
                // Airflow's connections wait for the lock (Python's sqlite3: 5 s).
                conn.busy_timeout(std::time::Duration::from_secs(5)).expect("busy timeout");
                std::thread::spawn(move || {
                    while !flag.load(Ordering::SeqCst) {
                        let _ = conn.execute_batch(&sql);
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                })
            }
            dialect => {
                let srv = server(dialect);
                let db = self.database.clone().expect("database");
                let mut cmd = if dialect == Dialect::Postgres {
                    let mut c = Command::new("psql");
                    c.args(["-X", "-q", "-h", &srv.host, "-U", &srv.user, "-d", &db]);
                    if !srv.port.is_empty() {
                        c.args(["-p", &srv.port]);
                    }
                    c
                } else {
                    let mut c = Command::new("mariadb");
                    c.args(["--protocol=tcp", "-N", "-B", "-h", &srv.host, "-u", &srv.user, &db]);
                    if !srv.port.is_empty() {
                        c.args(["-P", &srv.port]);
                    }
                    c
                };
                let mut child = cmd
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("client");
                std::thread::spawn(move || {
                    let mut stdin = child.stdin.take().expect("stdin");
                    while !flag.load(Ordering::SeqCst) {
                        if writeln!(stdin, "{sql};").and_then(|()| stdin.flush()).is_err() {
                            break;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    drop(stdin);
                    let _ = child.kill();
                    let _ = child.wait();
                })
            }
        };
        Writer { stop, thread: Some(thread) }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Holder::Client(child) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some(name) = self.database.take() {
            let sql = match self.dialect {
                Dialect::Postgres => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                _ => format!("DROP DATABASE IF EXISTS {name}"),
            };
            self.admin(&sql);
        }
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
    pub fn from(out: Output, args: &[&str]) -> Run {
        Run {
            args: args.iter().map(|s| s.to_string()).collect(),
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    #[track_caller]
    pub fn code(self, expected: i32) -> Run {
        assert_eq!(
            self.code, expected,
            "exit code of {:?}\nstdout: {}\nstderr: {}",
            self.args, self.stdout, self.stderr
        );
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
    pub fn stderr_is(self, expected: &str) -> Run {
        assert_eq!(self.stderr, expected, "stderr of {:?}; stdout: {}", self.args, self.stdout);
        self
    }

    #[track_caller]
    pub fn stderr_has(self, needle: &str) -> Run {
        assert!(self.stderr.contains(needle), "stderr of {:?} lacks {needle:?}: {}", self.args, self.stderr);
        self
    }

    /// stdout parsed as JSON.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout of {:?} is not JSON ({e}): {}", self.args, self.stdout))
    }
}

/// The members `keys` of a JSON object, as an array: one `assert_eq!` with `json!([…])` checks
/// them all and shows them all when it fails.
pub fn fields(v: &serde_json::Value, keys: &[&str]) -> serde_json::Value {
    keys.iter().map(|key| v[*key].clone()).collect()
}

/// The JSON Lines of an export, one value each.
#[track_caller]
pub fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines().map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))).collect()
}

impl Holder {
    /// Runs `sql` (statements that print nothing, each ending in `;`) in the held
    /// transaction, commits it and ends the session, which releases its locks.
    pub fn commit_with(mut self, sql: &str) {
        match &mut self {
            Holder::Sqlite(conn) => conn.execute_batch(&format!("{sql} COMMIT")).expect("commit"),
            Holder::Client(child) => {
                use std::io::Write;
                let mut stdin = child.stdin.take().expect("stdin");
                writeln!(stdin, "{sql} COMMIT;").expect("write");
                drop(stdin);
                assert!(child.wait().expect("wait").success(), "the holding session failed");
            }
        }
    }
}
