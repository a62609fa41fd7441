//! What a BPA reconcile reads before it plans: the BareMetalHosts of the Provisioning's namespace, as the
//! planner sees them (MACs and addresses of their NICs, CPUs, memory, provisioning state).

use kube::api::{Api, ListParams, ResourceExt};

use super::plan::Host;
use crate::controllers::common::Error;
use crate::crd::metal3::BareMetalHost;

/// Every BareMetalHost of `ns`.
pub async fn hosts(client: &kube::Client, ns: &str) -> Result<Vec<Host>, Error> {
    Ok(Api::<BareMetalHost>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(host_of)
        .collect())
}

fn host_of(bmh: &BareMetalHost) -> Host {
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
    }
}
