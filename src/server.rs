//! Serving: bind, log, serve until SIGINT/SIGTERM, then let in-flight
//! requests finish (up to `shutdown_grace_seconds`).
//!
//! Connections are served with hyper-util directly (not `axum::serve`), for
//! what axum's server does not offer: the header read timeout (slowloris),
//! TLS with HTTP/2 by ALPN, and the peer address on every request.

use std::convert::Infallible;
use std::future::Future as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::config::{Config, LogFormat};
use crate::http::front::{Front, FrontFuture};
use crate::service::App;

mod balance;
use balance::{Balance, Seat};

/// Installs the tracing subscriber: `RUST_LOG` (default `info`), text or JSON.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Builds the app from `config`, checks every mount answers, and serves.
///
/// Prints `zarrd listening on http://ADDR` (or `https://`) on stdout once
/// listening (tests and scripts read the port from it).
///
/// # Errors
/// A mount that cannot be built or does not answer, unreadable TLS files,
/// or a bind failure.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let grace = Duration::from_secs(config.shutdown_grace_seconds);
    let bind = config.bind;
    let reuse_port = config.bind_reuse_port;
    // Handle SIGINT/SIGTERM before anyone can learn our address: a signal sent
    // right after the "listening" line must start a graceful shutdown, not kill
    // the process (the default action) nor be lost (tokio registers a signal
    // only when its stream is created).
    let shutdown = shutdown_signal().context("cannot install signal handlers")?;
    let connections = Arc::new(Connections::new(&config)?);
    let app = Arc::new(App::from_config(config)?);
    let failing = app.probe_mounts().await;
    if let Some((mount, reason)) = failing.first() {
        anyhow::bail!("mount `{mount}` is unreachable: {reason}");
    }
    for m in app.mounts() {
        tracing::info!(
            mount = m.name(),
            url = m.url(),
            read_only = m.read_only(),
            anonymous_read = m.anonymous_read(),
            "mount ready"
        );
    }
    let (level, message) = access_summary(&crate::http::auth::Authenticator::new(app.config()));
    if level == tracing::Level::WARN {
        tracing::warn!(%bind, "{message}");
    } else {
        tracing::info!(%bind, "{message}");
    }
    let workers = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let listeners = bind_listeners(bind, workers, reuse_port).map_err(|e| {
        let message = bind_error(bind, &e);
        anyhow::Error::new(e).context(message)
    })?;
    let addr = listeners[0].local_addr()?;
    tracing::info!(%addr, workers, tls = connections.tls.is_some(), "listening");
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "zarrd listening on {}://{addr}", connections.scheme())?;
        out.flush()?;
    }
    let router = crate::http::router(app);
    let (tx, rx) = tokio::sync::watch::channel(false);
    // Copies of one socket: connections are spread by the workers (see
    // `balance`); with SO_REUSEPORT the kernel spreads them.
    let balance = (!reuse_port).then(|| Balance::new(listeners.len()));
    let workers = listeners.len();
    let (done_tx, done) = tokio::sync::mpsc::unbounded_channel();
    for (i, listener) in listeners.into_iter().enumerate() {
        let (router, rx, connections) = (router.clone(), rx.clone(), Arc::clone(&connections));
        let seat = balance.as_ref().map(|b| Seat::new(b, i));
        let done = done_tx.clone();
        std::thread::Builder::new().name(format!("zarrd-worker-{i}")).spawn(move || {
            let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                serve_on(listener, router, connections, rx, seat)
            }));
            let _ = done.send((i, served.unwrap_or_else(|_| Err(std::io::Error::other("the worker panicked")))));
        })?;
    }
    drop(done_tx);
    supervise(workers, done, shutdown, &tx, grace).await
}

