//! Rate-limit header plumbing: the header names, the block of headers an
//! answer carries, numbers as header values without allocating, and the
//! `X-RateLimit-*` trio. What a custom [`Responder`](crate::responder::Responder)
//! builds its answers from.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;
use throttle_fleet_core::fields::{self, names, reset_epoch_secs, retry_after_secs};
use throttle_fleet_core::{Rule, decision::Decision};

/// `X-RateLimit-Limit`.
pub static X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static(names::X_RATELIMIT_LIMIT);
/// `X-RateLimit-Remaining`.
pub static X_RATELIMIT_REMAINING: HeaderName =
    HeaderName::from_static(names::X_RATELIMIT_REMAINING);
/// `X-RateLimit-Reset` (Unix epoch seconds).
pub static X_RATELIMIT_RESET: HeaderName = HeaderName::from_static(names::X_RATELIMIT_RESET);
/// `RateLimit-Policy` (IETF draft).
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static(names::RATELIMIT_POLICY);
/// `X-RateLimit-Shadow`: the shadow rules that would have denied the
/// request, when [`Policy::shadow_header`](crate::Policy::shadow_header) is on.
pub static X_RATELIMIT_SHADOW: HeaderName = HeaderName::from_static(names::X_RATELIMIT_SHADOW);
/// `RateLimit` (IETF draft).
pub static RATELIMIT: HeaderName = HeaderName::from_static(names::RATELIMIT);

/// Headers to add to an allowed response; small and allocation-free itself.
#[derive(Debug, Clone, Default)]
pub struct HeaderBlock {
    entries: SmallVec<[(HeaderName, HeaderValue); 5]>,
}

impl HeaderBlock {
    /// Adds a header.
    pub fn push(&mut self, name: HeaderName, value: HeaderValue) {
        self.entries.push((name, value));
    }

    /// Whether there is nothing to add.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The values, in the order they were pushed.
    pub fn into_values(self) -> impl Iterator<Item = HeaderValue> {
        self.entries.into_iter().map(|(_, value)| value)
    }

    /// Moves the headers into `headers`, replacing same-named ones.
    pub fn apply(self, headers: &mut HeaderMap) {
        for (name, value) in self.entries {
            headers.insert(name, value);
        }
    }
}

/// Headers for an allowed request's response, decided in `call` and
/// written when the inner service answers.
///
/// The standard `X-RateLimit-*` trio is kept as three numbers and rendered
/// at the end without allocating for small values; anything else is a
/// [`HeaderBlock`].
#[derive(Debug, Clone, Default)]
pub struct SuccessHeaders(SuccessRepr);

#[derive(Debug, Clone, Default)]
enum SuccessRepr {
    #[default]
    None,
    Standard {
        limit: u64,
        /// `None`: not known for the fleet (a degraded decision).
        remaining: Option<u64>,
        reset_epoch: u64,
    },
    /// The IETF fields alone: `RateLimit-Policy` as made for the rule
    /// (its name inside), and `RateLimit`'s figures.
    Ietf {
        policy: HeaderValue,
        /// `None`: not known for the fleet (a degraded decision): no
        /// `RateLimit` field.
        remaining: Option<u64>,
        t: u64,
    },
    Block(Box<HeaderBlock>),
}

impl SuccessHeaders {
    /// No headers.
    pub fn none() -> Self {
        Self(SuccessRepr::None)
    }

    /// `X-RateLimit-Limit`, `-Remaining` and `-Reset`: `reset_epoch` is
    /// Unix epoch seconds, the decision's as
    /// [`reset_epoch_secs`]
    /// gives it (see there why it is not counted from a clock read now).
    pub fn standard(limit: u64, remaining: u64, reset_epoch: u64) -> Self {
        Self(SuccessRepr::Standard {
            limit,
            remaining: Some(remaining),
            reset_epoch,
        })
    }

