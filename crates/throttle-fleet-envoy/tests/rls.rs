//! RLS v3 over real gRPC (tonic's client on envoy-types' generated
//! stubs, loopback TCP): the issue's goal (12 calls, 10 OK), two replicas
//! on one Redis counting once, the algorithms Envoy gets, two limits on
//! one descriptor, tiers, failure policies with Redis stopped, and a
//! reload that keeps counts.

use std::net::SocketAddr;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use throttle_fleet_config::GatewayConfig;
use throttle_fleet_config::reload::ReloadTarget;
use throttle_fleet_core::{clock::ManualClock, memory::MemoryBackend};
use throttle_fleet_envoy::{EnvoyRules, Rls};
use throttle_fleet_test_support::RedisServer;
use tonic::transport::Channel;

/// Serves `rules` over RLS on a free port; a client to it.
async fn serve(rules: EnvoyRules) -> RateLimitServiceClient<Channel> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(Rls::new(rules).into_server())
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

async fn rules(text: &str) -> EnvoyRules {
    let config = GatewayConfig::parse("rls.toml", text, None).unwrap();
    let backend = config.backend.build("rls.toml").await.unwrap();
    EnvoyRules::new(&config, "rls.toml", backend.as_backend()).unwrap()
}

fn request(descriptors: &[&[(&str, &str)]], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: "api".into(),
        descriptors: descriptors
            .iter()
            .map(|entries| RateLimitDescriptor {
                entries: entries
                    .iter()
                    .map(|(k, v)| Entry {
                        key: (*k).into(),
                        value: (*v).into(),
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        hits_addend: hits,
    }
}

async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    req: &RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(req.clone())
        .await
        .unwrap()
        .into_inner()
}

fn header<'a>(r: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key == name)
        .map(|h| h.value.as_str())
}

const PER_USER: &str = r#"
[[rules]]
name = "per-user"
domain = "api"
descriptor = ["user_id"]
algorithm = "fixed_window"
limit = 10
period_secs = 60
"#;

/// `PER_USER` over a day, for the tests on a real clock (the memory
/// backend's system clock, Redis `TIME`): the fixed window is aligned to
/// it, and a minute's boundary inside the run would admit a second
/// window's quota; a day's is all but never inside it.
fn per_user_daily() -> String {
    PER_USER.replace("period_secs = 60", "period_secs = 86400")
}

#[tokio::test]
async fn twelve_calls_ten_ok_then_over_limit_with_reset_and_headers() {
    // In memory on a clock stopped 30 s into a minute: the twelve calls
    // fall in one fixed window whatever the wall clock says.
    let config = GatewayConfig::parse("rls.toml", PER_USER, None).unwrap();
    let clock = ManualClock::new(1_800_000_030_000_000);
    let backend = MemoryBackend::with_clock(clock);
    let mut client = serve(EnvoyRules::new(&config, "rls.toml", backend).unwrap()).await;
    let req = request(&[&[("user_id", "alice")]], 0);
    let mut codes = Vec::new();
    for i in 0..12u32 {
        let r = ask(&mut client, &req).await;
        codes.push(r.overall_code);
        let status = &r.statuses[0];
        let limit = status.current_limit.as_ref().expect("60 s is a minute");
        assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (10, Unit::Minute as i32)
        );
        assert_eq!(limit.name, "per-user");
        let reset = status.duration_until_reset.expect("a reset");
        assert!(reset.seconds > 0 && reset.seconds <= 60, "{reset:?}");
        assert_eq!(
            header(&r, "ratelimit-policy"),
            Some("\"per-user\";q=10;w=60")
        );
        if i < 10 {
            assert_eq!(status.limit_remaining, 9 - i);
            assert!(header(&r, "retry-after").is_none());
        } else {
            assert_eq!(status.limit_remaining, 0);
            assert_eq!(status.code, Code::OverLimit as i32);
            let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
            assert!((1..=60).contains(&retry), "{retry}");
            assert!(
                header(&r, "ratelimit")
                    .unwrap()
                    .starts_with("\"per-user\";r=0;t=")
            );
        }
    }
    let ok = Code::Ok as i32;
    let over = Code::OverLimit as i32;
    assert_eq!(codes, [[ok; 10].as_slice(), &[over, over]].concat());
    // Another user is apart; a descriptor no rule matches is OK, with no
    // limit.
    assert_eq!(
        ask(&mut client, &request(&[&[("user_id", "bob")]], 0))
            .await
            .overall_code,
        ok
    );
    let other = ask(&mut client, &request(&[&[("tenant", "x")]], 0)).await;
    assert_eq!(other.overall_code, ok);
    assert!(other.statuses[0].current_limit.is_none());
}