/// Waits for the workers: until `shutdown`, then (after telling them to
/// stop through `stop`) until all have returned or `grace` is over.
///
/// A worker that returns before `shutdown` — it cannot serve, or it
/// panicked — stops the server: the others are told to stop and the error
/// names the worker. Carrying on with fewer workers would hide it (the
/// connections it held are gone, the balance waits for a seat nobody
/// takes); a supervisor restarting the process is the remedy.
///
/// # Errors
/// A worker that stopped before `shutdown`, or failed while stopping.
async fn supervise(
    workers: usize,
    mut done: tokio::sync::mpsc::UnboundedReceiver<(usize, std::io::Result<()>)>,
    shutdown: impl std::future::Future<Output = ()>,
    stop: &tokio::sync::watch::Sender<bool>,
    grace: Duration,
) -> anyhow::Result<()> {
    let early = tokio::select! {
        exit = done.recv() => exit,
        () = shutdown => None,
    };
    let mut left = workers;
    let mut failure = None;
    if let Some((i, result)) = early {
        left -= 1;
        let reason = result.err().map_or_else(|| "it returned".to_string(), |e| e.to_string());
        tracing::error!(worker = i, %reason, "a worker stopped while serving: stopping the server");
        failure = Some(anyhow::anyhow!("worker {i} stopped while serving: {reason}"));
    } else {
        tracing::info!(grace_seconds = grace.as_secs(), "shutting down: finishing in-flight requests");
    }
    let _ = stop.send(true);
    let deadline = tokio::time::Instant::now() + grace;
    while left > 0 {
        match tokio::time::timeout_at(deadline, done.recv()).await {
            Ok(Some((i, result))) => {
                left -= 1;
                if let Err(e) = result {
                    tracing::error!(worker = i, error = %e, "a worker failed while stopping");
                    failure.get_or_insert_with(|| anyhow::anyhow!("worker {i}: {e}"));
                }
            }
            Ok(None) => break,
            Err(_) => {
                tracing::warn!("grace period over: closing remaining connections");
                break;
            }
        }
    }
    match failure {
        Some(e) => Err(e),
        None => {
            tracing::info!("stopped");
            Ok(())
        }
    }
}

/// What the start-up log says about access: a warning when anyone who can
/// connect may read everything.
fn access_summary(auth: &crate::http::auth::Authenticator) -> (tracing::Level, String) {
    let names: Vec<&str> = auth.token_names().collect();
    if auth.open_reads() {
        let message = "no auth tokens configured and the bind address is not loopback: anyone who can connect \
                       may read every mount, nobody may write (configure [auth] tokens)";
        (tracing::Level::WARN, message.to_string())
    } else if names.is_empty() {
        (tracing::Level::INFO, "no auth tokens configured: loopback clients may read and write every mount".into())
    } else {
        (tracing::Level::INFO, format!("bearer tokens configured: {}", names.join(", ")))
    }
}

/// The listening sockets, one per worker.
///
/// By default the port is bound exclusively (no `SO_REUSEPORT`), once, and
/// the workers accept from copies of that one socket: a second server on a
/// port in use fails here (`EADDRINUSE`) instead of silently sharing it.
/// With `reuse_port` (`bind_reuse_port = true`) each worker has its own
/// socket with `SO_REUSEPORT` and the kernel spreads connections over them
/// and over any other process that does the same. The first socket picks
/// the port when `bind` asks for port 0.
fn bind_listeners(bind: SocketAddr, workers: usize, reuse_port: bool) -> std::io::Result<Vec<std::net::TcpListener>> {
    let mut addr = bind;
    let mut out = Vec::with_capacity(workers);
    for _ in 0..workers.max(1) {
        if !reuse_port {
            if let Some(first) = out.first() {
                let copy = std::net::TcpListener::try_clone(first)?;
                out.push(copy);
                continue;
            }
        }
        let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        socket.set_reuseaddr(true)?;
        socket.set_reuseport(reuse_port)?;
        socket.bind(addr)?;
        let listener = socket.listen(1024)?;
        addr = listener.local_addr()?;
        out.push(listener.into_std()?);
    }
    Ok(out)
}

/// The message of a failed bind: which address, and what to do.
fn bind_error(bind: SocketAddr, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        format!(
            "cannot listen on {bind}: the address is already in use (is another zarrd or server running on it?); \
             stop it, choose another `bind`, or set `bind_reuse_port = true` in both to share the port"
        )
    } else {
        format!("cannot listen on {bind}")
    }
}

