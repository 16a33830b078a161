//! Selections: what part of an array a client asks for, parsed and
//! normalised against the array's shape.
//!
//! The forms follow numpy and zarr-python's indexing
//! (<https://zarr.readthedocs.io/en/stable/user-guide/arrays.html>, "Advanced
//! indexing"):
//!
//! - **basic** (`array[...]`): per dimension an integer (negative counts
//!   from the end; the dimension is dropped from the result), a slice
//!   `start:stop:step` (any part optional, step non-zero, negative steps
//!   walk backwards, bounds clamp as Python's `slice.indices` does), or
//!   `...` (as many full slices as needed); missing trailing dimensions are
//!   full slices;
//! - **orthogonal** (`array.oindex[...]`): as basic, and a dimension may be
//!   a list of indices (any order, repeats allowed); the result is the outer
//!   product;
//! - **coordinate** (`array.vindex[...]`): one list of indices per
//!   dimension, all the same length: the points `(l0[i], l1[i], ...)`; the
//!   result is one-dimensional.
//!
//! Text form (the `sel=` query parameter): comma-separated dimensions, each
//! `i`, `a:b:c`, `...`, or `[i,j,k]` (a list, which makes the selection
//! orthogonal); a dimension may be named, `name=spec`, when the array has
//! dimension names (then every item must be named and unnamed dimensions are
//! full). JSON form (a POST body): see [`SelectionJson`].
//!
//! Every error names the dimension (by position, and by name when it has
//! one) and what was expected.

use serde::Deserialize;
use serde_json::Value;

/// Why a selection is invalid. The message names the dimension.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectionError(pub String);

type Result<T> = std::result::Result<T, SelectionError>;

/// One dimension's selection as written, before it is checked against the
/// array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DimSpec {
    /// One index (negative counts from the end).
    Index(i64),
    /// `start:stop:step`.
    Slice {
        /// First index (default: the start, or the end for negative steps).
        start: Option<i64>,
        /// One past the last (default: the end, or before the start for
        /// negative steps).
        stop: Option<i64>,
        /// Step (default 1; never 0).
        step: Option<i64>,
    },
    /// A list of indices (orthogonal or coordinate selection).
    List(Vec<i64>),
    /// `...`.
    Ellipsis,
}

impl DimSpec {
    /// The full dimension (`:`).
    #[must_use]
    pub fn full() -> Self {
        Self::Slice { start: None, stop: None, step: None }
    }
}

/// How lists combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SelectionMode {
    /// Integers and slices only (a list makes it orthogonal).
    #[default]
    Basic,
    /// Per-dimension lists, outer product.
    Orthogonal,
    /// Per-dimension lists of equal length, zipped into points.
    Coordinate,
}

/// A parsed selection: per-dimension specs (positional or named) and a mode.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SelectionSpec {
    /// The dimensions, positionally.
    pub dims: Vec<DimSpec>,
    /// The dimensions by name (used instead of `dims` when not empty).
    pub named: Vec<(String, DimSpec)>,
    /// How lists combine.
    pub mode: SelectionMode,
}

/// One dimension of a normalised selection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DimIndexer {
    /// One index; the dimension does not appear in the result.
    Index(u64),
    /// `len` indices `start, start + step, ...` (`step` may be negative).
    Slice {
        /// The first index.
        start: u64,
        /// The distance between indices.
        step: i64,
        /// How many indices.
        len: u64,
    },
    /// Explicit indices, in result order.
    List(Vec<u64>),
}

impl DimIndexer {
    /// How many indices this dimension selects (1 for `Index`).
    #[must_use]
    pub fn len(&self) -> u64 {
        match self {
            Self::Index(_) => 1,
            Self::Slice { len, .. } => *len,
            Self::List(v) => v.len() as u64,
        }
    }

    /// Whether nothing is selected.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th selected index (`i < len()`).
    #[must_use]
    pub fn get(&self, i: u64) -> u64 {
        match self {
            Self::Index(x) => *x,
            Self::Slice { start, step, .. } => {
                // In range by construction: start + step * (len - 1) is
                // inside the dimension.
                let v = i128::from(*start) + i128::from(*step) * i128::from(i);
                u64::try_from(v).unwrap_or(0)
            }
            #[allow(clippy::cast_possible_truncation)]
            Self::List(v) => v[i as usize],
        }
    }

