//! Downsampled slice reads (`downsample=f0,f1,...&downsample_method=...`):
//! a selection of the downsampled array TensorStore's `downsample` driver
//! presents, computed from the stored array by the region engine and the
//! kernels of [`crate::zarr::downsample`].
//!
//! The downsampled array is read as a virtual array through the engine's
//! own read path: its shape is `ceil(shape / f)`, its chunks ("tiles") are
//! computed on demand by a [`UnitCache`] that reads the tile's source box
//! from the stored array (the service's chunk cache, storage and CPU pool)
//! and reduces it on the CPU pool. The engine plans the selection over the
//! tiles, slab by slab, and reads the tiles a slab touches concurrently, so
//! the work is parallel across tiles.
//!
//! A tile is aligned to the source's read units (chunks, or inner chunks of
//! shards) when its source box fits [`TILE_BYTES`]: along each dimension
//! it covers `lcm(unit, f)` source elements (`lcm / f` downsampled ones),
//! so every source unit belongs to exactly one tile and is read once. A
//! larger box is halved along its longest dimension until it fits (a source
//! unit may then be read by several tiles; the chunk cache keeps it
//! decoded). One downsampled element whose block is more than
//! `limits.read_slab_bytes` of source answers 413. A tile whose source box
//! is exactly one stored chunk, or inner chunk of a shard (the usual case
//! when the factors divide the unit's shape), reduces the decoded unit's
//! own bytes, with no copy into a box.
//!
//! Memory: the answer's slabs as for any read (at most about four of
//! `limits.read_slab_bytes`), plus, for each tile in flight (two per CPU
//! pool thread), its source box (at most [`TILE_BYTES`], or one block) and
//! the decoded source units its read holds.
//!
//! Checked before anything is read: the factors (one per dimension, each
//! at least 1: 400 naming `downsample`), the method and the data type (400
//! naming `downsample_method`), the selection against the downsampled shape,
//! the size limits on the answer, and the source units touched against
//! `limits.max_chunks_per_request`.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::read::whole::whole_chunk;
use super::read::{check_limits, npy_header, DataRead, Pieces, ReadParams};
use super::source::{region_error, MountChunkStore};
use crate::service::cache::chunk::ArrayCache;
use crate::service::error::product_text;
use crate::service::node::{self, NodePath};
use crate::service::wire::json::JsonEncoder;
use crate::service::wire::WireFormat;
use crate::service::{cpu, NodeRef, ServiceError, ServiceResult};
use crate::zarr::array::ArrayDescription;
use crate::zarr::byte_range::ByteRangeRequest;
use crate::zarr::chunk::ChunkData;
use crate::zarr::downsample::{self, Method};
use crate::zarr::metadata::error::describe;
use crate::zarr::region::read::IndexEntry;
use crate::zarr::region::{
    plan_read, read_slab, ChunkSource, ReadCtx, RegionError, RegionOptions, SlabData, SourceError, UnitCache,
};
use crate::zarr::selection::{DimIndexer, Selection, SelectionMode};

/// The most source bytes one tile reads (unless one block is larger).
pub const TILE_BYTES: u64 = 8 << 20;

/// Answers up to this size take no share of the answer budget.
const SMALL_ANSWER: u64 = 1 << 20;

/// Bytes of JSON text per byte of element, at most: JSON answers read
/// slabs this much smaller.
const JSON_TEXT_PER_BYTE: u64 = 8;

/// What a downsampled read asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Downsample {
    /// One factor per dimension, each at least 1.
    pub factors: Vec<u64>,
    /// The method.
    pub method: Method,
}

/// Parses `downsample=` and `downsample_method=`; `None` when neither is
/// given.
///
/// # Errors
/// A factor that is not a positive integer (naming its position), a
/// missing or unknown method, a method without factors.
pub fn parse(factors: Option<&str>, method: Option<&str>) -> ServiceResult<Option<Downsample>> {
    let factors = factors.map(factors_of_text).transpose()?;
    parse_factors(factors, method)
}

