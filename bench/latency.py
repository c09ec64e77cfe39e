#!/usr/bin/env python3
"""The worker write-latency benchmark: how long Airflow workers' writes wait while a clean runs.

It seeds one task table per server database (PostgreSQL, MariaDB) as bench/bench.py does
(`state-store sandbox create`, then bench/seed.py: --rows task rows, half of them expired).
Row i's content is a pure function of i (`seed.row`), so the keys of the live rows (not
expired: in the future or NULL) are known without asking the database. Each measured case runs
on a fresh copy of that base, copied, settled and synced before anything is timed and dropped
after, and goes:

    --workers threads (default 2), each on its own connection, write in a loop from the start
    to the end: a random live key, Airflow 3.3.2's `MetastoreBackend.set` of a task key as one
    transaction, then the next. The transaction is the statements Airflow sends, in its order:
    the dag run's id (`SELECT dag_run.id FROM dag_run WHERE dag_id = … AND run_id = …`), then
    the upsert (PostgreSQL: `INSERT … ON CONFLICT (dag_run_id, task_id, map_index, key) DO
    UPDATE SET value, updated_at, expires_at … RETURNING task_state_store.id`; MySQL: `INSERT …
    ON DUPLICATE KEY UPDATE value, updated_at, expires_at`), then COMMIT; the execution API's
    read of the task instance before them is left out (the seeded tables have none).
    updated_at is the time of the upsert, expires_at the worker's now + default_retention_days
    (30), as the task SDK computes it before sending. MySQL sessions run in UTC at READ
    COMMITTED, as Airflow's engine sets them. A write's latency is the monotonic time from
    before its first statement to after its commit.
    --idle seconds (default 10) of that alone: the idle sample.
    Then the clean, as its own process (Popen, wait4 for its peak RSS and CPU), its start and
    end taken around it. Writes that start between the two are the during sample.
    1 s more of writes, then the workers stop.

The cases, each in every round (--repeat, default 2), their order rotated from round to round:
`state-store clean` at its default settings (no --batch-size, an empty AIRFLOW_HOME: batches
sized by time, `--batch-size auto`); `state-store clean --batch-size 0` (Airflow's default
state_cleanup_batch_size: one transaction); `state-store clean --batch-size 10000`;
every --extra-case 'LABEL=ARGS' (ARGS appended to our clean's command line); and Airflow
3.3.2's `airflow state-store clean` with state_cleanup_batch_size 10000 (as bench.py runs it),
when an Airflow virtualenv is there (AIRFLOW_VENV, default bench/.airflow-venv). Airflow's
during sample includes its start-up (about 5 s of imports, no deletes yet). Each case checks
that the clean exited 0, deleted every expired row and nothing else (the workers write live
keys only, so none is re-set).

Prints a markdown table per database and case: idle and during p50, p99 and max (ms), the writes
during the clean and how many of them took over 100 ms, p99 during over p99 idle and the clean's
wall time; percentiles are the median over rounds (the upper one of an even count), max is the
worst of all rounds, the ratio is of the two medians; the idle writes over 100 ms and the
machine's I/O pressure after each clean are noted, since other work on the machine stalls writes
too. The goal (issue text): p99 during within 1.5x idle and no write over 100 ms, at the default
settings. --json FILE writes every figure, each round's per-second timeline and every write over
100 ms with its time from the clean's start, to FILE's name with `-latency` added (out.json:
out-latency.json), beside the clean benchmark's file. Exits non-zero when a clean fails, leaves
expired rows or a worker dies (not when a goal is missed: the table says so). Run it with the
Airflow virtualenv's Python (psycopg2 and pymysql come from there), as bench/run.sh does
(`--only latency`, or after the clean benchmark in a full run); it ignores the clean benchmark's
own options.
"""
import argparse
import json
import math
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import seed as seeding
from bench import CLIENTS, DB_PREFIX, REPO, Bench, ServerDb, clean_env, cutoff_now, log, upper_median

