//! Recycled slab buffers. A large slab of fixed-size elements is a fresh
//! buffer of up to 2 × `read_slab_bytes`; allocated anew for every slab,
//! each of its pages is faulted in and cleared by the kernel and then
//! zeroed again by the allocator (a profile of a whole uncompressed read
//! spent about a third of the server's time there). Buffers of at least
//! [`MIN_POOLED`] come from a small process-wide pool instead: the caller
//! hands a slab's buffer back ([`give`]) once its bytes are written, and
//! the next slab takes it ([`take_zeroed`]) and zeroes it in place (a
//! `memset` over pages already mapped).
//!
//! Slabs of fixed-size elements take their buffers unzeroed ([`take`]):
//! the read writes every element of such a slab (each unit's part copied,
//! each missing unit's part filled), so zeroing it first was a `memset` of
//! the whole slab for nothing (5–10 % of a read of whole blosc chunks).
//! Debug builds fill every such buffer with [`POISON`] instead, so a test
//! of a read that leaves an element unwritten sees it.
//!
//! The pool holds at most [`POOL_BYTES`] in total (and buffers of at most
//! that size): memory the process keeps after a large read, on top of idle.
//! A buffer handed back when the pool is full takes the place of the
//! oldest ones (freed).
//! A buffer is reused only for a slab of at least four fifths of its
//! capacity, so a slab holds at most a quarter more than it counts (the
//! slabs of one read are all the same size but the last), and a small slab
//! never holds a large buffer.

use std::sync::Mutex;

/// Buffers smaller than this are not pooled (the allocator's own pages
/// serve them well).
pub const MIN_POOLED: usize = 1 << 20;

/// What the pool holds at most, in total.
pub const POOL_BYTES: usize = 64 << 20;

/// A pool of buffers, bounded by `limit` bytes in total.
#[derive(Debug)]
pub struct Pool {
    buffers: Mutex<Vec<Vec<u8>>>,
    limit: usize,
}

