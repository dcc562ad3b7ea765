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
# threads that wake and spin, so the count is the requests' own), once
# answering WARM + N1 and once WARM + N2 requests, sent one after the other
# on one keep-alive connection by benches/http/seq_client.py. The cost of
# one request is (total(N2) - total(N1)) / (N2 - N1): startup, the warm-up
# and shutdown are in both totals and cancel. Kernel time, the client and
# Redis are not counted.
#
# Each pair of runs is repeated REPEATS times (interleaved over the modes)
# and the least total for each request count is taken before the
# difference. The least, not the median: what varies between runs of one
# binary is work driven by wall time (timer wheels, the Redis modes'
# flushes and lease refreshes, the memory store's idle sweeps), which only
# ever adds instructions and runs more often the slower valgrind makes the
# run; the least total is the one with the least of it. The spread of the
# per-run differences is printed too.
#
# With KEYS=N (N > 0) every mode keys by the `x-client` header
# (BENCH_KEY=header) and request i carries `x-client: c<i mod N>`: keys
# cycle through a fixed set of N. The warm-up then defaults to N requests,
# so that every measured request is for a key seen before (the steady state
# of N clients, not the insertion of new ones).
#
# Settings (environment variables):
#   MODES        modes, in order (default: bare governor governor-headers
#                memory memory-no-headers memory-deny governor-deny
#                naive-mux exact approximate leased)
#   KEYS         client keys (default: unset, keyed by peer IP)
#   N1, N2       requests of the two runs (default 500 and 2500)
#   WARM         warm-up requests before them (default KEYS, or 0)
#   REPEATS      pairs of runs per mode (default 3)
#   RUNTIME      the server's runtime (default current_thread; multi_thread
#                is what run.sh measures, with idle workers that add noise
#                and cross-thread wake-ups that add instructions)
#   QUICK=1      REPEATS=1 (a first look; the least of one is not robust)
#   BENCH_LISTEN server address (default 127.0.0.1:38090)
#
# About 6 minutes with the defaults, 8 with KEYS=10000, on the project's
# 2-vCPU machine.

set -euo pipefail
source "$(dirname "$0")/common.sh"

MODES=${MODES:-"bare governor governor-headers memory memory-no-headers memory-deny governor-deny naive-mux exact approximate leased"}
KEYS=${KEYS:-}
N1=${N1:-500}
N2=${N2:-2500}
WARM=${WARM:-${KEYS:-0}}
REPEATS=${REPEATS:-3}
if [ "${QUICK:-}" = 1 ]; then REPEATS=1; fi
LISTEN=${BENCH_LISTEN:-127.0.0.1:38090}
HOST=${LISTEN%:*}
PORT=${LISTEN##*:}

command -v valgrind >/dev/null 2>&1 || { say "needs valgrind"; exit 1; }
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
READY_TRIES=600

# Runs mode $1 once with $2 measured requests; appends "mode n total".
run_once() {
    local mode=$1 n=$2 out="$WORK/cg.out"
    rm -f "$out"
    SERVER_WRAP=(valgrind --tool=callgrind "--callgrind-out-file=$out")
    start_server "$mode"
    local statuses
    if ! statuses=$(python3 benches/http/seq_client.py "$HOST" "$PORT" $((WARM + n)) "${KEYS:-0}"); then
        say "the client failed for mode $mode"
        exit 1
    fi
    stop_server
    local total
    total=$(awk '/^(summary|totals):/ {print $2; exit}' "$out")
    [ -n "$total" ] || { say "no callgrind total for mode $mode"; cat "$WORK/server.log" >&2; exit 1; }
    # Allowed modes answer only 200; deny modes 429 to every request but
    # the first of each key.
    local ok non429
    case $mode in
        *-deny)
            non429=$(awk '$1 != 429 {s += $2} END {print s + 0}' <<<"$statuses")
            if [ "$non429" -gt "${KEYS:-1}" ]; then
                say "mode $mode: $non429 responses were not 429: $statuses"
                exit 1
            fi
            ;;
        *)
            ok=$(awk '$1 == 200 {s += $2} END {print s + 0}' <<<"$statuses")
            if [ "$ok" != $((WARM + n)) ]; then
                say "mode $mode: not every response was 200: $statuses"
                exit 1
            fi
            ;;
    esac
    echo "$mode $n $total" >>"$WORK/results"
    say "  $mode, $((WARM + n)) requests: $total instructions"
}

say "callgrind, $keying; runs of $N1 and $N2 requests (+ warm-up), $REPEATS repeats"
for repeat in $(seq "$REPEATS"); do
    say "repeat $repeat of $REPEATS"
    for mode in $MODES; do
        run_once "$mode" "$N1"
        run_once "$mode" "$N2"
    done
done

# --- summary ------------------------------------------------------------------
least() { # the least total of mode $1 at $2 requests
    awk -v m="$1" -v n="$2" '$1 == m && $2 == n {print $3}' "$WORK/results" | sort -g | head -n 1
}
declare -A PER
for mode in $MODES; do
    PER[$mode]=$(awk -v a="$(least "$mode" "$N2")" -v b="$(least "$mode" "$N1")" \
        -v d=$((N2 - N1)) 'BEGIN {printf "%.0f", (a - b) / d}')
done

command_line="benches/http/callgrind.sh"
[ -n "$KEYS" ] && command_line="KEYS=$KEYS $command_line"
[ "$REPEATS" != 3 ] && command_line="REPEATS=$REPEATS $command_line"
[ "$BENCH_RUNTIME" != current_thread ] && command_line="RUNTIME=$BENCH_RUNTIME $command_line"
[ "$N1 $N2" != "500 2500" ] && command_line="N1=$N1 N2=$N2 $command_line"
echo
echo "instructions per request (callgrind, server side), $keying"
echo "least of $REPEATS per request count, (total($N2) - total($N1)) / $((N2 - N1)); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "command: MODES=\"$MODES\" $command_line"
echo
echo "| mode | instructions per request | / bare | each repeat's difference |"
echo "|---|---:|---:|---|"
for mode in $MODES; do
    runs=$(for r in $(seq "$REPEATS"); do
        a=$(awk -v m="$mode" -v n="$N2" -v r="$r" '$1 == m && $2 == n && ++c == r {print $3}' "$WORK/results")
        b=$(awk -v m="$mode" -v n="$N1" -v r="$r" '$1 == m && $2 == n && ++c == r {print $3}' "$WORK/results")
        awk -v a="$a" -v b="$b" -v d=$((N2 - N1)) 'BEGIN {printf "%.0f ", (a - b) / d}'
    done)
    printf '| %s | %s | %s | %s|\n' "$mode" \
        "$(printf "%'d" "${PER[$mode]}" 2>/dev/null || echo "${PER[$mode]}")" \
        "$(ratio "${PER[$mode]}" "${PER[bare]:-}")" "$runs"
done
