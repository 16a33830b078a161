//! Pyramids: an array turned into an OME-Zarr multiscale group, as a job
//! (`POST /api/v1/pyramids/{mount}/{path}`).
//!
//! Specs: OME-Zarr 0.5 (`reference/ome-zarr-0.5.bs`: `attributes.ome` of a
//! v3 group, `dimension_names` on every level) for Zarr v3 sources, 0.4
//! (`reference/ome-zarr-0.4.bs`: `multiscales` in the group's `.zattrs`)
//! for v2; `multiscales[0]` has `axes` (from the dimension names: `x`, `y`,
//! `z` are `space`, `t`/`time` `time`, `c`/`channel` `channel`; unnamed
//! arrays of 2 to 5 dimensions get `[t,] [c,] [z,] y, x`) and per level a
//! `scale` transformation (the cumulative factors).
//!
//! Layout: the group is written at `destination` (default
//! `<path>_pyramid`) in the same mount; level `0` is a copy of the source,
//! key for key (chunks and shards as stored, never decoded or re-encoded;
//! its metadata gains `dimension_names`), and the source is never changed:
//! a failed or cancelled build cannot damage it. Level `k` has the source's
//! data type and fill value, the requested chunk shape and codecs (default
//! the source's; checked in [`options`]), and shape `ceil(shape_{k-1} / f_k)`
//! for the factors `f_k` of that level (the same at every level, or given
//! per level).
//!
//! The levels after level 0 are computed in one pass over level 0
//! ([`onepass`]: each block of level 0 read once and reduced to every level
//! at once; `mean`, `median` and `mode` by the cumulative factors, `stride`,
//! `min` and `max` chained, both exact), so every level equals TensorStore's
//! `downsample` of level 0 by its cumulative factors. Levels the pass cannot
//! hold in memory are computed after it through the downsampled view
//! ([`super::array::downsample`]), from level 0 (or, chaining, from the
//! level before). Chunks (shards) are written through the normal write path
//! (per-key locks, conditional writes, cache invalidation), several at once.
//!
//! Resuming: progress is derived from the store. A level's chunk that
//! exists is done (every put is atomic); one that does not is computed
//! (again, if it was all fill value and so never stored). The group's
//! `multiscales` metadata is written last, so a group with it is complete:
//! the same request after a crash, a restart or a cancel skips what is
//! there and finishes the rest.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::stream::{self, StreamExt, TryStreamExt};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use utoipa::ToSchema;

use super::array::downsample::{Source, View};
use super::jobs::{Job, JobState, JobStatus};
use super::node::{self, ArrayNode, AttributeUpdate, NodePath, OpenMode};
use super::{App, ServiceError, ServiceResult};
use crate::storage::{PutCondition, StorageError};
use crate::zarr::array::ZarrFormat;
use crate::zarr::downsample::Method;
use crate::zarr::region::SourceError;

mod onepass;
mod options;

use options::Factors;

/// The most levels a pyramid may have (level 0 included).
pub const MAX_LEVELS: usize = 32;

/// The most chunks (shards) a pyramid may have, all levels together: far
/// beyond any real pyramid, and a bound on the job's counters.
const MAX_CHUNKS: u64 = 1 << 40;

/// The group attribute that marks a destination as a pyramid job's own
/// (`{"zarrd_pyramid": {"job": "pyramid-..."}}`): only the same request
/// writes into it again (resuming); any other existing node or data at the
/// destination is a conflict.
const MARK: &str = "zarrd_pyramid";

/// Up to how many stored objects of the source the end-of-job check lists
/// to find data written while the job ran (beyond that, only the source's
/// metadata is checked; about 150 bytes each).
const CHANGE_CHECK_OBJECTS: usize = 1 << 18;

/// Chunks of one level computed (or copied) at once (each reads its
/// tiles concurrently too).
const CONCURRENCY: usize = 2;

/// Bytes of level 0's stored chunks (shards) a job holds while copying
/// them: a chunk takes its size (this much at most) before it is read.
const COPY_BUDGET: u64 = 256 << 20;

