//! Limits on what one client can hold: how long it may take to send a request's headers (hyper's header
//! timeout, which also closes an idle keep-alive connection), how long a body may go without a byte, and how
//! many connections are open at once. Each one reached counts in `foothold_limit_reached_total`.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::state::AppState;
use crate::metrics::Metrics;

/// Set on a response that refused a request for crossing a limit on clients; the request log counts it in
/// `foothold_limit_reached_total` under this name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitReached(pub &'static str);

impl LimitReached {
    /// A manifest over `manifest::MAX_MANIFEST_SIZE`.
    pub const MANIFEST_SIZE: &'static str = "manifest_size";
    /// JSON nested deeper than `json_depth::MAX_JSON_DEPTH`.
    pub const JSON_DEPTH: &'static str = "json_depth";
    /// A REST metadata body over its 1 MiB.
    pub const METADATA_SIZE: &'static str = "metadata_size";
}

/// The limits `serve` applies (`foothold-agent serve --header-timeout … --body-idle-timeout …
/// --max-connections …`).
#[derive(Clone, Copy, Debug)]
pub struct ClientLimits {
    pub header_timeout: Duration,
    pub body_idle_timeout: Duration,
    pub max_connections: usize,
    /// Upload chunks written at once (see `Store::limit_uploads`).
    pub max_uploads: usize,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            header_timeout: Duration::from_secs(30),
            body_idle_timeout: super::state::DEFAULT_BODY_IDLE_TIMEOUT,
            max_connections: 4096,
            max_uploads: crate::store::DEFAULT_MAX_UPLOADS,
        }
    }
}

impl ClientLimits {
    /// Sets the header timeout on hyper's HTTP/1 side (it needs a timer to enforce any).
    pub fn configure(
        &self,
        builder: &mut hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    ) {
        builder
            .http1()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(self.header_timeout);
    }
}

/// Raises the soft limit on open files to the hard one, so that `max_connections` connections (plus blob
/// files and the database) fit; returns the limit now in force.
pub fn raise_open_files() -> u64 {
    rlimit::increase_nofile_limit(u64::MAX).unwrap_or(1024)
}

/// Ends a request body that goes `timeout` without a byte: the handler sees a body error (an upload keeps
/// what arrived and lets go of its record), and the connection is closed.
pub async fn body_idle_timeout(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let timeout = state.limits.body_idle_timeout;
    let metrics = state.metrics.clone();
    let (parts, body) = req.into_parts();
    let stream = futures_util::stream::unfold(Some(body.into_data_stream()), move |stream| {
        let metrics = metrics.clone();
        async move {
            let mut stream = stream?;
            match tokio::time::timeout(timeout, stream.next()).await {
                Ok(Some(Ok(bytes))) => Some((Ok(bytes), Some(stream))),
                Ok(Some(Err(e))) => Some((Err(io::Error::other(e)), None)),
                Ok(None) => None,
                Err(_) => {
                    metrics.limit_reached("body_idle_timeout");
                    Some((
                        Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("no body bytes for {} s", timeout.as_secs()),
                        )),
                        None,
                    ))
                }
            }
        }
    });
    next.run(Request::from_parts(parts, Body::from_stream(stream)))
        .await
}

/// An acceptor that admits at most `max_connections` connections at once; one more is closed as soon as it
/// is accepted (the listener keeps accepting, so the file limit is never what refuses). TLS wraps it.
#[derive(Clone)]
pub struct ConnectionLimit {
    permits: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

impl ConnectionLimit {
    pub fn new(max: usize, metrics: Arc<Metrics>) -> Self {
        ConnectionLimit {
            permits: Arc::new(Semaphore::new(max)),
            metrics,
        }
    }
}

impl<S> axum_server::accept::Accept<TcpStream, S> for ConnectionLimit {
    type Stream = Counted<TcpStream>;
    type Service = S;
    type Future = std::future::Ready<io::Result<(Counted<TcpStream>, S)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        // Without TCP_NODELAY a response written in two parts (headers, then a streamed body) waits for the
        // client's delayed ACK: 40 ms for every small blob.
        let _ = stream.set_nodelay(true);
        std::future::ready(match self.permits.clone().try_acquire_owned() {
            Ok(permit) => Ok((
                Counted {
                    inner: stream,
                    _permit: permit,
                },
                service,
            )),
            Err(_) => {
                self.metrics.limit_reached("connections");
                Err(io::Error::other("connection limit reached"))
            }
        })
    }
}

/// A connection holding its place under the limit until it is dropped.
pub struct Counted<T> {
    inner: T,
    _permit: OwnedSemaphorePermit,
}

impl<T> Counted<T> {
    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
