use super::*;
use throttle_fleet_core::InFlightLimit;
use throttle_fleet_core::Key;
use throttle_fleet_core::backend::Outcome;
use throttle_fleet_test_support::decided;

fn headers(ct: &str) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert(CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
    h
}

#[test]
fn content_types_are_classified_exactly() {
    use GrpcProtocol::*;
    for (ct, expected) in [
        ("application/grpc", Some(Grpc)),
        ("application/grpc+proto", Some(Grpc)),
        ("Application/GRPC+json", Some(Grpc)),
        ("application/grpc; charset=utf-8", Some(Grpc)),
        ("application/grpc-web", Some(GrpcWeb)),
        ("application/grpc-web+proto", Some(GrpcWeb)),
        ("application/grpc-web-text", Some(GrpcWebText)),
        ("application/grpc-web-text+proto", Some(GrpcWebText)),
        ("application/grpcx", None),
        ("application/grpc-webx", None),
        ("application/grpc-", None),
        ("application/json", None),
        ("application/grp", None),
    ] {
        assert_eq!(GrpcProtocol::of(&headers(ct)), expected, "{ct}");
    }
    assert_eq!(GrpcProtocol::of(&http::HeaderMap::new()), None);
}

#[test]
fn missing_key_statuses_map_to_grpc_codes() {
    for (http, code) in [
        (400, Code::InvalidArgument),
        (401, Code::Unauthenticated),
        (403, Code::PermissionDenied),
        (418, Code::FailedPrecondition),
        (429, Code::ResourceExhausted),
        (500, Code::Internal),
        (502, Code::Internal),
        (503, Code::Unavailable),
        (302, Code::Unknown),
    ] {
        assert_eq!(
            code_for_http_status(StatusCode::from_u16(http).unwrap()),
            code,
            "{http}"
        );
    }
}

#[test]
fn pushback_rounds_up() {
    assert_eq!(pushback_ms(Duration::from_micros(1)), 1);
    assert_eq!(pushback_ms(Duration::from_millis(1500)), 1500);
    assert_eq!(pushback_ms(Duration::from_micros(1_500_001)), 1501);
}

#[test]
fn key_kinds_name_the_subject() {
    let r = GrpcResponder::new()
        .key_kind("ip", "x")
        .key_kind("ip", "peer-ip");
    let rule = Rule::new("ip", throttle_fleet_core::Quota::per_minute(1));
    assert_eq!(r.subject(&rule, None), "ip:peer-ip");
    assert_eq!(r.subject(&rule, Some("client-ip")), "ip:peer-ip");
    let other = Rule::new("tenant", throttle_fleet_core::Quota::per_minute(1));
    assert_eq!(r.subject(&other, None), "tenant");
    assert_eq!(r.subject(&other, Some("custom")), "tenant:custom");
}

/// A denial by `rule` (at `index`) under `quota` (its own or a tier's).
fn denied(
    rule: &Rule,
    index: usize,
    quota: throttle_fleet_core::Quota,
    retry_after: Duration,
) -> Decision {
    let step = throttle_fleet_core::algorithm::Step {
        allowed: false,
        remaining: 0,
        reset_us: 60_000_000,
        retry_after_us: u64::try_from(retry_after.as_nanos().div_ceil(1_000)).unwrap_or(u64::MAX),
        delay_us: 0,
    };
    let outcome = Outcome::new(step, 1_796_025_675_123_456);
    // A key of the tier whose quota is `quota`, if one is (the test's one
    // tier is "gold", and a tier's key is its name).
    let tiered = rule.tiers().is_some_and(|t| t.quotas().contains(&quota));
    let key = Key::new(if tiered { "gold" } else { "k" });
    decided(rule.clone(), index, key, outcome)
}

fn grpc_request(content_type: &str) -> http::request::Parts {
    http::Request::post("/helloworld.Greeter/SayHello")
        .header(CONTENT_TYPE, content_type)
        .body(())
        .unwrap()
        .into_parts()
        .0
}

/// The denial made from what was made at build is the one tonic-types
/// makes from scratch (the unbound responder's), header for header and
/// byte for byte.
#[test]
fn denials_made_once_per_rule_equal_denials_made_whole() {
    use throttle_fleet_core::Quota;
    let minute = Quota::new(5, Duration::from_secs(60));
    let gold = Quota::new(50, Duration::from_secs(60)).with_burst(80);
    let rules = [
        Rule::new("ip", minute.with_burst(5)).token_bucket(),
        Rule::new("tenant", minute)
            .with_tiers([("gold", gold)])
            .token_bucket(),
        Rule::new("m", Quota::new(3, Duration::from_millis(1500))).fixed_window(),
    ];
    let kinds = ["peer-ip", "metadata:x-api-key", "method"];
    let mut bound = GrpcResponder::new().key_kind("m", "rpc");
    let pairs: Vec<_> = rules.iter().zip(kinds).collect();
    bound.bind(&pairs);
    let whole = GrpcResponder::new()
        .key_kind("ip", "peer-ip")
        .key_kind("tenant", "metadata:x-api-key")
        .key_kind("m", "rpc");
    let waits = [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_micros(1),
        Duration::from_millis(1500),
        Duration::new(59, 999_999_999),
        Duration::from_secs(3 * 86_400),
        // Beyond what RetryInfo carries: clamped to its maximum.
        Duration::from_secs(u64::MAX / 2),
    ];
    let mut seen = 0;
    for (index, rule) in rules.iter().enumerate() {
        let quotas = [rule.quota(), gold];
        for quota in quotas.into_iter().take(if index == 1 { 2 } else { 1 }) {
            for wait in waits {
                for ct in ["application/grpc", "application/grpc-web-text"] {
                    let req = grpc_request(ct);
                    let d = denied(rule, index, quota, wait);
                    let head = RequestHead::from_parts(&req);
                    let reject = |r: &GrpcResponder| {
                        r.reject(&head, Rejection::Denied { decision: &d, rule })
                    };
                    let (fast, slow) = (reject(&bound), reject(&whole));
                    assert_eq!(fast.headers(), slow.headers(), "{rule:?} {wait:?}");
                    let status = Status::from_header_map(fast.headers()).unwrap();
                    assert_eq!(status.code(), Code::ResourceExhausted);
                    let retry = status.get_details_retry_info().unwrap();
                    let max = tonic_types::RetryInfo::MAX_RETRY_DELAY;
                    assert_eq!(retry.retry_delay, Some(d.retry_after().min(max)));
                    // Never shorter than the wait (microseconds, rounded up).
                    assert!(retry.retry_delay >= Some(wait.min(max)), "{wait:?}");
                    seen += 1;
                }
            }
        }
    }
    assert_eq!(seen, 4 * waits.len() * 2);
}

