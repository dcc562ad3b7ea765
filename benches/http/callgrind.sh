#!/usr/bin/env bash
# Instructions per request (callgrind): the server's side of one request,
# per mode of examples/bench_server.rs, and the ratio to bare axum.
#
# Usage (from anywhere in the workspace):
#
#   benches/http/callgrind.sh              # keyed by peer IP, one client
#   KEYS=10000 benches/http/callgrind.sh   # keyed by x-client, 10,000 keys
#
# For every mode, the server runs under `valgrind --tool=callgrind` with a
# current_thread runtime (BENCH_RUNTIME=current_thread: no idle worker
# threads that wake and spin, so the count is the requests' own), and
# benches/http/seq_client.py sends WARM + N requests one after the other on
# one keep-alive connection. After the warm-up it zeroes callgrind's
# counters (`callgrind_control -z`), after the last answer it dumps them
# (`callgrind_control -d`): the dump divided by N is the cost of one
# request. Startup, the warm-up (lazy initialisation, the first insert of a
# key) and shutdown are outside the count; so are kernel time, the client
# and Redis.
#
# Each run is repeated REPEATS times (interleaved over the modes) and the
# least is reported. The least, not the median: what varies between runs
# of one binary is work driven by wall time (timer wheels, the Redis modes'
# flushes and lease refreshes, clock reads that calibrate), which only ever
# adds instructions and runs more often the slower valgrind makes the run;
# the least is the run with the least of it. Every run's figure is printed
# too, to show the spread.
#
# With KEYS=N (N > 0) every mode keys by the `x-client` header
# (BENCH_KEY=header) and request i carries `x-client: c<i mod N>`: keys
# cycle through a fixed set of N. The warm-up then defaults to N requests,
# so that every measured request is for a key seen before (the steady state
# of N clients, not the insertion of new ones); with N larger than the
# measured requests, each measured request is for a different key.
#
# Settings (environment variables):
#   MODES        modes, in order (default: bare governor governor-headers
#                throttle-kit
#                memory memory-no-headers memory-deny governor-deny
#                throttle-kit-deny
#                naive-pool naive-mux exact approximate leased); the
#                server also knows memory-window and exact-window (a fixed
#                window), and the modes named trl* are tower-rate-limiter's,
#                served by benches/tower-rate-limiter's trl_bench_server
#                (built here when asked for, with --ignore-rust-version;
#                `benches/tower-rate-limiter/run.sh http` runs them beside
#                ours: trl-bare trl trl-no-headers trl-deny trl-redis)
#   KEYS         client keys (default: unset, keyed by peer IP)
#   N            measured requests per run (default 2000)
#   WARM         warm-up requests before them (default KEYS, or 200)
#   REPEATS      pairs of runs per mode (default 3)
#   RUNTIME      the server's runtime (default current_thread; multi_thread
#                is what run.sh measures, with idle workers that add noise
#                and cross-thread wake-ups that add instructions)
#   QUICK=1      REPEATS=1 (a first look; the least of one is not robust)
#   COLLECT      count only inside functions matching this callgrind
#                pattern, e.g. COLLECT='*Dispatcher*poll_catch*' for the
#                connection's own work (the request path: parsing, the
#                layer, the handler, writing the answer), leaving out other
#                tasks (the approximate mode's flushes, the leased mode's
#                give-backs) and the runtime's driver; the table then says so
#   BENCH_LISTEN server address (default 127.0.0.1:38090)
#
# About 5 minutes with the defaults, as long with KEYS=10000, on the
# project's 2-vCPU machine.

set -euo pipefail
source "$(dirname "$0")/common.sh"

