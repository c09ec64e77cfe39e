#!/usr/bin/env bash
# The clean benchmark of docs/performance.md in one command: builds the release binary, then
# runs bench/bench.py (seed, clean at batch sizes 0/1,000/10,000, the plain-SQL floor, Airflow's
# own clean when installed) and prints a markdown table.
#
#   ./bench/run.sh [--rows N] [--dialects sqlite,postgres,mysql] [bench.py options]
#   ./bench/run.sh --install-airflow    # creates bench/.airflow-venv with apache-airflow==3.3.2
#
# Needs python3, /usr/bin/time, the clients sqlite3, psql and mariadb, and the servers named by
# STATE_STORE_TEST_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/postgres) and
# STATE_STORE_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/). Airflow is taken from
# AIRFLOW_VENV (default bench/.airflow-venv) and skipped when it is not there.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--install-airflow" ]]; then
    venv="${AIRFLOW_VENV:-bench/.airflow-venv}"
    python3 -m venv "$venv"
    install() {
        for attempt in 1 2 3; do
            "$venv/bin/pip" install --quiet --retries 5 --timeout 60 "$@" && return 0
            echo "run.sh: pip install $* failed (attempt $attempt of 3)" >&2
            sleep $((attempt * 10))
        done
        return 1
    }
    # Airflow opens a sync and an async engine: psycopg2 and asyncpg for PostgreSQL, pymysql
    # and aiomysql for MySQL.
    install "apache-airflow==3.3.2" psycopg2-binary asyncpg pymysql aiomysql
    # On a MySQL URL Airflow insists on mysqlclient (MySQLdb) whatever the driver; it builds
    # from source against libmariadb-dev, found by pkg-config.
    install mysqlclient || echo "run.sh: no mysqlclient (apt-get install libmariadb-dev pkg-config, then run this again): Airflow's MySQL runs will be skipped" >&2
    "$venv/bin/airflow" version
    exit 0
fi

cargo build --release --locked --quiet
exec python3 bench/bench.py "$@"
