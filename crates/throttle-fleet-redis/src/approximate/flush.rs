//! The flush: which keys a span end (or an early flush) writes, one script
//! call per bucket hash and [`FLUSH_CHUNK`] keys, and the claims it brings
//! back applied to the keys' state. What a claim is, the formula and the
//! bound are in `claims.rs`, next to the Rust mirror of `flush.lua`.

use std::sync::LazyLock;
use std::sync::atomic::Ordering;
use std::time::Instant;

use redis::Script;
use throttle_fleet_core::Key;

use super::buckets::{Buckets, each};
use super::claims::Reply;
use super::limiter::ApproxRule;
use super::meter::{SpanMeter, SpanState, Window, flag, sat32};

/// The buckets a flush call is out to, marked for as long as it is (a
/// dropped call unmarks them too).
struct Flights<'a> {
    meter: &'a SpanMeter,
    buckets: Buckets,
}

impl<'a> Flights<'a> {
    fn start(meter: &'a SpanMeter, buckets: Buckets, now_us: u64) -> Self {
        meter.flights_started(buckets, now_us);
        Self { meter, buckets }
    }
}

impl Drop for Flights<'_> {
    fn drop(&mut self) {
        self.meter.flights_ended(self.buckets);
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
static FLUSH_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("flush.lua")));

/// The most keys one flush call carries.
pub(super) const FLUSH_CHUNK: usize = 1_000;

/// One key's entry to write.
#[derive(Debug, Clone, Copy)]
pub(super) struct Write {
    pub(super) key: Key,
    pub(super) interval: u64,
    /// Span within `interval` the write was made in.
    pub(super) span: u16,
    /// This instance's cumulative count.
    pub(super) cum: u32,
    /// The most it may admit before the reply is applied.
    pub(super) hold: u32,
    /// Requests per span.
    pub(super) demand: u32,
    /// The fleet's count as this instance last heard it.
    pub(super) known: u32,
    /// The cost of the requests waiting for this write's answer: the claim
    /// covers at least this much if the fleet has it free.
    pub(super) need: u32,
    /// Whether a request asked for this write (an early flush).
    pub(super) asked: bool,
}

