//! Throughput of the codec pipeline against the libraries (or plain loops)
//! it wraps.
//!
//! Each case is a one-chunk float32 array (a 1 MiB `[512, 512]` and a 16 MiB
//! `[2048, 2048]` chunk of a smooth signal) whose `zarr.json` goes through
//! the real parser and [`ArrayDescription`], so `zarrd` times
//! [`ArrayDescription::decode_chunk`] / [`ArrayDescription::encode_chunk`]:
//! the whole codec chain the server runs. `direct` does the same work
//! without the engine: the library called as its documentation shows, or
//! for `bytes` and `transpose` a `memcpy`, a byte swap or a plain loop
//! permutation. The difference is the engine's overhead.
//!
//! Cases: `bytes_le` (decoding is a move of the stored buffer, so `zarrd`
//! beats the `memcpy` it is compared with), `bytes_be`, `transpose` (order
//! `[1, 0]`), `zstd`, `blosc_lz4`, `blosc_zstd`, `gzip`, and `sharded_zstd`
//! (`sharding_indexed`, 16 inner chunks of `bytes` + `zstd`, index `bytes` +
//! `crc32c` at the end).
//!
//! Both sides get a fresh copy of their input per iteration (made outside
//! the timing), since the codecs consume their input: a long-lived buffer
//! and a fresh one page and cache differently, and at 16 MiB that alone
//! showed up as a 30% difference. Throughput is in decoded bytes.
//!
//! Run: `cargo bench --bench codecs` (add a filter such as `decode/zstd` to
//! run a subset).
// The blosc baseline calls c-blosc directly, as the codec does.
#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use serde_json::{json, Value};
use zarrd::zarr::array::ArrayDescription;
use zarrd::zarr::chunk::ChunkData;
use zarrd::zarr::metadata::NodeMetadataV3;

const GZIP_LEVEL: u32 = 5;
const ZSTD_LEVEL: i32 = 3;
const BLOSC_CLEVEL: u8 = 5;
/// Inner chunks per shard along each dimension.
const SHARD_SPLIT: usize = 4;

/// A smooth float32 signal, like a chunk of a real array.
fn chunk(bytes: usize) -> Vec<u8> {
    #[allow(clippy::cast_precision_loss)]
    (0..bytes / 4).flat_map(|i| ((i as f32) * 1e-4).sin().mul_add(100.0, 20.0).to_le_bytes()).collect()
}

/// A one-chunk float32 array of `shape` with `codecs`, through the real parser.
fn array(shape: [usize; 2], codecs: &Value) -> ArrayDescription {
    let doc = json!({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": shape}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0.0, "codecs": codecs
    });
    match NodeMetadataV3::from_slice(&serde_json::to_vec(&doc).unwrap()).unwrap() {
        NodeMetadataV3::Array(meta) => ArrayDescription::from_v3(&meta).unwrap(),
        NodeMetadataV3::Group(_) => unreachable!("an array document"),
    }
}

/// The same work without the engine.
enum Direct {
    /// Little-endian `bytes`: a copy into a new buffer.
    Memcpy,
    /// Big-endian `bytes`: swap every 4-byte element in place.
    SwapBytes,
    /// `transpose` `[1, 0]` of a 2-d float32 chunk, one element at a time.
    Transpose,
    Gzip,
    Zstd,
    Blosc(&'static std::ffi::CStr),
    /// Zstd inner chunks and a crc32c'd index at the end, as the shard
    /// format lays them out.
    ShardedZstd,
}

impl Direct {
    fn encode(&self, data: Vec<u8>, shape: [usize; 2]) -> Vec<u8> {
        match self {
            Self::Memcpy => data.as_slice().to_vec(),
            Self::SwapBytes => swap4(data),
            Self::Transpose => transpose4(&data, shape),
            Self::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(GZIP_LEVEL));
                e.write_all(&data).unwrap();
                e.finish().unwrap()
            }
            Self::Zstd => zstd::bulk::compress(&data, ZSTD_LEVEL).unwrap(),
            Self::Blosc(cname) => blosc_compress(&data, cname),
            Self::ShardedZstd => shard_encode(&data, shape),
        }
    }

    fn decode(&self, enc: Vec<u8>, shape: [usize; 2]) -> Vec<u8> {
        let n = shape[0] * shape[1] * 4;
        match self {
            Self::Memcpy => enc.as_slice().to_vec(),
            Self::SwapBytes => swap4(enc),
            // The inverse of transpose [1, 0] of `shape` is transpose [1, 0] of the transposed shape.
            Self::Transpose => transpose4(&enc, [shape[1], shape[0]]),
            Self::Gzip => {
                let mut out = Vec::new();
                flate2::read::GzDecoder::new(enc.as_slice()).read_to_end(&mut out).unwrap();
                out
            }
            Self::Zstd => zstd::bulk::decompress(&enc, n).unwrap(),
            Self::Blosc(_) => blosc_decompress(&enc, n),
            Self::ShardedZstd => shard_decode(&enc, shape),
        }
    }
}

