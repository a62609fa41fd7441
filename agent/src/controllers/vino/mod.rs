//! The ViNO reconciler for `Vino` (airship.airshipit.org/v1): VMs on the selected Kubernetes nodes, each
//! published as a Metal3 BareMetalHost with a Redfish BMC (sushy-tools on the node).
//!
//! Observe (the credentials, the selected Nodes, flavors, IPPools, templates, VNC passwords: [`observe`]) → plan
//! (VMs and flavors: [`plan`]; addresses: [`ipam`]) → render (typed objects, pure: [`render`]) → apply through
//! the owned-objects tracker, which prunes what is no longer wanted:
//! - IPPool `<vino>-<network>` per network, replaced with its resourceVersion as a precondition;
//! - the BMC credentials Secret (`bmcCredentialsSecret`, or `<vino>-bmc-credentials` copied from the inline
//!   `bmcCredentials`, which the status then reports);
//! - a ConfigMap `<vino>-node-<node>` per node with the node's VM plan (`plan.json`) for `vino-builder`;
//! - a Secret `<vino>-vnc` with a generated password per VNC-enabled VM (key: the VM name), kept across
//!   reconciles;
//! - the DaemonSet (libvirt, sushy-tools and vino-builder) on the selected nodes, with a ServiceAccount whose
//!   Role lets `vino-builder` read and annotate the plans and read the VNC Secret;
//! - per VM a BareMetalHost `<ns>-<vino>-<node>-<nodeset>-<i>` with `<bmh>-credentials` and
//!   `<bmh>-network-data` Secrets.
//!
//! Objects no longer planned (a node set scaled down, a node unlabelled) are deleted and their addresses
//! released — except a VM a node set's count left out whose BareMetalHost runs a node of a Provisioning's
//! cluster (`bpa::hold`): it stays, with its host and address, while the host is annotated
//! `bpa.akraino.org/drain` and the BPA drains the node (condition `ScaledDown`, Event `DrainRequested`), and
//! goes once the host is marked drained; deleting the Vino removes everything (finalizer `vino.airshipit.org`),
//! once every such host is drained alike. Readiness of the DaemonSet
//! comes from watching it.
//!
//! networkData templates (`nodes[].networkDataTemplate`: a Secret, key `template`) are Airship's — Go's
//! text/template with sprig ([`crate::gotmpl`]) over the values [`airship::template_values`] gives — or
//! Foothold's minijinja templates with the variables `name` (the BareMetalHost), `node`, `vm`, and
//! `interfaces`: a list of `{name, network, mac, ip, prefix_length, type, mtu, dns_servers, routes}` (`routes`:
//! `{network, netmask, gateway}`); [`crate::gotmpl::is_go_template`] tells them apart. Without a template the
//! networkData is OpenStack network_data JSON with a link and a network per interface.

pub mod airship;
pub mod ipam;
pub mod observe;
pub mod plan;
pub mod render;

pub use self::plan::{
    bmc_address, plan_vms, render_network_data, resolve_flavor, Vm, NODE_LABEL, OWNERSHIP,
    OWNER_LABEL, REDFISH_PORT, STATUS_ANNOTATION,
};

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams, ResourceExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;

use self::render::{PoolChange, PoolWrite};
use super::bpa::hold::{DRAINED_ANNOTATION, DRAIN_ANNOTATION};
use super::common::report::{report, Headline};
use super::common::{apply_account, publish, scoped_api, set_conditions, Base, Error, Owned};
use super::common::{every, run as run_controller, Reconciler};
use super::settings::Settings;
use crate::crd::metal3::BareMetalHost;
use crate::crd::vino::{IPPool, Vino, VinoStatus};
use crate::metrics::Metrics;

pub const FINALIZER: &str = "vino.airshipit.org";
/// The Vino CRD under the plural Foothold used before it took Airship's (`vinoes`).
pub const FORMER_CRD: &str = "vinos.airship.airshipit.org";

