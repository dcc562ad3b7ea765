use throttle_fleet_config::GatewayConfig;

use super::*;

fn catalog(rules: &str) -> Catalog {
    Catalog::new(&GatewayConfig::parse("t.toml", rules, None).unwrap().rules)
}

fn found(
    c: &Catalog,
    domain: &str,
    entries: &[(&str, &str)],
) -> Result<Vec<(usize, Key)>, UnknownDomain> {
    let mut out = Vec::new();
    c.matches(domain, entries.iter().map(|(k, v)| (*k, *v)), |r, k| {
        out.push((r, k))
    })?;
    Ok(out)
}

const RULES: &str = r#"
    [[rules]]
    name = "user"
    domain = "api"
    descriptor = ["user_id"]
    limit = 10
    period_secs = 60

    [[rules]]
    name = "user-hourly"
    domain = "api"
    descriptor = ["user_id"]
    limit = 100
    period_secs = 3600

    [[rules]]
    name = "search"
    domain = "api"
    descriptor = ["path=/search", "user_id"]
    limit = 5
    period_secs = 1

    [[rules]]
    name = "other"
    domain = "web"
    descriptor = ["user_id"]
    limit = 5
    period_secs = 1
"#;

#[test]
fn entries_match_in_order_with_fixed_values() {
    let c = catalog(RULES);
    // Both rules on user_id apply: a minute and an hour.
    assert_eq!(
        found(&c, "api", &[("user_id", "a")]).unwrap(),
        vec![(0, Key::new("a")), (1, Key::new("a"))]
    );
    assert_eq!(
        found(&c, "api", &[("path", "/search"), ("user_id", "a")]).unwrap(),
        vec![(2, Key::new("a"))]
    );
    // Another fixed value, another order, an extra or a missing entry.
    assert!(
        found(&c, "api", &[("path", "/other"), ("user_id", "a")])
            .unwrap()
            .is_empty()
    );
    assert!(
        found(&c, "api", &[("user_id", "a"), ("path", "/search")])
            .unwrap()
            .is_empty()
    );
    assert!(
        found(&c, "api", &[("user_id", "a"), ("x", "y")])
            .unwrap()
            .is_empty()
    );
    assert!(found(&c, "api", &[("path", "/search")]).unwrap().is_empty());
    assert!(found(&c, "api", &[]).unwrap().is_empty());
    // Domains are apart.
    assert_eq!(
        found(&c, "web", &[("user_id", "a")]).unwrap(),
        vec![(3, Key::new("a"))]
    );
    assert_eq!(found(&c, "nope", &[("user_id", "a")]), Err(UnknownDomain));
}

#[test]
fn a_bucket_id_matches_by_its_keys_in_any_order() {
    let c = catalog(RULES);
    let bucket = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let found = |domain: &str, b: &HashMap<String, String>| {
        let mut out = Vec::new();
        c.matches_bucket(domain, b, |r, k| out.push((r, k)))
            .map(|()| out)
    };
    assert_eq!(
        found("api", &bucket(&[("user_id", "a"), ("path", "/search")])).unwrap(),
        vec![(2, Key::new("a"))]
    );
    assert_eq!(found("api", &bucket(&[("user_id", "a")])).unwrap().len(), 2);
    assert!(
        found("api", &bucket(&[("user_id", "a"), ("path", "/x")]))
            .unwrap()
            .is_empty()
    );
    assert!(found("api", &bucket(&[("x", "a")])).unwrap().is_empty());
    assert_eq!(
        found("nope", &bucket(&[("user_id", "a")])),
        Err(UnknownDomain)
    );
}
