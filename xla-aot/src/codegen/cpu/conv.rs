//! Register-blocked 2-D convolutions: the three shapes of convolution edge models spend their
//! time in, each a direct convolution with the GEMM micro-kernel's register tile
//! (`gemm.rs`: `mr` rows × `nv` vectors of accumulators, `llvm.fmuladd` in a fixed order).
//!
//! Contract (which convolution takes which path is decided by [`choose`]; anything else keeps
//! the general loop nest of `loops.rs`):
//! - [`ConvPath::PixelsByChannels`]: output channels minor (NHWC, what layout assignment gives
//!   internal convolutions), a constant kernel, any groups but depthwise ones. Rows of the tile are
//!   output pixels along a row, columns are output channels of one group; the kernel is packed at
//!   compile time into panels `[G][⌈(O/G)/NR⌉][KH·KW·C/G][NR]` (`core/packing.rs`), so each tap
//!   streams one contiguous panel and reads its group's input channels. An output whose channels
//!   are not minor (a model output fed by channels-minor data) is stored lane by lane. Padding: a pixel
//!   whose input position is outside the image contributes zero (a select, only when the
//!   convolution pads).
//! - [`ConvPath::ChannelsByPixels`] (`conv/channels_by_pixels.rs`): unit stride along W, input W contiguous (NCHW input), any
//!   groups. Rows are output channels of one group (kernel values broadcast), columns are pixels
//!   of one output row loaded as vectors from the input row, with masked loads where the window
//!   hangs over the border; stored as vectors into an NCHW output (a model's output), lane by
//!   lane into any other (a depthwise convolution of NCHW data feeding NHWC ones). A 1×1
//!   convolution over whole rows runs as one row of all pixels.
//! - [`ConvPath::Depthwise`] (`conv/depthwise.rs`): `groups == C == O`, input and output
//!   channels minor. Each tap is a vector multiply-add along channels; a tile is a few pixels ×
//!   a few channel vectors.
//!
//! - A convolution reading its input through a channel shuffle (an output fusion's shuffle
//!   prologue, `passes/fusion.rs`) runs `PixelsByChannels` when its kernel is packed, reading
//!   group `g`'s channel `ci` at the shuffle's source channel (`ir/shuffle.rs`), else the loops.
//!
//! Every output element is one running sum over taps and input channels in a fixed order (taps
//! outer, channels inner for the first path; channels outer, taps inner for the second), so
//! results do not depend on tile sizes or threads, and match the interpreter to rounding.

use super::Cg;
use super::epilogue::{RegEpilogue, TilePos};
use super::gemm;
use super::vector::{VecCol, vectors};
use crate::codegen::core::Kernel;
use crate::codegen::core::layout::physical_strides;
use crate::codegen::core::packing::{Tiles, conv_staged, panel_width};
use crate::ir::shuffle::ChannelMap;
use crate::ir::{DType, Shape, Window};
use inkwell::IntPredicate;
use inkwell::values::{FunctionValue, IntValue, PointerValue, VectorValue};

mod channels_by_pixels;
mod depthwise;
mod int8;

/// Most pixel rows in one [`ConvPath::PixelsByChannels`] tile: rows of one tile share a base
/// address (constant offsets), so the register file, not address registers, is the limit.
const MAX_PIXEL_ROWS: usize = 24;

/// Most shuffle groups a [`ConvPath::PixelsByChannels`] step loop unrolls when it reads its
/// input through a channel shuffle (ShuffleNet uses 2–8 groups); more groups take one division
/// per step instead.
const MAX_SHUFFLE_RUNS: usize = 8;

/// Input channels per step of a [`ConvPath::PixelsByChannels`] tile on NEON, where a
/// multiply-add takes its scalar from a vector lane (`fmla v.4s, v.4s, v.s[l]`): each pixel loads
/// this many channels as one vector instead of one scalar per channel (resnet50's convolutions on
/// aarch64: 12 `fmla` per 24-30 instructions with scalar loads).
const CHANNEL_QUAD: usize = 4;

/// Below this many row tiles a [`ConvPath::PixelsByChannels`] convolution also splits its panels
/// into [`COL_PARTS`] parts per task unit: resnet50's 7×7 maps have 7 row tiles, which two
/// threads share 4 : 3.
const MIN_ROW_UNITS: usize = 16;
const COL_PARTS: usize = 4;

/// Floats in the zero line that [`ConvPath::PixelsByChannels`] tiles read for a tap in the
/// padding (one per input channel of a group; 16 KiB of read-only zeros per module). Wider groups
/// select each value instead.
pub(super) const ZERO_LINE: usize = 4096;

/// Vector registers a [`ConvPath::PixelsByChannels`] tile leaves free besides its weight vectors:
/// LLVM's scheduler loads the next step's broadcasts early, and with a 32-register file filled to
/// the brim (28 accumulators, AVX-512 `nv` = 2) it spilled accumulators to the stack in some
/// kernels and not others: measured on Zen 5, 1×1 and 3×3 convolutions ran at 32-63% of the FMA
/// peak with one register free and at 88-100% with ten (20 accumulators). On AVX2's 16 registers
/// the old single spare register is kept (fewer rows measured slower there).
pub(super) const fn spare_registers(regs: usize) -> usize {
    if regs >= 32 { 10 } else { 1 }
}

