//! The codec pipeline (spec: v3 core §"Codecs"): zero or more array→array
//! codecs, exactly one array→bytes codec, zero or more bytes→bytes codecs.
//!
//! A codec is built once per array from its metadata (validation happens
//! then, not per chunk) and is then a pure function of its input: `Send +
//! Sync`, no interior state, safe to call from many threads.
//!
//! Decoders never trust stored bytes: every `decode` is told the size its
//! output may have (`max_decoded`) and fails rather than exceed it, so a
//! decompression bomb costs at most one chunk's worth of memory.

pub mod array_to_array;
pub mod array_to_bytes;
pub mod budget;
pub mod bytes_to_bytes;
pub mod numcodecs;
pub mod pieces;
pub mod registry;

use std::fmt::Debug;

use super::chunk::{ChunkData, ChunkRepr};

/// Why a codec failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{codec}: {reason}")]
pub struct CodecError {
    /// The codec's name (`zstd`, `numcodecs.lz4`, `sharding_indexed`, ...).
    pub codec: String,
    /// What was wrong, for a person.
    pub reason: String,
}

impl CodecError {
    /// An error of `codec`.
    #[must_use]
    pub fn new(codec: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { codec: codec.into(), reason: reason.into() }
    }
}

/// A codec result.
pub type CodecResult<T> = Result<T, CodecError>;

/// An array→array codec (transpose, v2 filters such as delta).
pub trait ArrayToArrayCodec: Send + Sync + Debug {
    /// The codec's name, for errors.
    fn name(&self) -> &str;
    /// The representation this codec encodes `decoded` into.
    ///
    /// # Errors
    /// When `decoded` is not supported (wrong rank or data type).
    fn encoded_repr(&self, decoded: &ChunkRepr) -> CodecResult<ChunkRepr>;
    /// Encodes a chunk of representation `decoded`.
    ///
    /// # Errors
    /// When the data does not match `decoded`.
    fn encode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<ChunkData>;
    /// Decodes into representation `decoded`.
    ///
    /// # Errors
    /// When the data does not match the encoded representation.
    fn decode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<ChunkData>;
}

/// An array→bytes codec (`bytes`, `vlen-utf8`, `vlen-bytes`, `sharding_indexed`).
pub trait ArrayToBytesCodec: Send + Sync + Debug {
    /// The codec's name, for errors.
    fn name(&self) -> &str;
    /// The exact encoded size for `decoded`, when it does not depend on the values.
    fn encoded_size(&self, decoded: &ChunkRepr) -> Option<u64>;
    /// The most bytes a valid encoding of a chunk of `decoded` can take
    /// (the default: [`encoded_size`](Self::encoded_size)); `None` when
    /// the values decide (variable-length data).
    fn max_encoded_size(&self, decoded: &ChunkRepr) -> Option<u64> {
        self.encoded_size(decoded)
    }
    /// Encodes a chunk.
    ///
    /// # Errors
    /// When the data does not match `decoded`.
    fn encode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<Vec<u8>>;
    /// Decodes stored bytes into a chunk of representation `decoded`.
    ///
    /// # Errors
    /// When the bytes are not a valid encoding of such a chunk (wrong size,
    /// truncated, corrupt).
    fn decode(&self, bytes: Vec<u8>, decoded: &ChunkRepr) -> CodecResult<ChunkData>;
    /// When the stored bytes of a chunk of representation `decoded` are its
    /// decoded elements themselves (C order, packed), each group of the
    /// answered number of bytes reversed (1: none; a big-endian `bytes`
    /// codec: the swap unit): a reader may then read any part of a chunk by
    /// byte ranges and decode it in place ([`byte_layout_decode`]). `None`
    /// (the default) for every codec that changes more than byte order.
    fn byte_layout(&self, decoded: &ChunkRepr) -> Option<usize> {
        let _ = decoded;
        None
    }
    /// How many chunks a chunk of `decoded` is decoded as: 1, or for a
    /// shard its inner chunks times what each of them is decoded as
    /// (nested shards): what the limits on inner chunks count.
    fn units_per_chunk(&self, decoded: &ChunkRepr) -> u64 {
        let _ = decoded;
        1
    }
}

