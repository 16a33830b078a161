//! Request parameters more than one handler takes, each parsed by one rule
//! with one error code:
//!
//! | parameter | rule | refusal |
//! |---|---|---|
//! | `mode=` (query or body) | `basic` (default, also empty), `orthogonal` (`oindex`, `outer`), `coordinate` (`vindex`, `points`), any case | 400 `invalid_selection` |
//! | `sel=` | [`SelectionSpec::parse`] in that mode | 400 `invalid_selection`, 413 `selection_too_large` |
//! | `format=` | `raw` (`bin`, `binary`, `octet-stream`), `npy` (`numpy`), `json`, any case; empty is absent | 400 `invalid_format` |
//! | answer format | `format=`, else `Accept`, else raw | as `format=` |
//! | body format | `format=`, else `Content-Type` | as `format=`; 415 `unsupported_media_type`; 400 `missing_format` |
//! | `depth=` (node descriptions) | at most [`MAX_DEPTH`], default 1 | 400 `invalid_query` |
//! | `Depth:` (WebDAV PROPFIND) | `0`, `1` or `infinity` (default) | 400 `invalid_depth` |

use axum::http::{header, HeaderMap};

use super::error::{ApiError, ApiResult, ErrorCode};
use crate::service::keys::Depth;
use crate::service::wire::{BodyFormatError, WireFormat};
use crate::service::ServiceError;
use crate::zarr::selection::{SelectionError, SelectionMode, SelectionSpec};

/// `mode=`: how lists in a selection combine.
///
/// # Errors
/// 400 `invalid_selection` naming the mode and the accepted ones.
pub fn selection_mode(mode: Option<&str>) -> ApiResult<SelectionMode> {
    match mode.map(|m| m.trim().to_ascii_lowercase()).as_deref() {
        None | Some("" | "basic") => Ok(SelectionMode::Basic),
        Some("orthogonal" | "oindex" | "outer") => Ok(SelectionMode::Orthogonal),
        Some("coordinate" | "vindex" | "points") => Ok(SelectionMode::Coordinate),
        Some(other) => Err(ErrorCode::InvalidSelection
            .error(format!("mode `{other}` is unknown; use basic, orthogonal or coordinate"))),
    }
}

/// `sel=` and `mode=` of a query: the selection (absent: the whole array).
///
/// # Errors
/// As [`selection_mode`]; a selection that does not parse is 400
/// `invalid_selection` naming the dimension, too many listed indices 413
/// `selection_too_large`.
pub fn selection(sel: Option<&str>, mode: Option<&str>) -> ApiResult<SelectionSpec> {
    let mode = selection_mode(mode)?;
    SelectionSpec::parse(sel.unwrap_or(""), mode).map_err(selection_error)
}

/// 413 `selection_too_large` for too many listed indices, else 400
/// `invalid_selection`.
#[must_use]
pub fn selection_error(e: SelectionError) -> ApiError {
    ApiError::from(ServiceError::from(e))
}

/// The format of an answer: `format=` (empty is absent), else the first
/// format the `Accept` header names, else raw. The names and media types
/// are [`WireFormat`]'s, the one rule for answers and bodies.
///
/// # Errors
/// 400 `invalid_format` naming the value and the formats.
pub fn answer_format(param: Option<&str>, headers: &HeaderMap) -> ApiResult<WireFormat> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    WireFormat::negotiate(param, accept).map_err(|e| ErrorCode::InvalidFormat.error(e.0))
}

/// The format of a data body: `format=` (empty is absent), else the
/// `Content-Type`.
///
/// # Errors
/// 400 `invalid_format` for an unknown name; an unknown `Content-Type` is
/// 415 `unsupported_media_type`, neither 400 `missing_format`.
pub fn body_format(param: Option<&str>, headers: &HeaderMap) -> ApiResult<WireFormat> {
    let content_type = headers.get(header::CONTENT_TYPE).map(|v| String::from_utf8_lossy(v.as_bytes()));
    WireFormat::negotiate_body(param, content_type.as_deref()).map_err(|e| {
        let code = match e {
            BodyFormatError::UnknownName(_) => ErrorCode::InvalidFormat,
            BodyFormatError::UnsupportedMediaType(_) => ErrorCode::UnsupportedMediaType,
            BodyFormatError::Missing => ErrorCode::MissingFormat,
        };
        code.error(e.to_string())
    })
}

/// The deepest `depth=` a node description lists.
pub const MAX_DEPTH: usize = 64;

/// `depth=` of a node description: levels of descendants (default 1).
///
/// # Errors
/// 400 `invalid_query` above [`MAX_DEPTH`].
pub fn describe_depth(depth: Option<usize>) -> ApiResult<usize> {
    match depth.unwrap_or(1) {
        d if d <= MAX_DEPTH => Ok(d),
        d => Err(ErrorCode::InvalidQuery.error(format!("depth: at most {MAX_DEPTH}, got {d}"))),
    }
}

