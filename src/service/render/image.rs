//! Elements to pixels, with no I/O: the layout of a selection as an image,
//! the value range, the scaling, the colormap and the PNG encoding.
//!
//! The rules (the slice endpoint's `format=png` and the preview endpoint):
//!
//! - **Layout.** Dimensions of size 1 are dropped while more than three
//!   remain. Three dimensions are an RGB or RGBA image when the *last* has
//!   size 3 or 4 (rows × columns × channels, as numpy and PIL hold images),
//!   else when the *first* has (channels × rows × columns, as OME-Zarr's `c`
//!   axis). Otherwise size-1 dimensions are dropped while more than two
//!   remain, and two dimensions are rows × columns, one value per pixel;
//!   anything else is refused.
//! - **Range.** `rescale=lo,hi` when given; else `lo, hi` are the 2nd and
//!   98th percentiles of the finite values of the selection (numpy's
//!   default, linear, interpolation); for `bool` `0, 1` and for `uint8`
//!   `0, 255`. Selections with no finite value use `0, 1`.
//! - **Scaling.** A value `v` is `round(255 × clamp((v − lo) / (hi − lo), 0, 1))`,
//!   rounded half to even as numpy's `round`; `hi = lo` maps everything to
//!   0; `±inf` clamp. 64-bit integers are converted to `f64` first.
//! - **Colour.** One channel through the colormap: `gray` keeps it one
//!   channel; the others are 256-entry tables from the `colorous` crate
//!   (d3-scale-chromatic's maps), entry `i` the gradient at `i / 255`:
//!   `viridis`, `magma`, `inferno` and `plasma` are matplotlib's own tables
//!   (within 1 of 255), `cividis` and `turbo` d3's polynomial fits of them
//!   (up to 18 and 32 of 255 off matplotlib's tables). Three or four
//!   channels are scaled each with the same `lo, hi` and written as
//!   RGB/RGBA (a colormap is refused). A colormapped image with no
//!   transparent pixel is encoded as an indexed PNG (the table as palette,
//!   the scaled values as indices); with one, as RGBA.
//! - **Transparency.** A pixel with a NaN value (in any channel), and with
//!   `transparent_fill` a pixel whose values all equal the array's fill
//!   value (compared as stored bytes), is fully transparent; the image then
//!   has an alpha channel (gray + alpha, or RGBA).
//! - **Types.** bool, every integer (`int4` too), float16, bfloat16,
//!   float32, float64 and the float8 types; the engine hands them over in
//!   its little-endian layout whatever the stored byte order. Complex,
//!   datetime, string, bytes and structured types are refused.

use std::sync::OnceLock;

use crate::zarr::data_type::DataType;

/// Why a selection cannot be rendered (a client's mistake: 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RenderError(pub String);

/// A colormap for one-channel images.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Colormap {
    /// The scaled value as a gray level (a one-channel PNG).
    #[default]
    Gray,
    Viridis,
    Magma,
    Inferno,
    Plasma,
    Cividis,
    Turbo,
}

/// Every colormap by name, as `colormap=` spells it.
pub const COLORMAPS: &[(&str, Colormap)] = &[
    ("gray", Colormap::Gray),
    ("viridis", Colormap::Viridis),
    ("magma", Colormap::Magma),
    ("inferno", Colormap::Inferno),
    ("plasma", Colormap::Plasma),
    ("cividis", Colormap::Cividis),
    ("turbo", Colormap::Turbo),
];

impl Colormap {
    /// The colormap `name` names (any case; `grey` is gray).
    ///
    /// # Errors
    /// An unknown name, listing the known ones.
    pub fn parse(name: &str) -> Result<Self, RenderError> {
        let name = name.trim().to_ascii_lowercase();
        if name.is_empty() || name == "grey" {
            return Ok(Self::Gray);
        }
        COLORMAPS.iter().find(|(n, _)| *n == name).map(|(_, c)| *c).ok_or_else(|| {
            let names: Vec<&str> = COLORMAPS.iter().map(|(n, _)| *n).collect();
            RenderError(format!("colormap `{name}` is unknown; use one of {}", names.join(", ")))
        })
    }

