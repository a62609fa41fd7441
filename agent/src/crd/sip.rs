//! `SIPCluster` (airship.airshipit.org/v1), with Airship SIP's field names and a status that names the chosen
//! hosts and service endpoints. The reconciler is issue 5's; the type ships now so all CRDs ship together.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "airship.airshipit.org",
    version = "v1",
    kind = "SIPCluster",
    namespaced,
    status = "SIPClusterStatus",
    shortname = "sipc",
    doc = "Hosts picked for a tenant cluster, and the cluster's load balancer, jump host and auth services",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct SIPClusterSpec {
    /// Node sets by role: `ControlPlane` and `Worker`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.all(role, role == 'ControlPlane' || role == 'Worker')",
        "message": "node roles are ControlPlane and Worker"
    }]))]
    pub nodes: BTreeMap<String, NodeSet>,
    #[serde(default)]
    pub services: SIPClusterServices,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSet {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<super::schema::LabelSelector>")]
    pub label_selector: Option<LabelSelector>,
    /// No two hosts of the role share a value of this label (e.g. `sip.airshipit.org/rack`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<NodeCount>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct NodeCount {
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub active: i32,
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub standby: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SIPClusterServices {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load_balancer_control_plane: Vec<LoadBalancerControlPlane>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load_balancer_worker: Vec<LoadBalancerWorker>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jump_host: Vec<JumpHost>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub auth: Vec<Auth>,
}

// What every service has (flattened into each service; no doc comment, which would describe every service).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceCommon {
    #[schemars(length(min = 1))]
    pub image: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    /// The `networks[].id` in a host's networkData whose address the service uses.
    #[serde(
        default,
        rename = "nodeInterfaceId",
        skip_serializing_if = "Option::is_none"
    )]
    pub node_interface_id: Option<String>,
    #[serde(default, rename = "clusterIP", skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerControlPlane {
    #[serde(flatten)]
    pub common: ServiceCommon,
    #[schemars(range(min = 1, max = 65535))]
    pub node_port: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerWorker {
    #[serde(flatten)]
    pub common: ServiceCommon,
    /// The worker ports passed through; or one port, `nodePort`, as Airship's sample gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_port_range: Option<PortRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub node_port: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PortRange {
    #[schemars(range(min = 1, max = 65535))]
    pub start: i32,
    #[schemars(range(min = 1, max = 65535))]
    pub end: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JumpHost {
    #[serde(flatten)]
    pub common: ServiceCommon,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub node_port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmc: Option<BmcOptions>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_authorized_keys: Vec<String>,
    /// The Secret holding the private keys the jump host uses to reach the nodes.
    #[serde(
        default,
        rename = "nodeSSHPrivateKeys",
        skip_serializing_if = "Option::is_none"
    )]
    pub node_ssh_private_keys: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct BmcOptions {
    #[serde(default)]
    pub proxy: bool,
}

/// An OIDC provider (Dex) for the tenant cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Auth {
    #[serde(flatten)]
    pub common: ServiceCommon,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub node_port: Option<i32>,
    /// The issuer URL Dex announces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_connector: Option<StaticConnector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ldap: Option<LdapConnector>,
    /// A Secret (`tls.crt`, `tls.key`, `ca.crt`) for Dex's TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StaticConnector {
    /// A Secret whose key `users` is a JSON or YAML list of `{email, hash, username}` (a bcrypt `hash`;
    /// `username` defaults to the e-mail's local part). Secret keys cannot hold e-mail addresses, hence a list.
    pub users_secret: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LdapConnector {
    pub host: String,
    #[serde(default, rename = "bindDN", skip_serializing_if = "Option::is_none")]
    pub bind_dn: Option<String>,
    /// A Secret with the bind password under `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind_password_secret: Option<String>,
    #[serde(rename = "userBaseDN")]
    pub user_base_dn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_filter: Option<String>,
    #[serde(
        default,
        rename = "groupBaseDN",
        skip_serializing_if = "Option::is_none"
    )]
    pub group_base_dn: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_no_ssl: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SIPClusterStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    #[schemars(with = "Vec<super::schema::Condition>")]
    pub conditions: Vec<Condition>,
    /// Chosen hosts by role.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hosts: BTreeMap<String, RoleHosts>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<ServiceEndpoint>,
    /// Hosts a role's selector matched but that could not be used, and why (unreadable networkData or BMC
    /// credentials, no networkData, no topology label); the first 50 by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_hosts: Vec<SkippedHost>,
    /// Hosts of this cluster that failed or disappeared, and the standby promoted in each one's place (the
    /// latest 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replacements: Vec<Replacement>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SkippedHost {
    pub name: String,
    pub reason: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Replacement {
    /// The host that failed or disappeared.
    pub host: String,
    /// The standby that took its place; none when there was no standby.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_by: Option<String>,
    /// RFC 3339.
    pub time: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct RoleHosts {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub standby: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceEndpoint {
    /// `loadBalancerControlPlane`, `loadBalancerWorker`, `jumpHost` or `auth`.
    pub service: String,
    /// The Service's in-cluster address, `<name>.<namespace>.svc:<port>`.
    pub address: String,
    /// The node ports it is reachable on from outside.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_ports: Vec<i32>,
}
