"""Step 2: keys written by `state-store set` read back through Airflow's own `MetastoreBackend`.

Each write of ours has a twin written by Airflow itself for the same value, in a sibling task or
asset: a task's `context["task_state_store"].set(...)` through the task SDK (which computes the
expiry on the worker) or the REST API's asset write. The two rows must agree: the stored text
byte for byte, `expires_at` by the same rule, and the timestamps in the same stored form.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

import cases
import support
from support import Task, between, utcnow


def set_task(state_store: support.StateStore, task: Task, key: str, text: str, *extra: str) -> support.Result:
    # Long values go through stdin (`-`), the way a script pipes a document in.
    if len(text) > 1000:
        return state_store.run("set", key, "-", *task.args(), *extra, stdin=text)
    return state_store.run("set", key, text, *task.args(), *extra)


def assert_same_stored_form(airflow: support.Airflow, ours: Task, theirs: Task, key: str, dialect: str) -> dict:
    """Our row and Airflow's twin hold the same value text and timestamps of the same form."""
    ours_row, theirs_row = airflow.task_row(ours, key), airflow.task_row(theirs, key)
    assert ours_row is not None and theirs_row is not None
    for column in ("dag_run_id", "dag_id", "run_id", "map_index", "key", "value"):
        assert ours_row[column] == theirs_row[column], column
    raw_ours, raw_theirs = airflow.raw_task_row(ours_row["id"]), airflow.raw_task_row(theirs_row["id"])
    assert raw_ours["value"] == raw_theirs["value"]
    for column in ("updated_at", "expires_at"):
        a, b = raw_ours[column], raw_theirs[column]
        assert (a is None) == (b is None), column
        if a is None:
            continue
        assert type(a) is type(b), f"{column}: {a!r} vs Airflow's {b!r}"
        if dialect == "sqlite":
            assert support.SQLITE_TIMESTAMP.match(a), f"{column} stored as {a!r}, not as Airflow stores it"
            assert support.SQLITE_TIMESTAMP.match(b)
        elif dialect == "postgres":
            assert a.tzinfo is not None and b.tzinfo is not None
        elif dialect == "mysql":
            assert a.tzinfo is None and b.tzinfo is None
    return ours_row


# ── values ───────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(("case", "text"), cases.VALUES, ids=[c for c, _ in cases.VALUES])
def test_task_value(case, text, task, airflow, state_store, dialect) -> None:
    key = f"value/{case}"
    ours, theirs = task.sibling("ours"), task.sibling("airflow")

    low, t0 = airflow.default_expires_at(), utcnow()
    set_task(state_store, ours, key, text)
    t1, high = utcnow(), airflow.default_expires_at()
    airflow.worker_set(theirs, key, cases.python_value(text))

    stored = airflow.get(ours, key)
    assert stored == cases.airflow_text(text), "stored text differs from Python's json.dumps"
    assert stored == airflow.get(theirs, key), "stored text differs from Airflow's own write"
    assert stored == airflow.rest_api_stores(text), "stored text differs from what the REST API stores"
    assert airflow.task_reads(ours, key) == json.loads(text), "a task reads another value"

    row = assert_same_stored_form(airflow, ours, theirs, key, dialect)
    assert between(row["updated_at"], t0, t1)
    assert between(row["expires_at"], low, high), "expires_at is not [state_store] default_retention_days from now"


@pytest.mark.parametrize(("case", "text"), cases.VALUES, ids=[c for c, _ in cases.VALUES])
def test_asset_value(case, text, airflow, state_store, dialect) -> None:
    key = f"value/{case}"
    ours, theirs = airflow.add_asset(), airflow.add_asset()
    # Every way of naming an asset, in turn.
    selector = [
        ["--asset", ours.name],
        ["--asset-uri", ours.uri],
        ["--asset-id", str(ours.id)],
    ][sum(map(ord, case)) % 3]

    t0 = utcnow()
    if len(text) > 1000:
        state_store.run("set", key, "-", *selector, stdin=text)
    else:
        state_store.run("set", key, text, *selector)
    t1 = utcnow()
    airflow.asset_set(theirs, key, cases.python_value(text), kind="api")

    stored = airflow.get(ours, key)
    assert stored == cases.airflow_text(text)
    assert stored == airflow.get(theirs, key)
    assert airflow.asset_reads(ours, key) == json.loads(text), "a task reads another value"

    row, twin = airflow.asset_row(ours, key), airflow.asset_row(theirs, key)
    assert between(row["updated_at"], t0, t1)
    for column in row:
        if column not in ("asset_id", "updated_at"):
            assert row[column] == twin[column], f"{column}: {row[column]!r}, Airflow's REST API writes {twin[column]!r}"
    raw, raw_twin = airflow.raw_asset_row(ours.id, key), airflow.raw_asset_row(theirs.id, key)
    assert type(raw["updated_at"]) is type(raw_twin["updated_at"])
    if dialect == "sqlite":
        assert support.SQLITE_TIMESTAMP.match(raw["updated_at"]), raw["updated_at"]


