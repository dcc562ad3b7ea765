#!/usr/bin/env bash
# How soon a fail-closed approximate rule serves again after Redis comes
# back, from outside: one copy of examples/redis/axum_redis (approximate
# mode, fail closed, default probe interval 250 ms) on a private
# redis-server. Each round kills Redis (SIGKILL), waits until the copy
# refuses a new client (503), keeps Redis away for a random 1.00 to 1.25 s
# (so it comes back at a random point of the probe interval, not at the
# same one every round), starts it again on the same port, and sends a new
# client's request every 10 ms until one is served (200). The figure is the
# time from the first PING Redis answers (polled every 10 ms) to that 200.
# Prints one line per round, then min, median and max.
#
#   benches/recovery/run.sh             # 20 rounds, about a minute
#   ROUNDS=5 benches/recovery/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=${ROUNDS:-20}
cargo build -q --example axum_redis
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dir=$(mktemp -d)
redis_port=$(free_port)
copy_port=$(free_port)
redis=""
copy=""
cleanup() {
    [ -n "$copy" ] && kill "$copy" 2>/dev/null || true
    [ -n "$redis" ] && kill "$redis" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
start_redis() {
    redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
        --daemonize no >>"$dir/redis.log" 2>&1 &
    redis=$!
}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
get() { curl -s -o /dev/null -m 5 --interface "$1" -w '%{http_code}' "http://127.0.0.1:$copy_port/"; }

start_redis
for _ in $(seq 200); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.01; done
THROTTLE_MODE=approximate THROTTLE_FAILURE=closed THROTTLE_LISTEN="127.0.0.1:$copy_port" \
    REDIS_URL="redis://127.0.0.1:$redis_port" "${CARGO_TARGET_DIR:-target}/debug/examples/axum_redis" >"$dir/copy.log" 2>&1 &
copy=$!
for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$copy_port") 2>/dev/null && break; sleep 0.1; done
[ "$(get 127.0.2.1)" = 200 ] || { echo "the copy does not serve with Redis up" >&2; exit 1; }

figures=()
for round in $(seq "$rounds"); do
    kill -KILL "$redis"; wait "$redis" 2>/dev/null || true
    refused=""
    for i in $(seq 500); do
        [ "$(get "127.0.3.$(( (round * 7 + i) % 250 + 1 ))")" = 503 ] && { refused=yes; break; }
        sleep 0.01
    done
    [ -n "$refused" ] || { echo "round $round: never refused with Redis gone" >&2; exit 1; }
    sleep "$(python3 -c 'import random; print(round(1 + random.random() * 0.25, 3))')"
    start_redis
    until redis-cli -p "$redis_port" ping >/dev/null 2>&1; do sleep 0.01; done
    back=$(now_ms)
    served=""
    for i in $(seq 500); do
        [ "$(get "127.0.4.$(( (round * 11 + i) % 250 + 1 ))")" = 200 ] && { served=$(( $(now_ms) - back )); break; }
        sleep 0.01
    done
    [ -n "$served" ] || { echo "round $round: not serving 5 s after Redis came back" >&2; exit 1; }
    echo "round $round: serving again $served ms after Redis answered"
    figures+=("$served")
done
printf '%s\n' "${figures[@]}" | sort -n | awk '{ a[NR] = $1 } END {
    printf "fail closed, approximate, %d restarts: serving again %d / %d / %d ms (min / median / max) after Redis answered\n",
        NR, a[1], a[int((NR + 1) / 2)], a[NR] }'
