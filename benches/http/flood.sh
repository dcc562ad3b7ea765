#!/usr/bin/env bash
# Key flood: a million distinct client keys through the layer (memory
# backend), against a steady client's throughput and the server's memory.
#
# Usage (from anywhere in the workspace):
#
#   benches/http/flood.sh
#
# The server is examples/bench_server.rs in the `memory` mode, keyed by the
# `x-client` header (BENCH_KEY=header), its backend bounded to MAX_KEYS keys
# (BENCH_MAX_KEYS). Each repeat runs three phases, each in a fresh server:
#
#   alone    the steady client only: wrk -c$STEADY_CONNS, always the key
#            `steady`
#   control  the steady client, and next to it a second wrk (-c$FLOOD_CONNS)
#            that always sends one other key: the same load as the flood,
#            but no new keys
#   flood    the steady client, and next to it benches/http/flood.lua
#            (-c$FLOOD_CONNS): every request a key never sent before
#
# Both wrk processes run for FLOOD_SECONDS; the steady client is measured
# from the start to the end. If the flood has not sent FLOOD_KEYS keys by
# then, it goes on alone (unmeasured, up to FLOOD_MAX_SECONDS in all) until
# it has, before the memory is read. The server's share of CPU is split between
# both clients' connections, so the steady client's rate while anything
# else runs is lower than alone for that reason alone: the flood's own cost
# is flood / control (same load, distinct keys or not); flood / alone is
# printed as well.
#
# Memory: VmRSS of the server after a 1 s warm-up of the steady client
# (before) and at the end of the flood (after), and VmHWM (the peak).
# The bound checked: after - before <= MAX_KEYS * BYTES_PER_KEY. The
# default BYTES_PER_KEY, 128, is the memory goal's 96 bytes per tracked key
# plus the flood's keys (about 12 bytes, stored inline) and some slack for
# a table just past a doubling; see BENCHMARKS.md, "Memory per tracked key".
#
# Settings (environment variables):
#   MAX_KEYS       the backend's bound (default 100000: the flood sends ten
#                  times as many keys, so the bound is exercised)
#   BYTES_PER_KEY  see above (default 128)
#   FLOOD_KEYS     distinct keys the flood must reach (default 1000000; a
#                  run that sends fewer is reported, not counted as done)
#   FLOOD_SECONDS  length of each phase (default 30)
#   FLOOD_MAX_SECONDS  the longest a flood goes on to reach FLOOD_KEYS
#                  (default 100)
#   STEADY_CONNS   the steady client's connections (default 16)
#   FLOOD_CONNS    the flood's (and the control's) connections (default 16)
#   REPEATS        repeats of the three phases (default 3)
#   QUICK=1        REPEATS=1 FLOOD_SECONDS=12 FLOOD_MAX_SECONDS=12 (fewer
#                  keys than FLOOD_KEYS)
#   BENCH_LISTEN   server address (default 127.0.0.1:38085)
#
# About 5 minutes with the defaults on a quiet machine (where the flood
# reaches a million keys within FLOOD_SECONDS), up to 9 where it does not.
# With two or more CPUs and taskset, the
# server is pinned to CPU 0 and both wrk processes to CPU 1.

set -euo pipefail
source "$(dirname "$0")/common.sh"

MAX_KEYS=${MAX_KEYS:-100000}
BYTES_PER_KEY=${BYTES_PER_KEY:-128}
FLOOD_KEYS=${FLOOD_KEYS:-1000000}
FLOOD_SECONDS=${FLOOD_SECONDS:-30}
FLOOD_MAX_SECONDS=${FLOOD_MAX_SECONDS:-100}
STEADY_CONNS=${STEADY_CONNS:-16}
FLOOD_CONNS=${FLOOD_CONNS:-16}
REPEATS=${REPEATS:-3}
if [ "${QUICK:-}" = 1 ]; then REPEATS=1 FLOOD_SECONDS=12 FLOOD_MAX_SECONDS=12; fi
LISTEN=${BENCH_LISTEN:-127.0.0.1:38085}
URL="http://$LISTEN/"

need_wrk
build_server

CLIENT_PIN=()
if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
    SERVER_WRAP=(taskset -c 0)
    CLIENT_PIN=(taskset -c 1)
    pinning="server on CPU 0, both wrk on CPU 1"
else
    pinning="not pinned (needs taskset and 2 CPUs)"
fi

export BENCH_KEY=header BENCH_MAX_KEYS=$MAX_KEYS

# The steady client for $1 seconds; prints its requests per second.
steady() {
    "${CLIENT_PIN[@]}" wrk -t1 -c"$STEADY_CONNS" -d"${1}s" -s benches/http/keys.lua "$URL" \
        -- 1 steady >"$WORK/steady.out"
    if grep -q 'Non-2xx' "$WORK/steady.out"; then
        say "the steady client was denied:"
        cat "$WORK/steady.out" >&2
        exit 1
    fi
    awk '/^Requests\/sec:/ {print $2}' "$WORK/steady.out"
}

