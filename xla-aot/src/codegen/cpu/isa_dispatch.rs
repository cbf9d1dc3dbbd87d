//! The run-time ISA dispatcher of a multi-ISA library (`x86_64-multi`): the public entry points
//! that forward every call to one of the variants compiled into the same module.
//!
//! Contract: [`add_dispatcher`] adds, for model `name` whose variants export `<prefix>_<suffix>`
//! (prefix `<name>__<isa>`, best first, the last one baseline):
//! - `<name>_<suffix>` for every exported suffix: `_set_*` registrations are passed to every
//!   variant (each keeps its own); any other entry point loads the selected variant's index (one
//!   relaxed atomic load of an internal `i32`) and tail-calls that variant with its arguments
//!   unchanged, so statuses, overlap checks and the C API contract are the variant's own;
//! - `const char *<name>_isa(void)`: the selected variant's name (`avx512`, `avx2`, `sse2`;
//!   `dotprod`, `neon`);
//! - `int <name>_force_isa(const char *isa)`: selects variant `isa`; 0 on success,
//!   `XLA_AOT_STATUS_BAD_ARGUMENT` for a name that is not a variant or a variant this CPU cannot
//!   run; `NULL` returns to the automatic choice.
//!
//! - aarch64 only: `void <name>_set_hwcap(uint64_t hwcap, uint64_t hwcap2)`, the caller's
//!   `getauxval(AT_HWCAP)` and `getauxval(AT_HWCAP2)`; it drops the selection.
//!
//! The first call that finds no selection runs the detection. x86-64: CPUID leaves 0, 1, 7 and
//! 0x8000_0001, and XCR0 through `xgetbv` only when CPUID says the OS enabled XSAVE (`xgetbv`
//! faults otherwise). aarch64: the `AT_HWCAP` last passed (none: only the baseline runs; user
//! code cannot read the ID registers portably and a freestanding library has no `getauxval`).
//! A variant runs when every bit `target/isa.rs` lists for it is set; the last variant always
//! runs. The detection is pure, so two threads racing through it store the same index; nothing
//! here needs libc or a constructor (freestanding). Every dispatcher function is compiled for the
//! baseline CPU, so it runs on every CPU of the family whatever the variants need.

use crate::codegen::core::target::target_attrs;
use crate::target::Target;
use crate::target::isa::Isa;
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::attributes::AttributeLoc;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValue, CallableValue, FunctionValue, GlobalValue, IntValue,
};
use inkwell::{AtomicOrdering, types::StructType};
use runtime_min::Status;

/// One variant compiled into the module: its symbol prefix and level.
#[derive(Debug, Clone)]
pub struct IsaVariant {
    /// `<name>__<isa>`: its entry points are `<prefix>_run`, ...
    pub prefix: String,
    /// Its level (`target/isa.rs`).
    pub isa: Isa,
}

/// The C identifier part of an ISA name (`sse4.2` → `sse4_2`), for symbol prefixes.
pub fn isa_ident(isa: &Isa) -> String {
    isa.name.replace('.', "_")
}

/// Value of the selection word before the first call has chosen.
const UNSELECTED: u64 = u64::MAX; // -1 as i32

/// CPUID leaf 1 ECX bit: the OS has enabled XSAVE, so `xgetbv` may run.
const OSXSAVE: u64 = 1 << 27;

/// First extended CPUID leaf, which returns the highest extended leaf.
const EXT_BASE: u64 = 0x8000_0000;

struct D<'a, 'ctx> {
    ctx: &'ctx Context,
    m: &'a Module<'ctx>,
    b: Builder<'ctx>,
    base: &'a Target,
}

