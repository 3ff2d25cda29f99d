//! Summary statistics of a set of samples (milliseconds, or any other unit).

use serde_json::{json, Value};

/// Median, p95, min, max and mean of a non-empty set of samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub p95: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
}

impl Summary {
    /// `None` for an empty set.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        Some(Summary {
            n: s.len(),
            median: percentile(&s, 50.0),
            p95: percentile(&s, 95.0),
            min: s[0],
            max: s[s.len() - 1],
            mean: s.iter().sum::<f64>() / s.len() as f64,
        })
    }

    /// max - min: the whole spread of the samples.
    pub fn spread(&self) -> f64 {
        self.max - self.min
    }

    pub fn to_json(self) -> Value {
        json!({
            "n": self.n,
            "median": self.median,
            "p95": self.p95,
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
        })
    }
}

/// Linear interpolation between the closest ranks of sorted `s` (the usual "type 7").
pub fn percentile(s: &[f64], p: f64) -> f64 {
    let rank = (p / 100.0) * (s.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    s[lo] + (s[hi] - s[lo]) * (rank - lo as f64)
}

/// The `p`th percentile of samples in any order; NaN for none.
pub fn percentile_of(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    percentile(&s, p)
}

/// Milliseconds with a precision that suits the magnitude.
pub fn ms(v: f64) -> String {
    if v < 1.0 {
        format!("{v:.3}")
    } else if v < 100.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

/// A size in bytes, KiB or MiB.
pub fn bytes(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / (1 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / (1 << 10) as f64)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_percentiles() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.mean), (3.0, 1.0, 5.0, 3.0));
        assert!((s.p95 - 4.8).abs() < 1e-9);
        assert_eq!(Summary::of(&[1.0, 2.0]).unwrap().median, 1.5);
        assert_eq!(Summary::of(&[7.0]).unwrap().p95, 7.0);
        assert!(Summary::of(&[]).is_none());
    }
}
