#!/usr/bin/env python3
"""Precision of a fleet of examples/gateway copies, measured over real HTTP.

Three subcommands, run by benches/gateway-fleet/run.sh:

  load        54 clients, each its own loopback source address (127.1.c.n),
              in five traffic classes, spread over the copies by each
              client's own Zipf order; every request recorded (send time,
              copy, status, latency) and written to a JSON file.
  failclosed  against copies whose rule fails closed: a few clients warm the
              fleet up, then the redis-server is sent SIGKILL or SIGSTOP
              while a NEW client (new source address) sends one request every
              20 ms; written to a JSON file.
  report      reads those files, feeds every client's requests (on their
              send times) to a perfect limiter of the same algorithm and
              quota, and prints the markdown report; with --check, exits 1
              when a goal is not met.

The sending machinery (one thread and one keep-alive connection per client
and copy, an absolute schedule, one retry on a stale keep-alive connection)
and the record format are benches/fleet/drive.py's, imported from there.

Python 3.11 standard library only. Only 127.0.0.0/8 is ever contacted.
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import json
import math
import os
import random
import signal
import statistics
import sys
import threading
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

_FLEET = Path(__file__).resolve().parent.parent / "fleet" / "drive.py"
_spec = importlib.util.spec_from_file_location("fleet_drive", _FLEET)
assert _spec is not None and _spec.loader is not None
fleet = importlib.util.module_from_spec(_spec)
sys.modules["fleet_drive"] = fleet  # dataclasses look their module up by name
_spec.loader.exec_module(fleet)

Planned, Record, Scenario = fleet.Planned, fleet.Record, fleet.Scenario
say = fleet.say

WINDOW = 60.0  # the rule's period, seconds (aligned Unix minutes)

# The classes, in report order. `mult` is the load as a multiple of the
# quota (requests per period, on average).
CLASSES = [
    # name, clients, multiple of the quota, address block 127.1.<block>.n
    ("under", 16, 0.6, 1),
    ("over-2x", 16, 2.0, 2),
    ("over-10x", 8, 10.0, 3),
    ("sticky-3x", 8, 3.0, 4),
    ("bursty", 6, None, 5),
]
TITLES = {
    "under": "under quota (0.6x, Poisson)",
    "over-2x": "2x (Poisson)",
    "over-10x": "10x (Poisson)",
    "sticky-3x": "sticky, moving (3x)",
    "bursty": "bursty (150 at once)",
}
BUSY_LATE_MS = 20.0  # a driver this late at p99 was starved of CPU: says so
BURST = 150  # requests of one burst
BURST_EVERY = 30.0  # seconds between a bursty client's bursts
STICKY_DWELL = (3.0, 7.0)  # a sticky client stays on one copy this long (uniform)
ZIPF_S = 1.0  # weight of the copy of rank k: 1 / k^s


# --------------------------------------------------------------------------
# Sending: benches/fleet's worker, also reading the gateway's Server-Timing

# (scenario, seq) -> the gateway's own time for the request, in ms, from the
# `Server-Timing: gateway;dur=<ms>` header of a gateway run with
# --server-timing (absent otherwise).
SERVER_MS: dict[tuple[str, int], float] = {}


class TimedWorker(fleet.Worker):
    """fleet.Worker that also keeps each answer's Server-Timing duration."""

    def _answered(self, rec: Record, resp) -> None:
        timing = resp.getheader("server-timing") or ""
        if "dur=" in timing:
            try:
                SERVER_MS[(rec.scenario, rec.seq)] = float(
                    timing.split("dur=")[1].split(";")[0].split(",")[0])
            except ValueError:
                pass


fleet.Worker = TimedWorker  # run_scenario looks the class up at call time


def dump(records: list[Record]) -> list[dict]:
    out = []
    for r in records:
        d = asdict(r)
        d["server_ms"] = SERVER_MS.get((r.scenario, r.seq))
        out.append(d)
    return out


# --------------------------------------------------------------------------
# Traffic


def zipf_order(rng: random.Random, ncopies: int) -> tuple[list[int], list[float]]:
    """A client's own ranking of the copies and the Zipf weights that go with it."""
    order = list(range(ncopies))
    rng.shuffle(order)
    weights = [1.0 / (k + 1) ** ZIPF_S for k in range(ncopies)]
    return order, weights


