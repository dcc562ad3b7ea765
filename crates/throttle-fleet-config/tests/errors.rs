//! Every way a file can be wrong gets an error naming the file, the rule
//! and the field at the value's line and column; what validates is what
//! was written.

use std::time::Duration;

use throttle_fleet_config::{
    BackendKind, GatewayConfig, HeaderStyle, InvalidHello, KeySpec, TlsIdentity,
};
use throttle_fleet_core::limits::DEFAULT_SLOT_TTL;
use throttle_fleet_core::{FailurePolicy, Quota, algorithm::Algorithm};

fn error(text: &str) -> String {
    match GatewayConfig::parse("g.toml", text, None) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// A rule with `extra` lines added.
fn rule(extra: &str) -> String {
    format!("[[rules]]\nname = \"r\"\nkey = \"ip\"\nlimit = 10\nperiod_secs = 60\n{extra}")
}

/// A concurrency rule of 2 slots with `extra` lines added.
fn concurrency(extra: &str) -> String {
    format!(
        "[[rules]]\nname = \"c\"\nkey = \"ip\"\nalgorithm = \"concurrency\"\nlimit = 2\n{extra}"
    )
}

#[test]
fn a_full_file_reads_as_written() {
    let text = r#"
listen = "127.0.0.1:8080"
trusted_proxies = ["10.0.0.0/8", "127.0.0.1", "fd00::/8"]
proxy_hops = 2
headers = "ietf"

[metrics]
listen = "127.0.0.1:9090"

[server]
max_connections = 500
max_connections_per_client = 20
header_timeout_secs = 3
idle_timeout_secs = 30
write_timeout_secs = 15
body_timeout_secs = 20
body_min_bytes_per_sec = 2000

[backend]
kind = "redis-leased"
url = "redis://127.0.0.1:6379"
command_timeout_ms = 20
fleet_size = 4
batch = 100

[[rules]]
name = "ip"
key = "ip"
ipv4_prefix = 24
algorithm = "sliding_window_counter"
limit = 100
period_secs = 60
failure = "local"

[[rules]]
name = "tenant"
key = "header:X-Api-Key"
algorithm = "token_bucket"
limit = 1000
period_secs = 60
burst = 200
tiers = { "premium-key" = 5000 }

[[rules]]
name = "search"
key = "route"
routes = ["/search"]
algorithm = "fixed_window"
limit = 20
period_secs = 60
shadow = true

[[rules]]
name = "bots"
key = "composite"
parts = ["ip", "user-agent"]
limit = 5
period_secs = 1
failure = "closed"
"#;
    let c = GatewayConfig::parse("g.toml", text, None).unwrap();
    assert_eq!(c.listen.unwrap().to_string(), "127.0.0.1:8080");
    let proxies: Vec<String> = c.trusted_proxies.iter().map(ToString::to_string).collect();
    assert_eq!(proxies, ["10.0.0.0/8", "127.0.0.1/32", "fd00::/8"]);
    assert_eq!(c.proxy_hops, Some(2));
    assert_eq!(c.headers, HeaderStyle::Ietf);
    let only = text.replace("headers = \"ietf\"", "headers = \"ietf-only\"");
    let only = GatewayConfig::parse("g.toml", &only, None).unwrap();
    assert_eq!(only.headers, HeaderStyle::IetfOnly);
    assert_eq!(c.metrics_listen.unwrap().port(), 9090);
    assert_eq!(c.server.max_connections, 500);
    assert_eq!(c.server.header_timeout, Duration::from_secs(3));
    assert_eq!(c.server.idle_timeout, Duration::from_secs(30));
    assert_eq!(c.server.write_timeout, Duration::from_secs(15));
    assert_eq!(c.server.body_timeout, Duration::from_secs(20));
    assert_eq!(c.server.body_min_bytes_per_sec, 2000);
    assert_eq!(c.server.max_connections_per_client, 20);
    assert_eq!(c.backend.kind, BackendKind::RedisLeased);
    assert_eq!(c.backend.command_timeout, Some(Duration::from_millis(20)));
    assert_eq!(
        (c.backend.fleet_size, c.backend.batch),
        (Some(4), Some(100))
    );
    let [ip, tenant, search, bots] = &c.rules[..] else {
        panic!("{} rules", c.rules.len())
    };
    assert_eq!(
        ip.key,
        KeySpec::Ip {
            ipv4_prefix: 24,
            ipv6_prefix: 64
        }
    );
    assert_eq!(ip.rule.algorithm(), Algorithm::SlidingWindowCounter);
    assert_eq!(ip.rule.failure_policy(), FailurePolicy::LocalFallback);
    assert_eq!(tenant.key, KeySpec::Header("x-api-key".into()));
    assert_eq!(tenant.rule.quota().burst(), 200);
    assert_eq!(tenant.tiers.len(), 1);
    assert_eq!(tenant.tiers[0].0, "premium-key");
    assert_eq!(tenant.tiers[0].1.limit(), 5000);
    assert_eq!(
        tenant.tiers[0].1.burst(),
        1000,
        "the burst scales with the tier"
    );
    assert_eq!(search.routes.as_deref(), Some(&["/search".to_owned()][..]));
    assert!(search.shadow && !ip.shadow);
    assert_eq!(search.rule.algorithm(), Algorithm::FixedWindow);
    assert_eq!(
        bots.key,
        KeySpec::Composite(vec![
            KeySpec::Ip {
                ipv4_prefix: 32,
                ipv6_prefix: 64
            },
            KeySpec::UserAgent
        ])
    );
    assert_eq!(bots.rule.failure_policy(), FailurePolicy::FailClosed);
    assert_eq!(bots.rule.quota().period(), Duration::from_secs(1));
}

#[test]
fn a_concurrency_rule_reads_as_written() {
    let text = r#"
[[rules]]
name = "inflight"
key = "header:X-Api-Key"
algorithm = "concurrency"
limit = 4
slot_ttl_secs = 2.5
tiers = { "premium-key" = 16 }

[[rules]]
name = "whole"
key = "global"
algorithm = "concurrency"
limit = 100
slot_ttl_secs = 30
shadow = true

[[rules]]
name = "default-ttl"
key = "ip"
algorithm = "concurrency"
limit = 1
"#;
    let c = GatewayConfig::parse("g.toml", text, None).unwrap_or_else(|e| panic!("{e}"));
    let [inflight, whole, default] = &c.rules[..] else {
        panic!("{} rules", c.rules.len())
    };
    assert_eq!(inflight.rule.algorithm(), Algorithm::Concurrency);
    assert_eq!(inflight.rule.quota(), Quota::in_flight(4));
    assert_eq!(
        inflight.rule.in_flight_limit().unwrap().slot_ttl,
        Duration::from_millis(2500)
    );
    assert_eq!(
        inflight.tiers,
        [("premium-key".to_owned(), Quota::in_flight(16))]
    );
    assert_eq!(whole.rule.quota(), Quota::in_flight(100));
    assert_eq!(
        whole.rule.in_flight_limit().unwrap().slot_ttl,
        Duration::from_secs(30)
    );
    assert!(whole.shadow);
    assert_eq!(
        default.rule.in_flight_limit().unwrap().slot_ttl,
        DEFAULT_SLOT_TTL
    );
}

#[test]
fn the_gateway_example_file_validates() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/gateway.toml");
    let c = GatewayConfig::load(path).unwrap_or_else(|e| panic!("{e}"));
    assert!(c.rules.len() >= 5);
}

