//! `xla_aot::Build`: compiling model specs from a Cargo build script, in the style of the `cc` crate.
//!
//! Contract: [`Build::compile`] writes `lib<name>.a`, `<name>.h`, `<name>.json` and the Rust
//! bindings `<name>.rs` into `$OUT_DIR/xla-aot/<name>/`, and prints the `cargo:` lines that link the
//! library and re-run the build script when the spec or a weight file changes. Outputs are cached
//! by a content hash of the spec, the weights, the target and the compiler (its version, and the
//! build script binary it is linked into): an unchanged model is not compiled again. A bad spec prints its positioned message and fails the build
//! without a panic backtrace. `XLA_AOT_DUMP_TO=DIR` dumps every stage under `DIR/<name>/`.
//!
//! Default target (from Cargo's `TARGET` and `CARGO_CFG_TARGET_FEATURE`):
//!
//! | Cargo target | target features | xla-aot target |
//! |---|---|---|
//! | x86_64-* | avx512f | `x86_64-avx512` |
//! | x86_64-* | avx2 + fma | `x86_64-avx2` |
//! | x86_64-* | (neither) | `x86_64` (SSE2 baseline) |
//! | aarch64-* | any | `aarch64-neon` |
//!
//! [`Build::multi_isa`] makes the default `x86_64-multi` instead (one library with AVX-512, AVX2
//! and SSE2 code, chosen on the first call by the CPU it runs on), or `aarch64-multi` on aarch64
//! (docs/codegen.md). An explicit [`Build::target`] wins over both.

use crate::compile::CompileOptions;
use crate::emit::write_artefacts;
use crate::front::inputs::{self, InputOverrides};
use crate::front::load_spec_with;
use crate::target::Target;
use crate::util::io::io_reason;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a build failed.
#[derive(Debug, Error)]
pub enum BuildError {
    #[error("{0}")]
    Spec(#[from] crate::front::SpecError),
    #[error("error: {0}")]
    Target(#[from] crate::target::TargetError),
    #[error("error: {0}")]
    Compile(#[from] crate::compile::CompileError),
    #[error("error: {0}")]
    Other(String),
}

/// What a build produced.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// Directory holding the library, header, manifest and bindings.
    pub dir: PathBuf,
    /// Whether the model was compiled now (false: the cached outputs were current).
    pub compiled: bool,
}

/// A model compilation configured from a build script.
#[derive(Debug, Clone)]
pub struct Build {
    spec: PathBuf,
    target: Option<String>,
    dump_to: Option<PathBuf>,
    out_dir: Option<PathBuf>,
    cargo_metadata: bool,
    inputs: InputOverrides,
    no_winograd: bool,
    multi_isa: bool,
    precision: Option<crate::ir::Precision>,
    /// Post-training quantization: the calibration folder, the method, per-channel weights.
    quantize: Option<(PathBuf, crate::quant::Method, bool)>,
}

/// FNV-1a, 64-bit: a dependency-free content hash for the cache key. A collision would skip a
/// needed recompilation; for a changed input that happens with probability about 2⁻⁶⁴.
fn fnv1a(state: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *state ^= b as u64;
        *state = state.wrapping_mul(0x0100_0000_01b3);
    }
}

impl Build {
    /// A build of the spec at `spec` (relative to the crate root when run by Cargo).
    pub fn new(spec: impl AsRef<Path>) -> Build {
        Build {
            spec: spec.as_ref().to_path_buf(),
            target: None,
            dump_to: None,
            out_dir: None,
            cargo_metadata: true,
            inputs: InputOverrides::default(),
            no_winograd: false,
            multi_isa: false,
            precision: None,
            quantize: None,
        }
    }

    /// Fixes the shape of an imported graph's input (`--input-shape NAME=D0,D1,...`); `name` may
    /// be the input's position.
    pub fn input_shape(&mut self, name: &str, dims: &[usize]) -> &mut Build {
        self.inputs
            .shapes
            .push((inputs::InputRef::parse(name), dims.to_vec()));
        self
    }

    /// Fixes a named symbolic dim everywhere it appears (`--dim SYMBOL=N`).
    pub fn dim(&mut self, symbol: &str, n: usize) -> &mut Build {
        self.inputs.dims.push((symbol.to_string(), n));
        self
    }

