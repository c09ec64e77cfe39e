"""Helpers of the interoperability tier: the databases of a run, our binary, and Airflow's side.

Everything that touches Airflow goes through Airflow 3.3.2's own code: its models and
`MetastoreBackend` for rows, the task SDK's accessor for the expiry a worker computes, its REST
route for the default retention, and its CLI for `db migrate` and `state-store clean`. Airflow
reads its database URL once, at import, so this module imports it lazily, after `conftest.py`
has pointed `AIRFLOW__DATABASE__SQL_ALCHEMY_CONN` at the run's database.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
import os
import re
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

UTC = dt.timezone.utc

#: The Alembic head of Airflow 3.3.2 (the same for every 3.3 release so far).
AIRFLOW_33_REVISION = "d2f4e1b3c5a7"

#: The revision before the state-store tables (migration 0112, fde9ed84d07b, Airflow 3.3.0).
AIRFLOW_32_REVISION = "9fabad868fdb"

#: How Airflow leaves a timestamp in a SQLite metastore.
SQLITE_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{6}$")

_counter = itertools.count(1)


def unique(prefix: str) -> str:
    """A name no other test of this run uses, so tests stay independent on a shared database."""
    return f"{prefix}_{os.getpid()}_{next(_counter)}"


def utcnow() -> dt.datetime:
    return dt.datetime.now(UTC)


def iso(ts: dt.datetime | None) -> str | None:
    """A timestamp as the tool prints it: UTC, microseconds, `Z`."""
    return None if ts is None else ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(text: str | None) -> dt.datetime | None:
    if text is None:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


# ── the databases of a run ────────────────────────────────────────────────────────────────────


def _server_url(dialect: str) -> str:
    var, default = {
        "postgres": ("STATE_STORE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
        "mysql": ("STATE_STORE_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/"),
    }[dialect]
    return os.environ.get(var) or default


class Databases:
    """Creates databases for one dialect (a SQLite file, or a database on the server) and drops
    them at the end of the run. The names carry the process id, so parallel runs never meet."""

    def __init__(self, dialect: str, home: Path) -> None:
        self.dialect = dialect
        self.home = home
        self.created: list[str] = []

    def url(self, name: str) -> str:
        """The SQLAlchemy URL of database `name`, in the form Airflow is configured with."""
        from sqlalchemy.engine import make_url

        if self.dialect == "sqlite":
            return f"sqlite:///{self.home / (name + '.db')}"
        server = make_url(_server_url(self.dialect))
        driver = {"postgres": "postgresql+psycopg2", "mysql": "mysql+pymysql"}[self.dialect]
        return server.set(drivername=driver, database=name).render_as_string(hide_password=False)

    def create(self, role: str) -> str:
        """A new, empty database; returns its URL."""
        name = f"state_store_interop_{os.getpid()}_{role}"
        if self.dialect == "postgres":
            # The collation of most production servers (en_US), not the byte order (C) many test
            # servers default to: it decides the order Airflow lists keys in.
            self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            try:
                self._admin(
                    f"CREATE DATABASE \"{name}\" LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8' TEMPLATE template0"
                )
            except Exception as e:  # a server before PostgreSQL 15, or built without ICU
                warnings.warn(f"PostgreSQL cannot create an en-US (ICU) database ({e}); using its default collation")
                self._admin(f'CREATE DATABASE "{name}"')
        elif self.dialect == "mysql":
            # The character set Airflow's documentation asks for.
            self._admin(
                f"DROP DATABASE IF EXISTS `{name}`",
                f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci",
            )
        else:
            (self.home / f"{name}.db").unlink(missing_ok=True)
        self.created.append(name)
        return self.url(name)

    def drop(self, url: str) -> None:
        from sqlalchemy.engine import make_url

        u = make_url(url)
        name = Path(u.database).stem if self.dialect == "sqlite" else u.database
        if self.dialect == "postgres":
            self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        elif self.dialect == "mysql":
            self._admin(f"DROP DATABASE IF EXISTS `{name}`")
        else:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{u.database}{suffix}").unlink(missing_ok=True)
        if name in self.created:
            self.created.remove(name)

    def drop_all(self) -> None:
        for name in list(self.created):
            self.drop(self.url(name))

    def _admin(self, *statements: str) -> None:
        from sqlalchemy.engine import make_url

        server = make_url(_server_url(self.dialect))
        if self.dialect == "postgres":
            import psycopg2

            conn = psycopg2.connect(
                host=server.host,
                port=server.port or 5432,
                user=server.username,
                password=server.password or "",
                dbname=server.database or "postgres",
                connect_timeout=10,
            )
            conn.autocommit = True
        else:
            import pymysql

            conn = pymysql.connect(
                host=server.host,
                port=server.port or 3306,
                user=server.username,
                password=server.password or "",
                connect_timeout=10,
                autocommit=True,
            )
        try:
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
        finally:
            conn.close()


def describe_table(url: str, table: str, used: tuple[str, ...] | None = None) -> dict[str, Any]:
    """What SQLAlchemy's inspector reads back from the database itself, limited to `used`."""
    from sqlalchemy import create_engine, inspect

    engine = create_engine(url)
    try:
        insp = inspect(engine)

        def within(names: list[str]) -> bool:
            return used is None or set(names) <= set(used)

        columns = {
            c["name"]: {k: repr(v) if k == "type" else v for k, v in sorted(c.items()) if k != "comment"}
            for c in insp.get_columns(table)
            if used is None or c["name"] in used
        }
        pk = insp.get_pk_constraint(table)
        described = {
            "columns": columns,
            "column order": list(columns),
            "primary key": (pk["name"], tuple(pk["constrained_columns"])),
            "unique constraints": sorted(
                (u["name"], tuple(u["column_names"]))
                for u in insp.get_unique_constraints(table)
                if within(u["column_names"])
            ),
            "foreign keys": sorted(
                (
                    f["name"],
                    tuple(f["constrained_columns"]),
                    f["referred_table"],
                    tuple(f["referred_columns"]),
                    tuple(sorted(f["options"].items())),
                )
                for f in insp.get_foreign_keys(table)
                if within(f["constrained_columns"])
            ),
            "indexes": sorted(
                (i["name"], tuple(i["column_names"]), bool(i["unique"]), repr(sorted(i.get("dialect_options", {}).items())))
                for i in insp.get_indexes(table)
                if within(i["column_names"])
            ),
        }
        if used is None:
            described["table options"] = insp.get_table_options(table)
        return described
    finally:
        engine.dispose()


