//! A request a local rule denies costs no Redis call, even when a Redis
//! rule comes first in the policy: local rules are asked first.

use std::time::Duration;

use throttle_fleet_core::decision::Kind;
use throttle_fleet_core::{Answer, Decision, Demand, Key, MemoryBackend, Quota, Rule, RuleSet};
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;

async fn decide(rules: &RuleSet, demands: &[Demand]) -> Decision {
    match rules.check(demands) {
        Answer::Ready(c) => c.into_decision(),
        Answer::Pending(f) => f.await.into_decision(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_denial_before_a_remote_rule_costs_no_call() {
    let server = RedisServer::start();
    let config = RedisConfig::standalone(server.url()).command_timeout(Duration::from_secs(2));
    let redis = RedisBackend::exact(config).await.unwrap();
    let mut rules = RuleSet::new();
    // The remote rule first, as a policy might list them.
    let tenant = rules
        .bind(
            Rule::new("tenant", Quota::per_minute(1_000)).fixed_window(),
            &redis,
        )
        .unwrap();
    let ip = rules
        .bind(
            Rule::new("ip", Quota::per_minute(3)).fixed_window(),
            &MemoryBackend::default(),
        )
        .unwrap();
    let demands = [
        Demand::new(tenant, Key::new("acme"), 1),
        Demand::new(ip, Key::new("198.51.100.7"), 1),
    ];
    // The backend's first read of the operations' log is a script call it
    // makes in the background once it has subscribed: not this test's to
    // count (on a loaded machine it came after the reset below).
    server.first_reads(1);
    server.cli(&["CONFIG", "RESETSTAT"]);
    let mut allowed = 0;
    let mut denied_by = Vec::new();
    for _ in 0..20 {
        let d = decide(&rules, &demands).await;
        match d.kind() {
            Kind::Allowed => allowed += 1,
            Kind::Denied => denied_by.push(rules.rule(d.rule().unwrap()).name().to_owned()),
            _ => panic!("{d:?}"),
        }
    }
    assert_eq!(allowed, 3);
    assert!(denied_by.iter().all(|n| n == "ip"), "{denied_by:?}");
    // Three charges for the allowed requests; no charge and no refund for
    // the seventeen the local rule denied.
    assert_eq!(
        server.command_count("evalsha"),
        3 + 1,
        "(one NOSCRIPT retry)"
    );
}
