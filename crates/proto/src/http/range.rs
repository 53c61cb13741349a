//! `Range: bytes=…` (RFC 9110 §14) against a file of known size.

/// Most parts one answer carries; more (or overlapping ones) are merged, then spanned by one.
pub const MAX_PARTS: usize = 64;
/// Longest `Range` value read; a longer one is ignored (the whole file is sent).
pub const MAX_HEADER: usize = 16 * 1024;

/// One satisfiable range, `start..=end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive).
    pub end: u64,
}

impl ByteRange {
    /// Bytes in the range.
    pub fn len(&self) -> u64 {
        self.end - self.start + 1
    }

    /// Never: a range holds at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// `bytes a-b/size`, for `Content-Range`.
    pub fn content_range(&self, size: u64) -> String {
        format!("bytes {}-{}/{size}", self.start, self.end)
    }
}

/// What a `Range` header asks of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeRequest {
    /// The whole file (no header, another unit, or one that does not parse: ignored, as the
    /// RFC allows).
    Full,
    /// These parts, in the order asked, none overlapping (206).
    Parts(Vec<ByteRange>),
    /// No part lies within the file (416).
    Unsatisfiable,
}

/// Reads `header` for a file of `size` bytes.
pub fn parse(header: &str, size: u64) -> RangeRequest {
    if header.len() > MAX_HEADER {
        return RangeRequest::Full;
    }
    let Some(specs) = header
        .trim()
        .strip_prefix("bytes=")
        .or_else(|| header.trim().strip_prefix("BYTES="))
    else {
        return RangeRequest::Full;
    };
    let mut parts = Vec::new();
    for spec in specs.split(',') {
        let spec = spec.trim();
        if spec.is_empty() {
            continue;
        }
        let Some((first, last)) = spec.split_once('-') else {
            return RangeRequest::Full;
        };
        let (first, last) = (first.trim(), last.trim());
        let range = if first.is_empty() {
            // Suffix: the last `n` bytes.
            let Ok(n) = last.parse::<u64>() else {
                return RangeRequest::Full;
            };
            if n == 0 || size == 0 {
                None
            } else {
                Some(ByteRange {
                    start: size.saturating_sub(n),
                    end: size - 1,
                })
            }
        } else {
            let Ok(start) = first.parse::<u64>() else {
                return RangeRequest::Full;
            };
            let end = if last.is_empty() {
                u64::MAX
            } else {
                match last.parse::<u64>() {
                    Ok(e) if e >= start => e,
                    _ => return RangeRequest::Full,
                }
            };
            (start < size).then(|| ByteRange {
                start,
                end: end.min(size - 1),
            })
        };
        parts.extend(range);
    }
    if parts.is_empty() {
        return if specs.trim().is_empty() {
            RangeRequest::Full
        } else {
            RangeRequest::Unsatisfiable
        };
    }
    RangeRequest::Parts(bounded(parts))
}

/// Overlapping or touching parts merged (in order of their starts); past [`MAX_PARTS`], one
/// part from the first start to the last end. Parts that neither overlap nor exceed the
/// bound keep the order asked.
fn bounded(parts: Vec<ByteRange>) -> Vec<ByteRange> {
    let mut sorted = parts.clone();
    sorted.sort_by_key(|r| r.start);
    let overlaps = sorted
        .windows(2)
        .any(|w| w[1].start <= w[0].end.saturating_add(1));
    if !overlaps && parts.len() <= MAX_PARTS {
        return parts;
    }
    let mut merged: Vec<ByteRange> = Vec::new();
    for r in sorted {
        match merged.last_mut() {
            Some(last) if r.start <= last.end.saturating_add(1) => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    if merged.len() > MAX_PARTS {
        let start = merged[0].start;
        let end = merged.iter().map(|r| r.end).max().unwrap_or(start);
        return vec![ByteRange { start, end }];
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parts(v: &[(u64, u64)]) -> RangeRequest {
        RangeRequest::Parts(
            v.iter()
                .map(|&(start, end)| ByteRange { start, end })
                .collect(),
        )
    }

    #[test]
    fn ranges_are_read_as_rfc_9110_writes_them() {
        assert_eq!(parse("bytes=0-499", 1000), parts(&[(0, 499)]));
        assert_eq!(parse("bytes=500-", 1000), parts(&[(500, 999)]));
        assert_eq!(parse("bytes=-200", 1000), parts(&[(800, 999)]));
        assert_eq!(parse("bytes=-2000", 1000), parts(&[(0, 999)]));
        assert_eq!(parse("bytes=900-2000", 1000), parts(&[(900, 999)]));
        assert_eq!(parse("bytes=0-1, 10-19", 1000), parts(&[(0, 1), (10, 19)]));
        assert_eq!(parse("bytes=10-19,0-1", 1000), parts(&[(10, 19), (0, 1)]));
    }

    #[test]
    fn ranges_outside_the_file_are_unsatisfiable_and_bad_syntax_is_ignored() {
        assert_eq!(parse("bytes=1000-", 1000), RangeRequest::Unsatisfiable);
        assert_eq!(parse("bytes=-0", 1000), RangeRequest::Unsatisfiable);
        assert_eq!(parse("bytes=0-0", 0), RangeRequest::Unsatisfiable);
        assert_eq!(parse("bytes=5-1", 1000), RangeRequest::Full);
        assert_eq!(parse("items=0-1", 1000), RangeRequest::Full);
        assert_eq!(parse("bytes=x-1", 1000), RangeRequest::Full);
        assert_eq!(parse("bytes=", 1000), RangeRequest::Full);
    }

    #[test]
    fn thousands_of_overlapping_ranges_become_one_part() {
        let header = format!("bytes={}", vec!["0-99"; 3000].join(","));
        assert_eq!(parse(&header, 1000), parts(&[(0, 99)]));
        let spread: Vec<String> = (0..1000)
            .map(|i| format!("{}-{}", i * 10, i * 10))
            .collect();
        assert_eq!(
            parse(&format!("bytes={}", spread.join(",")), 100_000),
            parts(&[(0, 9990)])
        );
        let huge = format!("bytes={}", vec!["0-1"; 10_000].join(","));
        assert_eq!(parse(&huge, 1000), RangeRequest::Full);
    }

    proptest! {
        #[test]
        fn every_part_lies_within_the_file_and_parts_are_bounded(header in "bytes=[0-9, -]{0,200}", size in 0u64..10_000) {
            if let RangeRequest::Parts(p) = parse(&header, size) {
                prop_assert!(!p.is_empty() && p.len() <= MAX_PARTS);
                for r in p {
                    prop_assert!(r.start <= r.end && r.end < size);
                }
            }
        }
    }
}
