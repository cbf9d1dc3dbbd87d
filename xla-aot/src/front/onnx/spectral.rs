//! DFT and STFT with sizes known at compile time, as products with constant cosine and sine
//! matrices.
//!
//! Contract: `DFT` (opset 17: `axis` attribute, default 1; opset 20: `axis` input, default -2)
//! reads a signal `[..., N, ..., C]` whose last dim is 1 (real) or 2 (complex), along `axis`
//! (not the last dim); `dft_length` (a compile-time input) zero-pads or truncates the signal;
//! `inverse` conjugates and scales by 1/L; `onesided` keeps the L/2 + 1 non-negative frequencies
//! of a forward transform, and for an inverse one reads such a half spectrum and returns the real
//! signal of length L (default 2·(N-1)), as numpy's `irfft` does. `STFT(signal [B, T, C],
//! frame_step, window?, frame_length?)` frames the signal (`1 + (T - L) / step` frames), weights
//! each frame by the window and transforms it (onesided by default). Each transform is one or two
//! `dot`s of the signal, flattened to rows, with `[L, K]` constants (O(L·K) work, no FFT), at most
//! [`MAX_DFT_LENGTH`] points and [`MAX_STFT_FRAMES`] frames. The window generators
//! (`HannWindow`, `HammingWindow`, `BlackmanWindow`: `size` known at compile time, `periodic`,
//! `output_datatype`) and `MelWeightMatrix` (every input known at compile time) fold to constants
//! computed as ONNX's reference computes them.

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, konst, rt};
use super::proto::data_type as dt;
use super::tensor::{ConstTensor, Values, is_float_type, is_int_type};
use crate::ir::{BinaryOp, DotDims, InstId, Literal, Op};

/// Longest transform: the constant matrices hold L·K floats each (2048² · 4 B = 16 MiB).
pub const MAX_DFT_LENGTH: usize = 2048;

/// Most STFT frames: each is one slice in the module (a second of 16 kHz audio at a hop of 160
/// is 100 frames; 4096 leaves a wide margin).
pub const MAX_STFT_FRAMES: usize = 4096;

/// Longest window or mel matrix side folded at import time (a constant of that many floats).
pub const MAX_WINDOW_SIZE: usize = 1 << 20;

/// What one transform computes.
struct Dft {
    /// Points of the transform (the signal padded or truncated to it).
    length: usize,
    inverse: bool,
    onesided: bool,
}

