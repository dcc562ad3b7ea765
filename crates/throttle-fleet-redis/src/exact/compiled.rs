//! A rule's algorithm compiled for the exact mode's scripts: the keys it
//! touches, the arguments it sends and how its replies read.

use crate::link::LuaScript;
use throttle_fleet_core::algorithm::Step;
use throttle_fleet_core::algorithm::{
    FixedWindow, FixedWindowState, Gcra, GcraState, Meter, SlidingWindowCounter,
    SlidingWindowCounterState, SlidingWindowLog,
};
use throttle_fleet_core::{ConfigError, Rule, algorithm::Algorithm};

use crate::algorithm_scripts::{
    FIXED_WINDOW_BATCH_SCRIPT, FIXED_WINDOW_READ_SCRIPT, FIXED_WINDOW_REFUND_SCRIPT,
    GCRA_BATCH_SCRIPT, GCRA_READ_SCRIPT, GCRA_REFUND_SCRIPT, SLIDING_COUNTER_BATCH_SCRIPT,
    SLIDING_COUNTER_READ_SCRIPT, SLIDING_COUNTER_REFUND_SCRIPT, SLIDING_LOG_READ_SCRIPT,
    SLIDING_LOG_REFUND_SCRIPT,
};
use crate::link::Eval;
use crate::reply::Reply;

/// The scripts add the bucket's depth to Unix-epoch microseconds in Lua
/// doubles, exact below 2^53: depths up to 2^52 us (about 140 years) fit.
const MAX_LUA_TAU_US: u64 = 1 << 52;

fn lua_safe(gcra: Gcra, rule: &Rule) -> Result<Gcra, ConfigError> {
    if gcra.tau().0 > MAX_LUA_TAU_US {
        return Err(ConfigError::new(
            "quota.burst",
            "makes the bucket take more than 2^52 us (about 140 years) to fill, beyond what the Redis scripts count exactly",
        )
        .in_rule(rule.name()));
    }
    Ok(gcra)
}

/// A rule's algorithm, compiled, as the exact mode runs it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Compiled {
    Fixed(FixedWindow),
    Counter(SlidingWindowCounter),
    Log(SlidingWindowLog),
    Gcra(Gcra),
}

impl Compiled {
    pub(super) fn of(rule: &Rule) -> Result<Self, ConfigError> {
        rule.validate()?;
        let q = rule.quota();
        let named = |e: ConfigError| e.in_rule(rule.name());
        Ok(match rule.algorithm() {
            Algorithm::FixedWindow => Self::Fixed(FixedWindow::new(q).map_err(named)?),
            Algorithm::SlidingWindowCounter => {
                Self::Counter(SlidingWindowCounter::new(q).map_err(named)?)
            }
            Algorithm::SlidingWindowLog => Self::Log(SlidingWindowLog::new(q).map_err(named)?),
            Algorithm::TokenBucket => {
                Self::Gcra(lua_safe(Gcra::token_bucket(q).map_err(named)?, rule)?)
            }
            Algorithm::LeakyBucket => {
                Self::Gcra(lua_safe(Gcra::leaky_bucket(q).map_err(named)?, rule)?)
            }
            other => {
                return Err(ConfigError::new(
                    "algorithm",
                    format!("{} is not supported by the Redis backends", other.name()),
                )
                .in_rule(rule.name()));
            }
        })
    }

