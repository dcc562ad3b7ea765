#!/usr/bin/env bash
# HTTP load benchmark: axum hello world, bare and behind each rate limiter,
# measured with wrk in one run, side by side.
#
# Usage (from anywhere in the workspace):
#
#   benches/http/run.sh
#
# Builds examples/bench_server.rs in release, installs wrk with apt-get if it
# is missing, then for each repeat runs every mode in turn: start the server,
# warm up, measure with wrk, stop the server. Repeats are interleaved (all
# modes, then all modes again) so that drift in the machine's speed spreads
# over every mode instead of favouring one. Prints requests per second per
# mode (median of the repeats) and the ratios to bare axum and to
# tower_governor. About 4 minutes with the defaults.
#
# Settings (environment variables):
#   MODES        modes to run, in order (the Redis modes naive-pool,
#                naive-mux, exact, exact-2conn, approximate and leased
#                start a private redis-server; default: "bare governor
#                governor-headers memory memory-deny governor-deny"; the
#                server also knows "memory-no-headers"; see
#                examples/bench_server.rs for what each one is)
#   REPEATS      full cycles over the modes (default 3)
#   DURATION     measured seconds per run (default 10)
#   WARMUP       warm-up seconds per run, not counted (default 2)
#   CONNECTIONS  wrk connections (default 64)
#   WRK_THREADS  wrk threads (default 1)
#   BENCH_LISTEN server address (default 127.0.0.1:38080)
#
# With two or more CPUs and taskset available, the server is pinned to CPU 0
# and wrk to CPU 1, so they do not take turns on one core; the server's
# runtime then has one worker thread.
#
# Also printed: the server's CPU time per request (microseconds), from its
# CPU ticks during the measured run. On a busy machine the server and wrk
# get less than their core and requests per second fall further than CPU
# time per request rises (which it does somewhat, as each wake-up of a
# server that is not saturated serves fewer requests). Trust a run only
# when the server is near 100% CPU.
#
# Every run is checked: allowed modes must answer no non-2xx response, deny
# modes must answer (almost) nothing but 429; wrk's socket errors (timeouts,
# resets) are printed as warnings. The server's and wrk's CPU use
# are printed: a client near 100% means the figure is bounded by wrk, not by
# the server.

set -euo pipefail

cd "$(dirname "$0")/../.."

MODES=${MODES:-"bare governor governor-headers memory memory-deny governor-deny"}
REPEATS=${REPEATS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
CONNECTIONS=${CONNECTIONS:-64}
WRK_THREADS=${WRK_THREADS:-1}
LISTEN=${BENCH_LISTEN:-127.0.0.1:38080}
HOST=${LISTEN%:*}
PORT=${LISTEN##*:}
URL="http://$LISTEN/"

say() { printf '%s\n' "$*" >&2; }

# --- wrk --------------------------------------------------------------------
if ! command -v wrk >/dev/null 2>&1; then
    say "wrk not found: installing it with apt-get"
    sudo=""
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null 2>&1 || { say "need root or sudo to install wrk"; exit 1; }
        sudo=sudo
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq wrk >/dev/null
fi

# --- build --------------------------------------------------------------------
say "building examples/bench_server.rs (release)"
BIN=$(cargo build --release --example bench_server --message-format=json-render-diagnostics \
    | sed -n 's/.*"executable":"\([^"]*bench_server\)".*/\1/p' | tail -n 1)
[ -x "$BIN" ] || { say "could not find the bench_server executable"; exit 1; }

# --- pinning ------------------------------------------------------------------
SERVER_PIN=()
CLIENT_PIN=()
if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
    SERVER_PIN=(taskset -c 0)
    CLIENT_PIN=(taskset -c 1)
    pinning="server on CPU 0, wrk on CPU 1"
else
    pinning="not pinned (needs taskset and 2 CPUs): server and wrk share the CPUs"
fi

CLK_TCK=$(getconf CLK_TCK)
WORK=$(mktemp -d)
SERVER_PID=""
REDIS_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -INT "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [ -n "$REDIS_PID" ]; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# --- redis --------------------------------------------------------------------
# The Redis modes get a private redis-server on a free port (never one you
# already run), emptied before every run. It is not pinned: it shares the
# machine with the server and wrk, as a co-located Redis would.
REDIS_MODES=" naive-pool naive-mux exact exact-2conn approximate leased "
needs_redis=""
for mode in $MODES; do
    case $REDIS_MODES in *" $mode "*) needs_redis=1 ;; esac
done
if [ -n "$needs_redis" ]; then
    command -v redis-server >/dev/null 2>&1 || { say "the Redis modes need redis-server"; exit 1; }
    REDIS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
        >"$WORK/redis.log" 2>&1 &
    REDIS_PID=$!
    for _ in $(seq 100); do
        redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    export REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
    say "redis-server for the Redis modes on port $REDIS_PORT"
fi

# CPU ticks (user + system, all threads) used so far by process $1.
cpu_ticks() {
    local stat
    stat=$(cat "/proc/$1/stat")
    stat=${stat##*) }
    # shellcheck disable=SC2086
    set -- $stat
    echo $((${12} + ${13}))
}

# Runs one mode once; appends
# "mode rps server_cpu% wrk_cpu% non2xx requests server_us_per_request".
run_mode() {
    local mode=$1 log="$WORK/server.log"
    if [ -n "$REDIS_PID" ]; then
        redis-cli -p "$REDIS_PORT" flushall >/dev/null
    fi
    BENCH_MODE=$mode BENCH_LISTEN=$LISTEN "${SERVER_PIN[@]}" "$BIN" >"$log" 2>&1 &
    SERVER_PID=$!
    local ready=""
    for _ in $(seq 100); do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            break
        fi
        if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
            ready=1
            break
        fi
        sleep 0.1
    done
    if [ -z "$ready" ]; then
        say "server for mode $mode did not start:"
        cat "$log" >&2
        exit 1
    fi

    "${CLIENT_PIN[@]}" wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"${WARMUP}s" "$URL" >/dev/null

    local t0 t1 out times
    t0=$(cpu_ticks "$SERVER_PID")
    TIMEFORMAT='%U %S %R'
    { time "${CLIENT_PIN[@]}" wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"${DURATION}s" "$URL" \
        >"$WORK/wrk.out"; } 2>"$WORK/time.out"
    t1=$(cpu_ticks "$SERVER_PID")
    out=$(cat "$WORK/wrk.out")
    times=$(tail -n 1 "$WORK/time.out")

    kill -INT "$SERVER_PID"
    wait "$SERVER_PID" || true
    SERVER_PID=""

    local rps requests non2xx server_cpu wrk_cpu us_per_req
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    requests=$(awk '/requests in/ {print $1}' <<<"$out")
    non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")
    non2xx=${non2xx:-0}
    if [ -z "$rps" ] || [ -z "$requests" ]; then
        say "could not read wrk's output for mode $mode:"
        say "$out"
        exit 1
    fi
    local errors
    errors=$(grep 'Socket errors:' <<<"$out" || true)
    if [ -n "$errors" ]; then
        say "  warning, mode $mode:${errors#*:}"
    fi
    read -r u s r <<<"$times"
    server_cpu=$(awk -v d=$((t1 - t0)) -v hz="$CLK_TCK" -v r="$r" 'BEGIN {printf "%.0f", 100 * d / hz / r}')
    wrk_cpu=$(awk -v u="$u" -v s="$s" -v r="$r" 'BEGIN {printf "%.0f", 100 * (u + s) / r}')
    us_per_req=$(awk -v d=$((t1 - t0)) -v hz="$CLK_TCK" -v n="$requests" \
        'BEGIN {printf "%.2f", 1e6 * d / hz / n}')

    case $mode in
        *-deny)
            if awk -v n="$non2xx" -v t="$requests" 'BEGIN {exit !(n < 0.99 * t)}'; then
                say "mode $mode: only $non2xx of $requests responses were denials"
                exit 1
            fi
            ;;
        *)
            if [ "$non2xx" != 0 ]; then
                say "mode $mode: $non2xx of $requests responses were not 2xx"
                exit 1
            fi
            ;;
    esac
    echo "$mode $rps $server_cpu $wrk_cpu $non2xx $requests $us_per_req" >>"$WORK/results"
    printf '  %-16s %10.0f req/s   server CPU %3s%% (%s us/request)   wrk CPU %3s%%\n' \
        "$mode" "$rps" "$server_cpu" "$us_per_req" "$wrk_cpu" >&2
    if [ "$server_cpu" -lt 90 ]; then
        say "    the server used less than 90% of its CPU: something else is running?"
    fi
}

