//! A spec's `quantize:` section (native or `graph:` spec): post-training quantization applied at
//! load time (`quant/`).
//!
//! Contract: [`apply_section`] reads the section as a [`Quantization`]; with `ranges` it applies
//! them ([`crate::quant::apply`]) to the model's module and every bucket's; without them it
//! first calibrates on `calibration:` (a folder relative to the spec, `quant/samples.rs`) with the
//! reference interpreter and the section's `method`. Errors point at the section.

use super::diag::{SpecError, SpecErrorKind};
use super::model::Model;
use super::spans::SpanIndex;
use crate::quant::{self, Quantization};
use std::path::Path;

/// The section's quantization, if the spec has one.
pub fn section(path: &Path, source: &str) -> Result<Option<Quantization>, SpecError> {
    let Ok(serde_yaml::Value::Mapping(top)) = serde_yaml::from_str::<serde_yaml::Value>(source)
    else {
        return Ok(None);
    };
    let Some(v) = top.get("quantize") else {
        return Ok(None);
    };
    let spans = SpanIndex::build(source);
    serde_yaml::from_value::<Quantization>(v.clone())
        .map(Some)
        .map_err(|e| {
            SpecError::new(path, SpecErrorKind::Invalid(format!("`quantize`: {e}")))
                .at(spans.find("quantize"), source)
                .expected("`quantize: {method: minmax|percentile|entropy, per_channel: true|false, calibration: FOLDER}` or the `ranges` xla-aot quantize writes")
        })
}

/// `model` quantized as the spec's `quantize:` section says (unchanged without one).
pub fn apply_section(path: &Path, source: &str, mut model: Model) -> Result<Model, SpecError> {
    let Some(mut q) = section(path, source)? else {
        return Ok(model);
    };
    let spans = SpanIndex::build(source);
    let err = |m: String| {
        SpecError::new(path, SpecErrorKind::Invalid(format!("`quantize`: {m}")))
            .at(spans.find("quantize"), source)
    };
    if q.ranges.is_none() {
        let Some(dir) = &q.calibration else {
            return Err(err("needs `ranges` or `calibration: FOLDER`".into()).hint(
                "run `xla-aot quantize MODEL --calibration FOLDER -o OUT.yaml` to write the ranges, or name a folder of .npy samples",
            ));
        };
        let dir = path.parent().unwrap_or(Path::new(".")).join(dir);
        let samples = quant::samples::read(&dir, &model.module).map_err(|e| err(e.to_string()))?;
        let c = quant::calibrate(
            &model.module,
            &samples,
            q.method,
            q.per_channel,
            &mut quant::interpreter,
        )
        .map_err(|e| err(e.to_string()))?;
        q.ranges = c.quantization.ranges;
    }
    model.module = quant::apply(&model.module, &q).map_err(|e| err(e.to_string()))?;
    for (_, b) in &mut model.buckets {
        *b = quant::apply(b, &q).map_err(|e| err(e.to_string()))?;
    }
    Ok(model)
}
