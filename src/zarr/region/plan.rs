//! Read planning: a checked selection turned into slabs and, per slab, the
//! decoding units (chunks, or inner chunks of shards) it touches — all
//! produced lazily.
//!
//! Nothing here holds a collection proportional to the number of units a
//! whole selection touches. A plan keeps the selection and, for the
//! dimensions after the split dimension, their projection onto the unit grid
//! (computed arithmetically for slices, stored only for lists, which are
//! part of the request already; [`Axis`], from `super::projection`, the
//! projection a write's touched chunks come from too). A slab keeps its own dimension's projection
//! (bounded by the slab's rows) or, for coordinate selections, its points in
//! unit order (4 bytes per point, the slab's points bounded by the budget).
//! Units are enumerated one at a time, by an odometer over the per-dimension
//! groups.
//!
//! The number of units a read touches is counted arithmetically up front
//! ([`ReadPlan::touched_units`]), so `limits.max_chunks_per_request` is
//! checked before any work. All arithmetic on shapes is checked or
//! saturating: a 32-dimensional array or a shape near `u64::MAX` cannot
//! overflow or blow up.
//!
//! This module depends on the selection and the array's unit grid alone
//! (no I/O), so the fuzz target `read_plan` drives it directly through
//! [`plan_read`], the planner the server and the engine's collecting reads
//! ([`super::read_selection`]) use.

use std::ops::Range;
use std::sync::Arc;

use super::projection::{at, point_unit, touched_along};
pub use super::projection::{Axis, Run};
use crate::zarr::array::ArrayDescription;
use crate::zarr::selection::{DimIndexer, Selection, SelectionMode};

/// Estimated bytes of planning state per point of a coordinate selection
/// (its index in the sort, the unit coordinates compared while sorting):
/// a points slab holds at most `budget / max(element size, this)` points.
const POINT_COST: u64 = 64;

/// Bytes a variable-length element is planned at (slabs of
/// `budget / 64` elements), until the real sizes say otherwise (the
/// streaming read plans smaller slabs again when they do not fit).
pub const VAR_ELEMENT_ESTIMATE: u64 = 64;

/// The plan of reading `sel` (checked against `desc`'s shape) in slabs of
/// at most `budget` bytes. Units are chunks, or inner chunks of shards;
/// elements of variable-length types count as [`VAR_ELEMENT_ESTIMATE`]
/// bytes.
///
/// # Errors
/// A selection whose rank does not match the array's.
pub fn plan_read(desc: &ArrayDescription, sel: Selection, budget: u64) -> Result<ReadPlan, PlanError> {
    let (unit, per_shard) = match &desc.sharding {
        Some(s) => (s.inner_chunk_shape().to_vec(), Some(s.chunks_per_shard().to_vec())),
        None => (desc.chunk_shape.clone(), None),
    };
    let elem_estimate =
        if desc.data_type.is_variable() { VAR_ELEMENT_ESTIMATE } else { desc.data_type.size().unwrap_or(1) as u64 };
    ReadPlan::new(sel, unit, per_shard, elem_estimate, budget)
}

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

/// The most index-list entries (and coordinate points) of a selection
/// planned inline on an async worker. Planning a slice selection, and each
/// of its slabs, costs a few steps per dimension whatever its size; lists
/// and points cost a step (a sort, for points) per entry: up to this many,
/// less than the hand-off to the CPU pool and back.
pub const CHEAP_WORK: u64 = 4096;

/// Whether planning `sel` (and its slabs) is cheap, see [`ReadPlan::is_cheap`].
#[must_use]
pub fn is_cheap(sel: &Selection) -> bool {
    let lists =
        sel.dims.iter().filter(|d| matches!(d, DimIndexer::List(_))).fold(0u64, |a, d| a.saturating_add(d.len()));
    lists <= CHEAP_WORK && (sel.mode != SelectionMode::Coordinate || sel.num_elements() <= CHEAP_WORK)
}

/// A read, planned: the selection, the unit grid and the split into slabs.
#[derive(Debug)]
pub struct ReadPlan {
    sel: Selection,
    unit: Vec<u64>,
    unit_strides: Vec<u64>,
    /// Units per shard along each dimension (sharded arrays).
    per_shard: Option<Vec<u64>>,
    lens: Vec<u64>,
    elements: u64,
    /// Outer mode: the split dimension, rows per slab at most, and the
    /// number of positions before it.
    k: usize,
    max_rows: u64,
    /// Outer mode: rows a slab may grow to so that it ends where a unit
    /// ends instead of cutting it (see [`ReadPlan::growing_to`]); at least
    /// `max_rows`.
    grow_rows: u64,
    /// Outer mode: rows of the first slab when slabs ramp up (see
    /// [`ReadPlan::ramping_from`]); 0 when they do not.
    ramp_rows: u64,
    prefix_count: u64,
    /// Outer mode: the dimensions after `k` (every slab's).
    tail: Arc<Vec<Axis>>,
    /// Coordinate mode: points per slab.
    points_per_slab: u64,
    /// What the plan was made with: element size, slab budget.
    es: u64,
    budget: u64,
}

impl ReadPlan {
    /// Plans `sel` over units of shape `unit` (the chunk, or the inner
    /// chunk when sharded, with `per_shard` inner chunks per shard), in
    /// slabs of at most `budget` bytes of elements of about `elem_bytes`.
    ///
    /// # Errors
    /// A unit shape of the wrong rank or with a zero extent.
    pub fn new(
        sel: Selection,
        unit: Vec<u64>,
        per_shard: Option<Vec<u64>>,
        elem_bytes: u64,
        budget: u64,
    ) -> Result<Self, PlanError> {
        Self::split_from(sel, unit, per_shard, elem_bytes, budget, 0)
    }

    /// The same read planned again with another `budget`, for slabs from
    /// element `offset` on (the start of a slab of this plan, or of one
    /// planned again): the split dimension is never before one whose rows
    /// `offset` is a multiple of, so the new slabs start exactly there.
    /// Costs a copy of the selection (its lists).
    ///
    /// # Errors
    /// None in practice (the unit shape was checked already).
    pub fn replan(&self, budget: u64, offset: u64) -> Result<Self, PlanError> {
        let rank = self.lens.len();
        let row = |d: usize| self.lens[d + 1..].iter().fold(1u64, |a, &l| a.saturating_mul(l));
        let min_k = (0..rank).find(|&d| offset % row(d).max(1) == 0).unwrap_or(rank.saturating_sub(1));
        Self::split_from(self.sel.clone(), self.unit.clone(), self.per_shard.clone(), self.es, budget, min_k)
    }

    /// After the slab of `slab_len` elements at element `offset` held more
    /// variable-length bytes than its cap: the same read planned again from
    /// `offset` in slabs of a quarter of its elements (a slab may be far
    /// shorter than the plan's budget allows), down to one element.
    ///
    /// # Errors
    /// As [`ReadPlan::replan`].
    pub fn replan_smaller(&self, slab_len: u64, offset: u64) -> Result<Self, PlanError> {
        let elements = (slab_len / 4).max(1).min(self.budget / VAR_ELEMENT_ESTIMATE);
        self.replan(elements.saturating_mul(VAR_ELEMENT_ESTIMATE).max(1), offset)
    }

