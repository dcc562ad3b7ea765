//! Configuration errors.

use std::fmt;
use std::sync::Arc;

/// A rule, quota or backend setting that cannot work, found while the layer
/// (or a backend) is being built.
///
/// The error names the rule and the field so that the message alone says what
/// to change, e.g. ``rule `ip`: quota.limit must be at least 1 (got 0)``.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    rule: Option<Arc<str>>,
    field: &'static str,
    reason: String,
}

impl ConfigError {
    /// An error about `field`, explained by `reason`.
    pub fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            rule: None,
            field,
            reason: reason.into(),
        }
    }

    /// The same error, attributed to the rule named `rule`.
    #[must_use]
    pub fn in_rule(mut self, rule: &str) -> Self {
        self.rule = Some(Arc::from(rule));
        self
    }

    /// The rule the error is about, when it is about one.
    pub fn rule(&self) -> Option<&str> {
        self.rule.as_deref()
    }

    /// The configuration field that is wrong, e.g. `quota.limit`.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// Why the value cannot work.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid rate-limit configuration: ")?;
        if let Some(rule) = &self.rule {
            write!(f, "rule `{rule}`: ")?;
        }
        write!(f, "{} {}", self.field, self.reason)
    }
}

impl std::error::Error for ConfigError {}
