//! The entry points' overlap check: an output that shares bytes with an input, another output or
//! the arena is `XLA_AOT_STATUS_OVERLAP`, before the model runs.
//!
//! Contract: [`Emitter::overlap_check`] takes the caller's pointers (`[arena, inputs..,
//! outputs..]`, as the entry points pass them) and returns, at the builder's position, an `i1`
//! that is true when some output's byte range `[p, p + bytes)` intersects an input's, another
//! output's or the arena's `[arena, arena + ARENA_SIZE)`. Each range's bytes are fixed at compile
//! time (the tensor's shape in its C API dtype, the plan's arena size); an empty range overlaps
//! nothing. Inputs may overlap each other (they are only read). The cost is two unsigned compares
//! per pair, `nout · (nin + (nout − 1) / 2 + 1)` pairs, evaluated without branches and tested with
//! one: a handful of instructions for a typical model, next to kernels of microseconds.

use super::emitter::{Backend, Emitter};
use inkwell::IntPredicate;
use inkwell::values::{IntValue, PointerValue};

impl<'ctx, B: Backend<'ctx>> Emitter<'_, 'ctx, B> {
    /// Bytes of each caller range: `[arena, inputs.., outputs..]`.
    fn caller_bytes(&self) -> Vec<u64> {
        let c = &self.hlo.entry;
        let mut bytes = vec![self.plan.arena_size as u64];
        for (k, &p) in c.parameters().iter().enumerate() {
            let n = c.inst(p).shape.element_count();
            bytes.push((n * self.hlo.input_dtype(k).size_bytes()) as u64);
        }
        for (k, o) in c.outputs.iter().enumerate() {
            let n = c.inst(o.value).shape.element_count();
            bytes.push((n * self.hlo.output_dtype(k).size_bytes()) as u64);
        }
        bytes
    }

    /// Whether an output overlaps an input, another output or the arena (see the module doc);
    /// `ptrs` is `[arena, inputs.., outputs..]`.
    pub(crate) fn overlap_check(&self, ptrs: &[PointerValue<'ctx>]) -> IntValue<'ctx> {
        let bytes = self.caller_bytes();
        let nout = self.hlo.entry.outputs.len();
        let first_out = ptrs.len() - nout;
        let i64t = self.ctx.i64_type();
        let range = |k: usize| {
            let start = self.b.build_ptr_to_int(ptrs[k], i64t, "").unwrap();
            let end = self.b.build_int_add(start, self.i64(bytes[k]), "").unwrap();
            (start, end)
        };
        let mut any = self.ctx.bool_type().const_zero();
        for o in first_out..ptrs.len() {
            if bytes[o] == 0 {
                continue;
            }
            let (os, oe) = range(o);
            // Every range before this output: the arena, the inputs, the earlier outputs.
            for k in (0..o).filter(|&k| bytes[k] > 0) {
                let (ks, ke) = range(k);
                let before = self
                    .b
                    .build_int_compare(IntPredicate::ULT, os, ke, "")
                    .unwrap();
                let after = self
                    .b
                    .build_int_compare(IntPredicate::ULT, ks, oe, "")
                    .unwrap();
                let both = self.b.build_and(before, after, "").unwrap();
                any = self.b.build_or(any, both, "overlap").unwrap();
            }
        }
        any
    }
}
