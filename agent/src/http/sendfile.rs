//! Zero-copy sending on plain-HTTP/1 connections: blob and file bodies go from the blob file to the socket with
//! `sendfile(2)`, never through the agent's memory. Each such connection's writer ([`Sendfile`]) sends a body
//! chunk from its file when the chunk is one of those the connection's responses lent it ([`Lent`]), and writes
//! every other byte (headers, JSON, other bodies) as usual.
//!
//! A client on this host ([`same_host`]) is the exception under [`SendfileMode::Remote`], the default: its
//! writer copies lent chunks through a buffer of the thread's (`BOUNCE` bytes) instead. Pages sent from the
//! page cache reach a receiver on the same machine as socket buffers of many page-cache pages, cold in its
//! CPU's caches, that cost it more to receive than bytes written into the kernel's own buffers; a local
//! client's CPU is the agent's too (measured with skopeo, whose pulls are bound by its own CPU: 1.83 s of
//! kernel time per GiB sent by `sendfile` against 1.36 s written from the buffer, and 6 to 17 % slower
//! pulls in scripts/bench-registry.sh). A remote client's receiving is its own, and there `sendfile` leaves the appliance's CPU to the many
//! other nodes pulling at once.
//!
//! Never under TLS (rustls must see the bytes) nor for HTTP/2 requests (h2 copies data into its frames): those
//! are not offered [`ZeroCopy`] and get resident mappings (`store::mapped`).

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
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

/// Which plain-HTTP/1 connections send blob and file bodies from the file (`--sendfile`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SendfileMode {
    /// Every connection.
    #[value(alias = "true")]
    Always,
    /// Connections from other hosts; a client on this host gets the bodies copied through a buffer.
    Remote,
    /// None: bodies are read from memory maps, as under TLS.
    #[value(alias = "false")]
    Never,
}

/// Whether a connection from `peer` to `local` comes from this host: from a loopback address, or from the
/// address it reached (the source the kernel picks for a local destination). A client on this host that
/// binds another of its addresses counts as remote, which costs it speed, never correctness.
pub fn same_host(local: SocketAddr, peer: SocketAddr) -> bool {
    let peer = peer.ip().to_canonical();
    peer.is_loopback() || peer == local.ip().to_canonical()
}

/// The plain-HTTP acceptor: [`ConnectionLimit`]'s connections, each with a writer that sends lent chunks by
/// `sendfile` (or through a buffer, for a client on this host under [`SendfileMode::Remote`]) and, unless
/// [`SendfileMode::Never`], requests that may lend them (otherwise nothing is ever lent, and the writer only
/// passes bytes on).
#[derive(Clone)]
pub struct ZeroCopyAcceptor {
    inner: ConnectionLimit,
    metrics: Arc<Metrics>,
    mode: SendfileMode,
}

impl ZeroCopyAcceptor {
    pub fn new(inner: ConnectionLimit, metrics: Arc<Metrics>, mode: SendfileMode) -> Self {
        ZeroCopyAcceptor {
            inner,
            metrics,
            mode,
        }
    }
}

impl<S> Accept<TcpStream, S> for ZeroCopyAcceptor {
    type Stream = Sendfile;
    type Service = axum::middleware::AddExtension<S, Option<ZeroCopy>>;
    type Future = std::future::Ready<io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        // A connection whose addresses cannot be read is served as a remote one.
        let local = match (stream.local_addr(), stream.peer_addr()) {
            (Ok(ours), Ok(theirs)) => same_host(ours, theirs),
            _ => false,
        };
        let copy = local && self.mode == SendfileMode::Remote;
        let accepted = self.inner.accept(stream, service).into_inner();
        std::future::ready(accepted.map(|(stream, service)| {
            let lent = Lent::default();
            let offered = (self.mode != SendfileMode::Never).then(|| ZeroCopy(lent.clone()));
            let service = tower::Layer::layer(&axum::Extension(offered), service);
            let stream = Sendfile {
                inner: stream,
                lent,
                metrics: self.metrics.clone(),
                copy,
            };
            (stream, service)
        }))
    }
}

/// Bytes a writer copies through its thread's buffer at a time: enough that each `write` builds the kernel's
/// largest segments and wakes the receiver rarely, little enough to stay in the core's L2 cache between the
/// `pread` that fills it and the `write` that empties it (scripts/bench-registry.sh, one GET from a local
/// client: 256 KiB 2430 MiB/s, 1 MiB 3740, 2 MiB 3230, 4 MiB 2810).
const BOUNCE: usize = 1 << 20;

