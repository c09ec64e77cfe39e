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
#
# Installing a test tool must start and enable nothing. promtool comes alone out of Debian's
# prometheus package, whose install would enable (and, where services are started, start) an
# unauthenticated server on port 9090: `apt-get download` fetches the package (checked against
# the signed archive index, as an install is) and only its usr/bin/promtool is unpacked, into
# target/test-tools/bin; no maintainer script runs and nothing is installed. A promtool already
# on PATH comes first. The other packages are installed with a policy-rc.d that refuses every
# start and a systemd preset that enables nothing, both for the install only (guarded_install).
packages=()
missing_tool() { [[ ",${STATE_STORE_TEST_MISSING_TOOLS:-}," == *",$1,"* ]]; }
need() { missing_tool "$1" || command -v "$1" >/dev/null 2>&1 || packages+=("$2"); }
test_tools="$PWD/target/test-tools"
export PATH="$PATH:$test_tools/bin"
need zsh zsh
need fish fish
need man man-db
need groff groff-base
need systemd-analyze systemd
fetch_promtool=false
missing_tool promtool || command -v promtool >/dev/null 2>&1 || fetch_promtool=true
pkg-config --exists mariadb 2>/dev/null || pkg-config --exists mysqlclient 2>/dev/null ||
    packages+=(libmariadb-dev pkg-config)

# Runs apt-get install with starting and enabling services refused, and takes the refusals away
# afterwards, on failure too; one the machine had before (Debian's container images ship a
# policy-rc.d) is its own and stays. policy-rc.d answers invoke-rc.d and deb-systemd-invoke
# (101: not allowed); the preset answers deb-systemd-helper, which enables a unit on its first
# install through `systemctl preset`. systemd itself goes first, on its own, so that a unit of
# another package is enabled through the preset and not by links deb-systemd-helper makes when
# there is no systemctl.
guarded_install() {
    "${sudo[@]}" bash -s -- "$@" <<'GUARD'
set -u
policy=/usr/sbin/policy-rc.d
presets=/etc/systemd/system-preset
preset=$presets/00-state-store-test.preset
made=()
cleanup() {
    local path
    for path in "${made[@]}"; do
        if [ -d "$path" ]; then rmdir "$path"; else rm -f "$path"; fi
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [ ! -e "$policy" ] && (set -C && printf '#!/bin/sh\nexit 101\n' > "$policy") 2>/dev/null; then
    made=("$policy" "${made[@]}")
    chmod 0755 "$policy"
fi
if [ ! -d "$presets" ]; then
    mkdir -p "$presets" && made=("$presets" "${made[@]}")
fi
if (set -C && printf 'disable *\n' > "$preset") 2>/dev/null; then
    made=("$preset" "${made[@]}")
fi
apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"; }
rest=()
for p in "$@"; do
    [ "$p" = systemd ] || rest+=("$p")
done
if [ ${#rest[@]} -lt $# ]; then
    apt_install systemd || exit 1
fi
[ ${#rest[@]} -eq 0 ] || apt_install "${rest[@]}" || exit 1
GUARD
}

# promtool alone, out of Debian's prometheus package, into target/test-tools/bin.
fetch_promtool() (
    mkdir -p "$test_tools/bin"
    work="$(mktemp -d)"
    unpacked="$(mktemp "$test_tools/bin/.promtool.XXXXXX")"
    trap 'rm -rf "$work" "$unpacked"' EXIT
    # apt downloads as its own user where it can: let that user write the directory.
    if [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1; then chown _apt "$work"; fi
    (cd "$work" && apt-get download -qq prometheus) || exit 1
    debs=("$work"/prometheus_*.deb)
    dpkg-deb --fsys-tarfile "${debs[0]}" | tar -xOf - ./usr/bin/promtool > "$unpacked" || exit 1
    chmod 0755 "$unpacked"
    "$unpacked" --version >/dev/null 2>&1 || exit 1
    mv -f "$unpacked" "$test_tools/bin/promtool"
)

if [ ${#packages[@]} -gt 0 ] || $fetch_promtool; then
    wanted=("${packages[@]}")
    $fetch_promtool && wanted+=("promtool")
    sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
    if ! command -v apt-get >/dev/null 2>&1 || { [ ${#sudo[@]} -gt 0 ] && ! sudo -n true 2>/dev/null; }; then
        echo "error: the test suite needs ${wanted[*]}; install them (Debian: sudo apt-get install ${packages[*]}; promtool: the prometheus package's usr/bin/promtool, which ./scripts/test.sh unpacks alone into target/test-tools/bin), or name the tools this machine goes without in STATE_STORE_TEST_MISSING_TOOLS" >&2
        exit 1
    fi
    echo "test: installing ${wanted[*]} from Debian's packages (promtool alone, unpacked from prometheus into target/test-tools/bin) for the completion, manual-page, operations and interoperability tests; no service is started or enabled" >&2
    if ! "${sudo[@]}" apt-get update -qq >/dev/null 2>&1; then
        echo "error: apt-get update failed; the test suite needs ${wanted[*]}" >&2
        exit 1
    fi
    if [ ${#packages[@]} -gt 0 ] && ! guarded_install "${packages[@]}" >/dev/null 2>&1; then
        echo "error: cannot install ${packages[*]} with apt-get; the test suite needs them" >&2
        exit 1
    fi
    if $fetch_promtool && ! fetch_promtool >/dev/null 2>&1; then
        echo "error: cannot unpack promtool from Debian's prometheus package (apt-get download prometheus); the test suite needs it" >&2
        exit 1
    fi
fi

# The old-system proof of the wheel (scripts/wheel.sh old-system) makes a Debian 11 root file
# system with debootstrap and runs the wheel there in a chroot, as nobody in PID and mount
# namespaces of its own (unshare): it needs root, or password-less sudo. A machine without
# either names `debootstrap` in STATE_STORE_TEST_MISSING_TOOLS.
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
# Each part's log is kept, and the counts the run prints at its end are read from them
# (docs/development.md quotes that line of a dated run).
rust_log=target/test-rust.log
interop_log=target/test-interop.log
run_started=$SECONDS
cargo test --locked --all-targets 2>&1 | tee "$rust_log"
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
STATE_STORE_BIN="$PWD/target/wheel/bin/state-store" ./tests/interop/run.sh 2>&1 | tee "$interop_log"
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
# The tests each part passed, from its log: cargo's `Running` line names the target and its
# `test result:` line counts it; pytest's last line counts a dialect's tier.
rust_counts=$(awk '/^ *Running (unittests )?[^ ]+/ { target = $2 == "unittests" ? $3 : $2;
        sub(/.*\//, "", target); sub(/\.rs$/, "", target) }
    /^test result: ok\./ && target != "" && $4 > 0 { printf "%s%s %s", sep, target, $4; sep = ", "; target = "" }' "$rust_log")
interop_counts=$(awk '/^interop: ── [a-z]+ ──$/ { dialect = $3 }
    / passed/ && /^=+ / && dialect != "" { for (i = 1; i < NF; i++) if ($(i + 1) ~ /^passed/) n = $i;
        printf "%s%s %s", sep, dialect, n; sep = ", "; dialect = "" }' "$interop_log")
echo "test: passed: $rust_counts; interoperability $interop_counts; $((SECONDS - run_started)) s from the first test" | tee target/test-counts.txt >&2
