#!/usr/bin/env python3
"""Drives the envoy_rls example as Envoys would, for benches/envoy/run.sh.

    drive.py --addr HOST:PORT rls-sizes   [--sizes 1,4,8,16,32,64] [--calls 50] [--warmup 10]
    drive.py --addr HOST:PORT --pid PID rlqs-flood  [--streams 200] [--buckets 1000] ...
    drive.py --addr HOST:PORT --pid PID rlqs-steady [--streams 10] [--buckets 1000] ...

A client that is not ours: grpcio with the request and response types and
the sync stubs generated from Envoy's protos (envoy-data-plane, the venv
of .ci/python-env), the helpers of the contract's clients in tests/envoy.
The calls are the stubs' own (method path, serializer, deserializer taken
from them), with one change: those types are pure Python and take
milliseconds for a large message (4.5 ms to build and serialize a request
of 64 descriptors, 0.14 s a report of 1,000 buckets), so every request is
serialized before the clock starts and every answer is timed as bytes off
the wire, parsed with the generated types after the clock stopped.

  rls-sizes    ShouldRateLimit with 1..64 descriptors (each a distinct
               user_id, domain "api", the per-user rule), on one channel:
               median and p99 per descriptor count.
  rlqs-flood   N streams on N/--per-channel channels, each sending one
               report of --buckets distinct buckets and waiting for its
               answer; meanwhile another process makes a 1-descriptor
               ShouldRateLimit every 50 ms with a 1 s deadline. Time to
               the last answer, the server's CPU and memory, the calls'
               latency.
  rlqs-steady  N streams each reporting --buckets buckets every reporting
               interval (spread over the interval), for --intervals:
               the server's CPU share and the answers' latency.

Nothing but the address given is contacted; every call has a deadline and
every measurement a cap on its time.
"""

import argparse
import math
import multiprocessing
import os
import sys
import threading
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "envoy"))

from rls_client import descriptor, new_key, request  # noqa: E402

from envoy_data_plane.envoy.service.rate_limit_quota.v3 import (  # noqa: E402
    BucketId,
    RateLimitQuotaResponse,
    RateLimitQuotaServiceSyncStub,
    RateLimitQuotaUsageReports,
    RateLimitQuotaUsageReportsBucketQuotaUsage,
)
from envoy_data_plane.envoy.service.ratelimit.v3 import (  # noqa: E402
    RateLimitResponse,
    RateLimitResponseCode,
    RateLimitServiceSyncStub,
)

import betterproto2  # noqa: E402
import datetime  # noqa: E402

DOMAIN = "api"
CALL_TIMEOUT = 5.0  # seconds, an rls-sizes call
# The flood's buckets {"name": "flood", "stream": s, "n": i} match the bench
# configuration's rule descriptor = ["name=flood", "stream", "n"].
FLOOD_NAME = "flood"


def say(*parts):
    print(*parts, flush=True)


class Failed(Exception):
    pass


# --- the stubs' calls, with serialization moved out of the clock ----------------


class _Recorder:
    """Stands for a channel: records what a generated stub asks of it."""

    def __init__(self):
        self.calls = {}

    def _record(self, kind):
        def make(method, request_serializer=None, response_deserializer=None, **_):
            self.calls[kind] = (method, request_serializer, response_deserializer)
            return lambda *a, **k: iter(())

        return make

    def __getattr__(self, kind):
        if kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
            return self._record(kind)
        raise AttributeError(kind)


def stub_method(stub_class, name, *args):
    """(method path, request serializer, response deserializer) of the
    generated sync stub's `name`."""
    recorder = _Recorder()
    result = getattr(stub_class(recorder), name)(*args)
    if hasattr(result, "__next__"):  # the streaming stub is a generator
        list(result)
    ((_, call),) = recorder.calls.items()
    return call


RLS_METHOD, RLS_SERIALIZE, RLS_PARSE = stub_method(RateLimitServiceSyncStub, "should_rate_limit", None)
RLQS_METHOD, RLQS_SERIALIZE, RLQS_PARSE = stub_method(RateLimitQuotaServiceSyncStub, "stream_rate_limit_quotas", iter(()))


def raw(x):
    return x


