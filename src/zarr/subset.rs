//! Regions of an array and the regular chunk grid.
//!
//! Spec: Zarr v3 core §"Chunk grids" / `chunk-grids/regular-grid` (chunk
//! `i` along a dimension covers `[i * c, min((i + 1) * c, shape))`; edge
//! chunks are stored at full size and clipped when read).
//!
//! One region type, [`ArraySubset`] (`start` + `shape`, as in zarrs), is used
//! for selections, chunk extents and copies. [`copy_region`] moves a
//! sub-region between two C-order buffers of different shapes; it is the
//! workhorse of region reads and writes, so it copies whole contiguous inner
//! runs with `clone_from_slice` (a `memcpy` for bytes) rather than elements.

use std::fmt;

/// A region or shape mismatch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SubsetError(pub String);

/// A hyper-rectangle: `start[d] .. start[d] + shape[d]` in every dimension.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ArraySubset {
    start: Vec<u64>,
    shape: Vec<u64>,
}

impl fmt::Display for ArraySubset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (d, (s, n)) in self.start.iter().zip(&self.shape).enumerate() {
            if d > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{s}:{}", s.saturating_add(*n))?;
        }
        f.write_str("]")
    }
}

impl ArraySubset {
    /// A region from its start and shape.
    ///
    /// # Errors
    /// When the ranks differ or an end overflows `u64`.
    pub fn new(start: Vec<u64>, shape: Vec<u64>) -> Result<Self, SubsetError> {
        if start.len() != shape.len() {
            return Err(SubsetError(format!(
                "region start has {} dimensions but its shape has {}",
                start.len(),
                shape.len()
            )));
        }
        if start.iter().zip(&shape).any(|(s, n)| s.checked_add(*n).is_none()) {
            return Err(SubsetError("region end overflows".into()));
        }
        Ok(Self { start, shape })
    }

    /// The region `0..shape`.
    #[must_use]
    pub fn from_shape(shape: &[u64]) -> Self {
        Self { start: vec![0; shape.len()], shape: shape.to_vec() }
    }

    /// First index in every dimension.
    #[must_use]
    pub fn start(&self) -> &[u64] {
        &self.start
    }

    /// Extent in every dimension.
    #[must_use]
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Exclusive end in every dimension.
    #[must_use]
    pub fn end(&self) -> Vec<u64> {
        self.start.iter().zip(&self.shape).map(|(s, n)| s + n).collect()
    }

    /// Number of dimensions.
    #[must_use]
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements (saturating).
    #[must_use]
    pub fn num_elements(&self) -> u64 {
        self.shape.iter().fold(1u64, |a, &d| a.saturating_mul(d))
    }

    /// True when the region has no elements.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.shape.contains(&0)
    }

    /// True when the region lies inside `0..shape`.
    #[must_use]
    pub fn is_within(&self, shape: &[u64]) -> bool {
        shape.len() == self.rank() && self.start.iter().zip(&self.shape).zip(shape).all(|((s, n), a)| s + n <= *a)
    }

    /// The overlap of two regions of the same rank (possibly empty; `None`
    /// when the ranks differ).
    #[must_use]
    pub fn intersect(&self, other: &Self) -> Option<Self> {
        if self.rank() != other.rank() {
            return None;
        }
        let mut start = Vec::with_capacity(self.rank());
        let mut shape = Vec::with_capacity(self.rank());
        for d in 0..self.rank() {
            let lo = self.start[d].max(other.start[d]);
            let hi = (self.start[d] + self.shape[d]).min(other.start[d] + other.shape[d]);
            start.push(lo);
            shape.push(hi.saturating_sub(lo));
        }
        Some(Self { start, shape })
    }

    /// This region relative to `origin` (which must not exceed `start`).
    #[must_use]
    pub fn relative_to(&self, origin: &[u64]) -> Self {
        let start = self.start.iter().zip(origin).map(|(s, o)| s.saturating_sub(*o)).collect();
        Self { start, shape: self.shape.clone() }
    }

    /// Every index in the region, C order (last dimension fastest).
    pub fn indices(&self) -> impl Iterator<Item = Vec<u64>> + '_ {
        let total = if self.is_empty() { 0 } else { self.num_elements() };
        let mut current = self.start.clone();
        (0..total).map(move |i| {
            let out = current.clone();
            if i + 1 < total {
                for d in (0..current.len()).rev() {
                    current[d] += 1;
                    if current[d] < self.start[d] + self.shape[d] {
                        break;
                    }
                    current[d] = self.start[d];
                }
            }
            out
        })
    }
}

