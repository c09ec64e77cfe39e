#!/usr/bin/env bash
# The Python package, as an Airflow user installs it: builds the wheel (pyproject.toml, maturin),
# installs it into fresh virtualenvs, and runs the installed binary. The release workflow
# (.github/workflows/release.yml) builds every platform's wheel with this script.
#
#   ./scripts/wheel.sh               # build, then check
#   ./scripts/wheel.sh build [TARGET]
#                                    # only build: target/wheel/dist/*.whl, and the binary it
#                                    # holds as target/wheel/bin/state-store. TARGET is a Rust
#                                    # target triple, by default this machine's; on Linux the
#                                    # wheel is manylinux2014 (glibc 2.17) for *-linux-gnu and
#                                    # musllinux_1_2 for *-linux-musl
#   ./scripts/wheel.sh check         # install and check the built wheel (building it if
#                                    # needed), the sdist's wheel and `pip install .`
#   ./scripts/wheel.sh sdist         # the source distribution, target/wheel/dist/*.tar.gz, and
#                                    # a wheel built from it by pip with cargo and the C
#                                    # compiler only, target/wheel/from-sdist/*.whl
#   ./scripts/wheel.sh archive       # the plain binary of the built wheel, with its manual pages
#                                    # and shell completions: target/wheel/dist/*.tar.gz
#   ./scripts/wheel.sh old-system    # the built wheel installed and run on Debian 11 (glibc
#                                    # 2.31, Python 3.9) by scripts/smoke.sh in a chroot, as
#                                    # nobody, in PID and mount namespaces of its own; root
#   ./scripts/wheel.sh old-system prepare
#                                    # only make (or find) Debian 11's root file system
#   ./scripts/wheel.sh --keep        # build, check, and keep the wheel in target/wheels
#
# The Linux wheel is linked by zig (the `ziglang` package from PyPI, through maturin's --zig)
# against glibc 2.17's symbols, so it installs and runs on every glibc from 2.17 on, whatever
# glibc the build machine has; OpenSSL is compiled from source and linked in (the
# `vendored-openssl` feature). About 10 minutes on 2 cores the first time, then seconds. The
# build has a target directory of its own, target/wheel, so that it can run while `cargo test`
# holds target/ (scripts/test.sh does so). Needs python3 and, the first time, network access to
# PyPI (maturin, ziglang, auditwheel, pinned below, into target/wheel/tools). The sdist's wheel
# is built as a user's `pip install` of the sdist builds it: maturin from PyPI, cargo, cc.
set -euo pipefail
cd "$(dirname "$0")/.."

MATURIN=maturin==1.16.0
ZIGLANG=ziglang==0.17.1
AUDITWHEEL=auditwheel==6.8.2
# The oldest systems the wheels are for (README, Install): glibc 2.17 (CentOS 7's, the
# manylinux2014 baseline) and musl 1.2 (Alpine 3.13 on).
GLIBC_COMPATIBILITY=manylinux2014
GLIBC_MAX=2.17
MUSL_COMPATIBILITY=musllinux_1_2
# The Debian release of the old-system proof, and where its packages come from.
OLD_SYSTEM_SUITE=bullseye
DEBIAN_MIRROR="${STATE_STORE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

mode=all
keep=false
target=""
case "${1:-}" in
    "") ;;
    build)
        mode=build
        target="${2:-}"
        ;;
    old-system)
        mode=old-system
        case "${2:-}" in
            "") ;;
            prepare) mode=old-system-prepare ;;
            *) echo "wheel: unknown argument '$2' to old-system (expected prepare or nothing)" >&2; exit 2 ;;
        esac
        ;;
    check | sdist | archive) mode=$1 ;;
    --keep) keep=true ;;
    *) echo "wheel: unknown argument '$1' (expected build [TARGET], check, sdist, archive, old-system or --keep)" >&2; exit 2 ;;
esac

say() { echo "wheel: $*" >&2; }
fail() { say "error: $*"; exit 1; }

