#!/usr/bin/env python3
"""Envoy's side of ShouldRateLimit, as the contract's checks of the server.

    rls_client.py --addr HOST:PORT --scenario NAME
    rls_client.py --addr A --addr2 B --scenario fleet
    rls_client.py --addr HOST:PORT --count N --expect-ok K [--user U]

Speaks envoy.service.ratelimit.v3.RateLimitService with the request and
response types and the stub generated from Envoy's protos (envoy-data-plane),
as Envoy's ratelimit filter does. The server runs the contract's rules in
domain "api": per-user (["user_id"], 10 a minute, fixed window), search
(["path=/search"], 3 a second), shadow-tenant (["tenant"], 1 a minute,
shadow). Every user and tenant is new to each run. Exits 1 with a message
saying what differed.

Scenarios:
  twelve     12 calls of one user: 10 OK counting down 9..0, then 2
             OVER_LIMIT with the limit, the time to reset, and the headers
             RateLimit-Policy, RateLimit and Retry-After
  fixed      [("path", "/search")]: 3 OK then OVER_LIMIT within a second
  unmatched  a descriptor no rule matches is OK, without a current_limit
  shadow     a shadow rule never denies; from its 2nd call on, the dynamic
             metadata's shadow_denied names it
  bad-input  an empty domain, no descriptors, an unknown domain: each
             INVALID_ARGUMENT; a huge hits_addend: OVER_LIMIT, and the
             server still answers; a descriptor without entries: OK
  hits       hits_addend 4 twice OK, the 3rd OVER_LIMIT, then 2 OK
  fleet      one user's calls alternating between two replicas on one
             Redis: 10 OK in all, and each replica denies once it is spent
  count      (--count N --expect-ok K) N calls of one user, K OK
"""

import argparse
import sys
import time
import uuid

import grpc

from envoy_data_plane.envoy.extensions.common.ratelimit.v3 import (
    RateLimitDescriptor,
    RateLimitDescriptorEntry,
)
from envoy_data_plane.envoy.service.ratelimit.v3 import (
    RateLimitRequest,
    RateLimitResponse,
    RateLimitResponseCode,
    RateLimitResponseRateLimitUnit,
    RateLimitServiceSyncStub,
)

OK = RateLimitResponseCode.OK
OVER_LIMIT = RateLimitResponseCode.OVER_LIMIT
DOMAIN = "api"
CALL_TIMEOUT = 5.0


class Failed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failed(message)


class _Details(grpc.ClientCallDetails):
    pass


def connect(addr):
    channel = grpc.insecure_channel(addr)
    try:
        grpc.channel_ready_future(channel).result(timeout=10)
    except grpc.FutureTimeoutError:
        raise Failed(f"no gRPC server at {addr} after 10 s") from None
    return RateLimitServiceSyncStub(grpc.intercept_channel(channel, DeadlineInterceptor()))


class DeadlineInterceptor(grpc.UnaryUnaryClientInterceptor):
    """Gives each call a deadline: the generated sync stub takes none."""

    def intercept_unary_unary(self, continuation, details, request):
        if details.timeout is None:
            new = _Details()
            new.method = details.method
            new.timeout = CALL_TIMEOUT
            new.metadata = details.metadata
            new.credentials = details.credentials
            new.wait_for_ready = getattr(details, "wait_for_ready", None)
            new.compression = getattr(details, "compression", None)
            details = new
        return continuation(details, request)


def descriptor(*entries, hits_addend=None):
    return RateLimitDescriptor(
        entries=[RateLimitDescriptorEntry(key=k, value=v) for k, v in entries],
        hits_addend=hits_addend,
    )


def request(*descriptors, domain=DOMAIN, hits_addend=0):
    return RateLimitRequest(domain=domain, descriptors=list(descriptors), hits_addend=hits_addend)


def show(response):
    try:
        return str(response.to_dict())
    except Exception:  # an odd response still gets shown
        return repr(response)


def call(stub, req, what):
    """One ShouldRateLimit that must be answered, with one status a descriptor."""
    try:
        response = stub.should_rate_limit(req)
    except grpc.RpcError as e:
        raise Failed(f"{what}: a gRPC error {e.code().name}: {e.details()}") from None
    check(isinstance(response, RateLimitResponse), f"{what}: not a RateLimitResponse: {response!r}")
    check(
        len(response.statuses) == len(req.descriptors),
        f"{what}: {len(response.statuses)} statuses for {len(req.descriptors)} descriptors: {show(response)}",
    )
    return response