MODES=${MODES:-"bare governor governor-headers throttle-kit memory memory-no-headers memory-deny governor-deny throttle-kit-deny naive-pool naive-mux exact approximate leased"}
KEYS=${KEYS:-}
N=${N:-2000}
WARM=${WARM:-${KEYS:-200}}
REPEATS=${REPEATS:-3}
if [ "${QUICK:-}" = 1 ]; then REPEATS=1; fi
LISTEN=${BENCH_LISTEN:-127.0.0.1:38090}
HOST=${LISTEN%:*}
PORT=${LISTEN##*:}

command -v valgrind >/dev/null 2>&1 && command -v callgrind_control >/dev/null 2>&1 \
    || { say "needs valgrind (with callgrind_control)"; exit 1; }
build_server
start_redis_for "$MODES"

export BENCH_RUNTIME=${RUNTIME:-current_thread}
if [ -n "$KEYS" ]; then
    export BENCH_KEY=header
    keying="keyed by x-client, $KEYS keys cycling, $WARM warm-up requests"
else
    export BENCH_KEY=ip
    keying="keyed by peer IP, one client, $WARM warm-up requests"
fi
keying="$keying, $BENCH_RUNTIME runtime"
[ -n "${COLLECT:-}" ] && keying="$keying, counted only inside $COLLECT"
READY_TRIES=600

# Runs mode $1 once; appends "mode instructions_per_request".
run_once() {
    local mode=$1 out="$WORK/cg.out"
    rm -f "$out" "$out".*
    SERVER_WRAP=(valgrind --tool=callgrind ${COLLECT:+"--toggle-collect=$COLLECT"}
        "--callgrind-out-file=$out")
    start_server "$mode"
    local statuses
    if ! statuses=$(python3 benches/http/seq_client.py "$HOST" "$PORT" $((WARM + N)) \
        --keys "${KEYS:-0}" --run-at "$WARM" "callgrind_control -z $SERVER_PID" \
        --run-at $((WARM + N)) "callgrind_control -d $SERVER_PID" --count-from "$WARM" \
        2>"$WORK/client.err"); then
        say "the client failed for mode $mode:"
        cat "$WORK/client.err" >&2
        exit 1
    fi
    stop_server
    local total
    total=$(awk '/^(summary|totals):/ {print $2; exit}' "$out.1" 2>/dev/null || true)
    [ -n "$total" ] || { say "no callgrind dump for mode $mode"; cat "$WORK/server.log" >&2; exit 1; }
    # Of the measured requests, deny modes must deny all; allowed modes
    # should allow all, and the number they did not is reported with the
    # figure (a figure with denials in it is not the allowed path's).
    local wrong
    case $mode in
        *-deny)
            wrong=$(awk '$1 != 429 {s += $2} END {print s + 0}' <<<"$statuses")
            if [ "$wrong" != 0 ]; then
                say "mode $mode: $wrong measured responses were not 429: $statuses"
                exit 1
            fi
            ;;
        *)
            wrong=$(awk '$1 != 200 {s += $2} END {print s + 0}' <<<"$statuses")
            if [ "$wrong" != 0 ]; then
                say "  warning, mode $mode: $wrong of $N measured responses were not 200:"
                say "  $(tr '\n' ' ' <<<"$statuses")"
                head -n 1 "$WORK/client.err" >&2
            fi
            ;;
    esac
    local per
    per=$(awk -v t="$total" -v n="$N" 'BEGIN {printf "%.0f", t / n}')
    echo "$mode $per $wrong" >>"$WORK/results"
    say "  $mode: $per instructions per request"
}

say "callgrind, $keying; $N measured requests per run, $REPEATS repeats"
for repeat in $(seq "$REPEATS"); do
    say "repeat $repeat of $REPEATS"
    for mode in $MODES; do
        run_once "$mode"
    done
done

# --- summary ------------------------------------------------------------------
declare -A PER
for mode in $MODES; do
    PER[$mode]=$(awk -v m="$mode" '$1 == m {print $2}' "$WORK/results" | sort -g | head -n 1)
done

command_line="benches/http/callgrind.sh"
[ -n "$KEYS" ] && command_line="KEYS=$KEYS $command_line"
[ "$REPEATS" != 3 ] && command_line="REPEATS=$REPEATS $command_line"
[ "$N" != 2000 ] && command_line="N=$N $command_line"
[ "$BENCH_RUNTIME" != current_thread ] && command_line="RUNTIME=$BENCH_RUNTIME $command_line"
[ -n "${COLLECT:-}" ] && command_line="COLLECT='$COLLECT' $command_line"
echo
echo "instructions per request (callgrind, server side), $keying"
echo "least of $REPEATS runs of $N requests; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%d)"
echo "command: MODES=\"$MODES\" $command_line"
echo
echo "| mode | instructions per request | / bare | every run | wrong answers |"
echo "|---|---:|---:|---|---:|"
for mode in $MODES; do
    runs=$(awk -v m="$mode" '$1 == m {printf "%s%s", sep, $2; sep = " "}' "$WORK/results")
    wrong=$(awk -v m="$mode" '$1 == m {s += $3} END {print s + 0}' "$WORK/results")
    printf '| %s | %s | %s | %s | %s |\n' "$mode" "${PER[$mode]}" \
        "$(ratio "${PER[$mode]}" "${PER[bare]:-}")" "$runs" "$wrong"
done
echo
echo "wrong answers: measured responses, over all runs, that were not 200 (429 in the -deny modes)"
