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
mod tests;
