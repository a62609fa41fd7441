//! A BPA cluster's host goes only once its node is drained, against real kube-apiservers: the site's, where the
//! agent binary (`--controllers bpa`, HTTPS with a CA of its own `pki`, `--admission-url`) registers its
//! ValidatingWebhookConfiguration and the API server asks it over HTTPS; and the workload cluster's, a
//! control plane of the test's own with the Nodes and a pod the test makes (it plays the kubelet, which
//! removes an evicted pod once it stopped). A claimed, provisioned host's deprovisioning, deletion and
//! power-off are refused with the agent's message (checked by dry runs too, which change nothing); a host no
//! Provisioning claimed and BMO's own writes pass. The operator's drain annotation: the node cordoned, its pod
//! evicted, `Draining`, then `bpa.akraino.org/drained` and `Drained`; the deprovisioning goes; once the host
//! left `provisioned` both annotations go. A drain taken back makes the node schedulable again.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::{json, Value};

use crate::bpa::{get_prov, provisioning, site_ssh_ca, ADVERTISED};
use crate::bpa_heal::installed_on;
use crate::hosts::{bmh, set_bmh_status};
use crate::support::free_port;
use crate::support::kube::{controller_agent_on, env, until, OwnPlane};
use foothold_agent::controllers::bpa::hold::{DRAINED_ANNOTATION, DRAIN_ANNOTATION, WEBHOOK_NAME};
use foothold_agent::crd::bpa::Provisioning;
use foothold_agent::crd::metal3::BareMetalHost;

const IMAGE: &str = "http://10.1.2.3:5000/files/node.qcow2";

/// The host's annotation `key`.
fn annotation(h: &BareMetalHost, key: &str) -> Option<String> {
    h.annotations().get(key).cloned()
}

/// The membership the Provisioning's status shows for host `label`.
async fn membership(provs: &Api<Provisioning>, label: &str) -> Option<String> {
    get_prov(provs, "c1")
        .await?
        .status?
        .hosts
        .into_iter()
        .find(|h| h.label == label)?
        .membership
}