EXPIRED_PCT = 50
# [state_store] default_retention_days in an empty AIRFLOW_HOME: a set without a retention
# expires this long after the worker's now.
DEFAULT_RETENTION = timedelta(days=30)
SLOW_MS = 100.0  # the goal: no write during the clean takes longer
GOAL_RATIO = 1.5  # the goal: p99 during at most this times p99 idle
AFTER_S = 1.0  # the workers go on this long after the clean's end
AIRFLOW_BATCH = 10_000
NAMES = {"postgres": "PostgreSQL", "mysql": "MariaDB"}

# The statements of Airflow 3.3.2's MetastoreBackend._store_task_state as SQLAlchemy 2.1 sends
# them through psycopg2 and pymysql (captured from Airflow's own statement objects).
LOOKUP = ("SELECT dag_run.id \nFROM dag_run \nWHERE dag_run.dag_id = %(dag_id_1)s "
          "AND dag_run.run_id = %(run_id_1)s")
UPSERT = {
    "postgres": (
        "INSERT INTO task_state_store (dag_run_id, task_id, map_index, key, dag_id, run_id, value, updated_at, "
        "expires_at) VALUES (%(dag_run_id)s, %(task_id)s, %(map_index)s, %(key)s, %(dag_id)s, %(run_id)s, "
        "%(value)s, %(updated_at)s, %(expires_at)s) ON CONFLICT (dag_run_id, task_id, map_index, key) DO UPDATE "
        "SET value = %(param_1)s, updated_at = %(param_2)s, expires_at = %(param_3)s RETURNING task_state_store.id"
    ),
    "mysql": (
        "INSERT INTO task_state_store (dag_run_id, task_id, map_index, `key`, dag_id, run_id, value, updated_at, "
        "expires_at) VALUES (%(dag_run_id)s, %(task_id)s, %(map_index)s, %(key)s, %(dag_id)s, %(run_id)s, "
        "%(value)s, %(updated_at)s, %(expires_at)s) ON DUPLICATE KEY UPDATE value = %(param_1)s, "
        "updated_at = %(param_2)s, expires_at = %(param_3)s"
    ),
}


def connect(db, target):
    """A worker's connection, set up as Airflow's engine sets up its own."""
    server = db.server
    if db.dialect == "postgres":
        import psycopg2

        # psycopg2 opens a transaction at the first statement; READ COMMITTED is the server's
        # default and Airflow's.
        return psycopg2.connect(host=server.host, port=server.port, user=server.user, password=server.password,
                                dbname=target, connect_timeout=10)
    import pymysql

    conn = pymysql.connect(host=server.host, port=server.port, user=server.user, password=server.password,
                           database=target, autocommit=False, connect_timeout=10)
    with conn.cursor() as cur:
        # Airflow's connect event, and the isolation level of its MySQL engine (settings.py).
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    conn.commit()
    return conn


