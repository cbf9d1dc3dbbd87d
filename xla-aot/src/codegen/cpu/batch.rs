//! `<name>_run_batch`: running n items on the smallest compiled batch bucket that holds them.
//!
//! Contract: a model with `batch_sizes` has one set of entry points per bucket (the declared
//! batch's are `<name>_run*`, the others `<name>_b<B>_run*`, all in one LLVM module so identical
//! weights are one constant). The dispatcher generated here,
//! `int <name>_run_batch_ptrs(void *arena, int32_t n, const void *const *in, void *const *out)`
//! and its typed form `<name>_run_batch(arena, n, in0.., out0..)`, checks its arguments
//! (`BAD_ARGUMENT` when n < 1 or n exceeds the largest bucket; null pointers; a misaligned
//! arena), picks the smallest bucket B ≥ n, and when B = n calls it on the caller's buffers.
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
    /// Items it runs.
    pub batch: usize,
    /// The prefix of its entry points (`<name>` or `<name>_b<B>`).
    pub prefix: String,
    /// Its own arena bytes.
    pub arena: usize,
}

/// What the dispatcher needs: the buckets (ascending) and the bytes of one item of each input and
/// output.
#[derive(Debug, Clone)]
pub struct BatchPlan {
    pub buckets: Vec<Bucket>,
    pub input_item_bytes: Vec<usize>,
    pub output_item_bytes: Vec<usize>,
}

fn align(n: usize) -> usize {
    n.div_ceil(ARENA_ALIGN) * ARENA_ALIGN
}

