//! Memory per tracked key at one million keys: the memory backend (token
//! bucket) next to governor's keyed limiter and throttle-kit's (its keys
//! are strings: the text of each key is counted, as its table owns it).
//!
//! Run with `cargo bench -p throttle-fleet-core --bench memory` (Linux only; a few
//! seconds).
//!
//! Each measurement runs in a fresh child process (this binary started again)
//! so that nothing left by one subject is counted for the other. The child
//! reads its resident anonymous memory (`RssAnon` in `/proc/self/status`)
//! after building an empty limiter, inserts the keys with one allowed check
//! each, reads it again, and reports the difference divided by the key
//! count.
//!
//! Resident memory is what the process really costs, but it counts more than
//! the live data: the allocator's own overhead, table capacity beyond the
//! keys, and old buffers from growth that the allocator keeps instead of
//! giving back. So each subject is measured twice: with glibc's defaults,
//! and with `MALLOC_MMAP_THRESHOLD_=65536` (large buffers always mapped, so
//! freed ones are returned at once), which comes close to live heap bytes.
//! Memory is read from `/proc` rather than counted by a wrapping global
//! allocator because the workspace forbids `unsafe` code, which a
//! `GlobalAlloc` impl needs.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::Command;

use governor::{DefaultKeyedRateLimiter, RateLimiter};
use throttle_fleet_core::algorithm::Gcra;
use throttle_fleet_core::{Key, Quota, memory::MemoryBackend};

const KEYS: u64 = 1_000_000;
const SUBJECT_VAR: &str = "THROTTLE_MEMORY_BENCH_SUBJECT";

/// Resident anonymous memory of this process, in bytes.
fn rss_anon() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("RssAnon in /proc/self/status");
    kib * 1024
}

/// Polls a future that is ready at once (throttle-kit's in-memory check).
fn ready_now<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => unreachable!("the in-memory backend decides at once"),
    }
}

/// Measures one subject in this process and prints bytes per key.
fn child(subject: &str) {
    // Keys are built on the stack in the loop: nothing but the limiter grows.
    let (before, after, tracked) = match subject {
        "throttle" => {
            // Room above the key count: at its bound the table would evict.
            let limiter = MemoryBackend::default()
                .max_keys(2 * KEYS as usize)
                .limiter_for(Gcra::token_bucket(Quota::per_second(1_000_000_000)).unwrap())
                .unwrap();
            let before = rss_anon();
            for k in 0..KEYS {
                assert!(limiter.check(&Key::from(k), 1).step.allowed);
            }
            let after = rss_anon();
            let stats = limiter.stats();
            assert_eq!(stats.evictions, 0, "{stats:?}");
            black_box(&limiter);
            (before, after, stats.tracked_keys)
        }
        "governor" => {
            let quota = governor::Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap());
            let limiter: DefaultKeyedRateLimiter<u64> = RateLimiter::keyed(quota);
            let before = rss_anon();
            for k in 0..KEYS {
                assert!(limiter.check_key(&k).is_ok());
            }
            let after = rss_anon();
            black_box(&limiter);
            (before, after, limiter.len())
        }
        "throttle-kit" => {
            let limiter = throttle_kit::RateLimiter::new(
                throttle_kit::Quota::per_second(1_000_000_000),
                throttle_kit::InMemoryBackend::new(),
            );
            let before = rss_anon();
            let mut text = String::new();
            for k in 0..KEYS {
                use std::fmt::Write as _;
                text.clear();
                let _ = write!(text, "{k}");
                assert!(ready_now(limiter.check(&text)).allowed);
            }
            let after = rss_anon();
            black_box(&limiter);
            (before, after, KEYS as usize)
        }
        other => panic!("unknown subject {other:?}"),
    };
    assert_eq!(tracked as u64, KEYS);
    println!("{}", (after - before) as f64 / KEYS as f64);
}

fn main() {
    if let Ok(subject) = std::env::var(SUBJECT_VAR) {
        child(&subject);
        return;
    }
    if !std::path::Path::new("/proc/self/status").exists() {
        println!("memory bench: needs Linux /proc; skipped");
        return;
    }
    let exe = std::env::current_exe().expect("current executable");
    println!("resident bytes per tracked key at {KEYS} keys");
    println!(
        "{:<12} {:>16} {:>20}",
        "subject", "glibc defaults", "mmap threshold 64K"
    );
    for subject in ["throttle", "governor", "throttle-kit"] {
        let mut cells = Vec::new();
        for threshold in [None, Some("65536")] {
            let mut cmd = Command::new(&exe);
            cmd.env(SUBJECT_VAR, subject);
            match threshold {
                Some(t) => cmd.env("MALLOC_MMAP_THRESHOLD_", t),
                None => cmd.env_remove("MALLOC_MMAP_THRESHOLD_"),
            };
            let out = cmd.output().expect("run the measuring child");
            assert!(
                out.status.success(),
                "{subject}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let bytes: f64 = String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("bytes per key");
            cells.push(format!("{bytes:.1}"));
        }
        println!("{subject:<12} {:>16} {:>20}", cells[0], cells[1]);
    }
}
