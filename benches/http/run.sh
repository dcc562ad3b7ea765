#!/usr/bin/env bash
# HTTP load benchmark: axum hello world, bare and behind each rate limiter,
# measured with wrk in one run, side by side.
#
# Usage (from anywhere in the workspace):
#
#   benches/http/run.sh              # every client is one peer IP
#   KEYS=10000 benches/http/run.sh   # many clients: 10,000 x-client keys
#
# Builds examples/bench_server.rs in release, installs wrk with apt-get if it
# is missing, then for each repeat runs every mode in turn: start the server,
# warm up, measure with wrk, stop the server. Repeats are interleaved (all
# modes, then all modes again) so that drift in the machine's speed spreads
# over every mode instead of favouring one. Prints requests per second and
# the 99th percentile of latency (wrk --latency) per mode, each the median of
# the repeats, and the ratios to bare axum and to tower_governor. About 7
# minutes with the defaults (QUICK=1: about 1).
#
# With KEYS=N every mode keys by the `x-client` request header
# (BENCH_KEY=header; tower_governor through a custom key extractor for the
# same header, the naive script with the value in its Redis key) and wrk
# runs benches/http/keys.lua, which spreads the requests over N keys
# (`x-client: c0` .. `c<N-1>`, each connection taking the next key in turn).
# Before the warm-up, benches/http/seq_client.py sends every key once, so
# the measured run is the steady state of N clients (and in the -deny
# modes, all denials).
#
# Settings (environment variables):
#   MODES        modes to run, in order (the Redis modes naive-pool,
#                naive-mux, exact, exact-2conn, approximate and leased
#                start a private redis-server; default: "bare governor
#                governor-headers throttle-kit memory memory-deny
#                governor-deny throttle-kit-deny naive-pool naive-mux
#                exact approximate leased"; the
#                server also knows "memory-no-headers" and "exact-2conn";
#                see examples/bench_server.rs for what each one is)
#   KEYS         client keys (default: unset, keyed by peer IP)
#   REPEATS      full cycles over the modes (default 3)
#   DURATION     measured seconds per run (default 8)
#   WARMUP       warm-up seconds per run, not counted (default 2)
#   QUICK=1      REPEATS=1 DURATION=3 WARMUP=1 (a first look only)
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
source "$(dirname "$0")/common.sh"

MODES=${MODES:-"bare governor governor-headers throttle-kit memory memory-deny governor-deny throttle-kit-deny naive-pool naive-mux exact approximate leased"}
KEYS=${KEYS:-}
REPEATS=${REPEATS:-3}
DURATION=${DURATION:-8}
WARMUP=${WARMUP:-2}
if [ "${QUICK:-}" = 1 ]; then REPEATS=1 DURATION=3 WARMUP=1; fi
CONNECTIONS=${CONNECTIONS:-64}
WRK_THREADS=${WRK_THREADS:-1}
LISTEN=${BENCH_LISTEN:-127.0.0.1:38080}
URL="http://$LISTEN/"

need_wrk
build_server

# --- pinning ------------------------------------------------------------------
CLIENT_PIN=()
if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
    SERVER_WRAP=(taskset -c 0)
    CLIENT_PIN=(taskset -c 1)
    pinning="server on CPU 0, wrk on CPU 1"
else
    pinning="not pinned (needs taskset and 2 CPUs): server and wrk share the CPUs"
fi

CLK_TCK=$(getconf CLK_TCK)
start_redis_for "$MODES"

WRK_SCRIPT=()
if [ -n "$KEYS" ]; then
    export BENCH_KEY=header
    WRK_SCRIPT=(-s benches/http/keys.lua)
    WRK_ARGS=(-- "$KEYS")
    keying="keyed by x-client, $KEYS keys"
else
    export BENCH_KEY=ip
    WRK_ARGS=()
    keying="keyed by peer IP"
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

# wrk's 99th percentile (from --latency) in milliseconds.
p99_ms() {
    awk '$1 == "99%" {
        v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
        if (u == "us") v /= 1000; else if (u == "s") v *= 1000; else if (u == "m") v *= 60000
        printf "%.2f", v }' <<<"$1"
}

