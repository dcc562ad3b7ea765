#!/usr/bin/env bash
# Gateway fleet precision: six copies of examples/gateway sharing one private
# redis-server, one rule per client address (50 per minute), driven over
# real HTTP by 54 clients in five traffic classes (benches/gateway-fleet/
# drive.py), compared with a perfect limiter fed the same send times. Then
# a fail-closed rule's copies lose their Redis (SIGKILL, then SIGSTOP) while
# a new client arrives every 20 ms. Prints one markdown report at the end.
#
# Usage (from anywhere in the workspace):
#
#   benches/gateway-fleet/run.sh            # full: 150 s of load, ~3.5 min
#   QUICK=1 benches/gateway-fleet/run.sh    # quick: 65 s of load, ~2 min
#   QUICK=1 CHECK=1 benches/gateway-fleet/run.sh   # goals as the exit code
#
# Settings (environment variables; the README has the table):
#   KIND           approximate | exact | leased (default approximate)
#   ALGORITHM      fixed_window | sliding_window_counter | token_bucket
#                  (default fixed_window; token_bucket for leased)
#   FAILURE        the load rule's failure policy: open | closed | local
#   QUICK          1: 65 s of load instead of 150 s
#   DURATION       seconds of load (overrides QUICK)
#   CHECK          1: exit 1 when a goal is not met
#   FAILCLOSED     0: skip the fail-closed measurement (default 1)
#   FAILCLOSED_KIND the fail-closed rule's backend (default approximate)
#   FAILCLOSED_SECS seconds of new clients after the signal (default 8)
#   FAILCLOSED_PHASE seconds into a 6 s span at which the signal is sent
#                  (default 3)
#   WAIT_MS        a request this much slower than its copy's median
#                  "waited" (default 0.2 ms on the gateway's Server-Timing,
#                  2 ms on the client's latency)
#   ALIGN          1: start the load so that it covers full aligned minutes
#   SEED, COPIES (default 6), QUOTA (default 50)
#   SERVER_TIMING  0: do not pass --server-timing (a gateway without it);
#                  "waited" is then judged on the client's latency
#   GATEWAY_BIN    a gateway executable to run instead of building one
#   RELEASE        0: build and run the debug gateway (default 1)
#   OUT            folder for the JSON records (default: a new one in /tmp)
#   KEEP_LOGS      1: keep the redis and gateway logs (folder printed)
#
# Only loopback is used: redis-server on a free port (never 6379, no
# persistence), the copies on free ports on 127.0.0.1, the clients on
# 127.1.0.0/16 (load) and 127.2/127.3 (fail closed). Every request is
# planned in advance and bounded in time; everything started here is
# stopped on exit, Ctrl-C or kill.

set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$(pwd)

KIND=${KIND:-approximate}
case $KIND in
    leased) ALGORITHM=${ALGORITHM:-token_bucket} ;;
    *) ALGORITHM=${ALGORITHM:-fixed_window} ;;
esac
FAILURE=${FAILURE:-open}
QUICK=${QUICK:-0}
CHECK=${CHECK:-0}
FAILCLOSED=${FAILCLOSED:-1}
FAILCLOSED_KIND=${FAILCLOSED_KIND:-approximate}
FAILCLOSED_SECS=${FAILCLOSED_SECS:-8}
FAILCLOSED_PHASE=${FAILCLOSED_PHASE:-3}
WAIT_MS=${WAIT_MS:-}
ALIGN=${ALIGN:-0}
SEED=${SEED:-1}
COPIES=${COPIES:-6}
QUOTA=${QUOTA:-50}
RELEASE=${RELEASE:-1}
KEEP_LOGS=${KEEP_LOGS:-0}
SERVER_TIMING=${SERVER_TIMING:-1}

say() { printf '%s\n' "$*" >&2; }
die() { say "gateway-fleet: $*"; exit 2; }
# shellcheck source=benches/fleet/common.sh
. benches/fleet/common.sh

