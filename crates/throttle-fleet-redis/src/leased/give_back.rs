//! Giving back: the tokens of idle keys (or all of them, at shutdown)
//! return to the bucket in Redis.

use std::sync::atomic::Ordering;

use crate::algorithm_scripts::GCRA_REFUND_SCRIPT;
use crate::link::Eval;

use super::limiter::LeaseRule;
use super::state::LeaseState;

impl LeaseRule {
    /// How long a key may sit idle holding `tokens` before they go back
    /// while the bucket still lacks them: as long as the bucket takes to
    /// refill that many (`tokens x period / limit`), at least `return_after`.
    pub(super) fn keep_us(&self, tokens: u64) -> u64 {
        let floor = self.shared.options.return_after.as_micros() as u64;
        floor.max(self.gcra.increment(tokens).0)
    }

    /// Whether a key's tokens go back to the bucket now (`all`: shutdown).
    ///
    /// A key unused for [`LeaseRule::keep_us`] gives its tokens back while
    /// the bucket, as the key's last lease saw it, is still refilling: other
    /// instances may be waiting for them. Once that bucket would be full,
    /// the tokens are surplus: a full bucket has no room for them, so giving
    /// them back would help no one, and keeping them costs the fleet nothing
    /// beyond the overshoot bound (they count among the tokens an instance
    /// holds). They are kept for the key's return, and go back anyway once
    /// the key has been idle for `keep_surplus_for` (it may have moved to an
    /// instance that has drained the bucket since).
    pub(super) fn due(&self, st: &LeaseState, now: u64, all: bool) -> bool {
        if st.tokens == 0 || st.fetching.is_some() {
            return false;
        }
        let idle = now.saturating_sub(st.used_at);
        let surplus = self.shared.options.keep_surplus_for.as_micros() as u64;
        let keep = st.keep_idle_us(self.keep_us(st.tokens), surplus);
        all || idle > keep.max(surplus) || (idle > keep && now < st.full_at)
    }

    /// Gives tokens back to the bucket: those of idle keys that are due
    /// (see [`LeaseRule::due`]), or all of them.
    pub(super) async fn give_back(&self, all: bool) -> bool {
        let now = self.redis.local_now();
        let mut back = Vec::new();
        let mut kept = false;
        self.store.for_each(|key, st| {
            if self.due(st, now, all) {
                if self.redis.is_open(self.group(key)) {
                    // Kept for when Redis answers again.
                    kept = true;
                    return;
                }
                back.push((*key, st.tokens));
                st.tokens = 0;
                // It went idle with tokens left: its batches were too large.
                st.batch /= 2;
            }
        });
        let returns = back.iter().map(|&(key, tokens)| async move {
            let mut inv = Eval::new(&GCRA_REFUND_SCRIPT, 1, 3, 64);
            let (inc_us, inc_rem) = self.gcra.increment(tokens);
            inv.arg(self.keys.key(&key, "gcra"))
                .arg(self.gcra.limit())
                .arg(inc_us)
                .arg(inc_rem);
            self.redis.eval::<i64>(&inv, self.group(&key)).await.is_ok()
        });
        let mut ok = true;
        for ((key, tokens), returned) in back
            .iter()
            .zip(futures_util::future::join_all(returns).await)
        {
            if returned {
                self.shared
                    .counters
                    .returned
                    .fetch_add(*tokens, Ordering::Relaxed);
            } else {
                // Not given back: the tokens are still this instance's.
                ok = false;
                self.store.update(key, |st| st.tokens += tokens);
            }
        }
        ok && !kept
    }
}
