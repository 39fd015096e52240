//! Statistics of a grid point's runs: what the summary computes and the plots and
//! normalized tables draw. A leaf, so that the summary can call the plots without the
//! plots importing the summary back.

use std::collections::BTreeMap;

/// What the plots need of a grid point: how its runs ended and the statistics of each
/// summary metric over the runs that gave it a value.
#[derive(Debug)]
pub(super) struct PointStats {
    /// Runs at the point.
    pub(super) runs: usize,
    /// Runs that failed (no report).
    pub(super) failed: usize,
    /// Runs that completed with a tenant that failed.
    pub(super) tenant_failed: usize,
    /// Statistics per summary metric; a metric no run gave a value is absent.
    pub(super) metrics: BTreeMap<&'static str, Stats>,
}

/// Mean, standard deviation, minimum and maximum of a metric at a point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Mean.
    pub mean: f64,
    /// Sample standard deviation (0 for one sample).
    pub std: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Stats {
    /// Statistics of a non-empty sample.
    pub fn of(xs: &[f64]) -> Option<Self> {
        if xs.is_empty() {
            return None;
        }
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = if xs.len() > 1 {
            xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        Some(Self {
            mean,
            std: var.sqrt(),
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_a_sample() {
        let s = Stats::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!((s.mean, s.min, s.max), (2.5, 1.0, 4.0));
        assert!((s.std - 1.290_994).abs() < 1e-6);
        assert_eq!(Stats::of(&[5.0]).unwrap().std, 0.0);
        assert_eq!(Stats::of(&[]), None);
    }
}
