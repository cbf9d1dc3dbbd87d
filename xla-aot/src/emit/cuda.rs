//! The CUDA data object of a library: the PTX text and the device image of the weights, as
//! read-only symbols in an ELF object for the host CPU, written with the `object` crate.
//!
//! Contract: [`data_object`] defines `<name>_ptx` (the PTX text, NUL-terminated as
//! `cuModuleLoadData` reads it), `<name>_ptx_len` (its length without the NUL, a `uint64_t`) and
//! `<name>_cuda_weights` (the bytes the launcher uploads to the start of the device arena, hidden:
//! only the launcher reads it). Deterministic; the object has an empty `.note.GNU-stack` so
//! linking it does not ask for an executable stack.

use crate::codegen::gpu::cuda_host::{ptx_symbol, weights_symbol};
use crate::codegen::gpu::ptx::PtxModule;
use crate::target::Arch;
use object::write::{Object, StandardSection, Symbol, SymbolSection};
use object::{
    Architecture, BinaryFormat, Endianness, SectionKind, SymbolFlags, SymbolKind, SymbolScope,
};

/// The symbols [`data_object`] defines (for the archive index).
pub fn data_symbols(name: &str) -> Vec<String> {
    vec![
        ptx_symbol(name),
        format!("{}_len", ptx_symbol(name)),
        weights_symbol(name),
    ]
}

/// The data object of model `name` for a host of `arch`.
pub fn data_object(name: &str, ptx: &PtxModule, arch: Arch) -> Vec<u8> {
    let architecture = match arch {
        Arch::X86_64 => Architecture::X86_64,
        Arch::Aarch64 => Architecture::Aarch64,
        Arch::Nvptx64 | Arch::Arm => unreachable!("the host of a CUDA target is x86_64 or aarch64"),
    };
    let mut obj = Object::new(BinaryFormat::Elf, architecture, Endianness::Little);
    let rodata = obj.section_id(StandardSection::ReadOnlyData);
    let mut add = |symbol: String, data: &[u8], align: u64, scope: SymbolScope| {
        let sym = obj.add_symbol(Symbol {
            name: symbol.into_bytes(),
            value: 0,
            size: 0,
            kind: SymbolKind::Data,
            scope,
            weak: false,
            section: SymbolSection::Undefined,
            flags: SymbolFlags::None,
        });
        obj.add_symbol_data(sym, rodata, data, align);
    };
    let mut text = ptx.ptx.as_bytes().to_vec();
    let len = text.len() as u64;
    text.push(0);
    add(ptx_symbol(name), &text, 16, SymbolScope::Dynamic);
    add(
        format!("{}_len", ptx_symbol(name)),
        &len.to_le_bytes(),
        8,
        SymbolScope::Dynamic,
    );
    // At least one byte, so the symbol has an address even for a model without weights.
    let weights = if ptx.layout.weights.is_empty() {
        vec![0]
    } else {
        ptx.layout.weights.clone()
    };
    add(weights_symbol(name), &weights, 64, SymbolScope::Linkage);
    let stack = obj.add_section(Vec::new(), b".note.GNU-stack".to_vec(), SectionKind::Other);
    obj.section_mut(stack).flags = object::SectionFlags::Elf {
        sh_type: object::elf::SHT_PROGBITS,
        sh_flags: object::elf::SectionFlags(0),
    };
    obj.write().expect("an in-memory ELF object always writes")
}
