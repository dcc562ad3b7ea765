#!/usr/bin/env bash
# Fleet-wide operations, from outside: three copies of examples/gateway on
# one private redis-server, in each Redis mode. A block, an unblock and a
# reset made through copy 1's admin endpoint are timed until copies 2 and 3
# answer by them (a blocked client address gets 429, a lifted or reset one
# 200), and a read of the key through each copy's admin endpoint must show
# the same state. Then, through an outage: Redis is shut down and started
# again empty; a block and an unblock made meanwhile reach every copy, and a
# copy started after the loss holds a block made before it (drive.py's
# docs). Prints one markdown table; with CHECK=1 the exit code says
# whether every step held and every propagation took at most 1 s.
#
# Usage (from anywhere in the workspace):
#
#   benches/admin-fleet/run.sh                   # 20 rounds per mode, ~2 min
#   QUICK=1 CHECK=1 benches/admin-fleet/run.sh   # 3 rounds per mode (CI)
#
# Settings: MODES (default "exact approximate leased"), ROUNDS (default 20,
# 3 with QUICK=1), LIMIT (the rule's, a minute; default 5), CHECK, GATEWAY_BIN (a prebuilt gateway), RELEASE (0: the
# debug build), KEEP_LOGS. Only loopback: redis-server on a free port
# (never 6379, no persistence), the copies on free ports of 127.0.0.1, the
# client addresses in 127.4.0.0/16. Everything started here is stopped on
# exit, Ctrl-C or kill.

set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$(pwd)

MODES=${MODES:-exact approximate leased}
QUICK=${QUICK:-0}
ROUNDS=${ROUNDS:-$([ "$QUICK" = 1 ] && echo 3 || echo 20)}
CHECK=${CHECK:-0}
LIMIT=${LIMIT:-5}
KEEP_LOGS=${KEEP_LOGS:-0}

say() { printf '%s\n' "$*" >&2; }
die() { say "admin-fleet: $*"; exit 2; }
# shellcheck source=benches/fleet/common.sh
. benches/fleet/common.sh
need_tools
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS=$ROUNDS: a positive whole number"
build_example gateway GATEWAY_BIN

scratch_run admin-fleet

REDIS_PORT=$(free_ports 1)
# A fresh redis-server for each mode: the outage round shuts it down, and
# drive.py starts it again (its pid in redis-again.pid, stopped here).
start_redis() {
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
        --daemonize no >"$WORK/redis.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-cli -p "$REDIS_PORT" ping >/dev/null || die "redis-server did not start"
}
stop_redis() {
    redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
    if [ -f "$WORK/redis-again.pid" ]; then
        kill -TERM "$(cat "$WORK/redis-again.pid")" 2>/dev/null || true
        rm -f "$WORK/redis-again.pid"
    fi
    for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 || break; sleep 0.1; done
}

python3 -c 'import secrets; print(secrets.token_hex(24))' >"$WORK/admin.token"
rc=0
results=()
for mode in $MODES; do
    case $mode in
        exact) algorithm=token_bucket ;;
        approximate) algorithm=fixed_window ;;
        leased) algorithm=token_bucket ;;
        *) die "MODES: $mode is not exact, approximate or leased" ;;
    esac
    start_redis
    cat >"$WORK/$mode.toml" <<TOML
[admin]
listen = "127.0.0.1:1"
token_file = "admin.token"

[backend]
kind = "redis-$mode"
url = "redis://127.0.0.1:$REDIS_PORT"

[[rules]]
name = "ip"
key = "ip"
algorithm = "$algorithm"
limit = $LIMIT
period_secs = 60
TOML
    ports=()
    admins=()
    copy_pids=()
    read -r -a fresh <<<"$(free_ports 6)"
    for i in 1 2 3; do
        port=${fresh[$((2 * i - 2))]}
        admin=${fresh[$((2 * i - 1))]}
        "$BIN" --config "$WORK/$mode.toml" --listen "127.0.0.1:$port" \
            --admin-listen "127.0.0.1:$admin" >"$WORK/$mode-copy$i.log" 2>&1 &
        pid=$!
        PIDS+=("$pid")
        copy_pids+=("$pid")
        ports+=("$port")
        admins+=("$admin")
    done
    for i in 0 1 2; do
        wait_port "${ports[$i]}" "${copy_pids[$i]}" || { cat "$WORK/$mode-copy$((i + 1)).log" >&2; die "copy $((i + 1)) did not start"; }
        wait_port "${admins[$i]}" "${copy_pids[$i]}" || die "copy $((i + 1))'s admin endpoint did not start"
    done
    python3 "$ROOT/benches/admin-fleet/drive.py" --mode "$mode" --rounds "$ROUNDS" --limit "$LIMIT" \
        --ports "$(IFS=,; echo "${ports[*]}")" --admins "$(IFS=,; echo "${admins[*]}")" \
        --token-file "$WORK/admin.token" --json "$WORK/$mode.json" \
        --redis-port "$REDIS_PORT" --redis-dir "$WORK" --gateway "$BIN" --config "$WORK/$mode.toml" || rc=1
    results+=("$WORK/$mode.json")
    for pid in "${copy_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${copy_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    stop_redis
done
report=(--report)
[ "$CHECK" = 1 ] && report+=(--check)
python3 "$ROOT/benches/admin-fleet/drive.py" "${report[@]}" "${results[@]}" || rc=1
exit "$rc"