def test_asset_write_over_a_task_write_is_an_api_write(task, airflow, state_store) -> None:
    """Overwriting a key a task wrote: the writer columns say `api`, as after a REST API write."""
    ours, theirs = airflow.add_asset(), airflow.add_asset()
    for asset in (ours, theirs):
        airflow.asset_set(asset, "cursor", 1, kind="task", task=task)
    state_store.run("set", "cursor", "2", "--asset-id", str(ours.id))
    airflow.asset_set(theirs, "cursor", 2, kind="api")
    row, twin = airflow.asset_row(ours, "cursor"), airflow.asset_row(theirs, "cursor")
    assert {k: v for k, v in row.items() if k not in ("asset_id", "updated_at")} == {
        k: v for k, v in twin.items() if k not in ("asset_id", "updated_at")
    }
    assert row["last_updated_by_kind"] == "api" and row["last_updated_by_dag_id"] is None


def _nested(depth: int, shape: str) -> str:
    return "[" * depth + "]" * depth if shape == "list" else '{"a": ' * depth + "1" + "}" * depth


#: Texts at the edges of what Airflow's REST API accepts as a value.
EDGES = [
    ("null", "null", {}),
    ("null_inside", '{"a": null}', {}),
    ("overflowing_float", "1E400", {}),
    ("negative_overflow", "[-1e400]", {}),
    ("nan", "NaN", {}),
    ("infinity", "Infinity", {}),
    ("int_4300_digits", "9" * 4300, {}),
    ("int_4301_digits", "9" * 4301, {}),
    ("lone_surrogate", '"\\ud800"', {}),
    ("reversed_surrogates", '"\\udc00\\ud800"', {}),
    ("not_json", "text", {}),
    ("trailing_garbage", "[1] 2", {}),
    ("longest_stored_text", json.dumps("x" * 65533), {}),
    ("stored_text_one_too_long", json.dumps("x" * 65534), {}),
    # 10923 characters, but 65540 once Airflow escapes each as \u00e9.
    ("non_ascii_stored_too_long", json.dumps("é" * 10923, ensure_ascii=False), {}),
    ("limit_disabled", json.dumps("x" * 70000), {"AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES": "0"}),
    # Airflow's JSON parser (pydantic's) stops at 200 levels, counting the `{"value": …}` around
    # the value: an element may sit inside at most 199 containers of the value.
    ("list_depth_200", _nested(200, "list"), {}),
    ("list_depth_200_with_a_leaf", "[" * 200 + "1" + "]" * 200, {}),
    ("list_depth_201", _nested(201, "list"), {}),
    ("object_depth_199", _nested(199, "object"), {}),
    ("object_depth_200", _nested(200, "object"), {}),
    ("list_depth_500", _nested(500, "list"), {}),
]


@pytest.mark.parametrize(("case", "text", "env"), EDGES, ids=[c for c, _, _ in EDGES])
def test_accepts_what_airflow_accepts(case, text, env, task, airflow, state_store, monkeypatch) -> None:
    """A value is written exactly when Airflow's REST API would write it, as the same text, and
    a task can read back whatever was written. (`--allow-large` is the one deliberate way past
    Airflow's size check; it is not used here.)"""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    airflow_stores = airflow.rest_api_stores(text)
    result = state_store.run("set", "edge", "-", *task.args(), stdin=text, ok=False)
    stored = airflow.get(task, "edge")
    problems = []
    if stored is not None:
        try:
            if airflow.task_reads(task, "edge") != json.loads(stored):
                problems.append("a task reads another value back")
        except ValueError as e:
            reason = str(e).splitlines()[1].strip()
            problems.append(f"a task cannot read the stored value back ({reason[:120]})")
    if airflow_stores is None and (result.code != 2 or stored is not None):
        problems.append(f"Airflow's REST API refuses this value, but `state-store set` exited {result.code}")
    if airflow_stores is not None and (result.code != 0 or stored != airflow_stores):
        problems.append(f"Airflow's REST API stores this value, but `state-store set` exited {result.code}: {result.stderr}")
    assert not problems, "; ".join(problems)


