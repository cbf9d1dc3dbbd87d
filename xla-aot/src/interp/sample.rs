//! The reference definitions of `top-k` and `sample`, and the Philox-4x32-10 generator behind it.
//!
//! Contract: [`philox4x32_10`] is the counter-based generator of Salmon et al. (SC'11), checked
//! against Random123's published known-answer vectors. [`sample_row`] is *the* definition of the
//! `sample` op (docs/sampling.md): every step is an f32 operation in a fixed order (no f64, no
//! reassociation), so the compiled kernels, which follow the same steps, draw the same token on
//! every target. [`top_k_row`] orders by value, then by index. This file shares no code with the
//! backends.

/// Philox-4x32 round multipliers and Weyl key increments (Random123's constants).
const PHILOX_M0: u32 = 0xD251_1F53;
const PHILOX_M1: u32 = 0xCD9E_8D57;
const PHILOX_W0: u32 = 0x9E37_79B9;
const PHILOX_W1: u32 = 0xBB67_AE85;
/// Rounds of Philox-4x32-10.
const PHILOX_ROUNDS: usize = 10;

/// Philox-4x32-10 of `counter` under `key`.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for r in 0..PHILOX_ROUNDS {
        if r > 0 {
            k[0] = k[0].wrapping_add(PHILOX_W0);
            k[1] = k[1].wrapping_add(PHILOX_W1);
        }
        let p0 = (PHILOX_M0 as u64) * (c[0] as u64);
        let p1 = (PHILOX_M1 as u64) * (c[2] as u64);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// The uniform number in [0, 1) of draw (`seed`, `step`, `row`): the top 24 bits of the first
/// Philox word, times 2^-24 (exact in f32).
pub fn uniform(seed: i32, step: i32, row: u32) -> f32 {
    let r = philox4x32_10([step as u32, row, 0, 0], [seed as u32, 0]);
    (r[0] >> 8) as f32 * (1.0 / 16_777_216.0)
}

/// A total order on f32 as i32 keys: numbers in numeric order (-0 just below +0), every NaN
/// above +inf.
pub fn order_key(x: f32) -> i32 {
    if x.is_nan() {
        return i32::MAX;
    }
    let b = x.to_bits() as i32;
    if b >= 0 { b } else { b ^ i32::MAX }
}

/// The `k` largest of `row` (by [`order_key`], ties to the lower index), largest first, as
/// (value, index) pairs.
pub fn top_k_row(row: &[f32], k: usize) -> Vec<(f32, usize)> {
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| order_key(row[b]).cmp(&order_key(row[a])).then(a.cmp(&b)));
    idx.into_iter().take(k).map(|i| (row[i], i)).collect()
}