    /// After a slab that used little of its cap: the same read planned
    /// again from `offset` with twice the budget, at most `max_budget`
    /// (the first plan's); `None` when the budget is there already.
    ///
    /// # Errors
    /// As [`ReadPlan::replan`].
    pub fn replan_larger(&self, max_budget: u64, offset: u64) -> Result<Option<Self>, PlanError> {
        if self.budget >= max_budget {
            return Ok(None);
        }
        self.replan(self.budget.saturating_mul(2).min(max_budget), offset).map(Some)
    }

    /// The slab budget the plan was made with.
    #[must_use]
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// The same plan, whose slabs may grow up to `max_bytes` (more than
    /// the budget) to end where a unit ends rather than cut it: a unit cut
    /// between two slabs is read and decoded once for each. A slab grows
    /// only over the one run of positions inside a unit it would otherwise
    /// cut (its first), so it stays below `max_bytes` and the budget when
    /// units are small. Not for variable-length elements (their slabs are
    /// sized by their real bytes).
    #[must_use]
    pub fn growing_to(mut self, max_bytes: u64) -> Self {
        if self.sel.mode != SelectionMode::Coordinate && !self.lens.is_empty() {
            let row = self.lens[self.k + 1..].iter().fold(self.es, |a, &l| a.saturating_mul(l)).max(1);
            self.grow_rows = self.max_rows.max(max_bytes / row);
        }
        self
    }

    /// The same plan, whose first slabs ramp up: the first holds about
    /// `first_bytes` (whole rows of the split dimension, one at least), and
    /// each next one as many rows as all before it, up to the plan's slabs
    /// (1, 1, 2, 4, 8, ... times the first: they end on the multiples of
    /// the first slab's rows, so on a unit's end wherever the first slab's
    /// rows divide the unit's). Ramping slabs never grow to end on a unit:
    /// they cut units, which suits units whose parts are read alone for
    /// the cost of those parts (uncompressed chunks read straight into the
    /// slab), never units decoded whole (each slab would decode them
    /// again). So the first slab, which is read whole before any byte of
    /// the answer is sent, is small, and the next ones overlap sending.
    /// A plan whose slabs are that small already is unchanged.
    #[must_use]
    pub fn ramping_from(mut self, first_bytes: u64) -> Self {
        if self.sel.mode != SelectionMode::Coordinate && !self.lens.is_empty() {
            let row = self.lens[self.k + 1..].iter().fold(self.es, |a, &l| a.saturating_mul(l)).max(1);
            let rows = (first_bytes / row).max(1);
            self.ramp_rows = if rows < self.max_rows { rows } else { 0 };
        }
        self
    }

    /// The most bytes (elements of the plan's estimated size) one slab of
    /// this plan holds: the budget, or more when slabs grow to end on a
    /// unit ([`ReadPlan::growing_to`]) or one row of the split dimension
    /// is larger.
    #[must_use]
    pub fn max_slab_bytes(&self) -> u64 {
        if self.sel.mode == SelectionMode::Coordinate || self.lens.is_empty() {
            return self.points_per_slab.saturating_mul(self.es).max(self.es);
        }
        let row = self.lens[self.k + 1..].iter().fold(self.es, |a, &l| a.saturating_mul(l));
        // A slab grows over one run inside a unit: at most the unit's extent.
        let rows = self.max_rows.max(self.grow_rows.min(self.unit[self.k]));
        row.saturating_mul(rows.min(self.lens[self.k].max(1)))
    }

    fn split_from(
        sel: Selection,
        unit: Vec<u64>,
        per_shard: Option<Vec<u64>>,
        elem_bytes: u64,
        budget: u64,
        min_k: usize,
    ) -> Result<Self, PlanError> {
        if unit.len() != sel.dims.len() || unit.contains(&0) {
            return Err(PlanError(format!(
                "the unit shape {unit:?} does not fit a selection of {} dimensions",
                sel.dims.len()
            )));
        }
        if let Some(n) = &per_shard {
            if n.len() != unit.len() || n.contains(&0) {
                return Err(PlanError(format!("the shard layout {n:?} does not fit the unit shape {unit:?}")));
            }
        }
        let es = elem_bytes.max(1);
        let lens: Vec<u64> = sel.dims.iter().map(DimIndexer::len).collect();
        let elements = sel.num_elements();
        let rank = lens.len();
        let mut unit_strides = vec![1u64; rank];
        for d in (0..rank.saturating_sub(1)).rev() {
            unit_strides[d] = unit_strides[d + 1].saturating_mul(unit[d + 1]);
        }
        let mut plan = Self {
            sel,
            unit,
            unit_strides,
            per_shard,
            lens,
            elements,
            k: 0,
            max_rows: 1,
            grow_rows: 1,
            ramp_rows: 0,
            prefix_count: 0,
            tail: Arc::new(Vec::new()),
            points_per_slab: (budget / es.max(POINT_COST)).clamp(1, u64::from(u32::MAX)),
            es,
            budget,
        };
        if plan.sel.mode != SelectionMode::Coordinate && rank > 0 && elements > 0 {
            let row = |d: usize| plan.lens[d + 1..].iter().fold(es, |a, &l| a.saturating_mul(l));
            let k = (0..rank).find(|&d| row(d) <= budget).unwrap_or(rank - 1).max(min_k.min(rank - 1));
            plan.k = k;
            plan.max_rows = (budget / row(k).max(1)).max(1);
            plan.grow_rows = plan.max_rows;
            plan.prefix_count = plan.lens[..k].iter().fold(1u64, |a, &b| a.saturating_mul(b));
            let tail = (k + 1..rank).map(|d| Axis::of(&plan.sel.dims[d], 0..plan.lens[d], plan.unit[d])).collect();
            plan.tail = Arc::new(tail);
        }
        Ok(plan)
    }

    /// Whether planning each of this read's slabs costs less than a
    /// hand-off to the CPU pool: at most [`CHEAP_WORK`] units touched and
    /// [`CHEAP_WORK`] index-list entries or points, whatever the number of
    /// elements (a hot tile's slabs are planned inline).
    #[must_use]
    pub fn is_cheap(&self) -> bool {
        // A slab's split walks the units along its dimension: few units
        // keep that cheap too.
        is_cheap(&self.sel) && self.touched_units() <= CHEAP_WORK
    }

    /// The selection planned.
    #[must_use]
    pub fn selection(&self) -> &Selection {
        &self.sel
    }

    /// Elements of the whole read.
    #[must_use]
    pub fn elements(&self) -> u64 {
        self.elements
    }

    /// The unit shape.
    #[must_use]
    pub fn unit_shape(&self) -> &[u64] {
        &self.unit
    }

    /// The unit's C-order strides.
    #[must_use]
    pub fn unit_strides(&self) -> &[u64] {
        &self.unit_strides
    }

