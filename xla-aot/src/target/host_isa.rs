//! `XLA_AOT_HOST_ISA`: run as if the x86-64 host had fewer instructions than it has.
//!
//! Contract: with the variable unset or empty nothing changes. With `avx2` (or `sse2`, alias
//! `noavx2`; `avx512` caps below VNNI and BF16) on an x86-64 host:
//! - [`Target::resolve("host")`](super::Target::resolve) gives the built-in target of that level
//!   (`x86_64-avx2`, `x86_64`, `x86_64-avx512`) instead of the detected CPU, so in-process runs
//!   (`compile::run_host`, `xla-aot run`) compile for it;
//! - [`Target::runs_here`](super::Target::runs_here) is false for every x86-64 target above the
//!   cap, so tests that pick the targets this machine runs leave them out exactly as on a CPU
//!   without them.
//!
//! It exists so that one machine with AVX-512 can test the code an AVX2-only laptop or CI runner
//! runs (issue 46: onnxruntime's references and our kernels differ between the two). A level the
//! CPU does not have is an error, not a silent fallback; any other value is an error that lists
//! the accepted ones.

use super::{Arch, Target, TargetError};

/// The environment variable.
pub const HOST_ISA_ENV: &str = "XLA_AOT_HOST_ISA";

/// An x86-64 instruction-set level, in increasing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum IsaLevel {
    /// The x86-64 baseline (SSE2).
    Sse2,
    /// AVX2 with FMA (`x86-64-v3`).
    Avx2,
    /// AVX-512 F/BW/DQ/VL (`x86-64-v4`), without VNNI or BF16.
    Avx512,
    /// AVX-512 with VNNI or BF16.
    Avx512Plus,
}

/// The accepted values and the built-in target each resolves `host` to.
const LEVELS: &[(&str, IsaLevel, &str)] = &[
    ("sse2", IsaLevel::Sse2, "x86_64"),
    ("noavx2", IsaLevel::Sse2, "x86_64"),
    ("avx2", IsaLevel::Avx2, "x86_64-avx2"),
    ("avx512", IsaLevel::Avx512, "x86_64-avx512"),
];

/// The cap `XLA_AOT_HOST_ISA` sets: `Ok(None)` when unset or empty.
pub fn cap() -> Result<Option<(IsaLevel, &'static str)>, TargetError> {
    let value = std::env::var(HOST_ISA_ENV).unwrap_or_default();
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    LEVELS
        .iter()
        .find(|(name, ..)| name.eq_ignore_ascii_case(value))
        .map(|&(_, level, target)| Some((level, target)))
        .ok_or_else(|| {
            TargetError::HostIsa(format!(
                "`{value}` is not an ISA level; use one of {} (or unset it)",
                LEVELS
                    .iter()
                    .map(|(n, ..)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// The level of an x86-64 target's code.
pub fn level(t: &Target) -> IsaLevel {
    if t.has_avx512_vnni() || t.has_avx512_bf16() {
        IsaLevel::Avx512Plus
    } else if t.vector_bits >= 512 || t.has_avx512bw() {
        IsaLevel::Avx512
    } else if t.has_avx2() {
        IsaLevel::Avx2
    } else {
        IsaLevel::Sse2
    }
}

/// Whether the cap (if any) leaves `t` out of what runs here. A malformed value caps nothing
/// here: `resolve("host")` reports it.
pub fn above_cap(t: &Target) -> bool {
    match cap() {
        Ok(Some((cap, _))) => t.arch == Arch::X86_64 && level(t) > cap,
        _ => false,
    }
}

/// `host` under the cap: the built-in target of the capped level, which must run here.
pub fn capped_host() -> Result<Option<Target>, TargetError> {
    let Some((_, name)) = cap()? else {
        return Ok(None);
    };
    let t = Target::resolve(name)?;
    if !t.runs_here() {
        return Err(TargetError::HostIsa(format!(
            "this machine cannot run `{name}`; unset {HOST_ISA_ENV} or name a lower level"
        )));
    }
    Ok(Some(t))
}
