#!/usr/bin/env bash
# gRPC load benchmark: the quick starts' Greeter on tonic, bare, behind
# throttle-fleet-tonic with every call allowed, and with every call denied
# (RESOURCE_EXHAUSTED with RetryInfo, QuotaFailure and ErrorInfo).
#
# Usage (from anywhere in the workspace):
#
#   benches/grpc/run.sh              # requests per second, then instructions
#   PHASES=rps benches/grpc/run.sh   # only one of the two
#
# Builds examples/grpc_bench_server.rs and examples/grpc_load.rs (a tonic
# client: STREAMS calls in flight on each of CONNECTIONS HTTP/2
# connections) in release.
#
# Phase "rps": for each repeat, every mode in turn: start the server,
# measure with the load client (after a warm-up), stop the server. Repeats
# are interleaved (all modes, then all modes again) so that drift in the
# machine's speed spreads over every mode. Prints each run, then per mode
# the median of the repeats of calls per second and of p99 latency, and
# the ratio to bare and to allowed, and the server's CPU time per call
# (from its CPU ticks over the whole run; the server's CPU use is printed
# per run: trust a run only when it is near 100%). With two or more CPUs the server is
# pinned to CPU 0 (one worker thread) and the client to CPU 1.
#
# Phase "callgrind": instructions per call on the server's side, the
# figure this shared machine does not move. For each mode and repeat: start
# the server under callgrind, make WARM_CALLS calls (one connection, one
# call at a time), zero the counters (callgrind_control -z), make
# CG_CALLS calls on a new connection, dump (callgrind_control -d), and
# divide the dump's instruction total by CG_CALLS. Everything the server
# process does in that interval counts: the connection's setup and
# teardown (spread over CG_CALLS calls) and the runtime's idle wake-ups.
# Some of that work is time-driven, so single runs differ: the least of
# the repeats is printed.
#
# Every run is checked: allowed modes must answer every call OK, the
# denied mode every call but the first RESOURCE_EXHAUSTED, bar at most 1 in
# 1,000, with a warning: under load a few denied calls fail in the tonic
# client with "transport error ... stream closed because of a broken pipe"
# (the answer arrives, END_STREAM, before the client has sent its request
# message, and the client reports its failed send instead of the status).
# That happens with the responder that built each denial whole as well.
#
# Settings (environment variables):
#   MODES        modes, in order (default "bare allowed denied")
#   PHASES       "rps callgrind" (default), or either
#   REPEATS      rps runs per mode (default 3)
#   DURATION     measured seconds per rps run (default 10)
#   WARMUP       warm-up seconds per rps run (default 2)
#   CONNECTIONS  HTTP/2 connections of the rps client (default 4)
#   STREAMS      calls in flight per connection (default 32)
#   CG_REPEATS   callgrind runs per mode (default 3)
#   WARM_CALLS   calls before counting under callgrind (default 300)
#   CG_CALLS     counted calls under callgrind (default 2000)
#   BENCH_LISTEN server address (default 127.0.0.1:50151)
#   SERVER       the server binary (default: the release build of
#                examples/grpc_bench_server.rs; e.g. one built from an
#                older commit, to compare)

set -euo pipefail

cd "$(dirname "$0")/../.."

MODES=${MODES:-"bare allowed denied"}
PHASES=${PHASES:-"rps callgrind"}
REPEATS=${REPEATS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
CONNECTIONS=${CONNECTIONS:-4}
STREAMS=${STREAMS:-32}
CG_REPEATS=${CG_REPEATS:-3}
WARM_CALLS=${WARM_CALLS:-300}
CG_CALLS=${CG_CALLS:-2000}
LISTEN=${BENCH_LISTEN:-127.0.0.1:50151}
TARGET="http://$LISTEN"

cargo build --release -p throttle-fleet-suite --example grpc_bench_server --example grpc_load >&2
BIN="${CARGO_TARGET_DIR:-target}/release/examples"
SERVER=${SERVER:-$BIN/grpc_bench_server}
WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
    if [[ -n $SERVER_PID ]]; then kill -INT "$SERVER_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

SERVER_CPU=() CLIENT_CPU=()
if [[ $(nproc) -ge 2 ]] && command -v taskset >/dev/null; then
    SERVER_CPU=(taskset -c 0) CLIENT_CPU=(taskset -c 1)
fi

# Starts the server in mode $1 (with the command prefix in the rest of the
# arguments) and waits until it listens.
start_server() {
    local mode=$1
    shift
    BENCH_MODE=$mode BENCH_LISTEN=$LISTEN BENCH_WORKERS=1 "$@" \
        "$SERVER" >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 600); do
        grep -q listening "$WORK/server.log" && return
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.log" >&2; exit 1; }
        sleep 0.1
    done
    echo "the server did not start" >&2
    exit 1
}

stop_server() {
    kill -INT "$SERVER_PID"
    wait "$SERVER_PID" || true
    SERVER_PID=
}

# The server's CPU time so far, in clock ticks (user + system).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$SERVER_PID/stat"; }

# The value of field $2 in a load client line $1.
field() { sed -n "s/.*\\b$2=\\([0-9.]*\\).*/\\1/p" <<<"$1"; }

