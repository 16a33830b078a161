//! CORS (the Fetch standard's "CORS protocol"), on every response.
//!
//! Written here rather than taken from `tower_http::cors` because it runs on
//! every request: every header value is built once, at start, and a request
//! costs one header lookup (list mode only) and two or three inserts, with
//! no allocation. The behaviour is the usual one:
//!
//! - Any `OPTIONS` request is a preflight and is answered here, before
//!   authentication (a browser sends no credentials on one): 200, an empty
//!   body, the allowed methods and request headers, `Max-Age`. The request
//!   headers allowed are the usual ones ([`ALLOWED_HEADERS`]) plus every
//!   header the preflight asks for (`Access-Control-Request-Headers`), when
//!   its origin is allowed and the list is well formed (header names, at
//!   most [`MAX_REQUESTED_HEADERS`] bytes): a script may send
//!   `Cache-Control`, `If-Unmodified-Since` or its own tracing header.
//!   Headers never widen what an origin may do: writes are decided by the
//!   methods a preflight allows (below) and by the guard. Preflights are
//!   counted in the HTTP metrics (method `OPTIONS`) and logged as requests
//!   (`zarrd::request`, with the origin and what was asked).
//! - Every response exposes to scripts the headers they read: ranges and
//!   validators, the request id, the `X-Zarr-*` headers, and
//!   `WWW-Authenticate` (why a 401), `Retry-After` (when a 503 or 429 may
//!   be retried) and `Allow` (a 405's methods).
//! - Every other response, errors included, gets
//!   `Access-Control-Allow-Origin` and `Access-Control-Expose-Headers`.
//! - With `cors.allowed_origins = ["*"]` (the default) the origin is `*` on
//!   every response, whether or not the request named one (a shared cache
//!   may then serve the same response to browsers and to other clients).
//!   With a list, a listed `Origin` is echoed, an unlisted one gets no
//!   `Access-Control-Allow-Origin`, and every response says
//!   `Vary: Origin`.
//! - No credentials mode (`Access-Control-Allow-Credentials`): tokens are
//!   sent as `Authorization` headers, which preflights allow.
//!
//! Cross-site writes (see the README's "Cross-site requests"): reads are
//! open to every origin `cors.allowed_origins` allows (`*` by default), but
//! a preflight allows the methods that change data (those needing `write`
//! or `admin` in [`super::auth::RULES`]) only to an origin *listed by name*
//! in `cors.allowed_origins` (`"*"` does not count) or to the server's own
//! origin ([`same_origin`]). Everything else gets the route's read methods
//! only, so the browser never sends the write. [`super::guard`] refuses the
//! write itself (403) when it comes anyway, from a client that does not
//! preflight (a "simple" `POST`, a form).

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;

use super::REQUEST_ID;

/// Methods a preflight allows to a listed (or the server's own) origin.
const METHODS: &str = "GET,HEAD,PUT,POST,PATCH,DELETE,OPTIONS,PROPFIND,MKCOL";

/// Request headers a preflight allows (lower case, as browsers send them in
/// `Access-Control-Request-Headers`).
const ALLOWED_HEADERS: &str = "range,if-none-match,if-match,if-modified-since,authorization,content-type,depth";

/// The longest `Access-Control-Request-Headers` whose headers a preflight
/// allows (a longer one gets the usual list only).
pub const MAX_REQUESTED_HEADERS: usize = 1024;

/// How long a browser may keep a preflight's answer.
const MAX_AGE_SECONDS: &str = "3600";

/// The allowed origins and every header value, built once.
#[derive(Debug, Clone)]
pub struct Cors {
    origins: Origins,
    /// The origins listed by name (not `*`): the only ones a preflight
    /// allows writes to.
    listed: Vec<HeaderValue>,
    expose: HeaderValue,
}

#[derive(Debug, Clone)]
enum Origins {
    Any,
    List(Vec<HeaderValue>),
}

