//! Diagnostics of every front end: errors pointing into the user's file.
//!
//! Contract: every [`SpecError`] names the file and, when known, the 1-based line and column of the
//! offending node (a YAML node of a spec, an instruction of HLO text), or, for a binary file
//! (ONNX), the node it is about; it says what was found, what was expected and how to fix it
//! where a hint helps. `Display` renders every front end's errors the same way: the message, an
//! `  --> file:line:col` line (`  --> file: node ...` for ONNX), the source line with a caret, then
//! `= expected` and `= hint` lines (see `docs/spec.md`).

use std::fmt;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// A 1-based position in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecErrorKind {
    /// A file could not be read.
    #[error("cannot read {path}: {reason}")]
    Io { path: String, reason: String },
    /// YAML syntax or a value of the wrong type.
    #[error("{0}")]
    Syntax(String),
    /// A key the spec format does not have.
    #[error("unknown key `{key}` in {context}")]
    UnknownKey { key: String, context: String },
    /// A required key is absent.
    #[error("missing key `{key}` in {context}")]
    MissingKey { key: String, context: String },
    /// An op name that does not exist.
    #[error("unknown op `{0}`")]
    UnknownOp(String),
    /// A tensor name nothing defines.
    #[error("unknown tensor `{0}`")]
    UnknownTensor(String),
    /// A tensor used before the op that defines it.
    #[error("tensor `{name}` is used before op `{name}` defines it (line {line})")]
    UseBeforeDefinition { name: String, line: usize },
    /// A name defined twice.
    #[error("duplicate tensor name `{name}` (first defined at line {first_line})")]
    Duplicate { name: String, first_line: usize },
    /// A name that is not an identifier.
    #[error("invalid name `{0}`")]
    BadName(String),
    /// Wrong number of op inputs.
    #[error("op `{op}` ({kind}) takes {expected} input(s), found {found}")]
    Arity {
        op: String,
        kind: String,
        expected: String,
        found: usize,
    },
    /// Operand shapes that do not fit the op.
    #[error("shape mismatch in op `{op}` ({kind}): {detail}")]
    Shape {
        op: String,
        kind: String,
        detail: String,
    },
    /// An attribute with an invalid value.
    #[error("bad attribute `{attr}` of op `{op}`: {detail}")]
    BadAttribute {
        op: String,
        attr: String,
        detail: String,
    },
    /// A required attribute is absent.
    #[error("op `{op}` ({kind}) needs the attribute `{attr}`")]
    MissingAttribute {
        op: String,
        kind: String,
        attr: String,
    },
    /// An attribute the op does not take.
    #[error("unknown attribute `{attr}` for op `{op}` ({kind})")]
    UnknownAttribute {
        op: String,
        kind: String,
        attr: String,
    },
    /// A weight file that is corrupt, or a weight that does not fit its op.
    #[error("{0}")]
    Weight(String),
    /// A tensor larger than the compiler supports.
    #[error("dimension overflow: {0}")]
    DimensionOverflow(String),
    /// An output name no op produces.
    #[error("output `{0}` is never produced by an op")]
    OutputNeverProduced(String),
    /// A dtype that is known but not supported yet.
    #[error("dtype `{0}` is not supported yet")]
    UnsupportedDtype(String),
    /// Anything else that is invalid in a spec.
    #[error("{0}")]
    Invalid(String),
}

/// Longest source line quoted whole under an error; a longer one is cut to
/// [`QUOTED_CONTEXT_CHARS`] either side of the caret (a 100 KB line would flood the terminal).
const MAX_QUOTED_LINE_CHARS: usize = 160;
const QUOTED_CONTEXT_CHARS: usize = 60;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Inner {
    file: PathBuf,
    pos: Option<Pos>,
    /// Where in a binary file (ONNX): `node #3 `conv1` (Conv)`; printed instead of a line.
    node: Option<String>,
    source_line: Option<String>,
    /// The caret's column in `source_line` (1-based; differs from `pos` when a long line is cut).
    caret_column: usize,
    kind: SpecErrorKind,
    expected: Option<String>,
    hint: Option<String>,
}

/// An error in a model spec, with its location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError(Box<Inner>);

impl SpecError {
    /// An error of `kind` in `file`, at no particular position.
    pub fn new(file: &Path, kind: SpecErrorKind) -> SpecError {
        SpecError(Box::new(Inner {
            file: file.to_path_buf(),
            pos: None,
            node: None,
            source_line: None,
            caret_column: 0,
            kind,
            expected: None,
            hint: None,
        }))
    }