# Runs one mode once; appends
# "mode rps server_cpu% wrk_cpu% non2xx requests server_us_per_request p99_ms".
run_mode() {
    local mode=$1
    start_server "$mode"

    if [ -n "$KEYS" ]; then
        python3 benches/http/seq_client.py "${LISTEN%:*}" "${LISTEN##*:}" "$KEYS" --keys "$KEYS" >/dev/null 2>&1
    fi
    "${CLIENT_PIN[@]}" wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"${WARMUP}s" \
        "${WRK_SCRIPT[@]}" "$URL" "${WRK_ARGS[@]}" >/dev/null

    local t0 t1 out times
    t0=$(cpu_ticks "$SERVER_PID")
    TIMEFORMAT='%U %S %R'
    { time "${CLIENT_PIN[@]}" wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency \
        "${WRK_SCRIPT[@]}" "$URL" "${WRK_ARGS[@]}" >"$WORK/wrk.out"; } 2>"$WORK/time.out"
    t1=$(cpu_ticks "$SERVER_PID")
    out=$(cat "$WORK/wrk.out")
    times=$(tail -n 1 "$WORK/time.out")

    stop_server

    local rps requests non2xx server_cpu wrk_cpu us_per_req p99
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    requests=$(awk '/requests in/ {print $1}' <<<"$out")
    non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")
    non2xx=${non2xx:-0}
    p99=$(p99_ms "$out")
    if [ -z "$rps" ] || [ -z "$requests" ] || [ -z "$p99" ]; then
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
    echo "$mode $rps $server_cpu $wrk_cpu $non2xx $requests $us_per_req $p99" >>"$WORK/results"
    printf '  %-16s %10.0f req/s  p99 %7s ms   server CPU %3s%% (%s us/request)   wrk CPU %3s%%\n' \
        "$mode" "$rps" "$p99" "$server_cpu" "$us_per_req" "$wrk_cpu" >&2
    if [ "$server_cpu" -lt 90 ]; then
        say "    the server used less than 90% of its CPU: something else is running?"
    fi
}

say "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $pinning"
say "wrk -t$WRK_THREADS -c$CONNECTIONS -d${DURATION}s (after ${WARMUP}s of warm-up) on $URL, $keying"
for repeat in $(seq "$REPEATS"); do
    say "repeat $repeat of $REPEATS"
    for mode in $MODES; do
        run_mode "$mode"
    done
done

# --- summary ------------------------------------------------------------------
declare -A MEDIAN US P99
for mode in $MODES; do
    MEDIAN[$mode]=$(awk -v m="$mode" '$1 == m {print $2}' "$WORK/results" | median)
    US[$mode]=$(awk -v m="$mode" '$1 == m {print $7}' "$WORK/results" | median)
    P99[$mode]=$(awk -v m="$mode" '$1 == m {print $8}' "$WORK/results" | median)
done

command_line="benches/http/run.sh"
[ -n "$KEYS" ] && command_line="KEYS=$KEYS $command_line"
echo
echo "requests per second and p99 latency, median of $REPEATS (wrk -t$WRK_THREADS -c$CONNECTIONS -d${DURATION}s; $keying; $pinning)"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%d)"
echo "command: MODES=\"$MODES\" REPEATS=$REPEATS DURATION=$DURATION WARMUP=$WARMUP $command_line"
echo
echo "| mode | req/s | / bare | / governor | p99 ms | server CPU | us/req | us - bare | all runs (req/s) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
for mode in $MODES; do
    runs=$(awk -v m="$mode" '$1 == m {printf "%s%.0f", sep, $2; sep = " "}' "$WORK/results")
    cpu=$(awk -v m="$mode" '$1 == m {print $3}' "$WORK/results" | median)
    extra="-"
    if [ -n "${US[bare]:-}" ]; then
        extra=$(awk -v a="${US[$mode]}" -v b="${US[bare]}" 'BEGIN {printf "%+.2f", a - b}')
    fi
    printf '| %s | %.0f | %s | %s | %s | %s%% | %s | %s | %s |\n' "$mode" "${MEDIAN[$mode]}" \
        "$(ratio "${MEDIAN[$mode]}" "${MEDIAN[bare]:-}")" \
        "$(ratio "${MEDIAN[$mode]}" "${MEDIAN[governor]:-}")" "${P99[$mode]}" "$cpu" \
        "${US[$mode]}" "$extra" "$runs"
done
busy=$(awk '$3 < 90' "$WORK/results" | wc -l)
if [ "$busy" -gt 0 ]; then
    echo "warning: in $busy of $(wc -l <"$WORK/results") runs the server used less than 90% of its CPU;"
    echo "the machine was not quiet and these figures are not reliable"
fi
for pair in "memory-deny memory" "governor-deny governor" "exact naive-mux" "exact naive-pool"; do
    read -r a b <<<"$pair"
    if [ -n "${MEDIAN[$a]:-}" ] && [ -n "${MEDIAN[$b]:-}" ]; then
        echo "$a / $b: $(ratio "${MEDIAN[$a]}" "${MEDIAN[$b]}")"
    fi
done
