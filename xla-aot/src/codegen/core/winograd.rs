//! Winograd minimal filtering for stride-1 3×3 convolutions: the transforms, which convolution
//! takes it, how its transformed kernel is stored, and how much arena scratch it needs.
//!
//! Contract: `F(m×m, 3×3)` (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks",
//! 2015) computes an `m×m` output tile from an `α×α` input tile (`α = m + 2`) as
//! `Y = Aᵀ [ (G g Gᵀ) ⊙ (Bᵀ d B) ] A`; summed over input channels the elementwise product becomes
//! `α²` independent matrix products `M[ξ] = V[ξ] · U[ξ]` (tiles × C times C × O). [`choose`]
//! picks `m ∈ {2, 4}` for a convolution (or none), [`pack_into`] stores `U = G g Gᵀ` at compile
//! time (in f64, rounded once) as panels `[α²][⌈O/NR⌉][C][NR]`, and [`Geometry`] fixes the tiles,
//! the bands of tile rows processed together and the scratch those need (`cpu/winograd.rs` runs
//! it). Only what the CPU backend reserved arena scratch for takes this path
//! (`arena::BufferPlan::scratch`), so the decision is the same wherever it is asked.
//!
//! Accuracy: the result is not the direct convolution's running sum. With these points
//! (0, ±1, ±2 for `m = 4`; 0, ±1 for `m = 2`) the error measured against the f64 convolution on
//! random data stays below 1e-5 of the largest output magnitude for `F(4,3)` and 1e-6 for
//! `F(2,3)` (unit tests below, with 512 input channels); `--no-winograd` turns it off.

use super::layout::physical_strides;
use super::tiles::{Tiles, panel_width};
use crate::ir::{DType, Shape, Window};
use crate::target::Target;

/// Fewest input and output channels: below this the transforms cost more than the products
/// they save (a transform is ~10 adds per input and output value; the saved products are
/// `(9 - α²/m²)·C` per output value).
const MIN_CHANNELS: usize = 16;

/// Most input channels: a window position in the padding reads the CPU backend's line of zeros
/// (`cpu/conv.rs`' `ZERO_LINE`, 4096 floats) instead of the image.
pub const MAX_CHANNELS: usize = 4096;

/// Fewest tiles: the transformed kernel (`α²·C·O` floats) is read once per band, so with fewer
/// tiles than this it streams from memory faster than it is used. Measured on Zen 5 (one core,
/// against the direct kernel at 90-100% of peak): 14×14×256 with `F(4,3)` (16 tiles) 3.1×
/// faster, `F(2,3)` 2.4×; 7×7×512 with `F(2,3)` (16 tiles) 1.5×; 7×7 with `F(4,3)` (4 tiles)
/// is not tried.
const MIN_TILES: usize = 16;

/// Scratch a band (its transformed input and products) aims to fit, as a multiple of the L2: a
/// band's `V` is read once per output panel and its `M` once, so it should stay in the L2.
const BAND_L2_SHARE: u64 = 2;

/// Most scratch a weight-heavy convolution takes to run all its tiles as one band (its
/// transformed kernel is then read once): 8 MiB.
const MAX_SCRATCH: usize = 8 << 20;

/// `Bᵀ` for `F(2,3)`.
const BT2: [[f64; 4]; 4] = [
    [1.0, 0.0, -1.0, 0.0],
    [0.0, 1.0, 1.0, 0.0],
    [0.0, -1.0, 1.0, 0.0],
    [0.0, 1.0, 0.0, -1.0],
];
/// `G` for `F(2,3)`.
const G2: [[f64; 3]; 4] = [
    [1.0, 0.0, 0.0],
    [0.5, 0.5, 0.5],
    [0.5, -0.5, 0.5],
    [0.0, 0.0, 1.0],
];
/// `Aᵀ` for `F(2,3)`.
const AT2: [[f64; 4]; 2] = [[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, -1.0, -1.0]];

