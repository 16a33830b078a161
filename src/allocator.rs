//! The allocator's tuning: how long mimalloc (the global allocator, see
//! `main.rs`) keeps freed memory before giving it back to the kernel.
//!
//! mimalloc v3 purges freed pages after `purge_delay` (1 s by default):
//! the next read that needs them faults them in again and the kernel
//! clears every page. A slice read allocates and frees its slabs, stored
//! chunks and decoded chunks (tens of MiB for an aligned box of blosc
//! chunks), so with reads more than a second apart, and even back to back
//! (a blosc plane read in a loop: ~190 page faults per read, none with
//! purging off), each read paid for its pages again: `clear_page_erms` was
//! 5–6 % of the server's CPU on that plane, and in
//! `bench/table.py` (reads seconds apart) a 10 s delay cut the server's
//! CPU per read by 5–30 % on the blosc cells (bench/README.md, round 7).
//! Memory freed and not reused for [`PURGE_DELAY_MS`] still goes back, no
//! sooner than that and at the allocator's next use in the thread that
//! owns it (mimalloc has no timer of its own): a thread that stays idle may
//! keep its freed pages until it allocates again, as with the 1 s default.
//!
//! `MIMALLOC_PURGE_DELAY` in the environment (mimalloc's own setting) wins.
//!
//! The crate's third module with unsafe code: one FFI call, which stores
//! an integer option.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_long};

/// How long freed memory is kept for reuse before it is purged (ms).
pub const PURGE_DELAY_MS: c_long = 10_000;

/// mimalloc's `mi_option_purge_delay` (the 16th of v3's `mi_option_e`
/// in `mimalloc.h`; checked against its default by the test below).
const MI_OPTION_PURGE_DELAY: c_int = 15;

extern "C" {
    // mimalloc (linked through the `mimalloc` crate): options are
    // atomics in a static table, readable and settable from any thread
    // at any time.
    fn mi_option_set(option: c_int, value: c_long);
    #[cfg(test)]
    fn mi_option_get(option: c_int) -> c_long;
}

/// Applies the tuning, unless `MIMALLOC_PURGE_DELAY` is set.
pub fn tune() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: `mi_option_set` takes two integers and stores the value
        // in mimalloc's option table; the option index is a valid
        // `mi_option_t` (checked by the test against mimalloc's default).
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_is_the_option_tuned() {
        // SAFETY: as in `tune`: integers in, an integer out.
        let get = || unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // mimalloc v3's default purge delay: the index names that option.
            assert_eq!(get(), 1000, "mi_option_purge_delay is not option {MI_OPTION_PURGE_DELAY}");
        }
        tune();
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(get(), PURGE_DELAY_MS);
        }
    }
}
