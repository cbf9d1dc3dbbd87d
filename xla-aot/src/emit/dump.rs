//! `--dump-to DIR`: every stage of a compilation as files, like XLA's `--xla_dump_to`.
//!
//! Contract: [`write_dump`] writes `NN.<stage>.hlo.txt` (00 = as parsed, then one file per pass
//! that changed the module), `buffers.txt` (the buffer plan), `fusion.log` (every fusion decision
//! with its reason), `memory.svg` (the arena over the schedule), `graph.before.dot` and
//! `graph.after.dot` (and `.svg` when Graphviz is installed), `<name>.ll` and `<name>.opt.ll` (LLVM
//! IR before and after optimisation), `kernels/<kernel>.ll` and `kernels/<kernel>.opt.ll` (each
//! kernel's IR before and after), `<name>.s` (target assembly) and, for a CUDA target,
//! `<name>.ptx` and `launches.txt` (the device arena and every launch), all deterministic.

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
            std::fs::write(kdir.join(format!("{name}.ll")), before)?;
            std::fs::write(kdir.join(format!("{name}.opt.ll")), after)?;
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
