#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit tests and the integration tests that drive
# the binary against real SQLite metastores. Needs cargo and python3 (the reference for
# Python's json and configparser behaviour).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v python3 >/dev/null || { echo "error: python3 is required by the test suite" >&2; exit 1; }
cargo fmt --all -- --check
cargo clippy --locked --all-targets --quiet -- -D warnings
cargo test --locked --all-targets
