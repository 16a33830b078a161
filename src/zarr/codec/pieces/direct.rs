//! zstd decoding straight into a unit's final buffer, handed out piece by
//! piece while the rest is decoded.
//!
//! zstd's streaming decoder normally decodes into its own window and
//! copies out; with `ZSTD_d_stableOutBuffer` it decodes directly into one
//! output buffer that stays in place across calls, writing only past the
//! position it reported last and reading back-references before it. So a
//! unit's buffer is allocated once, zstd fills it front to back, and every
//! part below the reported position is final: it is handed out as a
//! [`Bytes`] of that range (shared ownership of the buffer) while zstd
//! keeps writing further on. No copy of the decoded bytes, no window
//! buffer: the same work as a one-shot decode, cut into pieces.
//!
//! This module and `bytes_to_bytes::blosc` are the crate's only unsafe
//! code: zstd's C API (the safe wrapper does not expose the stable-buffer
//! mode), and a buffer written through a raw pointer beyond the ranges
//! already shared. The invariants: the buffer is allocated zeroed (every
//! byte initialised) and freed only when the decoder and every piece are
//! gone; shared ranges end at or below the position zstd reported, and
//! zstd never writes below it.

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use zstd::zstd_safe::zstd_sys;

/// A unit's decoded bytes: one zeroed allocation, written by zstd through
/// `ptr` past the shared ranges, read through [`Piece`]s below them.
struct UnitBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain bytes; concurrent access is a writer (the
// decoder, one thread at a time: it is `&mut` to the `Frame`) past the
// shared position and readers of ranges below it, never the same bytes.
unsafe impl Send for UnitBuf {}
// SAFETY: as above: `&UnitBuf` only reads ranges no one writes any more.
unsafe impl Sync for UnitBuf {}

impl UnitBuf {
    fn zeroed(len: usize) -> Self {
        let ptr = Box::into_raw(vec![0u8; len].into_boxed_slice()).cast::<u8>();
        Self { ptr, len }
    }
}

impl Drop for UnitBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` come from `Box::into_raw` of a boxed
        // slice of `len` bytes, freed once here.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
    }
}

/// A finished range of a unit's buffer.
struct Piece {
    buf: Arc<UnitBuf>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for Piece {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `start..end` lies in the allocation, its bytes are
        // initialised (zeroed, then written by zstd) and below the position
        // zstd reported when the piece was made, so no one writes them while
        // this borrow lives.
        unsafe { std::slice::from_raw_parts(self.buf.ptr.add(self.start), self.end - self.start) }
    }
}

/// A zstd decompression context (owned; freed on drop).
struct Context(*mut zstd_sys::ZSTD_DCtx);

// SAFETY: a zstd context may move between threads; it is used by one at a
// time (`&mut`).
unsafe impl Send for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: created by ZSTD_createDCtx, freed once.
        unsafe { zstd_sys::ZSTD_freeDCtx(self.0) };
    }
}

/// Contexts kept for the next unit: creating one allocates some 160 KB.
static POOL: Mutex<Vec<Context>> = Mutex::new(Vec::new());
const POOL_MAX: usize = 8;

fn check(code: usize) -> Result<usize, String> {
    // SAFETY: plain functions of an integer; the name is a static C string.
    unsafe {
        if zstd_sys::ZSTD_isError(code) != 0 {
            let name = CStr::from_ptr(zstd_sys::ZSTD_getErrorName(code));
            return Err(name.to_string_lossy().into_owned());
        }
    }
    Ok(code)
}

fn context() -> Result<Context, String> {
    if let Some(c) = POOL.lock().unwrap_or_else(PoisonError::into_inner).pop() {
        return Ok(c);
    }
    // SAFETY: returns a new context or null.
    let ptr = unsafe { zstd_sys::ZSTD_createDCtx() };
    if ptr.is_null() {
        return Err("cannot create a zstd context".into());
    }
    let c = Context(ptr);
    // ZSTD_d_stableOutBuffer (experimental parameter 2): decode straight
    // into the caller's buffer, which stays in place for the whole frame.
    // SAFETY: a valid context, a parameter zstd 1.5 knows.
    check(unsafe { zstd_sys::ZSTD_DCtx_setParameter(c.0, zstd_sys::ZSTD_dParameter::ZSTD_d_experimentalParam2, 1) })?;
    Ok(c)
}

fn give_back(c: Context) {
    // SAFETY: a valid context; resetting the session keeps the parameters.
    let reset = unsafe { zstd_sys::ZSTD_DCtx_reset(c.0, zstd_sys::ZSTD_ResetDirective::ZSTD_reset_session_only) };
    if check(reset).is_ok() {
        let mut pool = POOL.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < POOL_MAX {
            pool.push(c);
        }
    }
}

/// Compressed bytes fed to zstd by the first call (the frame header's
/// fixed prefix); then each call is given exactly what zstd asks for next
/// (the rest of the header, then one whole block and the next block's
/// header), so it decodes each block straight from the frame, never
/// buffering input, and a piece overshoots its size by at most one block
/// (128 KiB of output).
const FIRST_IN: usize = 5;

/// One zstd frame of a declared size being decoded into its unit buffer.
pub(super) struct Frame {
    ctx: Option<Context>,
    frame: Vec<u8>,
    at: usize,
    buf: Arc<UnitBuf>,
    /// Bytes zstd has written (its reported output position).
    pos: usize,
    /// Bytes handed out as pieces.
    sent: usize,
    ended: bool,
    /// Input bytes zstd asked for.
    hint: usize,
}

impl Frame {
    /// A decoder of `frame` (one zstd frame declaring `size` decoded bytes)
    /// into a zeroed buffer of exactly `size` bytes.
    pub(super) fn new(frame: Vec<u8>, size: usize) -> Result<Self, String> {
        Ok(Self {
            ctx: Some(context()?),
            frame,
            at: 0,
            buf: Arc::new(UnitBuf::zeroed(size)),
            pos: 0,
            sent: 0,
            ended: false,
            hint: FIRST_IN,
        })
    }

    /// Bytes not yet handed out.
    pub(super) fn remaining(&self) -> usize {
        self.buf.len - self.sent
    }

    /// Decodes until at least `want` bytes past those handed out are final
    /// (or the frame ends), then hands out the final bytes up to a multiple
    /// of `es` past the last piece (all of them at the end).
    ///
    /// # Errors
    /// zstd's error; a frame that ends short of the buffer, holds more, or
    /// is cut short; the frame already ended with an error.
    pub(super) fn next(&mut self, want: usize, es: usize) -> Result<Bytes, String> {
        let Some(ctx) = self.ctx.as_ref().map(|c| c.0) else {
            return Err("the frame failed before".into());
        };
        let result = self.decode_until(ctx, self.sent.saturating_add(want));
        if let Err(e) = result {
            // A context that saw an error is dropped, not pooled.
            drop(self.ctx.take());
            return Err(e);
        }
        let end = if self.ended { self.pos } else { self.pos - (self.pos - self.sent) % es.max(1) };
        if end == self.sent {
            return Err("no bytes decoded".into());
        }
        let piece = Piece { buf: self.buf.clone(), start: self.sent, end };
        self.sent = end;
        if self.ended {
            if let Some(c) = self.ctx.take() {
                give_back(c);
            }
        }
        Ok(Bytes::from_owner(piece))
    }

    fn decode_until(&mut self, ctx: *mut zstd_sys::ZSTD_DCtx, target: usize) -> Result<(), String> {
        let size = self.buf.len;
        // Each call reads input or writes output (or ends the frame); one
        // that does neither is a frame cut short: bounded by the sizes.
        while !self.ended && (self.pos < target.min(size) || self.pos == size) {
            let take = (self.frame.len() - self.at).min(self.hint.max(1));
            let mut input = zstd_sys::ZSTD_inBuffer { src: self.frame[self.at..].as_ptr().cast(), size: take, pos: 0 };
            // The same buffer, size and position zstd reported last: the
            // stable-buffer mode checks all three.
            let mut output = zstd_sys::ZSTD_outBuffer { dst: self.buf.ptr.cast(), size, pos: self.pos };
            // SAFETY: a valid context; the input is `take` readable bytes;
            // the output is the unit's whole allocation, of which zstd writes
            // only `pos..size` (no piece reaches past `pos`) and reads
            // `..pos` (back-references: bytes readers may read too).
            let code = unsafe { zstd_sys::ZSTD_decompressStream(ctx, &raw mut output, &raw mut input) };
            let hint = check(code)?;
            let (read, before) = (input.pos, self.pos);
            self.hint = hint;
            self.at += read;
            self.pos = output.pos;
            if hint == 0 {
                self.ended = true;
                if self.pos < size {
                    return Err(format!("the frame ends after {} bytes, its header declares {size}", self.pos));
                }
                if self.at != self.frame.len() {
                    return Err("bytes follow the frame".into());
                }
                return Ok(());
            }
            if read == 0 && self.pos == before {
                return Err(if self.pos == size && self.at < self.frame.len() {
                    format!("the frame holds more than the {size} bytes it declares")
                } else {
                    "the frame is truncated".into()
                });
            }
        }
        Ok(())
    }
}
