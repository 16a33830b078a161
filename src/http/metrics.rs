//! `/metrics` (Prometheus text format) and the recording of HTTP figures.
//!
//! HTTP series are recorded by [`super::front`] (with the request log) into
//! [`HttpMetrics`] keyed by route template; storage series by each mount's
//! measuring wrapper ([`crate::storage::measured`]); cache figures are read
//! from the caches when scraped.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use bytes::Bytes;
use http_body::{Frame, SizeHint};

use super::guard::Access;
use crate::config::Scope;
use crate::metrics::{Exposition, HttpMetrics, StorageMetrics};
use crate::service::App;

/// A body that adds the length of every data frame to a counter.
pub struct Counted {
    inner: Body,
    counter: Arc<dyn Fn(u64) + Send + Sync>,
}

impl Counted {
    /// Wraps `inner`; `counter` is called with each frame's length.
    pub fn body(inner: Body, counter: Arc<dyn Fn(u64) + Send + Sync>) -> Body {
        Body::new(Self { inner, counter })
    }
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                (self.counter)(data.len() as u64);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Prometheus metrics: requests by route template, method and status;
/// latency histograms; body bytes in and out; storage operation latency and
/// errors by mount; cache figures.
///
/// Series labelled by mount name only the mounts the caller may read (all of
/// them for an anonymous caller on a loopback server without tokens): a
/// scraper of a server with tokens presents one (`Authorization: Bearer`)
/// with read on the mounts it should see. Everything else needs no token.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses(
    (status = 200, description = "Prometheus text exposition format 0.0.4", content_type = "text/plain"),
))]
pub async fn metrics(
    State(app): State<Arc<App>>,
    Extension(http): Extension<Arc<HttpMetrics>>,
    access: Option<Extension<Access>>,
) -> Response {
    // The guard puts the caller's access here (`Need::Observer`); without it, no mount is named.
    let readable = |name: &str| access.as_ref().is_some_and(|Extension(a)| a.may(&app, name, Scope::Read));
    let mut out = Exposition::default();
    http.render(&mut out);
    let mounts: Vec<_> = app.mounts().filter(|m| readable(m.name())).map(|m| (m.name(), m.metrics())).collect();
    StorageMetrics::render(&mut out, &mounts);
    let chunks = app.chunk_cache().stats();
    for (name, kind, help, value) in [
        (
            "zarrd_chunk_cache_hits_total",
            "counter",
            "Decoded chunk cache lookups that found a usable entry.",
            chunks.hits,
        ),
        ("zarrd_chunk_cache_misses_total", "counter", "Decoded chunk cache lookups that did not.", chunks.misses),
        (
            "zarrd_chunk_cache_invalidations_total",
            "counter",
            "Decoded chunk cache entries dropped by writes through zarrd.",
            chunks.invalidations,
        ),
        ("zarrd_chunk_cache_entries", "gauge", "Decoded chunks (and shard indexes) cached.", chunks.entries),
        ("zarrd_chunk_cache_bytes", "gauge", "Bytes held by the decoded chunk cache.", chunks.bytes),
        (
            "zarrd_chunk_cache_capacity_bytes",
            "gauge",
            "The decoded chunk cache's budget (cache.chunk_bytes).",
            chunks.capacity,
        ),
        ("zarrd_metadata_cache_entries", "gauge", "Parsed metadata documents cached.", app.metadata_cache().len()),
    ] {
        out.family(name, kind, help);
        out.sample(name, &[], value);
    }
    out.family("zarrd_object_cache_bytes", "gauge", "Bytes held by a local mount's object cache, by mount.");
    for m in app.mounts().filter(|m| readable(m.name())) {
        if let Some(usage) = m.storage().cache_usage() {
            out.sample("zarrd_object_cache_bytes", &[("mount", m.name())], usage.bytes);
        }
    }
    out.family("zarrd_object_cache_entries", "gauge", "Objects held by a local mount's object cache, by mount.");
    for m in app.mounts().filter(|m| readable(m.name())) {
        if let Some(usage) = m.storage().cache_usage() {
            out.sample("zarrd_object_cache_entries", &[("mount", m.name())], usage.entries);
        }
    }
    out.family("zarrd_jobs", "gauge", "Background jobs (pyramid builds) since start, by state.");
    for (state, n) in app.jobs().counts() {
        let state = serde_json::to_value(state).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
        out.sample("zarrd_jobs", &[("state", &state)], n);
    }
    out.family(
        "zarrd_job_chunks_done",
        "gauge",
        "Chunks done (computed, copied or found done) by the jobs since start.",
    );
    out.sample("zarrd_job_chunks_done", &[], app.jobs().chunks_done());
    ([(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"))], out.finish())
        .into_response()
}
