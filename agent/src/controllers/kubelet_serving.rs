//! Approves kubelets' serving certificates (`--approve-kubelet-serving`): a kubelet with `serverTLSBootstrap`
//! asks for its certificate by a CertificateSigningRequest to the `kubernetes.io/kubelet-serving` signer, which
//! Kubernetes signs with the cluster CA once something approves it, and asks again before it ends. Nothing in
//! Kubernetes approves these (kubeadm approves only kubelets' client certificates), so a kubelet would serve a
//! self-signed certificate that no client can verify and that is never renewed.
//!
//! A request is approved only when it is what a kubelet asks for itself: made by `system:node:<name>` (in
//! `system:nodes`), its subject exactly that user and group, its signature valid, its usages server
//! authentication (with digital signature and key encipherment), and each of its names an address of its Node
//! (DNS names among the Node's host and DNS names, IP addresses among its IPs). Otherwise it is denied, with the
//! reason in the condition's message (`kubectl describe csr`). One whose Node does not exist yet is looked at
//! again later. Requests to other signers are not this controller's: it cannot approve them (its ClusterRole
//! names only this signer).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::ResourceExt as _;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::oid_registry::{OID_X509_COMMON_NAME, OID_X509_ORGANIZATION_NAME};
use x509_parser::prelude::FromDer as _;

pub const SIGNER: &str = "kubernetes.io/kubelet-serving";
const NODES_GROUP: &str = "system:nodes";
const NODE_USER_PREFIX: &str = "system:node:";
/// What a kubelet asks for: `server auth` always, with `digital signature` and, for an RSA key, `key
/// encipherment`.
const ALLOWED_USAGES: [&str; 3] = ["digital signature", "key encipherment", "server auth"];
/// How soon a request whose Node does not exist yet is looked at again.
const NODE_WAIT: Duration = Duration::from_secs(10);

/// What to do with a request: approve or deny it (the condition's message says why), or look again later.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    Approve(String),
    Deny(String),
    Wait(String),
}

/// The decision for `csr`, a request to [`SIGNER`] not yet approved or denied, given the Node its requester
/// names (None: no such Node). None for a request that is not this controller's to decide.
pub fn decide(csr: &CertificateSigningRequest, node: Option<&Node>) -> Option<Decision> {
    if csr.spec.signer_name != SIGNER || decided(csr) {
        return None;
    }
    let node_name = match requester(csr) {
        Ok(n) => n,
        Err(why) => return Some(Decision::Deny(why)),
    };
    let names = match requested_names(&csr.spec.request.0, &csr.spec.username) {
        Ok(n) => n,
        Err(why) => return Some(Decision::Deny(why)),
    };
    let usages = csr.spec.usages.as_deref().unwrap_or_default();
    if !usages.iter().any(|u| u == "server auth") {
        return Some(Decision::Deny(format!(
            "usages {usages:?} do not include \"server auth\""
        )));
    }
    if let Some(u) = usages
        .iter()
        .find(|u| !ALLOWED_USAGES.contains(&u.as_str()))
    {
        return Some(Decision::Deny(format!(
            "usage {u:?} is not one a kubelet's serving certificate has"
        )));
    }
    let Some(node) = node else {
        return Some(Decision::Wait(format!("no Node {node_name} yet")));
    };
    let (dns, ips) = node_addresses(node);
    for name in &names {
        let known = match name {
            Name::Dns(d) => dns.contains(d),
            Name::Ip(ip) => ips.contains(ip),
        };
        if !known {
            return Some(Decision::Deny(format!(
                "{name} is not an address of Node {node_name} (its addresses: {})",
                node.status
                    .as_ref()
                    .and_then(|s| s.addresses.as_ref())
                    .map(|a| a
                        .iter()
                        .map(|a| format!("{}={}", a.type_, a.address))
                        .collect::<Vec<_>>()
                        .join(", "))
                    .unwrap_or_else(|| "none".into())
            )));
        }
    }
    Some(Decision::Approve(format!(
        "{node_name}'s kubelet, for its Node's addresses: {}",
        names
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// Whether the request has been approved or denied already.
fn decided(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| matches!(c.type_.as_str(), "Approved" | "Denied"))
        })
}

/// The Node whose kubelet made the request: the API server sets `username` and `groups` from who created it.
fn requester(csr: &CertificateSigningRequest) -> Result<String, String> {
    let user = csr.spec.username.as_deref().unwrap_or_default();
    let node = user
        .strip_prefix(NODE_USER_PREFIX)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("requested by {user:?}, not by a node (system:node:<name>)"))?;
    let groups = csr.spec.groups.as_deref().unwrap_or_default();
    if !groups.iter().any(|g| g == NODES_GROUP) {
        return Err(format!("requested by {user:?}, not in group {NODES_GROUP}"));
    }
    Ok(node.to_owned())
}

/// A name a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Name {
    Dns(String),
    Ip(IpAddr),
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Name::Dns(d) => write!(f, "DNS:{d}"),
            Name::Ip(ip) => write!(f, "IP:{ip}"),
        }
    }
}

