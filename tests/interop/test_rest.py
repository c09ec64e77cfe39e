"""The REST transport (issue #24): our binary with `--api-url`, against Airflow 3.3.2's own
`airflow api-server` on the run's metastore (api_server.py).

- **Differential.** One scenario, each step run through `--api-url` and through `--conn` on the
  same metastore, from the same stored rows: the same stdout and exit code in every `-o`
  format, and after a write the same rows. Only the `updated_at` a `set` prints is set aside:
  it is the moment of the write.
- **Airflow reads back** through its own backend what was written over REST.
- **Auth**: exit 10 for 401 and 403; every way of getting a token; no token or password in any
  output, `-v` included.
- **Faults**: a server that is down, a URL that is not the API, a server that never answers, a
  server that is too old, 5xx answers to a GET retried and 4xx not, and what the client must refuse
  before it sends anything (NaN, DB-only commands and flags).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from typing import Any

import pytest

import api_server as server_module
import cases
import support
from api_server import ApiServer, json_answer, stand_in, version_answer
from support import Task, utcnow

FORMATS = ("table", "json", "yaml", "plain")

#: Exit codes of the REST transport (docs/exit-codes.md).
NOT_FOUND, USAGE, UNREACHABLE, TOO_OLD, AUTH = 1, 2, 4, 5, 10

_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z")


def _normalise_now(text: str, low: dt.datetime, high: dt.datetime) -> str:
    """`text` with every timestamp of the moment of the write (between `low` and `high`) as
    `<now>`: the `updated_at` of a `set`'s own output."""

    def now(m: re.Match) -> str:
        ts = support.parse_iso(m.group(0))
        return "<now>" if low - dt.timedelta(seconds=2) <= ts <= high + dt.timedelta(seconds=2) else m.group(0)

    return _TIMESTAMP.sub(now, text)


def _shown(result: support.Result) -> str:
    return f"exit {result.code}\n--- stdout\n{result.stdout[:3000]}\n--- stderr\n{result.stderr[:1500]}"


class Twin:
    """Runs each step of a scenario through the REST API and through the database, from the
    same stored rows, and compares what the two print. The rows of the scenario (its dag's task
    keys and its assets' keys) are saved before a write and put back between the two runs."""

    def __init__(
        self, rest: support.StateStore, db: support.StateStore, airflow: support.Airflow, dag_id: str, asset_ids: list[int]
    ) -> None:
        self.rest, self.db, self.airflow = rest, db, airflow
        self.dag_id, self.asset_ids = dag_id, asset_ids
        self.steps = 0

    def read(self, *args: Any, code: int = 0, formats: tuple[str, ...] = FORMATS) -> None:
        for fmt in formats:
            rest = self.rest.run(*args, "-o", fmt, ok=False)
            db = self.db.run(*args, "-o", fmt, ok=False)
            self._same(args, fmt, rest, db, rest.stdout, db.stdout, code)

    def write(self, *args: Any, code: int = 0, formats: tuple[str, ...] = FORMATS, stdin: str | None = None) -> None:
        for fmt in formats:
            before = self.rows()
            t0 = utcnow()
            rest = self.rest.run(*args, "-o", fmt, stdin=stdin, ok=False)
            t1 = utcnow()
            after_rest = self.rows()
            self.restore(before)
            t2 = utcnow()
            db = self.db.run(*args, "-o", fmt, stdin=stdin, ok=False)
            t3 = utcnow()
            after_db = self.rows()
            self._same(
                args, fmt, rest, db, _normalise_now(rest.stdout, t0, t1), _normalise_now(db.stdout, t2, t3), code
            )
            assert self._comparable(after_rest) == self._comparable(after_db), (
                f"step {args!r} -o {fmt}: the REST write left other rows than the database write"
                f"\n--- REST\n{self._comparable(after_rest)}\n--- database\n{self._comparable(after_db)}"
            )

    def _same(
        self, args: tuple, fmt: str, rest: support.Result, db: support.Result, rest_out: str, db_out: str, code: int
    ) -> None:
        self.steps += 1
        where = f"step {[str(a)[:80] for a in args]!r} -o {fmt}"
        assert (rest.code, rest_out) == (db.code, db_out), (
            f"{where}: REST and database differ\n=== --api-url: {_shown(rest)}\n=== --conn: {_shown(db)}"
        )
        assert rest.code == code, f"{where}: both exit {rest.code}, expected {code}\n{_shown(rest)}"

    # the scenario's rows

    def rows(self) -> tuple[list[dict], list[dict]]:
        from sqlalchemy import select

        t, a = self.airflow.TaskRow.__table__, self.airflow.AssetRow.__table__
        with self.airflow.session() as s:
            tasks = [dict(r._mapping) for r in s.execute(select(t).where(t.c.dag_id == self.dag_id))]
            assets = [dict(r._mapping) for r in s.execute(select(a).where(a.c.asset_id.in_(self.asset_ids)))]
        return tasks, assets

    def restore(self, rows: tuple[list[dict], list[dict]]) -> None:
        from sqlalchemy import delete, insert

        t, a = self.airflow.TaskRow.__table__, self.airflow.AssetRow.__table__
        tasks, assets = rows
        with self.airflow.session() as s:
            s.execute(delete(t).where(t.c.dag_id == self.dag_id))
            s.execute(delete(a).where(a.c.asset_id.in_(self.asset_ids)))
            if tasks:
                s.execute(insert(t), tasks)
            if assets:
                s.execute(insert(a), assets)

    @staticmethod
    def _comparable(rows: tuple[list[dict], list[dict]]) -> list[str]:
        """The rows without what differs by the moment of the write (`updated_at`) or by the
        order of inserts (`id`)."""
        return sorted(
            repr(sorted((k, v) for k, v in row.items() if k not in ("id", "updated_at"))) for part in rows for row in part
        )


# ── the server itself ───────────────────────────────────────────────────────────────────────


