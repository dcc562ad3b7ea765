//! What the extractors make of requests.

use super::*;

fn parts(req: http::request::Builder) -> http::request::Parts {
    req.body(()).unwrap().into_parts().0
}

#[test]
fn header_values_and_their_absence() {
    let h = Header::new("x-api-key");
    assert!(h.validate().is_ok());
    let req = parts(http::Request::get("/").header("x-api-key", "k1"));
    assert_eq!(
        h.extract(&RequestHead::from_parts(&req)),
        Extracted::Key(Key::new("k1"))
    );
    assert_eq!(
        h.extract(&RequestHead::from_parts(&parts(http::Request::get("/")))),
        Extracted::Missing
    );
    let empty = parts(http::Request::get("/").header("x-api-key", ""));
    assert_eq!(
        h.extract(&RequestHead::from_parts(&empty)),
        Extracted::Missing
    );
    let err = Header::new("bad name").validate().unwrap_err();
    assert_eq!(err.field(), "key.header");
}

#[test]
fn composites_need_every_part_and_are_unambiguous() {
    let pair = (Header::new("a"), Header::new("b"));
    let both = parts(http::Request::get("/").header("a", "x").header("b", "yz"));
    let shifted = parts(http::Request::get("/").header("a", "xy").header("b", "z"));
    let one = parts(http::Request::get("/").header("a", "x"));
    let (Extracted::Key(k1), Extracted::Key(k2)) = (
        pair.extract(&RequestHead::from_parts(&both)),
        pair.extract(&RequestHead::from_parts(&shifted)),
    ) else {
        panic!()
    };
    assert_ne!(k1, k2);
    assert_eq!(
        pair.extract(&RequestHead::from_parts(&one)),
        Extracted::Missing
    );
}

#[test]
fn all_of_keys_like_the_tuples() {
    let req = parts(
        http::Request::get("/")
            .header("a", "x")
            .header("b", "y".repeat(100))
            .header("c", "z"),
    );
    let boxed = |n: &str| -> Box<dyn KeyExtractor> { Box::new(Header::new(n)) };
    let two = AllOf::new([boxed("a"), boxed("b")]);
    assert_eq!(
        two.extract(&RequestHead::from_parts(&req)),
        (Header::new("a"), Header::new("b")).extract(&RequestHead::from_parts(&req))
    );
    let three = AllOf::new([Header::new("a"), Header::new("b"), Header::new("c")]);
    assert_eq!(
        three.extract(&RequestHead::from_parts(&req)),
        (Header::new("a"), Header::new("b"), Header::new("c"))
            .extract(&RequestHead::from_parts(&req))
    );
    assert_eq!(three.kind(), "header:a+header:b+header:c");
    let missing = AllOf::new([Header::new("a"), Header::new("nope")]);
    assert_eq!(
        missing.extract(&RequestHead::from_parts(&req)),
        Extracted::Missing
    );
    assert_eq!(missing.on_missing(), MissingKey::default());
    assert!(AllOf::<Global>::new([]).validate().is_err());
    let nine = AllOf::new([Global; AllOf::<Global>::MAX_PARTS + 1]);
    assert_eq!(nine.validate().unwrap_err().field(), "key.parts");
    assert_eq!(
        nine.extract(&RequestHead::from_parts(&req)),
        Extracted::Missing
    );
    assert!(
        AllOf::new([Global; AllOf::<Global>::MAX_PARTS])
            .validate()
            .is_ok()
    );
}