/// The WebDAV `Depth` header of a PROPFIND (absent: infinity).
///
/// # Errors
/// 400 `invalid_depth` for anything but `0`, `1` or `infinity`.
pub fn dav_depth(headers: &HeaderMap) -> ApiResult<Depth> {
    let value = headers.get("depth").map(|v| String::from_utf8_lossy(v.as_bytes()));
    match value.as_deref().map(str::trim) {
        Some("0") => Ok(Depth::Zero),
        Some("1") => Ok(Depth::One),
        Some(d) if d.eq_ignore_ascii_case("infinity") => Ok(Depth::Infinity),
        None => Ok(Depth::Infinity),
        Some(other) => Err(ErrorCode::InvalidDepth.error(format!("Depth `{other}`: expected 0, 1 or infinity"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(name: header::HeaderName, value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_static(value));
        h
    }

    #[test]
    fn modes_have_one_rule() {
        for (given, mode) in [
            (None, SelectionMode::Basic),
            (Some(""), SelectionMode::Basic),
            (Some("basic"), SelectionMode::Basic),
            (Some("Orthogonal"), SelectionMode::Orthogonal),
            (Some("oindex"), SelectionMode::Orthogonal),
            (Some(" coordinate "), SelectionMode::Coordinate),
            (Some("vindex"), SelectionMode::Coordinate),
        ] {
            assert_eq!(selection_mode(given).unwrap(), mode, "{given:?}");
        }
        let e = selection_mode(Some("diagonal")).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidSelection);
        assert!(e.message.contains("diagonal"), "{}", e.message);
    }

    #[test]
    fn selections_name_what_is_wrong() {
        assert_eq!(selection(Some("0:2,[1,3]"), Some("oindex")).unwrap().mode, SelectionMode::Orthogonal);
        let e = selection(Some("1:2:3:4"), None).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidSelection);
        assert_eq!(selection(Some("0"), Some("zigzag")).unwrap_err().code, ErrorCode::InvalidSelection);
    }

    #[test]
    fn formats_have_one_rule_for_answers_and_bodies() {
        let none = HeaderMap::new();
        assert_eq!(answer_format(None, &none).unwrap(), WireFormat::Raw);
        assert_eq!(answer_format(Some(""), &headers(header::ACCEPT, "application/x-npy")).unwrap(), WireFormat::Npy);
        assert_eq!(
            answer_format(Some("JSON"), &headers(header::ACCEPT, "application/x-npy")).unwrap(),
            WireFormat::Json
        );
        for name in ["raw", "bin", "binary", "octet-stream"] {
            assert_eq!(answer_format(Some(name), &none).unwrap(), WireFormat::Raw, "{name}");
            assert_eq!(body_format(Some(name), &none).unwrap(), WireFormat::Raw, "{name}");
        }
        assert_eq!(body_format(Some("numpy"), &none).unwrap(), WireFormat::Npy);
        for e in [answer_format(Some("xml"), &none).unwrap_err(), body_format(Some("xml"), &none).unwrap_err()] {
            assert_eq!(e.code, ErrorCode::InvalidFormat);
            assert!(e.message.contains("`xml`"), "{}", e.message);
        }
        assert_eq!(body_format(None, &headers(header::CONTENT_TYPE, "application/json")).unwrap(), WireFormat::Json);
        let e = body_format(None, &headers(header::CONTENT_TYPE, "text/csv")).unwrap_err();
        assert_eq!(e.code, ErrorCode::UnsupportedMediaType);
        assert!(e.message.contains("text/csv"), "{}", e.message);
        assert_eq!(body_format(None, &none).unwrap_err().code, ErrorCode::MissingFormat);
    }

    #[test]
    fn depths() {
        assert_eq!(describe_depth(None).unwrap(), 1);
        assert_eq!(describe_depth(Some(MAX_DEPTH)).unwrap(), MAX_DEPTH);
        let e = describe_depth(Some(MAX_DEPTH + 1)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidQuery);
        assert!(e.message.contains("depth"), "{}", e.message);
        assert_eq!(dav_depth(&HeaderMap::new()).unwrap(), Depth::Infinity);
        let depth = header::HeaderName::from_static("depth");
        assert_eq!(dav_depth(&headers(depth.clone(), "Infinity")).unwrap(), Depth::Infinity);
        assert_eq!(dav_depth(&headers(depth.clone(), " 1 ")).unwrap(), Depth::One);
        assert_eq!(dav_depth(&headers(depth, "2")).unwrap_err().code, ErrorCode::InvalidDepth);
    }
}
