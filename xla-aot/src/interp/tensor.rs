//! Host tensors of the reference interpreter, and index arithmetic over row-major dims.

use crate::ir::{DType, Literal};

/// Element storage.
#[derive(Debug, Clone)]
pub enum Data {
    F32(Vec<f32>),
    I32(Vec<i32>),
    Pred(Vec<bool>),
}

/// A logical row-major tensor.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub dims: Vec<usize>,
    pub data: Data,
}

/// Row-major strides of `dims`.
pub fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// The coordinates of row-major offset `i` in `dims`.
pub fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut c = vec![0; dims.len()];
    for k in (0..dims.len()).rev() {
        if dims[k] > 0 {
            c[k] = i % dims[k];
            i /= dims[k];
        }
    }
    c
}

impl Data {
    /// Builds data of this variant where element `j` is element `src(idx[j])` of some tensor of the
    /// same dtype (used by every data-movement op).
    pub fn gather_from<'t>(
        &self,
        idx: &[usize],
        src: impl Fn(usize) -> (&'t Tensor, usize),
    ) -> Data {
        match self {
            Data::F32(_) => Data::F32(
                idx.iter()
                    .map(|&i| {
                        let (t, o) = src(i);
                        t.f32()[o]
                    })
                    .collect(),
            ),
            Data::I32(_) => Data::I32(
                idx.iter()
                    .map(|&i| {
                        let (t, o) = src(i);
                        match &t.data {
                            Data::I32(v) => v[o],
                            _ => unreachable!("verified: same dtype"),
                        }
                    })
                    .collect(),
            ),
            Data::Pred(_) => Data::Pred(
                idx.iter()
                    .map(|&i| {
                        let (t, o) = src(i);
                        match &t.data {
                            Data::Pred(v) => v[o],
                            _ => unreachable!("verified: same dtype"),
                        }
                    })
                    .collect(),
            ),
        }
    }
}

impl Tensor {
    /// From a literal of a supported dtype.
    pub fn from_literal(l: &Literal) -> Option<Tensor> {
        let data = match l.dtype {
            DType::F32 => Data::F32(l.to_f32_vec()?),
            DType::I32 => Data::I32(l.to_i32_vec()?),
            DType::Pred => Data::Pred(l.to_pred_vec()?),
            _ => return None,
        };
        Some(Tensor {
            dims: l.dims.clone(),
            data,
        })
    }

    /// From f64 values, rounded once to the dtype.
    pub fn from_f64(dtype: DType, dims: Vec<usize>, v: &[f64]) -> Tensor {
        let data = match dtype {
            DType::I32 => Data::I32(v.iter().map(|&x| x as i32).collect()),
            _ => Data::F32(v.iter().map(|&x| x as f32).collect()),
        };
        Tensor { dims, data }
    }

    /// To a literal.
    pub fn to_literal(&self) -> Literal {
        match &self.data {
            Data::F32(v) => Literal::from_f32(self.dims.clone(), v),
            Data::I32(v) => Literal::from_i32(self.dims.clone(), v),
            Data::Pred(v) => Literal::from_pred(self.dims.clone(), v),
        }
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        match self.data {
            Data::F32(_) => DType::F32,
            Data::I32(_) => DType::I32,
            Data::Pred(_) => DType::Pred,
        }
    }

    /// Element count.
    pub fn len(&self) -> usize {
        match &self.data {
            Data::F32(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::Pred(v) => v.len(),
        }
    }

    /// The f32 elements (the verifier guarantees the dtype wherever this is called).
    pub fn f32(&self) -> &[f32] {
        match &self.data {
            Data::F32(v) => v,
            _ => unreachable!("verified: f32 operand"),
        }
    }

    /// The i32 elements (the verifier guarantees the dtype wherever this is called).
    pub fn i32(&self) -> &[i32] {
        match &self.data {
            Data::I32(v) => v,
            _ => unreachable!("verified: i32 operand"),
        }
    }

    /// Element `i` as f64, whatever the dtype.
    pub fn get_f64(&self, i: usize) -> f64 {
        match &self.data {
            Data::F32(v) => v[i] as f64,
            Data::I32(v) => v[i] as f64,
            Data::Pred(v) => v[i] as u8 as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_math() {
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(unravel(23, &[2, 3, 4]), vec![1, 2, 3]);
        assert_eq!(unravel(0, &[]), Vec::<usize>::new());
    }
}
