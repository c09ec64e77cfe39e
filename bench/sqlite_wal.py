#!/usr/bin/env python3
"""The batched clean's two statements on a SQLite file, with its session settings as
parameters: the page cache, the WAL size that triggers a checkpoint, `synchronous`, and
checkpoints every N batches instead. A tool for finding where a batched clean's time goes
(docs/performance.md, at ten million rows): it prints the wall, user and system time, the bytes
written and read, and the mean time per batch in each fifth of the run. It deletes, so run it
on a copy of a seeded file (bench/seed.py):

    cp base.db run.db && python3 bench/sqlite_wal.py run.db --batch 10000 --checkpoint-pages 262144

`--walk runs` (the default) walks by dag run, then id, as the clean does where the ids scatter
the dag runs; `--walk ids` by id, as it does elsewhere.
"""
import argparse
import os
import sqlite3
import time

NEXT_BATCH_END = ("SELECT id FROM task_state_store WHERE id > ? AND expires_at < ? "
                  "ORDER BY id LIMIT 1 OFFSET ?")
DELETE_BATCH = "DELETE FROM task_state_store WHERE id > ? AND id <= ? AND expires_at < ?"
ID_MIN, ID_MAX = -(2**63), 2**63 - 1
# The walk by dag run, then id (the clean's on SQLite since the ids that do not follow the dag
# runs); `+expires_at` keeps that column's index out of the plan, as the clean does.
NEXT_RUN_END = ("SELECT dag_run_id, id FROM task_state_store WHERE (dag_run_id, id) > (?, ?) "
                "AND +expires_at < ? AND typeof(dag_run_id) = 'integer' ORDER BY dag_run_id, id "
                "LIMIT 1 OFFSET ?")
DELETE_RUNS = ("DELETE FROM task_state_store WHERE (dag_run_id, id) > (?, ?) "
               "AND (dag_run_id, id) <= (?, ?) AND +expires_at < ?")


def io_counters():
    """This process's bytes written to storage, written by calls and read by calls."""
    fields = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
    return int(fields["write_bytes"]), int(fields["wchar"]), int(fields["rchar"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db")
    parser.add_argument("--batch", type=int, default=10000, help="expired rows per batch (at least 1)")
    parser.add_argument("--cache-kib", type=int, default=32768, help="page cache (the clean's: 32 MiB)")
    parser.add_argument("--checkpoint-pages", type=int, default=16384, help="wal_autocheckpoint")
    parser.add_argument("--synchronous", default="NORMAL")
    parser.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                        help="no auto-checkpoint; a passive checkpoint after every N batches")
    parser.add_argument("--cache-spill", choices=("on", "off"), default="off",
                        help="whether a batch's dirty pages may spill before its commit (the clean's: off)")
    parser.add_argument("--walk", choices=("ids", "runs"), default="runs",
                        help="batches by id, or by dag run and then id (the clean's)")
    parser.add_argument("--cutoff", help="default: now, in Airflow's SQLite text form")
    args = parser.parse_args()
    if args.batch < 1:
        parser.error("--batch must be at least 1")

    conn = sqlite3.connect(args.db, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute(f"PRAGMA cache_size = -{args.cache_kib}")
    conn.execute(f"PRAGMA wal_autocheckpoint = {0 if args.checkpoint_every else args.checkpoint_pages}")
    conn.execute(f"PRAGMA synchronous = {args.synchronous}")
    conn.execute(f"PRAGMA cache_spill = {args.cache_spill}")
    cutoff = args.cutoff or time.strftime("%Y-%m-%d %H:%M:%S.000000", time.gmtime())

    started, io_before, cpu_before = time.monotonic(), io_counters(), os.times()
    runs = args.walk == "runs"
    after, deleted, batch_seconds = (ID_MIN, ID_MIN) if runs else ID_MIN, 0, []
    while True:
        batch_started = time.monotonic()
        if runs:
            end = conn.execute(NEXT_RUN_END, (*after, cutoff, args.batch - 1)).fetchone()
            last = tuple(end) if end else (ID_MAX, ID_MAX)
            deleted += conn.execute(DELETE_RUNS, (*after, *last, cutoff)).rowcount
        else:
            end = conn.execute(NEXT_BATCH_END, (after, cutoff, args.batch - 1)).fetchone()
            last = end[0] if end else ID_MAX
            deleted += conn.execute(DELETE_BATCH, (after, last, cutoff)).rowcount
        if args.checkpoint_every and (len(batch_seconds) + 1) % args.checkpoint_every == 0:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        batch_seconds.append(time.monotonic() - batch_started)
        if not end:
            break
        after = last
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    io_after, cpu_after = io_counters(), os.times()

    gib = 2**30
    fifth = max(1, len(batch_seconds) // 5)
    fifths = [batch_seconds[i:i + fifth] for i in range(0, len(batch_seconds), fifth)]
    print(f"walk by {args.walk}, batch {args.batch}, cache {args.cache_kib} KiB, checkpoint at {args.checkpoint_pages} pages, "
          f"synchronous {args.synchronous}, cache spill {args.cache_spill}, checkpoint every {args.checkpoint_every or '-'} batches: "
          f"deleted {deleted} in {time.monotonic() - started:.1f} s "
          f"(user {cpu_after.user - cpu_before.user:.1f} s, system {cpu_after.system - cpu_before.system:.1f} s); "
          f"written to storage {(io_after[0] - io_before[0]) / gib:.2f} GiB, "
          f"by write calls {(io_after[1] - io_before[1]) / gib:.2f} GiB, "
          f"by read calls {(io_after[2] - io_before[2]) / gib:.2f} GiB; {len(batch_seconds)} batches, "
          "mean ms per batch by fifths: " + " ".join(f"{1000 * sum(f) / len(f):.0f}" for f in fifths))


if __name__ == "__main__":
    main()
