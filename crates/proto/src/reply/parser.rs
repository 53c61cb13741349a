//! The incremental reply parser a client reads its control channel with.

use super::{Reply, ReplyError, MAX_REPLY_LINE, MAX_REPLY_LINES};

/// Incremental reply parser: feed bytes as they arrive, take complete replies out.
///
/// Accepts LF or CRLF line ends. A multi-line reply starts with `NNN-` and ends at the first
/// line that starts with the same `NNN ` (RFC 959). Lines in between that start with `NNN-`
/// (the same code) are stored without that prefix; any other line is stored verbatim. So
/// every [`Reply`] with a code of three digits round-trips through [`Reply::to_bytes`] and this
/// parser, whatever its lines hold (CR and LF excepted, which the formatter turns into spaces).
///
/// After an error the parser drops the offending line (up to its LF) and any half-read reply,
/// and carries on with the next line; a control connection usually closes instead.
#[derive(Debug, Default)]
pub struct ReplyParser {
    buf: Vec<u8>,
    /// Bytes of `buf` already handed out.
    start: usize,
    /// Bytes after `start` known to hold no LF (so a slow line is not rescanned per feed).
    scanned: usize,
    /// Dropping the rest of an over-long line up to its LF.
    discarding: bool,
    pending: Option<Pending>,
}

/// A multi-line reply read up to (not including) its last line.
#[derive(Debug)]
struct Pending {
    digits: [u8; 3],
    reply: Reply,
}

impl ReplyParser {
    /// A parser with nothing buffered.
    pub fn new() -> ReplyParser {
        ReplyParser::default()
    }

    /// Appends received bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        if !self.discarding {
            self.buf.extend_from_slice(bytes);
        } else if let Some(lf) = bytes.iter().position(|&b| b == b'\n') {
            // The over-long line ends here; what follows is the next line.
            self.discarding = false;
            self.buf.extend_from_slice(&bytes[lf + 1..]);
        }
    }

    /// Whether received bytes are waiting that no reply has taken yet.
    pub fn has_buffered(&self) -> bool {
        self.buf.len() > self.start || self.pending.is_some() || self.discarding
    }

    /// The next complete reply, `Ok(None)` if more bytes are needed.
    pub fn next_reply(&mut self) -> Result<Option<Reply>, ReplyError> {
        loop {
            if self.discarding {
                return Ok(None);
            }
            let avail = &self.buf[self.start..];
            let Some(lf) = avail[self.scanned..].iter().position(|&b| b == b'\n') else {
                self.scanned = avail.len();
                if avail.len() >= MAX_REPLY_LINE {
                    // Even if the LF came next, the line would be over the limit.
                    self.buf.clear();
                    self.start = 0;
                    self.scanned = 0;
                    self.discarding = true;
                    self.pending = None;
                    return Err(ReplyError::LineTooLong);
                }
                return Ok(None);
            };
            let end = self.scanned + lf;
            let line_start = self.start;
            self.start += end + 1;
            self.scanned = 0;
            if end + 1 > MAX_REPLY_LINE {
                self.pending = None;
                return Err(ReplyError::LineTooLong);
            }
            let mut line = &self.buf[line_start..line_start + end];
            if let [rest @ .., b'\r'] = line {
                line = rest;
            }
            let Ok(text) = std::str::from_utf8(line) else {
                self.pending = None;
                return Err(ReplyError::NotText);
            };
            match self.pending.take() {
                None => {
                    let (digits, sep, rest) = split_first_line(text)?;
                    let code = digits
                        .iter()
                        .fold(0u16, |acc, d| acc * 10 + u16::from(d - b'0'));
                    let reply = Reply::new(code, rest);
                    if sep == Some(b'-') {
                        self.pending = Some(Pending { digits, reply });
                    } else {
                        return Ok(Some(reply));
                    }
                }
                Some(mut pending) => {
                    let bytes = text.as_bytes();
                    let same_code = bytes.len() >= 3 && bytes[..3] == pending.digits;
                    let sep = bytes.get(3).copied();
                    if same_code && (sep.is_none() || sep == Some(b' ')) {
                        pending
                            .reply
                            .lines
                            .push(text.get(4..).unwrap_or("").to_owned());
                        return Ok(Some(pending.reply));
                    }
                    if pending.reply.lines.len() + 1 >= MAX_REPLY_LINES {
                        return Err(ReplyError::TooManyLines);
                    }
                    let inner = if same_code && sep == Some(b'-') {
                        &text[4..]
                    } else {
                        text
                    };
                    pending.reply.lines.push(inner.to_owned());
                    self.pending = Some(pending);
                }
            }
        }
    }
}

/// Splits a reply's first line into its three code digits, the separator and the text.
fn split_first_line(text: &str) -> Result<([u8; 3], Option<u8>, &str), ReplyError> {
    let bytes = text.as_bytes();
    let digits = match bytes {
        [a, b, c, ..] if [a, b, c].iter().all(|d| d.is_ascii_digit()) => [*a, *b, *c],
        _ => return Err(ReplyError::Malformed),
    };
    match bytes.get(3) {
        None => Ok((digits, None, "")),
        Some(&sep @ (b' ' | b'-')) => Ok((digits, Some(sep), &text[4..])),
        Some(_) => Err(ReplyError::Malformed),
    }
}
