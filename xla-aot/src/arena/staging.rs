//! Staging buffers of the C API's dtype conversions: where an input passed as int64, uint8,
//! float16, ... is converted to before the model runs, and where an output is computed before it
//! is converted to its API dtype (`ir/api.rs`, `codegen/core/boundary.rs`).
//!
//! Contract: [`place`] gives every input and output with an API dtype one [`ARENA_ALIGN`]-aligned
//! slice of its IR shape. An input's slice is written before the first kernel runs and read
//! until its parameter's last reader (none for an input the backend reads in its API dtype:
//! [`staged_inputs`]' `direct`): the arena plan places it among the values with that
//! interval (`mod.rs`), so it shares bytes with values computed after its last use (a
//! quantized image's int32 copy no longer outlives the first convolution). An output's slice
//! is written by its producer and read after the last kernel: placed after the arena the model
//! uses (`base`), sharing bytes with nothing (none for an output the backend writes in its
//! API dtype: a quantized model's byte output, `BufferPlan::stored`). Inputs and outputs in
//! their IR dtype get none.

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

/// The staged inputs of `m`: per parameter position `k` with an API dtype, its parameter
/// instruction and the bytes of its IR shape. `direct`: the parameters the backend reads in
/// their API dtype (`BufferPlan::stored`: a quantized model's int8 image read as bytes), which
/// take no staging slice (the kernels read the caller's buffer).
pub fn staged_inputs(
    m: &Module,
    direct: &dyn Fn(crate::ir::InstId) -> bool,
) -> Vec<(usize, crate::ir::InstId, usize)> {
    let c = &m.entry;
    c.parameters()
        .iter()
        .enumerate()
        .filter(|&(k, &p)| m.api.input(k).is_some() && !direct(p))
        .map(|(k, &p)| (k, p, c.inst(p).shape.size_bytes().max(1)))
        .collect()
}

/// The staging slices of `m` placed from arena byte `base` on, and the arena size with them;
/// an input with an offset in `input_at` (indexed by parameter position) keeps it (the arena
/// plan placed it among the values, live until its last reader: `mod.rs`).
pub fn place(
    m: &Module,
    base: usize,
    input_at: &[Option<usize>],
    direct: &dyn Fn(crate::ir::InstId) -> bool,
) -> (Vec<Staging>, usize) {
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
        if direct(v) {
            continue;
        }
        let shape = &c.inst(v).shape;
        let planned = match side {
            Side::Input(k) => input_at.get(k).copied().flatten(),
            Side::Output(_) => None,
        };
        out.push(Staging {
            side,
            api,
            ir: shape.dtype,
            elements: shape.element_count(),
            offset: planned.unwrap_or(at),
        });
        if planned.is_none() {
            at += shape.size_bytes().max(1).div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        }
    }
    (out, at)
}
