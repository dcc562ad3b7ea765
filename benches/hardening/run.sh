#!/usr/bin/env bash
# The quick start (examples/quickstart/axum_basic.rs) against slow, idle and
# hoarding clients, from outside, with its default limits: a slowloris
# client (a header line every 2 s), a stalled request line, a connection
# that sends nothing, an idle keep-alive connection, and 20,100 idle
# connections from one address (three client processes: the descriptor
# limit here is 20,000 a process) while another address asks for a page;
# then 20 connections from one address that pipeline requests into a 4 KB
# receive buffer and never read (closed at the write timeout, 30 s; the
# server's RSS before, at its peak and after).
# Takes about 110 s. Prints one line per check with the time it took.
#
#   benches/hardening/run.sh                  # builds the example (debug)
#   HOARD=2000 benches/hardening/run.sh       # a smaller hoard
#   ONLY=pipelining benches/hardening/run.sh  # the non-reading check alone
set -euo pipefail
cd "$(dirname "$0")/../.."

cargo build -q --example axum_basic
bin="${CARGO_TARGET_DIR:-target}/debug/examples/axum_basic"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log=$(mktemp)
THROTTLE_LISTEN="127.0.0.1:$port" "$bin" >/dev/null 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done
python3 benches/hardening/drive.py "$port" "${HOARD:-20100}" "$pid"
echo "server log: $(grep -c 'connection refused' "$log") refusal lines, last:"
grep 'connection refused' "$log" | tail -n 1 || true
