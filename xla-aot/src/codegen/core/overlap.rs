//! The entry points' overlap check: an output that shares bytes with an input, another output or
//! the arena is `XLA_AOT_STATUS_OVERLAP`, before the model runs.
//!
//! Contract: [`Emitter::overlap_check`] takes the caller's pointers (`[arena, inputs..,
//! outputs..]`, as the entry points pass them) and returns, at the builder's position, an `i1`
//! that is true when some output's byte range `[p, p + bytes)` intersects an input's, another
//! output's or the arena's `[arena, arena + ARENA_SIZE)`. Each range's bytes are fixed at compile
//! time (the tensor's shape in its C API dtype, the plan's arena size); an empty range overlaps
//! nothing. Inputs may overlap each other (they are only read). The cost is two unsigned compares
//! per pair, `nout · (nin + (nout − 1) / 2 + 1)` pairs: up to [`STRAIGHT_LINE_PAIRS`] evaluated
//! without branches and tested with one (a handful of instructions for a typical model), beyond
//! that by two nested loops over stack tables of the ranges (docs/limits.md has measurements).
//! [`Emitter::any_null`] tests the caller's pointers for null the same two ways.

use super::emitter::{Backend, Emitter};
use inkwell::IntPredicate;
use inkwell::values::{IntValue, PointerValue};

