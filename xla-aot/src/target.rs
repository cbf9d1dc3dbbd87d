//! Target descriptions: which CPU the generated code is for.
//!
//! Contract: a [`Target`] names an LLVM triple, CPU and feature string and the preferred vector
//! width. The built-in targets are the files of `targets/` (embedded at build time, so an installed
//! binary needs no data files); `--target` also takes a path to such a YAML file. The `host` target
//! is resolved by asking LLVM about the running CPU, capped by `XLA_AOT_HOST_ISA` where that is
//! set ([`host_isa`]).

pub mod host_isa;
pub mod isa;
mod llvm_names;

use inkwell::targets::TargetMachine;
use serde::Deserialize;
use std::path::Path;
use thiserror::Error;

/// Instruction-set family of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
    /// NVIDIA GPUs (`nvptx64-nvidia-cuda`): the device side of a CUDA target (`codegen/gpu/ptx.rs`).
    Nvptx64,
    /// 32-bit Arm M-profile microcontrollers (`thumbv7em-none-eabihf`, `thumbv8.1m.main-none-eabihf`):
    /// Thumb-2 code, EABI hard-float, bare metal (`docs/microcontrollers.md`).
    Arm,
}

impl Arch {
    /// Whether code for this family is bare metal (no OS, 32-bit pointers, static relocations,
    /// weights placed in a named flash section).
    pub fn is_microcontroller(self) -> bool {
        self == Arch::Arm
    }
}

/// A resolved target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Name (`x86_64-avx2`), as listed by `xla-aot targets`.
    pub name: String,
    /// One-line description.
    pub description: String,
    /// LLVM target triple.
    pub triple: String,
    /// LLVM CPU name.
    pub cpu: String,
    /// LLVM feature string (`+neon`).
    pub features: String,
    /// Preferred vector width in bits.
    pub vector_bits: u32,
    /// Family, from the triple.
    pub arch: Arch,
    /// Architectural vector registers (16 for x86-64 below AVX-512, 32 for AVX-512 and NEON):
    /// the GEMM micro-kernel keeps its accumulator tile in them.
    pub vector_registers: u32,
    /// L1 data cache per core in bytes: a K-block of one packed weight panel fits in half of it.
    pub l1d_bytes: u64,
    /// L2 cache per core in bytes: a block of GEMM rows times one K-block fits in half of it.
    pub l2_bytes: u64,
    /// For a CUDA target: the GPU's SM (`sm_87`). The library then also carries PTX kernels and
    /// the CUDA launcher (`codegen/gpu/ptx.rs`, `codegen/gpu/cuda_host.rs`); the fields above describe
    /// the host CPU.
    pub cuda_sm: Option<String>,
    /// Whether code size or speed comes first (`--optimize`; size on microcontroller targets).
    pub optimize: Optimize,
    /// For a multi-ISA target (`x86_64-multi`): the built-in single-ISA targets compiled into the
    /// one library, best first; the entry points run the first one the CPU can (`isa.rs`). The
    /// fields above then describe the dispatcher's own code (baseline). Empty otherwise.
    pub variants: Vec<Target>,
}

/// What the code generator favours when the two disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Optimize {
    /// Fastest code: unrolled tile variants, every loop specialised (the default on x86-64 and
    /// aarch64).
    Speed,
    /// Smallest code: LLVM's `optsize` on every function, and one loop where the fast path
    /// unrolls (the channel groups of a depthwise convolution); the default on microcontrollers.
    Size,
}

impl Optimize {
    /// `size` or `speed` (the `--optimize` values).
    pub fn parse(s: &str) -> Option<Optimize> {
        match s {
            "size" => Some(Optimize::Size),
            "speed" => Some(Optimize::Speed),
            _ => None,
        }
    }
}

/// The GPU architectures a CUDA target may name: the SMs since Pascal that LLVM 14 emits
/// directly (up to sm_86) or that PTX ISA 7.5/7.8 code relabelled for them runs on (sm_87 Jetson
/// Orin, sm_89 Ada, sm_90 Hopper). Newer SMs need a newer PTX ISA than LLVM 14 writes.
pub const CUDA_SMS: &[u32] = &[60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90];

/// The SM number of `sm_NN`, if it is one of [`CUDA_SMS`].
pub fn cuda_sm_number(sm: &str) -> Option<u32> {
    let n: u32 = sm.strip_prefix("sm_")?.parse().ok()?;
    CUDA_SMS.contains(&n).then_some(n)
}

