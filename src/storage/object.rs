//! The `object_store` backend: memory, S3, GCS and Azure.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion};

use super::request::{self, etag_matches};
use super::tail::{ObjectStream, Tail};
use super::{
    http_etag, KeyPrefix, ListEntry, ObjectMeta, PutCondition, PutOutcome, ReadOutcome, ReadRequest, Storage,
    StorageError, StorageResult, StoreKey,
};

/// How often a ranged read retries when the object changes between its
/// metadata read and its byte read.
const CHANGED_RETRIES: usize = 3;

/// Streamed reads ([`ReadRequest::stream`]) of more bytes than this hand
/// them on as they arrive instead of collecting them first (the local
/// backend's threshold, [`super::local::INLINE_READ_MAX`]).
pub const STREAM_ABOVE: u64 = super::local::INLINE_READ_MAX;

/// The most names one page of a paged listing asks for (S3's and Azure's
/// own maximum; GCS allows more).
const LIST_PAGE: usize = 1000;

/// Empty pages in a row after which a paged listing gives up.
const MAX_EMPTY_PAGES: usize = 16;

/// A mount backed by any `object_store` implementation, under a key prefix.
#[derive(Clone)]
pub struct ObjectBackend {
    store: Arc<dyn ObjectStore>,
    /// The same store's paged listing (S3, GCS, Azure): a limited listing
    /// asks for as many names as it answers, a page at a time, instead of
    /// gathering a whole directory of perhaps millions of objects first.
    pages: Option<Arc<dyn PaginatedListStore>>,
    prefix: Option<Path>,
}