impl<'ctx> D<'_, 'ctx> {
    fn i32(&self, v: u64) -> IntValue<'ctx> {
        self.ctx.i32_type().const_int(v, false)
    }

    fn function(
        &self,
        name: &str,
        ty: inkwell::types::FunctionType<'ctx>,
        linkage: Linkage,
    ) -> FunctionValue<'ctx> {
        let f = self.m.add_function(name, ty, Some(linkage));
        f.add_attribute(
            AttributeLoc::Function,
            self.ctx.create_enum_attribute(
                inkwell::attributes::Attribute::get_named_enum_kind_id("nounwind"),
                0,
            ),
        );
        target_attrs(self.ctx, f, self.base);
        f
    }

    fn block(&self, f: FunctionValue<'ctx>, name: &str) -> inkwell::basic_block::BasicBlock<'ctx> {
        self.ctx.append_basic_block(f, name)
    }

    fn cpuid_type(&self) -> StructType<'ctx> {
        let i32t = self.ctx.i32_type();
        self.ctx
            .struct_type(&[i32t.into(), i32t.into(), i32t.into(), i32t.into()], false)
    }

    /// `cpuid(leaf, 0)` → (eax, ebx, ecx, edx).
    fn cpuid(&self, leaf: u64) -> [IntValue<'ctx>; 4] {
        let i32t = self.ctx.i32_type();
        let ty = self
            .cpuid_type()
            .fn_type(&[i32t.into(), i32t.into()], false);
        let asm = self.ctx.create_inline_asm(
            ty,
            "cpuid".into(),
            "={ax},={bx},={cx},={dx},{ax},{cx}".into(),
            true,
            false,
            None,
            false,
        );
        let call = self
            .b
            .build_call(
                CallableValue::try_from(asm).unwrap(),
                &[self.i32(leaf).into(), self.i32(0).into()],
                "cpuid",
            )
            .unwrap()
            .try_as_basic_value()
            .basic()
            .unwrap()
            .into_struct_value();
        [0, 1, 2, 3].map(|i| {
            self.b
                .build_extract_value(call, i, "")
                .unwrap()
                .into_int_value()
        })
    }

    /// `xgetbv(0)`'s low word (XCR0 bits 0-31).
    fn xgetbv0(&self) -> IntValue<'ctx> {
        let i32t = self.ctx.i32_type();
        let ty = self
            .ctx
            .struct_type(&[i32t.into(), i32t.into()], false)
            .fn_type(&[i32t.into()], false);
        let asm = self.ctx.create_inline_asm(
            ty,
            "xgetbv".into(),
            "={ax},={dx},{cx}".into(),
            true,
            false,
            None,
            false,
        );
        let r = self
            .b
            .build_call(
                CallableValue::try_from(asm).unwrap(),
                &[self.i32(0).into()],
                "xgetbv",
            )
            .unwrap()
            .try_as_basic_value()
            .basic()
            .unwrap()
            .into_struct_value();
        self.b
            .build_extract_value(r, 0, "")
            .unwrap()
            .into_int_value()
    }

    /// `(word & bits) == bits`.
    fn has(&self, word: IntValue<'ctx>, bits: u64) -> IntValue<'ctx> {
        let bits = word.get_type().const_int(bits, false);
        let m = self.b.build_and(word, bits, "").unwrap();
        self.b
            .build_int_compare(IntPredicate::EQ, m, bits, "")
            .unwrap()
    }

    /// `mask | (ok ? 1 << k : 0)`: variant k's bit of a runnable mask.
    fn with_bit(&self, mask: IntValue<'ctx>, ok: IntValue<'ctx>, k: usize) -> IntValue<'ctx> {
        let bit = self
            .b
            .build_select(ok, self.i32(1 << k), self.i32(0), "")
            .unwrap()
            .into_int_value();
        self.b.build_or(mask, bit, "").unwrap()
    }

    /// aarch64's `i32 <name>.isa_runnable()`: bit k set when the `AT_HWCAP` last passed to
    /// `<name>_set_hwcap` (0 before) has every bit variant k needs; the baseline's always.
    fn runnable_hwcap(
        &self,
        name: &str,
        variants: &[IsaVariant],
        hwcap: GlobalValue<'ctx>,
    ) -> FunctionValue<'ctx> {
        let i32t = self.ctx.i32_type();
        let f = self.function(
            &format!("{name}.isa_runnable"),
            i32t.fn_type(&[], false),
            Linkage::Internal,
        );
        self.b.position_at_end(self.block(f, "entry"));
        let h = self
            .b
            .build_load(hwcap.as_pointer_value(), "hwcap")
            .unwrap()
            .into_int_value();
        let inst = h.as_instruction_value().unwrap();
        inst.set_atomic_ordering(AtomicOrdering::Monotonic).unwrap();
        inst.set_alignment(8).unwrap();
        let last = variants.len() - 1;
        let mut mask = self.i32(1 << last);
        for (k, v) in variants.iter().enumerate().take(last) {
            mask = self.with_bit(mask, self.has(h, v.isa.hwcap), k);
        }
        self.b.build_return(Some(&mask)).unwrap();
        f
    }

    /// `void <name>_set_hwcap(uint64_t hwcap, uint64_t hwcap2)`: keeps `hwcap` (`hwcap2` is for
    /// the i8mm and bf16 levels, none yet) and drops the selection, so the next call chooses
    /// again.
    fn hwcap_setter(&self, name: &str, hwcap: GlobalValue<'ctx>, g: GlobalValue<'ctx>) {
        let i64t = self.ctx.i64_type();
        let f = self.function(
            &format!("{name}_set_hwcap"),
            self.ctx
                .void_type()
                .fn_type(&[i64t.into(), i64t.into()], false),
            Linkage::External,
        );
        self.b.position_at_end(self.block(f, "entry"));
        let h = f.get_nth_param(0).unwrap().into_int_value();
        let st = self.b.build_store(hwcap.as_pointer_value(), h).unwrap();
        st.set_atomic_ordering(AtomicOrdering::Monotonic).unwrap();
        st.set_alignment(8).unwrap();
        self.store_selected(g, self.i32(UNSELECTED));
        self.b.build_return(None).unwrap();
    }

    /// x86-64's `i32 <name>.isa_runnable()`: bit k set when variant k runs on this CPU and OS.
    fn runnable(&self, name: &str, variants: &[IsaVariant]) -> FunctionValue<'ctx> {
        let i32t = self.ctx.i32_type();
        let f = self.function(
            &format!("{name}.isa_runnable"),
            i32t.fn_type(&[], false),
            Linkage::Internal,
        );
        let entry = self.block(f, "entry");
        let xsave = self.block(f, "xsave");
        let done = self.block(f, "done");
        self.b.position_at_end(entry);
        let [max, ..] = self.cpuid(0);
        let [_, _, ecx1, _] = self.cpuid(1);
        let [_, ebx7, _, _] = self.cpuid(7);
        let has7 = self
            .b
            .build_int_compare(IntPredicate::UGE, max, self.i32(7), "")
            .unwrap();
        let ebx7 = self
            .b
            .build_select(has7, ebx7, self.i32(0), "")
            .unwrap()
            .into_int_value();
        let [ext_max, ..] = self.cpuid(EXT_BASE);
        let [_, _, ext_ecx, _] = self.cpuid(EXT_BASE + 1);
        let has_ext = self
            .b
            .build_int_compare(IntPredicate::UGE, ext_max, self.i32(EXT_BASE + 1), "")
            .unwrap();
        let ext_ecx = self
            .b
            .build_select(has_ext, ext_ecx, self.i32(0), "")
            .unwrap()
            .into_int_value();
        let os = self.has(ecx1, OSXSAVE);
        self.b.build_conditional_branch(os, xsave, done).unwrap();
        self.b.position_at_end(xsave);
        let xcr0 = self.xgetbv0();
        self.b.build_unconditional_branch(done).unwrap();
        self.b.position_at_end(done);
        let phi = self.b.build_phi(i32t, "xcr0").unwrap();
        phi.add_incoming(&[(&self.i32(0), entry), (&xcr0, xsave)]);
        let xcr0 = phi.as_basic_value().into_int_value();
        let mut mask = self.i32(0);
        for (k, v) in variants.iter().enumerate() {
            let i = v.isa;
            let ok = [
                self.has(ecx1, i.leaf1_ecx.into()),
                self.has(ebx7, i.leaf7_ebx.into()),
                self.has(ext_ecx, i.ext1_ecx.into()),
                self.has(xcr0, i.xcr0.into()),
            ]
            .into_iter()
            .reduce(|a, b| self.b.build_and(a, b, "").unwrap())
            .unwrap();
            mask = self.with_bit(mask, ok, k);
        }
        self.b.build_return(Some(&mask)).unwrap();
        f
    }

    fn load_selected(&self, g: GlobalValue<'ctx>) -> IntValue<'ctx> {
        let v = self
            .b
            .build_load(g.as_pointer_value(), "isa")
            .unwrap()
            .into_int_value();
        let inst = v.as_instruction_value().unwrap();
        inst.set_atomic_ordering(AtomicOrdering::Monotonic).unwrap();
        inst.set_alignment(4).unwrap();
        v
    }

    fn store_selected(&self, g: GlobalValue<'ctx>, v: IntValue<'ctx>) {
        let st = self.b.build_store(g.as_pointer_value(), v).unwrap();
        st.set_atomic_ordering(AtomicOrdering::Monotonic).unwrap();
        st.set_alignment(4).unwrap();
    }

    /// `i32 <name>.isa_select()`: the selected index, choosing (and storing) the best runnable
    /// variant the first time.
    fn select(
        &self,
        name: &str,
        g: GlobalValue<'ctx>,
        runnable: FunctionValue<'ctx>,
        n: usize,
    ) -> FunctionValue<'ctx> {
        let i32t = self.ctx.i32_type();
        let f = self.function(
            &format!("{name}.isa_select"),
            i32t.fn_type(&[], false),
            Linkage::Internal,
        );
        f.add_attribute(
            AttributeLoc::Function,
            self.ctx.create_enum_attribute(
                inkwell::attributes::Attribute::get_named_enum_kind_id("noinline"),
                0,
            ),
        );
        let entry = self.block(f, "entry");
        let choose = self.block(f, "choose");
        let known = self.block(f, "known");
        self.b.position_at_end(entry);
        let cur = self.load_selected(g);
        let unset = self
            .b
            .build_int_compare(IntPredicate::SLT, cur, self.i32(0), "")
            .unwrap();
        self.b
            .build_conditional_branch(unset, choose, known)
            .unwrap();
        self.b.position_at_end(known);
        self.b.build_return(Some(&cur)).unwrap();
        self.b.position_at_end(choose);
        let mask = self
            .b
            .build_call(runnable, &[], "mask")
            .unwrap()
            .try_as_basic_value()
            .basic()
            .unwrap()
            .into_int_value();
        // The best runnable variant: the lowest set bit (the baseline, last, always runs).
        let mut best = self.i32(n as u64 - 1);
        for k in (0..n - 1).rev() {
            let bit = self.b.build_and(mask, self.i32(1 << k), "").unwrap();
            let set = self
                .b
                .build_int_compare(IntPredicate::NE, bit, self.i32(0), "")
                .unwrap();
            best = self
                .b
                .build_select(set, self.i32(k as u64), best, "")
                .unwrap()
                .into_int_value();
        }
        self.store_selected(g, best);
        self.b.build_return(Some(&best)).unwrap();
        f
    }

    /// A public entry point forwarding to the selected variant's `targets[k]`.
    fn forwarder(
        &self,
        public: &str,
        targets: &[FunctionValue<'ctx>],
        g: GlobalValue<'ctx>,
        select: FunctionValue<'ctx>,
    ) {
        let ty = targets[0].get_type();
        let f = self.function(public, ty, Linkage::External);
        let entry = self.block(f, "entry");
        let slow = self.block(f, "slow");
        let calls: Vec<_> = (0..targets.len())
            .map(|k| self.block(f, &format!("v{k}")))
            .collect();
        let args: Vec<BasicMetadataValueEnum> = f.get_param_iter().map(|p| p.into()).collect();
        let cases = |d: &Self| -> Vec<(IntValue<'ctx>, inkwell::basic_block::BasicBlock<'ctx>)> {
            calls
                .iter()
                .enumerate()
                .map(|(k, bb)| (d.i32(k as u64), *bb))
                .collect()
        };
        self.b.position_at_end(entry);
        let k = self.load_selected(g);
        self.b.build_switch(k, slow, &cases(self)).unwrap();
        // First call: choose in a separate function, then come back here, so that the path
        // every later call takes saves no register and makes no call but the tail call.
        self.b.position_at_end(slow);
        let first = self.function(&format!("{public}.first"), ty, Linkage::Internal);
        first.add_attribute(
            AttributeLoc::Function,
            self.ctx.create_enum_attribute(
                inkwell::attributes::Attribute::get_named_enum_kind_id("noinline"),
                0,
            ),
        );
        self.tail_return(first, &args);
        self.b.position_at_end(self.block(first, "entry"));
        self.b.build_call(select, &[], "").unwrap();
        let first_args: Vec<BasicMetadataValueEnum> =
            first.get_param_iter().map(|p| p.into()).collect();
        self.tail_return(f, &first_args);
        for (t, bb) in targets.iter().zip(&calls) {
            self.b.position_at_end(*bb);
            self.tail_return(*t, &args);
        }
    }

    /// `return callee(args...)` as a tail call, at the builder's position.
    fn tail_return(&self, callee: FunctionValue<'ctx>, args: &[BasicMetadataValueEnum<'ctx>]) {
        let call = self.b.build_call(callee, args, "").unwrap();
        call.set_tail_call(true);
        match call.try_as_basic_value().basic() {
            Some(v) => self.b.build_return(Some(&v)).unwrap(),
            None => self.b.build_return(None).unwrap(),
        };
    }

    /// A public registration passed to every variant's.
    fn broadcaster(&self, public: &str, targets: &[FunctionValue<'ctx>]) {
        let f = self.function(public, targets[0].get_type(), Linkage::External);
        self.b.position_at_end(self.block(f, "entry"));
        let args: Vec<BasicMetadataValueEnum> = f.get_param_iter().map(|p| p.into()).collect();
        for t in targets {
            self.b.build_call(*t, &args, "").unwrap();
        }
        self.b.build_return(None).unwrap();
    }

    /// The variants' names as private C strings, and a table of pointers to them.
    fn names(&self, name: &str, variants: &[IsaVariant]) -> GlobalValue<'ctx> {
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let ptrs: Vec<_> = variants
            .iter()
            .enumerate()
            .map(|(k, v)| {
                let s = self.ctx.const_string(v.isa.name.as_bytes(), true);
                let g = self
                    .m
                    .add_global(s.get_type(), None, &format!("{name}.isa_name{k}"));
                g.set_initializer(&s);
                g.set_constant(true);
                g.set_linkage(Linkage::Private);
                g.as_pointer_value().const_cast(i8p)
            })
            .collect();
        let arr = i8p.const_array(&ptrs);
        let t = self
            .m
            .add_global(arr.get_type(), None, &format!("{name}.isa_names"));
        t.set_initializer(&arr);
        t.set_constant(true);
        t.set_linkage(Linkage::Private);
        t
    }

    /// `const char *<name>_isa(void)`.
    fn isa_getter(&self, name: &str, select: FunctionValue<'ctx>, table: GlobalValue<'ctx>) {
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let f = self.function(
            &format!("{name}_isa"),
            i8p.fn_type(&[], false),
            Linkage::External,
        );
        self.b.position_at_end(self.block(f, "entry"));
        let k = self
            .b
            .build_call(select, &[], "")
            .unwrap()
            .try_as_basic_value()
            .basic()
            .unwrap()
            .into_int_value();
        let k = self
            .b
            .build_int_z_extend(k, self.ctx.i64_type(), "")
            .unwrap();
        // SAFETY: `k` is a valid index: `isa_select` returns one of the variants.
        let p = unsafe {
            self.b.build_in_bounds_gep(
                table.as_pointer_value(),
                &[self.ctx.i64_type().const_zero(), k],
                "",
            )
        }
        .unwrap();
        let s = self.b.build_load(p, "").unwrap();
        self.b.build_return(Some(&s)).unwrap();
    }

    /// `int <name>_force_isa(const char *isa)`.
    fn force(
        &self,
        name: &str,
        variants: &[IsaVariant],
        g: GlobalValue<'ctx>,
        runnable: FunctionValue<'ctx>,
    ) {
        let i8t = self.ctx.i8_type();
        let i32t = self.ctx.i32_type();
        let i8p = i8t.ptr_type(AddressSpace::default());
        let f = self.function(
            &format!("{name}_force_isa"),
            i32t.fn_type(&[i8p.into()], false),
            Linkage::External,
        );
        let s = f.get_nth_param(0).unwrap().into_pointer_value();
        let entry = self.block(f, "entry");
        let automatic = self.block(f, "automatic");
        let refuse = self.block(f, "refuse");
        let ok = Status::Ok as i32 as u64;
        let bad = Status::BadArgument as i32 as i64 as u64;
        self.b.position_at_end(entry);
        let null = self.b.build_is_null(s, "").unwrap();
        let mut next = self.block(f, "name0");
        self.b
            .build_conditional_branch(null, automatic, next)
            .unwrap();
        self.b.position_at_end(automatic);
        self.store_selected(g, self.i32(UNSELECTED));
        self.b.build_return(Some(&self.i32(ok))).unwrap();
        for (k, v) in variants.iter().enumerate() {
            let this = next;
            next = if k + 1 < variants.len() {
                self.block(f, &format!("name{}", k + 1))
            } else {
                refuse
            };
            // Byte by byte, stopping at the first difference (never reading past the caller's
            // NUL), then the NUL itself.
            self.b.position_at_end(this);
            let bytes: Vec<u8> = v.isa.name.bytes().chain([0]).collect();
            for (j, &c) in bytes.iter().enumerate() {
                // SAFETY: the bytes before `j` matched non-NUL bytes, so `s[j]` is in the string.
                let p = unsafe {
                    self.b.build_in_bounds_gep(
                        s,
                        &[self.ctx.i64_type().const_int(j as u64, false)],
                        "",
                    )
                }
                .unwrap();
                let got = self.b.build_load(p, "").unwrap().into_int_value();
                let same = self
                    .b
                    .build_int_compare(IntPredicate::EQ, got, i8t.const_int(c as u64, false), "")
                    .unwrap();
                let cont = self.block(f, &format!("name{k}_{}", j + 1));
                self.b.build_conditional_branch(same, cont, next).unwrap();
                self.b.position_at_end(cont);
            }
            let mask = self
                .b
                .build_call(runnable, &[], "")
                .unwrap()
                .try_as_basic_value()
                .basic()
                .unwrap()
                .into_int_value();
            let bit = self.b.build_and(mask, self.i32(1 << k), "").unwrap();
            let runs = self
                .b
                .build_int_compare(IntPredicate::NE, bit, self.i32(0), "")
                .unwrap();
            let store = self.block(f, &format!("force{k}"));
            self.b
                .build_conditional_branch(runs, store, refuse)
                .unwrap();
            self.b.position_at_end(store);
            self.store_selected(g, self.i32(k as u64));
            self.b.build_return(Some(&self.i32(ok))).unwrap();
        }
        self.b.position_at_end(refuse);
        self.b
            .build_return(Some(&i32t.const_int(bad, true)))
            .unwrap();
    }
}

