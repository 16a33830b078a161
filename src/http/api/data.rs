//! Data: slice reads (`GET`/`POST /api/v1/data/{mount}/{*path}`) and
//! decoded chunks (`GET /api/v1/chunks/{mount}/{*path}`).
//!
//! The answer's format comes from `format=` (`raw`, `npy`, `json`), else
//! the `Accept` header (`application/octet-stream`, `application/x-npy`,
//! `application/json`), else raw. Every answer carries `X-Zarr-Shape`
//! (`3,4`; empty for a scalar), `X-Zarr-Dtype` (numpy's name, `<f4`, or the
//! Zarr name where numpy has none) and `X-Zarr-Order: C`. Raw and npy
//! answers have an exact `Content-Length`; large answers stream, and a
//! failure after the first slab ends the body early (shorter than its
//! `Content-Length`, or invalid JSON) and closes the connection.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::stream::{self, StreamExt};
use serde::Deserialize;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::{Response as ResponseDoc, ResponseBuilder};
use utoipa::openapi::{content::ContentBuilder, RefOr};
use utoipa::{IntoParams, IntoResponses, PartialSchema, ToSchema};

use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::{ApiQuery, NodeTarget, TypedJsonBody};
use crate::http::openapi::Binary;
use crate::http::params;
use crate::service::array::downsample::{self, Downsample};
use crate::service::array::read::{self, ChunkParams, DataRead, ReadParams};
use crate::service::wire::{dtype_header, shape_header};
use crate::service::App;
use crate::zarr::selection::SelectionBody;

/// `X-Zarr-Shape`: the answer's shape, comma-separated.
pub const X_ZARR_SHAPE: HeaderName = HeaderName::from_static("x-zarr-shape");
/// `X-Zarr-Dtype`: the answer's element type.
pub const X_ZARR_DTYPE: HeaderName = HeaderName::from_static("x-zarr-dtype");
/// `X-Zarr-Order`: always `C`.
pub const X_ZARR_ORDER: HeaderName = HeaderName::from_static("x-zarr-order");

/// Query parameters of a slice read.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DataQuery {
    /// The selection, one item per dimension, comma-separated: an index
    /// (`-1` counts from the end), a slice `start:stop:step` (parts
    /// optional, negative steps allowed), `...`, or a list `[3,1,4]`
    /// (orthogonal); missing trailing dimensions are whole. With dimension
    /// names: `time=0,lat=10:20`. Absent: the whole array.
    #[param(example = "0:10,::2,-1")]
    pub sel: Option<String>,
    /// How lists combine: `basic` (default; a list makes it orthogonal),
    /// `orthogonal` (zarr-python's `oindex`: outer product) or `coordinate`
    /// (`vindex`: one list per dimension, zipped into points).
    #[param(example = "orthogonal")]
    pub mode: Option<String>,
    /// A field of a structured (v2 record) array; its subarray shape is
    /// appended to the result's.
    #[param(example = "x")]
    pub field: Option<String>,
    /// `raw`, `npy`, `json` or `png` (default: the `Accept` header, else
    /// raw). `png`: a 2-D selection (size-1 dimensions dropped), or 3-D with
    /// 3 or 4 channels (RGB, RGBA) as its last or else first dimension,
    /// rendered as `rescale`, `colormap` and `transparent_fill` say.
    #[param(example = "npy")]
    pub format: Option<String>,
    /// `false`: a missing chunk is an error (404 `missing_chunk`) naming it
    /// instead of reading as the fill value (TensorStore's
    /// `fill_missing_data_reads`). Default: the mount's setting.
    #[param(example = false)]
    pub fill_missing: Option<bool>,
    /// PNG only: `lo,hi`; a value `v` is shown as
    /// `round(255 × clamp((v − lo) / (hi − lo), 0, 1))`. Default: the 2nd and
    /// 98th percentiles of the selection's finite values (the full range
    /// for bool and uint8).
    #[param(example = "0,1000")]
    pub rescale: Option<String>,
    /// PNG only, one channel: `gray` (default), `viridis`, `magma`,
    /// `inferno`, `plasma`, `cividis` or `turbo`.
    #[param(example = "viridis")]
    pub colormap: Option<String>,
    /// PNG only: elements equal to the array's fill value are transparent
    /// (NaN always is).
    pub transparent_fill: Option<bool>,
    /// Read the array downsampled: one positive integer factor per
    /// dimension (`1` keeps a dimension), as TensorStore's `downsample`
    /// driver; the selection then addresses the downsampled array (shape
    /// `ceil(shape / factor)`). Needs `downsample_method`.
    #[param(example = "1,4,4")]
    pub downsample: Option<String>,
    /// `stride`, `mean`, `median`, `mode`, `min` or `max` (TensorStore's
    /// semantics: blocks from origin 0, partial at the upper edge; integer
    /// means rounded half to even).
    #[param(example = "mean")]
    pub downsample_method: Option<String>,
    /// For an OME-Zarr multiscale group: read this level (0 is the full
    /// resolution), the dataset its first `multiscales` entry lists.
    #[param(example = 2)]
    pub level: Option<u64>,
    /// `format=png`: the image's largest side at most this many pixels
    /// (1 to 65536), by striding; on a multiscale group without `level`,
    /// `sel` addresses level 0 (indices and step-1 slices) and the
    /// coarsest level that still gives `size` pixels is read (answer
    /// headers `X-Zarr-Level`, `X-Zarr-Selection`).
    #[param(example = 256)]
    pub size: Option<u64>,
}

