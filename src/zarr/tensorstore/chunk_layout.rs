//! Choosing chunk shapes for a new array from TensorStore-style
//! `chunk_layout` constraints.
//!
//! Reference: TensorStore's `ChunkLayout` and `ChunkLayout/Grid` JSON
//! (`shape`, `aspect_ratio`, `elements`) and the "Selection of chunk layout
//! when creating a new array" sections of the `zarr` and `zarr3` driver
//! documents (`reference/tensorstore-zarr-driver.rst`,
//! `reference/tensorstore-zarr3-driver.txt`), whose worked examples are the
//! unit tests below.
//!
//! The rules, as TensorStore 0.1.86 applies them (checked against it on
//! thousands of random constraint sets by `tests/python/test_api_nodes.py`):
//!
//! - A `shape` entry of `0` leaves the dimension unconstrained, `-1` means
//!   the full extent of the domain; when two members constrain one entry
//!   (`chunk` and `read_chunk`, say), an explicit size wins over `0` and
//!   `-1`, and two different sizes are an error.
//! - An `aspect_ratio` entry of `0` is unconstrained (`1`).
//! - Unconstrained dimensions get `max(1, floor(factor × aspect))` elements,
//!   capped at the domain's extent, with the largest `factor` (bisected to
//!   float precision) whose chunk has at most `elements` elements (default
//!   [`DEFAULT_ELEMENTS`], 2^20 — the "one million" of the documents).
//! - zarr3 has two grids. The read chunk is chosen first from the read
//!   constraints alone; where the write size is explicit, candidate read
//!   sizes snap to its nearest divisor (a read `-1` is the write size,
//!   capped at the extent, snapped the same way). The write chunk is then
//!   chosen from the write constraints (default 2^20 elements again) with
//!   every candidate size rounded to the nearest multiple of the read chunk
//!   (ties down, at least one); a write `-1` is the extent rounded so. When
//!   the two differ, the array gets a `sharding_indexed` codec.
//! - zarr v2 has one grid: read and write constraints are combined.

use serde_json::Value;

/// Target elements per chunk when no `elements` constraint is given.
pub const DEFAULT_ELEMENTS: u64 = 1 << 20;

/// A constraint set that cannot be satisfied or does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct LayoutError {
    /// The offending member (`chunk_layout.read_chunk.shape[1]`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> LayoutError {
    LayoutError { field: field.into(), message: message.into() }
}

/// Constraints on one chunk grid (`ChunkLayout/Grid`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GridConstraints {
    /// Per dimension: `0` unconstrained, `-1` full extent, else the size.
    pub shape: Option<Vec<i64>>,
    /// Per dimension: `0` unconstrained, else the relative size.
    pub aspect_ratio: Option<Vec<f64>>,
    /// Target number of elements per chunk.
    pub elements: Option<u64>,
}

