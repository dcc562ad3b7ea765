#!/usr/bin/env bash
# The approximate mode's hot key: Redis CPU per flush call and per second
# for one key written by N instances (crates/throttle-fleet-redis/examples/hot_key.rs),
# one private redis-server per fleet size (a free port, never 6379).
#
#   benches/hot-key/run.sh                 # 4, 32, 64 and 256 instances, 30 s each
#   COUNTS="4 64" SECS=10 benches/hot-key/run.sh
#   HOT_KEY_BIN=path/to/hot_key benches/hot-key/run.sh
#
# Prints one JSON line per fleet size, then the ratio of 64 to 4 (the goal:
# at most 1.5).
set -euo pipefail
cd "$(dirname "$0")/../.."
COUNTS=${COUNTS:-"4 32 64 256"}
SECS=${SECS:-30}
target=${CARGO_TARGET_DIR:-target}
# HOT_KEY_BIN: run this build instead (another version's, to compare; the
# figures are Redis' own, so a debug build measures the same).
bin=${HOT_KEY_BIN:-}
if [ -z "$bin" ]; then
  cargo build -q --release -p throttle-fleet-redis --example hot_key
  bin="$target/release/examples/hot_key"
fi
dir=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
declare -A per_call
for n in $COUNTS; do
  port=$(free_port)
  redis-server --port "$port" --save "" --appendonly no --dir "$dir" --maxclients 10000 >"$dir/redis.log" 2>&1 &
  pid=$!
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  line=$(REDIS_URL="redis://127.0.0.1:$port" INSTANCES="$n" SECS="$SECS" "$bin")
  echo "$line"
  per_call[$n]=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["usec_per_call"])' "$line")
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
done
if [ -n "${per_call[4]:-}" ] && [ -n "${per_call[64]:-}" ]; then
  python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f"64 instances / 4 instances, Redis µs per flush call: {b:.1f} / {a:.1f} = {b/a:.2f}x (goal: at most 1.5x)")' "${per_call[4]}" "${per_call[64]}"
fi
