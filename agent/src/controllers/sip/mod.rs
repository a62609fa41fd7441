//! The SIP reconciler for `SIPCluster` (airship.airshipit.org/v1): observe (the SIPCluster, BareMetalHosts
//! with their networkData and BMC credential Secrets: [`observe`]), plan ([`plan`], pure), render the services'
//! objects ([`render`], pure and typed, with the text configurations of [`configs`]), apply (claim labels with
//! a resourceVersion precondition, then the services through the owned-objects tracker, which prunes what the
//! spec no longer has, then status). One SIPCluster at a time
//! (concurrency 1), as the seed design demands; every claim is still guarded by its precondition.
//!
//! Hosts are named `<namespace>/<name>` in the plan and the status, since BareMetalHosts of several namespaces
//! may serve.
//!
//! Services, in the SIPCluster's namespace and labelled `sip.airshipit.org/sipcluster=<name>`:
//! - `loadBalancerControlPlane[i]` → `<name>-lb-control-plane[-i]`: Secret (`haproxy.cfg`), Deployment, NodePort
//!   Service; backends are the ControlPlane actives' Kubernetes API (6443), health-checked with `/readyz`.
//! - `loadBalancerWorker[i]` → `<name>-lb-worker[-i]`: the same, one frontend per port of `nodePortRange`.
//! - `jumpHost[i]` → `<name>-jump-host[-i]`: Secret (`hosts`: `[{name, bmc{ip, username, password}}]`, and
//!   `ssh_config`), ConfigMap `<…>-keys` (`authorized_keys`), Deployment with hostAliases for every host and
//!   the `nodeSSHPrivateKeys` Secret at `/etc/foothold/ssh`, NodePort Service on 22.
//! - `auth[i]` → `<name>-auth[-i]`: Dex config Secret (`config.yaml`), Deployment, NodePort Service on 5556.
//!
//! Deleting the SIPCluster removes the claim labels from every host it holds and every service object.

pub mod configs;
pub mod observe;
pub mod plan;
pub mod render;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{Api, ListParams, Patch, PatchParams, ResourceExt};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use serde_json::json;

use self::observe::Observed;
use self::plan::{
    Claim, Cluster, Host, CLUSTER_NAMESPACE_LABEL, CLUSTER_NAME_LABEL, NODE_TYPE_LABEL,
    STANDBY_LABEL,
};
pub use self::plan::{OWNERSHIP, OWNER_LABEL};
use super::common::report::{report, Headline};
use super::common::set_condition;
use super::common::{apply_status, publish, scoped_api, Base, Error, Owned};
use super::common::{every, run as run_controller, Reconciler};
use super::settings::Settings;
use crate::crd::metal3::BareMetalHost;
use crate::crd::sip::{
    Replacement, RoleHosts, SIPCluster, SIPClusterStatus, ServiceEndpoint, SkippedHost,
};
use crate::metrics::Metrics;

/// Airship SIP's own finalizer, which its published SIPClusters carry.
pub const FINALIZER: &str = "sip.airship.airshipit.org/finalizer";
/// The finalizer Foothold's SIP set before it took Airship's.
pub const FORMER_FINALIZER: &str = "sip.airshipit.org/finalizer";
const REPLACEMENTS_KEPT: usize = 20;
/// Most skipped hosts the status lists (a large pool could otherwise bloat the object).
const SKIPPED_KEPT: usize = 50;

struct Ctx {
    base: Base,
}

/// Runs the SIPCluster controller until it is dropped.
pub async fn run(client: kube::Client, settings: Arc<Settings>, metrics: Arc<Metrics>) {
    let ns = &settings.namespace;
    let sips: Api<SIPCluster> = scoped_api(&client, ns);
    let hosts: Api<BareMetalHost> = scoped_api(&client, ns);
    let owned = watcher::Config::default().labels(OWNER_LABEL);
    let ctx = Arc::new(Ctx {
        base: Base::new("sip", client.clone(), settings.clone(), metrics),
    });
    let controller = Controller::new(sips, watcher::Config::default())
        .with_config(controller::Config::default().concurrency(1));
    let store = controller.store();
    let controller = controller
        .owns(scoped_api::<Deployment>(&client, ns), owned.clone())
        .owns(scoped_api::<Service>(&client, ns), owned.clone())
        .owns(scoped_api::<Secret>(&client, ns), owned.clone())
        .owns(scoped_api::<ConfigMap>(&client, ns), owned)
        // Any host change may free, fail or fit a host for any SIPCluster.
        .watches(
            hosts,
            watcher::Config::default(),
            move |_: BareMetalHost| every(&store, |_| true),
        );
    run_controller(controller, ctx).await;
}

