//! Staging buffers of the C API's dtype conversions: where an input passed as int64, uint8,
//! float16, ... is converted to before the model runs, and where an output is computed before it
//! is converted to its API dtype (`ir/api.rs`, `codegen/core/boundary.rs`).
//!
//! Contract: [`place`] gives every input and output with an API dtype one [`ARENA_ALIGN`]-aligned
//! slice of its IR shape after the arena the model uses (`base`): the slices are live for the
//! whole call, so they share bytes with nothing. Inputs and outputs in their IR dtype get none.

use super::ARENA_ALIGN;
use crate::ir::{DType, Module};

/// Which side of the C API a staging slice serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Input `k`: converted from the caller's buffer before the model runs.
    Input(usize),
    /// Output `k`: converted into the caller's buffer after the model ran.
    Output(usize),
}

/// One staging slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Staging {
    /// The input or output it serves.
    pub side: Side,
    /// The dtype the caller passes.
    pub api: DType,
    /// The dtype the model computes in.
    pub ir: DType,
    /// Elements.
    pub elements: usize,
    /// Byte offset in the arena.
    pub offset: usize,
}

/// The staging slices of `m` placed from arena byte `base` on, and the arena size with them.
pub fn place(m: &Module, base: usize) -> (Vec<Staging>, usize) {
    let c = &m.entry;
    let mut at = base;
    let mut out = Vec::new();
    let params = c.parameters();
    let ins = params
        .iter()
        .enumerate()
        .map(|(k, &p)| (Side::Input(k), m.api.input(k), p));
    let outs =
        (c.outputs.iter().enumerate()).map(|(k, o)| (Side::Output(k), m.api.output(k), o.value));
    for (side, api, v) in ins.chain(outs) {
        let Some(api) = api else { continue };
        let shape = &c.inst(v).shape;
        out.push(Staging {
            side,
            api,
            ir: shape.dtype,
            elements: shape.element_count(),
            offset: at,
        });
        at += shape.size_bytes().max(1).div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
    }
    (out, at)
}