/// A pyramid request.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"method": "mean", "factors": [1, 2, 2], "levels": 4}))]
pub struct PyramidRequest {
    /// The multiscale group's path in the mount (default `<path>_pyramid`).
    pub destination: Option<String>,
    /// `stride`, `mean` (default), `median`, `mode`, `min` or `max`.
    #[schema(value_type = Option<String>, example = "mean")]
    pub method: Option<Method>,
    /// The factors from one level to the next: one list (a factor per
    /// dimension, the same at every level; default 2 on `space` axes, 1 on
    /// the others), or one such list per level after level 0 (`[[1, 2, 2],
    /// [2, 2, 2]]`: the number of levels follows). Each factor 1 to 2^20.
    #[schema(value_type = Option<Vec<Object>>, example = json!([1, 2, 2]))]
    pub factors: Option<Value>,
    /// Levels in all, level 0 included (1 to 32; default: until the
    /// coarsest level is at most `coarsest`).
    pub levels: Option<u64>,
    /// The coarsest size: levels are added until every dimension whose
    /// factor is above 1 has at most this extent (one number for every
    /// dimension, or one per dimension; default the levels' chunk shape:
    /// until a level fits in one chunk). Not with `levels` or per-level
    /// factors.
    #[schema(value_type = Option<Object>, example = 64)]
    pub coarsest: Option<Value>,
    /// The chunk shape of the levels after level 0 (default the source's;
    /// a sharded source's: the shard shape, its inner chunk shape kept
    /// unless `codecs` gives another sharding codec).
    #[schema(value_type = Option<Vec<u64>>)]
    pub chunks: Option<Value>,
    /// Zarr v3: the codecs of the levels after level 0, as in `zarr.json`
    /// (default the source's).
    #[schema(value_type = Option<Vec<Object>>)]
    pub codecs: Option<Value>,
    /// Zarr v2: the compressor of the levels after level 0, as in `.zarray`
    /// (`null`: none; default the source's).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    pub compressor: Option<Value>,
    /// Zarr v2: the filters of the levels after level 0, as in `.zarray`
    /// (`null`: none; default the source's).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub filters: Option<Value>,
}

