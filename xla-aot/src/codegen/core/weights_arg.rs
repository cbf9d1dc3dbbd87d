//! The code side of `--weights external` (`weights_blob.rs` has the blob's format): the checks
//! of the `weights` argument that every run entry point makes, and the exported
//! `int <name>_check_weights(const void *weights)`.
//!
//! Contract: a run entry point of such a library takes the blob as its first argument
//! (`entry.rs`) and, before reading anything else of it, returns `NULL_POINTER` for a null blob,
//! `MISALIGNED_ARENA` for one not 64-byte aligned and `BAD_ARGUMENT` when the header's magic,
//! length or checksum field differs from the compiled-in values ([`Emitter::blob_header_differs`]:
//! three 8-byte loads and compares, the cost of every call). It never hashes the weights: that
//! is `<name>_check_weights`, which makes the same checks and then computes the FNV-1a-64 of
//! the bytes after the header, `BAD_ARGUMENT` when it differs from the compiled-in checksum (a
//! corrupted copy), `OK` otherwise: once, after the blob was loaded or flashed, as the caller
//! sees fit (one multiply per byte). Neither stores anything: the library keeps no state about
//! the blob.

use super::emitter::{Backend, Emitter};
use super::weights_blob::{BlobLayout, FNV_BASIS, FNV_PRIME, HEADER, MAGIC};
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::module::Linkage;
use inkwell::values::{FunctionValue, IntValue, PointerValue};
use runtime_min::Status;

impl<'a, 'ctx, B: Backend<'ctx>> Emitter<'a, 'ctx, B> {
    /// True when the header of blob `w` (non-null, aligned) is not the compiled-in one: its
    /// magic, length or checksum field differs.
    pub(crate) fn blob_header_differs(
        &self,
        w: PointerValue<'ctx>,
        layout: &BlobLayout,
    ) -> IntValue<'ctx> {
        let i64t = self.ctx.i64_type();
        let word = |at: u64| {
            let p = self.gep(w, self.i64(at));
            let p = self
                .b
                .build_pointer_cast(p, i64t.ptr_type(AddressSpace::default()), "")
                .unwrap();
            self.b.build_load(p, "").unwrap().into_int_value()
        };
        let expect = [
            (0, u64::from_le_bytes(MAGIC)),
            (8, layout.len),
            (16, layout.checksum),
        ];
        let mut any = self.ctx.bool_type().const_zero();
        for (at, want) in expect {
            let differs = self
                .b
                .build_int_compare(IntPredicate::NE, word(at), self.i64(want), "")
                .unwrap();
            any = self.b.build_or(any, differs, "").unwrap();
        }
        any
    }

    /// In `f`, where the builder is: returns the status of a bad `weights` argument (null,
    /// misaligned, another header), else goes on.
    pub(crate) fn check_weights_arg(
        &self,
        f: FunctionValue<'ctx>,
        w: PointerValue<'ctx>,
        layout: &BlobLayout,
    ) {
        let i32t = self.ctx.i32_type();
        let fail_if = |cond, s: Status| {
            let bad = self.ctx.append_basic_block(f, "bad_weights");
            let ok = self.ctx.append_basic_block(f, "weights_ok");
            self.b.build_conditional_branch(cond, bad, ok).unwrap();
            self.b.position_at_end(bad);
            self.b
                .build_return(Some(&i32t.const_int(s.code() as i64 as u64, true)))
                .unwrap();
            self.b.position_at_end(ok);
        };
        fail_if(self.b.build_is_null(w, "").unwrap(), Status::NullPointer);
        fail_if(self.is_misaligned(w), Status::MisalignedArena);
        fail_if(self.blob_header_differs(w, layout), Status::BadArgument);
    }

    /// The exported `int <name>_check_weights(const void *weights)`.
    pub(crate) fn weights_checker(&self, layout: &BlobLayout) {
        let i32t = self.ctx.i32_type();
        let i64t = self.ctx.i64_type();
        let f = self.m.add_function(
            &format!("{}_check_weights", self.hlo.name),
            i32t.fn_type(&[self.i8p().into()], false),
            Some(Linkage::External),
        );
        self.common_attrs(f);
        let saved = self.b.get_insert_block();
        let entry = self.ctx.append_basic_block(f, "entry");
        self.b.position_at_end(entry);
        let w = f.get_nth_param(0).unwrap().into_pointer_value();
        self.check_weights_arg(f, w, layout);
        // FNV-1a-64 of bytes HEADER..len.
        let pre = self.b.get_insert_block().unwrap();
        let head = self.ctx.append_basic_block(f, "hash");
        let body = self.ctx.append_basic_block(f, "byte");
        let done = self.ctx.append_basic_block(f, "hashed");
        self.b.build_unconditional_branch(head).unwrap();
        self.b.position_at_end(head);
        let i = self.b.build_phi(i64t, "i").unwrap();
        let h = self.b.build_phi(i64t, "h").unwrap();
        let i_v = i.as_basic_value().into_int_value();
        let h_v = h.as_basic_value().into_int_value();
        let end = self
            .b
            .build_int_compare(IntPredicate::EQ, i_v, self.i64(layout.len), "")
            .unwrap();
        self.b.build_conditional_branch(end, done, body).unwrap();
        self.b.position_at_end(body);
        let byte = self
            .b
            .build_load(self.gep(w, i_v), "")
            .unwrap()
            .into_int_value();
        let byte = self.b.build_int_z_extend(byte, i64t, "").unwrap();
        let mixed = self.b.build_xor(h_v, byte, "").unwrap();
        let next_h = self
            .b
            .build_int_mul(mixed, self.i64(FNV_PRIME), "")
            .unwrap();
        let next_i = self.b.build_int_add(i_v, self.i64(1), "").unwrap();
        self.b.build_unconditional_branch(head).unwrap();
        i.add_incoming(&[(&self.i64(HEADER as u64), pre), (&next_i, body)]);
        h.add_incoming(&[(&self.i64(FNV_BASIS), pre), (&next_h, body)]);
        self.b.position_at_end(done);
        let same = self
            .b
            .build_int_compare(IntPredicate::EQ, h_v, self.i64(layout.checksum), "")
            .unwrap();
        let status = |s: Status| i32t.const_int(s.code() as i64 as u64, true);
        let st = self
            .b
            .build_select(same, status(Status::Ok), status(Status::BadArgument), "")
            .unwrap();
        self.b.build_return(Some(&st)).unwrap();
        if let Some(bb) = saved {
            self.b.position_at_end(bb);
        }
    }
}