def pick(rng: random.Random, order: list[int], weights: list[float],
         exclude: int | None = None) -> int:
    pairs = [(c, w) for c, w in zip(order, weights) if c != exclude]
    if not pairs:
        return order[0]
    return rng.choices([c for c, _ in pairs], weights=[w for _, w in pairs])[0]


def poisson_times(rng: random.Random, rate: float, duration: float) -> list[float]:
    out, t = [], rng.expovariate(rate)
    while t < duration:
        out.append(t)
        t += rng.expovariate(rate)
    return out


def plan_load(ncopies: int, duration: float, quota: int, seed: int,
              period: float) -> tuple[list[Planned], dict[str, dict]]:
    """Every request of the load run, and a description of each client."""
    plan: list[Planned] = []
    clients: dict[str, dict] = {}
    for cls, count, mult, block in CLASSES:
        for i in range(count):
            ip = f"127.1.{block}.{i + 1}"
            rng = random.Random(f"{seed}/{cls}/{i}")
            order, weights = zipf_order(rng, ncopies)
            info = {"class": cls, "zipf_order": order}
            if cls == "bursty":
                # Six clients, their bursts 5 s apart, each every 30 s.
                phase = 1.0 + i * (BURST_EVERY / count) + rng.uniform(0.0, 0.5)
                bursts = []
                t = phase
                while t < duration:
                    bursts.append(round(t, 3))
                    for _ in range(BURST):
                        plan.append(Planned(t, ip, cls, pick(rng, order, weights)))
                    t += BURST_EVERY
                info["bursts_at_s"] = bursts
            elif cls == "sticky-3x":
                rate = mult * quota / period
                times = poisson_times(rng, rate, duration)
                moves, t, current = [], 0.0, pick(rng, order, weights)
                while t < duration:
                    moves.append((round(t, 3), current))
                    t += rng.uniform(*STICKY_DWELL)
                    current = pick(rng, order, weights, exclude=current)
                j = 0
                for at in times:
                    while j + 1 < len(moves) and moves[j + 1][0] <= at:
                        j += 1
                    plan.append(Planned(at, ip, cls, moves[j][1]))
                info["moves"] = moves
            else:
                rate = mult * quota / period
                for at in poisson_times(rng, rate, duration):
                    plan.append(Planned(at, ip, cls, pick(rng, order, weights)))
            clients[ip] = info
    plan.sort(key=lambda p: p.at)
    return plan, clients


def cmd_load(args: argparse.Namespace) -> int:
    ports = parse_ports(args.ports)
    duration = 65.0 if args.quick else 150.0
    if args.duration:
        duration = args.duration
    plan, clients = plan_load(len(ports), duration, args.quota, args.seed, args.period)
    if args.align:
        start, how = fleet.aligned_start(duration, True, time.time() + 1.0)
    else:
        start, how = time.time() + 1.0, "not aligned to a minute boundary"
    sc = Scenario("load", plan, start, [how])
    wait = start - time.time()
    say(f"load: {len(plan)} requests from {len(clients)} clients over {duration:.0f} s on "
        f"{len(ports)} copies" + (f", starting in {wait:.0f} s" if wait > 2 else "") + f" ({how})")
    t0 = time.time()
    load_before = os.getloadavg()
    records = fleet.run_scenario(sc, args.host, ports)
    load_after = os.getloadavg()
    say(f"load: done in {time.time() - t0:.0f} s")
    metrics = scrape_metrics(args.metrics_ports)
    write_json(args.json, {
        "kind": "load", "mode": args.mode, "algorithm": args.algorithm, "failure": args.failure,
        "quota": args.quota, "period_s": args.period, "ports": ports, "quick": args.quick,
        "duration_s": duration, "seed": args.seed, "start": start, "notes": sc.notes,
        "clients": clients, "metrics": metrics, "cpus": os.cpu_count(),
        "loadavg_before": load_before, "loadavg_after": load_after,
        "records": dump(records),
    })
    return 0


# --------------------------------------------------------------------------
# Fail closed