impl Pool {
    /// An empty pool holding at most `limit` bytes.
    #[must_use]
    pub const fn new(limit: usize) -> Self {
        Self { buffers: Mutex::new(Vec::new()), limit }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.buffers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A zeroed buffer of `len` bytes: a pooled one when one fits.
    #[must_use]
    pub fn take_zeroed(&self, len: usize) -> Vec<u8> {
        if let Some(mut b) = self.take_pooled(len) {
            b.clear();
            b.resize(len, 0);
            return b;
        }
        vec![0u8; len]
    }

    /// A buffer of `len` bytes whose contents are unspecified (a pooled
    /// one's old bytes, or zeros): for a slab every byte of which is
    /// written before it is read. Debug builds fill it with [`POISON`].
    #[must_use]
    pub fn take(&self, len: usize) -> Vec<u8> {
        let mut b = self.take_pooled(len).map_or_else(
            || vec![0u8; len],
            |mut b| {
                // Only bytes past the old length are written (zeros).
                b.resize(len, 0);
                b
            },
        );
        if cfg!(debug_assertions) {
            b.fill(POISON);
        }
        b
    }

    fn take_pooled(&self, len: usize) -> Option<Vec<u8>> {
        if len < MIN_POOLED || len > self.limit {
            return None;
        }
        let mut p = self.lock();
        let at = p.iter().position(|b| b.capacity() >= len && b.capacity() <= len + len / 4)?;
        Some(p.swap_remove(at))
    }

    /// Hands a buffer back: kept when it is large enough to pool, in place
    /// of the oldest buffers held when the pool has no room for it (the
    /// latest slabs' sizes are the likeliest next: a read whose first
    /// slabs ramp up would otherwise fill the pool with small buffers its
    /// later slabs never take), else freed.
    pub fn give(&self, b: Vec<u8>) {
        let cap = b.capacity();
        if !(MIN_POOLED..=self.limit).contains(&cap) {
            return;
        }
        let mut p = self.lock();
        let mut held: usize = p.iter().map(Vec::capacity).sum();
        while held + cap > self.limit && !p.is_empty() {
            held -= p.remove(0).capacity();
        }
        p.push(b);
    }

    /// Bytes the pool holds now.
    #[must_use]
    pub fn pooled_bytes(&self) -> usize {
        self.lock().iter().map(Vec::capacity).sum()
    }
}

/// The process's slab buffers.
static SLABS: Pool = Pool::new(POOL_BYTES);

/// A zeroed slab buffer of `len` bytes (see [`Pool::take_zeroed`]).
#[must_use]
pub fn take_zeroed(len: usize) -> Vec<u8> {
    SLABS.take_zeroed(len)
}

/// What debug builds fill an unzeroed slab buffer with ([`take`]).
pub const POISON: u8 = 0xA5;

/// A slab buffer of `len` bytes, contents unspecified (see [`Pool::take`]):
/// every byte must be written before it is read.
#[must_use]
pub fn take(len: usize) -> Vec<u8> {
    SLABS.take(len)
}

/// Hands a slab buffer back once its bytes are written (see [`Pool::give`]).
pub fn give(b: Vec<u8>) {
    SLABS.give(b);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pooled_buffer_comes_back_zeroed_and_the_pool_stays_bounded() {
        let pool = Pool::new(16 << 20);
        let mut b = pool.take_zeroed(MIN_POOLED + 5);
        assert!(b.iter().all(|&x| x == 0));
        b.iter_mut().for_each(|x| *x = 0xAB);
        let ptr = b.as_ptr();
        pool.give(b);
        assert_eq!(pool.pooled_bytes(), MIN_POOLED + 5);
        let again = pool.take_zeroed(MIN_POOLED + 1);
        assert_eq!(again.len(), MIN_POOLED + 1);
        assert!(again.iter().all(|&x| x == 0), "a reused buffer is zeroed");
        assert_eq!(again.as_ptr(), ptr, "the pooled buffer was reused");
        assert_eq!(pool.pooled_bytes(), 0);
        pool.give(again);
        // A slab under four fifths of a buffer's size does not take it.
        let small = pool.take_zeroed(MIN_POOLED / 2);
        assert_ne!(small.as_ptr(), ptr);
        let smaller = pool.take_zeroed((MIN_POOLED + 5) * 3 / 4);
        assert_ne!(smaller.as_ptr(), ptr, "a quarter smaller: not this buffer");
        drop(smaller);
        // Small and oversized buffers are not kept; the pool never passes its bound.
        pool.give(small);
        pool.give(Vec::with_capacity((16 << 20) + 1));
        assert_eq!(pool.pooled_bytes(), MIN_POOLED + 5);
        for _ in 0..100 {
            pool.give(Vec::with_capacity(4 << 20));
        }
        assert!(pool.pooled_bytes() <= 16 << 20);
        // The newest take the oldest's places: four of 4 MiB.
        assert_eq!(pool.pooled_bytes(), 4 * (4 << 20));
        // A larger buffer handed back when full replaces the oldest ones.
        pool.give(Vec::with_capacity(10 << 20));
        assert_eq!(pool.pooled_bytes(), (4 << 20) + (10 << 20));
        assert!(pool.take(10 << 20).capacity() >= 10 << 20);
        assert_eq!(pool.pooled_bytes(), 4 << 20);
    }

    #[test]
    fn an_unzeroed_buffer_is_reused_at_its_size_and_poisoned_in_debug_builds() {
        let pool = Pool::new(16 << 20);
        let mut b = pool.take(MIN_POOLED + 5);
        assert_eq!(b.len(), MIN_POOLED + 5);
        b.iter_mut().for_each(|x| *x = 0xAB);
        let ptr = b.as_ptr();
        pool.give(b);
        let again = pool.take(MIN_POOLED + 1);
        assert_eq!((again.len(), again.as_ptr()), (MIN_POOLED + 1, ptr), "the pooled buffer, at the new length");
        assert_eq!(pool.pooled_bytes(), 0);
        let want = if cfg!(debug_assertions) { POISON } else { 0xAB };
        assert!(again.iter().all(|&x| x == want));
        // Small buffers are fresh, and poisoned too.
        let small = pool.take(100);
        assert_eq!(small.len(), 100);
        assert!(small.iter().all(|&x| x == if cfg!(debug_assertions) { POISON } else { 0 }));
    }
}
