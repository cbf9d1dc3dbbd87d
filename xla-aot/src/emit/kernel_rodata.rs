//! A microcontroller library's read-only data split by kernel: the manifest's `rodata_bytes` per
//! kernel and the header's per-kernel lines (`docs/microcontrollers.md`).
//!
//! Contract: [`split`] reads the symbols of the library's objects (`footprint::symbols`). A
//! symbol with a size in a read-only section (`Section::is_rodata`) named `<model>.const.<i>`
//! (LLVM's `.L` prefix allowed) or `<model>_weight<i>` holds entry constant `i`: the weights,
//! packed as the kernels read them, and the small constants kept in the code object. Its bytes
//! (the symbol's size) count for the one kernel that reads constant `i`
//! (`KernelInfo::constants`), or in `shared` when two or more kernels read it (each once, not
//! split: dropping one of the kernels would not drop the constant). Everything else of the
//! read-only sections is `other`: the alignment padding between constants (64 bytes each at
//! most), unwind tables (`.ARM.exidx`) and data no kernel reads. So `per_kernel` summed, plus
//! `shared`, plus `other`, is exactly `Footprint::rodata`, the header's `RODATA_BYTES`.

use super::footprint::{sections, symbols};
use crate::codegen::KernelInfo;

/// The read-only bytes of a library, by who reads them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KernelRodata {
    /// Per kernel, in the order given: the constants only it reads.
    pub per_kernel: Vec<u64>,
    /// Constants read by two or more kernels.
    pub shared: u64,
    /// Padding, unwind tables and what no kernel reads.
    pub other: u64,
}

/// The entry constant a symbol of model `model` holds, if it is one.
fn constant_of(model: &str, symbol: &str) -> Option<u32> {
    let s = symbol.strip_prefix(".L").unwrap_or(symbol);
    let s = s.strip_prefix(model)?;
    s.strip_prefix(".const.")
        .or_else(|| s.strip_prefix("_weight"))?
        .parse()
        .ok()
}

/// Splits the read-only data of `objects` (ELF bytes) of model `model` among `kernels` (the
/// entry constants each reads, in the manifest's order).
pub fn split<'a>(
    objects: impl IntoIterator<Item = &'a [u8]>,
    model: &str,
    kernels: &[&[u32]],
) -> KernelRodata {
    let mut out = KernelRodata {
        per_kernel: vec![0; kernels.len()],
        ..KernelRodata::default()
    };
    for elf in objects {
        let (Some(secs), Some(syms)) = (sections(elf), symbols(elf)) else {
            continue;
        };
        let rodata: u64 = secs.iter().filter(|s| s.is_rodata()).map(|s| s.size).sum();
        let mut attributed = 0;
        for sym in &syms {
            let in_rodata = secs
                .get(usize::from(sym.section))
                .is_some_and(|s| s.is_rodata());
            let Some(i) = constant_of(model, &sym.name).filter(|_| in_rodata && sym.size > 0)
            else {
                continue;
            };
            let readers: Vec<usize> = (0..kernels.len())
                .filter(|&k| kernels[k].contains(&i))
                .collect();
            match readers[..] {
                [] => continue,
                [k] => out.per_kernel[k] += sym.size,
                _ => out.shared += sym.size,
            }
            attributed += sym.size;
        }
        out.other += rodata.saturating_sub(attributed);
    }
    out
}

/// The header's lines for model `upper` (its macro prefix): each kernel's code and read-only
/// bytes (`text`, `rodata`: as the manifest's `text_bytes` and `rodata_bytes`), and the shared
/// and other read-only bytes as macros.
pub fn header_lines(
    upper: &str,
    kernels: &[KernelInfo],
    text: &[u64],
    rodata: &KernelRodata,
) -> String {
    let width = kernels.iter().map(|k| k.name.len()).max().unwrap_or(0);
    let mut out = format!(
        "\n/* Per kernel (the manifest's \"kernels\", in run order): bytes of code (a kernel whose code is\n \
         * another's, for a repeated shape, has 0; the rest of {upper}_TEXT_BYTES is the entry points)\n \
         * and of read-only data (the constants only it reads).\n \
         * The kernels' read-only bytes + {upper}_RODATA_SHARED_BYTES (constants several kernels read)\n \
         * + {upper}_RODATA_OTHER_BYTES (alignment padding, unwind tables) = {upper}_RODATA_BYTES.\n"
    );
    for ((k, t), r) in kernels.iter().zip(text).zip(&rodata.per_kernel) {
        out.push_str(&format!(
            " *   {name:<width$}  text {t:>7}  rodata {r:>8}\n",
            name = k.name
        ));
    }
    out.push_str(&format!(
        " */\n#define {upper}_RODATA_SHARED_BYTES {}\n#define {upper}_RODATA_OTHER_BYTES {}\n",
        rodata.shared, rodata.other
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit::data_object::{Blob, write_object};
    use crate::target::Arch;

    #[test]
    fn names_of_constants() {
        assert_eq!(constant_of("m", ".Lm.const.12"), Some(12));
        assert_eq!(constant_of("m", "m.const.3"), Some(3));
        assert_eq!(constant_of("m", "m_weight7"), Some(7));
        assert_eq!(constant_of("m", "m2_weight7"), None);
        assert_eq!(constant_of("m", "m.parallel_for"), None);
    }

    #[test]
    fn one_reader_shared_and_other_add_up() {
        let blob = |symbol: &str, len| Blob {
            symbol: symbol.into(),
            len,
        };
        // 100 bytes at 0, 30 at 128, 4 at 192 (padding 28 + 34): 256 bytes of section.
        let blobs = vec![
            blob("m_weight1", 100),
            blob("m_weight2", 30),
            blob("m_weight9", 4),
        ];
        let mut elf = Vec::new();
        write_object(Arch::Arm, &blobs, ".rodata.xla_aot.m", &mut elf, |_, _| {});
        let r = split([elf.as_slice()], "m", &[&[1, 2], &[2], &[]]);
        assert_eq!(r.per_kernel, [100, 0, 0]);
        assert_eq!(r.shared, 30);
        // Constant 9 is read by no kernel; the section is 196 bytes (the last blob at 192).
        assert_eq!(r.other, 196 - 130);
    }
}