def cmd_failclosed(args: argparse.Namespace) -> int:
    ports = parse_ports(args.ports)
    sig = {"KILL": signal.SIGKILL, "STOP": signal.SIGSTOP}[args.signal]
    if not 0 < args.after <= 30:
        raise SystemExit("--after: 0 to 30 s")
    warm, before, after, every = 3.0, 0.5, args.after, 0.020  # at most 1,525 new clients
    kill_at = warm  # seconds after the start
    block = {"KILL": 2, "STOP": 3}[args.signal]
    plan: list[Planned] = []
    rng = random.Random(f"{args.seed}/failclosed/{args.signal}")
    # Warm-up: 12 clients, 4 requests a second each, over all copies: every
    # copy has talked to Redis and knows the fleet before the signal.
    for i in range(12):
        ip = f"127.{block}.0.{i + 1}"
        for k in range(int(warm * 4)):
            plan.append(Planned(k * 0.25 + i * 0.02, ip, "warm", (i + k) % len(ports)))
    # New clients: one request each, every 20 ms, from `before` seconds
    # before the signal to `after` seconds after it, round-robin over copies.
    n = int(round((before + after) / every))
    for k in range(n):
        ip = f"127.{block}.{1 + k // 250}.{1 + k % 250}"
        plan.append(Planned(kill_at - before + k * every, ip, "new", k % len(ports)))
    plan.sort(key=lambda p: p.at)
    # The signal at a set point of a span (spans are aligned to Unix time):
    # how soon a copy notices depends on when its next flush comes.
    span = args.period / args.spans
    earliest = time.time() + 1.0 + kill_at
    signal_at = math.floor(earliest / span) * span + args.signal_phase
    while signal_at < earliest:
        signal_at += span
    start = signal_at - kill_at
    sc = Scenario(f"failclosed-{args.signal}", plan, start, [])
    sent_signal: dict[str, float] = {}

    def send_signal() -> None:
        delay = start + kill_at - time.time()
        if delay > 0:
            time.sleep(delay)
        sent_signal["at"] = time.time()
        os.kill(args.redis_pid, sig)

    say(f"fail closed, SIG{args.signal}: {n} new clients 20 ms apart, the signal "
        f"{before:.1f} s after the first, {args.signal_phase:.1f} s into a {span:.0f} s span")
    killer = threading.Thread(target=send_signal, daemon=True)
    killer.start()
    records = fleet.run_scenario(sc, args.host, ports)
    killer.join(timeout=5)
    metrics = scrape_metrics(args.metrics_ports)
    write_json(args.json, {
        "kind": "failclosed", "signal": args.signal, "mode": args.mode,
        "algorithm": args.algorithm, "quota": args.quota, "period_s": args.period,
        "ports": ports, "signal_at": sent_signal.get("at"), "every_s": every,
        "span_s": span, "signal_phase_s": (sent_signal.get("at", 0.0) % span),
        "metrics": metrics, "records": dump(records),
    })
    return 0


# --------------------------------------------------------------------------
# Helpers


def parse_ports(s: str) -> list[int]:
    return [int(p) for p in s.split(",") if p]


def write_json(path: str, data: dict) -> None:
    with open(path, "w") as f:
        json.dump(data, f)
    say(f"records: {path}")


def scrape_metrics(ports_csv: str | None) -> list[dict[str, float]]:
    """Each copy's throttle_redis_* counters, summed over their labels."""
    out = []
    for port in parse_ports(ports_csv or ""):
        sums: dict[str, float] = {}
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError as e:
            out.append({"error": str(e)})  # type: ignore[dict-item]
            continue
        for line in text.splitlines():
            if not line.startswith("throttle_") or line.startswith("#"):
                continue
            name_labels, _, value = line.rpartition(" ")
            name = name_labels.split("{")[0]
            if "outcome=" in name_labels:
                outcome = name_labels.split('outcome="')[1].split('"')[0]
                name = f"{name}:{outcome}"
            try:
                sums[name] = sums.get(name, 0.0) + float(value)
            except ValueError:
                pass
        out.append(sums)
    return out


# --------------------------------------------------------------------------
# The perfect limiters: one global state per client, fed the send times.


class PerfectFixed:
    """Admits the first `limit` requests of each aligned period."""

    def __init__(self, limit: int, period: float):
        self.limit, self.period = limit, period
        self.count: dict[tuple[str, int], int] = {}

    def admit(self, client: str, t: float) -> bool:
        k = (client, math.floor(t / self.period))
        if self.count.get(k, 0) < self.limit:
            self.count[k] = self.count.get(k, 0) + 1
            return True
        return False