/// Decodes, in place, elements read by byte ranges from a chunk whose
/// [`ArrayToBytesCodec::byte_layout`] is `unit`: reverses every `unit`-byte
/// group of `bytes` (whole elements).
pub fn byte_layout_decode(bytes: &mut [u8], unit: usize) {
    if unit > 1 {
        array_to_bytes::bytes::swap_units(bytes, unit);
    }
}

/// A bytes→bytes codec (compressors, checksums).
pub trait BytesToBytesCodec: Send + Sync + Debug {
    /// The codec's name, for errors.
    fn name(&self) -> &str;
    /// The exact encoded size for a decoded size, when it does not depend on
    /// the values (`crc32c`: +4; compressors: `None`).
    fn encoded_size(&self, decoded: u64) -> Option<u64>;
    /// Encodes.
    ///
    /// # Errors
    /// A library failure.
    fn encode(&self, bytes: Vec<u8>) -> CodecResult<Vec<u8>>;
    /// The most bytes a valid encoding of `decoded` bytes can take (the
    /// codec's worst case): what a decoder of an earlier stage may be
    /// asked to produce when the exact size is not known. The default
    /// allows any compressor's expansion of incompressible data (deflate,
    /// zstd, lz4, bzip2 and blosc all stay far below an eighth plus 64 KiB;
    /// deflate in fixed Huffman blocks, which hardware encoders emit, adds
    /// up to an eighth). A chain compounds it stage by stage, up to
    /// [`CodecChain::stage_limit`].
    fn max_encoded_size(&self, decoded: u64) -> u64 {
        self.encoded_size(decoded).unwrap_or_else(|| decoded.saturating_add(decoded / 8).saturating_add(64 * 1024))
    }
    /// Decodes, producing at most `max_decoded` bytes: more is an error
    /// (never an allocation of the claimed size).
    ///
    /// # Errors
    /// Corrupt, truncated or oversized input, or a checksum mismatch.
    fn decode(&self, bytes: Vec<u8>, max_decoded: usize) -> CodecResult<Vec<u8>>;
    /// How [`decode_range`](Self::decode_range) decodes less than the
    /// whole value (the default: `None`, it never does).
    fn range_decode(&self) -> Option<RangeDecode> {
        None
    }
    /// Decodes only what covers the bytes `want` of a value whose whole
    /// decoding is exactly `size` bytes: `Some((at, bytes))`, decoded bytes
    /// `at..at + bytes.len()` of the value (covering `want`, within
    /// `size`), equal to that part of [`decode`](Self::decode)'s output.
    /// `None` (the default; and for anything doubtful seen before or
    /// while decoding the part: a declared size other than `size`, a frame
    /// with a checksum it would not verify, corrupt or truncated input
    /// within the part): decode the value whole, which reports the error
    /// exactly as a whole read does. Damage after the part is not seen: a
    /// value that a whole decode reports corrupt may still give its part
    /// (the bytes it decodes to there). Never allocates more than about
    /// `want`'s end.
    fn decode_range(&self, bytes: &[u8], size: usize, want: std::ops::Range<usize>) -> Option<(usize, Vec<u8>)> {
        let _ = (bytes, size, want);
        None
    }
    /// The length of the spans [`decode_span`](Self::decode_span) decodes
    /// a value that should decode to exactly `size` bytes in (`None`, the
    /// default, and for anything a whole decode would refuse: it is decoded
    /// whole).
    fn span_len(&self, bytes: &[u8], size: usize) -> Option<usize> {
        let _ = (bytes, size);
        None
    }
    /// Decodes span `index` of the value (spans of
    /// [`span_len`](Self::span_len), back to back from the start, the last
    /// ending at `size`) into `out`, returning where it starts: equal to
    /// that part of [`decode`](Self::decode)'s output, so a caller can
    /// decode a value in pieces that stay in the core's cache, in any order
    /// or on several threads. Every span of a value together checks what
    /// the whole decode checks, or one of them answers `None`. `None` (the
    /// default; past the end; and for anything doubtful in the span):
    /// decode the value whole, which reports the error exactly as a whole
    /// read does (spans already decoded are then decoded again: time, not
    /// bytes).
    fn decode_span(&self, bytes: &[u8], size: usize, index: usize, out: &mut Vec<u8>) -> Option<usize> {
        let _ = (bytes, size, index, out);
        None
    }
    /// The format [`pieces`] decodes this codec's output in, piece by
    /// piece; `None` (the default): decoded whole only.
    fn piece_format(&self) -> Option<pieces::PieceFormat> {
        None
    }
}

