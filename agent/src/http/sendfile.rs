//! Zero-copy sending on plain-HTTP/1 connections: blob and file bodies go from the blob file to the socket with
//! `sendfile(2)`, never through the agent's memory. Each such connection's writer ([`Sendfile`]) sends a body
//! chunk from its file when the chunk is one of those the connection's responses lent it ([`Lent`]), and writes
//! every other byte (headers, JSON, other bodies) as usual.
//!
//! Never under TLS (rustls must see the bytes) nor for HTTP/2 requests (h2 copies data into its frames): those
//! are not offered [`ZeroCopy`] and get resident mappings (`store::mapped`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use axum::extract::OptionalFromRequestParts;
use axum::http::request::Parts;
use axum::http::Version;
use axum_server::accept::Accept;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use super::limits::{ConnectionLimit, Counted};
use crate::metrics::Metrics;
use crate::store::Lent;

/// What a request on a zero-copy connection may lend its response's chunks to: present for HTTP/1 requests on
/// plain-HTTP connections only.
#[derive(Clone)]
pub struct ZeroCopy(Lent);

impl ZeroCopy {
    pub fn lent(&self) -> &Lent {
        &self.0
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for ZeroCopy {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        let http1 = matches!(parts.version, Version::HTTP_10 | Version::HTTP_11);
        // The acceptor puts an `Option`: `None` on connections of an agent serving with `--sendfile false`.
        Ok(parts
            .extensions
            .get::<Option<ZeroCopy>>()
            .filter(|_| http1)
            .cloned()
            .flatten())
    }
}

/// The plain-HTTP acceptor: [`ConnectionLimit`]'s connections, each with a writer that sends lent chunks by
/// `sendfile` and, when `enabled`, requests that may lend them (otherwise nothing is ever lent, and the writer
/// only passes bytes on).
#[derive(Clone)]
pub struct ZeroCopyAcceptor {
    inner: ConnectionLimit,
    metrics: Arc<Metrics>,
    enabled: bool,
}

impl ZeroCopyAcceptor {
    pub fn new(inner: ConnectionLimit, metrics: Arc<Metrics>, enabled: bool) -> Self {
        ZeroCopyAcceptor {
            inner,
            metrics,
            enabled,
        }
    }
}

impl<S> Accept<TcpStream, S> for ZeroCopyAcceptor {
    type Stream = Sendfile;
    type Service = axum::middleware::AddExtension<S, Option<ZeroCopy>>;
    type Future = std::future::Ready<io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let accepted = self.inner.accept(stream, service).into_inner();
        std::future::ready(accepted.map(|(stream, service)| {
            let lent = Lent::default();
            let offered = self.enabled.then(|| ZeroCopy(lent.clone()));
            let service = tower::Layer::layer(&axum::Extension(offered), service);
            let stream = Sendfile {
                inner: stream,
                lent,
                metrics: self.metrics.clone(),
            };
            (stream, service)
        }))
    }
}

/// A plain-HTTP connection whose writer sends the chunks lent to it from their files.
pub struct Sendfile {
    inner: Counted<TcpStream>,
    lent: Lent,
    metrics: Arc<Metrics>,
}

impl Sendfile {
    /// Sends up to `len` bytes of `file` from `offset`, waiting for the socket to take some.
    ///
    /// A client gone mid-body makes `sendfile` fail with EPIPE (the process ignores SIGPIPE, as Rust programs
    /// do) or ECONNRESET, which ends the connection like any failed write.
    fn poll_sendfile(
        &self,
        cx: &mut Context<'_>,
        file: &std::fs::File,
        offset: u64,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        let socket = self.inner.get_ref();
        loop {
            ready!(socket.poll_write_ready(cx))?;
            let sent = socket.try_io(Interest::WRITABLE, || {
                let mut at = offset;
                // Corked for the call: the socket has TCP_NODELAY (for small responses), under which the
                // file's pages otherwise leave in part-filled segments (measured 20 % slower here); uncorking
                // sends the last part at once.
                rustix::net::sockopt::set_tcp_cork(socket, true)?;
                let sent = rustix::fs::sendfile(socket, file, Some(&mut at), len);
                rustix::net::sockopt::set_tcp_cork(socket, false)?;
                sent.map_err(io::Error::from)
            });
            match sent {
                Ok(n) => {
                    self.metrics.sent_from_file(n as u64);
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncRead for Sendfile {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Sendfile {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.lent.find(buf) {
            Some((file, offset)) => self.poll_sendfile(cx, &file, offset, buf.len()),
            None => Pin::new(&mut self.inner).poll_write(cx, buf),
        }
    }

    /// hyper hands over its queue of buffers (headers, then body chunks): the plain ones before the first lent
    /// chunk go out in one `writev`, a lent chunk at the front by `sendfile`; hyper calls again for the rest.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut first_lent = None;
        for (i, b) in bufs.iter().enumerate() {
            if b.is_empty() {
                continue;
            }
            if let Some(found) = self.lent.find(b) {
                first_lent = Some((i, found));
                break;
            }
        }
        match first_lent {
            Some((i, (file, offset))) if bufs[..i].iter().all(|b| b.is_empty()) => {
                self.poll_sendfile(cx, &file, offset, bufs[i].len())
            }
            Some((i, _)) => Pin::new(&mut self.inner).poll_write_vectored(cx, &bufs[..i]),
            None => Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
        }
    }

    /// hyper queues body chunks as they are only when the connection writes vectored; otherwise it copies them
    /// into one buffer, and no lent chunk would ever reach this writer as itself.
    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