/// Why the controller does not start while [`FORMER_CRD`] is installed, and how to move its objects.
pub fn former_crd_refusal() -> String {
    format!(
        "ViNO not started: the CRD {FORMER_CRD} (Foothold's former plural) is installed, and Vino is now served \
         as vinoes.airship.airshipit.org, Airship's name; the two cannot both serve kind Vino. Move the Vinos \
         (docs/controllers.md, \"Moving Vinos to vinoes\"): save them (kubectl get vinos -A -o yaml), remove their \
         finalizers and delete each with --cascade=orphan (its BareMetalHosts, IPPools and Secrets stay), delete \
         the CRD {FORMER_CRD}, apply foothold-agent crds, create the saved Vinos again; then restart the agent"
    )
}

struct Ctx {
    base: Base,
}

/// Runs the Vino controller until it is dropped.
pub async fn run(client: kube::Client, settings: Arc<Settings>, metrics: Arc<Metrics>) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.get_opt(FORMER_CRD).await {
        Ok(None) => {}
        Ok(Some(_)) => {
            tracing::error!("{}", former_crd_refusal());
            metrics.reconcile_error("vino", "former-crd");
            return std::future::pending().await;
        }
        // Without the right to read CRDs (an agent in a cluster with narrow RBAC) there is nothing to check.
        Err(error) => tracing::warn!(%error, "ViNO: could not check for the CRD {FORMER_CRD}"),
    }
    let ns = &settings.namespace;
    let owned = watcher::Config::default().labels(OWNER_LABEL);
    let ctx = Arc::new(Ctx {
        base: Base::new("vino", client.clone(), settings.clone(), metrics),
    });
    let controller = Controller::new(scoped_api::<Vino>(&client, ns), watcher::Config::default());
    let store = controller.store();
    let controller = controller
        .owns(scoped_api::<DaemonSet>(&client, ns), owned.clone())
        .owns(scoped_api::<BareMetalHost>(&client, ns), owned.clone())
        .owns(scoped_api::<ConfigMap>(&client, ns), owned.clone())
        .owns(scoped_api::<IPPool>(&client, ns), owned)
        // A node labelled, unlabelled or readdressed changes every Vino's plan.
        .watches(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            move |_: Node| every(&store, |_| true),
        );
    run_controller(controller, ctx).await;
}

impl Reconciler for Ctx {
    type Object = Vino;
    const FINALIZER: &'static str = FINALIZER;

    fn base(&self) -> &Base {
        &self.base
    }

