//! The dataset browser: HTML pages rendered by the server, for people.
//!
//! | route | page |
//! |---|---|
//! | `GET /` | the mounts the caller may read, with the caller's scope on each |
//! | `GET /browse/{mount}/` and `/browse/{mount}/{*path}` | the place: an array, a group or a plain directory |
//!
//! - **Array page**: shape, data type, chunk shape (shard and inner chunk
//!   shapes when sharded), element order, codecs, fill value, dimension
//!   names, attributes, a preview (`/api/v1/preview`), stored chunks and
//!   bytes on request (`?stats=true`), and snippets to copy: zarr-python,
//!   TensorStore, xarray, curl of a slice, a neuroglancer link with a
//!   `zarr2://`/`zarr3://` source.
//! - **Group page**: consolidated metadata noted, OME-Zarr multiscales
//!   (0.4 `multiscales`, 0.5 `ome.multiscales`) as tables of levels and
//!   axes with the group's preview (read from the coarsest level that
//!   gives it), the children (kind, shape, data type), attributes.
//! - **Directory page** (a mount's root that is no group, a plain folder):
//!   its directories and files.
//!
//! Entries come a page at a time (`?page=N`, [`PER_PAGE`] each; see
//! [`crate::service::browse`]). Pages are plain HTML with an inline style
//! sheet compiled into the binary; they load nothing from elsewhere and run
//! no script (a Content-Security-Policy says so). Every value from a
//! stored document or a key is escaped ([`html::esc`]). `/` lists only the
//! mounts the caller may read; a place in a mount needs `read` on it (401
//! or 403 as every other route).

pub mod html;

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::Deserialize;
use serde_json::Value;
use utoipa::IntoParams;

use crate::config::Scope;
use crate::http::error::{ApiResult, ErrorBody};
use crate::http::extract::{ApiQuery, NodeTarget};
use crate::http::guard::Access;
use crate::service::browse::{self, EntryKind, Page};
use crate::service::node::{ArrayNode, GroupNode, Node};
use crate::service::wire::zarr_name;
use crate::service::{cpu, App, NodeRef};
use html::{bytes_text, esc, path_url, seg, shape_text};

/// Entries a page shows.
pub const PER_PAGE: usize = 100;

/// Query parameters of a browser page.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct BrowseQuery {
    /// Zero-based page of the entries (100 a page).
    #[param(example = 0)]
    pub page: Option<usize>,
    /// Arrays: count the stored chunks and bytes (one listing of the array).
    pub stats: Option<bool>,
}

fn html_response(body: String) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(html::CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    (headers, body).into_response()
}

/// The server's own base URL as the client addressed it (`Host`; https
/// when zarrd serves TLS), for the snippets.
fn base_url(app: &App, headers: &HeaderMap) -> String {
    // The Host header is the client's to choose: only a plain host[:port]
    // goes into the page (it ends up inside snippets people run).
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty() && h.len() <= 255 && h.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
        .unwrap_or("127.0.0.1");
    let scheme = if app.config().tls.is_some() { "https" } else { "http" };
    format!("{scheme}://{host}")
}

/// The mounts the caller may read.
#[utoipa::path(
    get,
    path = "/",
    tag = "browser",
    responses((status = 200, description = "The browser's front page: the mounts the caller may read (HTML)", content_type = "text/html", body = String))
)]
pub async fn index(State(app): State<Arc<App>>, access: Option<Extension<Access>>) -> Response {
    let scope_of = |name: &str| {
        let a = access.as_ref()?;
        [Scope::Admin, Scope::Write, Scope::Read].into_iter().find(|s| a.0.may(&app, name, *s))
    };
    let mut rows = String::new();
    let mut shown = 0;
    for m in app.mounts() {
        let Some(scope) = scope_of(m.name()) else { continue };
        shown += 1;
        let scope = match scope {
            Scope::Admin => "admin",
            Scope::Write => "write",
            Scope::Read => "read",
        };
        let _ = write!(
            rows,
            "<tr><td><a href=\"/browse/{}/\">{}</a></td><td>{}</td><td>{}</td></tr>",
            seg(m.name()),
            esc(m.name()),
            if m.read_only() { "read-only" } else { "read-write" },
            scope
        );
    }
    let body = if shown == 0 {
        "<h1>Mounts</h1><p class=\"note\">No mount is readable without a token. Scripts and clients send one as \
         <code>Authorization: Bearer …</code>.</p>"
            .to_string()
    } else {
        format!(
            "<h1>Mounts</h1><table id=\"mounts\"><thead><tr><th>mount</th><th>mount mode</th><th>your access</th></tr></thead>\
             <tbody>{rows}</tbody></table>"
        )
    };
    html_response(html::page("Mounts", &html::crumbs(None, ""), &body))
}

