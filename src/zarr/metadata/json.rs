//! Small helpers for reading untrusted JSON with precise error paths.
//!
//! Metadata is parsed from `serde_json::Value` by hand rather than with
//! `#[derive(Deserialize)]` because every rejection must name the field path
//! and the expectation (Zarr v3 core, "Metadata"; Zarr v2, "Metadata"), and
//! because validity depends on other fields (the fill value on the data type,
//! codec settings on the chunk shape).

use serde_json::{Map, Value};

use super::error::{describe, join, MetadataError, Result};

/// A JSON object being read field by field; remembers which fields were taken
/// so the caller can deal with the rest (unknown or extension fields).
pub(crate) struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
    taken: Vec<&'a str>,
}

impl<'a> Obj<'a> {
    /// Requires `value` to be an object.
    pub(crate) fn new(value: &'a Value, path: &str) -> Result<Self> {
        match value {
            Value::Object(map) => Ok(Self { map, path: path.to_owned(), taken: Vec::new() }),
            other => Err(MetadataError::expected(path, "a JSON object", other)),
        }
    }

    /// Reads an already-checked object.
    pub(crate) fn from_map(map: &'a Map<String, Value>, path: &str) -> Self {
        Self { map, path: path.to_owned(), taken: Vec::new() }
    }

    /// The path of member `field`.
    pub(crate) fn at(&self, field: &str) -> String {
        join(&self.path, field)
    }

    /// A member that must be present.
    pub(crate) fn required(&mut self, field: &'a str) -> Result<&'a Value> {
        self.optional(field).ok_or_else(|| MetadataError::new(self.at(field), "required field is missing"))
    }

    /// A member that may be absent.
    pub(crate) fn optional(&mut self, field: &'a str) -> Option<&'a Value> {
        let value = self.map.get(field)?;
        self.taken.push(field);
        Some(value)
    }

    /// A member that may be absent or `null` (both mean "not set").
    pub(crate) fn optional_non_null(&mut self, field: &'a str) -> Option<&'a Value> {
        self.optional(field).filter(|v| !v.is_null())
    }

    /// Members not taken so far, in document order.
    pub(crate) fn rest(&self) -> impl Iterator<Item = (&'a String, &'a Value)> + '_ {
        self.map.iter().filter(move |(k, _)| !self.taken.contains(&k.as_str()))
    }

    /// Fails on the first member not taken so far.
    pub(crate) fn deny_rest(&self, allowed: &str) -> Result<()> {
        match self.rest().next() {
            Some((name, _)) => {
                Err(MetadataError::new(self.at(name), format!("unknown field; expected only {allowed}")))
            }
            None => Ok(()),
        }
    }
}

/// A string value.
pub(crate) fn string<'a>(value: &'a Value, path: &str) -> Result<&'a str> {
    value.as_str().ok_or_else(|| MetadataError::expected(path, "a string", value))
}

/// A boolean value.
pub(crate) fn boolean(value: &Value, path: &str) -> Result<bool> {
    value.as_bool().ok_or_else(|| MetadataError::expected(path, "a boolean", value))
}

/// An array value.
pub(crate) fn array<'a>(value: &'a Value, path: &str, what: &str) -> Result<&'a [Value]> {
    value.as_array().map(Vec::as_slice).ok_or_else(|| MetadataError::expected(path, what, value))
}

/// An object value.
pub(crate) fn object<'a>(value: &'a Value, path: &str) -> Result<&'a Map<String, Value>> {
    value.as_object().ok_or_else(|| MetadataError::expected(path, "a JSON object", value))
}

/// An integer in `lo..=hi` (JSON numbers with a fraction or exponent that
/// are not whole are rejected).
pub(crate) fn int_in(value: &Value, path: &str, lo: i64, hi: i64) -> Result<i64> {
    let err = || MetadataError::expected(path, &format!("an integer {lo}..={hi}"), value);
    let n = value.as_i64().ok_or_else(err)?;
    if (lo..=hi).contains(&n) {
        Ok(n)
    } else {
        Err(err())
    }
}

/// A non-negative integer no smaller than `min`.
pub(crate) fn uint_min(value: &Value, path: &str, min: u64) -> Result<u64> {
    let what = match min {
        0 => "a non-negative integer".to_owned(),
        1 => "a positive integer".to_owned(),
        _ => format!("an integer >= {min}"),
    };
    match value.as_u64() {
        Some(n) if n >= min => Ok(n),
        _ => Err(MetadataError::expected(path, &what, value)),
    }
}