class PerfectSlidingCounter:
    """The sliding window counter of throttle-fleet-core, on microseconds:
    admit if floor(prev * (P - elapsed) / P) + cur + 1 <= limit."""

    def __init__(self, limit: int, period: float):
        self.limit, self.p = limit, int(period * 1e6)
        self.st: dict[str, list[int]] = {}  # window, cur, prev

    def admit(self, client: str, t: float) -> bool:
        now = int(t * 1e6)
        w = now // self.p
        st = self.st.setdefault(client, [w, 0, 0])
        if w == st[0] + 1:
            st[:] = [w, 0, st[1]]
        elif w > st[0] + 1:
            st[:] = [w, 0, 0]
        elapsed = now - w * self.p
        weighted = math.floor(st[2] * (self.p - elapsed) / self.p) if st[2] else 0
        if weighted + st[1] + 1 <= self.limit:
            st[1] += 1
            return True
        return False


class PerfectTokenBucket:
    """GCRA with burst = limit: emission interval T = P / limit; admit when
    the new theoretical arrival time is at most burst * T ahead."""

    def __init__(self, limit: int, period: float):
        self.t, self.tau = period / limit, period
        self.tat: dict[str, float] = {}

    def admit(self, client: str, t: float) -> bool:
        tat = max(self.tat.get(client, t), t) + self.t
        if tat - t <= self.tau + 1e-9:
            self.tat[client] = tat
            return True
        return False


PERFECT = {
    "fixed_window": PerfectFixed,
    "sliding_window_counter": PerfectSlidingCounter,
    "token_bucket": PerfectTokenBucket,
}


def not_sent(r: dict) -> bool:
    return (r.get("error") or "").startswith("not sent")


def perfect_admits(records: list[dict], algorithm: str, limit: int, period: float) -> set[int]:
    lim = PERFECT[algorithm](limit, period)
    return {r["seq"] for r in sorted(records, key=lambda r: r["sent"])
            if not not_sent(r) and lim.admit(r["client"], r["sent"])}


# --------------------------------------------------------------------------
# Report


def q(values: list[float], p: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * p))]


def fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def share(a: int, b: int, digits: int = 2) -> str:
    return f"{a}/{b} ({100.0 * a / b:.{digits}f}%)" if b else f"{a}/0"


def is_error(r: dict) -> bool:
    """A 5xx, any other answer that is neither 200 nor 429, or no answer."""
    return r["status"] not in (200, 429)


