//! The scenarios' traffic, planned in advance from a seed so that every
//! policy meets the same requests: who the clients are (address, token,
//! User-Agent) and when each request arrives.
//!
//! The flash crowd: genuine clients send 150 requests a second in all
//! (baseline, no bots yet), then within the ramp the genuine load grows to
//! 900 a second and 2,100 a second of bots join (3,000 in all, twentyfold,
//! 70% bots), held to the end. 28% of genuine requests are `/book` (250 a
//! second at the peak), the rest `/browse`; bots ask for either half the
//! time. The arithmetic: the pool serves [`POOL`](crate::POOL) /
//! [`SERVICE`](crate::SERVICE) = 640 requests a second, so genuine demand
//! alone (900) is above capacity while genuine `/book` (250) is well under
//! it: only a limiter that knows which requests matter can serve every
//! one of those.

use std::net::Ipv4Addr;
use std::time::Duration;

use throttle_fleet_test_support::Rng;

/// One client: the address it connects from, its token's subject if it
/// signs in, its User-Agent, and whether it is a bot.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub(crate) addr: Ipv4Addr,
    pub(crate) subject: Option<String>,
    pub(crate) user_agent: String,
    pub(crate) bot: bool,
}

/// A planned request: when (from the scenario's start), by whom, to which
/// route.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival {
    pub(crate) at: Duration,
    pub(crate) client: u32,
    pub(crate) book: bool,
}

/// The flash crowd's phases.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Phases {
    pub(crate) base: Duration,
    pub(crate) ramp: Duration,
    pub(crate) hold: Duration,
}

impl Phases {
    /// The full scenario: 3 s baseline, 3 s ramp, 10 s at the peak.
    pub(crate) const FULL: Self = Self {
        base: Duration::from_secs(3),
        ramp: Duration::from_secs(3),
        hold: Duration::from_secs(10),
    };
    /// `QUICK=1`: 2 s, 1 s, 3 s.
    pub(crate) const QUICK: Self = Self {
        base: Duration::from_secs(2),
        ramp: Duration::from_secs(1),
        hold: Duration::from_secs(3),
    };

    pub(crate) fn total(&self) -> Duration {
        self.base + self.ramp + self.hold
    }

    /// 0 (baseline), 1 (ramp) or 2 (peak) for a time from the start.
    pub(crate) fn of(&self, at: Duration) -> u8 {
        if at < self.base {
            0
        } else if at < self.base + self.ramp {
            1
        } else {
            2
        }
    }

    /// How far the ramp has gone at `at`: 0 before it, 1 after it.
    fn progress(&self, at: Duration) -> f64 {
        let t = at.saturating_sub(self.base).as_secs_f64();
        (t / self.ramp.as_secs_f64()).min(1.0)
    }
}

/// Genuine requests a second before the sale opens.
pub(crate) const GENUINE_BASE: f64 = 150.0;
/// Genuine requests a second at the peak.
pub(crate) const GENUINE_PEAK: f64 = 900.0;
/// Bot requests a second at the peak (none before the sale).
pub(crate) const BOTS_PEAK: f64 = 2_100.0;
/// The share of genuine requests that are `/book`: 250 of 900 a second.
pub(crate) const GENUINE_BOOK: f64 = 250.0 / 900.0;
/// The share of bot requests that are `/book`.
pub(crate) const BOTS_BOOK: f64 = 0.5;
/// The share of bot requests sent by the few signed-in bot accounts; the
/// rest come from the address swarm.
pub(crate) const BOTS_SIGNED_IN: f64 = 0.3;

/// The shared address of the clients behind a carrier-grade NAT.
pub(crate) const CGNAT: Ipv4Addr = Ipv4Addr::new(127, 1, 0, 1);
/// The swarm's User-Agent.
pub(crate) const BOT_UA: &str = "Mozilla/5.0 (compatible; TicketGrabber/2.1)";

const BROWSERS: [&str; 6] = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:127.0) Gecko/20100101 Firefox/127.0",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/125.0.0.0 Safari/537.36",
];

/// Who the clients are, by index: `genuine` first, then the bots.
#[derive(Debug, Clone)]
pub(crate) struct Population {
    pub(crate) identities: Vec<Identity>,
    /// Indices of genuine clients.
    genuine: Vec<u32>,
    /// Indices of the signed-in bots' connections (each account uses a
    /// few addresses).
    signed_in_bots: Vec<u32>,
    /// Indices of the swarm's addresses.
    swarm: Vec<u32>,
}

/// Signed-in genuine clients behind the CGNAT address (told apart by their
/// token's subject).
pub(crate) const CGNAT_SIGNED_IN: usize = 30;
/// Anonymous genuine clients behind the CGNAT address (told apart by their
/// User-Agent).
pub(crate) const CGNAT_ANONYMOUS: usize = 10;
/// Other signed-in genuine clients, each on its own address.
pub(crate) const SIGNED_IN: usize = 370;
/// Other anonymous genuine clients, two to a /24.
pub(crate) const ANONYMOUS: usize = 190;
/// Bot accounts hammering with valid tokens.
pub(crate) const BOT_ACCOUNTS: usize = 5;
/// Addresses each bot account spreads its requests over.
pub(crate) const BOT_ACCOUNT_ADDRS: usize = 4;
/// The swarm's /24s and addresses in each.
pub(crate) const SWARM_NETS: usize = 3;
pub(crate) const SWARM_PER_NET: usize = 250;

