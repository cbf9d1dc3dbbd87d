//! API dtypes: the element type the C caller passes for an input or receives for an output, when
//! it differs from the dtype the module computes in.
//!
//! Contract: the IR computes in pred, i32 and f32 only. An input or output may carry an *API
//! dtype* that the generated entry points convert at the boundary (`codegen/core/boundary.rs`):
//! i64, u64, u32, i16, u16, u8 and i8 are held in i32 (an int64, uint64 or uint32 input outside
//! the i32 range is a bad argument, an i32 output sign-extends to int64 and uint64 (which wraps as
//! ONNX's unsigned arithmetic does), a narrower or unsigned output keeps the low bits), f16 and
//! bf16 in f32 (inputs widen exactly, outputs round to nearest even). [`ApiTypes`] lists them per input and output
//! (`api_types.rs`); the host-side conversions here ([`to_ir`], [`to_api`], with `half.rs`)
//! compute the same values bit for bit, for the interpreter, the JIT, `xla-aot run` and the tests.

pub use super::api_types::{ApiTypes, allowed, ir_dtype};
pub use super::half::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use super::literal::{Literal, LiteralData};
use super::module::Module;
use super::shape::DType;

impl Module {
    /// The dtype the C caller passes for input `k` (the API dtype, else the IR dtype).
    pub fn input_dtype(&self, k: usize) -> DType {
        self.api
            .input(k)
            .unwrap_or_else(|| self.entry.inst(self.entry.parameters()[k]).shape.dtype)
    }

    /// The dtype the C caller receives for output `k`.
    pub fn output_dtype(&self, k: usize) -> DType {
        self.api
            .output(k)
            .unwrap_or_else(|| self.entry.inst(self.entry.outputs[k].value).shape.dtype)
    }
}

fn dense(dtype: DType, dims: &[usize], data: Vec<u8>) -> Literal {
    Literal {
        dtype,
        dims: dims.to_vec(),
        data: LiteralData::Dense(data.into()),
    }
}

/// A literal of an API dtype converted to the IR dtype it computes in, as the entry point
/// converts it; an int64 value outside the i32 range is an error naming it.
pub fn to_ir(lit: &Literal) -> Result<Literal, String> {
    let b = lit.bytes().unwrap_or_default();
    let ir = ir_dtype(lit.dtype);
    let mut out = Vec::with_capacity(lit.element_count() * 4);
    match lit.dtype {
        DType::I64 | DType::U64 => {
            for (i, c) in b.chunks_exact(8).enumerate() {
                let c: [u8; 8] = c.try_into().expect("8 bytes");
                let v = match lit.dtype {
                    DType::I64 => i64::from_le_bytes(c) as i128,
                    _ => u64::from_le_bytes(c) as i128,
                };
                let w = i32::try_from(v).map_err(|_| {
                    format!("element {i} is {v}, outside the int32 range the model computes in")
                })?;
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
        DType::U32 => {
            for (i, c) in b.chunks_exact(4).enumerate() {
                let v = u32::from_le_bytes(c.try_into().expect("4 bytes"));
                let w = i32::try_from(v).map_err(|_| {
                    format!("element {i} is {v}, outside the int32 range the model computes in")
                })?;
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
        DType::I16 | DType::U16 => {
            for c in b.chunks_exact(2) {
                let v = match lit.dtype {
                    DType::I16 => i16::from_le_bytes([c[0], c[1]]) as i32,
                    _ => u16::from_le_bytes([c[0], c[1]]) as i32,
                };
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::U8 => b
            .iter()
            .for_each(|&v| out.extend_from_slice(&(v as i32).to_le_bytes())),
        DType::I8 => b
            .iter()
            .for_each(|&v| out.extend_from_slice(&(v as i8 as i32).to_le_bytes())),
        DType::F16 | DType::BF16 => {
            for c in b.chunks_exact(2) {
                let h = u16::from_le_bytes([c[0], c[1]]);
                let f = if lit.dtype == DType::F16 {
                    f16_to_f32(h)
                } else {
                    bf16_to_f32(h)
                };
                out.extend_from_slice(&f.to_le_bytes());
            }
        }
        _ => return Ok(lit.clone()),
    }
    Ok(dense(ir, &lit.dims, out))
}

/// An IR literal (i32 or f32) converted to API dtype `api`, as the entry point converts outputs.
pub fn to_api(lit: &Literal, api: DType) -> Literal {
    let b = lit.bytes().unwrap_or_default();
    let mut out = Vec::with_capacity(lit.element_count() * api.size_bytes());
    match (lit.dtype, api) {
        (DType::I32, a) if allowed(a, DType::I32) => {
            for c in b.chunks_exact(4) {
                let v = i32::from_le_bytes(c.try_into().expect("4 bytes"));
                match api {
                    // uint64 wraps as ONNX's unsigned arithmetic does (−1 is 2^64 − 1).
                    DType::I64 | DType::U64 => out.extend_from_slice(&(v as i64).to_le_bytes()),
                    // The low bytes (ONNX's wrap-around for the narrower types).
                    _ => out.extend_from_slice(&v.to_le_bytes()[..api.size_bytes()]),
                }
            }
        }
        // `convert` to i32 (toward zero, saturating, NaN 0: Rust's `as`), then the low byte.
        (DType::F32, DType::I8 | DType::U8) => {
            for c in b.chunks_exact(4) {
                let v = f32::from_le_bytes(c.try_into().expect("4 bytes")) as i32;
                out.push(v.to_le_bytes()[0]);
            }
        }
        (DType::F32, DType::F16 | DType::BF16) => {
            for c in b.chunks_exact(4) {
                let v = f32::from_le_bytes(c.try_into().expect("4 bytes"));
                let h = if api == DType::F16 {
                    f32_to_f16(v)
                } else {
                    f32_to_bf16(v)
                };
                out.extend_from_slice(&h.to_le_bytes());
            }
        }
        _ => return lit.clone(),
    }
    dense(api, &lit.dims, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int64_out_of_range_is_an_error() {
        let mut b = Vec::new();
        for v in [5i64, -(1 << 31), 1 << 31] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let lit = dense(DType::I64, &[3], b);
        assert!(to_ir(&lit).unwrap_err().contains("element 2 is 2147483648"));
        let ok = dense(DType::I64, &[1], 5i64.to_le_bytes().to_vec());
        assert_eq!(to_ir(&ok).unwrap(), Literal::from_i32(vec![1], &[5]));
        assert_eq!(
            to_api(&Literal::from_i32(vec![1], &[-3]), DType::I64)
                .bytes()
                .unwrap(),
            (-3i64).to_le_bytes()
        );
    }

    #[test]
    fn an_f32_output_passed_as_a_byte_converts_as_convert_to_i32_then_its_low_byte() {
        let lit = Literal::from_f32(vec![5], &[-128.0, 127.0, 2.9, -2.9, f32::NAN]);
        let b = to_api(&lit, DType::I8);
        assert_eq!(b.dtype, DType::I8);
        assert_eq!(b.bytes().unwrap(), [0x80, 0x7f, 2, 0xfe, 0]);
        let u = to_api(&Literal::from_f32(vec![2], &[255.0, 0.0]), DType::U8);
        assert_eq!(u.bytes().unwrap(), [0xff, 0]);
    }
}
