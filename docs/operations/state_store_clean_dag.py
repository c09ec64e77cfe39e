"""The nightly clean of the Airflow state store as a DAG of Airflow itself.

Put this file in the dags folder. The worker runs `state-store clean` with the worker's own
configuration (AIRFLOW_HOME, AIRFLOW__DATABASE__SQL_ALCHEMY_CONN), so it needs no connection
of its own; `state-store` must be on the worker's PATH (pip install it into Airflow's
virtualenv). See docs/operations.md.
"""

from __future__ import annotations

import datetime as dt

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

# Where node_exporter's textfile collector looks, on the worker that runs the task. The run
# writes its metrics there only where that directory exists, so the DAG runs as shipped on a
# worker without node_exporter. STATE_STORE_METRICS_FILE, in the worker's environment, names
# another file (its directory must exist: a wrong path fails the task with exit 2), or, empty,
# turns the metrics off.
METRICS_DIR = "/var/lib/node_exporter/textfile_collector"
METRICS = (
    'if [ -n "${STATE_STORE_METRICS_FILE+set}" ]; then'
    ' metrics=(${STATE_STORE_METRICS_FILE:+--metrics-file "$STATE_STORE_METRICS_FILE"});'
    " elif [ -d " + METRICS_DIR + " ]; then"
    " metrics=(--metrics-file " + METRICS_DIR + "/state_store_clean.prom);"
    " else metrics=(); fi; "
)

with DAG(
    dag_id="state_store_clean",
    description="Delete expired task state and the state of inactive assets",
    schedule="30 3 * * *",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    tags=["maintenance", "state-store"],
    default_args={"retries": 0},
) as dag:
    BashOperator(
        task_id="clean",
        # The summary, progress lines and the one JSON document of the run go to the task log.
        # `exec`: the clean is the task's process, so Airflow's SIGTERM reaches it directly.
        bash_command=(
            METRICS + "exec state-store clean -o json --batch-size 10000 --sleep 100ms"
            ' --max-duration 50m --progress-every 1m "${metrics[@]}"'
        ),
        # Exit 7: another clean of the same database is still running. The task is skipped,
        # not failed; the metrics file keeps the 7, and 7 on two runs in a row fires
        # StateStoreCleanHeldOff (alerts.yml).
        skip_on_exit_code=7,
        # Longer than --max-duration: the run stops itself first, between batches. If Airflow
        # kills the task anyway, SIGTERM ends the run after its current batch.
        execution_timeout=dt.timedelta(hours=1),
    )
