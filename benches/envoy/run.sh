#!/usr/bin/env bash
# Envoy's rate limit services (the envoy_rls example, memory backend) under
# a client that is not ours: Python grpcio with the types and stubs
# generated from Envoy's protos (tests/envoy's, in the venv .ci/python-env
# makes), driven by benches/envoy/drive.py. Each measurement gets a fresh
# server on a free port of 127.0.0.1, with the configuration below written
# to a temporary folder; everything started here is stopped on exit.
#
#   benches/envoy/run.sh                # all three: 2 to 4 minutes (half a minute of it serializing the reports)
#   benches/envoy/run.sh rls-sizes      # ShouldRateLimit latency per descriptor count
#   benches/envoy/run.sh rlqs-flood     # N streams x 1,000 buckets at once, RLS alongside
#   benches/envoy/run.sh rlqs-steady    # 10 streams x 1,000 buckets every interval
#   RLS_CALLS=10 FLOOD_STREAMS="1 5" FLOOD_BUCKETS=200 STEADY_INTERVALS=1 benches/envoy/run.sh  # short
#
# Settings (environment variables; the README lists them with defaults):
#   RLS_SIZES RLS_CALLS RLS_WARMUP
#   FLOOD_STREAMS FLOOD_BUCKETS FLOOD_PER_CHANNEL FLOOD_TIMEOUT FLOOD_SETTLE PROBE_EVERY_MS PROBE_DEADLINE_MS
#   STEADY_STREAMS STEADY_BUCKETS STEADY_INTERVALS
#   REPORT_INTERVAL  the server's report_interval_secs (default 5, as examples/envoy_rls.toml)
#   ENVOY_RLS_BIN    an envoy_rls executable to run instead of building the release example
#   KEEP_LOGS        1: keep the server logs (their folder is printed)
set -euo pipefail

bin=${ENVOY_RLS_BIN:-}
[ -n "$bin" ] && bin=$(realpath "$bin")
cd "$(dirname "$0")/../.."

what=${1:-all}
case $what in
    rls-sizes | rlqs-flood | rlqs-steady | all) ;;
    *) echo "usage: benches/envoy/run.sh [rls-sizes|rlqs-flood|rlqs-steady|all]" >&2; exit 2 ;;
esac

RLS_SIZES=${RLS_SIZES:-1 4 8 16 32 64}
RLS_CALLS=${RLS_CALLS:-50}
RLS_WARMUP=${RLS_WARMUP:-10}
FLOOD_STREAMS=${FLOOD_STREAMS:-1 5 20 200}
FLOOD_BUCKETS=${FLOOD_BUCKETS:-1000}
FLOOD_PER_CHANNEL=${FLOOD_PER_CHANNEL:-50}
FLOOD_TIMEOUT=${FLOOD_TIMEOUT:-60}
FLOOD_SETTLE=${FLOOD_SETTLE:-0}
PROBE_EVERY_MS=${PROBE_EVERY_MS:-50}
PROBE_DEADLINE_MS=${PROBE_DEADLINE_MS:-1000}
STEADY_STREAMS=${STEADY_STREAMS:-10}
STEADY_BUCKETS=${STEADY_BUCKETS:-1000}
STEADY_INTERVALS=${STEADY_INTERVALS:-3}
REPORT_INTERVAL=${REPORT_INTERVAL:-5}
KEEP_LOGS=${KEEP_LOGS:-0}

if [ -z "$bin" ]; then
    cargo build -q --release -p throttle-fleet-suite --example envoy_rls
    bin=${CARGO_TARGET_DIR:-target}/release/examples/envoy_rls
fi
py=$(.ci/python-env | tail -n 1)
export PYTHONDONTWRITEBYTECODE=1

