//! The BPA reconciler against a real kube-apiserver: the agent binary runs with `--controllers bpa`, fixtures
//! are genuine Metal3 BareMetalHosts, and the test plays kubelet and installer (it patches Job status and
//! writes the kubeconfig Secret).

use crate::hosts::{bmh, set_bmh_status};
use crate::jobs::{failed_attempt, job_status, waiting_attempt};

use std::path::Path;

use crate::support::kube::{controller_agent, env, until};
use crate::support::Agent;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::{json, Value};

use foothold_agent::crd::bpa::Provisioning;

/// What the agents tell nodes their file server is (`--advertise-url`).
pub(crate) const ADVERTISED: &str = "http://10.1.2.3:5000";

pub(crate) fn start_agent(dir: &Path, ns: &str, identity: &str) -> Agent {
    start_agent_with(dir, ns, identity, &env().agent_kubeconfig())
}

/// The site SSH CA's public key the agents in `dir` give their installer Jobs (`--ssh-host-ca`), made there.
pub(crate) fn site_ssh_ca(dir: &Path) -> String {
    let (ca, _) = foothold_agent::ssh_ca::ensure(&dir.join("ssh-ca")).unwrap();
    ca.public_key().to_openssh().unwrap()
}

pub(crate) fn start_agent_with(dir: &Path, ns: &str, identity: &str, kubeconfig: &Path) -> Agent {
    site_ssh_ca(dir);
    let ca = dir.join("ssh-ca/ca.pub");
    controller_agent(
        dir,
        ns,
        identity,
        "bpa",
        kubeconfig,
        &[
            "--installer-image",
            "registry.example/kud-installer:v1",
            "--installer-ssh-user",
            "ops",
            "--advertise-url",
            ADVERTISED,
            "--ssh-host-ca",
            ca.to_str().unwrap(),
        ],
    )
}

fn condition(p: &Provisioning, type_: &str) -> Option<(String, String, String, Option<i64>)> {
    p.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
                c.observed_generation,
            )
        })
}

pub(crate) fn provisioning(name: &str, cluster: &str, spec: Value) -> Provisioning {
    serde_json::from_value(json!({
        "apiVersion": "bpa.akraino.org/v1alpha1", "kind": "Provisioning",
        "metadata": {"name": name, "labels": {"cluster": cluster, "owner": "tenant-a"}},
        "spec": spec,
    }))
    .unwrap()
}

/// A provisioned host (`name`, `mac`, `ip`: 4 CPUs, 4 GiB unless `cpus_mib` says) and a Provisioning
/// `prov` of cluster `cluster` whose one master it is; the Provisionings' API.
pub(crate) async fn one_master(
    client: &kube::Client,
    ns: &str,
    (name, mac, ip): (&str, &str, &str),
    (prov, cluster): (&str, &str),
    cpus_mib: Option<(i64, i64)>,
) -> Api<Provisioning> {
    let (cpus, mib) = cpus_mib.unwrap_or((4, 4096));
    bmh(
        client,
        ns,
        (name, mac, ip, cpus, mib, "provisioned"),
        json!({}),
    )
    .await;
    let provs: Api<Provisioning> = Api::namespaced(client.clone(), ns);
    provs
        .create(
            &PostParams::default(),
            &provisioning(
                prov,
                cluster,
                json!({"masters": [{"m": {"mac-address": mac}}]}),
            ),
        )
        .await
        .unwrap();
    provs
}

