//! The HLO text form (parser side): reads what `print.rs` writes.
//!
//! Contract: [`parse_module`] accepts exactly the grammar of `docs/hlo.md` (one instruction per
//! line) and returns the module, or an [`HloParseError`] with the 1-based line and column and what
//! was expected there. It checks syntax and name resolution only (an operand must be defined on an
//! earlier line); typing is the verifier's job, so tests can parse ill-typed modules and check that
//! the verifier names them. It never panics.

use super::inst::table::{all_opcodes, bare_op};
use super::inst::{CompareDir, DotDims, FusionKind, InstId, Instruction, Op, ReduceKind, Window};
use super::inst::{Computation, Output};
use super::literal::{Literal, LiteralData};
use super::module::Module;
use super::shape::{DType, Layout, Shape};
use std::collections::HashMap;
use thiserror::Error;

/// A syntax error in HLO text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{line}:{column}: {message}")]
pub struct HloParseError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What was wrong and what was expected.
    pub message: String,
}

type PResult<T> = Result<T, HloParseError>;

/// A cursor over one line.
struct Cursor<'a> {
    s: &'a [u8],
    pos: usize,
    line: usize,
}

impl<'a> Cursor<'a> {
    fn new(s: &'a str, line: usize) -> Cursor<'a> {
        Cursor {
            s: s.as_bytes(),
            pos: 0,
            line,
        }
    }

    fn err<T>(&self, message: impl Into<String>) -> PResult<T> {
        Err(HloParseError {
            line: self.line,
            column: self.pos + 1,
            message: message.into(),
        })
    }

    fn ws(&mut self) {
        while self.pos < self.s.len() && (self.s[self.pos] == b' ' || self.s[self.pos] == b'\t') {
            self.pos += 1;
        }
    }

    /// Skips blanks and returns the position of the next token (for error columns).
    fn mark(&mut self) -> usize {
        self.ws();
        self.pos
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.pos).copied()
    }

    fn at_end(&mut self) -> bool {
        self.peek().is_none()
    }

    fn eat(&mut self, t: &str) -> bool {
        self.ws();
        if self.s[self.pos..].starts_with(t.as_bytes()) {
            self.pos += t.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, t: &str) -> PResult<()> {
        if self.eat(t) {
            Ok(())
        } else {
            let found = self.found();
            self.err(format!("expected `{t}`, found {found}"))
        }
    }

    fn found(&mut self) -> String {
        self.ws();
        if self.pos >= self.s.len() {
            return "end of line".to_string();
        }
        let end = (self.pos + 12).min(self.s.len());
        format!("`{}`", String::from_utf8_lossy(&self.s[self.pos..end]))
    }

    /// `[A-Za-z0-9_.-]+`
    fn word(&mut self, what: &str) -> PResult<String> {
        self.ws();
        let start = self.pos;
        while self.pos < self.s.len() {
            let c = self.s[self.pos];
            if c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-' {
                self.pos += 1;
            } else {
                break;
            }
        }
        if start == self.pos {
            let found = self.found();
            return self.err(format!("expected {what}, found {found}"));
        }
        Ok(String::from_utf8_lossy(&self.s[start..self.pos]).into_owned())
    }

    fn name(&mut self) -> PResult<String> {
        self.expect("%")?;
        self.word("an instruction name")
    }

    fn usize(&mut self) -> PResult<usize> {
        self.ws();
        let start = self.pos;
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        if start == self.pos {
            let found = self.found();
            return self.err(format!("expected a non-negative integer, found {found}"));
        }
        let text = String::from_utf8_lossy(&self.s[start..self.pos]);
        match text.parse::<usize>() {
            Ok(v) => Ok(v),
            Err(_) => {
                self.pos = start;
                self.err(format!("integer `{text}` is too large"))
            }
        }
    }

