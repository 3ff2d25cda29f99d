#!/usr/bin/env bash
# HAProxy 3.2 LTS (Debian sid) and 3.4 (Debian experimental), as Debian builds them: their
# packages need a newer glibc and OpenSSL than Debian 12's, so each package and the shared
# libraries it needs are unpacked into one folder, cached outside the checkout, and each
# haproxy binary is pointed at that folder's loader and libraries (patchelf). It then runs here
# as Debian built it, QUIC on OpenSSL 3.5+ included. Exports HAPROXY32_BIN and HAPROXY34_BIN.
# Sourced by test.sh after ensure-haproxy.sh (which defines apt_install_missing).
set -euo pipefail

HAPROXY_SID_CACHE=${HAPCTL_TEST_CACHE:-/var/cache/hapctl-tests}/haproxy-sid
export HAPROXY32_BIN=$HAPROXY_SID_CACHE/haproxy-3.2
export HAPROXY34_BIN=$HAPROXY_SID_CACHE/haproxy-3.4

# A subshell, so its temp folder is removed on any exit and its variables stay inside.
fetch_haproxy_sid() (
  command -v patchelf >/dev/null 2>&1 || apt_install_missing patchelf
  local work mirror
  work=$(mktemp -d)
  chmod 0755 "$work" # apt downloads as the _apt user
  trap 'rm -rf "$work"' EXIT
  # The machine's own Debian mirror with sid and experimental beside it (never the system lists).
  mirror=$(sed -n 's/^URIs: //p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  mirror=${mirror:-http://deb.debian.org/debian}
  mkdir -p "$work/lists/partial" "$work/debs" "$work/root"
  printf 'Types: deb\nURIs: %s\nSuites: sid experimental\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" >"$work/sid.sources"
  local opts=(-o "Dir::Etc::sourcelist=$work/sid.sources" -o Dir::Etc::sourceparts=/dev/null
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache")
  mkdir -p "$work/cache/archives/partial"
  apt-get "${opts[@]}" update >/dev/null
  # The newest 3.2 (sid) and 3.4 (experimental) the registry has.
  local v32 v34
  v32=$(apt-cache "${opts[@]}" madison haproxy | awk '$3 ~ /^3\.2\./ {print $3; exit}')
  v34=$(apt-cache "${opts[@]}" madison haproxy | awk '$3 ~ /^3\.4\./ {print $3; exit}')
  [ -n "$v32" ] && [ -n "$v34" ] || { echo "Debian sid/experimental have no haproxy 3.2 or 3.4" >&2; return 1; }
  # The shared-library packages both need, to a fixpoint (not systemd, adduser and the like).
  local todo=("haproxy=$v32" "haproxy=$v34") libs=() p d
  while [ ${#todo[@]} -gt 0 ]; do
    p=${todo[0]}
    todo=("${todo[@]:1}")
    for d in $(apt-cache "${opts[@]}" depends --no-recommends --no-suggests --no-conflicts \
      --no-breaks --no-replaces --no-enhances "$p" 2>/dev/null |
      sed -n 's/^ *|\{0,1\}\(Pre\)\{0,1\}Depends: \(lib[a-z0-9.+-]*\).*/\2/p' | sort -u); do
      case " ${libs[*]-} " in *" $d "*) ;; *) libs+=("$d"); todo+=("$d") ;; esac
    done
  done
  (cd "$work/debs" && apt-get "${opts[@]}" download "haproxy=$v32" "haproxy=$v34" "${libs[@]}" >/dev/null 2>&1)
  for deb in "$work"/debs/lib*.deb; do dpkg-deb -x "$deb" "$work/root"; done
  local out=$HAPROXY_SID_CACHE.tmp
  rm -rf "$out"
  mkdir -p "$out"
  cp -a "$work/root/usr" "$out/"
  for v in "$v32" "$v34"; do
    mkdir -p "$work/x-$v"
    dpkg-deb -x "$work/debs/haproxy_${v//:/%3a}_amd64.deb" "$work/x-$v"
    local bin=$out/haproxy-$(echo "$v" | cut -d. -f1-2)
    install -m 0755 "$work/x-$v/usr/sbin/haproxy" "$bin"
    # Paths of the final folder: the binary runs from there.
    patchelf --set-interpreter "$HAPROXY_SID_CACHE/usr/lib64/ld-linux-x86-64.so.2" \
      --force-rpath --set-rpath "$HAPROXY_SID_CACHE/usr/lib/x86_64-linux-gnu" "$bin"
  done
  rm -rf "$HAPROXY_SID_CACHE"
  mv "$out" "$HAPROXY_SID_CACHE"
)

# Not `haproxy -v | grep -q`: under pipefail, grep quitting early fails the pipeline.
cached32=$("$HAPROXY32_BIN" -v 2>/dev/null || true)
cached34=$("$HAPROXY34_BIN" -v 2>/dev/null || true)
case "$cached32 / $cached34" in
  *"version 3.2."*" / "*"version 3.4."*) ;;
  *)
    echo "fetching HAProxy 3.2 and 3.4 from Debian sid/experimental (cached in $HAPROXY_SID_CACHE)" >&2
    fetch_haproxy_sid
    ;;
esac
