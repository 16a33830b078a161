//! Mounts: named storage locations built from URLs.
//!
//! | URL | backend |
//! |---|---|
//! | `file:///abs/path`, `/abs/path`, `rel/path` | local directory |
//! | `memory://` | in-process memory (lost at exit) |
//! | `s3://bucket/prefix` | S3 or an S3-compatible server |
//! | `gs://bucket/prefix` | Google Cloud Storage |
//! | `az://container/prefix` | Azure Blob Storage |
//!
//! Cloud credentials come from the mount's `options` (the `object_store`
//! configuration keys, e.g. `region`, `endpoint`, `access_key_id`,
//! `allow_http`) and from the standard environment variables (`AWS_*`,
//! `GOOGLE_*`, `AZURE_*`); options win.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use bytes::Bytes;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::memory::InMemory;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use super::local::{LocalBackend, ObjectCacheSettings};
use super::measured::Measured;
use super::object::ObjectBackend;
pub use super::retry::RetrySpec;
use super::{KeyPrefix, PutCondition, PutOutcome, Storage, StorageError, StorageResult, StoreKey};
use crate::metrics::StorageMetrics;

/// Number of lock stripes per mount serialising writes to one key.
const WRITE_STRIPES: usize = 256;

/// The most keys [`Mount::delete_many`] deletes in one batch (S3's most
/// per `DeleteObjects` request).
pub const DELETE_BATCH: usize = 1000;

/// The most write-lock stripes one batch of [`Mount::delete_many`] holds:
/// a sixteenth of them.
pub const STRIPES_PER_DELETE: usize = WRITE_STRIPES / 16;

/// `keys` (sorted by stripe) cut into batches of at most [`DELETE_BATCH`]
/// keys and [`STRIPES_PER_DELETE`] distinct stripes, in order.
fn delete_batches<'a, T>(keys: &'a [(usize, T)]) -> impl Iterator<Item = &'a [(usize, T)]> + 'a {
    let mut rest = keys;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (mut end, mut stripes) = (0, 0);
        while end < rest.len() && end < DELETE_BATCH {
            if end == 0 || rest[end].0 != rest[end - 1].0 {
                if stripes == STRIPES_PER_DELETE {
                    break;
                }
                stripes += 1;
            }
            end += 1;
        }
        let (batch, after) = rest.split_at(end);
        rest = after;
        Some(batch)
    })
}

/// A mount as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountSpec {
    /// Where the data is: `file:///abs/path`, a plain path, `memory://`,
    /// `s3://bucket/prefix`, `gs://bucket/prefix` or `az://container/prefix`.
    pub url: String,
    /// Refuse writes (PUT, DELETE answer 405).
    #[serde(default)]
    pub read_only: bool,
    /// Create a missing local directory instead of failing at start.
    #[serde(default)]
    pub create: bool,
    /// Let callers without a token read (when tokens are configured).
    #[serde(default)]
    pub anonymous_read: bool,
    /// Backend options (`object_store` configuration keys).
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// When cached metadata is checked against storage (TensorStore's
    /// `recheck_cached_metadata`): `"open"` or `true` (every request,
    /// revalidating by ETag; the default), `false` (never: only writes
    /// through zarrd refresh it), or a number of seconds.
    #[serde(default = "default_recheck_metadata")]
    pub recheck_cached_metadata: RecheckPolicy,
    /// When cached decoded chunks are revalidated against storage (see
    /// [`RecheckPolicy`]); absent: [`RecheckPolicy::default_for`] the URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recheck_cached_data: Option<RecheckPolicy>,
    /// Whether a missing chunk reads as the fill value (`true`, the
    /// default) or is an error naming it (TensorStore's
    /// `fill_missing_data_reads`). A request may override it.
    #[serde(default = "default_true")]
    pub fill_missing_data_reads: bool,
    /// How an object store mount retries failed requests
    /// ([`RetrySpec`]); absent: `object_store`'s defaults. Refused for
    /// local and memory mounts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetrySpec>,
    /// The `Cache-Control` of the store protocol's object reads (absent:
    /// `no-cache`, so clients revalidate by ETag). A read-only archive may
    /// say `max-age=86400, immutable` so viewers stop revalidating every
    /// chunk. Printable ASCII, at most [`MAX_CACHE_CONTROL`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
}