/// A worker: a single-threaded runtime serving one listener until `stop`.
///
/// One runtime per core, each with its own socket, as nginx runs one worker
/// process per core. Against one work-stealing runtime, measured
/// (interleaved wrk runs, 16 connections): 64 KiB chunks +11% requests/s and
/// -9% CPU per request, 404s +4% and -5%; cross-thread wake-ups cost more
/// than they balance on short requests.
fn serve_on(
    listener: std::net::TcpListener,
    router: Front,
    connections: Arc<Connections>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    seat: Option<Seat>,
) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let listener = TcpListener::from_std(listener)?;
        let stop = async move {
            let _ = stop.wait_for(|stop| *stop).await;
        };
        serve_seated(listener, router, connections, stop, seat).await
    })
}

/// How accepted connections are served: HTTP/1.1, or HTTP/2 when TLS's
/// ALPN chose it, over TLS when configured, with
/// `limits.header_read_timeout_seconds` for the TLS handshake, for each
/// HTTP/1.1 request's headers (which also closes idle keep-alive
/// connections) and for the HTTP/2 connection preface; unresponsive HTTP/2
/// connections are found by pings.
///
/// The protocol is never sniffed from the first bytes (hyper-util's auto
/// mode): that read has no timeout, so a client sending nothing would hold
/// its connection forever. Plain-text HTTP/2 (h2c) is therefore not offered;
/// no Zarr client uses it.
pub struct Connections {
    http1: auto::Builder<TokioExecutor>,
    http2: auto::Builder<TokioExecutor>,
    tls: Option<TlsAcceptor>,
    handshake_timeout: Duration,
    /// `limits.send_stall_timeout_seconds` ([`SendStall`]).
    send_stall: Duration,
    /// One permit per connection that may be open ([`Connections::max`]),
    /// held by each connection's task until it closes: the accept loops of
    /// every worker wait for one before accepting.
    slots: Arc<tokio::sync::Semaphore>,
    /// `limits.max_connections`, at most half the open-file limit.
    max: usize,
    /// When the server last logged that every connection slot was taken
    /// (seconds since `started`), so a flood logs once a minute.
    full_logged: std::sync::atomic::AtomicU64,
    started: std::time::Instant,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections").field("tls", &self.tls.is_some()).finish_non_exhaustive()
    }
}

impl Connections {
    /// From `config.limits` and `config.tls` (whose files are read now).
    ///
    /// # Errors
    /// Unreadable or invalid certificate or key, naming the file.
    pub fn new(config: &Config) -> anyhow::Result<Self> {
        let header_timeout = Duration::from_secs(config.limits.header_read_timeout_seconds);
        let mut http1 = auto::Builder::new(TokioExecutor::new()).http1_only();
        http1.http1().timer(TokioTimer::new()).header_read_timeout(header_timeout);
        let mut http2 = auto::Builder::new(TokioExecutor::new()).http2_only();
        // Pings close HTTP/2 connections whose client stopped answering.
        http2
            .http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(header_timeout);
        let tls = config.tls.as_ref().map(tls_acceptor).transpose()?;
        let send_stall = Duration::from_secs(config.limits.send_stall_timeout_seconds);
        let max = connection_cap(config.limits.max_connections, open_file_limit());
        Ok(Self {
            http1,
            http2,
            tls,
            handshake_timeout: header_timeout,
            send_stall,
            slots: Arc::new(tokio::sync::Semaphore::new(max)),
            max,
            full_logged: std::sync::atomic::AtomicU64::new(u64::MAX),
            started: std::time::Instant::now(),
        })
    }

    /// Connections that may be open at once.
    #[must_use]
    pub fn max(&self) -> usize {
        self.max
    }

