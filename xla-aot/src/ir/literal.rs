//! Literal constants: the data of `constant` instructions.
//!
//! Contract: a literal holds its elements in logical row-major order as little-endian bytes of its
//! dtype, whatever the layout of the instruction that owns it (layout only matters to codegen).
//! Equality is bitwise, so `-0.0 != 0.0` and a NaN equals the same NaN: exactly what a text
//! round trip must preserve. A literal may be *elided*: the HLO text printer shortens large constants
//! to `{...}` (as XLA does) and the parser reads that back as a literal with a shape but no data;
//! such a module can be inspected and verified but not evaluated.

use super::shape::DType;
use std::sync::Arc;

/// The payload of a constant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LiteralData {
    /// Row-major little-endian element bytes; length = element count × dtype size. Shared, so
    /// cloning a module (the compile path keeps the module as imported and the optimised one)
    /// never copies its weights.
    Dense(Arc<Vec<u8>>),
    /// Data left out of a printed module (`constant({...})`).
    Elided,
}

/// A typed constant tensor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Literal {
    /// Element type.
    pub dtype: DType,
    /// Logical dimensions.
    pub dims: Vec<usize>,
    /// The elements.
    pub data: LiteralData,
}

impl Literal {
    /// An f32 literal from row-major values. Panics if `values.len()` does not match `dims`
    /// (a compiler bug, never a user error).
    pub fn from_f32(dims: Vec<usize>, values: &[f32]) -> Literal {
        assert_eq!(values.len(), dims.iter().product::<usize>(), "literal size");
        let mut bytes = Vec::with_capacity(values.len() * 4);
        for v in values {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        Literal {
            dtype: DType::F32,
            dims,
            data: LiteralData::Dense(bytes.into()),
        }
    }

    /// An i32 literal from row-major values.
    pub fn from_i32(dims: Vec<usize>, values: &[i32]) -> Literal {
        assert_eq!(values.len(), dims.iter().product::<usize>(), "literal size");
        let mut bytes = Vec::with_capacity(values.len() * 4);
        for v in values {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        Literal {
            dtype: DType::I32,
            dims,
            data: LiteralData::Dense(bytes.into()),
        }
    }

    /// A pred literal from row-major values.
    pub fn from_pred(dims: Vec<usize>, values: &[bool]) -> Literal {
        assert_eq!(values.len(), dims.iter().product::<usize>(), "literal size");
        Literal {
            dtype: DType::Pred,
            dims,
            data: LiteralData::Dense(Arc::new(values.iter().map(|&b| b as u8).collect())),
        }
    }

    /// A scalar f32.
    pub fn scalar_f32(v: f32) -> Literal {
        Literal::from_f32(Vec::new(), &[v])
    }

    /// Number of elements.
    pub fn element_count(&self) -> usize {
        self.dims.iter().product()
    }

    /// Whether the data was elided in the text it was parsed from.
    pub fn is_elided(&self) -> bool {
        matches!(self.data, LiteralData::Elided)
    }

    /// Raw bytes, or `None` when elided.
    pub fn bytes(&self) -> Option<&[u8]> {
        match &self.data {
            LiteralData::Dense(b) => Some(b),
            LiteralData::Elided => None,
        }
    }

    /// This literal with its data elided (same dtype and dims).
    pub fn elided(&self) -> Literal {
        Literal {
            dtype: self.dtype,
            dims: self.dims.clone(),
            data: LiteralData::Elided,
        }
    }

    /// The elements as f32, if the dtype is f32 and the data is present.
    pub fn to_f32_vec(&self) -> Option<Vec<f32>> {
        if self.dtype != DType::F32 {
            return None;
        }
        let b = self.bytes()?;
        Some(
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }

    /// The elements as i32, if the dtype is i32 and the data is present.
    pub fn to_i32_vec(&self) -> Option<Vec<i32>> {
        if self.dtype != DType::I32 {
            return None;
        }
        let b = self.bytes()?;
        Some(
            b.chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }

    /// The elements as bools, if the dtype is pred and the data is present.
    pub fn to_pred_vec(&self) -> Option<Vec<bool>> {
        if self.dtype != DType::Pred {
            return None;
        }
        Some(self.bytes()?.iter().map(|&b| b != 0).collect())
    }

    /// The elements as f64 (for summaries and comparisons; int64 beyond 2^53 rounds); empty for
    /// elided data.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        let b = self.bytes().unwrap_or_default();
        let half = |f: fn(u16) -> f32| -> Vec<f64> {
            b.chunks_exact(2)
                .map(|c| f(u16::from_le_bytes([c[0], c[1]])) as f64)
                .collect()
        };
        match self.dtype {
            DType::I64 => b
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")) as f64)
                .collect(),
            DType::U8 | DType::Pred => b.iter().map(|&v| v as f64).collect(),
            DType::I8 => b.iter().map(|&v| v as i8 as f64).collect(),
            DType::I16 => b
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]) as f64)
                .collect(),
            DType::U16 => b
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]) as f64)
                .collect(),
            DType::U32 => b
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                .collect(),
            DType::U64 => b
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")) as f64)
                .collect(),
            DType::F16 => half(super::half::f16_to_f32),
            DType::BF16 => half(super::half::bf16_to_f32),
            DType::F32 => self
                .to_f32_vec()
                .unwrap_or_default()
                .into_iter()
                .map(f64::from)
                .collect(),
            DType::I32 => self
                .to_i32_vec()
                .unwrap_or_default()
                .into_iter()
                .map(f64::from)
                .collect(),
        }
    }

    /// Whether the data length matches dtype and dims (always true for elided data).
    pub fn is_well_formed(&self) -> bool {
        match &self.data {
            LiteralData::Dense(b) => {
                b.len() == self.element_count() * self.dtype.size_bytes()
                    && (self.dtype != DType::Pred || b.iter().all(|&x| x <= 1))
            }
            LiteralData::Elided => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equality_is_bitwise() {
        let a = Literal::from_f32(vec![2], &[0.0, f32::NAN]);
        let b = Literal::from_f32(vec![2], &[0.0, f32::NAN]);
        let c = Literal::from_f32(vec![2], &[-0.0, f32::NAN]);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn typed_views() {
        let l = Literal::from_i32(vec![3], &[1, -2, 3]);
        assert_eq!(l.to_i32_vec(), Some(vec![1, -2, 3]));
        assert_eq!(l.to_f32_vec(), None);
        assert!(l.elided().to_i32_vec().is_none());
    }
}
