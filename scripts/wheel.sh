#!/usr/bin/env bash
# The Python package, as an Airflow user installs it: builds the wheel (pyproject.toml, maturin),
# installs it into a fresh virtualenv, and runs the installed binary. `pip install .` is
# checked the same way, and reuses the wheel's build.
#
#   ./scripts/wheel.sh            # build, install, check
#   ./scripts/wheel.sh build      # only build: target/wheel/dist/*.whl, and the binary it holds
#                                 # as target/wheel/bin/state-store
#   ./scripts/wheel.sh check      # install and check the built wheel (building it if needed)
#   ./scripts/wheel.sh --keep     # build, install, check, and keep the wheel in target/wheels
#
# The build is cargo's release profile with OpenSSL compiled from source and linked in: about
# 10 minutes on 2 cores the first time, then seconds. It has a target directory of its own,
# target/wheel, so that it can run while `cargo test` holds target/ (scripts/test.sh does so),
# and `pip install .` is pointed at the same one, so it compiles nothing again. Needs python3
# and, the first time, network access to PyPI (maturin).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=all
keep=false
case "${1:-}" in
    "") ;;
    build | check) mode=$1 ;;
    --keep) keep=true ;;
    *) echo "wheel: unknown argument '$1' (expected build, check or --keep)" >&2; exit 2 ;;
esac

say() { echo "wheel: $*" >&2; }
fail() { say "error: $*"; exit 1; }

export CARGO_TARGET_DIR="$PWD/target/wheel"
dist="$CARGO_TARGET_DIR/dist"
tools="$CARGO_TARGET_DIR/maturin-venv"
pip_install() { "$1/bin/python" -m pip install --quiet --disable-pip-version-check --retries 5 "${@:2}"; }

build() {
    if [ ! -x "$tools/bin/maturin" ]; then
        python3 -m venv "$tools"
        pip_install "$tools" 'maturin>=1.9,<2'
    fi
    rm -rf "$dist"
    say "building the wheel: cargo's release profile with OpenSSL compiled from source (about 10 minutes on 2 cores the first time)"
    local started=$SECONDS
    "$tools/bin/maturin" build --release --quiet --out "$dist" >&2
    local wheel
    wheel="$(ls "$dist"/state_store-*.whl)"
    # The binary the wheel holds, for the interoperability tier and the benchmarks.
    mkdir -p "$CARGO_TARGET_DIR/bin"
    python3 - "$wheel" "$CARGO_TARGET_DIR/bin/state-store" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    [name] = [n for n in z.namelist() if n.endswith(".data/scripts/state-store")]
    with z.open(name) as src, open(out + ".tmp", "wb") as dst:
        dst.write(src.read())
os.chmod(out + ".tmp", 0o755)
os.replace(out + ".tmp", out)
PY
    say "built $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) in $((SECONDS - started))s"
}

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

if [ "$mode" = build ] || [ "$mode" = all ] || ! ls "$dist"/state_store-*.whl > /dev/null 2>&1; then
    build
fi
[ "$mode" = build ] && exit 0
wheel="$(ls "$dist"/state_store-*.whl)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The system-OpenSSL binary the TLS check compares with (the test suite has built it already).
CARGO_TARGET_DIR="$PWD/target" cargo build --locked --quiet
python3 -m venv "$work/venv"
pip_install "$work/venv" "$wheel"
check "$work/venv" built-wheel

say "pip install . (the wheel's build is reused)"
python3 -m venv "$work/venv-source"
pip_install "$work/venv-source" .
check "$work/venv-source" pip-install-dot

if $keep; then
    mkdir -p target/wheels
    cp "$wheel" target/wheels/
    say "kept target/wheels/$(basename "$wheel")"
fi
