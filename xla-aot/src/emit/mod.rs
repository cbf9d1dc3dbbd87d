//! The writers of a compiled model: static library, header, manifest, Rust bindings, dumps.
//!
//! Contract: every writer is a pure function of what the compile path (`crate::compile`) produced
//! ([`Artefacts`]: for a CUDA target the archive also holds the launcher and the PTX data object,
//! and `<name>.ptx` is written beside it); nothing here optimises or generates code.
//! [`write_artefacts`] writes the files into the output directory through a temporary directory
//! beside them and renames each file into place, so an error never leaves a half-written library
//! behind.

pub mod archive;
pub mod bindings;
pub mod c_idents;
pub mod cuda;
pub mod data_object;
pub mod dump;
pub mod footprint;
pub mod graphs;
pub mod header;
pub mod kernel_rodata;
pub mod manifest;
pub mod sections;

use crate::arena::BufferPlan;
use crate::codegen::gpu::ptx::PtxModule;
use crate::codegen::{KernelInfo, cpu};
use crate::ir::Module;
use crate::passes::PassRecord;
use std::path::{Path, PathBuf};

/// Everything `xla-aot compile` writes.
pub struct Artefacts {
    /// Model name (file stem of every artefact).
    pub name: String,
    /// `<name>.o`.
    pub object: Vec<u8>,
    /// `lib<name>.a`.
    pub archive: Vec<u8>,
    /// Where in `archive` the weights' data object is (`data_object.rs`), when the model has
    /// weights of at least `codegen::core::weights::EXTERNAL_FROM` bytes: also written as
    /// `<name>_weights.o`, which `<name>.o` needs when linked on its own.
    pub weights_object: Option<std::ops::Range<usize>>,
    /// `<name>.h`.
    pub header: String,
    /// `<name>.json`.
    pub manifest: String,
    /// The buffer plan (for dumps and tests).
    pub plan: BufferPlan,
    /// Target assembly, when asked for.
    pub assembly: Option<String>,
    /// LLVM IR before and after optimisation, when asked for.
    pub ir: Option<(String, String)>,
    /// Each kernel's LLVM IR before and after optimisation: (kernel, before, after).
    pub kernel_ir: Vec<(String, String, String)>,
    /// The CPU kernels, in execution order.
    pub kernels: Vec<KernelInfo>,
    /// The module as parsed, then after each pass that changed it: (pass, HLO text).
    pub stages: Vec<(String, String)>,
    /// What each pass run did and how long it took.
    pub pass_records: Vec<PassRecord>,
    /// HLO instructions just before fusion (for the manifest's fusion statistics).
    pub instructions_before_fusion: usize,
    /// The module before and after the pipeline (for the dump's graphs).
    pub modules: Option<Box<(Module, Module)>>,
    /// A CUDA target's PTX module (`<name>.ptx`, and the launches for dumps and tests).
    pub ptx: Option<PtxModule>,
    /// With batch buckets: the dispatcher's plan and the declared batch (bindings, tests).
    pub batch: Option<(cpu::BatchPlan, usize)>,
    /// With `--weights external`: `<name>.weights`, the blob of every constant
    /// (`codegen/core/weights_blob.rs`).
    pub weights_blob: Option<Vec<u8>>,
}

/// Writes the artefacts into `dir` (created if needed); returns the paths written. On any error
/// nothing new is left behind: `dir` naming a file, or a directory where one of the files goes,
/// is found before anything is written, and a rename that still fails removes the files already
/// moved into place.
pub fn write_artefacts(a: &Artefacts, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    if dir.exists() && !dir.is_dir() {
        return Err(std::io::Error::other(
            "it is a file, not a directory (the output directory receives the library, header and manifest)",
        ));
    }
    let mut files: Vec<(String, &[u8])> = vec![
        (format!("{}.o", a.name), &a.object),
        (format!("lib{}.a", a.name), &a.archive),
        (format!("{}.h", a.name), a.header.as_bytes()),
        (format!("{}.json", a.name), a.manifest.as_bytes()),
    ];
    if let Some(r) = &a.weights_object {
        files.push((format!("{}_weights.o", a.name), &a.archive[r.clone()]));
    }
    if let Some(p) = &a.ptx {
        files.push((format!("{}.ptx", a.name), p.ptx.as_bytes()));
    }
    if let Some(b) = &a.weights_blob {
        files.push((format!("{}.weights", a.name), b));
    }
    if let Some((name, _)) = files.iter().find(|(n, _)| dir.join(n).is_dir()) {
        return Err(std::io::Error::other(format!(
            "{} is a directory; remove it or choose another output directory",
            dir.join(name).display()
        )));
    }
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".xla-aot-tmp-{}-{}", a.name, std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir(&tmp)?;
    let mut written = Vec::new();
    let result = (|| {
        for (name, data) in &files {
            std::fs::write(tmp.join(name), data)?;
        }
        for (name, _) in &files {
            let dest = dir.join(name);
            std::fs::rename(tmp.join(name), &dest)?;
            written.push(dest);
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    match result {
        Ok(()) => Ok(written),
        Err(e) => {
            for p in &written {
                let _ = std::fs::remove_file(p);
            }
            Err(e)
        }
    }
}
