"""Step 1: the project's own schema code (`state-store sandbox create`, used by the demo and the
Rust suite) creates what `airflow db migrate` creates: the same columns, types, defaults, keys
and indexes for the two state-store tables, and for the columns the tool uses of `dag_run`,
`asset` and `asset_active`. And a schema the tool does not know is refused, not guessed at."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text

import support

#: table -> the columns compared (None: every column, and the table's options too).
TABLES: dict[str, tuple[str, ...] | None] = {
    "task_state_store": None,
    "asset_state_store": None,
    "dag_run": ("id", "dag_id", "run_id"),
    "asset": ("id", "name", "uri"),
    "asset_active": ("name", "uri"),
}


def describe(url: str, table: str, used: tuple[str, ...] | None) -> dict[str, Any]:
    """What SQLAlchemy's inspector reads back from the database itself, limited to `used`."""
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


@pytest.fixture(scope="module")
def sandbox(run: dict, databases: support.Databases) -> str:
    url = databases.create("sandbox")
    support.StateStore(run["binary"], conn=url).run("sandbox", "create")
    return url


@pytest.mark.parametrize("table", list(TABLES))
def test_sandbox_schema_matches_airflow_db_migrate(table: str, metastore: str, sandbox: str) -> None:
    used = TABLES[table]
    airflow = describe(metastore, table, used)
    ours = describe(sandbox, table, used)
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


def _altered_metastore(run: dict, databases: support.Databases, role: str, *statements: str) -> tuple[str, support.StateStore]:
    url = databases.create(role)
    tool = support.StateStore(run["binary"], conn=url)
    tool.run("sandbox", "create", "--sample-data")
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))
    finally:
        engine.dispose()
    return url, tool


def _refusals(tool: support.StateStore) -> list[support.Result]:
    scope = ["--dag-id", "incremental_orders", "--run-id", "scheduled__2026-11-28T00:00:00+00:00", "--task-id", "load_new_orders"]
    return [
        tool.run("get", "watermark", *scope, ok=False),
        tool.run("set", "watermark", '"x"', *scope, ok=False),
        tool.run("list", ok=False),
        tool.run("clean", ok=False),
        tool.run("clean", "--dry-run", ok=False),
    ]


def test_airflow_34_schema_with_region_id_is_refused(run: dict, databases: support.Databases, dialect: str) -> None:
    """Airflow 3.4 adds `task_state_store.region_id` to the unique key: a tool written for 3.3
    would upsert on the wrong key and read across regions, so it must refuse (exit 5)."""
    statements = ["ALTER TABLE task_state_store ADD COLUMN region_id VARCHAR(250)"]
    url, tool = _altered_metastore(run, databases, "v34", *statements)
    try:
        engine = create_engine(url)
        with engine.connect() as conn:
            before = conn.execute(text("SELECT count(*), max(updated_at) FROM task_state_store")).one()
        for result in _refusals(tool):
            assert result.code == 5, result
            assert "region_id" in result.stderr and "3.4" in result.stderr, result
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*), max(updated_at) FROM task_state_store")).one() == before
        engine.dispose()
    finally:
        databases.drop(url)


def test_pre_release_table_names_are_refused(run: dict, databases: support.Databases, dialect: str) -> None:
    rename = {
        "sqlite": "ALTER TABLE {} RENAME TO {}",
        "postgres": "ALTER TABLE {} RENAME TO {}",
        "mysql": "RENAME TABLE {} TO {}",
    }[dialect]
    url, tool = _altered_metastore(
        run,
        databases,
        "prerelease",
        rename.format("task_state_store", "task_state"),
        rename.format("asset_state_store", "asset_state"),
    )
    try:
        for result in _refusals(tool):
            assert result.code == 5, result
            assert "task_state" in result.stderr and "pre-release" in result.stderr, result
    finally:
        databases.drop(url)
