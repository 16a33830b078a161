//! The kernels against values TensorStore's `downsample` driver gives
//! (probed with `ts.downsample` over `ts.array`).

use super::*;

fn bytes<T: Sample>(v: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    for &x in v {
        x.store(&mut out);
    }
    out
}

fn back<T: Sample>(b: &[u8]) -> Vec<T> {
    b.chunks_exact(T::SIZE).map(T::load).collect()
}

fn run<T: Sample>(dt: &DataType, m: Method, f: &[u64], v: &[T], shape: &[u64]) -> Vec<T> {
    back(&reduce(dt, m, f, &bytes(v), shape).unwrap())
}

#[test]
fn integer_mean_rounds_half_to_even() {
    let v = [-1i32, 0, 1, 2, 2, 3, -3, -2, 5];
    assert_eq!(run(&DataType::Int32, Method::Mean, &[2], &v, &[9]), vec![0, 2, 2, -2, 5]);
    let v = [0u8, 1, 2, 3, 255, 254, 7];
    assert_eq!(run(&DataType::UInt8, Method::Mean, &[2], &v, &[7]), vec![0, 2, 254, 7]);
    let v = [1i64 << 62, 1 << 62, (1 << 62) + 1, (1 << 62) + 2];
    assert_eq!(run(&DataType::Int64, Method::Mean, &[4], &v, &[4]), vec![(1 << 62) + 1]);
    assert_eq!(run(&DataType::Int64, Method::Mean, &[2], &[i64::MIN, i64::MIN + 1], &[2]), vec![i64::MIN]);
    assert_eq!(run(&DataType::UInt64, Method::Mean, &[2], &[u64::MAX, u64::MAX - 1], &[2]), vec![u64::MAX - 1]);
}

#[test]
fn nan_never_wins_min_and_max_and_propagates_in_mean() {
    let n = f32::NAN;
    let v = [1.0f32, n, n, 1.0, 2.0, 2.0, n, n];
    assert_eq!(run(&DataType::Float32, Method::Min, &[2], &v, &[8]), vec![1.0, 1.0, 2.0, f32::INFINITY]);
    assert_eq!(run(&DataType::Float32, Method::Max, &[2], &v, &[8]), vec![1.0, 1.0, 2.0, f32::NEG_INFINITY]);
    let mean = run(&DataType::Float32, Method::Mean, &[2], &v, &[8]);
    assert!(mean[0].is_nan() && mean[1].is_nan() && mean[2] == 2.0 && mean[3].is_nan(), "{mean:?}");
}

#[test]
fn median_takes_the_lower_middle_and_mode_the_lowest_tie() {
    let v = [4.0f64, 3.0, 1.0, 2.0, 5.0, 1.0, 2.0];
    assert_eq!(run(&DataType::Float64, Method::Median, &[4], &v, &[7]), vec![2.0, 2.0]);
    let v = [3i16, 1, 1, 3, 5, 2, 2, 5, 9, 9, 1, 1];
    assert_eq!(run(&DataType::Int16, Method::Mode, &[4], &v, &[12]), vec![1, 2, 1]);
    assert_eq!(run(&DataType::Int16, Method::Mode, &[3], &[7i16, 7, 2, 5, 4, 3], &[6]), vec![7, 3]);
}

#[test]
fn bool_median_and_mode_are_the_mean() {
    let v = [true, false, true, true, false, false, true, false, false];
    for m in [Method::Mean, Method::Median, Method::Mode] {
        assert_eq!(run(&DataType::Bool, m, &[2], &v, &[9]), vec![false, true, false, false, false], "{m}");
    }
    assert_eq!(run(&DataType::Bool, Method::Max, &[2], &v, &[9]), vec![true, true, false, true, false]);
    assert_eq!(
        run(&DataType::Bool, Method::Mean, &[3], &[true, false, true, false, false, true], &[6]),
        vec![true, false]
    );
}

