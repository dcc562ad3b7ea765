//! The flush: which keys a span end (or an early flush) writes, one script
//! call per bucket hash and [`FLUSH_CHUNK`] keys, and the claims it brings
//! back applied to the keys' state. What a claim is, the formula and the
//! bound are in `claims.rs`, next to the Rust mirror of `flush.lua`.

use std::sync::LazyLock;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::buckets::{Buckets, each};
use super::claims::Reply;
use super::limiter::ApproxRule;
use super::meter::{Window, flag};
use super::plan::{self, Planning, Write};
use super::turns::Queued;
use super::view::View;
use crate::link::{Eval, LuaScript};

/// The buckets a flush call is out to, marked for as long as it is (a
/// dropped call unmarks them too).
struct Flights<'a> {
    view: &'a View,
    buckets: Buckets,
}

impl<'a> Flights<'a> {
    fn start(view: &'a View, buckets: Buckets, now_us: u64) -> Self {
        view.flights_started(buckets, now_us);
        Self { view, buckets }
    }
}

impl Drop for Flights<'_> {
    fn drop(&mut self) {
        self.view.flights_ended(self.buckets);
    }
}

/// Tells the requests waiting for a bucket's flush that it is over, when
/// dropped.
struct Answered<'a> {
    rule: &'a ApproxRule,
    bucket: u64,
    number: u64,
}

impl Drop for Answered<'_> {
    fn drop(&mut self) {
        self.rule.answered(self.bucket, self.number);
    }
}

/// What the flush of one bucket did.
struct Part {
    /// Entries written.
    written: usize,
    /// Whether it reached Redis (nothing to write: whether it was up).
    ok: bool,
}

/// The flush script (see `flush.lua`).
static FLUSH_SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("flush.lua")));

/// The most keys one flush call carries.
pub(super) const FLUSH_CHUNK: usize = 1_000;

impl ApproxRule {
    /// Writes every key seen since the last flush (and those still holding
    /// a claim) and applies the claims granted; returns whether it all
    /// reached Redis. Costs one script call per bucket and 1,000 keys, and
    /// work in proportion to the keys written, not to the keys tracked.
    pub(crate) async fn flush(&self) -> bool {
        self.write_buckets(self.layout.all(), false).await
    }

    /// The early flush: writes the keys that ran out of claim before their
    /// span ended (one call per bucket they are in, whatever their number).
    pub(crate) async fn flush_asked(&self) -> bool {
        let buckets = self.take_asked();
        if buckets == 0 {
            return true;
        }
        self.write_buckets(buckets, true).await
    }

    /// Writes the listed keys of `buckets` (bit `b`), each bucket apart: a
    /// bucket whose node hangs delays only its own keys and the requests
    /// waiting for them.
    async fn write_buckets(&self, buckets: Buckets, early: bool) -> bool {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let started = Instant::now();
        let parts =
            futures_util::future::join_all(each(buckets).map(|b| self.write_bucket(b, seq, early)))
                .await;
        let written: usize = parts.iter().map(|p| p.written).sum();
        let ok = parts.iter().all(|p| p.ok);
        let c = &self.shared.counters;
        c.pending_keys.store(written as u64, Ordering::Relaxed);
        if written == 0 {
            return ok;
        }
        if ok {
            let us = started.elapsed().as_micros() as u64;
            c.flushes.fetch_add(1, Ordering::Relaxed);
            c.last_flush_us.store(us, Ordering::Relaxed);
            c.max_flush_us.fetch_max(us, Ordering::Relaxed);
            self.metrics.flushed(started.elapsed());
        } else {
            c.failed_flushes.fetch_add(1, Ordering::Relaxed);
            self.metrics.failed();
        }
        if ok && self.retired.load(Ordering::Relaxed) && self.unwritten() == 0 {
            self.rules.forget(self);
        }
        ok
    }