def channel(addr, name):
    """A channel with its own connection: grpc shares one between channels
    to the same target unless each has its own subchannel pool."""
    ch = grpc.insecure_channel(addr, options=[("grpc.use_local_subchannel_pool", 1), ("bench.channel", name)])
    try:
        grpc.channel_ready_future(ch).result(timeout=10)
    except grpc.FutureTimeoutError:
        raise Failed(f"no gRPC server at {addr} after 10 s") from None
    return ch


def rls_call(ch):
    return ch.unary_unary(RLS_METHOD, request_serializer=raw, response_deserializer=raw)


def rlqs_call(ch):
    return ch.stream_stream(RLQS_METHOD, request_serializer=raw, response_deserializer=raw)


def rls_payload(n):
    """A ShouldRateLimit of n descriptors, each a user_id never seen."""
    return RLS_SERIALIZE(request(*[descriptor(("user_id", new_key("bench"))) for _ in range(n)]))


def rlqs_payload(stream, buckets, interval, allowed):
    usages = [
        RateLimitQuotaUsageReportsBucketQuotaUsage(
            bucket_id=BucketId(bucket={"name": FLOOD_NAME, "stream": str(stream), "n": str(i)}),
            time_elapsed=datetime.timedelta(seconds=interval),
            num_requests_allowed=allowed,
            num_requests_denied=0,
        )
        for i in range(buckets)
    ]
    return RLQS_SERIALIZE(RateLimitQuotaUsageReports(domain=DOMAIN, bucket_quota_usages=usages))


def count_actions(data):
    """How many bucket_action (field 1) a RateLimitQuotaResponse's bytes
    hold: a walk over the top-level fields, not a parse."""
    i, n, end = 0, 0, len(data)

    def varint():
        nonlocal i
        shift = value = 0
        while True:
            b = data[i]
            i += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    while i < end:
        tag = varint()
        wire = tag & 7
        if wire == 2:
            length = varint()  # (not `i += varint()`: that reads i first)
            i += length
        elif wire == 0:
            varint()
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise Failed(f"a response with wire type {wire}")
        if tag >> 3 == 1:
            n += 1
    return n


def check_answer(data, stream, buckets):
    """Parses one answer with the generated types: one action per bucket,
    each a token bucket for a bucket of this stream. Returns what was wrong,
    or None."""
    response = RLQS_PARSE(data)
    if not isinstance(response, RateLimitQuotaResponse):
        return f"not a RateLimitQuotaResponse: {response!r}"
    seen = set()
    for action in response.bucket_action:
        bucket = dict(action.bucket_id.bucket) if action.bucket_id else {}
        if bucket.get("name") != FLOOD_NAME or bucket.get("stream") != str(stream):
            return f"an action for bucket {bucket}, never reported on stream {stream}"
        kind, _ = betterproto2.which_one_of(action, "bucket_action")
        if kind != "quota_assignment_action":
            return f"a {kind} for {bucket}"
        strategy = action.quota_assignment_action.rate_limit_strategy
        skind = betterproto2.which_one_of(strategy, "strategy")[0] if strategy else None
        if skind != "token_bucket":
            return f"a {skind} strategy for {bucket}, want a token bucket"
        seen.add(bucket["n"])
    if len(seen) != buckets:
        return f"actions for {len(seen)} of {buckets} buckets"
    return None


# --- figures -----------------------------------------------------------------


def pct(values, p):
    """Nearest-rank percentile (p99 of 50 values is the largest)."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def ms(seconds):
    return f"{seconds * 1000:.2f}"


class Server:
    """The server process's CPU (utime + stime) and memory, from /proc."""

    def __init__(self, pid):
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")

    def alive(self):
        return os.path.exists(f"/proc/{self.pid}")

    def cpu(self):
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.tick

    def cpu_exact(self):
        """The CPU its live threads ran, in s, to the nanosecond (the sum of
        /proc/PID/task/*/schedstat; /proc/PID/stat counts 10 ms ticks, too
        coarse for a report of 1,000 buckets)."""
        total = 0
        base = f"/proc/{self.pid}/task"
        for task in os.listdir(base):
            try:
                with open(f"{base}/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                pass
        return total / 1e9

    def memory(self):
        """(VmRSS, VmHWM) in MiB."""
        out = {}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":")
                    out[key] = int(value.split()[0]) / 1024
        return out.get("VmRSS", float("nan")), out.get("VmHWM", float("nan"))