/// [`parse`] with the factors as a JSON body gives them: a list of positive
/// integers, or the text of `downsample=`.
///
/// # Errors
/// As [`parse`]; anything else than a list or a string.
pub fn parse_json(factors: Option<&serde_json::Value>, method: Option<&str>) -> ServiceResult<Option<Downsample>> {
    let factors = match factors {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(text)) => Some(factors_of_text(text)?),
        Some(serde_json::Value::Array(items)) => Some(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| match item.as_u64() {
                    Some(f) => factor(i, f),
                    None => Err(bad_factor(i, &describe(item))),
                })
                .collect::<ServiceResult<Vec<u64>>>()?,
        ),
        Some(other) => {
            return Err(invalid(
                "downsample",
                format!(
                    "expected a list of positive integer factors, or their text \"1,4,4\", got {}",
                    describe(other)
                ),
            ))
        }
    };
    parse_factors(factors, method)
}

fn factor(i: usize, f: u64) -> ServiceResult<u64> {
    if f == 0 {
        return Err(invalid("downsample", format!("dimension {i}: a factor is at least 1, got 0")));
    }
    Ok(f)
}

fn bad_factor(i: usize, got: &str) -> ServiceError {
    invalid("downsample", format!("dimension {i}: expected a positive integer factor, got `{got}`"))
}

/// The factors of `downsample=`'s text: `"1,4,4"`.
fn factors_of_text(text: &str) -> ServiceResult<Vec<u64>> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .enumerate()
        .map(|(i, s)| match s.trim().parse::<u64>() {
            Ok(f) => factor(i, f),
            Err(_) => Err(bad_factor(i, s.trim())),
        })
        .collect()
}

fn parse_factors(factors: Option<Vec<u64>>, method: Option<&str>) -> ServiceResult<Option<Downsample>> {
    let Some(factors) = factors else {
        return match method {
            None => Ok(None),
            Some(_) => Err(invalid("downsample_method", "given without downsample=")),
        };
    };
    let method = match method {
        None => {
            return Err(invalid(
                "downsample_method",
                "required with downsample=: one of stride, mean, median, mode, min, max",
            ))
        }
        Some(m) => m.parse::<Method>().map_err(|e| invalid("downsample_method", e))?,
    };
    Ok(Some(Downsample { factors, method }))
}