/// L1D and L2 sizes assumed when a target file gives none: 32 KiB and 1 MiB, the per-core sizes
/// of Zen 3/4, Ice Lake-SP and Cortex-A78 (and no larger than any current x86-64 or A-class core's
/// L1D by more than 2x, so K-blocks stay in cache on smaller cores too).
const DEFAULT_L1D_BYTES: u64 = 32 * 1024;
const DEFAULT_L2_BYTES: u64 = 1024 * 1024;

/// `vector_bits` of a target without a vector unit (Cortex-M4F/M7/M33): one f32 lane, so every
/// micro-kernel is the scalar FPU path.
pub const SCALAR_FPU_BITS: u32 = 32;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetFile {
    name: String,
    description: String,
    triple: String,
    cpu: String,
    features: String,
    vector_bits: u32,
    #[serde(default)]
    vector_registers: Option<u32>,
    #[serde(default)]
    l1d_bytes: Option<u64>,
    #[serde(default)]
    l2_bytes: Option<u64>,
    #[serde(default)]
    cuda_sm: Option<String>,
    #[serde(default)]
    optimize: Option<Optimize>,
    #[serde(default)]
    variants: Vec<String>,
}

/// The built-in target files, in listing order.
const BUILTIN: &[(&str, &str)] = &[
    ("x86_64", include_str!("../targets/x86_64.yaml")),
    ("x86_64-avx2", include_str!("../targets/x86_64-avx2.yaml")),
    (
        "x86_64-avx512",
        include_str!("../targets/x86_64-avx512.yaml"),
    ),
    (
        "x86_64-avx512-vnni",
        include_str!("../targets/x86_64-avx512-vnni.yaml"),
    ),
    (
        "x86_64-avx512-bf16",
        include_str!("../targets/x86_64-avx512-bf16.yaml"),
    ),
    ("x86_64-multi", include_str!("../targets/x86_64-multi.yaml")),
    ("aarch64-neon", include_str!("../targets/aarch64-neon.yaml")),
    ("aarch64-a78", include_str!("../targets/aarch64-a78.yaml")),
    (
        "aarch64-multi",
        include_str!("../targets/aarch64-multi.yaml"),
    ),
    ("jetson-orin", include_str!("../targets/jetson-orin.yaml")),
    ("cuda-x86_64", include_str!("../targets/cuda-x86_64.yaml")),
    ("cortex-m4f", include_str!("../targets/cortex-m4f.yaml")),
    ("cortex-m7", include_str!("../targets/cortex-m7.yaml")),
    ("cortex-m33", include_str!("../targets/cortex-m33.yaml")),
    ("cortex-m55", include_str!("../targets/cortex-m55.yaml")),
    ("host", include_str!("../targets/host.yaml")),
];

/// Why a target could not be resolved.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TargetError {
    #[error("unknown target `{name}`; known targets: {known}{hint}")]
    Unknown {
        name: String,
        known: String,
        hint: String,
    },
    #[error("target file {path}: {reason}")]
    File { path: String, reason: String },
    /// `XLA_AOT_HOST_ISA` names no level, or one this machine cannot run ([`host_isa`]).
    #[error("XLA_AOT_HOST_ISA: {0}")]
    HostIsa(String),
}

