"""The interoperability tier's run: one dialect per pytest process (`--dialect`).

Before any test module imports Airflow, `pytest_configure` creates the run's databases and
points Airflow at the first one through `AIRFLOW_HOME` and `AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`.
That database gets its schema from `airflow db migrate` alone, once per run (the `metastore`
fixture); every test then makes its own dag runs and assets in it, so tests never share rows.
A second database gets the project's own schema code (`state-store sandbox create`), for the
schema comparison.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import api_server as api_server_module
import support


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--dialect",
        choices=("sqlite", "postgres", "mysql"),
        required=True,
        help="the database the run creates its metastores on",
    )


def pytest_configure(config: pytest.Config) -> None:
    binary = os.environ.get("STATE_STORE_BIN")
    if not binary or not os.access(binary, os.X_OK):
        raise pytest.UsageError("STATE_STORE_BIN must name the state-store binary (tests/interop/run.sh sets it)")
    dialect = config.getoption("--dialect")
    home = Path(tempfile.mkdtemp(prefix=f"state-store-interop-{dialect}-"))
    databases = support.Databases(dialect, home)
    config.stash[_RUN] = {"dialect": dialect, "home": home, "databases": databases, "binary": binary}
    airflow_url = databases.create("airflow")
    config.stash[_RUN]["airflow_url"] = airflow_url
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": airflow_url,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        }
    )
    # A developer's own Airflow settings must not leak into the run.
    for name in list(os.environ):
        if name.startswith("AIRFLOW__") and name not in (
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
            "AIRFLOW__CORE__LOAD_EXAMPLES",
        ):
            del os.environ[name]
    os.environ.pop("AIRFLOW_CONFIG", None)
    # Nor a developer's REST settings: a test without a token must have none.
    for name in ("AIRFLOW_CLI_TOKEN", *(n for n in os.environ if n.startswith("STATE_STORE_API_"))):
        os.environ.pop(name, None)


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(_RUN, None)
    if run is None:
        return
    server = run.get("api_server")
    if server is not None:
        server.stop()
    airflow = run.get("airflow")
    if airflow is not None:
        airflow.dispose()
    run["databases"].drop_all()
    shutil.rmtree(run["home"], ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failed REST test's report ends with the tail of the API server's log."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and "api_server" in getattr(item, "fixturenames", ()):
        server = item.config.stash[_RUN].get("api_server")
        if server is not None:
            report.sections.append(("airflow api-server log", server.log_tail(40)))


def pytest_report_header(config: pytest.Config) -> list[str]:
    run = config.stash[_RUN]
    from importlib.metadata import version

    return [
        f"dialect: {run['dialect']}; apache-airflow {version('apache-airflow')}; state-store {run['binary']}",
    ]


_RUN = pytest.StashKey[dict]()


@pytest.fixture(scope="session")
def run(pytestconfig: pytest.Config) -> dict:
    return pytestconfig.stash[_RUN]


@pytest.fixture(scope="session")
def dialect(run: dict) -> str:
    return run["dialect"]


@pytest.fixture(scope="session", autouse=True)
def metastore(run: dict) -> str:
    """The run's metastore, with the schema `airflow db migrate` creates and nothing of ours."""
    started = time.monotonic()
    support.airflow_cli("db", "migrate")
    print(f"\nairflow db migrate on {run['dialect']}: {time.monotonic() - started:.1f}s")
    return run["airflow_url"]


@pytest.fixture(scope="session")
def upgraded(run: dict, databases: support.Databases, metastore: str) -> tuple[str, support.Airflow, support.StateStore]:
    """A metastore that reached Airflow 3.3 by Alembic migrations rather than by a fresh
    install: migrated, downgraded to the revision before the state-store tables (the last 3.2
    migration), and migrated again, so the tables come from migration 0112 as they do when an
    existing 3.2 metastore is upgraded. (A fresh `airflow db migrate` creates the tables from
    the models instead, and the two differ: see docs/compatibility.md.)"""
    url = databases.create("upgraded")
    env = {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url}
    started = time.monotonic()
    support.airflow_cli("db", "migrate", env=env)
    support.airflow_cli("db", "downgrade", "--to-revision", support.AIRFLOW_32_REVISION, "-y", env=env)
    support.airflow_cli("db", "migrate", env=env)
    print(f"\nupgraded metastore on {run['dialect']}: {time.monotonic() - started:.1f}s")
    airflow = support.Airflow(engine_url=url)
    yield url, airflow, support.StateStore(run["binary"], conn=url)
    airflow.dispose()


@pytest.fixture(scope="session")
def airflow(run: dict, metastore: str) -> support.Airflow:
    af = support.Airflow()
    run["airflow"] = af
    return af


@pytest.fixture(scope="session")
def state_store(run: dict, metastore: str) -> support.StateStore:
    """Our binary on the Airflow-made metastore, found through Airflow's configuration."""
    return support.StateStore(run["binary"])


@pytest.fixture(scope="session")
def databases(run: dict) -> support.Databases:
    return run["databases"]


@pytest.fixture(scope="session")
def api_server(run: dict, metastore: str) -> Iterator[api_server_module.ApiServer]:
    """Airflow's own `airflow api-server --apps core` on the run's metastore (see
    api_server.py), started by the first test that asks for it, once per run, and stopped by
    its pid at the end of the run."""
    server = api_server_module.ApiServer.start(run["home"])
    print(f"\nairflow api-server {server.version.get('version')} on {server.url}: ready in {server.ready_s:.1f}s")
    run["api_server"] = server  # pytest_unconfigure stops it too, should this teardown not run
    yield server
    server.stop()


@pytest.fixture(scope="session")
def rest_store(run: dict, api_server: api_server_module.ApiServer) -> support.StateStore:
    """Our binary on that server, as its admin: the token in `AIRFLOW_CLI_TOKEN`."""
    return support.StateStore(run["binary"], api_url=api_server.url, env={"AIRFLOW_CLI_TOKEN": api_server.token("admin")})


@pytest.fixture(scope="session")
def db_store(run: dict, metastore: str) -> support.StateStore:
    """Our binary on the same metastore through `--conn`, the other side of each comparison."""
    return support.StateStore(run["binary"], conn=metastore)


@pytest.fixture
def task(airflow: support.Airflow) -> support.Task:
    """A task instance in a dag run of its own."""
    return airflow.add_dag_run()


@pytest.fixture
def retention_days(monkeypatch: pytest.MonkeyPatch):
    """Sets `[state_store] default_retention_days` for Airflow and our binary alike."""

    def set_days(days: int) -> None:
        monkeypatch.setenv("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", str(days))

    return set_days
