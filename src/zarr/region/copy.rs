//! The copy and fill kernels of a read: one decoded unit (a chunk, or an
//! inner chunk of a shard) copied into a slab where a [`UnitCopy`] says,
//! or the fill value written there for a missing unit.
//!
//! A slab is the buffer the read assembles ([`SlabData`]): packed
//! fixed-size elements, or for variable-length types one entry per element
//! that is `None` for the fill value (never copied) and counts the bytes it
//! holds against a cap, so a slab that would grow past it stops copying and
//! is planned again smaller (see [`super::read`]).
//!
//! The kernels run wherever the caller's [`super::Offload`] puts CPU work
//! (or inline for small slabs); the slab sits behind a mutex because the
//! units of one slab are copied by concurrent jobs (they write disjoint
//! elements).

use std::sync::Mutex;

use super::plan::{Strided, UnitCopy};
use super::RegionError;
use crate::zarr::chunk::ChunkData;
use crate::zarr::subset::{copy_region, ArraySubset, SubsetError};

/// A slab's (or chunk's) elements.
#[derive(Debug)]
pub enum SlabData {
    /// Packed fixed-size elements, C order.
    Fixed(Vec<u8>),
    /// Variable-length elements.
    Variable(VarSlab),
}

/// A slab of variable-length elements: copies of the elements read, `None`
/// for the fill value (never copied: a caller renders its text once and
/// repeats it).
#[derive(Debug)]
pub struct VarSlab {
    /// The elements, in slab order.
    pub items: Vec<Option<Vec<u8>>>,
    /// Bytes the slab holds: its list ([`VAR_ITEM_COST`] per element) and
    /// the copies.
    pub bytes: u64,
    /// What `bytes` may reach; a slab of one element may pass it (the
    /// element is at most one decoded unit).
    pub cap: u64,
    /// Past `cap`: copying stops, and the slab is planned again smaller.
    pub over: bool,
}

/// What one element of a [`VarSlab`] costs besides its bytes.
pub const VAR_ITEM_COST: u64 = std::mem::size_of::<Option<Vec<u8>>>() as u64;

impl SlabData {
    /// A fresh slab of `n` elements: unspecified bytes (fixed size, `es`
    /// bytes each: the read writes every element, see
    /// [`super::buffers::take`]) or fill values (variable length, capped at
    /// `cap` bytes).
    #[must_use]
    pub fn new(n: usize, es: usize, variable: bool, cap: u64) -> Self {
        if variable {
            let bytes = (n as u64).saturating_mul(VAR_ITEM_COST);
            Self::Variable(VarSlab { items: vec![None; n], bytes, cap, over: bytes > cap && n > 1 })
        } else {
            Self::Fixed(super::buffers::take(n * es))
        }
    }
}

impl SlabData {
    /// Whether a variable-length slab used less than a quarter of `cap`
    /// (the read may plan larger slabs again).
    #[must_use]
    pub fn is_light(&self, cap: u64) -> bool {
        matches!(self, Self::Variable(v) if v.bytes < cap / 4)
    }
}

/// Whether the fill value must be written into missing parts: a fresh
/// fixed-size slab holds unspecified bytes (every element is written), a
/// fresh variable-length one holds the fill value already.
#[must_use]
pub fn needs_fill(variable: bool) -> bool {
    !variable
}

fn corrupt(key: &str, reason: String) -> RegionError {
    RegionError::Corrupt { key: key.to_owned(), reason }
}

