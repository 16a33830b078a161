//! Authentication (bearer tokens) and authorisation (scopes per mount).
//!
//! Every route's needs are in one table, [`RULES`], keyed by the route
//! template and the method: a method missing from it is refused, and a
//! route served without a rule stops the server at start (see
//! [`super::router`]). The mount is read from the template's `{mount}`
//! segment.
//!
//! Tokens are configured as SHA-256 hashes (`zarrd hash-token`). A presented
//! token is hashed and compared, in constant time, with *every* configured
//! hash, so the work done does not depend on which token (if any) matched.
//! Token values are never logged or echoed; token names may be.
//!
//! Who may do what without a token (RFC 6750 bearer tokens otherwise):
//!
//! | tokens configured | bind address | anonymous callers |
//! |---|---|---|
//! | none | loopback | everything (`admin`), from loopback peers only; others as below |
//! | none | other | `read` on every mount (a warning is logged at start) |
//! | some | any | `read` on mounts with `anonymous_read = true`, nothing else |
//!
//! A missing token where one is needed, or a wrong one anywhere, is 401 with
//! `WWW-Authenticate: Bearer realm="zarrd"`; a valid token without the
//! scope is 403 naming the scope and the mount.

use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use axum::http::{header, Method, Request};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use super::error::{ApiError, ErrorCode};
use crate::config::{Config, Scope, TokenHash};
use crate::service::App;

/// What a route needs from the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Nothing: health, the API description.
    Public,
    /// Nothing, and not counted against the request limit (like
    /// [`Need::Public`]), but the caller is identified (a wrong token is
    /// still 401) and its [`Access`](super::guard::Access) put in the
    /// request's extensions: `/metrics`, whose per-mount series name only
    /// the mounts the caller may read, so a scrape tells an anonymous caller
    /// nothing about mounts hidden from it.
    Observer,
    /// Any caller, anonymous included (a wrong token is still 401); the
    /// handler shows only what [`Access::may`](super::guard::Access::may)
    /// allows. The caller's [`Access`](super::guard::Access) is in the
    /// request's extensions.
    Caller,
    /// This scope on the mount named by the `{mount}` segment.
    Mount(Scope),
}

/// One route template, what each of its methods needs, and the query
/// parameters each of them knows.
#[derive(Debug)]
pub struct Rule {
    pub template: &'static str,
    pub methods: &'static [(&'static str, Need)],
    /// The query parameters the route knows; the guard refuses any other
    /// (400 `unknown_parameter`, naming it) before the handler runs.
    pub params: Params,
}

/// The query parameters a route knows.
#[derive(Debug, Clone, Copy)]
pub enum Params {
    /// Per method, the parameter names; a method not listed takes none.
    Only(&'static [(&'static str, &'static [&'static str])]),
    /// The query string is not read at all (the store protocol: a key is
    /// the path, and clients append signatures or cache-busters to every
    /// key URL; see the README's "What the store protocol does").
    Ignored,
}

/// No query parameters on any method.
const NO_PARAMS: Params = Params::Only(&[]);
/// `GET`/`HEAD` of a node description, `PUT` of a create, `DELETE`.
const NODE_PARAMS: Params = Params::Only(&[
    ("GET", &["stats", "depth", "page", "per_page"]),
    ("PUT", &["create", "open", "delete_existing"]),
    ("DELETE", &["recursive"]),
]);
/// Slice reads by `GET`/`HEAD`, writes by `PUT` (`POST` reads take their
/// options in the body).
const DATA_PARAMS: Params = Params::Only(&[
    (
        "GET",
        &[
            "sel",
            "mode",
            "field",
            "format",
            "fill_missing",
            "rescale",
            "colormap",
            "transparent_fill",
            "downsample",
            "downsample_method",
            "level",
            "size",
        ],
    ),
    ("PUT", &["sel", "mode", "format", "write_empty_chunks"]),
]);
/// Browser pages of a place in a mount.
const BROWSE_PARAMS: Params = Params::Only(&[("GET", &["page", "stats"])]);
/// Previews (`GET`/`HEAD`).
const PREVIEW_PARAMS: Params = Params::Only(&[("GET", &["size", "colormap", "rescale", "transparent_fill"])]);
const CHUNK_PARAMS: Params = Params::Only(&[("GET", &["coords", "inner", "field", "format", "fill_missing"])]);