/// A member that is present, `null` included.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A request, checked: what the job builds.
#[derive(Debug, Clone)]
struct Plan {
    method: Method,
    /// The factors from level `k` to level `k + 1`, one list per level
    /// after level 0.
    steps: Vec<Vec<u64>>,
    /// Shapes of the levels, level 0 first.
    shapes: Vec<Vec<u64>>,
    axes: Vec<(String, Option<&'static str>)>,
    destination: NodePath,
    format: ZarrFormat,
    /// The document of the levels after level 0 (the source's, with the
    /// requested chunk shape and codecs; shape and names set per level).
    level_doc: Value,
    /// Their chunk (shard) shape.
    level_chunks: Vec<u64>,
}

impl Plan {
    /// The cumulative factors of every level, level 0 first.
    fn cumulative(&self) -> Vec<Vec<u64>> {
        let mut all = vec![vec![1u64; self.shapes[0].len()]];
        for step in &self.steps {
            let last = all.last().cloned().unwrap_or_default();
            all.push(last.iter().zip(step).map(|(&c, &f)| c.saturating_mul(f)).collect());
        }
        all
    }
}

fn invalid(field: &str, reason: impl Into<String>) -> ServiceError {
    ServiceError::InvalidRequest { field: field.into(), reason: reason.into() }
}

/// The axes: names and OME types, from the dimension names.
fn axes_of(names: Option<&[Option<String>]>, rank: usize) -> ServiceResult<Vec<(String, Option<&'static str>)>> {
    if !(2..=5).contains(&rank) {
        return Err(invalid("path", format!("OME-Zarr images have 2 to 5 dimensions; this array has {rank}")));
    }
    let names: Vec<String> = match names {
        Some(n) if n.iter().all(Option::is_some) => n.iter().map(|s| s.clone().unwrap_or_default()).collect(),
        _ => ["t", "c", "z", "y", "x"][5 - rank..].iter().map(|s| (*s).to_string()).collect(),
    };
    let mut seen = std::collections::HashSet::new();
    for n in &names {
        if !seen.insert(n.as_str()) {
            return Err(invalid("path", format!("the dimension name `{n}` repeats; OME-Zarr axes are unique")));
        }
    }
    Ok(names
        .into_iter()
        .map(|n| {
            let kind = match n.to_ascii_lowercase().as_str() {
                "x" | "y" | "z" => Some("space"),
                "t" | "time" => Some("time"),
                "c" | "channel" => Some("channel"),
                _ => None,
            };
            (n, kind)
        })
        .collect())
}

fn plan(array: &ArrayNode, req: &PyramidRequest, limits: &crate::zarr::array::ArrayLimits) -> ServiceResult<Plan> {
    let desc = &array.desc;
    let rank = desc.shape.len();
    let axes = axes_of(desc.dimension_names.as_deref(), rank)?;
    let method = req.method.unwrap_or(Method::Mean);
    crate::zarr::downsample::check_type(&desc.data_type, method).map_err(|e| invalid("method", e.0))?;
    let factors = match &req.factors {
        Some(f) => options::parse_factors(f, rank, MAX_LEVELS)?,
        None => Factors::Same(axes.iter().map(|(_, k)| if *k == Some("space") { 2 } else { 1 }).collect()),
    };
    // One list of factors of 1 everywhere (given, or the default when no
    // dimension is a space axis), levels left to them: a pyramid of level 0
    // alone (with `levels`, or per level, the check below names the level
    // that would not be smaller).
    if req.levels.is_none() && matches!(&factors, Factors::Same(f) if f.iter().all(|&x| x == 1)) {
        let why = if req.factors.is_some() {
            "every factor is 1: no level would be smaller than level 0"
        } else {
            "every factor is 1 (by default only `space` axes are downsampled, and no dimension name is one): give `factors`"
        };
        return Err(invalid("factors", why));
    }
    if let Some(n) = req.levels {
        if !(1..=MAX_LEVELS as u64).contains(&n) {
            return Err(invalid("levels", format!("{n} is not between 1 and {MAX_LEVELS}")));
        }
        if let Factors::PerLevel(l) = &factors {
            if n != l.len() as u64 + 1 {
                return Err(invalid("levels", format!("{n} levels, but factors are given for {}", l.len() + 1)));
            }
        }
    }
    let coarsest = match &req.coarsest {
        None => None,
        Some(_) if req.levels.is_some() => return Err(invalid("coarsest", "give `levels` or `coarsest`, not both")),
        Some(_) if matches!(factors, Factors::PerLevel(_)) => {
            return Err(invalid("coarsest", "per-level factors give the levels; `coarsest` takes one list of factors"))
        }
        Some(c) => Some(options::parse_coarsest(c, rank)?),
    };
    let layout = options::Layout {
        chunks: req.chunks.as_ref().map(|c| options::parse_chunks(c, rank)).transpose()?,
        codecs: req.codecs.as_ref(),
        compressor: req.compressor.as_ref(),
        filters: req.filters.as_ref(),
    };
    let (level_doc, level_chunks) = options::level_template(&array.metadata, desc.zarr_format, &layout, limits)?;
    let mut shapes = vec![desc.shape.clone()];
    let steps = match factors {
        Factors::PerLevel(steps) => {
            for step in &steps {
                let last = shapes.last().cloned().unwrap_or_default();
                shapes.push(crate::zarr::downsample::downsampled_shape(&last, step));
            }
            steps
        }
        Factors::Same(factors) => {
            // Default: until a level fits in one of the levels' chunks.
            let target = coarsest.unwrap_or_else(|| level_chunks.clone());
            loop {
                let last = shapes.last().cloned().unwrap_or_default();
                let next = crate::zarr::downsample::downsampled_shape(&last, &factors);
                let enough = match req.levels {
                    Some(n) => shapes.len() as u64 >= n,
                    // Until every downsampled dimension is at most the
                    // target, or the levels stop shrinking.
                    None => {
                        last.iter().zip(&target).zip(&factors).all(|((&s, &t), &f)| f == 1 || s <= t) || next == last
                    }
                };
                if enough || shapes.len() >= MAX_LEVELS {
                    break;
                }
                shapes.push(next);
            }
            vec![factors; shapes.len() - 1]
        }
    };
    let destination = match &req.destination {
        Some(d) => NodePath::new(d).map_err(|e| invalid("destination", e.to_string()))?,
        None => NodePath::new(&format!("{}_pyramid", array.path.as_str()))?,
    };
    // Inside the source array there is no place for a group.
    let inside = !array.path.is_root() && destination.as_str().starts_with(&format!("{}/", array.path.as_str()));
    if destination.is_root() || destination == array.path || inside || array.path.is_root() && !destination.is_root() {
        return Err(invalid("destination", "must be a new path beside the source"));
    }
    // Every level smaller than the one before (a level of factors 1 would
    // be a full copy), and a number of chunks the counters can hold.
    for (k, pair) in shapes.windows(2).enumerate() {
        if pair[0] == pair[1] {
            let field = if req.levels.is_some() { "levels" } else { "factors" };
            return Err(invalid(
                field,
                format!("level {} would be as large as level {k} ({:?}): every level must be smaller", k + 1, pair[1]),
            ));
        }
    }
    let mut chunks_total = 0u64;
    for (k, shape) in shapes.iter().enumerate() {
        let chunk = if k == 0 { &desc.chunk_shape } else { &level_chunks };
        let n = shape
            .iter()
            .zip(chunk)
            .try_fold(1u64, |n, (&s, &c)| n.checked_mul(s.div_ceil(c.max(1))))
            .and_then(|n| chunks_total.checked_add(n))
            .filter(|&t| t <= MAX_CHUNKS);
        chunks_total = n.ok_or_else(|| {
            invalid("levels", format!("the pyramid would have more than {MAX_CHUNKS} chunks (level {k}: {shape:?})"))
        })?;
    }
    Ok(Plan { method, steps, shapes, axes, destination, format: desc.zarr_format, level_doc, level_chunks })
}

/// The job id of a request: the same request (mount, path, body) finds
/// the same job, before and after a restart.
fn job_id(mount: &str, path: &str, plan: &Plan) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (mount, path, plan.destination.as_str(), plan.method.name(), &plan.steps, plan.shapes.len()).hash(&mut h);
    // The levels' layout.
    plan.level_chunks.hash(&mut h);
    for member in ["codecs", "compressor", "filters"] {
        plan.level_doc.get(member).map(Value::to_string).hash(&mut h);
    }
    format!("pyramid-{:016x}", h.finish())
}