#[test]
fn each_error_names_the_place_rule_and_field() {
    let cases: Vec<(String, &str)> = vec![
        // Parser errors: unknown and missing fields, types, syntax.
        (
            rule("limt = 5\n"),
            "g.toml:6:1: field \"limt\": unknown field `limt`",
        ),
        (
            "[[rules]]\nname = \"r\"\nkey = \"ip\"\nperiod_secs = 60\n".into(),
            "field \"limit\": missing field `limit`",
        ),
        (
            rule("shadow = \"yes\"\n"),
            "g.toml:6:10: field \"file\": invalid type",
        ),
        ("listen = \n".into(), "g.toml:1:10: field \"file\""),
        ("".into(), "g.toml: field \"rules\": has no [[rules]]"),
        // Top level.
        (
            format!("listen = \"nowhere\"\n{}", rule("")),
            "g.toml:1:10: field \"listen\": must be an address and port",
        ),
        (
            format!("trusted_proxies = [\"10.0.0.0/33\"]\n{}", rule("")),
            "g.toml:1:20: field \"trusted_proxies\": \"10.0.0.0/33\" needs a prefix length from 0 to 32",
        ),
        (
            format!("trusted_proxies = [\"proxy.local\"]\n{}", rule("")),
            "field \"trusted_proxies\": \"proxy.local\" is not an IP address",
        ),
        (
            format!("proxy_hops = 0\n{}", rule("")),
            "g.toml:1:14: field \"proxy_hops\": must be at least 1 (got 0)",
        ),
        (
            format!("headers = \"draft\"\n{}", rule("")),
            "field \"headers\": must be \"x-ratelimit\", \"ietf\" or \"ietf-only\"",
        ),
        (
            format!("[metrics]\nlisten = \"9090\"\n{}", rule("")),
            "g.toml:2:10: field \"metrics.listen\"",
        ),
        (
            format!("[server]\nidle_timeout_secs = 0\n{}", rule("")),
            "g.toml:2:21: field \"server.idle_timeout_secs\"",
        ),
        (
            format!("[server]\nwrite_timeout_secs = 0\n{}", rule("")),
            "g.toml:2:22: field \"server.write_timeout_secs\": must be at least 1 (got 0)",
        ),
        (
            format!("[server]\nbody_timeout_secs = 0\n{}", rule("")),
            "g.toml:2:21: field \"server.body_timeout_secs\": must be at least 1 (got 0)",
        ),
        (
            format!("[server]\nbody_min_bytes_per_sec = 0\n{}", rule("")),
            "g.toml:2:26: field \"server.body_min_bytes_per_sec\": must be at least 1 (got 0)",
        ),
        (
            format!("[server]\nmax_connections_per_client = 0\n{}", rule("")),
            "g.toml:2:30: field \"server.max_connections_per_client\"",
        ),
        // Backend.
        (
            format!("[backend]\nkind = \"postgres\"\n{}", rule("")),
            "g.toml:2:8: field \"backend.kind\": must be memory, redis-exact",
        ),
        (
            format!("[backend]\nkind = \"redis-exact\"\n{}", rule("")),
            "field \"backend.url\": a Redis backend needs url (or cluster, or sentinel)",
        ),
        (
            format!(
                "[backend]\nkind = \"memory\"\nurl = \"redis://x\"\n{}",
                rule("")
            ),
            "g.toml:3:7: field \"backend.url\": applies only to Redis backends, not to memory",
        ),
        (
            format!(
                "[backend]\nkind = \"redis-exact\"\nurl = \"http://x\"\n{}",
                rule("")
            ),
            "field \"backend.url\": must start with redis://",
        ),
        (
            format!(
                "[backend]\nkind = \"redis-exact\"\nurl = \"redis://x\"\nspans = 10\n{}",
                rule("")
            ),
            "field \"backend.spans\": applies only to redis-approximate",
        ),
        (
            format!(
                "[backend]\nkind = \"redis-leased\"\nurl = \"redis://x\"\nbatch = 5000\n{}",
                rule("")
            ),
            "field \"backend.batch\": must be at most 4096 (got 5000)",
        ),
        (
            format!(
                "[backend]\nkind = \"redis-exact\"\nurl = \"redis://x\"\ncluster = [\"redis://y\"]\n{}",
                rule("")
            ),
            "field \"backend.cluster\": give either url",
        ),
        (
            format!(
                "[backend]\nkind = \"redis-exact\"\nurl = \"redis://x\"\nsentinel = {{ nodes = [\"redis://y:26379\"], service = \"m\" }}\n{}",
                rule("")
            ),
            "g.toml:4:12: field \"backend.sentinel\": give one of url (one Redis), cluster (seed nodes) or sentinel",
        ),
        (
            format!(
                "[backend]\nkind = \"memory\"\nsentinel = {{ nodes = [\"redis://y:26379\"], service = \"m\" }}\n{}",
                rule("")
            ),
            "field \"backend.sentinel\": applies only to Redis backends, not to memory",
        ),
        (
            format!(
                "[backend]\nkind = \"redis-exact\"\nsentinel = {{ nodes = [], service = \"m\" }}\n{}",
                rule("")
            ),
            "field \"backend.sentinel.nodes\": needs at least one sentinel URL",
        ),
        (
            format!(
                "[backend]\nkind = \"redis-exact\"\nsentinel = {{ nodes = [\"redis://y:26379\", \"y:26379\"], service = \"m\" }}\n{}",
                rule("")
            ),
            "field \"backend.sentinel.nodes\": each must start with redis:// or rediss:// (entry 1 does not)",
        ),
        (
            format!(
                "[backend]\nkind = \"redis-exact\"\nsentinel = {{ nodes = [\"redis://y:26379\"], service = \"\" }}\n{}",
                rule("")
            ),
            "field \"backend.sentinel.service\": needs the name the sentinels know the primary by",
        ),
        (
            format!(
                "[backend]\nkind = \"redis-exact\"\nurl = \"redis://x\"\ncommand_timeout_ms = 0\n{}",
                rule("")
            ),
            "field \"backend.command_timeout_ms\": must be at least 1",
        ),
        // JWT.
        (
            format!(
                "[jwt]\nalgorithm = \"none\"\nsecret_env = \"X\"\n{}",
                rule("")
            ),
            "g.toml:2:13: field \"jwt.algorithm\": must be HS256, RS256 or ES256",
        ),
        (
            format!(
                "[jwt]\nalgorithm = \"HS256\"\nsecret_env = \"THROTTLE_CONFIG_TEST_UNSET\"\n{}",
                rule("")
            ),
            "field \"jwt.secret_env\": names \"THROTTLE_CONFIG_TEST_UNSET\", which is not set",
        ),
        (
            format!(
                "[jwt]\nalgorithm = \"RS256\"\npublic_key_file = \"missing.pem\"\n{}",
                rule("")
            ),
            "field \"jwt.public_key_file\": \"missing.pem\" is not a readable file",
        ),
        (
            format!(
                "[jwt]\nalgorithm = \"RS256\"\nsecret_env = \"X\"\n{}",
                rule("")
            ),
            "field \"jwt.public_key_file\": RS256 needs public_key_file",
        ),
        // TLS.
        (
            format!("[tls]\n{}", rule("")),
            "g.toml:1:1: field \"tls.cert_file\": [tls] needs cert_file and key_file (PEM), or self_signed = true",
        ),
        (
            format!("[tls]\ncert_file = \"cert.pem\"\n{}", rule("")),
            "field \"tls.key_file\": cert_file needs key_file",
        ),
        (
            format!(
                "[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\nself_signed = true\n{}",
                rule("")
            ),
            "g.toml:2:13: field \"tls.self_signed\": give either cert_file and key_file or self_signed = true, not both",
        ),
        (
            format!(
                "[tls]\ncert_file = \"missing.pem\"\nkey_file = \"missing.pem\"\n{}",
                rule("")
            ),
            "g.toml:2:13: field \"tls.cert_file\": \"missing.pem\" cannot be read as PEM",
        ),
        (
            format!(
                "[tls]\ncert_file = \"Cargo.toml\"\nkey_file = \"Cargo.toml\"\n{}",
                rule("")
            ),
            "g.toml:2:13: field \"tls.cert_file\": \"Cargo.toml\" holds no CERTIFICATE block",
        ),
        (
            format!(
                "[tls]\nself_signed = true\nhandshake_timeout_secs = 0\n{}",
                rule("")
            ),
            "g.toml:3:26: field \"tls.handshake_timeout_secs\": must be at least 1 (got 0)",
        ),
        (
            format!(
                "[tls]\nself_signed = true\ninvalid_hello = \"ignore\"\n{}",
                rule("")
            ),
            "g.toml:3:17: field \"tls.invalid_hello\": must be \"close\" or \"proceed\" (got \"ignore\")",
        ),
        (
            format!("[tls]\nself_signed = true\ncert = \"c.pem\"\n{}", rule("")),
            "g.toml:3:1: field \"cert\": unknown field `cert`",
        ),
        (
            rule("").replace("key = \"ip\"", "key = \"tls-fingerprint\""),
            "g.toml:3:7: rule \"r\", field \"key\": a tls-fingerprint key needs a [tls] table",
        ),
        (
            rule("parts = [\"ip\", \"tls-fingerprint\", \"user-agent\"]\n")
                .replace("key = \"ip\"", "key = \"composite\""),
            "g.toml:6:16: rule \"r\", field \"parts\": a tls-fingerprint key needs a [tls] table",
        ),
        // Rules.
        (
            rule("").replace("limit = 10", "limit = 0"),
            "g.toml:4:9: rule \"r\", field \"limit\": must be at least 1 (got 0)",
        ),
        (
            rule("").replace("period_secs = 60", "period_secs = -1"),
            "g.toml:5:15: rule \"r\", field \"period_secs\": must be at least 1 (got -1)",
        ),
        (
            rule("").replace("name = \"r\"", "name = \"a b\""),
            "g.toml:2:8: rule \"a b\", field \"name\": may hold only ASCII letters",
        ),
        (
            format!("{}{}", rule(""), rule("")),
            "g.toml:7:8: rule \"r\", field \"name\": is used by an earlier rule",
        ),
        (
            rule("algorithm = \"gcra\"\n"),
            "g.toml:6:13: rule \"r\", field \"algorithm\": must be one of fixed_window, sliding_window_log",
        ),
        (
            rule("algorithm = \"fixed_window\"\nburst = 5\n"),
            "g.toml:7:9: rule \"r\", field \"burst\": applies only to token_bucket and leaky_bucket",
        ),
        (
            rule("burst = 0\n"),
            "rule \"r\", field \"burst\": must be at least 1 (got 0)",
        ),
        (
            rule("cost = 11\n"),
            "g.toml:6:8: rule \"r\", field \"cost\": must not exceed the rule's capacity of 10",
        ),
        (
            rule("failure = \"maybe\"\n"),
            "g.toml:6:11: rule \"r\", field \"failure\": must be open, closed or local",
        ),
        (
            rule("routes = []\n"),
            "rule \"r\", field \"routes\": needs at least one route template",
        ),
        (
            rule("routes = [\"search\"]\n"),
            "g.toml:6:11: rule \"r\", field \"routes\": \"search\" is not a route template",
        ),
        (
            rule("tiers = { gold = 0 }\n"),
            "g.toml:6:18: rule \"r\", field \"tiers\": must be at least 1 (got 0)",
        ),
        (
            rule("tiers = { \"\" = 5 }\n"),
            "rule \"r\", field \"tiers\": a tier's key must not be empty",
        ),
        // Concurrency rules.
        (
            concurrency("period_secs = 60\n"),
            "g.toml:6:15: rule \"c\", field \"period_secs\": does not apply to a concurrency rule",
        ),
        (
            concurrency("burst = 5\n"),
            "g.toml:6:9: rule \"c\", field \"burst\": applies only to token_bucket and leaky_bucket, not concurrency",
        ),
        (
            concurrency("slot_ttl_secs = 0.05\n"),
            "g.toml:6:17: rule \"c\", field \"slot_ttl_secs\": must be from 0.1 to 86400 seconds (got 0.05)",
        ),
        (
            concurrency("slot_ttl_secs = 86401\n"),
            "g.toml:6:17: rule \"c\", field \"slot_ttl_secs\": must be from 0.1 to 86400 seconds (got 86401)",
        ),
        (
            concurrency("slot_ttl_secs = 0.1005\n"),
            "g.toml:6:17: rule \"c\", field \"slot_ttl_secs\": must be a whole number of milliseconds",
        ),
        (
            concurrency("slot_ttl_secs = \"5s\"\n"),
            "g.toml:6:17: field \"file\": invalid type",
        ),
        (
            rule("slot_ttl_secs = 5\n"),
            "g.toml:6:17: rule \"r\", field \"slot_ttl_secs\": applies only to algorithm = \"concurrency\", not token_bucket",
        ),
        (
            concurrency("cost = 3\n"),
            "g.toml:6:8: rule \"c\", field \"cost\": must not exceed the rule's capacity of 2",
        ),
        (
            concurrency("tiers = { gold = 0 }\n"),
            "g.toml:6:18: rule \"c\", field \"tiers\": must be at least 1 (got 0)",
        ),
        (
            "[[rules]]\nname = \"r\"\nkey = \"ip\"\nlimit = 10\n".into(),
            "g.toml:1:1: rule \"r\", field \"period_secs\": is missing: a token_bucket rule needs one",
        ),
        (
            "[[rules]]\nname = \"r\"\nkey = \"ip\"\nalgorithm = \"fixed_window\"\nlimit = 10\n"
                .into(),
            "rule \"r\", field \"period_secs\": is missing: a fixed_window rule needs one",
        ),
        (
            rule("algorithm = \"semaphore\"\n"),
            "rule \"r\", field \"algorithm\": must be one of fixed_window, sliding_window_log, sliding_window_counter, token_bucket, leaky_bucket, concurrency (got \"semaphore\")",
        ),
        // Keys.
        (
            rule("").replace("key = \"ip\"", "key = \"cookie\""),
            "g.toml:3:7: rule \"r\", field \"key\": must be ip, header:<name>, route, jwt:<claim>, user-agent, tls-fingerprint, global or composite (got \"cookie\")",
        ),
        (
            rule("").replace("key = \"ip\"", "key = \"header:\""),
            "rule \"r\", field \"key\": \"\" is not a header name",
        ),
        (
            rule("").replace("key = \"ip\"", "key = \"header:x y\""),
            "rule \"r\", field \"key\": \"x y\" is not a header name",
        ),
        (
            rule("").replace("key = \"ip\"", "key = \"jwt:sub\""),
            "rule \"r\", field \"key\": a jwt key needs a [jwt] table",
        ),
        (
            rule("ipv4_prefix = 33\n"),
            "g.toml:6:15: rule \"r\", field \"ipv4_prefix\": must be at most 32 (got 33)",
        ),
        (
            rule("ipv6_prefix = 0\n"),
            "rule \"r\", field \"ipv6_prefix\": must be at least 1 (got 0)",
        ),
        (
            rule("ipv4_prefix = 24\n").replace("key = \"ip\"", "key = \"route\""),
            "rule \"r\", field \"ipv4_prefix\": applies only to keys by ip",
        ),
        (
            rule("").replace("key = \"ip\"", "key = \"composite\""),
            "rule \"r\", field \"parts\": a composite key needs parts",
        ),
        (
            rule("parts = [\"ip\"]\n").replace("key = \"ip\"", "key = \"composite\""),
            "rule \"r\", field \"parts\": a composite key has 2 to 4 parts (got 1)",
        ),
        (
            rule("parts = [\"ip\", \"composite\"]\n")
                .replace("key = \"ip\"", "key = \"composite\""),
            "rule \"r\", field \"parts\": a part cannot itself be composite",
        ),
        (
            rule("parts = [\"ip\", \"nope\"]\n").replace("key = \"ip\"", "key = \"composite\""),
            "g.toml:6:16: rule \"r\", field \"parts\": must be ip",
        ),
        (
            rule("parts = [\"ip\", \"route\"]\n"),
            "rule \"r\", field \"parts\": applies only to key = \"composite\"",
        ),
    ];
    for (text, want) in &cases {
        let got = error(text);
        assert!(got.contains(want), "for\n{text}\nwant: {want}\n got: {got}");
    }
}

