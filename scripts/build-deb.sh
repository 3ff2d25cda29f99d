#!/usr/bin/env bash
# Builds the Debian package: target/debian/hapctl_<version>-1_<arch>.deb (its path is the last
# line printed). Installs cargo-deb first when it is missing (into ~/.cargo/bin, kept across
# runs; about 2 minutes on 2 cores). Contents and maintainer scripts: [package.metadata.deb]
# in hapctl/Cargo.toml and dist/; docs/production.md says how to use the package.
# `--dev` packages the debug build the test suite already made (no release build: the
# real-systemd suite installs that package in a container; never ship it).
set -euo pipefail
cd "$(dirname "$0")/.."

# The version the build depends on; the package's own metadata needs no newer one.
CARGO_DEB_VERSION=3.8.0
if [ "$(cargo deb --version 2>/dev/null || true)" != "cargo-deb $CARGO_DEB_VERSION" ]; then
  echo "installing cargo-deb $CARGO_DEB_VERSION (once)" >&2
  cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked -j2
fi
# dpkg-shlibdeps computes the binary's library dependencies ($auto in Cargo.toml).
command -v dpkg-shlibdeps >/dev/null 2>&1 || {
  apt-cache show dpkg-dev >/dev/null 2>&1 || apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y dpkg-dev
}

# Building hapctl compiles the etcd client's gRPC definitions, which needs protoc.
command -v protoc >/dev/null 2>&1 || {
  apt-cache show protobuf-compiler >/dev/null 2>&1 || apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y protobuf-compiler
}

# cargo-deb builds the release binary itself (-j2: the machine's two cores are shared) and
# packages a stripped copy (106 MB with the release profile's line tables, 18 MB without).
if [ "${1:-}" = "--dev" ]; then
  cargo build -j2 -p hapctl --locked
  out="$(cargo deb -p hapctl --locked --no-build --profile dev --strip 2>/dev/null | tail -1)"
else
  out="$(cargo deb -p hapctl --locked --strip -- -j2 | tail -1)"
fi
[ -f "$out" ] || { echo "cargo deb printed no package path (got: $out)" >&2; exit 1; }
echo "$out"
