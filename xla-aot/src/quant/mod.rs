//! Post-training quantization (issue 17, deliverable 3): calibrated activation ranges and int8
//! weights, as a module transform that works the same on spec, ONNX and HLO models.
//!
//! Contract:
//! - The quantized values ([`observe::sites`]) are the data operands (lhs) of the dots and
//!   convolutions whose weight (rhs) depends on no model input, in the front end's module (before
//!   the optimisation pipeline); each is keyed by its instruction's name, which is stable for a
//!   given model file and compiler version. Products of two activations (attention) stay f32.
//! - [`calibrate`] runs a model over calibration samples (the reference interpreter, or any
//!   runner the caller passes) and chooses each site's range with a [`Method`] (`stats.rs`).
//! - [`apply`] puts a fake quantization (`fake.rs`: uint8 asymmetric, `quantize → dequantize` in
//!   existing IR ops, the instructions the ONNX QDQ import produces) on each site's reads by
//!   products, and sets the module's precision to int8 weights (per output channel or per
//!   tensor), which rounds every constant weight to int8 × scale after the pipeline
//!   (`compile/weight_rounding.rs`, so batch norms are folded first) and lets the packing store
//!   them 1 byte each. Same module and ranges → the same module, byte for byte.
//! - [`Quantization`] is what a spec's `quantize:` section and `xla-aot quantize`'s output hold:
//!   the method, the weight granularity and the ranges (or a calibration folder to calibrate from
//!   at load time).

pub mod fake;
pub mod observe;
pub mod samples;
pub mod stats;

use crate::ir::{Literal, Module, Precision};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How a site's range is chosen from what calibration observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// The smallest and largest value seen.
    #[default]
    Minmax,
    /// The range holding [`stats::PERCENTILE`] % of the values seen (the rest clipped).
    Percentile,
    /// The threshold minimising the KL divergence between the values' histogram and its
    /// quantization (TensorRT's and onnxruntime's entropy calibration).
    Entropy,
}

impl Method {
    /// The method named `s` (`minmax`, `percentile`, `entropy`).
    pub fn parse(s: &str) -> Result<Method, String> {
        match s {
            "minmax" => Ok(Method::Minmax),
            "percentile" => Ok(Method::Percentile),
            "entropy" => Ok(Method::Entropy),
            _ => Err(format!(
                "unknown calibration method `{s}`; expected minmax, percentile or entropy"
            )),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Method::Minmax => "minmax",
            Method::Percentile => "percentile",
            Method::Entropy => "entropy",
        }
    }
}

/// A quantization: how the ranges were chosen, the weights' granularity and each site's range.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quantization {
    /// How the ranges were (or are to be) chosen.
    #[serde(default)]
    pub method: Method,
    /// One weight scale per output channel (else one per tensor).
    #[serde(default)]
    pub per_channel: bool,
    /// A folder of calibration samples (`samples.rs`), relative to the spec, calibrated from when
    /// `ranges` is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<String>,
    /// `site name: [low, high]`, the f32 range of each quantized value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges: Option<BTreeMap<String, [f32; 2]>>,
}

/// Why a model cannot be quantized.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    /// The calibration folder is missing or unreadable.
    #[error("calibration folder {path}: {reason}")]
    Folder { path: String, reason: String },
    /// A calibration file is missing, unreadable or of the wrong type or shape.
    #[error("calibration file {path}: {reason}")]
    File { path: String, reason: String },
    /// The ranges do not fit the model.
    #[error("{0}")]
    Ranges(String),
    /// Running the model failed.
    #[error("calibration run on sample {sample}: {reason}")]
    Run { sample: String, reason: String },
    /// The model is already quantized or has another precision.
    #[error("{0}")]
    Precision(String),
}

/// The precision [`apply`] gives a module.
pub fn precision(q: &Quantization) -> Precision {
    if q.per_channel {
        Precision::Int8Weights
    } else {
        Precision::Int8WeightsPerTensor
    }
}

/// `m` with fake-quantized activations at every site (`q.ranges`, which must name every site of
/// `m` and nothing else) and int8 weights.
pub fn apply(m: &Module, q: &Quantization) -> Result<Module, QuantError> {
    let ranges = q.ranges.as_ref().ok_or_else(|| {
        QuantError::Ranges(
            "the quantization has no `ranges`; give `calibration: FOLDER` or run `xla-aot quantize`"
                .into(),
        )
    })?;
    if m.precision != Precision::F32 {
        return Err(QuantError::Precision(format!(
            "the model has precision `{}`; quantize an f32 model (remove `precision:`)",
            m.precision
        )));
    }
    let sites = observe::sites(m);
    let mut per_site = Vec::with_capacity(sites.len());
    for &s in &sites {
        let name = &m.entry.inst(s).name;
        let r = ranges.get(name).ok_or_else(|| {
            QuantError::Ranges(format!(
                "`quantize.ranges` has no range for `{name}`, an input of a dot or convolution of this model; re-run `xla-aot quantize` on this model"
            ))
        })?;
        per_site.push((s, fake::Params::uint8(r[0], r[1])));
    }
    if let Some(extra) = ranges
        .keys()
        .find(|k| !sites.iter().any(|&s| &m.entry.inst(s).name == *k))
    {
        return Err(QuantError::Ranges(format!(
            "`quantize.ranges` names `{extra}`, which is no input of a dot or convolution of this model (were the ranges written for another model?); re-run `xla-aot quantize` on this model"
        )));
    }
    let mut out = fake::insert(m, &per_site);
    out.precision = precision(q);
    Ok(out)
}

