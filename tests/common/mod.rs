//! Shared helpers for the integration tests: a real zarrd on an ephemeral
//! loopback port (per backend), a reqwest client for ordinary requests, and
//! a raw HTTP/1.1 client for requests whose path must reach the server
//! byte for byte (`..`, `%2e%2e`, backslashes), which reqwest and `url`
//! would normalise.
//!
//! Every wait is bounded: clients carry timeouts and raw requests run under
//! [`TIMEOUT`]. Set `ZARRD_TEST_LOG=1` to see the server's logs.

#![allow(dead_code)] // Each test crate uses a different part of this module.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use zarrd::config::Config;
use zarrd::service::App;
use zarrd::storage::{Mount, MountSpec};

/// The longest any single request or wait in these tests may take.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// `limits.max_put_bytes` and `limits.max_body_bytes` of the conformance
/// servers (small, so 413 is cheap).
pub const MAX_PUT: u64 = 64 * 1024;

/// The S3 endpoint of a running S3-compatible server (moto), set by the harness.
pub const S3_ENDPOINT_VAR: &str = "ZARRD_TEST_S3_ENDPOINT";
/// The bucket the harness creates on that server.
pub const S3_BUCKET: &str = "zarrd-test";

/// A storage backend the conformance suite runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    File,
    S3,
}

/// A running zarrd with a writable mount `data` and a read-only mount `ro`
/// over the same storage (for `memory://`, `ro` is a second, empty store).
pub struct TestServer {
    pub addr: SocketAddr,
    pub base: String,
    pub client: reqwest::Client,
    pub backend: Backend,
    /// The file mount's root (file backend only).
    pub root: Option<std::path::PathBuf>,
    _dir: Option<tempfile::TempDir>,
    _task: tokio::task::JoinHandle<()>,
}

/// A reqwest client that never uses a proxy, never follows redirects (tests
/// see every status as sent), and never waits forever.
#[must_use]
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(TIMEOUT)
        .build()
        .expect("reqwest client")
}

/// The test configuration: small body limits (data and documents),
/// everything else default.
#[must_use]
pub fn test_config() -> Config {
    let mut config = Config::default();
    config.limits.max_put_bytes = MAX_PUT;
    config.limits.max_body_bytes = MAX_PUT;
    config
}

/// Set to show the server's logs (filtered by `RUST_LOG`) in test output.
pub const LOG_VAR: &str = "ZARRD_TEST_LOG";

/// Serves `app` on 127.0.0.1 at an ephemeral port, as `zarrd serve` does
/// (over TLS when `app.config().tls` is set).
pub async fn serve_app(app: App) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    if std::env::var_os(LOG_VAR).is_some() {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    // The server's own connection handling (timeouts, TLS, peer addresses).
    let connections = Arc::new(zarrd::server::Connections::new(app.config()).expect("connection settings"));
    let router = zarrd::http::router(Arc::new(app));
    let task = tokio::spawn(async move {
        zarrd::server::serve_listener(listener, router, connections, std::future::pending()).await.expect("serve");
    });
    (addr, task)
}

fn s3_spec(endpoint: &str, test: &str) -> MountSpec {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let url = format!("s3://{S3_BUCKET}/rust-{test}-{}-{nanos}", std::process::id());
    let mut spec = MountSpec::from_url(&url);
    let options = [
        ("endpoint", endpoint),
        ("allow_http", "true"),
        ("access_key_id", "testing"),
        ("secret_access_key", "testing"),
        ("region", "us-east-1"),
    ];
    spec.options = options.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect::<BTreeMap<_, _>>();
    spec
}

impl TestServer {
    /// Starts a server over `backend`, or `None` (after saying why) when the
    /// backend is not configured in this environment.
    pub async fn start(backend: Backend, test: &str) -> Option<Self> {
        Self::start_with(backend, test, test_config()).await
    }

