//! The C API dtypes of a module's inputs and outputs, where they differ from the IR's.
//!
//! Contract: the IR computes in pred, i32 and f32 only; [`ApiTypes`] lists, per input and output,
//! the element type the C caller passes instead (`None`: the IR dtype); [`allowed`] is the one
//! table of pairs the entry points convert (`ir/api.rs`, `codegen/core/boundary.rs`), which the
//! verifier checks. The text form is printed on the `HloModule` line.

use super::shape::DType;

/// Per input and output of the entry computation: the API dtype, where it differs from the IR's.
/// Empty vectors (the default) mean every input and output is passed in its IR dtype.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ApiTypes {
    /// One per parameter (in parameter order), or empty.
    pub inputs: Vec<Option<DType>>,
    /// One per output, or empty.
    pub outputs: Vec<Option<DType>>,
}

impl ApiTypes {
    /// Whether every input and output is passed in its IR dtype.
    pub fn is_empty(&self) -> bool {
        self.inputs.iter().chain(&self.outputs).all(Option::is_none)
    }

    /// The API dtype of input `k`, if it differs from the IR's.
    pub fn input(&self, k: usize) -> Option<DType> {
        self.inputs.get(k).copied().flatten()
    }

    /// The API dtype of output `k`, if it differs from the IR's.
    pub fn output(&self, k: usize) -> Option<DType> {
        self.outputs.get(k).copied().flatten()
    }

    /// The text form printed on the `HloModule` line: `(i64, _) -> (_, f16)`; `_` is the IR dtype.
    pub fn text(&self, inputs: usize, outputs: usize) -> String {
        let side = |v: &[Option<DType>], n: usize| -> String {
            (0..n)
                .map(|k| v.get(k).copied().flatten().map_or("_", DType::name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "({}) -> ({})",
            side(&self.inputs, inputs),
            side(&self.outputs, outputs)
        )
    }

    /// Parses [`ApiTypes::text`].
    pub fn parse(s: &str) -> Result<ApiTypes, String> {
        let (ins, outs) = s
            .split_once("->")
            .ok_or_else(|| format!("api_types `{s}` has no `->`"))?;
        let side = |t: &str| -> Result<Vec<Option<DType>>, String> {
            let t = t.trim();
            let inner = t
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| format!("api_types side `{t}` is not parenthesised"))?;
            inner
                .split(',')
                .map(str::trim)
                .filter(|w| !w.is_empty())
                .map(|w| match w {
                    "_" => Ok(None),
                    _ => DType::from_name(w)
                        .map(Some)
                        .ok_or_else(|| format!("`{w}` is not a dtype")),
                })
                .collect()
        };
        let mut a = ApiTypes {
            inputs: side(ins)?,
            outputs: side(outs)?,
        };
        if a.is_empty() {
            a = ApiTypes::default();
        }
        Ok(a)
    }
}

/// Whether values of API dtype `api` can be passed for an IR value of dtype `ir`; an f32
/// value passed as a byte (a quantized model's output computed as f32 integers, so that the
/// dense layer writing it keeps its epilogue: `front/tflite`) only as an output, converted as
/// `convert` to i32 does, then its low byte (`ir/api.rs` `to_api`).
pub fn allowed(api: DType, ir: DType) -> bool {
    matches!(
        (api, ir),
        (
            DType::I64 | DType::U64 | DType::U32 | DType::I16 | DType::U16 | DType::U8 | DType::I8,
            DType::I32
        ) | (DType::F16 | DType::BF16, DType::F32)
    ) || output_bytes(api, ir)
}

/// Whether API dtype `api` is a byte passed for an f32 output ([`allowed`]).
pub fn output_bytes(api: DType, ir: DType) -> bool {
    matches!((api, ir), (DType::I8 | DType::U8, DType::F32))
}

/// The dtype the module computes in for values of API dtype `api`.
pub fn ir_dtype(api: DType) -> DType {
    match api {
        DType::I64 | DType::U64 | DType::U32 | DType::I16 | DType::U16 | DType::U8 | DType::I8 => {
            DType::I32
        }
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips() {
        let a = ApiTypes {
            inputs: vec![Some(DType::I64), None],
            outputs: vec![None, Some(DType::F16)],
        };
        assert_eq!(a.text(2, 2), "(i64, _) -> (_, f16)");
        assert_eq!(ApiTypes::parse(&a.text(2, 2)).unwrap(), a);
    }

    #[test]
    fn bytes_pass_f32_outputs_only() {
        assert!(allowed(DType::I8, DType::F32) && output_bytes(DType::I8, DType::F32));
        assert!(allowed(DType::U8, DType::I32) && !output_bytes(DType::U8, DType::I32));
        assert!(!allowed(DType::I16, DType::F32));
    }
}