def test_server_is_as_the_spec_measured_it(api_server: ApiServer, airflow: support.Airflow) -> None:
    """What the client relies on, checked on Airflow's own server (docs: the spec's §1.3)."""
    task = airflow.add_dag_run()
    base = (
        f"/dags/{server_module.quote_segment(task.dag_id)}/dagRuns/{server_module.quote_segment(task.run_id)}"
        f"/taskInstances/{task.task_id}/state-store"
    )
    assert api_server.api("GET", base, user=None)[0] == 401
    assert api_server.api("PUT", f"{base}/k", {"value": 1}, user="viewer")[0] == 403
    assert api_server.api("GET", base, user="viewer")[0] == 200
    for i in range(105):
        airflow.backend_set(task, f"k{i:03}", str(i), None)
    # Pages are cut at 100, whatever the limit; limit=0 is an empty page with the right total.
    status, page = api_server.api("GET", f"{base}?limit=1000")
    assert (status, len(page["task_state_store"]), page["total_entries"]) == (200, 100, 105)
    status, page = api_server.api("GET", f"{base}?limit=0")
    assert (status, page["task_state_store"], page["total_entries"]) == (200, [], 105)
    # A trailing slash is the empty key, not the collection.
    assert api_server.api("PUT", f"{base}/", {"value": 1})[0] == 204
    assert airflow.get(task, "") == "1"
    # A bare NaN is a 500, not a 422: the client must refuse it itself.
    status, _, body = server_module.fetch(
        "PUT", f"{api_server.url}/api/v2{base}/nan", token=api_server.token(), raw=b'{"value": NaN}'
    )
    assert status == 500, (status, body[:300])
    # The asset lookup the client uses: prefix filters, active assets unless only_active=false,
    # and no word on activity in the asset itself.
    active, inactive = airflow.add_asset(), airflow.add_asset(active=False)
    for asset, only_active, found in ((active, "true", True), (inactive, "true", False), (inactive, "false", True)):
        for param, text in (("name_prefix_pattern", asset.name), ("uri_prefix_pattern", asset.uri)):
            query = f"{param}={server_module.quote_segment(text)}&only_active={only_active}"
            status, page = api_server.api("GET", f"/assets?{query}")
            assert status == 200
            assert (asset.id in [a["id"] for a in page["assets"]]) == found, (param, only_active, page)
    status, body = api_server.api("GET", f"/assets/{inactive.id}")
    assert status == 200 and not {"active", "is_active"} & set(body), sorted(body)
    # Outside /api, the UI's catch-all answers 200 with HTML.
    status, ctype, _ = server_module.fetch("GET", f"{api_server.url}/ui/api/v2/version")
    assert status == 200 and ctype.startswith("text/html")


# ── differential ─────────────────────────────────────────────────────────────────────────────

#: An explicit expiry, so that a `set` prints the same `expires_at` on both sides.
LATER = "2030-01-01T00:00:00Z"
#: A long string value, written through stdin.
LONG_TEXT = json.dumps("long " * 12000)
#: A value whose stored text is one byte over `max_value_storage_bytes` (65,535).
OVER_LIMIT = json.dumps("x" * 65534)


def test_differential_task_scope(rest_store, db_store, airflow) -> None:
    """set, get, list (over 100 keys, mapped tasks, --expired, --external), --keep-expiry,
    delete, clear, --all-map-indices, refusals: the same through REST and the database."""
    task = airflow.add_dag_run(dag_id=support.unique("rest_differential"))
    mapped = task.sibling("mapped", 0)
    airflow.add_task_instance(mapped, 0, 1, 2)
    missing_ti = task.sibling("mapped", 7)
    missing_run = Task(task.dag_id, "manual__no_such_run", task.task_id)

    # Rows the steps read: 150 keys (two pages of the API), an offloaded value, a key of each
    # map index, and an expired key written through the database path.
    for i in range(150):
        value = json.dumps({"i": i, "name": f"row {i}"})
        airflow.backend_set(task, f"bulk/{i:03}", value, dt.datetime(2031, 1, 1, tzinfo=support.UTC))
    airflow.backend_set(task, "report", json.dumps({"__airflow_state_ref__": "s3://bucket/state/42"}), None)
    for map_index in (0, 1, 2):
        airflow.backend_set(mapped.sibling("mapped", map_index), "offset", str(4096 * map_index), None)
    db_store.run("set", "old", '"gone"', *task.args(), "--expires-at", "2020-01-01T00:00:00Z")

    twin = Twin(rest_store, db_store, airflow, task.dag_id, [])
    t, m1 = task.args(), mapped.sibling("mapped", 1).args()

    twin.read("get", "nosuch", *t, code=NOT_FOUND)
    twin.read("get", "nosuch", *missing_run.args(), code=NOT_FOUND, formats=("json",))
    twin.read("get", "bulk/007", *t)
    twin.read("get", "report", *t)
    twin.read("get", "old", *t)

    twin.write("set", "watermark", '"2026-11-28T00:00:00Z"', *t, "--expires-at", LATER)
    config = '{"tables": ["orders", "refunds"], "since": 1.5e16, "label": "café", "n": [1.0, -0.0, 1e-05]}'
    twin.write("set", "config", config, *t, "--retention", "never", formats=("json", "yaml"))
    twin.write("set", "long", "-", *t, "--retention", "never", stdin=LONG_TEXT, formats=("json", "plain"))
    twin.write("set", "past", "1", *t, "--expires-at", "2021-06-01T12:00:00.5Z", formats=("json",))
    twin.write("set", "watermark", '"2026-11-29T00:00:00Z"', *t, "--keep-expiry")
    twin.write("set", "nosuch", "1", *t, "--keep-expiry", code=NOT_FOUND, formats=("json",))
    twin.write("set", "nan", "NaN", *t, code=USAGE, formats=("json",))
    twin.write("set", "inf", "[1, -Infinity]", *t, code=USAGE, formats=("json",))
    twin.write("set", "null", "null", *t, code=USAGE, formats=("json",))
    twin.write("set", "huge", "-", *t, code=USAGE, stdin=OVER_LIMIT, formats=("json",))
    twin.write("set", "", "1", *t, code=USAGE, formats=("json",))
    twin.write("set", "x", "1", *missing_ti.args(), code=NOT_FOUND, formats=("json",))
    twin.write("set", "x", "1", *missing_run.args(), code=NOT_FOUND, formats=("json",))
    twin.read("get", "watermark", *t)
    twin.read("get", "config", *t)
    twin.read("get", "long", *t, formats=("json", "plain"))

    twin.read("list", *t)  # the first 100 of 155
    twin.read("list", *t, "--limit", "0")
    twin.read("list", *t, "--limit", "5", "--offset", "98")
    twin.read("list", *t, "--limit", "120", "--offset", "30", formats=("json",))
    twin.read("list", *t, "--offset", "150")
    twin.read("list", *t, "--offset", "1000", formats=("json", "table"))
    twin.read("list", *t, "--limit", "0", "--expired")
    twin.read("list", *t, "--limit", "0", "--external")
    twin.read("list", *m1)

    twin.write("set", "offset", "42", *m1, "--expires-at", LATER, formats=("table", "json"))
    twin.read("get", "offset", *m1)
    twin.read("get", "offset", *mapped.sibling("mapped", -1).args(), code=NOT_FOUND, formats=("json",))
    twin.write("delete", "bulk/000", *t)
    twin.write("delete", "nosuch", *t, formats=("json", "plain"))
    twin.write("delete", "x", *missing_ti.args(), code=NOT_FOUND, formats=("json",))
    twin.write("clear", *m1, "--yes", formats=("table", "plain"))
    twin.write("clear", *mapped.sibling("mapped", 2).args(), "--yes", formats=("json",))
    of_run = ["--dag-id", mapped.dag_id, "--run-id", mapped.run_id]
    twin.write("clear", *of_run, "--task-id", "mapped", "--all-map-indices", "--yes")
    twin.write("clear", *of_run, "--task-id", "nosuch", "--all-map-indices", "--yes", code=NOT_FOUND, formats=("json",))
    twin.write("clear", *missing_ti.args(), "--yes", code=NOT_FOUND, formats=("json",))
    twin.write("clear", *t, "--yes")
    twin.read("list", *t, "--limit", "0")
    twin.read("get", "watermark", *t, code=NOT_FOUND, formats=("json",))


