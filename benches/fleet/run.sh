#!/usr/bin/env bash
# Fleet load driver: four copies of examples/axum_redis sharing one private
# redis-server, driven over real HTTP by benches/fleet/drive.py, which prints
# admitted requests per aligned minute against the example's quota (10 per
# 60 s per client IP) and writes every request to a JSON file in /tmp.
#
# Usage (from anywhere in the workspace):
#
#   benches/fleet/run.sh             # all scenarios, full length (~8-10 min)
#   QUICK=1 benches/fleet/run.sh     # shorter scenarios (~3-5 min)
#
# Settings (environment variables):
#   THROTTLE_MODE  exact | approximate | leased (default approximate)
#   SCENARIOS      comma list of fresh, steady, moving (default all three)
#   QUICK          1 for short scenarios (fresh 15 s of background, steady
#                  70 s, moving 65 s; default 0: 30 s, 180 s, 120 s)
#   RELEASE        0 to build and run the debug example (default 1: release)
#   AXUM_REDIS_BIN path of an axum_redis executable to run instead of building
#   ALIGN          0 to start steady and moving at once instead of placing
#                  them around a minute boundary (default 1; waits up to 60 s)
#   SEED           seed of the moving scenario's copy sequence (default 1)
#   COPIES         number of copies (default 4)
#   JSON           where to write the raw records (default: a new file
#                  /tmp/fleet-records-*.json)
#   KEEP_LOGS      1 to keep the redis and server logs (their folder is printed)
#   CARGO_TARGET_DIR is honoured by the build as usual.
#
# Nothing but loopback is used: redis-server on a free port (never 6379,
# no persistence), the copies on free ports on 127.0.0.1, the clients on
# 127.0.0.2 upward. Everything started here is stopped on exit.

set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$(pwd)

MODE=${THROTTLE_MODE:-approximate}
SCENARIOS=${SCENARIOS:-fresh,steady,moving}
QUICK=${QUICK:-0}
RELEASE=${RELEASE:-1}
ALIGN=${ALIGN:-1}
SEED=${SEED:-1}
COPIES=${COPIES:-4}
KEEP_LOGS=${KEEP_LOGS:-0}

say() { printf '%s\n' "$*" >&2; }
die() { say "fleet: $*"; exit 1; }
# shellcheck source=benches/fleet/common.sh
. benches/fleet/common.sh

case $MODE in exact | approximate | leased) ;; *) die "THROTTLE_MODE=$MODE: use exact, approximate or leased" ;; esac
[[ $COPIES =~ ^[1-9][0-9]?$ ]] || die "COPIES=$COPIES: use 1 to 99"
need_tools

# --- build --------------------------------------------------------------------
build_example axum_redis AXUM_REDIS_BIN

# --- processes and cleanup ----------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fleet.XXXXXX")
REDIS_PID=""
DRIVER_PID=""
SERVER_PIDS=()

# (stop and cleanup run from the traps, which shellcheck cannot see)
# shellcheck disable=SC2317
stop() { # stop child $1 with signal $2, then KILL it if it is still there after ~5 s
    local pid=$1 sig=$2
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    kill -CONT "$pid" 2>/dev/null || true
    kill "-$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
# shellcheck disable=SC2317
cleanup() {
    trap - EXIT INT TERM HUP
    if [ -n "$DRIVER_PID" ]; then stop "$DRIVER_PID" TERM; fi
    for pid in "${SERVER_PIDS[@]}"; do stop "$pid" TERM; done
    if [ -n "$REDIS_PID" ]; then stop "$REDIS_PID" TERM; fi
    if [ "$KEEP_LOGS" = 1 ]; then
        say "logs kept in $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

free_port() { # a free TCP port on 127.0.0.1, never 6379
    local port
    while :; do
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        [ "$port" != 6379 ] && break
    done
    echo "$port"
}

# --- redis --------------------------------------------------------------------
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
    --daemonize no >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
ready=""
for _ in $(seq 100); do
    kill -0 "$REDIS_PID" 2>/dev/null || break
    redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && { ready=1; break; }
    sleep 0.1
done
[ -n "$ready" ] || { cat "$WORK/redis.log" >&2; die "redis-server did not start on port $REDIS_PORT"; }
say "private redis-server on 127.0.0.1:$REDIS_PORT"

# --- the copies -----------------------------------------------------------------
PORTS=()
for i in $(seq "$COPIES"); do
    port=$(free_port)
    THROTTLE_LISTEN="127.0.0.1:$port" REDIS_URL="redis://127.0.0.1:$REDIS_PORT" THROTTLE_MODE=$MODE \
        "$BIN" >"$WORK/copy$i.log" 2>&1 &
    SERVER_PIDS+=($!)
    PORTS+=("$port")
done
for i in "${!PORTS[@]}"; do
    if ! wait_port "${PORTS[$i]}" "${SERVER_PIDS[$i]}"; then
        cat "$WORK/copy$((i + 1)).log" >&2
        die "copy $((i + 1)) did not start on port ${PORTS[$i]}"
    fi
done
ports_csv=$(IFS=,; echo "${PORTS[*]}")
say "$COPIES copies ($MODE mode) on 127.0.0.1 ports $ports_csv"

# --- drive ----------------------------------------------------------------------
args=(--ports "$ports_csv" --scenarios "$SCENARIOS" --seed "$SEED" --mode "$MODE")
[ "$QUICK" = 1 ] && args+=(--quick)
[ "$ALIGN" = 0 ] && args+=(--no-align)
[ -n "${JSON:-}" ] && args+=(--json "$JSON")

# In the background and waited for, so that a TERM to this script reaches
# the trap (and through it the driver) at once.
python3 "$ROOT/benches/fleet/drive.py" "${args[@]}" &
DRIVER_PID=$!
rc=0
wait "$DRIVER_PID" || rc=$?
DRIVER_PID=""

# A copy that died during the run explains connection errors: say so.
for i in "${!SERVER_PIDS[@]}"; do
    if ! kill -0 "${SERVER_PIDS[$i]}" 2>/dev/null; then
        say "warning: copy $((i + 1)) (port ${PORTS[$i]}) exited during the run; its log:"
        tail -n 20 "$WORK/copy$((i + 1)).log" >&2 || true
        if [ "$rc" = 0 ]; then rc=1; fi
    fi
done
if ! kill -0 "$REDIS_PID" 2>/dev/null; then
    say "warning: redis-server exited during the run"
    if [ "$rc" = 0 ]; then rc=1; fi
fi
exit "$rc"
