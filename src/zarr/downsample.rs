//! Downsampling: the methods of TensorStore's `downsample` driver
//! (`reference/tensorstore-downsample-driver.yml`), as pure kernels over
//! decoded elements (little-endian, C order). No I/O: the service reads the
//! source region with the region engine and calls [`reduce`] on it.
//!
//! Semantics, as TensorStore computes them (checked against
//! `ts.downsample` by `tests/python/test_downsample.py`):
//!
//! - blocks start at origin 0: output position `p` reduces the source box
//!   `[p * f, min((p + 1) * f, shape))` per dimension, so blocks at the
//!   upper edge are partial and reduce over the elements they have; the
//!   downsampled shape is `ceil(shape / f)`;
//! - `stride`: the block's first element (any fixed-size type);
//! - `mean`: integers summed exactly (64-bit, 128-bit for 64-bit types) and
//!   rounded to the nearest integer, ties to even; floats summed in their
//!   own type in C order over the block, then divided by the count (NaN
//!   propagates); `bool` is the mode (the rounded mean of 0 and 1);
//! - `min`, `max`: `std::min`/`std::max` from +∞/−∞ (the type's extremes
//!   for integers), so NaN never wins and an all-NaN block gives ±∞;
//! - `median`: the lower middle (sorted element `(n - 1) / 2`);
//! - `mode`: the most frequent value, the lowest on ties; for `bool`,
//!   median and mode are the mean.
//!
//! For `median` and `mode`, values are ordered with NaN above every number
//! and `-0.0` equal to `0.0`; TensorStore sorts with `<`, whose order with
//! NaN is not defined, so blocks holding NaN (or both zeros) may differ.
//!
//! Methods other than `stride` take the numeric types and `bool` (not
//! complex, `float16`/`bfloat16`, float8, `int4`, datetimes, records or
//! strings): [`check_type`] says so, naming the method.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use super::data_type::DataType;

#[cfg(test)]
mod tests;

/// A downsampling method (TensorStore's `DownsampleMethod`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// The first element of each block.
    Stride,
    /// The arithmetic mean.
    Mean,
    /// The lower median.
    Median,
    /// The most frequent value, the lowest on ties.
    Mode,
    /// The minimum.
    Min,
    /// The maximum.
    Max,
}

impl Method {
    /// Every method, in the order the documentation lists them.
    pub const ALL: [Method; 6] = [Method::Stride, Method::Mean, Method::Median, Method::Mode, Method::Min, Method::Max];

    /// The method's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Method::Stride => "stride",
            Method::Mean => "mean",
            Method::Median => "median",
            Method::Mode => "mode",
            Method::Min => "min",
            Method::Max => "max",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown method `{s}`; expected one of stride, mean, median, mode, min, max"))
    }
}

/// Why a downsample cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DownsampleError(pub String);

/// The downsampled shape: `ceil(shape / factor)` per dimension.
///
/// # Panics
/// Never for factors of at least 1 (checked by the caller); a zero factor
/// is treated as 1.
#[must_use]
pub fn downsampled_shape(shape: &[u64], factors: &[u64]) -> Vec<u64> {
    shape.iter().zip(factors).map(|(&s, &f)| s.div_ceil(f.max(1))).collect()
}

/// Checks that `method` can downsample elements of `dt`.
///
/// # Errors
/// A type the method does not take, naming both.
pub fn check_type(dt: &DataType, method: Method) -> Result<(), DownsampleError> {
    if method == Method::Stride {
        return match dt.size() {
            Some(_) => Ok(()),
            None => Err(DownsampleError(format!("downsample_method=stride takes fixed-size data types, not {dt:?}"))),
        };
    }
    if numeric(dt) {
        Ok(())
    } else {
        Err(DownsampleError(format!(
            "downsample_method={method} takes bool, integer and float32/float64 data types, not {dt:?} (stride takes any fixed-size type)"
        )))
    }
}

fn numeric(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Bool
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Float32
            | DataType::Float64
    )
}

