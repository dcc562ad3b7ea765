use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue, StatusCode};
use proptest::prelude::*;

use super::*;
use crate::grpc::encode_binary;

const CEILING: Duration = Duration::from_secs(60);

/// 2026-12-07T00:00:00Z.
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_601_600)
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn told(status: u16, pairs: &[(&str, &str)]) -> Told {
    read(
        StatusCode::from_u16(status).unwrap(),
        &headers(pairs),
        now(),
        CEILING,
    )
}

fn secs(s: u64) -> Option<Duration> {
    Some(Duration::from_secs(s))
}

#[test]
fn retry_after_in_seconds_and_as_a_date() {
    assert_eq!(told(429, &[("retry-after", "14")]).wait, secs(14));
    assert_eq!(told(429, &[("retry-after", " 3 ")]).wait, secs(3));
    assert_eq!(told(429, &[("retry-after", "0")]).wait, secs(0));
    let date = httpdate::fmt_http_date(now() + Duration::from_secs(30));
    assert_eq!(told(429, &[("retry-after", &date)]).wait, secs(30));
    // The obsolete forms RFC 9110 still has readers accept.
    assert_eq!(
        told(429, &[("retry-after", "Monday, 07-Dec-26 00:00:09 GMT")]).wait,
        secs(9)
    );
    assert_eq!(
        told(429, &[("retry-after", "Mon Dec  7 00:00:05 2026")]).wait,
        secs(5)
    );
    // A date in the past: no wait.
    let past = httpdate::fmt_http_date(now() - Duration::from_secs(30));
    assert_eq!(told(429, &[("retry-after", &past)]).wait, secs(0));
}

#[test]
fn malformed_negative_and_enormous_values() {
    for bad in [
        "-5",
        "5.5",
        "1e3",
        "",
        "soon",
        "0x10",
        "Mon, 32 Dec 2026 00:00:00 GMT",
    ] {
        let t = told(429, &[("retry-after", bad)]);
        assert!(t.refused, "{bad:?}: a 429 is a refusal whatever its fields");
        assert_eq!(t.wait, None, "{bad:?}: ignored");
    }
    // A 503 whose Retry-After does not parse is not known to be a limiter's.
    assert!(!told(503, &[("retry-after", "-1")]).refused);
    // Digits beyond u64: a long wait, cut to the ceiling.
    assert_eq!(
        told(429, &[("retry-after", "99999999999999999999999999")]).wait,
        Some(CEILING)
    );
    assert_eq!(told(429, &[("retry-after", "86400")]).wait, Some(CEILING));
    let far = "Fri, 31 Dec 9999 23:59:59 GMT";
    assert_eq!(told(429, &[("retry-after", far)]).wait, Some(CEILING));
    // A value that is not text.
    let mut map = HeaderMap::new();
    map.insert("retry-after", HeaderValue::from_bytes(b"\xff7").unwrap());
    assert_eq!(
        read(StatusCode::TOO_MANY_REQUESTS, &map, now(), CEILING).wait,
        None
    );
}

#[test]
fn contradictory_fields_the_rule_of_the_module() {
    // Several Retry-After: the longest.
    assert_eq!(
        told(429, &[("retry-after", "3"), ("retry-after", "7")]).wait,
        secs(7)
    );
    // A refusal's Retry-After wins over the quota fields' reset, even a
    // later one (a token bucket's reset is when it is full, not when the
    // next request fits).
    let t = told(
        429,
        &[
            ("retry-after", "1"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "60"),
            ("ratelimit", "\"a\";r=0;t=60"),
        ],
    );
    assert_eq!(t.wait, secs(1));
    // Without Retry-After the IETF fields come before the X- ones.
    let t = told(
        429,
        &[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "60"),
            ("ratelimit", "\"a\";r=0;t=5"),
        ],
    );
    assert_eq!(t.wait, secs(5));
    // The IETF fields say 3 are left, the X- ones 0: the IETF fields count.
    let t = told(
        200,
        &[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "60"),
            ("ratelimit", "\"a\";r=3;t=5"),
        ],
    );
    assert_eq!((t.wait, t.remaining), (None, Some(3)));
    // Two policies: the least remaining, the longest wait of those at 0.
    let t = told(
        200,
        &[
            ("ratelimit", "\"s\";r=0;t=2, \"m\";r=0;t=40"),
            ("ratelimit", "\"d\";r=7;t=900"),
        ],
    );
    assert_eq!((t.wait, t.remaining), (secs(40), Some(0)));
}