    /// A number token: everything up to `,`, `}` or whitespace.
    fn number_token(&mut self) -> PResult<(usize, String)> {
        self.ws();
        let start = self.pos;
        let mut depth = 0;
        while self.pos < self.s.len() {
            let c = self.s[self.pos];
            if c == b'(' {
                depth += 1;
            } else if c == b')' {
                if depth == 0 {
                    break;
                }
                depth -= 1;
            } else if depth == 0 && (c == b',' || c == b'}' || c == b' ') {
                break;
            }
            self.pos += 1;
        }
        if start == self.pos {
            let found = self.found();
            return self.err(format!("expected a number, found {found}"));
        }
        Ok((
            start,
            String::from_utf8_lossy(&self.s[start..self.pos]).into_owned(),
        ))
    }

    /// `{1,2,3}` (possibly empty).
    fn int_list(&mut self) -> PResult<Vec<usize>> {
        self.expect("{")?;
        let mut v = Vec::new();
        if self.eat("}") {
            return Ok(v);
        }
        loop {
            v.push(self.usize()?);
            if self.eat("}") {
                return Ok(v);
            }
            self.expect(",")?;
        }
    }

    /// `3x3` (at least one).
    fn x_list(&mut self) -> PResult<Vec<usize>> {
        let mut v = vec![self.usize()?];
        while self.s.get(self.pos) == Some(&b'x') {
            self.pos += 1;
            v.push(self.usize()?);
        }
        Ok(v)
    }

    /// `1_2x0_0` → ([1,0], [2,0]).
    fn pad_list(&mut self) -> PResult<(Vec<usize>, Vec<usize>)> {
        let (mut lo, mut hi) = (Vec::new(), Vec::new());
        loop {
            lo.push(self.usize()?);
            if self.s.get(self.pos) != Some(&b'_') {
                return self.err("expected `_` between low and high padding (e.g. `1_1x0_2`)");
            }
            self.pos += 1;
            hi.push(self.usize()?);
            if self.s.get(self.pos) == Some(&b'x') {
                self.pos += 1;
            } else {
                return Ok((lo, hi));
            }
        }
    }
}

fn parse_shape(c: &mut Cursor) -> PResult<Shape> {
    let at = c.mark();
    let dt = c.word("a dtype")?;
    let Some(dtype) = DType::from_name(&dt) else {
        c.pos = at;
        let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
        return c.err(format!(
            "unknown dtype `{dt}`; expected one of {}",
            names.join(", ")
        ));
    };
    c.expect("[")?;
    let mut dims = Vec::new();
    if !c.eat("]") {
        loop {
            dims.push(c.usize()?);
            if c.eat("]") {
                break;
            }
            c.expect(",")?;
        }
    }
    let layout = if c.peek() == Some(b'{') {
        let at = c.mark();
        let m2m = c.int_list()?;
        let layout = Layout {
            minor_to_major: m2m,
        };
        if !layout.is_valid_for_rank(dims.len()) {
            c.pos = at;
            return c.err(format!(
                "layout must be a permutation of 0..{} (minor to major)",
                dims.len()
            ));
        }
        layout
    } else {
        Layout::row_major(dims.len())
    };
    Ok(Shape {
        dtype,
        dims,
        layout,
    })
}

fn parse_window(c: &mut Cursor) -> PResult<Window> {
    c.expect("{")?;
    let mut w: Option<Window> = None;
    let mut fields: Vec<(String, usize)> = Vec::new();
    while !c.eat("}") {
        let at = c.mark();
        let key = c.word("a window field (size, stride, pad, rhs_dilate)")?;
        c.expect("=")?;
        fields.push((key.clone(), at));
        match key.as_str() {
            "size" => w = Some(Window::new(c.x_list()?)),
            _ => {
                let Some(win) = w.as_mut() else {
                    c.pos = at;
                    return c.err("`size=` must come first in a window");
                };
                let n = win.rank();
                let check = |c: &Cursor, len: usize| -> PResult<()> {
                    if len != n {
                        c.err(format!(
                            "window field `{key}` has {len} entries, size has {n}"
                        ))
                    } else {
                        Ok(())
                    }
                };
                match key.as_str() {
                    "stride" => {
                        win.stride = c.x_list()?;
                        check(c, win.stride.len())?;
                    }
                    "pad" => {
                        let (lo, hi) = c.pad_list()?;
                        check(c, lo.len())?;
                        win.pad_low = lo;
                        win.pad_high = hi;
                    }
                    "rhs_dilate" => {
                        win.dilation = c.x_list()?;
                        check(c, win.dilation.len())?;
                    }
                    _ => {
                        c.pos = at;
                        return c.err(format!(
                            "unknown window field `{key}`; expected size, stride, pad or rhs_dilate"
                        ));
                    }
                }
            }
        }
    }
    Ok(w.unwrap_or_else(|| Window::new(Vec::new())))
}

