#!/usr/bin/env bash
# The storm benchmark: 200 clients, each with its own quota of 10 a second
# at the gateway and each wanting 30 a second for 30 s, three arms in one
# run (no layer with immediate retries; tower's retry with its budget and
# backoff; throttle-fleet-client's layer), against a fixed window and a
# token bucket. Prints one markdown table per algorithm (requests sent,
# 429s, goodput, time to finish) and the goals line; with CHECK=1 the exit
# code says whether the goals were met on both (1: a goal missed).
#
# Usage (from anywhere in the workspace):
#
#   benches/storm/run.sh                   # full: 200 clients, 30 s an arm, ~3.5 min and the build
#   CHECK=1 benches/storm/run.sh           # the same, exit 1 if a goal is missed
#   QUICK=1 benches/storm/run.sh           # 20 clients, 6 s an arm, ~1 min
#
# On the quick run the layer's goodput to the finish misses its goal by
# construction: it serves its waiting calls for up to 5 s after the
# arrivals stop, and a quota of whole windows admits 10 × (T + 1) in T
# seconds, 7/6 of the rate for the other arms against 11/10.5 for it.
# Compare "goodput while arriving" there (see storm.rs's header).
#
# Settings: ALGORITHMS (default "fixed token"; also counter, log, leaky), QUICK, CHECK, SEED (the
# arrivals' phases; default 1), NOISE (the goodput tolerance, a fraction;
# default 0.03, the run's noise as measured by two quick runs), STORM_BIN
# (a prebuilt storm example), RELEASE (0: the debug build).
# CARGO_TARGET_DIR is honoured by the build. Only loopback: the gateway on
# a free port of 127.0.0.1, the clients on 127.0.1.1 to 127.0.1.200.
# Everything started here is stopped on exit, Ctrl-C or kill (the driver
# kills each gateway it starts; a gateway whose driver is gone exits when
# its standard input closes).

set -euo pipefail

cd "$(dirname "$0")/../.."

ALGORITHMS=${ALGORITHMS:-fixed token}
QUICK=${QUICK:-0}
CHECK=${CHECK:-0}
SEED=${SEED:-1}
NOISE=${NOISE:-0.03}

say() { printf '%s\n' "$*" >&2; }
die() { say "storm: $*"; exit 2; }
[[ $SEED =~ ^[0-9]+$ ]] || die "SEED=$SEED: a whole number"

if [ -n "${STORM_BIN:-}" ]; then
    BIN=$STORM_BIN
    [ -x "$BIN" ] || die "STORM_BIN=$BIN is not an executable"
    say "using the prebuilt $BIN (STORM_BIN; not building)"
else
    profile=(--release)
    [ "${RELEASE:-1}" = 0 ] && profile=()
    say "building example storm (${profile[*]:-debug})"
    BIN=$(cargo build "${profile[@]}" -p throttle-fleet-suite --example storm --message-format=json-render-diagnostics |
        sed -n 's/.*"executable":"\([^"]*storm\)".*/\1/p' | tail -n 1)
    [ -x "$BIN" ] || die "could not find the storm executable"
fi

# The driver, stopped (with its gateway) on exit, Ctrl-C or kill.
DRIVER=
stop() {
    trap - EXIT INT TERM HUP
    if [ -n "$DRIVER" ]; then
        kill -TERM "$DRIVER" 2>/dev/null || true
        wait "$DRIVER" 2>/dev/null || true
    fi
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

args=(drive --algorithms "$ALGORITHMS" --seed "$SEED" --noise "$NOISE")
[ "$QUICK" = 1 ] && args+=(--quick)
[ "$CHECK" = 1 ] && args+=(--check)

started=$(date +%s)
"$BIN" "${args[@]}" &
DRIVER=$!
status=0
wait "$DRIVER" || status=$?
DRIVER=
say "ran in $(($(date +%s) - started)) s"
exit "$status"
