//! The shape of the source tree, checked: no module-level import cycle and no oversized file.
//!
//! Contract: modules of `xla-aot/src` form layers. A reference from module A to module B
//! (`crate::…`, `super::…`, `self::…` paths in code, `use` groups expanded; comments do not
//! count) where neither contains the other is lifted to the two sibling modules under their
//! closest common ancestor; those sibling edges must form no cycle, at every level of the tree.
//! References between a module and its own ancestors or descendants are a facade and its parts,
//! and are allowed. No source file is longer than [`MAX_FILE_LINES`]. A failure names the cycle
//! (or the file) so it can be fixed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest source file: a reader should be able to hold one file's contract in their head
/// (issue 14 set the bar after `codegen/cpu.rs` reached 2,551 lines).
const MAX_FILE_LINES: usize = 1200;

type ModPath = Vec<String>;

/// Every `.rs` file under `src` with its module path (`lib.rs` is the root, `main.rs` is `main`).
fn modules(src: &Path) -> Vec<(ModPath, PathBuf)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(src).unwrap();
            let mut parts: Vec<String> = rel
                .iter()
                .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
                parts.pop();
            }
            (parts, f)
        })
        .collect()
}

/// The paths a source text names: `crate::a::b`, `super::x`, `self::y`, with `{…}` groups of
/// `use` declarations expanded one path per leaf. Each path is returned as its segments, the
/// first being `crate`, `super` or `self`.
fn paths(text: &str) -> Vec<Vec<String>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !text.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .find(|p| text[i..].starts_with(**p));
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        match starts {
            Some(_) if boundary => {
                let (found, end) = parse_path(text, i, Vec::new());
                out.extend(found);
                i = end.max(i + 1);
            }
            _ => i += 1,
        }
    }
    out
}

/// Parses the path starting at byte `i` (after `prefix`), expanding groups; returns the paths and
/// where parsing stopped.
fn parse_path(text: &str, mut i: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let bytes = text.as_bytes();
    let mut segs = prefix;
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < bytes.len() && bytes[i] == b'{' {
            // A group: each comma-separated element continues `segs`.
            i += 1;
            let mut all = Vec::new();
            loop {
                while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b',') {
                    i += 1;
                }
                if i >= bytes.len() || bytes[i] == b'}' {
                    return (all, i + 1);
                }
                let (found, end) = parse_path(text, i, segs.clone());
                all.extend(found);
                if end <= i {
                    return (all, i + 1);
                }
                i = end;
            }
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        if i == start {
            return (vec![segs], i);
        }
        segs.push(text[start..i].to_string());
        if bytes[i..].starts_with(b"::") {
            i += 2;
        } else {
            return (vec![segs], i);
        }
    }
}

/// The module a path names: resolved against `here` and cut at the longest known module.
fn resolve(
    path: &[String],
    here: &ModPath,
    is_dir_mod: bool,
    known: &BTreeSet<ModPath>,
) -> ModPath {
    let mut base: ModPath = Vec::new();
    let mut rest = path;
    match path[0].as_str() {
        "crate" => rest = &path[1..],
        "self" | "super" => {
            // `self` of a file module `a/b.rs` is `a::b`; `super` is `a`.
            base = here.clone();
            rest = &path[1..];
            if path[0] == "super" {
                base.pop();
            }
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            let _ = is_dir_mod;
        }
        _ => {}
    }
    let mut best = base.clone();
    let mut cur = base;
    for s in rest {
        cur.push(s.clone());
        if known.contains(&cur) {
            best = cur.clone();
        } else {
            break;
        }
    }
    best
}

/// The code of a file: without its `#[cfg(test)]` module (tests may reach anywhere) and without
/// comment lines (a doc that names a module is not a dependency).
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The edges between sibling modules: (parent, from child, to child) → an example reference.
fn sibling_edges(src: &Path) -> BTreeMap<(ModPath, String, String), String> {
    let mods = modules(src);
    let known: BTreeSet<ModPath> = mods.iter().map(|(m, _)| m.clone()).collect();
    let mut edges = BTreeMap::new();
    for (here, file) in &mods {
        let text = std::fs::read_to_string(file).unwrap();
        let is_dir_mod = file.ends_with("mod.rs");
        for p in paths(&code_of(&text)) {
            let to = resolve(&p, here, is_dir_mod, &known);
            let common = here.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == here.len() || common == to.len() {
                continue; // ancestor or descendant
            }
            let parent = here[..common].to_vec();
            edges
                .entry((parent, here[common].clone(), to[common].clone()))
                .or_insert_with(|| format!("{} names {}", file.display(), p.join("::")));
        }
    }
    edges
}

#[test]
fn no_module_level_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = sibling_edges(&src);
    let mut graphs: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (parent, a, b) in edges.keys() {
        graphs
            .entry(parent.clone())
            .or_default()
            .entry(a.clone())
            .or_default()
            .insert(b.clone());
    }
    let mut cycles = Vec::new();
    for (parent, g) in &graphs {
        // A cycle exists iff some edge a → b has a path b →* a; report the path found first.
        for (a, outs) in g {
            for b in outs {
                let mut came_from: BTreeMap<String, String> = BTreeMap::new();
                let mut queue = std::collections::VecDeque::from([b.clone()]);
                while let Some(n) = queue.pop_front() {
                    if &n == a {
                        let mut path = vec![a.clone()];
                        while path.last() != Some(b) {
                            path.push(came_from[path.last().unwrap()].clone());
                        }
                        path.push(a.clone());
                        path.reverse();
                        let steps: Vec<String> = path
                            .windows(2)
                            .map(|w| edges[&(parent.clone(), w[0].clone(), w[1].clone())].clone())
                            .collect();
                        cycles.push(format!(
                            "in `crate::{}`: {}\n    {}",
                            parent.join("::"),
                            path.join(" → "),
                            steps.join("\n    ")
                        ));
                        break;
                    }
                    for c in g.get(&n).into_iter().flatten() {
                        if !came_from.contains_key(c) && c != b {
                            came_from.insert(c.clone(), n.clone());
                            queue.push_back(c.clone());
                        }
                    }
                }
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "module-level import cycles:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn no_oversized_source_file() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let long: Vec<String> = modules(&src)
        .into_iter()
        .filter_map(|(_, f)| {
            let n = std::fs::read_to_string(&f).unwrap().lines().count();
            (n > MAX_FILE_LINES).then(|| format!("{} has {n} lines", f.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines (split them by concept):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_checker_sees_groups_and_relative_paths() {
    let p = paths("use crate::ir::{Builder, shape::{dims_str, X}};\nlet y = super::gemm::pack(x);");
    let names: Vec<String> = p.iter().map(|s| s.join("::")).collect();
    assert_eq!(
        names,
        [
            "crate::ir::Builder",
            "crate::ir::shape::dims_str",
            "crate::ir::shape::X",
            "super::gemm::pack"
        ]
    );
}