export CARGO_TARGET_DIR="$PWD/target/wheel"
dist="$CARGO_TARGET_DIR/dist"
tools="$CARGO_TARGET_DIR/tools"
pip_install() { "$1/bin/python" -m pip install --quiet --disable-pip-version-check --retries 5 "${@:2}"; }

# The version cargo gives the binary.
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"

host_target() {
    local arch
    arch="$(uname -m)"
    case "$(uname -s)" in
        Linux) echo "${arch/arm64/aarch64}-unknown-linux-gnu" ;;
        Darwin) echo "${arch/arm64/aarch64}-apple-darwin" ;;
        *) fail "no wheel is built on $(uname -s)" ;;
    esac
}

install_tools() {
    local wanted=("$MATURIN")
    [[ $1 == *-linux-* ]] && wanted+=("$ZIGLANG" "$AUDITWHEEL")
    local stamp="$tools/.installed"
    if [ ! -x "$tools/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${wanted[*]}" ]; then
        rm -rf "$tools"
        python3 -m venv "$tools"
        pip_install "$tools" "${wanted[@]}"
        echo "${wanted[*]}" > "$stamp"
    fi
}

# The wheel's binary, for the interoperability tier, the benchmarks and the archive.
extract_binary() {
    mkdir -p "$CARGO_TARGET_DIR/bin"
    python3 - "$1" "$CARGO_TARGET_DIR/bin/state-store" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    [name] = [n for n in z.namelist() if n.endswith(".data/scripts/state-store")]
    with z.open(name) as src, open(out + ".tmp", "wb") as dst:
        dst.write(src.read())
os.chmod(out + ".tmp", 0o755)
os.replace(out + ".tmp", out)
PY
}

# What the manylinux wheel promises, checked on the binary itself: auditwheel's platform tag, no
# glibc symbol version above the baseline, and OpenSSL inside (no libssl or libcrypto needed).
verify_linux() {
    local wheel=$1 want=$2 shown
    shown="$("$tools/bin/auditwheel" show "$wheel" 2>&1)" || fail "auditwheel show: $shown"
    say "auditwheel show $(basename "$wheel"):"
    echo "    ${shown//$'\n'/$'\n'    }" >&2
    # auditwheel wraps its lines; the tag is quoted.
    tr -s ' \n' ' ' <<< "$shown" | grep -q "consistent with the following platform tag: \"${want}_" ||
        fail "auditwheel does not find $(basename "$wheel") consistent with $want"
    "$tools/bin/python" - "$CARGO_TARGET_DIR/bin/state-store" "$GLIBC_MAX" <<'PY' || fail "the binary does not keep to its platform"
import sys
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

path, limit = sys.argv[1], tuple(int(p) for p in sys.argv[2].split("."))
with open(path, "rb") as f:
    elf = ELFFile(f)
    needed = [t.needed for s in elf.iter_sections() if isinstance(s, DynamicSection)
              for t in s.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    versions = set()
    for s in elf.iter_sections():
        if isinstance(s, GNUVerNeedSection):
            for _, auxes in s.iter_versions():
                versions.update(a.name for a in auxes)
glibc = sorted((tuple(int(p) for p in v[6:].split(".")), v) for v in versions if v.startswith("GLIBC_2"))
print(f"wheel: the binary needs {', '.join(needed) or 'no shared library (static)'}", file=sys.stderr)
ok = True
if any(n.startswith(("libssl", "libcrypto")) for n in needed):
    print("wheel: error: the binary needs the system's OpenSSL", file=sys.stderr)
    ok = False
if glibc:
    print(f"wheel: its highest glibc symbol version is {glibc[-1][1]}", file=sys.stderr)
    if glibc[-1][0] > limit:
        too_new = [v for k, v in glibc if k > limit]
        print(f"wheel: error: symbol versions above GLIBC_{sys.argv[2]}: {', '.join(too_new)}", file=sys.stderr)
        ok = False
sys.exit(0 if ok else 1)
PY
}

build() {
    local triple=${1:-$(host_target)}
    install_tools "$triple"
    local args=(build --release --quiet --target "$triple" --out "$dist") compat=""
    case "$triple" in
        *-linux-gnu) compat=$GLIBC_COMPATIBILITY ;;
        *-linux-musl) compat=$MUSL_COMPATIBILITY ;;
        *-apple-darwin) ;;
        *) fail "no wheel is built for $triple (expected a *-linux-gnu, *-linux-musl or *-apple-darwin target)" ;;
    esac
    # maturin finds zig as `python3 -m ziglang`, so the tools' python3 comes first on PATH.
    [ -n "$compat" ] && args+=(--zig --compatibility "$compat")
    rm -f "$dist"/state_store-*.whl
    say "building the wheel for $triple${compat:+ ($compat)}: cargo's release profile with OpenSSL compiled from source (about 10 minutes on 2 cores the first time)"
    local started=$SECONDS
    PATH="$tools/bin:$PATH" "$tools/bin/maturin" "${args[@]}" >&2
    local wheel
    wheel="$(ls "$dist"/state_store-*.whl)"
    extract_binary "$wheel"
    echo "$triple" > "$CARGO_TARGET_DIR/bin/target"
    # The musl binary is static; the smoke test on Alpine is its check (release workflow).
    if [[ $triple == *-linux-gnu ]]; then
        verify_linux "$wheel" manylinux_2_17
    fi
    say "built $(basename "$wheel") ($(wc -c < "$wheel") bytes; the binary $(wc -c < "$CARGO_TARGET_DIR/bin/state-store") bytes) in $((SECONDS - started))s"
}