/// The tile shape (in downsampled elements) for `desc` downsampled by
/// `factors` (already clipped to the extents): aligned to the source's read
/// units while the source box fits [`TILE_BYTES`], halved along its
/// longest source extent until it does.
fn tile_shape(desc: &ArrayDescription, factors: &[u64], ds_shape: &[u64]) -> Vec<u64> {
    let unit = match &desc.sharding {
        Some(s) => s.inner_chunk_shape().to_vec(),
        None => desc.chunk_shape.clone(),
    };
    let es = desc.data_type.size().unwrap_or(1) as u64;
    let mut tile: Vec<u64> = unit
        .iter()
        .zip(factors)
        .zip(ds_shape)
        .map(|((&u, &f), &n)| (lcm(u.max(1), f) / f).clamp(1, n.max(1)))
        .collect();
    let source = |tile: &[u64]| -> Vec<u64> {
        tile.iter().zip(factors).zip(&desc.shape).map(|((&t, &f), &s)| t.saturating_mul(f).min(s).max(1)).collect()
    };
    loop {
        let extents = source(&tile);
        let bytes = extents.iter().fold(es, |a, &e| a.saturating_mul(e));
        if bytes <= TILE_BYTES {
            return tile;
        }
        // The dimension with the longest source extent that can still shrink.
        let Some(d) = (0..tile.len()).filter(|&d| tile[d] > 1).max_by_key(|&d| extents[d]) else {
            return tile;
        };
        tile[d] = tile[d].div_ceil(2);
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `lcm(a, b)`, saturating.
fn lcm(a: u64, b: u64) -> u64 {
    (a / gcd(a, b)).saturating_mul(b)
}

/// The virtual downsampled array: the source's description with the
/// downsampled shape and the tile grid (never encoded or decoded: its
/// units come from [`Tiles`]).
fn virtual_desc(desc: &ArrayDescription, ds_shape: Vec<u64>, tile: Vec<u64>) -> ArrayDescription {
    use crate::zarr::codec::array_to_bytes::bytes::{BytesCodec, Endian};
    use crate::zarr::codec::CodecChain;
    ArrayDescription {
        zarr_format: desc.zarr_format,
        shape: ds_shape,
        data_type: desc.data_type.clone(),
        chunk_shape: tile,
        fill_value: desc.fill_value.clone(),
        codecs: CodecChain::new(Vec::new(), Box::new(BytesCodec::new(Some(Endian::Little))), Vec::new()),
        chunk_key_encoding: desc.chunk_key_encoding,
        dimension_names: desc.dimension_names.clone(),
        attributes: serde_json::Map::new(),
        sharding: None,
    }
}

/// Computes tiles of the downsampled array from the source: the
/// [`UnitCache`] the virtual array's reads go through (every lookup is a
/// hit), so the engine never asks its store.
struct Tiles {
    source_desc: Arc<ArrayDescription>,
    source_ctx: Arc<ReadCtx<'static>>,
    store: MountChunkStore,
    method: Method,
    /// Factors clipped to the extents.
    factors: Vec<u64>,
    tile: Vec<u64>,
    /// The first failure in full (the cache interface carries only a
    /// [`SourceError`]).
    failure: Mutex<Option<RegionError>>,
}

impl Tiles {
    /// Tile coordinates from the key the virtual array's encoding made
    /// (`c/1/2`, `c.1.2`, `1.2`, `1/2`, `c`, `0`).
    fn coords(&self, key: &str) -> Option<Vec<u64>> {
        let coords: Vec<u64> =
            key.split(['/', '.']).filter(|t| *t != "c").map(str::parse).collect::<Result<_, _>>().ok()?;
        match coords.len() {
            n if n == self.tile.len() => Some(coords),
            1 if self.tile.is_empty() && coords[0] == 0 => Some(Vec::new()),
            _ => None,
        }
    }

    /// The decoded unit the source box `[start, start + shape)` is exactly
    /// (a whole chunk, or inner chunk of a shard, inside the array, stored,
    /// of its decoded size: [`whole_chunk`]): the tile reduces the unit's
    /// own bytes, with no copy into a box. `None`: read the box
    /// ([`Self::read_source`]), which fills missing units and reports bad
    /// ones as every read does.
    async fn whole_unit(&self, start: &[u64], shape: &[u64]) -> Result<Option<Arc<ChunkData>>, RegionError> {
        let Some(unit) = whole_chunk(&self.source_desc, &box_selection(start, shape)) else {
            return Ok(None);
        };
        let es = self.source_desc.data_type.size().unwrap_or(0) as u64;
        let Some(want) = shape.iter().try_fold(es, |a, &n| a.checked_mul(n)) else {
            return Ok(None);
        };
        unit.read(&self.source_ctx, &self.store, want).await
    }

    /// The source box `[start, start + shape)`, decoded, C order.
    async fn read_source(&self, start: &[u64], shape: &[u64]) -> Result<Vec<u8>, RegionError> {
        let plan = Arc::new(
            plan_read(&self.source_desc, box_selection(start, shape), u64::MAX)
                .map_err(|e| RegionError::Internal(e.0))?,
        );
        let mut source = Vec::new();
        for slab in plan.slabs() {
            match read_slab(&self.source_ctx, &self.store, slab, u64::MAX).await? {
                Some(SlabData::Fixed(b)) if source.is_empty() => source = b,
                Some(SlabData::Fixed(b)) => source.extend_from_slice(&b),
                _ => return Err(RegionError::Internal("a downsample source slab of variable-length elements".into())),
            }
        }
        Ok(source)
    }

    async fn compute(&self, coords: &[u64]) -> Result<ChunkData, RegionError> {
        let desc = &self.source_desc;
        let rank = coords.len();
        let (mut start, mut shape) = (Vec::with_capacity(rank), Vec::with_capacity(rank));
        for (d, &c) in coords.iter().enumerate() {
            let span = self.tile[d].saturating_mul(self.factors[d]);
            let s = c.saturating_mul(span).min(desc.shape[d]);
            start.push(s);
            shape.push(s.saturating_add(span).min(desc.shape[d]) - s);
        }
        let source = match self.whole_unit(&start, &shape).await? {
            Some(chunk) => TileSource::Chunk(chunk),
            None => TileSource::Box(self.read_source(&start, &shape).await?),
        };
        let (dt, method, factors, tile) =
            (desc.data_type.clone(), self.method, self.factors.clone(), self.tile.clone());
        let fill = desc.fill_value.clone();
        cpu::run(move || {
            let out = downsample::reduce(&dt, method, &factors, source.bytes(), &shape)
                .map_err(|e| RegionError::Internal(e.0))?;
            let reduced = downsample::downsampled_shape(&shape, &factors);
            Ok(ChunkData::Fixed(pad(out, &reduced, &tile, &fill)))
        })
        .await
        .map_err(|e| RegionError::Internal(e.to_string()))?
    }
}

/// The selection of the box `[start, start + shape)`.
fn box_selection(start: &[u64], shape: &[u64]) -> Selection {
    let dims = start.iter().zip(shape).map(|(&start, &len)| DimIndexer::Slice { start, step: 1, len }).collect();
    Selection { dims, mode: SelectionMode::Basic }
}

/// A tile's source: a decoded unit's own bytes, or a box read for it.
enum TileSource {
    Chunk(Arc<ChunkData>),
    Box(Vec<u8>),
}

impl TileSource {
    fn bytes(&self) -> &[u8] {
        match self {
            // `WholeUnit::read` keeps only fixed-size units.
            Self::Chunk(c) => match &**c {
                ChunkData::Fixed(b) => b,
                _ => &[],
            },
            Self::Box(b) => b,
        }
    }
}

/// `data` (C order, shape `have`) inside a box of shape `want` (at least
/// `have` in every dimension), the rest `fill`.
fn pad(data: Vec<u8>, have: &[u64], want: &[u64], fill: &[u8]) -> Vec<u8> {
    if have == want {
        return data;
    }
    let es = fill.len().max(1);
    let n: usize = want.iter().map(|&w| w as usize).product();
    let mut out = Vec::with_capacity(n * es);
    for _ in 0..n {
        out.extend_from_slice(fill);
    }
    let rank = have.len();
    if have.contains(&0) || rank == 0 {
        return out;
    }
    let row = have[rank - 1] as usize * es;
    let rows: usize = have[..rank - 1].iter().map(|&h| h as usize).product();
    for r in 0..rows {
        // The row's index in `have`, then its offset in `want`.
        let (mut rest, mut off, mut stride) = (r, 0usize, want[rank - 1] as usize);
        for d in (0..rank - 1).rev() {
            let i = rest % have[d] as usize;
            rest /= have[d] as usize;
            off += i * stride;
            stride *= want[d] as usize;
        }
        out[off * es..off * es + row].copy_from_slice(&data[r * row..(r + 1) * row]);
    }
    out
}

#[async_trait]
impl UnitCache for Tiles {
    async fn chunk(&self, key: &str) -> Result<Option<Option<Arc<ChunkData>>>, SourceError> {
        let Some(coords) = self.coords(key) else {
            return Err(SourceError::InvalidKey(format!("`{key}` is not a downsampled tile")));
        };
        match self.compute(&coords).await {
            Ok(data) => Ok(Some(Some(Arc::new(data)))),
            Err(e) => {
                let message = e.to_string();
                let mut failure = self.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                failure.get_or_insert(e);
                Err(SourceError::Unavailable(message))
            }
        }
    }
    fn ticket(&self) -> u64 {
        0
    }
    fn insert_chunk(&self, _: &str, _: Option<String>, _: Option<Arc<ChunkData>>, _: u64) {}
    async fn index(&self, _: &str) -> Result<Option<IndexEntry>, SourceError> {
        Ok(None)
    }
    fn insert_index(
        &self,
        _: &str,
        _: Option<String>,
        _: Option<Arc<crate::zarr::codec::array_to_bytes::sharding::ShardIndex>>,
        _: u64,
    ) -> u64 {
        0
    }
    fn inner(&self, _: &str, _: &[u64], _: u64) -> Option<Arc<ChunkData>> {
        None
    }
    fn insert_inner(&self, _: &str, _: Vec<u64>, _: u64, _: Arc<ChunkData>, _: u64) {}
}

/// The virtual array's store: never asked (every tile comes from [`Tiles`]).
struct NoStore;

#[async_trait]
impl ChunkSource for NoStore {
    async fn get(&self, key: &str, _: Option<ByteRangeRequest>) -> Result<Option<Bytes>, SourceError> {
        Err(SourceError::NotSupported(format!("the downsampled tile `{key}` is computed, not stored")))
    }
}

fn invalid(field: &str, reason: impl Into<String>) -> ServiceError {
    ServiceError::InvalidRequest { field: field.into(), reason: reason.into() }
}

/// Reads a selection of the downsampled array.
///
/// # Errors
/// As [`super::read::read`], and: factors of the wrong count (400 naming
/// `downsample`), a method the data type does not take or a `field` (400),
/// one downsampled element reducing more than `limits.read_slab_bytes`
/// (413), more source units than `limits.max_chunks_per_request` (413).
pub async fn read(at: &NodeRef<'_>, params: ReadParams, ds: Downsample) -> ServiceResult<DataRead> {
    let app = at.app();
    let array = node::open_array(at).await?;
    let mount = at.mount().mount().clone();
    let fill_missing = params.fill_missing.unwrap_or_else(|| mount.fill_missing_data_reads());
    let desc = array.desc.clone();
    let rank = desc.shape.len();
    if ds.factors.len() != rank {
        return Err(invalid(
            "downsample",
            format!("{} factors for an array of {rank} dimensions (shape {:?})", ds.factors.len(), desc.shape),
        ));
    }
    if params.field.is_some() {
        return Err(invalid("field", "a field cannot be read downsampled"));
    }
    downsample::check_type(&desc.data_type, ds.method).map_err(|e| invalid("downsample_method", e.0))?;
    let limits = &app.config().limits;
    let es = desc.data_type.size().unwrap_or(1) as u64;
    let factors: Vec<u64> = ds.factors.iter().zip(&desc.shape).map(|(&f, &s)| f.min(s.max(1))).collect();
    let block = factors.iter().fold(es, |a, &f| a.saturating_mul(f));
    if block > limits.read_slab_bytes {
        return Err(ServiceError::SelectionTooLarge(format!(
            "downsample: one element reduces {} bytes of the source, more than limits.read_slab_bytes = {}",
            product_text(factors.iter().copied().chain([es])),
            limits.read_slab_bytes
        )));
    }
    let ds_shape = downsample::downsampled_shape(&desc.shape, &factors);
    let tile = tile_shape(&desc, &factors, &ds_shape);
    let vdesc = Arc::new(virtual_desc(&desc, ds_shape.clone(), tile.clone()));

    let (spec, names) = (params.selection, desc.dimension_names.clone());
    let shape = ds_shape.clone();
    let sel = cpu::run_or_inline(spec.listed() <= crate::zarr::selection::INLINE_LISTED, move || {
        spec.resolve_owned(&shape, names.as_deref())
    })
    .await
    .map_err(ServiceError::Cpu)??;
    let out_type = desc.data_type.clone();
    let out_shape = sel.result_shape();
    let content_length = check_limits(app, params.format, &out_type, &out_shape)?;

    let per_elem = if params.format == WireFormat::Json { es * JSON_TEXT_PER_BYTE } else { es };
    let budget = (limits.read_slab_bytes / JSON_TEXT_PER_BYTE.min(per_elem / es.max(1)).max(1)).max(es);
    let plan_desc = vdesc.clone();
    let (plan, touched) = cpu::run_or_inline(crate::zarr::region::plan::is_cheap(&sel), move || {
        let plan = plan_read(&plan_desc, sel, budget)?;
        let touched = plan.touched_units();
        Ok::<_, crate::zarr::region::PlanError>((plan, touched))
    })
    .await
    .map_err(ServiceError::Cpu)?
    .map_err(|e| ServiceError::Internal(format!("planning a checked selection failed: {e}")))?;
    let units = source_units_per_tile(&desc, &factors, &tile);
    let source_units = touched.saturating_mul(units);
    if source_units > limits.max_chunks_per_request {
        return Err(ServiceError::SelectionTooLarge(format!(
            "the downsampled selection reads about {source_units} source chunks, more than limits.max_chunks_per_request = {}",
            limits.max_chunks_per_request
        )));
    }

    let total = out_shape.iter().fold(es, |a, &d| a.saturating_mul(d));
    // The source of a large read would only evict hot chunks.
    let fill_cache = total.saturating_mul(block / es.max(1)) <= app.chunk_cache().capacity() / 2;
    let source = Source { mount_name: at.mount_name(), mount: &mount, array: &array, fill_missing, fill_cache };
    let (ctx, tiles) = engine(app, &source, vdesc, ds.method, factors, tile);
    let job = Job {
        ctx,
        tiles,
        plan: Arc::new(plan),
        path: array.path.clone(),
        format: params.format,
        out_type: out_type.clone(),
        out_shape: out_shape.clone(),
        budget: app.read_answer_budget().clone(),
        budget_kib: limits.read_answer_budget_bytes.div_ceil(1024).max(1),
        share: if total <= SMALL_ANSWER { 0 } else { total.min(limits.read_slab_bytes).saturating_mul(4) },
    };
    let (tx, mut rx) = mpsc::channel::<ServiceResult<Pieces>>(1);
    tokio::spawn(async move {
        let result = job.produce(&tx).await;
        match result {
            Ok(true) | Ok(false) => {}
            Err(e) => {
                let _ = tx.send(Err(e)).await;
            }
        }
    });
    let (first, ended) = match rx.recv().await {
        Some(Ok(mut pieces)) => {
            let last = super::read::take_last(&mut pieces);
            (pieces, last)
        }
        Some(Err(e)) => return Err(e),
        None => return Err(ServiceError::Internal("the downsampled read stopped before its first slab".into())),
    };
    Ok(DataRead {
        shape: out_shape,
        data_type: out_type,
        format: params.format,
        content_length,
        first,
        rest: (!ended).then_some(rx),
    })
}

/// The stored array a downsampled view reads.
pub(crate) struct Source<'a> {
    /// The mount's name (the chunk cache's key).
    pub mount_name: &'a str,
    /// The mount.
    pub mount: &'a Arc<crate::storage::Mount>,
    /// The array, opened.
    pub array: &'a crate::service::node::ArrayNode,
    /// Whether missing chunks read as the fill value.
    pub fill_missing: bool,
    /// Whether decoded source chunks may enter the chunk cache (and their
    /// stored bytes the mount's object cache: otherwise they are read in
    /// bulk, `ReadRequest::bulk`).
    pub fill_cache: bool,
}

/// The virtual array's read context over [`Tiles`] of `source`.
fn engine(
    app: &crate::service::App,
    source: &Source<'_>,
    vdesc: Arc<ArrayDescription>,
    method: Method,
    factors: Vec<u64>,
    tile: Vec<u64>,
) -> (ReadCtx<'static>, Arc<Tiles>) {
    let threads = rayon::current_num_threads().max(2);
    let source_options = RegionOptions { concurrency: (threads * 4).max(8), ..RegionOptions::default() };
    let array = source.array;
    let cache = ArrayCache::new(app.chunk_cache().clone(), source.mount_name.into(), array, source.fill_cache);
    let source_ctx =
        ReadCtx::new(array.desc.clone(), Arc::new(cache), Arc::new(cpu::Pool), source.fill_missing, &source_options);
    let tiles = Arc::new(Tiles {
        source_desc: array.desc.clone(),
        source_ctx: Arc::new(source_ctx),
        store: {
            // A read too large for the chunk cache fills no storage cache either.
            let store = MountChunkStore::new(source.mount.clone(), array.path.clone());
            if source.fill_cache {
                store
            } else {
                store.bulk()
            }
        },
        method,
        factors,
        tile,
        failure: Mutex::new(None),
    });
    // Two tiles per CPU thread: one reading its source while the other is reduced.
    let tile_options = RegionOptions { concurrency: threads * 2, ..RegionOptions::default() };
    (ReadCtx::new(vdesc, tiles.clone(), Arc::new(cpu::Pool), true, &tile_options), tiles)
}

/// A downsampled view of a stored array, read box by box (what the pyramid
/// builder computes its levels with).
pub(crate) struct View {
    ctx: ReadCtx<'static>,
    tiles: Arc<Tiles>,
    path: NodePath,
    /// The downsampled shape.
    pub shape: Vec<u64>,
}

impl View {
    /// `source` downsampled by `factors` (one per dimension, each at least 1).
    ///
    /// # Errors
    /// A method the data type does not take; one block over
    /// `limits.read_slab_bytes`.
    pub(crate) fn new(
        app: &crate::service::App,
        source: &Source<'_>,
        factors: &[u64],
        method: Method,
    ) -> ServiceResult<Self> {
        let desc = &source.array.desc;
        downsample::check_type(&desc.data_type, method).map_err(|e| invalid("method", e.0))?;
        let es = desc.data_type.size().unwrap_or(1) as u64;
        let factors: Vec<u64> = factors.iter().zip(&desc.shape).map(|(&f, &s)| f.max(1).min(s.max(1))).collect();
        let block = factors.iter().fold(es, |a, &f| a.saturating_mul(f));
        let limit = app.config().limits.read_slab_bytes;
        if block > limit {
            return Err(ServiceError::SelectionTooLarge(format!(
                "downsample: one element reduces {} bytes of the source, more than limits.read_slab_bytes = {limit}",
                product_text(factors.iter().copied().chain([es]))
            )));
        }
        let shape = downsample::downsampled_shape(&desc.shape, &factors);
        let tile = tile_shape(desc, &factors, &shape);
        let vdesc = Arc::new(virtual_desc(desc, shape.clone(), tile.clone()));
        let (ctx, tiles) = engine(app, source, vdesc, method, factors, tile);
        Ok(Self { ctx, tiles, path: source.array.path.clone(), shape })
    }

    /// The box `[start, start + shape)` of the source array (not
    /// downsampled), decoded, C order: what the one-pass pyramid build
    /// reduces to every level at once.
    ///
    /// # Errors
    /// A store failure, a corrupt or (with `fill_missing` off) missing chunk.
    pub(crate) async fn read_source_box(&self, start: &[u64], shape: &[u64]) -> ServiceResult<Vec<u8>> {
        self.tiles.read_source(start, shape).await.map_err(|e| region_error(&self.path, e))
    }

    /// The box `[start, start + shape)` of the downsampled array, C order.
    ///
    /// # Errors
    /// A store failure, a corrupt or (with `fill_missing` off) missing chunk.
    pub(crate) async fn read_box(&self, start: &[u64], shape: &[u64]) -> ServiceResult<Vec<u8>> {
        let dims = start.iter().zip(shape).map(|(&start, &len)| DimIndexer::Slice { start, step: 1, len }).collect();
        let sel = Selection { dims, mode: SelectionMode::Basic };
        let plan = plan_read(self.ctx.desc(), sel, u64::MAX).map_err(|e| ServiceError::Internal(e.0))?;
        let mut out = Vec::new();
        for slab in Arc::new(plan).slabs() {
            match read_slab(&self.ctx, &NoStore, slab, u64::MAX).await {
                Ok(Some(SlabData::Fixed(b))) if out.is_empty() => out = b,
                Ok(Some(SlabData::Fixed(b))) => out.extend_from_slice(&b),
                Ok(_) => return Err(ServiceError::Internal("a downsampled box of variable-length elements".into())),
                Err(e) => {
                    let failure = self.tiles.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                    return Err(region_error(&self.path, failure.unwrap_or(e)));
                }
            }
        }
        Ok(out)
    }
}

/// Source read units (chunks, or inner chunks) one tile reads, at most.
fn source_units_per_tile(desc: &ArrayDescription, factors: &[u64], tile: &[u64]) -> u64 {
    let unit = match &desc.sharding {
        Some(s) => s.inner_chunk_shape().to_vec(),
        None => desc.chunk_shape.clone(),
    };
    unit.iter()
        .zip(factors)
        .zip(tile)
        .zip(&desc.shape)
        .map(|(((&u, &f), &t), &s)| {
            let span = t.saturating_mul(f).min(s).max(1);
            // One more when the span is not a multiple of the unit.
            span.div_ceil(u.max(1)) + u64::from(span % u.max(1) != 0)
        })
        .fold(1u64, u64::saturating_mul)
}

/// A downsampled read, checked: produced by a task, slab by slab.
struct Job {
    ctx: ReadCtx<'static>,
    tiles: Arc<Tiles>,
    plan: Arc<crate::zarr::region::ReadPlan>,
    path: NodePath,
    format: WireFormat,
    out_type: crate::zarr::data_type::DataType,
    out_shape: Vec<u64>,
    budget: Arc<tokio::sync::Semaphore>,
    budget_kib: u64,
    /// Bytes of the answer budget to hold (0: a small answer).
    share: u64,
}

impl Job {
    /// Sends every slab, the last message with the end mark; false when
    /// the client went away.
    async fn produce(&self, tx: &mpsc::Sender<ServiceResult<Pieces>>) -> ServiceResult<bool> {
        // A large answer holds its share of the answer budget while it runs.
        let _held = if self.share > 0 {
            #[allow(clippy::cast_possible_truncation)] // clamped to u32
            let kib = self.share.div_ceil(1024).clamp(1, self.budget_kib.min(u64::from(u32::MAX))) as u32;
            tokio::select! {
                permit = self.budget.clone().acquire_many_owned(kib) => Some(
                    permit.map_err(|_| ServiceError::Internal("the read answer budget is closed".into()))?,
                ),
                () = tx.closed() => return Ok(false),
            }
        } else {
            None
        };
        let mut pending: Pieces = Vec::new();
        if self.format == WireFormat::Npy {
            pending.push(Bytes::from(npy_header(&self.out_type, &self.out_shape)));
        }
        let mut json =
            (self.format == WireFormat::Json).then(|| JsonEncoder::new(self.out_type.clone(), self.out_shape.clone()));
        for slab in self.plan.slabs() {
            // One slab of a downsampled answer can stand for any amount of
            // source (a 1 MiB answer of a 1 TiB region): when the client
            // goes away (or the request times out), the read stops here,
            // between source tiles, not after the slab.
            let read = tokio::select! {
                read = read_slab(&self.ctx, &NoStore, slab, u64::MAX) => read,
                () = tx.closed() => return Ok(false),
            };
            let data = match read {
                Ok(Some(SlabData::Fixed(b))) => b,
                Ok(_) => return Err(ServiceError::Internal("a downsampled slab of variable-length elements".into())),
                Err(e) => {
                    let failure = self.tiles.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                    return Err(region_error(&self.path, failure.unwrap_or(e)));
                }
            };
            let bytes = match json.take() {
                None => data,
                Some(mut enc) => {
                    let (enc, text) = cpu::run(move || {
                        let mut text = Vec::new();
                        enc.fixed(&data, &mut text);
                        (enc, text)
                    })
                    .await
                    .map_err(ServiceError::Cpu)?;
                    json = Some(enc);
                    text
                }
            };
            if !pending.is_empty() && tx.send(Ok(std::mem::take(&mut pending))).await.is_err() {
                return Ok(false);
            }
            pending.push(Bytes::from(bytes));
        }
        if let Some(enc) = json.as_mut() {
            let mut end = Vec::new();
            enc.finish(&mut end);
            pending.push(Bytes::from(end));
        }
        pending.retain(|b| !b.is_empty());
        pending.push(Bytes::new());
        Ok(tx.send(Ok(pending)).await.is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_checked_naming_the_field() {
        let e = |f: Option<&str>, m: Option<&str>| parse(f, m).unwrap_err().to_string();
        assert!(e(Some("2,0"), Some("mean")).contains("dimension 1: a factor is at least 1"));
        assert!(e(Some("2,x"), Some("mean")).starts_with("downsample: dimension 1"));
        assert!(e(Some("99999999999999999999"), Some("mean")).starts_with("downsample: dimension 0"));
        assert!(e(Some("2"), Some("average")).starts_with("downsample_method: unknown method `average`"));
        assert!(e(Some("2"), None).starts_with("downsample_method: required"));
        assert!(e(None, Some("mean")).starts_with("downsample_method: given without"));
        assert_eq!(parse(None, None).unwrap(), None);
        let d = parse(Some("1, 4611686018427387904"), Some("max")).unwrap().unwrap();
        assert_eq!((d.factors, d.method), (vec![1, 1 << 62], Method::Max));
    }

    #[test]
    fn tiles_align_to_source_units_and_stay_bounded() {
        let doc = serde_json::json!({"zarr_format": 3, "node_type": "array", "shape": [1000, 1000],
            "data_type": "float32", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [64, 64]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]});
        let crate::zarr::metadata::NodeMetadataV3::Array(meta) =
            crate::zarr::metadata::NodeMetadataV3::from_json(&doc, "").unwrap()
        else {
            panic!("not an array")
        };
        let mut desc = ArrayDescription::from_v3(&meta).unwrap();
        // lcm(64, 3) = 192 source elements: 64 downsampled ones.
        let ds = downsample::downsampled_shape(&desc.shape, &[3, 2]);
        assert_eq!(tile_shape(&desc, &[3, 2], &ds), vec![64, 32]);
        // A box of 4 MiB at most: 1024 x 1024 x 4 bytes halves once along the first dimension.
        desc.chunk_shape = vec![1024, 1024];
        desc.shape = vec![4096, 4096];
        let ds = downsample::downsampled_shape(&desc.shape, &[1, 1]);
        assert_eq!(tile_shape(&desc, &[1, 1], &ds), vec![1024, 1024]);
        desc.chunk_shape = vec![4096, 4096];
        let t = tile_shape(&desc, &[1, 1], &ds);
        assert!(t.iter().product::<u64>() * 4 <= TILE_BYTES, "{t:?}");
    }

    #[test]
    fn padding_puts_the_reduced_box_at_the_tile_origin() {
        let out = pad(vec![1, 2, 3, 4], &[2, 2], &[3, 3], &[9]);
        assert_eq!(out, vec![1, 2, 9, 3, 4, 9, 9, 9, 9]);
        assert_eq!(pad(vec![5], &[1], &[1], &[0]), vec![5]);
    }
}