/// Reduces `src`, a block-aligned box of the source (C order, shape
/// `src_shape`, little-endian elements of `dt`, starting at a multiple of
/// `factors` in every dimension; only the upper edge may cut a block), into
/// the downsampled box of shape [`downsampled_shape`]`(src_shape, factors)`.
///
/// # Errors
/// A type the method does not take; `src` of the wrong length or `factors`
/// of the wrong rank.
pub fn reduce(
    dt: &DataType,
    method: Method,
    factors: &[u64],
    src: &[u8],
    src_shape: &[u64],
) -> Result<Vec<u8>, DownsampleError> {
    check_type(dt, method)?;
    if factors.len() != src_shape.len() || factors.contains(&0) {
        return Err(DownsampleError(format!("factors {factors:?} do not fit the shape {src_shape:?}")));
    }
    let es = dt.size().unwrap_or(1);
    let n = src_shape.iter().try_fold(1usize, |a, &s| usize::try_from(s).ok().and_then(|s| a.checked_mul(s)));
    if n.and_then(|n| n.checked_mul(es)) != Some(src.len()) {
        return Err(DownsampleError(format!("{} bytes do not hold the shape {src_shape:?} of {dt:?}", src.len())));
    }
    let grid = Grid::new(src_shape, factors);
    if method == Method::Stride {
        return Ok(stride(&grid, src, es));
    }
    Ok(match dt {
        DataType::Bool => typed::<bool>(&grid, method, src),
        DataType::Int8 => typed::<i8>(&grid, method, src),
        DataType::Int16 => typed::<i16>(&grid, method, src),
        DataType::Int32 => typed::<i32>(&grid, method, src),
        DataType::Int64 => typed::<i64>(&grid, method, src),
        DataType::UInt8 => typed::<u8>(&grid, method, src),
        DataType::UInt16 => typed::<u16>(&grid, method, src),
        DataType::UInt32 => typed::<u32>(&grid, method, src),
        DataType::UInt64 => typed::<u64>(&grid, method, src),
        DataType::Float32 => typed::<f32>(&grid, method, src),
        DataType::Float64 => typed::<f64>(&grid, method, src),
        _ => return Err(DownsampleError(format!("{dt:?} cannot be downsampled by {method}"))),
    })
}

/// The source box and its blocks, with sizes as `usize` (the source is in
/// memory).
struct Grid {
    src: Vec<usize>,
    f: Vec<usize>,
    out: Vec<usize>,
}

impl Grid {
    fn new(src_shape: &[u64], factors: &[u64]) -> Self {
        // Fits: the source is in memory, and a factor beyond the extent acts
        // as the extent.
        let src: Vec<usize> = src_shape.iter().map(|&s| usize::try_from(s).unwrap_or(usize::MAX)).collect();
        let f: Vec<usize> =
            factors.iter().zip(&src).map(|(&f, &s)| usize::try_from(f).unwrap_or(usize::MAX).min(s.max(1))).collect();
        let out = src.iter().zip(&f).map(|(&s, &f)| s.div_ceil(f)).collect();
        Self { src, f, out }
    }

    fn out_len(&self) -> usize {
        self.out.iter().product()
    }

