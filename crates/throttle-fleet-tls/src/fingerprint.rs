//! The fingerprint as a request extension, and the key extractor over it.

use throttle_fleet_tower::RequestHead;
use throttle_fleet_tower::key::{Extracted, KeyInputs};
use throttle_fleet_tower::{Key, KeyExtractor};

use crate::{Ja4, TlsConnectInfo};

/// What the acceptor learnt from a connection's ClientHello, carried as a
/// typed request extension on every request of that connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    ja4: Ja4,
}

impl Fingerprint {
    /// A fingerprint from its JA4.
    pub const fn new(ja4: Ja4) -> Self {
        Self { ja4 }
    }

    /// The connection's JA4.
    pub const fn ja4(&self) -> &Ja4 {
        &self.ja4
    }
}

/// Limits by the TLS fingerprint of the request's connection, read from the
/// [`Fingerprint`] request extension that the axum make-service inserts,
/// or from the [`TlsConnectInfo`] one that tonic inserts.
///
/// A request without one (plain HTTP, or a connection whose ClientHello
/// could not be read and the acceptor was told to proceed) is
/// [`Extracted::Missing`]; the rule's [`MissingKey`](throttle_fleet_tower::MissingKey)
/// decides (400 by default). Fall back explicitly, e.g.
/// `TlsFingerprint::ja4().or(Global)` to put all unfingerprinted
/// connections in one bucket.
///
/// Alone, a fingerprint names a TLS stack (every curl of one version shares
/// it), so use it in a composite with the client's address prefix:
///
/// ```
/// use throttle_fleet_axum::ClientIp;
/// use throttle_fleet_tls::TlsFingerprint;
/// use throttle_fleet_tower::key::Header;
/// let unauthenticated = (
///     ClientIp::default().ipv4_prefix(24),
///     TlsFingerprint::ja4(),
///     Header::new("user-agent"),
/// );
/// # let _ = unauthenticated;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct TlsFingerprint {
    _private: (),
}

impl TlsFingerprint {
    /// Keys by the connection's JA4.
    pub const fn ja4() -> Self {
        Self { _private: () }
    }
}

impl KeyExtractor for TlsFingerprint {
    #[inline]
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
        let ext = &req.extensions;
        ext.get::<Fingerprint>()
            .copied()
            .or_else(|| ext.get::<TlsConnectInfo>()?.fingerprint())
            .map(|f| Key::new(f.ja4().as_bytes()))
            .into()
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("tls-fingerprint")
    }

    /// The key of `inputs.tls_fingerprint`, a JA4 as text
    /// (`t13d1516h2_8daaf6152771_e5627efa2ab1`).
    fn key_for(&self, inputs: &KeyInputs) -> Option<Result<Key, String>> {
        let Some(text) = inputs.tls_fingerprint.as_deref() else {
            return Some(Err("needs the TLS fingerprint (a JA4)".into()));
        };
        Some(match Ja4::parse(text) {
            Some(ja4) => Ok(Key::new(ja4.as_bytes())),
            None => Err(format!(
                "{:?} is not a JA4 (36 characters, like \"t13d1516h2_8daaf6152771_e5627efa2ab1\")",
                text.chars().take(40).collect::<String>()
            )),
        })
    }
}
