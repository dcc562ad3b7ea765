use super::*;
use crate::headers::number;
use throttle_fleet_core::InFlightLimit;
use throttle_fleet_core::algorithm::Step;
use throttle_fleet_core::backend::Outcome;
use throttle_fleet_core::{Key, Quota};
use throttle_fleet_test_support::decided;

fn denied(retry_after_ms: u64) -> Decision {
    let step = Step {
        allowed: false,
        remaining: 0,
        reset_us: 60_000_000,
        retry_after_us: retry_after_ms * 1_000,
        delay_us: 0,
    };
    decided(
        Rule::new("ip", Quota::per_minute(100)),
        0,
        Key::new("k"),
        Outcome::new(step, 1_700_000_000_000_000),
    )
}

fn answer(responder: HttpResponder, rule: &str, retry_after_ms: u64) -> Response<Bytes> {
    let req = http::Request::new(());
    let rule = Rule::new(rule, Quota::per_minute(100));
    let d = denied(retry_after_ms);
    responder.reject(
        &RequestHead::of(&req),
        Rejection::Denied {
            decision: &d,
            rule: &rule,
        },
    )
}

#[test]
fn denial_bodies_name_their_own_rule_and_wait_whatever_was_sent_before() {
    let body = |rule: &str, secs: u64| {
        format!(
            "{{\"error\":\"RATE_LIMIT_EXCEEDED\",\"message\":\"Quota exceeded. Please retry \
             after {secs} seconds.\",\"retry_after_seconds\":{secs},\"dimension\":\"{rule}\"}}"
        )
    };
    // Same wait, rules whose names end alike, a wait sharing a slot
    // (8 apart), and the first again: each answer is its own.
    for (rule, ms) in [
        ("ip", 14_000),
        ("tip", 14_000),
        ("p", 14_000),
        ("ip", 22_000),
        ("ip", 14_000),
        ("a-rule-name-longer-than-the-rest", 14_000),
        ("ip", 14_000),
    ] {
        let res = answer(HttpResponder::new(), rule, ms);
        let secs = ms / 1000;
        assert_eq!(res.body(), body(rule, secs).as_bytes(), "{rule} {secs}");
    }
}

#[test]
fn a_shed_body_and_a_denial_body_with_the_same_wait_and_rule_are_each_their_own() {
    let shed = |rule: &str, secs: u64| {
        format!(
            "{{\"error\":\"TEMPORARY_REDUCED_CAPACITY\",\"type\":\"temporary-reduced-capacity\",\
             \"message\":\"The service is short of capacity. Please retry after {secs} \
             seconds.\",\"retry_after_seconds\":{secs},\"dimension\":\"{rule}\"}}"
        )
    };
    let limited = |rule: &str, secs: u64| {
        format!(
            "{{\"error\":\"RATE_LIMIT_EXCEEDED\",\"message\":\"Quota exceeded. Please retry \
             after {secs} seconds.\",\"retry_after_seconds\":{secs},\"dimension\":\"{rule}\"}}"
        )
    };
    for (refusal, rule, secs) in [
        (Refusal::Limited, "backend", 1),
        (Refusal::Shed, "backend", 1),
        (Refusal::Shed, "backend", 1),
        (Refusal::Limited, "backend", 1),
        (Refusal::Shed, "end", 9),
        (Refusal::Shed, "backend", 1),
    ] {
        let body = refusal_body(refusal, secs, rule);
        let want = match refusal {
            Refusal::Limited => limited(rule, secs),
            Refusal::Shed => shed(rule, secs),
        };
        assert_eq!(body, want.as_bytes(), "{rule} {secs}");
        serde_json::from_slice::<serde_json::Value>(&body).unwrap();
    }
}

#[test]
fn numbers_render_the_same_from_the_tables_and_from_scratch() {
    for n in [0, 1, 9, 10, 1_023, 1_024, 60_000, 1_796_025_675, u64::MAX] {
        assert_eq!(number(n), HeaderValue::from(n));
        assert_eq!(number(n), HeaderValue::from(n), "cached");
    }
    // Two values sharing a cache slot.
    assert_eq!(number(1_040), HeaderValue::from(1_040u64));
    assert_eq!(number(1_056), HeaderValue::from(1_056u64));
    assert_eq!(number(1_040), HeaderValue::from(1_040u64));
    // Several at once, small and large mixed, as one look.
    let all = [7, 1_796_025_675, 0, u64::MAX];
    assert_eq!(numbers(all), all.map(HeaderValue::from));
    assert_eq!(numbers([3, 9]), [3u64, 9].map(HeaderValue::from));
}

/// An unreachable fail-closed backend's answer states the wait its
/// `Retry-After` gives.
#[test]
fn a_refusal_says_how_long_to_wait() {
    let rule = Rule::new("ip", Quota::per_minute(100)).fail_closed();
    let refused = throttle_fleet_test_support::refused(0, "down");
    let req = http::Request::new(());
    let res = HttpResponder::new().reject(
        &RequestHead::of(&req),
        Rejection::Refused {
            decision: &refused,
            rule: &rule,
        },
    );
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.headers()["retry-after"], "1");
    let body: serde_json::Value = serde_json::from_slice(res.body()).unwrap();
    assert_eq!(
        body["message"],
        "The rate limiter is unavailable. Please retry after 1 second."
    );
    assert_eq!(body["retry_after_seconds"], 1);
}

