//! The code side of `--weights external` (`weights_blob.rs` has the blob's format): the
//! internal global holding the blob's address, its load in the entry points, and the exported
//! `int <name>_set_weights(const void *blob)`.
//!
//! Contract: `<name>_set_weights` returns `NULL_POINTER` for a null blob, `MISALIGNED_ARENA` for
//! one not 64-byte aligned, `BAD_ARGUMENT` when the header's magic, length or checksum field
//! differs from the compiled-in values, and `OK` after storing the address.

use super::emitter::{Backend, Emitter};
use super::weights_blob::{BlobLayout, MAGIC};
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::module::Linkage;
use inkwell::values::{GlobalValue, PointerValue};
use runtime_min::Status;

impl<'a, 'ctx, B: Backend<'ctx>> Emitter<'a, 'ctx, B> {
    /// The internal global `<name>.weights` holding the blob's address (null until set).
    pub(crate) fn blob_base_global(&self) -> GlobalValue<'ctx> {
        let name = format!("{}.weights", self.hlo.name);
        if let Some(g) = self.m.get_global(&name) {
            return g;
        }
        let ty = self.i8p();
        let g = self.m.add_global(ty, Some(AddressSpace::default()), &name);
        g.set_initializer(&ty.const_null());
        g.set_linkage(Linkage::Internal);
        g
    }

    /// The blob's address, loaded where the builder is.
    pub(crate) fn blob_base(&self, layout: &BlobLayout<'ctx>) -> PointerValue<'ctx> {
        self.b
            .build_load(layout.base.as_pointer_value(), "weights")
            .unwrap()
            .into_pointer_value()
    }

    /// The exported `int <name>_set_weights(const void *blob)`.
    pub(crate) fn weights_setter(&self, layout: &BlobLayout<'ctx>) {
        let i32t = self.ctx.i32_type();
        let i64t = self.ctx.i64_type();
        let f = self.m.add_function(
            &format!("{}_set_weights", self.hlo.name),
            i32t.fn_type(&[self.i8p().into()], false),
            Some(Linkage::External),
        );
        self.common_attrs(f);
        let saved = self.b.get_insert_block();
        self.b
            .position_at_end(self.ctx.append_basic_block(f, "entry"));
        let blob = f.get_nth_param(0).unwrap().into_pointer_value();
        let status = |s: Status| i32t.const_int(s.code() as i64 as u64, true);
        let fail_if = |cond, s: Status| {
            let bad = self.ctx.append_basic_block(f, "bad");
            let ok = self.ctx.append_basic_block(f, "ok");
            self.b.build_conditional_branch(cond, bad, ok).unwrap();
            self.b.position_at_end(bad);
            self.b.build_return(Some(&status(s))).unwrap();
            self.b.position_at_end(ok);
        };
        fail_if(self.b.build_is_null(blob, "").unwrap(), Status::NullPointer);
        fail_if(self.is_misaligned(blob), Status::MisalignedArena);
        let word = |at: u64| {
            let p = self.gep(blob, self.i64(at));
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
        for (at, want) in expect {
            let differs = self
                .b
                .build_int_compare(IntPredicate::NE, word(at), self.i64(want), "")
                .unwrap();
            fail_if(differs, Status::BadArgument);
        }
        self.b
            .build_store(layout.base.as_pointer_value(), blob)
            .unwrap();
        self.b.build_return(Some(&status(Status::Ok))).unwrap();
        if let Some(bb) = saved {
            self.b.position_at_end(bb);
        }
    }
}
