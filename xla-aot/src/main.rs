//! The `xla-aot` command line: argument parsing only; the work is in `xla_aot::driver`.
//!
//! Exit codes (docs/architecture.md): 0 success, 1 user error (message on stderr, no partial outputs),
//! 2 usage error.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use xla_aot::driver;
use xla_aot::front::inputs;

#[derive(Parser)]
#[command(
    name = "xla-aot",
    version,
    about = "Ahead-of-time compiler for neural-network model specs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Stage {
    /// The HLO straight from the spec, before any pass.
    Parsed,
    /// After the optimisation pipeline.
    Optimized,
}

/// What the build fixes about an imported graph's inputs (`front/inputs.rs`).
#[derive(Args, Clone, Default)]
struct InputArgs {
    /// Fix an input's shape, NAME=D0,D1,... (repeatable; NAME may be the input's position).
    #[arg(long = "input-shape", value_name = "NAME=D0,D1,...", value_parser = inputs::parse_input_shape)]
    input_shapes: Vec<(inputs::InputRef, Vec<usize>)>,
    /// Fix a named symbolic dim everywhere it appears, SYMBOL=N (repeatable).
    #[arg(long = "dim", value_name = "SYMBOL=N", value_parser = inputs::parse_dim)]
    dims: Vec<(String, usize)>,
    /// Turn an input into a compile-time constant, NAME=VALUE[,VALUE...] or NAME=FILE.npy
    /// (repeatable): shape logic and conditions over it fold away.
    #[arg(long = "freeze", value_name = "NAME=VALUE|FILE.npy", value_parser = inputs::parse_freeze)]
    freeze: Vec<(inputs::InputRef, inputs::Frozen)>,
}

