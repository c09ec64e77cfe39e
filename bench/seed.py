#!/usr/bin/env python3
"""Seeds a state-store benchmark metastore: N task rows over N/100 dag runs, a given share of
them expired, with values and timestamps in the forms Airflow 3.3.2 writes them.

The tables must exist already (`state-store sandbox create`). Every dialect gets the same
rows: each column is a pure function of the row number and one base instant, so the SQLite
file and the PostgreSQL and MySQL databases hold the same data. Each is filled by one
`INSERT … SELECT` over a generated series that the database runs itself (SQLite through
Python's sqlite3 module, the servers through their own clients), and a sample of rows is then
checked against the same function in Python. Row i (0-based), in dag run r = i // 100:

    dag_run.id = r + 1, dag_id = dag_<r % 50>, run_id = scheduled__<r>
    task_id = task_<i % 10>, key = key_<i % 100 // 10>, map_index = -1
    value = json.dumps({"offset": h % 10**9, "batch": "b-<r>", "ratio": (h % 999 + 1) / 1000})
    bucket = h // 256 % 100: below the expired percentage the row expired 1 s to 30 days before
    the base instant; in the next tenth of the remaining buckets expires_at is NULL (never
    expires); otherwise it expires 1 to 31 days after the base instant
    updated_at: up to 60 days before the base instant

with h and g two multiplicative hashes of i. That is the `hashed` layout, the default: expired
rows spread over the table at random. Two more place them as retention and task patterns do,
each with half the rows expired, all of them at one instant 30 days before the base, and the
rest at one instant five years after it (none never expires), as a fixed retention leaves them:

    interleaved: row i expired when (r + i % 100) % 2 == 0, every other row of every dag run
    contiguous:  row i expired when i < ROWS / 2, the older half of the table

The order of the ids is a third choice (`--order`, SQLite only). `run`, the default, numbers
each dag run's rows together, as above. `key` gives the same rows, the same columns and the
same expiries, numbered key by key across the dag runs: ids 1 to R hold the first key of every
one of the R dag runs, the next R ids the second key, and so on, as dag runs that run side by
side write their keys, and as an `INSERT … SELECT … FROM dag_run d, keys` lays them out. Row i
of the `run` order above is then the row with id (i % 100) * R + i // 100 + 1. A walk of the
ids (the servers' clean, and SQLite's with --archive or batch 0) holds, in this order, rows of
every dag run in each batch: its entries sit on nearly every page of the unique (dag_run_id,
task_id, map_index, key) and lookup (dag_id, run_id, task_id, map_index) indexes, where in the
`run` order they sit together. SQLite's batched clean walks by dag run for that reason.

The file: the tables must exist before seeding. `bench/bench.py` makes the SQLite file with
`airflow db migrate` when Airflow 3.3.2's virtualenv is there (AIRFLOW_VENV), so that it is the
file users have: Airflow's 59 tables and their indexes, in WAL mode (Airflow's own connections
set it), pages of 4,096 bytes, no auto-vacuum. Without the virtualenv it uses `state-store
sandbox create`, whose task_state_store, dag_run and their indexes are migrate's (the interop
tier's schema test compares them), and the same journal mode, page size and auto-vacuum; the
46 tables it leaves out are not touched by a clean. Running migrate rather than replaying a
dump of its schema keeps the benchmark on whatever the Airflow version under test creates.

Usage:

    seed.py sqlite PATH ROWS [--expired-pct 50] [--layout hashed|interleaved|contiguous] [--order run|key]
    seed.py postgres URL ROWS [...]    (URL names the database, e.g. postgresql://postgres@127.0.0.1:5432/db)
    seed.py mysql URL ROWS [...]       (e.g. mysql://root@127.0.0.1:3306/db)

It prints the number of rows expired at the base instant (now).
"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from urllib.parse import unquote, urlsplit

ROWS_PER_RUN = 100
DAGS = 50
THIRTY_DAYS = 30 * 86_400
SIXTY_DAYS = 60 * 86_400
DAY = 86_400
H_MUL = 2_654_435_761
G_MUL = 2_246_822_519
G_ADD = 374_761_393
TWO_32 = 2**32
LAYOUTS = ("hashed", "interleaved", "contiguous")
ORDERS = ("run", "key")
FIVE_YEARS = 5 * 365 * DAY


def null_buckets(expired_pct):
    """How many of the 100 buckets hold never-expiring rows: a tenth of the non-expired ones."""
    return (100 - expired_pct) // 10


def bucket_of(layout, i, run, h, rows):
    """The bucket deciding row i's expiry (below the expired percentage: expired)."""
    if layout == "interleaved":
        return 0 if (run + i % ROWS_PER_RUN) % 2 == 0 else 99
    if layout == "contiguous":
        return 0 if i < rows // 2 else 99
    return h // 256 % 100


