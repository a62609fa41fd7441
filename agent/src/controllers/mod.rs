//! The Kubernetes side of `foothold-agent serve`: connect to the apiserver (waiting for it while the HTTP
//! services already serve), win the leader Lease, run the selected controllers while leading, and report all of
//! it to `/readyz` and `/metrics`.

pub mod bpa;
pub mod cli;
pub mod common;
pub mod hosts;
pub mod kubelet_serving;
pub mod lease;
pub mod settings;
pub mod sip;
pub mod software;
pub mod vino;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::metrics::Metrics;
use crate::store::Store;
pub use settings::{Kind, Settings};

pub const LEASE_NAME: &str = "foothold-agent-controllers";

/// What `/readyz` reports of the controllers.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum State {
    Disabled,
    /// No apiserver yet (the appliance's Kubernetes may still be starting).
    Connecting {
        error: String,
    },
    /// Connected; another agent holds the lease.
    Standby {
        leader: String,
    },
    Leading {
        controllers: Vec<&'static str>,
    },
}

/// The controllers' state and, once connected, their client: shared with the HTTP services.
#[derive(Clone)]
pub struct Shared {
    state: Arc<Mutex<State>>,
    kube: Arc<Mutex<Option<Connection>>>,
}

/// A client of the apiserver and the namespace the controllers watch (None: all).
pub type Connection = (kube::Client, Option<String>);

impl Shared {
    pub fn new(state: State) -> Self {
        Shared {
            state: Arc::new(Mutex::new(state)),
            kube: Arc::default(),
        }
    }

    /// The apiserver client and the namespace the controllers watch (None: all), once connected; leader or
    /// not.
    pub fn kube(&self) -> Option<Connection> {
        self.kube.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn get(&self) -> State {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set(&self, s: State) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }
}

/// A client for the kubeconfig at `kubeconfig` (None: `KUBECONFIG`, `~/.kube/config`, then the in-cluster
/// service account), once the apiserver has answered.
pub async fn connect(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| format!("reading kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("no Kubernetes configuration: {e}"))?,
    };
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    client
        .apiserver_version()
        .await
        .map_err(|e| format!("apiserver unreachable: {e}"))?;
    Ok(client)
}

/// Runs until the process ends: connect, campaign, lead. Never returns an error: problems are logged,
/// reported in `shared`, and retried with backoff.
pub async fn run(
    settings: Arc<Settings>,
    shared: Shared,
    metrics: Arc<Metrics>,
    store: Arc<Store>,
) {
    let mut backoff = Duration::from_millis(500);
    let client = loop {
        match connect(settings.kubeconfig.as_deref()).await {
            Ok(c) => break c,
            Err(error) => {
                tracing::warn!(%error, retry_in = ?backoff, "controllers waiting for the apiserver");
                shared.set(State::Connecting { error });
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(15));
            }
        }
    };
    tracing::info!("connected to the apiserver");
    *shared.kube.lock().unwrap_or_else(|p| p.into_inner()) =
        Some((client.clone(), settings.namespace.clone()));
    let leases: Api<Lease> = Api::namespaced(client.clone(), &settings.lease_namespace);
    let mut elector = lease::Elector::new(
        leases,
        LEASE_NAME,
        &settings.identity,
        settings.lease_duration,
    );
    shared.set(State::Standby {
        leader: String::new(),
    });
    loop {
        // Campaign.
        match elector.try_acquire_or_renew().await {
            Ok(lease::Term::Leading) => {}
            Ok(lease::Term::Following(leader)) => {
                shared.set(State::Standby { leader });
                tokio::time::sleep(elector.retry_period()).await;
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "leader election");
                tokio::time::sleep(elector.retry_period()).await;
                continue;
            }
        }
        tracing::info!(identity = %settings.identity, "leading: starting controllers");
        // The installer image by its digest at each term: what the store holds now.
        let term_settings = Arc::new(settings.pinned(&store).await);
        metrics.set_leader(true);
        shared.set(State::Leading {
            controllers: settings.controllers.iter().map(|k| k.as_str()).collect(),
        });
        let controllers = run_controllers(
            client.clone(),
            term_settings,
            metrics.clone(),
            store.clone(),
        );
        tokio::pin!(controllers);
        // Lead until a renewal fails for longer than the renew deadline; dropping the controllers' future
        // cancels their reconciles before another agent can take the lease.
        let mut last_renewed = Instant::now();
        loop {
            tokio::select! {
                () = &mut controllers => {
                    tracing::error!("controllers stopped unexpectedly");
                    break;
                }
                () = tokio::time::sleep(elector.retry_period()) => {}
            }
            match elector.try_acquire_or_renew().await {
                Ok(lease::Term::Leading) => last_renewed = Instant::now(),
                Ok(lease::Term::Following(leader)) => {
                    tracing::warn!(%leader, "lost the lease");
                    break;
                }
                Err(e) => tracing::warn!(error = %e, "renewing the lease"),
            }
            if last_renewed.elapsed() > elector.renew_deadline() {
                tracing::warn!("could not renew the lease in time");
                break;
            }
        }
        metrics.set_leader(false);
        metrics.set_hosts(Default::default());
        shared.set(State::Standby {
            leader: String::new(),
        });
    }
}

async fn run_controllers(
    client: kube::Client,
    settings: Arc<Settings>,
    metrics: Arc<Metrics>,
    store: Arc<Store>,
) {
    use futures_util::future::FutureExt as _;
    let mut tasks = Vec::new();
    for kind in &settings.controllers {
        match kind {
            Kind::Bpa => {
                tasks.push(bpa::run(client.clone(), settings.clone(), metrics.clone()).boxed());
                tasks.push(
                    software::run(
                        client.clone(),
                        settings.clone(),
                        metrics.clone(),
                        store.clone(),
                    )
                    .boxed(),
                );
            }
            Kind::Sip => {
                tasks.push(sip::run(client.clone(), settings.clone(), metrics.clone()).boxed())
            }
            Kind::Vino => {
                tasks.push(vino::run(client.clone(), settings.clone(), metrics.clone()).boxed())
            }
        }
    }
    if settings
        .controllers
        .iter()
        .any(|k| matches!(k, Kind::Bpa | Kind::Sip))
    {
        tasks.push(hosts::run(client.clone(), settings.clone(), metrics.clone()).boxed());
    }
    if settings.approve_kubelet_serving {
        tasks.push(kubelet_serving::run(client.clone()).boxed());
    }
    if tasks.is_empty() {
        std::future::pending::<()>().await;
    }
    futures_util::future::join_all(tasks).await;
}
