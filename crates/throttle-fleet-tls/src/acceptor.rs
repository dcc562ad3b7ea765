//! The acceptor: read the ClientHello, fingerprint it, replay it to rustls.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;

use crate::hello::{DEFAULT_MAX_HELLO, HelloError, Scan, Scanner};
use crate::{Fingerprint, Ja4};

/// The default deadline for a client to finish its handshake: 5 s.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
const READ_CHUNK: usize = 4096;

/// What the acceptor does with a ClientHello it cannot fingerprint
/// (oversized, malformed, not TLS at all).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnInvalid {
    /// Close the connection ([`AcceptError::Hello`]). The default: rustls
    /// would refuse most such hellos anyway, and one that is only too large
    /// for the bound is not worth the memory.
    #[default]
    Close,
    /// Hand the bytes to rustls anyway; if the handshake succeeds the
    /// connection has no [`Fingerprint`] and its requests are keyed as the
    /// rule's missing-key setting says.
    Proceed,
}

/// Why a connection was not accepted.
#[derive(Debug)]
#[non_exhaustive]
pub enum AcceptError {
    /// The client did not finish its handshake within the deadline.
    Timeout,
    /// The ClientHello could not be fingerprinted and the acceptor is set to
    /// [`OnInvalid::Close`] (or the client hung up inside it).
    Hello(HelloError),
    /// Reading the socket or the TLS handshake failed.
    Io(io::Error),
}

impl fmt::Display for AcceptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout => f.write_str("the TLS handshake did not finish in time"),
            Self::Hello(e) => write!(f, "unusable ClientHello: {e}"),
            Self::Io(e) => write!(f, "TLS accept failed: {e}"),
        }
    }
}

impl std::error::Error for AcceptError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Hello(e) => Some(e),
            Self::Io(e) => Some(e),
            Self::Timeout => None,
        }
    }
}

/// A `tokio_rustls::TlsAcceptor` that reads and fingerprints the
/// ClientHello first.
///
/// It buffers at most [`max_hello`](Self::max_hello) bytes (16 KiB by
/// default) plus one read, gives the whole handshake a deadline
/// ([`timeout`](Self::timeout), 5 s by default), and hands rustls exactly
/// the bytes the client sent, through [`Rewind`]. A hello split over several
/// records or TCP segments is reassembled.
#[derive(Clone)]
pub struct FingerprintAcceptor {
    tls: TlsAcceptor,
    max_hello: usize,
    timeout: Duration,
    on_invalid: OnInvalid,
}

impl fmt::Debug for FingerprintAcceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FingerprintAcceptor")
            .field("max_hello", &self.max_hello)
            .field("timeout", &self.timeout)
            .field("on_invalid", &self.on_invalid)
            .finish_non_exhaustive()
    }
}

impl FingerprintAcceptor {
    /// An acceptor for this rustls configuration.
    pub fn new(config: Arc<ServerConfig>) -> Self {
        Self {
            tls: TlsAcceptor::from(config),
            max_hello: DEFAULT_MAX_HELLO,
            timeout: DEFAULT_TIMEOUT,
            on_invalid: OnInvalid::default(),
        }
    }

    /// The largest ClientHello (handshake message) that is buffered and
    /// fingerprinted.
    #[must_use]
    pub fn max_hello(mut self, bytes: usize) -> Self {
        self.max_hello = bytes;
        self
    }

    /// The deadline for the whole handshake, ClientHello and rustls.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What to do with a ClientHello that cannot be fingerprinted.
    #[must_use]
    pub fn on_invalid(mut self, on_invalid: OnInvalid) -> Self {
        self.on_invalid = on_invalid;
        self
    }

    /// Reads the ClientHello, fingerprints it and completes the handshake.
    /// The deadline needs a Tokio runtime with time enabled.
    pub async fn accept<IO>(
        &self,
        io: IO,
    ) -> Result<(TlsStream<Rewind<IO>>, Option<Fingerprint>), AcceptError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let handshake = async {
            let (io, fingerprint) = self.read_hello(io).await?;
            let tls = self.tls.accept(io).await.map_err(AcceptError::Io)?;
            Ok((tls, fingerprint))
        };
        tokio::time::timeout(self.timeout, handshake)
            .await
            .map_err(|_| AcceptError::Timeout)?
    }

    /// Reads and fingerprints the ClientHello without a deadline, and
    /// returns the stream rewound to its first byte (for a TLS library
    /// other than this acceptor's rustls).
    pub async fn read_hello<IO>(
        &self,
        mut io: IO,
    ) -> Result<(Rewind<IO>, Option<Fingerprint>), AcceptError>
    where
        IO: AsyncRead + Unpin,
    {
        let mut buf = Vec::with_capacity(1024);
        let mut chunk = [0u8; READ_CHUNK];
        // The scanner reads each record once, however the bytes are split.
        let mut scanner = Scanner::new(self.max_hello);
        let outcome = loop {
            match scanner.scan(&buf) {
                Scan::Complete(message) => break Ja4::from_handshake(&message),
                Scan::Invalid(e) => break Err(e),
                Scan::NeedMore => {}
            }
            // The scanner refuses a buffer past `max_hello` + one record
            // header, so the buffer never grows past that plus one chunk.
            let n = io.read(&mut chunk).await.map_err(AcceptError::Io)?;
            if n == 0 {
                return Err(AcceptError::Hello(HelloError::Truncated));
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let fingerprint = match outcome {
            Ok(ja4) => Some(Fingerprint::new(ja4)),
            Err(e) => match self.on_invalid {
                OnInvalid::Close => return Err(AcceptError::Hello(e)),
                OnInvalid::Proceed => {
                    tracing::debug!(error = %e, "throttle-fleet-tls: no fingerprint for this connection");
                    None
                }
            },
        };
        Ok((Rewind::new(buf, io), fingerprint))
    }
}

/// A stream that first yields bytes already read from it, then reads on.
/// Writes go straight to the inner stream.
#[derive(Debug)]
pub struct Rewind<IO> {
    prefix: Vec<u8>,
    at: usize,
    inner: IO,
}

impl<IO> Rewind<IO> {
    /// `inner`, with `prefix` to be read again before it.
    pub fn new(prefix: Vec<u8>, inner: IO) -> Self {
        Self {
            prefix,
            at: 0,
            inner,
        }
    }

    /// The inner stream.
    pub fn get_ref(&self) -> &IO {
        &self.inner
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Rewind<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let n = (this.prefix.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Rewind<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
