//! The SIP reconciler for `SIPCluster` (airship.airshipit.org/v1): observe (the SIPCluster, BareMetalHosts
//! with their networkData and BMC credential Secrets), plan (`sip_plan`, pure), apply (claim labels with a
//! resourceVersion precondition, then the cluster's services, then status). One SIPCluster at a time
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

pub mod plan;
pub mod render;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{Api, ListParams, Patch, PatchParams, ResourceExt};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use serde_json::json;

use self::plan::{
    Claim, Cluster, Host, CLUSTER_NAMESPACE_LABEL, CLUSTER_NAME_LABEL, NODE_TYPE_LABEL,
    STANDBY_LABEL,
};
use self::render::Node;
use super::common::document::json_or_yaml;
use super::common::report::{report, Headline};
use super::common::secrets;
use super::common::{
    self, apply_status, delete_owned, owned_meta, publish, scoped_api, server_side_apply, Base,
    Error,
};
use super::common::{child_name, set_condition};
use super::common::{every, run as run_controller, Reconciler};
use super::settings::Settings;
use crate::crd::metal3::BareMetalHost;
use crate::crd::sip::{
    Auth, JumpHost, Replacement, RoleHosts, SIPCluster, SIPClusterStatus, ServiceCommon,
    ServiceEndpoint, SkippedHost,
};
use crate::metrics::Metrics;

