//! Resize and Upsample: nearest, linear and cubic interpolation with every coordinate mapping
//! ONNX defines (`tf_crop_and_resize` included), at sizes fixed at build time.
//!
//! Contract: [`Importer::resize`] (opsets 10–19) and [`Importer::upsample`] (opsets 7–9) compute,
//! at import time, for each resized axis and each output position the input taps and their
//! weights, exactly as ONNX's reference does (every `coordinate_transformation_mode`, `nearest_mode`,
//! `cubic_coeff_a`, `exclude_outside`; taps beyond the edge read the edge); the model then gathers
//! the taps along the axis (`take`) and, for linear and cubic, sums them times constant weights.
//! Axes are resized one after another (the interpolations are separable). Scales and sizes must be
//! compile-time constants. `antialias` = 1 stretches the linear and cubic filters when shrinking
//! ([`antialiased_taps`]); `keep_aspect_ratio_policy` `not_larger` / `not_smaller` fit `sizes` with
//! one scale; `tf_crop_and_resize` maps through the region of interest (input 1, a constant) and
//! writes `extrapolation_value` where the source lies outside the input.

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, rt};
use super::proto::data_type as dt;
use crate::ir::shape::dims_str;
use crate::ir::{BinaryOp, InstId, Literal};

/// How an output coordinate maps to an input coordinate.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Coords {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    /// `tf_crop_and_resize` with this axis's region of interest (fractions of the input).
    TfCrop {
        start: f64,
        end: f64,
    },
}

/// How a fractional input coordinate picks the nearest pixel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nearest {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

/// The interpolation.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Nearest(Nearest),
    Linear,
    /// Cubic convolution with coefficient `a`; `exclude_outside` drops taps beyond the edge.
    Cubic {
        a: f64,
        exclude_outside: bool,
    },
}

/// Input coordinate of output position `x` along an axis of `input` resized to `output` with
/// `scale` (ONNX's reference: `output_width` is the real `scale · input`, `output_width_int` the
/// integer size).
fn original(coords: Coords, x: f64, scale: f64, input: usize, output: usize) -> f64 {
    let inp = input as f64;
    let out_f = scale * inp;
    match coords {
        Coords::HalfPixel => (x + 0.5) / scale - 0.5,
        Coords::HalfPixelSymmetric => {
            let adjustment = output as f64 / out_f;
            let offset = inp / 2.0 * (1.0 - adjustment);
            offset + (x + 0.5) / scale - 0.5
        }
        Coords::PytorchHalfPixel => {
            if out_f == 1.0 {
                -0.5
            } else {
                (x + 0.5) / scale - 0.5
            }
        }
        Coords::AlignCorners => {
            if out_f == 1.0 {
                0.0
            } else {
                x * (inp - 1.0) / (out_f - 1.0)
            }
        }
        Coords::Asymmetric => x / scale,
        Coords::TfCrop { start, end } => {
            let x = if out_f == 1.0 {
                (end - start) * (inp - 1.0) / 2.0
            } else {
                x * (end - start) * (inp - 1.0) / (out_f - 1.0)
            };
            x + start * (inp - 1.0)
        }
    }
}

/// The taps (input indices, clamped to the axis) and weights of every output position.
fn taps(
    mode: Mode,
    coords: Coords,
    scale: f64,
    input: usize,
    output: usize,
) -> Vec<Vec<(usize, f64)>> {
    let last = input as i64 - 1;
    let clamp = |i: i64| i.clamp(0, last) as usize;
    (0..output)
        .map(|o| {
            let x = original(coords, o as f64, scale, input, output);
            match mode {
                Mode::Nearest(n) => {
                    let i = match n {
                        Nearest::RoundPreferFloor if x.fract() == 0.5 => x.floor(),
                        Nearest::RoundPreferCeil if x.fract() == 0.5 => x.ceil(),
                        Nearest::RoundPreferFloor | Nearest::RoundPreferCeil => x.round(),
                        Nearest::Floor => x.floor(),
                        Nearest::Ceil => x.ceil(),
                    };
                    vec![(clamp(i as i64), 1.0)]
                }
                Mode::Linear => {
                    let x = x.clamp(0.0, last as f64);
                    let i0 = x.floor();
                    let r = x - i0;
                    vec![(clamp(i0 as i64), 1.0 - r), (clamp(i0 as i64 + 1), r)]
                }
                Mode::Cubic { a, exclude_outside } => {
                    let i0 = x.floor();
                    let r = x - i0;
                    let c = |t: f64| {
                        let t = t.abs();
                        if t <= 1.0 {
                            ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0
                        } else if t < 2.0 {
                            ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a
                        } else {
                            0.0
                        }
                    };
                    let mut v: Vec<(i64, f64)> =
                        (-1..=2).map(|k| (i0 as i64 + k, c(r - k as f64))).collect();
                    if exclude_outside {
                        for t in &mut v {
                            if t.0 < 0 || t.0 > last {
                                t.1 = 0.0;
                            }
                        }
                        let sum: f64 = v.iter().map(|t| t.1).sum();
                        for t in &mut v {
                            t.1 /= sum;
                        }
                    }
                    v.into_iter().map(|(i, w)| (clamp(i), w)).collect()
                }
            }
        })
        .collect()
}

