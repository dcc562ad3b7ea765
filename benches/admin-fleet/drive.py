"""Drives benches/admin-fleet/run.sh: times fleet-wide operations through a
gateway's admin endpoint, and reports them. Standard library only.

    drive.py --mode M --rounds N --ports P1,P2,P3 --admins A1,A2,A3 \
             --token-file F --json OUT
    drive.py --report [--check] OUT...

One round, for one client address (127.4.<mode>.<round>), under rule `ip`
(`--limit` a minute, 5 by default):
  1. read through every copy: fresh;
  2. block through copy 1 (60 s); time until copies 2 and 3 read it; then a
     request of the address gets 429 from every copy, and every copy reads
     58 to 60 s left;
  3. unblock through copy 1; time until copies 2 and 3 read no block; then
     a request gets 200 from every copy;
  4. spend the address on every copy until each answers 429; reset through
     copy 1; time until copies 2 and 3 read it fresh; then a request gets
     200 from every copy.
Each time runs from just before the admin call; copies 2 and 3 are read
every 2 ms (through their admin endpoints: a read spends nothing); a step
not read within 5 s fails.

Then, with --redis-port, one round through an outage (addresses
127.4.<mode>.201-203):
  5. block B (60 s) and C (600 s) through copy 1, read on every copy;
  6. Redis is shut down without saving (it comes back empty);
  7. block A through copy 1 and unblock B through copy 2: each answers 202
     (`reach: queued`) and holds on the copy that took it at once (A gets
     429 from copy 1, B 200 from copy 2);
  8. Redis starts again, empty, on the same port; time until copies 2 and
     3 read A blocked, and until every copy reads B unblocked;
  9. a fourth copy starts (--gateway, --config); time from its first
     answer until it reads C blocked (a block Redis lost, sent again by
     the copies that held it); then A and C get 429 from all four copies
     and every copy reads B unblocked, and still does 2 s later.
"""
import atexit
import os
import signal
import socket
import subprocess

import argparse
import http.client
import json
import statistics
import sys
import time

PATIENCE = 5.0
MODES = {"exact": 1, "approximate": 2, "leased": 3}


def request(port, source, method="GET", path="/", body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5, source_address=(source, 0))
    try:
        data = None if body is None else json.dumps(body).encode()
        h = dict(headers or {})
        if data is not None:
            h["content-type"] = "application/json"
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


class Admin:
    def __init__(self, ports, token):
        self.ports = ports
        self.auth = {"authorization": f"Bearer {token}"}

    def call(self, copy, path, body=None):
        method = "GET" if body is None else "POST"
        status, raw = request(self.ports[copy], "127.0.0.1", method, path, body, self.auth)
        if status != 200:
            raise RuntimeError(f"admin {path} on copy {copy + 1}: {status} {raw[:200]!r}")
        return json.loads(raw)


def until(start, admin, address, holds):
    """Seconds from `start` until copies 2 and 3 read a state of `address`
    for which `holds` is true, or None. (Reading through the admin endpoint
    spends nothing; a request would spend the address's quota.)"""
    pending = {1, 2}
    while pending:
        for copy in list(pending):
            if holds(admin.call(copy, "/admin/inspect", {"rule": "ip", "key": {"ip": address}})):
                pending.discard(copy)
        if time.monotonic() - start > PATIENCE:
            return None
        time.sleep(0.002)
    return time.monotonic() - start


def answers(ports, address, want, failures, what):
    """Each copy answers one request of `address` with `want`."""
    for i, port in enumerate(ports):
        status, _ = request(port, address)
        if status != want:
            failures.append(f"{address}: {what}: copy {i + 1} answered {status}, not {want}")


