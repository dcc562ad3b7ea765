//! The JWT extractor with real tokens, signed here with HS256, RS256 and
//! ES256 keys (test keys under `tests/keys`), and forged ones: a bad
//! signature, `alg: none`, an algorithm swap, an expired token, a wrong
//! audience or issuer. Only a token that passes every check is a key.

#![cfg(feature = "jwt")]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::StatusCode;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use throttle_fleet_tower::RequestHead;
use throttle_fleet_tower::key::{Extracted, Jwt};
use throttle_fleet_tower::limits::MAX_TOKEN_LEN;
use throttle_fleet_tower::{Key, KeyExtractor, MissingKey};

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
const RSA_PRIVATE: &[u8] = include_bytes!("keys/rsa_private.pem");
const RSA_PUBLIC: &[u8] = include_bytes!("keys/rsa_public.pem");
const RSA_PUBLIC_DER: &[u8] = include_bytes!("keys/rsa_public.der");
const EC_PRIVATE: &[u8] = include_bytes!("keys/ec_private.pem");
const EC_PUBLIC: &[u8] = include_bytes!("keys/ec_public.pem");

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn claims(sub: &str) -> Value {
    json!({ "sub": sub, "exp": now() + 600 })
}

fn hs(claims: &Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(SECRET).unwrap(),
    )
    .unwrap()
}

fn rs(claims: &Value) -> String {
    let key = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    jsonwebtoken::encode(&Header::new(Algorithm::RS256), claims, &key).unwrap()
}

fn es(claims: &Value) -> String {
    let key = EncodingKey::from_ec_pem(EC_PRIVATE).unwrap();
    jsonwebtoken::encode(&Header::new(Algorithm::ES256), claims, &key).unwrap()
}

fn b64url(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// A token whose header and payload are these, with this signature part.
fn raw_token(header: &Value, claims: &Value, signature: &str) -> String {
    format!(
        "{}.{}.{signature}",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes())
    )
}

fn bearer(token: &str) -> http::request::Parts {
    http::Request::get("/")
        .header("authorization", format!("Bearer {token}"))
        .body(())
        .unwrap()
        .into_parts()
        .0
}

fn key(s: &str) -> Extracted {
    Extracted::Key(Key::new(s))
}

#[test]
fn genuine_tokens_of_each_algorithm_are_keys() {
    let hs256 = Jwt::hs256(SECRET);
    let rs256 = Jwt::rs256_pem(RSA_PUBLIC);
    let rs256_der = Jwt::rs256_der(RSA_PUBLIC_DER);
    let es256 = Jwt::es256_pem(EC_PUBLIC);
    for ex in [&hs256, &rs256, &rs256_der, &es256] {
        assert!(ex.validate().is_ok(), "{ex:?}");
    }
    assert_eq!(
        hs256.extract(&RequestHead::from_parts(&bearer(&hs(&claims("alice"))))),
        key("alice")
    );
    assert_eq!(
        rs256.extract(&RequestHead::from_parts(&bearer(&rs(&claims("bob"))))),
        key("bob")
    );
    assert_eq!(
        rs256_der.extract(&RequestHead::from_parts(&bearer(&rs(&claims("bob"))))),
        key("bob")
    );
    assert_eq!(
        es256.extract(&RequestHead::from_parts(&bearer(&es(&claims("carol"))))),
        key("carol")
    );
    // The scheme is case-insensitive.
    let lower = http::Request::get("/")
        .header("authorization", format!("bearer {}", hs(&claims("alice"))))
        .body(())
        .unwrap()
        .into_parts()
        .0;
    assert_eq!(
        hs256.extract(&RequestHead::from_parts(&lower)),
        key("alice")
    );
}

