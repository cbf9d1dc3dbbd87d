//! `--weights external`: every constant of the model in one blob (`<name>.weights`) outside the
//! library, which the caller keeps wherever it likes (flash, external memory, a file read into
//! RAM) and passes to every run: `<name>_run(weights, arena, ...)`.
//!
//! Contract: the blob is a [`HEADER`]-byte header, then each constant's stored bytes
//! (`Packings::write_stored`) at the offsets [`offsets`] gives (64-byte aligned, in instruction
//! order). The header holds [`MAGIC`], the blob's length (u64, little endian), the FNV-1a-64
//! checksum of the bytes after the header, and the model's name (NUL padded). The library
//! compiles in the length and checksum; the run entry points compare the header with them on
//! every call and `<name>_check_weights` also hashes the rest (`weights_arg.rs`).

use crate::arena::ARENA_ALIGN;

/// Bytes of the blob's header (one cache line: the first weight stays 64-byte aligned).
pub const HEADER: usize = 64;
/// The header's first 8 bytes.
pub const MAGIC: [u8; 8] = *b"XLAAOTW\x01";

/// Where each constant of `sizes` (stored bytes, in order) starts in the blob, and the blob's
/// length.
pub fn offsets(sizes: &[usize]) -> (Vec<usize>, usize) {
    let mut at = Vec::with_capacity(sizes.len());
    let mut end = HEADER;
    for &s in sizes {
        let o = end.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        at.push(o);
        end = o + s;
    }
    (at, end)
}

/// FNV-1a-64's offset basis and prime (the published parameters of the 64-bit FNV hash).
pub const FNV_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
pub const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = FNV_BASIS;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// The blob of model `name`: constant `i` (of `sizes` bytes) written by `fill(i, slot)`.
pub fn write(name: &str, sizes: &[usize], mut fill: impl FnMut(usize, &mut [u8])) -> Vec<u8> {
    let (at, len) = offsets(sizes);
    let mut blob = vec![0u8; len];
    for (i, (&o, &s)) in at.iter().zip(sizes).enumerate() {
        fill(i, &mut blob[o..o + s]);
    }
    let sum = fnv1a64(&blob[HEADER..]);
    blob[..8].copy_from_slice(&MAGIC);
    blob[8..16].copy_from_slice(&(len as u64).to_le_bytes());
    blob[16..24].copy_from_slice(&sum.to_le_bytes());
    let n = name.len().min(HEADER - 24 - 1);
    blob[24..24 + n].copy_from_slice(&name.as_bytes()[..n]);
    blob
}

/// The weights of a module built with `--weights external`: each constant's offset in the blob
/// (by instruction index), the blob's length and checksum, and the blob itself (what
/// `<name>.weights` holds).
#[derive(Debug)]
pub struct BlobLayout {
    pub offsets: Vec<Option<u64>>,
    pub len: u64,
    pub checksum: u64,
    pub bytes: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_aligned_offsets() {
        let (at, len) = offsets(&[3, 100]);
        assert_eq!((at, len), (vec![64, 128], 228));
        let blob = write("m", &[3, 100], |i, d| d.fill(i as u8 + 1));
        assert_eq!(&blob[..8], b"XLAAOTW\x01");
        assert_eq!(u64::from_le_bytes(blob[8..16].try_into().unwrap()), 228);
        assert_eq!(
            u64::from_le_bytes(blob[16..24].try_into().unwrap()),
            fnv1a64(&blob[64..])
        );
        assert_eq!(&blob[24..26], b"m\0");
        assert_eq!((blob[64], blob[127], blob[128]), (1, 0, 2));
    }
}