/// Copies `data` (one decoded unit of `unit_elems` elements of `es` bytes)
/// into `slab` as `spec` says.
///
/// # Errors
/// A unit that decoded to the wrong number or kind of elements (corrupt
/// stored data under `key`).
pub fn copy_unit(
    data: &ChunkData,
    unit_elems: u64,
    spec: &UnitCopy,
    slab: &Mutex<SlabData>,
    es: usize,
    key: &str,
) -> Result<(), RegionError> {
    let mut guard = slab.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match (data, &mut *guard) {
        (ChunkData::Fixed(src), SlabData::Fixed(dst)) => {
            if src.len() as u64 != unit_elems * es as u64 {
                return Err(corrupt(
                    key,
                    format!("decoded to {} bytes, expected {}", src.len(), unit_elems * es as u64),
                ));
            }
            match es {
                1 => spec.each_strided(&mut |g| copy_strided::<1>(src, dst, &g)),
                2 => spec.each_strided(&mut |g| copy_strided::<2>(src, dst, &g)),
                4 => spec.each_strided(&mut |g| copy_strided::<4>(src, dst, &g)),
                8 => spec.each_strided(&mut |g| copy_strided::<8>(src, dst, &g)),
                16 => spec.each_strided(&mut |g| copy_strided::<16>(src, dst, &g)),
                #[allow(clippy::cast_possible_truncation)] // within the buffers, checked above and by construction
                _ => spec.each(&mut |s, d, n| {
                    let (s, d, n) = (s as usize * es, d as usize * es, n as usize * es);
                    dst[d..d + n].copy_from_slice(&src[s..s + n]);
                }),
            }
        }
        (ChunkData::Variable(src), SlabData::Variable(dst)) => {
            if src.len() as u64 != unit_elems {
                return Err(corrupt(key, format!("decoded to {} elements, expected {unit_elems}", src.len())));
            }
            let single = dst.items.len() == 1;
            #[allow(clippy::cast_possible_truncation)]
            spec.each(&mut |s, d, n| {
                for i in 0..n as usize {
                    if dst.over {
                        return;
                    }
                    let e = &src[s as usize + i];
                    dst.bytes = dst.bytes.saturating_add(e.len() as u64);
                    if dst.bytes > dst.cap && !single {
                        dst.over = true;
                        return;
                    }
                    dst.items[d as usize + i] = Some(e.clone());
                }
            });
        }
        _ => return Err(corrupt(key, "decoded to the wrong kind of elements".into())),
    }
    Ok(())
}

/// Copies what `spec` says from one span of a unit's decoded bytes (`part`,
/// bytes `at..at + part.len()` of a unit of packed `es`-byte elements,
/// stored as they are) into `slab`: every run, or the piece of it, that
/// lies in the span. A unit decoded in spans that cover it back to back
/// ([`crate::zarr::codec::CodecChain::decode_span`]) is copied exactly as
/// [`copy_unit`] copies it whole. The slab is locked for this span only.
///
/// # Errors
/// A variable-length slab (an internal error: such units are not decoded
/// in spans).
pub fn copy_unit_span(
    part: &[u8],
    at: usize,
    spec: &UnitCopy,
    slab: &Mutex<SlabData>,
    es: usize,
) -> Result<(), RegionError> {
    copy_groups_span(part, at, &strided_groups(spec), slab, es)
}

/// The groups of runs `spec` copies ([`UnitCopy::each_strided`]), listed
/// once for the spans of a unit ([`copy_groups_span`]).
#[must_use]
pub fn strided_groups(spec: &UnitCopy) -> Vec<Strided> {
    let mut groups = Vec::new();
    spec.each_strided(&mut |g| groups.push(g));
    groups
}

/// [`copy_unit_span`] with the unit's copy listed ([`strided_groups`]).
///
/// # Errors
/// A variable-length slab (an internal error).
pub fn copy_groups_span(
    part: &[u8],
    at: usize,
    groups: &[Strided],
    slab: &Mutex<SlabData>,
    es: usize,
) -> Result<(), RegionError> {
    let mut guard = slab.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let SlabData::Fixed(dst) = &mut *guard else {
        return Err(RegionError::Internal("a unit decoded in spans for a variable-length slab".into()));
    };
    let span = Span { part, at: at as u64, end: at as u64 + part.len() as u64, es: es as u64 };
    match es {
        1 => groups.iter().for_each(|g| span.copy::<1>(dst, g)),
        2 => groups.iter().for_each(|g| span.copy::<2>(dst, g)),
        4 => groups.iter().for_each(|g| span.copy::<4>(dst, g)),
        8 => groups.iter().for_each(|g| span.copy::<8>(dst, g)),
        _ => groups.iter().for_each(|g| span.copy::<0>(dst, g)),
    }
    Ok(())
}

