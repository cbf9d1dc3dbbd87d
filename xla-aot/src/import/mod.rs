//! Importers: models that users already have, as XLA HLO text or ONNX, become the same verified
//! HLO module a YAML spec lowers to.
//!
//! Contract: [`load_file`] reads a `.hlo.txt` / `.hlo` or `.onnx` file given directly as SPEC;
//! [`load_graph_spec`] reads a YAML spec whose `graph:` key names such a file (adding a model name
//! and weight bindings). Either returns a [`Model`] whose module passes the verifier, or the first
//! [`SpecError`], naming the file and the line (HLO text) or the node (ONNX). Neither panics on any
//! input. Names follow one rule: the model name is the file stem (without `.hlo`), inputs keep their
//! graph names (an HLO entry parameter loses XLA's `.N` suffix), all sanitised into C identifiers.
//! A weight bound by name replaces the entry parameter (HLO) or graph input (ONNX) of that name
//! with a constant; a weight that binds nothing is an error.

pub mod hlo_text;
pub mod onnx;
mod onnx_proto;

use crate::ir::{Literal, Module, Shape, verify};
use crate::spec::weights::{WeightStore, io_reason};
use crate::spec::{Model, SpecError, SpecErrorKind, sanitize};
use crate::util::suggest::nearest;
use serde::Deserialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// What kind of file a SPEC argument is, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A YAML model spec (the native format).
    Spec,
    /// XLA HLO module text (`*.hlo.txt`, `*.hlo`).
    HloText,
    /// An ONNX model (`*.onnx`).
    Onnx,
}

/// The format of `path`, from its extension.
pub fn format_of(path: &Path) -> Format {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if name.ends_with(".onnx") {
        Format::Onnx
    } else if name.ends_with(".hlo.txt") || name.ends_with(".hlo") {
        Format::HloText
    } else {
        Format::Spec
    }
}

/// The model name of a file given directly: its stem without `.hlo`/`.txt`/`.onnx`, sanitised.
pub fn model_name_from_path(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let lower = name.to_ascii_lowercase();
    let mut stem = name.as_str();
    for ext in [".hlo.txt", ".hlo", ".onnx"] {
        if lower.ends_with(ext) {
            stem = &name[..name.len() - ext.len()];
            break;
        }
    }
    if stem.is_empty() {
        "model".into()
    } else {
        sanitize(stem)
    }
}

/// Weights bound to graph inputs by name, and which of them were used.
pub struct Bindings<'w> {
    weights: &'w WeightStore,
    used: HashSet<String>,
}

impl<'w> Bindings<'w> {
    /// Bindings from a weight store (possibly empty).
    pub fn new(weights: &'w WeightStore) -> Bindings<'w> {
        Bindings {
            weights,
            used: HashSet::new(),
        }
    }

    /// The weight bound to an input known by `names` (its graph name and its sanitised form),
    /// checked against the input's shape; `None` when no weight has one of those names. A weight
    /// also matches when its sanitised name does: XLA prints a JAX argument `fc1.weight` as
    /// `fc1_weight`, so `fc1.weight` in a safetensors file binds it.
    pub fn take(&mut self, names: &[&str], shape: &Shape) -> Option<Result<Literal, String>> {
        let name = names
            .iter()
            .find(|n| self.weights.contains(n))
            .map(|n| n.to_string())
            .or_else(|| {
                self.weights
                    .names()
                    .find(|w| names.contains(&sanitize(w).as_str()))
                    .map(str::to_string)
            })?;
        if !self.used.insert(name.clone()) {
            return Some(Err(format!(
                "weight `{name}` would bind a second input (`{}`); rename one of the inputs",
                names[0]
            )));
        }
        Some(self.weights.load(&name).and_then(|lit| {
            if lit.dtype != shape.dtype || lit.dims != shape.dims {
                Err(format!(
                    "weight `{name}` is {}{:?} but the input it binds is {shape}",
                    lit.dtype, lit.dims
                ))
            } else {
                Ok(lit)
            }
        }))
    }

    /// The first weight that bound nothing, with the candidate names for a hint.
    fn unused<'a>(
        &self,
        inputs: impl Iterator<Item = &'a str>,
    ) -> Option<(String, Option<String>)> {
        let inputs: Vec<&str> = inputs.collect();
        self.weights
            .names()
            .find(|n| !self.used.contains(*n))
            .map(|n| {
                (
                    n.to_string(),
                    nearest(n, inputs.iter().copied()).map(str::to_string),
                )
            })
    }
}

fn read_error(path: &Path, e: &std::io::Error) -> SpecError {
    SpecError::new(
        path,
        SpecErrorKind::Io {
            path: path.display().to_string(),
            reason: io_reason(e),
        },
    )
}