    /// How many units (chunks, or inner chunks) the whole read touches,
    /// saturating; counted without enumerating them (coordinate selections:
    /// the distinct units among the points, by sorting).
    #[must_use]
    pub fn touched_units(&self) -> u64 {
        if self.elements == 0 && self.sel.mode != SelectionMode::Coordinate {
            return 0;
        }
        match self.sel.mode {
            SelectionMode::Coordinate => {
                let n = usize::try_from(self.sel.num_elements()).unwrap_or(usize::MAX);
                if n == 0 {
                    return 0;
                }
                if self.sel.dims.is_empty() {
                    return 1;
                }
                let mut order: Vec<usize> = (0..n).collect();
                order.sort_unstable_by(|&a, &b| self.point_key_cmp(a as u64, b as u64, false));
                let distinct = order
                    .windows(2)
                    .filter(|w| self.point_key_cmp(w[0] as u64, w[1] as u64, false) != std::cmp::Ordering::Equal)
                    .count();
                distinct as u64 + 1
            }
            _ => self
                .sel
                .dims
                .iter()
                .zip(&self.unit)
                .map(|(ix, &c)| touched_along(ix, c))
                .fold(1u64, u64::saturating_mul),
        }
    }

    /// Compares points `a` and `b` by unit (by shard first when `shards`).
    fn point_key_cmp(&self, a: u64, b: u64, shards: bool) -> std::cmp::Ordering {
        if shards {
            if let Some(n) = &self.per_shard {
                for ((ix, &c), &n) in self.sel.dims.iter().zip(&self.unit).zip(n) {
                    let o = (ix.get(a) / c / n).cmp(&(ix.get(b) / c / n));
                    if o.is_ne() {
                        return o;
                    }
                }
            }
        }
        for (ix, &c) in self.sel.dims.iter().zip(&self.unit) {
            let o = (ix.get(a) / c).cmp(&(ix.get(b) / c));
            if o.is_ne() {
                return o;
            }
        }
        std::cmp::Ordering::Equal
    }

    /// Every slab, in output order, produced one at a time.
    #[must_use]
    pub fn slabs(self: &Arc<Self>) -> Slabs {
        Slabs { plan: self.clone(), prefix: 0, pos: 0, done: false }
    }

    /// The slabs from element `offset` on (which must start a row of the
    /// split dimension: the start of a slab of this plan, or see
    /// [`ReadPlan::replan`]).
    #[must_use]
    pub fn slabs_from(self: &Arc<Self>, offset: u64) -> Slabs {
        let plan = self.clone();
        if plan.sel.mode == SelectionMode::Coordinate {
            return Slabs { plan, prefix: 0, pos: offset, done: false };
        }
        if plan.lens.is_empty() {
            return Slabs { plan, prefix: 0, pos: 0, done: offset > 0 };
        }
        let k = plan.k;
        let row = plan.lens[k + 1..].iter().fold(1u64, |a, &l| a.saturating_mul(l)).max(1);
        let q = offset / row;
        let len_k = plan.lens[k].max(1);
        Slabs { prefix: q / len_k, pos: q % len_k, done: false, plan }
    }

    /// Rows at most, and rows a slab may grow to, of the slab that starts
    /// after `done` rows of the split dimension (counted over every
    /// position before it): smaller while the slabs ramp up
    /// ([`ReadPlan::ramping_from`]).
    fn rows_after(&self, done: u64) -> (u64, u64) {
        if self.ramp_rows == 0 {
            return (self.max_rows, self.grow_rows);
        }
        let rows = done.clamp(self.ramp_rows, self.max_rows);
        if rows < self.max_rows {
            (rows, rows)
        } else {
            (self.max_rows, self.grow_rows)
        }
    }

    /// The end of the segment along `k` that starts at `s`: maximal runs of
    /// positions inside one unit, cut to `max_rows`, merged while they fit
    /// (one run longer than that: up to its end when within `grow_rows`).
    fn segment_end(&self, s: u64, max_rows: u64, grow_rows: u64) -> u64 {
        let k = self.k;
        let (ix, c, len) = (&self.sel.dims[k], self.unit[k], self.lens[k]);
        let limit = s.saturating_add(max_rows).min(len);
        let mut e = s;
        while e < limit {
            let run_end = match ix {
                DimIndexer::Slice { start, step, .. } => {
                    let (idx, c) = (u128::from(at(*start, *step, e)), u128::from(c));
                    let u = idx / c;
                    let s_abs = u128::from(step.unsigned_abs().max(1));
                    let inside = if *step >= 0 { u * c + (c - 1) - idx } else { idx - u * c };
                    // The selection may end inside the unit.
                    u64::try_from(u128::from(e) + inside / s_abs + 1).unwrap_or(u64::MAX).min(len)
                }
                _ => {
                    let u = ix.get(e) / c;
                    let mut x = e + 1;
                    while x < len && x <= limit && ix.get(x) / c == u {
                        x += 1;
                    }
                    x
                }
            };
            if run_end <= limit {
                e = run_end;
            } else if e == s {
                // One run longer than the slab: whole when the plan lets
                // slabs grow that far, else cut.
                e = if run_end - s <= grow_rows { run_end } else { limit };
            } else {
                break;
            }
        }
        e.max(s + 1).min(len)
    }
}

/// The slabs of a plan, made one at a time (each `next` costs at most the
/// slab's own rows or points).
#[derive(Debug)]
pub struct Slabs {
    plan: Arc<ReadPlan>,
    prefix: u64,
    pos: u64,
    done: bool,
}

impl Iterator for Slabs {
    type Item = Arc<Slab>;

    fn next(&mut self) -> Option<Arc<Slab>> {
        if self.done {
            return None;
        }
        let plan = &self.plan;
        if plan.sel.mode == SelectionMode::Coordinate {
            let total = plan.sel.num_elements();
            if self.pos >= total {
                self.done = true;
                return None;
            }
            let (a, b) = (self.pos, self.pos.saturating_add(plan.points_per_slab).min(total));
            self.pos = b;
            #[allow(clippy::cast_possible_truncation)] // points_per_slab <= u32::MAX
            let mut order: Vec<u32> = (0..(b - a) as u32).collect();
            order.sort_by(|&x, &y| plan.point_key_cmp(a + u64::from(x), a + u64::from(y), true));
            return Some(Arc::new(Slab { plan: plan.clone(), len: b - a, kind: SlabKind::Points { start: a, order } }));
        }
        if plan.sel.dims.is_empty() {
            self.done = true;
            return Some(Arc::new(Slab {
                plan: plan.clone(),
                len: 1,
                kind: SlabKind::Outer { head: Vec::new(), dst_strides: Vec::new() },
            }));
        }
        if plan.elements == 0 || self.prefix >= plan.prefix_count {
            self.done = true;
            return None;
        }
        let k = plan.k;
        let done = self.prefix.saturating_mul(plan.lens[k]).saturating_add(self.pos);
        let (max_rows, grow_rows) = plan.rows_after(done);
        let (s, e) = (self.pos, plan.segment_end(self.pos, max_rows, grow_rows));
        // The prefix position of each dimension before k.
        let mut prefix = vec![0u64; k];
        let mut rest = self.prefix;
        for d in (0..k).rev() {
            prefix[d] = rest % plan.lens[d];
            rest /= plan.lens[d];
        }
        if e >= plan.lens[k] {
            self.pos = 0;
            self.prefix += 1;
        } else {
            self.pos = e;
        }
        let mut head: Vec<Axis> =
            prefix.iter().enumerate().map(|(d, &p)| Axis::of(&plan.sel.dims[d], p..p + 1, plan.unit[d])).collect();
        head.push(Axis::of(&plan.sel.dims[k], s..e, plan.unit[k]));
        let mut shape = vec![1u64; k];
        shape.push(e - s);
        shape.extend_from_slice(&plan.lens[k + 1..]);
        let len = shape.iter().fold(1u64, |a, &b| a.saturating_mul(b));
        let mut dst_strides = vec![1u64; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            dst_strides[d] = dst_strides[d + 1].saturating_mul(shape[d + 1]);
        }
        Some(Arc::new(Slab { plan: plan.clone(), len, kind: SlabKind::Outer { head, dst_strides } }))
    }
}

