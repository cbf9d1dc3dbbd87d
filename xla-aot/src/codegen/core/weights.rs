//! Weights stored outside LLVM: which constants a host library keeps in a separate data object
//! (`emit/data_object.rs`) and which bytes each one holds.
//!
//! Contract: a constant whose stored bytes ([`Packings::stored_len`]) reach [`EXTERNAL_FROM`] (or,
//! in a multi-ISA variant, one [`Placement::Listed`] names) is declared `external hidden
//! constant` in the LLVM module under [`symbol`] (or the listed one); the library's data
//! object defines it, filled by [`Packings::write_stored`] straight into the object, so a large
//! weight is never an LLVM constant (which LLVM would hold, then copy again into the object it
//! writes). Only a host library built ahead of time does this; the JIT and the GPU's host
//! emulation keep every constant in the module.

use super::packing::Packings;
use crate::ir::{InstId, Module as Hlo, Op};
use std::sync::Arc;

/// Constants of at least this many stored bytes go into the data object: 64 KiB, where an LLVM
/// constant's copies start to cost more memory than the code around it (a convolution kernel of
/// 64×64×3×3 floats is 144 KiB; biases and small tables stay in the module, where LLVM may still
/// fold them).
pub const EXTERNAL_FROM: usize = 64 * 1024;

/// Where a module's constants live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Every constant is a private global of the module (the JIT, the GPU's host emulation,
    /// batch buckets).
    InModule,
    /// The large ones ([`EXTERNAL_FROM`]) in the library's data object, the rest in the module.
    DataObject,
    /// A variant of a multi-ISA library (`compile/multi_weights.rs`): the constants this list
    /// (indexed by instruction) names are in the library's data object under the symbol named,
    /// which every variant storing the same bytes declares; the rest in the module.
    Listed(Arc<[Option<String>]>),
    /// All of them in the blob the caller passes to each run (`weights_blob.rs`).
    Blob,
}

/// One external weight: the constant and the hidden symbol that holds its stored bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalWeight {
    /// The entry constant.
    pub id: InstId,
    /// Its symbol.
    pub symbol: String,
}

/// The symbol of constant `id` of model `model` (hidden: only the library's code reads it).
pub fn symbol(model: &str, id: InstId) -> String {
    format!("{model}_weight{}", id.index())
}

/// The weights a module declared external, with the packings its kernels read them in (the
/// module's one decision, `packing.rs`).
#[derive(Debug, Clone)]
pub struct ExternalWeights {
    /// How each constant is stored.
    pub packings: Packings,
    /// The external ones, in order.
    pub weights: Vec<ExternalWeight>,
}

impl ExternalWeights {
    /// The stored size of each external weight, in order.
    pub fn sizes(&self, hlo: &Hlo) -> Vec<usize> {
        self.weights
            .iter()
            .map(|w| self.packings.stored_len(w.id, &hlo.entry.inst(w.id).shape))
            .collect()
    }

    /// Writes the stored bytes of external weight `i` into `out` (zeroed, as long as its size).
    pub fn fill(&self, hlo: &Hlo, i: usize, out: &mut [u8]) {
        let id = self.weights[i].id;
        let inst = hlo.entry.inst(id);
        if let Op::Constant(lit) = &inst.op {
            // Elided data was refused when the module was built (`constant_globals`).
            if let Some(bytes) = lit.bytes() {
                self.packings.write_stored(id, bytes, &inst.shape, out);
            }
        }
    }
}