thread_local! {
    /// The buffer lent chunks are copied through on this runtime thread: one per thread, whatever the number
    /// of connections, so the agent's memory does not grow with its clients.
    static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A plain-HTTP connection whose writer sends the chunks lent to it from their files: by `sendfile`, or, when
/// `copy`, by `pread` into the thread's buffer and `write`.
pub struct Sendfile {
    inner: Counted<TcpStream>,
    lent: Lent,
    metrics: Arc<Metrics>,
    copy: bool,
}

impl Sendfile {
    /// Sends up to `len` bytes of a lent chunk, `offset` into `file`, the way this connection sends them,
    /// waiting for the socket to take some.
    ///
    /// A client gone mid-body makes `sendfile` or `write` fail with EPIPE (the process ignores SIGPIPE, as Rust
    /// programs do) or ECONNRESET, which ends the connection like any failed write.
    fn poll_lent(
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
                if self.copy {
                    copy_through_buffer(socket, file, offset, len)
                } else {
                    send_from_file(socket, file, offset, len)
                }
            });
            match sent {
                Ok(n) => {
                    if self.copy {
                        self.metrics.sent_buffered(n as u64);
                    } else {
                        self.metrics.sent_from_file(n as u64);
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// Sends up to `len` bytes of `file` from `offset` by `sendfile`.
fn send_from_file(
    socket: &TcpStream,
    file: &std::fs::File,
    offset: u64,
    len: usize,
) -> io::Result<usize> {
    let mut at = offset;
    // Corked for the call: the socket has TCP_NODELAY (for small responses), under which the file's pages
    // otherwise leave in part-filled segments (measured 20 % slower here); uncorking sends the last part at once.
    rustix::net::sockopt::set_tcp_cork(socket, true)?;
    let sent = rustix::fs::sendfile(socket, file, Some(&mut at), len);
    rustix::net::sockopt::set_tcp_cork(socket, false)?;
    Ok(sent?)
}

/// Copies up to `len` bytes of `file` from `offset` to the socket through the thread's buffer. Bytes read but
/// not taken are read again on the next call: the buffer belongs to the thread, not the connection (one GET
/// reads 1.06 bytes per byte sent; 64 at once, whose sockets are mostly full, 1.4).
fn copy_through_buffer(
    socket: &TcpStream,
    file: &std::fs::File,
    offset: u64,
    len: usize,
) -> io::Result<usize> {
    let want = len.min(BOUNCE);
    BUFFER.with_borrow_mut(|buf| {
        if buf.len() < want {
            buf.resize(BOUNCE, 0);
        }
        let got = rustix::io::pread(file, &mut buf[..want], offset)?;
        if got == 0 {
            // The store checked the file's length before lending its chunks.
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a blob file ended inside a chunk it had lent",
            ));
        }
        Ok(rustix::io::write(socket, &buf[..got])?)
    })
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
            Some((file, offset)) => self.poll_lent(cx, &file, offset, buf.len()),
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
                self.poll_lent(cx, &file, offset, bufs[i].len())
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

#[cfg(test)]
mod tests {
    use super::same_host;

    fn addr(s: &str) -> std::net::SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_peer_is_on_this_host_from_loopback_or_from_the_address_it_reached() {
        for (local, peer, expected) in [
            ("127.0.0.1:5000", "127.0.0.1:40000", true),
            // Any loopback source, whatever address it reached.
            ("10.1.2.3:5000", "127.0.0.2:40000", true),
            ("10.1.2.3:5000", "10.1.2.3:40000", true),
            ("10.1.2.3:5000", "10.1.2.4:40000", false),
            ("[::1]:5000", "[::1]:40000", true),
            ("[fd00::1]:5000", "[fd00::2]:40000", false),
            // A dual-stack socket sees IPv4 peers as mapped addresses.
            ("[::ffff:10.1.2.3]:5000", "[::ffff:10.1.2.3]:40000", true),
            ("[::ffff:10.1.2.3]:5000", "[::ffff:127.0.0.1]:40000", true),
            ("[::ffff:10.1.2.3]:5000", "[::ffff:10.9.9.9]:40000", false),
            ("10.1.2.3:5000", "[::ffff:10.1.2.3]:40000", true),
        ] {
            assert_eq!(
                same_host(addr(local), addr(peer)),
                expected,
                "{local} <- {peer}"
            );
        }
    }
}
