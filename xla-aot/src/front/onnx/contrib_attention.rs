//! onnxruntime's BERT-class `com.microsoft` attention ops, rewritten as default-domain nodes
//! around the attention core of `attention.rs`: `Attention` (packed Q/K/V projection),
//! `MultiHeadAttention` (separate Q/K/V) and `EmbedLayerNormalization`.
//!
//! Contract (semantics of onnxruntime's CPU kernels, `docs/ContribOperators.md`):
//! - `Attention(input [B,S,D], weights [D, Dq+Dk+Dv], bias?, mask_index?, past?,
//!   attention_bias?)`: Q|K|V = input·weights + bias split at `qkv_hidden_sizes` (default three
//!   equal parts), `num_heads` heads each; scores = scale·Q·Kᵀ (scale default 1/√(Dq/N)) +
//!   attention_bias + mask; mask_index is one of [`MASK_FORMS`] and a masked key adds
//!   `mask_filter_value` (default [`MASK_FILTER_VALUE`]); `unidirectional` masks keys after the
//!   query with the lowest float (as onnxruntime does, so a row whose visible keys are all
//!   padding still attends to them). Outputs: [B, S, Dv] and `present` [2, B, N, S, H] (K and
//!   V). `past`, `past_sequence_length`, `do_rotary` and `past_present_share_buffer` are
//!   refused naming the node.
//! - `MultiHeadAttention(query [B,S,D], key [B,T,D], value [B,T,Dv], bias?, key_padding_mask?,
//!   attention_bias?)`: the same core with Q/K/V given (bias added to each); outputs [B, S, Dv],
//!   `present_key`/`present_value` ([B, N, T, H]). Packed Q/K/V, the past cache and
//!   `cache_indirection` are refused.
//! - `EmbedLayerNormalization(input_ids, segment_ids?, word_embedding, position_embedding,
//!   segment_embedding?, gamma, beta, mask?, position_ids?)`: LayerNorm(word[ids] +
//!   position[position_ids or 0..S] + segment[segment_ids]) over the last axis (`epsilon`
//!   default [`EMBED_LAYER_NORM_EPSILON`]); `mask_index` = the number of non-zero mask
//!   entries of each row (int32 [B], 0 without a mask), `embedding_sum` = the sum before the
//!   normalisation.

use super::attention::{Scale, Sdpa};
use super::context::{Ctx, Importer, R, ty_of};
use super::elementwise::Outs;
use super::proto::data_type as dt;
use super::rewrite::{Rewrite, attr_f, attr_i, input_name};
use super::tensor::is_int_type;
use crate::ir::shape::dims_str;

/// onnxruntime's default `mask_filter_value` (added to the scores of masked keys).
pub const MASK_FILTER_VALUE: f32 = -10000.0;

/// EmbedLayerNormalization's default `epsilon` (onnxruntime's `kDefaultEmbedLayerNormEpsilon`).
pub const EMBED_LAYER_NORM_EPSILON: f32 = 1e-12;

/// The mask_index / key_padding_mask shapes we import.
pub const MASK_FORMS: &str = "[B] key lengths, [2B] end and start positions, [B, T] or [B, S, T] 0/1 masks, or a dummy [1, 1] / [B, 1]";

