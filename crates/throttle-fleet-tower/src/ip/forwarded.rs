//! The forwarding-header walk: from the peer leftwards through
//! `X-Forwarded-For` or `Forwarded` (RFC 7239), as long as each hop is
//! trusted. No allocation: header lines are split in place, right to left.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::HeaderMap;
use http::header::FORWARDED;

/// The most list entries one walk reads (across all lines of the header).
/// Past it the walk ends at the last address it reached, as at a malformed
/// entry: a chain of more than 32 trusted proxies is a misconfiguration or
/// an attack, and a bounded walk keeps the cost of a request bounded.
pub const MAX_FORWARDED_ENTRIES: usize = 32;

/// Which forwarding header a trusted proxy writes, the only one that is
/// read.
///
/// Exactly one is read, never both and never one as a fallback for the
/// other: a proxy appends to the header it writes and passes the other one
/// on as the client sent it, so the header it does not write is wholly
/// client-controlled, and reading it (or preferring it when present) would
/// let any client choose its own key. The default is `X-Forwarded-For`,
/// which nearly every load balancer writes; choose
/// [`Forwarded`](ForwardedHeader::Forwarded) only when every trusted proxy
/// writes RFC 7239's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`: addresses, optionally
    /// with a port (`203.0.113.7:4711`, `[2001:db8::1]:4711`); bare IPv6 is
    /// accepted too.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=192.0.2.60;proto=https, for="[2001:db8::1]:4711"`:
    /// the `for=` parameter of each element; IPv6 must be bracketed (and so
    /// quoted), as the RFC says. `for=unknown`, an obfuscated identifier
    /// (`for=_hidden`) or an element without `for=` ends the walk: the hop
    /// did not say who it forwarded for.
    Forwarded,
}

/// Walks from `peer` leftwards and returns the client address: the first
/// hop that `trusted(address, hop)` rejects (the peer is hop 0, the
/// rightmost entry hop 1, ...). When the peer is not trusted no header is
/// read. A malformed entry, an unknown or obfuscated one, the end of the
/// list or [`MAX_FORWARDED_ENTRIES`] ends the walk at the last address
/// reached. Every address is returned in canonical form (`::ffff:a.b.c.d`
/// as IPv4).
pub(crate) fn walk(
    peer: IpAddr,
    headers: &HeaderMap,
    which: ForwardedHeader,
    trusted: impl Fn(IpAddr, usize) -> bool,
) -> IpAddr {
    let mut current = peer.to_canonical();
    let mut hop = 0;
    if !trusted(current, hop) {
        return current;
    }
    let name = match which {
        ForwardedHeader::XForwardedFor => X_FORWARDED_FOR,
        ForwardedHeader::Forwarded => FORWARDED.as_str(),
    };
    let mut read = 0;
    // Several lines of one header are one list, in order: the last line
    // holds the rightmost entries.
    for line in headers.get_all(name).iter().rev() {
        for entry in line.as_bytes().rsplit(|&b| b == b',') {
            if read == MAX_FORWARDED_ENTRIES {
                return current;
            }
            read += 1;
            let entry = trim(entry);
            if entry.is_empty() {
                // An empty list element (`a,,b`, a trailing comma) carries
                // nothing; HTTP's list rule says to ignore it.
                continue;
            }
            let parsed = match which {
                ForwardedHeader::XForwardedFor => xff_entry(entry),
                ForwardedHeader::Forwarded => forwarded_element(entry),
            };
            let Some(addr) = parsed else {
                return current;
            };
            current = addr.to_canonical();
            hop += 1;
            if !trusted(current, hop) {
                return current;
            }
        }
    }
    current
}

const X_FORWARDED_FOR: &str = "x-forwarded-for";

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// One `X-Forwarded-For` entry: an address with an optional port.
fn xff_entry(entry: &[u8]) -> Option<IpAddr> {
    node(std::str::from_utf8(entry).ok()?, true)
}

/// A node: `a.b.c.d`, `a.b.c.d:port`, `[v6]`, `[v6]:port`, and a bare `v6`
/// when `bare_v6` (X-Forwarded-For only; RFC 7239 requires brackets).
fn node(s: &str, bare_v6: bool) -> Option<IpAddr> {
    if let Some(rest) = s.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        let addr: Ipv6Addr = addr.parse().ok()?;
        return match after {
            "" => Some(addr.into()),
            _ => port(after.strip_prefix(':')?).then_some(addr.into()),
        };
    }
    if let Ok(v4) = s.parse::<Ipv4Addr>() {
        return Some(v4.into());
    }
    if bare_v6 && let Ok(v6) = s.parse::<Ipv6Addr>() {
        return Some(v6.into());
    }
    let (addr, p) = s.split_once(':')?;
    let addr: Ipv4Addr = addr.parse().ok()?;
    port(p).then_some(addr.into())
}

/// A port (1 to 5 digits, at most 65535) or RFC 7239's obfuscated port
/// (`_` and then letters, digits, `.`, `_`, `-`).
fn port(p: &str) -> bool {
    match p.strip_prefix('_') {
        Some(obf) => !obf.is_empty() && obf.bytes().all(obf_char),
        None => {
            !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) && {
                p.parse::<u16>().is_ok()
            }
        }
    }
}

fn obf_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// RFC 7230 `tchar`.
fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

/// One `Forwarded` element, `pair *( ";" pair )`: the address of its one
/// `for=` parameter. Every pair must be well formed, or the element is
/// malformed. Quoted strings holding `"`, `\`, `,` or `;` are treated as
/// malformed (no address needs them, and refusing them lets the list be
/// split without a quote-aware scan).
fn forwarded_element(element: &[u8]) -> Option<IpAddr> {
    let mut found = None;
    for pair in element.split(|&b| b == b';') {
        let pair = trim(pair);
        let eq = pair.iter().position(|&b| b == b'=')?;
        let (name, value) = (&pair[..eq], &pair[eq + 1..]);
        if name.is_empty() || !name.iter().all(|&b| tchar(b)) {
            return None;
        }
        let value = match value {
            [b'"', inner @ .., b'"'] => {
                if inner
                    .iter()
                    .any(|&b| b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b))
                {
                    return None;
                }
                inner
            }
            v if !v.is_empty() && v.iter().all(|&b| tchar(b)) => v,
            _ => return None,
        };
        if name.eq_ignore_ascii_case(b"for") {
            if found.is_some() {
                // Two `for=` in one element: which one is the hop?
                return None;
            }
            found = Some(value);
        }
    }
    // `unknown`, an obfuscated identifier (`_x`) and anything else that is
    // not an address end the walk.
    node(std::str::from_utf8(found?).ok()?, false)
}

#[cfg(test)]
mod tests {
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
}