def call_error(stub, req, what):
    """One ShouldRateLimit that must fail; returns the grpc.RpcError."""
    try:
        response = stub.should_rate_limit(req)
    except grpc.RpcError as e:
        return e
    raise Failed(f"{what}: answered instead of an error: {show(response)}")


def headers(response):
    """{lowercased name: value} of response_headers_to_add."""
    out = {}
    for h in response.response_headers_to_add:
        out[h.key.lower()] = h.value if h.value else h.raw_value.decode("utf-8", "replace")
    return out


def seconds(delta):
    return delta.total_seconds() if delta is not None else None


def new_key(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def check_limit(status, per_unit, unit, what):
    limit = status.current_limit
    check(limit is not None, f"{what}: no current_limit in the status")
    check(
        limit.requests_per_unit == per_unit and limit.unit == unit,
        f"{what}: current_limit {limit.requests_per_unit} per {limit.unit.name}, "
        f"want {per_unit} per {unit.name}",
    )


def check_over_limit(response, what, per_unit=10, unit=RateLimitResponseRateLimitUnit.MINUTE, max_reset=60):
    check(response.overall_code == OVER_LIMIT, f"{what}: {response.overall_code.name}, want OVER_LIMIT: {show(response)}")
    status = response.statuses[0]
    check(status.code == OVER_LIMIT, f"{what}: the status is {status.code.name}, want OVER_LIMIT")
    reset = seconds(status.duration_until_reset)
    check(
        reset is not None and 0 < reset <= max_reset,
        f"{what}: duration_until_reset {reset} s, want in (0, {max_reset}]",
    )
    check_limit(status, per_unit, unit, what)
    check(status.limit_remaining == 0, f"{what}: limit_remaining {status.limit_remaining}, want 0")
    names = headers(response)
    for name in ("ratelimit-policy", "ratelimit", "retry-after"):
        check(name in names, f"{what}: no {name} in response_headers_to_add {sorted(names)}")
    retry = names["retry-after"]
    check(retry.isdigit() and 0 < int(retry) <= max_reset, f"{what}: Retry-After {retry!r}, want 1..{max_reset} seconds")


def scenario_twelve(args):
    stub = connect(args.addr)
    user = new_key("user")
    for i in range(1, 13):
        what = f"twelve, call {i} of user {user}"
        response = call(stub, request(descriptor(("user_id", user))), what)
        status = response.statuses[0]
        if i <= 10:
            check(response.overall_code == OK, f"{what}: {response.overall_code.name}, want OK: {show(response)}")
            check(status.code == OK, f"{what}: the status is {status.code.name}, want OK")
            check(
                status.limit_remaining == 10 - i,
                f"{what}: limit_remaining {status.limit_remaining}, want {10 - i}",
            )
            if status.current_limit is not None:
                check_limit(status, 10, RateLimitResponseRateLimitUnit.MINUTE, what)
        else:
            check_over_limit(response, what)
    print("twelve: 10 OK (remaining 9..0), then 2 OVER_LIMIT with limit, reset and headers")


def count_ok(stubs, user, n):
    codes = []
    for i in range(n):
        stub, name = stubs[i % len(stubs)]
        response = call(stub, request(descriptor(("user_id", user))), f"call {i + 1} (to {name}) of user {user}")
        check(
            response.overall_code in (OK, OVER_LIMIT),
            f"call {i + 1} (to {name}): overall_code {response.overall_code.name}",
        )
        codes.append((name, response.overall_code))
    return codes


def scenario_count(args):
    user = args.user or new_key("user")
    codes = count_ok([(connect(args.addr), args.addr)], user, args.count)
    ok = sum(1 for _, c in codes if c == OK)
    check(ok == args.expect_ok, f"count: {ok} of {args.count} calls of user {user} OK, want {args.expect_ok}")
    print(f"count: {ok} of {args.count} calls of user {user} OK")


def scenario_fleet(args):
    check(args.addr2, "fleet: needs --addr2, the second replica")
    user = args.user or new_key("user")
    stubs = [(connect(args.addr), "A"), (connect(args.addr2), "B")]
    codes = count_ok(stubs, user, 12)
    ok = sum(1 for _, c in codes if c == OK)
    summary = " ".join(f"{n}:{c.name}" for n, c in codes)
    check(ok == 10, f"fleet: {ok} of 12 calls OK across the two replicas, want 10 (one count in Redis): {summary}")
    check(all(c == OK for _, c in codes[:10]), f"fleet: an early call was denied: {summary}")
    check({n for n, c in codes if c == OVER_LIMIT} == {"A", "B"}, f"fleet: not both replicas denied: {summary}")
    print("fleet: 12 calls alternating between two replicas, 10 OK in all, both deny after")


def scenario_fixed(args):
    stub = connect(args.addr)
    req = request(descriptor(("path", "/search")))
    for attempt in range(1, 4):
        # Start just after a whole second: a window aligned to the clock then
        # has most of a second left for four calls that take milliseconds.
        time.sleep(1.02 - (time.time() % 1.0))
        start = time.time()
        responses = [call(stub, req, f"fixed, call {i + 1}") for i in range(4)]
        end = time.time()
        codes = [r.overall_code for r in responses]
        if codes == [OK, OK, OK, OVER_LIMIT]:
            check_over_limit(
                responses[3], "fixed, call 4", per_unit=3, unit=RateLimitResponseRateLimitUnit.SECOND, max_reset=1
            )
            print(f"fixed: 3 OK then OVER_LIMIT in {1000 * (end - start):.0f} ms")
            return
        crossed = int(start) != int(end)
        check(
            crossed and codes.count(OVER_LIMIT) <= 1,
            f"fixed: {[c.name for c in codes]} in {1000 * (end - start):.0f} ms, want 3 OK then OVER_LIMIT",
        )
        # The calls straddled a second: try again once the counts are gone.
        time.sleep(2)
    raise Failed("fixed: three bursts each straddled a second")


def scenario_unmatched(args):
    stub = connect(args.addr)
    for i in range(3):
        response = call(stub, request(descriptor(("other", "x"))), f"unmatched, call {i + 1}")
        check(response.overall_code == OK, f"unmatched: {response.overall_code.name}, want OK: {show(response)}")
        status = response.statuses[0]
        check(status.code == OK, f"unmatched: the status is {status.code.name}, want OK")
        check(status.current_limit is None, f"unmatched: a current_limit for a descriptor no rule matches: {show(response)}")
    print("unmatched: OK, no current_limit")


def struct_to_py(value):
    """A google.protobuf.Struct (or Value) as plain Python."""
    from envoy_data_plane.google.protobuf import ListValue, Struct, Value

    if isinstance(value, Struct):
        return {k: struct_to_py(v) for k, v in value.fields.items()}
    if isinstance(value, ListValue):
        return [struct_to_py(v) for v in value.values]
    if isinstance(value, Value):
        for name in ("struct_value", "list_value", "string_value", "number_value", "bool_value"):
            inner = getattr(value, name)
            if inner is not None:
                return struct_to_py(inner)
        return None
    return value


def shadow_denied(response):
    if response.dynamic_metadata is None:
        return []
    found = struct_to_py(response.dynamic_metadata).get("shadow_denied")
    if found is None:
        return []
    if isinstance(found, str):
        return [found]
    return found


def scenario_shadow(args):
    stub = connect(args.addr)
    tenant = new_key("tenant")
    for i in range(1, 4):
        what = f"shadow, call {i} of tenant {tenant}"
        response = call(stub, request(descriptor(("tenant", tenant))), what)
        check(response.overall_code == OK, f"{what}: {response.overall_code.name}: a shadow rule denied: {show(response)}")
        check(response.statuses[0].code == OK, f"{what}: the status is {response.statuses[0].code.name}, want OK")
        denied = shadow_denied(response)
        check(isinstance(denied, list), f"{what}: shadow_denied is {denied!r}, not a list")
        if i == 1:
            check("shadow-tenant" not in denied, f"{what}: within the limit, yet shadow_denied {denied}")
        else:
            check(
                "shadow-tenant" in denied,
                f"{what}: over the shadow limit, but the dynamic metadata has shadow_denied {denied}: {show(response)}",
            )
    print("shadow: 3 OK, shadow_denied names shadow-tenant from the 2nd call")


def scenario_bad_input(args):
    stub = connect(args.addr)
    user_desc = lambda: descriptor(("user_id", new_key("user")))  # noqa: E731

    e = call_error(stub, request(user_desc(), domain=""), "an empty domain")
    check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"an empty domain: {e.code().name}, want INVALID_ARGUMENT: {e.details()}")

    e = call_error(stub, request(), "no descriptors")
    check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"no descriptors: {e.code().name}, want INVALID_ARGUMENT: {e.details()}")

    e = call_error(stub, request(user_desc(), domain="nope"), "domain \"nope\"")
    check(
        e.code() == grpc.StatusCode.INVALID_ARGUMENT,
        f"domain \"nope\": {e.code().name}, want INVALID_ARGUMENT: {e.details()}",
    )
    check("nope" in (e.details() or ""), f"domain \"nope\": the message does not name it: {e.details()!r}")

    response = call(stub, request(user_desc(), hits_addend=2**32 - 1), "request hits_addend 4294967295")
    check(
        response.overall_code == OVER_LIMIT,
        f"request hits_addend 4294967295: {response.overall_code.name}, want OVER_LIMIT: {show(response)}",
    )
    response = call(
        stub,
        request(descriptor(("user_id", new_key("user")), hits_addend=2**63)),
        "descriptor hits_addend 2**63",
    )
    check(
        response.overall_code == OVER_LIMIT,
        f"descriptor hits_addend 2**63: {response.overall_code.name}, want OVER_LIMIT: {show(response)}",
    )
    response = call(
        stub,
        request(descriptor(("user_id", new_key("user")), hits_addend=2**64 - 1)),
        "descriptor hits_addend 2**64-1",
    )
    check(
        response.overall_code == OVER_LIMIT,
        f"descriptor hits_addend 2**64-1: {response.overall_code.name}, want OVER_LIMIT: {show(response)}",
    )

    response = call(stub, request(user_desc()), "a normal call after the huge ones")
    check(
        response.overall_code == OK and response.statuses[0].limit_remaining == 9,
        f"a normal call after the huge ones: {show(response)}",
    )

    response = call(stub, request(descriptor()), "a descriptor without entries")
    check(response.overall_code == OK, f"a descriptor without entries: {response.overall_code.name}, want OK: {show(response)}")
    print("bad-input: empty domain, no descriptors, unknown domain refused; huge addends OVER_LIMIT; empty descriptor OK")


