//! The `blosc` codec (spec: `codecs/blosc/index.rst`; the container format is
//! c-blosc's `README_CHUNK_FORMAT.rst`), which is also numcodecs' `blosc`
//! (Zarr v2 and `numcodecs.blosc`, where `shuffle` is an integer and -1,
//! AUTOSHUFFLE, means bit-shuffle for 1-byte items and byte-shuffle
//! otherwise).
//!
//! c-blosc 1.21 (compiled from source by `blosc-src`) is called through its
//! context functions `blosc_compress_ctx` / `blosc_decompress_ctx` with one
//! internal thread: they take no global lock, keep no state between calls
//! and ignore the `BLOSC_*` environment variables, so a [`Blosc`] is safe to
//! use from many threads at once.
//!
//! This is one of the crate's two modules with unsafe code (the other is
//! `zarr/codec/pieces/direct.rs`): FFI calls, each with its safety argument. Before decompressing, the header is
//! checked in Rust and by `blosc_cbuffer_validate` (its compressed size must
//! equal the input length, its decoded size must fit the cap), so c-blosc is
//! only ever handed a buffer as long as its header says, and an output buffer
//! as large as its header says, which c-blosc's own bounds checks rely on.
#![allow(unsafe_code)]

use std::ffi::CStr;

use blosc_src::{
    blosc_cbuffer_validate, blosc_compress_ctx, blosc_decompress_ctx, BLOSC_MAX_BUFFERSIZE, BLOSC_MAX_OVERHEAD,
};

use serde::Serialize;
use serde_json::{Map, Value};

use super::Config;
use crate::zarr::chunk::ChunkRepr;
use crate::zarr::codec::numcodecs::{check_int, member};
use crate::zarr::codec::registry::{BuiltCodec, CodecConfig};
use crate::zarr::codec::{BytesToBytesCodec, CodecError, CodecResult};
use crate::zarr::metadata::error::{join, Result};
use crate::zarr::metadata::json::{enum_str, uint_min, Obj};

const NAME: &str = "blosc";

/// Blosc compressors known to numcodecs / c-blosc.
pub const BLOSC_CNAMES: &[&str] = &["blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd"];

/// Blosc internal compressor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BloscCname {
    /// `"blosclz"`.
    Blosclz,
    /// `"lz4"`.
    Lz4,
    /// `"lz4hc"`.
    Lz4hc,
    /// `"snappy"`.
    Snappy,
    /// `"zlib"`.
    Zlib,
    /// `"zstd"`.
    Zstd,
}

impl BloscCname {
    /// The compressor of a name in [`BLOSC_CNAMES`].
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "blosclz" => Self::Blosclz,
            "lz4" => Self::Lz4,
            "lz4hc" => Self::Lz4hc,
            "snappy" => Self::Snappy,
            "zlib" => Self::Zlib,
            "zstd" => Self::Zstd,
            _ => return None,
        })
    }
}

/// Blosc shuffle modes as the v3 codec names them.
const SHUFFLES: &[&str] = &["noshuffle", "shuffle", "bitshuffle"];

/// Blosc shuffle mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BloscShuffle {
    /// `"noshuffle"`.
    Noshuffle,
    /// `"shuffle"` (byte-wise).
    Shuffle,
    /// `"bitshuffle"`.
    Bitshuffle,
}

/// `blosc` codec configuration (v3). Members are optional because
/// zarr-python and TensorStore fill defaults for absent ones when reading.
///
/// ```
/// # use zarrd::zarr::codec::bytes_to_bytes::blosc::{BloscCname, BloscConfig};
/// let c = BloscConfig { cname: Some(BloscCname::Lz4), clevel: Some(5), shuffle: None, typesize: None, blocksize: None };
/// assert_eq!(serde_json::to_string(&c).unwrap(), r#"{"cname":"lz4","clevel":5}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BloscConfig {
    /// Internal compressor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cname: Option<BloscCname>,
    /// Level 0..=9.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clevel: Option<u8>,
    /// Shuffle mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shuffle: Option<BloscShuffle>,
    /// Shuffle stride in bytes (>= 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub typesize: Option<u64>,
    /// Block size in bytes (0 = automatic).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocksize: Option<u64>,
}

impl BloscConfig {
    /// Parses a v3 configuration object.
    pub(crate) fn parse(cfg: &mut Obj<'_>) -> Result<Self> {
        let cname = cfg.optional("cname").map(|v| enum_str(v, &cfg.at("cname"), BLOSC_CNAMES)).transpose()?;
        let clevel = cfg.optional("clevel").map(|v| super::level_0_9(v, &cfg.at("clevel"))).transpose()?;
        let shuffle = cfg.optional("shuffle").map(|v| enum_str(v, &cfg.at("shuffle"), SHUFFLES)).transpose()?;
        let typesize = cfg.optional("typesize").map(|v| uint_min(v, &cfg.at("typesize"), 1)).transpose()?;
        let blocksize = cfg.optional("blocksize").map(|v| uint_min(v, &cfg.at("blocksize"), 0)).transpose()?;
        let cname = cname.and_then(BloscCname::parse);
        let shuffle = shuffle.map(|s| match s {
            "noshuffle" => BloscShuffle::Noshuffle,
            "shuffle" => BloscShuffle::Shuffle,
            _ => BloscShuffle::Bitshuffle,
        });
        cfg.deny_rest("\"cname\", \"clevel\", \"shuffle\", \"typesize\" and \"blocksize\"")?;
        Ok(Self { cname, clevel, shuffle, typesize, blocksize })
    }