    /// Calls `row(src_offset, out_offset)` for every source row (all
    /// dimensions but the last fixed), C order: the offsets of the row's
    /// first element and of the output row it reduces into.
    fn rows(&self, mut row: impl FnMut(usize, usize)) {
        let rank = self.src.len();
        if rank == 0 {
            row(0, 0);
            return;
        }
        if self.src.contains(&0) {
            return;
        }
        let outer = rank - 1;
        let mut idx = vec![0usize; outer];
        let (inner, out_inner) = (self.src[outer], self.out[outer]);
        loop {
            let (mut so, mut oo) = (0usize, 0usize);
            for (d, &i) in idx.iter().enumerate() {
                so = so * self.src[d] + i;
                oo = oo * self.out[d] + i / self.f[d];
            }
            row(so * inner, oo * out_inner);
            let mut d = outer;
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < self.src[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }

    /// Elements in the block of every output element, C order: the
    /// product of the block's extent along each dimension, expanded one
    /// dimension at a time (no per-element index arithmetic).
    fn counts(&self) -> Vec<u64> {
        let mut counts = vec![1u64];
        for d in 0..self.src.len() {
            let (n, f, s) = (self.out[d], self.f[d], self.src[d]);
            let along: Vec<u64> = (0..n).map(|j| (s.min((j + 1) * f) - j * f) as u64).collect();
            counts = counts.iter().flat_map(|&c| along.iter().map(move |&a| c * a)).collect();
        }
        counts
    }

    /// Calls `block(out_index, values)` for every output element with the
    /// values of its block (C order over the block).
    fn blocks<T: Copy>(&self, src: &[T], mut block: impl FnMut(usize, &mut Vec<T>)) {
        let rank = self.src.len();
        let mut values = Vec::new();
        if rank == 0 {
            values.extend_from_slice(src);
            block(0, &mut values);
            return;
        }
        let mut strides = vec![1usize; rank];
        for d in (0..rank - 1).rev() {
            strides[d] = strides[d + 1] * self.src[d + 1];
        }
        let mut out_idx = vec![0usize; rank];
        for o in 0..self.out_len() {
            let start: Vec<usize> = out_idx.iter().zip(&self.f).map(|(&j, &f)| j * f).collect();
            let len: Vec<usize> = (0..rank).map(|d| self.src[d].min(start[d] + self.f[d]) - start[d]).collect();
            values.clear();
            // Rows of the block: an odometer over all dimensions but the last.
            let mut k = vec![0usize; rank - 1];
            'rows: loop {
                let off: usize = (0..rank - 1).map(|d| (start[d] + k[d]) * strides[d]).sum::<usize>() + start[rank - 1];
                values.extend_from_slice(&src[off..off + len[rank - 1]]);
                let mut d = rank - 1;
                loop {
                    if d == 0 {
                        break 'rows;
                    }
                    d -= 1;
                    k[d] += 1;
                    if k[d] < len[d] {
                        break;
                    }
                    k[d] = 0;
                }
            }
            block(o, &mut values);
            for d in (0..rank).rev() {
                out_idx[d] += 1;
                if out_idx[d] < self.out[d] {
                    break;
                }
                out_idx[d] = 0;
            }
        }
    }
}

/// `stride`: the first element of every block, any element size.
fn stride(grid: &Grid, src: &[u8], es: usize) -> Vec<u8> {
    let mut out = vec![0u8; grid.out_len() * es];
    let rank = grid.src.len();
    let (fl, inner_out) = if rank == 0 { (1, 1) } else { (grid.f[rank - 1], grid.out[rank - 1]) };
    grid.rows(|so, oo| {
        // Only the first row of each block along every outer dimension.
        if rank > 1 && !first_row_of_block(grid, so) {
            return;
        }
        for j in 0..inner_out {
            let s = (so + j * fl) * es;
            let o = (oo + j) * es;
            out[o..o + es].copy_from_slice(&src[s..s + es]);
        }
    });
    out
}

/// Whether the source row starting at element `so` is the first row of its
/// block in every outer dimension.
fn first_row_of_block(grid: &Grid, so: usize) -> bool {
    let rank = grid.src.len();
    let mut rest = so / grid.src[rank - 1];
    for d in (0..rank - 1).rev() {
        if (rest % grid.src[d]) % grid.f[d] != 0 {
            return false;
        }
        rest /= grid.src[d];
    }
    true
}

/// An element type the numeric methods take.
trait Sample: Copy + PartialOrd + Send + Sync + 'static {
    const SIZE: usize;
    /// What `mean` sums in.
    type Acc: Copy;
    fn load(b: &[u8]) -> Self;
    fn store(self, out: &mut Vec<u8>);
    /// Where `max` starts (−∞, or the lowest value).
    fn lowest() -> Self;
    /// Where `min` starts (+∞, or the highest value).
    fn highest() -> Self;
    fn zero() -> Self::Acc;
    fn add(acc: Self::Acc, x: Self) -> Self::Acc;
    fn mean(acc: Self::Acc, n: u64) -> Self;
    /// The order `median` and `mode` sort by (NaN above every number).
    fn order(a: &Self, b: &Self) -> Ordering {
        a.partial_cmp(b).unwrap_or_else(|| Self::nan_order(a, b))
    }
    /// The order of two values one of which is NaN.
    fn nan_order(_a: &Self, _b: &Self) -> Ordering {
        Ordering::Equal
    }
    /// `median` and `mode` are the mean (bool).
    const BY_MEAN: bool = false;
}