    /// The `X-RateLimit-*` trio of an allowed decision by `rule` (the
    /// rule it names), its reset counted from when the backend decided
    /// ([`reset_epoch_secs`]).
    /// A degraded decision (the backend could not be asked) carries no
    /// `X-RateLimit-Remaining`: the fleet's count is not known.
    #[inline]
    pub fn for_allowed(decision: &Decision, rule: &Rule) -> Self {
        Self(SuccessRepr::Standard {
            limit: decision.limit(rule),
            remaining: (!decision.is_degraded()).then_some(decision.remaining()),
            reset_epoch: reset_epoch_secs(decision),
        })
    }

    /// The IETF draft fields alone: `RateLimit-Policy: policy` and
    /// `RateLimit: "name";r=remaining;t=t`, the name taken from `policy`
    /// (`"name";q=..;w=..`); no `RateLimit` when `remaining` is `None`.
    pub fn ietf(policy: HeaderValue, remaining: Option<u64>, t: u64) -> Self {
        Self(SuccessRepr::Ietf {
            policy,
            remaining,
            t,
        })
    }

    /// Any headers.
    pub fn block(block: HeaderBlock) -> Self {
        Self(SuccessRepr::Block(Box::new(block)))
    }

    /// The same headers and one more.
    #[must_use]
    pub fn with(self, name: HeaderName, value: HeaderValue) -> Self {
        let mut block = match self.0 {
            SuccessRepr::Block(block) => *block,
            other => {
                let mut map = HeaderMap::new();
                Self(other).apply(&mut map);
                let mut block = HeaderBlock::default();
                let mut last = None;
                for (name, value) in map {
                    let name = name.or_else(|| last.clone());
                    if let Some(name) = name {
                        last = Some(name.clone());
                        block.push(name, value);
                    }
                }
                block
            }
        };
        block.push(name, value);
        Self::block(block)
    }

    /// Writes the headers into `headers`, replacing same-named ones.
    pub fn apply(self, headers: &mut HeaderMap) {
        match self.0 {
            SuccessRepr::None => {}
            SuccessRepr::Standard {
                limit,
                remaining,
                reset_epoch,
            } => {
                let [limit, remaining_value, reset] =
                    numbers([limit, remaining.unwrap_or(0), reset_epoch]);
                headers.insert(X_RATELIMIT_LIMIT.clone(), limit);
                if remaining.is_some() {
                    headers.insert(X_RATELIMIT_REMAINING.clone(), remaining_value);
                }
                headers.insert(X_RATELIMIT_RESET.clone(), reset);
            }
            SuccessRepr::Ietf {
                policy,
                remaining,
                t,
            } => {
                let now = remaining.and_then(|r| ratelimit_field(&policy, r, t));
                headers.insert(RATELIMIT_POLICY.clone(), policy);
                if let Some(now) = now {
                    headers.insert(RATELIMIT.clone(), now);
                }
            }
            SuccessRepr::Block(block) => block.apply(headers),
        }
    }
}

/// A rendered header value kept for reuse, with the figures it was made
/// from.
type Kept = Option<(u64, u64, HeaderValue)>;

