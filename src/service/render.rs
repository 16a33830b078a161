//! Rendered images of array data: `format=png` on the slice endpoint and
//! the preview endpoint's thumbnails.
//!
//! A rendering is a slice read like any other (the same [`ReadParams`],
//! so whatever a read can select, a PNG can show), answered in `raw` and
//! gathered in memory, then turned into pixels and encoded on the CPU pool:
//!
//! ```text
//! selection ──read::read (raw)──▶ elements ──image::render──▶ pixels ──image::encode_png──▶ PNG
//! ```
//!
//! - `image.rs`: the rules (layout, range, scaling, colormaps,
//!   transparency) and the PNG encoding, with no I/O;
//! - `preview.rs`: thumbnails (the last two dimensions, the middle of the
//!   others, strided to a size), cached and tagged;
//! - `levels.rs`: which level of an OME-Zarr multiscale group a preview or
//!   a PNG with `size=` reads, and the striding to that size.
//!
//! Memory: decided from the read's answer shape before any element beyond
//! the first slab is gathered: at most `limits.max_image_pixels` pixels
//! (413 beyond), and [`render_bytes`] of `limits.render_budget_bytes`,
//! shared by every image being rendered (413 for an image that needs more
//! than all of it; others wait for their share), held until the image is
//! encoded.

pub mod image;
pub mod levels;
pub mod preview;

use bytes::Bytes;

use crate::service::array::downsample::{self, Downsample};
use crate::service::array::read::{self, DataRead, ReadParams};
use crate::service::wire::WireFormat;
use crate::service::{cpu, node, NodeRef, ServiceError, ServiceResult};
use image::{Layout, RenderError, RenderOptions};

/// Images with at most this many pixels are rendered on the calling thread
/// (less work than the hand-off to the CPU pool).
const INLINE_PIXELS: u64 = 4096;

fn render_error(e: RenderError) -> ServiceError {
    ServiceError::UnsupportedFormat(e.0)
}

/// Renders a selection as a PNG.
///
/// # Errors
/// As [`read::read`]; a `field`, a data type or a selection shape that is
/// not an image (400 `unsupported_format`); more pixels than
/// `limits.max_image_pixels` (413).
pub async fn render_png(
    at: &NodeRef<'_>,
    mut params: ReadParams,
    opts: RenderOptions,
    ds: Option<Downsample>,
) -> ServiceResult<Bytes> {
    if params.field.is_some() {
        return Err(ServiceError::UnsupportedFormat(
            "format=png: field= is not supported; select a numeric array".into(),
        ));
    }
    let array = node::open_array(at).await?;
    image::check_type(&array.desc.data_type).map_err(render_error)?;
    params.format = WireFormat::Raw;
    let read = match ds {
        Some(ds) => downsample::read(at, params, ds).await?,
        None => read::read(at, params).await?,
    };
    let layout = Layout::of(&read.shape).map_err(render_error)?;
    let max = at.app().config().limits.max_image_pixels;
    if layout.pixels() > max {
        return Err(ServiceError::SelectionTooLarge(format!(
            "format=png: the image would be {}×{} = {} pixels, more than limits.max_image_pixels = {max}",
            layout.height,
            layout.width,
            layout.pixels()
        )));
    }
    let es = read.data_type.size().unwrap_or(8) as u64;
    let need = render_bytes(layout.pixels(), layout.channels as u64, es);
    let budget = at.app().config().limits.render_budget_bytes;
    if need > budget {
        return Err(ServiceError::SelectionTooLarge(format!(
            "format=png: rendering {}×{}×{} values of {es} bytes needs {need} bytes, more than \
             limits.render_budget_bytes = {budget}",
            layout.height, layout.width, layout.channels
        )));
    }
    // Clamped to the budget, which is at most Semaphore::MAX_PERMITS KiB.
    let kib = u32::try_from(need.div_ceil(1024).clamp(1, budget.div_ceil(1024))).unwrap_or(u32::MAX);
    let _share = at
        .app()
        .render_budget()
        .clone()
        .acquire_many_owned(kib)
        .await
        .map_err(|_| ServiceError::Internal("the render budget is closed".into()))?;
    let (dt, shape) = (read.data_type.clone(), read.shape.clone());
    let data = gather(read).await?;
    let fill = array.desc.fill_value.clone();
    let png = cpu::run_or_inline(layout.pixels() <= INLINE_PIXELS, move || {
        let pixels = image::render(&data, &dt, &shape, Some(&fill), &opts)?;
        image::encode_png(&pixels)
    })
    .await?
    .map_err(render_error)?;
    Ok(Bytes::from(png))
}

/// The memory a rendering of `pixels` pixels of `channels` values of `es`
/// bytes takes at its peak, counted generously: the gathered elements and
/// the read's slab being appended (2 × es a value), the scaling's keys and
/// its copy for the percentile selection (2 × es + 12 a value, 8-byte keys
/// for 8-byte types), and the RGBA pixels with the encoder's filtered rows
/// (8 a pixel). Measured peaks (RSS above idle, one request, 4096² images)
/// against this count: gray uint8 215 / 403 MB, gray float32 423 / 604 MB,
/// gray float64 524–716 / 872 MB, RGBA uint8 619 / 1,208 MB, RGBA float32
/// 1,336 / 2,013 MB.
#[must_use]
pub fn render_bytes(pixels: u64, channels: u64, es: u64) -> u64 {
    let values = pixels.saturating_mul(channels);
    values.saturating_mul(es.saturating_mul(4).saturating_add(12)).saturating_add(pixels.saturating_mul(8))
}

/// The whole body of a raw read, in memory (the caller bounded its size).
async fn gather(read: DataRead) -> ServiceResult<Vec<u8>> {
    let len = read.content_length.and_then(|l| usize::try_from(l).ok()).unwrap_or(0);
    let mut out = Vec::with_capacity(len);
    let mut first = read.first;
    let ended = read::take_last(&mut first);
    first.iter().for_each(|p| out.extend_from_slice(p));
    let Some(mut rx) = read.rest else { return Ok(out) };
    if ended {
        return Ok(out);
    }
    loop {
        match rx.recv().await {
            Some(Ok(mut pieces)) => {
                let last = read::take_last(&mut pieces);
                pieces.iter().for_each(|p| out.extend_from_slice(p));
                if last {
                    return Ok(out);
                }
            }
            Some(Err(e)) => return Err(e),
            None => return Err(ServiceError::Internal("the read stopped before its end".into())),
        }
    }
}
