//! The one compile path: front end → optimisation pipeline → buffer plan → backend → writers.
//!
//! Contract: [`optimize`] is the only place a module is optimised and planned; [`compile_model`]
//! (and [`compile_spec_model`], [`compile_model_buckets`]) run it for every bucket, then the CPU
//! code generator (and for a CUDA target the PTX backend and its launcher), then the writers of
//! `emit/` (archive, header, manifest), returning every artefact in memory; [`run`] runs the same
//! [`optimize`] and executes the CPU code of the host in-process (`xla-aot run`, the JIT tests).
//! So `xla-aot compile`, `xla-aot run`, `xla_aot::Build` and CMake (which calls the CLI) ship and
//! check one and the same optimised module.

pub mod bf16_operands;
mod buckets;
mod multi;
mod multi_weights;
pub mod weight_rounding;

use crate::arena::{BufferPlan, plan};
use crate::codegen::gpu::{cuda_host, ptx};
use crate::codegen::{self, CodegenError, KernelInfo, Options};
use crate::emit::data_object::{self, Blob};
use crate::emit::{Artefacts, archive, cuda, header, manifest};
use crate::emit::{footprint, kernel_rodata};
use crate::ir::{Literal, Module};
use crate::passes::{PassRecord, Pipeline, PipelineError};
use crate::target::Target;

/// How to compile.
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    /// What the code generator produces besides the object.
    pub codegen: Options,
    /// Passes to skip (`--disable-pass`).
    pub disabled_passes: Vec<String>,
    /// Skip the whole optimisation pipeline.
    pub no_pipeline: bool,
    /// Keep the HLO text after every pass (for `--dump-to`).
    pub keep_stages: bool,
    /// Report stage progress on stderr once a compile has taken [`PROGRESS_AFTER`].
    pub progress: bool,
    /// Keep every 3×3 convolution direct (`--no-winograd`): results then match the reference
    /// interpreter to rounding (`codegen/core/winograd.rs` states the Winograd error bound).
    pub no_winograd: bool,
    /// `--checks`: the entry points also refuse a call whose arena another call is using
    /// (`codegen/core/canary.rs`; one more arena slice, two atomic operations per call).
    pub checks: bool,
    /// `--weights-section`: the ELF section of the weights (`emit/sections.rs`; default
    /// `.rodata.xla_aot.<name>` on microcontroller targets, `.rodata` elsewhere).
    pub weights_section: Option<String>,
    /// `--code-section`: the ELF section of the code (default `.text`).
    pub code_section: Option<String>,
    /// `--precision`: the weights' storage type (`ir/precision.rs`), overriding the module's own
    /// (a spec's `precision:`); `None` keeps the module's.
    pub precision: Option<crate::ir::Precision>,
}

/// `plan` with what `target`'s backend adds for `m`: on a CPU, concatenations assembled in place
/// by their operands' kernels (`arena/concat_views.rs`) and the kernel scratch of the Winograd
/// convolutions (unless [`CompileOptions::no_winograd`]) and of the GEMMs that pack A; then the in-use word of a
/// [`CompileOptions::checks`] build. CUDA targets keep `plan` as it is.
pub fn plan_for_target(
    m: &Module,
    plan: BufferPlan,
    target: &Target,
    opts: &CompileOptions,
) -> BufferPlan {
    if target.cuda_sm.is_some() {
        return plan;
    }
    use crate::codegen::core::packing::Packings;
    let winograd = if opts.no_winograd {
        0
    } else {
        Packings::scratch_for_cpu(m, target)
    };
    // The bf16 and int8 GEMMs pack A into the same scratch (`codegen/cpu/gemm_pack.rs`);
    // kernels run one at a time, so the largest need is the scratch.
    let gemm = crate::codegen::cpu::gemm_pack::scratch_bytes(
        m,
        target,
        &Packings::for_cpu(m, target, winograd),
    );
    let scratch = winograd.max(gemm);
    // Concatenations whose operands' kernels write through its strides are assembled in place;
    // quantized activations only pools read are stored as bytes.
    let packings = Packings::for_cpu(m, target, winograd);
    let concats = m
        .entry
        .instructions
        .iter()
        .any(|i| matches!(i.op, crate::ir::Op::Concatenate { .. }));
    let strided =
        |id| concats && crate::codegen::cpu::strided_out::writes_strided(m, target, &packings, id);
    let views = crate::arena::plan_with_views(m, &strided).views;
    // Grid kernels (the host build a CUDA launch emulates) share the device's plan: no value is
    // stored as bytes there, and every input with an API dtype has its staging slot.
    let stored = if opts.codegen.grid {
        vec![None; m.entry.instructions.len()]
    } else {
        crate::codegen::cpu::byte_storage::stored_types(m, target, &packings, &views)
    };
    let plan = if concats || stored.iter().any(Option::is_some) {
        crate::arena::plan_for_backend(m, &strided, &|id| stored[id.index()])
    } else {
        plan
    };
    let plan = crate::arena::reserve_scratch(plan, scratch, !opts.no_winograd);
    if opts.checks {
        crate::arena::reserve_canary(plan)
    } else {
        plan
    }
}