pub const FINALIZER: &str = "sip.airshipit.org/finalizer";
/// On every service object: the SIPCluster's name.
pub const OWNER_LABEL: &str = "sip.airshipit.org/sipcluster";
/// On every service's pods: which service they run.
const SERVICE_LABEL: &str = "sip.airshipit.org/service";
/// The tenant Kubernetes API port the control-plane load balancer forwards to.
const API_PORT: u16 = 6443;
/// Most ports one worker load balancer forwards.
const MAX_WORKER_PORTS: i32 = 200;
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
        let observed = observe(ctx).await?;
        let hosts: Vec<Host> = observed.iter().map(planner_host).collect();
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
        let by_name: BTreeMap<String, &Observed> =
            observed.iter().map(|o| (qualified(&o.bmh), o)).collect();
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
            Ok(endpoints) => {
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
            Err(ServiceError::Invalid(message)) => {
                status.endpoints = old.endpoints.clone();
                write_status(sip, ns, ctx, status, false, "InfraServiceFailure", &message).await?;
                Ok(Action::requeue(Duration::from_secs(300)))
            }
            Err(ServiceError::Kube(e)) => {
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
            let client = &ctx.base.client;
            delete_owned(
                &Api::<Service>::namespaced(client.clone(), ns),
                OWNER_LABEL,
                &name,
                None,
            )
            .await?;
            delete_owned(
                &Api::<Deployment>::namespaced(client.clone(), ns),
                OWNER_LABEL,
                &name,
                None,
            )
            .await?;
            delete_owned(
                &Api::<ConfigMap>::namespaced(client.clone(), ns),
                OWNER_LABEL,
                &name,
                None,
            )
            .await?;
            delete_owned(
                &Api::<Secret>::namespaced(client.clone(), ns),
                OWNER_LABEL,
                &name,
                None,
            )
            .await?;
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

/// A BareMetalHost with what its Secrets say.
struct Observed {
    bmh: BareMetalHost,
    network_data: Result<String, String>,
    bmc: Result<Bmc, String>,
}

#[derive(Clone)]
struct Bmc {
    ip: String,
    username: String,
    password: String,
}

fn qualified(bmh: &BareMetalHost) -> String {
    format!("{}/{}", bmh.namespace().unwrap_or_default(), bmh.name_any())
}

async fn observe(ctx: &Ctx) -> Result<Vec<Observed>, Error> {
    let client = &ctx.base.client;
    let (hosts, secrets): (Api<BareMetalHost>, Api<Secret>) = match &ctx.base.settings.namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let hosts = hosts.list(&ListParams::default()).await?.items;
    let namespaces: BTreeSet<String> = hosts.iter().filter_map(|h| h.namespace()).collect();
    let mut by_name: BTreeMap<(String, String), Secret> = BTreeMap::new();
    if !hosts.is_empty() {
        let listed = if namespaces.len() == 1 {
            let only = namespaces.iter().next().expect("one");
            Api::<Secret>::namespaced(client.clone(), only)
                .list(&ListParams::default())
                .await?
                .items
        } else {
            secrets.list(&ListParams::default()).await?.items
        };
        for s in listed {
            by_name.insert((s.namespace().unwrap_or_default(), s.name_any()), s);
        }
    }
    let secret_value = |ns: &str, name: &str, key: &str| {
        secrets::value(
            by_name.get(&(ns.to_owned(), name.to_owned())),
            ns,
            name,
            key,
        )
    };
    Ok(hosts
        .into_iter()
        .map(|bmh| {
            let ns = bmh.namespace().unwrap_or_default();
            let network_data = match bmh.spec.network_data.as_ref().and_then(|r| r.name.clone()) {
                None => Err("no spec.networkData".to_owned()),
                Some(name) => {
                    let sns = bmh
                        .spec
                        .network_data
                        .as_ref()
                        .and_then(|r| r.namespace.clone())
                        .unwrap_or_else(|| ns.clone());
                    secret_value(&sns, &name, "networkData").and_then(|text| {
                        render::parse_network_data(&text)
                            .map(|_| text)
                            .map_err(|e| format!("Secret {sns}/{name}: {e}"))
                    })
                }
            };
            let bmc = match &bmh.spec.bmc {
                None => Err("no spec.bmc".to_owned()),
                Some(b) => render::bmc_host(&b.address).and_then(|ip| {
                    Ok(Bmc {
                        ip,
                        username: secret_value(&ns, &b.credentials_name, "username")?,
                        password: secret_value(&ns, &b.credentials_name, "password")?,
                    })
                }),
            };
            Observed {
                bmh,
                network_data,
                bmc,
            }
        })
        .collect())
}

fn planner_host(o: &Observed) -> Host {
    let status = o.bmh.status.clone().unwrap_or_default();
    let state = status.provisioning.map(|p| p.state).unwrap_or_default();
    let failed = status.operational_status.as_deref() == Some("error")
        || state == "deleting"
        || o.bmh.metadata.deletion_timestamp.is_some();
    let has_network_data = o
        .bmh
        .spec
        .network_data
        .as_ref()
        .is_some_and(|r| r.name.is_some());
    let unreadable = match (&o.network_data, &o.bmc) {
        (Err(e), _) if has_network_data => Some(e.clone()),
        (_, Err(e)) => Some(e.clone()),
        _ => None,
    };
    Host {
        name: qualified(&o.bmh),
        labels: o.bmh.labels().clone(),
        has_network_data,
        state,
        failed,
        unreadable,
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

enum ServiceError {
    /// The spec or the hosts' data cannot make the service; nothing but a change fixes it.
    Invalid(String),
    Kube(Error),
}

impl From<Error> for ServiceError {
    fn from(e: Error) -> Self {
        ServiceError::Kube(e)
    }
}

impl From<kube::Error> for ServiceError {
    fn from(e: kube::Error) -> Self {
        ServiceError::Kube(e.into())
    }
}

/// The objects of the services, by kind.
#[derive(Default)]
struct Desired {
    secrets: Vec<(String, serde_json::Value)>,
    config_maps: Vec<(String, serde_json::Value)>,
    deployments: Vec<(String, serde_json::Value)>,
    services: Vec<(String, serde_json::Value)>,
    endpoints: Vec<ServiceEndpoint>,
}

/// `<sip>-<kind>` for the first service of a kind, `<sip>-<kind>-<i>` for the others.
fn service_name(sip: &str, kind: &str, i: usize) -> String {
    if i == 0 {
        child_name(sip, kind)
    } else {
        child_name(sip, &format!("{kind}-{i}"))
    }
}

/// The nodes of `roles` (active hosts; standbys too when `with_standby`), with their address on `interface`.
fn nodes(
    roles: &[&RoleHosts],
    with_standby: bool,
    by_name: &BTreeMap<String, &Observed>,
    interface: Option<&str>,
    service: &str,
) -> Result<Vec<Node>, ServiceError> {
    let mut out = Vec::new();
    for rh in roles {
        let names = rh
            .active
            .iter()
            .chain(if with_standby { &rh.standby[..] } else { &[] });
        for host in names {
            let o = by_name[host];
            let text = o
                .network_data
                .as_ref()
                .map_err(|e| ServiceError::Invalid(format!("{service}: host {host}: {e}")))?;
            let ip = render::network_data_ip(text, interface)
                .map_err(|e| ServiceError::Invalid(format!("{service}: host {host}: {e}")))?;
            out.push(Node {
                name: o.bmh.name_any(),
                ip,
            });
        }
    }
    Ok(out)
}

fn port(p: i32, what: &str) -> Result<u16, ServiceError> {
    u16::try_from(p)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| ServiceError::Invalid(format!("{what}: port {p} is out of range")))
}

fn config_hash(parts: &[&str]) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..8])
}