    /// Its name.
    #[must_use]
    pub fn name(self) -> &'static str {
        COLORMAPS.iter().find(|(_, c)| *c == self).map_or("gray", |(n, _)| n)
    }

    /// The colour of each scaled value 0..=255: the gradient at `i / 255`
    /// (for matplotlib's 256-entry maps, exactly entry `i`).
    #[must_use]
    pub fn table(self) -> &'static [[u8; 3]; 256] {
        static TABLES: [OnceLock<[[u8; 3]; 256]>; 7] = [const { OnceLock::new() }; 7];
        let (slot, gradient) = match self {
            Self::Gray => (0, None),
            Self::Viridis => (1, Some(colorous::VIRIDIS)),
            Self::Magma => (2, Some(colorous::MAGMA)),
            Self::Inferno => (3, Some(colorous::INFERNO)),
            Self::Plasma => (4, Some(colorous::PLASMA)),
            Self::Cividis => (5, Some(colorous::CIVIDIS)),
            Self::Turbo => (6, Some(colorous::TURBO)),
        };
        TABLES[slot].get_or_init(|| {
            let mut t = [[0u8; 3]; 256];
            for (i, entry) in t.iter_mut().enumerate() {
                *entry = match gradient {
                    None => [i as u8; 3],
                    Some(g) => {
                        let c = g.eval_continuous(i as f64 / 255.0);
                        [c.r, c.g, c.b]
                    }
                };
            }
            t
        })
    }
}

/// How to render.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RenderOptions {
    /// `lo, hi`; `None`: the percentiles (or the type's full range).
    pub rescale: Option<(f64, f64)>,
    /// The colormap of one-channel images.
    pub colormap: Colormap,
    /// Pixels equal to the fill value are transparent.
    pub transparent_fill: bool,
}

/// Parses `rescale=lo,hi`.
///
/// # Errors
/// Not two finite numbers.
pub fn parse_rescale(text: &str) -> Result<(f64, f64), RenderError> {
    let bad = || RenderError(format!("rescale `{text}`: expected two finite numbers `lo,hi`"));
    let (lo, hi) = text.split_once(',').ok_or_else(bad)?;
    let lo: f64 = lo.trim().parse().map_err(|_| bad())?;
    let hi: f64 = hi.trim().parse().map_err(|_| bad())?;
    if !lo.is_finite() || !hi.is_finite() {
        return Err(bad());
    }
    Ok((lo, hi))
}

/// How a selection's elements are laid out as pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub height: usize,
    pub width: usize,
    /// 1 (gray or colormap), 3 (RGB) or 4 (RGBA).
    pub channels: usize,
    /// Channels are the first dimension (else the last, or none).
    pub channels_first: bool,
}

impl Layout {
    /// The layout of a selection of `shape` (see the module's rules).
    ///
    /// # Errors
    /// A shape that is not an image, naming it.
    pub fn of(shape: &[u64]) -> Result<Self, RenderError> {
        let squeeze = |dims: &mut Vec<u64>, keep: usize| {
            while dims.len() > keep {
                let Some(i) = dims.iter().position(|&d| d == 1) else { break };
                dims.remove(i);
            }
        };
        let us = |d: u64| usize::try_from(d).map_err(|_| RenderError(format!("dimension of {d} is too large")));
        let is_channels = |d: u64| d == 3 || d == 4;
        let mut dims: Vec<u64> = shape.to_vec();
        squeeze(&mut dims, 3);
        match dims.as_slice() {
            [h, w, c] if is_channels(*c) => {
                return Ok(Self { height: us(*h)?, width: us(*w)?, channels: us(*c)?, channels_first: false })
            }
            [c, h, w] if is_channels(*c) => {
                return Ok(Self { height: us(*h)?, width: us(*w)?, channels: us(*c)?, channels_first: true })
            }
            _ => {}
        }
        squeeze(&mut dims, 2);
        match dims.as_slice() {
            [h, w] => Ok(Self { height: us(*h)?, width: us(*w)?, channels: 1, channels_first: false }),
            _ => Err(RenderError(format!(
                "format=png: the selection's shape {shape:?} is not an image; select two dimensions, or three \
                 with 3 or 4 channels (RGB, RGBA) last or first"
            ))),
        }
    }

    /// Pixels.
    #[must_use]
    pub fn pixels(&self) -> u64 {
        self.height as u64 * self.width as u64
    }
}

