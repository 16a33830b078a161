//! Configuration: a TOML file, overridden by `ZARRD_*` environment
//! variables, overridden by command-line flags; validated before serving.
//!
//! Environment variables map onto the file's keys: `ZARRD_` + the key path
//! in upper case with `__` between levels, e.g. `ZARRD_BIND=0.0.0.0:8080`,
//! `ZARRD_LIMITS__MAX_PUT_BYTES=1048576`,
//! `ZARRD_MOUNTS__DATA__URL=s3://bucket/prefix`. Values are read as TOML
//! values when they parse as one (`true`, `42`, `["a", "b"]`), else as
//! strings. Variables under `ZARRD_TEST_` belong to the test harness and
//! are ignored.
//!
//! ```
//! let cfg = zarrd::config::Config::from_toml_str(r#"
//!     bind = "127.0.0.1:9000"
//!     [mounts.data]
//!     url = "memory://"
//! "#).unwrap();
//! assert_eq!(cfg.bind.port(), 9000);
//! assert!(cfg.mounts.contains_key("data"));
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::storage::local::ObjectCacheSettings;
use crate::storage::mount::valid_mount_name;
use crate::storage::MountSpec;

/// The whole configuration. Every field has a default; see
/// `config/zarrd.example.toml` for each one with the reason for its default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address to listen on.
    #[serde(default = "default_bind")]
    pub bind: SocketAddr,
    /// Share `bind`'s port with other processes (`SO_REUSEPORT`: the kernel
    /// spreads connections over every process listening on it). Off by
    /// default, so a second server on a port in use fails at start instead
    /// of silently taking part of the traffic.
    #[serde(default)]
    pub bind_reuse_port: bool,
    /// Seconds to let in-flight requests finish after SIGINT/SIGTERM.
    #[serde(default = "default_grace")]
    pub shutdown_grace_seconds: u64,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub cache: Cache,
    #[serde(default)]
    pub cors: Cors,
    #[serde(default)]
    pub log: Log,
    #[serde(default)]
    pub auth: Auth,
    /// Serve HTTPS directly (absent: plain HTTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Tls>,
    /// Named storage locations.
    #[serde(default)]
    pub mounts: BTreeMap<String, MountSpec>,
    /// `ZARRD_*` environment variables that name no option (another tool's
    /// `ZARRD_BIN`, a typo): ignored by [`Config::load`], to be logged as
    /// warnings naming them once logging is set up.
    #[serde(skip)]
    pub ignored_env: Vec<String>,
}

/// Bearer tokens and their scopes.
///
/// ```
/// let cfg = zarrd::config::Config::from_toml_str(r#"
///     [mounts.data]
///     url = "memory://"
///     [[auth.tokens]]
///     name = "ci"
///     sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
///     scopes = { data = ["write"], "*" = ["read"] }
/// "#).unwrap();
/// assert_eq!(cfg.auth.tokens[0].name, "ci");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Auth {
    /// The accepted tokens. None configured: see `config/zarrd.example.toml`
    /// for what anonymous callers may then do.
    #[serde(default)]
    pub tokens: Vec<TokenSpec>,
    /// The secret signed links are signed with (at least 32 bytes; see
    /// `http::links`). Absent: no links can be minted or used. Changing it
    /// revokes every link minted with the old one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_key: Option<LinkKey>,
}

/// The signing secret of links: never shown by `Debug`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LinkKey(String);

impl LinkKey {
    /// The secret.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(…)")
    }
}

/// One bearer token: its name (logged), the SHA-256 of its value (never the
/// value itself), and its scopes per mount (`"*"`: every mount).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSpec {
    pub name: String,
    pub sha256: TokenHash,
    pub scopes: BTreeMap<String, Vec<Scope>>,
}

/// What a token may do on a mount. `admin` implies `write` implies `read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// GET, HEAD, listings, slice reads.
    Read,
    /// PUT and DELETE of keys, slice writes.
    Write,
    /// Create, delete, resize, attributes, consolidate.
    Admin,
}

impl Scope {
    /// The lower-case name, as in the configuration.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Admin => "admin",
        }
    }
}

/// A SHA-256 digest, written as 64 hex digits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenHash(pub [u8; 32]);

