//! The decoded-chunk read (`GET /api/v1/chunk/...`): one whole chunk (or
//! shard), or one inner chunk of a shard, read through the engine's unit
//! reads ([`region::read_chunk`], [`region::read_inner_chunk`]: the same
//! cache, shard index and conditional range reads as a slice read), then
//! streamed as the slice read's answers are, a slab at a time: raw and npy
//! answers share the decoded bytes, JSON and field answers are encoded on
//! the CPU pool.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::stream::{first_message, json_fixed, json_variable, project, AnswerLimits, Out, VarItems, SMALL_ANSWER};
use super::whole::{self, WholeUnit};
use super::{check_limits, cpu_error, npy_header, open, output_of, variable_text, ChunkParams, DataRead, Pieces};
use crate::service::array::source::region_error;
use crate::service::wire::json::JsonEncoder;
use crate::service::wire::WireFormat;
use crate::service::{cpu, NodeRef, ServiceError, ServiceResult};
use crate::zarr::chunk::ChunkData;
use crate::zarr::data_type::DataType;
use crate::zarr::field::FieldView;
use crate::zarr::region::{self, plan::VAR_ELEMENT_ESTIMATE};

fn check_coords(coords: &[u64], grid: &[u64], what: &str) -> ServiceResult<()> {
    if coords.len() != grid.len() {
        return Err(ServiceError::InvalidSelection(format!(
            "{what}: {} coordinates given, the grid has {} dimensions",
            coords.len(),
            grid.len()
        )));
    }
    for (d, (&c, &n)) in coords.iter().zip(grid).enumerate() {
        if c >= n {
            return Err(ServiceError::InvalidSelection(format!(
                "{what}: dimension {d}: chunk {c} is outside the grid ({n} chunks along it)"
            )));
        }
    }
    Ok(())
}

