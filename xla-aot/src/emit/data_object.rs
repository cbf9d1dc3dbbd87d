//! Relocatable ELF objects of read-only data, written straight into the buffer that holds them
//! (the static library being built): the weights the CPU code declares `external` (see
//! `codegen/core/weights.rs`) go into the library this way instead of through LLVM constants.
//!
//! Contract: [`object_len`] is the exact size [`write_object`] appends, so an archive can write
//! the member header first and the object after it with no second copy. The object (ELF64, or
//! ELF32 with the hard-float EABI flags for Cortex-M) holds one read-only section, `.rodata` or
//! the name given (blob `i` at a multiple of [`BLOB_ALIGN`]), one global hidden `STT_OBJECT`
//! symbol per blob, and an empty `.note.GNU-stack` (no executable stack asked for). `fill(i,
//! out)` writes blob `i` into its zeroed slot; nothing else is buffered. Deterministic: the same
//! blobs and bytes give the same object.

use crate::arena::ARENA_ALIGN;
use crate::target::Arch;

/// Alignment of every blob: the arena's (cache line, and what the kernels' aligned loads of a
/// weight assume of a global).
pub const BLOB_ALIGN: usize = ARENA_ALIGN;

/// One named blob of the object.
#[derive(Debug, Clone)]
pub struct Blob {
    /// Its global symbol.
    pub symbol: String,
    /// Its size in bytes.
    pub len: usize,
}

/// The ELF class of a target: 64-bit for x86-64 and aarch64, 32-bit for Cortex-M.
#[derive(Debug, Clone, Copy)]
struct Class {
    elf64: bool,
}

impl Class {
    fn of(arch: Arch) -> Class {
        Class {
            elf64: arch != Arch::Arm,
        }
    }
    fn ehdr(self) -> usize {
        if self.elf64 { 64 } else { 52 }
    }
    fn shdr(self) -> usize {
        if self.elf64 { 64 } else { 40 }
    }
    fn sym(self) -> usize {
        if self.elf64 { 24 } else { 16 }
    }
    /// An address-sized field (`Elf64_Addr`/`Elf64_Off`/`Elf64_Xword` or their 32-bit forms).
    fn word(self, out: &mut Vec<u8>, v: u64) {
        if self.elf64 {
            out.extend(v.to_le_bytes());
        } else {
            out.extend((v as u32).to_le_bytes());
        }
    }
}

/// The default name of the weights' section: `.rodata`, which every linker script places with
/// the read-only data. Microcontroller builds name their own (`.rodata.xla_aot.<model>`, see
/// `docs/microcontrollers.md`).
pub const DEFAULT_SECTION: &str = ".rodata";

/// Section names after the weights' own, NUL-separated.
const SHSTRTAB_TAIL: &[u8] = b".note.GNU-stack\0.symtab\0.strtab\0.shstrtab\0";
/// Section indices: null, weights, .note.GNU-stack, .symtab, .strtab, .shstrtab.
const SECTIONS: usize = 6;
const RODATA: u16 = 1;

/// The section-name table for a weights section called `section`, and the offsets of the
/// names in it (weights, note, symtab, strtab, shstrtab).
fn shstrtab(section: &str) -> (Vec<u8>, [u32; 5]) {
    let mut t = vec![0u8];
    t.extend(section.as_bytes());
    t.push(0);
    let note = t.len() as u32;
    t.extend(SHSTRTAB_TAIL);
    let names = [
        1,
        note,
        note + 16,      // after ".note.GNU-stack\0"
        note + 16 + 8,  // after ".symtab\0"
        note + 16 + 16, // after ".strtab\0"
    ];
    (t, names)
}

/// Where everything goes.
struct Layout {
    /// Offset of each blob in the weights section.
    at: Vec<usize>,
    rodata: usize,
    rodata_len: usize,
    symtab: usize,
    strtab: usize,
    strtab_len: usize,
    shstrtab: usize,
    shstrtab_len: usize,
    shdrs: usize,
}

fn align(n: usize, a: usize) -> usize {
    n.div_ceil(a) * a
}

