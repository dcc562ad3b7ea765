//! One HTTP/1.1 connection under the header, idle, write and body
//! timeouts.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use axum::body::{Body, HttpBody};
use axum::response::Response;
use futures_util::task::AtomicWaker;
use http::Request;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tower::ServiceExt;
use tower_service::Service;

use super::ServeLimits;
use super::activity::{Activity, Running};
use super::body::{bound, request_body, request_timeout};
use super::deadline::Deadlines;

/// Serves one HTTP/1.1 connection with keep-alive: a request's headers
/// must arrive within `limits.header_timeout` (from the connection's start
/// or the request's first byte), and a keep-alive connection waits at most
/// `limits.idle_timeout` for its next request; past either the connection
/// is closed. A running request is never cut for being slow to produce: a
/// slow handler or a long streamed response holds its connection as long
/// as it runs. A connection whose client stops reading is: once the
/// server's writes have taken no byte for `limits.write_timeout`, the
/// connection is closed (a response read slowly but steadily is sent in
/// full; see [`ServeLimits`] for what "steadily" means). A request body
/// whose client stops sending it, or sends it slower than
/// `limits.body_min_bytes_per_sec`, ends in an error once the handler has
/// waited past `limits.body_timeout`, and the request is answered `408
/// Request Timeout` whatever the handler answered, and the connection
/// closed.
///
/// The service gets the body as axum's [`Body`]: a [`Router`](axum::Router)
/// or any service over it.
///
/// `TCP_NODELAY` is the caller's to set ([`Connections::accept`](super::Connections::accept)
/// sets it).
///
/// When `shutdown` completes, idle connections close at once and a running
/// request is finished first. HTTP upgrades (WebSocket) are not served
/// here: their long-lived streams would fall under the idle timeout.
pub async fn serve_connection<IO, S>(
    io: IO,
    service: S,
    limits: &ServeLimits,
    shutdown: impl Future<Output = ()>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Service<Request<Body>, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    let activity = Arc::new(Activity::default());
    let io = Deadlines::new(
        io,
        Arc::clone(&activity),
        limits.header_timeout,
        limits.idle_timeout,
        limits.write_timeout,
    );
    let bound = bound(limits);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let running = activity.start();
        let req = req.map(|body| request_body(body, bound, &running));
        let response = service.clone().oneshot(req);
        async move {
            let mut response = response.await?;
            if running.body_timed_out() {
                response = request_timeout();
            }
            Ok::<_, Infallible>(response.map(|body| TrackedBody {
                body,
                _running: running,
            }))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), service);
    let mut conn = pin!(conn);
    let mut shutdown = pin!(shutdown);
    // `shutdown` is polled only when its own waker has fired, not on every
    // wake-up of the connection (each read, write and response); a
    // `watch` or `Notify` takes a lock each time it is polled.
    let gate = Arc::new(Gate::default());
    let gate_waker = Waker::from(Arc::clone(&gate));
    let mut registered: Option<Waker> = None;
    let mut stopping = false;
    let result = std::future::poll_fn(|cx| {
        if !stopping {
            if !registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                gate.task.register(cx.waker());
                registered = Some(cx.waker().clone());
            }
            if gate.fired.load(Ordering::Acquire) {
                gate.fired.store(false, Ordering::Release);
                let mut gate_cx = Context::from_waker(&gate_waker);
                if shutdown.as_mut().poll(&mut gate_cx).is_ready() {
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
        conn.as_mut().poll(cx)
    })
    .await;
    if let Err(e) = result {
        // Timeouts and clients that went away: routine, not worth a warning.
        tracing::debug!(error = %e, "connection closed");
    }
}

/// The waker `shutdown` is polled with: it notes that the signal must be
/// polled again, and wakes the connection's task.
struct Gate {
    /// Whether `shutdown` is to be polled (at first, and once woken).
    fired: AtomicBool,
    /// The connection's task.
    task: AtomicWaker,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            fired: AtomicBool::new(true),
            task: AtomicWaker::new(),
        }
    }
}

impl Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// A response body that marks its request running until it is sent in
/// full or dropped.
struct TrackedBody {
    body: Body,
    _running: Running,
}

impl HttpBody for TrackedBody {
    type Data = <Body as HttpBody>::Data;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
