#!/usr/bin/env python3
"""Envoy's side of StreamRateLimitQuotas, as the contract's checks of the server.

    rlqs_client.py --addr HOST:PORT --scenario NAME
    rlqs_client.py --addr A --addr2 B --scenario fleet

Plays one or more Envoys' rate_limit_quota filters with the types and the
sync stub generated from Envoy's protos (envoy-data-plane): each stream is
fed from a queue, so a check sends a usage report, reads the answer, then
sends the next. The server runs the contract's rules in domain "api"; the
rule for user_id allows 10 a minute, and its `[rls] report_interval_secs`
is 1, so reports here go out a second apart as an Envoy's would. Every user
is new to each run. Exits 1 with a message saying what differed.

Scenarios:
  assign      one report of bucket {user_id: U}: a quota assignment for
              exactly that bucket, with a positive time to live and a token
              bucket of at most the whole rule's rate (10 a minute)
  two-envoys  two streams report the same bucket twice, equally: their two
              token buckets together allow at most 10 a minute
  unmatched   a bucket no rule matches ({other: x}) is told ALLOW_ALL
  bad-input   an unknown domain ends the stream with INVALID_ARGUMENT naming
              it; an empty bucket id gets no assignment (or the stream ends
              INVALID_ARGUMENT); either way a new stream is still served
  fleet       two replicas on one Redis, one Envoy on each: together at
              most 10 a minute
  domain-once the domain in the first report only (the proto: later ones
              may leave it out): a later report without it is answered;
              one naming another domain ends the stream INVALID_ARGUMENT
"""

import argparse
import datetime
import queue
import sys
import threading
import time
import uuid
from fractions import Fraction

import betterproto2
import grpc

from envoy_data_plane.envoy.service.rate_limit_quota.v3 import (
    BucketId,
    RateLimitQuotaResponse,
    RateLimitQuotaServiceSyncStub,
    RateLimitQuotaUsageReports,
    RateLimitQuotaUsageReportsBucketQuotaUsage,
)
from envoy_data_plane.envoy.type.v3 import RateLimitStrategyBlanketRule

DOMAIN = "api"
RULE_PER_MINUTE = 10
WAIT = 5.0  # for an answer the server owes


class Failed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failed(message)


def new_user():
    return f"user-{uuid.uuid4().hex[:12]}"


def show(message):
    try:
        return str(message.to_dict())
    except Exception:  # an odd message still gets shown
        return repr(message)


def report(bucket, allowed, denied=0, elapsed=1.0, domain=DOMAIN):
    return RateLimitQuotaUsageReports(
        domain=domain,
        bucket_quota_usages=[
            RateLimitQuotaUsageReportsBucketQuotaUsage(
                bucket_id=BucketId(bucket=dict(bucket)),
                time_elapsed=datetime.timedelta(seconds=elapsed),
                num_requests_allowed=allowed,
                num_requests_denied=denied,
            )
        ],
    )


_END = object()


