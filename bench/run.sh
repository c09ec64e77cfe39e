#!/usr/bin/env bash
# The benchmarks of docs/performance.md in one command: builds the release binary, then runs
# bench/bench.py (seed, clean at its default (auto) and at batch sizes 0/1,000/10,000, the plain-SQL floor, Airflow's own
# clean when installed) and bench/import_bench.py (export, then import into an empty table
# beside the client's bulk insert of the same rows), and prints a markdown table of each.
#
#   ./bench/run.sh [--rows N] [--dialects sqlite,postgres,mysql] [bench.py options]
#   ./bench/run.sh --only clean|import|rest|latency [options]   # one of the four
#   ./bench/run.sh --only scale [options]   # the clean at 1,000,000 and 10,000,000 rows
#   ./bench/run.sh --only cron [options]    # a night with nothing to delete, run after run
#   ./bench/run.sh --baseline REV [options]   # also REV's clean, interleaved with ours
#   ./bench/run.sh --only clean --archive [options]   # every clean with --archive (a fresh file per run)
#   ./bench/run.sh --only clean --neighbour [options]   # each of our cleans alone and beside
#                                  # one write a second into another database on the server
#   ./bench/run.sh --install-airflow    # creates bench/.airflow-venv with apache-airflow==3.3.2
#
# --baseline REV (a git revision: a commit, a tag, main~5) builds REV's release binary in a
# worktree target/bench-baseline/<commit> with CARGO_TARGET_DIR=target/bench-baseline/target,
# keeps the binary as target/bench-baseline/bin/state-store-<commit> (reused by the next run of
# the same commit), removes the worktree, then passes --baseline-bin and --baseline-label to
# bench.py. The working tree's binary (target/release) is the one compared against it.
#
# bench/latency.py (Airflow workers' write latency beside a clean: two threads doing Airflow's
# upsert on random live keys, idle and during each clean, on PostgreSQL and MariaDB) runs with
# --only latency, or right after the clean benchmark in a full run, with the Airflow venv's Python
# (its psycopg2 and pymysql), and is skipped when the venv is not there; of the options it takes
# --rows, --dialects, --repeat, --no-airflow and --json (written to NAME-latency.json), and with
# --only latency its own: --workers N, --idle SECONDS, --extra-case 'LABEL=ARGS' (ARGS appended
# to our clean's command line, e.g. 'auto=--batch-size auto').
#
# bench/scale.py (--only scale, never part of the full run: about an hour and 3 GB per table on
# 2 cores) runs the clean benchmark at --small rows (default 1,000,000) and --large rows
# (default 10,000,000) on every dialect, each table seeded with SQL inside its database, and
# prints both sizes side by side with the floor of each size: wall time, µs per expired row,
# peak RSS, the ratio to the floor and the growth of the time per row; it takes --dialects,
# --batch-sizes (default 0,10000), --layouts (default hashed,interleaved,contiguous), --repeat
# (default 1), --until-purged, --no-airflow and --json.
#
# bench/cron.py (--only cron, never part of the full run) measures what every nightly run pays
# whatever it deletes: configuration, connection, schema check, the clean's lock, the metrics
# file replaced at the end of a path of several directories. It runs `clean -o json
# --metrics-file …` on a table of --rows live rows (default 10,000; none expired) for --rounds
# rounds (default 30), ours and the baseline alternately, and prints the median, 10th and 90th
# percentiles of each and their ratio.
#
# bench/rest_bench.py (the REST transport beside curl, on a local `airflow api-server`) runs with
# --only rest, or last in a full run when the Airflow venv is there; of the options it takes
# --rest-repeat N (rounds, default 25), --json and the baseline (for the binary's size).
#
# Needs python3, /usr/bin/time, the clients sqlite3, psql and mariadb, and the servers named by
# STATE_STORE_TEST_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/postgres) and
# STATE_STORE_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/); the REST benchmark needs
# curl. Airflow is taken from AIRFLOW_VENV (default bench/.airflow-venv) and skipped when it is
# not there.
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