/// The longest `cache_control` a mount may set.
pub const MAX_CACHE_CONTROL: usize = 256;

const fn default_true() -> bool {
    true
}

const fn default_recheck_metadata() -> RecheckPolicy {
    RecheckPolicy::Always
}

/// When data cached from a mount (decoded chunks, shard indexes) is checked
/// against storage before use — TensorStore's `recheck_cached_data`.
///
/// Writes through zarrd (either face) invalidate what they change whatever
/// the policy; the policy is about changes made behind zarrd's back.
///
/// ```
/// use zarrd::storage::mount::RecheckPolicy;
/// let p: RecheckPolicy = serde_json::from_str(r#""never""#).unwrap();
/// assert_eq!(p, RecheckPolicy::Never);
/// let p: RecheckPolicy = serde_json::from_str(r#""30""#).unwrap();
/// assert_eq!(p, RecheckPolicy::After(std::time::Duration::from_secs(30)));
/// let p: RecheckPolicy = serde_json::from_str("2.5").unwrap();
/// assert_eq!(p, RecheckPolicy::After(std::time::Duration::from_millis(2500)));
/// assert!(serde_json::from_str::<RecheckPolicy>(r#""sometimes""#).is_err());
/// # use zarrd::storage::mount::MountSpec;
/// let spec: MountSpec = toml::from_str("url = \"memory://\"\nrecheck_cached_metadata = 30").unwrap();
/// assert_eq!(spec.recheck_cached_metadata, RecheckPolicy::After(std::time::Duration::from_secs(30)));
/// let spec: MountSpec = toml::from_str("url = \"memory://\"\nrecheck_cached_metadata = \"open\"").unwrap();
/// assert_eq!(spec.recheck_cached_metadata, RecheckPolicy::Always);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecheckPolicy {
    /// Cached data is used as long as it is cached (`"never"`): right when
    /// nothing but zarrd writes the storage.
    Never,
    /// Every use revalidates by ETag first (`"always"`, TensorStore's
    /// `true`): one `stat` on a local directory, one HEAD on an object store.
    Always,
    /// Revalidated when older than this (a number of seconds, as a number or
    /// a string).
    After(std::time::Duration),
}

impl RecheckPolicy {
    /// The default for a mount URL: `never` for `memory://` (nothing else
    /// can write it), `always` for everything else, as TensorStore does.
    #[must_use]
    pub fn default_for(url: &str) -> Self {
        if url.starts_with("memory://") {
            Self::Never
        } else {
            Self::Always
        }
    }

    fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "never" | "false" => Ok(Self::Never),
            "always" | "true" | "open" => Ok(Self::Always),
            other => other
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| Self::After(std::time::Duration::from_secs_f64(s)))
                .ok_or_else(|| format!("`{other}`: expected \"never\", \"always\" or a number of seconds")),
        }
    }
}

impl Serialize for RecheckPolicy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Never => s.serialize_str("never"),
            Self::Always => s.serialize_str("always"),
            Self::After(d) => s.serialize_str(&d.as_secs_f64().to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for RecheckPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Number(f64),
            Text(String),
        }
        let text = match Raw::deserialize(d)? {
            Raw::Bool(b) => b.to_string(),
            Raw::Number(n) => n.to_string(),
            Raw::Text(t) => t,
        };
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Called with every key written or deleted through a mount (the service's
/// caches invalidate on it).
pub type WriteListener = Arc<dyn Fn(&StoreKey) + Send + Sync>;

struct Listener(std::sync::OnceLock<WriteListener>);

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() { "Listener(set)" } else { "Listener(unset)" })
    }
}