say "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $pinning"
say "wrk -t$WRK_THREADS -c$CONNECTIONS -d${DURATION}s (after ${WARMUP}s of warm-up) on $URL"
for repeat in $(seq "$REPEATS"); do
    say "repeat $repeat of $REPEATS"
    for mode in $MODES; do
        run_mode "$mode"
    done
done

# --- summary ------------------------------------------------------------------
median() { # the median of the numbers on stdin
    sort -g | awk '{v[NR] = $1} END {
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
declare -A MEDIAN US
for mode in $MODES; do
    MEDIAN[$mode]=$(awk -v m="$mode" '$1 == m {print $2}' "$WORK/results" | median)
    US[$mode]=$(awk -v m="$mode" '$1 == m {print $7}' "$WORK/results" | median)
done
ratio() { # $1 / $2, or "-" when $2 was not measured
    if [ -n "${2:-}" ]; then awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; else echo "-"; fi
}

echo
echo "requests per second, median of $REPEATS (wrk -t$WRK_THREADS -c$CONNECTIONS -d${DURATION}s; $pinning)"
printf '%-16s %10s %8s %10s %11s %8s %10s   %s\n' mode "req/s" "/ bare" "/ governor" \
    "server CPU" "us/req" "us - bare" "all runs (req/s)"
for mode in $MODES; do
    runs=$(awk -v m="$mode" '$1 == m {printf "%s%.0f", sep, $2; sep = " "}' "$WORK/results")
    cpu=$(awk -v m="$mode" '$1 == m {print $3}' "$WORK/results" | median)
    extra="-"
    if [ -n "${US[bare]:-}" ]; then
        extra=$(awk -v a="${US[$mode]}" -v b="${US[bare]}" 'BEGIN {printf "%+.2f", a - b}')
    fi
    printf '%-16s %10.0f %8s %10s %10s%% %8s %10s   %s\n' "$mode" "${MEDIAN[$mode]}" \
        "$(ratio "${MEDIAN[$mode]}" "${MEDIAN[bare]:-}")" \
        "$(ratio "${MEDIAN[$mode]}" "${MEDIAN[governor]:-}")" "$cpu" "${US[$mode]}" "$extra" "$runs"
done
busy=$(awk '$3 < 90' "$WORK/results" | wc -l)
if [ "$busy" -gt 0 ]; then
    echo "warning: in $busy of $(wc -l <"$WORK/results") runs the server used less than 90% of its CPU;"
    echo "the machine was not quiet and these figures are not reliable"
fi
for pair in "memory-deny memory" "governor-deny governor"; do
    read -r deny allow <<<"$pair"
    if [ -n "${MEDIAN[$deny]:-}" ] && [ -n "${MEDIAN[$allow]:-}" ]; then
        echo "$deny / $allow: $(ratio "${MEDIAN[$deny]}" "${MEDIAN[$allow]}")"
    fi
done