/// One slab: a contiguous run of the output, in C order.
#[derive(Debug)]
pub struct Slab {
    plan: Arc<ReadPlan>,
    /// Elements in the slab.
    pub len: u64,
    kind: SlabKind,
}

#[derive(Debug)]
enum SlabKind {
    /// Basic and orthogonal: per dimension `0..=k` its axis (the rest are
    /// the plan's `tail`), and the slab's strides.
    Outer { head: Vec<Axis>, dst_strides: Vec<u64> },
    /// Coordinate: points `start..start + order.len()`, as offsets sorted
    /// by unit (by shard first, when sharded).
    Points { start: u64, order: Vec<u32> },
}

/// One unit a slab touches, and how its elements land in the slab.
#[derive(Debug, Clone)]
pub struct Unit {
    /// The unit's grid coordinates (inner chunk grid, when sharded).
    pub coords: Vec<u64>,
    /// Where its elements go.
    pub copy: UnitCopy,
}

/// How one unit's elements land in a slab.
#[derive(Debug, Clone)]
pub struct UnitCopy {
    slab: Arc<Slab>,
    /// Outer: the group per dimension; points: the range of `order`.
    pick: Vec<u64>,
}

/// `count` runs of `n` consecutive elements to copy from a unit into a
/// slab: run `j` from unit element `src + j * src_step` to slab element
/// `dst + j * dst_step` (flat, C order; `src_step` may be negative).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strided {
    /// The first run's first unit element.
    pub src: u64,
    /// Unit elements from one run to the next.
    pub src_step: i64,
    /// The first run's first slab element.
    pub dst: u64,
    /// Slab elements from one run to the next.
    pub dst_step: u64,
    /// Runs.
    pub count: u64,
    /// Elements per run.
    pub n: u64,
}

impl Strided {
    /// Run `j`'s first unit and slab elements.
    #[must_use]
    pub fn at(&self, j: u64) -> (u64, u64) {
        (at(self.src, self.src_step, j), self.dst + j * self.dst_step)
    }
}

impl UnitCopy {
    /// The unit elements this copy takes: for an outer slab, the product
    /// of the elements picked in each dimension (one short list of runs
    /// per dimension, not a walk over the runs of the copy).
    #[must_use]
    pub fn elements(&self) -> u64 {
        let slab = &self.slab;
        match &slab.kind {
            SlabKind::Outer { head, .. } => {
                let mut runs = Vec::new();
                let mut total = 1u64;
                for (d, &g) in self.pick.iter().enumerate() {
                    runs.clear();
                    slab.axis(d, head).runs(g, &mut runs);
                    total = total.saturating_mul(runs.iter().map(|r| r.len).sum());
                }
                total
            }
            SlabKind::Points { .. } => {
                let mut n = 0u64;
                self.each(&mut |_, _, k| n = n.saturating_add(k));
                n
            }
        }
    }

    /// Calls `f` for every group of equally spaced runs to copy from the
    /// unit (C order, flat) into the slab (flat): the same copies as
    /// [`UnitCopy::each`], in the same order, but a plane's single elements
    /// come as one [`Strided`] per row instead of one call each, so the copy
    /// kernel can loop without a call per element.
    pub fn each_strided(&self, f: &mut impl FnMut(Strided)) {
        let slab = &self.slab;
        match &slab.kind {
            SlabKind::Outer { head, dst_strides } => {
                let mut runs = Vec::with_capacity(self.pick.len());
                let mut bounds = Vec::with_capacity(self.pick.len() + 1);
                for (d, &g) in self.pick.iter().enumerate() {
                    bounds.push(runs.len());
                    slab.axis(d, head).runs(g, &mut runs);
                }
                bounds.push(runs.len());
                let per_dim: Vec<&[Run]> = bounds.windows(2).map(|w| &runs[w[0]..w[1]]).collect();
                for_each_strided(&per_dim, &slab.plan.unit_strides, dst_strides, f);
            }
            SlabKind::Points { .. } => {
                self.each(&mut |src, dst, n| f(Strided { src, src_step: 0, dst, dst_step: 0, count: 1, n }));
            }
        }
    }

    /// Calls `f(src, dst, n)` for every run of `n` consecutive elements to
    /// copy from the unit (C order, flat) into the slab (flat).
    pub fn each(&self, f: &mut impl FnMut(u64, u64, u64)) {
        let slab = &self.slab;
        let plan = &slab.plan;
        match &slab.kind {
            SlabKind::Outer { head, dst_strides } => {
                let mut runs = Vec::with_capacity(self.pick.len());
                let mut bounds = Vec::with_capacity(self.pick.len() + 1);
                for (d, &g) in self.pick.iter().enumerate() {
                    bounds.push(runs.len());
                    slab.axis(d, head).runs(g, &mut runs);
                }
                bounds.push(runs.len());
                let per_dim: Vec<&[Run]> = bounds.windows(2).map(|w| &runs[w[0]..w[1]]).collect();
                for_each_copy(&per_dim, &plan.unit_strides, dst_strides, f);
            }
            SlabKind::Points { start, order } => {
                #[allow(clippy::cast_possible_truncation)] // a range of `order`
                for &o in &order[self.pick[0] as usize..self.pick[1] as usize] {
                    let p = start + u64::from(o);
                    let mut flat = 0u64;
                    for ((ix, &c), &st) in plan.sel.dims.iter().zip(&plan.unit).zip(&plan.unit_strides) {
                        flat = flat.saturating_add((ix.get(p) % c).saturating_mul(st));
                    }
                    f(flat, u64::from(o), 1);
                }
            }
        }
    }
}

/// The units of one shard a slab touches.
#[derive(Debug)]
pub struct ShardUnits {
    /// The shard's grid coordinates.
    pub shard: Vec<u64>,
    /// Its units (coordinates inside the shard), produced lazily.
    pub units: Units,
}

impl Slab {
    fn axis<'a>(&'a self, d: usize, head: &'a [Axis]) -> &'a Axis {
        head.get(d).unwrap_or_else(|| &self.plan.tail[d - head.len()])
    }

    fn axes(&self) -> Vec<&Axis> {
        match &self.kind {
            SlabKind::Outer { head, .. } => (0..self.plan.lens.len()).map(|d| self.axis(d, head)).collect(),
            SlabKind::Points { .. } => Vec::new(),
        }
    }

    /// Every unit this slab touches, one at a time (grid coordinates).
    #[must_use]
    pub fn units(self: &Arc<Self>) -> Units {
        match &self.kind {
            SlabKind::Outer { .. } => {
                let ranges = self.axes().iter().map(|a| 0..a.groups()).collect();
                Units::outer(self.clone(), ranges, None)
            }
            SlabKind::Points { order, .. } => {
                Units { slab: self.clone(), state: UnitsState::Points { at: 0, end: order.len(), shard: None } }
            }
        }
    }