/// Starts (or finds) the job building the pyramid of the array at `at`.
///
/// # Errors
/// A request that does not fit the array (400 naming the member), a
/// read-only mount, the array's own errors.
pub async fn start(app: &Arc<App>, at: &super::NodeRef<'_>, req: PyramidRequest) -> ServiceResult<JobStatus> {
    at.writable()?;
    let array = node::open_array(at).await?;
    let plan = plan(&array, &req, &node::array_limits(app))?;
    let mount = at.mount_name().to_string();
    let id = job_id(&mount, array.path.as_str(), &plan);
    claim_destination(app, &mount, &plan, &id).await?;
    let job = Job::new(id, mount.clone(), array.path.as_str().into(), plan.destination.as_str().into());
    let (job, new) = app.jobs().start(job)?;
    if !new {
        return Ok(job.status());
    }
    job.levels.store(plan.shapes.len() as u64, Ordering::Relaxed);
    let (app2, job2) = (app.clone(), job.clone());
    let task = tokio::spawn(async move {
        tracing::info!(target: "zarrd::jobs", job = %job2.id, mount = %job2.mount, path = %job2.path,
            destination = %job2.destination, levels = plan.shapes.len(), method = %plan.method, "pyramid job started");
        let result = run(&app2, &job2, &plan, &array).await;
        let status = job2.status();
        match result {
            Ok(()) => {
                job2.finish(JobState::Completed, None);
                tracing::info!(target: "zarrd::jobs", job = %job2.id, chunks = status.chunks_done,
                    skipped = status.chunks_skipped, bytes = status.bytes_written,
                    seconds = status.elapsed_seconds, "pyramid job completed");
            }
            Err(e) => {
                tracing::warn!(target: "zarrd::jobs", job = %job2.id, error = %e, "pyramid job failed");
                job2.finish(JobState::Failed, Some(e.to_string()));
            }
        }
    });
    job.set_task(task.abort_handle());
    Ok(job.status())
}

/// The destination's group document: a group marked as this job's.
fn group_document(plan: &Plan, id: &str) -> Value {
    let attributes = json!({ MARK: {"job": id} });
    match plan.format {
        ZarrFormat::V3 => json!({"zarr_format": 3, "node_type": "group", "attributes": attributes}),
        ZarrFormat::V2 => json!({"zarr_format": 2, "attributes": attributes}),
    }
}

/// Checks that the destination is free or this request's own pyramid: a
/// group marked with this job's id (a partial or complete build of the same
/// request) is resumed; any other node, or any data stored under the path,
/// is a conflict — a pyramid never writes into data it did not make.
async fn claim_destination(app: &App, mount: &str, plan: &Plan, id: &str) -> ServiceResult<()> {
    let at = app.node(mount, &plan.destination)?;
    let taken = |what: &str| {
        ServiceError::Conflict(format!(
            "destination `{}` {what}; a pyramid is written only to a new path (or resumed by the request that \
             started it): delete it or choose another `destination`",
            plan.destination
        ))
    };
    // Below an array nothing can be created (the job would start and fail).
    if let Some(a) = node::array_ancestor(&at).await? {
        return Err(ServiceError::InvalidRequest {
            field: "destination".into(),
            reason: format!("`{}` is inside the array `{a}`; a pyramid goes where a group can be", plan.destination),
        });
    }
    match node::open(&at).await {
        Ok(node::Node::Group(g)) => match mark_of(&g) {
            Some(job) if job == id => Ok(()),
            Some(_) => Err(taken("holds a pyramid built by another request (other method, factors or layout)")),
            None => Err(taken("is an existing group")),
        },
        Ok(node::Node::Array(_)) => Err(taken("is an existing array")),
        Err(ServiceError::NodeNotFound { .. }) => {
            let mount = app.mount(mount)?;
            if mount.storage().list_recursive(&plan.destination.prefix()?, 1).await?.is_empty() {
                Ok(())
            } else {
                Err(taken("holds stored objects"))
            }
        }
        Err(e) => Err(e),
    }
}

