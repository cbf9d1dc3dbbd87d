//! Which constants a multi-ISA library stores once: decided before its variants' code is
//! generated, so that variants storing the same bytes of a constant declare one symbol.
//!
//! Contract: [`share`] packs every constant of the model as each variant's kernels read it
//! (`Packings::for_cpu` with that variant's target and planned scratch: what `codegen/cpu`
//! computes again when it builds the variant) and compares the stored bytes byte for byte, not
//! trusting a hash. A constant's owner in variant `v` is the first variant storing the same bytes
//! (`v` itself when none earlier does). Variant `v` declares the constant external under its
//! owner's symbol (`<name>__<isa>_weight<N>`, `codegen/core/weights.rs`) when another variant
//! stores the same bytes, whatever the size (scalars excepted: [`SHARED_FROM_ELEMENTS`]), or
//! when it is large (`EXTERNAL_FROM`, as a single-ISA library); the data object defines each
//! such symbol once, filled from its owner ([`blobs`]). A small constant no other variant shares
//! stays in the variant's code, where it costs no symbol and LLVM may fold it. With batch buckets every constant stays in each
//! variant's code (`codegen::build_library`), and nothing is shared.

use crate::codegen::core::packing::Packings;
use crate::codegen::core::weights::{self, EXTERNAL_FROM, Placement};
use crate::codegen::cpu::multi_isa::{VariantInput, VariantObject};
use crate::emit::data_object::Blob;
use crate::ir::{InstId, Module, Op};
use std::collections::HashSet;
use std::sync::Arc;

/// A constant of fewer elements (a scalar) stays in each variant's code even where the variants
/// agree: LLVM folds it into the instructions that use it (an immediate or a constant-pool
/// entry), where a shared one costs a load, two symbols and a relocation per use. Measured on
/// the four examples: sharing scalars too made every `x86_64-multi` archive 94–480 bytes larger.
const SHARED_FROM_ELEMENTS: usize = 2;

/// What [`share`] decided.
pub(super) struct Shared {
    /// Per variant (best first): where its code finds its constants.
    pub placements: Vec<Placement>,
    /// Per variant: the bytes of its constants as its kernels read them, and of those the bytes
    /// stored for it alone (the rest are another variant's, `manifest::IsaVariant`).
    pub bytes: Vec<(usize, usize)>,
}

/// Decides, for `variants` (each module under its prefix, best first), which constants are
/// stored once and under which symbol.
pub(super) fn share(variants: &[VariantInput<'_>]) -> Shared {
    let n = variants.len();
    let packings: Vec<Packings> = variants
        .iter()
        .map(|v| Packings::for_cpu(&v.module, v.target, v.plan.winograd_scratch()))
        .collect();
    let buckets = variants.iter().any(|v| !v.buckets.is_empty());
    let Some(first) = variants.first() else {
        return Shared {
            placements: Vec::new(),
            bytes: Vec::new(),
        };
    };
    let count = first.module.entry.instructions.len();
    let mut listed = vec![vec![None; count]; n];
    let mut bytes = vec![(0, 0); n];
    for (i, inst) in first.module.entry.instructions.iter().enumerate() {
        let Op::Constant(lit) = &inst.op else {
            continue;
        };
        let id = InstId(i as u32);
        // Elided data is refused when the variant is built (`constant_globals`).
        let stored: Vec<Vec<u8>> = match lit.bytes() {
            Some(raw) => packings
                .iter()
                .map(|p| p.stored_bytes(id, raw, &inst.shape))
                .collect(),
            None => vec![Vec::new(); n],
        };
        let owner: Vec<usize> = (0..n)
            .map(|v| (0..=v).find(|&u| stored[u] == stored[v]).unwrap_or(v))
            .collect();
        for v in 0..n {
            let len = stored[v].len();
            let shared = (0..n).any(|u| u != v && owner[u] == owner[v])
                && inst.shape.element_count() >= SHARED_FROM_ELEMENTS;
            if !buckets && (shared || len >= EXTERNAL_FROM) {
                listed[v][i] = Some(weights::symbol(&variants[owner[v]].module.name, id));
            }
            bytes[v].0 += len;
            if owner[v] == v || listed[v][i].is_none() {
                bytes[v].1 += len;
            }
        }
    }
    if buckets {
        for b in &mut bytes {
            b.1 = b.0;
        }
    }
    Shared {
        placements: listed
            .into_iter()
            .map(|l| Placement::Listed(Arc::from(l)))
            .collect(),
        bytes,
    }
}

/// Where a blob's bytes come from: (variant, its external weight index).
pub(super) type Source = (usize, usize);

/// The data object's blobs: each symbol the variants declare, once, in the order the variants
/// (best first) declare them, filled from the first variant declaring it (its owner).
pub(super) fn blobs(m: &Module, variants: &[VariantObject]) -> (Vec<Blob>, Vec<Source>) {
    let mut seen = HashSet::new();
    let mut blobs = Vec::new();
    let mut sources = Vec::new();
    for (v, vo) in variants.iter().enumerate() {
        let Some(w) = &vo.external else { continue };
        for (i, (ew, len)) in w.weights.iter().zip(w.sizes(m)).enumerate() {
            if seen.insert(ew.symbol.clone()) {
                blobs.push(Blob {
                    symbol: ew.symbol.clone(),
                    len,
                });
                sources.push((v, i));
            }
        }
    }
    (blobs, sources)
}
