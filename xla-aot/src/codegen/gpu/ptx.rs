//! NVPTX code generation: the fused, planned HLO as PTX text, one `.entry` kernel per kernel of
//! the module, in grid form (each thread computes one output element), and the device
//! arena those kernels run in.
//!
//! Contract: [`compile`] builds the module's grid kernels (`gpu/mod.rs`, `grid.rs`: the
//! trailing element index becomes `ctaid.x · ntid.x + tid.x`, threads past the end do nothing),
//! emits PTX with LLVM 14 (for the requested SM up to sm_86; newer SMs get sm_86 / ISA 7.5 code
//! relabelled by [`relabel`], as PTX is forward compatible), and lays out the device arena
//! ([`DeviceLayout`]): the weights (in their assigned layouts, not GEMM-packed: grid kernels
//! index them directly; with a half weight precision those of dots and convolutions 2 bytes
//! per value, `Packings::for_gpu`), then the planned arena, then a slot per input and output in
//! its C API dtype, every region [`DEVICE_ALIGN`]-aligned. Kernels take their buffers (output
//! first, then operands) as pointers and reference no global. An input or output of another C
//! API dtype than the IR's (int64, float16, ...) is the model's in its staging slice of the
//! arena, converted from or to its slot by a launch of its own (`boundary.rs`): input
//! conversions run first, output conversions last. [`Launch`] lists each entry with its grid
//! and its arguments as device-arena offsets, in launch order: exactly what the host launcher
//! (`cuda_host.rs`) does.
//! The host emulation of these kernel bodies is `GridForm::Host` (`Options::grid`),
//! tested against the interpreter; ptxas checks the PTX itself (`tests/ptx.rs`).

use super::{Buffers, GridLaunch};
use crate::arena::staging::Side;
use crate::arena::{BufferPlan, Loc, Staging};
use crate::codegen::core::packing::Packings;
use crate::codegen::core::{CodegenError, KernelInfo};
use crate::ir::{InstId, Module as Hlo, Op};
use crate::target::{Arch, Target};
use inkwell::OptimizationLevel;
use inkwell::context::Context;
use inkwell::targets::{CodeModel, FileType, RelocMode, Target as LlvmTarget, TargetTriple};
pub use runtime_min::cuda::DEVICE_ALIGN;

/// LLVM 14's newest NVPTX target and PTX ISA (ENV.md): newer SMs get this code, relabelled.
pub const EMIT_SM: &str = "sm_86";
pub const NEWEST_EMITTED_SM: u32 = 86;
pub const EMIT_PTX_FEATURES: &str = "+ptx75";

/// Threads per block the launcher uses for grid kernels (a multiple of the 32-thread warp; 256 is
/// the usual occupancy sweet spot of elementwise kernels on sm_8x/sm_9x).
pub const BLOCK_THREADS: usize = 256;

/// One launch of the PTX module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The `.entry` name.
    pub entry: String,
    /// Output elements: threads to launch.
    pub elements: usize,
    /// The kernel's arguments (output first, then operands) as byte offsets into the device arena.
    pub args: Vec<u64>,
}

impl Launch {
    /// Blocks of [`BLOCK_THREADS`] threads covering the elements.
    pub fn blocks(&self) -> u32 {
        self.elements.div_ceil(BLOCK_THREADS) as u32
    }
}

/// A region of the device arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Byte offset from the device arena's base.
    pub offset: u64,
    /// Bytes.
    pub bytes: u64,
}

/// The device arena: `[weights | planned arena | inputs | outputs]`, each region aligned to
/// [`DEVICE_ALIGN`]; input and output slots hold their C API dtype. One `cuMemAlloc` of
/// [`DeviceLayout::size`] bytes at init; the weights are uploaded once from
/// [`DeviceLayout::weights`] (the bytes of `[0, weights.len())`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLayout {
    /// The image of the weights region (padding included), uploaded at init.
    pub weights: Vec<u8>,
    /// Each uploaded constant: (instruction name, region).
    pub constants: Vec<(String, Region)>,
    /// The buffer plan's arena.
    pub arena: Region,
    /// One slot per model input, in parameter order: (name, region).
    pub inputs: Vec<(String, Region)>,
    /// One slot per model output: (name, region).
    pub outputs: Vec<(String, Region)>,
    /// The inputs and outputs passed in another dtype than the IR's: their slots hold the C API
    /// dtype, their staging slices (in the arena) the IR's, and conversion launches go between
    /// (`boundary.rs`).
    pub boundary: Vec<Staging>,
    /// Total bytes.
    pub size: u64,
}