impl Target {
    /// Names of the built-in targets.
    pub fn builtin_names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
    }

    /// Every built-in target, resolved (`host` detected).
    pub fn builtins() -> Vec<Target> {
        BUILTIN
            .iter()
            .map(|(n, text)| parse(text, n).expect("built-in targets are valid"))
            .collect()
    }

    /// A built-in target by name, or a target file by path (anything containing `/` or ending in
    /// `.yaml`).
    pub fn resolve(name_or_path: &str) -> Result<Target, TargetError> {
        if name_or_path == "host" {
            if let Some(capped) = host_isa::capped_host()? {
                return Ok(capped);
            }
        }
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return parse(text, name_or_path).map_err(|reason| TargetError::File {
                path: name_or_path.into(),
                reason,
            });
        }
        if name_or_path.contains('/') || name_or_path.ends_with(".yaml") {
            let path = Path::new(name_or_path);
            let text = crate::util::io::read_bounded_string(
                path,
                crate::limits::MAX_TARGET_FILE_BYTES,
                "MAX_TARGET_FILE_BYTES",
            )
            .map_err(|e| TargetError::File {
                path: name_or_path.into(),
                reason: crate::util::io::io_reason(&e),
            })?;
            return parse(&text, name_or_path).map_err(|reason| TargetError::File {
                path: name_or_path.into(),
                reason,
            });
        }
        let names = Target::builtin_names();
        let hint = crate::util::suggest::nearest(name_or_path, names.iter().copied())
            .map(|s| format!("; did you mean `{s}`?"))
            .unwrap_or_default();
        Err(TargetError::Unknown {
            name: name_or_path.into(),
            known: names.join(", "),
            hint,
        })
    }

    /// The target for a Cargo build: from `TARGET` (the Rust triple) and `CARGO_CFG_TARGET_FEATURE`
    /// (comma-separated features). x86_64 with `avx512f` → `x86_64-avx512` (`x86_64-avx512-bf16`
    /// with `avx512bf16` too, else `x86_64-avx512-vnni` with `avx512vnni`), with `avx2` →
    /// `x86_64-avx2`, otherwise `x86_64` (baseline); aarch64 → `aarch64-neon`; the Cortex-M
    /// triples as [`Target::for_cargo_cpu`] maps them without a `-C target-cpu`.
    pub fn for_cargo(triple: &str, features: &str) -> Result<Target, TargetError> {
        Target::for_cargo_cpu(triple, features, None)
    }

    /// [`Target::for_cargo`], with the `-C target-cpu` of the build if any (Rust reports no Arm
    /// M-profile features to build scripts, so the CPU tells the cores of one triple apart):
    /// `thumbv7em-none-eabihf` → `cortex-m7` with `target-cpu=cortex-m7` (or the `fp64`
    /// feature), otherwise `cortex-m4f`; `thumbv8m.main-none-eabihf` → `cortex-m55` with
    /// `target-cpu=cortex-m55` (or `mve`; Rust has no ARMv8.1-M target, M55 code is built for
    /// this one), otherwise `cortex-m33`. The soft-float `eabi` triples are refused: the library
    /// uses the FPU.
    pub fn for_cargo_cpu(
        triple: &str,
        features: &str,
        cpu: Option<&str>,
    ) -> Result<Target, TargetError> {
        let has = |f: &str| features.split(',').any(|x| x.trim() == f);
        let hard_float = triple.ends_with("-eabihf");
        let name = match triple.split('-').next().unwrap_or("") {
            "x86_64" if has("avx512f") && has("avx512bf16") => "x86_64-avx512-bf16",
            "x86_64" if has("avx512f") && has("avx512vnni") => "x86_64-avx512-vnni",
            "x86_64" if has("avx512f") => "x86_64-avx512",
            "x86_64" if has("avx2") && has("fma") => "x86_64-avx2",
            "x86_64" => "x86_64",
            "aarch64" => "aarch64-neon",
            "thumbv7em" if hard_float && (cpu == Some("cortex-m7") || has("fp64")) => "cortex-m7",
            "thumbv7em" if hard_float => "cortex-m4f",
            "thumbv8m.main" if hard_float && (cpu == Some("cortex-m55") || has("mve")) => {
                "cortex-m55"
            }
            "thumbv8m.main" if hard_float => "cortex-m33",
            _ => {
                return Err(TargetError::File {
                    path: triple.to_string(),
                    reason: "xla-aot compiles for x86_64, aarch64 and the hard-float Cortex-M \
                             (thumbv7em-none-eabihf, thumbv8m.main-none-eabihf) Cargo targets; \
                             set Build::target(..) to override"
                        .into(),
                });
            }
        };
        Target::resolve(name)
    }

    /// The multi-ISA target for a Cargo build's `TARGET` (`xla_aot::Build::multi_isa`):
    /// `x86_64-multi` for x86_64, `aarch64-multi` for aarch64.
    pub fn for_cargo_multi_isa(triple: &str) -> Result<Target, TargetError> {
        match triple.split('-').next().unwrap_or("") {
            "x86_64" => Target::resolve("x86_64-multi"),
            "aarch64" => Target::resolve("aarch64-multi"),
            _ => Err(TargetError::File {
                path: triple.to_string(),
                reason: "Build::multi_isa(true): there is no multi-ISA target for this triple (only x86_64 and aarch64); drop multi_isa or set Build::target(..)".into(),
            }),
        }
    }

    /// Whether the target converts IEEE halves to f32 in hardware (x86-64 F16C: every AVX2 and
    /// AVX-512 CPU; aarch64 `fcvtl`), so LLVM's `fpext half` needs no library call.
    pub fn has_f16_convert(&self) -> bool {
        match self.arch {
            Arch::Aarch64 => true,
            Arch::X86_64 => {
                self.features.contains("+f16c")
                    || matches!(self.cpu.as_str(), "x86-64-v3" | "x86-64-v4")
            }
            Arch::Nvptx64 => false,
            // Cortex-M: FPv4/FPv5 have `vcvtb.f32.f16`, but the integer path is exact and needs
            // no FPU feature check per core.
            Arch::Arm => false,
        }
    }

    /// Whether the target has FP16 arithmetic (`fmla v.8h`, `precision: f16`): aarch64 with
    /// `+fullfp16` in its features (Armv8.2-A's optional FP16 extension), or a CPU LLVM 14 gives
    /// it to (`aarch64-a78`'s `cortex-a78`; `aarch64-multi` selects that variant only where
    /// AT_HWCAP has FPHP and ASIMDHP, `target/isa.rs`).
    pub fn has_f16_arith(&self) -> bool {
        self.arch == Arch::Aarch64
            && (self.features.split(',').any(|f| f.trim() == "+fullfp16")
                || ARMV8_2_CPUS.contains(&self.cpu.as_str()))
    }

    /// Whether the target has AVX-512 BF16 (`vdpbf16ps`): `+avx512bf16` in its features (`host`
    /// lists it when the CPU has it), or a CPU LLVM 14 gives it to.
    pub fn has_avx512_bf16(&self) -> bool {
        self.arch == Arch::X86_64
            && (self.features.split(',').any(|f| f.trim() == "+avx512bf16")
                || matches!(self.cpu.as_str(), "cooperlake" | "sapphirerapids"))
    }

    /// Whether the target has AVX-512 VNNI (`vpdpbusd`, the int8 products of `cpu/gemm_i8.rs`):
    /// `+avx512vnni` in its features (`host` lists it when the CPU has it; every CPU with AVX-512
    /// BF16 has it, so `x86_64-avx512-bf16` lists it too), or a CPU LLVM 14 gives it to.
    pub fn has_avx512_vnni(&self) -> bool {
        self.arch == Arch::X86_64
            && (self.features.split(',').any(|f| f.trim() == "+avx512vnni")
                || matches!(
                    self.cpu.as_str(),
                    "cascadelake"
                        | "cooperlake"
                        | "icelake-client"
                        | "icelake-server"
                        | "tigerlake"
                        | "rocketlake"
                        | "sapphirerapids"
                ))
    }

    /// Whether a Cortex-M target has the DSP extension (`sxtb16`, `smlad`: two 16-bit
    /// multiply-accumulates per instruction, the int8 products of `cpu/quad_dot.rs` on
    /// microcontrollers): `+dsp` in its features, or a CPU that has it in LLVM 14 ([`DSP_CPUS`])
    /// unless the features remove it.
    pub fn has_arm_dsp(&self) -> bool {
        let listed = |sign: char| {
            self.features
                .split(',')
                .any(|f| f.trim().strip_prefix(sign) == Some("dsp"))
        };
        self.arch == Arch::Arm
            && (listed('+') || (DSP_CPUS.contains(&self.cpu.as_str()) && !listed('-')))
    }

    /// Whether an aarch64 target has NEON (every aarch64 target whose file does not turn it off
    /// with `-neon`): the int8 dot products and Q31 instructions of `codegen/cpu`.
    pub fn has_neon(&self) -> bool {
        self.arch == Arch::Aarch64 && !self.features.contains("-neon")
    }

    /// Whether a Cortex-M target has Helium (MVE) integer vectors in 128-bit registers
    /// (`vmlava.s8`: 16 int8 products summed into a core register, the int8 products of
    /// `cpu/quad_dot.rs` on the M55): `+mve` or `+mve.fp` in its features, or `cortex-m55`, with
    /// the 128-bit vectors of its target file.
    pub fn has_helium(&self) -> bool {
        let listed = |name: &str| {
            self.features
                .split(',')
                .any(|f| f.trim().strip_prefix('+') == Some(name))
        };
        self.arch == Arch::Arm
            && self.vector_bits == 128
            && (listed("mve") || listed("mve.fp") || self.cpu == "cortex-m55")
    }

    /// Whether the target has AVX2 (256-bit integer vectors: `vpmaddwd` on ymm, the int8 products
    /// of `cpu/quad_dot.rs` without VNNI): `+avx2` in its features (`host` lists it when the CPU
    /// has it), or a CPU LLVM 14 gives it to ([`AVX2_CPUS`]), unless the features remove it.
    pub fn has_avx2(&self) -> bool {
        self.x86_feature("avx2", AVX2_CPUS)
    }

    /// Whether `llvm.fma.f32` is an instruction rather than a call to libm's `fmaf` (which
    /// runtime-min's no-libm contract rules out): x86-64 with FMA3 (`+fma`, or a CPU LLVM 14
    /// gives it to: every [`AVX2_CPUS`] one has it), aarch64 (`fmadd`), the Cortex-M cores of
    /// `targets/` (FPv4/FPv5 `vfma.f32`) and PTX (`fma.rn.f32`). Elsewhere (the x86-64
    /// baseline) `core/emitter.rs` computes the fused product in f64.
    pub fn has_fma(&self) -> bool {
        match self.arch {
            Arch::X86_64 => self.x86_feature("fma", AVX2_CPUS),
            Arch::Aarch64 | Arch::Arm | Arch::Nvptx64 => true,
        }
    }

    /// Whether the target has AVX-512BW (512-bit integer vectors of bytes and words: `vpmaddwd`
    /// on zmm, the int8 products of `cpu/quad_dot.rs` without VNNI): `+avx512bw` in its features,
    /// or a CPU LLVM 14 gives it to ([`AVX512BW_CPUS`]), unless the features remove it.
    pub fn has_avx512bw(&self) -> bool {
        self.x86_feature("avx512bw", AVX512BW_CPUS)
    }

    /// Whether an x86-64 target has feature `name`: listed with `+` in its features, or given by
    /// its CPU (one of `cpus`) and not removed with `-`.
    fn x86_feature(&self, name: &str, cpus: &[&str]) -> bool {
        let listed = |sign: char| {
            self.features
                .split(',')
                .any(|f| f.trim().strip_prefix(sign) == Some(name))
        };
        self.arch == Arch::X86_64
            && (listed('+') || (cpus.contains(&self.cpu.as_str()) && !listed('-')))
    }

    /// Whether the target has the Armv8.2-A dot product (`sdot`/`udot`, the int8 products of
    /// `cpu/gemm_i8.rs` on aarch64): `+dotprod` in its features, or a CPU LLVM 14 gives it to
    /// ([`ARMV8_2_CPUS`]: `aarch64-a78`'s `cortex-a78`, hence `aarch64-multi`'s `dotprod` variant,
    /// which AT_HWCAP selects only with ASIMDDP, `target/isa.rs`).
    pub fn has_dotprod(&self) -> bool {
        self.arch == Arch::Aarch64
            && (self.features.split(',').any(|f| f.trim() == "+dotprod")
                || ARMV8_2_CPUS.contains(&self.cpu.as_str()))
    }

    /// Whether code for this target runs on the machine xla-aot runs on.
    pub fn runs_here(&self) -> bool {
        let host = host_triple();
        let same_arch = host.split('-').next() == self.triple.split('-').next();
        if !same_arch {
            return false;
        }
        if !self.variants.is_empty() {
            // The last variant is the fallback the dispatcher picks when nothing better runs.
            return self.variants.iter().any(Target::runs_here);
        }
        if host_isa::above_cap(self) {
            return false;
        }
        let feats = TargetMachine::get_host_cpu_features().to_string();
        if self.has_avx512_bf16() && !feats.contains("+avx512bf16") {
            return false;
        }
        if self.has_avx512_vnni() && !feats.contains("+avx512vnni") {
            return false;
        }
        match self.cpu.as_str() {
            "x86-64-v4" => feats.contains("+avx512f") && feats.contains("+avx512bw"),
            "x86-64-v3" => feats.contains("+avx2") && feats.contains("+fma"),
            _ => true,
        }
    }
}