# Runs phase $1 (alone, control or flood) once; appends
# "phase steady_rps other_requests rss_before_kib rss_after_kib hwm_kib".
run_phase() {
    local phase=$1 other_pid="" rps other=0
    start_server memory
    steady 1 >/dev/null
    local before after hwm
    before=$(rss_kib "$SERVER_PID")
    case $phase in
        control)
            "${CLIENT_PIN[@]}" wrk -t1 -c"$FLOOD_CONNS" -d"${FLOOD_SECONDS}s" \
                -s benches/http/keys.lua "$URL" -- 1 other >"$WORK/other.out" &
            other_pid=$!
            ;;
        flood)
            flood_prefix="f$RANDOM"
            "${CLIENT_PIN[@]}" wrk -t1 -c"$FLOOD_CONNS" -d"${FLOOD_SECONDS}s" \
                -s benches/http/flood.lua "$URL" -- "$flood_prefix" >"$WORK/other.out" &
            other_pid=$!
            ;;
    esac
    rps=$(steady "$FLOOD_SECONDS")
    if [ -n "$other_pid" ]; then
        wait "$other_pid"
        other=$(awk '/requests in/ {print $1}' "$WORK/other.out")
        if grep -q 'Non-2xx' "$WORK/other.out"; then
            say "phase $phase: the other client was denied (or rejected):"
            cat "$WORK/other.out" >&2
            exit 1
        fi
    fi
    local spent=$FLOOD_SECONDS segment=0 more
    while [ "$phase" = flood ] && [ "$other" -lt "$FLOOD_KEYS" ] && [ "$spent" -lt "$FLOOD_MAX_SECONDS" ]; do
        segment=$((segment + 1))
        "${CLIENT_PIN[@]}" wrk -t1 -c"$FLOOD_CONNS" -d10s -s benches/http/flood.lua "$URL" \
            -- "$flood_prefix.$segment" >"$WORK/other.out"
        more=$(awk '/requests in/ {print $1}' "$WORK/other.out")
        other=$((other + more))
        spent=$((spent + 10))
    done
    after=$(rss_kib "$SERVER_PID")
    hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$SERVER_PID/status")
    stop_server
    echo "$phase $rps $other $before $after $hwm" >>"$WORK/results"
    printf '  %-8s steady %9.0f req/s   other client %8s requests   RSS %s -> %s KiB (peak %s)\n' \
        "$phase" "$rps" "$other" "$before" "$after" "$hwm" >&2
}

say "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $pinning"
say "memory mode keyed by x-client, max_keys $MAX_KEYS; phases of ${FLOOD_SECONDS}s"
for repeat in $(seq "$REPEATS"); do
    say "repeat $repeat of $REPEATS"
    for phase in alone control flood; do
        run_phase "$phase"
    done
done

# --- summary ------------------------------------------------------------------
col() { awk -v p="$1" -v c="$2" '$1 == p {print $c}' "$WORK/results"; }
declare -A RPS
for phase in alone control flood; do
    RPS[$phase]=$(col "$phase" 2 | median)
done
flood_keys=$(col flood 3 | sort -g | head -n 1)
growth=$(awk '$1 == "flood" {print $5 - $4}' "$WORK/results" | sort -g | tail -n 1)
control_growth=$(awk '$1 == "control" {print $5 - $4}' "$WORK/results" | sort -g | tail -n 1)
peak=$(col flood 6 | sort -g | tail -n 1)
bound_kib=$((MAX_KEYS * BYTES_PER_KEY / 1024))

echo
echo "key flood, memory backend keyed by x-client, max_keys $MAX_KEYS; median of $REPEATS; $pinning"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%d)"
echo "command: MAX_KEYS=$MAX_KEYS FLOOD_SECONDS=$FLOOD_SECONDS STEADY_CONNS=$STEADY_CONNS FLOOD_CONNS=$FLOOD_CONNS REPEATS=$REPEATS benches/http/flood.sh"
echo
echo "| phase | steady key req/s | / alone | / control | all runs (req/s) |"
echo "|---|---:|---:|---:|---|"
for phase in alone control flood; do
    printf '| %s | %.0f | %s | %s | %s |\n' "$phase" "${RPS[$phase]}" \
        "$(ratio "${RPS[$phase]}" "${RPS[alone]}")" "$(ratio "${RPS[$phase]}" "${RPS[control]}")" \
        "$(col "$phase" 2 | awk '{printf "%s%.0f", sep, $1; sep = " "}')"
done
echo
echo "distinct keys sent by the flood: at least $flood_keys per run (wanted $FLOOD_KEYS)"
echo "server RSS growth during the flood: at most $growth KiB per run (control: $control_growth KiB); peak RSS $peak KiB"
echo "bound: $MAX_KEYS keys * $BYTES_PER_KEY bytes = $bound_kib KiB"
if [ "$flood_keys" -lt "$FLOOD_KEYS" ]; then
    echo "NOT DONE: the flood sent fewer than $FLOOD_KEYS keys (raise FLOOD_SECONDS or FLOOD_CONNS)"
fi
if [ "$growth" -le "$bound_kib" ]; then
    echo "memory: within the bound"
else
    echo "memory: OVER the bound"
fi
within=$(awk -v f="${RPS[flood]}" -v c="${RPS[control]}" 'BEGIN {print (f >= 0.8 * c) ? "yes" : "no"}')
echo "steady key within 20% of its no-flood (control) figure: $within"
