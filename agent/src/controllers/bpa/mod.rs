//! The BPA reconciler for `Provisioning`: observe (the Provisioning, its namespace's BareMetalHosts, its Job),
//! plan (`bpa_plan`, pure), apply (inventory ConfigMap, installer ServiceAccount/Role/RoleBinding, one Job per
//! generation, status, Events), and the hosts' claims (`consumerRef`) and membership (`members`). The
//! finalizer removes everything it created and releases the hosts.
//!
//! Installer contract: the Job runs `Settings::installer_image` with the inventory at
//! `/etc/foothold/inventory/hosts.ini`, the SSH key Secret at `/etc/foothold/ssh`, and the environment
//! `CLUSTER_NAME`, `NAMESPACE`, `KUD_PLUGINS` (comma separated), `POD_SUBNET`, `KUBECONFIG_SECRET`,
//! `INSTALLER_SSH_USER` and `DRAIN_TIMEOUT_SECONDS`. It removes from the cluster the nodes it made that the
//! inventory no longer lists. Before it
//! exits successfully it writes the workload cluster's kubeconfig into that Secret (`<cluster>-kubeconfig`,
//! key `kubeconfig`); its ServiceAccount may create and update exactly that Secret. A Job that completes
//! without the Secret counts as failed.

mod drains;
pub mod heal;
mod health;
pub mod hold;
pub mod members;
pub mod observe;
pub mod plan;
pub mod render;
pub mod webhook;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, PostParams, ResourceExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;

use self::members::Stage;
use self::plan::{Claim, Problem};
pub use self::plan::{OWNERSHIP, OWNER_LABEL};
use super::common::jobs;
use super::common::report::{report, Headline};
use super::common::secrets;
use super::common::{
    apply_account, delete_ignoring_missing, job_outcome, publish, set_conditions, Base, Error,
    JobOutcome, Owned,
};
use super::common::{child_name, set_condition, WAITING};
use super::common::{every, run as run_controller, scoped_api, Reconciler};
use super::settings::Settings;
use crate::crd::bpa::{Provisioning, ProvisioningStatus, SecretRef};
use crate::crd::metal3::BareMetalHost;
use crate::metrics::Metrics;

pub const FINALIZER: &str = "bpa.akraino.org/cleanup";

struct Ctx {
    base: Base,
}

/// Runs the Provisioning controller until it is dropped.
pub async fn run(client: kube::Client, settings: Arc<Settings>, metrics: Arc<Metrics>) {
    let provs: Api<Provisioning> = scoped_api(&client, &settings.namespace);
    let hosts: Api<BareMetalHost> = scoped_api(&client, &settings.namespace);
    let jobs: Api<Job> = scoped_api(&client, &settings.namespace);
    let maps: Api<ConfigMap> = scoped_api(&client, &settings.namespace);
    let pods: Api<Pod> = scoped_api(&client, &settings.namespace);
    let ctx = Arc::new(Ctx {
        base: Base::new("bpa", client.clone(), settings.clone(), metrics),
    });
    let controller = Controller::new(provs, watcher::Config::default());
    let store = controller.store();
    let owned = watcher::Config::default().labels(OWNER_LABEL);
    let controller = controller
        .owns(jobs, owned.clone())
        .owns(maps, owned.clone())
        // An installer pod that starts or cannot start re-plans its Provisioning (the Job does not change).
        .watches(pods, owned, jobs::pod_owner::<Provisioning>(OWNER_LABEL))
        // A host that appears or changes re-plans every Provisioning of its namespace.
        .watches(
            hosts,
            watcher::Config::default(),
            move |bmh: BareMetalHost| {
                let ns = bmh.namespace();
                every(&store, |p| p.namespace() == ns)
            },
        );
    match &settings.admission {
        Some(a) => {
            let register = webhook::register(&client, a, settings.namespace.as_deref());
            tokio::join!(register, run_controller(controller, ctx));
        }
        None => run_controller(controller, ctx).await,
    }
}

