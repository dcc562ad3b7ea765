//! Extractors that need axum: the peer address and the matched route.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::extract::{ConnectInfo, MatchedPath};
use http::StatusCode;
use throttle_fleet_core::{ConfigError, Key};
use throttle_fleet_tower::RequestHead;
use throttle_fleet_tower::key::{ClientAddr, Extracted, KeyInputs, PeerSource};
use throttle_fleet_tower::{KeyExtractor, MissingKey};

static WARNED_NO_CONNECT_INFO: AtomicBool = AtomicBool::new(false);
static WARNED_NO_MATCHED_PATH: AtomicBool = AtomicBool::new(false);

/// Where axum puts the peer address: `ConnectInfo<SocketAddr>`, present
/// when the server is started with
/// `axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())`.
/// Without it there is no peer address; the first such request logs an
/// error explaining the fix.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConnectInfoPeer;

impl PeerSource for ConnectInfoPeer {
    #[inline]
    fn peer_addr(&self, req: &RequestHead<'_>) -> Option<SocketAddr> {
        req.extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| *addr)
    }

    fn no_peer(&self) {
        if !WARNED_NO_CONNECT_INFO.swap(true, Ordering::Relaxed) {
            tracing::error!(
                "throttle: ClientIp found no peer address in the request. Serve the app with \
                 `throttle_fleet_axum::serve::serve(listener, app)` or \
                 `axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())`; \
                 until then requests limited by client IP are answered 500"
            );
        }
    }
}

/// The client's IP address: the connection's peer (`ConnectInfo<SocketAddr>`)
/// or, when that peer is a trusted proxy, the address it forwarded for;
/// grouped by prefix: IPv4 by `/32` (each address) and IPv6 by `/64` (one
/// subscriber's network) unless told otherwise. An IPv4-mapped IPv6 address
/// (`::ffff:a.b.c.d`) counts as the IPv4 address.
///
/// This is [`ClientAddr`] reading axum's connect info: see it for the
/// trusted-proxy rules. With no proxy trusted (the default) headers such as
/// `X-Forwarded-For` are never read: any client can write them.
///
/// The server must be started with connect info:
/// `axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())`.
/// Without it there is no peer address; the first such request logs an error
/// explaining the fix, and requests are answered `500` with a JSON body
/// naming the rule (`RATE_LIMIT_KEY_MISSING`), never passed unlimited.
///
/// ```
/// use throttle_fleet_axum::ClientIp;
/// use throttle_fleet_axum::key::ForwardedHeader;
/// let per_address = ClientIp::default();
/// let per_subnet = ClientIp::default().ipv4_prefix(24).ipv6_prefix(56);
/// let behind_our_balancers = ClientIp::default().trusted_proxies(["10.0.0.0/8"]);
/// let behind_rfc7239_proxies = ClientIp::default()
///     .trusted_proxies(["10.0.0.0/8", "fd00::/8"])
///     .forwarded_header(ForwardedHeader::Forwarded);
/// # let _ = (per_address, per_subnet, behind_our_balancers, behind_rfc7239_proxies);
/// ```
pub type ClientIp = ClientAddr<ConnectInfoPeer>;

/// The route template the request matched (`/users/{id}`, not
/// `/users/42`), from axum's `MatchedPath`: one key per endpoint.
///
/// [`Route::only`] limits only the listed routes and skips the rule for
/// every other request.
///
/// ```
/// use throttle_fleet_axum::Route;
/// let every_route = Route::template();
/// let search_only = Route::only(["/search"]);
/// # let _ = (every_route, search_only);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Route {
    only: Option<Box<[String]>>,
}

impl Route {
    /// Keys by route template; every route has its own count.
    pub fn template() -> Self {
        Self::default()
    }

    /// Applies the rule only to these route templates (as written in the
    /// router, e.g. `"/users/{id}"`); other requests skip it.
    pub fn only<I, S>(templates: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            only: Some(templates.into_iter().map(Into::into).collect()),
        }
    }
}

impl KeyExtractor for Route {
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
        let Some(matched) = req.extensions.get::<MatchedPath>() else {
            if let Some(only) = &self.only {
                // Unrouted requests (404s, fallbacks) carry no matched path
                // and are not one of ours. A layer wrapping the router from
                // outside sees no matched path on any request, though: plain
                // templates still match the path, but a `{param}` one never
                // would, so say so once rather than pass quietly.
                if only.iter().any(|t| t.contains('{'))
                    && !WARNED_NO_MATCHED_PATH.swap(true, Ordering::Relaxed)
                {
                    tracing::warn!(
                        "throttle: Route::only saw a request without a matched path. If the layer \
                         wraps the router from outside, apply it with Router::layer or \
                         Router::route_layer instead, or templates with parameters never match"
                    );
                }
                return match only.iter().any(|t| t == req.uri.path()) {
                    true => Extracted::Key(Key::new(req.uri.path())),
                    false => Extracted::Skip,
                };
            }
            if !WARNED_NO_MATCHED_PATH.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    "throttle: Route found no matched path in the request. Apply the layer with \
                     Router::layer or Router::route_layer, so it runs after routing"
                );
            }
            return Extracted::Missing;
        };
        let template = matched.as_str();
        match &self.only {
            Some(only) if !only.iter().any(|t| t == template) => Extracted::Skip,
            _ => Extracted::Key(Key::new(template)),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        match &self.only {
            Some(only) if only.is_empty() => Err(ConfigError::new(
                "key.routes",
                "Route::only needs at least one route template",
            )),
            Some(only) => match only.iter().find(|t| !t.starts_with('/')) {
                Some(bad) => Err(ConfigError::new(
                    "key.routes",
                    format!("route templates start with '/' (got {bad:?})"),
                )),
                None => Ok(()),
            },
            None => Ok(()),
        }
    }

    fn on_missing(&self) -> MissingKey {
        MissingKey::Reject(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("route")
    }

    /// The key of `inputs.route`, a route template as the router writes it
    /// (`/items/{id}`); an error if the rule does not apply to it.
    fn key_for(&self, inputs: &KeyInputs) -> Option<Result<Key, String>> {
        Some(route_key(self.only.as_deref(), inputs))
    }
}

/// The key of `inputs.route` under a route extractor applying to `only`
/// (every route if `None`).
fn route_key(only: Option<&[String]>, inputs: &KeyInputs) -> Result<Key, String> {
    let route = inputs
        .route
        .as_deref()
        .ok_or("needs the route (its template, e.g. \"/items/{id}\")")?;
    match only {
        Some(only) if !only.iter().any(|t| t == route) => Err(format!(
            "the rule does not apply to route {route:?} (only to {})",
            only.join(", ")
        )),
        _ => Ok(Key::new(route)),
    }
}

#[cfg(test)]
mod tests;
