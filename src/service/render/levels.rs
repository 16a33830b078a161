//! Levels where they help: which level of an OME-Zarr multiscale group an
//! image is read from, and how it is strided to the size asked for.
//!
//! - **Previews of a group** ([`preview_level`]): the coarsest level whose
//!   plane (its last two dimensions) still has a side of at least `size`
//!   pixels (level 0 when none has), then that level's array preview
//!   ([`super::preview`]).
//! - **PNG slices with `size=`** ([`choose`]): the selection addresses
//!   level 0 (the full resolution); per dimension an index or a contiguous
//!   slice (step 1). A level `k` whose `scale` is an integer multiple `f`
//!   of level 0's along every dimension covers level 0's `[a, b)` by its
//!   elements `[floor(a / f), ceil(b / f))` (clamped to its shape), an
//!   index `i` by `floor(i / f)`: the level elements whose blocks hold the
//!   selected ones. The chosen level is the coarsest whose image (the two
//!   image dimensions of the box, as [`super::image::Layout`] finds them)
//!   has a side of at least `size`, else level 0; the box is then strided
//!   by `s = ceil(max(height, width) / size)` along those two dimensions,
//!   so the image's largest side is at most `size`. On an array, or with
//!   `level=`, there is one level (the selection addresses it) and only
//!   the striding applies.
//!
//! Levels are the datasets of the group's first `multiscales` entry
//! ([`crate::service::pyramid::level_path`]); a level of another rank, or
//! whose scale is not an integer multiple of level 0's, is never chosen.
//! Each level's array is opened once per request, through the metadata
//! cache; at most [`MAX_LEVELS`] are considered.

use std::sync::Arc;

use serde_json::Value;

use crate::service::node::{self, ArrayNode, Node, NodePath};
use crate::service::pyramid;
use crate::service::{NodeRef, ServiceError, ServiceResult};
use crate::zarr::selection::{DimIndexer, SelectionMode, SelectionSpec};

/// The most levels of a group considered.
pub const MAX_LEVELS: usize = 64;

/// One level of a multiscale group.
#[derive(Debug, Clone)]
pub struct Level {
    /// Its number (0: the full resolution).
    pub index: u64,
    /// Its array's path in the mount.
    pub path: NodePath,
    /// Its array.
    pub array: Arc<ArrayNode>,
    /// Per dimension, how many level-0 elements one of its elements covers
    /// (`None`: not an integer multiple, so never chosen for a slice).
    pub factors: Option<Vec<u64>>,
}

/// Where an image is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The level chosen (`None` when an array was addressed).
    pub level: Option<u64>,
    /// The array read.
    pub path: NodePath,
    /// The selection of that array (`sel=` text).
    pub selection: String,
}

fn invalid(field: &str, reason: impl Into<String>) -> ServiceError {
    ServiceError::InvalidRequest { field: field.into(), reason: reason.into() }
}

/// The `scale` of a dataset's `coordinateTransformations`.
fn scale_of(dataset: &Value) -> Option<Vec<f64>> {
    let ts = dataset.get("coordinateTransformations")?.as_array()?;
    let scale = ts.iter().find(|t| t.get("type").and_then(Value::as_str) == Some("scale"))?;
    scale.get("scale")?.as_array()?.iter().map(Value::as_f64).collect()
}

/// Integer factors `scale / base`, when every one is an integer >= 1 (to
/// one part in a million).
fn integer_factors(scale: &[f64], base: &[f64]) -> Option<Vec<u64>> {
    if scale.len() != base.len() {
        return None;
    }
    scale
        .iter()
        .zip(base)
        .map(|(&s, &b)| {
            let r = s / b;
            let n = r.round();
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            ((1.0..=(1u64 << 40) as f64).contains(&n) && (r - n).abs() <= n * 1e-6).then_some(n as u64)
        })
        .collect()
}

/// The levels of the multiscale group at `at` (at most [`MAX_LEVELS`]),
/// or, for an array, `None`.
///
/// # Errors
/// 400 naming `level` for a group without `multiscales` (as `level=`);
/// a level's array that is missing or unreadable.
pub async fn levels(at: &NodeRef<'_>) -> ServiceResult<Option<Vec<Level>>> {
    let group = match node::open(at).await? {
        Node::Array(_) => return Ok(None),
        Node::Group(g) => g,
    };
    let datasets = pyramid::datasets(&group.attributes).cloned().unwrap_or_default();
    if datasets.is_empty() {
        // The same answer as level=0 on such a group.
        pyramid::level_path(at, 0).await?;
    }
    let base = datasets.first().and_then(scale_of);
    let mut out = Vec::new();
    for (k, d) in datasets.iter().take(MAX_LEVELS).enumerate() {
        let index = k as u64;
        let path = pyramid::level_path(at, index).await?;
        let array = node::open_array(&at.app().node(at.mount_name(), &path)?).await?;
        let factors = if k == 0 {
            Some(vec![1; array.desc.shape.len()])
        } else {
            match (scale_of(d), &base) {
                (Some(s), Some(b)) => integer_factors(&s, b),
                _ => None,
            }
        };
        let rank = out.first().map_or(array.desc.shape.len(), |l: &Level| l.array.desc.shape.len());
        let factors = factors.filter(|f| f.len() == rank && array.desc.shape.len() == rank);
        out.push(Level { index, path, array, factors });
    }
    Ok(Some(out))
}

