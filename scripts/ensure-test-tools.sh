#!/usr/bin/env bash
# Installs what the test suite needs beyond HAProxy: Debian's Pebble (a real ACME CA, with
# pebble-challtestsrv for DNS), openssl, and the WAF's libmodsecurity v3 and OWASP CRS (the
# agent dlopens libmodsecurity.so.3, so no -dev package or bindgen is needed to build).
# Sourced by test.sh after ensure-haproxy.sh.
set -euo pipefail
need=()
{ command -v pebble && command -v pebble-challtestsrv; } >/dev/null 2>&1 || need+=(pebble)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
dpkg -s libmodsecurity3 >/dev/null 2>&1 || need+=(libmodsecurity3)
[ -f /usr/share/modsecurity-crs/owasp-crs.load ] || need+=(modsecurity-crs)
# The dashboard's browser suite (tests/edge/dashboard.rs): Debian's Chromium and chromedriver,
# and node for the dashboard's client-side unit tests.
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
command -v node >/dev/null 2>&1 || need+=(nodejs)
# promtool tests dist/prometheus/hapctl.rules.yml (tests/edge/alerts.rs).
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
apt_install_missing "${need[@]+"${need[@]}"}"