    pub(super) fn suffixes(&self) -> &'static [&'static str] {
        match self {
            Self::Fixed(_) => &["fw"],
            Self::Counter(_) => &["swc"],
            Self::Log(_) => &["log", "logm"],
            Self::Gcra(_) => &["gcra"],
        }
    }

    /// The script that runs many checks of this rule in one call, for
    /// every algorithm but the log (whose checks each walk a sorted set).
    pub(super) fn batch_script(&self) -> Option<&'static LuaScript> {
        match self {
            Self::Fixed(_) => Some(&FIXED_WINDOW_BATCH_SCRIPT),
            Self::Counter(_) => Some(&SLIDING_COUNTER_BATCH_SCRIPT),
            Self::Gcra(_) => Some(&GCRA_BATCH_SCRIPT),
            Self::Log(_) => None,
        }
    }

    /// The batch script's arguments after the keys: "now", the rule's
    /// parameters, then each check's cost.
    pub(super) fn batch_args(&self, inv: &mut Eval, now: u64, costs: impl Iterator<Item = u64>) {
        inv.arg(now);
        match self {
            Self::Fixed(m) => {
                inv.arg(m.capacity()).arg(m.period_us());
                costs.for_each(|c| {
                    inv.arg(c);
                });
            }
            Self::Counter(m) => {
                inv.arg(m.capacity()).arg(m.period_us());
                costs.for_each(|c| {
                    inv.arg(c);
                });
            }
            Self::Gcra(m) => {
                let (tau_us, tau_rem) = m.tau();
                inv.arg(m.limit()).arg(tau_us).arg(tau_rem);
                costs.for_each(|c| {
                    let (inc_us, inc_rem) = m.increment(c);
                    inv.arg(inc_us).arg(inc_rem);
                });
            }
            Self::Log(_) => {}
        }
    }

    /// Reads check `j` of `checks` in a batch script's reply: its step and
    /// "now", with the same report code the memory backend uses.
    pub(super) fn batch_step(
        &self,
        reply: &Reply,
        j: usize,
        checks: usize,
        cost: u64,
    ) -> Option<(Step, u64)> {
        let n = |i: usize| reply.u64(i);
        Some(match self {
            Self::Fixed(m) => {
                let at = 4 * j;
                let st = FixedWindowState {
                    window: n(at + 1)?,
                    count: n(at + 2)?,
                };
                let now = n(at + 3)?;
                (m.report(&st, now, cost, n(at)? == 1), now)
            }
            Self::Counter(m) => {
                let at = 5 * j;
                let st = SlidingWindowCounterState {
                    window: n(at + 1)?,
                    cur: n(at + 2)?,
                    prev: n(at + 3)?,
                };
                let now = n(at + 4)?;
                (m.report(&st, now, cost, n(at)? == 1), now)
            }
            Self::Gcra(m) => {
                let at = 3 * j;
                let st = GcraState {
                    tat_us: n(at + 1)?,
                    tat_rem: n(at + 2)?,
                };
                let now = n(3 * checks)?;
                (m.report(&st, now, cost, n(at)? == 1), now)
            }
            Self::Log(_) => return None,
        })
    }

    /// The log's arguments after the keys.
    pub(super) fn log_args(m: &SlidingWindowLog, inv: &mut Eval, now: u64, cost: u64) {
        inv.arg(now).arg(m.capacity()).arg(m.period_us()).arg(cost);
    }

    /// Turns the log script's reply into the step and the script's "now".
    pub(super) fn log_step(m: &SlidingWindowLog, reply: &Reply, cost: u64) -> Option<(Step, u64)> {
        let n = |i: usize| reply.u64(i);
        let allowed = n(0)? == 1;
        let (total, now) = (n(1)?, n(2)?);
        let newest = reply.int(3)?;
        let fit = reply.int(4)?;
        let period = m.period_us();
        let step = Step {
            allowed,
            remaining: m.capacity() - total.min(m.capacity()),
            reset_us: u64::try_from(newest).map_or(0, |at| at + period - now),
            retry_after_us: match (allowed, u64::try_from(fit)) {
                (true, _) => 0,
                (false, Ok(at)) if cost <= m.capacity() => at + period - now,
                (false, _) => period,
            },
            delay_us: 0,
        };
        Some((step, now))
    }

    /// The script that reads a key's state as a check of cost 0 would
    /// find it, writing nothing.
    pub(super) fn read_script(&self) -> &'static LuaScript {
        match self {
            Self::Fixed(_) => &FIXED_WINDOW_READ_SCRIPT,
            Self::Counter(_) => &SLIDING_COUNTER_READ_SCRIPT,
            Self::Log(_) => &SLIDING_LOG_READ_SCRIPT,
            Self::Gcra(_) => &GCRA_READ_SCRIPT,
        }
    }

    /// The read script's arguments after the keys: "now" and the rule's
    /// parameters, as its check's.
    pub(super) fn read_args(&self, inv: &mut Eval, now: u64) {
        match self {
            Self::Log(m) => Self::log_args(m, inv, now, 0),
            _ => self.batch_args(inv, now, std::iter::empty()),
        }
    }

    /// Reads the read script's reply, as its check's of cost 0.
    pub(super) fn read_step(&self, reply: &Reply) -> Option<(Step, u64)> {
        match self {
            Self::Log(m) => Self::log_step(m, reply, 0),
            _ => self.batch_step(reply, 0, 1, 0),
        }
    }

    pub(super) fn refund_script(&self) -> &'static LuaScript {
        match self {
            Self::Fixed(_) => &FIXED_WINDOW_REFUND_SCRIPT,
            Self::Counter(_) => &SLIDING_COUNTER_REFUND_SCRIPT,
            Self::Log(_) => &SLIDING_LOG_REFUND_SCRIPT,
            Self::Gcra(_) => &GCRA_REFUND_SCRIPT,
        }
    }

    /// The refund script's arguments after the keys.
    pub(super) fn refund_args(&self, inv: &mut Eval, at: u64, cost: u64) {
        match self {
            Self::Fixed(m) => inv.arg(at).arg(m.period_us()).arg(cost),
            Self::Counter(m) => inv.arg(at).arg(m.period_us()).arg(cost),
            Self::Log(_) => inv.arg(at).arg(cost),
            Self::Gcra(m) => {
                let (inc_us, inc_rem) = m.increment(cost);
                inv.arg(m.limit()).arg(inc_us).arg(inc_rem)
            }
        };
    }
}
