//! What a BPA reconcile reads before it plans: the BareMetalHosts of the Provisioning's namespace, as the
//! planner sees them (MACs and addresses of their NICs, CPUs, memory, provisioning state, whose they are).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, ListParams, Resource, ResourceExt};

use super::plan::{Claim, Host};
use crate::controllers::common::Error;
use crate::crd::bpa::Provisioning;
use crate::crd::metal3::BareMetalHost;

/// Every BareMetalHost of `ns`.
pub async fn bare_metal_hosts(
    client: &kube::Client,
    ns: &str,
) -> Result<Vec<BareMetalHost>, Error> {
    Ok(Api::<BareMetalHost>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items)
}

/// Every BareMetalHost of `ns`, claims as `p` sees them.
pub async fn hosts(client: &kube::Client, ns: &str, p: &Provisioning) -> Result<Vec<Host>, Error> {
    Ok(hosts_of(&bare_metal_hosts(client, ns).await?, p))
}

/// `bmhs`, claims as `p` sees them.
pub fn hosts_of(bmhs: &[BareMetalHost], p: &Provisioning) -> Vec<Host> {
    bmhs.iter().map(|bmh| host_of(bmh, p)).collect()
}

/// The `consumerRef` a Provisioning puts on the hosts it installs.
pub fn consumer_ref(p: &Provisioning) -> ObjectReference {
    ObjectReference {
        api_version: Some(Provisioning::api_version(&()).into_owned()),
        kind: Some(Provisioning::kind(&()).into_owned()),
        name: p.metadata.name.clone(),
        namespace: p.metadata.namespace.clone(),
        uid: p.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

/// Whose `consumer` says a host is, as `p` sees it: its own by kind, namespace and name (a Provisioning deleted
/// and made again under the same name takes its hosts back).
fn claim_of(consumer: Option<&ObjectReference>, p: &Provisioning) -> Claim {
    let Some(c) = consumer else {
        return Claim::Free;
    };
    let ours = c.kind.as_deref() == Some(Provisioning::kind(&()).as_ref())
        && c.api_version
            .as_deref()
            .is_some_and(|v| v.starts_with(&format!("{}/", Provisioning::group(&()))))
        && c.name == p.metadata.name
        && c.namespace == p.metadata.namespace;
    if ours {
        Claim::Ours
    } else {
        Claim::Other(format!(
            "{} {}/{}",
            c.kind.as_deref().unwrap_or("object"),
            c.namespace.as_deref().unwrap_or_default(),
            c.name.as_deref().unwrap_or_default()
        ))
    }
}

fn host_of(bmh: &BareMetalHost, p: &Provisioning) -> Host {
    let status = bmh.status.clone().unwrap_or_default();
    let hw = status.hardware.unwrap_or_default();
    Host {
        name: bmh.name_any(),
        labels: bmh.labels().clone(),
        boot_mac: bmh.spec.boot_mac_address.clone(),
        nics: hw.nics.into_iter().map(|n| (n.mac, n.ip)).collect(),
        cpus: hw.cpu.and_then(|c| c.count),
        ram_mebibytes: hw.ram_mebibytes,
        state: status.provisioning.map(|p| p.state).unwrap_or_default(),
        claim: claim_of(bmh.spec.consumer_ref.as_ref(), p),
    }
}
