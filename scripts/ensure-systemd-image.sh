#!/usr/bin/env bash
# Makes sure the Debian images the real-systemd tests boot (hapctl/tests/systemd_lab.rs) are
# cached: minbase Debian with systemd as init and the stock haproxy package, built once with
# debootstrap from this machine's own Debian mirror, kept OUTSIDE the checkout and rebuilt only
# when their recipe below changes (its stamp). Run by test.sh (in the background, while cargo
# builds); runnable alone, or sourced, when it exports, for the tests:
#   HAPCTL_SYSTEMD_IMAGE         Debian 12 (bookworm), its HAProxy 2.6
#   HAPCTL_SYSTEMD_IMAGE_TRIXIE  Debian 13 (trixie), its HAProxy 3.0
#   HAPCTL_SYSTEMD_IMAGE_TRIXIE_HAPROXY34
#                                Debian 13 with HAProxy 3.4 from experimental: the delivery
#                                lesson's lab (its one other package from sid: libpcre2)
set -euo pipefail

_image_cache="${HAPCTL_TEST_CACHE:-/var/cache/hapctl-tests}"
HAPCTL_SYSTEMD_IMAGE="${HAPCTL_SYSTEMD_IMAGE:-$_image_cache/bookworm-systemd}"
HAPCTL_SYSTEMD_IMAGE_TRIXIE="${HAPCTL_SYSTEMD_IMAGE_TRIXIE:-$_image_cache/trixie-systemd}"
HAPCTL_SYSTEMD_IMAGE_TRIXIE_HAPROXY34="${HAPCTL_SYSTEMD_IMAGE_TRIXIE_HAPROXY34:-$_image_cache/trixie-haproxy34-systemd}"
export HAPCTL_SYSTEMD_IMAGE HAPCTL_SYSTEMD_IMAGE_TRIXIE HAPCTL_SYSTEMD_IMAGE_TRIXIE_HAPROXY34

# libmodsecurity3 and modsecurity-crs: the WAF agent unit (tests/systemd_lab/waf.rs); the
# container has no network, so whatever a test needs is in the image. Debian 13 renamed the
# library's package (the 64-bit time_t transition).
_image_base="systemd,systemd-sysv,dbus,haproxy,curl,procps"

_image_sudo=""
[ "$(id -u)" -eq 0 ] || _image_sudo="sudo"