impl Importer {
    /// `com.microsoft` `Attention` (see the module doc).
    pub(super) fn ms_attention(&mut self, cx: &Ctx, rw: &mut Rewrite) -> R<Outs> {
        cx.arity(2, 7)?;
        for (j, what) in [(4, "past"), (6, "past_sequence_length")] {
            if cx.has_input(j) {
                return Err(self.refuse(cx, &format!("input {j} ({what})")));
            }
        }
        for attr in ["do_rotary", "past_present_share_buffer"] {
            if cx.attr_i_or(attr, 0)? != 0 {
                return Err(self.refuse(cx, &format!("`{attr}` = 1")));
            }
        }
        let n = self.num_heads(cx)?;
        let xd = self.in_dims(cx, 0)?;
        let wd = self.in_dims(cx, 1)?;
        if xd.len() != 3 || wd.len() != 2 || wd[0] != xd[2] {
            return Err(cx.err(format!(
                "input {} and weights {} must be [batch, seq, hidden] and [hidden, Dq + Dk + Dv]",
                dims_str(&xd),
                dims_str(&wd)
            )));
        }
        let sizes = match cx.attr_ints("qkv_hidden_sizes")? {
            Some(v) if v.len() == 3 && v.iter().all(|&x| x > 0) => {
                v.iter().map(|&x| x as usize).collect::<Vec<_>>()
            }
            Some(v) => {
                return Err(cx.attr_err(
                    "qkv_hidden_sizes",
                    format!("{v:?} must be three positive sizes"),
                ));
            }
            None => vec![wd[1] / 3; 3],
        };
        if sizes.iter().sum::<usize>() != wd[1] || sizes[0] != sizes[1] {
            return Err(cx.err(format!(
                "weights {} do not split into Q, K, V of {sizes:?} (Q and K need the same size)",
                dims_str(&wd)
            )));
        }
        let inp = |j: usize| input_name(cx, j);
        let mut qkv = self.via1(cx, rw, "MatMul", &[inp(0), inp(1)], vec![])?;
        if cx.has_input(2) {
            qkv = self.via1(cx, rw, "Add", &[qkv, inp(2)], vec![])?;
        }
        let split = self.const_shape(rw, &sizes);
        let parts = self.via_n(cx, rw, "Split", &[qkv, split], 3, vec![attr_i("axis", -1)])?;
        let mut heads = Vec::new();
        for p in &parts {
            heads.push(self.split_heads(cx, rw, p, n)?);
        }
        let (q, k, v) = (heads[0].clone(), heads[1].clone(), heads[2].clone());
        let (b, s) = (xd[0], xd[1]);
        let bias = self.ms_bias(cx, rw, (b, s, s), 3, 5)?;
        let y = self.ms_core(cx, rw, [q, k.clone(), v.clone()], sizes[0] / n, bias)?;
        let present = if cx.node.output.get(1).is_some_and(|o| !o.is_empty()) {
            if sizes[1] != sizes[2] {
                return Err(
                    cx.err("output 1 (present) needs K and V of the same size (qkv_hidden_sizes)")
                );
            }
            let axes = self.const_i64s(rw, vec![1], vec![0]);
            let k5 = self.via1(cx, rw, "Unsqueeze", &[k, axes.clone()], vec![])?;
            let v5 = self.via1(cx, rw, "Unsqueeze", &[v, axes], vec![])?;
            let p = self.via1(cx, rw, "Concat", &[k5, v5], vec![attr_i("axis", 0)])?;
            self.env.get(&p).cloned()
        } else {
            None
        };
        Ok(vec![self.env.get(&y).cloned(), present])
    }

    /// `com.microsoft` `MultiHeadAttention` with separate 3-D query, key and value.
    pub(super) fn ms_multi_head_attention(&mut self, cx: &Ctx, rw: &mut Rewrite) -> R<Outs> {
        cx.arity(3, 10)?;
        for (j, what) in [
            (6, "past_key"),
            (7, "past_value"),
            (8, "past_sequence_length"),
            (9, "cache_indirection"),
        ] {
            if cx.has_input(j) {
                return Err(self.refuse(cx, &format!("input {j} ({what})")));
            }
        }
        let n = self.num_heads(cx)?;
        let (qd, kd, vd) = (
            self.in_dims(cx, 0)?,
            self.in_dims(cx, 1)?,
            self.in_dims(cx, 2)?,
        );
        if qd.len() != 3 || kd.len() != 3 || vd.len() != 3 {
            return Err(self.refuse(
                cx,
                &format!(
                    "query {}, key {}, value {} (only separate 3-D [batch, seq, hidden] query, key and value are supported, not packed QKV/KV or BNSH keys)",
                    dims_str(&qd),
                    dims_str(&kd),
                    dims_str(&vd)
                ),
            ));
        }
        if kd[2] != qd[2] || kd[1] != vd[1] || kd[0] != qd[0] || vd[0] != qd[0] {
            return Err(cx.err(format!(
                "query {}, key {} and value {} do not fit (same batch; query and key the same hidden size; key and value the same length)",
                dims_str(&qd),
                dims_str(&kd),
                dims_str(&vd)
            )));
        }
        let inp = |j: usize| input_name(cx, j);
        let mut qkv = vec![inp(0), inp(1), inp(2)];
        if cx.has_input(3) {
            let sizes = [qd[2], kd[2], vd[2]];
            let bd = self.in_dims(cx, 3)?;
            if bd != [sizes.iter().sum::<usize>()] {
                return Err(cx.err(format!(
                    "bias {} must be [{}] (query, key and value hidden sizes)",
                    dims_str(&bd),
                    sizes.iter().sum::<usize>()
                )));
            }
            let split = self.const_shape(rw, &sizes);
            let parts = self.via_n(
                cx,
                rw,
                "Split",
                &[inp(3), split],
                3,
                vec![attr_i("axis", 0)],
            )?;
            for (x, p) in qkv.iter_mut().zip(parts) {
                *x = self.via1(cx, rw, "Add", &[x.clone(), p], vec![])?;
            }
        }
        let mut heads = Vec::new();
        for x in &qkv {
            heads.push(self.split_heads(cx, rw, x, n)?);
        }
        let (q, k, v) = (heads[0].clone(), heads[1].clone(), heads[2].clone());
        let bias = self.ms_bias(cx, rw, (qd[0], qd[1], kd[1]), 4, 5)?;
        let y = self.ms_core(cx, rw, [q, k.clone(), v.clone()], qd[2] / n, bias)?;
        Ok(vec![
            self.env.get(&y).cloned(),
            self.env.get(&k).cloned(),
            self.env.get(&v).cloned(),
        ])
    }

