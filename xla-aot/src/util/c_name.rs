//! The one C-identifier rule of the compiler: how any name (a model, a tensor, an HLO
//! instruction) becomes part of a C symbol or parameter.
//!
//! Contract: every character outside `[A-Za-z0-9_]` becomes `_` ([`c_chars`]); on top of that,
//! [`model_name`] makes a valid symbol prefix (a leading `_` where the name starts with a digit,
//! at most [`MAX_MODEL_NAME_LEN`] characters) and [`c_name`] a valid parameter name (a trailing
//! `_` after a leading digit or a reserved word). Pure functions: the same name always maps to
//! the same identifier, which keeps generated code deterministic.

/// Longest model name: it prefixes every exported C symbol, and some linkers and tools truncate or
/// mangle very long identifiers.
pub const MAX_MODEL_NAME_LEN: usize = 64;

/// C keywords and names a parameter may not take.
const RESERVED: &[&str] = &[
    "arena",
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "bool",
    "true",
    "false",
    "class",
    "new",
    "delete",
    "this",
    "template",
    "namespace",
    "operator",
];

/// Whether `s` is a C identifier (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn is_c_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `s` with every character outside `[A-Za-z0-9_]` replaced by `_` (kernel symbol suffixes).
pub fn c_chars(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A model name made from any string (a file stem, an imported graph's name): [`c_chars`], at
/// most [`MAX_MODEL_NAME_LEN`] characters, with a leading `_` where it would not start a C
/// identifier.
pub fn model_name(s: &str) -> String {
    let mut out: String = c_chars(s).chars().take(MAX_MODEL_NAME_LEN).collect();
    if !out.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        out.insert(0, '_');
        out.truncate(MAX_MODEL_NAME_LEN);
    }
    out
}

/// A C identifier for a tensor name (`conv.weight` → `conv_weight`): [`c_chars`], with a trailing
/// `_` after a leading digit or a reserved word.
pub fn c_name(name: &str) -> String {
    let mut s = c_chars(name);
    if s.starts_with(|c: char| c.is_ascii_digit()) || RESERVED.contains(&s.as_str()) {
        s.push('_');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_three_uses() {
        assert_eq!(c_chars("conv.weight-1"), "conv_weight_1");
        assert_eq!(model_name("3d-net"), "_3d_net");
        assert_eq!(model_name(&"a".repeat(100)).len(), MAX_MODEL_NAME_LEN);
        assert_eq!(c_name("2x"), "2x_");
        assert_eq!(c_name("float"), "float_");
        assert_eq!(c_name("x.y"), "x_y");
        assert!(is_c_identifier("_a1") && !is_c_identifier("1a") && !is_c_identifier(""));
    }
}