impl BatchPlan {
    /// Offsets of each staged input then output (from the start of the staging area) and the
    /// staging bytes of `bucket`.
    fn staging(&self, bucket: &Bucket) -> (Vec<usize>, usize) {
        let mut offs = Vec::new();
        let mut at = 0;
        for &item in self.input_item_bytes.iter().chain(&self.output_item_bytes) {
            offs.push(at);
            at += align(item * bucket.batch);
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

    /// Generates `<name>_run_batch_ptrs` and `<name>_run_batch` (this Cg's module name).
    pub(super) fn batch_dispatcher(&self, plan: &BatchPlan) {
        let name = &self.hlo.name;
        let c = &self.hlo.entry;
        let (nin, nout) = (plan.input_item_bytes.len(), plan.output_item_bytes.len());
        let i8p = self.i8p();
        let i8pp = i8p.ptr_type(AddressSpace::default());
        let (i32t, i64t) = (self.ctx.i32_type(), self.ctx.i64_type());
        let ptrs_ty = i32t.fn_type(&[i8p.into(), i8pp.into(), i8pp.into()], false);
        let f = self.m.add_function(
            &format!("{name}_run_batch_ptrs"),
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
        let mut user = Vec::new();
        for (arr, k) in [(ins, nin), (outs, nout)] {
            for j in 0..k {
                let p = self
                    .b
                    .build_load(self.gep(arr, self.i64(j as u64)), "")
                    .unwrap()
                    .into_pointer_value();
                self.fail_if(f, self.b.build_is_null(p, "").unwrap(), Status::NullPointer);
                user.push(p);
            }
        }
        let addr = self.b.build_ptr_to_int(arena, i64t, "").unwrap();
        let low = self
            .b
            .build_and(addr, self.i64(ARENA_ALIGN as u64 - 1), "")
            .unwrap();
        let mis = self
            .b
            .build_int_compare(IntPredicate::NE, low, self.i64(0), "")
            .unwrap();
        self.fail_if(f, mis, Status::MisalignedArena);
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
            let fits = self
                .b
                .build_int_compare(IntPredicate::SLE, n, self.i64(bucket.batch as u64), "")
                .unwrap();
            let fits = if bi + 1 == plan.buckets.len() {
                self.ctx.bool_type().const_int(1, false)
            } else {
                fits
            };
            self.b.build_conditional_branch(fits, here, next).unwrap();
            self.b.position_at_end(here);
            // Exactly full: the caller's buffers.
            let exact = self
                .b
                .build_int_compare(IntPredicate::EQ, n, self.i64(bucket.batch as u64), "")
                .unwrap();
            let direct = self.ctx.append_basic_block(f, "direct");
            let staged = self.ctx.append_basic_block(f, "staged");
            self.b
                .build_conditional_branch(exact, direct, staged)
                .unwrap();
            self.b.position_at_end(direct);
            let s = self
                .b
                .build_call(run, &[arena.into(), ins.into(), outs.into()], "")
                .unwrap()
                .try_as_basic_value()
                .basic()
                .expect("run_ptrs returns a status");
            self.b.build_return(Some(&s)).unwrap();
            // Staged: copy in n items, zero the rest, run, copy n items out.
            self.b.position_at_end(staged);
            let (offs, _) = plan.staging(bucket);
            let base = align(bucket.arena);
            let in_arr = self
                .b
                .build_array_alloca(i8p, self.i64(nin.max(1) as u64), "ins")
                .unwrap();
            let out_arr = self
                .b
                .build_array_alloca(i8p, self.i64(nout.max(1) as u64), "outs")
                .unwrap();
            let items = plan.input_item_bytes.iter().chain(&plan.output_item_bytes);
            let mut staged_ptrs = Vec::new();
            for (j, (&item, &off)) in items.zip(&offs).enumerate() {
                let dst = self.gep(arena, self.i64((base + off) as u64));
                staged_ptrs.push(dst);
                let arr = if j < nin { in_arr } else { out_arr };
                let slot = if j < nin { j } else { j - nin };
                self.b
                    .build_store(self.gep(arr, self.i64(slot as u64)), dst)
                    .unwrap();
                if j < nin {
                    let used = self.b.build_int_mul(n, self.i64(item as u64), "").unwrap();
                    self.byte_loop(dst, Some(user[j]), used);
                    let pad_at = self.gep(dst, used);
                    let total = self.i64((item * bucket.batch) as u64);
                    let pad = self.b.build_int_sub(total, used, "").unwrap();
                    self.byte_loop(pad_at, None, pad);
                }
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
            let fail = self.ctx.append_basic_block(f, "run_failed");
            let copy = self.ctx.append_basic_block(f, "copy_out");
            self.b.build_conditional_branch(failed, fail, copy).unwrap();
            self.b.position_at_end(fail);
            self.b.build_return(Some(&s)).unwrap();
            self.b.position_at_end(copy);
            for (k, &item) in plan.output_item_bytes.iter().enumerate() {
                let used = self.b.build_int_mul(n, self.i64(item as u64), "").unwrap();
                self.byte_loop(user[nin + k], Some(staged_ptrs[nin + k]), used);
            }
            self.b.build_return(Some(&self.status(Status::Ok))).unwrap();
            self.b.position_at_end(next);
        }
        self.b.build_unreachable().unwrap();

        // int <name>_run_batch(void *arena, int32_t n, const T *in0, ..., T *out0, ...)
        let mut tys: Vec<BasicMetadataTypeEnum> = vec![i8p.into(), i32t.into()];
        for &p in &c.parameters() {
            tys.push(self.ptr_type(c.inst(p).shape.dtype).into());
        }
        for o in &c.outputs {
            tys.push(self.ptr_type(c.inst(o.value).shape.dtype).into());
        }
        let typed = self.m.add_function(
            &format!("{name}_run_batch"),
            i32t.fn_type(&tys, false),
            Some(Linkage::External),
        );
        self.common_attrs(typed);
        self.b
            .position_at_end(self.ctx.append_basic_block(typed, "entry"));
        let in_arr = self
            .b
            .build_array_alloca(i8p, self.i64(nin.max(1) as u64), "ins")
            .unwrap();
        let out_arr = self
            .b
            .build_array_alloca(i8p, self.i64(nout.max(1) as u64), "outs")
            .unwrap();
        for k in 0..nin + nout {
            let p = typed
                .get_nth_param(2 + k as u32)
                .unwrap()
                .into_pointer_value();
            let p = self.b.build_pointer_cast(p, i8p, "").unwrap();
            let (arr, slot) = if k < nin {
                (in_arr, k)
            } else {
                (out_arr, k - nin)
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
            .expect("run_batch_ptrs returns a status");
        self.b.build_return(Some(&s)).unwrap();
    }
}
