//! A rule's `penalty` table: read as written into `Rule::with_penalty`, every
//! mistake named by file, line, rule and field.

use std::time::Duration;

use throttle_fleet_config::GatewayConfig;
use throttle_fleet_core::operate::Penalty;

/// A rule named `login` with `extra` lines added.
fn rule(extra: &str) -> String {
    format!("[[rules]]\nname = \"login\"\nkey = \"ip\"\nlimit = 5\nperiod_secs = 60\n{extra}")
}

#[test]
fn a_penalty_reads_as_written_fractions_allowed() {
    let text = rule(
        "penalty = { after = 10, within_secs = 60, block_secs = 0.5, max_block_secs = 3600, memory_secs = 7200 }\n",
    );
    let c = GatewayConfig::parse("g.toml", &text, None).unwrap_or_else(|e| panic!("{e}"));
    let want = Penalty::new(10, Duration::from_secs(60), Duration::from_millis(500))
        .with_max_block(Duration::from_secs(3600))
        .with_memory_window(Duration::from_secs(7200));
    assert_eq!(c.rules[0].rule.penalty(), Some(&want));

    // As a table of its own, with the defaults of max and memory.
    let text = rule("[rules.penalty]\nafter = 3\nwithin_secs = 10\nblock_secs = 60\n");
    let c = GatewayConfig::parse("g.toml", &text, None).unwrap_or_else(|e| panic!("{e}"));
    let want = Penalty::new(3, Duration::from_secs(10), Duration::from_secs(60));
    assert_eq!(c.rules[0].rule.penalty(), Some(&want));
    assert!(
        GatewayConfig::parse("g.toml", &rule(""), None)
            .unwrap()
            .rules[0]
            .rule
            .penalty()
            .is_none()
    );
}

#[test]
fn each_penalty_mistake_names_the_place_rule_and_field() {
    let p = |fields: &str| rule(&format!("penalty = {{ {fields} }}\n"));
    let cases = [
        (
            p("after = 0, within_secs = 60, block_secs = 60"),
            "g.toml:6:21: rule \"login\", field \"penalty.after\": must be at least 1 (got 0)",
        ),
        (
            p("within_secs = 60, block_secs = 60"),
            "g.toml:6:11: rule \"login\", field \"penalty.after\": is missing",
        ),
        (
            p("after = 5, block_secs = 60"),
            "rule \"login\", field \"penalty.within_secs\": is missing",
        ),
        (
            p("after = 5, within_secs = 60"),
            "rule \"login\", field \"penalty.block_secs\": is missing",
        ),
        (
            p("after = 5, within_secs = 86401, block_secs = 60"),
            "g.toml:6:38: rule \"login\", field \"penalty.within_secs\": must be from 1 ms to 1 days",
        ),
        (
            p("after = 5, within_secs = 0, block_secs = 60"),
            "g.toml:6:38: rule \"login\", field \"penalty.within_secs\": must be from 0.001 seconds",
        ),
        (
            p("after = 5, within_secs = 60, block_secs = 0.0001"),
            "rule \"login\", field \"penalty.block_secs\": must be from 0.001 seconds",
        ),
        (
            p("after = 5, within_secs = 60, block_secs = 1.0005"),
            "rule \"login\", field \"penalty.block_secs\": must be a whole number of milliseconds",
        ),
        (
            p("after = 5, within_secs = 60, block_secs = 60, max_block_secs = 30"),
            "rule \"login\", field \"penalty.max_block_secs\": must be at least the first block",
        ),
        (
            p("after = 5, within_secs = 60, block_secs = 60, memory_secs = 2592001"),
            "rule \"login\", field \"penalty.memory_secs\": must be from 1 ms to 30 days",
        ),
        (
            p("after = 5, within_secs = 60, block_secs = 60, forever = true"),
            "field \"forever\": unknown field `forever`",
        ),
        (
            rule("shadow = true\npenalty = { after = 5, within_secs = 60, block_secs = 60 }\n"),
            "g.toml:7:11: rule \"login\", field \"penalty\": does not apply to a shadow rule",
        ),
        (
            "[[rules]]\nname = \"c\"\nkey = \"ip\"\nalgorithm = \"concurrency\"\nlimit = 2\npenalty = { after = 5, within_secs = 60, block_secs = 60 }\n".to_owned(),
            "g.toml:6:11: rule \"c\", field \"penalty\": applies to enforced rate rules only",
        ),
    ];
    for (text, want) in &cases {
        let got = match GatewayConfig::parse("g.toml", text, None) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => e.to_string(),
        };
        assert!(got.contains(want), "for\n{text}\nwant: {want}\n got: {got}");
    }
}
