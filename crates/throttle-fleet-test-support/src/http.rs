//! HTTP helpers: axum apps served on ephemeral loopback ports and a real
//! hyper HTTP/1.1 client whose responses are read in full.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Serves `app` on an ephemeral loopback port, with connect info (peer
/// addresses) when `connect_info` is set.
pub async fn serve(app: Router, connect_info: bool) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        if connect_info {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .unwrap();
        } else {
            axum::serve(listener, app).await.unwrap();
        }
    });
    addr
}

/// An HTTP/1.1 client whose connections come from `local` (any address in
/// 127.0.0.0/8 works on loopback, so tests can be several clients).
pub fn client_from(local: Ipv4Addr) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_local_address(Some(IpAddr::V4(local)));
    HttpClient(Client::builder(TokioExecutor::new()).build(connector))
}

/// A client connecting from 127.0.0.1.
pub fn client() -> HttpClient {
    client_from(Ipv4Addr::LOCALHOST)
}

/// Sends one request on a new client that leaves the local address to the
/// system (see [`HttpClient::send`]).
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Reply {
    HttpClient(Client::builder(TokioExecutor::new()).build(HttpConnector::new()))
        .send(addr, method, path, headers, body)
        .await
}

/// A `GET` of `path` without headers on a new client (see [`send`]).
pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    send(addr, "GET", path, &[], Bytes::new()).await
}

/// A real HTTP/1.1 client (hyper's pooled legacy client); it keeps its
/// connections alive between requests.
#[derive(Debug, Clone)]
pub struct HttpClient(Client<HttpConnector, Full<Bytes>>);

/// A response, fully read (trailers dropped).
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: StatusCode,
    /// The response headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Reply {
    /// The value of header `name` as text, if present. Panics if it is not
    /// visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// The value of header `name` as a number. Panics if it is missing or
    /// not a number.
    pub fn header_u64(&self, name: &str) -> u64 {
        self.header(name)
            .unwrap_or_else(|| panic!("no {name} header in {self:?}"))
            .parse()
            .unwrap()
    }

    /// The body as JSON. Panics if it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }
}

impl HttpClient {
    /// `GET http://{addr}{path}` with `headers` and no body.
    pub async fn get(&self, addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.send(addr, "GET", path, headers, Bytes::new()).await
    }

    /// `{method} http://{addr}{path}` with `headers` and `body` (an empty
    /// body is sent as none: no `content-length`, as for a `GET`).
    pub async fn send(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Reply {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{addr}{path}"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let res = self
            .0
            .request(req.body(Full::new(body)).unwrap())
            .await
            .unwrap();
        let (parts, body) = res.into_parts();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body: body.collect().await.unwrap().to_bytes(),
        }
    }
}
