//! tus 1.0 resumable uploads at `/v1/uploads` (core, creation, termination, checksum with sha256), so stock
//! resumable-upload clients work unmodified. Bytes go to a store upload session; when the last one arrives
//! the content is hashed into a blob, which stays until the upload is deleted or bound to an image record
//! (`"tus_upload": "<id>"` when creating the record, see `images`). An upload is its maker's: to any other
//! writer but an admin it does not exist (404). A checksummed chunk that does not match is cut off again (460),
//! so what the server acknowledges is always what the client meant.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use base64::Engine as _;

use super::access::WriteAccess;
use super::error::{ApiError, ErrorBody};
use super::schema::TusVersionDoc;
use super::state::{AppState, Limits};
use crate::store::Store;
use crate::uploads::Uploads;

pub const VERSION: &str = "1.0.0";
pub const EXTENSIONS: &str = "creation,termination,checksum,expiration";
/// Upload-Metadata is a few file names and types; more is refused rather than stored.
const MAX_METADATA: usize = 4096;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/uploads", post(create).options(options))
        .route(
            "/v1/uploads/{id}",
            axum::routing::head(info)
                .patch(append)
                .delete(terminate)
                .options(options),
        )
        // Only on its own routes: as a `layer` it also wrapped the fallback, and every unknown path got 412.
        .route_layer(middleware::from_fn(protocol))
}

/// Every answer carries Tus-Resumable; every request but OPTIONS must speak 1.0.0 (412 otherwise).
async fn protocol(req: Request, next: Next) -> Response {
    let speaks = req
        .headers()
        .get("tus-resumable")
        .is_some_and(|v| v.as_bytes() == VERSION.as_bytes());
    let mut r = if speaks || req.method() == axum::http::Method::OPTIONS {
        next.run(req).await
    } else {
        let mut r = error(
            StatusCode::PRECONDITION_FAILED,
            "TUS_VERSION",
            "this server speaks tus 1.0.0: send Tus-Resumable: 1.0.0",
        )
        .into_response();
        r.headers_mut()
            .insert("tus-version", HeaderValue::from_static(VERSION));
        r
    };
    r.headers_mut()
        .insert("tus-resumable", HeaderValue::from_static(VERSION));
    r
}

fn error(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(status, code, message)
}

type TusResult = Result<Response, ApiError>;

pub(super) fn header_u64(headers: &HeaderMap, name: &str) -> Result<Option<u64>, ApiError> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Some)
            .ok_or_else(|| ApiError::invalid(format!("{name} must be a non-negative integer"))),
    }
}

/// Upload-Metadata: comma-separated `key` or `key base64(value)` pairs, keys unique.
pub(super) fn parse_metadata(raw: &str) -> Result<(), String> {
    if raw.len() > MAX_METADATA {
        return Err(format!(
            "Upload-Metadata is longer than {MAX_METADATA} bytes"
        ));
    }
    let mut keys = std::collections::HashSet::new();
    for pair in raw.split(',') {
        let mut parts = pair.trim().split(' ');
        let key = parts.next().unwrap_or_default();
        if key.is_empty() || !key.is_ascii() {
            return Err(format!("Upload-Metadata pair {pair:?} has no ASCII key"));
        }
        if let Some(value) = parts.next() {
            base64::engine::general_purpose::STANDARD
                .decode(value)
                .map_err(|_| format!("Upload-Metadata value of {key:?} is not base64"))?;
        }
        if parts.next().is_some() {
            return Err(format!(
                "Upload-Metadata pair {pair:?} has more than key and value"
            ));
        }
        if !keys.insert(key) {
            return Err(format!("Upload-Metadata repeats the key {key:?}"));
        }
    }
    Ok(())
}

#[utoipa::path(options, path = "/v1/uploads", tag = "tus",
    responses((status = 204, description = "The server's tus capabilities",
        headers(("tus-version" = String), ("tus-extension" = String), ("tus-max-size" = u64), ("tus-checksum-algorithm" = String)))),
    security(()))]
pub(super) async fn options(State(limits): State<Limits>) -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    h.insert("tus-version", HeaderValue::from_static(VERSION));
    h.insert("tus-extension", HeaderValue::from_static(EXTENSIONS));
    h.insert("tus-max-size", HeaderValue::from(limits.max_image_length));
    h.insert("tus-checksum-algorithm", HeaderValue::from_static("sha256"));
    r
}

