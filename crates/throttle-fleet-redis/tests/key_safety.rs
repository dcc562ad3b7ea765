//! Hostile key material (braces, separators, newlines, huge and non-UTF-8
//! values) never collides with another client's key and never chooses the
//! hash slot: every Redis key is `rl:{<rule>:<hex>}:<suffix>`.

use std::time::Duration;

use throttle_fleet_core::backend::Backend as _;
use throttle_fleet_core::{Answer, Key, Quota, Rule};
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_keys_stay_apart_and_inside_their_hash_tag() {
    let server = RedisServer::start();
    let config = RedisConfig::standalone(server.url()).command_timeout(Duration::from_secs(2));
    let backend = RedisBackend::exact(config).await.unwrap();
    let limiter = backend
        .limiter(
            // One a day: the window is aligned to Redis `TIME`, and a
            // wall-clock boundary between a key's two checks would allow both.
            &Rule::new("hostile", Quota::per_day(1))
                .fixed_window()
                .fail_closed(),
        )
        .unwrap();

    let big = vec![b'x'; 64 * 1024];
    let mut big2 = big.clone();
    big2[40_000] = b'y';
    let materials: Vec<Vec<u8>> = vec![
        b"{".to_vec(),
        b"}".to_vec(),
        b"{}".to_vec(),
        b"}{".to_vec(),
        b"{hostile:r7b}".to_vec(),
        b"a:b".to_vec(),
        b"a".to_vec(),
        b"a ".to_vec(),
        b" a".to_vec(),
        b"a\nb".to_vec(),
        b"a\r\nb".to_vec(),
        b"\0".to_vec(),
        b"".to_vec(),
        vec![0xff, 0xfe, 0x80],
        vec![0xff, 0xfe],
        b"r7b".to_vec(),
        b"*".to_vec(),
        big,
        big2,
        // The digest of the 64 KiB value, offered as raw material.
        Key::new(vec![b'x'; 64 * 1024]).as_bytes().to_vec(),
    ];
    for m in &materials {
        let key = Key::new(m);
        for attempt in 0..2 {
            let o = match limiter.acquire(&key, 1, u64::MAX) {
                Answer::Pending(f) => f.await.unwrap(),
                Answer::Ready(r) => panic!("{r:?}"),
            };
            // First use of every key is allowed: nobody else's count is in it.
            assert_eq!(
                o.step.allowed,
                attempt == 0,
                "{:?} attempt {attempt}",
                String::from_utf8_lossy(&m[..m.len().min(40)])
            );
        }
    }

    let keys = server.cli(&["KEYS", "*"]);
    let keys: Vec<&str> = keys.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(keys.len(), materials.len(), "{keys:?}");
    for k in keys {
        let inner = k
            .strip_prefix("rl:{hostile:")
            .and_then(|rest| rest.strip_suffix("}:fw"))
            .unwrap_or_else(|| panic!("unexpected key layout: {k:?}"));
        let (kind, hex) = inner.split_at(1);
        assert!(kind == "r" || kind == "h", "{k:?}");
        assert!(
            hex.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "{k:?}"
        );
        assert!(
            k.len() <= "rl:{hostile:}:fw".len() + 1 + 2 * 64,
            "bounded length: {k:?}"
        );
    }
}
