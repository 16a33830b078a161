//! Previews: a thumbnail of an array, for the browser and for people.
//!
//! The plane shown is the last two dimensions (rows, columns) at the middle
//! index (`d / 2`, rounded down) of every other dimension. It is reduced by
//! **striding**: with `s = ceil(max(rows, columns) / size)`, every `s`-th
//! row and column from the first, so the thumbnail is
//! `ceil(rows / s) × ceil(columns / s)` pixels, its largest side at most
//! `size`. It is exactly the slice read
//! `sel=<mid>,…,<mid>,::s,::s&format=png` with the same `colormap`,
//! `rescale` and `transparent_fill` (see [`super::image`] for the rules), so
//! a thumbnail can be checked against it.
//!
//! Previews are cached (32 MiB of PNGs, by mount, path and parameters) and
//! answered with an ETag that is a digest of the PNG: it changes when the
//! array's shown values do. A cached preview is used while the array's
//! metadata is the same opened document, no write went through zarrd since
//! it was made (the decoded chunk cache's generation), and the mount's
//! `recheck_cached_data` allows it (`never`: as long as it is cached; a
//! number of seconds: that long; `always`: never — the preview is made
//! again, through the chunk cache, at every request).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::image::{Colormap, RenderOptions};
use crate::service::array::read::ReadParams;
use crate::service::node::{self, ArrayNode};
use crate::service::{NodeRef, ServiceError, ServiceResult};
use crate::storage::mount::RecheckPolicy;
use crate::zarr::selection::{SelectionMode, SelectionSpec};

/// The thumbnail's largest side when `size=` is absent.
pub const DEFAULT_SIZE: u64 = 256;
/// The largest `size=`.
pub const MAX_SIZE: u64 = 2048;
/// Bytes of PNGs the cache keeps.
const CACHE_BYTES: u64 = 32 << 20;

/// What a preview asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct PreviewParams {
    /// The largest side, 1..=[`MAX_SIZE`].
    pub size: u64,
    /// How to render.
    pub opts: RenderOptions,
}

/// A rendered preview.
#[derive(Debug)]
pub struct Preview {
    /// The PNG.
    pub png: Bytes,
    /// Its strong ETag (quoted): a digest of the PNG.
    pub etag: String,
    /// The slice read it is (`sel=` text).
    pub selection: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    mount: String,
    path: String,
    size: u64,
    colormap: Colormap,
    rescale: Option<(u64, u64)>,
    transparent_fill: bool,
}

#[derive(Debug)]
struct Entry {
    preview: Arc<Preview>,
    array: Arc<ArrayNode>,
    generation: u64,
    made: Instant,
}

/// The cache of rendered previews (one per [`crate::service::App`]).
pub struct PreviewCache {
    cache: moka::sync::Cache<Key, Arc<Entry>>,
}

impl std::fmt::Debug for PreviewCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreviewCache").field("entries", &self.cache.entry_count()).finish()
    }
}

impl Default for PreviewCache {
    fn default() -> Self {
        let weigh = |_: &Key, e: &Arc<Entry>| u32::try_from(e.preview.png.len() + 512).unwrap_or(u32::MAX);
        Self { cache: moka::sync::Cache::builder().max_capacity(CACHE_BYTES).weigher(weigh).build() }
    }
}

/// The `sel=` text of the preview plane of an array of `shape`; `None`
/// when the array has fewer than two dimensions or no elements. The plane
/// is the last two dimensions, or, when the last has 3 or 4 elements and
/// there are at least three, the two before it with every channel (an
/// interleaved RGB or RGBA image, rows × columns × channels, is previewed
/// in colour, not as a strip of its columns × channels).
#[must_use]
pub fn plane_selection(shape: &[u64], size: u64) -> Option<String> {
    let n = shape.len();
    if n < 2 || shape.contains(&0) {
        return None;
    }
    let colour = n >= 3 && matches!(shape[n - 1], 3 | 4);
    let plane = if colour { n - 3 } else { n - 2 };
    let (rows, cols) = (shape[plane], shape[plane + 1]);
    let step = rows.max(cols).div_ceil(size.max(1)).max(1);
    let mut parts: Vec<String> = shape[..plane].iter().map(|d| (d / 2).to_string()).collect();
    parts.push(format!("::{step}"));
    parts.push(format!("::{step}"));
    if colour {
        parts.push(":".to_string());
    }
    Some(parts.join(","))
}

fn usable(entry: &Entry, array: &Arc<ArrayNode>, generation: u64, policy: RecheckPolicy) -> bool {
    Arc::ptr_eq(&entry.array, array)
        && entry.generation == generation
        && match policy {
            RecheckPolicy::Never => true,
            RecheckPolicy::Always => false,
            RecheckPolicy::After(d) => entry.made.elapsed() < d,
        }
}

/// The preview of the array at `at`.
///
/// # Errors
/// As a slice read with `format=png`; an array with fewer than two
/// dimensions or no elements (400 `unsupported_format`).
pub async fn preview(at: &NodeRef<'_>, params: PreviewParams) -> ServiceResult<Arc<Preview>> {
    let array = node::open_array(at).await?;
    let app = at.app();
    let generation = app.chunk_cache().generation();
    let policy = at.mount().mount().recheck_policy();
    let key = Key {
        mount: at.mount_name().to_string(),
        path: at.path().to_string(),
        size: params.size,
        colormap: params.opts.colormap,
        rescale: params.opts.rescale.map(|(lo, hi)| (lo.to_bits(), hi.to_bits())),
        transparent_fill: params.opts.transparent_fill,
    };
    if let Some(entry) = app.previews().cache.get(&key) {
        if usable(&entry, &array, generation, policy) {
            return Ok(entry.preview.clone());
        }
    }
    let selection = plane_selection(&array.desc.shape, params.size).ok_or_else(|| {
        ServiceError::UnsupportedFormat(format!(
            "a preview needs an array of two or more dimensions with elements; this one's shape is {:?}",
            array.desc.shape
        ))
    })?;
    let spec = SelectionSpec::parse(&selection, SelectionMode::Basic).map_err(ServiceError::from)?;
    let read = ReadParams { selection: spec, ..ReadParams::default() };
    let png = super::render_png(at, read, params.opts, None).await?;
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &png);
    let hex: String = digest.as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect();
    let preview = Arc::new(Preview { png, etag: format!("\"p{hex}\""), selection });
    let entry = Entry { preview: preview.clone(), array, generation, made: Instant::now() };
    app.previews().cache.insert(key, Arc::new(entry));
    Ok(preview)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planes_are_the_last_two_dimensions_strided() {
        assert_eq!(plane_selection(&[100, 50], 256).unwrap(), "::1,::1");
        assert_eq!(plane_selection(&[1000, 300], 256).unwrap(), "::4,::4"); // 250 × 75
        assert_eq!(plane_selection(&[5, 4, 512, 513], 256).unwrap(), "2,2,::3,::3"); // 171 × 171
        assert_eq!(plane_selection(&[3, 7], 2).unwrap(), "::4,::4");
        // Rows × columns × 3 or 4 channels: the plane in colour.
        assert_eq!(plane_selection(&[1000, 600, 3], 256).unwrap(), "::4,::4,:");
        assert_eq!(plane_selection(&[9, 512, 512, 4], 256).unwrap(), "4,::2,::2,:");
        assert_eq!(plane_selection(&[512, 3], 256).unwrap(), "::2,::2"); // two dimensions: gray
        assert!(plane_selection(&[7], 256).is_none());
        assert!(plane_selection(&[0, 7], 256).is_none());
        assert!(plane_selection(&[2, 0, 7], 256).is_none());
    }
}
