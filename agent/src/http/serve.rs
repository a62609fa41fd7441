//! Running the router: the store opened, interrupted imports resumed, the controllers started, then plain
//! HTTP or TLS until SIGTERM or Ctrl-C (with ten seconds for requests in flight).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;

use super::limits::{ClientLimits, ConnectionLimit};
use super::router::router;
use super::state::{AppState, ServedOverTls};
use crate::auth::Auth;
use crate::store::Store;

pub struct ServeConfig {
    pub listen: SocketAddr,
    pub max_image_length: u64,
    /// Which plain HTTP/1 connections get bodies of files by sendfile (see `sendfile`).
    pub sendfile: super::sendfile::SendfileMode,
    pub data: PathBuf,
    /// Where the credentials, the protected repositories and the reads policy come from.
    pub auth: crate::auth::Sources,
    /// The certificate chain and key served, reloaded when their files change (`certs`).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// More certificates whose expiry `/metrics` reports, by name.
    pub certificates: Vec<(String, PathBuf)>,
    /// The Kubernetes controllers to run, if any.
    pub controllers: Option<crate::controllers::Settings>,
    /// The services beside the agent that `/readyz` probes.
    pub ready_checks: crate::neighbors::Neighbors,
    /// Timeouts and the connection cap for clients.
    pub client_limits: ClientLimits,
    /// How long an upload may go without a byte before it is freed.
    pub upload_ttl: std::time::Duration,
}

/// [`serve`] on a runtime of its own, until it ends. The binary calls this rather than polling `serve()`
/// itself: a future is compiled where it is polled, so a `block_on(serve(..))` in the binary compiled the
/// whole server's state machines (every handler's, every reconciler's) again in that crate, which release
/// builds do not share with the library (2 of the agent's 6 minutes of release build; see docs/results.md).
pub fn serve_blocking(cfg: ServeConfig) -> anyhow::Result<()> {
    tokio::runtime::Runtime::new()?.block_on(serve(cfg))
}

pub async fn serve(cfg: ServeConfig) -> anyhow::Result<()> {
    let auth = Auth::configure(&cfg.auth)?;
    if let Some(file) = auth.credentials_file() {
        tracing::info!(file = %file.display(), credentials = auth.policy().credentials.len(), "credentials loaded");
    }
    tokio::spawn(crate::auth::watch(auth.clone()));
    let data = cfg.data.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&data))
        .await?
        .with_context(|| format!("opening the data directory {}", cfg.data.display()))?
        .limit_uploads(cfg.client_limits.max_uploads);
    let data = cfg.data.clone();
    let apt = tokio::task::spawn_blocking(move || crate::apt::Repo::open(&data))
        .await?
        .with_context(|| format!("opening the apt repository in {}", cfg.data.display()))?;
    let apt = Arc::new(apt);
    let state = AppState::new(store, auth)
        .apt(apt.clone())
        .max_image_length(cfg.max_image_length)
        .body_idle_timeout(cfg.client_limits.body_idle_timeout)
        .upload_ttl(cfg.upload_ttl)
        .neighbors(cfg.ready_checks.clone());
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
    tokio::spawn(crate::apt::follow(apt, state.store.clone()).await);
    tokio::spawn(crate::expiry::run(
        state.store.clone(),
        cfg.upload_ttl,
        cfg.max_image_length,
        state.metrics.clone(),
    ));
    let resume = state.clone();
    tokio::spawn(async move {
        let images = crate::images::Images::new(&resume.store, resume.limits.max_image_length);
        if let Err(e) = images.resume_imports().await {
            tracing::error!(error = %e, "resuming interrupted archive imports");
        }
    });
    let files = super::limits::raise_open_files();
    let limits = cfg.client_limits;
    // Room beside the connections for blob files, the database and the controllers' clients.
    let max_connections = limits
        .max_connections
        .min((files as usize).saturating_sub(256).max(16));
    if max_connections < limits.max_connections {
        tracing::warn!(
            open_files = files,
            max_connections,
            "the open-file limit caps connections below --max-connections"
        );
    }
    let connections = ConnectionLimit::new(max_connections, state.metrics.clone());
    let metrics = state.metrics.clone();
    let app = router(state);
    let app = match cfg.tls {
        Some(_) => app.layer(axum::Extension(ServedOverTls)),
        None => app,
    };
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
            tokio::spawn(super::certs::watch(None, cfg.certificates, metrics.clone()));
            let acceptor =
                super::sendfile::ZeroCopyAcceptor::new(connections, metrics, cfg.sendfile);
            let mut server = axum_server::bind(cfg.listen)
                .acceptor(acceptor)
                .handle(handle);
            limits.configure(server.http_builder());
            server.serve(service).await
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
            tokio::spawn(super::certs::watch(
                Some(super::certs::Served {
                    config: config.clone(),
                    cert,
                    key,
                }),
                cfg.certificates,
                metrics,
            ));
            let mut server = axum_server::bind(cfg.listen)
                .acceptor(
                    axum_server::tls_rustls::RustlsAcceptor::new(config).acceptor(connections),
                )
                .handle(handle);
            limits.configure(server.http_builder());
            server.serve(service).await
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