#[allow(clippy::too_many_arguments)]
fn deployment(
    sip: &SIPCluster,
    ns: &str,
    name: &str,
    common: &ServiceCommon,
    hash: &str,
    container: serde_json::Value,
    volumes: serde_json::Value,
    host_aliases: serde_json::Value,
) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": owned_meta(sip, OWNER_LABEL, ns, name),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {SERVICE_LABEL: name}},
            "template": {
                "metadata": {
                    "labels": {SERVICE_LABEL: name, OWNER_LABEL: sip.name_any()},
                    // A changed configuration rolls the pods.
                    "annotations": {"sip.airshipit.org/config-hash": hash},
                },
                "spec": {
                    "nodeSelector": common.node_labels,
                    "containers": [container],
                    "volumes": volumes,
                    "hostAliases": host_aliases,
                },
            },
        },
    })
}

fn node_port_service(
    sip: &SIPCluster,
    ns: &str,
    name: &str,
    common: &ServiceCommon,
    ports: &[(u16, Option<u16>)],
) -> serde_json::Value {
    let mut spec = json!({
        "type": "NodePort",
        "selector": {SERVICE_LABEL: name},
        "ports": ports.iter().map(|(port, node_port)| {
            let mut p = json!({"name": format!("p{port}"), "port": port, "targetPort": port, "protocol": "TCP"});
            if let Some(np) = node_port {
                p["nodePort"] = json!(np);
            }
            p
        }).collect::<Vec<_>>(),
    });
    if let Some(ip) = &common.cluster_ip {
        spec["clusterIP"] = json!(ip);
    }
    json!({"apiVersion": "v1", "kind": "Service", "metadata": owned_meta(sip, OWNER_LABEL, ns, name), "spec": spec})
}

fn endpoint(
    service: &str,
    name: &str,
    ns: &str,
    port: u16,
    node_ports: Vec<i32>,
) -> ServiceEndpoint {
    ServiceEndpoint {
        service: service.into(),
        address: format!("{name}.{ns}.svc:{port}"),
        node_ports,
    }
}

async fn apply_services(
    sip: &SIPCluster,
    ns: &str,
    ctx: &Ctx,
    roles: &BTreeMap<String, RoleHosts>,
    by_name: &BTreeMap<String, &Observed>,
) -> Result<Vec<ServiceEndpoint>, ServiceError> {
    let desired = desired_services(sip, ns, ctx, roles, by_name).await?;
    let client = &ctx.base.client;
    let owner = sip.name_any();
    // Secrets and ConfigMaps before the Deployments that mount them.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    for (name, body) in &desired.secrets {
        server_side_apply(&secrets, name, body.clone()).await?;
    }
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for (name, body) in &desired.config_maps {
        server_side_apply(&maps, name, body.clone()).await?;
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    for (name, body) in &desired.deployments {
        server_side_apply(&deployments, name, body.clone()).await?;
    }
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    for (name, body) in &desired.services {
        server_side_apply(&services, name, body.clone()).await?;
    }
    // Objects of services no longer in the spec go.
    prune(&services, &owner, &desired.services).await?;
    prune(&deployments, &owner, &desired.deployments).await?;
    prune(&maps, &owner, &desired.config_maps).await?;
    prune(&secrets, &owner, &desired.secrets).await?;
    Ok(desired.endpoints)
}

async fn prune<K>(
    api: &Api<K>,
    owner: &str,
    keep: &[(String, serde_json::Value)],
) -> Result<(), Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + kube::Resource,
{
    for obj in api
        .list(&ListParams::default().labels(&format!("{OWNER_LABEL}={owner}")))
        .await?
        .items
    {
        let n = obj.name_any();
        if !keep.iter().any(|(k, _)| *k == n) {
            common::delete_ignoring_missing(api, &n).await?;
        }
    }
    Ok(())
}