async fn merge(
    hosts: &Api<BareMetalHost>,
    name: &str,
    patch: Value,
    dry_run: bool,
) -> Result<(), String> {
    let params = PatchParams {
        dry_run,
        ..PatchParams::default()
    };
    hosts
        .patch(name, &params, &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_of_a_ready_cluster_goes_only_once_its_node_is_drained() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "bpa-hold").await;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("tls")).unwrap();
    let tls = foothold_agent::pki::Paths::new(&tmp.path().join("tls"));
    let day = Duration::from_secs(86_400);
    foothold_agent::pki::ensure(&tls, &["127.0.0.1".into()], day, SystemTime::now()).unwrap();
    site_ssh_ca(tmp.path());
    let listen = format!("127.0.0.1:{}", free_port());
    let url = format!("https://{listen}");
    let ssh_ca = tmp.path().join("ssh-ca/ca.pub");
    let agent = controller_agent_on(
        &listen,
        (tmp.path(), &ns, "agent-hold"),
        "bpa",
        &env.agent_kubeconfig(),
        &[
            "--tls-cert",
            tls.cert.to_str().unwrap(),
            "--tls-key",
            tls.key.to_str().unwrap(),
            "--admission-url",
            &url,
            "--admission-ca",
            tls.ca.to_str().unwrap(),
            "--installer-image",
            "registry.example/kud-installer:v1",
            "--advertise-url",
            ADVERTISED,
            "--ssh-host-ca",
            ssh_ca.to_str().unwrap(),
        ],
    );

    // Not a review, or too big to be one: the REST API's JSON error, over the agent's HTTPS.
    let ca = std::fs::read(&tls.ca).unwrap();
    let https = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::new_with_certs(&[
                    ureq::tls::Certificate::from_pem(&ca).unwrap(),
                ]))
                .build(),
        )
        .build()
        .new_agent();
    let mut bad = https
        .post(&format!("{url}/admission/baremetalhosts"))
        .send(r#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}"#)
        .unwrap();
    assert_eq!(bad.status(), 400);
    let body: Value = serde_json::from_str(&bad.body_mut().read_to_string().unwrap()).unwrap();
    assert!(
        body.to_string()
            .contains("this webhook answers admission.k8s.io/v1"),
        "{body}"
    );

    let huge = vec![b' '; 5 << 20];
    let mut refused = https
        .post(&format!("{url}/admission/baremetalhosts"))
        .send(&huge[..])
        .unwrap();
    assert_eq!(refused.status(), 413);
    let body = refused.body_mut().read_to_string().unwrap();
    assert!(body.contains("limited to 4 MiB"), "{body}");

    // The workload cluster: a master with nothing on it, a worker with one pod.
    let workload = tokio::task::spawn_blocking(|| OwnPlane::start("bpa-hold"))
        .await
        .unwrap();
    let wclient = workload.env.client().await;
    let nodes: Api<Node> = Api::all(wclient.clone());
    for name in ["m", "w"] {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(wclient.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"nodeName": "w", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10.1"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let (m_mac, w_mac) = ("00:c6:14:04:64:01", "00:c6:14:04:64:02");
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    for (name, mac, ip) in [
        ("node-a", m_mac, "10.20.2.11"),
        ("node-b", w_mac, "10.20.2.12"),
        ("node-c", "00:c6:14:04:64:03", "10.20.2.13"),
    ] {
        bmh(
            &client,
            &ns,
            (name, mac, ip, 4, 4096, "provisioned"),
            json!({}),
        )
        .await;
        merge(
            &hosts,
            name,
            json!({"spec": {"image": {"url": IMAGE}}}),
            false,
        )
        .await
        .unwrap();
    }
    let provs: Api<Provisioning> = Api::namespaced(client.clone(), &ns);
    let spec = json!({"masters": [{"m": {"mac-address": m_mac}}], "workers": [{"w": {"mac-address": w_mac}}]});
    provs
        .create(&PostParams::default(), &provisioning("c1", "c1", spec))
        .await
        .unwrap();
    installed_on(&client, &ns, &workload).await;
    until("both hosts members of a Ready cluster", || async {
        let p = get_prov(&provs, "c1").await?;
        let s = p.status?;
        (s.phase.as_deref() == Some("Ready")
            && s.hosts
                .iter()
                .filter(|h| h.membership.as_deref() == Some("Member"))
                .count()
                == 2)
            .then_some(())
    })
    .await;

    // The webhook is written by the leader; the API server calls it once it has read it (a dry run changes
    // nothing either way).
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(WEBHOOK_NAME)
        .await
        .unwrap_or_else(|e| {
            let log = std::fs::read_to_string(agent.data.with_extension("log")).unwrap_or_default();
            panic!("the agent wrote no {WEBHOOK_NAME}: {e}; its log:\n{log}")
        });
    let deprovision = json!({"spec": {"image": null}});
    let refused = until("the API server asking the agent", || async {
        merge(&hosts, "node-b", deprovision.clone(), true)
            .await
            .err()
    })
    .await;
    for said in [
        "denied the request",
        &format!("BareMetalHost {ns}/node-b runs a node of Provisioning c1's cluster"),
        "deprovisioning it (spec.image removed)",
        DRAIN_ANNOTATION,
    ] {
        assert!(refused.contains(said), "{said:?} not in {refused:?}");
    }
    let really = merge(&hosts, "node-b", deprovision.clone(), false)
        .await
        .unwrap_err();
    assert!(
        really.contains("waits until the node is drained"),
        "{really}"
    );
    let off = merge(&hosts, "node-b", json!({"spec": {"online": false}}), false)
        .await
        .unwrap_err();
    assert!(off.contains("powering it off"), "{off}");
    let deleted = hosts
        .delete("node-b", &DeleteParams::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(deleted.contains("deleting it"), "{deleted}");
    let h = hosts.get("node-b").await.unwrap();
    assert_eq!(h.spec.image.map(|i| i.url).as_deref(), Some(IMAGE));
    assert!(h.spec.online);
    // BMO's writes and a host no Provisioning claimed pass.
    merge(
        &hosts,
        "node-b",
        json!({"metadata": {"annotations": {"reboot.metal3.io": ""}}}),
        false,
    )
    .await
    .unwrap();
    merge(
        &hosts,
        "node-b",
        json!({"metadata": {"annotations": {"reboot.metal3.io": null}}}),
        false,
    )
    .await
    .unwrap();
    merge(&hosts, "node-c", deprovision.clone(), false)
        .await
        .unwrap();

    // The drain: cordoned, the pod evicted (the test removes it as its kubelet would), then drained.
    merge(
        &hosts,
        "node-b",
        json!({"metadata": {"annotations": {DRAIN_ANNOTATION: ""}}}),
        false,
    )
    .await
    .unwrap();
    until(
        "the worker cordoned, its pod evicted, the host Draining",
        || async {
            let cordoned = nodes.get("w").await.unwrap().spec?.unschedulable == Some(true);
            let pod = pods.get("web").await.unwrap();
            let evicted = pod.metadata.deletion_timestamp.is_some();
            let shown = membership(&provs, "w").await;
            (cordoned && evicted && shown.as_deref() == Some("Draining")).then_some(())
        },
    )
    .await;
    let waiting = merge(&hosts, "node-b", deprovision.clone(), false)
        .await
        .unwrap_err();
    assert!(waiting.contains("its drain is under way"), "{waiting}");
    pods.delete("web", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let drained = until("the host marked drained", || async {
        annotation(&hosts.get("node-b").await.unwrap(), DRAINED_ANNOTATION)
    })
    .await;
    assert_eq!(drained, "w");
    until("the worker shown Drained", || async {
        (membership(&provs, "w").await.as_deref() == Some("Drained")).then_some(())
    })
    .await;
    assert_eq!(membership(&provs, "m").await.as_deref(), Some("Member"));
    merge(&hosts, "node-b", deprovision.clone(), false)
        .await
        .unwrap();

    // BMO deprovisions it: the annotations go, so a host provisioned again is held again.
    set_bmh_status(
        &client,
        &ns,
        ("node-b", w_mac, "10.20.2.12", 4, 4096, "deprovisioning"),
    )
    .await;
    until("the hold's annotations gone", || async {
        let h = hosts.get("node-b").await.unwrap();
        (annotation(&h, DRAIN_ANNOTATION).is_none() && annotation(&h, DRAINED_ANNOTATION).is_none())
            .then_some(())
    })
    .await;

    // A drain taken back: the master, with nothing on it, drained at once, then schedulable again.
    merge(
        &hosts,
        "node-a",
        json!({"metadata": {"annotations": {DRAIN_ANNOTATION: ""}}}),
        false,
    )
    .await
    .unwrap();
    until("the master drained", || async {
        annotation(&hosts.get("node-a").await.unwrap(), DRAINED_ANNOTATION)
    })
    .await;
    assert_eq!(
        nodes
            .get("m")
            .await
            .unwrap()
            .spec
            .and_then(|s| s.unschedulable),
        Some(true)
    );
    merge(
        &hosts,
        "node-a",
        json!({"metadata": {"annotations": {DRAIN_ANNOTATION: null}}}),
        false,
    )
    .await
    .unwrap();
    until("the master schedulable again, its mark gone", || async {
        let h = hosts.get("node-a").await.unwrap();
        let schedulable = nodes.get("m").await.unwrap().spec?.unschedulable != Some(true);
        (schedulable && annotation(&h, DRAINED_ANNOTATION).is_none()).then_some(())
    })
    .await;
    // Without its drain mark, the master is held again.
    let held = merge(&hosts, "node-a", deprovision, true)
        .await
        .unwrap_err();
    assert!(held.contains("node-a runs a node"), "{held}");
}
