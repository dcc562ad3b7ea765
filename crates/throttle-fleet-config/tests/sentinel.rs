//! The `[backend]` table's Sentinel form: read into the model, and a
//! mistake named by its field.

use throttle_fleet_config::{BackendKind, GatewayConfig, SentinelConfig};

const RULE: &str = "[[rules]]\nname = \"r\"\nkey = \"ip\"\nlimit = 10\nperiod_secs = 60\n";

#[test]
fn a_sentinel_backend_is_read_from_the_file() {
    let text = format!(
        "[backend]\nkind = \"redis-exact\"\nsentinel = {{ nodes = [\"redis://:pw@10.0.0.1:26379\", \"redis://10.0.0.2:26379\"], service = \"mymaster\" }}\n{RULE}"
    );
    let config = GatewayConfig::parse("g.toml", &text, None).unwrap();
    let backend = config.backend;
    assert_eq!(backend.kind, BackendKind::RedisExact);
    assert_eq!(backend.url, None);
    assert_eq!(
        backend.sentinel,
        Some(SentinelConfig {
            nodes: vec![
                "redis://:pw@10.0.0.1:26379".to_owned(),
                "redis://10.0.0.2:26379".to_owned()
            ],
            service: "mymaster".to_owned(),
        })
    );
    // The sentinels' URLs may hold a password: never printed.
    assert!(!format!("{:?}", backend.sentinel).contains("pw"));
}

#[test]
fn a_sentinel_table_without_its_service_is_refused_by_name() {
    let text = format!(
        "[backend]\nkind = \"redis-exact\"\nsentinel = {{ nodes = [\"redis://10.0.0.1:26379\"] }}\n{RULE}"
    );
    let e = GatewayConfig::parse("g.toml", &text, None).unwrap_err();
    assert!(e.to_string().contains("service"), "{e}");
}
