//! Code generation: LLVM backends that see only HLO and the buffer plan.
//!
//! Contract: `core` is the shared LLVM lowering (target machines, the emitter and its elemental
//! ops, layouts, the one packing decision, math, the C API entry points, writing objects);
//! `cpu` (x86-64 and aarch64 objects, the JIT) and `gpu` (PTX, the CUDA launcher, the host
//! emulation of the grid kernels) are siblings that depend on `core` and never on each other.
//! A backend is the state type of `core::Emitter` plus the methods its folder adds; what shared
//! code needs from it goes through `core::Backend`, so no part of the emitter tests which
//! backend it serves. This facade only routes a host build to its backend.

pub mod core;
pub mod cpu;
pub mod gpu;

use crate::arena::BufferPlan;
use crate::ir::Module as Hlo;
use crate::target::Target;
pub use core::{CodegenError, CpuObject, KernelInfo, Options};
use inkwell::context::Context;

/// Compiles `hlo` with buffer plan `plan` for `target`.
pub fn compile(
    hlo: &Hlo,
    plan: &BufferPlan,
    target: &Target,
    opts: Options,
) -> Result<CpuObject, CodegenError> {
    compile_batched(hlo, plan, &[], None, target, opts, Sections::default())
}

/// [`compile`], with batch buckets: `variants` (the other buckets' modules, named
/// `<name>_b<B>`, and plans) go into the same object, sharing identical weights (one private
/// constant each after LLVM's constant merging) and `hlo`'s parallel-for registration; `batch`
/// adds the `<name>_run_batch` dispatcher (`cpu/batch.rs`). With `opts.grid` the kernels are the
/// GPU's grid kernels run on the host (`gpu/`), else the CPU's (`cpu/`).
pub fn compile_batched(
    hlo: &Hlo,
    plan: &BufferPlan,
    variants: &[(&Hlo, &BufferPlan)],
    batch: Option<&cpu::BatchPlan>,
    target: &Target,
    opts: Options,
    sections: Sections<'_>,
) -> Result<CpuObject, CodegenError> {
    let tm = core::target_machine(target)?;
    let ctx = Context::create();
    let lib = build_library(
        &ctx,
        &tm,
        hlo,
        plan,
        variants,
        batch,
        target,
        opts.grid,
        if opts.weights_blob {
            core::weights::Placement::Blob
        } else {
            core::weights::Placement::DataObject
        },
    )?;
    if let Some(section) = sections.weights {
        place_constants(&lib.module, section);
    }
    if let Some(section) = sections.code {
        place_functions(&lib.module, section);
    }
    let mut object = core::object::finish(&lib.module, &tm, lib.kernels, lib.exports, opts)?;
    object.external_weights = lib.external;
    object.weights_blob = lib.blob;
    Ok(object)
}

/// The LLVM module of a library before optimisation, with what [`compile_batched`] reports
/// about it.
pub(crate) struct Library<'ctx> {
    pub module: inkwell::module::Module<'ctx>,
    pub kernels: Vec<KernelInfo>,
    /// Its exported entry points.
    pub exports: Vec<String>,
    /// The weights it declares external (`core/weights.rs`).
    pub external: Option<core::weights::ExternalWeights>,
    /// With `blob` (`--weights external`): every constant's bytes (`core/weights_blob.rs`).
    pub blob: Option<Vec<u8>>,
}

/// [`compile_batched`]'s module, unoptimised (a multi-ISA library optimises each variant's
/// module for its own CPU, `cpu/multi_isa.rs`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_library<'ctx>(
    ctx: &'ctx Context,
    tm: &inkwell::targets::TargetMachine,
    hlo: &Hlo,
    plan: &BufferPlan,
    variants: &[(&Hlo, &BufferPlan)],
    batch: Option<&cpu::BatchPlan>,
    target: &Target,
    grid: bool,
    placement: core::weights::Placement,
) -> Result<Library<'ctx>, CodegenError> {
    // `placement`: where the caller wants the constants (`core::weights`): the caller's blob
    // (`--weights external`, `core::weights_blob`) or the library's data object (the large ones,
    // or those a multi-ISA library lists). Not the data object with batch buckets, whose modules
    // share their identical weights through LLVM's constant merging, nor in the GPU's host
    // emulation.
    let placement = match placement {
        core::weights::Placement::DataObject | core::weights::Placement::Listed(_)
            if grid || !variants.is_empty() =>
        {
            core::weights::Placement::InModule
        }
        p => p,
    };
    let (module, mut kernels, external, blob) = if grid {
        let (m, k) = gpu::build_host_module(ctx, tm, hlo, plan, target)?;
        (m, k, None, None)
    } else {
        cpu::build_library_module(ctx, tm, hlo, plan, target, placement)?
    };
    let mut exports = vec![
        format!("{}_run", hlo.name),
        format!("{}_run_ptrs", hlo.name),
        format!("{}_set_parallel_for", hlo.name),
        format!("{}_set_profiler", hlo.name),
    ];
    if blob.is_some() {
        exports.push(format!("{}_check_weights", hlo.name));
    }
    for (v, vplan) in variants {
        let site = core::profiler::ProfilerSite {
            owner: &hlo.name,
            first: kernels.len() as u32,
        };
        kernels.extend(if grid {
            gpu::add_host_variant(ctx, &module, v, vplan, target, site)?
        } else {
            cpu::add_variant(ctx, &module, v, vplan, target, site)?
        });
        exports.push(format!("{}_run", v.name));
        exports.push(format!("{}_run_ptrs", v.name));
    }
    if let Some(bp) = batch {
        cpu::add_batch_dispatcher(ctx, &module, hlo, plan, target, bp);
        exports.push(format!("{}_{}", hlo.name, bp.entry));
        exports.push(format!("{}_{}_ptrs", hlo.name, bp.entry));
        module
            .verify()
            .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    }
    Ok(Library {
        module,
        kernels,
        exports,
        external,
        blob,
    })
}

/// The ELF sections a library's weights and code go into (`None`: `.rodata` and `.text`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Sections<'s> {
    pub weights: Option<&'s str>,
    pub code: Option<&'s str>,
}

/// Puts every function the module defines into `section` (`--code-section`).
fn place_functions(module: &inkwell::module::Module<'_>, section: &str) {
    let mut f = module.get_first_function();
    while let Some(func) = f {
        if func.count_basic_blocks() > 0 {
            func.as_global_value().set_section(Some(section));
        }
        f = func.get_next_function();
    }
}

/// Puts every constant the module defines (the weights kept in the module, and the kernels'
/// constant tables) into `section`; the data object's weights go there too (`compile/`).
fn place_constants(module: &inkwell::module::Module<'_>, section: &str) {
    let mut g = module.get_first_global();
    while let Some(global) = g {
        if global.is_constant() && global.get_initializer().is_some() {
            global.set_section(Some(section));
        }
        g = global.get_next_global();
    }
}
