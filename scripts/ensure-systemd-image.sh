#!/usr/bin/env bash
# Makes sure the Debian 12 image the real-systemd tests boot (hapctl/tests/systemd_lab.rs) is
# cached: a minbase bookworm with systemd as init and the stock haproxy package, built once with
# debootstrap from this machine's own Debian mirror, kept OUTSIDE the checkout and rebuilt only
# when the recipe below changes (its stamp). Sourced by test.sh; runnable alone. Exports
# HAPCTL_SYSTEMD_IMAGE for the tests.
set -euo pipefail

HAPCTL_SYSTEMD_IMAGE="${HAPCTL_SYSTEMD_IMAGE:-/var/cache/hapctl-tests/bookworm-systemd}"
export HAPCTL_SYSTEMD_IMAGE

# libmodsecurity3 and modsecurity-crs: the WAF agent unit (tests/systemd_lab/waf.rs); the
# container has no network, so whatever a test needs is in the image.
_image_packages="systemd,systemd-sysv,dbus,haproxy,curl,procps,libmodsecurity3,modsecurity-crs"
# Bump the trailing number when the preparation steps below change.
_image_stamp="bookworm minbase ${_image_packages} prep-1"

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

if [ "$(cat "$HAPCTL_SYSTEMD_IMAGE/.hapctl-image" 2>/dev/null)" != "$_image_stamp" ]; then
  _image_parent="$(dirname "$HAPCTL_SYSTEMD_IMAGE")"
  $_image_sudo mkdir -p "$_image_parent"
  # One builder at a time; a second one waits, then finds the image made.
  exec {_image_lock}>"$_image_parent/.lock"
  flock "$_image_lock"
  if [ "$(cat "$HAPCTL_SYSTEMD_IMAGE/.hapctl-image" 2>/dev/null)" != "$_image_stamp" ]; then
    _image_mirror="$(sed -n 's/^URIs: //p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
    _image_mirror="${_image_mirror:-http://deb.debian.org/debian}"
    _image_tmp="$(mktemp -d "$_image_parent/.build.XXXXXX")"
    echo "building the systemd test image from $_image_mirror (once; about a minute)" >&2
    _image_start=$SECONDS
    $_image_sudo debootstrap --variant=minbase --include="$_image_packages" \
      bookworm "$_image_tmp/root" "$_image_mirror" >"$_image_tmp/debootstrap.log" 2>&1 || {
      tail -30 "$_image_tmp/debootstrap.log" >&2
      $_image_sudo rm -rf "$_image_tmp"
      echo "debootstrap failed (log above)" >&2
      exit 1
    }
    _image_root="$_image_tmp/root"
    # No login prompt on the console (nothing reads it) and no network setup to wait for
    # (the container runs with --private-network: loopback only).
    for _unit in console-getty.service getty@tty1.service systemd-networkd-wait-online.service; do
      $_image_sudo ln -sf /dev/null "$_image_root/etc/systemd/system/$_unit"
    done
    echo hapctl-lab | $_image_sudo tee "$_image_root/etc/hostname" >/dev/null
    $_image_sudo rm -rf "$_image_root/var/cache/apt/archives/"*.deb "$_image_root/var/lib/apt/lists/"*
    echo "$_image_stamp" | $_image_sudo tee "$_image_root/.hapctl-image" >/dev/null
    $_image_sudo rm -rf "$HAPCTL_SYSTEMD_IMAGE"
    $_image_sudo mv "$_image_root" "$HAPCTL_SYSTEMD_IMAGE"
    $_image_sudo rm -rf "$_image_tmp"
    echo "systemd test image ready in $((SECONDS - _image_start)) s: $HAPCTL_SYSTEMD_IMAGE" >&2
  fi
  exec {_image_lock}>&-
fi