/// The names the PEM request `pem` asks for, once its signature and its subject (exactly `user`'s name and
/// the nodes' group) are checked; only DNS names and IP addresses, at least one.
fn requested_names(pem: &[u8], user: &Option<String>) -> Result<Vec<Name>, String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem)
        .map_err(|e| format!("the request is not PEM: {e}"))?;
    if pem.label != "CERTIFICATE REQUEST" {
        return Err(format!(
            "the request is a PEM {:?}, not a CERTIFICATE REQUEST",
            pem.label
        ));
    }
    let (_, req) = X509CertificationRequest::from_der(&pem.contents)
        .map_err(|e| format!("the request does not parse: {e}"))?;
    req.verify_signature()
        .map_err(|e| format!("the request's signature does not verify: {e}"))?;
    let subject = &req.certification_request_info.subject;
    let mut cn = Vec::new();
    let mut o = Vec::new();
    for attr in subject.iter_attributes() {
        let value = attr
            .as_str()
            .map_err(|e| format!("the subject's {} is not text: {e}", attr.attr_type()))?;
        if *attr.attr_type() == OID_X509_COMMON_NAME {
            cn.push(value);
        } else if *attr.attr_type() == OID_X509_ORGANIZATION_NAME {
            o.push(value);
        } else {
            return Err(format!(
                "the subject has {} ({value:?}): a kubelet's has only CN and O",
                attr.attr_type()
            ));
        }
    }
    let user = user.as_deref().unwrap_or_default();
    if cn != [user] || o != [NODES_GROUP] {
        return Err(format!(
            "the subject is CN={cn:?} O={o:?}, not CN={user} O={NODES_GROUP}"
        ));
    }
    let mut names = Vec::new();
    for ext in req.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(san) = ext else {
            continue;
        };
        for n in &san.general_names {
            names.push(match n {
                GeneralName::DNSName(d) => Name::Dns(d.to_string()),
                GeneralName::IPAddress(bytes) => Name::Ip(ip(bytes)?),
                other => {
                    return Err(format!(
                        "the request names {other}: only DNS names and IP addresses"
                    ))
                }
            });
        }
    }
    if names.is_empty() {
        return Err("the request names no DNS name or IP address".into());
    }
    Ok(names)
}

fn ip(bytes: &[u8]) -> Result<IpAddr, String> {
    match bytes.len() {
        4 => Ok(IpAddr::from(<[u8; 4]>::try_from(bytes).expect("4 bytes"))),
        16 => Ok(IpAddr::from(<[u8; 16]>::try_from(bytes).expect("16 bytes"))),
        n => Err(format!("an IP address of {n} bytes")),
    }
}

/// The Node's DNS names (its Hostname, InternalDNS and ExternalDNS addresses) and IP addresses (InternalIP,
/// ExternalIP).
fn node_addresses(node: &Node) -> (Vec<String>, Vec<IpAddr>) {
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    for a in node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
    {
        match a.type_.as_str() {
            "Hostname" | "InternalDNS" | "ExternalDNS" => dns.push(a.address.clone()),
            "InternalIP" | "ExternalIP" => ips.extend(a.address.parse::<IpAddr>().ok()),
            _ => {}
        }
    }
    (dns, ips)
}

/// Approves or denies the kubelets' serving certificate requests until it is dropped (when the agent stops
/// leading).
pub async fn run(client: kube::Client) {
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client);
    let only_ours = watcher::Config::default().fields(&format!("spec.signerName={SIGNER}"));
    let ctx = Arc::new((csrs.clone(), nodes));
    Controller::new(csrs, only_ours)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| std::future::ready(()))
        .await;
}

type Ctx = (Api<CertificateSigningRequest>, Api<Node>);

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Error(String);

async fn reconcile(csr: Arc<CertificateSigningRequest>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let (csrs, nodes) = ctx.as_ref();
    if csr.spec.signer_name != SIGNER || decided(&csr) {
        return Ok(Action::await_change());
    }
    let node = match requester(&csr) {
        Ok(name) => nodes
            .get_opt(&name)
            .await
            .map_err(|e| Error(format!("reading Node {name}: {e}")))?,
        Err(_) => None,
    };
    let name = csr.name_any();
    let (condition, reason, message) = match decide(&csr, node.as_ref()) {
        None => return Ok(Action::await_change()),
        Some(Decision::Wait(why)) => {
            tracing::info!(csr = %name, %why, "kubelet serving certificate: waiting");
            return Ok(Action::requeue(NODE_WAIT));
        }
        Some(Decision::Approve(why)) => ("Approved", "FootholdNodeAddresses", why),
        Some(Decision::Deny(why)) => ("Denied", "FootholdNotTheNodesOwn", why),
    };
    // The request as read, with the condition added: a PUT (RBAC's `update` of the approval), refused if the
    // request changed since (another approver), and then looked at again.
    let mut approval = csr.as_ref().clone();
    let conditions = approval
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    conditions.push(CertificateSigningRequestCondition {
        type_: condition.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.clone()),
        ..Default::default()
    });
    csrs.replace_subresource("approval", &name, &PostParams::default(), &approval)
        .await
        .map_err(|e| Error(format!("{condition} {name}: {e}")))?;
    if condition == "Approved" {
        tracing::info!(csr = %name, %message, "kubelet serving certificate approved");
    } else {
        tracing::warn!(csr = %name, %message, "kubelet serving certificate denied");
    }
    Ok(Action::await_change())
}

fn error_policy(csr: Arc<CertificateSigningRequest>, e: &Error, _: Arc<Ctx>) -> Action {
    tracing::warn!(csr = %csr.name_any(), error = %e, "kubelet serving certificate");
    Action::requeue(Duration::from_secs(15))
}

#[cfg(test)]
mod tests;
