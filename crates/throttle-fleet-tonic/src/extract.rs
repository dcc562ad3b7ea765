//! Key extractors for gRPC calls: the method, the service, a metadata value
//! and the peer address.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::extract::ConnectInfo;
use throttle_fleet_core::{ConfigError, Key};
use throttle_fleet_tower::KeyExtractor;
use throttle_fleet_tower::RequestHead;
use throttle_fleet_tower::key::{ClientAddr, Extracted, Header, PeerSource};
use tonic::transport::server::TcpConnectInfo;

use crate::grpc_responder::is_grpc;

static WARNED_NO_PEER: AtomicBool = AtomicBool::new(false);

/// Splits a gRPC path `/package.Service/Method` into its service and method;
/// `None` for anything else.
pub(crate) fn split_method(path: &str) -> Option<(&str, &str)> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    let ok = !service.is_empty() && !method.is_empty() && !method.contains('/');
    ok.then_some((service, method))
}

fn names_or_error(
    field: &'static str,
    names: &Option<Box<[String]>>,
    check: impl Fn(&str) -> bool,
    shape: &str,
) -> Result<(), ConfigError> {
    match names {
        Some(names) if names.is_empty() => Err(ConfigError::new(
            field,
            "needs at least one name: an empty list would apply the rule to nothing",
        )),
        Some(names) => match names.iter().find(|n| !check(n)) {
            Some(bad) => Err(ConfigError::new(
                field,
                format!("{bad:?} is not of the form {shape}"),
            )),
            None => Ok(()),
        },
        None => Ok(()),
    }
}

fn collect<I, S>(names: I) -> Option<Box<[String]>>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    Some(names.into_iter().map(Into::into).collect())
}

/// The full gRPC method of the call, `/package.Service/Method`: one count
/// per method.
///
/// [`GrpcMethod::only`] limits only the listed methods and skips the rule
/// for every other call. Requests that are not gRPC calls (plain HTTP
/// routes of a mixed axum router) skip the rule too. A gRPC call whose path
/// is not of the form `/service/method` has no key (answered
/// `INVALID_ARGUMENT` by default).
///
/// ```
/// use throttle_fleet_tonic::GrpcMethod;
/// let every_method = GrpcMethod::full();
/// let say_hello = GrpcMethod::only(["/helloworld.Greeter/SayHello"]);
/// # let _ = (every_method, say_hello);
/// ```
#[derive(Debug, Clone, Default)]
pub struct GrpcMethod {
    only: Option<Box<[String]>>,
}

impl GrpcMethod {
    /// Keys by full method; every method has its own count.
    pub fn full() -> Self {
        Self::default()
    }

    /// Applies the rule only to these methods (`/package.Service/Method`);
    /// other calls skip it.
    pub fn only<I, S>(methods: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            only: collect(methods),
        }
    }
}

impl KeyExtractor for GrpcMethod {
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
        if !is_grpc(req) {
            return Extracted::Skip;
        }
        let path = req.uri.path();
        match &self.only {
            Some(only) => match only.iter().any(|m| m == path) {
                true => Extracted::Key(Key::new(path)),
                false => Extracted::Skip,
            },
            None if split_method(path).is_some() => Extracted::Key(Key::new(path)),
            None => Extracted::Missing,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        names_or_error(
            "key.methods",
            &self.only,
            |m| split_method(m).is_some(),
            "\"/package.Service/Method\"",
        )
    }

    fn kind(&self) -> Cow<'static, str> {
        Cow::Borrowed("method")
    }

    /// The key of `inputs.route`, a full method
    /// (`/package.Service/Method`); an error if the rule does not apply
    /// to it.
    fn key_for(
        &self,
        inputs: &throttle_fleet_tower::key::KeyInputs,
    ) -> Option<Result<Key, String>> {
        let Some(method) = inputs.route.as_deref() else {
            return Some(Err(
                "needs the route (a full method, \"/package.Service/Method\")".into(),
            ));
        };
        Some(match &self.only {
            Some(only) if !only.iter().any(|m| m == method) => Err(format!(
                "the rule does not apply to method {method:?} (only to {})",
                only.join(", ")
            )),
            _ if split_method(method).is_none() => Err(format!(
                "{method:?} is not a full method, \"/package.Service/Method\""
            )),
            _ => Ok(Key::new(method)),
        })
    }
}

/// The gRPC service of the call, `package.Service`: one count per service,
/// shared by all its methods.
///
/// [`GrpcService::only`] limits only the listed services. Requests that are
/// not gRPC calls skip the rule; a gRPC call whose path is not of the form
/// `/service/method` has no key (answered `INVALID_ARGUMENT` by default).
///
/// ```
/// use throttle_fleet_tonic::GrpcService;
/// let every_service = GrpcService::each();
/// let greeter = GrpcService::only(["helloworld.Greeter"]);
/// # let _ = (every_service, greeter);
/// ```
#[derive(Debug, Clone, Default)]
pub struct GrpcService {
    only: Option<Box<[String]>>,
}

impl GrpcService {
    /// Keys by service; every service has its own count.
    pub fn each() -> Self {
        Self::default()
    }

    /// Applies the rule only to these services (`package.Service`, no
    /// slashes); calls to other services skip it.
    pub fn only<I, S>(services: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            only: collect(services),
        }
    }
}