impl GridConstraints {
    /// Whether nothing is constrained.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.shape.as_ref().is_none_or(|s| s.iter().all(|&v| v == 0))
            && self.aspect_ratio.as_ref().is_none_or(|a| a.iter().all(|&v| v == 0.0))
            && self.elements.is_none()
    }

    /// Parses a `ChunkLayout/Grid` object (`shape`, `aspect_ratio`,
    /// `elements` and their `*_soft_constraint` forms, which are taken as
    /// the same preference).
    ///
    /// # Errors
    /// A member of the wrong type or rank, naming it.
    pub fn from_json(value: &Value, path: &str, rank: usize) -> Result<Self, LayoutError> {
        let Value::Object(map) = value else { return Err(err(path, "expected an object")) };
        let mut out = Self::default();
        for (k, v) in map {
            let field = format!("{path}.{k}");
            match k.as_str() {
                "shape" | "shape_soft_constraint" => {
                    let items = rank_array(v, &field, rank)?;
                    let shape = items
                        .iter()
                        .enumerate()
                        .map(|(i, x)| match x {
                            Value::Null => Ok(0),
                            _ => x
                                .as_i64()
                                .filter(|&n| n >= -1)
                                .ok_or_else(|| err(format!("{field}[{i}]"), "expected an integer >= -1 or null")),
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    merge_shape(&mut out.shape, shape, &field)?;
                }
                "aspect_ratio" | "aspect_ratio_soft_constraint" => {
                    let items = rank_array(v, &field, rank)?;
                    let ratio = items
                        .iter()
                        .enumerate()
                        .map(|(i, x)| match x {
                            Value::Null => Ok(0.0),
                            _ => x
                                .as_f64()
                                .filter(|f| f.is_finite() && *f >= 0.0)
                                .ok_or_else(|| err(format!("{field}[{i}]"), "expected a number >= 0 or null")),
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    if out.aspect_ratio.as_ref().is_some_and(|a| a != &ratio) {
                        return Err(err(field, "conflicts with another aspect_ratio constraint"));
                    }
                    out.aspect_ratio = Some(ratio);
                }
                "elements" | "elements_soft_constraint" => match v {
                    Value::Null => {}
                    _ => {
                        let n = v
                            .as_u64()
                            .filter(|&n| n >= 1)
                            .ok_or_else(|| err(&field, "expected a positive integer or null"))?;
                        if out.elements.is_some_and(|e| e != n) {
                            return Err(err(field, "conflicts with another elements constraint"));
                        }
                        out.elements = Some(n);
                    }
                },
                _ => return Err(err(field, "unknown member; expected shape, aspect_ratio or elements")),
            }
        }
        Ok(out)
    }

    /// Combines two constraint sets on the same grid (`chunk` with
    /// `read_chunk`, say).
    ///
    /// # Errors
    /// Two different non-zero values for one entry.
    pub fn merge(&mut self, other: &Self, field: &str) -> Result<(), LayoutError> {
        if let Some(s) = &other.shape {
            merge_shape(&mut self.shape, s.clone(), &format!("{field}.shape"))?;
        }
        if let Some(a) = &other.aspect_ratio {
            let merged = match &self.aspect_ratio {
                None => a.clone(),
                Some(mine) => mine
                    .iter()
                    .zip(a)
                    .enumerate()
                    .map(|(i, (&x, &y))| match (x, y) {
                        (x, y) if x == 0.0 || x == y => Ok(y.max(x)),
                        (x, 0.0) => Ok(x),
                        _ => Err(err(format!("{field}.aspect_ratio[{i}]"), format!("conflicting values {x} and {y}"))),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            };
            self.aspect_ratio = Some(merged);
        }
        if let Some(e) = other.elements {
            if self.elements.is_some_and(|mine| mine != e) {
                return Err(err(format!("{field}.elements"), "conflicting values"));
            }
            self.elements = Some(e);
        }
        Ok(())
    }
}

fn rank_array<'a>(v: &'a Value, field: &str, rank: usize) -> Result<&'a Vec<Value>, LayoutError> {
    let Value::Array(items) = v else { return Err(err(field, "expected an array")) };
    if items.len() != rank {
        return Err(err(field, format!("expected {rank} entries (the array's rank), got {}", items.len())));
    }
    Ok(items)
}

fn merge_shape(into: &mut Option<Vec<i64>>, shape: Vec<i64>, field: &str) -> Result<(), LayoutError> {
    let merged = match into.as_ref() {
        None => shape,
        Some(mine) => mine
            .iter()
            .zip(&shape)
            .enumerate()
            .map(|(i, (&x, &y))| match (x, y) {
                // An explicit size wins over "unconstrained" and over "the full extent".
                (0 | -1, y) if y != 0 => Ok(y),
                (x, 0 | -1) => Ok(x),
                (x, y) if x == y => Ok(x),
                _ => Err(err(format!("{field}[{i}]"), format!("conflicting chunk sizes {x} and {y}"))),
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    *into = Some(merged);
    Ok(())
}

/// The hard sizes of a grid: `0` where unconstrained.
fn initial_shape(c: &GridConstraints, domain: &[u64]) -> Vec<u64> {
    match &c.shape {
        None => vec![0; domain.len()],
        Some(s) => s
            .iter()
            .zip(domain)
            .map(|(&v, &d)| match v {
                -1 => d.max(1),
                v => u64::try_from(v).unwrap_or(0),
            })
            .collect(),
    }
}

fn aspect(c: &GridConstraints, rank: usize) -> Vec<f64> {
    match &c.aspect_ratio {
        Some(a) => a.iter().map(|&x| if x == 0.0 { 1.0 } else { x }).collect(),
        None => vec![1.0; rank],
    }
}

/// Fills the zero entries of `chunk` from the aspect ratio so the chunk
/// has at most `target` elements (as close as the floors allow), each entry
/// capped at `max_size` and passed through `map` (rounding to a multiple).
fn from_aspect_ratio(
    aspect: &[f64],
    chunk: &mut [u64],
    target: u64,
    max_size: &[u64],
    map: &dyn Fn(usize, u64) -> u64,
) {
    let rank = chunk.len();
    let fixed: Vec<bool> = chunk.iter().map(|&c| c != 0).collect();
    if fixed.iter().all(|&f| f) {
        return;
    }
    #[allow(clippy::cast_precision_loss)]
    let max: Vec<f64> = max_size.iter().map(|&m| (m.max(1) as f64).min(target as f64)).collect();
    let size = |i: usize, factor: f64| -> u64 {
        if fixed[i] {
            return chunk[i];
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let s = (aspect[i] * factor).min(max[i]) as u64;
        map(i, s.max(1))
    };
    let total = |factor: f64| -> u64 {
        (0..rank).try_fold(1u64, |acc, i| acc.checked_mul(size(i, factor))).unwrap_or(u64::MAX)
    };
    let mut min_factor = f64::INFINITY;
    let mut max_factor: f64 = 0.0;
    for i in (0..rank).filter(|&i| !fixed[i]) {
        min_factor = min_factor.min(0.5 / aspect[i]);
        max_factor = max_factor.max(max[i] / aspect[i]);
    }
    max_factor *= 2.0;
    let mut max_elements = total(max_factor);
    // Bisect to float precision: a chunk size changes at any factor, and
    // windows between two sizes can be narrower than 1/aspect.
    for _ in 0..200 {
        let mid = min_factor + (max_factor - min_factor) / 2.0;
        if mid <= min_factor || mid >= max_factor {
            break;
        }
        let mid_elements = total(mid);
        if mid_elements >= target {
            max_factor = mid;
            max_elements = mid_elements;
        }
        if mid_elements <= target {
            min_factor = mid;
        }
    }
    let factor = if max_elements == target { max_factor } else { min_factor };
    let chosen: Vec<u64> = (0..rank).map(|i| size(i, factor)).collect();
    chunk.copy_from_slice(&chosen);
}

/// The divisors of `n` in increasing order, from its prime factors
/// ([`prime_factors`]: microseconds for any `u64`, where trying every
/// number up to `√n` took minutes for a size near 2^62). At most 103,680 of
/// them (the most any `u64` has).
fn divisors(n: u64) -> Vec<u64> {
    let mut factors = prime_factors(n);
    factors.sort_unstable();
    let mut out = vec![1u64];
    let mut i = 0;
    while i < factors.len() {
        let p = factors[i];
        let k = factors[i..].iter().take_while(|&&f| f == p).count();
        let before = out.len();
        let mut power = 1u64;
        for _ in 0..k {
            power *= p;
            for j in 0..before {
                out.push(out[j] * power);
            }
        }
        i += k;
    }
    out.sort_unstable();
    out
}

/// The divisor in `sorted` (the divisors of a number) nearest to `s`, the
/// smaller one on a tie.
fn nearest_in(sorted: &[u64], s: u64) -> u64 {
    let at = sorted.partition_point(|&d| d < s);
    let above = sorted.get(at).copied();
    let below = at.checked_sub(1).map(|i| sorted[i]);
    match (below, above) {
        (Some(b), Some(a)) if s - b <= a - s => b,
        (_, Some(a)) => a,
        (Some(b), None) => b,
        (None, None) => 1,
    }
}

fn mul_mod(a: u64, b: u64, m: u64) -> u64 {
    // Lossless: the product of two values below `m` fits in 128 bits and
    // the remainder is below `m`.
    #[allow(clippy::cast_possible_truncation)]
    let r = (u128::from(a) * u128::from(b) % u128::from(m)) as u64;
    r
}

fn pow_mod(mut b: u64, mut e: u64, m: u64) -> u64 {
    let mut r = 1 % m;
    b %= m;
    while e > 0 {
        if e & 1 == 1 {
            r = mul_mod(r, b, m);
        }
        b = mul_mod(b, b, m);
        e >>= 1;
    }
    r
}

/// Miller–Rabin with the first twelve primes as witnesses: exact for every
/// `u64`.
fn is_prime(n: u64) -> bool {
    const WITNESSES: [u64; 12] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37];
    if n < 2 {
        return false;
    }
    for p in WITNESSES {
        if n % p == 0 {
            return n == p;
        }
    }
    let (mut d, mut r) = (n - 1, 0);
    while d % 2 == 0 {
        d /= 2;
        r += 1;
    }
    'witness: for a in WITNESSES {
        let mut x = pow_mod(a, d, n);
        if x == 1 || x == n - 1 {
            continue;
        }
        for _ in 1..r {
            x = mul_mod(x, x, n);
            if x == n - 1 {
                continue 'witness;
            }
        }
        return false;
    }
    true
}

/// A non-trivial factor of `n` (odd, composite, no factor below 40), by
/// Pollard's rho with Floyd's cycle finding, over increasing constants.
fn rho_factor(n: u64) -> u64 {
    for c in 1..u64::MAX {
        let f = |x: u64| (mul_mod(x, x, n) + c) % n;
        let (mut x, mut y, mut d) = (2u64, 2u64, 1u64);
        while d == 1 {
            x = f(x);
            y = f(f(y));
            d = gcd(x.abs_diff(y), n);
        }
        if d != n {
            return d;
        }
    }
    n
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The prime factors of `n` (with repeats, unordered; none for 0 and 1).
fn prime_factors(n: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut n = n;
    if n < 2 {
        return out;
    }
    for p in [2u64, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37] {
        while n % p == 0 {
            out.push(p);
            n /= p;
        }
    }
    let mut pending = vec![n];
    while let Some(m) = pending.pop() {
        if m == 1 {
            continue;
        }
        if is_prime(m) {
            out.push(m);
            continue;
        }
        let d = rho_factor(m);
        pending.push(d);
        pending.push(m / d);
    }
    out
}

/// Chooses one chunk shape (zarr v2, or zarr3 without sharding).
#[must_use]
pub fn choose_chunk_shape(c: &GridConstraints, domain: &[u64]) -> Vec<u64> {
    let mut chunk = initial_shape(c, domain);
    let target = c.elements.unwrap_or(DEFAULT_ELEMENTS);
    from_aspect_ratio(&aspect(c, domain.len()), &mut chunk, target, domain, &|_, s| s);
    chunk
}

/// Chooses the read (inner) and write (stored) chunk shapes of a zarr3
/// array; they differ when sharding is needed.
///
/// # Errors
/// Explicit read and write sizes where the write size is not a multiple of
/// the read size.
pub fn choose_read_write(
    read: &GridConstraints,
    write: &GridConstraints,
    domain: &[u64],
) -> Result<(Vec<u64>, Vec<u64>), LayoutError> {
    let rank = domain.len();
    let write_hard = initial_shape(write, domain);
    // A write size of -1 (the full extent) is a target, not a hard size: it
    // becomes the nearest multiple of the read chunk.
    let write_full: Vec<bool> = (0..rank).map(|i| write.shape.as_ref().is_some_and(|s| s[i] == -1)).collect();
    // A read size of -1 is the full extent, but no more than an explicit write size.
    let read_extent: Vec<u64> =
        domain.iter().zip(&write_hard).map(|(&d, &w)| if w == 0 { d.max(1) } else { w.min(d.max(1)) }).collect();
    let mut read_chunk = initial_shape(read, &read_extent);
    for i in 0..rank {
        // ... and, like every unconstrained read size, a divisor of an explicit write size.
        if read.shape.as_ref().is_some_and(|s| s[i] == -1) && write_hard[i] != 0 && !write_full[i] {
            read_chunk[i] = nearest_in(&divisors(write_hard[i]), read_chunk[i]);
        }
    }
    for i in 0..rank {
        let (r, w) = (read_chunk[i], write_hard[i]);
        if r != 0 && w != 0 && w % r != 0 && !write_full[i] {
            return Err(err(
                format!("chunk_layout.write_chunk.shape[{i}]"),
                format!("incompatible chunk size constraints for dimension {i}: read size {r}, write size {w} (the write size must be a multiple of the read size)"),
            ));
        }
    }
    // The read chunk, from the read constraints alone; in a dimension with
    // an explicit write size, each candidate size is snapped to the nearest
    // divisor of it (so the write chunk stays a multiple).
    let read_target = read.elements.unwrap_or(DEFAULT_ELEMENTS);
    let divisors_of: Vec<Vec<u64>> =
        write_hard.iter().map(|&w| if w == 0 { Vec::new() } else { divisors(w) }).collect();
    let nearest_divisor =
        move |i: usize, s: u64| if divisors_of[i].is_empty() { s } else { nearest_in(&divisors_of[i], s) };
    from_aspect_ratio(&aspect(read, rank), &mut read_chunk, read_target, domain, &nearest_divisor);
    // The write chunk: a multiple of the read chunk in every free
    // dimension (the nearest multiple of the aspect-ratio size, ties down,
    // at least one), grown towards the write elements (default 2^20,
    // so a small read chunk gets a sharded write chunk of the usual size).
    let mut write_chunk = write_hard;
    let target = write.elements.unwrap_or(DEFAULT_ELEMENTS);
    let rc = read_chunk.clone();
    let nearest_multiple = move |i: usize, s: u64| {
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let k = ((s as f64) / (rc[i] as f64) - 0.5).ceil() as u64;
        k.max(1) * rc[i]
    };
    for i in (0..rank).filter(|&i| write_full[i]) {
        write_chunk[i] = nearest_multiple(i, write_chunk[i]);
    }
    from_aspect_ratio(&aspect(write, rank), &mut write_chunk, target, domain, &nearest_multiple);
    Ok((read_chunk, write_chunk))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn grid(v: Value, rank: usize) -> GridConstraints {
        GridConstraints::from_json(&v, "g", rank).unwrap()
    }

    const DOMAIN: [u64; 3] = [1000, 2000, 3000];

    // The worked examples of reference/tensorstore-zarr-driver.rst.
    /// The divisor nearest `s` by trying every number (the definition).
    fn nearest_by_trial(n: u64, s: u64) -> u64 {
        (1..=n).filter(|d| n % d == 0).min_by_key(|&d| (d.abs_diff(s), d)).unwrap_or(1)
    }

    #[test]
    fn nearest_divisors_are_the_definitions() {
        for n in 1..=600u64 {
            let all = divisors(n);
            assert_eq!(all, (1..=n).filter(|d| n % d == 0).collect::<Vec<_>>(), "divisors of {n}");
            for s in [0, 1, 2, 7, 24, 25, 100, 599, 1000] {
                assert_eq!(nearest_in(&all, s), nearest_by_trial(n, s), "n {n}, s {s}");
            }
        }
        // Sizes near 2^62 (round 12, a black-box attack: trying every number up to √n took
        // minutes on the async workers): a prime, a power of two, two large primes, the most
        // divisors a u64 has.
        let mersenne = (1u64 << 61) - 1;
        assert_eq!(divisors(mersenne), [1, mersenne]);
        assert_eq!(divisors(1 << 62).len(), 63);
        let (p, q) = (4_294_967_291u64, 4_294_967_279u64);
        assert_eq!(divisors(p * q), [1, q, p, p * q]);
        let most = 897_612_484_786_617_600u64;
        assert_eq!(divisors(most).len(), 103_680);
        assert_eq!(nearest_in(&divisors(most), 1001), 1001); // 7 × 11 × 13
        for &n in &[u64::MAX, u64::MAX - 1, 999_999_999_999_999_989, 1 << 63] {
            let f = prime_factors(n);
            assert_eq!(f.iter().product::<u64>(), n, "{n}: {f:?}");
            assert!(f.iter().all(|&p| is_prime(p)), "{n}: {f:?}");
        }
    }

    #[test]
    fn zarr_driver_examples() {
        assert_eq!(choose_chunk_shape(&GridConstraints::default(), &DOMAIN), [101, 101, 101]);
        assert_eq!(choose_chunk_shape(&grid(json!({"shape": [100, 200, 300]}), 3), &DOMAIN), [100, 200, 300]);
        assert_eq!(choose_chunk_shape(&grid(json!({"aspect_ratio": [1, 2, 2]}), 3), &DOMAIN), [64, 128, 128]);
        assert_eq!(
            choose_chunk_shape(&grid(json!({"aspect_ratio": [1, 2, 2], "elements": 2_000_000}), 3), &DOMAIN),
            [79, 159, 159]
        );
    }

    // The worked examples of reference/tensorstore-zarr3-driver.txt.
    #[test]
    fn zarr3_driver_examples() {
        let none = GridConstraints::default();
        assert_eq!(choose_read_write(&none, &none, &DOMAIN).unwrap(), (vec![101; 3], vec![101; 3]));
        let read = grid(json!({"aspect_ratio": [2, 1, 1], "elements": 2_000_000}), 3);
        let write = grid(json!({"aspect_ratio": [2, 1, 1], "elements": 1_000_000_000}), 3);
        assert_eq!(choose_read_write(&read, &write, &DOMAIN).unwrap(), (vec![200, 100, 100], vec![1000, 1000, 1000]));
        let read = grid(json!({"shape": [64, 64, 64]}), 3);
        let write = grid(json!({"shape": [512, 512, 512]}), 3);
        assert_eq!(choose_read_write(&read, &write, &DOMAIN).unwrap(), (vec![64; 3], vec![512; 3]));
    }

    // Cases checked against TensorStore 0.1.86 (tests/python/test_api_nodes.py
    // compares many more through the server).
    #[test]
    fn tensorstore_cases() {
        let none = GridConstraints::default();
        assert_eq!(choose_chunk_shape(&none, &[100, 100, 3000]), [100, 100, 104]);
        assert_eq!(choose_chunk_shape(&none, &[100_000, 5]), [100_000, 5]);
        assert_eq!(
            choose_chunk_shape(&grid(json!({"aspect_ratio": [1, 2, 1, 0]}), 4), &[100_000, 100, 1, 10]),
            [1048, 100, 1, 10]
        );
        assert_eq!(choose_chunk_shape(&grid(json!({"elements": 1000}), 3), &[3000, 1, 3000]), [31, 1, 31]);
        let write = grid(json!({"shape": [16, 7, 100, 0]}), 4);
        assert_eq!(
            choose_read_write(&none, &write, &[1, 10, 3000, 5]).unwrap(),
            (vec![1, 7, 100, 5], vec![16, 7, 100, 5])
        );
        let read = grid(json!({"aspect_ratio": [1.5, 2, 0, 0]}), 4);
        let write = grid(json!({"elements": 2_000_000}), 4);
        assert_eq!(
            choose_read_write(&read, &write, &[100, 100_000, 100, 1]).unwrap(),
            (vec![100, 145, 72, 1], vec![100, 145, 72, 1])
        );
    }

    #[test]
    fn bad_constraints_are_named() {
        let e = GridConstraints::from_json(&json!({"shape": [1, 2]}), "chunk_layout.chunk", 3).unwrap_err();
        assert_eq!(e.field, "chunk_layout.chunk.shape");
        let e = GridConstraints::from_json(&json!({"shape": [1, -2]}), "c", 2).unwrap_err();
        assert_eq!(e.field, "c.shape[1]");
        let e = GridConstraints::from_json(&json!({"elements": 0}), "c", 2).unwrap_err();
        assert_eq!(e.field, "c.elements");
        let e = GridConstraints::from_json(&json!({"size": 3}), "c", 2).unwrap_err();
        assert_eq!(e.field, "c.size");
        let read = grid(json!({"shape": [7]}), 1);
        let write = grid(json!({"shape": [64]}), 1);
        let e = choose_read_write(&read, &write, &[100]).unwrap_err();
        assert!(e.message.contains("read size 7, write size 64"), "{e}");
        let mut a = grid(json!({"shape": [4, 0]}), 2);
        assert!(a.merge(&grid(json!({"shape": [5, 3]}), 2), "chunk_layout.chunk").is_err());
        a.merge(&grid(json!({"shape": [0, 3]}), 2), "chunk_layout.chunk").unwrap();
        assert_eq!(a.shape, Some(vec![4, 3]));
    }
}
