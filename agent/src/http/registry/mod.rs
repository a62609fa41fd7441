//! The OCI distribution-spec v1.1 registry. Handlers only translate HTTP into store calls and results back
//! into HTTP; every rule about content lives in `store`, every wire error in `error`.

pub mod error;
pub mod routes;

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::auth::Caller;
use crate::digest::{Digest, DigestError};
use crate::http::serve_file::Asked;
use crate::http::state::AppState;
use crate::manifest;
use crate::names;
use crate::store::Reference;
use crate::store::StoreError;
pub use error::RegistryError;
use routes::Route;

type Result<T, E = RegistryError> = std::result::Result<T, E>;

const API_VERSION: (&str, &str) = ("docker-distribution-api-version", "registry/2.0");
const DIGEST_HEADER: &str = "docker-content-digest";

/// Entry point for every `/v2` request.
pub async fn handle(
    State(state): State<AppState>,
    caller: Caller,
    method: Method,
    uri: Uri,
    asked: Asked,
    body: Body,
) -> Response {
    let mut resp = match dispatch(&state, &caller, &method, &uri, &asked, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    resp.headers_mut()
        .insert(API_VERSION.0, HeaderValue::from_static(API_VERSION.1));
    resp
}

fn parse_digest(s: &str) -> Result<Digest> {
    s.parse()
        .map_err(|e: DigestError| RegistryError::DigestInvalid(e.to_string()))
}

/// A tag or digest. An invalid tag is "unknown" for reads (no such manifest can exist) and "invalid" for PUT.
fn parse_reference(s: &str, put: bool) -> Result<Reference> {
    if s.contains(':') {
        Ok(Reference::Digest(parse_digest(s)?))
    } else {
        names::validate_tag(s).map_err(|e| {
            if put {
                RegistryError::ManifestInvalid(e.to_string())
            } else {
                RegistryError::ManifestUnknown(e.to_string())
            }
        })?;
        Ok(Reference::Tag(s.to_owned()))
    }
}

fn hv(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

fn empty(status: StatusCode, headers: &[(&str, String)]) -> Response {
    let mut r = (status, Body::empty()).into_response();
    for (k, v) in headers {
        r.headers_mut().insert(
            header::HeaderName::from_bytes(k.as_bytes()).expect("static header name"),
            hv(v),
        );
    }
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    r
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

async fn dispatch(
    state: &AppState,
    caller: &Caller,
    method: &Method,
    uri: &Uri,
    asked: &Asked,
    body: Body,
) -> Result<Response> {
    let headers = &asked.headers;
    let route = routes::parse(uri.path()).ok_or_else(|| {
        RegistryError::NameUnknown(format!("no registry route at {}", uri.path()))
    })?;
    let query: HashMap<String, String> = Query::try_from_uri(uri)
        .map(|Query(q)| q)
        .unwrap_or_default();
    // Who may: a reader for reads; a writer before anything is parsed, then one of this repository's.
    let writes = !matches!(*method, Method::GET | Method::HEAD);
    if writes {
        caller.may_upload()?;
    } else {
        caller.may_read()?;
    }
    // The name as addressed (for Location headers) and the repository it is stored under: containerd used as
    // a mirror sends `?ns=<upstream>`; the image keeps its upstream name `<upstream>/<path>`.
    let (path_name, repo) = match route.name() {
        None => (String::new(), String::new()),
        Some(n) => {
            names::validate_name(n).map_err(|e| RegistryError::NameInvalid(e.to_string()))?;
            let repo = match query.get("ns") {
                Some(ns) if !ns.is_empty() => names::mirrored_name(ns, n)
                    .map_err(|e| RegistryError::NameInvalid(e.to_string()))?,
                _ => n.to_owned(),
            };
            (n.to_owned(), repo)
        }
    };
    if writes {
        caller.may_write_repository(&repo)?;
    }
    match (&route, method.clone()) {
        (Route::Base, Method::GET | Method::HEAD) => {
            // Clients only send credentials after a challenge: challenge on the ping when there are credentials.
            if !caller.is_authenticated() {
                return Err(RegistryError::Unauthorized(
                    "this registry takes credentials: log in".into(),
                ));
            }
            Ok((StatusCode::OK, axum::Json(json!({}))).into_response())
        }
        (Route::Catalog, Method::GET) => {
            let (n, last) = paging(&query)?;
            let repos = state.store.repositories(last, n).await?;
            Ok(paged("/v2/_catalog", "repositories", repos, n))
        }
        (Route::Tags { .. }, Method::GET) => {
            let (n, last) = paging(&query)?;
            let tags = state
                .store
                .tags(&repo, last, n)
                .await?
                .ok_or_else(|| RegistryError::NameUnknown(repo.clone()))?;
            Ok(paged(
                &format!("/v2/{path_name}/tags/list"),
                "tags",
                tags,
                n,
            ))
        }
        (Route::Manifest { reference, .. }, m @ (Method::GET | Method::HEAD)) => {
            let reference = parse_reference(reference, false)?;
            let (row, bytes) = state.store.get_manifest(&repo, &reference).await?;
            let accept: Vec<&str> = headers
                .get_all(header::ACCEPT)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            if !manifest::accepted(&row.media_type, &accept) {
                return Err(RegistryError::ManifestUnknown(format!(
                    "manifest {reference} is stored as {}, which the request's Accept header does not include",
                    row.media_type
                )));
            }
            let mut resp = if m == Method::HEAD {
                Body::empty().into_response()
            } else {
                Body::from(bytes).into_response()
            };
            let h = resp.headers_mut();
            h.insert(header::CONTENT_TYPE, hv(&row.media_type));
            h.insert(header::CONTENT_LENGTH, hv(&row.size.to_string()));
            h.insert(DIGEST_HEADER, hv(&row.digest.to_string()));
            h.insert(header::ETAG, hv(&format!("\"{}\"", row.digest)));
            Ok(resp)
        }
        (Route::Manifest { reference, .. }, Method::PUT) => {
            let reference = parse_reference(reference, true)?;
            // Tags given as `?tag=` (distribution-spec 1.1's push by digest with tags), answered in `OCI-Tag`.
            let tags = Query::<Vec<(String, String)>>::try_from_uri(uri)
                .map(|Query(q)| q)
                .unwrap_or_default()
                .into_iter()
                .filter(|(k, _)| k == "tag")
                .map(|(_, t)| match names::validate_tag(&t) {
                    Ok(()) => Ok(t),
                    Err(e) => Err(RegistryError::ManifestInvalid(e.to_string())),
                })
                .collect::<Result<Vec<_>>>()?;
            let bytes = axum::body::to_bytes(body, manifest::MAX_MANIFEST_SIZE)
                .await
                .map_err(|_| RegistryError::ManifestTooLarge)?;
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok());
            let (digest, subject) = state
                .store
                .put_manifest(&repo, &reference, &tags, ct, bytes)
                .await?;
            tracing::info!(repo, %digest, reference = %reference, "manifest stored");
            let mut h = vec![
                ("location", format!("/v2/{path_name}/manifests/{digest}")),
                (DIGEST_HEADER, digest.to_string()),
            ];
            if let Some(s) = subject {
                h.push(("oci-subject", s.to_string()));
            }
            if !tags.is_empty() {
                h.push(("oci-tag", tags.join(", ")));
            }
            Ok(empty(StatusCode::CREATED, &h))
        }
        (Route::Manifest { reference, .. }, Method::DELETE) => {
            let reference = parse_reference(reference, false)?;
            state.store.delete_manifest(&repo, &reference).await?;
            Ok(empty(StatusCode::ACCEPTED, &[]))
        }
        (Route::Blob { digest, .. }, Method::GET | Method::HEAD) => {
            let digest = parse_digest(digest)?;
            serve_blob(state, &repo, &digest, asked).await
        }
        (Route::Blob { digest, .. }, Method::DELETE) => {
            let digest = parse_digest(digest)?;
            state.store.delete_blob(&repo, &digest).await?;
            Ok(empty(StatusCode::ACCEPTED, &[]))
        }
        (Route::UploadStart { .. }, Method::POST) => {
            if let Some(mount) = query.get("mount") {
                let digest = parse_digest(mount)?;
                let from = query
                    .get("from")
                    .map(String::as_str)
                    .filter(|f| !f.is_empty());
                if let Some(f) = from {
                    names::validate_name(f)
                        .map_err(|e| RegistryError::NameInvalid(e.to_string()))?;
                }
                if state.store.mount_blob(&repo, &digest, from).await? {
                    return Ok(blob_created(&path_name, &digest));
                }
                // Not mountable: fall through to a normal session, as the spec asks.
            } else if let Some(d) = query.get("digest") {
                let digest = parse_digest(d)?;
                state
                    .store
                    .put_blob(
                        &repo,
                        &digest,
                        body.into_data_stream(),
                        content_length(headers),
                    )
                    .await?;
                return Ok(blob_created(&path_name, &digest));
            }
            let id = state.store.start_upload(&repo).await?;
            Ok(upload_accepted(StatusCode::ACCEPTED, &path_name, &id, 0))
        }
        (Route::Upload { id, .. }, Method::GET) => {
            let offset = state.store.upload_offset(&repo, id).await?;
            Ok(upload_accepted(
                StatusCode::NO_CONTENT,
                &path_name,
                id,
                offset,
            ))
        }
        (Route::Upload { id, .. }, Method::PATCH) => {
            let start = chunk_start(headers)?;
            let offset = state
                .store
                .append_upload(&repo, id, start, body.into_data_stream())
                .await
                .map_err(|e| upload_error(e, &path_name, id))?;
            Ok(upload_accepted(
                StatusCode::ACCEPTED,
                &path_name,
                id,
                offset,
            ))
        }
        (Route::Upload { id, .. }, Method::PUT) => {
            let digest = parse_digest(
                query
                    .get("digest")
                    .ok_or_else(|| RegistryError::DigestInvalid("PUT needs ?digest=".into()))?,
            )?;
            // A final chunk may say where it starts, like a PATCH: out of order is 416 and the session stays.
            let start = chunk_start(headers)?;
            state
                .store
                .finish_upload(&repo, id, start, &digest, body.into_data_stream())
                .await
                .map_err(|e| upload_error(e, &path_name, id))?;
            tracing::info!(repo, %digest, "blob upload finished");
            Ok(blob_created(&path_name, &digest))
        }
        (Route::Upload { id, .. }, Method::DELETE) => {
            state.store.cancel_upload(&repo, id).await?;
            Ok(empty(StatusCode::NO_CONTENT, &[]))
        }
        (Route::Referrers { digest, .. }, Method::GET) => {
            let subject = parse_digest(digest)?;
            let filter = query.get("artifactType").filter(|a| !a.is_empty());
            let rows = state.store.referrers(&repo, &subject).await?;
            let manifests: Vec<_> = rows
                .into_iter()
                .filter(|r| filter.is_none_or(|f| r.artifact_type.as_deref() == Some(f.as_str())))
                .map(|r| {
                    let mut d = json!({"mediaType": r.media_type, "digest": r.digest.to_string(), "size": r.size});
                    if let Some(a) = r.artifact_type {
                        d["artifactType"] = json!(a);
                    }
                    if let Some(a) = r.annotations {
                        d["annotations"] = json!(a);
                    }
                    d
                })
                .collect();
            let index = json!({"schemaVersion": 2, "mediaType": manifest::OCI_INDEX, "manifests": manifests});
            let mut resp = axum::Json(index).into_response();
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(manifest::OCI_INDEX),
            );
            if filter.is_some() {
                resp.headers_mut().insert(
                    "oci-filters-applied",
                    HeaderValue::from_static("artifactType"),
                );
            }
            Ok(resp)
        }
        (route, method) => Err(RegistryError::Unsupported(format!(
            "{method} is not supported on {}",
            route.label()
        ))),
    }
}

fn paging(query: &HashMap<String, String>) -> Result<(Option<usize>, Option<String>)> {
    let n = match query.get("n") {
        None => None,
        Some(v) => Some(
            v.parse::<usize>()
                .map_err(|_| RegistryError::PaginationInvalid(format!("n={v:?} is not a count")))?,
        ),
    };
    Ok((n, query.get("last").cloned()))
}

/// A list body with `Link: <...?n=&last=>; rel="next"` when the page is full.
fn paged(path: &str, key: &str, items: Vec<String>, n: Option<usize>) -> Response {
    let next = match (n, items.last()) {
        (Some(n), Some(last)) if n > 0 && items.len() == n => {
            Some(format!("<{path}?n={n}&last={last}>; rel=\"next\""))
        }
        _ => None,
    };
    let body = if key == "tags" {
        let name = path
            .trim_start_matches("/v2/")
            .trim_end_matches("/tags/list");
        json!({"name": name, "tags": items})
    } else {
        json!({ key: items })
    };
    let mut resp = axum::Json(body).into_response();
    if let Some(link) = next {
        resp.headers_mut().insert(header::LINK, hv(&link));
    }
    resp
}

/// Where a chunk says it starts (its `Content-Range`), if it says.
fn chunk_start(headers: &HeaderMap) -> Result<Option<u64>> {
    headers
        .get(header::CONTENT_RANGE)
        .map(|v| {
            v.to_str()
                .map_err(|_| RegistryError::BlobUploadInvalid("Content-Range is not ASCII".into()))
                .and_then(parse_content_range)
        })
        .transpose()
}

/// A store error on an upload session; an out-of-order chunk's 416 names the session's location.
fn upload_error(e: StoreError, path_name: &str, id: &str) -> RegistryError {
    match RegistryError::from(e) {
        RegistryError::RangeInvalid { offset, .. } => RegistryError::RangeInvalid {
            offset,
            location: format!("/v2/{path_name}/blobs/uploads/{id}"),
        },
        other => other,
    }
}

/// `Content-Range: <start>-<end>` (the distribution-spec form, no unit); `bytes ` prefix tolerated.
fn parse_content_range(v: &str) -> Result<u64> {
    let v = v
        .trim()
        .trim_start_matches("bytes ")
        .trim_start_matches("bytes=");
    let (a, b) = v.split_once('-').ok_or_else(|| {
        RegistryError::BlobUploadInvalid(format!("Content-Range {v:?} is not <start>-<end>"))
    })?;
    let b = b.split('/').next().unwrap_or(b);
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(a), Ok(b)) if a <= b => Ok(a),
        _ => Err(RegistryError::BlobUploadInvalid(format!(
            "Content-Range {v:?} is not <start>-<end>"
        ))),
    }
}