# ── keys ─────────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(("case", "key"), cases.KEYS, ids=[c for c, _ in cases.KEYS])
def test_key(case, key, task, airflow, state_store) -> None:
    state_store.run("set", key, '"v"', *task.args())
    assert airflow.get(task, key) == '"v"'
    assert airflow.task_keys(task) == [key]

    asset = airflow.add_asset()
    state_store.run("set", key, "[1]", "--asset-id", str(asset.id))
    assert airflow.get(asset, key) == "[1]"
    assert airflow.asset_rows([asset.id]) == {(asset.id, key)}


def test_astral_key_behaves_as_in_airflow(task, airflow, state_store, dialect) -> None:
    """A key above U+FFFF: stored where Airflow stores it; refused where Airflow's write fails
    (MySQL's key column is utf8mb3, which has no four-byte characters)."""
    key = "emoji-😀"
    ours, theirs = task.sibling("ours"), task.sibling("airflow")
    result = state_store.run("set", key, "1", *ours.args(), ok=False)
    try:
        airflow.backend_set(theirs, key, "1", None)
        airflow_stored = True
    except Exception:  # the driver's own error type differs per dialect
        airflow_stored = False
    assert (result.code == 0) == airflow_stored, result
    assert airflow.task_keys(ours) == airflow.task_keys(theirs)
    if dialect != "mysql":
        assert airflow_stored and airflow.get(ours, key) == "1"


def test_map_index(task, airflow, state_store) -> None:
    airflow.add_task_instance(task.sibling("mapped"), -1, 0, 1, 2, 7)
    for map_index in (-1, 0, 1, 7):
        state_store.run("set", "k", json.dumps(map_index), *task.sibling("mapped", map_index).args())
    for map_index in (-1, 0, 1, 7):
        assert airflow.get(task.sibling("mapped", map_index), "k") == json.dumps(map_index)
    assert airflow.get(task.sibling("mapped", 2), "k") is None


# ── expiry ───────────────────────────────────────────────────────────────────────────────────

RETENTIONS = [
    ("90s", dt.timedelta(seconds=90)),
    ("15m", dt.timedelta(minutes=15)),
    ("6h", dt.timedelta(hours=6)),
    ("1h30m", dt.timedelta(hours=1, minutes=30)),
    ("7d", dt.timedelta(days=7)),
    ("2w", dt.timedelta(weeks=2)),
]


@pytest.mark.parametrize(("flag", "retention"), RETENTIONS, ids=[f for f, _ in RETENTIONS])
def test_explicit_retention(flag, retention, task, airflow, state_store, dialect) -> None:
    ours, theirs = task.sibling("ours"), task.sibling("airflow")
    t0 = utcnow()
    state_store.run("set", "k", '{"a": 0.1}', *ours.args(), "--retention", flag)
    t1 = utcnow()
    airflow.worker_set(theirs, "k", {"a": 0.1}, retention=retention)
    t2 = utcnow()
    row = assert_same_stored_form(airflow, ours, theirs, "k", dialect)
    assert between(row["expires_at"], t0 + retention, t1 + retention)
    assert between(airflow.task_row(theirs, "k")["expires_at"], t1 + retention, t2 + retention)


def test_never_expiring(task, airflow, state_store, dialect) -> None:
    ours, theirs = task.sibling("ours"), task.sibling("airflow")
    state_store.run("set", "k", "1", *ours.args(), "--retention", "never")
    airflow.worker_set(theirs, "k", 1, retention=airflow.never_expire())
    assert_same_stored_form(airflow, ours, theirs, "k", dialect)
    assert airflow.task_row(ours, "k")["expires_at"] is None
    assert airflow.task_row(theirs, "k")["expires_at"] is None