def test_differential_asset_scope(rest_store, db_store, airflow) -> None:
    """Assets by id, name and URI (among more than a page of assets the lookup must go
    through), an inactive asset, asset keys a task wrote: the same through REST and the
    database."""
    stem = support.unique("rest_asset")
    # More than a page of assets whose names and URIs start like the asset's, made before it:
    # the lookup by name or URI must read past the first page of `/assets?…_prefix_pattern=`.
    decoys = [airflow.add_asset(f"{stem}_{i}", f"s3://interop/{stem}_{i}/") for i in range(101)]
    asset = airflow.add_asset(stem, f"s3://interop/{stem}/")
    inactive = airflow.add_asset(f"{stem}-old", f"s3://interop/{stem}-old/", active=False)
    task = airflow.add_dag_run()
    for i in range(105):
        airflow.asset_set(asset, f"file/{i:03}", {"part": i})
    airflow.asset_set(asset, "by_task", [1, 2], kind="task", task=task)
    airflow.asset_set(asset, "by_watcher", "w", kind="watcher")
    airflow.asset_set(inactive, "cursor", [17, "page-3"])

    twin = Twin(rest_store, db_store, airflow, support.unique("no_dag"), [asset.id, inactive.id, decoys[0].id])
    by_name, by_uri, by_id = ["--asset", asset.name], ["--asset-uri", asset.uri], ["--asset-id", str(asset.id)]

    for selector in (by_name, by_uri, by_id):
        twin.read("get", "file/042", *selector)
    twin.read("get", "by_task", *by_id)
    twin.read("get", "by_watcher", *by_name, formats=("json",))
    twin.read("get", "nosuch", *by_name, code=NOT_FOUND, formats=("json",))
    twin.read("get", "file/042", "--asset", f"{stem}_nosuch", code=NOT_FOUND, formats=("json",))
    twin.read("get", "file/042", "--asset-uri", f"s3://interop/{stem}_nosuch/", code=NOT_FOUND, formats=("json",))
    twin.read("get", "file/042", "--asset-id", "999999999", code=NOT_FOUND, formats=("json",))
    twin.read("get", "cursor", "--asset-id", str(inactive.id))
    twin.read("get", "cursor", "--asset", inactive.name, code=NOT_FOUND, formats=("json",))
    twin.read("get", "cursor", "--asset-uri", inactive.uri, code=NOT_FOUND, formats=("json",))

    twin.read("list", *by_id, "--limit", "0")
    twin.read("list", *by_name)
    twin.read("list", *by_uri, "--limit", "3", "--offset", "101")
    twin.read("list", *by_id, "--limit", "0", "--external", formats=("json",))
    twin.read("list", "--asset-id", str(inactive.id))
    twin.read("list", "--asset-id", str(decoys[0].id), formats=("json", "table"))

    twin.write("set", "cursor", '{"page": 3}', *by_name)
    twin.write("set", "cursor", '{"page": 4}', *by_uri, formats=("json",))
    twin.write("set", "x", "1", *by_id, "--retention", "7d", code=USAGE, formats=("json",))
    twin.write("set", "x", "1", "--asset-id", str(inactive.id), code=NOT_FOUND, formats=("json",))
    twin.write("set", "x", "1", "--asset", inactive.name, code=NOT_FOUND, formats=("json",))
    twin.write("delete", "cursor", *by_name)
    twin.write("delete", "nosuch", *by_id, formats=("json", "plain"))
    twin.write("delete", "cursor", "--asset", inactive.name, code=NOT_FOUND, formats=("json",))
    twin.write("clear", *by_uri, "--yes")
    twin.write("clear", "--asset-id", str(inactive.id), "--yes", formats=("json",))
    twin.write("clear", "--asset-id", "999999999", "--yes", code=NOT_FOUND, formats=("json",))
    twin.read("list", *by_id, "--limit", "0")