    /// The codec, with zarr-python's defaults for absent members: `zstd`,
    /// clevel 5, `typesize` the size of the elements entering the chain's
    /// array -> bytes codec (`element_size`), bit-shuffle for 1-byte items
    /// and byte-shuffle otherwise, automatic block size.
    ///
    /// # Errors
    /// A parameter c-blosc refuses.
    pub fn build(&self, element_size: usize) -> CodecResult<Blosc> {
        let typesize = self.typesize.and_then(|t| usize::try_from(t).ok()).unwrap_or(element_size);
        let shuffle =
            self.shuffle.unwrap_or(if typesize == 1 { BloscShuffle::Bitshuffle } else { BloscShuffle::Shuffle });
        Blosc::new(
            self.cname.unwrap_or(BloscCname::Zstd),
            self.clevel.unwrap_or(5),
            shuffle,
            typesize,
            self.blocksize.and_then(|b| usize::try_from(b).ok()).unwrap_or(0),
        )
    }
}

impl CodecConfig for BloscConfig {
    fn to_json(&self) -> Option<Value> {
        serde_json::to_value(self).ok()
    }

    fn build(&self, entering: &ChunkRepr) -> CodecResult<BuiltCodec> {
        let codec = BloscConfig::build(self, entering.data_type.size().unwrap_or(1))?;
        Ok(BuiltCodec::BytesToBytes(Box::new(codec)))
    }
}

/// Checks a numcodecs `blosc` configuration at `path` (`cname`, `clevel`,
/// `shuffle` -1..=2 where -1 is AUTOSHUFFLE, which TensorStore writes too,
/// `typesize` and `blocksize` as c-blosc's `int`s take them): the only
/// check; [`Blosc::from_numcodecs`] reads what passed it.
pub(crate) fn validate_numcodecs(config: &Map<String, Value>, path: &str) -> Result<()> {
    if let Some(v) = member(config, "cname") {
        enum_str(v, &join(path, "cname"), BLOSC_CNAMES)?;
    }
    check_int(config, path, "clevel", 0, 9)?;
    check_int(config, path, "shuffle", -1, 2)?;
    check_int(config, path, "typesize", 1, i64::from(u32::MAX))?;
    check_int(config, path, "blocksize", 0, i64::from(u32::MAX))
}

/// Header size (c-blosc's `BLOSC_MIN_HEADER_LENGTH`).
const HEADER: usize = 16;
/// Header flag: the data is stored uncompressed (`BLOSC_MEMCPYED`).
const FLAG_MEMCPYED: u8 = 0x02;
/// The largest buffer c-blosc 1.x handles (2^31 - 1 - 16).
const MAX_BUFFER: usize = BLOSC_MAX_BUFFERSIZE as usize;
const OVERHEAD: usize = BLOSC_MAX_OVERHEAD as usize;

/// c-blosc's largest item size (`BLOSC_MAX_TYPESIZE`); larger ones count as 1.
const MAX_TYPESIZE: usize = 255;

/// The largest block size c-blosc's `int32_t` holds.
const MAX_BLOCKSIZE: usize = i32::MAX as usize;

/// The `blosc` codec.
#[derive(Debug, Clone)]
pub struct Blosc {
    cname: BloscCname,
    clevel: u8,
    shuffle: BloscShuffle,
    typesize: usize,
    blocksize: usize,
}

impl Blosc {
    /// A codec compressing with `cname` at `clevel` (0..=9), shuffling
    /// `typesize`-byte items, with blocks of `blocksize` bytes (0 = chosen
    /// by c-blosc).
    ///
    /// # Errors
    /// `clevel` above 9 or `typesize` 0.
    pub fn new(
        cname: BloscCname,
        clevel: u8,
        shuffle: BloscShuffle,
        typesize: usize,
        blocksize: usize,
    ) -> CodecResult<Self> {
        if clevel > 9 {
            return Err(CodecError::new(NAME, format!("clevel must be 0..=9, got {clevel}")));
        }
        if typesize == 0 {
            return Err(CodecError::new(NAME, "typesize must be at least 1"));
        }
        // c-blosc keeps both in an `int32_t`: a typesize of 2^31 or more
        // wraps to zero or below and divides by zero (the process dies of
        // SIGFPE), a blocksize past i32::MAX turns negative. It treats a
        // typesize above 255 as 1 itself, and a blocksize of 0 as automatic:
        // the same here, before the values reach it (an identical stream for
        // every value that does not wrap).
        let typesize = if typesize > MAX_TYPESIZE { 1 } else { typesize };
        let blocksize = if blocksize > MAX_BLOCKSIZE { 0 } else { blocksize };
        Ok(Self { cname, clevel, shuffle, typesize, blocksize })
    }

