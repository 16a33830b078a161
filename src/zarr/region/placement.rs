//! Where the elements of a write go: a box (`write_region`), an outer
//! product of per-dimension index lists (basic and orthogonal selections,
//! strides included) or a list of points (coordinate selections), each with
//! its data or one element broadcast to every position.
//!
//! The write path asks three questions of a placement for any box of the
//! array (a chunk, or an inner chunk of a shard): does the write touch it,
//! does it cover every element of it (then nothing needs reading), and —
//! given the decoded buffer of that box — put the elements there. Which
//! chunks (or inner chunks) a write touches is not worked out here: it is
//! the selection projected onto the grid by `super::projection`, the code
//! the read plan uses ([`Placement::touched_chunks`]).
//!
//! Repeated indices follow numpy's assignment: the later position in the
//! data wins.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;

use super::projection::{point_unit, TouchedChunks};
use crate::zarr::chunk::ChunkData;
use crate::zarr::selection::{DimIndexer, Selection, SelectionMode};
use crate::zarr::subset::{ArraySubset, SubsetError};

/// The data of a write: borrowed (the engine's own callers), or shared so
/// that CPU work on it can move to another thread.
#[derive(Debug)]
pub(crate) enum DataRef<'a> {
    Borrowed(&'a ChunkData),
    Shared(Arc<ChunkData>),
}

impl Deref for DataRef<'_> {
    type Target = ChunkData;
    fn deref(&self) -> &ChunkData {
        match self {
            Self::Borrowed(d) => d,
            Self::Shared(d) => d,
        }
    }
}

/// The elements of a write, arranged.
#[derive(Debug)]
pub(crate) enum Placement<'a> {
    /// `data` has the shape of `region` (or is one element, broadcast).
    Box { region: ArraySubset, data: DataRef<'a>, scalar: bool },
    /// Per dimension, `(array index, position along the data's dimension)`
    /// sorted (by index, then position, so a repeated index is written last
    /// from its last position), and the distinct indices, sorted; `data` is
    /// C order over the selected lengths, `lens` (or one element).
    /// `indexers` is what the chunks touched are projected from: per
    /// dimension the selection's own slice (or index), or its distinct
    /// indices as a list.
    Outer {
        dims: Vec<Vec<(u64, u64)>>,
        distinct: Vec<Vec<u64>>,
        indexers: Vec<DimIndexer>,
        lens: Vec<u64>,
        data: DataRef<'a>,
        scalar: bool,
    },
    /// Point `i` receives element `i` of `data` (or its one element).
    /// `by_chunk` buckets the point numbers by the grid chunk holding them.
    Points {
        points: Vec<Vec<u64>>,
        by_chunk: HashMap<Vec<u64>, Vec<usize>>,
        chunk_shape: Vec<u64>,
        data: DataRef<'a>,
        scalar: bool,
    },
}

/// The indices of one selected dimension with their positions in the data,
/// sorted by index then position.
fn dim_entries(d: &DimIndexer) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = (0..d.len()).map(|i| (d.get(i), i)).collect();
    v.sort_unstable();
    v
}

/// The entries (sorted) whose index lies in `lo..hi`.
fn in_range(entries: &[(u64, u64)], lo: u64, hi: u64) -> &[(u64, u64)] {
    let a = entries.partition_point(|e| e.0 < lo);
    let b = entries.partition_point(|e| e.0 < hi);
    &entries[a..b]
}

/// How many of the sorted distinct `values` lie in `lo..hi`.
fn count_in(values: &[u64], lo: u64, hi: u64) -> usize {
    values.partition_point(|&x| x < hi) - values.partition_point(|&x| x < lo)
}

