//! One pass over level 0: every level of a pyramid computed from one read
//! of each region of level 0.
//!
//! Level 0 is walked in **blocks**: the level-0 footprint of one chunk of
//! level `s` (its chunk shape times its cumulative factors, clipped to the
//! array), `s` the coarsest level whose footprint is at most
//! `limits.read_slab_bytes` decoded (32 MiB by default). Each block is read once (decoded through the
//! region engine, missing chunks as the fill value) and reduced, on the CPU
//! pool, to every level at once:
//!
//! - levels `1..=s` (**streamed**): the block holds whole chunks of each
//!   (a footprint of level `s` is a whole number of footprints of every
//!   finer level, as cumulative factors divide each other), written through
//!   the normal write path as soon as the block is reduced;
//! - the next levels (**held**), while the block is aligned to their
//!   cumulative factors and their whole arrays fit two slabs together:
//!   the block's part is copied into an in-memory copy of the level, whose
//!   chunks are written after the pass (together at most twice
//!   `limits.read_slab_bytes`);
//! - any further level is computed afterwards as before, through the
//!   downsampled view (`super::run`).
//!
//! Exactness: `mean`, `median` and `mode` reduce the block by the level's
//! cumulative factors (the same kernel and the same C order over each
//! block as TensorStore's `downsample` of level 0, since the block is
//! aligned to those factors); `stride`, `min` and `max` compose exactly, so
//! level `j` is reduced from the block's level `j - 1`.
//!
//! Memory: one block in flight ([`BLOCKS_AT_ONCE`]; its source chunks are
//! decoded in parallel and its levels reduced in parallel, each level in
//! pieces along the first dimension ([`reduce_pieces`]), so it keeps the
//! CPU pool busy): its decoded block (at most one slab), the decoded source
//! chunks the engine holds while filling it (at most 8 in flight), its
//! reduced levels (at most the block again) and the chunks being written;
//! plus the held levels (at most two slabs): with the default 32 MiB slab
//! and 4 MiB chunks about `32 + 2 × 8 × 4 + 32 + 64 = 192 MiB`.
//!
//! Resuming: a block whose streamed chunks all exist is skipped when the
//! held levels are complete too; otherwise it is read again (the held levels
//! need it) and only its missing chunks are written.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use futures::stream::{self, StreamExt, TryStreamExt};

use super::{exists, grid_coords, Plan};
use crate::service::array::downsample::View;
use crate::service::array::write::{self, WriteRequest};
use crate::service::jobs::Job;
use crate::service::node::{ArrayNode, NodePath};
use crate::service::wire::WireFormat;
use crate::service::{cpu, App, ServiceError, ServiceResult};
use crate::zarr::downsample::{self, Method};
use crate::zarr::selection::{SelectionMode, SelectionSpec};

/// Blocks read and reduced at once (each block's levels are reduced in
/// parallel, and its chunks decoded in parallel).
pub const BLOCKS_AT_ONCE: usize = 1;

/// Chunks of one block written at once.
const WRITES_AT_ONCE: usize = 4;

/// How the levels after level 0 are built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Scheme {
    /// Levels `1..=streamed` are written block by block (0: no pass).
    pub streamed: usize,
    /// Levels `streamed + 1..=held` are held in memory until the pass ends.
    pub held: usize,
    /// The block shape in level-0 elements.
    pub block: Vec<u64>,
}

