//! Connections: accept, bound, time out, and shut down without waiting on the idle.
//!
//! `axum::serve` keeps a connection for as long as the client likes: one that sends
//! nothing, half a request line or half its headers stays open forever, and enough of
//! them use up the process's file descriptors (then `/health` stops answering too), and
//! one of them kept SIGTERM from ending the server. This module runs the HTTP/1
//! connections itself (hyper, the same stack axum uses) with:
//!
//! - a **header read timeout** ([`ConnLimits::header_timeout`]): a connection that has
//!   not sent a whole request head in that time is closed. It also closes keep-alive
//!   connections that stay idle that long between requests;
//! - a **body read timeout** ([`ConnLimits::body_timeout`], applied where the handlers
//!   read the body): 408 when the body has not arrived in that time;
//! - a **connection cap** ([`ConnLimits::max_connections`]): a connection past it is
//!   closed as soon as it is accepted (counted in `toolgate_connections_refused_total`),
//!   so descriptors stay bounded and the server keeps serving the connections it holds;
//! - a **shutdown that waits only for requests**: on SIGINT/SIGTERM the server stops
//!   accepting (the listening socket is closed, so new connections are refused at once
//!   rather than queued), closes every connection that has no request in progress (idle, or still
//!   sending its head) at once, answers 503 to requests still sending their body, and
//!   returns when the requests being answered (generations included) have finished.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Semaphore;

use super::AppState;

/// How long a client may take and how many connections it may hold.
///
/// ```
/// use std::time::Duration;
/// use toolgate::server::ConnLimits;
/// let strict = ConnLimits { header_timeout: Duration::from_secs(5), ..ConnLimits::default() };
/// assert_eq!(strict.max_connections, ConnLimits::default().max_connections);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Time to receive a whole request head (request line and headers), counted from
    /// when the server starts waiting for it: on a new connection, and between requests
    /// on a kept-alive one. Default 10 s.
    pub header_timeout: Duration,
    /// Time to receive a whole request body once its head has arrived; past it, 408.
    /// Default 30 s (a 4 MiB body at 1.1 Mbit/s).
    pub body_timeout: Duration,
    /// Connections held at once; one more is closed when accepted. Default 512.
    pub max_connections: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self { header_timeout: Duration::from_secs(10), body_timeout: Duration::from_secs(30), max_connections: 512 }
    }
}

/// Serve `app` on `listener` until `stop` resolves, then shut down as the module
/// documentation says and return.
pub(crate) async fn run(
    listener: tokio::net::TcpListener,
    app: Router,
    state: Arc<AppState>,
    stop: impl std::future::Future<Output = ()>,
) {
    let limits = state.limits;
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut stop => break,
        };
        let io = match accepted {
            Ok((io, _peer)) => io,
            Err(e) => {
                // Out of descriptors (EMFILE) or a connection reset before accept: wait a
                // little instead of spinning on the error.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            state.metrics.connections_refused.inc();
            drop(io);
            continue;
        };
        let (app, state) = (app.clone(), state.clone());
        tokio::spawn(async move {
            state.metrics.connections_open.inc();
            connection(io, app, &state, limits).await;
            state.metrics.connections_open.dec();
            drop(slot);
        });
    }
    // Close the listening socket now, not when this function returns: while it is open
    // the kernel still completes connections into its backlog that nobody accepts, and
    // a router's requests on them wait until the process exits instead of being
    // refused at once (and sent to another replica).
    drop(listener);
    state.begin_shutdown();
    // Every connection task gives its slot back when it ends.
    let _all = slots.acquire_many(limits.max_connections as u32).await;
}

/// One connection, until the client closes it, a timeout closes it, or shutdown finds it
/// without a request in progress.
async fn connection(io: tokio::net::TcpStream, app: Router, state: &AppState, limits: ConnLimits) {
    let active = Arc::new(AtomicUsize::new(0));
    let in_progress = active.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let guard = Active::enter(&in_progress);
        let mut app = app.clone();
        async move {
            // A `Router` is always ready: `call` without `poll_ready` is allowed.
            let resp = tower_service::Service::call(&mut app, req.map(Body::new)).await?;
            Ok::<_, Infallible>(resp.map(|b| Body::new(Guarded { inner: b, _guard: guard })))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let mut shutdown = state.shutdown.subscribe();
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!("connection closed: {e}");
            }
            return;
        }
        _ = shutdown.wait_for(|stopping| *stopping) => {}
    }
    if active.load(Ordering::SeqCst) == 0 {
        return; // idle or still sending its head: nothing to finish
    }
    // Finish the request in progress, then close.
    conn.as_mut().graceful_shutdown();
    if let Err(e) = conn.await {
        tracing::debug!("connection closed during shutdown: {e}");
    }
}

/// Counts a request as in progress from its head until its response body is dropped.
struct Active(Arc<AtomicUsize>);

impl Active {
    fn enter(n: &Arc<AtomicUsize>) -> Self {
        n.fetch_add(1, Ordering::SeqCst);
        Self(n.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that holds its request's [`Active`] until it is sent or dropped.
struct Guarded {
    inner: Body,
    _guard: Active,
}

impl http_body::Body for Guarded {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