#[test]
fn blocks_are_origin_aligned_and_partial_at_the_edge_in_every_dimension() {
    // 3 x 5, factors 2 x 2: output 2 x 3; the last row and column are partial.
    let v: Vec<u16> = (0..15).collect();
    assert_eq!(run(&DataType::UInt16, Method::Stride, &[2, 2], &v, &[3, 5]), vec![0, 2, 4, 10, 12, 14]);
    assert_eq!(run(&DataType::UInt16, Method::Max, &[2, 2], &v, &[3, 5]), vec![6, 8, 9, 11, 13, 14]);
    assert_eq!(run(&DataType::UInt16, Method::Min, &[2, 2], &v, &[3, 5]), vec![0, 2, 4, 10, 12, 14]);
    // Means: (0+1+5+6)/4 = 3, (2+3+7+8)/4 = 5, (4+9)/2 = 6.5 -> 6, (10+11)/2 = 10.5 -> 10, 12.5 -> 12, 14.
    assert_eq!(run(&DataType::UInt16, Method::Mean, &[2, 2], &v, &[3, 5]), vec![3, 5, 6, 10, 12, 14]);
    // Medians of the blocks: {0,1,5,6} -> 1, {2,3,7,8} -> 3, {4,9} -> 4, {10,11} -> 10, {12,13} -> 12, {14}.
    assert_eq!(run(&DataType::UInt16, Method::Median, &[2, 2], &v, &[3, 5]), vec![1, 3, 4, 10, 12, 14]);
    // A factor beyond the extent reduces the whole dimension; 1 keeps it.
    assert_eq!(run(&DataType::UInt16, Method::Max, &[100, 1], &v, &[3, 5]), vec![10, 11, 12, 13, 14]);
    assert_eq!(downsampled_shape(&[3, 5, 0], &[2, 100, 3]), vec![2, 1, 0]);
}

#[test]
fn stride_takes_any_fixed_size_type_and_the_others_refuse_naming_it() {
    let dt = DataType::FixedBytes(3);
    let out = reduce(&dt, Method::Stride, &[2], b"abcdefghi", &[3]).unwrap();
    assert_eq!(out, b"abcghi");
    let e = reduce(&dt, Method::Mean, &[2], b"abcdefghi", &[3]).unwrap_err().to_string();
    assert!(e.contains("downsample_method=mean"), "{e}");
    assert!(check_type(&DataType::String, Method::Stride).is_err());
    assert!("average".parse::<Method>().unwrap_err().contains("stride, mean"));
    assert!(reduce(&DataType::UInt8, Method::Mean, &[2], &[1, 2, 3], &[4]).is_err());
    assert!(reduce(&DataType::UInt8, Method::Mean, &[0], &[1, 2, 3], &[3]).is_err());
}

#[test]
fn a_scalar_reduces_to_itself() {
    assert_eq!(run(&DataType::Float64, Method::Mean, &[], &[2.5f64], &[]), vec![2.5]);
    assert_eq!(run(&DataType::Int8, Method::Median, &[], &[-3i8], &[]), vec![-3]);
}