/// Parses a module printed by `print::print_module`.
pub fn parse_module(text: &str) -> PResult<Module> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with("//")
        });
    let eof = |line: usize, what: &str| HloParseError {
        line,
        column: 1,
        message: format!("unexpected end of text; expected {what}"),
    };
    let last_line = text.lines().count().max(1);
    let (ln, header) = lines.next().ok_or_else(|| eof(1, "`HloModule <name>`"))?;
    // `, api_types=(...) -> (...)` ends the line when inputs or outputs have C API dtypes.
    let (header, api) = match header.split_once(", api_types=") {
        Some((h, a)) => (
            h,
            crate::ir::ApiTypes::parse(a).map_err(|message| HloParseError {
                line: ln,
                column: h.len() + 1,
                message,
            })?,
        ),
        None => (header, crate::ir::ApiTypes::default()),
    };
    // `, precision=bf16-weights` follows the name when the weights are not f32.
    let (header, precision) = match header.split_once(", precision=") {
        Some((h, p)) => (
            h,
            crate::ir::Precision::parse(p.trim()).map_err(|message| HloParseError {
                line: ln,
                column: h.len() + 13,
                message,
            })?,
        ),
        None => (header, crate::ir::Precision::F32),
    };
    let mut c = Cursor::new(header, ln);
    c.expect("HloModule")?;
    let name = c.word("a module name")?;
    if !c.at_end() {
        let found = c.found();
        return c.err(format!(
            "expected end of line after the module name, found {found}"
        ));
    }
    // Fused computations come first (they are referenced by `calls=`), then the entry.
    let mut computations: HashMap<String, Computation> = HashMap::new();
    loop {
        let (ln, head) = lines
            .next()
            .ok_or_else(|| eof(last_line, "`ENTRY %main {`"))?;
        let mut c = Cursor::new(head, ln);
        let entry = c.eat("ENTRY");
        let name_at = c.mark();
        let comp_name = c.name()?;
        c.expect("{")?;
        if computations.contains_key(&comp_name) {
            c.pos = name_at;
            return c.err(format!("computation `%{comp_name}` is defined twice"));
        }
        let comp = parse_body(&mut lines, comp_name, &computations, last_line)?;
        if entry {
            if let Some((ln, _)) = lines.next() {
                return Err(HloParseError {
                    line: ln,
                    column: 1,
                    message: "unexpected text after the entry computation".into(),
                });
            }
            return Ok(Module {
                name,
                entry: comp,
                api,
                precision,
            });
        }
        computations.insert(comp.name.clone(), comp);
    }
}

/// Parses instruction lines up to the closing `}` of a computation.
fn parse_body<'a>(
    lines: &mut impl Iterator<Item = (usize, &'a str)>,
    comp_name: String,
    computations: &HashMap<String, Computation>,
    last_line: usize,
) -> PResult<Computation> {
    let eof = |line: usize, what: &str| HloParseError {
        line,
        column: 1,
        message: format!("unexpected end of text; expected {what}"),
    };
    let mut instructions: Vec<Instruction> = Vec::new();
    let mut ids: HashMap<String, InstId> = HashMap::new();
    let mut outputs: Option<Vec<Output>> = None;
    let mut closed = false;
    for (ln, line) in lines.by_ref() {
        let mut c = Cursor::new(line, ln);
        if c.eat("}") {
            closed = true;
            break;
        }
        if outputs.is_some() {
            return c.err("expected `}` after the ROOT line");
        }
        if c.eat("ROOT") {
            outputs = Some(parse_root(&mut c, &instructions, &ids)?);
            continue;
        }
        let at = c.mark();
        let inst = parse_instruction(&mut c, computations, &ids)?;
        if ids.contains_key(&inst.name) {
            c.pos = at;
            return c.err(format!(
                "instruction name `%{}` is defined twice",
                inst.name
            ));
        }
        ids.insert(inst.name.clone(), InstId(instructions.len() as u32));
        instructions.push(inst);
    }
    if !closed {
        return Err(eof(last_line, "`}` closing the computation"));
    }
    let Some(outputs) = outputs else {
        return Err(eof(
            last_line,
            "a `ROOT %outputs = (...) tuple(...), names={...}` line",
        ));
    };
    Ok(Computation {
        name: comp_name,
        instructions,
        outputs,
    })
}

