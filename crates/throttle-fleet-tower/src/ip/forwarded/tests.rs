use http::HeaderValue;

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn headers(name: &str, lines: &[&str]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for l in lines {
        h.append(
            http::HeaderName::try_from(name).unwrap(),
            HeaderValue::from_str(l).unwrap(),
        );
    }
    h
}

/// Trusts 10.0.0.0/8 only.
fn tens(a: IpAddr, _: usize) -> bool {
    matches!(a, IpAddr::V4(v4) if v4.octets()[0] == 10)
}

fn xff(peer: &str, lines: &[&str]) -> IpAddr {
    walk(
        ip(peer),
        &headers("x-forwarded-for", lines),
        ForwardedHeader::XForwardedFor,
        tens,
    )
}

fn fwd(peer: &str, lines: &[&str]) -> IpAddr {
    walk(
        ip(peer),
        &headers("forwarded", lines),
        ForwardedHeader::Forwarded,
        tens,
    )
}

#[test]
fn an_untrusted_peer_is_the_client_whatever_the_headers_say() {
    assert_eq!(xff("203.0.113.9", &["198.51.100.1"]), ip("203.0.113.9"));
    assert_eq!(fwd("203.0.113.9", &["for=198.51.100.1"]), ip("203.0.113.9"));
}

#[test]
fn trusted_hops_are_skipped_right_to_left() {
    // Spoofed leftmost entry, the client, then two of our proxies.
    let chain = ["6.6.6.6, 203.0.113.7, 10.0.0.2, 10.0.0.3"];
    assert_eq!(xff("10.0.0.1", &chain), ip("203.0.113.7"));
    let chain = [r#"for=6.6.6.6, for="203.0.113.7:4711";proto=https, for=10.0.0.2"#];
    assert_eq!(fwd("10.0.0.1", &chain), ip("203.0.113.7"));
}

#[test]
fn several_lines_are_one_list_in_order() {
    let lines = ["6.6.6.6, 203.0.113.7", "10.0.0.2", "10.0.0.3"];
    assert_eq!(xff("10.0.0.1", &lines), ip("203.0.113.7"));
    let lines = ["10.0.0.5, 203.0.113.7", "10.0.0.2"];
    assert_eq!(xff("10.0.0.1", &lines), ip("203.0.113.7"));
}

#[test]
fn malformed_entries_end_the_walk_at_the_last_good_address() {
    assert_eq!(
        xff("10.0.0.1", &["203.0.113.7, bogus, 10.0.0.2"]),
        ip("10.0.0.2")
    );
    assert_eq!(xff("10.0.0.1", &["203.0.113.7, bogus"]), ip("10.0.0.1"));
    assert_eq!(xff("10.0.0.1", &["1.2.3.4:99999"]), ip("10.0.0.1"));
    assert_eq!(xff("10.0.0.1", &["fe80::1%eth0"]), ip("10.0.0.1"));
    // Malformed entries left of the client are never reached.
    assert_eq!(
        xff("10.0.0.1", &["bogus, 203.0.113.7, 10.0.0.2"]),
        ip("203.0.113.7")
    );
    for bad in [
        "for=unknown",
        "for=_hidden",
        "proto=https",
        "for=2001:db8::1",
        "for=[2001:db8::1]",
        "for=\"203.0.113.7",
        "for=\"a\\\"b\"",
        "for=1.2.3.4;for=5.6.7.8",
        "=1.2.3.4",
        "for",
        "for=",
        "for=\"[2001:db8::1]:99999\"",
    ] {
        assert_eq!(
            fwd("10.0.0.1", &[&format!("for=203.0.113.7, {bad}")]),
            ip("10.0.0.1"),
            "{bad}"
        );
    }
    // A quoted comma splits a value in two halves that are both
    // malformed, so it ends the walk rather than smuggle an address.
    assert_eq!(
        fwd("10.0.0.1", &[r#"for="_x, for=203.0.113.7, y""#]),
        ip("10.0.0.1")
    );
}

#[test]
fn node_forms() {
    assert_eq!(xff("10.0.0.1", &["203.0.113.7:4711"]), ip("203.0.113.7"));
    assert_eq!(xff("10.0.0.1", &["[2001:db8::1]:4711"]), ip("2001:db8::1"));
    assert_eq!(xff("10.0.0.1", &["2001:db8::1"]), ip("2001:db8::1"));
    assert_eq!(xff("10.0.0.1", &["\t2001:db8::1 ,"]), ip("2001:db8::1"));
    assert_eq!(xff("10.0.0.1", &["::ffff:10.0.0.9"]), ip("10.0.0.9"));
    assert_eq!(
        fwd("10.0.0.1", &[r#"For="[2001:db8:cafe::17]:4711""#]),
        ip("2001:db8:cafe::17")
    );
    assert_eq!(
        fwd("10.0.0.1", &[r#"for="[2001:db8::17]:_p0rt";by=_proxy"#]),
        ip("2001:db8::17")
    );
    assert_eq!(
        fwd("10.0.0.1", &["for=192.0.2.60;proto=http;by=203.0.113.43"]),
        ip("192.0.2.60")
    );
    // A mapped peer is the IPv4 address, for trust and for the result.
    assert_eq!(xff("::ffff:10.0.0.1", &["203.0.113.7"]), ip("203.0.113.7"));
    assert_eq!(xff("::ffff:10.0.0.1", &[]), ip("10.0.0.1"));
}

#[test]
fn an_all_trusted_chain_ends_at_its_leftmost_address() {
    assert_eq!(xff("10.0.0.1", &["10.0.0.3, 10.0.0.2"]), ip("10.0.0.3"));
    assert_eq!(xff("10.0.0.1", &[""]), ip("10.0.0.1"));
    assert_eq!(xff("10.0.0.1", &[" , ,"]), ip("10.0.0.1"));
}

#[test]
fn the_walk_reads_at_most_max_entries() {
    let mut line = String::from("203.0.113.7");
    for i in 0..MAX_FORWARDED_ENTRIES - 1 {
        line.push_str(&format!(", 10.1.0.{i}"));
    }
    // 31 trusted entries and the client: exactly the cap.
    assert_eq!(xff("10.0.0.1", &[&line]), ip("203.0.113.7"));
    // One more trusted hop pushes the client past it.
    let longer = format!("{line}, 10.2.0.0");
    assert_eq!(xff("10.0.0.1", &[&longer]), ip("10.1.0.0"));
    // Empty elements count towards the cap too.
    let empties = format!("203.0.113.7{}", ",".repeat(MAX_FORWARDED_ENTRIES));
    assert_eq!(xff("10.0.0.1", &[&empties]), ip("10.0.0.1"));
}

#[test]
fn hops_are_numbered_from_the_peer() {
    let seen = std::cell::RefCell::new(Vec::new());
    let headers = headers("x-forwarded-for", &["1.1.1.1, 2.2.2.2, 3.3.3.3"]);
    let got = walk(
        ip("4.4.4.4"),
        &headers,
        ForwardedHeader::XForwardedFor,
        |a, hop| {
            seen.borrow_mut().push((a, hop));
            hop < 2
        },
    );
    assert_eq!(got, ip("2.2.2.2"));
    assert_eq!(
        seen.into_inner(),
        [(ip("4.4.4.4"), 0), (ip("3.3.3.3"), 1), (ip("2.2.2.2"), 2)]
    );
}
