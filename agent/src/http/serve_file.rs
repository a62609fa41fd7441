//! Serving a stored file over HTTP, shared by registry blobs and `/files`: one byte range (206/416), a
//! streamed body from a memory map of the file (no copy in user space) or read with one copy per byte, byte counts into the metrics. Callers add identity headers
//! (ETag, digests, Last-Modified).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use super::range::{self, ByteRange};
use crate::metrics::Metrics;
use crate::store::blobs::read_range;

/// The response for `file` (of `size` bytes) to a GET, or a HEAD when `head`, honouring `Range` — unless an
/// `If-Range` names something other than one of `validators` (the ETag and Last-Modified the caller sends):
/// then the content changed since the client's first part, and it gets the whole of it.
pub fn respond(
    file: std::fs::File,
    size: u64,
    request: &HeaderMap,
    validators: &[&str],
    head: bool,
    metrics: &Arc<Metrics>,
) -> Response {
    let current = request
        .get(header::IF_RANGE)
        .is_none_or(|v| v.to_str().is_ok_and(|v| validators.contains(&v.trim())));
    let asked = request
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .filter(|_| current);
    let (status, start, len) = match range::parse(asked, size) {
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
        let (path, chunks) = read_range(file, start, len);
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
