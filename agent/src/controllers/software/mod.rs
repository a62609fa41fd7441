//! The BPA reconciler for `Software`: once the cluster's `Provisioning` is `Ready`, a Job installs the listed
//! packages on the cluster's hosts, downloading them from the agent's own file server.
//!
//! A Software names its cluster with the `cluster` label (as in ICN). Its packages are the cluster's
//! `binary_images` records (see `software_plan`): owner from the Provisioning's `owner` label, cluster from its
//! cluster name. Until every package is uploaded, the Software is `Pending` and says which are missing; any
//! upload that completes (or record deleted) re-plans every Software.
//!
//! Installer contract (the same image as the cluster installer): `INSTALLER_TASK=software`, the cluster's
//! inventory at `/etc/foothold/inventory/hosts.ini`, the package manifest (JSON: owner, cluster, packages with
//! name, version, groups, url, sha256) at `/etc/foothold/packages/packages.json`, the workload cluster's
//! kubeconfig at `/etc/foothold/kubeconfig/kubeconfig`, and the SSH key at `/etc/foothold/ssh`. It installs
//! each package on the hosts of its groups and exits 0 when all are installed. A new Software generation, a
//! cluster installed anew (a Provisioning whose hosts or cluster settings changed, not only its healing), or new
//! content for a package it names (another upload under the same name: the manifest's digest is in the Job's
//! name) runs a new Job; the old one goes. A Provisioning whose status is of an older generation than its spec
//! is waited for: the BPA has not seen its change yet, and its status may say `Ready` of the cluster before it.

pub mod observe;
pub mod plan;
pub mod render;

pub use self::plan::{OWNERSHIP, OWNER_LABEL};

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, PostParams, ResourceExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;

use self::plan::Files;
use super::bpa::render as bpa_render;
use super::bpa::{cluster_name, FINALIZER};
use super::common::host_report::{HostState, Report};
use super::common::report::{report, Headline};
use super::common::{child_name, jobs};
use super::common::{every, run as run_controller, scoped_api, Reconciler};
use super::common::{
    job_outcome, publish, set_conditions, Base, Error, JobOutcome, Owned, WAITING,
};
use super::settings::Settings;
use crate::crd::bpa::{Provisioning, Software, SoftwareHostStatus, SoftwareStatus};
use crate::metrics::Metrics;
use crate::store::Store;

/// How often a Software waiting for uploads re-reads the store anyway (uploads trigger a reconcile too).
const UPLOAD_POLL: Duration = Duration::from_secs(60);

struct Ctx {
    base: Base,
    store: Arc<Store>,
}

/// Runs the Software controller until it is dropped.
pub async fn run(
    client: kube::Client,
    settings: Arc<Settings>,
    metrics: Arc<Metrics>,
    store: Arc<Store>,
) {
    let softwares: Api<Software> = scoped_api(&client, &settings.namespace);
    let provs: Api<Provisioning> = scoped_api(&client, &settings.namespace);
    let jobs: Api<Job> = scoped_api(&client, &settings.namespace);
    let maps: Api<ConfigMap> = scoped_api(&client, &settings.namespace);
    let pods: Api<Pod> = scoped_api(&client, &settings.namespace);
    let ctx = Arc::new(Ctx {
        base: Base::new("software", client.clone(), settings.clone(), metrics),
        store,
    });
    let uploads =
        futures_util::stream::unfold(ctx.store.watch_image_records(), |mut changes| async move {
            changes.changed().await.ok().map(|()| ((), changes))
        });
    let controller = Controller::new(softwares, watcher::Config::default());
    let store = controller.store();
    let owned = watcher::Config::default().labels(OWNER_LABEL);
    let controller = controller
        .owns(jobs, owned.clone())
        .owns(maps, owned.clone())
        // An installer pod that starts or cannot start re-plans its Software (the Job does not change).
        .watches(pods, owned, jobs::pod_owner::<Software>(OWNER_LABEL))
        // A cluster that becomes ready (or is reinstalled) triggers its Softwares.
        .watches(provs, watcher::Config::default(), move |p: Provisioning| {
            let (ns, cluster) = (p.namespace(), cluster_name(&p));
            every(&store, |s| {
                s.namespace() == ns && s.labels().get("cluster") == Some(&cluster)
            })
        })
        // Uploads are not Kubernetes events: a finished or deleted record re-plans every Software.
        .reconcile_all_on(uploads);
    run_controller(controller, ctx).await;
}

