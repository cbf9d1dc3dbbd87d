//! Sequence buckets: `seq_buckets: {sizes: [16, 32, 64], inputs: [x], outputs: [y], mask: m}`.
//!
//! Contract: dim `axis` (default 1) of each listed input and output is the sequence. The spec is
//! written for one of the sizes, its declared length: the listed inputs' `axis` dims, which must
//! agree and be in `sizes`. `mask`, if given, is an f32 input whose last dim is the sequence.
//! The caller does not pass it: `<name>_run_seq` fills it with 1.0 for positions below the real
//! length and 0.0 after, and the model uses it to ignore the padding. [`lower_buckets`] lowers the
//! spec once per size, with those dims replaced. It checks that every listed output has the length
//! at `axis`, and that every other output keeps its shape. Every variant goes in `Model::buckets`,
//! and the roles in `Model::seq`. That padded positions do not change the real positions' results
//! (causal or masked attention, per-position ops) is the spec's promise.

use super::lower_raw;
use super::raw::{RawSeqBuckets, RawSpec};
use crate::front::diag::{SpecError, SpecErrorKind};
use crate::front::model::{Model, SeqAxis};
use crate::front::spans::SpanIndex;
use crate::ir::shape::dims_str;
use std::path::Path;

/// Longest sequence bucket (every bucketed input and output is staged at this length).
pub const MAX_SEQ_BUCKET: i64 = 65536;

/// Lowers `raw` for every length in `seq.sizes`.
pub fn lower_buckets(
    path: &Path,
    source: &str,
    raw: &RawSpec,
    seq: &RawSeqBuckets,
) -> Result<Model, SpecError> {
    let spans = SpanIndex::build(source);
    let at = |p: &str, m: String| {
        SpecError::new(path, SpecErrorKind::Invalid(m)).at(spans.find(p), source)
    };
    let sizes = &seq.sizes;
    if sizes.is_empty() {
        return Err(at(
            "seq_buckets.sizes",
            "`seq_buckets.sizes` is empty".into(),
        ));
    }
    for (i, &s) in sizes.iter().enumerate() {
        if !(1..=MAX_SEQ_BUCKET).contains(&s) || (i > 0 && s <= sizes[i - 1]) {
            return Err(at(
                &format!("seq_buckets.sizes[{i}]"),
                format!(
                    "sequence bucket {s} must be in [1, {MAX_SEQ_BUCKET}] and larger than the one before"
                ),
            ));
        }
    }
    if seq.axis < 0 {
        return Err(at("seq_buckets.axis", "`axis` must be >= 0".into()));
    }
    let axis = seq.axis as usize;
    let find_input = |name: &str, p: &str| {
        raw.inputs
            .iter()
            .position(|i| i.name == name)
            .ok_or_else(|| at(p, format!("`{name}` is not an input of the spec")))
    };
    let mut declared = None;
    let mut inputs = Vec::new();
    for (k, name) in seq.inputs.iter().enumerate() {
        let p = format!("seq_buckets.inputs[{k}]");
        let i = find_input(name, &p)?;
        let shape = &raw.inputs[i].shape;
        let Some(&d) = shape.get(axis) else {
            return Err(at(
                &p,
                format!("input `{name}` has no dim {axis} (its shape is {shape:?})"),
            ));
        };
        if declared.is_some_and(|x| x != d) {
            return Err(at(
                &p,
                format!(
                    "input `{name}` has length {d} at dim {axis}, the first listed input {}",
                    declared.unwrap_or(0)
                ),
            ));
        }
        declared = Some(d);
        inputs.push(i);
    }
    let Some(declared) = declared else {
        return Err(at(
            "seq_buckets.inputs",
            "`seq_buckets.inputs` is empty".into(),
        ));
    };
    if !sizes.contains(&declared) {
        return Err(at(
            "seq_buckets.sizes",
            format!("the inputs are written for length {declared}, which is not in `sizes`"),
        ));
    }
    let mask = match &seq.mask {
        None => None,
        Some(name) => {
            let i = find_input(name, "seq_buckets.mask")?;
            let m = &raw.inputs[i];
            if m.dtype != "f32" || m.shape.last() != Some(&declared) || inputs.contains(&i) {
                return Err(at(
                    "seq_buckets.mask",
                    format!(
                        "the mask `{name}` must be an f32 input whose last dim is the length ({declared}), not listed in `inputs`"
                    ),
                ));
            }
            Some(i)
        }
    };
    let mut outputs = Vec::new();
    for (k, name) in seq.outputs.iter().enumerate() {
        match raw.outputs.iter().position(|o| o == name) {
            Some(j) => outputs.push(j),
            None => {
                return Err(at(
                    &format!("seq_buckets.outputs[{k}]"),
                    format!("`{name}` is not an output of the spec"),
                ));
            }
        }
    }
    let mut primary = lower_raw(path, source, raw)?;
    let mut variants = Vec::new();
    for &s in sizes {
        let module = if s == declared {
            primary.module.clone()
        } else {
            let mut r = raw.clone();
            for &i in &inputs {
                r.inputs[i].shape[axis] = s;
            }
            if let Some(i) = mask {
                *r.inputs[i].shape.last_mut().expect("checked") = s;
            }
            lower_raw(path, source, &r)
                .map_err(|e| {
                    e.hint(format!(
                        "this error is in the variant for length {s} (`seq_buckets`)"
                    ))
                })?
                .module
        };
        let (pc, vc) = (&primary.module.entry, &module.entry);
        for (j, (po, vo)) in pc.outputs.iter().zip(&vc.outputs).enumerate() {
            let (pd, vd) = (&pc.inst(po.value).shape.dims, &vc.inst(vo.value).shape.dims);
            let ok = if outputs.contains(&j) {
                pd.len() == vd.len()
                    && pd.len() > axis
                    && pd[axis] == declared as usize
                    && vd[axis] == s as usize
                    && (0..pd.len()).all(|d| d == axis || pd[d] == vd[d])
            } else {
                pd == vd
            };
            if !ok {
                return Err(at(
                    &format!("outputs[{j}]"),
                    format!(
                        "output `{}` is {} at length {declared} but {} at length {s}",
                        po.name,
                        dims_str(pd),
                        dims_str(vd)
                    ),
                )
                .hint("an output listed in `seq_buckets.outputs` has the length at `axis`; any other output must not depend on it (pool over the sequence with the mask)"));
            }
        }
        variants.push((s as usize, module));
    }
    primary.buckets = variants;
    primary.seq = Some(SeqAxis {
        axis,
        declared: declared as usize,
        inputs,
        outputs,
        mask,
    });
    Ok(primary)
}
