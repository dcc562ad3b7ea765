//! What a node's first answer says of the configuration: a server that
//! refuses the credentials (`WRONGPASS`, `NOAUTH`) or whose certificate
//! the backend does not trust is a configuration error at startup, named
//! by its field; a server that does not answer is not (the failure policy
//! decides until it does).

use std::time::Duration;

use redis::RedisError;
use throttle_fleet_core::ConfigError;

use super::node::Node;

/// One `PING` to `node` within `patience` (once more on the connection it
/// dialled, as the probes do): whether it answered, or the configuration
/// error its refusal makes.
pub(super) async fn first_ping(node: &Node, patience: Duration) -> Result<bool, ConfigError> {
    let mut conn = node.conn();
    let deadline = tokio::time::Instant::now() + patience;
    for _ in 0..2 {
        let cmd = redis::cmd("PING");
        match tokio::time::timeout_at(deadline, cmd.query_async::<String>(&mut conn)).await {
            Ok(Ok(_)) => return Ok(true),
            Ok(Err(e)) => {
                if let Some(error) = refusal(&e, &node.addr) {
                    return Err(error);
                }
            }
            Err(_) => return Ok(false),
        }
    }
    Ok(false)
}

/// The configuration error `error` is, if it is a refusal rather than a
/// server out of reach.
pub(super) fn refusal(error: &RedisError, addr: &str) -> Option<ConfigError> {
    use redis::ErrorKind;

    let code = error.code().unwrap_or("");
    if error.kind() == ErrorKind::AuthenticationFailed || code == "WRONGPASS" {
        return Some(ConfigError::new(
            "redis.password",
            format!("was refused by {addr} (WRONGPASS: wrong user name or password)"),
        ));
    }
    if code == "NOAUTH" {
        return Some(ConfigError::new(
            "redis.password",
            format!("is needed: {addr} asks for authentication (NOAUTH)"),
        ));
    }
    if code == "NOPERM" {
        return Some(ConfigError::new(
            "redis.username",
            format!("has no permission for the backend's commands on {addr} (NOPERM)"),
        ));
    }
    tls_refusal(error, addr)
}

/// The TLS handshake's failure as a configuration error: the server's
/// certificate not trusted, or the client's refused (or missing).
#[cfg(feature = "tls")]
fn tls_refusal(error: &RedisError, addr: &str) -> Option<ConfigError> {
    use rustls::AlertDescription as Alert;
    use std::error::Error as _;

    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    // The `redis` crate keeps an I/O error behind an `Arc`; the handshake's
    // own error is inside that.
    let source = error.source()?;
    let io = source
        .downcast_ref::<Shared>()
        .and_then(|shared| shared.downcast_ref::<std::io::Error>())
        .or_else(|| source.downcast_ref::<std::io::Error>())?;
    match io.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidCertificate(why) => Some(ConfigError::new(
            "redis.tls_ca_file",
            format!("does not verify {addr}'s certificate ({why:?})"),
        )),
        rustls::Error::AlertReceived(
            alert @ (Alert::CertificateRequired
            | Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateUnknown
            | Alert::UnsupportedCertificate),
        ) => Some(ConfigError::new(
            "redis.tls_cert_file",
            format!("{addr} refused the client certificate, or its absence ({alert:?})"),
        )),
        _ => None,
    }
}

#[cfg(not(feature = "tls"))]
fn tls_refusal(_: &RedisError, _: &str) -> Option<ConfigError> {
    None
}
