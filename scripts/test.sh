#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit and integration tests (real haproxy).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-haproxy.sh
source scripts/ensure-test-tools.sh
source scripts/ensure-systemd-image.sh
cargo fmt --all -- --check
cargo clippy -j2 --workspace --all-targets -- -D warnings
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run -j2 --workspace --no-fail-fast
else
  cargo test -j2 --workspace --no-fail-fast
fi