def test_keep_expiry_on_an_asset_key_is_refused(rest_store, db_store, airflow) -> None:
    """Through the database, `set --keep-expiry` of an asset key (which has no expiry) is a set
    of a key that must exist. The API has no PATCH for asset keys (405), and the REST transport
    refuses it (docs/rest.md): exit 2, where the database transport writes, and nothing
    changes."""
    asset = airflow.add_asset()
    task = airflow.add_dag_run()
    airflow.asset_set(asset, "by_task", [1, 2], kind="task", task=task)
    before = airflow.asset_row(asset, "by_task")
    for selector in (["--asset-id", str(asset.id)], ["--asset", asset.name], ["--asset-uri", asset.uri]):
        result = rest_store.run("set", "by_task", '"mine now"', *selector, "--keep-expiry", ok=False)
        assert result.code == USAGE and result.stdout == "", result
        assert "--keep-expiry" in result.stderr, result
    assert airflow.asset_row(asset, "by_task") == before
    db_store.run("set", "by_task", '"mine now"', "--asset-id", str(asset.id), "--keep-expiry")
    assert airflow.get(asset, "by_task") == '"mine now"'


def test_list_of_a_mapped_task_without_map_index(rest_store, db_store, airflow) -> None:
    """Through the database, `list` with a task and no `--map-index` lists every map index; one
    API call cannot. Over REST it must give the same rows or refuse (exit 2), never list only
    map index -1 as if that were all."""
    task = airflow.add_dag_run()
    mapped = task.sibling("mapped", 0)
    airflow.add_task_instance(mapped, 0, 1)
    for map_index in (0, 1):
        airflow.backend_set(mapped.sibling("mapped", map_index), "offset", str(map_index), None)
    scope = ["--dag-id", task.dag_id, "--run-id", task.run_id, "--task-id", "mapped", "-o", "json"]
    db = db_store.run("list", *scope)
    rest = rest_store.run("list", *scope, ok=False)
    assert (rest.code, rest.stdout) == (0, db.stdout) or (rest.code == USAGE and rest.stdout == ""), _shown(rest)


def test_clear_of_every_map_index_deletes_the_keys_at_minus_one_the_api_takes(airflow, rest_store, db_store) -> None:
    """`listMapped` names map indexes of 0 and up only. A task with task instances at -1 and at
    3 has its keys at -1 deleted by `clear --all-map-indices` over REST, as through the
    database, with no warning; keys at -1 of a mapped task that has no instance there are
    refused by the API (404): they are left and named in a warning, and the others go."""
    task = airflow.add_dag_run()
    airflow.add_task_instance(task, 3)
    for map_index in (-1, 3):
        airflow.backend_set(task.sibling(task.task_id, map_index), "k", str(map_index), None)
    of_run = ["--dag-id", task.dag_id, "--run-id", task.run_id]
    cleared = rest_store.run("clear", *of_run, "--task-id", task.task_id, "--all-map-indices", "--yes", "-o", "plain")
    assert (cleared.stdout, "warning" in cleared.stderr) == ("2\n", False), _shown(cleared)
    assert airflow.task_keys(task) == [] and airflow.task_keys(task.sibling(task.task_id, 3)) == []

    mapped = task.sibling("mapped", 0)
    airflow.add_task_instance(mapped, 0)
    airflow.backend_set(mapped, "k", "0", None)
    db_store.run("set", "k", "-1", *mapped.sibling("mapped", -1).args(), "--allow-missing-task-instance")
    cleared = rest_store.run("clear", *of_run, "--task-id", "mapped", "--all-map-indices", "--yes", "-o", "plain")
    assert cleared.stdout == "1\n", _shown(cleared)
    assert "1 key(s) at map index -1" in cleared.stderr and "answered 404" in cleared.stderr, _shown(cleared)
    assert airflow.task_keys(mapped) == [] and airflow.task_keys(mapped.sibling("mapped", -1)) == ["k"]


# ── Airflow reads what was written over REST ────────────────────────────────────────────────


@pytest.mark.parametrize(("case", "text"), cases.VALUES, ids=[c for c, _ in cases.VALUES])
def test_airflow_reads_values_written_over_rest(case, text, task, airflow, rest_store) -> None:
    key = f"value/{case}"
    asset = airflow.add_asset()
    stdin = text if len(text) > 1000 else None
    value = "-" if stdin else text
    low = airflow.default_expires_at()
    rest_store.run("set", key, value, *task.args(), stdin=stdin)
    high = airflow.default_expires_at()
    rest_store.run("set", key, value, "--asset-id", str(asset.id), stdin=stdin)

    assert airflow.get(task, key) == cases.airflow_text(text), "stored text differs from Python's json.dumps"
    assert airflow.task_reads(task, key) == json.loads(text), "a task reads another value"
    assert support.between(airflow.task_row(task, key)["expires_at"], low, high), "not the server's default retention"
    assert airflow.get(asset, key) == cases.airflow_text(text)
    assert airflow.asset_reads(asset, key) == json.loads(text)
    row = airflow.asset_row(asset, key)
    assert (row["last_updated_by_kind"], row["last_updated_by_task_id"]) == ("api", None)


@pytest.mark.parametrize(("case", "key"), cases.KEYS, ids=[c for c, _ in cases.KEYS])
def test_keys_written_over_rest_are_the_keys_airflow_reads(case, key, task, airflow, rest_store) -> None:
    """Each path segment percent-encoded with nothing kept: `/`, `?`, `#`, `%` and a trailing
    slash reach the key as typed, and nothing else is written (no empty key). A key with a
    `.` or `..` segment, which a proxy that normalises paths would resolve, is refused before
    any request (exit 2), and nothing is written."""
    asset = airflow.add_asset()
    if any(segment in (".", "..") for segment in key.split("/")):
        for scope in (task.args(), ["--asset-id", str(asset.id)]):
            result = rest_store.run("set", key, '"v"', *scope, ok=False)
            assert result.code == 2 and "cannot address" in result.stderr, result
        assert airflow.task_keys(task) == [] and airflow.asset_rows([asset.id]) == set()
        return
    rest_store.run("set", key, '"v"', *task.args())
    rest_store.run("set", key, '"v"', "--asset-id", str(asset.id))
    assert airflow.task_keys(task) == [key]
    assert airflow.get(asset, key) == '"v"' and airflow.asset_rows([asset.id]) == {(asset.id, key)}
    assert rest_store.run("get", key, *task.args(), "-o", "plain").stdout == "v\n"
    assert rest_store.json("list", *task.args())[0]["key"] == key
    rest_store.run("delete", key, *task.args())
    rest_store.run("delete", key, "--asset-id", str(asset.id))
    assert airflow.task_keys(task) == [] and airflow.asset_rows([asset.id]) == set()