/// Reads one decoded chunk (a whole chunk or shard, or one inner chunk of
/// a shard), full size as stored (edge chunks include the part past the
/// array's end, holding whatever was written there: usually the fill value).
///
/// # Errors
/// As [`super::read`]; coordinates of the wrong rank or outside the grid (400
/// naming the dimension); `inner` on an array that is not sharded.
pub async fn read_chunk(at: &NodeRef<'_>, params: ChunkParams) -> ServiceResult<DataRead> {
    let app = at.app();
    let src = open(at, params.fill_missing).await?;
    let desc = &src.array.desc;
    check_coords(&params.coords, &desc.grid().grid_shape(), "coords")?;
    let shape = match (&params.inner, &desc.sharding) {
        (None, _) => desc.chunk_shape.clone(),
        (Some(inner), Some(s)) => {
            check_coords(inner, s.chunks_per_shard(), "inner")?;
            s.inner_chunk_shape().to_vec()
        }
        (Some(_), None) => {
            return Err(ServiceError::InvalidSelection(
                "inner: the array is not sharded; address its chunks with coords alone".into(),
            ))
        }
    };
    let (field, out_type, out_shape) = output_of(&desc.data_type, shape.clone(), params.field.as_deref())?;
    let content_length = check_limits(app, params.format, &out_type, &out_shape)?;
    // The key in the mount, as messages name it (and checked: 400 when the
    // chunk has no valid key).
    let key = src.array.chunk_key(&params.coords)?;
    // A compressed chunk, or inner chunk, the cache would not keep streams
    // as a slice of exactly that unit does (`whole`): decoded in pieces,
    // each sent while the next decodes.
    if field.is_none() && params.format != WireFormat::Json {
        let unit = match (&params.inner, &desc.sharding) {
            (Some(inner), Some(_)) => Some(WholeUnit::Inner(params.coords.clone(), inner.clone())),
            (None, None) => Some(WholeUnit::Chunk(params.coords.clone())),
            _ => None,
        };
        if let Some(unit) = unit {
            let budget = AnswerLimits::of(app);
            if let Some(read) = whole::read_streamed(&src, &unit, params.format, content_length, &budget).await? {
                return Ok(read);
            }
        }
    }
    let engine = src.engine(true);
    let (ctx, store) = (&engine.ctx, &engine.store);
    let data = match &params.inner {
        Some(inner) => region::read_inner_chunk(ctx, store, &params.coords, inner).await,
        None => region::read_chunk(ctx, store, &params.coords).await,
    }
    .map_err(|e| region_error(&engine.path, e))?;
    let data = match data {
        Some(d) => ChunkOut::Data(d),
        None if !src.fill_missing => {
            return Err(ServiceError::MissingChunk(match &params.inner {
                Some(i) => format!("inner chunk {i:?} of shard {:?} (key `{key}`) is missing", params.coords),
                None => format!("chunk {:?} (key `{key}`) is missing", params.coords),
            }))
        }
        // Never materialised: the answer repeats the fill value, a slab at a time.
        None => ChunkOut::Filled,
    };
    let es = desc.data_type.size().unwrap_or(0);
    let variable = desc.data_type.is_variable();
    let elements = shape.iter().fold(1u64, |a, &b| a.saturating_mul(b));
    if let ChunkOut::Data(d) = &data {
        let ok = match &**d {
            ChunkData::Fixed(b) => !variable && b.len() as u64 == elements.saturating_mul(es as u64),
            ChunkData::Variable(items) => variable && items.len() as u64 == elements,
        };
        if !ok {
            return Err(ServiceError::CorruptChunk {
                key: key.to_string(),
                reason: "decoded to the wrong number or kind of elements".into(),
            });
        }
    }
    let answer = AnswerLimits::of(app);
    let estimate = if variable { VAR_ELEMENT_ESTIMATE } else { es.max(1) as u64 };
    let small = elements.saturating_mul(estimate) <= SMALL_ANSWER;
    let message = if small { SMALL_ANSWER } else { answer.slab_bytes };
    let per = (message / es.max(1) as u64).max(1);
    // A large answer holds its share while it is written: four messages,
    // and the decoded chunk it answers from (unless it was missing).
    let held = match &data {
        ChunkOut::Data(_) if !variable => elements.saturating_mul(es as u64),
        _ => 0,
    };
    let fill_text = Arc::new(if variable { variable_text(&out_type, &desc.fill_value) } else { Vec::new() });
    let job = ChunkJob {
        data,
        fill: desc.fill_value.clone(),
        fill_text,
        es,
        variable,
        elements,
        per,
        field,
        format: params.format,
        out_type: out_type.clone(),
        out_shape: out_shape.clone(),
        share: (!small).then(|| message.saturating_mul(4).max(held)),
        answer,
    };
    let (tx, mut rx) = mpsc::channel::<ServiceResult<Pieces>>(1);
    tokio::spawn(async move {
        let mut out = Out::new(tx, message);
        let result = produce_chunk(&Arc::new(job), &mut out).await;
        out.finish(result).await;
    });
    let (first, ended) = first_message(&mut rx).await?;
    Ok(DataRead {
        shape: out_shape,
        data_type: out_type,
        format: params.format,
        content_length,
        first,
        rest: (!ended).then_some(rx),
    })
}

/// A decoded chunk to answer, or a missing one (the fill value).
#[derive(Debug)]
enum ChunkOut {
    Data(Arc<ChunkData>),
    Filled,
}

/// A decoded chunk's bytes, shared (never copied) into the answer.
struct ChunkBytes(Arc<ChunkData>);

impl AsRef<[u8]> for ChunkBytes {
    fn as_ref(&self) -> &[u8] {
        match &*self.0 {
            ChunkData::Fixed(b) => b,
            ChunkData::Variable(_) => &[],
        }
    }
}

/// One decoded chunk read, streamed in slabs of `per` elements.
#[derive(Debug)]
struct ChunkJob {
    data: ChunkOut,
    fill: Vec<u8>,
    /// The fill value's JSON text (variable-length types).
    fill_text: Arc<Vec<u8>>,
    es: usize,
    variable: bool,
    elements: u64,
    per: u64,
    field: Option<FieldView>,
    format: WireFormat,
    out_type: DataType,
    out_shape: Vec<u64>,
    /// The share of the answer budget a large answer takes.
    share: Option<u64>,
    answer: AnswerLimits,
}

