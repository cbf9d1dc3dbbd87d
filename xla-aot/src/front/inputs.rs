//! Inputs fixed at build time: shapes for dynamic dims, values for named symbolic dims, and
//! inputs frozen into compile-time constants.
//!
//! Contract: an [`InputOverrides`] says, for an imported graph, (1) the whole shape of an input
//! (`--input-shape NAME=D0,D1,...`; NAME may be the input's position), (2) the value of a named
//! symbolic dim wherever it appears (`--dim SYMBOL=N`), and (3) inputs that become constants
//! (`--freeze NAME=VALUE|FILE.npy`), so shape logic and conditions over them fold away. The CLI,
//! a `graph:` spec (`input_shapes:`, `dims:`, `freeze:`), `xla_aot::Build` and CMake all fill the
//! same struct; the importer applies it and reports an override that names no input. The parsers
//! here return a message saying what was expected, for the caller to wrap.

use crate::ir::Literal;
use std::path::PathBuf;

/// An input, by graph name or by position among the run-time inputs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InputRef {
    /// The graph's name of the input.
    Name(String),
    /// Its position (0-based) among the graph inputs that are not initializers.
    Index(usize),
}

impl InputRef {
    /// A position when `s` is a number, else a name.
    pub fn parse(s: &str) -> InputRef {
        match s.parse::<usize>() {
            Ok(i) => InputRef::Index(i),
            Err(_) => InputRef::Name(s.to_string()),
        }
    }

    /// Whether this names the input called `name` at `position`.
    pub fn matches(&self, name: &str, position: usize) -> bool {
        match self {
            InputRef::Name(n) => n == name,
            InputRef::Index(i) => *i == position,
        }
    }
}

impl std::fmt::Display for InputRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InputRef::Name(n) => write!(f, "`{n}`"),
            InputRef::Index(i) => write!(f, "#{i}"),
        }
    }
}

/// The value an input is frozen to.
#[derive(Debug, Clone, PartialEq)]
pub enum Frozen {
    /// Numbers (one for a scalar or to fill the input's shape, else one per element in
    /// row-major order), converted to the input's element type.
    Values(Vec<f64>),
    /// A `.npy` file holding the tensor.
    File(PathBuf),
    /// A tensor given directly (tests, the build API).
    Literal(Literal),
}

/// What the build fixes about a graph's inputs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputOverrides {
    /// Whole input shapes.
    pub shapes: Vec<(InputRef, Vec<usize>)>,
    /// Named symbolic dims.
    pub dims: Vec<(String, usize)>,
    /// Inputs turned into constants.
    pub freeze: Vec<(InputRef, Frozen)>,
}

impl InputOverrides {
    /// Whether nothing is fixed.
    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty() && self.dims.is_empty() && self.freeze.is_empty()
    }

    /// `self` with `other`'s entries taking precedence (the CLI over a spec's).
    pub fn merged_with(&self, other: &InputOverrides) -> InputOverrides {
        let mut out = other.clone();
        for (r, s) in &self.shapes {
            if !out.shapes.iter().any(|(o, _)| o == r) {
                out.shapes.push((r.clone(), s.clone()));
            }
        }
        for (d, n) in &self.dims {
            if !out.dims.iter().any(|(o, _)| o == d) {
                out.dims.push((d.clone(), *n));
            }
        }
        for (r, v) in &self.freeze {
            if !out.freeze.iter().any(|(o, _)| o == r) {
                out.freeze.push((r.clone(), v.clone()));
            }
        }
        out
    }

    /// The shape fixed for the input `name` at `position`, if any.
    pub fn shape_of(&self, name: &str, position: usize) -> Option<&[usize]> {
        self.shapes
            .iter()
            .find(|(r, _)| r.matches(name, position))
            .map(|(_, s)| s.as_slice())
    }

    /// The value of the symbolic dim `symbol`, if fixed.
    pub fn dim(&self, symbol: &str) -> Option<usize> {
        self.dims.iter().find(|(d, _)| d == symbol).map(|(_, n)| *n)
    }

    /// The value the input `name` at `position` is frozen to, if any.
    pub fn frozen(&self, name: &str, position: usize) -> Option<&Frozen> {
        self.freeze
            .iter()
            .find(|(r, _)| r.matches(name, position))
            .map(|(_, v)| v)
    }

    /// The first override that names none of `inputs` (graph names in position order), as a
    /// message listing the inputs.
    pub fn unmatched(&self, inputs: &[String], symbols: &[String]) -> Option<String> {
        let known = |r: &InputRef| inputs.iter().enumerate().any(|(i, n)| r.matches(n, i));
        let list = || {
            if inputs.is_empty() {
                "the graph has no run-time inputs".to_string()
            } else {
                format!("its inputs are {}", inputs.join(", "))
            }
        };
        for (r, _) in &self.shapes {
            if !known(r) {
                return Some(format!("--input-shape names input {r}, but {}", list()));
            }
        }
        for (r, _) in &self.freeze {
            if !known(r) {
                return Some(format!("--freeze names input {r}, but {}", list()));
            }
        }
        for (d, _) in &self.dims {
            if !symbols.contains(d) {
                let have = if symbols.is_empty() {
                    "no input has a symbolic dim".to_string()
                } else {
                    format!("the symbolic dims are {}", symbols.join(", "))
                };
                return Some(format!("--dim names `{d}`, but {have}"));
            }
        }
        None
    }
}