/// A regular chunk grid over an array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegularChunkGrid {
    array_shape: Vec<u64>,
    chunk_shape: Vec<u64>,
}

/// One chunk touched by a region: which chunk, the part of the chunk
/// (chunk-relative), and where that part sits in the region (region-relative).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkOverlap {
    /// Chunk grid coordinates.
    pub chunk: Vec<u64>,
    /// The overlap, relative to the chunk's origin.
    pub in_chunk: ArraySubset,
    /// The overlap, relative to the region's start.
    pub in_region: ArraySubset,
}

impl RegularChunkGrid {
    /// A grid of `chunk_shape` chunks over `array_shape`.
    ///
    /// # Errors
    /// When the ranks differ or a chunk extent is zero.
    pub fn new(array_shape: Vec<u64>, chunk_shape: Vec<u64>) -> Result<Self, SubsetError> {
        if array_shape.len() != chunk_shape.len() {
            return Err(SubsetError(format!(
                "chunk shape has {} dimensions but the array has {}",
                chunk_shape.len(),
                array_shape.len()
            )));
        }
        if chunk_shape.contains(&0) {
            return Err(SubsetError("chunk extents must be at least 1".into()));
        }
        Ok(Self { array_shape, chunk_shape })
    }

    /// Array shape.
    #[must_use]
    pub fn array_shape(&self) -> &[u64] {
        &self.array_shape
    }

    /// Chunk shape (every stored chunk has this shape, edge chunks included).
    #[must_use]
    pub fn chunk_shape(&self) -> &[u64] {
        &self.chunk_shape
    }

    /// Number of chunks along each dimension.
    #[must_use]
    pub fn grid_shape(&self) -> Vec<u64> {
        self.array_shape.iter().zip(&self.chunk_shape).map(|(a, c)| a.div_ceil(*c)).collect()
    }

    /// True when `chunk` names a chunk of this grid.
    #[must_use]
    pub fn contains(&self, chunk: &[u64]) -> bool {
        chunk.len() == self.array_shape.len() && chunk.iter().zip(self.grid_shape()).all(|(c, g)| *c < g)
    }

    /// The array region chunk `chunk` covers, clipped to the array (partial at
    /// the edges). `None` outside the grid.
    #[must_use]
    pub fn chunk_subset(&self, chunk: &[u64]) -> Option<ArraySubset> {
        if !self.contains(chunk) {
            return None;
        }
        let start: Vec<u64> = chunk.iter().zip(&self.chunk_shape).map(|(i, c)| i * c).collect();
        let shape =
            start.iter().zip(&self.chunk_shape).zip(&self.array_shape).map(|((s, c), a)| (*c).min(a - s)).collect();
        Some(ArraySubset { start, shape })
    }

    /// The chunk coordinates `region` touches, as a region of the grid.
    ///
    /// # Errors
    /// When `region` is not inside the array.
    pub fn chunks_in(&self, region: &ArraySubset) -> Result<ArraySubset, SubsetError> {
        if !region.is_within(&self.array_shape) {
            return Err(SubsetError(format!("region {region} is outside the array of shape {:?}", self.array_shape)));
        }
        if region.is_empty() {
            return Ok(ArraySubset { start: vec![0; region.rank()], shape: vec![0; region.rank()] });
        }
        let start: Vec<u64> = region.start.iter().zip(&self.chunk_shape).map(|(s, c)| s / c).collect();
        let shape =
            region.end().iter().zip(&self.chunk_shape).zip(&start).map(|((e, c), s)| (e - 1) / c + 1 - s).collect();
        Ok(ArraySubset { start, shape })
    }

    /// Every chunk `region` touches with the overlapping parts, in C order of
    /// chunk coordinates.
    ///
    /// # Errors
    /// When `region` is not inside the array.
    pub fn overlaps<'a>(
        &'a self,
        region: &'a ArraySubset,
    ) -> Result<impl Iterator<Item = ChunkOverlap> + 'a, SubsetError> {
        let chunks = self.chunks_in(region)?;
        Ok(chunks.indices().collect::<Vec<_>>().into_iter().filter_map(move |chunk| {
            let covered = self.chunk_subset(&chunk)?;
            let part = covered.intersect(region)?;
            let chunk_origin: Vec<u64> = chunk.iter().zip(&self.chunk_shape).map(|(i, c)| i * c).collect();
            Some(ChunkOverlap {
                in_chunk: part.relative_to(&chunk_origin),
                in_region: part.relative_to(region.start()),
                chunk,
            })
        }))
    }
}