#[utoipa::path(post, path = "/v1/uploads", tag = "tus",
    params(
        ("tus-resumable" = TusVersionDoc, Header, description = "The protocol version: 1.0.0"),
        ("upload-length" = u64, Header, description = "The upload's size in bytes"),
        ("upload-metadata" = Option<String>, Header, description = "Comma-separated `key base64(value)` pairs"),
    ),
    responses(
        (status = 201, description = "Created", headers(("location" = String, description = "/v1/uploads/<id>"))),
        (status = 400, description = "No or invalid Upload-Length, deferred length, or invalid Upload-Metadata", body = ErrorBody),
        (status = 401, description = "A credential is required", body = ErrorBody),
        (status = 403, description = "The credential is read-only", body = ErrorBody),
        (status = 412, description = "Tus-Resumable is not 1.0.0", body = ErrorBody),
        (status = 413, description = "Upload-Length is over Tus-Max-Size", body = ErrorBody),
        (status = 507, description = "Storage is full", body = ErrorBody),
    ),
    security(("token" = [])))]
pub(super) async fn create(
    writer: WriteAccess,
    State(store): State<Arc<Store>>,
    State(limits): State<Limits>,
    headers: HeaderMap,
) -> TusResult {
    if headers.contains_key("upload-defer-length") {
        return Err(ApiError::invalid(
            "deferred lengths (creation-defer-length) are not supported: send Upload-Length",
        ));
    }
    let length = header_u64(&headers, "upload-length")?
        .ok_or_else(|| ApiError::invalid("creating an upload needs an Upload-Length header"))?;
    let metadata = match headers.get("upload-metadata") {
        None => None,
        Some(v) => {
            let raw = v
                .to_str()
                .map_err(|_| ApiError::invalid("Upload-Metadata is not ASCII"))?;
            parse_metadata(raw).map_err(ApiError::invalid)?;
            Some(raw.to_owned())
        }
    };
    let id = Uploads::new(&store, limits.max_image_length)
        .seen_by(writer.uploader())
        .create(length, metadata)
        .await?;
    let mut r = StatusCode::CREATED.into_response();
    r.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_str(&format!("/v1/uploads/{id}")).expect("uuid is ASCII"),
    );
    Ok(with_expiry(r, &store, &id, limits).await)
}

/// tus's expiration extension: an unfinished upload says when it is freed if no byte arrives before then.
async fn with_expiry(mut r: Response, store: &Store, id: &str, limits: Limits) -> Response {
    // A finished upload has no session file: it does not expire.
    if let Ok((_, modified)) = store.upload_file_state(id).await {
        let at = crate::expiry::expires_at(modified, limits.upload_ttl);
        r.headers_mut().insert(
            "upload-expires",
            HeaderValue::from_str(&httpdate::fmt_http_date(at)).expect("an HTTP date is ASCII"),
        );
    }
    r
}

#[utoipa::path(head, path = "/v1/uploads/{id}", tag = "tus",
    params(
        ("id" = String, Path, description = "The upload's id (last segment of its Location)", pattern = "^[0-9a-f-]{36}$"),
        ("tus-resumable" = TusVersionDoc, Header, description = "The protocol version: 1.0.0"),
    ),
    responses(
        (status = 200, description = "The upload's offset",
            headers(("upload-offset" = u64), ("upload-length" = u64), ("upload-metadata" = String), ("cache-control" = String))),
        (status = 401, description = "A credential is required"),
        (status = 403, description = "The credential is read-only"),
        (status = 404, description = "No such upload (or another writer's)"),
        (status = 412, description = "Tus-Resumable is not 1.0.0"),
    ),
    security(("token" = [])))]
pub(super) async fn info(
    writer: WriteAccess,
    State(store): State<Arc<Store>>,
    State(limits): State<Limits>,
    Path(id): Path<String>,
) -> TusResult {
    let u = Uploads::new(&store, limits.max_image_length)
        .seen_by(writer.uploader())
        .get(&id)
        .await?;
    let mut r = StatusCode::OK.into_response();
    let h = r.headers_mut();
    h.insert("upload-offset", HeaderValue::from(u.offset));
    h.insert("upload-length", HeaderValue::from(u.length));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(m) = u.metadata.and_then(|m| HeaderValue::from_str(&m).ok()) {
        h.insert("upload-metadata", m);
    }
    Ok(with_expiry(r, &store, &id, limits).await)
}

/// `Upload-Checksum: sha256 <base64>`: the digest the chunk must have.
pub(super) fn chunk_checksum(headers: &HeaderMap) -> Result<Option<[u8; 32]>, ApiError> {
    let Some(v) = headers.get("upload-checksum") else {
        return Ok(None);
    };
    let v = v
        .to_str()
        .map_err(|_| ApiError::invalid("Upload-Checksum is not ASCII"))?;
    let (alg, value) = v.trim().split_once(' ').ok_or_else(|| {
        ApiError::invalid("Upload-Checksum must be `<algorithm> <base64 digest>`")
    })?;
    if alg != "sha256" {
        return Err(ApiError::invalid(
            "Upload-Checksum algorithm must be sha256",
        ));
    }
    let digest = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .ok()
        .and_then(|d| <[u8; 32]>::try_from(d).ok())
        .ok_or_else(|| ApiError::invalid("Upload-Checksum value is not a base64 sha256 digest"))?;
    Ok(Some(digest))
}