# --- rls-sizes ---------------------------------------------------------------


def rls_sizes(args):
    ch = channel(args.addr, "rls-sizes")
    call = rls_call(ch)
    say(f"rls-sizes: ShouldRateLimit on one channel, domain {DOMAIN!r}, n distinct user_id descriptors, "
        f"{args.warmup} warm-up + {args.calls} timed calls each")
    summary = []
    for n in args.sizes:
        payloads = [rls_payload(n) for _ in range(args.warmup + args.calls)]
        times, answers = [], []
        for i, payload in enumerate(payloads):
            start = time.perf_counter()
            try:
                answer = call(payload, timeout=CALL_TIMEOUT)
            except grpc.RpcError as e:
                raise Failed(f"{n} descriptors, call {i + 1}: {e.code().name}: {e.details()}") from None
            took = time.perf_counter() - start
            if i >= args.warmup:
                times.append(took)
                answers.append(answer)
        for answer in answers:
            response = RLS_PARSE(answer)
            if not isinstance(response, RateLimitResponse) or len(response.statuses) != n:
                raise Failed(f"{n} descriptors: an answer with {len(response.statuses)} statuses")
            if response.overall_code != RateLimitResponseCode.OK:
                raise Failed(f"{n} descriptors: {response.overall_code.name} for users never seen")
        summary.append((n, pct(times, 50), pct(times, 99)))
        say(f"  {n:3d} descriptors: median {ms(pct(times, 50))} ms, p99 {ms(pct(times, 99))} ms, "
            f"min {ms(min(times))} ms, max {ms(max(times))} ms ({len(answers[0])} bytes answered)")
    ch.close()
    say("rls-sizes: " + "; ".join(f"{n}: {ms(m)} / {ms(p)}" for n, m, p in summary) + " ms (median / p99)")


# --- the RLS probe during RLQS ---------------------------------------------


def probe(addr, every, deadline, ready, stop, results):
    """In its own process (its own GIL and connection): a 1-descriptor
    ShouldRateLimit every `every` s on a fixed schedule, each with
    `deadline`, whether or not the earlier ones were answered, until
    `stop`; puts ([sent], [(sent, latency or None, status name)]) on
    `results`, times by time.monotonic (one clock for all processes)."""
    ch = channel(addr, "probe")
    call = rls_call(ch)
    done, sent_at, pending = [], [], []
    lock = threading.Lock()
    ready.set()
    start = time.monotonic()
    k = 0
    while not stop.is_set():
        due = start + k * every
        k += 1
        wait = due - time.monotonic()
        if wait > 0 and stop.wait(wait):
            break
        payload = rls_payload(1)
        sent = time.monotonic()
        future = call.future(payload, timeout=deadline)

        def finished(f, sent=sent):
            at = time.monotonic()
            code = f.code()
            with lock:
                done.append((sent, at - sent if code == grpc.StatusCode.OK else None, code.name))

        future.add_done_callback(finished)
        sent_at.append(sent)
        pending.append(future)
    end = time.monotonic() + deadline + 1
    for future in pending:
        try:
            future.result(timeout=max(0.0, end - time.monotonic()))
        except Exception:
            pass
    time.sleep(0.05)
    with lock:
        out = list(done)
    results.put((sent_at, out, time.process_time()))
    ch.close()


