//! The instruction-set levels a multi-ISA library (`x86_64-multi`, `aarch64-multi`) chooses
//! between at run time, and the CPU feature bits each one needs.
//!
//! Contract: an x86-64 [`Isa`] is one of the micro-architecture levels (`x86-64`, `-v2`, `-v3`,
//! `-v4`, the CPU names LLVM compiles them for) with the bits of CPUID leaf 1 ECX, leaf 7 EBX,
//! leaf 0x8000_0001 ECX and XCR0 that must all be set for its code to run: every feature LLVM
//! enables for that CPU name (the x86-64 psABI's level definitions), and XCR0's SSE/AVX/AVX-512
//! state bits, without which the OS does not save the registers (an AVX instruction then faults
//! although CPUID lists it). An aarch64 [`Isa`] is one of the built-in aarch64 CPUs with the bits
//! of Linux's `AT_HWCAP` that stand for every user-level feature LLVM enables for that CPU (the
//! library cannot read them itself: the caller passes `getauxval(AT_HWCAP)`). The dispatcher
//! (`codegen/cpu/isa_dispatch.rs`) tests exactly these bits; [`resolve_variants`] checks a
//! multi-ISA target's `variants` list.

use super::{Arch, Target};

/// One instruction-set level of a multi-ISA library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Isa {
    /// The name `<name>_isa()` returns and `<name>_force_isa()` takes.
    pub name: &'static str,
    /// The LLVM CPU name its variant is compiled for.
    pub cpu: &'static str,
    /// Required bits of CPUID leaf 1, ECX.
    pub leaf1_ecx: u32,
    /// Required bits of CPUID leaf 7 (sub-leaf 0), EBX.
    pub leaf7_ebx: u32,
    /// Required bits of CPUID leaf 0x8000_0001, ECX.
    pub ext1_ecx: u32,
    /// Required bits of XCR0 (read with `xgetbv` only when CPUID says the OS uses XSAVE).
    pub xcr0: u32,
    /// aarch64: required bits of `AT_HWCAP` (Linux `arch/arm64/include/uapi/asm/hwcap.h`).
    pub hwcap: u64,
    /// aarch64: the `features` its target file must have (`+neon`); x86-64: none.
    pub features: &'static str,
}

// CPUID leaf 1 ECX (Intel SDM vol. 2A, table 3-10).
const SSE3: u32 = 1 << 0;
const SSSE3: u32 = 1 << 9;
const FMA: u32 = 1 << 12;
const CX16: u32 = 1 << 13;
const SSE41: u32 = 1 << 19;
const SSE42: u32 = 1 << 20;
const MOVBE: u32 = 1 << 22;
const POPCNT: u32 = 1 << 23;
const XSAVE: u32 = 1 << 26;
const OSXSAVE: u32 = 1 << 27;
const AVX: u32 = 1 << 28;
const F16C: u32 = 1 << 29;
// CPUID leaf 7 EBX (table 3-8).
const BMI1: u32 = 1 << 3;
const AVX2: u32 = 1 << 5;
const BMI2: u32 = 1 << 8;
const AVX512F: u32 = 1 << 16;
const AVX512DQ: u32 = 1 << 17;
const AVX512CD: u32 = 1 << 28;
const AVX512BW: u32 = 1 << 30;
const AVX512VL: u32 = 1 << 31;
// CPUID leaf 0x8000_0001 ECX.
const LAHF_SAHF: u32 = 1 << 0;
const LZCNT: u32 = 1 << 5;
// XCR0 (SDM vol. 1, 13.3): SSE (XMM), AVX (YMM upper halves), opmask, ZMM_Hi256, Hi16_ZMM.
const XCR0_SSE_AVX: u32 = 0b110;
const XCR0_AVX512: u32 = 0b1110_0000;

const V2_ECX: u32 = SSE3 | SSSE3 | CX16 | SSE41 | SSE42 | POPCNT;
const V3_ECX: u32 = V2_ECX | FMA | MOVBE | XSAVE | OSXSAVE | AVX | F16C;
const V3_EBX: u32 = BMI1 | AVX2 | BMI2;

