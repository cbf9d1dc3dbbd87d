//! The `smlad` K loop as one inline-assembly block: the Cortex-M4/M7/M33 convolutions' inner
//! loop over widened rows ([`QuadDot::wide_a`](super::quad_dot::QuadDot)), with its registers
//! assigned by hand.
//!
//! Contract: [`Cg::smlad_asm_steps`] does what `Cg::dot_steps` does for a `Smlad` dot whose rows
//! were widened (`Cg::widen_quads`), for a constant, non-zero count of steps: per step, each
//! column's weight dword is loaded and unpacked (`sxtb16`, and `sxtb16 …, ror #8`), each row's
//! two halfword dwords are loaded into one register in turn, and `rows × columns × 2` `smlad`s
//! add the products to the accumulators; the pointers walk by post-incremented loads and a
//! `subs`/`bne` pair closes the loop. The sums are exact (each `smlad` adds two products of at
//! most 2^14 in magnitude to an i32 that holds the whole dot product: `VNNI_MAX_K`), so the
//! order in which they are added does not matter. It declines (returns `false`) where the block
//! would need more than [`ASM_REGISTERS`] registers or an offset a Thumb-2 load cannot encode.
//!
//! Why assembly: LLVM 14's register allocation of the same loop written as IR spilled and
//! rematerialised around the 13 values a 3 × 2 tile keeps live (34 to 41 instructions per step
//! against the 26 here; MLPerf Tiny's pointwise layers on the M4).

use super::Cg;
use inkwell::AddressSpace;
use inkwell::values::{CallableValue, IntValue, PointerValue};

/// Core registers the block may name: r0–r12 and lr (never sp or pc). The compiled kernels keep
/// no frame pointer (r7 is allocatable) and r9 is not reserved on the bare-metal EABI.
const ASM_REGISTERS: usize = 14;

/// Largest offset of `ldr r, [r, #imm]` (Thumb-2's 12-bit immediate).
const LDR_OFFSET_MAX: u64 = 4095;

/// Largest step of a post-incremented `ldr r, [r], #imm` (an 8-bit immediate).
const POST_INCREMENT_MAX: u64 = 255;

/// Bytes of one widened quad: its even and its odd halfword dwords.
const WIDE_QUAD_BYTES: u64 = 8;

