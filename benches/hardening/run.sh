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
#
# ONLY=slowloris-rounds measures the gateway's admin listener instead
# (examples/gateway, release build, on examples/gateway.toml with an
# [admin] table): ROUNDS rounds (default 10) of 600 slowloris connections
# from SOURCES addresses (default 3; a request line, then a header line
# every 2 s, never the end of the headers), each round until the server
# has closed them all, printing the server's RSS after each round and the
# last round's over the first's (the goal: at most 1.2). At most 600
# connections at once, to 127.0.0.1 only; about 7 s a round.
#
#   ONLY=slowloris-rounds benches/hardening/run.sh
#   ONLY=slowloris-rounds ROUNDS=3 GATEWAY_BIN=path/to/gateway benches/hardening/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "${ONLY:-}" = slowloris-rounds ]; then
    bin=${GATEWAY_BIN:-}
    if [ -z "$bin" ]; then
        cargo build -q --release -p throttle-fleet-suite --example gateway
        bin="${CARGO_TARGET_DIR:-target}/release/examples/gateway"
    fi
    dir=$(mktemp -d)
    read -r port metrics_port admin_port < <(python3 -c '
import socket
held = [socket.socket() for _ in range(3)]
for s in held:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in held))')
    python3 -c 'import secrets; print(secrets.token_hex(24))' >"$dir/admin.token"
    sed -e "s/^listen = \"127.0.0.1:8080\"/listen = \"127.0.0.1:$port\"/" \
        -e "s/^listen = \"127.0.0.1:9090\"/listen = \"127.0.0.1:$metrics_port\"/" \
        examples/gateway.toml >"$dir/gateway.toml"
    printf '\n[admin]\nlisten = "127.0.0.1:%s"\ntoken_file = "admin.token"\n' "$admin_port" \
        >>"$dir/gateway.toml"
    "$bin" --config "$dir/gateway.toml" >/dev/null 2>"$dir/log" &
    pid=$!
    trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
    for _ in $(seq 300); do
        (exec 3<>"/dev/tcp/127.0.0.1/$admin_port") 2>/dev/null && break
        kill -0 $pid 2>/dev/null || { cat "$dir/log" >&2; exit 1; }
        sleep 0.1
    done
    python3 benches/hardening/drive.py "$admin_port" 0 "$pid"
    exit 0
fi

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
