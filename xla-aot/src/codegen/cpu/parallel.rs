//! The parallel-for hook: how a generated library uses the app's threads without owning any.
//!
//! Contract (C API, `<name>.h`):
//! `void <name>_set_parallel_for(XlaAotParallelFor hook, void *hook_ctx, uint32_t threads)`
//! registers `hook(hook_ctx, n, task, task_ctx)`, which must call `task(task_ctx, i)` once for
//! every `i < n`, on any threads, and return when all calls have returned. `threads` is how many
//! threads the hook runs tasks on; kernels split their work into at most that many tasks. A null
//! hook or `threads <= 1` unregisters it: the library is then single-threaded (the default).
//! Registration is not synchronised with runs: register before running, from one thread.
//! Which kernels use the hook, and when, is decided at compile time (`gemm.rs`); a task never
//! allocates and never fails.

use super::Cg;
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::module::Linkage;
use inkwell::types::{BasicMetadataTypeEnum, StructType};
use inkwell::values::{FunctionValue, GlobalValue, IntValue, PointerValue};

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// `{hook, hook_ctx, threads}`: the registration, one per model.
    fn hook_type(&self) -> StructType<'ctx> {
        self.ctx.struct_type(
            &[
                self.i8p().into(),
                self.i8p().into(),
                self.ctx.i64_type().into(),
            ],
            false,
        )
    }

    fn hook_global(&self) -> GlobalValue<'ctx> {
        let name = format!("{}.parallel_for", self.hlo.name);
        if let Some(g) = self.m.get_global(&name) {
            return g;
        }
        let ty = self.hook_type();
        let g = self.m.add_global(ty, Some(AddressSpace::default()), &name);
        g.set_initializer(&ty.const_zero());
        g.set_linkage(Linkage::Internal);
        g
    }

    /// The exported `<name>_set_parallel_for`.
    pub(super) fn parallel_setter(&self) {
        let g = self.hook_global();
        let f = self.m.add_function(
            &format!("{}_set_parallel_for", self.hlo.name),
            self.ctx.void_type().fn_type(
                &[
                    BasicMetadataTypeEnum::from(self.i8p()),
                    self.i8p().into(),
                    self.ctx.i32_type().into(),
                ],
                false,
            ),
            Some(Linkage::External),
        );
        self.common_attrs(f);
        let saved = self.b.get_insert_block();
        self.b
            .position_at_end(self.ctx.append_basic_block(f, "entry"));
        let gp = g.as_pointer_value();
        let hook = f.get_nth_param(0).unwrap();
        let hctx = f.get_nth_param(1).unwrap();
        let threads = self
            .b
            .build_int_z_extend(
                f.get_nth_param(2).unwrap().into_int_value(),
                self.ctx.i64_type(),
                "",
            )
            .unwrap();
        for (i, v) in [hook, hctx, threads.into()].into_iter().enumerate() {
            let p = self.b.build_struct_gep(gp, i as u32, "").unwrap();
            self.b.build_store(p, v).unwrap();
        }
        self.b.build_return(None).unwrap();
        if let Some(bb) = saved {
            self.b.position_at_end(bb);
        }
    }

    /// Runs `task(ctx, i)` for `i < nt`, where `nt = min(threads, units)` with a registered hook
    /// and 1 without; `nt` is also stored at `nt_slot` (the task reads it to find its share).
    pub(super) fn parallel_for(
        &self,
        task: FunctionValue<'ctx>,
        ctx: PointerValue<'ctx>,
        nt_slot: PointerValue<'ctx>,
        units: u64,
    ) {
        let gp = self.hook_global().as_pointer_value();
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