    /// The smallest and one past the largest selected index; `None` when
    /// empty.
    #[must_use]
    pub fn bounds(&self) -> Option<(u64, u64)> {
        match self {
            Self::Index(x) => Some((*x, x + 1)),
            Self::Slice { len: 0, .. } => None,
            Self::Slice { start, step, len } => {
                let last = self.get(len - 1);
                if *step > 0 {
                    Some((*start, last + 1))
                } else {
                    Some((last, start + 1))
                }
            }
            Self::List(v) => Some((*v.iter().min()?, v.iter().max()? + 1)),
        }
    }

    /// Whether this keeps a dimension in the result (everything but
    /// `Index`).
    #[must_use]
    pub fn keeps_dim(&self) -> bool {
        !matches!(self, Self::Index(_))
    }
}

/// A selection checked against an array's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// One indexer per array dimension. For coordinate selections every
    /// entry is a `List` of the same length (the points).
    pub dims: Vec<DimIndexer>,
    /// Basic/orthogonal (outer product) or coordinate (zipped points).
    pub mode: SelectionMode,
}

impl Selection {
    /// The whole array.
    #[must_use]
    pub fn all(shape: &[u64]) -> Self {
        let dims = shape.iter().map(|&n| DimIndexer::Slice { start: 0, step: 1, len: n }).collect();
        Self { dims, mode: SelectionMode::Basic }
    }

    /// The shape of the result: the kept dimensions' lengths (outer
    /// product), or `[points]` for a coordinate selection.
    #[must_use]
    pub fn result_shape(&self) -> Vec<u64> {
        match self.mode {
            SelectionMode::Coordinate => vec![self.dims.first().map_or(1, DimIndexer::len)],
            _ => self.dims.iter().filter(|d| d.keeps_dim()).map(DimIndexer::len).collect(),
        }
    }

    /// How many elements the result has.
    #[must_use]
    pub fn num_elements(&self) -> u64 {
        match self.mode {
            SelectionMode::Coordinate => self.dims.first().map_or(1, DimIndexer::len),
            _ => self.dims.iter().map(DimIndexer::len).fold(1u64, u64::saturating_mul),
        }
    }

    /// Whether every dimension is a step-1 slice or an index: the selection
    /// is one box (`start`, `shape` per dimension).
    #[must_use]
    pub fn as_box(&self) -> Option<(Vec<u64>, Vec<u64>)> {
        if self.mode == SelectionMode::Coordinate {
            return None;
        }
        let mut start = Vec::with_capacity(self.dims.len());
        let mut shape = Vec::with_capacity(self.dims.len());
        for d in &self.dims {
            match d {
                DimIndexer::Index(x) => {
                    start.push(*x);
                    shape.push(1);
                }
                DimIndexer::Slice { start: s, step: 1, len } => {
                    start.push(*s);
                    shape.push(*len);
                }
                DimIndexer::Slice { len: 0, .. } => {
                    start.push(0);
                    shape.push(0);
                }
                _ => return None,
            }
        }
        Some((start, shape))
    }
}

fn dim_label(i: usize, names: Option<&[Option<String>]>) -> String {
    match names.and_then(|n| n.get(i)).and_then(Option::as_ref) {
        Some(name) => format!("dimension {i} (`{name}`)"),
        None => format!("dimension {i}"),
    }
}

fn parse_int(s: &str, what: &str) -> Result<i64> {
    s.trim().parse::<i64>().map_err(|_| SelectionError(format!("{what}: expected an integer, got `{}`", s.trim())))
}

