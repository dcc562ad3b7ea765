//! Client addresses -> keys, grouped by prefix; shared by the extractors that
//! read a peer address (`throttle_axum::ClientIp`, `throttle_tonic::PeerIp`).

mod prefix;

pub use prefix::IpPrefix;
