//! A request body's clock: a body that keeps its reader waiting too long
//! for its next bytes, or arrives slower than a minimum rate, ends in an
//! error, so the handler waiting on it ends too, and with it the request's
//! hold on its concurrency slots. The integrations answer that error:
//! `throttle-fleet-axum`'s `serve` with `408 Request Timeout`, the tonic
//! crate's `BodyTimeoutLayer` with `DEADLINE_EXCEEDED`.
//!
//! The bound is [`BodyTimeout`]; [`TimedBody`] applies it to a body.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use throttle_fleet_core::ConfigError;
use tokio::time::{Instant, Sleep};

/// How slowly a request body may arrive while its reader waits for it.
///
/// The clock runs only while the reader (a handler, an extractor such as
/// axum's `Json`, tonic's decoder) waits: from a read that finds nothing
/// to the bytes that end the wait. Time the handler spends between reads
/// is its own, not the client's. Two bounds, `n` the bytes received so
/// far:
///
/// | bound | what it cuts |
/// |---|---|
/// | one wait lasts at most `timeout` | a body that stops: nothing for `timeout` (nginx's `client_body_timeout`, 60 s) |
/// | the waits together last at most `timeout + n / min_bytes_per_sec` | a trickle: past a grace of `timeout`, the body must keep up `min_bytes_per_sec` on average (the rule of Apache's `RequestReadTimeout body=…,MinRate=…`) |
///
/// So a body that sends nothing is cut `timeout` after its reader first
/// waits, and one trickling `r` bytes a second (below the rate `m`) after
/// about `timeout / (1 - r/m)` of waiting: one byte a second against the
/// default 500 is cut after 60.1 s. A body that keeps up the rate is never
/// cut, however long it takes: a 2 MB body at 500 B/s takes 70 minutes.
/// What a client can hold is therefore bounded by the body sizes the
/// service accepts (axum's `DefaultBodyLimit`, 2 MB unless set) as well as
/// by this rate; a service whose bodies are small can raise the rate.
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_tower::body_timeout::BodyTimeout;
///
/// let bound = BodyTimeout { timeout: Duration::from_secs(20), ..BodyTimeout::default() };
/// assert_eq!(bound.min_bytes_per_sec, 500);
/// assert!(bound.validate().is_ok());
/// let stopped = BodyTimeout { timeout: Duration::ZERO, ..bound };
/// assert_eq!(stopped.validate().unwrap_err().field(), "timeout");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyTimeout {
    /// The longest one wait for the body's next bytes may last, and the
    /// grace before the rate counts (default 60 s).
    pub timeout: Duration,
    /// The average rate, in bytes per second, a body must keep up past the
    /// grace (default 500).
    pub min_bytes_per_sec: u32,
}

impl Default for BodyTimeout {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(60),
            min_bytes_per_sec: 500,
        }
    }
}

impl BodyTimeout {
    /// Checks that the bound can be met: a timeout longer than zero and a
    /// rate of at least one byte a second. The error names the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.timeout.is_zero() {
            return Err(ConfigError::new("timeout", "must be longer than zero"));
        }
        if self.min_bytes_per_sec == 0 {
            return Err(ConfigError::new(
                "min_bytes_per_sec",
                "must be at least 1 (a body needs some rate to keep up)",
            ));
        }
        Ok(())
    }

    /// How long the next wait may last, once `received` bytes have come
    /// in `waited` of waiting: the lesser of `timeout` and what is left of
    /// `timeout + received / min_bytes_per_sec`.
    fn allowance(&self, received: u64, waited: Duration) -> Duration {
        // A rate of zero (not validated) earns without bound: only
        // `timeout` applies, never a division by zero.
        let earned = received
            .saturating_mul(1_000_000_000)
            .checked_div(u64::from(self.min_bytes_per_sec))
            .map_or(Duration::MAX, Duration::from_nanos);
        self.timeout
            .saturating_add(earned)
            .saturating_sub(waited)
            .min(self.timeout)
    }
}

/// The error a [`TimedBody`] ends with when its bound is passed. Its
/// `Display` says which bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyTimedOut {
    /// The bound passed: `Some(rate)` for the rate, `None` for one wait
    /// of `timeout`.
    rate: Option<u32>,
    timeout: Duration,
}

impl fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rate {
            None => write!(
                f,
                "request body timed out: no bytes for {} s",
                self.timeout.as_secs_f64()
            ),
            Some(rate) => write!(
                f,
                "request body timed out: slower than {rate} bytes a second after {} s",
                self.timeout.as_secs_f64()
            ),
        }
    }
}

impl Error for BodyTimedOut {}

type BoxError = Box<dyn Error + Send + Sync>;