    /// Turns an input into a compile-time constant (`--freeze NAME=VALUE,...`): one value fills
    /// the input, or one per element in row-major order.
    pub fn freeze(&mut self, name: &str, values: &[f64]) -> &mut Build {
        self.inputs.freeze.push((
            inputs::InputRef::parse(name),
            inputs::Frozen::Values(values.to_vec()),
        ));
        self
    }

    /// Turns an input into the compile-time constant stored in a `.npy` file (`--freeze
    /// NAME=FILE.npy`; a build input: the build re-runs when it changes).
    pub fn freeze_npy(&mut self, name: &str, file: impl AsRef<Path>) -> &mut Build {
        self.inputs.freeze.push((
            inputs::InputRef::parse(name),
            inputs::Frozen::File(file.as_ref().to_path_buf()),
        ));
        self
    }

    /// Compiles for this xla-aot target (a name or a target file) instead of the Cargo target's.
    pub fn target(&mut self, target: &str) -> &mut Build {
        self.target = Some(target.to_string());
        self
    }

    /// For an x86-64 Cargo target, compiles for `x86_64-multi` (AVX-512, AVX2 and SSE2 code in one
    /// library, the entry points choosing on their first call) instead of the one ISA the Cargo
    /// target features name: for a binary shipped to machines whose CPU is unknown at build time.
    /// For aarch64, `aarch64-multi` (dotprod and baseline NEON; call `<name>::set_hwcap` with the
    /// auxiliary vector's `AT_HWCAP` first). Other families are refused. [`Build::target`]
    /// overrides this.
    pub fn multi_isa(&mut self, on: bool) -> &mut Build {
        self.multi_isa = on;
        self
    }

    /// Keeps stride-1 3×3 convolutions direct instead of Winograd `F(m,3)` (the CLI's
    /// `--no-winograd`; results then match the reference interpreter to rounding).
    pub fn no_winograd(&mut self, on: bool) -> &mut Build {
        self.no_winograd = on;
        self
    }

    /// Quantizes the model after training (`xla-aot quantize`, docs/quantization.md): calibrates
    /// it on the `.npy` samples of folder `calibration` with the reference interpreter, choosing
    /// activation ranges with `method`, and stores int8 weights (one scale per output channel
    /// with `per_channel`, else per tensor). The samples are part of the cache key.
    pub fn quantize(
        &mut self,
        calibration: impl AsRef<Path>,
        method: crate::quant::Method,
        per_channel: bool,
    ) -> &mut Build {
        self.quantize = Some((calibration.as_ref().to_path_buf(), method, per_channel));
        self
    }

    /// Stores the weights of dots and convolutions in `precision` (the CLI's `--precision`;
    /// `ir::Precision::Bf16Weights` halves their bytes, `ir::Precision::Bf16` also multiplies in
    /// bfloat16, `ir::Precision::F16` in IEEE half, see docs/precision.md), overriding the
    /// spec's `precision:`.
    pub fn precision(&mut self, precision: crate::ir::Precision) -> &mut Build {
        self.precision = Some(precision);
        self
    }

