//! Batch buckets: `batch_sizes: [1, 4, 16]` lowers the spec once per size.
//!
//! Contract: with `batch_sizes`, dim 0 of every input is the batch dimension. The spec is written
//! for one of the sizes, its *declared* batch (every input's dim 0, which must agree and be in the
//! list). [`lower_buckets`] lowers the spec for every size by replacing each input's dim 0, checks
//! that every output has the batch as its dim 0 and otherwise the declared variant's shape, and
//! returns the declared variant as `Model::module` with every variant in `Model::batch`. An error
//! in one variant names its batch size. Whether items are independent (a row of the batch never
//! reads another) is the spec's promise; `run_batch` pads with zero items and relies on it.

use super::lower_raw;
use super::raw::RawSpec;
use crate::front::diag::{SpecError, SpecErrorKind};
use crate::front::model::Model;
use crate::front::spans::SpanIndex;
use crate::ir::shape::dims_str;
use std::path::Path;

/// Largest batch bucket: every input and output is staged in the arena at this size, and the C
/// API counts items in 32-bit integers; 4096 is far above any edge batch.
pub const MAX_BATCH_SIZE: i64 = 4096;

/// Lowers `raw` for every size in `sizes` (the `batch_sizes` list).
pub fn lower_buckets(
    path: &Path,
    source: &str,
    raw: &RawSpec,
    sizes: &[i64],
) -> Result<Model, SpecError> {
    let spans = SpanIndex::build(source);
    let at = |p: &str, kind: SpecErrorKind| SpecError::new(path, kind).at(spans.find(p), source);
    let invalid = |p: &str, m: String| at(p, SpecErrorKind::Invalid(m));
    if sizes.is_empty() {
        return Err(invalid("batch_sizes", "`batch_sizes` is empty".into())
            .expected("a list of batch sizes, e.g. [1, 4, 16]"));
    }
    for (i, &b) in sizes.iter().enumerate() {
        if !(1..=MAX_BATCH_SIZE).contains(&b) {
            return Err(invalid(
                &format!("batch_sizes[{i}]"),
                format!("batch size {b} is outside [1, {MAX_BATCH_SIZE}]"),
            ));
        }
        if i > 0 && b <= sizes[i - 1] {
            return Err(invalid(
                &format!("batch_sizes[{i}]"),
                format!("batch sizes must increase; {b} follows {}", sizes[i - 1]),
            )
            .hint("list each size once, smallest first"));
        }
    }
    // The declared batch: dim 0 of every input.
    let mut declared = None;
    for (i, input) in raw.inputs.iter().enumerate() {
        let Some(&d0) = input.shape.first() else {
            return Err(invalid(
                &format!("inputs[{i}].shape"),
                format!(
                    "input `{}` is a scalar, but with `batch_sizes` dim 0 of every input is the batch",
                    input.name
                ),
            ));
        };
        match declared {
            None => declared = Some(d0),
            Some(d) if d != d0 => {
                return Err(invalid(
                    &format!("inputs[{i}].shape[0]"),
                    format!(
                        "input `{}` has batch {d0} but the first input has {d}",
                        input.name
                    ),
                )
                .hint("with `batch_sizes`, dim 0 of every input is the batch dimension: write the spec for one batch size"));
            }
            _ => {}
        }
    }
    let declared = declared.unwrap_or(1);
    if !sizes.contains(&declared) {
        return Err(invalid(
            "batch_sizes",
            format!("the inputs are written for batch {declared}, which is not in `batch_sizes`"),
        )
        .hint(format!(
            "add {declared} to `batch_sizes`, or write the inputs for one of the sizes"
        )));
    }
    let mut primary = lower_raw(path, source, raw)?;
    let mut variants = Vec::with_capacity(sizes.len());
    for &b in sizes {
        let module = if b == declared {
            primary.module.clone()
        } else {
            let mut r = raw.clone();
            for input in &mut r.inputs {
                input.shape[0] = b;
            }
            lower_raw(path, source, &r)
                .map_err(|e| {
                    e.hint(format!(
                        "this error is in the variant for batch size {b} (`batch_sizes`)"
                    ))
                })?
                .module
        };
        // Every output: [b, the declared variant's dims after the first...].
        let (pc, vc) = (&primary.module.entry, &module.entry);
        for (po, vo) in pc.outputs.iter().zip(&vc.outputs) {
            let (ps, vs) = (&pc.inst(po.value).shape, &vc.inst(vo.value).shape);
            let ok = !vs.dims.is_empty()
                && vs.dims[0] == b as usize
                && ps.dims.first() == Some(&(declared as usize))
                && vs.dims[1..] == ps.dims[1..];
            if !ok {
                let i = raw.outputs.iter().position(|o| *o == po.name).unwrap_or(0);
                return Err(invalid(
                    &format!("outputs[{i}]"),
                    format!(
                        "output `{}` is {} at batch {declared} but {} at batch {b}: its dim 0 must be the batch",
                        po.name,
                        dims_str(&ps.dims),
                        dims_str(&vs.dims)
                    ),
                )
                .hint("with `batch_sizes`, every output keeps the batch as dim 0 (no reduction over it, no reshape that moves it)"));
            }
        }
        variants.push((b as usize, module));
    }
    primary.buckets = variants;
    Ok(primary)
}