/// Steps per iteration of [`Cg::smlad_row_asm_steps`]: the `subs`/`bne` pair shared by two
/// steps of `3 + 5·columns` instructions (ad01's dense layers, 4 columns: 25 → 24 per step).
const ROW_UNROLL: u64 = 2;

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// `Cg::dot_steps` for widened `smlad` rows as one inline-assembly loop (module doc):
    /// `steps` steps; row `i`'s quad at dword `a_base + a_off[i]` of `a` (in quads; two dwords
    /// each once widened), column `j`'s weights at byte `b_base + b_off[j]` of `b`, advancing
    /// `b_step` bytes per step. Returns whether it emitted the loop.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn smlad_asm_steps(
        &self,
        acc: &[Vec<PointerValue<'ctx>>],
        steps: u64,
        (a, a_base, a_off): (PointerValue<'ctx>, IntValue<'ctx>, &[u64]),
        (b, b_base, b_off, b_step): (PointerValue<'ctx>, IntValue<'ctx>, &[u64], u64),
    ) -> bool {
        let (rows, cols) = (acc.len(), acc.first().map_or(0, Vec::len));
        let accs = rows * cols;
        // Accumulators, the two pointers and the counter, two halves per column, one row.
        if steps == 0 || accs == 0 || accs + 3 + 2 * cols + 1 > ASM_REGISTERS {
            return false;
        }
        let a_bytes: Vec<u64> = a_off.iter().map(|o| o * WIDE_QUAD_BYTES).collect();
        if a_bytes.iter().any(|&o| o + 4 > LDR_OFFSET_MAX)
            || b_off.iter().any(|&o| o > LDR_OFFSET_MAX)
            || b_step > LDR_OFFSET_MAX
        {
            return false;
        }
        // Operands: accumulators, pA, pB, n, then the temporaries.
        let (pa, pb, n) = (accs, accs + 1, accs + 2);
        let even = |j: usize| accs + 3 + j;
        let odd = |j: usize| accs + 3 + cols + j;
        let row = accs + 3 + 2 * cols;
        let total = row + 1;
        let mut asm = vec!["1:".to_string()];
        // Weights: column 0 last, post-incremented when it sits at the pointer.
        let b_post = b_off[0] == 0 && b_step <= POST_INCREMENT_MAX;
        for j in (0..cols).rev() {
            if j == 0 && b_post {
                asm.push(format!("ldr ${}, [${pb}], #{b_step}", even(0)));
            } else {
                asm.push(format!("ldr ${}, [${pb}, #{}]", even(j), b_off[j]));
            }
        }
        if !b_post {
            asm.push(format!("add ${pb}, ${pb}, #{b_step}"));
        }
        for j in 0..cols {
            asm.push(format!("sxtb16 ${}, ${}, ror #8", odd(j), even(j)));
            asm.push(format!("sxtb16 ${}, ${}", even(j), even(j)));
        }
        // Rows: the one at the pointer last, its even dword post-incremented.
        let post_row = a_bytes.iter().position(|&o| o == 0);
        let order: Vec<usize> = (0..rows)
            .filter(|&i| Some(i) != post_row)
            .chain(post_row)
            .collect();
        for &i in &order {
            let o = a_bytes[i];
            asm.push(format!("ldr ${row}, [${pa}, #{}]", o + 4));
            for j in 0..cols {
                let s = i * cols + j;
                asm.push(format!("smlad ${s}, ${row}, ${}, ${s}", odd(j)));
            }
            if Some(i) == post_row {
                asm.push(format!("ldr ${row}, [${pa}], #{WIDE_QUAD_BYTES}"));
            } else {
                asm.push(format!("ldr ${row}, [${pa}, #{o}]"));
            }
            for j in 0..cols {
                let s = i * cols + j;
                asm.push(format!("smlad ${s}, ${row}, ${}, ${s}", even(j)));
            }
        }
        if post_row.is_none() {
            asm.push(format!("add ${pa}, ${pa}, #{WIDE_QUAD_BYTES}"));
        }
        asm.push(format!("subs ${n}, ${n}, #1"));
        asm.push("bne 1b".into());
        self.smlad_asm_call(
            acc,
            &asm,
            total,
            (a, self.mul(a_base, 2)),
            (b, b_base, steps),
        );
        true
    }

    /// `Cg::dot_steps` for a `smlad` dot of one row whose quads were packed as they are (not
    /// widened: a GEMM's single row, `gemm_i8.rs`) as one inline-assembly loop of
    /// [`ROW_UNROLL`] steps per iteration: per step the row's dword is loaded and unpacked once
    /// (`sxtb16`, `sxtb16 …, ror #8`), then each column's weight dword in turn into the same
    /// two registers and its two `smlad`s, so the block needs `columns + 7` registers, not
    /// `3·columns + 4` ([`Cg::smlad_asm_steps`]). A count of steps that is not a multiple of
    /// [`ROW_UNROLL`] runs its first steps once before the loop. Returns whether it emitted it.
    pub(super) fn smlad_row_asm_steps(
        &self,
        acc: &[Vec<PointerValue<'ctx>>],
        steps: u64,
        (a, a_base, a_off): (PointerValue<'ctx>, IntValue<'ctx>, &[u64]),
        (b, b_base, b_off, b_step): (PointerValue<'ctx>, IntValue<'ctx>, &[u64], u64),
    ) -> bool {
        let cols = match acc {
            [row] => row.len(),
            _ => return false,
        };
        let (iters, rest) = (steps / ROW_UNROLL, steps % ROW_UNROLL);
        if iters == 0
            || cols == 0
            || cols + 7 > ASM_REGISTERS
            || a_off != [0]
            || b_off.iter().any(|&o| o > LDR_OFFSET_MAX)
            || b_step > POST_INCREMENT_MAX
        {
            return false;
        }
        // Operands: accumulators, pA, pB, n, then the row's and a weight's two halves.
        let (pa, pb, n) = (cols, cols + 1, cols + 2);
        let (row_e, row_o, w_e, w_o) = (cols + 3, cols + 4, cols + 5, cols + 6);
        let total = cols + 7;
        let step = |asm: &mut Vec<String>| {
            asm.push(format!("ldr ${row_e}, [${pa}], #4"));
            asm.push(format!("sxtb16 ${row_o}, ${row_e}, ror #8"));
            asm.push(format!("sxtb16 ${row_e}, ${row_e}"));
            // Column 0 last: its load walks the weight pointer on.
            for j in (0..cols).rev() {
                if j == 0 && b_off[0] == 0 {
                    asm.push(format!("ldr ${w_e}, [${pb}], #{b_step}"));
                } else {
                    asm.push(format!("ldr ${w_e}, [${pb}, #{}]", b_off[j]));
                }
                asm.push(format!("sxtb16 ${w_o}, ${w_e}, ror #8"));
                asm.push(format!("sxtb16 ${w_e}, ${w_e}"));
                asm.push(format!("smlad ${j}, ${row_o}, ${w_o}, ${j}"));
                asm.push(format!("smlad ${j}, ${row_e}, ${w_e}, ${j}"));
            }
            if b_off[0] != 0 {
                asm.push(format!("add ${pb}, ${pb}, #{b_step}"));
            }
        };
        let mut asm = Vec::new();
        for _ in 0..rest {
            step(&mut asm);
        }
        asm.push("1:".to_string());
        for _ in 0..ROW_UNROLL {
            step(&mut asm);
        }
        asm.push(format!("subs ${n}, ${n}, #1"));
        asm.push("bne 1b".into());
        self.smlad_asm_call(acc, &asm, total, (a, a_base), (b, b_base, iters));
        true
    }

    /// Calls the inline-assembly loop `asm` (operands: the accumulators of `acc` in order, then
    /// the row pointer at dword `a_at` of `a`, the weight pointer at byte `b_base` of `b`, the
    /// iteration count `iters`, then `total − accumulators − 3` temporaries) and stores the
    /// accumulators back.
    fn smlad_asm_call(
        &self,
        acc: &[Vec<PointerValue<'ctx>>],
        asm: &[String],
        total: usize,
        (a, a_at): (PointerValue<'ctx>, IntValue<'ctx>),
        (b, b_base, iters): (PointerValue<'ctx>, IntValue<'ctx>, u64),
    ) {
        let accs = acc.iter().map(Vec::len).sum::<usize>();
        let mut constraints: Vec<String> = (0..total)
            .map(|k| if k < accs + 3 { "=r" } else { "=&r" }.to_string())
            .collect();
        constraints.extend((0..accs + 3).map(|k| k.to_string()));
        constraints.extend(["~{cc}".to_string(), "~{memory}".to_string()]);
        let i32t = self.ctx.i32_type();
        let ret = self.ctx.struct_type(&vec![i32t.into(); total], false);
        let ty = ret.fn_type(&vec![i32t.into(); accs + 3], false);
        let block = self.ctx.create_inline_asm(
            ty,
            asm.join("\n\t"),
            constraints.join(","),
            true,
            false,
            None,
            false,
        );
        let address = |p: PointerValue<'ctx>| self.b.build_ptr_to_int(p, i32t, "").unwrap();
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let b8 = self.b.build_pointer_cast(b, i8p, "").unwrap();
        let a_at = self.gep(a, a_at);
        let mut args: Vec<inkwell::values::BasicMetadataValueEnum<'ctx>> = acc
            .iter()
            .flatten()
            .map(|p| {
                let v = self.b.build_load(*p, "").unwrap().into_vector_value();
                self.b
                    .build_extract_element(v, i32t.const_zero(), "")
                    .unwrap()
                    .into()
            })
            .collect();
        args.push(address(a_at).into());
        args.push(address(self.gep(b8, b_base)).into());
        args.push(i32t.const_int(iters, false).into());
        let out = self
            .b
            .build_call(CallableValue::try_from(block).unwrap(), &args, "smlad_loop")
            .unwrap()
            .try_as_basic_value()
            .basic()
            .unwrap()
            .into_struct_value();
        for (k, p) in acc.iter().flatten().enumerate() {
            let sum = self.b.build_extract_value(out, k as u32, "").unwrap();
            let v = self.b.build_load(*p, "").unwrap().into_vector_value();
            let v = self
                .b
                .build_insert_element(v, sum.into_int_value(), i32t.const_zero(), "")
                .unwrap();
            self.b.build_store(*p, v).unwrap();
        }
    }
}
