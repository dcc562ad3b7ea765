//! The peer-address extractor, proxy-aware when told which proxies to trust.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::RequestHead;
use http::{HeaderMap, StatusCode};
use ipnet::IpNet;
use throttle_fleet_core::{ConfigError, Key};

use super::forwarded::{self, ForwardedHeader, MAX_FORWARDED_ENTRIES};
use super::prefix::IpPrefix;
use crate::extract::{Extracted, KeyInputs};
use crate::{KeyExtractor, MissingKey};

/// Where a server put the connection's peer address in the request.
///
/// Each integration crate has one (`throttle_fleet_axum::ConnectInfoPeer` reads
/// axum's `ConnectInfo<SocketAddr>`, `throttle_fleet_tonic::TonicPeer` tonic's
/// `TcpConnectInfo` too); a closure `Fn(&RequestHead<'_>) -> Option<SocketAddr>` is
/// one as well, for other servers.
pub trait PeerSource: Send + Sync + 'static {
    /// The peer address of the connection `req` came in on, if the server
    /// recorded one.
    fn peer_addr(&self, req: &RequestHead<'_>) -> Option<SocketAddr>;

    /// Called when [`peer_addr`](Self::peer_addr) found nothing, before the
    /// request is answered by the rule's missing-key setting: the place to
    /// tell the operator how to make the server record the address.
    fn no_peer(&self) {}

    /// The key kind of a [`ClientAddr`] reading this source (see
    /// [`KeyExtractor::kind`]); default `client-ip`.
    fn kind(&self) -> &'static str {
        "client-ip"
    }
}

