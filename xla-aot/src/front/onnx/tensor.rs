//! Compile-time tensors: ONNX `TensorProto`s (initializers, `Constant` values, bound inputs) and
//! the values folded from them at import time (shapes, axes, pads: int64 arithmetic).
//!
//! Contract: a [`ConstTensor`] keeps the ONNX element type and exact values (int64 stays int64),
//! so shape arithmetic is exact; [`ConstTensor::to_literal`] turns it into an HLO literal (f32,
//! i32 or pred) only when a runtime op needs it, checking that integers fit i32. Decoding reads
//! `raw_data` or the typed field of the element type and checks the element count against the
//! dims; external data, strings and types the compiler cannot hold are errors (as `String`
//! messages the caller attaches to a node or initializer).
//!
//! Weights: a float32 tensor of at least [`F32_BYTES_FROM`] elements stays as its little-endian
//! bytes ([`Values::F32`], shared with the HLO literal it becomes, taken from the `TensorProto`
//! by [`ConstTensor::from_proto_owned`] without a copy), so import never holds a model's weights
//! as f64; the fold helpers read it through [`ConstTensor::as_f64`] like any other tensor.

use super::proto::{DATA_LOCATION_EXTERNAL, TensorProto, data_type as dt};
use crate::ir::{DType, Literal, LiteralData};
use std::sync::Arc;

/// Float32 tensors with at least this many elements are kept as their bytes ([`Values::F32`]):
/// weights, which only become literals. Smaller ones (shapes, scales, the scalars folds read)
/// are decoded to f64. 1024 elements (4 KiB) is far above any shape or scalar and far below any
/// weight that matters for memory.
pub const F32_BYTES_FROM: usize = 1024;

/// Element values of a compile-time tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// float32 / float64 (held as f64, rounded to f32 when materialised).
    F(Vec<f64>),
    /// float32 as little-endian bytes (large tensors: [`F32_BYTES_FROM`]).
    F32(Arc<Vec<u8>>),
    /// Any integer type (int64 exactly).
    I(Vec<i64>),
    /// bool.
    B(Vec<bool>),
}

/// A tensor known at import time.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstTensor {
    /// The ONNX element type (`TensorProto.DataType`).
    pub ty: i32,
    /// Dimensions.
    pub dims: Vec<usize>,
    /// Row-major values.
    pub values: Values,
}

/// Whether an ONNX element type is an integer type we can hold.
pub fn is_int_type(t: i32) -> bool {
    matches!(
        t,
        dt::INT4
            | dt::UINT4
            | dt::INT8
            | dt::INT16
            | dt::INT32
            | dt::INT64
            | dt::UINT8
            | dt::UINT16
            | dt::UINT32
            | dt::UINT64
    )
}

/// Whether an ONNX element type is a float type we compute in f32 (float16 and bfloat16 too:
/// their weights widen exactly at import, their graph inputs and outputs convert at the C API).
pub fn is_float_type(t: i32) -> bool {
    matches!(t, dt::FLOAT | dt::DOUBLE | dt::FLOAT16 | dt::BFLOAT16)
}

/// The HLO dtype that holds values of ONNX element type `t` at run time, if any.
pub fn runtime_dtype(t: i32) -> Option<DType> {
    match t {
        t if is_float_type(t) => Some(DType::F32),
        dt::BOOL => Some(DType::Pred),
        t if is_int_type(t) => Some(DType::I32),
        _ => None,
    }
}

fn count(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

fn le_chunks<const N: usize>(raw: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    raw.chunks_exact(N).map(|c| {
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        a
    })
}

/// The f32 values of little-endian bytes.
fn f32s(b: &[u8]) -> impl Iterator<Item = f32> + '_ {
    le_chunks::<4>(b).map(f32::from_le_bytes)
}

impl ConstTensor {
    /// A tensor of int64 values.
    pub fn ints(dims: Vec<usize>, v: Vec<i64>) -> ConstTensor {
        ConstTensor {
            ty: dt::INT64,
            dims,
            values: Values::I(v),
        }
    }