EXPIRES_AT = [
    ("utc", "2031-05-06T07:08:09.123456Z", dt.datetime(2031, 5, 6, 7, 8, 9, 123456, dt.timezone.utc)),
    ("offset", "2031-05-06T09:08:09.5+02:00", dt.datetime(2031, 5, 6, 7, 8, 9, 500000, dt.timezone.utc)),
    ("whole_seconds", "2030-01-01T00:00:00Z", dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)),
    ("date", "2030-02-03", dt.datetime(2030, 2, 3, tzinfo=dt.timezone.utc)),
    ("past", "2020-02-29T23:59:59.999999Z", dt.datetime(2020, 2, 29, 23, 59, 59, 999999, dt.timezone.utc)),
]


@pytest.mark.parametrize(("case", "flag", "instant"), EXPIRES_AT, ids=[c for c, _, _ in EXPIRES_AT])
def test_explicit_expiry_instant(case, flag, instant, task, airflow, state_store, dialect) -> None:
    """An instant given to us and the same instant given to Airflow's REST API (`expires_at`)
    are stored identically, down to the raw value."""
    ours, theirs = task.sibling("ours"), task.sibling("airflow")
    state_store.run("set", "k", '"v"', *ours.args(), "--expires-at", flag)
    airflow.backend_set(theirs, "k", json.dumps("v"), instant)
    assert_same_stored_form(airflow, ours, theirs, "k", dialect)
    assert airflow.task_row(ours, "k")["expires_at"] == instant
    raw = airflow.raw_task_row(airflow.task_row(ours, "k")["id"])["expires_at"]
    assert raw == airflow.raw_task_row(airflow.task_row(theirs, "k")["id"])["expires_at"]


#: Instants at and beyond the ends of MySQL's TIMESTAMP (1970-01-01 00:00:01 to 2038-01-19
#: 03:14:07.999999 UTC); SQLite and PostgreSQL hold them all.
RANGE_EDGES = [
    ("2038_last_instant", "2038-01-19T03:14:07.999999Z"),
    ("2038_one_past", "2038-01-19T03:14:08Z"),
    ("2040", "2040-01-01T00:00:00Z"),
    ("1970_first_second", "1970-01-01T00:00:01Z"),
    ("1970_epoch", "1970-01-01T00:00:00Z"),
    ("1960", "1960-06-01T12:00:00Z"),
]


@pytest.mark.parametrize(("case", "flag"), RANGE_EDGES, ids=[c for c, _ in RANGE_EDGES])
def test_expiry_at_the_ends_of_the_timestamp_range(case, flag, task, airflow, state_store, dialect) -> None:
    """Whatever Airflow does with such an expiry (store it, or fail), we do the same, and a
    refused write leaves nothing behind."""
    ours, theirs = task.sibling("ours"), task.sibling("airflow")
    instant = support.parse_iso(flag)
    result = state_store.run("set", "k", "1", *ours.args(), "--expires-at", flag, ok=False)
    try:
        airflow.backend_set(theirs, "k", "1", instant)
        airflow_stored = True
    except Exception:  # MySQL: "Incorrect datetime value"
        airflow_stored = False
    assert (result.code == 0) == airflow_stored, result
    if airflow_stored:
        assert airflow.task_row(ours, "k")["expires_at"] == instant
        assert_same_stored_form(airflow, ours, theirs, "k", dialect)
    else:
        assert airflow.task_row(ours, "k") is None
    if dialect != "mysql":
        assert airflow_stored


@pytest.mark.parametrize("days", [3, 0])
def test_default_retention_days_from_configuration(days, retention_days, task, airflow, state_store, dialect) -> None:
    retention_days(days)
    ours, theirs = task.sibling("ours"), task.sibling("airflow")
    low = airflow.default_expires_at()
    state_store.run("set", "k", "1", *ours.args())
    high = airflow.default_expires_at()
    airflow.worker_set(theirs, "k", 1)
    assert_same_stored_form(airflow, ours, theirs, "k", dialect)
    expires_at = airflow.task_row(ours, "k")["expires_at"]
    if days == 0:
        assert low is None and expires_at is None
    else:
        assert between(expires_at, low, high)
        assert dt.timedelta(days=days) - dt.timedelta(seconds=60) < expires_at - utcnow() <= dt.timedelta(days=days)