def bucket_sql(layout, i, run, h, rows, div="/"):
    """`bucket_of` as SQL over the row number `i`, its run and hash (`div`: MySQL's `DIV`)."""
    if layout == "interleaved":
        return f"(CASE WHEN ({run} + {i} % {ROWS_PER_RUN}) % 2 = 0 THEN 0 ELSE 99 END)"
    if layout == "contiguous":
        return f"(CASE WHEN {i} < {rows // 2} THEN 0 ELSE 99 END)"
    return f"({h} {div} 256 % 100)"


def row(i, base, expired_pct, layout="hashed", rows=0):
    """Row i as Python values; the SQL of every dialect computes exactly the same."""
    run = i // ROWS_PER_RUN
    h = i * H_MUL % TWO_32
    g = (i * G_MUL + G_ADD) % TWO_32
    micros = i * 7919 % 1_000_000
    bucket = bucket_of(layout, i, run, h, rows)
    if layout != "hashed":
        updated = base - timedelta(seconds=1 + g % SIXTY_DAYS) + timedelta(microseconds=micros)
        expires = base - timedelta(seconds=THIRTY_DAYS) if bucket == 0 else base + timedelta(seconds=FIVE_YEARS)
        value = json.dumps({"offset": h % 10**9, "batch": f"b-{run}", "ratio": (h % 999 + 1) / 1000})
        return run, f"task_{i % 10}", f"key_{i % ROWS_PER_RUN // 10}", value, updated, expires
    value = json.dumps({"offset": h % 10**9, "batch": f"b-{run}", "ratio": (h % 999 + 1) / 1000})
    updated = base - timedelta(seconds=1 + g % SIXTY_DAYS) + timedelta(microseconds=micros)
    if bucket < expired_pct:
        expires = base - timedelta(seconds=1 + g % THIRTY_DAYS) + timedelta(microseconds=micros)
    elif bucket < expired_pct + null_buckets(expired_pct):
        expires = None
    else:
        expires = base + timedelta(seconds=DAY + g % THIRTY_DAYS) + timedelta(microseconds=micros)
    return run, f"task_{i % 10}", f"key_{i % ROWS_PER_RUN // 10}", value, updated, expires


def runs_for(rows):
    return (rows + ROWS_PER_RUN - 1) // ROWS_PER_RUN


def sqlite_text(ts):
    """Airflow's SQLite timestamp form: UTC, no offset, always six fractional digits."""
    return None if ts is None else ts.strftime("%Y-%m-%d %H:%M:%S.%f")


def now_utc():
    return datetime.now(timezone.utc).replace(tzinfo=None)


# --- database clients -------------------------------------------------------------------------