    /// The units of this slab shard by shard (`per_shard` units per shard
    /// along each dimension, as given to the plan), one shard at a time.
    #[must_use]
    pub fn shards(self: &Arc<Self>) -> Shards {
        let n = self.plan.per_shard.clone().unwrap_or_else(|| vec![1; self.plan.unit.len()]);
        match &self.kind {
            SlabKind::Outer { .. } => {
                let axes = self.axes();
                let spans: Vec<Range<u64>> = axes.iter().zip(&n).map(|(a, &n)| 0..a.block_end(0, n)).collect();
                let done = axes.iter().any(|a| a.groups() == 0);
                Shards { slab: self.clone(), n, spans, at: 0, done }
            }
            SlabKind::Points { order, .. } => {
                Shards { slab: self.clone(), n, spans: Vec::new(), at: 0, done: order.is_empty() }
            }
        }
    }

    fn point_unit(&self, o: u32) -> Vec<u64> {
        let SlabKind::Points { start, .. } = &self.kind else { return Vec::new() };
        let p = start + u64::from(o);
        point_unit(self.plan.sel.dims.iter().map(|ix| ix.get(p)), &self.plan.unit)
    }
}

/// A slab's shards, one at a time.
#[derive(Debug)]
pub struct Shards {
    slab: Arc<Slab>,
    n: Vec<u64>,
    /// Outer: the current shard's group range per dimension.
    spans: Vec<Range<u64>>,
    /// Points: the next offset into `order`.
    at: usize,
    done: bool,
}

impl Iterator for Shards {
    type Item = ShardUnits;

    fn next(&mut self) -> Option<ShardUnits> {
        if self.done {
            return None;
        }
        let slab = self.slab.clone();
        match &slab.kind {
            SlabKind::Points { order, .. } => {
                let first = slab.point_unit(order[self.at]);
                let shard: Vec<u64> = first.iter().zip(&self.n).map(|(u, n)| u / n).collect();
                let begin = self.at;
                let mut end = begin;
                while end < order.len() {
                    let u = slab.point_unit(order[end]);
                    if u.iter().zip(&self.n).zip(&shard).any(|((u, n), s)| u / n != *s) {
                        break;
                    }
                    end += 1;
                }
                self.at = end;
                self.done = end >= order.len();
                let units = Units {
                    slab: slab.clone(),
                    state: UnitsState::Points { at: begin, end, shard: Some((shard.clone(), self.n.clone())) },
                };
                Some(ShardUnits { shard, units })
            }
            SlabKind::Outer { .. } => {
                let axes = slab.axes();
                let shard: Vec<u64> =
                    self.spans.iter().zip(&axes).zip(&self.n).map(|((r, a), n)| a.unit(r.start) / n).collect();
                let units = Units::outer(slab.clone(), self.spans.clone(), Some((shard.clone(), self.n.clone())));
                // Advance the odometer of spans.
                let mut d = self.spans.len();
                loop {
                    if d == 0 {
                        self.done = true;
                        break;
                    }
                    d -= 1;
                    let a = axes[d];
                    let next = self.spans[d].end;
                    if next < a.groups() {
                        self.spans[d] = next..a.block_end(next, self.n[d]);
                        break;
                    }
                    self.spans[d] = 0..a.block_end(0, self.n[d]);
                }
                Some(ShardUnits { shard, units })
            }
        }
    }
}

/// Units, one at a time.
#[derive(Debug, Clone)]
pub struct Units {
    slab: Arc<Slab>,
    state: UnitsState,
}

#[derive(Debug, Clone)]
enum UnitsState {
    /// An odometer over group ranges per dimension (`None`: finished).
    Outer {
        ranges: Vec<Range<u64>>,
        pick: Option<Vec<u64>>,
        shard: Option<(Vec<u64>, Vec<u64>)>,
    },
    Points {
        at: usize,
        end: usize,
        shard: Option<(Vec<u64>, Vec<u64>)>,
    },
}

impl Units {
    fn outer(slab: Arc<Slab>, ranges: Vec<Range<u64>>, shard: Option<(Vec<u64>, Vec<u64>)>) -> Self {
        let pick = (!ranges.iter().any(|r| r.is_empty())).then(|| ranges.iter().map(|r| r.start).collect());
        Self { slab, state: UnitsState::Outer { ranges, pick, shard } }
    }
}

/// Grid coordinates `coords`, made relative to their shard.
fn in_shard(coords: Vec<u64>, shard: Option<&(Vec<u64>, Vec<u64>)>) -> Vec<u64> {
    match shard {
        Some((s, n)) => coords.iter().zip(s).zip(n).map(|((c, s), n)| c - s * n).collect(),
        None => coords,
    }
}

impl Iterator for Units {
    type Item = Unit;

    fn next(&mut self) -> Option<Unit> {
        let slab = self.slab.clone();
        match &mut self.state {
            UnitsState::Outer { ranges, pick, shard } => {
                let current = pick.clone()?;
                let axes = slab.axes();
                let coords = current.iter().zip(&axes).map(|(&g, a)| a.unit(g)).collect();
                let coords = in_shard(coords, shard.as_ref());
                // Advance.
                let p = pick.as_mut()?;
                let mut d = p.len();
                loop {
                    if d == 0 {
                        *pick = None;
                        break;
                    }
                    d -= 1;
                    p[d] += 1;
                    if p[d] < ranges[d].end {
                        break;
                    }
                    p[d] = ranges[d].start;
                }
                Some(Unit { coords, copy: UnitCopy { slab, pick: current } })
            }
            UnitsState::Points { at, end, shard } => {
                if *at >= *end {
                    return None;
                }
                let SlabKind::Points { order, .. } = &slab.kind else { return None };
                let first = slab.point_unit(order[*at]);
                let begin = *at;
                let mut e = begin + 1;
                while e < *end && slab.point_unit(order[e]) == first {
                    e += 1;
                }
                *at = e;
                let coords = in_shard(first, shard.as_ref());
                Some(Unit { coords, copy: UnitCopy { slab: slab.clone(), pick: vec![begin as u64, e as u64] } })
            }
        }
    }
}

/// Calls `f(src, dst, n)` for every run of `n` consecutive elements to copy
/// from a unit (strides `ss`) into a slab (strides `ds`).
pub fn for_each_copy(runs: &[&[Run]], ss: &[u64], ds: &[u64], f: &mut impl FnMut(u64, u64, u64)) {
    fn rec(d: usize, runs: &[&[Run]], ss: &[u64], ds: &[u64], so: u64, dof: u64, f: &mut impl FnMut(u64, u64, u64)) {
        let last = d + 1 == runs.len();
        for r in runs[d] {
            if last && r.step == 1 && ds[d] == 1 && ss[d] == 1 {
                f(so.saturating_add(r.inn), dof + r.out, r.len);
                continue;
            }
            for j in 0..r.len {
                // Saturating: a unit of more than 2^64 elements is refused
                // long before any copy (limits.max_decoded_chunk_bytes).
                let inn = at(r.inn, r.step, j);
                let s = so.saturating_add(inn.saturating_mul(ss[d]));
                let o = dof.saturating_add((r.out + j).saturating_mul(ds[d]));
                if last {
                    f(s, o, 1);
                } else {
                    rec(d + 1, runs, ss, ds, s, o, f);
                }
            }
        }
    }
    if runs.is_empty() {
        f(0, 0, 1);
    } else {
        rec(0, runs, ss, ds, 0, 0, f);
    }
}

