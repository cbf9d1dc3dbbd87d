//! Property test: random mutations of the example specs never panic the front end, never produce a
//! module that fails the verifier (that would be an "internal compiler error"), and whatever still
//! loads also evaluates, and (every fourth case) optimises and compiles, without panicking. Deterministic: case `i` of example `e` always applies
//! the same mutations; set `XLA_AOT_MUTATION_CASES` to run more than the default.

mod common;

use common::{EXAMPLES, repo};
use std::panic::{AssertUnwindSafe, catch_unwind};
use xla_aot::driver::random_input;
use xla_aot::front::{SpecErrorKind, spec::op_kinds, spec_from_str};
use xla_aot::interp::evaluate;
use xla_aot::ir::{Module, Op};
use xla_aot::util::rng::SplitMix64;

/// Cases per example by default: 4 examples × 300 = 1200 per run (the issue asks for 1000+).
const DEFAULT_CASES_PER_EXAMPLE: usize = 300;
/// Modules whose rough work (multiply-adds and element visits) exceeds this are not evaluated:
/// a mutation can legally ask for a huge tensor, and the interpreter would then just be slow.
const MAX_EVAL_WORK: usize = 4_000_000;

struct Rng(SplitMix64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n)
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "3",
    "7",
    "64",
    "-3",
    "1.5",
    "99999999999",
    "1e40",
    "-0.0",
    ".nan",
    "[]",
    "[1, 2]",
    "null",
    "abc",
];
const JUNK: &[&str] = &[
    "[", "]", "{", "}", ":", ",", "-", "\"", "'", " ", "\n", "\t", "#", "&a", "*a", "!!str", "%",
    "@", "\u{feff}", "é",
];
const KEYS: &[&str] = &[
    "name",
    "op",
    "inputs",
    "axis",
    "axes",
    "shape",
    "strides",
    "padding",
    "groups",
    "keepdims",
    "epsilon",
    "kernel_size",
    "perm",
    "starts",
    "ends",
    "pads",
    "transpose_b",
    "dtype",
    "value",
    "params",
    "outputs",
];