/// The body of a slice read by POST (for selections too long for a URL).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DataBody {
    /// The selection: a list with one entry per dimension (an integer, a
    /// slice string `"a:b:c"`, an object `{"start", "stop", "step"}`, a
    /// list of integers, `"..."` or `null` for the whole dimension), an
    /// object by dimension name, or the text form of `sel=`. At most
    /// 4,194,304 indices listed in all (413 beyond).
    #[schema(value_type = Value, example = json!([[0, 5, 9], "2:10:2", "..."]))]
    #[serde(default)]
    pub selection: SelectionBody,
    /// `basic`, `orthogonal` or `coordinate`.
    #[schema(example = "coordinate")]
    pub mode: Option<String>,
    /// A field of a structured array.
    pub field: Option<String>,
    /// `raw`, `npy` or `json`.
    #[schema(example = "json")]
    pub format: Option<String>,
    /// As the `fill_missing` query parameter.
    pub fill_missing: Option<bool>,
    /// As the `downsample` query parameter: factors per dimension, a list
    /// `[1, 4, 4]` or the query's text `"1,4,4"`.
    #[schema(value_type = Option<Value>, example = json!([1, 4, 4]))]
    pub downsample: Option<serde_json::Value>,
    /// As the `downsample_method` query parameter.
    #[schema(example = "mean")]
    pub downsample_method: Option<String>,
    /// As the `level` query parameter.
    pub level: Option<u64>,
}

/// Query parameters of a decoded chunk read.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ChunkQuery {
    /// Chunk grid coordinates (of the shard, for sharded arrays),
    /// comma-separated; empty for a scalar array.
    #[param(example = "0,3")]
    pub coords: Option<String>,
    /// Sharded arrays: the inner chunk's coordinates inside the shard.
    /// Absent: the whole shard, decoded.
    #[param(example = "1,0")]
    pub inner: Option<String>,
    /// A field of a structured array.
    pub field: Option<String>,
    /// `raw`, `npy` or `json` (default: the `Accept` header, else raw).
    #[param(example = "json")]
    pub format: Option<String>,
    /// `false`: a missing chunk is an error (404 `missing_chunk`) instead of
    /// the fill value.
    pub fill_missing: Option<bool>,
}

/// The 200 answer of every data route, described once: the elements in
/// one of three formats, their shape and type in headers.
fn elements_answer(description: &str) -> BTreeMap<String, RefOr<ResponseDoc>> {
    let header = |text: &str| HeaderBuilder::new().description(Some(text)).build();
    let content = |schema| ContentBuilder::new().schema(Some(schema)).build();
    let answer = ResponseBuilder::new()
        .description(description)
        .header("X-Zarr-Shape", header("The result's shape, comma-separated (empty for a scalar)"))
        .header("X-Zarr-Dtype", header("numpy's dtype (`<f4`), or the Zarr name where numpy has none"))
        .header("X-Zarr-Order", header("Always `C`"))
        .content("application/octet-stream", content(Binary::schema()))
        .content("application/x-npy", content(Binary::schema()))
        .content("application/json", content(serde_json::Value::schema()))
        .build();
    BTreeMap::from([("200".to_string(), RefOr::T(answer))])
}

/// The 200 answer of a slice read.
pub struct SelectedElements;

