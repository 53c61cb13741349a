//! The received bytes a control channel reader has not taken out as lines yet.

/// Bytes received and not yet taken out as lines, and whether the rest of an over-long line
/// is being dropped up to its LF (so one bad line cannot grow memory). Shared by the server's
/// [`super::LineFramer`] and the client's [`crate::reply::ReplyParser`].
#[derive(Debug, Default)]
pub(crate) struct LineBuffer {
    buf: Vec<u8>,
    /// Bytes of `buf` already taken out.
    start: usize,
    /// Dropping the rest of an over-long line up to its LF.
    discarding: bool,
}

impl LineBuffer {
    /// Appends received bytes; while discarding, only those after the next LF.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
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

    /// The bytes not taken out yet.
    pub(crate) fn available(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Whether the rest of an over-long line is being dropped.
    pub(crate) fn is_discarding(&self) -> bool {
        self.discarding
    }

    /// Takes out the next `len` bytes and the LF after them, and gives them back without the
    /// LF and a CR before it.
    pub(crate) fn take_line(&mut self, len: usize) -> &[u8] {
        let line_start = self.start;
        self.start += len + 1;
        let line = &self.buf[line_start..line_start + len];
        match line {
            [rest @ .., b'\r'] => rest,
            _ => line,
        }
    }

    /// Drops the line in progress, and its rest when it comes, up to its LF.
    pub(crate) fn discard_line(&mut self) {
        self.buf.clear();
        self.start = 0;
        self.discarding = true;
    }

    /// Releases the buffer's capacity once everything was taken out.
    pub(crate) fn shrink(&mut self) {
        if self.start == self.buf.len() {
            self.buf = Vec::new();
            self.start = 0;
        }
    }

    /// The buffer's capacity, to check that [`LineBuffer::shrink`] released it.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.buf.capacity()
    }
}