    /// Softmax attention of 4-D heads with onnxruntime's scaling, merged back to [B, S, N·Hv].
    fn ms_core(
        &mut self,
        cx: &Ctx,
        rw: &mut Rewrite,
        [q, k, v]: [String; 3],
        head_size: usize,
        bias: Option<String>,
    ) -> R<String> {
        let scale = match cx.attr_f_or("scale", 0.0)? {
            s if s != 0.0 => s,
            _ => 1.0 / (head_size as f32).sqrt(),
        };
        let out = self.sdpa(
            cx,
            rw,
            Sdpa {
                q,
                k,
                v,
                scale: Scale::Product(scale),
                softcap: 0.0,
                bias,
                guard: false,
            },
        )?;
        self.merge_heads(cx, rw, &out.y)
    }

    /// The positive `num_heads` attribute.
    fn num_heads(&self, cx: &Ctx) -> R<usize> {
        match cx.attr_i("num_heads")? {
            Some(n) if n > 0 => Ok(n as usize),
            _ => Err(cx.attr_err("num_heads", "is required and must be positive")),
        }
    }

    /// An error naming what of the node we do not import.
    fn refuse(&self, cx: &Ctx, what: &str) -> crate::front::diag::SpecError {
        cx.err(format!("{what} is not supported")).hint(
            "export the model for fixed-length inference without the KV cache, or save it before onnxruntime's fusions (graph_optimization_level ORT_ENABLE_BASIC) to keep default-domain ops",
        )
    }

    /// The additive bias of scores [B, N, S, T]: the mask of input `mask_j` (masked keys get
    /// `mask_filter_value`), `unidirectional`'s causal mask (lowest float) and the
    /// attention_bias of input `bias_j`.
    fn ms_bias(
        &mut self,
        cx: &Ctx,
        rw: &mut Rewrite,
        (b, s, t): (usize, usize, usize),
        mask_j: usize,
        bias_j: usize,
    ) -> R<Option<String>> {
        let mut parts = Vec::new();
        if cx.has_input(mask_j) {
            if let Some(ok) = self.ms_mask_ok(cx, rw, mask_j, (b, s, t))? {
                let zero = self.const_f32(rw, 0.0);
                let mfv = cx.attr_f_or("mask_filter_value", MASK_FILTER_VALUE)?;
                let mfv = self.const_f32(rw, mfv);
                parts.push(self.via1(cx, rw, "Where", &[ok, zero, mfv], vec![])?);
            }
        }
        if cx.attr_i_or("unidirectional", 0)? != 0 && s > 1 {
            // Query i sees keys j <= i + (t - s) (the keys before the query block are past).
            let past = t as i64 - s as i64;
            let v = (0..s)
                .flat_map(|i| (0..t).map(move |j| (i as i64, j as i64)))
                .map(|(i, j)| if j <= i + past { 0.0 } else { f32::MIN })
                .collect();
            parts.push(self.const_f32s(rw, vec![s, t], v));
        }
        if cx.has_input(bias_j) {
            parts.push(input_name(cx, bias_j));
        }
        let mut acc: Option<String> = None;
        for p in parts {
            acc = Some(match acc {
                None => p,
                Some(a) => self.via1(cx, rw, "Add", &[a, p], vec![])?,
            });
        }
        Ok(acc)
    }