fn layout(c: Class, blobs: &[Blob], section: &str) -> Layout {
    let mut at = Vec::with_capacity(blobs.len());
    let mut end = 0;
    for b in blobs {
        let o = align(end, BLOB_ALIGN);
        at.push(o);
        end = o + b.len;
    }
    let rodata = align(c.ehdr(), BLOB_ALIGN);
    let symtab = align(rodata + end, 8);
    let strtab = symtab + c.sym() * (blobs.len() + 1);
    let strtab_len = 1 + blobs.iter().map(|b| b.symbol.len() + 1).sum::<usize>();
    let shstrtab = strtab + strtab_len;
    let shstrtab_len = section.len() + 2 + SHSTRTAB_TAIL.len();
    let shdrs = align(shstrtab + shstrtab_len, 8);
    Layout {
        at,
        rodata,
        rodata_len: end,
        symtab,
        strtab,
        strtab_len,
        shstrtab,
        shstrtab_len,
        shdrs,
    }
}

/// The size of the object [`write_object`] writes for `blobs` in section `section`.
pub fn object_len(arch: Arch, blobs: &[Blob], section: &str) -> usize {
    let c = Class::of(arch);
    layout(c, blobs, section).shdrs + c.shdr() * SECTIONS
}

fn machine(arch: Arch) -> u16 {
    match arch {
        Arch::X86_64 => 62,   // EM_X86_64
        Arch::Aarch64 => 183, // EM_AARCH64
        Arch::Arm => 40,      // EM_ARM
        Arch::Nvptx64 => unreachable!("data objects are for the host CPU"),
    }
}

/// `e_flags`: for Arm, EABI version 5 with the hard-float ABI (`EF_ARM_EABI_VER5 |
/// EF_ARM_ABI_FLOAT_HARD`, what LLVM writes for `*-eabihf`), so a linker mixes it with the code.
fn flags(arch: Arch) -> u32 {
    match arch {
        Arch::Arm => 0x0500_0400,
        _ => 0,
    }
}

struct Shdr {
    name: u32,
    ty: u32,
    flags: u64,
    offset: usize,
    size: usize,
    link: u32,
    info: u32,
    align: u64,
    entsize: u64,
}

fn push_shdr(c: Class, out: &mut Vec<u8>, s: &Shdr) {
    out.extend(s.name.to_le_bytes());
    out.extend(s.ty.to_le_bytes());
    c.word(out, s.flags);
    c.word(out, 0); // sh_addr
    c.word(out, s.offset as u64);
    c.word(out, s.size as u64);
    out.extend(s.link.to_le_bytes());
    out.extend(s.info.to_le_bytes());
    c.word(out, s.align);
    c.word(out, s.entsize);
}

