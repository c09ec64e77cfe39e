"""Step 1: the project's own schema code (`state-store sandbox create`, used by the demo and the
Rust suite) creates what `airflow db migrate` creates: the same columns, types, defaults, keys
and indexes for the two state-store tables and `task_instance`, and for the columns the tool
uses of `dag_run`, `asset` and `asset_active`. And a schema the tool does not know is refused, not guessed at."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import create_engine, text

import support

#: table -> the columns compared (None: every column, and the table's options too).
TABLES: dict[str, tuple[str, ...] | None] = {
    "task_state_store": None,
    "asset_state_store": None,
    "dag_run": ("id", "dag_id", "run_id"),
    "task_instance": None,
    "asset": ("id", "name", "uri"),
    "asset_active": ("name", "uri"),
}


@pytest.fixture(scope="module")
def sandbox(run: dict, databases: support.Databases) -> str:
    url = databases.create("sandbox")
    support.StateStore(run["binary"], conn=url).run("sandbox", "create")
    return url


@pytest.mark.parametrize("table", list(TABLES))
def test_sandbox_schema_matches_airflow_db_migrate(table: str, metastore: str, sandbox: str) -> None:
    used = TABLES[table]
    airflow = support.describe_table(metastore, table, used)
    ours = support.describe_table(sandbox, table, used)
    for aspect in airflow:
        assert ours[aspect] == airflow[aspect], f"{table}: {aspect} differs from `airflow db migrate`"


def test_sandbox_is_stamped_with_airflow_33_revision(metastore: str, sandbox: str) -> None:
    for url in (metastore, sandbox):
        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [
                    support.AIRFLOW_33_REVISION
                ], url
        finally:
            engine.dispose()


def _altered_metastore(databases: support.Databases, role: str, *statements: str) -> tuple[str, support.Task]:
    """A metastore made by `airflow db migrate`, with an expired and a current key, then altered
    by `statements` into a schema of another Airflow version."""
    url = databases.create(role)
    support.airflow_cli("db", "migrate", env={"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url})
    airflow = support.Airflow(engine_url=url)
    try:
        task = airflow.add_dag_run()
        airflow.backend_set(task, "expired", "1", support.utcnow() - dt.timedelta(days=1))
        airflow.backend_set(task, "current", "2", None)
        with airflow.session() as s:
            for statement in statements:
                s.execute(text(statement))
    finally:
        airflow.dispose()
    return url, task


def _rows(url: str, table: str) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return sorted(tuple(r) for r in conn.execute(text(f"SELECT * FROM {table}")))
    finally:
        engine.dispose()


def _every_command(tool: support.StateStore, task: support.Task) -> list[support.Result]:
    return [
        tool.run("get", "current", *task.args(), ok=False),
        tool.run("set", "current", '"x"', *task.args(), ok=False),
        tool.run("delete", "current", *task.args(), ok=False),
        tool.run("clear", "--yes", *task.args(), ok=False),
        tool.run("list", ok=False),
        tool.run("clean", "--dry-run", ok=False),
        tool.run("clean", ok=False),
    ]


#: How Airflow 3.4 changes task_state_store: a `region_id` column, part of the unique key.
#: (SQLite cannot change a constraint in place; there the column alone stands for it.)
AIRFLOW_34 = {
    "sqlite": ["ALTER TABLE task_state_store ADD COLUMN region_id VARCHAR(250)"],
    "postgres": [
        "ALTER TABLE task_state_store ADD COLUMN region_id VARCHAR(250)",
        "ALTER TABLE task_state_store DROP CONSTRAINT task_state_store_uq",
        "ALTER TABLE task_state_store ADD CONSTRAINT task_state_store_uq "
        "UNIQUE (dag_run_id, task_id, map_index, region_id, key)",
    ],
    "mysql": [
        "ALTER TABLE task_state_store ADD COLUMN region_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin",
        "ALTER TABLE task_state_store DROP INDEX task_state_store_uq, ADD CONSTRAINT task_state_store_uq "
        "UNIQUE (dag_run_id, task_id, map_index, region_id, `key`)",
    ],
}


def test_airflow_34_schema_with_region_id_is_refused(run: dict, databases: support.Databases, dialect: str) -> None:
    """Airflow 3.4 makes `task_state_store.region_id` part of the unique key: a tool written for
    3.3 would upsert on the wrong key and read across regions, so every command refuses (exit 5)
    before it reads or writes anything."""
    url, task = _altered_metastore(databases, "v34", *AIRFLOW_34[dialect])
    try:
        before = _rows(url, "task_state_store")
        for result in _every_command(support.StateStore(run["binary"], conn=url), task):
            assert result.code == 5, result
            assert "region_id" in result.stderr and "3.4" in result.stderr, result
        assert _rows(url, "task_state_store") == before
    finally:
        databases.drop(url)


def test_pre_release_table_names_are_refused(run: dict, databases: support.Databases, dialect: str) -> None:
    rename = "RENAME TABLE {} TO {}" if dialect == "mysql" else "ALTER TABLE {} RENAME TO {}"
    url, task = _altered_metastore(
        databases,
        "prerelease",
        rename.format("task_state_store", "task_state"),
        rename.format("asset_state_store", "asset_state"),
    )
    try:
        before = _rows(url, "task_state")
        for result in _every_command(support.StateStore(run["binary"], conn=url), task):
            assert result.code == 5, result
            assert "task_state" in result.stderr and "pre-release" in result.stderr, result
        assert _rows(url, "task_state") == before
    finally:
        databases.drop(url)
