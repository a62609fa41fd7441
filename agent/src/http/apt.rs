//! The apt repository over HTTP (`deb <agent>/apt foothold main`, see `crate::apt`): the current snapshot's
//! `InRelease`, `Release`, `Release.gpg` and `Packages`, any kept `Packages` by hash, the packages under
//! `pool/`, and the signing key (`foothold.asc`) with a ready `.sources` entry. Read like `/files`: anonymous
//! unless `--files-require-token`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::uri::Authority;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::access::ReadAccess;
use super::error::{ApiError, ApiResult};
use super::serve_file::{ascii, respond, Asked};
use super::state::{AppState, ServedOverTls};
use crate::apt::{index::SUITE, Repo};
use crate::metrics::Metrics;
use crate::store::Store;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/apt/foothold.asc", get(public_key).head(public_key))
        .route("/apt/foothold.sources", get(sources).head(sources))
        .route(
            &format!("/apt/dists/{SUITE}/{{*rest}}"),
            get(dists).head(dists),
        )
        .route("/apt/pool/{*rest}", get(pool).head(pool))
}

fn not_found(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        format!("the apt repository has no {what}"),
    )
}

fn repo(state: &AppState) -> ApiResult<&Arc<Repo>> {
    state
        .apt
        .as_ref()
        .ok_or_else(|| not_found("files: it is not enabled on this agent"))
}

fn text(body: String, content_type: &'static str, head: bool) -> Response {
    let len = body.len();
    let mut r = if head {
        axum::body::Body::empty().into_response()
    } else {
        body.into_response()
    };
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    r
}

async fn public_key(_: ReadAccess, State(state): State<AppState>, method: Method) -> ApiResult {
    let key = repo(&state)?.public_key().to_owned();
    Ok(text(key, "application/pgp-keys", method == Method::HEAD))
}

/// A deb822 `.sources` entry for this agent as the client reached it (its Host header, or an HTTP/2 request's
/// authority), the key inline (apt ≥ 2.3).
async fn sources(
    _: ReadAccess,
    State(state): State<AppState>,
    method: Method,
    headers: HeaderMap,
    uri: Uri,
    tls: Option<axum::Extension<ServedOverTls>>,
) -> ApiResult {
    let host = match (headers.get(header::HOST), uri.authority()) {
        (Some(h), _) => h
            .to_str()
            .ok()
            .and_then(|h| h.parse::<Authority>().ok())
            .ok_or_else(|| ApiError::invalid("the Host header is not a host[:port]"))?,
        (None, Some(a)) => a.clone(),
        (None, None) => {
            return Err(ApiError::invalid(
                "a Host header is needed to name the repository's URL",
            ))
        }
    };
    // Written into the entry as the repository's URL: a host and a port, nothing else.
    if host.as_str().contains('@') {
        return Err(ApiError::invalid("the Host header is not a host[:port]"));
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    let entry =
        crate::apt::sources_entry(&format!("{scheme}://{host}"), repo(&state)?.public_key());
    Ok(text(
        entry,
        "text/plain; charset=utf-8",
        method == Method::HEAD,
    ))
}

async fn dists(
    _: ReadAccess,
    State(state): State<AppState>,
    State(metrics): State<Arc<Metrics>>,
    Path(rest): Path<String>,
    asked: Asked,
) -> ApiResult {
    let (path, etag) = repo(&state)?
        .dists_file(&rest)
        .ok_or_else(|| not_found(&format!("dists/{SUITE}/{rest}")))?;
    let file =
        std::fs::File::open(&path).map_err(|_| not_found(&format!("dists/{SUITE}/{rest}")))?;
    let meta = file.metadata().map_err(internal)?;
    let modified = httpdate::fmt_http_date(meta.modified().map_err(internal)?);
    // The current snapshot's files change at the next publish; by-hash ones never do.
    let cache = if rest.contains("/by-hash/") {
        "max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let identity = [
        (header::LAST_MODIFIED, ascii(modified)),
        (header::CACHE_CONTROL, HeaderValue::from_static(cache)),
    ];
    let text = "text/plain; charset=utf-8";
    Ok(serve(
        file,
        meta.len(),
        &asked,
        etag,
        text,
        &identity,
        &metrics,
    ))
}

async fn pool(
    _: ReadAccess,
    State(state): State<AppState>,
    State(store): State<Arc<Store>>,
    State(metrics): State<Arc<Metrics>>,
    Path(rest): Path<String>,
    asked: Asked,
) -> ApiResult {
    let (digest, size) = repo(&state)?
        .pool_file(&rest)
        .ok_or_else(|| not_found(&format!("pool/{rest}")))?;
    let file = std::fs::File::open(store.blob_path(&digest))
        .map_err(|_| not_found(&format!("pool/{rest}")))?;
    let etag = format!("\"{digest}\"");
    let deb = "application/vnd.debian.binary-package";
    Ok(serve(file, size, &asked, etag, deb, &[], &metrics))
}

/// `file` with Range, validated by its strong `etag` only (a date cannot tell two snapshots written in one second
/// apart, and a resumed download must not splice them), with its type and `identity` headers.
fn serve(
    file: std::fs::File,
    size: u64,
    asked: &Asked,
    etag: String,
    content_type: &'static str,
    identity: &[(header::HeaderName, HeaderValue)],
    metrics: &Arc<Metrics>,
) -> Response {
    let mut r = respond(file, size, asked, &[&etag], metrics);
    if r.status() != StatusCode::RANGE_NOT_SATISFIABLE {
        let h = r.headers_mut();
        h.insert(header::ETAG, ascii(etag));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        for (name, value) in identity {
            h.insert(name.clone(), value.clone());
        }
    }
    r
}

fn internal(e: std::io::Error) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", e.to_string())
}