#[test]
fn the_composite_key_for_unauthenticated_clients_reads_as_written() {
    let text = format!(
        "[tls]\nself_signed = true\n{}",
        rule("parts = [\"ip\", \"tls-fingerprint\", \"user-agent\"]\nipv4_prefix = 24\n")
            .replace("key = \"ip\"", "key = \"composite\"")
    );
    let c = GatewayConfig::parse("g.toml", &text, None).unwrap_or_else(|e| panic!("{e}"));
    let tls = c.tls.unwrap();
    assert!(matches!(tls.identity, TlsIdentity::SelfSigned));
    assert_eq!(tls.handshake_timeout, Duration::from_secs(5));
    assert_eq!(tls.invalid_hello, InvalidHello::Close);
    assert_eq!(
        c.rules[0].key,
        KeySpec::Composite(vec![
            KeySpec::Ip {
                ipv4_prefix: 24,
                ipv6_prefix: 64
            },
            KeySpec::TlsFingerprint,
            KeySpec::UserAgent
        ])
    );
    let alone = format!(
        "[tls]\nself_signed = true\ninvalid_hello = \"proceed\"\nhandshake_timeout_secs = 2\n{}",
        rule("").replace("key = \"ip\"", "key = \"tls-fingerprint\"")
    );
    let c = GatewayConfig::parse("g.toml", &alone, None).unwrap();
    assert_eq!(c.rules[0].key, KeySpec::TlsFingerprint);
    let tls = c.tls.unwrap();
    assert_eq!(tls.invalid_hello, InvalidHello::Proceed);
    assert_eq!(tls.handshake_timeout, Duration::from_secs(2));
}