    async fn apply(&self, vino: &Vino, ns: &str) -> Result<Action, Error> {
        let ctx = self;
        let generation = vino.metadata.generation.unwrap_or(0);
        let old = vino.status.clone().unwrap_or_default();
        let mut status = VinoStatus {
            conditions: old.conditions.clone(),
            observed_generation: Some(generation),
            ..VinoStatus::default()
        };
        let result = realise(vino, ns, ctx, &mut status).await;
        let (ready, reason, message) = match &result {
            Ok(Ok(ready_ds)) => {
                if *ready_ds {
                    (
                        true,
                        "Ready",
                        "the DaemonSet is ready and every VM is published".to_owned(),
                    )
                } else {
                    (
                        false,
                        "DaemonSetNotReady",
                        "waiting for the DaemonSet".to_owned(),
                    )
                }
            }
            Ok(Err(Invalid(m))) => (false, "InvalidSpec", m.clone()),
            Err(e) => (false, "ReconcileError", e.to_string()),
        };
        set_conditions(
            &mut status.conditions,
            generation,
            &[("Ready", ready, reason, &message)],
        );
        let old_reason = old
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.reason.as_str());
        report(
            &ctx.base,
            vino,
            ns,
            Headline {
                before: old_reason,
                now: reason,
                warning: !(ready || reason == "DaemonSetNotReady"),
                note: &message,
            },
            &status,
        )
        .await?;
        // A spec that cannot be realised waits for a change (or the periodic requeue); API errors back off.
        result.map(|_| Action::requeue(Duration::from_secs(300)))
    }

    /// Removes every object of the Vino (it does not rely on a garbage collector), its address pools included —
    /// once each node's builder has removed its VMs: the plans are emptied first, and the DaemonSet (and the
    /// builders' account) stay until every builder reports the empty plan applied, or [`DRAIN_TIMEOUT`] after
    /// the deletion for a builder that never answers (its node gone), with a warning naming those nodes.
    async fn cleanup(&self, vino: &Vino, ns: &str) -> Result<Action, Error> {
        let ctx = self;
        // A VM whose host runs a node of a Provisioning's cluster goes only once that node is drained.
        let (held, asked) = observe::held(&ctx.base.client, &vino.name_any(), ns).await?;
        if !held.is_empty() {
            let held: Vec<String> = held.into_iter().collect();
            drain_leaving(ctx, vino, ns, &held, &asked).await?;
            return Err(Error::Pending {
                what: format!(
                    "the nodes of BareMetalHost {} to be drained ({DRAINED_ANNOTATION})",
                    held.join(", ")
                ),
                retry: Duration::from_secs(5),
            });
        }
        let waiting = drain_plans(&ctx.base.client, vino, ns).await?;
        if !waiting.is_empty() {
            let deleted_for = vino
                .metadata
                .deletion_timestamp
                .as_ref()
                .and_then(|t| {
                    k8s_openapi::jiff::Timestamp::now()
                        .duration_since(t.0)
                        .try_into()
                        .ok()
                })
                .unwrap_or(Duration::ZERO);
            if deleted_for < DRAIN_TIMEOUT {
                // An error keeps the finalizer: the Vino stays until its builders are done.
                return Err(Error::Pending {
                    what: format!("the builders of {} to remove their VMs", waiting.join(", ")),
                    retry: Duration::from_secs(1),
                });
            }
            publish(
                &ctx.base.recorder,
                vino,
                EventType::Warning,
                "BuildersDidNotDrain",
                &format!(
                    "the builders of {} did not report their VMs removed within {} s; libvirt there may still have them",
                    waiting.join(", "),
                    DRAIN_TIMEOUT.as_secs()
                ),
            )
            .await;
        }
        prune(&Owned::new(&ctx.base.client, OWNERSHIP, vino, ns)).await?;
        publish(
            &ctx.base.recorder,
            vino,
            EventType::Normal,
            "Deleted",
            "removed the VMs' BareMetalHosts, Secrets, plans, DaemonSet and address pools",
        )
        .await;
        Ok(Action::await_change())
    }
}

/// How long a deleted Vino waits for its builders to remove their VMs.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);

/// Empties every node plan of `vino` (no VMs, no networks; the rest of the plan as it was) and returns the
/// nodes whose builder has not yet reported that empty plan applied. A plan no builder ever reported on has
/// nothing built from it to wait for.
async fn drain_plans(client: &kube::Client, vino: &Vino, ns: &str) -> Result<Vec<String>, Error> {
    use kube::api::{ListParams, Patch, PatchParams};
    use sha2::Digest as _;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let selector = format!("{}={},{NODE_LABEL}", OWNERSHIP.owner_label, vino.name_any());
    let mut waiting = Vec::new();
    for cm in maps
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
    {
        let node = cm.labels().get(NODE_LABEL).cloned().unwrap_or_default();
        let Some(text) = cm.data.as_ref().and_then(|d| d.get("plan.json")) else {
            continue;
        };
        let Some(reported) = cm.annotations().get(STATUS_ANNOTATION) else {
            continue;
        };
        let Ok(mut plan) = serde_json::from_str::<serde_json::Value>(text) else {
            continue; // not a plan a builder could have applied
        };
        plan["vms"] = serde_json::json!([]);
        plan["networks"] = serde_json::json!([]);
        let empty = plan.to_string();
        if *text != empty {
            maps.patch(
                &cm.name_any(),
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"data": {"plan.json": empty}})),
            )
            .await?;
            waiting.push(node);
            continue;
        }
        let want = hex::encode(sha2::Sha256::digest(empty.as_bytes()));
        let drained = serde_json::from_str::<serde_json::Value>(reported)
            .ok()
            .is_some_and(|s| {
                s["planSha256"] == want.as_str()
                    && s["domains"] == serde_json::json!([])
                    && s["networks"] == serde_json::json!([])
                    && s["error"].is_null()
            });
        if !drained {
            waiting.push(node);
        }
    }
    Ok(waiting)
}