impl Reconciler for Ctx {
    type Object = Provisioning;
    const FINALIZER: &'static str = FINALIZER;

    fn base(&self) -> &Base {
        &self.base
    }

    async fn apply(&self, p: &Provisioning, ns: &str) -> Result<Action, Error> {
        let ctx = self;
        let client = &ctx.base.client;
        let name = p.name_any();
        let generation = p.metadata.generation.unwrap_or(0);
        let cluster = cluster_name(p);
        // Listed once: the plan and the drains read the same hosts.
        let bmhs = observe::bare_metal_hosts(client, ns).await?;
        let hosts = observe::hosts_of(&bmhs, p);
        let plan = plan::plan(&p.spec, &hosts);
        let mut stage = Stage::Waiting;
        let old = p.status.clone().unwrap_or_default();
        let mut status = ProvisioningStatus {
            conditions: old.conditions.clone(),
            observed_generation: Some(generation),
            host_count: Some(i32::try_from(plan.hosts.len()).unwrap_or(i32::MAX)),
            hosts: plan.hosts.clone(),
            remediations: old.remediations.clone(),
            ..ProvisioningStatus::default()
        };
        let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
        // A new generation that installs what the last Job installed (only `healing` changed) keeps that Job.
        let installs = render::installs(&p.spec);
        let last = match old.job_name.as_deref() {
            Some(last) => jobs.get_opt(last).await?,
            None => None,
        };
        let (job_name, existing) = match last {
            Some(j) if j.annotations().get(render::INSTALLS) == Some(&installs) => {
                (j.name_any(), Some(j))
            }
            _ => {
                let job_name = child_name(&name, &format!("install-g{generation}"));
                let existing = jobs.get_opt(&job_name).await?;
                (job_name, existing)
            }
        };
        let inventory_name = child_name(&name, "inventory");
        let secret_name = format!("{cluster}-kubeconfig");
        let mut owned = Owned::new(client, OWNERSHIP, p, ns);

        // Hosts matched? (Once this generation's Job exists, the installed cluster no longer depends on them.)
        let hosts_ok = plan.problems.is_empty();
        let (reason, message) = match plan.problems.first() {
            None => (
                "AllHostsMatched".to_owned(),
                "every host is matched, fit and provisioned".to_owned(),
            ),
            Some(first) => {
                let reason = match first {
                    Problem::Spec(_) => "InvalidSpec",
                    Problem::UnknownMac { .. } => "UnknownHost",
                    Problem::AmbiguousMac { .. } => "AmbiguousHost",
                    Problem::Unfit { .. } => "UnfitHost",
                    Problem::Claimed { .. } => "HostInUse",
                    Problem::NotProvisioned { .. } => "HostNotProvisioned",
                    Problem::NoAddress { .. } => "HostWithoutAddress",
                };
                let all: Vec<String> = plan.problems.iter().map(ToString::to_string).collect();
                (reason.to_owned(), all.join("; "))
            }
        };
        set_condition(
            &mut status.conditions,
            "HostsMatched",
            hosts_ok,
            &reason,
            &message,
            Some(generation),
        );

        let mut action = Action::requeue(Duration::from_secs(300));
        match (existing, plan.inventory.as_deref()) {
            (None, None) => {
                status.phase = Some(
                    if plan.spec_invalid() {
                        "Failed"
                    } else {
                        "Pending"
                    }
                    .into(),
                );
                set_conditions(
                    &mut status.conditions,
                    generation,
                    &[
                        ("Installing", false, &reason, "waiting for hosts"),
                        ("Ready", false, &reason, &message),
                        (
                            "Failed",
                            plan.spec_invalid(),
                            &reason,
                            if plan.spec_invalid() { &message } else { "" },
                        ),
                    ],
                );
            }
            (existing, inventory) => {
                if inventory.is_some() {
                    claim(client, ns, p, &hosts, &plan.hosts).await?;
                }
                if existing.is_none() {
                    let inventory = inventory.expect("matched above");
                    owned
                        .apply(render::inventory(&inventory_name, inventory))
                        .await?;
                    apply_account(
                        &mut owned,
                        &render::account(p),
                        render::account_rules(&secret_name),
                    )
                    .await?;
                    let mut job = render::installer(
                        p,
                        &render::Names {
                            ns,
                            cluster: &cluster,
                            job: &job_name,
                            inventory: &inventory_name,
                            kubeconfig_secret: &secret_name,
                            image: &ctx.base.settings.installer_image,
                            ssh_key_secret: &ctx.base.settings.ssh_key_secret,
                            ssh_user: &ctx.base.settings.installer_ssh_user,
                            drain_timeout_seconds: ctx.base.settings.drain_timeout_seconds,
                            ssh_host_ca: ctx.base.settings.ssh_host_ca.as_deref(),
                            read_token_secret: ctx.base.settings.node_read_token_secret.as_deref(),
                        },
                    );
                    owned.adopt(&mut job);
                    match jobs.create(&PostParams::default(), &job).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.code == 409 => {}
                        Err(e) => return Err(e.into()),
                    }
                    publish(
                        &ctx.base.recorder,
                        p,
                        EventType::Normal,
                        "Installing",
                        &format!("started installer Job {job_name}"),
                    )
                    .await;
                }
                // Jobs of earlier generations are superseded.
                owned.keep::<Job>(&job_name);
                owned.prune::<Job>().await?;
                status.job_name = Some(job_name.clone());
                status.inventory_config_map = Some(inventory_name.clone());
                let outcome = match jobs.get_opt(&job_name).await? {
                    Some(job) => job_outcome(&job),
                    None => JobOutcome::Running,
                };
                match outcome {
                    JobOutcome::Running => {
                        stage = Stage::Running;
                        status.phase = Some("Installing".into());
                        match jobs::waiting(client, ns, &job_name).await {
                            Some(why) => {
                                let msg = format!("installer Job {job_name} cannot start: {why}");
                                set_conditions(
                                    &mut status.conditions,
                                    generation,
                                    &[
                                        ("Installing", true, WAITING, &msg),
                                        ("Ready", false, WAITING, &msg),
                                        ("Failed", false, WAITING, ""),
                                    ],
                                );
                            }
                            None => set_conditions(
                                &mut status.conditions,
                                generation,
                                &[
                                    (
                                        "Installing",
                                        true,
                                        "JobRunning",
                                        &format!("installer Job {job_name} is running"),
                                    ),
                                    (
                                        "Ready",
                                        false,
                                        "Installing",
                                        "the installer has not finished",
                                    ),
                                    ("Failed", false, "Installing", ""),
                                ],
                            ),
                        }
                        action = Action::await_change();
                    }
                    JobOutcome::Succeeded => {
                        let has_kubeconfig = secrets::read(client, ns, &secret_name, "kubeconfig")
                            .await?
                            .is_ok_and(|k| !k.is_empty());
                        set_condition(
                            &mut status.conditions,
                            "Installing",
                            false,
                            "JobFinished",
                            &format!("installer Job {job_name} finished"),
                            Some(generation),
                        );
                        if has_kubeconfig {
                            stage = Stage::Succeeded;
                            status.phase = Some("Ready".into());
                            status.kubeconfig_secret_ref = Some(SecretRef {
                                name: secret_name.clone(),
                                namespace: Some(ns.to_owned()),
                            });
                            set_conditions(
                                &mut status.conditions,
                                generation,
                                &[
                                    (
                                        "Ready",
                                        true,
                                        "Installed",
                                        &format!("kubeconfig in Secret {secret_name}"),
                                    ),
                                    ("Failed", false, "Installed", ""),
                                ],
                            );
                            let again =
                                health::heal(&ctx.base, p, (ns, &secret_name), &bmhs, &mut status)
                                    .await?;
                            action = Action::requeue(again);
                        } else {
                            stage = Stage::Failed;
                            let msg = format!("installer Job {job_name} succeeded without writing Secret {secret_name} (key kubeconfig)");
                            status.phase = Some("Failed".into());
                            set_conditions(
                                &mut status.conditions,
                                generation,
                                &[
                                    ("Ready", false, "NoKubeconfig", &msg),
                                    ("Failed", true, "NoKubeconfig", &msg),
                                ],
                            );
                        }
                    }
                    JobOutcome::Failed(why) => {
                        stage = Stage::Failed;
                        let said = jobs::last_words(&ctx.base.client, ns, &job_name).await;
                        let msg = format!(
                            "installer Job {job_name} failed: {}",
                            jobs::failure(&why, said.as_deref())
                        );
                        status.phase = Some("Failed".into());
                        set_conditions(
                            &mut status.conditions,
                            generation,
                            &[
                                ("Installing", false, "JobFailed", &msg),
                                ("Ready", false, "JobFailed", &msg),
                                ("Failed", true, "JobFailed", &msg),
                            ],
                        );
                    }
                }
            }
        }
        let ours: Vec<String> = hosts
            .iter()
            .filter(|h| h.claim == Claim::Ours)
            .map(|h| h.name.clone())
            .collect();
        let same_job = old.job_name.as_deref() == Some(job_name.as_str());
        let m = members::membership(
            &plan.hosts,
            &old.installed_hosts,
            (&old.hosts, same_job),
            stage,
            &ours,
        );
        status.hosts = m.hosts;
        status.installed_hosts = m.installed;
        let under_way = drains::drains(
            &ctx.base,
            p,
            (ns, &secret_name),
            &bmhs,
            &mut status.hosts,
            &old.hosts,
        )
        .await?;
        if let Some(again) = under_way {
            action = Action::requeue(again);
        }
        for bmh in &m.release {
            set_consumer(client, ns, bmh, None).await?;
            publish(
                &ctx.base.recorder,
                p,
                EventType::Normal,
                "Released",
                &format!("BareMetalHost {bmh} left cluster {cluster}: released"),
            )
            .await;
        }
        let phase = status.phase.as_deref().unwrap_or_default();
        let note_of = if phase == "Pending" {
            "HostsMatched"
        } else {
            "Ready"
        };
        let headline = Headline::phase(
            (old.phase.as_deref(), &old.conditions),
            phase,
            &status.conditions,
            note_of,
        );
        report(&ctx.base, p, ns, headline, &status).await?;
        Ok(action)
    }

    /// Deletes everything the reconciler created for `p` (it does not rely on a garbage collector), and the
    /// cluster's kubeconfig Secret.
    async fn cleanup(&self, p: &Provisioning, ns: &str) -> Result<Action, Error> {
        let ctx = self;
        let client = &ctx.base.client;
        let owned = Owned::new(client, OWNERSHIP, p, ns);
        for h in observe::hosts(client, ns, p).await? {
            if h.claim == Claim::Ours {
                set_consumer(client, ns, &h.name, None).await?;
            }
        }
        owned.prune::<Job>().await?;
        owned.prune::<ConfigMap>().await?;
        owned.prune::<RoleBinding>().await?;
        owned.prune::<Role>().await?;
        owned.prune::<ServiceAccount>().await?;
        delete_ignoring_missing(
            &Api::<Secret>::namespaced(client.clone(), ns),
            &format!("{}-kubeconfig", cluster_name(p)),
        )
        .await?;
        publish(
            &ctx.base.recorder,
            p,
            EventType::Normal,
            "Deleted",
            "removed the installer objects and the kubeconfig Secret, and released its BareMetalHosts",
        )
        .await;
        Ok(Action::await_change())
    }
}

