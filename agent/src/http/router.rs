//! The one router: every protocol's routes, the OpenAPI document, metrics and health, with the layers every
//! request goes through (small bodies read first, one log line and counter per request).

use std::time::Instant;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use futures_util::StreamExt as _;

use super::state::AppState;
use super::{admission, apt, files, openapi, registry, rest, tus};

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v2", any(registry::handle))
        .route("/v2/", any(registry::handle))
        .route("/v2/{*rest}", any(registry::handle))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route(
            "/openapi.json",
            get(|| async { ([("content-type", "application/json")], openapi::json()) }),
        )
        .merge(rest::routes())
        .merge(files::routes())
        .merge(apt::routes())
        .merge(tus::routes())
        .merge(admission::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            read_small_bodies,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            super::limits::body_idle_timeout,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

/// Errors that axum's extractors answer in plain text (a path segment that is not UTF-8, say) get the REST
/// API's JSON body like every other error; the registry's own errors are JSON already.
async fn json_errors(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = match axum::body::to_bytes(body, 64 * 1024).await {
        Ok(b) if !b.is_empty() => String::from_utf8_lossy(&b).trim().to_owned(),
        _ => return Response::from_parts(parts, axum::body::Body::empty()),
    };
    use axum::http::StatusCode as S;
    let code = match status {
        S::BAD_REQUEST => "INVALID_REQUEST",
        S::NOT_FOUND => "NOT_FOUND",
        S::METHOD_NOT_ALLOWED => "METHOD_NOT_ALLOWED",
        S::PAYLOAD_TOO_LARGE => "TOO_LARGE",
        S::UNSUPPORTED_MEDIA_TYPE => "UNSUPPORTED_MEDIA_TYPE",
        s if s.is_server_error() => "INTERNAL",
        _ => "ERROR",
    };
    let mut json = super::error::ApiError::new(status, code, text).into_response();
    for (name, value) in &parts.headers {
        if name != axum::http::header::CONTENT_TYPE && name != axum::http::header::CONTENT_LENGTH {
            json.headers_mut().insert(name.clone(), value.clone());
        }
    }
    json
}

async fn not_found(uri: axum::http::Uri) -> super::error::ApiError {
    super::error::ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        "NOT_FOUND",
        format!("nothing is served at {}", uri.path()),
    )
}

async fn method_not_allowed(method: axum::http::Method) -> super::error::ApiError {
    super::error::ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        format!(
            "{} is not a method this path answers",
            crate::metrics::method_label(&method)
        ),
    )
}

async fn metrics(State(state): State<AppState>) -> Response {
    let open = state.store.upload_count().await.unwrap_or(0);
    state
        .metrics
        .limit_count("uploads", state.store.uploads_refused());
    let mut text = state.metrics.render(open);
    crate::metrics::process::render(&mut text);
    crate::metrics::process::render_store_filesystem(&mut text, state.store.root());
    ([("content-type", "text/plain; version=0.0.4")], text).into_response()
}

/// Bodies up to this size (by Content-Length) are read before the handler runs.
const SMALL_BODY: u64 = 1024 * 1024;

/// All small bodies held at once by [`read_small_bodies`], in KiB: what anonymous clients can make the agent
/// buffer before a handler has looked at them.
const SMALL_BODIES_BUDGET_KIB: usize = 32 * 1024;

static SMALL_BODIES_BUDGET: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(SMALL_BODIES_BUDGET_KIB);

