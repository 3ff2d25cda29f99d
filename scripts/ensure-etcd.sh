#!/usr/bin/env bash
# Fetches etcd 3.5 (Debian 13's etcd-server and etcd-client: Go binaries that run on Debian 12;
# Debian 12's own etcd is 3.4, out of upstream support) once, cached outside the checkout;
# exports HAPCTL_ETCD_BIN, HAPCTL_ETCDCTL_BIN and HAPCTL_ETCDUTL_BIN (what testkit::etcd runs). Sourced by test.sh and fleet.sh after ensure-haproxy.sh.
set -euo pipefail

ETCD_CACHE=${HAPCTL_TEST_CACHE:-/var/cache/hapctl-tests}/etcd-3.5
export HAPCTL_ETCD_BIN=$ETCD_CACHE/usr/bin/etcd
export HAPCTL_ETCDCTL_BIN=$ETCD_CACHE/usr/bin/etcdctl
export HAPCTL_ETCDUTL_BIN=$ETCD_CACHE/usr/bin/etcdutl

# A subshell, so its temp folder is removed on any exit.
fetch_etcd() (
  local work mirror
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # The machine's own Debian mirror, with trixie beside it in a private apt state (never the
  # system lists).
  mirror=$(sed -n 's/^URIs: //p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  mirror=${mirror:-http://deb.debian.org/debian}
  mkdir -p "$work/lists/partial" "$work/archives/partial"
  printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" >"$work/trixie.sources"
  local opts=(-o "Dir::Etc::sourcelist=$work/trixie.sources" -o Dir::Etc::sourceparts=/dev/null
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives")
  apt-get "${opts[@]}" update >/dev/null
  (cd "$work" && apt-get "${opts[@]}" download etcd-server etcd-client >/dev/null)
  rm -rf "$ETCD_CACHE.tmp"
  mkdir -p "$ETCD_CACHE.tmp"
  for deb in "$work"/etcd-*.deb; do dpkg-deb -x "$deb" "$ETCD_CACHE.tmp"; done
  "$ETCD_CACHE.tmp/usr/bin/etcd" --version >/dev/null
  rm -rf "$ETCD_CACHE"
  mv "$ETCD_CACHE.tmp" "$ETCD_CACHE"
)

case "$("$HAPCTL_ETCD_BIN" --version 2>/dev/null || true)" in
  *"etcd Version: 3.5."*) ;;
  *)
    echo "fetching etcd 3.5 from Debian 13 (cached in $ETCD_CACHE)" >&2
    fetch_etcd
    ;;
esac