/// A compiled PTX module.
#[derive(Debug, Clone)]
pub struct PtxModule {
    /// The SM it is labelled for (`sm_87`).
    pub sm: String,
    /// PTX text for that SM.
    pub ptx: String,
    /// Entries in launch order.
    pub launches: Vec<Launch>,
    /// The device arena.
    pub layout: DeviceLayout,
    /// What each kernel computes (as for the CPU backend).
    pub info: Vec<KernelInfo>,
}

/// The device target for `sm`: 128-bit "vectors" (unused: grid kernels are scalar per thread).
fn device_target(sm: u32) -> Target {
    let cpu = if sm <= NEWEST_EMITTED_SM {
        format!("sm_{sm}")
    } else {
        EMIT_SM.to_string()
    };
    Target {
        name: "nvptx64".into(),
        description: "NVIDIA GPU (PTX)".into(),
        triple: "nvptx64-nvidia-cuda".into(),
        cpu,
        features: EMIT_PTX_FEATURES.into(),
        vector_bits: 128,
        arch: Arch::Nvptx64,
        vector_registers: 32,
        l1d_bytes: 128 * 1024,
        l2_bytes: 4 * 1024 * 1024,
        cuda_sm: None,
        optimize: crate::target::Optimize::Speed,
        variants: Vec::new(),
    }
}

/// PTX for `hlo` (planned by `plan`) for `sm` (`"sm_80"`, `"sm_87"`, `"sm_90"`: one of
/// [`crate::target::CUDA_SMS`]), with its launches and device arena.
pub fn compile(hlo: &Hlo, plan: &BufferPlan, sm: &str) -> Result<PtxModule, CodegenError> {
    crate::codegen::core::target::init_llvm();
    let sm_number = crate::target::cuda_sm_number(sm).ok_or_else(|| CodegenError::Target {
        triple: "nvptx64-nvidia-cuda".into(),
        cpu: sm.into(),
        reason: "not one of the supported SMs (xla-aot targets lists the CUDA targets)".into(),
    })?;
    let t = device_target(sm_number);
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
    let (module, info, grid) = super::build_ptx_module(&ctx, &tm, hlo, plan, &t)?;
    crate::codegen::core::optimize(&module, &tm)?;
    let buf = tm
        .write_to_memory_buffer(&module, FileType::Assembly)
        .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    let ptx = relabel(&String::from_utf8_lossy(buf.as_slice()), sm);
    let (layout, launches) = device_arena(hlo, plan, &grid)?;
    Ok(PtxModule {
        sm: sm.to_string(),
        ptx,
        launches,
        layout,
        info,
    })
}

fn align_up(n: u64) -> u64 {
    n.div_ceil(DEVICE_ALIGN as u64) * DEVICE_ALIGN as u64
}

