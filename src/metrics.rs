//! Prometheus metrics: the instruments the layers record into, and the
//! text exposition format (version 0.0.4) that `/metrics` renders.
//!
//! Hand-rolled on atomics rather than a metrics crate, for three reasons:
//! every [`crate::service::App`] owns its instruments (tests run many
//! servers in one process; a global recorder would mix their counts); the
//! label sets are small and fixed (route templates from the access rules,
//! mount names from the configuration), so each series is a field or an
//! array slot found without hashing strings; and recording is a few relaxed
//! atomic adds on the request path.
//!
//! Cardinality is bounded by construction: HTTP series are keyed by route
//! *template* (`/zarr/{mount}/{*key}`), method and status code; storage
//! series by mount, operation and error kind.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histograms' buckets.
pub const LATENCY_BUCKETS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// A latency histogram with [`LATENCY_BUCKETS`].
#[derive(Debug, Default)]
pub struct Histogram {
    /// Non-cumulative counts per bucket; the last slot is `+Inf`.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let slot = LATENCY_BUCKETS.iter().position(|b| seconds <= *b).unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[slot].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Observations so far.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    fn render(&self, out: &mut Exposition, name: &str, labels: &[(&str, &str)]) {
        let mut cumulative = 0;
        let mut bound = String::new();
        for (i, bucket) in self.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            bound.clear();
            match LATENCY_BUCKETS.get(i) {
                Some(b) => {
                    let _ = write!(bound, "{b}");
                }
                None => bound.push_str("+Inf"),
            }
            let mut with_le = labels.to_vec();
            with_le.push(("le", &bound));
            out.sample(&format!("{name}_bucket"), &with_le, cumulative);
        }
        #[allow(clippy::cast_precision_loss)] // nanoseconds as seconds: precision loss past 2^53 ns (104 days) is fine
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        out.sample_f64(&format!("{name}_sum"), labels, sum);
        out.sample(&format!("{name}_count"), labels, cumulative);
    }
}

/// Builds the text exposition format.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// Starts a metric family.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    /// One sample with an integer value.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.series(name, labels);
        let _ = writeln!(self.text, " {value}");
    }

    /// One sample with a floating-point value.
    pub fn sample_f64(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.series(name, labels);
        let _ = writeln!(self.text, " {value}");
    }

    /// A histogram's samples (after its [`Exposition::family`] line).
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], histogram: &Histogram) {
        histogram.render(self, name, labels);
    }

    fn series(&mut self, name: &str, labels: &[(&str, &str)]) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                self.text.push_str(k);
                self.text.push_str("=\"");
                for c in v.chars() {
                    match c {
                        '\\' => self.text.push_str("\\\\"),
                        '"' => self.text.push_str("\\\""),
                        '\n' => self.text.push_str("\\n"),
                        c => self.text.push(c),
                    }
                }
                self.text.push('"');
            }
            self.text.push('}');
        }
    }

    /// The document.
    #[must_use]
    pub fn finish(self) -> String {
        self.text
    }
}

/// The storage operations that are measured (the [`crate::storage::Storage`] methods).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageOp {
    Read,
    Head,
    Put,
    Delete,
    /// Many deletes at once ([`Storage::delete_many`](crate::storage::Storage::delete_many)).
    DeleteMany,
    List,
    ListRecursive,
    IsPrefix,
    Probe,
}

impl StorageOp {
    /// Every operation, in slot order.
    pub const ALL: [Self; 9] = [
        Self::Read,
        Self::Head,
        Self::Put,
        Self::Delete,
        Self::DeleteMany,
        Self::List,
        Self::ListRecursive,
        Self::IsPrefix,
        Self::Probe,
    ];

    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Head => "head",
            Self::Put => "put",
            Self::Delete => "delete",
            Self::DeleteMany => "delete_many",
            Self::List => "list",
            Self::ListRecursive => "list_recursive",
            Self::IsPrefix => "is_prefix",
            Self::Probe => "probe",
        }
    }
}

