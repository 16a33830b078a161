//! The bytes of a streamed read that the backend did not hand over in
//! [`super::ReadOutcome::body`] ([`super::ReadRequest::stream`]): still in
//! their local file ([`FileSpan`], read a frame at a time), or still
//! arriving from an object store ([`ObjectStream`], handed on piece by
//! piece as the store's client receives them). Either way an answer holds a
//! frame or two of them, never the whole object.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore};

use super::direct::FileSpan;
use super::{StorageError, StorageResult};
use crate::metrics::{StorageMetrics, StorageOp};

/// The rest of a streamed read.
#[derive(Debug)]
pub enum Tail {
    /// Bytes of an open local file.
    File(FileSpan),
    /// Bytes of an object-store GET still arriving.
    Stream(ObjectStream),
}

impl Tail {
    /// Bytes still to come.
    #[must_use]
    pub fn remaining(&self) -> u64 {
        match self {
            Self::File(span) => span.remaining(),
            Self::Stream(stream) => stream.remaining(),
        }
    }

    /// The same tail, its failures counted in `metrics` (as errors of
    /// [`StorageOp::Read`], the operation that started it).
    #[must_use]
    pub fn measured(self, metrics: Arc<StorageMetrics>) -> Self {
        match self {
            Self::File(span) => Self::File(span.measured(metrics)),
            Self::Stream(stream) => Self::Stream(ObjectStream { metrics: Some(metrics), ..stream }),
        }
    }
}

/// The body of an object-store GET, handed on as it arrives: exactly
/// `left` bytes after dropping the first `skip` (a range cut from a GET of
/// the whole object). A body that ends short, or fails midway, is an error
/// (the answer ends short of its `Content-Length`; the client never gets
/// other bytes); bytes past `left` are dropped.
///
/// The upstream GET lasts as long as the client takes to read, and a slow
/// client outlasts the store client's request timeout and retry budget
/// (`object_store`'s `timeout`, 30 s, and `retry.timeout_ms`, 3 min, by
/// default). So a stream made [`ObjectStream::resumable`] answers a body
/// that fails or ends short with a fresh GET of the bytes still to come,
/// conditional on the ETag the answer started with: the rest comes from
/// the same version or not at all (a replaced object ends the answer
/// short; so does an answer to the resuming GET with another ETag or range,
/// from a store that ignores `If-Match`). Resumes are bounded: after
/// [`FAILURES_IN_A_ROW`] failures with no byte between them, after
/// [`RESUME_WAIT`] without an answer to a resuming GET, or after
/// `FAILURES_IN_A_ROW + len / RESUME_EVERY` resumes in all (so a store
/// cutting every answer short costs one GET per 4 MiB, and a client
/// trickling bytes holds the answer for at most that many store timeouts),
/// the error stands. Each resuming GET counts as a read in the mount's
/// figures.
pub struct ObjectStream {
    state: State,
    skip: u64,
    left: u64,
    key: Arc<str>,
    metrics: Option<Arc<StorageMetrics>>,
    resume: Option<Box<Resume>>,
}

/// Failed upstream reads in a row, with no byte between them, that end a
/// resumable stream.
pub const FAILURES_IN_A_ROW: u32 = 3;

/// A resumable stream may resume once per this many bytes of its length
/// (plus [`FAILURES_IN_A_ROW`]).
pub const RESUME_EVERY: u64 = 4 << 20;

/// The longest wait for the answer to a resuming GET (the client is
/// waiting for bytes meanwhile; the store client's own retries may take
/// minutes).
pub const RESUME_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

enum State {
    /// Reading a GET's body.
    Body(BoxStream<'static, object_store::Result<Bytes>>),
    /// Waiting for the answer to a resuming GET of these bytes.
    Resuming(BoxFuture<'static, object_store::Result<object_store::GetResult>>, std::ops::Range<u64>),
}

/// Where a resuming GET asks, and for which version.
struct Resume {
    store: Arc<dyn ObjectStore>,
    path: Path,
    /// The `object_store` ETag of the version being sent.
    etag: String,
    /// The object offset just past the last byte to send.
    end: u64,
    /// Failures since the last byte that came.
    failures: u32,
    /// Resumes still allowed.
    resumes_left: u64,
}

impl std::fmt::Debug for ObjectStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStream")
            .field("key", &self.key)
            .field("skip", &self.skip)
            .field("left", &self.left)
            .field("resumable", &self.resume.is_some())
            .finish()
    }
}

