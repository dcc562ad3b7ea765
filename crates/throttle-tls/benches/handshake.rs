//! The acceptor's added handshake time against plain tokio-rustls: full
//! TLS 1.3 handshakes over an in-memory pipe, client and server in one task.
//!
//! Run with `cargo bench -p throttle-tls --bench handshake`.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use throttle_tls::tokio_rustls::rustls::{
    ClientConfig, RootCertStore, ServerConfig,
    crypto::ring,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName},
};
use throttle_tls::tokio_rustls::{TlsAcceptor, TlsConnector};
use throttle_tls::{FingerprintAcceptor, Ja4};

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
    client.resumption = throttle_tls::tokio_rustls::rustls::client::Resumption::disabled();
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