impl<'a> Placement<'a> {
    /// The placement of `selection` (already resolved against the array)
    /// with `data`: the selection's result shape in C order, or one element
    /// when `scalar`.
    pub(crate) fn of_selection(selection: &Selection, data: DataRef<'a>, scalar: bool, chunk_shape: &[u64]) -> Self {
        if selection.mode == SelectionMode::Coordinate {
            let n = selection.dims.first().map_or(0, DimIndexer::len);
            #[allow(clippy::cast_possible_truncation)] // a list held in memory
            let points: Vec<Vec<u64>> = (0..n).map(|i| selection.dims.iter().map(|d| d.get(i)).collect()).collect();
            let mut by_chunk: HashMap<Vec<u64>, Vec<usize>> = HashMap::new();
            for (i, p) in points.iter().enumerate() {
                by_chunk.entry(point_unit(p.iter().copied(), chunk_shape)).or_default().push(i);
            }
            return Self::Points { points, by_chunk, chunk_shape: chunk_shape.to_vec(), data, scalar };
        }
        // A box (a one-element body broadcast too) needs no index lists.
        if let Some((start, shape)) = selection.as_box() {
            if let Ok(region) = ArraySubset::new(start, shape) {
                return Self::Box { region, data, scalar };
            }
        }
        let dims: Vec<Vec<(u64, u64)>> = selection.dims.iter().map(dim_entries).collect();
        let distinct: Vec<Vec<u64>> = dims
            .iter()
            .map(|d| {
                let mut v: Vec<u64> = d.iter().map(|e| e.0).collect();
                v.dedup();
                v
            })
            .collect();
        let indexers = selection
            .dims
            .iter()
            .zip(&distinct)
            .map(|(ix, v)| match ix {
                DimIndexer::List(_) => DimIndexer::List(v.clone()),
                _ => ix.clone(),
            })
            .collect();
        let lens = selection.dims.iter().map(DimIndexer::len).collect();
        Self::Outer { dims, distinct, indexers, lens, data, scalar }
    }

    /// The smallest box holding every written element; `None` when nothing
    /// is written.
    pub(crate) fn bounding_box(&self) -> Option<ArraySubset> {
        let (start, end): (Vec<u64>, Vec<u64>) = match self {
            Self::Box { region, .. } => {
                if region.is_empty() {
                    return None;
                }
                (region.start().to_vec(), region.end())
            }
            Self::Outer { distinct, .. } => {
                let mut bounds = Vec::with_capacity(distinct.len());
                for d in distinct {
                    bounds.push((*d.first()?, *d.last()? + 1));
                }
                bounds.into_iter().unzip()
            }
            Self::Points { points, chunk_shape, .. } => {
                let first = points.first()?;
                let mut lo = first.clone();
                let mut hi: Vec<u64> = first.iter().map(|x| x + 1).collect();
                for p in points {
                    for d in 0..chunk_shape.len() {
                        lo[d] = lo[d].min(p[d]);
                        hi[d] = hi[d].max(p[d] + 1);
                    }
                }
                (lo, hi)
            }
        };
        let shape = start.iter().zip(&end).map(|(s, e)| e - s).collect();
        ArraySubset::new(start, shape).ok()
    }

    /// The grid coordinates of every chunk (of `chunk_shape`) holding a
    /// written element, without looking at chunks the write does not touch:
    /// the selection projected onto the chunk grid by the code the read
    /// plan uses ([`TouchedChunks`]; a slice or box dimension arithmetic,
    /// a list its distinct chunks), enumerated on demand, so a plan costs
    /// memory in the selection's length, never in the number of chunks it
    /// touches.
    pub(crate) fn touched_chunks(&self, chunk_shape: &[u64]) -> TouchedChunks {
        match self {
            Self::Box { region, .. } => {
                if region.is_empty() {
                    return TouchedChunks::empty();
                }
                let dims: Vec<DimIndexer> = region
                    .start()
                    .iter()
                    .zip(region.shape())
                    .map(|(&start, &len)| DimIndexer::Slice { start, step: 1, len })
                    .collect();
                TouchedChunks::outer(&dims, chunk_shape)
            }
            Self::Outer { indexers, .. } => TouchedChunks::outer(indexers, chunk_shape),
            Self::Points { points, .. } => {
                TouchedChunks::points(points.iter().map(|p| point_unit(p.iter().copied(), chunk_shape)).collect())
            }
        }
    }

    /// Whether any written element lies in `area`.
    pub(crate) fn touches(&self, area: &ArraySubset) -> bool {
        if area.is_empty() {
            return false;
        }
        let end = area.end();
        match self {
            Self::Box { region, .. } => region.intersect(area).is_some_and(|i| !i.is_empty()),
            Self::Outer { distinct, .. } => {
                distinct.iter().enumerate().all(|(d, v)| count_in(v, area.start()[d], end[d]) > 0)
            }
            Self::Points { .. } => self.points_in(area).next().is_some(),
        }
    }

