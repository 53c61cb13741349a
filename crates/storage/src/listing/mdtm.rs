//! UTC civil time for MDTM, MFMT and `Modify=`: `YYYYMMDDHHMMSS`, without a time library.

/// Seconds per day.
const DAY: i64 = 86_400;

/// A broken-down UTC time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Civil {
    pub(crate) year: i64,
    pub(crate) month: u32,
    pub(crate) day: u32,
    pub(crate) hour: u32,
    pub(crate) minute: u32,
    pub(crate) second: u32,
}

impl Civil {
    /// Breaks seconds since the epoch down into UTC fields.
    pub(crate) fn from_unix(t: i64) -> Civil {
        let days = t.div_euclid(DAY);
        let secs = t.rem_euclid(DAY);
        let (year, month, day) = civil_from_days(days);
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

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 to (year, month, day).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Howard Hinnant's `days_from_civil`: (year, month, day) to days since 1970-01-01.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days in `month` of `year` (proleptic Gregorian).
fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

/// `YYYYMMDDHHMMSS` (UTC) for MDTM and `Modify=`.
pub fn format_mdtm(mtime: i64) -> String {
    let c = Civil::from_unix(mtime);
    format!(
        "{:04}{:02}{:02}{:02}{:02}{:02}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

/// Parses `YYYYMMDDHHMMSS[.fff]` (UTC) into seconds since the epoch.
///
/// The fraction is accepted and dropped; out-of-range fields (month 13, February 30, hour 24,
/// second 60) are refused.
pub fn parse_mdtm(s: &str) -> Option<i64> {
    let (digits, fraction) = match s.split_once('.') {
        Some((d, f)) => (d, Some(f)),
        None => (s, None),
    };
    if digits.len() != 14 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if let Some(f) = fraction {
        if f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
    }
    let field = |range: std::ops::Range<usize>| digits.get(range)?.parse::<u32>().ok();
    let year = i64::from(field(0..4)?);
    let month = field(4..6)?;
    let day = field(6..8)?;
    let (hour, minute, second) = (field(8..10)?, field(10..12)?, field(12..14)?);
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let secs = i64::from(hour * 3600 + minute * 60 + second);
    Some(days_from_civil(year, month, day) * DAY + secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_instants_format() {
        assert_eq!(format_mdtm(0), "19700101000000");
        assert_eq!(format_mdtm(951_782_400), "20000229000000");
        assert_eq!(format_mdtm(1_795_361_400), "20261122153000");
        assert_eq!(format_mdtm(-1), "19691231235959");
    }

    #[test]
    fn parse_accepts_fraction_and_refuses_bad_fields() {
        assert_eq!(parse_mdtm("20261122153000"), Some(1_795_361_400));
        assert_eq!(parse_mdtm("20261122153000.123"), Some(1_795_361_400));
        assert_eq!(parse_mdtm("20000229000000"), Some(951_782_400));
        for bad in [
            "",
            "2026112215300",
            "202611221530000",
            "2026112215300a",
            "20261322153000",
            "20261100153000",
            "20250229000000",
            "20261122243000",
            "20261122156000",
            "20261122153060",
            "20261122153000.",
            "20261122153000.1x",
            "+0261122153000",
        ] {
            assert_eq!(parse_mdtm(bad), None, "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(t in 0i64..253_402_300_800) {
            prop_assert_eq!(parse_mdtm(&format_mdtm(t)), Some(t));
        }
    }
}
