//! The loader on hostile input: arbitrary text, and a valid file with
//! bytes cut, repeated or replaced, never panics and never accepts a rule
//! whose quota could not work. (A longer run: `PROPTEST_CASES=100000 cargo
//! test -p throttle-fleet-config --test fuzz --release`.)

use proptest::prelude::*;
use throttle_fleet_config::GatewayConfig;

const VALID: &str = include_str!("../../../examples/gateway.toml");

fn check(text: &str) {
    if let Ok(config) = GatewayConfig::parse("fuzz.toml", text, None) {
        for r in &config.rules {
            r.rule.validate().expect("an accepted rule validates");
            assert!(r.rule.quota().limit() >= 1);
        }
    }
}

/// 512 cases in CI; `PROPTEST_CASES` asks for more
/// (`ProptestConfig::with_cases` alone would ignore it).
fn cases() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512);
    ProptestConfig::with_cases(cases)
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        check(&text);
    }

    #[test]
    fn a_mangled_valid_file_never_panics(
        edits in proptest::collection::vec((0usize..4_000, 0u8..3, any::<u8>()), 1..8)
    ) {
        let mut bytes = VALID.as_bytes().to_vec();
        for (at, op, b) in edits {
            let at = at % (bytes.len() + 1);
            match op {
                0 if at < bytes.len() => { bytes.remove(at); }
                1 => bytes.insert(at, b),
                _ if at < bytes.len() => bytes[at] = b,
                _ => {}
            }
        }
        check(&String::from_utf8_lossy(&bytes));
    }
}