/// Appends to `out` the object (for a host of `arch`) defining `blobs` in section `section`, each
/// filled by `fill`.
pub fn write_object(
    arch: Arch,
    blobs: &[Blob],
    section: &str,
    out: &mut Vec<u8>,
    mut fill: impl FnMut(usize, &mut [u8]),
) {
    let c = Class::of(arch);
    let l = layout(c, blobs, section);
    let (
        names,
        [
            name_rodata,
            name_note,
            name_symtab,
            name_strtab,
            name_shstrtab,
        ],
    ) = shstrtab(section);
    let base = out.len();
    // ELF header.
    out.extend(b"\x7fELF");
    // 64- or 32-bit, little endian, version 1, System V ABI.
    out.extend([if c.elf64 { 2 } else { 1 }, 1, 1, 0]);
    out.extend([0u8; 8]);
    out.extend(1u16.to_le_bytes()); // ET_REL
    out.extend(machine(arch).to_le_bytes());
    out.extend(1u32.to_le_bytes()); // EV_CURRENT
    c.word(out, 0); // e_entry
    c.word(out, 0); // e_phoff
    c.word(out, l.shdrs as u64);
    out.extend(flags(arch).to_le_bytes());
    out.extend((c.ehdr() as u16).to_le_bytes());
    out.extend(0u16.to_le_bytes()); // e_phentsize
    out.extend(0u16.to_le_bytes()); // e_phnum
    out.extend((c.shdr() as u16).to_le_bytes());
    out.extend((SECTIONS as u16).to_le_bytes());
    out.extend(5u16.to_le_bytes()); // e_shstrndx
    debug_assert_eq!(out.len() - base, c.ehdr());
    // The weights section: the blobs, each written in place.
    out.resize(base + l.rodata + l.rodata_len, 0);
    for (i, b) in blobs.iter().enumerate() {
        let at = base + l.rodata + l.at[i];
        fill(i, &mut out[at..at + b.len]);
    }
    // .symtab: the null symbol, then one global hidden object per blob.
    out.resize(base + l.symtab, 0);
    out.resize(out.len() + c.sym(), 0);
    let mut name = 1u32;
    for (i, b) in blobs.iter().enumerate() {
        out.extend(name.to_le_bytes());
        let (info, other) = (0x11u8, 2u8); // STB_GLOBAL << 4 | STT_OBJECT, STV_HIDDEN
        if c.elf64 {
            out.push(info);
            out.push(other);
            out.extend(RODATA.to_le_bytes());
            out.extend((l.at[i] as u64).to_le_bytes());
            out.extend((b.len as u64).to_le_bytes());
        } else {
            out.extend((l.at[i] as u32).to_le_bytes());
            out.extend((b.len as u32).to_le_bytes());
            out.push(info);
            out.push(other);
            out.extend(RODATA.to_le_bytes());
        }
        name += b.symbol.len() as u32 + 1;
    }
    // .strtab, .shstrtab.
    out.push(0);
    for b in blobs {
        out.extend(b.symbol.as_bytes());
        out.push(0);
    }
    debug_assert_eq!(names.len(), l.shstrtab_len);
    out.extend(&names);
    out.resize(base + l.shdrs, 0);
    // Section headers.
    out.resize(out.len() + c.shdr(), 0);
    let progbits = |name, flags, offset, size, align| Shdr {
        name,
        ty: 1, // SHT_PROGBITS
        flags,
        offset,
        size,
        link: 0,
        info: 0,
        align,
        entsize: 0,
    };
    push_shdr(
        c,
        out,
        &progbits(name_rodata, 2, l.rodata, l.rodata_len, BLOB_ALIGN as u64), // SHF_ALLOC
    );
    push_shdr(c, out, &progbits(name_note, 0, l.symtab, 0, 1));
    push_shdr(
        c,
        out,
        &Shdr {
            name: name_symtab,
            ty: 2, // SHT_SYMTAB
            flags: 0,
            offset: l.symtab,
            size: c.sym() * (blobs.len() + 1),
            link: 4, // .strtab
            info: 1, // the first global symbol
            align: if c.elf64 { 8 } else { 4 },
            entsize: c.sym() as u64,
        },
    );
    let strtab = |name, offset, size| Shdr {
        name,
        ty: 3, // SHT_STRTAB
        flags: 0,
        offset,
        size,
        link: 0,
        info: 0,
        align: 1,
        entsize: 0,
    };
    push_shdr(c, out, &strtab(name_strtab, l.strtab, l.strtab_len));
    push_shdr(c, out, &strtab(name_shstrtab, l.shstrtab, l.shstrtab_len));
    debug_assert_eq!(out.len() - base, object_len(arch, blobs, section));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_is_exact_and_blobs_are_aligned() {
        let blobs = vec![
            Blob {
                symbol: "m_w1".into(),
                len: 3,
            },
            Blob {
                symbol: "m_w22".into(),
                len: 100,
            },
        ];
        for arch in [Arch::X86_64, Arch::Arm] {
            let mut out = vec![7u8; 5];
            write_object(arch, &blobs, DEFAULT_SECTION, &mut out, |i, d| {
                d.fill(i as u8 + 1)
            });
            assert_eq!(out.len() - 5, object_len(arch, &blobs, DEFAULT_SECTION));
            let o = &out[5..];
            assert_eq!(&o[..4], b"\x7fELF");
            assert_eq!(o[4], if arch == Arch::Arm { 1 } else { 2 });
            assert_eq!(&o[64..67], &[1, 1, 1]);
            assert_eq!(o[64 + 64], 2);
        }
        let (t, [w, note, symtab, strtab, shstrtab]) = shstrtab(".rodata.xla_aot.m");
        let at = |o: u32| {
            let rest = &t[o as usize..];
            std::str::from_utf8(&rest[..rest.iter().position(|&b| b == 0).unwrap()]).unwrap()
        };
        assert_eq!(
            [at(w), at(note), at(symtab), at(strtab), at(shstrtab)],
            [
                ".rodata.xla_aot.m",
                ".note.GNU-stack",
                ".symtab",
                ".strtab",
                ".shstrtab"
            ]
        );
    }
}