fn swap4(mut data: Vec<u8>) -> Vec<u8> {
    for e in data.chunks_exact_mut(4) {
        let v = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
        e.copy_from_slice(&v.swap_bytes().to_le_bytes());
    }
    data
}

/// `out[j, i] = in[i, j]` for 4-byte elements of a `[rows, cols]` array.
fn transpose4(src: &[u8], [rows, cols]: [usize; 2]) -> Vec<u8> {
    let mut out = vec![0u8; src.len()];
    for i in 0..rows {
        for j in 0..cols {
            let (s, d) = ((i * cols + j) * 4, (j * rows + i) * 4);
            out[d..d + 4].copy_from_slice(&src[s..s + 4]);
        }
    }
    out
}

fn blosc_compress(data: &[u8], cname: &std::ffi::CStr) -> Vec<u8> {
    let cap = data.len() + 16;
    let mut out: Vec<u8> = Vec::with_capacity(cap);
    // SAFETY: as in the codec: src readable for len, dest writable for cap,
    // NUL-terminated name, one thread.
    let n = unsafe {
        blosc_src::blosc_compress_ctx(
            i32::from(BLOSC_CLEVEL),
            1,
            4,
            data.len(),
            data.as_ptr().cast(),
            out.as_mut_ptr().cast(),
            cap,
            cname.as_ptr(),
            0,
            1,
        )
    };
    assert!(n > 0);
    // SAFETY: c-blosc wrote n <= cap bytes.
    unsafe { out.set_len(usize::try_from(n).unwrap()) };
    out
}

fn blosc_decompress(enc: &[u8], n: usize) -> Vec<u8> {
    let mut out: Vec<u8> = Vec::with_capacity(n);
    // SAFETY: a valid buffer made by blosc_compress(); dest writable for n.
    let got = unsafe { blosc_src::blosc_decompress_ctx(enc.as_ptr().cast(), out.as_mut_ptr().cast(), n, 1) };
    assert_eq!(usize::try_from(got).unwrap(), n);
    // SAFETY: c-blosc wrote n bytes.
    unsafe { out.set_len(n) };
    out
}

/// The inner chunk shape and grid of a shard of `shape`.
fn shard_grid(shape: [usize; 2]) -> ([usize; 2], usize) {
    ([shape[0] / SHARD_SPLIT, shape[1] / SHARD_SPLIT], SHARD_SPLIT * SHARD_SPLIT)
}

/// Byte offset in a `shape` chunk of row `row` of inner chunk `k`.
fn inner_row(shape: [usize; 2], inner: [usize; 2], k: usize, row: usize) -> usize {
    let (r, c) = (k / SHARD_SPLIT, k % SHARD_SPLIT);
    ((r * inner[0] + row) * shape[1] + c * inner[1]) * 4
}

fn shard_encode(data: &[u8], shape: [usize; 2]) -> Vec<u8> {
    let (inner, count) = shard_grid(shape);
    let row_len = inner[1] * 4;
    let mut scratch = Vec::with_capacity(inner[0] * row_len);
    let mut out = Vec::new();
    let mut index = Vec::with_capacity(count * 16 + 4);
    for k in 0..count {
        scratch.clear();
        for row in 0..inner[0] {
            let at = inner_row(shape, inner, k, row);
            scratch.extend_from_slice(&data[at..at + row_len]);
        }
        let compressed = zstd::bulk::compress(&scratch, ZSTD_LEVEL).unwrap();
        index.extend_from_slice(&(out.len() as u64).to_le_bytes());
        index.extend_from_slice(&(compressed.len() as u64).to_le_bytes());
        out.extend_from_slice(&compressed);
    }
    let crc = crc32c::crc32c(&index);
    index.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&index);
    out
}

