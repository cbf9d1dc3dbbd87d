//! Element types, dimensions and layouts: the static type of every HLO value.
//!
//! Contract: a [`Shape`] is a dtype, a list of dimensions and a layout. Dimensions are logical
//! (row-major order of the indices); the layout says how those indices are laid out in memory, as
//! XLA's `minor_to_major` list: the first entry is the fastest-varying dimension. Every shape the
//! compiler builds has an element count that fits [`MAX_ELEMENTS`].

use std::fmt;

/// Largest element count of any tensor. Kernels index with 32-bit signed integers on every target
/// (PTX and small cores prefer it), so element counts stay below `i32::MAX`.
pub const MAX_ELEMENTS: u64 = i32::MAX as u64;

/// Element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// 1-bit boolean stored as one byte (results of `compare`).
    Pred,
    /// 8-bit signed integer (reserved: quantised models).
    I8,
    /// 32-bit signed integer (indices).
    I32,
    /// 64-bit signed integer: a C API type only (ONNX int64 inputs and outputs, computed in i32;
    /// `ir/api.rs`).
    I64,
    /// 8-bit unsigned integer: a C API type only (uint8 images, computed in i32; `ir/api.rs`).
    U8,
    /// 16-bit signed integer: a C API type only (computed in i32; `ir/api.rs`).
    I16,
    /// 16-bit unsigned integer: a C API type only (computed in i32; `ir/api.rs`).
    U16,
    /// 32-bit unsigned integer: a C API type only (values below 2^31, computed in i32).
    U32,
    /// 64-bit unsigned integer: a C API type only (values below 2^31, computed in i32).
    U64,
    /// IEEE half precision: a C API and weight type (computed in f32; `ir/api.rs`).
    F16,
    /// bfloat16: a C API and weight type (computed in f32; `ir/api.rs`).
    BF16,
    /// IEEE single precision.
    F32,
}

impl DType {
    /// Every dtype, for parsers and error hints.
    pub const ALL: [DType; 12] = [
        DType::Pred,
        DType::I8,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::I16,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
    ];

    /// The name used in specs and in HLO text.
    pub fn name(self) -> &'static str {
        match self {
            DType::Pred => "pred",
            DType::I8 => "i8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
        }
    }

    /// Parses a dtype name as printed by [`DType::name`].
    pub fn from_name(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Storage size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Pred | DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 => 8,
        }
    }

    /// Whether the dtype is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32)
    }

    /// Whether every stage of the compiler (interpreter, codegen) handles this dtype today.
    /// The others exist so that shapes, literals and weight files can already name them.
    pub fn is_supported(self) -> bool {
        matches!(self, DType::Pred | DType::I32 | DType::F32)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Memory layout as XLA's `minor_to_major`: a permutation of `0..rank`, fastest dimension first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Dimension indices from the fastest-varying to the slowest.
    pub minor_to_major: Vec<usize>,
}

impl Layout {
    /// Row-major (C order) layout for a given rank: `{rank-1, ..., 1, 0}`.
    pub fn row_major(rank: usize) -> Layout {
        Layout {
            minor_to_major: (0..rank).rev().collect(),
        }
    }

    /// Whether this is a permutation of `0..rank`.
    pub fn is_valid_for_rank(&self, rank: usize) -> bool {
        if self.minor_to_major.len() != rank {
            return false;
        }
        let mut seen = vec![false; rank];
        for &d in &self.minor_to_major {
            if d >= rank || seen[d] {
                return false;
            }
            seen[d] = true;
        }
        true
    }
}

/// The static type of a value: dtype, logical dimensions, layout.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Element type.
    pub dtype: DType,
    /// Logical dimensions; empty for a scalar.
    pub dims: Vec<usize>,
    /// Physical layout.
    pub layout: Layout,
}

impl Shape {
    /// A row-major shape.
    pub fn new(dtype: DType, dims: Vec<usize>) -> Shape {
        let layout = Layout::row_major(dims.len());
        Shape {
            dtype,
            dims,
            layout,
        }
    }

    /// A scalar of the given dtype.
    pub fn scalar(dtype: DType) -> Shape {
        Shape::new(dtype, Vec::new())
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of elements (1 for a scalar). Saturates instead of overflowing; shapes built by the
    /// compiler are checked against [`MAX_ELEMENTS`] so the saturation is never observed there.
    pub fn element_count(&self) -> usize {
        self.dims
            .iter()
            .fold(1usize, |acc, &d| acc.saturating_mul(d))
    }

    /// Size in bytes of a dense buffer of this shape.
    pub fn size_bytes(&self) -> usize {
        self.element_count().saturating_mul(self.dtype.size_bytes())
    }

    /// Same dims and dtype, ignoring layout.
    pub fn same_type(&self, other: &Shape) -> bool {
        self.dtype == other.dtype && self.dims == other.dims
    }

    /// This shape with another dtype (same dims and layout).
    pub fn with_dtype(&self, dtype: DType) -> Shape {
        Shape {
            dtype,
            ..self.clone()
        }
    }
}

/// Refuses a rank above [`crate::limits::MAX_RANK`] (code generation nests one loop per
/// dimension).
pub fn check_rank(dims: &[usize]) -> Result<(), String> {
    use crate::limits::MAX_RANK;
    if dims.len() > MAX_RANK {
        Err(format!(
            "rank {} is above the limit of {MAX_RANK} dimensions (MAX_RANK, see docs/limits.md)",
            dims.len()
        ))
    } else {
        Ok(())
    }
}

/// Element count of `dims`, or `None` when it exceeds [`MAX_ELEMENTS`].
pub fn checked_element_count(dims: &[usize]) -> Option<usize> {
    let mut n: u64 = 1;
    for &d in dims {
        n = n.checked_mul(d as u64)?;
        if n > MAX_ELEMENTS {
            return None;
        }
    }
    Some(n as usize)
}

impl fmt::Display for Shape {
    /// Prints as HLO text: `f32[1,3,32,32]{3,2,1,0}`; scalars print as `f32[]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.dtype, join(&self.dims))?;
        if !self.dims.is_empty() {
            write!(f, "{{{}}}", join(&self.layout.minor_to_major))?;
        }
        Ok(())
    }
}

/// Comma-joins a list of integers (`1,2,3`).
pub fn join(v: &[usize]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Prints dims as `[1,3,32,32]`, the form used in error messages.
pub fn dims_str(dims: &[usize]) -> String {
    format!("[{}]", join(dims))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_prints_like_xla() {
        let s = Shape::new(DType::F32, vec![1, 3, 32, 32]);
        assert_eq!(s.to_string(), "f32[1,3,32,32]{3,2,1,0}");
        assert_eq!(Shape::scalar(DType::I32).to_string(), "i32[]");
    }

    #[test]
    fn element_count_overflow_is_detected() {
        assert_eq!(checked_element_count(&[2, 3]), Some(6));
        assert_eq!(checked_element_count(&[1 << 20, 1 << 20]), None);
        assert_eq!(checked_element_count(&[]), Some(1));
    }

    #[test]
    fn layouts_are_permutations() {
        assert!(Layout::row_major(4).is_valid_for_rank(4));
        let bad = Layout {
            minor_to_major: vec![0, 0],
        };
        assert!(!bad.is_valid_for_rank(2));
    }
}
