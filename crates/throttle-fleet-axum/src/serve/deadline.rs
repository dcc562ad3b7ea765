//! The connection's own clock: a header timeout from the connection's
//! start or a request's first byte, and an idle timeout between a response
//! and the next request, both enforced on the read side, so a client that
//! sends nothing is closed without the server polling anything (the idle
//! wait starts at the write that ends a response, which arms the read
//! timer); and a write timeout on the write side, so a client that stops
//! reading is closed once the server's writes have made no progress for
//! that long.
//!
//! The clock is read only where a wait starts that may need a timer, and
//! the timer is polled only when it must register or may have fired: a
//! request served at once costs one clock read and no timer poll.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::activity::Activity;

/// Where the connection is, as the reader sees it.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Waiting for a request's headers, since then: the connection's start
    /// or the request's first byte. `None` until a read must wait for more
    /// of them: hyper reads again at once while a head is incomplete, so
    /// that read's time is the first byte's, and a request whose head
    /// comes whole (nearly all) never reads the clock for it.
    Head(Option<Instant>),
    /// Between a response and the next request's first byte, since then.
    Idle(Instant),
    /// A request is running: its handler's time is the application's. Or
    /// a write waits: the write clock governs, and the header or idle wait
    /// starts only once the response has gone (a handler hands hyper its
    /// last bytes well before a slow reader takes them).
    Busy,
}

/// An I/O stream whose reads fail with `TimedOut` once the phase's
/// deadline passes, and whose writes fail with `TimedOut` once they have
/// made no progress for the write timeout; hyper then closes the
/// connection.
pub(super) struct Deadlines<IO> {
    io: IO,
    activity: Arc<Activity>,
    header_timeout: Duration,
    idle_timeout: Duration,
    /// Requests started as of the last read.
    seen: u64,
    phase: Phase,
    /// The read side's timer; its deadline is never later than the phase's.
    sleep: Pin<Box<Sleep>>,
    /// The waker `sleep` was last polled with, since its last reset: while
    /// it has not fired, a wait for no earlier a deadline by the same task
    /// need not poll it again.
    sleep_waker: Option<Waker>,
    write: WriteClock,
}

/// The write side's clock: since when the writes have made no progress,
/// and a timer made at the first stall (a connection whose writes never
/// wait never has one).
struct WriteClock {
    timeout: Duration,
    /// When the first write or flush still waiting was refused; `None`
    /// once one goes through.
    stalled: Option<Instant>,
    /// The timer; while `stalled`, its deadline is never later than the
    /// stall's.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<IO> Deadlines<IO> {
    pub(super) fn new(
        io: IO,
        activity: Arc<Activity>,
        header_timeout: Duration,
        idle_timeout: Duration,
        write_timeout: Duration,
    ) -> Self {
        let now = Instant::now();
        Self {
            io,
            activity,
            header_timeout,
            idle_timeout,
            seen: 0,
            phase: Phase::Head(Some(now)),
            sleep: Box::pin(tokio::time::sleep_until(now + header_timeout)),
            sleep_waker: None,
            write: WriteClock {
                timeout: write_timeout,
                stalled: None,
                sleep: None,
            },
        }
    }

    /// Brings the phase up to date with the service side, before a read
    /// and after a write that went through.
    fn update(&mut self) {
        let started = self.activity.started();
        if started != self.seen {
            self.seen = started;
            self.phase = Phase::Busy;
        }
        let running = self.activity.running();
        match self.phase {
            _ if running > 0 || self.write.stalled.is_some() => self.phase = Phase::Busy,
            // The last response has gone: the idle wait starts now.
            Phase::Busy => self.phase = Phase::Idle(Instant::now()),
            Phase::Head(_) | Phase::Idle(_) => {}
        }
    }

    /// The phase's deadline, reading the clock for a head's first wait.
    fn deadline(&mut self) -> Option<(Instant, &'static str)> {
        match self.phase {
            Phase::Head(Some(since)) => Some((since + self.header_timeout, "header")),
            Phase::Head(None) => {
                let since = Instant::now();
                self.phase = Phase::Head(Some(since));
                Some((since + self.header_timeout, "header"))
            }
            Phase::Idle(since) => Some((since + self.idle_timeout, "idle")),
            Phase::Busy => None,
        }
    }

