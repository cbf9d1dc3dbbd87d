//! RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR of float models, as two products with constant
//! interpolation matrices (one per spatial dim).
//!
//! Contract: the output size is a constant `[OH, OW]`. Source coordinates are TFLite's
//! (`reference_ops.h`): scale `in / out`, or `(in − 1) / (out − 1)` with `align_corners` (and
//! more than one output); with `half_pixel_centers` a source coordinate is
//! `(o + 0.5) · scale − 0.5` (bilinear) or `⌊(o + 0.5) · scale⌋` (nearest), else `o · scale`
//! (nearest: rounded half away from zero with `align_corners`, else floored), all in f32 as
//! TFLite computes them; nearest clamps into `[0, in − 1]`, bilinear blends rows `⌊c⌋` (at least
//! 0) and `⌈c⌉` (at most `in − 1`) with weights `1 − (c − ⌊c⌋)` and `c − ⌊c⌋`. Row `o` of a
//! matrix holds those weights, so the product is the interpolation (a nearest matrix has one 1
//! per row: exact). The input is held NCHW and so is the result.

use super::lower::{Importer, NCHW, R};
use crate::front::tflite::read::pb;
use crate::ir::{DotDims, InstId, Literal, Op};
use xla_aot_tflite_schema::tflite::BuiltinOptionsRef as O;

/// The `[out, in]` interpolation matrix of one dim.
fn matrix(input: usize, out: usize, align: bool, half: bool, nearest: bool) -> Vec<f32> {
    let scale = if align && out > 1 {
        (input as f32 - 1.0) / (out as f32 - 1.0)
    } else {
        input as f32 / out as f32
    };
    let last = input as i64 - 1;
    let mut m = vec![0.0f32; out * input];
    for o in 0..out {
        let row = &mut m[o * input..(o + 1) * input];
        if nearest {
            let offset = if half { 0.5 } else { 0.0 };
            let c = (o as f32 + offset) * scale;
            let i = if align { c.round() } else { c.floor() } as i64;
            row[i.clamp(0, last) as usize] = 1.0;
        } else {
            let c = if half {
                (o as f32 + 0.5) * scale - 0.5
            } else {
                o as f32 * scale
            };
            let lo = (c.floor() as i64).max(0);
            let hi = (c.ceil() as i64).min(last);
            let d = c - lo as f32;
            row[lo.clamp(0, last) as usize] += 1.0 - d;
            row[hi.clamp(0, last) as usize] += d;
        }
    }
    m
}

impl Importer<'_, '_> {
    /// RESIZE_BILINEAR (`nearest` false) or RESIZE_NEAREST_NEIGHBOR.
    pub fn resize(&mut self, nearest: bool) -> R<()> {
        let p = pb(self.path, "the resize options");
        let (align, half) = match &self.op().options {
            Some(O::ResizeBilinearOptions(o)) => (
                o.align_corners().map_err(&p)?,
                o.half_pixel_centers().map_err(&p)?,
            ),
            Some(O::ResizeNearestNeighborOptions(o)) => (
                o.align_corners().map_err(&p)?,
                o.half_pixel_centers().map_err(&p)?,
            ),
            _ => (false, false),
        };
        let (xt, st) = (self.need(0)?, self.need(1)?);
        // int8 RESIZE_NEAREST_NEIGHBOR moves integers (TFLite Micro rescales nothing): the 0/1
        // products below are exact on integer-valued f32.
        let integer = self.is_quantized(xt);
        if integer && !nearest {
            return Err(self.integer_not_yet());
        }
        if !integer {
            self.check_float(xt)?;
        }
        let mut x = self.val(xt)?;
        if integer {
            x.id = self.convert(x.id, crate::ir::DType::F32, "as_f32")?;
        }
        let xd = self.dims(&x);
        let size = self.const_ints(st)?;
        if xd.len() != 4 || xd.contains(&0) || size.len() != 2 || size.iter().any(|&s| s <= 0) {
            return Err(self.err(format!(
                "the input {xd:?} must be a non-empty NHWC tensor and the size {size:?} two positive extents"
            )));
        }
        let (oh, ow) = (size[0] as usize, size[1] as usize);
        self.check_built(oh.checked_mul(xd[1]), "the row interpolation matrix")?;
        self.check_built(ow.checked_mul(xd[2]), "the column interpolation matrix")?;
        let xi = self.permuted(&x, &NCHW)?;
        // [N, C, H, W] · [OH, H] over H → [N, C, W, OH]; · [OW, W] over W → [N, C, OH, OW].
        let mh = matrix(xd[1], oh, align, half, nearest);
        let mw = matrix(xd[2], ow, align, half, nearest);
        let a = self.product(xi, 2, mh, [oh, xd[1]], "rows")?;
        let mut y = self.product(a, 2, mw, [ow, xd[2]], "")?;
        if integer {
            y = self.convert(y, crate::ir::DType::I32, "as_i32")?;
        }
        let o = self.output_index(0)?;
        self.set_nchw(o, y);
        Ok(())
    }

    /// `x` contracted over dim `dim` with the constant `[out, in]` matrix `m`.
    fn product(
        &mut self,
        x: InstId,
        dim: usize,
        m: Vec<f32>,
        md: [usize; 2],
        part: &str,
    ) -> R<InstId> {
        let c = self.b.constant(
            &self.name(&format!("{part}_weights")),
            Literal::from_f32(md.to_vec(), &m),
        );
        let name = self.name(part);
        self.b
            .add(
                &name,
                Op::Dot(DotDims {
                    lhs_batch: vec![],
                    lhs_contracting: vec![dim],
                    rhs_batch: vec![],
                    rhs_contracting: vec![1],
                }),
                &[x, c],
            )
            .map_err(self.ir())
    }
}
