//! The compile path of a multi-ISA target (`x86_64-multi`, `aarch64-multi`): one library holding the model's code
//! for every variant the target lists, and one set of entry points choosing among them at run
//! time (`codegen/cpu/isa_dispatch.rs`).
//!
//! Contract: the module is optimised once ([`super::optimize`]: the pipeline does not depend on
//! the target) and planned once per variant ([`super::plan_for_target`]: kernel scratch may
//! differ), its buckets optimised and planned per variant (`plan_buckets`), so every variant
//! computes what its single-ISA library computes. The header is a
//! single-ISA header plus `<name>_isa()` and `<name>_force_isa()`, its `ARENA_SIZE` the largest
//! variant's. A constant is stored once where variants' stored bytes are equal, whatever its
//! size (`multi_weights.rs`); the manifest's `isa_variants` says what each variant stores and
//! adds. Batch and sequence buckets are compiled per variant as a single-ISA library compiles
//! them (the header's bucket section and arena are the largest variant's); every other option
//! of a CPU library (`--checks`, `--no-winograd`, ...) applies to each variant.

use super::{CompileError, CompileOptions, Optimized, Progress, WEIGHTS_MEMBER, multi_weights};
use crate::arena::BufferPlan;
use crate::codegen::cpu::multi_isa::{self, VariantInput, VariantObject};
use crate::emit::data_object;
use crate::emit::{Artefacts, archive, header, manifest};
use crate::ir::Module;
use crate::target::{Arch, Target};

/// The header's declarations of the dispatcher's own functions.
fn header_api(name: &str, variants: &[VariantObject], arch: Arch) -> String {
    let names: Vec<String> = variants
        .iter()
        .map(|v| format!("\"{}\"", v.variant.isa.name))
        .collect();
    let (how, hwcap) = match arch {
        Arch::Aarch64 => (
            format!(
                "once {name}_set_hwcap(getauxval(AT_HWCAP), getauxval(AT_HWCAP2)) has passed the\n \
                 * CPU's features (<sys/auxv.h>), the next call picks the first one they allow;\n \
                 * until then the last (baseline) one runs and force_isa refuses the others."
            ),
            format!("void {name}_set_hwcap(uint64_t hwcap, uint64_t hwcap2);\n"),
        ),
        _ => (
            "the first call picks the first one this CPU and OS can run\n \
             * (cpuid + xgetbv)."
                .to_string(),
            String::new(),
        ),
    };
    format!(
        "\n/* Multi-ISA library: the code above exists once per variant ({list}, best first);\n \
         * {how}\n \
         * {name}_isa() names the selected one. {name}_force_isa(isa) selects one by name and\n \
         * returns 0, or XLA_AOT_STATUS_BAD_ARGUMENT for an unknown name or one this CPU cannot\n \
         * run; NULL returns to the automatic choice. All are thread-safe. */\n\
         #define {upper}_MULTI_ISA 1\n\
         {hwcap}\
         const char *{name}_isa(void);\n\
         int {name}_force_isa(const char *isa);\n",
        list = names.join(", "),
        upper = name.to_ascii_uppercase()
    )
}