#[test]
fn the_ietf_fields() {
    let t = told(
        200,
        &[
            (
                "ratelimit-policy",
                "\"burst\";q=100;w=60, \"day\";q=1000;w=86400",
            ),
            ("ratelimit", "\"burst\";r=0;t=12, \"day\";r=500;t=3000"),
        ],
    );
    assert!(!t.refused);
    assert_eq!(
        (t.wait, t.remaining, t.limit, t.reset),
        (secs(12), Some(0), Some(100), Some(Reset::After(12)))
    );
    // r=0 without t: the policy's window.
    let t = told(
        200,
        &[
            ("ratelimit-policy", "\"burst\";q=100;w=60"),
            ("ratelimit", "\"burst\";r=0"),
        ],
    );
    assert_eq!((t.wait, t.reset), (secs(60), None));
    // Neither: no wait is known.
    assert_eq!(told(200, &[("ratelimit", "\"burst\";r=0")]).wait, None);
    // A field that is not a list is ignored, the X- ones are read.
    let t = told(
        200,
        &[
            ("ratelimit", "\"a\";r=0;t=5,"),
            ("x-ratelimit-remaining", "4"),
            ("x-ratelimit-limit", "10"),
        ],
    );
    assert_eq!((t.remaining, t.limit), (Some(4), Some(10)));
}

#[test]
fn x_ratelimit_reset_as_a_unix_time_or_seconds() {
    let at = |reset: u64| {
        told(
            200,
            &[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", &reset.to_string()),
            ],
        )
        .wait
    };
    let unix = 1_796_601_600;
    assert_eq!(at(unix + 9), secs(9));
    assert_eq!(at(unix - 9), secs(0), "a reset past");
    assert_eq!(at(999_999_999), Some(CEILING), "31 years of seconds, cut");
    assert_eq!(at(59), secs(59));
    assert_eq!(at(1_000_000_000), secs(0), "2001: a Unix time in the past");
    // Remaining above 0: the reset says nothing about waiting.
    let t = told(
        200,
        &[("x-ratelimit-remaining", "1"), ("x-ratelimit-reset", "59")],
    );
    assert_eq!((t.wait, t.remaining), (None, Some(1)));
    // It is still the quota's reset, in the form it was told.
    assert_eq!(t.reset, Some(Reset::After(59)));
    let t = told(
        200,
        &[
            ("x-ratelimit-remaining", "1"),
            ("x-ratelimit-reset", &unix.to_string()),
        ],
    );
    assert_eq!(t.reset, Some(Reset::Unix(unix)));
    // Remaining that is not a count: no quota known.
    let t = told(
        200,
        &[("x-ratelimit-remaining", "-1"), ("x-ratelimit-reset", "59")],
    );
    assert_eq!((t.wait, t.remaining), (None, None));
}

#[test]
fn date_counts_only_when_the_clocks_disagree() {
    let unix = 1_796_601_600_u64;
    let reset = (unix + 10).to_string();
    // The server's clock 1 s behind ours: within Date's resolution, ours.
    let date = httpdate::fmt_http_date(now() - Duration::from_secs(1));
    let t = told(
        200,
        &[
            ("date", &date),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", &reset),
        ],
    );
    assert_eq!(t.wait, secs(10));
    // 100 s behind: the server meant 10 s from its own now.
    let date = httpdate::fmt_http_date(now() - Duration::from_secs(100));
    let reset = (unix - 90).to_string();
    let t = told(
        200,
        &[
            ("date", &date),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", &reset),
        ],
    );
    assert_eq!(t.wait, secs(10));
}

#[test]
fn a_503_is_a_refusal_only_with_retry_after() {
    assert!(told(503, &[("retry-after", "2")]).refused);
    assert!(!told(503, &[]).refused);
    assert!(!told(500, &[("retry-after", "2")]).refused);
    assert_eq!(told(500, &[("retry-after", "2")]).wait, None);
    // A 429 is a refusal even without a field.
    let t = told(429, &[]);
    assert!(t.refused);
    assert_eq!(t.wait, None);
}

/// `google.rpc.Status { code, message, details: [Any { type_url, value }] }`
/// with a `RetryInfo { retry_delay: Duration { seconds, nanos } }`.
pub(crate) fn status_with_retry_info(seconds: i64, nanos: i32) -> Vec<u8> {
    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn field(tag: u64, bytes: &[u8], out: &mut Vec<u8>) {
        varint(tag << 3 | 2, out);
        varint(bytes.len() as u64, out);
        out.extend_from_slice(bytes);
    }
    let mut duration = Vec::new();
    varint(1 << 3, &mut duration);
    varint(seconds as u64, &mut duration);
    varint(2 << 3, &mut duration);
    varint(nanos as i64 as u64, &mut duration);
    let mut info = Vec::new();
    field(1, &duration, &mut info);
    let mut any = Vec::new();
    field(1, b"type.googleapis.com/google.rpc.RetryInfo", &mut any);
    field(2, &info, &mut any);
    let mut status = Vec::new();
    varint(1 << 3, &mut status);
    varint(8, &mut status);
    field(2, b"slow down", &mut status);
    field(3, &any, &mut status);
    status
}