impl KeyExtractor for GrpcService {
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
        if !is_grpc(req) {
            return Extracted::Skip;
        }
        let Some((service, _)) = split_method(req.uri.path()) else {
            return match self.only {
                Some(_) => Extracted::Skip,
                None => Extracted::Missing,
            };
        };
        match &self.only {
            Some(only) if !only.iter().any(|s| s == service) => Extracted::Skip,
            _ => Extracted::Key(Key::new(service)),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        names_or_error(
            "key.services",
            &self.only,
            |s| !s.is_empty() && !s.contains('/'),
            "\"package.Service\"",
        )
    }

    fn kind(&self) -> Cow<'static, str> {
        Cow::Borrowed("service")
    }
}

/// The value of a request metadata entry (e.g. `x-api-key`), as raw bytes;
/// gRPC metadata travels as HTTP/2 headers, so this is
/// [`Header`](throttle_fleet_tower::key::Header) with gRPC's rules for names. A missing
/// or empty entry has no key: the call is answered `INVALID_ARGUMENT`
/// unless the rule says otherwise (e.g.
/// `MissingKey::Reject(StatusCode::UNAUTHORIZED)` for `UNAUTHENTICATED`).
///
/// Names must be lowercase and must not start with `grpc-` (reserved by
/// gRPC). For a binary entry (`-bin`) the key is its base64 text.
///
/// ```
/// use throttle_fleet_tonic::Metadata;
/// let by_api_key = Metadata::new("x-api-key");
/// # let _ = by_api_key;
/// ```
#[derive(Debug, Clone)]
pub struct Metadata {
    name: String,
    header: Header,
}

impl Metadata {
    /// The metadata entry called `name` (checked when the layer is built).
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            header: Header::new(name),
        }
    }
}

impl KeyExtractor for Metadata {
    #[inline]
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
        self.header.extract(req)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let name = &self.name;
        if name.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(ConfigError::new(
                "key.metadata",
                format!("{name:?}: gRPC metadata names are lowercase"),
            ));
        }
        if name.starts_with("grpc-") {
            return Err(ConfigError::new(
                "key.metadata",
                format!("{name:?}: names starting with \"grpc-\" are reserved by gRPC"),
            ));
        }
        self.header.validate().map_err(|_| {
            ConfigError::new(
                "key.metadata",
                format!("{name:?} is not a valid metadata name"),
            )
        })
    }

    /// `metadata:<name>`, e.g. `metadata:x-api-key`.
    fn kind(&self) -> Cow<'static, str> {
        format!("metadata:{}", self.name).into()
    }
}

/// Where tonic (or an axum router hosting tonic services) puts the peer
/// address:
///
/// - `tonic::transport::Server` inserts `TcpConnectInfo` for TCP
///   connections before any layer runs, also when it terminates TLS itself
///   (`Server::builder().tls_config(..)`, where it adds `TlsConnectInfo`
///   next to it);
/// - an axum router (tonic services mounted next to HTTP routes) served with
///   `axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())`
///   inserts `ConnectInfo<SocketAddr>`.
///
/// A call without either (a Unix socket, a custom transport, an axum router
/// served without connect info) has no peer address; the first one logs an
/// error explaining the fix.
#[derive(Debug, Clone, Copy, Default)]
pub struct TonicPeer;

impl PeerSource for TonicPeer {
    #[inline]
    fn peer_addr(&self, req: &RequestHead<'_>) -> Option<SocketAddr> {
        if let Some(info) = req.extensions.get::<TcpConnectInfo>() {
            return info.remote_addr();
        }
        req.extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| *addr)
    }

    fn no_peer(&self) {
        if !WARNED_NO_PEER.swap(true, Ordering::Relaxed) {
            tracing::error!(
                "throttle: PeerIp found no peer address in the request. Serve tonic over TCP \
                 (tonic::transport::Server inserts TcpConnectInfo), or an axum router with \
                 `axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())`; \
                 until then calls limited by peer IP are answered INTERNAL (HTTP 500)"
            );
        }
    }

    fn kind(&self) -> &'static str {
        "peer-ip"
    }
}

/// The peer's IP address, from the connection ([`TonicPeer`]), or, when the
/// peer is a trusted proxy, the address it forwarded for; grouped by prefix
/// like `throttle_fleet_axum::ClientIp` (IPv4 `/32` and IPv6 `/64` unless told
/// otherwise, IPv4-mapped IPv6 counted as IPv4; see [`IpPrefix`](crate::key::IpPrefix)). Both
/// are [`ClientAddr`] and give an address the same key.
///
/// With no proxy trusted (the default) metadata such as `x-forwarded-for`
/// is never read: any client can write it. See [`ClientAddr`] for the
/// trusted-proxy rules.
///
/// A call without a peer address has no key: it is answered `INTERNAL`
/// naming the rule, never passed unlimited. Give such servers another key
/// (`PeerIp::default().or(Global)`, or
/// `Limit::on_missing_key(MissingKey::Skip)`) if that is intended.
///
/// ```
/// use throttle_fleet_tonic::PeerIp;
/// let per_address = PeerIp::default();
/// let per_subnet = PeerIp::default().ipv4_prefix(24).ipv6_prefix(56);
/// let behind_envoy = PeerIp::default().trusted_proxies(["10.0.0.0/8"]);
/// # let _ = (per_address, per_subnet, behind_envoy);
/// ```
pub type PeerIp = ClientAddr<TonicPeer>;

#[cfg(test)]
mod tests;
