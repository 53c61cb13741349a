//! MDTM and `Modify=` timestamps: `YYYYMMDDHHMMSS` (UTC), on `ferry_proto::civil`.

use ferry_proto::civil::{parse_timestamp, Civil};

/// `YYYYMMDDHHMMSS` (UTC) for MDTM and `Modify=`.
pub fn format_mdtm(mtime: i64) -> String {
    Civil::from_unix(mtime).to_string()
}

/// Parses `YYYYMMDDHHMMSS[.fff]` (UTC) into seconds since the epoch.
///
/// The fraction is accepted and dropped; out-of-range fields (month 13, February 30, hour 24,
/// second 60) are refused.
pub fn parse_mdtm(s: &str) -> Option<i64> {
    parse_timestamp(s)
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