impl IntoResponses for SelectedElements {
    fn responses() -> BTreeMap<String, RefOr<ResponseDoc>> {
        let mut answers = elements_answer(
            "The selected elements (headers X-Zarr-Shape, X-Zarr-Dtype, X-Zarr-Order), or with format=png the \
             rendered image",
        );
        if let Some(RefOr::T(answer)) = answers.get_mut("200") {
            let png = ContentBuilder::new().schema(Some(Binary::schema())).build();
            answer.content.insert(super::image::IMAGE_PNG.to_string(), RefOr::T(png));
        }
        answers
    }
}

/// The 200 answer of a decoded chunk read.
pub struct DecodedChunk;

impl IntoResponses for DecodedChunk {
    fn responses() -> BTreeMap<String, RefOr<ResponseDoc>> {
        elements_answer("The decoded chunk, full chunk shape as stored (edge chunks included)")
    }
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// The answer: headers from the read, the body streamed.
fn respond(read: DataRead) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(read.format.content_type()));
    headers.insert(X_ZARR_SHAPE, header_value(&shape_header(&read.shape)));
    headers.insert(X_ZARR_DTYPE, header_value(&dtype_header(&read.data_type)));
    headers.insert(X_ZARR_ORDER, HeaderValue::from_static("C"));
    if let Some(len) = read.content_length {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    let first = stream::iter(read.first.into_iter().map(Ok::<Bytes, crate::service::ServiceError>));
    let body = match read.rest {
        None => Body::from_stream(first),
        Some(rx) => {
            // The last message carries the end mark; a channel closed
            // before it (the producer failed or was cut off) is an error
            // too, so the body never ends as if it were whole.
            let rest = stream::unfold(Some(rx), |rx| async move {
                let mut rx = rx?;
                match rx.recv().await {
                    Some(Ok(mut pieces)) => {
                        let last = read::take_last(&mut pieces);
                        Some((Ok(pieces), (!last).then_some(rx)))
                    }
                    Some(Err(e)) => Some((Err(e), None)),
                    None => Some((Err(crate::service::ServiceError::Internal("the read stopped before its end".into())), None)),
                }
            })
            .flat_map(|m| {
                match m {
                    Ok(pieces) => stream::iter(pieces.into_iter().map(Ok)).left_stream(),
                    Err(e) => {
                        tracing::warn!(error = %e, "a streamed read failed after its headers were sent; the body is cut short");
                        stream::iter(vec![Err(e)]).right_stream()
                    }
                }
            });
            Body::from_stream(first.chain(rest))
        }
    };
    (headers, body).into_response()
}

async fn read_with(
    app: Arc<App>,
    target: NodeTarget,
    params: ReadParams,
    ds: Option<Downsample>,
    level: Option<u64>,
) -> ApiResult<Response> {
    let mut at = app.node(&target.mount, &target.path)?;
    if let Some(level) = level {
        let path = crate::service::pyramid::level_path(&at, level).await?;
        at = app.node(&target.mount, &path)?;
    }
    let read = match ds {
        Some(ds) => downsample::read(&at, params, ds).await?,
        None => read::read(&at, params).await?,
    };
    Ok(respond(read))
}

fn params_from_query(q: DataQuery, headers: &HeaderMap) -> ApiResult<ReadParams> {
    Ok(ReadParams {
        selection: params::selection(q.sel.as_deref(), q.mode.as_deref())?,
        field: q.field,
        format: params::answer_format(q.format.as_deref(), headers)?,
        fill_missing: q.fill_missing,
    })
}