/// [`for_each_copy`] in groups of equally spaced runs ([`Strided`]): the
/// last dimension's runs, and when the last dimension has a single run
/// (contiguous, or one element), the dimension before it, one group per
/// run of that one.
pub fn for_each_strided(runs: &[&[Run]], ss: &[u64], ds: &[u64], f: &mut impl FnMut(Strided)) {
    #[allow(clippy::cast_possible_wrap)] // unit strides are far below 2^63
    fn rec(d: usize, runs: &[&[Run]], ss: &[u64], ds: &[u64], so: u64, dof: u64, f: &mut impl FnMut(Strided)) {
        let contiguous = |r: &Run, d: usize| (r.step == 1 && ss[d] == 1 && ds[d] == 1) || r.len == 1;
        if d + 1 == runs.len() {
            for r in runs[d] {
                let (src, dst) = (so.saturating_add(r.inn.saturating_mul(ss[d])), dof + r.out * ds[d]);
                if contiguous(r, d) {
                    f(Strided { src, src_step: 0, dst, dst_step: 0, count: 1, n: r.len });
                } else {
                    let src_step = r.step.saturating_mul(ss[d] as i64);
                    f(Strided { src, src_step, dst, dst_step: ds[d], count: r.len, n: 1 });
                }
            }
            return;
        }
        if d + 2 == runs.len() && runs[d + 1].len() == 1 && contiguous(&runs[d + 1][0], d + 1) {
            let q = &runs[d + 1][0];
            let (qs, qd) = (q.inn.saturating_mul(ss[d + 1]), q.out * ds[d + 1]);
            for r in runs[d] {
                let src = so.saturating_add(r.inn.saturating_mul(ss[d])).saturating_add(qs);
                let dst = dof + r.out * ds[d] + qd;
                let src_step = r.step.saturating_mul(ss[d] as i64);
                f(Strided { src, src_step, dst, dst_step: ds[d], count: r.len, n: q.len });
            }
            return;
        }
        for r in runs[d] {
            for j in 0..r.len {
                let inn = at(r.inn, r.step, j);
                let s = so.saturating_add(inn.saturating_mul(ss[d]));
                let o = dof.saturating_add((r.out + j).saturating_mul(ds[d]));
                rec(d + 1, runs, ss, ds, s, o, f);
            }
        }
    }
    if runs.is_empty() {
        f(Strided { src: 0, src_step: 0, dst: 0, dst_step: 0, count: 1, n: 1 });
    } else {
        rec(0, runs, ss, ds, 0, 0, f);
    }
}

/// Checks a plan against the selection it came from, for tests and the
/// `read_plan` fuzz target: the slabs tile the output in order (their
/// lengths add up to the selection's elements, none over the budget's
/// element count unless a single row is larger), and for slabs of at most
/// `check_elems` elements every output element is written exactly once,
/// from the unit position holding the array index the selection names.
/// Stops after `max_slabs` slabs and `max_units` units.
///
/// # Errors
/// The first broken invariant.
#[doc(hidden)]
pub fn verify(plan: &Arc<ReadPlan>, max_slabs: u64, max_units: u64, check_elems: u64) -> Result<(), String> {
    verify_from(plan, 0, max_slabs, max_units, check_elems)
}