const READ: Need = Need::Mount(Scope::Read);
const WRITE: Need = Need::Mount(Scope::Write);
const ADMIN: Need = Need::Mount(Scope::Admin);

/// OPTIONS is public: [`super::cors`] answers it before routing (a browser's
/// preflight carries no credentials), with nothing but the allowed methods
/// and headers.
const STORE: &[(&str, Need)] = &[
    ("GET", READ),
    ("HEAD", READ),
    ("OPTIONS", Need::Public),
    ("PROPFIND", READ),
    ("PUT", WRITE),
    ("DELETE", WRITE),
    ("MKCOL", WRITE),
];
const NODES: &[(&str, Need)] = &[("GET", READ), ("HEAD", READ), ("PUT", ADMIN), ("DELETE", ADMIN)];
const ATTRIBUTES: &[(&str, Need)] = &[("GET", READ), ("HEAD", READ), ("PUT", ADMIN), ("PATCH", ADMIN)];
const DATA: &[(&str, Need)] = &[("GET", READ), ("HEAD", READ), ("POST", READ), ("PUT", WRITE)];
const CHUNKS: &[(&str, Need)] = &[("GET", READ), ("HEAD", READ)];
const JOBS: &[(&str, Need)] = &[("GET", READ), ("HEAD", READ), ("DELETE", ADMIN)];
const PUBLIC: &[(&str, Need)] = &[("GET", Need::Public), ("HEAD", Need::Public)];

/// Every route and what it needs. Routes of the REST API are listed before
/// they land, so they are guarded the moment they are registered.
pub const RULES: &[Rule] = &[
    Rule { template: "/zarr/{mount}", methods: STORE, params: Params::Ignored },
    Rule { template: "/zarr/{mount}/", methods: STORE, params: Params::Ignored },
    Rule { template: "/zarr/{mount}/{*key}", methods: STORE, params: Params::Ignored },
    Rule { template: "/api/v1/mounts", methods: &[("GET", Need::Caller), ("HEAD", Need::Caller)], params: NO_PARAMS },
    Rule { template: "/api/v1/nodes/{mount}", methods: NODES, params: NODE_PARAMS },
    Rule { template: "/api/v1/nodes/{mount}/{*path}", methods: NODES, params: NODE_PARAMS },
    Rule { template: "/api/v1/attributes/{mount}", methods: ATTRIBUTES, params: NO_PARAMS },
    Rule { template: "/api/v1/attributes/{mount}/{*path}", methods: ATTRIBUTES, params: NO_PARAMS },
    Rule { template: "/api/v1/resize/{mount}", methods: &[("POST", ADMIN)], params: NO_PARAMS },
    Rule { template: "/api/v1/resize/{mount}/{*path}", methods: &[("POST", ADMIN)], params: NO_PARAMS },
    Rule { template: "/api/v1/consolidate/{mount}", methods: &[("POST", ADMIN)], params: NO_PARAMS },
    Rule { template: "/api/v1/consolidate/{mount}/{*path}", methods: &[("POST", ADMIN)], params: NO_PARAMS },
    Rule { template: "/api/v1/data/{mount}", methods: DATA, params: DATA_PARAMS },
    Rule { template: "/api/v1/data/{mount}/{*path}", methods: DATA, params: DATA_PARAMS },
    Rule { template: "/api/v1/chunks/{mount}", methods: CHUNKS, params: CHUNK_PARAMS },
    Rule { template: "/api/v1/chunks/{mount}/{*path}", methods: CHUNKS, params: CHUNK_PARAMS },
    Rule { template: "/", methods: &[("GET", Need::Caller), ("HEAD", Need::Caller)], params: NO_PARAMS },
    // Signed links: minted by a caller with read on the mount (checked by
    // the handler); used without a token, the credential being in the path.
    Rule { template: "/api/v1/links", methods: &[("POST", Need::Caller)], params: NO_PARAMS },
    Rule {
        template: "/s/{link}/{*key}",
        methods: &[("GET", Need::Public), ("HEAD", Need::Public), ("OPTIONS", Need::Public)],
        params: Params::Ignored,
    },
    Rule { template: "/browse/{mount}", methods: CHUNKS, params: BROWSE_PARAMS },
    Rule { template: "/browse/{mount}/", methods: CHUNKS, params: BROWSE_PARAMS },
    Rule { template: "/browse/{mount}/{*path}", methods: CHUNKS, params: BROWSE_PARAMS },
    Rule { template: "/api/v1/preview/{mount}", methods: CHUNKS, params: PREVIEW_PARAMS },
    Rule { template: "/api/v1/preview/{mount}/{*path}", methods: CHUNKS, params: PREVIEW_PARAMS },
    Rule { template: "/api/v1/pyramids/{mount}/{*path}", methods: &[("POST", ADMIN)], params: NO_PARAMS },
    Rule { template: "/api/v1/jobs/{mount}/{id}", methods: JOBS, params: NO_PARAMS },
    Rule { template: "/healthz", methods: PUBLIC, params: NO_PARAMS },
    Rule { template: "/readyz", methods: PUBLIC, params: NO_PARAMS },
    Rule { template: "/openapi.json", methods: PUBLIC, params: NO_PARAMS },
    Rule { template: "/docs", methods: PUBLIC, params: NO_PARAMS },
    Rule { template: "/docs/", methods: PUBLIC, params: NO_PARAMS },
    Rule { template: "/docs/{*rest}", methods: PUBLIC, params: NO_PARAMS },
    Rule { template: "/metrics", methods: &[("GET", Need::Observer), ("HEAD", Need::Observer)], params: NO_PARAMS },
];

