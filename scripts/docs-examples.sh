#!/usr/bin/env bash
# Regenerates the example output of docs/commands/*.md. Each page's examples run, in order,
# against a fresh sandbox metastore with sample data (`state-store sandbox create
# --sample-data`) in a temporary directory that serves as $AIRFLOW_HOME, so the commands need
# no --conn. Timestamps differ from run to run; everything else should match the pages.
#
#   ./scripts/docs-examples.sh                    # every page
#   ./scripts/docs-examples.sh clean set          # some pages
#   ./scripts/docs-examples.sh --write [PAGE…]    # and write the output into the pages
#
# Output: for each page, each command as `$ state-store …` followed by what it printed (stderr
# and stdout interleaved, as at a terminal), and `$ echo $?` with the exit code when it is not 0.
set -euo pipefail
cd "$(dirname "$0")/.."
top="$PWD"
write=false
if [ "${1:-}" = --write ]; then
    write=true
    shift
fi

cargo build --locked --quiet
bin="$PWD/target/debug/state-store"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
export AIRFLOW_HOME="$work"
unset AIRFLOW_CONFIG
for var in $(env | grep -o '^AIRFLOW__[A-Z_]*' || true); do unset "$var"; done

state-store() { "$bin" "$@"; }
T='--dag-id incremental_orders --run-id scheduled__2026-11-28T00:00:00+00:00 --task-id load_new_orders'

# A fresh sandbox for one page: the sample data of `sandbox create --sample-data`.
page() {
    printf '\n######## docs/commands/%s.md\n' "$1"
    find "$work" -mindepth 1 -delete
    printf '[database]\nsql_alchemy_conn = sqlite:///%s/airflow.db\n' "$work" > airflow.cfg
    "$bin" --conn "sqlite:///$work/airflow.db" sandbox create --sample-data > /dev/null 2>&1
}

# Runs one example, given as the shell text shown on the page, and prints it with its output.
ex() {
    printf '\n$ %s\n' "$1"
    local rc
    set +e
    eval "$1" 2>&1 | sed "s#$work/##g"
    rc=${PIPESTATUS[0]}
    set -e
    if [ "$rc" -ne 0 ]; then printf '$ echo $?\n%s\n' "$rc"; fi
}

# Rows that expired a day ago, as an export file, to give clean enough work to report progress.
expired_rows() {
    local updated expires
    updated="$(date -u -d '-8 days' +%Y-%m-%dT%H:%M:%S.000000Z)"
    expires="$(date -u -d '-1 day' +%Y-%m-%dT%H:%M:%S.000000Z)"
    awk -v n="$1" -v updated="$updated" -v expires="$expires" 'BEGIN {
        for (i = 0; i < n; i++)
            printf "{\"kind\": \"task\", \"dag_id\": \"incremental_orders\", \"run_id\": \"scheduled__2026-11-20T00:00:00+00:00\", \"task_id\": \"load_partition\", \"map_index\": %d, \"key\": \"offset\", \"value\": \"%d\", \"updated_at\": \"%s\", \"expires_at\": \"%s\"}\n", i, i, updated, expires
    }'
}

pages_get() {
    page get
    ex 'state-store get watermark $T'
    ex 'state-store get watermark $T -o plain'
    ex 'state-store get watermark $T -o json'
    ex 'state-store get job --dag-id spark_daily_etl --run-id manual__2026-11-28T06:00:00+00:00 --task-id submit_job -o plain'
    ex 'state-store get watermark --asset orders'
    ex 'state-store get cursor --asset-id 2 -o json'
    ex 'state-store get watermark --asset orders -o yaml'
    ex 'state-store get nosuch $T'
    ex 'state-store get cursor --asset legacy_orders'
    ex 'state-store get watermark --dag-id incremental_orders --run-id scheduled__2026-11-28T00:00:00+00:00'
    ex 'state-store get checkpoint/path --dag-id spark_daily_etl --run-id manual__2026-11-28T06:00:00+00:00 --task-id submit_job -o plain'
    ex 'state-store get offset --dag-id incremental_orders --run-id scheduled__2026-11-28T00:00:00+00:00 --task-id transform'
    ex 'state-store get watermark --asset-uri s3://warehouse/orders'
}

