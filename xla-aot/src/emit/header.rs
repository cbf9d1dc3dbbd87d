//! The C header `<name>.h`, from `templates/model.h.in`.
//!
//! Contract: [`render`] fills the template's `{{key}}` placeholders; every value comes from the
//! module, the buffer plan and runtime-min's status codes (the single source of truth), so the
//! header always matches the object it ships with. Deterministic.

use super::c_idents::c_idents;
use crate::arena::{ARENA_ALIGN, BufferPlan};
use crate::ir::{DType, Module, Precision};
use runtime_min::Status;

const TEMPLATE: &str = include_str!("../../templates/model.h.in");
const CUDA_TEMPLATE: &str = include_str!("../../templates/model_cuda.h.in");

/// The C element type of a dtype (bool is `uint8_t` holding 0 or 1; float16 and bfloat16 are
/// `uint16_t` holding the bits).
pub fn c_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::I8 => "int8_t",
        DType::I16 => "int16_t",
        DType::U16 => "uint16_t",
        DType::U32 => "uint32_t",
        DType::U64 => "uint64_t",
        DType::F16 | DType::BF16 => "uint16_t",
        DType::Pred | DType::U8 => "uint8_t",
    }
}

/// The header's note on the inputs and outputs the entry points convert (`ir/api.rs`), or
/// nothing when every one is passed in the dtype the model computes in.
fn conversions(m: &Module) -> String {
    let c = &m.entry;
    let ids = c_idents(m);
    let mut lines = Vec::new();
    let mut int64_in = false;
    for (k, &p) in c.parameters().iter().enumerate() {
        if let Some(api) = m.api.input(k) {
            int64_in |= matches!(api, DType::I64 | DType::U32 | DType::U64);
            let ir = c.inst(p).shape.dtype;
            lines.push(format!(
                " *   input {}: {api}, computed as {ir}",
                ids.inputs[k]
            ));
        }
    }
    for (k, o) in c.outputs.iter().enumerate() {
        if let Some(api) = m.api.output(k) {
            let ir = c.inst(o.value).shape.dtype;
            lines.push(format!(
                " *   output {}: computed as {ir}, returned as {api}",
                ids.outputs[k]
            ));
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    let bad = if int64_in {
        " An int64, uint64 or uint32 input value\n * outside [-2^31, 2^31) returns XLA_AOT_STATUS_BAD_ARGUMENT before the model runs."
    } else {
        ""
    };
    format!(
        "\n/* Element types: these are converted at the call (f16/bf16 inputs widen exactly, f16/bf16\n * outputs round to nearest even, int64 outputs sign-extend, narrower and unsigned integer\n * outputs keep the low bits; f16/bf16 travel as uint16_t bits).{bad}\n{}\n */",
        lines.join("\n")
    )
}

/// Bytes of constants (weights) as the library stores them, without packing's padding and
/// scales: a weight that `packings` stores in a half type (`ir/precision.rs`) counts 2 bytes per
/// value, one stored as int8 (`Packings::is_int8`) 1.
pub fn stored_weight_bytes(
    m: &Module,
    packings: &crate::codegen::core::packing::Packings,
) -> usize {
    m.entry
        .instructions
        .iter()
        .enumerate()
        .filter_map(|(i, inst)| match &inst.op {
            crate::ir::Op::Constant(l) => l.bytes().map(|b| {
                let id = crate::ir::InstId(i as u32);
                if packings.is_int8(id) {
                    b.len() / 4
                } else if packings.half_of(id).is_some() {
                    b.len() / 2
                } else {
                    b.len()
                }
            }),
            _ => None,
        })
        .sum()
}

/// Total bytes of constants (weights) in the module, in their IR types.
pub fn weight_bytes(m: &Module) -> usize {
    m.entry
        .instructions
        .iter()
        .filter_map(|i| match &i.op {
            crate::ir::Op::Constant(l) => l.bytes().map(|b| b.len()),
            _ => None,
        })
        .sum()
}

/// What the header says about a weight precision other than f32 (`ir/precision.rs`).
fn precision_note(m: &Module) -> String {
    let Some(d) = m.precision.weight_dtype() else {
        return String::new();
    };
    let stored = "stored 2 bytes per value where a kernel reads them packed, and on a GPU";
    let what = match m.precision {
        Precision::Bf16 | Precision::F16 => {
            format!(
                "both operands of every dot and convolution are rounded to {d} (weights {stored})"
            )
        }
        _ => format!("dot and convolution weights are rounded to {d} ({stored})"),
    };
    let arithmetic = match m.precision {
        Precision::F16 => {
            "products are summed in f16 in blocks of 16 k, the blocks in f32, where the target has FP16 arithmetic (aarch64 +fullfp16, a GPU), elsewhere in f32"
        }
        Precision::Bf16 => "products accumulate in f32",
        _ => "all arithmetic is f32",
    };
    let text = format!("Precision {}: {what}; {arithmetic}.", m.precision);
    // Wrapped as the header's other comment lines are.
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.len() + 1 + word.len() > NOTE_WIDTH {
            out.push_str(&format!("\n * {line}"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&format!("\n * {line}"));
    out
}

/// The longest line of the precision note after its ` * ` (96 columns with it: the header's
/// comment lines stay within 100).
const NOTE_WIDTH: usize = 93;

/// The CUDA section of the header of a CUDA target's library.
pub fn render_cuda(m: &Module, ptx: &crate::codegen::gpu::ptx::PtxModule) -> String {
    let names: Vec<String> = ptx
        .launches
        .iter()
        .map(|l| format!("\"{}\"", l.entry))
        .collect();
    let blocks: Vec<String> = ptx
        .launches
        .iter()
        .map(|l| l.blocks().to_string())
        .collect();
    CUDA_TEMPLATE
        .replace("{{name}}", &m.name)
        .replace("{{NAME}}", &m.name.to_ascii_uppercase())
        .replace("{{sm}}", &ptx.sm)
        .replace("{{device_bytes}}", &ptx.layout.size.to_string())
        .replace("{{device_weights}}", &ptx.layout.weights.len().to_string())
        .replace(
            "{{block_threads}}",
            &crate::codegen::gpu::ptx::BLOCK_THREADS.to_string(),
        )
        .replace("{{cuda_kernels}}", &ptx.launches.len().to_string())
        .replace("{{kernel_names}}", &format!("{{{}}}", names.join(", ")))
        .replace("{{kernel_blocks}}", &format!("{{{}}}", blocks.join(", ")))
        .replace(
            "{{ctx_words}}",
            &crate::codegen::gpu::cuda_host::ctx_words(ptx.launches.len()).to_string(),
        )
}

/// Renders the header; `cuda` is the CUDA section ([`render_cuda`]) of a CUDA target, or empty.
pub fn render(
    m: &Module,
    plan: &BufferPlan,
    target: &str,
    kernels: usize,
    cuda: &str,
    weights_bytes: usize,
    weights_arg: bool,
) -> String {
    let c = &m.entry;
    let upper = m.name.to_ascii_uppercase();
    let mut macros = String::new();
    let mut params = Vec::new();
    let ids = c_idents(m);
    let mut tensor =
        |kind: &str, cn: &str, dims: &[usize], dtype: DType, params: &mut Vec<String>| {
            let key = format!("{upper}_{kind}_{}", cn.to_ascii_uppercase());
            let dims_s: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
            macros.push_str(&format!(
                "#define {key}_RANK {}\n#define {key}_SHAPE {{{}}}\n#define {key}_SIZE {}\n",
                dims.len(),
                dims_s.join(", "),
                dims.iter().product::<usize>()
            ));
            let konst = if kind == "INPUT" { "const " } else { "" };
            params.push(format!("{konst}{} *{cn}", c_type(dtype)));
        };
    for (k, p) in c.parameters().into_iter().enumerate() {
        let i = c.inst(p);
        tensor(
            "INPUT",
            &ids.inputs[k],
            &i.shape.dims,
            m.input_dtype(k),
            &mut params,
        );
    }
    for (k, o) in c.outputs.iter().enumerate() {
        let s = &c.inst(o.value).shape;
        tensor(
            "OUTPUT",
            &ids.outputs[k],
            &s.dims,
            m.output_dtype(k),
            &mut params,
        );
    }
    let statuses: String = Status::ALL
        .iter()
        .map(|s| format!("#define XLA_AOT_STATUS_{} ({})\n", s.c_name(), s.code()))
        .collect();
    let efficiency = if plan.arena_size == 0 {
        1.0
    } else {
        plan.lower_bound as f64 / plan.arena_size as f64
    };
    TEMPLATE
        .replace("{{name}}", &m.name)
        .replace("{{NAME}}", &upper)
        .replace("{{version}}", env!("CARGO_PKG_VERSION"))
        .replace("{{target}}", target)
        .replace("{{arena_size}}", &plan.arena_size.to_string())
        .replace("{{arena_align}}", &ARENA_ALIGN.to_string())
        .replace("{{arena_lower_bound}}", &plan.lower_bound.to_string())
        .replace("{{arena_efficiency}}", &format!("{efficiency:.3}"))
        .replace("{{weights_bytes}}", &weights_bytes.to_string())
        .replace("{{precision}}", &precision_note(m))
        .replace("{{kernels}}", &kernels.to_string())
        .replace("{{num_inputs}}", &c.parameters().len().to_string())
        .replace("{{num_outputs}}", &c.outputs.len().to_string())
        .replace("{{inputs}}", &ids.inputs.join(", "))
        .replace("{{outputs}}", &ids.outputs.join(", "))
        .replace("{{shape_macros}}", macros.trim_end())
        .replace("{{conversions}}", &conversions(m))
        .replace("{{renames}}", &ids.comment())
        .replace("{{status_codes}}", statuses.trim_end())
        .replace("{{run_params}}", &params.join(", "))
        .replace(
            "{{weights_param}}",
            if weights_arg {
                "const void *weights, "
            } else {
                ""
            },
        )
        .replace(
            "{{weights_where}}",
            if weights_arg {
                "in the blob the runs take as `weights` (below), not in the library"
            } else {
                "read-only data inside the library"
            },
        )
        .replace("{{cuda_api}}", cuda)
}

/// The `--weights external` part of the header: the blob's file, size and checksum, the
/// `weights` argument of the run functions and `<name>_check_weights`
/// (`codegen/core/weights_arg.rs`).
pub fn render_weights_blob(m: &Module, blob: &[u8]) -> String {
    let upper = m.name.to_ascii_uppercase();
    let name = &m.name;
    let sum = u64::from_le_bytes(blob[16..24].try_into().expect("a blob has its header"));
    format!(
        "\n/* Weights (--weights external): none is in the library. {name}.weights holds them all \
         ({upper}_WEIGHTS_FILE_BYTES\n \
         * bytes: a 64-byte header with the length and the FNV-1a-64 checksum of the rest, then the \
         weights). Keep it\n \
         * anywhere the CPU can read (flash, external memory, RAM), 64-byte aligned, and pass it \
         to every run\n \
         * as `weights`: {name}_run and {name}_run_ptrs return XLA_AOT_STATUS_NULL_POINTER for a \
         null blob,\n \
         * XLA_AOT_STATUS_MISALIGNED_ARENA for a misaligned one and XLA_AOT_STATUS_BAD_ARGUMENT \
         when its header is\n \
         * not this compile's (magic, length or checksum field: three compares per call). They do \
         not hash the\n \
         * weights: {name}_check_weights makes the same checks and hashes the rest, returning \
         XLA_AOT_STATUS_OK\n \
         * or XLA_AOT_STATUS_BAD_ARGUMENT for a corrupted copy; call it once after loading or \
         flashing the blob.\n \
         * The blob must stay in place while a run uses it. */\n\
         #define {upper}_WEIGHTS_FILE \"{name}.weights\"\n\
         #define {upper}_WEIGHTS_FILE_BYTES {len}\n\
         #define {upper}_WEIGHTS_CHECKSUM 0x{sum:016x}ull\n\
         int {name}_check_weights(const void *weights);\n",
        len = blob.len(),
    )
}

/// The batch-bucket part of the header (`batch_sizes`): the bucket macros, `<name>_run_batch`
/// and each other bucket's entry points. Shapes elsewhere in the header are the declared batch's.
pub fn render_batch(m: &Module, bp: &crate::codegen::cpu::BatchPlan, declared: usize) -> String {
    let upper = m.name.to_ascii_uppercase();
    let name = &m.name;
    let params = c_params(m, None);
    let sizes: Vec<String> = bp.buckets.iter().map(|b| b.batch.to_string()).collect();
    let max = bp.buckets.last().map_or(0, |b| b.batch);
    let mut out = format!(
        "\n/* Batch buckets: compiled for batch sizes {list} (dim 0 of every input and output); the\n \
         * shapes above are those of batch {declared} ({upper}_DECLARED_BATCH). One item of a tensor\n \
         * is its SIZE / {upper}_DECLARED_BATCH elements. */\n\
         #define {upper}_DECLARED_BATCH {declared}\n\
         #define {upper}_MAX_BATCH {max}\n\
         #define {upper}_NUM_BATCH_SIZES {count}\n\
         #define {upper}_BATCH_SIZES {{{list}}}\n\n\
         /* Runs n items, 1 <= n <= {upper}_MAX_BATCH: each input holds n items, each output receives\n \
         * exactly n. The smallest compiled batch >= n runs; when it is larger than n, the items are\n \
         * staged in the arena and padded with zero items (the arena size above includes this).\n \
         * Returns XLA_AOT_STATUS_BAD_ARGUMENT when n is out of range. */\n\
         int {name}_run_batch(void *arena, int32_t n, {params});\n\
         int {name}_run_batch_ptrs(void *arena, int32_t n, const void *const *inputs, void *const *outputs);\n",
        list = sizes.join(", "),
        count = sizes.len(),
    );
    out.push_str(&bucket_entry_points(bp, declared, "batch", &params));
    out
}

/// The sequence-bucket part of the header (`seq_buckets`): the bucket macros, `<name>_run_seq`
/// (the caller's inputs without the mask) and each other bucket's entry points.
pub fn render_seq(
    m: &Module,
    bp: &crate::codegen::cpu::BatchPlan,
    seq: &crate::front::SeqAxis,
) -> String {
    let upper = m.name.to_ascii_uppercase();
    let name = &m.name;
    let sizes: Vec<String> = bp.buckets.iter().map(|b| b.batch.to_string()).collect();
    let max = bp.buckets.last().map_or(0, |b| b.batch);
    let mask = seq
        .mask
        .map(|i| c_idents(m).inputs[i].clone())
        .unwrap_or_default();
    let mask_doc = if mask.is_empty() {
        String::new()
    } else {
        format!(" The mask input `{mask}` is not passed: it is 1 for positions below len, 0 after.")
    };
    let mut out = format!(
        "\n/* Sequence buckets: compiled for lengths {list} (dim {axis} of the sequence inputs and\n \
         * outputs); the shapes above are those of length {declared} ({upper}_DECLARED_SEQ). */\n\
         #define {upper}_DECLARED_SEQ {declared}\n\
         #define {upper}_MAX_SEQ {max}\n\
         #define {upper}_NUM_SEQ_SIZES {count}\n\
         #define {upper}_SEQ_SIZES {{{list}}}\n\n\
         /* Runs a sequence of len positions, 1 <= len <= {upper}_MAX_SEQ: each sequence input and\n \
         * output has len positions at dim {axis}; the smallest compiled length >= len runs, padded\n \
         * with zero positions in the arena.{mask_doc} Returns XLA_AOT_STATUS_BAD_ARGUMENT when len\n \
         * is out of range. */\n\
         int {name}_run_seq(void *arena, int32_t len, {params});\n\
         int {name}_run_seq_ptrs(void *arena, int32_t len, const void *const *inputs, void *const *outputs);\n",
        list = sizes.join(", "),
        count = sizes.len(),
        axis = seq.axis,
        declared = seq.declared,
        params = c_params(m, seq.mask),
    );
    out.push_str(&bucket_entry_points(
        bp,
        seq.declared,
        "length",
        &c_params(m, None),
    ));
    out
}

/// The C parameters of a run function: inputs (but `skip`) then outputs, in spec order.
fn c_params(m: &Module, skip: Option<usize>) -> String {
    let ids = c_idents(m);
    let mut v = Vec::new();
    for (i, id) in ids.inputs.iter().enumerate() {
        if Some(i) != skip {
            v.push(format!("const {} *{id}", c_type(m.input_dtype(i))));
        }
    }
    for (k, id) in ids.outputs.iter().enumerate() {
        v.push(format!("{} *{id}", c_type(m.output_dtype(k))));
    }
    v.join(", ")
}

/// Declarations of every bucket's entry points but the declared one's (`what`: batch, length).
fn bucket_entry_points(
    bp: &crate::codegen::cpu::BatchPlan,
    declared: usize,
    what: &str,
    params: &str,
) -> String {
    let mut out = String::new();
    for b in bp.buckets.iter().filter(|b| b.batch != declared) {
        if out.is_empty() {
            out.push_str("\n/* Each other bucket's own entry points, at exactly its size. */\n");
        }
        out.push_str(&format!(
            "int {p}_run(void *arena, /* {what} {size} */ {params});\nint {p}_run_ptrs(void *arena, const void *const *inputs, void *const *outputs);\n",
            p = b.prefix,
            size = b.batch
        ));
    }
    out
}