impl ChunkJob {
    /// Fixed-size elements `range` (a copy of that part only).
    #[allow(clippy::cast_possible_truncation)] // ranges inside the chunk, which is in memory (or at most `per`)
    fn fixed(&self, range: Range<u64>) -> Vec<u8> {
        let (a, b) = (range.start as usize, range.end as usize);
        match &self.data {
            ChunkOut::Data(d) => match &**d {
                ChunkData::Fixed(bytes) => bytes[a * self.es..b * self.es].to_vec(),
                ChunkData::Variable(_) => Vec::new(),
            },
            ChunkOut::Filled => self.fill.repeat(b - a),
        }
    }
}

/// Sends a decoded chunk read's body: raw and npy answers share the decoded
/// bytes (or one slab of fill values, sent as often as needed); JSON and
/// field answers are encoded a slab at a time on the CPU pool, in pieces of
/// about a message; variable-length elements are answered from the decoded
/// chunk itself (never copied), the fill value's text repeated.
async fn produce_chunk(job: &Arc<ChunkJob>, out: &mut Out) -> ServiceResult<bool> {
    if let Some(bytes) = job.share {
        let Some(held) = job.answer.share(bytes, &out.tx).await? else {
            return Ok(false); // Gone while waiting for the share.
        };
        out.share = Some(held);
    }
    if job.format == WireFormat::Npy {
        out.push(Bytes::from(npy_header(&job.out_type, &job.out_shape)));
    }
    let mut json =
        (job.format == WireFormat::Json).then(|| JsonEncoder::new(job.out_type.clone(), job.out_shape.clone()));
    if job.variable {
        let Some(enc) = json.as_mut() else {
            return Err(ServiceError::UnsupportedFormat(
                "variable-length elements are answered in JSON only (format=json)".into(),
            ));
        };
        let data = match &job.data {
            ChunkOut::Data(d) => Some(d.clone()),
            ChunkOut::Filled => None,
        };
        let n = usize::try_from(job.elements).map_err(|_| ServiceError::Internal("chunk too large".into()))?;
        let items: Arc<dyn VarItems> = Arc::new(ChunkItems(data, n));
        let mut text = 0;
        if !json_variable(enc, items, job.fill_text.clone(), job.answer.max_selection, &mut text, out).await? {
            return Ok(false);
        }
    } else {
        let plain = json.is_none() && job.field.is_none();
        #[allow(clippy::cast_possible_truncation)] // at most one slab
        let shared: Option<Bytes> = match (&job.data, plain) {
            (ChunkOut::Data(d), true) => Some(Bytes::from_owner(ChunkBytes(d.clone()))),
            (ChunkOut::Filled, true) => Some(Bytes::from(job.fill.repeat(job.per.min(job.elements) as usize))),
            _ => None,
        };
        let mut at = 0u64;
        while at < job.elements {
            let end = at.saturating_add(job.per).min(job.elements);
            #[allow(clippy::cast_possible_truncation)] // inside the chunk or the fill slab
            let alive = match (&shared, &job.data) {
                (Some(b), ChunkOut::Data(_)) => {
                    out.push(b.slice(at as usize * job.es..end as usize * job.es));
                    out.flush(false).await
                }
                (Some(b), ChunkOut::Filled) => {
                    out.push(b.slice(..(end - at) as usize * job.es));
                    out.flush(false).await
                }
                (None, _) => {
                    let j = job.clone();
                    let slab = cpu::run(move || j.fixed(at..end)).await.map_err(|e| cpu_error(&e))?;
                    let bytes = project(job.field.as_ref(), slab).await?;
                    match json.as_mut() {
                        Some(enc) => json_fixed(enc, bytes, job.out_type.size().unwrap_or(1), out).await?,
                        None => {
                            out.push(Bytes::from(bytes));
                            out.flush(false).await
                        }
                    }
                }
            };
            if !alive {
                return Ok(false);
            }
            at = end;
        }
    }
    if let Some(enc) = json.as_mut() {
        let mut end = Vec::new();
        enc.finish(&mut end);
        out.push(Bytes::from(end));
    }
    Ok(true)
}

/// A decoded chunk's elements (or, `None`, `n` fill values).
struct ChunkItems(Option<Arc<ChunkData>>, usize);

impl VarItems for ChunkItems {
    fn len(&self) -> usize {
        self.1
    }
    fn get(&self, i: usize) -> Option<&[u8]> {
        match self.0.as_deref() {
            Some(ChunkData::Variable(items)) => items.get(i).map(Vec::as_slice),
            _ => None,
        }
    }
}