pages_set() {
    page set
    ex "state-store set watermark '\"2026-11-29T00:00:00Z\"' \$T --retention 7d"
    ex "state-store set config '{\"tables\": [\"orders\", \"refunds\"], \"since\": 1.5e16, \"label\": \"café\"}' \$T --retention never -o json"
    ex 'state-store set rows_loaded 1400 $T --expires-at 2026-12-31T00:00:00Z -o json'
    ex "echo '{\"a\": [1, 2]}' | state-store set payload - \$T"
    ex "state-store set last_file '\"orders-2026-11-29.parquet\"' --asset orders"
    ex "state-store set watermark '\"2026-11-30T00:00:00Z\"' \$T --keep-expiry"
    ex 'state-store set x hello $T'
    ex 'state-store set x null $T'
    ex 'state-store set x 1 $T --retention 30m1h'
    ex 'state-store set x 1 $T --retention 0s'
    ex 'state-store set x 1 $T --retention 0'
    ex 'state-store set x 1 $T --expires-at 2026-01-01T00:00:00Z -o plain'
    ex 'state-store set x 1 $T --expires-at 2026-12-31T00:00:00'
    ex 'state-store set x 1 --asset orders --retention 7d'
    ex 'state-store set x 1 --dag-id incremental_orders --run-id nope --task-id t'
    ex 'state-store set x 1 --dag-id incremental_orders --run-id scheduled__2026-11-28T00:00:00+00:00 --task-id load_orders'
    ex 'state-store set x 1 --dag-id incremental_orders --run-id scheduled__2026-11-28T00:00:00+00:00 --task-id transform --map-index 2'
    ex 'state-store set x 1 --dag-id incremental_orders --run-id scheduled__2026-11-28T00:00:00+00:00 --task-id transform --map-index 2 --allow-missing-task-instance -o plain'
    ex 'state-store set cursor 1 --asset-id 2'
    ex 'state-store set nosuch 1 $T --keep-expiry'
    ex 'state-store set watermark 1 $T --keep-expiry --retention 7d'
}

pages_delete() {
    page delete
    ex 'state-store delete rows_loaded $T'
    ex 'state-store delete watermark $T -o json'
    ex 'state-store delete watermark $T -o plain'
    ex 'state-store delete cursor --asset-id 2 -o json'
    ex 'state-store delete watermark --asset nosuch'
    ex 'state-store delete watermark --dag-id incremental_orders --run-id scheduled__2026-11-28T00:00:00+00:00 --task-id load'
}

pages_clear() {
    page clear
    ex 'state-store clear --dag-id incremental_orders --run-id scheduled__2026-11-28T00:00:00+00:00 --task-id transform --all-map-indices < /dev/null'
    ex 'state-store clear --dag-id incremental_orders --run-id scheduled__2026-11-28T00:00:00+00:00 --task-id transform --map-index 1 --yes'
    ex 'state-store clear --asset orders --yes -o json'
    ex 'state-store clear $T --yes --archive cleared.jsonl -o json'
    ex 'cat cleared.jsonl'
    # The confirmation needs a terminal: `script` gives the command one and answers "n".
    printf '\n$ state-store clear --asset-id 2\n'
    { sleep 1; printf 'n\n'; } | script -qec "$bin clear --asset-id 2" /dev/null | tr -d '\r'
    ex 'state-store clear --dag-id spark_daily_etl --run-id manual__2026-11-28T06:00:00+00:00 --task-id submit_job --map-index 3 --all-map-indices --yes'
    ex 'state-store clear --dag-id incremental_orders --run-id scheduled__2026-11-28T00:00:00+00:00 --task-id report --all-map-indices --yes'
}

