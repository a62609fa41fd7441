//! The BPA heals a workload cluster's nodes, against real kube-apiservers: the site's (the agent binary with
//! `--controllers bpa`, genuine Metal3 BareMetalHosts; the test plays the installer and BMO) and the workload
//! cluster's, a control plane of the test's own whose Nodes and pods the test makes and marks `NotReady` (no
//! kubelet, no node or disruption controller there). Both nodes unhealthy with the share at 50 %: nothing is
//! drained or rebooted and the condition and an Event say why. The master `Ready` again: the worker's
//! remediation starts with its drain (an Event `Remediating`, the condition, the node cordoned, a pod evicted
//! and not waited for, since no kubelet can end it; a pod whose PodDisruptionBudget allows nothing stays), and
//! no reboot while the drain has time; past `drainTimeoutSeconds` its host gets BMO's reboot annotation and a
//! Warning `Rebooting` names the pod left. The worker `Ready` again: the remediation ends `Healed`, the node is
//! schedulable again, the cluster is `Healthy`. Healing turned off (a new generation
//! that installs nothing new: the Job stays generation 1's), the worker down again is only reported.

use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::bpa::{get_prov, provisioning, start_agent};
use crate::hosts::bmh;
use crate::jobs::job_status;
use crate::support::kube::{env, until, OwnPlane};
use foothold_agent::crd::bpa::Provisioning;
use foothold_agent::crd::metal3::BareMetalHost;

/// Sets node `name`'s `Ready` condition, changed `ago` seconds ago.
pub(crate) async fn ready(nodes: &Api<Node>, name: &str, status: &str, ago: i64) {
    let at = (Timestamp::now() - SignedDuration::from_secs(ago)).to_string();
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{
                "type": "Ready", "status": status, "reason": "Test", "message": "set by the test",
                "lastHeartbeatTime": at, "lastTransitionTime": at,
            }]}})),
        )
        .await
        .unwrap();
}

/// The `Healthy` condition's `(status, reason, message)`.
fn healthy(p: &Provisioning) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Healthy")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The note of the Event of `reason` in `ns`, once there is one.
pub(crate) async fn event(client: &kube::Client, ns: &str, reason: &str) -> String {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    until(&format!("an Event {reason}"), || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .and_then(|e| e.note)
    })
    .await
}

/// Provisioning `c1`'s cluster installed on `workload`: its kubeconfig Secret written and its first Job
/// succeeded, as the installer would.
pub(crate) async fn installed_on(client: &kube::Client, ns: &str, workload: &OwnPlane) {
    let kubeconfig = std::fs::read_to_string(&workload.env.kubeconfig).unwrap();
    let secret =
        json!({"metadata": {"name": "c1-kubeconfig"}, "stringData": {"kubeconfig": kubeconfig}});
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(secret).unwrap(),
        )
        .await
        .unwrap();
    let provs: Api<Provisioning> = Api::namespaced(client.clone(), ns);
    until("the installer Job", || async {
        get_prov(&provs, "c1")
            .await
            .and_then(|p| p.status?.job_name)
    })
    .await;
    job_status(client, ns, "c1-install-g1", true).await;
}

/// Node `name` of the workload cluster with the role `role` (`control-plane`, `worker`), no condition yet.
pub(crate) async fn workload_node(nodes: &Api<Node>, name: &str, role: &str) {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {format!("node-role.kubernetes.io/{role}"): ""}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
}