/// How a compressor decodes part of a value
/// ([`BytesToBytesCodec::decode_range`]), which says what a part costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeDecode {
    /// In order from the start, stopping after the range (zstd): a part
    /// costs about its end.
    Prefix,
    /// Only the blocks the range lies in (blosc): a part costs about its
    /// length.
    Blocks,
}

/// The most bytes a bytes→bytes decoder may produce when the size it should
/// produce is not known in advance (variable-length data types).
pub const DEFAULT_VARIABLE_DECODE_CAP: usize = 256 * 1024 * 1024;

/// A whole codec list, itself an array→bytes codec (so a shard's inner
/// chunks use the same type).
#[derive(Debug)]
pub struct CodecChain {
    array_to_array: Vec<Box<dyn ArrayToArrayCodec>>,
    array_to_bytes: Box<dyn ArrayToBytesCodec>,
    bytes_to_bytes: Vec<Box<dyn BytesToBytesCodec>>,
    variable_decode_cap: usize,
}

impl CodecChain {
    /// A chain of prepared codecs.
    #[must_use]
    pub fn new(
        array_to_array: Vec<Box<dyn ArrayToArrayCodec>>,
        array_to_bytes: Box<dyn ArrayToBytesCodec>,
        bytes_to_bytes: Vec<Box<dyn BytesToBytesCodec>>,
    ) -> Self {
        Self { array_to_array, array_to_bytes, bytes_to_bytes, variable_decode_cap: DEFAULT_VARIABLE_DECODE_CAP }
    }

    /// Sets the decode cap for variable-length data.
    #[must_use]
    pub fn with_variable_decode_cap(mut self, cap: usize) -> Self {
        self.variable_decode_cap = cap;
        self
    }

    /// The representations entering each array→array codec, and the one
    /// entering the array→bytes codec (last).
    fn reprs(&self, decoded: &ChunkRepr) -> CodecResult<Vec<ChunkRepr>> {
        let mut reprs = vec![decoded.clone()];
        for codec in &self.array_to_array {
            let next = codec.encoded_repr(reprs.last().expect("non-empty"))?;
            reprs.push(next);
        }
        Ok(reprs)
    }

    /// The most bytes each bytes→bytes codec may decode to (index 0: what
    /// the array→bytes codec reads): the exact size where known, else the
    /// worst-case encoding of the previous stage's bound, else (variable
    /// length data) the variable decode cap. So a chain such as
    /// gzip→gzip caps every stage near the chunk's size.
    fn decode_caps(&self, a2b_input: &ChunkRepr) -> Vec<usize> {
        let first = self.array_to_bytes.encoded_size(a2b_input);
        let mut bound = first;
        let mut caps = Vec::with_capacity(self.bytes_to_bytes.len());
        for codec in &self.bytes_to_bytes {
            caps.push(bound.and_then(|b| usize::try_from(b).ok()).unwrap_or(self.variable_decode_cap));
            bound = bound.zip(first).map(|(b, f)| codec.max_encoded_size(b).min(Self::stage_limit(f)));
        }
        caps
    }

    /// The most any stage of a chain may decode to, or a chunk be stored
    /// as, for a chunk whose array→bytes encoding takes `first` bytes:
    /// twice that plus 1 MiB. Worst cases compound stage by stage (five
    /// deflate stages allow 1.8 times), and chains of more stages than any
    /// real array stacks (at most [`MAX_CHAIN_CODECS`] codecs) would
    /// otherwise let a small chunk's outermost decoder inflate to gigabytes.
    ///
    /// [`MAX_CHAIN_CODECS`]: crate::zarr::metadata::codec::MAX_CHAIN_CODECS
    fn stage_limit(first: u64) -> u64 {
        first.saturating_mul(2).saturating_add(1 << 20)
    }

