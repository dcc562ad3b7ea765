//! What the connections publish of their nodes' health (a leaf: `link/`
//! publishes it, `connection` hands it out).

/// Which nodes are down now: those whose breaker is open (`host:port`,
/// sorted). A node not listed is up, or not known yet (a Cluster's table
/// is still being read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// The nodes whose breaker is open.
    pub down: Vec<String>,
}

impl Health {
    /// Whether no node is down.
    pub fn is_up(&self) -> bool {
        self.down.is_empty()
    }
}
