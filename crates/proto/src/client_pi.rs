//! The client's end of the control channel as a state machine: commands go in and come out as
//! wire bytes, received bytes go in and come out as replies, each paired with the command it
//! answers. No sockets: `ferry_client::ControlClient` runs it on a connection, and protocol
//! tests run it against the server PI in memory.

use std::collections::VecDeque;

use crate::command::Command;
use crate::reply::{Reply, ReplyError, ReplyParser};

/// A reply, with the command it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The command (as sent; passwords included), `None` for an unsolicited reply: the banner,
    /// a 421 before closing.
    pub to: Option<String>,
    /// The reply.
    pub reply: Reply,
    /// Whether it is the command's last reply (not 1xx).
    pub last: bool,
}

/// The client PI of one control connection.
#[derive(Debug)]
pub struct ClientPi {
    parser: ReplyParser,
    /// Commands sent and not yet answered with a final reply, oldest first; the banner counts
    /// as one (`None`) until it has come.
    in_flight: VecDeque<Option<String>>,
    transmit: Vec<u8>,
}

impl Default for ClientPi {
    fn default() -> Self {
        ClientPi::new()
    }
}

impl ClientPi {
    /// A PI that has connected and waits for the server's banner.
    pub fn new() -> ClientPi {
        ClientPi {
            parser: ReplyParser::new(),
            in_flight: VecDeque::from([None]),
            transmit: Vec::new(),
        }
    }

    /// Queues `cmd`, formatted in its canonical form.
    pub fn send(&mut self, cmd: &Command) {
        self.send_line(&cmd.to_string());
    }

    /// Queues a line as it is (what a person typed, or a test's garbage). A CR or LF in it
    /// would split it into two commands on the wire, so both become spaces.
    pub fn send_line(&mut self, line: &str) {
        let line = line.replace(['\r', '\n'], " ");
        self.transmit.extend_from_slice(line.as_bytes());
        self.transmit.extend_from_slice(b"\r\n");
        self.in_flight.push_back(Some(line));
    }

    /// The bytes to write to the server, taken out.
    pub fn poll_transmit(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.transmit)
    }

    /// Bytes received from the server.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.parser.feed(bytes);
    }

    /// The next complete reply, paired with its command; `Ok(None)` until more bytes come.
    pub fn poll_reply(&mut self) -> Result<Option<Answer>, ReplyError> {
        let Some(reply) = self.parser.next_reply()? else {
            return Ok(None);
        };
        let last = !reply.is_preliminary();
        // A 421 may come at any time: it answers nothing that was sent.
        let unsolicited = reply.code == 421 && self.in_flight.front().is_some_and(Option::is_some);
        let to = if unsolicited {
            None
        } else if last {
            self.in_flight.pop_front().flatten()
        } else {
            self.in_flight.front().cloned().flatten()
        };
        Ok(Some(Answer { to, reply, last }))
    }

    /// Whether bytes are waiting beyond the replies taken so far: after `234` to `AUTH TLS`
    /// there must be none, or someone on the path has put replies in before the handshake.
    pub fn has_buffered_input(&self) -> bool {
        self.parser.has_buffered()
    }

    /// Commands sent and not answered yet.
    pub fn outstanding(&self) -> usize {
        self.in_flight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{TransferMode, TransferType};

    #[test]
    fn replies_pair_with_commands_in_order_and_preliminary_ones_do_not_end_them() {
        let mut pi = ClientPi::new();
        pi.feed(b"220 hi\r\n");
        let banner = pi.poll_reply().unwrap().unwrap();
        assert_eq!((banner.to, banner.last), (None, true));
        pi.send(&Command::Type(TransferType::Image));
        pi.send(&Command::Mode(TransferMode::Extended));
        pi.send(&Command::Retr("a b".into()));
        assert_eq!(pi.poll_transmit(), b"TYPE I\r\nMODE E\r\nRETR a b\r\n");
        pi.feed(b"200 ok\r\n200 ok\r\n150 go\r\n226 done\r\n");
        let got: Vec<_> = std::iter::from_fn(|| pi.poll_reply().unwrap())
            .map(|a| (a.to.unwrap_or_default(), a.reply.code, a.last))
            .collect();
        assert_eq!(
            got,
            [
                ("TYPE I".to_string(), 200, true),
                ("MODE E".to_string(), 200, true),
                ("RETR a b".to_string(), 150, false),
                ("RETR a b".to_string(), 226, true),
            ]
        );
        assert_eq!(pi.outstanding(), 0);
    }

    #[test]
    fn a_421_answers_nothing_and_a_line_cannot_smuggle_a_second_command() {
        let mut pi = ClientPi::new();
        pi.feed(b"220 hi\r\n");
        pi.poll_reply().unwrap();
        pi.send_line("NOOP\r\nDELE x");
        assert_eq!(pi.poll_transmit(), b"NOOP  DELE x\r\n");
        pi.feed(b"421 bye\r\n");
        let a = pi.poll_reply().unwrap().unwrap();
        assert_eq!((a.to, a.reply.code), (None, 421));
        assert_eq!(pi.outstanding(), 1);
    }
}