/// A place in a mount: an array, a group or a directory (HTML).
#[utoipa::path(
    get,
    path = "/browse/{mount}/{*path}",
    tag = "browser",
    params(NodeTarget, BrowseQuery),
    responses(
        (status = 200, description = "The page of the array, group or directory (HTML)", content_type = "text/html", body = String),
        (status = 400, description = "An invalid path or query: an HTML page naming the error, or JSON when the request's parameters are refused before the page is built (an unknown parameter)", content(
            (String = "text/html"),
            (ErrorBody = "application/json"),
        )),
        (status = 404, description = "No such mount, or nothing at the path: no node and no directory with something in it (an HTML page naming the error)", content_type = "text/html", body = String),
        (status = 422, description = "Stored metadata is invalid (an HTML page naming the error)", content_type = "text/html", body = String),
        (status = 503, description = "Storage unavailable (an HTML page naming the error)", content_type = "text/html", body = String),
    )
)]
pub async fn browse(
    State(app): State<Arc<App>>,
    target: NodeTarget,
    ApiQuery(q): ApiQuery<BrowseQuery>,
    headers: HeaderMap,
) -> Response {
    match browse_page(&app, &target, &q, &headers).await {
        Ok(page) => page,
        Err(e) => error_page(e),
    }
}

/// An error as a page (a person followed a link): the error's status,
/// code and message, and its headers.
fn error_page(e: crate::http::error::ApiError) -> Response {
    let (status, code) = e.code.parts();
    let body = format!(
        "<h1>{}</h1><p id=\"error\"><code>{}</code>: {}</p><p><a href=\"/\">All mounts</a></p>",
        esc(&status.to_string()),
        esc(code),
        esc(&e.message)
    );
    let mut page = html_response(html::page(&status.to_string(), &html::crumbs(None, ""), &body));
    *page.status_mut() = status;
    page.headers_mut().extend(e.headers.into_iter().map(|(k, v)| (Some(k), v)));
    page
}

async fn browse_page(app: &Arc<App>, target: &NodeTarget, q: &BrowseQuery, headers: &HeaderMap) -> ApiResult<Response> {
    let at = app.node(&target.mount, &target.path)?;
    let base = base_url(app, headers);
    let path = target.path.as_str().to_string();
    let crumbs = html::crumbs(Some(&target.mount), &path);
    let title = if path.is_empty() { target.mount.clone() } else { format!("{}/{}", target.mount, path) };
    let page_no = q.page.unwrap_or(0);
    let body = match browse::node_at(&at).await? {
        Some(Node::Array(a)) => array_page(&at, &a, &base, q.stats.unwrap_or(false)).await?,
        Some(Node::Group(g)) => {
            let page = browse::page(&at, page_no, PER_PAGE).await?;
            group_page(&target.mount, &g, &page)
        }
        None => {
            // Nothing there (no node, and no plain directory: an empty or
            // missing place, or one inside an array): 404, as the API.
            if !browse::directory(&at).await? {
                let missing =
                    crate::service::ServiceError::NodeNotFound { mount: target.mount.clone(), path: path.clone() };
                return Err(missing.into());
            }
            let page = browse::page(&at, page_no, PER_PAGE).await?;
            directory_page(&target.mount, &path, &page)
        }
    };
    Ok(html_response(html::page(&title, &crumbs, &body)))
}