/// The rule for a route template, if there is one.
#[must_use]
pub fn rule(template: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.template == template)
}

impl Rule {
    /// What `method` needs here; `None`: the method is not allowed.
    #[must_use]
    pub fn need(&self, method: &Method) -> Option<Need> {
        self.methods.iter().find(|(m, _)| *m == method.as_str()).map(|(_, n)| *n)
    }

    /// The query parameters `method` knows here; `None`: any (ignored).
    #[must_use]
    pub fn params(&self, method: &Method) -> Option<&'static [&'static str]> {
        match self.params {
            Params::Ignored => None,
            Params::Only(list) => {
                // HEAD is GET without the body.
                let method = if method == Method::HEAD { "GET" } else { method.as_str() };
                Some(list.iter().find(|(m, _)| *m == method).map_or(&[][..], |(_, p)| *p))
            }
        }
    }

    /// True when `method` changes data here (it needs `write` or `admin`).
    #[must_use]
    pub fn writes(&self, method: &Method) -> bool {
        matches!(self.need(method), Some(Need::Mount(Scope::Write | Scope::Admin)))
    }

    /// The methods that change nothing here, and `OPTIONS`, comma-separated
    /// (a preflight's answer to an origin that may not write).
    #[must_use]
    pub fn read_methods(&self) -> String {
        let mut methods: Vec<&str> = self
            .methods
            .iter()
            .filter(|(_, n)| !matches!(n, Need::Mount(Scope::Write | Scope::Admin)))
            .map(|(m, _)| *m)
            .collect();
        if !methods.contains(&"OPTIONS") {
            methods.push("OPTIONS");
        }
        methods.join(",")
    }

    /// The methods allowed, for an `Allow` header.
    #[must_use]
    pub fn allow(&self) -> String {
        self.methods.iter().map(|(m, _)| *m).collect::<Vec<_>>().join(", ")
    }
}

/// Who is calling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// No token; `loopback` when the peer is a loopback address.
    Anonymous { loopback: bool },
    /// The configured token at this index.
    Token(usize),
}

/// A configured token, ready for comparison.
#[derive(Debug)]
struct Token {
    name: TokenName,
    hash: [u8; 32],
    /// Per mount, the strongest scope given.
    mounts: Vec<(String, Scope)>,
    /// The scope on every mount (`"*"`).
    any: Option<Scope>,
}

/// The name of the token a request came with, put in the response's
/// extensions for the request log (names are logged, values never).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenName(pub std::sync::Arc<str>);

/// What anonymous callers may do (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Anonymous {
    LoopbackFull,
    ReadAll,
    PerMount,
}

/// The tokens and the anonymous policy, built once from the configuration.
#[derive(Debug)]
pub struct Authenticator {
    tokens: Vec<Token>,
    anonymous: Anonymous,
}

