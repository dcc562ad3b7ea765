use super::*;

type Ip = ClientAddr<fn(&RequestHead<'_>) -> Option<SocketAddr>>;

fn from_ext(req: &RequestHead<'_>) -> Option<SocketAddr> {
    req.extensions.get::<SocketAddr>().copied()
}

fn ip() -> Ip {
    ClientAddr::new(from_ext as fn(&RequestHead<'_>) -> Option<SocketAddr>)
}

fn req(peer: &str, xff: Option<&str>) -> http::request::Parts {
    let mut b = http::Request::get("/");
    if let Some(x) = xff {
        b = b.header("x-forwarded-for", x);
    }
    let mut p = b.body(()).unwrap().into_parts().0;
    p.extensions.insert(peer.parse::<SocketAddr>().unwrap());
    p
}

fn addr(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn without_trusted_proxies_headers_are_never_read() {
    let r = req("203.0.113.9:1", Some("198.51.100.1"));
    assert_eq!(
        ip().client_ip(&RequestHead::from_parts(&r)),
        Some(addr("203.0.113.9"))
    );
    let r = req("[::ffff:203.0.113.9]:1", Some("198.51.100.1"));
    assert_eq!(
        ip().client_ip(&RequestHead::from_parts(&r)),
        Some(addr("203.0.113.9"))
    );
}

#[test]
fn trusted_proxies_are_cidrs_or_addresses() {
    let ip = ip().trusted_proxies(["10.0.0.0/8", " 192.0.2.1 ", "2001:db8::/32"]);
    assert!(ip.validate().is_ok());
    let x = Some("203.0.113.7");
    assert_eq!(
        ip.client_ip(&RequestHead::from_parts(&req("10.9.9.9:1", x))),
        Some(addr("203.0.113.7"))
    );
    assert_eq!(
        ip.client_ip(&RequestHead::from_parts(&req("192.0.2.1:1", x))),
        Some(addr("203.0.113.7"))
    );
    assert_eq!(
        ip.client_ip(&RequestHead::from_parts(&req("192.0.2.2:1", x))),
        Some(addr("192.0.2.2"))
    );
    assert_eq!(
        ip.client_ip(&RequestHead::from_parts(&req("[2001:db8::5]:1", x))),
        Some(addr("203.0.113.7"))
    );
    // The IPv4-mapped form of a trusted IPv4 peer is trusted too.
    assert_eq!(
        ip.client_ip(&RequestHead::from_parts(&req("[::ffff:10.0.0.1]:1", x))),
        Some(addr("203.0.113.7"))
    );
}

#[test]
fn hops_trust_the_nearest_proxies_by_position() {
    let chain = Some("6.6.6.6, 203.0.113.7, 198.51.100.2");
    let one = ip().trusted_hops(1);
    assert_eq!(
        one.client_ip(&RequestHead::from_parts(&req("198.51.100.1:1", chain))),
        Some(addr("198.51.100.2"))
    );
    let two = ip().trusted_hops(2);
    assert_eq!(
        two.client_ip(&RequestHead::from_parts(&req("198.51.100.1:1", chain))),
        Some(addr("203.0.113.7"))
    );
    // Hops and CIDRs together: 198.51.100.2 is trusted by range.
    let both = ip().trusted_hops(1).trusted_proxies(["198.51.100.0/24"]);
    assert_eq!(
        both.client_ip(&RequestHead::from_parts(&req("192.0.2.1:1", chain))),
        Some(addr("203.0.113.7"))
    );
}

#[test]
fn bad_configuration_names_its_field() {
    for bad in ["10.0.0.0/33", "10.0.0", "", "localhost", "2001:db8::/129"] {
        let err = ip()
            .trusted_proxies(["10.0.0.0/8", bad])
            .validate()
            .unwrap_err();
        assert_eq!(err.field(), "trusted_proxies", "{bad:?}");
        assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
    }
    // A later, good list replaces the bad one.
    let fixed = ip()
        .trusted_proxies(["nope"])
        .trusted_proxies(["10.0.0.0/8"]);
    assert!(fixed.validate().is_ok());
    let err = ip()
        .trusted_hops(Ip::MAX_ENTRIES + 1)
        .validate()
        .unwrap_err();
    assert_eq!(err.field(), "trusted_hops");
    assert!(ip().trusted_hops(Ip::MAX_ENTRIES).validate().is_ok());
    assert_eq!(
        ip().ipv4_prefix(0).validate().unwrap_err().field(),
        "key.ipv4_prefix"
    );
}

#[test]
fn trusted_peers_are_the_listed_proxies_or_every_peer_past_a_hop() {
    let listed = ip().trusted_proxies(["10.0.0.0/8", "2001:db8::/32"]);
    assert!(listed.is_trusted_peer(addr("10.9.8.7")));
    assert!(listed.is_trusted_peer(addr("::ffff:10.9.8.7")));
    assert!(listed.is_trusted_peer(addr("2001:db8::1")));
    assert!(!listed.is_trusted_peer(addr("11.0.0.1")));
    assert!(!ip().is_trusted_peer(addr("10.9.8.7")));
    assert!(ip().trusted_hops(1).is_trusted_peer(addr("203.0.113.7")));
}

#[test]
fn host_bits_of_a_cidr_are_masked() {
    let ip = ip().trusted_proxies(["10.1.2.3/8"]);
    let r = req("10.200.0.1:1", Some("203.0.113.7"));
    assert_eq!(
        ip.client_ip(&RequestHead::from_parts(&r)),
        Some(addr("203.0.113.7"))
    );
}

#[test]
fn keys_group_the_resolved_address() {
    let ip = ip().trusted_proxies(["10.0.0.0/8"]).ipv6_prefix(48);
    let a = req("10.0.0.1:1", Some("2001:db8:1:2::1"));
    let b = req("10.0.0.1:1", Some("2001:db8:1:ffff::9"));
    let c = req("10.0.0.1:1", Some("2001:db8:2::1"));
    assert_eq!(
        ip.extract(&RequestHead::from_parts(&a)),
        ip.extract(&RequestHead::from_parts(&b))
    );
    assert_ne!(
        ip.extract(&RequestHead::from_parts(&a)),
        ip.extract(&RequestHead::from_parts(&c))
    );
    let none = http::Request::get("/").body(()).unwrap().into_parts().0;
    assert_eq!(
        ip.extract(&RequestHead::from_parts(&none)),
        Extracted::Missing
    );
    assert_eq!(
        ip.on_missing(),
        MissingKey::Reject(StatusCode::INTERNAL_SERVER_ERROR)
    );
}

#[test]
fn v4_prefix_is_a_shorthand() {
    #[derive(Default)]
    struct Nowhere;
    impl PeerSource for Nowhere {
        fn peer_addr(&self, _: &RequestHead<'_>) -> Option<SocketAddr> {
            None
        }
    }
    assert_eq!(
        ClientAddr::<Nowhere>::v4_prefix(24).prefix(),
        IpPrefix::new().ipv4(24)
    );
    assert_eq!(
        ClientAddr::<Nowhere>::v6_prefix(56).prefix(),
        IpPrefix::new().ipv6(56)
    );
}