/// A cluster `c1` of master `m` and worker `w` installed on `workload`: their Nodes, their BareMetalHosts
/// `node-a` and `node-b` (`provisioned`, with `hosts`' MAC and address each), Provisioning `c1` with `healing`,
/// its first Job succeeded. Returns the workload cluster's Nodes.
pub(crate) async fn two_node_cluster(
    (client, ns, workload): (&kube::Client, &str, &OwnPlane),
    hosts: [(&str, &str); 2],
    healing: serde_json::Value,
) -> Api<Node> {
    let nodes: Api<Node> = Api::all(workload.env.client().await);
    workload_node(&nodes, "m", "control-plane").await;
    workload_node(&nodes, "w", "worker").await;
    for (name, (mac, ip)) in ["node-a", "node-b"].into_iter().zip(hosts) {
        bmh(
            client,
            ns,
            (name, mac, ip, 4, 4096, "provisioned"),
            json!({}),
        )
        .await;
    }
    let [(m_mac, _), (w_mac, _)] = hosts;
    Api::<Provisioning>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &provisioning(
                "c1",
                "c1",
                json!({"masters": [{"m": {"mac-address": m_mac}}], "workers": [{"w": {"mac-address": w_mac}}],
                       "healing": healing}),
            ),
        )
        .await
        .unwrap();
    installed_on(client, ns, workload).await;
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_not_ready_is_rebooted_through_its_host_unless_too_many_are() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "bpa-heal").await;
    let tmp = tempfile::tempdir().unwrap();
    let _agent = start_agent(tmp.path(), &ns, "agent-h");
    let workload = tokio::task::spawn_blocking(|| OwnPlane::start("bpa-heal"))
        .await
        .unwrap();
    let (m_mac, w_mac) = ("00:c6:14:04:63:01", "00:c6:14:04:63:02");
    let nodes = two_node_cluster(
        (&client, &ns, &workload),
        [(m_mac, "10.20.1.11"), (w_mac, "10.20.1.12")],
        json!({"notReadySeconds": 30, "drainTimeoutSeconds": 20}),
    )
    .await;
    for name in ["m", "w"] {
        ready(&nodes, name, "False", 120).await;
    }
    let provs: Api<Provisioning> = Api::namespaced(client.clone(), &ns);
    // On the worker: a pod, and one a PodDisruptionBudget keeps (no disruption controller: it allows nothing).
    let wclient = workload.env.client().await;
    let pods: Api<Pod> = Api::namespaced(wclient.clone(), "default");
    for app in ["web", "db"] {
        let pod = json!({
            "metadata": {"name": app, "labels": {"app": app}},
            "spec": {"nodeName": "w", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10.1"}]},
        });
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap();
        // Running (a pending pod's eviction ignores budgets), as its kubelet last said.
        let running = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        pods.patch_status(app, &PatchParams::default(), &Patch::Merge(running))
            .await
            .unwrap();
    }
    let pdb = json!({"metadata": {"name": "db"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}});
    Api::<PodDisruptionBudget>::namespaced(wclient, "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(pdb).unwrap(),
        )
        .await
        .unwrap();
    let cordoned = |name: &'static str| {
        let nodes = nodes.clone();
        async move {
            let node = nodes.get(name).await.unwrap();
            node.spec.and_then(|s| s.unschedulable).unwrap_or(false)
        }
    };
    let evicted = |name: &'static str| {
        let pods = pods.clone();
        async move {
            pods.get(name)
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some()
        }
    };

    let condition_is = |reason: &'static str| {
        let provs = provs.clone();
        move || {
            let provs = provs.clone();
            async move {
                get_prov(&provs, "c1")
                    .await
                    .and_then(|p| healthy(&p).filter(|(_, r, _)| r == reason).map(|h| (p, h)))
            }
        }
    };
    // Both unhealthy, and the share at 50 %: held.
    let (_, (status, _, message)) =
        until("held by the share", condition_is("TooManyUnhealthy")).await;
    assert_eq!(status, "False");
    assert!(
        message.ends_with("2 of 2 nodes unhealthy, more than 50 %: nothing is remediated"),
        "{message}"
    );
    assert!(event(&client, &ns, "TooManyUnhealthy")
        .await
        .contains("2 of 2 nodes unhealthy"));
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    let asked = |name: &'static str| {
        let hosts = hosts.clone();
        async move {
            hosts
                .get(name)
                .await
                .unwrap()
                .metadata
                .annotations
                .is_some_and(|a| a.contains_key("reboot.metal3.io"))
        }
    };
    assert!(!asked("node-a").await && !asked("node-b").await);
    assert!(!cordoned("w").await && !evicted("web").await);

    // The master Ready: the worker alone is unhealthy, within the share: drained first, within its time.
    ready(&nodes, "m", "True", 0).await;
    let (p, (_, _, message)) = until("the worker remediated", condition_is("Remediating")).await;
    assert_eq!(
        message,
        "w: drained before its reboot through BareMetalHost node-b"
    );
    let note = event(&client, &ns, "Remediating").await;
    assert!(
        note.starts_with(
            "draining w before its reboot through BareMetalHost node-b: not Ready for "
        ),
        "{note}"
    );
    assert!(cordoned("w").await, "the worker was not cordoned");
    until("web evicted", || async {
        evicted("web").await.then_some(())
    })
    .await;
    let rem = &p.status.unwrap().remediations;
    assert_eq!(rem.len(), 1, "{rem:?}");
    assert_eq!(
        (rem[0].node.as_str(), rem[0].bare_metal_host.as_str()),
        ("w", "node-b")
    );
    assert_eq!(
        (
            rem[0].drain.as_deref(),
            rem[0].cordoned,
            rem[0].outcome.as_deref()
        ),
        (Some("Draining"), Some(true), None)
    );
    // The drain has 20 s: no reboot yet (the evicted pod is not waited for, the budget's is).
    assert!(!asked("node-b").await, "rebooted before its drain's time");

    // Past its time the reboot goes ahead, and says what was left.
    until("the worker's host asked to reboot", || async {
        asked("node-b").await.then_some(())
    })
    .await;
    assert!(!asked("node-a").await);
    let note = event(&client, &ns, "Rebooting").await;
    assert!(
        note.starts_with(
            "rebooting w through BareMetalHost node-b undrained: the drain had its 20 s \
             (spec.healing.drainTimeoutSeconds): default/db still on it (eviction refused: "
        ),
        "{note}"
    );
    assert!(!evicted("db").await, "the budget's pod was evicted");
    let (p, (_, _, message)) = until("rebooting", || async {
        let p = get_prov(&provs, "c1").await?;
        let rebooted = p.status.as_ref()?.remediations.first()?.rebooted.is_some();
        rebooted.then(|| healthy(&p).map(|h| (p.clone(), h)))?
    })
    .await;
    assert_eq!(message, "w: rebooting through BareMetalHost node-b");
    let rem = &p.status.unwrap().remediations;
    assert_eq!(rem[0].drain.as_deref(), Some("TimedOut"), "{rem:?}");

    // BMO took the annotation away (the host was off); the worker is Ready again: healed.
    hosts
        .patch(
            "node-b",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"reboot.metal3.io": null}}})),
        )
        .await
        .unwrap();
    ready(&nodes, "w", "True", 0).await;
    let (p, (status, _, message)) = until("healed", condition_is("NodesReady")).await;
    assert_eq!(
        (status.as_str(), message.as_str()),
        ("True", "all 2 nodes Ready")
    );
    let rem = &p.status.unwrap().remediations;
    assert_eq!(rem[0].outcome.as_deref(), Some("Healed"), "{rem:?}");
    assert!(rem[0].ended.is_some());
    assert!(event(&client, &ns, "Healed")
        .await
        .starts_with("w is Ready again after its reboot"));
    // Nothing was asked of the host again, and the node the remediation cordoned is schedulable again.
    assert!(!asked("node-b").await);
    until("the worker schedulable again", || async {
        (!cordoned("w").await).then_some(())
    })
    .await;

    // Healing turned off: a new generation, and no new install (the Job of generation 1 stays the cluster's);
    // the worker down again is only reported.
    provs
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"healing": {"enabled": false}}})),
        )
        .await
        .unwrap();
    until("generation 2 observed", || async {
        get_prov(&provs, "c1")
            .await
            .filter(|p| p.status.as_ref().and_then(|s| s.observed_generation) == Some(2))
    })
    .await;
    ready(&nodes, "w", "False", 600).await;
    let (p, (_, _, message)) = until("healing off", condition_is("HealingDisabled")).await;
    assert!(
        message.ends_with("healing is off (spec.healing.enabled)"),
        "{message}"
    );
    let status = p.status.unwrap();
    assert_eq!(status.observed_generation, Some(2));
    assert_eq!(status.job_name.as_deref(), Some("c1-install-g1"));
    assert_eq!(status.phase.as_deref(), Some("Ready"));
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    assert!(jobs.get_opt("c1-install-g2").await.unwrap().is_none());
    assert!(!asked("node-b").await);
}