impl Authenticator {
    /// Built from `config.auth` and `config.bind` (validated).
    #[must_use]
    pub fn new(config: &Config) -> Self {
        let tokens: Vec<Token> = config
            .auth
            .tokens
            .iter()
            .map(|t| {
                let strongest = |scopes: &[Scope]| scopes.iter().copied().max();
                Token {
                    name: TokenName(t.name.as_str().into()),
                    hash: t.sha256.0,
                    mounts: t
                        .scopes
                        .iter()
                        .filter(|(m, _)| *m != "*")
                        .filter_map(|(m, s)| strongest(s).map(|s| (m.clone(), s)))
                        .collect(),
                    any: t.scopes.get("*").and_then(|s| strongest(s)),
                }
            })
            .collect();
        let anonymous = if !tokens.is_empty() {
            Anonymous::PerMount
        } else if config.bind.ip().is_loopback() {
            Anonymous::LoopbackFull
        } else {
            Anonymous::ReadAll
        };
        Self { tokens, anonymous }
    }

    /// True when no token is configured and the bind address is not
    /// loopback: everything is readable by anyone (warned about at start).
    #[must_use]
    pub fn open_reads(&self) -> bool {
        self.anonymous == Anonymous::ReadAll
    }

    /// The configured token names (for the start-up log).
    pub fn token_names(&self) -> impl Iterator<Item = &str> {
        self.tokens.iter().map(|t| &*t.name.0)
    }

    /// The name of a token caller.
    #[must_use]
    pub fn name(&self, caller: Caller) -> Option<&TokenName> {
        match caller {
            Caller::Token(i) => self.tokens.get(i).map(|t| &t.name),
            Caller::Anonymous { .. } => None,
        }
    }

    /// Identifies the caller of `req`, whose peer address is in its
    /// extensions as [`ConnectInfo<SocketAddr>`] (none: not loopback).
    ///
    /// # Errors
    /// 401 for an `Authorization` header that is not a valid bearer token.
    pub fn identify<B>(&self, req: &Request<B>) -> Result<Caller, ApiError> {
        self.identify_from(req, None)
    }

    /// [`Self::identify`] with the peer address given (the server hands it
    /// over with the request rather than in its extensions, which cost an
    /// allocated map per request); `None` reads the extensions.
    ///
    /// # Errors
    /// 401 for an `Authorization` header that is not a valid bearer token.
    pub fn identify_from<B>(&self, req: &Request<B>, peer: Option<SocketAddr>) -> Result<Caller, ApiError> {
        let Some(value) = req.headers().get(header::AUTHORIZATION) else {
            let peer = peer.or_else(|| req.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(a)| *a));
            let loopback = peer.is_some_and(|a| a.ip().is_loopback());
            return Ok(Caller::Anonymous { loopback });
        };
        let token = value
            .as_bytes()
            .split_first_chunk::<7>()
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case(b"bearer "))
            .map(|(_, rest)| rest.trim_ascii())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                unauthorized("the Authorization header must be `Bearer <token>`", Some("invalid_request"))
            })?;
        self.find(token)
            .map(Caller::Token)
            .ok_or_else(|| unauthorized("the bearer token is not valid", Some("invalid_token")))
    }

    /// The index of the token whose hash matches, comparing with every
    /// configured hash in constant time (no early exit).
    fn find(&self, token: &[u8]) -> Option<usize> {
        let hash = TokenHash::of(token).0;
        let mut found = subtle::Choice::from(0);
        let mut index = 0u64;
        for (i, t) in self.tokens.iter().enumerate() {
            let eq = t.hash.ct_eq(&hash);
            index = u64::conditional_select(&index, &(i as u64), eq);
            found |= eq;
        }
        bool::from(found).then(|| usize::try_from(index).unwrap_or(usize::MAX))
    }

    /// The strongest scope `caller` has on `mount` (`None`: no access).
    #[must_use]
    pub fn scope(&self, app: &App, caller: Caller, mount: &str) -> Option<Scope> {
        match caller {
            Caller::Token(i) => {
                let t = self.tokens.get(i)?;
                let named = t.mounts.iter().find(|(m, _)| m == mount).map(|(_, s)| *s);
                named.max(t.any)
            }
            Caller::Anonymous { loopback } => match self.anonymous {
                Anonymous::LoopbackFull if loopback => Some(Scope::Admin),
                Anonymous::ReadAll => Some(Scope::Read),
                Anonymous::LoopbackFull | Anonymous::PerMount => {
                    app.mount(mount).ok().filter(|m| m.anonymous_read()).map(|_| Scope::Read)
                }
            },
        }
    }

    /// Checks that `caller` has `needed` on `mount`.
    ///
    /// # Errors
    /// 401 for an anonymous caller, 403 for a token, naming the scope and mount.
    pub fn authorise(&self, app: &App, caller: Caller, mount: &str, needed: Scope) -> Result<(), ApiError> {
        if self.scope(app, caller, mount).is_some_and(|s| s >= needed) {
            return Ok(());
        }
        let what = format!("the `{}` scope on mount `{mount}`", needed.as_str());
        match caller {
            Caller::Anonymous { .. } => {
                Err(unauthorized(&format!("this request needs a bearer token with {what}"), None))
            }
            Caller::Token(_) => Err(ErrorCode::Forbidden.error(format!("the bearer token does not grant {what}"))),
        }
    }
}

