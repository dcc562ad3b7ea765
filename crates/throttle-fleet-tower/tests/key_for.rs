//! Keys derived from an operator's inputs are byte for byte the keys the
//! same extractor reads from a real request carrying them: per address
//! (masked, behind a trusted proxy, IPv6 and IPv4-mapped), per header, per
//! User-Agent hash, per verified JWT claim (a string and a number), global,
//! composites of every arity and `or`. Missing inputs are errors naming
//! them; extractors that cannot derive keys say so with `None`.

#![cfg(feature = "jwt")]

use std::net::{IpAddr, SocketAddr};
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey};
use serde_json::{Value, json};
use throttle_fleet_tower::key::{
    AllOf, ClientAddr, Extension, Extracted, Global, Header, Jwt, KeyInputs, UserAgentHash,
};
use throttle_fleet_tower::{Key, KeyExtractor, KeyExtractorExt, RequestHead};

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

/// The peer address a test request carries as an extension.
#[derive(Clone, Copy)]
struct Peer(SocketAddr);

fn peer(req: &RequestHead<'_>) -> Option<SocketAddr> {
    req.extensions.get::<Peer>().map(|p| p.0)
}

type Ip = ClientAddr<fn(&RequestHead<'_>) -> Option<SocketAddr>>;

fn ip() -> Ip {
    ClientAddr::new(peer as fn(&RequestHead<'_>) -> Option<SocketAddr>)
}

/// A request from `from` with `headers`.
fn request(from: &str, headers: &[(&str, &str)]) -> http::Request<()> {
    let mut req = http::Request::get("/login");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let mut req = req.body(()).unwrap();
    let addr = SocketAddr::new(from.parse().unwrap(), 40_000);
    req.extensions_mut().insert(Peer(addr));
    req
}

fn seen(extractor: &impl KeyExtractor, req: &http::Request<()>) -> Key {
    match extractor.extract(&RequestHead::of(req)) {
        Extracted::Key(k) => k,
        other => panic!("no key in the request: {other:?}"),
    }
}

fn named(extractor: &impl KeyExtractor, inputs: &KeyInputs) -> Key {
    match extractor.key_for(inputs) {
        Some(Ok(k)) => k,
        other => panic!("no key from {inputs:?}: {other:?}"),
    }
}

fn token(claims: &Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(SECRET).unwrap(),
    )
    .unwrap()
}

fn exp() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600
}

fn addr(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn an_address_under_its_prefix_is_the_key_its_requests_get() {
    for (extractor, from, other_in_prefix) in [
        (ip(), "203.0.113.7", None),
        (ip().ipv4_prefix(24), "203.0.113.7", Some("203.0.113.250")),
        (ip(), "2001:db8:1:2:3:4:5:6", Some("2001:db8:1:2:ffff::1")),
        (
            ip().ipv6_prefix(48),
            "2001:db8:1:2::1",
            Some("2001:db8:1:ffff::9"),
        ),
        // An IPv4-mapped IPv6 peer is its IPv4 address.
        (ip(), "::ffff:198.51.100.4", Some("198.51.100.4")),
    ] {
        let key = seen(&extractor, &request(from, &[]));
        assert_eq!(
            named(&extractor, &KeyInputs::new().ip(addr(from))),
            key,
            "{from}"
        );
        if let Some(other) = other_in_prefix {
            assert_eq!(
                named(&extractor, &KeyInputs::new().ip(addr(other))),
                key,
                "{other}"
            );
        }
    }
    // Behind a trusted proxy the client is what it forwarded for.
    let behind = ip().trusted_proxies(["10.0.0.0/8"]);
    let req = request("10.1.2.3", &[("x-forwarded-for", "192.0.2.44")]);
    assert_eq!(
        named(&behind, &KeyInputs::new().ip(addr("192.0.2.44"))),
        seen(&behind, &req)
    );
    let missing = ip().key_for(&KeyInputs::new()).unwrap().unwrap_err();
    assert!(missing.contains("ip"), "{missing}");
}

#[test]
fn a_header_is_its_value_whatever_the_name_s_case() {
    let extractor = Header::new("x-api-key");
    let req = request("192.0.2.1", &[("x-api-key", "tenant-42-secret")]);
    for name in ["x-api-key", "X-Api-Key"] {
        let inputs = KeyInputs::new().header(name, "tenant-42-secret");
        assert_eq!(named(&extractor, &inputs), seen(&extractor, &req));
    }
    // A long value is a digest, on both sides.
    let long = "k".repeat(300);
    let req = request("192.0.2.1", &[("x-api-key", &long)]);
    let key = named(&extractor, &KeyInputs::new().header("x-api-key", &long));
    assert!(key.is_digest());
    assert_eq!(key, seen(&extractor, &req));
    for inputs in [KeyInputs::new(), KeyInputs::new().header("x-api-key", "")] {
        let e = extractor.key_for(&inputs).unwrap().unwrap_err();
        assert!(e.contains("x-api-key"), "{e}");
    }
}

#[test]
fn a_user_agent_is_its_hash() {
    let req = request("192.0.2.1", &[("user-agent", "curl/8.5.0")]);
    let key = seen(&UserAgentHash, &req);
    assert_eq!(
        named(&UserAgentHash, &KeyInputs::new().user_agent("curl/8.5.0")),
        key
    );
    assert_eq!(
        named(
            &UserAgentHash,
            &KeyInputs::new().header("User-Agent", "curl/8.5.0")
        ),
        key
    );
    assert!(UserAgentHash.key_for(&KeyInputs::new()).unwrap().is_err());
}

#[test]
fn a_claim_value_is_the_key_of_a_verified_token_carrying_it() {
    let jwt = Jwt::hs256(SECRET).claim("tenant");
    for (claim, written) in [(json!("acme"), "acme"), (json!(4711), "4711")] {
        let t = token(&json!({ "tenant": claim, "exp": exp() }));
        let req = request("192.0.2.1", &[("authorization", &format!("Bearer {t}"))]);
        assert_eq!(
            named(&jwt, &KeyInputs::new().claim(written)),
            seen(&jwt, &req)
        );
    }
    let e = jwt.key_for(&KeyInputs::new()).unwrap().unwrap_err();
    assert!(e.contains("tenant"), "{e}");
}

#[test]
fn composites_and_fallbacks_compose_as_requests_do() {
    let req = request(
        "203.0.113.9",
        &[("user-agent", "bot/1"), ("x-api-key", "k-1")],
    );
    let inputs = KeyInputs::new()
        .ip(addr("203.0.113.9"))
        .user_agent("bot/1")
        .header("x-api-key", "k-1");
    let pair = (ip().ipv4_prefix(24), UserAgentHash);
    assert_eq!(named(&pair, &inputs), seen(&pair, &req));
    let triple = (ip(), UserAgentHash, Header::new("x-api-key"));
    assert_eq!(named(&triple, &inputs), seen(&triple, &req));
    let parts: Vec<Box<dyn KeyExtractor>> = vec![
        Box::new(ip().ipv4_prefix(24)),
        Box::new(UserAgentHash),
        Box::new(Header::new("x-api-key")),
        Box::new(Global),
    ];
    let all = AllOf::new(parts);
    assert_eq!(named(&all, &inputs), seen(&all, &req));
    // A missing part is an error naming it.
    let e = all
        .key_for(&KeyInputs::new().ip(addr("203.0.113.9")))
        .unwrap()
        .unwrap_err();
    assert!(e.contains("user agent"), "{e}");

    let either = Header::new("x-api-key").or(ip());
    assert_eq!(named(&either, &inputs), seen(&either, &req));
    let anonymous = request("203.0.113.9", &[]);
    assert_eq!(
        named(&either, &KeyInputs::new().ip(addr("203.0.113.9"))),
        seen(&either, &anonymous)
    );
    assert_eq!(named(&Global, &KeyInputs::new()), seen(&Global, &anonymous));
}

#[test]
fn extractors_that_cannot_derive_keys_say_so() {
    let closure = |_: &RequestHead<'_>| Some(Key::new("x"));
    assert_eq!(closure.key_for(&KeyInputs::new()), None);
    let extension = Extension::new(|p: &Peer| Key::new(p.0.to_string()));
    assert_eq!(extension.key_for(&KeyInputs::new()), None);
    // A composite with such a part cannot either.
    assert_eq!((ip(), closure).key_for(&KeyInputs::new()), None);
}
