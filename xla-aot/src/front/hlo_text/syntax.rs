//! The syntax of XLA's HLO module text, as XLA prints it (`HloModule::ToString`, JAX's
//! `lower(...).as_text(dialect="hlo")`, files from `--xla_dump_to`).
//!
//! Contract: [`parse_file`] splits the text into computations of raw instructions (name, shape,
//! opcode, the text of each operand, attributes as unparsed text) with 1-based line and column of
//! every part, or a [`SyntaxError`] at a position. It knows nothing of opcode semantics: the
//! translator (`translate/`) interprets opcodes and attributes. Both printing styles are read:
//! names with or without `%`, operands with or without their shapes, computation signatures
//! (`ENTRY %main (x: f32[2]) -> f32[2] {`) or none, `/*index=5*/` comments, layouts and tiling in
//! braces (skipped).

/// Deepest nesting of tuple types (XLA's own tuples nest a level or two; a deeper one is a
/// corrupt or hostile file, and parsing it must not exhaust the stack).
pub const MAX_TUPLE_DEPTH: usize = 64;

/// A position-carrying error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// An array or tuple type as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawShape {
    /// `f32[2,3]{1,0}`: the element type name and the dims (the layout is dropped).
    Array { dtype: String, dims: Vec<usize> },
    /// `(f32[2], s32[2])`.
    Tuple(Vec<RawShape>),
}

/// `key=value` after the operand list; `value` is the text, braces included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawAttr {
    pub key: String,
    pub value: String,
    pub column: usize,
}

/// One instruction line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawInst {
    pub name: String,
    pub line: usize,
    pub column: usize,
    pub is_root: bool,
    pub shape: RawShape,
    pub opcode: String,
    pub opcode_column: usize,
    /// The text between the parentheses (a literal for `constant`, an index for `parameter`).
    pub args_text: String,
    /// Operand names (without `%` and without the shapes older printers put before them), with
    /// their columns.
    pub operands: Vec<(String, usize)>,
    pub attrs: Vec<RawAttr>,
}

impl RawInst {
    /// The attribute `key`, if present.
    pub fn attr(&self, key: &str) -> Option<&RawAttr> {
        self.attrs.iter().find(|a| a.key == key)
    }
}

/// One computation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawComputation {
    pub name: String,
    pub line: usize,
    pub is_entry: bool,
    pub insts: Vec<RawInst>,
}

impl RawComputation {
    /// The root: the instruction marked `ROOT`, else the last one.
    pub fn root(&self) -> Option<&RawInst> {
        self.insts
            .iter()
            .find(|i| i.is_root)
            .or_else(|| self.insts.last())
    }
}

/// A parsed module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawModule {
    pub name: String,
    pub computations: Vec<RawComputation>,
}

impl RawModule {
    /// The computation called `name`.
    pub fn computation(&self, name: &str) -> Option<&RawComputation> {
        self.computations.iter().find(|c| c.name == name)
    }
}

type PResult<T> = Result<T, SyntaxError>;

/// Removes `/* ... */` comments outside string literals, keeping columns (comments become spaces).
fn strip_comments(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let (mut i, mut in_str) = (0, false);
    while i < chars.len() {
        let c = chars[i];
        if in_str {
            out.push(c);
            if c == '\\' && i + 1 < chars.len() {
                out.push(chars[i + 1]);
                i += 1;
            } else if c == '"' {
                in_str = false;
            }
        } else if c == '"' {
            in_str = true;
            out.push(c);
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            let mut j = i + 2;
            while j + 1 < chars.len() && !(chars[j] == '*' && chars[j + 1] == '/') {
                j += 1;
            }
            let end = (j + 2).min(chars.len());
            out.extend(std::iter::repeat_n(' ', end - i));
            i = end;
            continue;
        } else {
            out.push(c);
        }
        i += 1;
    }
    out
}

/// A cursor over one line.
struct Line<'a> {
    chars: Vec<char>,
    pos: usize,
    line: usize,
    _src: &'a str,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

