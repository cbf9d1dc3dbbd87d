//! The kernel profiler of a host library: `<name>_set_profiler(hook, ctx)` registers
//! `hook(ctx, kernel, phase)`, which `<name>_impl` calls with phase 0 right before and phase 1
//! right after each kernel (`XlaAotProfiler`, runtime-min's header and every model header).
//!
//! Contract: `kernel` is the kernel's index in the manifest's `kernels` list (a bucket's kernels
//! follow the kernels of the buckets before it, so [`ProfilerSite::first`] offsets them). The
//! registration is one internal global per model (`<owner>.profiler`, `{hook, ctx}`, zero at
//! load), shared by its buckets; the run loads it once, and without a hook each kernel costs one
//! predictable branch on that loaded value before and after it. Registering is not synchronised
//! with running: register before running, from one thread, as with the parallel-for. Each field
//! is stored and loaded atomically (unordered in time, never torn), so a registration racing a
//! run makes that run see the old or the new hook and the old or the new context: the Rust
//! bindings' safe `set_profiler` registers one fixed hook that ignores a null context, for which
//! every such mix is sound.

use super::emitter::{Backend, Emitter};
use inkwell::AddressSpace;
use inkwell::AtomicOrdering;
use inkwell::module::Linkage;
use inkwell::types::{BasicMetadataTypeEnum, FunctionType, StructType};
use inkwell::values::BasicValue;
use inkwell::values::{BasicValueEnum, GlobalValue, InstructionValue, IntValue, PointerValue};

/// Whose registration a run reports to, and the manifest index of its first kernel.
#[derive(Debug, Clone, Copy)]
pub struct ProfilerSite<'s> {
    /// The model whose `<owner>_set_profiler` registers the hook (a bucket: its model's).
    pub owner: &'s str,
    /// Manifest index of the run's first kernel.
    pub first: u32,
}

/// The registration as the run loaded it: the hook (possibly null) and its context.
pub(crate) struct Loaded<'ctx> {
    hook: PointerValue<'ctx>,
    hctx: BasicValueEnum<'ctx>,
    on: IntValue<'ctx>,
}

impl<'a, 'ctx, B: Backend<'ctx>> Emitter<'a, 'ctx, B> {
    fn profiler_type(&self) -> StructType<'ctx> {
        self.ctx
            .struct_type(&[self.i8p().into(), self.i8p().into()], false)
    }

    /// `void hook(void *ctx, uint32_t kernel, uint32_t phase)`.
    fn profiler_fn_type(&self) -> FunctionType<'ctx> {
        let i32t = self.ctx.i32_type();
        self.ctx.void_type().fn_type(
            &[
                BasicMetadataTypeEnum::from(self.i8p()),
                i32t.into(),
                i32t.into(),
            ],
            false,
        )
    }

    /// The registration of model `owner`, created on first use.
    fn profiler_global(&self, owner: &str) -> GlobalValue<'ctx> {
        let name = format!("{owner}.profiler");
        if let Some(g) = self.m.get_global(&name) {
            return g;
        }
        let ty = self.profiler_type();
        let g = self.m.add_global(ty, Some(AddressSpace::default()), &name);
        g.set_initializer(&ty.const_zero());
        g.set_linkage(Linkage::Internal);
        g
    }

    /// Loads `owner`'s registration once, at the builder's position.
    pub(crate) fn load_profiler(&self, owner: &str) -> Loaded<'ctx> {
        let gp = self.profiler_global(owner).as_pointer_value();
        let field = |i: u32| {
            let p = self.b.build_struct_gep(gp, i, "").unwrap();
            let v = self.b.build_load(p, "").unwrap();
            atomic(v.as_instruction_value().unwrap());
            v
        };
        let hook = field(0).into_pointer_value();
        let hctx = field(1);
        let on = self.b.build_is_not_null(hook, "").unwrap();
        Loaded { hook, hctx, on }
    }

    /// `if (hook) hook(ctx, kernel, phase)`.
    pub(crate) fn report(&self, l: &Loaded<'ctx>, kernel: u32, phase: u32) {
        let ty = self.profiler_fn_type();
        self.if_then(l.on, &mut |cg| {
            let h =
                cg.b.build_pointer_cast(l.hook, ty.ptr_type(AddressSpace::default()), "")
                    .unwrap();
            let callable = inkwell::values::CallableValue::try_from(h).unwrap();
            let i32t = cg.ctx.i32_type();
            cg.b.build_call(
                callable,
                &[
                    l.hctx.into(),
                    i32t.const_int(kernel as u64, false).into(),
                    i32t.const_int(phase as u64, false).into(),
                ],
                "",
            )
            .unwrap();
        });
    }

    /// The exported `<name>_set_profiler(hook, ctx)`.
    pub(crate) fn profiler_setter(&self) {
        let g = self.profiler_global(&self.hlo.name);
        let f = self.m.add_function(
            &format!("{}_set_profiler", self.hlo.name),
            self.ctx.void_type().fn_type(
                &[BasicMetadataTypeEnum::from(self.i8p()), self.i8p().into()],
                false,
            ),
            Some(Linkage::External),
        );
        self.common_attrs(f);
        let saved = self.b.get_insert_block();
        self.b
            .position_at_end(self.ctx.append_basic_block(f, "entry"));
        let gp = g.as_pointer_value();
        for i in 0..2 {
            let p = self.b.build_struct_gep(gp, i, "").unwrap();
            atomic(self.b.build_store(p, f.get_nth_param(i).unwrap()).unwrap());
        }
        self.b.build_return(None).unwrap();
        if let Some(bb) = saved {
            self.b.position_at_end(bb);
        }
    }
}

/// Makes a pointer-sized load or store of the registration atomic (`monotonic`: a plain move on
/// x86-64 and AArch64).
fn atomic(i: InstructionValue<'_>) {
    i.set_alignment(8).unwrap();
    i.set_atomic_ordering(AtomicOrdering::Monotonic).unwrap();
}
