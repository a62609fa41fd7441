//! Fuzzing entry points for what HTTP clients send (see `crate::fuzz`): each takes arbitrary bytes and must
//! neither panic nor break the invariant it checks.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue};

use super::range::{self, ByteRange};

/// `Range: …` against a representation whose size comes from the first 8 bytes: a partial range lies inside.
pub fn range(data: &[u8]) {
    let (size, header) = match data.split_first_chunk::<8>() {
        Some((s, rest)) => (u64::from_le_bytes(*s) % (1 << 40), rest),
        None => return,
    };
    let header = String::from_utf8_lossy(header);
    if let ByteRange::Partial { start, end } = range::parse(Some(&header), size) {
        assert!(
            start <= end && end < size,
            "{header:?} of {size}: {start}-{end}"
        );
    }
}

/// tus's request headers: Upload-Metadata, Upload-Checksum and the offsets, as a client may send them.
pub fn tus_headers(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = super::tus::parse_metadata(&text);
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(data) {
        headers.insert("upload-checksum", v.clone());
        headers.insert("upload-offset", v);
    }
    if let Ok(Some(sum)) = super::tus::chunk_checksum(&headers) {
        assert_eq!(sum.len(), 32);
    }
    let _ = super::tus::header_u64(&headers, "upload-offset");
}

/// The REST API's record metadata: a JSON body, or ICN's multipart form with a `metadata` part (the first
/// byte picks which; the multipart boundary is `B`).
pub fn rest_bodies(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    let body = Body::from(body.to_vec());
    if pick % 2 == 0 {
        let _ = runtime.block_on(super::rest::json_body::<crate::images::NewImage>(
            body, "fuzz",
        ));
    } else {
        let mut headers = HeaderMap::new();
        headers.insert(
            "content-type",
            HeaderValue::from_static("multipart/form-data; boundary=B"),
        );
        let _ = runtime.block_on(super::rest::metadata_part::<crate::images::NewImage>(
            &headers, body,
        ));
    }
}
