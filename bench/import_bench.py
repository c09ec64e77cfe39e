#!/usr/bin/env python3
"""The state-store import benchmark: seeds one task table per database, exports it with
`state-store export`, then restores the file into an empty copy of the same metastore (its dag
runs kept, its task rows gone) with `state-store import` at its default batch size, beside the
floor: the database client's own bulk insert of the same rows into the same empty table with
Airflow's indexes (SQLite: `INSERT … SELECT` from the seeded file attached; PostgreSQL: psql's
`\\copy … FROM` of the same rows; MariaDB: `INSERT … SELECT` from the seeded database). Each
run gets a fresh copy; rounds rotate the order of the runs. Prints a markdown table of wall
time, rows/s and peak RSS with the ratio to the floor and, with --baseline-bin, to another
state-store binary measured in the same rounds. Exits non-zero when a run fails or leaves the
table without every row. Usually started by bench/run.sh.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from bench import REPO, Run, ServerDb, SqliteDb, clean_env, log, log_run, median_run, timed

GOAL = 2.0  # our wall time over the floor's, at most


class ImportBench:
    def __init__(self, args):
        self.args = args
        self.bin = Path(args.bin).resolve()
        self.baseline = Path(args.baseline_bin).resolve() if args.baseline_bin else None
        self.work = Path(args.work).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        self.home = self.work / "import-airflow-home"
        self.home.mkdir(exist_ok=True)
        self.copies = 0

    def our_argv(self, binary, db, target, rows_file):
        return [str(binary), "import", "--conn", db.url(target), "-o", "json", str(rows_file)]

    def prepare(self, db, rows):
        """The seeded base, the exported file, and the empty copy every run starts from."""
        base = db.create("import_base")
        env = clean_env(self.home)
        subprocess.run([str(self.bin), "sandbox", "create", "--conn", db.url(base)], env=env, check=True,
                       capture_output=True, text=True)
        started = time.monotonic()
        db.seed(base, rows, 50)
        log(f"{db.dialect}: seeded {rows:,} task rows in {time.monotonic() - started:.0f}s")
        rows_file = self.work / f"import-{db.dialect}.jsonl"
        subprocess.run([str(self.bin), "export", "--conn", db.url(base), "--file", str(rows_file)], env=env,
                       check=True, capture_output=True, text=True)
        empty = db.copy(base, "import_empty")
        if db.dialect == "sqlite":
            conn = __import__("sqlite3").connect(empty)
            conn.execute("DELETE FROM task_state_store")
            conn.commit()
            conn.execute("VACUUM")
            conn.close()
        else:
            db.server.sql("DELETE FROM task_state_store", empty)
        copy_file = None
        if db.dialect == "postgres":
            copy_file = self.work / "import-postgres.copy"
            argv, penv = db.server.client_command(f"\\copy task_state_store TO '{copy_file}'", base)
            subprocess.run(argv, env=penv, check=True, capture_output=True, text=True)
        return base, empty, rows_file, copy_file

    def floor_argv(self, db, base, target, copy_file):
        if db.dialect == "sqlite":
            # Airflow (and state-store) turn foreign keys on; so does the floor.
            sql = (f"PRAGMA foreign_keys=ON; ATTACH '{base}' AS s; "
                   "INSERT INTO task_state_store SELECT * FROM s.task_state_store;")
            return "floor: sqlite3, INSERT … SELECT", ["sqlite3", str(target), sql], os.environ.copy()
        if db.dialect == "postgres":
            argv, env = db.server.client_command(f"\\copy task_state_store FROM '{copy_file}'", target)
            return "floor: psql, \\copy … FROM", argv, env
        argv, env = db.server.client_command(
            f"INSERT INTO task_state_store SELECT * FROM `{base}`.task_state_store", target)
        return "floor: mariadb, INSERT … SELECT", argv, env

    def stored(self, db, target):
        if db.dialect == "sqlite":
            conn = __import__("sqlite3").connect(target)
            total = conn.execute("SELECT count(*) FROM task_state_store").fetchone()[0]
            conn.close()
            return total
        return int(db.server.scalar("SELECT count(*) FROM task_state_store", target))

    def measure(self, db, empty, rows, run, argv, env):
        """One run into a fresh copy of the empty metastore: copy (not timed), run (timed), check."""
        self.copies += 1
        target = db.copy(empty, f"import_run_{os.getpid()}_{self.copies}")
        try:
            db.settle(target)
            os.sync()
            wall, rss, cpu, code, out, err = timed(argv(target), env, run.label)
            run.wall_s, run.rss_kb, run.table_rows = wall, rss, rows
            run.extra["cpu_s"] = round(cpu, 2)
            run.rows_deleted = self.stored(db, target)  # here: the rows the table holds after
            if code != 0:
                run.ok, run.problem = False, f"exit code {code}: {(err or out).strip()[-400:]}"
            elif run.rows_deleted != rows:
                run.ok, run.problem = False, f"the table holds {run.rows_deleted:,} rows, not {rows:,}"
            elif run.kind in ("ours", "baseline") and json.loads(out)["inserted"] != rows:
                run.ok, run.problem = False, f"reported {json.loads(out)['inserted']:,} inserted rows"
        except Exception as e:  # noqa: BLE001 - one failed run must not hide the others
            run.ok, run.problem = False, str(e)
        finally:
            db.drop(target)
        return log_run(run)

    def dialect(self, name):
        db = SqliteDb(self.work) if name == "sqlite" else ServerDb(name, "pymysql")
        rows = self.args.rows
        base, empty, rows_file, copy_file = self.prepare(db, rows)
        floor_label, _, floor_env = self.floor_argv(db, base, empty, copy_file)
        runners = [
            ("floor", floor_label, lambda t: self.floor_argv(db, base, t, copy_file)[1], floor_env),
            ("ours", "state-store import", lambda t: self.our_argv(self.bin, db, t, rows_file),
             clean_env(self.home)),
        ]
        if self.baseline:
            runners.append(("baseline", f"state-store import, {self.args.baseline_label}",
                            lambda t: self.our_argv(self.baseline, db, t, rows_file), clean_env(self.home)))
        samples = {kind: [] for kind, *_ in runners}
        try:
            for round_no in range(self.args.repeat):
                shift = round_no % len(runners)
                for kind, label, argv, env in runners[shift:] + runners[:shift]:
                    samples[kind].append(self.measure(db, empty, rows, Run(name, label, kind, None), argv, env))
        finally:
            for target in (base, empty):
                db.drop(target)
            rows_file.unlink(missing_ok=True)
            if copy_file:
                copy_file.unlink(missing_ok=True)
        return [median_run(label, samples[kind]) for kind, label, *_ in runners]

    def main(self):
        results = {}
        for name in self.args.dialects.split(","):
            results[name] = self.dialect(name)
        failed = self.report(results)
        if self.args.json:
            doc = {name: [asdict(r) for r in runs] for name, runs in results.items()}
            # Beside the clean benchmark's file of the same name.
            path = Path(self.args.json)
            path.with_name(f"{path.stem}-import{path.suffix}").write_text(json.dumps(doc, indent=2, default=str))
        return 1 if failed else 0

    def report(self, results):
        print(f"\n### import: {self.args.rows:,} task rows into an empty table, median of {self.args.repeat}\n")
        print("| dialect | run | wall s | rows/s | peak RSS MB | time ÷ floor | time ÷ baseline |")
        print("|---|---|---:|---:|---:|---:|---:|")
        failed = False
        for name, runs in results.items():
            floor = next(r for r in runs if r.kind == "floor")
            baseline = next((r for r in runs if r.kind == "baseline"), None)
            for run in runs:
                failed |= not run.ok
                if not run.ok:
                    print(f"| {name} | {run.label} | FAILED: {run.problem} | | | | |")
                    continue
                per_s = run.table_rows / run.wall_s if run.wall_s else 0
                x_floor = f"{run.wall_s / floor.wall_s:.2f}" if floor.ok and run.kind != "floor" else ""
                x_base = (f"{run.wall_s / baseline.wall_s:.2f}"
                          if baseline and baseline.ok and run.kind == "ours" else "")
                print(f"| {name} | {run.label} | {run.wall_s:.2f} | {per_s:,.0f} | {run.rss_kb / 1024:.1f} "
                      f"| {x_floor} | {x_base} |")
            ours = next(r for r in runs if r.kind == "ours")
            if ours.ok and floor.ok:
                ratio = ours.wall_s / floor.wall_s
                verdict = "meets" if ratio <= GOAL else "MISSES"
                log(f"{name}: import {ratio:.2f}x the floor: {verdict} the goal of {GOAL:.0f}x")
        return failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=lambda t: int(t.replace("_", "").replace(",", "")), default=1_000_000)
    parser.add_argument("--dialects", default="sqlite,postgres,mysql")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--bin", default=str(REPO / "target" / "release" / "state-store"))
    parser.add_argument("--work", default=str(REPO / "target" / "bench"))
    parser.add_argument("--json", help="also write every figure to NAME-import.json beside this file")
    parser.add_argument("--baseline-bin", metavar="PATH")
    parser.add_argument("--baseline-label", metavar="TEXT", default="baseline")
    # The clean benchmark's own options (batch sizes, Airflow) do not apply here.
    args, _ = parser.parse_known_args()
    return ImportBench(args).main()


if __name__ == "__main__":
    sys.exit(main())