impl TokenHash {
    /// The SHA-256 of `token`.
    #[must_use]
    pub fn of(token: &[u8]) -> Self {
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token);
        let mut out = [0u8; 32];
        out.copy_from_slice(digest.as_ref());
        Self(out)
    }

    /// Lower-case hex.
    #[must_use]
    pub fn to_hex(&self) -> String {
        use std::fmt::Write as _;
        self.0.iter().fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }
}

impl std::fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenHash({})", self.to_hex())
    }
}

impl std::str::FromStr for TokenHash {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return Err(format!(
                "expected 64 hex digits (a SHA-256 from `zarrd hash-token`), got {} characters",
                s.len()
            ));
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks(2).enumerate() {
            let hex = std::str::from_utf8(pair).ok().and_then(|p| u8::from_str_radix(p, 16).ok());
            out[i] = hex.ok_or_else(|| format!("`{s}` is not hex"))?;
        }
        Ok(Self(out))
    }
}

impl Serialize for TokenHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for TokenHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Certificate and key for direct HTTPS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    /// PEM file: the certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM file: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Request limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Largest body a store-protocol PUT accepts (413 beyond).
    #[serde(default = "default_max_put")]
    pub max_put_bytes: u64,
    /// Most entries one listing answers (the rest are cut, and the answer says so).
    #[serde(default = "default_max_list")]
    pub max_list_entries: usize,
    /// Largest selection one data or chunk read or slice write may cover, in decoded
    /// bytes (413 beyond); variable-length elements count by their JSON
    /// text (the fill value's for missing ones), slab by slab as the answer
    /// is made. Reads stream, so this bounds response size and time, not
    /// memory.
    #[serde(default = "default_max_selection")]
    pub max_selection_bytes: u64,
    /// Most elements one JSON answer may hold (413 beyond): a JSON client
    /// parses the whole answer in memory, at tens of bytes per element.
    #[serde(default = "default_max_json")]
    pub max_json_elements: u64,
    /// Decoded bytes a streamed read assembles at once (one slab; for
    /// variable-length elements, the copies a slab may hold); memory per
    /// read is about four slabs plus the chunks being decoded.
    #[serde(default = "default_slab")]
    pub read_slab_bytes: u64,
    /// Largest request body that is a document (JSON, XML) rather than array data (413 beyond).
    #[serde(default = "default_max_body")]
    pub max_body_bytes: u64,
    /// Longest a request may take until its answer starts (504 beyond).
    #[serde(default = "default_request_timeout")]
    pub request_timeout_seconds: u64,
    /// Requests served at once; more are answered 503 at once (health checks exempt).
    #[serde(default = "default_max_concurrent")]
    pub max_concurrent_requests: usize,
    /// Connections open at once; more wait in the kernel's accept queue
    /// until one closes. Each open connection holds a file descriptor and
    /// about 26 KiB when idle, so this bounds what idle connections cost
    /// (8192: about 210 MiB). The server takes at most half its open-file
    /// limit (`ulimit -n`), so chunk files always find descriptors.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Longest a client may take to send a request's headers (the connection is closed).
    #[serde(default = "default_header_timeout")]
    pub header_read_timeout_seconds: u64,
    /// Longest a request body may go without sending more bytes (408).
    #[serde(default = "default_body_timeout")]
    pub body_read_timeout_seconds: u64,
    /// Slowest a request body may arrive on average, after a grace of
    /// `body_read_timeout_seconds` (408 below it; 0: no minimum): a body
    /// must have arrived whole by its start plus `body_read_timeout_seconds`
    /// plus one second per this many bytes received (Apache's
    /// `mod_reqtimeout` `MinRate`), so a client trickling bytes just often
    /// enough to dodge the idle timeout is cut off after the grace.
    #[serde(default = "default_min_body_rate")]
    pub min_body_bytes_per_second: u64,
    /// Memory all request bodies being received and stored (array data:
    /// store protocol PUTs, slice writes; documents: JSON, XML) may hold at
    /// once: a body counts
    /// what its buffer holds as its bytes arrive (as much again as arrived
    /// ahead of them, at most 8 MiB; all of this at most for one body) until its request is
    /// answered; one that would go past it is 503 at once (nothing waits).
    #[serde(default = "default_upload_budget")]
    pub upload_budget_bytes: u64,
    /// Most chunks (inner chunks for sharded arrays) one slice read or write
    /// may touch (413 beyond): bounds a request's work before it starts.
    #[serde(default = "default_max_chunks_per_request")]
    pub max_chunks_per_request: u64,
    /// Largest decoded chunk (or inner chunk) an array may declare, in bytes:
    /// creating or opening an array with larger chunks is refused (422
    /// naming this limit), so no single chunk can need more memory.
    #[serde(default = "default_max_decoded_chunk")]
    pub max_decoded_chunk_bytes: u64,
    /// Requests whose bodies are still arriving, counted apart from
    /// `max_concurrent_requests` (more are answered 503 at once): a request
    /// takes a request slot only once its body is whole, so slow or stalled
    /// uploads cannot starve other requests of slots.
    #[serde(default = "default_max_uploads")]
    pub max_concurrent_uploads: usize,
    /// Most inner chunks one shard of a sharded array may hold (its index
    /// is 16 bytes per inner chunk, read and rewritten by every partial
    /// access): creating or opening an array with more is refused (422).
    #[serde(default = "default_max_inner_chunks")]
    pub max_inner_chunks_per_shard: u64,
    /// Largest fill value an array may declare, in bytes (422 beyond): a
    /// fill value is repeated in every missing element of an answer.
    #[serde(default = "default_max_fill_value")]
    pub max_fill_value_bytes: u64,
    /// Decoded bytes all chunk decodes of the process may produce at once
    /// (each decode reserves its expected size before it starts and waits
    /// for room), so concurrent decompression bombs share one cap.
    #[serde(default = "default_decode_budget")]
    pub decode_budget_bytes: u64,
    /// Memory the process spends parsing metadata documents (and JSON
    /// bodies) at once, each counted at 32 times its size (a parsed JSON
    /// tree takes up to ~30 times its text); more parses wait. A request
    /// with a document body takes its share once the body is whole.
    #[serde(default = "default_document_budget")]
    pub document_parse_budget_bytes: u64,
    /// Memory all started slice and chunk read answers may hold at once
    /// (slabs being assembled, messages queued for the socket): each large
    /// answer takes a share of 4 × `read_slab_bytes` (at most this) before
    /// its first slab and keeps it until its last byte is written; answers
    /// waiting for a share wait within the request timeout. Answers of at
    /// most 1 MiB take no share (they hold at most about 3 MiB each).
    #[serde(default = "default_read_answer_budget")]
    pub read_answer_budget_bytes: u64,
    /// Longest a connection may go without the client taking any byte of an
    /// answer being written to it (the connection is closed): a client that
    /// stops reading cannot hold an answer's memory for longer.
    #[serde(default = "default_send_stall_timeout")]
    pub send_stall_timeout_seconds: u64,
    /// Most pixels one rendered image (`format=png`, previews) may have
    /// (413 beyond): the selection is rendered in memory, up to 32 bytes a
    /// pixel (four channels of 8-byte values).
    #[serde(default = "default_max_image_pixels")]
    pub max_image_pixels: u64,
    /// Memory all rendered images (`format=png`, previews) may use at once:
    /// each takes `values × (4 × element size + 12) + pixels × 8` bytes of
    /// it (the gathered elements, their scaling keys, the pixels and the
    /// encoder's rows; `values` is pixels × channels) before it gathers its
    /// elements, and keeps it until it is encoded; an image that needs more
    /// than all of it is 413, others wait within the request timeout.
    #[serde(default = "default_render_budget")]
    pub render_budget_bytes: u64,
}

