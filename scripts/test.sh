#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit and integration tests (real haproxy).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-haproxy.sh
source scripts/ensure-test-tools.sh
source scripts/ensure-systemd-image.sh
source scripts/ensure-haproxy30.sh
# The fleet's suites run a real etcd cluster (tests/edge/fleet/).
source scripts/ensure-etcd.sh
cargo fmt --all -- --check
cargo clippy -j2 --workspace --all-targets -- -D warnings
cargo nextest --version >/dev/null 2>&1 || cargo install --locked cargo-nextest
# The package tests/systemd_lab.rs installs in a booted Debian container.
./scripts/build-deb.sh --dev
cargo nextest run -j2 --workspace --no-fail-fast
# Again on HAProxy 3.0 LTS, the suites that talk to HAProxy most (reload confirmation, the
# runtime API, certificates, the log ring and the traffic counted from it, adoption, kills at every crash point), by module
# of the integration binary: docs/haproxy-versions.md.
HAPCTL_HAPROXY_BIN="$HAPROXY30_BIN" cargo nextest run -j2 -p hapctl --no-fail-fast -E \
  '(binary(edge) & test(/^(apply|blocks|certs::tls|crash|deliveries|domains::runtime|domains::servers|logs|traffic)::/)) | (kind(lib) & test(/^haproxy::/))'
