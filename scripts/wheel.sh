#!/usr/bin/env bash
# The Python package, as an Airflow user installs it: builds the wheel (pyproject.toml, maturin),
# installs it into a fresh virtualenv, and runs the installed binary. `pip install .` is
# checked the same way. Needs python3 and, the first time, network access to PyPI (maturin).
#
#   ./scripts/wheel.sh            # build, install, check
#   ./scripts/wheel.sh --keep     # and keep the wheel in target/wheels
set -euo pipefail
cd "$(dirname "$0")/.."
keep=false
[ "${1:-}" = --keep ] && keep=true

say() { echo "wheel: $*" >&2; }
fail() { say "error: $*"; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pip_install() { "$1/bin/python" -m pip install --quiet --disable-pip-version-check --retries 5 "${@:2}"; }

python3 -m venv "$work/build"
pip_install "$work/build" 'maturin>=1.9,<2'
say "building the wheel (cargo's release profile, OpenSSL linked in)"
"$work/build/bin/maturin" build --release --quiet --out "$work/dist" >&2
wheel="$(ls "$work"/dist/state_store-*.whl)"
say "built $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"

# The version cargo gives the binary.
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"

# Checks the state-store that a virtualenv's pip installed: a binary beside python, the right
# version, and the main job on an embedded SQLite metastore found through AIRFLOW_HOME.
check() {
    local venv=$1 how=$2 bin="$1/bin/state-store"
    [ -x "$bin" ] || fail "$how: no state-store in $venv/bin"
    head -c 4 "$bin" | grep -q 'ELF' || fail "$how: $venv/bin/state-store is not the binary itself"
    [ "$("$bin" --version)" = "state-store $version" ] || fail "$how: --version says $("$bin" --version)"
    local home="$work/home-$how"
    mkdir -p "$home"
    printf '[database]\nsql_alchemy_conn = sqlite:///%s/airflow.db\n' "$home" > "$home/airflow.cfg"
    AIRFLOW_HOME="$home" "$bin" --conn "sqlite:///$home/airflow.db" sandbox create --sample-data > /dev/null
    local summary
    summary="$(AIRFLOW_HOME="$home" "$bin" clean -o json 2>/dev/null)"
    "$venv/bin/python" -c 'import json, sys; s = json.loads(sys.argv[1]); assert (s["task_rows_deleted"], s["asset_rows_deleted"]) == (3, 1), s' "$summary" ||
        fail "$how: clean on the sample metastore: $summary"
    # TLS with the machine's trusted roots: the binary with OpenSSL linked in must find them
    # where the distribution keeps them, and so decide as the binary linked to the system's
    # OpenSSL does (exit 5 once connected: the server's own database has no Airflow tables).
    if [ -n "${STATE_STORE_TEST_POSTGRES_URL:-}" ]; then
        local url="${STATE_STORE_TEST_POSTGRES_URL%/*}/postgres?sslmode=verify-ca&sslrootcert=system" ours theirs
        # Without SSL_CERT_FILE and SSL_CERT_DIR, which would point any OpenSSL at the roots.
        set +e
        env -u SSL_CERT_FILE -u SSL_CERT_DIR "$bin" --conn "$url" doctor > /dev/null 2>&1; ours=$?
        env -u SSL_CERT_FILE -u SSL_CERT_DIR ./target/debug/state-store --conn "$url" doctor > /dev/null 2>&1
        theirs=$?
        set -e
        [ "$ours" = "$theirs" ] || fail "$how: sslrootcert=system exits $ours, the cargo build $theirs"
        say "$how: sslrootcert=system decides as the cargo build does (exit $ours)"
    fi
    say "$how: $bin works (state-store $version)"
}

cargo build --locked --quiet
python3 -m venv "$work/venv"
pip_install "$work/venv" "$wheel"
check "$work/venv" built-wheel

python3 -m venv "$work/venv-source"
pip_install "$work/venv-source" .
check "$work/venv-source" pip-install-dot

if $keep; then
    mkdir -p target/wheels
    cp "$wheel" target/wheels/
    say "kept target/wheels/$(basename "$wheel")"
fi