/// Compiles `m` (the C API module, with its `buckets`) for the multi-ISA `target`.
pub(super) fn compile(
    m: &Module,
    buckets: &[(usize, Module)],
    seq: Option<&crate::front::SeqAxis>,
    target: &Target,
    opts: &CompileOptions,
    progress: &Progress<'_>,
) -> Result<Artefacts, CompileError> {
    let Optimized {
        module: optimized,
        plan,
        stages,
        pass_records,
        instructions_before_fusion: before_fusion,
    } = super::optimize(m, opts)?;
    // Each variant: the module under its prefix, planned for its CPU, with its buckets.
    let mut inputs = Vec::new();
    let mut declared = 1;
    for t in &target.variants {
        let (prefix, _) = multi_isa::prefix(&optimized.name, t)?;
        let mut vm = optimized.clone();
        vm.name = prefix;
        let vplan = super::plan_for_target(&vm, plan.clone(), t, opts);
        let (d, bucket_modules, batch) = super::plan_buckets(&vm, &vplan, buckets, seq, t, opts)?;
        declared = d;
        inputs.push(VariantInput {
            target: t,
            module: vm,
            plan: vplan,
            buckets: bucket_modules.into_iter().map(|(_, m, p)| (m, p)).collect(),
            batch,
            constants: crate::codegen::core::weights::Placement::InModule,
        });
    }
    // Variants may plan different kernel scratch (Winograd tiles, packed A), so different arena
    // sizes; the header's `ARENA_SIZE` is the largest. Every variant's entry points check an
    // output against that whole arena (an output in the tail only a larger variant uses is
    // refused by all), so each variant's plan is given the largest size.
    let arena_size = inputs.iter().map(|v| v.plan.arena_size).max().unwrap_or(0);
    for v in &mut inputs {
        v.plan.arena_size = arena_size;
    }
    let shared = multi_weights::share(&inputs);
    for (v, p) in inputs.iter_mut().zip(shared.placements) {
        v.constants = p;
    }
    let plans: Vec<BufferPlan> = inputs.iter().map(|v| v.plan.clone()).collect();
    let largest = plans
        .iter()
        .max_by_key(|p| p.arena_size)
        .cloned()
        .unwrap_or(plan);
    // The header's buckets: those of the variant whose dispatcher needs the largest arena, under
    // the public names.
    let public_batch = inputs
        .iter()
        .filter_map(|v| v.batch.as_ref().map(|bp| (v, bp)))
        .max_by_key(|(_, bp)| bp.arena_size())
        .map(|(v, bp)| {
            let mut bp = bp.clone();
            for b in &mut bp.buckets {
                b.prefix = b.prefix.replacen(&v.module.name, &optimized.name, 1);
            }
            bp
        });
    let original = m;
    let m = &optimized;
    let multi = multi_isa::build(&m.name, &inputs, target, opts.codegen)?;
    drop(inputs);
    progress.stage(&format!(
        "generated {} variants for {}",
        multi.variants.len(),
        target.name
    ));
    let obj = multi.object;
    let variants = multi.variants;
    let (blobs, sources) = multi_weights::blobs(m, &variants);
    let per_variant = shared.bytes;
    let member = archive::Member {
        name: "model.o",
        data: &obj.object,
        symbols: obj.exports.clone(),
    };
    let tail = (!blobs.is_empty()).then(|| archive::Tail {
        name: WEIGHTS_MEMBER,
        len: data_object::object_len(target.arch, &blobs, data_object::DEFAULT_SECTION),
        symbols: blobs.iter().map(|b| b.symbol.clone()).collect(),
        write: Box::new(|out: &mut Vec<u8>| {
            let section = data_object::DEFAULT_SECTION;
            data_object::write_object(target.arch, &blobs, section, out, |i, dst| {
                let (v, w) = sources[i];
                variants[v]
                    .external
                    .as_ref()
                    .expect("a source has weights")
                    .fill(m, w, dst)
            })
        }),
    });
    let (archive, weights_object) = archive::write_archive_with(&[member], tail);
    let api = header_api(&m.name, &variants, target.arch);
    // The weights as the first (best) variant stores them, as the header's other fields describe
    // it; the manifest's `isa_variants` has every variant's.
    let weights_bytes = {
        let scratch = plans[0].scratch.map_or(0, |(_, bytes)| bytes);
        let packings =
            crate::codegen::core::packing::Packings::for_cpu(m, &target.variants[0], scratch);
        header::stored_weight_bytes(m, &packings)
    };
    let header = super::library_header(
        m,
        &largest,
        &target.name,
        obj.kernels.len(),
        (public_batch.as_ref(), seq, declared),
        &api,
        (weights_bytes, false),
    );
    let mut manifest = manifest::build(
        m,
        &largest,
        &target.name,
        &obj.kernels,
        before_fusion,
        weights_bytes,
    );
    manifest.isa_variants = Some(
        variants
            .iter()
            .zip(&plans)
            .zip(&per_variant)
            .map(|((v, p), &(total, added))| manifest::IsaVariant {
                isa: v.variant.isa.name.to_string(),
                target: v.target.clone(),
                kernel_count: v.kernels.len(),
                arena_size: p.arena_size,
                weight_bytes: total,
                weight_bytes_added: added,
            })
            .collect(),
    );
    let mut manifest = serde_json::to_string_pretty(&manifest).expect("manifest serialises");
    manifest.push('\n');
    Ok(Artefacts {
        batch: public_batch
            .filter(|_| seq.is_none())
            .map(|bp| (bp, declared)),
        ptx: None,
        name: m.name.clone(),
        object: obj.object,
        archive,
        weights_object,
        header,
        manifest,
        plan: largest,
        assembly: obj.assembly,
        ir: obj.ir,
        kernel_ir: obj.kernel_ir,
        kernels: obj.kernels,
        stages,
        pass_records,
        instructions_before_fusion: before_fusion,
        weights_blob: None,
        modules: opts
            .keep_stages
            .then(|| Box::new((original.clone(), optimized.clone()))),
    })
}
