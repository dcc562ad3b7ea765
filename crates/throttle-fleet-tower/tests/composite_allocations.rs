//! What an n-ary composite key ([`AllOf`]) costs in heap allocations per
//! request: nothing, whatever its parts (boxed, as a configuration file
//! builds them), whether its encoding fits a key or is hashed. Before,
//! the configuration's composite collected its parts' keys and their
//! encoding into two `Vec`s on every request; that version is kept here
//! as the reference the count is compared with.
//!
//! No test harness (`harness = false`): `main` counts on the only thread
//! there is, so no harness thread can allocate inside a counted call.

use std::alloc::System;
use std::net::SocketAddr;

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use throttle_fleet_tower::RequestHead;
use throttle_fleet_tower::key::{AllOf, ClientAddr, Extracted, Global, Header, UserAgentHash};
use throttle_fleet_tower::{Key, KeyExtractor};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The allocations (and reallocations) `f` makes.
fn allocations<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let region = Region::new(GLOBAL);
    let out = f();
    let change = region.change();
    (out, change.allocations + change.reallocations)
}

fn peer(req: &RequestHead<'_>) -> Option<SocketAddr> {
    req.extensions.get::<SocketAddr>().copied()
}

/// The parts a file's `parts = ["ip", "header:x-tenant", "user-agent",
/// "global"]` becomes, boxed.
fn parts() -> Vec<Box<dyn KeyExtractor>> {
    vec![
        Box::new(ClientAddr::new(peer).ipv4_prefix(24)),
        Box::new(Header::new("x-tenant")),
        Box::new(UserAgentHash),
        Box::new(Global),
    ]
}

/// The composite as the configuration built it before: two `Vec`s a
/// request.
fn with_vecs(parts: &[Box<dyn KeyExtractor>], req: &RequestHead<'_>) -> Extracted {
    let mut keys = Vec::with_capacity(parts.len());
    for part in parts {
        match part.extract(req) {
            Extracted::Key(k) => keys.push(k),
            other => return other,
        }
    }
    let mut encoded: Vec<&[u8]> = Vec::with_capacity(2 * keys.len());
    for key in &keys {
        encoded.push(if key.is_digest() { b"h" } else { b"r" });
        encoded.push(key.as_bytes());
    }
    Extracted::Key(Key::from_parts(&encoded))
}

fn request(tenant: &str) -> http::request::Parts {
    let mut req = http::Request::get("/")
        .header("x-tenant", tenant)
        .header("user-agent", "curl/8.5.0")
        .body(())
        .unwrap()
        .into_parts()
        .0;
    let addr: SocketAddr = "203.0.113.7:50000".parse().unwrap();
    req.extensions.insert(addr);
    req
}

fn main() {
    let composite = AllOf::new(parts());
    composite.validate().unwrap();
    let reference = parts();
    // Short enough to stay raw, and long enough to be hashed.
    let (short, long) = (request("acme"), request(&"t".repeat(60)));
    let short = RequestHead::from_parts(&short);
    let long = RequestHead::from_parts(&long);

    for req in [&short, &long] {
        let expected = with_vecs(&reference, req);
        let (_, before) = allocations(|| with_vecs(&reference, req));
        // Warm up, then count many requests.
        assert_eq!(composite.extract(req), expected, "the same key as before");
        let (keys, counted) = allocations(|| {
            let mut last = Extracted::Missing;
            for _ in 0..1_000 {
                last = composite.extract(req);
            }
            last
        });
        assert_eq!(keys, expected);
        let Extracted::Key(key) = keys else { panic!() };
        println!(
            "composite of 4 boxed parts ({}): {counted} allocations in 1000 extractions (the Vec version: {before} per extraction)",
            if key.is_digest() { "hashed" } else { "raw" },
        );
        assert_eq!(counted, 0, "an AllOf extraction allocates nothing");
        assert_eq!(before, 2, "the reference made its two Vecs");
    }
    // Through a boxed AllOf, as a policy holds it: still nothing.
    let boxed: Box<dyn KeyExtractor> = Box::new(AllOf::new(parts()));
    let (_, n) = allocations(|| boxed.extract(&short));
    assert_eq!(n, 0);
    println!("composite_allocations: ok");
}
