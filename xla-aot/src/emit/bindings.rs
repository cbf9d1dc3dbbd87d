//! Rust bindings `<name>.rs` for `runtime_min::include_model!`, from `templates/bindings.rs.in`.
//!
//! Contract: a module named after the model with `ARENA_SIZE`, one `<TENSOR>_LEN` constant per
//! input and output, and a safe `run(&mut Arena<ARENA_SIZE>, &[T; N]..., &mut [T; M]...)` returning
//! `Result<(), Status>`; for a CUDA target also `<name>::cuda::Context` (init / run on the GPU /
//! error_name, destroyed on drop); for a multi-ISA target also `<name>::isa()` and
//! `<name>::force_isa()` (and on aarch64 `<name>::set_hwcap()`). Deterministic.

use super::c_idents::c_idents;
use crate::arena::BufferPlan;
use crate::ir::{DType, Module};

const TEMPLATE: &str = include_str!("../../templates/bindings.rs.in");
const CUDA_TEMPLATE: &str = include_str!("../../templates/bindings_cuda.rs.in");
const BATCH_TEMPLATE: &str = include_str!("../../templates/bindings_batch.rs.in");
const MULTI_ISA_TEMPLATE: &str = include_str!("../../templates/bindings_multi_isa.rs.in");
const HWCAP_TEMPLATE: &str = include_str!("../../templates/bindings_multi_isa_hwcap.rs.in");

fn rust_type(d: DType) -> &'static str {
    match d {
        DType::I32 => "i32",
        DType::F32 => "f32",
        DType::I64 => "i64",
        DType::I8 => "i8",
        DType::I16 => "i16",
        DType::U16 => "u16",
        DType::U32 => "u32",
        DType::U64 => "u64",
        // float16 / bfloat16 travel as their bits.
        DType::F16 | DType::BF16 => "u16",
        DType::Pred | DType::U8 => "u8",
    }
}

/// Renders the bindings of `m`; `ptx`: the PTX module of a CUDA target (adds `<name>::cuda`);
/// `multi_isa`: the family of a multi-ISA library (adds `isa` and `force_isa`, and for aarch64
/// `set_hwcap`).
pub fn render(
    m: &Module,
    plan: &BufferPlan,
    ptx: Option<&crate::codegen::gpu::ptx::PtxModule>,
    batch: Option<&(crate::codegen::cpu::BatchPlan, usize)>,
    multi_isa: Option<crate::target::Arch>,
) -> String {
    let c = &m.entry;
    let mut consts = String::new();
    let (mut ffi, mut params, mut args) = (Vec::new(), Vec::new(), Vec::new());
    let (mut input_ptrs, mut output_ptrs) = (Vec::new(), Vec::new());
    let (mut bffi, mut bparams, mut bargs, mut bchecks) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let declared = batch.map_or(1, |b| b.1.max(1));
    let ids = c_idents(m);
    let mut tensor = |name: &str, cn: &str, dtype: DType, n: usize, output: bool| {
        {
            let t = rust_type(dtype);
            let item = n / declared;
            let (mutability, ptr) = if output {
                ("&mut ", "as_mut_ptr")
            } else {
                ("&", "as_ptr")
            };
            bffi.push(format!(
                "{cn}: *{} {t}",
                if output { "mut" } else { "const" }
            ));
            bparams.push(format!("{cn}: {mutability}[{t}]"));
            bargs.push(format!("{cn}.{ptr}()"));
            bchecks.push(format!("{cn}.len() < n * {item}"));
        }
        let len = format!("{}_LEN", cn.to_ascii_uppercase());
        consts.push_str(&format!(
            "    /// Elements of `{name}`.\n    pub const {len}: usize = {n};\n"
        ));
        let t = rust_type(dtype);
        if output {
            ffi.push(format!("{cn}: *mut {t}"));
            params.push(format!("{cn}: &mut [{t}; {len}]"));
            args.push(format!("{cn}.as_mut_ptr()"));
            output_ptrs.push(format!("{cn}.as_mut_ptr().cast()"));
        } else {
            ffi.push(format!("{cn}: *const {t}"));
            params.push(format!("{cn}: &[{t}; {len}]"));
            args.push(format!("{cn}.as_ptr()"));
            input_ptrs.push(format!("{cn}.as_ptr().cast()"));
        }
    };
    for (k, p) in c.parameters().into_iter().enumerate() {
        let s = &c.inst(p).shape;
        tensor(
            &c.inst(p).name,
            &ids.inputs[k],
            m.input_dtype(k),
            s.element_count(),
            false,
        );
    }
    for (k, o) in c.outputs.iter().enumerate() {
        let s = &c.inst(o.value).shape;
        tensor(
            &o.name,
            &ids.outputs[k],
            m.output_dtype(k),
            s.element_count(),
            true,
        );
    }
    let cuda = ptx
        .map(|p| {
            CUDA_TEMPLATE
                .replace("{{sm}}", &p.sm)
                .replace("{{device_bytes}}", &p.layout.size.to_string())
                .replace(
                    "{{ctx_words}}",
                    &crate::codegen::gpu::cuda_host::ctx_words(p.launches.len()).to_string(),
                )
                .replace("{{num_inputs}}", &input_ptrs.len().to_string())
                .replace("{{num_outputs}}", &output_ptrs.len().to_string())
                .replace("{{input_ptrs}}", &input_ptrs.join(", "))
                .replace("{{output_ptrs}}", &output_ptrs.join(", "))
        })
        .unwrap_or_default();
    let batch_api = batch
        .map(|(bp, declared)| {
            let sizes: Vec<String> = bp.buckets.iter().map(|b| b.batch.to_string()).collect();
            BATCH_TEMPLATE
                .replace("{{sizes}}", &sizes.join(", "))
                .replace("{{num_sizes}}", &sizes.len().to_string())
                .replace("{{declared}}", &declared.to_string())
                .replace("{{max}}", sizes.last().map_or("0", |s| s.as_str()))
                .replace("{{ffi_params}}", &bffi.join(", "))
                .replace("{{params}}", &bparams.join(", "))
                .replace("{{args}}", &bargs.join(", "))
                .replace("{{checks}}", &bchecks.join(" || "))
        })
        .unwrap_or_default();
    let arena_size = batch.map_or(plan.arena_size, |(bp, _)| bp.arena_size());
    let isa_api = match multi_isa {
        None => String::new(),
        Some(arch) => MULTI_ISA_TEMPLATE.replace(
            "{{hwcap}}",
            if arch == crate::target::Arch::Aarch64 {
                HWCAP_TEMPLATE
            } else {
                ""
            },
        ),
    };
    TEMPLATE
        .replace("{{cuda}}", &format!("{cuda}{batch_api}{isa_api}"))
        .replace("{{name}}", &m.name)
        .replace("{{version}}", env!("CARGO_PKG_VERSION"))
        .replace("{{target}}", "see the manifest")
        .replace("{{arena_size}}", &arena_size.to_string())
        .replace("{{consts}}", &consts)
        .replace("{{ffi_params}}", &ffi.join(", "))
        .replace("{{params}}", &params.join(", "))
        .replace("{{args}}", &args.join(", "))
}
