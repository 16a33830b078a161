//! A read's answer on its way out: the messages a producer sends through
//! its channel of one (the last with an end mark), the answer budget their
//! bytes hold until the socket takes them, and JSON text written in pieces
//! of about a message (on the CPU pool, or inline when small).

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::cpu_error;
use crate::service::wire::json::{variable_text_len, JsonEncoder, VarCursor, VarItem};
use crate::service::{cpu, App, ServiceError, ServiceResult};
use crate::zarr::data_type::DataType;
use crate::zarr::field::FieldView;

/// The pieces of one message of a read's body. The last message of an
/// answer ends with an empty piece (pieces are never empty otherwise): a
/// channel that closes before it is a failed answer, never a whole one.
pub type Pieces = Vec<Bytes>;

/// Whether `pieces` is an answer's last message (its end mark removed).
pub fn take_last(pieces: &mut Pieces) -> bool {
    if pieces.last().is_some_and(Bytes::is_empty) {
        pieces.pop();
        true
    } else {
        false
    }
}

/// Answers up to this size (estimated decoded bytes) take no share of
/// `limits.read_answer_budget_bytes`: their messages and slabs are at most
/// this big, so a connection holds at most about three of them.
pub(super) const SMALL_ANSWER: u64 = 1 << 20;

/// What bounds an answer once it has started: the budget of all started
/// answers, the slab size, the selection limit.
#[derive(Debug, Clone)]
pub(super) struct AnswerLimits {
    pub(super) budget: Arc<tokio::sync::Semaphore>,
    pub(super) budget_kib: u64,
    pub(super) slab_bytes: u64,
    pub(super) max_selection: u64,
}

impl AnswerLimits {
    pub(super) fn of(app: &App) -> Self {
        let l = &app.config().limits;
        Self {
            budget: app.read_answer_budget().clone(),
            budget_kib: l.read_answer_budget_bytes.div_ceil(1024).max(1),
            slab_bytes: l.read_slab_bytes,
            max_selection: l.max_selection_bytes,
        }
    }

    /// Takes `bytes` of the budget (all of it at most), waiting for room;
    /// `None` when the answer's client goes away meanwhile (a waiting
    /// producer holds its plan: it must not outlive its request).
    pub(super) async fn share(
        &self,
        bytes: u64,
        tx: &mpsc::Sender<ServiceResult<Pieces>>,
    ) -> ServiceResult<Option<Share>> {
        #[allow(clippy::cast_possible_truncation)] // clamped to u32
        let kib = bytes.div_ceil(1024).clamp(1, self.budget_kib.min(u64::from(u32::MAX))) as u32;
        tokio::select! {
            permit = self.budget.clone().acquire_many_owned(kib) => {
                let permit =
                    permit.map_err(|_| ServiceError::Internal("the read answer budget is closed".into()))?;
                Ok((!tx.is_closed()).then(|| Arc::new(permit)))
            }
            () = tx.closed() => Ok(None),
        }
    }
}

impl AnswerLimits {
    /// Takes `bytes` of the budget (all of it at most), waiting for room,
    /// for an answer not yet started (a client that goes away drops the
    /// request, and the wait with it).
    pub(super) async fn share_now(&self, bytes: u64) -> ServiceResult<Share> {
        #[allow(clippy::cast_possible_truncation)] // clamped to u32
        let kib = bytes.div_ceil(1024).clamp(1, self.budget_kib.min(u64::from(u32::MAX))) as u32;
        let permit = self.budget.clone().acquire_many_owned(kib).await;
        Ok(Arc::new(permit.map_err(|_| ServiceError::Internal("the read answer budget is closed".into()))?))
    }
}

/// `b`, holding `share` until it is dropped (written, or the connection
/// closed).
pub(super) fn held(b: Bytes, share: &Share) -> Bytes {
    Bytes::from_owner(Held(b, share.clone()))
}

/// An answer's share of `limits.read_answer_budget_bytes`: held by the
/// producer and by every message it sent, until the last is written.
pub(super) type Share = Arc<tokio::sync::OwnedSemaphorePermit>;