/// Lays out the device arena and resolves every launch argument to an offset in it.
fn device_arena(
    hlo: &Hlo,
    plan: &BufferPlan,
    grid: &[GridLaunch],
) -> Result<(DeviceLayout, Vec<Launch>), CodegenError> {
    let c = &hlo.entry;
    // The constants the kernels read, in instruction order (each uploaded once).
    let mut used: Vec<InstId> = grid
        .iter()
        .flat_map(|l| match &l.buffers {
            Buffers::Model { operands, .. } => operands.as_slice(),
            Buffers::Boundary(_) => &[],
        })
        .copied()
        .filter(|&v| plan.locs[v.index()] == Loc::Constant)
        .collect();
    used.sort();
    used.dedup();
    let mut weights = Vec::new();
    let mut constants = Vec::new();
    let mut constant_at = vec![None; c.instructions.len()];
    // Device kernels read every constant in its assigned layout (weights of dots and convolutions
    // in the half type of a half weight precision).
    let packings = Packings::for_gpu(hlo);
    for v in used {
        let inst = c.inst(v);
        let Op::Constant(lit) = &inst.op else {
            unreachable!("values the plan places as constants are constants")
        };
        let bytes = lit.bytes().ok_or_else(|| CodegenError::Unsupported {
            inst: inst.name.clone(),
            reason: "the constant's data was elided in the HLO text".into(),
        })?;
        let physical = packings.stored_bytes(v, bytes, &inst.shape);
        weights.resize(align_up(weights.len() as u64) as usize, 0);
        let region = Region {
            offset: weights.len() as u64,
            bytes: physical.len() as u64,
        };
        weights.extend_from_slice(&physical);
        constant_at[v.index()] = Some(region.offset);
        constants.push((inst.name.clone(), region));
    }
    let mut end = align_up(weights.len() as u64);
    let mut region = |bytes: u64| {
        let r = Region { offset: end, bytes };
        end = align_up(end + bytes);
        r
    };
    let arena = region(plan.arena_size as u64);
    // The slots hold the caller's bytes, in the C API dtype.
    let inputs: Vec<(String, Region)> = (c.parameters().iter().enumerate())
        .map(|(k, &p)| {
            let i = c.inst(p);
            let bytes = i.shape.element_count() * hlo.input_dtype(k).size_bytes();
            (i.name.clone(), region(bytes as u64))
        })
        .collect();
    let outputs: Vec<(String, Region)> = (c.outputs.iter().enumerate())
        .map(|(k, o)| {
            let n = c.inst(o.value).shape.element_count();
            let bytes = n * hlo.output_dtype(k).size_bytes();
            (o.name.clone(), region(bytes as u64))
        })
        .collect();
    // A converted input or output is the model's in its staging slice (`boundary.rs`).
    let staged = |side: Side| {
        (plan.staging.iter())
            .find(|st| st.side == side)
            .map(|st| arena.offset + st.offset as u64)
    };
    let offset_of = |loc: Loc, v: Option<InstId>| -> u64 {
        match loc {
            Loc::Input(k) => staged(Side::Input(k)).unwrap_or(inputs[k].1.offset),
            Loc::Output(k) => staged(Side::Output(k)).unwrap_or(outputs[k].1.offset),
            Loc::Arena(off) => arena.offset + off as u64,
            Loc::Constant => {
                constant_at[v.expect("constants are operands").index()].expect("uploaded")
            }
            Loc::Alias(_) => unreachable!("launch operands are roots"),
        }
    };
    let launches = grid
        .iter()
        .map(|l| {
            let args = match &l.buffers {
                Buffers::Model { out, operands } => std::iter::once(offset_of(*out, None))
                    .chain((operands.iter()).map(|&v| offset_of(plan.locs[v.index()], Some(v))))
                    .collect(),
                Buffers::Boundary(st) => {
                    let slice = arena.offset + st.offset as u64;
                    match st.side {
                        Side::Input(k) => vec![slice, inputs[k].1.offset],
                        Side::Output(k) => vec![outputs[k].1.offset, slice],
                    }
                }
            };
            Launch {
                entry: l.entry.clone(),
                elements: l.elements,
                args,
            }
        })
        .collect();
    let layout = DeviceLayout {
        weights,
        constants,
        arena,
        inputs,
        outputs,
        boundary: plan.staging.clone(),
        size: end.max(DEVICE_ALIGN as u64),
    };
    Ok((layout, launches))
}

impl PtxModule {
    /// The device arena and the launches as text (`--dump-to` writes it as `launches.txt`).
    pub fn launch_plan_text(&self) -> String {
        let l = &self.layout;
        let mut s = format!(
            "device arena {} bytes for {} ({} kernels, {} threads per block)\n",
            l.size,
            self.sm,
            self.launches.len(),
            BLOCK_THREADS
        );
        let mut region = |what: &str, r: &Region| {
            s.push_str(&format!("  {:>10} +{:<10} {what}\n", r.bytes, r.offset));
        };
        for (name, r) in &l.constants {
            region(&format!("weight %{name}"), r);
        }
        region("arena (buffer plan)", &l.arena);
        for (name, r) in &l.inputs {
            region(&format!("input {name}"), r);
        }
        for (name, r) in &l.outputs {
            region(&format!("output {name}"), r);
        }
        for st in &l.boundary {
            let (what, k) = match st.side {
                Side::Input(k) => ("input", k),
                Side::Output(k) => ("output", k),
            };
            s.push_str(&format!(
                "  {what} {k} passed as {}, computed as {} in +{}\n",
                st.api,
                st.ir,
                l.arena.offset + st.offset as u64
            ));
        }
        for k in &self.launches {
            let args: Vec<String> = k.args.iter().map(|a| format!("+{a}")).collect();
            s.push_str(&format!(
                "launch {} blocks {} ({} elements) args {}\n",
                k.entry,
                k.blocks(),
                k.elements,
                args.join(" ")
            ));
        }
        s
    }
}

/// Relabels PTX emitted for sm_86 / ISA 7.5 for `sm`: the `.target` line, and `.version 7.8`
/// for sm_89 and later (ptxas requires ISA 7.8 for Ada and Hopper). PTX is forward compatible,
/// so the code is valid for any newer SM. Text already labelled `sm` is unchanged.
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
            } else if l.starts_with(".version ") && newer >= 89 {
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
