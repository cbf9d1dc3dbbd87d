//! A library's flash and RAM footprint, read from its ELF objects: what a microcontroller build
//! states in its header and manifest (`docs/microcontrollers.md`).
//!
//! Contract: [`sections`] lists the sections of a relocatable ELF object (32- or 64-bit, little
//! endian) with their sizes and flags, or `None` for bytes that are not one; [`symbols`] its
//! symbols and [`functions`] its function symbols with their sizes (what a kernel's code takes); [`Footprint::of`]
//! sums the allocated sections the way `size` (Berkeley format) does: executable → `text`,
//! other read-only → `rodata`, writable with contents → `data`, writable without (`NOBITS`) →
//! `bss`; `weights` is the part of `rodata` in the weights section. Flash is text + rodata +
//! data (initialised data is copied from flash at start-up); RAM is data + bss + the arena. The
//! linker may add alignment padding between members: a few bytes per object.

use serde::Serialize;

/// One section of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub size: u64,
    /// `sh_type`.
    pub ty: u32,
    /// `sh_flags`.
    pub flags: u64,
    /// `sh_offset`, `sh_link` and `sh_entsize`.
    pub offset: u64,
    pub link: u32,
    pub entsize: u64,
}

const SHF_WRITE: u64 = 1;
const SHF_ALLOC: u64 = 2;
const SHF_EXECINSTR: u64 = 4;

impl Section {
    /// Allocated, neither writable nor executable: what `Footprint::rodata` counts.
    pub fn is_rodata(&self) -> bool {
        self.flags & (SHF_ALLOC | SHF_WRITE | SHF_EXECINSTR) == SHF_ALLOC
    }
}
const SHT_NOBITS: u32 = 8;

fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The sections of ELF object `elf`, in order (`None`: not a little-endian ELF file).
pub fn sections(elf: &[u8]) -> Option<Vec<Section>> {
    if elf.get(..4)? != b"\x7fELF" || *elf.get(5)? != 1 {
        return None;
    }
    let elf64 = *elf.get(4)? == 2;
    // Address-sized fields.
    let word = |at: usize| {
        if elf64 {
            read_u64(elf, at)
        } else {
            read_u32(elf, at).map(u64::from)
        }
    };
    let (shoff, shentsize, shnum, shstrndx) = if elf64 {
        (
            word(0x28)?,
            read_u16(elf, 0x3a)?,
            read_u16(elf, 0x3c)?,
            read_u16(elf, 0x3e)?,
        )
    } else {
        (
            word(0x20)?,
            read_u16(elf, 0x2e)?,
            read_u16(elf, 0x30)?,
            read_u16(elf, 0x32)?,
        )
    };
    // (name, type, flags, offset, size, link, entsize)
    let header = |i: u16| -> Option<(u32, u32, u64, u64, u64, u32, u64)> {
        let at = usize::try_from(shoff).ok()? + usize::from(i) * usize::from(shentsize);
        let (w, off) = if elf64 { (8, 8) } else { (4, 8) };
        let name = read_u32(elf, at)?;
        let ty = read_u32(elf, at + 4)?;
        let flags = word(at + off)?;
        let offset = word(at + off + 2 * w)?;
        let size = word(at + off + 3 * w)?;
        let link = read_u32(elf, at + off + 4 * w)?;
        let entsize = word(at + off + 4 * w + 8 + w)?;
        Some((name, ty, flags, offset, size, link, entsize))
    };
    let (_, _, _, str_off, str_len, _, _) = header(shstrndx)?;
    let strtab =
        elf.get(usize::try_from(str_off).ok()?..usize::try_from(str_off + str_len).ok()?)?;
    (0..shnum)
        .map(|i| {
            let (name, ty, flags, offset, size, link, entsize) = header(i)?;
            Some(Section {
                name: c_string(strtab, name as usize)?,
                size,
                ty,
                flags,
                offset,
                link,
                entsize,
            })
        })
        .collect()
}