/// An array of at most [`super::MAX_RANK`] integers, each at least `min`
/// (a chunk shape); the length is checked before anything is built.
pub(crate) fn shape(value: &Value, path: &str, min: u64) -> Result<Vec<u64>> {
    let what = if min == 0 { "an array of non-negative integers" } else { "an array of positive integers" };
    let items = array(value, path, what)?;
    check_rank(items.len(), path)?;
    items.iter().enumerate().map(|(i, v)| uint_min(v, &super::error::index(path, i), min)).collect()
}

/// An array's shape: at most [`super::MAX_RANK`] non-negative integers,
/// each at most [`super::MAX_EXTENT`].
pub(crate) fn array_shape(value: &Value, path: &str) -> Result<Vec<u64>> {
    let shape = shape(value, path, 0)?;
    check_extents(&shape, path)?;
    Ok(shape)
}

/// Refuses more than [`super::MAX_RANK`] dimensions, naming the limit.
pub(crate) fn check_rank(rank: usize, path: &str) -> Result<()> {
    if rank > super::MAX_RANK {
        return Err(MetadataError::new(
            path,
            format!(
                "{rank} dimensions, more than zarrd supports ({} dimensions, TensorStore's maximum rank)",
                super::MAX_RANK
            ),
        ));
    }
    Ok(())
}

/// Refuses a dimension larger than [`super::MAX_EXTENT`], naming it.
pub(crate) fn check_extents(shape: &[u64], path: &str) -> Result<()> {
    match shape.iter().position(|&d| d > super::MAX_EXTENT) {
        Some(i) => Err(MetadataError::new(
            super::error::index(path, i),
            format!(
                "{} is larger than zarrd supports (2^62 = {}, the index space TensorStore and numpy address)",
                shape[i],
                super::MAX_EXTENT
            ),
        )),
        None => Ok(()),
    }
}

/// Renders a shape for messages: `[100, 50]`.
pub(crate) fn fmt_shape(shape: &[u64]) -> String {
    let parts: Vec<String> = shape.iter().map(u64::to_string).collect();
    format!("[{}]", parts.join(", "))
}

/// `"a", "b" or "c"` for messages.
pub(crate) fn one_of(options: &[&str]) -> String {
    let quoted: Vec<String> = options.iter().map(|o| format!("\"{o}\"")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, init)) => format!("{} or {last}", init.join(", ")),
    }
}

/// Requires `value` to be one of the given strings.
pub(crate) fn enum_str<'a>(value: &'a Value, path: &str, options: &[&str]) -> Result<&'a str> {
    match value.as_str() {
        Some(s) if options.contains(&s) => Ok(s),
        _ => Err(MetadataError::new(path, format!("expected {}, got {}", one_of(options), describe(value)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn obj_tracks_taken_fields() {
        let v = json!({"a": 1, "b": 2});
        let mut o = Obj::new(&v, "x").unwrap();
        assert_eq!(o.required("a").unwrap(), &json!(1));
        assert_eq!(o.required("c").unwrap_err().path, "x.c");
        let rest: Vec<_> = o.rest().map(|(k, _)| k.as_str()).collect();
        assert_eq!(rest, ["b"]);
        assert_eq!(o.deny_rest("a").unwrap_err().path, "x.b");
    }

    #[test]
    fn integers() {
        assert_eq!(int_in(&json!(9), "l", 0, 9).unwrap(), 9);
        let e = int_in(&json!(12), "l", 0, 9).unwrap_err();
        assert_eq!(e.message, "expected an integer 0..=9, got 12");
        assert!(int_in(&json!(1.5), "l", 0, 9).is_err());
        assert!(uint_min(&json!(0), "s", 1).is_err());
        assert_eq!(shape(&json!([1, -1]), "s", 0).unwrap_err().path, "s[1]");
    }

    #[test]
    fn ranks_and_extents_are_bounded() {
        let e = shape(&json!(vec![1; 33]), "s", 1).unwrap_err();
        assert_eq!(e.path, "s");
        assert!(e.message.contains("33 dimensions") && e.message.contains("32"), "{e}");
        assert_eq!(shape(&json!(vec![1; 32]), "s", 1).unwrap().len(), 32);
        let e = array_shape(&json!([1, u64::MAX]), "shape").unwrap_err();
        assert_eq!(e.path, "shape[1]");
        assert!(e.message.contains("2^62"), "{e}");
        assert_eq!(array_shape(&json!([1u64 << 62, 1u64 << 62]), "shape").unwrap(), [1 << 62, 1 << 62]);
        assert!(array_shape(&json!([(1u64 << 62) + 1]), "shape").is_err());
    }

    #[test]
    fn one_of_renders() {
        assert_eq!(one_of(&["a"]), "\"a\"");
        assert_eq!(one_of(&["a", "b", "c"]), "\"a\", \"b\" or \"c\"");
    }
}