impl std::fmt::Debug for ObjectBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectBackend")
            .field("store", &self.store)
            .field("paged_listing", &self.pages.is_some())
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl ObjectBackend {
    /// Wraps `store`, placing every key under `prefix` (may be empty).
    ///
    /// # Errors
    /// `InvalidKey` when `prefix` is not a valid key prefix.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> StorageResult<Self> {
        let prefix = KeyPrefix::new(prefix.trim_start_matches('/'))?;
        let prefix = if prefix.is_root() { None } else { Some(Self::parse(prefix.as_str())?) };
        Ok(Self { store, pages: None, prefix })
    }

    /// [`ObjectBackend::new`] over a store with a paged listing (S3, GCS,
    /// Azure), which limited listings use.
    ///
    /// # Errors
    /// As [`ObjectBackend::new`].
    pub fn paged<S: ObjectStore + PaginatedListStore>(store: Arc<S>, prefix: &str) -> StorageResult<Self> {
        let pages: Arc<dyn PaginatedListStore> = store.clone();
        Ok(Self { pages: Some(pages), ..Self::new(store, prefix)? })
    }

    /// The first names directly under `base` in the store's listing order
    /// (byte order of the whole key), objects and common prefixes, a page
    /// at a time until more than `limit` are in hand or the listing ends:
    /// memory and requests follow `limit`, not the directory's size.
    async fn list_pages(
        &self,
        pages: &dyn PaginatedListStore,
        prefix: &KeyPrefix,
        limit: usize,
    ) -> StorageResult<(Vec<ListEntry>, bool)> {
        let base = self.prefix_path(prefix)?;
        // The paged listing adds no delimiter to the prefix itself.
        let listed_prefix = base.as_ref().map(|b| format!("{b}/"));
        let mut entries = Vec::new();
        let mut page_token = None;
        // A store that hands back token after token with nothing in them
        // (none should) ends the listing with an error, not a loop.
        let mut empty_pages = 0;
        loop {
            let wanted = limit.saturating_add(1).saturating_sub(entries.len()).clamp(1, LIST_PAGE);
            let opts = PaginatedListOptions {
                delimiter: Some(std::borrow::Cow::Borrowed("/")),
                max_keys: Some(wanted),
                page_token: page_token.take(),
                ..PaginatedListOptions::default()
            };
            let page = pages
                .list_paginated(listed_prefix.as_deref(), opts)
                .await
                .map_err(|e| StorageError::from_object_store(prefix.as_str(), e))?;
            let listed = page.result;
            let before = entries.len();
            entries.extend(self.entries(base.as_ref(), &listed).filter(|e| !entry_name(e).contains('/')));
            empty_pages = if entries.len() == before { empty_pages + 1 } else { 0 };
            if empty_pages > MAX_EMPTY_PAGES {
                return Err(StorageError::Unavailable {
                    reason: format!(
                        "listing `{}`: the store answered {empty_pages} empty pages in a row",
                        prefix.as_str()
                    ),
                });
            }
            match page.page_token {
                Some(token) if entries.len() <= limit => page_token = Some(token),
                more => {
                    entries.sort_by(|a, b| entry_name(a).cmp(entry_name(b)));
                    let more = more.is_some() || entries.len() > limit;
                    entries.truncate(limit);
                    return Ok((entries, more));
                }
            }
        }
    }

    fn parse(raw: &str) -> StorageResult<Path> {
        Path::parse(raw).map_err(|e| StorageError::InvalidKey { reason: e.to_string() })
    }

    fn path(&self, key: &str) -> StorageResult<Path> {
        match &self.prefix {
            None => Self::parse(key),
            Some(p) if key.is_empty() => Ok(p.clone()),
            Some(p) => Self::parse(&format!("{p}/{key}")),
        }
    }

    fn prefix_path(&self, prefix: &KeyPrefix) -> StorageResult<Option<Path>> {
        if prefix.is_root() {
            Ok(self.prefix.clone())
        } else {
            self.path(prefix.as_str()).map(Some)
        }
    }

    fn meta(m: &object_store::ObjectMeta) -> ObjectMeta {
        let raw = m.e_tag.clone().unwrap_or_else(|| {
            // Stores without ETags: size and time identify the version.
            format!("{:x}-{:x}", m.size, m.last_modified.timestamp_micros())
        });
        ObjectMeta {
            size: m.size,
            last_modified: Some(m.last_modified.into()),
            etag: http_etag(&raw),
            version_token: m.e_tag.clone(),
            version_id: m.version.clone(),
        }
    }

    /// The common prefixes and objects of one listing of `base`, named
    /// relative to it (the entry for `base` itself left out).
    fn entries<'a>(
        &'a self,
        base: Option<&'a Path>,
        listed: &'a object_store::ListResult,
    ) -> impl Iterator<Item = ListEntry> + 'a {
        listed
            .common_prefixes
            .iter()
            .map(move |p| ListEntry::Prefix { name: self.relative_name(base, p) })
            .chain(
                listed.objects.iter().map(move |o| ListEntry::Object {
                    name: self.relative_name(base, &o.location),
                    meta: Self::meta(o),
                }),
            )
            .filter(|e| !entry_name(e).is_empty())
    }

    fn relative_name(&self, base: Option<&Path>, location: &Path) -> String {
        let full = location.as_ref();
        match base {
            Some(b) if !b.as_ref().is_empty() => {
                full.strip_prefix(b.as_ref()).map_or(full, |s| s.trim_start_matches('/')).to_string()
            }
            _ => full.to_string(),
        }
    }

    pub(crate) async fn put_with_current(
        &self,
        key: &StoreKey,
        body: Bytes,
        condition: &PutCondition,
        current: Option<ObjectMeta>,
    ) -> StorageResult<PutOutcome> {
        let path = self.path(key.as_str())?;
        let err = |e| StorageError::from_object_store(key.as_str(), e);
        let failed = |reason: String| StorageError::PreconditionFailed { key: key.to_string(), reason };
        let mode = match condition {
            PutCondition::None => PutMode::Overwrite,
            PutCondition::IfAbsent => {
                if current.is_some() {
                    return Err(failed("If-None-Match: * but the key exists".into()));
                }
                PutMode::Create
            }
            PutCondition::IfMatch(list) => {
                let Some(meta) = &current else {
                    return Err(failed("If-Match given but the key does not exist".into()));
                };
                if !etag_matches(list, &meta.etag) {
                    return Err(failed(format!(
                        "If-Match {} does not match the current ETag {}",
                        list.join(", "),
                        meta.etag
                    )));
                }
                match (&meta.version_token, &meta.version_id) {
                    (None, None) => PutMode::Overwrite,
                    (e_tag, version) => {
                        PutMode::Update(UpdateVersion { e_tag: e_tag.clone(), version: version.clone() })
                    }
                }
            }
        };
        let created = current.is_none();
        let options = PutOptions { mode: mode.clone(), ..Default::default() };
        let result = match self.store.put_opts(&path, body.clone().into(), options).await {
            Ok(r) => r,
            // Backends without conditional writes (local files for updates, some
            // S3 implementations): the mount already serialises writes per key in
            // this process and the condition was checked above, so overwrite.
            Err(object_store::Error::NotImplemented { .. } | object_store::Error::NotSupported { .. })
                if mode != PutMode::Overwrite =>
            {
                self.store.put(&path, body.into()).await.map_err(err)?
            }
            Err(object_store::Error::AlreadyExists { .. }) => {
                return Err(failed("If-None-Match: * but the key was created meanwhile".into()))
            }
            Err(e) => return Err(err(e)),
        };
        Ok(PutOutcome { created, etag: result.e_tag.as_deref().map(http_etag) })
    }
}