/// A small deterministic generator (xorshift64*) for the random cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `mean`, `min` or `max` of `src` (shape `shape`, factors `f`) computed the
/// plain way: for every output element, its block walked in C order by
/// explicit indices.
fn naive<T: Sample>(method: Method, f: &[u64], src: &[T], shape: &[u64]) -> Vec<u8> {
    let rank = shape.len();
    let f: Vec<u64> = f.iter().zip(shape).map(|(&f, &s)| f.min(s.max(1))).collect();
    let out_shape = downsampled_shape(shape, &f);
    let n: u64 = out_shape.iter().product();
    let mut bytes = Vec::new();
    for o in 0..n {
        // The output index, then every source index of its block, C order.
        let mut oi = vec![0u64; rank];
        let mut rest = o;
        for d in (0..rank).rev() {
            oi[d] = rest % out_shape[d];
            rest /= out_shape[d];
        }
        let lo: Vec<u64> = (0..rank).map(|d| oi[d] * f[d]).collect();
        let hi: Vec<u64> = (0..rank).map(|d| (lo[d] + f[d]).min(shape[d])).collect();
        let len: Vec<u64> = (0..rank).map(|d| hi[d] - lo[d]).collect();
        let count: u64 = len.iter().product();
        let (mut sum, mut min, mut max) = (T::zero(), T::highest(), T::lowest());
        for k in 0..count {
            let (mut rest, mut at) = (k, 0u64);
            let mut idx = vec![0u64; rank];
            for d in (0..rank).rev() {
                idx[d] = lo[d] + rest % len[d];
                rest /= len[d];
            }
            for d in 0..rank {
                at = at * shape[d] + idx[d];
            }
            let x = src[at as usize];
            sum = T::add(sum, x);
            min = if x < min { x } else { min };
            max = if max < x { x } else { max };
        }
        match method {
            Method::Mean => T::mean(sum, count).store(&mut bytes),
            Method::Min => min.store(&mut bytes),
            _ => max.store(&mut bytes),
        }
    }
    bytes
}

/// Random shapes (rank 1 to 4, edges cut or not) and factors (1 to 9, some
/// beyond the extent) of random values of `T` (any bit pattern: NaN,
/// infinities and both zeros for floats): [`reduce`]'s `mean`, `min` and
/// `max` (the specialised kernels for factors 1 to 4 and 8 along the last
/// dimension, the generic one for the others) equal the plain reduction
/// bit for bit, and `Grid::counts` the block sizes.
fn kernels_match_the_plain_reduction<T: Sample>(dt: &DataType, seed: u64) {
    let mut rng = Rng(seed);
    for case in 0..150 {
        let rank = 1 + rng.below(4) as usize;
        let shape: Vec<u64> = (0..rank).map(|_| 1 + rng.below(if rank > 2 { 9 } else { 40 })).collect();
        let f: Vec<u64> = (0..rank).map(|_| 1 + rng.below(9)).collect();
        let n: u64 = shape.iter().product();
        let raw: Vec<u8> = (0..n * T::SIZE as u64).map(|_| rng.next() as u8).collect();
        // Bool takes 0 and 1 only.
        let raw: Vec<u8> = if T::BY_MEAN { raw.iter().map(|b| b & 1).collect() } else { raw };
        let values: Vec<T> = raw.chunks_exact(T::SIZE).map(T::load).collect();
        for m in [Method::Mean, Method::Min, Method::Max] {
            let got = reduce(dt, m, &f, &raw, &shape).unwrap();
            assert_eq!(got, naive(m, &f, &values, &shape), "{dt:?} {m} case {case}: shape {shape:?} factors {f:?}");
        }
        let grid = Grid::new(&shape, &f);
        let mut blocks = Vec::new();
        grid.blocks(&values, |_, b| blocks.push(b.len() as u64));
        assert_eq!(grid.counts(), blocks, "case {case}: shape {shape:?} factors {f:?}");
    }
}

#[test]
fn the_specialised_kernels_match_the_plain_reduction_for_every_type() {
    kernels_match_the_plain_reduction::<bool>(&DataType::Bool, 1);
    kernels_match_the_plain_reduction::<i8>(&DataType::Int8, 2);
    kernels_match_the_plain_reduction::<i16>(&DataType::Int16, 3);
    kernels_match_the_plain_reduction::<i32>(&DataType::Int32, 4);
    kernels_match_the_plain_reduction::<i64>(&DataType::Int64, 5);
    kernels_match_the_plain_reduction::<u8>(&DataType::UInt8, 6);
    kernels_match_the_plain_reduction::<u16>(&DataType::UInt16, 7);
    kernels_match_the_plain_reduction::<u32>(&DataType::UInt32, 8);
    kernels_match_the_plain_reduction::<u64>(&DataType::UInt64, 9);
    kernels_match_the_plain_reduction::<f32>(&DataType::Float32, 10);
    kernels_match_the_plain_reduction::<f64>(&DataType::Float64, 11);
}
