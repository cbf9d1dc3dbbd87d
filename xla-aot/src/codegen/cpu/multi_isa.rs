//! A multi-ISA object: the model's code compiled once per variant of a multi-ISA target
//! (`x86_64-multi`, `aarch64-multi`), each for its own CPU, in one object behind one set of entry points.
//!
//! Contract: [`build`] builds variant `k` exactly as a single-ISA library of its target is
//! built (same module, plan and buckets passed in, same O3 pipeline for that variant's target
//! machine), except that its symbols are prefixed `<name>__<isa>` instead of `<name>`; then every function
//! of it that names no CPU is pinned to the variant's (LLVM's out-of-line math helpers), so that
//! the final code generation, run once for the whole object with the baseline target machine,
//! still compiles each function for its variant's CPU. The variants are linked into one module
//! with the dispatcher (`isa_dispatch.rs`), which is written without a second O3 run. Each
//! variant declares the constants its input lists external (`core/weights.rs`): its large
//! weights as `<name>__<isa>_weight<N>`, and those an earlier variant stores with the same bytes
//! under that variant's symbol (`compile/multi_weights.rs`), so each is stored once.

use super::isa_dispatch::{self, IsaVariant};
use crate::arena::BufferPlan;
use crate::codegen::core::object::write_optimized;
use crate::codegen::core::target::{module_for, optimize, target_attrs, target_machine};
use crate::codegen::core::weights::{ExternalWeights, Placement};
use crate::codegen::core::{CodegenError, CpuObject, KernelInfo, Options};
use crate::ir::Module as Hlo;
use crate::target::Target;
use crate::target::isa::Isa;
use crate::target::isa::isa_of;
use inkwell::attributes::AttributeLoc;
use inkwell::context::Context;

/// What one variant contributed.
#[derive(Debug, Clone)]
pub struct VariantObject {
    /// Its prefix and level.
    pub variant: IsaVariant,
    /// Its target (`x86_64-avx512`, ...).
    pub target: String,
    /// Its kernels, in execution order.
    pub kernels: Vec<KernelInfo>,
    /// The weights its code declares external, under its prefix.
    pub external: Option<ExternalWeights>,
}

/// The object of a multi-ISA library and what each variant put into it.
#[derive(Debug, Clone)]
pub struct MultiObject {
    /// The object (its kernels: the first variant's; its exports: the dispatcher's).
    pub object: CpuObject,
    /// Per variant, best first.
    pub variants: Vec<VariantObject>,
}

/// One variant to compile: the module renamed `<name>__<isa>` and planned for `target`, with
/// its other buckets (named `<name>__<isa>_b<B>`, each planned) and their dispatcher's plan.
pub struct VariantInput<'a> {
    pub target: &'a Target,
    pub module: Hlo,
    pub plan: BufferPlan,
    pub buckets: Vec<(Hlo, BufferPlan)>,
    pub batch: Option<super::BatchPlan>,
    /// Where its constants go (`compile/multi_weights.rs`: the data object for those stored
    /// once).
    pub constants: Placement,
}

/// The symbol prefix of model `name`'s variant for `t`.
pub fn prefix(name: &str, t: &Target) -> Result<(String, Isa), CodegenError> {
    let isa = isa_of(t).ok_or_else(|| CodegenError::Target {
        triple: t.triple.clone(),
        cpu: t.cpu.clone(),
        reason: "not a level a multi-ISA library can dispatch to (target/isa.rs)".into(),
    })?;
    Ok((format!("{name}__{}", isa_dispatch::isa_ident(&isa)), isa))
}

/// Compiles model `name`'s `variants` (best first, the last one the baseline of `base`) into one
/// object whose public entry points dispatch at run time.
pub fn build(
    name: &str,
    variants: &[VariantInput<'_>],
    base: &Target,
    opts: Options,
) -> Result<MultiObject, CodegenError> {
    let tm = target_machine(base)?;
    let ctx = Context::create();
    let module = module_for(&ctx, &tm, name);
    let mut out = Vec::new();
    let mut suffixes: Vec<String> = Vec::new();
    for vi in variants {
        let t = vi.target;
        let (prefix, isa) = prefix(name, t)?;
        debug_assert_eq!(vi.module.name, prefix);
        let vtm = target_machine(t)?;
        let refs: Vec<(&Hlo, &BufferPlan)> = vi.buckets.iter().map(|(m, p)| (m, p)).collect();
        let lib = crate::codegen::build_library(
            &ctx,
            &vtm,
            &vi.module,
            &vi.plan,
            &refs,
            vi.batch.as_ref(),
            t,
            false,
            vi.constants.clone(),
        )?;
        optimize(&lib.module, &vtm)?;
        for f in lib.module.get_functions() {
            if f.count_basic_blocks() > 0
                && f.get_string_attribute(AttributeLoc::Function, "target-cpu")
                    .is_none()
            {
                target_attrs(&ctx, f, t);
            }
        }
        let mine: Vec<String> = lib
            .exports
            .iter()
            .map(|e| e.strip_prefix(&prefix).unwrap_or(e).to_string())
            .collect();
        if suffixes.is_empty() {
            suffixes = mine;
        } else if suffixes != mine {
            return Err(CodegenError::Llvm(format!(
                "multi-ISA variant {prefix} exports {mine:?}, the first one {suffixes:?}"
            )));
        }
        module
            .link_in_module(lib.module)
            .map_err(|e| CodegenError::Llvm(e.to_string()))?;
        out.push(VariantObject {
            variant: IsaVariant { prefix, isa },
            target: t.name.clone(),
            kernels: lib.kernels,
            external: lib.external,
        });
    }
    let list: Vec<IsaVariant> = out.iter().map(|v| v.variant.clone()).collect();
    let exports = isa_dispatch::add_dispatcher(&ctx, &module, name, &list, &suffixes, base);
    module
        .verify()
        .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    let kernels = out.first().map(|v| v.kernels.clone()).unwrap_or_default();
    let object = write_optimized(&module, &tm, kernels, exports, opts)?;
    Ok(MultiObject {
        object,
        variants: out,
    })
}
