//! [`ClientService`]: one call, from its partition's turn through its
//! retries. The decisions are the pure modules' ([`told`](crate::told),
//! [`retry`](crate::retry), [`partitions`](crate::partitions),
//! [`budget`](crate::budget)); this file only waits, sends and counts.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tokio::time::{Instant, sleep, sleep_until, timeout_at};
use tower_service::Service;

use crate::body::{ReplayBody, buffer};
use crate::deadline::Deadline;
use crate::error::{Error, Throttled};
use crate::grpc;
use crate::metrics;
use crate::partitions::{Partition, Slot, Turn};
use crate::retry::Attempt;
use crate::settings::{Settings, State};
use crate::told::{self, Told};

/// The service [`ClientLayer`](crate::ClientLayer) makes.
#[derive(Clone)]
pub struct ClientService<S> {
    inner: S,
    settings: Arc<Settings>,
    state: Arc<State>,
}

impl<S> ClientService<S> {
    pub(crate) fn new(inner: S, settings: Arc<Settings>, state: Arc<State>) -> Self {
        Self {
            inner,
            settings,
            state,
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for ClientService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// The future of a call through [`ClientService`].
pub type ResponseFuture<R, E> = Pin<Box<dyn Future<Output = Result<R, Error<E>>> + Send>>;

impl<S, B, R> Service<Request<B>> for ClientService<S>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    R: Send + 'static,
{
    type Response = Response<R>;
    type Error = Error<S::Error>;
    type Future = ResponseFuture<Response<R>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Error::Inner)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The ready service goes with the call; a clone takes its place.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(call(
            inner,
            self.settings.clone(),
            self.state.clone(),
            request,
        ))
    }
}

async fn call<S, B, R>(
    mut inner: S,
    settings: Arc<Settings>,
    state: Arc<State>,
    request: Request<B>,
) -> Result<Response<R>, Error<S::Error>>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<R>>,
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (parts, body) = request.into_parts();
    let start = Instant::now();
    let partition = match &settings.partition_by {
        Some(f) => f(&parts),
        None => Partition::new(
            settings.group,
            (
                parts.uri.scheme_str(),
                parts.uri.authority().map(|a| a.as_str()),
            ),
        ),
    };
    let group = partition.group();
    let slot = state.partitions.slot(partition, start);
    let grpc = grpc::is_grpc(&parts.headers);
    let deadline = [
        settings.deadline.map(|d| start + d),
        parts.extensions.get::<Deadline>().map(|d| d.0),
        grpc.then(|| grpc::timeout(&parts.headers))
            .flatten()
            .map(|t| start + t),
    ]
    .into_iter()
    .flatten()
    .min();
    state.budget.deposit(start);
    let (first, kept) = buffer(body, settings.replay_limit)
        .await
        .map_err(|e| Error::Body(e.into()))?;
    let mut first = Some(first);
    let mut retries = 0;
    loop {
        let turn = take_turn(&slot, &settings, group, deadline).await?;
        let Some(body) = first.take().or_else(|| kept.as_ref().map(|k| k.body())) else {
            // Not reached: a retry needs the copy.
            return Err(Error::Body("the body was not kept".into()));
        };
        if retries > 0 {
            poll_fn(|cx| inner.poll_ready(cx))
                .await
                .map_err(Error::Inner)?;
        }
        let result = inner.call(Request::from_parts(parts.clone(), body)).await;
        let now = Instant::now();
        let told = result.as_ref().ok().map(|res| {
            told::read(
                res.status(),
                res.headers(),
                SystemTime::now(),
                settings.ceiling,
            )
        });
        turn.answered(told.as_ref(), now);
        let attempt = match (&result, &told) {
            (Ok(res), Some(told)) => Attempt::Answered(res.status(), told),
            _ => Attempt::Failed,
        };
        let verdict = settings
            .retries
            .verdict(attempt, &parts.method, grpc, retries);
        let Some(server_wait) = verdict.filter(|_| kept.is_some()) else {
            return result.map_err(Error::Inner);
        };
        if settings.fail_fast && server_wait.is_some_and(|w| !w.is_zero()) {
            // Told to wait, and not waiting: the server's answer is the
            // caller's.
            return result.map_err(Error::Inner);
        }
        let wait = server_wait.unwrap_or_else(|| settings.retries.backoff(retries));
        // A retry the deadline leaves no answer for: this answer is the
        // caller's, rather than `TooLate` after the wait.
        let round_trip = slot.gate.lock().round_trip();
        if deadline.is_some_and(|d| now + wait + round_trip > d) {
            return result.map_err(Error::Inner);
        }
        if !state.budget.withdraw(now) {
            metrics::budget_exhausted(group);
            return result.map_err(Error::Inner);
        }
        metrics::retried(group, told.is_some_and(|t| t.refused));
        retries += 1;
        drop(result);
        if server_wait.is_none() {
            // The server's own waits are the gate's (`answered` closed it).
            sleep(wait).await;
        }
    }
}

/// Waits for the partition's turn: until a time a server gave (if the
/// call may wait that long), or for an answer in flight.
async fn take_turn<'a, E>(
    slot: &'a Slot,
    settings: &Settings,
    group: &'static str,
    deadline: Option<Instant>,
) -> Result<InFlight<'a>, Error<E>> {
    let start = Instant::now();
    loop {
        let now = Instant::now();
        let answered = slot.answered.notified();
        tokio::pin!(answered);
        answered.as_mut().enable();
        let (turn, seq) = {
            let mut gate = slot.gate.lock();
            let turn = gate.turn(now, deadline);
            (turn, gate.sent())
        };
        let bound = deadline.map_or(now + settings.ceiling, |d| d.min(now + settings.ceiling));
        match turn {
            Turn::Go => {
                if now > start {
                    metrics::waited(group, now - start);
                }
                return Ok(InFlight {
                    slot,
                    seq,
                    sent_at: now,
                    done: false,
                });
            }
            Turn::Until(until) if settings.fail_fast || until > bound => {
                metrics::unsent(group, true);
                return Err(Error::Throttled(Throttled {
                    until,
                    wait: until - now,
                    group,
                }));
            }
            Turn::Until(until) => sleep_until(until).await,
            Turn::Answer => {
                if timeout_at(bound, answered).await.is_err() {
                    metrics::unsent(group, false);
                    return Err(Error::TooLate);
                }
            }
            Turn::TooLate => {
                metrics::unsent(group, false);
                return Err(Error::TooLate);
            }
        }
    }
}

/// A request counted in flight in its partition until its answer is
/// recorded, or until it is dropped (a call cancelled mid-flight).
struct InFlight<'a> {
    slot: &'a Slot,
    /// Its sequence number in the partition.
    seq: u64,
    sent_at: Instant,
    done: bool,
}

impl InFlight<'_> {
    fn answered(mut self, told: Option<&Told>, now: Instant) {
        let mut gate = self.slot.gate.lock();
        gate.answered_as(self.seq, told, now);
        if told.is_some() {
            gate.timed(now - self.sent_at);
        }
        drop(gate);
        self.done = true;
        self.slot.answered.notify_waiters();
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.slot
                .gate
                .lock()
                .answered_as(self.seq, None, Instant::now());
            self.slot.answered.notify_waiters();
        }
    }
}