#[test]
fn tls_files_are_read_and_checked_when_the_file_is_loaded() {
    let dir =
        std::env::temp_dir().join(format!("throttle-fleet-config-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(dir.join("cert.pem"), made.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), made.signing_key.serialize_pem()).unwrap();
    let file = |cert: &str, key: &str| {
        let path = dir.join("g.toml");
        let text = format!(
            "[tls]\ncert_file = \"{cert}\"\nkey_file = \"{key}\"\n{}",
            rule("")
        );
        std::fs::write(&path, text).unwrap();
        GatewayConfig::load(&path)
    };

    let c = file("cert.pem", "key.pem").unwrap_or_else(|e| panic!("{e}"));
    let Some(TlsIdentity::Pem {
        cert_file,
        cert_chain,
        key,
        ..
    }) = c.tls.map(|t| t.identity)
    else {
        panic!("not read from PEM files")
    };
    assert_eq!(cert_file, dir.join("cert.pem"));
    assert_eq!(cert_chain.len(), 1);
    assert_eq!(cert_chain[0].as_ref(), made.cert.der().as_ref());
    assert_eq!(
        key.secret_der(),
        made.signing_key.serialize_der().as_slice()
    );

    let e = file("cert.pem", "cert.pem").unwrap_err();
    assert_eq!((e.field(), e.position()), ("tls.key_file", Some((3, 12))));
    assert!(e.message().contains("cannot be read as PEM"), "{e}");
    let e = file("key.pem", "key.pem").unwrap_err();
    assert_eq!((e.field(), e.position()), ("tls.cert_file", Some((2, 13))));
    assert!(e.message().contains("holds no CERTIFICATE block"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_gateway_tls_example_file_validates() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/gateway-tls.toml"
    );
    let c = GatewayConfig::load(path).unwrap_or_else(|e| panic!("{e}"));
    assert!(c.tls.is_some());
    assert!(
        matches!(&c.rules[0].key, KeySpec::Composite(parts) if parts.contains(&KeySpec::TlsFingerprint))
    );
}

#[test]
fn a_file_that_cannot_be_read_says_so() {
    let e = GatewayConfig::load("no/such/gateway.toml").unwrap_err();
    assert_eq!(e.field(), "file");
    assert!(
        e.to_string()
            .starts_with("no/such/gateway.toml: field \"file\": cannot be read"),
        "{e}"
    );
}