/// Checks that elements of `dt` can be rendered.
///
/// # Errors
/// A type with no scalar value (complex, datetime, strings, bytes,
/// structured), naming it.
pub fn check_type(dt: &DataType) -> Result<(), RenderError> {
    match dt {
        DataType::Bool
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Float16
        | DataType::BFloat16
        | DataType::Float32
        | DataType::Float64
        | DataType::Int4
        | DataType::Float8(_) => Ok(()),
        other => Err(RenderError(format!(
            "format=png: elements of type {} have no scalar value to render",
            crate::service::wire::zarr_name(other)
        ))),
    }
}

/// The elements of `data` (the engine's little-endian layout) as `f64`.
fn values(data: &[u8], dt: &DataType) -> Vec<f64> {
    fn each<const N: usize>(data: &[u8], f: impl Fn([u8; N]) -> f64) -> Vec<f64> {
        data.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).collect()
    }
    match dt {
        DataType::Bool => data.iter().map(|&b| f64::from(u8::from(b != 0))).collect(),
        DataType::Int8 | DataType::Int4 => data.iter().map(|&b| f64::from(b as i8)).collect(),
        DataType::UInt8 => data.iter().map(|&b| f64::from(b)).collect(),
        DataType::Int16 => each(data, |b| f64::from(i16::from_le_bytes(b))),
        DataType::UInt16 => each(data, |b| f64::from(u16::from_le_bytes(b))),
        DataType::Int32 => each(data, |b| f64::from(i32::from_le_bytes(b))),
        DataType::UInt32 => each(data, |b| f64::from(u32::from_le_bytes(b))),
        DataType::Int64 => each(data, |b| i64::from_le_bytes(b) as f64),
        DataType::UInt64 => each(data, |b| u64::from_le_bytes(b) as f64),
        DataType::Float16 => each(data, |b| f64::from(half::f16::from_le_bytes(b))),
        DataType::BFloat16 => each(data, |b| f64::from(half::bf16::from_le_bytes(b))),
        DataType::Float32 => each(data, |b| f64::from(f32::from_le_bytes(b))),
        DataType::Float64 => each(data, f64::from_le_bytes),
        DataType::Float8(kind) => data.iter().map(|&b| kind.to_f64(b)).collect(),
        _ => Vec::new(),
    }
}

/// The key of a finite value whose unsigned order is the values' order
/// (`f64::total_cmp`'s).
#[inline]
fn order_key(v: f64) -> u64 {
    let b = v.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | (1 << 63)
    }
}

/// The value of an [`order_key`].
#[inline]
fn key_value(k: u64) -> f64 {
    f64::from_bits(if k >> 63 == 1 { k & !(1 << 63) } else { !k })
}

/// The 32-bit [`order_key`] of a finite `f32`.
#[inline]
fn order_key32(v: f32) -> u32 {
    let b = v.to_bits();
    if b >> 31 == 1 {
        !b
    } else {
        b | (1 << 31)
    }
}

/// The value of an [`order_key32`].
#[inline]
fn key_value32(k: u32) -> f64 {
    f64::from(f32::from_bits(if k >> 31 == 1 { k & !(1 << 31) } else { !k }))
}

/// An unsigned order key: its top bits pick a histogram bucket.
trait Key: Ord + Copy {
    /// The key's top [`BUCKET_BITS`] bits.
    fn bucket(self) -> usize;
}

/// Bits of the first histogram pass of [`select_ranks`] (4,096 buckets).
const BUCKET_BITS: u32 = 12;

impl Key for u32 {
    #[inline]
    fn bucket(self) -> usize {
        (self >> (32 - BUCKET_BITS)) as usize
    }
}

impl Key for u64 {
    #[inline]
    fn bucket(self) -> usize {
        #[allow(clippy::cast_possible_truncation)] // 12 bits
        let b = (self >> (64 - BUCKET_BITS)) as usize;
        b
    }
}