fn operand_list(c: &mut Cursor, ids: &HashMap<String, InstId>) -> PResult<Vec<InstId>> {
    let mut v = Vec::new();
    if c.eat(")") {
        return Ok(v);
    }
    loop {
        let at = c.mark();
        let n = c.name()?;
        match ids.get(&n) {
            Some(&id) => v.push(id),
            None => {
                c.pos = at;
                return c.err(format!(
                    "operand `%{n}` is not defined on an earlier line (operands must be defined before use)"
                ));
            }
        }
        if c.eat(")") {
            return Ok(v);
        }
        c.expect(",")?;
    }
}

fn parse_root(
    c: &mut Cursor,
    insts: &[Instruction],
    ids: &HashMap<String, InstId>,
) -> PResult<Vec<Output>> {
    c.name()?;
    c.expect("=")?;
    c.expect("(")?;
    let mut shapes = Vec::new();
    if !c.eat(")") {
        loop {
            shapes.push((c.pos, parse_shape(c)?));
            if c.eat(")") {
                break;
            }
            c.expect(",")?;
        }
    }
    c.expect("tuple")?;
    c.expect("(")?;
    let values = operand_list(c, ids)?;
    c.expect(",")?;
    c.expect("names")?;
    c.expect("=")?;
    c.expect("{")?;
    let mut names = Vec::new();
    if !c.eat("}") {
        loop {
            names.push(c.word("an output name")?);
            if c.eat("}") {
                break;
            }
            c.expect(",")?;
        }
    }
    if !c.at_end() {
        let found = c.found();
        return c.err(format!("expected end of line, found {found}"));
    }
    if values.len() != names.len() || values.len() != shapes.len() {
        return c.err(format!(
            "ROOT tuple has {} shape(s), {} value(s) and {} name(s); they must match",
            shapes.len(),
            values.len(),
            names.len()
        ));
    }
    for ((at, shape), v) in shapes.iter().zip(&values) {
        if *shape != insts[v.index()].shape {
            c.pos = *at;
            return c.err(format!(
                "ROOT tuple shape {} differs from %{}'s shape {}",
                shape,
                insts[v.index()].name,
                insts[v.index()].shape
            ));
        }
    }
    Ok(names
        .into_iter()
        .zip(values)
        .map(|(name, value)| Output { name, value })
        .collect())
}

fn parse_f32(tok: &str) -> Option<f32> {
    if let Some(bits) = tok.strip_prefix("nan(0x").and_then(|r| r.strip_suffix(')')) {
        return u32::from_str_radix(bits, 16).ok().map(f32::from_bits);
    }
    match tok {
        "inf" => Some(f32::INFINITY),
        "-inf" => Some(f32::NEG_INFINITY),
        "NaN" => Some(f32::NAN),
        _ => {
            // Only plain decimal forms: Rust's parser also takes `infinity` and similar spellings.
            if tok
                .bytes()
                .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
            {
                tok.parse().ok()
            } else {
                None
            }
        }
    }
}