dir=$(mktemp -d "${TMPDIR:-/tmp}/envoy-bench.XXXXXX")
server=""
stop_server() {
    [ -n "$server" ] || return 0
    kill -TERM "$server" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    server=""
}
# (cleanup runs from the trap, which shellcheck cannot see)
# shellcheck disable=SC2317
cleanup() {
    trap - EXIT INT TERM HUP
    stop_server
    if [ "$KEEP_LOGS" = 1 ]; then echo "logs kept in $dir" >&2; else rm -rf "$dir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The rules: examples/envoy_rls.toml's per-user rule for RLS, and one the
# flood's buckets {name: flood, stream: S, n: I} match (every bucket its own
# key, so 1,000 buckets of a stream are 1,000 shares in the store).
config() {
    cat <<EOF
[rls]
listen = "127.0.0.1:$1"
report_interval_secs = $REPORT_INTERVAL

[backend]
kind = "memory"

[[rules]]
name = "per-user"
domain = "api"
descriptor = ["user_id"]
algorithm = "sliding_window_counter"
limit = 10
period_secs = 60

[[rules]]
name = "flood"
domain = "api"
descriptor = ["name=flood", "stream", "n"]
limit = 100
period_secs = 1
EOF
}

# Starts a fresh server; sets $server and $addr. $1 names its log.
start_server() {
    local port log=$dir/$1.log
    port=$(free_port)
    config "$port" >"$dir/envoy_rls.toml"
    "$bin" --config "$dir/envoy_rls.toml" >"$log" 2>&1 &
    server=$!
    addr=127.0.0.1:$port
    for _ in $(seq 100); do
        kill -0 "$server" 2>/dev/null || { cat "$log" >&2; echo "envoy bench: the server exited" >&2; exit 1; }
        grep -q "listening on" "$log" && return 0
        sleep 0.1
    done
    echo "envoy bench: the server did not listen within 10 s" >&2
    exit 1
}
# What the server logged beyond its start and stop lines.
server_log() {
    local odd
    odd=$(grep -v -e 'listening on' -e 'rules from' -e 'stopped' "$dir/$1.log" || true)
    [ -z "$odd" ] || { echo "  server log ($1):"; sed 's/^/    /' <<<"$odd" | tail -n 20; }
}

drive() { "$py" benches/envoy/drive.py --addr "$addr" --pid "$server" --interval "$REPORT_INTERVAL" "$@"; }

status=0
echo "envoy bench: $(basename "$bin"), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

if [ "$what" = rls-sizes ] || [ "$what" = all ]; then
    start_server rls-sizes
    drive rls-sizes --sizes "$RLS_SIZES" --calls "$RLS_CALLS" --warmup "$RLS_WARMUP" || status=1
    stop_server
    server_log rls-sizes
fi

if [ "$what" = rlqs-flood ] || [ "$what" = all ]; then
    for n in $FLOOD_STREAMS; do
        start_server "flood-$n"
        # The driver caps its own wait; timeout is the backstop.
        timeout -k 5 "$((FLOOD_TIMEOUT + FLOOD_SETTLE + 120))" \
            "$py" benches/envoy/drive.py --addr "$addr" --pid "$server" --interval "$REPORT_INTERVAL" \
            rlqs-flood --streams "$n" --buckets "$FLOOD_BUCKETS" --per-channel "$FLOOD_PER_CHANNEL" \
            --timeout "$FLOOD_TIMEOUT" --probe-every "$(awk "BEGIN { print $PROBE_EVERY_MS / 1000 }")" \
            --probe-deadline "$(awk "BEGIN { print $PROBE_DEADLINE_MS / 1000 }")" --settle "$FLOOD_SETTLE" || status=1
        stop_server
        server_log "flood-$n"
    done
fi

if [ "$what" = rlqs-steady ] || [ "$what" = all ]; then
    start_server steady
    drive rlqs-steady --streams "$STEADY_STREAMS" --buckets "$STEADY_BUCKETS" --intervals "$STEADY_INTERVALS" || status=1
    stop_server
    server_log steady
fi
exit "$status"