    /// Sets the position and the source text it points into (for the caret line).
    pub fn at(mut self, pos: Option<Pos>, source: &str) -> SpecError {
        self.0.pos = pos;
        self.0.caret_column = pos.map_or(0, |p| p.column);
        self.0.source_line = pos.and_then(|p| {
            let line = source.lines().nth(p.line.wrapping_sub(1))?;
            if line.chars().count() <= MAX_QUOTED_LINE_CHARS {
                return Some(line.to_string());
            }
            // A long line (a minified or hostile file) is quoted around the caret only.
            let skip = p.column.saturating_sub(1 + QUOTED_CONTEXT_CHARS);
            let window: String = line
                .chars()
                .skip(skip)
                .take(2 * QUOTED_CONTEXT_CHARS)
                .collect();
            let cut_end = line.chars().count() > skip + 2 * QUOTED_CONTEXT_CHARS;
            self.0.caret_column = p.column - skip + usize::from(skip > 0);
            Some(format!(
                "{}{window}{}",
                if skip > 0 { "…" } else { "" },
                if cut_end { "…" } else { "" }
            ))
        });
        self
    }

    /// Places the error at a node of a binary file (`node #3 `conv1` (Conv)`), which has no lines.
    pub fn in_node(mut self, node: impl Into<String>) -> SpecError {
        self.0.node = Some(node.into());
        self
    }

    /// Adds what was expected.
    pub fn expected(mut self, e: impl Into<String>) -> SpecError {
        self.0.expected = Some(e.into());
        self
    }

    /// Adds a hint on how to fix it.
    pub fn hint(mut self, h: impl Into<String>) -> SpecError {
        self.0.hint = Some(h.into());
        self
    }

    /// Adds a hint when there is one.
    pub fn maybe_hint(self, h: Option<String>) -> SpecError {
        match h {
            Some(h) => self.hint(h),
            None => self,
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> &SpecErrorKind {
        &self.0.kind
    }

    /// The file the error is in.
    pub fn file(&self) -> &Path {
        &self.0.file
    }

    /// The position, if known.
    pub fn pos(&self) -> Option<Pos> {
        self.0.pos
    }

    /// The node of a binary file, if the error is about one.
    pub fn node(&self) -> Option<&str> {
        self.0.node.as_deref()
    }

    /// The hint, if any.
    pub fn hint_text(&self) -> Option<&str> {
        self.0.hint.as_deref()
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.0;
        writeln!(f, "error: {}", e.kind)?;
        match (e.pos, &e.node) {
            (Some(p), _) => writeln!(f, "  --> {}:{}:{}", e.file.display(), p.line, p.column)?,
            (None, Some(node)) => writeln!(f, "  --> {}: {node}", e.file.display())?,
            (None, None) => writeln!(f, "  --> {}", e.file.display())?,
        }
        if let (Some(p), Some(src)) = (e.pos, &e.source_line) {
            let num = p.line.to_string();
            let pad = " ".repeat(num.len());
            // Tabs keep their width in the caret line so the caret lines up.
            let lead: String = src
                .chars()
                .take(e.caret_column.saturating_sub(1))
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            writeln!(f, " {pad} |")?;
            writeln!(f, " {num} | {src}")?;
            writeln!(f, " {pad} | {lead}^")?;
        }
        if let Some(x) = &e.expected {
            writeln!(f, "  = expected: {x}")?;
        }
        if let Some(h) = &e.hint {
            writeln!(f, "  = hint: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SpecError {}

/// A serde_yaml error as a positioned syntax error, and its message without serde_yaml's
/// " at line L column C" (the position is printed separately).
pub fn yaml_error(file: &Path, source: &str, e: &serde_yaml::Error) -> (SpecError, String) {
    let pos = e.location().map(|l| Pos {
        line: l.line(),
        column: l.column(),
    });
    let msg = e.to_string();
    let msg = match msg.find(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg,
    };
    (
        SpecError::new(file, SpecErrorKind::Syntax(msg.clone())).at(pos, source),
        msg,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_stays_small() {
        // Results carrying SpecError are returned through every lowering function.
        assert!(std::mem::size_of::<SpecError>() <= 8);
    }

    #[test]
    fn a_node_of_a_binary_file_takes_the_place_of_the_line() {
        let e = SpecError::new(Path::new("m.onnx"), SpecErrorKind::Invalid("boom".into()))
            .in_node("node #1 `my_mod` (Mod)")
            .hint("h");
        assert_eq!(
            e.to_string(),
            "error: boom\n  --> m.onnx: node #1 `my_mod` (Mod)\n  = hint: h\n"
        );
    }

    #[test]
    fn renders_caret_under_the_column() {
        let src = "name: m\nops:\n  - {name: y, op: rleu}\n";
        let e = SpecError::new(Path::new("m.yaml"), SpecErrorKind::UnknownOp("rleu".into()))
            .at(
                Some(Pos {
                    line: 3,
                    column: 20,
                }),
                src,
            )
            .hint("did you mean `relu`?");
        let text = e.to_string();
        assert!(text.contains("--> m.yaml:3:20"), "{text}");
        assert!(
            text.contains(" 3 |   - {name: y, op: rleu}\n   |                    ^"),
            "{text}"
        );
    }
}