/// Eight recent IETF field values per thread, direct-mapped by `(a, b)`
/// and the rule name's length: a kept value with the same figures that
/// `fits` (the name compared) is cloned; otherwise `render` makes one and
/// it takes the slot.
///
/// Kept for what it saves: rendering every `RateLimit-Policy` and
/// `RateLimit` value afresh instead costs 1,053 instructions more per
/// allowed request with the IETF fields (18,391 against 17,338, 6%;
/// `MODES="bare memory-ietf" benches/http/callgrind.sh`).
fn kept_or_render(
    cache: &'static std::thread::LocalKey<std::cell::RefCell<[Kept; 8]>>,
    (a, b, name_len): (u64, u64, usize),
    fits: impl Fn(&[u8]) -> bool,
    render: impl FnOnce() -> Option<HeaderValue>,
) -> Option<HeaderValue> {
    let slot = (a ^ b.rotate_left(32) ^ name_len as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61;
    cache.with(|cache| {
        let mut cache = cache.borrow_mut();
        let entry = &mut cache[slot as usize];
        if let Some((ka, kb, value)) = entry
            && (*ka, *kb) == (a, b)
            && fits(value.as_bytes())
        {
            return Some(value.clone());
        }
        let value = render()?;
        *entry = Some((a, b, value.clone()));
        Some(value)
    })
}

thread_local! {
    /// Recent `RateLimit-Policy` values: (limit, window seconds, value).
    static POLICIES: std::cell::RefCell<[Kept; 8]> =
        const { std::cell::RefCell::new([const { None }; 8]) };
    /// Recent `RateLimit` fields: (remaining, t, value).
    static FIELDS: std::cell::RefCell<[Kept; 8]> =
        const { std::cell::RefCell::new([const { None }; 8]) };
}

/// An IETF item made by [`throttle_fleet_core::fields`] as a header value,
/// its bytes taken over without a copy.
fn header(item: String) -> Option<HeaderValue> {
    HeaderValue::from_maybe_shared(bytes::Bytes::from(item.into_bytes())).ok()
}

/// The rule name a [`policy_value`] starts with (quoted).
fn policy_name(policy: &HeaderValue) -> Option<&str> {
    let bytes = policy.as_bytes();
    let end = 1 + bytes.get(1..)?.iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&bytes[1..end]).ok()
}

/// Whether a kept IETF value is `name`'s: it starts with `"name";`.
fn names(value: &[u8], name: &str) -> bool {
    let name = name.as_bytes();
    value.first() == Some(&b'"')
        && value.get(1..=name.len()) == Some(name)
        && value.get(name.len() + 1..name.len() + 3) == Some(b"\";")
}

/// `RateLimit-Policy`'s value for the rule named `name`
/// ([`fields::policy_item`]): the same for every answer under that rule
/// and quota, so recent ones are cloned.
///
pub(crate) fn policy_value(name: &str, limit: u64, window: Duration) -> HeaderValue {
    let w = retry_after_secs(window);
    kept_or_render(
        &POLICIES,
        (limit, w, name.len()),
        |value| names(value, name),
        || header(fields::policy_item(name, limit, window)),
    )
    .unwrap_or_else(|| HeaderValue::from_static("\"\""))
}

/// `RateLimit-Policy`'s value for a concurrency rule
/// ([`fields::in_flight_policy_item`]). Kept apart from the rate rules'
/// values in the same cache: no window is `u64::MAX` seconds long.
pub(crate) fn in_flight_policy_value(name: &str, limit: u64) -> HeaderValue {
    kept_or_render(
        &POLICIES,
        (limit, u64::MAX, name.len()),
        |value| names(value, name) && value.ends_with(fields::IN_FLIGHT_UNIT.as_bytes()),
        || header(fields::in_flight_policy_item(name, limit)),
    )
    .unwrap_or_else(|| HeaderValue::from_static("\"\""))
}

/// `RateLimit` for a concurrency rule ([`fields::in_flight_ratelimit_item`]),
/// the quoted name being the start of `policy`.
pub(crate) fn in_flight_field(policy: &HeaderValue, remaining: u64) -> Option<HeaderValue> {
    let name = policy_name(policy)?;
    kept_or_render(
        &FIELDS,
        (remaining, u64::MAX, name.len()),
        |value| names(value, name) && !value.windows(3).any(|w| w == b";t="),
        || header(fields::in_flight_ratelimit_item(name, remaining)),
    )
}

/// `RateLimit` for a rate rule ([`fields::ratelimit_item`]), the quoted
/// name being the start of `policy` (a [`policy_value`]). Recent ones are
/// cloned, as rendered numbers are: a key far from its limit, or answers
/// within one second of each other at a full bucket, repeat the same field.
pub(crate) fn ratelimit_field(policy: &HeaderValue, remaining: u64, t: u64) -> Option<HeaderValue> {
    let name = policy_name(policy)?;
    kept_or_render(
        &FIELDS,
        (remaining, t, name.len()),
        |value| names(value, name),
        || header(fields::ratelimit_item(name, remaining, t)),
    )
}

