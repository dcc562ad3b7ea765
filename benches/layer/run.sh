#!/usr/bin/env bash
# Instructions per request of the Tower layer itself (callgrind), without
# HTTP or sockets: examples/layer_cost.rs of throttle-fleet-tower drives requests
# through an inner service shaped like axum's hello world, bare or behind
# the layer, on a current-thread runtime (no idle workers, no timers).
# Only the request loop is counted (callgrind's --toggle-collect): the setup
# (the memory backend calibrates its clock against the wall clock, which
# takes a varying number of instructions) is left out, so the counts repeat
# to within a few instructions for the same binary.
#
# Usage: benches/layer/run.sh [mode ...]
#   modes: bare allowed no-headers denied header (default: all)
#   N1, N2: request counts of the two runs whose difference is measured
#           (default 2000 and 12000)
#
# Prints, per mode, (instructions at N2 - instructions at N1) / (N2 - N1)
# and the ratio to bare.

set -euo pipefail
cd "$(dirname "$0")/../.."

MODES=${*:-"bare allowed no-headers denied header"}
N1=${N1:-2000}
N2=${N2:-12000}
TARGET=${CARGO_TARGET_DIR:-target}

command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p throttle-fleet-tower --example layer_cost
bin="$TARGET/release/examples/layer_cost"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

count() { # mode n -> total instructions
  valgrind --tool=callgrind --toggle-collect='*CoreGuard::block_on*' \
    --callgrind-out-file="$out/cg.$1.$2" "$bin" "$2" "$1" >/dev/null 2>"$out/log"
  grep -E '^summary:' "$out/cg.$1.$2" | awk '{print $2}'
}

bare=""
printf '%-12s %14s %8s\n' mode "instr/request" "/ bare"
for mode in $MODES; do
  a=$(count "$mode" "$N1")
  b=$(count "$mode" "$N2")
  per=$(( (b - a) / (N2 - N1) ))
  [ "$mode" = bare ] && bare=$per
  if [ -n "$bare" ]; then
    ratio=$(awk -v p="$per" -v b="$bare" 'BEGIN { printf "%.3f", p / b }')
  else
    ratio="-"
  fi
  printf '%-12s %14d %8s\n' "$mode" "$per" "$ratio"
done
