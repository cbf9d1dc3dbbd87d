//! The Winograd convolution kernel: `F(m×m, 3×3)` for the stride-1 3×3 convolutions
//! `core/winograd.rs` chose, in three phases per band of tile rows.
//!
//! Contract: input and output channels minor (NHWC), kernel transformed at compile time
//! (`winograd::pack_into`), scratch from the arena's kernel scratch (the kernel's last
//! argument). For each image and band of `band_rows` tile rows:
//! 1. **input transform**: every tile's `α×α` input window (zeros outside the image), per vector
//!    of channels, becomes `V[ξ][tile][c] = (Bᵀ d B)[ξ]`;
//! 2. **products**: `M[ξ] = V[ξ] · U[ξ]` for each of the `α²` positions and output panel, with the
//!    GEMM register tile (tiles × panel vectors, a running sum over input channels);
//! 3. **output transform**: `Y = Aᵀ M A` per tile and vector of output channels, the register
//!    epilogue of an output fusion applied, stored where the tile lies in the image.
//!
//! Each phase is split over the app's threads (`parallel.rs`); the phases of a band run in order.
//! Results do not depend on the thread count: every value is computed by the same code.

use super::Cg;
use super::epilogue::{RegEpilogue, TilePos};
use super::gemm;
use super::vector::{VecCol, vectors};
use crate::codegen::core::Kernel;
use crate::codegen::core::layout::physical_strides;
use crate::codegen::core::packing::Tiles;
use crate::codegen::core::winograd::{Geometry, MAX_CHANNELS, Transforms};
use crate::ir::{DType, Shape, Window};
use inkwell::values::{IntValue, PointerValue, VectorValue};

/// Most tiles in one register tile of the products: as `conv.rs`' pixel rows.
const MAX_TILE_ROWS: usize = 24;

/// Adds per input or output value of a transform (the row then the column pass of `Bᵀ d B` or
/// `Aᵀ M A`: about 5 terms each), for the threading cost estimate.
const TRANSFORM_FLOPS: u64 = 10;