/// How a convolution is generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvPath {
    PixelsByChannels,
    ChannelsByPixels,
    Depthwise,
}

/// The path for `conv(x, w) -> out`; `packed`: the kernel is stored packed (`Packings::reads_packed`).
pub fn choose(
    window: &Window,
    groups: usize,
    x: &Shape,
    w: &Shape,
    out: &Shape,
    packed: bool,
) -> Option<ConvPath> {
    if window.rank() != 2 || [x, w, out].iter().any(|s| s.dtype != DType::F32) {
        return None;
    }
    let (xs, os) = (physical_strides(x), physical_strides(out));
    let c = x.dims[1];
    // A packed kernel was packed for this path (`packing::conv_packable` decided it).
    if packed {
        return Some(ConvPath::PixelsByChannels);
    }
    if groups == c && w.dims[0] == c && w.dims[1] == 1 && os[1] == 1 && xs[1] == 1 {
        return Some(ConvPath::Depthwise);
    }
    let grouped = c == groups * w.dims[1] && w.dims[0] % groups == 0;
    if grouped && window.stride[1] == 1 && (xs[3] == 1 || conv_staged(window, groups, x, w, out)) {
        return Some(ConvPath::ChannelsByPixels);
    }
    None
}

/// The output positions `[lo, hi)` along one spatial dim whose every tap is inside the input
/// (no padding involved): tiles there need no bounds checks.
fn interior(
    out: usize,
    extent: usize,
    k: usize,
    stride: usize,
    dil: usize,
    pad: usize,
) -> (usize, usize) {
    let lo = pad.div_ceil(stride);
    // o·stride + (k - 1)·dil - pad <= extent - 1
    let reach = (k - 1) * dil;
    let hi = if extent + pad > reach {
        ((extent - 1 + pad - reach) / stride + 1).min(out)
    } else {
        0
    };
    (lo.min(hi), hi)
}

/// The sizes, strides and interior ranges of a 2-D convolution `conv(x, w) -> out`.
#[derive(Clone)]
struct ConvShape {
    n: usize,
    /// Input channels (all groups).
    c: usize,
    groups: usize,
    h: usize,
    wd: usize,
    o: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    /// Element strides of the input, kernel and output (logical dim order).
    xst: Vec<u64>,
    wst: Vec<u64>,
    ost: Vec<u64>,
    /// Output rows and columns whose windows need no bounds check.
    ih_in: (usize, usize),
    iw_in: (usize, usize),
    /// The logical dim a tile's pixels run along: 3 (W), or 2 (H) for an image one pixel wide
    /// ([`ConvShape::columns_as_rows`]); the other spatial dim is the tile's row.
    pixels_dim: usize,
}

impl ConvShape {
    fn new(win: &Window, groups: usize, x: &Shape, w: &Shape, out: &Shape) -> ConvShape {
        let (oh, ow) = (out.dims[2], out.dims[3]);
        let (h, wd) = (x.dims[2], x.dims[3]);
        let (kh, kw) = (w.dims[2], w.dims[3]);
        ConvShape {
            n: x.dims[0],
            c: x.dims[1],
            groups,
            h,
            wd,
            o: w.dims[0],
            kh,
            kw,
            oh,
            ow,
            xst: physical_strides(x),
            wst: physical_strides(w),
            ost: physical_strides(out),
            ih_in: interior(oh, h, kh, win.stride[0], win.dilation[0], win.pad_low[0]),
            iw_in: interior(ow, wd, kw, win.stride[1], win.dilation[1], win.pad_low[1]),
            pixels_dim: 3,
        }
    }
}

impl ConvShape {
    /// A convolution over an image one pixel wide whose window is one tap wide (str_ww's `H × 1`
    /// feature maps) with its two spatial dims exchanged, and its window so: the pixels then run
    /// along the row, and a tile spans several of them instead of one (a depthwise tile
    /// `DW_PIXELS`, a pixels × channels tile its rows). The strides move with the dims, so every
    /// address is the same element's; a packed kernel's taps keep their order (one of the two
    /// window dims is 1); register epilogues address the result through `pixels_dim`.
    fn columns_as_rows(&self, win: &Window) -> Option<(ConvShape, Window)> {
        if self.wd != 1 || self.ow != 1 || self.kw != 1 || self.oh == 1 || win.rank() != 2 {
            return None;
        }
        let mut cs = self.clone();
        (cs.h, cs.wd, cs.kh, cs.kw, cs.oh, cs.ow) = (1, self.h, 1, self.kh, 1, self.oh);
        for st in [&mut cs.xst, &mut cs.wst, &mut cs.ost] {
            st.swap(2, 3);
        }
        (cs.ih_in, cs.iw_in) = (self.iw_in, self.ih_in);
        cs.pixels_dim = 2;
        let mut w = win.clone();
        for v in [
            &mut w.size,
            &mut w.stride,
            &mut w.pad_low,
            &mut w.pad_high,
            &mut w.dilation,
        ] {
            v.swap(0, 1);
        }
        Some((cs, w))
    }