class Envoy:
    """One quota stream: reports go in through a queue, answers come out of
    another, read by a thread so that a check can wait with a timeout."""

    def __init__(self, addr, name):
        self.name = name
        self.channel = grpc.insecure_channel(addr)
        try:
            grpc.channel_ready_future(self.channel).result(timeout=10)
        except grpc.FutureTimeoutError:
            raise Failed(f"{name}: no gRPC server at {addr} after 10 s") from None
        self._out = queue.Queue()
        self._in = queue.Queue()
        self.ended = None  # None while open; then "ok" or the grpc.RpcError
        self.assigned = None  # the last bucket action received
        stub = RateLimitQuotaServiceSyncStub(self.channel)
        self._responses = stub.stream_rate_limit_quotas(self._reports())
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _reports(self):
        while True:
            item = self._out.get()
            if item is _END:
                return
            yield item

    def _read(self):
        try:
            for response in self._responses:
                self._in.put(response)
            self._in.put("ok")
        except grpc.RpcError as e:
            self._in.put(e)
        except Exception as e:  # a response the types refuse
            self._in.put(Failed(f"{self.name}: unreadable response: {type(e).__name__}: {e}"))

    def send(self, message):
        check(self.ended is None, f"{self.name}: the stream already ended: {self.describe_end()}")
        self._out.put(message)

    def recv(self, timeout):
        """The next response; None after timeout; raises Failed if the stream
        ended (self.ended then says how)."""
        try:
            item = self._in.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if isinstance(item, RateLimitQuotaResponse):
            return item
        if isinstance(item, Failed):
            raise item
        self.ended = item
        raise Failed(f"{self.name}: the stream ended: {self.describe_end()}")

    def describe_end(self):
        if isinstance(self.ended, grpc.RpcError):
            return f"{self.ended.code().name}: {self.ended.details()}"
        return "the server closed it" if self.ended == "ok" else "still open"

    def wait_end(self, timeout):
        """How the stream ended, within timeout; responses before are dropped."""
        deadline = time.monotonic() + timeout
        while self.ended is None:
            try:
                self.recv(deadline - time.monotonic())
            except Failed:
                break
            if time.monotonic() >= deadline:
                return None
        return self.ended

    def action_for(self, bucket, timeout, since_all=False):
        """The next bucket action for bucket within timeout (None if none).
        Every action seen must be for a bucket this Envoy reported."""
        deadline = time.monotonic() + timeout
        while True:
            response = self.recv(deadline - time.monotonic())
            if response is None:
                return None
            for action in response.bucket_action:
                got = dict(action.bucket_id.bucket) if action.bucket_id else {}
                check(got == dict(bucket), f"{self.name}: an action for bucket {got}, which it never reported: {show(response)}")
            if response.bucket_action:
                self.assigned = response.bucket_action[-1]
                return self.assigned

    def latest_action(self, bucket, wait):
        """The action in force for bucket after wait seconds: the last one
        received (a server need not repeat an unchanged assignment)."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.action_for(bucket, deadline - time.monotonic()) is None:
                break
        return self.assigned

    def close(self):
        self._out.put(_END)
        self.channel.close()


def rate_per_minute(action, what):
    """The token bucket's rate in requests a minute, after checking it."""
    kind, _ = betterproto2.which_one_of(action, "bucket_action")
    check(kind == "quota_assignment_action", f"{what}: a {kind}, want a quota_assignment_action: {show(action)}")
    assignment = action.quota_assignment_action
    ttl = assignment.assignment_time_to_live
    check(ttl is not None and ttl.total_seconds() > 0, f"{what}: assignment_time_to_live {ttl}, want positive")
    strategy = assignment.rate_limit_strategy
    check(strategy is not None, f"{what}: no rate_limit_strategy (that is allow-all) for a limited bucket")
    kind, _ = betterproto2.which_one_of(strategy, "strategy")
    check(kind == "token_bucket", f"{what}: a {kind} strategy, want a token_bucket: {show(action)}")
    bucket = strategy.token_bucket
    check(bucket.max_tokens >= 1, f"{what}: max_tokens {bucket.max_tokens}, want >= 1")
    per_fill = bucket.tokens_per_fill
    check(per_fill is not None and per_fill >= 1, f"{what}: tokens_per_fill {per_fill}, want >= 1")
    interval = bucket.fill_interval
    check(interval is not None, f"{what}: no fill_interval")
    micros = interval // datetime.timedelta(microseconds=1)
    check(
        micros >= 1_000_000 and micros % 1_000_000 == 0,
        f"{what}: fill_interval {interval.total_seconds()} s, want whole seconds, at least 1",
    )
    rate = Fraction(per_fill, micros // 1_000_000) * 60
    check(
        rate <= RULE_PER_MINUTE,
        f"{what}: {per_fill} tokens every {micros // 1_000_000} s is {float(rate):.2f} a minute, "
        f"more than the rule's {RULE_PER_MINUTE}",
    )
    return rate


def scenario_assign(args):
    envoy = Envoy(args.addr, "envoy")
    bucket = {"user_id": new_user()}
    try:
        envoy.send(report(bucket, allowed=5))
        action = envoy.action_for(bucket, WAIT)
        check(action is not None, f"assign: no action for bucket {bucket} within {WAIT:.0f} s")
        rate = rate_per_minute(action, f"assign, bucket {bucket}")
    finally:
        envoy.close()
    print(f"assign: bucket {bucket} assigned a token bucket of {float(rate):.2f} a minute")


def two_envoys(addr_a, addr_b, label):
    """Two Envoys report one bucket equally, twice; returns their rates."""
    bucket = {"user_id": new_user()}
    envoys = [Envoy(addr_a, "envoy A"), Envoy(addr_b, "envoy B")]
    try:
        # Round 1: whichever reports first holds the whole quota until it
        # reports again; the other may get nothing yet.
        for envoy in envoys:
            envoy.send(report(bucket, allowed=3))
        for envoy in envoys:
            envoy.latest_action(bucket, 0.5)
        time.sleep(0.5)  # the rest of the reporting interval
        # Round 2: each is answered (at once, or as soon as the other let
        # go); what each is told from here on.
        for envoy in envoys:
            envoy.send(report(bucket, allowed=3))
        rates = []
        for envoy in envoys:
            action = envoy.action_for(bucket, WAIT)
            check(action is not None, f"{label}: {envoy.name} was assigned nothing for {bucket} within {WAIT:.0f} s")
            action = envoy.latest_action(bucket, 0.5) or action
            rates.append(rate_per_minute(action, f"{label}, {envoy.name}"))
    finally:
        for envoy in envoys:
            envoy.close()
    total = sum(rates)
    check(
        total <= RULE_PER_MINUTE,
        f"{label}: the two Envoys may admit {float(rates[0]):.2f} + {float(rates[1]):.2f} = "
        f"{float(total):.2f} a minute, more than the rule's {RULE_PER_MINUTE}",
    )
    return rates


def scenario_two_envoys(args):
    rates = two_envoys(args.addr, args.addr, "two-envoys")
    print(f"two-envoys: {float(rates[0]):.2f} + {float(rates[1]):.2f} a minute, at most {RULE_PER_MINUTE}")


def scenario_fleet(args):
    check(args.addr2, "fleet: needs --addr2, the second replica")
    rates = two_envoys(args.addr, args.addr2, "fleet")
    print(f"fleet: one Envoy on each replica, {float(rates[0]):.2f} + {float(rates[1]):.2f} a minute, at most {RULE_PER_MINUTE}")


def scenario_unmatched(args):
    envoy = Envoy(args.addr, "envoy")
    bucket = {"other": "x"}
    try:
        envoy.send(report(bucket, allowed=5))
        action = envoy.action_for(bucket, WAIT)
        check(action is not None, f"unmatched: no action for bucket {bucket} within {WAIT:.0f} s")
        kind, _ = betterproto2.which_one_of(action, "bucket_action")
        check(kind == "quota_assignment_action", f"unmatched: a {kind}, want a quota_assignment_action: {show(action)}")
        strategy = action.quota_assignment_action.rate_limit_strategy
        check(strategy is not None, f"unmatched: no rate_limit_strategy, want blanket_rule ALLOW_ALL: {show(action)}")
        kind, rule = betterproto2.which_one_of(strategy, "strategy")
        check(
            kind == "blanket_rule" and rule == RateLimitStrategyBlanketRule.ALLOW_ALL,
            f"unmatched: strategy {kind} {rule}, want blanket_rule ALLOW_ALL: {show(action)}",
        )
    finally:
        envoy.close()
    print(f"unmatched: bucket {bucket} is ALLOW_ALL")


def scenario_bad_input(args):
    # An unknown domain: the stream ends INVALID_ARGUMENT, naming it.
    envoy = Envoy(args.addr, "envoy with domain nope")
    try:
        envoy.send(report({"user_id": new_user()}, allowed=1, domain="nope"))
        ended = envoy.wait_end(WAIT)
        check(ended is not None, f"domain \"nope\": the stream still open after {WAIT:.0f} s")
        check(
            isinstance(ended, grpc.RpcError) and ended.code() == grpc.StatusCode.INVALID_ARGUMENT,
            f"domain \"nope\": the stream ended with {envoy.describe_end()}, want INVALID_ARGUMENT",
        )
        check("nope" in (ended.details() or ""), f"domain \"nope\": the message does not name it: {ended.details()!r}")
    finally:
        envoy.close()

    # An empty bucket id: no assignment for it, or INVALID_ARGUMENT.
    envoy = Envoy(args.addr, "envoy with an empty bucket id")
    outcome = "no action"
    try:
        envoy.send(report({}, allowed=1))
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                response = envoy.recv(deadline - time.monotonic())
            except Failed:
                ended = envoy.ended
                check(
                    isinstance(ended, grpc.RpcError) and ended.code() == grpc.StatusCode.INVALID_ARGUMENT,
                    f"an empty bucket id: the stream ended with {envoy.describe_end()}, want INVALID_ARGUMENT or no action",
                )
                outcome = "INVALID_ARGUMENT"
                break
            if response is None:
                break
            for action in response.bucket_action:
                got = dict(action.bucket_id.bucket) if action.bucket_id else {}
                check(got, f"an empty bucket id: an action for it: {show(response)}")
                raise Failed(f"an empty bucket id: an action for a bucket never reported: {show(response)}")
    finally:
        envoy.close()

    # The server still serves a new stream.
    envoy = Envoy(args.addr, "envoy after the bad ones")
    bucket = {"user_id": new_user()}
    try:
        envoy.send(report(bucket, allowed=1))
        action = envoy.action_for(bucket, WAIT)
        check(action is not None, f"after the bad streams: no action for {bucket} within {WAIT:.0f} s")
        rate_per_minute(action, "after the bad streams")
    finally:
        envoy.close()
    print(f"bad-input: unknown domain INVALID_ARGUMENT naming it; empty bucket id: {outcome}; then served")


def scenario_domain_once(args):
    envoy = Envoy(args.addr, "envoy reporting the domain once")
    first, second = {"user_id": new_user()}, {"user_id": new_user()}
    try:
        envoy.send(report(first, allowed=1))
        check(envoy.action_for(first, WAIT) is not None, f"domain-once: no action for the first report's bucket within {WAIT:.0f} s")
        envoy.send(report(second, allowed=1, domain=""))
        action = envoy.action_for(second, WAIT)
        check(action is not None, f"domain-once: a report without the domain got no action within {WAIT:.0f} s: {envoy.describe_end()}")
        rate_per_minute(action, "domain-once: the second bucket")
        envoy.send(report({"user_id": new_user()}, allowed=1, domain="another"))
        ended = envoy.wait_end(WAIT)
        check(
            isinstance(ended, grpc.RpcError) and ended.code() == grpc.StatusCode.INVALID_ARGUMENT,
            f"domain-once: a report naming another domain: {envoy.describe_end()}, want INVALID_ARGUMENT",
        )
        print("domain-once: a later report without the domain answered; one naming another INVALID_ARGUMENT")
    finally:
        envoy.close()


SCENARIOS = {
    "domain-once": scenario_domain_once,
    "assign": scenario_assign,
    "two-envoys": scenario_two_envoys,
    "unmatched": scenario_unmatched,
    "bad-input": scenario_bad_input,
    "fleet": scenario_fleet,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--addr", required=True, help="HOST:PORT of the server")
    parser.add_argument("--addr2", help="HOST:PORT of a second replica (fleet)")
    parser.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    args = parser.parse_args()
    try:
        SCENARIOS[args.scenario](args)
    except Failed as e:
        print(f"rlqs_client {args.scenario}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