    /// From a numcodecs configuration (defaults: `lz4`, clevel 5, shuffle 1,
    /// blocksize 0; `typesize` from the configuration or else the array's
    /// item size, as numcodecs takes it from the buffer it is given).
    pub(crate) fn from_numcodecs(cfg: &Config<'_>, element_size: usize) -> CodecResult<Self> {
        let cname = cfg.str("cname").and_then(BloscCname::parse).unwrap_or(BloscCname::Lz4);
        let typesize: usize = cfg.int("typesize", element_size.max(1));
        let shuffle = match cfg.int::<i8>("shuffle", 1) {
            0 => BloscShuffle::Noshuffle,
            1 => BloscShuffle::Shuffle,
            2 => BloscShuffle::Bitshuffle,
            // AUTOSHUFFLE, resolved as numcodecs does when it encodes.
            _ if typesize == 1 => BloscShuffle::Bitshuffle,
            _ => BloscShuffle::Shuffle,
        };
        Self::new(cname, cfg.int("clevel", 5), shuffle, typesize, cfg.int("blocksize", 0))
    }

    fn compressor(&self) -> &'static CStr {
        match self.cname {
            BloscCname::Blosclz => c"blosclz",
            BloscCname::Lz4 => c"lz4",
            BloscCname::Lz4hc => c"lz4hc",
            BloscCname::Snappy => c"snappy",
            BloscCname::Zlib => c"zlib",
            BloscCname::Zstd => c"zstd",
        }
    }
}

/// The header fields decoding relies on, read in Rust for error messages.
struct Header {
    flags: u8,
    nbytes: usize,
    blocksize: usize,
    cbytes: usize,
}

impl Header {
    fn read(bytes: &[u8]) -> Option<Self> {
        let word = |at: usize| {
            let w: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
            usize::try_from(u32::from_le_bytes(w)).ok()
        };
        Some(Self { flags: *bytes.get(2)?, nbytes: word(4)?, blocksize: word(8)?, cbytes: word(12)? })
    }
}

impl BytesToBytesCodec for Blosc {
    fn name(&self) -> &str {
        NAME
    }

    fn encoded_size(&self, _decoded: u64) -> Option<u64> {
        None
    }

    fn encode(&self, bytes: Vec<u8>) -> CodecResult<Vec<u8>> {
        if bytes.len() > MAX_BUFFER {
            return Err(CodecError::new(
                NAME,
                format!("input of {} bytes exceeds blosc's limit of {MAX_BUFFER}", bytes.len()),
            ));
        }
        let shuffle = match self.shuffle {
            BloscShuffle::Noshuffle => 0,
            BloscShuffle::Shuffle => 1,
            BloscShuffle::Bitshuffle => 2,
        };
        // c-blosc guarantees success with `nbytes + BLOSC_MAX_OVERHEAD`.
        let capacity = bytes.len() + OVERHEAD;
        let mut out: Vec<u8> = Vec::with_capacity(capacity);
        // SAFETY: `src` is valid for reads of `nbytes` = `bytes.len()` bytes;
        // `dest` is valid for writes of `destsize` = `capacity` bytes (the
        // Vec's spare capacity, which does not overlap `bytes`), and c-blosc
        // never writes past `destsize`. `compressor` is a NUL-terminated
        // static string. With one internal thread c-blosc spawns nothing and
        // keeps no pointer after returning.
        let written = unsafe {
            blosc_compress_ctx(
                i32::from(self.clevel),
                shuffle,
                self.typesize,
                bytes.len(),
                bytes.as_ptr().cast(),
                out.as_mut_ptr().cast(),
                capacity,
                self.compressor().as_ptr(),
                self.blocksize,
                1,
            )
        };
        let written = usize::try_from(written)
            .ok()
            .filter(|&n| (HEADER..=capacity).contains(&n))
            .ok_or_else(|| CodecError::new(NAME, format!("c-blosc failed to compress (code {written})")))?;
        // SAFETY: c-blosc returns the number of bytes it wrote at the start
        // of `dest` (header, block offsets and blocks, contiguous), checked
        // above to be within the capacity, so they are initialised.
        unsafe { out.set_len(written) };
        Ok(out)
    }