# Checks a load client line $2 of mode $1.
check() {
    local mode=$1 line=$2 calls ok exhausted
    calls=$(field "$line" calls) ok=$(field "$line" ok) exhausted=$(field "$line" exhausted)
    case $mode in
    denied) [[ $ok -le 1 && $((1000 * (calls - 1 - exhausted))) -le $calls ]] ;;
    *) [[ $ok -eq $calls ]] ;;
    esac || { echo "unexpected answers in mode $mode: $line" >&2; exit 1; }
    if [[ $mode == denied && $exhausted -lt $((calls - ok)) ]]; then
        echo "warning: $((calls - ok - exhausted)) calls failed otherwise (see the load client's message)" >&2
    fi
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

if [[ " $PHASES " == *" rps "* ]]; then
    echo "# calls per second: $CONNECTIONS connections x $STREAMS streams, ${DURATION}s after ${WARMUP}s, $REPEATS interleaved repeats"
    for r in $(seq "$REPEATS"); do
        for mode in $MODES; do
            start_server "$mode" "${SERVER_CPU[@]}"
            before=$(cpu_ticks)
            line=$(BENCH_TARGET=$TARGET CONNECTIONS=$CONNECTIONS STREAMS=$STREAMS \
                WARMUP=$WARMUP DURATION=$DURATION "${CLIENT_CPU[@]}" "$BIN/grpc_load")
            ticks=$(($(cpu_ticks) - before))
            stop_server
            check "$mode" "$line"
            # Server CPU per call, over every call of the run (warm-up too).
            cpu_us=$(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v n="$(field "$line" all_calls)" \
                'BEGIN { printf "%.1f", t * 1e6 / hz / n }')
            cpu_pct=$(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v s="$WARMUP" -v d="$DURATION" \
                'BEGIN { printf "%.0f", 100 * t / hz / (s + d) }')
            echo "run $r $mode: $line server_cpu=${cpu_pct}% server_us_per_call=$cpu_us"
            echo "$(field "$line" rps) $(field "$line" p99_us) $cpu_us" >>"$WORK/rps.$mode"
        done
    done
    echo
    printf '| %-8s | %10s | %10s | %14s | %8s | %10s |\n' mode "calls/s" "p99 (us)" "server us/call" "/ bare" "/ allowed"
    printf '|---|---:|---:|---:|---:|---:|\n'
    for mode in $MODES; do
        rps=$(cut -d' ' -f1 "$WORK/rps.$mode" | median)
        p99=$(cut -d' ' -f2 "$WORK/rps.$mode" | median)
        cpu=$(cut -d' ' -f3 "$WORK/rps.$mode" | median)
        echo "$mode $rps" >>"$WORK/rps.median"
        base=$(awk '$1 == "bare" { print $2 }' "$WORK/rps.median")
        allowed=$(awk '$1 == "allowed" { print $2 }' "$WORK/rps.median")
        ratio() { [[ -n $2 ]] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }' || echo -; }
        printf '| %-8s | %10.0f | %10.0f | %14s | %8s | %10s |\n' "$mode" "$rps" "$p99" "$cpu" \
            "$(ratio "$rps" "$base")" "$(ratio "$rps" "$allowed")"
    done
    echo
fi

if [[ " $PHASES " == *" callgrind "* ]]; then
    command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
    echo "# instructions per call (callgrind, server side, one connection, one call at a time; $CG_CALLS calls after $WARM_CALLS, least of $CG_REPEATS)"
    for r in $(seq "$CG_REPEATS"); do
        for mode in $MODES; do
            rm -f "$WORK"/cg.*
            start_server "$mode" valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.%p"
            warm=$(BENCH_TARGET=$TARGET CONNECTIONS=1 STREAMS=1 REQUESTS=$WARM_CALLS "$BIN/grpc_load")
            callgrind_control -z "$SERVER_PID" >/dev/null 2>&1
            line=$(BENCH_TARGET=$TARGET CONNECTIONS=1 STREAMS=1 REQUESTS=$CG_CALLS "$BIN/grpc_load")
            callgrind_control -d "$SERVER_PID" >/dev/null 2>&1
            dump="$WORK/cg.$SERVER_PID.1"
            for _ in $(seq 100); do [[ -s $dump ]] && break; sleep 0.1; done
            stop_server
            check "$mode" "$line"
            [[ $mode != denied ]] || check "$mode" "$warm"
            total=$(sed -n 's/^summary: //p' "$dump")
            per=$((total / CG_CALLS))
            echo "run $r $mode: $per instructions per call"
            echo "$per" >>"$WORK/result.cg.$mode"
        done
    done
    echo
    printf '| %-8s | %14s | %8s | %10s |\n' mode "instr. / call" "/ bare" "/ allowed"
    printf '|---|---:|---:|---:|\n'
    for mode in $MODES; do
        least=$(sort -n "$WORK/result.cg.$mode" | head -1)
        echo "$mode $least" >>"$WORK/cg.least"
        base=$(awk '$1 == "bare" { print $2 }' "$WORK/cg.least")
        allowed=$(awk '$1 == "allowed" { print $2 }' "$WORK/cg.least")
        ratio() { [[ -n $2 ]] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }' || echo -; }
        printf '| %-8s | %14s | %8s | %10s |\n' "$mode" "$least" \
            "$(ratio "$least" "$base")" "$(ratio "$least" "$allowed")"
    done
fi
