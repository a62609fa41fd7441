//! The subset of Metal3's `BareMetalHost` (metal3.io/v1alpha1) that the reconcilers read and write. Metal3 owns
//! this CRD: `foothold-agent crds` does not print it, and tests install Metal3's own definition. Unknown fields
//! are ignored when reading, and the reconcilers only ever write with patches that name the fields they set, so
//! nothing this type leaves out is lost.

use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "metal3.io",
    schema = "disabled",
    version = "v1alpha1",
    kind = "BareMetalHost",
    namespaced,
    status = "BareMetalHostStatus",
    shortname = "bmh"
)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalHostSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmc: Option<BmcDetails>,
    #[serde(
        default,
        rename = "bootMACAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub boot_mac_address: Option<String>,
    #[serde(default)]
    pub online: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<Image>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta_data: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device_hints: Option<RootDeviceHints>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_ref: Option<k8s_openapi::api::core::v1::ObjectReference>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BmcDetails {
    pub address: String,
    pub credentials_name: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_certificate_verification: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct SecretReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RootDeviceHints {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hctl: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size_gigabytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotational: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalHostStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operational_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<Provisioning>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<HardwareDetails>,
    /// BMO's class of the host's error (`registration error`, `provisioning error`, …); none when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub powered_on: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Provisioning {
    /// `available`, `provisioning`, `provisioned`, `externally provisioned`, …
    #[serde(default)]
    pub state: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HardwareDetails {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ram_mebibytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<Nic>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_megahertz: Option<f64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Nic {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pxe: Option<bool>,
}

/// Host labels that declare hardware features the BPA reconciler selects on (`sriov`/`qat` in a Provisioning
/// worker): a host has the feature when the label's value is `true`.
pub const SRIOV_LABEL: &str = "feature.foothold.io/sriov";
pub const QAT_LABEL: &str = "feature.foothold.io/qat";

/// Whether `labels` declare `feature` (`true`).
pub fn has_feature(labels: &BTreeMap<String, String>, feature: &str) -> bool {
    labels.get(feature).is_some_and(|v| v == "true")
}