fn parse_literal(c: &mut Cursor, shape: &Shape) -> PResult<Literal> {
    let dims = shape.dims.clone();
    if c.eat("{...}") {
        return Ok(Literal {
            dtype: shape.dtype,
            dims,
            data: LiteralData::Elided,
        });
    }
    let mut toks = Vec::new();
    if shape.dims.is_empty() && c.peek() != Some(b'{') {
        toks.push(c.number_token()?);
    } else {
        c.expect("{")?;
        if !c.eat("}") {
            loop {
                toks.push(c.number_token()?);
                if c.eat("}") {
                    break;
                }
                c.expect(",")?;
            }
        }
    }
    let n: usize = dims.iter().product();
    if toks.len() != n {
        return c.err(format!(
            "constant of shape {} needs {} element(s), found {}",
            shape,
            n,
            toks.len()
        ));
    }
    let mut bytes = Vec::with_capacity(n * shape.dtype.size_bytes());
    for (at, t) in toks {
        let ok = match shape.dtype {
            DType::F32 => parse_f32(&t).map(|v| bytes.extend_from_slice(&v.to_le_bytes())),
            DType::I32 => t
                .parse::<i32>()
                .ok()
                .map(|v| bytes.extend_from_slice(&v.to_le_bytes())),
            DType::Pred => match t.as_str() {
                "true" => Some(1u8),
                "false" => Some(0u8),
                _ => None,
            }
            .map(|b| bytes.push(b)),
            DType::I8
            | DType::I64
            | DType::U8
            | DType::I16
            | DType::U16
            | DType::U32
            | DType::U64
            | DType::F16
            | DType::BF16 => t
                .strip_prefix("0x")
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .filter(|&bits| {
                    shape.dtype.size_bytes() >= 8 || bits < (1u64 << (8 * shape.dtype.size_bytes()))
                })
                .map(|bits| {
                    bytes.extend_from_slice(&bits.to_le_bytes()[..shape.dtype.size_bytes()])
                }),
        };
        if ok.is_none() {
            c.pos = at;
            return c.err(format!("`{t}` is not a valid {} element", shape.dtype));
        }
    }
    Ok(Literal {
        dtype: shape.dtype,
        dims,
        data: LiteralData::Dense(bytes.into()),
    })
}

