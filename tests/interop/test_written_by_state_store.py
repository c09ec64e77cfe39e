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
    assert json.loads(stored) == json.loads(text)

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


def test_expiry_after_2038(task, airflow, state_store, dialect) -> None:
    """MySQL's TIMESTAMP ends in January 2038: whatever Airflow does with a later expiry (store
    it, or fail), we do the same, and a refused write leaves nothing behind."""
    ours, theirs = task.sibling("ours"), task.sibling("airflow")
    instant = dt.datetime(2040, 1, 1, tzinfo=dt.timezone.utc)
    result = state_store.run("set", "k", "1", *ours.args(), "--expires-at", "2040-01-01T00:00:00Z", ok=False)
    try:
        airflow.backend_set(theirs, "k", "1", instant)
        airflow_stored = True
    except Exception:  # MySQL: "Incorrect datetime value"
        airflow_stored = False
    assert (result.code == 0) == airflow_stored, result
    if airflow_stored:
        assert airflow.task_row(ours, "k")["expires_at"] == instant
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
