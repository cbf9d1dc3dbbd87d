//! A multi-ISA object: the model's code compiled once per variant of a multi-ISA target
//! (`x86_64-multi`, `aarch64-multi`), each for its own CPU, in one object behind one set of entry points.
//!
//! Contract: [`build`] builds variant `k` exactly as a single-ISA library of `variants[k]` is
//! built (same module, same plan passed in, same O3 pipeline for that variant's target machine),
//! except that its symbols are prefixed `<name>__<isa>` instead of `<name>`; then every function
//! of it that names no CPU is pinned to the variant's (LLVM's out-of-line math helpers), so that
//! the final code generation, run once for the whole object with the baseline target machine,
//! still compiles each function for its variant's CPU. The variants are linked into one module
//! with the dispatcher (`isa_dispatch.rs`), which is written without a second O3 run. Each
//! variant keeps its own large weights as `<name>__<isa>_weight<N>` (`core/weights.rs`); the
//! library's data object may define several of those symbols at one address (`compile/multi.rs`).

use super::isa_dispatch::{self, IsaVariant};
use crate::arena::BufferPlan;
use crate::codegen::core::object::write_optimized;
use crate::codegen::core::target::{module_for, optimize, target_attrs, target_machine};
use crate::codegen::core::weights::ExternalWeights;
use crate::codegen::core::{CodegenError, CpuObject, KernelInfo, Options};
use crate::ir::Module as Hlo;
use crate::target::Target;
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

/// Compiles `hlo` for every variant of `base` (`plans[k]` planned for `base.variants[k]`) into
/// one object whose public entry points dispatch at run time.
pub fn build(
    hlo: &Hlo,
    plans: &[BufferPlan],
    base: &Target,
    opts: Options,
) -> Result<MultiObject, CodegenError> {
    let tm = target_machine(base)?;
    let ctx = Context::create();
    let module = module_for(&ctx, &tm, &hlo.name);
    let mut variants = Vec::new();
    let mut suffixes: Vec<String> = Vec::new();
    for (t, plan) in base.variants.iter().zip(plans) {
        let isa = isa_of(t).ok_or_else(|| CodegenError::Target {
            triple: t.triple.clone(),
            cpu: t.cpu.clone(),
            reason: "not a level a multi-ISA library can dispatch to (target/isa.rs)".into(),
        })?;
        let prefix = format!("{}__{}", hlo.name, isa_dispatch::isa_ident(&isa));
        let mut v = hlo.clone();
        v.name = prefix.clone();
        let vtm = target_machine(t)?;
        let (vm, kernels, external) = super::build_library_module(&ctx, &vtm, &v, plan, t, true)?;
        optimize(&vm, &vtm)?;
        for f in vm.get_functions() {
            if f.count_basic_blocks() > 0
                && f.get_string_attribute(AttributeLoc::Function, "target-cpu")
                    .is_none()
            {
                target_attrs(&ctx, f, t);
            }
        }
        let mut exports = vec![
            "_run".to_string(),
            "_run_ptrs".to_string(),
            "_set_parallel_for".to_string(),
            "_set_profiler".to_string(),
        ];
        exports.retain(|s| vm.get_function(&format!("{prefix}{s}")).is_some());
        if suffixes.is_empty() {
            suffixes = exports;
        }
        module
            .link_in_module(vm)
            .map_err(|e| CodegenError::Llvm(e.to_string()))?;
        variants.push(VariantObject {
            variant: IsaVariant { prefix, isa },
            target: t.name.clone(),
            kernels,
            external,
        });
    }
    let list: Vec<IsaVariant> = variants.iter().map(|v| v.variant.clone()).collect();
    let exports = isa_dispatch::add_dispatcher(&ctx, &module, &hlo.name, &list, &suffixes, base);
    module
        .verify()
        .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    let kernels = variants
        .first()
        .map(|v| v.kernels.clone())
        .unwrap_or_default();
    let object = write_optimized(&module, &tm, kernels, exports, opts)?;
    Ok(MultiObject { object, variants })
}
