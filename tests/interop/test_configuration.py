"""The metastore found the way Airflow finds it: through the `airflow.cfg` that `airflow db
migrate` wrote, and through every URL form Airflow accepts for the dialect."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

import support


def test_finds_the_metastore_through_airflow_cfg(task, airflow, state_store, metastore, tmp_path, monkeypatch) -> None:
    """The `airflow.cfg` Airflow generated, with `sql_alchemy_conn` set as an operator sets it
    (and `$AIRFLOW_CONFIG` pointing at it): every other option as Airflow wrote it."""
    generated = (Path(os.environ["AIRFLOW_HOME"]) / "airflow.cfg").read_text()
    lines = [
        f"sql_alchemy_conn = {metastore.replace('%', '%%')}" if line.startswith("sql_alchemy_conn =") else line
        for line in generated.splitlines()
    ]
    assert lines != generated.splitlines(), "airflow.cfg has no sql_alchemy_conn line"
    (tmp_path / "airflow.cfg").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("AIRFLOW_CONFIG", str(tmp_path / "airflow.cfg"))
    monkeypatch.delenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")

    airflow.worker_set(task, "k", {"from": "airflow.cfg"})
    assert state_store.json("get", "k", *task.args())["value"] == {"from": "airflow.cfg"}


def _url_forms(dialect: str, url: str) -> list[str]:
    u = make_url(url)
    if dialect == "sqlite":
        return [url, f"sqlite:///{os.path.relpath(u.database)}"]
    if dialect == "postgres":
        return [
            u.set(drivername="postgresql").render_as_string(hide_password=False),
            u.set(drivername="postgresql+psycopg2").render_as_string(hide_password=False),
            u.set(drivername="postgresql+psycopg").render_as_string(hide_password=False),
            u.set(drivername="postgresql", query={"sslmode": "disable"}).render_as_string(hide_password=False),
        ]
    return [
        u.set(drivername="mysql").render_as_string(hide_password=False),
        u.set(drivername="mysql+pymysql").render_as_string(hide_password=False),
        u.set(drivername="mysql+mysqldb").render_as_string(hide_password=False),
        u.set(drivername="mysql+pymysql", query={"charset": "utf8mb4"}).render_as_string(hide_password=False),
    ]


@pytest.mark.parametrize("form", range(4))
def test_airflow_url_forms(form, dialect, metastore, task, airflow, state_store) -> None:
    forms = _url_forms(dialect, metastore)
    url = forms[form % len(forms)]
    airflow.worker_set(task, "k", [form])
    got = support.StateStore(state_store.binary, conn=url).json("get", "k", *task.args())
    assert json.dumps(got["value"]) == json.dumps([form]), url
