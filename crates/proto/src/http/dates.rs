//! The two date forms WebDAV clients read: RFC 1123 (`getlastmodified`, `Last-Modified`) and
//! ISO 8601 (`creationdate`).

use crate::civil::{days_from_civil, Civil};

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// `Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110's IMF-fixdate).
pub fn http_date(unix: i64) -> String {
    let c = Civil::from_unix(unix);
    let weekday = DAYS[unix.div_euclid(86_400).rem_euclid(7) as usize];
    let month = MONTHS[(c.month as usize).saturating_sub(1).min(11)];
    format!(
        "{weekday}, {:02} {month} {:04} {:02}:{:02}:{:02} GMT",
        c.day, c.year, c.hour, c.minute, c.second
    )
}

/// `1994-11-06T08:49:37Z`.
pub fn iso8601(unix: i64) -> String {
    let c = Civil::from_unix(unix);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

/// Parses an IMF-fixdate (the only form a server must generate; clients send it in
/// `If-Modified-Since`). Other forms give `None`, and the condition is then ignored.
pub fn parse_http_date(s: &str) -> Option<i64> {
    let s = s.trim();
    let (_, rest) = s.split_once(", ")?;
    let mut parts = rest.split(' ');
    let day: u32 = parts.next()?.parse().ok()?;
    let month_name = parts.next()?;
    let month = MONTHS.iter().position(|m| *m == month_name)? as u32 + 1;
    let year: i64 = parts.next()?.parse().ok()?;
    let mut hms = parts.next()?.split(':');
    let h: i64 = hms.next()?.parse().ok()?;
    let m: i64 = hms.next()?.parse().ok()?;
    let sec: i64 = hms.next()?.parse().ok()?;
    if parts.next()? != "GMT" || parts.next().is_some() || !(1..=31).contains(&day) {
        return None;
    }
    if h > 23 || m > 59 || sec > 60 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + sec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_written_as_rfc_9110_and_iso_8601_say() {
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(iso8601(784_111_777), "1994-11-06T08:49:37Z");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn an_http_date_parses_back() {
        for t in [0, 784_111_777, 1_795_361_400] {
            assert_eq!(parse_http_date(&http_date(t)), Some(t));
        }
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        assert_eq!(parse_http_date("garbage"), None);
    }
}