impl<'a> Line<'a> {
    fn new(text: &'a str, line: usize) -> Line<'a> {
        Line {
            chars: text.chars().collect(),
            pos: 0,
            line,
            _src: text,
        }
    }

    fn err<T>(&self, message: impl Into<String>) -> PResult<T> {
        Err(SyntaxError {
            line: self.line,
            column: self.pos + 1,
            message: message.into(),
        })
    }

    fn ws(&mut self) {
        while self.pos < self.chars.len() && self.chars[self.pos].is_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.ws();
        self.chars.get(self.pos).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char, what: &str) -> PResult<()> {
        if self.eat(c) {
            Ok(())
        } else {
            let found = self
                .chars
                .get(self.pos)
                .map_or("the end of the line".to_string(), |c| format!("`{c}`"));
            self.err(format!("expected `{c}` {what}, found {found}"))
        }
    }

    fn column(&mut self) -> usize {
        self.ws();
        self.pos + 1
    }

    /// A name (`%` optional).
    fn name(&mut self, what: &str) -> PResult<String> {
        self.ws();
        if self.chars.get(self.pos) == Some(&'%') {
            self.pos += 1;
        }
        let start = self.pos;
        while self.pos < self.chars.len() && is_name_char(self.chars[self.pos]) {
            self.pos += 1;
        }
        if start == self.pos {
            return self.err(format!("expected {what}"));
        }
        Ok(self.chars[start..self.pos].iter().collect())
    }

    /// Text up to the bracket matching the one at the cursor, exclusive; the cursor ends after it.
    /// Quotes are respected.
    fn balanced(&mut self, open: char, close: char) -> PResult<String> {
        self.ws();
        let start_col = self.pos;
        if self.chars.get(self.pos) != Some(&open) {
            return self.err(format!("expected `{open}`"));
        }
        let mut depth = 0usize;
        let mut in_str = false;
        let mut i = self.pos;
        while i < self.chars.len() {
            let c = self.chars[i];
            if in_str {
                if c == '\\' {
                    i += 1;
                } else if c == '"' {
                    in_str = false;
                }
            } else if c == '"' {
                in_str = true;
            } else if c == open {
                depth += 1;
            } else if c == close {
                depth -= 1;
                if depth == 0 {
                    let text: String = self.chars[start_col + 1..i].iter().collect();
                    self.pos = i + 1;
                    return Ok(text);
                }
            }
            i += 1;
        }
        self.err(format!("`{open}` is never closed on this line"))
    }

    fn shape(&mut self) -> PResult<RawShape> {
        self.shape_at(0)
    }

    fn shape_at(&mut self, depth: usize) -> PResult<RawShape> {
        if self.peek() == Some('(') {
            if depth >= MAX_TUPLE_DEPTH {
                return self.err(format!(
                    "tuple types nest deeper than {MAX_TUPLE_DEPTH} levels"
                ));
            }
            self.pos += 1;
            let mut elems = Vec::new();
            if !self.eat(')') {
                loop {
                    elems.push(self.shape_at(depth + 1)?);
                    if self.eat(')') {
                        break;
                    }
                    self.expect(',', "between tuple element types")?;
                }
            }
            return Ok(RawShape::Tuple(elems));
        }
        self.ws();
        let start = self.pos;
        while self.pos < self.chars.len() && self.chars[self.pos].is_ascii_alphanumeric() {
            self.pos += 1;
        }
        if start == self.pos {
            return self.err("expected a type such as `f32[2,3]{1,0}`");
        }
        let dtype: String = self.chars[start..self.pos].iter().collect();
        if self.chars.get(self.pos) != Some(&'[') {
            if dtype == "token" {
                return Ok(RawShape::Array {
                    dtype,
                    dims: vec![],
                });
            }
            return self.err(format!("expected `[` after the element type `{dtype}`"));
        }
        let inner = self.balanced('[', ']')?;
        let mut dims = Vec::new();
        for d in inner.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            match d.parse::<usize>() {
                Ok(n) => dims.push(n),
                Err(_) => {
                    return self.err(format!(
                        "dimension `{d}` is not a fixed size: xla-aot compiles static shapes only (export with concrete shapes)"
                    ));
                }
            }
        }
        // Layout (and tiling), e.g. `{1,0}` or `{1,0:T(8,128)}`.
        if self.chars.get(self.pos) == Some(&'{') {
            self.balanced('{', '}')?;
        }
        Ok(RawShape::Array { dtype, dims })
    }

