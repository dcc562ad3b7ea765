//! Client input in error messages: quoted, and cut short. An error
//! carrying a client's whole value back (a 1 MB domain) would cost the
//! server its size again, and an answer a client's own limits refuse.

/// The most bytes of one value an error quotes.
pub(crate) const QUOTED_BYTES: usize = 64;

/// `value` in quotes, its first [`QUOTED_BYTES`] bytes at most (cut at a
/// character boundary), with its length when cut.
pub(crate) fn quoted(value: &str) -> String {
    if value.len() <= QUOTED_BYTES {
        return format!("{value:?}");
    }
    let mut end = QUOTED_BYTES;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes)", &value[..end], value.len())
}

#[cfg(test)]
mod tests;
