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
cargo fmt --all -- --check
cargo clippy --locked --all-targets --quiet -- -D warnings
cargo test --locked --all-targets
./tests/interop/run.sh
./scripts/wheel.sh