    fn decode(&self, bytes: Vec<u8>, max_decoded: usize) -> CodecResult<Vec<u8>> {
        let Some(header) = Header::read(&bytes).filter(|_| bytes.len() >= HEADER) else {
            return Err(CodecError::new(
                NAME,
                format!("input of {} bytes is shorter than the {HEADER}-byte header", bytes.len()),
            ));
        };
        if header.cbytes != bytes.len() {
            return Err(CodecError::new(
                NAME,
                format!("header claims {} compressed bytes, input has {}", header.cbytes, bytes.len()),
            ));
        }
        if header.nbytes > max_decoded {
            return Err(CodecError::new(
                NAME,
                format!("header claims {} decoded bytes, more than the expected {max_decoded}", header.nbytes),
            ));
        }
        if header.flags & FLAG_MEMCPYED != 0 && header.nbytes + HEADER != bytes.len() {
            return Err(CodecError::new(
                NAME,
                format!(
                    "uncompressed block of {} bytes needs {} input bytes, has {}",
                    header.nbytes,
                    header.nbytes + HEADER,
                    bytes.len()
                ),
            ));
        }
        // A compressed buffer stores a 4-byte offset per block, so its length
        // bounds the decoded size (c-blosc checks this too, but only after
        // the output is allocated).
        if header.flags & FLAG_MEMCPYED == 0 && header.nbytes > 0 {
            let blocks = header
                .nbytes
                .checked_div(header.blocksize)
                .map(|b| b + usize::from(header.nbytes % header.blocksize != 0));
            if blocks.is_none_or(|b| b > (bytes.len() - HEADER) / 4) {
                return Err(CodecError::new(
                    NAME,
                    format!(
                        "header claims {} decoded bytes in blocks of {}, more than {} input bytes can hold",
                        header.nbytes,
                        header.blocksize,
                        bytes.len()
                    ),
                ));
            }
        }
        let mut nbytes = 0usize;
        // SAFETY: `cbuffer` is valid for reads of `cbytes` = `bytes.len()`
        // bytes; c-blosc reads the 16-byte header only after checking
        // `cbytes >= 16`. `nbytes` is a valid, writable usize.
        let valid = unsafe { blosc_cbuffer_validate(bytes.as_ptr().cast(), bytes.len(), &raw mut nbytes) };
        if valid != 0 || nbytes != header.nbytes {
            return Err(CodecError::new(NAME, "invalid header (unknown format version or size out of range)"));
        }
        if nbytes == 0 {
            return Ok(Vec::new());
        }
        let mut out: Vec<u8> = Vec::with_capacity(nbytes);
        // SAFETY: `src` holds exactly the `cbytes` bytes its header claims
        // (checked by `blosc_cbuffer_validate` above), which is the bound
        // c-blosc checks every block offset and length against; `dest` is
        // valid for writes of `destsize` = `nbytes` bytes (spare capacity,
        // not overlapping `src`), and c-blosc never writes past `destsize`.
        // One internal thread: nothing outlives the call.
        let produced = unsafe { blosc_decompress_ctx(bytes.as_ptr().cast(), out.as_mut_ptr().cast(), nbytes, 1) };
        if usize::try_from(produced).ok() != Some(nbytes) {
            return Err(CodecError::new(NAME, format!("corrupt input (c-blosc returned {produced})")));
        }
        // SAFETY: c-blosc returned `nbytes`, the number of bytes it wrote:
        // every block fills its whole span of `dest` or the call fails.
        unsafe { out.set_len(nbytes) };
        Ok(out)
    }

    fn range_decode(&self) -> Option<crate::zarr::codec::RangeDecode> {
        Some(crate::zarr::codec::RangeDecode::Blocks)
    }

    /// Only the blocks `want` touches (c-blosc's `blosc_getitem`).
    fn decode_range(&self, bytes: &[u8], size: usize, want: std::ops::Range<usize>) -> Option<(usize, Vec<u8>)> {
        decode_blocks(bytes, size, want)
    }

    fn span_len(&self, bytes: &[u8], size: usize) -> Option<usize> {
        span_len(bytes, size).map(|(_, span)| span)
    }

    /// Block by block (c-blosc's `blosc_getitem`), see `decode_span`.
    fn decode_span(&self, bytes: &[u8], size: usize, index: usize, out: &mut Vec<u8>) -> Option<usize> {
        decode_span(bytes, size, index, out)
    }
}

/// The blosc format version `blosc_getitem` reads.
const FORMAT_VERSION: u8 = 2;

/// Header flag bit 3: c-blosc refuses a buffer with it set ("compressor
/// flags from the future").
const FLAG_FUTURE: u8 = 0x08;

/// The most of a chunk (numerator, denominator) the blocks a part touches
/// may cover for the part to be decoded alone.
const RANGE_MAX_BLOCKS: (usize, usize) = (3, 4);

/// What a buffer that passed [`checked`] holds: its item size (c-blosc's
/// `typesize`, at least 1) and block size (0 for a stored buffer).
struct Checked {
    typesize: usize,
    blocksize: usize,
}

