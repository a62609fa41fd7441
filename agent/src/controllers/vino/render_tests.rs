//! The ViNO rendering, pure: the objects a Vino wants from what was observed.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use serde_json::json;

use super::observe::Observed;
use super::plan::NODE_LABEL;
use super::render::*;
use crate::controllers::vino::observe::Credentials;
use crate::crd::vino::Vino;
use crate::vino_plan::Plan;
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeStatus};

fn vino(nodes: serde_json::Value) -> Vino {
    serde_json::from_value(json!({
        "apiVersion": "airship.airshipit.org/v1", "kind": "Vino",
        "metadata": {"name": "v", "namespace": "site", "uid": "u1", "generation": 2},
        "spec": {
            "networks": [{"name": "oam", "subnet": "192.168.100.0/24", "staticAllocationStart": "192.168.100.10",
                          "staticAllocationStop": "192.168.100.50", "dhcpAllocationStart": "192.168.100.128",
                          "dhcpAllocationStop": "192.168.100.191", "instanceSubnetBitStep": 4,
                          "macPrefix": "52:54:00"}],
            "nodes": nodes,
        },
    }))
    .unwrap()
}

fn observed(inline: bool, vnc: &[(&str, &str)]) -> Observed {
    let node = Node {
        metadata: ObjectMeta {
            name: Some("n1".into()),
            labels: Some([("rack".to_owned(), "r1".to_owned())].into()),
            ..ObjectMeta::default()
        },
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: "10.0.0.11".into(),
            }]),
            ..NodeStatus::default()
        }),
        ..Node::default()
    };
    Observed {
        credentials: Credentials {
            secret: if inline { "v-bmc-credentials" } else { "bmc" }.into(),
            inline,
            value: ("admin".into(), "pw".into()),
        },
        nodes: vec![node],
        flavors: BTreeMap::new(),
        airship_flavors: None,
        pools: BTreeMap::new(),
        templates: BTreeMap::new(),
        vnc_passwords: vnc
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        held: BTreeSet::new(),
        drain_asked: BTreeSet::new(),
    }
}

fn worker(vnc: bool, network: &str) -> serde_json::Value {
    json!([{"name": "worker", "count": 2, "enableVNC": vnc,
            "networkInterfaces": [{"name": "enp1s0", "network": network}],
            "flavor": {"vcpus": 2, "memoryMiB": 4096, "rootDiskGb": 20}}])
}

fn names<T: kube::Resource>(objects: &[T]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o.meta().name.clone().unwrap())
        .collect()
}

#[test]
fn two_vms_on_a_node_are_hosts_with_secrets_a_plan_a_pool_and_the_daemon_set() {
    let v = vino(worker(false, "oam"));
    let mut made = 0;
    let d = desired(&v, "site", &observed(true, &[]), "builder:1", &mut || {
        made += 1;
        "new".into()
    })
    .unwrap();
    assert_eq!(made, 0, "no VNC, no password");
    let hosts = names(&d.hosts);
    assert_eq!(hosts.len(), 2);
    let mut secrets = vec!["v-bmc-credentials".to_owned()];
    for h in &hosts {
        secrets.push(format!("{h}-credentials"));
        secrets.push(format!("{h}-network-data"));
    }
    assert_eq!(names(&d.secrets), secrets);
    let bmh = &d.hosts[0];
    assert_eq!(bmh.labels()[NODE_LABEL], "n1");
    let bmc = bmh.spec.bmc.as_ref().unwrap();
    assert!(bmc.address.contains("10.0.0.11:8000"), "{}", bmc.address);
    assert_eq!(bmc.credentials_name, format!("{}-credentials", hosts[0]));
    assert_eq!(d.pools.len(), 1);
    assert_eq!(d.pools[0].change, PoolChange::Create);
    assert_eq!(
        d.pools[0].pool.spec.allocated_ips.len(),
        3,
        "two VMs and the node's bridge"
    );
    let plan: Plan = serde_json::from_str(&d.plans[0].data.as_ref().unwrap()["plan.json"]).unwrap();
    assert_eq!((plan.node.as_str(), plan.vms.len()), ("n1", 2));
    let pod = d.daemon_set.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.containers[2].image.as_deref(), Some("builder:1"));
    assert_eq!(d.account.0, "v-vino-builder");
    assert_eq!(d.nodes[0].vms.len(), 2);

    // The pool as that reconcile wrote it: the next one leaves it alone.
    let mut again = observed(true, &[]);
    let mut pool = d.pools[0].pool.clone();
    pool.metadata.resource_version = Some("5".into());
    again.pools.insert("v-oam".into(), pool);
    let d2 = desired(&v, "site", &again, "builder:1", &mut || unreachable!()).unwrap();
    assert_eq!(d2.pools[0].change, PoolChange::Unchanged);
    assert_eq!(
        d2.pools[0].pool.metadata.resource_version.as_deref(),
        Some("5")
    );
}

