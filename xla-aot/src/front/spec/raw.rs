//! The spec file's structure as serde sees it, before any checking of names, shapes or ops.
//!
//! Contract: [`parse_raw`] turns YAML text into a [`RawSpec`] or a syntax/type error positioned by
//! serde_yaml. Ops keep their attributes as untyped YAML values; `lower/` decodes them per op so
//! that each attribute error can point at its own node.

use crate::front::diag::{SpecError, SpecErrorKind, yaml_error};
use crate::util::suggest::nearest;
use serde::Deserialize;
use std::path::Path;

/// The top level of a spec file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpec {
    pub name: String,
    #[serde(default)]
    pub description: Option<serde_yaml::Value>,
    pub inputs: Vec<RawInput>,
    pub outputs: Vec<String>,
    #[serde(default)]
    pub params: Option<String>,
    #[serde(default)]
    pub constants: Vec<RawConstant>,
    pub ops: Vec<serde_yaml::Mapping>,
    /// Batch buckets: one compiled variant per size (dim 0 of every input and output).
    #[serde(default)]
    pub batch_sizes: Option<Vec<i64>>,
    /// Sequence buckets: one compiled variant per length.
    #[serde(default)]
    pub seq_buckets: Option<RawSeqBuckets>,
    /// The weights' precision (`ir/precision.rs`): `f32`, `f16-weights`, `bf16-weights`, `bf16`, `f16`.
    #[serde(default)]
    pub precision: Option<String>,
    /// Post-training quantization (`front/quantize.rs`, applied after lowering).
    #[serde(default)]
    pub quantize: Option<serde_yaml::Value>,
}

/// `seq_buckets: {sizes, axis, inputs, outputs, mask}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSeqBuckets {
    pub sizes: Vec<i64>,
    #[serde(default = "default_seq_axis")]
    pub axis: i64,
    pub inputs: Vec<String>,
    #[serde(default)]
    pub outputs: Vec<String>,
    #[serde(default)]
    pub mask: Option<String>,
}

fn default_seq_axis() -> i64 {
    1
}

/// Top-level keys, for hints.
pub const TOP_LEVEL_KEYS: &[&str] = &[
    "name",
    "description",
    "inputs",
    "outputs",
    "params",
    "constants",
    "ops",
    "batch_sizes",
    "seq_buckets",
    "precision",
    "quantize",
];

/// One entry of `inputs`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInput {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<i64>,
}

/// One entry of `constants`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConstant {
    pub name: String,
    #[serde(default)]
    pub dtype: Option<String>,
    #[serde(default)]
    pub shape: Option<Vec<i64>>,
    pub value: serde_yaml::Value,
}

/// Extracts the field name from serde's "unknown field `x`, expected ..." message.
fn unknown_field(msg: &str) -> Option<&str> {
    let rest = msg.strip_prefix("unknown field `")?;
    rest.split('`').next()
}

/// Parses the YAML text of a spec.
pub fn parse_raw(file: &Path, source: &str) -> Result<RawSpec, SpecError> {
    if source.trim().is_empty() {
        return Err(SpecError::new(
            file,
            SpecErrorKind::Invalid("the spec file is empty".into()),
        )
        .expected("a YAML mapping with `name`, `inputs`, `outputs` and `ops`")
        .hint("see docs/spec.md for a complete example"));
    }
    serde_yaml::from_str::<RawSpec>(source).map_err(|e| {
        let (mut err, msg) = yaml_error(file, source, &e);
        if let Some(field) = unknown_field(&msg) {
            // Keys of the top level and of `inputs`/`constants` entries.
            let keys = TOP_LEVEL_KEYS.iter().chain(&["dtype", "shape", "value"]).copied();
            if let Some(s) = nearest(field, keys) {
                err = err.hint(format!("did you mean `{s}`?"));
            }
        } else if msg.contains("did not find expected") || msg.contains("mapping values are not allowed") {
            err = err.hint("the YAML is malformed here or on the lines just above: check brackets, quotes and indentation");
        } else if msg.starts_with("missing field") {
            err = err.hint("see docs/spec.md for the keys every spec needs");
        }
        err
    })
}
