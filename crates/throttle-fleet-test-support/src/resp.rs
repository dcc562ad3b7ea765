//! The harness's own RESP2: a command written as RESP, a reply read back.
//! The servers' plain and TLS queries both speak it.

use std::io::{self, BufRead};

/// A reply of the minimal RESP2 client the harness uses for its own checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Status(String),
    /// `-ERR ...`
    Error(String),
    /// `:42`
    Int(i64),
    /// `$...` (`None` for a nil bulk string); bytes decoded lossily as UTF-8.
    Bulk(Option<String>),
    /// `*...` (`None` for a nil array).
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The text of a status or bulk reply.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Reply::Status(s) | Reply::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }

    /// The elements of an array reply (empty for anything else).
    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(items)) => items,
            _ => &[],
        }
    }
}

pub(crate) fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if line.len() < 3 || !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed or truncated reply",
        ));
    }
    let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
    let number = || {
        text.parse::<i64>()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("bad number {text:?}")))
    };
    Ok(match line[0] {
        b'+' => Reply::Status(text.clone()),
        b'-' => Reply::Error(text.clone()),
        b':' => Reply::Int(number()?),
        b'$' => match usize::try_from(number()?) {
            Err(_) => Reply::Bulk(None),
            Ok(len) => {
                let mut buf = vec![0; len + 2];
                reader.read_exact(&mut buf)?;
                buf.truncate(len);
                Reply::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
            }
        },
        b'*' => match usize::try_from(number()?) {
            Err(_) => Reply::Array(None),
            Ok(n) => Reply::Array(Some(
                (0..n)
                    .map(|_| read_reply(reader))
                    .collect::<io::Result<_>>()?,
            )),
        },
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected RESP type byte {other:#x}"),
            ));
        }
    })
}

/// One command as RESP.
pub(crate) fn request(args: &[&str]) -> Vec<u8> {
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        request.extend_from_slice(arg.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    request
}
