//! `YYYYMMDDHHMMSS` UTC timestamps (MFMT, MDTM, SITE UTIME) to and from Unix seconds.
//!
//! The proleptic Gregorian day arithmetic is Howard Hinnant's `days_from_civil` /
//! `civil_from_days`, so proto needs no date crate.

/// Parses exactly 14 digits `YYYYMMDDHHMMSS` (UTC) into seconds since the Unix epoch.
///
/// A fractional part `.ddd` (as the MFMT draft allows) is accepted and dropped. Fields out of
/// range (month 13, February 30, hour 24, second 60) are refused.
pub(crate) fn parse_timestamp(s: &str) -> Option<i64> {
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
            .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'))
    };
    let (year, month, day) = (num(0, 4), num(4, 6), num(6, 8));
    let (hour, minute, second) = (num(8, 10), num(10, 12), num(12, 14));
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Formats seconds since the Unix epoch as `YYYYMMDDHHMMSS` (UTC); `None` outside years 0-9999.
pub(crate) fn format_timestamp(secs: i64) -> Option<String> {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        return None;
    }
    Some(format!(
        "{year:04}{month:02}{day:02}{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    ))
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days.saturating_add(719_468);
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
