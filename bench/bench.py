#!/usr/bin/env python3
"""The state-store clean benchmark: seeds one task table per database, then deletes its expired
rows with `state-store clean` at several batch sizes, with one plain DELETE through the
database's own client (the floor) and, when an Airflow 3.3.2 virtualenv is there, with
Airflow's own `airflow state-store clean`; each run on a fresh copy of the same data. Prints a
markdown table of wall time, rows/s and peak RSS with ratios to the floor and to Airflow, and
a table of our peak RSS at two table sizes. With --baseline-bin, every round also runs another
state-store binary (an older build) at each batch size, right before or after ours on a fresh
copy of the same data, and a further table gives our wall time over the baseline's. With
--neighbour (PostgreSQL, MySQL), every one of our cleans also runs, in the same round, beside
another tenant of the server: one connection to a database of its own that inserts a row once
a second from before the clean starts to after it ends; a further table gives the time beside
it over the time alone (the clean should slow for writers of its own database only). Exits
non-zero when a run fails or leaves expired rows behind. Usually started by bench/run.sh,
which builds the release binary first (and, with --baseline REV, that revision's).
"""
import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import seed as seeding

REPO = Path(__file__).resolve().parent.parent
DEFAULT_URLS = {
    "postgres": ("STATE_STORE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    "mysql": ("STATE_STORE_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/"),
}
CLIENTS = {"sqlite": "sqlite3", "postgres": "psql", "mysql": "mariadb"}
# What Airflow imports on each server dialect: a sync and an async driver, and on MySQL always
# mysqlclient (MySQLdb), whichever driver the URL names.
AIRFLOW_MODULES = {"postgres": ["psycopg2", "asyncpg"], "mysql": ["MySQLdb", "pymysql", "aiomysql"]}
DB_PREFIX = "state_store_bench"


def log(message):
    print(f"bench: {message}", file=sys.stderr, flush=True)


@dataclass
class Run:
    dialect: str
    label: str
    kind: str  # ours | neighbour (ours beside another database's writer) | baseline | floor | airflow | startup
    batch_size: int | None
    rows_deleted: int = 0
    wall_s: float = 0.0
    rss_kb: int = 0
    ok: bool = True
    problem: str = ""
    table_rows: int = 0
    expired_rows: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def rows_per_s(self):
        return self.rows_deleted / self.wall_s if self.wall_s > 0 else 0.0


def log_run(run):
    """Reports a finished run on stderr; returns it."""
    status = "ok" if run.ok else f"FAILED: {run.problem}"
    log(f"{run.dialect}: {run.label}: {run.rows_deleted:,} rows in {run.wall_s:.2f}s, "
        f"{run.rss_kb / 1024:.1f} MB peak RSS ({status})")
    return run


def median_run(label, samples):
    """One line of the report from repeated runs: the median wall time (the upper one of an
    even count), the highest peak RSS, every sample kept for the JSON file."""
    ok = [r for r in samples if r.ok]
    if len(ok) < len(samples):
        failed = next(r for r in samples if not r.ok)
        return Run(failed.dialect, label, failed.kind, failed.batch_size, failed.rows_deleted, failed.wall_s,
                   failed.rss_kb, False, failed.problem, failed.table_rows, failed.expired_rows)
    walls = sorted(r.wall_s for r in ok)
    middle = next(r for r in ok if r.wall_s == walls[len(walls) // 2])
    run = Run(middle.dialect, label, middle.kind, middle.batch_size, middle.rows_deleted, middle.wall_s,
              max(r.rss_kb for r in ok), True, "", middle.table_rows, middle.expired_rows, dict(middle.extra))
    run.extra["samples_s"] = [r.wall_s for r in ok]
    return run


def upper_median(values):
    """The median as median_run takes it: the upper one of an even count."""
    values = sorted(values)
    return values[len(values) // 2]


def cutoff_now():
    """The instant a run starts; everything with expires_at before it counts as expired."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def timed(argv, env, label):
    """Runs argv under GNU time: (wall seconds, peak RSS in KB, CPU seconds, exit code, stdout,
    stderr). CPU is the process's own user + system time: on PostgreSQL and MySQL most of the
    work is the server's, which no client-side figure shows."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        done = subprocess.run(["/usr/bin/time", "-f", "%e %M %U %S", "-o", tf.name, *argv], env=env,
                              capture_output=True, text=True)
        lines = [line for line in Path(tf.name).read_text().splitlines() if line.strip()]
    try:
        wall, rss, user, system = lines[-1].split()
        return float(wall), int(rss), float(user) + float(system), done.returncode, done.stdout, done.stderr
    except (IndexError, ValueError):
        raise RuntimeError(f"{label}: /usr/bin/time gave no figures; stderr: {done.stderr.strip()[-500:]}")


def clean_env(airflow_home):
    """The environment of a measured run: no AIRFLOW_* from outside, an empty AIRFLOW_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["AIRFLOW_HOME"] = str(airflow_home)
    return env


class SqliteDb:
    dialect = "sqlite"

    def __init__(self, work):
        self.dir = work / "sqlite"
        self.dir.mkdir(parents=True, exist_ok=True)

    def create(self, name):
        path = self.dir / f"{name}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return path

    def url(self, target, airflow=False):
        return f"sqlite:///{target}"

    def seed(self, target, rows, pct, layout="hashed", order="run"):
        return seeding.seed("sqlite", str(target), rows, pct, layout=layout, order=order)

    def copy(self, base, name):
        target = self.create(name)
        shutil.copyfile(base, target)
        return target

    def settle(self, target):
        pass

    def drop(self, target):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)

    def counts(self, target, cutoff):
        conn = sqlite3.connect(target)
        total, expired = conn.execute(
            "SELECT count(*), count(CASE WHEN expires_at < ? THEN 1 END) FROM task_state_store",
            (seeding.sqlite_text(cutoff),),
        ).fetchone()
        conn.close()
        return total, expired

    def innodb(self):
        """No InnoDB here (see `ServerDb.innodb`)."""
        return None

    def floors(self, target, cutoff):
        delete = f"DELETE FROM task_state_store WHERE expires_at < '{seeding.sqlite_text(cutoff)}';"
        # Airflow (and state-store) turn foreign keys on for every SQLite connection; the sqlite3
        # client leaves them off. SQLite deletes differently in the two cases, so both are shown.
        return [
            ("floor: sqlite3, foreign_keys=ON (as Airflow connects)",
             ["sqlite3", str(target), f"PRAGMA foreign_keys=ON; {delete}"]),
            ("floor: sqlite3, foreign_keys off (the client's default)", ["sqlite3", str(target), delete]),
        ], os.environ.copy()


class ServerDb:
    """A PostgreSQL or MySQL server; each base and each run is a database of its own."""

    def __init__(self, dialect, airflow_mysql_driver):
        self.airflow_mysql_driver = airflow_mysql_driver
        var, default = DEFAULT_URLS[dialect]
        self.dialect = dialect
        self.server = seeding.Server(os.environ.get(var) or default)
        self.admin_db = self.server.database if dialect == "postgres" else None

    def admin(self, sql):
        return self.server.sql(sql, self.admin_db)

    def create(self, name):
        db = f"{DB_PREFIX}_{name}"
        self.admin(f"DROP DATABASE IF EXISTS {db}")
        self.admin(f"CREATE DATABASE {db}")
        return db

    def url(self, target, airflow=False):
        driver = None
        if airflow:
            driver = "psycopg2" if self.dialect == "postgres" else self.airflow_mysql_driver
        return self.server.with_database(target).url(driver)

    def seed(self, target, rows, pct, layout="hashed", order="run"):
        return seeding.seed(self.dialect, self.server.with_database(target), rows, pct, layout=layout, order=order)

    def copy(self, base, name):
        db = f"{DB_PREFIX}_{name}"
        self.admin(f"DROP DATABASE IF EXISTS {db}")
        if self.dialect == "postgres":
            self.admin(f"CREATE DATABASE {db} TEMPLATE {base}")
            # The copy's pages reach disk now rather than during the measured run.
            self.admin("CHECKPOINT")
            return db
        self.admin(f"CREATE DATABASE {db}")
        tables = [r[0] for r in self.server.sql(
            f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{base}' "
            "AND table_type = 'BASE TABLE'")]
        # SHOW CREATE TABLE keeps the foreign keys that CREATE TABLE … LIKE would drop.
        statements = ["SET foreign_key_checks = 0, unique_checks = 0, time_zone = '+00:00'"]
        for table in tables:
            ddl = self.server.sql(f"SHOW CREATE TABLE `{base}`.`{table}`")[0][1].replace("\\n", "\n")
            statements.append(ddl)
            statements.append(f"INSERT INTO `{db}`.`{table}` SELECT * FROM `{base}`.`{table}`")
        statements.append("ANALYZE TABLE " + ", ".join(f"`{t}`" for t in tables))
        self.server.sql(";\n".join(statements), db)
        return db

    def settle(self, target):
        """Writes the copy's dirty InnoDB pages to disk (FLUSH TABLES … FOR EXPORT does so for
        the named tables), so the measured run does not pay for them."""
        if self.dialect != "mysql":
            return
        tables = ", ".join(f"`{r[0]}`" for r in self.server.sql(
            f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{target}' "
            "AND table_type = 'BASE TABLE'"))
        self.server.sql(f"FLUSH TABLES {tables} FOR EXPORT; UNLOCK TABLES", target)

    def drop(self, target):
        self.admin(f"DROP DATABASE IF EXISTS {target}")

    def innodb(self):
        """MySQL: the purge's backlog (undo log records of committed deletes and updates not purged
        yet) and the counters of work done: pages read from disk, bytes written to the redo log."""
        if self.dialect != "mysql":
            return None
        history = int(self.server.scalar(
            "SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'"))
        status = dict(self.server.sql(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_buffer_pool_reads', "
            "'Innodb_buffer_pool_read_requests', 'Innodb_os_log_written', 'Innodb_data_fsyncs')"))
        return history, {k: int(v) for k, v in status.items()}

    def until_purged(self, before, started, limit=1800):
        """MySQL: waits until the purge has caught up with the run (its backlog back to where it
        was before), and returns the seconds from `started`: the run's work in full, since InnoDB
        removes deleted rows from the indexes in the purge, after a statement returns. The
        backlog counts transactions, not rows: one DELETE of every expired row is one entry
        until all of it is purged, so nothing short of the count before will do."""
        while True:
            history, _ = self.innodb()
            elapsed = time.monotonic() - started
            if history <= before or elapsed > limit:
                return elapsed
            time.sleep(0.05)

    def counts(self, target, cutoff):
        if self.dialect == "postgres":
            sql = (f"SELECT count(*), count(CASE WHEN expires_at < '{seeding.sqlite_text(cutoff)}+00' THEN 1 END) "
                   "FROM task_state_store")
        else:
            sql = (f"SET time_zone = '+00:00'; SELECT count(*), count(CASE WHEN expires_at < "
                   f"'{seeding.sqlite_text(cutoff)}' THEN 1 END) FROM task_state_store")
        total, expired = self.server.sql(sql, target)[-1]
        return int(total), int(expired)

    def floors(self, target, cutoff):
        if self.dialect == "postgres":
            sql = f"DELETE FROM task_state_store WHERE expires_at < '{seeding.sqlite_text(cutoff)}+00'"
            label = "floor: psql, one DELETE"
        else:
            # Airflow sets the session time zone to UTC on every MySQL connection.
            sql = (f"SET time_zone = '+00:00'; "
                   f"DELETE FROM task_state_store WHERE expires_at < '{seeding.sqlite_text(cutoff)}'")
            label = "floor: mariadb, one DELETE"
        argv, env = self.server.client_command(sql, target)
        return [(label, argv)], env


class Neighbour:
    """Another tenant of the same server: one connection, kept open as an application's pool
    keeps it, to a database of its own, inserting one row a second from `start` to `stop`."""

    def __init__(self, db):
        self.db = db
        self.name = db.create(f"neighbour_{os.getpid()}")
        key = "serial" if db.dialect == "postgres" else "int AUTO_INCREMENT"
        db.server.sql(f"CREATE TABLE neighbour_writes (id {key} PRIMARY KEY, at timestamp)", self.name)
        self.child = self.thread = None
        self.stopping = threading.Event()
        self.writes = 0

    def start(self):
        argv, env = self.db.server.client_command("SELECT 1", self.name)
        argv = argv[:-2]  # without `-c SQL` / `-e SQL`: the client reads its statements from stdin
        self.child = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, text=True)
        self.stopping.clear()
        self.writes = 0

        def write():
            while True:
                self.child.stdin.write("INSERT INTO neighbour_writes (at) VALUES (CURRENT_TIMESTAMP);\n")
                self.child.stdin.flush()
                self.writes += 1
                if self.stopping.wait(1.0):
                    return

        self.thread = threading.Thread(target=write, daemon=True)
        self.thread.start()
        time.sleep(0.5)  # the clean starts half-way between two writes

    def stop(self):
        self.stopping.set()
        self.thread.join()
        self.child.stdin.close()
        self.child.wait(timeout=30)
        return self.writes

    def drop(self):
        self.db.drop(self.name)


class Bench:
    def __init__(self, args):
        self.args = args
        self.bin = Path(args.bin).resolve()
        # Another state-store binary, measured interleaved with ours (None: no baseline runs).
        self.baseline = Path(args.baseline_bin).resolve() if args.baseline_bin else None
        self.pairs = []  # (dialect, batch, round, which ran first, our run, the baseline's run)
        self.neighbour = None  # the server's other tenant, with --neighbour (see Neighbour)
        self.work = Path(args.work).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        self.home = Path(tempfile.mkdtemp(prefix="airflow-home-", dir=self.work))
        self.runs = []
        self.memory = []
        self.copies = 0
        self.loads = []  # the 1-minute load average after each measured run
        self.airflow_dialects = set()
        self.airflow = self.find_airflow()

    def find_airflow(self):
        venv = Path(os.environ.get("AIRFLOW_VENV") or REPO / "bench" / ".airflow-venv")
        exe = venv / "bin" / "airflow"
        if self.args.no_airflow:
            return None
        if not exe.exists():
            log(f"no Airflow at {venv} (set AIRFLOW_VENV, or run bench/run.sh --install-airflow): Airflow runs skipped")
            return None
        done = subprocess.run([str(exe), "version"], env=clean_env(self.home), capture_output=True, text=True)
        version = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        if done.returncode != 0 or version != "3.3.2":
            log(f"{exe} is not Airflow 3.3.2 ({version or done.stderr.strip()[-300:]}): Airflow runs skipped")
            return None
        self.airflow_dialects = {"sqlite"}
        for dialect, modules in AIRFLOW_MODULES.items():
            check = subprocess.run([str(venv / "bin" / "python"), "-c", f"import {', '.join(modules)}"],
                                   capture_output=True, text=True)
            if check.returncode == 0:
                self.airflow_dialects.add(dialect)
            else:
                log(f"Airflow in {venv} lacks {' or '.join(modules)} (bench/run.sh --install-airflow installs "
                    f"them): its {dialect} run is skipped")
        log(f"Airflow {version} from {venv}")
        return exe

    def ours(self, db, target, batch, binary=None):
        env = clean_env(self.home)
        size = [] if batch == AUTO else ["--batch-size", str(batch)]
        # --archive: a fresh file per run, beside the SQLite copies, removed with the copy.
        archive = ["--archive", str(self.archive_path(target))] if self.args.archive else []
        return ([str(binary or self.bin), "clean", "--conn", db.url(target), *size, *archive, "-o", "json"], env)

    def archive_path(self, target):
        return self.work / f"archive-{Path(str(target)).name}.jsonl"

    def airflow_cmd(self, db, target):
        env = clean_env(self.home)
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = db.url(target, airflow=True)
        env["AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE"] = str(self.args.airflow_batch_size)
        env["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
        return [str(self.airflow), "state-store", "clean"], env

    def migrate_exe(self):
        """Airflow 3.3.2's `airflow`, for `db migrate`, even with --no-airflow; None without it."""
        exe = Path(os.environ.get("AIRFLOW_VENV") or REPO / "bench" / ".airflow-venv") / "bin" / "airflow"
        return exe if exe.exists() else None

    def base(self, db, name, rows, pct):
        target = db.create(name)
        migrate = self.migrate_exe() if db.dialect == "sqlite" else None
        if migrate:
            # The file users have: Airflow's own schema and settings (bench/seed.py).
            env = clean_env(self.home)
            env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = db.url(target, airflow=True)
            env["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
            subprocess.run([str(migrate), "db", "migrate"], env=env, check=True, capture_output=True, text=True)
            log(f"sqlite: {target} made by {migrate} db migrate")
        else:
            subprocess.run([str(self.bin), "sandbox", "create", "--conn", db.url(target)], env=clean_env(self.home),
                           check=True, capture_output=True, text=True)
        started = time.monotonic()
        expired = db.seed(target, rows, pct, getattr(self.args, "layout", "hashed"), getattr(self.args, "order", "run"))
        log(f"{db.dialect}: seeded {rows:,} task rows ({expired:,} expired) in {time.monotonic() - started:.0f}s")
        return target, expired

    def measure(self, db, base, rows, expired, run, argv_for, neighbour=None):
        """One run on a fresh copy of `base`: copy (not timed), run (timed, beside `neighbour`'s
        writes when given), check, drop."""
        self.copies += 1
        target = db.copy(base, f"run_{os.getpid()}_{self.copies}")
        try:
            # Every run starts with the copy on disk: writing it back is not part of any run.
            db.settle(target)
            os.sync()
            argv, env = argv_for(target)
            if getattr(self.args, "until_purged", False):
                # The copy's own purge backlog, if any, gone before the run starts.
                db.until_purged(0, time.monotonic(), limit=60)
            innodb_before = db.innodb()
            cutoff = cutoff_now()
            started = time.monotonic()
            if neighbour:
                neighbour.start()
            try:
                wall, rss, cpu, code, out, err = timed(argv, env, run.label)
            finally:
                if neighbour:
                    run.extra["neighbour_writes"] = neighbour.stop()
            if innodb_before is not None and self.args.until_purged:
                run.extra["purged_s"] = round(db.until_purged(innodb_before[0], started), 2)
                _, after = db.innodb()
                run.extra.update({k: after[k] - innodb_before[1].get(k, 0) for k in after})
            run.wall_s, run.rss_kb, run.table_rows, run.expired_rows = wall, rss, rows, expired
            run.extra["cpu_s"] = round(cpu, 2)
            self.loads.append(os.getloadavg()[0])
            total, left = db.counts(target, cutoff)
            run.rows_deleted = rows - total
            if code != 0:
                run.ok, run.problem = False, f"exit code {code}: {(err or out).strip()[-400:]}"
            elif left != 0:
                run.ok, run.problem = False, f"{left} expired rows left"
            elif run.kind != "startup" and run.rows_deleted != expired:
                run.ok, run.problem = False, f"deleted {run.rows_deleted} rows, {expired} were expired"
            if run.kind in ("ours", "neighbour", "baseline") and code == 0:
                summary = json.loads(out)
                run.extra.update(batches=summary["batches"], reported_rows=summary["task_rows_deleted"],
                                 inner_seconds=summary["seconds"])
                if summary["task_rows_deleted"] != run.rows_deleted:
                    run.ok, run.problem = False, f"reported {summary['task_rows_deleted']} deleted rows"
                if self.args.archive and summary.get("archived_rows") != summary["task_rows_deleted"]:
                    run.ok, run.problem = False, f"archived {summary.get('archived_rows')} rows"
            if run.kind == "airflow" and run.ok:
                # Airflow again on the same copy, with nothing left to delete: its fixed cost.
                startup = Run(db.dialect, "Airflow clean, nothing to delete (start-up cost)", "startup",
                              run.batch_size)
                wall, rss, cpu, code, out, err = timed(argv, env, startup.label)
                startup.wall_s, startup.rss_kb, startup.table_rows = wall, rss, rows
                startup.extra["cpu_s"] = round(cpu, 2)
                startup.ok = code == 0
                startup.problem = "" if startup.ok else f"exit code {code}: {err.strip()[-400:]}"
                run.extra["startup"] = startup
        except Exception as e:  # noqa: BLE001 - one failed run must not hide the others
            run.ok, run.problem = False, str(e)
        finally:
            db.drop(target)
            self.archive_path(target).unlink(missing_ok=True)
        return log_run(run)

    def dialect(self, db):
        args = self.args
        base, expired = self.base(db, f"base_{os.getpid()}", args.rows, 50)
        try:
            ours = [(f"state-store clean, batch {batch_label(batch)}", "ours", batch, lambda t, b=batch: self.ours(db, t, b))
                    for batch in args.batch_sizes]
            baseline = [(f"baseline ({args.baseline_label}) clean, batch {batch_label(batch)}", "baseline", batch,
                         lambda t, b=batch: self.ours(db, t, b, self.baseline))
                        for batch in (args.batch_sizes if self.baseline else [])]
            beside = [(f"state-store clean, batch {batch_label(batch)}, beside a neighbour", "neighbour", batch,
                       lambda t, b=batch: self.ours(db, t, b)) for batch in (args.batch_sizes if self.neighbour else [])]
            floors = []
            for index, (label, _) in enumerate(db.floors(base, cutoff_now())[0]):
                def floor_cmd(target, index=index):
                    commands, env = db.floors(target, cutoff_now())
                    return commands[index][1], env

                floors.append((label, "floor", None, floor_cmd))
            specs = ours + beside + baseline + floors  # the order of the table
            # Rounds rather than back-to-back repeats, so that a slow spell of the machine is
            # spread over every kind of run instead of falling on one.
            samples = {label: [] for label, *_ in specs}
            for round_ in range(args.repeat):
                order = specs
                if baseline:
                    # Each batch size's two binaries one right after the other, the baseline first
                    # in every other round, so that neither always runs first.
                    order = [spec for pair in zip(ours, baseline) for spec in (pair if round_ % 2 == 0 else pair[::-1])]
                    order += floors
                for label, kind, batch, argv_for in order:
                    run = Run(db.dialect, label + (f" (round {round_ + 1})" if args.repeat > 1 else ""), kind,
                              batch)
                    neighbour = self.neighbour if kind == "neighbour" else None
                    samples[label].append(self.measure(db, base, args.rows, expired, run, argv_for, neighbour))
                for (new_label, _, batch, _), (old_label, *_) in zip(ours, baseline):
                    self.pairs.append((db.dialect, batch, round_ + 1, "new" if round_ % 2 == 0 else "baseline",
                                       samples[new_label][-1], samples[old_label][-1]))
            for label, kind, batch, _ in specs:
                self.runs.append(median_run(label, samples[label]))
            if self.airflow and db.dialect in self.airflow_dialects:
                run = Run(db.dialect, f"Airflow 3.3.2 clean, batch {args.airflow_batch_size:,}", "airflow",
                          args.airflow_batch_size)
                self.runs.append(self.measure(db, base, args.rows, expired, run,
                                              lambda t: self.airflow_cmd(db, t)))
                startup = run.extra.pop("startup", None)
                if startup:
                    self.runs.append(startup)
            if db.dialect in args.memory_dialects:
                self.memory.append(("main", db.dialect, args.rows, expired,
                                    {r.batch_size: r for r in self.runs
                                     if r.dialect == db.dialect and r.kind == "ours"}))
        finally:
            db.drop(base)
        if db.dialect in args.memory_dialects:
            for n_expired in args.memory_expired:
                rows = n_expired * 2
                mbase, mexpired = self.base(db, f"mem_{os.getpid()}", rows, 50)
                try:
                    found = {}
                    for batch in args.memory_batch_sizes:
                        run = Run(db.dialect, f"state-store clean, batch {batch_label(batch)} ({rows:,} rows)", "ours", batch)
                        found[batch] = self.measure(db, mbase, rows, mexpired, run,
                                                    lambda t, b=batch: self.ours(db, t, b))
                    self.memory.append(("memory", db.dialect, rows, mexpired, found))
                finally:
                    db.drop(mbase)

    def main(self):
        started = time.monotonic()
        for name in self.args.dialects:
            db = SqliteDb(self.work) if name == "sqlite" else ServerDb(name, self.args.airflow_mysql_driver)
            self.neighbour = Neighbour(db) if self.args.neighbour and name != "sqlite" else None
            try:
                self.dialect(db)
            finally:
                if self.neighbour:
                    self.neighbour.drop()
        shutil.rmtree(self.home, ignore_errors=True)
        elapsed = time.monotonic() - started
        report = self.report(elapsed)
        print(report)
        if self.args.json:
            Path(self.args.json).write_text(json.dumps(self.raw(elapsed), indent=2, default=str) + "\n")
        failed = [r for r in self.runs if not r.ok]
        failed += [r for _, _, _, _, found in self.memory for r in found.values() if not r.ok]
        for run in failed:
            log(f"FAILED: {run.dialect}: {run.label}: {run.problem}")
        return 1 if failed else 0

    def raw(self, elapsed):
        raw = {
            "rows": self.args.rows,
            "elapsed_s": round(elapsed, 1),
            "load_1min_after_runs": self.loads,
            "runs": [asdict(r) | {"rows_per_s": r.rows_per_s} for r in self.runs],
            "memory": [
                {"source": source, "dialect": dialect, "table_rows": rows, "expired_rows": expired,
                 "runs": {str(b): asdict(r) for b, r in found.items()}}
                for source, dialect, rows, expired, found in self.memory
            ],
        }
        if self.baseline:
            # Every sample of both binaries, paired by round; "runs" has the baseline's medians.
            raw["baseline"] = {
                "bin": str(self.baseline),
                "label": self.args.baseline_label,
                "pairs": [
                    {"dialect": dialect, "batch_size": batch, "round": round_, "first": first,
                     "ratio": self.pair_ratio(new, old),
                     "new": asdict(new) | {"rows_per_s": new.rows_per_s},
                     "baseline": asdict(old) | {"rows_per_s": old.rows_per_s}}
                    for dialect, batch, round_, first, new, old in self.pairs
                ],
            }
        return raw

    @staticmethod
    def pair_ratio(new, old):
        """Our wall time over the baseline's in one round; None when either failed."""
        return new.wall_s / old.wall_s if new.ok and old.ok and old.wall_s > 0 else None

    def baseline_report(self):
        rounds = self.args.repeat
        lines = ["", f"### state-store clean against the baseline ({self.args.baseline_label})", "",
                 f"Baseline binary: `{self.baseline}`. In each round both binaries clean a fresh copy of the "
                 "same data at each batch size, one right after the other, the baseline first in every other "
                 f"round. new ÷ baseline is our wall s over the baseline's in the same round: median of {rounds} "
                 "(range in brackets). Below 1 is faster than the baseline.",
                 "",
                 "| database | batch | wall s | baseline wall s | new ÷ baseline | rounds new slower |",
                 "|---|---:|---:|---:|---:|---:|"]
        for dialect in self.args.dialects:
            name = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MariaDB"}[dialect]
            medians = {(r.kind, r.batch_size): r for r in self.runs if r.dialect == dialect}
            for batch in self.args.batch_sizes:
                pairs = [(new, old) for d, b, _, _, new, old in self.pairs if d == dialect and b == batch]
                if not pairs:
                    continue
                walls = [f"{medians[(kind, batch)].wall_s:.2f}" if medians[(kind, batch)].ok else "failed"
                         for kind in ("ours", "baseline")]
                ratios = [self.pair_ratio(new, old) for new, old in pairs]
                if None in ratios:
                    ratio, slower = "failed", ""
                else:
                    ratio = f"{upper_median(ratios):.2f}"
                    if len(ratios) > 1:
                        ratio += f" ({min(ratios):.2f}–{max(ratios):.2f})"
                    slower = f"{sum(new.wall_s > old.wall_s for new, old in pairs)} of {len(pairs)}"
                lines.append(f"| {name} | {batch_label(batch)} | {walls[0]} | {walls[1]} | {ratio} | {slower} |")
        return lines

    def neighbour_report(self):
        lines = ["", "### Beside a neighbour: one write a second into another database on the same server", "",
                 f"Each of our cleans alone and beside the neighbour, in the same rounds: median of "
                 f"{self.args.repeat} (range in brackets). Goal: beside it within 1.2x of alone.", "",
                 "| database | batch | alone s | beside the neighbour s | beside ÷ alone | neighbour's writes |",
                 "|---|---:|---:|---:|---:|---:|"]
        for dialect in self.args.dialects:
            name = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MariaDB"}[dialect]
            medians = {(r.kind, r.batch_size): r for r in self.runs if r.dialect == dialect}
            for batch in self.args.batch_sizes:
                alone, beside = medians.get(("ours", batch)), medians.get(("neighbour", batch))
                if not alone or not beside:
                    continue
                if not (alone.ok and beside.ok):
                    lines.append(f"| {name} | {batch_label(batch)} | failed | failed | | |")
                    continue
                cells = []
                for r in (alone, beside):
                    spread = r.extra.get("samples_s", [])
                    cells.append(f"{r.wall_s:.2f}" + (f" ({min(spread):.2f}–{max(spread):.2f})"
                                                       if len(spread) > 1 else ""))
                ratio = beside.wall_s / alone.wall_s
                lines.append(f"| {name} | {batch_label(batch)} | {cells[0]} | {cells[1]} | {ratio:.2f} "
                             f"| {beside.extra.get('neighbour_writes', '')} |")
        return lines

    def report(self, elapsed):
        lines = [
            f"### state-store clean: {self.args.rows:,} task rows, half of them expired"
            + ("" if self.args.layout == "hashed" else f" ({self.args.layout}: bench/seed.py)")
            + ("" if self.args.order == "run" else f", ids in {self.args.order} order"),
            "",
            (f"Our runs, the baseline's and the floor: median of {self.args.repeat} (range in brackets); "
             "Airflow: one run." if self.baseline else
             f"Our runs and the floor: median of {self.args.repeat} (range in brackets); Airflow: one run."),
            "",
            "| database | run | rows deleted | wall s | rows/s | peak RSS MB | client CPU s | time ÷ floor "
            "| Airflow time ÷ time |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        goals = []
        for dialect in self.args.dialects:
            runs = [r for r in self.runs if r.dialect == dialect]
            floors = [r for r in runs if r.kind == "floor" and r.ok]
            floor = min((r.wall_s for r in floors), default=None)
            airflow = next((r.wall_s for r in runs if r.kind == "airflow" and r.ok), None)
            name = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MariaDB"}[dialect]
            for r in runs:
                vs_floor = f"{r.wall_s / floor:.2f}" if floor and r.ok and r.kind != "startup" else ""
                vs_airflow = (f"{airflow / r.wall_s:.1f}x" if airflow and r.ok and r.wall_s > 0
                              and r.kind in ("ours", "baseline", "floor") else "")
                cpu = f"{r.extra['cpu_s']:.2f}" if "cpu_s" in r.extra else ""
                if not r.ok:
                    wall, rate, rss, cpu = "failed", "", "", ""
                else:
                    wall = f"{r.wall_s:.2f}"
                    spread = r.extra.get("samples_s", [])
                    if len(spread) > 1:
                        wall += f" ({min(spread):.2f}–{max(spread):.2f})"
                    rate = f"{r.rows_per_s:,.0f}" if r.kind != "startup" else ""
                    rss = f"{r.rss_kb / 1024:.1f}"
                lines.append(f"| {name} | {r.label} | {r.rows_deleted:,} | {wall} | {rate} | {rss} | {cpu} "
                             f"| {vs_floor} | {vs_airflow} |")
            ours = {r.batch_size: r for r in runs if r.kind == "ours" and r.ok}
            if floor and 0 in ours:
                ratio = ours[0].wall_s / floor
                goals.append(f"- {name}: batch 0 within 1.1x of the floor: {'met' if ratio <= 1.1 else 'NOT met'} "
                             f"({ratio:.2f}x)")
            if floor and 10000 in ours:
                ratio = ours[10000].wall_s / floor
                goals.append(f"- {name}: batch 10,000 within 1.3x of the floor: "
                             f"{'met' if ratio <= 1.3 else 'NOT met'} ({ratio:.2f}x)")
            if AUTO in ours and 10000 in ours:
                ratio = ours[AUTO].wall_s / ours[10000].wall_s
                goals.append(f"- {name}: the default (auto) within 1.3x of batch 10,000 on an idle database: "
                             f"{'met' if ratio <= 1.3 else 'NOT met'} ({ratio:.2f}x)")
            same = ours.get(self.args.airflow_batch_size)
            if airflow and same:
                speedup = airflow / same.wall_s
                others = ", ".join(f"batch {batch_label(b)}: {airflow / r.wall_s:.1f}x" for b, r in sorted(ours.items())
                                   if b != self.args.airflow_batch_size)
                goals.append(f"- {name}: at least 4x faster than Airflow's clean at the same batch size "
                             f"({self.args.airflow_batch_size:,}): {'met' if speedup >= 4 else 'NOT met'} "
                             f"({speedup:.1f}x" + (f"; {others})" if others else ")"))
        if self.baseline:
            lines += self.baseline_report()
        if any(r.kind == "neighbour" for r in self.runs):
            lines += self.neighbour_report()
        if self.memory:
            lines += ["", "### Peak RSS of state-store clean against table size", "",
                      "| database | table rows | expired rows | " + " | ".join(
                          f"batch {batch_label(b)}: peak RSS MB" for b in self.args.memory_batch_sizes) + " |",
                      "|---|---:|---:|" + "---:|" * len(self.args.memory_batch_sizes)]
            for _, dialect, rows, expired, found in sorted(self.memory, key=lambda m: (m[1], m[2])):
                # The main table's size reuses its runs: a batch size it did not run has none.
                cells = [("failed" if not found[b].ok else f"{found[b].rss_kb / 1024:.1f}") if b in found
                         else "not run" for b in self.args.memory_batch_sizes]
                name = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MariaDB"}[dialect]
                lines.append(f"| {name} | {rows:,} | {expired:,} | " + " | ".join(cells) + " |")
        purged = [r for r in self.runs if r.ok and "purged_s" in r.extra]
        if purged:
            lines += ["", "### MariaDB: each run until InnoDB's purge caught up with it", "",
                      "A DELETE returns before InnoDB has removed the deleted rows from the indexes: its purge "
                      "does that afterwards, in the background. A batched clean's purge runs while its next "
                      "batches delete, and so counts in its wall time. Here each run is timed until the purge's "
                      "backlog (`trx_rseg_history_len`) is back where it was (the median run's figures).", "",
                      "| run | wall s | until purged s | ÷ floor until purged | pages read | redo MB | fsyncs |",
                      "|---|---:|---:|---:|---:|---:|---:|"]
            floor = next((r for r in purged if r.kind == "floor"), None)
            for r in purged:
                ratio = f"{r.extra['purged_s'] / floor.extra['purged_s']:.2f}" if floor else "–"
                lines.append(f"| {r.label} | {r.wall_s:.2f} | {r.extra['purged_s']:.2f} | {ratio} "
                             f"| {r.extra.get('Innodb_buffer_pool_reads', 0):,} "
                             f"| {r.extra.get('Innodb_os_log_written', 0) / 2**20:.0f} "
                             f"| {r.extra.get('Innodb_data_fsyncs', 0):,} |")
        if goals:
            lines += ["", "### Goals", "", *goals]
        lines += ["", f"Whole benchmark: {elapsed / 60:.1f} min on {os.cpu_count()} cores; 1-minute load average "
                      f"after the measured runs: {min(self.loads, default=0):.1f} to {max(self.loads, default=0):.1f}."]
        return "\n".join(lines)


#: The batch "size" of the default clean: no --batch-size, so `auto` (Airflow's 0).
AUTO = -1


def int_list(text):
    """`0,1000,10000` or `0,1_000,10_000`; `auto` is the default clean (no --batch-size)."""
    return [AUTO if x == "auto" else int(x) for x in text.replace("_", "").split(",") if x]


def batch_label(batch):
    """`10,000`, or `auto (default)` for the clean with no --batch-size."""
    return "auto (default)" if batch == AUTO else f"{batch:,}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=lambda t: int(t.replace("_", "").replace(",", "")), default=1_000_000,
                        help="task rows to seed, half of them expired (default 1,000,000)")
    parser.add_argument("--dialects", default="sqlite,postgres,mysql",
                        help="comma-separated: sqlite, postgres, mysql (default all three)")
    parser.add_argument("--until-purged", action="store_true",
                        help="MySQL: also time each run until InnoDB's purge has caught up with it, and count "
                             "the pages it read and the redo it wrote (a table of its own)")
    parser.add_argument("--layout", choices=seeding.LAYOUTS, default="hashed",
                        help="where the expired rows are (bench/seed.py): hashed (default), interleaved, contiguous")
    parser.add_argument("--order", choices=seeding.ORDERS, default="run",
                        help="how the ids follow the rows (bench/seed.py): each dag run's together (run, default) "
                             "or key by key across the dag runs (key; SQLite only)")
    parser.add_argument("--batch-sizes", type=int_list, default=[AUTO, 0, 1000, 10000],
                        help="batch sizes of our clean; auto is the default clean (default auto,0,1000,10000)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each of our cleans and of the floor; the table shows the median (default 3)")
    parser.add_argument("--airflow-batch-size", type=int, default=10000,
                        help="Airflow's [state_store] state_cleanup_batch_size (default 10000)")
    parser.add_argument("--airflow-mysql-driver", choices=["pymysql", "mysqldb"], default="pymysql",
                        help="SQLAlchemy driver of Airflow's MySQL URL (default pymysql)")
    parser.add_argument("--memory-dialects", default="all",
                        help="dialects of the peak-RSS-against-table-size check: a list, 'all' (every dialect "
                             "benchmarked, the default) or 'none'")
    parser.add_argument("--memory-expired", type=int_list, default=[100_000, 1_000_000],
                        help="expired rows of the memory check; tables twice that size (default 100000,1000000)")
    parser.add_argument("--memory-batch-sizes", type=int_list, default=[10000, 0],
                        help="batch sizes of the memory check (default 10000,0)")
    parser.add_argument("--no-airflow", action="store_true", help="skip Airflow even when it is installed")
    parser.add_argument("--bin", default=str(REPO / "target" / "release" / "state-store"))
    parser.add_argument("--work", default=str(REPO / "target" / "bench"),
                        help="scratch directory for SQLite files (default target/bench)")
    parser.add_argument("--neighbour", action="store_true",
                        help="PostgreSQL, MySQL: also run each of our cleans beside another database's writer "
                             "(one INSERT a second on the same server), and compare")
    parser.add_argument("--archive", action="store_true",
                        help="every clean of ours (and the baseline's) with --archive, to a fresh file in --work "
                             "per run; a run whose archived_rows differs from task_rows_deleted fails")
    parser.add_argument("--json", help="also write every figure to this JSON file")
    parser.add_argument("--baseline-bin", metavar="PATH",
                        help="another state-store binary (e.g. an older build) to run interleaved with ours in "
                             "every round of our cleans, at each batch size, on its own fresh copy")
    parser.add_argument("--baseline-label", metavar="TEXT",
                        help="what the table calls the baseline binary (default: its path)")
    args = parser.parse_args()
    args.dialects = [d for d in args.dialects.split(",") if d]
    presets = {"none": [], "all": args.dialects}
    args.memory_dialects = presets.get(args.memory_dialects, [d for d in args.memory_dialects.split(",") if d])
    for d in args.dialects + args.memory_dialects:
        if d not in CLIENTS:
            parser.error(f"unknown dialect {d!r}: use sqlite, postgres, mysql")
    missing = [CLIENTS[d] for d in args.dialects if shutil.which(CLIENTS[d]) is None]
    if not Path("/usr/bin/time").exists():
        missing.append("/usr/bin/time (Debian package `time`)")
    if missing:
        parser.error("missing: " + ", ".join(missing))
    if not Path(args.bin).exists():
        parser.error(f"no state-store binary at {args.bin}: run bench/run.sh, which builds it")
    if args.baseline_bin:
        if not os.access(args.baseline_bin, os.X_OK) or not Path(args.baseline_bin).is_file():
            parser.error(f"no executable baseline binary at {args.baseline_bin} (bench/run.sh --baseline REV "
                         "builds one)")
        args.baseline_label = args.baseline_label or args.baseline_bin
    elif args.baseline_label:
        parser.error("--baseline-label needs --baseline-bin")
    # SIGTERM as an exception, so that every seeded and copied database is still dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return Bench(args).main()


if __name__ == "__main__":
    sys.exit(main())
