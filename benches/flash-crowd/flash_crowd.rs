//! The flash-crowd benchmark: a ticket sale opens, traffic jumps twentyfold
//! in three seconds, 70% of it bots, in front of a backend whose capacity is
//! a pool of connections. Twelve policies, the same traffic, one table.
//!
//! Run the whole comparison with `benches/flash-crowd/run.sh` (see the
//! README beside this file). The parts, by hand:
//!
//! ```sh
//! cargo run --release -p throttle-fleet-suite --example flash_crowd -- serve --policy rate --port 3000
//! cargo run --release -p throttle-fleet-suite --example flash_crowd -- drive --port 3000 --policy rate --out rate.json
//! cargo run --release -p throttle-fleet-suite --example flash_crowd -- report rate.json
//! ```
//!
//! `serve` is the backend (a pool of [`POOL`] permits held for the service
//! time, waiters queued without bound) behind one policy; `drive` sends the
//! scenario's open-loop traffic from many loopback source addresses and
//! writes what happened as JSON; `report` turns those files into the
//! table, the goals check and the plot. Only 127.0.0.0/8 is contacted.

// Not `main.rs`, which Cargo would also take for a bench target; hence
// the paths.
#[path = "drive.rs"]
mod drive;
#[path = "plot.rs"]
mod plot;
#[path = "report.rs"]
mod report;
#[path = "serve.rs"]
mod serve;
#[path = "../../examples/support/signal.rs"]
mod signal;
#[path = "traffic.rs"]
mod traffic;

use std::process::ExitCode;
use std::time::Duration;

/// Permits in the backend's pool: its capacity is a number of connections,
/// not a rate.
pub(crate) const POOL: usize = 16;
/// How long a request holds its permit, unloaded.
pub(crate) const SERVICE: Duration = Duration::from_millis(25);
/// How long a client waits for an answer before it counts the request as
/// not served.
pub(crate) const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// The HS256 secret the bench signs its clients' tokens with and the
/// server's `Jwt` extractor verifies them with (a bench's, never a real one).
pub(crate) const JWT_SECRET: &[u8] = b"flash-crowd bench secret, 32+ bytes long";
/// The header through which the driver tells the backend (never a limiter)
/// whether a request is a bot's, so that the bots that got through can be
/// counted where they arrive.
pub(crate) const WHO: &str = "x-bench-who";

/// The policies, in the table's order; the recommended one is
/// [`RECOMMENDED`].
pub(crate) const POLICIES: [&str; 12] = [
    "none",
    "rate",
    "rate+fixed",
    "rate+adaptive",
    "rate+adaptive+reserve",
    "rate+adaptive@2x",
    "rate+adaptive+reserve@2x",
    "tower-cl+shed",
    "rate+tower-acc",
    "rate+tower-acc@2x",
    "rate+resilience",
    "rate+resilience@2x",
];
/// The recommended policy, whose goals are those of the genuine buyers.
pub(crate) const RECOMMENDED: &str = "rate+adaptive+reserve";
/// The adaptive rule alone, whose goals are those of the algorithm: a
/// limit that finds the pool, a short queue, a busy backend.
pub(crate) const ADAPTIVE: &str = "rate+adaptive";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    let result = match command.as_str() {
        "serve" => serve::main(&rest),
        "drive" => drive::main(&rest),
        "report" => report::main(&rest),
        _ => Err("usage: flash_crowd serve|drive|report [options] (see the README)".to_owned()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("flash_crowd {command}: {e}");
            ExitCode::from(2)
        }
    }
}

/// `--name value` options, each given at most once; anything else is an
/// error naming it.
pub(crate) struct Options {
    pairs: Vec<(String, String)>,
    flags: Vec<String>,
}

impl Options {
    /// Parses `args`, where `flags` take no value.
    pub(crate) fn parse(args: &[String], flags: &[&str]) -> Result<Self, String> {
        let mut pairs = Vec::new();
        let mut set = Vec::new();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            if !arg.starts_with("--") {
                pairs.push((String::new(), arg.clone()));
            } else if flags.contains(&arg.as_str()) {
                set.push(arg.clone());
            } else {
                let value = it.next().ok_or(format!("{arg} needs a value"))?;
                pairs.push((arg.clone(), value.clone()));
            }
        }
        Ok(Self { pairs, flags: set })
    }

    /// The value of `--name`, if given.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `--name` parsed, or `default`.
    pub(crate) fn parsed<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("{name}: {v:?} is not valid")),
        }
    }

    /// Whether the flag `--name` was given.
    pub(crate) fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }

    /// The arguments that are not options (file names).
    pub(crate) fn positional(&self) -> impl Iterator<Item = &str> {
        self.pairs
            .iter()
            .filter(|(n, _)| n.is_empty())
            .map(|(_, v)| v.as_str())
    }
}
