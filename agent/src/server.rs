//! The HTTP server: one router for the registry, metrics and health, over plain HTTP or TLS.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;

use crate::auth::Auth;
use crate::metrics::Metrics;
use crate::registry::{self, routes};
use crate::store::Store;

pub struct AppState {
    pub store: Arc<Store>,
    pub auth: Auth,
    pub metrics: Arc<Metrics>,
    /// Largest BPA image accepted, in bytes.
    pub max_image_length: u64,
    /// Whether reading BPA records and /files needs the token too (anonymous by default: nodes and Ironic
    /// download without credentials on the provisioning network).
    pub files_need_token: bool,
    /// The Kubernetes controllers' state, for `/readyz`.
    pub controllers: crate::controllers::Shared,
}

impl AppState {
    pub fn new(store: Store, auth: Auth) -> Self {
        AppState {
            store: Arc::new(store),
            auth,
            metrics: Arc::default(),
            max_image_length: DEFAULT_MAX_IMAGE_LENGTH,
            files_need_token: false,
            controllers: crate::controllers::Shared::new(crate::controllers::State::Disabled),
        }
    }
}

/// 64 GiB: OS images are 1-20 GiB.
pub const DEFAULT_MAX_IMAGE_LENGTH: u64 = 64 << 30;

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v2", any(registry::handle))
        .route("/v2/", any(registry::handle))
        .route("/v2/{*rest}", any(registry::handle))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route(
            "/openapi.json",
            get(|| async {
                (
                    [("content-type", "application/json")],
                    crate::openapi::json(),
                )
            }),
        )
        .merge(crate::rest::routes())
        .merge(crate::tus::routes())
        .layer(middleware::from_fn(read_small_bodies))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
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
/// the controllers' state in the body: `{"http": "ok", "controllers": {"state": "connecting", ...}}`.
async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(serde_json::json!({
        "http": "ok",
        "controllers": state.controllers.get(),
    }))
    .into_response()
}

/// One structured log line and one counter per request.
async fn observe(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let route = match path.as_str() {
        "/metrics" => "metrics",
        "/healthz" | "/readyz" => "health",
        p if p.starts_with("/v1/") => "rest",
        p if p.starts_with("/files/") => "files",
        p => routes::parse(p).map(|r| r.label()).unwrap_or("other"),
    };
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    state.metrics.request(route, method.as_str(), status);
    tracing::info!(method = %method, path, route, status, ms = started.elapsed().as_millis() as u64, "request");
    resp
}

pub struct ServeConfig {
    pub listen: SocketAddr,
    pub max_image_length: u64,
    pub files_need_token: bool,
    pub data: PathBuf,
    pub token_file: Option<PathBuf>,
    pub tls: Option<(PathBuf, PathBuf)>,
    /// The Kubernetes controllers to run, if any.
    pub controllers: Option<crate::controllers::Settings>,
}

pub async fn serve(cfg: ServeConfig) -> anyhow::Result<()> {
    let auth = match &cfg.token_file {
        Some(f) => Auth::from_file(f)?,
        None => Auth::none(),
    };
    let data = cfg.data.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&data))
        .await?
        .with_context(|| format!("opening the data directory {}", cfg.data.display()))?;
    let state = Arc::new(AppState {
        max_image_length: cfg.max_image_length,
        files_need_token: cfg.files_need_token,
        ..AppState::new(store, auth)
    });
    if let Some(settings) = cfg
        .controllers
        .clone()
        .filter(|s| !s.controllers.is_empty())
    {
        let shared = state.controllers.clone();
        shared.set(crate::controllers::State::Connecting {
            error: "starting".into(),
        });
        tokio::spawn(crate::controllers::run(
            Arc::new(settings),
            shared,
            state.metrics.clone(),
            state.store.clone(),
        ));
    }
    let resume = state.clone();
    tokio::spawn(async move {
        let images = crate::images::Images::new(&resume.store, resume.max_image_length);
        if let Err(e) = images.resume_imports().await {
            tracing::error!(error = %e, "resuming interrupted archive imports");
        }
    });
    let app = router(state);
    let handle = axum_server::Handle::new();
    let shutdown = handle.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        shutdown.graceful_shutdown(Some(std::time::Duration::from_secs(10)));
    });
    let announce = handle.clone();
    let tls = cfg.tls.is_some();
    tokio::spawn(async move {
        if let Some(addr) = announce.listening().await {
            tracing::info!(%addr, tls, "listening");
        }
    });
    let service = app.into_make_service();
    match cfg.tls {
        None => {
            axum_server::bind(cfg.listen)
                .handle(handle)
                .serve(service)
                .await
        }
        Some((cert, key)) => {
            // Also here for callers that embed the server without going through main.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let config = axum_server::tls_rustls::RustlsConfig::from_pem_file(&cert, &key)
                .await
                .with_context(|| {
                    format!(
                        "loading TLS certificate {} and key {}",
                        cert.display(),
                        key.display()
                    )
                })?;
            axum_server::bind_rustls(cfg.listen, config)
                .handle(handle)
                .serve(service)
                .await
        }
    }
    .with_context(|| format!("serving on {}", cfg.listen))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