    /// Whether every element of `area` is written.
    pub(crate) fn covers(&self, area: &ArraySubset) -> bool {
        if area.is_empty() {
            return true;
        }
        let end = area.end();
        match self {
            Self::Box { region, .. } => region.intersect(area).is_some_and(|i| i == *area),
            Self::Outer { distinct, .. } => {
                distinct.iter().enumerate().all(|(d, v)| count_in(v, area.start()[d], end[d]) as u64 == area.shape()[d])
            }
            Self::Points { .. } => {
                let mut inside: Vec<&Vec<u64>> = self.points_in(area).map(|(_, p)| p).collect();
                inside.sort_unstable();
                inside.dedup();
                inside.len() as u64 == area.num_elements()
            }
        }
    }

    /// The points (number, coordinates) inside `area`, which lies inside
    /// one grid chunk.
    fn points_in<'s>(&'s self, area: &'s ArraySubset) -> Box<dyn Iterator<Item = (usize, &'s Vec<u64>)> + 's> {
        let Self::Points { points, by_chunk, chunk_shape, .. } = self else {
            return Box::new(std::iter::empty());
        };
        let chunk = point_unit(area.start().iter().copied(), chunk_shape);
        let end = area.end();
        let inside = move |p: &Vec<u64>| p.iter().zip(area.start()).zip(&end).all(|((x, s), e)| s <= x && x < e);
        match by_chunk.get(&chunk) {
            Some(list) => Box::new(list.iter().map(move |&i| (i, &points[i])).filter(move |(_, p)| inside(p))),
            None => Box::new(std::iter::empty()),
        }
    }

    /// Writes the elements that fall in the box `origin .. origin +
    /// buf_shape` (array coordinates, inside one grid chunk) into `buf`, a
    /// C-order buffer of that shape. `elem` is the element size in bytes
    /// (1 for variable-length data).
    ///
    /// # Errors
    /// Data of the wrong kind or length for the placement.
    pub(crate) fn place(
        &self,
        origin: &[u64],
        buf_shape: &[u64],
        buf: &mut ChunkData,
        elem: usize,
    ) -> Result<(), SubsetError> {
        let area = ArraySubset::new(origin.to_vec(), buf_shape.to_vec())?;
        match self {
            Self::Box { region, data, scalar } => {
                let Some(part) = region.intersect(&area).filter(|p| !p.is_empty()) else { return Ok(()) };
                let dst_start = part.relative_to(origin);
                if *scalar {
                    return fill_box(data, buf, buf_shape, &dst_start, elem);
                }
                let src_part = part.relative_to(region.start());
                super::copy::copy_data(data, region.shape(), &src_part, buf, buf_shape, dst_start.start(), elem)
            }
            Self::Outer { dims, lens, data, scalar, .. } => {
                let end = area.end();
                let local: Vec<Vec<(usize, usize)>> = dims
                    .iter()
                    .enumerate()
                    .map(|(d, entries)| {
                        in_range(entries, origin[d], end[d])
                            .iter()
                            .map(|&(x, p)| (to_usize(x - origin[d]), to_usize(p)))
                            .collect()
                    })
                    .collect();
                if local.iter().any(Vec::is_empty) {
                    return Ok(());
                }
                let src_strides = strides(lens);
                let dst_strides = strides(buf_shape);
                let mut mover = Mover::new(data, buf, elem, *scalar, lens)?;
                let rank = local.len();
                let mut counter = vec![0usize; rank];
                'outer: loop {
                    let (mut src, mut dst) = (0usize, 0usize);
                    for d in 0..rank {
                        let (x, p) = local[d][counter[d]];
                        dst += x * dst_strides[d];
                        src += p * src_strides[d];
                    }
                    mover.copy(src, dst);
                    for d in (0..rank).rev() {
                        counter[d] += 1;
                        if counter[d] < local[d].len() {
                            continue 'outer;
                        }
                        counter[d] = 0;
                    }
                    break;
                }
                Ok(())
            }
            Self::Points { points, data, scalar, .. } => {
                let dst_strides = strides(buf_shape);
                let mut mover = Mover::new(data, buf, elem, *scalar, &[points.len() as u64])?;
                for (i, p) in self.points_in(&area) {
                    let dst = p.iter().zip(origin).zip(&dst_strides).map(|((x, o), s)| to_usize(x - o) * s).sum();
                    mover.copy(i, dst);
                }
                Ok(())
            }
        }
    }
}