impl Reconciler for Ctx {
    type Object = Software;
    const FINALIZER: &'static str = FINALIZER;

    fn base(&self) -> &Base {
        &self.base
    }

    async fn apply(&self, sw: &Software, ns: &str) -> Result<Action, Error> {
        let ctx = self;
        let client = &ctx.base.client;
        let name = sw.name_any();
        let generation = sw.metadata.generation.unwrap_or(0);
        let provs = observe::provisionings(client, ns).await?;
        let old = sw.status.clone().unwrap_or_default();
        let mut status = SoftwareStatus {
            conditions: old.conditions.clone(),
            observed_generation: Some(generation),
            ..SoftwareStatus::default()
        };
        if let Some(prov) = awaits_the_bpa(sw, &provs) {
            // Its status is the BPA's word on an older generation: right after a host is added to a `Ready`
            // Provisioning it still says `Ready`, and a Job started then would install on the new host before
            // it joined. Nothing changes until the BPA has seen the change; its status write brings the
            // Software back here (the requeue is for a BPA that is not running).
            tracing::debug!(
                software = %name,
                provisioning = %prov.name_any(),
                "waiting for the BPA to observe the Provisioning's generation"
            );
            return Ok(Action::requeue(Duration::from_secs(60)));
        }
        let mut action = Action::requeue(Duration::from_secs(300));

        match ready_cluster(sw, &provs) {
            Err((phase, reason, message)) => {
                status.phase = Some(phase.into());
                let failed = phase == "Failed";
                set_conditions(
                    &mut status.conditions,
                    generation,
                    &[
                        ("ClusterReady", false, reason, &message),
                        ("Installing", false, reason, "waiting for the cluster"),
                        ("Installed", false, reason, &message),
                        ("Failed", failed, reason, if failed { &message } else { "" }),
                    ],
                );
            }
            Ok((prov, owner)) => {
                status.provisioning = Some(prov.name_any());
                let cluster = cluster_name(prov);
                set_conditions(
                    &mut status.conditions,
                    generation,
                    &[(
                        "ClusterReady",
                        true,
                        "ProvisioningReady",
                        &format!(
                            "Provisioning {} is Ready (generation {})",
                            prov.name_any(),
                            prov.metadata.generation.unwrap_or(0)
                        ),
                    )],
                );
                let uploaded = observe::uploaded(&ctx.store, &owner, &cluster).await?;
                let files = Files {
                    base_url: ctx.base.settings.advertise_url.as_deref(),
                    owner: &owner,
                    cluster: &cluster,
                };
                let plan = plan::plan(&sw.spec, &uploaded, &files);
                status.packages = plan.packages.clone();
                if !plan.spec_errors.is_empty() {
                    let message = plan.spec_errors.join("; ");
                    status.phase = Some("Failed".into());
                    set_conditions(
                        &mut status.conditions,
                        generation,
                        &[
                            ("PackagesAvailable", false, "InvalidSpec", &message),
                            ("Installing", false, "InvalidSpec", ""),
                            ("Installed", false, "InvalidSpec", &message),
                            ("Failed", true, "InvalidSpec", &message),
                        ],
                    );
                } else if let Some(manifest) = plan.manifest.as_deref() {
                    set_conditions(
                        &mut status.conditions,
                        generation,
                        &[(
                            "PackagesAvailable",
                            true,
                            "Uploaded",
                            "every package is in the agent's store",
                        )],
                    );
                    let job_name = child_name(
                        &name,
                        &format!(
                            "install-g{generation}-c{}-{}",
                            &bpa_render::installs(&prov.spec)[..8],
                            manifest_id(manifest)
                        ),
                    );
                    if old.job_name.as_deref() == Some(&job_name) {
                        // The same run: its report stays, should its pod be gone.
                        status.hosts = old.hosts.clone();
                        status.hosts_omitted = old.hosts_omitted;
                    }
                    status.job_name = Some(job_name.clone());
                    action = run_job(sw, prov, ns, ctx, &job_name, manifest, &mut status).await?;
                } else {
                    let message = plan.missing.join("; ");
                    status.phase = Some("Pending".into());
                    set_conditions(
                        &mut status.conditions,
                        generation,
                        &[
                            ("PackagesAvailable", false, "PackagesMissing", &message),
                            (
                                "Installing",
                                false,
                                "PackagesMissing",
                                "waiting for uploads",
                            ),
                            ("Installed", false, "PackagesMissing", &message),
                            ("Failed", false, "PackagesMissing", ""),
                        ],
                    );
                    action = Action::requeue(UPLOAD_POLL);
                }
            }
        }
        if status.job_name.is_none() {
            // No Job runs for a cluster that is not ready, missing packages or an invalid spec.
            Owned::new(&ctx.base.client, OWNERSHIP, sw, ns)
                .prune::<Job>()
                .await?;
        }
        let phase = status.phase.as_deref().unwrap_or_default();
        let headline = Headline::phase(
            (old.phase.as_deref(), &old.conditions),
            phase,
            &status.conditions,
            "Installed",
        );
        report(&ctx.base, sw, ns, headline, &status).await?;
        Ok(action)
    }

