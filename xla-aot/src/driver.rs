//! What the CLI commands do, as library functions (the binary only parses arguments).
//!
//! Contract: each function either completes or returns a [`DriverError`] without leaving partial
//! files behind: outputs are computed first, then each file is written to a temporary name in the
//! target directory and renamed into place.

use crate::compile::CompileOptions;
use crate::front::{InputOverrides, SpecError, load_spec_with};
use crate::interp::{InterpError, evaluate};
use crate::ir::npy::{read_npy, write_npy};
use crate::ir::shape::dims_str;
use crate::ir::{DType, Literal, Module, PrintOptions, print_module_with};
use crate::util::io::io_reason;
use crate::util::rng::SplitMix64;
use crate::util::shorten::shorten;
use crate::util::suggest::nearest;
use std::path::{Path, PathBuf};
use thiserror::Error;

mod compare;
mod quantize;
pub use compare::{COMPARE_ATOL, COMPARE_RTOL, Difference, compare, compare_within, tolerance};
pub use quantize::{QuantizeReport, QuantizeRequest, quantize};

/// Errors of a command; all are user errors (exit code 1).
#[derive(Debug, Error)]
pub enum DriverError {
    /// The spec is invalid.
    #[error("{0}")]
    Spec(#[from] SpecError),
    /// A `--input` argument is wrong.
    #[error("error: {0}")]
    Input(String),
    /// Evaluation failed.
    #[error("error: {0}")]
    Interp(#[from] InterpError),
    /// Writing outputs failed.
    #[error("error: cannot write {path}: {reason}")]
    Write { path: String, reason: String },
    /// The target could not be resolved.
    #[error("error: {0}")]
    Target(#[from] crate::target::TargetError),
    /// Code generation failed.
    #[error("error: {0}")]
    Codegen(#[from] crate::codegen::CodegenError),
    /// Compilation failed.
    #[error("error: {0}")]
    Compile(#[from] crate::compile::CompileError),
    /// The optimisation pipeline failed (a compiler bug).
    #[error("error: {0}")]
    Pipeline(#[from] crate::passes::PipelineError),
    /// Post-training quantization failed.
    #[error("error: {0}")]
    Quant(#[from] crate::quant::QuantError),
}

/// Options of `xla-aot compile`.
#[derive(Debug, Clone, Default)]
pub struct CompileRequest {
    /// Passes to skip.
    pub disabled_passes: Vec<String>,
    /// Where to write the dump files.
    pub dump_to: Option<PathBuf>,
    /// Print a per-pass timing table on stderr.
    pub time_passes: bool,
    /// Input shapes, dims and frozen inputs of an imported graph.
    pub inputs: InputOverrides,
    /// Keep 3×3 convolutions direct (`CompileOptions::no_winograd`).
    pub no_winograd: bool,
    /// The weights' precision (`CompileOptions::precision`).
    pub precision: Option<crate::ir::Precision>,
    /// Refuse a call whose arena another call is using (`CompileOptions::checks`).
    pub checks: bool,
    /// The weights' ELF section (`CompileOptions::weights_section`).
    pub weights_section: Option<String>,
    /// The code's ELF section (`CompileOptions::code_section`).
    pub code_section: Option<String>,
    /// `--optimize`: overrides the target's size-or-speed default.
    pub optimize: Option<crate::target::Optimize>,
    /// `--weights external`: the constants in `<name>.weights`, none in the library.
    pub weights_external: bool,
}

/// Checks `--disable-pass` names against the pipeline's passes.
pub fn check_passes(disabled: &[String]) -> Result<(), DriverError> {
    for p in disabled {
        if !crate::passes::PASS_NAMES.contains(&p.as_str()) {
            let hint = nearest(p, crate::passes::PASS_NAMES.iter().copied())
                .map(|s| format!("; did you mean `{s}`?"))
                .unwrap_or_default();
            return Err(DriverError::Input(format!(
                "unknown pass `{p}` in --disable-pass (passes: {}){hint}",
                crate::passes::PASS_NAMES.join(", ")
            )));
        }
    }
    Ok(())
}

/// The compile options of a command that dumps its stages to `dump_to` (or not).
fn options(
    disabled_passes: &[String],
    dumping: bool,
    no_winograd: bool,
    precision: Option<crate::ir::Precision>,
    checks: bool,
) -> CompileOptions {
    CompileOptions {
        codegen: crate::codegen::Options {
            assembly: dumping,
            ir: dumping,
            grid: false,
            weights_blob: false,
        },
        disabled_passes: disabled_passes.to_vec(),
        no_pipeline: false,
        keep_stages: dumping,
        progress: true,
        no_winograd,
        checks,
        weights_section: None,
        code_section: None,
        precision,
    }
}

/// Writes the dump of `artefacts` into `dir`.
fn dump(artefacts: &crate::emit::Artefacts, dir: &Path) -> Result<(), DriverError> {
    crate::emit::dump::write_dump(artefacts, dir).map_err(|e| DriverError::Write {
        path: dir.display().to_string(),
        reason: io_reason(&e),
    })
}

/// `xla-aot compile`: spec → `<name>.o`, `lib<name>.a`, `<name>.h`, `<name>.json` in `out_dir`.
pub fn compile(
    spec: &Path,
    target: &str,
    out_dir: &Path,
    req: &CompileRequest,
) -> Result<Vec<PathBuf>, DriverError> {
    let mut target = crate::target::Target::resolve(target)?;
    if let Some(o) = req.optimize {
        target.optimize = o;
    }
    check_passes(&req.disabled_passes)?;
    let model = load_spec_with(spec, &req.inputs)?;
    // XLA_AOT_DUMP_TO=DIR: the build-time analogue of XLA_FLAGS=--xla_dump_to.
    let dump_to = req.dump_to.clone().or_else(|| {
        std::env::var_os("XLA_AOT_DUMP_TO").map(|d| PathBuf::from(d).join(&model.module.name))
    });
    let mut opts = CompileOptions {
        weights_section: req.weights_section.clone(),
        code_section: req.code_section.clone(),
        ..options(
            &req.disabled_passes,
            dump_to.is_some(),
            req.no_winograd,
            req.precision,
            req.checks,
        )
    };
    opts.codegen.weights_blob = req.weights_external;
    let artefacts = crate::compile::compile_spec_model(&model, &target, &opts)?;
    if req.time_passes {
        eprint!("{}", crate::passes::timing_report(&artefacts.pass_records));
    }
    if let Some(dir) = &dump_to {
        dump(&artefacts, dir)?;
    }
    crate::emit::write_artefacts(&artefacts, out_dir).map_err(|e| DriverError::Write {
        path: out_dir.display().to_string(),
        reason: io_reason(&e),
    })
}

/// Which form of the module `inspect` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Straight from the spec.
    Parsed,
    /// After the optimisation pipeline.
    Optimized,
}

/// `xla-aot inspect`: the HLO text of a spec.
pub fn inspect(
    spec: &Path,
    stage: Stage,
    full_constants: bool,
    inputs: &InputOverrides,
) -> Result<String, DriverError> {
    let mut model = load_spec_with(spec, inputs)?;
    if stage == Stage::Optimized {
        model.module = crate::compile::optimize(&model.module, &CompileOptions::default())?.module;
    }
    let opts = if full_constants {
        PrintOptions::default()
    } else {
        PrintOptions::readable()
    };
    Ok(print_module_with(&model.module, &opts))
}

/// One output of `run`, with its summary line.
pub struct RunOutput {
    pub name: String,
    pub value: Literal,
}

/// The result of `run`: outputs and notes for the user (e.g. which inputs were random).
pub struct RunReport {
    pub outputs: Vec<RunOutput>,
    pub notes: Vec<String>,
    /// With [`RunMode::Compare`], the outputs whose compiled values mismatch the reference
    /// ([`compare`]); the CLI then exits non-zero.
    pub mismatched: Vec<String>,
}

/// Range of seeded random i32 inputs (indices): [0, RANDOM_INDEX_RANGE). Small so that it is a
/// valid index for any realistic embedding table; out-of-range ids would be clamped anyway.
pub const RANDOM_INDEX_RANGE: u64 = 16;

/// Random input for a parameter: standard normal f32 or small non-negative i32.
pub fn random_input(dtype: DType, dims: &[usize], seed: u64) -> Literal {
    let mut g = SplitMix64(seed);
    let n: usize = dims.iter().product();
    match dtype {
        DType::I32 => Literal::from_i32(
            dims.to_vec(),
            &(0..n)
                .map(|_| (g.next_u64() % RANDOM_INDEX_RANGE) as i32)
                .collect::<Vec<_>>(),
        ),
        _ => Literal::from_f32(
            dims.to_vec(),
            &(0..n).map(|_| g.normal() as f32).collect::<Vec<_>>(),
        ),
    }
}

/// Resolves `NAME=FILE` arguments against the module's parameters; unnamed inputs get seeded
/// random values (the seed mixed with the input's position, so inputs differ).
pub fn gather_inputs(
    m: &Module,
    args: &[String],
    seed: u64,
) -> Result<(Vec<Literal>, Vec<String>), DriverError> {
    let c = &m.entry;
    let params = c.parameters();
    let names: Vec<&str> = params.iter().map(|&p| c.inst(p).name.as_str()).collect();
    let mut given: Vec<Option<Literal>> = vec![None; params.len()];
    for a in args {
        let Some((name, file)) = a.split_once('=') else {
            return Err(DriverError::Input(format!(
                "`--input {a}` is not NAME=FILE.npy (inputs: {})",
                names.join(", ")
            )));
        };
        let idx = match names.iter().position(|n| *n == name) {
            Some(i) => i,
            None => match name.parse::<usize>() {
                Ok(i) if i < names.len() => i,
                Ok(i) => {
                    let range = match names.len() {
                        0 => "the model has no inputs".to_string(),
                        n => format!("indices are 0 to {} ({})", n - 1, names.join(", ")),
                    };
                    return Err(DriverError::Input(format!(
                        "`--input {}`: input index {i} is out of range; {range}",
                        shorten(a)
                    )));
                }
                _ => {
                    let hint = nearest(name, names.iter().copied())
                        .map(|s| format!("; did you mean `{s}`?"))
                        .unwrap_or_default();
                    return Err(DriverError::Input(format!(
                        "the model has no input `{}` (inputs: {}){hint}",
                        shorten(name),
                        names.join(", ")
                    )));
                }
            },
        };
        if given[idx].is_some() {
            return Err(DriverError::Input(format!(
                "input `{}` is given twice",
                names[idx]
            )));
        }
        let bytes = crate::util::io::read_bounded(
            Path::new(file),
            crate::limits::MAX_WEIGHT_FILE_BYTES,
            "MAX_WEIGHT_FILE_BYTES",
        )
        .map_err(|e| {
            DriverError::Input(format!(
                "cannot read `{file}` for input `{}`: {}",
                names[idx],
                io_reason(&e)
            ))
        })?;
        let lit = read_npy(&bytes)
            .map_err(|e| DriverError::Input(format!("`{file}` (input `{}`): {e}", names[idx])))?;
        let shape = &c.inst(params[idx]).shape;
        let dtype = m.input_dtype(idx);
        if lit.dtype != dtype || lit.dims != shape.dims {
            return Err(DriverError::Input(format!(
                "input `{}` must be {}{}, but `{file}` holds {}{}",
                names[idx],
                dtype,
                dims_str(&shape.dims),
                lit.dtype,
                dims_str(&lit.dims)
            )));
        }
        // An int64 value the model cannot hold is the C API's BAD_ARGUMENT; say which.
        if m.api.input(idx).is_some() {
            crate::ir::api::to_ir(&lit).map_err(|e| {
                DriverError::Input(format!(
                    "`{file}` (input `{}`): {e}; the compiled library returns XLA_AOT_STATUS_BAD_ARGUMENT for it",
                    names[idx]
                ))
            })?;
        }
        given[idx] = Some(lit);
    }
    let mut notes = Vec::new();
    let inputs = given
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            g.unwrap_or_else(|| {
                let shape = &c.inst(params[i]).shape;
                let s = seed.wrapping_add(i as u64);
                let what = if shape.dtype == DType::I32 {
                    format!("uniform integers in [0, {RANDOM_INDEX_RANGE})")
                } else {
                    "standard normal values".to_string()
                };
                notes.push(format!(
                    "input `{}` not given: using seeded random {what} (seed {s}); pass --input {}=FILE.npy",
                    names[i], names[i]
                ));
                let lit = random_input(shape.dtype, &shape.dims, s);
                match m.api.input(i) {
                    Some(api) => crate::ir::api::to_api(&lit, api),
                    None => lit,
                }
            })
        })
        .collect();
    Ok((inputs, notes))
}

/// How `xla-aot run` computes the outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunMode {
    /// The reference interpreter.
    Reference,
    /// Code compiled for the host, run in-process.
    Compiled,
    /// Both; the report notes the largest differences.
    Compare,
}

/// Options of `xla-aot run` for the compiled code: the same as `compile`'s.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// Passes to skip.
    pub disabled_passes: Vec<String>,
    /// Where to write the dump files of the host compilation.
    pub dump_to: Option<PathBuf>,
    /// Input shapes, dims and frozen inputs of an imported graph.
    pub inputs: InputOverrides,
    /// Keep 3×3 convolutions direct (`CompileOptions::no_winograd`).
    pub no_winograd: bool,
    /// The weights' precision (`CompileOptions::precision`).
    pub precision: Option<crate::ir::Precision>,
}

/// `xla-aot run`: evaluates the spec; the outputs are the compiled ones unless `Reference`. The
/// compiled code is the host's, through the same compile path as `compile --target host`
/// (`crate::compile`): the same optimised module, plan and kernels, and with `dump_to` the same
/// dump files.
pub fn run(
    spec: &Path,
    inputs: &[String],
    seed: u64,
    mode: RunMode,
    req: &RunRequest,
) -> Result<RunReport, DriverError> {
    check_passes(&req.disabled_passes)?;
    let model = load_spec_with(spec, &req.inputs)?;
    let (lits, mut notes) = gather_inputs(&model.module, inputs, seed)?;
    let compiled = |notes: &mut Vec<String>| -> Result<Vec<Literal>, DriverError> {
        let opts = options(
            &req.disabled_passes,
            req.dump_to.is_some(),
            req.no_winograd,
            req.precision,
            false,
        );
        let run = match &req.dump_to {
            None => crate::compile::run(&model.module, &lits, &opts)?,
            Some(dir) => {
                // The whole host library, as `compile --target host --dump-to` writes it, then the
                // optimised module it was generated from, run in-process.
                let host = crate::target::Target::resolve("host")?;
                let artefacts = crate::compile::compile_spec_model(&model, &host, &opts)?;
                dump(&artefacts, dir)?;
                let (_, optimized) = &**artefacts.modules.as_ref().expect("kept when dumping");
                let (outputs, kernels) =
                    crate::codegen::cpu::jit::run(optimized, &artefacts.plan, &lits)?;
                crate::compile::Run { outputs, kernels }
            }
        };
        if mode == RunMode::Compare {
            notes.push(format!(
                "compiled for this machine: {} kernel(s) after the optimisation pipeline",
                run.kernels.len()
            ));
            for k in &run.kernels {
                notes.push(format!("  {}: {}", k.name, k.ops.join(", ")));
            }
        }
        Ok(run.outputs)
    };
    let mut mismatched = Vec::new();
    let values = match mode {
        RunMode::Reference => evaluate(&model.module, &lits)?,
        RunMode::Compiled => compiled(&mut notes)?,
        RunMode::Compare => {
            let reference = evaluate(&model.module, &lits)?;
            let compiled = compiled(&mut notes)?;
            let precision = req.precision.unwrap_or(model.module.precision);
            if precision != crate::ir::Precision::F32 {
                notes.push(format!(
                    "precision {precision}: compared with the f32 interpreter within {:e} of the largest magnitude (docs/precision.md)",
                    tolerance(precision).0
                ));
            }
            for ((o, r), c) in model
                .module
                .entry
                .outputs
                .iter()
                .zip(&reference)
                .zip(&compiled)
            {
                let d = compare_within(c, r, tolerance(precision));
                if d.mismatches > 0 {
                    mismatched.push(o.name.clone());
                }
                notes.push(format!("compare `{}`: {d}", o.name));
            }
            compiled
        }
    };
    let outputs = model
        .module
        .entry
        .outputs
        .iter()
        .zip(values)
        .map(|(o, value)| RunOutput {
            name: o.name.clone(),
            value,
        })
        .collect();
    Ok(RunReport {
        outputs,
        notes,
        mismatched,
    })
}

/// Writes each output as `<dir>/<name>.npy`, atomically per file.
pub fn write_outputs(dir: &Path, outputs: &[RunOutput]) -> Result<Vec<PathBuf>, DriverError> {
    let werr = |p: &Path, e: std::io::Error| DriverError::Write {
        path: p.display().to_string(),
        reason: io_reason(&e),
    };
    if dir.exists() && !dir.is_dir() {
        return Err(DriverError::Write {
            path: dir.display().to_string(),
            reason: "it is a file, not a directory (--output-dir names the directory for the outputs' .npy files)".into(),
        });
    }
    std::fs::create_dir_all(dir).map_err(|e| werr(dir, e))?;
    let mut written = Vec::new();
    for o in outputs {
        // A name too long for a file name (over 255 bytes) is cut and hashed.
        let stem = crate::emit::dump::file_stem(&o.name);
        let path = dir.join(format!("{stem}.npy"));
        let tmp = dir.join(format!(".{stem}.npy.tmp{}", std::process::id()));
        let result =
            std::fs::write(&tmp, write_npy(&o.value)).and_then(|_| std::fs::rename(&tmp, &path));
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(werr(&path, e));
        }
        written.push(path);
    }
    Ok(written)
}

/// `name  f32[1,10]  min … max … mean …`
pub fn summary(o: &RunOutput) -> String {
    let v = o.value.to_f64_vec();
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    format!(
        "{:<12} {}{:<16} min {:>12.6}  max {:>12.6}  mean {:>12.6}",
        o.name,
        o.value.dtype,
        dims_str(&o.value.dims),
        min,
        max,
        mean
    )
}