impl Reconciler for Ctx {
    type Object = SIPCluster;
    const FINALIZER: &'static str = FINALIZER;
    const FORMER_FINALIZERS: &'static [&'static str] = &[FORMER_FINALIZER];

    fn base(&self) -> &Base {
        &self.base
    }

    async fn apply(&self, sip: &SIPCluster, ns: &str) -> Result<Action, Error> {
        let ctx = self;
        let name = sip.name_any();
        let old = sip.status.clone().unwrap_or_default();
        let mut status = SIPClusterStatus {
            conditions: old.conditions.clone(),
            replacements: old.replacements.clone(),
            ..SIPClusterStatus::default()
        };
        if old.observed_generation != sip.metadata.generation {
            let progressing = SIPClusterStatus {
                conditions: old.conditions.clone(),
                ..old.clone()
            };
            let message = format!(
                "scheduling hosts and services for generation {}",
                sip.metadata.generation.unwrap_or(0)
            );
            write_status(sip, ns, ctx, progressing, false, "Progressing", &message).await?;
        }
        let observed = observe::hosts(&ctx.base.client, &ctx.base.settings).await?;
        let hosts: Vec<Host> = observed.iter().map(observe::planner_host).collect();
        let cluster = Cluster {
            namespace: ns,
            name: &name,
            nodes: &sip.spec.nodes,
            confirmed: &old.hosts,
        };
        let plan = plan::plan(&cluster, &hosts);
        status.skipped_hosts = plan
            .skipped
            .iter()
            .take(SKIPPED_KEPT)
            .map(|(name, reason)| SkippedHost {
                name: name.clone(),
                reason: reason.clone(),
            })
            .collect();

        // Labels: releases first, so a host moving between roles is never claimed twice.
        let by_name: BTreeMap<String, &Observed> = observed
            .iter()
            .map(|o| (observe::qualified(&o.bmh), o))
            .collect();
        let mut label_result = Ok(());
        for host in &plan.releases {
            if let Some(o) = by_name.get(host) {
                label_result = label(ctx, &o.bmh, release_labels()).await;
                if label_result.is_err() {
                    break;
                }
            }
        }
        if label_result.is_ok() {
            for (host, claim) in &plan.claims {
                label_result = label(ctx, &by_name[host].bmh, claim_labels(claim)).await;
                if label_result.is_err() {
                    break;
                }
            }
        }
        if let Err(e) = label_result {
            // A host changed since it was read (409) is simply re-planned; anything else is reported.
            if !matches!(&e, Error::Kube(kube::Error::Api(s)) if s.code == 409) {
                status.hosts = old.hosts.clone();
                write_status(
                    sip,
                    ns,
                    ctx,
                    status,
                    false,
                    "UnableToApplyLabels",
                    &e.to_string(),
                )
                .await?;
            }
            return Err(e);
        }
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        for (host, by) in &plan.replaced {
            let message = match by {
                Some(b) => format!("host {host} failed or disappeared; standby {b} replaces it"),
                None => format!("host {host} failed or disappeared; no standby could replace it"),
            };
            publish(
                &ctx.base.recorder,
                sip,
                EventType::Warning,
                "HostReplaced",
                &message,
            )
            .await;
            status.replacements.push(Replacement {
                host: host.clone(),
                replaced_by: by.clone(),
                time: now.clone(),
            });
        }
        let excess = status.replacements.len().saturating_sub(REPLACEMENTS_KEPT);
        status.replacements.drain(..excess);
        status.hosts = plan.roles.clone();

        if !plan.unschedulable.is_empty() {
            status.endpoints = old.endpoints.clone();
            let message = plan.unschedulable.join("; ");
            write_status(sip, ns, ctx, status, false, "Unschedulable", &message).await?;
            return Ok(Action::requeue(Duration::from_secs(300)));
        }

        match apply_services(sip, ns, ctx, &plan.roles, &by_name).await {
            Ok(Ok(endpoints)) => {
                status.endpoints = endpoints;
                let counts: Vec<String> = plan
                    .roles
                    .iter()
                    .map(|(r, h)| {
                        format!(
                            "{r}: {} active, {} standby",
                            h.active.len(),
                            h.standby.len()
                        )
                    })
                    .collect();
                write_status(
                    sip,
                    ns,
                    ctx,
                    status,
                    true,
                    "ReconciliationSucceeded",
                    &counts.join("; "),
                )
                .await?;
                Ok(Action::requeue(Duration::from_secs(300)))
            }
            Ok(Err(message)) => {
                status.endpoints = old.endpoints.clone();
                write_status(sip, ns, ctx, status, false, "InfraServiceFailure", &message).await?;
                Ok(Action::requeue(Duration::from_secs(300)))
            }
            Err(e) => {
                status.endpoints = old.endpoints.clone();
                write_status(
                    sip,
                    ns,
                    ctx,
                    status,
                    false,
                    "InfraServiceFailure",
                    &e.to_string(),
                )
                .await?;
                Err(e)
            }
        }
    }

    /// Removes this cluster's labels from every host it holds and every service object, before the finalizer goes.
    async fn cleanup(&self, sip: &SIPCluster, ns: &str) -> Result<Action, Error> {
        let ctx = self;
        let name = sip.name_any();
        let result = async {
            let hosts: Api<BareMetalHost> = match &ctx.base.settings.namespace {
                Some(n) => Api::namespaced(ctx.base.client.clone(), n),
                None => Api::all(ctx.base.client.clone()),
            };
            let held = hosts
                .list(&ListParams::default().labels(&format!(
                    "{CLUSTER_NAME_LABEL}={name},{CLUSTER_NAMESPACE_LABEL}={ns}"
                )))
                .await?
                .items;
            for h in &held {
                label(ctx, h, release_labels()).await?;
            }
            prune(&Owned::new(&ctx.base.client, OWNERSHIP, sip, ns)).await?;
            Ok::<usize, Error>(held.len())
        }
        .await;
        match result {
            Ok(released) => {
                publish(
                    &ctx.base.recorder,
                    sip,
                    EventType::Normal,
                    "Decommissioned",
                    &format!("released {released} hosts and removed the services"),
                )
                .await;
                Ok(Action::await_change())
            }
            Err(e) => {
                let mut status = sip.status.clone().unwrap_or_default();
                set_condition(
                    &mut status.conditions,
                    "Ready",
                    false,
                    "UnableToDecommission",
                    &e.to_string(),
                    sip.metadata.generation,
                );
                let _ = apply_status(
                    &Api::<SIPCluster>::namespaced(ctx.base.client.clone(), ns),
                    &name,
                    &status,
                )
                .await;
                Err(e)
            }
        }
    }
}

