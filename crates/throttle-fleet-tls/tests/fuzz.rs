//! The fingerprint parser never panics and never reads past its bound,
//! whatever the bytes. A longer run: `PROPTEST_CASES=200000 cargo test
//! --release -p throttle-fleet-tls --test fuzz`.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use proptest::prelude::*;
use throttle_fleet_tls::tokio_rustls::rustls::{self, crypto::ring, pki_types};
use throttle_fleet_tls::{FingerprintAcceptor, HelloError, Ja4};
use tokio::io::{AsyncRead, ReadBuf};

const CURL: &[u8] = include_bytes!("vectors/curl.bin");

/// 2,000 cases in CI; `PROPTEST_CASES` asks for more
/// (`ProptestConfig::with_cases` alone would ignore it).
fn cases() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    ProptestConfig::with_cases(cases)
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = Ja4::from_records(&bytes);
        let _ = Ja4::from_handshake(&bytes);
    }

    #[test]
    fn a_real_hello_with_bytes_flipped(flips in proptest::collection::vec((0..CURL.len(), any::<u8>()), 1..8)) {
        let mut bytes = CURL.to_vec();
        for (at, value) in flips {
            bytes[at] = value;
        }
        if let Ok(ja4) = Ja4::from_records(&bytes) {
            prop_assert_eq!(ja4.as_str().len(), 36);
            prop_assert!(ja4.as_str().is_ascii());
        }
    }

    #[test]
    fn a_real_hello_cut_anywhere_is_truncated(cut in 0..CURL.len()) {
        prop_assert_eq!(Ja4::from_records(&CURL[..cut]), Err(HelloError::Truncated));
    }

    #[test]
    fn a_real_hello_split_into_records_anywhere(cuts in proptest::collection::btree_set(1..CURL.len() - 5, 0..12)) {
        prop_assert_eq!(Ja4::from_records(&reframed(&cuts)), Ja4::from_records(CURL));
    }

    #[test]
    fn the_acceptor_reads_a_hello_in_any_records_and_any_reads(
        record_cuts in proptest::collection::btree_set(1..CURL.len() - 5, 0..12),
        reads in proptest::collection::vec(1..40usize, 1..16),
    ) {
        let wire = reframed(&record_cuts);
        let reader = Reads { bytes: &wire, at: 0, sizes: &reads, next: 0 };
        let (_, fingerprint) = runtime()
            .block_on(acceptor().read_hello(reader))
            .unwrap();
        prop_assert_eq!(fingerprint.map(|f| *f.ja4()), Ja4::from_records(CURL).ok());
    }
}

/// CURL's hello body cut into records at `cuts`.
fn reframed(cuts: &std::collections::BTreeSet<usize>) -> Vec<u8> {
    let body = &CURL[5..];
    let mut wire = Vec::new();
    let mut from = 0;
    for to in cuts.iter().copied().chain([body.len()]) {
        let part = &body[from..to.min(body.len())];
        if part.is_empty() {
            continue;
        }
        wire.extend_from_slice(&[22, 3, 1]);
        wire.extend_from_slice(&(part.len() as u16).to_be_bytes());
        wire.extend_from_slice(part);
        from = to;
    }
    wire
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    })
}

fn acceptor() -> &'static FingerprintAcceptor {
    static ACCEPTOR: OnceLock<FingerprintAcceptor> = OnceLock::new();
    ACCEPTOR.get_or_init(|| {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let key = pki_types::PrivatePkcs8KeyDer::from(c.signing_key.serialize_der());
        let config =
            rustls::ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![c.cert.der().clone()], key.into())
                .unwrap();
        FingerprintAcceptor::new(Arc::new(config))
    })
}

/// Reads of the sizes `sizes` gives, in turn and over again.
struct Reads<'a> {
    bytes: &'a [u8],
    at: usize,
    sizes: &'a [usize],
    next: usize,
}

impl AsyncRead for Reads<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let size = this.sizes[this.next % this.sizes.len()].min(buf.remaining());
        let end = (this.at + size).min(this.bytes.len());
        buf.put_slice(&this.bytes[this.at..end]);
        this.at = end;
        this.next += 1;
        Poll::Ready(Ok(()))
    }
}
