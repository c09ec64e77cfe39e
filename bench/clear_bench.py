#!/usr/bin/env python3
"""The `clear --archive` benchmark: one task instance holding --rows keys (default 300,000),
and on a fresh copy of it each time: `export` of its rows to a file, a plain `clear --yes`, and
`clear --yes --archive FILE`. `clear --archive` reads the rows once (as `export` does), appends
them to the file, then deletes exactly the rows archived, by id, a page at a time: its goal is
at most 3 times `export` + `clear` of the same rows. With --baseline-bin, another binary's
`clear --archive` is measured too, at --baseline-rows keys (default 20,000: before the delete by
id, each key's DELETE visited every row of the task instance, so 300,000 keys took over an hour
on SQLite). Prints a markdown table; exits non-zero when a run fails, leaves keys behind, or
misses the goal.

    python3 bench/clear_bench.py [--rows N] [--dialects sqlite,postgres,mysql] [--repeat N]
        [--bin PATH] [--baseline-bin PATH --baseline-label TEXT] [--baseline-rows N]
"""
import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

from bench import REPO, ServerDb, SqliteDb, clean_env, log, timed

GOAL = 3.0  # clear --archive over export + clear, at most
DAG, RUN, TASK = "bench_clear", "manual__2026-12-01T00:00:00+00:00", "load"


def scope():
    return ["--dag-id", DAG, "--run-id", RUN, "--task-id", TASK]


