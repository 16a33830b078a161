//! The bytes of a streamed read that the backend did not hand over in
//! [`super::ReadOutcome::body`] ([`super::ReadRequest::stream`]): still in
//! their local file ([`FileSpan`], read a frame at a time), or still
//! arriving from an object store ([`ObjectStream`], handed on piece by
//! piece as the store's client receives them). Either way an answer holds a
//! frame or two of them, never the whole object.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::Stream;

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
pub struct ObjectStream {
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    skip: u64,
    left: u64,
    key: Arc<str>,
    metrics: Option<Arc<StorageMetrics>>,
}

impl std::fmt::Debug for ObjectStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStream")
            .field("key", &self.key)
            .field("skip", &self.skip)
            .field("left", &self.left)
            .finish()
    }
}

impl ObjectStream {
    /// `left` bytes of `stream` after its first `skip`, read for `key`.
    #[must_use]
    pub fn new(stream: BoxStream<'static, object_store::Result<Bytes>>, skip: u64, left: u64, key: &str) -> Self {
        Self { stream, skip, left, key: key.into(), metrics: None }
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
            let piece = match std::pin::Pin::new(&mut self.stream).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    let reason = format!("{}: the store's answer ended {} bytes early", self.key, self.left);
                    return Poll::Ready(Some(Err(StorageError::Unavailable { reason })));
                }
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Some(Err(StorageError::from_object_store(&self.key, e))));
                }
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
            return Poll::Ready(Some(Ok(piece.slice(..take as usize))));
        }
        Poll::Ready(None)
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
