//! Key layout: `<prefix>:{<rule>:<key hex>}:<suffix>`.
//!
//! Everything inside the braces is ours: the rule name is validated
//! (`[A-Za-z0-9_.-]`) and the key is hex-encoded with a raw/digest marker,
//! so client input can neither choose the hash slot nor collide with
//! another client's key. All keys of one check share the hash tag, so they
//! land in one slot and one script can touch them atomically in a cluster.

#[derive(Debug, Clone)]
pub(crate) struct KeyBase {
    /// `<prefix>:{<rule>:`
    head: String,
}

impl KeyBase {
    pub(crate) fn new(prefix: &str, rule: &str) -> Self {
        Self {
            head: format!("{prefix}:{{{rule}:"),
        }
    }

    /// The approximate mode's hash of one bucket of the rule's keys for one
    /// interval: `<prefix>:{<rule>:b<bucket>}:a:<interval>`.
    pub(crate) fn bucket(&self, bucket: u64, interval: u64) -> String {
        format!("{}b{bucket}}}:a:{interval}", self.head)
    }

    pub(crate) fn key(&self, key: &throttle_core::Key, suffix: &str) -> String {
        let mut out =
            String::with_capacity(self.head.len() + 2 * key.as_bytes().len() + suffix.len() + 4);
        out.push_str(&self.head);
        key.write_hex(&mut out);
        out.push_str("}:");
        out.push_str(suffix);
        out
    }
}