/// Puts `p`'s `consumerRef` on every free BareMetalHost of `planned` (the hosts its Job installs): a host
/// serves one cluster, and another Provisioning that names it is told so (`HostInUse`).
async fn claim(
    client: &kube::Client,
    ns: &str,
    p: &Provisioning,
    hosts: &[plan::Host],
    planned: &[crate::crd::bpa::HostStatus],
) -> Result<(), Error> {
    for h in hosts.iter().filter(|h| h.claim == Claim::Free) {
        if planned
            .iter()
            .any(|s| s.bare_metal_host.as_deref() == Some(h.name.as_str()))
        {
            set_consumer(client, ns, &h.name, Some(observe::consumer_ref(p))).await?;
        }
    }
    Ok(())
}

/// Sets (or, with None, clears) a BareMetalHost's `spec.consumerRef`, and removes a drain's annotations
/// (`hold`): they speak of the cluster it leaves, or of one before the cluster that takes it.
async fn set_consumer(
    client: &kube::Client,
    ns: &str,
    bmh: &str,
    consumer: Option<k8s_openapi::api::core::v1::ObjectReference>,
) -> Result<(), Error> {
    Api::<BareMetalHost>::namespaced(client.clone(), ns)
        .patch(
            bmh,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({
                "metadata": {"annotations": {hold::DRAIN_ANNOTATION: null, hold::DRAINED_ANNOTATION: null}},
                "spec": {"consumerRef": consumer},
            })),
        )
        .await?;
    Ok(())
}