impl MountSpec {
    /// A writable mount of `url` with no options.
    #[must_use]
    pub fn from_url(url: &str) -> Self {
        Self {
            url: url.to_string(),
            read_only: false,
            create: false,
            anonymous_read: false,
            options: BTreeMap::new(),
            recheck_cached_metadata: RecheckPolicy::Always,
            recheck_cached_data: None,
            fill_missing_data_reads: true,
            retry: None,
            cache_control: None,
        }
    }
}

/// Why a mount could not be built.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("mount `{mount}`: url `{url}`: {reason}")]
    BadUrl { mount: String, url: String, reason: String },
    #[error("mount `{mount}`: option `{option}` is not known for {scheme} mounts")]
    UnknownOption { mount: String, option: String, scheme: String },
    #[error("mount `{mount}` ({url}) is unreachable: {reason}")]
    Unreachable { mount: String, url: String, reason: String },
    #[error("mount name `{0}` is invalid: use letters, digits, `-`, `_` and `.` (not starting with `.`)")]
    BadName(String),
    #[error("mount `{mount}`: {setting}: {reason}")]
    BadSetting { mount: String, setting: &'static str, reason: String },
}

/// A mount, ready to serve.
#[derive(Debug)]
pub struct Mount {
    name: String,
    url: String,
    read_only: bool,
    recheck_metadata: RecheckPolicy,
    anonymous_read: bool,
    storage: Arc<dyn Storage>,
    metrics: Arc<StorageMetrics>,
    write_locks: Vec<Mutex<()>>,
    recheck: RecheckPolicy,
    fill_missing: bool,
    listener: Listener,
    cache_control: Option<Arc<str>>,
}

