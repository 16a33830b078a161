//! The pyramid request's layout options, checked: factors (one list for
//! every level, or one list per level), the coarsest size that ends the
//! levels, the levels' chunk shape and their codecs (v3 `codecs`, v2
//! `compressor` and `filters`).
//!
//! Everything is checked before the job starts, bounded before anything is
//! allocated from it: list lengths against the rank and [`super::MAX_LEVELS`],
//! each factor against [`MAX_FACTOR`], codec documents against
//! [`MAX_CODEC_ENTRIES`] and [`MAX_CODEC_JSON`]. The levels' array document is
//! validated by the code that validates stored metadata (the v3 / v2
//! metadata parsers, the codec chain builder, the array limits), so a codec
//! zarrd cannot encode, a sharding codec whose inner chunks do not divide
//! the chunk shape, or a chunk too large to decode answers 400 naming the
//! member.

use serde_json::{json, Value};

use super::invalid;
use crate::service::ServiceResult;
use crate::zarr::array::{ArrayDescription, ArrayLimits, ZarrFormat};
use crate::zarr::metadata::v2::ArrayMetadataV2;
use crate::zarr::metadata::NodeMetadataV3;

/// The largest factor from one level to the next.
pub const MAX_FACTOR: u64 = 1 << 20;

/// The most entries of `codecs` (or `filters`): as many as a chain may have.
pub const MAX_CODEC_ENTRIES: usize = crate::zarr::metadata::codec::MAX_CHAIN_CODECS;

/// The most bytes of `codecs`, `compressor` and `filters` as JSON text.
pub const MAX_CODEC_JSON: usize = 16 << 10;

/// The factors of a request: from level `k - 1` to level `k`, for every
/// level `k` at least 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Factors {
    /// The same factors at every level.
    Same(Vec<u64>),
    /// One list per level (level 1 first); the number of levels follows.
    PerLevel(Vec<Vec<u64>>),
}

fn factor(v: &Value, field: &str) -> ServiceResult<u64> {
    match v.as_u64() {
        Some(f) if (1..=MAX_FACTOR).contains(&f) => Ok(f),
        Some(f) => Err(invalid(field, format!("{f} is not between 1 and 2^20"))),
        None => Err(invalid(field, format!("expected an integer between 1 and 2^20, got {}", short(v)))),
    }
}

/// A JSON value for a message, cut short.
fn short(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text,
    }
}

fn dims(v: &Value, rank: usize, field: &str) -> ServiceResult<Vec<u64>> {
    let Some(list) = v.as_array() else {
        return Err(invalid(field, format!("expected a list of {rank} factors, got {}", short(v))));
    };
    if list.len() != rank {
        return Err(invalid(field, format!("{} factors for an array of {rank} dimensions", list.len())));
    }
    list.iter().enumerate().map(|(d, f)| factor(f, &format!("{field}[{d}]"))).collect()
}