/// One span of a unit's decoded bytes: `part` is bytes `at..end`; elements
/// of `es` bytes.
struct Span<'a> {
    part: &'a [u8],
    at: u64,
    end: u64,
    es: u64,
}

impl Span<'_> {
    /// Copies the runs of `g` that lie in the span, and the pieces of those
    /// that cross its ends, into `dst`; `E` is the element size (0: any,
    /// `self.es`), for the kernel of whole runs.
    #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap, clippy::cast_sign_loss)] // within the buffers, by construction
    fn copy<const E: usize>(&self, dst: &mut [u8], g: &Strided) {
        if g.count == 0 || g.n == 0 {
            return;
        }
        let es = self.es;
        let len = g.n * es;
        // The runs that touch the span, `lo..hi`, and of them those wholly
        // inside, `a..b`: with a forward step, both ranges of `j`;
        // otherwise every run is looked at.
        let (lo, hi, a, b) = if g.src_step > 0 && g.count > 1 {
            let (first, step) = (g.src * es, g.src_step as u64 * es);
            // First run ending after `at`; first starting at or after `end`.
            let lo = if first + len > self.at { 0 } else { (self.at - first - len) / step + 1 };
            let hi = if first >= self.end { 0 } else { ((self.end - first).div_ceil(step)).min(g.count) };
            // First starting at or after `at`; past the last ending by `end`.
            let a = if first >= self.at { 0 } else { (self.at - first).div_ceil(step) };
            let b = if first + len > self.end { 0 } else { ((self.end - first - len) / step + 1).min(g.count) };
            (lo.min(g.count), hi, a.min(g.count), b)
        } else {
            (0, g.count, 0, 0)
        };
        let (a, b) = (a.max(lo), b.min(hi).max(a.max(lo)));
        if a < b && E != 0 && self.at % es == 0 {
            // Whole runs: the ordinary kernel, on the span as its source.
            let sub = Strided {
                src: g.src + a * g.src_step as u64 - self.at / es,
                src_step: g.src_step,
                dst: g.dst + a * g.dst_step,
                dst_step: g.dst_step,
                count: b - a,
                n: g.n,
            };
            copy_strided::<E>(self.part, dst, &sub);
        } else {
            for j in a..b {
                let (s, d) = g.at(j);
                let (p, q, n) = ((s * es - self.at) as usize, (d * es) as usize, len as usize);
                dst[q..q + n].copy_from_slice(&self.part[p..p + n]);
            }
        }
        // Runs crossing the span's ends (or all of them, for other steps):
        // their bytes within it.
        for j in (lo..a).chain(b.max(a)..hi) {
            let (s, d) = g.at(j);
            let (s, d) = (s * es, d * es);
            let (from, to) = (s.max(self.at), (s + len).min(self.end));
            if from < to {
                let (p, q) = ((from - self.at) as usize, (d + from - s) as usize);
                let n = (to - from) as usize;
                dst[q..q + n].copy_from_slice(&self.part[p..p + n]);
            }
        }
    }
}