/// The checks a whole decode makes, made before decoding any part of a
/// blosc buffer that should declare exactly `size` decoded bytes: `None`
/// for anything a whole decode would refuse, or an older format
/// (`blosc_getitem` reads version 2 only).
fn checked(bytes: &[u8], size: usize) -> Option<Checked> {
    let header = Header::read(bytes).filter(|_| bytes.len() >= HEADER)?;
    if header.cbytes != bytes.len() || header.nbytes != size || *bytes.first()? != FORMAT_VERSION {
        return None;
    }
    if header.flags & FLAG_MEMCPYED != 0 && header.nbytes + HEADER != bytes.len() {
        return None;
    }
    // Flags a whole decode refuses ("from the future"), refused here too.
    if header.flags & FLAG_FUTURE != 0 {
        return None;
    }
    let mut blocksize = 0;
    if header.flags & FLAG_MEMCPYED == 0 {
        let blocks = header.nbytes.checked_div(header.blocksize)? + usize::from(header.nbytes % header.blocksize != 0);
        if blocks > (bytes.len() - HEADER) / 4 {
            return None;
        }
        blocksize = header.blocksize;
    }
    let mut nbytes = 0usize;
    // SAFETY: as in `decode`: `cbuffer` is valid for reads of `bytes.len()`
    // bytes; `nbytes` is a valid, writable usize.
    let valid = unsafe { blosc_cbuffer_validate(bytes.as_ptr().cast(), bytes.len(), &raw mut nbytes) };
    if valid != 0 || nbytes != size {
        return None;
    }
    Some(Checked { typesize: usize::from(*bytes.get(3)?).max(1), blocksize })
}

/// Decodes bytes `start..end` (whole items of `typesize` bytes, within the
/// `size` a [`checked`] buffer declares) into `out` (cleared first):
/// `None` for a c-blosc error.
fn getitem(bytes: &[u8], typesize: usize, start: usize, end: usize, out: &mut Vec<u8>) -> Option<()> {
    let first = i32::try_from(start / typesize).ok()?;
    let items = i32::try_from((end - start) / typesize).ok()?;
    out.clear();
    out.reserve(end - start);
    // SAFETY: `blosc_cbuffer_validate` accepted `src` (its documented
    // precondition for `blosc_getitem`, checked by the caller through
    // `checked`): it holds exactly the `cbytes` bytes its header claims,
    // the bound c-blosc checks every block offset and length against.
    // `first` and `items` lie within the `nbytes` the header declares
    // (the caller's bounds), so c-blosc's own bounds checks (the paths that
    // print and leak) are never reached; `dest` is valid for writes of
    // `items * typesize` = `end - start` bytes (spare capacity, not
    // overlapping `src`), the most c-blosc writes. Nothing outlives the
    // call (no threads; its scratch buffer is freed before it returns).
    let produced = unsafe { blosc_src::blosc_getitem(bytes.as_ptr().cast(), first, items, out.as_mut_ptr().cast()) };
    if usize::try_from(produced).ok() != Some(end - start) {
        return None;
    }
    // SAFETY: c-blosc returned the number of bytes it wrote at the start
    // of `dest`, `end - start`.
    unsafe { out.set_len(end - start) };
    Some(())
}

/// Decoded bytes `want` (widened to whole items of the buffer's
/// `typesize`) of a blosc buffer that declares exactly `size` decoded
/// bytes, decoding only the blocks they lie in: `None` for anything the
/// whole decode would check and fail on (the same checks, made first), an
/// older format, or a c-blosc error, so the caller decodes it whole.
fn decode_blocks(bytes: &[u8], size: usize, want: std::ops::Range<usize>) -> Option<(usize, Vec<u8>)> {
    let Checked { typesize, blocksize } = checked(bytes, size)?;
    let start = want.start / typesize * typesize;
    let end = want.end.div_ceil(typesize).checked_mul(typesize)?;
    if start >= end || end > size {
        return None;
    }
    // c-blosc decodes every block the part touches whole (into scratch of
    // twice the block size): when those blocks are most of the chunk (a
    // chunk of one block, say), the whole decode costs no more.
    if blocksize > 0 {
        let bs = blocksize;
        let touched = ((end - 1).checked_div(bs)? - start.checked_div(bs)? + 1).checked_mul(bs)?;
        if touched.checked_mul(RANGE_MAX_BLOCKS.1)? > size.checked_mul(RANGE_MAX_BLOCKS.0)? {
            return None;
        }
    }
    let mut out = Vec::new();
    getitem(bytes, typesize, start, end, &mut out)?;
    Some((start, out))
}

/// About how many decoded bytes one span of `decode_span` holds (whole
/// blocks: more when a block is larger): small enough that a span, decoded
/// into scratch, is still in the core's cache when it is copied out.
/// (Tests: a few blocks, so small chunks decode in several spans.)
pub const SPAN_BYTES: usize = if cfg!(test) { 300 } else { 256 << 10 };

/// The length of the spans a blosc buffer that declares exactly `size`
/// decoded bytes decodes in ([`decode_span`]): whole blocks (a stored
/// buffer has none: whole items), about [`SPAN_BYTES`], at most `size`;
/// `None` for anything the whole decode would check and fail on (made
/// first), or an older format.
fn span_len(bytes: &[u8], size: usize) -> Option<(usize, usize)> {
    let Checked { typesize, blocksize } = checked(bytes, size)?;
    // c-blosc makes a block a multiple of its typesize.
    let unit = if blocksize > 0 { blocksize } else { typesize };
    if unit % typesize != 0 {
        return None;
    }
    Some((typesize, SPAN_BYTES.div_ceil(unit).checked_mul(unit)?.min(size).max(1)))
}

