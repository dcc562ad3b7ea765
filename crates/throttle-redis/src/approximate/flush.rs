//! The flush protocol: each dirty key's cumulative count written, the other
//! instances' counts read back, one script call per bucket hash.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use redis::Script;
use std::sync::LazyLock;
use throttle_core::Key;

use super::limiter::ApproxRule;
use super::meter::{SpanState, extrapolate};

/// The flush script (see `flush.lua`).
static FLUSH_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("flush.lua")));

/// One key's counts to write.
pub(super) struct Write {
    pub(super) key: Key,
    pub(super) interval: u64,
    /// This instance's cumulative count, taken at the start of `span`.
    pub(super) cum: u64,
    pub(super) span: u64,
    /// This instance's count at the start of the span before.
    pub(super) mine_prev: u64,
}

impl Write {
    /// The key's count for its current interval.
    pub(super) fn current(key: &Key, st: &SpanState) -> Self {
        Self {
            key: *key,
            interval: st.interval,
            cum: st.local,
            span: st.span,
            mine_prev: st.at_prev_span,
        }
    }
}

/// The other instances' counts in a flush reply, by age.
#[derive(Debug, Default)]
pub(super) struct Others {
    pub(super) same: u64,
    pub(super) prev: u64,
    pub(super) older: u64,
}

/// How many hashes a rule's keys are spread over per interval. A flush
/// costs a few commands per bucket, whatever the number of keys; in a
/// cluster the buckets spread over the slots.
pub(crate) const BUCKETS: u64 = 8;

/// The most keys one flush call carries.
pub(super) const FLUSH_CHUNK: usize = 256;

/// The bucket of a key: the same on every instance (FNV-1a of its bytes).
pub(super) fn bucket_of(key: &Key) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in std::iter::once(u8::from(key.is_digest())).chain(key.as_bytes().iter().copied()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % BUCKETS
}

impl ApproxRule {
    /// The hash of one bucket for one interval.
    pub(super) fn bucket_name(&self, bucket: u64, interval: u64) -> String {
        self.keys.bucket(bucket, interval)
    }

    /// Writes every dirty key's cumulative count and reads the fleet totals;
    /// returns whether it all reached Redis.
    pub(crate) async fn flush(&self) -> bool {
        let mut writes: HashMap<(u64, u64), Vec<Write>> = HashMap::new();
        let now = self.redis.local_now();
        let meter = self.store.meter();
        let mut dirty = 0;
        self.store.for_each(|key, st| {
            meter.roll(st, now);
            let bucket = bucket_of(key);
            if st.pending_local > 0 {
                dirty += 1;
                writes
                    .entry((bucket, st.pending_interval))
                    .or_default()
                    .push(Write {
                        key: *key,
                        interval: st.pending_interval,
                        cum: st.pending_local,
                        span: st.interval * meter.spans - 1,
                        mine_prev: 0,
                    });
            }
            if st.local != st.flushed {
                dirty += 1;
                writes
                    .entry((bucket, st.interval))
                    .or_default()
                    .push(Write::current(key, st));
            }
        });
        let c = &self.shared.counters;
        c.pending_keys.store(dirty, Ordering::Relaxed);
        if writes.is_empty() {
            return true;
        }
        let started = Instant::now();
        let mut calls = Vec::new();
        for ((bucket, interval), group) in &writes {
            for chunk in group.chunks(FLUSH_CHUNK) {
                calls.push(self.flush_bucket(*bucket, *interval, chunk, now));
            }
        }
        let ok = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .all(|r| r);
        if ok {
            let us = started.elapsed().as_micros() as u64;
            c.flushes.fetch_add(1, Ordering::Relaxed);
            c.last_flush_us.store(us, Ordering::Relaxed);
            c.max_flush_us.fetch_max(us, Ordering::Relaxed);
        } else {
            c.failed_flushes.fetch_add(1, Ordering::Relaxed);
        }
        self.shared.redis_ok.store(ok, Ordering::Relaxed);
        ok
    }