    /// Deletes the Jobs and manifests of `sw` (it does not rely on a garbage collector).
    async fn cleanup(&self, sw: &Software, ns: &str) -> Result<Action, Error> {
        let ctx = self;
        let owned = Owned::new(&ctx.base.client, OWNERSHIP, sw, ns);
        owned.prune::<Job>().await?;
        owned.prune::<ConfigMap>().await?;
        publish(
            &ctx.base.recorder,
            sw,
            EventType::Normal,
            "Deleted",
            "removed the package installer Jobs and manifests",
        )
        .await;
        Ok(Action::await_change())
    }
}

/// The first 8 hex digits of the package manifest's sha256: part of the Job's name, so that new content for a
/// package the Software names (an upload replacing it) runs the installer again. The installer leaves a host
/// whose package is already that version (a Debian package's, by dpkg) or content (a binary's sha256) alone,
/// so only the hosts that differ change, one host after another.
fn manifest_id(manifest: &str) -> String {
    crate::digest::Digest::of_bytes(manifest.as_bytes()).hex()[..8].to_owned()
}

/// Why the Software waits or fails before any Job: `(phase, reason, message)`.
type Blocked = (&'static str, &'static str, String);

/// The Software's cluster's Provisioning, if its status is of an older generation than its spec (the BPA has
/// not seen its last change yet).
fn awaits_the_bpa<'a>(sw: &Software, provs: &'a [Provisioning]) -> Option<&'a Provisioning> {
    let (_, of_cluster) = of_its_cluster(sw, provs)?;
    let [prov] = of_cluster[..] else {
        return None;
    };
    let observed = prov.status.as_ref()?.observed_generation;
    (observed != prov.metadata.generation).then_some(prov)
}

/// The Software's cluster (its `cluster` label) and the Provisionings of that cluster; None without the label.
fn of_its_cluster<'a, 's>(
    sw: &'s Software,
    provs: &'a [Provisioning],
) -> Option<(&'s String, Vec<&'a Provisioning>)> {
    let cluster = sw.labels().get("cluster")?;
    let of_cluster = provs
        .iter()
        .filter(|p| &cluster_name(p) == cluster)
        .collect();
    Some((cluster, of_cluster))
}

/// The Software's cluster, ready for packages, or why not.
fn ready_cluster<'a>(
    sw: &Software,
    provs: &'a [Provisioning],
) -> Result<(&'a Provisioning, String), Blocked> {
    let Some((cluster, of_cluster)) = of_its_cluster(sw, provs) else {
        return Err((
            "Failed",
            "InvalidSpec",
            "the label \"cluster\" (the cluster the packages go to) is missing".into(),
        ));
    };
    let [prov] = of_cluster[..] else {
        let n = of_cluster.len();
        return Err(if n == 0 {
            (
                "Pending",
                "NoCluster",
                format!("no Provisioning of cluster {cluster} in this namespace"),
            )
        } else {
            (
                "Failed",
                "AmbiguousCluster",
                format!("{n} Provisionings claim cluster {cluster}"),
            )
        });
    };
    let phase = prov.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase != Some("Ready") {
        return Err((
            "Pending",
            "ClusterNotReady",
            format!(
                "Provisioning {} is {}, not Ready",
                prov.name_any(),
                phase.unwrap_or("new")
            ),
        ));
    }
    let Some(owner) = prov.labels().get("owner") else {
        return Err((
            "Failed",
            "NoOwner",
            format!(
                "Provisioning {} has no \"owner\" label, so its packages have no place in the REST API",
                prov.name_any()
            ),
        ));
    };
    Ok((prov, owner.clone()))
}

