//! Emitting a compiled model: object, static library, header and manifest, written atomically.
//!
//! Contract: [`compile_model`] produces every artefact in memory; [`write_artefacts`] writes them
//! into the output directory through a temporary directory beside them and renames each file into
//! place, so an error never leaves a half-written library behind.

pub mod archive;
pub mod header;
pub mod manifest;

use crate::arena::{BufferPlan, plan};
use crate::codegen::cpu::{self, CodegenError, Options};
use crate::ir::Module;
use crate::target::Target;
use std::path::{Path, PathBuf};

/// Everything `xla-aot compile` writes.
pub struct Artefacts {
    /// Model name (file stem of every artefact).
    pub name: String,
    /// `<name>.o`.
    pub object: Vec<u8>,
    /// `lib<name>.a`.
    pub archive: Vec<u8>,
    /// `<name>.h`.
    pub header: String,
    /// `<name>.json`.
    pub manifest: String,
    /// The buffer plan (for dumps and tests).
    pub plan: BufferPlan,
    /// Target assembly, when asked for.
    pub assembly: Option<String>,
}

/// Compiles a verified module for a target.
pub fn compile_model(
    m: &Module,
    target: &Target,
    opts: Options,
) -> Result<Artefacts, CodegenError> {
    let plan = plan(m);
    let obj = cpu::compile(m, &plan, target, opts)?;
    let object_name = format!("{}.o", m.name);
    let member_name = if object_name.len() <= 15 {
        object_name.clone()
    } else {
        "model.o".to_string()
    };
    let archive = archive::write_archive(&[archive::Member {
        name: &member_name,
        data: &obj.object,
        symbols: obj.exports.clone(),
    }]);
    let header = header::render(m, &plan, &target.name, obj.kernels.len());
    let manifest = manifest::build(m, &plan, &target.name, &obj.kernels);
    let mut manifest = serde_json::to_string_pretty(&manifest).expect("manifest serialises");
    manifest.push('\n');
    Ok(Artefacts {
        name: m.name.clone(),
        object: obj.object,
        archive,
        header,
        manifest,
        plan,
        assembly: obj.assembly,
    })
}

/// Writes the artefacts into `dir` (created if needed); returns the paths written.
pub fn write_artefacts(a: &Artefacts, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".xla-aot-tmp-{}-{}", a.name, std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir(&tmp)?;
    let files: Vec<(String, &[u8])> = vec![
        (format!("{}.o", a.name), &a.object),
        (format!("lib{}.a", a.name), &a.archive),
        (format!("{}.h", a.name), a.header.as_bytes()),
        (format!("{}.json", a.name), a.manifest.as_bytes()),
    ];
    let result = (|| {
        for (name, data) in &files {
            std::fs::write(tmp.join(name), data)?;
        }
        let mut written = Vec::new();
        for (name, _) in &files {
            let dest = dir.join(name);
            std::fs::rename(tmp.join(name), &dest)?;
            written.push(dest);
        }
        Ok(written)
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result
}
