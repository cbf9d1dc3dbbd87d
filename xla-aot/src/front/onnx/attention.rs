//! Scaled dot-product attention as default-domain nodes: the shared core
//! ([`Importer::sdpa`]) and ONNX's `Attention` (opset 23, with the inputs and attributes of 24
//! and 25).
//!
//! Contract: the core takes 4-D Q [B, Nq, S, H], K [B, Nkv, T, H], V [B, Nkv, T, Hv] (Nq a
//! multiple of Nkv: each K/V head serves Nq/Nkv consecutive query heads), scales the scores,
//! caps them (`softcap·tanh(x/softcap)`), adds an optional additive bias broadcastable to
//! [B, Nq, S, T], normalises with softmax over T and multiplies by V; with `guard`, a query row
//! whose bias is all -inf gets probabilities 0 (so Y = 0) instead of NaN. `Attention` follows
//! onnx's reference (`onnx/reference/ops/op_attention.py`) and its function body: 3-D inputs
//! [B, S, N·H] are split into `q_num_heads`/`kv_num_heads` heads; `past_key`/`past_value` are
//! concatenated before K/V (the `present_*` outputs); the bias is the sum of the attention mask
//! (bool: true → 0, false → -inf; a mask shorter than T is padded with -inf), the causal mask
//! `j <= i + offset` (`is_causal`), the window `i + offset - left <= j <= i + offset + right`
//! (`left_window_size`/`right_window_size`) and the key padding `j < nonpad_kv_seqlen[b]`,
//! where offset is the past length, or `nonpad_kv_seqlen[b] - S` for an external cache; Q and K
//! are each scaled by √scale (scale default 1/√H); `qk_matmul_output` is the scores after the
//! softcap (mode 0, 1), after the bias (2) or the probabilities (3). Everything computes in f32
//! (`softmax_precision` is accepted; float16 tensors convert at the C API); with bfloat16 Q each
//! node's result is rounded to bfloat16, √scale too, as onnx's reference computes
//! (`bf16_graph.rs`).

use super::context::{Ctx, Importer, R, ty_of};
use super::elementwise::Outs;
use super::proto::data_type as dt;
use super::rewrite::{Rewrite, attr_i, attr_ints, input_name};
use super::tensor::is_float_type;
use crate::ir::shape::dims_str;

/// How the scores are scaled.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scale {
    /// Q and K each multiplied by √scale (ONNX's function body, so that large scores do not
    /// overflow in float16).
    Split(f64),
    /// The product Q·Kᵀ multiplied by the scale (onnxruntime's contrib kernels: GEMM alpha).
    Product(f32),
}

/// One attention for [`Importer::sdpa`]: value names and their dims.
pub(super) struct Sdpa {
    /// [B, Nq, S, H].
    pub q: String,
    /// [B, Nkv, T, H].
    pub k: String,
    /// [B, Nkv, T, Hv].
    pub v: String,
    pub scale: Scale,
    /// `softcap·tanh(x/softcap)` on the scaled scores when positive.
    pub softcap: f32,
    /// Additive bias broadcastable to [B, Nq, S, T].
    pub bias: Option<String>,
    /// Zero the probabilities of rows whose bias is all -inf.
    pub guard: bool,
}

/// The values [`Importer::sdpa`] computes.
pub(super) struct SdpaOut {
    /// [B, Nq, S, Hv].
    pub y: String,
    /// The scaled scores after the softcap, before the bias.
    pub scores: String,
    /// The scores plus the bias (= `scores` without a bias).
    pub biased: String,
    /// The probabilities (after the guard).
    pub probs: String,
}

