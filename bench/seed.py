#!/usr/bin/env python3
"""Seeds a state-store benchmark database: N task rows over many dag runs, a given share of
them expired, with values and timestamps in the exact forms Airflow 3.3.2 writes.

The schema must exist already (`state-store sandbox create`). Usage:
    seed.py sqlite PATH ROWS EXPIRED_FRACTION
"""
import json
import random
import sqlite3
import sys
from datetime import datetime, timedelta, timezone

ROWS_PER_RUN = 100


def rows(n, expired_fraction, now):
    rng = random.Random(42)
    for i in range(n):
        run = i // ROWS_PER_RUN
        task = f"task_{i % 10}"
        key = f"key_{i % ROWS_PER_RUN // 10}"
        value = json.dumps({"offset": rng.randrange(10**9), "batch": f"b-{run}", "ratio": rng.random()})
        updated = now - timedelta(days=rng.randrange(60), microseconds=rng.randrange(10**6))
        if rng.random() < expired_fraction:
            expires = now - timedelta(seconds=1 + rng.randrange(86_400 * 30))
        elif rng.random() < 0.1:
            expires = None
        else:
            expires = now + timedelta(seconds=1 + rng.randrange(86_400 * 30))
        yield run, task, key, value, updated, expires


def fmt(ts):
    return None if ts is None else ts.strftime("%Y-%m-%d %H:%M:%S.%f")


def seed_sqlite(path, n, fraction):
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous = OFF")
    runs = (n + ROWS_PER_RUN - 1) // ROWS_PER_RUN
    conn.executemany(
        "INSERT INTO dag_run (id, dag_id, run_id, run_type, run_after, clear_number, span_status) "
        "VALUES (?, ?, ?, 'scheduled', ?, 0, 'not_started')",
        ((r + 1, f"dag_{r % 50}", f"scheduled__{r}", fmt(now)) for r in range(runs)),
    )
    conn.executemany(
        "INSERT INTO task_state_store (dag_run_id, task_id, map_index, key, dag_id, run_id, value, updated_at, expires_at) "
        "VALUES (?, ?, -1, ?, ?, ?, ?, ?, ?)",
        (
            (run + 1, task, key, f"dag_{run % 50}", f"scheduled__{run}", value, fmt(updated), fmt(expires))
            for run, task, key, value, updated, expires in rows(n, fraction, now)
        ),
    )
    conn.commit()
    expired = conn.execute(
        "SELECT count(*) FROM task_state_store WHERE expires_at < ?", (fmt(datetime.now(timezone.utc)),)
    ).fetchone()[0]
    conn.close()
    print(expired)


if __name__ == "__main__":
    dialect, target, n, fraction = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    if dialect != "sqlite":
        sys.exit(f"unsupported dialect {dialect}")
    seed_sqlite(target, n, fraction)
