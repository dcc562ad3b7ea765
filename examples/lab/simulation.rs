//! One scenario against all five algorithms, and the same run as JSON.

use serde_json::{Value, json};
use throttle_fleet_core::algorithm::Algorithm;
use throttle_fleet_test_support::sim::{self, Simulation};

use crate::params::{BadParam, Scenario};

/// A scenario's traffic and what each algorithm decided for it.
#[derive(Debug)]
pub(crate) struct Lab {
    /// What was asked for.
    pub(crate) scenario: Scenario,
    /// The time axis, from 0: the pattern's span.
    pub(crate) span_us: u64,
    /// The five runs, in [`Algorithm::ALL`]'s order.
    pub(crate) runs: Vec<Simulation>,
}

/// What the page calls each algorithm.
pub(crate) fn label(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::FixedWindow => "Fixed window",
        Algorithm::SlidingWindowLog => "Sliding window log",
        Algorithm::SlidingWindowCounter => "Sliding window counter",
        Algorithm::TokenBucket => "Token bucket",
        Algorithm::LeakyBucket => "Leaky bucket",
        _ => "Other",
    }
}

/// The most a key can spend at once: the bucket for the buckets, the
/// window's limit for the others.
pub(crate) fn capacity(run: &Simulation) -> u64 {
    if run.algorithm.uses_burst() {
        run.quota.burst()
    } else {
        run.quota.limit()
    }
}

impl Lab {
    /// Runs the scenario against every algorithm through the library's
    /// simulator (the memory backend on a manual clock).
    pub(crate) fn run(scenario: Scenario) -> Result<Self, BadParam> {
        let events = scenario.pattern.events(scenario.quota);
        let runs = Algorithm::ALL
            .into_iter()
            .map(|a| sim::simulate(a, scenario.quota, &events))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| BadParam {
                field: e.field().to_owned(),
                message: e.to_string(),
            })?;
        Ok(Self {
            scenario,
            span_us: scenario.pattern.span_us(scenario.quota),
            runs,
        })
    }

    /// The whole simulation, column by column: what the page draws.
    pub(crate) fn to_json(&self) -> Value {
        let q = self.scenario.quota;
        // The patterns are in time order, so every run saw the same times.
        let at_us: Vec<u64> = self.runs[0]
            .run
            .steps
            .iter()
            .map(|(e, _)| e.at_us)
            .collect();
        let algorithms: Vec<Value> = self
            .runs
            .iter()
            .map(|r| {
                let s = &r.summary;
                let steps = &r.run.steps;
                json!({
                    "algorithm": r.algorithm.name(),
                    "label": label(r.algorithm),
                    "capacity": capacity(r),
                    "windows": matches!(r.algorithm, Algorithm::FixedWindow | Algorithm::SlidingWindowCounter),
                    "summary": {
                        "requests": s.requests,
                        "admitted": s.admitted,
                        "denied": s.denied,
                        "limit": s.limit,
                        "period_us": s.period_us,
                        "worst_window": s.worst_window,
                        "worst_window_start_us": s.worst_window_start_us,
                        "first_denial_us": s.first_denial_us,
                    },
                    "allowed": steps.iter().map(|(_, st)| u8::from(st.allowed)).collect::<Vec<_>>(),
                    "remaining": steps.iter().map(|(_, st)| st.remaining).collect::<Vec<_>>(),
                    "retry_after_us": steps.iter().map(|(_, st)| st.retry_after_us).collect::<Vec<_>>(),
                    "delay_us": steps.iter().map(|(_, st)| st.delay_us).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "pattern": self.scenario.pattern.name(),
            "quota": {
                "limit": q.limit(),
                "period_us": q.period().as_micros() as u64,
                "burst": q.burst(),
            },
            "span_us": self.span_us,
            "requests": at_us.len(),
            "at_us": at_us,
            "algorithms": algorithms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::parse;

    #[test]
    fn the_json_is_the_simulators_run_column_by_column() {
        let lab = Lab::run(parse("pattern=edge_burst&limit=10&period_ms=10000").unwrap()).unwrap();
        let v = lab.to_json();
        assert_eq!(v["requests"], 20);
        assert_eq!(v["span_us"], 20_000_000);
        let algorithms = v["algorithms"].as_array().unwrap();
        assert_eq!(algorithms.len(), 5);
        let names: Vec<&str> = algorithms
            .iter()
            .map(|a| a["algorithm"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "fixed_window",
                "sliding_window_log",
                "sliding_window_counter",
                "token_bucket",
                "leaky_bucket"
            ]
        );
        let fw = &algorithms[0];
        assert_eq!(fw["summary"]["admitted"], 20);
        assert_eq!(fw["summary"]["worst_window"], 20);
        assert_eq!(fw["summary"]["first_denial_us"], Value::Null);
        let log = &algorithms[1];
        assert_eq!(log["summary"]["admitted"], 10);
        assert_eq!(log["summary"]["first_denial_us"], 10_000_000);
        for a in algorithms {
            for column in ["allowed", "remaining", "retry_after_us", "delay_us"] {
                assert_eq!(a[column].as_array().unwrap().len(), 20, "{column}");
            }
        }
        // The counter's one extra request, at the boundary.
        assert_eq!(algorithms[2]["summary"]["worst_window"], 11);
    }
}
