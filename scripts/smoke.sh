#!/bin/sh
# The smoke test of a built wheel on the system it is meant for: installs the wheel with pip
# into a fresh virtualenv, as an Airflow user installs it, and runs the installed state-store on
# a SQLite sandbox and, when their URLs are given, on a PostgreSQL and a MySQL/MariaDB database.
# The release workflow runs it on each platform's own system (.github/workflows/release.yml), and
# `scripts/wheel.sh old-system` runs it in a Debian 11 root file system: the same script.
#
#   scripts/smoke.sh WHEEL
#
# Environment:
#   STATE_STORE_SMOKE_PYTHON         the interpreter whose venv module makes the virtualenv
#                                    (default python3)
#   STATE_STORE_SMOKE_POSTGRES_URL   an empty PostgreSQL database, e.g.
#                                    postgresql://postgres@127.0.0.1:5432/smoke
#   STATE_STORE_SMOKE_MYSQL_URL      an empty MySQL or MariaDB database, e.g.
#                                    mysql://root@127.0.0.1:3306/smoke
#
# Each command is printed before it runs; the first that fails, or says what it should not,
# ends the script with a non-zero status. The databases are left with a sandbox in them: the
# caller made them for this and drops them.
#
# POSIX sh, not bash: it runs on Alpine (busybox), Debian's dash and macOS alike. It needs
# python3 with its venv module, and no network (pip installs the one wheel, with no index).
set -eu

[ $# -eq 1 ] || { echo "usage: $0 WHEEL" >&2; exit 2; }
wheel=$1
[ -f "$wheel" ] || { echo "smoke: error: no wheel at $wheel" >&2; exit 2; }
python=${STATE_STORE_SMOKE_PYTHON:-python3}

say() { echo "smoke: $*" >&2; }
fail() { say "error: $*"; exit 1; }
# Prints the command, then runs it; its stdout is the caller's.
run() {
    say "\$ $*"
    "$@" || fail "exit $? from: $*"
}

work=$(mktemp -d "${TMPDIR:-/tmp}/state-store-smoke.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

say "system: $(uname -sm), $("$python" --version 2>&1)"
run "$python" -m venv "$work/venv"
run "$work/venv/bin/python" -m pip install --quiet --no-index --disable-pip-version-check "$wheel"
bin=$work/venv/bin/state-store
py=$work/venv/bin/python
[ -x "$bin" ] || fail "pip put no state-store in the virtualenv's bin/"

# The version the wheel's metadata gives must be the binary's.
version=$("$py" -c 'from importlib.metadata import version; print(version("state-store"))')
out=$(run "$bin" --version)
[ "$out" = "state-store $version" ] || fail "--version says '$out', the wheel is $version"
say "$out"

# Checks one field of a JSON document: expect JSON FIELD VALUE.
expect() {
    "$py" - "$@" <<'PY' || fail "$2 is not $3 in: $1"
import json, sys
doc, field, want = sys.argv[1:]
value = json.loads(doc)
for part in field.split("."):
    value = value[int(part)] if isinstance(value, list) else value[part]
sys.exit(0 if json.dumps(value) == want else 1)
PY
}

# The sample metastore: ten keys, three of them expired task keys and one an orphan of an
# inactive asset (docs/commands/sandbox.md).
task="--dag-id incremental_orders --run-id scheduled__2026-11-28T00:00:00+00:00 --task-id load_new_orders"

# Reads the sample data on a database, and what clean would delete there.
sample_checks() {
    conn=$1
    out=$(run "$bin" --conn "$conn" sandbox create --sample-data -o json)
    expect "$out" sample_data true
    out=$(run "$bin" --conn "$conn" list -o json)
    expect "$out" 7.key '"job"'
    count=$("$py" -c 'import json, sys; print(len(json.loads(sys.argv[1])))' "$out")
    [ "$count" = 8 ] || fail "list found $count task keys in the sample metastore, not 8"
    out=$(run "$bin" --conn "$conn" clean --dry-run -o json)
    expect "$out" task_rows_to_delete 3
    expect "$out" asset_rows_to_delete 1
    expect "$out" task_rows_deleted 0
}

say "SQLite"
db="sqlite:///$work/airflow.db"
sample_checks "$db"
# shellcheck disable=SC2086 # $task is the scope's flags, split on purpose
out=$(run "$bin" --conn "$db" set smoke '{"installed": ["pip", 1]}' $task -o json)
expect "$out" value.installed.1 1
# shellcheck disable=SC2086
out=$(run "$bin" --conn "$db" get smoke $task -o json)
expect "$out" value '{"installed": ["pip", 1]}'
out=$(run "$bin" --conn "$db" clean -o json)
expect "$out" task_rows_deleted 3
expect "$out" asset_rows_deleted 1
out=$(run "$bin" --conn "$db" list -o json)
count=$("$py" -c 'import json, sys; print(len(json.loads(sys.argv[1])))' "$out")
[ "$count" = 6 ] || fail "list found $count task keys after clean, not 6 (8 + smoke - 3)"

if [ -n "${STATE_STORE_SMOKE_POSTGRES_URL:-}" ]; then
    say "PostgreSQL"
    sample_checks "$STATE_STORE_SMOKE_POSTGRES_URL"
else
    say "PostgreSQL: skipped (no STATE_STORE_SMOKE_POSTGRES_URL)"
fi
if [ -n "${STATE_STORE_SMOKE_MYSQL_URL:-}" ]; then
    say "MySQL"
    sample_checks "$STATE_STORE_SMOKE_MYSQL_URL"
else
    say "MySQL: skipped (no STATE_STORE_SMOKE_MYSQL_URL)"
fi
say "passed: state-store $version from $(basename "$wheel")"