    /// Has the read timer wake the task at `deadline`, or says it has
    /// passed. The timer moves earlier at once, later only once it fires:
    /// on a busy keep-alive connection every request moves the deadline
    /// later, and a timer-wheel reset per request would cost more than the
    /// rest of this together.
    fn arm(&mut self, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        if self.sleep.deadline() > deadline {
            self.reset(deadline);
        } else if !self.sleep.is_elapsed()
            && self
                .sleep_waker
                .as_ref()
                .is_some_and(|waker| waker.will_wake(cx.waker()))
        {
            // Registered, for this deadline or an earlier one, to wake this
            // task: polling it again would change nothing.
            return Poll::Pending;
        }
        loop {
            // Out of budget, the timer answers `Pending` without having
            // registered the waker: not to be taken for a registration.
            let budget = tokio::task::coop::has_budget_remaining();
            match self.sleep.as_mut().poll(cx) {
                Poll::Pending => {
                    if !budget {
                        self.sleep_waker = None;
                    } else if !self
                        .sleep_waker
                        .as_ref()
                        .is_some_and(|waker| waker.will_wake(cx.waker()))
                    {
                        self.sleep_waker = Some(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
                Poll::Ready(()) if self.sleep.deadline() >= deadline => return Poll::Ready(()),
                // Fired for an earlier phase's deadline: wait on for this
                // one.
                Poll::Ready(()) => self.reset(deadline),
            }
        }
    }

    /// Moves the read timer, which forgets the waker it was polled with.
    fn reset(&mut self, deadline: Instant) {
        self.sleep.as_mut().reset(deadline);
        self.sleep_waker = None;
    }

    /// After a write, flush or shutdown that went through: if that ended
    /// the connection's last request (its response's last bytes taken),
    /// the idle wait starts here, and its timer is armed now, since hyper
    /// may not read again before the client sends something.
    fn written(&mut self, cx: &mut Context<'_>) {
        let idle_since = match self.phase {
            Phase::Idle(since) => Some(since),
            Phase::Head(_) | Phase::Busy => None,
        };
        self.update();
        if let Phase::Idle(since) = self.phase
            && idle_since != Some(since)
            && self.arm(cx, since + self.idle_timeout).is_ready()
        {
            // Passed already (it cannot, the wait having just started):
            // the reader reports it at hyper's next read.
            cx.waker().wake_by_ref();
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Deadlines<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.update();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        match read {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before
                    && let Phase::Idle(_) = this.phase
                {
                    // The next request's first byte: its headers are on
                    // the header clock from here.
                    this.phase = Phase::Head(None);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                // Busy: no read clock; the write that ends the last
                // request starts the idle one (see `written`).
                let Some((deadline, which)) = this.deadline() else {
                    return Poll::Pending;
                };
                match this.arm(cx, deadline) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{which} timeout"),
                    ))),
                }
            }
        }
    }
}

impl WriteClock {
    /// Passes on what a write, flush or shutdown returned, having kept the
    /// clock: a result that is ready (bytes taken, a flush done, an error)
    /// ends a stall without touching the timer; a wait starts one, or
    /// continues it, and fails with `TimedOut` once it has lasted the
    /// timeout. The timer is polled with the waiting call's context, so it
    /// wakes the task when it fires.
    fn check<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            // A wait ended: the caller settles the phase (`written`).
            self.stalled = None;
            return polled;
        }
        let deadline = *self.stalled.get_or_insert_with(Instant::now) + self.timeout;
        // As on the read side, the timer moves earlier at once and later
        // only once it fires: a client that reads slowly but steadily
        // stalls the writes many times, and a timer-wheel reset per stall
        // is not needed to catch the one that lasts.
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                if sleep.deadline() > deadline {
                    sleep.as_mut().reset(deadline);
                }
                sleep
            }
            None => self
                .sleep
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        loop {
            match sleep.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) if sleep.deadline() >= deadline => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "write timeout",
                    )));
                }
                // Fired for an earlier stall's deadline: wait on for this
                // one's.
                Poll::Ready(()) => sleep.as_mut().reset(deadline),
            }
        }
    }
}

impl<IO> Deadlines<IO> {
    /// What a write, flush or shutdown returned, through the write clock,
    /// and the phase settled after one that went through.
    fn checked<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        let checked = self.write.check(cx, polled);
        if let Poll::Ready(Ok(_)) = checked {
            self.written(cx);
        }
        checked
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Deadlines<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.checked(cx, polled)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.checked(cx, polled)
    }

    /// On the clock too: over TLS a shutdown writes a last record, which
    /// waits for a client that does not read as a response does.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_shutdown(cx);
        this.checked(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.checked(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