/// The cluster a Provisioning installs: its `cluster` label (ICN), else its name.
pub fn cluster_name(p: &Provisioning) -> String {
    p.labels()
        .get("cluster")
        .cloned()
        .unwrap_or_else(|| p.name_any())
}

/// A Provisioning or Software as the REST status shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Summary<S> {
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    pub status: Option<S>,
}

fn summary<K: kube::Resource<DynamicType = ()>, S: Clone>(
    obj: &K,
    status: &Option<S>,
) -> Summary<S> {
    Summary {
        namespace: obj.meta().namespace.clone().unwrap_or_default(),
        name: obj.meta().name.clone().unwrap_or_default(),
        generation: obj.meta().generation,
        status: status.clone(),
    }
}

/// The Provisionings of `owner`'s `cluster` (`owner` label and cluster name), and the Softwares of that
/// cluster in their namespaces: what `GET /v1/baremetalcluster/{owner}/{cluster}/status` adds to the images.
pub async fn cluster_status(
    client: &kube::Client,
    namespace: Option<&str>,
    owner: &str,
    cluster: &str,
) -> Result<
    (
        Vec<Summary<ProvisioningStatus>>,
        Vec<Summary<crate::crd::bpa::SoftwareStatus>>,
    ),
    kube::Error,
> {
    use crate::crd::bpa::Software;
    let (provs, softwares): (Api<Provisioning>, Api<Software>) = match namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    // Label values cannot hold every owner name the REST API accepts: filter here, not by selector.
    let provs: Vec<Provisioning> = provs
        .list(&ListParams::default().labels("owner"))
        .await?
        .items
        .into_iter()
        .filter(|p| {
            p.labels().get("owner").map(String::as_str) == Some(owner) && cluster_name(p) == cluster
        })
        .collect();
    let mut software = Vec::new();
    if !provs.is_empty() {
        for s in softwares
            .list(&ListParams::default().labels("cluster"))
            .await?
            .items
        {
            if s.labels().get("cluster").map(String::as_str) == Some(cluster)
                && provs.iter().any(|p| p.namespace() == s.namespace())
            {
                software.push(summary(&s, &s.status));
            }
        }
    }
    Ok((
        provs.iter().map(|p| summary(p, &p.status)).collect(),
        software,
    ))
}

#[cfg(test)]
mod heal_tests;
#[cfg(test)]
mod hold_tests;
#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod reconcile_tests;
