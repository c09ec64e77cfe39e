#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit tests, the integration tests that drive the
# binary against real metastores, and the interoperability tier that puts it next to Apache
# Airflow 3.3.2 itself on SQLite, PostgreSQL and MariaDB (docs/compatibility.md), and last the
# Python wheel, built, installed into a fresh virtualenv and run. Needs cargo,
# python3 (the reference for Python's json and configparser behaviour, and the interpreter the
# tier installs Airflow for) and, the first time, network access to PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v python3 >/dev/null || { echo "error: python3 is required by the test suite" >&2; exit 1; }

# The completion and manual-page tests run a real zsh, fish and man (bash is always there), the
# operations guide's systemd units and alerts are checked by systemd-analyze and promtool, and
# the interoperability tier builds mysqlclient against the MariaDB client headers. A missing
# one fails its tests, so what is missing is installed from Debian's packages where this runs
# as root (or with sudo) with apt; elsewhere the run stops here, naming the packages. A machine
# that must go without some tools names them in STATE_STORE_TEST_MISSING_TOOLS (README).
packages=()
missing_tool() { [[ ",${STATE_STORE_TEST_MISSING_TOOLS:-}," == *",$1,"* ]]; }
need() { missing_tool "$1" || command -v "$1" >/dev/null 2>&1 || packages+=("$2"); }
need zsh zsh
need fish fish
need man man-db
need groff groff-base
need systemd-analyze systemd
need promtool prometheus
pkg-config --exists mariadb 2>/dev/null || pkg-config --exists mysqlclient 2>/dev/null ||
    packages+=(libmariadb-dev pkg-config)
if [ ${#packages[@]} -gt 0 ]; then
    sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
    if ! command -v apt-get >/dev/null 2>&1 || { [ ${#sudo[@]} -gt 0 ] && ! sudo -n true 2>/dev/null; }; then
        echo "error: the test suite needs ${packages[*]}; install them (Debian: sudo apt-get install ${packages[*]}), or name the tools this machine goes without in STATE_STORE_TEST_MISSING_TOOLS" >&2
        exit 1
    fi
    echo "test: installing ${packages[*]} (Debian packages) for the completion, manual-page, operations and interoperability tests" >&2
    if ! { "${sudo[@]}" apt-get update -qq &&
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends "${packages[@]}"; } >/dev/null 2>&1; then
        echo "error: cannot install ${packages[*]} with apt-get; the test suite needs them" >&2
        exit 1
    fi
fi

# The old-system proof of the wheel (scripts/wheel.sh old-system) makes a Debian 11 root file
# system with debootstrap and runs the wheel there in a chroot: it needs root, or password-less
# sudo. A machine without either names `debootstrap` in STATE_STORE_TEST_MISSING_TOOLS.
as_root=()
if ! missing_tool debootstrap && [ "$(id -u)" -ne 0 ]; then
    if ! sudo -n true 2>/dev/null; then
        echo "error: the wheel's old-system proof needs root or password-less sudo (debootstrap, chroot); or name debootstrap in STATE_STORE_TEST_MISSING_TOOLS" >&2
        exit 1
    fi
    as_root=(sudo -n "--preserve-env=STATE_STORE_TEST_POSTGRES_URL,STATE_STORE_TEST_MYSQL_URL")
fi

cargo fmt --all -- --check
cargo clippy --locked --all-targets --quiet -- -D warnings
cargo test --locked --all-targets --no-run --quiet

# The release builds of the run go on while the tests run, which mostly wait on the databases:
# the wheel's (zig, OpenSSL compiled from source, about 10 minutes on 2 cores), then the
# wheel built from the sdist with cargo and cc alone (as long again); they have a target
# directory of their own (target/wheel). Debian 11's root file system for the old-system proof
# is made beside them (debootstrap: mostly downloads). The interoperability tier then runs the
# binary the wheel holds, and the wheel's checks reuse the builds.
wheel_log=target/wheel-build.log
old_system_log=target/old-system-prepare.log
mkdir -p target
{ ./scripts/wheel.sh build && ./scripts/wheel.sh sdist; } > "$wheel_log" 2>&1 &
wheel_build=$!
old_system_prepare=""
if ! missing_tool debootstrap; then
    "${as_root[@]}" ./scripts/wheel.sh old-system prepare > "$old_system_log" 2>&1 &
    old_system_prepare=$!
fi
trap 'kill $wheel_build $old_system_prepare 2>/dev/null || true' EXIT
echo "test: the wheels are building in the background (log: $wheel_log)" >&2
cargo test --locked --all-targets
# The release workflow, which runs elsewhere, checked here: actionlint, cargo package and
# cargo publish --dry-run.
./scripts/release-check.sh
started=$SECONDS
if ! wait "$wheel_build"; then
    cat "$wheel_log" >&2
    echo "error: the wheel's build failed" >&2
    exit 1
fi
echo "test: $(grep '^wheel: built state_store-.*whl ' "$wheel_log" | head -n 1 | sed 's/^wheel: //') (waited $((SECONDS - started))s for the builds after the tests)" >&2
STATE_STORE_BIN="$PWD/target/wheel/bin/state-store" ./tests/interop/run.sh
./scripts/wheel.sh check
if [ -n "$old_system_prepare" ]; then
    if ! wait "$old_system_prepare"; then
        cat "$old_system_log" >&2
        echo "error: Debian 11's root file system for the old-system proof could not be made" >&2
        exit 1
    fi
    "${as_root[@]}" ./scripts/wheel.sh old-system
else
    echo "test: the old-system proof of the wheel is skipped (debootstrap in STATE_STORE_TEST_MISSING_TOOLS)" >&2
fi
trap - EXIT