def test_negative_default_retention_days_is_refused_as_by_airflow(retention_days, task, airflow, state_store) -> None:
    retention_days(-1)
    result = state_store.run("set", "k", "1", *task.args(), ok=False)
    assert result.code != 0 and "default_retention_days" in result.stderr, result
    with pytest.raises(ValueError, match="default_retention_days must be >= 0"):
        airflow.worker_set(task.sibling("airflow"), "k", 1)
    assert airflow.task_row(task, "k") is None


def test_overwrite_without_retention_resets_expiry(task, airflow, state_store, dialect) -> None:
    ours, theirs = task.sibling("ours"), task.sibling("airflow")
    state_store.run("set", "k", "1", *ours.args(), "--retention", "never")
    airflow.worker_set(theirs, "k", 1, retention=airflow.never_expire())
    low = airflow.default_expires_at()
    state_store.run("set", "k", "2", *ours.args())
    high = airflow.default_expires_at()
    airflow.worker_set(theirs, "k", 2)
    row = assert_same_stored_form(airflow, ours, theirs, "k", dialect)
    assert row["value"] == "2"
    assert between(row["expires_at"], low, high)
    assert airflow.task_row(theirs, "k")["expires_at"] is not None


def test_write_without_dag_run_fails_as_in_airflow(airflow, state_store) -> None:
    ghost = Task(support.unique("no_such_dag"), "manual__nothing", "t")
    result = state_store.run("set", "k", "1", *ghost.args(), ok=False)
    assert result.code == 1 and "dag run" in result.stderr.lower(), result
    with pytest.raises(Exception, match="No DagRun found"):
        airflow.backend_set(ghost, "k", "1", None)


def test_overwrite_updates_airflow_row_in_place(task, airflow, state_store) -> None:
    """The upsert's conflict target is Airflow's unique key: overwriting a key a task wrote
    updates that row (same id), as Airflow's own upsert does."""
    airflow.worker_set(task, "k", "from a task")
    before = airflow.task_row(task, "k")
    state_store.run("set", "k", '"from state-store"', *task.args())
    after = airflow.task_row(task, "k")
    assert after["id"] == before["id"] and after["dag_run_id"] == before["dag_run_id"]
    assert after["value"] == '"from state-store"' and after["updated_at"] > before["updated_at"]


def test_keys_the_database_compares_as_equal(task, airflow, state_store) -> None:
    """The same writes, ours on one task and Airflow's on its twin, leave the same rows, and
    each key reads back the same value, whatever the database's collation makes of them."""
    ours, theirs = task.sibling("ours"), task.sibling("airflow")
    ours_asset, theirs_asset = airflow.add_asset(), airflow.add_asset()
    for n, key in enumerate(cases.NEAR_KEYS):
        state_store.run("set", key, str(n), *ours.args())
        airflow.worker_set(theirs, key, n)
        state_store.run("set", key, str(n), "--asset-id", str(ours_asset.id))
        airflow.asset_set(theirs_asset, key, n)
    assert airflow.task_keys(ours) == airflow.task_keys(theirs)
    assert {k for _, k in airflow.asset_rows([ours_asset.id])} == {k for _, k in airflow.asset_rows([theirs_asset.id])}
    for key in cases.NEAR_KEYS:
        assert airflow.get(ours, key) == airflow.get(theirs, key), key
        assert airflow.get(ours_asset, key) == airflow.get(theirs_asset, key), key
        got = state_store.run("get", key, *ours.args(), "-o", "json", ok=False)
        expected = airflow.get(theirs, key)
        assert (got.code == 0) == (expected is not None), key
        if expected is not None:
            assert json.dumps(got.json()["value"]) == expected, key