/// The taps of antialiased downsampling (`antialias` = 1, `scale` < 1), as ONNX's reference
/// computes them: the linear ("triangle") or cubic (`cubic`: its `a`) filter stretched by
/// `1/scale`, over the pixels around the coordinate starting `⌊-support/scale⌋ + 1` to the left
/// of the pixel left of it (`ratio` in (0, 1]), normalised to sum 1; `exclude_outside` drops
/// (and renormalises without) the pixels beyond the edge, which otherwise read the edge.
fn antialiased_taps(
    coords: Coords,
    scale: f64,
    input: usize,
    output: usize,
    cubic: Option<f64>,
    exclude_outside: bool,
) -> Vec<Vec<(usize, f64)>> {
    let last = input as i64 - 1;
    let support = if cubic.is_some() { 2.0 } else { 1.0 };
    let start = (-support / scale).floor() as i64 + 1;
    let end = support as i64 * 2 - start;
    let filter = |t: f64| -> f64 {
        let t = t.abs();
        match cubic {
            None => (1.0 - t).clamp(0.0, 1.0),
            Some(a) if t <= 1.0 => ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0,
            Some(a) if t < 2.0 => ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a,
            Some(_) => 0.0,
        }
    };
    (0..output)
        .map(|o| {
            let x = original(coords, o as f64, scale, input, output);
            // The pixel left of x (x itself minus one when x is a whole number).
            let left = x.ceil() as i64 - 1;
            let ratio = x - left as f64;
            let mut v: Vec<(i64, f64)> = (start..end)
                .map(|i| (left + i, filter(scale * (i as f64 - ratio))))
                .collect();
            if exclude_outside {
                for t in &mut v {
                    if t.0 < 0 || t.0 > last {
                        t.1 = 0.0;
                    }
                }
            }
            let sum: f64 = v.iter().map(|t| t.1).sum();
            v.into_iter()
                .map(|(i, w)| (i.clamp(0, last) as usize, w / sum))
                .collect()
        })
        .collect()
}

impl Importer {
    /// Resamples `x` along `axis` to `output` positions.
    fn resample_axis(
        &mut self,
        cx: &Ctx,
        x: InstId,
        axis: usize,
        output: usize,
        scale: f64,
        (mode, coords, antialias): (Mode, Coords, bool),
    ) -> R<InstId> {
        let xd = self.dims(x);
        let exclude = cx.attr_i_or("exclude_outside", 0)? != 0;
        let t = match (antialias && scale < 1.0, mode) {
            (true, Mode::Linear) => {
                antialiased_taps(coords, scale, xd[axis], output, None, exclude)
            }
            (true, Mode::Cubic { a, .. }) => {
                antialiased_taps(coords, scale, xd[axis], output, Some(a), exclude)
            }
            _ => taps(mode, coords, scale, xd[axis], output),
        };
        let n = t[0].len();
        let mut od = xd.clone();
        od[axis] = output;
        let mut acc: Option<InstId> = None;
        for k in 0..n {
            let idx: Vec<usize> = t.iter().map(|p| p[k].0).collect();
            let g = self.take(cx, x, axis, &idx, vec![output])?;
            let term = if n == 1 {
                g
            } else {
                let w: Vec<f32> = t.iter().map(|p| p[k].1 as f32).collect();
                let wc = self
                    .b
                    .constant("weights", Literal::from_f32(vec![output], &w));
                let wb = self.bcast(cx, wc, vec![axis], od.clone())?;
                self.bin(cx, BinaryOp::Multiply, g, wb)?
            };
            acc = Some(match acc {
                None => term,
                Some(a) => self.bin(cx, BinaryOp::Add, a, term)?,
            });
        }
        let acc = acc.expect("at least one tap");
        // tf_crop_and_resize: a position whose source lies outside the input is
        // `extrapolation_value` (ONNX's reference returns it without interpolating).
        if let Coords::TfCrop { .. } = coords {
            let outside: Vec<bool> = (0..output)
                .map(|o| {
                    let x = original(coords, o as f64, scale, xd[axis], output);
                    x < 0.0 || x > (xd[axis] - 1) as f64
                })
                .collect();
            if outside.iter().any(|&b| b) {
                let v = cx.attr_f_or("extrapolation_value", 0.0)?;
                let m = self
                    .b
                    .constant("outside", Literal::from_pred(vec![output], &outside));
                let mb = self.bcast(cx, m, vec![axis], od.clone())?;
                let e = self.splat(cx, v, &od)?;
                return self.select(cx, mb, e, acc);
            }
        }
        Ok(acc)
    }

