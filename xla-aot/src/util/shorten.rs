//! Names echoed in messages, cut to a readable length.
//!
//! Contract: [`shorten`] returns a name of at most [`MAX_ECHOED_NAME`] characters unchanged and
//! otherwise its first [`MAX_ECHOED_NAME`] characters followed by `…` and the full length, so a
//! 1 MB model or tensor name cannot flood a terminal or a log; cuts fall on character boundaries.
//! Pure: the same name always gives the same text.

use std::borrow::Cow;

/// Most characters of a name a message repeats: enough to tell apart names that share a long
/// prefix (exporters' scoped names such as `/model/layers.11/self_attn/q_proj/MatMul_output_0`
/// run to 50-70 characters), short enough to keep a message on a few lines.
pub const MAX_ECHOED_NAME: usize = 96;

/// `name`, or its head and `… (N characters)` when it is longer than [`MAX_ECHOED_NAME`].
pub fn shorten(name: &str) -> Cow<'_, str> {
    match name.char_indices().nth(MAX_ECHOED_NAME) {
        None => Cow::Borrowed(name),
        Some((cut, _)) => Cow::Owned(format!(
            "{}… ({} characters)",
            &name[..cut],
            name.chars().count()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_short_ones_kept() {
        assert_eq!(shorten("x"), "x");
        let long = "é".repeat(1_000_000);
        let s = shorten(&long);
        assert!(s.ends_with("… (1000000 characters)"), "{s}");
        let tail = "… (1000000 characters)".chars().count();
        assert_eq!(s.chars().count(), MAX_ECHOED_NAME + tail);
    }
}