/// The two selection dimensions shown as rows and columns of an image of
/// a box whose dimensions are `lens` (`None` entries: indices, dropped),
/// as [`super::image::Layout::of`] lays it out; `None` when it is no image.
fn image_dims(lens: &[Option<u64>]) -> Option<(usize, usize)> {
    let mut kept: Vec<usize> = (0..lens.len()).filter(|&i| lens[i].is_some()).collect();
    let len = |i: usize| lens[i].unwrap_or(1);
    while kept.len() > 3 {
        let Some(p) = kept.iter().position(|&i| len(i) == 1) else { break };
        kept.remove(p);
    }
    let is_channels = |i: usize| len(i) == 3 || len(i) == 4;
    match kept.as_slice() {
        [h, w, c] if is_channels(*c) => Some((*h, *w)),
        [c, h, w] if is_channels(*c) => Some((*h, *w)),
        [h, w] => Some((*h, *w)),
        _ => None,
    }
}

/// A dimension of a box: an index or `[start, stop)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Span {
    Index(u64),
    Range(u64, u64),
}

impl Span {
    fn len(self) -> Option<u64> {
        match self {
            Self::Index(_) => None,
            Self::Range(a, b) => Some(b - a),
        }
    }
}

/// The box of level-0 elements a selection covers (indices and contiguous
/// slices only).
fn spans(sel: &SelectionSpec, shape: &[u64], names: Option<&[Option<String>]>) -> ServiceResult<Vec<Span>> {
    if sel.mode != SelectionMode::Basic {
        return Err(invalid("mode", "size= takes a basic selection (indices and slices)"));
    }
    let resolved = sel.resolve(shape, names).map_err(ServiceError::from)?;
    resolved
        .dims
        .iter()
        .enumerate()
        .map(|(d, ix)| match ix {
            DimIndexer::Index(i) => Ok(Span::Index(*i)),
            DimIndexer::Slice { start, step: 1, len } => Ok(Span::Range(*start, start + len)),
            DimIndexer::Slice { len: 0, .. } => Ok(Span::Range(0, 0)),
            _ => {
                Err(invalid("sel", format!("dimension {d}: with size=, a dimension is an index or a slice of step 1")))
            }
        })
        .collect()
}

/// `spans` of level 0 as level elements of `factors`, clamped to `shape`.
fn scale_spans(spans: &[Span], factors: &[u64], shape: &[u64]) -> Vec<Span> {
    spans
        .iter()
        .zip(factors.iter().zip(shape))
        .map(|(s, (&f, &n))| match *s {
            Span::Index(i) => Span::Index((i / f).min(n.saturating_sub(1))),
            Span::Range(a, b) => {
                let b = b.div_ceil(f).min(n);
                Span::Range((a / f).min(b), b)
            }
        })
        .collect()
}

/// The image's largest side for a box (`None`: not an image).
fn image_side(spans: &[Span]) -> Option<u64> {
    let lens: Vec<Option<u64>> = spans.iter().map(|s| s.len()).collect();
    let (h, w) = image_dims(&lens)?;
    Some(lens[h].unwrap_or(1).max(lens[w].unwrap_or(1)))
}

/// The `sel=` text of a box, strided so the image's largest side is at
/// most `size`.
fn selection_text(spans: &[Span], size: u64) -> String {
    let lens: Vec<Option<u64>> = spans.iter().map(|s| s.len()).collect();
    let dims = image_dims(&lens);
    let step = image_side(spans).map_or(1, |side| side.div_ceil(size.max(1)).max(1));
    let parts: Vec<String> = spans
        .iter()
        .enumerate()
        .map(|(d, s)| match *s {
            Span::Index(i) => i.to_string(),
            Span::Range(a, b) if dims.is_some_and(|(h, w)| d == h || d == w) && step > 1 => format!("{a}:{b}:{step}"),
            Span::Range(a, b) => format!("{a}:{b}"),
        })
        .collect();
    parts.join(",")
}