impl Importer {
    /// The attention core (see the module doc); `cx` is the node errors name.
    pub(super) fn sdpa(&mut self, cx: &Ctx, rw: &mut Rewrite, a: Sdpa) -> R<SdpaOut> {
        let qd = self.value_dims(cx, &a.q)?;
        let kd = self.value_dims(cx, &a.k)?;
        let vd = self.value_dims(cx, &a.v)?;
        if qd.len() != 4 || kd.len() != 4 || vd.len() != 4 {
            return Err(cx.err(format!(
                "Q, K and V must be 4-D here, found {}, {} and {}",
                dims_str(&qd),
                dims_str(&kd),
                dims_str(&vd)
            )));
        }
        let (b, nq, _s, h) = (qd[0], qd[1], qd[2], qd[3]);
        let (nkv, t) = (kd[1], kd[2]);
        if kd[0] != b || vd[0] != b || kd[3] != h || vd[1] != nkv || vd[2] != t {
            return Err(cx.err(format!(
                "Q {}, K {} and V {} do not fit: they need the same batch, K and V the same heads and length, Q and K the same head size",
                dims_str(&qd),
                dims_str(&kd),
                dims_str(&vd)
            )));
        }
        if nkv == 0 || nq % nkv != 0 {
            return Err(cx.err(format!(
                "{nq} query heads are not a multiple of {nkv} key/value heads"
            )));
        }
        let (mut k, mut v) = (a.k.clone(), a.v.clone());
        if nq != nkv {
            // Each K/V head serves nq/nkv consecutive query heads: [h0, h0, h1, h1, ...].
            let reps = nq / nkv;
            k = self.repeat_heads(cx, rw, &k, &kd, reps)?;
            v = self.repeat_heads(cx, rw, &v, &vd, reps)?;
        }
        let mut q = a.q.clone();
        if let Scale::Split(scale) = a.scale {
            // In Q's type, as the function body casts it (bfloat16: `bf16_graph.rs`).
            let mut root = scale.sqrt() as f32;
            if self.env.get(&q).is_some_and(|v| ty_of(v) == dt::BFLOAT16) {
                root = crate::ir::Precision::Bf16.round(root);
            }
            let root = self.const_f32(rw, root);
            q = self.via1(cx, rw, "Mul", &[q, root.clone()], vec![])?;
            k = self.via1(cx, rw, "Mul", &[k, root], vec![])?;
        }
        let kt = self.via1(
            cx,
            rw,
            "Transpose",
            &[k],
            vec![attr_ints("perm", vec![0, 1, 3, 2])],
        )?;
        let mut scores = self.via1(cx, rw, "MatMul", &[q, kt], vec![])?;
        if let Scale::Product(scale) = a.scale {
            let c = self.const_f32(rw, scale);
            scores = self.via1(cx, rw, "Mul", &[scores, c], vec![])?;
        }
        if a.softcap > 0.0 {
            let cap = self.const_f32(rw, a.softcap);
            let x = self.via1(cx, rw, "Div", &[scores, cap.clone()], vec![])?;
            let x = self.via1(cx, rw, "Tanh", &[x], vec![])?;
            scores = self.via1(cx, rw, "Mul", &[x, cap], vec![])?;
        }
        let biased = match &a.bias {
            Some(bias) => self.via1(cx, rw, "Add", &[scores.clone(), bias.clone()], vec![])?,
            None => scores.clone(),
        };
        let mut probs = self.via1(
            cx,
            rw,
            "Softmax",
            std::slice::from_ref(&biased),
            vec![attr_i("axis", -1)],
        )?;
        if let (true, Some(bias)) = (a.guard, &a.bias) {
            // A row with no attendable key: decided on the bias (the scores may be NaN there).
            let axes = self.const_i64s(rw, vec![1], vec![-1]);
            let row_max = self.via1(
                cx,
                rw,
                "ReduceMax",
                &[bias.clone(), axes],
                vec![attr_i("keepdims", 1)],
            )?;
            let ninf = self.const_f32(rw, f32::NEG_INFINITY);
            let dead = self.via1(cx, rw, "Equal", &[row_max, ninf], vec![])?;
            let zero = self.const_f32(rw, 0.0);
            probs = self.via1(cx, rw, "Where", &[dead, zero, probs], vec![])?;
        }
        let y = self.via1(cx, rw, "MatMul", &[probs.clone(), v], vec![])?;
        Ok(SdpaOut {
            y,
            scores,
            biased,
            probs,
        })
    }

    /// [B, N, T, H] → [B, N·reps, T, H], each head repeated `reps` times in place.
    fn repeat_heads(
        &mut self,
        cx: &Ctx,
        rw: &mut Rewrite,
        x: &str,
        d: &[usize],
        reps: usize,
    ) -> R<String> {
        let s5 = self.const_shape(rw, &[d[0], d[1], 1, d[2], d[3]]);
        let x = self.via1(cx, rw, "Reshape", &[x.to_string(), s5], vec![])?;
        let e5 = self.const_shape(rw, &[d[0], d[1], reps, d[2], d[3]]);
        let x = self.via1(cx, rw, "Expand", &[x, e5], vec![])?;
        let s4 = self.const_shape(rw, &[d[0], d[1] * reps, d[2], d[3]]);
        self.via1(cx, rw, "Reshape", &[x, s4], vec![])
    }

