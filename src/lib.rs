//! The throttle workspace's examples, cross-crate integration tests and load
//! benchmarks live in this package; it exports nothing. The library crates
//! are under `crates/`.