    /// Writes the listed keys of one bucket and applies the answers; then
    /// the requests waiting for them decide again (also if it failed).
    ///
    /// One flush of a bucket is out at a time, and at most one waits for
    /// it: a flush that finds one waiting leaves its keys to it (that one
    /// takes the list when its turn comes, so it writes what this one would
    /// have) and only waits for its answer. So however long a node hangs,
    /// and however many flushes are tried meanwhile (every probe interval
    /// while the bucket is down, each span end), once it answers the bucket
    /// is written twice at most, and an early flush asked then waits behind
    /// those two, not behind a queue as long as the hang. And a flush reads
    /// the time once its turn has come: the counts it writes and the span
    /// its claim is granted for are those of now, not of when it was tried.
    async fn write_bucket(&self, bucket: u64, seq: u32, early: bool) -> Part {
        let b = bucket as usize;
        let bit: Buckets = 1 << bucket;
        let turn = &self.turns[b];
        // Read before `waiting`: the flush waiting now takes a number above it.
        let taken = self.taken[b].load(Ordering::SeqCst);
        if !early {
            // Before `waiting`: the flush waiting now writes every listed key.
            turn.full.store(true, Ordering::SeqCst);
        }
        if turn.waiting.swap(true, Ordering::SeqCst) {
            self.answered_after(bucket, taken).await;
            return Part {
                written: 0,
                ok: self.view.redis_down.load(Ordering::Relaxed) & bit == 0,
            };
        }
        // One flush of a bucket at a time, and its list taken under it: a
        // shutdown that finds it empty waits for the flush that took it,
        // and a flush dropped while waiting takes nothing.
        let queued = Queued(&turn.waiting);
        let _one = turn.lock.lock().await;
        // Its turn (or dropped while waiting): the next flush tried waits.
        drop(queued);
        let early = early && !turn.full.swap(false, Ordering::SeqCst);
        let now = self.redis.local_now();
        let number = self.taken[b].fetch_add(1, Ordering::SeqCst) + 1;
        let keys = self.take_listed(1 << bucket);
        // Answered however the write ends (a flush dropped midway too).
        let _answered = Answered {
            rule: self,
            bucket,
            number,
        };
        let at = Planning {
            now,
            early,
            closing: self.retired.load(Ordering::Relaxed)
                || self.shared.closing.load(Ordering::Relaxed),
            fleet: self.view.fleet.size(),
        };
        let meter = self.store.meter();
        let mut writes = Vec::with_capacity(keys.len() + keys.len() / 8);
        let mut dropped = 0;
        for key in &keys {
            let planned = self
                .store
                .update(key, |st| plan::writes(meter, key, st, &at, &mut writes));
            if let Some(planned) = planned {
                dropped += planned.dropped;
                if planned.carried {
                    self.list(key);
                }
            }
        }
        self.shared
            .counters
            .dropped
            .fetch_add(dropped, Ordering::Relaxed);
        let ok = if writes.is_empty() {
            if self.view.redis_down.load(Ordering::Relaxed) & bit == 0 {
                return Part {
                    written: 0,
                    ok: true,
                };
            }
            // Down with nothing to write: a real round trip to its node
            // decides whether it is back (a fail-closed rule writes nothing).
            self.redis.ping_slot(self.layout.slot(bucket)).await
        } else {
            // This interval's counts, and the last one's not written yet.
            let mut intervals: Vec<u64> = writes.iter().map(|w| w.interval).collect();
            intervals.sort_unstable();
            intervals.dedup();
            let groups: Vec<Vec<Write>> = intervals
                .iter()
                .map(|&i| writes.iter().filter(|w| w.interval == i).copied().collect())
                .collect();
            let calls = groups.iter().flat_map(|group| {
                group.chunks(FLUSH_CHUNK).map(|chunk| async move {
                    // Marked out for as long as this call is: an overdue
                    // call hands its keys to the failure policy.
                    let _out = Flights::start(&self.view, bit, now);
                    self.flush_bucket(bucket, chunk[0].interval, chunk, now, seq)
                        .await
                })
            });
            futures_util::future::join_all(calls)
                .await
                .into_iter()
                .all(|ok| ok)
        };
        if ok {
            self.view.redis_down.fetch_and(!bit, Ordering::Relaxed);
        } else if self.view.redis_down.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            self.view
                .down_at
                .store(self.redis.local_now(), Ordering::Relaxed);
            self.wake.notify_one();
        }
        Part {
            written: writes.len(),
            ok,
        }
    }

    /// One script call for keys sharing a bucket and interval; applies the
    /// replies, or lists the keys again if it failed. Returns whether it
    /// reached Redis.
    async fn flush_bucket(
        &self,
        bucket: u64,
        interval: u64,
        writes: &[Write],
        now: u64,
        seq: u32,
    ) -> bool {
        let meter = self.store.meter();
        // Kept until the next interval ends (the sliding estimate reads it),
        // plus a second.
        let ttl_ms = ((interval + 2) * self.interval_us).saturating_sub(now) / 1_000 + 1_000;
        let weight_milli = match meter.window {
            Window::Fixed(_) => 0,
            Window::Sliding(_) => {
                // The previous interval's weight at the write (at least 1
                // while any of it is left, so the script reads it).
                let into = now.saturating_sub(interval * self.interval_us);
                (self.interval_us.saturating_sub(into) * 1_000)
                    .div_ceil(self.interval_us)
                    .min(1_000)
            }
        };
        let mut inv = Eval::new(
            &FLUSH_SCRIPT,
            2,
            10 + 6 * writes.len(),
            200 + 80 * writes.len(),
        );
        inv.arg(self.layout.hash(bucket, interval))
            .arg(self.layout.hash(bucket, interval.saturating_sub(1)))
            .arg(&self.instance)
            .arg(ttl_ms)
            .arg(self.limit)
            .arg(weight_milli)
            .arg(interval * meter.spans + u64::from(writes[0].span))
            .arg(self.view.fleet.size())
            .arg(meter.credit(self.view.fleet.size()))
            .arg(seq)
            .arg(meter.overdraft())
            .arg(interval * meter.spans);
        let mut field = String::new();
        for w in writes {
            field.clear();
            w.key.write_hex(&mut field);
            inv.arg(field.as_str())
                .arg(w.cum)
                .arg(w.hold)
                .arg(w.demand)
                .arg(w.known)
                .arg(w.need);
        }
        let reply = match self
            .redis
            .eval_off_path::<String>(
                &inv,
                self.layout.slot(bucket),
                self.shared.options.flush_timeout,
            )
            .await
        {
            Ok(reply) if replies_of(&reply).count() == writes.len() => reply,
            Ok(_) => {
                tracing::debug!(rule = self.rule.name(), "unexpected flush reply");
                self.relist(writes);
                return false;
            }
            Err(failure) => {
                tracing::debug!(rule = self.rule.name(), %failure, "flush failed; counts kept for the next one");
                self.relist(writes);
                return false;
            }
        };
        for (w, reply) in writes.iter().zip(replies_of(&reply)) {
            if let Some(reply) = Reply::parse(reply) {
                self.apply(w, &reply, seq);
            }
        }
        true
    }

    /// Lists the keys of a failed write again, for the next flush.
    fn relist(&self, writes: &[Write]) {
        for w in writes {
            let again = self.store.update(&w.key, |st| {
                let again = !st.has(flag::LISTED);
                st.flags |= flag::LISTED;
                again
            });
            if again == Some(true) {
                self.list(&w.key);
            }
        }
    }

    /// Applies a key's reply: the rule's counters and fleet size here, the
    /// key's state in `plan::apply`.
    fn apply(&self, w: &Write, r: &Reply, seq: u32) {
        let [spent, _, limit, instances, ..] = r.as_u32();
        let c = &self.shared.counters;
        let meter = self.store.meter();
        self.view.fleet.saw(w.interval, instances);
        if spent > limit {
            c.max_overshoot
                .fetch_max(u64::from(spent - limit), Ordering::Relaxed);
        }
        let nodes_milli = if w.cum > 0 {
            (u64::from(spent) * 1_000 / u64::from(w.cum)).max(1_000)
        } else {
            u64::from(instances) * 1_000
        };
        c.nodes_estimate_milli.store(nodes_milli, Ordering::Relaxed);
        self.metrics.nodes_milli(nodes_milli);
        let now = self.redis.local_now();
        let relist = self.store.update(&w.key, |st| {
            plan::apply(meter, st, w, r, seq, now, self.cooldown_us)
        });
        if relist == Some(true) {
            self.list(&w.key);
        }
    }
}

/// The keys' replies in a flush script's answer: one string, separated by
/// spaces (none for no keys).
fn replies_of(reply: &str) -> impl Iterator<Item = &str> {
    reply.split(' ').filter(|r| !r.is_empty())
}

#[cfg(test)]
mod tests;