pages_list() {
    page list
    ex 'state-store list'
    ex 'state-store list --dag-id incremental_orders --limit 2 --offset 2 -o plain'
    ex 'state-store list --dag-id incremental_orders --run-id scheduled__2026-11-28T00:00:00+00:00 --task-id transform -o plain | cut -f 3-6'
    ex 'state-store list --expired'
    ex 'state-store list --dag-id incremental_orders --task-id transform -o json'
    ex 'state-store list --assets'
    ex 'state-store list --dag-id nosuch -o json'
    ex 'state-store list --assets --expired'
    "$bin" set report '{"__airflow_state_ref__": "s3://bucket/state/42"}' $T > /dev/null
    ex 'state-store list --external'
    ex 'state-store list --external -o json'
}

pages_clean() {
    page clean
    ex 'state-store clean --dry-run'
    ex 'state-store clean --dry-run -o plain'
    ex 'state-store clean --dry-run -o json'
    ex 'state-store clean --batch-size 2'
    page clean
    ex 'state-store clean -o json'
    page clean
    ex 'state-store clean --batch-size 1 --max-rows 2 -o json'
    page clean
    ex 'state-store clean --archive expired.jsonl'
    ex 'wc -l < expired.jsonl'
    page clean
    printf '\n$ state-store clean --batch-size 1 --sleep 1s -o json      # SIGTERM after 1.5 s\n'
    set +e
    "$bin" clean --batch-size 1 --sleep 1s -o json 2>&1 &
    local pid=$!
    sleep 1.5
    kill -TERM "$pid"
    wait "$pid"
    printf '$ echo $?\n%s\n' "$?"
    set -e
    page clean
    ex 'state-store clean -v --batch-size 2'
    page clean
    ex 'state-store clean --dry-run -v -o plain'
    page clean
    "$bin" clean --batch-size 1 --sleep 1s > /dev/null 2>&1 &
    local busy=$!
    sleep 0.5
    ex 'state-store clean -o json'
    kill -TERM "$busy"
    wait "$busy" || true
    ex 'state-store clean -o json --max-row 100'
    ex 'state-store clean -o json --conn postgresql://airflow:pw@127.0.0.1:1/airflow'
    page clean
    ex 'AIRFLOW__STATE_STORE__BACKEND=mypackage.state.S3StateBackend state-store clean -o json'
    ex 'state-store clean --before 2099-01-01T00:00:00Z'
    ex 'state-store clean --max-duration 10'
    page clean
    expired_rows 50000 > expired-rows.jsonl
    "$bin" import expired-rows.jsonl > /dev/null 2>&1
    ex 'state-store clean --batch-size 1000 --sleep 50ms --progress-every 500ms 2> clean.log'
    ex 'cat clean.log'
}

pages_stats() {
    page stats
    ex 'state-store stats'
    ex 'state-store stats --by task --largest 3'
    ex 'state-store stats -o json'
    ex 'state-store stats -o plain'
}

pages_export() {
    page export
    ex 'state-store export --dag-id spark_daily_etl'
    ex 'state-store export --file backup.jsonl'
    ex 'state-store export --assets --file assets.jsonl -o json'
    ex 'state-store export --asset orders'
    ex 'state-store export --file /nonexistent/backup.jsonl'
}

pages_import() {
    page import
    "$bin" export --file backup.jsonl 2> /dev/null
    ex 'state-store import backup.jsonl --dry-run'
    ex 'state-store import backup.jsonl -o json'
    ex "state-store set watermark '\"2026-11-30T00:00:00Z\"' \$T -o plain"
    ex 'state-store import backup.jsonl'
    ex 'state-store import backup.jsonl -o plain'
    ex "echo '{\"kind\": \"task\"}' | state-store import -"
    ex "sed 's/incremental_orders/gone_dag/' backup.jsonl > other.jsonl; state-store import other.jsonl"
    ex 'state-store import other.jsonl --skip-missing -o json'
    ex 'state-store import backup.jsonl --on-conflict overwrite -o json'
    ex "state-store delete watermark \$T -o plain; state-store import backup.jsonl --on-conflict skip"
    ex 'state-store import backup.jsonl --on-conflict fail --dry-run'
}

