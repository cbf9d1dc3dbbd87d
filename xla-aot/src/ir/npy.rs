//! Reading and writing numpy `.npy` files (format versions 1.0–3.0), little-endian, C order.
//!
//! Contract: [`read_npy`] returns a [`Literal`] for the dtypes the IR knows (`<f4`, `<f2`, `<i4`,
//! `<i8`, `<i2`, `|i1`, `<u4`, `<u2`, `|u1`, `|b1`) and a typed error for anything else (big-endian, Fortran order, object arrays,
//! truncated data), saying how to re-save the array. [`write_npy`] writes version 1.0 with the
//! header padded to 64 bytes, like `numpy.save`.

use super::literal::{Literal, LiteralData};
use super::shape::{DType, checked_element_count};
use thiserror::Error;

/// Why an `.npy` file could not be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum NpyError {
    /// The magic string or version is wrong.
    #[error("not a .npy file (bad magic bytes or version)")]
    NotNpy,
    /// The header dictionary could not be parsed.
    #[error("malformed .npy header: {0}")]
    BadHeader(String),
    /// An element type this compiler does not read.
    #[error("unsupported .npy dtype `{descr}`{hint}")]
    UnsupportedDtype { descr: String, hint: String },
    /// Column-major data.
    #[error(
        "the array is stored in Fortran order; save it with np.save(f, np.ascontiguousarray(a))"
    )]
    FortranOrder,
    /// Shape too large.
    #[error("the array shape {0} has more elements than the compiler supports")]
    TooLarge(String),
    /// Fewer data bytes than the header promises.
    #[error("the file holds {found} data bytes but its header promises {expected}")]
    Truncated { expected: usize, found: usize },
}

fn descr_dtype(descr: &str) -> Result<DType, NpyError> {
    let hint = |h: &str| NpyError::UnsupportedDtype {
        descr: descr.to_string(),
        hint: h.to_string(),
    };
    match descr {
        "<f4" => Ok(DType::F32),
        "<i4" => Ok(DType::I32),
        "|b1" => Ok(DType::Pred),
        "|i1" => Ok(DType::I8),
        "<f2" => Ok(DType::F16),
        "<i8" => Ok(DType::I64),
        "|u1" => Ok(DType::U8),
        "<i2" => Ok(DType::I16),
        "<u2" => Ok(DType::U16),
        "<u4" => Ok(DType::U32),
        "<u8" => Ok(DType::U64),
        "<f8" => Err(hint(" (float64); convert it with a.astype(np.float32)")),
        d if d.starts_with('>') => Err(hint(
            " (big-endian); convert it with a.astype(a.dtype.newbyteorder('<'))",
        )),
        _ => Err(hint(
            "; expected float32 (<f4), float16 (<f2), int32 (<i4), int64 (<i8), int16 (<i2), int8 (|i1), uint32 (<u4), uint64 (<u8), uint16 (<u2), uint8 (|u1) or bool (|b1)",
        )),
    }
}

/// Extracts the value text after `'key':` in a numpy header dict.
fn header_value<'a>(header: &'a str, key: &str) -> Result<&'a str, NpyError> {
    let pat = format!("'{key}':");
    let start = header
        .find(&pat)
        .ok_or_else(|| NpyError::BadHeader(format!("no '{key}' entry")))?
        + pat.len();
    Ok(header[start..].trim_start())
}

/// Parses an `.npy` file's bytes.
pub fn read_npy(bytes: &[u8]) -> Result<Literal, NpyError> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(NpyError::NotNpy);
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(NpyError::NotNpy);
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        _ => return Err(NpyError::NotNpy),
    };
    let end = start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| NpyError::BadHeader("header longer than the file".into()))?;
    let header = std::str::from_utf8(&bytes[start..end])
        .map_err(|_| NpyError::BadHeader("header is not text".into()))?;

    let descr_text = header_value(header, "descr")?;
    let descr = descr_text
        .strip_prefix('\'')
        .and_then(|r| r.split('\'').next())
        .ok_or_else(|| NpyError::BadHeader("descr is not a string".into()))?;
    let dtype = descr_dtype(descr)?;

    let fortran = header_value(header, "fortran_order")?;
    if fortran.starts_with("True") {
        return Err(NpyError::FortranOrder);
    } else if !fortran.starts_with("False") {
        return Err(NpyError::BadHeader(
            "fortran_order is not True/False".into(),
        ));
    }

    let shape_text = header_value(header, "shape")?;
    let inner = shape_text
        .strip_prefix('(')
        .and_then(|r| r.split(')').next())
        .ok_or_else(|| NpyError::BadHeader("shape is not a tuple".into()))?;
    let mut dims = Vec::new();
    for part in inner.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let d = part
            .trim_end_matches('L')
            .parse::<usize>()
            .map_err(|_| NpyError::BadHeader(format!("bad dimension `{part}`")))?;
        dims.push(d);
    }
    let n = checked_element_count(&dims).ok_or_else(|| NpyError::TooLarge(format!("{dims:?}")))?;
    let expected = n * dtype.size_bytes();
    let data = &bytes[end..];
    if data.len() < expected {
        return Err(NpyError::Truncated {
            expected,
            found: data.len(),
        });
    }
    let lit = Literal {
        dtype,
        dims,
        data: LiteralData::Dense(data[..expected].to_vec().into()),
    };
    if !lit.is_well_formed() {
        return Err(NpyError::BadHeader(
            "boolean data holds values other than 0/1".into(),
        ));
    }
    Ok(lit)
}

/// Serialises a literal as an `.npy` (version 1.0) file. Elided literals write no data.
pub fn write_npy(lit: &Literal) -> Vec<u8> {
    let descr = match lit.dtype {
        DType::F32 => "<f4",
        DType::I32 => "<i4",
        DType::Pred => "|b1",
        DType::I8 => "|i1",
        DType::F16 => "<f2",
        DType::BF16 => "<V2",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::I16 => "<i2",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
    };
    let shape = match lit.dims.len() {
        0 => "()".to_string(),
        1 => format!("({},)", lit.dims[0]),
        _ => format!(
            "({})",
            lit.dims
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // numpy pads so that magic + version + length + header is a multiple of 64, ending in '\n'.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + lit.bytes().map_or(0, |b| b.len()));
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(lit.bytes().unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let lit = Literal::from_f32(vec![2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, -6.5]);
        let bytes = write_npy(&lit);
        // 64-byte aligned header, then 6 × 4 data bytes.
        assert_eq!(bytes.len() % 64, 24);
        assert_eq!(read_npy(&bytes).unwrap(), lit);
        let scalar = Literal::from_i32(vec![], &[7]);
        assert_eq!(read_npy(&write_npy(&scalar)).unwrap(), scalar);
    }

    #[test]
    fn rejects_bad_files() {
        assert_eq!(read_npy(b"hello"), Err(NpyError::NotNpy));
        let lit = Literal::from_f32(vec![4], &[1.0; 4]);
        let mut bytes = write_npy(&lit);
        bytes.truncate(bytes.len() - 3);
        assert!(matches!(read_npy(&bytes), Err(NpyError::Truncated { .. })));
        let mut f64_file = write_npy(&lit);
        let at = f64_file.windows(3).position(|w| w == b"<f4").unwrap();
        f64_file[at + 2] = b'8';
        assert!(matches!(
            read_npy(&f64_file),
            Err(NpyError::UnsupportedDtype { .. })
        ));
    }
}
