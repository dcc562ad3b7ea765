use super::*;

#[test]
fn quotas_are_described_with_their_unit() {
    let q = throttle_fleet_core::Quota::new(5, Duration::from_secs(60));
    assert_eq!(
        describe_quota(&Rule::new("ip", q).fixed_window(), q),
        "ip: 5 per 60s"
    );
    assert_eq!(
        describe_quota(
            &Rule::new("ip", q.with_burst(9)).token_bucket(),
            q.with_burst(9)
        ),
        "ip: 5 per 60s (burst 9)"
    );
    let q = throttle_fleet_core::Quota::new(3, Duration::from_millis(1500));
    assert_eq!(
        describe_quota(&Rule::new("m", q).fixed_window(), q),
        "m: 3 per 1500ms"
    );
}

#[test]
fn message_text_is_encoded_as_tonic_encodes_it() {
    assert_eq!(&*wire_text(" seconds."), b"%20seconds.");
    assert_eq!(&*wire_text("a b%c"), b"a%20b%25c");
}
