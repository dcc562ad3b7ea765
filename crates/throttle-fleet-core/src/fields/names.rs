//! The names of the fields an answer carries, written by the servers (the
//! HTTP and gRPC layers, Envoy's RLS) and read by the client layer: one
//! spelling for both sides. Lower case, as HTTP/2 and gRPC metadata
//! require and as `http::HeaderName::from_static` takes them.

/// `Retry-After`: whole seconds (the servers write these) or an HTTP-date.
pub const RETRY_AFTER: &str = "retry-after";
/// `X-RateLimit-Limit`.
pub const X_RATELIMIT_LIMIT: &str = "x-ratelimit-limit";
/// `X-RateLimit-Remaining`.
pub const X_RATELIMIT_REMAINING: &str = "x-ratelimit-remaining";
/// `X-RateLimit-Reset`: Unix epoch seconds as the servers write it.
pub const X_RATELIMIT_RESET: &str = "x-ratelimit-reset";
/// `X-RateLimit-Shadow`: the shadow rules that would have denied.
pub const X_RATELIMIT_SHADOW: &str = "x-ratelimit-shadow";
/// `RateLimit-Policy` (IETF draft).
pub const RATELIMIT_POLICY: &str = "ratelimit-policy";
/// `RateLimit` (IETF draft).
pub const RATELIMIT: &str = "ratelimit";
/// `grpc-retry-pushback-ms`: how long a gRPC client must wait before it
/// retries; a negative value means "do not retry" (gRPC's retry design,
/// A6).
pub const GRPC_RETRY_PUSHBACK_MS: &str = "grpc-retry-pushback-ms";
