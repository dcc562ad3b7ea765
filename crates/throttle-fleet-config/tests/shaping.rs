//! A concurrency rule's `reserve`, `class`, `classes` and `adaptive` read
//! as written, every mistake named by rule and field.

use std::time::Duration;

use throttle_fleet_config::{GatewayConfig, KeySpec};
use throttle_fleet_core::Class;
use throttle_fleet_core::adaptive::Vegas;

/// A concurrency rule named `backend` of 64 slots with `extra` lines.
fn rule(extra: &str) -> String {
    format!(
        "[[rules]]\nname = \"backend\"\nkey = \"global\"\nalgorithm = \"concurrency\"\nlimit = 64\n{extra}"
    )
}

fn parse(text: &str) -> GatewayConfig {
    GatewayConfig::parse("g.toml", text, None).unwrap_or_else(|e| panic!("{e}"))
}

fn error(text: &str) -> String {
    GatewayConfig::parse("g.toml", text, None)
        .expect_err(text)
        .to_string()
}

#[test]
fn a_reserve_its_classes_and_an_adaptive_limit_read_as_written() {
    let c = parse(&rule(
        "reserve = 8\nclass = \"route\"\nclasses = { critical = [\"/book\"], sheddable = [\"/browse\", \"/search\"] }\nadaptive = { initial = 16, min = 4, window_secs = 0.25, probe_every = 40 }\n",
    ));
    let r = &c.rules[0];
    assert_eq!(r.rule.in_flight_limit().unwrap().reserve, 8);
    let want = Vegas::new()
        .initial(16)
        .min(4)
        .window(Duration::from_millis(250))
        .probe_every(40);
    assert_eq!(r.rule.in_flight_limit().unwrap().adaptive, Some(want));
    let class = r.class.as_ref().unwrap();
    assert_eq!(class.key, KeySpec::Route);
    assert_eq!(
        class.values,
        [
            ("/book".to_owned(), Class::Critical),
            ("/browse".to_owned(), Class::Sheddable),
            ("/search".to_owned(), Class::Sheddable),
        ]
    );
    // Without classes, a header's value names the class.
    let c = parse(&rule("reserve = 8\nclass = \"header:X-Priority\"\n"));
    let class = c.rules[0].class.as_ref().unwrap();
    assert_eq!(class.key, KeySpec::Header("x-priority".into()));
    assert_eq!(class.values.len(), 3);
    // An adaptive limit with its defaults needs no class.
    let c = parse(&rule("adaptive = {}\n"));
    assert_eq!(
        c.rules[0].rule.in_flight_limit().unwrap().adaptive,
        Some(Vegas::new())
    );
    assert!(c.rules[0].class.is_none());
}

#[test]
fn each_mistake_names_its_rule_and_field() {
    let cases = [
        (rule("reserve = 8\n"), "field \"reserve\": needs class"),
        (rule("reserve = 32\nclass = \"route\"\n"), "field \"reserve\": must be at most 31"),
        (rule("reserve = 0\nclass = \"route\"\n"), "field \"reserve\": must be at least 1"),
        (rule("class = \"route\"\n"), "field \"class\": applies to a concurrency rule with a reserve"),
        (rule("reserve = 2\nclass = \"ip\"\n"), "field \"class\": must be header:<name>, route or jwt:<claim>"),
        (rule("reserve = 2\nclass = \"jwt:tier\"\n"), "field \"class\": a jwt key needs a [jwt] table"),
        (
            rule("reserve = 2\nclass = \"route\"\nclasses = { critical = [\"/a\"], default = [\"/a\"] }\n"),
            "field \"classes\": \"/a\" is listed twice",
        ),
        (rule("reserve = 2\nclass = \"route\"\nclasses = {}\n"), "field \"classes\": must list from 1 to 64 values"),
        (rule("reserve = 2\nclass = \"route\"\nclasses = { urgent = [\"/a\"] }\n"), "unknown field `urgent`"),
        (rule("classes = { critical = [\"/a\"] }\n"), "field \"classes\": needs class"),
        (rule("adaptive = { initial = 100 }\n"), "field \"adaptive\": must be from adaptive.min (3) to the rule's limit 64"),
        (rule("adaptive = { min = 0 }\n"), "field \"adaptive.min\": must be at least 1"),
        (rule("adaptive = { probe_every = 1 }\n"), "field \"adaptive.probe_every\": must be at least 2"),
        (rule("adaptive = { window = 1 }\n"), "unknown field `window`"),
        (
            "[[rules]]\nname = \"ip\"\nkey = \"ip\"\nlimit = 5\nperiod_secs = 60\nreserve = 1\nclass = \"route\"\n".to_owned(),
            "field \"reserve\": applies only to algorithm = \"concurrency\", not token_bucket",
        ),
        (
            rule("adaptive = {}\ntiers = { \"x\" = 3 }\n").replace("key = \"global\"", "key = \"header:x\""),
            "field \"tiers\": a rule with a reserve or an adaptive limit has no tiers",
        ),
    ];
    for (text, want) in cases {
        let e = error(&text);
        assert!(e.contains(want), "{text}\n{e}\nwanted: {want}");
        assert!(e.contains("g.toml:"), "{e}");
    }
}