/// Fails the job when the source changed while it ran: its array document
/// (shape, data type, codecs — attributes aside), or, for sources of up to
/// [`CHANGE_CHECK_OBJECTS`] stored objects, any object written after the
/// destination group was created (the store's clock on both sides). The
/// levels would mix old and new data; the caller deletes the destination
/// and asks again.
async fn check_source_unchanged(app: &App, mount_name: &str, plan: &Plan, source: &ArrayNode) -> ServiceResult<()> {
    let mount = app.mount(mount_name)?;
    let changed = |what: String| {
        ServiceError::Conflict(format!(
            "the source `{}` changed while its pyramid was built ({what}); the levels may mix old and new data: \
             delete `{}` and request the pyramid again",
            source.path, plan.destination
        ))
    };
    let strip = |doc: &Value| {
        let mut doc = doc.clone();
        if let Some(obj) = doc.as_object_mut() {
            obj.remove("attributes");
        }
        doc
    };
    let doc_name = match plan.format {
        ZarrFormat::V3 => "zarr.json",
        ZarrFormat::V2 => ".zarray",
    };
    let max = node::documents::DocumentGate::of(app).max_bytes();
    let now = match node::read_document(mount, &source.path.key(doc_name)?, max).await? {
        Some(read) => serde_json::from_slice::<Value>(&read.body).map_err(|e| changed(format!("{doc_name}: {e}")))?,
        None => return Err(changed(format!("{doc_name} was deleted"))),
    };
    if strip(&now) != strip(&source.metadata) {
        return Err(changed(format!("its {doc_name}")));
    }
    let group_doc = match plan.format {
        ZarrFormat::V3 => "zarr.json",
        ZarrFormat::V2 => ".zgroup",
    };
    let Some(since) = head(mount, &plan.destination.key(group_doc)?).await?.and_then(|m| m.last_modified) else {
        return Ok(());
    };
    let listed = mount.storage().list_recursive(&source.path.prefix()?, CHANGE_CHECK_OBJECTS + 1).await?;
    if listed.len() > CHANGE_CHECK_OBJECTS {
        return Ok(());
    }
    let documents = ["zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"];
    if let Some((key, _)) = listed
        .iter()
        .find(|(key, meta)| !documents.contains(&key.as_str()) && meta.last_modified.is_some_and(|t| t > since))
    {
        return Err(changed(format!("`{key}` was written after the job started")));
    }
    Ok(())
}

/// A level's array document: the source's (level 0) or the levels'
/// template, with the level's shape and the axes as dimension names (v3).
fn level_document(array: &ArrayNode, level: usize, plan: &Plan) -> Value {
    let shape = &plan.shapes[level];
    let mut doc = if level == 0 { array.metadata.clone() } else { plan.level_doc.clone() };
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("shape".into(), json!(shape));
        match plan.format {
            ZarrFormat::V3 => {
                let names: Vec<&str> = plan.axes.iter().map(|(n, _)| n.as_str()).collect();
                obj.insert("dimension_names".into(), json!(names));
                obj.insert("attributes".into(), json!({}));
            }
            ZarrFormat::V2 => {
                obj.remove("attributes");
            }
        }
    }
    doc
}

/// The group's multiscales attributes.
fn multiscales(plan: &Plan, name: &str) -> Map<String, Value> {
    let axes: Vec<Value> = plan
        .axes
        .iter()
        .map(|(n, k)| match k {
            Some(k) => json!({"name": n, "type": k}),
            None => json!({"name": n}),
        })
        .collect();
    let mut datasets = Vec::new();
    for (level, cumulative) in plan.cumulative().iter().enumerate() {
        #[allow(clippy::cast_precision_loss)] // a scale, not an index
        let scale: Vec<f64> = cumulative.iter().map(|&c| c as f64).collect();
        datasets.push(json!({"path": level.to_string(),
            "coordinateTransformations": [{"type": "scale", "scale": scale}]}));
    }
    let mut entry = json!({"name": name, "axes": axes, "datasets": datasets,
        "type": plan.method.name(), "metadata": {"method": format!("zarrd downsample {}", plan.method)}});
    let mut attrs = Map::new();
    match plan.format {
        ZarrFormat::V3 => {
            attrs.insert("ome".into(), json!({"version": "0.5", "multiscales": [entry]}));
        }
        ZarrFormat::V2 => {
            entry["version"] = json!("0.4");
            attrs.insert("multiscales".into(), json!([entry]));
        }
    }
    attrs
}

/// Creates (or opens) a node from `doc` at `path`; the node as stored.
async fn ensure(app: &App, mount: &str, path: &NodePath, doc: &Value) -> ServiceResult<node::Node> {
    let (new, _) = node::parse_create_body(doc)?;
    let at = app.node(mount, path)?;
    Ok(node::create(&at, &new, OpenMode { create: true, open: true, delete_existing: false }).await?.node)
}