    /// The most bytes a stored chunk of `decoded` can take: the array→bytes
    /// codec's most (for variable-length data, the variable decode cap its
    /// decoder reads at most), then every bytes→bytes codec's worst case.
    /// A reader refuses a stored value larger than this before reading it
    /// (a chunk file of gigabytes behind a 100-byte chunk is damage, never
    /// an allocation); `u64::MAX` when the chain cannot say (its
    /// array→array codecs refuse `decoded`, which decoding reports).
    #[must_use]
    pub fn max_stored_size(&self, decoded: &ChunkRepr) -> u64 {
        let Ok(reprs) = self.reprs(decoded) else { return u64::MAX };
        let a2b_input = reprs.last().expect("non-empty");
        let first = self.array_to_bytes.max_encoded_size(a2b_input).unwrap_or(self.variable_decode_cap as u64);
        let limit = Self::stage_limit(first);
        self.bytes_to_bytes.iter().fold(first, |bound, codec| codec.max_encoded_size(bound).min(limit))
    }

    /// The exact size of the bytes entering each bytes→bytes codec (index 0:
    /// what the array→bytes codec produces), where known.
    fn byte_sizes(&self, a2b_input: &ChunkRepr) -> Vec<Option<u64>> {
        let mut sizes = vec![self.array_to_bytes.encoded_size(a2b_input)];
        for codec in &self.bytes_to_bytes {
            let last = *sizes.last().expect("non-empty");
            sizes.push(last.and_then(|s| codec.encoded_size(s)));
        }
        sizes
    }
}

impl CodecChain {
    /// When a part of a chunk of representation `decoded` can be decoded
    /// alone ([`Self::decode_range`]): the chain is one compressor that
    /// decodes ranges ([`BytesToBytesCodec::range_decode`]) over a
    /// byte-layout array→bytes codec (no array→array codec, no checksum):
    /// the layout's swap unit and how the compressor decodes a part.
    #[must_use]
    pub fn range_layout(&self, decoded: &ChunkRepr) -> Option<(usize, RangeDecode)> {
        match &self.bytes_to_bytes[..] {
            [codec] if self.array_to_array.is_empty() => {
                let kind = codec.range_decode()?;
                Some((self.array_to_bytes.byte_layout(decoded)?, kind))
            }
            _ => None,
        }
    }

    /// Decodes only the part of a stored chunk that covers its decoded
    /// (byte-layout) bytes `want`, where [`Self::range_layout`] says it
    /// can: `Some((at, bytes))` as [`BytesToBytesCodec::decode_range`]
    /// (checked here to cover `want` within the chunk); `None`: decode the
    /// chunk whole (which reports any error exactly as a whole read does).
    #[must_use]
    pub fn decode_range(
        &self,
        bytes: &[u8],
        decoded: &ChunkRepr,
        want: std::ops::Range<usize>,
    ) -> Option<(usize, Vec<u8>)> {
        self.range_layout(decoded)?;
        let size = usize::try_from(self.array_to_bytes.encoded_size(decoded)?).ok()?;
        if want.start >= want.end || want.end > size {
            return None;
        }
        let [codec] = &self.bytes_to_bytes[..] else { return None };
        // The process-wide decode budget (see `codec::budget`), for what
        // the part may take.
        let _budget = budget::reserve(want.end as u64);
        let (at, part) = codec.decode_range(bytes, size, want.clone())?;
        (at <= want.start && at.checked_add(part.len()).is_some_and(|end| end >= want.end && end <= size))
            .then_some((at, part))
    }

    /// How many spans a stored chunk whose decoded elements are stored as
    /// they are (one compressor over a byte layout of swap unit 1, as
    /// [`Self::range_layout`] says) decodes in with
    /// [`Self::decode_span`]; `None`: decode it whole.
    #[must_use]
    pub fn span_count(&self, bytes: &[u8], decoded: &ChunkRepr) -> Option<usize> {
        self.range_layout(decoded).filter(|&(unit, _)| unit <= 1)?;
        let size = usize::try_from(self.array_to_bytes.encoded_size(decoded)?).ok()?;
        let [codec] = &self.bytes_to_bytes[..] else { return None };
        Some(size.div_ceil(codec.span_len(bytes, size)?))
    }