pub(crate) async fn get_prov(api: &Api<Provisioning>, name: &str) -> Option<Provisioning> {
    api.get_opt(name).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_installs_reports_ready_retries_on_change_and_cleans_up() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "bpa-lifecycle").await;
    let tmp = tempfile::tempdir().unwrap();
    let _agent = start_agent(tmp.path(), &ns, "agent-a");

    bmh(
        &client,
        &ns,
        (
            "node-a",
            "00:c6:14:04:61:b2",
            "10.10.0.11",
            8,
            16384,
            "provisioned",
        ),
        json!({}),
    )
    .await;
    bmh(
        &client,
        &ns,
        (
            "node-b",
            "00:c6:14:04:61:b3",
            "10.10.0.12",
            16,
            32768,
            "externally provisioned",
        ),
        json!({"feature.foothold.io/sriov": "true"}),
    )
    .await;
    bmh(
        &client,
        &ns,
        (
            "node-c",
            "00:c6:14:04:61:b4",
            "10.10.0.13",
            16,
            32768,
            "available",
        ),
        json!({}),
    )
    .await;

    let provs: Api<Provisioning> = Api::namespaced(client.clone(), &ns);
    provs.create(&PostParams::default(), &provisioning("cluster-1", "c1", json!({
        "masters": [{"master-1": {"mac-address": "00:C6:14:04:61:B2", "cpu": 4, "memory": "8Gi"}}],
        "workers": [{"worker-1": {"mac-address": "00-c6-14-04-61-b3", "sriov": true, "memory": "32Gi"}}],
        "KUDPlugins": ["ovn4nfv", "multus"], "PodSubnet": "10.244.64.0/18",
    }))).await.unwrap();

    // Inventory and Job appear with the expected content.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let inventory = until("the inventory ConfigMap", || async {
        cms.get_opt("cluster-1-inventory").await.unwrap()
    })
    .await;
    assert_eq!(
        inventory.data.unwrap()["hosts.ini"],
        "[all]\nmaster-1 ansible_host=10.10.0.11 ip=10.10.0.11\nworker-1 ansible_host=10.10.0.12 ip=10.10.0.12\n\
         \n[kube_control_plane]\nmaster-1\n\n[etcd]\nmaster-1\n\n[kube_node]\nworker-1\n\
         \n[k8s_cluster:children]\nkube_control_plane\nkube_node\n"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let job = until("the installer Job", || async {
        jobs.get_opt("cluster-1-install-g1").await.unwrap()
    })
    .await;
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Provisioning", "cluster-1", Some(true))
    );
    let pod = job.spec.unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some("registry.example/kud-installer:v1")
    );
    let env_of = |k: &str| {
        container
            .env
            .as_ref()
            .unwrap()
            .iter()
            .find(|e| e.name == k)
            .and_then(|e| e.value.clone())
    };
    assert_eq!(env_of("KUD_PLUGINS").as_deref(), Some("ovn4nfv,multus"));
    assert_eq!(env_of("POD_SUBNET").as_deref(), Some("10.244.64.0/18"));
    assert_eq!(
        env_of("KUBECONFIG_SECRET").as_deref(),
        Some("c1-kubeconfig")
    );
    assert_eq!(env_of("INSTALLER_SSH_USER").as_deref(), Some("ops"));
    assert_eq!(env_of("SSH_HOST_CA"), Some(site_ssh_ca(tmp.path())));
    assert_eq!(env_of("INSTALLER_TASK"), None);
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("cluster-1-installer")
    );
    let volumes = pod.volumes.unwrap();
    assert!(volumes.iter().any(
        |v| v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some("ssh-key-secret")
    ));

    let p = until("phase Installing", || async {
        get_prov(&provs, "cluster-1")
            .await
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Installing"))
    })
    .await;
    assert_eq!(condition(&p, "HostsMatched").unwrap().0, "True");
    let hosts = &p.status.as_ref().unwrap().hosts;
    assert_eq!(hosts.len(), 2);
    assert_eq!(
        (
            hosts[1].label.as_str(),
            hosts[1].role.as_str(),
            hosts[1].mac_address.as_str()
        ),
        ("worker-1", "worker", "00:c6:14:04:61:b3")
    );
    assert_eq!(hosts[1].ip.as_deref(), Some("10.10.0.12"));
    assert_eq!(hosts[1].bare_metal_host.as_deref(), Some("node-b"));
    assert_eq!(hosts[1].state.as_deref(), Some("externally provisioned"));
    assert!(p
        .finalizers()
        .iter()
        .any(|f| f == "bpa.akraino.org/cleanup"));

    // Its pod cannot pull the image: the Provisioning says so, still Installing, until the pod runs.
    let pull = "Back-off pulling image \"registry.example/kud-installer:v1\"";
    let (job, owner) = (
        "cluster-1-install-g1",
        ("bpa.akraino.org/provisioning", "cluster-1"),
    );
    waiting_attempt(&client, &ns, job, owner, Some(("ImagePullBackOff", pull))).await;
    let waiting = |reason: &'static str| {
        let provs = provs.clone();
        move || {
            let provs = provs.clone();
            async move {
                get_prov(&provs, "cluster-1")
                    .await
                    .filter(|p| condition(p, "Installing").is_some_and(|c| c.1 == reason))
            }
        }
    };
    let p = until("the failure in the status", waiting("InstallerWaiting")).await;
    let why =
        format!("installer Job {job} cannot start: pod {job}-w4h9q: ImagePullBackOff: {pull}");
    let ready = condition(&p, "Ready").unwrap();
    assert_eq!(
        (p.status.as_ref().unwrap().phase.as_deref(), ready),
        (
            Some("Installing"),
            (
                "False".into(),
                "InstallerWaiting".into(),
                why.clone(),
                Some(1)
            )
        )
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    until("a Warning event naming it", || async {
        let items = events.list(&ListParams::default()).await.unwrap().items;
        items.into_iter().find(|e| {
            (e.type_.as_deref(), e.reason.as_deref(), e.note.as_deref())
                == (Some("Warning"), Some("InstallerWaiting"), Some(&why))
        })
    })
    .await;
    waiting_attempt(&client, &ns, job, owner, None).await;
    until("Installing back to JobRunning", waiting("JobRunning")).await;

    // The installer succeeds and writes the kubeconfig.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets.create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": "c1-kubeconfig"}, "stringData": {"kubeconfig": "apiVersion: v1\nkind: Config\n"},
    })).unwrap()).await.unwrap();
    job_status(&client, &ns, "cluster-1-install-g1", true).await;
    let p = until("phase Ready", || async {
        get_prov(&provs, "cluster-1")
            .await
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready"))
    })
    .await;
    let st = p.status.clone().unwrap();
    assert_eq!(st.kubeconfig_secret_ref.unwrap().name, "c1-kubeconfig");
    assert_eq!(
        condition(&p, "Ready").unwrap(),
        (
            "True".into(),
            "Installed".into(),
            "kubeconfig in Secret c1-kubeconfig".into(),
            Some(1)
        )
    );
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("cluster-1"))
        .filter_map(|e| e.reason)
        .collect();
    assert!(
        reasons.iter().any(|r| r == "Ready") && reasons.iter().any(|r| r == "Installing"),
        "events: {reasons:?}"
    );

    // A spec change (new generation) runs a new Job and drops the old one; its failure is reported.
    provs
        .patch(
            "cluster-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"PodSubnet": "10.245.0.0/16"}})),
        )
        .await
        .unwrap();
    until("the generation-2 Job", || async {
        jobs.get_opt("cluster-1-install-g2").await.unwrap()
    })
    .await;
    until("the generation-1 Job gone", || async {
        jobs.get_opt("cluster-1-install-g1")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    // The Job's last attempt said why it failed, in its termination message.
    failed_attempt(
        &client,
        &ns,
        "cluster-1-install-g2",
        "FAILED: master-0 (10.0.0.5): connect: master-0 (10.0.0.5): connection refused\n",
    )
    .await;
    job_status(&client, &ns, "cluster-1-install-g2", false).await;
    let p = until("phase Failed", || async {
        get_prov(&provs, "cluster-1")
            .await
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
    })
    .await;
    let failed = condition(&p, "Failed").unwrap();
    assert_eq!(
        (failed.0.as_str(), failed.1.as_str(), failed.3),
        ("True", "JobFailed", Some(2))
    );
    assert_eq!(
        failed.2,
        "installer Job cluster-1-install-g2 failed: FAILED: master-0 (10.0.0.5): connect: master-0 (10.0.0.5): \
         connection refused (BackoffLimitExceeded: Job has reached the specified backoff limit)"
    );

    // Delete: the finalizer removes every object the reconciler created, then lets the Provisioning go.
    provs
        .delete("cluster-1", &DeleteParams::default())
        .await
        .unwrap();
    until("the Provisioning gone", || async {
        get_prov(&provs, "cluster-1").await.is_none().then_some(())
    })
    .await;
    let lp = ListParams::default().labels("bpa.akraino.org/provisioning=cluster-1");
    assert!(jobs.list(&lp).await.unwrap().items.is_empty());
    assert!(cms.list(&lp).await.unwrap().items.is_empty());
    assert!(Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .list(&lp)
        .await
        .unwrap()
        .items
        .is_empty());
    assert!(Api::<Role>::namespaced(client.clone(), &ns)
        .list(&lp)
        .await
        .unwrap()
        .items
        .is_empty());
    assert!(Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .list(&lp)
        .await
        .unwrap()
        .items
        .is_empty());
    assert!(secrets.get_opt("c1-kubeconfig").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_unfit_and_unprovisioned_hosts_are_conditions_until_the_hosts_change() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "bpa-hosts").await;
    let tmp = tempfile::tempdir().unwrap();
    let _agent = start_agent(tmp.path(), &ns, "agent-a");
    bmh(
        &client,
        &ns,
        ("x", "02:00:00:00:00:01", "10.0.0.1", 8, 8192, "available"),
        json!({}),
    )
    .await;
    bmh(
        &client,
        &ns,
        ("y", "02:00:00:00:00:02", "10.0.0.2", 2, 8192, "provisioned"),
        json!({}),
    )
    .await;
    let provs: Api<Provisioning> = Api::namespaced(client.clone(), &ns);
    provs
        .create(
            &PostParams::default(),
            &provisioning(
                "p",
                "p",
                json!({
                    "masters": [{"m1": {"mac-address": "02:00:00:00:00:01"}}],
                    "workers": [{"w1": {"mac-address": "02:00:00:00:00:02", "cpu": 8}},
                                {"w2": {"mac-address": "02:00:00:00:00:03"}}],
                }),
            ),
        )
        .await
        .unwrap();
    let p = until("HostsMatched=False", || async {
        get_prov(&provs, "p")
            .await
            .filter(|p| condition(p, "HostsMatched").is_some())
    })
    .await;
    let (status, reason, message, _) = condition(&p, "HostsMatched").unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "HostNotProvisioned")
    );
    assert_eq!(
        message,
        "m1: BareMetalHost x is \"available\", not provisioned; \
        w1: BareMetalHost y is unfit: 2 CPUs, 8 required; \
        w2: no BareMetalHost has MAC address 02:00:00:00:00:03"
    );
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    assert!(
        jobs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no Job while hosts are missing"
    );

    // The hosts change: the BareMetalHost watch re-plans without any change to the Provisioning.
    set_bmh_status(
        &client,
        &ns,
        ("x", "02:00:00:00:00:01", "10.0.0.1", 8, 8192, "provisioned"),
    )
    .await;
    set_bmh_status(
        &client,
        &ns,
        (
            "y",
            "02:00:00:00:00:02",
            "10.0.0.2",
            16,
            8192,
            "provisioned",
        ),
    )
    .await;
    bmh(
        &client,
        &ns,
        ("z", "02:00:00:00:00:03", "10.0.0.3", 4, 4096, "provisioned"),
        json!({}),
    )
    .await;
    until("the installer Job", || async {
        jobs.get_opt("p-install-g1").await.unwrap()
    })
    .await;
    let p = until("HostsMatched=True", || async {
        get_prov(&provs, "p")
            .await
            .filter(|p| condition(p, "HostsMatched").is_some_and(|c| c.0 == "True"))
    })
    .await;
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Installing"));
}
