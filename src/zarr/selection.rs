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

/// Most indices one selection may list, all its lists together (the
/// scalars of a coordinate selection counted once per point, as they are
/// broadcast against the points): 2^22. A listed index costs 8 bytes as
/// parsed and 8 as checked against the array, so a selection's lists stay
/// within some 64 MiB whatever the body; they are counted as they are
/// parsed and no more are kept past the limit (413 `selection_too_large`).
pub const MAX_SELECTION_INDICES: u64 = 1 << 22;

/// Selections listing at most this many indices are checked against an
/// array right on the async worker (less work than the hand-off to the CPU
/// pool); longer ones on the pool.
pub const INLINE_LISTED: u64 = 4096;

/// Most entries the dimensions of a selection may have: one per dimension
/// of the largest array ([`crate::zarr::metadata::MAX_RANK`]) and a `...`.
pub const MAX_SELECTION_ITEMS: usize = crate::zarr::metadata::MAX_RANK + 1;

/// What kind of problem a [`SelectionError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SelectionErrorKind {
    /// Malformed, out of bounds, of the wrong rank (400).
    #[default]
    Invalid,
    /// More than [`MAX_SELECTION_INDICES`] indices listed (413).
    TooLarge,
}

/// Why a selection is invalid. The message names the dimension.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectionError(pub String, pub SelectionErrorKind);

impl SelectionError {
    /// A malformed selection (the message names the dimension).
    #[must_use]
    pub fn invalid(message: String) -> Self {
        Self(message, SelectionErrorKind::Invalid)
    }

    /// A selection listing `listed` indices, more than [`MAX_SELECTION_INDICES`].
    #[must_use]
    pub fn too_many(listed: u64) -> Self {
        Self(
            format!(
                "the selection lists {listed} indices or more, more than the {MAX_SELECTION_INDICES} one selection may \
                 list; split it into parts"
            ),
            SelectionErrorKind::TooLarge,
        )
    }

    /// Whether the selection is too large rather than malformed.
    #[must_use]
    pub fn is_too_large(&self) -> bool {
        self.1 == SelectionErrorKind::TooLarge
    }
}

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
    s.trim()
        .parse::<i64>()
        .map_err(|_| SelectionError::invalid(format!("{what}: expected an integer, got `{}`", s.trim())))
}

/// Counts `n` more listed indices into `listed`, refusing more than
/// [`MAX_SELECTION_INDICES`] in all before anything is kept.
fn count_listed(listed: &mut u64, n: u64) -> Result<()> {
    *listed = listed.saturating_add(n);
    if *listed > MAX_SELECTION_INDICES {
        return Err(SelectionError::too_many(*listed));
    }
    Ok(())
}

