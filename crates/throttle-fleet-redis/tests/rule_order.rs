//! A request a local rule denies costs no Redis call, even when a Redis
//! rule comes first in the policy: local rules are asked first. The Redis
//! modes, the approximate one included, are asked after them in policy
//! order (`guide/failure.md`, "Memory rules first").

use std::time::Duration;

use throttle_fleet_core::decision::Kind;
use throttle_fleet_core::{
    Answer, Key, Quota, Rule, decision::Decision, decision::Demand, memory::MemoryBackend,
    rule_set::RuleSet,
};
use throttle_fleet_redis::{ApproximateOptions, RedisBackend, RedisConfig};
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
            // A day's window: the memory backend aligns it to the system
            // clock, and a boundary inside the run would let a fourth pass.
            Rule::new("ip", Quota::per_day(3)).fixed_window(),
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
        server.command_count("evalsha") + server.command_count("eval"),
        3 + 1,
        "(one NOSCRIPT, the call sent again whole)"
    );
}

/// An approximate rule and an exact one, each on a Redis of its own, in
/// the order given; the exact server's script calls for twenty requests
/// of one client and the number of them allowed.
async fn exact_calls_under(approximate_first: bool) -> (u64, usize) {
    let (exact_server, approx_server) = (RedisServer::start(), RedisServer::start());
    let timeout = Duration::from_secs(2);
    let exact =
        RedisBackend::exact(RedisConfig::standalone(exact_server.url()).command_timeout(timeout))
            .await
            .unwrap();
    let approx = RedisBackend::approximate(
        RedisConfig::standalone(approx_server.url()).command_timeout(timeout),
        ApproximateOptions::default(),
    )
    .await
    .unwrap();
    let tenant = Rule::new("tenant", Quota::per_hour(1_000)).fixed_window();
    // Per hour: the twenty requests fall in one window unless the hour
    // turns during the test, which only lets more through (counted).
    let ip = Rule::new("ip", Quota::per_hour(3)).fixed_window();
    let mut rules = RuleSet::new();
    let (tenant, ip) = if approximate_first {
        let ip = rules.bind(ip, &approx).unwrap();
        (rules.bind(tenant, &exact).unwrap(), ip)
    } else {
        let tenant = rules.bind(tenant, &exact).unwrap();
        (tenant, rules.bind(ip, &approx).unwrap())
    };
    let mut demands = vec![
        Demand::new(tenant, Key::new("acme"), 1),
        Demand::new(ip, Key::new("198.51.100.7"), 1),
    ];
    demands.sort_by_key(|d| d.rule);
    exact_server.first_reads(1);
    exact_server.cli(&["CONFIG", "RESETSTAT"]);
    let mut allowed = 0;
    for _ in 0..20 {
        let d = decide(&rules, &demands).await;
        match d.kind() {
            Kind::Allowed => allowed += 1,
            Kind::Denied => assert_eq!(rules.rule(d.rule().unwrap()).name(), "ip"),
            _ => panic!("{d:?}"),
        }
    }
    let calls = exact_server.command_count("evalsha") + exact_server.command_count("eval");
    (calls, allowed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approximate_rule_listed_first_spares_the_exact_rule_its_denials() {
    // Listed first, the approximate rule denies at once from memory: the
    // exact rule is charged only for the requests allowed.
    let (calls, allowed) = exact_calls_under(true).await;
    assert!(allowed >= 3, "{allowed}");
    assert_eq!(
        calls,
        allowed as u64 + 1,
        "(one NOSCRIPT, the call sent again whole)"
    );
    // Listed after, it is asked after the exact rule has charged each
    // request (and refunds the denied ones).
    let (calls, allowed) = exact_calls_under(false).await;
    assert!(allowed >= 3, "{allowed}");
    assert!(calls >= 20, "{calls} script calls for 20 requests");
}
