#!/usr/bin/env bash
# The flash-crowd benchmark: twelve policies in front of a backend whose
# capacity is a pool of 16 connections, the same open-loop traffic for
# each (a ticket sale: twentyfold in three seconds, 70% bots), then a
# scenario in which, under the crowd's peak mix, the backend slows down
# threefold and recovers, to watch an adaptive limit follow it. Prints
# markdown tables, the answers' counts, the goals check and ASCII plots
# (one per adaptive policy, one of the step scenario); with CHECK=1 the
# exit code says whether every goal was met (1: a goal missed; 3: missed
# only in runs where the driver fell behind its schedule, inconclusive: a
# debug build on a busy machine).
#
# Usage (from anywhere in the workspace):
#
#   benches/flash-crowd/run.sh                   # full: ~16 s a policy, 40 s step scenario, ~5 min with the build
#   QUICK=1 CHECK=1 benches/flash-crowd/run.sh   # 6 s a policy, 20 s step scenario (CI)
#
# Settings: POLICIES (default all twelve, in the table's order), STEP_POLICY
# (the policy of the step scenario; default rate+adaptive), QUICK, CHECK,
# SEED (the traffic's; default 1), FLASH_CROWD_BIN (a prebuilt flash_crowd
# example), RELEASE (0: the debug build), KEEP_LOGS (1: keep the servers'
# logs, the drivers' JSON and each run's samples as CSV; the folder is
# printed).
# CARGO_TARGET_DIR is honoured by the build. Only loopback: each server
# on a free port of 127.0.0.1, the clients on addresses of 127.0.0.0/8.
# Everything started here is stopped on exit, Ctrl-C or kill.

set -euo pipefail

cd "$(dirname "$0")/../.."

POLICIES=${POLICIES:-none rate rate+fixed rate+adaptive rate+adaptive+reserve rate+adaptive@2x \
    rate+adaptive+reserve@2x tower-cl+shed rate+tower-acc rate+tower-acc@2x rate+resilience rate+resilience@2x}
STEP_POLICY=${STEP_POLICY:-rate+adaptive}
QUICK=${QUICK:-0}
CHECK=${CHECK:-0}
SEED=${SEED:-1}
KEEP_LOGS=${KEEP_LOGS:-0}

say() { printf '%s\n' "$*" >&2; }
die() { say "flash-crowd: $*"; exit 2; }
# shellcheck source=benches/fleet/common.sh
. benches/fleet/common.sh
command -v python3 >/dev/null 2>&1 || die "needs python3 (to find free ports)"
[[ $SEED =~ ^[0-9]+$ ]] || die "SEED=$SEED: a whole number"
build_example flash_crowd FLASH_CROWD_BIN

scratch_run flash-crowd

quick=()
[ "$QUICK" = 1 ] && quick=(--quick)
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)

# Runs scenario $2 against a fresh server under policy $1, writing the
# driver's JSON to $3.
run_one() {
    local policy=$1 scenario=$2 out=$3 port pid
    port=$(free_ports 1)
    "$BIN" serve --policy "$policy" --port "$port" >"$WORK/$scenario-$policy.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    if ! wait_port "$port" "$pid"; then
        cat "$WORK/$scenario-$policy.log" >&2
        die "the $policy server did not start"
    fi
    say "$scenario: $policy"
    "$BIN" drive --scenario "$scenario" --policy "$policy" --port "$port" --seed "$SEED" \
        --server-pid "$pid" --clk-tck "$CLK_TCK" --out "$out" "${quick[@]}" ||
        die "the driver failed against $policy"
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

started=$(date +%s)
results=()
for policy in $POLICIES; do
    run_one "$policy" flash "$WORK/flash-$policy.json"
    results+=("$WORK/flash-$policy.json")
done
run_one "$STEP_POLICY" step "$WORK/step.json"
results+=("$WORK/step.json")
say "ran in $(($(date +%s) - started)) s"

report=(report)
[ "$CHECK" = 1 ] && report+=(--check)
[ "$KEEP_LOGS" = 1 ] && report+=(--csv "$WORK")
"$BIN" "${report[@]}" "${results[@]}"
