//! `<name>_run_batch`: running n items on the smallest compiled batch bucket that holds them.
//!
//! Contract: a model with `batch_sizes` has one set of entry points per bucket (the declared
//! batch's are `<name>_run*`, the others `<name>_b<B>_run*`, all in one LLVM module so identical
//! weights are one constant). The dispatcher generated here,
//! `int <name>_run_batch_ptrs(void *arena, int32_t n, const void *const *in, void *const *out)`
//! and its typed form `<name>_run_batch(arena, n, in0.., out0..)`, checks its arguments
//! (`BAD_ARGUMENT` when n < 1 or n exceeds the largest bucket; null pointers; a misaligned
//! arena; an output overlapping an input, another output or the arena: `OVERLAP`), picks the
//! smallest bucket B ≥ n, and when B = n calls it on the caller's buffers.
//! Otherwise it stages: each input's n items are copied into the arena after that bucket's own
//! bytes, followed by B − n zero items, the bucket runs on the staged buffers, and the first n
//! items of each output are copied back. So exactly n items are read and written. The copies are
//! byte loops (the functions carry `no-builtins`, so no `memcpy` call appears).

use super::Cg;
use crate::arena::ARENA_ALIGN;
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::module::Linkage;
use inkwell::types::BasicMetadataTypeEnum;
use inkwell::values::{BasicValueEnum, FunctionValue, IntValue, PointerValue};
use runtime_min::Status;

/// One compiled bucket.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// Items (batch) or positions (sequence) it runs.
    pub batch: usize,
    /// The prefix of its entry points (`<name>`, `<name>_b<B>` or `<name>_s<S>`).
    pub prefix: String,
    /// Its own arena bytes.
    pub arena: usize,
}

/// How one input or output travels between the caller and a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Staging {
    /// Along the bucketed dimension: `outer` blocks, each `n` (caller) or `B` (bucket) units of
    /// `unit_bytes`. Batch: one block of items. Sequence: the dims before the axis are blocks.
    Bucketed { outer: usize, unit_bytes: usize },
    /// Passed through (its shape does not depend on the bucket).
    Direct,
    /// The sequence mask input: `rows` rows of the bucket's length, 1.0 below n, 0.0 from n on,
    /// filled by the dispatcher (the caller does not pass it).
    Mask { rows: usize },
}

/// What the dispatcher needs: the buckets (ascending), each input's and output's role, and the
/// entry point (`run_batch` or `run_seq`).
#[derive(Debug, Clone)]
pub struct BatchPlan {
    pub buckets: Vec<Bucket>,
    pub inputs: Vec<Staging>,
    pub outputs: Vec<Staging>,
    pub entry: String,
}

fn align(n: usize) -> usize {
    n.div_ceil(ARENA_ALIGN) * ARENA_ALIGN
}

impl BatchPlan {
    /// The bytes a tensor of this role takes staged for `bucket`.
    fn staged_bytes(role: &Staging, bucket: &Bucket) -> usize {
        match role {
            Staging::Bucketed { outer, unit_bytes } => outer * unit_bytes * bucket.batch,
            Staging::Mask { rows } => rows * 4 * bucket.batch,
            Staging::Direct => 0,
        }
    }

    /// Offsets of each staged input then output (from the start of the staging area) and the
    /// staging bytes of `bucket`.
    fn staging(&self, bucket: &Bucket) -> (Vec<usize>, usize) {
        let mut offs = Vec::new();
        let mut at = 0;
        for role in self.inputs.iter().chain(&self.outputs) {
            offs.push(at);
            at += align(Self::staged_bytes(role, bucket));
        }
        (offs, at)
    }

    /// Arena bytes of the whole model: the largest bucket arena plus its staging.
    pub fn arena_size(&self) -> usize {
        self.buckets
            .iter()
            .map(|b| align(b.arena) + self.staging(b).1)
            .max()
            .unwrap_or(0)
    }