/// The keys of 0-based ranks `ranks` (ascending) in the order of `keys`,
/// exactly as sorting would find them: one pass counts the keys per bucket
/// of their top bits, a second gathers only the keys of the buckets the
/// ranks fall in, and those few are selected among. Values spread over many
/// buckets (the usual tile) cost two linear passes; values packed into one
/// bucket cost one selection over them, as selecting over all would.
fn select_ranks<K: Key>(keys: &[K], ranks: &[usize]) -> Vec<K> {
    let mut counts = vec![0u32; 1 << BUCKET_BITS];
    for &k in keys {
        counts[k.bucket()] += 1;
    }
    // For each rank: its bucket and its rank inside the bucket.
    let mut wanted: Vec<(usize, usize)> = Vec::with_capacity(ranks.len());
    let (mut bucket, mut below) = (0usize, 0usize);
    for &r in ranks {
        while below + counts[bucket] as usize <= r {
            below += counts[bucket] as usize;
            bucket += 1;
        }
        wanted.push((bucket, r - below));
    }
    let mut out = Vec::with_capacity(ranks.len());
    let mut i = 0;
    while i < wanted.len() {
        let b = wanted[i].0;
        let mut members: Vec<K> = keys.iter().copied().filter(|k| k.bucket() == b).collect();
        while i < wanted.len() && wanted[i].0 == b {
            let (_, k, _) = members.select_nth_unstable(wanted[i].1);
            out.push(*k);
            i += 1;
        }
    }
    out
}

/// numpy's `percentile(values, p)` (method `linear`) for each `p`, of the
/// finite values whose order-preserving keys are `keys` (`value` turns a
/// key back), computed as numpy computes it so results agree to the bit.
fn percentiles<K: Key>(keys: &[K], ps: &[f64], value: impl Fn(K) -> f64) -> Vec<f64> {
    let n = keys.len();
    let mut ranks = Vec::with_capacity(2 * ps.len());
    let mut weights = Vec::with_capacity(ps.len());
    for &p in ps {
        let q = p / 100.0;
        // numpy's virtual index for alpha = beta = 1.
        let virtual_index = (n as f64) * q + (1.0 - q) - 1.0;
        let below = virtual_index.floor();
        let i = (below.max(0.0) as usize).min(n - 1);
        ranks.extend([i, (i + 1).min(n - 1)]);
        weights.push(virtual_index - below);
    }
    let mut order: Vec<usize> = (0..ranks.len()).collect();
    order.sort_by_key(|&o| ranks[o]);
    let sorted: Vec<usize> = order.iter().map(|&o| ranks[o]).collect();
    let found = select_ranks(keys, &sorted);
    let mut at = vec![0.0; ranks.len()];
    for (slot, k) in order.iter().zip(found) {
        at[*slot] = value(k);
    }
    weights
        .iter()
        .enumerate()
        .map(|(w, &gamma)| {
            let (a, b) = (at[2 * w], at[2 * w + 1]);
            // numpy's _lerp.
            let diff = b - a;
            if gamma >= 0.5 {
                b - diff * (1.0 - gamma)
            } else {
                a + diff * gamma
            }
        })
        .collect()
}

/// The value range of a selection without `rescale=`. Types whose values
/// are all exact `f32`s select on 32-bit keys (half the bytes to move).
fn default_range(vals: &[f64], dt: &DataType) -> (f64, f64) {
    let finite = || vals.iter().copied().filter(|v| v.is_finite());
    match dt {
        DataType::Bool => (0.0, 1.0),
        DataType::UInt8 => (0.0, 255.0),
        _ if vals.iter().all(|v| !v.is_finite()) => (0.0, 1.0),
        DataType::Float32
        | DataType::Float16
        | DataType::BFloat16
        | DataType::Float8(_)
        | DataType::Int4
        | DataType::Int8
        | DataType::Int16
        | DataType::UInt16 => {
            #[allow(clippy::cast_possible_truncation)] // exact: these values are f32s
            let keys: Vec<u32> = finite().map(|v| order_key32(v as f32)).collect();
            let p = percentiles(&keys, &[2.0, 98.0], key_value32);
            (p[0], p[1])
        }
        _ => {
            let keys: Vec<u64> = finite().map(order_key).collect();
            let p = percentiles(&keys, &[2.0, 98.0], key_value);
            (p[0], p[1])
        }
    }
}

/// `y` (0 to 255) rounded half to even, as numpy's `round` and `rint`: by
/// adding and taking away 1.5 × 2^52, which leaves the rounding to the FPU's
/// round-to-nearest-even mode. `f64::round_ties_even` does the same through a
/// call to libm's `rint` (x86-64 has no inline rounding instruction before
/// SSE4.1), a fifth of a tile's rendering time.
#[inline]
fn rint(y: f64) -> f64 {
    const MAGIC: f64 = 6_755_399_441_055_744.0;
    (y + MAGIC) - MAGIC
}

