#!/usr/bin/env python3
"""Load driver for a fleet of examples/axum_redis copies sharing one Redis.

Sends real HTTP/1.1 requests (keep-alive, one connection per client per
copy) to the copies given with --ports. Each client is a distinct loopback
source address (127.0.0.X), which is the key the example limits on (the TCP
peer IP, 10 requests per 60 s). Every request is recorded (scheduled time,
send time, copy, status, latency, error) and every scenario is compared with
a perfect global fixed-window limiter fed the same send times: it admits the
first 10 requests of each aligned Unix minute, floor(t / 60).

Scenarios (run one after another, each with its own client addresses):

  fresh   20 background clients send one request every ~2 s each, round-robin
          over the copies, for 30 s (quick: 15 s) and keep going while a
          brand-new client sends 100 requests round-robin over the copies,
          one every 10 ms. Reported: admitted of the 100 (goal <= 12).
  steady  one client, 50 requests/s round-robin over the copies, 180 s
          (quick: 70 s). Reported: admitted per aligned minute (goal <= 12
          in every minute) and the most admitted in any sliding 60 s.
  moving  one client, 20 requests/s, all to one copy at a time, moving to
          another copy (seeded random) every 5 s, 120 s (quick: 65 s).
          Reported as for steady.

Python 3.11 standard library only. Only 127.0.0.0/8 is ever contacted.
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import math
import os
import random
import socket
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field

QUOTA = 10  # the example's limit: 10 requests per aligned minute per client IP
WINDOW = 60.0  # seconds
GOAL = 12  # at most this many admitted per aligned minute (or of the 100)
REQUEST_TIMEOUT = 5.0  # seconds, per request (connect, send, read)
GRACE = 30.0  # a worker gives up this long after its scenario's last scheduled send
MAX_REQUESTS = 50_000  # hard bound on the requests of one scenario


def say(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


@dataclass
class Planned:
    """One request to send: when, from which client, to which copy."""

    at: float  # scheduled send time, seconds after the scenario's start
    client: str  # source address, 127.0.0.X
    role: str  # "probe" (the measured client) or "background"
    copy: int  # index into the copies (ports)


@dataclass
class Record:
    scenario: str
    role: str
    client: str
    seq: int  # order in the scenario's plan
    copy: int
    port: int
    scheduled: float  # Unix time the request was due
    sent: float  # Unix time (time.time()) just before the request was written
    status: int | None  # HTTP status, None when there was no response
    latency_ms: float | None
    error: str | None = None  # exception or reason, when status is None
    reconnected: bool = False  # a new connection was opened for this request
    retried_after: str | None = None  # a reused connection failed; retried once on a new one


@dataclass
class Scenario:
    name: str
    plan: list[Planned]
    start: float  # Unix time of plan offset 0
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------
# Sending


class Worker(threading.Thread):
    """Sends one client's requests to one copy, in order, on an absolute
    schedule, over one keep-alive connection (reopened after any error)."""

    def __init__(self, host: str, port: int, client: str, items: list[tuple[int, Planned]],
                 scenario: str, start_unix: float, start_mono: float, deadline_mono: float):
        super().__init__(daemon=True)
        self.host, self.port, self.client = host, port, client
        self.items = items
        self.scenario = scenario
        self.start_unix, self.start_mono = start_unix, start_mono
        self.deadline_mono = deadline_mono
        self.records: list[Record] = []
        self.conn: http.client.HTTPConnection | None = None

    def _connect(self) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=REQUEST_TIMEOUT,
                                          source_address=(self.client, 0))
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None

    def run(self) -> None:
        try:
            for seq, p in self.items:
                self._one(seq, p)
        finally:
            self._close()

    def _sleep_until(self, t: float) -> None:
        now = time.monotonic()
        if t > now:
            time.sleep(t - now)

    def _one(self, seq: int, p: Planned) -> None:
        due = self.start_mono + p.at
        rec = Record(self.scenario, p.role, p.client, seq, p.copy, self.port,
                     scheduled=self.start_unix + p.at, sent=math.nan, status=None,
                     latency_ms=None)
        if self.conn is None:
            # Open the connection shortly before the request is due, so that
            # the TCP handshake is not in its timing (and no idle connection
            # is left for the server to time out). Opening a connection sends
            # no request: the limiter does not see the client yet.
            self._sleep_until(due - 0.3)
            try:
                self.conn = self._connect()
                rec.reconnected = True
            except OSError as e:
                self._sleep_until(due)
                rec.sent = time.time()
                rec.error = f"connect: {type(e).__name__}: {e}"
                self.records.append(rec)
                return
        self._sleep_until(due)
        if time.monotonic() > self.deadline_mono:
            rec.sent = time.time()
            rec.error = "not sent: scenario deadline passed"
            self.records.append(rec)
            return
        fresh = rec.reconnected
        try:
            self._exchange(rec)
        except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected) as e:
            if fresh:
                rec.error = f"{type(e).__name__}: {e}"
                self._close()
            else:
                # A keep-alive connection the server had already closed: the
                # usual client behaviour is one retry on a new connection.
                # Counted (retried_after), never hidden.
                rec.retried_after = f"{type(e).__name__}: {e}"
                self._close()
                try:
                    self.conn = self._connect()
                    rec.reconnected = True
                    self._exchange(rec)
                except (OSError, http.client.HTTPException) as e2:
                    rec.error = f"{type(e2).__name__}: {e2}"
                    rec.status = None
                    self._close()
        except (OSError, http.client.HTTPException) as e:
            rec.error = f"{type(e).__name__}: {e}"
            self._close()
        self.records.append(rec)

    def _exchange(self, rec: Record) -> None:
        assert self.conn is not None
        t0 = time.monotonic()
        rec.sent = time.time()
        self.conn.request("GET", "/", headers={"Connection": "keep-alive"})
        resp = self.conn.getresponse()
        resp.read()
        rec.status = resp.status
        rec.latency_ms = (time.monotonic() - t0) * 1000.0
        self._answered(rec, resp)
        if resp.will_close:
            self._close()

    def _answered(self, rec: Record, resp) -> None:
        """What a subclass reads of an answer besides its status (nothing
        here)."""


def run_scenario(sc: Scenario, host: str, ports: list[int]) -> list[Record]:
    if len(sc.plan) > MAX_REQUESTS:
        raise SystemExit(f"{sc.name}: {len(sc.plan)} requests planned, more than {MAX_REQUESTS}")
    groups: dict[tuple[str, int], list[tuple[int, Planned]]] = {}
    for seq, p in enumerate(sc.plan):
        groups.setdefault((p.client, p.copy), []).append((seq, p))
    # Wait (on the wall clock) for the scenario's start, then anchor the
    # monotonic schedule to it.
    lead = sc.start - time.time()
    if lead > 0:
        time.sleep(lead)
    start_mono = time.monotonic() - (time.time() - sc.start)
    last = max(p.at for p in sc.plan)
    deadline = start_mono + last + GRACE
    workers = [Worker(host, ports[copy], client, items, sc.name, sc.start, start_mono, deadline)
               for (client, copy), items in groups.items()]
    for w in workers:
        w.start()
    # Each request is bounded by REQUEST_TIMEOUT (connect and each read) and
    # nothing is sent after the deadline; the join is bounded anyway.
    give_up = deadline + 4 * REQUEST_TIMEOUT + 5
    for w in workers:
        w.join(timeout=max(0.0, give_up - time.monotonic()))
    records = [r for w in workers for r in w.records]
    stuck = [w for w in workers if w.is_alive()]
    if stuck:
        say(f"  warning: {len(stuck)} worker(s) of {sc.name} did not finish in time")
    sent_seqs = {r.seq for r in records}
    for seq, p in enumerate(sc.plan):
        if seq not in sent_seqs:  # only possible for a stuck worker
            records.append(Record(sc.name, p.role, p.client, seq, p.copy, ports[p.copy],
                                  sc.start + p.at, sc.start + p.at, None, None,
                                  "not sent: worker stuck"))
    records.sort(key=lambda r: (r.sent, r.seq))
    return records


# --------------------------------------------------------------------------
# Scenarios


class Addresses:
    """Hands out fresh loopback client addresses 127.0.0.X, X from `first`."""

    def __init__(self, first: int):
        self.next = first

    def take(self) -> str:
        if self.next > 254:
            raise SystemExit("out of client addresses in 127.0.0.2-254 (lower --first-ip)")
        ip = f"127.0.0.{self.next}"
        self.next += 1
        return ip


def aligned_start(duration: float, align: bool, earliest: float) -> tuple[float, str]:
    """When to start a scenario of `duration` seconds so that it covers
    floor(duration / 60) full aligned minutes: at most (duration mod 60)
    seconds before a minute boundary, and as soon as possible."""
    if not align:
        return earliest, "not aligned (ALIGN=0)"
    slack = duration % WINDOW
    boundary = math.ceil(earliest / WINDOW) * WINDOW
    # 10 ms late, so that no request is due exactly on a minute boundary
    # (where the driver's and the copy's clocks could put it in different
    # minutes); the last one is still due before the end of the last minute.
    start = max(earliest, boundary - slack + 0.010)
    full = int(duration // WINDOW)
    return start, (f"starts at minute boundary {boundary:.0f} {start - boundary:+.2f} s, "
                   f"so it covers {full} full minute{'s' if full != 1 else ''}")


def plan_fresh(addr: Addresses, nports: int, quick: bool, rng: random.Random,
               align: bool) -> Scenario:
    warm = 15.0 if quick else 30.0
    background = [addr.take() for _ in range(20)]
    probe = addr.take()
    now = time.time() + 0.5
    start = now
    notes = []
    # The burst must not straddle a minute boundary, or a perfect limiter
    # would admit 20 (10 in each minute): if it would, push the whole
    # scenario later so that the burst starts 1 s after a boundary.
    burst_at = start + warm
    if align and math.floor(burst_at / WINDOW) != math.floor((burst_at + 1.5) / WINDOW):
        burst_at = math.ceil(burst_at / WINDOW) * WINDOW + 1.0
        start = burst_at - warm
        notes.append("shifted so that the burst does not straddle a minute boundary")
    burst_len = 100 * 0.010
    plan: list[Planned] = []
    for i, ip in enumerate(background):
        phase = i * 2.0 / len(background)  # spread the 20 clients over the 2 s period
        k = 0
        while True:
            at = phase + 2.0 * k + rng.uniform(-0.2, 0.2)
            if at > warm + burst_len + 1.0:
                break  # background keeps going through the burst, then stops
            plan.append(Planned(max(at, 0.0), ip, "background", (i + k) % nports))
            k += 1
    for j in range(100):
        plan.append(Planned(warm + j * 0.010, probe, "probe", j % nports))
    plan.sort(key=lambda p: p.at)
    notes.append(f"20 background clients ({background[0]}-{background[-1]}) every ~2 s for "
                 f"{warm:.0f} s and through the burst; probe client {probe}: 100 requests, "
                 f"10 ms apart, round-robin over {nports} copies, starting {warm:.0f} s in")
    return Scenario("fresh", plan, start, notes)


def plan_steady(addr: Addresses, nports: int, quick: bool, rng: random.Random,
                align: bool) -> Scenario:
    duration = 70.0 if quick else 180.0
    rate = 50.0
    ip = addr.take()
    start, how = aligned_start(duration, align, time.time() + 0.5)
    n = int(duration * rate)
    plan = [Planned(i / rate, ip, "probe", i % nports) for i in range(n)]
    return Scenario("steady", plan, start,
                    [f"client {ip}: {rate:.0f} req/s round-robin over {nports} copies for "
                     f"{duration:.0f} s; {how}"])


def plan_moving(addr: Addresses, nports: int, quick: bool, rng: random.Random,
                align: bool) -> Scenario:
    duration = 65.0 if quick else 120.0
    rate, dwell = 20.0, 5.0
    ip = addr.take()
    start, how = aligned_start(duration, align, time.time() + 0.5)
    n = int(duration * rate)
    copies = []
    current = rng.randrange(nports)
    for _ in range(int(math.ceil(duration / dwell))):
        copies.append(current)
        if nports > 1:
            current = rng.choice([c for c in range(nports) if c != current])
    plan = [Planned(i / rate, ip, "probe", copies[int((i / rate) // dwell)]) for i in range(n)]
    return Scenario("moving", plan, start,
                    [f"client {ip}: {rate:.0f} req/s to one copy at a time, moving every "
                     f"{dwell:.0f} s (copy sequence {''.join(str(c) for c in copies)}) for "
                     f"{duration:.0f} s; {how}"])


PLANNERS = {"fresh": plan_fresh, "steady": plan_steady, "moving": plan_moving}


# --------------------------------------------------------------------------
# Analysis


def minute(t: float) -> int:
    return math.floor(t / WINDOW)


def ideal_admits(records: list[Record]) -> set[int]:
    """Seqs a perfect global fixed-window limiter would admit: per client,
    the first QUOTA requests (by send time) of each aligned minute."""
    seen: dict[tuple[str, int], int] = {}
    admitted = set()
    for r in sorted(records, key=lambda r: r.sent):
        if (r.error or "").startswith("not sent"):
            continue
        k = (r.client, minute(r.sent))
        if seen.get(k, 0) < QUOTA:
            seen[k] = seen.get(k, 0) + 1
            admitted.add(r.seq)
    return admitted


def max_sliding(times: list[float]) -> tuple[int, float | None]:
    """Most of `times` in any half-open window [t, t + 60 s), and its start."""
    times = sorted(times)
    best, at, j = 0, None, 0
    for i, t in enumerate(times):
        while j < len(times) and times[j] < t + WINDOW:
            j += 1
        if j - i > best:
            best, at = j - i, t
    return best, at


def summarize(sc: Scenario, records: list[Record], nports: int) -> dict:
    probe = [r for r in records if r.role == "probe"]
    ok = [r for r in probe if r.status == 200]
    denied = [r for r in probe if r.status == 429]
    other = [r for r in probe if r.status not in (200, 429)]
    ideal = ideal_admits(probe)
    false_denials = sum(1 for r in probe if r.seq in ideal and r.status == 429)
    false_admits = sum(1 for r in probe if r.seq not in ideal and r.status == 200)
    ideal_lost_to_errors = sum(1 for r in probe if r.seq in ideal and r.status not in (200, 429))
    sent = [r.sent for r in probe]
    span = (min(sent), max(sent)) if sent else (sc.start, sc.start)
    minutes = []
    for m in range(minute(span[0]), minute(span[1]) + 1):
        in_m = [r for r in probe if minute(r.sent) == m]
        covered = min(span[1], (m + 1) * WINDOW) - max(span[0], m * WINDOW)
        partial = span[0] > m * WINDOW + 0.5 or span[1] < (m + 1) * WINDOW - 0.5
        minutes.append({
            "minute": m,
            "start_utc": time.strftime("%H:%M:%S", time.gmtime(m * WINDOW)),
            "requests": len(in_m),
            "admitted": sum(1 for r in in_m if r.status == 200),
            "ideal": sum(1 for r in in_m if r.seq in ideal),
            "other": sum(1 for r in in_m if r.status not in (200, 429)),
            "partial": partial,
            "covered_s": round(covered, 1),
        })
    slide, slide_at = max_sliding([r.sent for r in ok])
    per_copy = [sum(1 for r in ok if r.copy == c) for c in range(nports)]
    lat = sorted(r.latency_ms for r in probe if r.latency_ms is not None)
    late = sorted(r.sent - r.scheduled for r in probe if r.error is None)
    errors: dict[str, int] = {}
    for r in other:
        key = str(r.status) if r.status is not None else (r.error or "?").split(":")[0]
        errors[key] = errors.get(key, 0) + 1
    s = {
        "scenario": sc.name,
        "notes": sc.notes,
        "requests": len(probe),
        "admitted": len(ok),
        "denied": len(denied),
        "other": len(other),
        "other_kinds": errors,
        "reconnects": sum(1 for r in probe if r.reconnected),
        "retries": sum(1 for r in probe if r.retried_after),
        "ideal_admitted": len(ideal),
        "false_denials": false_denials,
        "false_admissions": false_admits,
        "ideal_lost_to_errors": ideal_lost_to_errors,
        "minutes": minutes,
        "max_sliding_60s": slide,
        "max_sliding_60s_from": slide_at,
        "admitted_per_copy": per_copy,
        "latency_ms_p50": lat[len(lat) // 2] if lat else None,
        "latency_ms_p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else None,
        "latency_ms_max": lat[-1] if lat else None,
        "send_lateness_ms_max": late[-1] * 1000.0 if late else None,
    }
    if sc.name == "fresh":
        s["goal_met"] = len(ok) <= GOAL
    else:
        s["goal_met"] = all(m["admitted"] <= GOAL for m in minutes)
    bg = [r for r in records if r.role == "background"]
    if bg:
        per: dict[tuple[str, int], int] = {}
        for r in bg:
            if r.status == 200:
                k = (r.client, minute(r.sent))
                per[k] = per.get(k, 0) + 1
        bg_ideal = ideal_admits(bg)
        bg_other = [r for r in bg if r.status not in (200, 429)]
        s["background"] = {
            "requests": len(bg),
            "admitted": sum(1 for r in bg if r.status == 200),
            "ideal_admitted": len(bg_ideal),
            "false_denials": sum(1 for r in bg if r.seq in bg_ideal and r.status == 429),
            "max_admitted_per_client_minute": max(per.values()) if per else 0,
            "other": len(bg_other),
        }
    return s


def pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100.0 * a / b:.1f}%)" if b else f"{a}/0"


def print_details(s: dict) -> None:
    print(f"## {s['scenario']}")
    for n in s["notes"]:
        print(f"- {n}")
    print(f"- requests {s['requests']}: {s['admitted']} x 200, {s['denied']} x 429, "
          f"{s['other']} other" + (f" {s['other_kinds']}" if s["other"] else ""))
    print(f"- admitted per copy: {s['admitted_per_copy']}; connections opened: {s['reconnects']}"
          f"; retried once on a new connection after a stale keep-alive: {s['retries']}")
    print(f"- ideal limiter admits {s['ideal_admitted']}; false denials "
          f"{pct(s['false_denials'], s['ideal_admitted'])}; admitted beyond the ideal "
          f"{s['false_admissions']}")
    if s["ideal_lost_to_errors"]:
        print(f"- {s['ideal_lost_to_errors']} requests the ideal admits got no 200/429 (errors)")
    print(f"- latency ms p50 {fmt(s['latency_ms_p50'])}, p99 {fmt(s['latency_ms_p99'])}, "
          f"max {fmt(s['latency_ms_max'])}; worst send lateness "
          f"{fmt(s['send_lateness_ms_max'])} ms")
    if s["scenario"] != "fresh":
        for m in s["minutes"]:
            flag = f" (partial, {m['covered_s']} s)" if m["partial"] else ""
            print(f"  - minute {m['minute']} ({m['start_utc']} UTC){flag}: {m['admitted']} "
                  f"admitted of {m['requests']} (ideal {m['ideal']})"
                  + (f", {m['other']} other" if m["other"] else ""))
        print(f"- most admitted in a sliding 60 s: {s['max_sliding_60s']}")
    if "background" in s:
        b = s["background"]
        print(f"- background: {b['requests']} requests, {b['admitted']} admitted (ideal "
              f"{b['ideal_admitted']}, false denials {pct(b['false_denials'], b['ideal_admitted'])}),"
              f" most admitted for one client in one minute {b['max_admitted_per_client_minute']},"
              f" {b['other']} other")
    print()


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def table(summaries: list[dict]) -> str:
    rows = ["| scenario | requests | admitted per aligned minute (or of 100) | max in sliding 60 s "
            "| false denials | other (not 200/429) | goal |",
            "|---|---:|---|---:|---:|---:|---|"]
    for s in summaries:
        if s["scenario"] == "fresh":
            adm = f"{s['admitted']} of {s['requests']}"
            goal = f"<= {GOAL} of 100 (ideal {QUOTA})"
        else:
            adm = ", ".join(f"{m['admitted']}{'*' if m['partial'] else ''}" for m in s["minutes"])
            goal = f"<= {GOAL} every minute (ideal {QUOTA})"
        goal += ": met" if s["goal_met"] else ": NOT met"
        rows.append(f"| {s['scenario']} | {s['requests']} | {adm} | {s['max_sliding_60s']} | "
                    f"{pct(s['false_denials'], s['ideal_admitted'])} | {s['other']} | {goal} |")
        if "background" in s:
            b = s["background"]
            rows.append(f"| fresh (20 background clients) | {b['requests']} | at most "
                        f"{b['max_admitted_per_client_minute']} per client-minute | - | "
                        f"{pct(b['false_denials'], b['ideal_admitted'])} | {b['other']} | - |")
    rows.append("")
    rows.append("`*` = partial minute (the scenario covered only part of it).")
    return "\n".join(rows)


# --------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1", help="where the copies listen (loopback)")
    ap.add_argument("--ports", required=True, help="comma list of the copies' ports")
    ap.add_argument("--scenarios", default="fresh,steady,moving")
    ap.add_argument("--quick", action="store_true", help="shorter durations")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first-ip", type=int, default=2, help="first X of the 127.0.0.X clients")
    ap.add_argument("--no-align", action="store_true",
                    help="start steady/moving at once instead of around a minute boundary")
    ap.add_argument("--json", help="where to write the raw records (default: a new temp file)")
    ap.add_argument("--mode", default="?", help="the copies' THROTTLE_MODE, for the report")
    args = ap.parse_args()

    if not ipaddress.ip_address(args.host).is_loopback:
        raise SystemExit("--host must be a loopback address")
    ports = [int(p) for p in args.ports.split(",") if p]
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    for n in names:
        if n not in PLANNERS:
            raise SystemExit(f"unknown scenario {n!r}: use {', '.join(PLANNERS)}")
    addr = Addresses(args.first_ip)

    summaries, all_records = [], []
    for name in names:
        # One generator per scenario: the same seed gives the same plan
        # whichever other scenarios run.
        rng = random.Random(f"{args.seed}/{name}")
        sc = PLANNERS[name](addr, len(ports), args.quick, rng, not args.no_align)
        wait = sc.start - time.time()
        length = max(p.at for p in sc.plan)
        say(f"{name}: {len(sc.plan)} requests over {length:.0f} s"
            + (f", starting in {wait:.0f} s" if wait > 1 else "") + f" ({'; '.join(sc.notes)})")
        records = run_scenario(sc, args.host, ports)
        s = summarize(sc, records, len(ports))
        say(f"{name}: done: {s['admitted']} of {s['requests']} admitted, {s['other']} other")
        summaries.append(s)
        all_records.extend(records)

    if args.json:
        path = args.json
    else:
        fd, path = tempfile.mkstemp(prefix="fleet-records-", suffix=".json")
        os.close(fd)
    with open(path, "w") as f:
        json.dump({
            "mode": args.mode,
            "ports": ports,
            "quick": args.quick,
            "seed": args.seed,
            "quota": QUOTA, "window_s": WINDOW, "goal": GOAL,
            "summaries": summaries,
            "records": [asdict(r) for r in all_records],
        }, f)

    print(f"# fleet load: {len(ports)} copies, THROTTLE_MODE={args.mode}, "
          f"{'quick' if args.quick else 'full'} run, seed {args.seed}")
    print()
    for s in summaries:
        print_details(s)
    print(table(summaries))
    print()
    total_other = sum(s["other"] + s.get("background", {}).get("other", 0) for s in summaries)
    if total_other:
        print(f"WARNING: {total_other} requests got no 200/429 answer (see 'other' above)")
    print(f"raw per-request records: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