/// Creates this generation's manifest and Job if needed, drops older Jobs, and reads the Job's outcome into
/// `status`.
async fn run_job(
    sw: &Software,
    prov: &Provisioning,
    ns: &str,
    ctx: &Ctx,
    job_name: &str,
    manifest: &str,
    status: &mut SoftwareStatus,
) -> Result<Action, Error> {
    let name = sw.name_any();
    let generation = sw.metadata.generation.unwrap_or(0);
    let jobs: Api<Job> = Api::namespaced(ctx.base.client.clone(), ns);
    let manifest_name = child_name(&name, "packages");
    let existing = jobs.get_opt(job_name).await?;
    let mut owned = Owned::new(&ctx.base.client, OWNERSHIP, sw, ns);
    if existing.is_none() {
        owned
            .apply(render::manifest(&manifest_name, manifest))
            .await?;
        let mut job = render::installer(sw, prov, ns, job_name, &manifest_name, &ctx.base.settings);
        owned.adopt(&mut job);
        match jobs.create(&PostParams::default(), &job).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        publish(
            &ctx.base.recorder,
            sw,
            EventType::Normal,
            "Installing",
            &format!("started package installer Job {job_name}"),
        )
        .await;
    }
    owned.keep::<Job>(job_name);
    owned.prune::<Job>().await?;
    let outcome = match existing {
        Some(job) => job_outcome(&job),
        None => JobOutcome::Running,
    };
    let mut action = Action::requeue(Duration::from_secs(300));
    let updates: [(&str, bool, &str, String); 3] = match outcome {
        JobOutcome::Running => {
            status.phase = Some("Installing".into());
            status.hosts.clear();
            status.hosts_omitted = None;
            action = Action::await_change();
            match jobs::waiting(&ctx.base.client, ns, job_name).await {
                Some(why) => {
                    let msg = format!("package installer Job {job_name} cannot start: {why}");
                    [
                        ("Installing", true, WAITING, msg.clone()),
                        ("Installed", false, WAITING, msg),
                        ("Failed", false, WAITING, String::new()),
                    ]
                }
                None => [
                    (
                        "Installing",
                        true,
                        "JobRunning",
                        format!("package installer Job {job_name} is running"),
                    ),
                    (
                        "Installed",
                        false,
                        "Installing",
                        "the installer has not finished".into(),
                    ),
                    ("Failed", false, "Installing", String::new()),
                ],
            }
        }
        JobOutcome::Succeeded => {
            status.phase = Some("Installed".into());
            finished_hosts(&ctx.base.client, ns, job_name, status).await;
            let msg = format!(
                "package installer Job {job_name} finished{}",
                summary(status)
                    .map(|h| format!(": {h}"))
                    .unwrap_or_default()
            );
            [
                ("Installing", false, "JobFinished", msg.clone()),
                ("Installed", true, "JobFinished", msg),
                ("Failed", false, "JobFinished", String::new()),
            ]
        }
        JobOutcome::Failed(why) => {
            status.phase = Some("Failed".into());
            let words = finished_hosts(&ctx.base.client, ns, job_name, status).await;
            let said = summary(status).or(words);
            let msg = format!(
                "package installer Job {job_name} failed: {}",
                jobs::failure(&why, said.as_deref())
            );
            [
                ("Installing", false, "JobFailed", msg.clone()),
                ("Installed", false, "JobFailed", msg.clone()),
                ("Failed", true, "JobFailed", msg),
            ]
        }
    };
    let updates: Vec<(&str, bool, &str, &str)> = updates
        .iter()
        .map(|(t, s, r, m)| (*t, *s, *r, m.as_str()))
        .collect();
    set_conditions(&mut status.conditions, generation, &updates);
    Ok(action)
}

