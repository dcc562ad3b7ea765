//! Which request paths name the admin API, however they are written: the
//! public listener answers them all 404, so that no spelling of `/admin`
//! reaches a handler there, whatever a proxy in front makes of it.

/// Whether `path` names the admin API: its first segment is `admin`
/// (without case) once the path is read as a server or a proxy on the way
/// may read it:
///
/// - percent-escapes decoded once (`/%61dmin`, `/admin%2Frules`,
///   `/a/%2e%2e/admin`); a malformed escape (`%`, `%zz`) stays as written,
///   and one that decodes to a byte outside ASCII is that byte, never equal
///   to a letter of `admin`;
/// - `\` taken for `/`, as browsers' URL parsers take it;
/// - `.` and `..` segments resolved as RFC 3986's `remove_dot_segments`
///   does (`/./admin`, `/x/../admin`; `..` at the top stays there), with
///   empty segments kept as the RFC keeps them, or merged as nginx merges
///   them (`//admin`): either reading naming `admin` is enough.
///
/// Nothing is allocated unless the path holds a `%`.
pub(crate) fn is_admin_path(path: &str) -> bool {
    let decoded;
    let bytes = if path.contains('%') {
        decoded = percent_decoded(path.as_bytes());
        &decoded[..]
    } else {
        path.as_bytes()
    };
    first_segment_is_admin(bytes, Empty::Kept) || first_segment_is_admin(bytes, Empty::Merged)
}

/// What an empty segment (`//`) is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Empty {
    /// A segment, as RFC 3986 has it.
    Kept,
    /// Nothing, as a server that merges slashes has it.
    Merged,
}

/// Whether the first segment of `path`, its dot segments resolved, is
/// `admin` without case. Only the first segment and the depth are kept:
/// a `..` that empties the path forgets the first.
fn first_segment_is_admin(path: &[u8], empty: Empty) -> bool {
    let is_separator = |b: &u8| matches!(b, b'/' | b'\\');
    let path = match path.split_first() {
        Some((first, rest)) if is_separator(first) => rest,
        _ => path,
    };
    let mut first: &[u8] = b"";
    let mut depth = 0usize;
    for segment in path.split(is_separator) {
        match segment {
            b"." => {}
            b".." => depth = depth.saturating_sub(1),
            b"" if empty == Empty::Merged => {}
            _ => {
                if depth == 0 {
                    first = segment;
                }
                depth += 1;
            }
        }
    }
    depth > 0 && first.eq_ignore_ascii_case(b"admin")
}

/// `path` with each `%XX` (two hex digits, either case) replaced by its
/// byte; anything else, a malformed escape included, as it is.
fn percent_decoded(path: &[u8]) -> Vec<u8> {
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        if path[i] == b'%'
            && let Some(&[hi, lo]) = path.get(i + 1..i + 3)
            && let (Some(hi), Some(lo)) = (hex(hi), hex(lo))
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(path[i]);
            i += 1;
        }
    }
    out
}