impl<F> PeerSource for F
where
    F: Fn(&RequestHead<'_>) -> Option<SocketAddr> + Send + Sync + 'static,
{
    fn peer_addr(&self, req: &RequestHead<'_>) -> Option<SocketAddr> {
        self(req)
    }
}

/// The client's IP address, grouped by prefix ([`IpPrefix`]: IPv4 `/32`,
/// IPv6 `/64` unless told otherwise): the connection's peer address, or,
/// when the peer is a trusted proxy, the address that proxy forwarded for.
///
/// `throttle_fleet_axum::ClientIp` and `throttle_fleet_tonic::PeerIp` are this type
/// with their server's [`PeerSource`].
///
/// # Trusted proxies
///
/// With no proxy trusted (the default) forwarding headers are never read:
/// any client can write them. Behind a load balancer every client would
/// then share the balancer's key, so name the proxies:
///
/// - [`trusted_proxies`](Self::trusted_proxies) takes CIDRs
///   (`"10.0.0.0/8"`) or plain addresses;
/// - [`trusted_hops`](Self::trusted_hops) trusts the nearest `n` hops
///   whatever their address, for proxies whose addresses are not known in
///   advance. Only use it when nothing can reach the server except through
///   those proxies: a client that connects directly is then trusted itself.
///
/// When the peer is trusted, the walk goes through the one header the
/// proxies write ([`ForwardedHeader`]; `X-Forwarded-For` by default, RFC
/// 7239 `Forwarded` when chosen) from the right, that is from the entry
/// the nearest proxy appended, skipping trusted addresses; the first
/// untrusted one is the client. The leftmost entry is never taken for
/// what it says: it is whatever the client wrote, and each proxy only
/// appends. Several lines of the header are one list, in order. A
/// malformed entry (or `unknown`, an obfuscated identifier) ends the walk
/// at the last good address, as does a chain in which every address is
/// trusted or one longer than [`MAX_FORWARDED_ENTRIES`](Self::MAX_ENTRIES)
/// entries. Nothing is allocated on the way.
///
/// ```
/// use std::net::SocketAddr;
/// use throttle_fleet_tower::{KeyExtractor, RequestHead};
/// use throttle_fleet_tower::key::{ClientAddr, Extracted, ForwardedHeader, IpPrefix};
///
/// // A server that puts the peer address in the extensions (axum and tonic
/// // have theirs: `throttle_fleet_axum::ClientIp`, `throttle_fleet_tonic::PeerIp`).
/// let from_extension = |req: &RequestHead<'_>| req.extensions.get::<SocketAddr>().copied();
/// let ip = ClientAddr::new(from_extension).trusted_proxies(["10.0.0.0/8"]);
/// assert!(ip.validate().is_ok());
///
/// let mut req = http::Request::get("/")
///     .header("x-forwarded-for", "6.6.6.6, 203.0.113.7, 10.0.0.2")
///     .body(()).unwrap().into_parts().0;
/// req.extensions.insert("10.0.0.1:4711".parse::<SocketAddr>().unwrap());
/// // 10.0.0.1 and 10.0.0.2 are ours, 203.0.113.7 is the client; the
/// // leftmost entry is what the client wrote, and never read.
/// assert_eq!(ip.client_ip(&RequestHead::from_parts(&req)), Some("203.0.113.7".parse().unwrap()));
/// assert_eq!(ip.extract(&RequestHead::from_parts(&req)), Extracted::Key(IpPrefix::new().key_of("203.0.113.7".parse().unwrap())));
///
/// let bad = ClientAddr::new(from_extension).trusted_proxies(["10.0.0.0/33"]);
/// assert_eq!(bad.validate().unwrap_err().field(), "trusted_proxies");
/// # let _ = ForwardedHeader::Forwarded;
/// ```
#[derive(Debug, Clone)]
pub struct ClientAddr<P> {
    peer: P,
    prefix: IpPrefix,
    proxies: Arc<[IpNet]>,
    /// The first entry of `trusted_proxies` that did not parse.
    invalid: Option<Arc<str>>,
    hops: usize,
    header: ForwardedHeader,
}

impl<P: PeerSource + Default> Default for ClientAddr<P> {
    fn default() -> Self {
        Self::new(P::default())
    }
}

impl<P: PeerSource> ClientAddr<P> {
    /// The most forwarding-header entries one request's walk reads.
    pub const MAX_ENTRIES: usize = MAX_FORWARDED_ENTRIES;

    /// The peer address from `peer`, no proxy trusted, IPv4 `/32` and IPv6
    /// `/64`.
    pub fn new(peer: P) -> Self {
        Self {
            peer,
            prefix: IpPrefix::new(),
            proxies: Arc::from([]),
            invalid: None,
            hops: 0,
            header: ForwardedHeader::default(),
        }
    }

    /// Shorthand for `ClientAddr::default().ipv4_prefix(bits)`, as in
    /// `(ClientIp::v4_prefix(24), UserAgentHash)`.
    pub fn v4_prefix(bits: u8) -> Self
    where
        P: Default,
    {
        Self::new(P::default()).ipv4_prefix(bits)
    }

    /// Shorthand for `ClientAddr::default().ipv6_prefix(bits)`.
    pub fn v6_prefix(bits: u8) -> Self
    where
        P: Default,
    {
        Self::new(P::default()).ipv6_prefix(bits)
    }

    /// Groups IPv4 addresses by this prefix length (1 to 32; default 32).
    /// A `/24` groups a whole carrier-grade NAT pool with its neighbours:
    /// combine it with other signals (e.g. `(ClientIp::v4_prefix(24),
    /// UserAgentHash)`) rather than use it alone.
    #[must_use]
    pub fn ipv4_prefix(mut self, bits: u8) -> Self {
        self.prefix = self.prefix.ipv4(bits);
        self
    }

    /// Groups IPv6 addresses by this prefix length (1 to 128; default 64,
    /// as one subscriber usually holds a whole /64; 56 and 48 are common
    /// allocations too).
    #[must_use]
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.prefix = self.prefix.ipv6(bits);
        self
    }

    /// The proxies whose forwarding headers are read: CIDRs
    /// (`"10.0.0.0/8"`, `"2001:db8::/32"`) or single addresses
    /// (`"127.0.0.1"`), replacing any given before. An IPv4 range also
    /// covers the IPv4-mapped IPv6 form of its addresses. A string that is
    /// neither fails [`validate`](KeyExtractor::validate) (so
    /// `ThrottleLayer::new`) with an error naming `trusted_proxies`.
    #[must_use]
    pub fn trusted_proxies<I, S>(mut self, cidrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.invalid = None;
        let mut nets = Vec::new();
        for cidr in cidrs {
            let cidr = cidr.as_ref().trim();
            match parse_net(cidr) {
                Some(net) => nets.push(net),
                None if self.invalid.is_none() => self.invalid = Some(cidr.into()),
                None => {}
            }
        }
        self.proxies = nets.into();
        self
    }

    /// Trusts the nearest `hops` hops whatever their address: the peer is
    /// the first, the rightmost forwarding entry the second, and so on (at
    /// most [`MAX_ENTRIES`](Self::MAX_ENTRIES)). With `trusted_hops(1)`
    /// behind one load balancer, the client is the entry it appended.
    /// Addresses in [`trusted_proxies`](Self::trusted_proxies) are skipped
    /// beyond these hops too.
    #[must_use]
    pub fn trusted_hops(mut self, hops: usize) -> Self {
        self.hops = hops;
        self
    }

    /// The forwarding header the trusted proxies write (default
    /// `X-Forwarded-For`); the other one is never read (see
    /// [`ForwardedHeader`] for why).
    #[must_use]
    pub fn forwarded_header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// The grouping of addresses into keys.
    pub fn prefix(&self) -> IpPrefix {
        self.prefix
    }

    /// The key of an address under this grouping (see [`IpPrefix`]).
    pub fn key_of(&self, ip: IpAddr) -> Key {
        self.prefix.key_of(ip)
    }

    /// Whether a connection from `peer` comes from a proxy this grouping
    /// trusts: an address in [`trusted_proxies`](Self::trusted_proxies), or
    /// any address once [`trusted_hops`](Self::trusted_hops) is at least 1
    /// (then the peer is always a proxy). A server's per-client connection
    /// cap exempts such peers: a load balancer carries everyone's
    /// connections.
    pub fn is_trusted_peer(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.hops > 0 || self.proxies.iter().any(|net| net.contains(&peer))
    }

    /// The client address of `req`: the peer, or what trusted proxies
    /// forwarded for. `None` when the server recorded no peer address.
    #[inline]
    pub fn client_ip(&self, req: &RequestHead<'_>) -> Option<IpAddr> {
        let peer = self.peer.peer_addr(req)?.ip();
        Some(self.resolve(peer, req.headers))
    }

    /// The client address of a request from `peer` with these headers (the
    /// walk described on the type).
    #[inline]
    pub fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if self.hops == 0 && self.proxies.is_empty() {
            return peer.to_canonical();
        }
        forwarded::walk(peer, headers, self.header, |addr, hop| {
            hop < self.hops || self.proxies.iter().any(|net| net.contains(&addr))
        })
    }
}

