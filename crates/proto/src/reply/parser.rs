//! The incremental reply parser a client reads its control channel with.

use super::{Reply, ReplyError, MAX_REPLY_BYTES, MAX_REPLY_LINE, MAX_REPLY_LINES};
use crate::line::LineBuffer;

/// Incremental reply parser: feed bytes as they arrive, take complete replies out.
///
/// Accepts LF or CRLF line ends. A multi-line reply starts with `NNN-` and ends at the first
/// line that starts with the same `NNN ` (RFC 959). Lines in between that start with `NNN-`
/// (the same code) are stored without that prefix; any other line is stored verbatim. So
/// every [`Reply`] with a code of three digits round-trips through [`Reply::to_bytes`] and this
/// parser, whatever its lines hold (CR and LF excepted, which the formatter turns into spaces).
///
/// A reply may take [`MAX_REPLY_BYTES`] on the wire (or the bound of
/// [`ReplyParser::with_max_bytes`]) and [`MAX_REPLY_LINES`] lines: one that goes over is
/// refused as soon as the line that passes the bound has begun to arrive, so a half-read reply
/// and the line in progress never hold more than the bound together. Beyond that the parser
/// keeps only what the last [`ReplyParser::feed`] handed it and has not parsed yet.
///
/// After an error the parser drops the offending line (up to its LF) and, inside a multi-line
/// reply, the rest of that reply up to its last line; then it carries on with the next line.
/// A control connection usually closes instead.
#[derive(Debug)]
pub struct ReplyParser {
    lines: LineBuffer,
    /// Bytes of those available known to hold no LF (so a slow line is not rescanned per
    /// feed).
    scanned: usize,
    pending: Option<Pending>,
    /// Dropping the lines of a refused multi-line reply (of these digits) up to its last line.
    skipping: Option<[u8; 3]>,
    /// Most bytes one reply may take on the wire.
    max_bytes: usize,
}

/// A multi-line reply read up to (not including) its last line.
#[derive(Debug)]
struct Pending {
    digits: [u8; 3],
    reply: Reply,
    /// Wire bytes of the lines read so far, line ends included.
    bytes: usize,
}

impl Default for ReplyParser {
    fn default() -> Self {
        ReplyParser::with_max_bytes(MAX_REPLY_BYTES)
    }
}

impl ReplyParser {
    /// A parser with nothing buffered.
    pub fn new() -> ReplyParser {
        ReplyParser::default()
    }

    /// A parser whose replies may take up to `max_bytes` on the wire, for a layer whose replies
    /// are longer than the ones they carry (GSI's protected replies: base64 of wrapped lines).
    pub fn with_max_bytes(max_bytes: usize) -> ReplyParser {
        ReplyParser {
            lines: LineBuffer::default(),
            scanned: 0,
            pending: None,
            skipping: None,
            max_bytes,
        }
    }