    /// [`ConstTensor::from_proto`], taking a large float32 tensor's `raw_data` instead of copying it
    /// (initializers: the proto is not read again).
    pub fn from_proto_owned(t: &mut TensorProto) -> Result<ConstTensor, String> {
        let n = t.dims.iter().try_fold(1usize, |a, &d| {
            usize::try_from(d).ok().and_then(|d| a.checked_mul(d))
        });
        if t.data_type == dt::FLOAT
            && n.is_some_and(|n| n >= F32_BYTES_FROM && t.raw_data.len() == n * 4)
            && t.data_location != DATA_LOCATION_EXTERNAL
            && t.external_data.is_empty()
        {
            return Ok(ConstTensor {
                ty: dt::FLOAT,
                dims: t.dims.iter().map(|&d| d as usize).collect(),
                values: Values::F32(Arc::new(std::mem::take(&mut t.raw_data))),
            });
        }
        ConstTensor::from_proto(t)
    }

    /// Decodes a `TensorProto`.
    pub fn from_proto(t: &TensorProto) -> Result<ConstTensor, String> {
        if t.data_location == DATA_LOCATION_EXTERNAL || !t.external_data.is_empty() {
            return Err("its data is stored in an external file, which is not supported".into());
        }
        let mut dims = Vec::with_capacity(t.dims.len());
        for &d in &t.dims {
            if d < 0 {
                return Err(format!("it has a negative dimension {d}"));
            }
            dims.push(d as usize);
        }
        let n = count(&dims).ok_or("its element count overflows")?;
        let raw = &t.raw_data;
        let has_raw = !raw.is_empty();
        let want_raw = |size: usize| -> Result<(), String> {
            if raw.len() != n.saturating_mul(size) {
                return Err(format!(
                    "raw_data has {} bytes but {n} elements of {} need {}",
                    raw.len(),
                    dt::name(t.data_type),
                    n.saturating_mul(size)
                ));
            }
            Ok(())
        };
        let check = |len: usize, field: &str| -> Result<(), String> {
            if len != n {
                return Err(format!(
                    "{field} has {len} values but the dims {dims:?} need {n}"
                ));
            }
            Ok(())
        };
        let values = match t.data_type {
            dt::FLOAT => {
                if has_raw && n >= F32_BYTES_FROM {
                    want_raw(4)?;
                    Values::F32(Arc::new(raw.clone()))
                } else if has_raw {
                    want_raw(4)?;
                    Values::F(
                        le_chunks::<4>(raw)
                            .map(|b| f32::from_le_bytes(b) as f64)
                            .collect(),
                    )
                } else if n >= F32_BYTES_FROM {
                    check(t.float_data.len(), "float_data")?;
                    Values::F32(Arc::new(
                        t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    ))
                } else {
                    check(t.float_data.len(), "float_data")?;
                    Values::F(t.float_data.iter().map(|&v| v as f64).collect())
                }
            }
            dt::DOUBLE => {
                if has_raw {
                    want_raw(8)?;
                    Values::F(le_chunks::<8>(raw).map(f64::from_le_bytes).collect())
                } else {
                    check(t.double_data.len(), "double_data")?;
                    Values::F(t.double_data.clone())
                }
            }
            dt::FLOAT16 | dt::BFLOAT16 => {
                // raw_data holds the 2-byte values, int32_data one value's bits per entry.
                let widen = |h: u16| -> f64 {
                    if t.data_type == dt::FLOAT16 {
                        crate::ir::api::f16_to_f32(h) as f64
                    } else {
                        crate::ir::api::bf16_to_f32(h) as f64
                    }
                };
                if has_raw {
                    want_raw(2)?;
                    Values::F(
                        le_chunks::<2>(raw)
                            .map(|b| widen(u16::from_le_bytes(b)))
                            .collect(),
                    )
                } else {
                    check(t.int32_data.len(), "int32_data")?;
                    Values::F(t.int32_data.iter().map(|&v| widen(v as u16)).collect())
                }
            }
            dt::INT64 => {
                if has_raw {
                    want_raw(8)?;
                    Values::I(le_chunks::<8>(raw).map(i64::from_le_bytes).collect())
                } else {
                    check(t.int64_data.len(), "int64_data")?;
                    Values::I(t.int64_data.clone())
                }
            }
            dt::UINT32 | dt::UINT64 => {
                if has_raw && t.data_type == dt::UINT64 {
                    // Values of 2^63 and above wrap to negative int64s here; a run-time value
                    // must fit int32 anyway (`to_literal`).
                    want_raw(8)?;
                    Values::I(
                        le_chunks::<8>(raw)
                            .map(|b| u64::from_le_bytes(b) as i64)
                            .collect(),
                    )
                } else if has_raw {
                    want_raw(4)?;
                    Values::I(
                        le_chunks::<4>(raw)
                            .map(|b| u32::from_le_bytes(b) as i64)
                            .collect(),
                    )
                } else {
                    check(t.uint64_data.len(), "uint64_data")?;
                    Values::I(t.uint64_data.iter().map(|&v| v as i64).collect())
                }
            }
            dt::INT32 | dt::INT16 | dt::INT8 | dt::UINT16 | dt::UINT8 | dt::BOOL => {
                let (size, signed) = match t.data_type {
                    dt::INT32 => (4, true),
                    dt::INT16 => (2, true),
                    dt::INT8 => (1, true),
                    dt::UINT16 => (2, false),
                    _ => (1, false),
                };
                let ints: Vec<i64> = if has_raw {
                    want_raw(size)?;
                    raw.chunks_exact(size)
                        .map(|c| match (size, signed) {
                            (4, _) => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64,
                            (2, true) => i16::from_le_bytes([c[0], c[1]]) as i64,
                            (2, false) => u16::from_le_bytes([c[0], c[1]]) as i64,
                            (_, true) => c[0] as i8 as i64,
                            _ => c[0] as i64,
                        })
                        .collect()
                } else {
                    check(t.int32_data.len(), "int32_data")?;
                    t.int32_data.iter().map(|&v| v as i64).collect()
                };
                if t.data_type == dt::BOOL {
                    Values::B(ints.into_iter().map(|v| v != 0).collect())
                } else {
                    Values::I(ints)
                }
            }
            dt::INT4 | dt::UINT4 => {
                // Two to a byte, the first in the low nibble (raw_data; int32_data holds one
                // such byte per entry).
                let bytes: Vec<u8> = if has_raw {
                    raw.clone()
                } else {
                    t.int32_data.iter().map(|&v| v as u8).collect()
                };
                if bytes.len() != n.div_ceil(2) {
                    return Err(format!(
                        "it has {} bytes of packed {} but {n} elements need {}",
                        bytes.len(),
                        dt::name(t.data_type),
                        n.div_ceil(2)
                    ));
                }
                let nibble = |i: usize| (bytes[i / 2] >> (4 * (i % 2))) & 0xf;
                Values::I(
                    (0..n)
                        .map(|i| match t.data_type {
                            dt::INT4 => ((nibble(i) << 4) as i8 >> 4) as i64,
                            _ => nibble(i) as i64,
                        })
                        .collect(),
                )
            }
            other => {
                return Err(format!(
                    "its element type {} is not supported (float32, float64, integers and bool are)",
                    dt::name(other)
                ));
            }
        };
        Ok(ConstTensor {
            ty: t.data_type,
            dims,
            values,
        })
    }

