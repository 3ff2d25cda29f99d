#!/usr/bin/env bash
# Installs HAProxy (and curl, and protoc to build hapctl) from Debian when missing. Sourced by the other scripts, which may
# call `apt_install_missing PACKAGE...` for what they need beyond it.
set -euo pipefail

# Installs the given Debian packages (apt-get update first), as root or through sudo.
apt_install_missing() {
  [ $# -gt 0 ] || return 0
  echo "installing: $*" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "$@"
}

need=()
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
command -v curl >/dev/null 2>&1 || need+=(curl)
# Building hapctl compiles the etcd client's gRPC definitions (fleet/), which needs protoc.
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
apt_install_missing "${need[@]+"${need[@]}"}"
# Debian puts haproxy in /usr/sbin, which a non-root PATH may lack.
case ":$PATH:" in *:/usr/sbin:*) ;; *) export PATH="$PATH:/usr/sbin" ;; esac