/// The numbers 0 to 1023 as text, made once and kept for the program's
/// life, so their header values are static: cloning one touches no shared
/// reference count.
static SMALL_NUMBER_TEXT: std::sync::LazyLock<Box<[String]>> =
    std::sync::LazyLock::new(|| (0..1024u64).map(|n| n.to_string()).collect());

static SMALL_NUMBERS: std::sync::LazyLock<Box<[HeaderValue]>> = std::sync::LazyLock::new(|| {
    SMALL_NUMBER_TEXT
        .iter()
        .map(|s| HeaderValue::from_static(s.as_str()))
        .collect()
});

/// A recently rendered larger number and its header value.
type Recent = (u64, Option<HeaderValue>);

/// Sets of the per-thread cache; each holds two numbers.
const RECENT_SETS: usize = 16;

thread_local! {
    /// Recently rendered larger numbers (limits, reset times), per thread:
    /// the same few values repeat from request to request. Two-way sets,
    /// so two numbers that land in the same set (a limit and a reset time
    /// answered together) never evict each other.
    ///
    /// Kept for what it saves (`benches/http/callgrind.sh`, with a fresh
    /// `HeaderValue` for every number past 1023 instead): 1,256
    /// instructions of 18,960 per allowed request (6.6%, the reset time)
    /// and 649 of 17,583 per denied one (3.7%).
    static RECENT: std::cell::RefCell<[[Recent; 2]; RECENT_SETS]> =
        const { std::cell::RefCell::new([const { [(0, None), (0, None)] }; RECENT_SETS]) };
}

/// `n` as a header value; no allocation for small or recently seen numbers.
pub fn number(n: u64) -> HeaderValue {
    if let Some(v) = small_number(n) {
        return v;
    }
    RECENT.with(|recent| recent_number(&mut recent.borrow_mut(), n))
}

/// Each of `ns` as a header value, as [`number`] makes it, with one look
/// at the thread's recent numbers for them all.
#[inline]
pub fn numbers<const N: usize>(ns: [u64; N]) -> [HeaderValue; N] {
    if ns.iter().all(|&n| n < SMALL_NUMBERS.len() as u64) {
        return ns.map(|n| small_number(n).unwrap_or_else(|| HeaderValue::from(n)));
    }
    RECENT.with(|recent| {
        let mut recent = recent.borrow_mut();
        ns.map(|n| small_number(n).unwrap_or_else(|| recent_number(&mut recent, n)))
    })
}

/// `n` from the static table of small numbers, if it is in it.
#[inline(always)]
fn small_number(n: u64) -> Option<HeaderValue> {
    usize::try_from(n)
        .ok()
        .and_then(|i| SMALL_NUMBERS.get(i))
        .cloned()
}

/// `n` from the recent numbers, or rendered and kept there.
#[inline]
fn recent_number(recent: &mut [[Recent; 2]; RECENT_SETS], n: u64) -> HeaderValue {
    let set = &mut recent[(n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize];
    if let (m, Some(v)) = &set[0]
        && *m == n
    {
        return v.clone();
    }
    if let (m, Some(v)) = &set[1]
        && *m == n
    {
        let v = v.clone();
        set.swap(0, 1);
        return v;
    }
    // The most recent first: the older of the two makes room.
    let v = HeaderValue::from(n);
    set[1] = std::mem::replace(&mut set[0], (n, Some(v.clone())));
    v
}

/// Writes `X-RateLimit-Limit`, `-Remaining` and `-Reset` into `out`;
/// `reset_epoch` is Unix epoch seconds, the decision's as
/// [`reset_epoch_secs`]
/// gives it.
pub(crate) fn rate_limit_headers(
    out: &mut HeaderBlock,
    limit: u64,
    remaining: u64,
    reset_epoch: u64,
) {
    out.push(X_RATELIMIT_LIMIT.clone(), number(limit));
    out.push(X_RATELIMIT_REMAINING.clone(), number(remaining));
    out.push(X_RATELIMIT_RESET.clone(), number(reset_epoch));
}