/// Caches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cache {
    /// Bytes of small objects each local mount keeps in memory (0 disables).
    #[serde(default = "default_object_cache")]
    pub object_bytes: u64,
    /// Objects larger than this are never cached (1 MiB: larger ones are
    /// read on every GET; see [`ObjectCacheSettings::max_object_bytes`]).
    #[serde(default = "default_object_max")]
    pub object_max_bytes: u64,
    /// Bytes of decoded chunks (and shard indexes) kept across requests (0
    /// disables).
    #[serde(default = "default_chunk_cache")]
    pub chunk_bytes: u64,
}

impl Default for Cache {
    fn default() -> Self {
        Self {
            object_bytes: default_object_cache(),
            object_max_bytes: default_object_max(),
            chunk_bytes: default_chunk_cache(),
        }
    }
}

impl Cache {
    /// The storage layer's view of these settings.
    #[must_use]
    pub fn object_cache(&self) -> ObjectCacheSettings {
        ObjectCacheSettings { capacity_bytes: self.object_bytes, max_object_bytes: self.object_max_bytes }
    }
}

const fn default_object_cache() -> u64 {
    256 * 1024 * 1024
}
const fn default_object_max() -> u64 {
    1024 * 1024
}
const fn default_chunk_cache() -> u64 {
    256 * 1024 * 1024
}
const fn default_max_selection() -> u64 {
    16 * 1024 * 1024 * 1024
}
const fn default_max_json() -> u64 {
    16 * 1024 * 1024
}
const fn default_max_chunks_per_request() -> u64 {
    1 << 20
}
const fn default_max_decoded_chunk() -> u64 {
    1024 * 1024 * 1024
}
const fn default_max_inner_chunks() -> u64 {
    1 << 16
}
const fn default_max_fill_value() -> u64 {
    64 * 1024
}
const fn default_decode_budget() -> u64 {
    2 * 1024 * 1024 * 1024
}
const fn default_document_budget() -> u64 {
    1024 * 1024 * 1024
}
const fn default_read_answer_budget() -> u64 {
    1024 * 1024 * 1024
}
const fn default_upload_budget() -> u64 {
    1024 * 1024 * 1024
}
const fn default_min_body_rate() -> u64 {
    512
}
const fn default_send_stall_timeout() -> u64 {
    60
}
const fn default_max_connections() -> usize {
    8192
}
const fn default_render_budget() -> u64 {
    2 * 1024 * 1024 * 1024
}
const fn default_max_image_pixels() -> u64 {
    16 * 1024 * 1024
}
const fn default_slab() -> u64 {
    32 * 1024 * 1024
}