#[test]
fn fallback_only_when_missing() {
    let ex = Header::new("a").or(|_: &RequestHead<'_>| Some(Key::new("fallback")));
    assert_eq!(
        ex.extract(&RequestHead::from_parts(&parts(http::Request::get("/")))),
        Extracted::Key(Key::new("fallback"))
    );
    let with = parts(http::Request::get("/").header("a", "1"));
    assert_eq!(
        ex.extract(&RequestHead::from_parts(&with)),
        Extracted::Key(Key::new("1"))
    );
}

#[test]
fn extensions_are_the_only_source_of_verified_identity() {
    #[derive(Clone)]
    struct User(&'static str);
    let ex = Extension::new(|u: &User| Key::new(u.0));
    let mut req = parts(http::Request::get("/").header("x-user", "mallory"));
    assert_eq!(
        ex.extract(&RequestHead::from_parts(&req)),
        Extracted::Missing
    );
    req.extensions.insert(User("alice"));
    assert_eq!(
        ex.extract(&RequestHead::from_parts(&req)),
        Extracted::Key(Key::new("alice"))
    );
}

#[test]
fn kinds_name_the_extractor_and_compose() {
    assert_eq!(Global.kind(), "global");
    assert_eq!(Header::new("x-api-key").kind(), "header:x-api-key");
    assert_eq!(UserAgentHash.kind(), "user-agent-hash");
    let custom = |_: &RequestHead<'_>| Some(Key::global());
    assert_eq!(custom.kind(), "custom");
    assert_eq!(
        (Header::new("a"), UserAgentHash).kind(),
        "header:a+user-agent-hash"
    );
    assert_eq!(
        (Global, Header::new("b"), Global).kind(),
        "global+header:b+global"
    );
    assert_eq!(Header::new("a").or(Global).kind(), "header:a|global");
    assert_eq!(Extension::new(|u: &u64| Key::from(*u)).kind(), "extension");
}

const PINNED_MOZILLA: &str = "rc3defd1610faba825d9bf8046d9bfb9e";

#[test]
fn user_agent_hashes_are_stable_fixed_length_and_missing_like_headers() {
    let ua = |v: &[u8]| {
        parts(
            http::Request::get("/").header("user-agent", http::HeaderValue::from_bytes(v).unwrap()),
        )
    };
    // Pinned: the key of a value must not change between releases, or
    // every client's count would restart (and Redis keys would move).
    let Extracted::Key(k) = UserAgentHash.extract(&RequestHead::from_parts(&ua(b"Mozilla/5.0")))
    else {
        panic!()
    };
    let mut hex = String::new();
    k.write_hex(&mut hex);
    assert_eq!(hex, PINNED_MOZILLA);
    assert_eq!(k.as_bytes().len(), UserAgentHash::KEY_LEN);
    let long = ua(&[b'x'; 4000]);
    let Extracted::Key(k) = UserAgentHash.extract(&RequestHead::from_parts(&long)) else {
        panic!()
    };
    assert_eq!(k.as_bytes().len(), UserAgentHash::KEY_LEN);
    assert!(!k.is_digest(), "short enough to stay raw in a composite");
    assert_ne!(
        UserAgentHash.extract(&RequestHead::from_parts(&ua(b"a"))),
        UserAgentHash.extract(&RequestHead::from_parts(&ua(b"b")))
    );
    // Not UTF-8: hashed all the same.
    assert!(matches!(
        UserAgentHash.extract(&RequestHead::from_parts(&ua(b"\xff\xfe"))),
        Extracted::Key(_)
    ));
    assert_eq!(
        UserAgentHash.extract(&RequestHead::from_parts(&parts(http::Request::get("/")))),
        Extracted::Missing
    );
    assert_eq!(
        UserAgentHash.extract(&RequestHead::from_parts(&ua(b""))),
        Extracted::Missing
    );
    assert_eq!(
        UserAgentHash
            .or(Global)
            .extract(&RequestHead::from_parts(&parts(http::Request::get("/")))),
        Extracted::Key(Key::global())
    );
}

#[test]
fn user_agent_composes_with_other_parts() {
    let pair = (Header::new("x-net"), UserAgentHash);
    let req = |net: &str, ua: &str| {
        parts(
            http::Request::get("/")
                .header("x-net", net)
                .header("user-agent", ua),
        )
    };
    let a = pair.extract(&RequestHead::from_parts(&req("203.0.113.0", "curl/8")));
    assert_eq!(
        a,
        pair.extract(&RequestHead::from_parts(&req("203.0.113.0", "curl/8")))
    );
    assert_ne!(
        a,
        pair.extract(&RequestHead::from_parts(&req("203.0.113.0", "wget/1")))
    );
    assert_ne!(
        a,
        pair.extract(&RequestHead::from_parts(&req("198.51.100.0", "curl/8")))
    );
    let no_ua = parts(http::Request::get("/").header("x-net", "203.0.113.0"));
    assert_eq!(
        pair.extract(&RequestHead::from_parts(&no_ua)),
        Extracted::Missing
    );
}