impl Population {
    pub(crate) fn new() -> Self {
        let mut identities = Vec::new();
        let mut genuine = Vec::new();
        let mut push = |list: &mut Vec<u32>, id: Identity| {
            list.push(identities.len() as u32);
            identities.push(id);
        };
        for i in 0..CGNAT_SIGNED_IN {
            let id = Identity {
                addr: CGNAT,
                subject: Some(format!("cgnat-user-{i}")),
                user_agent: BROWSERS[i % BROWSERS.len()].to_owned(),
                bot: false,
            };
            push(&mut genuine, id);
        }
        for i in 0..CGNAT_ANONYMOUS {
            // Different devices behind one address: each its own browser build.
            let id = Identity {
                addr: CGNAT,
                subject: None,
                user_agent: format!(
                    "Mozilla/5.0 (Linux; Android 14; device-{i}) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.{i}.0 Mobile Safari/537.36"
                ),
                bot: false,
            };
            push(&mut genuine, id);
        }
        for i in 0..SIGNED_IN {
            let id = Identity {
                addr: Ipv4Addr::new(127, 10 + (i / 250) as u8, (i % 250) as u8, 1),
                subject: Some(format!("user-{i}")),
                user_agent: BROWSERS[i % BROWSERS.len()].to_owned(),
                bot: false,
            };
            push(&mut genuine, id);
        }
        for i in 0..ANONYMOUS {
            // Two neighbours to a /24; some pairs run the same browser and
            // so share a subnet+User-Agent key.
            let net = i / 2;
            let id = Identity {
                addr: Ipv4Addr::new(
                    127,
                    20 + (net / 250) as u8,
                    (net % 250) as u8,
                    1 + (i % 2) as u8,
                ),
                subject: None,
                user_agent: BROWSERS[(i * 7 / 3) % BROWSERS.len()].to_owned(),
                bot: false,
            };
            push(&mut genuine, id);
        }
        let mut signed_in_bots = Vec::new();
        for a in 0..BOT_ACCOUNTS {
            for j in 0..BOT_ACCOUNT_ADDRS {
                let id = Identity {
                    addr: Ipv4Addr::new(127, 66, 0, (1 + a * BOT_ACCOUNT_ADDRS + j) as u8),
                    subject: Some(format!("bot-{a}")),
                    user_agent: BROWSERS[0].to_owned(),
                    bot: true,
                };
                push(&mut signed_in_bots, id);
            }
        }
        let mut swarm = Vec::new();
        for net in 0..SWARM_NETS {
            for host in 0..SWARM_PER_NET {
                let id = Identity {
                    addr: Ipv4Addr::new(127, 77, 1 + net as u8, 1 + host as u8),
                    subject: None,
                    user_agent: BOT_UA.to_owned(),
                    bot: true,
                };
                push(&mut swarm, id);
            }
        }
        Self {
            identities,
            genuine,
            signed_in_bots,
            swarm,
        }
    }

    /// The flash crowd's arrivals, in time order.
    pub(crate) fn flash_crowd(&self, phases: Phases, seed: u64) -> Vec<Arrival> {
        self.mix(
            phases.total(),
            seed,
            |t| GENUINE_BASE + (GENUINE_PEAK - GENUINE_BASE) * phases.progress(t),
            |t| BOTS_PEAK * phases.progress(t),
        )
    }

    /// The step scenario's arrivals: the crowd's peak mix (genuine clients
    /// and bots at their peak rates) for `length`, so that the step meets
    /// the overload the flash crowd ends in.
    pub(crate) fn peak_mix(&self, length: Duration, seed: u64) -> Vec<Arrival> {
        self.mix(length, seed, |_| GENUINE_PEAK, |_| BOTS_PEAK)
    }

    /// Genuine arrivals at `genuine(t)` and bot arrivals at `bots(t)`
    /// requests a second (at most their peak rates) until `end`, in time
    /// order.
    fn mix(
        &self,
        end: Duration,
        seed: u64,
        genuine: impl Fn(Duration) -> f64,
        bots: impl Fn(Duration) -> f64,
    ) -> Vec<Arrival> {
        let mut rng = Rng::new(seed);
        let mut all = Vec::new();
        poisson(&mut rng, end, GENUINE_PEAK, genuine, |rng, at| {
            all.push(Arrival {
                at,
                client: pick(rng, &self.genuine),
                book: chance(rng, GENUINE_BOOK),
            });
        });
        poisson(&mut rng, end, BOTS_PEAK, bots, |rng, at| {
            let from = if chance(rng, BOTS_SIGNED_IN) {
                &self.signed_in_bots
            } else {
                &self.swarm
            };
            all.push(Arrival {
                at,
                client: pick(rng, from),
                book: chance(rng, BOTS_BOOK),
            });
        });
        all.sort_by_key(|a| a.at);
        all
    }
}

/// Arrivals of a Poisson process of rate `rate(t)` (at most `max`) until
/// `end`, by thinning.
fn poisson(
    rng: &mut Rng,
    end: Duration,
    max: f64,
    rate: impl Fn(Duration) -> f64,
    mut emit: impl FnMut(&mut Rng, Duration),
) {
    let mut t = 0.0;
    loop {
        t += -(1.0 - rng.unit()).ln() / max;
        let at = Duration::from_secs_f64(t);
        if at >= end {
            return;
        }
        if rng.unit() * max < rate(at) {
            emit(rng, at);
        }
    }
}

/// Whether an event of probability `p` happens.
fn chance(rng: &mut Rng, p: f64) -> bool {
    rng.unit() < p
}

/// One of `from`, uniformly.
fn pick(rng: &mut Rng, from: &[u32]) -> u32 {
    from[rng.below(from.len() as u64) as usize]
}