    /// Input `j` (an integer mask of one of [`MASK_FORMS`]) as a bool "key visible" tensor
    /// broadcastable to [B, 1, S, T]; `None` for a dummy mask.
    fn ms_mask_ok(
        &mut self,
        cx: &Ctx,
        rw: &mut Rewrite,
        j: usize,
        (b, s, t): (usize, usize, usize),
    ) -> R<Option<String>> {
        let m = input_name(cx, j);
        let ty = ty_of(&self.input(cx, j)?);
        if !is_int_type(ty) {
            return Err(cx.err(format!(
                "input {j} (mask) has element type {}; it must be int32",
                dt::name(ty)
            )));
        }
        let md = self.in_dims(cx, j)?;
        let keys = self.const_f32s(rw, vec![t], (0..t).map(|x| x as f32).collect());
        let zero = self.const_f32(rw, 0.0);
        let to4 = |me: &mut Self, rw: &mut Rewrite, x: String, d: &[usize]| -> R<String> {
            let shape = me.const_shape(rw, d);
            me.via1(cx, rw, "Reshape", &[x, shape], vec![])
        };
        let ok = match md.as_slice() {
            [n] if *n == b => {
                // Key lengths: j < len[b].
                let len = to4(self, rw, m, &[b, 1, 1, 1])?;
                self.via1(cx, rw, "Less", &[keys, len], vec![])?
            }
            [n] if *n == 2 * b => {
                // End positions then start positions: start[b] <= j < end[b].
                let split = self.const_shape(rw, &[b, b]);
                let se = self.via_n(cx, rw, "Split", &[m, split], 2, vec![attr_i("axis", 0)])?;
                let mut halves = Vec::new();
                for v in se {
                    halves.push(to4(self, rw, v, &[b, 1, 1, 1])?);
                }
                let before_end =
                    self.via1(cx, rw, "Less", &[keys.clone(), halves[0].clone()], vec![])?;
                let after_start =
                    self.via1(cx, rw, "LessOrEqual", &[halves[1].clone(), keys], vec![])?;
                self.via1(cx, rw, "And", &[before_end, after_start], vec![])?
            }
            [n, 1] if (*n == 1 || *n == b) && t != 1 => return Ok(None),
            [n, l] if *n == b && *l == t => {
                let m = to4(self, rw, m, &[b, 1, 1, t])?;
                self.via1(cx, rw, "Greater", &[m, zero], vec![])?
            }
            [n, q, l] if *n == b && *q == s && *l == t => {
                let m = to4(self, rw, m, &[b, 1, s, t])?;
                self.via1(cx, rw, "Greater", &[m, zero], vec![])?
            }
            _ => {
                return Err(self.refuse(
                    cx,
                    &format!(
                        "a mask of shape {} for batch {b}, length {s}, key length {t} (supported: {MASK_FORMS})",
                        dims_str(&md)
                    ),
                ));
            }
        };
        Ok(Some(ok))
    }

    /// `com.microsoft` `EmbedLayerNormalization` (see the module doc).
    pub(super) fn embed_layer_norm(&mut self, cx: &Ctx, rw: &mut Rewrite) -> R<Outs> {
        cx.arity(7, 9)?;
        let inp = |j: usize| input_name(cx, j);
        let ids = self.in_dims(cx, 0)?;
        if ids.len() != 2 {
            return Err(cx.err(format!("input_ids {} must be [batch, seq]", dims_str(&ids))));
        }
        let (b, s) = (ids[0], ids[1]);
        let gather = |me: &mut Self, rw: &mut Rewrite, table: String, idx: String| {
            me.via1(cx, rw, "Gather", &[table, idx], vec![attr_i("axis", 0)])
        };
        let mut sum = gather(self, rw, inp(2), inp(0))?;
        let pos_ids = if cx.has_input(8) {
            inp(8)
        } else {
            self.const_i64s(rw, vec![1, s], (0..s as i64).collect())
        };
        let pos = gather(self, rw, inp(3), pos_ids)?;
        sum = self.via1(cx, rw, "Add", &[sum, pos], vec![])?;
        if cx.has_input(1) != cx.has_input(4) {
            return Err(cx.err(
                "segment_ids (input 1) and segment_embedding (input 4) must be given together",
            ));
        }
        if cx.has_input(1) {
            let seg = gather(self, rw, inp(4), inp(1))?;
            sum = self.via1(cx, rw, "Add", &[sum, seg], vec![])?;
        }
        let eps = cx.attr_f_or("epsilon", EMBED_LAYER_NORM_EPSILON)?;
        let attrs = vec![attr_i("axis", -1), attr_f("epsilon", eps)];
        let y = self.via1(
            cx,
            rw,
            "LayerNormalization",
            &[sum.clone(), inp(5), inp(6)],
            attrs,
        )?;
        let mask_index = if cx.has_input(7) {
            let zero = self.const_f32(rw, 0.0);
            let eq = self.via1(cx, rw, "Equal", &[inp(7), zero], vec![])?;
            let nz = self.via1(cx, rw, "Not", &[eq], vec![])?;
            let f = self.via1(cx, rw, "Cast", &[nz], vec![attr_i("to", dt::INT32 as i64)])?;
            let axes = self.const_i64s(rw, vec![1], vec![1]);
            self.via1(cx, rw, "ReduceSum", &[f, axes], vec![attr_i("keepdims", 0)])?
        } else {
            // A mask-less model's int32 zeros.
            let zeros = self.const_i64s(rw, vec![b], vec![0; b]);
            self.via1(
                cx,
                rw,
                "Cast",
                &[zeros],
                vec![attr_i("to", dt::INT32 as i64)],
            )?
        };
        Ok([y, mask_index, sum]
            .iter()
            .map(|n| self.env.get(n).cloned())
            .collect())
    }
}