    /// Writes the `--dump-to` artefacts into `dir`.
    pub fn dump_to(&mut self, dir: impl AsRef<Path>) -> &mut Build {
        self.dump_to = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Writes outputs under `dir` instead of `$OUT_DIR`.
    pub fn out_dir(&mut self, dir: impl AsRef<Path>) -> &mut Build {
        self.out_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Whether to print `cargo:` lines (on by default).
    pub fn cargo_metadata(&mut self, on: bool) -> &mut Build {
        self.cargo_metadata = on;
        self
    }

    /// Compiles the model as `name`; on an error, prints the message and exits the build script
    /// with status 1 (Cargo shows the message; there is no panic backtrace).
    pub fn compile(&self, name: &str) -> Compiled {
        match self.try_compile(name) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
    }

    /// Compiles the model as `name`, returning errors.
    pub fn try_compile(&self, name: &str) -> Result<Compiled, BuildError> {
        if !crate::ir::verify::is_c_identifier(name) {
            return Err(BuildError::Other(format!(
                "model name `{name}` is not a C identifier"
            )));
        }
        let target = match &self.target {
            Some(t) => Target::resolve(t)?,
            None => {
                let triple = std::env::var("TARGET").map_err(|_| {
                    BuildError::Other(
                        "TARGET is not set: outside a build script, call Build::target(..)".into(),
                    )
                })?;
                let features = std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
                let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
                if self.multi_isa {
                    Target::for_cargo_multi_isa(&triple)?
                } else {
                    Target::for_cargo_cpu(&triple, &features, target_cpu(&flags).as_deref())?
                }
            }
        };
        let base = match &self.out_dir {
            Some(d) => d.clone(),
            None => PathBuf::from(std::env::var("OUT_DIR").map_err(|_| {
                BuildError::Other(
                    "OUT_DIR is not set: outside a build script, call Build::out_dir(..)".into(),
                )
            })?),
        };
        let dir = base.join("xla-aot").join(name);
        let mut model = load_spec_with(&self.spec, &self.inputs)?;
        model.module.name = name.to_string();

        // The files this build depends on.
        let mut inputs = vec![self.spec.clone()];
        inputs.extend(model.graph_path.iter().cloned());
        for (_, f) in &self.inputs.freeze {
            if let inputs::Frozen::File(p) = f {
                inputs.push(p.clone());
            }
        }
        if let Some(p) = &model.params_path {
            if p.is_dir() {
                let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                    .map_err(|e| {
                        BuildError::Other(format!("cannot list {}: {}", p.display(), io_reason(&e)))
                    })?
                    .flatten()
                    .map(|e| e.path())
                    .collect();
                files.sort();
                inputs.push(p.clone());
                inputs.extend(files);
            } else {
                inputs.push(p.clone());
            }
        }
        if let Some((cal, _, _)) = &self.quantize {
            inputs.extend(calibration_files(cal)?);
        }
        if self.cargo_metadata {
            for f in &inputs {
                println!("cargo:rerun-if-changed={}", f.display());
            }
            println!("cargo:rerun-if-env-changed=XLA_AOT_DUMP_TO");
            println!("cargo:rerun-if-env-changed=XLA_AOT_VERBOSE");
            println!("cargo:rustc-link-search=native={}", dir.display());
            println!("cargo:rustc-link-lib=static={name}");
            if target.cuda_sm.is_some() {
                // The CUDA launcher loads the driver with dlopen.
                println!("cargo:rustc-link-lib=dylib=dl");
            }
        }

        // Cache key: compiler version and build, target, model name, and every input file's bytes.
        let mut key = 0xcbf2_9ce4_8422_2325u64;
        fnv1a(&mut key, env!("CARGO_PKG_VERSION").as_bytes());
        // The build script embedding this compiler is relinked whenever the compiler changes
        // (an unreleased version, a git dependency): its size and time tell builds apart where
        // the version does not.
        if let Some(m) = std::env::current_exe().ok().and_then(|e| e.metadata().ok()) {
            fnv1a(
                &mut key,
                format!("{} {:?}", m.len(), m.modified().ok()).as_bytes(),
            );
        }
        fnv1a(&mut key, format!("{target:?}").as_bytes());
        fnv1a(&mut key, name.as_bytes());
        fnv1a(&mut key, format!("{:?}", self.inputs).as_bytes());
        fnv1a(&mut key, &[self.no_winograd as u8]);
        fnv1a(&mut key, format!("{:?}", self.precision).as_bytes());
        fnv1a(&mut key, format!("{:?}", self.quantize).as_bytes());
        for f in inputs.iter().filter(|f| f.is_file()) {
            fnv1a(&mut key, f.to_string_lossy().as_bytes());
            let bytes = crate::util::io::read_bounded(
                f,
                crate::limits::MAX_WEIGHT_FILE_BYTES,
                "MAX_WEIGHT_FILE_BYTES",
            )
            .map_err(|e| {
                BuildError::Other(format!("cannot read {}: {}", f.display(), io_reason(&e)))
            })?;
            fnv1a(&mut key, &(bytes.len() as u64).to_le_bytes());
            fnv1a(&mut key, &bytes);
        }
        let key = format!("{key:016x}\n");
        let key_file = dir.join("cache.key");
        let dump_to = self
            .dump_to
            .clone()
            .or_else(|| std::env::var_os("XLA_AOT_DUMP_TO").map(|d| PathBuf::from(d).join(name)));
        let cached = dump_to.is_none()
            && std::fs::read_to_string(&key_file).is_ok_and(|k| k == key)
            && [
                format!("lib{name}.a"),
                format!("{name}.h"),
                format!("{name}.rs"),
            ]
            .iter()
            .all(|f| dir.join(f).is_file());
        if cached {
            return Ok(Compiled {
                dir,
                compiled: false,
            });
        }
        let opts = CompileOptions {
            codegen: crate::codegen::Options {
                assembly: dump_to.is_some(),
                ir: dump_to.is_some(),
                grid: false,
                weights_blob: false,
            },
            keep_stages: dump_to.is_some(),
            // Build scripts stay quiet unless asked (Cargo shows their stderr only on failure).
            progress: std::env::var("XLA_AOT_VERBOSE").is_ok_and(|v| v == "1"),
            no_winograd: self.no_winograd,
            precision: self.precision,
            ..CompileOptions::default()
        };
        if let Some((cal, method, per_channel)) = &self.quantize {
            let qerr = |e: crate::quant::QuantError| BuildError::Other(format!("error: {e}"));
            let samples = crate::quant::samples::read(cal, &model.module).map_err(qerr)?;
            let c = crate::quant::calibrate(
                &model.module,
                &samples,
                *method,
                *per_channel,
                &mut crate::quant::interpreter,
            )
            .map_err(qerr)?;
            model.module = crate::quant::apply(&model.module, &c.quantization).map_err(qerr)?;
            for (_, b) in &mut model.buckets {
                *b = crate::quant::apply(b, &c.quantization).map_err(qerr)?;
            }
        }
        let artefacts = crate::compile::compile_spec_model(&model, &target, &opts)?;
        let werr = |e: std::io::Error| {
            BuildError::Other(format!("cannot write {}: {}", dir.display(), io_reason(&e)))
        };
        let _ = std::fs::remove_file(&key_file);
        write_artefacts(&artefacts, &dir).map_err(werr)?;
        let bindings = crate::emit::bindings::render(
            &model.module,
            &artefacts.plan,
            artefacts.ptx.as_ref(),
            artefacts.batch.as_ref(),
            (!target.variants.is_empty()).then_some(target.arch),
        );
        std::fs::write(dir.join(format!("{name}.rs")), bindings).map_err(werr)?;
        if let Some(d) = &dump_to {
            crate::emit::dump::write_dump(&artefacts, d).map_err(werr)?;
        }
        std::fs::write(&key_file, key).map_err(werr)?;
        if let Ok(log) = std::env::var("XLA_AOT_COMPILE_LOG") {
            use std::io::Write as _;
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
            {
                let _ = writeln!(f, "{name} {}", target.name);
            }
        }
        Ok(Compiled {
            dir,
            compiled: true,
        })
    }
}

/// The `-C target-cpu=..` of `CARGO_ENCODED_RUSTFLAGS` (flags separated by 0x1f), if any.
fn target_cpu(encoded: &str) -> Option<String> {
    let flags: Vec<&str> = encoded.split('\x1f').collect();
    let mut cpu = None;
    for (i, f) in flags.iter().enumerate() {
        let value = match f.strip_prefix("-C") {
            Some("") => flags.get(i + 1).copied().unwrap_or(""),
            Some(v) => v,
            None => continue,
        };
        if let Some(c) = value.strip_prefix("target-cpu=") {
            cpu = Some(c.to_string());
        }
    }
    cpu
}

/// The files of a calibration folder (and of its sample subfolders), sorted: what a quantized
/// build depends on.
fn calibration_files(dir: &Path) -> Result<Vec<PathBuf>, BuildError> {
    let list = |d: &Path| -> Result<Vec<PathBuf>, BuildError> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d)
            .map_err(|e| {
                BuildError::Other(format!(
                    "error: calibration folder {}: {}",
                    d.display(),
                    io_reason(&e)
                ))
            })?
            .flatten()
            .map(|e| e.path())
            .collect();
        v.sort();
        Ok(v)
    };
    let mut out = vec![dir.to_path_buf()];
    for p in list(dir)? {
        if p.is_dir() {
            out.push(p.clone());
            out.extend(list(&p)?);
        } else {
            out.push(p);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn target_cpu_from_encoded_rustflags() {
        assert_eq!(
            super::target_cpu("-C\x1ftarget-cpu=cortex-m55\x1f-Copt-level=s").as_deref(),
            Some("cortex-m55")
        );
        assert_eq!(
            super::target_cpu("-Ctarget-cpu=cortex-m7").as_deref(),
            Some("cortex-m7")
        );
        assert_eq!(super::target_cpu(""), None);
    }
}
