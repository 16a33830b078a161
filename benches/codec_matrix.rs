//! Decode speed of every codec on the same real chunks numcodecs and
//! TensorStore decode in `bench/codecs.py`.
//!
//! `bench/codecs.py DIR` writes one 2 MiB chunk per case (blosc lz4 / zstd /
//! blosclz / zlib × no / byte / bit shuffle × 1, 2, 4, 8-byte items; zstd
//! levels 1, 3, 9; gzip, zlib, lz4, bz2, crc32c; no codec; big-endian
//! `bytes`; `order: "F"`, zarrd's transpose) with its `.zarray` and the
//! reference speeds into `DIR/manifest.json`. This bench builds each array
//! through the real v2 parser and times [`ArrayDescription::decode_chunk`]
//! (the whole chain the server runs: codec, byte order, layout) on a fresh
//! copy of the chunk per iteration, then prints a markdown table: median
//! MB/s of decoded bytes for zarrd, numcodecs and TensorStore, and the
//! ratios. `zarrd, 1 thread` is the same decode inside a one-thread rayon
//! pool (for a codec that splits work across the pool). Blosc cases also get
//! a `c-blosc` column: `blosc_decompress_ctx` with one thread called
//! directly on the same bytes (what zarrd's codec calls), so the difference
//! is the chain's own cost; gzip and zlib cases get libdeflate's one-shot
//! inflate in that column instead (the alternative to the codec's flate2).
//! `ZARRD_CODEC_ONLY=zarrd` (or `c-blosc`, `libdeflate`) times only that
//! decoder, for instruction counts under cachegrind.
//!
//! Run: `ZARRD_CODEC_DIR=DIR cargo bench --bench codec_matrix` (optional
//! `ZARRD_CODEC_FILTER=blosc_lz4` to run the cases whose name contains it).
//! Every case is first checked: zarrd's decoded bytes equal the C-order
//! little-endian data numcodecs produced (their CRC is in the manifest).

// The c-blosc column calls c-blosc directly, as the codec's fallback does.
#![allow(unsafe_code)]

use std::time::Instant;

use serde_json::Value;
use zarrd::zarr::array::ArrayDescription;
use zarrd::zarr::chunk::ChunkData;
use zarrd::zarr::metadata::ArrayMetadataV2;

/// Timed decodes per case (the median is reported); `ZARRD_CODEC_REPEAT` overrides.
fn repeat() -> usize {
    std::env::var("ZARRD_CODEC_REPEAT").ok().and_then(|r| r.parse().ok()).unwrap_or(15).max(1)
}

/// `ZARRD_CODEC_ONLY=zarrd`, `c-blosc` or `libdeflate`: time only that decoder (one
/// thread), for instruction counts under `valgrind --tool=cachegrind`.
fn only() -> Option<String> {
    std::env::var("ZARRD_CODEC_ONLY").ok()
}

/// Median MB/s of `decoded` bytes over [`repeat`] runs of `f` on a fresh copy of `chunk`.
fn median_mbps<T>(chunk: &[u8], decoded: u64, mut f: impl FnMut(Vec<u8>) -> T) -> f64 {
    let mut times = Vec::with_capacity(repeat());
    for _ in 0..repeat() {
        let input = chunk.to_vec();
        let t = Instant::now();
        let out = f(input);
        times.push(t.elapsed().as_secs_f64());
        drop(out);
    }
    times.sort_by(f64::total_cmp);
    #[allow(clippy::cast_precision_loss)]
    let mbps = decoded as f64 / times[times.len() / 2] / 1e6;
    mbps
}

/// libdeflate's one-shot inflate into an exact-size buffer: the fastest
/// DEFLATE decoder we know of, measured against the codec's own (flate2).
fn libdeflate(name: &str, enc: &[u8], n: usize) -> Vec<u8> {
    let mut out = vec![0; n];
    let mut d = libdeflater::Decompressor::new();
    let got =
        if name.starts_with("gzip") { d.gzip_decompress(enc, &mut out) } else { d.zlib_decompress(enc, &mut out) };
    assert_eq!(got, Ok(n));
    out
}

