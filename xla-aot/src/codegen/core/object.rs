//! A host object: the module optimised for its target machine and written as a relocatable
//! object, with what a caller asked to see besides (assembly, LLVM IR before and after O3).
//!
//! Contract: [`finish`] is the last step of every host build (CPU kernels, or the GPU kernels'
//! host emulation): it runs `target::optimize` and writes the object; the IR it keeps is text
//! only, never fed back.

use super::target::optimize;
use super::{CodegenError, KernelInfo};
use inkwell::module::Module;
use inkwell::targets::{FileType, TargetMachine};
use inkwell::values::AnyValue;

/// The result of a host build: the object and what was asked for besides.
#[derive(Debug, Clone)]
pub struct CpuObject {
    /// Relocatable object file bytes.
    pub object: Vec<u8>,
    /// Kernels in execution order.
    pub kernels: Vec<KernelInfo>,
    /// Exported symbols.
    pub exports: Vec<String>,
    /// Target assembly, when asked for.
    pub assembly: Option<String>,
    /// LLVM IR before and after optimisation, when asked for.
    pub ir: Option<(String, String)>,
    /// Each kernel's LLVM IR before and after optimisation, when asked for: (kernel, before, after).
    pub kernel_ir: Vec<(String, String, String)>,
    /// The weights `object` declares external (`weights.rs`), if any: the library's data object
    /// defines them.
    pub external_weights: Option<super::weights::ExternalWeights>,
    /// With `--weights external`: the blob `<name>.weights` (`weights_blob.rs`).
    pub weights_blob: Option<Vec<u8>>,
}

/// What to produce besides the object.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Also produce target assembly.
    pub assembly: bool,
    /// Also keep the LLVM IR text before and after optimisation.
    pub ir: bool,
    /// Kernels in the per-element (grid) form of the GPU backend, each run over its whole grid by
    /// the entry points: the host emulation of the PTX kernels (`gpu/`), not the CPU backend.
    pub grid: bool,
    /// `--weights external`: every constant in a blob the caller passes to each run (`weights`)
    /// (`weights_blob.rs`), none in the library.
    pub weights_blob: bool,
}

/// Optimises `module` for `tm` and writes it: the object of `kernels` exporting `exports`.
pub fn finish(
    module: &Module,
    tm: &TargetMachine,
    kernels: Vec<KernelInfo>,
    exports: Vec<String>,
    opts: Options,
) -> Result<CpuObject, CodegenError> {
    finish_with(module, tm, kernels, exports, opts, true)
}

/// [`finish`] for a module whose parts were each optimised already (a multi-ISA library's
/// variants, each for its own CPU): written as it is.
pub fn write_optimized(
    module: &Module,
    tm: &TargetMachine,
    kernels: Vec<KernelInfo>,
    exports: Vec<String>,
    opts: Options,
) -> Result<CpuObject, CodegenError> {
    finish_with(module, tm, kernels, exports, opts, false)
}

fn finish_with(
    module: &Module,
    tm: &TargetMachine,
    kernels: Vec<KernelInfo>,
    exports: Vec<String>,
    opts: Options,
    run_o3: bool,
) -> Result<CpuObject, CodegenError> {
    let before = opts.ir.then(|| module.print_to_string().to_string());
    let kernel_text = |m: &Module| -> Vec<String> {
        kernels
            .iter()
            .map(|k| {
                m.get_function(&k.name)
                    .map(|f| f.print_to_string().to_string())
                    .unwrap_or_default()
            })
            .collect()
    };
    let kernels_before = if opts.ir {
        kernel_text(module)
    } else {
        Vec::new()
    };
    if run_o3 {
        optimize(module, tm)?;
    }
    let after = opts.ir.then(|| module.print_to_string().to_string());
    let kernel_ir = if opts.ir {
        kernels
            .iter()
            .zip(kernels_before)
            .zip(kernel_text(module))
            .map(|((k, b), a)| (k.name.clone(), b, a))
            .collect()
    } else {
        Vec::new()
    };
    let object = tm
        .write_to_memory_buffer(module, FileType::Object)
        .map_err(|e| CodegenError::Llvm(e.to_string()))?
        .as_slice()
        .to_vec();
    let assembly = if opts.assembly {
        let buf = tm
            .write_to_memory_buffer(module, FileType::Assembly)
            .map_err(|e| CodegenError::Llvm(e.to_string()))?;
        Some(String::from_utf8_lossy(buf.as_slice()).into_owned())
    } else {
        None
    };
    Ok(CpuObject {
        object,
        kernels,
        exports,
        assembly,
        ir: before.zip(after),
        kernel_ir,
        external_weights: None,
        weights_blob: None,
    })
}
