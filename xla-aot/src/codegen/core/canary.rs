//! `--checks` builds: the arena's in-use word, which refuses a call whose arena another call is
//! using.
//!
//! Contract: when the plan has a canary slice (`arena::reserve_canary`), [`Emitter::canary_acquire`]
//! swaps the word at that offset from 0 to 1 with one atomic compare-and-swap (acquire) and
//! returns `XLA_AOT_STATUS_ARENA_IN_USE` from the entry point when it was not 0: two threads
//! sharing one arena, or a hook (profiler, parallel-for) that re-entered the model with it.
//! [`Emitter::canary_release`] stores 0 back (release) on every return after a successful
//! acquire. Detection is best effort for threads (the second call must start while the first
//! runs) and exact for re-entry. Without a canary both are no-ops and the code is unchanged.

use super::emitter::{Backend, Emitter};
use inkwell::values::{FunctionValue, PointerValue};
use inkwell::{AtomicOrdering, AtomicRMWBinOp, IntPredicate};
use runtime_min::Status;

impl<'ctx, B: Backend<'ctx>> Emitter<'_, 'ctx, B> {
    /// Takes the arena (see the module doc); returns the word to release, or `None` without a
    /// canary. Leaves the builder in the path where the arena was free.
    pub(crate) fn canary_acquire(
        &self,
        f: FunctionValue<'ctx>,
        arena: PointerValue<'ctx>,
    ) -> Option<PointerValue<'ctx>> {
        let off = self.plan.canary?;
        let i64t = self.ctx.i64_type();
        let word = self
            .b
            .build_pointer_cast(
                self.gep(arena, self.i64(off as u64)),
                i64t.ptr_type(inkwell::AddressSpace::default()),
                "canary",
            )
            .unwrap();
        let old = self
            .b
            .build_cmpxchg(
                word,
                self.i64(0),
                self.i64(1),
                AtomicOrdering::Acquire,
                AtomicOrdering::Monotonic,
            )
            .unwrap();
        let was = self
            .b
            .build_extract_value(old, 0, "was")
            .unwrap()
            .into_int_value();
        let busy = self
            .b
            .build_int_compare(IntPredicate::NE, was, self.i64(0), "")
            .unwrap();
        let reject = self.ctx.append_basic_block(f, "arena_in_use");
        let go = self.ctx.append_basic_block(f, "arena_taken");
        self.b.build_conditional_branch(busy, reject, go).unwrap();
        self.b.position_at_end(reject);
        let code = self
            .ctx
            .i32_type()
            .const_int(Status::ArenaInUse.code() as i64 as u64, true);
        self.b.build_return(Some(&code)).unwrap();
        self.b.position_at_end(go);
        Some(word)
    }

    /// Gives the arena back (a release store of 0), when [`Self::canary_acquire`] took it.
    pub(crate) fn canary_release(&self, word: Option<PointerValue<'ctx>>) {
        if let Some(w) = word {
            self.b
                .build_atomicrmw(
                    AtomicRMWBinOp::Xchg,
                    w,
                    self.i64(0),
                    AtomicOrdering::Release,
                )
                .unwrap();
        }
    }
}