/// Parses one dimension of the text form.
fn parse_dim_text(item: &str, what: &str) -> Result<DimSpec> {
    let item = item.trim();
    if item == "..." {
        return Ok(DimSpec::Ellipsis);
    }
    if let Some(inner) = item.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| SelectionError(format!("{what}: a list must end with `]`, got `{item}`")))?;
        if inner.trim().is_empty() {
            return Ok(DimSpec::List(Vec::new()));
        }
        return inner.split([',', ';']).map(|s| parse_int(s, what)).collect::<Result<_>>().map(DimSpec::List);
    }
    if item.contains(':') {
        let parts: Vec<&str> = item.split(':').collect();
        if parts.len() > 3 {
            return Err(SelectionError(format!("{what}: a slice is `start:stop:step`, got `{item}`")));
        }
        let opt = |i: usize| -> Result<Option<i64>> {
            match parts.get(i).map(|s| s.trim()) {
                None | Some("") => Ok(None),
                Some(s) => parse_int(s, what).map(Some),
            }
        };
        let step = opt(2)?;
        if step == Some(0) {
            return Err(SelectionError(format!("{what}: slice step must not be zero")));
        }
        return Ok(DimSpec::Slice { start: opt(0)?, stop: opt(1)?, step });
    }
    if item.is_empty() {
        return Err(SelectionError(format!("{what}: empty; use `:` for the whole dimension")));
    }
    parse_int(item, what).map(DimSpec::Index)
}

/// Splits on commas that are not inside `[...]`.
fn split_top(s: &str) -> Result<Vec<&str>> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(SelectionError(format!("selection: unbalanced or nested `[` in `{s}`")));
        }
    }
    if depth != 0 {
        return Err(SelectionError(format!("selection: unbalanced `[` in `{s}`")));
    }
    out.push(&s[start..]);
    Ok(out)
}

impl SelectionSpec {
    /// Parses the text form (`sel=` query parameter), e.g.
    /// `0:10,[3,1,4],...` (inside `[...]`, `;` may separate indices too).
    /// An empty string selects everything.
    ///
    /// # Errors
    /// A malformed item, naming its position.
    pub fn parse(text: &str, mode: SelectionMode) -> Result<Self> {
        let text = text.trim();
        let mut spec = Self { mode, ..Self::default() };
        if text.is_empty() {
            return Ok(spec);
        }
        for (i, item) in split_top(text)?.into_iter().enumerate() {
            let item = item.trim();
            // `name=spec`; `=` never appears in a positional spec.
            if let Some((name, rest)) = item.split_once('=') {
                let name = name.trim();
                spec.named.push((name.to_string(), parse_dim_text(rest, &format!("dimension `{name}`"))?));
            } else {
                spec.dims.push(parse_dim_text(item, &format!("dimension {i}"))?);
            }
        }
        if !spec.named.is_empty() && !spec.dims.is_empty() {
            return Err(SelectionError(
                "selection: either name every dimension (`name=spec`) or none; mixing is ambiguous".into(),
            ));
        }
        Ok(spec)
    }

    /// Checks the selection against `shape` (and the dimension names, for
    /// named selections) and normalises it.
    ///
    /// # Errors
    /// Wrong rank, an index out of bounds, an unknown dimension name, lists
    /// of different lengths in a coordinate selection, a slice in a
    /// coordinate selection — each naming the dimension.
    pub fn resolve(&self, shape: &[u64], names: Option<&[Option<String>]>) -> Result<Selection> {
        let rank = shape.len();
        let dims: Vec<DimSpec> = if self.named.is_empty() {
            self.expand_ellipsis(rank)?
        } else {
            let mut dims = vec![DimSpec::full(); rank];
            let mut seen = vec![false; rank];
            for (name, spec) in &self.named {
                let pos = names.and_then(|n| n.iter().position(|x| x.as_deref() == Some(name.as_str()))).ok_or_else(
                    || {
                        let known: Vec<&str> = names.unwrap_or(&[]).iter().filter_map(|n| n.as_deref()).collect();
                        SelectionError(format!(
                            "selection: the array has no dimension named `{name}` (its dimension names: {known:?})"
                        ))
                    },
                )?;
                if std::mem::replace(&mut seen[pos], true) {
                    return Err(SelectionError(format!("selection: dimension `{name}` given twice")));
                }
                if *spec == DimSpec::Ellipsis {
                    return Err(SelectionError(format!("dimension `{name}`: `...` cannot be named")));
                }
                dims[pos] = spec.clone();
            }
            dims
        };
        let mut out = Vec::with_capacity(rank);
        for (i, (spec, &n)) in dims.iter().zip(shape).enumerate() {
            out.push(resolve_dim(spec, n, &dim_label(i, names))?);
        }
        let has_list = out.iter().any(|d| matches!(d, DimIndexer::List(_)));
        let mode = match self.mode {
            SelectionMode::Basic if has_list => SelectionMode::Orthogonal,
            m => m,
        };
        if mode == SelectionMode::Coordinate {
            let mut len = None;
            for (i, d) in out.iter_mut().enumerate() {
                let DimIndexer::List(v) = d else {
                    if let DimIndexer::Index(x) = d {
                        // A scalar broadcasts against the points.
                        *d = DimIndexer::List(vec![*x]);
                        continue;
                    }
                    return Err(SelectionError(format!(
                        "{}: a coordinate selection takes a list of indices per dimension, not a slice",
                        dim_label(i, names)
                    )));
                };
                if v.len() != 1 {
                    match len {
                        None => len = Some(v.len()),
                        Some(l) if l != v.len() => {
                            return Err(SelectionError(format!(
                                "{}: {} indices, but an earlier dimension has {l}; coordinate lists must have equal lengths",
                                dim_label(i, names),
                                v.len()
                            )))
                        }
                        Some(_) => {}
                    }
                }
            }
            let len = len.unwrap_or(1);
            for d in &mut out {
                if let DimIndexer::List(v) = d {
                    if v.len() == 1 && len != 1 {
                        *v = vec![v[0]; len];
                    }
                }
            }
        }
        Ok(Selection { dims: out, mode })
    }