/// True for a usable mount name.
#[must_use]
pub fn valid_mount_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl Mount {
    /// Builds a mount from its spec. Does not contact remote storage; call
    /// [`Mount::probe`] for that.
    ///
    /// # Errors
    /// A [`MountError`] naming the mount and what is wrong.
    pub fn build(name: &str, spec: &MountSpec) -> Result<Self, MountError> {
        Self::build_with(name, spec, ObjectCacheSettings::default())
    }

    /// As [`Mount::build`], with the object cache sized for local mounts.
    ///
    /// # Errors
    /// A [`MountError`] naming the mount and what is wrong.
    pub fn build_with(name: &str, spec: &MountSpec, cache: ObjectCacheSettings) -> Result<Self, MountError> {
        if !valid_mount_name(name) {
            return Err(MountError::BadName(name.to_string()));
        }
        let bad = |reason: String| MountError::BadUrl { mount: name.into(), url: spec.url.clone(), reason };
        if let Some(cc) = &spec.cache_control {
            if cc.trim().is_empty() || cc.len() > MAX_CACHE_CONTROL || !cc.bytes().all(|b| (b' '..=b'~').contains(&b)) {
                return Err(MountError::BadSetting {
                    mount: name.into(),
                    setting: "cache_control",
                    reason: format!(
                        "expected a Cache-Control value of printable ASCII, at most {MAX_CACHE_CONTROL} bytes"
                    ),
                });
            }
        }
        let storage: Arc<dyn Storage> = match spec.url.split_once("://") {
            None => Arc::new(Self::local(name, spec, PathBuf::from(&spec.url), cache)?),
            Some(("file", rest)) => {
                let path = if rest.starts_with('/') {
                    url::Url::parse(&spec.url)
                        .map_err(|e| bad(e.to_string()))?
                        .to_file_path()
                        .map_err(|()| bad("not a local path".into()))?
                } else {
                    // file://relative/path: relative to the working directory.
                    PathBuf::from(rest)
                };
                Arc::new(Self::local(name, spec, path, cache)?)
            }
            Some(("memory", rest)) => {
                if !rest.trim_matches('/').is_empty() {
                    return Err(bad("memory mounts take no path: write `memory://`".into()));
                }
                Self::reject_options(name, spec, "memory")?;
                Arc::new(ObjectBackend::new(Arc::new(InMemory::new()), "").map_err(|e| bad(e.to_string()))?)
            }
            Some((scheme @ ("s3" | "gs" | "az"), _)) => {
                let url = url::Url::parse(&spec.url).map_err(|e| bad(e.to_string()))?;
                if url.host_str().is_none_or(str::is_empty) {
                    return Err(bad(format!("{scheme}:// needs a bucket: {scheme}://bucket/prefix")));
                }
                let prefix = url.path().trim_matches('/').to_string();
                let retry = spec.retry.unwrap_or_default().to_config().map_err(bad)?;
                let opts = |option: &str| MountError::UnknownOption {
                    mount: name.into(),
                    option: option.into(),
                    scheme: scheme.into(),
                };
                let backend = match scheme {
                    "s3" => {
                        let mut b = AmazonS3Builder::from_env().with_url(spec.url.as_str()).with_retry(retry);
                        for (k, v) in &spec.options {
                            let key = AmazonS3ConfigKey::from_str(&k.to_ascii_lowercase()).map_err(|_| opts(k))?;
                            b = b.with_config(key, v);
                        }
                        ObjectBackend::paged(Arc::new(b.build().map_err(|e| bad(e.to_string()))?), &prefix)
                    }
                    "gs" => {
                        let mut b = GoogleCloudStorageBuilder::from_env().with_url(spec.url.as_str()).with_retry(retry);
                        for (k, v) in &spec.options {
                            let key = GoogleConfigKey::from_str(&k.to_ascii_lowercase()).map_err(|_| opts(k))?;
                            b = b.with_config(key, v);
                        }
                        ObjectBackend::paged(Arc::new(b.build().map_err(|e| bad(e.to_string()))?), &prefix)
                    }
                    _ => {
                        let mut b = MicrosoftAzureBuilder::from_env().with_url(spec.url.as_str()).with_retry(retry);
                        for (k, v) in &spec.options {
                            let key = AzureConfigKey::from_str(&k.to_ascii_lowercase()).map_err(|_| opts(k))?;
                            b = b.with_config(key, v);
                        }
                        ObjectBackend::paged(Arc::new(b.build().map_err(|e| bad(e.to_string()))?), &prefix)
                    }
                };
                Arc::new(backend.map_err(|e| bad(e.to_string()))?)
            }
            Some((scheme, _)) => {
                return Err(bad(format!(
                    "unsupported scheme `{scheme}`: use file://, memory://, s3://, gs:// or az://"
                )))
            }
        };
        let mut mount = Self::from_storage(name, &redact(&spec.url), spec.read_only, storage);
        mount.recheck = spec.recheck_cached_data.unwrap_or_else(|| RecheckPolicy::default_for(&spec.url));
        mount.fill_missing = spec.fill_missing_data_reads;
        mount.recheck_metadata = spec.recheck_cached_metadata;
        mount.anonymous_read = spec.anonymous_read;
        mount.cache_control = spec.cache_control.as_deref().map(|c| Arc::from(c.trim()));
        Ok(mount)
    }

    /// Wraps an existing backend (tests, embedding), measured
    /// ([`Mount::metrics`]).
    #[must_use]
    pub fn from_storage(name: &str, url: &str, read_only: bool, storage: Arc<dyn Storage>) -> Self {
        let metrics = Arc::new(StorageMetrics::default());
        Self {
            name: name.to_string(),
            url: url.to_string(),
            read_only,
            recheck_metadata: RecheckPolicy::Always,
            anonymous_read: false,
            storage: Arc::new(Measured::new(storage, Arc::clone(&metrics))),
            metrics,
            write_locks: (0..WRITE_STRIPES).map(|_| Mutex::new(())).collect(),
            recheck: RecheckPolicy::default_for(url),
            fill_missing: true,
            listener: Listener(std::sync::OnceLock::new()),
            cache_control: None,
        }
    }

    /// Sets the read policies (tests and embedding; [`Mount::build`] takes
    /// them from the spec).
    #[must_use]
    pub fn with_read_policy(mut self, recheck: RecheckPolicy, fill_missing: bool) -> Self {
        self.recheck = recheck;
        self.fill_missing = fill_missing;
        self
    }

    /// When cached data from this mount is revalidated.
    #[must_use]
    pub fn recheck_policy(&self) -> RecheckPolicy {
        self.recheck
    }

    /// Whether missing chunks read as the fill value by default.
    #[must_use]
    pub fn fill_missing_data_reads(&self) -> bool {
        self.fill_missing
    }

    /// Registers the function told about every key written or deleted
    /// through [`Mount::put`] and [`Mount::delete`] (once; later calls are
    /// ignored and return false).
    pub fn set_write_listener(&self, f: WriteListener) -> bool {
        self.listener.0.set(f).is_ok()
    }

    fn notify(&self, key: &StoreKey) {
        if let Some(f) = self.listener.0.get() {
            f(key);
        }
    }

    /// Sets whether callers without a token may read this mount.
    #[must_use]
    pub fn with_anonymous_read(mut self, anonymous_read: bool) -> Self {
        self.anonymous_read = anonymous_read;
        self
    }

    fn reject_options(name: &str, spec: &MountSpec, scheme: &str) -> Result<(), MountError> {
        if spec.retry.is_some() {
            return Err(MountError::UnknownOption {
                mount: name.into(),
                option: "retry".into(),
                scheme: scheme.into(),
            });
        }
        match spec.options.keys().next() {
            Some(option) => {
                Err(MountError::UnknownOption { mount: name.into(), option: option.clone(), scheme: scheme.into() })
            }
            None => Ok(()),
        }
    }

    fn local(
        name: &str,
        spec: &MountSpec,
        path: PathBuf,
        cache: ObjectCacheSettings,
    ) -> Result<LocalBackend, MountError> {
        Self::reject_options(name, spec, "file")?;
        let unreachable =
            |reason: String| MountError::Unreachable { mount: name.into(), url: spec.url.clone(), reason };
        if spec.create && !path.exists() {
            std::fs::create_dir_all(&path)
                .map_err(|e| unreachable(format!("cannot create {}: {e}", path.display())))?;
        }
        if !path.is_dir() {
            return Err(unreachable(format!(
                "{} is not an existing directory (set `create = true` to create it)",
                path.display()
            )));
        }
        LocalBackend::with_cache(path, cache).map_err(|e| unreachable(e.to_string()))
    }

    /// Sets when cached metadata of this mount is revalidated.
    #[must_use]
    pub fn with_recheck_metadata(mut self, recheck: RecheckPolicy) -> Self {
        self.recheck_metadata = recheck;
        self
    }

    /// When cached metadata of this mount is revalidated.
    #[must_use]
    pub fn recheck_metadata(&self) -> RecheckPolicy {
        self.recheck_metadata
    }

    /// The mount's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The mount's URL, credentials removed.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The mount's `Cache-Control` for object reads (`None`: `no-cache`).
    #[must_use]
    pub fn cache_control(&self) -> Option<&str> {
        self.cache_control.as_deref()
    }

    /// True when writes are refused.
    #[must_use]
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// True when callers without a token may read (`anonymous_read`).
    #[must_use]
    pub fn anonymous_read(&self) -> bool {
        self.anonymous_read
    }

    /// The storage figures of this mount (latency and errors per operation).
    #[must_use]
    pub fn metrics(&self) -> &StorageMetrics {
        &self.metrics
    }

    /// The backend, for reads and listings.
    #[must_use]
    pub fn storage(&self) -> &dyn Storage {
        &*self.storage
    }

    fn stripe(&self, key: &StoreKey) -> &Mutex<()> {
        &self.write_locks[self.stripe_index(key)]
    }

    fn stripe_index(&self, key: &StoreKey) -> usize {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        // Truncation is fine: only the low bits pick a stripe.
        #[allow(clippy::cast_possible_truncation)]
        let i = (h.finish() as usize) % self.write_locks.len();
        i
    }

    /// Writes one key. Writes to the same key are serialised in this process,
    /// so a conditional write's check and its write cannot interleave with
    /// another write through zarrd.
    ///
    /// # Errors
    /// As [`Storage::put`].
    pub async fn put(&self, key: &StoreKey, body: Bytes, condition: &PutCondition) -> StorageResult<PutOutcome> {
        let _guard = self.stripe(key).lock().await;
        let result = self.storage.put(key, body, condition).await;
        // Even a failed write may have replaced the value.
        self.notify(key);
        result
    }

    /// Deletes one key (idempotent).
    ///
    /// # Errors
    /// As [`Storage::delete`].
    pub async fn delete(&self, key: &StoreKey) -> StorageResult<()> {
        let _guard = self.stripe(key).lock().await;
        let result = self.storage.delete(key).await;
        self.notify(key);
        result
    }

    /// Deletes `keys` in batches ([`Storage::delete_many`]: S3 takes 1,000
    /// keys per request), each holding the write locks of its keys, taken
    /// in stripe order (every other writer holds one stripe at a time, so
    /// two of these never wait for each other), and tells the listener of
    /// each key of a batch once it is done. The keys are sorted by stripe
    /// and a batch covers at most [`DELETE_BATCH`] keys and
    /// [`STRIPES_PER_DELETE`] stripes: a batch whose request hangs (until
    /// the request timeout) holds back writes to a sixteenth of the keys,
    /// not all of them (1,000 keys spread over every stripe held 98 % of
    /// them). A round of many keys still makes full batches: 100,000 keys
    /// are about 390 per stripe.
    ///
    /// # Errors
    /// As [`Storage::delete_many`], for the first batch that fails (its
    /// keys are reported to the listener: some may be gone); later batches
    /// are not sent.
    pub async fn delete_many(&self, keys: &[StoreKey]) -> StorageResult<()> {
        let mut by_stripe: Vec<(usize, &StoreKey)> = keys.iter().map(|k| (self.stripe_index(k), k)).collect();
        by_stripe.sort_unstable_by_key(|&(stripe, _)| stripe);
        for batch in delete_batches(&by_stripe) {
            let mut guards = Vec::with_capacity(STRIPES_PER_DELETE);
            let mut last = None;
            for &(stripe, _) in batch {
                if last != Some(stripe) {
                    guards.push(self.write_locks[stripe].lock().await);
                    last = Some(stripe);
                }
            }
            let batch_keys: Vec<StoreKey> = batch.iter().map(|&(_, k)| k.clone()).collect();
            let result = self.storage.delete_many(&batch_keys).await;
            for key in &batch_keys {
                self.notify(key);
            }
            result?;
        }
        Ok(())
    }

    /// Checks the backend answers.
    ///
    /// # Errors
    /// `Unavailable` with the backend's reason.
    pub async fn probe(&self) -> StorageResult<()> {
        self.storage.probe().await
    }

    /// Lists directly under `prefix`.
    ///
    /// # Errors
    /// As [`Storage::list`].
    pub async fn list(&self, prefix: &KeyPrefix) -> StorageResult<Vec<super::ListEntry>> {
        self.storage.list(prefix).await
    }
}