class Worker(threading.Thread):
    """One worker: its own connection, Airflow's set of a random live task key, again and again.
    Every write is kept: its start (monotonic seconds) and latency; a failed one also its error."""

    def __init__(self, number, db, target, rows, barrier, stop, seed_text):
        super().__init__(name=f"worker-{number}", daemon=True)
        self.number, self.db, self.target, self.rows = number, db, target, rows
        self.barrier, self.stop = barrier, stop
        self.rng = random.Random(seed_text)
        self.base = seeding.now_utc()  # any instant: whether row i is live does not depend on it
        self.starts, self.latencies = [], []
        self.failed = []  # (start, error text) of the writes that failed
        self.error = None  # what ended the loop before the stop

    def live_key(self):
        """A random live row's key: (dag_run id, dag_id, run_id, task_id, key)."""
        while True:
            i = self.rng.randrange(self.rows)
            run, task, key, _, _, expires = seeding.row(i, self.base, EXPIRED_PCT)
            if expires is None or expires > self.base:
                return run + 1, f"dag_{run % seeding.DAGS}", f"scheduled__{run}", task, key

    def write(self, conn, cur, mysql):
        """One `set` of a live key: keeps its start and latency, raises what the database raised."""
        dag_run_id, dag_id, run_id, task, key = self.live_key()
        value = json.dumps({"offset": self.rng.randrange(10**9), "batch": f"w-{self.number}",
                            "ratio": self.rng.randrange(1, 1000) / 1000})
        # The task SDK resolves expires_at on the worker, in UTC, before it sends the write.
        expires = datetime.now(timezone.utc) + DEFAULT_RETENTION
        started = time.monotonic()
        try:
            cur.execute(LOOKUP, {"dag_id_1": dag_id, "run_id_1": run_id})
            found = cur.fetchone()
            if found is None or found[0] != dag_run_id:
                raise AssertionError(f"dag run {dag_id}/{run_id} has id {found}, the seed gave {dag_run_id}")
            now = datetime.now(timezone.utc)
            # Airflow's UtcDateTime binds aware UTC on PostgreSQL, naive UTC on MySQL.
            at, until = (now.replace(tzinfo=None), expires.replace(tzinfo=None)) if mysql else (now, expires)
            cur.execute(UPSERT[self.db.dialect],
                        {"dag_run_id": dag_run_id, "task_id": task, "map_index": -1, "key": key, "dag_id": dag_id,
                         "run_id": run_id, "value": value, "updated_at": at, "expires_at": until,
                         "param_1": value, "param_2": at, "param_3": until})
            if not mysql:
                cur.fetchone()  # RETURNING task_state_store.id
            conn.commit()
        finally:
            self.starts.append(started)
            self.latencies.append(time.monotonic() - started)

    def run(self):
        conn = None
        try:
            conn = connect(self.db, self.target)
            cur = conn.cursor()
            self.barrier.wait(timeout=60)
            mysql = self.db.dialect == "mysql"
            while not self.stop.is_set():
                try:
                    self.write(conn, cur, mysql)
                except AssertionError:
                    raise
                except Exception as e:  # noqa: BLE001 - a failed write (deadlock, lock timeout) is a figure
                    self.failed.append((self.starts[-1], f"{type(e).__name__}: {str(e).strip()[:300]}"))
                    conn.rollback()
        except threading.BrokenBarrierError:
            self.error = self.error or "the workers did not all connect"
        except Exception as e:  # noqa: BLE001 - reported by the case, which then fails
            self.error = f"{type(e).__name__}: {str(e).strip()[:500]}"
            self.barrier.abort()
        finally:
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - the connection is gone either way
                    pass


def nearest_rank(ordered, q):
    """The q-quantile of sorted values, by nearest rank (p99 of 100 writes is the 99th)."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else None


def figures(latencies_ms):
    ordered = sorted(latencies_ms)
    def ms(value):
        return None if value is None else round(value, 3)

    return {"writes": len(ordered), "p50_ms": ms(nearest_rank(ordered, 0.50)),
            "p99_ms": ms(nearest_rank(ordered, 0.99)), "max_ms": ms(ordered[-1] if ordered else None),
            "over_100ms": sum(1 for x in ordered if x > SLOW_MS)}


@dataclass
class Sample:
    """One case in one round: the clean's figures and the writes beside it."""
    dialect: str
    label: str
    kind: str  # ours | airflow
    round: int
    ok: bool = True
    problem: str = ""
    wall_s: float = 0.0
    rss_kb: int = 0
    cpu_s: float = 0.0
    rows_deleted: int = 0
    expired_rows: int = 0
    summary: dict = field(default_factory=dict)  # ours: its JSON summary
    idle_s: float = 0.0
    idle: dict = field(default_factory=dict)
    during: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)
    failed_writes: int = 0
    failures: list = field(default_factory=list)  # the first failed writes: seconds from the clean's start, error
    slow: list = field(default_factory=list)  # writes over 100 ms: seconds from the clean's start, ms, worker
    timeline: list = field(default_factory=list)  # per second from the clean's start: writes, p99, max