#[test]
fn grpc_refusals() {
    let bin = encode_binary(&status_with_retry_info(2, 500_000_000));
    let t = told(
        200,
        &[("grpc-status", "8"), ("grpc-status-details-bin", &bin)],
    );
    assert!(t.refused);
    assert_eq!(t.wait, Some(Duration::from_millis(2_500)));
    assert_eq!(t.grpc_status, Some(8));
    // Pushback alone, on UNAVAILABLE.
    let t = told(
        200,
        &[("grpc-status", "14"), ("grpc-retry-pushback-ms", "250")],
    );
    assert!(t.refused);
    assert_eq!(t.wait, Some(Duration::from_millis(250)));
    // Both: the longest.
    let t = told(
        200,
        &[
            ("grpc-status", "8"),
            ("grpc-status-details-bin", &bin),
            ("grpc-retry-pushback-ms", "4000"),
        ],
    );
    assert_eq!(t.wait, secs(4));
    // RESOURCE_EXHAUSTED with nothing that says retry: not a limiter's
    // (a message too large is RESOURCE_EXHAUSTED too).
    assert!(!told(200, &[("grpc-status", "8")]).refused);
    // Another code with pushback: not a refusal, but its wait counts.
    let t = told(
        200,
        &[("grpc-status", "13"), ("grpc-retry-pushback-ms", "300")],
    );
    assert!(!t.refused);
    assert_eq!(t.wait, Some(Duration::from_millis(300)));
}

#[test]
fn pushback_that_is_negative_or_not_a_number_means_never() {
    for bad in ["-1", "-0", "", "1.5", "soon", "+5", "0x1"] {
        let t = told(
            200,
            &[("grpc-status", "14"), ("grpc-retry-pushback-ms", bad)],
        );
        assert!(t.never_retry, "{bad:?}");
        assert_eq!(t.wait, None, "{bad:?}");
    }
    let t = told(
        200,
        &[
            ("grpc-status", "14"),
            ("grpc-retry-pushback-ms", "99999999999999999999999"),
        ],
    );
    assert!(!t.never_retry);
    assert_eq!(t.wait, Some(CEILING));
}

#[test]
fn retry_info_that_does_not_decode_is_ignored() {
    let negative = encode_binary(&status_with_retry_info(-5, 0));
    let bad_nanos = encode_binary(&status_with_retry_info(1, -1));
    let good = status_with_retry_info(3, 0);
    let truncated = encode_binary(&good[..good.len() - 3]);
    for bin in [
        negative,
        bad_nanos,
        truncated,
        "!!!".into(),
        "AAAA".into(),
        String::new(),
    ] {
        let t = told(
            200,
            &[("grpc-status", "8"), ("grpc-status-details-bin", &bin)],
        );
        assert_eq!(t.wait, None, "{bin:?}");
        assert!(!t.refused, "{bin:?}");
    }
    // Padded base64 reads too.
    use base64::Engine;
    let padded = base64::engine::general_purpose::STANDARD.encode(&good);
    let t = told(
        200,
        &[("grpc-status", "8"), ("grpc-status-details-bin", &padded)],
    );
    assert_eq!(t.wait, secs(3));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// No wait read from any field, however malformed, enormous or
    /// contradictory, exceeds the ceiling; nothing panics.
    #[test]
    fn no_wait_exceeds_the_ceiling(
        status in prop::sample::select(vec![200_u16, 429, 503, 500]),
        ceiling_ms in 0_u64..120_000,
        fields in prop::collection::vec(
            (
                prop::sample::select(vec![
                    "retry-after", "ratelimit", "ratelimit-policy", "x-ratelimit-remaining",
                    "x-ratelimit-reset", "x-ratelimit-limit", "grpc-status",
                    "grpc-retry-pushback-ms", "grpc-status-details-bin", "date",
                ]),
                prop_oneof![
                    "[ -~]{0,40}",
                    "-?[0-9]{1,30}",
                    "\"[a-z]{1,3}\";r=-?[0-9]{1,20}(;t=-?[0-9]{1,20})?(, \"[a-z]\";r=[0-9]{1,3};t=[0-9]{1,16})?",
                    "\"[a-z]{1,3}\";q=[0-9]{1,16};w=[0-9]{1,16}",
                    (0_i64..i64::MAX, any::<i32>()).prop_map(|(s, n)| encode_binary(&status_with_retry_info(s, n))),
                    (0_u64..253_402_300_000).prop_map(|s| httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(s))),
                ],
            ),
            0..6,
        ),
    ) {
        let mut map = HeaderMap::new();
        for (name, value) in &fields {
            if let Ok(value) = HeaderValue::from_str(value) {
                map.append(*name, value);
            }
        }
        let ceiling = Duration::from_millis(ceiling_ms);
        let t = read(StatusCode::from_u16(status).unwrap(), &map, now(), ceiling);
        prop_assert!(t.wait.is_none_or(|w| w <= ceiling), "{t:?}");
    }
}