/// Writes `labels` (null removes) on `bmh`, only if it is unchanged since it was read.
async fn label(ctx: &Ctx, bmh: &BareMetalHost, labels: serde_json::Value) -> Result<(), Error> {
    let api: Api<BareMetalHost> = Api::namespaced(
        ctx.base.client.clone(),
        &bmh.namespace().unwrap_or_default(),
    );
    api.patch(
        &bmh.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {
            "resourceVersion": bmh.resource_version(),
            "labels": labels,
        }})),
    )
    .await?;
    Ok(())
}

fn claim_labels(c: &Claim) -> serde_json::Value {
    json!({
        CLUSTER_NAMESPACE_LABEL: c.namespace,
        CLUSTER_NAME_LABEL: c.cluster,
        NODE_TYPE_LABEL: c.role,
        STANDBY_LABEL: if c.standby { Some("true") } else { None },
    })
}

fn release_labels() -> serde_json::Value {
    json!({CLUSTER_NAMESPACE_LABEL: null, CLUSTER_NAME_LABEL: null, NODE_TYPE_LABEL: null, STANDBY_LABEL: null})
}

/// Sets the `Ready` condition and writes the status if it changed.
async fn write_status(
    sip: &SIPCluster,
    ns: &str,
    ctx: &Ctx,
    mut status: SIPClusterStatus,
    ready: bool,
    reason: &str,
    message: &str,
) -> Result<(), Error> {
    let generation = sip.metadata.generation;
    status.observed_generation = generation;
    set_condition(
        &mut status.conditions,
        "Ready",
        ready,
        reason,
        message,
        generation,
    );
    let old = sip.status.clone().unwrap_or_default();
    let old_reason = old
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason.as_str());
    report(
        &ctx.base,
        sip,
        ns,
        Headline {
            before: old_reason,
            now: reason,
            warning: !(ready || reason == "Progressing"),
            note: message,
        },
        &status,
    )
    .await?;
    Ok(())
}

/// Applies the services' objects (Secrets and ConfigMaps before the Deployments that mount them) and prunes
/// the ones of services no longer in the spec. `Ok(Err(_))`: the spec or the hosts' data cannot make them.
async fn apply_services(
    sip: &SIPCluster,
    ns: &str,
    ctx: &Ctx,
    roles: &BTreeMap<String, RoleHosts>,
    by_name: &BTreeMap<String, &Observed>,
) -> Result<Result<Vec<ServiceEndpoint>, String>, Error> {
    let client = &ctx.base.client;
    let auth = observe::auth_secrets(client, sip, ns).await?;
    let desired = match render::services(sip, ns, roles, by_name, &auth) {
        Ok(d) => d,
        Err(invalid) => return Ok(Err(invalid)),
    };
    let mut owned = Owned::new(client, OWNERSHIP, sip, ns);
    for o in desired.secrets {
        owned.apply(o).await?;
    }
    for o in desired.config_maps {
        owned.apply(o).await?;
    }
    for o in desired.deployments {
        owned.apply(o).await?;
    }
    for o in desired.services {
        owned.apply(o).await?;
    }
    prune(&owned).await?;
    Ok(Ok(desired.endpoints))
}

/// Deletes the SIPCluster's service objects that `owned` did not apply: those of services no longer in the
/// spec, or all of them for a tracker that applied nothing. Services and Deployments before the Secrets and
/// ConfigMaps they use.
async fn prune(owned: &Owned<'_, SIPCluster>) -> Result<(), Error> {
    owned.prune::<Service>().await?;
    owned.prune::<Deployment>().await?;
    owned.prune::<ConfigMap>().await?;
    owned.prune::<Secret>().await?;
    Ok(())
}

#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod reconcile_tests;
#[cfg(test)]
mod render_tests;
