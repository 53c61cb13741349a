//! UTC civil time: `YYYYMMDDHHMMSS` timestamps (MFMT, MDTM, `Modify=`, SITE UTIME) and broken-down
//! fields, to and from Unix seconds.
//!
//! The proleptic Gregorian day arithmetic is Howard Hinnant's `days_from_civil` /
//! `civil_from_days`, so no crate of the workspace needs a date crate.

use std::fmt;

/// Seconds per day.
const DAY: i64 = 86_400;

/// A broken-down UTC time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    /// Year of the proleptic Gregorian calendar (may be negative or above 9999).
    pub year: i64,
    /// Month, 1-12.
    pub month: u32,
    /// Day of the month, 1-31.
    pub day: u32,
    /// Hour, 0-23.
    pub hour: u32,
    /// Minute, 0-59.
    pub minute: u32,
    /// Second, 0-59.
    pub second: u32,
}

impl Civil {
    /// Breaks seconds since the epoch down into UTC fields.
    pub fn from_unix(t: i64) -> Civil {
        let secs = t.rem_euclid(DAY);
        let (year, month, day) = civil_from_days(t.div_euclid(DAY));
        // secs is in 0..86400, so each field fits a u32.
        let secs = secs as u32;
        Civil {
            year,
            month,
            day,
            hour: secs / 3600,
            minute: secs / 60 % 60,
            second: secs % 60,
        }
    }
}

/// `YYYYMMDDHHMMSS`; a year outside 0-9999 is written as it is (sign, more digits).
impl fmt::Display for Civil {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04}{:02}{:02}{:02}{:02}{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// Parses exactly 14 digits `YYYYMMDDHHMMSS` (UTC) into seconds since the Unix epoch.
///
/// A fractional part `.ddd` (as the MFMT draft allows) is accepted and dropped. Fields out of
/// range (month 13, February 30, hour 24, second 60) are refused.
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let digits = match s.split_once('.') {
        Some((whole, frac)) if !frac.is_empty() && frac.bytes().all(|b| b.is_ascii_digit()) => {
            whole
        }
        Some(_) => return None,
        None => s,
    };
    let b = digits.as_bytes();
    if b.len() != 14 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let num = |from: usize, to: usize| {
        b[from..to]
            .iter()
            .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'))
    };
    let (year, month, day) = (i64::from(num(0, 4)), num(4, 6), num(6, 8));
    let (hour, minute, second) = (num(8, 10), num(10, 12), num(12, 14));
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let secs = i64::from(hour * 3600 + minute * 60 + second);
    Some(days_from_civil(year, month, day) * DAY + secs)
}

/// Formats seconds since the Unix epoch as `YYYYMMDDHHMMSS` (UTC); `None` outside years 0-9999.
pub fn format_timestamp(secs: i64) -> Option<String> {
    let c = Civil::from_unix(secs);
    (0..=9999).contains(&c.year).then(|| c.to_string())
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// Days in `month` of `year` (proleptic Gregorian).
fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Howard Hinnant's `days_from_civil`: (year, month, day) to days since 1970-01-01.
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(month) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 to (year, month, day).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days.saturating_add(719_468);
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    // doy is in 0..366 and mp in 0..12, so day and month fit a u32.
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `YYYYMMDDHHMMSS`, or the raw seconds when the year does not fit four digits.
pub(crate) fn write_timestamp(f: &mut std::fmt::Formatter<'_>, secs: i64) -> std::fmt::Result {
    match format_timestamp(secs) {
        Some(text) => f.write_str(&text),
        None => write!(f, "{secs}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn epoch_and_known_dates_convert() {
        assert_eq!(parse_timestamp("19700101000000"), Some(0));
        assert_eq!(parse_timestamp("20000229123456"), Some(951_827_696));
        assert_eq!(parse_timestamp("20240101000000"), Some(1_704_067_200));
        assert_eq!(parse_timestamp("19691231235959"), Some(-1));
        assert_eq!(
            format_timestamp(951_827_696).as_deref(),
            Some("20000229123456")
        );
        assert_eq!(format_timestamp(-1).as_deref(), Some("19691231235959"));
    }

    #[test]
    fn known_instants_break_down() {
        let c = Civil::from_unix(1_795_361_400);
        assert_eq!(
            (c.year, c.month, c.day, c.hour, c.minute, c.second),
            (2026, 11, 22, 15, 30, 0)
        );
        assert_eq!(Civil::from_unix(0).to_string(), "19700101000000");
        assert_eq!(Civil::from_unix(951_782_400).to_string(), "20000229000000");
        assert_eq!(Civil::from_unix(-1).to_string(), "19691231235959");
    }

    #[test]
    fn years_outside_four_digits_still_break_down() {
        assert_eq!(Civil::from_unix(253_402_300_800).year, 10_000);
        assert_eq!(Civil::from_unix(-62_167_219_201).year, -1);
    }

    #[test]
    fn fractional_seconds_are_dropped() {
        assert_eq!(parse_timestamp("19700101000001.250"), Some(1));
        assert_eq!(parse_timestamp("19700101000001."), None);
    }

    #[test]
    fn out_of_range_fields_are_refused() {
        for bad in [
            "19701301000000",
            "19700001000000",
            "19700100000000",
            "19700230000000",
            "19000229000000",
            "19700101240000",
            "19700101006000",
            "19700101000060",
            "1970010100000",
            "197001010000000",
            "1970010100000a",
            "+9700101000000",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn years_outside_four_digits_do_not_format() {
        assert_eq!(format_timestamp(i64::MAX), None);
        assert_eq!(format_timestamp(i64::MIN), None);
        assert_eq!(format_timestamp(253_402_300_800), None);
    }

    proptest! {
        #[test]
        fn timestamps_round_trip(secs in -62_167_219_200i64..253_402_300_800i64) {
            let text = format_timestamp(secs).expect("year in range");
            prop_assert_eq!(parse_timestamp(&text), Some(secs));
        }
    }
}