/// `Bᵀ` for `F(4,3)`.
const BT4: [[f64; 6]; 6] = [
    [4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
    [0.0, -4.0, -4.0, 1.0, 1.0, 0.0],
    [0.0, 4.0, -4.0, -1.0, 1.0, 0.0],
    [0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
    [0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
    [0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
];
/// `G` for `F(4,3)`.
const G4: [[f64; 3]; 6] = [
    [1.0 / 4.0, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];
/// `Aᵀ` for `F(4,3)`.
const AT4: [[f64; 6]; 4] = [
    [1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
    [0.0, 1.0, -1.0, 2.0, -2.0, 0.0],
    [0.0, 1.0, 1.0, 4.0, 4.0, 0.0],
    [0.0, 1.0, -1.0, 8.0, -8.0, 1.0],
];

/// The three matrices of `F(m×m, 3×3)`, row-major: `Bᵀ` (α×α), `G` (α×3), `Aᵀ` (m×α).
pub struct Transforms {
    pub m: usize,
    pub alpha: usize,
    pub bt: Vec<Vec<f64>>,
    pub g: Vec<Vec<f64>>,
    pub at: Vec<Vec<f64>>,
}

impl Transforms {
    pub fn new(m: usize) -> Transforms {
        match m {
            2 => Transforms {
                m,
                alpha: 4,
                bt: rows(&BT2),
                g: rows(&G2),
                at: rows(&AT2),
            },
            4 => Transforms {
                m,
                alpha: 6,
                bt: rows(&BT4),
                g: rows(&G4),
                at: rows(&AT4),
            },
            _ => panic!("F({m},3) is not provided; m is 2 or 4"),
        }
    }
}

/// A constant matrix as rows.
fn rows<const N: usize>(m: &[[f64; N]]) -> Vec<Vec<f64>> {
    m.iter().map(|r| r.to_vec()).collect()
}

/// `floats` rounded up to whole cache lines, and to an odd number of them: a tile's `α²` values
/// are `α²` rows apart, and with rows a multiple of 4 KiB apart they all fall in one L1 set
/// (measured: 112 tiles × 64 channels = 28 KiB rows made the input transform 3.5× slower).
fn spread(floats: usize) -> usize {
    let lines = floats.div_ceil(16);
    (lines | 1) * 16
}

/// The tiles, bands and scratch of one Winograd convolution on one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Output tile side `m`, input tile side `α = m + 2`.
    pub m: usize,
    pub alpha: usize,
    /// Tile rows and tiles per row (of one image).
    pub tiles_h: usize,
    pub tiles_w: usize,
    /// Tile rows per band (the last band of an image may have fewer real ones).
    pub band_rows: usize,
    /// Input channels and output channels, and the panel width and panel count of `U`.
    pub c: usize,
    pub o: usize,
    pub nr: usize,
    pub panels: usize,
}

impl Geometry {
    /// Tiles per band (every band is computed whole; tiles below the image read zeros and
    /// store nothing).
    pub fn band_tiles(&self) -> usize {
        self.band_rows * self.tiles_w
    }

    /// Bands per image.
    pub fn bands(&self) -> usize {
        self.tiles_h.div_ceil(self.band_rows)
    }

    /// Output channels of a row of `M` (whole panels).
    pub fn o_padded(&self) -> usize {
        self.panels * self.nr
    }

    /// Floats between `V[ξ]` and `V[ξ+1]` (`V[ξ]` holds `[band tiles][C]`): see `spread`.
    pub fn v_stride(&self) -> usize {
        spread(self.band_tiles() * self.c)
    }

    /// Floats between `M[ξ]` and `M[ξ+1]` (`M[ξ]` holds `[band tiles][O padded]`).
    pub fn m_stride(&self) -> usize {
        spread(self.band_tiles() * self.o_padded())
    }

    /// Floats of `V` at the start of the scratch; `M` follows.
    pub fn v_floats(&self) -> usize {
        self.alpha * self.alpha * self.v_stride()
    }

    /// Scratch bytes: `V` then `M`.
    pub fn scratch_bytes(&self) -> usize {
        (self.v_floats() + self.alpha * self.alpha * self.m_stride()) * 4
    }
}

/// The Winograd geometry for `conv(x, w) -> out` on `target`, if it takes that path: a 2-D f32
/// convolution with a 3×3 kernel, unit strides and dilations, one group, channels minor in its
/// input and output, at least `MIN_CHANNELS` channels each way and `MIN_TILES` tiles.
/// `F(4,3)` is preferred; `F(2,3)` when only its smaller tiles are numerous enough.
pub fn choose(
    window: &Window,
    groups: usize,
    x: &Shape,
    w: &Shape,
    out: &Shape,
    target: &Target,
) -> Option<Geometry> {
    if window.rank() != 2
        || [x, w, out].iter().any(|s| s.dtype != DType::F32)
        || groups != 1
        || w.dims[2..] != [3, 3]
        || window.stride.iter().any(|&s| s != 1)
        || window.dilation.iter().any(|&d| d != 1)
        || x.dims[1] != w.dims[1]
        || physical_strides(x)[1] != 1
        || physical_strides(out)[1] != 1
    {
        return None;
    }
    let (c, o) = (w.dims[1], w.dims[0]);
    if c < MIN_CHANNELS || o < MIN_CHANNELS || c > MAX_CHANNELS {
        return None;
    }
    let (oh, ow) = (out.dims[2], out.dims[3]);
    let m = [4, 2]
        .into_iter()
        .find(|&m| oh.div_ceil(m) * ow.div_ceil(m) >= MIN_TILES)?;
    let t = Tiles::for_target(target);
    let nr = panel_width(o, &t);
    let mut g = Geometry {
        m,
        alpha: m + 2,
        tiles_h: oh.div_ceil(m),
        tiles_w: ow.div_ceil(m),
        band_rows: 1,
        c,
        o,
        nr,
        panels: o.div_ceil(nr),
    };
    let per_row = g.scratch_bytes() as u64;
    let budget = BAND_L2_SHARE * target.l2_bytes.max(256 << 10);
    g.band_rows = ((budget / per_row) as usize).clamp(1, g.tiles_h);
    // A kernel larger than a band's data is re-read per band: take all rows at once if they fit.
    let u_bytes = g.alpha * g.alpha * c * g.o_padded() * 4;
    if u_bytes > g.scratch_bytes() && g.tiles_h as u64 * per_row <= MAX_SCRATCH as u64 {
        g.band_rows = g.tiles_h;
    }
    Some(g)
}

/// Bytes of the transformed kernel of a convolution with this geometry.
pub fn packed_len(g: &Geometry) -> usize {
    g.alpha * g.alpha * g.panels * g.c * g.nr * 4
}

/// `U = G g Gᵀ` of kernel `bytes` (`[O, C, 3, 3]` row-major f32) into a zeroed `out` of
/// [`packed_len`] bytes: float `((ξ·P + p)·C + c)·NR + j` holds `U[ξ][c][p·NR + j]`, zero past
/// the last output channel.
pub fn pack_into(bytes: &[u8], g: &Geometry, out: &mut [u8]) {
    let tr = Transforms::new(g.m);
    let a = g.alpha;
    let f = |i: usize| f32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap()) as f64;
    let mut u = vec![0f64; a * a];
    for oc in 0..g.o {
        let (p, j) = (oc / g.nr, oc % g.nr);
        for ci in 0..g.c {
            let base = (oc * g.c + ci) * 9;
            // G g: α×3, then (G g) Gᵀ: α×α.
            let mut gg = vec![[0f64; 3]; a];
            for (r, row) in gg.iter_mut().enumerate() {
                for (col, v) in row.iter_mut().enumerate() {
                    *v = (0..3).map(|k| tr.g[r][k] * f(base + k * 3 + col)).sum();
                }
            }
            for r in 0..a {
                for s in 0..a {
                    u[r * a + s] = (0..3).map(|k| gg[r][k] * tr.g[s][k]).sum();
                }
            }
            for (xi, &v) in u.iter().enumerate() {
                let at = (((xi * g.panels + p) * g.c + ci) * g.nr + j) * 4;
                out[at..at + 4].copy_from_slice(&(v as f32).to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One channel's `m×m` tile of a 3×3 correlation through the transforms, in f32 as the
    /// kernel computes it, against the direct sum in f64.
    fn tile(m: usize, d: &[f32], k: &[f32]) -> Vec<f32> {
        let tr = Transforms::new(m);
        let a = tr.alpha;
        let mat = |x: &[Vec<f64>], r: usize, c: usize| x[r][c] as f32;
        // V = Bᵀ d B
        let mut t = vec![0f32; a * a];
        for i in 0..a {
            for j in 0..a {
                t[i * a + j] = (0..a).map(|r| mat(&tr.bt, i, r) * d[r * a + j]).sum();
            }
        }
        let mut v = vec![0f32; a * a];
        for i in 0..a {
            for j in 0..a {
                v[i * a + j] = (0..a).map(|s| t[i * a + s] * mat(&tr.bt, j, s)).sum();
            }
        }
        // U = G k Gᵀ in f64, rounded once (as `pack_into`).
        let mut u = vec![0f32; a * a];
        for i in 0..a {
            for j in 0..a {
                let mut s = 0f64;
                for p in 0..3 {
                    for q in 0..3 {
                        s += tr.g[i][p] * k[p * 3 + q] as f64 * tr.g[j][q];
                    }
                }
                u[i * a + j] = s as f32;
            }
        }
        let prod: Vec<f32> = v.iter().zip(&u).map(|(a, b)| a * b).collect();
        let mut y1 = vec![0f32; m * a];
        for i in 0..m {
            for j in 0..a {
                y1[i * a + j] = (0..a).map(|r| mat(&tr.at, i, r) * prod[r * a + j]).sum();
            }
        }
        let mut y = vec![0f32; m * m];
        for i in 0..m {
            for j in 0..m {
                y[i * m + j] = (0..a).map(|s| y1[i * a + s] * mat(&tr.at, j, s)).sum();
            }
        }
        y
    }

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// Worst error over `channels` summed channels, relative to the largest output.
    fn worst(m: usize, channels: usize) -> f64 {
        let a = m + 2;
        let mut seed = 7;
        let mut got = vec![0f64; m * m];
        let mut want = vec![0f64; m * m];
        for _ in 0..channels {
            let d: Vec<f32> = (0..a * a).map(|_| lcg(&mut seed)).collect();
            let k: Vec<f32> = (0..9).map(|_| lcg(&mut seed)).collect();
            for (g, y) in got.iter_mut().zip(tile(m, &d, &k)) {
                *g += y as f64;
            }
            for i in 0..m {
                for j in 0..m {
                    for p in 0..3 {
                        for q in 0..3 {
                            want[i * m + j] += d[(i + p) * a + j + q] as f64 * k[p * 3 + q] as f64;
                        }
                    }
                }
            }
        }
        let top = want.iter().fold(0f64, |a, b| a.max(b.abs()));
        got.iter()
            .zip(&want)
            .map(|(g, w)| (g - w).abs() / top)
            .fold(0.0, f64::max)
    }

    #[test]
    fn f23_matches_the_direct_sum() {
        let e = worst(2, 512);
        assert!(e < 1e-6, "F(2,3) error {e:e}");
    }

    #[test]
    fn f43_matches_the_direct_sum() {
        let e = worst(4, 512);
        assert!(e < 1e-5, "F(4,3) error {e:e}");
    }

    fn conv_shapes(h: usize, c: usize, o: usize) -> (Window, Shape, Shape, Shape) {
        let nhwc = |dims: Vec<usize>| {
            let mut s = Shape::new(DType::F32, dims);
            s.layout = crate::ir::Layout {
                minor_to_major: vec![1, 3, 2, 0],
            };
            s
        };
        let win = Window {
            size: vec![3, 3],
            stride: vec![1, 1],
            pad_low: vec![1, 1],
            pad_high: vec![1, 1],
            dilation: vec![1, 1],
        };
        (
            win,
            nhwc(vec![1, c, h, h]),
            Shape::new(DType::F32, vec![o, c, 3, 3]),
            nhwc(vec![1, o, h, h]),
        )
    }

    #[test]
    fn tile_size_follows_the_map() {
        let t = Target::resolve("x86_64-avx512").unwrap();
        let pick = |h: usize, c: usize| {
            let (win, x, w, out) = conv_shapes(h, c, c);
            choose(&win, 1, &x, &w, &out, &t).map(|g| g.m)
        };
        assert_eq!(pick(56, 64), Some(4));
        assert_eq!(pick(28, 128), Some(4));
        assert_eq!(pick(14, 256), Some(4));
        assert_eq!(pick(7, 512), Some(2));
        assert_eq!(pick(5, 512), None);
        assert_eq!(pick(56, 8), None);
    }

    #[test]
    fn a_weight_heavy_layer_runs_as_one_band() {
        let t = Target::resolve("x86_64-avx512").unwrap();
        let (win, x, w, out) = conv_shapes(14, 512, 512);
        let g = choose(&win, 1, &x, &w, &out, &t).unwrap();
        assert_eq!(g.band_rows, g.tiles_h);
        assert!(g.scratch_bytes() <= MAX_SCRATCH);
    }
}