impl Cors {
    /// From `cors.allowed_origins` (validated by the configuration: `"*"`
    /// anywhere means any origin).
    #[must_use]
    pub fn new(allowed_origins: &[String]) -> Self {
        let listed: Vec<HeaderValue> =
            allowed_origins.iter().filter(|o| *o != "*").filter_map(|o| HeaderValue::from_str(o).ok()).collect();
        let origins =
            if allowed_origins.iter().any(|o| o == "*") { Origins::Any } else { Origins::List(listed.clone()) };
        let exposed: [&HeaderName; 14] = [
            &header::CONTENT_RANGE,
            &header::CONTENT_LENGTH,
            &header::ETAG,
            &header::ACCEPT_RANGES,
            &header::LAST_MODIFIED,
            &REQUEST_ID,
            &super::api::data::X_ZARR_SHAPE,
            &super::api::data::X_ZARR_DTYPE,
            &super::api::data::X_ZARR_ORDER,
            &super::api::image::X_ZARR_SELECTION,
            &super::api::image::X_ZARR_LEVEL,
            &header::WWW_AUTHENTICATE,
            &header::RETRY_AFTER,
            &header::ALLOW,
        ];
        let expose = exposed.iter().map(|h| h.as_str()).collect::<Vec<_>>().join(",");
        Self { origins, listed, expose: HeaderValue::from_str(&expose).expect("header names are valid header values") }
    }

    /// True when a page of `origin` may change data: the origin is listed
    /// by name in `cors.allowed_origins`, or it is the server's own
    /// ([`same_origin`] with the request's `Host`).
    #[must_use]
    pub fn may_write(&self, origin: &HeaderValue, request_headers: &HeaderMap) -> bool {
        self.listed.iter().any(|o| o.as_bytes().eq_ignore_ascii_case(origin.as_bytes()))
            || request_headers.get(header::HOST).is_some_and(|host| same_origin(origin, host))
    }

    /// True for a request this layer answers itself (a preflight).
    #[must_use]
    pub fn is_preflight(method: &Method) -> bool {
        method == Method::OPTIONS
    }

    /// The answer to a preflight whose request had `request_headers`;
    /// `reads` are the methods of the route that change nothing (what an
    /// origin that may not write is allowed).
    #[must_use]
    pub fn preflight(&self, request_headers: &HeaderMap, reads: &HeaderValue) -> Response {
        let mut response = Response::new(axum::body::Body::empty());
        *response.status_mut() = StatusCode::OK;
        let writes = request_headers.get(header::ORIGIN).is_some_and(|o| self.may_write(o, request_headers));
        let h = response.headers_mut();
        let methods = if writes { HeaderValue::from_static(METHODS) } else { reads.clone() };
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, methods);
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, self.allowed_headers(request_headers));
        h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static(MAX_AGE_SECONDS));
        self.allow_origin(request_headers.get(header::ORIGIN), h);
        response
    }

    /// The request headers a preflight allows: [`ALLOWED_HEADERS`], plus
    /// those it asks for when its origin is allowed and the list is header
    /// names (lower-cased) in at most [`MAX_REQUESTED_HEADERS`] bytes.
    fn allowed_headers(&self, request_headers: &HeaderMap) -> HeaderValue {
        let usual = HeaderValue::from_static(ALLOWED_HEADERS);
        let origin_allowed = match &self.origins {
            Origins::Any => true,
            Origins::List(list) => request_headers.get(header::ORIGIN).is_some_and(|o| list.contains(o)),
        };
        let Some(asked) = request_headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS) else { return usual };
        if !origin_allowed || asked.len() > MAX_REQUESTED_HEADERS {
            return usual;
        }
        let Ok(asked) = asked.to_str() else { return usual };
        let mut names = Vec::new();
        for name in asked.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match HeaderName::from_bytes(name.as_bytes()) {
                Ok(n) => names.push(n.as_str().to_string()),
                Err(_) => return usual,
            }
        }
        if names.is_empty() {
            return usual;
        }
        HeaderValue::from_str(&format!("{ALLOWED_HEADERS},{}", names.join(","))).unwrap_or(usual)
    }

    /// Adds the headers of a non-preflight response; `origin` is the
    /// request's `Origin` header.
    pub fn decorate(&self, origin: Option<&HeaderValue>, response: &mut Response) {
        let h = response.headers_mut();
        self.allow_origin(origin, h);
        h.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, self.expose.clone());
    }

    fn allow_origin(&self, origin: Option<&HeaderValue>, h: &mut HeaderMap) {
        match &self.origins {
            Origins::Any => {
                h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
            }
            Origins::List(list) => {
                // Appended: a handler's own `Vary` values stay.
                h.append(header::VARY, HeaderValue::from_static("origin"));
                if let Some(o) = origin.filter(|o| list.contains(o)) {
                    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o.clone());
                }
            }
        }
    }

    /// The request's `Origin`, when this configuration needs it later (list
    /// mode); `None` costs nothing to keep.
    #[must_use]
    pub fn origin_of(&self, request_headers: &HeaderMap) -> Option<HeaderValue> {
        match self.origins {
            Origins::Any => None,
            Origins::List(_) => request_headers.get(header::ORIGIN).cloned(),
        }
    }
}