    /// Appends received bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.lines.feed(bytes);
    }

    /// Whether received bytes are waiting that no reply has taken yet.
    pub fn has_buffered(&self) -> bool {
        !self.lines.available().is_empty()
            || self.pending.is_some()
            || self.lines.is_discarding()
            || self.skipping.is_some()
    }

    /// The next complete reply, `Ok(None)` if more bytes are needed.
    pub fn next_reply(&mut self) -> Result<Option<Reply>, ReplyError> {
        loop {
            if self.lines.is_discarding() {
                return Ok(None);
            }
            let avail = self.lines.available();
            let Some(lf) = avail[self.scanned..].iter().position(|&b| b == b'\n') else {
                self.scanned = avail.len();
                return self.partial_line();
            };
            let end = self.scanned + lf;
            self.scanned = 0;
            let line = self.lines.take_line(end);
            if let Some(digits) = self.skipping {
                if is_last_line(line, digits) {
                    self.skipping = None;
                }
                continue;
            }
            let held = self.pending.as_ref().map_or(0, |p| p.bytes);
            let text = std::str::from_utf8(line);
            let refused = if end + 1 > MAX_REPLY_LINE {
                Some(ReplyError::LineTooLong)
            } else if held + end + 1 > self.max_bytes {
                Some(ReplyError::TooLong {
                    limit: self.max_bytes,
                })
            } else if text.is_err() {
                Some(ReplyError::NotText)
            } else if self.pending.as_ref().is_some_and(|p| {
                p.reply.lines.len() + 1 >= MAX_REPLY_LINES && !is_last_line(line, p.digits)
            }) {
                Some(ReplyError::TooManyLines)
            } else {
                None
            };
            if let Some(err) = refused {
                self.skipping = rest_to_skip(self.pending.as_ref(), line);
                self.pending = None;
                return Err(err);
            }
            let Ok(text) = text else {
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
                        self.pending = Some(Pending {
                            digits,
                            reply,
                            bytes: end + 1,
                        });
                    } else {
                        return Ok(Some(reply));
                    }
                }
                Some(mut pending) => {
                    if is_last_line(line, pending.digits) {
                        pending
                            .reply
                            .lines
                            .push(text.get(4..).unwrap_or("").to_owned());
                        return Ok(Some(pending.reply));
                    }
                    let inner = match line {
                        [a, b, c, b'-', ..] if [*a, *b, *c] == pending.digits => &text[4..],
                        _ => text,
                    };
                    pending.reply.lines.push(inner.to_owned());
                    pending.bytes += end + 1;
                    self.pending = Some(pending);
                }
            }
        }
    }

    /// What a line without its LF yet means: more bytes needed, or a refusal once the line
    /// is too long or takes its reply past the bound (its rest up to the LF is dropped).
    fn partial_line(&mut self) -> Result<Option<Reply>, ReplyError> {
        let avail = self.lines.available();
        let held = self.pending.as_ref().map_or(0, |p| p.bytes);
        if let Some(digits) = self.skipping {
            // Part of a reply already refused: dropped without another error, as soon as its
            // first four bytes tell whether it is the reply's last line.
            if avail.len() >= 4 {
                if starts_last_line(avail, digits) {
                    self.skipping = None;
                }
                self.discard_line();
            }
            return Ok(None);
        }
        let err = if avail.len() >= MAX_REPLY_LINE {
            // Even if the LF came next, the line would be over the limit.
            ReplyError::LineTooLong
        } else if held + avail.len() > self.max_bytes && avail.len() >= 4 {
            // Four bytes tell whether the line is the reply's last, and so where to stop
            // skipping; the bound is passed either way.
            ReplyError::TooLong {
                limit: self.max_bytes,
            }
        } else {
            return Ok(None);
        };
        self.skipping = rest_to_skip(self.pending.as_ref(), avail);
        self.pending = None;
        self.discard_line();
        Err(err)
    }

    /// Drops the buffered line in progress and the rest of it up to its LF.
    fn discard_line(&mut self) {
        self.lines.discard_line();
        self.scanned = 0;
    }

    /// Bytes held: unparsed input and the text of a half-read reply.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        let pending = self
            .pending
            .as_ref()
            .map_or(0, |p| p.reply.lines.iter().map(String::len).sum::<usize>());
        self.lines.available().len() + pending
    }
}

/// Whether `line` (without its line end) is the last line of a multi-line reply of `digits`.
fn is_last_line(line: &[u8], digits: [u8; 3]) -> bool {
    line.len() >= 3 && line[..3] == digits && matches!(line.get(3), None | Some(b' '))
}

/// [`is_last_line`] for the start of a line whose LF has not come: a CR after the digits is
/// taken for the end of a bare `NNN` line.
fn starts_last_line(start: &[u8], digits: [u8; 3]) -> bool {
    is_last_line(start, digits) || (start.len() >= 4 && start[..3] == digits && start[3] == b'\r')
}

/// The code of the multi-line reply whose remaining lines are to be dropped after `line` (or
/// the start of it) was refused: the half-read one unless `line` is its last, or the one
/// `line` would have opened.
fn rest_to_skip(pending: Option<&Pending>, line: &[u8]) -> Option<[u8; 3]> {
    match (pending, line) {
        (Some(p), _) => (!starts_last_line(line, p.digits)).then_some(p.digits),
        (None, [a, b, c, b'-', ..]) if [a, b, c].iter().all(|d| d.is_ascii_digit()) => {
            Some([*a, *b, *c])
        }
        (None, _) => None,
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