fn shard_decode(enc: &[u8], shape: [usize; 2]) -> Vec<u8> {
    let (inner, count) = shard_grid(shape);
    let row_len = inner[1] * 4;
    let (body, index) = enc.split_at(enc.len() - (count * 16 + 4));
    let (entries, crc) = index.split_at(count * 16);
    assert_eq!(crc32c::crc32c(entries).to_le_bytes(), crc);
    let mut out = vec![0u8; shape[0] * shape[1] * 4];
    let mut scratch = vec![0u8; inner[0] * row_len];
    let mut zstd = zstd::bulk::Decompressor::new().unwrap();
    let word = |i: usize| usize::try_from(u64::from_le_bytes(entries[i * 8..i * 8 + 8].try_into().unwrap())).unwrap();
    for k in 0..count {
        let (offset, nbytes) = (word(2 * k), word(2 * k + 1));
        let got = zstd.decompress_to_buffer(&body[offset..offset + nbytes], scratch.as_mut_slice()).unwrap();
        assert_eq!(got, scratch.len());
        for row in 0..inner[0] {
            let at = inner_row(shape, inner, k, row);
            out[at..at + row_len].copy_from_slice(&scratch[row * row_len..(row + 1) * row_len]);
        }
    }
    out
}

fn le() -> Value {
    json!({"name": "bytes", "configuration": {"endian": "little"}})
}

/// The cases for a chunk of `shape`: name, array, direct baseline.
fn cases(shape: [usize; 2]) -> Vec<(&'static str, ArrayDescription, Direct)> {
    let (inner, _) = shard_grid(shape);
    let blosc = |cname: &str| {
        json!([le(), {"name": "blosc", "configuration":
            {"cname": cname, "clevel": BLOSC_CLEVEL, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}}])
    };
    let zstd = json!({"name": "zstd", "configuration": {"level": ZSTD_LEVEL, "checksum": false}});
    vec![
        ("bytes_le", array(shape, &json!([le()])), Direct::Memcpy),
        ("bytes_be", array(shape, &json!([{"name": "bytes", "configuration": {"endian": "big"}}])), Direct::SwapBytes),
        (
            "transpose",
            array(shape, &json!([{"name": "transpose", "configuration": {"order": [1, 0]}}, le()])),
            Direct::Transpose,
        ),
        ("zstd", array(shape, &json!([le(), zstd])), Direct::Zstd),
        ("blosc_lz4", array(shape, &blosc("lz4")), Direct::Blosc(c"lz4")),
        ("blosc_zstd", array(shape, &blosc("zstd")), Direct::Blosc(c"zstd")),
        ("gzip", array(shape, &json!([le(), {"name": "gzip", "configuration": {"level": GZIP_LEVEL}}])), Direct::Gzip),
        (
            "sharded_zstd",
            array(
                shape,
                &json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": inner,
                    "codecs": [le(), zstd], "index_codecs": [le(), {"name": "crc32c"}], "index_location": "end"}}]),
            ),
            Direct::ShardedZstd,
        ),
    ]
}

fn fixed(data: ChunkData) -> Vec<u8> {
    match data {
        ChunkData::Fixed(b) => b,
        ChunkData::Variable(_) => unreachable!("float32 decodes to fixed-size elements"),
    }
}

fn bench(c: &mut Criterion) {
    for (shape, label) in [([512, 512], "1MiB"), ([2048, 2048], "16MiB")] {
        let data = chunk(shape[0] * shape[1] * 4);
        for (name, desc, direct) in cases(shape) {
            // Both sides do the same work: each decodes what the other encoded.
            let encoded = desc.encode_chunk(ChunkData::Fixed(data.clone())).unwrap();
            assert_eq!(direct.decode(encoded.clone(), shape), data, "{name}");
            assert_eq!(fixed(desc.decode_chunk(direct.encode(data.clone(), shape)).unwrap()), data, "{name}");

            let mut g = c.benchmark_group(format!("encode/{name}"));
            g.sample_size(10);
            g.throughput(Throughput::Bytes(data.len() as u64));
            g.bench_function(BenchmarkId::new("zarrd", label), |b| {
                b.iter_batched(
                    || ChunkData::Fixed(data.clone()),
                    |d| desc.encode_chunk(d).unwrap(),
                    BatchSize::LargeInput,
                );
            });
            g.bench_function(BenchmarkId::new("direct", label), |b| {
                b.iter_batched(|| data.clone(), |d| direct.encode(d, shape), BatchSize::LargeInput);
            });
            g.finish();

            let mut g = c.benchmark_group(format!("decode/{name}"));
            g.sample_size(10);
            g.throughput(Throughput::Bytes(data.len() as u64));
            g.bench_function(BenchmarkId::new("zarrd", label), |b| {
                b.iter_batched(|| encoded.clone(), |e| desc.decode_chunk(e).unwrap(), BatchSize::LargeInput);
            });
            g.bench_function(BenchmarkId::new("direct", label), |b| {
                b.iter_batched(|| encoded.clone(), |e| direct.decode(e, shape), BatchSize::LargeInput);
            });
            g.finish();
        }
    }
}

criterion_group! {
    name = benches;
    // Command-line options (`--warm-up-time`, `--measurement-time`) override these.
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
