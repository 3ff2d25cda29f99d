#!/usr/bin/env bash
# Runs a local edge: builds hapctl, creates ./.hapctl (SQLite state) on first use, routes a
# demo site to a demo application, then runs `hapctl serve` in the foreground: HAProxy on
# 127.0.0.1:8080 and HTTPS on 127.0.0.1:8443 (started by hapctl; a self-signed default
# certificate until one is imported or requested) and the API on 127.0.0.1:9090. Ctrl-C stops the API;
# HAProxy keeps running (stop it with: target/release/hapctl --state-dir .hapctl haproxy stop).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-haproxy.sh
cargo build -j2 --release -p hapctl -p demo-app
bin=target/release
export HAPCTL_STATE_DIR="${HAPCTL_STATE_DIR:-$PWD/.hapctl}"
[ -f "$HAPCTL_STATE_DIR/hapctl.toml" ] || "$bin/hapctl" init
# A demo application behind the edge, detached so it outlives this script.
if ! curl -sf http://127.0.0.1:18080/ready >/dev/null 2>&1; then
  setsid "$bin/demo-app" --version 1.0.0 --port 18080 >"$HAPCTL_STATE_DIR/demo-app.log" 2>&1 < /dev/null &
  for _ in $(seq 50); do curl -sf http://127.0.0.1:18080/ready >/dev/null 2>&1 && break; sleep 0.1; done
fi
"$bin/hapctl" domain add demo.localhost --server 127.0.0.1:18080
cat <<MSG

  edge:  curl -H 'Host: demo.localhost' http://127.0.0.1:8080/
  HTTPS: curl -k --resolve demo.localhost:8443:127.0.0.1 https://demo.localhost:8443/
  API:   curl -H "Authorization: Bearer \$(cat $HAPCTL_STATE_DIR/api-token)" http://127.0.0.1:9090/v1/status
  docs:  GET /openapi.json (same token)

MSG
exec "$bin/hapctl" serve
