//! A selection projected onto a chunk grid, one dimension at a time: for a
//! [`DimIndexer`] (or a range of its positions) and a unit extent, the
//! touched units along that dimension in monotonic order and, per unit,
//! the runs of positions that land in it ([`Axis`], [`Run`]). A slice is
//! projected arithmetically (nothing stored, whatever its length); a list
//! is sorted by unit once and its groups stored.
//!
//! Both directions use it: the read plan ([`super::plan`]) projects each
//! slab's dimensions onto the unit grid (chunks, or inner chunks of
//! shards), and a write ([`super::placement`]) asks it which chunks (or
//! inner chunks) a selection touches ([`TouchedChunks`]: the outer product
//! of the per-dimension projections, or the distinct units of a coordinate
//! selection's points, [`point_unit`]).

use std::ops::Range;

use crate::zarr::selection::DimIndexer;

/// One run of a dimension's selected indices inside one unit: output
/// positions `out .. out + len` take unit indices `inn, inn + step, ...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// First output position (relative to the slab).
    pub out: u64,
    /// First index inside the unit.
    pub inn: u64,
    /// How many positions.
    pub len: u64,
    /// Distance between consecutive indices inside the unit.
    pub step: i64,
}

/// One dimension of a slab projected onto the unit grid: a sequence of
/// groups (one per touched unit along the dimension, in monotonic unit
/// order), each with its runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Axis {
    /// Positions `0..len` take indices `start + step * p` (units of extent
    /// `c`); groups are computed, never stored.
    Slice {
        /// First index.
        start: u64,
        /// Distance between indices (never 0 when `len > 1`).
        step: i64,
        /// Positions.
        len: u64,
        /// Unit extent along this dimension.
        c: u64,
    },
    /// Stored groups (list selections): group `g` is unit `units[g]`, runs
    /// `runs[bounds[g]..bounds[g + 1]]`; units ascending.
    Groups {
        /// Unit of each group.
        units: Vec<u64>,
        /// Group `g`'s runs start at `bounds[g]` (one more entry at the end).
        bounds: Vec<usize>,
        /// Every group's runs.
        runs: Vec<Run>,
    },
}

/// Index `p` of the sequence `start, start + step, ...`.
pub(crate) fn at(start: u64, step: i64, p: u64) -> u64 {
    // In the dimension by construction (the indexer's indices are).
    u64::try_from(i128::from(start) + i128::from(step) * i128::from(p)).unwrap_or(0)
}

impl Axis {
    /// The projection of positions `positions` of `ix` onto units of
    /// extent `c` (positions in the result are relative to
    /// `positions.start`).
    #[must_use]
    pub fn of(ix: &DimIndexer, positions: Range<u64>, c: u64) -> Self {
        let c = c.max(1);
        let len = positions.end.saturating_sub(positions.start);
        match ix {
            DimIndexer::Index(x) => Self::Slice { start: *x, step: 1, len: len.min(1), c },
            DimIndexer::Slice { start, step, .. } => {
                Self::Slice { start: at(*start, *step, positions.start), step: *step, len, c }
            }
            DimIndexer::List(_) => {
                let mut runs_out: Vec<Run> = Vec::new();
                // Sort positions by unit, keeping output order within one.
                let mut order: Vec<u64> = positions.clone().collect();
                order.sort_by_key(|&p| ix.get(p) / c);
                let mut units = Vec::new();
                let mut bounds = Vec::new();
                for p in order {
                    let idx = ix.get(p);
                    let (unit, inn, out) = (idx / c, idx % c, p - positions.start);
                    if units.last() != Some(&unit) {
                        units.push(unit);
                        bounds.push(runs_out.len());
                    } else if let Some(r) = runs_out.last_mut() {
                        if r.out + r.len == out {
                            let delta = i128::from(inn) - i128::from(r.inn);
                            if r.len == 1 {
                                if let Ok(step) = i64::try_from(delta) {
                                    r.step = step;
                                    r.len = 2;
                                    continue;
                                }
                            } else if delta == i128::from(r.step) * i128::from(r.len) {
                                r.len += 1;
                                continue;
                            }
                        }
                    }
                    runs_out.push(Run { out, inn, len: 1, step: 1 });
                }
                bounds.push(runs_out.len());
                Self::Groups { units, bounds, runs: runs_out }
            }
        }
    }

    /// Whether consecutive positions of a slice never skip a unit (then
    /// groups are units, else positions).
    fn dense(step: i64, len: u64, c: u64) -> bool {
        len <= 1 || step.unsigned_abs() <= c
    }

    /// How many groups (touched units along this dimension).
    #[must_use]
    pub fn groups(&self) -> u64 {
        match self {
            Self::Slice { len: 0, .. } => 0,
            Self::Slice { start, step, len, c } => {
                if Self::dense(*step, *len, *c) {
                    let (a, b) = (start / c, at(*start, *step, len - 1) / c);
                    a.abs_diff(b) + 1
                } else {
                    *len
                }
            }
            Self::Groups { units, .. } => units.len() as u64,
        }
    }

