//! The C identifiers of a model's inputs and outputs in its header and bindings, unique after
//! sanitising.
//!
//! Contract: [`c_idents`] gives every input and output (inputs first, in entry order) the
//! identifier [`c_name`] makes of its name, unless an earlier one already took that identifier
//! ignoring case: then it takes the first free `<ident>_2`, `<ident>_3`, .... Case is ignored
//! because the header's macros (`<NAME>_INPUT_<IDENT>_SHAPE`) and the Rust bindings' constants
//! (`<IDENT>_LEN`) upper-case the identifier; parameters `a.b` and `a_b`, `int` and `int_`, `x` and
//! `X` would otherwise collide and the header would not compile. Each renamed one is listed in
//! [`CIdents::renames`], which the header prints as a comment. Deterministic; a model whose
//! identifiers are already distinct gets exactly [`c_name`]'s identifiers.

use crate::ir::Module;
use crate::util::c_name::c_name;
use std::collections::HashMap;

/// One input or output whose identifier took a suffix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rename {
    /// `input` or `output`.
    pub kind: &'static str,
    /// Its name in the model.
    pub name: String,
    /// The identifier it collided on.
    pub plain: String,
    /// The earlier input or output that has that identifier (ignoring case): `input x`.
    pub holder: String,
    /// The identifier it has.
    pub ident: String,
}

/// The identifiers of a model's inputs and outputs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CIdents {
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub renames: Vec<Rename>,
}

impl CIdents {
    /// The header's comment listing the renames (empty when there are none).
    pub fn comment(&self) -> String {
        if self.renames.is_empty() {
            return String::new();
        }
        let lines: Vec<String> = self
            .renames
            .iter()
            .map(|r| {
                format!(
                    " *   {} `{}` is `{}` (`{}` collides with {})",
                    r.kind,
                    comment_safe(&r.name),
                    r.ident,
                    r.plain,
                    r.holder
                )
            })
            .collect();
        format!(
            "\n/* Renamed: these names collide once made C identifiers (case ignored, for the macros),\n * so the later ones take a suffix:\n{}\n */",
            lines.join("\n")
        )
    }
}

/// `name` shortened, with every character but `[A-Za-z0-9._:/-]`, space, parentheses and the
/// ellipsis of a shortened name as `_`: safe inside a C comment
/// (no `*/`, no trigraph `??/`, no line break).
fn comment_safe(name: &str) -> String {
    crate::util::shorten::shorten(name)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._:/- ()".contains(c) || c == '…' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The identifiers of `m`'s inputs and outputs (see the module doc).
pub fn c_idents(m: &Module) -> CIdents {
    let c = &m.entry;
    // Upper-cased identifier → who has it (`input x`).
    let mut taken: HashMap<String, String> = HashMap::new();
    let mut out = CIdents::default();
    let mut ident = |kind: &'static str, name: &str, renames: &mut Vec<Rename>| {
        let plain = c_name(name);
        let mut id = plain.clone();
        let mut n = 2;
        while taken.contains_key(&id.to_ascii_uppercase()) {
            id = format!("{plain}_{n}");
            n += 1;
        }
        if id != plain {
            renames.push(Rename {
                kind,
                name: name.to_string(),
                holder: taken[&plain.to_ascii_uppercase()].clone(),
                plain,
                ident: id.clone(),
            });
        }
        taken.insert(
            id.to_ascii_uppercase(),
            format!("{kind} `{}`", comment_safe(name)),
        );
        id
    };
    for &p in &c.parameters() {
        let id = ident("input", &c.inst(p).name, &mut out.renames);
        out.inputs.push(id);
    }
    for o in &c.outputs {
        let id = ident("output", &o.name, &mut out.renames);
        out.outputs.push(id);
    }
    out
}
