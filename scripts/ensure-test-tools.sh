#!/usr/bin/env bash
# Installs what the test suite needs beyond HAProxy: Debian's Pebble (a real ACME CA, with
# pebble-challtestsrv for DNS) and openssl. Sourced by test.sh after ensure-haproxy.sh.
set -euo pipefail
need=()
{ command -v pebble && command -v pebble-challtestsrv; } >/dev/null 2>&1 || need+=(pebble)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
apt_install_missing "${need[@]+"${need[@]}"}"
