//! The parallel-for hook: how a generated library uses the app's threads without owning any.
//!
//! Contract (C API, `<name>.h`):
//! `void <name>_set_parallel_for(XlaAotParallelFor hook, void *hook_ctx, uint32_t threads)`
//! registers `hook(hook_ctx, n, task, task_ctx)`, which must call `task(task_ctx, i)` once for
//! every `i < n`, on any threads, and return when all calls have returned. `threads` is how many
//! threads the hook runs tasks on; kernels split their work into at most that many tasks. A null
//! hook or `threads <= 1` unregisters it: the library is then single-threaded (the default).
//! Registration is not synchronised with runs: register before running, from one thread.
//! Which kernels use the hook, and when, is decided at compile time: dots and convolutions
//! split their tiles (`gemm.rs`, `conv.rs`), every loop-nest kernel (elementwise and fused
//! loops, reductions, pooling; `kernel.rs`) its outermost loop (`core/outer_split.rs`), each
//! above a named amount of work. A task never allocates and never fails.

use super::Cg;
use crate::codegen::core::Kernel;
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::attributes::AttributeLoc;
use inkwell::module::Linkage;
use inkwell::types::BasicMetadataTypeEnum;
use inkwell::values::{FunctionValue, IntValue, PointerValue};

/// Kernels of at most this many flops run as one task even with a thread hook: a fork-join
/// through a thread pool costs a few microseconds, the time of about this many flops on one core.
pub(super) const PARALLEL_MIN_FLOPS: u64 = 1 << 20;

/// Loop-nest kernels (elementwise and fused loops, reductions, pooling) of at most this many
/// element visits (elements read or written, window taps counted) run as one task: such loops
/// stream about one element per nanosecond on one core, so 64 Ki visits take tens of
/// microseconds, several times the few microseconds of a fork-join through a thread pool.
pub(super) const PARALLEL_MIN_VISITS: u64 = 1 << 16;