    /// Resizes `x` (f32) to `out` with per-axis `scales`.
    fn resize_to(
        &mut self,
        cx: &Ctx,
        x: InstId,
        out: &[usize],
        scales: &[f64],
        (mode, coords, antialias): (Mode, &[Coords], bool),
    ) -> R<Outs> {
        let mut y = x;
        for axis in 0..out.len() {
            let input = self.dims(y)[axis];
            // Every mapping is the identity at scale 1, and align_corners at any equal size.
            let c = coords[axis];
            let identity = input == out[axis]
                && match c {
                    Coords::AlignCorners => true,
                    Coords::TfCrop { start, end } => start == 0.0 && end == 1.0,
                    _ => scales[axis] == 1.0,
                };
            if identity {
                continue;
            }
            if input == 0 || out[axis] == 0 {
                return Err(cx.err("resizing an empty axis or to an empty size is not supported"));
            }
            y = self.resample_axis(cx, y, axis, out[axis], scales[axis], (mode, c, antialias))?;
        }
        Ok(rt(y, dt::FLOAT))
    }

    fn interpolation(&self, cx: &Ctx, nearest_default: Nearest) -> R<Mode> {
        let nearest = match cx.attr_s("nearest_mode")?.as_deref() {
            None => nearest_default,
            Some("round_prefer_floor") => Nearest::RoundPreferFloor,
            Some("round_prefer_ceil") => Nearest::RoundPreferCeil,
            Some("floor") => Nearest::Floor,
            Some("ceil") => Nearest::Ceil,
            Some(o) => {
                return Err(
                    cx.attr_err("nearest_mode", format!("`{o}` is not an ONNX nearest mode"))
                );
            }
        };
        Ok(match cx.attr_s("mode")?.as_deref().unwrap_or("nearest") {
            "nearest" => Mode::Nearest(nearest),
            "linear" | "bilinear" | "trilinear" => Mode::Linear,
            "cubic" | "bicubic" => Mode::Cubic {
                a: cx.attr_f_or("cubic_coeff_a", -0.75)? as f64,
                exclude_outside: cx.attr_i_or("exclude_outside", 0)? != 0,
            },
            o => return Err(cx.attr_err("mode", format!("`{o}` is not nearest, linear or cubic"))),
        })
    }

