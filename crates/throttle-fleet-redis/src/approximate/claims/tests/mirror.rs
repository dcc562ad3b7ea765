//! The Rust mirror of `flush.lua`'s claim arithmetic: the script's grant
//! for one key, computed from the same arguments and stored fields, which
//! the tests hold the script to.

use super::super::*;

/// One flush call's arguments, common to its keys.
#[derive(Debug, Clone)]
pub(super) struct Call<'a> {
    pub(super) instance: &'a str,
    pub(super) limit: i64,
    /// The previous interval's weight, x1000 (0: a fixed window).
    pub(super) weight_milli: i64,
    /// The writer's span, absolute (`interval x spans + span`).
    pub(super) span: i64,
    /// The first span of the interval written, absolute.
    pub(super) base: i64,
    /// The fleet's size as the writer knows it.
    pub(super) fleet: i64,
    pub(super) credit: i64,
    pub(super) seq: i64,
    pub(super) overdraft: i64,
}

/// One key's part of a flush call.
#[derive(Debug, Clone, Copy)]
pub(super) struct KeyArgs {
    pub(super) cum: i64,
    pub(super) hold: i64,
    pub(super) demand: i64,
    pub(super) known: i64,
    pub(super) need: i64,
}

/// What Redis holds for one key before the write.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Stored<'a> {
    /// The field `K`.
    pub(super) field: Option<&'a str>,
    /// The field `K.<id>` of the writer.
    pub(super) mine: Option<&'a str>,
    /// The field `K` of the interval before (read for a sliding window).
    pub(super) previous: Option<&'a str>,
}

/// The script's work for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Granted {
    /// The writer already wrote a later flush: nothing written.
    Stale,
    /// The reply, and the two fields written.
    Written {
        reply: Reply,
        field: String,
        mine: String,
    },
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}:{}:{}:{}:{}",
            self.spent,
            self.claim,
            self.limit,
            self.instances,
            self.prev,
            self.estimate,
            self.rate,
            self.free
        )
    }
}

/// The sums of the instances that write `K.<id>` fields (the `~` entry).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Sums {
    members: i64,
    counts: i64,
    holds: i64,
    demands: i64,
    /// Σ demand x span, spans relative to the interval's first.
    dspan: i64,
    /// The latest span written, absolute.
    last: i64,
    /// Demand per relative span, for the spans still live.
    by_span: std::collections::BTreeMap<i64, i64>,
}

impl Sums {
    /// `~<members>;<dspan>;<s>.<d>;...=<seq>:<counts>:<holds>:<last>:<demands>`.
    fn parse(entry: &str) -> Option<Self> {
        let (id, rest) = entry.strip_prefix('~')?.split_once('=')?;
        let mut head = id.splitn(3, ';');
        let members = digits(head.next()?)?;
        let dspan = digits(head.next()?)?;
        let list = head.next()?;
        let [_seq, counts, holds, last, demands] = numbers::<5>(rest)?;
        let mut by_span = std::collections::BTreeMap::new();
        // Lua: gmatch('(%d+)%.(%d+)'), which skips what does not match.
        for pair in list.split(';') {
            if let Some((s, d)) = pair.split_once('.')
                && let (Some(s), Some(d)) = (digits(s), digits(d))
            {
                by_span.insert(s, d);
            }
        }
        Some(Self {
            members,
            counts,
            holds,
            demands,
            dspan,
            last,
            by_span,
        })
    }
}

/// `N` non-negative integers separated by `:` and nothing else.
fn numbers<const N: usize>(s: &str) -> Option<[i64; N]> {
    let mut out = [0; N];
    let mut it = s.split(':');
    for slot in &mut out {
        *slot = digits(it.next()?)?;
    }
    it.next().is_none().then_some(out)
}