/// The NUL-terminated string at `at` of string table `table`.
fn c_string(table: &[u8], at: usize) -> Option<String> {
    let rest = table.get(at..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

const SHT_SYMTAB: u32 = 2;
const STT_FUNC: u8 = 2;

/// One symbol of an object's symbol table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    /// `STT_*` (the low nibble of `st_info`).
    pub kind: u8,
    /// The index of its section (`st_shndx`).
    pub section: u16,
    pub value: u64,
    pub size: u64,
}

/// The symbols of ELF object `elf` (local ones too), in table order.
pub fn symbols(elf: &[u8]) -> Option<Vec<Symbol>> {
    let elf64 = *elf.get(4)? == 2;
    let secs = sections(elf)?;
    let mut out = Vec::new();
    for symtab in secs.iter().filter(|s| s.ty == SHT_SYMTAB) {
        let names = secs.get(symtab.link as usize)?;
        let at = |o: u64| usize::try_from(o).ok();
        let table = elf.get(at(names.offset)?..at(names.offset + names.size)?)?;
        let entsize = usize::try_from(symtab.entsize).ok()?.max(1);
        for k in 0..usize::try_from(symtab.size).ok()? / entsize {
            let e = at(symtab.offset)? + k * entsize;
            let (name, info, section, value, size) = if elf64 {
                (
                    read_u32(elf, e)?,
                    *elf.get(e + 4)?,
                    read_u16(elf, e + 6)?,
                    read_u64(elf, e + 8)?,
                    read_u64(elf, e + 16)?,
                )
            } else {
                (
                    read_u32(elf, e)?,
                    *elf.get(e + 12)?,
                    read_u16(elf, e + 14)?,
                    u64::from(read_u32(elf, e + 4)?),
                    u64::from(read_u32(elf, e + 8)?),
                )
            };
            out.push(Symbol {
                name: c_string(table, name as usize)?,
                kind: info & 0xf,
                section,
                value,
                size,
            });
        }
    }
    Some(out)
}

/// The function symbols of ELF object `elf` (local ones too) with their sizes in bytes.
pub fn functions(elf: &[u8]) -> Option<Vec<(String, u64)>> {
    Some(
        symbols(elf)?
            .into_iter()
            .filter(|s| s.kind == STT_FUNC)
            .map(|s| (s.name, s.size))
            .collect(),
    )
}

/// Bytes of code of each of `kernels` in the functions `functions` lists: the function named
/// like the kernel and its helpers (`<kernel>.body`, `<kernel>.task`, ...).
pub fn kernel_text(functions: &[(String, u64)], kernels: &[&str]) -> Vec<u64> {
    kernels
        .iter()
        .map(|k| {
            functions
                .iter()
                .filter(|(f, _)| f == k || f.strip_prefix(k).is_some_and(|r| r.starts_with('.')))
                .map(|(_, s)| s)
                .sum()
        })
        .collect()
}

/// Bytes of a library by kind, summed over its objects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Footprint {
    /// Code (executable sections).
    pub text: u64,
    /// Read-only data: the weights and the kernels' constant tables.
    pub rodata: u64,
    /// Of `rodata`, the bytes in the weights section.
    pub weights: u64,
    /// Initialised writable data (held in flash, copied to RAM at start-up).
    pub data: u64,
    /// Zero-initialised writable data (the entry points' hook pointers).
    pub bss: u64,
    /// The arena the caller provides (RAM).
    pub arena: u64,
}

impl Footprint {
    /// Adds the allocated sections of `objects` (ELF bytes; others are skipped), with
    /// `weights_section` counted as weights, to a footprint with arena `arena`.
    pub fn of<'a>(
        objects: impl IntoIterator<Item = &'a [u8]>,
        weights_section: &str,
        arena: u64,
    ) -> Footprint {
        let mut f = Footprint {
            arena,
            ..Footprint::default()
        };
        for s in objects.into_iter().filter_map(sections).flatten() {
            if s.flags & SHF_ALLOC == 0 {
                continue;
            }
            if s.flags & SHF_EXECINSTR != 0 {
                f.text += s.size;
            } else if s.is_rodata() {
                f.rodata += s.size;
                if s.name == weights_section {
                    f.weights += s.size;
                }
            } else if s.ty == SHT_NOBITS {
                f.bss += s.size;
            } else {
                f.data += s.size;
            }
        }
        f
    }

    /// Flash: code, read-only data and the initial values of the writable data.
    pub fn flash(&self) -> u64 {
        self.text + self.rodata + self.data
    }

    /// RAM: the writable data and the arena.
    pub fn ram(&self) -> u64 {
        self.data + self.bss + self.arena
    }

    /// The header's memory block for model `name` (upper-case macro prefix `upper`).
    pub fn header(
        &self,
        upper: &str,
        target: &str,
        weights_section: &str,
        code_section: &str,
    ) -> String {
        format!(
            "\n/* Memory ({target}): what this library puts in flash and in RAM, summed over its \
             objects\n \
             * as `arm-none-eabi-size` reports them (its `text` column is TEXT + RODATA). The \
             linker may\n \
             * add a few bytes of alignment between objects. The caller's inputs and outputs are \
             not counted. */\n\
             #define {upper}_TEXT_BYTES {text}\n\
             #define {upper}_CODE_SECTION \"{code_section}\"\n\
             #define {upper}_RODATA_BYTES {rodata} /* of which weights: {upper}_WEIGHTS_BYTES */\n\
             #define {upper}_WEIGHTS_BYTES {weights}\n\
             #define {upper}_WEIGHTS_SECTION \"{weights_section}\"\n\
             #define {upper}_DATA_BYTES {data}\n\
             #define {upper}_BSS_BYTES {bss}\n\
             #define {upper}_FLASH_BYTES {flash} /* TEXT + RODATA + DATA */\n\
             #define {upper}_RAM_BYTES {ram} /* DATA + BSS + ARENA_SIZE */\n",
            text = self.text,
            rodata = self.rodata,
            weights = self.weights,
            data = self.data,
            bss = self.bss,
            flash = self.flash(),
            ram = self.ram(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit::data_object::{Blob, write_object};
    use crate::target::Arch;

    #[test]
    fn reads_back_the_data_objects_sections() {
        let blobs = vec![Blob {
            symbol: "m_w".into(),
            len: 100,
        }];
        for arch in [Arch::X86_64, Arch::Arm] {
            let mut out = Vec::new();
            write_object(arch, &blobs, ".rodata.xla_aot.m", &mut out, |_, _| {});
            let s = sections(&out).unwrap();
            assert_eq!(s[1].name, ".rodata.xla_aot.m");
            assert_eq!(s[1].size, 100);
            let f = Footprint::of([out.as_slice()], ".rodata.xla_aot.m", 64);
            assert_eq!(
                (f.rodata, f.weights, f.flash(), f.ram()),
                (100, 100, 100, 64)
            );
        }
        assert_eq!(sections(b"not elf"), None);
    }
}
