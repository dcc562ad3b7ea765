//! tonic: a [`TlsIncoming`](crate::TlsIncoming) is what
//! `Server::serve_with_incoming` takes, and tonic puts each connection's
//! [`TlsConnectInfo`] on every request of it, where
//! [`TlsFingerprint`](crate::TlsFingerprint) finds the fingerprint.

use tonic::transport::server::Connected;

use crate::{TlsConnectInfo, TlsConnection};

impl Connected for TlsConnection {
    type ConnectInfo = TlsConnectInfo;

    fn connect_info(&self) -> TlsConnectInfo {
        self.info()
    }
}
