#!/usr/bin/env bash
# The interoperability tier: our binary and Apache Airflow 3.3.2 on the same metastores.
#
#   tests/interop/run.sh [sqlite] [postgres] [mysql] [-- PYTEST_ARGS…]
#
# With no dialect named, all three run. Each dialect is one pytest process: Airflow reads its
# database URL once, at import, so a process cannot switch databases halfway.
#
# Airflow comes from PyPI into a virtual environment, `tests/interop/.venv` unless
# STATE_STORE_AIRFLOW_VENV names another. A venv that already holds the pinned Airflow and the
# drivers is reused as it is; otherwise the missing packages are installed, with retries. An
# install that still fails, a test that fails and a run that collects no test all fail the tier:
# nothing is skipped.
#
# The binary is built with `cargo build` unless STATE_STORE_BIN names one. The PostgreSQL and
# MySQL/MariaDB servers are those of the Rust suite (STATE_STORE_TEST_POSTGRES_URL,
# STATE_STORE_TEST_MYSQL_URL); each run creates its own databases there and drops them.
set -euo pipefail
cd "$(dirname "$0")/../.."

AIRFLOW_VERSION=3.3.2
# The drivers Airflow needs: psycopg2 and asyncpg (its async engine) for PostgreSQL; pymysql and
# aiomysql for MySQL, plus mysqlclient, which Airflow imports for every MySQL URL whatever the
# driver (it builds from source: a C compiler, pkg-config and the MariaDB client headers); and
# prometheus-client, whose parser reads `clean --metrics-file`, and kubernetes-validate, which
# checks the CronJob of docs/operations.md against Kubernetes's schema.
PACKAGES=("apache-airflow==$AIRFLOW_VERSION" psycopg2-binary asyncpg pymysql aiomysql mysqlclient pytest prometheus-client kubernetes-validate)
INSTALL_ATTEMPTS=4 # the first try and three retries
venv="${STATE_STORE_AIRFLOW_VENV:-tests/interop/.venv}"

say() { echo "interop: $*" >&2; }

dialects=()
pytest_args=()
while (($#)); do
    case $1 in
        sqlite | postgres | mysql) dialects+=("$1") ;;
        --) shift; pytest_args=("$@"); break ;;
        *) say "unknown argument '$1' (expected sqlite, postgres, mysql, or -- and pytest arguments)"; exit 2 ;;
    esac
    shift
done
((${#dialects[@]})) || dialects=(sqlite postgres mysql)

# True when the venv's Python has the pinned Airflow and every other package.
venv_ready() {
    [[ -x "$venv/bin/python" ]] || return 1
    "$venv/bin/python" - "$AIRFLOW_VERSION" "${PACKAGES[@]:1}" <<'EOF' >/dev/null 2>&1
import importlib.metadata as md, sys
assert md.version("apache-airflow") == sys.argv[1]
for dist in sys.argv[2:]:
    md.version(dist)
EOF
}

if venv_ready; then
    say "reusing $venv (apache-airflow==$AIRFLOW_VERSION)"
else
    python="${PYTHON:-python3}"
    if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c '' 2>/dev/null; then
        command -v "$python" >/dev/null || { say "error: $python is needed to create $venv"; exit 1; }
        "$python" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 13))' || {
            say "error: Airflow $AIRFLOW_VERSION needs Python 3.10 to 3.13; $python is $("$python" -V 2>&1)"
            exit 1
        }
        say "creating $venv"
        rm -rf "$venv"
        "$python" -m venv "$venv"
    fi
    # mysqlclient compiles against the MariaDB client headers. Install them where this runs as
    # root with apt (CI, a fresh machine); elsewhere say what is missing.
    if ! pkg-config --exists mariadb 2>/dev/null && ! pkg-config --exists mysqlclient 2>/dev/null; then
        if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
            say "installing the MariaDB client headers (libmariadb-dev, pkg-config) for mysqlclient"
            for attempt in 1 2 3; do
                apt-get update -qq >/dev/null 2>&1 || true
                if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libmariadb-dev pkg-config >/dev/null; then
                    break
                fi
                ((attempt < 3)) || { say "error: cannot install libmariadb-dev; mysqlclient cannot be built"; exit 1; }
                sleep $((attempt * 15))
            done
        else
            say "error: mysqlclient needs the MariaDB or MySQL client headers (Debian: apt-get install libmariadb-dev pkg-config)"
            exit 1
        fi
    fi
    say "installing ${PACKAGES[*]} into $venv (the first time takes a few minutes)"
    for attempt in $(seq 1 "$INSTALL_ATTEMPTS"); do
        if "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${PACKAGES[@]}"; then
            break
        fi
        if ((attempt == INSTALL_ATTEMPTS)); then
            say "error: cannot install apache-airflow==$AIRFLOW_VERSION from PyPI after $INSTALL_ATTEMPTS attempts; the interop tier cannot run"
            exit 1
        fi
        pause=$((attempt * 15))
        say "install attempt $attempt failed; retrying in ${pause}s"
        sleep "$pause"
    done
    venv_ready || { say "error: $venv still lacks apache-airflow==$AIRFLOW_VERSION or a driver after installing"; exit 1; }
fi

if [[ -z "${STATE_STORE_BIN:-}" ]]; then
    cargo build --locked --quiet
    STATE_STORE_BIN="$PWD/target/debug/state-store"
fi
export STATE_STORE_BIN
export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ in the source tree
export STATE_STORE_TEST_POSTGRES_URL="${STATE_STORE_TEST_POSTGRES_URL:-postgresql://postgres@127.0.0.1:5432/postgres}"
export STATE_STORE_TEST_MYSQL_URL="${STATE_STORE_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/}"

failed=()
for dialect in "${dialects[@]}"; do
    say "── $dialect ──"
    start=$SECONDS
    rc=0
    "$venv/bin/python" -m pytest tests/interop --dialect "$dialect" "${pytest_args[@]}" || rc=$?
    case $rc in
        0) say "$dialect: passed in $((SECONDS - start))s" ;;
        5) say "$dialect: FAILED: no test was collected"; failed+=("$dialect") ;;
        *) say "$dialect: FAILED (pytest exit code $rc) after $((SECONDS - start))s"; failed+=("$dialect") ;;
    esac
done

if ((${#failed[@]})); then
    say "failed on: ${failed[*]}"
    exit 1
fi
say "Airflow $AIRFLOW_VERSION and state-store agree on: ${dialects[*]}"
