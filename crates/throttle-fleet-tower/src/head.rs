//! The request as key extractors, cost functions and responders read it:
//! borrowed in place, never moved.

use http::request::Parts;
use http::{Extensions, HeaderMap, Method, Request, Uri, Version};

/// What a request says before its body, borrowed from the request: what
/// a [`KeyExtractor`](crate::KeyExtractor), a cost function and a
/// [`Responder`](crate::responder::Responder) read. The layer makes one
/// from the request in place (five references), so a check moves nothing.
///
/// ```
/// use throttle_fleet_tower::RequestHead;
///
/// let req = http::Request::get("/t/acme").header("x-api-key", "k1").body(()).unwrap();
/// let head = RequestHead::of(&req);
/// assert_eq!(head.uri.path(), "/t/acme");
/// assert_eq!(head.headers["x-api-key"], "k1");
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RequestHead<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The request's URI.
    pub uri: &'a Uri,
    /// The request's HTTP version.
    pub version: Version,
    /// The request's headers.
    pub headers: &'a HeaderMap,
    /// The request's extensions (the peer address, a verified identity).
    pub extensions: &'a Extensions,
}

impl<'a> RequestHead<'a> {
    /// The head of `req`.
    #[inline]
    pub fn of<B>(req: &'a Request<B>) -> Self {
        Self {
            method: req.method(),
            uri: req.uri(),
            version: req.version(),
            headers: req.headers(),
            extensions: req.extensions(),
        }
    }

    /// The head of a request taken apart.
    #[inline]
    pub fn from_parts(parts: &'a Parts) -> Self {
        Self {
            method: &parts.method,
            uri: &parts.uri,
            version: parts.version,
            headers: &parts.headers,
            extensions: &parts.extensions,
        }
    }
}

impl<'a> From<&'a Parts> for RequestHead<'a> {
    fn from(parts: &'a Parts) -> Self {
        Self::from_parts(parts)
    }
}
