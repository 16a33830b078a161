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

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

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
    /// Named storage locations.
    #[serde(default)]
    pub mounts: BTreeMap<String, MountSpec>,
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
    /// Largest selection one data or chunk read may ask for, in decoded
    /// bytes (413 beyond). Reads stream, so this bounds response size and
    /// time, not memory.
    #[serde(default = "default_max_selection")]
    pub max_selection_bytes: u64,
    /// Most elements one JSON answer may hold (413 beyond): a JSON client
    /// parses the whole answer in memory, at tens of bytes per element.
    #[serde(default = "default_max_json")]
    pub max_json_elements: u64,
    /// Decoded bytes a streamed read assembles at once (one slab); memory
    /// per read is about two slabs plus the chunks being decoded.
    #[serde(default = "default_slab")]
    pub read_slab_bytes: u64,
}

/// Caches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cache {
    /// Bytes of small objects each local mount keeps in memory (0 disables).
    #[serde(default = "default_object_cache")]
    pub object_bytes: u64,
    /// Objects larger than this are never cached.
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
    4 * 1024 * 1024
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
            shutdown_grace_seconds: default_grace(),
            limits: Limits::default(),
            cache: Cache::default(),
            cors: Cors::default(),
            log: Log::default(),
            mounts: BTreeMap::new(),
        }
    }
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
    /// # Errors
    /// Unreadable file, invalid TOML, unknown option, invalid value.
    pub fn load(file: Option<&Path>, env: impl IntoIterator<Item = (String, String)>) -> anyhow::Result<Self> {
        let mut table = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read configuration file {}", path.display()))?;
                text.parse::<toml::Table>()
                    .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?
            }
            None => toml::Table::new(),
        };
        for (name, value) in env {
            let Some(rest) = name.strip_prefix("ZARRD_") else { continue };
            if rest.starts_with("TEST_") || rest.is_empty() {
                continue;
            }
            let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
            if path.iter().any(String::is_empty) {
                bail!("environment variable {name}: empty key segment");
            }
            set_path(&mut table, &path, parse_env_value(&value))
                .with_context(|| format!("environment variable {name}"))?;
        }
        let source = file.map_or_else(|| "environment".to_string(), |p| p.display().to_string());
        let cfg: Self =
            table.try_into().map_err(|e: toml::de::Error| anyhow::anyhow!("{source}: {}", e.to_string().trim_end()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks what serde cannot: names and values.
    ///
    /// # Errors
    /// The first problem found, naming the option.
    pub fn validate(&self) -> anyhow::Result<()> {
        for name in self.mounts.keys() {
            if !valid_mount_name(name) {
                bail!("mounts.{name}: invalid mount name (letters, digits, `-`, `_`, `.`; not starting with `.`)");
            }
        }
        if self.limits.max_put_bytes == 0 {
            bail!("limits.max_put_bytes: must be greater than 0");
        }
        if self.limits.max_list_entries == 0 {
            bail!("limits.max_list_entries: must be greater than 0");
        }
        if self.limits.read_slab_bytes < 4096 {
            bail!("limits.read_slab_bytes: must be at least 4096");
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
        let e = Config::load(None, env(&[("ZARRD_COLOUR", "1")])).unwrap_err().to_string();
        assert!(e.contains("colour"), "{e}");
        let e = Config::from_toml_str("bind = \"nowhere\"").unwrap_err().to_string();
        assert!(e.contains("bind"), "{e}");
        let e = Config::from_toml_str("[limits]\nmax_put_bytes = 0").unwrap_err().to_string();
        assert!(e.contains("limits.max_put_bytes"), "{e}");
    }

    #[test]
    fn example_file_is_valid() {
        let text = include_str!("../config/zarrd.example.toml");
        let c = Config::from_toml_str(text).unwrap();
        assert_eq!(c.bind, default_bind());
    }
}
