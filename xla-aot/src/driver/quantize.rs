//! `xla-aot quantize`: post-training quantization of a model into a spec with a `quantize:`
//! section.
//!
//! Contract: [`quantize`] loads MODEL (any front end), calibrates it on the samples of the
//! calibration folder with the reference interpreter (`quant/`; with
//! [`QuantizeRequest::compiled`], code compiled for this machine, recompiled per sample: faster
//! on large models), applies the ranges, runs the quantized module as the compiler optimises it
//! (int8 weights included) the same way and reports its accuracy against the float model on the same samples (max error and top-1
//! agreement of the first output, argmax over its last axis). It writes OUT atomically: MODEL's
//! own spec (native or `graph:`) with its file references rebased onto OUT's folder, or for an
//! `.onnx` / HLO file a `graph:` spec naming it, plus a `quantize:` section holding the method,
//! the weight granularity and every range; compiling OUT applies the same transform. Weights are
//! not copied: OUT reads MODEL's, and the compiler rounds them to int8 after folding batch norms.

use super::DriverError;
use crate::compile::CompileOptions;
use crate::front::{Format, InputOverrides, format_of, load_spec_with};
use crate::quant::{self, Accuracy, Method, Quantization};
use crate::util::io::io_reason;
use serde_yaml::{Mapping, Value};
use std::path::{Component, Path, PathBuf};

/// Options of `xla-aot quantize`.
#[derive(Debug, Clone, Default)]
pub struct QuantizeRequest {
    /// The folder of calibration samples (`quant/samples.rs`).
    pub calibration: PathBuf,
    /// How ranges are chosen.
    pub method: Method,
    /// One weight scale per output channel.
    pub per_channel: bool,
    /// `--input-shape`, `--dim`, `--freeze` (ONNX): refused for now.
    pub inputs: InputOverrides,
    /// Run the samples compiled for this machine instead of with the reference interpreter.
    pub compiled: bool,
}

/// What `quantize` did.
#[derive(Debug, Clone)]
pub struct QuantizeReport {
    /// Values quantized.
    pub sites: usize,
    /// Calibration samples.
    pub samples: usize,
    /// The quantized model against the float one on the calibration samples.
    pub accuracy: Accuracy,
    /// The spec written.
    pub written: PathBuf,
}

/// `xla-aot quantize MODEL --calibration DIR -o OUT`.
pub fn quantize(
    model_path: &Path,
    out: &Path,
    req: &QuantizeRequest,
) -> Result<QuantizeReport, DriverError> {
    if !req.inputs.is_empty() {
        return Err(DriverError::Input(
            "quantize does not take --input-shape, --dim or --freeze yet; write a `graph:` spec with `input_shapes`, `dims` or `freeze` and quantize that".into(),
        ));
    }
    let format = format_of(model_path);
    let source = match format {
        Format::Spec => Some(std::fs::read_to_string(model_path).map_err(|e| {
            DriverError::Input(format!(
                "cannot read {}: {}",
                model_path.display(),
                io_reason(&e)
            ))
        })?),
        _ => None,
    };
    if let Some(s) = &source
        && crate::front::quantize::section(model_path, s)?.is_some()
    {
        return Err(DriverError::Input(format!(
            "{} is already quantized (it has a `quantize:` section); quantize the float model it names",
            model_path.display()
        )));
    }
    let model = load_spec_with(model_path, &req.inputs)?;
    let m = &model.module;
    let samples = quant::samples::read(&req.calibration, m)?;
    let mut compiled = |m: &crate::ir::Module, inputs: &[crate::ir::Literal]| {
        crate::compile::run(m, inputs, &CompileOptions::default())
            .map(|r| r.outputs)
            .map_err(|e| e.to_string())
    };
    let run: &mut quant::Runner = if req.compiled {
        &mut compiled
    } else {
        &mut quant::interpreter
    };
    let c = quant::calibrate(m, &samples, req.method, req.per_channel, run)?;
    let quantized = quant::apply(m, &c.quantization)?;
    let mut accuracy = Accuracy::default();
    if req.compiled {
        for ((_, inputs), float) in samples.iter().zip(&c.outputs) {
            let q = crate::compile::run(&quantized, inputs, &CompileOptions::default())?.outputs;
            if let (Some(f), Some(q)) = (float.first(), q.first()) {
                accuracy.add(f, q);
            }
        }
    } else {
        // The module the library is compiled from (int8 weights after the pipeline).
        let optimized = crate::compile::optimize(&quantized, &CompileOptions::default())?.module;
        for ((_, inputs), float) in samples.iter().zip(&c.outputs) {
            let q = crate::interp::evaluate(&optimized, inputs)?;
            if let (Some(f), Some(q)) = (float.first(), q.first()) {
                accuracy.add(f, q);
            }
        }
    }
    let header = format!(
        "# written by xla-aot quantize from {}: {} samples of {}, method {}, int8 weights {}\n\
         # on those samples ({}): {accuracy}\n",
        model_path.display(),
        samples.len(),
        req.calibration.display(),
        req.method.name(),
        if req.per_channel {
            "per output channel"
        } else {
            "per tensor"
        },
        if req.compiled {
            "compiled for this machine"
        } else {
            "reference interpreter"
        },
    );
    let text = spec_text(model_path, format, source.as_deref(), &c.quantization, out)?;
    write_atomically(out, &format!("{header}{text}"))?;
    Ok(QuantizeReport {
        sites: c.quantization.ranges.as_ref().map_or(0, |r| r.len()),
        samples: samples.len(),
        accuracy,
        written: out.to_path_buf(),
    })
}