    /// An attribute value: braces, a quoted string, or text up to the next top-level comma.
    fn attr_value(&mut self) -> PResult<String> {
        self.ws();
        match self.chars.get(self.pos) {
            Some('{') => {
                let inner = self.balanced('{', '}')?;
                Ok(format!("{{{inner}}}"))
            }
            Some('"') => {
                let start = self.pos;
                self.pos += 1;
                while self.pos < self.chars.len() && self.chars[self.pos] != '"' {
                    if self.chars[self.pos] == '\\' {
                        self.pos += 1;
                    }
                    self.pos += 1;
                }
                if self.pos >= self.chars.len() {
                    return self.err("unterminated string");
                }
                self.pos += 1;
                Ok(self.chars[start..self.pos].iter().collect())
            }
            _ => {
                let start = self.pos;
                let mut depth = 0i32;
                while self.pos < self.chars.len() {
                    let c = self.chars[self.pos];
                    match c {
                        '{' | '[' | '(' => depth += 1,
                        '}' | ']' | ')' => depth -= 1,
                        ',' if depth <= 0 => break,
                        _ => {}
                    }
                    self.pos += 1;
                }
                Ok(self.chars[start..self.pos]
                    .iter()
                    .collect::<String>()
                    .trim()
                    .to_string())
            }
        }
    }
}

/// Splits `text` at commas outside brackets and quotes; each piece with its offset.
pub fn split_top(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let (mut depth, mut in_str, mut start) = (0i32, false, 0usize);
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if in_str {
            if c == b'\\' {
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
        } else {
            match c {
                b'"' => in_str = true,
                b'{' | b'[' | b'(' => depth += 1,
                b'}' | b']' | b')' => depth -= 1,
                b',' if depth == 0 => {
                    out.push((start, &text[start..i]));
                    start = i + 1;
                }
                _ => {}
            }
        }
        i += 1;
    }
    if !text[start..].trim().is_empty() || !out.is_empty() {
        out.push((start, &text[start..]));
    }
    out
}

fn parse_instruction(text: &str, line: usize) -> PResult<RawInst> {
    let mut c = Line::new(text, line);
    let mut is_root = false;
    let column = c.column();
    let mut name = c.name("an instruction name")?;
    if name == "ROOT" {
        is_root = true;
        name = c.name("an instruction name after ROOT")?;
    }
    c.expect('=', "after the instruction name")?;
    let shape = c.shape()?;
    let opcode_column = c.column();
    let opcode = c.name("an opcode")?;
    let args_col = c.column();
    let args_text = c.balanced('(', ')').or_else(|_| {
        c.pos = args_col - 1;
        c.err(format!("expected `(` and the operands of `{opcode}`"))
    })?;
    let mut operands = Vec::new();
    if !matches!(opcode.as_str(), "constant" | "parameter" | "iota") {
        for (off, piece) in split_top(&args_text) {
            let trimmed = piece.trim_end();
            // The operand name is the last word (older printers put the type first).
            let start = trimmed
                .char_indices()
                .rev()
                .find(|&(_, ch)| ch.is_whitespace() || ch == '}' || ch == ')')
                .map_or(0, |(i, ch)| i + ch.len_utf8());
            let word = trimmed[start..].trim_start_matches('%');
            let col = args_col + 1 + text_cols(&args_text[..off]) + text_cols(&piece[..start]);
            if word.is_empty() || !word.chars().all(is_name_char) {
                return Err(SyntaxError {
                    line,
                    column: col,
                    message: format!("expected an operand name, found `{}`", piece.trim()),
                });
            }
            operands.push((word.to_string(), col));
        }
    }
    let mut attrs = Vec::new();
    while c.eat(',') {
        let column = c.column();
        let key = c.name("an attribute name")?;
        c.expect('=', &format!("after attribute `{key}`"))?;
        let value = c.attr_value()?;
        attrs.push(RawAttr { key, value, column });
    }
    c.ws();
    if c.pos < c.chars.len() {
        return c.err("expected `,` and another attribute, or the end of the instruction");
    }
    Ok(RawInst {
        name,
        line,
        column,
        is_root,
        shape,
        opcode,
        opcode_column,
        args_text,
        operands,
        attrs,
    })
}

fn text_cols(s: &str) -> usize {
    s.chars().count()
}

/// Whether a (comment-free) line opens a computation: it ends with `{` and is not `name = ...`.
fn computation_header(text: &str) -> Option<(String, bool)> {
    let t = text.trim();
    let body = t.strip_suffix('{')?.trim_end();
    let (is_entry, rest) = match body.strip_prefix("ENTRY") {
        Some(r) if r.starts_with(char::is_whitespace) => (true, r.trim_start()),
        _ => (false, body),
    };
    let rest = rest.trim_start_matches('%');
    let end = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
    let name = &rest[..end];
    let after = rest[end..].trim_start();
    if name.is_empty() || after.starts_with('=') {
        return None;
    }
    Some((name.to_string(), is_entry))
}