def scenario_hits(args):
    stub = connect(args.addr)
    user = new_key("user")
    # The denied 4 are not counted: the last 2 then fill the 10 exactly.
    steps = [(4, OK, 6), (4, OK, 2), (4, OVER_LIMIT, None), (2, OK, 0)]
    for i, (addend, want, remaining) in enumerate(steps, 1):
        what = f"hits, call {i} (hits_addend {addend}) of user {user}"
        response = call(stub, request(descriptor(("user_id", user)), hits_addend=addend), what)
        check(response.overall_code == want, f"{what}: {response.overall_code.name}, want {want.name}: {show(response)}")
        got = response.statuses[0].limit_remaining
        check(remaining is None or got == remaining, f"{what}: limit_remaining {got}, want {remaining}")
    print("hits: 4+4 OK, 4 more OVER_LIMIT (2 left), then 2 OK")


SCENARIOS = {
    "twelve": scenario_twelve,
    "fixed": scenario_fixed,
    "unmatched": scenario_unmatched,
    "shadow": scenario_shadow,
    "bad-input": scenario_bad_input,
    "hits": scenario_hits,
    "fleet": scenario_fleet,
    "count": scenario_count,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--addr", required=True, help="HOST:PORT of the server")
    parser.add_argument("--addr2", help="HOST:PORT of a second replica (fleet)")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--count", type=int, help="calls of one user (the count form)")
    parser.add_argument("--expect-ok", type=int, help="how many of --count must be OK")
    parser.add_argument("--user", help="the user_id (default: a new one)")
    args = parser.parse_args()
    if args.scenario is None:
        if args.count is None or args.expect_ok is None:
            parser.error("give --scenario, or --count N --expect-ok K")
        args.scenario = "count"
    if args.scenario == "count" and (args.count is None or args.expect_ok is None):
        parser.error("count needs --count N --expect-ok K")
    try:
        SCENARIOS[args.scenario](args)
    except Failed as e:
        print(f"rls_client {args.scenario}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
