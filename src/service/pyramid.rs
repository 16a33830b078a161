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
//! data type, fill value, chunk grid and codecs, and shape
//! `ceil(shape_{k-1} / f)`.
//!
//! Each level is computed from the one before when the method composes
//! exactly (`stride`, `min`, `max`); `mean`, `median` and `mode` do not
//! (a mean of means weighs partial edge blocks wrongly and rounds twice),
//! so their levels are computed from level 0 by the cumulative factors:
//! every level equals TensorStore's `downsample` of level 0 by its
//! cumulative factors. Chunks (shards) of a level are computed through the
//! downsampled view ([`super::array::downsample`]) and written through the
//! normal write path (per-key locks, conditional writes, cache
//! invalidation), several at once.
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
use super::array::write::{self, WriteRequest};
use super::jobs::{Job, JobState, JobStatus};
use super::node::{self, ArrayNode, AttributeUpdate, NodePath, OpenMode};
use super::wire::WireFormat;
use super::{App, ServiceError, ServiceResult};
use crate::storage::{PutCondition, StorageError};
use crate::zarr::array::ZarrFormat;
use crate::zarr::downsample::Method;
use crate::zarr::selection::{SelectionMode, SelectionSpec};

/// The most levels a pyramid may have (level 0 included).
pub const MAX_LEVELS: usize = 32;

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
    /// The factor per dimension from one level to the next (default 2 on
    /// `space` axes, 1 on the others); each at least 1, at most 2^20.
    pub factors: Option<Vec<u64>>,
    /// Levels in all, level 0 included (default: until a level fits in one
    /// chunk; at most 32).
    pub levels: Option<u64>,
}