/// The YAML of OUT: MODEL's spec (or a `graph:` spec naming it) with `q` as its `quantize:`.
fn spec_text(
    model_path: &Path,
    format: Format,
    source: Option<&str>,
    q: &Quantization,
    out: &Path,
) -> Result<String, DriverError> {
    let from = model_path.parent().unwrap_or(Path::new("."));
    let to = out.parent().unwrap_or(Path::new("."));
    let rebase = |file: &str| -> Result<String, DriverError> { rebase(&from.join(file), to) };
    let mut top = match (format, source) {
        (Format::Spec, Some(s)) => match serde_yaml::from_str::<Value>(s) {
            Ok(Value::Mapping(m)) => m,
            _ => return Err(DriverError::Input("the spec is not a YAML mapping".into())),
        },
        _ => {
            let mut m = Mapping::new();
            let key = if format == Format::Onnx {
                "onnx"
            } else {
                "hlo"
            };
            let name = crate::front::names::model_name_from_path(model_path);
            m.insert("name".into(), name.into());
            let mut g = Mapping::new();
            let file = model_path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            g.insert(key.into(), rebase(&file)?.into());
            m.insert("graph".into(), Value::Mapping(g));
            m
        }
    };
    if format == Format::Spec {
        if let Some(Value::String(p)) = top.get("params") {
            let p = rebase(p)?;
            top.insert("params".into(), p.into());
        }
        if let Some(Value::Mapping(g)) = top.get_mut("graph") {
            for key in ["onnx", "hlo"] {
                if let Some(Value::String(f)) = g.get(key) {
                    let f = rebase(f)?;
                    g.insert(key.into(), f.into());
                }
            }
            if let Some(Value::Mapping(fr)) = g.get_mut("freeze") {
                for (_, v) in fr.iter_mut() {
                    if let Value::String(f) = v
                        && f.ends_with(".npy")
                    {
                        *v = rebase(f)?.into();
                    }
                }
            }
        }
    }
    let section = serde_yaml::to_value(q).expect("a quantization serialises");
    top.insert("quantize".into(), section);
    Ok(serde_yaml::to_string(&Value::Mapping(top)).expect("YAML serialises"))
}

/// `file` as a path relative to folder `dir` (both resolved; absolute when they share no root).
fn rebase(file: &Path, dir: &Path) -> Result<String, DriverError> {
    let canon = |p: &Path| {
        std::fs::canonicalize(p).map_err(|e| {
            DriverError::Input(format!("cannot resolve {}: {}", p.display(), io_reason(&e)))
        })
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let (f, d) = (canon(file)?, canon(dir)?);
    let fc: Vec<Component> = f.components().collect();
    let dc: Vec<Component> = d.components().collect();
    let common = fc.iter().zip(&dc).take_while(|(a, b)| a == b).count();
    if common <= 1 {
        return Ok(f.display().to_string());
    }
    let mut rel = PathBuf::new();
    for _ in common..dc.len() {
        rel.push("..");
    }
    for c in &fc[common..] {
        rel.push(c.as_os_str());
    }
    Ok(rel.to_string_lossy().into_owned())
}

/// Writes `text` to `path` through a temporary file in the same folder.
fn write_atomically(path: &Path, text: &str) -> Result<(), DriverError> {
    let werr = |p: &Path, e: std::io::Error| DriverError::Write {
        path: p.display().to_string(),
        reason: io_reason(&e),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "quantized.yaml".into());
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let result = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(werr(path, e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebased_paths_are_relative() {
        let base = std::env::temp_dir().join(format!("xla-aot-rebase-{}", std::process::id()));
        std::fs::create_dir_all(base.join("a/b")).unwrap();
        std::fs::create_dir_all(base.join("c")).unwrap();
        std::fs::write(base.join("a/b/w.safetensors"), b"").unwrap();
        let r = rebase(&base.join("a/b/w.safetensors"), &base.join("c")).unwrap();
        assert_eq!(r, "../a/b/w.safetensors");
        let r = rebase(&base.join("a/b/w.safetensors"), &base.join("a/b")).unwrap();
        assert_eq!(r, "w.safetensors");
        let _ = std::fs::remove_dir_all(&base);
    }
}
