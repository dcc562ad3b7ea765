//! The guide: how to limit a service, a chapter per concern, in the order a
//! newcomer needs them. Each formula and guarantee is stated once, in the
//! docs of the code that implements it; the chapters link there.
//!
//! 1. [What a limit is, and the words for it](limits)
//! 2. [Choosing an algorithm](algorithms)
//! 3. [Keys and client identification](keys)
//! 4. [The Redis modes and their bounds](redis)
//! 5. [Failure policies: when Redis is slow or gone](failure)
//! 6. [HTTP and gRPC contracts](contracts)
//! 7. [The configuration file and the gateway](configuration)
//! 8. [Envoy: the rate limit services](envoy)
//! 9. [Metrics and operations](operations)
//! 10. [Operating on keys: inspect, reset, block](admin)
//! 11. [Protecting a backend: classes, a reserve, adaptive concurrency](shedding)
//! 12. [Capacity: what each mode costs Redis, and what a check costs](capacity)
//! 13. [Migrating from tower_governor](migrating)
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