/// Copies the runs of `g` from `src` into `dst`, elements of `E` bytes: a
/// run of one element is a fixed-size move, not a call to `memcpy`.
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)] // within the buffers, checked by the caller and by construction
fn copy_strided<const E: usize>(src: &[u8], dst: &mut [u8], g: &Strided) {
    let n = g.n as usize * E;
    // Runs back to back on both sides: one copy.
    if g.count > 1 && g.src_step == g.n as i64 && g.dst_step == g.n {
        let (s, d, all) = (g.src as usize * E, g.dst as usize * E, n * g.count as usize);
        dst[d..d + all].copy_from_slice(&src[s..s + all]);
        return;
    }
    // Single elements at a forward stride into consecutive slab elements
    // (a plane across the fastest dimension): a gather with the bounds
    // checked once per group, not per element.
    if g.n == 1 && g.dst_step == 1 && g.src_step > 0 && g.count > 1 {
        let step = g.src_step as usize * E;
        let (s, d, count) = (g.src as usize * E, g.dst as usize * E, g.count as usize);
        let src = &src[s..s + (count - 1) * step + E];
        let dst = &mut dst[d..d + count * E];
        // Every piece of `src` but the last is `step` >= E bytes; the last is E.
        for (out, run) in dst.chunks_exact_mut(E).zip(src.chunks(step)) {
            fixed::<E>(run, out);
        }
        return;
    }
    for j in 0..g.count {
        let (s, d) = g.at(j);
        let (s, d) = (s as usize * E, d as usize * E);
        match n {
            _ if n == E => fixed::<E>(&src[s..], &mut dst[d..]),
            16 => fixed::<16>(&src[s..], &mut dst[d..]),
            32 => fixed::<32>(&src[s..], &mut dst[d..]),
            64 => fixed::<64>(&src[s..], &mut dst[d..]),
            _ => dst[d..d + n].copy_from_slice(&src[s..s + n]),
        }
    }
}

/// Copies the first `N` bytes of `src` to `dst`: a fixed-size move.
#[inline(always)]
fn fixed<const N: usize>(src: &[u8], dst: &mut [u8]) {
    let e: [u8; N] = src[..N].try_into().unwrap_or([0; N]);
    dst[..N].copy_from_slice(&e);
}

/// Writes the fill value where `spec` would copy.
pub fn fill_unit(fill: &[u8], spec: &UnitCopy, slab: &Mutex<SlabData>) {
    let mut guard = slab.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let es = fill.len();
    #[allow(clippy::cast_possible_truncation)]
    match &mut *guard {
        // A zero fill value (the usual one) is a `memset` per run.
        SlabData::Fixed(dst) if fill.iter().all(|&b| b == 0) => spec.each(&mut |_, d, n| {
            dst[d as usize * es..(d + n) as usize * es].fill(0);
        }),
        SlabData::Fixed(dst) => spec.each(&mut |_, d, n| {
            for i in 0..n as usize {
                let at = (d as usize + i) * es;
                dst[at..at + es].copy_from_slice(fill);
            }
        }),
        // `None` is the fill value already.
        SlabData::Variable(_) => {}
    }
}

/// Whether a slab of variable-length elements went past its cap (its
/// remaining units need not be read).
pub fn slab_over(slab: &Mutex<SlabData>) -> bool {
    matches!(&*slab.lock().unwrap_or_else(std::sync::PoisonError::into_inner), SlabData::Variable(v) if v.over)
}

/// Copies `part` of `src` (shape `src_shape`) into `dst` (shape
/// `dst_shape`) at `dst_start`: a write's data placed into a chunk.
pub(super) fn copy_data(
    src: &ChunkData,
    src_shape: &[u64],
    part: &ArraySubset,
    dst: &mut ChunkData,
    dst_shape: &[u64],
    dst_start: &[u64],
    elem: usize,
) -> Result<(), SubsetError> {
    match (src, dst) {
        (ChunkData::Fixed(s), ChunkData::Fixed(d)) => copy_region(s, src_shape, part, d, dst_shape, dst_start, elem),
        (ChunkData::Variable(s), ChunkData::Variable(d)) => copy_region(s, src_shape, part, d, dst_shape, dst_start, 1),
        _ => Err(SubsetError("fixed-size and variable-length data mixed".into())),
    }
}