    /// Decodes span `index` of a stored chunk (see [`Self::span_count`])
    /// into `out` as [`BytesToBytesCodec::decode_span`], returning where it
    /// starts (checked here to lie within the chunk); `None`: decode the
    /// chunk whole (which reports any error exactly as a whole read does).
    pub fn decode_span(&self, bytes: &[u8], decoded: &ChunkRepr, index: usize, out: &mut Vec<u8>) -> Option<usize> {
        self.range_layout(decoded).filter(|&(unit, _)| unit <= 1)?;
        let size = usize::try_from(self.array_to_bytes.encoded_size(decoded)?).ok()?;
        let [codec] = &self.bytes_to_bytes[..] else { return None };
        // The process-wide decode budget (see `codec::budget`): a span and
        // the codec's scratch for it (blosc: three blocks, a span at least one).
        let span = codec.span_len(bytes, size)?;
        let _budget = budget::reserve(span.saturating_mul(4) as u64);
        let at = codec.decode_span(bytes, size, index, out)?;
        at.checked_add(out.len()).is_some_and(|end| end <= size).then_some(at)
    }
}

impl ArrayToBytesCodec for CodecChain {
    fn name(&self) -> &str {
        "codecs"
    }

    fn encoded_size(&self, decoded: &ChunkRepr) -> Option<u64> {
        let reprs = self.reprs(decoded).ok()?;
        *self.byte_sizes(reprs.last()?).last()?
    }

    /// Its array -> bytes codec's (a shard nested in a shard counts its
    /// inner chunks); an unusable representation counts as one.
    fn units_per_chunk(&self, decoded: &ChunkRepr) -> u64 {
        self.reprs(decoded).ok().and_then(|r| r.last().map(|r| self.array_to_bytes.units_per_chunk(r))).unwrap_or(1)
    }

    /// Nested in a shard: a chain's most is [`CodecChain::max_stored_size`].
    fn max_encoded_size(&self, decoded: &ChunkRepr) -> Option<u64> {
        Some(self.max_stored_size(decoded))
    }

    fn encode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<Vec<u8>> {
        let reprs = self.reprs(decoded)?;
        let mut data = data;
        for (codec, repr) in self.array_to_array.iter().zip(&reprs) {
            data = codec.encode(data, repr)?;
        }
        let mut bytes = self.array_to_bytes.encode(data, reprs.last().expect("non-empty"))?;
        for codec in &self.bytes_to_bytes {
            bytes = codec.encode(bytes)?;
        }
        Ok(bytes)
    }

    fn decode(&self, bytes: Vec<u8>, decoded: &ChunkRepr) -> CodecResult<ChunkData> {
        let reprs = self.reprs(decoded)?;
        let a2b_input = reprs.last().expect("non-empty");
        let caps = self.decode_caps(a2b_input);
        let mut bytes = bytes;
        for (codec, &max) in self.bytes_to_bytes.iter().zip(&caps).rev() {
            bytes = codec.decode(bytes, max)?;
        }
        if a2b_input.data_type.is_variable() {
            // Reserved at an estimate: the decompressed bytes say what the
            // elements take (their copies beside these bytes, a vector
            // each), which the decode budget counts before they are made.
            let items = a2b_input.num_elements().saturating_mul(std::mem::size_of::<Vec<u8>>() as u64);
            budget::grow((bytes.len() as u64).saturating_mul(2).saturating_add(items));
        }
        let mut data = self.array_to_bytes.decode(bytes, a2b_input)?;
        for (codec, repr) in self.array_to_array.iter().zip(&reprs).rev() {
            data = codec.decode(data, repr)?;
        }
        Ok(data)
    }

    /// The array→bytes codec's layout when it is the whole chain (no
    /// `transpose` or v2 `order: "F"`, no filters, no compressor, no
    /// checksum).
    fn byte_layout(&self, decoded: &ChunkRepr) -> Option<usize> {
        if !self.array_to_array.is_empty() || !self.bytes_to_bytes.is_empty() {
            return None;
        }
        self.array_to_bytes.byte_layout(decoded)
    }
}

pub mod build;