#[test]
fn forged_tokens_are_never_keys() {
    let hs256 = Jwt::hs256(SECRET);
    let rs256 = Jwt::rs256_pem(RSA_PUBLIC);
    let es256 = Jwt::es256_pem(EC_PUBLIC);
    let good = claims("alice");

    // Bad signature: signed with another secret; and a genuine signature
    // on a tampered payload.
    let other = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &good,
        &EncodingKey::from_secret(b"another secret, also 32 bytes...").unwrap(),
    )
    .unwrap();
    assert_eq!(
        hs256.extract(&RequestHead::from_parts(&bearer(&other))),
        Extracted::Missing
    );
    for token in [hs(&good), rs(&good), es(&good)] {
        let signature = token.rsplit('.').next().unwrap();
        let tampered = raw_token(
            &json!({"alg": "HS256", "typ": "JWT"}),
            &claims("mallory"),
            signature,
        );
        for ex in [&hs256, &rs256, &es256] {
            assert_eq!(
                ex.extract(&RequestHead::from_parts(&bearer(&tampered))),
                Extracted::Missing
            );
        }
    }

    // alg: none, with and without a signature part.
    for alg in ["none", "None", "NONE"] {
        let none = raw_token(&json!({"alg": alg, "typ": "JWT"}), &good, "");
        let none_sig = raw_token(&json!({"alg": alg}), &good, "c2ln");
        for ex in [&hs256, &rs256, &es256] {
            assert_eq!(
                ex.extract(&RequestHead::from_parts(&bearer(&none))),
                Extracted::Missing,
                "{alg}"
            );
            assert_eq!(
                ex.extract(&RequestHead::from_parts(&bearer(&none_sig))),
                Extracted::Missing,
                "{alg}"
            );
        }
    }

    // Algorithm confusion: an HS256 token whose secret is the RSA public
    // key, presented to the RS256 extractor; and genuine tokens of another
    // algorithm than the one configured.
    let confused = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &good,
        &EncodingKey::from_secret(RSA_PUBLIC).unwrap(),
    )
    .unwrap();
    assert_eq!(
        rs256.extract(&RequestHead::from_parts(&bearer(&confused))),
        Extracted::Missing
    );
    assert_eq!(
        rs256.extract(&RequestHead::from_parts(&bearer(&es(&good)))),
        Extracted::Missing
    );
    assert_eq!(
        es256.extract(&RequestHead::from_parts(&bearer(&rs(&good)))),
        Extracted::Missing
    );
    assert_eq!(
        hs256.extract(&RequestHead::from_parts(&bearer(&rs(&good)))),
        Extracted::Missing
    );

    // Garbage.
    for junk in ["", "a.b.c", "a.b", "...", "e30.e30.e30"] {
        assert_eq!(
            hs256.extract(&RequestHead::from_parts(&bearer(junk))),
            Extracted::Missing,
            "{junk}"
        );
    }
}

#[test]
fn expiry_is_required_and_enforced() {
    let hs256 = Jwt::hs256(SECRET);
    let expired = json!({"sub": "alice", "exp": now() - 5});
    assert_eq!(
        hs256.extract(&RequestHead::from_parts(&bearer(&hs(&expired)))),
        Extracted::Missing
    );
    let no_exp = json!({"sub": "alice"});
    assert_eq!(
        hs256.extract(&RequestHead::from_parts(&bearer(&hs(&no_exp)))),
        Extracted::Missing
    );
    let bad_exp = json!({"sub": "alice", "exp": "tomorrow"});
    assert_eq!(
        hs256.extract(&RequestHead::from_parts(&bearer(&hs(&bad_exp)))),
        Extracted::Missing
    );
    let not_yet = json!({"sub": "alice", "exp": now() + 600, "nbf": now() + 300});
    assert_eq!(
        hs256.extract(&RequestHead::from_parts(&bearer(&hs(&not_yet)))),
        Extracted::Missing
    );
    // A leeway is only what it says.
    let lenient = Jwt::hs256(SECRET).leeway(Duration::from_secs(60));
    assert_eq!(
        lenient.extract(&RequestHead::from_parts(&bearer(&hs(&expired)))),
        key("alice")
    );
    let long_expired = json!({"sub": "alice", "exp": now() - 120});
    assert_eq!(
        lenient.extract(&RequestHead::from_parts(&bearer(&hs(&long_expired)))),
        Extracted::Missing
    );
}

