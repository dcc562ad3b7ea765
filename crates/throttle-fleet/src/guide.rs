//! The guide: how to limit a service, a chapter per concern, in the order a
//! newcomer needs them. Each formula and guarantee is stated once, in the
//! docs of the code that implements it; the chapters link there.
//!
//! 1. [What a limit is, and the words for it](limits)
//! 2. [Choosing an algorithm](algorithms)
//! 3. [Keys and client identification](keys)
//! 4. [The Redis modes and their bounds](redis)
//! 5. [The Redis you run: TLS, credentials, Cluster, Sentinel, managed services, versions](deployments)
//! 6. [Failure policies: when Redis is slow or gone](failure)
//! 7. [HTTP and gRPC contracts](contracts)
//! 8. [The configuration file and the gateway](configuration)
//! 9. [Envoy: the rate limit services](envoy)
//! 10. [Metrics and operations](operations)
//! 11. [Operating on keys: inspect, reset, block](admin)
//! 12. [Protecting a backend: classes, a reserve, adaptive concurrency](shedding)
//! 13. [Capacity: what each mode costs Redis, and what a check costs](capacity)
//! 14. [Migrating from tower_governor](migrating)
//! 15. [Calling rate-limited APIs: the client side](client)
//!
//! The guide is built with every feature of this crate (docs.rs builds it
//! so), and `cargo test --all-features` compiles every Rust example in it.

#[doc = include_str!("../guide/limits.md")]
pub mod limits {}

#[doc = include_str!("../guide/algorithms.md")]
pub mod algorithms {}

#[doc = include_str!("../guide/keys.md")]
pub mod keys {}

#[doc = include_str!("../guide/redis.md")]
pub mod redis {}

#[doc = include_str!("../guide/deployments.md")]
pub mod deployments {}

#[doc = include_str!("../guide/failure.md")]
pub mod failure {}

#[doc = include_str!("../guide/contracts.md")]
pub mod contracts {}

#[doc = include_str!("../guide/configuration.md")]
pub mod configuration {}

#[doc = include_str!("../guide/envoy.md")]
pub mod envoy {}

#[doc = include_str!("../guide/operations.md")]
pub mod operations {}

#[doc = include_str!("../guide/admin.md")]
pub mod admin {}

#[doc = include_str!("../guide/shedding.md")]
pub mod shedding {}

#[doc = include_str!("../guide/capacity.md")]
pub mod capacity {}

#[doc = include_str!("../guide/migrating.md")]
pub mod migrating {}

#[doc = include_str!("../guide/client.md")]
pub mod client {}
