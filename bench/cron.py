#!/usr/bin/env python3
"""The nightly cron's fixed cost: `clean -o json --metrics-file …` on a metastore with nothing
to delete, run after run, beside the baseline's binary in the same rounds.

What a night with little to do costs is mostly what every run pays before and after its
batches: reading the configuration, connecting, checking the schema, taking the clean's lock
(and judging who holds it), counting, and replacing the metrics file through a path of several
directories, each opened from its parent. This benchmark measures that and nothing else: the
table holds `--rows` live rows (none expired), so no run changes it and every run sees the same
database. Each round runs ours and the baseline once each, in alternating order; the table
gives the median and the 10th and 90th percentiles of each, and the ratio of the medians.

    ./bench/run.sh --only cron [--baseline REV] [--rows N] [--rounds N] [--dialects …]
"""

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from bench import REPO, ServerDb, SqliteDb, clean_env, log


def percentile(values, share):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class CronBench:
    def __init__(self, args):
        self.args = args
        self.work = Path(args.work).resolve() / "cron"
        self.work.mkdir(parents=True, exist_ok=True)
        self.home = self.work / "airflow-home"
        self.home.mkdir(exist_ok=True)
        # The textfile directory at the end of a path of several directories, as
        # /var/lib/prometheus/node-exporter is.
        self.metrics_dir = self.work.joinpath("var", "lib", "prometheus", "node-exporter")
        self.metrics_dir.mkdir(parents=True, exist_ok=True)
        self.binaries = [("ours", Path(args.bin).resolve())]
        if args.baseline_bin:
            self.binaries.append((args.baseline_label or "baseline", Path(args.baseline_bin).resolve()))

    def argv(self, binary, db, target):
        return [str(binary), "clean", "--conn", db.url(target), "-o", "json",
                "--metrics-file", str(self.metrics_dir / "state_store_clean.prom")]

    def once(self, binary, db, target, env):
        started = time.monotonic()
        done = subprocess.run(self.argv(binary, db, target), env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
        if done.returncode != 0:
            raise RuntimeError(f"{binary}: exit {done.returncode}: {done.stderr.strip()[-400:]}")
        deleted = json.loads(done.stdout)["task_rows_deleted"]
        if deleted != 0:
            raise RuntimeError(f"{binary}: deleted {deleted} rows of a table with none expired")
        return wall

    def dialect(self, name):
        db = SqliteDb(self.work) if name == "sqlite" else ServerDb(name, "pymysql")
        target = db.create("cron")
        env = clean_env(self.home)
        subprocess.run([str(self.binaries[0][1]), "sandbox", "create", "--conn", db.url(target)], env=env,
                       check=True, capture_output=True, text=True)
        db.seed(target, self.args.rows, 0)
        samples = {label: [] for label, _ in self.binaries}
        try:
            for _, binary in self.binaries:  # one unmeasured run each: caches, the lock file
                self.once(binary, db, target, env)
            for round_ in range(self.args.rounds):
                order = self.binaries if round_ % 2 == 0 else list(reversed(self.binaries))
                for label, binary in order:
                    samples[label].append(self.once(binary, db, target, env))
        finally:
            db.drop(target)
        log(f"{name}: {self.args.rounds} rounds done")
        return samples

    def main(self):
        rows = []
        for name in self.args.dialects.split(","):
            samples = self.dialect(name)
            ours = statistics.median(samples["ours"])
            for label, values in samples.items():
                median = statistics.median(values)
                rows.append({
                    "dialect": name, "binary": label, "median_ms": round(median * 1000, 1),
                    "p10_ms": round(percentile(values, 0.1) * 1000, 1),
                    "p90_ms": round(percentile(values, 0.9) * 1000, 1),
                    "ours_over_this": round(ours / median, 3),
                })
        print(f"\n### The cron's fixed cost: clean -o json --metrics-file, {self.args.rows:,} live rows, "
              f"{self.args.rounds} rounds\n")
        print("| database | binary | median ms | p10 ms | p90 ms | ours / this |")
        print("|---|---|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['dialect']} | {r['binary']} | {r['median_ms']} | {r['p10_ms']} | {r['p90_ms']} "
                  f"| {r['ours_over_this']} |")
        if self.args.json:
            Path(self.args.json).write_text(json.dumps(rows, indent=2) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=lambda t: int(t.replace("_", "").replace(",", "")), default=10_000,
                        help="live rows in the table (default 10,000)")
    parser.add_argument("--rounds", type=int, default=30, help="rounds of one run each (default 30)")
    parser.add_argument("--dialects", default="sqlite,postgres,mysql")
    parser.add_argument("--bin", default=str(REPO / "target" / "release" / "state-store"))
    parser.add_argument("--work", default=str(REPO / "target" / "bench"))
    parser.add_argument("--baseline-bin", metavar="PATH")
    parser.add_argument("--baseline-label", metavar="TEXT")
    parser.add_argument("--json", help="also write every figure to this JSON file")
    args, _ = parser.parse_known_args()
    os.environ.pop("STATE_STORE_METRICS_FILE", None)
    CronBench(args).main()


if __name__ == "__main__":
    main()
