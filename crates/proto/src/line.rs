//! Bounded line framing for the control channel (server side).

mod buffer;

pub(crate) use buffer::LineBuffer;

/// Splits a byte stream into CRLF (or bare LF) terminated lines of bounded length.
///
/// A line longer than the limit is reported once as [`LineEvent::TooLong`] and its bytes are
/// discarded up to the next line end, so one bad line cannot grow memory or desynchronise the
/// session.
#[derive(Debug)]
pub struct LineFramer {
    lines: LineBuffer,
    max: usize,
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
        LineFramer {
            lines: LineBuffer::default(),
            max,
        }
    }

    /// Appends received bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.lines.feed(bytes);
    }

    /// The next event, `None` if more bytes are needed.
    pub fn next_event(&mut self) -> Option<LineEvent> {
        if self.lines.is_discarding() {
            return None;
        }
        let avail = self.lines.available();
        match avail.iter().position(|&b| b == b'\n') {
            Some(lf) => {
                let line = self.lines.take_line(lf);
                if lf + 1 > self.max {
                    return Some(LineEvent::TooLong);
                }
                Some(LineEvent::Line(line.to_vec()))
            }
            // Even if the LF came next, this line would be over the limit.
            None if avail.len() >= self.max => {
                self.lines.discard_line();
                Some(LineEvent::TooLong)
            }
            None => None,
        }
    }

    /// Bytes currently buffered (for memory accounting).
    pub fn buffered(&self) -> usize {
        self.lines.available().len()
    }

    /// Releases buffer capacity when idle, so idle sessions stay small.
    pub fn shrink(&mut self) {
        self.lines.shrink();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn drain(framer: &mut LineFramer) -> Vec<LineEvent> {
        std::iter::from_fn(|| framer.next_event()).collect()
    }

    fn line(s: &str) -> LineEvent {
        LineEvent::Line(s.as_bytes().to_vec())
    }

    #[test]
    fn crlf_and_bare_lf_lines_lose_their_line_end() {
        let mut framer = LineFramer::new(100);
        framer.feed(b"USER a\r\nPASS b\nNOOP\r\n");
        assert_eq!(
            drain(&mut framer),
            vec![line("USER a"), line("PASS b"), line("NOOP")]
        );
        assert_eq!(framer.buffered(), 0);
    }

    #[test]
    fn partial_line_waits_for_its_end() {
        let mut framer = LineFramer::new(100);
        framer.feed(b"RETR my ");
        assert_eq!(framer.next_event(), None);
        framer.feed(b"file\r");
        assert_eq!(framer.next_event(), None);
        framer.feed(b"\n");
        assert_eq!(framer.next_event(), Some(line("RETR my file")));
    }

    #[test]
    fn line_of_exactly_max_bytes_is_accepted() {
        let mut framer = LineFramer::new(8);
        framer.feed(b"ABCDEF\r\nABCDEFG\r\nX\n");
        assert_eq!(
            drain(&mut framer),
            vec![line("ABCDEF"), LineEvent::TooLong, line("X")]
        );
    }

    #[test]
    fn over_long_unterminated_line_is_reported_once_and_discarded() {
        let mut framer = LineFramer::new(8);
        framer.feed(b"0123456789");
        assert_eq!(framer.next_event(), Some(LineEvent::TooLong));
        assert_eq!(framer.next_event(), None);
        framer.feed(&[b'x'; 10_000]);
        assert_eq!(framer.buffered(), 0, "discarded bytes are not kept");
        assert_eq!(framer.next_event(), None);
        framer.feed(b"yyy\r\nNOOP\r\n");
        assert_eq!(drain(&mut framer), vec![line("NOOP")]);
    }

    #[test]
    fn shrink_releases_capacity_when_idle() {
        let mut framer = LineFramer::new(1 << 20);
        framer.feed(&[b'a'; 4096]);
        framer.feed(b"\n");
        assert!(matches!(framer.next_event(), Some(LineEvent::Line(_))));
        framer.shrink();
        assert_eq!(framer.buffered(), 0);
        assert_eq!(framer.lines.capacity(), 0);
    }

    proptest! {
        #[test]
        fn random_splits_give_the_same_lines(
            lines in proptest::collection::vec("[a-zA-Z0-9 ]{0,20}", 0..10),
            cuts in proptest::collection::vec(0usize..300, 0..6),
        ) {
            let mut wire = Vec::new();
            for l in &lines {
                wire.extend_from_slice(l.as_bytes());
                wire.extend_from_slice(b"\r\n");
            }
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(wire.len())).collect();
            cuts.sort_unstable();
            let mut framer = LineFramer::new(64);
            let mut events = Vec::new();
            let mut prev = 0;
            for cut in cuts.into_iter().chain([wire.len()]) {
                framer.feed(&wire[prev..cut]);
                prev = cut;
                events.extend(drain(&mut framer));
            }
            let expected: Vec<LineEvent> = lines.iter().map(|l| line(l)).collect();
            prop_assert_eq!(events, expected);
        }
    }
}