    fn expand_ellipsis(&self, rank: usize) -> Result<Vec<DimSpec>> {
        let ellipses = self.dims.iter().filter(|d| **d == DimSpec::Ellipsis).count();
        if ellipses > 1 {
            return Err(SelectionError("selection: at most one `...`".into()));
        }
        let given = self.dims.len() - ellipses;
        if given > rank {
            return Err(SelectionError(format!(
                "selection: {given} dimensions given, but the array has {rank} (shape rank {rank})"
            )));
        }
        let mut out = Vec::with_capacity(rank);
        for d in &self.dims {
            if *d == DimSpec::Ellipsis {
                out.extend(std::iter::repeat_n(DimSpec::full(), rank - given));
            } else {
                out.push(d.clone());
            }
        }
        out.resize(rank, DimSpec::full());
        Ok(out)
    }
}

fn resolve_index(x: i64, n: u64, what: &str) -> Result<u64> {
    let n_i = i128::from(n);
    let v = if x < 0 { i128::from(x) + n_i } else { i128::from(x) };
    if v < 0 || v >= n_i {
        return Err(SelectionError(format!("{what}: index {x} is out of bounds for length {n}")));
    }
    Ok(u64::try_from(v).unwrap_or(0))
}

/// Python's `slice(start, stop, step).indices(n)` and the resulting length.
fn resolve_slice(start: Option<i64>, stop: Option<i64>, step: Option<i64>, n: u64) -> DimIndexer {
    let step = step.unwrap_or(1);
    let n = i128::from(n);
    let norm = |v: i64, lo: i128, hi: i128| {
        let v = i128::from(v);
        let v = if v < 0 { v + n } else { v };
        v.clamp(lo, hi)
    };
    let (start, stop) = if step > 0 {
        (start.map_or(0, |s| norm(s, 0, n)), stop.map_or(n, |s| norm(s, 0, n)))
    } else {
        (start.map_or(n - 1, |s| norm(s, -1, n - 1)), stop.map_or(-1, |s| norm(s, -1, n - 1)))
    };
    let step_i = i128::from(step);
    let len = if step > 0 {
        if stop > start {
            (stop - start + step_i - 1) / step_i
        } else {
            0
        }
    } else if start > stop {
        (start - stop + (-step_i) - 1) / (-step_i)
    } else {
        0
    };
    DimIndexer::Slice { start: u64::try_from(start.max(0)).unwrap_or(0), step, len: u64::try_from(len).unwrap_or(0) }
}