#[tokio::test]
async fn two_replicas_on_one_redis_admit_ten_in_all() {
    let redis = RedisServer::start();
    let text = format!(
        "[backend]\nkind = \"redis-exact\"\nurl = \"{}\"\n{}",
        redis.url(),
        per_user_daily()
    );
    let mut a = serve(rules(&text).await).await;
    let mut b = serve(rules(&text).await).await;
    let req = request(&[&[("user_id", "carol")]], 0);
    let mut ok = 0;
    for i in 0..12 {
        let client = if i % 2 == 0 { &mut a } else { &mut b };
        if ask(client, &req).await.overall_code == Code::Ok as i32 {
            ok += 1;
        }
    }
    assert_eq!(ok, 10);
}

#[tokio::test]
async fn four_algorithms_with_any_period_and_two_limits_on_one_descriptor() {
    // 3 per 7 h (no protocol unit) under each algorithm Envoy can get; not
    // 7 s, whose window boundaries (on the system clock) a run could cross.
    for algorithm in [
        "fixed_window",
        "sliding_window_log",
        "sliding_window_counter",
        "token_bucket",
    ] {
        let text = format!(
            "[[rules]]\nname = \"r\"\ndomain = \"api\"\ndescriptor = [\"user_id\"]\nalgorithm = \"{algorithm}\"\nlimit = 3\nperiod_secs = 25200\n"
        );
        let mut client = serve(rules(&text).await).await;
        let req = request(&[&[("user_id", "dave")]], 0);
        let codes: Vec<i32> = {
            let mut v = Vec::new();
            for _ in 0..4 {
                v.push(ask(&mut client, &req).await.overall_code);
            }
            v
        };
        let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
        assert_eq!(codes, [ok, ok, ok, over], "{algorithm}");
        // 7 h is no unit of the protocol: no current_limit rather than a
        // wrong one.
        assert!(
            ask(&mut client, &req).await.statuses[0]
                .current_limit
                .is_none()
        );
    }
    // A day and an hour on the same descriptor: both hold; the first to
    // run out answers, and a denial costs the other nothing.
    let text = format!(
        "{}\n[[rules]]\nname = \"hourly\"\ndomain = \"api\"\ndescriptor = [\"user_id\"]\nlimit = 12\nperiod_secs = 3600\n",
        per_user_daily()
    );
    let mut client = serve(rules(&text).await).await;
    let req = request(&[&[("user_id", "erin")]], 0);
    let mut remaining = Vec::new();
    for _ in 0..11 {
        let r = ask(&mut client, &req).await;
        remaining.push((r.overall_code, r.statuses[0].limit_remaining));
    }
    // The day's figures (fewer left) until it denies.
    assert_eq!(remaining[0], (Code::Ok as i32, 9));
    assert_eq!(remaining[10], (Code::OverLimit as i32, 0));
    // The hour was charged 10, not 11: 2 left.
    let hourly = request(&[&[("user_id", "erin")]], 2);
    let r = ask(&mut client, &hourly).await;
    assert_eq!(
        r.overall_code,
        Code::OverLimit as i32,
        "the day still denies"
    );
}