/// The M-profile CPUs LLVM 14 gives the DSP extension to (`FeatureDSP` in their definitions in
/// LLVM's `ARM.td`: ARMv7E-M's M4 and M7, and the ARMv8-M mainline cores built with it).
const DSP_CPUS: &[&str] = &[
    "cortex-m4",
    "cortex-m7",
    "cortex-m33",
    "cortex-m35p",
    "cortex-m55",
];

/// The x86-64 CPUs LLVM 14 gives AVX-512BW to (their definitions in LLVM's `X86.td` include
/// `FeatureBWI`): the x86-64-v4 level and the Intel cores with AVX-512 since Skylake-SP.
const AVX512BW_CPUS: &[&str] = &[
    "x86-64-v4",
    "skylake-avx512",
    "skx",
    "cascadelake",
    "cooperlake",
    "cannonlake",
    "icelake-client",
    "icelake-server",
    "tigerlake",
    "rocketlake",
    "sapphirerapids",
];

/// The x86-64 CPUs LLVM 14 gives AVX2 to: every [`AVX512BW_CPUS`] one, the x86-64-v3 level,
/// Intel cores since Haswell and AMD's since Zen.
const AVX2_CPUS: &[&str] = &[
    "x86-64-v3",
    "x86-64-v4",
    "haswell",
    "broadwell",
    "skylake",
    "alderlake",
    "skylake-avx512",
    "skx",
    "cascadelake",
    "cooperlake",
    "cannonlake",
    "icelake-client",
    "icelake-server",
    "tigerlake",
    "rocketlake",
    "sapphirerapids",
    "znver1",
    "znver2",
    "znver3",
];

