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
use crate::conn::{Eval, LuaScript};

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
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use throttle_fleet_core::{Answer, Key, Quota, Rule};
    use throttle_fleet_test_support::{DelayingProxy, RedisServer};

    use super::super::limiter::{ApproxLimiter, ApproxRule};
    use super::super::options::ApproximateOptions;
    use super::super::shared::Shared;
    use super::replies_of;
    use crate::RedisConfig;
    use crate::conn::Redis;

    /// The flushes tried while a bucket's flush waits for a hung node (a
    /// retry every probe interval, a span end) do not queue one behind the
    /// other: one waits and takes the list when its turn comes, the others
    /// leave their keys to it. Once the node answers the bucket takes two
    /// turns (the flush that was out, the one that waited), not one per
    /// flush tried, each a round trip; an early flush asked after the node
    /// came back waited behind all of them. The flushes are called here as
    /// the schedule calls them; the count of turns is exact (red without
    /// the waiting flag: 11 turns).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn flushes_tried_while_one_waits_for_a_hung_node_take_one_turn() {
        let redis = RedisServer::start();
        let proxy = DelayingProxy::start(redis.port());
        let (rule, _limiter) = rule(proxy.url(), 2, Duration::from_secs(3_600)).await;
        let key = Key::from(7u64);
        let bucket = rule.layout.bucket_of(&key) as usize;
        for _ in 0..20 {
            assert!(allowed(&rule, &key), "a new key within its credit");
        }
        assert!(rule.flush().await, "Redis answers before the hang");
        let before = rule.taken[bucket].load(Ordering::SeqCst);

        proxy.hang();
        let out = tokio::spawn({
            let rule = rule.clone();
            async move { rule.flush().await }
        });
        while rule.taken[bucket].load(Ordering::SeqCst) == before {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Ten more tried while it is out (ten probe intervals, say).
        let tried: Vec<_> = (0..10)
            .map(|_| {
                let rule = rule.clone();
                tokio::spawn(async move { rule.flush().await })
            })
            .collect();
        // Each has found the one waiting by then (a spawned task is polled
        // within a millisecond or so, on a loaded machine within tens).
        tokio::time::sleep(Duration::from_millis(500)).await;
        proxy.resume();
        assert!(
            out.await.unwrap(),
            "the flush out failed once the node answered"
        );
        for flush in tried {
            assert!(flush.await.unwrap(), "a flush tried during the hang failed");
        }
        let turns = rule.taken[bucket].load(Ordering::SeqCst) - before;
        assert!(
            turns <= 2,
            "the bucket took {turns} turns for 11 flushes tried while its node hung (at most \
             the one out and one waiting)"
        );
        assert_eq!(rule.unwritten(), 0, "a count was left unwritten");
    }

    /// A flush that waited for its turn (behind one out to a hung node)
    /// writes with the time of its turn: written with the time it was
    /// asked at, spans before, its claim was granted for a span already
    /// over, and the request waiting for its answer was denied (a lone 429
    /// to a client of a Cluster primary hung, then resumed, in
    /// `http_cluster_faults`). Here the flush out is the test holding the
    /// bucket's turn for three spans; red with the time read when the
    /// flush is asked for (the request denied).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flush_that_waited_for_its_turn_grants_for_the_span_it_writes_in() {
        const SPAN: Duration = Duration::from_millis(400);
        let redis = RedisServer::start();
        // 1,000 spans of 400 ms: no credit (a new key's first request
        // waits for a claim).
        let (rule, _limiter) = rule(redis.url(), 1_000, SPAN).await;
        let key = Key::from(7u64);
        let bucket = rule.layout.bucket_of(&key) as usize;
        away_from_interval_end(1_000 * SPAN).await;

        let out = rule.turns[bucket].lock.lock().await;
        // Asks for a claim (no credit: it would wait for one).
        let first = rule.decide(&key, 1);
        assert!(matches!(first, Answer::Pending(_)), "no credit: it waits");
        drop(first);
        let asked = tokio::spawn({
            let rule = rule.clone();
            async move { rule.flush_asked().await }
        });
        tokio::time::sleep(3 * SPAN).await;
        // Three spans on, a request waits for that flush's answer.
        let Answer::Pending(waiting) = rule.decide(&key, 1) else {
            panic!("the key's request was decided without its claim");
        };
        let waiting = tokio::spawn(waiting);
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(out);
        assert!(asked.await.unwrap(), "the early flush failed");
        let decided = waiting.await.unwrap().unwrap();
        assert!(
            decided.step.allowed && !decided.degraded,
            "the request that waited for the claim was {}: the claim was granted for the span \
             the flush was asked in, three spans before it was written",
            if decided.step.allowed {
                "decided by the failure policy"
            } else {
                "denied"
            }
        );
        assert!(allowed(&rule, &key), "the next request waits again");
    }

    /// A request waiting for a claim waits for the flush that took its key,
    /// not for any flush numbered after it: here one that took the list
    /// just before the key was listed (nothing written) is over, and the
    /// one that took the key is out to a hung node when something wakes
    /// the request (another bucket's answer). Red with the wait ended on
    /// the first: the request decided before its claim came, and denied
    /// (a lone 429 beside a hung Cluster primary, whose retries every
    /// probe interval make such flushes overlap).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_waits_for_the_flush_that_took_its_key() {
        const SPAN: Duration = Duration::from_millis(400);
        let redis = RedisServer::start();
        let proxy = DelayingProxy::start(redis.port());
        let (rule, _limiter) = rule(proxy.url(), 1_000, SPAN).await;
        let key = Key::from(7u64);
        let bucket = rule.layout.bucket_of(&key);
        let b = bucket as usize;
        away_from_interval_end(1_000 * SPAN).await;
        // Every connection dialled before the hang.
        assert!(rule.redis.ping_slot(rule.layout.slot(bucket)).await);

        let Answer::Pending(waiting) = rule.decide(&key, 1) else {
            panic!("no credit: the first request waits for a claim");
        };
        // A flush that took the list before the key was listed, and is over.
        let empty = rule.taken[b].fetch_add(1, Ordering::SeqCst) + 1;
        rule.answered(bucket, empty);
        let waiting = tokio::spawn(waiting);
        proxy.hang();
        let asked = tokio::spawn({
            let rule = rule.clone();
            async move { rule.flush_asked().await }
        });
        while rule.taken[b].load(Ordering::SeqCst) == empty {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Another bucket's answer wakes every waiting request.
        rule.answers.notify_waiters();
        tokio::time::sleep(Duration::from_millis(50)).await;
        proxy.resume();
        assert!(asked.await.unwrap(), "the early flush failed");
        let decided = waiting.await.unwrap().unwrap();
        assert!(
            decided.step.allowed && !decided.degraded,
            "the request that waited for a claim was {} before the flush that took its key \
             answered",
            if decided.step.allowed {
                "decided by the failure policy"
            } else {
                "denied"
            }
        );
    }

    /// Sleeps past the end of the interval of `period` if it is less than
    /// 10 s away (the counts start over there).
    async fn away_from_interval_end(period: Duration) {
        let into = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros()
            % period.as_micros();
        let left = (period.as_micros() - into) as u64;
        if left < 10_000_000 {
            tokio::time::sleep(Duration::from_micros(left + 10_000)).await;
        }
    }

    /// A fail-open rule of 1,000 per `spans` x `span` on `url`, and its
    /// limiter (kept: dropping it retires the rule).
    async fn rule(url: String, spans: u32, span: Duration) -> (Arc<ApproxRule>, ApproxLimiter) {
        // A request waits up to a second for a claim.
        let config = RedisConfig::standalone(url).command_timeout(Duration::from_secs(1));
        let redis = Redis::connect(config).await.unwrap();
        // The flush out waits for the node as long as a test needs.
        let options = ApproximateOptions::default()
            .spans(spans)
            .flush_timeout(Duration::from_secs(30));
        let shared = Arc::new(Shared::new(options));
        let period = span * spans;
        let rule = Rule::new("ip", Quota::new(1_000, period))
            .fixed_window()
            .fail_open();
        let limiter = ApproxLimiter::new(redis, shared, Arc::default(), &rule).unwrap();
        (limiter.rule().clone(), limiter)
    }

    fn allowed(rule: &Arc<ApproxRule>, key: &Key) -> bool {
        matches!(rule.decide(key, 1), Answer::Ready(Ok(o)) if o.step.allowed)
    }

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