#[tokio::test]
async fn tiers_shadow_rules_and_costs() {
    let text = r#"
[[rules]]
name = "per-user"
domain = "api"
descriptor = ["user_id"]
limit = 2
period_secs = 60
tiers = { "vip" = 5 }

[[rules]]
name = "strict"
domain = "api"
descriptor = ["user_id"]
limit = 1
period_secs = 60
shadow = true
"#;
    let mut client = serve(rules(text).await).await;
    let count_ok = |rs: &[RateLimitResponse]| {
        rs.iter()
            .filter(|r| r.overall_code == Code::Ok as i32)
            .count()
    };
    let mut vip = Vec::new();
    let mut plain = Vec::new();
    for _ in 0..6 {
        vip.push(ask(&mut client, &request(&[&[("user_id", "vip")]], 0)).await);
        plain.push(ask(&mut client, &request(&[&[("user_id", "frank")]], 0)).await);
    }
    assert_eq!((count_ok(&vip), count_ok(&plain)), (5, 2));
    assert_eq!(
        vip[0].statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        5
    );
    // The shadow rule never denies, and names itself from its 2nd call.
    assert!(vip[0].dynamic_metadata.is_none());
    let meta = vip[1].dynamic_metadata.as_ref().expect("shadow_denied");
    assert!(format!("{meta:?}").contains("strict"));
    // A cost larger than any limit is denied, never an error.
    let huge = ask(&mut client, &request(&[&[("user_id", "gina")]], u32::MAX)).await;
    assert_eq!(huge.overall_code, Code::OverLimit as i32);
    let mut per_descriptor = request(&[&[("user_id", "gina")]], 0);
    per_descriptor.descriptors[0].hits_addend =
        Some(envoy_types::pb::google::protobuf::UInt64Value { value: u64::MAX });
    assert_eq!(
        ask(&mut client, &per_descriptor).await.overall_code,
        Code::OverLimit as i32
    );
    // ... and cost gina nothing.
    assert_eq!(
        ask(&mut client, &request(&[&[("user_id", "gina")]], 2))
            .await
            .overall_code,
        Code::Ok as i32
    );
}

#[tokio::test]
async fn invalid_requests_are_invalid_argument() {
    let mut client = serve(rules(PER_USER).await).await;
    let mut empty_domain = request(&[&[("user_id", "a")]], 0);
    empty_domain.domain.clear();
    let mut unknown = request(&[&[("user_id", "a")]], 0);
    unknown.domain = "nope".into();
    let none = request(&[], 0);
    let too_many = request(&vec![[("user_id", "a")].as_slice(); 65], 0);
    for (req, needle) in [
        (empty_domain, "domain"),
        (unknown, "\"nope\""),
        (none, "descriptor"),
        (too_many, "at most 64"),
    ] {
        let status = client.should_rate_limit(req).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains(needle), "{}", status.message());
    }
}

#[tokio::test]
async fn failure_policies_when_redis_stops() {
    let redis = RedisServer::start();
    let text = format!(
        r#"
[backend]
kind = "redis-exact"
url = "{}"
command_timeout_ms = 100

[[rules]]
name = "closed"
domain = "api"
descriptor = ["user_id"]
limit = 100
period_secs = 60
failure = "closed"

[[rules]]
name = "open"
domain = "api"
descriptor = ["tenant"]
limit = 100
period_secs = 60
failure = "open"
"#,
        redis.url()
    );
    let mut client = serve(rules(&text).await).await;
    let user = request(&[&[("user_id", "h")]], 0);
    let tenant = request(&[&[("tenant", "t")]], 0);
    assert_eq!(ask(&mut client, &user).await.overall_code, Code::Ok as i32);
    redis.stop();
    let r = ask(&mut client, &user).await;
    assert_eq!(
        r.overall_code,
        Code::OverLimit as i32,
        "a fail-closed rule denies"
    );
    assert!(format!("{:?}", r.dynamic_metadata).contains("closed"));
    assert_eq!(
        ask(&mut client, &tenant).await.overall_code,
        Code::Ok as i32,
        "a fail-open rule admits"
    );
    redis.resume();
}