    /// Number of elements.
    pub fn element_count(&self) -> usize {
        match &self.values {
            Values::F(v) => v.len(),
            Values::F32(b) => b.len() / 4,
            Values::I(v) => v.len(),
            Values::B(v) => v.len(),
        }
    }

    /// The values as int64 (floats truncated, bools 0/1).
    pub fn as_i64(&self) -> Vec<i64> {
        match &self.values {
            Values::F(v) => v.iter().map(|&x| x as i64).collect(),
            Values::F32(b) => f32s(b).map(|x| x as i64).collect(),
            Values::I(v) => v.clone(),
            Values::B(v) => v.iter().map(|&b| b as i64).collect(),
        }
    }

    /// The values as f64.
    pub fn as_f64(&self) -> Vec<f64> {
        match &self.values {
            Values::F(v) => v.clone(),
            Values::F32(b) => f32s(b).map(f64::from).collect(),
            Values::I(v) => v.iter().map(|&x| x as f64).collect(),
            Values::B(v) => v.iter().map(|&b| b as u8 as f64).collect(),
        }
    }

    /// The same values with new dims (same element count, checked by the caller).
    pub fn with_dims(&self, dims: Vec<usize>) -> ConstTensor {
        ConstTensor {
            ty: self.ty,
            dims,
            values: self.values.clone(),
        }
    }

