# Shared by the scripts in benches/http/ (sourced, not run): building the
# bench server, the private redis-server of the Redis modes, starting and
# stopping the server, and the summary helpers.
#
# The sourcing script sets LISTEN (host:port) before calling start_server,
# and may set SERVER_WRAP (an array: a command the server runs under, e.g.
# taskset or valgrind) and READY_TRIES (tenths of a second to wait for the
# server's port; default 100).

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

say() { printf '%s\n' "$*" >&2; }

# The modes that need Redis.
REDIS_MODES=" naive-pool naive-mux exact exact-2conn exact-window approximate leased trl-redis "

WORK=$(mktemp -d)
SERVER_PID=""
REDIS_PID=""
REDIS_PORT=""
SERVER_WRAP=()
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -INT "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [ -n "$REDIS_PID" ]; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# Builds examples/bench_server.rs in release and sets BIN; if any of
# $MODES starts with `trl`, also the tower-rate-limiter modes' server
# (benches/tower-rate-limiter, a package outside the workspace: see its
# Cargo.toml; its target directory is TRL_TARGET_DIR if set) and sets
# TRL_BIN.
build_server() {
    say "building examples/bench_server.rs (release)"
    BIN=$(cargo build --release -p throttle-fleet-suite --example bench_server --message-format=json-render-diagnostics \
        | sed -n 's/.*"executable":"\([^"]*bench_server\)".*/\1/p' | tail -n 1)
    [ -x "$BIN" ] || { say "could not find the bench_server executable"; exit 1; }
    TRL_BIN=""
    case " ${MODES:-} " in
        *" trl"*)
            say "building benches/tower-rate-limiter's trl_bench_server (release)"
            TRL_BIN=$(env ${TRL_TARGET_DIR:+CARGO_TARGET_DIR=$TRL_TARGET_DIR} cargo build --release \
                --ignore-rust-version --manifest-path benches/tower-rate-limiter/Cargo.toml \
                --bin trl_bench_server --message-format=json-render-diagnostics \
                | sed -n 's/.*"executable":"\([^"]*trl_bench_server\)".*/\1/p' | tail -n 1)
            [ -x "$TRL_BIN" ] || { say "could not find the trl_bench_server executable"; exit 1; }
            ;;
    esac
}

# A free TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Starts a private redis-server on a free port (never one you already run)
# if any of the modes in $1 needs one, and exports REDIS_URL. It is not
# pinned: it shares the machine with the server and the client, as a
# co-located Redis would.
start_redis_for() {
    local mode needs=""
    for mode in $1; do
        case $REDIS_MODES in *" $mode "*) needs=1 ;; esac
    done
    [ -n "$needs" ] || return 0
    command -v redis-server >/dev/null 2>&1 || { say "the Redis modes need redis-server"; exit 1; }
    REDIS_PORT=$(free_port)
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
        >"$WORK/redis.log" 2>&1 &
    REDIS_PID=$!
    for _ in $(seq 100); do
        redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    export REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
    say "redis-server for the Redis modes on port $REDIS_PORT"
}

# Empties the private Redis (before every run, so runs start alike).
flush_redis() {
    if [ -n "$REDIS_PID" ]; then
        redis-cli -p "$REDIS_PORT" flushall >/dev/null
    fi
}

# Starts the server in mode $1 (output to $WORK/server.log), sets
# SERVER_PID and waits until it accepts connections.
start_server() {
    local mode=$1 log="$WORK/server.log" host=${LISTEN%:*} port=${LISTEN##*:}
    flush_redis
    local bin=$BIN
    case $mode in trl*) bin=$TRL_BIN ;; esac
    BENCH_MODE=$mode BENCH_LISTEN=$LISTEN "${SERVER_WRAP[@]}" "$bin" >"$log" 2>&1 &
    SERVER_PID=$!
    local ready=""
    for _ in $(seq "${READY_TRIES:-100}"); do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            break
        fi
        if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
            ready=1
            break
        fi
        sleep 0.1
    done
    if [ -z "$ready" ]; then
        say "server for mode $mode did not start:"
        cat "$log" >&2
        exit 1
    fi
}

# Stops the server with SIGINT (a graceful shutdown) and waits for it.
stop_server() {
    kill -INT "$SERVER_PID"
    wait "$SERVER_PID" || true
    SERVER_PID=""
}

# The resident set size of process $1, in KiB.
rss_kib() {
    awk '/^VmRSS:/ {print $2}' "/proc/$1/status"
}

# The median of the numbers on stdin.
median() {
    sort -g | awk '{v[NR] = $1} END {
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# $1 / $2 to three decimals, or "-" when $2 is empty.
ratio() {
    if [ -n "${2:-}" ]; then awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; else echo "-"; fi
}

# The wrk executable, installed with apt-get if missing.
need_wrk() {
    command -v wrk >/dev/null 2>&1 && return 0
    say "wrk not found: installing it with apt-get"
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null 2>&1 || { say "need root or sudo to install wrk"; exit 1; }
        sudo=sudo
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq wrk >/dev/null
}

# The Lua script for wrk that spreads requests over $1 client keys
# (benches/http/keys.lua), or nothing for peer-IP keying ($1 empty).
wrk_keys_args() {
    if [ -n "${1:-}" ]; then
        printf '%s\n' -s benches/http/keys.lua
    fi
}
