//! Recurrent layers: ONNX LSTM, GRU and RNN, unrolled over the sequence length the build fixes.
//!
//! Contract: [`Importer::recurrent`] lowers one LSTM/GRU/RNN node (forward, reverse or
//! bidirectional; `layout` 0 or 1; optional bias, initial states and LSTM peepholes; `clip`;
//! GRU's `linear_before_reset`; the activations Sigmoid, Tanh and Relu, defaulting as ONNX says)
//! to primitives: one product of the whole input sequence with the input weights, then per time
//! step one product of the hidden state with the recurrent weights and the elementwise gate
//! arithmetic, which the fusion pass turns into one kernel per step. `sequence_lens`, when given,
//! must be a constant equal to the sequence length everywhere (a padded batch is an error).
//! Outputs follow the ONNX shapes: Y `[T, D, B, H]` (layout 1: `[B, T, D, H]`), Y_h and Y_c
//! `[D, B, H]` (layout 1: `[B, D, H]`).

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, rt};
use super::proto::data_type as dt;
use crate::ir::shape::dims_str;
use crate::ir::{BinaryOp, DotDims, InstId, Op, UnaryOp};

/// The kind of recurrent cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell {
    /// `Ht = f(Xt·Wᵀ + Ht-1·Rᵀ + b)`.
    Rnn,
    /// Update, reset and hidden gates (`zrh` order).
    Gru,
    /// Input, output, forget and cell gates (`iofc` order).
    Lstm,
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// Weights and biases of one direction.
struct Direction {
    /// `[G·H, H]` recurrent weights.
    r: InstId,
    /// `[T, B, G·H]` input products with the input bias (and, but for GRU's hidden gate, the
    /// recurrent bias) added.
    xw: InstId,
    /// GRU: the recurrent bias of the hidden gate, broadcast to `[B, H]`.
    rbh: Option<InstId>,
    /// LSTM peepholes `[B, H]` each (i, o, f).
    peep: Option<[InstId; 3]>,
    h0: InstId,
    c0: Option<InstId>,
    acts: Vec<String>,
}

impl Importer {
    /// Columns `[lo, hi)` of a matrix.
    fn cols(&mut self, cx: &Ctx, x: InstId, lo: usize, hi: usize) -> R<InstId> {
        let rows = self.dims(x)[0];
        self.crop(cx, x, vec![0, lo], vec![rows, hi])
    }

    /// `x · wᵀ` for `x [M, K]`, `w [N, K]`.
    fn times_t(&mut self, cx: &Ctx, x: InstId, w: InstId) -> R<InstId> {
        self.add(
            cx,
            Op::Dot(DotDims {
                lhs_contracting: vec![1],
                rhs_contracting: vec![1],
                ..DotDims::default()
            }),
            &[x, w],
        )
    }

    fn activation_of(&mut self, cx: &Ctx, name: &str, x: InstId) -> R<InstId> {
        match name {
            "Sigmoid" => self.un(cx, UnaryOp::Logistic, x),
            "Tanh" => self.un(cx, UnaryOp::Tanh, x),
            "Relu" => {
                let z = self.splat(cx, 0.0, &self.dims(x))?;
                self.bin(cx, BinaryOp::Maximum, x, z)
            }
            other => Err(cx.attr_err(
                "activations",
                format!("`{other}` is not supported; Sigmoid, Tanh and Relu are"),
            )),
        }
    }

    /// `x` clamped to `[-clip, clip]`, when the node has `clip`.
    fn clipped(&mut self, cx: &Ctx, x: InstId, clip: Option<f32>) -> R<InstId> {
        match clip {
            None => Ok(x),
            Some(c) => {
                let lo = self.b.scalar("constant", -c);
                let hi = self.b.scalar("constant", c);
                self.add(cx, Op::Clamp, &[lo, x, hi])
            }
        }
    }