class ClearBench:
    def __init__(self, args):
        self.args = args
        self.bin = Path(args.bin).resolve()
        self.work = Path(args.work).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        self.home = Path(tempfile.mkdtemp(prefix="clear-home-", dir=self.work))
        self.copies = 0
        self.rows = []  # (dialect, keys, label, [wall seconds], peak RSS KB)
        self.failed = []

    def run(self, argv, label):
        wall, rss, _cpu, code, out, err = timed(argv, clean_env(self.home), label)
        if code != 0:
            raise RuntimeError(f"{label}: exit {code}: {(err or out).strip()[-400:]}")
        return wall, rss, out

    def base(self, db, keys):
        target = db.create(f"clear_base_{keys}")
        url = db.url(target)
        self.run([str(self.bin), "sandbox", "create", "--conn", url], "sandbox create")
        self.run([str(self.bin), "sandbox", "add-dag-run", "--conn", url, "--dag-id", DAG, "--run-id", RUN,
                  "--task-id", TASK], "add-dag-run")
        run_id = f"(SELECT id FROM dag_run WHERE dag_id = '{DAG}' AND run_id = '{RUN}')"
        columns = "dag_run_id, task_id, map_index, {k}, dag_id, run_id, value, updated_at, expires_at"
        values = f"{run_id}, '{TASK}', -1, {{key}}, '{DAG}', '{RUN}', '{{{{\"n\": 1}}}}', {{at}}, NULL"
        if db.dialect == "sqlite":
            sql = (f"WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < {keys - 1}) "
                   f"INSERT INTO task_state_store ({columns.format(k='key')}) SELECT "
                   + values.format(key="'k' || (100000000 + i)", at="'2026-12-01 00:00:00.000000'")
                   + " FROM s")
            conn = sqlite3.connect(target)
            conn.execute(sql)
            conn.commit()
            conn.close()
        elif db.dialect == "postgres":
            sql = (f"INSERT INTO task_state_store ({columns.format(k='key')}) SELECT "
                   + values.format(key="'k' || (100000000 + i)", at="'2026-12-01 00:00:00+00'")
                   + f" FROM generate_series(0, {keys - 1}) i")
            db.server.sql(sql, target)
            db.server.sql("VACUUM ANALYZE task_state_store", target)
        else:
            sql = (f"INSERT INTO task_state_store ({columns.format(k='`key`')}) SELECT "
                   + values.format(key="CONCAT('k', 100000000 + seq)", at="'2026-12-01 00:00:00.000000'")
                   + f" FROM seq_0_to_{keys - 1}; ANALYZE TABLE task_state_store")
            db.server.sql(sql, target)
        return target

    def left(self, db, target):
        if db.dialect == "sqlite":
            conn = sqlite3.connect(target)
            n = conn.execute("SELECT count(*) FROM task_state_store").fetchone()[0]
            conn.close()
            return n
        return int(db.server.sql("SELECT count(*) FROM task_state_store", target)[-1][0])

    def measure(self, db, base, keys, label, argv_for, empties):
        self.copies += 1
        target = db.copy(base, f"clear_run_{self.copies}")
        out_file = self.work / f"clear-{self.copies}.jsonl"
        try:
            db.settle(target)
            wall, rss, out = self.run(argv_for(db.url(target), str(out_file)), label)
            left = self.left(db, target)
            if empties and left != 0:
                raise RuntimeError(f"{label}: {left} keys left")
            if "--archive" in argv_for("", ""):
                lines = sum(1 for _ in open(out_file))
                if lines != keys or json.loads(out)["deleted"] != keys:
                    raise RuntimeError(f"{label}: archived {lines} lines, reported {out.strip()}")
            log(f"{db.dialect}: {label}, {keys:,} keys: {wall:.2f}s, {rss / 1024:.0f} MB")
            return wall, rss
        finally:
            db.drop(target)
            out_file.unlink(missing_ok=True)

    def cases(self, binary):
        b = str(binary)
        return [
            ("export", lambda url, f: [b, "export", "--conn", url, *scope(), "--file", f], False),
            ("clear", lambda url, f: [b, "clear", "--conn", url, *scope(), "--yes", "-o", "json"], True),
            ("clear --archive",
             lambda url, f: [b, "clear", "--conn", url, *scope(), "--yes", "--archive", f, "-o", "json"], True),
        ]

    def dialect(self, db):
        keys = self.args.rows
        base = self.base(db, keys)
        try:
            samples = {label: ([], []) for label, *_ in self.cases(self.bin)}
            for _ in range(self.args.repeat):
                for label, argv_for, empties in self.cases(self.bin):
                    wall, rss = self.measure(db, base, keys, label, argv_for, empties)
                    samples[label][0].append(wall)
                    samples[label][1].append(rss)
            for label, (walls, rsss) in samples.items():
                self.rows.append((db.dialect, keys, label, walls, max(rsss)))
            export, clear, archive = (statistics.median(samples[k][0]) for k in ("export", "clear", "clear --archive"))
            ratio = archive / (export + clear)
            self.rows.append((db.dialect, keys, f"ratio: clear --archive / (export + clear), goal ≤ {GOAL:g}",
                              [ratio], None))
            if ratio > GOAL:
                self.failed.append(f"{db.dialect}: ratio {ratio:.2f} over {GOAL:g}")
        finally:
            db.drop(base)
        if self.args.baseline_bin:
            keys = self.args.baseline_rows
            base = self.base(db, keys)
            try:
                for binary, label in ((self.bin, "clear --archive"),
                                      (Path(self.args.baseline_bin), f"{self.args.baseline_label}: clear --archive")):
                    archive = [c for c in self.cases(binary) if c[0] == "clear --archive"][0]
                    wall, rss = self.measure(db, base, keys, label, archive[1], True)
                    self.rows.append((db.dialect, keys, label, [wall], rss))
            finally:
                db.drop(base)

    def report(self):
        print("| database | keys | run | wall s (median) | peak RSS MB |")
        print("|---|---|---|---|---|")
        for dialect, keys, label, walls, rss in self.rows:
            value = statistics.median(walls)
            shown = f"{value:.2f}" if rss is not None else f"{value:.2f}x"
            print(f"| {dialect} | {keys:,} | {label} | {shown} | {'' if rss is None else f'{rss / 1024:.0f}'} |")
        for problem in self.failed:
            print(f"FAILED: {problem}", file=sys.stderr)

    def main(self):
        for name in self.args.dialects:
            db = SqliteDb(self.work) if name == "sqlite" else ServerDb(name, "pymysql")
            try:
                self.dialect(db)
            except Exception as e:  # noqa: BLE001 - one failed dialect must not hide the others
                self.failed.append(f"{name}: {e}")
        self.report()
        return 1 if self.failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    number = lambda t: int(t.replace("_", "").replace(",", ""))  # noqa: E731
    parser.add_argument("--rows", type=number, default=300_000, help="keys in the task instance (default 300,000)")
    parser.add_argument("--dialects", default="sqlite,postgres,mysql", help="comma-separated (default all three)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the table shows the median (default 3)")
    parser.add_argument("--bin", default=str(REPO / "target" / "release" / "state-store"))
    parser.add_argument("--work", default=str(REPO / "target" / "bench"))
    parser.add_argument("--baseline-bin", metavar="PATH", help="another binary's clear --archive, at --baseline-rows")
    parser.add_argument("--baseline-label", metavar="TEXT", default="baseline")
    parser.add_argument("--baseline-rows", type=number, default=20_000)
    args = parser.parse_args()
    args.dialects = [d for d in args.dialects.split(",") if d]
    return ClearBench(args).main()


if __name__ == "__main__":
    sys.exit(main())
