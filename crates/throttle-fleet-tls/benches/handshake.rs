//! The acceptor's added handshake time against plain tokio-rustls: full
//! TLS 1.3 handshakes over an in-memory pipe, client and server in one task.
//!
//! Run with `cargo bench -p throttle-fleet-tls --bench handshake`.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use criterion::{Criterion, criterion_group, criterion_main};
use throttle_fleet_tls::tokio_rustls::rustls::{
    ClientConfig, RootCertStore, ServerConfig,
    crypto::ring,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName},
};
use throttle_fleet_tls::tokio_rustls::{TlsAcceptor, TlsConnector};
use throttle_fleet_tls::{FingerprintAcceptor, Ja4};
use tokio::io::{AsyncRead, ReadBuf};

fn configs() -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert: CertificateDer<'static> = c.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(c.signing_key.serialize_der()));
    let mut server = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    server.alpn_protocols = vec![b"h2".to_vec()];
    let mut roots = RootCertStore::empty();
    roots.add(cert).unwrap();
    let mut client = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"h2".to_vec()];
    client.resumption = throttle_fleet_tls::tokio_rustls::rustls::client::Resumption::disabled();
    (Arc::new(server), Arc::new(client))
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (server, client) = configs();
    let plain = TlsAcceptor::from(server.clone());
    let fingerprinting = FingerprintAcceptor::new(server);
    let connector = TlsConnector::from(client);
    let name = ServerName::try_from("localhost").unwrap();

    let mut group = c.benchmark_group("handshake");
    group.bench_function("tokio-rustls", |b| {
        b.iter(|| {
            rt.block_on(async {
                let (c, s) = tokio::io::duplex(64 * 1024);
                let (client, server) =
                    tokio::join!(connector.connect(name.clone(), c), plain.accept(s));
                client.unwrap();
                server.unwrap();
            })
        })
    });
    group.bench_function("fingerprinting", |b| {
        b.iter(|| {
            rt.block_on(async {
                let (c, s) = tokio::io::duplex(64 * 1024);
                let (client, server) =
                    tokio::join!(connector.connect(name.clone(), c), fingerprinting.accept(s));
                client.unwrap();
                server.unwrap();
            })
        })
    });
    group.finish();

    let hello = include_bytes!("../tests/vectors/curl.bin");
    c.bench_function("ja4 of a 517-byte hello", |b| {
        b.iter(|| Ja4::from_records(std::hint::black_box(hello)).unwrap())
    });

    // A client sending a large hello one byte per segment: the work of
    // reading it (framing and JA4, no rustls) should grow with its size,
    // not with its size squared.
    let big = padded(hello, 15_000);
    let mut group = c.benchmark_group("read_hello one byte per read");
    for (name, record) in [
        ("15 KB in 1 record", 16_384),
        ("15 KB in 256-byte records", 256),
    ] {
        let wire = reframed(&big, record);
        let acceptor = fingerprinting.clone();
        group.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(async {
                    let io = OneByte {
                        bytes: &wire,
                        at: 0,
                    };
                    let (_, fingerprint) = acceptor.read_hello(io).await.unwrap();
                    fingerprint.unwrap()
                })
            })
        });
    }
    group.finish();
}

/// `hello` (one record) with a padding extension making its handshake
/// message `size` bytes long.
fn padded(hello: &[u8], size: usize) -> Vec<u8> {
    let mut m = hello[5..].to_vec();
    // Handshake header (4), version (2), random (32), then the session id,
    // the cipher suites and the compression methods, each with its length.
    let mut at = 4 + 2 + 32;
    at += 1 + usize::from(m[at]);
    at += 2 + usize::from(u16::from_be_bytes([m[at], m[at + 1]]));
    at += 1 + usize::from(m[at]);
    let pad = size - m.len() - 4;
    m.extend_from_slice(&[0x00, 0x15]);
    m.extend_from_slice(&(pad as u16).to_be_bytes());
    m.resize(size, 0);
    let ext_len = (m.len() - at - 2) as u16;
    m[at..at + 2].copy_from_slice(&ext_len.to_be_bytes());
    let body = (m.len() - 4) as u32;
    m[1..4].copy_from_slice(&body.to_be_bytes()[1..]);
    let mut wire = hello[..5].to_vec();
    wire.extend_from_slice(&m);
    wire
}

/// A one-record hello cut into records of at most `size` bytes.
fn reframed(wire: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for part in wire[5..].chunks(size) {
        out.extend_from_slice(&wire[..3]);
        out.extend_from_slice(&(part.len() as u16).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

/// Reads return one byte each.
struct OneByte<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl AsyncRead for OneByte<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(&b) = self.bytes.get(self.at) {
            buf.put_slice(&[b]);
            self.at += 1;
        }
        Poll::Ready(Ok(()))
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