def test_time_zones_do_not_matter(task, airflow, state_store, dialect, metastore, monkeypatch) -> None:
    """Instants are UTC whatever the local time zone of our process (TZ) and, on PostgreSQL,
    the session time zone the database hands out."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    if dialect == "postgres":
        from sqlalchemy.engine import make_url

        database = make_url(metastore).database
        airflow_engine_statement(airflow, f"ALTER DATABASE \"{database}\" SET timezone TO 'America/St_Johns'")
    try:
        ours, theirs = task.sibling("ours"), task.sibling("airflow")
        instant = dt.datetime(2031, 5, 6, 7, 8, 9, 123456, dt.timezone.utc)
        state_store.run("set", "k", "1", *ours.args(), "--expires-at", support.iso(instant))
        assert airflow.task_row(ours, "k")["expires_at"] == instant
        t0 = utcnow()
        state_store.run("set", "r", "1", *ours.args(), "--retention", "1h")
        t1 = utcnow()
        row = airflow.task_row(ours, "r")
        assert between(row["updated_at"], t0, t1) and between(row["expires_at"], t0 + dt.timedelta(hours=1), t1 + dt.timedelta(hours=1))

        airflow.backend_set(theirs, "k", "1", instant)
        got = state_store.json("get", "k", *theirs.args())
        assert got["expires_at"] == support.iso(instant)
        assert got["updated_at"] == support.iso(airflow.task_row(theirs, "k")["updated_at"])

        # An hour either side of now: a clock or zone error of an hour or more misfiles one of them.
        airflow.backend_set(theirs, "expired", "1", utcnow() - dt.timedelta(hours=1))
        airflow.backend_set(theirs, "current", "1", utcnow() + dt.timedelta(hours=1))
        expired = {e["key"] for e in state_store.json("list", *theirs.args(), "--expired")}
        assert expired == {"expired"}
    finally:
        if dialect == "postgres":
            airflow_engine_statement(airflow, f'ALTER DATABASE "{database}" RESET timezone')


def airflow_engine_statement(airflow: support.Airflow, sql: str) -> None:
    from sqlalchemy import text

    with airflow.session() as s:
        s.execute(text(sql))


def test_scope_ids_the_database_compares_as_equal(airflow, state_store) -> None:
    """`--dag-id "dag "` on MySQL finds the dag run "dag" (PAD SPACE), as Airflow's lookup
    does, and the row keeps the id as given; elsewhere both fail with no dag run."""
    ours, theirs = airflow.add_dag_run(), airflow.add_dag_run()
    padded_ours = Task(ours.dag_id + " ", ours.run_id, ours.task_id)
    padded_theirs = Task(theirs.dag_id + " ", theirs.run_id, theirs.task_id)
    result = state_store.run("set", "k", "1", *padded_ours.args(), ok=False)
    try:
        airflow.backend_set(padded_theirs, "k", "1", None)
        airflow_stored = True
    except Exception:  # DagRunNotFound
        airflow_stored = False
    assert (result.code == 0) == airflow_stored, result
    ours_rows = {(k, v["value"]) for k, v in airflow.task_rows_of_dag(padded_ours.dag_id).items()}
    theirs_rows = {(k, v["value"]) for k, v in airflow.task_rows_of_dag(padded_theirs.dag_id).items()}
    assert ours_rows == theirs_rows
    if airflow_stored:
        assert airflow.get(padded_ours, "k") == "1"


def test_writes_need_the_task_instance_airflow_s_api_needs(airflow, state_store) -> None:
    """A set, delete or clear goes through exactly where Airflow's REST API lets it through
    (`_require_task_instance`), and is refused with exit 1 where the API answers 404 "Task
    instance not found"; a refused command writes nothing."""
    run = airflow.add_dag_run()
    airflow.add_task_instance(run.sibling("mapped"), 0, 1, 2)
    scopes = [
        run,
        run.sibling("extract", 0),
        run.sibling("mapped", 1),
        run.sibling("mapped", -1),
        run.sibling("mapped", 3),
        run.sibling("missing", -1),
    ]
    for scope in scopes:
        for args, all_map_indices in [
            (("set", "k", "1", *scope.args()), False),
            (("delete", "k", *scope.args()), False),
            (("clear", "--yes", *scope.args()), False),
            (("clear", "--yes", "--all-map-indices", *scope.args()[:-2]), True),
        ]:
            allowed = airflow.rest_api_finds_task_instance(scope, all_map_indices)
            before = airflow.task_rows_of_dag(run.dag_id)
            result = state_store.run(*args, ok=False)
            if allowed:
                assert result.code == 0, result
            else:
                assert result.code == 1, result
                assert "task instance not found" in result.stderr or "no task instance of" in result.stderr, result
                assert airflow.task_rows_of_dag(run.dag_id) == before, result