/// True when `origin` (`scheme://host[:port]`) is the origin of a server
/// reached as `host` (the `Host` header) *and* that host is a loopback
/// name or address. The second condition defeats DNS rebinding: a page of
/// `http://evil.example:8080` whose name its owner pointed at 127.0.0.1
/// sends `Host: evil.example:8080`, equal to its origin, but is not the
/// server's own. Without tokens only loopback callers may write, so a
/// loopback host is the only own origin that matters.
#[must_use]
pub fn same_origin(origin: &HeaderValue, host: &HeaderValue) -> bool {
    let (Ok(origin), Ok(host)) = (origin.to_str(), host.to_str()) else {
        return false;
    };
    let origin = origin.to_ascii_lowercase();
    let host = host.to_ascii_lowercase();
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    let default_port = match scheme {
        "http" => ":80",
        "https" => ":443",
        _ => return false,
    };
    let strip = |a: &str| a.strip_suffix(default_port).map(str::to_string).unwrap_or_else(|| a.to_string());
    strip(authority) == strip(&host) && is_loopback_host(&host)
}

/// `localhost` (or a name under it), or a loopback address, with or without
/// a port.
fn is_loopback_host(authority: &str) -> bool {
    let name = if let Some(rest) = authority.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        authority.rsplit_once(':').map_or(authority, |(name, _)| name)
    };
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(origin: Option<&'static str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(o) = origin {
            h.insert(header::ORIGIN, HeaderValue::from_static(o));
        }
        h
    }

    #[test]
    fn any_origin_is_a_star_on_every_response() {
        let cors = Cors::new(&["*".to_string()]);
        for origin in [None, Some("http://a.example")] {
            let mut r = Response::new(axum::body::Body::empty());
            cors.decorate(cors.origin_of(&headers(origin)).as_ref(), &mut r);
            assert_eq!(r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
            assert!(r.headers()[header::ACCESS_CONTROL_EXPOSE_HEADERS].to_str().unwrap().contains("etag"));
            assert!(!r.headers().contains_key(header::VARY));
        }
    }

    #[test]
    fn a_list_echoes_listed_origins_only_and_varies_on_origin() {
        let cors = Cors::new(&["http://a.example".to_string(), "http://b.example".to_string()]);
        let mut vary_kept = Response::new(axum::body::Body::empty());
        vary_kept.headers_mut().insert(header::VARY, HeaderValue::from_static("accept"));
        let h = headers(Some("http://b.example"));
        cors.decorate(cors.origin_of(&h).as_ref(), &mut vary_kept);
        assert_eq!(vary_kept.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "http://b.example");
        let vary: Vec<_> = vary_kept.headers().get_all(header::VARY).iter().collect();
        assert_eq!(vary, ["accept", "origin"]);

        for origin in [None, Some("http://c.example")] {
            let mut r = Response::new(axum::body::Body::empty());
            cors.decorate(cors.origin_of(&headers(origin)).as_ref(), &mut r);
            assert!(!r.headers().contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN), "{origin:?}");
            assert_eq!(r.headers()[header::VARY], "origin");
        }
    }

    #[test]
    fn preflights_allow_the_methods_and_headers_clients_send() {
        let cors = Cors::new(&["http://a.example".to_string()]);
        let r = cors.preflight(&headers(Some("http://a.example")), &HeaderValue::from_static("GET"));
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "http://a.example");
        let methods = r.headers()[header::ACCESS_CONTROL_ALLOW_METHODS].to_str().unwrap();
        for m in ["GET", "HEAD", "PUT", "DELETE", "PROPFIND"] {
            assert!(methods.split(',').any(|x| x == m), "{m} in {methods}");
        }
        let allowed = r.headers()[header::ACCESS_CONTROL_ALLOW_HEADERS].to_str().unwrap();
        for h in ["range", "if-none-match", "if-match", "authorization", "content-type"] {
            assert!(allowed.split(',').any(|x| x == h), "{h} in {allowed}");
        }
        assert_eq!(r.headers()[header::ACCESS_CONTROL_MAX_AGE], "3600");
    }

    #[test]
    fn preflights_allow_the_headers_they_ask_for_from_allowed_origins() {
        let reads = HeaderValue::from_static("GET,HEAD,OPTIONS");
        let asking = |cors: &Cors, origin: &'static str, asked: &str| {
            let mut h = headers(Some(origin));
            h.insert(header::ACCESS_CONTROL_REQUEST_HEADERS, HeaderValue::from_str(asked).unwrap());
            let r = cors.preflight(&h, &reads);
            r.headers()[header::ACCESS_CONTROL_ALLOW_HEADERS].to_str().unwrap().to_string()
        };
        let any = Cors::new(&["*".to_string()]);
        let allowed = asking(&any, "http://x.example", "Cache-Control, if-unmodified-since,x-trace-id");
        for h in ["cache-control", "if-unmodified-since", "x-trace-id", "range", "authorization"] {
            assert!(allowed.split(',').any(|x| x == h), "{h} in {allowed}");
        }
        // Not header names, too long, or from an origin that is not allowed: the usual list.
        assert_eq!(asking(&any, "http://x.example", "a b"), ALLOWED_HEADERS);
        assert_eq!(asking(&any, "http://x.example", &"x,".repeat(600)), ALLOWED_HEADERS);
        let listed = Cors::new(&["http://a.example".to_string()]);
        assert_eq!(asking(&listed, "http://b.example", "x-trace-id"), ALLOWED_HEADERS);
        assert!(asking(&listed, "http://a.example", "x-trace-id").ends_with(",x-trace-id"));
        // And the headers scripts read are exposed.
        let mut r = Response::new(axum::body::Body::empty());
        any.decorate(None, &mut r);
        let exposed = r.headers()[header::ACCESS_CONTROL_EXPOSE_HEADERS].to_str().unwrap().to_string();
        for h in ["www-authenticate", "retry-after", "allow", "x-zarr-selection", "etag", "x-zarr-shape"] {
            assert!(exposed.split(',').any(|x| x == h), "{h} in {exposed}");
        }
    }

    #[test]
    fn only_listed_or_own_loopback_origins_may_write() {
        let reads = HeaderValue::from_static("GET,HEAD,OPTIONS");
        let cors = Cors::new(&["*".to_string(), "http://app.example".to_string()]);
        let with_host = |origin: &'static str, host: &'static str| {
            let mut h = headers(Some(origin));
            h.insert(header::HOST, HeaderValue::from_static(host));
            h
        };
        let allowed = |h: &HeaderMap| {
            let r = cors.preflight(h, &reads);
            r.headers()[header::ACCESS_CONTROL_ALLOW_METHODS].to_str().unwrap().split(',').any(|m| m == "DELETE")
        };
        assert!(allowed(&with_host("http://app.example", "127.0.0.1:8080")));
        assert!(allowed(&with_host("http://127.0.0.1:8080", "127.0.0.1:8080")));
        assert!(allowed(&with_host("http://localhost", "localhost:80")));
        assert!(allowed(&with_host("http://[::1]:9000", "[::1]:9000")));
        // "*" reads, but does not write.
        assert!(!allowed(&with_host("http://evil.example", "127.0.0.1:8080")));
        // Another port of the same host is another origin.
        assert!(!allowed(&with_host("http://127.0.0.1:9999", "127.0.0.1:8080")));
        // DNS rebinding: the page's own name, pointed at loopback.
        assert!(!allowed(&with_host("http://evil.example:8080", "evil.example:8080")));
        assert!(!allowed(&with_host("null", "127.0.0.1:8080")));
        let r = cors.preflight(&with_host("http://evil.example", "127.0.0.1:8080"), &reads);
        assert_eq!(r.headers()[header::ACCESS_CONTROL_ALLOW_METHODS], "GET,HEAD,OPTIONS");
        assert_eq!(r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
    }
}
