//! Decoding only the part of a compressed chunk a selection needs (issue
//! 14: unaligned boxes).
//!
//! A chunk whose chain is one compressor over a byte-layout `bytes` codec
//! ([`CodecChain::range_layout`](crate::zarr::codec::CodecChain::range_layout):
//! v3 `bytes` + `zstd` or `blosc`, v2 C-order with a zstd or blosc
//! compressor and no filters) holds element `i` at decoded bytes
//! `i * es .. (i + 1) * es`. A slab that needs only the elements in the
//! decoded bytes `span` ([`needed_span`]) of such a chunk can stop there:
//! zstd decodes in order and stops after the span's end
//! ([`RangeDecode::Prefix`]: a part costs its end), blosc decodes the
//! blocks the span lies in ([`RangeDecode::Blocks`]: a part costs its
//! length). Worth it when that cost is at most [`RANGED_MAX_COST`] of the
//! chunk (the last row of chunks an unaligned box touches along its first
//! dimension needs, say, rows 0..19 of 128; an aligned box the second
//! half of a blosc chunk); then the part is copied into the slab as a
//! partial read's parts are ([`super::partial::copy_parts`]).
//!
//! What is not given up: declared sizes are checked against the chunk's
//! before decoding (a zstd frame's content size, blosc's header and its
//! flags), and anything doubtful that can be seen before or while decoding
//! the part (another size, a zstd checksum a prefix could not verify,
//! corrupt or truncated input within the part) decodes the chunk whole
//! instead, which reports the error exactly as a whole read does. What is
//! given up, as a byte-range read of an uncompressed chunk gives it up:
//! damage *after* the part (a zstd frame whose later blocks are corrupt
//! or hold fewer bytes than declared, a blosc block the part does not
//! touch) is not seen, so such a chunk answers the part's bytes — which
//! are what the stored value decodes to there — where a read of the whole
//! chunk reports it corrupt. A part is never cached: the read uses ranges
//! only when the decoded-chunk cache is off for the read
//! ([`UnitCache::keeps_units`](super::read::UnitCache::keeps_units)), so
//! with the cache on every chunk is decoded (and checked) whole, and a hot
//! tile comes from the cache.

use std::ops::Range;

use super::plan::UnitCopy;
use crate::zarr::codec::RangeDecode;

/// The fraction of a chunk (numerator, denominator) a part may cost (see
/// [`RangeDecode`]) to be decoded alone.
pub const RANGED_MAX_COST: (u64, u64) = (3, 4);

/// The decoded bytes from the first to past the last byte that `spec`
/// copies from a unit of `es`-byte elements; `None` when it copies
/// nothing.
#[must_use]
pub fn needed_span(spec: &UnitCopy, es: u64) -> Option<Range<u64>> {
    let mut span: Option<Range<u64>> = None;
    spec.each_strided(&mut |g| {
        if g.count == 0 || g.n == 0 {
            return;
        }
        let (first, last) = (g.at(0).0, g.at(g.count - 1).0);
        let (lo, hi) = (first.min(last), first.max(last) + g.n);
        span = Some(match span.take() {
            Some(s) => s.start.min(lo)..s.end.max(hi),
            None => lo..hi,
        });
    });
    span.map(|s| s.start.saturating_mul(es)..s.end.saturating_mul(es))
}

/// The span of a unit of `unit_bytes` decoded bytes to decode alone for
/// `spec`, when it pays (its cost for a codec decoding parts as `kind` is
/// at most [`RANGED_MAX_COST`] of the unit); `None`: decode the unit whole.
#[must_use]
pub fn ranged_span(spec: &UnitCopy, es: u64, unit_bytes: u64, kind: RangeDecode) -> Option<Range<usize>> {
    let span = needed_span(spec, es)?;
    let (num, den) = RANGED_MAX_COST;
    let cost = match kind {
        RangeDecode::Prefix => span.end,
        RangeDecode::Blocks => span.end - span.start,
    };
    if span.end > unit_bytes || cost.saturating_mul(den) > unit_bytes.saturating_mul(num) {
        return None;
    }
    Some(usize::try_from(span.start).ok()?..usize::try_from(span.end).ok()?)
}

#[cfg(test)]
mod tests;
