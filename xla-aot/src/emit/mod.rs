//! Emitting a compiled model: object, static library, header and manifest, written atomically.
//!
//! Contract: [`compile_model`] produces every artefact in memory (for a CUDA target the archive
//! also holds the launcher and the PTX data object, and `<name>.ptx` is written beside it);
//! [`write_artefacts`] writes them
//! into the output directory through a temporary directory beside them and renames each file into
//! place, so an error never leaves a half-written library behind.

pub mod archive;
pub mod bindings;
pub mod cuda;
pub mod dump;
pub mod graphs;
pub mod header;
pub mod manifest;

use crate::arena::{BufferPlan, plan};
use crate::codegen::cpu::{self, CodegenError, Options};
use crate::codegen::cuda_host;
use crate::codegen::ptx::{self, PtxModule};
use crate::ir::Module;
use crate::passes::{PassRecord, Pipeline, PipelineError};
use crate::target::Target;
use std::path::{Path, PathBuf};

/// Everything `xla-aot compile` writes.
pub struct Artefacts {
    /// Model name (file stem of every artefact).
    pub name: String,
    /// `<name>.o`.
    pub object: Vec<u8>,
    /// `lib<name>.a`.
    pub archive: Vec<u8>,
    /// `<name>.h`.
    pub header: String,
    /// `<name>.json`.
    pub manifest: String,
    /// The buffer plan (for dumps and tests).
    pub plan: BufferPlan,
    /// Target assembly, when asked for.
    pub assembly: Option<String>,
    /// LLVM IR before and after optimisation, when asked for.
    pub ir: Option<(String, String)>,
    /// Each kernel's LLVM IR before and after optimisation: (kernel, before, after).
    pub kernel_ir: Vec<(String, String, String)>,
    /// The module as parsed, then after each pass that changed it: (pass, HLO text).
    pub stages: Vec<(String, String)>,
    /// What each pass run did and how long it took.
    pub pass_records: Vec<PassRecord>,
    /// HLO instructions just before fusion (for the manifest's fusion statistics).
    pub instructions_before_fusion: usize,
    /// The module before and after the pipeline (for the dump's graphs).
    pub modules: Option<Box<(Module, Module)>>,
    /// A CUDA target's PTX module (`<name>.ptx`, and the launches for dumps and tests).
    pub ptx: Option<PtxModule>,
    /// With batch buckets: the dispatcher's plan and the declared batch (bindings, tests).
    pub batch: Option<(cpu::BatchPlan, usize)>,
}

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
}

/// Compiles shorter than this print nothing; longer ones say what they are doing (a second: the
/// point where a silent command starts to look stuck).
pub const PROGRESS_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

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
}