class Server:
    """A PostgreSQL or MySQL server reached with its own command-line client (psql, mariadb)."""

    def __init__(self, url):
        parts = urlsplit(url)
        self.scheme = parts.scheme.split("+")[0]
        self.dialect = {"postgresql": "postgres", "postgres": "postgres", "mysql": "mysql", "mariadb": "mysql"}[
            self.scheme
        ]
        self.user = unquote(parts.username or ("postgres" if self.dialect == "postgres" else "root"))
        self.password = unquote(parts.password or "")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (5432 if self.dialect == "postgres" else 3306)
        self.database = parts.path.lstrip("/") or None

    def with_database(self, name):
        other = Server.__new__(Server)
        other.__dict__.update(self.__dict__)
        other.database = name
        return other

    def _auth(self):
        return f"{self.user}:{self.password}@" if self.password else f"{self.user}@"

    def url(self, driver=None):
        """The database's URL; `driver` adds a SQLAlchemy driver (`psycopg2`, `pymysql`)."""
        scheme = "postgresql" if self.dialect == "postgres" else "mysql"
        if driver:
            scheme += f"+{driver}"
        return f"{scheme}://{self._auth()}{self.host}:{self.port}/{self.database or ''}"

    def client_command(self, sql, database=None):
        """argv and environment that run `sql` with the database's own client."""
        database = database or self.database
        env = dict(os.environ)
        if self.dialect == "postgres":
            env["PGPASSWORD"] = self.password
            argv = ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", self.host, "-p", str(self.port),
                    "-U", self.user, "-d", database or "postgres", "-c", sql]
        else:
            env["MYSQL_PWD"] = self.password
            argv = ["mariadb", "--protocol=tcp", "-h", self.host, "-P", str(self.port), "-u", self.user, "-N", "-B"]
            if database:
                argv.append(database)
            argv += ["-e", sql]
        return argv, env

    def sql(self, sql, database=None):
        """Runs SQL and returns its output rows, each a list of column texts."""
        argv, env = self.client_command(sql, database)
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stderr.strip()}\nSQL: {sql[:300]}")
        sep = "|" if self.dialect == "postgres" else "\t"
        return [line.split(sep) for line in done.stdout.splitlines() if line]

    def scalar(self, sql, database=None):
        rows = self.sql(sql, database)
        return rows[-1][0]


# --- seeding ----------------------------------------------------------------------------------


def run_major(i, rows, order):
    """Row i's index in the `run` order (which decides its columns), i its id - 1 in `order`."""
    if order == "run":
        return i
    runs = runs_for(rows)
    return (i % runs) * ROWS_PER_RUN + i // runs


