//! Signed links: read access for viewers that cannot send an
//! `Authorization` header (neuroglancer, vizarr, ome-zarr.js, zarrita.js
//! given a URL).
//!
//! A caller who may read a mount mints a link (`POST /api/v1/links` with
//! `{"mount", "prefix", "expires_in"}`); the answer is a base URL,
//! `/s/{link}/`, under which the store protocol's GET and HEAD (ranges and
//! validators included) read the mount's keys *under the prefix* until the
//! expiry. The credential is in the URL path, not in a query string, because
//! viewers append keys to a base URL and drop its query.
//!
//! The link is `base64url(mount \n prefix \n expiry) . base64url(tag)`,
//! where the tag is HMAC-SHA-256 (aws-lc-rs) of the text before it with
//! `auth.link_key` from the configuration, compared in constant time. A
//! link is read-only whatever its minter may do; it cannot be widened
//! (another mount, prefix or expiry changes the tag). **Revoking**: change
//! `auth.link_key` and restart; every link minted with the old key is then
//! 403. Links are logged as `/s/…/key`, never with their credential.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::hmac;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use percent_encoding::percent_decode_str;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::config::Scope;
use crate::http::error::{ApiError, ApiResult, ErrorBody, ErrorCode};
use crate::http::extract::TypedJsonBody;
use crate::http::guard::Access;
use crate::service::{keys as store, App};
use crate::storage::StoreKey;

/// The longest a link may live.
pub const MAX_EXPIRES_IN: u64 = 30 * 24 * 3600;

/// What a link grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub mount: String,
    /// Keys equal to it or under it (`""`: the whole mount).
    pub prefix: String,
    /// Seconds since the Unix epoch.
    pub expires: u64,
}

fn key_of(secret: &str) -> hmac::Key {
    hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes())
}

/// The link of `grant` signed with `secret`.
#[must_use]
pub fn sign(secret: &str, grant: &Grant) -> String {
    let payload = format!("{}\n{}\n{}", grant.mount, grant.prefix, grant.expires);
    let tag = hmac::sign(&key_of(secret), payload.as_bytes());
    format!("{}.{}", URL_SAFE_NO_PAD.encode(payload), URL_SAFE_NO_PAD.encode(tag.as_ref()))
}

/// The grant of a link whose tag `secret` verifies.
///
/// # Errors
/// A link that is malformed or not signed with `secret`.
pub fn verify(secret: &str, link: &str) -> Result<Grant, &'static str> {
    let (payload, tag) = link.split_once('.').ok_or("malformed link")?;
    let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| "malformed link")?;
    let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| "malformed link")?;
    hmac::verify(&key_of(secret), &payload, &tag).map_err(|_| "the link's signature does not match")?;
    let text = String::from_utf8(payload).map_err(|_| "malformed link")?;
    let mut parts = text.splitn(3, '\n');
    let (Some(mount), Some(prefix), Some(expires)) = (parts.next(), parts.next(), parts.next()) else {
        return Err("malformed link");
    };
    let expires = expires.parse().map_err(|_| "malformed link")?;
    Ok(Grant { mount: mount.into(), prefix: prefix.into(), expires })
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// What to link.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkRequest {
    /// The mount.
    #[schema(example = "data")]
    pub mount: String,
    /// Keys the link reads: this path and everything under it (`""`: the
    /// whole mount).
    #[serde(default)]
    #[schema(example = "images/cells.ome.zarr")]
    pub prefix: String,
    /// Seconds the link lives, 1 to 2,592,000 (30 days).
    #[schema(example = 86400)]
    pub expires_in: u64,
}

/// A minted link.
#[derive(Debug, Serialize, ToSchema)]
pub struct Link {
    /// The link's base URL path: append a key under the prefix.
    #[schema(example = "/s/ZGF0YQppbWFnZXMKMTcwMDAwMDAwMA.3q2-7w/")]
    pub path: String,
    /// The prefix it reads.
    pub prefix: String,
    /// When it stops working, in seconds since the Unix epoch.
    pub expires_at: u64,
}

/// Mint a read-only link to a mount's keys under a prefix, for viewers that
/// cannot send `Authorization` (neuroglancer, vizarr, zarrita.js): GET and
/// HEAD of `{path}{key}` read `{prefix}/{key}` until `expires_at`. Needs
/// `read` on the mount and `auth.link_key` configured; revoke every link by
/// changing the key.
#[utoipa::path(
    post,
    path = "/api/v1/links",
    tag = "store",
    request_body(content = LinkRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "The link", body = Link),
        (status = 400, description = "A prefix that is not a key path; expires_in outside 1..2592000", body = ErrorBody),
        (status = 401, description = "No or a wrong token", body = ErrorBody),
        (status = 403, description = "No read scope on the mount; no auth.link_key configured", body = ErrorBody),
        (status = 404, description = "No such mount", body = ErrorBody),
        (status = 413, description = "A body larger than limits.max_body_bytes", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = 422, description = "A body of the wrong shape (an unknown member, a wrong type)", body = ErrorBody),
    )
)]
pub async fn mint(
    State(app): State<Arc<App>>,
    access: Option<Extension<Access>>,
    TypedJsonBody(req): TypedJsonBody<LinkRequest>,
) -> ApiResult<Response> {
    // Rights first: a caller without them learns nothing about which mounts
    // exist (the same 403 for a hidden mount and for none).
    if !access.as_ref().is_some_and(|Extension(a)| a.may(&app, &req.mount, Scope::Read)) {
        return Err(ErrorCode::Forbidden.error(format!("a link to mount `{}` needs the read scope on it", req.mount)));
    }
    app.mount(&req.mount)?;
    let Some(secret) = app.config().auth.link_key.as_ref() else {
        return Err(ErrorCode::Forbidden.error("signed links are not enabled on this server (no auth.link_key)"));
    };
    if !(1..=MAX_EXPIRES_IN).contains(&req.expires_in) {
        return Err(ErrorCode::BadRequest.error(format!("expires_in: from 1 to {MAX_EXPIRES_IN} seconds")));
    }
    let prefix = req.prefix.trim_matches('/').to_string();
    if !prefix.is_empty() {
        StoreKey::new(&prefix).map_err(|e| ErrorCode::BadRequest.error(format!("prefix: {e}")))?;
    }
    let grant = Grant { mount: req.mount, prefix: prefix.clone(), expires: now().saturating_add(req.expires_in) };
    let link = Link { path: format!("/s/{}/", sign(secret.expose(), &grant)), prefix, expires_at: grant.expires };
    Ok((StatusCode::CREATED, Json(link)).into_response())
}