def test_scopes_with_characters_urls_break(airflow, rest_store, db_store) -> None:
    """Dag, run and task ids with `/`-free but URL-significant characters, as the scheduler's
    run ids have them (`+`, `:`), and an asset whose name holds `|` and `~` (pattern syntax of
    `/assets?name_prefix_pattern=`)."""
    task = airflow.add_dag_run(dag_id=support.unique("rest.dag-x"), run_id="scheduled__2026-11-28T00:00:00+00:00 #1?&x=%20")
    rest_store.run("set", "k", "1", *task.args())
    assert airflow.get(task, "k") == "1"
    get = ["get", "k", *task.args(), "-o", "json"]
    assert rest_store.run(*get).stdout == db_store.run(*get).stdout
    for name in (support.unique("a|b"), "~" + support.unique("tilde"), support.unique("trailing") + "/_-"):
        asset = airflow.add_asset(name, f"s3://interop/{name}|~/")
        for selector in (["--asset", asset.name], ["--asset-uri", asset.uri]):
            rest_store.run("set", "k", '"v"', *selector)
            assert airflow.get(asset, "k") == '"v"', selector
            get = ["get", "k", *selector, "-o", "json"]
            assert rest_store.run(*get).stdout == db_store.run(*get).stdout


def test_expiry_written_over_rest(task, airflow, rest_store) -> None:
    """No flag sends "default" (the server's retention); --retention is counted from the
    client's clock; --expires-at and never are sent as they are."""
    low = airflow.default_expires_at()
    rest_store.run("set", "default", "1", *task.args())
    high = airflow.default_expires_at()
    assert support.between(airflow.task_row(task, "default")["expires_at"], low, high)

    t0 = utcnow()
    rest_store.run("set", "week", "1", *task.args(), "--retention", "7d")
    t1 = utcnow()
    week = dt.timedelta(days=7)
    assert support.between(airflow.task_row(task, "week")["expires_at"], t0 + week, t1 + week)

    rest_store.run("set", "never", "1", *task.args(), "--retention", "never")
    assert airflow.task_row(task, "never")["expires_at"] is None
    rest_store.run("set", "date", "1", *task.args(), "--expires-at", "2031-02-03")
    assert airflow.task_row(task, "date")["expires_at"] == dt.datetime(2031, 2, 3, tzinfo=support.UTC)
    rest_store.run("set", "offset", "1", *task.args(), "--expires-at", "2031-02-03T02:00:00+02:00")
    assert airflow.task_row(task, "offset")["expires_at"] == dt.datetime(2031, 2, 3, tzinfo=support.UTC)

    # --keep-expiry is a PATCH: the value changes, the expiry stays, NULL included.
    rest_store.run("set", "never", "2", *task.args(), "--keep-expiry")
    rest_store.run("set", "date", "2", *task.args(), "--keep-expiry")
    assert (airflow.get(task, "never"), airflow.task_row(task, "never")["expires_at"]) == ("2", None)
    assert airflow.task_row(task, "date")["expires_at"] == dt.datetime(2031, 2, 3, tzinfo=support.UTC)


def test_api_url_from_the_environment(task, airflow, api_server, run) -> None:
    airflow.backend_set(task, "k", "7", None)
    env = {"STATE_STORE_API_URL": api_server.url, "AIRFLOW_CLI_TOKEN": api_server.token()}
    # A --conn-less run with no database configuration at all: nothing needs one.
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = "postgresql://nobody@127.0.0.1:1/none"
    store = support.StateStore(run["binary"])
    assert store.run("get", "k", *task.args(), "-o", "plain", env=env).stdout == "7\n"


def test_a_prefixed_url_keeps_its_prefix(task, airflow, api_server, run) -> None:
    """A deployment URL with a path (Astronomer's `https://host/<id>`): `/api/v2/…` goes after
    the prefix, with or without a trailing slash on the URL."""
    airflow.backend_set(task, "k", "7", None)
    asset = airflow.add_asset()
    env = {"AIRFLOW_CLI_TOKEN": api_server.token()}
    with server_module.prefix_proxy(api_server.url, "/d3pl0y") as (url, seen):
        for base in (url, url + "/"):
            store = support.StateStore(run["binary"], api_url=base, env=env)
            assert store.run("get", "k", *task.args(), "-o", "plain").stdout == "7\n"
            store.run("set", "k2", "[1]", *task.args())
            assert len(store.json("list", *task.args(), "--limit", "0")) == 2
            store.run("set", "k", "1", "--asset", asset.name)
            store.run("delete", "k2", *task.args())
    assert seen and all(r.path.startswith("/d3pl0y/api/v2/") for r in seen), sorted({r.path for r in seen})
    assert airflow.get(asset, "k") == "1" and airflow.task_keys(task) == ["k"]


# ── auth ─────────────────────────────────────────────────────────────────────────────────────


@pytest.fixture
def secrets_seen(api_server: ApiServer):
    """Every result a test passes in; at the end, none of them may hold a token or a password
    (whole, or the payload or signature of a JWT), in stdout or stderr."""
    results: list[support.Result] = []
    yield results
    secrets = [*api_server.passwords.values(), WRONG_PASSWORD]
    for user in api_server.passwords:
        token = api_server.token(user)
        secrets += [token, *token.split(".")[1:]]
    for result in results:
        for text in (result.stdout, result.stderr):
            for secret in secrets:
                assert secret not in text, f"a secret ({secret[:6]}…) is in the output of {result!r}"
            # A token the binary obtained itself (its own login) is a JWT too.
            assert "eyJ" not in text, f"a JWT is in the output of {result!r}"


WRONG_PASSWORD = "not-the-password-Xq93"


