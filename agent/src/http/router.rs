//! The one router: every protocol's routes, the OpenAPI document, metrics and health, with the layers every
//! request goes through (small bodies read first, one log line and counter per request).

use std::time::Instant;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;

use super::state::AppState;
use super::{files, openapi, registry, rest, tus};

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
        .merge(tus::routes())
        .layer(middleware::from_fn(read_small_bodies))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

async fn metrics(State(state): State<AppState>) -> Response {
    let open = state.store.upload_count().await.unwrap_or(0);
    (
        [("content-type", "text/plain; version=0.0.4")],
        state.metrics.render(open),
    )
        .into_response()
}

/// Bodies up to this size (by Content-Length) are read before the handler runs.
const SMALL_BODY: u64 = 1024 * 1024;

/// A request answered before its body was read (401, a bad name or digest...) makes hyper close the
/// connection, and a client that already reused it from its pool sees EOF. Reading small bodies up front keeps
/// every refusal connection-safe whatever the handler does; large bodies stay streamed (and a refused one is
/// cut off with its connection, as it should be).
async fn read_small_bodies(req: Request, next: Next) -> Response {
    let small = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .is_some_and(|n| n > 0 && n <= SMALL_BODY);
    if !small {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    match axum::body::to_bytes(body, SMALL_BODY as usize).await {
        Ok(bytes) => {
            next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
                .await
        }
        Err(e) => (
            axum::http::StatusCode::BAD_REQUEST,
            format!("reading the request body: {e}\n"),
        )
            .into_response(),
    }
}

/// Ready as soon as the HTTP services are (nodes must be able to pull while Kubernetes itself starts), with
/// the controllers' state and the services beside the agent in the body: `{"http": "ok", "controllers":
/// {"state": "connecting", ...}, "services": {"ironic": {"state": "ok", ...}}}`.
async fn readyz(State(state): State<AppState>) -> Response {
    let mut body = serde_json::json!({
        "http": "ok",
        "controllers": state.controllers.get(),
    });
    if !state.neighbors.is_empty() {
        body["services"] = serde_json::json!(crate::neighbors::probe_all(&state.neighbors).await);
    }
    axum::Json(body).into_response()
}

/// One structured log line and one counter per request.
async fn observe(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let route = match path.as_str() {
        "/metrics" => "metrics",
        "/healthz" | "/readyz" => "health",
        p if p.starts_with("/v1/") => "rest",
        p if p.starts_with("/files/") => "files",
        p => registry::routes::parse(p)
            .map(|r| r.label())
            .unwrap_or("other"),
    };
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    state.metrics.request(route, method.as_str(), status);
    tracing::info!(method = %method, path, route, status, ms = started.elapsed().as_millis() as u64, "request");
    resp
}