/// Parses a whole module text.
pub fn parse_file(source: &str) -> PResult<RawModule> {
    let mut name = None;
    let mut computations: Vec<RawComputation> = Vec::new();
    let mut current: Option<RawComputation> = None;
    for (i, raw_line) in source.lines().enumerate() {
        let line = i + 1;
        let text = strip_comments(raw_line);
        let t = text.trim();
        if t.is_empty() || t.starts_with("//") || t.starts_with('#') {
            continue;
        }
        if current.is_none() {
            if let Some(rest) = t.strip_prefix("HloModule") {
                let n = rest.trim_start().trim_start_matches('%');
                let end = n.find(|c: char| !is_name_char(c)).unwrap_or(n.len());
                name = Some(n[..end].to_string());
                continue;
            }
            if let Some((cname, is_entry)) = computation_header(&text) {
                current = Some(RawComputation {
                    name: cname,
                    line,
                    is_entry,
                    insts: Vec::new(),
                });
                continue;
            }
            let col = raw_line.len() - raw_line.trim_start().len() + 1;
            return Err(SyntaxError {
                line,
                column: col,
                message: if name.is_none() {
                    "expected `HloModule <name>` or a computation (`ENTRY main {`): this does not look like XLA HLO text".into()
                } else {
                    "expected a computation (`name {` or `ENTRY name {`) or the end of the module"
                        .into()
                },
            });
        }
        if t == "}" {
            computations.push(current.take().expect("inside a computation"));
            continue;
        }
        let inst = parse_instruction(&text, line)?;
        current
            .as_mut()
            .expect("inside a computation")
            .insts
            .push(inst);
    }
    if let Some(c) = current {
        return Err(SyntaxError {
            line: source.lines().count().max(1),
            column: 1,
            message: format!(
                "computation `{}` (line {}) is never closed with `}}`: is the file truncated?",
                c.name, c.line
            ),
        });
    }
    Ok(RawModule {
        name: name.unwrap_or_default(),
        computations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_printing_styles() {
        let new = "HloModule jit_f, entry_computation_layout={(f32[2]{0})->f32[2]{0}}\n\nENTRY main.3 {\n  x.1 = f32[2]{0} parameter(0)\n  ROOT tanh.2 = f32[2]{0} tanh(x.1), metadata={op_name=\"jit(f)/tanh\" source_file=\"a, b.py\"}\n}\n";
        let old = "HloModule m\n\nENTRY %main.3 (x.1: f32[2]) -> f32[2] {\n  %x.1 = f32[2]{0} parameter(0)\n  ROOT %tanh.2 = f32[2]{0} tanh(f32[2]{0} %x.1)\n}\n";
        for text in [new, old] {
            let m = parse_file(text).unwrap();
            let c = &m.computations[0];
            assert!(c.is_entry);
            assert_eq!(c.name, "main.3");
            let root = c.root().unwrap();
            assert_eq!(root.opcode, "tanh");
            assert_eq!(root.operands[0].0, "x.1");
        }
    }

    #[test]
    fn positions_point_at_the_problem() {
        let e =
            parse_file("HloModule m\nENTRY e {\n  x = f32[<=4]{0} parameter(0)\n}\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("static shapes"), "{}", e.message);
        let e = parse_file("HloModule m\nENTRY e {\n  x = f32[4]{0} parameter(0)\n").unwrap_err();
        assert!(e.message.contains("truncated"), "{}", e.message);
    }

    #[test]
    fn tuple_shapes_and_comments() {
        let m = parse_file(
            "HloModule m\nENTRY e {\n  ROOT t = (f32[], /*index=1*/s32[2]{0}) tuple(a, b)\n}\n",
        )
        .unwrap();
        let r = m.computations[0].root().unwrap();
        assert_eq!(
            r.shape,
            RawShape::Tuple(vec![
                RawShape::Array {
                    dtype: "f32".into(),
                    dims: vec![]
                },
                RawShape::Array {
                    dtype: "s32".into(),
                    dims: vec![2]
                },
            ])
        );
        assert_eq!(r.operands.len(), 2);
    }
}