def analyse_load(data: dict, wait_ms: float | None) -> dict:
    quota, period = data["quota"], data["period_s"]
    recs = data["records"]
    ideal = perfect_admits(recs, data["algorithm"], quota, period)
    # "Waited": the gateway's own time (Server-Timing) above its copy's
    # median (all classes) by more than wait_ms; the client's latency when
    # the gateway gave no Server-Timing.
    timed = any(r.get("server_ms") is not None for r in recs)
    basis = "server_ms" if timed else "latency_ms"
    if wait_ms is None:
        wait_ms = 0.2 if timed else 2.0
    med: dict[int, float] = {}
    for c in {r["copy"] for r in recs}:
        v = [r[basis] for r in recs if r["copy"] == c and r.get(basis) is not None]
        med[c] = statistics.median(v) if v else 0.0
    # Per client and aligned minute: fleet admitted and perfect admitted.
    fleet_min: dict[tuple[str, int], int] = {}
    ideal_min: dict[tuple[str, int], int] = {}
    for r in recs:
        k = (r["client"], math.floor(r["sent"] / period))
        if r["status"] == 200:
            fleet_min[k] = fleet_min.get(k, 0) + 1
        if r["seq"] in ideal:
            ideal_min[k] = ideal_min.get(k, 0) + 1
    out = {}
    for cls, count, mult, _ in CLASSES:
        rs = [r for r in recs if r["role"] == cls]
        ok = [r for r in rs if r["status"] == 200]
        errs = [r for r in rs if is_error(r)]
        kinds: dict[str, int] = {}
        for r in errs:
            key = str(r["status"]) if r["status"] is not None else (r["error"] or "?").split(":")[0]
            kinds[key] = kinds.get(key, 0) + 1
        perfect = [r for r in rs if r["seq"] in ideal]
        false_denied = sum(1 for r in perfect if r["status"] == 429)
        beyond = sum(1 for r in ok if r["seq"] not in ideal)
        keys = {k for k in fleet_min if data["clients"].get(k[0], {}).get("class") == cls}
        worst, worst_key, worst_ratio = 0, None, 0.0
        for k in keys:
            bound = max(quota, ideal_min.get(k, 0))
            if fleet_min[k] / bound > worst_ratio or (fleet_min[k] / bound == worst_ratio
                                                       and fleet_min[k] > worst):
                worst, worst_key, worst_ratio = fleet_min[k], k, fleet_min[k] / bound
        lat = [r["latency_ms"] for r in rs if r["latency_ms"] is not None]
        gw = [r["server_ms"] for r in rs if r.get("server_ms") is not None]
        measured = [r for r in rs if r.get(basis) is not None]
        waited = [r for r in measured if r[basis] > med[r["copy"]] + wait_ms]
        wl = [r[basis] for r in waited]
        wc = [r["latency_ms"] for r in waited]
        out[cls] = {
            "clients": count, "mult": mult,
            "requests": len(rs), "admitted": len(ok),
            "denied": sum(1 for r in rs if r["status"] == 429),
            "perfect_admitted": len(perfect), "false_denied": false_denied,
            "false_denied_share": false_denied / len(perfect) if perfect else 0.0,
            "ratio": len(ok) / len(perfect) if perfect else None,
            "beyond_perfect": beyond,
            "worst_minute": worst,
            "worst_minute_bound": max(quota, ideal_min.get(worst_key, 0)) if worst_key else quota,
            "worst_minute_ratio": worst_ratio,
            "worst_minute_at": (time.strftime("%H:%M", time.gmtime(worst_key[1] * period))
                                if worst_key else None),
            "errors": len(errs), "error_kinds": kinds,
            "retries": sum(1 for r in rs if r["retried_after"]),
            "lat_p50": q(lat, 0.50), "lat_p99": q(lat, 0.99), "lat_max": max(lat) if lat else None,
            "gw_p50": q(gw, 0.50), "gw_p99": q(gw, 0.99), "gw_max": max(gw) if gw else None,
            "waited": len(waited), "measured": len(measured),
            "waited_share": len(waited) / len(measured) if measured else 0.0,
            "wait_p50": q(wl, 0.50), "wait_p99": q(wl, 0.99),
            "wait_client_p50": q(wc, 0.50), "wait_client_p99": q(wc, 0.99),
        }
    # Lateness of the classes that never queue behind their own requests (a
    # burst's requests go out one after another on each connection).
    late = [(r["sent"] - r["scheduled"]) * 1000.0 for r in recs
            if r["error"] is None and r["role"] != "bursty"]
    return {"classes": out, "copy_median_ms": med, "requests": len(recs), "timed": timed,
            "wait_ms": wait_ms,
            "late_p50": q(late, 0.5), "late_p99": q(late, 0.99),
            "late_max": max(late) if late else None,
            "redis_calls": sum(m.get("throttle_redis_calls_total", 0.0)
                               for m in data.get("metrics", [])),
            "flushes": sum(m.get("throttle_redis_flushes_total", 0.0)
                           for m in data.get("metrics", []))}


def analyse_failclosed(data: dict) -> dict:
    t_sig = data["signal_at"]
    new = sorted((r for r in data["records"] if r["role"] == "new"), key=lambda r: r["sent"])
    before = [r for r in new if r["sent"] < t_sig]
    after = [r for r in new if r["sent"] >= t_sig]
    refused = [r for r in after if r["status"] != 200]
    first = refused[0] if refused else None
    admitted_after = [r for r in after if r["status"] == 200]
    admitted_before_first = [r for r in admitted_after if first is None or r["sent"] < first["sent"]]
    statuses: dict[str, int] = {}
    for r in after:
        k = str(r["status"]) if r["status"] is not None else (r["error"] or "?").split(":")[0]
        statuses[k] = statuses.get(k, 0) + 1
    lat_after = [r["latency_ms"] for r in after if r["latency_ms"] is not None]
    per_copy = {}
    for c in sorted({r["copy"] for r in after}):
        mine = [r for r in after if r["copy"] == c]
        no = [r for r in mine if r["status"] != 200]
        yes = [r for r in mine if r["status"] == 200]
        per_copy[c] = {
            "first_refusal_ms": (no[0]["sent"] - t_sig) * 1000.0 if no else None,
            "last_admitted_ms": (yes[-1]["sent"] - t_sig) * 1000.0 if yes else None,
            "admitted": len(yes), "of": len(mine),
        }
    # Refused from then on? The last admitted new client after the signal.
    last_ok = admitted_after[-1] if admitted_after else None
    return {
        "signal": data["signal"],
        "new_before": len(before), "admitted_before": sum(1 for r in before if r["status"] == 200),
        "new_after": len(after), "admitted_after": len(admitted_after),
        "admitted_before_first_refusal": len(admitted_before_first),
        "first_refusal_ms": (first["sent"] - t_sig) * 1000.0 if first else None,
        "first_refusal_answered_ms": ((first["sent"] + (first["latency_ms"] or 0) / 1000.0 - t_sig)
                                      * 1000.0 if first else None),
        "first_refusal_status": (first["status"] if first else None),
        "last_admitted_ms": (last_ok["sent"] - t_sig) * 1000.0 if last_ok else None,
        "statuses_after": statuses,
        "lat_after_p50": q(lat_after, 0.5), "lat_after_max": max(lat_after) if lat_after else None,
        "window_after_ms": ((after[-1]["sent"] - t_sig) * 1000.0 if after else 0.0),
        "per_copy": per_copy,
    }


