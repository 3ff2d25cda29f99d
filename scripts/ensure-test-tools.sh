#!/usr/bin/env bash
# Installs what the test suite needs beyond HAProxy: Debian's Pebble (a real ACME CA, with
# pebble-challtestsrv for DNS), socat and openssl. Sourced by test.sh.
set -euo pipefail
need=()
command -v pebble >/dev/null 2>&1 && command -v pebble-challtestsrv >/dev/null 2>&1 || need+=(pebble)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${need[@]}"
fi
