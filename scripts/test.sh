#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit and integration tests (real haproxy).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-haproxy.sh
source scripts/ensure-test-tools.sh
source scripts/ensure-haproxy30.sh
# HAProxy 3.2 LTS and 3.4 as Debian sid/experimental ship them, run from a cached folder.
source scripts/ensure-haproxy-sid.sh
# The fleet's suites run a real etcd cluster (tests/edge/fleet/).
source scripts/ensure-etcd.sh
# The Debian images the real-systemd lab boots (debootstrap: the network, not the CPU) are
# made while cargo builds. Their tools are installed first, here: apt-get holds the
# system's dpkg lock, which build-deb.sh may need meanwhile.
image_tools=()
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || image_tools+=(debootstrap)
command -v systemd-nspawn >/dev/null 2>&1 || image_tools+=(systemd-container)
apt_install_missing "${image_tools[@]+"${image_tools[@]}"}"
images_log=$(mktemp)
lab_log=$(mktemp)
bash scripts/ensure-systemd-image.sh >"$images_log" 2>&1 &
images_pid=$!
lab_pid=""
trap 'kill $images_pid $lab_pid 2>/dev/null || true; rm -f "$images_log" "$lab_log"' EXIT
cargo fmt --all -- --check
cargo clippy -j2 --workspace --all-targets -- -D warnings
cargo nextest --version >/dev/null 2>&1 || cargo install --locked cargo-nextest
# The package tests/systemd_lab.rs installs in a booted Debian container.
./scripts/build-deb.sh --dev
cargo nextest run --workspace --no-run
if ! wait "$images_pid"; then
  cat "$images_log" >&2
  echo "test.sh: the systemd test images could not be made (log above)" >&2
  exit 1
fi
cat "$images_log" >&2
# The real-systemd lab (tests/systemd_lab.rs: the lab README on Debian 12, on Debian 13, on
# Debian 13 with HAProxy 3.4, the package on both) mostly waits (15 s probes around each
# delivery, boots): it runs beside the rest, its report printed after.
cargo nextest run -j3 -p hapctl --test systemd_lab --no-fail-fast >"$lab_log" 2>&1 &
lab_pid=$!
main_status=0
cargo nextest run -j2 --workspace --no-fail-fast -E 'not binary(systemd_lab)' || main_status=$?
lab_status=0
wait "$lab_pid" || lab_status=$?
echo "=== the real-systemd lab (tests/systemd_lab.rs)" >&2
cat "$lab_log" >&2
if [ "$main_status" -ne 0 ] || [ "$lab_status" -ne 0 ]; then
  echo "test.sh: the workspace run exited $main_status, the real-systemd lab $lab_status" >&2
  exit 1
fi
# Again on HAProxy 3.0, 3.2 and 3.4, the suites that talk to HAProxy most (reload
# confirmation, the runtime API, certificates, the log ring and the traffic counted from it,
# adoption, kills at every crash point, HTTP/3: QUIC on OpenSSL's compatibility layer on 3.0,
# native on 3.2 and 3.4, the WAF's SPOE: applets on 3.0, a multiplexer from 3.1), by module of
# the integration binary: docs/haproxy-versions.md.
for haproxy in "$HAPROXY30_BIN" "$HAPROXY32_BIN" "$HAPROXY34_BIN"; do
  echo "=== the HAProxy-facing suites on $("$haproxy" -v | sed -n 1p)" >&2
  HAPCTL_HAPROXY_BIN="$haproxy" HAPCTL_QUIC_HAPROXY_BIN="$haproxy" \
    cargo nextest run -j2 -p hapctl --no-fail-fast -E \
    '(binary(edge) & test(/^(apply|blocks|certs::tls|crash|deliveries|domains::runtime|domains::servers|http3|logs|traffic|waf)::/)) | (kind(lib) & test(/^haproxy::/))'
done