    /// As [`TestServer::start`], with a given configuration (its mounts are ignored).
    pub async fn start_with(backend: Backend, test: &str, config: Config) -> Option<Self> {
        let mut dir = None;
        let mut root = None;
        let spec = match backend {
            Backend::Memory => MountSpec::from_url("memory://"),
            Backend::File => {
                let d = tempfile::tempdir().expect("tempdir");
                let r = d.path().join("root");
                std::fs::create_dir(&r).expect("mount root");
                let spec = MountSpec::from_url(&format!("file://{}", r.display()));
                root = Some(r);
                dir = Some(d);
                spec
            }
            Backend::S3 => match std::env::var(S3_ENDPOINT_VAR) {
                Ok(endpoint) if !endpoint.is_empty() => s3_spec(&endpoint, test),
                _ => {
                    println!("{test}: S3 not configured ({S3_ENDPOINT_VAR} is not set); skipped");
                    return None;
                }
            },
        };
        let mut ro = spec.clone();
        ro.read_only = true;
        let mounts = vec![
            Mount::build("data", &spec).expect("build mount data"),
            Mount::build("ro", &ro).expect("build mount ro"),
        ];
        let (addr, task) = serve_app(App::with_mounts(config, mounts)).await;
        Some(Self { addr, base: format!("http://{addr}"), client: client(), backend, root, _dir: dir, _task: task })
    }

    /// The absolute URL of `path` (which starts with `/`).
    #[must_use]
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request builder for `method` on `path`.
    pub fn request(&self, method: &str, path: &str) -> reqwest::RequestBuilder {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        self.client.request(method, self.url(path))
    }

    /// Sends a request builder, panicking on transport errors.
    pub async fn send(&self, rb: reqwest::RequestBuilder) -> Reply {
        Reply::from(rb.send().await.expect("request failed")).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(self.request("GET", path)).await
    }

    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.send(with_headers(self.request("GET", path), headers)).await
    }

    pub async fn head_with(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.send(with_headers(self.request("HEAD", path), headers)).await
    }

    pub async fn put(&self, path: &str, body: impl Into<Vec<u8>>) -> Reply {
        self.send(self.request("PUT", path).body(body.into())).await
    }

    pub async fn put_with(&self, path: &str, body: impl Into<Vec<u8>>, headers: &[(&str, &str)]) -> Reply {
        self.send(with_headers(self.request("PUT", path), headers).body(body.into())).await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.send(self.request("DELETE", path)).await
    }

    /// A request whose target is sent exactly as given.
    pub async fn raw(&self, method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
        raw_request(self.addr, method, target, headers, body).await
    }
}

/// Adds headers to a request builder.
pub fn with_headers(mut rb: reqwest::RequestBuilder, headers: &[(&str, &str)]) -> reqwest::RequestBuilder {
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    rb
}

/// A response, fully read.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    /// Header names in lower case, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    /// Reads a whole reqwest response.
    pub async fn from_response(resp: reqwest::Response) -> Self {
        Self::from(resp).await
    }

    async fn from(resp: reqwest::Response) -> Self {
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let body = resp.bytes().await.expect("reading the response body").to_vec();
        Self { status, headers, body }
    }

    /// The first value of header `name` (case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// Header `name`, which must be present.
    #[must_use]
    pub fn must_header(&self, name: &str) -> &str {
        self.header(name).unwrap_or_else(|| panic!("no {name} header in {self}"))
    }

    /// The body as text.
    #[must_use]
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    #[must_use]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {self}"))
    }

    /// Asserts the status.
    #[track_caller]
    pub fn expect_status(&self, status: u16) -> &Self {
        assert_eq!(self.status, status, "unexpected status: {self}");
        self
    }

    /// Asserts an error answer: status and the JSON envelope
    /// `{"error": {"code", "message"}}` with a non-empty message.
    #[track_caller]
    pub fn expect_error(&self, status: u16, code: &str) -> &Self {
        self.expect_status(status);
        assert!(
            self.header("content-type").is_some_and(|c| c.starts_with("application/json")),
            "error without a JSON content type: {self}"
        );
        let v = self.json();
        let err = v.get("error").unwrap_or_else(|| panic!("no `error` object: {self}"));
        assert_eq!(err.get("code").and_then(|c| c.as_str()), Some(code), "error code: {self}");
        let message = err.get("message").and_then(|m| m.as_str()).unwrap_or("");
        assert!(!message.is_empty(), "empty error message: {self}");
        self
    }

    /// The error message of a JSON error answer.
    #[must_use]
    pub fn error_message(&self) -> String {
        self.json()["error"]["message"].as_str().unwrap_or_default().to_string()
    }
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?} body={:?}", self.status, self.headers, String::from_utf8_lossy(&self.body))
    }
}