#[utoipa::path(patch, path = "/v1/uploads/{id}", tag = "tus",
    params(
        ("id" = String, Path, description = "The upload's id (last segment of its Location)", pattern = "^[0-9a-f-]{36}$"),
        ("tus-resumable" = TusVersionDoc, Header, description = "The protocol version: 1.0.0"),
        ("upload-offset" = u64, Header, description = "Where the body starts: the upload's offset"),
        ("upload-checksum" = Option<String>, Header, description = "`sha256 <base64 digest>` of this body"),
    ),
    request_body(content = Vec<u8>, content_type = "application/offset+octet-stream"),
    responses(
        (status = 204, description = "Appended", headers(("upload-offset" = u64, description = "The new offset"))),
        (status = 400, description = "Missing or invalid Upload-Offset or Upload-Checksum, or the body was cut off", body = ErrorBody),
        (status = 401, description = "A credential is required", body = ErrorBody),
        (status = 403, description = "The credential is read-only", body = ErrorBody),
        (status = 404, description = "No such upload (or another writer's)", body = ErrorBody),
        (status = 409, description = "Upload-Offset differs from the upload's offset", body = ErrorBody),
        (status = 412, description = "Tus-Resumable is not 1.0.0", body = ErrorBody),
        (status = 413, description = "The body runs past Upload-Length", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/offset+octet-stream", body = ErrorBody),
        (status = 460, description = "The body does not match Upload-Checksum; it was discarded", body = ErrorBody),
        (status = 507, description = "Storage is full", body = ErrorBody),
    ),
    security(("token" = [])))]
pub(super) async fn append(
    writer: WriteAccess,
    State(store): State<Arc<Store>>,
    State(limits): State<Limits>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> TusResult {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if content_type != Some("application/offset+octet-stream") {
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UNSUPPORTED_MEDIA_TYPE",
            "PATCH bodies must be Content-Type: application/offset+octet-stream",
        ));
    }
    let start = header_u64(&headers, "upload-offset")?
        .ok_or_else(|| ApiError::invalid("PATCH needs an Upload-Offset header"))?;
    let checksum = chunk_checksum(&headers)?;
    // Only to a writer that may see it (the append itself runs in a task of its own, as the agent).
    Uploads::new(&store, limits.max_image_length)
        .seen_by(writer.uploader())
        .get(&id)
        .await?;
    // Its own task, so that a client hanging up mid-chunk cannot stop the last byte finishing the upload.
    let (s, i) = (store.clone(), id.clone());
    let offset = tokio::spawn(async move {
        Uploads::new(&s, limits.max_image_length)
            .append(&i, start, body.into_data_stream(), checksum)
            .await
    })
    .await
    .expect("append task panicked")?;
    Ok(with_expiry(no_content(offset), &store, &id, limits).await)
}

fn no_content(offset: u64) -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    r.headers_mut()
        .insert("upload-offset", HeaderValue::from(offset));
    r
}

#[utoipa::path(delete, path = "/v1/uploads/{id}", tag = "tus",
    params(
        ("id" = String, Path, description = "The upload's id (last segment of its Location)", pattern = "^[0-9a-f-]{36}$"),
        ("tus-resumable" = TusVersionDoc, Header, description = "The protocol version: 1.0.0"),
    ),
    responses(
        (status = 204, description = "Terminated: the upload and its content are gone"),
        (status = 401, description = "A credential is required", body = ErrorBody),
        (status = 403, description = "The credential is read-only", body = ErrorBody),
        (status = 404, description = "No such upload (or another writer's)", body = ErrorBody),
        (status = 412, description = "Tus-Resumable is not 1.0.0", body = ErrorBody),
    ),
    security(("token" = [])))]
pub(super) async fn terminate(
    writer: WriteAccess,
    State(store): State<Arc<Store>>,
    State(limits): State<Limits>,
    Path(id): Path<String>,
) -> TusResult {
    Uploads::new(&store, limits.max_image_length)
        .seen_by(writer.uploader())
        .terminate(&id)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::parse_metadata;

    #[test]
    fn metadata() {
        assert!(
            parse_metadata("filename d29ybGRfZG9taW5hdGlvbl9wbGFuLnBkZg==,is_confidential").is_ok()
        );
        assert!(parse_metadata("a YQ==, b Yg==").is_ok());
        assert!(parse_metadata("").is_err());
        assert!(parse_metadata("a not*base64").is_err());
        assert!(parse_metadata("a YQ==,a Yg==").is_err());
        assert!(parse_metadata("a YQ== extra").is_err());
        assert!(parse_metadata(&"k".repeat(5000)).is_err());
    }
}