/// Every bucket, smallest first: the declared one (`m`, entry points `<name>_run*`) and the
/// variants.
fn bucket_list(
    m: &Module,
    plan: &BufferPlan,
    declared: usize,
    variants: &[(usize, Module, BufferPlan)],
) -> Vec<cpu::Bucket> {
    let mut buckets = vec![cpu::Bucket {
        batch: declared,
        prefix: m.name.clone(),
        arena: plan.arena_size,
    }];
    for (b, v, p) in variants {
        buckets.push(cpu::Bucket {
            batch: *b,
            prefix: v.name.clone(),
            arena: p.arena_size,
        });
    }
    buckets.sort_by_key(|b| b.batch);
    buckets
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

/// The dispatcher's view of the buckets: each one's entry-point prefix and arena, and the bytes
/// of one item of each input and output (the declared module's sizes over its batch).
fn batch_plan(
    m: &Module,
    plan: &BufferPlan,
    declared: usize,
    variants: &[(usize, Module, BufferPlan)],
) -> cpu::BatchPlan {
    let buckets = bucket_list(m, plan, declared, variants);
    let c = &m.entry;
    let item = |bytes: usize| cpu::batch::Role::Bucketed {
        outer: 1,
        unit_bytes: bytes / declared.max(1),
    };
    cpu::BatchPlan {
        buckets,
        inputs: c
            .parameters()
            .iter()
            .map(|&p| item(c.inst(p).shape.size_bytes()))
            .collect(),
        outputs: c
            .outputs
            .iter()
            .map(|o| item(c.inst(o.value).shape.size_bytes()))
            .collect(),
        entry: "run_batch".into(),
    }
}

/// The dispatcher's view of sequence buckets: the listed inputs and outputs are bucketed along
/// the axis (the dims before it are blocks), the mask is filled, the rest pass through.
fn seq_plan(
    m: &Module,
    plan: &BufferPlan,
    seq: &crate::front::SeqAxis,
    variants: &[(usize, Module, BufferPlan)],
) -> cpu::BatchPlan {
    use cpu::batch::Role;
    let buckets = bucket_list(m, plan, seq.declared, variants);
    let c = &m.entry;
    let along = |shape: &crate::ir::Shape| Role::Bucketed {
        outer: shape.dims[..seq.axis].iter().product(),
        unit_bytes: shape.dims[seq.axis + 1..].iter().product::<usize>() * shape.dtype.size_bytes(),
    };
    let inputs = c
        .parameters()
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let shape = &c.inst(p).shape;
            if Some(i) == seq.mask {
                Role::Mask {
                    rows: shape.dims[..shape.rank() - 1].iter().product(),
                }
            } else if seq.inputs.contains(&i) {
                along(shape)
            } else {
                Role::Direct
            }
        })
        .collect();
    let outputs = c
        .outputs
        .iter()
        .enumerate()
        .map(|(j, o)| {
            if seq.outputs.contains(&j) {
                along(&c.inst(o.value).shape)
            } else {
                Role::Direct
            }
        })
        .collect();
    cpu::BatchPlan {
        buckets,
        inputs,
        outputs,
        entry: "run_seq".into(),
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
/// (`front::Model::batch`; `m` is the one of the declared batch). The library gets each other
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
    let original = m;
    let m = &optimized;
    let plan = plan(m);
    progress.stage(&format!(
        "optimised and planned: {} instructions, arena {} bytes",
        m.entry.instructions.len(),
        plan.arena_size
    ));
    // Batch buckets: every other bucket optimised and planned as `<name>_b<B>`.
    let declared = match seq {
        Some(s) => s.declared,
        None => m
            .entry
            .parameters()
            .first()
            .and_then(|&p| m.entry.inst(p).shape.dims.first().copied())
            .unwrap_or(1),
    };
    let letter = if seq.is_some() { 's' } else { 'b' };
    let mut variants = Vec::new();
    for (b, vm) in buckets.iter().filter(|(b, _)| *b != declared) {
        let mut v = vm.clone();
        v.name = format!("{}_{letter}{b}", m.name);
        if !opts.no_pipeline {
            Pipeline::default_pipeline()
                .disable(&opts.disabled_passes)
                .run(&mut v, &mut |_, _, _| {})?;
        }
        let vplan = crate::arena::plan(&v);
        variants.push((*b, v, vplan));
    }
    let batch_plan = (!buckets.is_empty()).then(|| match seq {
        Some(s) => seq_plan(m, &plan, s, &variants),
        None => batch_plan(m, &plan, declared, &variants),
    });
    let refs: Vec<(&Module, &BufferPlan)> = variants.iter().map(|(_, v, p)| (v, p)).collect();
    let obj = cpu::compile_batched(m, &plan, &refs, batch_plan.as_ref(), target, opts.codegen)?;
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
    let archive = archive::write_archive(&members);
    let cuda_header = cuda
        .as_ref()
        .map(|(p, _, _)| header::render_cuda(m, p))
        .unwrap_or_default();
    let header = match &batch_plan {
        None => header::render(m, &plan, &target.name, obj.kernels.len(), &cuda_header),
        Some(bp) => {
            let mut whole = plan.clone();
            whole.arena_size = bp.arena_size();
            let api = match seq {
                Some(s) => header::render_seq(m, bp, s),
                None => header::render_batch(m, bp, declared),
            };
            header::render(m, &whole, &target.name, obj.kernels.len(), &api)
        }
    };
    let mut manifest = manifest::build(m, &plan, &target.name, &obj.kernels, before_fusion);
    manifest.cuda = cuda.as_ref().map(|(p, _, _)| manifest::cuda(p));
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
        header,
        manifest,
        plan,
        assembly: obj.assembly,
        ir: obj.ir,
        kernel_ir: obj.kernel_ir,
        stages,
        pass_records,
        instructions_before_fusion: before_fusion,
        modules: opts
            .keep_stages
            .then(|| Box::new((original.clone(), optimized.clone()))),
    })
}

/// Writes the artefacts into `dir` (created if needed); returns the paths written.
pub fn write_artefacts(a: &Artefacts, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".xla-aot-tmp-{}-{}", a.name, std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir(&tmp)?;
    let mut files: Vec<(String, &[u8])> = vec![
        (format!("{}.o", a.name), &a.object),
        (format!("lib{}.a", a.name), &a.archive),
        (format!("{}.h", a.name), a.header.as_bytes()),
        (format!("{}.json", a.name), a.manifest.as_bytes()),
    ];
    if let Some(p) = &a.ptx {
        files.push((format!("{}.ptx", a.name), p.ptx.as_bytes()));
    }
    let result = (|| {
        for (name, data) in &files {
            std::fs::write(tmp.join(name), data)?;
        }
        let mut written = Vec::new();
        for (name, _) in &files {
            let dest = dir.join(name);
            std::fs::rename(tmp.join(name), &dest)?;
            written.push(dest);
        }
        Ok(written)
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result
}