/// Deletes the Vino's objects of every kind it owns that `owned` did not apply: the ones no longer planned, or
/// all of them for a tracker that applied nothing. BareMetalHosts before the Secrets they name, the DaemonSet
/// before its account, the address pools last.
async fn prune(owned: &Owned<'_, Vino>) -> Result<(), Error> {
    owned.prune::<BareMetalHost>().await?;
    owned.prune::<Secret>().await?;
    owned.prune::<ConfigMap>().await?;
    owned.prune::<DaemonSet>().await?;
    owned.prune::<RoleBinding>().await?;
    owned.prune::<Role>().await?;
    owned.prune::<ServiceAccount>().await?;
    owned.prune::<IPPool>().await?;
    Ok(())
}

/// Asks for the drain of each BareMetalHost in `leaving` (a VM its node set's count left out, or of a deleted
/// Vino, whose host runs a node of a Provisioning's cluster) not asked yet: the BPA drains the node and marks
/// the host, and the next reconcile, which the host's change starts, lets the VM go.
async fn drain_leaving(
    ctx: &Ctx,
    vino: &Vino,
    ns: &str,
    leaving: &[String],
    asked: &BTreeSet<String>,
) -> Result<(), Error> {
    use kube::api::{Patch, PatchParams};
    let hosts: Api<BareMetalHost> = Api::namespaced(ctx.base.client.clone(), ns);
    for bmh in leaving.iter().filter(|b| !asked.contains(*b)) {
        let annotation = serde_json::json!({"metadata": {"annotations": {DRAIN_ANNOTATION: ""}}});
        hosts
            .patch(bmh, &PatchParams::default(), &Patch::Merge(annotation))
            .await?;
        let note = format!(
            "BareMetalHost {bmh}, whose VM is to go, runs a node of a Provisioning's cluster: asked for its \
             drain ({DRAIN_ANNOTATION}); the VM goes once the BPA marks it {DRAINED_ANNOTATION}"
        );
        publish(
            &ctx.base.recorder,
            vino,
            EventType::Normal,
            "DrainRequested",
            &note,
        )
        .await;
    }
    Ok(())
}

/// Why the Vino cannot be realised as specified.
struct Invalid(String);