impl Importer {
    pub fn dft(&mut self, cx: &Ctx) -> R<Outs> {
        let axis_input = !cx.before(20);
        cx.arity(1, if axis_input { 3 } else { 2 })?;
        let x = self.rt_f32(cx, 0)?;
        let xd = self.dims(x);
        let r = xd.len();
        if r < 2 || !(1..=2).contains(&xd[r - 1]) {
            return Err(cx.err(format!(
                "input 0 {:?} must end in a dim of 1 (real) or 2 (complex) values",
                xd
            )));
        }
        let axis = if axis_input {
            if cx.has_input(2) {
                self.konst_ints(cx, 2, "axis")?
                    .first()
                    .copied()
                    .unwrap_or(-2)
            } else {
                -2
            }
        } else {
            cx.attr_i_or("axis", 1)?
        };
        let axis = cx.axis("axis", axis, r)?;
        if axis == r - 1 {
            return Err(
                cx.err("the axis is the last dim, which holds the real and imaginary parts")
            );
        }
        let inverse = cx.attr_i_or("inverse", 0)? != 0;
        let onesided = cx.attr_i_or("onesided", 0)? != 0;
        let n = xd[axis];
        if xd.contains(&0) {
            return Err(cx.err(format!(
                "input 0 {xd:?} is empty; the compiler does not support empty tensors here"
            )));
        }
        let length = if cx.has_input(1) {
            let v = self.konst_ints(cx, 1, "dft_length")?;
            match v.first() {
                Some(&l) if l >= 1 => l as usize,
                _ => return Err(cx.err(format!("input 1 (dft_length) {v:?} must be positive"))),
            }
        } else if inverse && onesided {
            2 * n.saturating_sub(1)
        } else {
            n
        };
        if length == 0 || length > MAX_DFT_LENGTH {
            return Err(cx.err(format!(
                "a transform of {length} points is not supported (1 to {MAX_DFT_LENGTH})"
            )));
        }
        if inverse && onesided && xd[r - 1] != 2 {
            return Err(
                cx.err("an inverse onesided DFT reads a complex half spectrum (last dim 2)")
            );
        }
        // Rows of the signal along the axis: [others..., N] flattened to [rows, N].
        let mut perm: Vec<usize> = (0..r - 1).filter(|&i| i != axis).collect();
        perm.push(axis);
        let others: Vec<usize> = perm[..r - 2].iter().map(|&i| xd[i]).collect();
        let rows: usize = others.iter().product();
        let mut parts = Vec::new();
        for c in 0..xd[r - 1] {
            let mut starts = vec![0; r];
            let mut limits = xd.clone();
            starts[r - 1] = c;
            limits[r - 1] = c + 1;
            let p = self.crop(cx, x, starts, limits)?;
            let p = self.reshape(cx, p, xd[..r - 1].to_vec())?;
            let p = self.add(
                cx,
                Op::Transpose {
                    permutation: perm.clone(),
                },
                &[p],
            )?;
            parts.push(self.reshape(cx, p, vec![rows, n])?);
        }
        let spec = Dft {
            length,
            inverse,
            onesided,
        };
        let (yr, yi) = self.dft_rows(cx, parts[0], parts.get(1).copied(), &spec)?;
        let k = self.dims(yr)[1];
        // Back to [..., K (at axis), ..., 1 or 2].
        let mut od = others.clone();
        od.push(k);
        let mut inv = vec![0; r - 1];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        let mut outs = Vec::new();
        for y in [Some(yr), yi].into_iter().flatten() {
            let y = self.reshape(cx, y, od.clone())?;
            let y = self.add(
                cx,
                Op::Transpose {
                    permutation: inv.clone(),
                },
                &[y],
            )?;
            let mut d = self.dims(y);
            d.push(1);
            outs.push(self.reshape(cx, y, d)?);
        }
        let y = if outs.len() == 1 {
            outs[0]
        } else {
            self.add(cx, Op::Concatenate { dimension: r - 1 }, &outs)?
        };
        Ok(rt(y, dt::FLOAT))
    }

