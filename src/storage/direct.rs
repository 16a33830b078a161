//! Reading an object's bytes straight into a caller's buffers: an open
//! local file ([`OpenFile`]) whose byte runs land where the caller says,
//! one `preadv` per stretch of the file (up to [`MAX_IOVECS`] places
//! each), so a region read of an uncompressed chunk moves each byte from
//! the page cache to its place in the answer once, without a buffer of
//! the whole chunk in between and a copy out of it.
//!
//! Backends that have no file to read this way (object stores) answer
//! `None` to [`super::Storage::open_file`] and callers read the object the
//! ordinary way. The file is opened confined to the mount like every local
//! read ([`super::local`]); its size is the `fstat` taken at the open, and
//! a read that finds fewer bytes (the file truncated in place meanwhile) is
//! an error, never zeros passed off as data.
//!
//! The open is measured as a read of the mount's storage
//! ([`super::measured`]); a read of the open file that fails counts as that
//! operation's error too (the file opened by a measured backend carries its
//! mount's figures).

use std::fs::File;
use std::io::IoSliceMut;
use std::sync::Arc;

use bytes::Bytes;
use rustix::buffer::spare_capacity;
use rustix::io::Errno;

use super::{StorageError, StorageResult};
use crate::metrics::{StorageMetrics, StorageOp};