    /// A 1×1 convolution with unit strides and no padding over whole rows (input and output
    /// rows contiguous) is a product over pixels: it becomes one row of `H·W` pixels, so
    /// [`ConvPath::ChannelsByPixels`] fills its vectors across row ends (7×7: 49 pixels in 4
    /// vectors of 16 instead of 7 of which 9 lanes are idle each) and the int8 pixel tiles
    /// (`conv/int8.rs`) span rows (an `H × 1` image gave tiles of one pixel).
    fn flatten_pointwise(&mut self, win: &Window) {
        let pads = win.pad_low.iter().chain(&win.pad_high).any(|&p| p > 0);
        let unit = win.stride.iter().all(|&s| s == 1);
        if self.kh != 1 || self.kw != 1 || pads || !unit {
            return;
        }
        // Pixels in row order (a staged input's pixels are `xst[3]` apart, an NHWC output's
        // `ost[3]`).
        let rows = |st: &[u64], w: usize| st[2] == w as u64 * st[3];
        if !rows(&self.xst, self.wd) || !rows(&self.ost, self.ow) {
            return;
        }
        let pixels = self.oh * self.ow;
        (self.h, self.wd, self.oh, self.ow) = (1, pixels, 1, pixels);
        (self.ih_in, self.iw_in) = ((0, 1), (0, pixels));
    }
}

