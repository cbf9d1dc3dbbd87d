//! What calibration records of each quantized value, and the range each [`Method`] chooses.
//!
//! Contract: an [`Observer`] sees every sample's values twice at most: first
//! [`Observer::min_max`] (all methods), then, for `percentile` and `entropy`,
//! [`Observer::histogram`] over the range the first pass found ([`BINS`] bins; of the values for
//! `percentile`, of their magnitudes for `entropy`). [`Observer::range`] returns the f32 range:
//! - `minmax`: [min, max];
//! - `percentile`: the bin edges below which [`PERCENTILE_LOW`] and above which
//!   `1 - PERCENTILE_HIGH` of the values lie (within one bin width, outward);
//! - `entropy`: [max(min, -T), min(max, T)] for the threshold T whose clipped histogram, merged
//!   into [`ENTROPY_LEVELS`] levels and spread back, has the least KL divergence from the clipped
//!   histogram (TensorRT's calibration, as onnxruntime's `get_entropy_threshold` computes it,
//!   with its smoothing of empty bins).
//!
//! Non-finite values are ignored. All arithmetic is deterministic (sequential f64 sums).

use super::Method;

/// Histogram bins (onnxruntime's default `num_bins` for entropy calibration).
pub const BINS: usize = 2048;

/// Quantization levels the entropy method merges a histogram into (onnxruntime's
/// `num_quantized_bins`: 128, the magnitudes of int8).
pub const ENTROPY_LEVELS: usize = 128;

/// The share of values the percentile range keeps: 99.99% (onnxruntime's default percentile),
/// cut evenly from both tails.
pub const PERCENTILE: f64 = 99.99;

/// The lower cut of the percentile range.
pub const PERCENTILE_LOW: f64 = (100.0 - PERCENTILE) / 200.0;

/// The upper cut of the percentile range.
pub const PERCENTILE_HIGH: f64 = 1.0 - PERCENTILE_LOW;

/// Smoothing of empty bins before the KL divergence (onnxruntime's `smooth_distribution` eps).
const SMOOTH_EPS: f64 = 1e-4;

/// What one quantized value looked like over the calibration samples.
#[derive(Debug, Clone)]
pub struct Observer {
    min: f64,
    max: f64,
    hist: Vec<u64>,
}

impl Default for Observer {
    fn default() -> Observer {
        Observer {
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            hist: Vec::new(),
        }
    }
}

impl Observer {
    /// First pass: the extremes.
    pub fn min_max(&mut self, v: &[f64]) {
        for &x in v.iter().filter(|x| x.is_finite()) {
            self.min = self.min.min(x);
            self.max = self.max.max(x);
        }
    }

    fn lo_hi(&self) -> (f64, f64) {
        if self.min <= self.max {
            (self.min, self.max)
        } else {
            (0.0, 0.0)
        }
    }

    /// Second pass: the histogram `method` needs.
    pub fn histogram(&mut self, v: &[f64], method: Method) {
        if self.hist.is_empty() {
            self.hist = vec![0; BINS];
        }
        let (lo, hi) = self.lo_hi();
        let (base, width) = match method {
            Method::Entropy => (0.0, lo.abs().max(hi.abs())),
            _ => (lo, hi - lo),
        };
        if width <= 0.0 {
            return;
        }
        for &x in v.iter().filter(|x| x.is_finite()) {
            let x = if method == Method::Entropy {
                x.abs()
            } else {
                x
            };
            let b = ((x - base) / width * BINS as f64) as usize;
            self.hist[b.min(BINS - 1)] += 1;
        }
    }

    /// The chosen f32 range.
    pub fn range(&self, method: Method) -> [f32; 2] {
        let (lo, hi) = self.lo_hi();
        let (lo, hi) = match method {
            _ if self.hist.is_empty() || hi <= lo => (lo, hi),
            Method::Minmax => (lo, hi),
            Method::Percentile => percentile(&self.hist, lo, hi),
            Method::Entropy => {
                let t = entropy_threshold(&self.hist) * lo.abs().max(hi.abs());
                (lo.max(-t), hi.min(t))
            }
        };
        [lo as f32, hi as f32]
    }
}

