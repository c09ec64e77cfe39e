"""Step 3: keys written by Airflow read back with `state-store get` and `list`.

Airflow writes through its own code (the task SDK for task keys, the REST API's and the
execution API's asset writes, or `MetastoreBackend` directly); our JSON output must then be
exactly the documented entry (docs/output.md) built from Airflow's own reading of the row: the
value `json.loads` of the stored text, printed as Python's `json.dumps(..., ensure_ascii=False)`
prints it, and the timestamps Airflow's model returns, in UTC with microseconds. `delete` and
`clear` must leave the same rows as Airflow's `delete` and `clear` on a twin scope.
"""

from __future__ import annotations

import datetime as dt
import json
import random

import pytest

import cases
import support
from support import Asset, Task, iso

#: What tasks store: every value of the other direction, and an offloaded value's reference.
VALUES = [(case, cases.python_value(text)) for case, text in cases.VALUES] + [
    ("offloaded_reference", {"__airflow_state_ref__": "s3://state/dag/run/task/-1/key"}),
]


def external_ref(stored: str):
    """The reference of a value a worker-side backend offloaded (docs/output.md): exactly
    `{"__airflow_state_ref__": "<ref>"}`; None for any other value."""
    value = json.loads(stored)
    if isinstance(value, dict) and list(value) == ["__airflow_state_ref__"] and isinstance(value["__airflow_state_ref__"], str):
        return value["__airflow_state_ref__"]
    return None


def task_entry(airflow: support.Airflow, task: Task, key: str) -> dict:
    row = airflow.task_row(task, key)
    return {
        "dag_id": task.dag_id,
        "run_id": task.run_id,
        "task_id": task.task_id,
        "map_index": task.map_index,
        "key": key,
        "value": json.loads(row["value"]),
        "external_ref": external_ref(row["value"]),
        "updated_at": iso(row["updated_at"]),
        "expires_at": iso(row["expires_at"]),
        # Expired by now, not cleaned yet: Airflow still returns such a row.
        "expired": row["expires_at"] is not None and row["expires_at"] < support.utcnow(),
    }


def asset_entry(airflow: support.Airflow, asset: Asset, key: str) -> dict:
    row = airflow.asset_row(asset, key)
    return {
        "asset_id": asset.id,
        "asset_name": asset.name,
        "asset_uri": asset.uri,
        "key": key,
        "value": json.loads(row["value"]),
        "external_ref": external_ref(row["value"]),
        "updated_at": iso(row["updated_at"]),
        "last_updated_by_kind": row["last_updated_by_kind"],
    }


def json_line(document) -> str:
    """How our binary prints JSON on a pipe (docs/output.md): one line, Python's separators,
    non-ASCII as is, floats as Python writes them, key order kept."""
    return json.dumps(document, ensure_ascii=False) + "\n"


@pytest.mark.parametrize(("case", "value"), VALUES, ids=[c for c, _ in VALUES])
def test_task_value(case, value, task, airflow, state_store) -> None:
    key = f"value/{case}"
    airflow.worker_set(task, key, value)
    entry = task_entry(airflow, task, key)

    got = state_store.run("get", key, *task.args(), "-o", "json")
    assert got.stdout == json_line(entry)
    assert got.json() == entry
    listed = state_store.run("list", *task.args(), "-o", "json")
    assert listed.stdout == json_line([entry])

    plain = state_store.run("get", key, *task.args(), "-o", "plain").stdout
    expected_plain = entry["value"] if isinstance(entry["value"], str) else json.dumps(entry["value"], ensure_ascii=False, separators=(",", ":"))
    if isinstance(entry["value"], str):
        assert plain == expected_plain + "\n"
    else:
        assert json.loads(plain) == entry["value"]


@pytest.mark.parametrize(("case", "value"), VALUES, ids=[c for c, _ in VALUES])
def test_asset_value(case, value, task, airflow, state_store) -> None:
    key = f"value/{case}"
    asset = airflow.add_asset()
    airflow.asset_set(asset, key, value, kind="task", task=task)
    entry = asset_entry(airflow, asset, key)
    for selector in (["--asset", asset.name], ["--asset-uri", asset.uri], ["--asset-id", str(asset.id)]):
        got = state_store.run("get", key, *selector, "-o", "json")
        assert got.stdout == json_line(entry), selector
    assert state_store.run("list", "--asset-id", str(asset.id), "-o", "json").stdout == json_line([entry])


@pytest.mark.parametrize("kind", ["task", "watcher", "api", None])
def test_asset_writer_kind(kind, task, airflow, state_store) -> None:
    asset = airflow.add_asset()
    airflow.asset_set(asset, "watermark", "2026-11-29T00:00:00Z", kind=kind, task=task if kind == "task" else None)
    got = state_store.json("get", "watermark", "--asset-id", str(asset.id))
    assert got == asset_entry(airflow, asset, "watermark")
    assert got["last_updated_by_kind"] == kind