impl ObjectStream {
    /// `left` bytes of `stream` after its first `skip`, read for `key`.
    #[must_use]
    pub fn new(stream: BoxStream<'static, object_store::Result<Bytes>>, skip: u64, left: u64, key: &str) -> Self {
        Self { state: State::Body(stream), skip, left, key: key.into(), metrics: None, resume: None }
    }

    /// `left` bytes of `got`'s body after its first `skip`, read for `key`
    /// from `path` of `store`; resumed by conditional GETs when it fails
    /// midway (when the store gave the version's ETag; else as
    /// [`ObjectStream::new`]).
    #[must_use]
    pub fn resumable(
        got: object_store::GetResult,
        store: Arc<dyn ObjectStore>,
        path: Path,
        skip: u64,
        left: u64,
        key: &str,
    ) -> Self {
        let end = got.range.start + skip + left;
        let resumes_left = u64::from(FAILURES_IN_A_ROW) + left / RESUME_EVERY;
        let resume =
            got.meta.e_tag.clone().map(|etag| Box::new(Resume { store, path, etag, end, failures: 0, resumes_left }));
        Self { resume, ..Self::new(got.into_stream(), skip, left, key) }
    }

    /// Bytes still to come.
    #[must_use]
    pub fn remaining(&self) -> u64 {
        self.left
    }

    /// The next piece (`None` once `left` bytes came). An error ends the
    /// stream, and is counted in the mount's figures when measured.
    pub fn poll_piece(&mut self, cx: &mut Context<'_>) -> Poll<Option<StorageResult<Bytes>>> {
        let result = match self.poll_inner(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(r) => r,
        };
        if let Some(Err(e)) = &result {
            self.left = 0;
            if let Some(m) = &self.metrics {
                m.op(StorageOp::Read).error(e.kind());
            }
        }
        Poll::Ready(result)
    }

