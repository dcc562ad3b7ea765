//! Client addresses -> keys: the peer-address extractor behind
//! `throttle_fleet_axum::ClientIp` and `throttle_fleet_tonic::PeerIp`, the walk through
//! forwarding headers when the peer is a trusted proxy, and the grouping of
//! addresses by prefix.

mod client;
mod forwarded;
mod prefix;

pub use client::{ClientAddr, PeerSource};
pub use forwarded::{ForwardedHeader, MAX_FORWARDED_ENTRIES};
pub use prefix::IpPrefix;