/// A request answered before its body was read (401, a bad name or digest...) makes hyper close the
/// connection, and a client that already reused it from its pool sees EOF. Reading small bodies up front keeps
/// every refusal connection-safe whatever the handler does; large bodies stay streamed (and a refused one is
/// cut off with its connection, as it should be). The bodies held at once share one budget: past it, a body
/// is streamed like a large one, so many clients sending bodies they never finish cost memory only up to it.
async fn read_small_bodies(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let small = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .filter(|&n| n > 0 && n <= SMALL_BODY);
    let Some(len) = small else {
        return next.run(req).await;
    };
    let Ok(_held) = SMALL_BODIES_BUDGET.try_acquire_many(len.div_ceil(1024) as u32) else {
        state.metrics.limit_reached("small_bodies_budget");
        return next.run(req).await;
    };
    let (parts, body) = req.into_parts();
    // Content-Length bounds what arrives (hyper enforces it). A body cut off midway still reaches the handler,
    // as what arrived followed by the error: an upload keeps those bytes, as it would have streamed.
    let mut stream = body.into_data_stream();
    let mut arrived = bytes::BytesMut::with_capacity(len as usize);
    let mut failed = None;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(b) => arrived.extend_from_slice(&b),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let arrived = arrived.freeze();
    let body = match failed {
        None => axum::body::Body::from(arrived),
        Some(e) => axum::body::Body::from_stream(futures_util::stream::iter([Ok(arrived), Err(e)])),
    };
    // The permit is held until the handler has answered: the body lives that long.
    next.run(Request::from_parts(parts, body)).await
}

/// Ready as soon as the HTTP services are (nodes must be able to pull while Kubernetes itself starts), with
/// the controllers' state and the services beside the agent in the body: `{"http": "ok", "controllers":
/// {"state": "connecting", ...}, "services": {"ironic": {"state": "ok", ...}}}`.
///
/// The controllers' connection error names files and addresses (the kubeconfig's path, the apiserver's): only
/// a request with an admin credential sees it.
async fn readyz(State(state): State<AppState>, caller: crate::auth::Caller) -> Response {
    let mut controllers = serde_json::json!(state.controllers.get());
    if !caller.is_admin() {
        if let Some(error) = controllers.get_mut("error") {
            *error =
                "not connected yet (the agent's log, or /readyz with the token, says why)".into();
        }
    }
    let mut body = serde_json::json!({
        "http": "ok",
        "controllers": controllers,
    });
    if !state.neighbors.is_empty() {
        body["services"] = serde_json::json!(state.neighbors.probe_all().await);
    }
    // When each certificate the agent serves or watches ends (see `certs`): informative, never unready.
    let expiries = state.metrics.certificate_expiries();
    if !expiries.is_empty() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        body["certificates"] = expiries
            .into_iter()
            .map(|(name, t)| {
                let expires = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t);
                let days_left = (t as i64 - now as i64).div_euclid(86_400);
                (
                    name,
                    serde_json::json!({
                        "expires": httpdate::fmt_http_date(expires),
                        "days_left": days_left,
                    }),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    axum::Json(body).into_response()
}

/// Characters of a request path that go into its log line.
const MAX_LOGGED_PATH: usize = 512;

/// One structured log line and one counter per request, with the credential that made it; every write that
/// changed something (2xx) has an audit line too. The request is identified here, once: handlers take the
/// [`crate::auth::Caller`] this puts in its extensions.
async fn observe(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let caller = state.access.auth.identify(req.headers());
    let credential = caller.name().to_owned();
    req.extensions_mut().insert(caller);
    let method = crate::metrics::method_label(req.method());
    let writes = !matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    );
    let path = req.uri().path().to_owned();
    let route = match path.as_str() {
        "/metrics" => "metrics",
        "/healthz" | "/readyz" => "health",
        p if p.starts_with("/v1/") => "rest",
        p if p.starts_with("/files/") => "files",
        p if p.starts_with("/apt/") => "apt",
        p if p.starts_with("/admission/") => "admission",
        p => registry::routes::parse(p)
            .map(|r| r.label())
            .unwrap_or("other"),
    };
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    state
        .metrics
        .request(route, method, status, started.elapsed());
    if let Some(super::limits::LimitReached(limit)) = resp.extensions().get() {
        state.metrics.limit_reached(limit);
    }
    // The path as far as a log line should carry it (a client chooses its length).
    let shown = match path.char_indices().nth(MAX_LOGGED_PATH) {
        Some((cut, _)) => &path[..cut],
        None => path.as_str(),
    };
    tracing::info!(
        method,
        path = shown,
        route,
        status,
        credential,
        ms = started.elapsed().as_millis() as u64,
        "request"
    );
    if writes && resp.status().is_success() {
        tracing::info!(target: "foothold_agent::audit", credential, method, path = shown, status, "write");
        state.metrics.write_by(&credential);
    }
    resp
}
