//! The one C-identifier rule of the compiler: how any name (a model, a tensor, an HLO
//! instruction) becomes part of a C symbol or parameter.
//!
//! Contract: every character outside `[A-Za-z0-9_]` becomes `_` ([`c_chars`]); on top of that,
//! [`identifier`] makes a valid identifier of at most [`MAX_MODEL_NAME_LEN`] characters (a
//! leading `_` where the name starts with a digit), [`model_name`] one that is also no keyword,
//! C standard header name or runtime name ([`reserved_model_name`]), and [`c_name`] a valid
//! parameter name (a leading `_` before a digit, a trailing `_` after a reserved word). Pure functions: the
//! same name always maps to the same identifier, which keeps generated code deterministic.

/// Longest model name: it prefixes every exported C symbol, and some linkers and tools truncate or
/// mangle very long identifiers.
pub const MAX_MODEL_NAME_LEN: usize = 64;

/// The keywords of C89/C11 without an underscore: neither a parameter nor a model may take one.
const C_KEYWORDS: &[&str] = &[
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
    "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
    "union", "unsigned", "void", "volatile", "while",
];

/// Names a parameter may not take besides [`C_KEYWORDS`]: the entry points' own `arena`, and the
/// words C23 and C++ reserve that a header included from C++ would break on.
const PARAMETER_RESERVED: &[&str] = &[
    "arena",
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

/// Keywords of C (C11 and C23) besides [`C_KEYWORDS`], which a model name may not be either (it
/// names the header and prefixes every symbol and macro). Rust keywords are not refused: only the
/// optional Rust bindings (`pub mod <name>`) would need them avoided.
const MODEL_KEYWORDS: &[&str] = &[
    "_Alignas",
    "_Alignof",
    "_Atomic",
    "_Bool",
    "_Complex",
    "_Generic",
    "_Imaginary",
    "_Noreturn",
    "_Static_assert",
    "_Thread_local",
    "alignas",
    "alignof",
    "bool",
    "constexpr",
    "false",
    "nullptr",
    "static_assert",
    "thread_local",
    "true",
    "typeof",
    "typeof_unqual",
    "_BitInt",
    "_Decimal32",
    "_Decimal64",
    "_Decimal128",
];

/// Headers of the C standard library (C11 and C23): a model named `stdint` writes `stdint.h`,
/// which shadows `<stdint.h>` wherever the output directory is on the include path (compared
/// ignoring case, for case-insensitive file systems).
const STANDARD_HEADERS: &[&str] = &[
    "assert",
    "complex",
    "ctype",
    "errno",
    "fenv",
    "float",
    "inttypes",
    "iso646",
    "limits",
    "locale",
    "math",
    "setjmp",
    "signal",
    "stdalign",
    "stdarg",
    "stdatomic",
    "stdbit",
    "stdbool",
    "stdckdint",
    "stddef",
    "stdint",
    "stdio",
    "stdlib",
    "stdnoreturn",
    "string",
    "tgmath",
    "threads",
    "time",
    "uchar",
    "wchar",
    "wctype",
];

/// The prefix of runtime-min's names (`xla_aot_runtime.h`, its include guard `XLA_AOT_RUNTIME_H`,
/// the `XLA_AOT_*` macros every model header shares).
pub const RUNTIME_PREFIX: &str = "xla_aot";

/// Suffix that [`model_name`] appends to a name [`reserved_model_name`] refuses.
pub const RESERVED_MODEL_SUFFIX: &str = "_model";

/// Why `name` cannot name a model though it is a C identifier, or `None` when it can.
pub fn reserved_model_name(name: &str) -> Option<String> {
    if C_KEYWORDS.contains(&name) || MODEL_KEYWORDS.contains(&name) {
        return Some(format!("`{name}` is a C keyword"));
    }
    if let Some(h) = STANDARD_HEADERS
        .iter()
        .find(|h| h.eq_ignore_ascii_case(name))
    {
        return Some(format!(
            "its header `{name}.h` would shadow the C standard header <{h}.h>"
        ));
    }
    if name
        .get(..RUNTIME_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(RUNTIME_PREFIX))
    {
        return Some(format!(
            "names starting with `{RUNTIME_PREFIX}` belong to the runtime (xla_aot_runtime.h and its macros)"
        ));
    }
    None
}

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

/// An identifier made from any string (an imported graph's tensor names): [`c_chars`], at most
/// [`MAX_MODEL_NAME_LEN`] characters, with a leading `_` where it would not start a C
/// identifier.
pub fn identifier(s: &str) -> String {
    let mut out: String = c_chars(s).chars().take(MAX_MODEL_NAME_LEN).collect();
    if !out.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        out.insert(0, '_');
        out.truncate(MAX_MODEL_NAME_LEN);
    }
    out
}

/// A model name made from any string (a file stem): [`identifier`], then
/// [`RESERVED_MODEL_SUFFIX`] after a name [`reserved_model_name`] refuses (`stdint` →
/// `stdint_model`; an `xla_aot...` name becomes `_xla_aot...`).
pub fn model_name(s: &str) -> String {
    let mut out = identifier(s);
    if reserved_model_name(&out).is_some() {
        if out.len() >= RUNTIME_PREFIX.len()
            && out[..RUNTIME_PREFIX.len()].eq_ignore_ascii_case(RUNTIME_PREFIX)
        {
            out.insert(0, '_');
            out.truncate(MAX_MODEL_NAME_LEN);
        } else {
            // Keywords and header names are short: the suffix always fits.
            out.push_str(RESERVED_MODEL_SUFFIX);
        }
    }
    out
}

/// A C identifier for a tensor name (`conv.weight` → `conv_weight`): [`c_chars`], with a leading
/// `_` where it would start with a digit (or be empty) and a trailing `_` after a reserved word.
pub fn c_name(name: &str) -> String {
    let mut s = c_chars(name);
    if !s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        s.insert(0, '_');
    }
    if C_KEYWORDS.contains(&s.as_str()) || PARAMETER_RESERVED.contains(&s.as_str()) {
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
        assert_eq!(c_name("2x"), "_2x");
        assert!(is_c_identifier(&c_name("")));
        assert_eq!(c_name("float"), "float_");
        assert_eq!(c_name("x.y"), "x_y");
        assert_eq!(model_name("stdint"), "stdint_model");
        assert_eq!(model_name("Math"), "Math_model");
        assert_eq!(model_name("xla_aot_runtime"), "_xla_aot_runtime");
        assert_eq!(model_name("register"), "register_model");
        assert_eq!(model_name("dyn"), "dyn");
        assert_eq!(identifier("float"), "float");
        assert!(reserved_model_name("model").is_none());
        assert!(is_c_identifier("_a1") && !is_c_identifier("1a") && !is_c_identifier(""));
    }
}
