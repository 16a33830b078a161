//! Uncompressed chunks read straight into their places in a slab: no
//! buffer of the whole chunk, no copy out of it.
//!
//! A chunk (not sharded) whose stored bytes are its elements — the
//! `bytes` codec alone, no compressor and no checksum
//! ([`ArrayToBytesCodec::byte_layout`](crate::zarr::codec::ArrayToBytesCodec::byte_layout)) —
//! whose part a slab needs lies in runs of [`MIN_DIRECT_RUN`] bytes on
//! average (a whole or aligned box: one run per row of the chunk; a slab
//! that cuts such a chunk: the rows it holds, contiguous in the file), is
//! handed to the store as one list of places
//! ([`ChunkSource::open_direct`](super::ChunkSource::open_direct),
//! [`DirectUnit::read_into`]): a local file reads each run of the chunk
//! into its place in the slab (one `preadv` per stretch of the file), and
//! a big-endian layout is swapped there in place. A part of any size goes
//! this way (only its bytes are read, as by byte ranges, without the
//! buffer of each range and the copy out of it), so the server's first
//! slabs of such a read may cut chunks (they ramp up: see
//! [`super::plan::ReadPlan::ramping_from`]). Parts in shorter runs go by
//! byte ranges ([`super::partial`]), and stores without files read whole
//! and copy, as before.
//!
//! Never trusting the file: the store opens it and reports its size, and
//! a size other than the chunk's reads the chunk the ordinary way, which
//! reports it as every read does; a file that ends early while it is read
//! (truncated in place) is the store's error, never zeros. A checksum
//! codec (`crc32c`) takes the ordinary path: its check needs the whole
//! stored value, which this never holds.
//!
//! The chunks of one slab are opened as the slab reaches them and read
//! together, [`DIRECT_BATCH`] at a time, by one job ([`DirectBatch`],
//! [`read_batch`]): one hand-off per batch rather than per chunk. The job
//! locks the slab for each file's read in turn, so other units' copies
//! into the slab (missing chunks' fills, chunks decoded the ordinary way)
//! wait for one file's read at most, not a batch's. A slab holds at
//! most [`DIRECT_BATCH`] files open for this, plus those being opened.
//! The job runs on the caller's I/O threads ([`super::Offload::spawn_io`]:
//! the service's blocking pool, never the CPU pool, since it waits on the
//! files and on the slab's lock; inline for slabs of at most
//! [`super::read::INLINE_SLAB_BYTES`], as small reads of a local mount run
//! on the async worker already), and only while the decoded-chunk cache
//! would not keep the unit (a cached unit must be decoded whole anyway).
//! A mount on a slow network filesystem holds a blocking thread per
//! batch being read, never a CPU thread.

use std::sync::Mutex;

use super::plan::UnitCopy;
use super::{DirectUnit, RegionError, SlabData};
use crate::zarr::codec::byte_layout_decode;

/// Runs shorter than this on average (bytes) are gathered from a whole
/// chunk instead: a place per few elements costs more than the copy.
pub const MIN_DIRECT_RUN: u64 = 4096;

/// A unit read directly in at most this many runs (a 4 MiB chunk in
/// 4 KiB runs: 1024).
pub const MAX_DIRECT_RUNS: usize = 4096;

/// One run: `len` bytes from `src` in the stored unit to `dst` in the slab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Byte offset in the stored unit.
    pub src: u64,
    /// Byte offset in the slab.
    pub dst: u64,
    /// Bytes.
    pub len: u64,
}

/// The byte runs `spec` copies from a unit of `unit_bytes` bytes (elements
/// of `es` bytes), when reading them straight into the slab pays: at most
/// [`MAX_DIRECT_RUNS`] runs of at least [`MIN_DIRECT_RUN`] bytes on
/// average (any part of the unit: each byte is read once, into its place,
/// whatever the share of the unit). Runs back to back on both sides are
/// one.
#[must_use]
pub fn direct_runs(spec: &UnitCopy, es: u64, unit_bytes: u64) -> Option<Vec<Run>> {
    let mut runs: Vec<Run> = Vec::new();
    let mut total = 0u64;
    let mut ok = true;
    spec.each_strided(&mut |g| {
        if !ok || g.count == 0 || g.n == 0 {
            return;
        }
        let n = g.n.saturating_mul(es);
        // Runs back to back on both sides: one run.
        #[allow(clippy::cast_possible_wrap)] // a run's length within a unit
        let merged = g.count > 1 && g.src_step == g.n as i64 && g.dst_step == g.n;
        let (count, len) = if merged { (1, n.saturating_mul(g.count)) } else { (g.count, n) };
        if len < MIN_DIRECT_RUN / 4 || runs.len() as u64 + count > MAX_DIRECT_RUNS as u64 {
            ok = false;
            return;
        }
        for j in 0..count {
            let (s, d) = g.at(j);
            let run = Run { src: s.saturating_mul(es), dst: d.saturating_mul(es), len };
            // Adjacent to the previous run on both sides: extend it.
            match runs.last_mut() {
                Some(last) if last.src + last.len == run.src && last.dst + last.len == run.dst => last.len += len,
                _ => runs.push(run),
            }
            total = total.saturating_add(len);
        }
    });
    let pays = ok && total > 0 && total <= unit_bytes && total >= MIN_DIRECT_RUN.saturating_mul(runs.len() as u64);
    (pays && runs.iter().all(|r| r.src.saturating_add(r.len) <= unit_bytes)).then_some(runs)
}