    /// An optional `[D, ...]` input's slice for direction `d`, reshaped to `dims`, or `None`.
    fn per_direction(&mut self, cx: &Ctx, j: usize, d: usize, dims: &[usize]) -> R<Option<InstId>> {
        if !cx.has_input(j) {
            return Ok(None);
        }
        let x = self.rt_f32(cx, j)?;
        let xd = self.dims(x);
        if xd.first().is_none_or(|&n| n <= d) {
            return Err(cx.err(format!(
                "input {j} {} has no entry for direction {d}",
                dims_str(&xd)
            )));
        }
        let mut starts = vec![0; xd.len()];
        let mut limits = xd.clone();
        starts[0] = d;
        limits[0] = d + 1;
        let s = self.crop(cx, x, starts, limits)?;
        if self.dims(s).iter().product::<usize>() != dims.iter().product::<usize>() {
            return Err(cx.err(format!(
                "input {j} {} does not hold {} per direction",
                dims_str(&xd),
                dims_str(dims)
            )));
        }
        Ok(Some(self.reshape(cx, s, dims.to_vec())?))
    }

    /// LSTM, GRU or RNN.
    pub fn recurrent(&mut self, cx: &Ctx, cell: Cell) -> R<Outs> {
        cx.arity(3, if cell == Cell::Lstm { 8 } else { 6 })?;
        let g = cell.gates();
        let x = self.rt_f32(cx, 0)?;
        let xd = self.dims(x);
        if xd.len() != 3 {
            return Err(cx.err(format!("X {} must have rank 3", dims_str(&xd))));
        }
        let layout = cx.attr_i_or("layout", 0)?;
        let x = match layout {
            0 => x,
            1 => self.add(
                cx,
                Op::Transpose {
                    permutation: vec![1, 0, 2],
                },
                &[x],
            )?,
            l => return Err(cx.attr_err("layout", format!("{l} is not 0 or 1"))),
        };
        let [t_len, batch, input] = <[usize; 3]>::try_from(self.dims(x)).expect("rank 3");
        let w = self.rt_f32(cx, 1)?;
        let r = self.rt_f32(cx, 2)?;
        let (wd, rd) = (self.dims(w), self.dims(r));
        let hidden = match cx.attr_i("hidden_size")? {
            Some(h) if h > 0 => h as usize,
            Some(h) => return Err(cx.attr_err("hidden_size", format!("{h} is not positive"))),
            None => rd.get(2).copied().unwrap_or(0),
        };
        let dirs = match cx.attr_s("direction")?.as_deref().unwrap_or("forward") {
            "forward" => vec![false],
            "reverse" => vec![true],
            "bidirectional" => vec![false, true],
            other => {
                return Err(cx.attr_err(
                    "direction",
                    format!("`{other}` is not forward, reverse or bidirectional"),
                ));
            }
        };
        let nd = dirs.len();
        let gh = g * hidden;
        if wd != [nd, gh, input] || rd != [nd, gh, hidden] {
            return Err(cx.err(format!(
                "W {} and R {} must be [{nd}, {gh}, {input}] and [{nd}, {gh}, {hidden}] ({g} gates of hidden size {hidden}, {nd} direction(s))",
                dims_str(&wd),
                dims_str(&rd)
            )));
        }
        if t_len == 0 || batch == 0 {
            return Err(cx.err("the sequence or the batch is empty"));
        }
        if cx.has_input(4) {
            let lens = self.konst_ints(cx, 4, "sequence_lens")?;
            if lens.iter().any(|&l| l != t_len as i64) {
                return Err(cx
                    .err(format!(
                        "sequence_lens {lens:?} differ from the sequence length {t_len}; padded batches are not supported"
                    ))
                    .hint("run each sequence at its own length (fix it with --input-shape) or drop sequence_lens"));
            }
        }
        let clip = match cx.attr_f_or("clip", f32::INFINITY)? {
            c if c.is_infinite() => None,
            c if c > 0.0 => Some(c),
            c => return Err(cx.attr_err("clip", format!("{c} is not positive"))),
        };
        if cx.has_attr("activation_alpha") || cx.has_attr("activation_beta") {
            return Err(cx.err(
                "`activation_alpha`/`activation_beta` are not supported (Sigmoid, Tanh and Relu take none)",
            ));
        }
        if cell == Cell::Lstm && cx.attr_i_or("input_forget", 0)? != 0 {
            return Err(cx.attr_err(
                "input_forget",
                "1 (coupled input and forget gates) is not supported",
            ));
        }
        let linear_before_reset = cell == Cell::Gru && cx.attr_i_or("linear_before_reset", 0)? != 0;
        let per_dir = cell.default_activations().len();
        let acts: Vec<String> = match cx.attr_strings("activations")? {
            Some(a) if a.len() == per_dir * nd => a,
            Some(a) => {
                return Err(cx.attr_err(
                    "activations",
                    format!(
                        "has {} entries; {nd} direction(s) need {}",
                        a.len(),
                        per_dir * nd
                    ),
                ));
            }
            None => (0..nd)
                .flat_map(|_| cell.default_activations().iter().map(|s| s.to_string()))
                .collect(),
        };

        // The input products of the whole sequence, one per direction.
        let x2 = self.reshape(cx, x, vec![t_len * batch, input])?;
        let mut outs_y = Vec::new();
        let mut outs_h = Vec::new();
        let mut outs_c = Vec::new();
        for (d, &reverse) in dirs.iter().enumerate() {
            let wdir = self
                .per_direction(cx, 1, d, &[gh, input])?
                .expect("W is required");
            let rdir = self
                .per_direction(cx, 2, d, &[gh, hidden])?
                .expect("R is required");
            let mut xw = self.times_t(cx, x2, wdir)?;
            let mut rbh = None;
            if let Some(b) = self.per_direction(cx, 3, d, &[2 * gh])? {
                let wb = self.crop(cx, b, vec![0], vec![gh])?;
                let rb = self.crop(cx, b, vec![gh], vec![2 * gh])?;
                // GRU's hidden-gate recurrent bias sits inside the reset product.
                let (rb_in, rb_h) = if cell == Cell::Gru {
                    let zr = self.crop(cx, rb, vec![0], vec![2 * hidden])?;
                    let zero = self.splat(cx, 0.0, &[hidden])?;
                    let h = self.crop(cx, rb, vec![2 * hidden], vec![gh])?;
                    let zr0 = self.add(cx, Op::Concatenate { dimension: 0 }, &[zr, zero])?;
                    (zr0, Some(h))
                } else {
                    (rb, None)
                };
                let bias = self.bin(cx, BinaryOp::Add, wb, rb_in)?;
                let bias = self.stretch(cx, bias, &[t_len * batch, gh])?;
                xw = self.bin(cx, BinaryOp::Add, xw, bias)?;
                if let Some(h) = rb_h {
                    let h = self.reshape(cx, h, vec![1, hidden])?;
                    rbh = Some(self.stretch(cx, h, &[batch, hidden])?);
                }
            }
            let xw = self.reshape(cx, xw, vec![t_len, batch, gh])?;
            let h0 = match self.per_direction(cx, 5, d, &[batch, hidden])? {
                Some(h) => h,
                None => self.splat(cx, 0.0, &[batch, hidden])?,
            };
            let c0 = match cell {
                Cell::Lstm => Some(match self.per_direction(cx, 6, d, &[batch, hidden])? {
                    Some(c) => c,
                    None => self.splat(cx, 0.0, &[batch, hidden])?,
                }),
                _ => None,
            };
            let peep = match cell {
                Cell::Lstm => match self.per_direction(cx, 7, d, &[3 * hidden])? {
                    Some(p) => {
                        let mut ps = Vec::new();
                        for k in 0..3 {
                            let s = self.crop(cx, p, vec![k * hidden], vec![(k + 1) * hidden])?;
                            let s = self.reshape(cx, s, vec![1, hidden])?;
                            ps.push(self.stretch(cx, s, &[batch, hidden])?);
                        }
                        Some([ps[0], ps[1], ps[2]])
                    }
                    None => None,
                },
                _ => None,
            };
            let dir = Direction {
                r: rdir,
                xw,
                rbh,
                peep,
                h0,
                c0,
                acts: acts[d * per_dir..(d + 1) * per_dir].to_vec(),
            };
            let (ys, h, c) = self.unroll(cx, cell, &dir, reverse, clip, linear_before_reset)?;
            // Y of this direction: [T, 1, B, H] in time order.
            let mut steps = Vec::new();
            for y in ys {
                steps.push(self.reshape(cx, y, vec![1, 1, batch, hidden])?);
            }
            outs_y.push(self.add(cx, Op::Concatenate { dimension: 0 }, &steps)?);
            outs_h.push(self.reshape(cx, h, vec![1, batch, hidden])?);
            if let Some(c) = c {
                outs_c.push(self.reshape(cx, c, vec![1, batch, hidden])?);
            }
        }
        let cat = |me: &mut Importer, xs: &[InstId], dim: usize| -> R<InstId> {
            if xs.len() == 1 {
                Ok(xs[0])
            } else {
                me.add(cx, Op::Concatenate { dimension: dim }, xs)
            }
        };
        let mut y = cat(self, &outs_y, 1)?;
        let mut yh = cat(self, &outs_h, 0)?;
        let mut yc = if outs_c.is_empty() {
            None
        } else {
            Some(cat(self, &outs_c, 0)?)
        };
        if layout == 1 {
            let p4 = Op::Transpose {
                permutation: vec![2, 0, 1, 3],
            };
            y = self.add(cx, p4, &[y])?;
            let p3 = Op::Transpose {
                permutation: vec![1, 0, 2],
            };
            yh = self.add(cx, p3.clone(), &[yh])?;
            if let Some(c) = yc {
                yc = Some(self.add(cx, p3, &[c])?);
            }
        }
        let mut outs = rt(y, dt::FLOAT);
        outs.extend(rt(yh, dt::FLOAT));
        if let Some(c) = yc {
            outs.extend(rt(c, dt::FLOAT));
        }
        Ok(outs)
    }

