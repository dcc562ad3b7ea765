//! What is wrong with a configuration file, and where.

use std::fmt;
use std::ops::Range;

/// An invalid configuration file: which file, where in it (line and column,
/// 1-based, when known), which rule and field, and why.
///
/// Its `Display` reads like a compiler's:
/// `gateway.toml:14:9: rule "ip", field "limit": must be at least 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFileError {
    file: String,
    position: Option<(usize, usize)>,
    rule: Option<String>,
    field: String,
    message: String,
}

impl ConfigFileError {
    pub(crate) fn new(file: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            file: file.to_owned(),
            position: None,
            rule: None,
            field: field.into(),
            message: message.into(),
        }
    }

    /// Places the error at byte `span` of `text` (its start).
    pub(crate) fn at(mut self, text: &str, span: Option<Range<usize>>) -> Self {
        if let Some(span) = span {
            self.position = Some(line_col(text, span.start));
        }
        self
    }

    pub(crate) fn in_rule(mut self, rule: Option<&str>) -> Self {
        self.rule = rule.map(str::to_owned);
        self
    }

    /// An error about `file` found after it was read (by a backend or an
    /// integration binding its rules), with no position in it.
    pub fn in_file(
        file: &str,
        rule: Option<&str>,
        field: &str,
        message: impl Into<String>,
    ) -> Self {
        Self::new(file, field, message).in_rule(rule)
    }

    /// A rule that a backend or an extractor refused when it was bound.
    pub fn from_rule_error(file: &str, error: &throttle_fleet_core::ConfigError) -> Self {
        Self::in_file(file, error.rule(), error.field(), error.reason())
    }

    /// The file, as it was named when loading.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Line and column (1-based) of the offending value, when known.
    pub fn position(&self) -> Option<(usize, usize)> {
        self.position
    }

    /// The rule the error is in, if any.
    pub fn rule(&self) -> Option<&str> {
        self.rule.as_deref()
    }

    /// The field, as written in the file (`limit`, `backend.url`, ...).
    pub fn field(&self) -> &str {
        &self.field
    }

    /// Why the value cannot work.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some((line, col)) = self.position {
            write!(f, ":{line}:{col}")?;
        }
        f.write_str(": ")?;
        if let Some(rule) = &self.rule {
            write!(f, "rule \"{rule}\", ")?;
        }
        write!(f, "field \"{}\": {}", self.field, self.message)
    }
}

impl std::error::Error for ConfigFileError {}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit_once('\n')
        .map_or(before, |(_, last)| last)
        .chars()
        .count()
        + 1;
    (line, col)
}

#[cfg(test)]
mod tests;
