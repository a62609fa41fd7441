//! Kubernetes faults under the SIP reconciler: a user without the rights it needs, and kube-apiserver killed
//! and restarted mid-reconcile.

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{json, Value};

use crate::sip::{claimed, hosts, owned_by, ready, sip_cluster};
use crate::support::kube::{controller_agent, env, until};
use foothold_agent::crd::sip::SIPCluster;

/// A Role for the restricted user: what the SIP controller needs in `ns`, with `patch` on BareMetalHosts only
/// when `may_label`.
fn sip_role(ns: &str, may_label: bool) -> Value {
    let bmh_verbs = if may_label {
        json!(["get", "list", "watch", "patch", "update"])
    } else {
        json!(["get", "list", "watch"])
    };
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "sip-restricted", "namespace": ns},
        "rules": [
            {"apiGroups": ["airship.airshipit.org"], "resources": ["sipclusters", "sipclusters/status"], "verbs": ["*"]},
            {"apiGroups": ["metal3.io"], "resources": ["baremetalhosts"], "verbs": bmh_verbs},
            {"apiGroups": [""], "resources": ["secrets", "services", "configmaps", "events"], "verbs": ["*"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["*"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["*"]},
        ],
    })
}

/// The controller running as a user that may not label BareMetalHosts: the SIPCluster says
/// `UnableToApplyLabels`; granted the right, it claims; the right taken away again, deleting the SIPCluster
/// says `UnableToDecommission` and keeps it (its finalizer) until the right comes back.
#[tokio::test]
async fn without_the_right_to_label_hosts_sip_says_so_and_recovers() {
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "sip-rbac").await;
    let tmp = tempfile::tempdir().unwrap();
    hosts(&client, &ns, 2, 1).await;
    let roles: Api<Role> = Api::namespaced(client.clone(), &ns);
    roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(sip_role(&ns, false)).unwrap(),
        )
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &serde_json::from_value(json!({
            "metadata": {"name": "sip-restricted"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sip-restricted"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": crate::support::kube::RESTRICTED_USER}],
        })).unwrap())
        .await
        .unwrap();
    let _agent = controller_agent(
        tmp.path(),
        &ns,
        "agent-rbac",
        "sip",
        &env.restricted_kubeconfig(),
        &[],
    );
    let sips: Api<SIPCluster> = Api::namespaced(client.clone(), &ns);
    sips.create(
        &PostParams::default(),
        &sip_cluster("t", (1, 0), (0, 0), json!({})),
    )
    .await
    .unwrap();
    let condition = |reason: &'static str| {
        let sips = sips.clone();
        move || {
            let sips = sips.clone();
            async move {
                let s = sips.get_opt("t").await.unwrap()?;
                ready(&s).filter(|r| r.1 == reason)
            }
        }
    };
    let (status, _, message) = until("UnableToApplyLabels", condition("UnableToApplyLabels")).await;
    assert_eq!(status, "False");
    assert!(message.contains("forbidden"), "{message}");
    assert!(claimed(&client, &ns, "t").await.is_empty());

    let grant = |may_label: bool| {
        let roles = roles.clone();
        let ns = ns.clone();
        async move {
            roles
                .replace(
                    "sip-restricted",
                    &PostParams::default(),
                    &serde_json::from_value(sip_role(&ns, may_label)).unwrap(),
                )
                .await
                .unwrap();
        }
    };
    grant(true).await;
    until("Ready once it may label", || async {
        let s = sips.get("t").await.unwrap();
        ready(&s).filter(|r| r.0 == "True").map(|_| ())
    })
    .await;
    assert_eq!(claimed(&client, &ns, "t").await.len(), 1);

    grant(false).await;
    sips.delete("t", &DeleteParams::default()).await.unwrap();
    let (_, _, message) = until("UnableToDecommission", condition("UnableToDecommission")).await;
    assert!(message.contains("forbidden"), "{message}");
    assert_eq!(claimed(&client, &ns, "t").await.len(), 1, "the claim stays");

    grant(true).await;
    until("the SIPCluster gone", || async {
        sips.get_opt("t").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(claimed(&client, &ns, "t").await.is_empty());
}

/// kube-apiserver SIGKILLed and restarted while SIP is claiming hosts (its own control plane, so the other
/// tests keep theirs): the controller reconnects and reaches the same end state, each host claimed once.
#[tokio::test]
async fn the_apiserver_killed_mid_reconcile_and_restarted_leaves_the_same_end_state() {
    use crate::support::kube::ControlPlane;
    let mut plane = tokio::task::spawn_blocking(|| ControlPlane::start(Some("restart")))
        .await
        .unwrap();
    let client = plane.env.client().await;
    let ns = plane.env.namespace(&client, "sip-apiserver").await;
    let tmp = tempfile::tempdir().unwrap();
    hosts(&client, &ns, 8, 4).await;
    let _agent = controller_agent(
        tmp.path(),
        &ns,
        "agent-a",
        "sip",
        &plane.env.agent_kubeconfig(),
        &[],
    );
    let services = json!({
        "jumpHost": [{"image": "quay.io/airshipit/jump-host:latest", "nodeInterfaceId": "oam-ipv4"}],
    });
    let sips: Api<SIPCluster> = Api::namespaced(client.clone(), &ns);
    sips.create(
        &PostParams::default(),
        &sip_cluster("t", (3, 1), (2, 1), services),
    )
    .await
    .unwrap();
    until("a first claim", || async {
        let c = claimed(&client, &ns, "t").await;
        (!c.is_empty()).then_some(())
    })
    .await;
    plane = tokio::task::spawn_blocking(move || {
        plane.restart_apiserver();
        plane
    })
    .await
    .unwrap();
    // A fresh client: the old one's connections died with the apiserver.
    let client = plane.env.client().await;
    let sips: Api<SIPCluster> = Api::namespaced(client.clone(), &ns);
    until("Ready after the restart", || async {
        let s = sips.get("t").await.ok()?;
        ready(&s).filter(|r| r.0 == "True").map(|_| ())
    })
    .await;
    let c = claimed(&client, &ns, "t").await;
    assert_eq!(c.len(), 7, "{c:?}");
    let active = |kind: &str| c.iter().filter(|h| h.1 == kind && !h.2).count();
    assert_eq!((active("ControlPlane"), active("Worker")), (3, 2), "{c:?}");
    let services = Api::<Service>::namespaced(client.clone(), &ns)
        .list(&owned_by("t"))
        .await
        .unwrap()
        .items;
    assert_eq!(services.len(), 1, "one jump host service");
    drop(plane);
}