/// Lua's `%d+`: one or more ASCII digits.
fn digits(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The previous interval's total of a key (every entry's count; the `~`
/// entry's is the sum of its members'), and the part of it probably not
/// written yet: per entry, the smaller of its demand (a span's requests)
/// and what its claim leaves beyond its count (its writer may have
/// admitted up to that since). An entry whose writer wrote the interval's
/// last count (demand 0) adds nothing.
fn total(previous: &str) -> (i64, i64) {
    previous
        .split(',')
        .filter_map(|entry| {
            let (_, rest) = entry.split_once('=')?;
            let mut it = rest.split(':');
            digits(it.next()?)?;
            let count = digits(it.next()?)?;
            let hold = digits(it.next()?)?;
            digits(it.next()?)?;
            let demand = digits(it.next()?)?;
            Some((count, demand.min((hold - count).max(0))))
        })
        .fold((0, 0), |(c, u), (count, unwritten)| {
            (c + count, u + unwritten)
        })
}

/// What the flush script does for one key: the claim granted, the reply,
/// and the fields written (see the module's formula).
pub(super) fn grant(call: &Call<'_>, key: &KeyArgs, stored: Stored<'_>) -> Granted {
    let Call {
        limit,
        weight_milli,
        span,
        base,
        fleet,
        credit,
        seq,
        overdraft,
        ..
    } = *call;
    let KeyArgs {
        cum,
        hold,
        demand,
        known,
        need,
    } = *key;
    let rel = span - base;
    let (mut first, mut overdrawn) = (span, 0);
    let mut sums = Sums::default();
    for entry in stored
        .field
        .unwrap_or("")
        .split(',')
        .filter(|e| !e.is_empty())
    {
        if let Some(header) = entry.strip_prefix('@') {
            let (f, o) = header.split_once(':').unwrap_or((header, ""));
            first = digits(f).unwrap_or(first);
            if let Some(o) = digits(o) {
                overdrawn = o;
            }
        } else if entry.starts_with('~')
            && let Some(parsed) = Sums::parse(entry)
        {
            sums = parsed;
        }
    }
    if let Some([mseq, mcum, mclaim, mspan, mdemand]) = stored.mine.and_then(numbers::<5>) {
        if mseq > seq {
            return Granted::Stale;
        }
        let mrel = mspan - base;
        sums.members = (sums.members - 1).max(0);
        sums.counts = (sums.counts - mcum).max(0);
        sums.holds = (sums.holds - mcum.max(mclaim)).max(0);
        sums.demands = (sums.demands - mdemand).max(0);
        sums.dspan = (sums.dspan - mdemand * mrel).max(0);
        if let Some(d) = sums.by_span.get_mut(&mrel) {
            *d = (*d - mdemand).max(0);
        }
    }
    let count = sums.members;
    let spent = cum + sums.counts;
    let claimed = sums.holds;
    let estimate = cum + sums.counts + (rel * sums.demands - sums.dspan).max(0);
    let rate = sums.demands;
    let wanted = demand
        + sums
            .by_span
            .iter()
            .filter(|&(&s, _)| s + 2 >= rel)
            .map(|(_, d)| d)
            .sum::<i64>();
    let (prev, unwritten) = stored.previous.map_or((0, 0), total);
    let now_limit = limit - (prev * weight_milli).div_euclid(1_000);
    let unwritten_now = ((prev + unwritten) * weight_milli).div_euclid(1_000) - (limit - now_limit);
    let reserve = if span <= first + 1 {
        (fleet - 1 - count).max(0) * credit
    } else {
        0
    };
    let spent = spent.max(known);
    let free = now_limit - (claimed + cum).max(known) - reserve;
    let pool = now_limit - spent;
    let share = if wanted > 0 {
        (pool * demand).div_euclid(wanted)
    } else {
        0
    };
    let others_known = (fleet - 1).max(count);
    let likely = free - unwritten_now;
    let spare = if wanted <= 2 * pool && others_known > 0 {
        (likely - pool.min(others_known + 1)).min(likely.div_euclid(2))
    } else {
        likely
    };
    let mut grant = free.min(need.max(spare.min(share).min(3 * demand))).max(0);
    if need > grant {
        let extra = (need - grant).min(overdraft - overdrawn).min(pool - grant);
        if extra > 0 {
            grant += extra;
            overdrawn += extra;
        }
    }
    let claim = hold.max(cum + grant);
    sums.members += 1;
    sums.counts += cum;
    sums.holds += cum.max(claim);
    sums.demands += demand;
    sums.dspan += demand * rel;
    sums.last = sums.last.max(span);
    *sums.by_span.entry(rel).or_insert(0) += demand;
    let list: Vec<String> = sums
        .by_span
        .iter()
        .filter(|&(&s, &d)| s + 3 >= rel && d > 0)
        .map(|(s, d)| format!("{s}.{d}"))
        .collect();
    let field = format!(
        "@{first}:{overdrawn},~{};{};{}=0:{}:{}:{}:{}",
        sums.members,
        sums.dspan,
        list.join(";"),
        sums.counts,
        sums.holds,
        sums.last,
        sums.demands
    );
    Granted::Written {
        reply: Reply {
            spent,
            claim,
            limit: now_limit,
            instances: count + 1,
            prev,
            estimate: estimate.max(spent),
            rate,
            free: (free - grant).max(0),
        },
        field,
        mine: format!("{seq}:{cum}:{claim}:{span}:{demand}"),
    }
}