    /// The unit of group `g` (monotonic in `g`).
    #[must_use]
    pub fn unit(&self, g: u64) -> u64 {
        match self {
            Self::Slice { start, step, len, c } => {
                if Self::dense(*step, *len, *c) {
                    if *step >= 0 {
                        start / c + g
                    } else {
                        start / c - g
                    }
                } else {
                    at(*start, *step, g) / c
                }
            }
            #[allow(clippy::cast_possible_truncation)] // g < groups()
            Self::Groups { units, .. } => units[g as usize],
        }
    }

    /// Appends group `g`'s runs to `out`.
    pub fn runs(&self, g: u64, out: &mut Vec<Run>) {
        match self {
            Self::Slice { start, step, len, c } => {
                if !Self::dense(*step, *len, *c) {
                    let idx = at(*start, *step, g);
                    out.push(Run { out: g, inn: idx % c, len: 1, step: 1 });
                    return;
                }
                let (start, c, s) = (u128::from(*start), u128::from(*c), u128::from(step.unsigned_abs().max(1)));
                let u = u128::from(self.unit(g));
                let (lo, hi) = if *step >= 0 {
                    let first = u * c;
                    let lo = if first <= start { 0 } else { (first - start).div_ceil(s) };
                    (lo, ((u + 1) * c - 1 - start) / s + 1)
                } else {
                    let top = (u + 1) * c - 1;
                    let lo = if start <= top { 0 } else { (start - top).div_ceil(s) };
                    (lo, (start - u * c) / s + 1)
                };
                let hi = hi.min(u128::from(*len));
                #[allow(clippy::cast_possible_truncation)] // positions < len, indices < the dimension
                let (lo, hi) = (lo as u64, hi as u64);
                let inn = u128::from(at(start as u64, *step, lo)) - u * c;
                #[allow(clippy::cast_possible_truncation)]
                out.push(Run { out: lo, inn: inn as u64, len: hi - lo, step: if hi - lo > 1 { *step } else { 1 } });
            }
            #[allow(clippy::cast_possible_truncation)]
            Self::Groups { bounds, runs, .. } => {
                out.extend_from_slice(&runs[bounds[g as usize]..bounds[g as usize + 1]]);
            }
        }
    }

