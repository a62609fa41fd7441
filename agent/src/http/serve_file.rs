//! Serving a stored file over HTTP, shared by registry blobs and `/files`: one byte range (206/416), a
//! streamed body sent from the file by `sendfile` (plain HTTP/1), from a memory map of the file (no copy in
//! user space) or read with one copy per byte, byte counts into the metrics. Callers add identity headers
//! (ETag, digests, Last-Modified).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use super::range::{self, ByteRange};
use super::sendfile::ZeroCopy;
use crate::metrics::Metrics;
use crate::store::blobs::read_range;

/// What a request for a file asked, as an extractor: its headers (`Range`, `If-Range`, `If-None-Match`),
/// whether it is a HEAD, and whether its connection sends bodies by `sendfile`.
pub struct Asked {
    pub headers: HeaderMap,
    pub head: bool,
    pub zero_copy: Option<ZeroCopy>,
}

impl<S: Send + Sync> FromRequestParts<S> for Asked {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let zero_copy =
            <ZeroCopy as OptionalFromRequestParts<S>>::from_request_parts(parts, state).await?;
        Ok(Asked {
            headers: parts.headers.clone(),
            head: parts.method == Method::HEAD,
            zero_copy,
        })
    }
}

/// The response for `file` (of `size` bytes) to a GET, or a HEAD when `head`, honouring `Range` — unless an
/// `If-Range` names something other than one of `validators` (the ETag and Last-Modified the caller sends):
/// then the content changed since the client's first part, and it gets the whole of it. On a `zero_copy`
/// connection the body is lent to its writer, which sends it with `sendfile`.
pub fn respond(
    file: std::fs::File,
    size: u64,
    asked: &Asked,
    validators: &[&str],
    metrics: &Arc<Metrics>,
) -> Response {
    let (request, head) = (&asked.headers, asked.head);
    let current = request
        .get(header::IF_RANGE)
        .is_none_or(|v| v.to_str().is_ok_and(|v| validators.contains(&v.trim())));
    let range = request
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .filter(|_| current);
    let (status, start, len) = match range::parse(range, size) {
        ByteRange::Full => (StatusCode::OK, 0, size),
        ByteRange::Partial { start, end } => (StatusCode::PARTIAL_CONTENT, start, end - start + 1),
        ByteRange::Unsatisfiable => {
            let mut r = (StatusCode::RANGE_NOT_SATISFIABLE, Body::empty()).into_response();
            r.headers_mut()
                .insert(header::CONTENT_RANGE, ascii(format!("bytes */{size}")));
            r.headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(0));
            return r;
        }
    };
    let body = if head {
        Body::empty()
    } else {
        let metrics = metrics.clone();
        let lent = asked.zero_copy.as_ref().map(|z| z.lent().clone());
        let (path, chunks) = read_range(file, start, len, lent);
        Body::from_stream(chunks.inspect(move |chunk| {
            if let Ok(c) = chunk {
                metrics.served(path, c.len() as u64);
            }
        }))
    };
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if status == StatusCode::PARTIAL_CONTENT {
        h.insert(
            header::CONTENT_RANGE,
            ascii(format!("bytes {start}-{}/{size}", start + len - 1)),
        );
    }
    r
}

/// A header value from text we built ourselves (digits, digests, punctuation): always visible ASCII.
pub fn ascii(s: String) -> HeaderValue {
    HeaderValue::try_from(s).expect("generated header values are ASCII")
}
