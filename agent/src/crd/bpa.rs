//! `Provisioning` and `Software` (bpa.akraino.org/v1alpha1), with the field names of Akraino ICN's BPA operator
//! and a real status.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A MAC address, `:` or `-` separated, any case.
pub const MAC_PATTERN: &str = r"^([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}$";
/// A Kubernetes memory quantity (`4Gi`, `16384Mi`, `8G`, `1e9`).
pub const QUANTITY_PATTERN: &str =
    r"^[0-9]+(\.[0-9]+)?([eE][0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$";

/// A workload cluster to install on matched BareMetalHosts. The cluster is named by the `cluster` label (ICN),
/// or the object's name when the label is absent; the `owner` label names its owner in the REST API.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "bpa.akraino.org",
    version = "v1alpha1",
    kind = "Provisioning",
    namespaced,
    status = "ProvisioningStatus",
    shortname = "prov",
    doc = "A workload cluster installed on BareMetalHosts matched by MAC address and hardware",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Hosts", type_ = "integer", json_path = ".status.hostCount"),
    printcolumn(
        name = "Kubeconfig",
        type_ = "string",
        json_path = ".status.kubeconfigSecretRef.name"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct ProvisioningSpec {
    /// Control-plane hosts: each entry maps one host label to what the host must be.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub masters: Vec<OneHost<Master>>,
    /// Worker hosts; when there are none, the masters are workers too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<OneHost<Worker>>,
    /// KUD plugins the installer enables.
    #[serde(rename = "KUDPlugins", default, skip_serializing_if = "Vec::is_empty")]
    pub kud_plugins: Vec<String>,
    /// The workload cluster's pod subnet (CIDR).
    #[serde(rename = "PodSubnet", default, skip_serializing_if = "Option::is_none")]
    pub pod_subnet: Option<String>,
    /// How the BPA heals the cluster's nodes once it is `Ready` (Foothold's; on by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healing: Option<Healing>,
}

/// When a workload node `NotReady` is rebooted through its BareMetalHost (`reboot.metal3.io`), and what holds
/// that back. Every field is optional; the defaults are in brackets.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Healing {
    /// Heal at all [true].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// A node is unhealthy once `NotReady` (or `Unknown`) this long [300].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub not_ready_seconds: Option<u32>,
    /// How long a rebooted node has to be `Ready` again; past it the remediation ends `NotHealed` and the node
    /// is left to the operator until it is `Ready` again [900].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub reboot_timeout_seconds: Option<u32>,
    /// Before its reboot an unhealthy node is cordoned and its pods evicted (PodDisruptionBudgets hold; pods
    /// the node's kubelet cannot end count as moved once their eviction is accepted); past this the reboot
    /// goes ahead drained or not, and an Event names what was left [120].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub drain_timeout_seconds: Option<u32>,
    /// A worker its reboot did not heal is re-provisioned: its Node deleted, its BareMetalHost deprovisioned
    /// (cleaned) and given its image again, then joined again by the installer Job. Never a control-plane host
    /// (re-provisioning the cluster's one master would lose the cluster) [true].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reprovision: Option<bool>,
    /// How long a re-provisioned node has to be `Ready` again; past it the remediation ends `NotHealed` [3600].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub reprovision_timeout_seconds: Option<u32>,
    /// Nothing is remediated while more than this share of the nodes is unhealthy: a site-wide outage must
    /// not reboot every host [50].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub max_unhealthy_percent: Option<u32>,
    /// At most this many remediations start in any `windowSeconds` [3].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_remediations: Option<u32>,
    /// [3600].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub window_seconds: Option<u32>,
}

/// What a control-plane host must be.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Master {
    #[serde(rename = "mac-address")]
    #[schemars(regex(pattern = MAC_PATTERN))]
    pub mac_address: String,
    /// At least this many CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cpu: Option<i32>,
    /// At least this much memory, a Kubernetes quantity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = QUANTITY_PATTERN))]
    pub memory: Option<String>,
}

