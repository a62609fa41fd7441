//! Kubelets' serving certificates (`serve --approve-kubelet-serving`): requests made as a node, through the real
//! API server (which sets who asked), approved when they name the node's own addresses, denied naming why
//! otherwise, left waiting until their Node exists; requests to other signers untouched; and the ClusterRole
//! of `agent/rbac/kubelet-serving.yaml` lets the agent approve for this signer and no other.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use rcgen::{CertificateParams, DnType, KeyPair, SanType};
use serde_json::json;

use crate::support::kube::{client_of, controller_agent, env, until};
use crate::vino::node;

/// A client acting as node `name`'s kubelet: user `system:node:<name>` in `system:nodes`, which may make
/// certificate requests (what the Node authorizer grants a kubelet; this API server has RBAC alone).
async fn as_node(name: &str) -> kube::Client {
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "kubelet-serving-test:nodes-request"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:node-bootstrapper"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
    }))
    .unwrap();
    match Api::<ClusterRoleBinding>::all(env().client().await)
        .create(&PostParams::default(), &binding)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("binding system:node-bootstrapper: {e}"),
    }
    let kc = Kubeconfig::read_from(&env().kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info.impersonate = Some(format!("system:node:{name}"));
    config.auth_info.impersonate_groups = Some(vec!["system:nodes".into()]);
    kube::Client::try_from(config).unwrap()
}

/// A request by `client` named `csr` to `signer` for `node`'s serving certificate naming `sans`.
async fn request(
    client: &kube::Client,
    csr: &str,
    signer: &str,
    node: &str,
    sans: Vec<SanType>,
    usages: &[&str],
) {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("system:node:{node}"));
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:nodes");
    params.subject_alt_names = sans;
    let pem = params
        .serialize_request(&KeyPair::generate().unwrap())
        .unwrap()
        .pem()
        .unwrap();
    let obj: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"name": csr},
        "spec": {"signerName": signer, "usages": usages,
                 "request": k8s_openapi::ByteString(pem.into_bytes())},
    }))
    .unwrap();
    Api::<CertificateSigningRequest>::all(client.clone())
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("creating {csr}: {e}"));
}

/// A serving certificate request by `kubelet` named `csr` for `node` naming `sans`, with a kubelet's usages,
/// and its (type, reason, message) once approved or denied.
async fn serving(
    kubelet: &kube::Client,
    csr: &str,
    node: &str,
    sans: Vec<SanType>,
) -> (String, String, String) {
    request(kubelet, csr, SERVING, node, sans, USAGES).await;
    decided(&Api::all(kubelet.clone()), csr).await
}

/// The request's (type, reason, message) once approved or denied.
async fn decided(api: &Api<CertificateSigningRequest>, name: &str) -> (String, String, String) {
    until(&format!("{name} approved or denied"), || async {
        let csr = api.get(name).await.ok()?;
        let c = csr
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Approved" || c.type_ == "Denied")?;
        Some((
            c.type_,
            c.reason.unwrap_or_default(),
            c.message.unwrap_or_default(),
        ))
    })
    .await
}

async fn conditions(api: &Api<CertificateSigningRequest>, name: &str) -> usize {
    api.get(name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.conditions)
        .map_or(0, |c| c.len())
}

fn dns(s: &str) -> SanType {
    SanType::DnsName(s.try_into().unwrap())
}

fn ip(s: &str) -> SanType {
    SanType::IpAddress(s.parse().unwrap())
}

const SERVING: &str = "kubernetes.io/kubelet-serving";
const USAGES: &[&str] = &["digital signature", "server auth"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelets_serving_certificate_is_approved_for_its_own_addresses_only() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "kubelet-serving").await;
    let tmp = tempfile::tempdir().unwrap();
    let (n1, n2) = (format!("{ns}-n1"), format!("{ns}-n2"));
    node(&client, &n1, json!({}), "10.0.9.1").await;
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let kubelet = as_node(&n1).await;
    // A client certificate asked by the node: another signer, which the agent neither may nor does touch.
    request(
        &kubelet,
        &format!("{ns}-client"),
        "kubernetes.io/kube-apiserver-client-kubelet",
        &n1,
        vec![],
        &["digital signature", "client auth"],
    )
    .await;
    let _agent = controller_agent(
        tmp.path(),
        &ns,
        "agent-ks",
        "vino",
        &env.agent_kubeconfig(),
        &["--approve-kubelet-serving"],
    );

    // Its own name and address: approved.
    let (kind, reason, message) = serving(
        &kubelet,
        &format!("{ns}-own"),
        &n1,
        vec![dns(&n1), ip("10.0.9.1")],
    )
    .await;
    assert_eq!(
        (kind.as_str(), reason.as_str()),
        ("Approved", "FootholdNodeAddresses"),
        "{message}"
    );
    assert!(message.contains("IP:10.0.9.1"), "{message}");

    // An address that is not the node's: denied, naming it.
    let (kind, _, message) = serving(
        &kubelet,
        &format!("{ns}-foreign"),
        &n1,
        vec![dns(&n1), ip("10.0.9.99")],
    )
    .await;
    assert_eq!(kind, "Denied", "{message}");
    assert!(
        message.starts_with("IP:10.0.9.99 is not an address of Node"),
        "{message}"
    );

    // A node asking for another node's name: its subject is not its user (the API server sets the user).
    let (kind, _, message) = serving(&kubelet, &format!("{ns}-other"), &n2, vec![dns(&n2)]).await;
    assert_eq!(kind, "Denied", "{message}");
    assert!(
        message.contains(&format!("not CN=system:node:{n1}")),
        "{message}"
    );

    // A node whose Node does not exist yet: left pending until it does, then approved.
    let second = as_node(&n2).await;
    request(
        &second,
        &format!("{ns}-early"),
        SERVING,
        &n2,
        vec![ip("10.0.9.2")],
        USAGES,
    )
    .await;
    // The agent looked at it and left it (its log says so), neither approved nor denied.
    let log = tmp.path().join("agent-ks.log");
    let early = format!("{ns}-early");
    until("the agent waiting for the early request's Node", || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines()
            .any(|l| l.contains("waiting") && l.contains(&early))
            .then_some(())
    })
    .await;
    assert_eq!(conditions(&csrs, &early).await, 0);
    node(&client, &n2, json!({}), "10.0.9.2").await;
    let (kind, _, message) = decided(&csrs, &early).await;
    assert_eq!(kind, "Approved", "{message}");

    // The client certificate's request: untouched.
    assert_eq!(conditions(&csrs, &format!("{ns}-client")).await, 0);

    // What RBAC lets the agent approve: this signer's requests, no other's.
    let agent = client_of(&env.agent_kubeconfig()).await;
    let reviews: Api<SelfSubjectAccessReview> = Api::all(agent);
    for (signer, want) in [
        (SERVING, true),
        ("kubernetes.io/kube-apiserver-client", false),
        ("kubernetes.io/kube-apiserver-client-kubelet", false),
        ("kubernetes.io/legacy-unknown", false),
    ] {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some("approve".into()),
                    group: Some("certificates.k8s.io".into()),
                    resource: Some("signers".into()),
                    name: Some(signer.into()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let allowed = reviews
            .create(&PostParams::default(), &review)
            .await
            .unwrap()
            .status
            .unwrap()
            .allowed;
        assert_eq!(allowed, want, "the agent may approve for {signer}");
    }
}
