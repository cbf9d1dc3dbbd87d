//! Relocatable ELF objects of read-only data, written straight into the buffer that holds them
//! (the static library being built): the weights the CPU code declares `external` (see
//! `codegen/core/weights.rs`) go into the library this way instead of through LLVM constants.
//!
//! Contract: [`object_len`] is the exact size [`write_object`] appends, so an archive can write
//! the member header first and the object after it with no second copy. The object holds one
//! `.rodata` section (blob `i` at a multiple of [`BLOB_ALIGN`]), one global hidden `STT_OBJECT`
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
    /// An earlier blob of the same bytes (a multi-ISA library's variants whose packings agree,
    /// `compile/multi.rs`): this symbol is defined at that blob's address and is not filled.
    pub same_as: Option<usize>,
}

const EHDR: usize = 64;
const SHDR: usize = 64;
const SYM: usize = 24;
/// Section names, NUL-separated, and each one's offset in that table.
const SHSTRTAB: &[u8] = b"\0.rodata\0.note.GNU-stack\0.symtab\0.strtab\0.shstrtab\0";
const NAME_RODATA: u32 = 1;
const NAME_NOTE: u32 = 9;
const NAME_SYMTAB: u32 = 25;
const NAME_STRTAB: u32 = 33;
const NAME_SHSTRTAB: u32 = 41;
/// Section indices: null, .rodata, .note.GNU-stack, .symtab, .strtab, .shstrtab.
const SECTIONS: usize = 6;
const RODATA: u16 = 1;

/// Where everything goes.
struct Layout {
    /// Offset of each blob in `.rodata`.
    at: Vec<usize>,
    rodata: usize,
    rodata_len: usize,
    symtab: usize,
    strtab: usize,
    strtab_len: usize,
    shstrtab: usize,
    shdrs: usize,
}

fn align(n: usize, a: usize) -> usize {
    n.div_ceil(a) * a
}

fn layout(blobs: &[Blob]) -> Layout {
    let mut at = Vec::with_capacity(blobs.len());
    let mut end = 0;
    for b in blobs {
        if let Some(j) = b.same_as {
            at.push(at[j]);
            continue;
        }
        let o = align(end, BLOB_ALIGN);
        at.push(o);
        end = o + b.len;
    }
    let rodata = align(EHDR, BLOB_ALIGN);
    let symtab = align(rodata + end, 8);
    let strtab = symtab + SYM * (blobs.len() + 1);
    let strtab_len = 1 + blobs.iter().map(|b| b.symbol.len() + 1).sum::<usize>();
    let shstrtab = strtab + strtab_len;
    let shdrs = align(shstrtab + SHSTRTAB.len(), 8);
    Layout {
        at,
        rodata,
        rodata_len: end,
        symtab,
        strtab,
        strtab_len,
        shstrtab,
        shdrs,
    }
}

/// The size of the object [`write_object`] writes for `blobs`.
pub fn object_len(blobs: &[Blob]) -> usize {
    layout(blobs).shdrs + SHDR * SECTIONS
}