    /// `Resize(X, roi, scales, sizes)` (opset 11+) or `Resize(X, scales)` (opset 10).
    pub fn resize(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 4)?;
        let x = self.rt_f32(cx, 0)?;
        let xd = self.dims(x);
        let r = xd.len();
        let opset10 = cx.n_inputs() == 2;
        let coords = if opset10 {
            Coords::Asymmetric
        } else {
            match cx
                .attr_s("coordinate_transformation_mode")?
                .as_deref()
                .unwrap_or("half_pixel")
            {
                "half_pixel" => Coords::HalfPixel,
                "half_pixel_symmetric" => Coords::HalfPixelSymmetric,
                "pytorch_half_pixel" => Coords::PytorchHalfPixel,
                "align_corners" => Coords::AlignCorners,
                "asymmetric" => Coords::Asymmetric,
                "tf_crop_and_resize" => Coords::TfCrop {
                    start: 0.0,
                    end: 1.0,
                },
                o => {
                    return Err(cx.attr_err(
                        "coordinate_transformation_mode",
                        format!("`{o}` is not an ONNX coordinate transformation mode"),
                    ));
                }
            }
        };
        let mode = self.interpolation(
            cx,
            if opset10 {
                Nearest::Floor
            } else {
                Nearest::RoundPreferFloor
            },
        )?;
        let antialias = cx.attr_i_or("antialias", 0)? != 0;
        // With `sizes`: `stretch` takes them as they are; `not_larger` / `not_smaller` scale
        // every resized axis by the smallest / largest of their ratios (the aspect ratio kept).
        let policy = cx
            .attr_s("keep_aspect_ratio_policy")?
            .unwrap_or_else(|| "stretch".into());
        if !["stretch", "not_larger", "not_smaller"].contains(&policy.as_str()) {
            return Err(cx.attr_err(
                "keep_aspect_ratio_policy",
                format!("`{policy}` is not stretch, not_larger or not_smaller"),
            ));
        }
        // In the attribute's order (scales and sizes follow it), not sorted.
        let axes: Vec<usize> = match cx.attr_ints("axes")? {
            Some(a) => a
                .iter()
                .map(|&v| cx.axis("axes", v, r))
                .collect::<R<Vec<_>>>()?,
            None => (0..r).collect(),
        };
        let (scales_j, sizes_j) = if opset10 { (1, usize::MAX) } else { (2, 3) };
        let given = |j: usize| j != usize::MAX && cx.has_input(j);
        let have = |me: &Importer, j: usize| -> R<bool> {
            Ok(given(j) && !me.in_dims(cx, j)?.contains(&0))
        };
        let mut scales = vec![1.0f64; r];
        let mut out = xd.clone();
        if have(self, sizes_j)? {
            let sizes = self.konst_ints(cx, sizes_j, "sizes")?;
            if sizes.len() != axes.len() || sizes.iter().any(|&s| s <= 0) {
                return Err(cx.err(format!(
                    "sizes {sizes:?} must be {} positive numbers",
                    axes.len()
                )));
            }
            let ratios = axes
                .iter()
                .enumerate()
                .map(|(k, &a)| sizes[k] as f64 / xd[a] as f64);
            let kept = match policy.as_str() {
                "not_larger" => Some(ratios.fold(f64::INFINITY, f64::min)),
                "not_smaller" => Some(ratios.fold(0.0, f64::max)),
                _ => None,
            };
            for (k, &a) in axes.iter().enumerate() {
                match kept {
                    // ONNX's reference rounds the scaled size half to even (numpy's round).
                    Some(sc) => {
                        out[a] = (sc * xd[a] as f64).round_ties_even() as usize;
                        scales[a] = sc;
                    }
                    None => {
                        out[a] = sizes[k] as usize;
                        scales[a] = sizes[k] as f64 / xd[a] as f64;
                    }
                }
            }
        } else if have(self, scales_j)? {
            let s = self.konst(cx, scales_j, "scales")?.as_f64();
            if s.len() != axes.len() || s.iter().any(|&v| v.is_nan() || v <= 0.0 || v.is_infinite())
            {
                return Err(cx.err(format!(
                    "scales {s:?} must be {} positive numbers",
                    axes.len()
                )));
            }
            for (k, &a) in axes.iter().enumerate() {
                scales[a] = s[k];
                out[a] = (xd[a] as f64 * s[k]).floor() as usize;
            }
        } else {
            return Err(cx.err("neither scales nor sizes is given"));
        }
        if out
            .iter()
            .zip(&xd)
            .any(|(&o, &i)| o > i.saturating_mul(1 << 12))
        {
            return Err(cx.err(format!(
                "the output {} is implausibly large",
                dims_str(&out)
            )));
        }
        // tf_crop_and_resize: the region of interest (input 1, starts then ends, one per resized
        // axis) per axis.
        let mut per_axis = vec![coords; r];
        if let Coords::TfCrop { .. } = coords {
            if !given(1) {
                return Err(cx.err("tf_crop_and_resize needs the roi (input 1)"));
            }
            let roi = self.konst(cx, 1, "roi")?.as_f64();
            let n = axes.len();
            if roi.len() != 2 * n {
                return Err(cx.err(format!(
                    "roi has {} values; tf_crop_and_resize over {n} axes needs {}",
                    roi.len(),
                    2 * n
                )));
            }
            for (k, &a) in axes.iter().enumerate() {
                per_axis[a] = Coords::TfCrop {
                    start: roi[k],
                    end: roi[n + k],
                };
            }
        }
        self.resize_to(cx, x, &out, &scales, (mode, &per_axis, antialias))
    }

    /// `Upsample(X, scales)` (opset 9; opset 7's `scales` attribute): asymmetric coordinates,
    /// nearest (floor) or linear.
    pub fn upsample(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 2)?;
        let x = self.rt_f32(cx, 0)?;
        let xd = self.dims(x);
        let scales: Vec<f64> = if cx.has_input(1) {
            self.konst(cx, 1, "scales")?.as_f64()
        } else {
            cx.attr_floats("scales")?
                .ok_or_else(|| cx.attr_err("scales", "is missing"))?
                .iter()
                .map(|&v| v as f64)
                .collect()
        };
        if scales.len() != xd.len()
            || scales
                .iter()
                .any(|&v| v.is_nan() || v < 1.0 || v.is_infinite())
        {
            return Err(cx.err(format!(
                "scales {scales:?} must be {} numbers of at least 1",
                xd.len()
            )));
        }
        let mode = match cx.attr_s("mode")?.as_deref().unwrap_or("nearest") {
            "nearest" => Mode::Nearest(Nearest::Floor),
            "linear" | "bilinear" => Mode::Linear,
            o => return Err(cx.attr_err("mode", format!("`{o}` is not nearest or linear"))),
        };
        let out: Vec<usize> = xd
            .iter()
            .zip(&scales)
            .map(|(&d, &s)| (d as f64 * s).floor() as usize)
            .collect();
        let coords = vec![Coords::Asymmetric; out.len()];
        self.resize_to(cx, x, &out, &scales, (mode, &coords, false))
    }
}