/// One value scaled to 0..=255 (`hi != lo`). Branch-free, so a loop of
/// it vectorises: NaN passes `clamp` and the rounding as NaN, and casts
/// to 0.
#[inline]
fn scale(v: f64, lo: f64, hi: f64) -> u8 {
    let t = ((v - lo) / (hi - lo)).clamp(0.0, 1.0);
    rint(255.0 * t) as u8
}

/// Every value scaled to 0..=255 (everything 0 when `hi = lo`).
fn scale_all(vals: &[f64], lo: f64, hi: f64) -> Vec<u8> {
    if hi == lo {
        return vec![0; vals.len()];
    }
    vals.iter().map(|&v| scale(v, lo, hi)).collect()
}

/// A rendered image, before encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pixels {
    pub width: u32,
    pub height: u32,
    /// 1 gray (or palette indices), 2 gray + alpha, 3 RGB, 4 RGBA.
    pub channels: u8,
    /// With one channel: the colours of the indices (an indexed PNG).
    pub palette: Option<&'static [[u8; 3]; 256]>,
    /// Row-major, `channels` bytes a pixel.
    pub data: Vec<u8>,
}

/// Renders `data` (the selection's elements, `shape`, the engine's layout)
/// as pixels. A colormap without transparency gives palette indices (the
/// scaled values; an indexed PNG, a third of the bytes of RGB).
///
/// # Errors
/// A type or shape that is not renderable.
pub fn render(
    data: &[u8],
    dt: &DataType,
    shape: &[u64],
    fill: Option<&[u8]>,
    opts: &RenderOptions,
) -> Result<Pixels, RenderError> {
    check_type(dt)?;
    let layout = Layout::of(shape)?;
    if layout.channels > 1 && opts.colormap != Colormap::Gray {
        return Err(RenderError(format!(
            "colormap={}: the selection has {} channels (RGB/RGBA); a colormap applies to one channel",
            opts.colormap.name(),
            layout.channels
        )));
    }
    let es = dt.size().unwrap_or(1);
    let vals = values(data, dt);
    let (h, w, c) = (layout.height, layout.width, layout.channels);
    if vals.len() != h * w * c {
        return Err(RenderError(format!("internal: {} elements for a {h}×{w}×{c} image", vals.len())));
    }
    let (lo, hi) = opts.rescale.unwrap_or_else(|| default_range(&vals, dt));
    // Element index of channel `k` of pixel `p`.
    let at = |p: usize, k: usize| if layout.channels_first { k * h * w + p } else { p * c + k };
    let fill = fill.filter(|f| opts.transparent_fill && f.len() == es);
    let n = h * w;
    // Transparent pixels: NaN in a channel (floats only), or every channel the fill value.
    let floats = matches!(
        dt,
        DataType::Float16 | DataType::BFloat16 | DataType::Float32 | DataType::Float64 | DataType::Float8(_)
    );
    let has_nan = floats && vals.iter().any(|v| v.is_nan());
    let mask: Option<Vec<bool>> = (has_nan || fill.is_some()).then(|| {
        (0..n)
            .map(|p| {
                (has_nan && (0..c).any(|k| vals[at(p, k)].is_nan()))
                    || fill.is_some_and(|f| (0..c).all(|k| &data[at(p, k) * es..(at(p, k) + 1) * es] == f))
            })
            .collect()
    });
    let mask = mask.filter(|m| m.iter().any(|&t| t));
    let scaled = scale_all(&vals, lo, hi);
    drop(vals);
    let (channels, palette, out): (u8, _, Vec<u8>) = match (c, opts.colormap, &mask) {
        (1, Colormap::Gray, None) => (1, None, scaled),
        (1, map, None) => (1, Some(map.table()), scaled),
        (1, Colormap::Gray, Some(mask)) => {
            let mut out = vec![0u8; n * 2];
            for ((px, &v), &t) in out.chunks_exact_mut(2).zip(&scaled).zip(mask) {
                if !t {
                    px.copy_from_slice(&[v, 255]);
                }
            }
            (2, None, out)
        }
        (1, map, Some(mask)) => {
            let table = map.table();
            let mut out = vec![0u8; n * 4];
            for ((px, &v), &t) in out.chunks_exact_mut(4).zip(&scaled).zip(mask) {
                if !t {
                    let [r, g, b] = table[usize::from(v)];
                    px.copy_from_slice(&[r, g, b, 255]);
                }
            }
            (4, None, out)
        }
        (c, _, mask) => {
            let channels = if mask.is_some() { 4 } else { c };
            let mut out = vec![0u8; n * channels];
            for (p, px) in out.chunks_exact_mut(channels).enumerate() {
                if mask.as_ref().is_some_and(|m| m[p]) {
                    continue;
                }
                for (k, x) in px.iter_mut().take(c).enumerate() {
                    *x = scaled[at(p, k)];
                }
                if channels > c {
                    px[c] = 255;
                }
            }
            (channels as u8, None, out)
        }
    };
    let dim = |d: usize| u32::try_from(d).map_err(|_| RenderError(format!("an image side of {d} pixels is too large")));
    Ok(Pixels { width: dim(w)?, height: dim(h)?, channels, palette, data: out })
}