def load_row_names(quota: int, timed: bool) -> list[tuple[str, str]]:
    if not timed:
        return _rows(quota)[:-4] + [
            ("waited", "waited (latency above the copy's median + W ms)"),
            ("wait", "waited: latency p50 / p99 ms"),
        ]
    return _rows(quota)


def _rows(quota: int) -> list[tuple[str, str]]:
    return [
        ("clients", "clients"),
        ("load", "load (of the quota)"),
        ("requests", "requests"),
        ("perfect", "perfect limiter admits"),
        ("admitted", "fleet admits (200)"),
        ("false", "false denials (perfect admits, fleet 429)"),
        ("ratio", "fleet / perfect admitted"),
        ("beyond", "admitted beyond the perfect limiter"),
        ("worst", f"worst aligned minute, one client (quota {quota})"),
        ("errors", "5xx / errors (no answer)"),
        ("lat", "latency p50 / p99 ms (client)"),
        ("gw", "gateway time p50 / p99 ms (Server-Timing)"),
        ("waited", "waited (gateway time above the copy's median + W ms)"),
        ("wait", "waited: gateway time p50 / p99 ms"),
        ("waitc", "waited: latency p50 / p99 ms (client)"),
    ]


def cell(c: dict, row: str, cls: str, quota: int) -> str:
    if row == "clients":
        return str(c["clients"])
    if row == "load":
        return f"{c['mult']}x" if c["mult"] else f"{BURST} at once every {BURST_EVERY:.0f} s"
    if row == "requests":
        return str(c["requests"])
    if row == "perfect":
        return str(c["perfect_admitted"])
    if row == "admitted":
        return str(c["admitted"])
    if row == "false":
        s = share(c["false_denied"], c["perfect_admitted"])
        return f"**{s}**" if cls == "under" else s
    if row == "ratio":
        s = fmt(c["ratio"], 3)
        return f"**{s}**" if cls != "under" else s
    if row == "beyond":
        return str(c["beyond_perfect"])
    if row == "worst":
        s = f"{c['worst_minute']} ({c['worst_minute_ratio']:.2f}x"
        if c["worst_minute_bound"] != quota:
            s += f" of the perfect {c['worst_minute_bound']}"
        return f"**{s})**"
    if row == "errors":
        return str(c["errors"]) + (f" {c['error_kinds']}" if c["errors"] else "")
    if row == "lat":
        return f"{fmt(c['lat_p50'], 2)} / {fmt(c['lat_p99'], 2)}"
    if row == "gw":
        return f"{fmt(c['gw_p50'], 3)} / {fmt(c['gw_p99'], 3)}"
    if row == "waited":
        return share(c["waited"], c["measured"], 1)
    if row == "wait":
        return f"{fmt(c['wait_p50'], 2)} / {fmt(c['wait_p99'], 2)}"
    if row == "waitc":
        return f"{fmt(c['wait_client_p50'], 2)} / {fmt(c['wait_client_p99'], 2)}"
    raise KeyError(row)



def cmd_report(args: argparse.Namespace) -> int:
    failures: list[str] = []
    for path in args.files:
        with open(path) as f:
            data = json.load(f)
        if data["kind"] == "load":
            failures += report_load(data, args)
        else:
            report_failclosed(data)
    if args.check:
        print()
        if failures:
            print("CHECK FAILED:")
            for f_ in failures:
                print(f"- {f_}")
            return 1
        print(f"check passed: under-quota false denials <= {100 * args.max_under:.2f}%, "
              f"over-quota classes >= {args.min_ratio:.2f} of perfect, no aligned minute above "
              f"{args.max_interval:.2f}x, no 5xx or errors")
    return 0


