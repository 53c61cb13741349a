//! Replies: formatting (single and multi-line) and an incremental parser for clients.

use std::fmt;

mod parser;
#[cfg(test)]
mod tests;

pub use parser::ReplyParser;

/// Longest reply line a parser accepts (bytes, CRLF included).
pub const MAX_REPLY_LINE: usize = 8192;
/// Most lines one multi-line reply may have before the parser gives up.
///
/// Far above any reply a GridFTP server sends a client (FEAT, SPAS with hundreds of stripes,
/// MLST, markers, GSI error chains); a `STAT` listing of a directory of more entries than
/// this should come over a data channel (`MLSD`).
pub const MAX_REPLY_LINES: usize = 16_384;
/// Most bytes one reply may take on the wire, every line and line end counted.
///
/// Room for 128 lines of the longest length or a `STAT` listing of some 15 000 entries, far
/// above the replies a client asks for (FEAT, SPAS, MLST, markers and GSI error chains run to
/// kilobytes), yet small enough that a server sending an endless reply cannot make a client
/// hold more than this.
pub const MAX_REPLY_BYTES: usize = 1 << 20;

/// One reply: a three-digit code and one or more text lines.
///
/// Formatting follows RFC 959: every line but the last is `NNN-text`, the last `NNN text`.
/// Inner lines that start with a space (as Globus' SPAS, MLST and STAT bodies do) are
/// formatted as they are, without the code, so `lines[1..len-1]` beginning with ' ' are
/// written verbatim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Reply code, 100..=599.
    pub code: u16,
    /// Text lines without CR/LF; at least one.
    pub lines: Vec<String>,
}

/// Why reply bytes are not a valid reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyError {
    /// A line longer than [`MAX_REPLY_LINE`].
    #[error("reply line too long")]
    LineTooLong,
    /// More than [`MAX_REPLY_LINES`] lines in one reply.
    #[error("reply has more than {MAX_REPLY_LINES} lines")]
    TooManyLines,
    /// A reply longer than its parser's bound ([`MAX_REPLY_BYTES`] unless set otherwise).
    #[error("reply longer than {limit} bytes")]
    TooLong {
        /// The bound it passed, in bytes.
        limit: usize,
    },
    /// A first line that does not start with three digits and ' ' or '-'.
    #[error("malformed reply line")]
    Malformed,
    /// Not valid UTF-8.
    #[error("reply is not valid text")]
    NotText,
}

impl Reply {
    /// A single-line reply.
    pub fn new(code: u16, text: impl Into<String>) -> Reply {
        Reply {
            code,
            lines: vec![text.into()],
        }
    }

    /// A reply of `text`, one line per `\n` in it: one line as [`Reply::new`], several as a
    /// multi-line reply closed by `NNN End.` (so every line of the text reads as its own).
    pub fn from_text(code: u16, text: &str) -> Reply {
        if !text.contains('\n') {
            return Reply::new(code, text);
        }
        let mut lines: Vec<String> = text.split('\n').map(String::from).collect();
        lines.push("End.".into());
        Reply::multi(code, lines)
    }

    /// A multi-line reply from its lines (first line is the `NNN-` line, last the `NNN ` line).
    pub fn multi(code: u16, lines: Vec<String>) -> Reply {
        Reply { code, lines }
    }

    /// The wire bytes, CRLF after every line.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.lines.iter().map(|l| l.len() + 6).sum());
        self.write_to(&mut out);
        out
    }

    /// Appends the wire bytes to `out`.
    ///
    /// A CR or LF inside a line's text is written as a space, so no text can end the reply
    /// early or smuggle in another one. A reply with no lines is written as `NNN ` alone.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let code = format!("{:03}", self.code);
        let last = self.lines.len().saturating_sub(1);
        if self.lines.is_empty() {
            out.extend_from_slice(code.as_bytes());
            out.extend_from_slice(b" \r\n");
        }
        for (i, line) in self.lines.iter().enumerate() {
            if i == last {
                out.extend_from_slice(code.as_bytes());
                out.push(b' ');
            } else if i == 0 || !line.starts_with(' ') {
                out.extend_from_slice(code.as_bytes());
                out.push(b'-');
            }
            out.extend(
                line.bytes()
                    .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
            );
            out.extend_from_slice(b"\r\n");
        }
    }

    /// 1xx.
    pub fn is_preliminary(&self) -> bool {
        (100..200).contains(&self.code)
    }
    /// 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.code)
    }
    /// 3xx.
    pub fn is_intermediate(&self) -> bool {
        (300..400).contains(&self.code)
    }
    /// 4xx or 5xx.
    pub fn is_error(&self) -> bool {
        self.code >= 400
    }

    /// All lines joined with '\n' (for messages).
    pub fn text(&self) -> String {
        self.lines.join("\n")
    }
}

impl fmt::Display for Reply {
    /// The wire form with CRLF line ends.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.to_bytes()))
    }
}