/// Observes, renders and applies; `Ok(Ok(daemonset_ready))`, or `Ok(Err(_))` for a spec that cannot be
/// realised (nothing is written then).
async fn realise(
    vino: &Vino,
    ns: &str,
    ctx: &Ctx,
    status: &mut VinoStatus,
) -> Result<Result<bool, Invalid>, Error> {
    let client = &ctx.base.client;
    let generation = vino.metadata.generation.unwrap_or(0);
    let observed = match observe::observe(client, vino, ns).await? {
        Ok(o) => o,
        Err(why) => return Ok(Err(Invalid(why))),
    };
    let credentials = &observed.credentials;
    let ignored = airship::without_effect(&vino.spec);
    set_conditions(
        &mut status.conditions,
        generation,
        &[
            (
                airship::FIELDS_HONOURED,
                ignored.is_empty(),
                if ignored.is_empty() {
                    "AllHonoured"
                } else {
                    "WithoutEffect"
                },
                &if ignored.is_empty() {
                    "every field given has its effect".to_owned()
                } else {
                    ignored.join("; ")
                },
            ),
            (
                "CredentialsInSecret",
                !credentials.inline,
                if credentials.inline {
                    "CopiedFromInline"
                } else {
                    "SecretReferenced"
                },
                &if credentials.inline {
                    format!("the inline bmcCredentials were copied into Secret {}; reference it with bmcCredentialsSecret and drop them from the spec", credentials.secret)
                } else {
                    format!("BMC credentials from Secret {}", credentials.secret)
                },
            ),
        ],
    );
    let desired = match render::desired(
        vino,
        ns,
        &observed,
        &ctx.base.settings.vino_builder_image,
        &mut plan::vnc_password,
    ) {
        Ok(d) => d,
        Err(why) => return Ok(Err(Invalid(why))),
    };

    let mut owned = Owned::new(client, OWNERSHIP, vino, ns);
    // Address pools first, each under the resourceVersion it was read at: a concurrent writer makes this a 409.
    let pools: Api<IPPool> = Api::namespaced(client.clone(), ns);
    for PoolWrite { mut pool, change } in desired.pools {
        let pool_name = pool.name_any();
        match change {
            PoolChange::Create => {
                pool.metadata = owned.meta(&pool_name);
                pools.create(&PostParams::default(), &pool).await?;
            }
            PoolChange::Replace => {
                pools
                    .replace(&pool_name, &PostParams::default(), &pool)
                    .await?;
            }
            PoolChange::Unchanged => {}
        }
        owned.keep::<IPPool>(&pool_name);
    }
    for o in desired.secrets {
        owned.apply(o).await?;
    }
    for o in desired.hosts {
        owned.apply(o).await?;
    }
    for o in desired.plans {
        owned.apply(o).await?;
    }
    let (account, rules) = desired.account;
    apply_account(&mut owned, &account, rules).await?;
    let ds = owned.apply(desired.daemon_set).await?;
    // Everything no longer planned goes: pools of removed networks, BareMetalHosts and their Secrets, node
    // plans, a renamed DaemonSet and its account.
    prune(&owned).await?;
    status.nodes = desired.nodes;
    drain_leaving(ctx, vino, ns, &desired.leaving, &observed.drain_asked).await?;
    let leaving = &desired.leaving;
    set_conditions(
        &mut status.conditions,
        generation,
        &[(
            "ScaledDown",
            leaving.is_empty(),
            if leaving.is_empty() {
                "NothingLeaving"
            } else {
                "WaitingForDrain"
            },
            &if leaving.is_empty() {
                "no VM a node set's count left out is waiting".to_owned()
            } else {
                format!(
                    "left out by their node set's count, kept until their node is drained \
                     ({DRAIN_ANNOTATION}, then {DRAINED_ANNOTATION} by the BPA): BareMetalHost {}",
                    leaving.join(", ")
                )
            },
        )],
    );

    let ready = ds.status.as_ref().is_some_and(|s| {
        s.desired_number_scheduled > 0
            && s.number_ready >= s.desired_number_scheduled
            && s.observed_generation.unwrap_or(0) >= ds.metadata.generation.unwrap_or(0)
    });
    let msg = ds
        .status
        .map(|s| {
            format!(
                "{} of {} pods ready",
                s.number_ready, s.desired_number_scheduled
            )
        })
        .unwrap_or_else(|| "no status yet".into());
    set_conditions(
        &mut status.conditions,
        generation,
        &[(
            "DaemonSetReady",
            ready,
            if ready { "PodsReady" } else { "PodsNotReady" },
            &msg,
        )],
    );
    Ok(Ok(ready))
}

#[cfg(test)]
mod reconcile_tests;
#[cfg(test)]
mod render_tests;