/// Where the image of `sel` at `size` pixels is read from (see the
/// module's rules); `level` fixes the level.
///
/// # Errors
/// 400 naming `sel` or `mode` for a selection that is not indices and
/// step-1 slices; the selection's own errors (out of bounds, rank); a
/// group without `multiscales` (naming `level`); the levels' arrays' errors.
pub async fn choose(at: &NodeRef<'_>, sel: &SelectionSpec, level: Option<u64>, size: u64) -> ServiceResult<Choice> {
    let app = at.app();
    let (candidates, fixed) = match level {
        Some(k) => {
            let path = pyramid::level_path(at, k).await?;
            let array = node::open_array(&app.node(at.mount_name(), &path)?).await?;
            let ones = vec![1; array.desc.shape.len()];
            (vec![Level { index: k, path, array, factors: Some(ones) }], true)
        }
        None => match levels(at).await? {
            Some(levels) => (levels, false),
            None => {
                let array = node::open_array(at).await?;
                let ones = vec![1; array.desc.shape.len()];
                (vec![Level { index: 0, path: at.path().clone(), array, factors: Some(ones) }], true)
            }
        },
    };
    let base = &candidates[0].array;
    let box0 = spans(sel, &base.desc.shape, base.desc.dimension_names.as_deref())?;
    let chosen = candidates
        .iter()
        .rev()
        .filter_map(|l| {
            let f = l.factors.as_ref()?;
            let b = scale_spans(&box0, f, &l.array.desc.shape);
            (l.index == 0 || image_side(&b).is_some_and(|side| side >= size)).then_some((l, b))
        })
        .next();
    let (l, b) = chosen.unwrap_or_else(|| (&candidates[0], box0.clone()));
    let from_array = level.is_none() && fixed;
    Ok(Choice { level: (!from_array).then_some(l.index), path: l.path.clone(), selection: selection_text(&b, size) })
}

/// The level a group's preview of `size` pixels shows: the coarsest whose
/// last two dimensions have a side of at least `size`, else level 0;
/// `None` for an array.
///
/// # Errors
/// As [`levels`].
pub async fn preview_level(at: &NodeRef<'_>, size: u64) -> ServiceResult<Option<Level>> {
    let Some(levels) = levels(at).await? else { return Ok(None) };
    let side = |l: &Level| {
        let s = &l.array.desc.shape;
        (s.len() >= 2).then(|| s[s.len() - 2].max(s[s.len() - 1]))
    };
    let chosen = levels.iter().rev().find(|l| side(l).is_some_and(|x| x >= size)).unwrap_or(&levels[0]);
    Ok(Some(chosen.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn factors_are_integer_ratios_of_scales() {
        assert_eq!(integer_factors(&[1.0, 2.0, 4.0], &[1.0, 0.5, 1.0]), Some(vec![1, 4, 4]));
        assert_eq!(integer_factors(&[1.0, 3.0], &[1.0, 2.0]), None);
        assert_eq!(integer_factors(&[0.5], &[1.0]), None);
        assert_eq!(integer_factors(&[1.0], &[1.0, 1.0]), None);
        let d = json!({"path": "1", "coordinateTransformations": [{"type": "scale", "scale": [1, 2.0]}]});
        assert_eq!(scale_of(&d), Some(vec![1.0, 2.0]));
        assert_eq!(scale_of(&json!({"path": "1"})), None);
    }

    #[test]
    fn image_dimensions_follow_the_layout_rules() {
        assert_eq!(image_dims(&[Some(10), Some(20)]), Some((0, 1)));
        assert_eq!(image_dims(&[None, Some(10), Some(20)]), Some((1, 2)));
        assert_eq!(image_dims(&[Some(3), Some(10), Some(20)]), Some((1, 2)));
        assert_eq!(image_dims(&[Some(10), Some(20), Some(4)]), Some((0, 1)));
        assert_eq!(image_dims(&[Some(1), Some(3), Some(10), Some(20)]), Some((2, 3)));
        assert_eq!(image_dims(&[Some(10)]), None);
        assert_eq!(image_dims(&[Some(5), Some(10), Some(20)]), None);
    }

    #[test]
    fn boxes_scale_to_the_elements_holding_them_and_stride_to_the_size() {
        let b = [Span::Index(9), Span::Range(3, 17), Span::Range(0, 100)];
        assert_eq!(scale_spans(&b, &[1, 4, 4], &[10, 25, 25]), [Span::Index(9), Span::Range(0, 5), Span::Range(0, 25)]);
        // Clamped to a level's shape (a level made by flooring).
        assert_eq!(scale_spans(&[Span::Range(0, 101)], &[2], &[50]), [Span::Range(0, 50)]);
        assert_eq!(
            selection_text(&[Span::Index(2), Span::Range(0, 100), Span::Range(10, 40)], 50),
            "2,0:100:2,10:40:2"
        );
        assert_eq!(selection_text(&[Span::Range(0, 10), Span::Range(0, 8)], 256), "0:10,0:8");
        assert_eq!(image_side(&[Span::Index(0), Span::Range(0, 7), Span::Range(2, 5)]), Some(7));
    }
}
