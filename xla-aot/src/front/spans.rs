//! Source positions of every node of a YAML document, by path.
//!
//! Contract: [`SpanIndex::build`] walks the YAML event stream (yaml-rust2, which reports markers)
//! and records the 1-based line and column where each node starts, keyed by its path: `ops`,
//! `ops[3]`, `ops[3].inputs[1]`, and `ops[3].@strides` for the *key* `strides` of that mapping.
//! serde decodes the spec's structure; this index lets later checks point at the exact node. If
//! the event parser rejects the text (serde reports the syntax error in that case), the index is
//! empty and [`SpanIndex::find`] falls back to the nearest recorded ancestor.

use super::diag::Pos;
use std::collections::HashMap;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// Positions by node path.
#[derive(Debug, Default)]
pub struct SpanIndex {
    positions: HashMap<String, Pos>,
}

enum Frame {
    Map { path: String, key: Option<String> },
    Seq { path: String, index: usize },
}

#[derive(Default)]
struct Recorder {
    stack: Vec<Frame>,
    positions: HashMap<String, Pos>,
    root_seen: bool,
}

fn pos_of(mark: Marker) -> Pos {
    Pos {
        line: mark.line(),
        column: mark.col() + 1,
    }
}

impl Recorder {
    /// Handles the start of a node; returns its path if it is a value (not a mapping key).
    fn begin_node(&mut self, scalar_key: Option<&str>, mark: Marker) -> Option<String> {
        let pos = pos_of(mark);
        let path = match self.stack.last_mut() {
            None => {
                if self.root_seen {
                    return None;
                }
                self.root_seen = true;
                String::new()
            }
            Some(Frame::Seq { path, index }) => {
                let p = format!("{path}[{index}]");
                *index += 1;
                p
            }
            Some(Frame::Map { path, key }) => match key.take() {
                None => {
                    let k = scalar_key.unwrap_or("?").to_string();
                    let at = if path.is_empty() {
                        format!("@{k}")
                    } else {
                        format!("{path}.@{k}")
                    };
                    self.positions.entry(at).or_insert(pos);
                    *key = Some(k);
                    return None;
                }
                Some(k) => {
                    if path.is_empty() {
                        k
                    } else {
                        format!("{path}.{k}")
                    }
                }
            },
        };
        self.positions.entry(path.clone()).or_insert(pos);
        Some(path)
    }
}

impl MarkedEventReceiver for Recorder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        match ev {
            Event::Scalar(value, ..) => {
                self.begin_node(Some(&value), mark);
            }
            Event::Alias(_) => {
                self.begin_node(None, mark);
            }
            Event::SequenceStart(..) => {
                // A container used as a mapping key has no useful path; record it as `?`.
                let path = self.begin_node(None, mark).unwrap_or_else(|| "?".into());
                self.stack.push(Frame::Seq { path, index: 0 });
            }
            Event::MappingStart(..) => {
                let path = self.begin_node(None, mark).unwrap_or_else(|| "?".into());
                self.stack.push(Frame::Map { path, key: None });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                self.stack.pop();
            }
            _ => {}
        }
    }
}

impl SpanIndex {
    /// Indexes `source`. Never fails: unparsable text gives a partial or empty index.
    pub fn build(source: &str) -> SpanIndex {
        let mut rec = Recorder::default();
        let mut parser = Parser::new_from_str(source);
        let _ = parser.load(&mut rec, false);
        SpanIndex {
            positions: rec.positions,
        }
    }

    /// The position of `path`, or of its nearest recorded ancestor.
    pub fn find(&self, path: &str) -> Option<Pos> {
        let mut p = path;
        loop {
            if let Some(pos) = self.positions.get(p) {
                return Some(*pos);
            }
            let cut = p.rfind(['.', '['])?;
            p = &p[..cut];
            if p.is_empty() {
                return self.positions.get("").copied();
            }
        }
    }

    /// The position of the key `key` of the mapping at `path`, or of the mapping itself.
    pub fn find_key(&self, path: &str, key: &str) -> Option<Pos> {
        let k = if path.is_empty() {
            format!("@{key}")
        } else {
            format!("{path}.@{key}")
        };
        self.positions.get(&k).copied().or_else(|| self.find(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_block_and_flow_nodes() {
        let src =
            "name: m\nops:\n  - {name: y, op: relu, inputs: [a, b]}\n  - name: z\n    op: exp\n";
        let idx = SpanIndex::build(src);
        assert_eq!(idx.find("name"), Some(Pos { line: 1, column: 7 }));
        assert_eq!(
            idx.find("ops[0].op"),
            Some(Pos {
                line: 3,
                column: 19
            })
        );
        assert_eq!(
            idx.find("ops[0].inputs[1]"),
            Some(Pos {
                line: 3,
                column: 37
            })
        );
        assert_eq!(
            idx.find_key("ops[0]", "op"),
            Some(Pos {
                line: 3,
                column: 15
            })
        );
        assert_eq!(idx.find("ops[1].op"), Some(Pos { line: 5, column: 9 }));
        // Unknown paths fall back to the nearest ancestor.
        assert_eq!(idx.find("ops[1].strides[0]").map(|p| p.line), Some(4));
    }
}