#[test]
fn vnc_passwords_given_out_are_kept_and_only_new_vms_get_new_ones() {
    let v = vino(worker(true, "oam"));
    let first = desired(&v, "site", &observed(false, &[]), "b", &mut || "x".into()).unwrap();
    let vms: Vec<String> = first.nodes[0]
        .vms
        .iter()
        .map(|vm| vm.name.clone())
        .collect();
    let mut made = 0;
    let d = desired(
        &v,
        "site",
        &observed(false, &[(&vms[0], "kept")]),
        "b",
        &mut || {
            made += 1;
            "fresh".into()
        },
    )
    .unwrap();
    assert_eq!(made, 1);
    let vnc = d
        .secrets
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some("v-vnc"))
        .unwrap();
    let data = vnc.data.as_ref().unwrap();
    assert_eq!(data[&vms[0]].0, b"kept");
    assert_eq!(data[&vms[1]].0, b"fresh");
    // Referenced credentials are not copied into a Secret of the Vino's.
    assert!(!names(&d.secrets).contains(&"v-bmc-credentials".to_owned()));
}

#[test]
fn an_interface_on_an_unknown_network_is_an_error_naming_it() {
    let v = vino(worker(false, "storage"));
    let e = desired(&v, "site", &observed(true, &[]), "b", &mut || "x".into())
        .err()
        .unwrap();
    assert_eq!(
        e,
        "node set worker: interface enp1s0 names unknown network storage"
    );
}

/// A node set's domain template (an older Foothold's string, Airship's `{name, namespace}`) and any network
/// template but Airship's stock `management` are refused by name; `management` gives its routed bridge.
#[test]
fn airships_libvirt_templates_are_refused_naming_the_field_but_its_management_network() {
    for t in [
        json!("worker-domain"),
        json!({"name": "worker-domain", "namespace": "vino-system"}),
    ] {
        let mut set = worker(false, "oam");
        set[0]["libvirtTemplate"] = t;
        let e = desired(&vino(set), "site", &observed(true, &[]), "b", &mut || {
            "x".into()
        })
        .err()
        .unwrap();
        assert!(
            e.starts_with("node set worker: libvirtTemplate ")
                && e.contains("worker-domain")
                && e.contains("not supported"),
            "{e}"
        );
    }
    let mut v = vino(worker(false, "oam"));
    v.spec.networks[0].libvirt_template = Some("pxe".into());
    let e = desired(&v, "site", &observed(true, &[]), "b", &mut || "x".into())
        .err()
        .unwrap();
    assert!(
        e.starts_with("network oam: libvirtTemplate \"pxe\" is not supported"),
        "{e}"
    );
    v.spec.networks[0].libvirt_template = Some("management".into());
    let d = desired(&v, "site", &observed(true, &[]), "b", &mut || "x".into()).unwrap();
    let plan: serde_json::Value =
        serde_json::from_str(&d.plans[0].data.as_ref().unwrap()["plan.json"]).unwrap();
    assert_eq!(plan["networks"][0]["routed"], json!(true), "{plan}");
    assert_eq!(
        plan["networks"][0]["bridge"],
        json!("vm-infra-bridge"),
        "{plan}"
    );
}

/// Airship's sample networkData template (Go's text/template with sprig's `dict` and `set`), unmodified.
#[test]
fn airships_go_template_renders_the_vms_links_and_networks() {
    let secret: serde_json::Value = serde_saphyr::from_str(include_str!(
        "../../../tests/fixtures/airship/network-template-secret.yaml"
    ))
    .unwrap();
    let template = secret["stringData"]["template"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut set = worker(false, "oam");
    set[0]["networkInterfaces"][0]["mtu"] = json!(9100);
    set[0]["networkDataTemplate"] = json!({"name": "test-template", "namespace": "default"});
    let mut v = vino(set);
    v.spec.networks[0].dns_servers = vec!["135.188.34.124".into()];
    let mut obs = observed(true, &[]);
    obs.templates.insert("worker".into(), template);
    let d = desired(&v, "site", &obs, "b", &mut || "x".into()).unwrap();
    let status = &d.nodes[0].vms[0];
    let secret = d
        .secrets
        .iter()
        .find(|s| {
            s.metadata.name.as_deref() == Some(&format!("{}-network-data", status.bare_metal_host))
        })
        .unwrap();
    let text = &secret.string_data.as_ref().unwrap()["networkData"];
    let nd: serde_json::Value =
        serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
    let iface = &status.interfaces[0];
    assert_eq!(
        nd["links"],
        json!([{"id": "enp1s0", "name": "enp1s0", "type": "phy", "mtu": 9100,
                "ethernet_mac_address": iface.mac}]),
        "{text}"
    );
    // The link and address come from the maps `set` filled while ranging over the interfaces.
    assert_eq!(
        nd["networks"],
        json!([{"id": "oam", "type": null, "link": "enp1s0", "ip_address": iface.ip,
                "dns_nameservers": ["135.188.34.124"]}]),
        "{text}"
    );
}