def report_load(data: dict, args: argparse.Namespace) -> list[str]:
    a = analyse_load(data, args.wait_ms)
    cls_names = [c[0] for c in CLASSES]
    print(f"# gateway fleet: {len(data['ports'])} copies, {data['mode']}, {data['algorithm']}, "
          f"{data['quota']} per {data['period_s']:.0f} s per client address, failure "
          f"{data['failure']}; {'quick ' if data['quick'] else ''}run of "
          f"{data['duration_s']:.0f} s, seed {data['seed']}")
    print()
    for n in data["notes"]:
        print(f"- {n}")
    print(f"- {a['requests']} requests; each copy's median "
          + ("gateway time (Server-Timing" if a["timed"] else "latency (client; no Server-Timing")
          + ", ms): " + ", ".join(f"{a['copy_median_ms'][c]:.3f}"
                                  for c in sorted(a["copy_median_ms"])))
    lb, la = data.get("loadavg_before"), data.get("loadavg_after")
    print(f"- the driver's lateness against the schedule, all but bursty (ms): p50 {fmt(a['late_p50'], 2)}, "
          f"p99 {fmt(a['late_p99'], 1)}, max {fmt(a['late_max'], 1)}"
          + (f"; load average {lb[0]:.1f} before, {la[0]:.1f} after (1 min; "
             f"{data.get('cpus')} CPUs)" if lb and la else ""))
    if (a["late_p99"] or 0.0) > BUSY_LATE_MS:
        print(f"- **WARNING: the machine was busy** (1 request in 100 went out more than "
              f"{BUSY_LATE_MS:.0f} ms late): the latency and \"waited\" figures include the "
              f"driver's and the copies' waits for a CPU; the admission figures do not depend "
              f"on it (the perfect limiter is fed the actual send times)")
    if a["redis_calls"]:
        print(f"- Redis calls (all copies, from /metrics): {a['redis_calls']:.0f}, "
              f"{a['redis_calls'] / max(1, a['requests']):.3f} per request; flushes "
              f"{a['flushes']:.0f}")
    print()
    rows = load_row_names(data["quota"], a["timed"])
    print("| | " + " | ".join(TITLES[c] for c in cls_names) + " |")
    print("|---|" + "---:|" * len(cls_names))
    for key, title in rows:
        title = title.replace("W ms", f"{a['wait_ms']:g} ms")
        print(f"| {title} | " + " | ".join(cell(a["classes"][c], key, c, data["quota"]) for c in cls_names) + " |")
    print()
    worst_at = {c: a["classes"][c]["worst_minute_at"] for c in cls_names}
    print("Worst minutes start at (UTC): "
          + ", ".join(f"{c} {worst_at[c]}" for c in cls_names if worst_at[c]) + ".")
    print()
    fails = []
    u = a["classes"]["under"]
    if u["false_denied_share"] > args.max_under:
        fails.append(f"under-quota false denials {100 * u['false_denied_share']:.2f}% > "
                     f"{100 * args.max_under:.2f}%")
    for c in cls_names[1:]:
        r = a["classes"][c]["ratio"]
        if r is not None and r < args.min_ratio:
            fails.append(f"{c}: fleet / perfect admitted {r:.3f} < {args.min_ratio:.2f}")
    for c in cls_names:
        x = a["classes"][c]
        if x["worst_minute_ratio"] > args.max_interval:
            fails.append(f"{c}: {x['worst_minute']} admitted in one aligned minute "
                         f"({x['worst_minute_ratio']:.2f}x of {x['worst_minute_bound']}) > "
                         f"{args.max_interval:.2f}x")
        if x["errors"]:
            fails.append(f"{c}: {x['errors']} requests got a 5xx or no answer {x['error_kinds']}")
    return fails


