//! A library's flash and RAM footprint, read from its ELF objects: what a microcontroller build
//! states in its header and manifest (`docs/microcontrollers.md`).
//!
//! Contract: [`sections`] lists the sections of a relocatable ELF object (32- or 64-bit, little
//! endian) with their sizes and flags, or `None` for bytes that are not one; [`Footprint::of`]
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
}

const SHF_WRITE: u64 = 1;
const SHF_ALLOC: u64 = 2;
const SHF_EXECINSTR: u64 = 4;
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
    let header = |i: u16| -> Option<(u32, u32, u64, u64, u64)> {
        let at = usize::try_from(shoff).ok()? + usize::from(i) * usize::from(shentsize);
        let (w, off) = if elf64 { (8, 8) } else { (4, 8) };
        let name = read_u32(elf, at)?;
        let ty = read_u32(elf, at + 4)?;
        let flags = word(at + off)?;
        let offset = word(at + off + 2 * w)?;
        let size = word(at + off + 3 * w)?;
        Some((name, ty, flags, offset, size))
    };
    let (_, _, _, str_off, str_len) = header(shstrndx)?;
    let strtab =
        elf.get(usize::try_from(str_off).ok()?..usize::try_from(str_off + str_len).ok()?)?;
    (0..shnum)
        .map(|i| {
            let (name, ty, flags, _, size) = header(i)?;
            let rest = strtab.get(name as usize..)?;
            let end = rest.iter().position(|&b| b == 0)?;
            Some(Section {
                name: String::from_utf8_lossy(&rest[..end]).into_owned(),
                size,
                ty,
                flags,
            })
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
            } else if s.flags & SHF_WRITE == 0 {
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
    pub fn header(&self, upper: &str, target: &str, weights_section: &str) -> String {
        format!(
            "\n/* Memory ({target}): what this library puts in flash and in RAM, summed over its \
             objects\n \
             * as `arm-none-eabi-size` reports them (its `text` column is TEXT + RODATA). The \
             linker may\n \
             * add a few bytes of alignment between objects. The caller's inputs and outputs are \
             not counted. */\n\
             #define {upper}_TEXT_BYTES {text}\n\
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