#[tokio::test]
async fn a_reload_keeps_counts_and_applies_new_limits() {
    let mut target = rules(&per_user_daily()).await;
    let mut client = serve(target.clone()).await;
    let req = request(&[&[("user_id", "ivan")]], 0);
    for _ in 0..8 {
        assert_eq!(ask(&mut client, &req).await.overall_code, Code::Ok as i32);
    }
    // The same rule with a higher limit: counts kept, 8 of 12 used.
    let raised = GatewayConfig::parse(
        "rls.toml",
        &per_user_daily().replace("limit = 10", "limit = 12"),
        None,
    )
    .unwrap();
    let reloaded = target.apply(&raised, "rls.toml").unwrap();
    assert_eq!(reloaded.rules[0].0, "per-user");
    let mut ok = 0;
    for _ in 0..6 {
        if ask(&mut client, &req).await.overall_code == Code::Ok as i32 {
            ok += 1;
        }
    }
    assert_eq!(ok, 4);
    // A file whose rule Envoy cannot be served keeps the running rules.
    let by_ip = GatewayConfig::parse(
        "rls.toml",
        "[[rules]]\nname = \"ip\"\nkey = \"ip\"\nlimit = 1\nperiod_secs = 60\n",
        None,
    )
    .unwrap();
    let err = target.apply(&by_ip, "rls.toml").unwrap_err();
    assert!(err.contains("rule \"ip\", field \"key\""), "{err}");
    assert_eq!(
        ask(&mut client, &req).await.overall_code,
        Code::OverLimit as i32
    );
}

#[tokio::test]
async fn one_rule_matched_twice_in_a_request_is_charged_all_or_nothing() {
    let mut client = serve(rules(&per_user_daily().replace("limit = 10", "limit = 3")).await).await;
    let twice = request(&[&[("user_id", "jo")], &[("user_id", "jo")]], 0);
    let once = request(&[&[("user_id", "jo")]], 0);
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    let first = ask(&mut client, &twice).await;
    assert_eq!(first.overall_code, ok);
    assert_eq!(
        (
            first.statuses[0].limit_remaining,
            first.statuses[1].limit_remaining
        ),
        (2, 1)
    );
    // 2 used, 2 asked: denied, and the first of the two given back.
    let second = ask(&mut client, &twice).await;
    assert_eq!(second.overall_code, over);
    assert_eq!(second.statuses[0].code, ok);
    assert_eq!(second.statuses[1].code, over);
    assert_eq!(
        ask(&mut client, &once).await.overall_code,
        ok,
        "the third unit was given back"
    );
    assert_eq!(ask(&mut client, &once).await.overall_code, over);
}

#[tokio::test]
async fn the_approximate_and_leased_modes_serve_envoy_too() {
    let redis = RedisServer::start();
    // (The leased mode leases a token bucket's tokens.)
    for (mode, algorithm) in [
        ("redis-approximate", "sliding_window_counter"),
        ("redis-leased", "token_bucket"),
    ] {
        let text = format!(
            "[backend]\nkind = \"{mode}\"\nurl = \"{}\"\nkey_prefix = \"{mode}:\"\n{}",
            redis.url(),
            PER_USER.replace("fixed_window", algorithm)
        );
        let mut client = serve(rules(&text).await).await;
        let req = request(&[&[("user_id", "kim")]], 0);
        let mut ok = 0;
        for _ in 0..30 {
            if ask(&mut client, &req).await.overall_code == Code::Ok as i32 {
                ok += 1;
            }
        }
        // One instance: its claim or its leases hold the quota.
        assert!((10..=11).contains(&ok), "{mode}: {ok} of 30 OK");
    }
}

