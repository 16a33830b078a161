//! Listing answers: an HTML index (relative links, which fsspec's HTTP
//! filesystem reads), JSON, and WebDAV `207 Multi-Status` (RFC 4918 §9.1),
//! which `object_store`'s HTTP store and obstore read.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use serde::Serialize;
use utoipa::ToSchema;

use crate::service::keys::{DavTarget, Listing};
use crate::storage::{KeyPrefix, ListEntry, ObjectMeta};

/// Characters escaped in one path segment of a link.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'\'')
    .add(b'&');

/// Characters escaped in a segment of the HTML index's relative links: also
/// `:`, so that a key named `javascript:...` (any key a writer or a bucket
/// chose) stays a relative path and never becomes a URL scheme.
const LINK_SEGMENT: &AsciiSet = &SEGMENT.add(b':');

fn encode_path(path: &str) -> String {
    path.split('/').map(|s| utf8_percent_encode(s, SEGMENT).to_string()).collect::<Vec<_>>().join("/")
}

fn escape_xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A JSON listing.
#[derive(Debug, Serialize, ToSchema)]
pub struct JsonListing {
    pub mount: String,
    /// The listed prefix, without a trailing slash (`""` for the root).
    pub prefix: String,
    pub entries: Vec<JsonEntry>,
    /// True when `limits.max_list_entries` cut the listing.
    pub truncated: bool,
}

/// One JSON listing entry.
#[derive(Debug, Serialize, ToSchema)]
pub struct JsonEntry {
    /// The name under the prefix; prefixes end with `/`.
    pub name: String,
    /// `object` or `prefix`.
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// RFC 3339 time of the last modification.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
}

fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

pub(crate) fn json_listing(mount: &str, prefix: &KeyPrefix, listing: &Listing) -> Json<JsonListing> {
    let entries = listing
        .entries
        .iter()
        .map(|e| match e {
            ListEntry::Prefix { name } => {
                JsonEntry { name: format!("{name}/"), kind: "prefix", size: None, etag: None, last_modified: None }
            }
            ListEntry::Object { name, meta } => JsonEntry {
                name: name.clone(),
                kind: "object",
                size: Some(meta.size),
                etag: Some(meta.etag.clone()),
                last_modified: meta.last_modified.map(rfc3339),
            },
        })
        .collect();
    Json(JsonListing {
        mount: mount.to_string(),
        prefix: prefix.as_str().to_string(),
        entries,
        truncated: listing.truncated,
    })
}

///
/// Key names are chosen by whoever can write (or by the bucket's owner): the
/// links are relative paths whatever the name (`:` escaped), the text is
/// escaped, and the page carries the browser pages' Content-Security-Policy
/// (no script) and `nosniff`.
pub(crate) fn html_listing(mount: &str, prefix: &KeyPrefix, listing: &Listing) -> Response {
    let title = escape_xml(&format!(
        "/zarr/{mount}/{}",
        if prefix.is_root() { String::new() } else { format!("{}/", prefix.as_str()) }
    ));
    let mut html = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n<body><h1>Index of {title}</h1>\n<ul>\n"
    );
    if !prefix.is_root() {
        html.push_str("<li><a href=\"../\">../</a></li>\n");
    }
    for e in &listing.entries {
        let (name, shown) = match e {
            ListEntry::Prefix { name } => (format!("{name}/"), format!("{name}/")),
            ListEntry::Object { name, meta } => (name.clone(), format!("{name} ({} bytes)", meta.size)),
        };
        // Relative links (fsspec joins them to the listing URL, which always
        // ends in `/`: a prefix without one is redirected).
        let href =
            name.split('/').map(|s| utf8_percent_encode(s, LINK_SEGMENT).to_string()).collect::<Vec<_>>().join("/");
        let _ = writeln!(html, "<li><a href=\"{}\">{}</a></li>", escape_xml(&href), escape_xml(&shown));
    }
    html.push_str("</ul>\n");
    if listing.truncated {
        html.push_str("<p>This listing was cut at the configured maximum number of entries.</p>\n");
    }
    html.push_str("</body></html>\n");
    let mut response = Html(html).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(crate::http::browser::html::CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

fn dav_response(out: &mut String, href: &str, meta: Option<&ObjectMeta>) {
    let modified = meta.and_then(|m| m.last_modified).unwrap_or(UNIX_EPOCH);
    let _ = write!(
        out,
        "<response><href>{}</href><propstat><prop><getlastmodified>{}</getlastmodified>",
        escape_xml(href),
        httpdate::fmt_http_date(modified)
    );
    match meta {
        Some(m) => {
            let _ = write!(
                out,
                "<getcontentlength>{}</getcontentlength><getetag>{}</getetag><resourcetype/>",
                m.size,
                escape_xml(&m.etag)
            );
        }
        None => out.push_str("<resourcetype><collection/></resourcetype>"),
    }
    out.push_str("</prop><status>HTTP/1.1 200 OK</status></propstat></response>\n");
}

/// Where PROPFIND hrefs are rooted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HrefRoot {
    /// Standard WebDAV: hrefs are the resources' paths on this server
    /// (`/zarr/{mount}/{key}`).
    Server,
    /// For `object_store`'s HTTP store (and obstore, which wraps it): it takes
    /// each href's path as the object's key relative to the *server* root,
    /// ignoring the path of the base URL it was given. Rooting hrefs at the
    /// mount (`/{key}`) makes its keys come out relative to a base URL of
    /// `http://host/zarr/{mount}`, which is how clients are told to use it.
    Mount,
}

impl HrefRoot {
    /// `Mount` for `object_store`'s HTTP client (its `User-Agent` is
    /// `object_store/<version>`), `Server` for everyone else.
    #[must_use]
    pub fn for_user_agent(user_agent: Option<&str>) -> Self {
        if user_agent.is_some_and(|ua| ua.starts_with("object_store/")) {
            Self::Mount
        } else {
            Self::Server
        }
    }
}

pub(crate) fn multistatus(mount: &str, target: &DavTarget, root: HrefRoot) -> Response {
    let base = match root {
        HrefRoot::Server => format!("/zarr/{}/", encode_path(mount)),
        HrefRoot::Mount => "/".to_string(),
    };
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<multistatus xmlns=\"DAV:\">\n");
    match target {
        DavTarget::Object { key, meta } => {
            dav_response(&mut xml, &format!("{base}{}", encode_path(key.as_str())), Some(meta))
        }
        DavTarget::Collection { prefix, members, .. } => {
            let dir = if prefix.is_root() { base } else { format!("{base}{}/", encode_path(prefix.as_str())) };
            dav_response(&mut xml, &dir, None);
            for (name, meta) in members {
                dav_response(&mut xml, &format!("{dir}{}", encode_path(name)), meta.as_ref());
            }
        }
    }
    xml.push_str("</multistatus>\n");
    let mut resp = (StatusCode::MULTI_STATUS, xml).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/xml; charset=utf-8"));
    resp
}