    /// Indices of the inputs the caller passes (all but the mask).
    pub fn caller_inputs(&self) -> Vec<usize> {
        (0..self.inputs.len())
            .filter(|&i| !matches!(self.inputs[i], Staging::Mask { .. }))
            .collect()
    }
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    fn status(&self, s: Status) -> IntValue<'ctx> {
        self.ctx.i32_type().const_int(s.code() as i64 as u64, true)
    }

    /// `for i in 0..n { dst[i] = src.map_or(0, |s| s[i]) }` over bytes, n known at run time.
    fn byte_loop(
        &self,
        dst: PointerValue<'ctx>,
        src: Option<PointerValue<'ctx>>,
        n: IntValue<'ctx>,
    ) {
        self.for_range(self.i64(0), n, &mut |cg, i| {
            let v: BasicValueEnum = match src {
                Some(s) => cg.b.build_load(cg.gep(s, i), "").unwrap(),
                None => cg.ctx.i8_type().const_zero().into(),
            };
            cg.b.build_store(cg.gep(dst, i), v).unwrap();
        });
    }

    /// Returns `s` from `f` when `bad` holds, and continues in a fresh block otherwise.
    fn fail_if(&self, f: FunctionValue<'ctx>, bad: IntValue<'ctx>, s: Status) {
        let fail = self.ctx.append_basic_block(f, "fail");
        let ok = self.ctx.append_basic_block(f, "ok");
        self.b.build_conditional_branch(bad, fail, ok).unwrap();
        self.b.position_at_end(fail);
        self.b.build_return(Some(&self.status(s))).unwrap();
        self.b.position_at_end(ok);
    }

    /// Copies `n` of `b` units per block (`outer` blocks of `unit` bytes) between a caller
    /// buffer (n units per block) and a staged one (b units per block); into the staged buffer
    /// the rest of each block is zeroed.
    #[allow(clippy::too_many_arguments)]
    fn block_copy(
        &self,
        user: PointerValue<'ctx>,
        staged: PointerValue<'ctx>,
        n: IntValue<'ctx>,
        b: usize,
        outer: usize,
        unit: usize,
        into_staged: bool,
    ) {
        self.for_loop(outer, &mut |cg, o| {
            let bb = &cg.b;
            let used = bb.build_int_mul(n, cg.i64(unit as u64), "").unwrap();
            let u_off = bb.build_int_mul(o, used, "").unwrap();
            let s_off = bb.build_int_mul(o, cg.i64((b * unit) as u64), "").unwrap();
            let (u, s) = (cg.gep(user, u_off), cg.gep(staged, s_off));
            if into_staged {
                cg.byte_loop(s, Some(u), used);
                let pad =
                    cg.b.build_int_sub(cg.i64((b * unit) as u64), used, "")
                        .unwrap();
                cg.byte_loop(cg.gep(s, used), None, pad);
            } else {
                cg.byte_loop(u, Some(s), used);
            }
        });
    }

    /// Whether a caller's output overlaps one of its inputs, another output or the arena
    /// (`plan.arena_size()` bytes), each caller buffer holding n items of its bucketed dims.
    fn dispatcher_overlap(
        &self,
        plan: &BatchPlan,
        user_in: &[Option<PointerValue<'ctx>>],
        user_out: &[PointerValue<'ctx>],
        arena: PointerValue<'ctx>,
        n: IntValue<'ctx>,
    ) -> IntValue<'ctx> {
        let c = &self.hlo.entry;
        let params = c.parameters();
        let i64t = self.ctx.i64_type();
        let range = |p: PointerValue<'ctx>, bytes: IntValue<'ctx>| {
            let start = self.b.build_ptr_to_int(p, i64t, "").unwrap();
            (start, self.b.build_int_add(start, bytes, "").unwrap())
        };
        let caller_bytes = |role: &Staging, full: usize| match role {
            Staging::Bucketed { outer, unit_bytes } if outer * unit_bytes > 0 => Some(
                self.b
                    .build_int_mul(n, self.i64((outer * unit_bytes) as u64), "")
                    .unwrap(),
            ),
            Staging::Direct if full > 0 => Some(self.i64(full as u64)),
            _ => None,
        };
        let mut ranges = Vec::new();
        if plan.arena_size() > 0 {
            ranges.push(range(arena, self.i64(plan.arena_size() as u64)));
        }
        for (i, role) in plan.inputs.iter().enumerate() {
            let full =
                c.inst(params[i]).shape.element_count() * self.hlo.input_dtype(i).size_bytes();
            if let (Some(p), Some(b)) = (user_in[i], caller_bytes(role, full)) {
                ranges.push(range(p, b));
            }
        }
        let outputs_from = ranges.len();
        for (k, role) in plan.outputs.iter().enumerate() {
            let o = &c.outputs[k];
            let full =
                c.inst(o.value).shape.element_count() * self.hlo.output_dtype(k).size_bytes();
            if let Some(b) = caller_bytes(role, full) {
                ranges.push(range(user_out[k], b));
            }
        }
        self.overlap_of_ranges(&ranges, outputs_from)
    }

    /// Generates `<name>_<entry>_ptrs` and `<name>_<entry>` (this Cg's module name).
    pub(super) fn batch_dispatcher(&self, plan: &BatchPlan) {
        let name = &self.hlo.name;
        let entry = &plan.entry;
        let c = &self.hlo.entry;
        let params = c.parameters();
        let (nin, nout) = (plan.inputs.len(), plan.outputs.len());
        let caller_inputs = plan.caller_inputs();
        let i8p = self.i8p();
        let i8pp = i8p.ptr_type(AddressSpace::default());
        let (i32t, i64t, f32t) = (
            self.ctx.i32_type(),
            self.ctx.i64_type(),
            self.ctx.f32_type(),
        );
        let ptrs_ty = i32t.fn_type(&[i8p.into(), i8pp.into(), i8pp.into()], false);
        let f = self.m.add_function(
            &format!("{name}_{entry}_ptrs"),
            i32t.fn_type(&[i8p.into(), i32t.into(), i8pp.into(), i8pp.into()], false),
            Some(Linkage::External),
        );
        self.common_attrs(f);
        self.b
            .position_at_end(self.ctx.append_basic_block(f, "entry"));
        let arena = f.get_nth_param(0).unwrap().into_pointer_value();
        let n32 = f.get_nth_param(1).unwrap().into_int_value();
        let ins = f.get_nth_param(2).unwrap().into_pointer_value();
        let outs = f.get_nth_param(3).unwrap().into_pointer_value();
        for p in [arena, ins, outs] {
            self.fail_if(f, self.b.build_is_null(p, "").unwrap(), Status::NullPointer);
        }
        // The caller's pointers, per model input (None: the mask) and output.
        let load = |arr: PointerValue<'ctx>, j: usize| {
            let p = self
                .b
                .build_load(self.gep(arr, self.i64(j as u64)), "")
                .unwrap()
                .into_pointer_value();
            self.fail_if(f, self.b.build_is_null(p, "").unwrap(), Status::NullPointer);
            p
        };
        let mut user_in: Vec<Option<PointerValue<'ctx>>> = vec![None; nin];
        for (k, &i) in caller_inputs.iter().enumerate() {
            user_in[i] = Some(load(ins, k));
        }
        let user_out: Vec<PointerValue<'ctx>> = (0..nout).map(|j| load(outs, j)).collect();
        self.fail_if(f, self.is_misaligned(arena), Status::MisalignedArena);
        let max = plan.buckets.last().map_or(0, |b| b.batch) as u64;
        let n = self.b.build_int_s_extend(n32, i64t, "").unwrap();
        let out_of_range = self
            .b
            .build_or(
                self.b
                    .build_int_compare(IntPredicate::SLT, n, self.i64(1), "")
                    .unwrap(),
                self.b
                    .build_int_compare(IntPredicate::SGT, n, self.i64(max), "")
                    .unwrap(),
                "",
            )
            .unwrap();
        self.fail_if(f, out_of_range, Status::BadArgument);
        // The caller's buffers hold n items: an output overlapping an input, another output or
        // the arena is refused before anything is staged (`core/overlap.rs`).
        let overlap = self.dispatcher_overlap(plan, &user_in, &user_out, arena, n);
        self.fail_if(f, overlap, Status::Overlap);
        // The smallest bucket holding n: a chain of compares, smallest first.
        for (bi, bucket) in plan.buckets.iter().enumerate() {
            let run = self
                .m
                .get_function(&format!("{}_run_ptrs", bucket.prefix))
                .unwrap_or_else(|| {
                    self.m.add_function(
                        &format!("{}_run_ptrs", bucket.prefix),
                        ptrs_ty,
                        Some(Linkage::External),
                    )
                });
            let here = self.ctx.append_basic_block(f, "bucket");
            let next = self.ctx.append_basic_block(f, "next");
            let fits = if bi + 1 == plan.buckets.len() {
                self.ctx.bool_type().const_int(1, false)
            } else {
                self.b
                    .build_int_compare(IntPredicate::SLE, n, self.i64(bucket.batch as u64), "")
                    .unwrap()
            };
            self.b.build_conditional_branch(fits, here, next).unwrap();
            self.b.position_at_end(here);
            let b = bucket.batch;
            let exact = self
                .b
                .build_int_compare(IntPredicate::EQ, n, self.i64(b as u64), "")
                .unwrap();
            let (offs, _) = plan.staging(bucket);
            let base = align(bucket.arena);
            let staged = |j: usize| self.gep(arena, self.i64((base + offs[j]) as u64));
            let in_arr = self
                .b
                .build_array_alloca(i8p, self.i64(nin.max(1) as u64), "ins")
                .unwrap();
            let out_arr = self
                .b
                .build_array_alloca(i8p, self.i64(nout.max(1) as u64), "outs")
                .unwrap();
            // Inputs: the caller's buffer when it already has the bucket's size, else staged.
            for (i, role) in plan.inputs.iter().enumerate() {
                let p = match (role, user_in[i]) {
                    (Staging::Direct, Some(u)) => u,
                    (Staging::Bucketed { outer, unit_bytes }, Some(u)) => {
                        let s = staged(i);
                        let dst = self.slot(f, i8p.into());
                        self.b.build_store(dst, u).unwrap();
                        let copy = self.ctx.append_basic_block(f, "stage_in");
                        let done = self.ctx.append_basic_block(f, "staged_in");
                        self.b.build_conditional_branch(exact, done, copy).unwrap();
                        self.b.position_at_end(copy);
                        self.block_copy(u, s, n, b, *outer, *unit_bytes, true);
                        self.b.build_store(dst, s).unwrap();
                        self.b.build_unconditional_branch(done).unwrap();
                        self.b.position_at_end(done);
                        self.b.build_load(dst, "").unwrap().into_pointer_value()
                    }
                    (Staging::Mask { rows }, _) => {
                        let s = staged(i);
                        let fp = self
                            .b
                            .build_pointer_cast(s, f32t.ptr_type(AddressSpace::default()), "")
                            .unwrap();
                        self.for_loop(rows * b, &mut |cg, k| {
                            let t =
                                cg.b.build_int_unsigned_rem(k, cg.i64(b as u64), "")
                                    .unwrap();
                            let on = cg.b.build_int_compare(IntPredicate::SLT, t, n, "").unwrap();
                            let v = cg.select(on, cg.f32c(1.0).into(), cg.f32c(0.0).into());
                            cg.b.build_store(cg.gep(fp, k), v).unwrap();
                        });
                        s
                    }
                    _ => unreachable!("every caller input has a pointer"),
                };
                self.b
                    .build_store(self.gep(in_arr, self.i64(i as u64)), p)
                    .unwrap();
            }
            for (j, role) in plan.outputs.iter().enumerate() {
                let p = match role {
                    Staging::Bucketed { .. } => {
                        let v = self.select(exact, user_out[j].into(), staged(nin + j).into());
                        v.into_pointer_value()
                    }
                    _ => user_out[j],
                };
                self.b
                    .build_store(self.gep(out_arr, self.i64(j as u64)), p)
                    .unwrap();
            }
            let s = self
                .b
                .build_call(run, &[arena.into(), in_arr.into(), out_arr.into()], "")
                .unwrap()
                .try_as_basic_value()
                .basic()
                .expect("run_ptrs returns a status")
                .into_int_value();
            let failed = self
                .b
                .build_int_compare(IntPredicate::NE, s, self.status(Status::Ok), "")
                .unwrap();
            self.fail_if_status(f, failed, s);
            // Outputs staged (n < bucket): the first n units of every block back to the caller.
            let copy = self.ctx.append_basic_block(f, "copy_out");
            let done = self.ctx.append_basic_block(f, "done");
            self.b.build_conditional_branch(exact, done, copy).unwrap();
            self.b.position_at_end(copy);
            for (j, role) in plan.outputs.iter().enumerate() {
                if let Staging::Bucketed { outer, unit_bytes } = role {
                    self.block_copy(
                        user_out[j],
                        staged(nin + j),
                        n,
                        b,
                        *outer,
                        *unit_bytes,
                        false,
                    );
                }
            }
            self.b.build_unconditional_branch(done).unwrap();
            self.b.position_at_end(done);
            self.b.build_return(Some(&self.status(Status::Ok))).unwrap();
            self.b.position_at_end(next);
        }
        self.b.build_unreachable().unwrap();

        // int <name>_<entry>(void *arena, int32_t n, const T *in0, ..., T *out0, ...)
        let mut tys: Vec<BasicMetadataTypeEnum> = vec![i8p.into(), i32t.into()];
        for &i in &caller_inputs {
            tys.push(self.ptr_type(c.inst(params[i]).shape.dtype).into());
        }
        for o in &c.outputs {
            tys.push(self.ptr_type(c.inst(o.value).shape.dtype).into());
        }
        let typed = self.m.add_function(
            &format!("{name}_{entry}"),
            i32t.fn_type(&tys, false),
            Some(Linkage::External),
        );
        self.common_attrs(typed);
        self.b
            .position_at_end(self.ctx.append_basic_block(typed, "entry"));
        let ncin = caller_inputs.len();
        let in_arr = self
            .b
            .build_array_alloca(i8p, self.i64(ncin.max(1) as u64), "ins")
            .unwrap();
        let out_arr = self
            .b
            .build_array_alloca(i8p, self.i64(nout.max(1) as u64), "outs")
            .unwrap();
        for k in 0..ncin + nout {
            let p = typed
                .get_nth_param(2 + k as u32)
                .unwrap()
                .into_pointer_value();
            let p = self.b.build_pointer_cast(p, i8p, "").unwrap();
            let (arr, slot) = if k < ncin {
                (in_arr, k)
            } else {
                (out_arr, k - ncin)
            };
            self.b
                .build_store(self.gep(arr, self.i64(slot as u64)), p)
                .unwrap();
        }
        let s = self
            .b
            .build_call(
                f,
                &[
                    typed.get_nth_param(0).unwrap().into(),
                    typed.get_nth_param(1).unwrap().into(),
                    in_arr.into(),
                    out_arr.into(),
                ],
                "",
            )
            .unwrap()
            .try_as_basic_value()
            .basic()
            .expect("the dispatcher returns a status");
        self.b.build_return(Some(&s)).unwrap();
    }

    /// Returns the status `s` from `f` when `bad` holds.
    fn fail_if_status(&self, f: FunctionValue<'ctx>, bad: IntValue<'ctx>, s: IntValue<'ctx>) {
        let fail = self.ctx.append_basic_block(f, "run_failed");
        let ok = self.ctx.append_basic_block(f, "run_ok");
        self.b.build_conditional_branch(bad, fail, ok).unwrap();
        self.b.position_at_end(fail);
        self.b.build_return(Some(&s)).unwrap();
        self.b.position_at_end(ok);
    }
}