    /// The dims of a value bound under `name`.
    pub(super) fn value_dims(&self, cx: &Ctx, name: &str) -> R<Vec<usize>> {
        match self.env.get(name) {
            Some(v) => Ok(self.dims_of(v)),
            None => Err(cx.err(format!("value `{name}` is not defined"))),
        }
    }

    /// [B, S, N·H] → [B, N, S, H].
    pub(super) fn split_heads(
        &mut self,
        cx: &Ctx,
        rw: &mut Rewrite,
        x: &str,
        heads: usize,
    ) -> R<String> {
        let d = self.value_dims(cx, x)?;
        if d.len() != 3 || heads == 0 || d[2] % heads != 0 {
            return Err(cx.err(format!(
                "a 3-D input {} does not split into {heads} heads (its last dim must be a multiple of the head count)",
                dims_str(&d)
            )));
        }
        let shape = self.const_shape(rw, &[d[0], d[1], heads, d[2] / heads]);
        let x = self.via1(cx, rw, "Reshape", &[x.to_string(), shape], vec![])?;
        self.via1(
            cx,
            rw,
            "Transpose",
            &[x],
            vec![attr_ints("perm", vec![0, 2, 1, 3])],
        )
    }

    /// [B, N, S, H] → [B, S, N·H].
    pub(super) fn merge_heads(&mut self, cx: &Ctx, rw: &mut Rewrite, x: &str) -> R<String> {
        let d = self.value_dims(cx, x)?;
        let x = self.via1(
            cx,
            rw,
            "Transpose",
            &[x.to_string()],
            vec![attr_ints("perm", vec![0, 2, 1, 3])],
        )?;
        let shape = self.const_shape(rw, &[d[0], d[2], d[1] * d[3]]);
        self.via1(cx, rw, "Reshape", &[x, shape], vec![])
    }

