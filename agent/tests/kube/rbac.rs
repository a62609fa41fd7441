//! What the agent's user may do (`agent/rbac/foothold-agent.yaml`, `agent/rbac/kubelet-serving.yaml`), asked of the real API server as the agent
//! would ask it: a `kubectl auth can-i` table. The reconciler tests run their agents as that user and prove the
//! rules suffice; this proves that what they leave out stays out, and that RBAC refuses the agent a Role or a
//! binding worth more than its own rules.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::support::kube::{client_of, env};
use foothold_agent::controllers::bpa::hold::WEBHOOK_NAME;

/// verb, API group, resource, subresource, namespace ("" for every namespace or a cluster-wide resource), and
/// whether the agent may.
const CAN_I: &[(&str, &str, &str, &str, &str, bool)] = &[
    // What its reconcilers do.
    ("watch", "bpa.akraino.org", "provisionings", "", "", true),
    (
        "patch",
        "bpa.akraino.org",
        "provisionings",
        "status",
        "site",
        true,
    ),
    (
        "patch",
        "airship.airshipit.org",
        "vinoes",
        "status",
        "site",
        true,
    ),
    ("create", "batch", "jobs", "", "site", true),
    ("create", "apps", "daemonsets", "", "site", true),
    ("create", "metal3.io", "baremetalhosts", "", "site", true),
    ("list", "", "secrets", "", "", true),
    (
        "create",
        "rbac.authorization.k8s.io",
        "roles",
        "",
        "site",
        true,
    ),
    ("list", "", "nodes", "", "", true),
    ("update", "coordination.k8s.io", "leases", "", "site", true),
    ("create", "events.k8s.io", "events", "", "site", true),
    // What it never does.
    ("create", "", "pods", "", "site", false),
    ("create", "", "pods", "exec", "site", false),
    ("create", "", "serviceaccounts", "token", "site", false),
    (
        "patch",
        "metal3.io",
        "baremetalhosts",
        "status",
        "site",
        false,
    ),
    (
        "delete",
        "bpa.akraino.org",
        "provisionings",
        "",
        "site",
        false,
    ),
    (
        "create",
        "rbac.authorization.k8s.io",
        "clusterroles",
        "",
        "",
        false,
    ),
    (
        "create",
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        "",
        "",
        false,
    ),
    (
        "escalate",
        "rbac.authorization.k8s.io",
        "roles",
        "",
        "site",
        false,
    ),
    (
        "bind",
        "rbac.authorization.k8s.io",
        "clusterroles",
        "",
        "",
        false,
    ),
    ("impersonate", "", "users", "", "", false),
    ("delete", "", "nodes", "", "", false),
    ("get", "", "nodes", "proxy", "", false),
    ("delete", "", "namespaces", "", "", false),
    (
        "create",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "",
        "",
        false,
    ),
    // Approving kubelets' serving certificates (agent/rbac/kubelet-serving.yaml; which signers: its own test).
    (
        "update",
        "certificates.k8s.io",
        "certificatesigningrequests",
        "approval",
        "",
        true,
    ),
    (
        "create",
        "certificates.k8s.io",
        "certificatesigningrequests",
        "",
        "",
        false,
    ),
    (
        "create",
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "",
        "",
        false,
    ),
];

/// Whether the API server lets the reviews' user do what `attributes` say.
async fn can_i(reviews: &Api<SelfSubjectAccessReview>, attributes: ResourceAttributes) -> bool {
    let what = format!("{attributes:?}");
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(attributes),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap_or_else(|e| panic!("can-i {what}: {e}"))
        .status
        .expect("a review's status")
        .allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_user_may_do_what_its_reconcilers_do_and_nothing_more() {
    let env = env();
    let agent = client_of(&env.agent_kubeconfig()).await;
    let reviews: Api<SelfSubjectAccessReview> = Api::all(agent.clone());
    let mut wrong = Vec::new();
    for &(verb, group, resource, sub, ns, want) in CAN_I {
        let got = can_i(
            &reviews,
            ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource: (!sub.is_empty()).then(|| sub.into()),
                namespace: (!ns.is_empty()).then(|| ns.into()),
                ..ResourceAttributes::default()
            },
        )
        .await;
        if got != want {
            let what = [group, resource, sub].join("/");
            wrong.push(format!("{verb} {what} in {ns:?}: {got}, want {want}"));
        }
    }
    // The drain hold's admission webhook: that one configuration, by its name, and no other.
    for (verb, name, want) in [
        ("get", WEBHOOK_NAME, true),
        ("create", WEBHOOK_NAME, true),
        ("patch", WEBHOOK_NAME, true),
        ("delete", WEBHOOK_NAME, false),
        ("patch", "another-webhook", false),
    ] {
        let got = can_i(
            &reviews,
            ResourceAttributes {
                verb: Some(verb.into()),
                group: Some("admissionregistration.k8s.io".into()),
                resource: Some("validatingwebhookconfigurations".into()),
                name: Some(name.into()),
                ..ResourceAttributes::default()
            },
        )
        .await;
        if got != want {
            wrong.push(format!(
                "{verb} validatingwebhookconfiguration {name}: {got}, want {want}"
            ));
        }
    }
    assert!(wrong.is_empty(), "the agent's RBAC:\n{}", wrong.join("\n"));

    // RBAC refuses the agent a binding to a role worth more than its own rules (no `bind`, no `escalate`): it
    // cannot give the accounts it makes cluster-admin.
    let client = env.client().await;
    let ns = env.namespace(&client, "agent-rbac").await;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "too-much"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
    }))
    .unwrap();
    match Api::<RoleBinding>::namespaced(agent, &ns)
        .create(&PostParams::default(), &binding)
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 403 => {
            assert!(e.message.contains("not currently held"), "{}", e.message)
        }
        other => panic!("the agent bound cluster-admin in {ns}: {other:?}"),
    }
}
