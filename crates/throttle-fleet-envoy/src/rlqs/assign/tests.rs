use super::*;

fn bucket(s: &RateLimitStrategy) -> (u32, u32, i64) {
    match &s.strategy {
        Some(Strategy::TokenBucket(tb)) => (
            tb.max_tokens,
            tb.tokens_per_fill.unwrap().value,
            tb.fill_interval.unwrap().seconds,
        ),
        other => panic!("not a token bucket: {other:?}"),
    }
}

#[test]
fn a_share_is_that_part_of_the_rate_and_of_the_burst() {
    let rule = Rule::new("r", Quota::per_minute(600)).fixed_window();
    // A quarter of 600 a minute; the burst: 10, a second of the rate.
    let s = token_bucket(&rule, rule.quota(), STEPS / 4).unwrap();
    assert_eq!(bucket(&s), (2, 150, 60));
    assert_eq!(fleet_burst(&rule, rule.quota()), 10);
    // The whole share, at least one token however small.
    assert_eq!(
        bucket(&token_bucket(&rule, rule.quota(), STEPS).unwrap()),
        (10, 600, 60)
    );
    let tiny = Rule::new("t", Quota::per_minute(10));
    assert_eq!(
        bucket(&token_bucket(&tiny, tiny.quota(), 1).unwrap()),
        (1, 1, 60)
    );
    // A token bucket's own burst is the fleet's.
    let tb = Rule::new("b", Quota::per_minute(600).with_burst(100)).token_bucket();
    assert_eq!(fleet_burst(&tb, tb.quota()), 100);
    assert!(token_bucket(&rule, rule.quota(), 0).is_none());
    assert_eq!(rate(&s), 2.5);
    assert!(rate(&allow_all()).is_infinite());
}