async fn desired_services(
    sip: &SIPCluster,
    ns: &str,
    ctx: &Ctx,
    roles: &BTreeMap<String, RoleHosts>,
    by_name: &BTreeMap<String, &Observed>,
) -> Result<Desired, ServiceError> {
    let sip_name = sip.name_any();
    let none = RoleHosts::default();
    let cp = roles.get("ControlPlane").unwrap_or(&none);
    let workers = roles.get("Worker").unwrap_or(&none);
    let mut d = Desired::default();
    let secret = |sip: &SIPCluster, name: &str, data: serde_json::Value| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": owned_meta(sip, OWNER_LABEL, ns, name),
               "type": "Opaque", "stringData": data})
    };

    for (i, lb) in sip
        .spec
        .services
        .load_balancer_control_plane
        .iter()
        .enumerate()
    {
        let name = service_name(&sip_name, "lb-control-plane", i);
        let listen = port(lb.node_port, &name)?;
        let nodes = nodes(
            &[cp],
            false,
            by_name,
            lb.common.node_interface_id.as_deref(),
            &name,
        )?;
        let cfg = render::haproxy_control_plane(&nodes, listen, API_PORT);
        d.secrets.push((
            name.clone(),
            secret(sip, &name, json!({"haproxy.cfg": cfg})),
        ));
        d.deployments.push((
            name.clone(),
            haproxy_deployment(sip, ns, &name, &lb.common, &cfg, &[listen]),
        ));
        d.services.push((
            name.clone(),
            node_port_service(sip, ns, &name, &lb.common, &[(listen, Some(listen))]),
        ));
        d.endpoints.push(endpoint(
            "loadBalancerControlPlane",
            &name,
            ns,
            listen,
            vec![lb.node_port],
        ));
    }
    for (i, lb) in sip.spec.services.load_balancer_worker.iter().enumerate() {
        let name = service_name(&sip_name, "lb-worker", i);
        let (start, end) = (lb.node_port_range.start, lb.node_port_range.end);
        if end < start || end - start >= MAX_WORKER_PORTS {
            return Err(ServiceError::Invalid(format!(
                "{name}: nodePortRange {start}-{end} must be ascending and span at most {MAX_WORKER_PORTS} ports"
            )));
        }
        let (s, e) = (port(start, &name)?, port(end, &name)?);
        let nodes = nodes(
            &[workers],
            false,
            by_name,
            lb.common.node_interface_id.as_deref(),
            &name,
        )?;
        let cfg = render::haproxy_workers(&nodes, s, e);
        let ports: Vec<u16> = (s..=e).collect();
        d.secrets.push((
            name.clone(),
            secret(sip, &name, json!({"haproxy.cfg": cfg})),
        ));
        d.deployments.push((
            name.clone(),
            haproxy_deployment(sip, ns, &name, &lb.common, &cfg, &ports),
        ));
        let svc_ports: Vec<(u16, Option<u16>)> = ports.iter().map(|p| (*p, Some(*p))).collect();
        d.services.push((
            name.clone(),
            node_port_service(sip, ns, &name, &lb.common, &svc_ports),
        ));
        d.endpoints.push(endpoint(
            "loadBalancerWorker",
            &name,
            ns,
            s,
            (start..=end).collect(),
        ));
    }
    for (i, jh) in sip.spec.services.jump_host.iter().enumerate() {
        let name = service_name(&sip_name, "jump-host", i);
        jump_host(sip, ns, &name, jh, &[cp, workers], by_name, &mut d)?;
    }
    for (i, auth) in sip.spec.services.auth.iter().enumerate() {
        let name = service_name(&sip_name, "auth", i);
        dex(sip, ns, ctx, &name, auth, &mut d).await?;
    }
    Ok(d)
}

fn haproxy_deployment(
    sip: &SIPCluster,
    ns: &str,
    name: &str,
    common: &ServiceCommon,
    cfg: &str,
    ports: &[u16],
) -> serde_json::Value {
    deployment(
        sip,
        ns,
        name,
        common,
        &config_hash(&[cfg]),
        json!({
            "name": "haproxy",
            "image": common.image,
            "ports": ports.iter().map(|p| json!({"containerPort": p, "protocol": "TCP"})).collect::<Vec<_>>(),
            "volumeMounts": [{"name": "config", "mountPath": "/usr/local/etc/haproxy", "readOnly": true}],
        }),
        json!([{"name": "config", "secret": {"secretName": name}}]),
        json!([]),
    )
}