fn resolve_dim(spec: &DimSpec, n: u64, what: &str) -> Result<DimIndexer> {
    match spec {
        DimSpec::Index(x) => resolve_index(*x, n, what).map(DimIndexer::Index),
        DimSpec::Slice { step: Some(0), .. } => Err(SelectionError(format!("{what}: slice step must not be zero"))),
        DimSpec::Slice { start, stop, step } => Ok(resolve_slice(*start, *stop, *step, n)),
        DimSpec::List(v) => v.iter().map(|&x| resolve_index(x, n, what)).collect::<Result<_>>().map(DimIndexer::List),
        DimSpec::Ellipsis => Err(SelectionError(format!("{what}: unexpected `...`"))),
    }
}

/// The JSON form of a selection (POST bodies):
///
/// ```json
/// {"selection": [0, "2:10:2", [1, 5, 7], "..."], "mode": "orthogonal"}
/// {"selection": {"time": 0, "lat": "10:20"}}
/// {"selection": "0,2:10:2"}
/// ```
///
/// Each dimension is an integer, a slice string (`"a:b:c"`), an object
/// `{"start": a, "stop": b, "step": c}` (each optional), a list of integers,
/// `"..."`, or `null` (the whole dimension).
#[derive(Debug, Clone, Deserialize, Default)]
pub struct SelectionJson {
    /// The selection (see above); absent selects everything.
    #[serde(default)]
    pub selection: Value,
    /// How lists combine (`basic`, `orthogonal`, `coordinate`).
    #[serde(default)]
    pub mode: SelectionMode,
}

fn opt_int(v: Option<&Value>, what: &str, field: &str) -> Result<Option<i64>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            n.as_i64().map(Some).ok_or_else(|| SelectionError(format!("{what}: `{field}` must be an integer, got {n}")))
        }
        Some(other) => Err(SelectionError(format!("{what}: `{field}` must be an integer, got {other}"))),
    }
}

fn dim_from_json(v: &Value, what: &str) -> Result<DimSpec> {
    match v {
        Value::Null => Ok(DimSpec::full()),
        Value::Number(n) => n
            .as_i64()
            .map(DimSpec::Index)
            .ok_or_else(|| SelectionError(format!("{what}: expected an integer, got {n}"))),
        Value::String(s) => parse_dim_text(s, what),
        Value::Array(items) => items
            .iter()
            .map(|x| x.as_i64().ok_or_else(|| SelectionError(format!("{what}: list items must be integers, got {x}"))))
            .collect::<Result<_>>()
            .map(DimSpec::List),
        Value::Object(o) => {
            if let Some(k) = o.keys().find(|k| !matches!(k.as_str(), "start" | "stop" | "step")) {
                return Err(SelectionError(format!("{what}: unknown slice member `{k}` (expected start, stop, step)")));
            }
            let step = opt_int(o.get("step"), what, "step")?;
            if step == Some(0) {
                return Err(SelectionError(format!("{what}: slice step must not be zero")));
            }
            Ok(DimSpec::Slice {
                start: opt_int(o.get("start"), what, "start")?,
                stop: opt_int(o.get("stop"), what, "stop")?,
                step,
            })
        }
        Value::Bool(b) => Err(SelectionError(format!("{what}: expected an index, slice or list, got {b}"))),
    }
}

impl SelectionJson {
    /// The parsed selection.
    ///
    /// # Errors
    /// A malformed dimension, naming it.
    pub fn to_spec(&self) -> Result<SelectionSpec> {
        match &self.selection {
            Value::Null => Ok(SelectionSpec { mode: self.mode, ..SelectionSpec::default() }),
            Value::String(s) => SelectionSpec::parse(s, self.mode),
            Value::Array(items) => {
                let dims = items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| dim_from_json(v, &format!("dimension {i}")))
                    .collect::<Result<_>>()?;
                Ok(SelectionSpec { dims, named: Vec::new(), mode: self.mode })
            }
            Value::Object(o) => {
                let named = o
                    .iter()
                    .map(|(k, v)| dim_from_json(v, &format!("dimension `{k}`")).map(|d| (k.clone(), d)))
                    .collect::<Result<_>>()?;
                Ok(SelectionSpec { dims: Vec::new(), named, mode: self.mode })
            }
            other => Err(SelectionError(format!(
                "selection: expected a list (one entry per dimension), an object (by dimension name) or a string, got {other}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests;
