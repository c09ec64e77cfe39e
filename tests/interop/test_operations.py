"""The deployments of docs/operations.md, checked by the tools that run them.

The Kubernetes CronJob is validated against Kubernetes's own schema and its script is run as
the container runs it, pushing its metrics to a local stand-in for the Pushgateway; the DAG is
run by Airflow itself with `airflow dags test` on this tier's metastore. The systemd units and
the cron line are checked by the integration tests (tests/cli.rs), with systemd-analyze.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import os
import subprocess
import threading
from pathlib import Path

import support
import yaml
from support import utcnow

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations"


def _cronjob() -> dict:
    (manifest,) = list(yaml.safe_load_all((OPERATIONS / "cronjob.yaml").read_text()))
    return manifest


def _path_with_state_store(binary: str, tmp_path: Path) -> str:
    """PATH with this tier's binary on it as `state-store`, the name the deployments call."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "state-store").symlink_to(Path(binary).resolve())
    return f"{bin_dir}:{os.environ['PATH']}"


def _expired_key(airflow, state_store) -> support.Task:
    run = airflow.add_dag_run()
    state_store.run("set", "gone", "1", *run.args(), "--expires-at", support.iso(utcnow() - dt.timedelta(days=1)))
    return run


def test_kubernetes_cronjob_is_valid_for_kubernetes() -> None:
    import kubernetes_validate

    manifest = _cronjob()
    kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
    assert manifest["kind"] == "CronJob" and manifest["spec"]["concurrencyPolicy"] == "Forbid"


def test_kubernetes_cronjob_script_cleans_and_pushes_its_metrics(airflow, state_store, run, tmp_path) -> None:
    container = _cronjob()["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    script = container["args"][0].replace("/metrics/state_store_clean.prom", f"{tmp_path}/state_store_clean.prom")
    pushed: list[tuple[str, bytes]] = []

    class Pushgateway(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the handler's name is http.server's)
            pushed.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Pushgateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        task = _expired_key(airflow, state_store)
        env = {
            **os.environ,
            "PATH": _path_with_state_store(run["binary"], tmp_path),
            "PUSHGATEWAY_URL": f"http://127.0.0.1:{server.server_port}",
        }
        proc = subprocess.run([*container["command"], script], env=env, capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc
    assert json.loads(proc.stdout)["task_rows_deleted"] >= 1
    assert state_store.run("get", "gone", *task.args(), ok=False).code == 1
    assert pushed == [("/metrics/job/state_store_clean", (tmp_path / "state_store_clean.prom").read_bytes())]
    assert b"state_store_clean_exit_code 0\n" in pushed[0][1]


def test_airflow_dag_runs_the_clean(airflow, state_store, run, tmp_path) -> None:
    task = _expired_key(airflow, state_store)
    metrics = tmp_path / "state_store_clean.prom"
    env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(OPERATIONS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PATH": _path_with_state_store(run["binary"], tmp_path),
        "STATE_STORE_METRICS_FILE": str(metrics),
    }
    support.airflow_cli("dags", "test", "state_store_clean", env=env, timeout=300)
    assert state_store.run("get", "gone", *task.args(), ok=False).code == 1
    assert "state_store_clean_exit_code 0\n" in metrics.read_text()
