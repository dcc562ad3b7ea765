//! What an operator knows of a client, from which a rule's extractor derives
//! the same key its requests get: an operator never needs to know how a key
//! is encoded (an address masked to its prefix, a User-Agent's hash, a
//! composite's parts).

use std::net::IpAddr;

/// A client as an operator names it: its address, header values, a
/// verified token's claim value, a route, a User-Agent, a TLS fingerprint.
/// [`KeyExtractor::key_for`](crate::KeyExtractor::key_for) turns them into
/// the key a request carrying them would get under a rule.
///
/// ```
/// use std::net::IpAddr;
/// use throttle_fleet_tower::key::{ClientAddr, KeyInputs};
/// use throttle_fleet_tower::{KeyExtractor, RequestHead};
///
/// let by_24 = ClientAddr::new(|_: &RequestHead<'_>| None).ipv4_prefix(24);
/// let ip: IpAddr = "203.0.113.7".parse().unwrap();
/// let key = by_24.key_for(&KeyInputs::new().ip(ip)).unwrap().unwrap();
/// assert_eq!(key, by_24.key_of("203.0.113.200".parse().unwrap()));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyInputs {
    /// The client's address (after any trusted proxies).
    pub ip: Option<IpAddr>,
    /// Header values by name (names compared without case).
    pub headers: Vec<(String, String)>,
    /// The value of the claim a `jwt:<claim>` rule keys by.
    pub claim: Option<String>,
    /// The route (a router's template, `/items/{id}`; a gRPC method's full
    /// path).
    pub route: Option<String>,
    /// The `User-Agent` (also read from `headers` when not given here).
    pub user_agent: Option<String>,
    /// The TLS fingerprint (JA4, as text).
    pub tls_fingerprint: Option<String>,
}

impl KeyInputs {
    /// No inputs.
    pub fn new() -> Self {
        Self::default()
    }

    /// The client's address.
    #[must_use]
    pub fn ip(mut self, ip: IpAddr) -> Self {
        self.ip = Some(ip);
        self
    }

    /// A header's value.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The value of the rule's claim.
    #[must_use]
    pub fn claim(mut self, value: impl Into<String>) -> Self {
        self.claim = Some(value.into());
        self
    }

    /// The route.
    #[must_use]
    pub fn route(mut self, route: impl Into<String>) -> Self {
        self.route = Some(route.into());
        self
    }

    /// The `User-Agent`.
    #[must_use]
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = Some(user_agent.into());
        self
    }

    /// The TLS fingerprint (JA4 text).
    #[must_use]
    pub fn tls_fingerprint(mut self, fingerprint: impl Into<String>) -> Self {
        self.tls_fingerprint = Some(fingerprint.into());
        self
    }

    /// The value of header `name` (the first given; names compared without
    /// case), trimmed of spaces and tabs as an HTTP parser trims a field's
    /// value, or an error naming what is missing.
    pub(crate) fn header_value(&self, name: &str) -> Result<&str, String> {
        let value = self
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim_matches([' ', '\t']))
            .ok_or_else(|| format!("needs header {name:?}"))?;
        if value.is_empty() {
            return Err(format!("header {name:?} is empty"));
        }
        Ok(value)
    }
}
