//! The file server nodes and Ironic download from (`/files/<owner>/<cluster>/<kind>/<name>`): the content of
//! a completely uploaded BPA binary or OS image with Range and ETag, or its `sha256sum` line.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::access::ReadAccess;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::rest::key;
use super::schema::FilePath;
use super::serve_file::{ascii, Asked};
use super::state::{AppState, Limits};
use crate::images::{ImageError, Images, Kind};
use crate::metrics::Metrics;
use crate::store::Store;

pub fn routes() -> Router<AppState> {
    Router::new().route(
        "/files/{owner}/{cluster}/{kind}/{name}",
        get(download).head(download),
    )
}

/// Files for nodes and Ironic: the content with Range and ETag, or `<name>.sha256sum` in `sha256sum` format
/// (what a BareMetalHost's `image.checksum` URL points at).
#[utoipa::path(get, path = "/files/{owner}/{cluster}/{kind}/{name}", tag = "files",
    params(
        FilePath,
        ("range" = Option<String>, Header, description = "bytes=first-last"),
        ("if-none-match" = Option<String>, Header, description = "An ETag from an earlier answer"),
    ),
    responses(
        (status = 200, description = "The content (or `<sha256>  <name>`)", content_type = "application/octet-stream",
            headers(("etag" = String), ("last-modified" = String), ("accept-ranges" = String))),
        (status = 206, description = "The requested range", content_type = "application/octet-stream",
            headers(("content-range" = String))),
        (status = 304, description = "Not modified"),
        (status = 400, description = "Invalid name or image type", body = ErrorBody),
        (status = 401, description = "Reads need a credential on this site", body = ErrorBody),
        (status = 404, description = "No such record, or not completely uploaded", body = ErrorBody),
        (status = 416, description = "The range is outside the content"),
    ),
    security((), ("token" = [])))]
pub(super) async fn download(
    _: ReadAccess,
    State(store): State<Arc<Store>>,
    State(limits): State<Limits>,
    State(metrics): State<Arc<Metrics>>,
    Path((owner, cluster, kind, name)): Path<(String, String, String, String)>,
    asked: Asked,
) -> ApiResult {
    if kind == Kind::Container.as_str() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            "container images are served by the registry, not /files",
        ));
    }
    let images = Images::new(&store, limits.max_image_length);
    let head = asked.head;
    if let Some(base) = name.strip_suffix(crate::images::CHECKSUM_SUFFIX) {
        let record = images.get(&key(&owner, &cluster, &kind, base)?).await?;
        if !record.upload_complete {
            return Err(ImageError::Incomplete(base.to_owned()).into());
        }
        let line = format!("{}  {}\n", record.sha256.unwrap_or_default(), base);
        let mut r = if head {
            Body::empty().into_response()
        } else {
            line.clone().into_response()
        };
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(line.len()));
        return Ok(r);
    }
    let (file, size, digest, updated) = images
        .content(&key(&owner, &cluster, &kind, &name)?)
        .await?;
    let etag = format!("\"{digest}\"");
    if asked
        .headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
    {
        return Ok(StatusCode::NOT_MODIFIED.into_response());
    }
    let modified = httpdate::fmt_http_date(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(updated.max(0) as u64),
    );
    let mut r = super::serve_file::respond(file, size, &asked, &[&etag, &modified], &metrics);
    if r.status() != StatusCode::RANGE_NOT_SATISFIABLE {
        let h = r.headers_mut();
        h.insert(header::ETAG, ascii(etag));
        h.insert(header::LAST_MODIFIED, ascii(modified));
    }
    Ok(r)
}