/// [`verify`] of the slabs from element `start` on ([`ReadPlan::slabs_from`]).
///
/// # Errors
/// The first broken invariant.
#[doc(hidden)]
pub fn verify_from(
    plan: &Arc<ReadPlan>,
    start: u64,
    max_slabs: u64,
    max_units: u64,
    check_elems: u64,
) -> Result<(), String> {
    let rank = plan.sel.dims.len();
    let coordinate = plan.sel.mode == SelectionMode::Coordinate;
    let (mut offset, mut slabs, mut units) = (start, 0u64, 0u64);
    for slab in plan.slabs_from(start) {
        slabs += 1;
        if slabs > max_slabs {
            return Ok(());
        }
        if slab.len == 0 {
            return Err("an empty slab".into());
        }
        let unit_fits = plan.unit.iter().try_fold(1u64, |a, &b| a.checked_mul(b)).is_some();
        let check = slab.len <= check_elems && unit_fits;
        #[allow(clippy::cast_possible_truncation)]
        let mut seen = if check { vec![false; slab.len as usize] } else { Vec::new() };
        let sharded = plan.per_shard.is_some();
        let mut want: Vec<u64> = Vec::with_capacity(rank);
        let mut each_unit = |coords: Vec<u64>, copy: &UnitCopy| -> Result<bool, String> {
            units += 1;
            if units > max_units {
                return Ok(false);
            }
            if coords.len() != rank {
                return Err(format!("unit coordinates {coords:?} of the wrong rank"));
            }
            let mut err = None;
            copy.each(&mut |src, dst, n| {
                if !check || err.is_some() {
                    return;
                }
                for i in 0..n {
                    let (src, dst) = (src + i, dst + i);
                    #[allow(clippy::cast_possible_truncation)]
                    let Some(slot) = seen.get_mut(dst as usize) else {
                        err = Some(format!("destination {dst} outside the slab of {}", slab.len));
                        return;
                    };
                    if std::mem::replace(slot, true) {
                        err = Some(format!("destination {dst} written twice"));
                        return;
                    }
                    // The array index the selection names for this element.
                    let global = offset + dst;
                    want.clear();
                    want.resize(rank, 0);
                    if coordinate {
                        for (d, ix) in plan.sel.dims.iter().enumerate() {
                            want[d] = ix.get(global);
                        }
                    } else {
                        let mut rest = global;
                        for d in (0..rank).rev() {
                            want[d] = plan.sel.dims[d].get(rest % plan.lens[d]);
                            rest /= plan.lens[d];
                        }
                    }
                    let mut rest = src;
                    for d in (0..rank).rev() {
                        let got = coords[d] * plan.unit[d] + rest % plan.unit[d];
                        rest /= plan.unit[d];
                        if got != want[d] {
                            err = Some(format!(
                                "element {global}: dimension {d} reads index {got}, the selection names {}",
                                want[d]
                            ));
                            return;
                        }
                    }
                }
            });
            err.map_or(Ok(true), Err)
        };
        if sharded {
            'shards: for s in slab.shards() {
                let n = plan.per_shard.as_deref().unwrap_or(&[]);
                for u in s.units {
                    let coords = u.coords.iter().zip(&s.shard).zip(n).map(|((i, s), n)| s * n + i).collect();
                    if !each_unit(coords, &u.copy)? {
                        break 'shards;
                    }
                }
            }
        } else {
            for u in slab.units() {
                if !each_unit(u.coords.clone(), &u.copy)? {
                    break;
                }
            }
        }
        if units <= max_units {
            if let Some(p) = seen.iter().position(|s| !s) {
                return Err(format!("element {} of the output never written", offset + p as u64));
            }
        }
        offset += slab.len;
    }
    if offset != plan.elements && !(coordinate && plan.elements == 0) {
        return Err(format!("the slabs hold {offset} elements, the selection {}", plan.elements));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::selection::SelectionSpec;

    impl ReadPlan {
        /// The same plan again (the tests' plans are shared).
        fn clone_of(p: &ReadPlan) -> ReadPlan {
            ReadPlan::new(p.sel.clone(), p.unit.clone(), p.per_shard.clone(), p.es, p.budget).unwrap()
        }
    }

    fn plan(
        shape: &[u64],
        unit: &[u64],
        shards: Option<&[u64]>,
        sel: &str,
        mode: SelectionMode,
        budget: u64,
    ) -> Arc<ReadPlan> {
        let sel = SelectionSpec::parse(sel, mode).unwrap().resolve(shape, None).unwrap();
        Arc::new(ReadPlan::new(sel, unit.to_vec(), shards.map(<[u64]>::to_vec), 1, budget).unwrap())
    }

    #[test]
    fn copies_follow_runs() {
        let rows = [Run { out: 0, inn: 1, len: 2, step: 1 }];
        let cols = [Run { out: 0, inn: 3, len: 2, step: -2 }];
        let mut seen = Vec::new();
        for_each_copy(&[&rows, &cols], &[4, 1], &[2, 1], &mut |s, d, n| seen.push((s, d, n)));
        assert_eq!(seen, vec![(7, 0, 1), (5, 1, 1), (11, 2, 1), (9, 3, 1)]);
    }

    #[test]
    fn plans_tile_the_selection_exactly() {
        use SelectionMode::{Basic, Coordinate};
        type Case<'a> = (&'a [u64], &'a [u64], Option<&'a [u64]>, &'a str, SelectionMode);
        let cases: &[Case] = &[
            (&[10, 9], &[3, 4], None, "", Basic),
            (&[10, 9], &[3, 4], None, "1:9:2,::-1", Basic),
            (&[10, 9], &[3, 4], None, "-1,[8,0,3,3]", Basic),
            (&[10, 9], &[3, 4], None, "::-4,2:8:5", Basic),
            (&[10, 9], &[1, 1], Some(&[2, 3]), "::-1,1:", Basic),
            (&[10, 9], &[2, 3], Some(&[2, 2]), "[9,0,4,5],::2", Basic),
            (&[10, 9], &[2, 3], Some(&[2, 2]), "[9,0,4,5,9],[1,2,8,8,0]", Coordinate),
            (&[10, 9], &[2, 3], None, "[9,0,4,5,9],[1,2,8,8,0]", Coordinate),
            (&[4, 5, 6], &[3, 2, 4], None, "1:,::-2,[5,0,1]", Basic),
            (&[], &[], None, "", Basic),
            (&[5, 0], &[2, 2], None, "", Basic),
        ];
        for budget in [1, 3, 7, 16, 1 << 20] {
            for (shape, unit, shards, sel, mode) in cases {
                let p = plan(shape, unit, *shards, sel, *mode, budget);
                verify(&p, u64::MAX, u64::MAX, u64::MAX).unwrap_or_else(|e| panic!("{sel} {shape:?} {budget}: {e}"));
            }
        }
    }

    #[test]
    fn growing_slabs_end_where_units_end() {
        use SelectionMode::Basic;
        // 16 rows of 4 one-byte elements in units of 4 rows: a budget of 2
        // rows cuts every unit between two slabs.
        let units_per_slab = |p: &Arc<ReadPlan>| -> Vec<Vec<Vec<u64>>> {
            p.slabs().map(|s| s.units().map(|u| u.coords).collect()).collect()
        };
        let cut = plan(&[16, 4], &[4, 4], None, "", Basic, 8);
        assert_eq!(cut.slabs().map(|s| s.len).collect::<Vec<_>>(), vec![8; 8]);
        assert_eq!(units_per_slab(&cut)[..2], [vec![vec![0, 0]], vec![vec![0, 0]]]);
        assert_eq!(cut.max_slab_bytes(), 8);
        // Allowed 4 rows, each slab is one whole unit, read once.
        let grown = Arc::new(ReadPlan::clone_of(&cut).growing_to(16));
        assert_eq!(grown.slabs().map(|s| s.len).collect::<Vec<_>>(), vec![16; 4]);
        let seen = units_per_slab(&grown);
        assert_eq!(seen, (0..4).map(|u| vec![vec![u, 0]]).collect::<Vec<_>>());
        assert_eq!(grown.max_slab_bytes(), 16);
        verify(&grown, u64::MAX, u64::MAX, u64::MAX).unwrap();
        // Not allowed enough (3 rows): cut as before.
        let short = Arc::new(ReadPlan::clone_of(&cut).growing_to(12));
        assert_eq!(short.slabs().map(|s| s.len).collect::<Vec<_>>(), vec![8; 8]);
        // A selection starting inside a unit: its first run is 1 row, then
        // whole units, the last one cut by the selection's end.
        let p = Arc::new(ReadPlan::clone_of(&plan(&[16, 4], &[4, 4], None, "3:14", Basic, 8)).growing_to(16));
        assert_eq!(p.slabs().map(|s| s.len / 4).collect::<Vec<_>>(), vec![1, 4, 4, 2]);
        verify(&p, u64::MAX, u64::MAX, u64::MAX).unwrap();
        // Small units merge up to the budget and no further.
        let p = Arc::new(ReadPlan::clone_of(&plan(&[16, 4], &[2, 4], None, "", Basic, 24)).growing_to(1 << 20));
        assert_eq!(p.slabs().map(|s| s.len / 4).collect::<Vec<_>>(), vec![6, 6, 4]);
    }

    #[test]
    fn ramping_slabs_start_small_and_double_up_to_the_plan() {
        use SelectionMode::Basic;
        let rows = |p: &Arc<ReadPlan>| p.slabs().map(|s| s.len / 4).collect::<Vec<_>>();
        // 64 rows of 4 one-byte elements in units of 16 rows, slabs of 16
        // rows (grown to whole units): from 2 rows, 2, 2, 4, 8, then whole
        // units; every ramping slab ends on a multiple of the first's rows.
        let base = plan(&[64, 4], &[16, 4], None, "", Basic, 64);
        let p = Arc::new(ReadPlan::clone_of(&base).growing_to(128).ramping_from(8));
        assert_eq!(rows(&p), vec![2, 2, 4, 8, 16, 16, 16]);
        verify(&p, u64::MAX, u64::MAX, u64::MAX).unwrap();
        assert_eq!(p.max_slab_bytes(), 64);
        // Units of 12 rows: a ramping slab stops at a unit's end, then
        // whole units, merged up to the budget's 16 rows (the last unit,
        // cut by the array's end, with the one before it).
        let p = Arc::new(ReadPlan::clone_of(&plan(&[64, 4], &[12, 4], None, "", Basic, 64)).ramping_from(8));
        assert_eq!(rows(&p), vec![2, 2, 4, 4, 12, 12, 12, 16]);
        verify(&p, u64::MAX, u64::MAX, u64::MAX).unwrap();
        // A first slab as large as the plan's: unchanged.
        let same = Arc::new(ReadPlan::clone_of(&base).ramping_from(64));
        assert_eq!(rows(&same), rows(&base));
        // Split after the first dimension (its rows over the budget): the
        // ramp counts rows of the split dimension over the whole read.
        let p = Arc::new(ReadPlan::clone_of(&plan(&[2, 32, 4], &[1, 8, 4], None, "", Basic, 64)).ramping_from(4));
        assert_eq!(p.slabs().map(|s| s.len / 4).collect::<Vec<_>>(), vec![1, 1, 2, 4, 8, 16, 16, 16]);
        verify(&p, u64::MAX, u64::MAX, u64::MAX).unwrap();
        // Every case of the tiling test, ramping.
        for (shape, unit, sel) in
            [(&[10u64, 9][..], &[3u64, 4][..], "1:9:2,::-1"), (&[4, 5, 6], &[3, 2, 4], "1:,::-2,[5,0,1]")]
        {
            for budget in [3, 7, 16] {
                let p = Arc::new(ReadPlan::clone_of(&plan(shape, unit, None, sel, Basic, budget)).ramping_from(1));
                verify(&p, u64::MAX, u64::MAX, u64::MAX).unwrap_or_else(|e| panic!("{sel} {budget}: {e}"));
            }
        }
    }

    #[test]
    fn strided_copies_are_the_same_copies() {
        use SelectionMode::{Basic, Coordinate};
        type Case<'a> = (&'a [u64], &'a [u64], Option<&'a [u64]>, &'a str, SelectionMode);
        let cases: &[Case] = &[
            (&[10, 9], &[3, 4], None, "1:9:2,::-1", Basic),
            (&[10, 9], &[3, 4], None, "-1,[8,0,3,3]", Basic),
            (&[10, 9, 5], &[3, 4, 5], None, ":,:,2", Basic),
            (&[10, 9, 5], &[3, 4, 5], None, "::-1,1:8,1:3", Basic),
            (&[10, 9, 5], &[3, 4, 2], None, ":,::3,::-2", Basic),
            (&[10, 9, 6], &[2, 3, 2], Some(&[2, 2, 3]), "[9,0,4],::2,4", Basic),
            (&[10, 9], &[2, 3], None, "[9,0,4,5,9],[1,2,8,8,0]", Coordinate),
            (&[], &[], None, "", Basic),
        ];
        for budget in [1, 7, 1 << 20] {
            for (shape, unit, shards, sel, mode) in cases {
                let p = plan(shape, unit, *shards, sel, *mode, budget);
                for slab in p.slabs() {
                    let copies: Vec<UnitCopy> = if shards.is_some() {
                        slab.shards().flat_map(|s| s.units.map(|u| u.copy).collect::<Vec<_>>()).collect()
                    } else {
                        slab.units().map(|u| u.copy).collect()
                    };
                    for c in copies {
                        let mut one = Vec::new();
                        c.each(&mut |s, d, n| one.extend((0..n).map(|i| (s + i, d + i))));
                        let mut grouped = Vec::new();
                        c.each_strided(&mut |g| {
                            for j in 0..g.count {
                                let (s, d) = g.at(j);
                                grouped.extend((0..g.n).map(|i| (s + i, d + i)));
                            }
                        });
                        assert_eq!(one, grouped, "{sel} {shape:?} {budget}");
                        assert_eq!(c.elements(), one.len() as u64, "{sel} {shape:?} {budget}");
                    }
                }
            }
        }
    }

    #[test]
    fn growing_plans_tile_the_selection_exactly() {
        use SelectionMode::Basic;
        type Case<'a> = (&'a [u64], &'a [u64], Option<&'a [u64]>, &'a str);
        let cases: &[Case] = &[
            (&[10, 9], &[3, 4], None, "1:9:2,::-1"),
            (&[10, 9], &[3, 4], None, "::-4,2:8:5"),
            (&[10, 9], &[2, 3], Some(&[2, 2]), "[9,0,4,5],::2"),
            (&[4, 5, 6], &[3, 2, 4], None, "1:,::-2,[5,0,1]"),
            (&[17, 3, 5], &[5, 2, 2], None, "2:16,:,1:"),
        ];
        for budget in [1, 3, 7, 16] {
            for grow in [1, 2, 3, 8] {
                for (shape, unit, shards, sel) in cases {
                    let p = plan(shape, unit, *shards, sel, Basic, budget);
                    let g = Arc::new(ReadPlan::clone_of(&p).growing_to(budget * grow));
                    verify(&g, u64::MAX, u64::MAX, u64::MAX)
                        .unwrap_or_else(|e| panic!("{sel} {shape:?} {budget} x{grow}: {e}"));
                    let max = g.max_slab_bytes();
                    assert!(g.slabs().all(|s| s.len <= max), "{sel} {budget} x{grow}");
                }
            }
        }
    }

    #[test]
    fn replanned_slabs_go_on_where_the_old_ones_stopped() {
        use SelectionMode::{Basic, Coordinate};
        let cases: &[(&[u64], &[u64], &str, SelectionMode)] = &[
            (&[10, 9], &[3, 4], "1:9:2,::-1", Basic),
            (&[4, 5, 6], &[3, 2, 4], "1:,::-2,[5,0,1]", Basic),
            (&[10, 9], &[2, 3], "[9,0,4,5,9],[1,2,8,8,0]", Coordinate),
        ];
        for (shape, unit, sel, mode) in cases {
            for (first, then) in [(16u64, 1u64), (7, 3), (1, 40), (40, 2)] {
                let whole = plan(shape, unit, None, sel, *mode, 1 << 20);
                let p = plan(shape, unit, None, sel, *mode, first);
                let mut slabs = p.slabs();
                let s0 = slabs.next().unwrap();
                let p2 = Arc::new(p.replan(then, s0.len).unwrap());
                assert_eq!(p2.budget(), then);
                // Every element after the first slab, in order, once.
                let total = s0.len + p2.slabs_from(s0.len).map(|s| s.len).sum::<u64>();
                assert_eq!(total, whole.elements(), "{sel} {first} {then}");
                // Every element from the offset on comes from where the selection says.
                verify_from(&p2, s0.len, u64::MAX, u64::MAX, u64::MAX)
                    .unwrap_or_else(|e| panic!("{sel} {first} {then}: {e}"));
            }
        }
    }

    #[test]
    fn counts_touched_units_without_enumerating_them() {
        let p = plan(&[1 << 40, 1 << 40], &[1, 1], None, "0:1000,0:3000", SelectionMode::Basic, 1 << 25);
        assert_eq!(p.touched_units(), 3_000_000);
        let p = plan(&[100, 100], &[10, 10], None, "::11,[5,5,95]", SelectionMode::Basic, 1 << 25);
        assert_eq!(p.touched_units(), 10 * 2);
        let p = plan(&[100, 100], &[10, 10], None, "[1,2,55],[3,4,99]", SelectionMode::Coordinate, 1 << 25);
        assert_eq!(p.touched_units(), 2);
        // 32 dimensions of 2, chunks of 1: 2^32 units, counted, not walked.
        let shape = vec![2u64; 32];
        let p = plan(&shape, &[1; 32], None, "", SelectionMode::Basic, 1 << 25);
        assert_eq!(p.touched_units(), 1 << 32);
        let mut slabs = p.slabs();
        let first = slabs.next().unwrap();
        assert_eq!(first.len, 1 << 25);
        assert_eq!(first.units().take(3).count(), 3, "units come one at a time");
    }
}
