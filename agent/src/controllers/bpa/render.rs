//! BPA's objects, pure and typed: the installer's inventory ConfigMap, the rules of its account, and the
//! installer Job (the contract in docs/controllers.md: environment, mounts).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::ResourceExt;

use super::plan::OWNER_LABEL;
use crate::controllers::common::jobs::{input, installer_job, with_host_ca, Installer, Source};
use crate::controllers::common::{child_name, core_rule};
use crate::crd::bpa::{Provisioning, ProvisioningSpec};

/// The annotation on an installer Job naming what it installs ([`installs`]).
pub const INSTALLS: &str = "bpa.akraino.org/installs";

/// What a Provisioning installs, as a digest: its spec without `healing`, which no installer reads, so a
/// change of the healing policy alone is no new install (its generation keeps the Job it has).
pub fn installs(spec: &ProvisioningSpec) -> String {
    use sha2::Digest as _;
    let spec = ProvisioningSpec {
        healing: None,
        ..spec.clone()
    };
    let json = serde_json::to_vec(&spec).unwrap_or_default();
    hex::encode(&sha2::Sha256::digest(json)[..8])
}

/// The inventory (`hosts.ini`) the installer reads.
pub fn inventory(name: &str, hosts_ini: &str) -> ConfigMap {
    input(name, "hosts.ini", hosts_ini)
}

/// The installer's account: `<provisioning>-installer`.
pub fn account(p: &Provisioning) -> String {
    child_name(&p.name_any(), "installer")
}

/// What the installer may do: create the cluster's kubeconfig Secret, then read and update only that one.
pub fn account_rules(kubeconfig_secret: &str) -> Vec<PolicyRule> {
    vec![
        core_rule(&["secrets"], &[], &["create"]),
        core_rule(
            &["secrets"],
            &[kubeconfig_secret],
            &["get", "update", "patch"],
        ),
    ]
}

/// What an installer Job of `p` is made from.
pub struct Names<'a> {
    pub ns: &'a str,
    pub cluster: &'a str,
    pub job: &'a str,
    pub inventory: &'a str,
    pub kubeconfig_secret: &'a str,
    pub image: &'a str,
    pub ssh_key_secret: &'a str,
    pub ssh_user: &'a str,
    /// `DRAIN_TIMEOUT_SECONDS`.
    pub drain_timeout_seconds: u64,
    /// The site SSH CA's public key, if hosts must show its certificates.
    pub ssh_host_ca: Option<&'a str>,
    /// The Secret with the hosts' read token (key `token`), if the installer writes one to them.
    pub read_token_secret: Option<&'a str>,
}

/// Where an installer Job mounts the hosts' read token Secret, and the file its `READ_TOKEN_FILE` names.
const READ_TOKEN_DIR: &str = "/etc/foothold/read-token";
const READ_TOKEN_FILE: &str = "/etc/foothold/read-token/token";

/// The installer Job of `p`, with the installer contract's environment and mounts.
pub fn installer(p: &Provisioning, n: &Names) -> Job {
    let owner = p.name_any();
    let account = account(p);
    let (plugins, subnet, drain) = (
        p.spec.kud_plugins.join(","),
        p.spec.pod_subnet.clone().unwrap_or_default(),
        n.drain_timeout_seconds.to_string(),
    );
    let mut env = with_host_ca(
        vec![
            ("CLUSTER_NAME", n.cluster),
            ("NAMESPACE", n.ns),
            ("KUD_PLUGINS", &plugins),
            ("POD_SUBNET", &subnet),
            ("KUBECONFIG_SECRET", n.kubeconfig_secret),
            ("INVENTORY", "/etc/foothold/inventory/hosts.ini"),
            ("INSTALLER_SSH_USER", n.ssh_user),
            ("DRAIN_TIMEOUT_SECONDS", &drain),
        ],
        n.ssh_host_ca,
    );
    let mut mounts = vec![
        (
            "inventory",
            "/etc/foothold/inventory",
            Source::ConfigMap(n.inventory),
        ),
        ("ssh", "/etc/foothold/ssh", Source::Secret(n.ssh_key_secret)),
    ];
    if let Some(secret) = n.read_token_secret {
        env.push(("READ_TOKEN_FILE", READ_TOKEN_FILE));
        mounts.push(("read-token", READ_TOKEN_DIR, Source::Secret(secret)));
    }
    let mut job = installer_job(&Installer {
        name: n.job,
        image: n.image,
        labels: &[("cluster", n.cluster)],
        pod_labels: &[(OWNER_LABEL, &owner)],
        service_account: Some(&account),
        env: &env,
        mounts: &mounts,
    });
    job.annotations_mut()
        .insert(INSTALLS.into(), installs(&p.spec));
    job
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::bpa::Healing;

    /// With a read token Secret, the Job mounts it (owner-only files) and names its file in READ_TOKEN_FILE;
    /// without one, neither.
    #[test]
    fn the_hosts_read_token_is_mounted_only_when_a_secret_is_named() {
        let spec: ProvisioningSpec = serde_json::from_value(serde_json::json!({
            "masters": [{"m": {"mac-address": "00:c6:14:04:61:01"}}],
        }))
        .unwrap();
        let p = Provisioning::new("p", spec);
        let names = |read_token_secret| Names {
            ns: "site",
            cluster: "c",
            job: "c-install",
            inventory: "c-inventory",
            kubeconfig_secret: "c-admin",
            image: "installer",
            ssh_key_secret: "ssh",
            ssh_user: "root",
            drain_timeout_seconds: 600,
            ssh_host_ca: None,
            read_token_secret,
        };
        let pod = |job: Job| job.spec.unwrap().template.spec.unwrap();
        let with = pod(installer(&p, &names(Some("node-read-token"))));
        let env = with.containers[0].env.clone().unwrap();
        assert!(env
            .iter()
            .any(|e| e.name == "READ_TOKEN_FILE" && e.value.as_deref() == Some(READ_TOKEN_FILE)));
        let volume = with
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "read-token")
            .expect("the read token's volume");
        let secret = volume.secret.unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("node-read-token"));
        assert_eq!(secret.default_mode, Some(0o400));
        assert!(with.containers[0]
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .any(|m| m.name == "read-token" && m.mount_path == READ_TOKEN_DIR));
        let without = pod(installer(&p, &names(None)));
        assert!(!without.containers[0]
            .env
            .as_ref()
            .unwrap()
            .iter()
            .any(|e| e.name == "READ_TOKEN_FILE"));
        assert!(!without
            .volumes
            .unwrap()
            .iter()
            .any(|v| v.name == "read-token"));
    }

    #[test]
    fn a_change_of_the_healing_policy_alone_installs_nothing_new() {
        let spec: ProvisioningSpec = serde_json::from_value(serde_json::json!({
            "masters": [{"m": {"mac-address": "00:c6:14:04:61:01"}}], "PodSubnet": "10.244.64.0/18",
        }))
        .unwrap();
        let healed = ProvisioningSpec {
            healing: Some(Healing {
                enabled: Some(false),
                ..Healing::default()
            }),
            ..spec.clone()
        };
        assert_eq!(installs(&spec), installs(&healed));
        assert_eq!(installs(&spec).len(), 16);
        let moved = ProvisioningSpec {
            pod_subnet: Some("10.245.0.0/18".into()),
            ..spec.clone()
        };
        assert_ne!(installs(&spec), installs(&moved));
    }
}
