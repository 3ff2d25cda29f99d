#!/usr/bin/env bash
# Builds HAProxy 3.0 LTS from Debian 13's upstream tarball once (Debian 13's binary package
# needs a newer glibc), cached outside the checkout; exports HAPROXY30_BIN. Built as Debian
# builds it: QUIC on OpenSSL's compatibility layer (Debian 12's OpenSSL 3.0 has no QUIC API),
# which serves HTTP/3 with `limited-quic`. Sourced by test.sh after ensure-haproxy.sh (which
# defines apt_install_missing).
set -euo pipefail

HAPROXY30_VERSION=3.0.11
HAPROXY30_CACHE=${HAPCTL_TEST_CACHE:-/var/cache/hapctl-tests}/haproxy-$HAPROXY30_VERSION
export HAPROXY30_BIN=$HAPROXY30_CACHE/haproxy

# A subshell, so its temp folder is removed on any exit and its variables stay inside.
build_haproxy30() (
  local need=()
  for pkg in build-essential libssl-dev libpcre2-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  apt_install_missing "${need[@]+"${need[@]}"}"
  local work mirror
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # The machine's own Debian mirror, with trixie's sources beside it (never the system lists).
  mirror=$(sed -n 's/^URIs: //p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  mirror=${mirror:-http://deb.debian.org/debian}
  mkdir -p "$work/lists/partial"
  printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" >"$work/trixie-src.sources"
  local opts=(-o "Dir::Etc::sourcelist=$work/trixie-src.sources" -o Dir::Etc::sourceparts=/dev/null
    -o "Dir::State::Lists=$work/lists")
  apt-get "${opts[@]}" update >/dev/null
  # `source --download-only` fails on the .dsc here but leaves the upstream tarball: check for
  # the tarball, not the exit code.
  (cd "$work" && apt-get "${opts[@]}" source --download-only haproxy >/dev/null 2>&1 || true)
  local tarball="$work/haproxy_$HAPROXY30_VERSION.orig.tar.gz"
  [ -f "$tarball" ] || { echo "no haproxy_$HAPROXY30_VERSION.orig.tar.gz from trixie's sources" >&2; return 1; }
  tar -xzf "$tarball" -C "$work"
  make -C "$work/haproxy-$HAPROXY30_VERSION" -j2 TARGET=linux-glibc USE_OPENSSL=1 USE_PCRE2=1 \
    USE_PROMEX=1 USE_QUIC=1 USE_QUIC_OPENSSL_COMPAT=1 >/dev/null
  mkdir -p "$HAPROXY30_CACHE"
  install -m 0755 "$work/haproxy-$HAPROXY30_VERSION/haproxy" "$HAPROXY30_BIN.tmp"
  mv "$HAPROXY30_BIN.tmp" "$HAPROXY30_BIN"
)

# Not `haproxy -vv | grep -q`: under pipefail, grep quitting early fails the pipeline.
cached_version=$("$HAPROXY30_BIN" -vv 2>/dev/null || true)
case "$cached_version" in
  *"version $HAPROXY30_VERSION"*"+QUIC_OPENSSL_COMPAT"*) ;;
  *)
    echo "building HAProxy $HAPROXY30_VERSION (cached in $HAPROXY30_CACHE)" >&2
    build_haproxy30
    ;;
esac