class Probe:
    def __init__(self, args):
        ctx = multiprocessing.get_context("spawn")
        self.ready, self.stop, self.results = ctx.Event(), ctx.Event(), ctx.Queue()
        self.process = ctx.Process(
            target=probe,
            args=(args.addr, args.probe_every, args.probe_deadline, self.ready, self.stop, self.results),
            daemon=True,
        )
        self.process.start()
        if not self.ready.wait(20):
            raise Failed("the RLS probe did not connect within 20 s")

    def finish(self, since, until, wait):
        """Stops the calls; what those sent within [since, until] (monotonic)
        got."""
        self.stop.set()
        try:
            sent, done, self.cpu = self.results.get(timeout=wait)
        except Exception:
            sent, done, self.cpu = [], [], float("nan")
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
        within = lambda t: since <= t <= until  # noqa: E731
        sent = [t for t in sent if within(t)]
        done = [d for d in done if within(d[0])]
        ok = [t for _, t, _ in done if t is not None]
        failures = {}
        for _, t, code in done:
            if t is None:
                failures[code] = failures.get(code, 0) + 1
        failures_text = ", ".join(f"{c} {n}" for c, n in sorted(failures.items())) or "none"
        unanswered = len(sent) - len(done)
        if unanswered:
            failures_text += f", {unanswered} never finished"
        return (f"{len(sent)} calls, failures: {failures_text}; "
                f"median {ms(pct(ok, 50))} ms, p99 {ms(pct(ok, 99))} ms, max {ms(max(ok) if ok else float('nan'))} ms")


# --- RLQS streams ------------------------------------------------------------


class Stream:
    """One Envoy's quota stream: sends the reports it is given, at their
    times, and keeps the stream open (as an Envoy does) until closed; a
    thread reads the answers as bytes, with their arrival times."""

    def __init__(self, call, number, buckets):
        self.number = number
        self.buckets = buckets
        self.schedule = []  # (due time, payload)
        self.sent = []  # when each report went out
        self.received = []  # (time, bytes)
        self.error = None
        self.first = threading.Event()
        self.closed = threading.Event()
        self.call_factory = call

    def start(self, schedule):
        self.schedule = schedule
        self.call = self.call_factory(self._reports())
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _reports(self):
        for due, payload in self.schedule:
            wait = due - time.perf_counter()
            if wait > 0 and self.closed.wait(wait):
                return
            if self.closed.is_set():
                return
            self.sent.append(time.perf_counter())
            yield payload
        self.closed.wait()

    def _read(self):
        try:
            for data in self.call:
                self.received.append((time.perf_counter(), data))
                self.first.set()
        except grpc.RpcError as e:
            if not self.closed.is_set():
                self.error = f"{e.code().name}: {e.details()}"
        finally:
            self.first.set()

    def close(self):
        self.closed.set()
        self.call.cancel()


