//! A worker its reboot did not heal is re-provisioned and joined again, against real kube-apiservers (the
//! site's, with the agent binary's BPA and genuine Metal3 BareMetalHosts; the workload cluster's, a control
//! plane of the test's own whose Nodes the test makes; the test plays BMO, the kubelet and the installer Job).
//! The worker rebooted and still `NotReady` past `rebootTimeoutSeconds`: a Warning `Reprovisioning`; its host's
//! image is kept in the status and only then removed, the host marked drained (the drain hold lets it go) and
//! its Node deleted. The host cleaned (`available`): given the same image again. Provisioned again: the
//! installer Job is deleted, and the BPA makes it again. The Node back and `Ready`: `Healed`, after its
//! re-provisioning. The master, a control-plane host, is never re-provisioned.

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::bpa::{get_prov, start_agent};
use crate::bpa_heal::{event, ready, two_node_cluster, workload_node};
use crate::hosts::set_bmh_status;
use crate::jobs::job_status;
use crate::support::kube::{env, until, OwnPlane};
use foothold_agent::crd::bpa::{Provisioning, Remediation};
use foothold_agent::crd::metal3::BareMetalHost;

const IMAGE: &str = "http://172.22.0.1:8080/foothold-node.qcow2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_its_reboot_did_not_heal_is_reprovisioned_and_joined_again() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "bpa-reprovision").await;
    let tmp = tempfile::tempdir().unwrap();
    let _agent = start_agent(tmp.path(), &ns, "agent-r");
    let workload = tokio::task::spawn_blocking(|| OwnPlane::start("bpa-reprovision"))
        .await
        .unwrap();
    let (m_mac, w_mac) = ("00:c6:14:04:64:01", "00:c6:14:04:64:02");
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    // The hosts given an image once the cluster is installed on them, as BMO's provisioned hosts carry one: the
    // re-provisioning keeps it and gives it back.
    let nodes = two_node_cluster(
        (&client, &ns, &workload),
        [(m_mac, "10.20.2.11"), (w_mac, "10.20.2.12")],
        json!({"notReadySeconds": 1, "drainTimeoutSeconds": 0, "rebootTimeoutSeconds": 5}),
    )
    .await;
    for name in ["node-a", "node-b"] {
        let image = json!({"spec": {"image": {"url": IMAGE, "checksum": format!("{IMAGE}.sha256sum"),
                                              "checksumType": "sha256", "format": "qcow2"}}});
        hosts
            .patch(name, &PatchParams::default(), &Patch::Merge(image))
            .await
            .unwrap();
    }
    ready(&nodes, "m", "True", 0).await;
    ready(&nodes, "w", "True", 0).await;
    let provs: Api<Provisioning> = Api::namespaced(client.clone(), &ns);
    let first_job = Api::<Job>::namespaced(client.clone(), &ns)
        .get("c1-install-g1")
        .await
        .unwrap()
        .metadata
        .uid;
    let remediation = || async {
        get_prov(&provs, "c1")
            .await
            .and_then(|p| p.status?.remediations.into_iter().next())
    };
    let step = |want: &'static str| async move {
        until(&format!("the re-provisioning {want}"), || async {
            remediation()
                .await
                .filter(|r: &Remediation| r.reprovision.as_deref() == Some(want))
        })
        .await
    };

    // The worker down: drained (nothing on it), rebooted; BMO takes the reboot annotation away.
    ready(&nodes, "w", "False", 60).await;
    until("the reboot asked", || async {
        let host = hosts.get("node-b").await.unwrap();
        host.metadata
            .annotations
            .is_some_and(|a| a.contains_key("reboot.metal3.io"))
            .then_some(())
    })
    .await;
    hosts
        .patch(
            "node-b",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"reboot.metal3.io": null}}})),
        )
        .await
        .unwrap();

    // Not Ready 5 s after its reboot: re-provisioned. The image is kept first, then the host let go.
    let note = event(&client, &ns, "Reprovisioning").await;
    assert!(
        note.starts_with(
            "w is not Ready 5 s after its reboot through BareMetalHost node-b: re-provisioning it"
        ),
        "{note}"
    );
    let r = step("Deprovisioning").await;
    assert!(r.reprovisioned.is_some());
    until("the host deprovisioned, its image kept", || async {
        let host = hosts.get("node-b").await.unwrap();
        let kept = remediation().await?.image?;
        (host.spec.image.is_none()).then_some((host, kept))
    })
    .await
    .1
    .url
    .eq(IMAGE)
    .then_some(())
    .expect("the kept image is the host's");
    let host = hosts.get("node-b").await.unwrap();
    assert_eq!(
        host.metadata
            .annotations
            .unwrap_or_default()
            .get("bpa.akraino.org/drained")
            .map(String::as_str),
        Some("w"),
        "the host not marked drained for the drain hold"
    );
    until("the worker's Node deleted", || async {
        nodes.get_opt("w").await.unwrap().is_none().then_some(())
    })
    .await;
    // The condition says why the cluster is not healthy while the node is away (from the next look on).
    until("the condition to say it", || async {
        let p = get_prov(&provs, "c1").await?;
        let healthy = p
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Healthy")?;
        (healthy.reason == "Remediating"
            && healthy.message == "w: re-provisioned through BareMetalHost node-b, to join again")
            .then_some(())
    })
    .await;
    // The master is never touched.
    assert!(hosts.get("node-a").await.unwrap().spec.image.is_some());

    // BMO cleaned it: given its image again.
    set_bmh_status(
        &client,
        &ns,
        ("node-b", w_mac, "10.20.2.12", 4, 4096, "available"),
    )
    .await;
    step("Provisioning").await;
    let image = hosts
        .get("node-b")
        .await
        .unwrap()
        .spec
        .image
        .expect("the image given again");
    assert_eq!(
        (
            image.url.as_str(),
            image.checksum_type.as_deref(),
            image.format.as_deref()
        ),
        (IMAGE, Some("sha256"), Some("qcow2"))
    );

    // Provisioned again: the installer Job runs again (made anew), and joins it.
    set_bmh_status(
        &client,
        &ns,
        ("node-b", w_mac, "10.20.2.12", 4, 4096, "provisioned"),
    )
    .await;
    step("Joining").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    until("the installer Job made again", || async {
        let job = jobs.get_opt("c1-install-g1").await.unwrap()?;
        (job.metadata.uid != first_job).then_some(())
    })
    .await;
    job_status(&client, &ns, "c1-install-g1", true).await;
    workload_node(&nodes, "w", "worker").await;
    ready(&nodes, "w", "True", 0).await;
    until("healed", || async {
        remediation()
            .await
            .filter(|r| r.outcome.as_deref() == Some("Healed"))
    })
    .await;
    assert_eq!(
        event(&client, &ns, "Healed").await,
        "w is Ready again after its re-provisioning through BareMetalHost node-b"
    );
}
