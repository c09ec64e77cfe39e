"""Step 4: garbage collection, both ways.

Rows we wrote are removed by Airflow's own `airflow state-store clean` exactly when they have
expired, and rows Airflow wrote are removed by `state-store clean` exactly when they have
expired; rows that never expire stay. Orphaned asset rows are those the scheduler's orphan sweep
deletes (`asset_id NOT IN` the ids of assets with an `asset_active` row of the same name AND
uri), no more and no less. Each cleanup is global, so every assertion looks at this test's own
dag runs and assets only.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import textwrap

import support
from support import Task, utcnow

AHEAD = dt.timedelta(minutes=20)


def _keys(rows: dict) -> set[tuple[str, int, str]]:
    return set(rows)


def _airflow_dry_run_keys(stdout: str, dag_id: str) -> set[tuple[str, int, str]]:
    """The rows `airflow state-store clean --dry-run` lists for one dag."""
    line = re.compile(r"^\s*Dag '(.*)', run '(.*)', task '(.*)', map_index (-?\d+), key '(.*)'$")
    found = set()
    for text in stdout.splitlines():
        m = line.match(text)
        if m and m.group(1) == dag_id:
            found.add((m.group(3), int(m.group(4)), m.group(5)))
    return found


def test_airflow_clean_removes_our_rows_exactly_when_expired(airflow, state_store) -> None:
    run = airflow.add_dag_run()
    now = utcnow()
    expired = {
        ("t", -1, "a_day_ago"): ["--expires-at", support.iso(now - dt.timedelta(days=1))],
        ("t", -1, "seconds_ago"): ["--expires-at", support.iso(now - dt.timedelta(seconds=3))],
        # Same instant, written with an offset: stored in UTC, so compared correctly.
        ("t", 3, "offset_form"): [
            "--expires-at",
            (now - dt.timedelta(seconds=3)).astimezone(dt.timezone(dt.timedelta(hours=5, minutes=30))).isoformat(),
        ],
        ("t", -1, "short_retention"): ["--retention", "1s"],
        ("u", -1, "long_ago"): ["--expires-at", "2001-09-09T01:46:40Z"],
    }
    kept = {
        ("t", -1, "later_today"): ["--expires-at", support.iso(now + AHEAD)],
        ("t", -1, "six_hours"): ["--retention", "6h"],
        ("t", 3, "default"): [],
        ("t", -1, "never"): ["--retention", "never"],
        ("u", 0, "never"): ["--retention", "never"],
    }
    for task_id, map_index in {(t, m) for t, m, _ in {**expired, **kept}}:
        airflow.add_task_instance(run.sibling(task_id, map_index))
    for (task_id, map_index, key), flags in {**expired, **kept}.items():
        state_store.run("set", key, json.dumps({"k": key}), *run.sibling(task_id, map_index).args(), *flags)
    asset = airflow.add_asset()
    state_store.run("set", "mine", "1", "--asset-id", str(asset.id))
    # From after the last write: on a loaded machine the writes themselves can take seconds.
    support.wait_until_past(utcnow() + dt.timedelta(seconds=1, milliseconds=100))

    dry = support.airflow_cli("state-store", "clean", "--dry-run")
    assert _airflow_dry_run_keys(dry.stdout, run.dag_id) == set(expired), dry.stdout
    assert _keys(airflow.task_rows_of_dag(run.dag_id)) == set(expired) | set(kept), "the dry run deleted rows"

    support.airflow_cli("state-store", "clean")
    assert _keys(airflow.task_rows_of_dag(run.dag_id)) == set(kept)
    assert airflow.asset_rows([asset.id]) == {(asset.id, "mine")}, "asset rows never expire"


def test_state_store_clean_removes_airflow_rows_exactly_when_expired(airflow, state_store) -> None:
    run = airflow.add_dag_run()
    now = utcnow()
    rest_api = {  # the REST API's explicit `expires_at`
        ("t", -1, "a_day_ago"): now - dt.timedelta(days=1),
        ("t", -1, "seconds_ago"): now - dt.timedelta(seconds=3),
        ("t", 2, "long_ago"): dt.datetime(2001, 9, 9, 1, 46, 40, tzinfo=dt.timezone.utc),
        ("t", -1, "later_today"): now + AHEAD,
        ("t", -1, "never"): None,
        ("u", 1, "never"): None,
    }
    for (task_id, map_index, key), expires_at in rest_api.items():
        airflow.backend_set(run.sibling(task_id, map_index), key, json.dumps(key), expires_at)
    worker = {  # a task's `task_state_store.set(..., retention=...)`
        ("w", -1, "short_retention"): dt.timedelta(seconds=1),
        ("w", -1, "six_hours"): dt.timedelta(hours=6),
        ("w", 5, "default"): None,
        ("w", -1, "never"): airflow.never_expire(),
    }
    for (task_id, map_index, key), retention in worker.items():
        airflow.worker_set(run.sibling(task_id, map_index), key, key, retention=retention)
    # From after the last write: on a loaded machine the writes themselves can take seconds.
    support.wait_until_past(utcnow() + dt.timedelta(seconds=1, milliseconds=100))

    expired = {("t", -1, "a_day_ago"), ("t", -1, "seconds_ago"), ("t", 2, "long_ago"), ("w", -1, "short_retention")}
    everything = set(rest_api) | set(worker)
    airflow_expired = {(t, m, k) for d, _, t, m, k in airflow.expired_summary() if d == run.dag_id}
    assert airflow_expired == expired

    dry = state_store.json("clean", "--dry-run", "--sample", "100000")
    assert {(e["task_id"], e["map_index"], e["key"]) for e in dry["sample"] if e["dag_id"] == run.dag_id} == expired
    assert {"dag_id": run.dag_id, "rows": len(expired)} in dry["expired_by_dag"]
    assert _keys(airflow.task_rows_of_dag(run.dag_id)) == everything, "the dry run deleted rows"

    summary = state_store.json("clean", "--batch-size", "2")
    assert summary["task_rows_deleted"] >= len(expired) and summary["stopped_by"] is None
    assert _keys(airflow.task_rows_of_dag(run.dag_id)) == everything - expired


def test_custom_backend_is_skipped_by_both(tmp_path, monkeypatch, airflow, state_store) -> None:
    """With another `[state_store] backend`, the state lives elsewhere: Airflow's clean and ours
    both leave the metastore alone and succeed."""
    run = airflow.add_dag_run()
    airflow.backend_set(run, "old", "1", utcnow() - dt.timedelta(days=1))
    (tmp_path / "interop_custom_backend.py").write_text(
        textwrap.dedent(
            """
            from airflow._shared.state import BaseStoreBackend


            class ElsewhereBackend(BaseStoreBackend):
                # State kept outside the metastore (in object storage, say).

                def _elsewhere(self, *args, **kwargs):
                    raise NotImplementedError("not needed by clean")

                get = set = delete = clear = aget = aset = adelete = aclear = _elsewhere
            """
        )
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__STATE_STORE__BACKEND", "interop_custom_backend.ElsewhereBackend")

    airflow_run = support.airflow_cli("state-store", "clean")
    assert "skipping" in airflow_run.stdout + airflow_run.stderr
    summary = state_store.json("clean")
    assert summary["task_rows_deleted"] == 0 and "skipped" in summary
    assert _keys(airflow.task_rows_of_dag(run.dag_id)) == {("extract", -1, "old")}


# ── orphaned asset rows ──────────────────────────────────────────────────────────────────────


def _asset_landscape(airflow: support.Airflow, state_store: support.StateStore, task: Task) -> dict[str, support.Asset]:
    """Assets in every state the orphan rule distinguishes, each with rows written by a task
    (through Airflow) and by us (while the asset was still active)."""
    tag = support.unique("landscape")
    assets = {
        "active": airflow.add_asset(f"{tag}_active", f"s3://{tag}/active/"),
        "deactivated": airflow.add_asset(f"{tag}_gone", f"s3://{tag}/gone/"),
        "renamed_old": airflow.add_asset(f"{tag}_old_name", f"s3://{tag}/same-uri/"),
        "new_uri_old": airflow.add_asset(f"{tag}_same_name", f"s3://{tag}/old-uri/"),
        "cross_name": airflow.add_asset(f"{tag}_p", f"s3://{tag}/p/"),
        "cross_uri": airflow.add_asset(f"{tag}_q", f"s3://{tag}/q/"),
    }
    for label, asset in assets.items():
        airflow.asset_set(asset, "by_task", label, kind="task", task=task)
        state_store.run("set", "by_state_store", json.dumps(label), "--asset-id", str(asset.id))
    # The scheduler deactivates assets no dag references any more, and activates their heirs.
    for label in ("deactivated", "renamed_old", "new_uri_old"):
        airflow.deactivate(assets[label])
    assets["renamed_new"] = airflow.add_asset(f"{tag}_new_name", f"s3://{tag}/same-uri/")
    assets["new_uri_new"] = airflow.add_asset(f"{tag}_same_name", f"s3://{tag}/new-uri/")
    # Its name is active (on cross_name) and its uri is active (on cross_uri), but never the pair.
    assets["crossed"] = airflow.add_asset(f"{tag}_p", f"s3://{tag}/q/", active=False)
    assets["never_active"] = airflow.add_asset(f"{tag}_never", f"s3://{tag}/never/", active=False)
    for label in ("renamed_new", "new_uri_new", "crossed", "never_active"):
        airflow.asset_set(assets[label], "by_task", label, kind="task", task=task)
        airflow.asset_set(assets[label], "by_api", label, kind="api")
    return assets


ORPHANED = {"deactivated", "renamed_old", "new_uri_old", "crossed", "never_active"}


def test_orphans_are_found_as_airflow_defines_them_and_our_clean_removes_them(task, airflow, state_store) -> None:
    assets = _asset_landscape(airflow, state_store, task)
    ids = [a.id for a in assets.values()]
    everything = airflow.asset_rows(ids)
    airflow_orphans = airflow.orphan_sweep_would_delete(ids)
    assert {a for a, _ in airflow_orphans} == {assets[label].id for label in ORPHANED}

    dry = state_store.json("clean", "--dry-run", "--sample", "100000")
    found = {(e["asset_id"], e["key"]) for e in dry["orphan_sample"] if e["asset_id"] in ids}
    assert found == airflow_orphans
    counts = {c["asset_id"]: c["rows"] for c in dry["orphans_by_asset"] if c["asset_id"] in ids}
    assert counts == {a: sum(1 for x, _ in airflow_orphans if x == a) for a, _ in airflow_orphans}
    assert airflow.asset_rows(ids) == everything, "the dry run deleted rows"

    state_store.json("clean")
    assert airflow.asset_rows(ids) == everything - airflow_orphans


def test_airflow_orphan_sweep_removes_the_orphans_we_wrote(task, airflow, state_store) -> None:
    assets = _asset_landscape(airflow, state_store, task)
    ids = [a.id for a in assets.values()]
    ours_before = {(a, k) for a, k in airflow.asset_rows(ids) if k == "by_state_store"}
    dry = state_store.json("clean", "--dry-run", "--sample", "100000")
    we_call_orphans = {(e["asset_id"], e["key"]) for e in dry["orphan_sample"] if e["asset_id"] in ids}

    airflow.orphan_sweep()
    left = airflow.asset_rows(ids)
    assert ours_before - left == {(a, k) for a, k in we_call_orphans if k == "by_state_store"}
    assert {a for a, k in ours_before - left} == {assets[label].id for label in ORPHANED if label in ("deactivated", "renamed_old", "new_uri_old")}
    assert not any(e["asset_id"] in ids for e in state_store.json("clean", "--dry-run", "--sample", "100000")["orphan_sample"])


def test_asset_rows_never_expire(task, airflow, state_store) -> None:
    """Time-based cleanup never touches asset rows."""
    asset = airflow.add_asset()
    airflow.asset_set(asset, "old", "x", kind="task", task=task)
    state_store.run("set", "mine", '"y"', "--asset-id", str(asset.id))
    state_store.run("clean")
    assert airflow.asset_rows([asset.id]) == {(asset.id, "old"), (asset.id, "mine")}


def test_metrics_file_is_read_by_prometheus_text_parser(state_store, tmp_path) -> None:
    """`clean --metrics-file` is Prometheus's text exposition format as Prometheus's own Python
    client parses it: every metric a gauge with its help, and a failed run keeps the time of the
    last successful one."""
    from prometheus_client.parser import text_string_to_metric_families

    def families() -> dict:
        text = path.read_text()
        return {f.name: f for f in text_string_to_metric_families(text)}

    def value(found: dict, name: str, **labels: str) -> float:
        (sample,) = [s for s in found[name].samples if s.labels == labels]
        return sample.value

    path = tmp_path / "state_store.prom"
    state_store.run("clean", "--metrics-file", path)
    found = families()
    assert sorted(found) == sorted(
        f"state_store_clean_{name}"
        for name in [
            "deleted_rows",
            "batches",
            "duration_seconds",
            "interrupted",
            "limit_reached",
            "exit_code",
            "skipped",
            "locked_rows_skipped",
            "backlog_rows",
            "last_run_timestamp_seconds",
            "last_success_timestamp_seconds",
        ]
    )
    assert {f.type for f in found.values()} == {"gauge"}
    assert all(f.documentation for f in found.values())
    assert value(found, "state_store_clean_exit_code") == 0
    assert value(found, "state_store_clean_skipped") == 0
    assert value(found, "state_store_clean_locked_rows_skipped", table="task_state_store") == 0
    assert value(found, "state_store_clean_backlog_rows", table="task_state_store") == 0
    success = value(found, "state_store_clean_last_success_timestamp_seconds")
    assert abs(success - utcnow().timestamp()) < 60

    state_store.run("clean", "--max-duration", "soon", "--metrics-file", path, ok=False)
    found = families()
    assert value(found, "state_store_clean_exit_code") == 2
    assert value(found, "state_store_clean_last_success_timestamp_seconds") == success
    assert "state_store_clean_backlog_rows" not in found
