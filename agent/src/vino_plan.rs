//! The ViNO node plan: what the reconciler writes into each node's ConfigMap `<vino>-node-<node>` (key
//! `plan.json`) and `vino-builder` reads there. One type for both sides, so that a field renamed on one side
//! is renamed on the other; the interfaces keep the snake_case keys networkData templates see. Lists and flags
//! may be missing (a plan written by an older agent): they read as empty and off.

use serde::{Deserialize, Serialize};

use crate::crd::vino::Route;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub node: String,
    pub cpu_exclude: Option<String>,
    /// The Secret (in the Vino's namespace) holding each VNC-enabled VM's password under the VM's name.
    pub vnc_password_secret: Option<String>,
    #[serde(default)]
    pub networks: Vec<NetworkPlan>,
    #[serde(default)]
    pub vms: Vec<VmPlan>,
}

/// A Vino network on this node: its bridge, the node's address on it and its DHCP block.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPlan {
    pub network: String,
    pub bridge: String,
    /// The node's address on the bridge.
    pub ip: Option<String>,
    pub prefix_length: Option<u32>,
    pub dhcp_start: Option<String>,
    pub dhcp_stop: Option<String>,
    pub physical_interface: Option<String>,
    /// Routed out (libvirt's `route` forward) even without a physical interface: Airship's `management`
    /// network template.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub routed: bool,
    /// The BOOTP file the network's DHCP hands out (the Vino's `pxeBootImageHost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootp_file: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VmPlan {
    pub name: String,
    pub bare_metal_host: String,
    pub vcpus: u32,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    pub root_disk_gb: u64,
    /// Guest memory backed by the host's huge pages.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hugepages: bool,
    #[serde(default)]
    pub interfaces: Vec<InterfacePlan>,
    #[serde(default)]
    pub disk_drives: Vec<DiskPlan>,
    #[serde(default, rename = "enableVNC")]
    pub enable_vnc: bool,
}

/// A VM's interface, as networkData templates see it too (`{{ range .interfaces }}{{ .mac }}`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct InterfacePlan {
    pub name: String,
    pub network: String,
    pub mac: String,
    pub ip: Option<String>,
    pub prefix_length: Option<u32>,
    /// `bridge`: attach to the host bridge directly; anything else: to the libvirt network.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub mtu: Option<u32>,
    #[serde(default)]
    pub dns_servers: Vec<String>,
    #[serde(default)]
    pub routes: Vec<Route>,
    pub bridge: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct DiskPlan {
    pub name: String,
    /// `file` (default): a volume in the pool, or the file at `path`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub path: Option<String>,
    pub options: Option<DiskOptionsPlan>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DiskOptionsPlan {
    pub size_gb: Option<u64>,
    #[serde(default)]
    pub sparse: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            node: "worker-1".into(),
            cpu_exclude: Some("0-1".into()),
            vnc_password_secret: Some("site-vnc".into()),
            networks: vec![NetworkPlan {
                network: "pxe".into(),
                bridge: "vino-pxe".into(),
                ip: Some("172.3.3.1".into()),
                prefix_length: Some(24),
                dhcp_start: Some("172.3.3.10".into()),
                dhcp_stop: Some("172.3.3.20".into()),
                physical_interface: None,
                routed: true,
                bootp_file: Some("http://172.3.3.1:80/dualboot.ipxe".into()),
            }],
            vms: vec![VmPlan {
                name: "worker-1-0".into(),
                bare_metal_host: "site-worker-1-0".into(),
                vcpus: 2,
                memory_mib: 4096,
                root_disk_gb: 20,
                hugepages: false,
                interfaces: vec![InterfacePlan {
                    name: "eth0".into(),
                    network: "pxe".into(),
                    mac: "52:54:00:00:00:01".into(),
                    ip: Some("172.3.3.11".into()),
                    prefix_length: Some(24),
                    kind: Some("bridge".into()),
                    mtu: Some(1500),
                    dns_servers: vec!["8.8.8.8".into()],
                    routes: vec![Route {
                        network: "0.0.0.0".into(),
                        netmask: "0.0.0.0".into(),
                        gateway: "172.3.3.1".into(),
                    }],
                    bridge: Some("vino-pxe".into()),
                }],
                disk_drives: vec![DiskPlan {
                    name: "data".into(),
                    kind: None,
                    path: None,
                    options: Some(DiskOptionsPlan {
                        size_gb: Some(10),
                        sparse: true,
                    }),
                }],
                enable_vnc: true,
            }],
        }
    }

    #[test]
    fn a_plan_survives_the_configmap_round_trip() {
        let p = plan();
        let text = serde_json::to_string_pretty(&p).unwrap();
        assert_eq!(serde_json::from_str::<Plan>(&text).unwrap(), p);
    }

    /// The keys are the wire format: networkData templates and older builders read them by these names.
    #[test]
    fn the_wire_names_are_fixed() {
        let v = serde_json::to_value(plan()).unwrap();
        assert_eq!(v["vncPasswordSecret"], "site-vnc");
        assert_eq!(v["networks"][0]["prefixLength"], 24);
        let vm = &v["vms"][0];
        assert_eq!(
            (vm["memoryMiB"].clone(), vm["rootDiskGb"].clone()),
            (4096.into(), 20.into())
        );
        assert_eq!(vm["enableVNC"], true);
        assert_eq!(vm["bareMetalHost"], "site-worker-1-0");
        let i = &vm["interfaces"][0];
        assert_eq!(i["prefix_length"], 24);
        assert_eq!(i["type"], "bridge");
        assert_eq!(i["dns_servers"][0], "8.8.8.8");
        assert_eq!(vm["diskDrives"][0]["options"]["sizeGb"], 10);
    }
}