fn jump_host(
    sip: &SIPCluster,
    ns: &str,
    name: &str,
    jh: &JumpHost,
    roles: &[&RoleHosts],
    by_name: &BTreeMap<String, &Observed>,
    d: &mut Desired,
) -> Result<(), ServiceError> {
    let nodes = nodes(
        roles,
        true,
        by_name,
        jh.common.node_interface_id.as_deref(),
        name,
    )?;
    let mut hosts = Vec::new();
    for rh in roles {
        for host in rh.active.iter().chain(&rh.standby) {
            let o = by_name[host];
            let bmc = o
                .bmc
                .as_ref()
                .map_err(|e| ServiceError::Invalid(format!("{name}: host {host}: {e}")))?;
            hosts.push(json!({"name": o.bmh.name_any(),
                              "bmc": {"ip": bmc.ip, "username": bmc.username, "password": bmc.password}}));
        }
    }
    let hosts = serde_json::to_string_pretty(&hosts).expect("JSON values serialize");
    let ssh_config = render::ssh_config(&nodes, "root", "/etc/foothold/ssh/id_rsa");
    let keys = jh
        .ssh_authorized_keys
        .iter()
        .map(|k| format!("{}\n", k.trim()))
        .collect::<String>();
    let keys_name = child_name(name, "keys");
    d.secrets.push((
        name.to_owned(),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": owned_meta(sip, OWNER_LABEL, ns, name),
               "type": "Opaque", "stringData": {"hosts": hosts, "ssh_config": ssh_config}}),
    ));
    d.config_maps.push((
        keys_name.clone(),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": owned_meta(sip, OWNER_LABEL, ns, &keys_name),
               "data": {"authorized_keys": keys}}),
    ));
    let mut volumes = vec![
        json!({"name": "jump", "secret": {"secretName": name, "defaultMode": 0o400}}),
        json!({"name": "keys", "configMap": {"name": keys_name}}),
    ];
    let mut mounts = vec![
        json!({"name": "jump", "mountPath": "/etc/foothold/jump", "readOnly": true}),
        json!({"name": "keys", "mountPath": "/etc/foothold/authorized_keys", "readOnly": true}),
    ];
    if let Some(private) = &jh.node_ssh_private_keys {
        volumes
            .push(json!({"name": "ssh", "secret": {"secretName": private, "defaultMode": 0o400}}));
        mounts.push(json!({"name": "ssh", "mountPath": "/etc/foothold/ssh", "readOnly": true}));
    }
    let aliases: Vec<serde_json::Value> = nodes
        .iter()
        .map(|n| json!({"ip": n.ip.to_string(), "hostnames": [n.name]}))
        .collect();
    let bmc_proxy = jh.bmc.as_ref().is_some_and(|b| b.proxy);
    d.deployments.push((
        name.to_owned(),
        deployment(
            sip,
            ns,
            name,
            &jh.common,
            &config_hash(&[&hosts, &ssh_config, &keys]),
            json!({
                "name": "jump-host",
                "image": jh.common.image,
                "env": [{"name": "BMC_PROXY", "value": bmc_proxy.to_string()}],
                "ports": [{"containerPort": 22, "protocol": "TCP"}],
                "volumeMounts": mounts,
            }),
            json!(volumes),
            json!(aliases),
        ),
    ));
    let node_port = jh.node_port.map(|p| port(p, name)).transpose()?;
    d.services.push((
        name.to_owned(),
        node_port_service(sip, ns, name, &jh.common, &[(22, node_port)]),
    ));
    d.endpoints.push(endpoint(
        "jumpHost",
        name,
        ns,
        22,
        jh.node_port.into_iter().collect(),
    ));
    Ok(())
}

#[derive(serde::Deserialize)]
struct StaticUser {
    email: String,
    hash: String,
    #[serde(default)]
    username: Option<String>,
}