fn unauthorized(message: &str, error: Option<&str>) -> ApiError {
    let challenge = match error {
        Some(e) => format!("Bearer realm=\"zarrd\", error=\"{e}\""),
        None => "Bearer realm=\"zarrd\"".to_string(),
    };
    ErrorCode::Unauthorized.error(message).with_header(header::WWW_AUTHENTICATE, &challenge)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TokenSpec;
    use crate::storage::{Mount, MountSpec};
    use axum::http::{HeaderValue, StatusCode};

    /// A token: name, secret, scopes.
    type Spec<'a> = (&'a str, &'a str, &'a [(&'a str, Scope)]);

    fn app(bind: &str, tokens: &[Spec<'_>]) -> (App, Authenticator) {
        let mut config = Config { bind: bind.parse().unwrap(), ..Config::default() };
        config.auth.tokens = tokens
            .iter()
            .map(|(name, secret, scopes)| TokenSpec {
                name: (*name).to_string(),
                sha256: TokenHash::of(secret.as_bytes()),
                scopes: scopes.iter().map(|(m, s)| ((*m).to_string(), vec![*s])).collect(),
            })
            .collect();
        let open = Mount::build("open", &MountSpec::from_url("memory://")).unwrap().with_anonymous_read(true);
        let closed = Mount::build("closed", &MountSpec::from_url("memory://")).unwrap();
        let auth = Authenticator::new(&config);
        (App::with_mounts(config, vec![open, closed]), auth)
    }

    fn request(authorization: Option<&str>, peer: Option<&str>) -> Request<()> {
        let mut req = Request::new(());
        if let Some(a) = authorization {
            req.headers_mut().insert(header::AUTHORIZATION, HeaderValue::from_str(a).unwrap());
        }
        if let Some(p) = peer {
            req.extensions_mut().insert(ConnectInfo(p.parse::<SocketAddr>().unwrap()));
        }
        req
    }

    #[test]
    fn tokens_are_found_by_hash_whatever_their_position() {
        let (_, auth) = app(
            "0.0.0.0:1",
            &[("a", "secret-a-0123456789", &[("*", Scope::Read)]), ("b", "secret-b-0123456789", &[("*", Scope::Read)])],
        );
        assert_eq!(auth.find(b"secret-a-0123456789"), Some(0));
        assert_eq!(auth.find(b"secret-b-0123456789"), Some(1));
        assert_eq!(auth.find(b"secret-c-0123456789"), None);
        assert_eq!(auth.find(b""), None);
        let caller = auth.identify(&request(Some("bearer   secret-b-0123456789 "), None)).unwrap();
        assert_eq!(caller, Caller::Token(1));
        assert_eq!(auth.name(caller).map(|n| &*n.0), Some("b"));
        for bad in ["Bearer wrong", "Bearer", "Basic c2VjcmV0", "secret-a-0123456789", "Bearer "] {
            let e = auth.identify(&request(Some(bad), None)).unwrap_err();
            assert_eq!(e.status(), StatusCode::UNAUTHORIZED, "{bad}");
            assert!(!e.message.contains("secret"), "{bad}: {}", e.message);
            assert!(e.headers.iter().any(
                |(k, v)| k == header::WWW_AUTHENTICATE && v.to_str().unwrap().starts_with("Bearer realm=\"zarrd\"")
            ));
        }
    }

    #[test]
    fn scopes_imply_weaker_ones_and_star_applies_everywhere() {
        let (app, auth) = app(
            "127.0.0.1:1",
            &[("w", "writer-0123456789", &[("open", Scope::Write)]), ("r", "reader-0123456789", &[("*", Scope::Read)])],
        );
        let w = Caller::Token(0);
        assert!(auth.authorise(&app, w, "open", Scope::Read).is_ok());
        assert!(auth.authorise(&app, w, "open", Scope::Write).is_ok());
        let e = auth.authorise(&app, w, "open", Scope::Admin).unwrap_err();
        assert_eq!(e.status(), StatusCode::FORBIDDEN);
        assert!(e.message.contains("`admin`") && e.message.contains("`open`"), "{}", e.message);
        assert_eq!(auth.authorise(&app, w, "closed", Scope::Read).unwrap_err().status(), StatusCode::FORBIDDEN);
        let r = Caller::Token(1);
        assert!(auth.authorise(&app, r, "closed", Scope::Read).is_ok());
        assert!(auth.authorise(&app, r, "no-such-mount", Scope::Read).is_ok(), "the handler answers 404");
        assert_eq!(auth.authorise(&app, r, "closed", Scope::Write).unwrap_err().status(), StatusCode::FORBIDDEN);
    }

    #[test]
    fn anonymous_callers() {
        // Tokens configured: reads on anonymous_read mounts only, whatever the peer.
        let (a, auth) = app("127.0.0.1:1", &[("r", "reader-0123456789", &[("*", Scope::Read)])]);
        let local = auth.identify(&request(None, Some("127.0.0.1:5"))).unwrap();
        assert_eq!(local, Caller::Anonymous { loopback: true });
        assert!(auth.authorise(&a, local, "open", Scope::Read).is_ok());
        let e = auth.authorise(&a, local, "open", Scope::Write).unwrap_err();
        assert_eq!(e.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(auth.authorise(&a, local, "closed", Scope::Read).unwrap_err().status(), StatusCode::UNAUTHORIZED);
        assert!(!auth.open_reads());
        // No tokens, loopback bind: everything from loopback peers only.
        let (a, auth) = app("127.0.0.1:1", &[]);
        let local = auth.identify(&request(None, Some("[::1]:5"))).unwrap();
        assert!(auth.authorise(&a, local, "closed", Scope::Admin).is_ok());
        let remote = auth.identify(&request(None, Some("192.0.2.1:5"))).unwrap();
        assert_eq!(remote, Caller::Anonymous { loopback: false });
        assert!(auth.authorise(&a, remote, "closed", Scope::Read).is_err());
        assert!(auth.authorise(&a, remote, "open", Scope::Read).is_ok());
        let unknown = auth.identify(&request(None, None)).unwrap();
        assert!(auth.authorise(&a, unknown, "closed", Scope::Read).is_err());
        // No tokens, other bind: reads for all, no writes.
        let (a, auth) = app("0.0.0.0:1", &[]);
        assert!(auth.open_reads());
        let local = auth.identify(&request(None, Some("127.0.0.1:5"))).unwrap();
        assert!(auth.authorise(&a, local, "closed", Scope::Read).is_ok());
        assert_eq!(auth.authorise(&a, local, "closed", Scope::Write).unwrap_err().status(), StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn mount_scoped_rules_name_the_mount_segment() {
        // The guard reads the mount from the `{mount}` parameter.
        for r in RULES {
            if r.methods.iter().any(|(_, n)| matches!(n, Need::Mount(_))) {
                assert!(r.template.split('/').any(|s| s == "{mount}"), "{}", r.template);
            }
        }
        let r = rule("/zarr/{mount}/{*key}").unwrap();
        assert_eq!(r.need(&Method::PATCH), None);
        assert_eq!(r.need(&Method::HEAD), Some(READ));
        assert!(r.allow().contains("PROPFIND"));
    }

    #[test]
    fn every_registered_route_has_a_rule() {
        let (_, doc) = super::super::routes().split_for_parts();
        assert!(!doc.paths.paths.is_empty());
        for path in super::super::MOUNT_ROOT_ROUTES {
            let r = rule(path).unwrap_or_else(|| panic!("no access rule for route {path}"));
            assert!(r.need(&Method::GET).is_some(), "{path}");
        }
        for (path, item) in &doc.paths.paths {
            let r = rule(path).unwrap_or_else(|| panic!("no access rule for route {path}"));
            let methods = [
                ("GET", item.get.is_some()),
                ("PUT", item.put.is_some()),
                ("POST", item.post.is_some()),
                ("DELETE", item.delete.is_some()),
                ("PATCH", item.patch.is_some()),
                ("HEAD", item.head.is_some()),
                ("OPTIONS", item.options.is_some()),
            ];
            for (m, present) in methods {
                if present {
                    assert!(r.need(&Method::from_bytes(m.as_bytes()).unwrap()).is_some(), "no rule for {m} {path}");
                }
            }
        }
    }
}
