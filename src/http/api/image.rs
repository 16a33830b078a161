//! Images: `format=png` on the slice endpoint (the data handler hands such
//! reads here) and the preview endpoint,
//! `GET /api/v1/preview/{mount}/{*path}`.
//!
//! A slice read answers a PNG when `format=png` (any case), or when
//! `format=` is absent and the first type of `Accept` that zarrd knows (by
//! quality; `q=0` refuses a type) is
//! `image/png` or `image/*` (an `<img>` element's request); an `Accept`
//! that names image types only, none of them PNG (`image/jpeg`), is 406
//! `not_acceptable`. The rendering rules (layout, `rescale=`, `colormap=`,
//! `transparent_fill=`) are [`crate::service::render::image`]'s, the
//! thumbnails [`crate::service::render::preview`]'s. `rescale`, `colormap`
//! and `transparent_fill` without a PNG answer are 400 `unsupported_format`:
//! they would be silently ignored otherwise, as is `size` (the largest
//! side of the image; on a multiscale group it picks the level, see
//! [`crate::service::render::levels`]; previews of such a group do too).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::http::error::{ApiResult, ErrorBody, ErrorCode};
use crate::http::extract::{ApiQuery, NodeTarget};
use crate::service::array::downsample::Downsample;
use crate::service::array::read::ReadParams;
use crate::service::render::image::{parse_rescale, Colormap, RenderOptions};
use crate::service::render::levels;
use crate::service::render::preview::{self, PreviewParams, DEFAULT_SIZE, MAX_SIZE};
use crate::service::{App, ServiceError};
use crate::zarr::selection::{SelectionMode, SelectionSpec};

/// `X-Zarr-Selection`: the `sel=` a preview is.
pub const X_ZARR_SELECTION: axum::http::HeaderName = axum::http::HeaderName::from_static("x-zarr-selection");

/// The media type of every image zarrd answers.
pub const IMAGE_PNG: &str = "image/png";

/// Whether a slice read is answered as a PNG: `format=png`, or no
/// `format=` and an `Accept` whose first known type (by quality, `q=0`
/// refused) is `image/png` or `image/*`.
///
/// # Errors
/// 406 `not_acceptable` for an `Accept` naming only image types other
/// than PNG (and nothing else zarrd knows).
pub fn wants_png(format: Option<&str>, headers: &HeaderMap) -> ApiResult<bool> {
    if let Some(f) = format.map(str::trim).filter(|f| !f.is_empty()) {
        return Ok(f.eq_ignore_ascii_case("png"));
    }
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Ok(false);
    };
    let mut images = Vec::new();
    // By quality, `q=0` refused.
    for media in crate::service::wire::accept_order(accept) {
        if crate::service::wire::WireFormat::from_media_type(&media).is_some() || media == "*/*" {
            return Ok(false);
        }
        if media == IMAGE_PNG || media == "image/*" {
            return Ok(true);
        }
        if media.starts_with("image/") {
            images.push(media);
        }
    }
    if images.is_empty() {
        Ok(false)
    } else {
        Err(ErrorCode::NotAcceptable
            .error(format!("Accept: {}: zarrd renders image/png only (or raw, npy and json data)", images.join(", "))))
    }
}

/// The rendering options of a query.
///
/// # Errors
/// 400 `invalid_query` naming the parameter: a `rescale` that is not two
/// finite numbers, an unknown `colormap`.
pub fn render_options(
    rescale: Option<&str>,
    colormap: Option<&str>,
    transparent_fill: Option<bool>,
) -> ApiResult<RenderOptions> {
    let query = |e: crate::service::render::image::RenderError| ErrorCode::InvalidQuery.error(e.0);
    Ok(RenderOptions {
        rescale: rescale.map(parse_rescale).transpose().map_err(query)?,
        colormap: colormap.map(Colormap::parse).transpose().map_err(query)?.unwrap_or_default(),
        transparent_fill: transparent_fill.unwrap_or(false),
    })
}

/// Refuses rendering options on a read that is not answered as an image.
///
/// # Errors
/// 400 `unsupported_format` naming the first option given.
pub fn no_render_options(
    rescale: Option<&str>,
    colormap: Option<&str>,
    transparent_fill: Option<bool>,
) -> ApiResult<()> {
    let given = [
        ("rescale", rescale.is_some()),
        ("colormap", colormap.is_some()),
        ("transparent_fill", transparent_fill.is_some()),
    ];
    match given.iter().find(|(_, g)| *g) {
        Some((name, _)) => Err(ErrorCode::UnsupportedFormat
            .error(format!("{name}: applies to images only (format=png or Accept: image/png)"))),
        None => Ok(()),
    }
}

fn png_response(png: Bytes, etag: Option<&str>) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(IMAGE_PNG));
    if let Some(tag) = etag.and_then(|t| HeaderValue::from_str(t).ok()) {
        headers.insert(header::ETAG, tag);
    }
    (headers, png).into_response()
}

/// `X-Zarr-Level`: the level of a multiscale group an image was read from.
pub const X_ZARR_LEVEL: axum::http::HeaderName = axum::http::HeaderName::from_static("x-zarr-level");

/// The largest `size=` of a PNG slice read (the image is bounded by
/// `limits.max_image_pixels` too).
pub const MAX_IMAGE_SIDE: u64 = 1 << 16;

