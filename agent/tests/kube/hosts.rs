//! BareMetalHosts as the BPA's tests need them: created, then given the status BMO would write (inspected
//! hardware and a provisioning state), where no BMO runs.

use foothold_agent::crd::metal3::BareMetalHost;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

/// A host fixture: name, MAC, IP of that NIC, CPUs, MiB of RAM, provisioning state.
pub(crate) type Hw<'a> = (&'a str, &'a str, &'a str, i64, i64, &'a str);

pub(crate) async fn bmh(client: &kube::Client, ns: &str, hw: Hw<'_>, labels: Value) {
    let (name, mac, _, cpus, _, _) = hw;
    let api: Api<BareMetalHost> = Api::namespaced(client.clone(), ns);
    let obj: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name, "labels": labels},
        "spec": {"online": true, "bootMACAddress": mac.to_uppercase(),
                 "bmc": {"address": format!("ipmi://192.168.0.{cpus}"), "credentialsName": format!("{name}-bmc")}},
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    set_bmh_status(client, ns, hw).await;
}

pub(crate) async fn set_bmh_status(client: &kube::Client, ns: &str, hw: Hw<'_>) {
    let (name, mac, ip, cpus, ram_mib, state) = hw;
    let api: Api<BareMetalHost> = Api::namespaced(client.clone(), ns);
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": {
        "errorCount": 0, "errorMessage": "", "operationalStatus": "OK", "poweredOn": true,
        "provisioningFailCount": 0,
        "provisioning": {"ID": format!("id-{name}"), "state": state},
        "hardware": {"cpu": {"count": cpus, "arch": "x86_64"}, "ramMebibytes": ram_mib,
                     "nics": [{"name": "eno1", "mac": "02:00:00:00:00:ff", "ip": "192.168.100.7"},
                              {"name": "eno2", "mac": mac, "ip": ip}]},
    }})))
    .await
    .unwrap();
}
