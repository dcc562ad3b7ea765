//! Rules served to Envoy: `domain` and `descriptor` instead of `key`, the
//! `[rls]` table, and the errors that name the field when they are
//! misused.

use std::time::Duration;

use throttle_fleet_config::{Descriptor, DescriptorEntry, GatewayConfig, KeySpec, RlsConfig};
use throttle_fleet_core::Quota;

fn error(text: &str) -> String {
    match GatewayConfig::parse("g.toml", text, None) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// A descriptor rule with `extra` lines added.
fn rule(extra: &str) -> String {
    format!("[[rules]]\nname = \"d\"\nlimit = 10\nperiod_secs = 60\n{extra}")
}

#[test]
fn a_descriptor_rule_reads_as_written() {
    let text = format!(
        "[rls]\nlisten = \"127.0.0.1:9000\"\nreport_interval_secs = 2\n\n{}",
        rule(
            "domain = \"api\"\ndescriptor = [\"path=/search\", \"user_id\"]\ntiers = { \"alice\" = 50 }\n"
        )
    );
    let config = GatewayConfig::parse("g.toml", &text, None).unwrap();
    assert_eq!(
        config.rls,
        Some(RlsConfig {
            listen: "127.0.0.1:9000".parse().unwrap(),
            report_interval: Duration::from_secs(2),
            ..RlsConfig::default()
        })
    );
    let d = Descriptor {
        domain: "api".into(),
        entries: vec![
            DescriptorEntry {
                key: "path".into(),
                value: Some("/search".into()),
            },
            DescriptorEntry {
                key: "user_id".into(),
                value: None,
            },
        ],
    };
    assert_eq!(config.rules[0].key, KeySpec::Descriptor(d));
    assert_eq!(
        config.rules[0].tiers,
        vec![("alice".to_owned(), Quota::per_minute(50))]
    );
    // Without [rls], the defaults.
    let plain = GatewayConfig::parse(
        "g.toml",
        &rule("domain = \"api\"\ndescriptor = [\"u\"]\n"),
        None,
    )
    .unwrap();
    assert_eq!(plain.rls, None);
    assert_eq!(
        RlsConfig::default().listen,
        "127.0.0.1:8081".parse().unwrap()
    );
}

#[test]
fn misuse_names_the_field() {
    let cases = [
        (
            rule("descriptor = [\"u\"]\n"),
            "field \"domain\": is missing",
        ),
        (
            rule("domain = \"api\"\n"),
            "field \"domain\": applies only with a descriptor",
        ),
        (rule(""), "field \"key\": is missing"),
        (
            rule("key = \"ip\"\ndomain = \"api\"\ndescriptor = [\"u\"]\n"),
            "field \"key\": does not apply to a rule with a descriptor",
        ),
        (
            rule("domain = \"\"\ndescriptor = [\"u\"]\n"),
            "field \"domain\": must not be empty",
        ),
        (
            rule("domain = \"api\"\ndescriptor = []\n"),
            "field \"descriptor\": has 1 to 8 entries (got 0)",
        ),
        (
            rule("domain = \"api\"\ndescriptor = [\"=x\"]\n"),
            "field \"descriptor\": \"=x\" has no entry name",
        ),
        (
            rule("domain = \"api\"\ndescriptor = [\"u\"]\nroutes = [\"/a\"]\n"),
            "field \"routes\": does not apply to a rule with a descriptor",
        ),
        (
            rule("domain = \"api\"\ndescriptor = [\"u\"]\nipv4_prefix = 24\n"),
            "field \"ipv4_prefix\": applies only to keys by ip",
        ),
        (
            rule("domain = \"api\"\ndescriptor = [\"path=/x\"]\ntiers = { \"a\" = 5 }\n"),
            "field \"tiers\": \"a\" is not a key of this descriptor",
        ),
        (
            rule("domain = \"api\"\ndescriptor = [\"t\", \"u\"]\ntiers = { \"a\" = 5 }\n"),
            "field \"tiers\": \"a\" is not a key of this descriptor",
        ),
        (
            format!(
                "[rls]\nreport_interval_secs = 0\n{}",
                rule("domain = \"a\"\ndescriptor = [\"u\"]\n")
            ),
            "field \"rls.report_interval_secs\": must be at least 1",
        ),
        (
            format!(
                "[rls]\nlisten = \"nowhere\"\n{}",
                rule("domain = \"a\"\ndescriptor = [\"u\"]\n")
            ),
            "field \"rls.listen\": must be an address",
        ),
    ];
    for (text, expected) in cases {
        let got = error(&text);
        assert!(
            got.contains(expected),
            "{text}\nwanted {expected:?}, got {got:?}"
        );
        assert!(got.contains("rule \"d\"") || got.contains("rls."), "{got}");
    }
}

#[test]
fn a_server_layer_refuses_a_descriptor_rule() {
    struct Plain;
    fn peer(_: &throttle_fleet_tower::RequestHead<'_>) -> Option<std::net::SocketAddr> {
        None
    }
    impl throttle_fleet_config::build::Integration for Plain {
        type Peer = fn(&throttle_fleet_tower::RequestHead<'_>) -> Option<std::net::SocketAddr>;
        type Responder = throttle_fleet_tower::HttpResponder;
        type Bodies = throttle_fleet_tower::Wrap;
        fn peer(&self) -> Self::Peer {
            peer
        }
        fn route(&self, _: Option<&[String]>) -> Box<dyn throttle_fleet_tower::KeyExtractor> {
            Box::new(throttle_fleet_tower::key::Global)
        }
        fn responder(&self, c: &GatewayConfig) -> Self::Responder {
            c.headers.responder()
        }
    }
    let config = GatewayConfig::parse(
        "g.toml",
        &rule("domain = \"api\"\ndescriptor = [\"u\"]\n"),
        None,
    )
    .unwrap();
    let Err(err) = throttle_fleet_config::build::policy(&config, "g.toml", &Plain) else {
        panic!("a descriptor rule has no extractor");
    };
    let err = err.to_string();
    assert!(err.contains("rule \"d\", field \"descriptor\""), "{err}");
    assert!(err.contains("throttle-fleet-envoy"), "{err}");
}

#[test]
fn the_rls_bounds_read_as_written_and_refuse_zero_naming_the_field() {
    let text = "[rls]\nmax_connections = 10\nmax_connections_per_client = 2\nmax_streams_per_connection = 8\n\
                keepalive_interval_secs = 5\nkeepalive_timeout_secs = 3\nmax_streams = 20\n\
                max_buckets = 1000\nmax_buckets_per_stream = 100\nmax_stream_bytes = 4096\nmax_bucket_id_bytes = 64\n\n";
    let rules = rule("domain = \"api\"\ndescriptor = [\"user_id\"]\n");
    let rls = GatewayConfig::parse("g.toml", &format!("{text}{rules}"), None)
        .unwrap()
        .rls
        .unwrap();
    assert_eq!(
        rls,
        RlsConfig {
            max_connections: 10,
            max_connections_per_client: 2,
            max_streams_per_connection: 8,
            keepalive_interval: Duration::from_secs(5),
            keepalive_timeout: Duration::from_secs(3),
            max_streams: 20,
            max_buckets: 1000,
            max_buckets_per_stream: 100,
            max_stream_bytes: 4096,
            max_bucket_id_bytes: 64,
            ..RlsConfig::default()
        }
    );
    for field in [
        "max_connections",
        "max_connections_per_client",
        "max_streams_per_connection",
        "keepalive_interval_secs",
        "keepalive_timeout_secs",
        "max_streams",
        "max_buckets",
        "max_buckets_per_stream",
        "max_stream_bytes",
        "max_bucket_id_bytes",
    ] {
        let text = format!("[rls]\n{field} = 0\n\n{rules}");
        let err = GatewayConfig::parse("g.toml", &text, None).unwrap_err();
        assert_eq!(err.field(), format!("rls.{field}"), "{err}");
        assert!(err.to_string().contains("at least 1"), "{err}");
    }
}