/// Adds the dispatcher of model `name` to `module`, which already holds every variant's code:
/// a public `<name><suffix>` for each of `suffixes` (the variants' exports less their prefix),
/// `<name>_isa` and `<name>_force_isa`. The variants' own entry points become internal. Returns
/// the public symbols.
pub fn add_dispatcher<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    name: &str,
    variants: &[IsaVariant],
    suffixes: &[String],
    base: &Target,
) -> Vec<String> {
    let d = D {
        ctx,
        m: module,
        b: ctx.create_builder(),
        base,
    };
    let i32t = ctx.i32_type();
    let g = module.add_global(i32t, None, &format!("{name}.isa"));
    g.set_initializer(&i32t.const_int(UNSELECTED, true));
    g.set_linkage(Linkage::Internal);
    g.set_alignment(4);
    let mut exports = Vec::new();
    let runnable = if base.arch == crate::target::Arch::Aarch64 {
        let i64t = ctx.i64_type();
        let hwcap = module.add_global(i64t, None, &format!("{name}.hwcap"));
        hwcap.set_initializer(&i64t.const_zero());
        hwcap.set_linkage(Linkage::Internal);
        hwcap.set_alignment(8);
        d.hwcap_setter(name, hwcap, g);
        exports.push(format!("{name}_set_hwcap"));
        d.runnable_hwcap(name, variants, hwcap)
    } else {
        d.runnable(name, variants)
    };
    let select = d.select(name, g, runnable, variants.len());
    for suffix in suffixes {
        let targets: Vec<FunctionValue> = variants
            .iter()
            .map(|v| {
                module
                    .get_function(&format!("{}{suffix}", v.prefix))
                    .expect("every variant exports the same entry points")
            })
            .collect();
        let public = format!("{name}{suffix}");
        if suffix.starts_with("_set_") {
            d.broadcaster(&public, &targets);
        } else {
            d.forwarder(&public, &targets, g, select);
        }
        for t in targets {
            t.set_linkage(Linkage::Internal);
        }
        exports.push(public);
    }
    let table = d.names(name, variants);
    d.isa_getter(name, select, table);
    d.force(name, variants, g, runnable);
    exports.push(format!("{name}_isa"));
    exports.push(format!("{name}_force_isa"));
    exports
}
