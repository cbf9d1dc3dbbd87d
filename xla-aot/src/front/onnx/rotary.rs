//! `RotaryEmbedding` (opset 23) as slices, multiplies and concatenations.
//!
//! Contract: the input is `[batch, heads, seq, head]` (4-D) or `[batch, seq, heads · head]` (3-D,
//! `num_heads` required); the first `rotary_embedding_dim` (0: the whole head) features of every
//! head rotate by the cos/sin pair of their position, the rest pass through. The caches are
//! `[positions, rotary/2]` read by run-time or constant `position_ids` `[batch, seq]` with one
//! gather each (an out-of-range id is clamped into the cache), or without position ids
//! `[batch, seq, rotary/2]` as given. Pairs are the two halves of the rotated part
//! (`interleaved` 0) or its even and odd features (`interleaved` 1): real = cos·x1 − sin·x2,
//! imag = sin·x1 + cos·x2, written back in the same arrangement, as ONNX's reference does.

use super::context::{Ctx, Importer, R, ty_of};
use super::elementwise::{Outs, rt};
use super::proto::data_type as dt;
use super::tensor::is_int_type;
use crate::ir::shape::dims_str;
use crate::ir::{BinaryOp, DType, InstId, Op};

impl Importer {
    /// `RotaryEmbedding(X, cos_cache, sin_cache[, position_ids])`.
    pub fn rotary_embedding(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(3, 4)?;
        let x = self.rt_f32(cx, 0)?;
        let xd = self.dims(x);
        let interleaved = cx.attr_i_or("interleaved", 0)? != 0;
        let heads = cx.attr_i_or("num_heads", 0)?;
        // Work on [batch, a, b, head] with the cos/sin of [batch, seq] broadcast along the heads.
        let (x4, seq_dims) = match xd[..] {
            [_, _, _, _] => (x, [0, 2]),
            [b, s, hidden] => {
                let h = usize::try_from(heads)
                    .ok()
                    .filter(|&h| h > 0 && hidden % h == 0);
                let Some(h) = h else {
                    return Err(cx.attr_err(
                        "num_heads",
                        format!("is {heads}; a 3-D input needs a positive num_heads dividing its hidden size {hidden}"),
                    ));
                };
                (self.reshape(cx, x, vec![b, s, h, hidden / h])?, [0, 1])
            }
            _ => {
                return Err(cx.err(format!(
                    "input {} must be [batch, heads, seq, head] or [batch, seq, hidden]",
                    dims_str(&xd)
                )));
            }
        };
        let d4 = self.dims(x4);
        let head = d4[3];
        let rd = match cx.attr_i_or("rotary_embedding_dim", 0)? {
            0 => head,
            r if r > 0 && r as u64 <= head as u64 && r % 2 == 0 => r as usize,
            r => {
                return Err(cx.attr_err(
                    "rotary_embedding_dim",
                    format!("is {r}; it must be even and at most the head size {head}"),
                ));
            }
        };
        if head % 2 != 0 && rd == head {
            return Err(cx.err(format!("the head size {head} is odd; it must be even")));
        }
        let half = rd / 2;
        let (batch, seq) = (d4[0], d4[seq_dims[1]]);
        let cos = self.rotary_cache(cx, 1, batch, seq, half)?;
        let sin = self.rotary_cache(cx, 2, batch, seq, half)?;
        let mut pd = d4.clone();
        pd[3] = half;
        let map = vec![seq_dims[0], seq_dims[1], 3];
        let cos = self.bcast(cx, cos, map.clone(), pd.clone())?;
        let sin = self.bcast(cx, sin, map, pd.clone())?;
        let [n0, n1, n2] = [d4[0], d4[1], d4[2]];
        let part = |me: &mut Self, start: usize, limit: usize, stride: usize| {
            me.add(
                cx,
                Op::Slice {
                    starts: vec![0, 0, 0, start],
                    limits: vec![n0, n1, n2, limit],
                    strides: vec![1, 1, 1, stride],
                },
                &[x4],
            )
        };
        let (x1, x2) = if interleaved {
            (part(self, 0, rd, 2)?, part(self, 1, rd, 2)?)
        } else {
            (part(self, 0, half, 1)?, part(self, half, rd, 1)?)
        };
        let mul = |me: &mut Self, a: InstId, b: InstId| me.bin(cx, BinaryOp::Multiply, a, b);
        let (c1, s2) = (mul(self, cos, x1)?, mul(self, sin, x2)?);
        let real = self.bin(cx, BinaryOp::Subtract, c1, s2)?;
        let (s1, c2) = (mul(self, sin, x1)?, mul(self, cos, x2)?);
        let imag = self.bin(cx, BinaryOp::Add, s1, c2)?;
        let rotated = if interleaved {
            let mut pd1 = pd.clone();
            pd1.push(1);
            let r = self.reshape(cx, real, pd1.clone())?;
            let i = self.reshape(cx, imag, pd1)?;
            let both = self.add(cx, Op::Concatenate { dimension: 4 }, &[r, i])?;
            self.reshape(cx, both, vec![n0, n1, n2, rd])?
        } else {
            self.add(cx, Op::Concatenate { dimension: 3 }, &[real, imag])?
        };
        let y = if rd < head {
            let rest = part(self, rd, head, 1)?;
            self.add(cx, Op::Concatenate { dimension: 3 }, &[rotated, rest])?
        } else {
            rotated
        };
        let y = self.reshape(cx, y, xd)?;
        Ok(rt(y, dt::FLOAT))
    }

    /// The cos (input 1) or sin (input 2) values of every [batch, seq] position: `[batch, seq,
    /// half]`, gathered by the position ids when the node has them.
    fn rotary_cache(
        &mut self,
        cx: &Ctx,
        j: usize,
        batch: usize,
        seq: usize,
        half: usize,
    ) -> R<InstId> {
        let c = self.rt_f32(cx, j)?;
        let cd = self.dims(c);
        let what = if j == 1 { "cos_cache" } else { "sin_cache" };
        if !cx.has_input(3) {
            if cd != [batch, seq, half] {
                return Err(cx.err(format!(
                    "{what} is {}; without position_ids it must be [batch, seq, rotary_dim/2] = {}",
                    dims_str(&cd),
                    dims_str(&[batch, seq, half])
                )));
            }
            return Ok(c);
        }
        if cd.len() != 2 || cd[1] != half || cd[0] == 0 {
            return Err(cx.err(format!(
                "{what} is {}; with position_ids it must be [positions, rotary_dim/2 = {half}]",
                dims_str(&cd)
            )));
        }
        let pv = self.input(cx, 3)?;
        if !is_int_type(ty_of(&pv)) || self.dims_of(&pv) != [batch, seq] {
            return Err(cx.err(format!(
                "position_ids must be integers of shape {}",
                dims_str(&[batch, seq])
            )));
        }
        let (p, _) = self.rt(cx, 3)?;
        let p = self.convert(cx, p, DType::I32)?;
        self.add(cx, Op::Gather, &[c, p])
    }
}