class LatencyBench:
    def __init__(self, args):
        self.args = args
        # bench.py's own seeding, Airflow lookup and Airflow command line.
        self.bench = Bench(argparse.Namespace(bin=args.bin, baseline_bin=None, work=args.work,
                                              no_airflow=args.no_airflow, airflow_batch_size=AIRFLOW_BATCH))
        self.samples = []
        self.expired = {}
        self.copies = 0
        self.loads = []
        self.io_pressure = []  # the share of the last 10 s some task waited on I/O, after each clean

    def cases(self, db):
        """(label, kind, argv_for) of every case, in the order of the table."""
        def ours(extra):
            return lambda t: ([str(self.bench.bin), "clean", "--conn", db.url(t), "-o", "json", *extra],
                              clean_env(self.bench.home))

        cases = [("state-store clean, default settings", "ours", ours([])),
                 ("state-store clean, batch 0", "ours", ours(["--batch-size", "0"])),
                 (f"state-store clean, batch {AIRFLOW_BATCH:,}", "ours", ours(["--batch-size", str(AIRFLOW_BATCH)]))]
        for label, extra in self.args.extra_case:
            cases.append((f"state-store clean, {label} (`{shlex.join(extra)}`)", "ours", ours(extra)))
        if self.bench.airflow and db.dialect in self.bench.airflow_dialects:
            cases.append((f"Airflow 3.3.2 clean, batch {AIRFLOW_BATCH:,}", "airflow",
                          lambda t: self.bench.airflow_cmd(db, t)))
        return cases

    def measure(self, db, base, sample, argv_for):
        """One case on a fresh copy of `base`: copy and settle (not timed), workers, idle, clean, 1 s
        more, then the workers stop, the table is checked and the copy dropped."""
        args = self.args
        self.copies += 1
        target = db.copy(base, f"latency_run_{os.getpid()}_{self.copies}")
        stop = threading.Event()
        workers, proc = [], None
        try:
            db.settle(target)
            os.sync()
            argv, env = argv_for(target)
            barrier = threading.Barrier(args.workers + 1)
            workers = [Worker(n + 1, db, target, args.rows, barrier, stop,
                              f"{db.dialect}/{sample.round}/{n}") for n in range(args.workers)]
            for worker in workers:
                worker.start()
            try:
                barrier.wait(timeout=90)
            except threading.BrokenBarrierError:
                errors = [f"{w.name}: {w.error}" for w in workers if w.error]
                raise RuntimeError("the workers did not start: " + ("; ".join(errors) or "timed out")) from None
            idle_start = time.monotonic()
            time.sleep(args.idle)
            dead = [w for w in workers if w.error]
            if dead:
                raise RuntimeError(f"{dead[0].name} stopped before the clean: {dead[0].error}")
            cutoff = cutoff_now()
            with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
                clean_start = time.monotonic()
                proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
                _, status, usage = os.wait4(proc.pid, 0)
                clean_end = time.monotonic()
                proc.returncode = os.waitstatus_to_exitcode(status)
                out.seek(0)
                err.seek(0)
                stdout, stderr = out.read(), err.read()
            time.sleep(AFTER_S)
            stop.set()
            for worker in workers:
                worker.join()
            sample.wall_s = round(clean_end - clean_start, 3)
            sample.rss_kb = usage.ru_maxrss
            sample.cpu_s = round(usage.ru_utime + usage.ru_stime, 2)
            sample.idle_s = round(clean_start - idle_start, 2)
            self.loads.append(os.getloadavg()[0])
            pressure = io_pressure()
            if pressure is not None:
                self.io_pressure.append(pressure)
            self.writes(sample, workers, idle_start, clean_start, clean_end)
            total, left = db.counts(target, cutoff)
            sample.rows_deleted = args.rows - total
            dead = [w for w in workers if w.error]
            if proc.returncode != 0:
                sample.ok, sample.problem = False, f"exit code {proc.returncode}: {(stderr or stdout).strip()[-400:]}"
            elif dead:
                sample.ok, sample.problem = False, f"{dead[0].name} stopped: {dead[0].error}"
            elif left != 0:
                sample.ok, sample.problem = False, f"{left} expired rows left"
            elif sample.rows_deleted != sample.expired_rows:
                sample.ok, sample.problem = False, (f"deleted {sample.rows_deleted} rows, "
                                                    f"{sample.expired_rows} were expired")
            if sample.kind == "ours" and proc.returncode == 0:
                doc = json.loads(stdout)
                sample.summary = {k: doc.get(k) for k in ("task_rows_deleted", "batches", "batch_size", "batch_time_ms",
                                                          "seconds", "task_rows_skipped", "stopped_by")}
                if sample.ok and doc["task_rows_deleted"] != sample.rows_deleted:
                    sample.ok, sample.problem = False, f"reported {doc['task_rows_deleted']} deleted rows"
        except Exception as e:  # noqa: BLE001 - one failed case must not hide the others
            sample.ok, sample.problem = False, f"{type(e).__name__}: {e}"
        finally:
            if proc is not None and proc.returncode is None:
                proc.kill()
                proc.wait()
            stop.set()
            for worker in workers:
                worker.join(timeout=120)
                if worker.is_alive():
                    log(f"{db.dialect}: {worker.name} still waits on its write after 120 s")
            db.drop(target)
        return self.log_sample(sample)

    def writes(self, sample, workers, idle_start, clean_start, clean_end):
        """The writes' figures: idle, during and after the clean, the slow ones, a timeline."""
        rows = [(start - clean_start, latency * 1000, w.number)
                for w in workers for start, latency in zip(w.starts, w.latencies) if start >= idle_start]
        rows.sort()
        during_s = clean_end - clean_start
        sample.idle = figures([ms for t, ms, _ in rows if t < 0])
        sample.during = figures([ms for t, ms, _ in rows if 0 <= t < during_s])
        sample.after = figures([ms for t, ms, _ in rows if t >= during_s])
        sample.slow = [{"at_s": round(t, 3), "ms": round(ms, 1), "worker": n,
                        "phase": "idle" if t < 0 else "during" if t < during_s else "after"}
                       for t, ms, n in rows if ms > SLOW_MS][:2000]
        failed = sorted((start - clean_start, text) for w in workers for start, text in w.failed)
        sample.failed_writes = len(failed)
        sample.failures = [{"at_s": round(t, 3), "error": text} for t, text in failed[:50]]
        bins = {}
        for t, ms, _ in rows:
            bins.setdefault(math.floor(t), []).append(ms)
        sample.timeline = [{"second": s, **figures(ms)} for s, ms in sorted(bins.items())]

    def log_sample(self, s):
        if not s.ok:
            log(f"{s.dialect}: {s.label} (round {s.round}): FAILED: {s.problem}")
            return s
        d, i = s.during, s.idle
        slow = [w for w in s.slow if w["phase"] == "during"]
        worst = max(slow, key=lambda w: w["ms"], default=None)
        where = f" (longest {worst['ms']:.0f} ms, at +{worst['at_s']:.1f} s)" if worst else ""
        log(f"{s.dialect}: {s.label} (round {s.round}): clean {s.wall_s:.2f}s; idle p50/p99/max "
            f"{fmt(i['p50_ms'])}/{fmt(i['p99_ms'])}/{fmt(i['max_ms'])} ms; during {fmt(d['p50_ms'])}/"
            f"{fmt(d['p99_ms'])}/{fmt(d['max_ms'])} ms over {d['writes']:,} writes, {d['over_100ms']} over "
            f"{SLOW_MS:.0f} ms{where}" + (f"; {s.failed_writes} failed writes" if s.failed_writes else ""))
        return s

    def dialect(self, name):
        args = self.args
        db = ServerDb(name, "pymysql")
        base_name = f"latency_base_{os.getpid()}"
        try:
            base, expired = self.bench.base(db, base_name, args.rows, EXPIRED_PCT)
            self.expired[name] = expired
            cases = self.cases(db)
            for round_ in range(1, args.repeat + 1):
                # Rotated, so that no case always runs first (or right after the seeding).
                shift = (round_ - 1) % len(cases)
                for label, kind, argv_for in cases[shift:] + cases[:shift]:
                    sample = Sample(name, label, kind, round_, expired_rows=expired)
                    self.samples.append(self.measure(db, base, sample, argv_for))
            return [label for label, *_ in cases]
        finally:
            db.drop(f"{DB_PREFIX}_{base_name}")

    def main(self):
        started = time.monotonic()
        order = {}
        try:
            for name in self.args.dialects:
                order[name] = self.dialect(name)
        finally:
            shutil.rmtree(self.bench.home, ignore_errors=True)
        elapsed = time.monotonic() - started
        rows = self.aggregate(order)
        print(self.report(rows, elapsed))
        if self.args.json:
            # Beside the clean benchmark's file of the same name, as the import benchmark's.
            path = Path(self.args.json)
            path = path.with_name(f"{path.stem}-latency{path.suffix}")
            path.write_text(json.dumps(self.raw(rows, elapsed), indent=2, default=str) + "\n")
            log(f"latency: every figure in {path}")
        failed = [s for s in self.samples if not s.ok]
        for s in failed:
            log(f"FAILED: {s.dialect}: {s.label} (round {s.round}): {s.problem}")
        return 1 if failed else 0

    def aggregate(self, order):
        """One line per database and case over its rounds: the percentiles' (upper) median, the
        worst max, the goal."""
        lines = []
        for dialect, labels in order.items():
            for label in labels:
                samples = [s for s in self.samples if s.dialect == dialect and s.label == label]
                ok = [s for s in samples if s.ok]
                line = {"dialect": dialect, "label": label, "kind": samples[0].kind, "rounds": len(samples),
                        "ok": len(ok) == len(samples),
                        "problems": [f"round {s.round}: {s.problem}" for s in samples if not s.ok]}
                if ok:
                    def med(phase, key):
                        values = [s.__dict__[phase][key] for s in ok if s.__dict__[phase][key] is not None]
                        return upper_median(values) if values else None

                    ratios = [s.during["p99_ms"] / s.idle["p99_ms"] for s in ok
                              if s.during["p99_ms"] is not None and s.idle["p99_ms"]]
                    line.update(
                        wall_s=upper_median([s.wall_s for s in ok]), wall_range=[min(s.wall_s for s in ok),
                                                                                 max(s.wall_s for s in ok)],
                        idle_p50_ms=med("idle", "p50_ms"), idle_p99_ms=med("idle", "p99_ms"),
                        idle_max_ms=max((s.idle["max_ms"] or 0) for s in ok),
                        during_p50_ms=med("during", "p50_ms"), during_p99_ms=med("during", "p99_ms"),
                        during_max_ms=max((s.during["max_ms"] or 0) for s in ok),
                        writes_during=upper_median([s.during["writes"] for s in ok]),
                        over_100ms=[s.during["over_100ms"] for s in ok],
                        idle_over_100ms=[s.idle["over_100ms"] for s in ok],
                        failed_writes=sum(s.failed_writes for s in ok),
                        p99_ratios=ratios,
                        batch_size=next((s.summary.get("batch_size") for s in ok if s.summary), None),
                        batch_time_ms=next((s.summary.get("batch_time_ms") for s in ok if s.summary), None),
                    )
                    # The table's two medians over each other; each round's own ratio is kept beside.
                    line["p99_ratio"] = (line["during_p99_ms"] / line["idle_p99_ms"]
                                         if line["during_p99_ms"] is not None and line["idle_p99_ms"] else None)
                    line["goal_met"] = (line["p99_ratio"] is not None and line["p99_ratio"] <= GOAL_RATIO
                                        and line["during_max_ms"] <= SLOW_MS and line["failed_writes"] == 0)
                lines.append(line)
        return lines

    def report(self, lines, elapsed):
        args = self.args
        out = [
            f"### Worker writes beside a clean: {args.rows:,} task rows, half of them expired, "
            f"{args.workers} workers",
            "",
            f"Each case on a fresh copy: {args.workers} threads doing Airflow 3.3.2's `set` of a random live task "
            f"key (dag run lookup, upsert, commit) back to back, {args.idle:g} s alone (idle), then beside the clean "
            f"(during: writes that started between its start and its end). ms per write, from the first statement "
            f"to the end of the commit. p50 and p99: median of {args.repeat} rounds; max: the worst of them; "
            f"over {SLOW_MS:.0f} ms: each round's count. Goal: p99 during within {GOAL_RATIO}x idle and no "
            f"write over {SLOW_MS:.0f} ms.",
            "",
            "| database | clean | wall s | idle p50 | idle p99 | idle max | during p50 | during p99 | during max "
            f"| writes during | over {SLOW_MS:.0f} ms | p99 ÷ idle p99 | goal |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        goals = []
        for line in lines:
            name = NAMES[line["dialect"]]
            label = line["label"]
            if line.get("batch_time_ms") is not None and "default" in label:
                label += f" (batch size auto, {line['batch_time_ms']} ms a batch)"
            elif line.get("batch_size") is not None and "default" in label:
                label += f" (batch {line['batch_size']:,})"
            if not line["ok"]:
                out.append(f"| {name} | {label} | failed: {'; '.join(line['problems'])[:300]} "
                           "| | | | | | | | | | |")
                continue
            wall = f"{line['wall_s']:.2f}"
            if line["rounds"] > 1:
                wall += f" ({line['wall_range'][0]:.2f}–{line['wall_range'][1]:.2f})"
            ratio = f"{line['p99_ratio']:.2f}" if line["p99_ratio"] is not None else ""
            verdict = "met" if line["goal_met"] else "NOT met"
            if line["failed_writes"]:
                verdict += f" ({line['failed_writes']} failed writes)"
            out.append(
                f"| {name} | {label} | {wall} | {fmt(line['idle_p50_ms'])} | {fmt(line['idle_p99_ms'])} "
                f"| {fmt(line['idle_max_ms'])} | {fmt(line['during_p50_ms'])} | {fmt(line['during_p99_ms'])} "
                f"| {fmt(line['during_max_ms'])} | {line['writes_during']:,} "
                f"| {', '.join(str(n) for n in line['over_100ms'])} | {ratio} | {verdict} |")
            if line["label"] == "state-store clean, default settings":
                goals.append(f"- {name}: at the default settings, p99 during within {GOAL_RATIO}x idle and no write "
                             f"over {SLOW_MS:.0f} ms: {verdict} (p99 {ratio}x idle, worst "
                             f"{fmt(line['during_max_ms'])} ms)")
        if goals:
            out += ["", "### Goal", "", *goals]
        idle_slow = sum(sum(line.get("idle_over_100ms", [])) for line in lines)
        if idle_slow:
            out += ["", f"The idle samples, with no clean running, had {idle_slow} writes over {SLOW_MS:.0f} ms too "
                        "(`idle max`): waits that long are not the clean's alone on this machine."]
        footer = (f"Whole benchmark: {elapsed / 60:.1f} min on {os.cpu_count()} cores; 1-minute load average "
                  f"after the cleans: {min(self.loads, default=0):.1f} to {max(self.loads, default=0):.1f}")
        if self.io_pressure:
            footer += (f"; I/O pressure (some, last 10 s) after the cleans: {min(self.io_pressure):.0f}% to "
                       f"{max(self.io_pressure):.0f}%")
        out += ["", footer + "."]
        return "\n".join(out)

    def raw(self, lines, elapsed):
        return {
            "rows": self.args.rows,
            "expired_rows": self.expired,
            "workers": self.args.workers,
            "idle_s": self.args.idle,
            "repeat": self.args.repeat,
            "slow_ms": SLOW_MS,
            "goal_ratio": GOAL_RATIO,
            "elapsed_s": round(elapsed, 1),
            "load_1min_after_cleans": self.loads,
            "io_pressure_some_avg10_after_cleans": self.io_pressure,
            "cases": lines,
            "samples": [asdict(s) for s in self.samples],
        }


def io_pressure():
    """The kernel's pressure stall figure for I/O: the share of the last 10 s in which some task
    waited on I/O (None where /proc/pressure is not there). Other work on the machine shows here."""
    try:
        some = Path("/proc/pressure/io").read_text().splitlines()[0].split()
        return float(dict(kv.split("=") for kv in some[1:])["avg10"])
    except (OSError, IndexError, KeyError, ValueError):
        return None


def fmt(ms):
    """Milliseconds as the table shows them."""
    if ms is None:
        return ""
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}" if ms < 100 else f"{ms:,.0f}"