/// The levels, baseline first.
pub const X86_64_ISAS: &[Isa] = &[
    Isa {
        name: "sse2",
        cpu: "x86-64",
        leaf1_ecx: 0,
        leaf7_ebx: 0,
        ext1_ecx: 0,
        xcr0: 0,
        hwcap: 0,
        features: "",
    },
    Isa {
        name: "sse4.2",
        cpu: "x86-64-v2",
        leaf1_ecx: V2_ECX,
        leaf7_ebx: 0,
        ext1_ecx: LAHF_SAHF,
        xcr0: 0,
        hwcap: 0,
        features: "",
    },
    Isa {
        name: "avx2",
        cpu: "x86-64-v3",
        leaf1_ecx: V3_ECX,
        leaf7_ebx: V3_EBX,
        ext1_ecx: LAHF_SAHF | LZCNT,
        xcr0: XCR0_SSE_AVX,
        hwcap: 0,
        features: "",
    },
    Isa {
        name: "avx512",
        cpu: "x86-64-v4",
        leaf1_ecx: V3_ECX,
        leaf7_ebx: V3_EBX | AVX512F | AVX512DQ | AVX512CD | AVX512BW | AVX512VL,
        ext1_ecx: LAHF_SAHF | LZCNT,
        xcr0: XCR0_SSE_AVX | XCR0_AVX512,
        hwcap: 0,
        features: "",
    },
];

// AT_HWCAP bits (Linux arch/arm64/include/uapi/asm/hwcap.h).
const HWCAP_FP: u64 = 1 << 0;
const HWCAP_ASIMD: u64 = 1 << 1;
const HWCAP_CRC32: u64 = 1 << 7;
const HWCAP_ATOMICS: u64 = 1 << 8;
const HWCAP_FPHP: u64 = 1 << 9;
const HWCAP_ASIMDHP: u64 = 1 << 10;
const HWCAP_ASIMDRDM: u64 = 1 << 12;
const HWCAP_LRCPC: u64 = 1 << 15;
const HWCAP_DCPOP: u64 = 1 << 16;
const HWCAP_ASIMDDP: u64 = 1 << 20;

/// The aarch64 levels, baseline first: the `aarch64-neon` target (Cortex-A72: Armv8.0-A with
/// NEON, what every aarch64 Linux machine runs) and the `aarch64-a78` one (Armv8.2-A with
/// dotprod, fp16, LSE atomics, RDM, RCpc: Cortex-A76/A78, Neoverse N1, Jetson Orin, Graviton 2).
pub const AARCH64_ISAS: &[Isa] = &[
    Isa {
        name: "neon",
        cpu: "cortex-a72",
        leaf1_ecx: 0,
        leaf7_ebx: 0,
        ext1_ecx: 0,
        xcr0: 0,
        hwcap: HWCAP_FP | HWCAP_ASIMD,
        features: "+neon",
    },
    Isa {
        name: "dotprod",
        cpu: "cortex-a78",
        leaf1_ecx: 0,
        leaf7_ebx: 0,
        ext1_ecx: 0,
        xcr0: 0,
        hwcap: HWCAP_FP
            | HWCAP_ASIMD
            | HWCAP_CRC32
            | HWCAP_ATOMICS
            | HWCAP_FPHP
            | HWCAP_ASIMDHP
            | HWCAP_ASIMDRDM
            | HWCAP_LRCPC
            | HWCAP_DCPOP
            | HWCAP_ASIMDDP,
        features: "+neon",
    },
];

/// The levels of `arch`, baseline first (none for other families).
pub fn levels(arch: Arch) -> &'static [Isa] {
    match arch {
        Arch::X86_64 => X86_64_ISAS,
        Arch::Aarch64 => AARCH64_ISAS,
        Arch::Nvptx64 | Arch::Arm => &[],
    }
}

