//! Bounded line framing for the control channel (server side).

/// Splits a byte stream into CRLF (or bare LF) terminated lines of bounded length.
///
/// A line longer than the limit is reported once as [`LineEvent::TooLong`] and its bytes are
/// discarded up to the next line end, so one bad line cannot grow memory or desynchronise the
/// session.
#[derive(Debug)]
pub struct LineFramer {
    buf: Vec<u8>,
    max: usize,
    discarding: bool,
}

/// What the framer found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineEvent {
    /// One line, without its line end.
    Line(Vec<u8>),
    /// A line over the limit was dropped.
    TooLong,
}

impl LineFramer {
    /// A framer for lines of at most `max` bytes (line end included).
    pub fn new(max: usize) -> LineFramer {
        LineFramer { buf: Vec::new(), max, discarding: false }
    }

    /// Appends received bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        let _ = bytes;
        todo!()
    }

    /// The next event, `None` if more bytes are needed.
    pub fn next_event(&mut self) -> Option<LineEvent> {
        todo!()
    }

    /// Bytes currently buffered (for memory accounting).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Releases buffer capacity when idle, so idle sessions stay small.
    pub fn shrink(&mut self) {
        if self.buf.is_empty() {
            self.buf = Vec::new();
        }
    }
}