def seed_sqlite(path, rows, expired_pct, base, layout, order="run"):
    """One `INSERT … SELECT` over a recursive counter, run by SQLite itself: 10,000,000 rows in
    minutes, where a Python loop binding each row took four. In the `key` order the counter
    numbers the ids, and each row's columns come from its index in the `run` order."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous = OFF")
    # Room for every index page: the expires_at index is filled in random order.
    conn.execute("PRAGMA cache_size = -1000000")
    conn.execute("PRAGMA foreign_keys = ON")
    b = int(base.replace(tzinfo=timezone.utc).timestamp())
    if order == "key" and rows % ROWS_PER_RUN:
        raise ValueError(f"--order key needs a whole number of dag runs: ROWS a multiple of {ROWS_PER_RUN}")
    runs = runs_for(rows)
    run = "(s.i / 100)"
    h = f"((s.i * {H_MUL}) % {TWO_32})"
    g = f"((s.i * {G_MUL} + {G_ADD}) % {TWO_32})"
    fraction = "printf('.%06d', (s.i * 7919) % 1000000)"
    bucket = bucket_sql(layout, "s.i", run, h, rows)

    def instant(seconds):
        # base and every offset are whole seconds; the microseconds are added as text.
        return f"datetime({seconds}, 'unixepoch') || {fraction}"

    counter = f"WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < {{last}}) "
    conn.execute(
        counter.format(last=runs_for(rows) - 1)
        + "INSERT INTO dag_run (id, dag_id, run_id, run_type, run_after, clear_number, span_status) "
        f"SELECT s.i + 1, 'dag_' || (s.i % {DAGS}), 'scheduled__' || s.i, 'scheduled', ?, 0, 'not_started' FROM s",
        (sqlite_text(base),),
    )
    # s.id is the row's id - 1, s.i its index in the `run` order, which decides every column.
    ids = "WITH RECURSIVE c(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM c WHERE n < {last}), "
    ids += ("s(id, i) AS (SELECT n, n FROM c) " if order == "run" else
            f"s(id, i) AS (SELECT n, n % {runs} * {ROWS_PER_RUN} + n / {runs} FROM c) ")
    conn.execute(
        ids.format(last=rows - 1)
        + 'INSERT INTO task_state_store (id, dag_run_id, task_id, map_index, "key", dag_id, run_id, value, '
        "updated_at, expires_at) "
        f"SELECT s.id + 1, {run} + 1, 'task_' || (s.i % 10), -1, 'key_' || (s.i % 100 / 10), "
        f"'dag_' || ({run} % {DAGS}), 'scheduled__' || {run}, {_sql_value('sqlite', h, run)}, "
        f"{instant(f'{b} - 1 - {g} % {SIXTY_DAYS}')}, "
        + (
            f"CASE WHEN {bucket} < {expired_pct} THEN {instant(f'{b} - 1 - {g} % {THIRTY_DAYS}')} "
            f"WHEN {bucket} < {expired_pct + null_buckets(expired_pct)} THEN NULL "
            f"ELSE {instant(f'{b} + {DAY} + {g} % {THIRTY_DAYS}')} END FROM s"
            if layout == "hashed" else
            f"CASE WHEN {bucket} = 0 THEN datetime({b} - {THIRTY_DAYS}, 'unixepoch') || '.000000' "
            f"ELSE datetime({b} + {FIVE_YEARS}, 'unixepoch') || '.000000' END FROM s"
        )
    )
    conn.commit()
    expired = conn.execute(
        "SELECT count(*) FROM task_state_store WHERE expires_at < ?", (sqlite_text(base),)
    ).fetchone()[0]
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return expired


def _sql_value(dialect, h, run):
    """The value column as SQL text; equal to json.dumps of the same dict (checked by verify)."""
    k = f"({h} % 999 + 1)"
    if dialect == "sqlite":
        ratio = f"'0.' || rtrim(printf('%03d', {k}), '0')"
        return (f"'{{\"offset\": ' || ({h} % 1000000000) || ', \"batch\": \"b-' || {run} || "
                f"'\", \"ratio\": ' || {ratio} || '}}'")
    if dialect == "postgres":
        ratio = f"'0.' || rtrim(lpad({k}::text, 3, '0'), '0')"
        return (f"'{{\"offset\": ' || ({h} % 1000000000) || ', \"batch\": \"b-' || {run} || "
                f"'\", \"ratio\": ' || {ratio} || '}}'")
    ratio = f"CONCAT('0.', TRIM(TRAILING '0' FROM LPAD({k}, 3, '0')))"
    return (f"CONCAT('{{\"offset\": ', {h} % 1000000000, ', \"batch\": \"b-', {run}, "
            f"'\", \"ratio\": ', {ratio}, '}}')")


def seed_postgres(server, rows, expired_pct, base, layout):
    b = f"'{sqlite_text(base)}+00'::timestamptz"
    i, run = "s.i", "(s.i / 100)"
    h = f"((s.i * {H_MUL}) % {TWO_32})"
    g = f"((s.i * {G_MUL} + {G_ADD}) % {TWO_32})"
    micros = f"((s.i * 7919) % 1000000) * interval '1 microsecond'"
    bucket = bucket_sql(layout, "s.i", run, h, rows)
    sec = "interval '1 second'"
    nulls = null_buckets(expired_pct)
    expires = (
        f"""CASE WHEN {bucket} < {expired_pct} THEN {b} - (1 + {g} % {THIRTY_DAYS}) * {sec} + {micros}
                    WHEN {bucket} < {expired_pct + nulls} THEN NULL
                    ELSE {b} + ({DAY} + {g} % {THIRTY_DAYS}) * {sec} + {micros} END"""
        if layout == "hashed" else
        f"CASE WHEN {bucket} = 0 THEN {b} - {THIRTY_DAYS} * {sec} ELSE {b} + {FIVE_YEARS} * {sec} END"
    )
    server.sql(f"""
        SET synchronous_commit = off;
        INSERT INTO dag_run (id, dag_id, run_id, run_type, run_after, clear_number, span_status)
        SELECT r + 1, 'dag_' || (r % {DAGS}), 'scheduled__' || r, 'scheduled', {b}, 0, 'not_started'
        FROM generate_series(0, {runs_for(rows) - 1}::bigint) AS r;
        SELECT setval(pg_get_serial_sequence('dag_run', 'id'), {runs_for(rows)});
        INSERT INTO task_state_store (id, dag_run_id, task_id, map_index, key, dag_id, run_id, value,
                                      updated_at, expires_at)
        SELECT {i} + 1, {run} + 1, 'task_' || ({i} % 10), -1, 'key_' || ({i} % 100 / 10), 'dag_' || ({run} % {DAGS}),
               'scheduled__' || {run}, {_sql_value("postgres", h, run)},
               {b} - (1 + {g} % {SIXTY_DAYS}) * {sec} + {micros},
               {expires}
        FROM generate_series(0, {rows - 1}::bigint) AS s(i);
        SELECT setval(pg_get_serial_sequence('task_state_store', 'id'), {rows});
    """)
    # Set hint bits and the visibility map and gather statistics once, so that every copy made
    # from this database starts in the state a long-lived metastore is in.
    server.sql("VACUUM (FREEZE, ANALYZE)")
    return int(server.scalar(f"SELECT count(*) FROM task_state_store WHERE expires_at < {b}"))


def seed_mysql(server, rows, expired_pct, base, layout):
    b = f"TIMESTAMP'{sqlite_text(base)}'"
    i, run = "s.seq", "(s.seq DIV 100)"
    h = f"((s.seq * {H_MUL}) % {TWO_32})"
    g = f"((s.seq * {G_MUL} + {G_ADD}) % {TWO_32})"
    micros = "INTERVAL ((s.seq * 7919) % 1000000) MICROSECOND"
    bucket = bucket_sql(layout, "s.seq", run, h, rows, div="DIV")
    nulls = null_buckets(expired_pct)
    expires = (
        f"""CASE WHEN {bucket} < {expired_pct} THEN {b} - INTERVAL (1 + {g} % {THIRTY_DAYS}) SECOND + {micros}
                    WHEN {bucket} < {expired_pct + nulls} THEN NULL
                    ELSE {b} + INTERVAL ({DAY} + {g} % {THIRTY_DAYS}) SECOND + {micros} END"""
        if layout == "hashed" else
        f"CASE WHEN {bucket} = 0 THEN {b} - INTERVAL {THIRTY_DAYS} SECOND ELSE {b} + INTERVAL {FIVE_YEARS} SECOND END"
    )
    # Airflow runs every MySQL session in UTC; TIMESTAMP columns convert from the session zone.
    server.sql(f"""
        SET time_zone = '+00:00', unique_checks = 0, foreign_key_checks = 0;
        INSERT INTO dag_run (id, dag_id, run_id, run_type, run_after, clear_number, span_status)
        SELECT s.seq + 1, CONCAT('dag_', s.seq % {DAGS}), CONCAT('scheduled__', s.seq), 'scheduled', {b}, 0,
               'not_started'
        FROM seq_0_to_{runs_for(rows) - 1} AS s;
        INSERT INTO task_state_store (id, dag_run_id, task_id, map_index, `key`, dag_id, run_id, value,
                                      updated_at, expires_at)
        SELECT {i} + 1, {run} + 1, CONCAT('task_', {i} % 10), -1, CONCAT('key_', {i} % 100 DIV 10),
               CONCAT('dag_', {run} % {DAGS}), CONCAT('scheduled__', {run}), {_sql_value("mysql", h, run)},
               {b} - INTERVAL (1 + {g} % {SIXTY_DAYS}) SECOND + {micros},
               {expires}
        FROM seq_0_to_{rows - 1} AS s;
        ANALYZE TABLE dag_run, task_state_store;
    """)
    return int(server.scalar(f"SET time_zone = '+00:00'; SELECT count(*) FROM task_state_store WHERE expires_at < {b}"))


def verify(dialect, target, rows, expired_pct, base, layout="hashed", sample=2000, order="run"):
    """Compares a spread of stored rows with what Python (and so Airflow) would have written."""
    step = max(1, rows // sample)
    ids = list(range(0, rows, step))[:sample] + [rows - 1]
    id_list = ",".join(str(i + 1) for i in ids)
    if dialect == "sqlite":
        conn = sqlite3.connect(target)
        got = conn.execute(
            f'SELECT id, task_id, "key", dag_id, run_id, value, updated_at, expires_at FROM task_state_store '
            f"WHERE id IN ({id_list}) ORDER BY id"
        ).fetchall()
        conn.close()
        got = [[str(c) if c is not None else None for c in r] for r in got]
    else:
        if dialect == "postgres":
            cols = ("id, task_id, key, dag_id, run_id, value, "
                    "to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), "
                    "coalesce(to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), 'NULL')")
            prefix = ""
        else:
            cols = ("id, task_id, `key`, dag_id, run_id, value, DATE_FORMAT(updated_at, '%Y-%m-%d %H:%i:%s.%f'), "
                    "coalesce(DATE_FORMAT(expires_at, '%Y-%m-%d %H:%i:%s.%f'), 'NULL')")
            prefix = "SET time_zone = '+00:00'; "
        got = target.sql(f"{prefix}SELECT {cols} FROM task_state_store WHERE id IN ({id_list}) ORDER BY id")
        got = [[None if c == "NULL" else c for c in r] for r in got]
    if len(got) != len(set(ids)):
        raise RuntimeError(f"{dialect}: expected {len(set(ids))} sample rows, found {len(got)}")
    for r in got:
        i = run_major(int(r[0]) - 1, rows, order)
        run, task, key, value, updated, expires = row(i, base, expired_pct, layout, rows)
        want = [r[0], task, key, f"dag_{run % DAGS}", f"scheduled__{run}", value, sqlite_text(updated),
                sqlite_text(expires)]
        if r != want:
            raise RuntimeError(f"{dialect}: row {i + 1} is\n  {r}\nbut Airflow would have written\n  {want}")


def seed(dialect, target, rows, expired_pct, base=None, layout="hashed", order="run"):
    """Fills the tables and checks a sample; returns the number of rows expired at `base`."""
    if order != "run" and dialect != "sqlite":
        raise ValueError(f"--order {order} is SQLite's only")
    base = base or now_utc().replace(microsecond=0)
    if layout != "hashed":
        expired_pct = 50
    if dialect == "sqlite":
        expired = seed_sqlite(target, rows, expired_pct, base, layout, order)
    elif dialect == "postgres":
        expired = seed_postgres(target, rows, expired_pct, base, layout)
    else:
        expired = seed_mysql(target, rows, expired_pct, base, layout)
    verify(dialect, target, rows, expired_pct, base, layout, order=order)
    return expired


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dialect", choices=["sqlite", "postgres", "mysql"])
    parser.add_argument("target", help="SQLite file, or the URL of a PostgreSQL/MySQL database")
    parser.add_argument("rows", type=int)
    parser.add_argument("--expired-pct", type=int, default=50, help="share of expired rows, in percent (hashed)")
    parser.add_argument("--layout", choices=LAYOUTS, default="hashed", help="where the expired rows are")
    parser.add_argument("--order", choices=ORDERS, default="run",
                        help="how the ids follow the rows: each dag run's together (run) or key by key (key, SQLite)")
    args = parser.parse_args()
    target = args.target if args.dialect == "sqlite" else Server(args.target)
    print(seed(args.dialect, target, args.rows, args.expired_pct, layout=args.layout, order=args.order))


if __name__ == "__main__":
    sys.exit(main())
