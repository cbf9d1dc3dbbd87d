//! The C API's dtype conversions on a CUDA target: one grid kernel per input or output whose C API
//! dtype differs from the IR's (int64, uint32, 8- and 16-bit integers, float16, bfloat16;
//! `ir/api.rs`), converting between its device slot, which holds the caller's bytes, and its
//! staging slice in the planned arena (`arena/staging.rs`), where the model's kernels read or
//! write it in the IR dtype.
//!
//! Contract: [`Cg::boundary_kernel`] emits `<model>_convert_in<k>(ir *out, api *in, i64 index)`
//! or `<model>_convert_out<k>(api *out, ir *in, i64 index)`, each thread converting the element
//! its index names with the CPU entry points' own conversion (`core/boundary.rs`
//! `convert_bits`: branch-free integer code, and float operations that see no subnormal
//! operand, so `ftz` or not, the device gives the CPU's bits); threads past the end do nothing.
//! The launcher (`cuda_host.rs`) runs the input conversions before the model's kernels and the
//! output conversions after them (`ptx.rs` lays out the slots and lists the launches). An int64
//! or uint32 value outside the i32 range is not converted here: the launcher checks the caller's
//! buffer on the host before it copies anything and returns `BAD_ARGUMENT`, as the CPU entry
//! points do; the kernel keeps the low 32 bits.
//!
//! Why on the device: converting on the host would need a host buffer per converted tensor, and
//! the launcher has none (runtime-min's rules: no allocation at run time; the C API gives run only
//! the caller's `const` inputs and its outputs). The device arena is planned memory, so the
//! caller's bytes are copied as they are into the slot sized for the API dtype, and one
//! element-wise launch converts them where the kernels read them; outputs are converted into
//! their slot before the copy back. The range check reads the caller's input where it is,
//! which needs no buffer, and fails before any driver call, so nothing can fail at run time but
//! a bad argument or the driver.

use super::Cg;
use crate::arena::Staging;
use crate::arena::staging::Side;
use inkwell::IntPredicate;
use inkwell::values::FunctionValue;

/// The kernel name of conversion `st` of model `model`.
pub fn kernel_name(model: &str, st: &Staging) -> String {
    match st.side {
        Side::Input(k) => format!("{model}_convert_in{k}"),
        Side::Output(k) => format!("{model}_convert_out{k}"),
    }
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// The grid kernel of conversion `st`: output first (the staging slice of an input, the slot
    /// of an output), then what it converts.
    pub(super) fn boundary_kernel(&self, st: &Staging) -> FunctionValue<'ctx> {
        let (from, to) = match st.side {
            Side::Input(_) => (st.api, st.ir),
            Side::Output(_) => (st.ir, st.api),
        };
        let name = kernel_name(&self.hlo.name, st);
        let k = self.declare_kernel(&name, to, &[from], &[false]);
        let gid = self.be.gid.get().expect("grid kernels have an index");
        let inside = self
            .b
            .build_int_compare(IntPredicate::ULT, gid, self.i64(st.elements as u64), "")
            .unwrap();
        let (src, dst) = (self.typed(k.args[0], from), self.typed(k.out, to));
        self.if_then(inside, &mut |cg| {
            let x =
                cg.b.build_load(cg.gep(src, gid), "")
                    .unwrap()
                    .into_int_value();
            // Out-of-range int64 / uint32 values were refused on the host (see above).
            let (y, _) = cg.convert_bits(x, from, to);
            cg.b.build_store(cg.gep(dst, gid), y).unwrap();
        });
        self.b.build_return(None).unwrap();
        k.f
    }
}