fn machine(arch: Arch) -> u16 {
    match arch {
        Arch::X86_64 => 62,   // EM_X86_64
        Arch::Aarch64 => 183, // EM_AARCH64
        Arch::Nvptx64 => unreachable!("data objects are for the host CPU"),
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

fn push_shdr(out: &mut Vec<u8>, s: &Shdr) {
    out.extend(s.name.to_le_bytes());
    out.extend(s.ty.to_le_bytes());
    out.extend(s.flags.to_le_bytes());
    out.extend(0u64.to_le_bytes()); // sh_addr
    out.extend((s.offset as u64).to_le_bytes());
    out.extend((s.size as u64).to_le_bytes());
    out.extend(s.link.to_le_bytes());
    out.extend(s.info.to_le_bytes());
    out.extend(s.align.to_le_bytes());
    out.extend(s.entsize.to_le_bytes());
}

/// Appends to `out` the object (for a host of `arch`) defining `blobs`, each filled by `fill`.
pub fn write_object(
    arch: Arch,
    blobs: &[Blob],
    out: &mut Vec<u8>,
    mut fill: impl FnMut(usize, &mut [u8]),
) {
    let l = layout(blobs);
    let base = out.len();
    // ELF header.
    out.extend(b"\x7fELF");
    out.extend([2, 1, 1, 0]); // 64-bit, little endian, version 1, System V ABI
    out.extend([0u8; 8]);
    out.extend(1u16.to_le_bytes()); // ET_REL
    out.extend(machine(arch).to_le_bytes());
    out.extend(1u32.to_le_bytes()); // EV_CURRENT
    out.extend(0u64.to_le_bytes()); // e_entry
    out.extend(0u64.to_le_bytes()); // e_phoff
    out.extend((l.shdrs as u64).to_le_bytes());
    out.extend(0u32.to_le_bytes()); // e_flags
    out.extend((EHDR as u16).to_le_bytes());
    out.extend(0u16.to_le_bytes()); // e_phentsize
    out.extend(0u16.to_le_bytes()); // e_phnum
    out.extend((SHDR as u16).to_le_bytes());
    out.extend((SECTIONS as u16).to_le_bytes());
    out.extend(5u16.to_le_bytes()); // e_shstrndx
    debug_assert_eq!(out.len() - base, EHDR);
    // .rodata: the blobs, each written in place.
    out.resize(base + l.rodata + l.rodata_len, 0);
    for (i, b) in blobs
        .iter()
        .enumerate()
        .filter(|(_, b)| b.same_as.is_none())
    {
        let at = base + l.rodata + l.at[i];
        fill(i, &mut out[at..at + b.len]);
    }
    // .symtab: the null symbol, then one global hidden object per blob.
    out.resize(base + l.symtab, 0);
    out.extend([0u8; SYM]);
    let mut name = 1u32;
    for (i, b) in blobs.iter().enumerate() {
        out.extend(name.to_le_bytes());
        out.push(0x11); // STB_GLOBAL << 4 | STT_OBJECT
        out.push(2); // STV_HIDDEN
        out.extend(RODATA.to_le_bytes());
        out.extend((l.at[i] as u64).to_le_bytes());
        out.extend((b.len as u64).to_le_bytes());
        name += b.symbol.len() as u32 + 1;
    }
    // .strtab, .shstrtab.
    out.push(0);
    for b in blobs {
        out.extend(b.symbol.as_bytes());
        out.push(0);
    }
    out.extend(SHSTRTAB);
    out.resize(base + l.shdrs, 0);
    // Section headers.
    out.extend([0u8; SHDR]);
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
        out,
        &progbits(NAME_RODATA, 2, l.rodata, l.rodata_len, BLOB_ALIGN as u64), // SHF_ALLOC
    );
    push_shdr(out, &progbits(NAME_NOTE, 0, l.symtab, 0, 1));
    push_shdr(
        out,
        &Shdr {
            name: NAME_SYMTAB,
            ty: 2, // SHT_SYMTAB
            flags: 0,
            offset: l.symtab,
            size: SYM * (blobs.len() + 1),
            link: 4, // .strtab
            info: 1, // the first global symbol
            align: 8,
            entsize: SYM as u64,
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
    push_shdr(out, &strtab(NAME_STRTAB, l.strtab, l.strtab_len));
    push_shdr(out, &strtab(NAME_SHSTRTAB, l.shstrtab, SHSTRTAB.len()));
    debug_assert_eq!(out.len() - base, object_len(blobs));
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
                same_as: None,
            },
            Blob {
                symbol: "m_w22".into(),
                len: 100,
                same_as: None,
            },
        ];
        let mut out = vec![7u8; 5];
        write_object(Arch::X86_64, &blobs, &mut out, |i, d| d.fill(i as u8 + 1));
        assert_eq!(out.len() - 5, object_len(&blobs));
        let o = &out[5..];
        assert_eq!(&o[..4], b"\x7fELF");
        assert_eq!(&o[64..67], &[1, 1, 1]);
        assert_eq!(o[64 + 64], 2);
        assert_eq!(&SHSTRTAB[NAME_SHSTRTAB as usize..], b".shstrtab\0");
        assert_eq!(
            &SHSTRTAB[NAME_NOTE as usize..NAME_SYMTAB as usize],
            b".note.GNU-stack\0"
        );
    }

    #[test]
    fn a_blob_the_same_as_another_takes_no_bytes() {
        let blob = |symbol: &str, same_as| Blob {
            symbol: symbol.into(),
            len: 100,
            same_as,
        };
        let one = vec![blob("a", None)];
        let two = vec![blob("a", None), blob("b", Some(0))];
        let l = layout(&two);
        assert_eq!(l.at, [0, 0]);
        assert_eq!(l.rodata_len, layout(&one).rodata_len);
        let mut filled = Vec::new();
        write_object(Arch::X86_64, &two, &mut Vec::new(), |i, _| filled.push(i));
        assert_eq!(filled, [0]);
    }
}
