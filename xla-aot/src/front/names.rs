//! Names every front end gives: the model name (a C identifier that prefixes every exported
//! symbol) and tensor names.
//!
//! Contract: one rule for all front ends, the one of `util::c_name`. A name the user writes (a
//! spec's `name`) must already be a valid model name ([`check_model_name`] says why not and what
//! would be); a name taken from a file (an imported model's file stem, its graph inputs) is made
//! one with [`c_name::model_name`].

use crate::util::c_name::{self, MAX_MODEL_NAME_LEN, is_c_identifier};
use std::path::Path;

/// What a model name must be, for the `expected:` line of a bad-name error.
pub fn model_name_rule() -> String {
    format!(
        "a C identifier ([A-Za-z_][A-Za-z0-9_]*, at most {MAX_MODEL_NAME_LEN} characters), not a keyword, a C standard header's name or one starting with `xla_aot`: it prefixes every exported symbol and names the header"
    )
}

/// Checks a model name the user wrote; the error is the hint (a valid name close to it).
pub fn check_model_name(name: &str) -> Result<(), String> {
    if !is_c_identifier(name) || name.len() > MAX_MODEL_NAME_LEN {
        Err(format!("e.g. `{}`", c_name::model_name(name)))
    } else if let Some(why) = c_name::reserved_model_name(name) {
        Err(format!("{why}; e.g. `{}`", c_name::model_name(name)))
    } else {
        Ok(())
    }
}

/// Whether `s` can name a tensor of a spec: `[A-Za-z_][A-Za-z0-9_.]*` (dots for `fc1.weight`).
pub fn is_tensor_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// The model name of a file given directly: its stem without `.hlo`/`.txt`/`.onnx`/`.tflite`,
/// sanitised.
pub fn model_name_from_path(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let lower = name.to_ascii_lowercase();
    let mut stem = name.as_str();
    for ext in [".hlo.txt", ".hlo", ".onnx", ".tflite"] {
        if lower.ends_with(ext) {
            stem = &name[..name.len() - ext.len()];
            break;
        }
    }
    if stem.is_empty() {
        "model".into()
    } else {
        c_name::model_name(stem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_states_the_limit() {
        assert!(model_name_rule().contains(&format!("at most {MAX_MODEL_NAME_LEN} characters")));
        assert_eq!(check_model_name("m1"), Ok(()));
        assert_eq!(check_model_name("1m"), Err("e.g. `_1m`".into()));
    }
}
