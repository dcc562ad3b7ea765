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
/// `Result<Outcome, Unavailable>`, [`RuleSet::check`](crate::rule_set::RuleSet::check)
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

impl<T: Send + 'static> Answer<T> {
    /// The answer, waiting for it if it needs a round trip.
    pub async fn wait(self) -> T {
        match self {
            Self::Ready(t) => t,
            Self::Pending(f) => f.await,
        }
    }

    /// `f` of the answer: now if it is ready, once it comes otherwise.
    pub fn map<U: Send + 'static>(self, f: impl FnOnce(T) -> U + Send + 'static) -> Answer<U> {
        match self {
            Self::Ready(t) => Answer::Ready(f(t)),
            Self::Pending(p) => Answer::Pending(Box::pin(async move { f(p.await) })),
        }
    }

    /// The answer `f` gives for this one: ready when both are.
    pub fn then<U: Send + 'static>(
        self,
        f: impl FnOnce(T) -> Answer<U> + Send + 'static,
    ) -> Answer<U> {
        match self {
            Self::Ready(t) => f(t),
            Self::Pending(p) => Answer::Pending(Box::pin(async move { f(p.await).wait().await })),
        }
    }
}