/// `a.b.c.d/n`, `v6/n` or a plain address (its host route); the address
/// part is masked so `10.1.2.3/8` means `10.0.0.0/8`.
fn parse_net(s: &str) -> Option<IpNet> {
    if let Ok(net) = s.parse::<IpNet>() {
        return Some(net.trunc());
    }
    s.parse::<IpAddr>()
        .ok()
        .map(|ip| IpNet::from(ip.to_canonical()))
}

impl<P: PeerSource> KeyExtractor for ClientAddr<P> {
    #[inline]
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
        match self.client_ip(req) {
            Some(ip) => Extracted::Key(self.key_of(ip)),
            None => {
                self.peer.no_peer();
                Extracted::Missing
            }
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.prefix.validate()?;
        if let Some(bad) = &self.invalid {
            return Err(ConfigError::new(
                "trusted_proxies",
                format!("{bad:?} is neither a CIDR (\"10.0.0.0/8\") nor an IP address"),
            ));
        }
        if self.hops > Self::MAX_ENTRIES {
            return Err(ConfigError::new(
                "trusted_hops",
                format!("must be at most {} (got {})", Self::MAX_ENTRIES, self.hops),
            ));
        }
        Ok(())
    }

    fn on_missing(&self) -> MissingKey {
        // Only a server that records no peer address lacks one.
        MissingKey::Reject(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The peer source's kind: `client-ip` unless it says otherwise
    /// (`throttle_fleet_tonic::TonicPeer`: `peer-ip`).
    fn kind(&self) -> Cow<'static, str> {
        Cow::Borrowed(self.peer.kind())
    }

    /// The key of `inputs.ip` (the client's address, after any trusted
    /// proxies), masked to this grouping's prefix as a request's would be.
    fn key_for(&self, inputs: &KeyInputs) -> Option<Result<Key, String>> {
        Some(
            inputs
                .ip
                .map(|ip| self.key_of(ip.to_canonical()))
                .ok_or_else(|| "needs the client's address (ip)".to_owned()),
        )
    }
}

#[cfg(test)]
mod tests;