fn name_of(mount: &str, path: &str) -> String {
    path.rsplit('/').next().filter(|s| !s.is_empty()).unwrap_or(mount).to_string()
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

fn row(out: &mut String, name: &str, value_html: &str) {
    let _ = write!(out, "<tr><th>{}</th><td>{value_html}</td></tr>", esc(name));
}

async fn array_page(at: &NodeRef<'_>, a: &Arc<ArrayNode>, base: &str, stats: bool) -> ApiResult<String> {
    let mount = at.mount_name();
    let path = a.path.as_str();
    let name = name_of(mount, path);
    let v = browse::format_number(a.format());
    let arr = a.clone();
    let facts = cpu::run(move || crate::service::node::describe::describe(&arr))
        .await
        .map_err(|e| crate::http::error::ApiError::from(crate::service::ServiceError::from(e)))?;
    let m = &a.metadata;
    let dtype = zarr_name(&a.desc.data_type);
    let mut t = String::new();
    row(&mut t, "shape", &format!("<code id=\"shape\">{}</code>", shape_text(&facts.shape)));
    row(&mut t, "data type", &format!("<code id=\"dtype\">{}</code>", esc(&dtype)));
    row(&mut t, "chunk shape", &format!("<code>{}</code>", shape_text(&facts.chunk_shape)));
    if let Some(s) = &facts.shard_shape {
        row(&mut t, "shard shape", &format!("<code>{}</code>", shape_text(s)));
    }
    if let Some(s) = &facts.inner_chunk_shape {
        row(&mut t, "inner chunk shape", &format!("<code>{}</code>", shape_text(s)));
    }
    if let Some(o) = facts.order {
        row(&mut t, "order", o);
    }
    row(
        &mut t,
        "fill value",
        &format!("<code>{}</code>", esc(&m.get("fill_value").map(Value::to_string).unwrap_or_default())),
    );
    if let Some(names) = &facts.dimension_names {
        let names: Vec<String> = names.iter().map(|n| n.clone().unwrap_or_else(|| "—".into())).collect();
        row(&mut t, "dimension names", &esc(&names.join(", ")));
    }
    let codecs = match a.format() {
        crate::zarr::array::ZarrFormat::V3 => m.get("codecs").cloned().unwrap_or(Value::Null),
        crate::zarr::array::ZarrFormat::V2 => serde_json::json!({
            "compressor": m.get("compressor").cloned().unwrap_or(Value::Null),
            "filters": m.get("filters").cloned().unwrap_or(Value::Null),
        }),
    };
    if stats {
        let s = crate::service::node::describe::stats(&Node::Array(a.clone())).await?;
        row(&mut t, "stored chunks", &format!("<span id=\"stored-chunks\">{}</span>", s.stored_chunks));
        row(&mut t, "stored bytes", &format!("{} ({})", s.stored_bytes, bytes_text(s.stored_bytes)));
    } else {
        row(&mut t, "stored chunks", "<a href=\"?stats=true\">count</a>");
    }
    let url_path = path_url(path);
    let preview = if facts.shape.len() >= 2 && crate::service::render::image::check_type(&a.desc.data_type).is_ok() {
        format!(
            "<figure><img class=\"preview\" id=\"preview\" src=\"/api/v1/preview/{}/{}\" alt=\"preview of {}\">\
             <figcaption class=\"note\">the last two dimensions at the middle of the others, strided to 256 pixels</figcaption></figure>",
            seg(mount),
            url_path,
            esc(&name)
        )
    } else {
        "<p class=\"note\">No preview (fewer than two dimensions, or no scalar values).</p>".to_string()
    };
    let attrs = pretty(&Value::Object(a.desc.attributes.clone()));
    Ok(format!(
        "<h1>{}<span class=\"badge\">array</span><span class=\"badge\">Zarr v{v}</span></h1>\
         <div class=\"grid\"><table id=\"facts\">{t}</table>{preview}</div>\
         <h2>Codecs</h2><pre id=\"codecs\">{}</pre>\
         <h2>Attributes</h2><pre id=\"attributes\">{}</pre>\
         <h2>Use it</h2>{}",
        esc(&name),
        esc(&pretty(&codecs)),
        esc(&attrs),
        snippets(base, mount, path, v, &facts.shape)
    ))
}

/// Ready-to-copy snippets for an array.
fn snippets(base: &str, mount: &str, path: &str, v: u8, shape: &[u64]) -> String {
    let store = format!("{base}/zarr/{}/{}", seg(mount), path_url(path));
    let driver = if v == 3 { "zarr3" } else { "zarr" };
    let (parent, leaf) = match path.rsplit_once('/') {
        Some((p, l)) => (format!("{base}/zarr/{}/{}", seg(mount), path_url(p)), l.to_string()),
        None => (format!("{base}/zarr/{}", seg(mount)), path.to_string()),
    };
    let sel: Vec<String> = shape.iter().map(|&d| format!("0:{}", d.min(10))).collect();
    let curl = format!("curl '{base}/api/v1/data/{}/{}?sel={}&format=json'", seg(mount), path_url(path), sel.join(","));
    let layer = serde_json::json!({
        "layers": [{"type": "image", "source": format!("zarr{}://{store}/", v), "name": leaf}],
    });
    let fragment =
        percent_encoding::utf8_percent_encode(&layer.to_string(), percent_encoding::NON_ALPHANUMERIC).to_string();
    let ng = format!("https://neuroglancer-demo.appspot.com/#!{fragment}");
    // Names are chosen by whoever wrote the data: every value is a Python
    // string literal (JSON's string syntax is Python's) before it is HTML.
    let py = |text: &str| serde_json::Value::from(text).to_string();
    format!(
        "<h3>zarr-python</h3><pre id=\"snippet-zarr\">import zarr\na = zarr.open_array({store_py}, mode=\"r\")</pre>\
         <h3>TensorStore</h3><pre id=\"snippet-tensorstore\">import tensorstore as ts\n\
         a = ts.open({{\"driver\": \"{driver}\", \"kvstore\": {kv_py}}}, read=True).result()</pre>\
         <h3>xarray</h3><pre id=\"snippet-xarray\">import xarray as xr\n\
         da = xr.open_zarr({parent}, consolidated=False)[{leaf}]</pre>\
         <h3>curl</h3><pre id=\"snippet-curl\">{}</pre>\
         <h3>neuroglancer</h3><p><a id=\"neuroglancer\" href=\"{}\">open in neuroglancer</a> \
         (source <code>{}</code>)</p>",
        esc(&curl),
        esc(&ng),
        esc(&format!("zarr{v}://{store}/")),
        store_py = esc(&py(&store)),
        kv_py = esc(&py(&format!("{store}/"))),
        parent = esc(&py(&parent)),
        leaf = esc(&py(&leaf)),
    )
}

/// OME-Zarr multiscales of a group's attributes (0.4 at the top, 0.5 under
/// `ome`), as HTML; empty when there are none.
fn multiscales(mount: &str, group_path: &str, attrs: &serde_json::Map<String, Value>) -> String {
    let (ms, version) = match attrs.get("ome").and_then(|o| o.get("multiscales")) {
        Some(ms) => (ms, attrs.get("ome").and_then(|o| o.get("version")).and_then(Value::as_str).unwrap_or("0.5")),
        None => match attrs.get("multiscales") {
            Some(ms) => (ms, "0.4"),
            None => return String::new(),
        },
    };
    let Some(list) = ms.as_array() else { return String::new() };
    let mut out = format!(
        "<section id=\"multiscales\"><h2>OME-Zarr multiscales <span class=\"badge\">{}</span></h2>",
        esc(version)
    );
    for m in list.iter().take(16) {
        let version = m.get("version").and_then(Value::as_str).unwrap_or(version);
        let name = m.get("name").and_then(Value::as_str).unwrap_or("");
        let _ = write!(out, "<h3>{} <span class=\"badge\">{}</span></h3>", esc(name), esc(version));
        let axes: Vec<String> = m
            .get("axes")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|ax| match ax {
                        Value::String(s) => s.clone(),
                        _ => {
                            let n = ax.get("name").and_then(Value::as_str).unwrap_or("?");
                            let t = ax.get("type").and_then(Value::as_str).unwrap_or("");
                            let u = ax.get("unit").and_then(Value::as_str).unwrap_or("");
                            format!("{n} ({t}{}{u})", if u.is_empty() { "" } else { ", " })
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let _ = write!(out, "<p>axes: <span class=\"axes\">{}</span></p>", esc(&axes.join(", ")));
        out.push_str(
            "<table class=\"levels\"><thead><tr><th>level</th><th>path</th><th>scale</th></tr></thead><tbody>",
        );
        for (i, d) in m.get("datasets").and_then(Value::as_array).into_iter().flatten().take(64).enumerate() {
            let p = d.get("path").and_then(Value::as_str).unwrap_or("");
            let scale = d
                .get("coordinateTransformations")
                .and_then(Value::as_array)
                .and_then(|ts| ts.iter().find(|t| t.get("type").and_then(Value::as_str) == Some("scale")))
                .and_then(|t| t.get("scale"))
                .map(Value::to_string)
                .unwrap_or_default();
            let href = format!(
                "/browse/{}/{}{}{}",
                seg(mount),
                path_url(group_path),
                if group_path.is_empty() { "" } else { "/" },
                path_url(p)
            );
            let _ = write!(
                out,
                "<tr><td class=\"num\">{i}</td><td><a href=\"{}\">{}</a></td><td><code>{}</code></td></tr>",
                esc(&href),
                esc(p),
                esc(&scale)
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</section>");
    out
}

fn entries_table(mount: &str, path: &str, page: &Page) -> String {
    let mut out = String::from(
        "<table id=\"entries\"><thead><tr><th>name</th><th>kind</th><th>shape</th><th>data type</th><th>size</th></tr></thead><tbody>",
    );
    let prefix = if path.is_empty() { String::new() } else { format!("{}/", path_url(path)) };
    for e in &page.entries {
        let href = format!("/browse/{}/{prefix}{}", seg(mount), seg(&e.name));
        let link = |suffix: &str| format!("<a href=\"{}{suffix}\">{}{suffix}</a>", esc(&href), esc(&e.name));
        let cells = match &e.kind {
            EntryKind::Array { shape, data_type, zarr_format } => format!(
                "<td>{}</td><td>array v{zarr_format}</td><td><code>{}</code></td><td><code>{}</code></td><td></td>",
                link(""),
                shape_text(shape),
                esc(data_type)
            ),
            EntryKind::Group { zarr_format } => {
                format!("<td>{}</td><td>group v{zarr_format}</td><td></td><td></td><td></td>", link("/"))
            }
            EntryKind::Directory => format!("<td>{}</td><td>directory</td><td></td><td></td><td></td>", link("/")),
            // Nothing to browse: named, not linked.
            EntryKind::EmptyDirectory => {
                format!("<td>{}/</td><td>empty directory</td><td></td><td></td><td></td>", esc(&e.name))
            }
            EntryKind::Unreadable(why) => format!(
                "<td>{}</td><td title=\"{}\">unreadable metadata</td><td></td><td></td><td></td>",
                esc(&e.name),
                esc(why)
            ),
            EntryKind::Object { size } => format!(
                "<td>{}</td><td>file</td><td></td><td></td><td class=\"num\">{}</td>",
                esc(&e.name),
                bytes_text(*size)
            ),
        };
        let _ = write!(out, "<tr>{cells}</tr>");
    }
    out.push_str("</tbody></table>");
    let pages = page.total.div_ceil(page.per_page).max(1);
    let first = page.page * page.per_page;
    let _ = write!(
        out,
        "<p class=\"pager\" id=\"pager\">{} of {} entries · page {} of {pages} ",
        if page.entries.is_empty() {
            "none".to_string()
        } else {
            format!("{}–{}", first + 1, first + page.entries.len())
        },
        page.total,
        page.page + 1
    );
    if page.page > 0 {
        let _ = write!(out, "<a rel=\"prev\" href=\"?page={}\">previous</a>", page.page - 1);
    }
    if page.page + 1 < pages {
        let _ = write!(out, "<a rel=\"next\" href=\"?page={}\">next</a>", page.page + 1);
    }
    out.push_str("</p>");
    if page.truncated {
        out.push_str(
            "<p class=\"note\" id=\"truncated\">There are more: the listing stops at \
             <code>limits.max_list_entries</code> names, in name order.</p>",
        );
    }
    out
}

fn group_page(mount: &str, g: &GroupNode, page: &Page) -> String {
    let path = g.path.as_str();
    let v = browse::format_number(g.format);
    let consolidated = g.metadata.get("consolidated_metadata").is_some_and(|c| !c.is_null()) || page.has_zmetadata;
    let note = if consolidated {
        "<p class=\"note\" id=\"consolidated\">This group has consolidated metadata.</p>"
    } else {
        ""
    };
    let ms = multiscales(mount, path, &g.attributes);
    // A multiscale group's thumbnail: its preview reads the coarsest level that gives 256 pixels.
    let preview = if ms.is_empty() {
        String::new()
    } else {
        format!(
            "<figure><img class=\"preview\" id=\"preview\" src=\"/api/v1/preview/{}/{}\" alt=\"preview of {}\">\
             <figcaption class=\"note\">from the coarsest level that still gives 256 pixels</figcaption></figure>",
            seg(mount),
            path_url(path),
            esc(&name_of(mount, path))
        )
    };
    format!(
        "<h1>{}<span class=\"badge\">group</span><span class=\"badge\">Zarr v{v}</span></h1>{note}{preview}{ms}\
         <h2>Children</h2>{}<h2>Attributes</h2><pre id=\"attributes\">{}</pre>",
        esc(&name_of(mount, path)),
        entries_table(mount, path, page),
        esc(&pretty(&Value::Object(g.attributes.clone())))
    )
}

fn directory_page(mount: &str, path: &str, page: &Page) -> String {
    format!(
        "<h1>{}<span class=\"badge\">directory</span></h1><p class=\"note\">Not a Zarr group: its contents.</p>{}",
        esc(&name_of(mount, path)),
        entries_table(mount, path, page)
    )
}