/// Dex's configuration from the spec: the static connector's users come from their Secret (key `users`, a
/// list of `{email, hash, username}`), the LDAP bind password from its Secret.
async fn dex(
    sip: &SIPCluster,
    ns: &str,
    ctx: &Ctx,
    name: &str,
    auth: &Auth,
    d: &mut Desired,
) -> Result<(), ServiceError> {
    const DEX_PORT: u16 = 5556;
    let client = &ctx.base.client;
    let invalid = |why: String| ServiceError::Invalid(format!("{name}: {why}"));
    let tls = auth.ca_secret.is_some();
    let issuer = auth.issuer.clone().unwrap_or_else(|| {
        format!(
            "{}://{name}.{ns}.svc:{DEX_PORT}/dex",
            if tls { "https" } else { "http" }
        )
    });
    let mut config = json!({
        "issuer": issuer,
        "storage": {"type": "memory"},
        "oauth2": {"skipApprovalScreen": true},
        "web": if tls {
            json!({"https": format!("0.0.0.0:{DEX_PORT}"), "tlsCert": "/etc/dex/tls/tls.crt", "tlsKey": "/etc/dex/tls/tls.key"})
        } else {
            json!({"http": format!("0.0.0.0:{DEX_PORT}")})
        },
        "connectors": [],
    });
    if let Some(st) = &auth.static_connector {
        let what = format!("{name}: Secret {ns}/{} key users", st.users_secret);
        let text = secrets::read(client, ns, &st.users_secret, "users")
            .await?
            .map_err(invalid)?;
        let users: Vec<StaticUser> = json_or_yaml(&text).map_err(|e| {
            ServiceError::Invalid(format!(
                "{what}: not a list of {{email, hash, username}}: {e}"
            ))
        })?;
        config["enablePasswordDB"] = json!(true);
        config["staticPasswords"] = json!(users
            .iter()
            .map(|u| {
                let username = u
                    .username
                    .clone()
                    .unwrap_or_else(|| u.email.split('@').next().unwrap_or(&u.email).to_owned());
                json!({"email": u.email, "hash": u.hash.trim(), "username": username,
                       "userID": config_hash(&[&u.email])})
            })
            .collect::<Vec<_>>());
    }
    if let Some(ldap) = &auth.ldap {
        let password = match &ldap.bind_password_secret {
            Some(s) => secrets::read(client, ns, s, "password")
                .await?
                .map_err(invalid)?,
            None => String::new(),
        };
        let mut c = json!({
            "host": ldap.host, "insecureNoSSL": ldap.insecure_no_ssl,
            "userSearch": {"baseDN": ldap.user_base_dn, "filter": ldap.user_filter.clone().unwrap_or_default(),
                           "username": "uid", "idAttr": "uid", "emailAttr": "mail", "nameAttr": "cn"},
        });
        if let Some(dn) = &ldap.bind_dn {
            c["bindDN"] = json!(dn);
            c["bindPW"] = json!(password);
        }
        if let Some(g) = &ldap.group_base_dn {
            c["groupSearch"] = json!({"baseDN": g, "filter": "(objectClass=groupOfNames)",
                "userMatchers": [{"userAttr": "DN", "groupAttr": "member"}], "nameAttr": "cn"});
        }
        config["connectors"] = json!([{"type": "ldap", "id": "ldap", "name": "LDAP", "config": c}]);
    }
    // JSON is YAML: Dex reads it as its config.yaml.
    let config = serde_json::to_string_pretty(&config).expect("JSON values serialize");
    d.secrets.push((
        name.to_owned(),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": owned_meta(sip, OWNER_LABEL, ns, name),
               "type": "Opaque", "stringData": {"config.yaml": config}}),
    ));
    let mut volumes = vec![json!({"name": "config", "secret": {"secretName": name}})];
    let mut mounts = vec![json!({"name": "config", "mountPath": "/etc/dex/cfg", "readOnly": true})];
    if let Some(ca) = &auth.ca_secret {
        volumes.push(json!({"name": "tls", "secret": {"secretName": ca}}));
        mounts.push(json!({"name": "tls", "mountPath": "/etc/dex/tls", "readOnly": true}));
    }
    d.deployments.push((
        name.to_owned(),
        deployment(
            sip,
            ns,
            name,
            &auth.common,
            &config_hash(&[&config]),
            json!({
                "name": "dex",
                "image": auth.common.image,
                "args": ["dex", "serve", "/etc/dex/cfg/config.yaml"],
                "ports": [{"containerPort": DEX_PORT, "protocol": "TCP"}],
                "volumeMounts": mounts,
            }),
            json!(volumes),
            json!([]),
        ),
    ));
    let node_port = auth.node_port.map(|p| port(p, name)).transpose()?;
    d.services.push((
        name.to_owned(),
        node_port_service(sip, ns, name, &auth.common, &[(DEX_PORT, node_port)]),
    ));
    d.endpoints.push(endpoint(
        "auth",
        name,
        ns,
        DEX_PORT,
        auth.node_port.into_iter().collect(),
    ));
    Ok(())
}

#[cfg(test)]
mod reconcile_tests;
