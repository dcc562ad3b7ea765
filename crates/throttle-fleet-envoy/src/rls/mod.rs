//! RLS v3: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
//! Each descriptor is matched to the rules of its domain; every matching
//! rule must allow (two rules on one descriptor are two limits, both
//! enforced); a request whose descriptors match no rule is `OK`.

mod reply;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use smallvec::SmallVec;
use throttle_fleet_core::decision::Kind;
use throttle_fleet_core::rule_set::Held;
use throttle_fleet_core::{Answer, decision::Demand};
use tonic::{Request, Response, Status};

use crate::metrics;
use crate::quote::quoted;
use crate::rules::{EnvoyRules, Loaded};

use reply::{Asked, Reply};

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 64;

/// The largest cost a descriptor is checked with: anything above the
/// largest limit is denied the same way (it can never fit), and stays
/// exact in every backend's arithmetic.
const MAX_COST: u64 = throttle_fleet_core::limits::MAX_LIMIT + 1;

/// The RLS v3 service over [`EnvoyRules`].
///
/// ```
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
///     RateLimitDescriptor, rate_limit_descriptor::Entry,
/// };
/// use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, rate_limit_response::Code};
/// use throttle_fleet_config::GatewayConfig;
/// use throttle_fleet_core::memory::MemoryBackend;
/// use throttle_fleet_envoy::{EnvoyRules, Rls};
///
/// let config = GatewayConfig::parse("rls.toml", r#"
///     [[rules]]
///     name = "per-user"
///     domain = "api"
///     descriptor = ["user_id"]
///     limit = 1
///     period_secs = 60
/// "#, None)?;
/// let rls = Rls::new(EnvoyRules::new(&config, "rls.toml", MemoryBackend::default())?);
/// let request = RateLimitRequest {
///     domain: "api".into(),
///     descriptors: vec![RateLimitDescriptor {
///         entries: vec![Entry { key: "user_id".into(), value: "alice".into() }],
///         ..Default::default()
///     }],
///     hits_addend: 0,
/// };
/// assert_eq!(rls.decide(&request).await?.overall_code, Code::Ok as i32);
/// assert_eq!(rls.decide(&request).await?.overall_code, Code::OverLimit as i32);
/// # Ok(())
/// # }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(run()).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Rls {
    rules: EnvoyRules,
    metrics: metrics::RlsMetrics,
}

/// A request's demands: a few, on the stack.
type Asks = SmallVec<[Ask; 4]>;

/// One rule to check for one descriptor.
#[derive(Clone, Copy)]
struct Ask {
    /// The descriptor's index in the request.
    descriptor: usize,
    demand: Demand,
}

impl Rls {
    /// The service answering from `rules`.
    pub fn new(rules: EnvoyRules) -> Self {
        metrics::describe();
        Self {
            rules,
            metrics: metrics::RlsMetrics::new(),
        }
    }

    /// The tonic service, to add to a server.
    pub fn into_server(self) -> RateLimitServiceServer<Self> {
        RateLimitServiceServer::new(self)
    }

    /// Decides one request: what `ShouldRateLimit` answers, without the
    /// transport. `INVALID_ARGUMENT` for an empty domain, no descriptors,
    /// more than [`MAX_DESCRIPTORS`], or a domain no rule names.
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        let loaded = self.rules.current_full();
        let asks = match asks(&loaded, request) {
            Ok(asks) => asks,
            Err(status) => {
                self.metrics.answered(metrics::RlsAnswer::Invalid);
                return Err(status);
            }
        };
        let reply = check(&loaded, request.descriptors.len(), &asks).await;
        let response = reply.response(&loaded);
        self.metrics.answered(if reply.is_over_limit() {
            metrics::RlsAnswer::OverLimit
        } else {
            metrics::RlsAnswer::Ok
        });
        Ok(response)
    }
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.decide(request.get_ref()).await.map(Response::new)
    }
}