/// Parses one dimension of the text form; its list's indices count into
/// `listed`.
fn parse_dim_text(item: &str, what: &str, listed: &mut u64) -> Result<DimSpec> {
    let item = item.trim();
    if item == "..." {
        return Ok(DimSpec::Ellipsis);
    }
    if let Some(inner) = item.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| SelectionError::invalid(format!("{what}: a list must end with `]`, got `{item}`")))?;
        if inner.trim().is_empty() {
            return Ok(DimSpec::List(Vec::new()));
        }
        // Counted before the list is built.
        count_listed(listed, inner.split([',', ';']).count() as u64)?;
        return inner.split([',', ';']).map(|s| parse_int(s, what)).collect::<Result<_>>().map(DimSpec::List);
    }
    if item.contains(':') {
        let parts: Vec<&str> = item.split(':').collect();
        if parts.len() > 3 {
            return Err(SelectionError::invalid(format!("{what}: a slice is `start:stop:step`, got `{item}`")));
        }
        let opt = |i: usize| -> Result<Option<i64>> {
            match parts.get(i).map(|s| s.trim()) {
                None | Some("") => Ok(None),
                Some(s) => parse_int(s, what).map(Some),
            }
        };
        let step = opt(2)?;
        if step == Some(0) {
            return Err(SelectionError::invalid(format!("{what}: slice step must not be zero")));
        }
        return Ok(DimSpec::Slice { start: opt(0)?, stop: opt(1)?, step });
    }
    if item.is_empty() {
        return Err(SelectionError::invalid(format!("{what}: empty; use `:` for the whole dimension")));
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
                if out.len() + 1 >= MAX_SELECTION_ITEMS {
                    return Err(SelectionError::invalid(format!(
                        "selection: more than {MAX_SELECTION_ITEMS} items; an array has at most {} dimensions",
                        crate::zarr::metadata::MAX_RANK
                    )));
                }
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(SelectionError::invalid(format!("selection: unbalanced or nested `[` in `{s}`")));
        }
    }
    if depth != 0 {
        return Err(SelectionError::invalid(format!("selection: unbalanced `[` in `{s}`")));
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
        Self::parse_counted(text, mode, &mut 0)
    }

    /// [`SelectionSpec::parse`], counting listed indices into `listed`.
    fn parse_counted(text: &str, mode: SelectionMode, listed: &mut u64) -> Result<Self> {
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
                spec.named.push((name.to_string(), parse_dim_text(rest, &format!("dimension `{name}`"), listed)?));
            } else {
                spec.dims.push(parse_dim_text(item, &format!("dimension {i}"), listed)?);
            }
        }
        if !spec.named.is_empty() && !spec.dims.is_empty() {
            return Err(SelectionError::invalid(
                "selection: either name every dimension (`name=spec`) or none; mixing is ambiguous".into(),
            ));
        }
        Ok(spec)
    }

    /// How many indices the selection lists (all its lists together).
    #[must_use]
    pub fn listed(&self) -> u64 {
        let list = |d: &DimSpec| if let DimSpec::List(v) = d { v.len() as u64 } else { 0 };
        self.dims.iter().map(list).chain(self.named.iter().map(|(_, d)| list(d))).fold(0, u64::saturating_add)
    }

    /// Checks the selection against `shape` (and the dimension names, for
    /// named selections) and normalises it.
    ///
    /// # Errors
    /// Wrong rank, an index out of bounds, an unknown dimension name, lists
    /// of different lengths in a coordinate selection, a slice in a
    /// coordinate selection — each naming the dimension.
    pub fn resolve(&self, shape: &[u64], names: Option<&[Option<String>]>) -> Result<Selection> {
        self.clone().resolve_owned(shape, names)
    }

    /// [`SelectionSpec::resolve`], consuming the selection: its lists
    /// become the indexers' lists in place (no copy).
    ///
    /// # Errors
    /// As [`SelectionSpec::resolve`].
    pub fn resolve_owned(self, shape: &[u64], names: Option<&[Option<String>]>) -> Result<Selection> {
        let rank = shape.len();
        let mode = self.mode;
        // Per array dimension, the spec given (moved), or `None` for the whole dimension.
        let dims: Vec<Option<DimSpec>> = if self.named.is_empty() {
            expand_ellipsis(self.dims, rank)?
        } else {
            let mut dims: Vec<Option<DimSpec>> = (0..rank).map(|_| None).collect();
            for (name, spec) in self.named {
                let pos = names.and_then(|n| n.iter().position(|x| x.as_deref() == Some(name.as_str()))).ok_or_else(
                    || {
                        let known: Vec<&str> = names.unwrap_or(&[]).iter().filter_map(|n| n.as_deref()).collect();
                        SelectionError::invalid(format!(
                            "selection: the array has no dimension named `{name}` (its dimension names: {known:?})"
                        ))
                    },
                )?;
                if dims[pos].is_some() {
                    return Err(SelectionError::invalid(format!("selection: dimension `{name}` given twice")));
                }
                if matches!(spec, DimSpec::Ellipsis) {
                    return Err(SelectionError::invalid(format!("dimension `{name}`: `...` cannot be named")));
                }
                dims[pos] = Some(spec);
            }
            dims
        };
        let mut out = Vec::with_capacity(rank);
        for (i, (spec, &n)) in dims.into_iter().zip(shape).enumerate() {
            out.push(match spec {
                None => resolve_slice(None, None, None, n),
                Some(spec) => resolve_dim(spec, n, &dim_label(i, names))?,
            });
        }
        let has_list = out.iter().any(|d| matches!(d, DimIndexer::List(_)));
        let mode = match mode {
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
                    return Err(SelectionError::invalid(format!(
                        "{}: a coordinate selection takes a list of indices per dimension, not a slice",
                        dim_label(i, names)
                    )));
                };
                if v.len() != 1 {
                    match len {
                        None => len = Some(v.len()),
                        Some(l) if l != v.len() => {
                            return Err(SelectionError::invalid(format!(
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
            // Scalars and one-element lists are broadcast against the
            // points: counted before they are.
            let total = (len as u64).saturating_mul(out.len() as u64);
            if total > MAX_SELECTION_INDICES {
                return Err(SelectionError(
                    format!(
                        "a coordinate selection of {len} points in {} dimensions lists {total} indices, more than \
                         the {MAX_SELECTION_INDICES} one selection may list; split it into parts",
                        out.len()
                    ),
                    SelectionErrorKind::TooLarge,
                ));
            }
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
}

/// The positional specs, one per array dimension (`None`: the whole
/// dimension, for `...` and missing trailing dimensions).
fn expand_ellipsis(dims: Vec<DimSpec>, rank: usize) -> Result<Vec<Option<DimSpec>>> {
    let ellipses = dims.iter().filter(|d| matches!(d, DimSpec::Ellipsis)).count();
    if ellipses > 1 {
        return Err(SelectionError::invalid("selection: at most one `...`".into()));
    }
    let given = dims.len() - ellipses;
    if given > rank {
        return Err(SelectionError::invalid(format!(
            "selection: {given} dimensions given, but the array has {rank} (shape rank {rank})"
        )));
    }
    let mut out = Vec::with_capacity(rank);
    for d in dims {
        if matches!(d, DimSpec::Ellipsis) {
            out.extend((0..rank - given).map(|_| None));
        } else {
            out.push(Some(d));
        }
    }
    out.resize_with(rank, || None);
    Ok(out)
}

fn resolve_index(x: i64, n: u64, what: &str) -> Result<u64> {
    let n_i = i128::from(n);
    let v = if x < 0 { i128::from(x) + n_i } else { i128::from(x) };
    if v < 0 || v >= n_i {
        return Err(SelectionError::invalid(format!("{what}: index {x} is out of bounds for length {n}")));
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

fn resolve_dim(spec: DimSpec, n: u64, what: &str) -> Result<DimIndexer> {
    match spec {
        DimSpec::Index(x) => resolve_index(x, n, what).map(DimIndexer::Index),
        DimSpec::Slice { step: Some(0), .. } => {
            Err(SelectionError::invalid(format!("{what}: slice step must not be zero")))
        }
        DimSpec::Slice { start, stop, step } => Ok(resolve_slice(start, stop, step, n)),
        // Collected in place: the i64 list's buffer becomes the u64 list's.
        DimSpec::List(v) => {
            v.into_iter().map(|x| resolve_index(x, n, what)).collect::<Result<_>>().map(DimIndexer::List)
        }
        DimSpec::Ellipsis => Err(SelectionError::invalid(format!("{what}: unexpected `...`"))),
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
    pub selection: SelectionBody,
    /// How lists combine (`basic`, `orthogonal`, `coordinate`).
    #[serde(default)]
    pub mode: SelectionMode,
}

impl SelectionJson {
    /// The parsed selection.
    ///
    /// # Errors
    /// A malformed dimension, naming it; too many indices listed.
    pub fn to_spec(&self) -> Result<SelectionSpec> {
        self.clone().into_spec()
    }

    /// The parsed selection, moving the lists (no copy).
    ///
    /// # Errors
    /// As [`SelectionJson::to_spec`].
    pub fn into_spec(self) -> Result<SelectionSpec> {
        self.selection.into_spec(self.mode)
    }
}

/// The `selection` member of a JSON body (see [`SelectionJson`]), parsed
/// straight into integer vectors: 8 bytes per listed index, no JSON tree.
/// Listed indices are counted as they arrive; past
/// [`MAX_SELECTION_INDICES`] no more are kept (the rest of the body is
/// only counted) and [`SelectionBody::into_spec`] refuses it. What does not
/// fit the form is kept as a message, so the errors are those of a
/// selection (400, naming the dimension) rather than of a body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelectionBody {
    form: BodyForm,
    listed: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum BodyForm {
    /// Absent or `null`.
    #[default]
    All,
    /// The text form.
    Text(String),
    /// One entry per dimension.
    Dims(Vec<JsonDim>),
    /// Entries by dimension name.
    Named(Vec<(String, JsonDim)>),
    /// Not a selection (the message says why).
    Invalid(String),
}

/// One dimension as parsed; the dimension's label is added to messages later.
#[derive(Debug, Clone, PartialEq, Eq)]
enum JsonDim {
    Spec(DimSpec),
    Text(String),
    Invalid(String),
}

impl SelectionBody {
    /// Whether turning this into a [`SelectionSpec`] is little work (few
    /// listed indices, short text): callers may do it on an async worker.
    #[must_use]
    pub fn is_small(&self) -> bool {
        const SHORT_TEXT: usize = 4096;
        let text = |d: &JsonDim| if let JsonDim::Text(t) = d { t.len() } else { 0 };
        let texts = match &self.form {
            BodyForm::Text(t) => t.len(),
            BodyForm::Dims(d) => d.iter().map(text).sum(),
            BodyForm::Named(d) => d.iter().map(|(_, d)| text(d)).sum(),
            BodyForm::All | BodyForm::Invalid(_) => 0,
        };
        self.listed <= INLINE_LISTED && texts <= SHORT_TEXT
    }

    /// The selection, checked for form; `mode` says how lists combine.
    ///
    /// # Errors
    /// A malformed dimension, naming it; more than
    /// [`MAX_SELECTION_INDICES`] indices listed (kind `TooLarge`).
    pub fn into_spec(self, mode: SelectionMode) -> Result<SelectionSpec> {
        let mut listed = self.listed;
        if listed > MAX_SELECTION_INDICES {
            return Err(SelectionError::too_many(listed));
        }
        let dim = |d: JsonDim, what: String, listed: &mut u64| match d {
            JsonDim::Spec(s) => Ok(s),
            JsonDim::Text(t) => parse_dim_text(&t, &what, listed),
            JsonDim::Invalid(m) => Err(SelectionError::invalid(format!("{what}: {m}"))),
        };
        match self.form {
            BodyForm::All => Ok(SelectionSpec { mode, ..SelectionSpec::default() }),
            BodyForm::Text(t) => SelectionSpec::parse_counted(&t, mode, &mut listed),
            BodyForm::Dims(items) => {
                let dims = items
                    .into_iter()
                    .enumerate()
                    .map(|(i, d)| dim(d, format!("dimension {i}"), &mut listed))
                    .collect::<Result<_>>()?;
                Ok(SelectionSpec { dims, named: Vec::new(), mode })
            }
            BodyForm::Named(items) => {
                let named = items
                    .into_iter()
                    .map(|(k, d)| {
                        let what = format!("dimension `{k}`");
                        dim(d, what, &mut listed).map(|d| (k, d))
                    })
                    .collect::<Result<_>>()?;
                Ok(SelectionSpec { dims: Vec::new(), named, mode })
            }
            BodyForm::Invalid(m) => Err(SelectionError::invalid(m)),
        }
    }
}

mod body {
    //! The streaming parse of [`SelectionBody`](super::SelectionBody).

    use std::fmt;

    use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

    use super::{BodyForm, DimSpec, JsonDim, SelectionBody, MAX_SELECTION_INDICES, MAX_SELECTION_ITEMS};

    /// Consumes the rest of a list without keeping it.
    fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }

    /// Consumes the rest of an object without keeping it.
    fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(())
    }

    /// A string as it appears in the body, shortened, for messages.
    fn quoted(s: &str) -> String {
        let text = serde_json::Value::String(s.to_string()).to_string();
        if text.chars().count() > 40 {
            format!("{}...", text.chars().take(40).collect::<String>())
        } else {
            text
        }
    }

    impl<'de> de::Deserialize<'de> for SelectionBody {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(BodyVisitor)
        }
    }

    struct BodyVisitor;

    const WRONG_FORM: &str =
        "selection: expected a list (one entry per dimension), an object (by dimension name) or a string";

    fn wrong_form(got: &str) -> SelectionBody {
        SelectionBody { form: BodyForm::Invalid(format!("{WRONG_FORM}, got {got}")), listed: 0 }
    }

    fn too_many_items() -> String {
        format!(
            "selection: more than {MAX_SELECTION_ITEMS} entries; an array has at most {} dimensions",
            crate::zarr::metadata::MAX_RANK
        )
    }

    impl<'de> Visitor<'de> for BodyVisitor {
        type Value = SelectionBody;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a selection: a list, an object, a string or null")
        }

        fn visit_unit<E>(self) -> Result<SelectionBody, E> {
            Ok(SelectionBody::default())
        }

        fn visit_none<E>(self) -> Result<SelectionBody, E> {
            Ok(SelectionBody::default())
        }

        fn visit_bool<E>(self, v: bool) -> Result<SelectionBody, E> {
            Ok(wrong_form(&v.to_string()))
        }

        fn visit_i64<E>(self, v: i64) -> Result<SelectionBody, E> {
            Ok(wrong_form(&v.to_string()))
        }

        fn visit_u64<E>(self, v: u64) -> Result<SelectionBody, E> {
            Ok(wrong_form(&v.to_string()))
        }

        fn visit_f64<E>(self, v: f64) -> Result<SelectionBody, E> {
            Ok(wrong_form(&v.to_string()))
        }

        fn visit_str<E>(self, v: &str) -> Result<SelectionBody, E> {
            Ok(SelectionBody { form: BodyForm::Text(v.to_string()), listed: 0 })
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SelectionBody, A::Error> {
            let mut listed = 0;
            let mut dims = Vec::new();
            while let Some(d) = seq.next_element_seed(DimSeed { listed: &mut listed })? {
                if dims.len() == MAX_SELECTION_ITEMS {
                    drain_seq(seq)?;
                    return Ok(SelectionBody { form: BodyForm::Invalid(too_many_items()), listed });
                }
                dims.push(d);
            }
            Ok(SelectionBody { form: BodyForm::Dims(dims), listed })
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SelectionBody, A::Error> {
            let mut listed = 0;
            let mut named = Vec::new();
            while let Some(k) = map.next_key::<String>()? {
                let d = map.next_value_seed(DimSeed { listed: &mut listed })?;
                if named.len() == MAX_SELECTION_ITEMS {
                    drain_map(map)?;
                    return Ok(SelectionBody { form: BodyForm::Invalid(too_many_items()), listed });
                }
                named.push((k, d));
            }
            Ok(SelectionBody { form: BodyForm::Named(named), listed })
        }
    }

    /// One dimension; its listed indices count into `listed`.
    struct DimSeed<'a> {
        listed: &'a mut u64,
    }

    impl<'de> DeserializeSeed<'de> for DimSeed<'_> {
        type Value = JsonDim;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<JsonDim, D::Error> {
            d.deserialize_any(self)
        }
    }

    fn not_an_integer(got: &str) -> JsonDim {
        JsonDim::Invalid(format!("expected an integer, got {got}"))
    }

    fn not_a_dim(got: &str) -> JsonDim {
        JsonDim::Invalid(format!("expected an index, slice or list, got {got}"))
    }

    impl<'de> Visitor<'de> for DimSeed<'_> {
        type Value = JsonDim;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an index, a slice or a list of indices")
        }

        fn visit_unit<E>(self) -> Result<JsonDim, E> {
            Ok(JsonDim::Spec(DimSpec::full()))
        }

        fn visit_none<E>(self) -> Result<JsonDim, E> {
            Ok(JsonDim::Spec(DimSpec::full()))
        }

        fn visit_bool<E>(self, v: bool) -> Result<JsonDim, E> {
            Ok(not_a_dim(&v.to_string()))
        }

        fn visit_i64<E>(self, v: i64) -> Result<JsonDim, E> {
            Ok(JsonDim::Spec(DimSpec::Index(v)))
        }

        fn visit_u64<E>(self, v: u64) -> Result<JsonDim, E> {
            Ok(i64::try_from(v).map_or_else(|_| not_an_integer(&v.to_string()), |v| JsonDim::Spec(DimSpec::Index(v))))
        }

        fn visit_f64<E>(self, v: f64) -> Result<JsonDim, E> {
            Ok(not_an_integer(&v.to_string()))
        }

        fn visit_str<E>(self, v: &str) -> Result<JsonDim, E> {
            Ok(JsonDim::Text(v.to_string()))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<JsonDim, A::Error> {
            let mut list = Vec::new();
            let mut wrong: Option<String> = None;
            while let Some(item) = seq.next_element::<Item>()? {
                *self.listed = self.listed.saturating_add(1);
                match item {
                    // Past the limit, or after a wrong item, indices are only counted.
                    Item::Int(x) if wrong.is_none() && *self.listed <= MAX_SELECTION_INDICES => list.push(x),
                    Item::Int(_) => {}
                    Item::Other(got) => {
                        wrong.get_or_insert(got);
                    }
                }
            }
            Ok(match wrong {
                Some(got) => JsonDim::Invalid(format!("list items must be integers, got {got}")),
                None => {
                    list.shrink_to_fit();
                    JsonDim::Spec(DimSpec::List(list))
                }
            })
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonDim, A::Error> {
            let (mut start, mut stop, mut step) = (None, None, None);
            while let Some(k) = map.next_key::<String>()? {
                let slot = match k.as_str() {
                    "start" => &mut start,
                    "stop" => &mut stop,
                    "step" => &mut step,
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                        drain_map(map)?;
                        return Ok(JsonDim::Invalid(format!(
                            "unknown slice member `{k}` (expected start, stop, step)"
                        )));
                    }
                };
                match map.next_value::<Item>()? {
                    Item::Int(x) => *slot = Some(x),
                    Item::Other(got) if got == "null" => *slot = None,
                    Item::Other(got) => {
                        drain_map(map)?;
                        return Ok(JsonDim::Invalid(format!("`{k}` must be an integer, got {got}")));
                    }
                }
            }
            if step == Some(0) {
                return Ok(JsonDim::Invalid("slice step must not be zero".into()));
            }
            Ok(JsonDim::Spec(DimSpec::Slice { start, stop, step }))
        }
    }

    /// A list item or slice member: an integer, or what it was instead.
    enum Item {
        Int(i64),
        Other(String),
    }

    impl<'de> de::Deserialize<'de> for Item {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(ItemVisitor)
        }
    }

    struct ItemVisitor;

    impl<'de> Visitor<'de> for ItemVisitor {
        type Value = Item;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an integer")
        }

        fn visit_i64<E>(self, v: i64) -> Result<Item, E> {
            Ok(Item::Int(v))
        }

        fn visit_u64<E>(self, v: u64) -> Result<Item, E> {
            Ok(i64::try_from(v).map_or_else(|_| Item::Other(v.to_string()), Item::Int))
        }

        fn visit_f64<E>(self, v: f64) -> Result<Item, E> {
            Ok(Item::Other(v.to_string()))
        }

        fn visit_bool<E>(self, v: bool) -> Result<Item, E> {
            Ok(Item::Other(v.to_string()))
        }

        fn visit_unit<E>(self) -> Result<Item, E> {
            Ok(Item::Other("null".into()))
        }

        fn visit_none<E>(self) -> Result<Item, E> {
            Ok(Item::Other("null".into()))
        }

        fn visit_str<E>(self, v: &str) -> Result<Item, E> {
            Ok(Item::Other(quoted(v)))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Item, A::Error> {
            drain_seq(seq)?;
            Ok(Item::Other("a list".into()))
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Item, A::Error> {
            drain_map(map)?;
            Ok(Item::Other("an object".into()))
        }
    }
}

#[cfg(test)]
mod tests;