def extra_case(text):
    label, sep, rest = text.partition("=")
    if not sep or not label.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not LABEL=ARGS")
    return label.strip(), shlex.split(rest)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=lambda t: int(t.replace("_", "").replace(",", "")), default=1_000_000,
                        help="task rows to seed, half of them expired (default 1,000,000)")
    parser.add_argument("--dialects", default="postgres,mysql",
                        help="comma-separated: postgres, mysql (default both); sqlite is skipped")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of every case (default 2)")
    parser.add_argument("--workers", type=int, default=2, help="writing threads, one connection each (default 2)")
    parser.add_argument("--idle", type=float, default=10.0,
                        help="seconds of writes before the clean starts: the idle sample (default 10)")
    parser.add_argument("--extra-case", type=extra_case, action="append", default=[], metavar="LABEL=ARGS",
                        help="one more case: our clean with ARGS appended (e.g. 'auto=--batch-size auto'); repeatable")
    parser.add_argument("--no-airflow", action="store_true", help="skip Airflow even when it is installed")
    parser.add_argument("--bin", default=str(REPO / "target" / "release" / "state-store"))
    parser.add_argument("--work", default=str(REPO / "target" / "bench"),
                        help="scratch directory (default target/bench)")
    parser.add_argument("--json", help="also write every figure to NAME-latency.json beside this file")
    # bench/run.sh passes the clean benchmark's options to every benchmark: those are ignored.
    args, ignored = parser.parse_known_args()
    if ignored:
        log(f"latency: ignoring what is not this benchmark's: {' '.join(ignored)}")
    args.dialects = [d for d in args.dialects.split(",") if d]
    for d in args.dialects:
        if d not in NAMES and d != "sqlite":
            parser.error(f"unknown dialect {d!r}: use postgres, mysql")
    if "sqlite" in args.dialects:
        # One writer at a time: there a worker's write waits for each of the clean's transactions.
        log("latency: SQLite skipped: this benchmark measures the server databases (postgres, mysql)")
        args.dialects.remove("sqlite")
        if not args.dialects:
            return 0  # a full bench/run.sh on SQLite alone
    if not args.dialects:
        parser.error("no dialect to measure: use postgres, mysql")
    if args.repeat < 1 or args.workers < 1 or args.idle <= 0:
        parser.error("--repeat and --workers take at least 1, --idle more than 0")
    missing = [CLIENTS[d] for d in args.dialects if shutil.which(CLIENTS[d]) is None]
    for d, module in (("postgres", "psycopg2"), ("mysql", "pymysql")):
        if d in args.dialects:
            try:
                __import__(module)
            except ImportError:
                missing.append(f"{module} (run this with the Airflow virtualenv's Python, as bench/run.sh does)")
    if missing:
        parser.error("missing: " + ", ".join(missing))
    if not Path(args.bin).exists():
        parser.error(f"no state-store binary at {args.bin}: run bench/run.sh, which builds it")
    # SIGTERM as an exception, so that the workers and the clean stop and every database is dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return LatencyBench(args).main()


if __name__ == "__main__":
    sys.exit(main())
