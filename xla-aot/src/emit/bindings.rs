//! Rust bindings `<name>.rs` for `runtime_min::include_model!`, from `templates/bindings.rs.in`.
//!
//! Contract: a module named after the model with `ARENA_SIZE`, one `<TENSOR>_LEN` constant per
//! input and output, and a safe `run(&mut Arena<ARENA_SIZE>, &[T; N]..., &mut [T; M]...)` returning
//! `Result<(), Status>`. Deterministic.

use super::header::c_name;
use crate::arena::BufferPlan;
use crate::ir::{DType, Module};

const TEMPLATE: &str = include_str!("../../../templates/bindings.rs.in");

fn rust_type(d: DType) -> &'static str {
    match d {
        DType::I32 => "i32",
        DType::F32 => "f32",
        _ => "u8",
    }
}

/// Renders the bindings of `m`.
pub fn render(m: &Module, plan: &BufferPlan) -> String {
    let c = &m.entry;
    let mut consts = String::new();
    let (mut ffi, mut params, mut args) = (Vec::new(), Vec::new(), Vec::new());
    let mut tensor = |name: &str, dtype: DType, n: usize, output: bool| {
        let cn = c_name(name);
        let len = format!("{}_LEN", cn.to_ascii_uppercase());
        consts.push_str(&format!(
            "    /// Elements of `{name}`.\n    pub const {len}: usize = {n};\n"
        ));
        let t = rust_type(dtype);
        if output {
            ffi.push(format!("{cn}: *mut {t}"));
            params.push(format!("{cn}: &mut [{t}; {len}]"));
            args.push(format!("{cn}.as_mut_ptr()"));
        } else {
            ffi.push(format!("{cn}: *const {t}"));
            params.push(format!("{cn}: &[{t}; {len}]"));
            args.push(format!("{cn}.as_ptr()"));
        }
    };
    for p in c.parameters() {
        let s = &c.inst(p).shape;
        tensor(&c.inst(p).name, s.dtype, s.element_count(), false);
    }
    for o in &c.outputs {
        let s = &c.inst(o.value).shape;
        tensor(&o.name, s.dtype, s.element_count(), true);
    }
    TEMPLATE
        .replace("{{name}}", &m.name)
        .replace("{{version}}", env!("CARGO_PKG_VERSION"))
        .replace("{{target}}", "see the manifest")
        .replace("{{arena_size}}", &plan.arena_size.to_string())
        .replace("{{consts}}", &consts)
        .replace("{{ffi_params}}", &ffi.join(", "))
        .replace("{{params}}", &params.join(", "))
        .replace("{{args}}", &args.join(", "))
}