/// A rule of `limit` per minute whose key has `remaining` left and
/// must wait `retry_after_ms`, decided at Unix time 1,700,000,000.25 s
/// with its reset 59.5 s later (1,700,000,060 s, rounded up): every
/// figure a header carries is distinct from the others.
fn distinct(allowed: bool, remaining: u64, retry_after_ms: u64) -> Decision {
    let step = Step {
        allowed,
        remaining,
        reset_us: 59_500_000,
        retry_after_us: retry_after_ms * 1_000,
        delay_us: 0,
    };
    decided(
        Rule::new("ip", Quota::per_minute(100)),
        0,
        Key::new("k"),
        Outcome::new(step, 1_700_000_000_250_000),
    )
}

/// Each header of `res` by name, and no other.
fn assert_headers(res: &Response<Bytes>, want: &[(&str, &str)], what: &str) {
    for (name, value) in want {
        assert_eq!(
            res.headers().get(*name).map(|v| v.to_str().unwrap()),
            Some(*value),
            "{what}: {name}"
        );
    }
    assert_eq!(
        res.headers().len(),
        want.len(),
        "{what}: {:?}",
        res.headers()
    );
}

#[test]
fn each_refusal_header_carries_its_own_value_whatever_the_map_order() {
    let rule = Rule::new("ip", Quota::per_minute(100));
    let d = distinct(false, 7, 13_200);
    let req = http::Request::new(());
    for (what, responder) in [
        ("x-ratelimit", HttpResponder::new()),
        ("both", HttpResponder::new().ietf_headers(true)),
        (
            "ietf only",
            HttpResponder::new()
                .ietf_headers(true)
                .x_ratelimit_headers(false),
        ),
    ] {
        let res = responder.reject(
            &RequestHead::of(&req),
            Rejection::Denied {
                decision: &d,
                rule: &rule,
            },
        );
        let length = res.body().len().to_string();
        let mut want = vec![
            ("content-type", "application/json"),
            ("content-length", length.as_str()),
            ("retry-after", "14"),
        ];
        if what != "ietf only" {
            want.extend([
                ("x-ratelimit-limit", "100"),
                ("x-ratelimit-remaining", "7"),
                ("x-ratelimit-reset", "1700000060"),
            ]);
        }
        if what != "x-ratelimit" {
            want.extend([
                ("ratelimit-policy", "\"ip\";q=100;w=60"),
                ("ratelimit", "\"ip\";r=7;t=14"),
            ]);
        }
        assert_headers(&res, &want, what);
    }

    let shed = decided(
        Rule::new("ip", Quota::per_minute(100)),
        0,
        Key::new("k"),
        Outcome {
            shed: true,
            ..Outcome::new(
                Step {
                    allowed: false,
                    remaining: 0,
                    reset_us: 0,
                    retry_after_us: 2_500_000,
                    delay_us: 0,
                },
                1_700_000_000_250_000,
            )
        },
    );
    let pool = Rule::concurrency(
        "pool",
        InFlightLimit {
            reserve: 1,
            ..InFlightLimit::new(4)
        },
    );
    let res = HttpResponder::new().reject(
        &RequestHead::of(&req),
        Rejection::Shed {
            decision: &shed,
            rule: &pool,
        },
    );
    let length = res.body().len().to_string();
    let want = [
        ("content-type", "application/json"),
        ("content-length", length.as_str()),
        ("retry-after", "3"),
    ];
    assert_headers(&res, &want, "shed");
}

#[test]
fn a_template_header_without_a_value_is_left_out() {
    let values = RefusalValues {
        content_length: Some(number(12)),
        retry_after: Some(number(3)),
        policy: Some(HeaderValue::from_static("\"ip\";q=100;w=60")),
        ..RefusalValues::default()
    };
    let map = limited_headers(&LIMITED_IETF_ONLY, values);
    let mut names: Vec<_> = map.keys().map(|n| n.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "content-length",
            "content-type",
            "ratelimit-policy",
            "retry-after"
        ]
    );
    assert!(map.values().all(|v| !v.is_empty()), "{map:?}");
}

/// `X-RateLimit-Reset` is the decision's reset, whichever answer carries
/// it: allowed with or without the IETF fields, and denied.
#[test]
fn every_answer_dates_the_reset_from_the_decision() {
    let rule = Rule::new("ip", Quota::per_minute(100));
    let req = http::Request::new(());
    let head = RequestHead::of(&req);
    let allowed = distinct(true, 7, 0);
    for responder in [
        HttpResponder::new(),
        HttpResponder::new().ietf_headers(true),
    ] {
        let mut map = HeaderMap::new();
        responder.allowed(&head, &allowed, &rule).apply(&mut map);
        assert_eq!(map["x-ratelimit-reset"], "1700000060", "{responder:?}");
        let denied = distinct(false, 0, 13_200);
        let res = responder.reject(
            &head,
            Rejection::Denied {
                decision: &denied,
                rule: &rule,
            },
        );
        assert_eq!(
            res.headers()["x-ratelimit-reset"],
            "1700000060",
            "{responder:?}"
        );
    }
}