/// The scheme for levels of `shapes` (level 0 first) with cumulative
/// factors `cumulative`, level chunk shape `chunks` and elements of `es`
/// bytes.
///
/// A block holds at most `block_bytes` decoded (`limits.read_slab_bytes`),
/// the held levels at most `held_bytes` together (twice that).
pub(super) fn scheme(
    shapes: &[Vec<u64>],
    cumulative: &[Vec<u64>],
    chunks: &[u64],
    es: u64,
    block_bytes: u64,
    held_bytes: u64,
) -> Scheme {
    let shape0 = &shapes[0];
    let (mut streamed, mut block) = (0, Vec::new());
    for (k, f) in cumulative.iter().enumerate().skip(1) {
        let footprint: Vec<u64> =
            chunks.iter().zip(f).zip(shape0).map(|((&c, &f), &s)| c.saturating_mul(f).min(s).max(1)).collect();
        if footprint.iter().fold(es, |a, &e| a.saturating_mul(e)) > block_bytes {
            break;
        }
        (streamed, block) = (k, footprint);
    }
    let mut held = streamed;
    if streamed > 0 {
        let mut bytes = 0u64;
        for k in streamed + 1..shapes.len() {
            let aligned = (0..shape0.len()).all(|d| block[d] >= shape0[d] || block[d] % cumulative[k][d] == 0);
            bytes = shapes[k].iter().fold(es, |a, &e| a.saturating_mul(e)).saturating_add(bytes);
            if !aligned || bytes > held_bytes {
                break;
            }
            held = k;
        }
    }
    Scheme { streamed, held, block }
}

/// Reduces `block` (C order, shape `size`, aligned to every factor list
/// of `levels`, each a multiple of the one before) to every level: one
/// output per level, as [`downsample::reduce`] gives it.
///
/// The block is cut along its first dimension into pieces of a multiple
/// of the coarsest level's factor there, and every (level, piece) pair is
/// reduced as one task on the CPU pool: a piece's blocks are whole blocks
/// of every level (or the block's own upper edge), so a level's output is
/// its pieces' outputs one after the other, exactly what reducing the
/// whole block gives; and both cores stay busy to the end of the block.
fn reduce_pieces(
    dt: &crate::zarr::data_type::DataType,
    method: Method,
    levels: &[Vec<u64>],
    block: &[u8],
    size: &[u64],
) -> Result<Vec<Vec<u8>>, downsample::DownsampleError> {
    use rayon::prelude::*;
    let Some(coarsest) = levels.last() else { return Ok(Vec::new()) };
    if size.is_empty() || size.contains(&0) {
        return levels.iter().map(|f| downsample::reduce(dt, method, f, block, size)).collect();
    }
    // Pieces of at least PIECE_ROWS rows of the block, whole blocks of the coarsest level.
    let step = coarsest[0].clamp(1, size[0]);
    let rows = step * PIECE_ROWS.div_ceil(step);
    let row_bytes = (block.len() as u64 / size[0]) as usize;
    let pieces: Vec<(u64, u64)> = (0..size[0]).step_by(rows as usize).map(|s| (s, rows.min(size[0] - s))).collect();
    let outs: Vec<Vec<u8>> = (0..levels.len() * pieces.len())
        .into_par_iter()
        .map(|i| {
            let (f, (first, n)) = (&levels[i / pieces.len()], pieces[i % pieces.len()]);
            let mut shape = size.to_vec();
            shape[0] = n;
            let part = &block[first as usize * row_bytes..(first + n) as usize * row_bytes];
            downsample::reduce(dt, method, f, part, &shape)
        })
        .collect::<Result<_, _>>()?;
    Ok(outs.chunks(pieces.len()).map(|level| level.concat()).collect())
}

/// Rows (along the first dimension) of a block reduced as one task, at
/// least (a 32 MiB block of (128, 256, 256) float32: 8 pieces a level).
const PIECE_ROWS: u64 = 16;

/// Copies the box `[start, start + size)` out of `data` (C order, shape
/// `shape`, elements of `es` bytes).
fn extract(data: &[u8], shape: &[u64], es: usize, start: &[u64], size: &[u64]) -> Vec<u8> {
    let n: usize = size.iter().map(|&s| s as usize).product();
    let mut out = Vec::with_capacity(n * es);
    each_row(shape, start, size, |from, len| out.extend_from_slice(&data[from * es..(from + len) * es]));
    out
}

/// Copies `part` (C order, shape `size`) into `data` (shape `shape`) at
/// `start`.
fn insert(data: &mut [u8], shape: &[u64], es: usize, start: &[u64], size: &[u64], part: &[u8]) {
    let mut at = 0usize;
    each_row(shape, start, size, |to, len| {
        data[to * es..(to + len) * es].copy_from_slice(&part[at..at + len * es]);
        at += len * es;
    });
}