#[tokio::test]
async fn the_examples_file_loads_and_serves() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/envoy_rls.toml");
    let config = GatewayConfig::load(path).unwrap();
    let rules = EnvoyRules::new(
        &config,
        path,
        throttle_fleet_core::memory::MemoryBackend::default(),
    )
    .unwrap();
    assert_eq!(
        rules.rule_names(),
        ["per-user", "per-user-daily", "search", "per-user-strict"]
    );
    let mut client = serve(rules).await;
    // The premium user's tier: 100 a minute, not 10.
    let r = ask(&mut client, &request(&[&[("user_id", "premium-user")]], 0)).await;
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        100
    );
}

/// An operator's block of a descriptor's key through one replica's rules
/// is answered OVER_LIMIT by the other replica, over gRPC, and lifted the
/// same way (each within the Redis backend's operations interval: waited
/// for here, at most 5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_made_on_one_replica_is_enforced_by_the_other() {
    let redis = RedisServer::start();
    let text = format!(
        "[backend]\nkind = \"redis-exact\"\nurl = \"{}\"\n{}",
        redis.url(),
        // Many a minute: asking until the block holds spends nothing near it.
        PER_USER.replace("limit = 10", "limit = 10000")
    );
    let (first, second) = (rules(&text).await, rules(&text).await);
    let mut other = serve(second).await;
    let req = request(&[&[("user_id", "mallory")]], 0);
    assert_eq!(ask(&mut other, &req).await.overall_code, Code::Ok as i32);
    let key = first
        .key_for("per-user", &[("user_id", "mallory")])
        .unwrap();
    let set = first.rules();
    let rule = set.index_of("per-user").unwrap();
    set.operate()
        .block(
            rule,
            &key,
            std::time::Duration::from_secs(60),
            "user_id=mallory",
        )
        .wait()
        .await
        .unwrap();
    assert!(
        until(&mut other, &req, Code::OverLimit).await,
        "the other replica never enforced the block"
    );
    let over = ask(&mut other, &req).await;
    let retry: u64 = header(&over, "retry-after").unwrap().parse().unwrap();
    assert!((58..=60).contains(&retry), "{retry}");
    // Another user is apart.
    let bob = request(&[&[("user_id", "bob")]], 0);
    assert_eq!(ask(&mut other, &bob).await.overall_code, Code::Ok as i32);
    assert!(set.operate().unblock(rule, &key).wait().await.unwrap().0);
    assert!(
        until(&mut other, &req, Code::Ok).await,
        "the other replica never lifted the block"
    );
}

/// A denial's wait is rounded up to whole seconds, as every answer of the
/// layer rounds it (`throttle_fleet_core::fields::retry_after_secs`):
/// never cut short, so a client that waits that long is admitted.
#[tokio::test]
async fn a_denials_wait_is_rounded_up_as_the_layer_rounds_it() {
    // 30.5 s into a minute: the fixed window ends 29.5 s after each call.
    let config = GatewayConfig::parse("rls.toml", PER_USER, None).unwrap();
    let clock = ManualClock::new(1_800_000_030_500_000);
    let backend = MemoryBackend::with_clock(clock);
    let mut client = serve(EnvoyRules::new(&config, "rls.toml", backend).unwrap()).await;
    let req = request(&[&[("user_id", "alice")]], 0);
    for _ in 0..10 {
        assert_eq!(ask(&mut client, &req).await.overall_code, Code::Ok as i32);
    }
    let over = ask(&mut client, &req).await;
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    assert_eq!(header(&over, "retry-after"), Some("30"));
    assert_eq!(header(&over, "ratelimit"), Some("\"per-user\";r=0;t=30"));
    let reset = over.statuses[0].duration_until_reset.unwrap();
    assert_eq!((reset.seconds, reset.nanos), (29, 500_000_000));
}

/// Whether `client` answers `req` with `code` within 5 s.
async fn until(
    client: &mut RateLimitServiceClient<Channel>,
    req: &RateLimitRequest,
    code: Code,
) -> bool {
    for _ in 0..250 {
        if ask(client, req).await.overall_code == code as i32 {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    false
}
