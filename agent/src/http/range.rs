//! HTTP `Range: bytes=...` parsing for one range (RFC 9110 §14). Pure. Multiple ranges are answered with the
//! whole representation, which the RFC permits.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// Serve everything with 200.
    Full,
    /// Serve `[start, end]` inclusive with 206.
    Partial { start: u64, end: u64 },
    /// 416: nothing of the representation is in range.
    Unsatisfiable,
}

pub fn parse(header: Option<&str>, size: u64) -> ByteRange {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return ByteRange::Full;
    };
    if spec.contains(',') {
        return ByteRange::Full;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return ByteRange::Full;
    };
    let (a, b) = (a.trim(), b.trim());
    let parsed = match (a.is_empty(), b.is_empty()) {
        // bytes=-N: the last N bytes
        (true, false) => b.parse::<u64>().ok().map(|n| {
            if n == 0 || size == 0 {
                None
            } else {
                Some((size.saturating_sub(n), size - 1))
            }
        }),
        (false, true) => a
            .parse::<u64>()
            .ok()
            .map(|s| (s < size).then(|| (s, size - 1))),
        (false, false) => match (a.parse::<u64>(), b.parse::<u64>()) {
            (Ok(s), Ok(e)) if s <= e => Some((s < size).then(|| (s, e.min(size - 1)))),
            // Last before first: the RFC lets a server ignore or reject it; nginx, Go and the OCI conformance
            // suite expect 416.
            (Ok(_), Ok(_)) => Some(None),
            _ => None,
        },
        (true, true) => None,
    };
    match parsed {
        None => ByteRange::Full, // syntactically invalid: ignore the header
        Some(None) => ByteRange::Unsatisfiable,
        Some(Some((start, end))) => ByteRange::Partial { start, end },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cases() {
        assert_eq!(parse(None, 10), ByteRange::Full);
        assert_eq!(
            parse(Some("bytes=0-4"), 10),
            ByteRange::Partial { start: 0, end: 4 }
        );
        assert_eq!(
            parse(Some("bytes=5-"), 10),
            ByteRange::Partial { start: 5, end: 9 }
        );
        assert_eq!(
            parse(Some("bytes=-3"), 10),
            ByteRange::Partial { start: 7, end: 9 }
        );
        assert_eq!(
            parse(Some("bytes=-30"), 10),
            ByteRange::Partial { start: 0, end: 9 }
        );
        assert_eq!(
            parse(Some("bytes=8-100"), 10),
            ByteRange::Partial { start: 8, end: 9 }
        );
        assert_eq!(parse(Some("bytes=10-"), 10), ByteRange::Unsatisfiable);
        assert_eq!(parse(Some("bytes=-0"), 10), ByteRange::Unsatisfiable);
        assert_eq!(parse(Some("bytes=5-2"), 10), ByteRange::Unsatisfiable);
        assert_eq!(parse(Some("bytes=5-x"), 10), ByteRange::Full);
        assert_eq!(parse(Some("bytes=0-1,3-4"), 10), ByteRange::Full);
        assert_eq!(parse(Some("items=0-1"), 10), ByteRange::Full);
    }

    proptest! {
        #[test]
        fn partial_ranges_lie_inside(size in 0u64..1000, a in 0u64..1200, b in 0u64..1200) {
            for h in [format!("bytes={a}-{b}"), format!("bytes={a}-"), format!("bytes=-{b}")] {
                if let ByteRange::Partial { start, end } = parse(Some(&h), size) {
                    prop_assert!(start <= end && end < size, "{h} size {size} -> {start}-{end}");
                }
            }
        }
    }
}