/// The aarch64 CPUs to which LLVM 14 gives both FP16 arithmetic and the dot product (Armv8.2-A
/// and later with both extensions): each was checked with LLVM 14's `llc`, which selects
/// `llvm.aarch64.neon.sdot` for them (and cannot for cortex-a72 or carmel).
const ARMV8_2_CPUS: &[&str] = &[
    "cortex-a55",
    "cortex-a75",
    "cortex-a76",
    "cortex-a77",
    "cortex-a78",
    "cortex-x1",
    "neoverse-n1",
    "neoverse-n2",
    "neoverse-v1",
    "apple-a13",
    "apple-a14",
];

fn host_triple() -> String {
    TargetMachine::get_default_triple()
        .as_str()
        .to_string_lossy()
        .into_owned()
}

fn parse(text: &str, origin: &str) -> Result<Target, String> {
    use crate::limits::MAX_YAML_DEPTH;
    if let Some((line, column)) = crate::util::yaml_depth::first_too_deep(text, MAX_YAML_DEPTH) {
        return Err(format!(
            "line {line}, column {column}: YAML nested more than {MAX_YAML_DEPTH} levels deep \
             (MAX_YAML_DEPTH, see docs/limits.md); a target file is a flat list of keys"
        ));
    }
    let f: TargetFile = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    let native = f.triple == "native";
    let (triple, cpu, features, vector_bits) = if native {
        let features = TargetMachine::get_host_cpu_features().to_string();
        let bits = if f.vector_bits != 0 {
            f.vector_bits
        } else if features.contains("+avx512f") {
            512
        } else if features.contains("+avx2") {
            256
        } else {
            128
        };
        (
            host_triple(),
            TargetMachine::get_host_cpu_name().to_string(),
            features,
            bits,
        )
    } else {
        (f.triple, f.cpu, f.features, f.vector_bits)
    };
    let arch = match triple.split('-').next() {
        Some("x86_64") => Arch::X86_64,
        Some("aarch64") => Arch::Aarch64,
        Some(t) if is_m_profile(t) => {
            if !triple.ends_with("-none-eabihf") {
                return Err(format!(
                    "triple `{triple}`: microcontroller targets are bare metal with the hard-float \
                     EABI; write `{t}-none-eabihf` ({origin})"
                ));
            }
            Arch::Arm
        }
        other => {
            return Err(format!(
                "triple `{triple}` ({}) is not supported; CPU targets are x86_64, aarch64 and the \
                 Cortex-M triples (thumbv7em-none-eabihf, thumbv8m.main-none-eabihf, \
                 thumbv8.1m.main-none-eabihf)",
                other.unwrap_or("")
            ));
        }
    };
    if !native {
        check_cpu_and_features(arch, &cpu, &features, origin)?;
    }
    if arch == Arch::Arm && !ARM_FPU_CPUS.contains(&cpu.as_str()) {
        return Err(format!(
            "cpu `{cpu}` has no single-precision FPU; xla-aot's Cortex-M code needs one \
             (cores: {}) ({origin})",
            ARM_FPU_CPUS.join(", ")
        ));
    }
    if ![SCALAR_FPU_BITS, 128, 256, 512].contains(&vector_bits) {
        return Err(format!(
            "vector_bits {vector_bits} must be 32 (a scalar FPU, no vector unit), 128, 256 or 512 \
             ({origin})"
        ));
    }
    // x86-64 has 16 vector registers until AVX-512 doubles them; aarch64 always has 32; Helium
    // has 8 q registers, a scalar M-profile FPU 32 s registers.
    let vector_registers = f.vector_registers.unwrap_or(match arch {
        Arch::X86_64 if vector_bits < 512 => 16,
        Arch::Arm if vector_bits > SCALAR_FPU_BITS => 8,
        _ => 32,
    });
    if !(8..=64).contains(&vector_registers) {
        return Err(format!(
            "vector_registers {vector_registers} must be between 8 and 64 ({origin})"
        ));
    }
    if let Some(sm) = &f.cuda_sm {
        if arch == Arch::Arm {
            return Err(format!(
                "cuda_sm: a microcontroller target has no CUDA host; remove `cuda_sm` ({origin})"
            ));
        }
        if cuda_sm_number(sm).is_none() {
            let known: Vec<String> = CUDA_SMS.iter().map(|n| format!("sm_{n}")).collect();
            return Err(format!(
                "cuda_sm `{sm}` is not supported; expected one of {} ({origin})",
                known.join(", ")
            ));
        }
    }
    Ok(Target {
        name: f.name,
        description: f.description,
        triple,
        cpu,
        features,
        vector_bits,
        arch,
        vector_registers,
        l1d_bytes: f.l1d_bytes.unwrap_or(DEFAULT_L1D_BYTES).max(4096),
        l2_bytes: f.l2_bytes.unwrap_or(DEFAULT_L2_BYTES).max(65536),
        cuda_sm: f.cuda_sm,
        optimize: f.optimize.unwrap_or(if arch.is_microcontroller() {
            Optimize::Size
        } else {
            Optimize::Speed
        }),
        variants: isa::resolve_variants(&f.variants, arch, origin)?,
    })
}