/// The id of the job whose pyramid the group is (its [`MARK`]), if any.
fn mark_of(g: &node::GroupNode) -> Option<&str> {
    g.attributes.get(MARK).and_then(|m| m.get("job")).and_then(Value::as_str)
}

/// Every chunk (shard) coordinate of a grid, C order.
fn grid_coords(shape: &[u64], chunk: &[u64]) -> impl Iterator<Item = Vec<u64>> {
    let grid: Vec<u64> = shape.iter().zip(chunk).map(|(&s, &c)| s.div_ceil(c.max(1))).collect();
    // The plan bounds every level's chunk count (`MAX_CHUNKS`).
    let n = grid.iter().try_fold(1u64, |n, &g| n.checked_mul(g)).unwrap_or(0);
    (0..n).map(move |mut i| {
        let mut c = vec![0u64; grid.len()];
        for d in (0..grid.len()).rev() {
            c[d] = i % grid[d];
            i /= grid[d];
        }
        c
    })
}

async fn head(
    mount: &crate::storage::Mount,
    key: &crate::storage::StoreKey,
) -> ServiceResult<Option<crate::storage::ObjectMeta>> {
    match mount.storage().head(key).await {
        Ok(meta) => Ok(Some(meta)),
        Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Reads one key whole in bulk (filling no cache: a pyramid reads every
/// chunk of level 0 once); `None` when it does not exist.
/// A stored value larger than `max_len` (more than any encoding of its
/// chunk can take) is damage, refused from its size before it is read.
async fn read_bulk(
    mount: &crate::storage::Mount,
    key: &crate::storage::StoreKey,
    max_len: u64,
) -> ServiceResult<Option<bytes::Bytes>> {
    let req = crate::storage::ReadRequest { bulk: true, max_len: Some(max_len), ..Default::default() };
    match mount.storage().read(key, &req).await {
        Ok(outcome) => Ok(Some(outcome.body)),
        Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => Ok(None),
        Err(StorageError::TooLarge { size, limit, .. }) => Err(too_large(key, size, limit)),
        Err(e) => Err(e.into()),
    }
}

/// A stored chunk at `key` of `size` bytes, above the `limit` any encoding
/// of it can take: damage.
fn too_large(key: &crate::storage::StoreKey, size: u64, limit: u64) -> ServiceError {
    ServiceError::CorruptChunk { key: key.to_string(), reason: SourceError::too_large(size, limit).to_string() }
}

async fn exists(mount: &crate::storage::Mount, key: &crate::storage::StoreKey) -> ServiceResult<bool> {
    Ok(head(mount, key).await?.is_some())
}

/// Creates (or opens) level `level`'s array and checks that an existing
/// one has the layout the plan writes (a group left by a request with
/// other chunks or codecs is not mixed into).
async fn ensure_level(
    app: &App,
    mount: &str,
    path: &NodePath,
    doc: &Value,
    level: usize,
) -> ServiceResult<Arc<ArrayNode>> {
    ensure(app, mount, path, doc).await?;
    let array = node::open_array(&app.node(mount, path)?).await?;
    for member in ["chunk_grid", "codecs", "chunks", "compressor", "filters"] {
        if array.metadata.get(member) != doc.get(member) {
            return Err(ServiceError::Conflict(format!(
                "level {level} of the pyramid (`{path}`) exists with another `{member}` than this request's; \
                 delete it or choose another destination"
            )));
        }
    }
    Ok(array)
}

async fn run(app: &Arc<App>, job: &Job, plan: &Plan, source: &ArrayNode) -> ServiceResult<()> {
    let mount_name = job.mount.as_str();
    let mount = app.mount(mount_name)?.clone();
    let chunk0 = source.desc.chunk_shape.clone();
    let total: u64 = plan
        .shapes
        .iter()
        .enumerate()
        .map(|(k, s)| grid_coords(s, if k == 0 { &chunk0 } else { &plan.level_chunks }).size_hint().0 as u64)
        .fold(0, u64::saturating_add);
    job.total.store(total, Ordering::Relaxed);
    // Of several requests that passed the destination check at once (in
    // this process or another), one created the group (a conditional
    // write); the others find its mark and stop before writing a level.
    let group = ensure(app, mount_name, &plan.destination, &group_document(plan, &job.id)).await?;
    let mark = match &group {
        node::Node::Group(g) => mark_of(g),
        node::Node::Array(_) => None,
    };
    if mark != Some(job.id.as_str()) {
        return Err(ServiceError::Conflict(format!(
            "destination `{}` was taken by another pyramid request (job {}) as this one started; nothing was \
             written: delete it or choose another `destination`",
            plan.destination,
            mark.unwrap_or("none")
        )));
    }
    let level_path = |k: usize| plan.destination.child(&k.to_string());

    // Level 0: the source's chunks, key for key.
    let path0 = level_path(0)?;
    let level0 = ensure_level(app, mount_name, &path0, &level_document(source, 0, plan), 0).await?;
    let budget_kib = u32::try_from(COPY_BUDGET / 1024).unwrap_or(u32::MAX);
    let budget = Arc::new(tokio::sync::Semaphore::new(budget_kib as usize));
    let max_stored = source.desc.max_stored_chunk_bytes();
    stream::iter(grid_coords(&plan.shapes[0], &chunk0))
        .map(|coords| {
            let (mount, source, level0, budget) = (&mount, source, &level0, budget.clone());
            async move {
                let from = source.chunk_key(&coords)?;
                let to = level0.chunk_key(&coords)?;
                if exists(mount, &to).await? {
                    job.skipped.fetch_add(1, Ordering::Relaxed);
                } else if let Some(meta) = head(mount, &from).await? {
                    if meta.size > max_stored {
                        return Err(too_large(&from, meta.size, max_stored));
                    }
                    // Large shards are copied fewer at a time.
                    let kib = u32::try_from(meta.size.div_ceil(1024)).unwrap_or(u32::MAX).clamp(1, budget_kib);
                    let _held = budget
                        .acquire_many_owned(kib)
                        .await
                        .map_err(|_| ServiceError::Internal("the copy budget is closed".into()))?;
                    let Some(bytes) = read_bulk(mount, &from, max_stored).await? else {
                        return Err(ServiceError::Conflict(format!("`{from}` vanished while the pyramid copied it")));
                    };
                    job.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    mount.put(&to, bytes, &PutCondition::default()).await?;
                }
                job.done.fetch_add(1, Ordering::Relaxed);
                Ok::<_, ServiceError>(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<()>()
        .await?;

    // Every level's array, then one pass over level 0 for the levels it
    // can build ([`onepass`]), then any further level through the
    // downsampled view.
    let cumulative = plan.cumulative();
    let mut levels = Vec::with_capacity(plan.shapes.len());
    for k in 1..plan.shapes.len() {
        let path = level_path(k)?;
        let array = ensure_level(app, mount_name, &path, &level_document(source, k, plan), k).await?;
        levels.push(onepass::Level { array, path });
    }
    let es = source.desc.data_type.size().unwrap_or(1) as u64;
    let slab = app.config().limits.read_slab_bytes;
    let scheme = onepass::scheme(&plan.shapes, &cumulative, &plan.level_chunks, es, slab, slab.saturating_mul(2));
    tracing::info!(target: "zarrd::jobs", job = %job.id, streamed = scheme.streamed, held = scheme.held,
        block = ?scheme.block, levels = plan.shapes.len(), "pyramid levels: one pass over level 0");
    if scheme.streamed > 0 {
        job.level.store(1, Ordering::Relaxed);
        let ones = vec![1u64; plan.shapes[0].len()];
        let view = View::new(
            app,
            &Source { mount_name, mount: &mount, array: &level0, fill_missing: true, fill_cache: false },
            &ones,
            plan.method,
        )?;
        onepass::run(app, job, plan, &scheme, &view, &levels).await?;
    }
    let composes = matches!(plan.method, Method::Stride | Method::Min | Method::Max);
    for (k, cumulative) in cumulative.iter().enumerate().skip(scheme.held + 1) {
        job.level.store(k as u64, Ordering::Relaxed);
        let target = &levels[k - 1];
        let level = &target.array;
        // The level it is computed from, and by which factors.
        let (from, factors) = if composes {
            (level_path(k - 1)?, plan.steps[k - 1].clone())
        } else {
            (path0.clone(), cumulative.clone())
        };
        let from = node::open_array(&app.node(mount_name, &from)?).await?;
        let view = View::new(
            app,
            &Source { mount_name, mount: &mount, array: &from, fill_missing: true, fill_cache: false },
            &factors,
            plan.method,
        )?;
        if view.shape != plan.shapes[k] {
            return Err(ServiceError::Internal(format!("level {k}: {:?} is not {:?}", view.shape, plan.shapes[k])));
        }
        let shape = &plan.shapes[k];
        let chunk = &level.desc.chunk_shape;
        stream::iter(grid_coords(shape, chunk))
            .map(|coords| {
                let (mount, level, view) = (&mount, &level, &view);
                async move {
                    let key = level.chunk_key(&coords)?;
                    if exists(mount, &key).await? {
                        job.skipped.fetch_add(1, Ordering::Relaxed);
                    } else {
                        let start: Vec<u64> = coords.iter().zip(chunk).map(|(&c, &n)| c * n).collect();
                        let size: Vec<u64> =
                            start.iter().zip(chunk).zip(shape).map(|((&s, &n), &e)| (s + n).min(e) - s).collect();
                        let data = view.read_box(&start, &size).await?;
                        job.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                        onepass::write_box(app, mount_name, target, &start, &size, data).await?;
                    }
                    job.done.fetch_add(1, Ordering::Relaxed);
                    Ok::<_, ServiceError>(())
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<()>()
            .await?;
    }
    // Last: the metadata that makes the group a complete multiscale image,
    // once the source is known not to have changed under the job.
    check_source_unchanged(app, mount_name, plan, source).await?;
    let name = source.path.name().to_string();
    let group = app.node(mount_name, &plan.destination)?;
    node::update_attributes(&group, multiscales(plan, &name), AttributeUpdate::Merge).await?;
    Ok(())
}

/// The datasets of a group's first `multiscales` entry: OME-Zarr 0.5
/// (`attributes.ome.multiscales`) or 0.4 (`multiscales`).
pub(crate) fn datasets(attributes: &Map<String, Value>) -> Option<&Vec<Value>> {
    let ms = attributes.get("ome").and_then(|o| o.get("multiscales")).or_else(|| attributes.get("multiscales"))?;
    ms.get(0)?.get("datasets")?.as_array()
}

/// The path of level `level` of the multiscale group at `at` (the
/// `slice` endpoint's `level=`): its first `multiscales` entry's dataset.
///
/// # Errors
/// 400 naming `level`: an array, a group without `multiscales`, a level
/// beyond the last, a dataset path that is not a path inside the group;
/// the group's own errors (missing, unreadable).
pub async fn level_path(at: &super::NodeRef<'_>, level: u64) -> ServiceResult<NodePath> {
    let group = match node::open(at).await? {
        node::Node::Group(g) => g,
        node::Node::Array(_) => {
            return Err(invalid(
                "level",
                format!("`{}` is an array; level= reads a multiscale group", at.path().as_str()),
            ))
        }
    };
    let Some(datasets) = datasets(&group.attributes) else {
        return Err(invalid("level", format!("the group `{}` has no multiscales metadata", at.path().as_str())));
    };
    let n = datasets.len() as u64;
    let Some(path) = usize::try_from(level).ok().and_then(|l| datasets.get(l)).and_then(|d| d.get("path")?.as_str())
    else {
        return Err(invalid(
            "level",
            format!("level {level}: the group has {n} levels (0 to {})", n.saturating_sub(1)),
        ));
    };
    if path.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
        return Err(invalid("level", format!("level {level}: the dataset path `{path}` is not inside the group")));
    }
    let full = if at.path().is_root() { path.to_string() } else { format!("{}/{path}", at.path().as_str()) };
    NodePath::new(&full).map_err(|e| invalid("level", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_come_from_dimension_names_or_the_rank() {
        let named = vec![Some("c".to_string()), Some("y".into()), Some("x".into())];
        let axes = axes_of(Some(&named), 3).unwrap();
        assert_eq!(axes[0], ("c".into(), Some("channel")));
        assert_eq!(axes[2], ("x".into(), Some("space")));
        let axes = axes_of(None, 4).unwrap();
        assert_eq!(axes.iter().map(|a| a.0.as_str()).collect::<Vec<_>>(), ["c", "z", "y", "x"]);
        assert!(axes_of(None, 6).unwrap_err().to_string().contains("2 to 5"));
        let twice = vec![Some("x".to_string()), Some("x".into())];
        assert!(axes_of(Some(&twice), 2).unwrap_err().to_string().contains("repeats"));
    }

    #[test]
    fn datasets_are_found_in_both_versions() {
        let v05 = json!({"ome": {"version": "0.5", "multiscales": [{"datasets": [{"path": "0"}, {"path": "1"}]}]}});
        let v04 = json!({"multiscales": [{"version": "0.4", "datasets": [{"path": "s0"}]}]});
        assert_eq!(datasets(v05.as_object().unwrap()).unwrap().len(), 2);
        assert_eq!(datasets(v04.as_object().unwrap()).unwrap()[0]["path"], "s0");
        assert!(datasets(&Map::new()).is_none());
    }

    #[test]
    fn the_grid_is_walked_in_c_order() {
        let all: Vec<Vec<u64>> = grid_coords(&[5, 3], &[2, 2]).collect();
        assert_eq!(all, vec![vec![0, 0], vec![0, 1], vec![1, 0], vec![1, 1], vec![2, 0], vec![2, 1]]);
        assert_eq!(grid_coords(&[0, 3], &[2, 2]).count(), 0);
    }
}