pages_config() {
    page config
    printf '[database]\nsql_alchemy_conn = sqlite:///%s/airflow.db\n\n[state_store]\ndefault_retention_days = 7\n' "$work" > airflow.cfg
    ex 'AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE=500 state-store --conn postgresql://airflow:secret@db/airflow config show'
    ex 'state-store config show -o json'
    ex 'state-store config get state_store default_retention_days'
    ex 'state-store config get state_store default_retention_days -o json'
    ex 'state-store config get database sql_alchemy_schema'
    ex 'state-store config get state_store nosuch'
}

pages_completions() {
    page completions
    ex 'state-store man --out-dir man/man1'
    ex 'state-store completions bash | head -3'
    ex 'state-store man clean | head -5'
    ex 'state-store completions powershell'
    ex 'state-store man frobnicate'
}

pages_sandbox() {
    page sandbox
    find "$work" -mindepth 1 -delete
    ex 'state-store --conn sqlite:///sandbox.db sandbox create --sample-data -o json'
    ex 'state-store sandbox create'
    ex 'state-store --conn sqlite:///sandbox.db sandbox add-dag-run --dag-id etl --run-id manual__1 --task-id extract --task-id load -o json'
    ex 'state-store --conn sqlite:///sandbox.db sandbox add-task-instance --dag-id etl --run-id manual__1 --task-id transform --map-index 0 --map-index 1 -o json'
    ex 'state-store --conn sqlite:///sandbox.db sandbox add-asset --name old --uri s3://old/ --inactive -o plain'
    ex 'state-store --conn sqlite:///sandbox.db sandbox add-asset --name reports --uri s3://reports/'
    ex 'state-store --conn sqlite:///sandbox.db sandbox create'
    # A database with Airflow's tables but without the sandbox marker stands for a real metastore.
    "$bin" --conn "sqlite:///$work/airflow.db" sandbox create > /dev/null 2>&1
    sqlite3 airflow.db 'DROP TABLE state_store_sandbox'
    ex 'state-store --conn sqlite:///airflow.db sandbox add-dag-run --dag-id d --run-id r'
}

pages_doctor() {
    page doctor
    ex 'state-store doctor'
    # Damage by hand: rows moved to another run, a value that is not JSON, expiries as ISO text.
    sqlite3 airflow.db "UPDATE task_state_store SET run_id = 'scheduled__2026-11-21T00:00:00+00:00' WHERE \"key\" = 'rows_loaded';
        UPDATE task_state_store SET value = '{\"cluster\": \"spark-prod\", attempt: 2}' WHERE \"key\" = 'job';
        UPDATE task_state_store SET expires_at = '2026-12-01T00:00:00Z' WHERE \"key\" = 'offset'"
    # And a key of a task instance the scheduler never created.
    "$bin" set note '"rerun by hand"' --dag-id spark_daily_etl --run-id manual__2026-11-28T06:00:00+00:00 \
        --task-id cleanup --allow-missing-task-instance > /dev/null 2>&1
    ex 'state-store doctor'
    ex 'state-store doctor -o json --sample 1 | python3 -m json.tool --no-ensure-ascii'
    # A pre-release 3.3 metastore: the state-store tables under their old names.
    sqlite3 airflow.db 'ALTER TABLE task_state_store RENAME TO task_state; ALTER TABLE asset_state_store RENAME TO asset_state'
    ex 'state-store doctor -o plain'
}

all=(get set delete clear list clean stats doctor export import config completions sandbox)
run_pages() {
    for name in "$@"; do
        "pages_$name"
    done
}
if $write; then
    # scripts/apply-doc-examples.py puts each command's output under it on its page, and lists
    # the examples a page lacks or no longer has (exit 1).
    run_pages "${@:-${all[@]}}" | (cd "$top" && python3 scripts/apply-doc-examples.py)
else
    run_pages "${@:-${all[@]}}"
fi
