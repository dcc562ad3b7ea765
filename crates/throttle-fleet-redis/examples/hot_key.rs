//! The approximate mode's hot key: what one key written by every instance
//! costs Redis. `benches/hot-key/run.sh` runs it against a private
//! `redis-server` for several fleet sizes.
//!
//! `INSTANCES` backends in `approximate` mode (each its own instance, with
//! its own connections and id) share one rule of 1,000,000 requests per
//! `INTERVAL_SECS` (default 60, ten spans: a span-end flush every 6 s) and
//! check one key that every one of them sees, `RATE` times a second each
//! (default 10). After a warm-up of one interval's first span, Redis'
//! statistics are reset; after `SECS` more (default 30) the example prints
//! Redis' `commandstats` for the flush script (calls, µs per call, µs per
//! second) and the memory of the rule's hashes, as one line of JSON.
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:7000 INSTANCES=64 cargo run --example hot_key -p throttle-fleet-redis
//! ```

use std::time::Duration;

use throttle_fleet_core::backend::Backend;
use throttle_fleet_core::{Answer, Key, Quota, Rule};
use throttle_fleet_redis::{ApproximateOptions, RedisBackend, RedisConfig};

fn var(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `field=value` of one `cmdstat_<name>` line of `INFO commandstats`.
fn stat(info: &str, command: &str, field: &str) -> f64 {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
        .and_then(|l| {
            l.split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let instances = var("INSTANCES", 4);
    let secs = var("SECS", 30);
    let rate = var("RATE", 10).max(1);
    let interval = Duration::from_secs(var("INTERVAL_SECS", 60));
    let rule = Rule::new("hot", Quota::new(1_000_000, interval)).fixed_window();
    let key = Key::new("tenant-everyone-shares");

    let mut limiters = Vec::new();
    let mut backends = Vec::new();
    for _ in 0..instances {
        let config = RedisConfig::standalone(url.clone())
            .key_prefix("hot")
            .connections(1);
        let backend = RedisBackend::approximate(config, ApproximateOptions::default()).await?;
        limiters.push(backend.limiter(&rule)?);
        backends.push(backend);
    }
    let mut tasks = Vec::new();
    for (i, limiter) in limiters.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let every = Duration::from_micros(1_000_000 / rate);
            // Spread over the period: the instances' timers are not in step.
            tokio::time::sleep(every * i as u32 / instances as u32).await;
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                match limiter.acquire(&key, 1, u64::MAX) {
                    Answer::Ready(_) => {}
                    Answer::Pending(f) => {
                        let _ = f.await;
                    }
                }
            }
        }));
    }
    let client = redis::Client::open(url.as_str())?;
    // Patient: a fleet's span-end flushes can keep Redis busy for a while
    // (that is what this measures).
    let patient = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(10)))
        .set_response_timeout(Some(Duration::from_secs(10)));
    let mut con = client
        .get_multiplexed_async_connection_with_config(&patient)
        .await?;
    // Every instance has written the key once before the figures start.
    tokio::time::sleep(interval / 10 + Duration::from_secs(1)).await;
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(&mut con)
        .await?;
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut con)
        .await?;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("hot:*:a:*")
        .query_async(&mut con)
        .await?;
    let mut bytes = 0u64;
    let mut fields = 0u64;
    for k in &keys {
        let used: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(k)
            .query_async(&mut con)
            .await?;
        bytes = bytes.max(used.unwrap_or(0));
        let n: u64 = redis::cmd("HLEN").arg(k).query_async(&mut con).await?;
        fields = fields.max(n);
    }
    for t in &tasks {
        t.abort();
    }
    let calls = stat(&info, "evalsha", "calls") + stat(&info, "eval", "calls");
    let usec = stat(&info, "evalsha", "usec") + stat(&info, "eval", "usec");
    println!(
        "{{\"instances\":{instances},\"secs\":{secs},\"flush_calls\":{calls},\"usec_per_call\":{:.1},\"usec_per_sec\":{:.1},\"hash_bytes\":{bytes},\"hash_fields\":{fields}}}",
        if calls > 0.0 { usec / calls } else { 0.0 },
        usec / secs as f64,
    );
    for backend in &backends {
        let _ = backend.shutdown().await;
    }
    Ok(())
}
