//! Throughput of the bytes → bytes codecs against the libraries they wrap.
//!
//! For each codec and chunk size (a 1 MiB and a 16 MiB float32 chunk of a
//! smooth signal), `zarrd` runs our codec and `direct` calls the underlying
//! library on the same buffer the way its documentation shows, so the
//! difference is the wrapper's overhead. Both get a fresh copy of the input
//! per iteration (made outside the timing), since the codec consumes its
//! input: a long-lived buffer and a fresh one page and cache differently, and
//! at 16 MiB that alone showed up as a 30% difference. Throughput is in
//! decoded bytes.
//!
//! Run: `cargo bench --bench codecs` (add a filter such as `decode/zstd` to
//! run a subset).
// The blosc baseline calls c-blosc directly, as the codec does.
#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use zarrd::zarr::codec::bytes_to_bytes::{blosc::Blosc, gzip::Gzip, zstd::Zstd};
use zarrd::zarr::codec::BytesToBytesCodec;
use zarrd::zarr::metadata::codec::{BloscCname, BloscShuffle};

const GZIP_LEVEL: u32 = 5;
const ZSTD_LEVEL: i32 = 3;
const BLOSC_CLEVEL: u8 = 5;

/// A smooth float32 signal, like a chunk of a real array.
fn chunk(bytes: usize) -> Vec<u8> {
    #[allow(clippy::cast_precision_loss)]
    (0..bytes / 4).flat_map(|i| ((i as f32) * 1e-4).sin().mul_add(100.0, 20.0).to_le_bytes()).collect()
}

/// The same call into the library, without the codec around it.
enum Direct {
    Gzip,
    Zstd,
    Blosc(&'static std::ffi::CStr),
}

impl Direct {
    fn encode(&self, data: &[u8]) -> Vec<u8> {
        match self {
            Self::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(GZIP_LEVEL));
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Self::Zstd => zstd::bulk::compress(data, ZSTD_LEVEL).unwrap(),
            Self::Blosc(cname) => {
                let cap = data.len() + 16;
                let mut out: Vec<u8> = Vec::with_capacity(cap);
                // SAFETY: as in the codec: src readable for len, dest
                // writable for cap, NUL-terminated name, one thread.
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
        }
    }

    fn decode(&self, enc: &[u8], n: usize) -> Vec<u8> {
        match self {
            Self::Gzip => {
                let mut out = Vec::new();
                flate2::read::GzDecoder::new(enc).read_to_end(&mut out).unwrap();
                out
            }
            Self::Zstd => zstd::bulk::decompress(enc, n).unwrap(),
            Self::Blosc(_) => {
                let mut out: Vec<u8> = Vec::with_capacity(n);
                // SAFETY: a valid buffer made by encode(); dest writable for n.
                let got =
                    unsafe { blosc_src::blosc_decompress_ctx(enc.as_ptr().cast(), out.as_mut_ptr().cast(), n, 1) };
                assert_eq!(usize::try_from(got).unwrap(), n);
                // SAFETY: c-blosc wrote n bytes.
                unsafe { out.set_len(n) };
                out
            }
        }
    }
}

fn codecs() -> Vec<(&'static str, Box<dyn BytesToBytesCodec>, Direct)> {
    vec![
        ("gzip", Box::new(Gzip::new(GZIP_LEVEL).unwrap()), Direct::Gzip),
        ("zstd", Box::new(Zstd::new(ZSTD_LEVEL, false).unwrap()), Direct::Zstd),
        (
            "blosc_lz4",
            Box::new(Blosc::new(BloscCname::Lz4, BLOSC_CLEVEL, BloscShuffle::Shuffle, 4, 0).unwrap()),
            Direct::Blosc(c"lz4"),
        ),
        (
            "blosc_zstd",
            Box::new(Blosc::new(BloscCname::Zstd, BLOSC_CLEVEL, BloscShuffle::Shuffle, 4, 0).unwrap()),
            Direct::Blosc(c"zstd"),
        ),
    ]
}

fn bench(c: &mut Criterion) {
    for (mib, label) in [(1usize, "1MiB"), (16, "16MiB")] {
        let data = chunk(mib << 20);
        for (name, codec, direct) in codecs() {
            let encoded = codec.encode(data.clone()).unwrap();
            assert_eq!(direct.decode(&encoded, data.len()), data, "{name}");
            assert_eq!(codec.decode(direct.encode(&data), data.len()).unwrap(), data, "{name}");

            let mut g = c.benchmark_group(format!("encode/{name}"));
            g.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
            g.throughput(Throughput::Bytes(data.len() as u64));
            g.bench_function(BenchmarkId::new("zarrd", label), |b| {
                b.iter_batched(|| data.clone(), |d| codec.encode(d).unwrap(), BatchSize::LargeInput);
            });
            g.bench_function(BenchmarkId::new("direct", label), |b| {
                b.iter_batched(|| data.clone(), |d| direct.encode(&d), BatchSize::LargeInput);
            });
            g.finish();

            let mut g = c.benchmark_group(format!("decode/{name}"));
            g.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
            g.throughput(Throughput::Bytes(data.len() as u64));
            g.bench_function(BenchmarkId::new("zarrd", label), |b| {
                b.iter_batched(|| encoded.clone(), |e| codec.decode(e, data.len()).unwrap(), BatchSize::LargeInput);
            });
            g.bench_function(BenchmarkId::new("direct", label), |b| {
                b.iter_batched(|| encoded.clone(), |e| direct.decode(&e, data.len()), BatchSize::LargeInput);
            });
            g.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
