//! Unit tests of the packing decisions and layouts (`core/packing.rs`).

use super::*;

fn shape(dims: &[usize]) -> Shape {
    Shape::new(DType::F32, dims.to_vec())
}

fn mm() -> DotDims {
    DotDims {
        lhs_batch: vec![],
        lhs_contracting: vec![1],
        rhs_batch: vec![],
        rhs_contracting: vec![0],
    }
}

#[test]
fn tiles_follow_the_target() {
    let t = |n: &str| Tiles::for_target(&Target::resolve(n).unwrap());
    let avx512 = t("x86_64-avx512");
    assert_eq!((avx512.lanes, avx512.nv, avx512.mr), (16, 2, 14));
    assert_eq!(avx512.kc, 128); // 16 KiB / (32 columns · 4 bytes)
    let avx2 = t("x86_64-avx2");
    assert_eq!((avx2.lanes, avx2.nv, avx2.mr), (8, 2, 6));
    let neon = t("aarch64-neon");
    assert_eq!((neon.lanes, neon.nv, neon.mr), (4, 3, 9));
}

#[test]
fn packing_puts_panels_first() {
    // B = [[0, 1, 2], [3, 4, 5]] (K = 2, N = 3) in panels of 2 columns.
    let bytes: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let packed = pack_gemm(&bytes, &shape(&[2, 3]), &mm(), 2);
    let floats: Vec<f32> = packed
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(floats, vec![0., 1., 3., 4., 2., 0., 5., 0.]);
}

#[test]
fn pair_packing_interleaves_consecutive_k() {
    // B = [[0, 1, 2], [3, 4, 5], [6, 7, 8]] (K = 3, odd; N = 3) in panels of 2 columns.
    let bytes: Vec<u8> = (0..9).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let f: Vec<f32> = pack_gemm_pairs(&bytes, &shape(&[3, 3]), &mm(), 2)
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // Panel 0: pair 0 = (k0, k1) of columns 0, 1; pair 1 = (k2, 0).
    assert_eq!(&f[..8], &[0., 3., 1., 4., 6., 0., 7., 0.]);
    // Panel 1: column 2, then zero columns.
    assert_eq!(&f[8..], &[2., 5., 0., 0., 8., 0., 0., 0.]);
}

#[test]
fn kernel_packing_is_tap_major_then_channel() {
    // w[o, c, 0, x] = 100·o + 10·c + x, O = 3, C = 2, 1×2 window, panels of 2 outputs.
    let w = Shape::new(DType::F32, vec![3, 2, 1, 2]);
    let mut bytes = Vec::new();
    for o in 0..3 {
        for c in 0..2 {
            for x in 0..2 {
                bytes.extend_from_slice(&((100 * o + 10 * c + x) as f32).to_le_bytes());
            }
        }
    }
    let f: Vec<f32> = pack_conv(&bytes, &w, 2, 1)
        .chunks(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    // Panel 0 (o = 0, 1): rows (tap 0, c 0), (tap 0, c 1), (tap 1, c 0), (tap 1, c 1).
    assert_eq!(&f[..8], &[0., 100., 10., 110., 1., 101., 11., 111.]);
    // Panel 1 (o = 2, zero-padded).
    assert_eq!(&f[8..], &[200., 0., 210., 0., 201., 0., 211., 0.]);
}

#[test]
fn grouped_kernels_get_panels_per_group() {
    // w[o, c, 0, 0] = 10·o + c: O = 6 in 2 groups (3 outputs each), C/G = 2, 1×1 window,
    // panels of 2: group 0 has panels (0, 1) and (2, -), group 1 (3, 4) and (5, -).
    let w = Shape::new(DType::F32, vec![6, 2, 1, 1]);
    let bytes: Vec<u8> = (0..6)
        .flat_map(|o| (0..2).map(move |c| (10 * o + c) as f32))
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let f: Vec<f32> = pack_conv(&bytes, &w, 2, 2)
        .chunks(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(
        f,
        vec![
            0., 10., 1., 11., // group 0, panel 0: rows c = 0, 1
            20., 0., 21., 0., // group 0, panel 1
            30., 40., 31., 41., // group 1, panel 0
            50., 0., 51., 0., // group 1, panel 1
        ]
    );
}