def test_tokens_and_logins(task, airflow, api_server, run, tmp_path, secrets_seen) -> None:
    airflow.backend_set(task, "k", '"seven"', None)
    get = ["-v", "get", "k", *task.args(), "-o", "plain"]
    store = support.StateStore(run["binary"], api_url=api_server.url)

    def ok(*args: str, env: dict[str, str]) -> support.Result:
        result = store.run(*args, env=env, ok=False)
        secrets_seen.append(result)
        assert result.code == 0, result
        return result

    # AIRFLOW_CLI_TOKEN, as airflowctl reads it.
    assert ok(*get, env={"AIRFLOW_CLI_TOKEN": api_server.token()}).stdout == "seven\n"
    # A token command, by flag and by environment: its stdout (a trailing newline trimmed).
    token_file = tmp_path / "token"
    token_file.write_text(api_server.token() + "\n")
    token_file.chmod(0o600)
    assert ok("--api-token-cmd", f"cat {token_file}", *get, env={}).stdout == "seven\n"
    assert ok(*get, env={"STATE_STORE_API_TOKEN_CMD": f"cat {token_file}"}).stdout == "seven\n"
    # A login at /auth/token, by flag and by environment.
    password = {"STATE_STORE_API_PASSWORD": api_server.passwords["admin"]}
    assert ok("--api-username", "admin", *get, env=password).stdout == "seven\n"
    assert ok(*get, env={"STATE_STORE_API_USERNAME": "admin", **password}).stdout == "seven\n"
    ok("--api-username", "admin", "-v", "set", "k", '"eight"', *task.args(), env=password)
    assert airflow.get(task, "k") == '"eight"'

    # The first source wins: with AIRFLOW_CLI_TOKEN set, the command is not run and the login
    # not tried.
    marker = tmp_path / "token-cmd-ran"
    result = ok(
        *get,
        env={
            "AIRFLOW_CLI_TOKEN": api_server.token(),
            "STATE_STORE_API_TOKEN_CMD": f"touch {marker}; echo not-a-token",
            "STATE_STORE_API_USERNAME": "admin",
            "STATE_STORE_API_PASSWORD": WRONG_PASSWORD,
        },
    )
    assert result.stdout == "eight\n" and not marker.exists()
    # ... and a token command comes before a login.
    wrong_login = {"STATE_STORE_API_USERNAME": "admin", "STATE_STORE_API_PASSWORD": WRONG_PASSWORD}
    ok(*get, env={"STATE_STORE_API_TOKEN_CMD": f"cat {token_file}", **wrong_login})

    # -v says which server it talks to and each request, with its time.
    verbose = ok(*get, env={"AIRFLOW_CLI_TOKEN": api_server.token()}).stderr
    assert "3.3.2" in verbose, verbose
    assert re.search(rf"GET {re.escape(api_server.url)}/api/v2/dags/\S+ -> 200 \(\d+ ms\)", verbose), verbose


def test_auth_failures_exit_10(task, airflow, api_server, run, secrets_seen) -> None:
    airflow.backend_set(task, "k", "1", None)
    store = support.StateStore(run["binary"], api_url=api_server.url)

    def fails(*args: str, env: dict[str, str], code: int = AUTH) -> support.Result:
        result = store.run("-v", *args, env=env, ok=False)
        secrets_seen.append(result)
        assert result.code == code, result
        assert result.stdout == "", result
        return result

    # No token at all: the server answers 401.
    fails("get", "k", *task.args(), env={})
    fails("list", *task.args(), env={})
    # A token the server did not sign, and one that is not a JWT: no word of permissions.
    for token in (api_server.token()[:-4] + "AAAA", "not-a-jwt"):
        result = fails("get", "k", *task.args(), env={"AIRFLOW_CLI_TOKEN": token})
        assert "the token was accepted" not in result.stderr, result
    # A wrong password: /auth/token answers 401.
    wrong_login = {"STATE_STORE_API_USERNAME": "admin", "STATE_STORE_API_PASSWORD": WRONG_PASSWORD}
    result = fails("get", "k", *task.args(), env=wrong_login)
    assert "/auth/token" in result.stderr, result
    fails("--api-username", "nobody", "get", "k", *task.args(), env={"STATE_STORE_API_PASSWORD": WRONG_PASSWORD})
    # The viewer reads but may not write: 403.
    viewer = {"AIRFLOW_CLI_TOKEN": api_server.token("viewer")}
    ok = store.run("-v", "get", "k", *task.args(), env=viewer, ok=False)
    secrets_seen.append(ok)
    assert ok.code == 0, ok
    # Its token is good: the message says which permission the user lacks, not that the
    # credentials were refused.
    for args, verb in (
        (["set", "k", "2"], "change"),
        (["set", "k", "2", "--keep-expiry"], "change"),
        (["delete", "k"], "delete"),
        (["clear", "--yes"], "delete"),
    ):
        result = fails(*args[:1], *args[1:], *task.args(), env=viewer)
        said = result.stderr.splitlines()[-1]
        assert "answered 403: Forbidden; the token was accepted" in said, result
        assert f'may not {verb} the state of dag "{task.dag_id}"' in said, result
    assert airflow.get(task, "k") == "1"
    viewer_login = {"STATE_STORE_API_PASSWORD": api_server.passwords["viewer"]}
    fails("--api-username", "viewer", "set", "k", "2", *task.args(), env=viewer_login)
    assert airflow.get(task, "k") == "1"


# ── faults ───────────────────────────────────────────────────────────────────────────────────


def _timed(store: support.StateStore, *args: str, env: dict[str, str] | None = None) -> tuple[support.Result, float]:
    started = time.monotonic()
    result = store.run(*args, env=env, ok=False)
    return result, time.monotonic() - started


TOKEN_ENV = {"AIRFLOW_CLI_TOKEN": "t0k3n-for-stand-ins"}
SCOPE = ["--dag-id", "d", "--run-id", "r", "--task-id", "t"]


def test_server_down_is_exit_4_after_retries(run) -> None:
    port = server_module.free_port()
    store = support.StateStore(run["binary"], api_url=f"http://127.0.0.1:{port}", env=TOKEN_ENV)
    result, took = _timed(store, "get", "k", *SCOPE)
    assert result.code == UNREACHABLE and result.stdout == "", result
    assert f"127.0.0.1:{port}" in result.stderr, result
    print(f"\nconnection refused: exit {result.code} after {took:.2f}s")
    # Four tries with a backoff between them (3.5 s here), not one.
    assert 0.5 < took < 60, f"took {took:.2f}s"


