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
"""

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


def drive(args):
    ports = [int(p) for p in args.ports.split(",")]
    admins = [int(p) for p in args.admins.split(",")]
    with open(args.token_file) as f:
        admin = Admin(admins, f.read().strip())
    failures, rounds = [], []
    for r in range(args.rounds):
        address = f"127.4.{MODES[args.mode]}.{r + 1}"
        rounds.append(round_(admin, ports, address, failures, args.limit))
    with open(args.json, "w") as f:
        json.dump({"mode": args.mode, "rounds": rounds, "failures": failures}, f)
    for failure in failures:
        print(f"admin-fleet: {args.mode}: {failure}", file=sys.stderr)
    return 1 if failures else 0


def report(args):
    ok = True
    print("| mode | rounds | block: median / max | unblock: median / max | reset: median / max | steps that failed |")
    print("|---|---|---|---|---|---|")
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
        ok &= not rec["failures"]
        print(f"| redis-{rec['mode']} | {len(rec['rounds'])} | {' | '.join(cells)} | {len(rec['failures'])} |")
    print()
    print("Goal: every step holds on copies 2 and 3, every propagation at most 1 s:",
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
    p.add_argument("--report", action="store_true")
    p.add_argument("--check", action="store_true")
    p.add_argument("files", nargs="*")
    args = p.parse_args()
    sys.exit(report(args) if args.report else drive(args))


if __name__ == "__main__":
    main()