built_wheel() {
    if ! ls "$dist"/state_store-*.whl > /dev/null 2>&1; then
        build
    fi
    ls "$dist"/state_store-*.whl
}

# The source distribution, and the wheel pip builds from it as a user's `pip install` of it
# would: build isolation, maturin from PyPI, cargo and the C compiler on PATH, nothing of
# target/wheel/tools (no zig).
sdist() {
    install_tools "$(host_target)"
    mkdir -p "$dist"
    rm -f "$dist"/state_store-*.tar.gz
    "$tools/bin/maturin" sdist --out "$dist" >&2
    local archive
    archive="$(ls "$dist"/state_store-*.tar.gz)"
    say "built $(basename "$archive") ($(wc -c < "$archive") bytes); building a wheel from it with cargo and cc (about 10 minutes on 2 cores the first time)"
    local from="$CARGO_TARGET_DIR/from-sdist" started=$SECONDS
    rm -rf "$from"
    local builder="$CARGO_TARGET_DIR/sdist-venv"
    [ -x "$builder/bin/python" ] || python3 -m venv "$builder"
    # Without --target, cargo builds in target/wheel/release, beside the zig build's
    # target/wheel/TARGET/release, and leaves that as it is.
    "$builder/bin/python" -m pip wheel --quiet \
        --disable-pip-version-check --retries 5 --no-deps --wheel-dir "$from" "$archive" >&2
    say "built $(basename "$(ls "$from"/state_store-*.whl)") from the sdist in $((SECONDS - started))s"
}

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

check_all() {
    local wheel
    wheel="$(built_wheel)"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    # The system-OpenSSL binary the TLS check compares with (the test suite has built it already).
    CARGO_TARGET_DIR="$PWD/target" cargo build --locked --quiet
    python3 -m venv "$work/venv"
    pip_install "$work/venv" "$wheel"
    check "$work/venv" built-wheel

    # The wheel pip builds from the sdist with cargo and cc alone (in target/wheel/release).
    if ! ls "$CARGO_TARGET_DIR"/from-sdist/state_store-*.whl > /dev/null 2>&1; then
        sdist
    fi
    python3 -m venv "$work/venv-sdist"
    pip_install "$work/venv-sdist" "$(ls "$CARGO_TARGET_DIR"/from-sdist/state_store-*.whl)"
    check "$work/venv-sdist" from-sdist

    # `pip install .` from the checkout, as a user runs it (pyproject.toml, maturin's PEP 517
    # backend, cargo and cc): the same sources as the sdist's, so cargo reuses that build.
    say "pip install . (the sdist's build is reused)"
    python3 -m venv "$work/venv-source"
    pip_install "$work/venv-source" .
    check "$work/venv-source" pip-install-dot

    if $keep; then
        mkdir -p target/wheels
        cp "$wheel" target/wheels/
        say "kept target/wheels/$(basename "$wheel")"
    fi
}