    /// One flush call for keys sharing a bucket and interval; applies the
    /// reply. Returns whether it reached Redis.
    pub(super) async fn flush_bucket(
        &self,
        bucket: u64,
        interval: u64,
        writes: &[Write],
        now: u64,
    ) -> bool {
        let name = self.bucket_name(bucket, interval);
        // Kept until the next interval ends (the sliding estimate reads it),
        // plus a second.
        let ttl_ms = ((interval + 2) * self.interval_us).saturating_sub(now) / 1_000 + 1_000;
        let mut inv = FLUSH_SCRIPT.prepare_invoke();
        inv.key(name).arg(&self.shared.instance).arg(ttl_ms);
        let mut field = String::new();
        for w in writes {
            field.clear();
            w.key.write_hex(&mut field);
            inv.arg(field.as_str()).arg(format!("{}:{}", w.cum, w.span));
        }
        match self
            .redis
            .eval_off_path::<Vec<String>>(&inv, self.shared.options.flush_timeout)
            .await
        {
            Ok(others) if others.len() == writes.len() => {
                self.apply(writes, &others);
                true
            }
            Ok(_) => false,
            Err(failure) => {
                tracing::debug!(rule = self.rule.name(), %failure, "flush failed; counts kept for the next one");
                false
            }
        }
    }

    /// Sorts the other instances' `count:span` values by age relative to
    /// this instance's write.
    pub(super) fn others(w: &Write, values: &str) -> Others {
        let mut others = Others::default();
        for value in values.split(',').filter(|v| !v.is_empty()) {
            let Some((cum, span)) = value.split_once(':') else {
                continue;
            };
            let (Ok(cum), Ok(span)) = (cum.parse::<u64>(), span.parse::<u64>()) else {
                continue;
            };
            if span >= w.span {
                others.same += cum;
            } else if span + 1 == w.span {
                others.prev += cum;
            } else {
                others.older += cum;
            }
        }
        others
    }

    pub(super) fn apply(&self, writes: &[Write], replies: &[String]) {
        let c = &self.shared.counters;
        let now = self.redis.local_now();
        for (w, values) in writes.iter().zip(replies) {
            let o = Self::others(w, values);
            let raw = w.cum + o.same + o.prev + o.older;
            // The fleet as of this write: older counts brought forward.
            let equivalent = w.cum + o.same + o.older + extrapolate(o.prev, w.mine_prev, w.cum);
            let nodes_milli = (equivalent * 1_000)
                .checked_div(w.cum)
                .map_or(1_000, |n| n.max(1_000));
            if raw > self.limit {
                c.max_overshoot
                    .fetch_max(raw - self.limit, Ordering::Relaxed);
            }
            c.nodes_estimate_milli.store(nodes_milli, Ordering::Relaxed);
            self.store.update(&w.key, |st| {
                if st.interval == w.interval {
                    st.flushed = w.cum;
                    st.flush_mine_prev = w.mine_prev;
                    st.others_a = o.same;
                    st.others_b = o.prev;
                    st.others_c = o.older;
                    st.nodes_milli = nodes_milli;
                    if raw > self.limit {
                        let end = (w.interval + 1) * self.interval_us;
                        st.blocked_until = self.cooldown_us.map_or(end, |cd| now + cd);
                    }
                } else if st.pending_local > 0 && st.pending_interval == w.interval {
                    if st.pending_local == w.cum {
                        st.pending_local = 0;
                    }
                    if st.interval == w.interval + 1 {
                        st.prev_fleet = st.prev_fleet.max(raw);
                    }
                }
            });
        }
    }

    /// Flushes one key now, in the background.
    pub(super) fn flush_early(self: &Arc<Self>, write: Write) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        rt.spawn(async move {
            let now = this.redis.local_now();
            let (bucket, interval) = (bucket_of(&write.key), write.interval);
            this.flush_bucket(bucket, interval, &[write], now).await;
        });
    }
}
