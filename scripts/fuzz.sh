#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets/) for SECONDS each (default 60), on stable Rust:
# cargo-fuzz with `--sanitizer none` needs no nightly toolchain. Installs cargo-fuzz if missing.
# A crash leaves its input under fuzz/artifacts/<target>/ and makes this script fail.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${1:-60}"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz -j2
for target in $(cargo fuzz list); do
  echo "== $target ($seconds s)"
  cargo fuzz run --sanitizer none -j1 "$target" -- -max_total_time="$seconds" 2>&1 | grep -E "^(Done|==|SUMMARY|.*(crash|panicked|deadly))" || true
  if [ -n "$(ls -A "artifacts/$target" 2>/dev/null)" ]; then
    echo "crash inputs in fuzz/artifacts/$target" >&2
    exit 1
  fi
done