/// The percentile range of a histogram over [lo, hi].
fn percentile(hist: &[u64], lo: f64, hi: f64) -> (f64, f64) {
    let total: u64 = hist.iter().sum();
    let width = (hi - lo) / hist.len() as f64;
    let (mut below, mut low_bin) = (0u64, 0);
    for (i, &h) in hist.iter().enumerate() {
        if (below + h) as f64 > PERCENTILE_LOW * total as f64 {
            low_bin = i;
            break;
        }
        below += h;
    }
    let (mut above, mut high_bin) = (0u64, hist.len() - 1);
    for (i, &h) in hist.iter().enumerate().rev() {
        if (above + h) as f64 > (1.0 - PERCENTILE_HIGH) * total as f64 {
            high_bin = i;
            break;
        }
        above += h;
    }
    (
        lo + low_bin as f64 * width,
        lo + (high_bin + 1) as f64 * width,
    )
}

/// The threshold, as a fraction of the histogram's range, that the KL divergence chooses.
pub fn entropy_threshold(hist: &[u64]) -> f64 {
    let n = hist.len();
    let mut best = (f64::INFINITY, n);
    for i in (ENTROPY_LEVELS..=n).step_by(ENTROPY_LEVELS / 16) {
        let outliers: u64 = hist[i..].iter().sum();
        let mut p: Vec<f64> = hist[..i].iter().map(|&h| h as f64).collect();
        p[i - 1] += outliers as f64;
        let mut q = vec![0f64; i];
        for j in 0..ENTROPY_LEVELS {
            let start = j * i / ENTROPY_LEVELS;
            let end = (j + 1) * i / ENTROPY_LEVELS;
            let total: u64 = hist[start..end].iter().sum();
            let used = hist[start..end].iter().filter(|&&h| h != 0).count();
            if used == 0 {
                continue;
            }
            for k in start..end {
                if hist[k] != 0 {
                    q[k] = total as f64 / used as f64;
                }
            }
        }
        let (Some(p), Some(q)) = (smooth(&p), smooth(&q)) else {
            continue;
        };
        let kl: f64 = p
            .iter()
            .zip(&q)
            .filter(|(a, _)| **a > 0.0)
            .map(|(a, b)| a * (a / b).ln())
            .sum();
        if kl < best.0 {
            best = (kl, i);
        }
    }
    best.1 as f64 / n as f64
}

/// Counts `v` with every empty bin given [`SMOOTH_EPS`] of a count, taken evenly from the others
/// (onnxruntime's `smooth_distribution`, on counts), normalised to sum 1; `None` when `v` is all
/// zeros or a bin would not stay positive.
fn smooth(v: &[f64]) -> Option<Vec<f64>> {
    let zeros = v.iter().filter(|&&x| x == 0.0).count();
    let nonzeros = v.len() - zeros;
    if nonzeros == 0 {
        return None;
    }
    let take = SMOOTH_EPS * zeros as f64 / nonzeros as f64;
    let out: Vec<f64> = v
        .iter()
        .map(|&x| if x == 0.0 { SMOOTH_EPS } else { x - take })
        .collect();
    let total: f64 = out.iter().sum();
    out.iter()
        .all(|&x| x > 0.0)
        .then(|| out.iter().map(|x| x / total).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(v: &[f64], method: Method) -> [f32; 2] {
        let mut o = Observer::default();
        o.min_max(v);
        if method != Method::Minmax {
            o.histogram(v, method);
        }
        o.range(method)
    }

    #[test]
    fn minmax_and_percentile_ranges() {
        // 100 000 values in [0, 1) and one outlier at 1000.
        let mut v: Vec<f64> = (0..100_000).map(|i| i as f64 / 100_000.0).collect();
        v.push(1000.0);
        assert_eq!(observed(&v, Method::Minmax), [0.0, 1000.0]);
        // The outlier is beyond 99.995%: the top is the upper edge of the bin holding 1.0
        // (bins are 1000 / 2048 wide).
        let [lo, hi] = observed(&v, Method::Percentile);
        assert_eq!(lo, 0.0);
        assert!((hi - 3.0 * 1000.0 / 2048.0).abs() < 1e-3, "{hi}");
    }

    #[test]
    fn entropy_clips_a_long_tail() {
        // A Gaussian-like bulk in [-1, 1] and a few values out to 50.
        let mut v: Vec<f64> = (0..20_000)
            .map(|i| ((i % 200) as f64 / 100.0 - 1.0) * ((i % 7) as f64 / 7.0))
            .collect();
        v.extend([50.0, -40.0, 30.0]);
        let [lo, hi] = observed(&v, Method::Entropy);
        assert!((0.9..10.0).contains(&hi), "{hi}");
        assert!(lo > -10.0 && lo <= -0.8, "{lo}");
    }

    #[test]
    fn constant_values() {
        assert_eq!(observed(&[2.0, 2.0], Method::Entropy), [2.0, 2.0]);
        assert_eq!(observed(&[], Method::Percentile), [0.0, 0.0]);
    }
}