/// The demands of `request`: each descriptor's matching rules, with its
/// cost; or why the request is invalid.
fn asks(loaded: &Loaded, request: &RateLimitRequest) -> Result<Asks, Status> {
    if request.domain.is_empty() {
        return Err(Status::invalid_argument(
            "the rate limit domain must not be empty",
        ));
    }
    if request.descriptors.is_empty() {
        return Err(Status::invalid_argument(
            "the descriptor list must not be empty",
        ));
    }
    if request.descriptors.len() > MAX_DESCRIPTORS {
        return Err(Status::invalid_argument(format!(
            "at most {MAX_DESCRIPTORS} descriptors per request (got {})",
            request.descriptors.len()
        )));
    }
    if !loaded.catalog.knows(&request.domain) {
        return Err(Status::invalid_argument(format!(
            "no rule has the domain {}",
            quoted(&request.domain)
        )));
    }
    // Unset, the request's hits_addend is 1.
    let request_cost = u64::from(request.hits_addend.max(1));
    let mut asks = Asks::new();
    for (i, d) in request.descriptors.iter().enumerate() {
        if d.is_negative_hits {
            // Giving hits back is not supported: the descriptor is answered
            // OK and counts nothing.
            continue;
        }
        let cost = d
            .hits_addend
            .map_or(request_cost, |h| h.value)
            .min(MAX_COST);
        let entries = d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()));
        // The domain is known: matching cannot fail.
        let _ = loaded
            .catalog
            .matches(&request.domain, entries, |rule, key| {
                asks.push(Ask {
                    descriptor: i,
                    demand: Demand::new(rule, key, cost),
                });
            });
    }
    Ok(asks)
}

/// Checks `asks`: at most one demand per rule at a time (two descriptors
/// matching one rule are checked one after the other, the first charge
/// given back when the second is denied), every rule in one check
/// otherwise.
async fn check(loaded: &Loaded, descriptors: usize, asks: &[Ask]) -> Reply {
    let mut reply = Reply::new(descriptors);
    // Rounds: the n-th ask of each rule goes into round n, in rule order.
    let mut rounds: SmallVec<[Asks; 1]> = SmallVec::new();
    for ask in asks {
        let round = asks
            .iter()
            .take_while(|a| !std::ptr::eq(*a, ask))
            .filter(|a| a.demand.rule == ask.demand.rule)
            .count();
        if rounds.len() <= round {
            rounds.resize_with(round + 1, Asks::new);
        }
        rounds[round].push(*ask);
    }
    // What earlier rounds took, to refund if a later one denies.
    let mut taken: SmallVec<[Box<Held>; 1]> = SmallVec::new();
    for round in &mut rounds {
        round.sort_by_key(|a| a.demand.rule);
        let demands: SmallVec<[Demand; 8]> = round.iter().map(|a| a.demand).collect();
        let checked = match loaded.rules.check(&demands) {
            Answer::Ready(c) => c,
            Answer::Pending(later) => later.await,
        };
        let (decision, held) = checked.into_parts();
        let ask_of = |rule: usize| round.iter().find(|a| a.demand.rule == rule);
        match decision.kind() {
            Kind::Allowed => {
                for i in decision.shadow_denied().iter() {
                    reply.shadow_denied(loaded.rules.rule(i).name());
                }
                if let Some(held) = held {
                    for (demand, outcome) in held.taken() {
                        // A shadow rule's figures are never told (as the
                        // layer's headers do not): it only reports.
                        if let Some(ask) = ask_of(demand.rule)
                            && !loaded.rules.rule(demand.rule).is_shadow()
                        {
                            reply.asked(ask.descriptor, Asked::allowed(loaded, demand, outcome));
                        }
                    }
                    taken.push(held);
                }
            }
            Kind::Denied => {
                if let Some(ask) = decision.rule().and_then(ask_of) {
                    reply.asked(
                        ask.descriptor,
                        Asked::denied(loaded, &ask.demand, &decision),
                    );
                }
                refund(taken, &mut reply);
                return reply;
            }
            Kind::Refused => {
                let rule = decision.rule().unwrap_or_default();
                if let Some(ask) = ask_of(rule) {
                    reply.asked(ask.descriptor, Asked::unavailable(loaded, &ask.demand));
                }
                reply.unavailable(loaded.rules.rule(rule).name());
                refund(taken, &mut reply);
                return reply;
            }
            // No rule applied.
            _ => {}
        }
    }
    reply
}

/// Refunds what earlier rounds took, once a later one denied.
fn refund(taken: SmallVec<[Box<Held>; 1]>, reply: &mut Reply) {
    for held in taken {
        held.refund();
    }
    reply.refunded();
}
