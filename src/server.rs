//! Serving: bind, log, serve until SIGINT/SIGTERM, then let in-flight
//! requests finish (up to `shutdown_grace_seconds`).

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::config::{Config, LogFormat};
use crate::service::App;

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
/// Prints `zarrd listening on http://ADDR` on stdout once listening (tests
/// and scripts read the port from it).
///
/// # Errors
/// A mount that cannot be built or does not answer, or a bind failure.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let grace = Duration::from_secs(config.shutdown_grace_seconds);
    let bind = config.bind;
    // Handle SIGINT/SIGTERM before anyone can learn our address: a signal sent
    // right after the "listening" line must start a graceful shutdown, not kill
    // the process (the default action) nor be lost (tokio registers a signal
    // only when its stream is created).
    let shutdown = shutdown_signal().context("cannot install signal handlers")?;
    let app = Arc::new(App::from_config(config)?);
    let failing = app.probe_mounts().await;
    if let Some((mount, reason)) = failing.first() {
        anyhow::bail!("mount `{mount}` is unreachable: {reason}");
    }
    for m in app.mounts() {
        tracing::info!(mount = m.name(), url = m.url(), read_only = m.read_only(), "mount ready");
    }
    let listener = TcpListener::bind(bind).await.with_context(|| format!("cannot listen on {bind}"))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "listening");
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "zarrd listening on http://{addr}")?;
        out.flush()?;
    }
    let router = crate::http::router(app);
    let (tx, rx) = tokio::sync::watch::channel(false);
    let mut server = tokio::spawn(async move {
        let mut rx = rx;
        // TCP_NODELAY, as nginx sets on keep-alive connections: a response
        // written in several segments must not wait for the client's delayed ACK.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = rx.wait_for(|stop| *stop).await;
            })
            .await
    });
    tokio::select! {
        result = &mut server => return Ok(result??),
        () = shutdown => {}
    }
    tracing::info!(grace_seconds = grace.as_secs(), "shutting down: finishing in-flight requests");
    let _ = tx.send(true);
    match tokio::time::timeout(grace, &mut server).await {
        Ok(result) => result??,
        Err(_) => {
            tracing::warn!("grace period over: closing remaining connections");
            server.abort();
        }
    }
    tracing::info!("stopped");
    Ok(())
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