    /// A connection slot, waited for when every one is taken (`None` once
    /// `stop` resolved first).
    async fn slot(
        &self,
        stop: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
            return Some(permit);
        }
        let now = self.started.elapsed().as_secs();
        let last = self.full_logged.load(std::sync::atomic::Ordering::Relaxed);
        if last == u64::MAX || now >= last + 60 {
            self.full_logged.store(now, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(
                max_connections = self.max,
                "every connection slot is taken (limits.max_connections): new connections wait to be accepted"
            );
        }
        tokio::select! {
            permit = Arc::clone(&self.slots).acquire_owned() => permit.ok(),
            () = stop => None,
        }
    }

    /// `https` or `http`.
    #[must_use]
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

/// The process's open-file limit (`RLIMIT_NOFILE`, soft); `None` when
/// unlimited or unknown.
fn open_file_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// `configured` connections, at most half of `open_files` (and at least
/// one): the rest of the descriptors are for files, sockets to stores and
/// the listener.
fn connection_cap(configured: usize, open_files: Option<u64>) -> usize {
    let half = open_files.map_or(usize::MAX, |n| usize::try_from(n / 2).unwrap_or(usize::MAX));
    let cap = configured.min(half).max(1);
    if cap < configured {
        tracing::warn!(
            max_connections = configured,
            open_file_limit = open_files,
            using = cap,
            "limits.max_connections is more than half the open-file limit (ulimit -n): serving at most {cap} connections"
        );
    }
    cap
}

/// A rustls acceptor offering HTTP/2 and HTTP/1.1 by ALPN.
fn tls_acceptor(tls: &crate::config::Tls) -> anyhow::Result<TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let cert_file = tls.cert.display();
    let certs = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| anyhow::anyhow!("tls.cert: {cert_file}: {e}"))?;
    if certs.is_empty() {
        anyhow::bail!("tls.cert: {cert_file}: no PEM certificate in the file");
    }
    let key =
        PrivateKeyDer::from_pem_file(&tls.key).map_err(|e| anyhow::anyhow!("tls.key: {}: {e}", tls.key.display()))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .with_context(|| {
            format!("tls: the key in {} does not suit the certificate in {cert_file}", tls.key.display())
        })?;
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(server)))
}

/// Serves `listener` until `stop` resolves, then lets open connections
/// finish their requests (idle ones close at once) and returns when all
/// have closed. Each request is handed to [`Front::handle_from`] with its
/// peer address (the loopback rule of [`crate::http::auth`]; routed
/// requests carry it as [`axum::extract::ConnectInfo<SocketAddr>`]).
///
/// # Errors
/// None today: accept errors are logged and retried.
pub async fn serve_listener(
    listener: TcpListener,
    router: Front,
    connections: Arc<Connections>,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    serve_seated(listener, router, connections, stop, None).await
}

