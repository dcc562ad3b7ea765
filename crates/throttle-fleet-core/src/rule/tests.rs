use super::*;

fn field(rule: Rule) -> &'static str {
    rule.validate().unwrap_err().field()
}

#[test]
fn every_impossible_value_names_its_field() {
    let q = Quota::per_minute(10);
    assert_eq!(field(Rule::new("", q)), "name");
    assert_eq!(field(Rule::new("a b", q)), "name");
    assert_eq!(field(Rule::new("x".repeat(65), q)), "name");
    assert_eq!(field(Rule::new("ip", Quota::per_minute(0))), "quota.limit");
    assert_eq!(
        field(Rule::new("ip", Quota::per_minute(1 << 41))),
        "quota.limit"
    );
    assert_eq!(
        field(Rule::new("ip", Quota::new(5, Duration::ZERO))),
        "quota.period"
    );
    assert_eq!(
        field(Rule::new(
            "ip",
            Quota::new(5, Duration::from_nanos(1_500_001))
        )),
        "quota.period"
    );
    assert_eq!(
        field(Rule::new(
            "ip",
            Quota::new(5, Duration::from_secs(400 * 86_400))
        )),
        "quota.period"
    );
    assert_eq!(field(Rule::new("ip", q.with_burst(0))), "quota.burst");
    assert_eq!(
        field(Rule::new("ip", q.with_burst(5)).fixed_window()),
        "quota.burst"
    );
    assert_eq!(field(Rule::new("ip", q).with_cost(0)), "cost");
    assert_eq!(field(Rule::new("ip", q).with_cost(11)), "cost");
    assert_eq!(
        Rule::new("ip", q)
            .with_cost(0)
            .validate()
            .unwrap_err()
            .rule(),
        Some("ip")
    );
    assert_eq!(field(Rule::concurrency("c", 2).with_cost(3)), "cost");
    for ttl in [
        Duration::from_millis(99),
        Duration::from_secs(86_401),
        Duration::from_micros(150_500),
    ] {
        assert_eq!(
            field(Rule::concurrency(
                "c",
                InFlightLimit {
                    slot_ttl: ttl,
                    ..InFlightLimit::new(2)
                }
            )),
            "slot_ttl"
        );
    }
    // A rate rule cannot take the concurrency algorithm, nor a concurrency
    // rule another.
    assert_eq!(
        field(Rule::new("r", q).with_algorithm(Algorithm::Concurrency)),
        "algorithm"
    );
    assert_eq!(field(Rule::concurrency("c", 2).fixed_window()), "algorithm");
}

#[test]
fn valid_rules_pass() {
    for rule in [
        Rule::new("ip", Quota::per_second(1)),
        Rule::new("tenant.tier-1_a", Quota::per_day(1 << 40)).sliding_window_counter(),
        Rule::new("b", Quota::per_minute(3).with_burst(1)).leaky_bucket(),
        Rule::new("c", Quota::new(1, Duration::from_millis(1))).sliding_window_log(),
    ] {
        rule.validate().unwrap();
    }
}