/// A request, checked: what the job builds.
#[derive(Debug, Clone)]
struct Plan {
    method: Method,
    factors: Vec<u64>,
    /// Shapes of the levels, level 0 first.
    shapes: Vec<Vec<u64>>,
    axes: Vec<(String, Option<&'static str>)>,
    destination: NodePath,
    format: ZarrFormat,
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

fn plan(array: &ArrayNode, req: &PyramidRequest) -> ServiceResult<Plan> {
    let desc = &array.desc;
    let rank = desc.shape.len();
    let axes = axes_of(desc.dimension_names.as_deref(), rank)?;
    let method = req.method.unwrap_or(Method::Mean);
    crate::zarr::downsample::check_type(&desc.data_type, method).map_err(|e| invalid("method", e.0))?;
    let factors = match &req.factors {
        Some(f) => {
            if f.len() != rank {
                return Err(invalid("factors", format!("{} factors for an array of {rank} dimensions", f.len())));
            }
            if let Some(i) = f.iter().position(|&f| !(1..=1 << 20).contains(&f)) {
                return Err(invalid(&format!("factors[{i}]"), format!("{} is not between 1 and 2^20", f[i])));
            }
            f.clone()
        }
        None => axes.iter().map(|(_, k)| if *k == Some("space") { 2 } else { 1 }).collect(),
    };
    if let Some(n) = req.levels {
        if !(1..=MAX_LEVELS as u64).contains(&n) {
            return Err(invalid("levels", format!("{n} is not between 1 and {MAX_LEVELS}")));
        }
    }
    let mut shapes = vec![desc.shape.clone()];
    loop {
        let last = shapes.last().cloned().unwrap_or_default();
        let next: Vec<u64> = last.iter().zip(&factors).map(|(&s, &f)| s.div_ceil(f)).collect();
        let enough = match req.levels {
            Some(n) => shapes.len() as u64 >= n,
            // Until a level fits in one chunk along every downsampled
            // dimension, or stops shrinking.
            None => {
                last.iter().zip(&desc.chunk_shape).zip(&factors).all(|((&s, &c), &f)| f == 1 || s <= c) || next == last
            }
        };
        if enough || shapes.len() >= MAX_LEVELS {
            break;
        }
        shapes.push(next);
    }
    let destination = match &req.destination {
        Some(d) => NodePath::new(d).map_err(|e| invalid("destination", e.to_string()))?,
        None => NodePath::new(&format!("{}_pyramid", array.path.as_str()))?,
    };
    if destination.is_root() || destination == array.path {
        return Err(invalid("destination", "must be a new path beside the source"));
    }
    Ok(Plan { method, factors, shapes, axes, destination, format: desc.zarr_format })
}

/// The job id of a request: the same request (mount, path, body) finds
/// the same job, before and after a restart.
fn job_id(mount: &str, path: &str, plan: &Plan) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (mount, path, plan.destination.as_str(), plan.method.name(), &plan.factors, plan.shapes.len()).hash(&mut h);
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
    let plan = plan(&array, &req)?;
    let mount = at.mount_name().to_string();
    let id = job_id(&mount, array.path.as_str(), &plan);
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

/// A level's array document: the source's, with the level's shape and
/// the axes as dimension names (v3).
fn level_document(array: &ArrayNode, shape: &[u64], plan: &Plan) -> Value {
    let mut doc = array.metadata.clone();
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
    let mut scale = vec![1f64; plan.factors.len()];
    let mut datasets = Vec::new();
    for level in 0..plan.shapes.len() {
        datasets.push(json!({"path": level.to_string(),
            "coordinateTransformations": [{"type": "scale", "scale": scale.clone()}]}));
        for (s, &f) in scale.iter_mut().zip(&plan.factors) {
            #[allow(clippy::cast_precision_loss)] // factors at most 2^20
            {
                *s *= f as f64;
            }
        }
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

/// Creates (or opens) a node from `doc` at `path`.
async fn ensure(app: &App, mount: &str, path: &NodePath, doc: &Value) -> ServiceResult<()> {
    let (new, _) = node::parse_create_body(doc)?;
    let at = app.node(mount, path)?;
    node::create(&at, &new, OpenMode { create: true, open: true, delete_existing: false }).await?;
    Ok(())
}

/// Every chunk (shard) coordinate of a grid, C order.
fn grid_coords(shape: &[u64], chunk: &[u64]) -> impl Iterator<Item = Vec<u64>> {
    let grid: Vec<u64> = shape.iter().zip(chunk).map(|(&s, &c)| s.div_ceil(c.max(1))).collect();
    let n = grid.iter().product::<u64>();
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

async fn exists(mount: &crate::storage::Mount, key: &crate::storage::StoreKey) -> ServiceResult<bool> {
    Ok(head(mount, key).await?.is_some())
}

async fn run(app: &Arc<App>, job: &Job, plan: &Plan, source: &ArrayNode) -> ServiceResult<()> {
    let mount_name = job.mount.as_str();
    let mount = app.mount(mount_name)?.clone();
    let chunk = source.desc.chunk_shape.clone();
    let total: u64 = plan.shapes.iter().map(|s| grid_coords(s, &chunk).size_hint().0 as u64).sum();
    job.total.store(total, Ordering::Relaxed);
    let group_key = match plan.format {
        ZarrFormat::V3 => json!({"zarr_format": 3, "node_type": "group"}),
        ZarrFormat::V2 => json!({"zarr_format": 2}),
    };
    ensure(app, mount_name, &plan.destination, &group_key).await?;
    let level_path = |k: usize| plan.destination.child(&k.to_string());

    // Level 0: the source's chunks, key for key.
    let path0 = level_path(0)?;
    ensure(app, mount_name, &path0, &level_document(source, &plan.shapes[0], plan)).await?;
    let level0 = node::open_array(&app.node(mount_name, &path0)?).await?;
    let budget_kib = u32::try_from(COPY_BUDGET / 1024).unwrap_or(u32::MAX);
    let budget = Arc::new(tokio::sync::Semaphore::new(budget_kib as usize));
    stream::iter(grid_coords(&plan.shapes[0], &chunk))
        .map(|coords| {
            let (mount, source, level0, budget) = (&mount, source, &level0, budget.clone());
            async move {
                let from = source.chunk_key(&coords)?;
                let to = level0.chunk_key(&coords)?;
                if exists(mount, &to).await? {
                    job.skipped.fetch_add(1, Ordering::Relaxed);
                } else if let Some(meta) = head(mount, &from).await? {
                    // Large shards are copied fewer at a time.
                    let kib = u32::try_from(meta.size.div_ceil(1024)).unwrap_or(u32::MAX).clamp(1, budget_kib);
                    let _held = budget
                        .acquire_many_owned(kib)
                        .await
                        .map_err(|_| ServiceError::Internal("the copy budget is closed".into()))?;
                    let Some(bytes) = node::read_optional(mount, &from).await? else {
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

    let composes = matches!(plan.method, Method::Stride | Method::Min | Method::Max);
    let mut cumulative = vec![1u64; plan.factors.len()];
    for k in 1..plan.shapes.len() {
        job.level.store(k as u64, Ordering::Relaxed);
        for (c, &f) in cumulative.iter_mut().zip(&plan.factors) {
            *c = c.saturating_mul(f);
        }
        let path = level_path(k)?;
        ensure(app, mount_name, &path, &level_document(source, &plan.shapes[k], plan)).await?;
        let level = node::open_array(&app.node(mount_name, &path)?).await?;
        // The level it is computed from, and by which factors.
        let (from, factors) =
            if composes { (level_path(k - 1)?, plan.factors.clone()) } else { (path0.clone(), cumulative.clone()) };
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
        stream::iter(grid_coords(shape, &chunk))
            .map(|coords| {
                let (mount, level, view, path, chunk) = (&mount, &level, &view, &path, &chunk);
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
                        let text: Vec<String> =
                            start.iter().zip(&size).map(|(&s, &n)| format!("{s}:{}", s + n)).collect();
                        let selection = SelectionSpec::parse(&text.join(","), SelectionMode::Basic)?;
                        let request = WriteRequest {
                            selection,
                            format: WireFormat::Raw,
                            body: bytes::Bytes::from(data),
                            write_empty_chunks: None,
                        };
                        write::write(&app.node(mount_name, path)?, request).await?;
                    }
                    job.done.fetch_add(1, Ordering::Relaxed);
                    Ok::<_, ServiceError>(())
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<()>()
            .await?;
    }
    // Last: the metadata that makes the group a complete multiscale image.
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
