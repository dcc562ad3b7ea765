#!/usr/bin/env bash
# throttle next to tower-rate-limiter 0.1.6.
#
# Usage: benches/tower-rate-limiter/run.sh [check [SCENARIO...] | http | redis | all]   (default all)
#   check  instructions per check (callgrind, least of 3): its memory
#          store beside ours, governor and throttle-kit, in one run of
#          src/bin/trl_check_instructions.rs (needs valgrind; ~25
#          minutes, most of it the million keys' setup under valgrind;
#          name scenarios after `check` to run only those)
#   http   instructions per request (callgrind, least of 3): its layer's
#          modes beside bare axum, tower_governor, throttle-kit's layer and
#          ours, the Redis modes included (benches/http/callgrind.sh with
#          MODES below; needs valgrind and redis-server; ~7 minutes)
#   redis  Redis commands per request (INFO commandstats over 2,000
#          requests after 200, one keep-alive client, the servers run
#          natively): its Redis store beside our exact mode and the naive
#          script on one connection (~1 minute)
#
# This package is outside the workspace with its own lock file, built
# with `--ignore-rust-version`: tower-rate-limiter's every 0.1.x release
# declares rust-version 1.96.0, and compiles on 1.95 all the same (see
# Cargo.toml). Its target directory is TRL_TARGET_DIR if set.

set -euo pipefail
cd "$(dirname "$0")"
what=${1:-all}
target=()
[ -n "${TRL_TARGET_DIR:-}" ] && target=(--target-dir "$TRL_TARGET_DIR")

if [ "$what" = check ] || [ "$what" = all ]; then
    command -v valgrind >/dev/null || { echo "valgrind is needed" >&2; exit 1; }
    bin=$(cargo build --release --ignore-rust-version "${target[@]}" --bin trl_check_instructions \
        --message-format=json-render-diagnostics \
        | sed -n 's/.*"executable":"\([^"]*trl_check_instructions\)".*/\1/p' | tail -n 1)
    "$bin" "${@:2}"
    echo
fi

if [ "$what" = http ] || [ "$what" = all ]; then
    MODES=${MODES:-"bare trl-bare governor governor-headers throttle-kit memory memory-no-headers memory-ietf memory-window trl trl-no-headers memory-deny governor-deny throttle-kit-deny trl-deny naive-mux exact exact-window trl-redis"} \
        ../http/callgrind.sh
fi

if [ "$what" = redis ] || [ "$what" = all ]; then
    (
        MODES=${REDIS_MODES_CMP:-"naive-mux exact exact-window trl-redis"}
        source ../http/common.sh
        build_server
        start_redis_for "$MODES"
        LISTEN=127.0.0.1:$(free_port)
        port=${LISTEN##*:}
        echo "Redis commands per request, 2,000 requests after 200, one keep-alive client"
        echo
        echo "| mode | commands per request | of which round trips (script calls or EXEC) | by name, per request |"
        echo "|---|---:|---:|---|"
        for mode in $MODES; do
            start_server "$mode"
            python3 benches/http/seq_client.py 127.0.0.1 "$port" 200 >/dev/null 2>&1 || true
            redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
            python3 benches/http/seq_client.py 127.0.0.1 "$port" 2000 >"$WORK/statuses" 2>/dev/null
            redis-cli -p "$REDIS_PORT" info commandstats | tr -d '\r' >"$WORK/stats"
            stop_server
            awk -F'[:=,]' -v m="$mode" -v n=2000 '
                /^cmdstat_/ {
                    name = substr($1, 9); c[name] = $3; total += $3
                    if (name ~ /^(evalsha|eval|exec)$/) trips += $3
                    if (name !~ /^(config|info)/) list = list sprintf("%s%s %.3f", sep, name, $3 / n)
                    if (name !~ /^(config|info)/) sep = ", "
                }
                END {
                    total -= c["config|resetstat"] + c["info"]
                    printf "| %s | %.3f | %.3f | %s |\n", m, total / n, trips / n, list
                }' "$WORK/stats"
            grep -qv '^200 ' "$WORK/statuses" && echo "  ($mode: not all 200: $(tr '\n' ' ' <"$WORK/statuses"))" >&2 || true
        done
    )
fi