def test_credentials_in_the_url_are_never_printed(run) -> None:
    port = server_module.free_port()
    store = support.StateStore(run["binary"], api_url=f"http://someone:pa55w0rd-in-url@127.0.0.1:{port}/x", env=TOKEN_ENV)
    result = store.run("-v", "get", "k", *SCOPE, ok=False)
    assert result.code in (UNREACHABLE, USAGE), result
    assert "pa55w0rd-in-url" not in result.stderr + result.stdout, result


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_gateway_error_is_retried(status, run) -> None:
    """Once a 5xx of a gateway, then the answer: the command succeeds."""
    failed: list[str] = []
    entry = {"key": "k", "value": {"a": 1}, "updated_at": "2026-12-01T09:31:03.087856Z", "expires_at": None}

    def answer(req: server_module.Request) -> server_module.Answer:
        if req.path.endswith("/api/v2/version"):
            return version_answer()
        if req.path.split("?")[0].endswith("/state-store/k") and not failed:
            failed.append(req.path)
            return json_answer(status, {"detail": "upstream not ready"})
        return json_answer(200, entry)

    with stand_in(answer) as (url, seen):
        store = support.StateStore(run["binary"], api_url=url, env=TOKEN_ENV)
        result = store.run("get", "k", *SCOPE, "-o", "json", ok=False)
    assert result.code == 0, result
    assert json.loads(result.stdout)["value"] == {"a": 1}
    assert len([r for r in seen if "/state-store/k" in r.path]) == 2


@pytest.mark.parametrize(
    ("status", "code"),
    [(503, UNREACHABLE), (500, UNREACHABLE), (404, NOT_FOUND), (422, USAGE), (400, 3), (401, AUTH), (403, AUTH)],
)
def test_retries_are_for_gateway_errors_only(status, code, run) -> None:
    """A 502/503/504 that persists: at most 3 retries, then exit 4. A 4xx or a 500 is never
    retried: 404 → 1, 422 → 2, 400 → 3, 401/403 → 10, 500 → 4."""

    def answer(req: server_module.Request) -> server_module.Answer:
        if req.path.endswith("/api/v2/version"):
            return version_answer()
        return json_answer(status, {"detail": f"answered {status}"})

    with stand_in(answer) as (url, seen):
        store = support.StateStore(run["binary"], api_url=url, env=TOKEN_ENV)
        result, took = _timed(store, "get", "k", *SCOPE)
    assert result.code == code and result.stdout == "", result
    calls = len([r for r in seen if "/state-store/" in r.path])
    if status in (502, 503, 504):
        assert 2 <= calls <= 4, f"{calls} requests for a persistent {status}"
        print(f"\npersistent {status}: {calls} requests, exit {result.code} after {took:.2f}s")
    else:
        assert calls == 1, f"{status} was sent {calls} times"


def test_one_connection_for_a_command(run) -> None:
    """A list of three pages: the version and the pages over one kept-alive connection, with
    `limit=100` and a running offset, and no more pages than `total_entries` needs."""

    def answer(req: server_module.Request) -> server_module.Answer:
        if req.path.endswith("/api/v2/version"):
            return version_answer()
        offset = int(re.search(r"[?&]offset=(\d+)", req.path).group(1))
        rows = [
            {"key": f"k{i:04}", "value": i, "updated_at": "2026-12-01T00:00:00Z", "expires_at": None}
            for i in range(offset, min(offset + 100, 250))
        ]
        return json_answer(200, {"task_state_store": rows, "total_entries": 250})

    with stand_in(answer) as (url, seen):
        store = support.StateStore(run["binary"], api_url=url, env=TOKEN_ENV)
        listed = store.json("list", *SCOPE, "--map-index", "-1", "--limit", "0")
    assert [e["key"] for e in listed] == [f"k{i:04}" for i in range(250)]
    pages = [r.path for r in seen if "/state-store" in r.path]
    assert len(pages) == 3 and all("limit=100" in p for p in pages), pages
    assert len({r.client_port for r in seen}) == 1, f"{len(seen)} requests over {len({r.client_port for r in seen})} connections"


def test_an_html_page_is_not_the_api(api_server, run, task) -> None:
    """A base URL without its prefix reaches a UI or a login page: 200 with HTML. Exit 4, saying
    what came back."""
    env = {"AIRFLOW_CLI_TOKEN": api_server.token()}
    with server_module.stand_in(lambda req: server_module.html_answer()) as (html_url, _):
        for url in (f"{api_server.url}/ui", f"{api_server.url}/deployment-x", html_url):
            store = support.StateStore(run["binary"], api_url=url, env=env)
            for args in (["get", "k", *task.args()], ["set", "k", "1", *task.args()], ["list", *task.args()]):
                result = store.run(*args, ok=False)
                assert result.code == UNREACHABLE and result.stdout == "", result
                assert re.search(r"html|json|content.type", result.stderr, re.I), result
                assert url.split("//")[1] in result.stderr, result
                if url != html_url:
                    # A path after the server's address: that path is named as the one to check.
                    path = "/" + url.split("//")[1].split("/", 1)[1]
                    assert f"is {path} the deployment's path prefix, or one too many" in result.stderr, result


def test_a_server_that_never_answers_times_out(run) -> None:
    with server_module.silent_port() as url:
        store = support.StateStore(run["binary"], api_url=url, env=TOKEN_ENV)
        result, took = _timed(store, "--api-timeout", "2", "get", "k", *SCOPE)
    assert result.code == UNREACHABLE and result.stdout == "", result
    assert url.split("//")[1] in result.stderr, result
    print(f"\nno answer, --api-timeout 2: exit {result.code} after {took:.2f}s")
    assert took < 15, f"took {took:.1f}s"


@pytest.mark.parametrize(
    ("version", "code"), [("3.2.1", TOO_OLD), ("2.10.5", TOO_OLD), ("3.3.0", NOT_FOUND), ("3.4.0", NOT_FOUND)]
)
def test_a_server_older_than_3_3_is_exit_5(version, code, run) -> None:
    with stand_in(server_module.answer_version_else_404(version)) as (url, seen):
        store = support.StateStore(run["binary"], api_url=url, env=TOKEN_ENV)
        result = store.run("get", "k", *SCOPE, ok=False)
    assert result.code == code, result
    if code == TOO_OLD:
        assert version in result.stderr, result
        assert not [r for r in seen if "/state-store" in r.path], "a request went to the state store of a 3.2 server"


