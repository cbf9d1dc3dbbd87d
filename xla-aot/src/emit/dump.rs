//! `--dump-to DIR`: every stage of a compilation as files, like XLA's `--xla_dump_to`.
//!
//! Contract: [`write_dump`] writes `NN.<stage>.hlo.txt` (00 = as parsed, then one file per pass
//! that changed the module), `buffers.txt` (the buffer plan), `fusion.log` (every fusion decision
//! with its reason), `memory.svg` (the arena over the schedule), `graph.before.dot` and
//! `graph.after.dot` (and `.svg` when Graphviz is installed), `<name>.ll` and `<name>.opt.ll` (LLVM
//! IR before and after optimisation), `kernels/<kernel>.ll` and `kernels/<kernel>.opt.ll` (each
//! kernel's IR before and after), `<name>.s` (target assembly) and, for a CUDA target,
//! `<name>.ptx` and `launches.txt` (the device arena and every launch), all deterministic.
//! Kernel names carry tensor names of any length; a kernel file's stem longer than
//! [`MAX_DUMP_STEM`] bytes is cut and given a hash of the full name ([`file_stem`]), so a valid
//! model never fails only because it is dumped.

use super::Artefacts;
use crate::arena::plan_text;
use std::path::Path;

/// Writes the dump files of `a` into `dir` (created if needed).
pub fn write_dump(a: &Artefacts, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (i, (stage, text)) in a.stages.iter().enumerate() {
        std::fs::write(dir.join(format!("{i:02}.{stage}.hlo.txt")), text)?;
    }
    std::fs::write(dir.join("buffers.txt"), plan_text(&a.plan))?;
    let mut fusion_log = String::new();
    for r in a.pass_records.iter().filter(|r| r.name == "fusion") {
        for line in &r.log {
            fusion_log.push_str(line);
            fusion_log.push('\n');
        }
    }
    std::fs::write(dir.join("fusion.log"), fusion_log)?;
    if let Some((before, after)) = &a.ir {
        std::fs::write(dir.join(format!("{}.ll", a.name)), before)?;
        std::fs::write(dir.join(format!("{}.opt.ll", a.name)), after)?;
    }
    if let Some(modules) = &a.modules {
        let (before, after) = &**modules;
        for (stem, m) in [("graph.before", before), ("graph.after", after)] {
            let dot = dir.join(format!("{stem}.dot"));
            std::fs::write(&dot, super::graphs::dot_graph(m))?;
            // Rendered only when Graphviz is installed; its absence is not an error.
            let _ = std::process::Command::new("dot")
                .arg("-Tsvg")
                .arg(&dot)
                .arg("-o")
                .arg(dir.join(format!("{stem}.svg")))
                .output();
        }
        std::fs::write(
            dir.join("memory.svg"),
            super::graphs::memory_svg(after, &a.plan),
        )?;
    }
    if !a.kernel_ir.is_empty() {
        let kdir = dir.join("kernels");
        std::fs::create_dir_all(&kdir)?;
        for (name, before, after) in &a.kernel_ir {
            let stem = file_stem(name);
            std::fs::write(kdir.join(format!("{stem}.ll")), before)?;
            std::fs::write(kdir.join(format!("{stem}.opt.ll")), after)?;
        }
    }
    if let Some(asm) = &a.assembly {
        std::fs::write(dir.join(format!("{}.s", a.name)), asm)?;
    }
    if let Some(p) = &a.ptx {
        std::fs::write(dir.join(format!("{}.ptx", a.name)), &p.ptx)?;
        std::fs::write(dir.join("launches.txt"), p.launch_plan_text())?;
    }
    Ok(())
}

/// Longest file stem a dump writes: file systems limit a name to 255 bytes (ext4, APFS, NTFS in
/// UTF-16 units), and the stem still takes a suffix such as `.opt.ll`; 160 leaves room and keeps
/// names readable in a listing.
pub const MAX_DUMP_STEM: usize = 160;

/// `name` when it has at most [`MAX_DUMP_STEM`] bytes, otherwise its head (cut on a character
/// boundary) and `-` and 16 hex digits of its FNV-1a hash, so distinct long names stay distinct.
pub fn file_stem(name: &str) -> String {
    if name.len() <= MAX_DUMP_STEM {
        return name.to_string();
    }
    // FNV-1a, 64-bit: deterministic across runs and platforms (std's hasher is not).
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let mut cut = MAX_DUMP_STEM - 17;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{hash:016x}", &name[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_stems_are_cut_and_hashed() {
        assert_eq!(file_stem("m_k0_y"), "m_k0_y");
        let a = file_stem(&"a".repeat(300));
        let b = file_stem(&format!("{}b", "a".repeat(299)));
        assert_eq!(a.len(), MAX_DUMP_STEM);
        assert_ne!(a, b);
    }
}
