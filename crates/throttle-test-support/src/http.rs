//! Shared helpers of the integration tests: real servers on ephemeral ports
//! and a real HTTP client.

#![allow(dead_code, unreachable_pub)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
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

pub struct HttpClient(Client<HttpConnector, Empty<Bytes>>);

/// A response, fully read.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    pub fn header_u64(&self, name: &str) -> u64 {
        self.header(name)
            .unwrap_or_else(|| panic!("no {name} header in {self:?}"))
            .parse()
            .unwrap()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }
}

impl HttpClient {
    pub async fn get(&self, addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut req = Request::get(format!("http://{addr}{path}"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let res = self
            .0
            .request(req.body(Empty::new()).unwrap())
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

/// Seconds since the Unix epoch.
pub fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