impl ObjectBackend {
    /// The answer's bytes from `got` (read from `path`): `len` bytes after
    /// its first `skip` (a range cut from a GET of the whole object), whole,
    /// or for a streamed read over [`STREAM_ABOVE`] left to arrive as the
    /// answer is written ([`ObjectStream::resumable`]).
    async fn body(
        &self,
        got: object_store::GetResult,
        path: &Path,
        req: &ReadRequest,
        key: &StoreKey,
        (skip, len): (u64, u64),
    ) -> StorageResult<(Bytes, Option<Tail>)> {
        if req.stream && len > STREAM_ABOVE {
            let stream = ObjectStream::resumable(got, self.store.clone(), path.clone(), skip, len, key.as_str());
            return Ok((Bytes::new(), Some(Tail::Stream(stream))));
        }
        let body = got.bytes().await.map_err(|e| StorageError::from_object_store(key.as_str(), e))?;
        let at = |n: u64| usize::try_from(n).unwrap_or(usize::MAX).min(body.len());
        Ok((body.slice(at(skip)..at(skip.saturating_add(len))), None))
    }
}

#[async_trait]
impl Storage for ObjectBackend {
    async fn read(&self, key: &StoreKey, req: &ReadRequest) -> StorageResult<ReadOutcome> {
        let path = self.path(key.as_str())?;
        let err = |e| StorageError::from_object_store(key.as_str(), e);
        if req.range.is_none() && req.preconditions.is_empty() {
            let options = GetOptions { head: req.head_only, ..Default::default() };
            let got = self.store.get_opts(&path, options).await.map_err(err)?;
            let meta = Self::meta(&got.meta);
            if req.head_only {
                return Ok(ReadOutcome { meta, range: None, body: Bytes::new(), tail: None });
            }
            req.check_len(key.as_str(), meta.size)?;
            let (body, tail) = self.body(got, &path, req, key, (0, meta.size)).await?;
            return Ok(ReadOutcome { meta, range: None, body, tail });
        }
        for _ in 0..CHANGED_RETRIES {
            let head = self.store.head(&path).await.map_err(err)?;
            let meta = Self::meta(&head);
            let range = request::evaluate(key.as_str(), &meta, req)?;
            if req.head_only {
                return Ok(ReadOutcome { meta, range, body: Bytes::new(), tail: None });
            }
            let len = range.as_ref().map_or(meta.size, |r| r.end - r.start);
            req.check_len(key.as_str(), len)?;
            let options = GetOptions {
                if_match: head.e_tag.clone(),
                range: range.clone().map(GetRange::Bounded),
                ..Default::default()
            };
            match self.store.get_opts(&path, options).await {
                Ok(got) => {
                    let (body, tail) = self.body(got, &path, req, key, (0, len)).await?;
                    return Ok(ReadOutcome { meta, range, body, tail });
                }
                // Changed between head and get: evaluate again against the new version.
                Err(object_store::Error::Precondition { .. }) => {}
                Err(e) => return Err(err(e)),
            }
        }
        // Still changing: one unconditional GET returns one consistent version;
        // evaluate the request against it and cut the range here.
        let got = self.store.get_opts(&path, GetOptions::default()).await.map_err(err)?;
        let meta = Self::meta(&got.meta);
        let range = request::evaluate(key.as_str(), &meta, req)?;
        // The whole object is read here, whatever the range.
        req.check_len(key.as_str(), meta.size)?;
        let cut = range.as_ref().map_or((0, meta.size), |r| (r.start, r.end - r.start));
        let (body, tail) = self.body(got, &path, req, key, cut).await?;
        Ok(ReadOutcome { meta, range, body, tail })
    }

    async fn head(&self, key: &StoreKey) -> StorageResult<ObjectMeta> {
        let path = self.path(key.as_str())?;
        let m = self.store.head(&path).await.map_err(|e| StorageError::from_object_store(key.as_str(), e))?;
        Ok(Self::meta(&m))
    }