pin_project! {
    /// A request body under a [`BodyTimeout`]: frames pass through as they
    /// come; once the reader has waited past the bound, the body ends with
    /// a [`BodyTimedOut`] error (and with it again if polled again).
    ///
    /// A body that arrives whole at its first read costs no clock read and
    /// no timer; the timer is made at the first wait and reused.
    ///
    /// ```
    /// use std::pin::{Pin, pin};
    /// use std::task::{Context, Poll};
    /// use std::time::Duration;
    /// use http_body::{Body, Frame};
    /// use throttle_fleet_tower::body_timeout::{BodyTimedOut, BodyTimeout, TimedBody};
    ///
    /// /// A body whose client never sends a byte.
    /// struct Silent;
    /// impl Body for Silent {
    ///     type Data = bytes::Bytes;
    ///     type Error = std::convert::Infallible;
    ///     fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>)
    ///         -> Poll<Option<Result<Frame<bytes::Bytes>, Self::Error>>> {
    ///         Poll::Pending
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut body = pin!(TimedBody::new(Silent, BodyTimeout::default()));
    /// let start = tokio::time::Instant::now();
    /// let end = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await;
    /// let error = end.unwrap().unwrap_err();
    /// assert!(error.is::<BodyTimedOut>());
    /// assert_eq!(start.elapsed(), Duration::from_secs(60));
    /// # }
    /// ```
    pub struct TimedBody<B> {
        #[pin]
        body: B,
        bound: BodyTimeout,
        clock: Clock,
    }
}

/// What the reader has received and waited so far, and its current wait.
#[derive(Debug)]
struct Clock {
    received: u64,
    waited: Duration,
    /// The current wait: since when, and until when it may last.
    wait: Option<(Instant, Instant)>,
    /// Made at the first wait; its deadline is the current wait's.
    sleep: Option<Pin<Box<Sleep>>>,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Armed,
    /// The bound no longer applies ([`TimedBody::disarm`]).
    Disarmed,
    TimedOut(BodyTimedOut),
}

impl<B> TimedBody<B> {
    /// `body` under `bound`.
    pub fn new(body: B, bound: BodyTimeout) -> Self {
        Self {
            body,
            bound,
            clock: Clock {
                received: 0,
                waited: Duration::ZERO,
                wait: None,
                sleep: None,
                state: State::Armed,
            },
        }
    }

    /// Lifts the bound from here on (a gRPC stream whose first message has
    /// come, say); a body that has timed out stays so.
    pub fn disarm(self: Pin<&mut Self>) {
        let clock = self.project().clock;
        if clock.state == State::Armed {
            clock.state = State::Disarmed;
            clock.wait = None;
        }
    }
}

impl Clock {
    /// The reader waits: starts the wait's timer if this is its first
    /// read, and says whether the wait has passed its deadline.
    fn wait(&mut self, cx: &mut Context<'_>, bound: &BodyTimeout) -> Poll<BodyTimedOut> {
        let started = self.wait.is_none();
        let deadline = match self.wait {
            Some((_, deadline)) => deadline,
            None => {
                let now = Instant::now();
                let allowance = bound.allowance(self.received, self.waited);
                // An absurd timeout (`Duration::MAX`) waits for ever
                // rather than overflowing.
                let deadline = now
                    .checked_add(allowance)
                    .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30));
                self.wait = Some((now, deadline));
                deadline
            }
        };
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                if started {
                    sleep.as_mut().reset(deadline);
                }
                sleep
            }
            None => self
                .sleep
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        match sleep.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                let allowance = self.wait.map_or(bound.timeout, |(since, end)| end - since);
                let timed_out = BodyTimedOut {
                    rate: (allowance < bound.timeout).then_some(bound.min_bytes_per_sec),
                    timeout: bound.timeout,
                };
                self.state = State::TimedOut(timed_out);
                self.wait = None;
                Poll::Ready(timed_out)
            }
        }
    }

    /// A frame, the end or an error came: a wait in progress ends, and the
    /// frame's bytes count.
    fn arrived<D: Buf, E>(&mut self, frame: &Option<Result<Frame<D>, E>>) {
        if let Some((since, _)) = self.wait.take() {
            self.waited += Instant::now().saturating_duration_since(since);
        }
        if let Some(Ok(frame)) = frame
            && let Some(data) = frame.data_ref()
        {
            self.received = self.received.saturating_add(data.remaining() as u64);
        }
    }
}

impl<B> Body for TimedBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let clock = this.clock;
        if let State::TimedOut(timed_out) = clock.state {
            return Poll::Ready(Some(Err(Box::new(timed_out))));
        }
        let polled = this.body.poll_frame(cx);
        if clock.state == State::Disarmed {
            return polled.map(|frame| frame.map(|r| r.map_err(Into::into)));
        }
        match polled {
            Poll::Pending => match clock.wait(cx, this.bound) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(timed_out) => Poll::Ready(Some(Err(Box::new(timed_out)))),
            },
            Poll::Ready(frame) => {
                clock.arrived(&frame);
                Poll::Ready(frame.map(|r| r.map_err(Into::into)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        !matches!(self.clock.state, State::TimedOut(_)) && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests;