#[test]
fn unavailable_answers_made_once_equal_answers_made_whole() {
    let rule = Rule::new("ip", throttle_fleet_core::Quota::per_minute(1)).fail_closed();
    let mut bound = GrpcResponder::new();
    bound.bind(&[(&rule, "peer-ip")]);
    let refused = throttle_fleet_test_support::refused(0, "down");
    let req = grpc_request("application/grpc");
    let reject = |r: &GrpcResponder| {
        r.reject(
            &RequestHead::from_parts(&req),
            Rejection::Refused {
                decision: &refused,
                rule: &rule,
            },
        )
    };
    let fast = reject(&bound);
    assert_eq!(fast.headers(), reject(&GrpcResponder::new()).headers());
    assert_eq!(fast.headers()["grpc-status"], "14");
}

/// A call shed for capacity and a fail-closed refusal are both
/// `UNAVAILABLE`: a client tells them apart by the ErrorInfo reason.
#[test]
fn a_shed_call_is_unavailable_with_its_own_reason_and_wait() {
    let rule = Rule::concurrency(
        "backend",
        InFlightLimit {
            reserve: 1,
            ..InFlightLimit::new(4)
        },
    );
    let req = grpc_request("application/grpc");
    let head = RequestHead::from_parts(&req);
    let step = throttle_fleet_core::algorithm::Step {
        allowed: false,
        remaining: 0,
        reset_us: 1_000_000,
        retry_after_us: 1_000_000,
        delay_us: 0,
    };
    let outcome = Outcome {
        shed: true,
        ..Outcome::new(step, 1_796_025_675_123_456)
    };
    let shed = decided(
        Rule::new("r", throttle_fleet_core::Quota::per_second(1)),
        0,
        Key::new("k"),
        outcome,
    );
    assert!(shed.is_shed());
    let res = GrpcResponder::new().reject(
        &head,
        Rejection::Shed {
            decision: &shed,
            rule: &rule,
        },
    );
    assert_eq!(res.headers()["retry-after"], "1");
    assert_eq!(res.headers()["grpc-retry-pushback-ms"], "1000");
    let status = Status::from_header_map(res.headers()).unwrap();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        status.message(),
        "The service is short of capacity. Please retry after 1 seconds."
    );
    let info = status.get_details_error_info().unwrap();
    assert_eq!(info.reason, "TEMPORARY_REDUCED_CAPACITY");
    assert_eq!(
        status.get_details_retry_info().unwrap().retry_delay,
        Some(Duration::from_secs(1))
    );

    // A longer wait: the message, `retry-after` and `RetryInfo` say it
    // alike (the message and the header rounded up).
    let step = throttle_fleet_core::algorithm::Step {
        retry_after_us: 2_500_000,
        ..step
    };
    let outcome = Outcome {
        shed: true,
        ..Outcome::new(step, 1_796_025_675_123_456)
    };
    let longer = decided(
        Rule::new("r", throttle_fleet_core::Quota::per_second(1)),
        0,
        Key::new("k"),
        outcome,
    );
    let res = GrpcResponder::new().reject(
        &head,
        Rejection::Shed {
            decision: &longer,
            rule: &rule,
        },
    );
    assert_eq!(res.headers()["retry-after"], "3");
    assert_eq!(res.headers()["grpc-retry-pushback-ms"], "2500");
    let status = Status::from_header_map(res.headers()).unwrap();
    assert_eq!(
        status.message(),
        "The service is short of capacity. Please retry after 3 seconds."
    );
    assert_eq!(
        status.get_details_retry_info().unwrap().retry_delay,
        Some(Duration::from_millis(2_500))
    );

    let refused = throttle_fleet_test_support::refused(0, "down");
    let res = GrpcResponder::new().reject(
        &head,
        Rejection::Refused {
            decision: &refused,
            rule: &rule,
        },
    );
    let status = Status::from_header_map(res.headers()).unwrap();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        status.get_details_error_info().unwrap().reason,
        "RATE_LIMITER_UNAVAILABLE"
    );
}