/// Runs a module on one sample's inputs: `Ok(outputs)` or a reason.
pub type Runner<'a> = dyn FnMut(&Module, &[Literal]) -> Result<Vec<Literal>, String> + 'a;

/// The reference interpreter as a [`Runner`].
pub fn interpreter(m: &Module, inputs: &[Literal]) -> Result<Vec<Literal>, String> {
    crate::interp::evaluate(m, inputs).map_err(|e| e.to_string())
}

/// What calibration found: the ranges, and the float model's outputs on every sample.
#[derive(Debug, Clone)]
pub struct Calibrated {
    /// The quantization (method, granularity, ranges).
    pub quantization: Quantization,
    /// The float model's outputs, per sample.
    pub outputs: Vec<Vec<Literal>>,
}

/// Calibrates `m` on `samples` (inputs in parameter order; names for messages) with `run`.
pub fn calibrate(
    m: &Module,
    samples: &[(String, Vec<Literal>)],
    method: Method,
    per_channel: bool,
    run: &mut Runner,
) -> Result<Calibrated, QuantError> {
    let sites = observe::sites(m);
    let probe = observe::with_sites_as_outputs(m, &sites);
    let n_out = m.entry.outputs.len();
    let mut observers = vec![stats::Observer::default(); sites.len()];
    let mut outputs = Vec::with_capacity(samples.len());
    let mut site_values = |pass: usize,
                           observers: &mut Vec<stats::Observer>,
                           outputs: &mut Vec<Vec<Literal>>|
     -> Result<(), QuantError> {
        for (name, inputs) in samples {
            let mut got = run(&probe, inputs).map_err(|reason| QuantError::Run {
                sample: name.clone(),
                reason,
            })?;
            let values = got.split_off(n_out);
            for (o, v) in observers.iter_mut().zip(&values) {
                let v = v.to_f64_vec();
                if pass == 0 {
                    o.min_max(&v);
                } else {
                    o.histogram(&v, method);
                }
            }
            if pass == 0 {
                outputs.push(got);
            }
        }
        Ok(())
    };
    site_values(0, &mut observers, &mut outputs)?;
    if method != Method::Minmax {
        site_values(1, &mut observers, &mut outputs)?;
    }
    let ranges = sites
        .iter()
        .zip(&observers)
        .map(|(&s, o)| (m.entry.inst(s).name.clone(), o.range(method)))
        .collect();
    Ok(Calibrated {
        quantization: Quantization {
            method,
            per_channel,
            calibration: None,
            ranges: Some(ranges),
        },
        outputs,
    })
}

/// How close a quantized model's outputs are to the float model's, on the first output: its max
/// error, and its top-1 agreement per row of its last axis of extent above 1.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Accuracy {
    /// The largest |quantized - float| over the first output's elements.
    pub max_error: f64,
    /// The largest |float| (the scale of `max_error`).
    pub max_magnitude: f64,
    /// Rows (last axis) whose argmax is the same.
    pub top1_same: usize,
    /// Rows compared.
    pub rows: usize,
}

impl Accuracy {
    /// Adds one sample's first outputs (float, quantized).
    pub fn add(&mut self, float: &Literal, quantized: &Literal) {
        let (f, q) = (float.to_f64_vec(), quantized.to_f64_vec());
        for (a, b) in f.iter().zip(&q) {
            self.max_error = self.max_error.max((a - b).abs());
            self.max_magnitude = self.max_magnitude.max(a.abs());
        }
        // Rows along the last axis longer than 1 (a classifier's [1, 1000, 1, 1] has one row).
        let row = float
            .dims
            .iter()
            .rev()
            .copied()
            .find(|&d| d > 1)
            .unwrap_or(1);
        for (fr, qr) in f.chunks(row).zip(q.chunks(row)) {
            self.rows += 1;
            if argmax(fr) == argmax(qr) {
                self.top1_same += 1;
            }
        }
    }

    /// Top-1 agreement in [0, 1].
    pub fn top1(&self) -> f64 {
        if self.rows == 0 {
            1.0
        } else {
            self.top1_same as f64 / self.rows as f64
        }
    }
}

impl std::fmt::Display for Accuracy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "top-1 agreement {}/{} ({:.2}%), max error {:.3e} (largest float output {:.3e})",
            self.top1_same,
            self.rows,
            100.0 * self.top1(),
            self.max_error,
            self.max_magnitude
        )
    }
}

/// Index of the first largest value (NaN never wins).
pub fn argmax(v: &[f64]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}
