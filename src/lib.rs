//! The throttle workspace's examples, cross-crate integration tests and load
//! benchmarks live in this package; it exports nothing. The library crates
//! are under `crates/`.

/// The README's Rust examples, compiled as doctests of this package (which
/// depends on every crate) so the front door never shows code that does not
/// build.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
