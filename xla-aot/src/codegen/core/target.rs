//! LLVM targets: initialisation, the target machine of a [`Target`], the attributes that pin a
//! function to it, and the optimisation pipeline every backend runs.
//!
//! Contract: every module, whichever backend built it, is optimised by [`optimize`] (LLVM's O3
//! with loop and SLP vectorisation, without loop unrolling) for the machine [`target_machine`]
//! makes (PIC, static relocations for a microcontroller; the target's CPU and features), so the same spec and target give the same bytes.
//! Before it, math calls past a module-wide budget are made out of line (`math_budget.rs`), so
//! LLVM's time stays linear in the model.

use super::CodegenError;
use crate::target::Target;
use inkwell::OptimizationLevel;
use inkwell::attributes::AttributeLoc;
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, InitializationConfig, RelocMode, Target as LlvmTarget, TargetMachine, TargetTriple,
};
use inkwell::values::FunctionValue;

pub(crate) fn init_llvm() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let cfg = InitializationConfig::default();
        LlvmTarget::initialize_x86(&cfg);
        LlvmTarget::initialize_aarch64(&cfg);
        LlvmTarget::initialize_nvptx(&cfg);
        LlvmTarget::initialize_arm(&cfg);
        set_llvm_options();
    });
}

/// The loop cost (LLVM's own units) below which LLVM's loop vectorizer interleaves a vectorized
/// loop, i.e. keeps several vectors of independent iterations in flight (`-small-loop-cost`,
/// LLVM's default 20). A quantized model's requantization loops are long dependent chains (a
/// residual block's kernel: two dequantizations, an add, two divisions, two saturating roundings,
/// some 50 instructions per vector), which ran one vector at a time at about one instruction per
/// cycle. Measured on Zen 5 (`profile --min`, 2026-12-03): int8 resnet50 (uint8 QDQ) 18.8 →
/// 15.6 ms and int8 squeezenet 1.59 → 1.50 ms with 200; 100 gave 17.7 ms, 400 16.5 ms; f32
/// squeezenet, shufflenet and densenet121 unchanged (within 1%).
const SMALL_LOOP_COST: u32 = 200;

/// Sets LLVM's command-line options this compiler relies on (once per process, before any code
/// is generated): [`SMALL_LOOP_COST`].
fn set_llvm_options() {
    let args = [
        c"xla-aot".to_owned(),
        std::ffi::CString::new(format!("-small-loop-cost={SMALL_LOOP_COST}"))
            .expect("no NUL in the option"),
    ];
    let ptrs: Vec<*const std::os::raw::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    // SAFETY: `ptrs` points at NUL-terminated strings that outlive the call; LLVM copies what it
    // keeps. Called once, under `init_llvm`'s `Once`, before any other LLVM use.
    unsafe {
        inkwell::llvm_sys::support::LLVMParseCommandLineOptions(
            ptrs.len() as i32,
            ptrs.as_ptr(),
            std::ptr::null(),
        )
    };
}

/// The CPU and features of `t` on function `f` (not only on the target machine), so that any code
/// generator of its module (the in-process JIT included) selects the same instructions; and
/// `optsize` when `t` puts size first (LLVM then unrolls nothing, inlines less and vectorises
/// without runtime checks or scalar epilogues it would add for speed).
pub(crate) fn target_attrs(ctx: &Context, f: FunctionValue<'_>, t: &Target) {
    if t.optimize == crate::target::Optimize::Size {
        let kind = inkwell::attributes::Attribute::get_named_enum_kind_id("optsize");
        f.add_attribute(AttributeLoc::Function, ctx.create_enum_attribute(kind, 0));
    }
    f.add_attribute(
        AttributeLoc::Function,
        ctx.create_string_attribute("target-cpu", &t.cpu),
    );
    if !t.features.is_empty() {
        f.add_attribute(
            AttributeLoc::Function,
            ctx.create_string_attribute("target-features", &t.features),
        );
    }
}

/// Creates the LLVM target machine for `t`.
pub fn target_machine(t: &Target) -> Result<TargetMachine, CodegenError> {
    init_llvm();
    let triple = TargetTriple::create(&t.triple);
    let err = |reason: String| CodegenError::Target {
        triple: t.triple.clone(),
        cpu: t.cpu.clone(),
        reason,
    };
    let target = LlvmTarget::from_triple(&triple).map_err(|e| err(e.to_string()))?;
    target
        .create_target_machine(
            &triple,
            &t.cpu,
            &t.features,
            OptimizationLevel::Aggressive,
            // Bare metal links at fixed addresses (code and weights in flash): no GOT.
            if t.arch.is_microcontroller() {
                RelocMode::Static
            } else {
                RelocMode::PIC
            },
            CodeModel::Default,
        )
        .ok_or_else(|| err("no target machine".into()))
}

/// Runs LLVM's O3 pipeline for the target machine. A size-first module (its functions carry
/// `optsize`, see [`target_attrs`]) first has its identical functions merged (`mergefunc`): kernels
/// of the same shape, which read their weights through arguments until O3 propagates them, keep
/// one body.
pub fn optimize(module: &Module, tm: &TargetMachine) -> Result<(), CodegenError> {
    super::math_budget::bound_inlined_math(module);
    let popts = PassBuilderOptions::create();
    popts.set_loop_vectorization(true);
    popts.set_loop_slp_vectorization(true);
    popts.set_loop_unrolling(false);
    let pipeline = if size_first(module) {
        "mergefunc,default<O3>"
    } else {
        "default<O3>"
    };
    module
        .run_passes(pipeline, tm, popts)
        .map_err(|e| CodegenError::Llvm(e.to_string()))
}

/// Whether the module was generated size first: its first defined function has `optsize`.
fn size_first(module: &Module) -> bool {
    let kind = inkwell::attributes::Attribute::get_named_enum_kind_id("optsize");
    let mut f = module.get_first_function();
    while let Some(func) = f {
        if func.count_basic_blocks() > 0 {
            return func
                .get_enum_attribute(AttributeLoc::Function, kind)
                .is_some();
        }
        f = func.get_next_function();
    }
    false
}

/// The build attribute a hard-float Arm object must carry so that linkers accept it next to
/// `-mfloat-abi=hard` code: `Tag_ABI_VFP_args` (28) = 1, arguments in VFP registers. LLVM's C API
/// leaves the target machine's float ABI at its default, which uses the hard-float convention
/// of an `*-eabihf` triple but does not record it (GNU ld: "uses VFP register arguments, ... does
/// not"); clang sets it through the option the C API lacks.
const ARM_HARD_FLOAT_ATTRIBUTE: &str = ".eabi_attribute 28, 1";

/// An empty LLVM module called `name` for the target machine `tm` (its triple and data layout;
/// on a hard-float Arm triple, also the build attribute that says so).
pub(crate) fn module_for<'ctx>(ctx: &'ctx Context, tm: &TargetMachine, name: &str) -> Module<'ctx> {
    let module = ctx.create_module(name);
    let triple = tm.get_triple();
    module.set_triple(&triple);
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    let t = triple.as_str().to_string_lossy();
    if t.starts_with("thumb") && t.ends_with("eabihf") {
        module.set_inline_assembly(ARM_HARD_FLOAT_ATTRIBUTE);
    }
    module
}
