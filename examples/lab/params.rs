//! The simulation a request asks for: its query string, checked field by
//! field, with bounds that keep one simulation small.

use std::fmt;
use std::time::Duration;

use throttle_fleet_core::Quota;
use throttle_fleet_test_support::sim::{Custom, Pattern};

/// The most requests one simulation may send (against each of the five
/// algorithms): about 2 MB of JSON and a few milliseconds of work.
pub(crate) const MAX_REQUESTS: u64 = 20_000;
/// The largest limit, burst and burst size accepted.
pub(crate) const MAX_COUNT: u64 = 10_000;
/// The longest period, and the longest custom duration: one day.
pub(crate) const MAX_MS: u64 = 86_400_000;
/// The highest custom rate, in requests per second.
pub(crate) const MAX_RATE: f64 = 100_000.0;

/// What to simulate: a pattern against a quota.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Scenario {
    /// The traffic.
    pub(crate) pattern: Pattern,
    /// The quota every algorithm runs with (the buckets use its burst).
    pub(crate) quota: Quota,
}

impl Scenario {
    /// The page's first view: the boundary attack on 10 per 10 seconds.
    pub(crate) fn boundary_attack() -> Self {
        parse("").expect("the defaults are valid")
    }
}

/// A parameter that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadParam {
    /// The query parameter at fault.
    pub(crate) field: String,
    /// What is wrong with it.
    pub(crate) message: String,
}

impl BadParam {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for BadParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

const FIELDS: [&str; 9] = [
    "pattern",
    "limit",
    "period_ms",
    "burst",
    "seed",
    "rate",
    "duration_ms",
    "burst_size",
    "jitter_ms",
];

/// Parses a query string such as `pattern=bot_swarm&limit=100&period_ms=60000&seed=3`.
/// Every field is optional; unknown, repeated or unused fields are errors,
/// so a typo is never silently ignored.
pub(crate) fn parse(query: &str) -> Result<Scenario, BadParam> {
    let mut values: [Option<&str>; FIELDS.len()] = [None; FIELDS.len()];
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let Some(i) = FIELDS.iter().position(|f| *f == name) else {
            let shown: String = name.chars().take(40).collect();
            return Err(BadParam::new(
                shown,
                format!("unknown parameter; expected one of {}", FIELDS.join(", ")),
            ));
        };
        if values[i].replace(value).is_some() {
            return Err(BadParam::new(FIELDS[i], "given more than once"));
        }
    }
    let get = |name: &str| values[FIELDS.iter().position(|f| *f == name).unwrap()];

    let limit = int(get("limit"), "limit", 1, MAX_COUNT, 10)?;
    let period_ms = int(get("period_ms"), "period_ms", 1, MAX_MS, 10_000)?;
    let burst = int(get("burst"), "burst", 1, MAX_COUNT, limit)?;
    let quota = Quota::new(limit, Duration::from_millis(period_ms)).with_burst(burst);

    let name = get("pattern").unwrap_or("edge_burst");
    let uses = |fields: &[&str]| -> Result<(), BadParam> {
        for field in ["seed", "rate", "duration_ms", "burst_size", "jitter_ms"] {
            if get(field).is_some() && !fields.contains(&field) {
                return Err(BadParam::new(
                    field,
                    format!("is not used by pattern={name}"),
                ));
            }
        }
        Ok(())
    };
    let pattern = match name {
        "steady" => {
            uses(&[])?;
            Pattern::Steady
        }
        "edge_burst" => {
            uses(&[])?;
            Pattern::EdgeBurst
        }
        "bot_swarm" => {
            uses(&["seed"])?;
            Pattern::BotSwarm {
                seed: int(get("seed"), "seed", 0, u64::MAX, 1)?,
            }
        }
        "custom" => {
            uses(&["seed", "rate", "duration_ms", "burst_size", "jitter_ms"])?;
            // By default twice the quota's rate for three periods.
            let default_rate = 2.0 * limit as f64 * 1000.0 / period_ms as f64;
            let duration_ms = int(
                get("duration_ms"),
                "duration_ms",
                1,
                MAX_MS,
                (3 * period_ms).min(MAX_MS),
            )?;
            Pattern::Custom(Custom {
                start_us: 0,
                duration_us: duration_ms * 1000,
                rate_per_s: rate(get("rate"), default_rate)?,
                burst: int(get("burst_size"), "burst_size", 1, MAX_COUNT, 1)?,
                jitter_us: int(get("jitter_ms"), "jitter_ms", 0, duration_ms, 0)? * 1000,
                seed: int(get("seed"), "seed", 0, u64::MAX, 1)?,
            })
        }
        other => {
            let shown: String = other.chars().take(40).collect();
            return Err(BadParam::new(
                "pattern",
                format!(
                    "unknown pattern {shown:?}; expected steady, edge_burst, bot_swarm or custom"
                ),
            ));
        }
    };