/// Parses `NAME=D0,D1,...` (an empty list after `=` is a scalar).
pub fn parse_input_shape(s: &str) -> Result<(InputRef, Vec<usize>), String> {
    let expected = "NAME=D0,D1,... (e.g. images=1,3,224,224; NAME may be the input's position)";
    let (name, dims) = s
        .split_once('=')
        .filter(|(n, _)| !n.is_empty())
        .ok_or_else(|| format!("`{s}` is not {expected}"))?;
    let dims = if dims.trim().is_empty() {
        Vec::new()
    } else {
        dims.split(',')
            .map(|d| d.trim().parse::<usize>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                format!("`{s}`: the dims must be non-negative integers; expected {expected}")
            })?
    };
    Ok((InputRef::parse(name), dims))
}

/// Parses `SYMBOL=N`.
pub fn parse_dim(s: &str) -> Result<(String, usize), String> {
    let expected = "SYMBOL=N (e.g. batch=1)";
    let (sym, n) = s
        .split_once('=')
        .filter(|(n, _)| !n.is_empty())
        .ok_or_else(|| format!("`{s}` is not {expected}"))?;
    let n = n
        .trim()
        .parse::<usize>()
        .map_err(|_| format!("`{s}`: N must be a non-negative integer; expected {expected}"))?;
    Ok((sym.to_string(), n))
}

/// Parses `NAME=VALUE[,VALUE...]` or `NAME=FILE.npy`.
pub fn parse_freeze(s: &str) -> Result<(InputRef, Frozen), String> {
    let expected = "NAME=VALUE (a number, or numbers separated by commas) or NAME=FILE.npy";
    let (name, v) = s
        .split_once('=')
        .filter(|(n, v)| !n.is_empty() && !v.is_empty())
        .ok_or_else(|| format!("`{s}` is not {expected}"))?;
    let value = if v.ends_with(".npy") {
        Frozen::File(PathBuf::from(v))
    } else {
        Frozen::Values(
            v.split(',')
                .map(|x| x.trim().parse::<f64>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| {
                    format!("`{s}`: `{v}` is neither numbers nor a .npy file; expected {expected}")
                })?,
        )
    };
    Ok((InputRef::parse(name), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers_accept_the_documented_forms_and_explain_the_rest() {
        assert_eq!(
            parse_input_shape("images=1,3,224,224").unwrap(),
            (InputRef::Name("images".into()), vec![1, 3, 224, 224])
        );
        assert_eq!(
            parse_input_shape("0=").unwrap(),
            (InputRef::Index(0), vec![])
        );
        assert!(
            parse_input_shape("x=1,a")
                .unwrap_err()
                .contains("non-negative integers")
        );
        assert!(parse_input_shape("=1").unwrap_err().contains("NAME=D0"));
        assert_eq!(parse_dim("batch=4").unwrap(), ("batch".into(), 4));
        assert!(parse_dim("batch").is_err());
        assert_eq!(
            parse_freeze("rate=2").unwrap(),
            (InputRef::Name("rate".into()), Frozen::Values(vec![2.0]))
        );
        assert_eq!(
            parse_freeze("1=w.npy").unwrap(),
            (InputRef::Index(1), Frozen::File("w.npy".into()))
        );
        assert!(parse_freeze("x=abc").is_err());
    }

    #[test]
    fn later_overrides_win_and_unknown_names_are_reported() {
        let spec = InputOverrides {
            dims: vec![("batch".into(), 1), ("h".into(), 32)],
            ..Default::default()
        };
        let cli = InputOverrides {
            dims: vec![("batch".into(), 8)],
            ..Default::default()
        };
        let m = spec.merged_with(&cli);
        assert_eq!(m.dim("batch"), Some(8));
        assert_eq!(m.dim("h"), Some(32));
        let o = InputOverrides {
            shapes: vec![(InputRef::Name("img".into()), vec![1])],
            ..Default::default()
        };
        let msg = o.unmatched(&["x".into()], &[]).unwrap();
        assert!(msg.contains("`img`") && msg.contains("x"), "{msg}");
        assert!(o.unmatched(&["img".into()], &[]).is_none());
    }
}
