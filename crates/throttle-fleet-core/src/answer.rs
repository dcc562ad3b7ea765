//! The one now-or-later type: what a limiter, a rule set and a layer answer
//! when the answer may need a round trip.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future of a `T`: the later half of an [`Answer`].
pub type Pending<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// An answer now, or one that needs a round trip.
///
/// [`Limiter::acquire`](crate::backend::Limiter::acquire) answers a
/// `Result<Outcome, Unavailable>`, [`RuleSet::check`](crate::RuleSet::check)
/// a [`Checked`](crate::Checked). Local backends always answer
/// [`Ready`](Self::Ready), without allocating.
pub enum Answer<T = crate::Checked> {
    /// Decided without waiting.
    Ready(T),
    /// Decided by a remote backend, once the future completes.
    Pending(Pending<T>),
}

impl<T: fmt::Debug> fmt::Debug for Answer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ready(d) => f.debug_tuple("Ready").field(d).finish(),
            Self::Pending(_) => f.write_str("Pending(..)"),
        }
    }
}