allowed() { # the algorithms a backend kind counts (and the perfect limiter knows)
    case $1 in
        approximate) echo "fixed_window sliding_window_counter" ;;
        exact) echo "fixed_window sliding_window_counter token_bucket" ;;
        leased) echo "token_bucket" ;;
        *) return 1 ;;
    esac
}
ok=$(allowed "$KIND") || die "KIND=$KIND: use approximate, exact or leased"
[[ " $ok " == *" $ALGORITHM "* ]] || die "ALGORITHM=$ALGORITHM: KIND=$KIND counts $ok"
fc_algorithm=fixed_window
[ "$FAILCLOSED_KIND" = leased ] && fc_algorithm=token_bucket
allowed "$FAILCLOSED_KIND" >/dev/null || die "FAILCLOSED_KIND=$FAILCLOSED_KIND: use approximate, exact or leased"
case $FAILURE in open | closed | local) ;; *) die "FAILURE=$FAILURE: use open, closed or local" ;; esac
[[ $COPIES =~ ^[1-9][0-9]?$ ]] || die "COPIES=$COPIES: use 1 to 99"
[[ $QUOTA =~ ^[1-9][0-9]*$ ]] || die "QUOTA=$QUOTA: a positive whole number"
[[ $FAILCLOSED_SECS =~ ^[1-9]$|^[12][0-9]$|^30$ ]] || die "FAILCLOSED_SECS=$FAILCLOSED_SECS: 1 to 30"
[[ $FAILCLOSED_PHASE =~ ^[0-5](\.[0-9]+)?$ ]] || die "FAILCLOSED_PHASE=$FAILCLOSED_PHASE: 0 to 5.9"
need_tools

# --- build --------------------------------------------------------------------
build_example gateway GATEWAY_BIN

