//! A linear pre-scan of YAML text for its nesting depth, run before the YAML parser sees a file.
//!
//! Contract: [`first_too_deep`] returns the 1-based line and column of the first collection that
//! opens past `limit` levels, or `None`. It reads each byte once. Depth counts flow collections
//! (`[`, `{`) outside quotes and comments, plus block nesting: one level per indentation column
//! still open and one per compact `- `/`? ` indicator. It is an estimate: it may count a level
//! more than a parser builds (a sequence item's indentation and its `- `), never fewer, and never
//! counts brackets inside quoted or block scalars. It exists so that a hostile file is refused in
//! linear time, not to validate YAML (the parser still does that).

/// Where the nesting first exceeds `limit` levels: (line, column), both 1-based.
pub fn first_too_deep(text: &str, limit: usize) -> Option<(usize, usize)> {
    let mut flow: usize = 0;
    // Columns of the open block collections.
    let mut block: Vec<usize> = Vec::new();
    // Inside a quoted scalar spanning lines: its quote byte.
    let mut quote: Option<u8> = None;
    // A block scalar (`|`, `>`) started at this indentation: deeper lines are its text.
    let mut block_scalar: Option<usize> = None;
    for (ln, line) in text.lines().enumerate() {
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|&&b| b == b' ').count();
        if let Some(parent) = block_scalar {
            if indent > parent || indent == bytes.len() {
                continue;
            }
            block_scalar = None;
        }
        let mut i = 0;
        if quote.is_none() && flow == 0 {
            if indent == bytes.len() || bytes[indent] == b'#' {
                continue;
            }
            while block.last().is_some_and(|&c| c > indent) {
                block.pop();
            }
            if block.last() != Some(&indent) {
                block.push(indent);
            }
            i = indent;
            // Compact nested collections: `- - x`, `? - x`.
            while i + 1 < bytes.len() && matches!(bytes[i], b'-' | b'?') && bytes[i + 1] == b' ' {
                i += 2;
                while i < bytes.len() && bytes[i] == b' ' {
                    i += 1;
                }
                block.push(i);
                if block.len() > limit {
                    return Some((ln + 1, i + 1));
                }
            }
            if block.len() > limit {
                return Some((ln + 1, indent + 1));
            }
        }
        let mut last_token = 0u8;
        while i < bytes.len() {
            let b = bytes[i];
            if let Some(q) = quote {
                if q == b'"' && b == b'\\' {
                    i += 2;
                    continue;
                }
                if b == q {
                    if q == b'\'' && bytes.get(i + 1) == Some(&b'\'') {
                        i += 2;
                        continue;
                    }
                    quote = None;
                }
                i += 1;
                continue;
            }
            let after_space = i == 0 || matches!(bytes[i - 1], b' ' | b'\t');
            match b {
                b'#' if after_space => break,
                b'"' | b'\'' if after_space || matches!(last_token, b'[' | b'{' | b',' | b':') => {
                    quote = Some(b)
                }
                b'[' | b'{' => {
                    flow += 1;
                    if flow + block.len() > limit {
                        return Some((ln + 1, i + 1));
                    }
                }
                b']' | b'}' => flow = flow.saturating_sub(1),
                _ => {}
            }
            if !matches!(b, b' ' | b'\t') {
                last_token = b;
            }
            i += 1;
        }
        // `key: |` or `- >-`: the lines below, indented deeper, are text.
        if flow == 0 && quote.is_none() {
            let trimmed = line.split(" #").next().unwrap_or("").trim_end();
            let tail =
                trimmed.trim_end_matches(|c: char| c.is_ascii_digit() || c == '-' || c == '+');
            if (tail.ends_with('|') || tail.ends_with('>'))
                && (tail.len() == 1 || tail[..tail.len() - 1].ends_with([' ', ':']))
            {
                block_scalar = Some(indent);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::first_too_deep;

    #[test]
    fn a_spec_is_shallow() {
        let spec = "name: m\ninputs:\n  - {name: x, dtype: f32, shape: [1, 3]}\nops:\n  - name: y\n    op: relu\n    inputs: [x]\n";
        // Four levels (root, `inputs`, the item, `shape`); the item's indentation and its `- `
        // count once each.
        assert_eq!(first_too_deep(spec, 5), None);
        assert_eq!(first_too_deep(spec, 4), Some((3, 34)));
    }

    #[test]
    fn flow_nesting_is_found_where_it_passes_the_limit() {
        let text = format!("inputs: {}\n", "[".repeat(100_000));
        assert_eq!(first_too_deep(&text, 64), Some((1, 9 + 63)));
    }

    #[test]
    fn compact_block_nesting_counts() {
        let text = format!("{}x\n", "- ".repeat(100));
        assert_eq!(first_too_deep(&text, 64), Some((1, 2 * 64 + 1)));
    }

    #[test]
    fn brackets_in_quotes_comments_and_block_scalars_do_not_count() {
        let text = "a: '[[[['\nb: \"[[[[\\\"[[\"\nc: x # [[[[\nd: |\n  [[[[[[\n  {{{{\ne: [1]\n";
        assert_eq!(first_too_deep(text, 3), None);
    }
}
