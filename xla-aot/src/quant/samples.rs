//! Calibration samples: a folder of `.npy` files.
//!
//! Contract: [`read`] loads the samples of folder DIR for a module's inputs, sorted by name:
//! - one subfolder per sample, holding `<input>.npy` for every input of the model (the names
//!   `xla-aot inspect` prints for the entry parameters); other files are ignored;
//! - or, for a model with one input, one `.npy` file per sample directly in DIR.
//!
//! Every array must have the input's element type (or its C API type) and dims. Errors name the
//! folder or file and what was expected; nothing is read beyond [`MAX_SAMPLES`] samples.

use super::QuantError;
use crate::ir::npy::read_npy;
use crate::ir::shape::dims_str;
use crate::ir::{Literal, Module};
use std::path::{Path, PathBuf};

/// The most samples read (more only lengthen calibration; onnxruntime's examples use 100s).
pub const MAX_SAMPLES: usize = 10_000;

/// One sample: its name (subfolder or file stem) and its inputs in parameter order.
pub type Sample = (String, Vec<Literal>);

fn folder_err(dir: &Path, reason: impl Into<String>) -> QuantError {
    QuantError::Folder {
        path: dir.display().to_string(),
        reason: reason.into(),
    }
}

fn file_err(file: &Path, reason: impl Into<String>) -> QuantError {
    QuantError::File {
        path: file.display().to_string(),
        reason: reason.into(),
    }
}

/// The sorted entries of `dir`.
fn entries(dir: &Path) -> Result<Vec<PathBuf>, QuantError> {
    let rd = std::fs::read_dir(dir).map_err(|e| {
        folder_err(
            dir,
            format!(
                "{} (--calibration names a folder of .npy files, one subfolder per sample)",
                crate::util::io::io_reason(&e)
            ),
        )
    })?;
    let mut out = Vec::new();
    for e in rd {
        out.push(
            e.map_err(|e| folder_err(dir, crate::util::io::io_reason(&e)))?
                .path(),
        );
    }
    out.sort();
    Ok(out)
}

/// The model's inputs: (name, the IR type and dims, the C API type if any).
fn inputs(m: &Module) -> Vec<(String, crate::ir::Shape, Option<crate::ir::DType>)> {
    m.entry
        .parameters()
        .iter()
        .enumerate()
        .map(|(k, &p)| {
            let inst = m.entry.inst(p);
            (inst.name.clone(), inst.shape.clone(), m.api.input(k))
        })
        .collect()
}

/// Reads one `.npy` as input `k`.
fn load(
    file: &Path,
    (name, shape, api): &(String, crate::ir::Shape, Option<crate::ir::DType>),
) -> Result<Literal, QuantError> {
    let bytes = std::fs::read(file).map_err(|e| file_err(file, crate::util::io::io_reason(&e)))?;
    let lit = read_npy(&bytes).map_err(|e| file_err(file, e.to_string()))?;
    let dtype_ok = lit.dtype == shape.dtype || Some(lit.dtype) == *api;
    if !dtype_ok || lit.dims != shape.dims {
        let want = api.unwrap_or(shape.dtype);
        return Err(file_err(
            file,
            format!(
                "holds {}{}; input `{name}` is {}{}",
                lit.dtype,
                dims_str(&lit.dims),
                want,
                dims_str(&shape.dims)
            ),
        ));
    }
    Ok(lit)
}

/// The samples of `dir` for `m`'s inputs.
pub fn read(dir: &Path, m: &Module) -> Result<Vec<Sample>, QuantError> {
    let ins = inputs(m);
    let all = entries(dir)?;
    let subdirs: Vec<&PathBuf> = all.iter().filter(|p| p.is_dir()).collect();
    let mut samples = Vec::new();
    if !subdirs.is_empty() {
        for sub in subdirs.into_iter().take(MAX_SAMPLES) {
            let mut lits = Vec::with_capacity(ins.len());
            for input in &ins {
                let file = sub.join(format!("{}.npy", input.0));
                if !file.is_file() {
                    return Err(file_err(
                        &file,
                        format!(
                            "missing: every sample folder needs `{}.npy` for input `{}`",
                            input.0, input.0
                        ),
                    ));
                }
                lits.push(load(&file, input)?);
            }
            let name = sub.file_name().unwrap_or_default().to_string_lossy();
            samples.push((name.into_owned(), lits));
        }
    } else {
        let files: Vec<&PathBuf> = all
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "npy"))
            .collect();
        if !files.is_empty() && ins.len() != 1 {
            return Err(folder_err(
                dir,
                format!(
                    "the model has {} inputs: put each sample in its own subfolder, with one <input>.npy per input ({})",
                    ins.len(),
                    ins.iter()
                        .map(|i| format!("{}.npy", i.0))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        for f in files.into_iter().take(MAX_SAMPLES) {
            let name = f.file_stem().unwrap_or_default().to_string_lossy();
            samples.push((name.into_owned(), vec![load(f, &ins[0])?]));
        }
    }
    if samples.is_empty() {
        return Err(folder_err(
            dir,
            "holds no samples: expected one subfolder per sample with <input>.npy files, or (one input) .npy files",
        ));
    }
    Ok(samples)
}