#[allow(clippy::cast_possible_truncation)] // offsets inside buffers held in memory
fn to_usize(x: u64) -> usize {
    x as usize
}

/// Writes the one element `value` to every position of `part` of `buf`
/// (C order, shape `buf_shape`).
fn fill_box(
    value: &ChunkData,
    buf: &mut ChunkData,
    buf_shape: &[u64],
    part: &ArraySubset,
    elem: usize,
) -> Result<(), SubsetError> {
    if elem == 0 && matches!(value, ChunkData::Fixed(_)) {
        return Ok(());
    }
    let rank = buf_shape.len();
    let st = strides(buf_shape);
    let (lead, run) = match rank {
        0 => (0, 1),
        _ => (rank - 1, to_usize(part.shape()[rank - 1])),
    };
    let last_start = if rank == 0 { 0 } else { to_usize(part.start()[rank - 1]) };
    let mut counter = vec![0u64; lead];
    loop {
        let base: usize = (0..lead).map(|d| to_usize(part.start()[d] + counter[d]) * st[d]).sum::<usize>() + last_start;
        match (value, &mut *buf) {
            (ChunkData::Fixed(v), ChunkData::Fixed(b)) if v.len() == elem => {
                let end = (base + run) * elem;
                if end > b.len() {
                    return Err(SubsetError("a write outside its chunk".into()));
                }
                for dst in b[base * elem..end].chunks_exact_mut(elem) {
                    dst.copy_from_slice(v);
                }
            }
            (ChunkData::Variable(v), ChunkData::Variable(b)) if v.len() == 1 && base + run <= b.len() => {
                for dst in &mut b[base..base + run] {
                    dst.clone_from(&v[0]);
                }
            }
            _ => return Err(SubsetError("expected 1 element of the array's type to broadcast".into())),
        }
        let mut d = lead;
        loop {
            if d == 0 {
                return Ok(());
            }
            d -= 1;
            counter[d] += 1;
            if counter[d] < part.shape()[d] {
                break;
            }
            counter[d] = 0;
        }
    }
}

/// C-order strides, in elements.
fn strides(shape: &[u64]) -> Vec<usize> {
    let mut s = vec![0usize; shape.len()];
    let mut acc = 1usize;
    for d in (0..shape.len()).rev() {
        s[d] = acc;
        acc = acc.saturating_mul(to_usize(shape[d]));
    }
    s
}

/// Copies single elements from the data to a buffer.
enum Mover<'s, 'd> {
    Fixed { src: &'s [u8], dst: &'d mut [u8], elem: usize, scalar: bool },
    Variable { src: &'s [Vec<u8>], dst: &'d mut [Vec<u8>], scalar: bool },
}

impl<'s, 'd> Mover<'s, 'd> {
    fn new(
        data: &'s ChunkData,
        buf: &'d mut ChunkData,
        elem: usize,
        scalar: bool,
        data_shape: &[u64],
    ) -> Result<Self, SubsetError> {
        let n = if scalar { 1 } else { data_shape.iter().map(|&d| to_usize(d)).product() };
        let wrong = || SubsetError(format!("expected {n} elements of the array's type for the selection"));
        match (data, buf) {
            (ChunkData::Fixed(s), ChunkData::Fixed(d)) => {
                if s.len() != n * elem {
                    return Err(wrong());
                }
                Ok(Self::Fixed { src: s, dst: d, elem, scalar })
            }
            (ChunkData::Variable(s), ChunkData::Variable(d)) => {
                if s.len() != n {
                    return Err(wrong());
                }
                Ok(Self::Variable { src: s, dst: d, scalar })
            }
            _ => Err(wrong()),
        }
    }

    /// Element `src` of the data to element `dst` of the buffer.
    fn copy(&mut self, src: usize, dst: usize) {
        match self {
            Self::Fixed { src: s, dst: d, elem, scalar } => {
                let from = if *scalar { 0 } else { src * *elem };
                d[dst * *elem..(dst + 1) * *elem].copy_from_slice(&s[from..from + *elem]);
            }
            Self::Variable { src: s, dst: d, scalar } => {
                d[dst].clone_from(&s[if *scalar { 0 } else { src }]);
            }
        }
    }
}