/// Reads `len` bytes of `file` from `offset` into a buffer of exactly that
/// size: `pread` into its spare capacity (no zero-filling, no seek), one
/// call for a file in the page cache, more only for a short read. Fewer
/// bytes come back only at the end of the file.
///
/// # Errors
/// An I/O failure.
pub fn read_span(file: &File, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(len);
    while buf.len() < len {
        let at = offset + buf.len() as u64;
        match rustix::io::pread(file, spare_capacity(&mut buf), at) {
            Ok(0) => break,
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // The allocator may give more capacity than asked, which a read may fill.
    buf.truncate(len);
    Ok(buf)
}

/// Bytes of an open local file still to be sent, read a frame at a time as
/// an answer is written ([`super::ReadOutcome::tail`]): the answer never
/// holds more than a frame or two of them.
///
/// The file's size and change times are noted at the open and checked
/// again before the last frame is handed on: a file truncated, or
/// rewritten in place by another writer (zarrd's own writes replace files
/// by renaming), while the answer was being sent fails it, so the client
/// sees a body shorter than its `Content-Length`, never a mix of two
/// versions under the first one's ETag.
#[derive(Debug, Clone)]
pub struct FileSpan {
    file: Arc<File>,
    next: u64,
    end: u64,
    key: Arc<str>,
    /// Size, modification and change times at the open.
    stamp: Option<Stamp>,
    /// The mount's storage figures, where failed reads are counted.
    metrics: Option<Arc<StorageMetrics>>,
}

/// What says a file is the one that was opened: size, mtime and ctime.
type Stamp = (u64, i64, i64, i64, i64);

fn stamp(file: &File) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata().ok()?;
    Some((m.len(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()))
}

impl FileSpan {
    /// `range` of `file`, read for `key`.
    #[must_use]
    pub fn new(file: File, range: std::ops::Range<u64>, key: &str) -> Self {
        let stamp = stamp(&file);
        Self {
            file: Arc::new(file),
            next: range.start,
            end: range.end.max(range.start),
            key: key.into(),
            stamp,
            metrics: None,
        }
    }

    /// The same span, its failed reads counted in `metrics` (as errors of
    /// [`StorageOp::Read`], the operation its open counted as).
    #[must_use]
    pub fn measured(mut self, metrics: Arc<StorageMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Bytes still to be read.
    #[must_use]
    pub fn remaining(&self) -> u64 {
        self.end - self.next
    }

    /// The next frame: up to `max` bytes (`None` at the end). A blocking
    /// read: run it on the blocking pool.
    ///
    /// # Errors
    /// The file ending early, or changed since it was opened (the check
    /// comes with the last frame): [`StorageError::Unavailable`]; an I/O
    /// failure. Either is counted in the mount's figures when measured,
    /// and ends the span.
    pub fn next_frame(&mut self, max: usize) -> StorageResult<Option<Bytes>> {
        let result = self.read_frame(max);
        if let Err(e) = &result {
            self.next = self.end;
            if let Some(m) = &self.metrics {
                m.op(StorageOp::Read).error(e.kind());
            }
        }
        result
    }

    fn read_frame(&mut self, max: usize) -> StorageResult<Option<Bytes>> {
        let len = usize::try_from(self.remaining()).unwrap_or(usize::MAX).min(max.max(1));
        if len == 0 {
            return Ok(None);
        }
        let buf = read_span(&self.file, self.next, len).map_err(|e| StorageError::from_io(&self.key, &e))?;
        if buf.len() != len {
            return Err(StorageError::Unavailable { reason: format!("{} was truncated while being read", self.key) });
        }
        self.next += len as u64;
        if self.next == self.end && stamp(&self.file) != self.stamp {
            return Err(StorageError::Unavailable { reason: format!("{} changed while being read", self.key) });
        }
        Ok(Some(Bytes::from(buf)))
    }
}

/// Places per `preadv` call at most (Linux's `IOV_MAX`).
pub const MAX_IOVECS: usize = 1024;

/// An object opened for reading into the caller's buffers.
#[derive(Debug)]
pub struct OpenFile {
    file: File,
    size: u64,
    key: String,
    /// The mount's storage figures, where failed reads are counted.
    metrics: Option<Arc<StorageMetrics>>,
}

impl OpenFile {
    /// `file` (of `size` bytes at its open), read for `key`.
    #[must_use]
    pub fn new(file: File, size: u64, key: String) -> Self {
        Self { file, size, key, metrics: None }
    }

    /// The same file, its failed reads counted in `metrics` (as errors of
    /// [`StorageOp::Read`], the operation its open counted as).
    #[must_use]
    pub fn measured(mut self, metrics: Arc<StorageMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The object's size when it was opened.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Fills every `(offset, buffer)` with the file's bytes from `offset`
    /// on (in any order). Runs that follow
    /// each other in the file are read by one `preadv`.
    ///
    /// # Errors
    /// A run past the size at the open, or the file ending before a run
    /// does (truncated while read): [`StorageError::Unavailable`]; an I/O
    /// failure. Either is counted in the mount's figures when measured.
    pub fn read_runs(&self, runs: &mut [(u64, &mut [u8])]) -> StorageResult<()> {
        let result = self.read_all(runs);
        if let (Err(e), Some(m)) = (&result, &self.metrics) {
            m.op(StorageOp::Read).error(e.kind());
        }
        result
    }

    fn read_all(&self, runs: &mut [(u64, &mut [u8])]) -> StorageResult<()> {
        runs.sort_unstable_by_key(|r| r.0);
        let mut i = 0;
        while i < runs.len() {
            // The longest stretch of runs back to back in the file.
            let start = runs[i].0;
            let mut end = start;
            let mut j = i;
            while j < runs.len() && j - i < MAX_IOVECS && runs[j].0 == end {
                end = end.saturating_add(runs[j].1.len() as u64);
                j += 1;
            }
            if end > self.size {
                return Err(self.short(end));
            }
            self.read_stretch(start, &mut runs[i..j])?;
            i = j;
        }
        Ok(())
    }

    /// Reads the runs `runs` (back to back in the file from `start`),
    /// continuing after partial reads.
    fn read_stretch(&self, start: u64, runs: &mut [(u64, &mut [u8])]) -> StorageResult<()> {
        let total: usize = runs.iter().map(|r| r.1.len()).sum();
        let mut done = 0usize;
        // Each round reads at least one byte or ends the loop: at most
        // `total` rounds, in practice one.
        while done < total {
            // The first run not yet full, and how much of it is.
            let (mut k, mut skip) = (0, done);
            while skip >= runs[k].1.len() {
                skip -= runs[k].1.len();
                k += 1;
            }
            let mut iov: Vec<IoSliceMut<'_>> = Vec::with_capacity(runs.len() - k);
            let (first, rest) = runs[k..].split_first_mut().unwrap_or_else(|| unreachable!("k < runs.len()"));
            iov.push(IoSliceMut::new(&mut first.1[skip..]));
            iov.extend(rest.iter_mut().map(|r| IoSliceMut::new(&mut *r.1)));
            match rustix::io::preadv(&self.file, &mut iov, start + done as u64) {
                Ok(0) => return Err(self.short(start + done as u64)),
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(StorageError::from_io(&self.key, &e.into())),
            }
        }
        Ok(())
    }

    fn short(&self, at: u64) -> StorageError {
        StorageError::Unavailable {
            reason: format!(
                "{} was truncated while being read (needed byte {at}, {} at the open)",
                self.key, self.size
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_of(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    #[test]
    fn runs_land_in_their_places_in_any_order() {
        let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let open = OpenFile::new(file_of(&data), data.len() as u64, "a/c/0".into());
        let mut out = vec![0u8; 10_000];
        // Three runs back to back in the file, placed in reverse order in
        // `out`, plus one alone further on.
        let (a, rest) = out.split_at_mut(3000);
        let (b, rest) = rest.split_at_mut(3000);
        let (c, d) = rest.split_at_mut(3000);
        let mut runs = vec![(6000, a), (3000, b), (0, c), (9000, d)];
        open.read_runs(&mut runs).unwrap();
        assert_eq!(&out[..3000], &data[6000..9000]);
        assert_eq!(&out[3000..6000], &data[3000..6000]);
        assert_eq!(&out[6000..9000], &data[..3000]);
        assert_eq!(&out[9000..], &data[9000..]);
    }

    #[test]
    fn more_runs_than_one_call_takes_are_read_in_several() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let open = OpenFile::new(file_of(&data), 3000, "k".into());
        let mut out = vec![0u8; 3000];
        let mut runs: Vec<(u64, &mut [u8])> = out.chunks_mut(1).enumerate().map(|(i, c)| (i as u64, c)).collect();
        assert!(runs.len() > MAX_IOVECS * 2);
        open.read_runs(&mut runs).unwrap();
        assert_eq!(out, data);
    }

    #[test]
    fn a_file_shorter_than_at_its_open_is_an_error_not_zeros() {
        let f = file_of(&[7u8; 100]);
        // Opened at 200 bytes (as if truncated after the fstat).
        let open = OpenFile::new(f, 200, "a/c/1".into());
        let mut out = [1u8; 200];
        let mut runs = vec![(0u64, &mut out[..])];
        let err = open.read_runs(&mut runs).unwrap_err();
        assert!(
            matches!(&err, StorageError::Unavailable { reason } if reason.contains("a/c/1") && reason.contains("truncated")),
            "{err:?}"
        );
        // A run past the size at the open is refused before reading.
        let open = OpenFile::new(file_of(&[7u8; 100]), 100, "k".into());
        let mut out = [0u8; 10];
        let err = open.read_runs(&mut [(95u64, &mut out[..])]).unwrap_err();
        assert!(matches!(err, StorageError::Unavailable { .. }), "{err:?}");
    }

    #[test]
    fn failed_reads_of_a_measured_file_count_as_read_errors() {
        let metrics = Arc::new(StorageMetrics::default());
        let open = OpenFile::new(file_of(&[7u8; 100]), 200, "a/c/1".into()).measured(metrics.clone());
        let mut out = [0u8; 100];
        // A good read counts nothing (its open was the measured read).
        open.read_runs(&mut [(0u64, &mut out[..])]).unwrap();
        assert_eq!(metrics.op(StorageOp::Read).errors("unavailable"), 0);
        // Past the end, and truncated while read: two errors.
        let mut more = [0u8; 10];
        assert!(open.read_runs(&mut [(195u64, &mut more[..])]).is_err());
        assert!(open.read_runs(&mut [(95u64, &mut more[..])]).is_err());
        assert_eq!(metrics.op(StorageOp::Read).errors("unavailable"), 2);
        assert_eq!(metrics.op(StorageOp::Read).latency.count(), 0);
    }
}