/// Encodes pixels as a PNG (8 bits a channel, or 8-bit palette indices;
/// the `png` crate's fastest setting: fdeflate and the `Up` filter, a
/// 256 × 256 tile in well under a millisecond).
///
/// # Errors
/// The encoder's (an empty image: PNG has no zero-sized images).
pub fn encode_png(p: &Pixels) -> Result<Vec<u8>, RenderError> {
    if p.width == 0 || p.height == 0 {
        return Err(RenderError(format!("format=png: the selection is empty ({}×{})", p.height, p.width)));
    }
    let mut out = Vec::with_capacity(p.data.len() + 2048);
    let mut enc = png::Encoder::new(&mut out, p.width, p.height);
    enc.set_color(match (p.channels, p.palette) {
        (1, Some(_)) => png::ColorType::Indexed,
        (1, None) => png::ColorType::Grayscale,
        (2, _) => png::ColorType::GrayscaleAlpha,
        (3, _) => png::ColorType::Rgb,
        _ => png::ColorType::Rgba,
    });
    if let (1, Some(table)) = (p.channels, p.palette) {
        enc.set_palette(table.as_flattened().to_vec());
    }
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Fastest);
    let err = |e: png::EncodingError| RenderError(format!("PNG encoding failed: {e}"));
    let mut writer = enc.write_header().map_err(err)?;
    writer.write_image_data(&p.data).map_err(err)?;
    writer.finish().map_err(err)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        assert_eq!(Layout::of(&[3, 5]).unwrap(), Layout { height: 3, width: 5, channels: 1, channels_first: false });
        assert_eq!(Layout::of(&[1, 5, 1, 6]).unwrap().pixels(), 30);
        assert_eq!(Layout::of(&[1, 4, 1, 6]).unwrap().channels, 4); // (4, 1, 6): RGBA, channels first
        assert_eq!(
            Layout::of(&[1, 30, 3]).unwrap(),
            Layout { height: 1, width: 30, channels: 3, channels_first: false }
        );
        assert_eq!(Layout::of(&[1, 300, 200]).unwrap().channels, 1);
        assert_eq!(Layout::of(&[4, 6, 3]).unwrap().channels, 3);
        assert!(Layout::of(&[5, 6, 7]).unwrap_err().0.contains("not an image"));
        assert!(Layout::of(&[2, 6, 5]).is_err());
        assert!(Layout::of(&[2, 2, 2, 2]).is_err());
        let cf = Layout::of(&[4, 6, 8]).unwrap();
        assert_eq!((cf.channels, cf.channels_first, cf.height, cf.width), (4, true, 6, 8));
        assert!(Layout::of(&[7]).is_err());
        assert!(Layout::of(&[]).is_err());
    }

    #[test]
    fn percentiles_are_numpys() {
        let pct =
            |v: &[f64], p: f64| percentiles(&v.iter().copied().map(order_key).collect::<Vec<_>>(), &[p], key_value)[0];
        // numpy.percentile(range(101), [2, 98]) == [2, 98];
        // numpy.percentile([0, 10], 2) == 0.2 and [1, 2, 3, 4] at 98 == 3.94.
        let v: Vec<f64> = (0..=100).map(f64::from).collect();
        assert_eq!(pct(&v, 2.0), 2.0);
        assert_eq!(pct(&v, 98.0), 98.0);
        assert!((pct(&[10.0, 0.0], 2.0) - 0.2).abs() < 1e-12);
        assert!((pct(&[4.0, 1.0, 3.0, 2.0], 98.0) - 3.94).abs() < 1e-12);
        assert_eq!(pct(&[5.0], 98.0), 5.0);
        // Keys order as total_cmp does, and come back.
        for v in [-1e300, -2.5, -0.0, 0.0, 1e-310, 3.0, f64::MAX] {
            assert_eq!(key_value(order_key(v)).to_bits(), v.to_bits());
        }
        assert!(
            order_key(-2.5) < order_key(-0.0) && order_key(-0.0) < order_key(0.0) && order_key(0.0) < order_key(1e-310)
        );
    }

    #[test]
    fn histogram_selection_equals_sorting() {
        // Spread, packed into one bucket, duplicated, tiny and negative.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let sets: Vec<Vec<f64>> = vec![
            (0..5000).map(|_| (next() % 1_000_000) as f64 / 1e3 - 500.0).collect(),
            (0..5000).map(|_| 1.0 + (next() % 1000) as f64 * 1e-12).collect(),
            (0..777).map(|_| (next() % 3) as f64).collect(),
            vec![7.0],
            vec![-0.0, 0.0, -1e-300, 1e300],
        ];
        for v in sets {
            let keys: Vec<u64> = v.iter().copied().map(order_key).collect();
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            let ranks: Vec<usize> = [0, 1, v.len() / 50, v.len() / 2, v.len() - 1].into_iter().collect();
            let mut ranks: Vec<usize> = ranks.into_iter().map(|r| r.min(v.len() - 1)).collect();
            ranks.sort_unstable();
            let want: Vec<u64> = ranks.iter().map(|&r| sorted[r]).collect();
            assert_eq!(select_ranks(&keys, &ranks), want);
            let k32: Vec<u32> = v.iter().map(|&x| order_key32(x as f32)).collect();
            let mut s32 = k32.clone();
            s32.sort_unstable();
            assert_eq!(select_ranks(&k32, &ranks), ranks.iter().map(|&r| s32[r]).collect::<Vec<_>>());
        }
    }

    #[test]
    fn scaling_clamps_and_rounds_half_to_even() {
        assert_eq!(scale(-1.0, 0.0, 1.0), 0);
        assert_eq!(scale(2.0, 0.0, 1.0), 255);
        assert_eq!(scale(f64::INFINITY, 0.0, 1.0), 255);
        assert_eq!(scale(f64::NAN, 0.0, 1.0), 0);
        assert_eq!(scale_all(&[1.0, 5.0], 3.0, 3.0), [0, 0]);
        assert_eq!(scale(0.5, 0.0, 1.0), 128); // 127.5 → 128 (even)
        for (y, even) in
            [(2.5, 2.0), (3.5, 4.0), (254.5, 254.0), (0.49999999999999994, 0.0), (126.5, 126.0), (255.0, 255.0)]
        {
            assert_eq!(rint(y), even, "{y}");
            assert_eq!(rint(y), y.round_ties_even(), "{y}");
        }
        assert_eq!(scale(3.0, 3.0, 3.0), 0);
        assert_eq!(scale(0.25, 1.0, 0.0), 191); // an inverted range inverts
    }

    #[test]
    fn every_numeric_type_converts() {
        assert_eq!(values(&[0, 1, 2], &DataType::Bool), vec![0.0, 1.0, 1.0]);
        assert_eq!(values(&[0xff], &DataType::Int8), vec![-1.0]);
        assert_eq!(values(&[0xff], &DataType::UInt8), vec![255.0]);
        assert_eq!(values(&(-3i64).to_le_bytes(), &DataType::Int64), vec![-3.0]);
        assert_eq!(values(&1.5f32.to_le_bytes(), &DataType::Float32), vec![1.5]);
        assert_eq!(values(&half::f16::from_f32(0.5).to_le_bytes(), &DataType::Float16), vec![0.5]);
        assert_eq!(values(&half::bf16::from_f32(2.0).to_le_bytes(), &DataType::BFloat16), vec![2.0]);
        assert!(check_type(&DataType::Complex64).unwrap_err().0.contains("complex64"));
        assert!(check_type(&DataType::String).is_err());
    }

    #[test]
    fn gray_colormaps_rgb_and_transparency() {
        let data: Vec<u8> = [0.0f32, 1.0, f32::NAN, 0.5].iter().flat_map(|v| v.to_le_bytes()).collect();
        let opts = RenderOptions { rescale: Some((0.0, 1.0)), ..RenderOptions::default() };
        let p = render(&data, &DataType::Float32, &[2, 2], None, &opts).unwrap();
        assert_eq!((p.channels, p.data.clone()), (2, vec![0, 255, 255, 255, 0, 0, 128, 255]));
        let opts = RenderOptions { colormap: Colormap::Viridis, ..opts };
        let p = render(&data[..8], &DataType::Float32, &[1, 2], None, &opts).unwrap();
        assert_eq!((p.channels, p.palette, p.data.clone()), (1, Some(Colormap::Viridis.table()), vec![0, 255]));
        // With a NaN: RGBA, the NaN transparent.
        let p = render(&data[..12], &DataType::Float32, &[1, 3], None, &opts).unwrap();
        assert_eq!((p.channels, p.palette), (4, None));
        assert_eq!(&p.data[..4], &[0x44, 0x01, 0x54, 255]);
        assert_eq!(&p.data[8..], &[0, 0, 0, 0]);
        assert_eq!(Colormap::Viridis.table()[0], [0x44, 0x01, 0x54]); // matplotlib's first viridis entry
                                                                      // Fill transparency compares stored bytes.
        let ints = [7u8, 1, 7, 9];
        let opts = RenderOptions { transparent_fill: true, ..RenderOptions::default() };
        let p = render(&ints, &DataType::UInt8, &[2, 2], Some(&[7]), &opts).unwrap();
        assert_eq!(p.data, vec![0, 0, 1, 255, 0, 0, 9, 255]);
        // Channels first: 3 × 1 × 2.
        let rgb = [10u8, 20, 30, 40, 50, 60];
        let p = render(&rgb, &DataType::UInt8, &[3, 1, 2], None, &RenderOptions::default()).unwrap();
        assert_eq!((p.channels, p.width, p.height, p.data), (3, 2, 1, vec![10, 30, 50, 20, 40, 60]));
        let e = render(
            &rgb,
            &DataType::UInt8,
            &[1, 2, 3],
            None,
            &RenderOptions { colormap: Colormap::Turbo, ..RenderOptions::default() },
        );
        assert!(e.unwrap_err().0.contains("colormap=turbo"));
    }

    #[test]
    fn parameters_name_what_is_wrong() {
        assert_eq!(parse_rescale(" 1, 2.5").unwrap(), (1.0, 2.5));
        for bad in ["1", "a,b", "1,inf", "nan,1", "1,2,3"] {
            assert!(parse_rescale(bad).unwrap_err().0.contains("rescale"), "{bad}");
        }
        assert_eq!(Colormap::parse("Viridis").unwrap(), Colormap::Viridis);
        assert_eq!(Colormap::parse("grey").unwrap(), Colormap::Gray);
        let e = Colormap::parse("jet").unwrap_err().0;
        assert!(e.contains("jet") && e.contains("cividis"), "{e}");
    }

    #[test]
    fn pngs_decode_back() {
        let p = Pixels { width: 3, height: 2, channels: 3, palette: None, data: (0..18).collect() };
        let png = encode_png(&p).unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(png));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height, info.color_type), (3, 2, png::ColorType::Rgb));
        assert_eq!(&buf[..info.buffer_size()], &p.data[..]);
        assert!(encode_png(&Pixels { width: 0, height: 2, channels: 1, palette: None, data: vec![] }).is_err());
        // Palette indices decode to the palette's colours.
        let table = Colormap::Magma.table();
        let p = Pixels { width: 2, height: 2, channels: 1, palette: Some(table), data: vec![0, 255, 7, 128] };
        let mut decoder = png::Decoder::new(std::io::Cursor::new(encode_png(&p).unwrap()));
        decoder.set_transformations(png::Transformations::EXPAND);
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        let want: Vec<u8> = [0usize, 255, 7, 128].iter().flat_map(|&i| table[i]).collect();
        assert_eq!(&buf[..info.buffer_size()], &want[..]);
    }
}