/// Decodes span `index` (of [`span_len`]'s length, back to back from the
/// start; the last one ends at `size`) of a blosc buffer that declares
/// exactly `size` decoded bytes into `out`, returning where it starts:
/// `None` past the end, for anything the whole decode would check and
/// fail on, an older format, or a c-blosc error in the span's blocks.
fn decode_span(bytes: &[u8], size: usize, index: usize, out: &mut Vec<u8>) -> Option<usize> {
    let (typesize, span) = span_len(bytes, size)?;
    let at = index.checked_mul(span).filter(|&at| at < size)?;
    let end = at.saturating_add(span).min(size);
    if (end - at) % typesize != 0 {
        return None;
    }
    getitem(bytes, typesize, at, end, out)?;
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{assert_hostile_inputs_fail_cleanly, counting_u32, hex, smooth_f32};
    use super::*;
    use proptest::prelude::*;

    // scripts/codec-fixtures.py (numcodecs 0.16.6), each of counting_u32():
    // Blosc(cname='lz4', clevel=5, shuffle=SHUFFLE), Blosc(cname='zstd',
    // clevel=5, shuffle=BITSHUFFLE), Blosc(cname='blosclz', clevel=9,
    // shuffle=NOSHUFFLE), Blosc(cname='zlib', clevel=1, shuffle=AUTOSHUFFLE).
    const BLOSC_LZ4_SHUFFLE: &str = "0201210400100000001000006d000000140000001f000000ff02000102030405060708090a0b0c0d0e0f101100ffffffda5010000102030e0000001f000100ffffffea5000000000000e0000001f000100ffffffea5000000000000e0000001f000100ffffffea500000000000";
    const BLOSC_ZSTD_BITSHUFFLE: &str = "0201940400100000001000008e000000140000007600000028b52ffd60000f6503005405aaaa5455a9aa5255a5aa4a5595aa2a5555cccc989931336366c6cc8c991933336666f0f0e0e1c1c38387070f0f1e1e3c3c787800ff00fe01fc03f807f00fe01fc03f807f00000100020004000800100020004000800620b0e3017cf5c196ae2c5d997465a52ba3542e01";
    const BLOSC_BLOSCLZ_NOSHUFFLE: &str = "0201000400100000001000005701000014000000500000003f00000000010000000200000003000000040000000500000006000000070000001f08000000090000000a0000000b0000000c0000000d0000000e0000000f0000000110008000e0ffffffb0430100004b0000003f01000000020000000300000004000000050000000600000007000000080000001d090000000a0000000b0000000c0000000d0000000e0000000f00000010008000e0ffffffb4430100004c0000003f0200000003000000040000000500000006000000070000000800000009000000190a0000000b0000000c0000000d0000000e0000000f000000100080000301000000e0ffffffb4430100004c0000003f030000000400000005000000060000000700000008000000090000000a000000150b0000000c0000000d0000000e0000000f00000010008000070100000002000000e0ffffffb443010000";
    const BLOSC_ZLIB_AUTOSHUFFLE: &str = "02016104001000000010000081000000140000002400000078016360646266616563e7e0e4e2e6e1e5e317601815180d8fd1e43052720300b7cb1fe713000000780163601805a321301a02233504000400000113000000780163601805a321301a02233504000400000113000000780163601805a321301a022335040004000001";

    const CNAMES: [BloscCname; 6] = [
        BloscCname::Blosclz,
        BloscCname::Lz4,
        BloscCname::Lz4hc,
        BloscCname::Snappy,
        BloscCname::Zlib,
        BloscCname::Zstd,
    ];
    const SHUFFLES: [BloscShuffle; 3] = [BloscShuffle::Noshuffle, BloscShuffle::Shuffle, BloscShuffle::Bitshuffle];

    fn lz4() -> Blosc {
        Blosc::new(BloscCname::Lz4, 5, BloscShuffle::Shuffle, 4, 0).unwrap()
    }

    #[test]
    fn decodes_numcodecs_output() {
        let data = counting_u32();
        for fixture in [BLOSC_LZ4_SHUFFLE, BLOSC_ZSTD_BITSHUFFLE, BLOSC_BLOSCLZ_NOSHUFFLE, BLOSC_ZLIB_AUTOSHUFFLE] {
            assert_eq!(lz4().decode(hex(fixture), data.len()).unwrap(), data);
        }
        // Same c-blosc, same settings: the same bytes as numcodecs.
        assert_eq!(lz4().encode(data.clone()).unwrap(), hex(BLOSC_LZ4_SHUFFLE));
        let zstd = Blosc::new(BloscCname::Zstd, 5, BloscShuffle::Bitshuffle, 4, 0).unwrap();
        assert_eq!(zstd.encode(data).unwrap(), hex(BLOSC_ZSTD_BITSHUFFLE));
    }

    #[test]
    fn every_cname_and_shuffle_round_trips() {
        let data = smooth_f32(5000);
        for cname in CNAMES {
            for shuffle in SHUFFLES {
                for (typesize, blocksize) in
                    [(4, 0), (1, 0), (8, 4096), (300, 0), (1 << 31, 0), (1 << 32, 0), (4, 1 << 31), (4, usize::MAX)]
                {
                    let c = Blosc::new(cname, 5, shuffle, typesize, blocksize).unwrap();
                    let enc = c.encode(data.clone()).unwrap();
                    assert_eq!(c.decode(enc, data.len()).unwrap(), data, "{cname:?} {shuffle:?} {typesize}");
                }
            }
        }
        // clevel 0 stores (memcpy flag) and still round-trips; so does empty input.
        let c = Blosc::new(BloscCname::Lz4, 0, BloscShuffle::Noshuffle, 1, 0).unwrap();
        let enc = c.encode(data.clone()).unwrap();
        assert_eq!(enc.len(), data.len() + 16);
        assert_eq!(c.decode(enc, data.len()).unwrap(), data);
        assert_eq!(c.decode(c.encode(vec![]).unwrap(), 0).unwrap(), b"");
    }

    #[test]
    fn hostile_inputs() {
        let data = counting_u32();
        let c = lz4();
        for fixture in [BLOSC_LZ4_SHUFFLE, BLOSC_ZSTD_BITSHUFFLE, BLOSC_BLOSCLZ_NOSHUFFLE, BLOSC_ZLIB_AUTOSHUFFLE] {
            assert_hostile_inputs_fail_cleanly(&c, &data, &hex(fixture));
        }
        let enc = hex(BLOSC_LZ4_SHUFFLE);
        let e = c.decode(enc.clone(), data.len() - 1).unwrap_err();
        assert!(e.reason.contains("more than the expected"), "{e}");
        let e = c.decode(enc[..20].to_vec(), data.len()).unwrap_err();
        assert!(e.reason.contains("header claims"), "{e}");
        // Length-field lies, with the compressed size kept consistent so
        // c-blosc gets to see them.
        for (at, value) in [(4, 1u32 << 30), (4, 100), (8, 0), (8, u32::MAX), (16, u32::MAX), (16, 7)] {
            let mut lie = enc.clone();
            lie[at..at + 4].copy_from_slice(&value.to_le_bytes());
            assert!(c.decode(lie, 1 << 31).map_or(true, |out| out.len() <= 1 << 31));
        }
        // Memcpy flag set on a compressed buffer.
        let mut lie = enc.clone();
        lie[2] |= FLAG_MEMCPYED;
        assert!(c.decode(lie, data.len()).is_err());
        // Unknown format version, typesize 0, future flags.
        for (at, value) in [(0, 9u8), (3, 0), (2, 0x08)] {
            let mut lie = enc.clone();
            lie[at] = value;
            assert!(c.decode(lie, data.len()).is_err());
        }
        // Every header byte flipped, every way: errors or bounded output.
        for at in 0..HEADER {
            for v in 0..=255u8 {
                let mut lie = enc.clone();
                lie[at] = v;
                if let Ok(out) = c.decode(lie, 8192) {
                    assert!(out.len() <= 8192);
                }
            }
        }
    }

    #[test]
    fn spans_cover_the_value_back_to_back_and_a_damaged_span_fails() {
        let data = smooth_f32(5000);
        for (cname, blocksize, clevel) in
            [(BloscCname::Lz4, 256, 5), (BloscCname::Zstd, 200, 3), (BloscCname::Lz4, 0, 0)]
        {
            let c = Blosc::new(cname, clevel, BloscShuffle::Shuffle, 4, blocksize).unwrap();
            let enc = c.encode(data.clone()).unwrap();
            let mut got = Vec::new();
            let mut spans = 0;
            let mut out = Vec::new();
            let span = span_len(&enc, data.len()).unwrap().1;
            while let Some(at) = decode_span(&enc, data.len(), spans, &mut out) {
                assert_eq!((at, out.len()), (got.len(), span.min(data.len() - at)), "{cname:?}: spans back to back");
                got.extend_from_slice(&out);
                spans += 1;
            }
            assert_eq!(got, data, "{cname:?} {blocksize}");
            assert!(spans > 1, "{cname:?} {blocksize}: {spans} span(s)");
            // Another declared size, or a damaged last block (its offset
            // past the end): no spans at all, or some and then `None` (the
            // caller decodes it whole).
            assert!(span_len(&enc, data.len() - 4).is_none());
            assert!(decode_span(&enc, data.len() - 4, 0, &mut out).is_none());
            if clevel > 0 {
                let mut bad = enc.clone();
                let h = Header::read(&bad).unwrap();
                let last = HEADER + 4 * (h.nbytes.div_ceil(h.blocksize) - 1);
                let past = u32::try_from(bad.len()).unwrap();
                bad[last..last + 4].copy_from_slice(&past.to_le_bytes());
                let last = data.len().div_ceil(span) - 1;
                assert!(decode_span(&bad, data.len(), 0, &mut out).is_some(), "{cname:?}: the first span is sound");
                assert!(decode_span(&bad, data.len(), last, &mut out).is_none(), "{cname:?}");
                assert!(c.decode(bad, data.len()).is_err());
            }
        }
        // Empty: no span.
        let c = lz4();
        assert_eq!(decode_span(&c.encode(vec![]).unwrap(), 0, 0, &mut Vec::new()), None);
    }

    #[test]
    fn bomb_fails_fast() {
        let c = Blosc::new(BloscCname::Zstd, 9, BloscShuffle::Shuffle, 4, 0).unwrap();
        let bomb = c.encode(vec![0; 100 << 20]).unwrap();
        let e = c.decode(bomb, 1 << 20).unwrap_err();
        assert!(e.reason.contains("claims 104857600"), "{e}");
    }

    #[test]
    fn numcodecs_configuration() {
        let cfg = |v: serde_json::Value| v.as_object().unwrap().clone();
        let build = |v, size| {
            let map = cfg(v);
            Blosc::from_numcodecs(&Config { map: &map }, size).unwrap()
        };
        let b = build(serde_json::json!({"cname":"zstd","clevel":3,"shuffle":-1,"blocksize":0}), 1);
        assert_eq!((b.cname, b.clevel, b.shuffle, b.typesize), (BloscCname::Zstd, 3, BloscShuffle::Bitshuffle, 1));
        let b = build(serde_json::json!({"shuffle":-1}), 8);
        assert_eq!((b.cname, b.clevel, b.shuffle, b.typesize), (BloscCname::Lz4, 5, BloscShuffle::Shuffle, 8));
        let b = build(serde_json::json!({"shuffle":0,"typesize":2}), 8);
        assert_eq!((b.shuffle, b.typesize), (BloscShuffle::Noshuffle, 2));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn round_trips(
            data in proptest::collection::vec(any::<u8>(), 0..8192),
            cname in 0usize..6, shuffle in 0usize..3, clevel in 0u8..=9,
            typesize in 1usize..=16, blocksize in prop_oneof![Just(0usize), 1usize..4096],
        ) {
            let c = Blosc::new(CNAMES[cname], clevel, SHUFFLES[shuffle], typesize, blocksize).unwrap();
            let enc = c.encode(data.clone()).unwrap();
            prop_assert_eq!(c.decode(enc, data.len()).unwrap(), data);
        }

        #[test]
        fn garbage_with_a_consistent_header_never_panics(mut junk in proptest::collection::vec(any::<u8>(), 16..2048), nbytes in 0u32..65536) {
            // Make the header pass the size checks so c-blosc parses the rest.
            let len = u32::try_from(junk.len()).unwrap();
            junk[0] = 2;
            junk[4..8].copy_from_slice(&nbytes.to_le_bytes());
            junk[12..16].copy_from_slice(&len.to_le_bytes());
            if let Ok(out) = lz4().decode(junk, 65536) {
                prop_assert_eq!(out.len(), nbytes as usize);
            }
        }
    }

    use crate::zarr::codec::registry::parse_for_test as chain;

    #[test]
    fn configuration() {
        use crate::zarr::data_type::DataType as D;
        let entry = serde_json::json!({"name": "blosc", "configuration":
            {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}});
        let specs = chain(
            serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}}, entry]),
            &D::Float32,
            &[4],
        )
        .unwrap();
        let c = specs[1].config::<BloscConfig>().expect("blosc");
        assert_eq!(c.cname, Some(BloscCname::Lz4));
        assert_eq!(serde_json::to_value(&specs[1]).unwrap(), entry);
        // Defaults: zstd, clevel 5, typesize from the element size, shuffle by typesize.
        let none = BloscConfig { cname: None, clevel: None, shuffle: None, typesize: None, blocksize: None };
        let b = none.build(8).unwrap();
        assert_eq!(
            (b.cname, b.clevel, b.shuffle, b.typesize, b.blocksize),
            (BloscCname::Zstd, 5, BloscShuffle::Shuffle, 8, 0)
        );
        assert_eq!(none.build(1).unwrap().shuffle, BloscShuffle::Bitshuffle);
        let e =
            chain(serde_json::json!(["bytes", {"name": "blosc", "configuration": {"cname": "lzw"}}]), &D::UInt8, &[4])
                .unwrap_err();
        assert_eq!(e.path, "codecs[1].configuration.cname");
        let e =
            chain(serde_json::json!(["bytes", {"name": "blosc", "configuration": {"typesize": 0}}]), &D::UInt8, &[4])
                .unwrap_err();
        assert_eq!(e.path, "codecs[1].configuration.typesize");
        for name in BLOSC_CNAMES {
            assert!(BloscCname::parse(name).is_some(), "{name}");
        }
    }
}