@pytest.mark.parametrize(("case", "key"), cases.KEYS, ids=[c for c, _ in cases.KEYS])
def test_key(case, key, task, airflow, state_store) -> None:
    airflow.worker_set(task, key, [case])
    assert state_store.json("get", key, *task.args())["value"] == [case]
    assert [e["key"] for e in state_store.json("list", *task.args())] == [key]
    plain = state_store.run("list", *task.args(), "-o", "plain").stdout
    assert plain.count("\n") == 1 and plain.endswith("\n"), plain
    assert support.plain_fields(plain[:-1]) == [
        task.dag_id, task.run_id, task.task_id, str(task.map_index), key, json.dumps([case], ensure_ascii=False)
    ], plain

    asset = airflow.add_asset()
    airflow.asset_set(asset, key, case, kind="api")
    assert state_store.json("get", key, "--asset", asset.name)["value"] == case


def test_list_order_and_paging_match_airflow(task, airflow, state_store) -> None:
    """`list` shows exactly the keys Airflow's REST API lists, in byte order on every database
    (a deliberate difference: Airflow sorts in the database's own collation, which differs
    between dialects and servers), and pages through that order."""
    keys = ["b", "B", "a", "A", "_x", "a b", "a/b", "a-b", "aa", "é", "z", "Z", "10", "9", "ä", "~", " lead", "a\tb"]
    random.Random(7).shuffle(keys)
    for key in keys:
        airflow.worker_set(task, key, key)
    airflow_keys = airflow.task_keys(task)
    expected = sorted(airflow_keys, key=lambda k: k.encode())
    listed = [e["key"] for e in state_store.json("list", *task.args())]
    assert sorted(listed) == sorted(airflow_keys), f"`list` shows {listed}, Airflow's REST API {airflow_keys}"
    assert listed == expected, f"`list` orders keys {listed}, byte order is {expected}"
    assert [e["key"] for e in state_store.json("list", *task.args(), "--limit", "5", "--offset", "5")] == expected[5:10]
    assert [e["key"] for e in state_store.json("list", "--dag-id", task.dag_id)] == expected


def test_list_without_a_limit_lists_every_key(task, airflow, state_store) -> None:
    """Off a terminal `list` has no limit, and `--limit 0` is documented as "no limit": every
    key Airflow wrote, more than a terminal's page of 100; `--limit N` stops at N."""
    keys = [f"k{n:03d}" for n in range(120)]
    for key in keys:
        airflow.backend_set(task, key, "1", None)
    listed = [e["key"] for e in state_store.json("list", *task.args())]
    assert listed == keys, f"`list` off a terminal printed {len(listed)} of {len(keys)} keys"
    listed = [e["key"] for e in state_store.json("list", *task.args(), "--limit", "0")]
    assert listed == keys, f"`list --limit 0` printed {len(listed)} of {len(keys)} keys"
    limited = [e["key"] for e in state_store.json("list", *task.args(), "--limit", "100")]
    assert limited == keys[:100]


def test_expired_keys_are_still_read_until_cleaned(task, airflow, state_store) -> None:
    """Airflow 3.3 returns expired rows until a cleanup removes them, and so does `get`;
    `list --expired` shows exactly the rows Airflow's clean would delete."""
    past = support.utcnow() - dt.timedelta(hours=1)
    airflow.backend_set(task, "old", json.dumps("stale"), past)
    airflow.backend_set(task, "fresh", json.dumps("new"), support.utcnow() + dt.timedelta(hours=1))
    airflow.backend_set(task, "forever", json.dumps("kept"), None)
    assert airflow.get(task, "old") == '"stale"'
    assert state_store.json("get", "old", *task.args())["value"] == "stale"
    expired = {e["key"] for e in state_store.json("list", "--dag-id", task.dag_id, "--expired")}
    airflow_expired = {key for dag_id, _, _, _, key in airflow.expired_summary() if dag_id == task.dag_id}
    assert expired == airflow_expired == {"old"}


def test_missing_key_is_not_found_in_both(task, airflow, state_store) -> None:
    assert airflow.get(task, "nothing") is None
    result = state_store.run("get", "nothing", *task.args(), ok=False)
    assert result.code == 1, result


# ── delete and clear, against Airflow's own on a twin ─────────────────────────────────────────


def _populate(airflow: support.Airflow, run: Task) -> None:
    for task_id in ("t1", "t2"):
        airflow.add_task_instance(run.sibling(task_id), -1, 0, 1, 2)
        for map_index in (-1, 0, 1, 2):
            for key in ("k1", "k2"):
                airflow.worker_set(run.sibling(task_id, map_index), key, [task_id, map_index, key])


def _task_rows(airflow: support.Airflow, run: Task) -> set:
    return set(airflow.task_rows_of_dag(run.dag_id))