/// What a worker host must be.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Worker {
    #[serde(rename = "mac-address")]
    #[schemars(regex(pattern = MAC_PATTERN))]
    pub mac_address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cpu: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = QUANTITY_PATTERN))]
    pub memory: Option<String>,
    /// The host must carry the label `feature.foothold.io/sriov=true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sriov: bool,
    /// The host must carry the label `feature.foothold.io/qat=true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub qat: bool,
}

/// ICN's list entry: a map with exactly one entry, from the host's label to what the host must be.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(transparent)]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct OneHost<T>(pub BTreeMap<String, T>);

impl<T> OneHost<T> {
    /// The label and the host; the schema guarantees exactly one entry, a hand-made value may break that.
    pub fn entry(&self) -> Option<(&str, &T)> {
        match self.0.len() {
            1 => self.0.iter().next().map(|(k, v)| (k.as_str(), v)),
            _ => None,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningStatus {
    /// `Pending` (hosts not matched or not provisioned yet), `Installing`, `Ready` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `HostsMatched`, `Installing`, `Ready`, `Failed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    #[schemars(with = "Vec<super::schema::Condition>")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostStatus>,
    /// The installer Job of the current generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// The inventory ConfigMap of the current generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory_config_map: Option<String>,
    /// The workload cluster's kubeconfig, once installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<SecretRef>,
    /// The hosts the last installer Job that finished made the cluster of: a host the spec no longer lists is
    /// removed from the cluster by the next Job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub installed_hosts: Vec<HostStatus>,
    /// The nodes the BPA remediated, newest last (those of the last window, and each node's last).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remediations: Vec<Remediation>,
}

/// One remediation of a workload node: its node drained, then rebooted through its BareMetalHost, then, for a
/// worker its reboot did not heal, re-provisioned and joined again.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Remediation {
    /// The workload cluster's Node.
    pub node: String,
    pub bare_metal_host: String,
    /// When the remediation started (RFC 3339): its drain, or its reboot for one without a `drain`.
    #[schemars(extend("format" = "date-time"))]
    pub started: String,
    /// The drain before the reboot: `Draining` while under way, then `Drained`, or `TimedOut` (the reboot went
    /// ahead past `drainTimeoutSeconds` with pods left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<String>,
    /// The BPA cordoned the node (it was schedulable): it makes it schedulable again once it is `Ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordoned: Option<bool>,
    /// When the reboot was asked for (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub rebooted: Option<String>,
    /// Its reboot did not heal it: where its re-provisioning is, `Deprovisioning` (its Node deleted, its host's
    /// image removed), `Provisioning` (the image given again), `Joining` (the installer Job runs again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reprovision: Option<String>,
    /// When its re-provisioning started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub reprovisioned: Option<String>,
    /// The host's image, kept while it is deprovisioned, to give it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<crate::crd::metal3::Image>,
    /// Unset while under way; `Healed` (the node `Ready` again), `NotHealed` (not within
    /// `rebootTimeoutSeconds`) or `NodeGone` (the Node left the cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub ended: Option<String>,
    /// For `NotHealed`: when the node was seen `Ready` again, which makes it eligible for another remediation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub recovered: Option<String>,
}

/// One host of the cluster as matched.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostStatus {
    /// The label the spec gives the host.
    pub label: String,
    /// `master` or `worker`.
    pub role: String,
    pub mac_address: String,
    /// The matched BareMetalHost, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bare_metal_host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The BareMetalHost's provisioning state, or why the host is not usable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Where the host stands in the cluster: `Joining`, `Member`, `Leaving` (taken out of the spec, no Job yet),
    /// `Removing` (drained, reset and deleted by the installer Job), `Removed` (its BareMetalHost released),
    /// `Draining` and `Drained` (its BareMetalHost annotated `bpa.akraino.org/drain`: its node cordoned and its
    /// pods evicted, so that the host may be deprovisioned, deleted or powered off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub membership: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SecretRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Packages to install on a cluster's hosts, by name or `{name: {version}}` (ICN). Bound to the cluster by the
/// `cluster` label, as in ICN.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "bpa.akraino.org",
    version = "v1alpha1",
    kind = "Software",
    namespaced,
    status = "SoftwareStatus",
    shortname = "sw",
    doc = "Packages installed on the hosts of a provisioned cluster",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SoftwareSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("items" = package_schema()))]
    pub master_software: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("items" = package_schema()))]
    pub worker_software: Vec<serde_json::Value>,
    /// How many hosts the installer updates at a time (default 1: host after host). The first host that fails
    /// stops the rollout; the hosts not yet started are `Skipped`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_unavailable: Option<u32>,
}