/// Bytes of a message, holding the answer's share until they are dropped
/// (written to the socket, or the connection closed).
struct Held(Bytes, #[allow(dead_code)] Share);

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Where an answer's bytes go: pieces collected into messages of about
/// `message` bytes, sent through the channel of one; the last one carries
/// the end mark ([`Pieces`]).
pub(super) struct Out {
    pub(super) tx: mpsc::Sender<ServiceResult<Pieces>>,
    pub(super) pending: Pieces,
    pub(super) pending_len: usize,
    pub(super) message: usize,
    pub(super) share: Option<Share>,
}

impl Out {
    pub(super) fn new(tx: mpsc::Sender<ServiceResult<Pieces>>, message: u64) -> Self {
        Self {
            tx,
            pending: Vec::new(),
            pending_len: 0,
            message: usize::try_from(message).unwrap_or(usize::MAX),
            share: None,
        }
    }

    pub(super) fn push(&mut self, b: Bytes) {
        if b.is_empty() {
            return;
        }
        self.pending_len += b.len();
        let b = match &self.share {
            Some(s) => Bytes::from_owner(Held(b, s.clone())),
            None => b,
        };
        self.pending.push(b);
    }

    /// Sends the pending pieces once they make a message (`all`: whatever
    /// there is); false when the client went away.
    pub(super) async fn flush(&mut self, all: bool) -> bool {
        if self.pending.is_empty() || (!all && self.pending_len < self.message) {
            return true;
        }
        self.pending_len = 0;
        self.tx.send(Ok(std::mem::take(&mut self.pending))).await.is_ok()
    }

    /// Ends the answer: its last message (with the end mark), or the error
    /// (an ordinary error answer when nothing was sent yet).
    pub(super) async fn finish(mut self, result: ServiceResult<bool>) {
        match result {
            Ok(true) => {
                let mut last = std::mem::take(&mut self.pending);
                last.push(Bytes::new());
                let _ = self.tx.send(Ok(last)).await;
            }
            Ok(false) => {}
            Err(e) => {
                let _ = self.tx.send(Err(e)).await;
            }
        }
    }
}

/// Fixed-size elements up to this size are projected (a field) and written
/// as JSON inline: cheaper than the hand-off to the CPU pool.
pub(super) const INLINE_ENCODE_BYTES: usize = 64 << 10;

/// A slab's fixed-size elements after the field projection.
pub(super) async fn project(field: Option<&FieldView>, bytes: Vec<u8>) -> ServiceResult<Vec<u8>> {
    let Some(f) = field.cloned() else { return Ok(bytes) };
    cpu::run_or_inline(bytes.len() <= INLINE_ENCODE_BYTES, move || {
        f.extract(&bytes).map_err(|e| ServiceError::Internal(format!("projecting the field of a slab: {e}")))
    })
    .await
    .map_err(|e| cpu_error(&e))?
}

/// Writes fixed-size elements (already projected) as JSON into `out`, in
/// pieces of about a message each, encoded on the CPU pool; false when the
/// client went away.
pub(super) async fn json_fixed(enc: &mut JsonEncoder, bytes: Vec<u8>, es: usize, out: &mut Out) -> ServiceResult<bool> {
    let bytes = Arc::new(bytes);
    let (mut at, limit) = (0usize, out.message);
    while at < bytes.len() {
        let (b, mut e) = (bytes.clone(), enc.clone());
        let (e, piece, n) = cpu::run_or_inline(bytes.len() - at <= INLINE_ENCODE_BYTES, move || {
            let rest = &b[at..];
            let mut piece = Vec::with_capacity(rest.len().saturating_mul(4).min(limit.saturating_add(4096)));
            let n = e.fixed_until(rest, &mut piece, limit);
            (e, piece, n)
        })
        .await
        .map_err(|e| cpu_error(&e))?;
        *enc = e;
        at += n.max(1) * es.max(1);
        out.push(Bytes::from(piece));
        if !out.flush(false).await {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Writes variable-length elements (`None`: the fill value, whose text is
/// `fill`) as JSON into `out`, in pieces of about a message each (a long
/// element is cut between pieces), encoded on the CPU pool. Their text
/// (each element's, plus a separator) is counted first and added to
/// `*text`, which may not pass `max_selection` (413 when nothing was sent
/// yet). False when the client went away.
pub(super) async fn json_variable(
    enc: &mut JsonEncoder,
    items: Arc<dyn VarItems>,
    fill: Arc<Vec<u8>>,
    max_selection: u64,
    text: &mut u64,
    out: &mut Out,
) -> ServiceResult<bool> {
    let (it, dt, fill_len) = (items.clone(), enc_type(enc), fill.len() as u64);
    let len = cpu::run(move || {
        (0..it.len()).map(|i| it.get(i).map_or(fill_len, |b| variable_text_len(&dt, b)) + 1).sum::<u64>()
    })
    .await
    .map_err(|e| cpu_error(&e))?;
    let before = *text;
    *text = text.saturating_add(len);
    if *text > max_selection {
        return Err(ServiceError::SelectionTooLarge(format!(
            "the selection's variable-length elements come to more than limits.max_selection_bytes = {max_selection} \
             bytes of JSON text (at least {}; they count by their text, the fill value's included)",
            before.saturating_add(len)
        )));
    }
    let limit = out.message;
    let reserve = usize::try_from(len).unwrap_or(usize::MAX).min(limit.saturating_add(128 * 1024));
    let mut cursor = VarCursor::default();
    loop {
        let (it, f, mut e) = (items.clone(), fill.clone(), enc.clone());
        let (e, piece, c, done) = cpu::run(move || {
            let mut piece = Vec::with_capacity(reserve);
            let item = |i: usize| it.get(i).map_or(VarItem::Text(&f), VarItem::Raw);
            let done = e.variable_until(it.len(), item, &mut cursor, &mut piece, limit);
            (e, piece, cursor, done)
        })
        .await
        .map_err(|e| cpu_error(&e))?;
        (*enc, cursor) = (e, c);
        out.push(Bytes::from(piece));
        if !out.flush(false).await {
            return Ok(false);
        }
        if done {
            return Ok(true);
        }
    }
}

fn enc_type(enc: &JsonEncoder) -> DataType {
    enc.data_type().clone()
}

/// Variable-length elements to answer, by index (`None`: the fill value).
pub(super) trait VarItems: Send + Sync {
    fn len(&self) -> usize;
    fn get(&self, i: usize) -> Option<&[u8]>;
}

impl VarItems for Vec<Option<Vec<u8>>> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn get(&self, i: usize) -> Option<&[u8]> {
        self[i].as_deref()
    }
}

/// Waits for a producer's first message: an error then is the answer's.
pub(super) async fn first_message(rx: &mut mpsc::Receiver<ServiceResult<Pieces>>) -> ServiceResult<(Pieces, bool)> {
    match rx.recv().await {
        Some(Ok(mut pieces)) => {
            let last = take_last(&mut pieces);
            Ok((pieces, last))
        }
        Some(Err(e)) => Err(e),
        None => Err(ServiceError::Internal("the read stopped before its first slab".into())),
    }
}