    /// The time steps of one direction: Y per step in time order, the last H (and C).
    fn unroll(
        &mut self,
        cx: &Ctx,
        cell: Cell,
        dir: &Direction,
        reverse: bool,
        clip: Option<f32>,
        linear_before_reset: bool,
    ) -> R<(Vec<InstId>, InstId, Option<InstId>)> {
        let [t_len, batch, gh] = <[usize; 3]>::try_from(self.dims(dir.xw)).expect("rank 3");
        let hidden = gh / cell.gates();
        let mut h = dir.h0;
        let mut c = dir.c0;
        let mut ys = vec![h; t_len];
        let order: Vec<usize> = if reverse {
            (0..t_len).rev().collect()
        } else {
            (0..t_len).collect()
        };
        // GRU's hidden gate reads the reset hidden state: its recurrent weights apart.
        let (r_main, r_h) = if cell == Cell::Gru && !linear_before_reset {
            let zr = self.crop(cx, dir.r, vec![0, 0], vec![2 * hidden, hidden])?;
            let h = self.crop(cx, dir.r, vec![2 * hidden, 0], vec![gh, hidden])?;
            (zr, Some(h))
        } else {
            (dir.r, None)
        };
        for &t in &order {
            let xt = self.crop(cx, dir.xw, vec![t, 0, 0], vec![t + 1, batch, gh])?;
            let xt = self.reshape(cx, xt, vec![batch, gh])?;
            let hr = self.times_t(cx, h, r_main)?;
            match cell {
                Cell::Rnn => {
                    let a = self.bin(cx, BinaryOp::Add, xt, hr)?;
                    let a = self.clipped(cx, a, clip)?;
                    h = self.activation_of(cx, &dir.acts[0], a)?;
                }
                Cell::Lstm => {
                    let cp = c.expect("an LSTM has a cell state");
                    let a = self.bin(cx, BinaryOp::Add, xt, hr)?;
                    let mut gate = Vec::new();
                    for k in 0..4 {
                        gate.push(self.cols(cx, a, k * hidden, (k + 1) * hidden)?);
                    }
                    let (mut i, mut o, mut f, cc) = (gate[0], gate[1], gate[2], gate[3]);
                    if let Some([pi, _, pf]) = dir.peep {
                        let t1 = self.bin(cx, BinaryOp::Multiply, pi, cp)?;
                        i = self.bin(cx, BinaryOp::Add, i, t1)?;
                        let t2 = self.bin(cx, BinaryOp::Multiply, pf, cp)?;
                        f = self.bin(cx, BinaryOp::Add, f, t2)?;
                    }
                    let i = self.clipped(cx, i, clip)?;
                    let i = self.activation_of(cx, &dir.acts[0], i)?;
                    let f = self.clipped(cx, f, clip)?;
                    let f = self.activation_of(cx, &dir.acts[0], f)?;
                    let cc = self.clipped(cx, cc, clip)?;
                    let cc = self.activation_of(cx, &dir.acts[1], cc)?;
                    let keep = self.bin(cx, BinaryOp::Multiply, f, cp)?;
                    let new = self.bin(cx, BinaryOp::Multiply, i, cc)?;
                    let cn = self.bin(cx, BinaryOp::Add, keep, new)?;
                    if let Some([_, po, _]) = dir.peep {
                        let t3 = self.bin(cx, BinaryOp::Multiply, po, cn)?;
                        o = self.bin(cx, BinaryOp::Add, o, t3)?;
                    }
                    let o = self.clipped(cx, o, clip)?;
                    let o = self.activation_of(cx, &dir.acts[0], o)?;
                    let hc = self.activation_of(cx, &dir.acts[2], cn)?;
                    h = self.bin(cx, BinaryOp::Multiply, o, hc)?;
                    c = Some(cn);
                }
                Cell::Gru => {
                    let xz = self.cols(cx, xt, 0, hidden)?;
                    let xr = self.cols(cx, xt, hidden, 2 * hidden)?;
                    let xh = self.cols(cx, xt, 2 * hidden, gh)?;
                    let hz = self.cols(cx, hr, 0, hidden)?;
                    let hrr = self.cols(cx, hr, hidden, 2 * hidden)?;
                    let z = self.bin(cx, BinaryOp::Add, xz, hz)?;
                    let z = self.clipped(cx, z, clip)?;
                    let z = self.activation_of(cx, &dir.acts[0], z)?;
                    let r = self.bin(cx, BinaryOp::Add, xr, hrr)?;
                    let r = self.clipped(cx, r, clip)?;
                    let r = self.activation_of(cx, &dir.acts[0], r)?;
                    let mut rec = match r_h {
                        // (r ⊙ H)·Rhᵀ + Rbh
                        Some(rh) => {
                            let rhp = self.bin(cx, BinaryOp::Multiply, r, h)?;
                            self.times_t(cx, rhp, rh)?
                        }
                        // r ⊙ (H·Rhᵀ + Rbh)
                        None => self.cols(cx, hr, 2 * hidden, gh)?,
                    };
                    if let Some(b) = dir.rbh {
                        rec = self.bin(cx, BinaryOp::Add, rec, b)?;
                    }
                    if r_h.is_none() {
                        rec = self.bin(cx, BinaryOp::Multiply, r, rec)?;
                    }
                    let a = self.bin(cx, BinaryOp::Add, xh, rec)?;
                    let a = self.clipped(cx, a, clip)?;
                    let hh = self.activation_of(cx, &dir.acts[1], a)?;
                    // H = (1 - z) ⊙ h~ + z ⊙ H-1 = h~ + z ⊙ (H-1 - h~)
                    let diff = self.bin(cx, BinaryOp::Subtract, h, hh)?;
                    let zd = self.bin(cx, BinaryOp::Multiply, z, diff)?;
                    h = self.bin(cx, BinaryOp::Add, hh, zd)?;
                }
            }
            ys[t] = h;
        }
        Ok((ys, h, c))
    }
}