def round_(admin, ports, address, failures, limit):
    out = {}
    key = {"rule": "ip", "key": {"ip": address}}
    states = [admin.call(c, "/admin/inspect", key) for c in range(3)]
    if any(s.get("remaining") != limit or s.get("blocked_for_secs") for s in states):
        failures.append(f"{address}: not fresh on every copy at the start: {states}")

    start = time.monotonic()
    admin.call(0, "/admin/block", dict(key, seconds=60))
    out["block"] = until(start, admin, address, lambda s: s.get("blocked_for_secs"))
    answers(ports, address, 429, failures, "blocked")
    states = [admin.call(c, "/admin/inspect", key) for c in range(3)]
    lefts = [s.get("blocked_for_secs") or 0 for s in states]
    if min(lefts) < 58 or max(lefts) > 60:
        failures.append(f"{address}: the copies read different blocks: {states}")

    start = time.monotonic()
    admin.call(0, "/admin/unblock", key)
    out["unblock"] = until(start, admin, address, lambda s: s.get("blocked_for_secs") is None)
    answers(ports, address, 200, failures, "unblocked")

    for i, port in enumerate(ports):
        for _ in range(4 * limit):
            if request(port, address)[0] == 429:
                break
        else:
            failures.append(f"{address}: copy {i + 1} never denied the spent address")
    start = time.monotonic()
    admin.call(0, "/admin/reset", key)
    out["reset"] = until(start, admin, address, lambda s: s.get("remaining") == limit)
    answers(ports, address, 200, failures, "reset")
    for op in ("block", "unblock", "reset"):
        if out[op] is None:
            failures.append(f"{address}: {op} was not read on copies 2 and 3 within {PATIENCE} s")
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers_on(port):
    """Waits (at most 10 s) until `port` accepts connections."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.02)
    return False


def changed(admin, copy, path, body, want_status):
    """An admin change through `copy`, which must answer `want_status`."""
    status, raw = request(admin.ports[copy], "127.0.0.1", "POST", path, body, admin.auth)
    if status != want_status:
        raise RuntimeError(f"admin {path} on copy {copy + 1}: {status}, not {want_status}: {raw[:200]!r}")
    return json.loads(raw)


def outage_round(args, admin, ports, failures):
    """Steps 5 to 9 of the module's docs."""
    out = {}
    base = f"127.4.{MODES[args.mode]}"
    a, b, c = f"{base}.201", f"{base}.202", f"{base}.203"
    key = lambda address: {"rule": "ip", "key": {"ip": address}}
    admin.call(0, "/admin/block", dict(key(b), seconds=60))
    admin.call(0, "/admin/block", dict(key(c), seconds=600))
    for address in (b, c):
        if until(time.monotonic(), admin, address, lambda s: s.get("blocked_for_secs")) is None:
            failures.append(f"{address}: the block before the outage was not read everywhere")

    subprocess.run(["redis-cli", "-p", str(args.redis_port), "shutdown", "nosave"],
                   capture_output=True, timeout=10)
    time.sleep(0.3)
    r = changed(admin, 0, "/admin/block", dict(key(a), seconds=60), 202)
    if r.get("reach") != "queued":
        failures.append(f"{a}: a block during the outage answered {r}")
    r = changed(admin, 1, "/admin/unblock", key(b), 202)
    if r.get("reach") != "queued" or r.get("was_blocked") is not True:
        failures.append(f"{b}: an unblock during the outage answered {r}")
    if request(ports[0], a)[0] != 429:
        failures.append(f"{a}: the block made during the outage does not hold on copy 1")
    if request(ports[1], b)[0] != 200:
        failures.append(f"{b}: the unblock made during the outage does not hold on copy 2")

    redis = subprocess.Popen(
        ["redis-server", "--port", str(args.redis_port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", args.redis_dir, "--daemonize", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # run.sh stops it after the mode.
    with open(os.path.join(args.redis_dir, "redis-again.pid"), "w") as f:
        f.write(str(redis.pid))
    if not answers_on(args.redis_port):
        failures.append("redis-server did not start again")
        return out
    back = time.monotonic()
    out["outage_block"] = until(back, admin, a, lambda s: s.get("blocked_for_secs"))
    pending = {0, 1, 2}
    while pending and time.monotonic() - back < PATIENCE:
        for copy in list(pending):
            state = admin.call(copy, "/admin/inspect", key(b))
            if state.get("blocked_for_secs") is None and not state.get("degraded"):
                pending.discard(copy)
        time.sleep(0.002)
    out["outage_unblock"] = None if pending else time.monotonic() - back

    port, admin_port = free_port(), free_port()
    late = subprocess.Popen(
        [args.gateway, "--config", args.config, "--listen", f"127.0.0.1:{port}",
         "--admin-listen", f"127.0.0.1:{admin_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(lambda: late.poll() is None and late.send_signal(signal.SIGTERM))
    if not (answers_on(port) and answers_on(admin_port)):
        failures.append("the fourth copy did not start")
        return out
    up = time.monotonic()
    four = Admin(admin.ports + [admin_port], admin.auth["authorization"].split(" ", 1)[1])
    out["late_copy"] = None
    while time.monotonic() - up < PATIENCE:
        if four.call(3, "/admin/inspect", key(c)).get("blocked_for_secs"):
            out["late_copy"] = time.monotonic() - up
            break
        time.sleep(0.002)
    all_ports = ports + [port]
    for pause in (0, 2):
        time.sleep(pause)
        answers(all_ports, a, 429, failures, f"blocked during the outage, {pause} s after")
        answers(all_ports, c, 429, failures, f"blocked before the loss, {pause} s after")
        # Read, not requested: a request spends the quota, and the fifth
        # would be denied for it.
        for copy in range(4):
            if four.call(copy, "/admin/inspect", key(b)).get("blocked_for_secs") is not None:
                failures.append(f"{b}: unblocked during the outage, {pause} s after: "
                                f"copy {copy + 1} reads it blocked")
    late.send_signal(signal.SIGTERM)
    late.wait(timeout=10)
    for op, what in (("outage_block", "a block made during the outage, on copies 2 and 3"),
                     ("outage_unblock", "an unblock made during the outage, on every copy"),
                     ("late_copy", "a block Redis lost, on a copy started after")):
        if out[op] is None:
            failures.append(f"{what}: not read within {PATIENCE} s")
    return out


def drive(args):
    ports = [int(p) for p in args.ports.split(",")]
    admins = [int(p) for p in args.admins.split(",")]
    with open(args.token_file) as f:
        admin = Admin(admins, f.read().strip())
    failures, rounds = [], []
    for r in range(args.rounds):
        address = f"127.4.{MODES[args.mode]}.{r + 1}"
        rounds.append(round_(admin, ports, address, failures, args.limit))
    outage = outage_round(args, admin, ports, failures) if args.redis_port else {}
    with open(args.json, "w") as f:
        json.dump({"mode": args.mode, "rounds": rounds, "outage": outage, "failures": failures}, f)
    for failure in failures:
        print(f"admin-fleet: {args.mode}: {failure}", file=sys.stderr)
    return 1 if failures else 0


def report(args):
    ok = True
    print("| mode | rounds | block: median / max | unblock: median / max | reset: median / max "
          "| outage: block / unblock after Redis returns | loss: a copy started after | steps that failed |")
    print("|---|---|---|---|---|---|---|---|")
    for path in args.files:
        with open(path) as f:
            rec = json.load(f)
        cells = []
        for op in ("block", "unblock", "reset"):
            times = [r[op] for r in rec["rounds"] if r.get(op) is not None]
            if times:
                cells.append(f"{statistics.median(times) * 1000:.0f} / {max(times) * 1000:.0f} ms")
                ok &= max(times) <= 1.0
            else:
                cells.append("none")
                ok = False
        outage = rec.get("outage") or {}
        def ms(op):
            t = outage.get(op)
            return "not run" if op not in outage else ("none" if t is None else f"{t * 1000:.0f} ms")
        for op in ("outage_block", "outage_unblock", "late_copy"):
            if op in outage:
                ok &= outage[op] is not None and outage[op] <= 1.0
        cells.append(f"{ms('outage_block')} / {ms('outage_unblock')}")
        cells.append(ms("late_copy"))
        ok &= not rec["failures"]
        print(f"| redis-{rec['mode']} | {len(rec['rounds'])} | {' | '.join(cells)} | {len(rec['failures'])} |")
    print()
    print("Goal: every step holds on every copy, every propagation at most 1 s (after an outage:",
          "from Redis answering again; a copy started after a loss: from its first answer):",
          "met" if ok else "NOT met")
    return 0 if ok or not args.check else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=sorted(MODES))
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--limit", type=int, default=5)
    p.add_argument("--ports")
    p.add_argument("--admins")
    p.add_argument("--token-file")
    p.add_argument("--json")
    p.add_argument("--redis-port", type=int, help="run the outage round on this Redis")
    p.add_argument("--redis-dir", help="the Redis' working folder, to start it again")
    p.add_argument("--gateway", help="the gateway's binary, for a copy started after the loss")
    p.add_argument("--config", help="the copies' configuration file")
    p.add_argument("--report", action="store_true")
    p.add_argument("--check", action="store_true")
    p.add_argument("files", nargs="*")
    args = p.parse_args()
    sys.exit(report(args) if args.report else drive(args))


if __name__ == "__main__":
    main()