    let count = pattern.count(quota);
    if count > MAX_REQUESTS {
        let (field, lower) = match pattern {
            Pattern::Custom(_) => ("rate", "the rate or the duration"),
            _ => ("limit", "the limit"),
        };
        return Err(BadParam::new(
            field,
            format!(
                "pattern={name} would send {count} requests; at most {MAX_REQUESTS}: lower {lower}"
            ),
        ));
    }
    Ok(Scenario { pattern, quota })
}

fn int(
    value: Option<&str>,
    field: &str,
    min: u64,
    max: u64,
    default: u64,
) -> Result<u64, BadParam> {
    let Some(value) = value else {
        return Ok(default);
    };
    let n: u64 = value.parse().map_err(|_| {
        let shown: String = value.chars().take(40).collect();
        BadParam::new(
            field,
            format!("must be a whole number from {min} to {max} (got {shown:?})"),
        )
    })?;
    if !(min..=max).contains(&n) {
        return Err(BadParam::new(
            field,
            format!("must be from {min} to {max} (got {n})"),
        ));
    }
    Ok(n)
}

fn rate(value: Option<&str>, default: f64) -> Result<f64, BadParam> {
    let Some(value) = value else {
        return Ok(default);
    };
    match value.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= MAX_RATE => Ok(r),
        _ => {
            let shown: String = value.chars().take(40).collect();
            Err(BadParam::new(
                "rate",
                format!(
                    "must be a number of requests per second above 0 and at most {MAX_RATE} (got {shown:?})"
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(query: &str) -> String {
        parse(query).unwrap_err().field
    }

    #[test]
    fn defaults_are_the_boundary_attack() {
        let s = Scenario::boundary_attack();
        assert_eq!(s.pattern, Pattern::EdgeBurst);
        assert_eq!(s.quota.limit(), 10);
        assert_eq!(s.quota.period(), Duration::from_secs(10));
        assert_eq!(s.quota.burst(), 10);
    }

    #[test]
    fn each_pattern_and_its_fields() {
        let s = parse("pattern=bot_swarm&limit=50&period_ms=1000&burst=80&seed=9").unwrap();
        assert_eq!(s.pattern, Pattern::BotSwarm { seed: 9 });
        assert_eq!((s.quota.limit(), s.quota.burst()), (50, 80));
        let s = parse("pattern=custom&rate=2.5&duration_ms=4000&burst_size=3&jitter_ms=20&seed=4")
            .unwrap();
        let Pattern::Custom(c) = s.pattern else {
            panic!("{s:?}")
        };
        assert_eq!(
            (c.rate_per_s, c.duration_us, c.burst, c.jitter_us, c.seed),
            (2.5, 4_000_000, 3, 20_000, 4)
        );
        assert_eq!(parse("pattern=steady").unwrap().pattern, Pattern::Steady);
    }

    #[test]
    fn every_bad_value_names_its_field() {
        assert_eq!(field("limit=0"), "limit");
        assert_eq!(field("limit=-3"), "limit");
        assert_eq!(field("limit=10001"), "limit");
        assert_eq!(field("limit=99999999999999999999999"), "limit");
        assert_eq!(field("period_ms=abc"), "period_ms");
        assert_eq!(field("period_ms=86400001"), "period_ms");
        assert_eq!(field("burst=0"), "burst");
        assert_eq!(field("pattern=flood"), "pattern");
        assert_eq!(field("pattern=bot_swarm&seed=x"), "seed");
        assert_eq!(field("pattern=custom&rate=NaN"), "rate");
        assert_eq!(field("pattern=custom&rate=inf"), "rate");
        assert_eq!(field("pattern=custom&rate=0"), "rate");
        assert_eq!(field("pattern=custom&duration_ms=0"), "duration_ms");
        assert_eq!(
            field("pattern=custom&duration_ms=1000&jitter_ms=1001"),
            "jitter_ms"
        );
        assert_eq!(field("pattern=custom&burst_size=0"), "burst_size");
        assert_eq!(field("limit=1&limit=2"), "limit");
        assert_eq!(field("colour=red"), "colour");
        assert_eq!(field("pattern=steady&seed=1"), "seed");
        assert_eq!(field("pattern=edge_burst&rate=1"), "rate");
    }

    #[test]
    fn a_simulation_cannot_be_made_large() {
        // 10,000 per period for three periods: 30,000 requests.
        let e = parse("pattern=steady&limit=10000").unwrap_err();
        assert_eq!(e.field, "limit");
        assert!(e.message.contains("30000 requests"), "{e}");
        // A swarm sends twenty times the limit.
        assert!(parse("pattern=bot_swarm&limit=1000").is_ok());
        assert_eq!(field("pattern=bot_swarm&limit=1001"), "limit");
        // 100,000 per second for a day.
        assert_eq!(
            field("pattern=custom&rate=100000&duration_ms=86400000"),
            "rate"
        );
        assert!(parse("pattern=custom&rate=100000&duration_ms=200").is_ok());
        // A name no one could type is cut short in the answer.
        assert!(parse(&"x".repeat(10_000)).unwrap_err().field.len() <= 40);
    }
}