def test_delete_and_clear_leave_what_airflow_leaves(airflow, state_store) -> None:
    ours, theirs = airflow.add_dag_run(), airflow.add_dag_run()
    _populate(airflow, ours)
    _populate(airflow, theirs)
    steps = [
        (("delete", "k1", *ours.sibling("t1").args()), lambda: airflow.delete(theirs.sibling("t1"), "k1")),
        (("delete", "missing", *ours.sibling("t1").args()), lambda: airflow.delete(theirs.sibling("t1"), "missing")),
        (("clear", "--yes", *ours.sibling("t1", 1).args()), lambda: airflow.clear(theirs.sibling("t1", 1))),
        (
            ("clear", "--yes", "--all-map-indices", *ours.sibling("t2").args()[:-2]),
            lambda: airflow.clear(theirs.sibling("t2"), all_map_indices=True),
        ),
    ]
    for args, airflow_step in steps:
        state_store.run(*args)
        airflow_step()
        assert _task_rows(airflow, ours) == _task_rows(airflow, theirs), args


def test_asset_delete_and_clear_leave_what_airflow_leaves(task, airflow, state_store) -> None:
    ours, theirs = airflow.add_asset(), airflow.add_asset()
    for asset in (ours, theirs):
        for key in ("k1", "k2", "k3"):
            airflow.asset_set(asset, key, key, kind="task", task=task)
    steps = [
        (("delete", "k1", "--asset", ours.name), lambda: airflow.delete(theirs, "k1")),
        (("delete", "nope", "--asset-id", str(ours.id)), lambda: airflow.delete(theirs, "nope")),
        (("clear", "--yes", "--asset-uri", ours.uri), lambda: airflow.clear(theirs)),
    ]
    for args, airflow_step in steps:
        state_store.run(*args)
        airflow_step()
        assert {k for _, k in airflow.asset_rows([ours.id])} == {k for _, k in airflow.asset_rows([theirs.id])}, args


def test_asset_lookup_by_name_and_uri_matches_airflow(task, airflow, state_store) -> None:
    """`--asset NAME` and `--asset-uri URI` find the asset a task's name or uri finds
    (the execution API's resolvers): the active one among historical rows, or none."""
    from airflow.api_fastapi.execution_api.routes.asset_state_store import (
        _resolve_asset_id_by_name,
        _resolve_asset_id_by_uri,
    )
    from fastapi import HTTPException

    tag = support.unique("lookup")
    old = airflow.add_asset(f"{tag}_n", f"s3://{tag}/u1/", active=False)
    current = airflow.add_asset(f"{tag}_n", f"s3://{tag}/u2/")
    other = airflow.add_asset(f"{tag}_m", f"s3://{tag}/u1/")
    gone = airflow.add_asset(f"{tag}_gone", f"s3://{tag}/gone/", active=False)
    for asset in (old, current, other, gone):
        airflow.asset_set(asset, "k", asset.id, kind="task", task=task)

    def airflow_finds(resolve, value):
        with airflow.session() as s:
            try:
                return resolve(value, s)
            except HTTPException:
                return None

    for flag, resolve, value in [
        ("--asset", _resolve_asset_id_by_name, current.name),
        ("--asset-uri", _resolve_asset_id_by_uri, old.uri),
        ("--asset", _resolve_asset_id_by_name, gone.name),
        ("--asset-uri", _resolve_asset_id_by_uri, gone.uri),
        # MySQL's latin1_general_cs ignores trailing blanks but not case; others compare exactly.
        ("--asset", _resolve_asset_id_by_name, current.name + " "),
        ("--asset", _resolve_asset_id_by_name, current.name.upper()),
        ("--asset-uri", _resolve_asset_id_by_uri, old.uri + " "),
    ]:
        expected = airflow_finds(resolve, value)
        got = state_store.run("get", "k", flag, value, "-o", "json", ok=False)
        if expected is None:
            assert got.code == 1, got
        else:
            assert got.code == 0 and got.json()["asset_id"] == expected, (flag, value, got)


def test_keys_longer_than_512_characters(task, airflow, state_store, dialect) -> None:
    """The key column is VARCHAR(512), which SQLite does not enforce: there Airflow stores a
    longer key, and the tool must still read and delete it. Where the database refuses it,
    Airflow's write fails, and so does ours."""
    key = "k" * 600
    try:
        airflow.backend_set(task, key, "1", None)
        airflow_stored = True
    except Exception:  # PostgreSQL and MySQL: value too long for the column
        airflow_stored = False
    assert airflow_stored == (dialect == "sqlite")
    if airflow_stored:
        got = state_store.run("get", key, *task.args(), "-o", "json", ok=False)
        assert got.code == 0 and got.json()["value"] == 1, f"a key Airflow stored cannot be read: {got!r}"
        state_store.run("delete", key, *task.args())
        assert airflow.get(task, key) is None
    else:
        result = state_store.run("set", key, "1", *task.sibling("ours").args(), ok=False)
        assert result.code != 0 and airflow.task_row(task.sibling("ours"), key) is None