fn mutate(text: &str, rng: &mut Rng) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let rounds = 1 + rng.below(3);
    for _ in 0..rounds {
        if lines.is_empty() {
            lines.push(String::new());
        }
        let li = rng.below(lines.len());
        match rng.below(11) {
            0 => {
                lines.remove(li);
            }
            1 => {
                let l = lines[li].clone();
                lines.insert(rng.below(lines.len() + 1), l);
            }
            2 => {
                let lj = rng.below(lines.len());
                lines.swap(li, lj);
            }
            3 | 4 => {
                // Replace one number-like token.
                let l = &lines[li];
                let starts: Vec<usize> = l
                    .char_indices()
                    .filter(|(i, c)| {
                        (c.is_ascii_digit() || *c == '-')
                            && (*i == 0 || !l.as_bytes()[i - 1].is_ascii_alphanumeric())
                    })
                    .map(|(i, _)| i)
                    .collect();
                if !starts.is_empty() {
                    let s = *rng.pick(&starts);
                    let e = l[s + 1..]
                        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e'))
                        .map_or(l.len(), |x| s + 1 + x);
                    lines[li] = format!("{}{}{}", &l[..s], rng.pick(NUMBERS), &l[e..]);
                }
            }
            5 => {
                // Swap an identifier for another one of the file (tensor names, op kinds).
                let words: Vec<String> = text
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
                    .filter(|w| {
                        w.len() > 1 && w.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                    })
                    .map(str::to_string)
                    .collect();
                if !words.is_empty() {
                    let from = rng.pick(&words).clone();
                    let to = rng.pick(&words).clone();
                    lines[li] = lines[li].replacen(&from, &to, 1);
                }
            }
            6 => {
                let kinds: Vec<&str> = op_kinds().collect();
                let kind = rng.pick(&kinds);
                if let Some(p) = lines[li].find("op: ") {
                    let rest = &lines[li][p + 4..];
                    let end = rest.find(',').unwrap_or(rest.len());
                    lines[li] = format!("{}op: {kind}{}", &lines[li][..p], &rest[end..]);
                }
            }
            7 => {
                let key = rng.pick(KEYS);
                let val = rng.pick(NUMBERS);
                if let Some(p) = lines[li].rfind('}') {
                    lines[li].insert_str(p, &format!(", {key}: {val}"));
                }
            }
            8 => {
                let l = &lines[li];
                if !l.is_empty() {
                    let mut cut = rng.below(l.len());
                    while !l.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    lines[li] = format!("{}{}{}", &l[..cut], rng.pick(JUNK), &l[cut..]);
                }
            }
            9 => {
                let l = &lines[li];
                if !l.is_empty() {
                    let mut cut = rng.below(l.len());
                    while !l.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    lines[li] = l[..cut].to_string();
                }
            }
            _ => {
                let key = rng.pick(KEYS);
                let other = rng.pick(KEYS);
                lines[li] = lines[li].replacen(&format!("{key}:"), &format!("{other}:"), 1);
            }
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

fn work(m: &Module) -> usize {
    m.entry
        .instructions
        .iter()
        .map(|i| {
            let n = i.shape.element_count();
            let per = match &i.op {
                Op::Dot(d) => d
                    .lhs_contracting
                    .iter()
                    .map(|&k| m.entry.inst(i.operands[0]).shape.dims[k])
                    .product(),
                Op::Convolution { .. } => {
                    let k = &m.entry.inst(i.operands[1]).shape.dims;
                    k[1..].iter().product()
                }
                Op::ReduceWindow { window, .. } => window.size.iter().product(),
                Op::Reduce { .. } => {
                    m.entry.inst(i.operands[0]).shape.element_count().max(1) / n.max(1)
                }
                _ => 1,
            };
            n.saturating_mul(per)
        })
        .fold(0usize, usize::saturating_add)
}

#[test]
fn random_mutations_never_panic() {
    let per = std::env::var("XLA_AOT_MUTATION_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES_PER_EXAMPLE);
    let mut stats = [0usize; 3]; // rejected, loaded, evaluated
    for (e, ex) in EXAMPLES.iter().enumerate() {
        let path = repo().join("examples").join(ex).join("model.yaml");
        let original = std::fs::read_to_string(&path).unwrap();
        for case in 0..per {
            let seed = ((e as u64) << 32) | case as u64;
            let text = mutate(&original, &mut Rng(SplitMix64(seed)));
            let result = catch_unwind(AssertUnwindSafe(|| {
                let loaded = spec_from_str(&path, &text);
                let mut evaluated = false;
                if let Ok(model) = &loaded {
                    if work(&model.module) <= MAX_EVAL_WORK {
                        let inputs: Vec<_> = model
                            .module
                            .entry
                            .parameters()
                            .iter()
                            .map(|&p| {
                                let s = &model.module.entry.inst(p).shape;
                                random_input(s.dtype, &s.dims, seed)
                            })
                            .collect();
                        evaluate(&model.module, &inputs).expect("a loaded module evaluates");
                        evaluated = true;
                        // Whatever loads also optimises and compiles (every 4th case: LLVM is
                        // the slow part), without a panic and without a verifier failure.
                        if case % 4 == 0 {
                            let t = xla_aot::target::Target::resolve("x86_64-avx2").unwrap();
                            xla_aot::compile::compile_model(&model.module, &t, &Default::default())
                                .expect("a loaded module compiles");
                        }
                    }
                }
                (loaded.map(|_| ()), evaluated)
            }));
            match result {
                Err(_) => panic!("{ex} case {case} (seed {seed:#x}) panicked on:\n{text}"),
                Ok((Err(err), _)) => {
                    if let SpecErrorKind::Invalid(m) = err.kind() {
                        assert!(
                            !m.contains("internal compiler error"),
                            "{ex} case {case}: {err}\n{text}"
                        );
                    }
                    let shown = err.to_string();
                    assert!(
                        shown.starts_with("error: ") && shown.contains("-->"),
                        "{ex} case {case}: unhelpful message {shown}"
                    );
                    stats[0] += 1;
                }
                Ok((Ok(()), evaluated)) => {
                    stats[1] += 1;
                    stats[2] += usize::from(evaluated);
                }
            }
        }
    }
    eprintln!(
        "{} mutated specs: {} rejected with a message, {} loaded ({} of them evaluated)",
        per * EXAMPLES.len(),
        stats[0],
        stats[1],
        stats[2]
    );
    assert!(per * EXAMPLES.len() >= 1000 || per != DEFAULT_CASES_PER_EXAMPLE);
}