    /// The elements at `picks` (flat indices), with new dims.
    pub fn pick(&self, dims: Vec<usize>, picks: &[usize]) -> ConstTensor {
        let values = match &self.values {
            Values::F(v) => Values::F(picks.iter().map(|&i| v[i]).collect()),
            Values::F32(b) => Values::F32(Arc::new(
                picks
                    .iter()
                    .flat_map(|&i| [b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
                    .collect(),
            )),
            Values::I(v) => Values::I(picks.iter().map(|&i| v[i]).collect()),
            Values::B(v) => Values::B(picks.iter().map(|&i| v[i]).collect()),
        };
        ConstTensor {
            ty: self.ty,
            dims,
            values,
        }
    }

    /// Converts to element type `to` (float → int truncates, anything → bool is `!= 0`).
    pub fn cast(&self, to: i32) -> ConstTensor {
        let values = if to == dt::BOOL {
            Values::B(self.as_f64().iter().map(|&v| v != 0.0).collect())
        } else if is_float_type(to) {
            let v = self.as_f64();
            use crate::ir::api::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
            Values::F(match to {
                dt::FLOAT => v.into_iter().map(|x| x as f32 as f64).collect(),
                dt::FLOAT16 => v
                    .into_iter()
                    .map(|x| f16_to_f32(f32_to_f16(x as f32)) as f64)
                    .collect(),
                dt::BFLOAT16 => v
                    .into_iter()
                    .map(|x| bf16_to_f32(f32_to_bf16(x as f32)) as f64)
                    .collect(),
                _ => v,
            })
        } else {
            Values::I(self.as_i64())
        };
        ConstTensor {
            ty: to,
            dims: self.dims.clone(),
            values,
        }
    }

    /// The HLO literal of this tensor: f32 for floats, i32 for integers (each must fit), pred
    /// for bools.
    pub fn to_literal(&self) -> Result<Literal, String> {
        Ok(match &self.values {
            Values::F(v) => Literal::from_f32(
                self.dims.clone(),
                &v.iter().map(|&x| x as f32).collect::<Vec<_>>(),
            ),
            Values::I(v) => {
                let mut out = Vec::with_capacity(v.len());
                for &x in v {
                    out.push(i32::try_from(x).map_err(|_| {
                        format!(
                            "the {} value {x} does not fit the i32 the compiler computes integers in",
                            dt::name(self.ty)
                        )
                    })?);
                }
                Literal::from_i32(self.dims.clone(), &out)
            }
            Values::F32(b) => Literal {
                dtype: DType::F32,
                dims: self.dims.clone(),
                data: LiteralData::Dense(b.clone()),
            },
            Values::B(v) => Literal::from_pred(self.dims.clone(), v),
        })
    }
}

/// Row-major strides of `dims`.
pub fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(ty: i32, dims: &[i64], raw: Vec<u8>, int32_data: Vec<i32>) -> TensorProto {
        TensorProto {
            data_type: ty,
            dims: dims.to_vec(),
            raw_data: raw,
            int32_data,
            ..Default::default()
        }
    }

    #[test]
    fn four_bit_integers_unpack_low_nibble_first() {
        // 5 elements in 3 bytes, the first of each pair in the low nibble.
        let raw = vec![0x9f, 0x70, 0x08];
        let i4 = ConstTensor::from_proto(&packed(dt::INT4, &[5], raw.clone(), vec![])).unwrap();
        assert_eq!(i4.as_i64(), vec![-1, -7, 0, 7, -8]);
        let u4 = ConstTensor::from_proto(&packed(dt::UINT4, &[5], raw, vec![])).unwrap();
        assert_eq!(u4.as_i64(), vec![15, 9, 0, 7, 8]);
        // int32_data holds one packed byte per entry.
        let i4 = ConstTensor::from_proto(&packed(dt::INT4, &[2], vec![], vec![0x9f])).unwrap();
        assert_eq!(i4.as_i64(), vec![-1, -7]);
        let short = ConstTensor::from_proto(&packed(dt::INT4, &[5], vec![0x9f], vec![]));
        assert!(short.unwrap_err().contains("5 elements need 3"));
    }
}