/// [`serve_listener`] for one of several workers accepting from copies of
/// one socket: with a `seat`, a worker ahead of the others lets them take
/// the next connection ([`balance`]).
async fn serve_seated(
    listener: TcpListener,
    router: Front,
    connections: Arc<Connections>,
    stop: impl std::future::Future<Output = ()>,
    seat: Option<Seat>,
) -> std::io::Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Every connection task holds a sender; `recv` answers `None` once all are gone.
    let (open_tx, mut open_rx) = tokio::sync::mpsc::channel::<()>(1);
    tokio::pin!(stop);
    loop {
        if let Some(seat) = &seat {
            tokio::select! {
                () = seat.wait_turn() => {}
                () = &mut stop => break,
            }
        }
        // A slot first: past limits.max_connections new connections wait
        // in the kernel's accept queue, holding nothing here.
        let Some(slot) = connections.slot(&mut stop).await else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let (tcp, peer) = match accepted {
            Ok(pair) => pair,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionRefused
                ) =>
            {
                continue
            }
            Err(e) => {
                // Out of file descriptors and the like: wait rather than spin.
                tracing::error!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // TCP_NODELAY, as nginx sets on keep-alive connections: a response
        // written in several segments must not wait for the client's delayed ACK.
        let _ = tcp.set_nodelay(true);
        let service = PeerService { router: router.clone(), peer };
        let (connections, stop, open) = (Arc::clone(&connections), stop_rx.clone(), open_tx.clone());
        let counted = seat.as_ref().map(Seat::opened);
        tokio::spawn(async move {
            let _open = (open, counted, slot);
            serve_connection(&connections, tcp, service, stop).await;
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(open_tx);
    let _ = open_rx.recv().await;
    Ok(())
}

async fn serve_connection(
    connections: &Connections,
    tcp: TcpStream,
    service: PeerService,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    // Below TLS: a client that stops taking bytes stalls the socket's writes.
    let tcp = SendStall::new(tcp, connections.send_stall);
    let Some(acceptor) = &connections.tls else {
        return drive(&connections.http1, TokioIo::new(tcp), service, &mut stop).await;
    };
    let handshake = tokio::select! {
        h = tokio::time::timeout(connections.handshake_timeout, acceptor.accept(tcp)) => h,
        () = stopped(&mut stop) => return,
    };
    match handshake {
        Ok(Ok(tls)) if tls.get_ref().1.alpn_protocol() == Some(b"h2") => {
            // HTTP/2 has no header read timeout: bound the wait for the
            // client's connection preface instead.
            let io = PrefaceDeadline::new(tls, connections.handshake_timeout);
            drive(&connections.http2, TokioIo::new(io), service, &mut stop).await;
        }
        Ok(Ok(tls)) => drive(&connections.http1, TokioIo::new(tls), service, &mut stop).await,
        Ok(Err(e)) => tracing::debug!(peer = %service.peer, error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!(peer = %service.peer, "TLS handshake timed out"),
    }
}

async fn drive<I>(
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    service: PeerService,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        () = stopped(stop) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// The HTTP/2 client connection preface (RFC 9113 §3.4) is 24 bytes.
const H2_PREFACE_LEN: usize = 24;

/// A stream whose first [`H2_PREFACE_LEN`] bytes must arrive before a
/// deadline; reads fail with `TimedOut` after it. Transparent afterwards.
/// (The deadline is boxed so the stream stays `Unpin`, as hyper needs; one
/// allocation per HTTP/2 connection.)
struct PrefaceDeadline<S> {
    inner: S,
    deadline: Pin<Box<tokio::time::Sleep>>,
    remaining: usize,
}

impl<S> PrefaceDeadline<S> {
    fn new(inner: S, timeout: Duration) -> Self {
        Self { inner, deadline: Box::pin(tokio::time::sleep(timeout)), remaining: H2_PREFACE_LEN }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for PrefaceDeadline<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.remaining == 0 {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.remaining = this.remaining.saturating_sub(buf.filled().len() - before);
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.deadline.as_mut().poll(cx).is_ready() => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no HTTP/2 connection preface within limits.header_read_timeout_seconds",
            ))),
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for PrefaceDeadline<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A stream whose writes fail with `TimedOut` once they have waited
/// `timeout` without the socket taking a byte (the client stopped reading):
/// hyper then closes the connection, dropping whatever its answer holds
/// (`limits.send_stall_timeout_seconds`). Any write that makes progress
/// starts the wait again, so a slow client that reads is never cut off.
/// (The deadline is boxed so the stream stays `Unpin`; it is allocated the
/// first time a write waits.)
struct SendStall<S> {
    inner: S,
    timeout: Duration,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether `deadline` runs for the current wait.
    waiting: bool,
}

impl<S> SendStall<S> {
    fn new(inner: S, timeout: Duration) -> Self {
        Self { inner, timeout, deadline: None, waiting: false }
    }

    /// A write is waiting: starts the deadline (for a new wait); whether it
    /// has passed (registering `cx` to be woken when it does).
    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        let at = tokio::time::Instant::now() + self.timeout;
        let deadline = self.deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if !self.waiting {
            deadline.as_mut().reset(at);
            self.waiting = true;
        }
        deadline.as_mut().poll(cx).is_ready()
    }

    fn check<T>(&mut self, cx: &mut Context<'_>, polled: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        match polled {
            Poll::Pending if self.stalled(cx) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client took no bytes within limits.send_stall_timeout_seconds",
            ))),
            Poll::Pending => Poll::Pending,
            ready => {
                self.waiting = false;
                ready
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for SendStall<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for SendStall<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.check(cx, polled)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.check(cx, polled)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.check(cx, polled)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.check(cx, polled)
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// The router, with each request's peer address handed over.
#[derive(Clone)]
struct PeerService {
    router: Front,
    peer: SocketAddr,
}

impl hyper::service::Service<Request<Incoming>> for PeerService {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = FrontFuture;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        self.router.handle_from(req, Some(self.peer))
    }
}

/// Resolves on the first SIGINT or SIGTERM. The handlers are installed when
/// this is called, not when the future is first polled.
#[cfg(unix)]
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

#[cfg(not(unix))]
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Scope, TokenHash, TokenSpec};
    use crate::http::auth::Authenticator;

    #[test]
    fn connections_take_at_most_half_the_open_file_limit() {
        assert_eq!(super::connection_cap(8192, Some(1024)), 512);
        assert_eq!(super::connection_cap(8192, Some(1_048_576)), 8192);
        assert_eq!(super::connection_cap(8192, None), 8192);
        assert_eq!(super::connection_cap(10, Some(1)), 1);
    }

    #[test]
    fn start_up_says_who_may_do_what() {
        let mut config = Config { bind: "0.0.0.0:8080".parse().unwrap(), ..Config::default() };
        let (level, message) = access_summary(&Authenticator::new(&config));
        assert_eq!(level, tracing::Level::WARN);
        assert!(message.contains("anyone who can connect may read"), "{message}");
        config.bind = "127.0.0.1:8080".parse().unwrap();
        let (level, message) = access_summary(&Authenticator::new(&config));
        assert_eq!(level, tracing::Level::INFO);
        assert!(message.contains("loopback"), "{message}");
        config.bind = "[::]:8080".parse().unwrap();
        config.auth.tokens = vec![TokenSpec {
            name: "ci".into(),
            sha256: TokenHash::of(b"x"),
            scopes: [("*".to_string(), vec![Scope::Read])].into(),
        }];
        let (level, message) = access_summary(&Authenticator::new(&config));
        assert_eq!(level, tracing::Level::INFO);
        assert!(message.ends_with("ci"), "{message}");
    }

    /// Fake workers: each waits for the stop signal (or, for `early`, does
    /// not) and reports on `done` as a worker thread does.
    fn fake_workers(
        n: usize,
        early: Option<usize>,
        stop: &tokio::sync::watch::Sender<bool>,
    ) -> tokio::sync::mpsc::UnboundedReceiver<(usize, std::io::Result<()>)> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..n {
            let (tx, mut stopped) = (tx.clone(), stop.subscribe());
            tokio::spawn(async move {
                if early == Some(i) {
                    let _ = tx.send((i, Err(std::io::Error::other("the worker panicked"))));
                    return;
                }
                let _ = stopped.wait_for(|s| *s).await;
                let _ = tx.send((i, Ok(())));
            });
        }
        rx
    }

    #[tokio::test]
    async fn a_worker_that_stops_while_serving_stops_the_server() {
        let (stop, _keep) = tokio::sync::watch::channel(false);
        let done = fake_workers(3, Some(1), &stop);
        let never = std::future::pending::<()>();
        let outcome =
            tokio::time::timeout(Duration::from_secs(10), supervise(3, done, never, &stop, Duration::from_secs(5)))
                .await
                .expect("supervise returns without a shutdown signal");
        let message = outcome.expect_err("a dead worker is an error").to_string();
        assert!(message.contains("worker 1") && message.contains("panicked"), "{message}");
        assert!(*stop.borrow(), "the other workers were told to stop");
    }

    #[tokio::test]
    async fn a_shutdown_stops_every_worker_and_succeeds() {
        let (stop, _keep) = tokio::sync::watch::channel(false);
        let done = fake_workers(3, None, &stop);
        let outcome = tokio::time::timeout(
            Duration::from_secs(10),
            supervise(3, done, std::future::ready(()), &stop, Duration::from_secs(5)),
        )
        .await
        .expect("every worker stops within the grace period");
        outcome.expect("a clean shutdown");
        assert!(*stop.borrow());
    }
}