/// Read a selection of an array.
#[utoipa::path(
    get,
    path = "/api/v1/data/{mount}/{*path}",
    tag = "data",
    params(NodeTarget, DataQuery),
    responses(
        SelectedElements,
        (status = 400, description = "Malformed, out-of-bounds or rank-mismatched selection (naming the dimension); unknown field or format; a group; bad downsample factors or method, or a level= that is not a level of a multiscale group (naming the parameter); format=png: a selection that is not an image, a type with no scalar value, a bad rescale or colormap", body = ErrorBody),
        (status = 404, description = "No such mount or array; a missing chunk with fill_missing=false", body = ErrorBody),
        (status = 406, description = "Accept names only image types other than image/png", body = ErrorBody),
        (status = 413, description = "The selection exceeds limits.max_selection_bytes (or max_json_elements for JSON, max_image_pixels for PNG), or lists more than 4,194,304 indices", body = ErrorBody),
        (status = 422, description = "Stored metadata is invalid or unsupported", body = ErrorBody),
        (status = 502, description = "A stored chunk is corrupt: the store answered bytes that do not decode (naming the key)", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn get_data(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    ApiQuery(mut q): ApiQuery<DataQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let ds = downsample::parse(q.downsample.as_deref(), q.downsample_method.as_deref())?;
    let level = q.level;
    let size = q.size.take();
    let (rescale, colormap, fill) = (q.rescale.take(), q.colormap.take(), q.transparent_fill.take());
    if super::image::wants_png(q.format.as_deref(), &headers)? {
        let opts = super::image::render_options(rescale.as_deref(), colormap.as_deref(), fill)?;
        q.format = Some("raw".into());
        let params = params_from_query(q, &headers)?;
        return super::image::png_read(app, target, params, opts, ds, level, size).await;
    }
    super::image::no_render_options(rescale.as_deref(), colormap.as_deref(), fill)?;
    if size.is_some() {
        return Err(crate::http::error::ErrorCode::UnsupportedFormat
            .error("size: applies to images only (format=png or Accept: image/png)"));
    }
    let params = params_from_query(q, &headers)?;
    read_with(app, target, params, ds, level).await
}

async fn params_from_body(body: DataBody, headers: &HeaderMap) -> ApiResult<ReadParams> {
    let mode = params::selection_mode(body.mode.as_deref())?;
    let format = params::answer_format(body.format.as_deref(), headers)?;
    // The JSON lists move (the body was parsed into them on the CPU pool);
    // text lists inside the body are parsed here, on the pool when long.
    let spec = body.selection;
    let selection = crate::service::cpu::run_or_inline(spec.is_small(), move || spec.into_spec(mode))
        .await
        .map_err(|e| ApiError::from(crate::service::ServiceError::from(e)))?
        .map_err(params::selection_error)?;
    Ok(ReadParams { selection, field: body.field, format, fill_missing: body.fill_missing })
}

/// Read a selection given in a JSON body (orthogonal and coordinate
/// selections too long for a URL).
#[utoipa::path(
    post,
    path = "/api/v1/data/{mount}/{*path}",
    tag = "data",
    params(NodeTarget),
    request_body(content = DataBody, content_type = "application/json"),
    responses(
        SelectedElements,
        (status = 400, description = "Malformed body or selection (naming the dimension); unknown field or format", body = ErrorBody),
        (status = 404, description = "No such mount or array; a missing chunk with fill_missing=false", body = ErrorBody),
        (status = 413, description = "The body or the selection exceeds the limits (at most 4,194,304 indices listed)", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = 422, description = "A body of the wrong shape (an unknown member, a wrong type); stored metadata that is invalid or unsupported", body = ErrorBody),
        (status = 502, description = "A stored chunk is corrupt: the store answered bytes that do not decode (naming the key)", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn post_data(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    headers: HeaderMap,
    TypedJsonBody(body): TypedJsonBody<DataBody>,
) -> ApiResult<Response> {
    let ds = downsample::parse_json(body.downsample.as_ref(), body.downsample_method.as_deref())?;
    let level = body.level;
    let params = params_from_body(body, &headers).await?;
    read_with(app, target, params, ds, level).await
}

/// Read one chunk (or inner chunk of a shard), decoded: for clients that
/// cannot decode its codecs.
#[utoipa::path(
    get,
    path = "/api/v1/chunks/{mount}/{*path}",
    tag = "data",
    params(NodeTarget, ChunkQuery),
    responses(
        DecodedChunk,
        (status = 400, description = "Coordinates of the wrong rank or outside the grid (naming the dimension); inner on an unsharded array; unknown field or format", body = ErrorBody),
        (status = 404, description = "No such mount or array; a missing chunk with fill_missing=false", body = ErrorBody),
        (status = 413, description = "The chunk exceeds limits.max_selection_bytes", body = ErrorBody),
        (status = 422, description = "Stored metadata is invalid or unsupported", body = ErrorBody),
        (status = 502, description = "The stored chunk is corrupt: the store answered bytes that do not decode (naming the key)", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn get_chunk(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    ApiQuery(q): ApiQuery<ChunkQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let params = ChunkParams {
        coords: read::parse_coords(q.coords.as_deref().unwrap_or(""), "coords")?,
        inner: q.inner.as_deref().map(|i| read::parse_coords(i, "inner")).transpose()?,
        field: q.field,
        format: params::answer_format(q.format.as_deref(), &headers)?,
        fill_missing: q.fill_missing,
    };
    let read = read::read_chunk(&app.node(&target.mount, &target.path)?, params).await?;
    Ok(respond(read))
}