/// Imports `graph` (of format `format`) as a module called `name`.
fn import(
    graph: &Path,
    format: Format,
    name: &str,
    weights: &WeightStore,
) -> Result<Module, SpecError> {
    let mut bindings = Bindings::new(weights);
    let module = match format {
        Format::HloText => {
            let bytes = std::fs::read(graph).map_err(|e| read_error(graph, &e))?;
            let source = String::from_utf8(bytes).map_err(|_| {
                SpecError::new(
                    graph,
                    SpecErrorKind::Invalid("the HLO file is not UTF-8 text".into()),
                )
                .expected("the text XLA prints for an HLO module (`HloModule ...`)")
            })?;
            hlo_text::import(graph, &source, name, &mut bindings)?
        }
        Format::Onnx => {
            let bytes = std::fs::read(graph).map_err(|e| read_error(graph, &e))?;
            onnx::import(graph, &bytes, name, &mut bindings)?
        }
        Format::Spec => {
            return Err(SpecError::new(
                graph,
                SpecErrorKind::Invalid(
                    "a YAML spec is loaded by spec::load_spec, not imported".into(),
                ),
            ));
        }
    };
    let inputs: Vec<String> = module
        .entry
        .parameters()
        .iter()
        .map(|&p| module.entry.inst(p).name.clone())
        .collect();
    if let Some((w, hint)) = bindings.unused(inputs.iter().map(String::as_str)) {
        return Err(SpecError::new(
            weights.path(),
            SpecErrorKind::Weight(format!(
                "weight `{w}` binds no input of {}",
                graph.display()
            )),
        )
        .hint(match hint {
            Some(h) => format!("did you mean `{h}`? weights bind graph inputs by name"),
            None => "weights bind graph inputs by name; remove it or rename it".into(),
        }));
    }
    verify(&module).map_err(|e| {
        SpecError::new(
            graph,
            SpecErrorKind::Invalid(format!(
                "internal compiler error: the imported module fails verification (please report this): {e}"
            )),
        )
    })?;
    Ok(module)
}

/// Loads an `.onnx` or HLO text file given directly as SPEC.
pub fn load_file(path: &Path, format: Format) -> Result<Model, SpecError> {
    let name = model_name_from_path(path);
    let module = import(path, format, &name, &WeightStore::empty())?;
    Ok(Model {
        module,
        spec_path: path.to_path_buf(),
        params_path: None,
        graph_path: None,
        buckets: Vec::new(),
        seq: None,
    })
}

/// A YAML spec that wraps an imported graph.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGraphSpec {
    name: String,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<serde_yaml::Value>,
    graph: RawGraph,
    #[serde(default)]
    params: Option<String>,
}

/// `graph: {onnx: FILE}` or `graph: {hlo: FILE}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGraph {
    #[serde(default)]
    onnx: Option<String>,
    #[serde(default)]
    hlo: Option<String>,
}

/// Whether YAML text is a graph-wrapping spec (a top-level `graph` key).
pub fn is_graph_spec(source: &str) -> bool {
    matches!(
        serde_yaml::from_str::<serde_yaml::Value>(source),
        Ok(serde_yaml::Value::Mapping(m)) if m.contains_key("graph")
    )
}

/// Loads a YAML spec with a `graph:` key (`path` is the spec, `source` its text).
pub fn load_graph_spec(path: &Path, source: &str) -> Result<Model, SpecError> {
    let spans = crate::spec::spans::SpanIndex::build(source);
    let at = |p: &str, kind: SpecErrorKind| SpecError::new(path, kind).at(spans.find(p), source);
    let raw: RawGraphSpec = serde_yaml::from_str(source).map_err(|e| {
        crate::spec::raw::yaml_error(path, source, &e)
            .0
            .hint("a spec with `graph:` has only `name`, `description`, `graph: {onnx: FILE}` or `graph: {hlo: FILE}`, and `params`; inputs, outputs and ops come from the graph")
    })?;
    if !crate::ir::verify::is_c_identifier(&raw.name)
        || raw.name.len() > crate::spec::MAX_MODEL_NAME_LEN
    {
        return Err(at("name", SpecErrorKind::BadName(raw.name.clone()))
            .expected("a C identifier ([A-Za-z_][A-Za-z0-9_]*): it prefixes every exported symbol")
            .hint(format!("e.g. `{}`", sanitize(&raw.name))));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let (file, format) = match (&raw.graph.onnx, &raw.graph.hlo) {
        (Some(f), None) => (f, Format::Onnx),
        (None, Some(f)) => (f, Format::HloText),
        _ => {
            return Err(at(
                "graph",
                SpecErrorKind::Invalid("`graph` needs exactly one of `onnx` and `hlo`".into()),
            )
            .expected("`graph: {onnx: model.onnx}` or `graph: {hlo: model.hlo.txt}`"));
        }
    };
    let graph: PathBuf = dir.join(file);
    let params_path = raw.params.as_ref().map(|p| dir.join(p));
    let weights = match &params_path {
        None => WeightStore::empty(),
        Some(p) => WeightStore::open(p).map_err(|m| {
            at("params", SpecErrorKind::Weight(m)).hint(
                "`params` is resolved relative to the spec file; it names a .safetensors file or a directory of .npy files",
            )
        })?,
    };
    let module = import(&graph, format, &raw.name, &weights)?;
    Ok(Model {
        module,
        spec_path: path.to_path_buf(),
        params_path,
        graph_path: Some(graph),
        buckets: Vec::new(),
        seq: None,
    })
}
