use std::time::Duration;

use http::{Method, StatusCode};

use super::*;

const RETRIES: Retries = Retries {
    max: 3,
    grpc_codes: 1 << 14,
    base: Duration::from_millis(100),
    cap: Duration::from_secs(10),
};

fn answered(status: u16, told: Told, method: Method, grpc: bool) -> Option<Option<Duration>> {
    let status = StatusCode::from_u16(status).unwrap();
    RETRIES.verdict(Attempt::Answered(status, &told), &method, grpc, 0)
}

fn refused(wait: Option<Duration>) -> Told {
    Told {
        refused: true,
        wait,
        ..Told::default()
    }
}

#[test]
fn a_limiters_refusal_is_repeated_for_any_method_with_its_wait() {
    let wait = Some(Duration::from_secs(2));
    assert_eq!(
        answered(429, refused(wait), Method::POST, false),
        Some(wait)
    );
    assert_eq!(
        answered(429, refused(None), Method::PATCH, false),
        Some(None)
    );
    assert_eq!(answered(200, refused(wait), Method::POST, true), Some(wait));
}

#[test]
fn other_failures_only_for_idempotent_methods() {
    for status in [408, 502, 503, 504] {
        assert_eq!(
            answered(status, Told::default(), Method::GET, false),
            Some(None),
            "{status}"
        );
        assert_eq!(
            answered(status, Told::default(), Method::PUT, false),
            Some(None),
            "{status}"
        );
        assert_eq!(
            answered(status, Told::default(), Method::POST, false),
            None,
            "{status}"
        );
    }
    for status in [200, 400, 404, 500, 501] {
        assert_eq!(
            answered(status, Told::default(), Method::GET, false),
            None,
            "{status}"
        );
    }
    let failed = |method: &Method, grpc| RETRIES.verdict(Attempt::Failed, method, grpc, 0);
    assert_eq!(failed(&Method::GET, false), Some(None));
    assert_eq!(failed(&Method::POST, false), None);
    assert_eq!(
        failed(&Method::POST, true),
        None,
        "gRPC is never idempotent by method"
    );
}

#[test]
fn grpc_codes_from_the_list_only_and_never_after_negative_pushback() {
    let code = |c, wait| Told {
        grpc_status: Some(c),
        wait,
        ..Told::default()
    };
    assert_eq!(
        answered(200, code(14, None), Method::POST, true),
        Some(None)
    );
    assert_eq!(answered(200, code(13, None), Method::POST, true), None);
    assert_eq!(answered(200, code(0, None), Method::POST, true), None);
    let pushback = Some(Duration::from_millis(300));
    assert_eq!(
        answered(200, code(14, pushback), Method::POST, true),
        Some(pushback)
    );
    let never = Told {
        never_retry: true,
        ..refused(Some(Duration::from_secs(1)))
    };
    assert_eq!(answered(200, never, Method::POST, true), None);
}

#[test]
fn retries_stop_at_the_maximum() {
    let told = refused(None);
    let attempt = Attempt::Answered(StatusCode::TOO_MANY_REQUESTS, &told);
    assert!(RETRIES.verdict(attempt, &Method::GET, false, 2).is_some());
    assert!(RETRIES.verdict(attempt, &Method::GET, false, 3).is_none());
}

#[test]
fn full_jitter_stays_within_its_ceiling_and_spreads() {
    for retry in 0..40 {
        let ceiling = Duration::from_millis(100)
            .saturating_mul(1 << retry.min(30))
            .min(Duration::from_secs(10));
        let waits: Vec<_> = (0..200).map(|_| RETRIES.backoff(retry)).collect();
        assert!(waits.iter().all(|w| *w <= ceiling), "{retry}");
        let below_half = waits.iter().filter(|w| **w < ceiling / 2).count();
        assert!(
            (60..140).contains(&below_half),
            "{retry}: {below_half} of 200 below half"
        );
    }
}