/// The body of one task: `(cg, task function, the buffers, task index, task count)`.
pub(super) type TaskBody<'b, 'a, 'ctx> = dyn Fn(&Cg<'a, 'ctx>, FunctionValue<'ctx>, &[PointerValue<'ctx>], IntValue<'ctx>, IntValue<'ctx>)
    + 'b;

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// Emits `body` as the task function of kernel `k` (context: the buffers `bufs` and the task
    /// count) and calls it from `k`: as one task, or through the hook split into at most
    /// `units` tasks when the kernel does more than [`PARALLEL_MIN_FLOPS`].
    pub(super) fn run_tasks(
        &self,
        k: &Kernel<'ctx>,
        bufs: &[PointerValue<'ctx>],
        noalias: &[bool],
        units: usize,
        flops: u64,
        body: &TaskBody<'_, 'a, 'ctx>,
    ) {
        let body_fn = self.task_body(k, bufs, noalias, body);
        self.call_tasks(k, body_fn, bufs, units, flops > PARALLEL_MIN_FLOPS);
    }

    /// Generates the body of kernel `k` (a loop nest: elementwise and fused loops, reductions,
    /// pooling) once, with its outermost loop split between tasks (`core/outer_split.rs`), and
    /// calls it: through the hook when the body split and `work` (element visits) exceeds
    /// [`PARALLEL_MIN_VISITS`], else as one task. `generate` generates the body of the kernel it is
    /// given, as for one thread.
    pub(super) fn run_split(
        &self,
        k: &Kernel<'ctx>,
        work: u64,
        generate: &dyn Fn(&Cg<'a, 'ctx>, &Kernel<'ctx>),
    ) {
        let mut bufs = vec![k.out];
        bufs.extend_from_slice(&k.args);
        let units = std::cell::Cell::new(None);
        let body_fn = self.task_body(k, &bufs, &k.noalias, &|cg, f, p, ti, nt| {
            let kk = Kernel {
                f,
                out: p[0],
                args: p[1..].to_vec(),
                noalias: k.noalias.clone(),
            };
            cg.outer_split.arm(ti, nt);
            generate(cg, &kk);
            units.set(cg.outer_split.finish());
        });
        let units = units.get().unwrap_or(1);
        self.call_tasks(k, body_fn, &bufs, units, work > PARALLEL_MIN_VISITS);
    }

    /// Emits `body` as the task body function of kernel `k`: `body(buffers..., ti, nt)`, with
    /// the kernel's aliasing facts on its parameters.
    fn task_body(
        &self,
        k: &Kernel<'ctx>,
        bufs: &[PointerValue<'ctx>],
        noalias: &[bool],
        body: &TaskBody<'_, 'a, 'ctx>,
    ) -> FunctionValue<'ctx> {
        let i64t = self.ctx.i64_type();
        let kname = k.f.get_name().to_str().unwrap_or("kernel").to_string();
        let mut params: Vec<BasicMetadataTypeEnum> =
            bufs.iter().map(|p| p.get_type().into()).collect();
        params.extend([BasicMetadataTypeEnum::from(i64t), i64t.into()]);
        let body_fn = self.m.add_function(
            &format!("{kname}.body"),
            self.ctx.void_type().fn_type(&params, false),
            Some(Linkage::Internal),
        );
        self.common_attrs(body_fn);
        for (i, &na) in noalias.iter().enumerate().take(bufs.len()) {
            if na {
                body_fn.add_attribute(AttributeLoc::Param(i as u32), self.attr("noalias"));
            }
            body_fn.add_attribute(AttributeLoc::Param(i as u32), self.attr("nocapture"));
        }
        let caller = self.b.get_insert_block().unwrap();
        self.b
            .position_at_end(self.ctx.append_basic_block(body_fn, "entry"));
        // A buffer that is the output pointer itself (an in-place operand read through it,
        // `declare_kernel_with`) is read through the task's output parameter too.
        let ptrs: Vec<PointerValue<'ctx>> = (0..bufs.len())
            .map(|i| {
                let i = if i > 0 && bufs[i] == bufs[0] { 0 } else { i };
                body_fn
                    .get_nth_param(i as u32)
                    .unwrap()
                    .into_pointer_value()
            })
            .collect();
        let ti = body_fn
            .get_nth_param(bufs.len() as u32)
            .unwrap()
            .into_int_value();
        let nt = body_fn
            .get_nth_param(bufs.len() as u32 + 1)
            .unwrap()
            .into_int_value();
        body(self, body_fn, &ptrs, ti, nt);
        self.b.build_return(None).unwrap();
        self.b.position_at_end(caller);
        body_fn
    }

    /// Calls `body_fn` from kernel `k`: as one task, or, when `parallel` and `units > 1`,
    /// through the hook split into at most `units` tasks.
    fn call_tasks(
        &self,
        k: &Kernel<'ctx>,
        body_fn: FunctionValue<'ctx>,
        bufs: &[PointerValue<'ctx>],
        units: usize,
        parallel: bool,
    ) {
        let i64t = self.ctx.i64_type();
        let kname = k.f.get_name().to_str().unwrap_or("kernel").to_string();
        let call_body = |ptrs: &[PointerValue<'ctx>], ti: IntValue<'ctx>, nt: IntValue<'ctx>| {
            let mut args: Vec<inkwell::values::BasicMetadataValueEnum> =
                ptrs.iter().map(|&p| p.into()).collect();
            args.push(ti.into());
            args.push(nt.into());
            self.b.build_call(body_fn, &args, "").unwrap();
        };
        if !parallel || units <= 1 {
            call_body(bufs, self.i64(0), self.i64(1));
            return;
        }
        let caller = self.b.get_insert_block().unwrap();
        // task(ctx, i) with ctx = {buffers..., ntasks}: what the app's hook calls.
        let mut fields: Vec<inkwell::types::BasicTypeEnum> =
            bufs.iter().map(|p| p.get_type().into()).collect();
        fields.push(i64t.into());
        let ctx_ty = self.ctx.struct_type(&fields, false);
        let task_ty = self.ctx.void_type().fn_type(
            &[
                BasicMetadataTypeEnum::from(self.i8p()),
                self.ctx.i32_type().into(),
            ],
            false,
        );
        let task = self
            .m
            .add_function(&format!("{kname}.task"), task_ty, Some(Linkage::Internal));
        self.common_attrs(task);
        self.b
            .position_at_end(self.ctx.append_basic_block(task, "entry"));
        {
            let raw = task.get_nth_param(0).unwrap().into_pointer_value();
            let cp = self
                .b
                .build_pointer_cast(raw, ctx_ty.ptr_type(AddressSpace::default()), "")
                .unwrap();
            let field = |i: u32| {
                let p = self.b.build_struct_gep(cp, i, "").unwrap();
                self.b.build_load(p, "").unwrap()
            };
            let ptrs: Vec<PointerValue<'ctx>> = (0..bufs.len() as u32)
                .map(|i| field(i).into_pointer_value())
                .collect();
            let nt = field(bufs.len() as u32).into_int_value();
            let ti = self
                .b
                .build_int_z_extend(task.get_nth_param(1).unwrap().into_int_value(), i64t, "")
                .unwrap();
            call_body(&ptrs, ti, nt);
            self.b.build_return(None).unwrap();
        }
        self.b.position_at_end(caller);
        let cx = self.slot(k.f, ctx_ty.into());
        for (i, &p) in bufs.iter().enumerate() {
            let f = self.b.build_struct_gep(cx, i as u32, "").unwrap();
            self.b.build_store(f, p).unwrap();
        }
        let nt_field = self.b.build_struct_gep(cx, bufs.len() as u32, "").unwrap();
        let raw = self.b.build_pointer_cast(cx, self.i8p(), "").unwrap();
        self.parallel_for(task, raw, nt_field, units as u64);
    }

    /// Task `ti` of `nt`'s share of `units`: `[ti·units/nt, (ti+1)·units/nt)`.
    pub(super) fn share(
        &self,
        ti: IntValue<'ctx>,
        nt: IntValue<'ctx>,
        units: usize,
    ) -> (IntValue<'ctx>, IntValue<'ctx>) {
        let u = self.i64(units as u64);
        let lo = self
            .b
            .build_int_unsigned_div(self.b.build_int_mul(ti, u, "").unwrap(), nt, "")
            .unwrap();
        let t1 = self.b.build_int_add(ti, self.i64(1), "").unwrap();
        let hi = self
            .b
            .build_int_unsigned_div(self.b.build_int_mul(t1, u, "").unwrap(), nt, "")
            .unwrap();
        (lo, hi)
    }

    /// Runs `task(ctx, i)` for `i < nt`, where `nt = min(threads, units)` with a registered hook
    /// and 1 without; `nt` is also stored at `nt_slot` (the task reads it to find its share).
    fn parallel_for(
        &self,
        task: FunctionValue<'ctx>,
        ctx: PointerValue<'ctx>,
        nt_slot: PointerValue<'ctx>,
        units: u64,
    ) {
        let gp = self.hook_global(&self.be.hook_owner).as_pointer_value();
        let field = |i: u32| {
            let p = self.b.build_struct_gep(gp, i, "").unwrap();
            self.b.build_load(p, "").unwrap()
        };
        let hook = field(0).into_pointer_value();
        let hctx = field(1);
        let threads = field(2).into_int_value();
        let nt: IntValue<'ctx> = {
            let lt = self
                .b
                .build_int_compare(IntPredicate::ULT, threads, self.i64(units), "")
                .unwrap();
            self.b
                .build_select(lt, threads, self.i64(units), "")
                .unwrap()
                .into_int_value()
        };
        let has_hook = self.b.build_is_not_null(hook, "").unwrap();
        let many = self
            .b
            .build_int_compare(IntPredicate::UGT, nt, self.i64(1), "")
            .unwrap();
        let parallel = self.b.build_and(has_hook, many, "").unwrap();
        let task_ptr_ty = task.get_type().ptr_type(AddressSpace::default());
        let i32t = self.ctx.i32_type();
        let hook_ty = self.ctx.void_type().fn_type(
            &[
                BasicMetadataTypeEnum::from(self.i8p()),
                i32t.into(),
                task_ptr_ty.into(),
                self.i8p().into(),
            ],
            false,
        );
        self.if_else(
            parallel,
            &mut |cg| {
                cg.b.build_store(nt_slot, nt).unwrap();
                let h =
                    cg.b.build_pointer_cast(hook, hook_ty.ptr_type(AddressSpace::default()), "")
                        .unwrap();
                let n32 = cg.b.build_int_truncate(nt, i32t, "").unwrap();
                let callable = inkwell::values::CallableValue::try_from(h).unwrap();
                cg.b.build_call(
                    callable,
                    &[
                        hctx.into(),
                        n32.into(),
                        task.as_global_value().as_pointer_value().into(),
                        ctx.into(),
                    ],
                    "",
                )
                .unwrap();
            },
            &mut |cg| {
                cg.b.build_store(nt_slot, cg.i64(1)).unwrap();
                cg.b.build_call(task, &[ctx.into(), i32t.const_zero().into()], "")
                    .unwrap();
            },
        );
    }
}