# --- processes and cleanup ----------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gateway-fleet.XXXXXX")
OUT=${OUT:-$WORK/out}
mkdir -p "$OUT"
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
stop_fleet() {
    if [ -n "$DRIVER_PID" ]; then stop "$DRIVER_PID" TERM; DRIVER_PID=""; fi
    # A stopped redis-server goes on first, so that the copies' last flushes
    # do not each wait for it; the copies are stopped together.
    if [ -n "$REDIS_PID" ]; then kill -CONT "$REDIS_PID" 2>/dev/null || true; fi
    local pid
    for pid in "${SERVER_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${SERVER_PIDS[@]}"; do stop "$pid" TERM; done
    SERVER_PIDS=()
    if [ -n "$REDIS_PID" ]; then stop "$REDIS_PID" TERM; REDIS_PID=""; fi
}
# shellcheck disable=SC2317
cleanup() {
    trap - EXIT INT TERM HUP
    stop_fleet
    if [ "$KEEP_LOGS" = 1 ]; then
        say "logs and records kept in $WORK"
    else
        rm -rf "$WORK" # OUT, when given, is elsewhere and stays
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

start_redis() { # $1: a name for its log
    REDIS_PORT=$(free_port)
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
        --daemonize no >"$WORK/redis-$1.log" 2>&1 &
    REDIS_PID=$!
    local ready=""
    for _ in $(seq 100); do
        kill -0 "$REDIS_PID" 2>/dev/null || break
        redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && { ready=1; break; }
        sleep 0.1
    done
    [ -n "$ready" ] || { cat "$WORK/redis-$1.log" >&2; die "redis-server did not start on port $REDIS_PORT"; }
}

write_config() { # $1 file, $2 kind, $3 algorithm, $4 failure policy
    cat >"$1" <<EOF
# One rule per client address (the TCP peer: no proxy is trusted), written
# by benches/gateway-fleet/run.sh.
headers = "x-ratelimit"

[server]
max_connections = 10000
# Long, so that the driver's keep-alive connections are rarely closed idle.
header_timeout_secs = 120

[backend]
kind = "redis-$2"
url = "redis://127.0.0.1:$REDIS_PORT"

[[rules]]
name = "ip"
key = "ip"
ipv4_prefix = 32
algorithm = "$3"
limit = $QUOTA
period_secs = 60
failure = "$4"
EOF
}

start_copies() { # $1 config file, $2 name for the logs
    PORTS=()
    METRICS_PORTS=()
    local i port mport
    for i in $(seq "$COPIES"); do
        port=$(free_port)
        mport=$(free_port)
        "$BIN" --config "$1" --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$mport" \
            "${timing[@]}" >"$WORK/$2-copy$i.log" 2>&1 &
        SERVER_PIDS+=($!)
        PORTS+=("$port")
        METRICS_PORTS+=("$mport")
    done
    for i in "${!PORTS[@]}"; do
        if ! wait_port "${PORTS[$i]}" "${SERVER_PIDS[$i]}"; then
            cat "$WORK/$2-copy$((i + 1)).log" >&2
            die "copy $((i + 1)) did not start on port ${PORTS[$i]}"
        fi
    done
    ports_csv=$(IFS=,; echo "${PORTS[*]}")
    metrics_csv=$(IFS=,; echo "${METRICS_PORTS[*]}")
}

check_alive() { # $1 name: a copy or the redis-server that died explains errors
    local i bad=0
    for i in "${!SERVER_PIDS[@]}"; do
        if ! kill -0 "${SERVER_PIDS[$i]}" 2>/dev/null; then
            say "warning: copy $((i + 1)) of $1 exited during the run; its log:"
            tail -n 20 "$WORK/$1-copy$((i + 1)).log" >&2 || true
            bad=1
        fi
    done
    return "$bad"
}

run_driver() { # the driver in the background, waited for: a TERM reaches the trap at once
    python3 "$ROOT/benches/gateway-fleet/drive.py" "$@" &
    DRIVER_PID=$!
    local rc=0
    wait "$DRIVER_PID" || rc=$?
    DRIVER_PID=""
    return "$rc"
}

timing=(--server-timing)
[ "$SERVER_TIMING" = 0 ] && timing=()

rc=0
files=()

# --- 1. the load ----------------------------------------------------------------
start_redis load
write_config "$WORK/load.toml" "$KIND" "$ALGORITHM" "$FAILURE"
start_copies "$WORK/load.toml" load
say "private redis-server on 127.0.0.1:$REDIS_PORT; $COPIES copies (redis-$KIND, $ALGORITHM," \
    "failure $FAILURE) on ports $ports_csv"
args=(load --ports "$ports_csv" --metrics-ports "$metrics_csv" --json "$OUT/load.json"
    --mode "redis-$KIND" --algorithm "$ALGORITHM" --failure "$FAILURE" --quota "$QUOTA"
    --seed "$SEED")
[ "$QUICK" = 1 ] && args+=(--quick)
[ -n "${DURATION:-}" ] && args+=(--duration "$DURATION")
[ "$ALIGN" = 1 ] && args+=(--align)
run_driver "${args[@]}" || rc=1
check_alive load || rc=1
kill -0 "$REDIS_PID" 2>/dev/null || { say "warning: redis-server exited during the load"; rc=1; }
files+=("$OUT/load.json")
stop_fleet

# --- 2. fail closed: SIGKILL, then SIGSTOP -------------------------------------
if [ "$FAILCLOSED" = 1 ]; then
    for sig in KILL STOP; do
        start_redis "failclosed-$sig"
        write_config "$WORK/failclosed.toml" "$FAILCLOSED_KIND" "$fc_algorithm" closed
        start_copies "$WORK/failclosed.toml" "failclosed-$sig"
        say "fail closed (redis-$FAILCLOSED_KIND): $COPIES fresh copies and a fresh redis-server" \
            "(pid $REDIS_PID), which gets SIG$sig"
        run_driver failclosed --ports "$ports_csv" --metrics-ports "$metrics_csv" \
            --json "$OUT/failclosed-$sig.json" --mode "redis-$FAILCLOSED_KIND" \
            --algorithm "$fc_algorithm" --quota "$QUOTA" --seed "$SEED" \
            --redis-pid "$REDIS_PID" --signal "$sig" --after "$FAILCLOSED_SECS" \
            --signal-phase "$FAILCLOSED_PHASE" || rc=1
        check_alive "failclosed-$sig" || rc=1
        files+=("$OUT/failclosed-$sig.json")
        stop_fleet
    done
fi

# --- 3. the report --------------------------------------------------------------
report=(report)
[ -n "$WAIT_MS" ] && report+=(--wait-ms "$WAIT_MS")
[ "$CHECK" = 1 ] && report+=(--check)
[ -f "$OUT/load.json" ] || die "no load records"
existing=()
for f in "${files[@]}"; do [ -f "$f" ] && existing+=("$f"); done
echo
run_driver "${report[@]}" "${existing[@]}" || rc=$?
if [[ $OUT != "$WORK"/* ]] || [ "$KEEP_LOGS" = 1 ]; then
    say "records: $OUT"
fi
exit "$rc"