/// A package is a name or a one-entry map `{name: {version: "…"}}`: structural schemas cannot say "string or
/// object", so the item keeps unknown content and the reconciler validates it (see `Package::parse`).
fn package_schema() -> serde_json::Value {
    serde_json::json!({"x-kubernetes-preserve-unknown-fields": true})
}

/// One package of a `Software` spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Package {
    pub name: String,
    pub version: Option<String>,
    /// Drain a host (cordon, evict its pods within their budgets) before this package changes on it, and
    /// uncordon it after: for a package whose install disturbs what runs there (a runtime, a kernel module).
    pub drain: bool,
}

impl Package {
    /// Reads `"name"` or `{"name": {"version": "1.2", "drain": true}}` (each key optional; `{"name": {}}` and
    /// `{"name": null}` are the name alone). Any other key is refused, so that a misspelt `drain` is not lost.
    pub fn parse(item: &serde_json::Value) -> Result<Package, String> {
        use serde_json::Value;
        match item {
            Value::String(name) if !name.is_empty() => Ok(Package {
                name: name.clone(),
                version: None,
                drain: false,
            }),
            Value::Object(map) if map.len() == 1 => {
                let (name, detail) = map.iter().next().expect("one entry");
                let empty = serde_json::Map::new();
                let d = match detail {
                    Value::Null => &empty,
                    Value::Object(d) => d,
                    other => {
                        return Err(format!(
                            "package {name}: expected {{version: ..., drain: ...}}, not {other}"
                        ))
                    }
                };
                if let Some(k) = d
                    .keys()
                    .find(|k| !["version", "drain"].contains(&k.as_str()))
                {
                    return Err(format!(
                        "package {name}: {k:?} is not a field of a package (version, drain)"
                    ));
                }
                let version = match d.get("version") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(v)) => Some(v.clone()),
                    Some(other) => {
                        return Err(format!(
                            "package {name}: version must be a string, not {other}"
                        ))
                    }
                };
                let drain = match d.get("drain") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(other) => {
                        return Err(format!(
                            "package {name}: drain must be true or false, not {other}"
                        ))
                    }
                };
                Ok(Package {
                    name: name.clone(),
                    version,
                    drain,
                })
            }
            other => Err(format!(
                "a package is a name or a one-entry map {{name: {{version, drain}}}}, not {other}"
            )),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SoftwareStatus {
    /// `Pending` (cluster not ready or packages not uploaded), `Installing`, `Installed` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    #[schemars(with = "Vec<super::schema::Condition>")]
    pub conditions: Vec<Condition>,
    /// The Provisioning whose cluster the packages go to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<String>,
    /// The installer Job of the current generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// Each package, where the installer downloads it from, or why it cannot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<PackageStatus>,
    /// How each host went in the finished run of `jobName` (empty while it runs): failed hosts first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub hosts: Vec<SoftwareHostStatus>,
    /// Hosts the installer's report left out to stay within a termination message's 4 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts_omitted: Option<u32>,
}

/// One host of a `Software`'s last finished run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SoftwareHostStatus {
    /// The inventory name (the workload cluster's Node).
    pub name: String,
    /// `Updated` (a package was installed or replaced), `Unchanged` (all already there), `Failed` or `Skipped`
    /// (not started: an earlier host failed).
    pub state: String,
    /// What was done, or why it failed or was skipped.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// One package of a `Software`, resolved against the agent's `binary_images` of the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PackageStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Inventory groups it is installed on: `kube_control_plane` (masterSoftware), `kube_node`
    /// (workerSoftware).
    pub groups: Vec<String>,
    /// The `binary_images` record it is read from: `<name>`, or `<name>-<version>` when versioned.
    pub record: String,
    /// Where nodes download it (the agent's `/files`), once the record is complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Why the package cannot be installed yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// Hosts are drained before it changes on them (the spec says `drain: true` for it in either list).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drain: bool,
}
