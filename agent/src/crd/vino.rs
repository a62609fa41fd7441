//! `Vino` and `IPPool` (airship.airshipit.org/v1), with Airship ViNO's field names. The reconciler is issue 6's;
//! the types ship now so all CRDs ship together.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "airship.airshipit.org",
    version = "v1",
    kind = "Vino",
    plural = "vinoes",
    namespaced,
    status = "VinoStatus",
    shortname = "vino",
    doc = "Virtual machines on labelled nodes, each published as a BareMetalHost",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct VinoSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<NodeSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<CpuConfiguration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<Network>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<VmNodeSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_set_options: Option<DaemonSetOptions>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_label_keys_to_copy: Vec<String>,
    /// Airship's interface for its libvirt container's VMs (`VM_BRIDGE_INTERFACE`): without effect here, which
    /// the condition `FieldsHonoured` says; each network names its `physicalInterface`.
    #[serde(default, rename = "vmBridge", skip_serializing_if = "Option::is_none")]
    pub vm_bridge: Option<String>,
    /// Inline BMC credentials, accepted for compatibility: the reconciler copies them into a Secret and says
    /// so in the status. Prefer `bmcCredentialsSecret`.
    #[serde(
        default,
        rename = "bmcCredentials",
        skip_serializing_if = "Option::is_none"
    )]
    pub bmc_credentials: Option<BmcCredentials>,
    /// A Secret with `username` and `password` for the VMs' Redfish BMCs.
    #[serde(
        default,
        rename = "bmcCredentialsSecret",
        skip_serializing_if = "Option::is_none"
    )]
    pub bmc_credentials_secret: Option<String>,
    #[serde(
        default,
        rename = "pxeBootImageHost",
        skip_serializing_if = "Option::is_none"
    )]
    pub pxe_boot_image_host: Option<String>,
    #[serde(
        default,
        rename = "pxeBootImageHostPort",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1, max = 65535))]
    pub pxe_boot_image_host_port: Option<i32>,
    /// A ConfigMap whose keys are flavor names and values `{vcpus, memoryMiB, rootDiskGb}` (JSON or YAML):
    /// node sets name a flavor from it, and a site overrides them by editing the ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavors_config_map: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuConfiguration {
    /// CPUs VMs never run on, in cpuset syntax (`0-1,4`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_exclude: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    pub name: String,
    /// CIDR, IPv4 or IPv6.
    pub subnet: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_subnet_bit_step: Option<i32>,
    #[serde(
        default,
        rename = "dhcpAllocationStart",
        skip_serializing_if = "Option::is_none"
    )]
    pub dhcp_allocation_start: Option<String>,
    #[serde(
        default,
        rename = "dhcpAllocationStop",
        skip_serializing_if = "Option::is_none"
    )]
    pub dhcp_allocation_stop: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_allocation_start: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_allocation_stop: Option<String>,
    /// Airship's name for `staticAllocationStart`: the range VM interfaces and node bridges take addresses
    /// from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_start: Option<String>,
    /// Airship's name for `staticAllocationStop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_stop: Option<String>,
    /// Airship's DHCP addresses: a CIDR in the subnet whose first four addresses are skipped; each node's DHCP
    /// block is carved from the rest, as from `dhcpAllocationStart..dhcpAllocationStop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_subnet: Option<String>,
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, rename = "dns_servers", skip_serializing_if = "Vec::is_empty")]
    pub dns_servers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// The first bytes of every MAC allocated on this network (`52:54:00`), or Airship's zero-padded six
    /// (`52:54:00:06:00:00`: the trailing zero bytes, at most three, are allocated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_interface: Option<String>,
    /// Airship's network template by name: `management` (the template Airship's ViNO ships) is built by the
    /// builder itself, any other name is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub libvirt_template: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge_name: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Route {
    pub network: String,
    pub netmask: String,
    pub gateway: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VmNodeSet {
    pub name: String,
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub count: i32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bmh_labels: BTreeMap<String, String>,
    /// Airship's domain template reference (`{name, namespace}`): refused, naming it; the builder writes the
    /// domain XML itself.
    // Any JSON in Rust, so that a string an older Foothold stored here is refused the same way instead of
    // failing to decode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "namespaced_name_schema")]
    pub libvirt_template: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_interfaces: Vec<NetworkInterface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disk_drives: Vec<DiskDrive>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data_template: Option<NamespacedName>,
    /// Default `/dev/vda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_interface_name: Option<String>,
    #[serde(
        default,
        rename = "enableVNC",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub enable_vnc: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor: Option<Flavor>,
}

/// A VM's size: a named flavor from `flavorsConfigMap`, with any field given here overriding it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Flavor {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub vcpus: Option<i32>,
    #[serde(default, rename = "memoryMiB", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub memory_mib: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub root_disk_gb: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct NetworkInterface {
    pub name: String,
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub network: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<i32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct DiskDrive {
    pub name: String,
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<DiskOptions>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub size_gb: Option<i64>,
    #[serde(default)]
    pub sparse: bool,
}

fn namespaced_name_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    generator.subschema_for::<Option<NamespacedName>>()
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct NamespacedName {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonSetOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaced_name: Option<NamespacedName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub libvirt_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sushy_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vino_builder_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_annotator_image: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct BmcCredentials {
    pub username: String,
    pub password: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VinoStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `DaemonSetReady`, `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    #[schemars(with = "Vec<super::schema::Condition>")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeVms>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct NodeVms {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vms: Vec<VmStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VmStatus {
    pub name: String,
    pub bare_metal_host: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<VmInterface>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct VmInterface {
    pub network: String,
    pub ip: String,
    pub mac: String,
}

/// Addresses of one network, allocated by the ViNO reconciler.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "airship.airshipit.org",
    version = "v1",
    kind = "IPPool",
    namespaced,
    shortname = "ippool",
    doc = "IP and MAC allocations of one ViNO network",
    printcolumn(name = "Subnet", type_ = "string", json_path = ".spec.subnet"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct IPPoolSpec {
    pub subnet: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<IpRange>,
    #[serde(
        default,
        rename = "allocatedIPs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub allocated_ips: Vec<AllocatedIp>,
    /// Per-node DHCP sub-ranges (2^instanceSubnetBitStep addresses each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocated_ranges: Vec<AllocatedRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_prefix: Option<String>,
    #[serde(default, rename = "nextMAC", skip_serializing_if = "Option::is_none")]
    pub next_mac: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct IpRange {
    pub start: String,
    pub stop: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllocatedRange {
    pub start: String,
    pub stop: String,
    /// The node it serves.
    pub allocated_to: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllocatedIp {
    pub ip: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// `<bmh>/<network>` for a VM interface, `node/<node>` for a node's bridge.
    pub allocated_to: String,
}