    async fn put(&self, key: &StoreKey, body: Bytes, condition: &PutCondition) -> StorageResult<PutOutcome> {
        let current = match self.head(key).await {
            Ok(m) => Some(m),
            Err(StorageError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        self.put_with_current(key, body, condition, current).await
    }

    async fn delete(&self, key: &StoreKey) -> StorageResult<()> {
        let path = self.path(key.as_str())?;
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(StorageError::from_object_store(key.as_str(), e)),
        }
    }

    /// Through the store's own bulk delete (S3's `DeleteObjects`: 1,000
    /// keys per request; Azure's batches: 256; GCS and memory: one at a
    /// time, several in flight).
    async fn delete_many(&self, keys: &[StoreKey]) -> StorageResult<()> {
        let paths = keys.iter().map(|k| self.path(k.as_str())).collect::<StorageResult<Vec<_>>>()?;
        let mut done = self.store.delete_stream(futures::stream::iter(paths.into_iter().map(Ok)).boxed());
        while let Some(result) = done.next().await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    let first = keys.first().map_or("", StoreKey::as_str);
                    let key = format!("{first} (one of {} keys deleted together)", keys.len());
                    return Err(StorageError::from_object_store(&key, e));
                }
            }
        }
        Ok(())
    }

    async fn list(&self, prefix: &KeyPrefix) -> StorageResult<Vec<ListEntry>> {
        let base = self.prefix_path(prefix)?;
        let listed = self
            .store
            .list_with_delimiter(base.as_ref())
            .await
            .map_err(|e| StorageError::from_object_store(prefix.as_str(), e))?;
        let mut entries: Vec<ListEntry> = self.entries(base.as_ref(), &listed).collect();
        entries.sort_by(|a, b| entry_name(a).cmp(entry_name(b)));
        Ok(entries)
    }

    async fn list_limited(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<(Vec<ListEntry>, bool)> {
        match &self.pages {
            Some(pages) => self.list_pages(pages.as_ref(), prefix, limit).await,
            None => Ok(super::first_of(self.list(prefix).await?, limit)),
        }
    }

    async fn list_recursive(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<Vec<(String, ObjectMeta)>> {
        let base = self.prefix_path(prefix)?;
        let mut out = Vec::new();
        let mut stream = self.store.list(base.as_ref());
        while let Some(o) = stream.try_next().await.map_err(|e| StorageError::from_object_store(prefix.as_str(), e))? {
            if out.len() >= limit {
                break;
            }
            let name = self.relative_name(base.as_ref(), &o.location);
            if !name.is_empty() {
                out.push((name, Self::meta(&o)));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    async fn visit_recursive(&self, prefix: &KeyPrefix, visit: super::Visitor) -> StorageResult<super::Visitor> {
        let mut visit = visit;
        let base = self.prefix_path(prefix)?;
        let mut stream = self.store.list(base.as_ref());
        while let Some(o) = stream.try_next().await.map_err(|e| StorageError::from_object_store(prefix.as_str(), e))? {
            let name = self.relative_name(base.as_ref(), &o.location);
            if !name.is_empty() {
                visit(&name, &Self::meta(&o));
            }
        }
        Ok(visit)
    }

    async fn is_prefix(&self, key: &StoreKey) -> StorageResult<bool> {
        // One name answers it: the first of a listing, not the whole of one.
        let base = self.path(key.as_str())?;
        let mut stream = self.store.list(Some(&base));
        while let Some(o) = stream.try_next().await.map_err(|e| StorageError::from_object_store(key.as_str(), e))? {
            if !self.relative_name(Some(&base), &o.location).is_empty() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn probe(&self) -> StorageResult<()> {
        // The first name, or none: a listing that asks for one answers
        // whether the store is reachable without listing a whole bucket.
        let failed = |e| StorageError::from_object_store("", e);
        match &self.pages {
            Some(pages) => {
                let opts = PaginatedListOptions {
                    delimiter: Some(std::borrow::Cow::Borrowed("/")),
                    max_keys: Some(1),
                    ..PaginatedListOptions::default()
                };
                let prefix = self.prefix.as_ref().map(|p| format!("{p}/"));
                pages.list_paginated(prefix.as_deref(), opts).await.map(|_| ()).map_err(failed)
            }
            None => self.store.list(self.prefix.as_ref()).try_next().await.map(|_| ()).map_err(failed),
        }
    }
}

/// The name of a listing entry.
#[must_use]
pub fn entry_name(e: &ListEntry) -> &str {
    match e {
        ListEntry::Prefix { name } | ListEntry::Object { name, .. } => name,
    }
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;

    use super::*;
    use crate::storage::ListName;

    fn key(k: &str) -> StoreKey {
        StoreKey::new(k).unwrap()
    }

    async fn all_bytes(mut out: ReadOutcome) -> Vec<u8> {
        let mut bytes = out.body.to_vec();
        if let Some(Tail::Stream(stream)) = out.tail.as_mut() {
            while let Some(piece) = std::future::poll_fn(|cx| stream.poll_piece(cx)).await {
                bytes.extend_from_slice(&piece.unwrap());
            }
        }
        bytes
    }

    /// A streamed GET of an object or range over 4 MiB hands its bytes on as
    /// they arrive (never collected whole first); smaller ones, unstreamed
    /// reads and HEAD come whole or empty as before; preconditions and the
    /// size bound are decided before any byte.
    #[tokio::test]
    async fn streamed_reads_leave_large_bodies_arriving() {
        let b = ObjectBackend::new(Arc::new(InMemory::new()), "p").unwrap();
        let data: Vec<u8> = (0..6_000_000u32).map(|i| (i % 251) as u8).collect();
        b.put(&key("big"), Bytes::from(data.clone()), &PutCondition::default()).await.unwrap();
        b.put(&key("small"), Bytes::from(data[..1000].to_vec()), &PutCondition::default()).await.unwrap();
        let stream = ReadRequest { stream: true, ..ReadRequest::default() };
        let out = b.read(&key("big"), &stream).await.unwrap();
        assert!(out.body.is_empty() && matches!(out.tail, Some(Tail::Stream(_))));
        assert_eq!(out.len(), data.len() as u64);
        assert_eq!(all_bytes(out).await, data);
        // A range over 4 MiB: only its bytes, arriving.
        let ranged =
            ReadRequest { range: Some(request::ByteRange::Bounded { first: 5, last: 4_500_004 }), ..stream.clone() };
        let out = b.read(&key("big"), &ranged).await.unwrap();
        assert_eq!(out.range, Some(5..4_500_005));
        assert!(out.tail.is_some() && out.len() == 4_500_000);
        assert_eq!(all_bytes(out).await, &data[5..4_500_005]);
        // Up to 4 MiB, whole.
        let ranged =
            ReadRequest { range: Some(request::ByteRange::Bounded { first: 5, last: 2_500_004 }), ..stream.clone() };
        let out = b.read(&key("big"), &ranged).await.unwrap();
        assert!(out.tail.is_none() && out.body == data[5..2_500_005]);
        let out = b.read(&key("small"), &stream).await.unwrap();
        assert!(out.tail.is_none() && out.body.len() == 1000);
        let head = ReadRequest { head_only: true, ..stream.clone() };
        let out = b.read(&key("big"), &head).await.unwrap();
        assert!(out.tail.is_none() && out.body.is_empty() && out.meta.size == data.len() as u64);
        let mut not_modified = stream.clone();
        not_modified.preconditions.if_none_match = Some(vec![out.meta.etag.clone()]);
        assert!(matches!(b.read(&key("big"), &not_modified).await, Err(StorageError::NotModified { .. })));
        let bounded = ReadRequest { max_len: Some(5_999_999), ..stream.clone() };
        let e = b.read(&key("big"), &bounded).await.unwrap_err();
        assert!(matches!(e, StorageError::TooLarge { size: 6_000_000, limit: 5_999_999, .. }), "{e}");
        // Without `stream`, the same read is whole in `body`.
        let out = b.read(&key("big"), &ReadRequest::default()).await.unwrap();
        assert!(out.tail.is_none() && out.body.len() == data.len());
    }

    /// An in-memory store with a paged listing that answers at most `page`
    /// names a request, counting its requests.
    #[derive(Debug)]
    struct Paged {
        inner: InMemory,
        page: usize,
        requests: std::sync::atomic::AtomicUsize,
    }

    impl std::fmt::Display for Paged {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Paged({})", self.page)
        }
    }

    #[async_trait]
    impl PaginatedListStore for Paged {
        async fn list_paginated(
            &self,
            prefix: Option<&str>,
            opts: PaginatedListOptions,
        ) -> object_store::Result<object_store::list::PaginatedListResult> {
            use std::collections::BTreeMap;
            self.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            assert_eq!(opts.delimiter.as_deref(), Some("/"));
            let prefix = prefix.unwrap_or("");
            let all: Vec<object_store::ObjectMeta> = self.inner.list(None).try_collect().await?;
            // Names in key order: a common prefix sorts as itself plus "/".
            let mut names = BTreeMap::new();
            for o in all {
                let Some(rest) = o.location.as_ref().strip_prefix(prefix) else { continue };
                match rest.split_once('/') {
                    Some((dir, _)) => names.insert(format!("{prefix}{dir}/"), None),
                    None => names.insert(o.location.to_string(), Some(o)),
                };
            }
            let after = opts.page_token.unwrap_or_default();
            let max = opts.max_keys.unwrap_or(usize::MAX).min(self.page);
            let mut result =
                object_store::ListResult { common_prefixes: vec![], objects: vec![], extensions: Default::default() };
            let mut rest = names.into_iter().filter(|(k, _)| *k > after).peekable();
            let mut last = String::new();
            for (k, o) in rest.by_ref().take(max) {
                match o {
                    Some(o) => result.objects.push(o),
                    None => result.common_prefixes.push(Path::from(k.trim_end_matches('/'))),
                }
                last = k;
            }
            let page_token = rest.peek().is_some().then_some(last);
            Ok(object_store::list::PaginatedListResult { result, page_token })
        }
    }

    #[async_trait]
    impl ObjectStore for Paged {
        async fn put_opts(
            &self,
            location: &Path,
            payload: object_store::PutPayload,
            opts: PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            self.inner.put_opts(location, payload, opts).await
        }

        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }

        async fn get_opts(
            &self,
            location: &Path,
            options: GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            self.inner.get_opts(location, options).await
        }

        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
            self.inner.delete_stream(locations)
        }

        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
            self.inner.list(prefix)
        }

        async fn list_with_delimiter(&self, _prefix: Option<&Path>) -> object_store::Result<object_store::ListResult> {
            panic!("a paged store's listings go a page at a time")
        }

        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    /// A store with a paged listing lists a directory a page at a time and
    /// stops once it holds more than it answers: the first names in key
    /// order and whether there were more, in requests and memory that
    /// follow the limit; `is_prefix` and `probe` ask for one name.
    #[tokio::test]
    async fn paged_listings_stop_at_the_limit() {
        let store = Arc::new(Paged { inner: InMemory::new(), page: 2, requests: 0.into() });
        for k in ["p/a", "p/b", "p/c", "p/d/x", "p/d/y", "p/e/f/z", "p/g", "pz", "q/a", "p.x"] {
            store.inner.put(&Path::from(k), Bytes::from_static(b"12").into()).await.unwrap();
        }
        let b = ObjectBackend::paged(store.clone(), "p").unwrap();
        let requests = || store.requests.swap(0, std::sync::atomic::Ordering::Relaxed);
        let root = KeyPrefix::new("").unwrap();
        let names = |entries: &[ListEntry]| entries.iter().map(|e| entry_name(e).to_string()).collect::<Vec<String>>();
        for (limit, want, more, pages) in [
            (1, vec!["a"], true, 1),
            (3, vec!["a", "b", "c"], true, 2),
            (5, vec!["a", "b", "c", "d", "e"], true, 3),
            (6, vec!["a", "b", "c", "d", "e", "g"], false, 3),
            (100, vec!["a", "b", "c", "d", "e", "g"], false, 3),
        ] {
            let (entries, got_more) = b.list_limited(&root, limit).await.unwrap();
            let want: Vec<String> = want.into_iter().map(String::from).collect();
            assert_eq!((names(&entries), got_more, requests()), (want, more, pages), "limit {limit}");
        }
        let (entries, more) = b.list_limited(&root, 10).await.unwrap();
        assert!(!more && matches!(&entries[3], ListEntry::Prefix { name } if name == "d"), "{entries:?}");
        assert!(matches!(&entries[0], ListEntry::Object { meta, .. } if meta.size == 2), "{entries:?}");
        let (entries, more) = b.list_limited(&KeyPrefix::new("d").unwrap(), 10).await.unwrap();
        assert_eq!((names(&entries), more), (vec!["x".to_string(), "y".to_string()], false));
        let (names, more) = b.list_names_limited(&KeyPrefix::new("e").unwrap(), 10).await.unwrap();
        assert_eq!((names, more), (vec![ListName { name: "f".into(), prefix: true, size: None }], false));
        requests();
        assert!(b.is_prefix(&key("d")).await.unwrap());
        assert!(b.is_prefix(&key("e/f")).await.unwrap());
        assert!(!b.is_prefix(&key("a")).await.unwrap());
        assert!(!b.is_prefix(&key("zz")).await.unwrap());
        b.probe().await.unwrap();
        assert_eq!(requests(), 1, "the probe asks for one name");
    }
}
