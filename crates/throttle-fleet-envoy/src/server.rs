//! The gRPC server both services run on, set up from the file's `[rls]`
//! table: what one Envoy, or a client that is not one, may hold of it.

use throttle_fleet_config::RlsConfig;
use tonic::transport::Server;

/// A tonic server builder under `rls`'s bounds: at most
/// `max_streams_per_connection` HTTP/2 streams open on one connection,
/// an HTTP/2 PING every `keepalive_interval` that closes a connection
/// whose client does not answer within `keepalive_timeout` (a peer gone
/// without a word holds nothing for long), and `TCP_NODELAY` on the
/// connections it accepts itself.
///
/// A server fed its own connections (`serve_with_incoming`) must set
/// `TCP_NODELAY` on them: tonic does not. Without it an answer written in
/// two parts (its message, then its trailers) waits for the client's
/// delayed acknowledgement, about 40 ms on Linux, twice Envoy's default
/// timeout for a rate limit call. The connection caps
/// (`max_connections`, `max_connections_per_client`) belong to the
/// accept loop; the `envoy_rls` example applies them.
///
/// ```
/// use throttle_fleet_config::RlsConfig;
///
/// let rls = RlsConfig { max_streams_per_connection: 100, ..RlsConfig::default() };
/// let _server = throttle_fleet_envoy::server(&rls);
/// ```
pub fn server(rls: &RlsConfig) -> Server {
    Server::builder()
        .max_concurrent_streams(rls.max_streams_per_connection)
        .http2_keepalive_interval(Some(rls.keepalive_interval))
        .http2_keepalive_timeout(Some(rls.keepalive_timeout))
        .tcp_nodelay(true)
}
