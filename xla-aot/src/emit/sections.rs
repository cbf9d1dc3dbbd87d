//! Where a library's weights go: the name of the ELF section that holds them.
//!
//! Contract: [`weights_section`] is the section every weight of a model is placed in, both the
//! LLVM constants of the code object and the library's data object (`data_object.rs`): the name
//! given (`--weights-section`), else `.rodata.xla_aot.<model>` on a microcontroller target (a
//! linker script can then place them in a flash bank of their own; GNU ld's default scripts put
//! `.rodata.*` with the read-only data), else `None` (`.rodata`, as before). [`check_section`]
//! refuses a name a linker script could not name.

use crate::target::Target;

/// The prefix of a microcontroller library's weights section; the model's name follows.
pub const MCU_WEIGHTS_PREFIX: &str = ".rodata.xla_aot.";

/// Longest section name accepted (GNU as and ld have no limit; past this it is a mistake).
pub const MAX_SECTION_NAME: usize = 128;

/// The weights' section of model `model` for `target`, `given` overriding the default.
pub fn weights_section(model: &str, target: &Target, given: Option<&str>) -> Option<String> {
    match given {
        Some(s) => Some(s.to_string()),
        None => target
            .arch
            .is_microcontroller()
            .then(|| format!("{MCU_WEIGHTS_PREFIX}{model}")),
    }
}

/// Checks a section name given on the command line: 1 to [`MAX_SECTION_NAME`] characters of
/// `A-Z a-z 0-9 . _ $`, so that a linker script names it unquoted. Returns why not.
pub fn check_section(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_SECTION_NAME {
        return Err(format!(
            "section name `{name}` must have 1 to {MAX_SECTION_NAME} characters"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '$')))
    {
        return Err(format!(
            "section name `{name}` holds `{c}`; use letters, digits, `.`, `_` and `$` \
             (e.g. `.rodata.weights`)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_only_on_microcontrollers_and_names_are_checked() {
        let m4 = Target::resolve("cortex-m4f").unwrap();
        let x86 = Target::resolve("x86_64").unwrap();
        assert_eq!(
            weights_section("mlp", &m4, None).as_deref(),
            Some(".rodata.xla_aot.mlp")
        );
        assert_eq!(weights_section("mlp", &x86, None), None);
        assert_eq!(
            weights_section("mlp", &x86, Some(".w")).as_deref(),
            Some(".w")
        );
        assert!(check_section(".rodata.flash2").is_ok());
        assert!(check_section("").is_err());
        assert!(check_section(".a b").unwrap_err().contains("` `"));
    }
}
