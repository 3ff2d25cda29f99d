#!/usr/bin/env bash
# A local fleet to try (docs/fleet.md): a 3-member etcd cluster and 3 edges on loopback, each
# with its own state dir, HAProxy and `hapctl serve`, sharing one desired state. Everything
# lives in ./.fleet; `scripts/fleet.sh stop` stops it all.
#
#   etcd      http://127.0.0.1:23791..23793
#   edge eN   HTTP 127.0.0.1:1818N, HTTPS 127.0.0.1:1854N, API 127.0.0.1:1919N
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD/.fleet"
bin=target/release

stop() {
  for n in 0 1 2; do
    [ -f "$root/e$n/serve.pid" ] && kill "$(cat "$root/e$n/serve.pid")" 2>/dev/null || true
    [ -d "$root/e$n" ] && timeout 30 "$bin/hapctl" --state-dir "$root/e$n" haproxy stop >/dev/null 2>&1 || true
  done
  for m in 1 2 3; do
    [ -f "$root/etcd$m.pid" ] && kill "$(cat "$root/etcd$m.pid")" 2>/dev/null || true
  done
  [ -f "$root/demo-app.pid" ] && kill "$(cat "$root/demo-app.pid")" 2>/dev/null || true
  # etcd writes its last state before it exits.
  for m in 1 2 3; do
    [ -f "$root/etcd$m.pid" ] || continue
    for _ in $(seq 100); do kill -0 "$(cat "$root/etcd$m.pid")" 2>/dev/null || break; sleep 0.1; done
  done
  echo "fleet stopped (state kept in $root; remove it to start afresh)"
}

if [ "${1:-}" = stop ]; then
  stop
  exit 0
fi

source scripts/ensure-haproxy.sh
source scripts/ensure-etcd.sh
cargo build -j2 --release -p hapctl -p demo-app
mkdir -p "$root"

# Waits (up to 30 s) until the command given succeeds.
wait_for() {
  for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "timed out waiting for: $*" >&2
  return 1
}

cluster="m1=http://127.0.0.1:23801,m2=http://127.0.0.1:23802,m3=http://127.0.0.1:23803"
endpoints='"http://127.0.0.1:23791", "http://127.0.0.1:23792", "http://127.0.0.1:23793"'
for m in 1 2 3; do
  state=new
  [ -d "$root/etcd$m/member" ] && state=existing
  setsid "$HAPCTL_ETCD_BIN" --name "m$m" --data-dir "$root/etcd$m" \
    --listen-client-urls "http://127.0.0.1:2379$m" --advertise-client-urls "http://127.0.0.1:2379$m" \
    --listen-peer-urls "http://127.0.0.1:2380$m" --initial-advertise-peer-urls "http://127.0.0.1:2380$m" \
    --initial-cluster "$cluster" --initial-cluster-state "$state" \
    >"$root/etcd$m.log" 2>&1 </dev/null &
  echo $! >"$root/etcd$m.pid"
done
wait_for "$HAPCTL_ETCDCTL_BIN" --endpoints=http://127.0.0.1:23791,http://127.0.0.1:23792,http://127.0.0.1:23793 endpoint health --cluster

# A demo application the fleet's first domain is routed to.
if ! curl -sf http://127.0.0.1:18090/ready >/dev/null 2>&1; then
  setsid "$bin/demo-app" --version 1.0.0 --port 18090 >"$root/demo-app.log" 2>&1 </dev/null &
  echo $! >"$root/demo-app.pid"
  wait_for curl -sf http://127.0.0.1:18090/ready
fi

for n in 0 1 2; do
  dir="$root/e$n"
  if [ ! -f "$dir/hapctl.toml" ]; then
    "$bin/hapctl" --state-dir "$dir" init --http-bind "127.0.0.1:1818$n" >/dev/null
    sed -i -e "s|^https_bind = .*|https_bind = \"127.0.0.1:1854$n\"|" \
      -e "s|^listen = \"127.0.0.1:9090\"|listen = \"127.0.0.1:1919$n\"|" \
      -e "s|^listen = \"127.0.0.1:601\"|listen = \"127.0.0.1:1860$n\"|" "$dir/hapctl.toml"
    printf '\n[fleet]\nendpoints = [%s]\nname = "e%s"\n' "$endpoints" "$n" >>"$dir/hapctl.toml"
  fi
  # The first edge publishes its state once; the others take the fleet's when they start.
  if [ "$n" = 0 ] && ! "$HAPCTL_ETCDCTL_BIN" --endpoints=http://127.0.0.1:23791 get /hapctl/published | grep -q .; then
    "$bin/hapctl" --state-dir "$dir" fleet publish
  fi
  setsid "$bin/hapctl" --state-dir "$dir" serve >"$dir/serve.log" 2>&1 </dev/null &
  echo $! >"$dir/serve.pid"
  wait_for curl -sf "http://127.0.0.1:1919$n/health"
done

token0=$(cat "$root/e0/api-token")
curl -sf -X PUT -H "Authorization: Bearer $token0" -H 'content-type: application/json' \
  -d '{"servers": [{"address": "127.0.0.1:18090"}]}' \
  http://127.0.0.1:19190/v1/domains/demo.localhost >/dev/null

cat <<MSG

  a fleet of 3 edges on one etcd (state in $root):

  the same site through each edge:
    for n in 0 1 2; do curl -s -H 'Host: demo.localhost' http://127.0.0.1:1818\$n/version; echo; done
  a change on one edge reaches them all:
    $bin/hapctl --state-dir $root/e1 block add 127.0.0.2 --reason test --ttl 1h
    curl -s -o /dev/null -w '%{http_code}\n' --interface 127.0.0.2 -H 'Host: demo.localhost' http://127.0.0.1:18182/
  every edge and the revision it applied:
    $bin/hapctl --state-dir $root/e0 fleet status
  the API of edge N (same token file per edge):
    curl -H "Authorization: Bearer \$(cat $root/eN/api-token)" http://127.0.0.1:1919N/v1/fleet

  stop it all: scripts/fleet.sh stop

MSG