impl InputArgs {
    fn overrides(self) -> inputs::InputOverrides {
        inputs::InputOverrides {
            shapes: self.input_shapes,
            dims: self.dims,
            freeze: self.freeze,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Print the HLO text of a model spec.
    Inspect {
        /// The model: a YAML spec, an ONNX model (`.onnx`), a TFLite model (`.tflite`) or XLA HLO
        /// text (`.hlo.txt`).
        spec: PathBuf,
        /// Pipeline stage to print.
        #[arg(long, value_enum, default_value = "parsed")]
        stage: Stage,
        /// Print every constant in full (weights included) instead of `{...}`.
        #[arg(long)]
        print_large_constants: bool,
        #[command(flatten)]
        fixed: InputArgs,
    },
    /// Compile a model spec into a static library, header and manifest.
    Compile {
        /// The model: a YAML spec, an ONNX model (`.onnx`), a TFLite model (`.tflite`) or XLA HLO
        /// text (`.hlo.txt`).
        spec: PathBuf,
        /// A target name (see `xla-aot targets`) or a path to a target file.
        #[arg(long)]
        target: String,
        /// Directory for `<name>.o`, `lib<name>.a`, `<name>.h` and `<name>.json`.
        #[arg(long)]
        out_dir: PathBuf,
        /// Write every stage (HLO after each pass, buffer plan, LLVM IR, assembly) into DIR.
        #[arg(long, value_name = "DIR")]
        dump_to: Option<PathBuf>,
        /// Print the time each optimisation pass took.
        #[arg(long)]
        time_passes: bool,
        /// Skip an optimisation pass (repeatable); `xla-aot passes` lists them.
        #[arg(long = "disable-pass", value_name = "NAME")]
        disabled_passes: Vec<String>,
        /// Keep 3×3 convolutions direct instead of Winograd `F(m,3)` (their results then match
        /// the reference interpreter to rounding; Winograd's error is below 1e-5 of the largest
        /// output, see docs/performance.md).
        #[arg(long)]
        no_winograd: bool,
        /// How the weights of dots and convolutions are stored: f32 (default), f16-weights or
        /// bf16-weights (half the bytes, widened in registers, f32 arithmetic), or bf16 (both
        /// operands of dots and convolutions rounded to bfloat16, f32 accumulation; vdpbf16ps on
        /// AVX-512 BF16), or f16 (operands rounded to IEEE half; f16 sums in blocks of 16 k with
        /// fmla .8h on aarch64 +fullfp16), or int8-weights / int8-weights-per-tensor (symmetric
        /// int8 per output channel / per tensor, 1 byte each where packed; docs/quantization.md);
        /// see docs/precision.md. Overrides a spec's `precision:`.
        #[arg(long, value_name = "P", value_parser = xla_aot::ir::Precision::parse)]
        precision: Option<xla_aot::ir::Precision>,
        /// Also make the entry points refuse a call whose arena another call is using (two threads
        /// sharing one arena, a hook re-entering the model) with XLA_AOT_STATUS_ARENA_IN_USE: one
        /// more 64-byte arena slice and two atomic operations per call.
        #[arg(long)]
        checks: bool,
        /// ELF section of the weights (default `.rodata.xla_aot.<name>` on microcontroller
        /// targets, `.rodata` elsewhere), for a linker script that places them (docs/microcontrollers.md).
        #[arg(long, value_name = "SECTION")]
        weights_section: Option<String>,
        /// ELF section of the code (default `.text`), e.g. `.itcm_text` for a linker script that
        /// copies it to tightly coupled memory.
        #[arg(long, value_name = "SECTION")]
        code_section: Option<String>,
        /// `size` or `speed` first (default: size on microcontroller targets, speed elsewhere).
        #[arg(long, value_parser = ["size", "speed"])]
        optimize: Option<String>,
        /// `external`: leave every weight out of the library and write `<name>.weights` (with a
        /// checksum) for the caller to pass to every `<name>_run` as its first argument,
        /// `weights` (docs/microcontrollers.md).
        #[arg(long, value_parser = ["embedded", "external"], default_value = "embedded")]
        weights: String,
        #[command(flatten)]
        fixed: InputArgs,
    },
    /// Compile a model for this machine, run it in-process and print where the time goes:
    /// per kernel (manifest order) µs, share, GFLOP/s, GB/s, compute- or memory-bound.
    Profile {
        /// The model: a YAML spec, an ONNX model (`.onnx`), a TFLite model (`.tflite`) or XLA HLO
        /// text (`.hlo.txt`).
        spec: PathBuf,
        /// Only `host`: the code runs in this process.
        #[arg(long, default_value = "host")]
        target: String,
        /// Timed runs (medians are printed).
        #[arg(long, default_value_t = 100)]
        runs: usize,
        /// Print each kernel's fastest run instead of its median (on a machine busy with other
        /// work).
        #[arg(long)]
        min: bool,
        #[command(flatten)]
        fixed: InputArgs,
        /// An input as NAME=FILE.npy (or INDEX=FILE.npy); inputs not given are seeded random.
        #[arg(long = "input", value_name = "NAME=FILE")]
        inputs: Vec<String>,
        /// Seed of the random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Skip an optimisation pass (repeatable), as for `compile`.
        #[arg(long = "disable-pass", value_name = "NAME")]
        disabled_passes: Vec<String>,
        /// Keep 3×3 convolutions direct instead of Winograd `F(m,3)` (their results then match
        /// the reference interpreter to rounding; Winograd's error is below 1e-5 of the largest
        /// output, see docs/performance.md).
        #[arg(long)]
        no_winograd: bool,
        /// How the weights of dots and convolutions are stored: f32 (default), f16-weights or
        /// bf16-weights (half the bytes, widened in registers, f32 arithmetic), or bf16 (both
        /// operands of dots and convolutions rounded to bfloat16, f32 accumulation; vdpbf16ps on
        /// AVX-512 BF16), or f16 (operands rounded to IEEE half; f16 sums in blocks of 16 k with
        /// fmla .8h on aarch64 +fullfp16), or int8-weights / int8-weights-per-tensor (symmetric
        /// int8 per output channel / per tensor, 1 byte each where packed; docs/quantization.md);
        /// see docs/precision.md. Overrides a spec's `precision:`.
        #[arg(long, value_name = "P", value_parser = xla_aot::ir::Precision::parse)]
        precision: Option<xla_aot::ir::Precision>,
        /// Run on N threads, lent to the library through its parallel-for hook.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
        threads: u32,
        /// Also write the last profiled run as an SVG timeline (a bar per kernel call, a row
        /// per thread with the tasks of split kernels; µs in tooltips).
        #[arg(long = "dump-to", value_name = "FILE.svg")]
        dump_to: Option<PathBuf>,
    },
    /// Post-training quantization: calibrate MODEL on a folder of .npy samples with the reference
    /// interpreter, and write a spec with a `quantize:` section (activation ranges, int8
    /// weights) that `compile` builds; prints its accuracy against the float model on those
    /// samples (docs/quantization.md).
    Quantize {
        /// The model: a YAML spec, an ONNX model (`.onnx`), a TFLite model (`.tflite`) or XLA HLO
        /// text (`.hlo.txt`).
        spec: PathBuf,
        /// The calibration samples: one subfolder per sample holding `<input>.npy` for every
        /// input, or (one input) one .npy file per sample.
        #[arg(long, value_name = "DIR")]
        calibration: PathBuf,
        /// One weight scale per output channel (default: one per tensor).
        #[arg(long)]
        per_channel: bool,
        /// How activation ranges are chosen: the extremes seen, the 99.99% percentile range, or
        /// the KL-divergence (entropy) threshold.
        #[arg(long, default_value = "minmax", value_parser = xla_aot::quant::Method::parse)]
        method: xla_aot::quant::Method,
        /// The quantized spec to write (YAML).
        #[arg(short = 'o', long = "out", value_name = "OUT.yaml")]
        out: PathBuf,
        /// Run the samples with code compiled for this machine (recompiled per sample) instead
        /// of the reference interpreter: much faster on large models.
        #[arg(long)]
        compiled: bool,
        #[command(flatten)]
        fixed: InputArgs,
    },
    /// List the built-in targets.
    Targets,
    /// List the optimisation passes, in pipeline order (names for --disable-pass).
    Passes,
    /// Run a model on this machine (compiled for it, or with --reference the interpreter) and
    /// write its outputs as .npy files.
    Run {
        /// The model: a YAML spec, an ONNX model (`.onnx`), a TFLite model (`.tflite`) or XLA HLO
        /// text (`.hlo.txt`).
        spec: PathBuf,
        /// Use the reference interpreter instead of code compiled for this machine.
        #[arg(long, conflicts_with = "compare")]
        reference: bool,
        /// Run both and print the largest difference per output (the outputs written are the
        /// compiled ones); exits 1 when any element mismatches (NaN on one side only, or beyond
        /// 1e-3 of the output's largest magnitude + 1e-3 relative; with --precision, that
        /// precision's bound against the f32 interpreter, see docs/precision.md).
        #[arg(long)]
        compare: bool,
        /// An input as NAME=FILE.npy (or INDEX=FILE.npy); inputs not given are seeded random.
        #[arg(long = "input", value_name = "NAME=FILE")]
        inputs: Vec<String>,
        /// Directory for `<output>.npy` files.
        #[arg(long, default_value = ".")]
        output_dir: PathBuf,
        /// Seed of the random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Write every stage of the host compilation into DIR (the same files as
        /// `compile --target host --dump-to DIR`).
        #[arg(long, value_name = "DIR", conflicts_with = "reference")]
        dump_to: Option<PathBuf>,
        /// Skip an optimisation pass (repeatable), as for `compile`.
        #[arg(
            long = "disable-pass",
            value_name = "NAME",
            conflicts_with = "reference"
        )]
        disabled_passes: Vec<String>,
        /// Keep 3×3 convolutions direct instead of Winograd `F(m,3)` (their results then match
        /// the reference interpreter to rounding; Winograd's error is below 1e-5 of the largest
        /// output, see docs/performance.md).
        #[arg(long)]
        no_winograd: bool,
        /// How the weights of dots and convolutions are stored: f32 (default), f16-weights or
        /// bf16-weights (half the bytes, widened in registers, f32 arithmetic), or bf16 (both
        /// operands of dots and convolutions rounded to bfloat16, f32 accumulation; vdpbf16ps on
        /// AVX-512 BF16), or f16 (operands rounded to IEEE half; f16 sums in blocks of 16 k with
        /// fmla .8h on aarch64 +fullfp16), or int8-weights / int8-weights-per-tensor (symmetric
        /// int8 per output channel / per tensor, 1 byte each where packed; docs/quantization.md);
        /// see docs/precision.md. Overrides a spec's `precision:`.
        #[arg(long, value_name = "P", value_parser = xla_aot::ir::Precision::parse)]
        precision: Option<xla_aot::ir::Precision>,
        #[command(flatten)]
        fixed: InputArgs,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli.command {
        Command::Compile {
            spec,
            target,
            out_dir,
            dump_to,
            time_passes,
            disabled_passes,
            no_winograd,
            precision,
            checks,
            weights_section,
            code_section,
            optimize,
            weights,
            fixed,
        } => match driver::compile(
            &spec,
            &target,
            &out_dir,
            &driver::CompileRequest {
                disabled_passes,
                dump_to,
                time_passes,
                inputs: fixed.overrides(),
                no_winograd,
                precision,
                checks,
                weights_section,
                code_section,
                optimize: optimize
                    .as_deref()
                    .and_then(xla_aot::target::Optimize::parse),
                weights_external: weights == "external",
            },
        ) {
            Ok(files) => {
                for f in files {
                    println!("wrote {}", f.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        Command::Profile {
            spec,
            target,
            runs,
            min,
            fixed,
            inputs,
            seed,
            disabled_passes,
            no_winograd,
            precision,
            threads,
            dump_to,
        } => {
            if target != "host" {
                eprintln!(
                    "error: profile runs the model in this process: --target must be `host`, not `{target}`"
                );
                return ExitCode::from(2);
            }
            let req = xla_aot::profile::ProfileRequest {
                inputs,
                seed,
                runs,
                disabled_passes,
                no_winograd,
                precision,
                by_min: min,
                fixed: fixed.overrides(),
                threads: threads as usize,
            };
            match xla_aot::profile::profile(&spec, &req) {
                Ok(r) => {
                    print!("{}", r.render());
                    if let Some(path) = dump_to {
                        if let Err(e) = std::fs::write(&path, xla_aot::timeline::svg(&r)) {
                            eprintln!(
                                "error: cannot write the timeline to {}: {e} (check that the \
                                 folder exists and is writable)",
                                path.display()
                            );
                            return ExitCode::FAILURE;
                        }
                        println!("wrote {}", path.display());
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        Command::Quantize {
            spec,
            calibration,
            per_channel,
            method,
            out,
            compiled,
            fixed,
        } => match driver::quantize(
            &spec,
            &out,
            &driver::QuantizeRequest {
                calibration,
                method,
                per_channel,
                inputs: fixed.overrides(),
                compiled,
            },
        ) {
            Ok(r) => {
                println!(
                    "quantized {} values on {} samples ({}); against the float model: {}",
                    r.sites,
                    r.samples,
                    method.name(),
                    r.accuracy
                );
                println!("wrote {}", r.written.display());
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        Command::Passes => {
            for p in xla_aot::passes::PASS_NAMES {
                println!("{p}");
            }
            ExitCode::SUCCESS
        }
        Command::Targets => {
            for t in xla_aot::target::Target::builtins() {
                println!(
                    "{:<15} {:<27} {:<12} {}",
                    t.name, t.triple, t.cpu, t.description
                );
            }
            ExitCode::SUCCESS
        }
        Command::Inspect {
            spec,
            stage,
            print_large_constants,
            fixed,
        } => match driver::inspect(
            &spec,
            match stage {
                Stage::Parsed => driver::Stage::Parsed,
                Stage::Optimized => driver::Stage::Optimized,
            },
            print_large_constants,
            &fixed.overrides(),
        ) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        Command::Run {
            spec,
            reference,
            compare,
            inputs,
            output_dir,
            seed,
            dump_to,
            disabled_passes,
            no_winograd,
            precision,
            fixed,
        } => {
            let mode = if reference {
                driver::RunMode::Reference
            } else if compare {
                driver::RunMode::Compare
            } else {
                driver::RunMode::Compiled
            };
            let report = match driver::run(
                &spec,
                &inputs,
                seed,
                mode,
                &driver::RunRequest {
                    disabled_passes,
                    no_winograd,
                    precision,
                    dump_to,
                    inputs: fixed.overrides(),
                },
            ) {
                Ok(r) => r,
                Err(e) => return fail(&e),
            };
            for n in &report.notes {
                eprintln!("note: {n}");
            }
            if let Err(e) = driver::write_outputs(&output_dir, &report.outputs) {
                return fail(&e);
            }
            for o in &report.outputs {
                println!("{}", driver::summary(o));
            }
            println!(
                "wrote {} output(s) to {}",
                report.outputs.len(),
                output_dir.display()
            );
            if !report.mismatched.is_empty() {
                eprintln!(
                    "error: the compiled code and the reference interpreter disagree on {} output(s): {}",
                    report.mismatched.len(),
                    report.mismatched.join(", ")
                );
                eprintln!(
                    "  = note: an element mismatches when NaN on one side only, or further than {:e} of the output's largest magnitude + {:e} relative",
                    driver::COMPARE_ATOL,
                    driver::COMPARE_RTOL
                );
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
    }
}

fn fail(e: &driver::DriverError) -> ExitCode {
    let text = e.to_string();
    eprint!("{text}");
    if !text.ends_with('\n') {
        eprintln!();
    }
    ExitCode::from(1)
}