/// The host target, for in-process runs.
fn host() -> Result<Target, CompileError> {
    Target::resolve("host").map_err(|e| CompileError::Unsupported(e.to_string()))
}

/// Compiles shorter than this print nothing; longer ones say what they are doing (a second: the
/// point where a silent command starts to look stuck).
pub const PROGRESS_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The archive member holding the large weights (`emit/data_object.rs`).
pub const WEIGHTS_MEMBER: &str = "weights.o";

/// Prints `xla-aot: <model>: <what> (<elapsed>)` when enabled and the compile is slow.
struct Progress<'a> {
    on: bool,
    name: &'a str,
    start: std::time::Instant,
}

impl Progress<'_> {
    fn stage(&self, what: &str) {
        let t = self.start.elapsed();
        if self.on && t >= PROGRESS_AFTER {
            eprintln!("xla-aot: {}: {what} ({:.1}s)", self.name, t.as_secs_f64());
        }
    }
}

/// Why a compilation failed.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error(transparent)]
    Codegen(#[from] CodegenError),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// A feature the target cannot have yet.
    #[error("{0}")]
    Unsupported(String),
    /// A weight the module's precision cannot hold.
    #[error(transparent)]
    Precision(#[from] weight_rounding::RoundingError),
}

/// A module after the optimisation pipeline, with its buffer plan and what the pipeline did.
#[derive(Debug, Clone)]
pub struct Optimized {
    /// The optimised module (what the backends compile).
    pub module: Module,
    /// Its buffer plan.
    pub plan: BufferPlan,
    /// The module as parsed, then after each pass that changed it: (pass, HLO text); empty unless
    /// [`CompileOptions::keep_stages`].
    pub stages: Vec<(String, String)>,
    /// What each pass run did and how long it took.
    pub pass_records: Vec<PassRecord>,
    /// HLO instructions just before fusion (for the manifest's fusion statistics).
    pub instructions_before_fusion: usize,
}

/// Runs the optimisation pipeline (minus the disabled passes) on `m` and plans its buffers.
pub fn optimize(m: &Module, opts: &CompileOptions) -> Result<Optimized, CompileError> {
    let mut stages = Vec::new();
    let readable = crate::ir::PrintOptions::readable();
    if opts.keep_stages {
        stages.push((
            "parsed".to_string(),
            crate::ir::print_module_with(m, &readable),
        ));
    }
    let mut optimized = m.clone();
    let mut before_fusion = m.entry.instructions.len();
    let mut fused = false;
    let pass_records = if opts.no_pipeline {
        Vec::new()
    } else {
        Pipeline::default_pipeline()
            .disable(&opts.disabled_passes)
            .run(&mut optimized, &mut |_, pass, module| {
                if pass == "fusion" {
                    fused = true;
                } else if !fused {
                    before_fusion = module.entry.instructions.len();
                }
                if opts.keep_stages {
                    stages.push((
                        pass.to_string(),
                        crate::ir::print_module_with(module, &readable),
                    ));
                }
            })?
    };
    // The weights' precision applies to the weights the pipeline leaves (batch norms folded in).
    if let Some(p) = opts.precision {
        optimized.precision = p;
    }
    weight_rounding::round_weights(&mut optimized)?;
    bf16_operands::round_operands(&mut optimized);
    let plan = plan(&optimized);
    Ok(Optimized {
        module: optimized,
        plan,
        stages,
        pass_records,
        instructions_before_fusion: before_fusion,
    })
}

/// Compiles a loaded spec: [`compile_model_buckets`] with its buckets, if any.
pub fn compile_spec_model(
    model: &crate::front::Model,
    target: &Target,
    opts: &CompileOptions,
) -> Result<Artefacts, CompileError> {
    compile_model_buckets(
        &model.module,
        &model.buckets,
        model.seq.as_ref(),
        target,
        opts,
    )
}

/// The library's header: with buckets (`batch`: their plan, the sequence axis if they are
/// sequence buckets, the declared batch) their API and the arena of the largest, then `tail`
/// (the CUDA or multi-ISA API); `weights`: the weights' stored bytes, and whether the run
/// functions take them as an argument (`--weights external`).
pub(super) fn library_header(
    m: &Module,
    plan: &BufferPlan,
    target: &str,
    kernels: usize,
    batch: (
        Option<&crate::codegen::cpu::BatchPlan>,
        Option<&crate::front::SeqAxis>,
        usize,
    ),
    tail: &str,
    (weights_bytes, weights_arg): (usize, bool),
) -> String {
    match batch {
        (None, _, _) => header::render(m, plan, target, kernels, tail, weights_bytes, weights_arg),
        (Some(bp), seq, declared) => {
            let mut whole = plan.clone();
            whole.arena_size = bp.arena_size();
            let api = match seq {
                Some(s) => header::render_seq(m, bp, s),
                None => header::render_batch(m, bp, declared),
            };
            let api = format!("{api}{tail}");
            header::render(m, &whole, target, kernels, &api, weights_bytes, weights_arg)
        }
    }
}

/// Optimises and compiles a verified module for a target.
pub fn compile_model(
    m: &Module,
    target: &Target,
    opts: &CompileOptions,
) -> Result<Artefacts, CompileError> {
    compile_model_buckets(m, &[], None, target, opts)
}

/// [`compile_model`] for a spec with `batch_sizes`: `buckets` holds every bucket's module
/// (`spec::Model::batch`; `m` is the one of the declared batch). The library gets each other
/// bucket's entry points as `<name>_b<B>_run*` and `<name>_run_batch` (`codegen/cpu/batch.rs`),
/// all in one object so identical weights are stored once; the arena holds the largest bucket
/// with its staging buffers. Empty `buckets`: exactly [`compile_model`].
pub fn compile_model_buckets(
    m: &Module,
    buckets: &[(usize, Module)],
    seq: Option<&crate::front::SeqAxis>,
    target: &Target,
    opts: &CompileOptions,
) -> Result<Artefacts, CompileError> {
    if !m.api.is_empty() && !buckets.is_empty() {
        return Err(CompileError::Unsupported(format!(
            "inputs passed as int64, uint32, int16, uint16, int8, uint8, float16 or bfloat16 are not supported with `batch_sizes` or `seq_buckets` yet ({}); export them as float32/int32, freeze them (--freeze), or compile without buckets",
            target.name
        )));
    }
    if !buckets.is_empty() && target.cuda_sm.is_some() {
        return Err(CompileError::Unsupported(format!(
            "`batch_sizes` and `seq_buckets` are not supported on CUDA targets yet ({}); compile one size per library",
            target.name
        )));
    }
    let progress = Progress {
        on: opts.progress,
        name: &m.name,
        start: std::time::Instant::now(),
    };
    if !target.variants.is_empty() {
        if opts.codegen.weights_blob
            || opts.weights_section.is_some()
            || opts.code_section.is_some()
        {
            return Err(CompileError::Unsupported(format!(
                "--weights external, --weights-section and --code-section are not supported for \
                 the multi-ISA target {} yet; compile without them",
                target.name
            )));
        }
        return multi::compile(m, buckets, seq, target, opts, &progress);
    }
    let Optimized {
        module: optimized,
        plan,
        stages,
        pass_records,
        instructions_before_fusion: before_fusion,
    } = optimize(m, opts)?;
    let plan = plan_for_target(&optimized, plan, target, opts);
    let original = m;
    let m = &optimized;
    progress.stage(&format!(
        "optimised and planned: {} instructions, arena {} bytes",
        m.entry.instructions.len(),
        plan.arena_size
    ));
    let (declared, variants, batch_plan) = plan_buckets(m, &plan, buckets, seq, target, opts)?;
    let refs: Vec<(&Module, &BufferPlan)> = variants.iter().map(|(_, v, p)| (v, p)).collect();
    if opts.codegen.weights_blob && (target.cuda_sm.is_some() || !buckets.is_empty()) {
        return Err(CompileError::Unsupported(
            "--weights external: not with a CUDA target or batch buckets yet; compile with \
             embedded weights (the default)"
                .into(),
        ));
    }
    if let Some(s) = &opts.weights_section {
        crate::emit::sections::check_section(s)
            .map_err(|r| CompileError::Unsupported(format!("--weights-section: {r}")))?;
    }
    if let Some(s) = &opts.code_section {
        crate::emit::sections::check_section(s)
            .map_err(|r| CompileError::Unsupported(format!("--code-section: {r}")))?;
    }
    let section =
        crate::emit::sections::weights_section(&m.name, target, opts.weights_section.as_deref());
    let obj = codegen::compile_batched(
        m,
        &plan,
        &refs,
        batch_plan.as_ref(),
        target,
        opts.codegen,
        codegen::Sections {
            weights: section.as_deref(),
            code: opts.code_section.as_deref(),
        },
    )?;
    progress.stage(&format!(
        "generated {} kernels for {}",
        obj.kernels.len(),
        target.name
    ));
    let object_name = format!("{}.o", m.name);
    let member_name = if object_name.len() <= 15 {
        object_name.clone()
    } else {
        "model.o".to_string()
    };
    // A CUDA target's library also holds the PTX kernels (data object) and their launcher.
    let cuda = match &target.cuda_sm {
        Some(sm) => {
            let module = ptx::compile(m, &plan, sm)?;
            let launcher = cuda_host::compile(&m.name, &module, target)?;
            let data = cuda::data_object(&m.name, &module, target.arch);
            progress.stage(&format!(
                "generated {} PTX kernels for {sm}",
                module.launches.len()
            ));
            Some((module, launcher, data))
        }
        None => None,
    };
    let mut members = vec![archive::Member {
        name: &member_name,
        data: &obj.object,
        symbols: obj.exports.clone(),
    }];
    if let Some((_, launcher, data)) = &cuda {
        members.push(archive::Member {
            name: "cuda.o",
            data: launcher,
            symbols: cuda_host::exports(&m.name),
        });
        members.push(archive::Member {
            name: "ptx.o",
            data,
            symbols: cuda::data_symbols(&m.name),
        });
    }
    // The large weights: a data object written last, straight into the archive.
    let weights_section = section.as_deref().unwrap_or(data_object::DEFAULT_SECTION);
    let weights = obj.external_weights.as_ref().map(|w| {
        let blobs: Vec<Blob> = w
            .weights
            .iter()
            .zip(w.sizes(m))
            .map(|(w, len)| Blob {
                symbol: w.symbol.clone(),
                len,
            })
            .collect();
        (w, blobs)
    });
    let tail = weights.as_ref().map(|(w, blobs)| archive::Tail {
        name: WEIGHTS_MEMBER,
        len: data_object::object_len(target.arch, blobs, weights_section),
        symbols: blobs.iter().map(|b| b.symbol.clone()).collect(),
        write: Box::new(|out: &mut Vec<u8>| {
            data_object::write_object(target.arch, blobs, weights_section, out, |i, dst| {
                w.fill(m, i, dst)
            })
        }),
    });
    let (archive, weights_object) = archive::write_archive_with(&members, tail);
    drop(weights);
    let cuda_header = cuda
        .as_ref()
        .map(|(p, _, _)| header::render_cuda(m, p))
        .unwrap_or_default();
    // The weights as stored: half-precision ones where the CPU kernels read them packed (on a
    // CUDA target, as the device arena holds them).
    let packings = if target.cuda_sm.is_some() {
        crate::codegen::core::packing::Packings::for_gpu(m)
    } else {
        crate::codegen::core::packing::Packings::for_cpu(m, target, plan.winograd_scratch())
    };
    let weights_bytes = header::stored_weight_bytes(m, &packings);
    // A microcontroller library states its flash and RAM bytes (`emit/footprint.rs`).
    let footprint = target.arch.is_microcontroller().then(|| {
        let objects = std::iter::once(obj.object.as_slice())
            .chain(weights_object.clone().map(|r| &archive[r]));
        let arena = batch_plan
            .as_ref()
            .map_or(plan.arena_size, |bp| bp.arena_size());
        footprint::Footprint::of(objects, weights_section, arena as u64)
    });
    // Its code and read-only data per kernel (`emit/kernel_rodata.rs`).
    let per_kernel = footprint.map(|_| {
        let objects = || {
            std::iter::once(obj.object.as_slice())
                .chain(weights_object.clone().map(|r| &archive[r]))
        };
        let functions: Vec<(String, u64)> = objects()
            .filter_map(footprint::functions)
            .flatten()
            .collect();
        let names: Vec<&str> = obj.kernels.iter().map(|k| k.name.as_str()).collect();
        let text = footprint::kernel_text(&functions, &names);
        let reads: Vec<&[u32]> = obj.kernels.iter().map(|k| k.constants.as_slice()).collect();
        let rodata = kernel_rodata::split(objects(), &m.name, &reads);
        (text, rodata)
    });
    let memory_header = footprint
        .map(|f| {
            let mut h = f.header(
                &m.name.to_ascii_uppercase(),
                &target.name,
                weights_section,
                opts.code_section.as_deref().unwrap_or(".text"),
            );
            if let Some((text, rodata)) = &per_kernel {
                h.push_str(&kernel_rodata::header_lines(
                    &m.name.to_ascii_uppercase(),
                    &obj.kernels,
                    text,
                    rodata,
                ));
            }
            h
        })
        .unwrap_or_default();
    let blob_header = obj
        .weights_blob
        .as_ref()
        .map(|b| header::render_weights_blob(m, b))
        .unwrap_or_default();
    let memory_header = memory_header + &blob_header;
    let cuda_header = cuda_header + &memory_header;
    let header = library_header(
        m,
        &plan,
        &target.name,
        obj.kernels.len(),
        (batch_plan.as_ref(), seq, declared),
        &cuda_header,
        (weights_bytes, obj.weights_blob.is_some()),
    );
    let mut manifest = manifest::build(
        m,
        &plan,
        &target.name,
        &obj.kernels,
        before_fusion,
        weights_bytes,
    );
    manifest.cuda = cuda.as_ref().map(|(p, _, _)| manifest::cuda(p));
    manifest.weights_blob = obj
        .weights_blob
        .as_ref()
        .map(|b| manifest::weights_blob(&m.name, b));
    if let Some((text, rodata)) = &per_kernel {
        for ((k, &t), &r) in manifest
            .kernels
            .iter_mut()
            .zip(text)
            .zip(&rodata.per_kernel)
        {
            k.text_bytes = Some(t);
            k.rodata_bytes = Some(r);
        }
    }
    manifest.memory = footprint.map(|f| manifest::Memory {
        footprint: f,
        flash: f.flash(),
        ram: f.ram(),
        weights_section: weights_section.to_string(),
        rodata_shared: per_kernel.as_ref().map_or(0, |(_, r)| r.shared),
        rodata_other: per_kernel.as_ref().map_or(0, |(_, r)| r.other),
    });
    let mut manifest = serde_json::to_string_pretty(&manifest).expect("manifest serialises");
    manifest.push('\n');
    Ok(Artefacts {
        batch: batch_plan
            .filter(|_| seq.is_none())
            .map(|bp| (bp, declared)),
        ptx: cuda.map(|(p, _, _)| p),
        name: m.name.clone(),
        object: obj.object,
        archive,
        weights_object,
        header,
        manifest,
        plan,
        assembly: obj.assembly,
        ir: obj.ir,
        kernel_ir: obj.kernel_ir,
        kernels: obj.kernels,
        stages,
        pass_records,
        instructions_before_fusion: before_fusion,
        weights_blob: obj.weights_blob,
        modules: opts
            .keep_stages
            .then(|| Box::new((original.clone(), optimized.clone()))),
    })
}

/// The batch (`seq`: sequence) size `m`, the declared bucket, is compiled for.
fn declared_bucket(m: &Module, seq: Option<&crate::front::SeqAxis>) -> usize {
    match seq {
        Some(s) => s.declared,
        None => m
            .entry
            .parameters()
            .first()
            .and_then(|&p| m.entry.inst(p).shape.dims.first().copied())
            .unwrap_or(1),
    }
}

/// A bucket module, optimised and planned: (its batch or sequence size, module, plan).
type PlannedBucket = (usize, Module, BufferPlan);

/// Every bucket of `buckets` but the declared one optimised and planned for `target` as
/// `<name>_b<B>` (`<name>_s<S>` with `seq`), `m` being the optimised declared bucket and `plan`
/// its plan; and the dispatcher's plan over all of them (none without buckets). Returns the
/// declared size too.
fn plan_buckets(
    m: &Module,
    plan: &BufferPlan,
    buckets: &[(usize, Module)],
    seq: Option<&crate::front::SeqAxis>,
    target: &Target,
    opts: &CompileOptions,
) -> Result<(usize, Vec<PlannedBucket>, Option<codegen::cpu::BatchPlan>), CompileError> {
    let declared = declared_bucket(m, seq);
    let letter = if seq.is_some() { 's' } else { 'b' };
    let mut variants = Vec::new();
    for (b, vm) in buckets.iter().filter(|(b, _)| *b != declared) {
        let mut v = vm.clone();
        v.name = format!("{}_{letter}{b}", m.name);
        let quiet = CompileOptions {
            keep_stages: false,
            ..opts.clone()
        };
        let o = optimize(&v, &quiet)?;
        let plan = plan_for_target(&o.module, o.plan, target, opts);
        variants.push((*b, o.module, plan));
    }
    let batch_plan = (!buckets.is_empty()).then(|| match seq {
        Some(s) => buckets::seq_plan(m, plan, s, &variants),
        None => buckets::batch_plan(m, plan, declared, &variants),
    });
    Ok((declared, variants, batch_plan))
}

/// What [`run`] computed: the outputs and the kernels that computed them.
#[derive(Debug, Clone)]
pub struct Run {
    /// One literal per output of the module, in order.
    pub outputs: Vec<Literal>,
    /// The kernels of the host code that ran, in execution order (the same as `compile` for the
    /// host target generates).
    pub kernels: Vec<KernelInfo>,
}

/// Optimises `m` exactly as [`compile_model`] does, compiles it for the host and runs it
/// in-process on `inputs` (one per parameter, in order).
pub fn run(m: &Module, inputs: &[Literal], opts: &CompileOptions) -> Result<Run, CompileError> {
    let o = optimize(m, opts)?;
    let plan = plan_for_target(&o.module, o.plan, &host()?, opts);
    let (outputs, kernels) = crate::codegen::cpu::jit::run(&o.module, &plan, inputs)?;
    Ok(Run { outputs, kernels })
}

/// [`run`], then `runs` timed runs: each kernel through the library's profiler hook, and the
/// whole call with and without it (`xla-aot profile`), on `threads` threads through the
/// library's parallel-for hook (1: none registered).
pub fn profile(
    m: &Module,
    inputs: &[Literal],
    opts: &CompileOptions,
    runs: usize,
    threads: usize,
) -> Result<(Run, crate::codegen::cpu::jit::Timings), CompileError> {
    let o = optimize(m, opts)?;
    let plan = plan_for_target(&o.module, o.plan, &host()?, opts);
    let (outputs, kernels, t) =
        crate::codegen::cpu::jit::profile(&o.module, &plan, inputs, runs, threads)?;
    Ok((Run { outputs, kernels }, t))
}

/// [`run`] with the default options: the whole pipeline, as `xla-aot run` and `compile` use it.
pub fn run_host(m: &Module, inputs: &[Literal]) -> Result<Vec<Literal>, CompileError> {
    Ok(run(m, inputs, &CompileOptions::default())?.outputs)
}