    fn poll_inner(&mut self, cx: &mut Context<'_>) -> Poll<Option<StorageResult<Bytes>>> {
        while self.left > 0 {
            let stream = match &mut self.state {
                State::Body(stream) => stream,
                State::Resuming(get, asked) => {
                    let asked = asked.clone();
                    match get.as_mut().poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(got)) => {
                            if let Some(error) = self.check_resumed(&got, &asked) {
                                return Poll::Ready(Some(Err(error)));
                            }
                            self.state = State::Body(got.into_stream());
                        }
                        Poll::Ready(Err(e)) => {
                            // A replaced object answers Precondition: the answer ends short.
                            if let Some(error) = self.resume_after(e) {
                                return Poll::Ready(Some(Err(error)));
                            }
                        }
                    }
                    continue;
                }
            };
            let piece = match stream.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    let reason = format!("{}: the store's answer ended {} bytes early", self.key, self.left);
                    match self.resume_after_short(reason) {
                        Some(error) => return Poll::Ready(Some(Err(error))),
                        None => continue,
                    }
                }
                Poll::Ready(Some(Err(e))) => match self.resume_after(e) {
                    Some(error) => return Poll::Ready(Some(Err(error))),
                    None => continue,
                },
                Poll::Ready(Some(Ok(piece))) => piece,
            };
            let mut piece = piece;
            let dropped = self.skip.min(piece.len() as u64);
            self.skip -= dropped;
            piece = piece.slice(dropped as usize..);
            if piece.is_empty() {
                continue;
            }
            let take = self.left.min(piece.len() as u64);
            self.left -= take;
            if let Some(resume) = &mut self.resume {
                resume.failures = 0;
            }
            return Poll::Ready(Some(Ok(piece.slice(..take as usize))));
        }
        Poll::Ready(None)
    }

    /// The error that ends the stream when a resuming GET's answer is not
    /// the `asked` bytes of the version being sent (a store that ignores
    /// `If-Match`).
    fn check_resumed(&self, got: &object_store::GetResult, asked: &std::ops::Range<u64>) -> Option<StorageError> {
        let resume = self.resume.as_ref()?;
        let same = got.meta.e_tag.as_deref() == Some(resume.etag.as_str()) && got.range == *asked;
        (!same).then(|| StorageError::PreconditionFailed {
            key: self.key.to_string(),
            reason: format!(
                "the object changed while it was sent (resumed bytes {}..{} came as {}..{} of ETag {:?}, not {:?})",
                asked.start, asked.end, got.range.start, got.range.end, got.meta.e_tag, resume.etag
            ),
        })
    }

    /// After the upstream read failed with `e`: starts a resuming GET
    /// (`None`), or the error that ends the stream.
    fn resume_after(&mut self, e: object_store::Error) -> Option<StorageError> {
        use object_store::Error as E;
        // Errors a second asking does not change.
        let gives_up = matches!(
            e,
            E::NotFound { .. }
                | E::Precondition { .. }
                | E::NotModified { .. }
                | E::PermissionDenied { .. }
                | E::Unauthenticated { .. }
                | E::InvalidPath { .. }
                | E::NotSupported { .. }
                | E::NotImplemented { .. }
        );
        if gives_up || !self.start_resume() {
            return Some(StorageError::from_object_store(&self.key, e));
        }
        None
    }

    /// As [`Self::resume_after`], for a body that ended early (`reason`).
    fn resume_after_short(&mut self, reason: String) -> Option<StorageError> {
        if self.start_resume() {
            None
        } else {
            Some(StorageError::Unavailable { reason })
        }
    }

    /// Starts a GET of the bytes still to come, of the version being sent;
    /// `false` when the stream is not resumable or has failed too often
    /// without progress.
    fn start_resume(&mut self) -> bool {
        let Some(resume) = &mut self.resume else { return false };
        resume.failures += 1;
        if resume.failures >= FAILURES_IN_A_ROW || resume.resumes_left == 0 {
            return false;
        }
        resume.resumes_left -= 1;
        let asked = resume.end - self.left..resume.end;
        self.skip = 0;
        let options = GetOptions {
            if_match: Some(resume.etag.clone()),
            range: Some(GetRange::Bounded(asked.clone())),
            ..GetOptions::default()
        };
        let (store, path, metrics) = (resume.store.clone(), resume.path.clone(), self.metrics.clone());
        tracing::debug!(key = %self.key, from = asked.start, end = asked.end, "resuming a streamed object read");
        let get = async move {
            let started = std::time::Instant::now();
            let got = match tokio::time::timeout(RESUME_WAIT, store.get_opts(&path, options)).await {
                Ok(got) => got,
                Err(_) => Err(object_store::Error::Generic {
                    store: "zarrd",
                    source: format!("no answer to a resuming GET within {} s", RESUME_WAIT.as_secs()).into(),
                }),
            };
            if let Some(m) = metrics {
                m.op(StorageOp::Read).latency.observe(started.elapsed());
            }
            got
        };
        self.state = State::Resuming(Box::pin(get), asked);
        true
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    fn pieces(parts: Vec<object_store::Result<Bytes>>) -> BoxStream<'static, object_store::Result<Bytes>> {
        futures::stream::iter(parts).boxed()
    }

    async fn drain(mut s: ObjectStream) -> (Vec<u8>, Option<StorageError>) {
        let mut out = Vec::new();
        loop {
            match std::future::poll_fn(|cx| s.poll_piece(cx)).await {
                Some(Ok(b)) => out.extend_from_slice(&b),
                Some(Err(e)) => return (out, Some(e)),
                None => return (out, None),
            }
        }
    }

    fn ok(b: &[u8]) -> object_store::Result<Bytes> {
        Ok(Bytes::copy_from_slice(b))
    }

    /// An in-memory store holding `k` = bytes 0..100, and a GET of it
    /// (`range`) whose body fails after its first `fail_after` bytes.
    async fn failing_get(
        range: Option<std::ops::Range<u64>>,
        fail_after: usize,
    ) -> (Arc<dyn ObjectStore>, object_store::GetResult) {
        use object_store::ObjectStoreExt;
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let data: Vec<u8> = (0..100).collect();
        store.put(&Path::from("k"), data.into()).await.unwrap();
        let options = GetOptions { range: range.map(GetRange::Bounded), ..GetOptions::default() };
        let mut got = store.get_opts(&Path::from("k"), options).await.unwrap();
        let start = usize::try_from(got.range.start).unwrap();
        let first = Bytes::from((start..start + fail_after).map(|b| b as u8).collect::<Vec<_>>());
        let cut = object_store::Error::Generic { store: "test", source: "connection reset".into() };
        got.payload = object_store::GetResultPayload::Stream(pieces(vec![Ok(first), Err(cut)]));
        (store, got)
    }

    #[tokio::test]
    async fn a_body_failing_midway_is_resumed_from_the_same_version() {
        use object_store::ObjectStoreExt;
        // A ranged GET (10..90) cut after 20 bytes: the rest is asked again.
        let (store, got) = failing_get(Some(10..90), 20).await;
        let s = ObjectStream::resumable(got, store, Path::from("k"), 0, 80, "k");
        let (out, e) = drain(s).await;
        assert!(e.is_none(), "{e:?}");
        assert_eq!(out, (10..90).collect::<Vec<u8>>());
        // A range cut from a whole-object GET (skip 5, take 50), cut after
        // 3 bytes, before the range began.
        let (store, got) = failing_get(None, 3).await;
        let s = ObjectStream::resumable(got, store, Path::from("k"), 5, 50, "k");
        let (out, e) = drain(s).await;
        assert!(e.is_none(), "{e:?}");
        assert_eq!(out, (5..55).collect::<Vec<u8>>());
        // The object replaced before the resume: the answer ends short with
        // the bytes of the version it started with, never the new one's.
        let (store, got) = failing_get(None, 30).await;
        store.put(&Path::from("k"), vec![7u8; 100].into()).await.unwrap();
        let s = ObjectStream::resumable(got, store, Path::from("k"), 0, 100, "k");
        let (out, e) = drain(s).await;
        assert_eq!(out, (0..30).collect::<Vec<u8>>());
        assert!(matches!(e, Some(StorageError::PreconditionFailed { .. })), "{e:?}");
        // Deleted: the same.
        let (store, got) = failing_get(None, 30).await;
        store.delete(&Path::from("k")).await.unwrap();
        let (out, e) = drain(ObjectStream::resumable(got, store, Path::from("k"), 0, 100, "k")).await;
        assert_eq!(out.len(), 30);
        assert!(matches!(e, Some(StorageError::NotFound { .. })), "{e:?}");
        // Not resumable (no store handed over): the failure ends the answer.
        let (_, got) = failing_get(None, 30).await;
        let (out, e) = drain(ObjectStream::new(got.into_stream(), 0, 100, "k")).await;
        assert_eq!(out.len(), 30);
        assert!(matches!(e, Some(StorageError::Unavailable { .. })), "{e:?}");
    }

    /// An in-memory store whose GETs ignore `If-Match` and whose bodies
    /// end after `cut` bytes: a store no resume can trust, or one that
    /// cuts every answer short.
    #[derive(Debug)]
    struct Unreliable {
        inner: object_store::memory::InMemory,
        cut: usize,
        gets: std::sync::atomic::AtomicUsize,
    }

    impl std::fmt::Display for Unreliable {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Unreliable")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Unreliable {
        async fn put_opts(
            &self,
            location: &Path,
            payload: object_store::PutPayload,
            opts: object_store::PutOptions,
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
            self.gets.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let options = GetOptions { if_match: None, ..options };
            let got = self.inner.get_opts(location, options).await?;
            let range = got.range.clone();
            let body = got.bytes().await?;
            let cut = object_store::Error::Generic { store: "test", source: "connection reset".into() };
            let mut parts = vec![Ok(body.slice(..self.cut.min(body.len())))];
            if body.len() > self.cut {
                parts.push(Err(cut));
            }
            let mut got = self.inner.get_opts(location, GetOptions { head: true, ..GetOptions::default() }).await?;
            got.range = range;
            got.payload = object_store::GetResultPayload::Stream(pieces(parts));
            Ok(got)
        }

        fn delete_stream(
            &self,
            locations: BoxStream<'static, object_store::Result<Path>>,
        ) -> BoxStream<'static, object_store::Result<Path>> {
            self.inner.delete_stream(locations)
        }

        fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
            self.inner.list(prefix)
        }

        async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<object_store::ListResult> {
            self.inner.list_with_delimiter(prefix).await
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

    #[tokio::test]
    async fn resumes_trust_only_the_same_version_and_are_bounded() {
        use object_store::ObjectStoreExt;
        let unreliable =
            |cut| Arc::new(Unreliable { inner: object_store::memory::InMemory::new(), cut, gets: 0.into() });
        let k = Path::from("k");
        // A store that ignores If-Match: the object replaced before the
        // resume is caught by its ETag, and none of its bytes is sent.
        let store = unreliable(30);
        store.put(&k, (0..100).collect::<Vec<u8>>().into()).await.unwrap();
        let got = store.get_opts(&k, GetOptions::default()).await.unwrap();
        store.put(&k, vec![7u8; 100].into()).await.unwrap();
        let (out, e) = drain(ObjectStream::resumable(got, store.clone(), k.clone(), 0, 100, "k")).await;
        assert_eq!(out, (0..30).collect::<Vec<u8>>());
        assert!(
            matches!(e, Some(StorageError::PreconditionFailed { ref reason, .. }) if reason.contains("changed while it was sent")),
            "{e:?}"
        );
        // A store cutting every answer after 1 MiB: a 4 MiB object needs 3
        // resumes of the 3 + 1 allowed and arrives whole; a 20 MiB one
        // would need 19 and ends short after 3 + 5, not one GET per MiB
        // for as long as the object goes on.
        for (mib, whole) in [(4u64, true), (20, false)] {
            let store = unreliable(1 << 20);
            let len = mib << 20;
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            store.put(&k, data.clone().into()).await.unwrap();
            let got = store.get_opts(&k, GetOptions::default()).await.unwrap();
            let (out, e) = drain(ObjectStream::resumable(got, store.clone(), k.clone(), 0, len, "k")).await;
            let gets = store.gets.load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(out, data[..out.len()], "{mib} MiB: the bytes that came are the object's");
            assert_eq!(e.is_none(), whole, "{mib} MiB: {e:?} after {} bytes and {gets} GETs", out.len());
            let allowed = u64::from(FAILURES_IN_A_ROW) + len / RESUME_EVERY;
            assert!(gets as u64 <= 1 + allowed, "{mib} MiB: {gets} GETs, more than 1 + {allowed}");
        }
        // Three failures in a row with no byte between them end the stream:
        // the first GET and two resumes, each cut before a byte.
        let store = unreliable(0);
        store.put(&k, vec![1u8; 100].into()).await.unwrap();
        let got = store.get_opts(&k, GetOptions::default()).await.unwrap();
        let (out, e) = drain(ObjectStream::resumable(got, store.clone(), k.clone(), 0, 100, "k")).await;
        assert!(out.is_empty() && e.is_some());
        assert_eq!(store.gets.load(std::sync::atomic::Ordering::Relaxed), 1 + 2);
    }

    #[tokio::test]
    async fn pieces_are_cut_to_the_range_and_short_bodies_are_errors() {
        let whole = || pieces(vec![ok(b"abc"), ok(b""), ok(b"defgh"), ok(b"ij")]);
        let (got, e) = drain(ObjectStream::new(whole(), 0, 10, "k")).await;
        assert_eq!((got.as_slice(), e.is_none()), (b"abcdefghij".as_slice(), true));
        // A range cut from a whole-object GET: skip 4, take 5; the rest is dropped.
        let (got, e) = drain(ObjectStream::new(whole(), 4, 5, "k")).await;
        assert_eq!((got.as_slice(), e.is_none()), (b"efghi".as_slice(), true));
        // Ending short is an error after the bytes that came.
        let (got, e) = drain(ObjectStream::new(whole(), 2, 20, "k")).await;
        assert_eq!(got, b"cdefghij");
        assert!(
            matches!(e, Some(StorageError::Unavailable { ref reason }) if reason.contains("ended 12 bytes early")),
            "{e:?}"
        );
        // So is a failure midway, counted in the mount's figures.
        let gone = object_store::Error::NotFound { path: "k".into(), source: "gone".into() };
        let metrics = Arc::new(StorageMetrics::default());
        let failing =
            Tail::Stream(ObjectStream::new(pieces(vec![ok(b"abc"), Err(gone)]), 0, 10, "k")).measured(metrics.clone());
        let Tail::Stream(failing) = failing else { panic!("a stream") };
        let (got, e) = drain(failing).await;
        assert_eq!(got, b"abc");
        assert!(e.is_some());
        assert_eq!(metrics.op(StorageOp::Read).errors("not_found"), 1);
    }
}
