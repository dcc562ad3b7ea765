//! Property tests of the forwarding-header walk: it never panics, whatever
//! the headers hold; it only ever returns the peer or an address written in
//! the header it reads; it reads at most `MAX_FORWARDED_ENTRIES` entries;
//! and on well-formed chains it agrees with a plain model of the rule
//! (right to left from the peer, skipping trusted hops).

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use throttle_fleet_tower::RequestHead;
use throttle_fleet_tower::key::{ClientAddr, ForwardedHeader};
use throttle_fleet_tower::limits::MAX_FORWARDED_ENTRIES;

type Ip = ClientAddr<fn(&RequestHead<'_>) -> Option<SocketAddr>>;

fn nowhere(_: &RequestHead<'_>) -> Option<SocketAddr> {
    None
}

fn extractor(header: ForwardedHeader) -> Ip {
    ClientAddr::new(nowhere as fn(&RequestHead<'_>) -> Option<SocketAddr>)
        .trusted_proxies(["10.0.0.0/8", "fd00::/8"])
        .forwarded_header(header)
}

fn name(header: ForwardedHeader) -> HeaderName {
    match header {
        ForwardedHeader::Forwarded => http::header::FORWARDED,
        _ => HeaderName::from_static("x-forwarded-for"),
    }
}

fn header_kind() -> impl Strategy<Value = ForwardedHeader> {
    prop_oneof![
        Just(ForwardedHeader::XForwardedFor),
        Just(ForwardedHeader::Forwarded)
    ]
}

/// Every address a piece of `text` could be read as.
fn candidates(text: &str) -> HashSet<IpAddr> {
    let mut out = HashSet::new();
    for piece in text.split([' ', '\t', ',', ';', '=', '"', '[', ']']) {
        if let Ok(ip) = piece.parse::<IpAddr>() {
            out.insert(ip.to_canonical());
        }
        if let Some((left, _)) = piece.rsplit_once(':')
            && let Ok(ip) = left.parse::<Ipv4Addr>()
        {
            out.insert(IpAddr::V4(ip));
        }
    }
    out
}

/// One entry of a well-formed chain.
#[derive(Debug, Clone)]
enum Entry {
    /// Trusted (10.x) or not (198.18.x), unique by position.
    Addr { trusted: bool, v6: bool },
    /// Something that is no address: ends the walk.
    Junk(String),
    /// An empty list element: skipped.
    Empty,
}

fn entry() -> impl Strategy<Value = Entry> {
    prop_oneof![
        6 => (any::<bool>(), any::<bool>()).prop_map(|(trusted, v6)| Entry::Addr { trusted, v6 }),
        1 => "[g-z]{1,6}".prop_map(Entry::Junk),
        1 => Just(Entry::Empty),
    ]
}

fn addr_at(i: usize, trusted: bool, v6: bool) -> IpAddr {
    let (hi, lo) = ((i / 256) as u8, (i % 256) as u8);
    match (trusted, v6) {
        (true, false) => Ipv4Addr::new(10, 1, hi, lo).into(),
        (false, false) => Ipv4Addr::new(198, 18, hi, lo).into(),
        (true, true) => format!("fd00::{i:x}").parse().unwrap(),
        (false, true) => format!("2001:db8::{i:x}").parse().unwrap(),
    }
}

fn render(i: usize, e: &Entry, header: ForwardedHeader, port: bool) -> String {
    match (e, header) {
        (Entry::Empty, _) => String::new(),
        (Entry::Junk(j), ForwardedHeader::Forwarded) => format!("for={j}"),
        (Entry::Junk(j), _) => j.clone(),
        (Entry::Addr { trusted, v6 }, h) => {
            let ip = addr_at(i, *trusted, *v6);
            let node = match (ip, port) {
                (IpAddr::V6(v6), true) => format!("[{v6}]:4711"),
                (IpAddr::V6(v6), false) if h == ForwardedHeader::Forwarded => format!("[{v6}]"),
                (ip, true) => format!("{ip}:4711"),
                (ip, false) => ip.to_string(),
            };
            match h {
                ForwardedHeader::Forwarded if node.contains(':') => {
                    format!("for=\"{node}\";proto=https")
                }
                ForwardedHeader::Forwarded => format!("for={node}"),
                _ => node,
            }
        }
    }
}

/// The rule, stated plainly over the entries (index 0 is the leftmost).
fn model(peer: IpAddr, peer_trusted: bool, entries: &[Entry]) -> IpAddr {
    let mut current = peer;
    if !peer_trusted {
        return current;
    }
    for (read, (i, e)) in entries.iter().enumerate().rev().enumerate() {
        if read == MAX_FORWARDED_ENTRIES {
            break;
        }
        match e {
            Entry::Empty => continue,
            Entry::Junk(_) => break,
            Entry::Addr { trusted, v6 } => {
                current = addr_at(i, *trusted, *v6);
                if !trusted {
                    break;
                }
            }
        }
    }
    current
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    /// Well-formed chains, split over several lines, agree with the model.
    #[test]
    fn chains_follow_the_rule(
        header in header_kind(),
        peer_trusted in any::<bool>(),
        entries in prop::collection::vec(entry(), 0..48),
        ports in prop::collection::vec(any::<bool>(), 48),
        breaks in prop::collection::vec(any::<bool>(), 48),
    ) {
        let peer: IpAddr = if peer_trusted { "10.0.0.1" } else { "203.0.113.1" }.parse().unwrap();
        let mut headers = HeaderMap::new();
        let mut line = String::new();
        for (i, e) in entries.iter().enumerate() {
            if i > 0 {
                if breaks[i] {
                    headers.append(name(header), HeaderValue::from_str(&line).unwrap());
                    line.clear();
                } else {
                    line.push_str(", ");
                }
            }
            line.push_str(&render(i, e, header, ports[i]));
        }
        if !entries.is_empty() {
            headers.append(name(header), HeaderValue::from_str(&line).unwrap());
        }
        let got = extractor(header).resolve(peer, &headers);
        prop_assert_eq!(got, model(peer, peer_trusted, &entries), "{:?}", headers);
    }

    /// Anything at all in the headers: no panic, and the answer is the peer
    /// or an address written in the header that is read.
    #[test]
    fn arbitrary_headers_never_panic_nor_invent_addresses(
        header in header_kind(),
        lines in prop::collection::vec(
            prop_oneof![
                "[0-9a-f.:\\[\\]\", ;=_]{0,80}",
                "((for|For|by)=)?[0-9a-f.:\\[\\]\"_]{0,24}([,;] ?(for=)?[0-9a-f.:\\[\\]\"_]{0,24}){0,8}",
                prop::collection::vec(32u8..127, 0..60).prop_map(|b| String::from_utf8(b).unwrap()),
            ],
            0..5,
        ),
        other in "[0-9.]{0,20}",
    ) {
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let mut headers = HeaderMap::new();
        for l in &lines {
            headers.append(name(header), HeaderValue::from_str(l).unwrap());
        }
        // The header that is not chosen is never read.
        let unread = match header {
            ForwardedHeader::Forwarded => HeaderName::from_static("x-forwarded-for"),
            _ => http::header::FORWARDED,
        };
        headers.append(unread, HeaderValue::from_str(&format!("for={other}, {other}")).unwrap());
        let got = extractor(header).resolve(peer, &headers);
        let mut allowed = candidates(&lines.join(","));
        allowed.insert(peer);
        prop_assert!(allowed.contains(&got), "{:?} from {:?}", got, headers);
    }

    /// Raw bytes that are valid header values (obs-text included).
    #[test]
    fn raw_bytes_never_panic(
        header in header_kind(),
        raw in prop::collection::vec(prop::collection::vec(prop_oneof![9u8..10, 32u8..127, 128u8..=255], 0..100), 0..4),
    ) {
        let mut headers = HeaderMap::new();
        for r in &raw {
            headers.append(name(header), HeaderValue::from_bytes(r).unwrap());
        }
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let _ = extractor(header).resolve(peer, &headers);
    }
}