_image_need=()
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || _image_need+=(debootstrap)
command -v systemd-nspawn >/dev/null 2>&1 || _image_need+=(systemd-container)
if [ ${#_image_need[@]} -gt 0 ]; then
  echo "installing: ${_image_need[*]}" >&2
  # apt-get update only when the package lists do not know the package yet.
  apt-cache show "${_image_need[@]}" >/dev/null 2>&1 || $_image_sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $_image_sudo apt-get install -y "${_image_need[@]}"
fi

_image_mirror="$(sed -n 's/^URIs: //p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
_image_mirror="${_image_mirror:-http://deb.debian.org/debian}"

# HAProxy 3.4 from experimental inside the root $1 (network through the host's, as a chroot);
# the sid and experimental lists are removed after, so the image is Debian 13 plus what came.
_image_haproxy34() {
  local root=$1 apt=(-o Acquire::Check-Valid-Until=false)
  printf 'Types: deb\nURIs: %s\nSuites: sid experimental\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$_image_mirror" | $_image_sudo tee "$root/etc/apt/sources.list.d/hapctl-experimental.sources" >/dev/null
  $_image_sudo cp /etc/resolv.conf "$root/etc/resolv.conf"
  # No service may start from the chroot (the upgrade's postinst reloads haproxy, which would
  # run on the host's network): Debian's policy-rc.d convention, exit 101 = not allowed.
  printf '#!/bin/sh\nexit 101\n' | $_image_sudo tee "$root/usr/sbin/policy-rc.d" >/dev/null
  $_image_sudo chmod 0755 "$root/usr/sbin/policy-rc.d"
  $_image_sudo chroot "$root" apt-get "${apt[@]}" update >/dev/null
  DEBIAN_FRONTEND=noninteractive $_image_sudo chroot "$root" apt-get "${apt[@]}" install -y \
    --no-install-recommends -t experimental haproxy
  $_image_sudo rm -f "$root/etc/apt/sources.list.d/hapctl-experimental.sources" "$root/usr/sbin/policy-rc.d"
  local version
  version=$($_image_sudo chroot "$root" haproxy -v)
  [[ $version == *"version 3.4."* ]] || {
    echo "experimental's haproxy is not 3.4 any more" >&2
    return 1
  }
}

# _image_ensure DIR SUITE PACKAGES [STEP FROM]: the image in DIR, built when its stamp differs;
# STEP (a function given the new root) runs after debootstrap, or after a copy of the image
# FROM (already made from the same SUITE and PACKAGES).
_image_ensure() {
  local dir=$1 suite=$2 packages=$3 step=${4:-} from=${5:-}
  # Bump the trailing number when the preparation steps below change.
  local stamp="$suite minbase $packages${step:+ $step} prep-1"
  [ "$(cat "$dir/.hapctl-image" 2>/dev/null)" = "$stamp" ] && return 0
  local parent lock
  parent="$(dirname "$dir")"
  $_image_sudo mkdir -p "$parent"
  # One builder at a time; a second one waits, then finds the image made.
  exec {lock}>"$parent/.lock"
  flock "$lock"
  if [ "$(cat "$dir/.hapctl-image" 2>/dev/null)" != "$stamp" ]; then
    local tmp start=$SECONDS
    tmp="$(mktemp -d "$parent/.build.XXXXXX")"
    echo "building the $suite${step:+ $step} systemd test image (once; about a minute)" >&2
    if [ -n "$from" ]; then
      $_image_sudo cp -a "$from" "$tmp/root"
    else $_image_sudo debootstrap --variant=minbase --include="$packages" \
      "$suite" "$tmp/root" "$_image_mirror" >"$tmp/debootstrap.log" 2>&1; fi || {
      tail -30 "$tmp/debootstrap.log" >&2
      $_image_sudo rm -rf "$tmp"
      echo "debootstrap failed (log above)" >&2
      exit 1
    }
    local root="$tmp/root"
    if [ -n "$step" ]; then "$step" "$root" >"$tmp/step.log" 2>&1 || {
      tail -30 "$tmp/step.log" >&2
      $_image_sudo rm -rf "$tmp"
      echo "preparing the $suite image failed (log above)" >&2
      exit 1
    }; fi
    # No login prompt on the console (nothing reads it) and no network setup to wait for
    # (the container runs with --private-network: loopback only).
    for _unit in console-getty.service getty@tty1.service systemd-networkd-wait-online.service; do
      $_image_sudo ln -sf /dev/null "$root/etc/systemd/system/$_unit"
    done
    echo hapctl-lab | $_image_sudo tee "$root/etc/hostname" >/dev/null
    $_image_sudo rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
    echo "$stamp" | $_image_sudo tee "$root/.hapctl-image" >/dev/null
    $_image_sudo rm -rf "$dir"
    $_image_sudo mv "$root" "$dir"
    $_image_sudo rm -rf "$tmp"
    echo "systemd test image ready in $((SECONDS - start)) s: $dir" >&2
  fi
  exec {lock}>&-
}

_image_ensure "$HAPCTL_SYSTEMD_IMAGE" bookworm "$_image_base,libmodsecurity3,modsecurity-crs"
_image_ensure "$HAPCTL_SYSTEMD_IMAGE_TRIXIE" trixie "$_image_base,libmodsecurity3t64,modsecurity-crs"
_image_ensure "$HAPCTL_SYSTEMD_IMAGE_TRIXIE_HAPROXY34" trixie "$_image_base,libmodsecurity3t64,modsecurity-crs" \
  _image_haproxy34 "$HAPCTL_SYSTEMD_IMAGE_TRIXIE"
