//! The Software reconciler (BPA's packages on a provisioned cluster) against a real kube-apiserver: uploads
//! through the agent's REST API, the installer Job played by the test, and the cluster status REST adds.

use crate::bpa::{get_prov, one_master, provisioning, site_ssh_ca, start_agent, ADVERTISED};
use crate::hosts::bmh;
use crate::jobs::{ended_attempt, job_status, waiting_attempt};
use crate::support;
use crate::support::kube::{env, until};
use crate::support::Agent;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::{json, Value};

use foothold_agent::crd::bpa::{Provisioning, Software};

fn sw_condition(s: &Software, type_: &str) -> Option<(String, String, String)> {
    s.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn sw_phase(s: &Software) -> Option<&str> {
    s.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// Creates a binary_images record of `length` bytes and uploads `content` into it (all of it, or a part).
pub(crate) fn upload(
    agent: &Agent,
    owner: &str,
    cluster: &str,
    name: &str,
    length: usize,
    content: &[u8],
) {
    let http = support::http();
    let base = agent.url(&format!(
        "/v1/baremetalcluster/{owner}/{cluster}/binary_images"
    ));
    let created = http
        .post(&base)
        .header("Content-Type", "application/json")
        .send(json!({"image_name": name, "image_length": length}).to_string())
        .unwrap();
    assert_eq!(created.status(), 201);
    append(agent, owner, cluster, name, 0, content);
}

fn append(agent: &Agent, owner: &str, cluster: &str, name: &str, offset: usize, content: &[u8]) {
    let url = agent.url(&format!(
        "/v1/baremetalcluster/{owner}/{cluster}/binary_images/{name}"
    ));
    let r = support::http()
        .patch(&url)
        .header("Upload-Offset", &offset.to_string())
        .header("Content-Type", "application/offset+octet-stream")
        .send(content)
        .unwrap();
    assert_eq!(r.status(), 204, "PATCH {name}");
}

pub(crate) fn get_json(agent: &Agent, path: &str) -> Value {
    let body = support::http()
        .get(&agent.url(path))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    serde_json::from_str(&body).unwrap()
}

/// Makes the Provisioning's cluster Ready the way the installer would: kubeconfig Secret, then Job success.
/// The Job the Software `tools` names in its status once it starts with `prefix` (its generations: the rest is
/// the package manifest's digest).
async fn job_of(sws: &Api<Software>, prefix: &str) -> String {
    until(
        &format!("a Job {prefix}… in the Software's status"),
        || async {
            sws.get_opt("tools")
                .await
                .unwrap()
                .and_then(|s| s.status?.job_name)
                .filter(|n| n.starts_with(prefix))
        },
    )
    .await
}

/// The names of the Jobs `selected`.
async fn job_names(jobs: &Api<Job>, selected: &ListParams) -> Vec<String> {
    let list = jobs.list(selected).await.unwrap();
    list.items.iter().map(|j| j.name_any()).collect()
}

async fn install_cluster(client: &kube::Client, ns: &str, prov: &str, cluster: &str) {
    Api::<Secret>::namespaced(client.clone(), ns).create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": format!("{cluster}-kubeconfig")}, "stringData": {"kubeconfig": "apiVersion: v1\n"},
    })).unwrap()).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let job = format!("{prov}-install-g1");
    until("the installer Job", || async {
        jobs.get_opt(&job).await.unwrap()
    })
    .await;
    job_status(client, ns, &job, true).await;
    let provs: Api<Provisioning> = Api::namespaced(client.clone(), ns);
    until("phase Ready", || async {
        get_prov(&provs, prov)
            .await
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn software_installs_uploaded_packages_once_the_cluster_is_ready_and_rest_status_shows_both()
{
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "bpa-software").await;
    let tmp = tempfile::tempdir().unwrap();
    let agent = start_agent(tmp.path(), &ns, "agent-a");
    one_master(
        &client,
        &ns,
        ("n1", "02:00:00:00:01:01", "10.0.1.1"),
        ("c2-prov", "c2"),
        Some((8, 16384)),
    )
    .await;
    let sws: Api<Software> = Api::namespaced(client.clone(), &ns);
    let sw: Software = serde_json::from_value(json!({
        "apiVersion": "bpa.akraino.org/v1alpha1", "kind": "Software",
        "metadata": {"name": "tools", "labels": {"cluster": "c2"}},
        "spec": {"masterSoftware": ["tool", {"kubectl": {"version": "1.33.4"}}],
                 "workerSoftware": ["tool"]},
    }))
    .unwrap();
    sws.create(&PostParams::default(), &sw).await.unwrap();

    // The cluster is still installing: the Software waits and runs nothing.
    let s = until("Software waiting for its cluster", || async {
        sws.get_opt("tools")
            .await
            .unwrap()
            .filter(|s| sw_condition(s, "ClusterReady").is_some_and(|c| c.1 == "ClusterNotReady"))
    })
    .await;
    assert_eq!(sw_phase(&s), Some("Pending"));
    assert!(sw_condition(&s, "ClusterReady")
        .unwrap()
        .2
        .contains("Provisioning c2-prov is"));
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let of_sw = ListParams::default().labels("bpa.akraino.org/software=tools");
    assert!(jobs.list(&of_sw).await.unwrap().items.is_empty());

    // Ready cluster, packages not uploaded: each missing record is named.
    install_cluster(&client, &ns, "c2-prov", "c2").await;
    let s = until("Software waiting for uploads", || async {
        sws.get_opt("tools")
            .await
            .unwrap()
            .filter(|s| sw_condition(s, "PackagesAvailable").is_some())
    })
    .await;
    assert_eq!(
        sw_condition(&s, "PackagesAvailable").unwrap(),
        (
            "False".into(),
            "PackagesMissing".into(),
            "tool: no binary_images record tool for tenant-a/c2; \
             kubectl: no binary_images record kubectl-1.33.4 for tenant-a/c2"
                .into()
        )
    );
    assert_eq!(sw_phase(&s), Some("Pending"));

    // One upload finishes, one is half done: the store's change re-plans without any Kubernetes event.
    let tool = b"#!/bin/sh\necho tool\n".to_vec();
    let kubectl = vec![7u8; 4096];
    upload(&agent, "tenant-a", "c2", "tool", tool.len(), &tool);
    upload(
        &agent,
        "tenant-a",
        "c2",
        "kubectl-1.33.4",
        kubectl.len(),
        &kubectl[..1000],
    );
    until("only kubectl missing", || async {
        sws.get_opt("tools").await.unwrap().filter(|s| {
            sw_condition(s, "PackagesAvailable").is_some_and(|c| {
                c.2 == "kubectl: the upload of binary_images record kubectl-1.33.4 is not complete"
            })
        })
    })
    .await;
    assert!(jobs.list(&of_sw).await.unwrap().items.is_empty());
    append(
        &agent,
        "tenant-a",
        "c2",
        "kubectl-1.33.4",
        1000,
        &kubectl[1000..],
    );

    // Everything uploaded: the manifest and the Job, named by the generations and the manifest's digest.
    let g1 = job_of(&sws, "tools-install-g1-c").await;
    let job = until("the package installer Job", || async {
        jobs.get_opt(&g1).await.unwrap()
    })
    .await;
    let manifest = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("tools-packages")
        .await
        .unwrap();
    let manifest: Value = serde_json::from_str(&manifest.data.unwrap()["packages.json"]).unwrap();
    let sha = |b: &[u8]| {
        support::sha256_digest(b)
            .trim_start_matches("sha256:")
            .to_owned()
    };
    assert_eq!(
        manifest,
        json!({"owner": "tenant-a", "cluster": "c2", "packages": [
            {"name": "tool", "version": null, "groups": ["kube_control_plane", "kube_node"],
             "url": format!("{ADVERTISED}/files/tenant-a/c2/binary_images/tool"), "sha256": sha(&tool)},
            {"name": "kubectl", "version": "1.33.4", "groups": ["kube_control_plane"],
             "url": format!("{ADVERTISED}/files/tenant-a/c2/binary_images/kubectl-1.33.4"),
             "sha256": sha(&kubectl)},
        ]})
    );
    // The manifest's URLs are the agent's own /files.
    for p in manifest["packages"].as_array().unwrap() {
        let path = p["url"].as_str().unwrap().trim_start_matches(ADVERTISED);
        let mut r = support::http().get(&agent.url(path)).call().unwrap();
        let body = r
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .unwrap();
        assert_eq!(sha(&body), p["sha256"].as_str().unwrap());
    }
    let pod = job.spec.unwrap().template.spec.unwrap();
    let c = &pod.containers[0];
    let env_of = |k: &str| {
        c.env
            .as_ref()
            .unwrap()
            .iter()
            .find(|e| e.name == k)
            .and_then(|e| e.value.clone())
    };
    assert_eq!(env_of("INSTALLER_TASK").as_deref(), Some("software"));
    assert_eq!(env_of("INSTALLER_SSH_USER").as_deref(), Some("ops"));
    assert_eq!(env_of("SSH_HOST_CA"), Some(site_ssh_ca(tmp.path())));
    assert_eq!(
        c.image.as_deref(),
        Some("registry.example/kud-installer:v1")
    );
    let volumes: Vec<(String, String)> = pod
        .volumes
        .unwrap()
        .into_iter()
        .map(|v| {
            let source = v
                .config_map
                .map(|c| c.name)
                .or(v.secret.and_then(|s| s.secret_name))
                .unwrap();
            (v.name, source)
        })
        .collect();
    assert_eq!(
        volumes,
        [
            ("inventory".into(), "c2-prov-inventory".into()),
            ("packages".into(), "tools-packages".into()),
            ("kubeconfig".into(), "c2-kubeconfig".into()),
            ("ssh".into(), "ssh-key-secret".into()),
        ]
    );
    until("Software Installing", || async {
        sws.get_opt("tools")
            .await
            .unwrap()
            .filter(|s| sw_phase(s) == Some("Installing"))
    })
    .await;
    // A pod whose installer's inputs cannot be made: the Software says so, still Installing.
    let owner = ("bpa.akraino.org/software", "tools");
    let missing = "secret \"ssh-key-secret\" not found";
    waiting_attempt(
        &client,
        &ns,
        &g1,
        owner,
        Some(("CreateContainerConfigError", missing)),
    )
    .await;
    let s = until("the installer's config error in the status", || async {
        sws.get_opt("tools")
            .await
            .unwrap()
            .filter(|s| sw_condition(s, "Installing").is_some_and(|c| c.1 == "InstallerWaiting"))
    })
    .await;
    assert_eq!(
        (sw_phase(&s), sw_condition(&s, "Installed").unwrap()),
        (
            Some("Installing"),
            (
                "False".into(),
                "InstallerWaiting".into(),
                format!("package installer Job {g1} cannot start: pod {g1}-w4h9q: CreateContainerConfigError: {missing}")
            )
        )
    );

    job_status(&client, &ns, &g1, true).await;
    let s = until("Software Installed", || async {
        sws.get_opt("tools")
            .await
            .unwrap()
            .filter(|s| sw_phase(s) == Some("Installed"))
    })
    .await;
    let st = s.status.unwrap();
    assert_eq!(st.provisioning.as_deref(), Some("c2-prov"));
    assert_eq!(st.packages.len(), 2);
    assert!(st
        .packages
        .iter()
        .all(|p| p.problem.is_none() && p.sha256.is_some()));

    // The REST status shows the images, the Provisioning and the Software; another owner sees none of it.
    let status = get_json(&agent, "/v1/baremetalcluster/tenant-a/c2/status");
    assert_eq!(status["kubernetes"], json!({"state": "ok"}));
    assert_eq!(
        status["images"]["binary_images"].as_array().unwrap().len(),
        2
    );
    assert_eq!(status["provisioning"][0]["name"], "c2-prov");
    assert_eq!(status["provisioning"][0]["namespace"], ns.as_str());
    assert_eq!(status["provisioning"][0]["status"]["phase"], "Ready");
    assert_eq!(
        status["provisioning"][0]["status"]["kubeconfigSecretRef"]["name"],
        "c2-kubeconfig"
    );
    assert_eq!(status["software"][0]["name"], "tools");
    assert_eq!(status["software"][0]["status"]["phase"], "Installed");
    let other = get_json(&agent, "/v1/baremetalcluster/tenant-b/c2/status");
    assert_eq!(other["provisioning"], json!([]));
    assert_eq!(other["software"], json!([]));

    // New content for a package it names (the tool's record deleted and uploaded again, changed): the
    // installer runs again with a new Job, for the same generations; the old one goes, and only the new one is
    // left once it finished.
    let manifest_digest = |m: &ConfigMap| {
        support::sha256_digest(m.data.as_ref().unwrap()["packages.json"].as_bytes())
    };
    let before = manifest_digest(
        &Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .get("tools-packages")
            .await
            .unwrap(),
    );
    let tool2 = b"#!/bin/sh\necho tool 2\n".to_vec();
    let record = agent.url("/v1/baremetalcluster/tenant-a/c2/binary_images/tool");
    let r = support::http().delete(&record).call().unwrap();
    assert_eq!(r.status(), 204);
    upload(&agent, "tenant-a", "c2", "tool", tool2.len(), &tool2);
    let updated = until("a Job for the new content", || async {
        let name = job_of(&sws, "tools-install-g1-c").await;
        (name != g1).then_some(name)
    })
    .await;
    until("the Job for the old content gone", || async {
        jobs.get_opt(&g1).await.unwrap().is_none().then_some(())
    })
    .await;
    let after = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("tools-packages")
        .await
        .unwrap();
    assert_ne!(manifest_digest(&after), before);
    assert!(
        after.data.as_ref().unwrap()["packages.json"].contains(&sha(&tool2)),
        "the manifest names the new content"
    );
    // The installer's report (its termination message) becomes the status's hosts, failures first.
    let report = |hosts: serde_json::Value| json!({"hosts": hosts}).to_string();
    ended_attempt(
        &client,
        &ns,
        &updated,
        0,
        &report(json!([
            {"host": "n1", "state": "Unchanged", "detail": "binary /usr/local/bin/kubectl already installed"},
            {"host": "n1b", "state": "Updated", "detail": "binary /usr/local/bin/tool installed"}])),
    )
    .await;
    job_status(&client, &ns, &updated, true).await;
    let s = until("Software Installed again", || async {
        sws.get_opt("tools")
            .await
            .unwrap()
            .filter(|s| sw_phase(s) == Some("Installed"))
    })
    .await;
    let hosts = |s: &Software| -> Vec<(String, String, String)> {
        let st = s.status.clone().unwrap_or_default();
        st.hosts
            .into_iter()
            .map(|h| (h.name, h.state, h.detail))
            .collect()
    };
    assert_eq!(
        hosts(&s),
        [
            (
                "n1".into(),
                "Unchanged".into(),
                "binary /usr/local/bin/kubectl already installed".into()
            ),
            (
                "n1b".into(),
                "Updated".into(),
                "binary /usr/local/bin/tool installed".into()
            )
        ]
    );
    assert_eq!(
        sw_condition(&s, "Installed").unwrap().2,
        format!("package installer Job {updated} finished: 1 updated, 1 unchanged")
    );
    let names = job_names(&jobs, &of_sw).await;
    assert_eq!(names, std::slice::from_ref(&updated));

    // The Provisioning's healing changed (a new generation that installs nothing new): once the BPA has seen it,
    // the Software keeps its Job and report, and no new Job runs.
    let provs: Api<Provisioning> = Api::namespaced(client.clone(), &ns);
    let changed = provs
        .patch(
            "c2-prov",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"healing": {"notReadySeconds": 600}}})),
        )
        .await
        .unwrap();
    let generation = changed.metadata.generation;
    until("the BPA has seen the healing change", || async {
        get_prov(&provs, "c2-prov").await.filter(|p| {
            let st = p.status.as_ref();
            st.and_then(|s| s.observed_generation) == generation
                && st.and_then(|s| s.phase.as_deref()) == Some("Ready")
        })
    })
    .await;
    // The Software has planned with that generation of its cluster (its ClusterReady condition names it).
    let seen = format!(
        "Provisioning c2-prov is Ready (generation {})",
        generation.unwrap_or(0)
    );
    let s = until("the Software following the new generation", || async {
        sws.get_opt("tools")
            .await
            .unwrap()
            .filter(|s| sw_condition(s, "ClusterReady").is_some_and(|c| c.2 == seen))
    })
    .await;
    assert_eq!(sw_phase(&s), Some("Installed"), "{:?}", s.status);
    assert_eq!(
        s.status.as_ref().and_then(|st| st.job_name.as_deref()),
        Some(updated.as_str())
    );
    let names = job_names(&jobs, &of_sw).await;
    assert_eq!(
        names,
        std::slice::from_ref(&updated),
        "a Job for a healing change"
    );

    // A spec change installs again with a new Job; the old one goes.
    sws.patch(
        "tools",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"masterSoftware": ["tool"], "maxUnavailable": 2}})),
    )
    .await
    .unwrap();
    let g2 = job_of(&sws, "tools-install-g2-c").await;
    let job = until("the generation-2 Job", || async {
        jobs.get_opt(&g2).await.unwrap()
    })
    .await;
    let env = job.spec.unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap_or_default();
    let at_once = env.iter().find(|e| e.name == "MAX_UNAVAILABLE");
    assert_eq!(at_once.and_then(|e| e.value.as_deref()), Some("2"));
    let s = until(
        "the Software Installing with the generation-2 Job",
        || async {
            sws.get_opt("tools").await.unwrap().filter(|s| {
                let st = s.status.as_ref();
                sw_phase(s) == Some("Installing")
                    && st.and_then(|st| st.job_name.as_deref()) == Some(g2.as_str())
            })
        },
    )
    .await;
    assert_eq!(hosts(&s), [], "a running Job's hosts are not known yet");
    until("the generation-1 Job gone", || async {
        jobs.get_opt(&updated)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    ended_attempt(
        &client,
        &ns,
        &g2,
        1,
        &report(json!([
            {"host": "n1", "state": "Failed", "detail": "tool: https://x/tool (exit status 1): no space left"},
            {"host": "n1b", "state": "Skipped", "detail": "not started: n1 failed first"}])),
    )
    .await;
    job_status(&client, &ns, &g2, false).await;
    let s = until("Software Failed", || async {
        sws.get_opt("tools")
            .await
            .unwrap()
            .filter(|s| sw_phase(s) == Some("Failed"))
    })
    .await;
    let failed = sw_condition(&s, "Failed").unwrap();
    assert_eq!(
        (failed.0.as_str(), failed.1.as_str()),
        ("True", "JobFailed")
    );
    assert!(
        failed.2.starts_with(&format!(
            "package installer Job {g2} failed: 1 failed, 1 skipped; n1: tool: https://x/tool (exit status 1): no space left"
        )),
        "{}",
        failed.2
    );
    assert_eq!(
        hosts(&s).iter().map(|h| h.1.as_str()).collect::<Vec<_>>(),
        ["Failed", "Skipped"]
    );

    // Delete: the finalizer removes the Jobs and the manifest.
    sws.delete("tools", &DeleteParams::default()).await.unwrap();
    until("the Software gone", || async {
        sws.get_opt("tools").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(jobs.list(&of_sw).await.unwrap().items.is_empty());
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .list(&of_sw)
        .await
        .unwrap()
        .items
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_reconcile_and_restarted_reaches_the_same_end_state() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "bpa-restart").await;
    let tmp = tempfile::tempdir().unwrap();
    let mut agent = start_agent(tmp.path(), &ns, "agent-r");
    bmh(
        &client,
        &ns,
        (
            "r1",
            "02:00:00:00:02:01",
            "10.0.2.1",
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
            "r2",
            "02:00:00:00:02:02",
            "10.0.2.2",
            8,
            16384,
            "provisioned",
        ),
        json!({}),
    )
    .await;
    let provs: Api<Provisioning> = Api::namespaced(client.clone(), &ns);
    provs
        .create(
            &PostParams::default(),
            &provisioning(
                "rp",
                "rp",
                json!({"masters": [{"m": {"mac-address": "02:00:00:00:02:01"}}],
                       "workers": [{"w": {"mac-address": "02:00:00:00:02:02"}}]}),
            ),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);

    // SIGKILL as soon as the first object of the reconcile is written (the inventory, before the RBAC objects
    // and the Job), and restart the same agent on the same data.
    until("the inventory ConfigMap", || async {
        cms.get_opt("rp-inventory").await.unwrap()
    })
    .await;
    agent.kill();
    let after_first_kill = jobs.list(&ListParams::default()).await.unwrap().items.len();
    let mut agent = start_agent(tmp.path(), &ns, "agent-r");
    // Again as soon as the Job exists, before the status says Installing.
    until("the installer Job", || async {
        jobs.get_opt("rp-install-g1").await.unwrap()
    })
    .await;
    agent.kill();
    let _agent = start_agent(tmp.path(), &ns, "agent-r");
    let p = until("phase Installing", || async {
        get_prov(&provs, "rp")
            .await
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Installing"))
    })
    .await;
    assert!(after_first_kill <= 1);
    // The same end state as an uninterrupted reconcile: one Job, every installer object, the finalizer.
    assert_eq!(
        job_names(&jobs, &ListParams::default()).await,
        ["rp-install-g1"]
    );
    for (kind, present) in [
        (
            "ServiceAccount",
            Api::<ServiceAccount>::namespaced(client.clone(), &ns)
                .get_opt("rp-installer")
                .await
                .unwrap()
                .is_some(),
        ),
        (
            "Role",
            Api::<Role>::namespaced(client.clone(), &ns)
                .get_opt("rp-installer")
                .await
                .unwrap()
                .is_some(),
        ),
        (
            "RoleBinding",
            Api::<RoleBinding>::namespaced(client.clone(), &ns)
                .get_opt("rp-installer")
                .await
                .unwrap()
                .is_some(),
        ),
    ] {
        assert!(present, "{kind} rp-installer missing after the restarts");
    }
    assert!(p
        .finalizers()
        .iter()
        .any(|f| f == "bpa.akraino.org/cleanup"));
    assert_eq!(p.status.as_ref().unwrap().hosts.len(), 2);
    assert_eq!(
        p.status.as_ref().unwrap().job_name.as_deref(),
        Some("rp-install-g1")
    );
    install_cluster(&client, &ns, "rp", "rp").await;
}