    /// ONNX `Attention` (opsets 23 to 25; see the module doc).
    pub fn attention(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(3, 7)?;
        let mut rw = Rewrite {
            node: cx.node,
            index: cx.index,
            next: 0,
        };
        let inp = |j: usize| input_name(cx, j);
        for j in 0..3 {
            let ty = ty_of(&self.input(cx, j)?);
            if !is_float_type(ty) {
                return Err(cx.err(format!(
                    "input {j} has element type {}; Q, K and V must be float",
                    dt::name(ty)
                )));
            }
        }
        let qd = self.in_dims(cx, 0)?;
        let rank = qd.len();
        if !(rank == 3 || rank == 4)
            || self.in_dims(cx, 1)?.len() != rank
            || self.in_dims(cx, 2)?.len() != rank
        {
            return Err(cx.err(format!(
                "Q, K and V must all be 3-D [batch, seq, heads·size] or all 4-D [batch, heads, seq, size], found {}, {} and {}",
                dims_str(&qd),
                dims_str(&self.in_dims(cx, 1)?),
                dims_str(&self.in_dims(cx, 2)?)
            )));
        }
        let (mut q, mut k, mut v) = (inp(0), inp(1), inp(2));
        if rank == 3 {
            let heads = |name: &str| -> R<usize> {
                match cx.attr_i(name)? {
                    Some(n) if n > 0 => Ok(n as usize),
                    _ => Err(cx.attr_err(name, "must be a positive head count for 3-D inputs")),
                }
            };
            let (nq, nkv) = (heads("q_num_heads")?, heads("kv_num_heads")?);
            q = self.split_heads(cx, &mut rw, &q, nq)?;
            k = self.split_heads(cx, &mut rw, &k, nkv)?;
            v = self.split_heads(cx, &mut rw, &v, nkv)?;
        }
        let (has_pk, has_pv) = (cx.has_input(4), cx.has_input(5));
        if has_pk != has_pv {
            return Err(cx.err("past_key and past_value must be given together"));
        }
        let nonpad = cx.has_input(6);
        if nonpad && has_pk {
            return Err(cx.err("nonpad_kv_seqlen cannot be combined with past_key/past_value"));
        }
        let mut past = 0;
        if has_pk {
            past = self.in_dims(cx, 4)?.get(2).copied().unwrap_or(0);
            let axis = vec![attr_i("axis", 2)];
            k = self.via1(cx, &mut rw, "Concat", &[inp(4), k], axis.clone())?;
            v = self.via1(cx, &mut rw, "Concat", &[inp(5), v], axis)?;
        }
        let q4 = self.value_dims(cx, &q)?;
        let k4 = self.value_dims(cx, &k)?;
        let (b, s, h, t) = (q4[0], q4[2], q4[3], k4[2]);
        let scale = if cx.has_attr("scale") {
            cx.attr_f_or("scale", 1.0)? as f64
        } else {
            1.0 / (h as f64).sqrt()
        };
        let causal = cx.attr_i_or("is_causal", 0)? != 0;
        let left = cx.attr_i_or("left_window_size", -1)?;
        let right = cx.attr_i_or("right_window_size", -1)?;
        for (name, w) in [("left_window_size", left), ("right_window_size", right)] {
            if w < -1 {
                return Err(cx.attr_err(name, format!("{w} must be -1 (unbounded) or >= 0")));
            }
        }
        let mode = cx.attr_i_or("qk_matmul_output_mode", 0)?;
        if !(0..=3).contains(&mode) {
            return Err(cx.attr_err(
                "qk_matmul_output_mode",
                format!("{mode} is not one of 0, 1, 2, 3"),
            ));
        }

        // The additive bias: a sum of parts, each 0 or -inf where a rule forbids a key.
        let mut parts = Vec::new();
        if cx.has_input(3) {
            parts.push(self.attention_mask(cx, &mut rw, t)?);
        }
        let offset = if nonpad {
            // offset[b] = nonpad_kv_seqlen[b] - S, as f32 [B, 1, 1].
            let n = self.via1(
                cx,
                &mut rw,
                "Cast",
                &[inp(6)],
                vec![attr_i("to", dt::FLOAT as i64)],
            )?;
            let shape = self.const_shape(&mut rw, &[b, 1, 1]);
            let n = self.via1(cx, &mut rw, "Reshape", &[n, shape], vec![])?;
            let len = self.const_f32(&mut rw, s as f32);
            Offset::PerBatch(self.via1(cx, &mut rw, "Sub", &[n, len], vec![])?)
        } else {
            Offset::Fixed(past as i64)
        };
        // d[i][j] = j - i: causal allows d <= offset, the window offset - left <= d <= offset + right.
        let d: Vec<i64> = (0..s)
            .flat_map(|i| (0..t).map(move |j| j as i64 - i as i64))
            .collect();
        if causal {
            parts.push(self.band(cx, &mut rw, &d, (s, t), &offset, Bound::Upper(0))?);
        }
        if left >= 0 {
            parts.push(self.band(cx, &mut rw, &d, (s, t), &offset, Bound::Lower(left))?);
        }
        if right >= 0 {
            parts.push(self.band(cx, &mut rw, &d, (s, t), &offset, Bound::Upper(right))?);
        }
        if nonpad {
            // j < nonpad_kv_seqlen[b]: [B, 1, 1, T].
            let n = self.via1(
                cx,
                &mut rw,
                "Cast",
                &[inp(6)],
                vec![attr_i("to", dt::FLOAT as i64)],
            )?;
            let shape = self.const_shape(&mut rw, &[b, 1, 1, 1]);
            let n = self.via1(cx, &mut rw, "Reshape", &[n, shape], vec![])?;
            let j = self.const_f32s(&mut rw, vec![t], (0..t).map(|j| j as f32).collect());
            let ok = self.via1(cx, &mut rw, "Less", &[j, n], vec![])?;
            parts.push(self.neg_inf_where_not(cx, &mut rw, ok)?);
        }
        let mut bias = None;
        for p in parts {
            bias = Some(match bias {
                None => p,
                Some(acc) => self.via1(cx, &mut rw, "Add", &[acc, p], vec![])?,
            });
        }
        let out = self.sdpa(
            cx,
            &mut rw,
            Sdpa {
                q,
                k: k.clone(),
                v: v.clone(),
                scale: Scale::Split(scale),
                softcap: cx.attr_f_or("softcap", 0.0)?,
                bias,
                guard: true,
            },
        )?;
        let y = if rank == 3 {
            self.merge_heads(cx, &mut rw, &out.y)?
        } else {
            out.y
        };
        let qk = match mode {
            0 | 1 => out.scores,
            2 => out.biased,
            _ => out.probs,
        };
        Ok([y, k, v, qk]
            .iter()
            .map(|n| self.env.get(n).cloned())
            .collect())
    }