/// Parses `factors`: a list of one factor per dimension (every level), or
/// a list of such lists (one per level after level 0).
pub(super) fn parse_factors(v: &Value, rank: usize, max_levels: usize) -> ServiceResult<Factors> {
    let Some(list) = v.as_array() else {
        return Err(invalid(
            "factors",
            format!("expected a list of {rank} factors, or a list of such lists (one per level), got {}", short(v)),
        ));
    };
    if !list.first().is_some_and(Value::is_array) {
        return dims(v, rank, "factors").map(Factors::Same);
    }
    if list.len() >= max_levels {
        return Err(invalid(
            "factors",
            format!("{} levels of factors; at most {} (levels after level 0)", list.len(), max_levels - 1),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(k, l)| dims(l, rank, &format!("factors[{k}]")))
        .collect::<ServiceResult<_>>()
        .map(Factors::PerLevel)
}

/// Parses `coarsest`: one extent for every dimension, or one per dimension.
pub(super) fn parse_coarsest(v: &Value, rank: usize) -> ServiceResult<Vec<u64>> {
    let one = |v: &Value, field: &str| match v.as_u64() {
        Some(n) if n >= 1 => Ok(n),
        _ => Err(invalid(field, format!("expected a positive integer extent, got {}", short(v)))),
    };
    match v {
        Value::Array(list) if list.len() == rank => {
            list.iter().enumerate().map(|(d, n)| one(n, &format!("coarsest[{d}]"))).collect()
        }
        Value::Array(list) => {
            Err(invalid("coarsest", format!("{} extents for an array of {rank} dimensions", list.len())))
        }
        _ => Ok(vec![one(v, "coarsest")?; rank]),
    }
}

/// Parses `chunks`: the chunk (v3 with sharding: shard) shape of the
/// levels after level 0, one positive extent per dimension.
pub(super) fn parse_chunks(v: &Value, rank: usize) -> ServiceResult<Vec<u64>> {
    let Some(list) = v.as_array() else {
        return Err(invalid("chunks", format!("expected a list of {rank} positive extents, got {}", short(v))));
    };
    if list.len() != rank {
        return Err(invalid("chunks", format!("{} extents for an array of {rank} dimensions", list.len())));
    }
    list.iter()
        .enumerate()
        .map(|(d, n)| match n.as_u64() {
            Some(n) if n >= 1 => Ok(n),
            _ => Err(invalid(&format!("chunks[{d}]"), format!("expected a positive integer, got {}", short(n)))),
        })
        .collect()
}

/// Checks a codec member's size before it is validated.
fn bounded(field: &str, v: &Value, list: bool) -> ServiceResult<()> {
    if list {
        match v.as_array() {
            Some(l) if l.len() <= MAX_CODEC_ENTRIES => {}
            Some(l) => {
                return Err(invalid(field, format!("{} entries; at most {MAX_CODEC_ENTRIES}", l.len())));
            }
            None if v.is_null() && field == "filters" => {}
            None => return Err(invalid(field, format!("expected a list, got {}", short(v)))),
        }
    }
    let len = serde_json::to_vec(v).map_or(usize::MAX, |t| t.len());
    if len > MAX_CODEC_JSON {
        return Err(invalid(field, format!("{len} bytes of JSON; at most {MAX_CODEC_JSON}")));
    }
    Ok(())
}

/// What the request changes in the levels' layout.
#[derive(Debug, Clone, Default)]
pub(super) struct Layout<'a> {
    pub chunks: Option<Vec<u64>>,
    pub codecs: Option<&'a Value>,
    pub compressor: Option<&'a Value>,
    pub filters: Option<&'a Value>,
}

/// Validates a level document as stored metadata is validated: parsed,
/// its codec chain built, its chunks checked against the array limits.
fn validate(doc: &Value, format: ZarrFormat, limits: &ArrayLimits) -> Result<ArrayDescription, String> {
    let desc = match format {
        ZarrFormat::V3 => match NodeMetadataV3::from_json(doc, "").map_err(|e| e.to_string())? {
            NodeMetadataV3::Array(meta) => ArrayDescription::from_v3(&meta).map_err(|e| e.to_string())?,
            NodeMetadataV3::Group(_) => return Err("not an array document".into()),
        },
        ZarrFormat::V2 => {
            let meta = ArrayMetadataV2::from_json(doc, "").map_err(|e| e.to_string())?;
            ArrayDescription::from_v2(&meta, serde_json::Map::new()).map_err(|e| e.to_string())?
        }
    };
    desc.check_limits(limits).map_err(|e| e.to_string())?;
    Ok(desc)
}

/// The document of the levels after level 0: the source's (`source`, as
/// stored: `zarr.json` or `.zarray`) with the requested chunk shape and
/// codecs, validated; and its chunk (shard) shape.
///
/// Each member is applied and validated in turn (`chunks`, then `codecs`,
/// or `compressor` then `filters`), so an error names the member that
/// broke the document.
pub(super) fn level_template(
    source: &Value,
    format: ZarrFormat,
    layout: &Layout<'_>,
    limits: &ArrayLimits,
) -> ServiceResult<(Value, Vec<u64>)> {
    let mut doc = source.clone();
    let check = |doc: &Value, field: &str| validate(doc, format, limits).map_err(|e| invalid(field, e));
    match format {
        ZarrFormat::V3 => {
            for field in ["compressor", "filters"] {
                let given = if field == "compressor" { layout.compressor } else { layout.filters };
                if given.is_some() {
                    return Err(invalid(field, "a Zarr v3 source's levels take `codecs` (as in zarr.json)"));
                }
            }
        }
        ZarrFormat::V2 => {
            if layout.codecs.is_some() {
                return Err(invalid("codecs", "a Zarr v2 source's levels take `compressor` and `filters`"));
            }
        }
    }
    if let Some(chunks) = &layout.chunks {
        match format {
            ZarrFormat::V3 => {
                doc["chunk_grid"] = json!({"name": "regular", "configuration": {"chunk_shape": chunks}});
            }
            ZarrFormat::V2 => doc["chunks"] = json!(chunks),
        }
        check(&doc, "chunks")?;
    }
    let members =
        [("codecs", layout.codecs, true), ("compressor", layout.compressor, false), ("filters", layout.filters, true)];
    for (field, value, list) in members {
        if let Some(v) = value {
            bounded(field, v, list)?;
            doc[field] = v.clone();
            check(&doc, field)?;
        }
    }
    let desc = check(&doc, "request body")?;
    Ok((doc, desc.chunk_shape))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(r: ServiceResult<impl std::fmt::Debug>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn factors_are_one_list_or_one_list_per_level() {
        assert_eq!(parse_factors(&json!([1, 2, 2]), 3, 32).unwrap(), Factors::Same(vec![1, 2, 2]));
        assert_eq!(
            parse_factors(&json!([[2, 2], [1, 3]]), 2, 32).unwrap(),
            Factors::PerLevel(vec![vec![2, 2], vec![1, 3]])
        );
        assert!(msg(parse_factors(&json!([2, 2]), 3, 32)).starts_with("factors: 2 factors for an array of 3"));
        assert!(msg(parse_factors(&json!([2, 0]), 2, 32)).starts_with("factors[1]: 0 is not between"));
        assert!(msg(parse_factors(&json!([2, 4_611_686_018_427_387_904_u64]), 2, 32)).starts_with("factors[1]:"));
        assert!(msg(parse_factors(&json!([2, -1]), 2, 32)).starts_with("factors[1]: expected an integer"));
        assert!(msg(parse_factors(&json!([2, 2.5]), 2, 32)).starts_with("factors[1]: expected an integer"));
        assert!(msg(parse_factors(&json!([[2, 2], [2]]), 2, 32)).starts_with("factors[1]: 1 factors"));
        assert!(msg(parse_factors(&json!([[2, 2], 2]), 2, 32)).starts_with("factors[1]: expected a list"));
        assert!(msg(parse_factors(&json!([[2, 2], [2, "x"]]), 2, 32)).starts_with("factors[1][1]: expected"));
        assert!(msg(parse_factors(&json!("2"), 2, 32)).starts_with("factors: expected a list"));
        assert!(msg(parse_factors(&json!([]), 2, 32)).starts_with("factors: 0 factors"));
        // A million levels are refused before any entry is looked at.
        let many = Value::Array(vec![json!([2, 2]); 1_000_000]);
        assert!(msg(parse_factors(&many, 2, 32)).starts_with("factors: 1000000 levels of factors; at most 31"));
    }

    #[test]
    fn coarsest_and_chunks_are_checked_per_dimension() {
        assert_eq!(parse_coarsest(&json!(64), 3).unwrap(), vec![64, 64, 64]);
        assert_eq!(parse_coarsest(&json!([1, 8]), 2).unwrap(), vec![1, 8]);
        assert!(msg(parse_coarsest(&json!(0), 2)).starts_with("coarsest: expected a positive"));
        assert!(msg(parse_coarsest(&json!([1, 2, 3]), 2)).starts_with("coarsest: 3 extents"));
        assert!(msg(parse_coarsest(&json!([1, -2]), 2)).starts_with("coarsest[1]:"));
        assert_eq!(parse_chunks(&json!([4, 8]), 2).unwrap(), vec![4, 8]);
        assert!(msg(parse_chunks(&json!([4, 0]), 2)).starts_with("chunks[1]: expected a positive"));
        assert!(msg(parse_chunks(&json!(4), 2)).starts_with("chunks: expected a list"));
        assert!(msg(parse_chunks(&json!([4]), 2)).starts_with("chunks: 1 extents"));
    }

    fn limits() -> ArrayLimits {
        ArrayLimits {
            max_decoded_chunk_bytes: 1 << 30,
            max_inner_chunks_per_shard: 1 << 20,
            max_fill_value_bytes: 1 << 20,
        }
    }

    fn v3_source(codecs: Value) -> Value {
        json!({"zarr_format": 3, "node_type": "array", "shape": [100, 100], "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [10, 10]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": codecs})
    }

    #[test]
    fn level_documents_are_validated_as_stored_metadata_naming_the_member() {
        let plain = v3_source(json!([{"name": "bytes", "configuration": {"endian": "little"}}]));
        let zstd = json!([{"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 3, "checksum": false}}]);
        let layout = Layout { chunks: Some(vec![20, 30]), codecs: Some(&zstd), ..Layout::default() };
        let (doc, chunks) = level_template(&plain, ZarrFormat::V3, &layout, &limits()).unwrap();
        assert_eq!(chunks, vec![20, 30]);
        assert_eq!(doc["codecs"], zstd);
        assert_eq!(doc["chunk_grid"]["configuration"]["chunk_shape"], json!([20, 30]));
        // Nothing asked: the source's layout.
        let (doc, chunks) = level_template(&plain, ZarrFormat::V3, &Layout::default(), &limits()).unwrap();
        assert_eq!((doc, chunks), (plain.clone(), vec![10, 10]));

        let e = |layout: &Layout<'_>, source: &Value, format| msg(level_template(source, format, layout, &limits()));
        let unknown = json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "lz4hc"}]);
        let m = e(&Layout { codecs: Some(&unknown), ..Layout::default() }, &plain, ZarrFormat::V3);
        assert!(m.starts_with("codecs:") && m.contains("lz4hc"), "{m}");
        let no_bytes = json!([{"name": "zstd"}]);
        assert!(
            e(&Layout { codecs: Some(&no_bytes), ..Layout::default() }, &plain, ZarrFormat::V3).starts_with("codecs:")
        );
        let many = Value::Array(vec![json!({"name": "crc32c"}); 1000]);
        assert!(e(&Layout { codecs: Some(&many), ..Layout::default() }, &plain, ZarrFormat::V3)
            .starts_with("codecs: 1000 entries; at most 16"));
        let huge = json!([{"name": "bytes", "configuration": {"endian": "x".repeat(20_000)}}]);
        assert!(
            e(&Layout { codecs: Some(&huge), ..Layout::default() }, &plain, ZarrFormat::V3).starts_with("codecs: 200")
        );
        // A chunk too large to decode (2^62 elements) is refused by the array limits.
        let m = e(&Layout { chunks: Some(vec![1 << 31, 1 << 31]), ..Layout::default() }, &plain, ZarrFormat::V3);
        assert!(m.starts_with("chunks:") && m.contains("max_decoded_chunk_bytes"), "{m}");
        let null = Value::Null;
        assert!(e(&Layout { compressor: Some(&null), ..Layout::default() }, &plain, ZarrFormat::V3)
            .starts_with("compressor: a Zarr v3 source"));

        // Sharded: `chunks` is the shard shape; the inner chunks must divide it.
        let sharded = v3_source(json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [5, 5],
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]));
        let (_, chunks) = level_template(
            &sharded,
            ZarrFormat::V3,
            &Layout { chunks: Some(vec![20, 5]), ..Layout::default() },
            &limits(),
        )
        .unwrap();
        assert_eq!(chunks, vec![20, 5]);
        assert!(e(&Layout { chunks: Some(vec![20, 7]), ..Layout::default() }, &sharded, ZarrFormat::V3)
            .starts_with("chunks:"));

        // v2: compressor and filters.
        let v2 = json!({"zarr_format": 2, "shape": [100, 100], "chunks": [10, 10], "dtype": "<u2",
            "compressor": null, "fill_value": 0, "order": "C", "filters": null});
        let gzip = json!({"id": "gzip", "level": 5});
        let (doc, _) = level_template(
            &v2,
            ZarrFormat::V2,
            &Layout { chunks: Some(vec![7, 7]), compressor: Some(&gzip), ..Layout::default() },
            &limits(),
        )
        .unwrap();
        assert_eq!((&doc["compressor"], &doc["chunks"]), (&gzip, &json!([7, 7])));
        let bad = json!({"id": "nonesuch"});
        let m = e(&Layout { compressor: Some(&bad), ..Layout::default() }, &v2, ZarrFormat::V2);
        assert!(m.starts_with("compressor:") && m.contains("nonesuch"), "{m}");
        let bad_filters = json!([{"id": "nonesuch"}]);
        assert!(e(&Layout { filters: Some(&bad_filters), ..Layout::default() }, &v2, ZarrFormat::V2)
            .starts_with("filters:"));
        assert!(e(&Layout { codecs: Some(&zstd), ..Layout::default() }, &v2, ZarrFormat::V2)
            .starts_with("codecs: a Zarr v2 source"));
    }
}
