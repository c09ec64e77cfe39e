#!/usr/bin/env bash
# The main job end to end on an embedded SQLite metastore: build state-store, create a
# throw-away Airflow 3.3.2 metastore with sample data under target/demo, then set, get, list
# and clean its task and asset state store and check it with doctor, printing each command
# before running it, and under it what the command wrote, stdout and stderr alike: `clean`'s
# summary line is on stderr, and the demo's output is often captured or paged.
#
# STATE_STORE_DEMO_BIN names a binary already built (no build), STATE_STORE_DEMO_DIR another
# directory than target/demo; the test suite runs the demo so.
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${STATE_STORE_DEMO_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --locked --quiet
    bin="$PWD/target/debug/state-store"
fi

demo="${STATE_STORE_DEMO_DIR:-$PWD/target/demo}"
rm -rf "$demo"
mkdir -p "$demo"
# Everything below reads Airflow's configuration exactly as Airflow would: $AIRFLOW_HOME/airflow.cfg.
export AIRFLOW_HOME="$demo"
unset AIRFLOW_CONFIG
for var in $(env | grep -o '^AIRFLOW__[A-Z_]*' || true); do unset "$var"; done
cat > "$demo/airflow.cfg" <<CFG
[database]
sql_alchemy_conn = sqlite:///$demo/airflow.db

[state_store]
default_retention_days = 30
state_cleanup_batch_size = 2
CFG

# An argument as a shell reads it back: bare when it is safe, else in single quotes.
shell_quote() {
    if [[ $1 =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then
        printf '%s' "$1"
    else
        printf "'%s'" "${1//\'/\'\\\'\'}"
    fi
}

# Prints a command as it can be pasted into a shell, then runs it.
step() {
    local shown="state-store" arg
    for arg in "$@"; do shown+=" $(shell_quote "$arg")"; done
    printf '\n\033[1m$ %s\033[0m\n' "$shown"
    "$bin" "$@" 2>&1
}

# A sandbox is only ever created at a database named on the command line.
step --conn "sqlite:///$demo/airflow.db" sandbox create --sample-data
step list
step doctor
step set watermark '"2026-11-29T00:00:00Z"' --dag-id incremental_orders \
    --run-id 'scheduled__2026-11-28T00:00:00+00:00' --task-id load_new_orders --retention 7d
step get watermark --dag-id incremental_orders \
    --run-id 'scheduled__2026-11-28T00:00:00+00:00' --task-id load_new_orders -o plain
step get job --dag-id spark_daily_etl --run-id 'manual__2026-11-28T06:00:00+00:00' --task-id submit_job -o json
step list --assets
step clean --dry-run
step clean
step list --expired
step list
step doctor
printf '\nThe demo metastore is %s/airflow.db. To try more commands on it, paste:\n\n' "$demo"
printf '    export PATH=%s:"$PATH" AIRFLOW_HOME=%s\n    state-store --help\n' "$(shell_quote "$(dirname "$bin")")" "$(shell_quote "$demo")"
