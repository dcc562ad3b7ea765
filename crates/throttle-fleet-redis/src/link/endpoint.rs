//! From a configured URL to what a node's connections dial: the URL's
//! address and database, with the configuration's credentials and TLS
//! settings. Every node the backend opens starts here (a standalone
//! server, a Cluster's seeds, and through the seeds' template every node a
//! Cluster announces), so one setting applies to all of them.

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};
use throttle_fleet_core::ConfigError;

use crate::RedisConfig;

/// The connection settings of the node at `url` (named `field` in errors):
/// its address, the credentials and the TLS settings of `config`.
pub(crate) fn connection_info(
    url: &str,
    field: &'static str,
    config: &RedisConfig,
) -> Result<ConnectionInfo, ConfigError> {
    let info = parse(url, field)?;
    let info = config.credentials.apply(info, field)?;
    config.tls.apply(info, field)
}

/// `url` parsed, or why it cannot be used, naming `field` (never the URL:
/// it may hold a password).
pub(crate) fn parse(url: &str, field: &'static str) -> Result<ConnectionInfo, ConfigError> {
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    let tls = scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys");
    if tls && !cfg!(feature = "tls") {
        return Err(ConfigError::new(field, crate::tls::needs_feature()));
    }
    if tls && url.contains('#') {
        // `#insecure` would turn certificate verification off.
        return Err(ConfigError::new(
            field,
            "has a #fragment (#insecure): certificate verification cannot be turned off; \
             give the servers' CA with tls_ca_file",
        ));
    }
    url.into_connection_info()
        .map_err(|e| ConfigError::new(field, format!("is not a usable Redis URL ({:?})", e.kind())))
}

/// `template`'s settings (credentials, TLS or not and with what) for the
/// node at `host:port`: a node a Cluster announces, the primary a Sentinel
/// names. Over TLS that node is verified for `host`, also sent as SNI.
pub(crate) fn at(template: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    let addr = match template.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.to_owned(), port),
    };
    template.clone().set_addr(addr)
}