    /// `attn_mask` as an additive f32 bias: bool true → 0, false → -inf; a last dim shorter than
    /// the key length `t` is padded with -inf.
    fn attention_mask(&mut self, cx: &Ctx, rw: &mut Rewrite, t: usize) -> R<String> {
        let m = input_name(cx, 3);
        let ty = ty_of(&self.input(cx, 3)?);
        let md = self.in_dims(cx, 3)?;
        let last = md.last().copied().unwrap_or(0);
        if md.is_empty() || md.len() > 4 || last > t {
            return Err(cx.err(format!(
                "attn_mask {} must have rank 1 to 4 and a last dim of at most the key length {t}",
                dims_str(&md)
            )));
        }
        let mut m = if ty == dt::BOOL {
            self.neg_inf_where_not(cx, rw, m)?
        } else if is_float_type(ty) {
            m
        } else {
            return Err(cx.err(format!(
                "attn_mask has element type {}; it must be bool or float",
                dt::name(ty)
            )));
        };
        if last < t {
            let mut pd = md.clone();
            *pd.last_mut().unwrap() = t - last;
            let n = pd.iter().product();
            let pad = self.const_f32s(rw, pd, vec![f32::NEG_INFINITY; n]);
            let axis = vec![attr_i("axis", -1)];
            m = self.via1(cx, rw, "Concat", &[m, pad], axis)?;
        }
        Ok(m)
    }

    /// 0 where the bool `ok` holds, -inf elsewhere.
    fn neg_inf_where_not(&mut self, cx: &Ctx, rw: &mut Rewrite, ok: String) -> R<String> {
        let zero = self.const_f32(rw, 0.0);
        let ninf = self.const_f32(rw, f32::NEG_INFINITY);
        self.via1(cx, rw, "Where", &[ok, zero, ninf], vec![])
    }

    /// The bias of one band rule on `d[i][j] = j - i` ([S, T] row-major): `Upper(r)` allows
    /// `d <= offset + r`, `Lower(l)` allows `d >= offset - l`. A fixed offset gives an [S, T]
    /// constant, a per-batch one [B, 1, S, T].
    fn band(
        &mut self,
        cx: &Ctx,
        rw: &mut Rewrite,
        d: &[i64],
        (s, t): (usize, usize),
        offset: &Offset,
        bound: Bound,
    ) -> R<String> {
        match offset {
            Offset::Fixed(off) => {
                let v = d
                    .iter()
                    .map(|&x| {
                        let ok = match bound {
                            Bound::Upper(r) => x <= off + r,
                            Bound::Lower(l) => x >= off - l,
                        };
                        if ok { 0.0 } else { f32::NEG_INFINITY }
                    })
                    .collect();
                Ok(self.const_f32s(rw, vec![s, t], v))
            }
            Offset::PerBatch(off) => {
                // Upper: d - r <= off; Lower: off <= d + l.
                let (shift, upper) = match bound {
                    Bound::Upper(r) => (-r, true),
                    Bound::Lower(l) => (l, false),
                };
                let c = self.const_f32s(
                    rw,
                    vec![s, t],
                    d.iter().map(|&x| (x + shift) as f32).collect(),
                );
                let ins = if upper {
                    [c, off.clone()]
                } else {
                    [off.clone(), c]
                };
                let ok = self.via1(cx, rw, "LessOrEqual", &ins, vec![])?;
                let bias = self.neg_inf_where_not(cx, rw, ok)?;
                let b = self.value_dims(cx, off)?[0];
                let shape = self.const_shape(rw, &[b, 1, s, t]);
                self.via1(cx, rw, "Reshape", &[bias, shape], vec![])
            }
        }
    }
}

/// The number of valid keys before the query block: a constant (the past length), or per batch
/// (`nonpad_kv_seqlen[b] - S`, f32 [B, 1, 1]).
enum Offset {
    Fixed(i64),
    PerBatch(String),
}

/// One side of a band rule on `j - i` (see [`Importer::band`]).
#[derive(Clone, Copy)]
enum Bound {
    Upper(i64),
    Lower(i64),
}
