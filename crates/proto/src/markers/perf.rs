//! `112-Perf Marker` multi-line replies.

use crate::ranges::parse_u64;
use crate::reply::Reply;

/// One performance sample of one stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerfMarker {
    /// Unix time in tenths of a second (formatted `sec.tenth`).
    pub timestamp_tenths: u64,
    /// Index of the stripe this sample is for.
    pub stripe_index: u32,
    /// Bytes the stripe has moved so far.
    pub stripe_bytes: u64,
    /// Number of stripes in the transfer.
    pub total_stripes: u32,
}

impl PerfMarker {
    /// The 112 multi-line reply in the Globus server's exact format (ends `112 End.`).
    pub fn to_reply(&self) -> Reply {
        Reply::multi(
            112,
            vec![
                "Perf Marker".to_owned(),
                format!(
                    " Timestamp: {}.{}",
                    self.timestamp_tenths / 10,
                    self.timestamp_tenths % 10
                ),
                format!(" Stripe Index: {}", self.stripe_index),
                format!(" Stripe Bytes Transferred: {}", self.stripe_bytes),
                format!(" Total Stripe Count: {}", self.total_stripes),
                "End.".to_owned(),
            ],
        )
    }

    /// Reads a 112 reply (accepts `112 End` with or without the period); `None` if malformed.
    ///
    /// The four fields may come in any order; unknown fields are ignored. A timestamp with
    /// more than one fractional digit is truncated to tenths.
    pub fn from_reply(reply: &Reply) -> Option<PerfMarker> {
        let [first, fields @ .., last] = reply.lines.as_slice() else {
            return None;
        };
        if reply.code != 112 || first.trim() != "Perf Marker" {
            return None;
        }
        if !matches!(last.trim(), "End." | "End") {
            return None;
        }
        let (mut timestamp, mut index, mut bytes, mut total) = (None, None, None, None);
        for field in fields {
            let Some((key, value)) = field.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key.trim() {
                "Timestamp" => timestamp = Some(parse_tenths(value)?),
                "Stripe Index" => index = Some(value.parse::<u32>().ok()?),
                "Stripe Bytes Transferred" => bytes = Some(parse_u64(value)?),
                "Total Stripe Count" => total = Some(value.parse::<u32>().ok()?),
                _ => {}
            }
        }
        Some(PerfMarker {
            timestamp_tenths: timestamp?,
            stripe_index: index?,
            stripe_bytes: bytes?,
            total_stripes: total?,
        })
    }
}

/// `sec` or `sec.fraction` to tenths of a second.
/// The field a ferry server adds to its perf markers: the round trip its kernel measured on the
/// transfer's data connections, in microseconds (on each connection the least it saw, from the
/// handshake on; the largest over the connections).
/// A client judging the streams of a third-party transfer needs the round trip between the two
/// servers, which neither control channel shows. Globus' marker readers take fields by name
/// and pass over this one.
const DATA_RTT: &str = "Data Channel RTT";

/// The [`DATA_RTT`] line for a perf marker, `us` microseconds.
pub fn data_rtt_line(us: u32) -> String {
    format!(" {DATA_RTT}: {us} us")
}

/// The data connections' round trip (µs) a perf marker carries, if it carries one.
pub fn data_rtt_in(reply: &Reply) -> Option<u32> {
    if reply.code != 112 {
        return None;
    }
    reply.lines.iter().find_map(|l| data_rtt_of_line(l))
}

/// The round trip (µs) of one [`data_rtt_line`], or `None` for any other line.
fn data_rtt_of_line(line: &str) -> Option<u32> {
    let (key, value) = line.split_once(':')?;
    if key.trim() != DATA_RTT {
        return None;
    }
    value.trim().strip_suffix("us")?.trim().parse().ok()
}

fn parse_tenths(value: &str) -> Option<u64> {
    let (secs, frac) = value.split_once('.').unwrap_or((value, "0"));
    let tenth = match frac.as_bytes() {
        [d, rest @ ..] if d.is_ascii_digit() && rest.iter().all(u8::is_ascii_digit) => d - b'0',
        _ => return None,
    };
    parse_u64(secs)?
        .checked_mul(10)?
        .checked_add(u64::from(tenth))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::ReplyParser;

    fn sample() -> PerfMarker {
        PerfMarker {
            timestamp_tenths: 17_000_000_123,
            stripe_index: 0,
            stripe_bytes: 1_048_576,
            total_stripes: 1,
        }
    }

    #[test]
    fn perf_marker_has_the_globus_server_format() {
        let bytes = sample().to_reply().to_bytes();
        let text = String::from_utf8(bytes).expect("ascii");
        assert_eq!(
            text,
            "112-Perf Marker\r\n Timestamp: 1700000012.3\r\n Stripe Index: 0\r\n \
             Stripe Bytes Transferred: 1048576\r\n Total Stripe Count: 1\r\n112 End.\r\n"
        );
    }

    #[test]
    fn perf_marker_round_trips_through_the_reply_parser() {
        let mut parser = ReplyParser::new();
        parser.feed(&sample().to_reply().to_bytes());
        let reply = parser.next_reply().expect("valid").expect("complete");
        assert_eq!(PerfMarker::from_reply(&reply), Some(sample()));
    }

    #[test]
    fn end_without_period_and_long_fraction_are_read() {
        let mut parser = ReplyParser::new();
        parser.feed(
            b"112-Perf Marker\r\n Timestamp:  1700000012.345\r\n Stripe Index: 2\r\n \
              Stripe Bytes Transferred: 7\r\n Total Stripe Count: 4\r\n112 End\r\n",
        );
        let reply = parser.next_reply().expect("valid").expect("complete");
        let marker = PerfMarker::from_reply(&reply).expect("perf marker");
        assert_eq!(marker.timestamp_tenths, 17_000_000_123);
        assert_eq!(
            (
                marker.stripe_index,
                marker.stripe_bytes,
                marker.total_stripes
            ),
            (2, 7, 4)
        );
    }

    #[test]
    fn a_marker_with_the_data_round_trip_is_still_a_perf_marker_and_says_it() {
        let mut reply = sample().to_reply();
        let end = reply.lines.len() - 1;
        reply.lines.insert(end, data_rtt_line(63_100));
        let mut parser = ReplyParser::new();
        parser.feed(&reply.to_bytes());
        let read = parser.next_reply().expect("valid").expect("complete");
        assert_eq!(PerfMarker::from_reply(&read), Some(sample()));
        assert_eq!(data_rtt_in(&read), Some(63_100));
        assert_eq!(data_rtt_in(&sample().to_reply()), None);
        reply.lines[end] = " Data Channel RTT: soon".to_owned();
        assert_eq!(data_rtt_in(&reply), None);
        reply.lines[end] = data_rtt_line(5);
        reply.code = 111;
        assert_eq!(data_rtt_in(&reply), None, "only a perf marker carries it");
    }

    #[test]
    fn perf_marker_missing_a_field_is_refused() {
        let mut reply = sample().to_reply();
        reply.lines.remove(2);
        assert_eq!(PerfMarker::from_reply(&reply), None);
        let mut reply = sample().to_reply();
        reply.lines[1] = " Timestamp: soon".to_owned();
        assert_eq!(PerfMarker::from_reply(&reply), None);
        assert_eq!(
            PerfMarker::from_reply(&Reply::new(112, "Perf Marker")),
            None
        );
    }
}
