//! Reading only the bytes a selection needs from chunks stored as their
//! elements (issue 14 point 4).
//!
//! A chunk whose codec chain is byte-layout only
//! ([`ArrayToBytesCodec::byte_layout`](crate::zarr::codec::ArrayToBytesCodec::byte_layout):
//! v3 `bytes` alone, v2 with no compressor, no filters and `order: "C"`;
//! not `transpose`, not a checksum) holds element `i` at bytes
//! `i * es .. (i + 1) * es`. When a slab needs only part of such a chunk,
//! [`needed_ranges`] turns the unit's copy runs into byte ranges,
//! coalescing ranges at most [`RegionOptions::coalesce_gap`](super::RegionOptions::coalesce_gap)
//! bytes apart (reading a few unneeded bytes beats another request), and
//! the read asks the store for those ranges alone
//! ([`ChunkSource::get_ranges_sized`](super::ChunkSource::get_ranges_sized)),
//! then [`copy_parts`] copies (and byte-swaps, for a big-endian layout)
//! straight from the parts into the slab: no whole-chunk buffer.
//!
//! A partial read is planned only when it pays: chunks of at least
//! [`MIN_PARTIAL_CHUNK`] bytes, at most [`MAX_PARTIAL_RANGES`] ranges, covering at most half the chunk, runs in
//! ascending order (a negative step or a repeated or unsorted coordinate
//! reads the chunk whole). So a plane across the slowest dimensions of
//! C-order chunks reads a sliver of each; a plane across the fastest one
//! (every element `es` bytes out of each row) coalesces into nearly the
//! whole chunk and reads it whole.
//!
//! Inner chunks of shards go the same way when the inner chain is
//! byte-layout only and the shard's index gives the inner chunk its exact
//! size (another size: the inner chunk is read whole, and decoding reports
//! it): their ranges are offset into the shard and coalesced with the
//! other inner chunks' ranges, read conditioned on the index's version.
//!
//! Declared sizes are not trusted: the store reports the whole value's size
//! with the parts, and a value of any size but the chunk's is read again
//! whole, where decoding reports it exactly as a whole read does. Parts of
//! a value that changed between two ranges are never mixed (the store
//! answers [`SourceError::Precondition`](super::SourceError::Precondition),
//! and the chunk is read again whole).

use std::ops::Range;
use std::sync::Mutex;

use bytes::Bytes;

use super::copy::SlabData;
use super::plan::UnitCopy;
use super::RegionError;
use crate::zarr::codec::byte_layout_decode;

/// The most byte ranges one chunk is read in; more, and it is read whole.
pub const MAX_PARTIAL_RANGES: usize = 16;

/// Chunks smaller than this are read whole: a range request costs about
/// what reading a few more KiB does, and a slice through many tiny chunks
/// would pay for planning ranges per chunk (`bench/request_cost.sh`, box:
/// +6% instructions for 64-byte chunks).
/// The default of [`RegionOptions::partial_min_chunk`](super::RegionOptions::partial_min_chunk).
pub const MIN_PARTIAL_CHUNK: u64 = 64 << 10;

/// The coalesced byte ranges of a unit of `unit_bytes` bytes (elements of
/// `es` bytes) that `spec` copies from, when reading only them pays (see
/// the module doc; units under `min_chunk` bytes never do); `None`: read
/// the unit whole.
#[must_use]
pub fn needed_ranges(spec: &UnitCopy, es: u64, unit_bytes: u64, gap: u64, min_chunk: u64) -> Option<Vec<Range<u64>>> {
    if unit_bytes < min_chunk {
        return None;
    }
    let mut ranges = Ranges { out: Vec::new(), total: 0, gap, limit: unit_bytes / 2 };
    let mut ok = true;
    spec.each_strided(&mut |g| {
        if !ok || g.count == 0 || g.n == 0 {
            return;
        }
        let n = g.n * es;
        let start = g.src * es;
        let Ok(step) = u64::try_from(g.src_step) else {
            ok = false;
            return;
        };
        let step = step * es;
        if g.count > 1 && step < n {
            ok = false;
            return;
        }
        if g.count == 1 || step - n <= gap {
            // The group's runs coalesce into one range.
            ok = ranges.push(start..start + (g.count - 1) * step + n);
        } else {
            // At most MAX_PARTIAL_RANGES + 1 pushes: every one starts a range.
            for j in 0..g.count {
                let s = start + j * step;
                if !ranges.push(s..s + n) {
                    ok = false;
                    return;
                }
            }
        }
    });
    (ok && !ranges.out.is_empty()).then_some(ranges.out)
}

/// Ranges being coalesced, in ascending order.
struct Ranges {
    out: Vec<Range<u64>>,
    total: u64,
    gap: u64,
    limit: u64,
}

impl Ranges {
    /// Adds `r` (after every range so far); false when a partial read no
    /// longer pays (or `r` is out of order).
    fn push(&mut self, r: Range<u64>) -> bool {
        if let Some(last) = self.out.last_mut() {
            if r.start < last.end {
                return false;
            }
            if r.start - last.end <= self.gap {
                self.total += r.end - last.end;
                last.end = r.end;
                return self.total <= self.limit;
            }
        }
        if self.out.len() == MAX_PARTIAL_RANGES {
            return false;
        }
        self.total += r.end - r.start;
        self.out.push(r);
        self.total <= self.limit
    }
}

/// Copies what `spec` says from `parts` (each a byte range's start in the
/// unit and its bytes, ascending, covering every run of `spec`) into
/// `slab`, elements of `es` bytes, decoding each copied element in place
/// for a layout of swap `unit`.
///
/// # Errors
/// Parts that do not cover a run (an internal error: the ranges came from
/// `spec`).
#[allow(clippy::cast_possible_truncation)] // offsets within the unit and the slab, both in memory
pub fn copy_parts(
    parts: &[(u64, Bytes)],
    spec: &UnitCopy,
    slab: &Mutex<SlabData>,
    es: usize,
    unit: usize,
) -> Result<(), RegionError> {
    let mut guard = slab.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let SlabData::Fixed(dst) = &mut *guard else {
        return Err(RegionError::Internal("a partial read into a variable-length slab".into()));
    };
    let mut at = 0usize;
    let mut ok = true;
    spec.each_strided(&mut |g| {
        for j in 0..g.count {
            let (s, d) = g.at(j);
            let (sb, db, len) = (s * es as u64, d as usize * es, g.n as usize * es);
            // Runs come in ascending order: the cursor moves forward.
            if parts.get(at).is_none_or(|p| p.0 > sb) {
                at = parts.partition_point(|p| p.0 <= sb).saturating_sub(1);
            }
            while parts.get(at + 1).is_some_and(|p| p.0 <= sb) {
                at += 1;
            }
            let Some((p0, bytes)) = parts.get(at) else {
                ok = false;
                return;
            };
            let off = (sb - p0) as usize;
            let (Some(src), Some(out)) = (bytes.get(off..off + len), dst.get_mut(db..db + len)) else {
                ok = false;
                return;
            };
            out.copy_from_slice(src);
            byte_layout_decode(out, unit);
        }
    });
    if ok {
        Ok(())
    } else {
        Err(RegionError::Internal("a partial read's ranges do not cover its copy".into()))
    }
}

#[cfg(test)]
mod tests;