/// `status.hosts` of the finished Job `job`: kept from the last status when it is that Job's (its pod is not
/// read again at every resync), else read from the installer's report, its pod's termination message. The
/// pod's words when they are no report (a refusal's `FAILED: …`), for the condition to say.
async fn finished_hosts(
    client: &kube::Client,
    ns: &str,
    job: &str,
    status: &mut SoftwareStatus,
) -> Option<String> {
    if !status.hosts.is_empty() {
        return None;
    }
    let said = jobs::last_words(client, ns, job).await;
    let Some(report) = said.as_deref().and_then(Report::decode) else {
        return said;
    };
    status.hosts = report
        .hosts
        .iter()
        .map(|h| SoftwareHostStatus {
            name: h.host.clone(),
            state: h.state.as_str().into(),
            detail: h.detail.clone(),
        })
        .collect();
    status.hosts_omitted = u32::try_from(report.omitted).ok().filter(|n| *n > 0);
    None
}

/// `status.hosts` in a line, if there are any: how many hosts are in each state, and each failed host with its
/// reason (`1 updated, 1 failed; w: hello: …`).
fn summary(status: &SoftwareStatus) -> Option<String> {
    if status.hosts.is_empty() {
        return None;
    }
    let count = |s: HostState| {
        status
            .hosts
            .iter()
            .filter(|h| h.state == s.as_str())
            .count()
    };
    let mut line = [
        HostState::Updated,
        HostState::Unchanged,
        HostState::Failed,
        HostState::Skipped,
    ]
    .into_iter()
    .map(|s| (count(s), s))
    .filter(|(n, _)| *n > 0)
    .map(|(n, s)| format!("{n} {}", s.as_str().to_lowercase()))
    .collect::<Vec<_>>()
    .join(", ");
    if let Some(n) = status.hosts_omitted {
        line.push_str(&format!(", {n} not reported"));
    }
    for h in status
        .hosts
        .iter()
        .filter(|h| h.state == HostState::Failed.as_str())
    {
        line.push_str(&format!("; {}: {}", h.name, h.detail));
    }
    Some(line)
}

#[cfg(test)]
mod reconcile_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::bpa::ProvisioningStatus;

    fn software() -> Software {
        let mut sw = Software::new("tools", Default::default());
        sw.metadata.labels = Some([("cluster".to_owned(), "c1".to_owned())].into());
        sw
    }

    /// A Provisioning of cluster `c1` at `generation` whose status says `phase` for `observed`.
    fn provisioning(generation: i64, phase: &str, observed: Option<i64>) -> Provisioning {
        let mut p: Provisioning = serde_json::from_value(serde_json::json!({
            "apiVersion": "bpa.akraino.org/v1alpha1", "kind": "Provisioning",
            "metadata": {"name": "p", "generation": generation,
                         "labels": {"cluster": "c1", "owner": "alice"}},
            "spec": {},
        }))
        .unwrap();
        p.status = Some(ProvisioningStatus {
            phase: Some(phase.into()),
            observed_generation: observed,
            ..ProvisioningStatus::default()
        });
        p
    }

    #[test]
    fn a_ready_cluster_of_the_current_generation_takes_packages() {
        let provs = [provisioning(6, "Ready", Some(6))];
        assert!(awaits_the_bpa(&software(), &provs).is_none());
        let (prov, owner) = ready_cluster(&software(), &provs).unwrap();
        assert_eq!((prov.name_any().as_str(), owner.as_str()), ("p", "alice"));
    }

    #[test]
    fn a_status_of_an_older_generation_waits_for_the_bpa() {
        let stale = [provisioning(7, "Ready", Some(6))];
        assert!(awaits_the_bpa(&software(), &stale).is_some());
        let never_observed = [provisioning(1, "Ready", None)];
        assert!(awaits_the_bpa(&software(), &never_observed).is_some());
        // A Provisioning with no status yet is new, not waited for: the Software says it is not Ready.
        let mut new = provisioning(1, "Ready", None);
        new.status = None;
        assert!(awaits_the_bpa(&software(), std::slice::from_ref(&new)).is_none());
        // Another cluster's is none of its business.
        let mut other = provisioning(7, "Ready", Some(6));
        other.metadata.labels = Some([("cluster".to_owned(), "c2".to_owned())].into());
        assert!(awaits_the_bpa(&software(), &[other]).is_none());
    }

    #[test]
    fn a_cluster_being_installed_waits() {
        let provs = [provisioning(7, "Installing", Some(7))];
        let (phase, reason, message) = ready_cluster(&software(), &provs).unwrap_err();
        assert_eq!((phase, reason), ("Pending", "ClusterNotReady"));
        assert_eq!(message, "Provisioning p is Installing, not Ready");
    }
}