def report_failclosed(data: dict) -> None:
    a = analyse_failclosed(data)
    if a["new_after"] == 0:
        print(f"## fail closed, SIG{a['signal']}: no new client after the signal")
        return
    print(f"## fail closed ({data['mode']}, {data['algorithm']}), redis-server sent "
          f"SIG{a['signal']}")
    print()
    print(f"- the signal {data['signal_phase_s']:.2f} s after a span boundary (spans of "
          f"{data['span_s']:.0f} s, aligned to Unix time)")
    print(f"- a new client every {data['every_s'] * 1000:.0f} ms: {a['new_before']} before the "
          f"signal ({a['admitted_before']} admitted), {a['new_after']} in the "
          f"{a['window_after_ms']:.0f} ms after it")
    if a["first_refusal_ms"] is None:
        print(f"- **no new client was refused**: all {a['new_after']} after the signal admitted")
    else:
        print(f"- **first refused new client sent {a['first_refusal_ms']:.0f} ms after the signal** "
              f"(answered {a['first_refusal_answered_ms']:.0f} ms after it, status "
              f"{a['first_refusal_status']}); **{a['admitted_before_first_refusal']} new clients "
              f"admitted before it**, {a['admitted_after']} admitted after the signal in all"
              + (f" (the last {a['last_admitted_ms']:.0f} ms after it)" if a["last_admitted_ms"]
                 is not None else ""))
    print("- per copy (first refusal / last admission after the signal, admitted of its new "
          "clients): " + "; ".join(
              f"{c + 1}: {fmt(p['first_refusal_ms'], 0)} / {fmt(p['last_admitted_ms'], 0)} ms, "
              f"{p['admitted']} of {p['of']}" for c, p in a["per_copy"].items()))
    print(f"- answers after the signal: {a['statuses_after']}; latency p50 "
          f"{fmt(a['lat_after_p50'], 2)} ms, max {fmt(a['lat_after_max'], 2)} ms")
    print()


# --------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--host", default="127.0.0.1", help="where the copies listen (loopback)")
        p.add_argument("--ports", required=True, help="comma list of the copies' ports")
        p.add_argument("--metrics-ports", help="comma list of the copies' metrics ports")
        p.add_argument("--json", required=True, help="where to write the records")
        p.add_argument("--mode", default="?", help="the backend kind, for the report")
        p.add_argument("--algorithm", default="fixed_window", choices=sorted(PERFECT))
        p.add_argument("--quota", type=int, default=50)
        p.add_argument("--period", type=float, default=WINDOW)
        p.add_argument("--seed", type=int, default=1)

    p = sub.add_parser("load", help="the 54-client load run")
    common(p)
    p.add_argument("--quick", action="store_true", help="65 s instead of 150 s")
    p.add_argument("--duration", type=float, help="seconds (overrides --quick)")
    p.add_argument("--align", action="store_true",
                   help="start so that the run covers floor(duration / 60) full minutes")
    p.add_argument("--failure", default="open", help="the rule's failure policy, for the report")
    p.set_defaults(fn=cmd_load)

    p = sub.add_parser("failclosed", help="kill or stop Redis under a stream of new clients")
    common(p)
    p.add_argument("--redis-pid", type=int, required=True)
    p.add_argument("--spans", type=int, default=10, help="the approximate mode's spans per period")
    p.add_argument("--signal-phase", type=float, default=3.0,
                   help="send the signal this many seconds after a span boundary")
    p.add_argument("--signal", choices=["KILL", "STOP"], required=True)
    p.add_argument("--after", type=float, default=8.0,
                   help="seconds of new clients after the signal (a hang is seen at the next "
                        "span end, up to 6 s later, plus the flush timeout)")
    p.set_defaults(fn=cmd_failclosed)

    p = sub.add_parser("report", help="print the report of load/failclosed JSON files")
    p.add_argument("files", nargs="+")
    p.add_argument("--wait-ms", type=float,
                   help="a request slower than its copy's median by more than this waited "
                        "(default 0.2 on the gateway's Server-Timing, 2 on the client's latency)")
    p.add_argument("--check", action="store_true", help="exit 1 when a goal is not met")
    p.add_argument("--max-under", type=float, default=0.005,
                   help="goal: under-quota false denials at most this share")
    p.add_argument("--min-ratio", type=float, default=0.97,
                   help="goal: over-quota classes admit at least this share of the perfect")
    p.add_argument("--max-interval", type=float, default=1.10,
                   help="goal: no client's aligned minute above this multiple of the quota")
    p.set_defaults(fn=lambda a: cmd_report(a))
    args = ap.parse_args()
    if getattr(args, "host", None) and not ipaddress.ip_address(args.host).is_loopback:
        raise SystemExit("--host must be a loopback address")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