/// Cross-origin access for browser viewers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cors {
    /// Origins allowed to call zarrd from a browser; `["*"]` allows any.
    #[serde(default = "default_origins")]
    pub allowed_origins: Vec<String>,
}

/// Logging.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Log {
    /// `text` for people, `json` for log collectors.
    #[serde(default)]
    pub format: LogFormat,
}

/// Log line format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

fn default_bind() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}
const fn default_grace() -> u64 {
    30
}
const fn default_max_put() -> u64 {
    256 * 1024 * 1024
}
const fn default_max_list() -> usize {
    100_000
}
const fn default_max_body() -> u64 {
    16 * 1024 * 1024
}
const fn default_request_timeout() -> u64 {
    300
}
const fn default_max_concurrent() -> usize {
    1024
}
const fn default_max_uploads() -> usize {
    1024
}
const fn default_header_timeout() -> u64 {
    10
}
const fn default_body_timeout() -> u64 {
    30
}
fn default_origins() -> Vec<String> {
    vec!["*".to_string()]
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_put_bytes: default_max_put(),
            max_list_entries: default_max_list(),
            max_selection_bytes: default_max_selection(),
            max_json_elements: default_max_json(),
            read_slab_bytes: default_slab(),
            max_body_bytes: default_max_body(),
            request_timeout_seconds: default_request_timeout(),
            max_concurrent_requests: default_max_concurrent(),
            max_connections: default_max_connections(),
            header_read_timeout_seconds: default_header_timeout(),
            body_read_timeout_seconds: default_body_timeout(),
            min_body_bytes_per_second: default_min_body_rate(),
            upload_budget_bytes: default_upload_budget(),
            max_chunks_per_request: default_max_chunks_per_request(),
            max_decoded_chunk_bytes: default_max_decoded_chunk(),
            max_concurrent_uploads: default_max_uploads(),
            max_inner_chunks_per_shard: default_max_inner_chunks(),
            max_fill_value_bytes: default_max_fill_value(),
            decode_budget_bytes: default_decode_budget(),
            document_parse_budget_bytes: default_document_budget(),
            read_answer_budget_bytes: default_read_answer_budget(),
            send_stall_timeout_seconds: default_send_stall_timeout(),
            max_image_pixels: default_max_image_pixels(),
            render_budget_bytes: default_render_budget(),
        }
    }
}
impl Default for Cors {
    fn default() -> Self {
        Self { allowed_origins: default_origins() }
    }
}
impl Default for Log {
    fn default() -> Self {
        Self { format: LogFormat::Text }
    }
}
impl Default for Config {
    fn default() -> Self {
        Self {
            bind: default_bind(),
            bind_reuse_port: false,
            shutdown_grace_seconds: default_grace(),
            limits: Limits::default(),
            cache: Cache::default(),
            cors: Cors::default(),
            log: Log::default(),
            auth: Auth::default(),
            tls: None,
            mounts: BTreeMap::new(),
            ignored_env: Vec::new(),
        }
    }
}