/// The largest key `t` with `count(keys >= t) >= k` (the k-th largest key), by bisection over
/// the i32 range, exactly as the kernels search it.
fn kth_largest_key(keys: &[i32], k: usize) -> i32 {
    // Invariant: count(>= lo) >= k, count(>= hi) < k (hi may be one past the maximum).
    let mut lo = i32::MIN as i64;
    let mut hi = i32::MAX as i64 + 1;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let n = keys.iter().filter(|&&x| x as i64 >= mid).count();
        if n >= k {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo as i32
}

/// `Σ w_i` over the weights at or above `t` (bit patterns of non-negative f32 compare as
/// integers), summed in index order in f32.
fn sum_at_least(w: &[f32], t: u32) -> f32 {
    let mut s = 0.0f32;
    for &x in w {
        if x.to_bits() >= t {
            s += x;
        }
    }
    s
}

/// The weight of a kept z: exp(z - m); exactly 1 at the maximum (so a +inf maximum, or a row of
/// -inf, still has weight), and 0 below the smallest normal f32 (kernels flush subnormals).
fn weight(z: f32, m: f32) -> f32 {
    if z == m {
        return 1.0;
    }
    let e = (z - m).exp();
    if e < f32::MIN_POSITIVE { 0.0 } else { e }
}

/// The token `sample` draws from one row of logits (docs/sampling.md).
pub fn sample_row(
    logits: &[f32],
    seed: i32,
    step: i32,
    row: u32,
    temperature: f32,
    top_k: i32,
    top_p: f32,
) -> i32 {
    let v = logits.len();
    // Greedy: temperature <= 0 (or NaN), or top_k == 1: the first maximum (NaN counts as the
    // maximum, as in argmax).
    let hot = temperature > 0.0; // false for NaN too
    let greedy = !hot || top_k == 1;
    if greedy {
        let mut best = 0usize;
        for i in 1..v {
            let (x, b) = (logits[i], logits[best]);
            if (x > b || x.is_nan()) && !b.is_nan() {
                best = i;
            }
        }
        return best as i32;
    }
    // 1. Temperature.
    let z: Vec<f32> = logits.iter().map(|&x| x / temperature).collect();
    let mut m = f32::NEG_INFINITY;
    for &x in &z {
        if x > m {
            m = x;
        }
    }
    // 2. Top-k: keep the values at or above the k-th largest (ties at the boundary all stay).
    let keys: Vec<i32> = z.iter().map(|&x| order_key(x)).collect();
    let tau = if top_k > 0 && (top_k as usize) < v {
        kth_largest_key(&keys, top_k as usize)
    } else {
        i32::MIN
    };
    // 3. Softmax weights, unnormalised, in f32.
    let mut w: Vec<f32> = z
        .iter()
        .zip(&keys)
        .map(|(&x, &key)| if key >= tau { weight(x, m) } else { 0.0 })
        .collect();
    let mut total = sum_at_least(&w, 0);
    // 4. Top-p: the largest threshold t whose weights at or above it still sum to top_p · total.
    if top_p > 0.0 && top_p < 1.0 {
        let need = top_p * total;
        let max_bits = w.iter().map(|x| x.to_bits()).max().unwrap_or(0);
        // Invariant: sum(>= lo) >= need, sum(>= hi) < need.
        let (mut lo, mut hi) = (0u64, max_bits as u64 + 1);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if sum_at_least(&w, mid as u32) >= need {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let t = lo as u32;
        for x in w.iter_mut() {
            if x.to_bits() < t {
                *x = 0.0;
            }
        }
        total = sum_at_least(&w, 0);
    }
    // 5. One draw, inverse CDF in index order.
    let target = uniform(seed, step, row) * total;
    let mut acc = 0.0f32;
    let mut last = 0usize;
    for (i, &x) in w.iter().enumerate() {
        if x > 0.0 {
            acc += x;
            last = i;
            if acc > target {
                return i as i32;
            }
        }
    }
    last as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_matches_random123_known_answers() {
        // Random123 1.09, tests/kat_vectors: philox4x32 10.
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn order_keys_order_floats() {
        let xs = [
            f32::NEG_INFINITY,
            -2.0,
            -0.0,
            0.0,
            1e-30,
            3.0,
            f32::INFINITY,
            f32::NAN,
        ];
        for w in xs.windows(2) {
            assert!(order_key(w[0]) < order_key(w[1]), "{w:?}");
        }
    }

    #[test]
    fn filters_keep_what_they_promise() {
        let logits = [1.0, 3.0, 2.0, 3.0, -1.0];
        // top_k = 2 keeps the two 3.0s only.
        for s in 0..200 {
            let t = sample_row(&logits, 7, s, 0, 1.0, 2, 1.0);
            assert!(t == 1 || t == 3, "{t}");
        }
        // A tiny top_p keeps the most probable token (both tied ones).
        for s in 0..200 {
            let t = sample_row(&logits, 7, s, 0, 1.0, 0, 0.01);
            assert!(t == 1 || t == 3, "{t}");
        }
        // Greedy.
        assert_eq!(sample_row(&logits, 1, 2, 3, 0.0, 0, 1.0), 1);
        assert_eq!(top_k_row(&logits, 3), vec![(3.0, 1), (3.0, 3), (2.0, 2)]);
    }
}