/// Sends one HTTP/1.1 request with the request target exactly as given, on a
/// fresh connection (`Connection: close`), and reads the whole answer.
pub async fn raw_request(addr: SocketAddr, method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let fut = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let mut head = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if !body.is_empty() || matches!(method, "PUT" | "POST") {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.expect("write request head");
        stream.write_all(body).await.expect("write request body");
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await.expect("read response");
        parse_response(&buf, method == "HEAD")
    };
    tokio::time::timeout(TIMEOUT, fut).await.unwrap_or_else(|_| panic!("{method} {target}: no answer in {TIMEOUT:?}"))
}

/// Writes `bytes` as they are on a fresh connection, closes the writing
/// half, and reads whatever comes back (possibly nothing).
pub async fn raw_bytes(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let fut = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(bytes).await.expect("write");
        stream.shutdown().await.expect("shutdown");
        let mut buf = Vec::new();
        // A reset is an answer too: the server gave up on the request.
        let _ = stream.read_to_end(&mut buf).await;
        buf
    };
    tokio::time::timeout(TIMEOUT, fut).await.unwrap_or_else(|_| panic!("no answer in {TIMEOUT:?}"))
}

/// Parses a whole HTTP/1.1 response read until the connection closed.
#[must_use]
pub fn parse_response(buf: &[u8], head_request: bool) -> Reply {
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| {
        panic!("incomplete response: {:?}", String::from_utf8_lossy(buf));
    });
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let rest = &buf[split + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let get = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let body = if head_request || status == 204 || status == 304 {
        assert!(rest.is_empty(), "a body after a {status} answer to a bodiless request: {rest:?}");
        Vec::new()
    } else if get("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        decode_chunked(rest)
    } else if let Some(len) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        assert!(rest.len() >= len, "short body: {} of {len} bytes", rest.len());
        rest[..len].to_vec()
    } else {
        rest.to_vec()
    };
    Reply { status, headers, body }
}

fn decode_chunked(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").expect("chunk size line");
        let size_text = String::from_utf8_lossy(&data[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16).expect("chunk size");
        data = &data[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// Runs `case` against a fresh server over `backend`; returns without running
/// it when the backend is not configured here.
pub async fn run<F, Fut>(backend: Backend, test: &str, case: F)
where
    F: FnOnce(TestServer) -> Fut,
    Fut: Future<Output = ()>,
{
    if let Some(server) = TestServer::start(backend, test).await {
        tokio::time::timeout(Duration::from_secs(120), case(server))
            .await
            .unwrap_or_else(|_| panic!("{test} on {backend:?} did not finish in 120 s"));
    }
}

/// Bytes `0, 1, 2, ...` (mod 251), so any range is recognisable.
#[must_use]
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| u8::try_from(i % 251).expect("< 251")).collect()
}

/// Sends the head of a PUT of `length` bytes and waits for `100 Continue`:
/// the handler is then running and waiting for the body.
pub async fn put_waiting_for_body(addr: SocketAddr, key: &str, length: usize) -> tokio::net::TcpStream {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "PUT /zarr/data/{key} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {length}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
    );
    tokio::io::AsyncWriteExt::write_all(&mut conn, head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let mut buf = [0u8; 256];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tokio::io::AsyncReadExt::read(&mut conn, &mut buf).await.unwrap();
            assert!(n > 0, "connection closed before 100 Continue");
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("no 100 Continue within 10 s");
    assert!(got.starts_with(b"HTTP/1.1 100"), "{}", String::from_utf8_lossy(&got));
    conn
}