/// `sum / n` rounded to the nearest integer, ties to even (TensorStore's
/// integer mean).
fn round_div(sum: i128, n: i128) -> i128 {
    let (q, r) = (sum / n, sum % n);
    if sum >= 0 {
        q + i128::from(r * 2 + (q & 1) > n)
    } else {
        q - i128::from(r * 2 - (q & 1) < -n)
    }
}

macro_rules! int_sample {
    ($t:ty, $acc:ty) => {
        impl Sample for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            type Acc = $acc;
            fn load(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().unwrap_or_default())
            }
            fn store(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn lowest() -> Self {
                <$t>::MIN
            }
            fn highest() -> Self {
                <$t>::MAX
            }
            fn zero() -> $acc {
                0
            }
            fn add(acc: $acc, x: Self) -> $acc {
                acc + <$acc>::from(x)
            }
            #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap, clippy::cast_lossless)]
            fn mean(acc: $acc, n: u64) -> Self {
                // The mean of values of the type is in the type's range.
                round_div(acc as i128, i128::from(n)) as $t
            }
        }
    };
}

int_sample!(i8, i64);
int_sample!(i16, i64);
int_sample!(i32, i64);
int_sample!(i64, i128);
int_sample!(u8, u64);
int_sample!(u16, u64);
int_sample!(u32, u64);
int_sample!(u64, u128);

macro_rules! float_sample {
    ($t:ty) => {
        impl Sample for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            type Acc = $t;
            fn load(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().unwrap_or_default())
            }
            fn store(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn lowest() -> Self {
                <$t>::NEG_INFINITY
            }
            fn highest() -> Self {
                <$t>::INFINITY
            }
            fn zero() -> $t {
                0.0
            }
            fn add(acc: $t, x: Self) -> $t {
                acc + x
            }
            #[allow(clippy::cast_precision_loss)]
            fn mean(acc: $t, n: u64) -> Self {
                acc / n as $t
            }
            fn nan_order(a: &Self, b: &Self) -> Ordering {
                a.is_nan().cmp(&b.is_nan())
            }
        }
    };
}

float_sample!(f32);
float_sample!(f64);