fn blob_created(name: &str, digest: &Digest) -> Response {
    empty(
        StatusCode::CREATED,
        &[
            ("location", format!("/v2/{name}/blobs/{digest}")),
            (DIGEST_HEADER, digest.to_string()),
        ],
    )
}

fn upload_accepted(status: StatusCode, name: &str, id: &str, offset: u64) -> Response {
    empty(
        status,
        &[
            ("location", format!("/v2/{name}/blobs/uploads/{id}")),
            ("range", format!("0-{}", offset.saturating_sub(1))),
            ("docker-upload-uuid", id.to_owned()),
        ],
    )
}

/// Blob GET/HEAD, with one byte range. Streams from the file; never buffers the blob.
async fn serve_blob(
    state: &AppState,
    repo: &str,
    digest: &Digest,
    asked: &Asked,
) -> Result<Response> {
    let (file, size) = state.store.open_blob(repo, digest).await?;
    let etag = format!("\"{digest}\"");
    let mut resp = crate::http::serve_file::respond(file, size, asked, &[&etag], &state.metrics);
    if resp.status() != StatusCode::RANGE_NOT_SATISFIABLE {
        let h = resp.headers_mut();
        h.insert(DIGEST_HEADER, hv(&digest.to_string()));
        h.insert(header::ETAG, hv(&etag));
        // A blob is named by its digest: what a client or a cache in between holds under it never changes.
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("max-age=31536000, immutable"),
        );
    }
    Ok(resp)
}