/// The error kinds counted per storage operation: [`crate::storage::StorageError::kind`].
pub const STORAGE_ERROR_KINDS: [&str; 13] = [
    "not_found",
    "is_prefix",
    "already_exists",
    "precondition_failed",
    "not_modified",
    "range_not_satisfiable",
    "conflict",
    "invalid_key",
    "permission_denied",
    "not_supported",
    "unavailable",
    "timeout",
    "too_large",
];

/// One storage operation's figures.
#[derive(Debug, Default)]
pub struct OpMetrics {
    /// Latency of every call, failed or not.
    pub latency: Histogram,
    errors: [AtomicU64; STORAGE_ERROR_KINDS.len()],
}

impl OpMetrics {
    /// Counts an error of `kind` (one of [`STORAGE_ERROR_KINDS`]).
    pub fn error(&self, kind: &str) {
        if let Some(i) = STORAGE_ERROR_KINDS.iter().position(|k| *k == kind) {
            self.errors[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Errors of `kind` so far.
    #[must_use]
    pub fn errors(&self, kind: &str) -> u64 {
        STORAGE_ERROR_KINDS.iter().position(|k| *k == kind).map_or(0, |i| self.errors[i].load(Ordering::Relaxed))
    }
}

/// A mount's storage figures, one slot per [`StorageOp`].
#[derive(Debug, Default)]
pub struct StorageMetrics {
    ops: [OpMetrics; StorageOp::ALL.len()],
}

impl StorageMetrics {
    /// The figures of `op`.
    #[must_use]
    pub fn op(&self, op: StorageOp) -> &OpMetrics {
        &self.ops[op as usize]
    }

    /// Renders the storage families for every mount.
    pub fn render(out: &mut Exposition, mounts: &[(&str, &Self)]) {
        out.family(
            "zarrd_storage_operation_duration_seconds",
            "histogram",
            "Latency of storage operations (every call, failed or not), by mount and operation.",
        );
        for &(mount, m) in mounts {
            for op in StorageOp::ALL {
                let figures = m.op(op);
                if figures.latency.count() > 0 {
                    let labels = [("mount", mount), ("op", op.as_str())];
                    out.histogram("zarrd_storage_operation_duration_seconds", &labels, &figures.latency);
                }
            }
        }
        out.family(
            "zarrd_storage_errors_total",
            "counter",
            "Storage operations that ended in an error, by mount, operation and kind. not_found, \
             not_modified, precondition_failed, already_exists and range_not_satisfiable are answers \
             (a missing chunk reads as the fill value); unavailable and permission_denied are faults.",
        );
        for &(mount, m) in mounts {
            for op in StorageOp::ALL {
                let figures = m.op(op);
                for (i, kind) in STORAGE_ERROR_KINDS.iter().enumerate() {
                    let n = figures.errors[i].load(Ordering::Relaxed);
                    if n > 0 {
                        out.sample(
                            "zarrd_storage_errors_total",
                            &[("mount", mount), ("op", op.as_str()), ("kind", kind)],
                            n,
                        );
                    }
                }
            }
        }
    }
}

/// The methods the HTTP series distinguish; anything else is `OTHER`.
pub const HTTP_METHODS: [&str; 9] = ["GET", "HEAD", "PUT", "POST", "PATCH", "DELETE", "OPTIONS", "PROPFIND", "OTHER"];

/// Status codes 100 to 599, one counter each.
const STATUSES: usize = 500;

/// The figures of one route template and method.
#[derive(Debug)]
pub struct RouteMetrics {
    /// Time until the response head (streamed bodies continue after it).
    pub latency: Histogram,
    /// Request body bytes read.
    pub bytes_in: AtomicU64,
    /// Response body bytes sent.
    pub bytes_out: AtomicU64,
    statuses: Box<[AtomicU64]>,
}

impl Default for RouteMetrics {
    fn default() -> Self {
        Self {
            latency: Histogram::default(),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            statuses: (0..STATUSES).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl RouteMetrics {
    /// Counts one answer with `status`.
    pub fn answered(&self, status: u16, latency: Duration) {
        if let Some(slot) = usize::from(status).checked_sub(100).and_then(|i| self.statuses.get(i)) {
            slot.fetch_add(1, Ordering::Relaxed);
        }
        self.latency.observe(latency);
    }
}

/// HTTP figures for a fixed list of route templates (plus `unmatched`,
/// for requests no route took), each with a slot per [`HTTP_METHODS`].
#[derive(Debug)]
pub struct HttpMetrics {
    templates: Vec<&'static str>,
    routes: Vec<RouteMetrics>,
}

/// The route label of requests that matched no route.
pub const UNMATCHED: &str = "unmatched";

impl HttpMetrics {
    /// Slots for `templates` (and [`UNMATCHED`]). Storage for the status
    /// counters is allocated here, once.
    #[must_use]
    pub fn new(templates: impl IntoIterator<Item = &'static str>) -> Self {
        let mut templates: Vec<&'static str> = templates.into_iter().collect();
        templates.push(UNMATCHED);
        let routes = (0..templates.len() * HTTP_METHODS.len()).map(|_| RouteMetrics::default()).collect();
        Self { templates, routes }
    }

    /// The slot of a route template (unknown ones count as [`UNMATCHED`])
    /// and method, for [`HttpMetrics::at`].
    #[must_use]
    pub fn slot(&self, template: Option<&str>, method: &str) -> usize {
        self.slot_at(template.and_then(|t| self.templates.iter().position(|known| *known == t)), method)
    }

    /// The slot of the template at `index` in the list given to
    /// [`HttpMetrics::new`] (`None` or out of range: [`UNMATCHED`]) and
    /// method: what the request path uses, with the index its router found.
    #[must_use]
    pub fn slot_at(&self, index: Option<usize>, method: &str) -> usize {
        let unmatched = self.templates.len() - 1;
        let t = index.filter(|i| *i < unmatched).unwrap_or(unmatched);
        let m = HTTP_METHODS.iter().position(|known| *known == method).unwrap_or(HTTP_METHODS.len() - 1);
        t * HTTP_METHODS.len() + m
    }

    /// The figures in `slot`.
    #[must_use]
    pub fn at(&self, slot: usize) -> &RouteMetrics {
        &self.routes[slot]
    }

    /// The figures of a route template and method.
    #[must_use]
    pub fn route(&self, template: Option<&str>, method: &str) -> &RouteMetrics {
        self.at(self.slot(template, method))
    }

    fn each(&self) -> impl Iterator<Item = (&'static str, &'static str, &RouteMetrics)> + '_ {
        self.routes
            .iter()
            .enumerate()
            .filter(|(_, r)| r.latency.count() > 0)
            .map(|(i, r)| (self.templates[i / HTTP_METHODS.len()], HTTP_METHODS[i % HTTP_METHODS.len()], r))
    }

    /// Renders the HTTP families.
    pub fn render(&self, out: &mut Exposition) {
        out.family(
            "zarrd_http_requests_total",
            "counter",
            "Requests answered, by route template, method and status code.",
        );
        let mut code = String::new();
        for (route, method, r) in self.each() {
            for (i, n) in r.statuses.iter().enumerate() {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    code.clear();
                    let _ = write!(code, "{}", i + 100);
                    out.sample(
                        "zarrd_http_requests_total",
                        &[("route", route), ("method", method), ("status", &code)],
                        n,
                    );
                }
            }
        }
        out.family(
            "zarrd_http_request_duration_seconds",
            "histogram",
            "Time from the request until its response head, by route template and method.",
        );
        for (route, method, r) in self.each() {
            out.histogram("zarrd_http_request_duration_seconds", &[("route", route), ("method", method)], &r.latency);
        }
        for (name, help, pick) in [
            (
                "zarrd_http_request_body_bytes_total",
                "Request body bytes read, by route template and method.",
                (|r: &RouteMetrics| r.bytes_in.load(Ordering::Relaxed)) as fn(&RouteMetrics) -> u64,
            ),
            (
                "zarrd_http_response_body_bytes_total",
                "Response body bytes sent, by route template and method.",
                |r: &RouteMetrics| r.bytes_out.load(Ordering::Relaxed),
            ),
        ] {
            out.family(name, "counter", help);
            for (route, method, r) in self.each() {
                out.sample(name, &[("route", route), ("method", method)], pick(r));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_with_sum_and_count() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        let mut out = Exposition::default();
        out.histogram("x", &[("a", "b")], &h);
        let text = out.finish();
        assert!(text.contains("x_bucket{a=\"b\",le=\"0.0001\"} 1\n"), "{text}");
        assert!(text.contains("x_bucket{a=\"b\",le=\"0.005\"} 2\n"), "{text}");
        assert!(text.contains("x_bucket{a=\"b\",le=\"10\"} 2\n"), "{text}");
        assert!(text.contains("x_bucket{a=\"b\",le=\"+Inf\"} 3\n"), "{text}");
        assert!(text.contains("x_count{a=\"b\"} 3\n"), "{text}");
        assert!(text.contains("x_sum{a=\"b\"} 60.00305\n"), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        let mut out = Exposition::default();
        out.sample("m", &[("k", "a\"b\\c\nd")], 1);
        assert_eq!(out.finish(), "m{k=\"a\\\"b\\\\c\\nd\"} 1\n");
    }

    #[test]
    fn unknown_routes_and_methods_share_bounded_slots() {
        let m = HttpMetrics::new(["/a/{x}"]);
        m.route(Some("/a/{x}"), "GET").answered(200, Duration::from_millis(1));
        m.route(Some("/not/a/template"), "BREW").answered(404, Duration::from_millis(1));
        m.route(None, "GET").answered(404, Duration::from_millis(1));
        let mut out = Exposition::default();
        m.render(&mut out);
        let text = out.finish();
        assert!(text.contains("zarrd_http_requests_total{route=\"/a/{x}\",method=\"GET\",status=\"200\"} 1\n"));
        assert!(text.contains("zarrd_http_requests_total{route=\"unmatched\",method=\"OTHER\",status=\"404\"} 1\n"));
        assert!(text.contains("zarrd_http_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1\n"));
        // Out-of-range statuses are not counted, but their latency is.
        m.route(None, "GET").answered(999, Duration::from_millis(1));
        assert_eq!(m.route(None, "GET").latency.count(), 2);
    }

    #[test]
    fn storage_errors_by_kind() {
        let s = StorageMetrics::default();
        s.op(StorageOp::Read).error("not_found");
        s.op(StorageOp::Read).error("not_found");
        s.op(StorageOp::Put).error("unavailable");
        s.op(StorageOp::Put).error("no_such_kind");
        s.op(StorageOp::Read).latency.observe(Duration::from_millis(2));
        let mut out = Exposition::default();
        StorageMetrics::render(&mut out, &[("data", &s)]);
        let text = out.finish();
        assert!(text.contains("zarrd_storage_errors_total{mount=\"data\",op=\"read\",kind=\"not_found\"} 2\n"));
        assert!(text.contains("zarrd_storage_errors_total{mount=\"data\",op=\"put\",kind=\"unavailable\"} 1\n"));
        assert!(text.contains("zarrd_storage_operation_duration_seconds_count{mount=\"data\",op=\"read\"} 1\n"));
        assert!(!text.contains("op=\"put\",le"), "no latency recorded for put: {text}");
    }
}