impl Sample for bool {
    const SIZE: usize = 1;
    type Acc = u64;
    const BY_MEAN: bool = true;
    fn load(b: &[u8]) -> Self {
        b[0] != 0
    }
    fn store(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
    fn lowest() -> Self {
        false
    }
    fn highest() -> Self {
        true
    }
    fn zero() -> u64 {
        0
    }
    fn add(acc: u64, x: Self) -> u64 {
        acc + u64::from(x)
    }
    fn mean(acc: u64, n: u64) -> Self {
        round_div(i128::from(acc), i128::from(n)) != 0
    }
}

fn typed<T: Sample>(grid: &Grid, method: Method, src: &[u8]) -> Vec<u8> {
    let method = if T::BY_MEAN && matches!(method, Method::Median | Method::Mode) { Method::Mean } else { method };
    // Mean, min and max read the elements where they are; median and mode
    // sort each block, from a typed copy.
    let values = || -> Vec<T> { src.chunks_exact(T::SIZE).map(T::load).collect() };
    let out: Vec<T> = match method {
        Method::Mean => {
            let mut acc = vec![T::zero(); grid.out_len()];
            accumulate(grid, src, &mut acc, |a, x: T| T::add(a, x));
            acc.into_iter().zip(grid.counts()).map(|(a, n)| T::mean(a, n)).collect()
        }
        Method::Min => {
            let mut acc = vec![T::highest(); grid.out_len()];
            accumulate(grid, src, &mut acc, |a: T, x: T| if x < a { x } else { a });
            acc
        }
        Method::Max => {
            let mut acc = vec![T::lowest(); grid.out_len()];
            accumulate(grid, src, &mut acc, |a: T, x: T| if a < x { x } else { a });
            acc
        }
        Method::Median => {
            let mut out = vec![T::lowest(); grid.out_len()];
            grid.blocks(&values(), |o, block| {
                let mid = (block.len() - 1) / 2;
                let (_, m, _) = block.select_nth_unstable_by(mid, T::order);
                out[o] = *m;
            });
            out
        }
        Method::Mode => {
            let mut out = vec![T::lowest(); grid.out_len()];
            grid.blocks(&values(), |o, block| out[o] = mode(block));
            out
        }
        Method::Stride => unreachable!("stride is reduced by bytes"),
    };
    let mut bytes = Vec::with_capacity(out.len() * T::SIZE);
    for v in out {
        v.store(&mut bytes);
    }
    bytes
}

/// Folds every source element (little-endian bytes of `T`) into its output
/// element's accumulator, C order over the source (so each block in C order
/// too). The common factors along the last dimension (1 to 4, 8) take a
/// kernel with the factor known at compile time: a row is folded block by
/// block with no per-element index arithmetic and the loop over a block
/// unrolled; any other factor takes [`accumulate_generic`]. Both fold each
/// accumulator in the same order, so they agree bit for bit (floats too).
fn accumulate<T: Sample, A: Copy>(grid: &Grid, src: &[u8], acc: &mut [A], op: impl Fn(A, T) -> A) {
    let rank = grid.src.len();
    if rank == 0 {
        acc[0] = op(acc[0], T::load(&src[..T::SIZE]));
        return;
    }
    match grid.f[rank - 1] {
        1 => accumulate_by::<T, A, 1>(grid, src, acc, op),
        2 => accumulate_by::<T, A, 2>(grid, src, acc, op),
        3 => accumulate_by::<T, A, 3>(grid, src, acc, op),
        4 => accumulate_by::<T, A, 4>(grid, src, acc, op),
        8 => accumulate_by::<T, A, 8>(grid, src, acc, op),
        _ => accumulate_generic(grid, src, acc, op),
    }
}

/// [`accumulate`] with the last dimension's factor `F` known at compile
/// time (`grid.f[rank - 1] == F`, rank at least 1).
fn accumulate_by<T: Sample, A: Copy, const F: usize>(grid: &Grid, src: &[u8], acc: &mut [A], op: impl Fn(A, T) -> A) {
    let rank = grid.src.len();
    let (inner, out_inner) = (grid.src[rank - 1], grid.out[rank - 1]);
    let whole = inner / F;
    grid.rows(|so, oo| {
        let row = &src[so * T::SIZE..(so + inner) * T::SIZE];
        let out = &mut acc[oo..oo + out_inner];
        let (blocks, rest) = row.split_at(whole * F * T::SIZE);
        for (a, block) in out.iter_mut().zip(blocks.chunks_exact(F * T::SIZE)) {
            let mut v = *a;
            for k in 0..F {
                v = op(v, T::load(&block[k * T::SIZE..(k + 1) * T::SIZE]));
            }
            *a = v;
        }
        if !rest.is_empty() {
            let a = &mut out[whole];
            for x in rest.chunks_exact(T::SIZE) {
                *a = op(*a, T::load(x));
            }
        }
    });
}

/// [`accumulate`] for any factor along the last dimension.
fn accumulate_generic<T: Sample, A: Copy>(grid: &Grid, src: &[u8], acc: &mut [A], op: impl Fn(A, T) -> A) {
    let rank = grid.src.len();
    let (inner, f) = (grid.src[rank - 1], grid.f[rank - 1]);
    grid.rows(|so, oo| {
        let row = &src[so * T::SIZE..(so + inner) * T::SIZE];
        for (j, block) in row.chunks(f * T::SIZE).enumerate() {
            let a = &mut acc[oo + j];
            for x in block.chunks_exact(T::SIZE) {
                *a = op(*a, T::load(x));
            }
        }
    });
}

/// The most frequent value, the lowest on ties: sorted, the last of the
/// first longest run of equal values (as TensorStore picks it).
fn mode<T: Sample>(block: &mut [T]) -> T {
    block.sort_by(T::order);
    let (mut best, mut best_count, mut count) = (0usize, 1usize, 1usize);
    for i in 1..block.len() {
        if block[i] == block[i - 1] {
            count += 1;
        } else {
            if count > best_count {
                best_count = count;
                best = i - 1;
            }
            count = 1;
        }
    }
    if count > best_count {
        best = block.len() - 1;
    }
    block[best]
}