/// Read a key through a signed link (the store protocol's GET and HEAD:
/// `Range`, `If-None-Match`, `If-Modified-Since`).
#[utoipa::path(
    get,
    path = "/s/{link}/{*key}",
    tag = "store",
    params(
        ("link" = String, Path, description = "The link, as minted", example = "ZGF0YQphcnIKMTkwMDAwMDAwMA.bm90LWEtdGFn"),
        ("key" = String, Path, description = "A key under the link's prefix", example = "zarr.json"),
    ),
    responses(
        (status = 200, description = "The object", body = crate::http::openapi::Binary),
        (status = 206, description = "The range asked for", body = crate::http::openapi::Binary),
        (status = 304, description = "Not modified"),
        (status = 400, description = "A key that is not valid", body = ErrorBody),
        (status = 403, description = "A link that is malformed, expired or signed with another key; links not enabled", body = ErrorBody),
        (status = 404, description = "No such key or mount", body = ErrorBody),
        (status = 412, description = "A precondition failed", body = ErrorBody),
        (status = 416, description = "A range outside the object", body = ErrorBody),
    )
)]
pub async fn read_linked(
    State(app): State<Arc<App>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let rest = uri.path().strip_prefix("/s/").unwrap_or("");
    let (link, raw_key) = rest.split_once('/').unwrap_or((rest, ""));
    let Some(secret) = app.config().auth.link_key.as_ref() else {
        return Err(ErrorCode::Forbidden.error("signed links are not enabled (no auth.link_key)"));
    };
    let grant = verify(secret.expose(), link).map_err(|why| ErrorCode::Forbidden.error(why))?;
    if now() >= grant.expires {
        return Err(ErrorCode::Forbidden.error("the link has expired"));
    }
    // `/s/{link}/{key}` reads `{prefix}/{key}`: nothing outside the prefix can be named.
    // Decoded and checked as the store protocol's keys are; a link reads
    // objects, never listings.
    let key = percent_decode_str(raw_key)
        .decode_utf8()
        .map_err(|_| ErrorCode::InvalidKey.error(format!("`{raw_key}` is not valid percent-encoded UTF-8")))?;
    if key.is_empty() || key.ends_with('/') {
        // Not found, as a client probing for a "directory" expects.
        return Err(ErrorCode::NotFound.error(format!("`{key}` names a prefix; a signed link reads objects only")));
    }
    let full = if grant.prefix.is_empty() { key.to_string() } else { format!("{}/{}", grant.prefix, key) };
    let key = StoreKey::new(&full).map_err(|e| ApiError::from(crate::service::ServiceError::from(e)))?;
    let req = crate::http::store::read_request(&headers, method == Method::HEAD);
    let mount = app.mount_ref(&grant.mount)?;
    let out = store::read(&mount, &key, &req).await?;
    Ok(crate::http::store::read_response(&key, out, mount.mount().cache_control()))
}

/// A request path with a link's credential replaced by `…`, for logs.
#[must_use]
pub fn redact(path: &str) -> std::borrow::Cow<'_, str> {
    match path.strip_prefix("/s/") {
        Some(rest) => {
            let key = rest.split_once('/').map_or("", |(_, k)| k);
            std::borrow::Cow::Owned(format!("/s/…/{key}"))
        }
        None => std::borrow::Cow::Borrowed(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_verify_only_with_their_key_and_as_minted() {
        let g = Grant { mount: "data".into(), prefix: "a/b".into(), expires: 1_900_000_000 };
        let link = sign("k".repeat(32).as_str(), &g);
        assert_eq!(verify(&"k".repeat(32), &link).unwrap(), g);
        assert!(verify(&"j".repeat(32), &link).is_err(), "another key");
        let widened = Grant { prefix: String::new(), ..g.clone() };
        let (_, tag) = link.split_once('.').unwrap();
        let forged = format!(
            "{}.{tag}",
            URL_SAFE_NO_PAD.encode(format!("{}\n{}\n{}", widened.mount, widened.prefix, widened.expires))
        );
        assert!(verify(&"k".repeat(32), &forged).is_err(), "a widened grant with the old tag");
        for bad in ["", ".", "x.y", "abc"] {
            assert!(verify(&"k".repeat(32), bad).is_err(), "{bad}");
        }
        assert_eq!(redact(&format!("/s/{link}/a/zarr.json")), "/s/…/a/zarr.json");
        assert_eq!(redact("/zarr/data/x"), "/zarr/data/x");
    }
}
