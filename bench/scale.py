#!/usr/bin/env python3
"""The clean benchmark at two table sizes side by side: bench/bench.py once at --small rows
(default 1,000,000) and once at --large rows (default 10,000,000), half of them expired, each
seeded with SQL inside the database (bench/seed.py) and each with the floor (one `DELETE` by
the database's own client) measured in the same run. Prints, per database and batch size, the
wall time, the time per expired row and the peak RSS at both sizes, each clean's ratio to its
floor, and how the time per row grew from the small table to the large one. Every figure is
also written with --json. With --layouts, one such pair for each layout of the expired rows
(bench/seed.py: hashed, interleaved, contiguous); with --until-purged, MySQL runs are also
timed until InnoDB's purge caught up with them. Usually started by `bench/run.sh --only scale`; not part of the test
suite (the 10,000,000-row tables take about 3 GB each and the whole run most of an hour on
2 cores).
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import REPO, log

GOAL_FLOOR = 1.3  # our wall time over the floor's at the large size, batch 10,000, at most
GOAL_GROWTH = 1.25  # our time per row at the large size over the small one's, at most
NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MariaDB"}


def run_size(args, rows, out, layout):
    argv = [sys.executable, str(REPO / "bench" / "bench.py"), "--rows", str(rows), "--dialects", args.dialects,
            "--batch-sizes", args.batch_sizes, "--repeat", str(args.repeat), "--memory-dialects", "none",
            "--layout", layout, "--order", args.order, "--bin", args.bin, "--json", str(out)]
    if args.until_purged:
        argv.append("--until-purged")
    if args.no_airflow or rows > args.airflow_max_rows:
        argv.append("--no-airflow")
    log(f"scale: {rows:,} rows, {layout}: {' '.join(argv[1:])}")
    started = time.monotonic()
    done = subprocess.run(argv)
    log(f"scale: {rows:,} rows done in {time.monotonic() - started:.0f}s (exit {done.returncode})")
    return done.returncode, json.loads(Path(out).read_text()) if Path(out).exists() else {"runs": []}


def index(result):
    """{(dialect, key): run} where key is the batch size of our runs, 'floor' (the first floor of
    the dialect: on SQLite the one with foreign keys on, as Airflow connects) or 'airflow'."""
    found = {}
    for run in result["runs"]:
        if run["kind"] == "ours":
            found[(run["dialect"], run["batch_size"])] = run
        elif run["kind"] in ("floor", "airflow"):
            found.setdefault((run["dialect"], run["kind"]), run)
    return found


def per_row_us(run):
    return run["wall_s"] / run["rows_deleted"] * 1e6 if run and run["rows_deleted"] else None


def cell(value, fmt):
    return "–" if value is None else format(value, fmt)


def report(args, small, large, layout):
    s, l = index(small), index(large)
    lines = [
        f"### Clean at {args.small:,} and {args.large:,} task rows (half expired, {layout} layout), side by side",
        "",
        "Each figure is the median of the rounds (one round unless --repeat); floor: one `DELETE` by the "
        "database's own client on a copy of the same data, in the same run. µs/row: wall time per expired row. "
        f"Growth: µs/row at {args.large:,} over µs/row at {args.small:,}. Goals (batch 10,000 at the large "
        f"size): ÷ floor ≤ {GOAL_FLOOR}, growth ≤ {GOAL_GROWTH}.",
        "",
        "| database | clean | small: s | ÷ floor | µs/row | RSS MB | large: s | ÷ floor | µs/row | RSS MB | growth |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    keys = [-1 if b == "auto" else int(b) for b in args.batch_sizes.split(",") if b] + ["floor", "airflow"]
    for dialect in [d for d in args.dialects.split(",") if d]:
        for key in keys:
            a, b = s.get((dialect, key)), l.get((dialect, key))
            if not a and not b:
                continue
            label = {"floor": "floor: one DELETE", "airflow": "Airflow 3.3.2, batch 10,000"}.get(
                key, f"state-store, batch {'auto (default)' if key == -1 else format(key, ',')}"
                if isinstance(key, int) else key)

            def ratio(run, table):
                floor = table.get((dialect, "floor"))
                return run["wall_s"] / floor["wall_s"] if run and floor and floor["wall_s"] else None

            growth = per_row_us(b) / per_row_us(a) if per_row_us(a) and per_row_us(b) else None
            lines.append(
                f"| {NAMES.get(dialect, dialect)} | {label} "
                f"| {cell(a and a['wall_s'], '.2f')} | {cell(ratio(a, s), '.2f')} | {cell(per_row_us(a), '.1f')} "
                f"| {cell(a and a['rss_kb'] / 1024, '.0f')} "
                f"| {cell(b and b['wall_s'], '.2f')} | {cell(ratio(b, l), '.2f')} | {cell(per_row_us(b), '.1f')} "
                f"| {cell(b and b['rss_kb'] / 1024, '.0f')} | {cell(growth, '.2f')} |")
    lines.append("")
    lines.append("The floor's RSS is the client's (sqlite3, psql, mariadb); on the servers the work is the server's.")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    number = lambda t: int(t.replace("_", "").replace(",", ""))  # noqa: E731
    parser.add_argument("--small", type=number, default=1_000_000, help="rows of the small table (default 1,000,000)")
    parser.add_argument("--large", type=number, default=10_000_000,
                        help="rows of the large table (default 10,000,000)")
    parser.add_argument("--dialects", default="sqlite,postgres,mysql")
    parser.add_argument("--batch-sizes", default="0,10000", help="our batch sizes (default 0,10000; auto: the default)")
    parser.add_argument("--layouts", default="hashed,interleaved,contiguous",
                        help="where the expired rows are (bench/seed.py), one run of both sizes each "
                             "(default hashed,interleaved,contiguous)")
    parser.add_argument("--order", default="run", choices=["run", "key"],
                        help="how the ids follow the rows (bench/seed.py; key: SQLite only) (default run)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds at each size (default 1)")
    parser.add_argument("--airflow-max-rows", type=number, default=1_000_000,
                        help="Airflow's clean runs at sizes up to this (default 1,000,000: at 10,000,000 it takes "
                             "many minutes per database)")
    parser.add_argument("--no-airflow", action="store_true")
    parser.add_argument("--until-purged", action="store_true", help="bench.py's --until-purged (MySQL)")
    parser.add_argument("--bin", default=str(REPO / "target" / "release" / "state-store"))
    parser.add_argument("--json", help="also write both runs' figures to this JSON file")
    args, _ = parser.parse_known_args()
    code, figures = 0, {}
    for layout in [x for x in args.layouts.split(",") if x]:
        with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
            code_small, small = run_size(args, args.small, Path(tmp) / "small.json", layout)
            code_large, large = run_size(args, args.large, Path(tmp) / "large.json", layout)
        print(report(args, small, large, layout))
        print()
        figures[layout] = {"small": small, "large": large}
        code = code or code_small or code_large
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