    /// `STFT(signal, frame_step, window?, frame_length?)`.
    pub fn stft(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 4)?;
        let x = self.rt_f32(cx, 0)?;
        let xd = self.dims(x);
        if xd.len() != 3 || !(1..=2).contains(&xd[2]) {
            return Err(cx.err(format!(
                "input 0 {xd:?} must be [batch, signal_length, 1 or 2]"
            )));
        }
        let step = match self.konst_ints(cx, 1, "frame_step")?.first() {
            Some(&s) if s >= 1 => s as usize,
            _ => return Err(cx.err("input 1 (frame_step) must be a positive scalar")),
        };
        let window = if cx.has_input(2) {
            Some(self.rt_f32(cx, 2)?)
        } else {
            None
        };
        let length = if cx.has_input(3) {
            match self.konst_ints(cx, 3, "frame_length")?.first() {
                Some(&l) if l >= 1 => l as usize,
                _ => return Err(cx.err("input 3 (frame_length) must be a positive scalar")),
            }
        } else if let Some(w) = window {
            self.dims(w).iter().product()
        } else {
            return Err(cx.err("STFT needs a window (input 2) or a frame_length (input 3)"));
        };
        if let Some(w) = window {
            if self.dims(w) != [length] {
                return Err(cx.err(format!(
                    "the window {:?} must be [frame_length] = [{length}]",
                    self.dims(w)
                )));
            }
        }
        let (batch, t) = (xd[0], xd[1]);
        if length > t || length > MAX_DFT_LENGTH {
            return Err(cx.err(format!(
                "frame_length {length} must be at most the signal length {t} and {MAX_DFT_LENGTH}"
            )));
        }
        let frames = 1 + (t - length) / step;
        if frames > MAX_STFT_FRAMES {
            return Err(cx.err(format!(
                "the signal has {frames} frames; at most {MAX_STFT_FRAMES} are supported"
            )));
        }
        let onesided = cx.attr_i_or("onesided", 1)? != 0;
        let mut parts = Vec::new();
        for c in 0..xd[2] {
            // [batch, frames, L] by one slice per frame.
            let mut fr = Vec::new();
            for f in 0..frames {
                let s = self.crop(
                    cx,
                    x,
                    vec![0, f * step, c],
                    vec![batch, f * step + length, c + 1],
                )?;
                fr.push(self.reshape(cx, s, vec![batch, 1, length])?);
            }
            let mut y = if fr.len() == 1 {
                fr[0]
            } else {
                self.add(cx, Op::Concatenate { dimension: 1 }, &fr)?
            };
            if let Some(w) = window {
                let wb = self.bcast(cx, w, vec![2], vec![batch, frames, length])?;
                y = self.bin(cx, BinaryOp::Multiply, y, wb)?;
            }
            parts.push(self.reshape(cx, y, vec![batch * frames, length])?);
        }
        let spec = Dft {
            length,
            inverse: false,
            onesided,
        };
        let (yr, yi) = self.dft_rows(cx, parts[0], parts.get(1).copied(), &spec)?;
        let k = self.dims(yr)[1];
        let yi = match yi {
            Some(v) => v,
            None => self.splat(cx, 0.0, &[batch * frames, k])?,
        };
        let yr = self.reshape(cx, yr, vec![batch, frames, k, 1])?;
        let yi = self.reshape(cx, yi, vec![batch, frames, k, 1])?;
        let y = self.add(cx, Op::Concatenate { dimension: 3 }, &[yr, yi])?;
        Ok(rt(y, dt::FLOAT))
    }

    /// HannWindow / HammingWindow / BlackmanWindow(size): a constant.
    pub fn window(&mut self, cx: &Ctx, op: &str) -> R<Outs> {
        cx.arity(1, 1)?;
        let size = match self.konst_ints(cx, 0, "size")?.as_slice() {
            &[n] if (1..=MAX_WINDOW_SIZE as i64).contains(&n) => n as usize,
            v => {
                return Err(cx.err(format!(
                    "input 0 (size) {v:?} must be one integer from 1 to {MAX_WINDOW_SIZE}"
                )));
            }
        };
        let periodic = cx.attr_i_or("periodic", 1)? != 0;
        let span = if periodic { size } else { size - 1 } as f64;
        let tau = std::f64::consts::TAU;
        let v: Vec<f64> = (0..size)
            .map(|n| {
                // 0/0 for a one-point symmetric window is NaN, as in the reference.
                let t = n as f64 / span;
                match op {
                    "HannWindow" => (std::f64::consts::PI * t).sin().powi(2),
                    "HammingWindow" => {
                        let a = 25.0 / 46.0;
                        a - (1.0 - a) * (tau * t).cos()
                    }
                    _ => 0.42 - 0.5 * (tau * t).cos() + 0.08 * (2.0 * tau * t).cos(),
                }
            })
            .collect();
        Ok(konst(self.typed_const(cx, vec![size], v)?))
    }

    /// MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
    /// upper_edge_hertz): the `[dft_length/2 + 1, num_mel_bins]` triangular filters, as ONNX's
    /// reference computes them (bin edges floored to integers).
    pub fn mel_weight_matrix(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(5, 5)?;
        let int = |me: &Self, j: usize, what: &str| -> R<i64> {
            match me.konst_ints(cx, j, what)?.as_slice() {
                &[v] if v >= 1 => Ok(v),
                v => Err(cx.err(format!(
                    "input {j} ({what}) {v:?} must be one positive integer"
                ))),
            }
        };
        let bins = int(self, 0, "num_mel_bins")? as usize;
        let dft_length = int(self, 1, "dft_length")?;
        let rate = int(self, 2, "sample_rate")? as f64;
        let float = |me: &Self, j: usize, what: &str| -> R<f64> {
            match me.konst(cx, j, what)?.as_f64().as_slice() {
                &[v] => Ok(v),
                v => Err(cx.err(format!("input {j} ({what}) {v:?} must be one number"))),
            }
        };
        let lo = float(self, 3, "lower_edge_hertz")?;
        let hi = float(self, 4, "upper_edge_hertz")?;
        let spectrum = (dft_length / 2 + 1) as usize;
        if bins.saturating_mul(spectrum) > MAX_WINDOW_SIZE {
            return Err(cx.err(format!(
                "a {spectrum} × {bins} matrix is larger than the {MAX_WINDOW_SIZE} values folded at import time"
            )));
        }
        let mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / 10f64.ln();
        let (lo_mel, hi_mel) = (mel(lo), mel(hi));
        let step = (hi_mel - lo_mel) / (bins + 2) as f64;
        let edges: Vec<i64> = (0..bins + 2)
            .map(|k| {
                let m = k as f64 * step + lo_mel;
                let hz = 700.0 * (m / 2595.0 * 10f64.ln()).exp_m1();
                (((dft_length + 1) as f64 * hz) / rate).floor() as i64
            })
            .collect();
        let mut out = vec![0.0f64; spectrum * bins];
        let mut set = |j: i64, i: usize, v: f64| -> R<()> {
            if j < 0 || j as usize >= spectrum {
                return Err(cx.err(format!(
                    "mel bin {i} reaches spectrum bin {j}, outside 0..{spectrum} (check the edge frequencies against sample_rate)"
                )));
            }
            out[j as usize * bins + i] = v;
            Ok(())
        };
        for i in 0..bins {
            let (l, c, h) = (edges[i], edges[i + 1], edges[i + 2]);
            if c == l {
                set(c, i, 1.0)?;
            } else {
                for j in l..=c {
                    set(j, i, (j - l) as f64 / (c - l) as f64)?;
                }
            }
            if h > c {
                for j in c..h {
                    set(j, i, (h - j) as f64 / (h - c) as f64)?;
                }
            }
        }
        Ok(konst(self.typed_const(cx, vec![spectrum, bins], out)?))
    }

    /// A constant of the node's `output_datatype` (default float) holding `v`.
    fn typed_const(&self, cx: &Ctx, dims: Vec<usize>, v: Vec<f64>) -> R<ConstTensor> {
        let ty = cx.attr_i_or("output_datatype", dt::FLOAT as i64)? as i32;
        let values = if is_float_type(ty) {
            Values::F(if ty == dt::FLOAT {
                v.into_iter().map(|x| x as f32 as f64).collect()
            } else {
                v
            })
        } else if is_int_type(ty) {
            Values::I(v.into_iter().map(|x| x as i64).collect())
        } else {
            return Err(cx.attr_err(
                "output_datatype",
                format!(
                    "{} is not supported (float and integer types are)",
                    dt::name(ty)
                ),
            ));
        };
        Ok(ConstTensor { ty, dims, values })
    }

    /// The transform of rows `[rows, N]` (real part, optional imaginary part): `(real, imag)`,
    /// `imag` `None` for an inverse onesided transform (a real signal).
    fn dft_rows(
        &mut self,
        cx: &Ctx,
        xr: InstId,
        xi: Option<InstId>,
        spec: &Dft,
    ) -> R<(InstId, Option<InstId>)> {
        let l = spec.length;
        let tau = std::f64::consts::TAU;
        if spec.inverse && spec.onesided {
            // x[n] = Σ_k w_k/L (Xr[k] cos θ - Xi[k] sin θ), θ = 2π k n / L, w_k = 2 but for the
            // DC and (L even) Nyquist bins: numpy's irfft.
            let kin = self.dims(xr)[1].min(l / 2 + 1);
            let xr = self.fit(cx, xr, kin)?;
            let xi = match xi {
                Some(v) => self.fit(cx, v, kin)?,
                None => return Err(cx.err("an inverse onesided DFT needs a complex input")),
            };
            let w = |k: usize| {
                if k == 0 || (l % 2 == 0 && k == l / 2) {
                    1.0
                } else {
                    2.0
                }
            };
            let th = |k: usize, n: usize| tau * ((k * n) % l) as f64 / l as f64;
            let a = self.dft_matrix(kin, l, |k, n| w(k) * th(k, n).cos() / l as f64);
            let b = self.dft_matrix(kin, l, |k, n| -w(k) * th(k, n).sin() / l as f64);
            let yr = self.row_dot(cx, xr, a)?;
            let yb = self.row_dot(cx, xi, b)?;
            return Ok((self.bin(cx, BinaryOp::Add, yr, yb)?, None));
        }
        let k = if spec.onesided && !spec.inverse {
            l / 2 + 1
        } else {
            l
        };
        let xr = self.fit(cx, xr, l)?;
        let xi = match xi {
            Some(v) => Some(self.fit(cx, v, l)?),
            None => None,
        };
        let (sign, scale) = if spec.inverse {
            (1.0, 1.0 / l as f64)
        } else {
            (-1.0, 1.0)
        };
        let th = |n: usize, k: usize| tau * ((n * k) % l) as f64 / l as f64;
        // (xr + i xi)(cos θ + i·sign·sin θ): real xr·C - xi·P, imaginary xr·P + xi·C.
        let c = self.dft_matrix(l, k, |n, k| scale * th(n, k).cos());
        let p = self.dft_matrix(l, k, |n, k| scale * sign * th(n, k).sin());
        let mut yr = self.row_dot(cx, xr, c)?;
        let mut yi = self.row_dot(cx, xr, p)?;
        if let Some(xi) = xi {
            let a = self.row_dot(cx, xi, p)?;
            yr = self.bin(cx, BinaryOp::Subtract, yr, a)?;
            let b = self.row_dot(cx, xi, c)?;
            yi = self.bin(cx, BinaryOp::Add, yi, b)?;
        }
        Ok((yr, Some(yi)))
    }

    /// Rows `[rows, N]` zero-padded or truncated to `[rows, len]`.
    fn fit(&mut self, cx: &Ctx, x: InstId, len: usize) -> R<InstId> {
        let d = self.dims(x);
        if d[1] == len {
            Ok(x)
        } else if d[1] > len {
            self.crop(cx, x, vec![0, 0], vec![d[0], len])
        } else {
            let zero = self.b.scalar("constant", 0.0);
            self.add(
                cx,
                Op::Pad {
                    low: vec![0, 0],
                    high: vec![0, len - d[1]],
                },
                &[x, zero],
            )
        }
    }

    /// A constant `[rows, cols]` f32 matrix.
    fn dft_matrix(&mut self, rows: usize, cols: usize, f: impl Fn(usize, usize) -> f64) -> InstId {
        let v: Vec<f32> = (0..rows)
            .flat_map(|i| (0..cols).map(move |j| (i, j)))
            .map(|(i, j)| f(i, j) as f32)
            .collect();
        self.b
            .constant("constant", Literal::from_f32(vec![rows, cols], &v))
    }

    /// `[rows, n] × [n, k]`.
    fn row_dot(&mut self, cx: &Ctx, x: InstId, m: InstId) -> R<InstId> {
        self.add(
            cx,
            Op::Dot(DotDims {
                lhs_batch: vec![],
                lhs_contracting: vec![1],
                rhs_batch: vec![],
                rhs_contracting: vec![0],
            }),
            &[x, m],
        )
    }
}