impl ApproxRule {
    /// The entries a flush writes for one key now, and resets its demand.
    /// Returns whether the key stays listed without a write: blocked with
    /// nothing new to say, it is carried to the flush after its block lifts,
    /// which asks for a claim with the demand seen meanwhile (so the first
    /// requests of the next interval need no early flush).
    fn writes_of(
        &self,
        key: &Key,
        st: &mut SpanState,
        now: u64,
        early: bool,
        out: &mut Vec<Write>,
    ) -> bool {
        let meter = self.store.meter();
        let (_, dropped) = meter.roll(st, now);
        self.shared
            .counters
            .dropped
            .fetch_add(dropped, Ordering::Relaxed);
        if now < st.blocked_until && st.local == st.flushed && st.pending == 0 {
            return true;
        }
        if early && !st.has(flag::WANTS) && st.need == 0 {
            // An early flush writes the keys that asked for it; the others
            // wait for the span's end (their claims hold until then, and a
            // moment's demand would shrink them).
            return true;
        }
        let asked = st.has(flag::WANTS);
        st.flags &= !(flag::LISTED | flag::WANTS);
        if st.pending > 0 {
            out.push(Write {
                key: *key,
                interval: st.interval - 1,
                span: (meter.spans - 1) as u16,
                cum: st.pending,
                hold: st.pending,
                demand: 0,
                known: st.prev_fleet,
                need: 0,
                asked: false,
            });
        }
        // (A key with recent demand and no entry in this interval yet, just
        // rolled into it while it held a claim: it asks for a claim in the
        // new interval now, so that its next request need not wait.)
        let asks = st.rate8 > 0 && !st.has(flag::ENTRY);
        if st.local != st.flushed
            || st.seen > 0
            || asks
            || (st.claim_valid() && st.claim > st.local)
        {
            // A rule that is going away (its limiter dropped, or the backend
            // shutting down) asks for nothing and gives its claim back.
            let closing =
                self.retired.load(Ordering::Relaxed) || self.shared.closing.load(Ordering::Relaxed);
            let demand = if closing {
                0
            } else {
                meter.smoothed_demand(st, now, early)
            };
            // While the write is out, this instance spends at most a little
            // more than it has (a flight takes milliseconds): the old claim
            // is not carried into the new one. Nothing seen since the last
            // write: all of it goes back (a request that comes later waits
            // for a claim).
            let credit = meter.credit();
            let margin = if closing || demand == 0 {
                0
            } else {
                credit.max(demand / 8)
            };
            let hold = st.ceiling(credit).min(st.local.saturating_add(margin));
            if st.claim_valid() {
                st.claim = st.claim.min(hold);
            }
            out.push(Write {
                key: *key,
                interval: st.interval,
                span: st.span,
                cum: st.local,
                hold,
                demand,
                known: sat32(st.heard()),
                need: if closing { 0 } else { st.need },
                asked,
            });
            st.need = 0;
            if !early {
                // The demand is counted from one span-end write to the
                // next: an early write in between does not cut it short.
                st.seen = 0;
                st.since = now;
            }
        }
        false
    }

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
        let now = self.redis.local_now();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let started = Instant::now();
        let parts = futures_util::future::join_all(
            each(buckets).map(|b| self.write_bucket(b, now, seq, early)),
        )
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
    async fn write_bucket(&self, bucket: u64, now: u64, seq: u32, early: bool) -> Part {
        // One flush of a bucket at a time, and its list taken under it: a
        // shutdown that finds it empty waits for the flush that took it,
        // and a flush dropped while waiting takes nothing.
        let _one = self.flushing[bucket as usize].lock().await;
        let number = self.taken[bucket as usize].fetch_add(1, Ordering::SeqCst) + 1;
        let keys = self.take_listed(1 << bucket);
        // Answered however the write ends (a flush dropped midway too).
        let _answered = Answered {
            rule: self,
            bucket,
            number,
        };
        let mut writes = Vec::with_capacity(keys.len() + keys.len() / 8);
        for key in &keys {
            let carried = self
                .store
                .update(key, |st| self.writes_of(key, st, now, early, &mut writes));
            if carried == Some(true) {
                self.list(key);
            }
        }
        let meter = self.store.meter();
        let bit: Buckets = 1 << bucket;
        let ok = if writes.is_empty() {
            if meter.redis_down.load(Ordering::Relaxed) & bit == 0 {
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
                    let _out = Flights::start(meter, bit, now);
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
            meter.redis_down.fetch_and(!bit, Ordering::Relaxed);
        } else if meter.redis_down.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            self.went_down.notify_one();
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
        let mut inv = FLUSH_SCRIPT.prepare_invoke();
        inv.key(self.layout.hash(bucket, interval))
            .key(self.layout.hash(bucket, interval.saturating_sub(1)))
            .arg(&self.instance)
            .arg(ttl_ms)
            .arg(self.limit)
            .arg(weight_milli)
            .arg(interval * meter.spans + u64::from(writes[0].span))
            .arg(meter.fleet.size())
            .arg(meter.credit())
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

    fn apply(&self, w: &Write, r: &Reply, seq: u32) {
        let [spent, claim, limit, instances, prev, estimate, rate, free] = r.as_u32();
        let c = &self.shared.counters;
        let meter = self.store.meter();
        meter.fleet.saw(w.interval, instances);
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
        let instances = u8::try_from(instances).unwrap_or(u8::MAX);
        let now = self.redis.local_now();
        let relist = self.store.update(&w.key, |st| {
            if st.interval == w.interval {
                if seq <= st.seq && st.has(flag::ENTRY) {
                    return false;
                }
                st.seq = seq;
                st.flags |= flag::ENTRY;
                st.flushed = w.cum;
                st.claim = claim;
                st.grant_span = w.span;
                st.spent = spent;
                st.behind = estimate.saturating_sub(spent);
                st.others_rate = rate;
                st.instances = instances;
                st.prev_fleet = st.prev_fleet.max(prev);
                if spent >= limit {
                    // No room left in the fleet: denied here without a
                    // flush until the window can have room again.
                    st.claim = st.local;
                    st.seen = 0;
                    st.since = now;
                    st.blocked_until = match meter.window {
                        Window::Fixed(_) => {
                            let end = (w.interval + 1) * self.interval_us;
                            self.cooldown_us.map_or(end, |cd| now + cd)
                        }
                        // Until the window, as this instance knows it now,
                        // has room for one more (its room grows with time),
                        // at most until the span ends.
                        Window::Sliding(_) => {
                            let step = meter.window_step(st, now, st.heard(), 1);
                            let end = meter.span_end(w.interval, u64::from(st.span));
                            if step.allowed {
                                0
                            } else {
                                (now + step.retry_after_us).min(end)
                            }
                        }
                    };
                } else if w.asked
                    && (claim <= st.local
                        || (free == 0 && matches!(meter.window, Window::Fixed(_))))
                {
                    // Asked for, and nothing (or the last of what was free)
                    // granted: other instances hold the rest, and asking
                    // again before they flush at their span end gives
                    // nothing more (a sliding window grows its room with
                    // time: at the span end). Meanwhile requests this
                    // instance has no claim for are denied, not kept
                    // waiting for a Redis call that would deny them.
                    st.quiet_until = match meter.window {
                        Window::Fixed(_) => {
                            meter.span_end(w.interval, u64::from(st.span)) + meter.span_us() / 5
                        }
                        Window::Sliding(_) => meter.span_end(w.interval, u64::from(st.span)),
                    };
                }
                // Holding a claim: written again at the span end, to renew
                // it or give back all but a credit (which keeps a key seen in
                // the interval answering at once, and costs bytes in calls
                // made anyway); blocked: carried to the flush after the block.
                (st.claim > st.local || now < st.blocked_until) && !st.has(flag::LISTED) && {
                    st.flags |= flag::LISTED;
                    true
                }
            } else {
                if st.interval == w.interval + 1 && st.pending == w.cum {
                    st.pending = 0;
                    st.prev_fleet = st.prev_fleet.max(spent);
                }
                false
            }
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
mod tests {
    use super::replies_of;

    #[test]
    fn a_flush_answer_is_one_reply_per_key() {
        let answer = "12:15:100:3:40:20:9:4 S 1:2:3:4:5:6:7:8";
        assert_eq!(
            replies_of(answer).collect::<Vec<_>>(),
            ["12:15:100:3:40:20:9:4", "S", "1:2:3:4:5:6:7:8"]
        );
        assert_eq!(replies_of("").count(), 0);
    }
}
