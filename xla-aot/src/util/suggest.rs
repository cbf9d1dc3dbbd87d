//! "Did you mean ...?" hints: the nearest candidate by edit distance.

/// Largest edit distance still worth suggesting, relative to the word: a third of its length, at
/// least 1 and at most 3 (beyond that, suggestions are noise rather than typo fixes).
fn max_distance(word: &str) -> usize {
    (word.chars().count() / 3).clamp(1, 3)
}

/// Edit distance between two strings (by chars): insertions, deletions, substitutions and
/// transpositions of neighbours (optimal string alignment), since `rleu` for `relu` is the most
/// common typo.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        d[i * w] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(w) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j - 1] + cost)
                .min(d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}

/// The candidate nearest to `word`, if any is close enough to be a likely typo. Ties go to the
/// first candidate, so results are deterministic for a deterministic candidate order.
pub fn nearest<'a, I>(word: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let lower = word.to_ascii_lowercase();
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = edit_distance(&lower, &c.to_ascii_lowercase());
        if d <= max_distance(word) && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        let ops = ["relu", "relu6", "reshape", "conv2d"];
        assert_eq!(nearest("rleu", ops), Some("relu"));
        assert_eq!(nearest("Conv2D", ops), Some("conv2d"));
        assert_eq!(nearest("softmaxx", ops), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