def test_non_json_answers_are_exit_4(run) -> None:
    def answer(req: server_module.Request) -> server_module.Answer:
        if req.path.endswith("/api/v2/version"):
            return version_answer()
        return 200, "application/json", b"{not json"

    with stand_in(answer) as (url, _):
        store = support.StateStore(run["binary"], api_url=url, env=TOKEN_ENV)
        result = store.run("get", "k", *SCOPE, ok=False)
    assert result.code == UNREACHABLE and result.stdout == "", result


def test_nan_is_refused_before_anything_is_sent(task, airflow, api_server, rest_store) -> None:
    """A bare NaN makes Airflow answer 500 (it cannot echo it in a 422): the client refuses
    NaN and ±Infinity itself, exit 2, and sends nothing."""
    marker = api_server.mark()
    for key, value in (("nan", "NaN"), ("inf", "Infinity"), ("ninf", '{"a": [-Infinity]}')):
        for extra in ([], ["--keep-expiry"]):
            result = rest_store.run("set", key, value, *task.args(), *extra, ok=False)
            assert result.code == USAGE and result.stdout == "", result
    sent = [r for r in api_server.requests_since(marker) if r[0] != "GET" or "/state-store" in r[1]]
    assert sent == [], f"requests reached the server: {sent}"
    assert airflow.task_keys(task) == []
    with stand_in() as (url, seen):
        store = support.StateStore(rest_store.binary, api_url=url, env=TOKEN_ENV)
        assert store.run("set", "nan", "NaN", *SCOPE, ok=False).code == USAGE
    assert [r for r in seen if r.method != "GET"] == []


def test_the_value_size_limit(task, airflow, rest_store) -> None:
    """65,535 bytes as stored is the limit: at it, written; one over, exit 2 with one short
    line (Airflow's 422 echoes the whole value), and nothing written."""
    at_limit = json.dumps("x" * 65533)
    assert len(at_limit.encode()) == 65535
    rest_store.run("set", "at", "-", *task.args(), stdin=at_limit)
    assert airflow.get(task, "at") == at_limit
    result = rest_store.run("set", "over", "-", *task.args(), stdin=OVER_LIMIT, ok=False)
    assert result.code == USAGE and result.stdout == "", result
    assert len(result.stderr) < 1000 and result.stderr.count("\n") <= 2, result.stderr[:2000]
    # Escapes count as stored: 10,923 × "\u00fc" (6 bytes each) is over, 10,922 is not.
    result = rest_store.run("set", "escaped", "-", *task.args(), stdin=json.dumps("ü" * 10923), ok=False)
    assert result.code == USAGE, result
    assert airflow.task_keys(task) == ["at"]


DB_ONLY = {
    "clean": ["clean", "--dry-run"],
    "stats": ["stats"],
    "doctor": ["doctor"],
    "export": ["export", "--file", "{tmp}/out.jsonl"],
    "import": ["import", "{tmp}/in.jsonl"],
    "set_allow_missing_task_instance": ["set", "k", "1", *SCOPE, "--allow-missing-task-instance"],
    "delete_allow_missing_task_instance": ["delete", "k", *SCOPE, "--allow-missing-task-instance"],
    "set_allow_large": ["set", "k", "1", *SCOPE, "--allow-large"],
    "list_store_wide": ["list"],
    "list_assets": ["list", "--assets"],
    "list_dag": ["list", "--dag-id", "d"],
    "list_dag_run": ["list", "--dag-id", "d", "--run-id", "r"],
    "list_task_across_runs": ["list", "--dag-id", "d", "--task-id", "t"],
}


@pytest.mark.parametrize("case", DB_ONLY, ids=list(DB_ONLY))
def test_db_only_commands_and_flags_are_refused(case, run, tmp_path) -> None:
    """What the API cannot do is refused with exit 2 before anything is sent."""
    (tmp_path / "in.jsonl").write_text("")
    args = [a.replace("{tmp}", str(tmp_path)) for a in DB_ONLY[case]]
    with stand_in() as (url, seen):
        store = support.StateStore(run["binary"], api_url=url, env=TOKEN_ENV)
        result = store.run(*args, ok=False)
    assert result.code == USAGE and result.stdout == "", result
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result
    assert [r for r in seen if not r.path.endswith("/api/v2/version")] == [], "the refused command sent requests"
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("other", [["--conn", "sqlite:////nonexistent.db"], ["--config", "/nonexistent/airflow.cfg"]])
def test_api_url_with_a_database_flag_is_refused(other, run) -> None:
    with stand_in() as (url, seen):
        store = support.StateStore(run["binary"], api_url=url, env=TOKEN_ENV)
        result = store.run(*other, "get", "k", *SCOPE, ok=False)
    assert result.code == USAGE, result
    assert seen == []


#: Keys that sort differently by bytes (the database transport's order on every database) and
#: by an `en-US` collation (PostgreSQL's, which Airflow's REST API sorts in).
COLLATION_KEYS = ["B", "a", "A", "_x", "a-b", "ab", "a_b", "Z9", "z", "é", "e", "f", "10", "9", " lead"]


def test_list_order_against_the_database_collation(rest_store, db_store, airflow, dialect) -> None:
    """Both transports list the same entries. The database transport orders keys by their bytes
    on every database; the API sorts in the database's collation and pages in that order. Where
    the collation is not the byte order (PostgreSQL `en-US`: `a A a_b a-b ab B`), the REST
    listing keeps the API's order, which is Airflow's own (`task_keys`): the one difference of
    stdout between the transports (see docs/compatibility.md)."""
    task = airflow.add_dag_run()
    asset = airflow.add_asset()
    for key in COLLATION_KEYS:
        airflow.backend_set(task, key, "1", None)
        airflow.asset_set(asset, key, 1)
    byte_order = sorted(COLLATION_KEYS, key=lambda k: k.encode())
    for scope in (task.args(), ["--asset-id", str(asset.id)]):
        rest = rest_store.json("list", *scope, "--limit", "0")
        db = db_store.json("list", *scope, "--limit", "0")
        assert sorted(map(json.dumps, rest)) == sorted(map(json.dumps, db))
        assert [e["key"] for e in db] == byte_order
        if dialect == "postgres":
            assert [e["key"] for e in rest] == airflow.task_keys(task) != byte_order
        else:
            assert rest == db
