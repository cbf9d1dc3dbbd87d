//! The front ends: every input format becomes the same verified HLO [`Model`].
//!
//! Contract: [`load_spec`] reads any SPEC argument by its format ([`format_of`]): a YAML model spec
//! (`spec/`), a YAML spec whose `graph:` key wraps an imported file ([`load_graph_spec`]), an
//! XLA HLO text file (`hlo_text/`), an ONNX model (`onnx/`) or a TFLite flatbuffer (`tflite/`). Each returns a [`Model`] whose
//! module passes the verifier, or the first [`SpecError`], rendered the same `file:line:col` way
//! for every format (ONNX and TFLite, binary formats, name the node or operator instead of a line). Nothing here panics
//! on any input. A YAML spec's `quantize:` section (either kind) is applied to the lowered model
//! (`quantize.rs`, post-training quantization through `crate::quant`).
//!
//! Layers: the four front ends (`spec`, `onnx`, `hlo_text`, `tflite`) never import each other; they share
//! the modules beside them: `model` (what they return), `diag` (errors with positions),
//! `spans` (YAML positions), `names` (the C-identifier rule for model names), `weights` (weight
//! files and their binding to graph inputs) and `decompose` (composite ops built from primitives:
//! GELU, normalisations, softmax). Only this facade dispatches between the front ends.
//!
//! Imported files follow one naming rule: the model name is the file stem (without `.hlo`),
//! inputs keep their graph names (an HLO entry parameter loses XLA's `.N` suffix), all sanitised
//! into C identifiers. A weight bound by name replaces the entry parameter (HLO) or graph input
//! (ONNX) of that name with a constant; a weight that binds nothing is an error.

pub mod decompose;
pub mod diag;
pub mod hlo_text;
pub mod inputs;
pub mod model;
pub mod names;
pub mod onnx;
pub mod quantize;
pub mod spans;
pub mod spec;
pub mod tflite;
pub mod weights;

pub use diag::{Pos, SpecError, SpecErrorKind};
pub use inputs::InputOverrides;
pub use model::{Model, SeqAxis};

use crate::ir::{Module, verify};
use crate::limits::{MAX_ONNX_FILE_BYTES, MAX_TEXT_FILE_BYTES, MAX_YAML_DEPTH};
use crate::util::io::{io_reason, read_bounded, read_bounded_string};
use names::{check_model_name, model_name_from_path, model_name_rule};
use serde::Deserialize;
use spans::SpanIndex;
use std::path::{Path, PathBuf};
use weights::{Bindings, WeightStore};

/// What kind of file a SPEC argument is, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A YAML model spec (the native format).
    Spec,
    /// XLA HLO module text (`*.hlo.txt`, `*.hlo`).
    HloText,
    /// An ONNX model (`*.onnx`).
    Onnx,
    /// A TensorFlow Lite flatbuffer (`*.tflite`).
    Tflite,
}

/// The format of `path`, from its extension.
pub fn format_of(path: &Path) -> Format {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if name.ends_with(".onnx") {
        Format::Onnx
    } else if name.ends_with(".tflite") {
        Format::Tflite
    } else if name.ends_with(".hlo.txt") || name.ends_with(".hlo") {
        Format::HloText
    } else {
        Format::Spec
    }
}

/// The byte-order mark some editors put at the start of UTF-8 text; skipped.
pub const UTF8_BOM: char = '\u{feff}';

/// Reads, checks and lowers the model at `path`: a YAML spec (native or `graph:`), a `.tflite`, an `.onnx` or
/// an `.hlo.txt` file.
pub fn load_spec(path: &Path) -> Result<Model, SpecError> {
    load_spec_with(path, &InputOverrides::default())
}

/// [`load_spec`] with input shapes, symbolic dims and frozen inputs fixed by the build (the CLI's
/// `--input-shape`, `--dim`, `--freeze`; they take precedence over a `graph:` spec's own).
pub fn load_spec_with(path: &Path, overrides: &InputOverrides) -> Result<Model, SpecError> {
    let format = format_of(path);
    if format != Format::Spec {
        return load_file_with(path, format, overrides);
    }
    let source =
        read_bounded_string(path, MAX_TEXT_FILE_BYTES, "MAX_TEXT_FILE_BYTES").map_err(|e| {
            let reason = if e.kind() == std::io::ErrorKind::InvalidData {
                "the file is not UTF-8 text".to_string()
            } else {
                io_reason(&e)
            };
            SpecError::new(
                path,
                SpecErrorKind::Io {
                    path: path.display().to_string(),
                    reason,
                },
            )
        })?;
    spec_from_str_with(path, &source, overrides)
}