/// Copies the region `src_region` of a C-order buffer of shape `src_shape`
/// into the region of the same shape starting at `dst_start` of a C-order
/// buffer of shape `dst_shape`. Each element is `elem_len` consecutive items
/// of `T` (bytes of a fixed-size element: `T = u8`, `elem_len = size`;
/// variable-length elements: `T = Vec<u8>`, `elem_len = 1`).
///
/// Trailing dimensions that both regions cover completely are merged, so the
/// copy runs over the longest contiguous runs possible.
///
/// # Errors
/// When ranks differ, a region lies outside its buffer, or a buffer's length
/// does not match its shape.
pub fn copy_region<T: Clone>(
    src: &[T],
    src_shape: &[u64],
    src_region: &ArraySubset,
    dst: &mut [T],
    dst_shape: &[u64],
    dst_start: &[u64],
    elem_len: usize,
) -> Result<(), SubsetError> {
    let rank = src_shape.len();
    if dst_shape.len() != rank || src_region.rank() != rank || dst_start.len() != rank {
        return Err(SubsetError("copy: source, destination and region ranks differ".into()));
    }
    let dst_region = ArraySubset::new(dst_start.to_vec(), src_region.shape.clone())?;
    if !src_region.is_within(src_shape) || !dst_region.is_within(dst_shape) {
        return Err(SubsetError(format!(
            "copy: region {src_region} of {src_shape:?} -> {dst_region} of {dst_shape:?} is out of bounds"
        )));
    }
    let len_of =
        |shape: &[u64]| shape.iter().try_fold(elem_len, |a, &d| usize::try_from(d).ok().and_then(|d| a.checked_mul(d)));
    if len_of(src_shape) != Some(src.len()) || len_of(dst_shape) != Some(dst.len()) {
        return Err(SubsetError("copy: a buffer's length does not match its shape".into()));
    }
    if src_region.is_empty() {
        return Ok(());
    }
    // Merge trailing dimensions covered fully in both buffers into one run.
    let mut run = elem_len;
    let mut inner = rank; // dimensions inner..rank are merged into `run`
    while inner > 0 {
        let d = inner - 1;
        let n = src_region.shape[d];
        run *= usize::try_from(n).unwrap_or(usize::MAX);
        inner = d;
        if !(n == src_shape[d] && n == dst_shape[d]) {
            break;
        }
    }
    // Strides (in items) of the outer dimensions 0..inner.
    let strides = |shape: &[u64]| {
        let mut s = vec![0usize; rank];
        let mut acc = elem_len;
        for d in (0..rank).rev() {
            s[d] = acc;
            acc *= usize::try_from(shape[d]).unwrap_or(0);
        }
        s
    };
    let (ss, ds) = (strides(src_shape), strides(dst_shape));
    let offset =
        |start: &[u64], s: &[usize]| start.iter().zip(s).map(|(i, s)| usize::try_from(*i).unwrap_or(0) * s).sum();
    let mut so: usize = offset(&src_region.start, &ss);
    let mut dof: usize = offset(dst_start, &ds);
    let outer: Vec<u64> = src_region.shape[..inner].to_vec();
    let mut counter = vec![0u64; inner];
    loop {
        dst[dof..dof + run].clone_from_slice(&src[so..so + run]);
        // Odometer over the outer dimensions, moving both offsets.
        let mut d = inner;
        loop {
            if d == 0 {
                return Ok(());
            }
            d -= 1;
            counter[d] += 1;
            so += ss[d];
            dof += ds[d];
            if counter[d] < outer[d] {
                break;
            }
            let back = usize::try_from(outer[d]).unwrap_or(0);
            so -= ss[d] * back;
            dof -= ds[d] * back;
            counter[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn grid_edges() {
        let g = RegularChunkGrid::new(vec![10, 7], vec![4, 3]).unwrap();
        assert_eq!(g.grid_shape(), vec![3, 3]);
        assert_eq!(g.chunk_subset(&[2, 2]).unwrap(), ArraySubset::new(vec![8, 6], vec![2, 1]).unwrap());
        assert!(g.chunk_subset(&[3, 0]).is_none());
        let region = ArraySubset::new(vec![3, 2], vec![2, 3]).unwrap();
        assert_eq!(g.chunks_in(&region).unwrap(), ArraySubset::new(vec![0, 0], vec![2, 2]).unwrap());
        let parts: Vec<_> = g.overlaps(&region).unwrap().collect();
        assert_eq!(parts.len(), 4);
        assert_eq!(parts[0].chunk, vec![0, 0]);
        assert_eq!(parts[0].in_chunk, ArraySubset::new(vec![3, 2], vec![1, 1]).unwrap());
        assert_eq!(parts[3].in_region, ArraySubset::new(vec![1, 1], vec![1, 2]).unwrap());
        assert!(g.chunks_in(&ArraySubset::new(vec![9, 0], vec![2, 1]).unwrap()).is_err());
        // Zero-rank arrays have one chunk.
        let g = RegularChunkGrid::new(vec![], vec![]).unwrap();
        assert_eq!(g.overlaps(&ArraySubset::from_shape(&[])).unwrap().count(), 1);
    }

    #[test]
    fn copy_rejects_bad_input() {
        let src = vec![0u8; 6];
        let mut dst = vec![0u8; 4];
        let r = ArraySubset::new(vec![0, 0], vec![2, 2]).unwrap();
        assert!(copy_region(&src, &[2, 3], &r, &mut dst, &[2, 2], &[0, 0], 1).is_ok());
        assert!(copy_region(&src, &[2, 3], &r, &mut dst, &[2, 2], &[0, 1], 1).is_err());
        assert!(copy_region(&src, &[3, 3], &r, &mut dst, &[2, 2], &[0, 0], 1).is_err());
        assert!(copy_region(&src, &[2, 3], &r, &mut dst, &[4], &[0], 1).is_err());
    }

    /// Element-by-element reference model.
    fn reference(
        src: &[u8],
        ss: &[u64],
        region: &ArraySubset,
        dst: &mut [u8],
        ds: &[u64],
        dst_start: &[u64],
        e: usize,
    ) {
        let lin = |idx: &[u64], shape: &[u64]| idx.iter().zip(shape).fold(0u64, |a, (i, n)| a * n + i) as usize;
        for idx in region.indices() {
            let rel: Vec<u64> = idx.iter().zip(region.start()).map(|(i, s)| i - s).collect();
            let d: Vec<u64> = rel.iter().zip(dst_start).map(|(r, s)| r + s).collect();
            let (si, di) = (lin(&idx, ss) * e, lin(&d, ds) * e);
            dst[di..di + e].copy_from_slice(&src[si..si + e]);
        }
    }

    type Case = (Vec<u64>, Vec<u64>, Vec<u64>, Vec<u64>, Vec<u64>, usize);

    fn case() -> impl Strategy<Value = Case> {
        (0usize..5, 1usize..4).prop_flat_map(|(rank, e)| {
            (
                proptest::collection::vec(1u64..6, rank),
                proptest::collection::vec(1u64..6, rank),
                proptest::collection::vec(0u64..6, rank),
                proptest::collection::vec(0u64..6, rank),
                proptest::collection::vec(0u64..6, rank),
                Just(e),
            )
        })
    }

    proptest! {
        #[test]
        fn copy_matches_reference((ss, ds, a, b, c, e) in case()) {
            // Derive a region that fits both shapes from the random numbers.
            let rank = ss.len();
            let shape: Vec<u64> = (0..rank).map(|d| a[d] % (ss[d].min(ds[d]) + 1)).collect();
            let sstart: Vec<u64> = (0..rank).map(|d| b[d] % (ss[d] - shape[d] + 1)).collect();
            let dstart: Vec<u64> = (0..rank).map(|d| c[d] % (ds[d] - shape[d] + 1)).collect();
            let n = |s: &[u64]| s.iter().product::<u64>() as usize * e;
            let src: Vec<u8> = (0..n(&ss)).map(|i| (i % 251) as u8).collect();
            let region = ArraySubset::new(sstart, shape).unwrap();
            let mut got = vec![0xAAu8; n(&ds)];
            let mut want = got.clone();
            copy_region(&src, &ss, &region, &mut got, &ds, &dstart, e).unwrap();
            reference(&src, &ss, &region, &mut want, &ds, &dstart, e);
            prop_assert_eq!(got, want);
        }

        #[test]
        fn overlaps_tile_the_region(shape in proptest::collection::vec(1u64..9, 0..4), seed in any::<u64>()) {
            let rank = shape.len();
            let chunk: Vec<u64> = (0..rank).map(|d| 1 + (seed >> (8 * d)) % shape[d]).collect();
            let g = RegularChunkGrid::new(shape.clone(), chunk).unwrap();
            let region = ArraySubset::from_shape(&shape);
            let total: u64 = g.overlaps(&region).unwrap().map(|o| o.in_chunk.num_elements()).sum();
            prop_assert_eq!(total, region.num_elements());
        }
    }
}