/// Calls `row(offset, len)` for every row (last dimension) of the box
/// `[start, start + size)` of an array of shape `shape`, C order: the
/// element offset of the row in the array and its length.
fn each_row(shape: &[u64], start: &[u64], size: &[u64], mut row: impl FnMut(usize, usize)) {
    let rank = shape.len();
    if rank == 0 {
        row(0, 1);
        return;
    }
    if size.contains(&0) {
        return;
    }
    let len = size[rank - 1] as usize;
    let mut idx = vec![0u64; rank - 1];
    loop {
        let mut off = 0usize;
        for d in 0..rank - 1 {
            off = off * shape[d] as usize + (start[d] + idx[d]) as usize;
        }
        row(off * shape[rank - 1] as usize + start[rank - 1] as usize, len);
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < size[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Writes the box `[start, start + size)` of `level`, a box whose chunk
/// was just found missing: a box of nothing but the fill value is not
/// written at all (unless the level keeps empty chunks). The write would
/// store nothing but delete the missing chunk, a request per chunk on an
/// object store (a pyramid of an empty 1,024-chunk S3 array sent 256
/// deletes of level chunks that never existed).
pub(super) async fn write_box(
    app: &App,
    mount: &str,
    level: &Level,
    start: &[u64],
    size: &[u64],
    data: Vec<u8>,
) -> ServiceResult<()> {
    let data = if write::keeps_empty_chunks(&level.array, None) {
        data
    } else {
        let fill = level.array.desc.fill_value.clone();
        let (data, empty) = cpu::run_or_inline(data.len() <= SMALL_COMPARE, move || {
            let empty = !fill.is_empty() && data.chunks(fill.len()).all(|e| e == &fill[..]);
            (data, empty)
        })
        .await
        .map_err(|e| ServiceError::Internal(e.0))?;
        if empty {
            return Ok(());
        }
        data
    };
    let text: Vec<String> = start.iter().zip(size).map(|(&s, &n)| format!("{s}:{}", s + n)).collect();
    let selection = SelectionSpec::parse(&text.join(","), SelectionMode::Basic)?;
    let request =
        WriteRequest { selection, format: WireFormat::Raw, body: bytes::Bytes::from(data), write_empty_chunks: None };
    write::write(&app.node(mount, &level.path)?, request).await?;
    Ok(())
}

/// Boxes up to this many bytes are compared with the fill value inline.
const SMALL_COMPARE: usize = 64 * 1024;

/// A level being built: its array and path.
pub(super) struct Level {
    pub array: Arc<ArrayNode>,
    pub path: NodePath,
}

/// Runs the pass: levels `1..=scheme.held` of `plan`, from `level0` (the
/// view over level 0; its factors do not matter).
#[allow(clippy::too_many_lines)]
pub(super) async fn run(
    app: &Arc<App>,
    job: &Job,
    plan: &Plan,
    scheme: &Scheme,
    view: &View,
    levels: &[Level],
) -> ServiceResult<()> {
    let mount_name = job.mount.as_str();
    let mount = app.mount(mount_name)?.clone();
    let dt = levels[0].array.desc.data_type.clone();
    let es = dt.size().unwrap_or(1);
    let cumulative = plan.cumulative();
    let shape0 = plan.shapes[0].clone();
    let chunk = levels[0].array.desc.chunk_shape.clone();
    let chains = matches!(plan.method, Method::Stride | Method::Min | Method::Max);

    // Held levels: whole, in memory; when every chunk of them is stored
    // already, they are not built again.
    let mut held_done = true;
    for k in scheme.streamed + 1..=scheme.held {
        let level = &levels[k - 1];
        for coords in grid_coords(&plan.shapes[k], &chunk) {
            if !exists(&mount, &level.array.chunk_key(&coords)?).await? {
                held_done = false;
                break;
            }
        }
    }
    let held: Vec<Mutex<Vec<u8>>> = (scheme.streamed + 1..=scheme.held)
        .map(|k| {
            let n: u64 = plan.shapes[k].iter().product();
            let fill = &levels[k - 1].array.desc.fill_value;
            Mutex::new(if held_done { Vec::new() } else { fill.repeat(n as usize) })
        })
        .collect();

    stream::iter(grid_coords(&shape0, &scheme.block))
        .map(|coords| {
            let (mount, cumulative, shape0, chunk, held, dt) = (&mount, &cumulative, &shape0, &chunk, &held, &dt);
            async move {
                let start: Vec<u64> = coords.iter().zip(&scheme.block).map(|(&c, &b)| c * b).collect();
                let size: Vec<u64> =
                    start.iter().zip(&scheme.block).zip(shape0).map(|((&s, &b), &e)| (s + b).min(e) - s).collect();
                // The streamed chunks of the block, and which are stored.
                let mut todo = Vec::new();
                let mut stored = 0u64;
                for j in 1..=scheme.streamed {
                    let f = &cumulative[j];
                    let lstart: Vec<u64> = start.iter().zip(f).map(|(&s, &f)| s / f).collect();
                    let lsize = downsample::downsampled_shape(&size, f);
                    let first: Vec<u64> = lstart.iter().zip(chunk).map(|(&s, &c)| s / c).collect();
                    let count: Vec<u64> = lstart
                        .iter()
                        .zip(&lsize)
                        .zip(chunk)
                        .map(|((&s, &n), &c)| (s + n).div_ceil(c) - s / c)
                        .collect();
                    for rel in grid_coords(&count, &vec![1; count.len()]) {
                        let at: Vec<u64> = first.iter().zip(&rel).map(|(&a, &r)| a + r).collect();
                        if exists(mount, &levels[j - 1].array.chunk_key(&at)?).await? {
                            stored += 1;
                        } else {
                            todo.push((j, at));
                        }
                    }
                }
                job.skipped.fetch_add(stored, Ordering::Relaxed);
                job.done.fetch_add(stored, Ordering::Relaxed);
                if todo.is_empty() && held_done {
                    return Ok(());
                }
                let block = view.read_source_box(&start, &size).await?;
                let (method, cumulative2, steps, size2, dt2) =
                    (plan.method, cumulative.clone(), plan.steps.clone(), size.clone(), dt.clone());
                let last = if held_done { scheme.streamed } else { scheme.held };
                let outs = cpu::run(move || {
                    let failed = |e: downsample::DownsampleError| ServiceError::Internal(e.0);
                    if !chains {
                        // Every level from the block, in parallel by level
                        // and by piece of the block.
                        return reduce_pieces(&dt2, method, &cumulative2[1..=last], &block, &size2).map_err(failed);
                    }
                    let mut outs: Vec<Vec<u8>> = Vec::with_capacity(last);
                    for j in 1..=last {
                        let out = if j > 1 {
                            let prev = downsample::downsampled_shape(&size2, &cumulative2[j - 1]);
                            downsample::reduce(&dt2, method, &steps[j - 1], &outs[j - 2], &prev)
                        } else {
                            downsample::reduce(&dt2, method, &cumulative2[j], &block, &size2)
                        };
                        outs.push(out.map_err(failed)?);
                    }
                    Ok(outs)
                })
                .await
                .map_err(ServiceError::Cpu)??;
                let outs = Arc::new(outs);
                // Held levels: the block's part copied in.
                if !held_done {
                    let (outs, size, cumulative) = (outs.clone(), size.clone(), cumulative.clone());
                    let (start, shapes, streamed) = (start.clone(), plan.shapes.clone(), scheme.streamed);
                    let parts: Vec<(usize, Vec<u64>, Vec<u64>)> = (streamed + 1..=last)
                        .map(|k| {
                            let f = &cumulative[k];
                            (
                                k,
                                start.iter().zip(f).map(|(&s, &f)| s / f).collect(),
                                downsample::downsampled_shape(&size, f),
                            )
                        })
                        .collect();
                    for (k, lstart, lsize) in parts {
                        let mut level =
                            held[k - streamed - 1].lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        insert(&mut level, &shapes[k], es, &lstart, &lsize, &outs[k - 1]);
                    }
                }
                // Streamed levels: the missing chunks written.
                stream::iter(todo)
                    .map(|(j, at)| {
                        let (outs, size, start) = (outs.clone(), &size, &start);
                        async move {
                            let f = &cumulative[j];
                            let bstart: Vec<u64> = start.iter().zip(f).map(|(&s, &f)| s / f).collect();
                            let bshape = downsample::downsampled_shape(size, f);
                            let lshape = &plan.shapes[j];
                            let cstart: Vec<u64> = at.iter().zip(chunk).map(|(&a, &c)| a * c).collect();
                            let csize: Vec<u64> =
                                cstart.iter().zip(chunk).zip(lshape).map(|((&s, &c), &e)| (s + c).min(e) - s).collect();
                            let rel: Vec<u64> = cstart.iter().zip(&bstart).map(|(&c, &b)| c - b).collect();
                            let data = extract(&outs[j - 1], &bshape, es, &rel, &csize);
                            job.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                            write_box(app, mount_name, &levels[j - 1], &cstart, &csize, data).await?;
                            job.done.fetch_add(1, Ordering::Relaxed);
                            Ok::<_, ServiceError>(())
                        }
                    })
                    .buffer_unordered(WRITES_AT_ONCE)
                    .try_collect::<()>()
                    .await
            }
        })
        .buffer_unordered(BLOCKS_AT_ONCE)
        .try_collect::<()>()
        .await?;

    // The held levels' chunks, written (or found stored).
    for (i, level) in held.into_iter().enumerate() {
        let k = scheme.streamed + 1 + i;
        let data = level.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (data, shape, target) = (&data, &plan.shapes[k], &levels[k - 1]);
        job.level.store(k as u64, Ordering::Relaxed);
        stream::iter(grid_coords(shape, &chunk))
            .map(|coords| {
                let chunk = &chunk;
                let mount = &mount;
                async move {
                    if exists(mount, &target.array.chunk_key(&coords)?).await? {
                        job.skipped.fetch_add(1, Ordering::Relaxed);
                    } else {
                        let cstart: Vec<u64> = coords.iter().zip(chunk).map(|(&a, &c)| a * c).collect();
                        let csize: Vec<u64> =
                            cstart.iter().zip(chunk).zip(shape).map(|((&s, &c), &e)| (s + c).min(e) - s).collect();
                        let part = extract(data, shape, es, &cstart, &csize);
                        job.bytes.fetch_add(part.len() as u64, Ordering::Relaxed);
                        write_box(app, mount_name, target, &cstart, &csize, part).await?;
                    }
                    job.done.fetch_add(1, Ordering::Relaxed);
                    Ok::<_, ServiceError>(())
                }
            })
            .buffer_unordered(WRITES_AT_ONCE)
            .try_collect::<()>()
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_are_extracted_and_inserted_row_by_row() {
        // A 3 x 4 array of bytes 0..12; the box rows 1..3, columns 1..3.
        let data: Vec<u8> = (0..12).collect();
        let part = extract(&data, &[3, 4], 1, &[1, 1], &[2, 2]);
        assert_eq!(part, vec![5, 6, 9, 10]);
        let mut back = vec![0u8; 12];
        insert(&mut back, &[3, 4], 1, &[1, 1], &[2, 2], &part);
        assert_eq!(back, vec![0, 0, 0, 0, 0, 5, 6, 0, 0, 9, 10, 0]);
        // Two-byte elements, a whole row.
        let wide: Vec<u8> = (0..8).collect();
        assert_eq!(extract(&wide, &[2, 2], 2, &[1, 0], &[1, 2]), vec![4, 5, 6, 7]);
        assert!(extract(&data, &[3, 4], 1, &[0, 0], &[0, 4]).is_empty());
    }

    const MIB32: u64 = 32 << 20;
    const MIB64: u64 = 64 << 20;

    #[test]
    fn the_scheme_streams_what_fits_a_block_and_holds_the_rest() {
        // The benchmark's 1 GiB float32 array in (64, 128, 128) chunks, factor 2.
        let shapes = vec![vec![512, 1024, 512], vec![256, 512, 256], vec![128, 256, 128], vec![64, 128, 64]];
        let cumulative = vec![vec![1, 1, 1], vec![2, 2, 2], vec![4, 4, 4], vec![8, 8, 8]];
        let s = scheme(&shapes, &cumulative, &[64, 128, 128], 4, MIB32, MIB64);
        // Level 1's footprint (128, 256, 256) is 32 MiB; levels 2 and 3 (16 + 2 MiB) are held.
        assert_eq!(s, Scheme { streamed: 1, held: 3, block: vec![128, 256, 256] });
        // Small chunks: more levels stream.
        let s = scheme(&shapes, &cumulative, &[16, 16, 16], 4, MIB32, MIB64);
        assert_eq!((s.streamed, s.held), (3, 3));
        // Chunks whose footprint is over the block: no pass.
        let s = scheme(&shapes, &cumulative, &[256, 256, 256], 4, MIB32, MIB64);
        assert_eq!((s.streamed, s.held), (0, 0));
        // A level whose whole array is over the held bytes is not held.
        let big: Vec<Vec<u64>> = (0..4).map(|k| vec![4096 >> k; 3]).collect();
        let s = scheme(&big, &cumulative, &[64, 128, 128], 4, MIB32, MIB64);
        assert_eq!((s.streamed, s.held), (1, 1));
        // A block not aligned to a coarser level's factors does not hold it:
        // chunks of 5, factor 3, one byte per element; level 6's footprint
        // (3645^2 bytes) fits, level 7's (10935^2) does not, and 3645 is not
        // a multiple of 3^7.
        let mut shapes = vec![vec![100_000u64, 100_000]];
        let mut cumulative = vec![vec![1u64, 1]];
        for _ in 0..7 {
            shapes.push(downsample::downsampled_shape(shapes.last().unwrap(), &[3, 3]));
            cumulative.push(cumulative.last().unwrap().iter().map(|c| c * 3).collect());
        }
        let s = scheme(&shapes, &cumulative, &[5, 5], 1, MIB32, MIB64);
        assert_eq!((s.streamed, s.held, s.block), (6, 6, vec![3645, 3645]));
        // A block clipped to the whole array is aligned to every level.
        let s = scheme(
            &shapes[..4].iter().map(|_| vec![90, 90]).collect::<Vec<_>>(),
            &cumulative[..4],
            &[4, 4],
            1,
            MIB32,
            MIB64,
        );
        assert_eq!((s.streamed, s.held), (3, 3));
    }

    #[test]
    fn a_block_reduced_in_pieces_equals_the_block_reduced_whole() {
        use crate::zarr::data_type::DataType;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // Shapes whose first dimension is a multiple of the pieces or not,
        // smaller than the coarsest factor, or one row.
        for size in [vec![64u64, 12, 10], vec![37, 9, 5], vec![5, 16, 16], vec![1, 3, 3], vec![130, 2, 2]] {
            let n: u64 = size.iter().product();
            for (dt, es) in [(DataType::Float32, 4), (DataType::UInt16, 2), (DataType::Int64, 8)] {
                let block: Vec<u8> = (0..n * es).map(|_| next() as u8).collect();
                let levels = vec![vec![2u64, 2, 2], vec![4, 4, 4], vec![8, 8, 8], vec![32, 16, 8]];
                for method in [Method::Mean, Method::Median, Method::Mode] {
                    let got = reduce_pieces(&dt, method, &levels, &block, &size).unwrap();
                    assert_eq!(got.len(), levels.len());
                    for (f, out) in levels.iter().zip(&got) {
                        let whole = downsample::reduce(&dt, method, f, &block, &size).unwrap();
                        assert!(*out == whole, "{dt:?} {method} {size:?} {f:?}");
                    }
                }
            }
        }
        assert!(reduce_pieces(&DataType::Float32, Method::Mean, &[], &[], &[0, 2]).unwrap().is_empty());
    }
}