# --baseline REV (or --baseline=REV) and --only are run.sh's own, --rest-repeat goes to the REST
# benchmark alone; everything else goes to bench.py and bench/import_bench.py (which ignores the
# clean benchmark's own options) and bench/rest_bench.py (which ignores all but --json).
baseline_rev=""
only=""
bench_args=()
rest_args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rest-repeat)
            [[ $# -ge 2 ]] || { echo "run.sh: --rest-repeat needs a number" >&2; exit 2; }
            rest_args+=(--rest-repeat "$2")
            shift 2
            ;;
        --only)
            [[ $# -ge 2 && ( "$2" == clean || "$2" == import || "$2" == rest || "$2" == latency || "$2" == scale || "$2" == cron ) ]] || { echo "run.sh: --only takes clean, import, rest, latency, scale or cron" >&2; exit 2; }
            only="$2"
            shift 2
            ;;
        --baseline)
            [[ $# -ge 2 && -n "$2" ]] || { echo "run.sh: --baseline needs a git revision" >&2; exit 2; }
            baseline_rev="$2"
            shift 2
            ;;
        --baseline=*)
            baseline_rev="${1#--baseline=}"
            [[ -n "$baseline_rev" ]] || { echo "run.sh: --baseline needs a git revision" >&2; exit 2; }
            shift
            ;;
        *)
            bench_args+=("$1")
            shift
            ;;
    esac
done

if [[ -n "$baseline_rev" ]]; then
    commit="$(git rev-parse --verify --quiet "${baseline_rev}^{commit}")" \
        || { echo "run.sh: --baseline $baseline_rev is not a git revision here" >&2; exit 2; }
fi

cargo build --release --locked --quiet
# What is measured is a copy of the binary, as the baseline's is: the same bytes run from the
# file the linker has just written into cargo's target directory (a hard link there) took 1.12
# times as long as from a copy (the cron run on SQLite, 60 pairs), which a pair of binaries
# would count as the code's. A later --bin still wins.
ours="$PWD/target/bench-baseline/bin/state-store-ours"
mkdir -p "${ours%/*}"
cp target/release/state-store "$ours.tmp"
mv "$ours.tmp" "$ours"
bench_args=(--bin "$ours" "${bench_args[@]}")

if [[ -n "$baseline_rev" ]]; then
    short="$(git rev-parse --short "$commit")"
    root="$PWD/target/bench-baseline"
    bin="$root/bin/state-store-$commit"
    if [[ -x "$bin" ]]; then
        echo "run.sh: baseline $baseline_rev ($short): reusing $bin" >&2
    else
        tree="$root/$commit"
        registered() { git worktree list --porcelain | grep -qxF "worktree $tree"; }
        remove_tree() {
            if registered; then
                git worktree remove --force "$tree" || true
            fi
            rm -rf "$tree"
            # Its directory gone by other means: only a prune forgets it (other worktrees are
            # pruned only if their directories are gone too).
            if registered; then git worktree prune; fi
        }
        remove_tree # what an interrupted run left
        trap remove_tree EXIT
        trap 'exit 130' INT
        trap 'exit 143' TERM
        echo "run.sh: baseline $baseline_rev ($short): building its release binary in $tree" >&2
        mkdir -p "$root/bin"
        git worktree add --detach --quiet "$tree" "$commit"
        (cd "$tree" && CARGO_TARGET_DIR="$root/target" cargo build --release --locked --quiet)
        # The shared target directory holds one revision's binary at a time: each is kept by commit.
        cp "$root/target/release/state-store" "$bin.tmp"
        mv "$bin.tmp" "$bin"
        remove_tree
        trap - EXIT INT TERM
    fi
    bench_args=(--baseline-bin "$bin" --baseline-label "$baseline_rev ($short)" "${bench_args[@]}")
fi

# The clean benchmark, then the latency benchmark (bench/latency.py, with Airflow's Python), then
# the import benchmark (bench/import_bench.py) with the same rows, dialects, repeats and baseline,
# then the REST benchmark (bench/rest_bench.py, with Airflow's Python); each prints its own
# table. --only clean|import|rest|latency runs one.
status=0
if [[ "$only" == scale ]]; then
    python3 bench/scale.py "${bench_args[@]}"
    exit
fi
if [[ "$only" == cron ]]; then
    python3 bench/cron.py "${bench_args[@]}"
    exit
fi
if [[ -z "$only" || "$only" == clean ]]; then
    python3 bench/bench.py "${bench_args[@]}" || status=$?
fi
if [[ -z "$only" || "$only" == latency ]]; then
    airflow_python="${AIRFLOW_VENV:-bench/.airflow-venv}/bin/python"
    if [[ -x "$airflow_python" ]]; then
        "$airflow_python" bench/latency.py "${bench_args[@]}" || status=$?
    elif [[ "$only" == latency ]]; then
        echo "run.sh: the latency benchmark needs Airflow's venv (psycopg2, pymysql): no $airflow_python (./bench/run.sh --install-airflow, or AIRFLOW_VENV)" >&2
        exit 1
    else
        echo "run.sh: no Airflow venv ($airflow_python): the latency benchmark is skipped" >&2
    fi
fi
if [[ -z "$only" || "$only" == import ]]; then
    python3 bench/import_bench.py "${bench_args[@]}" || status=$?
fi
if [[ -z "$only" || "$only" == rest ]]; then
    airflow_python="${AIRFLOW_VENV:-bench/.airflow-venv}/bin/python"
    if [[ -x "$airflow_python" ]]; then
        "$airflow_python" bench/rest_bench.py "${bench_args[@]}" "${rest_args[@]}" || status=$?
    elif [[ "$only" == rest ]]; then
        echo "run.sh: the REST benchmark needs Airflow: no $airflow_python (./bench/run.sh --install-airflow, or AIRFLOW_VENV)" >&2
        exit 1
    else
        echo "run.sh: no Airflow venv ($airflow_python): the REST benchmark is skipped" >&2
    fi
fi
exit "$status"
