//! Stored shard bytes through `sharding_indexed`, whole and partial, for a
//! fixed set of sharded arrays (`zarrd_fuzz::shard_cases`: index at the start
//! and at the end, with and without a crc32c, nested sharding, strings).
//!
//! Input: byte 0 picks the array (low bits) and whether to rewrite the
//! index's crc32c so the fuzzer gets past the checksum (bit 7); byte 1 picks
//! an inner chunk; the rest is the shard, stored under every chunk key.
//!
//! What must hold, beyond "no panic":
//! - when the whole shard decodes, a region read of one inner chunk (the
//!   partial path: index by range, then that chunk's bytes) succeeds and
//!   equals that part of the whole shard; reads across shards and of the
//!   edge shard then succeed too;
//! - when the shard's index is valid, replacing one inner chunk
//!   (`merge_shard`) yields a shard whose index is valid and whose other
//!   inner chunks are byte for byte the ones stored before.
#![no_main]

use std::sync::LazyLock;

use bytes::Bytes;
use futures::executor::block_on;
use libfuzzer_sys::fuzz_target;
use zarrd::zarr::chunk::ChunkData;
use zarrd::zarr::metadata::codec::IndexLocation;
use zarrd::zarr::region::{read_region_with, RegionOptions};
use zarrd::zarr::subset::{copy_region, ArraySubset};
use zarrd_fuzz::{shard_cases, SameEverywhere, ShardCase};

static CASES: LazyLock<Vec<ShardCase>> = LazyLock::new(shard_cases);

fuzz_target!(|data: &[u8]| {
    let [flags, pick, shard @ ..] = data else { return };
    let case = &CASES[usize::from(flags & 0x7f) % CASES.len()];
    let desc = &case.desc;
    let sharding = desc.sharding.as_deref().expect("a sharded array");
    let mut shard = shard.to_vec();
    if flags & 0x80 != 0 && case.crc_index {
        fix_index_crc(&mut shard, sharding.index_size(), sharding.index_location());
    }

    // The whole shard, as a plain chunk read does it.
    let whole = desc.decode_chunk(shard.clone());

    // The index of a whole stored shard, its inner chunks one by one, and a
    // merge replacing one of them.
    let cps = sharding.chunks_per_shard().to_vec();
    let n_inner: u64 = cps.iter().product();
    let inner = unravel(u64::from(*pick) % n_inner, &cps);
    if let Ok(index) = sharding.shard_index(&shard) {
        #[allow(clippy::cast_possible_truncation)] // shard_index checked ranges against the shard
        for (coords, r) in index.stored() {
            let _ = sharding.decode_inner_chunk(shard[r.start as usize..r.end as usize].to_vec(), &coords);
        }
        let merged = sharding.merge_shard(Some((&shard, &index)), vec![(inner.clone(), None)]);
        if let Some(merged) = merged.expect("merging into a valid shard") {
            let new_index = sharding.shard_index(&merged).expect("a merged shard has a valid index");
            assert_eq!(new_index.inner_range(&inner), None, "the replaced inner chunk is gone");
            #[allow(clippy::cast_possible_truncation)]
            for (coords, r) in index.stored().filter(|(c, _)| *c != inner) {
                let n = new_index.inner_range(&coords).expect("kept inner chunk");
                assert_eq!(
                    &merged[n.start as usize..n.end as usize],
                    &shard[r.start as usize..r.end as usize],
                    "inner chunk {coords:?} changed in the merge"
                );
            }
        }
    }

    // Region reads: one inner chunk of shard [0, 0] (partial path), a box
    // across four shards, and a corner of the edge shard.
    let source = SameEverywhere(Bytes::from(shard));
    let options = RegionOptions::default();
    let inner_shape = sharding.inner_chunk_shape();
    let start: Vec<u64> = inner.iter().zip(inner_shape).map(|(c, s)| c * s).collect();
    let one = ArraySubset::new(start, inner_shape.to_vec()).expect("region");
    let partial = block_on(read_region_with(desc, &source, &one, &options));
    let across = block_on(read_region_with(desc, &source, &sub(&[3, 5], &[2, 2]), &options));
    let edge = block_on(read_region_with(desc, &source, &sub(&[9, 8], &[1, 1]), &options));
    if let Ok(whole) = whole {
        let partial = partial.expect("one inner chunk of a shard that decodes whole");
        assert_eq!(partial, part_of(&whole, &desc.chunk_shape, &one, desc.data_type.size()), "partial read");
        across.expect("a region across shards that decode whole");
        edge.expect("a corner of an edge shard that decodes whole");
    }
});

fn sub(start: &[u64], shape: &[u64]) -> ArraySubset {
    ArraySubset::new(start.to_vec(), shape.to_vec()).expect("region")
}

/// `region` of a decoded shard, as its own chunk.
fn part_of(shard: &ChunkData, shard_shape: &[u64], region: &ArraySubset, size: Option<usize>) -> ChunkData {
    let n = usize::try_from(region.num_elements()).expect("small");
    let origin = vec![0; region.rank()];
    match (shard, size) {
        (ChunkData::Fixed(src), Some(size)) => {
            let mut dst = vec![0u8; n * size];
            copy_region(src, shard_shape, region, &mut dst, region.shape(), &origin, size).expect("copy");
            ChunkData::Fixed(dst)
        }
        (ChunkData::Variable(src), None) => {
            let mut dst = vec![Vec::new(); n];
            copy_region(src, shard_shape, region, &mut dst, region.shape(), &origin, 1).expect("copy");
            ChunkData::Variable(dst)
        }
        _ => panic!("a shard decoded to the wrong kind of elements"),
    }
}

/// Rewrites the crc32c at the end of the (outer) index so it matches.
fn fix_index_crc(shard: &mut [u8], index_size: u64, location: IndexLocation) {
    let Ok(size) = usize::try_from(index_size) else { return };
    if shard.len() < size || size < 4 {
        return;
    }
    let index = match location {
        IndexLocation::Start => &mut shard[..size],
        IndexLocation::End => {
            let at = shard.len() - size;
            &mut shard[at..]
        }
    };
    let (body, crc) = index.split_at_mut(size - 4);
    crc.copy_from_slice(&crc32c::crc32c(body).to_le_bytes());
}

fn unravel(mut lin: u64, shape: &[u64]) -> Vec<u64> {
    let mut out = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        out[d] = lin % shape[d];
        lin /= shape[d];
    }
    out
}