def open_channels(args, streams, prefix):
    per = max(1, args.per_channel)
    channels = [channel(args.addr, f"{prefix}-{i}") for i in range((streams + per - 1) // per)]
    return channels, [rlqs_call(channels[s // per]) for s in range(streams)]


def rlqs_flood(args):
    server = Server(args.pid)
    n, buckets = args.streams, args.buckets
    say(f"rlqs-flood: {n} streams x {buckets} buckets, one report each, "
        f"{math.ceil(n / args.per_channel)} channels; RLS probe every {args.probe_every * 1000:.0f} ms, "
        f"deadline {args.probe_deadline * 1000:.0f} ms; cap {args.timeout:.0f} s")
    started = time.perf_counter()
    payloads = [rlqs_payload(s, buckets, args.interval, allowed=args.interval) for s in range(n)]
    say(f"  {n} reports serialized in {time.perf_counter() - started:.1f} s (before the clock)")
    channels, calls = open_channels(args, n, "flood")
    streams = [Stream(calls[s], s, buckets) for s in range(n)]
    probe_proc = Probe(args)
    time.sleep(0.5)  # the probe's first calls, on an idle server
    rss0, _ = server.memory()
    cpu0, exact0 = server.cpu(), server.cpu_exact()
    m0 = time.monotonic()
    own0 = time.process_time()
    t0 = time.perf_counter()
    for s in streams:
        s.start([(t0, payloads[s.number])])
    cap = t0 + args.timeout
    for s in streams:
        s.first.wait(max(0.0, cap - time.perf_counter()))
    t1 = time.perf_counter()
    own = time.process_time() - own0
    alive = server.alive()
    cpu1, exact1 = (server.cpu(), server.cpu_exact()) if alive else (float("nan"), float("nan"))
    # The answers by the cap (more may come while the probe stops).
    firsts = {s.number: s.received[0] for s in streams if s.received and s.received[0][0] <= t1}
    rss1, hwm1 = server.memory() if alive else (float("nan"), float("nan"))
    # The calls sent from the reports' going out to the last answer, and
    # for at least a second (a fast flood is over before the second call).
    m1 = max(time.monotonic(), m0 + 1.0)
    time.sleep(max(0.0, m1 - time.monotonic()))
    probe_text = probe_proc.finish(m0, m1, args.probe_deadline + 10)
    answered = [s for s in streams if s.number in firsts]
    errors = [s for s in streams if s.error]
    last = max((firsts[s.number][0] for s in answered), default=t0) - t0
    for s in streams:
        s.close()
    for ch in channels:
        ch.close()
    counts = [count_actions(firsts[s.number][1]) for s in answered]
    complete = sum(1 for c in counts if c == buckets)
    checked = answered[:1] + answered[-1:]
    problems = [p for p in (check_answer(firsts[s.number][1], s.number, buckets) for s in checked) if p]
    cpu, exact = cpu1 - cpu0, exact1 - exact0
    bucket_reports = len(answered) * buckets
    partial = len(answered) < n
    say(f"  answered {len(answered)}/{n} streams ({complete} with an action for each of {buckets} buckets), "
        f"{len(errors)} ended in error" + (f" (first: stream {errors[0].number}: {errors[0].error})" if errors else ""))
    if partial:
        say(f"  PARTIAL: {n - len(answered)} streams unanswered at the {args.timeout:.0f} s cap")
    say(f"  last answer {last:.2f} s after the reports went out"
        + (f" (the cap stopped the wait at {t1 - t0:.1f} s)" if partial else ""))
    say(f"  server CPU {cpu:.2f} s (utime+stime; {exact:.3f} s by its threads' schedstat) over {t1 - t0:.2f} s; "
        + (f"{exact / bucket_reports * 1e6:.1f} us per bucket report answered" if bucket_reports else "no bucket report answered")
        + (" (CPU includes the unanswered streams' work)" if partial else ""))
    say(f"  server RSS {rss0:.1f} MiB before, {rss1:.1f} MiB after (peak {hwm1:.1f} MiB)"
        + ("" if alive else "; THE SERVER EXITED"))
    say(f"  driver CPU {own:.2f} s meanwhile (its streams), {probe_proc.cpu:.2f} s in all (the RLS calls' process)")
    say(f"  RLS during the flood: {probe_text}")
    if args.settle > 0 and server.alive():
        cpu2 = server.cpu()
        time.sleep(args.settle)
        if server.alive():
            rss2, _ = server.memory()
            say(f"  {args.settle:.0f} s after the streams closed: server RSS {rss2:.1f} MiB, "
                f"CPU {server.cpu() - cpu2:.2f} s in that time")
    for p in problems:
        say(f"  ODD ANSWER: {p}")
    say(f"rlqs-flood {n}x{buckets}: {len(answered)}/{n} answered, last {last:.2f} s, CPU {cpu:.2f} s"
        + (f" ({exact / bucket_reports * 1e6:.1f} us per bucket report)" if bucket_reports else "")
        + f", RSS {rss0:.0f} -> {rss1:.0f} MiB; RLS {probe_text}")
    return 1 if problems or errors or not alive else 0


def rlqs_steady(args):
    server = Server(args.pid)
    n, buckets, interval = args.streams, args.buckets, args.interval
    say(f"rlqs-steady: {n} streams x {buckets} buckets, a report every {interval:.0f} s for {args.intervals} intervals, "
        f"the streams spread over the interval; {math.ceil(n / args.per_channel)} channels")
    payloads = [rlqs_payload(s, buckets, interval, allowed=interval) for s in range(n)]
    channels, calls = open_channels(args, n, "steady")
    streams = [Stream(calls[s], s, buckets) for s in range(n)]
    rss0, _ = server.memory()
    t0 = time.perf_counter() + 0.2
    time.sleep(0.2)
    cpu0, exact0 = server.cpu(), server.cpu_exact()
    for s in streams:
        offset = s.number * interval / n
        s.start([(t0 + offset + k * interval, payloads[s.number]) for k in range(args.intervals)])
    end = t0 + args.intervals * interval
    time.sleep(max(0.0, end - time.perf_counter()))
    cpu1, exact1 = server.cpu(), server.cpu_exact()
    # The last reports (sent late in the last interval) get one more interval
    # to be answered; the CPU share is the intervals' alone.
    time.sleep(min(interval, 1.0 + interval * (n - 1) / n))
    rss1, hwm1 = server.memory()
    alive = server.alive()
    for s in streams:
        s.close()
    for ch in channels:
        ch.close()
    latencies, unanswered, ticks, errors = [], 0, 0, [s for s in streams if s.error]
    for s in streams:
        answers = [(t, data) for t, data in s.received if count_actions(data) >= buckets * 9 // 10]
        ticks += len(s.received) - len(answers)
        for sent in s.sent:
            after = [t for t, _ in answers if t >= sent]
            if after:
                latencies.append(after[0] - sent)
                answers = [(t, d) for t, d in answers if t != after[0]]
            else:
                unanswered += 1
    reports = sum(len(s.sent) for s in streams)
    problems = [p for p in (check_answer(s.received[0][1], s.number, buckets) for s in streams[:1] if s.received) if p]
    cpu, exact = cpu1 - cpu0, exact1 - exact0
    wall = end - t0
    say(f"  {reports} reports, {len(latencies)} answered, {unanswered} not, {ticks} other responses (reviews, abandons), "
        f"{len(errors)} streams ended in error" + (f" (first: {errors[0].error})" if errors else ""))
    say(f"  answer latency median {ms(pct(latencies, 50))} ms, p99 {ms(pct(latencies, 99))} ms, "
        f"max {ms(max(latencies) if latencies else float('nan'))} ms")
    say(f"  server CPU {cpu:.2f} s (utime+stime; {exact:.3f} s by its threads' schedstat) over {wall:.1f} s: "
        f"{100 * cpu / wall:.1f}% of one core; {exact / max(1, reports * buckets) * 1e6:.1f} us per bucket report")
    say(f"  server RSS {rss0:.1f} MiB before, {rss1:.1f} MiB after (peak {hwm1:.1f} MiB)")
    for p in problems:
        say(f"  ODD ANSWER: {p}")
    say(f"rlqs-steady {n}x{buckets} every {interval:.0f} s: CPU {100 * cpu / wall:.1f}% of a core, "
        f"answers median {ms(pct(latencies, 50))} ms, p99 {ms(pct(latencies, 99))} ms, {unanswered} unanswered")
    return 1 if problems or errors or not alive else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--addr", required=True, help="HOST:PORT of the envoy_rls example")
    parser.add_argument("--pid", type=int, help="its process id (rlqs-*: CPU and memory from /proc)")
    parser.add_argument("--interval", type=float, default=5.0, help="its report_interval_secs (default 5)")
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("rls-sizes")
    p.add_argument("--sizes", default="1,4,8,16,32,64", help="descriptor counts, comma list")
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    for name, streams, per in (("rlqs-flood", 200, 50), ("rlqs-steady", 10, 1)):
        p = sub.add_parser(name)
        p.add_argument("--streams", type=int, default=streams)
        p.add_argument("--buckets", type=int, default=1000)
        p.add_argument("--per-channel", type=int, default=per, help=f"streams per channel (default {per})")
        if name == "rlqs-flood":
            p.add_argument("--timeout", type=float, default=60.0, help="cap on the wait for answers, s")
            p.add_argument("--probe-every", type=float, default=0.05, help="s between RLS calls")
            p.add_argument("--probe-deadline", type=float, default=1.0, help="s, each RLS call's deadline")
            p.add_argument("--settle", type=float, default=0.0,
                           help="s to wait after the streams closed, then print the server's RSS again")
        else:
            p.add_argument("--intervals", type=int, default=3)
    args = parser.parse_args()
    if args.what != "rls-sizes" and args.pid is None:
        parser.error(f"{args.what} needs --pid")
    if args.what == "rls-sizes":
        args.sizes = [int(x) for x in args.sizes.replace(" ", ",").split(",") if x]
        if any(not 1 <= x <= 64 for x in args.sizes):
            parser.error("--sizes: 1 to 64 descriptors (the server refuses more)")
    try:
        return {"rls-sizes": rls_sizes, "rlqs-flood": rlqs_flood, "rlqs-steady": rlqs_steady}[args.what](args) or 0
    except Failed as e:
        print(f"drive {args.what}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