/// c-blosc alone (one thread), as the codec calls it.
fn c_blosc(enc: &[u8], n: usize) -> Vec<u8> {
    let mut out: Vec<u8> = Vec::with_capacity(n);
    // SAFETY: `enc` is a whole, valid blosc buffer (zarrd decoded it and
    // checked the result); dest is writable for n bytes.
    let got = unsafe { blosc_src::blosc_decompress_ctx(enc.as_ptr().cast(), out.as_mut_ptr().cast(), n, 1) };
    assert_eq!(usize::try_from(got).ok(), Some(n));
    // SAFETY: c-blosc wrote n bytes.
    unsafe { out.set_len(n) };
    out
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is taken too.
    let filter =
        std::env::var("ZARRD_CODEC_FILTER").ok().or_else(|| std::env::args().skip(1).find(|a| !a.starts_with('-')));
    let dir = std::env::var("ZARRD_CODEC_DIR").unwrap_or_else(|_| "target/codec-bench".into());
    let manifest: Value = match std::fs::read(format!("{dir}/manifest.json")) {
        Ok(bytes) => serde_json::from_slice(&bytes).expect("manifest.json"),
        Err(e) => panic!("{dir}/manifest.json: {e} (run bench/codecs.py {dir} first)"),
    };
    println!(
        "numcodecs {}, TensorStore {}; MB/s of decoded bytes, median of {}",
        manifest["numcodecs"],
        manifest["tensorstore"],
        repeat()
    );
    println!();
    println!(
        "| case | stored | zarrd | zarrd, 1 thread | c-blosc / libdeflate | numcodecs | TensorStore | zarrd / numcodecs | zarrd / TensorStore |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("a one-thread pool");
    for case in manifest["cases"].as_array().expect("cases") {
        let name = case["name"].as_str().expect("name");
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let meta = ArrayMetadataV2::from_slice(&serde_json::to_vec(&case["zarray"]).unwrap()).expect(name);
        let desc = ArrayDescription::from_v2(&meta, serde_json::Map::new()).expect(name);
        let chunk = std::fs::read(format!("{dir}/{name}.bin")).expect(name);
        let decoded = case["decoded_bytes"].as_u64().unwrap();
        let out = match desc.decode_chunk(chunk.clone()).expect(name) {
            ChunkData::Fixed(b) => b,
            ChunkData::Variable(_) => unreachable!("integer arrays decode to fixed-size elements"),
        };
        assert_eq!(out.len() as u64, decoded, "{name}");
        assert_eq!(u64::from(crc32c::crc32c(&out)), case["crc32c"].as_u64().unwrap(), "{name}: decoded bytes differ");
        if let Some(which) = only() {
            let n = usize::try_from(decoded).unwrap();
            let mbps = match which.as_str() {
                "zarrd" => {
                    one_thread.install(|| median_mbps(&chunk, decoded, |input| desc.decode_chunk(input).unwrap()))
                }
                "c-blosc" if name.starts_with("blosc_") => median_mbps(&chunk, decoded, |input| c_blosc(&input, n)),
                "libdeflate" if name.starts_with("gzip") || name.starts_with("zlib") => {
                    median_mbps(&chunk, decoded, |input| libdeflate(name, &input, n))
                }
                _ => continue,
            };
            println!("| {name} | {which} | {mbps:.0} |");
            continue;
        }
        let zarrd = median_mbps(&chunk, decoded, |input| desc.decode_chunk(input).unwrap());
        // The same on a one-thread pool: blosc's blocks decoded one after another.
        let serial = one_thread.install(|| median_mbps(&chunk, decoded, |input| desc.decode_chunk(input).unwrap()));
        let n = usize::try_from(decoded).unwrap();
        let c = if name.starts_with("blosc_") {
            assert_eq!(c_blosc(&chunk, n).len(), n);
            Some(median_mbps(&chunk, decoded, |input| c_blosc(&input, n)))
        } else if name.starts_with("gzip") || name.starts_with("zlib") {
            assert_eq!(libdeflate(name, &chunk, n), out, "{name}: libdeflate");
            Some(median_mbps(&chunk, decoded, |input| libdeflate(name, &input, n)))
        } else {
            None
        };
        let reference = |key: &str| case[key].as_f64();
        let ratio = |r: Option<f64>| r.map_or("–".to_owned(), |r| format!("{:.2}", zarrd / r));
        let mbps = |r: Option<f64>| r.map_or("–".to_owned(), |r| format!("{r:.0}"));
        println!(
            "| {name} | {} | {zarrd:.0} | {serial:.0} | {} | {} | {} | {} | {} |",
            case["stored_bytes"],
            mbps(c),
            mbps(reference("numcodecs_mbps")),
            mbps(reference("tensorstore_mbps")),
            ratio(reference("numcodecs_mbps")),
            ratio(reference("tensorstore_mbps")),
        );
    }
}
