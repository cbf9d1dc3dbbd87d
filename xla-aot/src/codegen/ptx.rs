//! NVPTX code generation: the fused, planned HLO as PTX text, one `.entry` kernel per kernel of
//! the CPU backend, in grid form (each thread computes one output element).
//!
//! Contract: [`compile`] builds the same kernels as `cpu.rs` in grid mode (`cpu/grid.rs`: the
//! trailing element index becomes `ctaid.x · ntid.x + tid.x`, threads past the end do nothing),
//! emits PTX for sm_86 / PTX ISA 7.5 (LLVM 14's newest), and relabels it for the requested SM
//! ([`relabel`]: `.target sm_87` for Jetson Orin; `sm_90` also needs `.version 7.8`). Kernels take
//! their buffers (output first, then operands, weights included) as generic pointers and
//! reference no global: the host side uploads weights into the device arena once. The kernel
//! list gives each entry's name and grid size in elements, in launch order. The host emulation of
//! these kernel bodies is the CPU backend's grid mode (`Options::grid`), tested against the
//! interpreter; ptxas checks the PTX itself (`tests/ptx.rs`).

use super::cpu::{CodegenError, KernelInfo};
use crate::arena::BufferPlan;
use crate::ir::Module as Hlo;
use crate::target::{Arch, Target};
use inkwell::OptimizationLevel;
use inkwell::context::Context;
use inkwell::targets::{CodeModel, FileType, RelocMode, Target as LlvmTarget, TargetTriple};

/// LLVM 14's newest NVPTX target and PTX ISA (ENV.md): emitted, then relabelled.
pub const EMIT_SM: &str = "sm_86";
pub const EMIT_PTX_FEATURES: &str = "+ptx75";

/// Threads per block the launcher uses for grid kernels (a multiple of the 32-thread warp; 256 is
/// the usual occupancy sweet spot of elementwise kernels on sm_8x/sm_9x).
pub const BLOCK_THREADS: usize = 256;

/// One kernel of the PTX module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxKernel {
    /// The `.entry` name.
    pub name: String,
    /// Output elements: threads to launch (blocks = ⌈elements / BLOCK_THREADS⌉).
    pub elements: usize,
}

/// A compiled PTX module.
#[derive(Debug, Clone)]
pub struct PtxModule {
    /// PTX text for the requested SM.
    pub ptx: String,
    /// Entries in launch order.
    pub kernels: Vec<PtxKernel>,
    /// What each kernel computes (as for the CPU backend).
    pub info: Vec<KernelInfo>,
}

/// The device target: sm_86 code, 128-bit "vectors" (unused: grid kernels are scalar per thread).
fn device_target() -> Target {
    Target {
        name: "nvptx64".into(),
        description: "NVIDIA GPU (PTX)".into(),
        triple: "nvptx64-nvidia-cuda".into(),
        cpu: EMIT_SM.into(),
        features: EMIT_PTX_FEATURES.into(),
        vector_bits: 128,
        arch: Arch::Nvptx64,
        vector_registers: 32,
        l1d_bytes: 128 * 1024,
        l2_bytes: 4 * 1024 * 1024,
    }
}

/// PTX for `hlo` (planned by `plan`), labelled for `sm` (`"sm_80"`, `"sm_87"`, `"sm_90"`, ...).
pub fn compile(hlo: &Hlo, plan: &BufferPlan, sm: &str) -> Result<PtxModule, CodegenError> {
    super::cpu::init_llvm();
    let t = device_target();
    let triple = TargetTriple::create(&t.triple);
    let err = |reason: String| CodegenError::Target {
        triple: t.triple.clone(),
        cpu: t.cpu.clone(),
        reason,
    };
    let llvm_target = LlvmTarget::from_triple(&triple).map_err(|e| err(e.to_string()))?;
    let tm = llvm_target
        .create_target_machine(
            &triple,
            &t.cpu,
            &t.features,
            OptimizationLevel::Aggressive,
            RelocMode::Default,
            CodeModel::Default,
        )
        .ok_or_else(|| err("LLVM has no NVPTX target machine".into()))?;
    let ctx = Context::create();
    let (module, info, entries) = super::cpu::build_ptx_module(&ctx, &tm, hlo, plan, &t)?;
    super::cpu::optimize(&module, &tm)?;
    let buf = tm
        .write_to_memory_buffer(&module, FileType::Assembly)
        .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    let ptx = relabel(&String::from_utf8_lossy(buf.as_slice()), sm);
    Ok(PtxModule {
        ptx,
        kernels: entries
            .into_iter()
            .map(|(name, elements)| PtxKernel { name, elements })
            .collect(),
        info,
    })
}

/// Relabels PTX emitted for sm_86 / ISA 7.5 for `sm`: the `.target` line, and `.version 7.8`
/// for sm_90 and later (ptxas requires ISA 7.8 there). PTX is forward compatible, so the code is
/// valid for any newer SM.
pub fn relabel(ptx: &str, sm: &str) -> String {
    let newer: u32 = sm
        .trim_start_matches("sm_")
        .trim_end_matches('a')
        .parse()
        .unwrap_or(86);
    ptx.lines()
        .map(|l| {
            if l.starts_with(".target ") {
                format!(".target {sm}")
            } else if l.starts_with(".version ") && newer >= 90 {
                ".version 7.8".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[cfg(test)]
mod tests {
    use super::relabel;

    #[test]
    fn relabel_sets_the_target_and_the_isa_for_hopper() {
        let ptx = "//\n.version 7.5\n.target sm_86\n.address_size 64\n";
        assert_eq!(
            relabel(ptx, "sm_87"),
            "//\n.version 7.5\n.target sm_87\n.address_size 64\n"
        );
        assert_eq!(
            relabel(ptx, "sm_90"),
            "//\n.version 7.8\n.target sm_90\n.address_size 64\n"
        );
    }
}