/// The opcodes of elementwise ops by text name.
fn parse_instruction(
    c: &mut Cursor,
    computations: &HashMap<String, Computation>,
    ids: &HashMap<String, InstId>,
) -> PResult<Instruction> {
    let name = c.name()?;
    c.expect("=")?;
    let shape = parse_shape(c)?;
    let op_at = c.mark();
    let opcode = c.word("an opcode")?;
    c.expect("(")?;
    let mut operands = Vec::new();
    let mut op = match opcode.as_str() {
        "parameter" => {
            let index = c.usize()?;
            c.expect(")")?;
            Some(Op::Parameter { index })
        }
        "constant" => {
            let lit = parse_literal(c, &shape)?;
            c.expect(")")?;
            Some(Op::Constant(lit))
        }
        "convert" => {
            operands = operand_list(c, ids)?;
            Some(Op::Convert { to: shape.dtype })
        }
        _ if all_opcodes().any(|o| o == opcode) => {
            operands = operand_list(c, ids)?;
            bare_op(&opcode)
        }
        _ => {
            c.pos = op_at;
            return c.err(format!(
                "unknown opcode `{opcode}`; expected one of {}",
                all_opcodes().collect::<Vec<_>>().join(", ")
            ));
        }
    };
    // Attributes.
    // Attribute names with their columns, in text order (so errors are deterministic).
    let mut attrs: Vec<(String, usize)> = Vec::new();
    let mut dims: Option<Vec<usize>> = None;
    let mut kind: Option<ReduceKind> = None;
    let mut window: Option<Window> = None;
    let mut direction: Option<CompareDir> = None;
    let mut slice: Option<Vec<(usize, usize, usize)>> = None;
    let mut padding: Option<(Vec<usize>, Vec<usize>)> = None;
    let mut dot = DotDims::default();
    let mut groups: usize = 1;
    let mut top_k: Option<usize> = None;
    let mut fusion_kind: Option<FusionKind> = None;
    let mut calls: Option<Computation> = None;
    while c.eat(",") {
        let at = c.mark();
        let key = c.word("an attribute name")?;
        if attrs.iter().any(|(k, _)| *k == key) {
            c.pos = at;
            return c.err(format!("attribute `{key}` is given twice"));
        }
        attrs.push((key.clone(), at));
        c.expect("=")?;
        match key.as_str() {
            "dimensions" => dims = Some(c.int_list()?),
            "kind" if opcode == "fusion" => {
                let k_at = c.mark();
                let k = c.word("a fusion kind")?;
                fusion_kind = FusionKind::ALL.into_iter().find(|f| f.name() == k);
                if fusion_kind.is_none() {
                    c.pos = k_at;
                    return c.err(format!(
                        "unknown fusion kind `{k}`; expected loop, input or output"
                    ));
                }
            }
            "calls" => {
                let c_at = c.mark();
                let callee = c.name()?;
                match computations.get(&callee) {
                    Some(comp) => calls = Some(comp.clone()),
                    None => {
                        c.pos = c_at;
                        return c.err(format!(
                            "`calls=%{callee}` names no computation defined above"
                        ));
                    }
                }
            }
            "kind" => {
                let k_at = c.mark();
                let k = c.word("a reduction kind")?;
                kind = ReduceKind::ALL.into_iter().find(|r| r.name() == k);
                if kind.is_none() {
                    c.pos = k_at;
                    return c.err(format!("unknown kind `{k}`; expected add, max or min"));
                }
            }
            "window" => window = Some(parse_window(c)?),
            "direction" => {
                let d_at = c.mark();
                let d = c.word("a comparison direction")?;
                direction = CompareDir::ALL.into_iter().find(|x| x.name() == d);
                if direction.is_none() {
                    c.pos = d_at;
                    return c.err(format!(
                        "unknown direction `{d}`; expected EQ, NE, LT, LE, GT or GE"
                    ));
                }
            }
            "slice" => {
                c.expect("{")?;
                let mut v = Vec::new();
                if !c.eat("}") {
                    loop {
                        c.expect("[")?;
                        let a = c.usize()?;
                        c.expect(":")?;
                        let b = c.usize()?;
                        c.expect(":")?;
                        let s = c.usize()?;
                        c.expect("]")?;
                        v.push((a, b, s));
                        if c.eat("}") {
                            break;
                        }
                        c.expect(",")?;
                    }
                }
                slice = Some(v);
            }
            "padding" => {
                padding = Some(if c.peek().is_some_and(|b| b.is_ascii_digit()) {
                    c.pad_list()?
                } else {
                    (Vec::new(), Vec::new())
                })
            }
            "lhs_batch_dims" => dot.lhs_batch = c.int_list()?,
            "lhs_contracting_dims" => dot.lhs_contracting = c.int_list()?,
            "rhs_batch_dims" => dot.rhs_batch = c.int_list()?,
            "rhs_contracting_dims" => dot.rhs_contracting = c.int_list()?,
            "feature_group_count" => groups = c.usize()?,
            "k" => top_k = Some(c.usize()?),
            "dim_labels" => {
                let l_at = c.mark();
                let labels = c.word("dim labels")?;
                c.expect(">")?;
                let out = c.word("dim labels")?;
                let full = format!("{labels}>{out}");
                let rank = window.as_ref().map(|w| w.rank()).unwrap_or(0);
                let sp: String = (0..rank).map(|i| i.to_string()).collect();
                if full != format!("bf{sp}_oi{sp}->bf{sp}") {
                    c.pos = l_at;
                    return c.err(format!(
                        "only dim_labels=bf{sp}_oi{sp}->bf{sp} (NCHW input, OIHW kernel) is supported, found `{full}`"
                    ));
                }
            }
            _ => {
                c.pos = at;
                return c.err(format!("unknown attribute `{key}` for {opcode}"));
            }
        }
    }
    if !c.at_end() {
        let found = c.found();
        return c.err(format!(
            "expected `,` and an attribute or end of line, found {found}"
        ));
    }
    let allowed: &[&str] = match opcode.as_str() {
        "compare" => &["direction"],
        "broadcast" | "transpose" | "concatenate" | "argmax" => &["dimensions"],
        "slice" => &["slice"],
        "pad" => &["padding"],
        "reduce" => &["dimensions", "kind"],
        "reduce-window" => &["window", "kind"],
        "dot" => &[
            "lhs_batch_dims",
            "lhs_contracting_dims",
            "rhs_batch_dims",
            "rhs_contracting_dims",
        ],
        "convolution" => &["window", "dim_labels", "feature_group_count"],
        "fusion" => &["kind", "calls"],
        "top-k" => &["k"],
        _ => &[],
    };
    for (k, at) in &attrs {
        let at = *at;
        if !allowed.contains(&k.as_str()) {
            c.pos = at;
            return c.err(format!("attribute `{k}` does not apply to {opcode}"));
        }
    }
    let need = |c: &mut Cursor, key: &str| -> PResult<()> {
        if attrs.iter().any(|(k, _)| k == key) {
            Ok(())
        } else {
            c.pos = op_at;
            c.err(format!("{opcode} needs the attribute `{key}=`"))
        }
    };
    let single = |c: &mut Cursor, d: Vec<usize>| -> PResult<usize> {
        if d.len() == 1 {
            Ok(d[0])
        } else {
            c.pos = op_at;
            c.err(format!(
                "{opcode} needs exactly one entry in dimensions={{...}}"
            ))
        }
    };
    if op.is_none() {
        op = Some(match opcode.as_str() {
            "compare" => {
                need(c, "direction")?;
                Op::Compare(direction.unwrap_or(CompareDir::Eq))
            }
            "broadcast" => {
                need(c, "dimensions")?;
                Op::Broadcast {
                    dimensions: dims.unwrap_or_default(),
                }
            }
            "transpose" => {
                need(c, "dimensions")?;
                Op::Transpose {
                    permutation: dims.unwrap_or_default(),
                }
            }
            "concatenate" => {
                need(c, "dimensions")?;
                Op::Concatenate {
                    dimension: single(c, dims.unwrap_or_default())?,
                }
            }
            "argmax" => {
                need(c, "dimensions")?;
                Op::Argmax {
                    dimension: single(c, dims.unwrap_or_default())?,
                }
            }
            "top-k" => {
                need(c, "k")?;
                Op::TopK {
                    k: top_k.unwrap_or(1),
                    indices: shape.dtype == DType::I32,
                }
            }
            "slice" => {
                need(c, "slice")?;
                let s = slice.unwrap_or_default();
                Op::Slice {
                    starts: s.iter().map(|x| x.0).collect(),
                    limits: s.iter().map(|x| x.1).collect(),
                    strides: s.iter().map(|x| x.2).collect(),
                }
            }
            "pad" => {
                need(c, "padding")?;
                let (low, high) = padding.unwrap_or_default();
                Op::Pad { low, high }
            }
            "reduce" => {
                need(c, "dimensions")?;
                need(c, "kind")?;
                Op::Reduce {
                    kind: kind.unwrap_or(ReduceKind::Add),
                    dimensions: dims.unwrap_or_default(),
                }
            }
            "reduce-window" => {
                need(c, "window")?;
                need(c, "kind")?;
                Op::ReduceWindow {
                    kind: kind.unwrap_or(ReduceKind::Add),
                    window: window.unwrap_or_else(|| Window::new(Vec::new())),
                }
            }
            "dot" => {
                need(c, "lhs_contracting_dims")?;
                need(c, "rhs_contracting_dims")?;
                Op::Dot(dot)
            }
            "convolution" => {
                need(c, "window")?;
                need(c, "dim_labels")?;
                Op::Convolution {
                    window: window.unwrap_or_else(|| Window::new(Vec::new())),
                    feature_group_count: groups,
                }
            }
            "fusion" => {
                need(c, "kind")?;
                need(c, "calls")?;
                Op::Fusion {
                    kind: fusion_kind.unwrap_or(FusionKind::Loop),
                    computation: Box::new(calls.unwrap_or_else(|| Computation {
                        name: String::new(),
                        instructions: Vec::new(),
                        outputs: Vec::new(),
                    })),
                }
            }
            _ => unreachable!("every opcode of the op table is handled"),
        });
    }
    Ok(Instruction {
        name,
        op: op.unwrap_or(Op::Reshape),
        operands,
        shape,
    })
}
