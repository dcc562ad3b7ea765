#!/usr/bin/env bash
# throttle next to limitador, library call to library call.
#
# Usage: benches/limitador/run.sh [instructions | fleet | envoy | all]   (default all)
#   instructions  instructions per check, the memory backend against
#                 limitador's in-memory storage (needs valgrind; ~3 minutes)
#   fleet         the approximate mode against limitador's Redis-cached
#                 storage on one private redis-server, three traffic models
#                 (SECS seconds each, default 30; ~4 minutes)
#   envoy         the Envoy services (throttle-fleet-envoy): instructions per
#                 RLS decision next to limitador on the same descriptors,
#                 RLS on Redis next to limitador's Redis storage (on one
#                 private redis-server), the cost per RLQS bucket reported,
#                 and the gRPC transport's share of a call (needs valgrind;
#                 ~7 minutes)
#
# This package is outside the workspace with its own lock file (limitador
# builds RocksDB, a C++ build of about 15 minutes on two cores the first
# time, and needs libclang: installed with apt-get when missing).

set -euo pipefail
cd "$(dirname "$0")"
what=${1:-all}

if ! ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 && ! ldconfig -p | grep -q 'libclang\.so '; then
    echo "installing libclang-dev (RocksDB's bindings need it)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q libclang-dev >&2
fi
cargo build --release --locked --bins

if [ "$what" = instructions ] || [ "$what" = all ]; then
    command -v valgrind >/dev/null || { echo "valgrind is needed" >&2; exit 1; }
    target/release/limitador_instructions
    echo
fi

# One private redis-server on a free port, started on first use, stopped
# on exit; each program empties it before each run.
port=
start_redis() {
    [ -n "$port" ] && return
    work=$(mktemp -d)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
        --daemonize no >"$work/redis.log" 2>&1 &
    redis=$!
    trap 'kill $redis 2>/dev/null || true; wait $redis 2>/dev/null || true; rm -rf "$work"' EXIT
    for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
}

if [ "$what" = fleet ] || [ "$what" = all ]; then
    start_redis
    target/release/limitador_fleet "redis://127.0.0.1:$port" "${SECS:-30}"
    echo
fi

if [ "$what" = envoy ] || [ "$what" = all ]; then
    command -v valgrind >/dev/null || { echo "valgrind is needed" >&2; exit 1; }
    target/release/envoy_instructions
    echo
    start_redis
    target/release/envoy_redis "redis://127.0.0.1:$port" "${DECISIONS:-20000}"
    echo
    target/release/rlqs_report_cost
    echo
    target/release/rls_grpc_cost
fi