# The plain binary for a release: bin/, the manual pages and the completions the binary
# generates, the README and the licence, in state-store-VERSION-TARGET.tar.gz.
archive() {
    local bin="$CARGO_TARGET_DIR/bin/state-store" triple
    built_wheel > /dev/null
    triple="$(cat "$CARGO_TARGET_DIR/bin/target")"
    local name="state-store-$version-$triple"
    # Global: the EXIT trap runs after the function has returned.
    stage="$(mktemp -d)"
    trap 'rm -rf "$stage"' EXIT
    local root="$stage/$name"
    mkdir -p "$root/bin" "$root/share/man/man1" "$root/share/bash-completion/completions" \
        "$root/share/zsh/site-functions" "$root/share/fish/vendor_completions.d"
    cp "$bin" "$root/bin/state-store"
    "$bin" man --out-dir "$root/share/man/man1" 2> /dev/null
    "$bin" completions bash > "$root/share/bash-completion/completions/state-store"
    "$bin" completions zsh > "$root/share/zsh/site-functions/_state-store"
    "$bin" completions fish > "$root/share/fish/vendor_completions.d/state-store.fish"
    cp README.md LICENSE "$root/"
    mkdir -p "$dist"
    tar -C "$stage" -czf "$dist/$name.tar.gz" "$name"
    local pages=("$root"/share/man/man1/*.1)
    say "archived $dist/$name.tar.gz (${#pages[@]} manual pages, 3 completions)"
}

# Debian 11's root file system, made once by debootstrap and kept in target/old-system; the
# built wheel is installed there and run by scripts/smoke.sh in a chroot, against this machine's
# PostgreSQL and MariaDB (the chroot shares the network) in databases made for the run.
# What the EXIT trap undoes is global: the trap runs after the function has returned.
old_root=""
old_inside=""
old_home=""
old_database=""
old_postgres=""
old_mysql_flags=()
old_system_cleanup() {
    [ -n "$old_inside" ] && rm -rf "$old_inside"
    if [ -n "$old_database" ]; then
        psql -q "$old_postgres" -c "DROP DATABASE IF EXISTS $old_database" > /dev/null 2>&1 || true
        mysql "${old_mysql_flags[@]}" -e "DROP DATABASE IF EXISTS $old_database" > /dev/null 2>&1 || true
    fi
}

old_system_root() {
    [ "$(id -u)" -eq 0 ] || fail "old-system needs root (debootstrap, mount, chroot)"
    [ "$(uname -s)" = Linux ] || fail "old-system runs on Linux"
    local packages=()
    command -v debootstrap > /dev/null || packages+=(debootstrap)
    [ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || packages+=(debian-archive-keyring)
    command -v psql > /dev/null || packages+=(postgresql-client)
    command -v mysql > /dev/null || packages+=(default-mysql-client)
    if [ ${#packages[@]} -gt 0 ]; then
        say "installing ${packages[*]} with apt-get"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}"; } > /dev/null ||
            fail "cannot install ${packages[*]}"
    fi
    local arch started=$SECONDS
    arch="$(dpkg --print-architecture 2> /dev/null || uname -m)"
    root="$PWD/target/old-system/$OLD_SYSTEM_SUITE-$arch"
    if [ ! -e "$root/.state-store-complete" ]; then
        # Never remove a tree something is still mounted in.
        if grep -q " $root/" /proc/mounts; then
            fail "something is mounted under $root"
        fi
        rm -rf "$root"
        mkdir -p "$(dirname "$root")"
        say "debootstrap $OLD_SYSTEM_SUITE ($arch) from $DEBIAN_MIRROR into $root (a few minutes, once)"
        debootstrap --variant=minbase --include=python3-venv "$OLD_SYSTEM_SUITE" "$root" "$DEBIAN_MIRROR" > "$root.log" 2>&1 ||
            { tail -n 20 "$root.log" >&2; fail "debootstrap failed (log: $root.log)"; }
        touch "$root/.state-store-complete"
        say "made the root file system in $((SECONDS - started))s"
    else
        say "reusing $root"
    fi
}

# Runs a command of the root file system as nobody, in PID and mount namespaces of its own: its
# /proc, mounted in that mount namespace only, shows the chroot's processes and no other, and
# goes with them; a process of the proof can neither see nor signal one of this machine's, and
# root's power to leave a chroot is not its to use. --kill-child ends whatever it left running
# when the command (or this script) ends. nobody and nogroup are 65534 in Debian's passwd.
in_old_root() {
    unshare --pid --fork --kill-child --mount --mount-proc="$old_root/proc" \
        chroot --userspec=65534:65534 --groups=65534 "$old_root" \
        /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$old_home" LANG=C.UTF-8 "$@"
}

old_system() {
    local started=$SECONDS root
    old_system_root
    local wheel
    wheel="$(built_wheel)"
    local postgres="${STATE_STORE_TEST_POSTGRES_URL:-postgresql://postgres@127.0.0.1:5432/postgres}"
    local mysql="${STATE_STORE_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/}"
    # mysql://user[:password]@host[:port]/ as the mysql client's flags.
    [[ $mysql =~ ^mysql://([^:@/]+)(:([^@/]*))?@([^:/]+)(:([0-9]+))?/?$ ]] ||
        fail "STATE_STORE_TEST_MYSQL_URL is not mysql://USER[:PASSWORD]@HOST[:PORT]/"
    old_mysql_flags=(--protocol=tcp -u "${BASH_REMATCH[1]}" -h "${BASH_REMATCH[4]}" -P "${BASH_REMATCH[6]:-3306}")
    if [ -n "${BASH_REMATCH[3]}" ]; then
        old_mysql_flags+=("-p${BASH_REMATCH[3]}")
    fi
    old_postgres=$postgres
    old_root=$root
    trap old_system_cleanup EXIT
    trap 'exit 130' INT TERM
    old_inside="$(mktemp -d "$root/tmp/state-store-smoke.XXXXXX")"
    cp "$wheel" scripts/smoke.sh "$old_inside/"
    # Readable by nobody, written only by root; and a home of nobody's own for the run.
    chmod 0755 "$old_inside"
    chmod 0644 "$old_inside"/*
    mkdir "$old_inside/home"
    chown 65534:65534 "$old_inside/home"
    local in_chroot
    in_chroot="/tmp/$(basename "$old_inside")"
    old_home="$in_chroot/home"
    old_database="state_store_smoke_$$"
    psql -q "$postgres" -c "CREATE DATABASE $old_database" > /dev/null ||
        fail "cannot create a PostgreSQL database at $postgres"
    mysql "${old_mysql_flags[@]}" -e "CREATE DATABASE $old_database" ||
        fail "cannot create a MySQL database at $mysql"

    local glibc python
    glibc="$(in_old_root /usr/bin/ldd --version | head -n 1 | sed 's/.* //')"
    python="$(in_old_root /usr/bin/python3 --version 2>&1)"
    say "in the chroot (as nobody, in PID and mount namespaces of its own): Debian $(cat "$root/etc/debian_version"), glibc $glibc, $python"
    in_old_root STATE_STORE_SMOKE_PYTHON=python3 \
        STATE_STORE_SMOKE_POSTGRES_URL="${postgres%/*}/$old_database" \
        STATE_STORE_SMOKE_MYSQL_URL="${mysql%/}/$old_database" \
        /bin/sh "$in_chroot/smoke.sh" "$in_chroot/$(basename "$wheel")" ||
        fail "the smoke test failed on Debian $OLD_SYSTEM_SUITE"
    old_system_cleanup
    old_root="" old_inside="" old_database=""
    say "old-system: $(basename "$wheel") passed on Debian $OLD_SYSTEM_SUITE (glibc $glibc) in $((SECONDS - started))s"
}

case "$mode" in
    build) build "$target" ;;
    check) check_all ;;
    sdist) sdist ;;
    archive) archive ;;
    old-system) old_system ;;
    old-system-prepare)
        old_system_root
        ;;
    all)
        build
        check_all
        ;;
esac