/// The M-profile cores with a single-precision FPU (the code uses hardware f32 arithmetic and
/// the hard-float calling convention; a soft-float core would need libgcc's `__aeabi_f*`).
const ARM_FPU_CPUS: &[&str] = &[
    "cortex-m4",
    "cortex-m7",
    "cortex-m33",
    "cortex-m35p",
    "cortex-m55",
];

/// Whether the first part of a triple names an Arm M-profile architecture (`thumbv7em`,
/// `thumbv8m.main`, `thumbv8.1m.main`, ...).
fn is_m_profile(arch: &str) -> bool {
    arch.strip_prefix("thumbv")
        .is_some_and(|v| v.ends_with('m') || v.contains("m."))
}

/// Features whose removal LLVM cannot honour for the triple (it aborts the process): x86-64 code
/// needs the 64-bit mode.
const X86_64_REQUIRED_FEATURES: &[&str] = &["64bit", "64bit-mode"];

/// Checks `cpu` and each `+name`/`-name` of `features` against what LLVM 14 knows for `arch`
/// (`llvm_names.rs`), so that LLVM never sees a CPU it would ignore and then abort on.
fn check_cpu_and_features(
    arch: Arch,
    cpu: &str,
    features: &str,
    origin: &str,
) -> Result<(), String> {
    let (cpus, known, family) = match arch {
        Arch::X86_64 => (
            llvm_names::X86_64_CPUS,
            llvm_names::X86_64_FEATURES,
            "x86_64",
        ),
        Arch::Aarch64 => (
            llvm_names::AARCH64_CPUS,
            llvm_names::AARCH64_FEATURES,
            "aarch64",
        ),
        Arch::Arm => (
            llvm_names::ARM_M_CPUS,
            llvm_names::ARM_FEATURES,
            "thumbv7em",
        ),
        Arch::Nvptx64 => return Ok(()),
    };
    if !cpus.contains(&cpu) {
        let hint = crate::util::suggest::nearest(cpu, cpus.iter().copied())
            .map(|s| format!("did you mean `{s}`? "))
            .unwrap_or_default();
        return Err(format!(
            "field `cpu`: `{cpu}` is not a CPU LLVM knows for {family} ({origin}); {hint}\
             `llc-14 -mtriple={family} -mcpu=help` lists them (e.g. {})",
            cpus.iter()
                .filter(|c| c.starts_with("x86-64")
                    || c.starts_with("cortex-a7")
                    || c.starts_with("cortex-m")
                    || **c == "generic")
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for item in features.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (sign, name) = item.split_at(1);
        if sign != "+" && sign != "-" {
            return Err(format!(
                "field `features`: `{item}` must start with `+` (enable) or `-` (disable) ({origin})"
            ));
        }
        if !known.contains(&name) {
            let hint = crate::util::suggest::nearest(name, known.iter().copied())
                .map(|s| format!("; did you mean `{sign}{s}`?"))
                .unwrap_or_default();
            return Err(format!(
                "field `features`: `{name}` is not a feature LLVM knows for {family} ({origin}){hint}"
            ));
        }
        if sign == "-" && arch == Arch::X86_64 && X86_64_REQUIRED_FEATURES.contains(&name) {
            return Err(format!(
                "field `features`: `{item}` cannot be disabled for x86_64 code ({origin})"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cortex_m_targets_resolve_and_bad_ones_say_why() {
        for (name, arch_bits) in [
            ("cortex-m4f", 32),
            ("cortex-m7", 32),
            ("cortex-m33", 32),
            ("cortex-m55", 128),
        ] {
            let t = Target::resolve(name).unwrap();
            assert_eq!((t.arch, t.vector_bits), (Arch::Arm, arch_bits));
            assert_eq!(t.optimize, Optimize::Size);
        }
        assert_eq!(Target::resolve("x86_64").unwrap().optimize, Optimize::Speed);
        let file = |triple: &str, cpu: &str| {
            parse(
                &format!(
                    "name: t\ndescription: d\ntriple: {triple}\ncpu: {cpu}\nfeatures: \"\"\nvector_bits: 32\n"
                ),
                "t.yaml",
            )
        };
        assert!(file("thumbv7em-none-eabihf", "cortex-m4").is_ok());
        assert!(
            file("thumbv7em-none-eabi", "cortex-m4")
                .unwrap_err()
                .contains("hard-float")
        );
        assert!(
            file("thumbv6m-none-eabihf", "cortex-m0")
                .unwrap_err()
                .contains("no single-precision FPU")
        );
        assert!(
            file("thumbv7em-none-eabihf", "cortex-a72")
                .unwrap_err()
                .contains("not a CPU")
        );
    }

    #[test]
    fn fp16_arithmetic_is_aarch64_a78_not_baseline_neon() {
        assert!(Target::resolve("aarch64-a78").unwrap().has_f16_arith());
        assert!(!Target::resolve("aarch64-neon").unwrap().has_f16_arith());
        assert!(!Target::resolve("x86_64-avx512").unwrap().has_f16_arith());
    }

    #[test]
    fn dotprod_is_aarch64_a78_not_baseline_neon() {
        assert!(Target::resolve("aarch64-a78").unwrap().has_dotprod());
        assert!(!Target::resolve("aarch64-neon").unwrap().has_dotprod());
        assert!(!Target::resolve("aarch64-multi").unwrap().has_dotprod());
        assert!(!Target::resolve("x86_64-avx512-vnni").unwrap().has_dotprod());
    }

    #[test]
    fn avx2_and_avx512bw_by_level_cpu_and_features() {
        let has = |n: &str| {
            let t = Target::resolve(n).unwrap();
            (t.has_avx2(), t.has_avx512bw())
        };
        assert_eq!(has("x86_64"), (false, false));
        assert_eq!(has("x86_64-avx2"), (true, false));
        assert_eq!(has("x86_64-avx512"), (true, true));
        assert_eq!(has("x86_64-avx512-vnni"), (true, true));
        assert_eq!(has("aarch64-a78"), (false, false));
        let mut t = Target::resolve("x86_64-avx512").unwrap();
        t.features = "-avx512bw".into();
        assert!(t.has_avx2() && !t.has_avx512bw());
        t.cpu = "x86-64".into();
        t.features = "+avx2".into();
        assert!(t.has_avx2() && !t.has_avx512bw());
        let cpu_has = |flag: &str| {
            std::fs::read_to_string("/proc/cpuinfo")
                .is_ok_and(|c| c.split_whitespace().any(|f| f == flag))
        };
        if cfg!(target_arch = "x86_64") {
            let host = Target::resolve("host").unwrap();
            assert_eq!(host.has_avx2(), cpu_has("avx2"));
            assert_eq!(host.has_avx512bw(), cpu_has("avx512bw"));
        }
    }

    #[test]
    fn avx512_bf16_is_the_bf16_target_the_host_when_the_cpu_has_it_and_cargo_features() {
        assert!(
            Target::resolve("x86_64-avx512-bf16")
                .unwrap()
                .has_avx512_bf16()
        );
        assert!(!Target::resolve("x86_64-avx512").unwrap().has_avx512_bf16());
        assert!(!Target::resolve("aarch64-a78").unwrap().has_avx512_bf16());
        let cpu_has = std::fs::read_to_string("/proc/cpuinfo")
            .is_ok_and(|c| c.split_whitespace().any(|f| f == "avx512_bf16"));
        if cfg!(target_arch = "x86_64") {
            assert_eq!(Target::resolve("host").unwrap().has_avx512_bf16(), cpu_has);
        }
        let cargo = |f: &str| {
            Target::for_cargo("x86_64-unknown-linux-gnu", f)
                .unwrap()
                .name
        };
        assert_eq!(cargo("avx512f,avx512bf16"), "x86_64-avx512-bf16");
        assert_eq!(cargo("avx512f,avx512vnni"), "x86_64-avx512-vnni");
        assert_eq!(cargo("avx512f"), "x86_64-avx512");
    }
}