/// Refuses YAML nested deeper than [`MAX_YAML_DEPTH`] before the parser sees it (its time grows
/// faster than linearly with depth).
fn check_yaml_depth(path: &Path, source: &str) -> Result<(), SpecError> {
    match crate::util::yaml_depth::first_too_deep(source, MAX_YAML_DEPTH) {
        None => Ok(()),
        Some((line, column)) => Err(SpecError::new(
            path,
            SpecErrorKind::Syntax(format!(
                "YAML nested more than {MAX_YAML_DEPTH} levels deep (MAX_YAML_DEPTH, see docs/limits.md)"
            )),
        )
        .at(Some(Pos { line, column }), source)
        .hint("a spec nests a few levels (ops → op → attribute → list); check for unclosed `[` or `{`")),
    }
}

/// Like [`load_spec`] for a YAML spec, with the text already read (`path` is used for messages
/// and to find weights and imported graphs).
pub fn spec_from_str(path: &Path, source: &str) -> Result<Model, SpecError> {
    spec_from_str_with(path, source, &InputOverrides::default())
}

/// [`spec_from_str`] with overrides (see [`load_spec_with`]).
pub fn spec_from_str_with(
    path: &Path,
    source: &str,
    overrides: &InputOverrides,
) -> Result<Model, SpecError> {
    // Editors on Windows save UTF-8 with a byte-order mark; YAML allows one at the start, but the
    // parser would read it as part of the first key (then "missing field `inputs`").
    let source = source.strip_prefix(UTF8_BOM).unwrap_or(source);
    check_yaml_depth(path, source)?;
    let model = if is_graph_spec(source) {
        load_graph_spec_with(path, source, overrides)?
    } else if !overrides.is_empty() {
        Err(SpecError::new(
            path,
            SpecErrorKind::Invalid(
                "--input-shape, --dim and --freeze apply to imported graphs (ONNX), not to a YAML spec"
                    .into(),
            ),
        )
        .hint("a YAML spec declares its input shapes under `inputs:`; edit them there"))?
    } else {
        spec::lower_spec(path, source)?
    };
    quantize::apply_section(path, source, model)
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
    overrides: &InputOverrides,
) -> Result<Module, SpecError> {
    if format == Format::HloText && !overrides.is_empty() {
        return Err(SpecError::new(
            graph,
            SpecErrorKind::Invalid(
                "--input-shape, --dim and --freeze apply to ONNX models; XLA HLO text has static shapes"
                    .into(),
            ),
        )
        .hint("bind a parameter to a constant with a weight of the same name (`params:`)"));
    }
    let mut bindings = Bindings::new(weights);
    let module = match format {
        Format::HloText => {
            let bytes = read_bounded(graph, MAX_TEXT_FILE_BYTES, "MAX_TEXT_FILE_BYTES")
                .map_err(|e| read_error(graph, &e))?;
            let source = String::from_utf8(bytes).map_err(|_| {
                SpecError::new(
                    graph,
                    SpecErrorKind::Invalid("the HLO file is not UTF-8 text".into()),
                )
                .expected("the text XLA prints for an HLO module (`HloModule ...`)")
            })?;
            let source = source.strip_prefix(UTF8_BOM).unwrap_or(&source);
            hlo_text::import(graph, source, name, &mut bindings)?
        }
        Format::Onnx => {
            let bytes = read_bounded(graph, MAX_ONNX_FILE_BYTES, "MAX_ONNX_FILE_BYTES")
                .map_err(|e| read_error(graph, &e))?;
            let options = onnx::ImportOptions {
                inputs: overrides.clone(),
                ..Default::default()
            };
            onnx::import_with(graph, &bytes, name, &mut bindings, &options)?
        }
        Format::Tflite => {
            let bytes = read_bounded(graph, MAX_ONNX_FILE_BYTES, "MAX_ONNX_FILE_BYTES")
                .map_err(|e| read_error(graph, &e))?;
            tflite::import(graph, &bytes, name, &mut bindings, overrides)?
        }
        Format::Spec => {
            return Err(SpecError::new(
                graph,
                SpecErrorKind::Invalid(
                    "a YAML spec is loaded by front::load_spec, not imported".into(),
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
    load_file_with(path, format, &InputOverrides::default())
}

/// [`load_file`] with overrides (see [`load_spec_with`]).
pub fn load_file_with(
    path: &Path,
    format: Format,
    overrides: &InputOverrides,
) -> Result<Model, SpecError> {
    let name = model_name_from_path(path);
    let module = import(path, format, &name, &WeightStore::empty(), overrides)?;
    Ok(Model::single(module, path.to_path_buf(), None, None))
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
    /// Post-training quantization (`quantize.rs`, applied by [`spec_from_str_with`]).
    #[serde(default)]
    #[allow(dead_code)]
    quantize: Option<serde_yaml::Value>,
}

/// `graph: {onnx: FILE}`, `graph: {hlo: FILE}` or `graph: {tflite: FILE}`, with what the build fixes about its inputs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGraph {
    #[serde(default)]
    onnx: Option<String>,
    #[serde(default)]
    hlo: Option<String>,
    #[serde(default)]
    tflite: Option<String>,
    /// `input_shapes: {NAME: [D0, D1, ...]}`.
    #[serde(default)]
    input_shapes: Option<std::collections::BTreeMap<String, Vec<usize>>>,
    /// `dims: {SYMBOL: N}`.
    #[serde(default)]
    dims: Option<std::collections::BTreeMap<String, usize>>,
    /// `freeze: {NAME: VALUE | [VALUES] | FILE.npy}`.
    #[serde(default)]
    freeze: Option<std::collections::BTreeMap<String, serde_yaml::Value>>,
}

impl RawGraph {
    /// The overrides this spec declares (`.npy` paths relative to the spec's folder); the error
    /// says which `freeze` entry is malformed.
    fn overrides(&self, dir: &Path) -> Result<InputOverrides, String> {
        use inputs::{Frozen, InputRef};
        let name = InputRef::parse;
        let mut o = InputOverrides::default();
        for (n, dims) in self.input_shapes.iter().flatten() {
            o.shapes.push((name(n), dims.clone()));
        }
        for (d, v) in self.dims.iter().flatten() {
            o.dims.push((d.clone(), *v));
        }
        for (n, v) in self.freeze.iter().flatten() {
            let bad =
                || format!("`freeze: {n}` must be a number, a list of numbers or a .npy file");
            let value = match v {
                serde_yaml::Value::Number(x) => Frozen::Values(vec![x.as_f64().ok_or_else(bad)?]),
                serde_yaml::Value::Bool(b) => Frozen::Values(vec![f64::from(u8::from(*b))]),
                serde_yaml::Value::Sequence(xs) => Frozen::Values(
                    xs.iter()
                        .map(|x| x.as_f64())
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(bad)?,
                ),
                serde_yaml::Value::String(f) if f.ends_with(".npy") => Frozen::File(dir.join(f)),
                _ => return Err(bad()),
            };
            o.freeze.push((name(n), value));
        }
        Ok(o)
    }
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
    load_graph_spec_with(path, source, &InputOverrides::default())
}

/// [`load_graph_spec`] with overrides that take precedence over the spec's own.
pub fn load_graph_spec_with(
    path: &Path,
    source: &str,
    overrides: &InputOverrides,
) -> Result<Model, SpecError> {
    let spans = SpanIndex::build(source);
    let at = |p: &str, kind: SpecErrorKind| SpecError::new(path, kind).at(spans.find(p), source);
    let raw: RawGraphSpec = serde_yaml::from_str(source).map_err(|e| {
        diag::yaml_error(path, source, &e)
            .0
            .hint("a spec with `graph:` has only `name`, `description`, `graph: {onnx|hlo|tflite: FILE}` (with `input_shapes`, `dims`, `freeze`), `params` and `quantize`; inputs, outputs and ops come from the graph")
    })?;
    if let Err(hint) = check_model_name(&raw.name) {
        return Err(at("name", SpecErrorKind::BadName(raw.name.clone()))
            .expected(model_name_rule())
            .hint(hint));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let (file, format) = match (&raw.graph.onnx, &raw.graph.hlo, &raw.graph.tflite) {
        (Some(f), None, None) => (f, Format::Onnx),
        (None, Some(f), None) => (f, Format::HloText),
        (None, None, Some(f)) => (f, Format::Tflite),
        _ => {
            return Err(at(
                "graph",
                SpecErrorKind::Invalid(
                    "`graph` needs exactly one of `onnx`, `hlo` and `tflite`".into(),
                ),
            )
            .expected(
                "`graph: {onnx: model.onnx}`, `graph: {hlo: model.hlo.txt}` or `graph: {tflite: model.tflite}`",
            ));
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
    let declared = raw
        .graph
        .overrides(dir)
        .map_err(|m| at("graph", SpecErrorKind::Invalid(m)))?;
    let module = import(
        &graph,
        format,
        &raw.name,
        &weights,
        &declared.merged_with(overrides),
    )?;
    Ok(Model::single(
        module,
        path.to_path_buf(),
        params_path,
        Some(graph),
    ))
}