/// Removes a password from a URL for display.
fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}

impl From<MountError> for StorageError {
    fn from(e: MountError) -> Self {
        Self::Unavailable { reason: e.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_batches_hold_few_stripes_and_cover_every_key_once() {
        // Keys on stripes in sorted order: few per stripe, then many.
        let mut keys: Vec<(usize, u32)> = (0..3000u32).map(|i| ((i as usize * 7919) % WRITE_STRIPES, i)).collect();
        keys.extend((0..2500u32).map(|i| (WRITE_STRIPES - 1, 10_000 + i)));
        keys.sort_unstable();
        let batches: Vec<_> = delete_batches(&keys).collect();
        let mut seen = Vec::new();
        for b in &batches {
            let mut stripes: Vec<usize> = b.iter().map(|&(s, _)| s).collect();
            stripes.dedup();
            assert!(!b.is_empty() && b.len() <= DELETE_BATCH && stripes.len() <= STRIPES_PER_DELETE, "{}", b.len());
            seen.extend_from_slice(b);
        }
        assert_eq!(seen, keys);
        // 3,000 keys over 256 stripes: batches of 16 stripes (the last with the start of the
        // stripe of 2,500 keys); the rest of that stripe: batches of 1,000.
        assert_eq!(batches.len(), 15 + 3, "{:?}", batches.iter().map(|b| b.len()).collect::<Vec<_>>());
        assert_eq!(delete_batches::<u32>(&[]).count(), 0);
    }

    /// Memory storage whose bulk delete waits until released.
    #[derive(Debug)]
    struct HeldDeletes {
        inner: ObjectBackend,
        started: tokio::sync::Notify,
        release: tokio::sync::Notify,
    }

    #[async_trait::async_trait]
    impl Storage for HeldDeletes {
        async fn read(
            &self,
            key: &StoreKey,
            r: &super::super::ReadRequest,
        ) -> StorageResult<super::super::ReadOutcome> {
            self.inner.read(key, r).await
        }
        async fn head(&self, key: &StoreKey) -> StorageResult<super::super::ObjectMeta> {
            self.inner.head(key).await
        }
        async fn put(&self, key: &StoreKey, body: Bytes, condition: &PutCondition) -> StorageResult<PutOutcome> {
            self.inner.put(key, body, condition).await
        }
        async fn delete(&self, key: &StoreKey) -> StorageResult<()> {
            self.inner.delete(key).await
        }
        async fn delete_many(&self, keys: &[StoreKey]) -> StorageResult<()> {
            self.started.notify_one();
            self.release.notified().await;
            self.inner.delete_many(keys).await
        }
        async fn list(&self, prefix: &KeyPrefix) -> StorageResult<Vec<super::super::ListEntry>> {
            self.inner.list(prefix).await
        }
        async fn list_recursive(
            &self,
            prefix: &KeyPrefix,
            limit: usize,
        ) -> StorageResult<Vec<(String, super::super::ObjectMeta)>> {
            self.inner.list_recursive(prefix, limit).await
        }
        async fn is_prefix(&self, key: &StoreKey) -> StorageResult<bool> {
            self.inner.is_prefix(key).await
        }
        async fn probe(&self) -> StorageResult<()> {
            self.inner.probe().await
        }
    }

    /// A bulk delete whose request hangs holds back writes to the keys of
    /// its batch's stripes only: most writes to other keys go through
    /// (2,000 keys spread over every stripe held all of them).
    #[tokio::test]
    async fn a_hung_bulk_delete_holds_back_few_writes() {
        let inner = ObjectBackend::new(Arc::new(InMemory::new()), "").unwrap();
        let storage =
            Arc::new(HeldDeletes { inner, started: tokio::sync::Notify::new(), release: tokio::sync::Notify::new() });
        let mount = Arc::new(Mount::from_storage("m", "memory://", false, storage.clone()));
        let keys: Vec<StoreKey> = (0..2000).map(|i| StoreKey::new(&format!("old/{i}")).unwrap()).collect();
        let deleting = tokio::spawn({
            let (mount, keys) = (mount.clone(), keys.clone());
            async move { mount.delete_many(&keys).await }
        });
        storage.started.notified().await;
        let writes = (0..64).map(|i| {
            let mount = mount.clone();
            async move {
                let key = StoreKey::new(&format!("new/{i}")).unwrap();
                let put = mount.put(&key, Bytes::from_static(b"x"), &PutCondition::None);
                tokio::time::timeout(std::time::Duration::from_millis(500), put).await.is_ok()
            }
        });
        let done = futures::future::join_all(writes).await.into_iter().filter(|&ok| ok).count();
        assert!(done >= 48, "{done} of 64 writes got through while a batch was held");
        // Released, every batch goes and the delete ends.
        let releaser = tokio::spawn({
            let storage = storage.clone();
            async move {
                loop {
                    storage.release.notify_one();
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            }
        });
        deleting.await.unwrap().unwrap();
        releaser.abort();
    }

    #[test]
    fn bad_urls_name_the_mount() {
        let e = Mount::build("m", &MountSpec::from_url("ftp://x/y")).unwrap_err().to_string();
        assert!(e.contains("mount `m`") && e.contains("ftp"), "{e}");
        let e = Mount::build("m", &MountSpec::from_url("/definitely/not/here")).unwrap_err().to_string();
        assert!(e.contains("unreachable") && e.contains("/definitely/not/here"), "{e}");
        let e = Mount::build("m", &MountSpec::from_url("s3://")).unwrap_err().to_string();
        assert!(e.contains("bucket"), "{e}");
        let mut spec = MountSpec::from_url("s3://bucket/p");
        spec.options.insert("colour".into(), "blue".into());
        let e = Mount::build("m", &spec).unwrap_err().to_string();
        assert!(e.contains("option `colour`"), "{e}");
        assert!(Mount::build("../x", &MountSpec::from_url("memory://")).is_err());
    }

    #[test]
    fn retry_settings_apply_to_object_stores_only() {
        let mut spec: MountSpec = toml::from_str(
            "url = \"az://c/p\"\nretry = { max_retries = 2, timeout_ms = 3000 }\n[options]\naccount_name = \"a\"\n\
             access_key = \"a2V5\"\nendpoint = \"http://127.0.0.1:9/a\"\nallow_http = \"true\"\ntimeout = \"2s\"",
        )
        .unwrap();
        assert_eq!(spec.retry.unwrap().max_retries, Some(2));
        assert!(Mount::build("az", &spec).is_ok());
        spec.retry = Some(RetrySpec { max_retries: Some(1000), ..RetrySpec::default() });
        let e = Mount::build("az", &spec).unwrap_err().to_string();
        assert!(e.contains("retry.max_retries"), "{e}");
        let mut spec = MountSpec::from_url("memory://");
        spec.retry = Some(RetrySpec::default());
        let e = Mount::build("m", &spec).unwrap_err().to_string();
        assert!(e.contains("option `retry`"), "{e}");
    }

    #[test]
    fn urls_build() {
        let dir = tempfile::tempdir().unwrap();
        let file_url = format!("file://{}", dir.path().display());
        assert!(Mount::build("a", &MountSpec::from_url(&file_url)).is_ok());
        assert!(Mount::build("b", &MountSpec::from_url(dir.path().to_str().unwrap())).is_ok());
        assert!(Mount::build("c", &MountSpec::from_url("memory://")).is_ok());
        let mut spec = MountSpec::from_url("s3://bucket/prefix/x");
        spec.options.insert("region".into(), "us-east-1".into());
        spec.options.insert("endpoint".into(), "http://127.0.0.1:9".into());
        spec.options.insert("allow_http".into(), "true".into());
        assert!(Mount::build("d", &spec).is_ok());
        let nested = dir.path().join("new/sub");
        let mut spec = MountSpec::from_url(nested.to_str().unwrap());
        spec.create = true;
        assert!(Mount::build("e", &spec).is_ok());
        assert!(nested.is_dir());
    }
}