/// Chunks opened for a slab, read together ([`read_batch`]) at most this
/// many at a time: bounds the files a slab holds open.
pub const DIRECT_BATCH: usize = 16;

/// One chunk opened for a direct read, waiting in its slab's batch.
pub struct DirectRead {
    /// The open chunk.
    pub unit: Box<dyn DirectUnit>,
    /// Its runs, into the slab.
    pub runs: Vec<Run>,
    /// The layout's swap unit (bytes; 1: none).
    pub swap: usize,
    /// The chunk's key, for errors.
    pub key: String,
}

/// The direct reads of one slab not yet run.
#[derive(Default)]
pub struct DirectBatch(Mutex<Vec<DirectRead>>);

impl DirectBatch {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<DirectRead>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds `read`; the batch to run now when that fills it.
    pub fn push(&self, read: DirectRead) -> Option<Vec<DirectRead>> {
        let mut b = self.lock();
        b.push(read);
        (b.len() >= DIRECT_BATCH).then(|| std::mem::take(&mut *b))
    }

    /// The reads not yet run.
    pub fn take(&self) -> Vec<DirectRead> {
        std::mem::take(&mut *self.lock())
    }
}

/// Runs `reads` into `slab` (fixed-size elements) under one lock of it, in
/// order; the first failure stops them.
///
/// # Errors
/// See [`read_direct`].
pub fn read_batch(reads: Vec<DirectRead>, slab: &Mutex<SlabData>) -> Result<(), RegionError> {
    // The lock is taken per file, so a CPU job copying another unit into
    // the slab waits for one file's read at most.
    for r in reads {
        let mut guard = slab.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        read_direct(&*r.unit, &r.runs, &mut guard, r.swap, &r.key)?;
    }
    Ok(())
}

/// Reads `runs` of the open unit `unit` into `slab` (fixed-size elements),
/// swapping each `swap`-byte group in place when the layout is big-endian.
///
/// # Errors
/// The store's failure (naming `key`), or runs outside the slab (a plan
/// that does not fit it: internal).
pub fn read_direct(
    unit: &dyn DirectUnit,
    runs: &[Run],
    slab: &mut SlabData,
    swap: usize,
    key: &str,
) -> Result<(), RegionError> {
    let SlabData::Fixed(dst) = slab else {
        return Err(RegionError::Internal(format!("{key}: a direct read into a slab of variable-length elements")));
    };
    let outside = || RegionError::Internal(format!("{key}: a direct read's runs do not fit the slab"));
    // The places, carved out of the slab in slab order (disjoint by construction).
    let mut order: Vec<&Run> = runs.iter().collect();
    order.sort_unstable_by_key(|r| r.dst);
    let mut places: Vec<(u64, &mut [u8])> = Vec::with_capacity(runs.len());
    let mut rest: &mut [u8] = dst.as_mut_slice();
    let mut at = 0u64;
    for r in order {
        let skip = usize::try_from(r.dst.checked_sub(at).ok_or_else(outside)?).map_err(|_| outside())?;
        let len = usize::try_from(r.len).map_err(|_| outside())?;
        if skip.checked_add(len).is_none_or(|end| end > rest.len()) {
            return Err(outside());
        }
        let (place, tail) = std::mem::take(&mut rest)[skip..].split_at_mut(len);
        places.push((r.src, place));
        rest = tail;
        at = r.dst + r.len;
    }
    unit.read_into(&mut places).map_err(|source| RegionError::Source { key: key.to_owned(), source })?;
    if swap > 1 {
        for (_, place) in &mut places {
            byte_layout_decode(place, swap);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