/// The level a variant target is compiled for, from its CPU name and features.
pub fn isa_of(t: &Target) -> Option<Isa> {
    levels(t.arch)
        .iter()
        .copied()
        .find(|i| i.cpu == t.cpu && i.features == t.features)
}

/// The variant targets of a multi-ISA target file's `variants` (built-in target names, best
/// first), checked: each is a single-ISA target of the file's family and one of its
/// [`levels`], no level twice, and the last one is the baseline (`x86-64`, `cortex-a72`), so that
/// some variant always runs.
pub(super) fn resolve_variants(
    names: &[String],
    arch: Arch,
    origin: &str,
) -> Result<Vec<Target>, String> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let known = levels(arch);
    if known.is_empty() {
        return Err(format!(
            "field `variants`: multi-ISA libraries are for x86_64 and aarch64 triples only ({origin})"
        ));
    }
    let cpus: Vec<&str> = known.iter().map(|i| i.cpu).collect();
    let mut out: Vec<Target> = Vec::with_capacity(names.len());
    for n in names {
        let t = match super::BUILTIN.iter().find(|(b, _)| b == n) {
            Some((_, text)) => super::parse(text, n)?,
            None => {
                return Err(format!(
                    "field `variants`: `{n}` is not a built-in target ({origin}); list built-in \
                     x86-64 targets such as x86_64-avx512, x86_64-avx2, x86_64"
                ));
            }
        };
        if !t.variants.is_empty() || t.cuda_sm.is_some() || t.arch != arch {
            return Err(format!(
                "field `variants`: `{n}` is not a single-ISA CPU target of this file's triple ({origin})"
            ));
        }
        let Some(isa) = isa_of(&t) else {
            return Err(format!(
                "field `variants`: `{n}` has cpu `{}` and features `{}`; a variant must have \
                 one of the CPUs {} with their built-in target's features, whose feature bits \
                 the dispatcher knows ({origin})",
                t.cpu,
                t.features,
                cpus.join(", ")
            ));
        };
        if out.iter().any(|o| isa_of(o) == Some(isa)) {
            return Err(format!(
                "field `variants`: two variants are `{}` ({origin}); list each level once",
                isa.cpu
            ));
        }
        out.push(t);
    }
    if out.last().and_then(isa_of) != Some(known[0]) {
        return Err(format!(
            "field `variants`: the last variant must be the baseline (cpu `{}`), so that every \
             CPU of the family runs one ({origin})",
            known[0].cpu
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_multi_target_lists_avx512_avx2_and_baseline() {
        let t = Target::resolve("x86_64-multi").unwrap();
        let names: Vec<&str> = t.variants.iter().map(|v| isa_of(v).unwrap().name).collect();
        assert_eq!(names, ["avx512", "avx2", "sse2"]);
    }

    #[test]
    fn the_aarch64_multi_target_lists_dotprod_and_neon() {
        let t = Target::resolve("aarch64-multi").unwrap();
        let names: Vec<&str> = t.variants.iter().map(|v| isa_of(v).unwrap().name).collect();
        assert_eq!(names, ["dotprod", "neon"]);
    }

    #[test]
    fn levels_only_add_bits() {
        for w in AARCH64_ISAS.windows(2) {
            assert_eq!(w[0].hwcap & !w[1].hwcap, 0, "{} ⊄ {}", w[0].name, w[1].name);
        }
        for w in X86_64_ISAS.windows(2) {
            let (a, b) = (w[0], w[1]);
            assert_eq!(a.leaf1_ecx & !b.leaf1_ecx, 0, "{} ⊄ {}", a.name, b.name);
            assert_eq!(a.leaf7_ebx & !b.leaf7_ebx, 0, "{} ⊄ {}", a.name, b.name);
            assert_eq!(a.ext1_ecx & !b.ext1_ecx, 0, "{} ⊄ {}", a.name, b.name);
            assert_eq!(a.xcr0 & !b.xcr0, 0, "{} ⊄ {}", a.name, b.name);
        }
    }
}
