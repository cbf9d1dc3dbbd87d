//! API dtypes: the element type the C caller passes for an input or receives for an output, when
//! it differs from the dtype the module computes in.
//!
//! Contract: the IR computes in pred, i32 and f32 only. An input or output may carry an *API
//! dtype* that the generated entry points convert at the boundary (`codegen/core/boundary.rs`):
//! i64, u8 and i8 are held in i32 (an int64 input outside the i32 range is a bad argument, an i32
//! output sign-extends to int64, a uint8 output keeps the low 8 bits), f16 and bf16 in f32 (inputs
//! widen exactly, outputs round to nearest even). [`ApiTypes`] lists them per input and output
//! (`None`: the IR dtype); [`allowed`] is the one table of pairs, which the verifier checks. The
//! host-side conversions here ([`to_ir`], [`to_api`], the half-precision helpers) compute the
//! same values bit for bit, for the interpreter, the `.npy` tools and the tests.

use super::literal::{Literal, LiteralData};
use super::module::Module;
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

/// Whether values of API dtype `api` can be passed for an IR value of dtype `ir`.
pub fn allowed(api: DType, ir: DType) -> bool {
    matches!(
        (api, ir),
        (DType::I64 | DType::U8 | DType::I8, DType::I32) | (DType::F16 | DType::BF16, DType::F32)
    )
}

/// The dtype the module computes in for values of API dtype `api`.
pub fn ir_dtype(api: DType) -> DType {
    match api {
        DType::I64 | DType::U8 | DType::I8 => DType::I32,
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

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

/// IEEE half bits → f32, exactly (subnormals, infinities and NaN payloads included).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let em = (h as u32) & 0x7fff;
    let bits = if em >= 0x7c00 {
        0x7f80_0000 | ((em & 0x3ff) << 13)
    } else {
        // Shift into f32's field and rescale by 2^112: exact for normals and subnormals alike.
        (f32::from_bits(em << 13) * f32::from_bits(0x7780_0000)).to_bits()
    };
    f32::from_bits(sign | bits)
}

/// f32 → IEEE half bits, rounding to nearest even (overflow → infinity, NaN → quiet NaN).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = (bits >> 16) & 0x8000;
    let a = bits & 0x7fff_ffff;
    let h = if a > 0x7f80_0000 {
        0x7e00
    } else if a >= 0x4780_0000 {
        0x7c00 // 65520 and above round to infinity
    } else if a < 0x3880_0000 {
        // Subnormal or zero: adding 0.5 lets the f32 adder round at the half's last bit.
        let f = f32::from_bits(a) + 0.5;
        f.to_bits() - 0.5f32.to_bits()
    } else {
        let odd = (a >> 13) & 1;
        (a.wrapping_add(0xc800_0000u32).wrapping_add(0xfff + odd)) >> 13
    };
    (sign | h) as u16
}

/// bfloat16 bits → f32, exactly.
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 → bfloat16 bits, rounding to nearest even (NaN → quiet NaN).
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

fn dense(dtype: DType, dims: &[usize], data: Vec<u8>) -> Literal {
    Literal {
        dtype,
        dims: dims.to_vec(),
        data: LiteralData::Dense(data),
    }
}

/// A literal of an API dtype converted to the IR dtype it computes in, as the entry point
/// converts it; an int64 value outside the i32 range is an error naming it.
pub fn to_ir(lit: &Literal) -> Result<Literal, String> {
    let b = lit.bytes().unwrap_or_default();
    let ir = ir_dtype(lit.dtype);
    let mut out = Vec::with_capacity(lit.element_count() * 4);
    match lit.dtype {
        DType::I64 => {
            for (i, c) in b.chunks_exact(8).enumerate() {
                let v = i64::from_le_bytes(c.try_into().expect("8 bytes"));
                let w = i32::try_from(v).map_err(|_| {
                    format!("element {i} is {v}, outside the int32 range the model computes in")
                })?;
                out.extend_from_slice(&w.to_le_bytes());
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
        (DType::I32, DType::I64 | DType::U8 | DType::I8) => {
            for c in b.chunks_exact(4) {
                let v = i32::from_le_bytes(c.try_into().expect("4 bytes"));
                match api {
                    DType::I64 => out.extend_from_slice(&(v as i64).to_le_bytes()),
                    _ => out.push(v as u8),
                }
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
    fn half_round_trips_every_value() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f16_to_f32(f32_to_f16(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16(f), h, "half {h:#x} = {f}");
            }
        }
    }

    #[test]
    fn half_rounds_to_nearest_even() {
        // 1 + 2^-11 lies halfway between 1 and the next half (1 + 2^-10): ties go to even (1).
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f32_to_f16(65520.0), 0x7c00);
        assert_eq!(f32_to_f16(-2f32.powi(-24)), 0x8001);
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0x0000);
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
    }

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
    fn text_round_trips() {
        let a = ApiTypes {
            inputs: vec![Some(DType::I64), None],
            outputs: vec![None, Some(DType::F16)],
        };
        assert_eq!(a.text(2, 2), "(i64, _) -> (_, f16)");
        assert_eq!(ApiTypes::parse(&a.text(2, 2)).unwrap(), a);
    }
}