/// The field serde names in an "unknown field `x`" error.
fn unknown_field(message: &str) -> Option<&str> {
    let rest = &message[message.find("unknown field `")? + "unknown field `".len()..];
    rest.split('`').next()
}

/// The name and directory of the embedded default mount.
pub const DEFAULT_MOUNT: (&str, &str) = ("data", "./data");

impl Config {
    /// Parses a TOML document.
    ///
    /// # Errors
    /// The TOML error, which names the unknown or invalid key.
    pub fn from_toml_str(text: &str) -> anyhow::Result<Self> {
        let cfg: Self = toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Loads the file (when given), then applies `ZARRD_*` variables from `env`.
    ///
    /// A variable that names no option is left out and listed in
    /// [`Config::ignored_env`] (a warning, not a refusal: the environment is
    /// shared with other tools); an unknown key in the file is an error, as
    /// is a known option with an invalid value from either.
    ///
    /// # Errors
    /// Unreadable file, invalid TOML, unknown option in the file, invalid value.
    pub fn load(file: Option<&Path>, env: impl IntoIterator<Item = (String, String)>) -> anyhow::Result<Self> {
        let file_table = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read configuration file {}", path.display()))?;
                text.parse::<toml::Table>()
                    .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?
            }
            None => toml::Table::new(),
        };
        let mut vars = Vec::new();
        for (name, value) in env {
            let Some(rest) = name.strip_prefix("ZARRD_") else { continue };
            if rest.starts_with("TEST_") || rest.is_empty() {
                continue;
            }
            let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
            if path.iter().any(String::is_empty) {
                bail!("environment variable {name}: empty key segment");
            }
            vars.push((name, path, value));
        }
        let source = file.map_or_else(|| "environment".to_string(), |p| p.display().to_string());
        let mut ignored: Vec<String> = Vec::new();
        // Each round leaves out one more variable that names an unknown key
        // (at most one round per variable).
        let cfg: Self = loop {
            let mut table = file_table.clone();
            for (name, path, value) in vars.iter().filter(|(n, _, _)| !ignored.contains(n)) {
                set_path(&mut table, path, parse_env_value(value))
                    .with_context(|| format!("environment variable {name}"))?;
            }
            match table.try_into::<Self>() {
                Ok(cfg) => break cfg,
                Err(e) => {
                    let text = e.to_string();
                    let culprit = unknown_field(&text).and_then(|field| {
                        vars.iter()
                            .filter(|(n, _, _)| !ignored.contains(n))
                            .find(|(_, path, _)| path.last().is_some_and(|last| last == field))
                            .map(|(n, _, _)| n.clone())
                    });
                    match culprit {
                        Some(name) => ignored.push(name),
                        None => bail!("{source}: {}", text.trim_end()),
                    }
                }
            }
        };
        let cfg = Self { ignored_env: ignored, ..cfg };
        // Mounts may still come from the command line: the caller runs
        // `validate` (which checks the mounts tokens name) once they are in.
        cfg.validate_values()?;
        Ok(cfg)
    }

    /// Checks what serde cannot: names and values.
    ///
    /// # Errors
    /// The first problem found, naming the option.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.validate_values()?;
        self.validate_token_mounts()
    }

    /// Everything [`Config::validate`] checks except that the mounts named in
    /// token scopes exist.
    fn validate_values(&self) -> anyhow::Result<()> {
        for name in self.mounts.keys() {
            if !valid_mount_name(name) {
                bail!("mounts.{name}: invalid mount name (letters, digits, `-`, `_`, `.`; not starting with `.`)");
            }
        }
        let l = &self.limits;
        let positive = [
            ("max_put_bytes", l.max_put_bytes),
            ("max_list_entries", l.max_list_entries as u64),
            ("max_body_bytes", l.max_body_bytes),
            ("max_selection_bytes", l.max_selection_bytes),
            ("request_timeout_seconds", l.request_timeout_seconds),
            ("max_concurrent_requests", l.max_concurrent_requests as u64),
            ("max_concurrent_uploads", l.max_concurrent_uploads as u64),
            ("max_connections", l.max_connections as u64),
            ("header_read_timeout_seconds", l.header_read_timeout_seconds),
            ("body_read_timeout_seconds", l.body_read_timeout_seconds),
            ("max_chunks_per_request", l.max_chunks_per_request),
            ("max_decoded_chunk_bytes", l.max_decoded_chunk_bytes),
            ("max_inner_chunks_per_shard", l.max_inner_chunks_per_shard),
            ("decode_budget_bytes", l.decode_budget_bytes),
            ("document_parse_budget_bytes", l.document_parse_budget_bytes),
            ("read_answer_budget_bytes", l.read_answer_budget_bytes),
            ("upload_budget_bytes", l.upload_budget_bytes),
            ("send_stall_timeout_seconds", l.send_stall_timeout_seconds),
            ("max_image_pixels", l.max_image_pixels),
            ("render_budget_bytes", l.render_budget_bytes),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            bail!("limits.{name}: must be greater than 0");
        }
        if self.limits.read_slab_bytes < 4096 {
            bail!("limits.read_slab_bytes: must be at least 4096");
        }
        self.validate_auth()?;
        // At least 32 bytes, and not a placeholder: a key of one repeated
        // byte or of blanks (40 spaces passed the length check) is refused.
        if self.auth.link_key.as_ref().is_some_and(|k| {
            let key = k.expose().as_bytes();
            key.len() < 32 || key.iter().all(u8::is_ascii_whitespace) || key.iter().all(|&b| b == key[0])
        }) {
            bail!(
                "auth.link_key: at least 32 bytes, not blanks or one repeated character (e.g. `openssl rand -hex 32`)"
            );
        }
        if self.cors.allowed_origins.is_empty() {
            bail!("cors.allowed_origins: list at least one origin, or \"*\"");
        }
        for origin in &self.cors.allowed_origins {
            if origin != "*" && axum::http::HeaderValue::from_str(origin).is_err() {
                bail!("cors.allowed_origins: `{origin}` is not a valid origin");
            }
        }
        Ok(())
    }

    fn validate_auth(&self) -> anyhow::Result<()> {
        let mut names = BTreeSet::new();
        let mut hashes = BTreeSet::new();
        for (i, t) in self.auth.tokens.iter().enumerate() {
            let at = format!("auth.tokens[{i}]");
            if t.name.is_empty() || !t.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
                bail!("{at}.name: `{}` is not a valid token name (letters, digits, `-`, `_`, `.`)", t.name);
            }
            if !names.insert(t.name.as_str()) {
                bail!("{at}.name: `{}` is used by two tokens", t.name);
            }
            if !hashes.insert(t.sha256.0) {
                bail!("{at}.sha256: the same hash is given for two tokens");
            }
            if t.scopes.is_empty() {
                bail!("{at}.scopes: give at least one mount (or \"*\") and its scopes");
            }
            for (mount, scopes) in &t.scopes {
                if scopes.is_empty() {
                    bail!("{at}.scopes.{mount}: list at least one of read, write, admin");
                }
            }
        }
        Ok(())
    }

    fn validate_token_mounts(&self) -> anyhow::Result<()> {
        for (i, t) in self.auth.tokens.iter().enumerate() {
            for mount in t.scopes.keys() {
                // Before `with_default_mount`: no mount configured means the embedded one.
                let known = mount == "*"
                    || self.mounts.contains_key(mount)
                    || (self.mounts.is_empty() && mount == DEFAULT_MOUNT.0);
                if !known {
                    bail!("auth.tokens[{i}].scopes.{mount}: no mount named `{mount}` is configured");
                }
            }
        }
        Ok(())
    }

    /// Adds the embedded default mount (`data` → `./data`, created if missing)
    /// when no mount is configured.
    pub fn with_default_mount(mut self) -> Self {
        if self.mounts.is_empty() {
            let mut spec = MountSpec::from_url(DEFAULT_MOUNT.1);
            spec.create = true;
            self.mounts.insert(DEFAULT_MOUNT.0.to_string(), spec);
        }
        self
    }
}