/// A slice read answered as a PNG. With `size`, the image's largest side
/// is at most `size` pixels and, on a multiscale group without `level`,
/// the coarsest level that still gives `size` pixels is read
/// ([`crate::service::render::levels`]); the answer names the level
/// (`X-Zarr-Level`) and the selection of it read (`X-Zarr-Selection`).
///
/// # Errors
/// As [`crate::service::render::render_png`]; `size` outside
/// 1..=[`MAX_IMAGE_SIDE`], or with `downsample` (400 naming `size`).
pub async fn png_read(
    app: Arc<App>,
    target: NodeTarget,
    mut params: ReadParams,
    opts: RenderOptions,
    ds: Option<Downsample>,
    level: Option<u64>,
    size: Option<u64>,
) -> ApiResult<Response> {
    let mut node = app.node(&target.mount, &target.path)?;
    let mut extra = Vec::new();
    if let Some(size) = size {
        if !(1..=MAX_IMAGE_SIDE).contains(&size) {
            return Err(ErrorCode::InvalidQuery.error(format!("size: from 1 to {MAX_IMAGE_SIDE}, got {size}")));
        }
        if ds.is_some() {
            return Err(ErrorCode::InvalidQuery.error("size: not with downsample= (choose one way to reduce)"));
        }
        let choice = levels::choose(&node, &params.selection, level, size).await?;
        node = app.node(&target.mount, &choice.path)?;
        params.selection = SelectionSpec::parse(&choice.selection, SelectionMode::Basic).map_err(ServiceError::from)?;
        if let Some(k) = choice.level {
            extra.push((X_ZARR_LEVEL, HeaderValue::from(k)));
        }
        if let Ok(v) = HeaderValue::from_str(&choice.selection) {
            extra.push((X_ZARR_SELECTION, v));
        }
    } else if let Some(level) = level {
        let path = crate::service::pyramid::level_path(&node, level).await?;
        node = app.node(&target.mount, &path)?;
    }
    let png = crate::service::render::render_png(&node, params, opts, ds).await?;
    let mut response = png_response(png, None);
    response.headers_mut().extend(extra);
    Ok(response)
}

/// Query parameters of a preview.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PreviewQuery {
    /// The thumbnail's largest side in pixels, 1 to 2048 (default 256).
    #[param(example = 128)]
    pub size: Option<u64>,
    /// `gray` (default), `viridis`, `magma`, `inferno`, `plasma`, `cividis`
    /// or `turbo`.
    #[param(example = "viridis")]
    pub colormap: Option<String>,
    /// `lo,hi`: the values shown as 0 and 255 (default: the 2nd and 98th
    /// percentiles of the finite values shown; the full range for bool and
    /// uint8).
    #[param(example = "0,1000")]
    pub rescale: Option<String>,
    /// Elements equal to the fill value are transparent (NaN always is).
    pub transparent_fill: Option<bool>,
}

/// A thumbnail of an array: the last two dimensions at the middle index of
/// the others, every `s`-th row and column with
/// `s = ceil(max(rows, columns) / size)`, rendered as `format=png` renders
/// (the answer's `X-Zarr-Selection` is the equivalent `sel=`). Cached;
/// the `ETag` is a digest of the image, and `If-None-Match` with it is 304.
///
/// Of an OME-Zarr multiscale group: the thumbnail of the coarsest level
/// whose last two dimensions still have a side of at least `size` (else
/// level 0), named by `X-Zarr-Level` (`X-Zarr-Selection` is of that
/// level's array).
#[utoipa::path(
    get,
    path = "/api/v1/preview/{mount}/{*path}",
    tag = "data",
    params(NodeTarget, PreviewQuery),
    responses(
        (status = 200, description = "The PNG (headers ETag, X-Zarr-Selection; X-Zarr-Level for a multiscale group)", content_type = "image/png", body = crate::http::openapi::Binary),
        (status = 304, description = "If-None-Match matched the preview's ETag"),
        (status = 400, description = "A size outside 1..2048, an unknown colormap, a rescale that is not two finite numbers; a group without multiscales; an array of fewer than two dimensions, without elements, or of a type with no scalar value", body = ErrorBody),
        (status = 404, description = "No such mount or array", body = ErrorBody),
        (status = 413, description = "The plane exceeds the read limits", body = ErrorBody),
        (status = 422, description = "Stored metadata is invalid or unsupported", body = ErrorBody),
        (status = 502, description = "A stored chunk is corrupt", body = ErrorBody),
        (status = 503, description = "Storage unavailable", body = ErrorBody),
    )
)]
pub async fn get_preview(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    ApiQuery(q): ApiQuery<PreviewQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let size = q.size.unwrap_or(DEFAULT_SIZE);
    if !(1..=MAX_SIZE).contains(&size) {
        return Err(ErrorCode::InvalidQuery.error(format!("size: from 1 to {MAX_SIZE}, got {size}")));
    }
    let opts = render_options(q.rescale.as_deref(), q.colormap.as_deref(), q.transparent_fill)?;
    let mut node = app.node(&target.mount, &target.path)?;
    let level = levels::preview_level(&node, size).await?;
    if let Some(l) = &level {
        node = app.node(&target.mount, &l.path)?;
    }
    let p = preview::preview(&node, PreviewParams { size, opts }).await?;
    let matches = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        // Weak comparison (RFC 9110 §13.1.2): `W/"x"` matches `"x"`.
        .map(|t| t.trim())
        .any(|t| t.strip_prefix("W/").unwrap_or(t) == p.etag || t == "*");
    let mut response = if matches {
        let mut r = StatusCode::NOT_MODIFIED.into_response();
        if let Ok(tag) = HeaderValue::from_str(&p.etag) {
            r.headers_mut().insert(header::ETAG, tag);
        }
        r
    } else {
        png_response(p.png.clone(), Some(&p.etag))
    };
    if let Ok(sel) = HeaderValue::from_str(&p.selection) {
        response.headers_mut().insert(X_ZARR_SELECTION, sel);
    }
    if let Some(l) = level {
        response.headers_mut().insert(X_ZARR_LEVEL, HeaderValue::from(l.index));
    }
    Ok(response)
}
