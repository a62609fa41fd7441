use super::*;

use k8s_openapi::ByteString;
use rcgen::{CertificateParams, DnType, KeyPair, SanType};

const NODE: &str = "appliance";

/// A PEM request for `cn`/`o` naming `sans`, signed by a new key.
fn request(cn: &str, o: &[&str], sans: Vec<SanType>) -> Vec<u8> {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    for o in o {
        params.distinguished_name.push(DnType::OrganizationName, *o);
    }
    params.subject_alt_names = sans;
    let key = KeyPair::generate().unwrap();
    params
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap()
        .into_bytes()
}

fn dns(s: &str) -> SanType {
    SanType::DnsName(s.try_into().unwrap())
}

fn ip(s: &str) -> SanType {
    SanType::IpAddress(s.parse().unwrap())
}

/// What the node's kubelet asks for: its name and address.
fn kubelets_own() -> Vec<u8> {
    request(
        &format!("system:node:{NODE}"),
        &["system:nodes"],
        vec![dns(NODE), ip("10.0.2.15")],
    )
}

fn csr(user: &str, groups: &[&str], usages: &[&str], pem: Vec<u8>) -> CertificateSigningRequest {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "csr-1"},
        "spec": {
            "signerName": SIGNER,
            "username": user,
            "groups": groups,
            "usages": usages,
            "request": ByteString(pem),
        },
    }))
    .unwrap()
}

fn node() -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": NODE},
        "status": {"addresses": [
            {"type": "InternalIP", "address": "10.0.2.15"},
            {"type": "Hostname", "address": NODE},
        ]},
    }))
    .unwrap()
}

const KUBELET_USAGES: &[&str] = &["digital signature", "server auth"];

fn from_the_node(pem: Vec<u8>) -> CertificateSigningRequest {
    csr(
        &format!("system:node:{NODE}"),
        &["system:nodes", "system:authenticated"],
        KUBELET_USAGES,
        pem,
    )
}

fn denied(d: Option<Decision>) -> String {
    match d {
        Some(Decision::Deny(why)) => why,
        other => panic!("not denied: {other:?}"),
    }
}

#[test]
fn a_kubelets_own_request_for_its_nodes_addresses_is_approved() {
    let c = from_the_node(kubelets_own());
    assert_eq!(
        decide(&c, Some(&node())),
        Some(Decision::Approve(
            "appliance's kubelet, for its Node's addresses: DNS:appliance, IP:10.0.2.15".into()
        ))
    );
    // An RSA key's usages too.
    let mut rsa = c.clone();
    rsa.spec.usages = Some(
        ["digital signature", "key encipherment", "server auth"]
            .map(String::from)
            .to_vec(),
    );
    assert!(matches!(
        decide(&rsa, Some(&node())),
        Some(Decision::Approve(_))
    ));
}

#[test]
fn a_request_for_an_address_the_node_does_not_have_is_denied_naming_it() {
    let c = from_the_node(request(
        "system:node:appliance",
        &["system:nodes"],
        vec![dns(NODE), ip("10.0.2.15"), ip("192.168.1.1")],
    ));
    let why = denied(decide(&c, Some(&node())));
    assert_eq!(
        why,
        "IP:192.168.1.1 is not an address of Node appliance (its addresses: InternalIP=10.0.2.15, \
         Hostname=appliance)"
    );
    let c = from_the_node(request(
        "system:node:appliance",
        &["system:nodes"],
        vec![dns("kubernetes.default.svc")],
    ));
    assert!(denied(decide(&c, Some(&node()))).starts_with("DNS:kubernetes.default.svc is not"));
}

#[test]
fn only_a_node_may_ask_and_only_for_itself() {
    // Another user, or a node outside the nodes' group.
    let c = csr(
        "mallory",
        &["system:authenticated"],
        KUBELET_USAGES,
        kubelets_own(),
    );
    assert_eq!(
        denied(decide(&c, Some(&node()))),
        "requested by \"mallory\", not by a node (system:node:<name>)"
    );
    let c = csr(
        "system:node:appliance",
        &["system:authenticated"],
        KUBELET_USAGES,
        kubelets_own(),
    );
    assert!(denied(decide(&c, Some(&node()))).contains("not in group system:nodes"));
    // A node asking for another node's name in its subject.
    let c = from_the_node(request(
        "system:node:other",
        &["system:nodes"],
        vec![dns(NODE)],
    ));
    assert!(
        denied(decide(&c, Some(&node()))).contains("not CN=system:node:appliance O=system:nodes")
    );
    // Or for more in its subject than a kubelet asks for.
    let c = from_the_node(request(
        "system:node:appliance",
        &["system:nodes", "system:masters"],
        vec![dns(NODE)],
    ));
    assert!(denied(decide(&c, Some(&node()))).contains("the subject is"));
}

#[test]
fn usages_beyond_serving_and_names_beyond_addresses_are_denied() {
    let mut c = from_the_node(kubelets_own());
    c.spec.usages = Some(vec!["digital signature".into(), "client auth".into()]);
    assert!(denied(decide(&c, Some(&node()))).contains("do not include \"server auth\""));
    c.spec.usages = Some(vec!["server auth".into(), "client auth".into()]);
    assert_eq!(
        denied(decide(&c, Some(&node()))),
        "usage \"client auth\" is not one a kubelet's serving certificate has"
    );
    let c = from_the_node(request(
        "system:node:appliance",
        &["system:nodes"],
        vec![dns(NODE), SanType::URI("spiffe://x".try_into().unwrap())],
    ));
    assert!(denied(decide(&c, Some(&node()))).contains("only DNS names and IP addresses"));
    let c = from_the_node(request("system:node:appliance", &["system:nodes"], vec![]));
    assert_eq!(
        denied(decide(&c, Some(&node()))),
        "the request names no DNS name or IP address"
    );
}

#[test]
fn a_request_that_is_not_a_signed_csr_is_denied() {
    let c = from_the_node(b"not pem".to_vec());
    assert!(denied(decide(&c, Some(&node()))).starts_with("the request is not PEM"));
    // A request whose signature does not match its content: one byte of the signed part changed.
    let pem = kubelets_own();
    let (_, parsed) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
    let mut der = parsed.contents.clone();
    let at = der
        .windows(9)
        .position(|w| w == b"appliance")
        .expect("the CN in the DER");
    der[at] = b'b';
    let tampered = format!(
        "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
        base64_lines(&der)
    );
    let c = from_the_node(tampered.into_bytes());
    assert!(denied(decide(&c, Some(&node()))).contains("signature does not verify"));
}

fn base64_lines(der: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(der)
}

#[test]
fn a_request_before_its_node_waits_and_others_are_not_ours() {
    let c = from_the_node(kubelets_own());
    assert_eq!(
        decide(&c, None),
        Some(Decision::Wait("no Node appliance yet".into()))
    );
    let mut other = c.clone();
    other.spec.signer_name = "kubernetes.io/kube-apiserver-client".into();
    assert_eq!(decide(&other, Some(&node())), None);
    let mut done: CertificateSigningRequest = c.clone();
    done.status = serde_json::from_value(serde_json::json!({"conditions": [
        {"type": "Approved", "status": "True", "reason": "x", "message": "y"}]}))
    .unwrap();
    assert_eq!(decide(&done, Some(&node())), None);
}