/// Output row `(n, oh)` and the tile within it, from a row-unit index.
struct RowUnit<'ctx> {
    n: IntValue<'ctx>,
    oh: IntValue<'ctx>,
    tile: IntValue<'ctx>,
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    fn udiv(&self, a: IntValue<'ctx>, b: u64) -> IntValue<'ctx> {
        self.narrow_op(a, b, true)
    }

    fn urem(&self, a: IntValue<'ctx>, b: u64) -> IntValue<'ctx> {
        self.narrow_op(a, b, false)
    }

    /// `a / b` or `a % b` of a task unit: in 32 bits on a 32-bit target (a unit indexes that
    /// target's memory), where LLVM, having widened the loop counter back to 64 bits, would
    /// call `__udivdi3`, a library routine a freestanding image does not link.
    fn narrow_op(&self, a: IntValue<'ctx>, b: u64, div: bool) -> IntValue<'ctx> {
        let op = |x: IntValue<'ctx>, y: IntValue<'ctx>| {
            if div {
                self.b.build_int_unsigned_div(x, y, "").unwrap()
            } else {
                self.b.build_int_unsigned_rem(x, y, "").unwrap()
            }
        };
        if self.target.arch != crate::target::Arch::Arm {
            return op(a, self.i64(b));
        }
        let i32t = self.ctx.i32_type();
        let a32 = self.b.build_int_truncate(a, i32t, "").unwrap();
        // Opaque: loop strength reduction otherwise rewrote the division in terms of a 64-bit
        // counter it made (and called `__udivdi3`).
        let r = op(self.opaque(a32), i32t.const_int(b, false));
        self.b
            .build_int_z_extend(r, self.ctx.i64_type(), "")
            .unwrap()
    }

    fn row_unit(&self, u: IntValue<'ctx>, oh_count: usize, tiles: usize) -> RowUnit<'ctx> {
        let tile = self.urem(u, tiles as u64);
        let r = self.udiv(u, tiles as u64);
        RowUnit {
            n: self.udiv(r, oh_count as u64),
            oh: self.urem(r, oh_count as u64),
            tile,
        }
    }

    /// Task unit `u` of a *pixels × channels* convolution: its row unit and its panels
    /// `[lo, hi)` of `chunks` (all of them, or one of `col_parts` parts when rows are few).
    fn unit_panels(
        &self,
        u: IntValue<'ctx>,
        col_parts: usize,
        chunks: usize,
        oh_count: usize,
        tiles_per_row: usize,
    ) -> (RowUnit<'ctx>, IntValue<'ctx>, IntValue<'ctx>) {
        if col_parts == 1 {
            return (
                self.row_unit(u, oh_count, tiles_per_row),
                self.i64(0),
                self.i64(chunks as u64),
            );
        }
        let part = self.urem(u, col_parts as u64);
        let lo = self.udiv(self.mul(part, chunks as u64), col_parts as u64);
        let hi = self.udiv(
            self.mul(self.add(part, self.i64(1)), chunks as u64),
            col_parts as u64,
        );
        let ru = self.row_unit(self.udiv(u, col_parts as u64), oh_count, tiles_per_row);
        (ru, lo, hi)
    }

    /// Input position `o·stride + tap·dilation - pad`, whether it is inside `[0, extent)`, and the
    /// position clamped into the image (safe to address).
    #[allow(clippy::too_many_arguments)]
    fn in_pos(
        &self,
        checked: bool,
        o: IntValue<'ctx>,
        tap: usize,
        stride: usize,
        dil: usize,
        pad: usize,
        extent: usize,
    ) -> (IntValue<'ctx>, IntValue<'ctx>) {
        let p = self.add(self.mul(o, stride as u64), self.i64((tap * dil) as u64));
        let p = self.b.build_int_sub(p, self.i64(pad as u64), "").unwrap();
        if !checked {
            // An interior tile: inside by construction, and affine in `o` (no clamp), so rows of
            // a tile address the input with constant offsets from one base.
            return (self.ctx.bool_type().const_all_ones(), p);
        }
        (self.in_range(p, extent), self.clamp_index(p, extent))
    }

    /// Dispatches to the micro-tile of `rows` (full or the partial last tile of a row).
    fn by_rows(
        &self,
        tile: IntValue<'ctx>,
        full: usize,
        part: usize,
        mr: usize,
        body: &dyn Fn(&Self, usize),
    ) {
        match (full > 0, part > 0) {
            (true, false) => body(self, mr),
            (false, true) => body(self, part),
            _ => {
                let is_full = self
                    .b
                    .build_int_compare(IntPredicate::ULT, tile, self.i64(full as u64), "")
                    .unwrap();
                self.if_else(is_full, &mut |cg| body(cg, mr), &mut |cg| body(cg, part));
            }
        }
    }

    /// Runs `body(false)` (no bounds checks) when output row `oh` and columns `[c0, c0 + width)`
    /// are inside the interior ranges, else `body(true)`. `width` must not pass the output's last
    /// column (`full.1`): when every position is interior no test is emitted at all.
    #[allow(clippy::too_many_arguments)]
    fn interior_or_checked(
        &self,
        oh: IntValue<'ctx>,
        c0: IntValue<'ctx>,
        width: usize,
        rows_in: (usize, usize),
        cols_in: (usize, usize),
        full: (usize, usize),
        body: &dyn Fn(&Self, bool),
    ) {
        if rows_in == (0, full.0) && cols_in == (0, full.1) {
            return body(self, false);
        }
        let cmp = |p: IntPredicate, a: IntValue<'ctx>, b: usize| {
            self.b
                .build_int_compare(p, a, self.i64(b as u64), "")
                .unwrap()
        };
        let and = |a: IntValue<'ctx>, b: IntValue<'ctx>| self.b.build_and(a, b, "").unwrap();
        let end = self.add(c0, self.i64(width as u64));
        let ok = and(
            and(
                cmp(IntPredicate::UGE, oh, rows_in.0),
                cmp(IntPredicate::ULT, oh, rows_in.1),
            ),
            and(
                cmp(IntPredicate::UGE, c0, cols_in.0),
                cmp(IntPredicate::ULE, end, cols_in.1),
            ),
        );
        self.if_else(ok, &mut |cg| body(cg, false), &mut |cg| body(cg, true));
    }

    /// Lanes `l` whose position `p0 + l` is in `[0, extent)`, and-ed with `ok`: vector compares
    /// of `p0 + iota` (i32).
    fn lane_mask(
        &self,
        p0: IntValue<'ctx>,
        lanes: u32,
        extent: usize,
        ok: IntValue<'ctx>,
    ) -> VectorValue<'ctx> {
        let i32t = self.ctx.i32_type();
        let vt = i32t.vec_type(lanes);
        let p32 = self.b.build_int_truncate(p0, i32t, "").unwrap();
        let splat = |x: IntValue<'ctx>, t: inkwell::types::VectorType<'ctx>| {
            let v = self
                .b
                .build_insert_element(t.get_undef(), x, i32t.const_zero(), "")
                .unwrap();
            self.b
                .build_shuffle_vector(v, t.get_undef(), i32t.vec_type(lanes).const_zero(), "")
                .unwrap()
        };
        let iota = inkwell::types::VectorType::const_vector(
            &(0..lanes)
                .map(|l| i32t.const_int(l as u64, false))
                .collect::<Vec<_>>(),
        );
        let pos = self.b.build_int_add(splat(p32, vt), iota, "").unwrap();
        let lo = self
            .b
            .build_int_compare(IntPredicate::SGE, pos, vt.const_zero(), "")
            .unwrap();
        let hi = self
            .b
            .build_int_compare(
                IntPredicate::SLT,
                pos,
                splat(i32t.const_int(extent as u64, false), vt),
                "",
            )
            .unwrap();
        let inside = self.b.build_and(lo, hi, "").unwrap();
        let okv = splat(ok, self.ctx.bool_type().vec_type(lanes));
        self.b.build_and(inside, okv, "").unwrap()
    }

    /// The module's line of [`ZERO_LINE`] zero floats (read-only, 64-byte aligned).
    pub(super) fn zero_line(&self) -> PointerValue<'ctx> {
        const NAME: &str = "xla_aot.zero_line";
        let g = self.m.get_global(NAME).unwrap_or_else(|| {
            let ty = self.ctx.f32_type().array_type(ZERO_LINE as u32);
            let g = self.m.add_global(ty, None, NAME);
            g.set_initializer(&ty.const_zero());
            g.set_constant(true);
            g.set_linkage(inkwell::module::Linkage::Internal);
            g.set_alignment(64);
            g
        });
        self.b
            .build_pointer_cast(
                g.as_pointer_value(),
                self.ctx
                    .f32_type()
                    .ptr_type(inkwell::AddressSpace::default()),
                "",
            )
            .unwrap()
    }

    /// The task plumbing of the three paths: `body(cg, kernel view, unit)` for every unit of
    /// this task's share of `units`, run as one task or split over the app's threads.
    fn conv_tasks(
        &self,
        k: &Kernel<'ctx>,
        units: usize,
        flops: u64,
        body: &dyn Fn(&Self, &Kernel<'ctx>, IntValue<'ctx>),
    ) {
        let bufs: Vec<PointerValue<'ctx>> = std::iter::once(k.out)
            .chain(k.args.iter().copied())
            .collect();
        self.run_tasks(k, &bufs, &k.noalias, units, flops, &|cg, f, p, ti, nt| {
            let tk = Kernel {
                f,
                out: p[0],
                args: p[1..].to_vec(),
                noalias: k.noalias.clone(),
            };
            let (lo, hi) = cg.share(ti, nt, units);
            cg.for_range(lo, hi, &mut |cg, u| body(cg, &tk, u));
        });
    }

    pub(super) fn acc_slots(
        &self,
        f: FunctionValue<'ctx>,
        rows: usize,
        cols: &[VecCol],
    ) -> Vec<Vec<PointerValue<'ctx>>> {
        (0..rows)
            .map(|_| {
                cols.iter()
                    .map(|v| {
                        let p = self.slot(f, self.vec_ty(v.lanes).into());
                        self.b
                            .build_store(p, self.vec_ty(v.lanes).const_zero())
                            .unwrap();
                        p
                    })
                    .collect()
            })
            .collect()
    }

    pub(super) fn fma_into(
        &self,
        acc: PointerValue<'ctx>,
        a: VectorValue<'ctx>,
        b: VectorValue<'ctx>,
    ) {
        let lanes = a.get_type().get_size();
        let old = self.b.build_load(acc, "").unwrap();
        let new = self.call(self.vec_fmuladd(lanes), &[a.into(), b.into(), old]);
        self.b.build_store(acc, new).unwrap();
    }

    /// The convolution of kernel `k` along `path`: input `k.args[xi]`, kernel `k.args[wi]`,
    /// result `k.out`; `epi`, an output fusion's register epilogue, is applied to the
    /// accumulators before they are stored (other epilogues sweep the result afterwards).
    /// Returns whether it was (a residual the tile cannot address is left to the sweep).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn conv_fast(
        &self,
        k: &Kernel<'ctx>,
        path: ConvPath,
        window: &Window,
        groups: usize,
        shapes: (&Shape, &Shape, &Shape),
        operands: (usize, usize),
        epi: Option<RegEpilogue>,
    ) -> bool {
        let (xs, ws, os) = shapes;
        let flops =
            2 * (os.element_count() * ws.dims[1] * window.size.iter().product::<usize>()) as u64;
        let mut cs = ConvShape::new(window, groups, xs, ws, os);
        cs.ost = self.out_strides(os);
        if let Some(src) = self.be.in_source.borrow().as_ref() {
            // Read through a channel map: the source buffer's strides (`kernel.rs`).
            cs.xst = physical_strides(src);
        }
        // An image one pixel wide, its window one tap wide: its pixels as one row (the pixel
        // tiles' and depthwise tiles' paths; `ConvShape::columns_as_rows`).
        let swapped = match path {
            ConvPath::ChannelsByPixels => None,
            _ => cs.columns_as_rows(window),
        };
        let (mut cs, window) = match swapped {
            Some((c, w)) => (c, w),
            None => (cs, window.clone()),
        };
        let window = &window;
        let mut epi = epi;
        // The int8 pixel tiles too: an `H × 1` image (str_ww's) had tiles of one pixel.
        let int8_pixels = path == ConvPath::PixelsByChannels && self.be.vnni.get().is_some();
        if path == ConvPath::ChannelsByPixels || int8_pixels {
            let ow = cs.ow as u64;
            cs.flatten_pointwise(window);
            // A flattened tile addresses pixels as one row: a residual read in registers must
            // have its rows contiguous too, else the epilogue sweeps the output instead.
            let rows_apart = |st: &&[u64]| st[2] != ow * st[3];
            if cs.ow as u64 != ow
                && epi
                    .as_ref()
                    .is_some_and(|e| e.full_strides().iter().any(rows_apart))
            {
                epi = None;
            }
        }
        let cs = &cs;
        match path {
            ConvPath::PixelsByChannels => match self.be.vnni.get() {
                Some(offset) => {
                    self.conv_pixels_by_channels_i8(k, window, cs, operands, flops, &epi, offset)
                }
                None => self.conv_pixels_by_channels(k, window, cs, operands, flops, &epi),
            },
            ConvPath::ChannelsByPixels => {
                self.conv_channels_by_pixels(k, window, cs, operands, flops, &epi)
            }
            ConvPath::Depthwise => self.conv_depthwise(k, window, cs, operands, flops, &epi),
        }
        epi.is_some()
    }

    #[allow(clippy::too_many_arguments)]
    fn conv_pixels_by_channels(
        &self,
        k: &Kernel<'ctx>,
        win: &Window,
        cs: &ConvShape,
        (xi, wi): (usize, usize),
        flops: u64,
        epi: &Option<RegEpilogue>,
    ) {
        let t = Tiles::for_target(self.target);
        let ConvShape {
            n: n_count,
            c: c_all,
            groups,
            h,
            wd,
            o,
            kh,
            kw,
            oh: oh_count,
            ow: ow_count,
            ref xst,
            wst: _,
            ref ost,
            ih_in,
            iw_in,
            pixels_dim: _,
        } = *cs;
        // Per group: `c` input channels, `og` output channels in `chunks_g` panels.
        let (c, og) = (c_all / groups, o / groups);
        let nr = panel_width(og, &t);
        let nv = nr / t.lanes as usize;
        let regs = self.target.vector_registers as usize;
        let rows_max = ((regs - nv - spare_registers(regs)) / nv).clamp(1, MAX_PIXEL_ROWS);
        let kk = c * kh * kw;
        let mr = gemm::rows_for_issue(ow_count, rows_max, nv);
        let tiles_per_row = ow_count.div_ceil(mr);
        let (full_rows, part_rows) = (ow_count / mr, ow_count % mr);
        // Column chunks: one panel each (rows are many pixels, so the tile has mr·nv chains).
        let (full_cols, part_cols) = (og / nr, og % nr);
        let chunks_g = og.div_ceil(nr);
        let chunks = groups * chunks_g;
        // Few row tiles (7×7 maps: 7) split unevenly over threads; then each also splits
        // its panels, so tasks even out. Every output element is still one tile's running sum.
        let row_units = n_count * oh_count * tiles_per_row;
        let col_parts = if row_units < MIN_ROW_UNITS {
            chunks.min(COL_PARTS)
        } else {
            1
        };
        let units = row_units * col_parts;
        let pads = win.pad_low.iter().chain(&win.pad_high).any(|&p| p > 0);
        // Channels contiguous in the input: on NEON, CHANNEL_QUAD of them per step.
        let quads = self.target.has_neon() && xst[1] == 1 && c >= CHANNEL_QUAD;
        // Input read through a channel shuffle: group `grp`'s channel `ci` is input channel
        // `source(grp·c + ci)` (`ir/shuffle.rs`), one integer remainder and quotient per step.
        let shuffle = self.be.in_channels.get();
        // Channels of the buffer read (a channel map's source has its own count).
        let c_read = self
            .be
            .in_source
            .borrow()
            .as_ref()
            .map_or(c_all, |s| s.dims[1]);
        self.conv_tasks(k, units, flops, &|cg, tk, u| {
            let (f, x, w, out) = (tk.f, tk.args[xi], tk.args[wi], tk.out);
            let (ru, jr_lo, jr_hi) = cg.unit_panels(u, col_parts, chunks, oh_count, tiles_per_row);
            let per_rows = |cg: &Self, rows: usize| {
                cg.for_range(jr_lo, jr_hi, &mut |cg, jr| {
                    // Panel `jr` is panel `jp` of group `grp` (`pack_conv`'s order).
                    let (grp, jp) = if groups == 1 {
                        (cg.i64(0), jr)
                    } else {
                        (cg.udiv(jr, chunks_g as u64), cg.urem(jr, chunks_g as u64))
                    };
                    let x_grp = match shuffle {
                        Some(_) => cg.i64(0),
                        None => cg.mul(cg.mul(grp, c as u64), xst[1]),
                    };
                    // With `c` a multiple of the shuffle's G, channel `ci = q·G + r` of group
                    // `grp` is source channel `r·K + grp·c/G + q`: the loop runs over `q` with
                    // the G values of `r` unrolled, constant offsets instead of a division.
                    let runs = match shuffle {
                        Some(ChannelMap::Shuffle(s))
                            if c % s.groups == 0 && s.groups <= MAX_SHUFFLE_RUNS =>
                        {
                            Some(s)
                        }
                        _ => None,
                    };
                    let oc0 = cg.add(cg.mul(grp, og as u64), cg.mul(jp, nr as u64));
                    let tile_body = |cg: &Self, rows: usize, cols: &[VecCol], checked: bool| {
                        let ow0 = cg.mul(ru.tile, mr as u64);
                        let acc = cg.acc_slots(f, rows, cols);
                        let panel = cg.mul(jr, (kk * nr) as u64);
                        // int8 panels (`Packings::is_int8`): each column's scale, after them.
                        let scales: Option<Vec<VectorValue<'ctx>>> =
                            (cg.be.half_rhs.get() == Some(DType::I8)).then(|| {
                                let col0 = cg.mul(jr, nr as u64);
                                cols.iter()
                                    .map(|v| {
                                        let col = cg.add(col0, cg.i64(v.col as u64));
                                        cg.column_scales(w, chunks * kk * nr, col, v.lanes)
                                    })
                                    .collect()
                            });
                        for y in 0..kh {
                            for xw in 0..kw {
                                let tap = y * kw + xw;
                                let (row_ok, ih) = cg.in_pos(
                                    checked,
                                    ru.oh,
                                    y,
                                    win.stride[0],
                                    win.dilation[0],
                                    win.pad_low[0],
                                    h,
                                );
                                let mut valid = Vec::with_capacity(rows);
                                let mut base = Vec::with_capacity(rows);
                                for i in 0..rows {
                                    let owi = cg.add(ow0, cg.i64(i as u64));
                                    let (ok, iw) = cg.in_pos(
                                        checked,
                                        owi,
                                        xw,
                                        win.stride[1],
                                        win.dilation[1],
                                        win.pad_low[1],
                                        wd,
                                    );
                                    valid.push(cg.b.build_and(row_ok, ok, "").unwrap());
                                    let b = cg.add(
                                        cg.add(cg.mul(ru.n, xst[0]), cg.mul(ih, xst[2])),
                                        cg.add(cg.mul(iw, xst[3]), x_grp),
                                    );
                                    base.push(b);
                                }
                                // A pixel whose tap falls in the padding reads zeros: its row
                                // points at a zero line (one select per tap, not per channel),
                                // when the channels are contiguous and few enough.
                                let zero_rows = pads
                                    && checked
                                    && xst[1] == 1
                                    && if shuffle.is_some() { c_read } else { c } <= ZERO_LINE;
                                let row_ptr: Vec<PointerValue<'ctx>> = if zero_rows {
                                    let zeros = cg.zero_line();
                                    (0..rows)
                                        .map(|i| {
                                            cg.b.build_select(
                                                valid[i],
                                                cg.gep(x, base[i]),
                                                zeros,
                                                "",
                                            )
                                            .unwrap()
                                            .into_pointer_value()
                                        })
                                        .collect()
                                } else {
                                    Vec::new()
                                };
                                // The weight vectors of input channel `ci + l` at this tap
                                // (`l` a constant offset from one address per step).
                                let weights = |cg: &Self, ci: IntValue<'ctx>, l: u64| {
                                    let krow = cg.add(
                                        panel,
                                        cg.mul(cg.add(cg.i64((tap * c) as u64), ci), nr as u64),
                                    );
                                    let krow = cg.add(krow, cg.i64(l * nr as u64));
                                    let mut bv: Vec<VectorValue<'ctx>> = cols
                                        .iter()
                                        .map(|v| {
                                            cg.vload(w, cg.add(krow, cg.i64(v.col as u64)), v.lanes)
                                        })
                                        .collect();
                                    if let Some(scales) = &scales {
                                        // q · s: exactly the weight (`int8_conv_columns`).
                                        for (b, s) in bv.iter_mut().zip(scales) {
                                            *b = cg.b.build_float_mul(*b, *s, "").unwrap();
                                        }
                                    }
                                    bv
                                };
                                // Channels `ci0..ci0 + CHANNEL_QUAD` (contiguous in the input):
                                // one vector load per pixel, then each channel's products with
                                // that vector's lane (NEON's `fmla v.4s, v.4s, v.s[l]`), in the
                                // order of `step`'s.
                                let quad_step = |cg: &Self, ci0: IntValue<'ctx>| {
                                    let lanes = CHANNEL_QUAD as u32;
                                    let a: Vec<VectorValue<'ctx>> = (0..rows)
                                        .map(|i| {
                                            if zero_rows {
                                                return cg.vload(row_ptr[i], ci0, lanes);
                                            }
                                            let v = cg.vload(x, cg.add(base[i], ci0), lanes);
                                            if pads && checked {
                                                let zero = cg.vec_ty(lanes).const_zero();
                                                return cg
                                                    .select(valid[i], v.into(), zero.into())
                                                    .into_vector_value();
                                            }
                                            v
                                        })
                                        .collect();
                                    for l in 0..CHANNEL_QUAD as u64 {
                                        let bv = weights(cg, ci0, l);
                                        let lane = cg.ctx.i32_type().const_int(l, false);
                                        for i in 0..rows {
                                            let e =
                                                cg.b.build_extract_element(a[i], lane, "")
                                                    .unwrap()
                                                    .into_float_value();
                                            for (j, v) in cols.iter().enumerate() {
                                                cg.fma_into(acc[i][j], cg.splat(e, v.lanes), bv[j]);
                                            }
                                        }
                                    }
                                };
                                let step = |cg: &Self, ci: IntValue<'ctx>, ch: IntValue<'ctx>| {
                                    let bv = weights(cg, ci, 0);
                                    for i in 0..rows {
                                        if zero_rows {
                                            let a = cg
                                                .load(row_ptr[i], ch, DType::F32)
                                                .into_float_value();
                                            for (j, v) in cols.iter().enumerate() {
                                                cg.fma_into(acc[i][j], cg.splat(a, v.lanes), bv[j]);
                                            }
                                            continue;
                                        }
                                        let mut a = cg
                                            .load(
                                                x,
                                                cg.add(base[i], cg.mul(ch, xst[1])),
                                                DType::F32,
                                            )
                                            .into_float_value();
                                        if pads && checked {
                                            a = cg
                                                .select(valid[i], a.into(), cg.f32c(0.0).into())
                                                .into_float_value();
                                        }
                                        for (j, v) in cols.iter().enumerate() {
                                            cg.fma_into(acc[i][j], cg.splat(a, v.lanes), bv[j]);
                                        }
                                    }
                                };
                                match (shuffle, runs) {
                                    (_, Some(s)) => {
                                        let per = (c / s.groups) as u64;
                                        let base = cg.mul(grp, per);
                                        cg.for_loop(c / s.groups, &mut |cg, q| {
                                            let at = cg.add(base, q);
                                            for r in 0..s.groups {
                                                let ci = cg.add(
                                                    cg.mul(q, s.groups as u64),
                                                    cg.i64(r as u64),
                                                );
                                                let ch =
                                                    cg.add(at, cg.i64((r * s.per_group) as u64));
                                                step(cg, ci, ch);
                                            }
                                        });
                                    }
                                    (Some(s), None) => cg.for_loop(c, &mut |cg, ci| {
                                        let ch = cg.add(cg.mul(grp, c as u64), ci);
                                        step(cg, ci, cg.channel_source(&s, ch))
                                    }),
                                    (None, None) if quads => {
                                        cg.for_loop(c / CHANNEL_QUAD, &mut |cg, q| {
                                            quad_step(cg, cg.mul(q, CHANNEL_QUAD as u64))
                                        });
                                        for ci in c / CHANNEL_QUAD * CHANNEL_QUAD..c {
                                            step(cg, cg.i64(ci as u64), cg.i64(ci as u64));
                                        }
                                    }
                                    (None, None) => cg.for_loop(c, &mut |cg, ci| step(cg, ci, ci)),
                                }
                            }
                        }
                        for (i, row) in acc.iter().enumerate() {
                            let owi = cg.add(ow0, cg.i64(i as u64));
                            let pix = cg.add(
                                cg.add(cg.mul(ru.n, ost[0]), cg.mul(ru.oh, ost[2])),
                                cg.mul(owi, ost[3]),
                            );
                            for (v, slot) in cols.iter().zip(row) {
                                let ch = cg.add(oc0, cg.i64(v.col as u64));
                                let off = cg.add(pix, cg.mul(ch, ost[1]));
                                let mut val =
                                    cg.b.build_load(*slot, "").unwrap().into_vector_value();
                                if let Some(e) = epi {
                                    let role = |d: usize| match d {
                                        0 => TilePos::At(ru.n),
                                        1 => TilePos::Col,
                                        d if d == cs.pixels_dim => TilePos::Row,
                                        _ => TilePos::At(ru.oh),
                                    };
                                    val = cg.apply_epilogue(e, tk, val, owi, ch, v, &role);
                                }
                                cg.store_lanes_strided(out, off, val, v.store, ost[1]);
                            }
                        }
                    };
                    let tile_cols = |cg: &Self, rows: usize, cols: &[VecCol]| {
                        let ow0 = cg.mul(ru.tile, mr as u64);
                        let full = (oh_count, ow_count);
                        cg.interior_or_checked(ru.oh, ow0, rows, ih_in, iw_in, full, &|cg, chk| {
                            tile_body(cg, rows, cols, chk)
                        });
                    };
                    let full = vectors(nr, t.lanes, true);
                    let part = vectors(part_cols, t.lanes, true);
                    let by_cols = |cg: &Self, rows: usize| match (full_cols > 0, part_cols > 0) {
                        (true, false) => tile_cols(cg, rows, &full),
                        (false, true) => tile_cols(cg, rows, &part),
                        _ => {
                            let is_full =
                                cg.b.build_int_compare(
                                    IntPredicate::ULT,
                                    jp,
                                    cg.i64(full_cols as u64),
                                    "",
                                )
                                .unwrap();
                            cg.if_else(is_full, &mut |cg| tile_cols(cg, rows, &full), &mut |cg| {
                                tile_cols(cg, rows, &part)
                            });
                        }
                    };
                    by_cols(cg, rows);
                });
            };
            cg.by_rows(ru.tile, full_rows, part_rows, mr, &per_rows);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interior_ranges() {
        // 3 taps, pad 1, stride 1 over 32: outputs 1..31 never touch the padding.
        assert_eq!(interior(32, 32, 3, 1, 1, 1), (1, 31));
        // Stride 2 over 64 (pad 1): o·2 - 1 >= 0 from o = 1; o·2 + 1 <= 63 up to o = 31.
        assert_eq!(interior(32, 64, 3, 2, 1, 1), (1, 32));
        // No padding: everything.
        assert_eq!(interior(30, 32, 3, 1, 1, 0), (0, 30));
        // A window wider than the padded input: nothing is interior.
        assert_eq!(interior(1, 2, 5, 1, 1, 1), (0, 0));
    }
}
