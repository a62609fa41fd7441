//! A Prometheus histogram of durations: cumulative buckets, a sum and a count, kept per series under the
//! [`super::Metrics`] mutex that already guards its labels.

use std::fmt::Write as _;

/// Bucket upper bounds, seconds: from a manifest served from memory (about a millisecond) to a reconcile that
/// waits on a slow API server or a blob written to a slow disk (tens of seconds). Fixed, so every series of a
/// name has the same buckets and `histogram_quantile` can sum them.
pub const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// Observations at or under each bound of [`BUCKETS`] (not cumulative: summed when rendered).
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    pub fn observe(&mut self, seconds: f64) {
        if let Some(i) = BUCKETS.iter().position(|&b| seconds <= b) {
            self.counts[i] += 1;
        }
        self.count += 1;
        self.sum += seconds;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The series of `name` with `labels` (`key="value",…`, or empty): `_bucket` for each bound and `+Inf`,
    /// `_sum` and `_count`, in the text exposition format.
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (bound, n) in BUCKETS.iter().zip(self.counts) {
            cumulative += n;
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {}", braces(labels), self.sum);
        let _ = writeln!(out, "{name}_count{} {}", braces(labels), self.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_inf_is_the_count() {
        let mut h = Histogram::default();
        // Powers of two, so that the sum is exact.
        for s in [0.000_976_562_5, 0.003_906_25, 0.003_906_25, 2.0, 100.0] {
            h.observe(s);
        }
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "c=\"a\"");
        assert!(
            out.contains("x_seconds_bucket{c=\"a\",le=\"0.001\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{c=\"a\",le=\"0.0025\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{c=\"a\",le=\"0.005\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{c=\"a\",le=\"2.5\"} 4\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{c=\"a\",le=\"30\"} 4\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{c=\"a\",le=\"+Inf\"} 5\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_sum{c=\"a\"} 102.0087890625\n"),
            "{out}"
        );
        assert!(out.contains("x_seconds_count{c=\"a\"} 5\n"), "{out}");
    }

    #[test]
    fn without_labels_the_series_have_only_le() {
        let mut h = Histogram::default();
        h.observe(0.2);
        let mut out = String::new();
        h.render(&mut out, "y", "");
        assert!(out.contains("y_bucket{le=\"0.25\"} 1\n"), "{out}");
        assert!(out.contains("y_sum 0.2\ny_count 1\n"), "{out}");
    }

    #[test]
    fn bounds_ascend() {
        assert!(BUCKETS.windows(2).all(|w| w[0] < w[1]));
    }
}