/// What every phase's task needs to find its data.
struct Band<'ctx> {
    /// Image index and first tile row of the band.
    n: IntValue<'ctx>,
    row0: IntValue<'ctx>,
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// `Σ coeffs[i]·xs[i]` with zero terms skipped and ±1 as adds (a fixed order, so the result is
    /// the same everywhere).
    fn lin(&self, coeffs: &[f64], xs: &[VectorValue<'ctx>]) -> VectorValue<'ctx> {
        let lanes = xs[0].get_type().get_size();
        let mut acc: Option<VectorValue<'ctx>> = None;
        for (&c, &x) in coeffs.iter().zip(xs) {
            if c == 0.0 {
                continue;
            }
            acc = Some(match (acc, c) {
                (None, 1.0) => x,
                (None, _) => self
                    .b
                    .build_float_mul(x, self.splat(self.f32c(c), lanes), "")
                    .unwrap(),
                (Some(a), 1.0) => self.b.build_float_add(a, x, "").unwrap(),
                (Some(a), -1.0) => self.b.build_float_sub(a, x, "").unwrap(),
                (Some(a), _) => self
                    .call(
                        self.vec_fmuladd(lanes),
                        &[x.into(), self.splat(self.f32c(c), lanes).into(), a.into()],
                    )
                    .into_vector_value(),
            });
        }
        acc.unwrap_or_else(|| self.vec_ty(lanes).const_zero())
    }

    /// `a ± b·c` as one multiply-add (`c` a constant).
    fn fma_c(&self, b: VectorValue<'ctx>, c: f64, a: VectorValue<'ctx>) -> VectorValue<'ctx> {
        let lanes = a.get_type().get_size();
        self.call(
            self.vec_fmuladd(lanes),
            &[b.into(), self.splat(self.f32c(c), lanes).into(), a.into()],
        )
        .into_vector_value()
    }

    /// One 1-D transform `T x` of `α` vectors: `Bᵀ` (input) or `Aᵀ` (output). `F(4,3)`'s share
    /// their sums and differences (14 operations for `Bᵀ` where the matrix has 22 terms, 10 for
    /// `Aᵀ` where it has 18); other sizes go term by term ([`Cg::lin`]).
    fn transform_1d(&self, t: &[Vec<f64>], x: &[VectorValue<'ctx>]) -> Vec<VectorValue<'ctx>> {
        let add = |a, b| self.b.build_float_add(a, b, "").unwrap();
        let sub = |a, b| self.b.build_float_sub(a, b, "").unwrap();
        match (t.len(), x.len()) {
            // Bᵀ of F(4,3).
            (6, 6) => {
                let (t1, t2) = (add(x[1], x[2]), add(x[3], x[4]));
                let (t3, t4) = (sub(x[1], x[2]), sub(x[4], x[3]));
                let (t5, t6) = (sub(x[4], x[2]), sub(x[3], x[1]));
                vec![
                    self.fma_c(x[0], 4.0, self.fma_c(x[2], -5.0, x[4])),
                    self.fma_c(t1, -4.0, t2),
                    self.fma_c(t3, 4.0, t4),
                    self.fma_c(t6, 2.0, t5),
                    self.fma_c(t6, -2.0, t5),
                    self.fma_c(x[1], 4.0, self.fma_c(x[3], -5.0, x[5])),
                ]
            }
            // Aᵀ of F(4,3).
            (4, 6) => {
                let (a, b) = (add(x[1], x[2]), sub(x[1], x[2]));
                let (c, d) = (add(x[3], x[4]), sub(x[3], x[4]));
                vec![
                    add(add(x[0], a), c),
                    self.fma_c(d, 2.0, b),
                    self.fma_c(c, 4.0, a),
                    add(self.fma_c(d, 8.0, b), x[5]),
                ]
            }
            _ => t.iter().map(|row| self.lin(row, x)).collect(),
        }
    }

    /// `T X Tᵀ` for an `a×a` block `x` (row-major) and a transform `T` (`r×a`): `r×r` vectors.
    fn sandwich(
        &self,
        t: &[Vec<f64>],
        x: &[VectorValue<'ctx>],
        a: usize,
    ) -> Vec<VectorValue<'ctx>> {
        let r = t.len();
        // T X, column by column: tx[i][col].
        let cols: Vec<Vec<VectorValue<'ctx>>> = (0..a)
            .map(|col| {
                let column: Vec<VectorValue<'ctx>> = (0..a).map(|k| x[k * a + col]).collect();
                self.transform_1d(t, &column)
            })
            .collect();
        (0..r)
            .flat_map(|i| {
                let row: Vec<VectorValue<'ctx>> = (0..a).map(|col| cols[col][i]).collect();
                self.transform_1d(t, &row)
            })
            .collect()
    }

    /// The Winograd convolution of kernel `k`: input `k.args[xi]` (shape `xs`), transformed kernel
    /// `k.args[wi]`, output `k.out` (shape `os`), scratch the last argument; `epi` applied to each
    /// output vector before it is stored.
    pub(super) fn conv_winograd(
        &self,
        k: &Kernel<'ctx>,
        g: &Geometry,
        win: &Window,
        (xs, os): (&Shape, &Shape),
        (xi, wi): (usize, usize),
        epi: &Option<RegEpilogue>,
    ) {
        let bands = g.bands();
        let n_count = xs.dims[0];
        let na = k.args.len();
        let i8p = self.i8p();
        self.for_loop(n_count * bands, &mut |cg, nb| {
            let n =
                cg.b.build_int_unsigned_div(nb, cg.i64(bands as u64), "")
                    .unwrap();
            let band =
                cg.b.build_int_unsigned_rem(nb, cg.i64(bands as u64), "")
                    .unwrap();
            let row0 = cg.mul(band, g.band_rows as u64);
            // The band travels to the tasks as one more "buffer": n·tiles_h + row0.
            let tag = cg.add(cg.mul(n, g.tiles_h as u64), row0);
            let tag = cg.b.build_int_to_ptr(tag, i8p, "").unwrap();
            let mut bufs: Vec<PointerValue<'ctx>> = vec![k.out];
            bufs.extend(k.args.iter().copied());
            bufs.push(tag);
            let mut noalias = k.noalias.clone();
            noalias.push(false);
            let phase =
                |units: usize,
                 flops: u64,
                 body: &dyn Fn(&Self, &Kernel<'ctx>, &Band<'ctx>, IntValue<'ctx>)| {
                    cg.run_tasks(k, &bufs, &noalias, units, flops, &|cg, f, p, ti, nt| {
                        let tk = Kernel {
                            f,
                            out: p[0],
                            args: p[1..=na].to_vec(),
                            noalias: k.noalias.clone(),
                        };
                        let tag =
                            cg.b.build_ptr_to_int(p[na + 1], cg.ctx.i64_type(), "")
                                .unwrap();
                        let band = Band {
                            n: cg
                                .b
                                .build_int_unsigned_div(tag, cg.i64(g.tiles_h as u64), "")
                                .unwrap(),
                            row0: cg
                                .b
                                .build_int_unsigned_rem(tag, cg.i64(g.tiles_h as u64), "")
                                .unwrap(),
                        };
                        let (lo, hi) = cg.share(ti, nt, units);
                        cg.for_range(lo, hi, &mut |cg, u| body(cg, &tk, &band, u));
                    });
                };
            let tiles = g.band_tiles();
            let a2 = (g.alpha * g.alpha) as u64;
            phase(
                tiles,
                tiles as u64 * g.c as u64 * a2 * TRANSFORM_FLOPS,
                &|cg, tk, band, t| cg.wino_input(tk, g, win, xs, xi, band, t),
            );
            phase(
                g.alpha * g.alpha * g.panels,
                2 * a2 * (tiles * g.c * g.o_padded()) as u64,
                &|cg, tk, _, u| cg.wino_products(tk, g, wi, u),
            );
            phase(
                tiles,
                tiles as u64 * g.o as u64 * a2 * TRANSFORM_FLOPS,
                &|cg, tk, band, t| cg.wino_output(tk, g, os, band, t, epi),
            );
        });
    }

    /// `body(col, v)` for every vector of `n` channels starting at channel `col`: one loop over
    /// the whole vectors (one copy of the code, whatever the channel count), then the remainder
    /// as one narrower vector (`exact`) or as a whole vector of which only the remainder is
    /// stored.
    fn channel_vectors(
        &self,
        n: usize,
        lanes: u32,
        exact: bool,
        body: &dyn Fn(&Self, IntValue<'ctx>, &VecCol),
    ) {
        let l = lanes as usize;
        let whole = VecCol {
            col: 0,
            lanes,
            store: lanes,
        };
        if n / l > 0 {
            self.for_loop(n / l, &mut |cg, i| body(cg, cg.mul(i, l as u64), &whole));
        }
        let r = (n % l) as u32;
        if r > 0 {
            let v = VecCol {
                col: 0,
                lanes: if exact { r } else { lanes },
                store: r,
            };
            body(self, self.i64((n / l * l) as u64), &v);
        }
    }

    /// Tile row and column (in the image) of tile `t` of the band.
    fn tile_at(
        &self,
        g: &Geometry,
        band: &Band<'ctx>,
        t: IntValue<'ctx>,
    ) -> (IntValue<'ctx>, IntValue<'ctx>) {
        let w = self.i64(g.tiles_w as u64);
        let row = self.b.build_int_unsigned_div(t, w, "").unwrap();
        let col = self.b.build_int_unsigned_rem(t, w, "").unwrap();
        (self.add(band.row0, row), col)
    }

    /// Scratch pointers `V` and `M` of a task's kernel view.
    fn wino_scratch(
        &self,
        tk: &Kernel<'ctx>,
        g: &Geometry,
    ) -> (PointerValue<'ctx>, PointerValue<'ctx>) {
        let v = *tk.args.last().expect("the scratch argument");
        (v, self.gep(v, self.i64(g.v_floats() as u64)))
    }

    /// Phase 1 for tile `t` of the band: `V[ξ][t][c]` for every input channel.
    #[allow(clippy::too_many_arguments)]
    fn wino_input(
        &self,
        tk: &Kernel<'ctx>,
        g: &Geometry,
        win: &Window,
        xs: &Shape,
        xi: usize,
        band: &Band<'ctx>,
        t: IntValue<'ctx>,
    ) {
        let xst = physical_strides(xs);
        let (h, wd) = (xs.dims[2], xs.dims[3]);
        let a = g.alpha;
        let tr = Transforms::new(g.m);
        let lanes = Tiles::for_target(self.target).lanes;
        let x = tk.args[xi];
        let (vs, _) = self.wino_scratch(tk, g);
        let (th, tw) = self.tile_at(g, band, t);
        // Input position of the window's first row and column (may be negative).
        let ih0 = self
            .b
            .build_int_sub(
                self.mul(th, g.m as u64),
                self.i64(win.pad_low[0] as u64),
                "",
            )
            .unwrap();
        let iw0 = self
            .b
            .build_int_sub(
                self.mul(tw, g.m as u64),
                self.i64(win.pad_low[1] as u64),
                "",
            )
            .unwrap();
        let img = self.mul(band.n, xst[0]);
        // Each window position's pixel, or the zero line where it lies in the padding (one
        // pointer select per position, not a vector select per channel vector).
        debug_assert!(g.c <= super::conv::ZERO_LINE && MAX_CHANNELS == super::conv::ZERO_LINE);
        let zeros = self.zero_line();
        let mut at: Vec<PointerValue<'ctx>> = Vec::with_capacity(a * a);
        for r in 0..a {
            let ih = self.add(ih0, self.i64(r as u64));
            let row_ok = self.in_range(ih, h);
            let row = self.add(img, self.mul(self.clamp_index(ih, h), xst[2]));
            for s in 0..a {
                let iw = self.add(iw0, self.i64(s as u64));
                let ok = self.b.build_and(row_ok, self.in_range(iw, wd), "").unwrap();
                let px = self.gep(x, self.add(row, self.mul(self.clamp_index(iw, wd), xst[3])));
                let p = self.b.build_select(ok, px, zeros, "").unwrap();
                at.push(p.into_pointer_value());
            }
        }
        self.channel_vectors(g.c, lanes, true, &|cg, col, v| {
            // Bᵀ d column by column (each column's loads next to its use), then each row of
            // (Bᵀ d) times B, stored as soon as it is done.
            let cols: Vec<Vec<VectorValue<'ctx>>> = (0..a)
                .map(|s| {
                    let d: Vec<VectorValue<'ctx>> = (0..a)
                        .map(|r| cg.vload(at[r * a + s], col, v.lanes))
                        .collect();
                    cg.transform_1d(&tr.bt, &d)
                })
                .collect();
            for i in 0..a {
                let row: Vec<VectorValue<'ctx>> = cols.iter().map(|column| column[i]).collect();
                for (j, val) in cg.transform_1d(&tr.bt, &row).into_iter().enumerate() {
                    let xi = ((i * a + j) * g.v_stride()) as u64;
                    let off = cg.add(cg.i64(xi), cg.add(cg.mul(t, g.c as u64), col));
                    cg.vstore(vs, off, val);
                }
            }
        });
    }

    /// Phase 2 for unit `u` = (position ξ, output panel p): `M[ξ][·][panel] = V[ξ] · U[ξ][panel]`.
    fn wino_products(&self, tk: &Kernel<'ctx>, g: &Geometry, wi: usize, u: IntValue<'ctx>) {
        let t = Tiles::for_target(self.target);
        let lanes = t.lanes;
        let nv = g.nr / lanes as usize;
        let regs = self.target.vector_registers as usize;
        let rows_max =
            ((regs - nv - super::conv::spare_registers(regs)) / nv).clamp(1, MAX_TILE_ROWS);
        let tiles = g.band_tiles();
        let mr = gemm::rows_for_issue(tiles, rows_max, nv);
        let (vs, ms) = self.wino_scratch(tk, g);
        let w = tk.args[wi];
        let xi = self
            .b
            .build_int_unsigned_div(u, self.i64(g.panels as u64), "")
            .unwrap();
        let p = self
            .b
            .build_int_unsigned_rem(u, self.i64(g.panels as u64), "")
            .unwrap();
        let panel = self.mul(
            self.add(self.mul(xi, g.panels as u64), p),
            (g.c * g.nr) as u64,
        );
        // V[ξ] and M[ξ] of this unit.
        let v_xi = self.gep(vs, self.mul(xi, g.v_stride() as u64));
        let m_xi = self.gep(ms, self.mul(xi, g.m_stride() as u64));
        let cols: Vec<VecCol> = vectors(g.nr, lanes, true);
        let block = |cg: &Self, t0: IntValue<'ctx>, rows: usize| {
            let acc = cg.acc_slots(tk.f, rows, &cols);
            let row0 = t0;
            cg.for_loop(g.c, &mut |cg, c| {
                let krow = cg.add(panel, cg.mul(c, g.nr as u64));
                let bv: Vec<VectorValue<'ctx>> = cols
                    .iter()
                    .map(|v| cg.vload(w, cg.add(krow, cg.i64(v.col as u64)), v.lanes))
                    .collect();
                for (i, row) in acc.iter().enumerate() {
                    let at = cg.add(cg.mul(cg.add(row0, cg.i64(i as u64)), g.c as u64), c);
                    let a = cg.load(v_xi, at, DType::F32).into_float_value();
                    for (slot, (v, b)) in row.iter().zip(cols.iter().zip(&bv)) {
                        cg.fma_into(*slot, cg.splat(a, v.lanes), *b);
                    }
                }
            });
            for (i, row) in acc.iter().enumerate() {
                let mrow = cg.add(row0, cg.i64(i as u64));
                let base = cg.add(cg.mul(mrow, g.o_padded() as u64), cg.mul(p, g.nr as u64));
                for (slot, v) in row.iter().zip(&cols) {
                    let val = cg.b.build_load(*slot, "").unwrap().into_vector_value();
                    cg.vstore(m_xi, cg.add(base, cg.i64(v.col as u64)), val);
                }
            }
        };
        let (full, part) = (tiles / mr, tiles % mr);
        if full > 0 {
            self.for_loop(full, &mut |cg, b| block(cg, cg.mul(b, mr as u64), mr));
        }
        if part > 0 {
            block(self, self.i64((full * mr) as u64), part);
        }
    }

    /// Phase 3 for tile `t` of the band: `Y = Aᵀ M A` per vector of output channels, stored
    /// where the tile lies in the image (pixels past its edge are not stored).
    fn wino_output(
        &self,
        tk: &Kernel<'ctx>,
        g: &Geometry,
        os: &Shape,
        band: &Band<'ctx>,
        t: IntValue<'ctx>,
        epi: &Option<RegEpilogue>,
    ) {
        let ost = self.out_strides(os);
        let (oh, ow) = (os.dims[2], os.dims[3]);
        let (a, m) = (g.alpha, g.m);
        let tr = Transforms::new(m);
        let lanes = Tiles::for_target(self.target).lanes;
        let (_, ms) = self.wino_scratch(tk, g);
        let (th, tw) = self.tile_at(g, band, t);
        let (oh0, ow0) = (self.mul(th, m as u64), self.mul(tw, m as u64));
        let img = self.mul(band.n, ost[0]);
        let lt = |x: IntValue<'ctx>, hi: usize| {
            self.b
                .build_int_compare(inkwell::IntPredicate::ULE, x, self.i64(hi as u64), "")
                .unwrap()
        };
        // The whole tile inside the image: no per-pixel tests.
        let whole = self
            .b
            .build_and(
                lt(self.add(oh0, self.i64(m as u64)), oh),
                lt(self.add(ow0, self.i64(m as u64)), ow),
                "",
            )
            .unwrap();
        self.channel_vectors(g.o, lanes, false, &|cg, col, v| {
            let mv: Vec<VectorValue<'ctx>> = (0..a * a)
                .map(|k| {
                    let row = cg.add(cg.mul(t, g.o_padded() as u64), col);
                    let off = cg.add(cg.i64((k * g.m_stride()) as u64), row);
                    cg.vload(ms, off, v.lanes)
                })
                .collect();
            let y = cg.sandwich(&tr.at, &mv, a);
            let store = |cg: &Self, checked: bool| {
                for i in 0..m {
                    for j in 0..m {
                        let ohi = cg.add(oh0, cg.i64(i as u64));
                        let owj = cg.add(ow0, cg.i64(j as u64));
                        let put = |cg: &Self| {
                            let mut val = y[i * m + j];
                            let ch = col;
                            if let Some(e) = epi {
                                let role = |d: usize| match d {
                                    0 => TilePos::At(band.n),
                                    1 => TilePos::Col,
                                    2 => TilePos::At(ohi),
                                    _ => TilePos::Row,
                                };
                                val = cg.apply_epilogue(e, tk, val, owj, ch, v, &role);
                            }
                            let off = cg.add(
                                cg.add(img, cg.mul(ohi, ost[2])),
                                cg.add(cg.mul(owj, ost[3]), ch),
                            );
                            cg.store_lanes_strided(tk.out, off, val, v.store, ost[1]);
                        };
                        if checked {
                            let inside =
                                cg.b.build_and(
                                    lt(cg.add(ohi, cg.i64(1)), oh),
                                    lt(cg.add(owj, cg.i64(1)), ow),
                                    "",
                                )
                                .unwrap();
                            cg.if_then(inside, &mut |cg| put(cg));
                        } else {
                            put(cg);
                        }
                    }
                }
            };
            cg.if_else(whole, &mut |cg| store(cg, false), &mut |cg| store(cg, true));
        });
    }
}
