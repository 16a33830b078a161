//! Stored chunk bytes through the codec chains of a fixed set of arrays
//! (`zarrd_fuzz::codec_cases`: v3 gzip, zstd, blosc, crc32c, transpose,
//! vlen; v2 blosc, zlib, gzip, lz4, bz2, zstd, delta, fixedscaleoffset,
//! object and structured dtypes).
//!
//! Input: the first byte picks the array, the rest is the stored chunk.
//! Decoding may fail; it must not panic, hang or allocate more than a chunk.
//! What decodes must be the chunk's size, and (lossless chains) encode and
//! decode back to itself.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use zarrd::zarr::chunk::ChunkData;
use zarrd_fuzz::{codec_cases, Case};

static CASES: LazyLock<Vec<Case>> = LazyLock::new(codec_cases);

fuzz_target!(|data: &[u8]| {
    let Some((&pick, stored)) = data.split_first() else { return };
    let case = &CASES[usize::from(pick) % CASES.len()];
    let desc = &case.desc;
    let Ok(decoded) = desc.decode_chunk(stored.to_vec()) else { return };
    let repr = desc.chunk_repr();
    match &decoded {
        ChunkData::Fixed(b) => assert_eq!(Some(b.len()), repr.num_bytes(), "{}: decoded size", case.name),
        ChunkData::Variable(items) => {
            assert_eq!(items.len() as u64, repr.num_elements(), "{}: decoded elements", case.name);
        }
    }
    if !case.lossless {
        return;
    }
    let Ok(encoded) = desc.encode_chunk(decoded.clone()) else { return };
    match desc.decode_chunk(encoded) {
        Ok(again) => assert!(again == decoded, "{}: decode(encode(x)) != x", case.name),
        Err(e) => panic!("{}: a re-encoded chunk does not decode: {e}", case.name),
    }
});
