//! What request handlers may reach, in one leaf that the router and every handler import (and that imports no
//! handler): the store, who may read and write, the metrics, the upload limit and the controllers' state.
//! Handlers take only the part they need (`State<Arc<Store>>`, `State<Limits>`, the access module's
//! extractors) through `FromRef`.

use std::sync::Arc;

use axum::extract::FromRef;

use crate::auth::Auth;
use crate::metrics::Metrics;
use crate::store::Store;

/// 64 GiB: OS images are 1-20 GiB.
pub const DEFAULT_MAX_IMAGE_LENGTH: u64 = 64 << 30;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<Store>,
    pub access: Access,
    pub metrics: Arc<Metrics>,
    pub limits: Limits,
    /// The Kubernetes controllers' state, for `/readyz` and the BPA status endpoint.
    pub controllers: crate::controllers::Shared,
    /// The services beside the agent that `/readyz` probes.
    pub neighbors: Arc<crate::neighbors::Neighbors>,
    /// The apt repository `/apt` serves (`serve` always has one).
    pub apt: Option<Arc<crate::apt::Repo>>,
}

/// A request extension the server adds to every request when it serves HTTPS: what handlers that write this
/// agent's own URL into a response (`/apt/foothold.sources`) take the scheme from (a server's request URI has
/// none).
#[derive(Clone, Copy, Debug)]
pub struct ServedOverTls;

/// Who may do what (see `auth`): every request is identified once, by the router, and handlers ask the
/// [`crate::auth::Caller`] they take.
#[derive(Clone)]
pub struct Access {
    pub auth: Auth,
}

#[derive(Clone, Copy)]
pub struct Limits {
    /// Largest BPA image or tus upload accepted, in bytes.
    pub max_image_length: u64,
    /// A request body that goes this long without a byte is cut off (see `limits`).
    pub body_idle_timeout: std::time::Duration,
    /// An upload that goes this long without a byte is freed (see `expiry`).
    pub upload_ttl: std::time::Duration,
}

/// A request body that goes this long without a byte is cut off, unless `serve` says otherwise.
pub const DEFAULT_BODY_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

impl AppState {
    /// The defaults: the upload limit, no controllers.
    pub fn new(store: Store, auth: Auth) -> Self {
        AppState {
            store: Arc::new(store),
            access: Access { auth },
            metrics: Arc::default(),
            limits: Limits {
                max_image_length: DEFAULT_MAX_IMAGE_LENGTH,
                body_idle_timeout: DEFAULT_BODY_IDLE_TIMEOUT,
                upload_ttl: crate::expiry::DEFAULT_TTL,
            },
            controllers: crate::controllers::Shared::new(crate::controllers::State::Disabled),
            neighbors: Arc::default(),
            apt: None,
        }
    }

    /// Serve `repo` under `/apt`.
    pub fn apt(mut self, repo: Arc<crate::apt::Repo>) -> Self {
        self.apt = Some(repo);
        self
    }

    /// The services beside the agent that `/readyz` probes.
    pub fn neighbors(mut self, neighbors: crate::neighbors::Neighbors) -> Self {
        self.neighbors = Arc::new(neighbors);
        self
    }

    pub fn upload_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.limits.upload_ttl = ttl;
        self
    }

    pub fn body_idle_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.limits.body_idle_timeout = timeout;
        self
    }

    pub fn max_image_length(mut self, bytes: u64) -> Self {
        self.limits.max_image_length = bytes;
        self
    }
}

impl FromRef<AppState> for Arc<Store> {
    fn from_ref(s: &AppState) -> Self {
        s.store.clone()
    }
}

impl FromRef<AppState> for Access {
    fn from_ref(s: &AppState) -> Self {
        s.access.clone()
    }
}

impl FromRef<AppState> for Arc<Metrics> {
    fn from_ref(s: &AppState) -> Self {
        s.metrics.clone()
    }
}

impl FromRef<AppState> for Limits {
    fn from_ref(s: &AppState) -> Self {
        s.limits
    }
}

impl FromRef<AppState> for crate::controllers::Shared {
    fn from_ref(s: &AppState) -> Self {
        s.controllers.clone()
    }
}