fn parse_env_value(raw: &str) -> toml::Value {
    // Parse as the right-hand side of a TOML assignment; fall back to a string.
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

fn set_path(table: &mut toml::Table, path: &[String], value: toml::Value) -> anyhow::Result<()> {
    let (last, parents) = path.split_last().context("empty key")?;
    let mut cur = table;
    for p in parents {
        let entry = cur.entry(p.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = entry.as_table_mut().with_context(|| format!("`{p}` is not a table"))?;
    }
    cur.insert(last.clone(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
    }

    #[test]
    fn defaults() {
        let c = Config::load(None, env(&[])).unwrap();
        assert_eq!(c, Config::default());
        let c = c.with_default_mount();
        assert_eq!(c.mounts["data"].url, "./data");
        assert!(c.mounts["data"].create);
    }

    #[test]
    fn env_overrides_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("z.toml");
        std::fs::write(&f, "bind = \"127.0.0.1:1\"\n[mounts.a]\nurl = \"memory://\"\n").unwrap();
        let c = Config::load(
            Some(&f),
            env(&[
                ("ZARRD_BIND", "127.0.0.1:2"),
                ("ZARRD_LIMITS__MAX_PUT_BYTES", "10"),
                ("ZARRD_MOUNTS__A__READ_ONLY", "true"),
                ("ZARRD_MOUNTS__B__URL", "s3://bucket/x"),
                ("ZARRD_TEST_BIN", "/ignored"),
                ("OTHER", "x"),
            ]),
        )
        .unwrap();
        assert_eq!(c.bind.port(), 2);
        assert_eq!(c.limits.max_put_bytes, 10);
        assert!(c.mounts["a"].read_only);
        assert_eq!(c.mounts["b"].url, "s3://bucket/x");
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = Config::from_toml_str("colour = 1").unwrap_err().to_string();
        assert!(e.contains("colour"), "{e}");
        let e = Config::from_toml_str("[mounts.a]\nurl = \"memory://\"\nread_only = 3").unwrap_err().to_string();
        assert!(e.contains("read_only"), "{e}");
        let e = Config::from_toml_str("[mounts.a]\nurl = \"memory://\"\nreadonly = true").unwrap_err().to_string();
        assert!(e.contains("readonly"), "{e}");
        // An unknown variable is left out and named; an unknown key in a file stays an error.
        let c = Config::load(None, env(&[("ZARRD_COLOUR", "1"), ("ZARRD_LIMITS__MAX_PUT_BYTES", "10")])).unwrap();
        assert_eq!((c.ignored_env.clone(), c.limits.max_put_bytes), (vec!["ZARRD_COLOUR".to_string()], 10));
        let c = Config::load(
            None,
            env(&[
                ("ZARRD_LIMITS__MAX_PUTBYTES", "1"),
                ("ZARRD_MOUNTS__A__URL", "memory://"),
                ("ZARRD_MOUNTS__A__READONLY", "true"),
            ]),
        )
        .unwrap();
        assert_eq!(c.ignored_env, ["ZARRD_LIMITS__MAX_PUTBYTES", "ZARRD_MOUNTS__A__READONLY"]);
        assert!(c.mounts.contains_key("a"));
        let e = Config::load(None, env(&[("ZARRD_LIMITS__MAX_PUT_BYTES", "many")])).unwrap_err().to_string();
        assert!(e.contains("max_put_bytes"), "{e}");
        let e = Config::from_toml_str("bind = \"nowhere\"").unwrap_err().to_string();
        assert!(e.contains("bind"), "{e}");
        let e = Config::from_toml_str("[limits]\nmax_put_bytes = 0").unwrap_err().to_string();
        assert!(e.contains("limits.max_put_bytes"), "{e}");
    }

    #[test]
    fn auth_and_limits_are_checked_and_named() {
        let token = |scopes: &str| {
            format!(
                "[mounts.data]\nurl = \"memory://\"\n[[auth.tokens]]\nname = \"ci\"\nsha256 = \"{}\"\nscopes = {scopes}\n",
                TokenHash::of(b"a long enough secret").to_hex()
            )
        };
        let c = Config::from_toml_str(&token(r#"{ data = ["write"], "*" = ["read"] }"#)).unwrap();
        assert_eq!(c.auth.tokens[0].scopes["data"], vec![Scope::Write]);
        let e = Config::from_toml_str(&token(r#"{ data = ["rwx"] }"#)).unwrap_err().to_string();
        assert!(e.contains("rwx"), "{e}");
        let e = Config::from_toml_str(&token(r#"{ nope = ["read"] }"#)).unwrap_err().to_string();
        assert!(e.contains("auth.tokens[0].scopes.nope"), "{e}");
        let e = Config::from_toml_str(&token(r#"{ data = [] }"#)).unwrap_err().to_string();
        assert!(e.contains("auth.tokens[0].scopes.data"), "{e}");
        let e = Config::from_toml_str(&token("{}")).unwrap_err().to_string();
        assert!(e.contains("auth.tokens[0].scopes"), "{e}");
        let bad_hash = "[[auth.tokens]]\nname = \"x\"\nsha256 = \"abc\"\nscopes = { data = [\"read\"] }";
        let e = Config::from_toml_str(bad_hash).unwrap_err().to_string();
        assert!(e.contains("sha256") && e.contains("64 hex digits"), "{e}");
        let entry = |name: &str, secret: &[u8]| {
            format!(
                "[[auth.tokens]]\nname = \"{name}\"\nsha256 = \"{}\"\nscopes = {{ data = [\"read\"] }}\n",
                TokenHash::of(secret).to_hex()
            )
        };
        let e =
            Config::from_toml_str(&format!("{}{}", entry("a", b"one"), entry("a", b"two"))).unwrap_err().to_string();
        assert!(e.contains("auth.tokens[1].name"), "{e}");
        let e =
            Config::from_toml_str(&format!("{}{}", entry("a", b"one"), entry("b", b"one"))).unwrap_err().to_string();
        assert!(e.contains("auth.tokens[1].sha256"), "{e}");
        let e = Config::from_toml_str(&entry("a b", b"one")).unwrap_err().to_string();
        assert!(e.contains("auth.tokens[0].name"), "{e}");
        // The embedded default mount may be named before it exists.
        let env_token = format!(
            "[{{ name = \"ci\", sha256 = \"{}\", scopes = {{ data = [\"read\"] }} }}]",
            TokenHash::of(b"x").to_hex()
        );
        let c = Config::load(None, env(&[("ZARRD_AUTH__TOKENS", &env_token)])).unwrap();
        assert_eq!(c.auth.tokens[0].name, "ci");
        for name in [
            "max_body_bytes",
            "request_timeout_seconds",
            "max_concurrent_requests",
            "max_connections",
            "header_read_timeout_seconds",
            "body_read_timeout_seconds",
            "max_selection_bytes",
            "max_inner_chunks_per_shard",
            "decode_budget_bytes",
            "document_parse_budget_bytes",
            "read_answer_budget_bytes",
            "upload_budget_bytes",
            "send_stall_timeout_seconds",
            "render_budget_bytes",
        ] {
            let e = Config::from_toml_str(&format!("[limits]\n{name} = 0")).unwrap_err().to_string();
            assert!(e.contains(&format!("limits.{name}")), "{e}");
        }
        let c = Config::from_toml_str("[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"").unwrap();
        assert_eq!(c.tls.unwrap().key, PathBuf::from("k.pem"));
        let e = Config::from_toml_str("[tls]\ncert = \"c.pem\"").unwrap_err().to_string();
        assert!(e.contains("key"), "{e}");
    }

    #[test]
    fn link_keys_that_are_placeholders_are_refused() {
        let with = |key: &str| Config::from_toml_str(&format!("[auth]\nlink_key = \"{key}\""));
        for bad in ["short", &" ".repeat(40), &"a".repeat(64), &"\\t".repeat(40)] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains("auth.link_key"), "{bad:?}: {e}");
        }
        assert!(with(&"0123456789abcdef".repeat(4)).is_ok());
    }

    #[test]
    fn token_hash_is_sha256_hex() {
        // SHA-256("test"), as `printf test | sha256sum` prints it.
        let h = TokenHash::of(b"test");
        assert_eq!(h.to_hex(), "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
        assert_eq!(h.to_hex().parse::<TokenHash>().unwrap(), h);
        assert_eq!(h.to_hex().to_uppercase().parse::<TokenHash>().unwrap(), h);
        assert!("zz".repeat(32).parse::<TokenHash>().unwrap_err().contains("not hex"));
    }

    #[test]
    fn example_file_is_valid() {
        let text = include_str!("../config/zarrd.example.toml");
        let c = Config::from_toml_str(text).unwrap();
        assert_eq!(c.bind, default_bind());
    }
}