/// Most pairs checked with straight-line code; more are checked by a loop over a table. Measured
/// (2026-12-02, debug build, x86-64): a model with 60 inputs and 60 outputs (5,430 pairs) took
/// 53 s and 2 GB to compile with straight-line code against 0.3 s without the check, as LLVM's
/// passes grow faster than linearly in one long block; 64 pairs (8 inputs and 5 outputs make 55) stay
/// a few hundred instructions.
const STRAIGHT_LINE_PAIRS: usize = 64;

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
        // The non-empty ranges, outputs last: (start, end).
        let mut ranges = Vec::new();
        let mut outputs_from = 0;
        for (k, (&p, &n)) in ptrs.iter().zip(&bytes).enumerate() {
            if k == first_out {
                outputs_from = ranges.len();
            }
            if n > 0 {
                let start = self.b.build_ptr_to_int(p, i64t, "").unwrap();
                let end = self.b.build_int_add(start, self.i64(n), "").unwrap();
                ranges.push((start, end));
            }
        }
        self.overlap_of_ranges(&ranges, outputs_from)
    }

    /// Whether any of `ptrs` (non-empty) is null: an `or` of the tests for up to
    /// [`STRAIGHT_LINE_PAIRS`] pointers, beyond that a loop over a stack table of them (a long
    /// `or` chain made LLVM's O3 take minutes for 2500 outputs).
    pub(crate) fn any_null(&self, ptrs: &[PointerValue<'ctx>]) -> IntValue<'ctx> {
        let b = &self.b;
        if ptrs.len() <= STRAIGHT_LINE_PAIRS {
            let mut any = b.build_is_null(ptrs[0], "").unwrap();
            for &p in &ptrs[1..] {
                let n = b.build_is_null(p, "").unwrap();
                any = b.build_or(any, n, "").unwrap();
            }
            return any;
        }
        let i64t = self.ctx.i64_type();
        let f = b.get_insert_block().unwrap().get_parent().unwrap();
        let n = self.i64(ptrs.len() as u64);
        let table = b.build_array_alloca(i64t, n, "ptrs").unwrap();
        for (k, &p) in ptrs.iter().enumerate() {
            let v = b.build_ptr_to_int(p, i64t, "").unwrap();
            b.build_store(self.gep(table, self.i64(k as u64)), v)
                .unwrap();
        }
        // do { any |= table[k] == 0 } while (++k < n)
        let pre = b.get_insert_block().unwrap();
        let body = self.ctx.append_basic_block(f, "null.scan");
        let done = self.ctx.append_basic_block(f, "null.done");
        b.build_unconditional_branch(body).unwrap();
        b.position_at_end(body);
        let k_phi = b.build_phi(i64t, "k").unwrap();
        let acc = b.build_phi(i64t, "acc").unwrap();
        let k = k_phi.as_basic_value().into_int_value();
        let v = b
            .build_load(self.gep(table, k), "")
            .unwrap()
            .into_int_value();
        let zero = self.i64(0);
        let hit = b.build_int_compare(IntPredicate::EQ, v, zero, "").unwrap();
        let hit = b.build_int_z_extend(hit, i64t, "").unwrap();
        let acc_next = b
            .build_or(acc.as_basic_value().into_int_value(), hit, "")
            .unwrap();
        let k_next = b.build_int_add(k, self.i64(1), "").unwrap();
        let more = b
            .build_int_compare(IntPredicate::ULT, k_next, n, "")
            .unwrap();
        b.build_conditional_branch(more, body, done).unwrap();
        k_phi.add_incoming(&[(&zero, pre), (&k_next, body)]);
        acc.add_incoming(&[(&zero, pre), (&acc_next, body)]);
        b.position_at_end(done);
        b.build_int_compare(IntPredicate::NE, acc_next, zero, "null")
            .unwrap()
    }

    /// Whether a range from `outputs_from` on intersects any range before it; ranges are
    /// `(start, end)` addresses, non-empty (the batch dispatcher's depend on n at run time).
    pub(crate) fn overlap_of_ranges(
        &self,
        ranges: &[(IntValue<'ctx>, IntValue<'ctx>)],
        outputs_from: usize,
    ) -> IntValue<'ctx> {
        let pairs: usize = (outputs_from..ranges.len()).sum();
        if pairs <= STRAIGHT_LINE_PAIRS {
            self.overlap_straight(ranges, outputs_from)
        } else {
            self.overlap_loop(ranges, outputs_from)
        }
    }

    /// `(a_start < b_end) & (b_start < a_end)`.
    fn intersects(
        &self,
        (a_start, a_end): (IntValue<'ctx>, IntValue<'ctx>),
        (b_start, b_end): (IntValue<'ctx>, IntValue<'ctx>),
    ) -> IntValue<'ctx> {
        let before = self
            .b
            .build_int_compare(IntPredicate::ULT, a_start, b_end, "")
            .unwrap();
        let after = self
            .b
            .build_int_compare(IntPredicate::ULT, b_start, a_end, "")
            .unwrap();
        self.b.build_and(before, after, "").unwrap()
    }

    /// Every pair written out, or-ed together.
    fn overlap_straight(
        &self,
        ranges: &[(IntValue<'ctx>, IntValue<'ctx>)],
        outputs_from: usize,
    ) -> IntValue<'ctx> {
        let mut any = self.ctx.bool_type().const_zero();
        for o in outputs_from..ranges.len() {
            for k in 0..o {
                let hit = self.intersects(ranges[o], ranges[k]);
                any = self.b.build_or(any, hit, "overlap").unwrap();
            }
        }
        any
    }

    /// Whether any of the `n` pointers of the caller's array `arr` is null: a loop.
    pub(crate) fn any_null_in(&self, arr: PointerValue<'ctx>, n: usize) -> IntValue<'ctx> {
        if n == 0 {
            return self.ctx.bool_type().const_zero();
        }
        let i64t = self.ctx.i64_type();
        let acc = self.scan(n, &|cg, k| {
            let p =
                cg.b.build_load(cg.gep(arr, k), "")
                    .unwrap()
                    .into_pointer_value();
            let hit = cg.b.build_is_null(p, "").unwrap();
            cg.b.build_int_z_extend(hit, i64t, "").unwrap()
        });
        self.b
            .build_int_compare(IntPredicate::NE, acc, self.i64(0), "null")
            .unwrap()
    }

    /// `acc |= body(k)` for `k` in `0..n` (`n` ≥ 1) as a do-while loop; the final `acc` (i64).
    fn scan(
        &self,
        n: usize,
        body: &dyn Fn(&Self, IntValue<'ctx>) -> IntValue<'ctx>,
    ) -> IntValue<'ctx> {
        let b = &self.b;
        let i64t = self.ctx.i64_type();
        let f = b.get_insert_block().unwrap().get_parent().unwrap();
        let pre = b.get_insert_block().unwrap();
        let head = self.ctx.append_basic_block(f, "scan");
        let done = self.ctx.append_basic_block(f, "scan.done");
        b.build_unconditional_branch(head).unwrap();
        b.position_at_end(head);
        let k_phi = b.build_phi(i64t, "k").unwrap();
        let acc = b.build_phi(i64t, "acc").unwrap();
        let k = k_phi.as_basic_value().into_int_value();
        let v = body(self, k);
        let acc_next = b
            .build_or(acc.as_basic_value().into_int_value(), v, "")
            .unwrap();
        let k_next = b.build_int_add(k, self.i64(1), "").unwrap();
        let more = b
            .build_int_compare(IntPredicate::ULT, k_next, self.i64(n as u64), "")
            .unwrap();
        let body_end = b.get_insert_block().unwrap();
        b.build_conditional_branch(more, head, done).unwrap();
        let zero = self.i64(0);
        k_phi.add_incoming(&[(&zero, pre), (&k_next, body_end)]);
        acc.add_incoming(&[(&zero, pre), (&acc_next, body_end)]);
        b.position_at_end(done);
        acc_next
    }

    /// [`Emitter::overlap_check`] for the caller's arrays of input and output pointers (as
    /// `<name>_run_ptrs` gets them): the range tables filled by loops (an empty range becomes
    /// `[0, 0)`, which intersects nothing), then the pair loops of [`Self::overlap_tables`].
    pub(crate) fn overlap_arrays(
        &self,
        arena: PointerValue<'ctx>,
        ins: PointerValue<'ctx>,
        outs: PointerValue<'ctx>,
    ) -> IntValue<'ctx> {
        let bytes = self.caller_bytes();
        let n = bytes.len();
        let nout = self.hlo.entry.outputs.len();
        if nout == 0 {
            return self.ctx.bool_type().const_zero();
        }
        let i64t = self.ctx.i64_type();
        let sizes_ty = i64t.array_type(n as u32);
        let sizes = self
            .m
            .add_global(sizes_ty, None, &format!("{}.buffer_bytes", self.hlo.name));
        let vals: Vec<_> = bytes.iter().map(|&b| self.i64(b)).collect();
        sizes.set_initializer(&i64t.const_array(&vals));
        sizes.set_constant(true);
        sizes.set_linkage(inkwell::module::Linkage::Private);
        let sizes = self
            .b
            .build_pointer_cast(
                sizes.as_pointer_value(),
                i64t.ptr_type(inkwell::AddressSpace::default()),
                "",
            )
            .unwrap();
        let (starts, ends) = self.range_tables(n);
        let store = |cg: &Self, at: IntValue<'ctx>, p: PointerValue<'ctx>| {
            let size =
                cg.b.build_load(cg.gep(sizes, at), "")
                    .unwrap()
                    .into_int_value();
            let addr = cg.b.build_ptr_to_int(p, i64t, "").unwrap();
            let empty =
                cg.b.build_int_compare(IntPredicate::EQ, size, cg.i64(0), "")
                    .unwrap();
            let start =
                cg.b.build_select(empty, cg.i64(0), addr, "")
                    .unwrap()
                    .into_int_value();
            let end = cg.b.build_int_add(start, size, "").unwrap();
            cg.b.build_store(cg.gep(starts, at), start).unwrap();
            cg.b.build_store(cg.gep(ends, at), end).unwrap();
        };
        store(self, self.i64(0), arena);
        let nin = n - 1 - nout;
        for (arr, first, count) in [(ins, 1, nin), (outs, 1 + nin, nout)] {
            if count == 0 {
                continue;
            }
            self.scan(count, &|cg, k| {
                let p =
                    cg.b.build_load(cg.gep(arr, k), "")
                        .unwrap()
                        .into_pointer_value();
                store(
                    cg,
                    cg.b.build_int_add(k, cg.i64(first as u64), "").unwrap(),
                    p,
                );
                cg.i64(0)
            });
        }
        self.overlap_tables(starts, ends, n, 1 + nin)
    }

    /// Two stack tables of `n` i64 (starts, ends) in the current function's entry block.
    fn range_tables(&self, n: usize) -> (PointerValue<'ctx>, PointerValue<'ctx>) {
        let i64t = self.ctx.i64_type();
        let here = self.b.get_insert_block().unwrap();
        let f = here.get_parent().unwrap();
        let entry = f.get_first_basic_block().unwrap();
        match entry.get_first_instruction() {
            Some(i) => self.b.position_before(&i),
            None => self.b.position_at_end(entry),
        }
        let ty = i64t.array_type(n.max(1) as u32);
        let starts = self.b.build_alloca(ty, "starts").unwrap();
        let ends = self.b.build_alloca(ty, "ends").unwrap();
        self.b.position_at_end(here);
        let p = i64t.ptr_type(inkwell::AddressSpace::default());
        (
            self.b.build_pointer_cast(starts, p, "").unwrap(),
            self.b.build_pointer_cast(ends, p, "").unwrap(),
        )
    }

    /// The ranges stored in two stack tables (starts, ends) and the pairs visited by two nested
    /// loops ([`Self::overlap_tables`]): code of constant size, for models with many inputs and
    /// outputs.
    fn overlap_loop(
        &self,
        ranges: &[(IntValue<'ctx>, IntValue<'ctx>)],
        outputs_from: usize,
    ) -> IntValue<'ctx> {
        let (starts, ends) = self.range_tables(ranges.len());
        for (k, &(start, end)) in ranges.iter().enumerate() {
            let k = self.i64(k as u64);
            self.b.build_store(self.gep(starts, k), start).unwrap();
            self.b.build_store(self.gep(ends, k), end).unwrap();
        }
        self.overlap_tables(starts, ends, ranges.len(), outputs_from)
    }

    /// Whether a range from `outputs_from` on (of the `len` in the tables) intersects one before
    /// it: two nested do-while loops, the inner one an `or` reduction the loop vectorizer turns
    /// into vector compares. Needs `outputs_from < len`.
    fn overlap_tables(
        &self,
        starts: PointerValue<'ctx>,
        ends: PointerValue<'ctx>,
        len: usize,
        outputs_from: usize,
    ) -> IntValue<'ctx> {
        let i64t = self.ctx.i64_type();
        let f = self.b.get_insert_block().unwrap().get_parent().unwrap();
        let n = self.i64(len as u64);
        let load = |table: PointerValue<'ctx>, k: IntValue<'ctx>| {
            self.b
                .build_load(self.gep(table, k), "")
                .unwrap()
                .into_int_value()
        };
        // for o in first..len { for k in 0..o { acc |= intersects(o, k) } }, both as do-while
        // loops: `first` >= 1 (an output at 0 has nothing before it) and first < len (there are
        // more pairs than the straight-line limit), so each runs at least once.
        let first = outputs_from.max(1);
        let zero = self.i64(0);
        let pre = self.b.get_insert_block().unwrap();
        let outer = self.ctx.append_basic_block(f, "overlap.outer");
        let inner = self.ctx.append_basic_block(f, "overlap.inner");
        let latch = self.ctx.append_basic_block(f, "overlap.latch");
        let done = self.ctx.append_basic_block(f, "overlap.done");
        self.b.build_unconditional_branch(outer).unwrap();

        self.b.position_at_end(outer);
        let o_phi = self.b.build_phi(i64t, "o").unwrap();
        let acc_o = self.b.build_phi(i64t, "acc.o").unwrap();
        let o = o_phi.as_basic_value().into_int_value();
        let out_range = (load(starts, o), load(ends, o));
        self.b.build_unconditional_branch(inner).unwrap();

        self.b.position_at_end(inner);
        let k_phi = self.b.build_phi(i64t, "k").unwrap();
        let acc_k = self.b.build_phi(i64t, "acc.k").unwrap();
        let k = k_phi.as_basic_value().into_int_value();
        let hit = self.intersects(out_range, (load(starts, k), load(ends, k)));
        let hit = self.b.build_int_z_extend(hit, i64t, "").unwrap();
        let acc_next = self
            .b
            .build_or(acc_k.as_basic_value().into_int_value(), hit, "")
            .unwrap();
        let k_next = self.b.build_int_add(k, self.i64(1), "").unwrap();
        let k_more = self
            .b
            .build_int_compare(IntPredicate::ULT, k_next, o, "")
            .unwrap();
        self.b
            .build_conditional_branch(k_more, inner, latch)
            .unwrap();
        k_phi.add_incoming(&[(&zero, outer), (&k_next, inner)]);
        acc_k.add_incoming(&[(&acc_o.as_basic_value(), outer), (&acc_next, inner)]);

        self.b.position_at_end(latch);
        let o_next = self.b.build_int_add(o, self.i64(1), "").unwrap();
        let o_more = self
            .b
            .build_int_compare(IntPredicate::ULT, o_next, n, "")
            .unwrap();
        self.b
            .build_conditional_branch(o_more, outer, done)
            .unwrap();
        o_phi.add_incoming(&[(&self.i64(first as u64), pre), (&o_next, latch)]);
        acc_o.add_incoming(&[(&zero, pre), (&acc_next, latch)]);

        self.b.position_at_end(done);
        self.b
            .build_int_compare(IntPredicate::NE, acc_next, zero, "overlap")
            .unwrap()
    }
}
