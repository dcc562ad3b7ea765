# shellcheck shell=bash
# What the fleet benches' run.sh scripts share (sourced, not run): the
# tools they need, free ports, waiting for a server to listen, and building
# the example they start copies of. Expects
# `say` and `die` from the script that sources it.

# redis-server, redis-cli and python3 3.11 or later.
need_tools() {
    command -v redis-server >/dev/null 2>&1 || die "needs redis-server"
    command -v redis-cli >/dev/null 2>&1 || die "needs redis-cli"
    command -v python3 >/dev/null 2>&1 || die "needs python3 (3.11 or later)"
    python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' ||
        die "needs python3 3.11 or later (found $(python3 --version 2>&1))"
}

# $1 distinct free TCP ports on 127.0.0.1 (held open together while
# chosen, so never the same twice), never 6379. Needs python3.
free_ports() {
    python3 - "$1" <<'PY'
import socket, sys
held = []
while len(held) < int(sys.argv[1]):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    if s.getsockname()[1] != 6379:
        held.append(s)
print(" ".join(str(s.getsockname()[1]) for s in held))
PY
}

# Waits up to 30 s until 127.0.0.1:$1 accepts connections, while process
# $2 lives; fails if it dies or the time runs out.
wait_port() {
    for _ in $(seq 300); do
        kill -0 "$2" 2>/dev/null || return 1
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# A run's scratch directory, WORK (named after $1; kept on exit with
# KEEP_LOGS=1, removed otherwise), and PIDS, the processes the run starts:
# every one is stopped on exit, Ctrl-C or kill, and so is each process
# whose pid a helper wrote to a `*.pid` file in WORK. The caller defines say.
scratch_run() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    PIDS=()
    trap stop_run EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
}

# shellcheck disable=SC2317
stop_run() {
    trap - EXIT INT TERM HUP
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    local file
    for file in "$WORK"/*.pid; do
        [ -f "$file" ] && kill -TERM "$(cat "$file")" 2>/dev/null || true
    done
    if [ "${KEEP_LOGS:-0}" = 1 ]; then say "logs kept in $WORK"; else rm -rf "$WORK"; fi
}

# Sets BIN to example $1's executable: the prebuilt one named by the
# variable $2 if set, else built (release unless RELEASE=0).
build_example() {
    local name=$1 var=$2
    if [ -n "${!var:-}" ]; then
        BIN=${!var}
        [ -x "$BIN" ] || die "$var=$BIN is not an executable"
        say "using the prebuilt $BIN ($var; not building)"
        return
    fi
    local profile=(--release)
    [ "${RELEASE:-1}" = 0 ] && profile=()
    say "building example $name (${profile[*]:-debug})"
    BIN=$(cargo build "${profile[@]}" --workspace --example "$name" --message-format=json-render-diagnostics |
        sed -n "s/.*\"executable\":\"\([^\"]*$name\)\".*/\1/p" | tail -n 1)
    [ -x "$BIN" ] || die "could not find the $name executable"
}