    /// The first group after `g` whose unit is in another block of `n`
    /// units (a shard), or `groups()`.
    #[must_use]
    pub fn block_end(&self, g: u64, n: u64) -> u64 {
        let n = n.max(1);
        let block = self.unit(g) / n;
        let (mut lo, mut hi) = (g + 1, self.groups());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.unit(mid) / n == block {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// Units touched along one dimension by the whole selection (its
/// positions `0..ix.len()`), counted: a slice arithmetically, a list by
/// sorting its units.
pub(crate) fn touched_along(ix: &DimIndexer, c: u64) -> u64 {
    match ix {
        DimIndexer::List(v) => {
            let mut u: Vec<u64> = v.iter().map(|i| i / c.max(1)).collect();
            u.sort_unstable();
            u.dedup();
            u.len() as u64
        }
        _ => Axis::of(ix, 0..ix.len(), c).groups(),
    }
}

/// The unit (grid coordinates) holding the point `coords`, units of shape
/// `unit`.
pub(crate) fn point_unit(coords: impl IntoIterator<Item = u64>, unit: &[u64]) -> Vec<u64> {
    coords.into_iter().zip(unit).map(|(x, &c)| x / c.max(1)).collect()
}

/// The units a selection touches, in grid (C) order, enumerated on
/// demand: per dimension the selection's projection ([`Axis`]; a slice
/// arithmetic, a list its distinct units), or for a coordinate selection
/// the distinct units of its points, sorted.
#[derive(Debug)]
pub(crate) struct TouchedChunks {
    /// Per dimension: its projection, and whether its units descend (a
    /// negative step), so the `i`-th touched unit is group `groups - 1 - i`.
    dims: Vec<(Axis, bool)>,
    /// For coordinate selections: the distinct units, sorted.
    points: Option<Vec<Vec<u64>>>,
    count: u64,
}

impl TouchedChunks {
    /// None.
    pub(crate) fn empty() -> Self {
        Self { dims: Vec::new(), points: Some(Vec::new()), count: 0 }
    }

    /// The outer product of the projections of `dims` (every position of
    /// each) onto units of extent `unit`.
    pub(crate) fn outer<'d>(dims: impl IntoIterator<Item = &'d DimIndexer>, unit: &[u64]) -> Self {
        let dims: Vec<(Axis, bool)> = dims
            .into_iter()
            .zip(unit)
            .map(|(ix, &c)| {
                let axis = Axis::of(ix, 0..ix.len(), c);
                let descending = axis.groups() > 1 && axis.unit(0) > axis.unit(1);
                (axis, descending)
            })
            .collect();
        let count = dims.iter().fold(1u64, |acc, (a, _)| acc.saturating_mul(a.groups()));
        Self { dims, points: None, count }
    }

    /// The distinct units of `points`, each a point's unit
    /// ([`point_unit`]), in any order.
    pub(crate) fn points(mut units: Vec<Vec<u64>>) -> Self {
        units.sort_unstable();
        units.dedup();
        let count = units.len() as u64;
        Self { dims: Vec::new(), points: Some(units), count }
    }

    /// How many units (saturating at `u64::MAX`).
    pub(crate) fn len(&self) -> u64 {
        self.count
    }

    /// The grid coordinates of the `i`-th touched unit (`i < len()`).
    pub(crate) fn get(&self, i: u64) -> Vec<u64> {
        if let Some(points) = &self.points {
            #[allow(clippy::cast_possible_truncation)] // i < len(), a list in memory
            return points[i as usize].clone();
        }
        let mut out = vec![0u64; self.dims.len()];
        let mut rest = i;
        for (d, (axis, descending)) in self.dims.iter().enumerate().rev() {
            let n = axis.groups();
            let g = rest % n;
            out[d] = axis.unit(if *descending { n - 1 - g } else { g });
            rest /= n;
        }
        out
    }

    /// Every touched unit, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Vec<u64>> + '_ {
        (0..self.count).map(|i| self.get(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_project_slices_arithmetically() {
        let ix = DimIndexer::Slice { start: 2, step: 1, len: 8 };
        let a = Axis::of(&ix, 0..8, 4);
        assert_eq!(a.groups(), 3);
        let mut r = Vec::new();
        for g in 0..3 {
            a.runs(g, &mut r);
        }
        assert_eq!(
            r,
            vec![
                Run { out: 0, inn: 2, len: 2, step: 1 },
                Run { out: 2, inn: 0, len: 4, step: 1 },
                Run { out: 6, inn: 0, len: 2, step: 1 }
            ]
        );
        let ix = DimIndexer::Slice { start: 9, step: -3, len: 4 }; // 9, 6, 3, 0
        let a = Axis::of(&ix, 0..4, 5);
        assert_eq!((a.groups(), a.unit(0), a.unit(1)), (2, 1, 0));
        let mut r = Vec::new();
        a.runs(0, &mut r);
        a.runs(1, &mut r);
        assert_eq!(r, vec![Run { out: 0, inn: 4, len: 2, step: -3 }, Run { out: 2, inn: 3, len: 2, step: -3 }]);
        let ix = DimIndexer::List(vec![7, 0, 7, 7, 1]);
        let a = Axis::of(&ix, 1..5, 4);
        let mut r = Vec::new();
        a.runs(0, &mut r);
        assert_eq!(r, vec![Run { out: 0, inn: 0, len: 1, step: 1 }, Run { out: 3, inn: 1, len: 1, step: 1 }]);
        r.clear();
        a.runs(1, &mut r);
        assert_eq!(r, vec![Run { out: 1, inn: 3, len: 2, step: 0 }]);
        // Sparse: each position its own unit.
        let a = Axis::of(&DimIndexer::Slice { start: 1, step: 7, len: 3 }, 0..3, 3);
        assert_eq!((a.groups(), a.unit(0), a.unit(1), a.unit(2)), (3, 0, 2, 5));
    }

    #[test]
    fn touched_chunks_come_in_grid_order() {
        // 9, 6, 3, 0 over chunks of 5 (descending), and a list.
        let dims = [DimIndexer::Slice { start: 9, step: -3, len: 4 }, DimIndexer::List(vec![7, 0, 7, 1])];
        let t = TouchedChunks::outer(&dims, &[5, 4]);
        assert_eq!(t.len(), 4);
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![vec![0, 0], vec![0, 1], vec![1, 0], vec![1, 1]]);
        // Sparse: one chunk per position, descending.
        let dims = [DimIndexer::Slice { start: 20, step: -7, len: 3 }]; // 20, 13, 6
        let t = TouchedChunks::outer(&dims, &[3]);
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![vec![2], vec![4], vec![6]]);
        let empty = [DimIndexer::Slice { start: 0, step: 1, len: 0 }, DimIndexer::Index(3)];
        assert_eq!(TouchedChunks::outer(&empty, &[2, 2]).len(), 0);
        assert_eq!(TouchedChunks::outer(&[], &[]).iter().collect::<Vec<_>>(), vec![Vec::<u64>::new()]);
        let t = TouchedChunks::points(vec![
            point_unit([5, 1], &[2, 2]),
            point_unit([0, 0], &[2, 2]),
            point_unit([4, 0], &[2, 2]),
        ]);
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![vec![0, 0], vec![2, 0]]);
    }
}