def airflow_cli(*args: str, env: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Runs Airflow's own CLI from the venv this tier runs in."""
    airflow = Path(sys.executable).with_name("airflow")
    proc = subprocess.run(
        [str(airflow), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"`airflow {' '.join(args)}` exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
            f"\n--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc


# ── our binary ────────────────────────────────────────────────────────────────────────────────


_ESCAPES = re.compile(r"\\(?:([tnr\\])|x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8}))")


def plain_fields(line: str) -> list[str]:
    """The fields of a line of `list -o plain` (docs/output.md): tab-separated, each escaped
    as Python's repr writes hidden characters, with backslashes doubled."""

    def unescape(m: re.Match) -> str:
        short, *codes = m.groups()
        if short:
            return {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}[short]
        return chr(int(next(c for c in codes if c), 16))

    return [_ESCAPES.sub(unescape, field) for field in line.split("\t")]


@dataclasses.dataclass(frozen=True)
class Task:
    """A task scope: the task instance `(dag_id, run_id, task_id, map_index)`."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1

    def args(self) -> list[str]:
        return [
            "--dag-id", self.dag_id,
            "--run-id", self.run_id,
            "--task-id", self.task_id,
            "--map-index", str(self.map_index),
        ]  # fmt: skip

    def sibling(self, task_id: str, map_index: int | None = None) -> Task:
        return dataclasses.replace(self, task_id=task_id, map_index=self.map_index if map_index is None else map_index)


@dataclasses.dataclass(frozen=True)
class Asset:
    id: int
    name: str
    uri: str


class Result:
    def __init__(self, cmd: list[str], proc: subprocess.CompletedProcess) -> None:
        self.cmd = cmd
        self.code = proc.returncode
        self.stdout = proc.stdout.decode()
        self.stderr = proc.stderr.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.stdout)

    def __repr__(self) -> str:
        cmd = [arg if len(arg) < 200 else arg[:200] + "…" for arg in self.cmd]
        return f"{cmd!r} exited {self.code}\n--- stdout\n{self.stdout[:2000]}\n--- stderr\n{self.stderr[:2000]}"


class StateStore:
    """Our binary, run the way a person on the Airflow machine runs it: it finds the metastore
    through Airflow's own configuration (`AIRFLOW_HOME/airflow.cfg`, as `airflow db migrate`
    left it, and `AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`) unless `conn` names another database,
    or `api_url` sends it to Airflow's REST API instead (with `env` holding its token)."""

    def __init__(
        self, binary: str, conn: str | None = None, api_url: str | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.binary = binary
        self.conn = conn
        self.api_url = api_url
        self.env = env or {}

    def run(self, *args: str, stdin: str | None = None, env: dict[str, str] | None = None, ok: bool = True) -> Result:
        cmd = [
            self.binary,
            *(["--conn", self.conn] if self.conn else []),
            *(["--api-url", self.api_url] if self.api_url else []),
            *map(str, args),
        ]
        # Bytes, decoded here: text mode would turn a `\r` in a printed value into `\n`.
        proc = subprocess.run(
            cmd,
            capture_output=True,
            input=None if stdin is None else stdin.encode(),
            env={**os.environ, **self.env, **(env or {})},
            timeout=120,
            stdin=None if stdin is not None else subprocess.DEVNULL,
        )
        result = Result(cmd, proc)
        if ok and result.code != 0:
            raise AssertionError(f"state-store failed: {result!r}")
        return result

    def json(self, *args: str, **kwargs: Any) -> Any:
        return self.run(*args, "-o", "json", **kwargs).json()


# ── Airflow's side ────────────────────────────────────────────────────────────────────────────


class Airflow:
    """Airflow 3.3.2 in this process: on the run's metastore (Airflow's own engine, as
    configured), or on another database through an engine of its own, set up with Airflow's
    connection handlers (`engine_url`). Every backend call gets an explicit session, so the two
    never mix."""

    def __init__(self, engine_url: str | None = None) -> None:
        from airflow._shared.state import AssetScope, AssetStateStoreWriterKind, TaskScope
        from airflow.models.asset import AssetActive, AssetModel
        from airflow.models.asset_state_store import AssetStateStoreModel
        from airflow.models.dagrun import DagRun
        from airflow.models.task_state_store import TaskStateStoreModel
        from airflow.models.taskinstance import TaskInstance
        from airflow.state.metastore import MetastoreBackend

        self.backend = MetastoreBackend()
        self.TaskScope = TaskScope
        self.AssetScope = AssetScope
        self.Kind = AssetStateStoreWriterKind
        self.DagRun = DagRun
        self.TaskInstance = TaskInstance
        self.AssetModel = AssetModel
        self.AssetActive = AssetActive
        self.TaskRow = TaskStateStoreModel
        self.AssetRow = AssetStateStoreModel
        if engine_url is None:
            from airflow import settings

            self._engine = settings.engine
            self._sessions = settings.Session
        else:
            from sqlalchemy import create_engine
            from sqlalchemy.orm import sessionmaker

            from airflow.utils.orm_event_handlers import setup_event_handlers

            self._engine = create_engine(engine_url)
            # SQLite's foreign keys, MySQL's `SET time_zone = '+00:00'`: as on Airflow's engine.
            setup_event_handlers(self._engine)
            self._sessions = sessionmaker(bind=self._engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Any]:
        session = self._sessions()
        try:
            yield session
            session.commit()
        except Exception:
            session.rollback()
            raise
        finally:
            session.close()

    @property
    def dialect(self) -> str:
        return self._engine.dialect.name

    def dispose(self) -> None:
        self._engine.dispose()

    # rows Airflow's scheduler and asset manager would have created

    #: The tasks every dag run of this tier has an unmapped instance of: the tests' own task,
    #: and the pair that writes the same value through state-store and through Airflow.
    TASKS = ("extract", "ours", "airflow")

    def add_dag_run(
        self, dag_id: str | None = None, run_id: str | None = None, tasks: tuple[str, ...] = TASKS
    ) -> Task:
        """A running manual dag run with an unmapped instance of each of `tasks`, as the scheduler
        inserts them, and the dag's own row as the dag processor leaves it (Airflow's REST API
        reads it with the task instances); returns the scope of the first task in it."""
        from sqlalchemy import insert

        from airflow.models.dag import DagModel
        from airflow.models.dagbundle import DagBundleModel
        from airflow.utils.types import DagRunTriggeredByType

        dag_id = dag_id or unique("interop_dag")
        now = utcnow()
        run_id = run_id or f"manual__{now.isoformat()}"
        with self.session() as s:
            if s.get(DagBundleModel, "interop") is None:
                s.add(DagBundleModel(name="interop"))
                s.flush()
            if s.get(DagModel, dag_id) is None:
                s.add(DagModel(dag_id=dag_id, bundle_name="interop", fileloc=f"/interop/dags/{dag_id}.py"))
        with self.session() as s:
            s.execute(
                insert(self.DagRun.__table__).values(
                    dag_id=dag_id,
                    run_id=run_id,
                    run_type="manual",
                    # The enum, not its value: the column holds the member's name (`CLI`),
                    # and Airflow's REST API fails (500) on a run it cannot read back.
                    triggered_by=DagRunTriggeredByType.CLI,
                    state="running",
                    logical_date=now,
                    run_after=now,
                    queued_at=now,
                    start_date=now,
                    data_interval_start=now,
                    data_interval_end=now,
                    conf={},
                    created_at=now,
                    updated_at=now,
                    clear_number=0,
                    span_status="not_started",
                )
            )
        task = Task(dag_id, run_id, tasks[0])
        for task_id in tasks:
            self.add_task_instance(task.sibling(task_id, -1))
        return task

    def add_task_instance(self, task: Task, *map_indexes: int) -> Task:
        """Task instances as the scheduler creates them (no state yet): one per map index, as a
        mapped task expands, or the one of `task` without any. Returns `task`."""
        import uuid

        from sqlalchemy import insert

        with self.session() as s:
            for map_index in map_indexes or (task.map_index,):
                s.execute(
                    insert(self.TaskInstance.__table__).values(
                        id=uuid.uuid4(),
                        dag_id=task.dag_id,
                        run_id=task.run_id,
                        task_id=task.task_id,
                        map_index=map_index,
                        try_number=0,
                        max_tries=0,
                        pool="default_pool",
                        pool_slots=1,
                        queue="default",
                        priority_weight=1,
                        operator="PythonOperator",
                        span_status="not_started",
                    )
                )
        return task

    def rest_api_finds_task_instance(self, task: Task, all_map_indices: bool = False) -> bool:
        """Whether Airflow's REST API lets a set, delete or clear through to `task` (its
        `_require_task_instance` answers 404 "Task instance not found" otherwise)."""
        from fastapi import HTTPException

        from airflow.api_fastapi.core_api.routes.public.task_state_store import _require_task_instance

        with self.session() as s:
            try:
                map_index = None if all_map_indices else task.map_index
                _require_task_instance(task.dag_id, task.run_id, task.task_id, map_index, s)
            except HTTPException as e:
                assert e.status_code == 404 and "Task instance not found" in str(e.detail), e
                return False
        return True

    def add_asset(self, name: str | None = None, uri: str | None = None, *, active: bool = True) -> Asset:
        from sqlalchemy import insert

        name = name or unique("interop_asset")
        uri = uri or f"s3://interop/{name}/"
        now = utcnow()
        with self.session() as s:
            result = s.execute(
                insert(self.AssetModel.__table__).values(
                    name=name, uri=uri, group="asset", extra={}, created_at=now, updated_at=now
                )
            )
            asset_id = result.inserted_primary_key[0]
            if active:
                s.execute(insert(self.AssetActive.__table__).values(name=name, uri=uri))
        return Asset(asset_id, name, uri)

    def activate(self, asset: Asset, name: str | None = None, uri: str | None = None) -> None:
        from sqlalchemy import insert

        with self.session() as s:
            s.execute(insert(self.AssetActive.__table__).values(name=name or asset.name, uri=uri or asset.uri))

    def deactivate(self, asset: Asset) -> None:
        """What the scheduler does when no dag references the asset any more."""
        from sqlalchemy import delete

        t = self.AssetActive.__table__
        with self.session() as s:
            s.execute(delete(t).where(t.c.name == asset.name, t.c.uri == asset.uri))

    # writes, as each Airflow writer makes them

    def task_scope(self, task: Task) -> Any:
        return self.TaskScope(dag_id=task.dag_id, run_id=task.run_id, task_id=task.task_id, map_index=task.map_index)

    def worker_set(self, task: Task, key: str, value: Any, retention: Any = None) -> None:
        """`context["task_state_store"].set(key, value, retention=…)` in a task, carried to the
        metastore as Airflow carries it: the task SDK computes `expires_at` on the worker and
        sends it with the value, and the execution API stores `json.dumps(value)`."""
        from airflow.sdk._shared.state import TaskScope as SdkTaskScope
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.context import TaskStateStoreAccessor

        from airflow.api_fastapi.execution_api.datamodels.task_state_store import TaskStateStorePutBody as ApiBody
        from airflow.sdk.api.datamodels._generated import TaskStateStorePutBody as ClientBody

        airflow, scope = self, self.task_scope(task)

        class Supervisor:
            def send(self, msg: Any) -> None:
                # The supervisor's API client sends the value and expiry as a JSON body; the
                # execution API parses it and stores json.dumps(body.value).
                wire = ClientBody(value=msg.value, expires_at=msg.expires_at).model_dump_json()
                body = ApiBody.model_validate_json(wire)
                with airflow.session() as s:
                    airflow.backend.set(scope, msg.key, json.dumps(body.value), expires_at=body.expires_at, session=s)

        previous = getattr(task_runner, "SUPERVISOR_COMMS", None)
        task_runner.SUPERVISOR_COMMS = Supervisor()
        try:
            accessor = TaskStateStoreAccessor(
                ti_id=uuid.uuid4(),
                scope=SdkTaskScope(dag_id=task.dag_id, run_id=task.run_id, task_id=task.task_id, map_index=task.map_index),
            )
            if retention is None:
                accessor.set(key, value)
            else:
                accessor.set(key, value, retention=retention)
        finally:
            if previous is None:
                del task_runner.SUPERVISOR_COMMS
            else:
                task_runner.SUPERVISOR_COMMS = previous

    def task_reads(self, task: Task, key: str) -> Any:
        """`context["task_state_store"].get(key)` in a task: the execution API answers with
        `json.loads` of the stored text, and the worker's API client parses that answer."""
        from airflow.api_fastapi.execution_api.datamodels.task_state_store import TaskStateStoreResponse as Api
        from airflow.sdk.api.datamodels._generated import TaskStateStoreResponse as Client

        stored = self.get(task, key)
        return Client.model_validate_json(Api(value=json.loads(stored)).model_dump_json()).value

    def asset_reads(self, asset: Asset, key: str) -> Any:
        """A task's read of an asset key, through the execution API as `task_reads`."""
        from airflow.api_fastapi.execution_api.datamodels.asset_state_store import AssetStateStoreResponse as Api
        from airflow.sdk.api.datamodels._generated import AssetStateStoreResponse as Client

        stored = self.get(asset, key)
        return Client.model_validate_json(Api(value=json.loads(stored)).model_dump_json()).value

    def rest_api_stores(self, text: str) -> str | None:
        """What Airflow's REST API stores for a PUT of `{"value": <text>}`, or None when it
        refuses the body (null, non-finite numbers, too long, not parseable)."""
        from airflow.api_fastapi.core_api.datamodels.task_state_store import TaskStateStoreBody

        try:
            body = TaskStateStoreBody.model_validate_json('{"value": ' + text + "}")
        except ValueError:
            return None
        return json.dumps(body.value)

    def never_expire(self) -> Any:
        from airflow.sdk.execution_time.context import NEVER_EXPIRE

        return NEVER_EXPIRE

    def backend_set(self, task: Task, key: str, stored: str, expires_at: dt.datetime | None) -> None:
        """`MetastoreBackend.set` with an explicit expiry (the REST API's `expires_at`)."""
        with self.session() as s:
            self.backend.set(self.task_scope(task), key, stored, expires_at=expires_at, session=s)

    def default_expires_at(self) -> dt.datetime | None:
        """The expiry Airflow's REST API gives a write without one: `[state_store]
        default_retention_days` from now, read by Airflow's own configuration."""
        from airflow.api_fastapi.core_api.routes.public.task_state_store import _resolve_expires_at

        return _resolve_expires_at("default")

    def asset_set(
        self, asset: Asset, key: str, value: Any, kind: str | None = "api", task: Task | None = None
    ) -> None:
        """An asset write: `api` as the REST API makes it, `task` as a task's write through the
        execution API, `watcher` as an event trigger's, or None as a plain backend `set`."""
        scope = self.AssetScope(asset_id=asset.id)
        stored = json.dumps(value)
        writer = {}
        if kind == "task":
            assert task is not None
            writer = dict(dag_id=task.dag_id, run_id=task.run_id, task_id=task.task_id, map_index=task.map_index)
        with self.session() as s:
            if kind is None:
                self.backend.set(scope, key, stored, session=s)
            else:
                self.backend.set_asset_state_store(scope, key, stored, kind=self.Kind(kind), session=s, **writer)

    def delete(self, scope: Task | Asset, key: str) -> None:
        with self.session() as s:
            self.backend.delete(self._scope(scope), key, session=s)

    def clear(self, scope: Task | Asset, all_map_indices: bool = False) -> None:
        with self.session() as s:
            if isinstance(scope, Task):
                self.backend.clear(self._scope(scope), all_map_indices=all_map_indices, session=s)
            else:
                self.backend.clear(self._scope(scope), session=s)

    def _scope(self, scope: Task | Asset) -> Any:
        return self.task_scope(scope) if isinstance(scope, Task) else self.AssetScope(asset_id=scope.id)

    # reads

    def get(self, scope: Task | Asset, key: str) -> str | None:
        with self.session() as s:
            return self.backend.get(self._scope(scope), key, session=s)

    def task_row(self, task: Task, key: str) -> dict[str, Any] | None:
        """The row as Airflow's model reads it (timestamps aware, in UTC)."""
        from sqlalchemy import select

        m = self.TaskRow
        with self.session() as s:
            row = s.scalar(
                select(m).where(
                    m.dag_id == task.dag_id,
                    m.run_id == task.run_id,
                    m.task_id == task.task_id,
                    m.map_index == task.map_index,
                    m.key == key,
                )
            )
            return None if row is None else {c.name: getattr(row, c.key) for c in m.__table__.columns}

    def task_keys(self, task: Task) -> list[str]:
        """The keys of a task instance in the order Airflow's REST API lists them."""
        from sqlalchemy import select

        m = self.TaskRow
        with self.session() as s:
            return list(
                s.scalars(
                    select(m.key)
                    .where(
                        m.dag_id == task.dag_id,
                        m.run_id == task.run_id,
                        m.task_id == task.task_id,
                        m.map_index == task.map_index,
                    )
                    .order_by(m.key.asc())
                )
            )

    def task_rows_of_dag(self, dag_id: str) -> dict[tuple[str, int, str], dict[str, Any]]:
        from sqlalchemy import select

        m = self.TaskRow
        with self.session() as s:
            rows = s.scalars(select(m).where(m.dag_id == dag_id)).all()
            return {(r.task_id, r.map_index, r.key): {"value": r.value, "expires_at": r.expires_at} for r in rows}

    def asset_row(self, asset: Asset, key: str) -> dict[str, Any] | None:
        from sqlalchemy import select

        m = self.AssetRow
        with self.session() as s:
            row = s.scalar(select(m).where(m.asset_id == asset.id, m.key == key))
            return None if row is None else {c.name: getattr(row, c.key) for c in m.__table__.columns}

    def asset_rows(self, asset_ids: list[int]) -> set[tuple[int, str]]:
        from sqlalchemy import select

        m = self.AssetRow
        with self.session() as s:
            return {(r.asset_id, r.key) for r in s.execute(select(m.asset_id, m.key).where(m.asset_id.in_(asset_ids)))}

    def raw_task_row(self, row_id: int) -> dict[str, Any]:
        """The row as the database driver returns it, untouched by Airflow's types: text on
        SQLite, `timestamptz` on PostgreSQL, naive UTC (the session is at +00:00) on MySQL."""
        from sqlalchemy import text

        with self.session() as s:
            row = s.execute(
                text("SELECT value, updated_at, expires_at FROM task_state_store WHERE id = :id"), {"id": row_id}
            ).one()
            return dict(row._mapping)

    def raw_asset_row(self, asset_id: int, key: str) -> dict[str, Any]:
        from sqlalchemy import select, type_coerce
        from sqlalchemy.types import NullType

        m = self.AssetRow.__table__
        # Bypass the UtcDateTime type, so the driver's own value comes back.
        cols = [type_coerce(c, NullType()).label(c.name) for c in m.columns]
        with self.session() as s:
            row = s.execute(select(*cols).where(m.c.asset_id == asset_id, m.c.key == key)).one()
            return dict(row._mapping)

    def expired_summary(self) -> list[tuple[str, str, str, int, str]]:
        """What `airflow state-store clean --dry-run` would list (Airflow's own query; on the
        run's metastore only, as it opens its own session)."""
        return [tuple(r) for r in self.backend._summary_dry_run()["expired"]]

    def orphan_sweep_would_delete(self, asset_ids: list[int]) -> set[tuple[int, str]]:
        """The asset rows the scheduler's orphan sweep deletes, among these assets: Airflow's
        own sweep, run in a transaction that is rolled back."""
        from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

        from sqlalchemy import select

        before = self.asset_rows(asset_ids)
        m = self.AssetRow
        session = self._sessions()
        try:
            SchedulerJobRunner._cleanup_orphaned_asset_state_store(session=session)
            after = {(r.asset_id, r.key) for r in session.execute(select(m.asset_id, m.key).where(m.asset_id.in_(asset_ids)))}
        finally:
            session.rollback()
            session.close()
        return before - after

    def orphan_sweep(self) -> None:
        """The scheduler's orphan sweep, committed."""
        from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

        with self.session() as s:
            SchedulerJobRunner._cleanup_orphaned_asset_state_store(session=s)


def between(value: dt.datetime | None, low: dt.datetime, high: dt.datetime, slack_ms: int = 2) -> bool:
    """Whether `value` lies in [low, high], allowing for the microsecond truncation of storage."""
    if value is None:
        return False
    slack = dt.timedelta(milliseconds=slack_ms)
    return low - slack <= value <= high + slack


def wait_until_past(instant: dt.datetime) -> None:
    """Sleeps until `instant` is in the past (by a few milliseconds)."""
    delay = (instant - utcnow()).total_seconds() + 0.01
    if delay > 0:
        time.sleep(delay)