#[test]
fn audience_and_issuer() {
    let exp = now() + 600;
    let for_api = json!({"sub": "alice", "exp": exp, "aud": "api", "iss": "https://id.example"});
    let for_other =
        json!({"sub": "alice", "exp": exp, "aud": "billing", "iss": "https://id.example"});
    let both =
        json!({"sub": "alice", "exp": exp, "aud": ["billing", "api"], "iss": "https://id.example"});
    let no_aud = json!({"sub": "alice", "exp": exp, "iss": "https://id.example"});
    let api = Jwt::hs256(SECRET).audience(["api"]);
    assert_eq!(
        api.extract(&RequestHead::from_parts(&bearer(&hs(&for_api)))),
        key("alice")
    );
    assert_eq!(
        api.extract(&RequestHead::from_parts(&bearer(&hs(&both)))),
        key("alice")
    );
    assert_eq!(
        api.extract(&RequestHead::from_parts(&bearer(&hs(&for_other)))),
        Extracted::Missing
    );
    assert_eq!(
        api.extract(&RequestHead::from_parts(&bearer(&hs(&no_aud)))),
        Extracted::Missing
    );
    // With no audience configured, a token meant for someone is refused.
    let anyone = Jwt::hs256(SECRET);
    assert_eq!(
        anyone.extract(&RequestHead::from_parts(&bearer(&hs(&for_api)))),
        Extracted::Missing
    );
    assert_eq!(
        anyone.extract(&RequestHead::from_parts(&bearer(&hs(&no_aud)))),
        key("alice")
    );

    let issuer = Jwt::hs256(SECRET)
        .audience(["api"])
        .issuer(["https://id.example"]);
    assert_eq!(
        issuer.extract(&RequestHead::from_parts(&bearer(&hs(&for_api)))),
        key("alice")
    );
    let wrong_iss =
        json!({"sub": "alice", "exp": exp, "aud": "api", "iss": "https://evil.example"});
    assert_eq!(
        issuer.extract(&RequestHead::from_parts(&bearer(&hs(&wrong_iss)))),
        Extracted::Missing
    );
    let no_iss = json!({"sub": "alice", "exp": exp, "aud": "api"});
    assert_eq!(
        issuer.extract(&RequestHead::from_parts(&bearer(&hs(&no_iss)))),
        Extracted::Missing
    );
}

#[test]
fn the_claim_is_configurable_and_must_be_a_string_or_an_integer() {
    let exp = now() + 600;
    let token = hs(&json!({
        "sub": "alice", "exp": exp, "tenant": "acme", "uid": 88192,
        "empty": "", "obj": {"a": 1}, "float": 1.5, "long": "x".repeat(500),
    }));
    let by = |claim: &str| {
        Jwt::hs256(SECRET)
            .claim(claim)
            .extract(&RequestHead::from_parts(&bearer(&token)))
    };
    assert_eq!(by("sub"), key("alice"));
    assert_eq!(by("tenant"), key("acme"));
    assert_eq!(by("uid"), key("88192"));
    assert_eq!(by("long"), key(&"x".repeat(500)));
    for missing in ["empty", "obj", "float", "nope"] {
        assert_eq!(by(missing), Extracted::Missing, "{missing}");
    }
}

#[test]
fn the_header_must_be_a_bearer_token_of_bounded_length() {
    let hs256 = Jwt::hs256(SECRET);
    let with = |value: &str| {
        http::Request::get("/")
            .header("authorization", value)
            .body(())
            .unwrap()
            .into_parts()
            .0
    };
    let token = hs(&claims("alice"));
    assert_eq!(
        hs256.extract(&RequestHead::from_parts(&with(&format!("Basic {token}")))),
        Extracted::Missing
    );
    assert_eq!(
        hs256.extract(&RequestHead::from_parts(&with(&token))),
        Extracted::Missing
    );
    assert_eq!(
        hs256.extract(&RequestHead::from_parts(&with("Bearer "))),
        Extracted::Missing
    );
    let none = http::Request::get("/").body(()).unwrap().into_parts().0;
    assert_eq!(
        hs256.extract(&RequestHead::from_parts(&none)),
        Extracted::Missing
    );
    // A genuine token past the length cap is not even decoded.
    let big = hs(&json!({"sub": "alice", "exp": now() + 600, "pad": "p".repeat(MAX_TOKEN_LEN)}));
    assert!(big.len() > MAX_TOKEN_LEN);
    assert_eq!(
        hs256.extract(&RequestHead::from_parts(&bearer(&big))),
        Extracted::Missing
    );
    assert_eq!(
        hs256.on_missing(),
        MissingKey::Reject(StatusCode::UNAUTHORIZED)
    );
}

#[test]
fn bad_configuration_names_its_field() {
    let field = |j: Jwt| j.validate().unwrap_err().field();
    assert_eq!(field(Jwt::hs256(b"short")), "jwt.key");
    assert_eq!(field(Jwt::rs256_pem(b"not pem")), "jwt.key");
    assert_eq!(field(Jwt::rs256_pem(EC_PUBLIC)), "jwt.key");
    assert_eq!(field(Jwt::es256_pem(b"not pem")), "jwt.key");
    assert_eq!(field(Jwt::hs256(SECRET).claim("")), "jwt.claim");
    assert_eq!(
        field(Jwt::hs256(SECRET).audience(Vec::<String>::new())),
        "jwt.audience"
    );
    assert_eq!(
        field(Jwt::hs256(SECRET).issuer(Vec::<String>::new())),
        "jwt.issuer"
    );
    // The secret never shows in Debug.
    let debug = format!("{:?}", Jwt::hs256(SECRET));
    assert!(!debug.contains("0123456789abcdef"), "{debug}");
}
