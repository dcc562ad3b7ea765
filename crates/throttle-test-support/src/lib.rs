//! The workspace's test harness, shared by the test binaries of every crate
//! (as a dev-dependency) instead of copied or included by path.

pub mod redis_server;

pub use redis_server::*;
