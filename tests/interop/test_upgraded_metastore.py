"""A metastore upgraded to Airflow 3.3 from an earlier release (Alembic migration 0112), rather
than installed fresh: the same tables and keys, but the `key` columns are created without the
collation the models give them. On MySQL/MariaDB they are then in the database's default
character set (utf8mb4) and collation, so keys Airflow's fresh schema cannot hold (characters
above U+FFFF) are stored, and keys that differ only in case or accents are one key. Whatever
Airflow does there, the tool must do too."""

from __future__ import annotations

import json

import pytest

import cases
import support

KEYS = [key for _, key in cases.KEYS] + ["emoji-😀", "𝄞/clef", "Watermark", "watermark", "résumé", "resume"]


@pytest.fixture
def twins(upgraded):
    _, airflow, state_store = upgraded
    ours, theirs = airflow.add_dag_run(), airflow.add_dag_run()
    return airflow, state_store, ours, theirs


def test_the_tool_opens_an_upgraded_metastore(upgraded) -> None:
    _, _, state_store = upgraded
    assert state_store.json("list") == []
    assert state_store.json("clean", "--dry-run")["task_rows_to_delete"] == 0


def test_writes_of_ours_leave_what_airflow_leaves(twins) -> None:
    """The same sequence of writes, ours on one dag run and Airflow's on its twin."""
    airflow, state_store, ours, theirs = twins
    ours_asset, theirs_asset = airflow.add_asset(), airflow.add_asset()
    problems = []
    for n, key in enumerate(KEYS + cases.NEAR_KEYS):
        result = state_store.run("set", key, str(n), *ours.args(), ok=False)
        asset_result = state_store.run("set", key, str(n), "--asset-id", str(ours_asset.id), ok=False)
        try:
            airflow.worker_set(theirs, key, n)
            airflow.asset_set(theirs_asset, key, n)
            airflow_stored = True
        except Exception:  # a key the column cannot hold
            airflow_stored = False
        if (result.code == 0) != airflow_stored or (asset_result.code == 0) != airflow_stored:
            problems.append(f"key {key!r}: Airflow {'stores' if airflow_stored else 'refuses'} it, `set` exited {result.code}: {result.stderr.strip()}")
    if airflow.task_keys(ours) != airflow.task_keys(theirs):
        problems.append(f"task keys: ours {airflow.task_keys(ours)!r}, Airflow's {airflow.task_keys(theirs)!r}")
    listed = [e["key"] for e in state_store.json("list", *theirs.args(), "--limit", "1000")]
    expected = sorted(airflow.task_keys(theirs), key=lambda k: k.encode())
    if listed != expected:
        problems.append(f"`list` shows keys {listed!r}, Airflow's in byte order {expected!r}")
    for key in KEYS + cases.NEAR_KEYS:
        if airflow.get(ours, key) != airflow.get(theirs, key) or airflow.get(ours_asset, key) != airflow.get(theirs_asset, key):
            problems.append(f"key {key!r} reads {airflow.get(ours, key)!r}, Airflow's twin {airflow.get(theirs, key)!r}")
    assert not problems, "\n".join(problems)


def test_keys_airflow_wrote_are_read_and_deleted(twins) -> None:
    airflow, state_store, _, task = twins
    asset = airflow.add_asset()
    stored = []
    for key in KEYS:
        try:
            airflow.worker_set(task, key, {"key": key})
        except Exception:  # a key the column cannot hold
            continue
        airflow.asset_set(asset, key, key, kind="task", task=task)
        stored.append(key)
    assert stored, "Airflow stored no key at all"
    problems = []
    for key in stored:
        for scope in (task.args(), ["--asset-id", str(asset.id)]):
            got = state_store.run("get", key, *scope, "-o", "json", ok=False)
            if got.code != 0:
                problems.append(f"Airflow reads key {key!r} back, `state-store get` exits {got.code}: {got.stderr.strip()}")
            elif json.dumps(got.json()["value"]) != airflow.get(task if scope[0] == "--dag-id" else asset, key):
                problems.append(f"key {key!r}: `get` shows {got.json()['value']!r}")
    for key in stored:
        state_store.run("delete", key, *task.args())
        state_store.run("delete", key, "--asset-id", str(asset.id))
        if airflow.get(task, key) is not None or airflow.get(asset, key) is not None:
            problems.append(f"`state-store delete` left key {key!r}")
    assert not problems, "\n".join(problems)


def _differences(fresh: dict, upgraded: dict) -> list[str]:
    found = []
    for aspect in fresh:
        if aspect == "columns":
            for column in fresh["columns"]:
                if fresh["columns"][column] != upgraded["columns"].get(column):
                    found.append(f"column {column}: {fresh['columns'][column]} vs {upgraded['columns'].get(column)}")
        elif fresh[aspect] != upgraded[aspect]:
            found.append(f"{aspect}: {fresh[aspect]} vs {upgraded[aspect]}")
    return found


@pytest.mark.parametrize("table", ["task_state_store", "asset_state_store"])
def test_how_an_upgraded_schema_differs_from_a_fresh_one(table, upgraded, metastore, dialect) -> None:
    """What docs/compatibility.md says: the same tables, except that on MySQL the `key` column
    has the database's default collation instead of utf8mb3_bin."""
    differences = _differences(support.describe_table(metastore, table), support.describe_table(upgraded[0], table))
    if dialect == "mysql":
        assert len(differences) == 1 and differences[0].startswith("column key:"), differences
        assert "utf8mb3_bin" in differences[0].split(" vs ")[0] and "utf8mb3_bin" not in differences[0].split(" vs ")[1]
    else:
        assert differences == []
