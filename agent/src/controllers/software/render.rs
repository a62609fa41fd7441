//! Software's objects, pure and typed: the packages manifest ConfigMap and the package installer Job (the
//! installer contract's `software` task: environment, mounts).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

use super::plan::OWNER_LABEL;
use crate::controllers::bpa::cluster_name;
use crate::controllers::common::jobs::{input, installer_job, with_host_ca, Installer, Source};
use crate::controllers::settings::Settings;
use crate::crd::bpa::{Provisioning, Software};

/// The packages manifest (`packages.json`) the installer reads.
pub fn manifest(name: &str, packages_json: &str) -> ConfigMap {
    input(name, "packages.json", packages_json)
}

/// The package installer Job of `sw` on `prov`'s cluster: its inventory and kubeconfig come from the
/// Provisioning's status. It talks to the hosts over SSH, not to this apiserver: no account token.
pub fn installer(
    sw: &Software,
    prov: &Provisioning,
    ns: &str,
    job: &str,
    manifest: &str,
    settings: &Settings,
) -> Job {
    let cluster = cluster_name(prov);
    let status = prov.status.clone().unwrap_or_default();
    let inventory = status.inventory_config_map.unwrap_or_default();
    let kubeconfig = status
        .kubeconfig_secret_ref
        .map(|r| r.name)
        .unwrap_or_else(|| format!("{cluster}-kubeconfig"));
    let owner = sw.name_any();
    let at_once = sw.spec.max_unavailable.unwrap_or(1).max(1).to_string();
    let drain = settings.drain_timeout_seconds.to_string();
    installer_job(&Installer {
        name: job,
        image: &settings.installer_image,
        labels: &[("cluster", &cluster)],
        pod_labels: &[(OWNER_LABEL, &owner)],
        service_account: None,
        env: &with_host_ca(
            vec![
                ("INSTALLER_TASK", "software"),
                ("CLUSTER_NAME", &cluster),
                ("NAMESPACE", ns),
                ("INVENTORY", "/etc/foothold/inventory/hosts.ini"),
                ("PACKAGES", "/etc/foothold/packages/packages.json"),
                ("KUBECONFIG", "/etc/foothold/kubeconfig/kubeconfig"),
                ("INSTALLER_SSH_USER", &settings.installer_ssh_user),
                ("MAX_UNAVAILABLE", &at_once),
                ("DRAIN_TIMEOUT_SECONDS", &drain),
            ],
            settings.ssh_host_ca.as_deref(),
        ),
        mounts: &[
            (
                "inventory",
                "/etc/foothold/inventory",
                Source::ConfigMap(&inventory),
            ),
            (
                "packages",
                "/etc/foothold/packages",
                Source::ConfigMap(manifest),
            ),
            (
                "kubeconfig",
                "/etc/foothold/kubeconfig",
                Source::Secret(&kubeconfig),
            ),
            (
                "ssh",
                "/etc/foothold/ssh",
                Source::Secret(&settings.ssh_key_secret),
            ),
        ],
    })
}
