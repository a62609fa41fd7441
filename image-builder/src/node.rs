//! A compute node's image (`components.node`): containerd pulling every registry's images through the
//! appliance's agent, apt installing from the agent's signed repository and nothing else (the node is offline;
//! its `.sources` entry, the key inline, is fetched at boot over the mirror's TLS), and a ready marker once the
//! node's prefetched images are in and its package index is read. Pure: the configuration rendered from the
//! spec as (path, text, mode); the units and scripts are in the overlay (`rootfs/`).

use crate::spec::{Node, SITE_CA};

/// Debian packages a node needs beyond the boot essentials: containerd, and what kubelet, kube-proxy and the
/// pod network need on the host when the BPA's installer makes the node part of a workload cluster (kubeadm's
/// preflight requires conntrack; the bridge CNI plugin is Debian's); cloud-init, which applies Metal3's config
/// drive to a node installed on disk; D-Bus, without which systemd-logind does not run and the power button
/// does nothing: a BMC's soft power off (Metal3's reboot and power off, by ACPI) then waited out Ironic's three
/// minutes and failed.
pub const PACKAGES: &[&str] = &[
    "containerd",
    "runc",
    "ca-certificates",
    "iptables",
    "conntrack",
    "containernetworking-plugins",
    "cloud-init",
    "dbus",
];

/// cloud-init's settings on a node. A node written to disk by Ironic (the raw image and Metal3's `direct` deploy)
/// finds a config drive there: a partition labelled `config-2` holding the BareMetalHost's `metaData` (host
/// name, SSH keys), `networkData` and `userData`. Only local datasources are looked for (that one, and NoCloud's
/// `cidata` drive for a lab), so nothing probes a metadata service on a network the site does not have. With
/// neither (the live ISO) ds-identify finds no datasource and cloud-init does not run at all: it searches only
/// when the list names two or more (one, with or without None, is taken as found; seen on the live ISO, where
/// every stage then ran with the fallback datasource). The rest keeps the image's own choices: apt's sources (the
/// appliance's agent alone), the SSH host keys made once per machine (foothold-ssh-host-keys.service),
/// systemd-networkd for the network. Keys from the config drive go to `login`, the user the BPA's installer
/// logs in as. The host name is the config drive's, and `/etc/hosts` names it (127.0.1.1): sudo looks its own
/// host up, and with the image's name there it waited out DNS on every call (seen: 27 s on a site network
/// whose DNS does not answer).
fn cloud_config(login: Option<&str>) -> String {
    let user = login.map_or(String::new(), |name| {
        format!("  default_user:\n    name: {name}\n    lock_passwd: true\n    shell: /bin/bash\n")
    });
    format!(
        "# Written by foothold-build: cloud-init applies Metal3's config drive on a node installed on disk.\n\
         datasource_list: [ConfigDrive, NoCloud, None]\n\
         apt:\n  preserve_sources_list: true\n\
         ssh_deletekeys: false\nssh_genkeytypes: []\n\
         manage_etc_hosts: localhost\n\
         system_info:\n{user}  network:\n    renderers: [networkd]\n    activators: [networkd]\n"
    )
}

/// The units a node enables instead of the agent's.
pub const UNITS: &[&str] = &[
    "var-lib-containerd.mount",
    "containerd.service",
    "foothold-apt-source.service",
    "foothold-node-ready.service",
];

/// apt's option naming the CA for the mirror's host (`Acquire::https::<host>::CaInfo`: no scheme, no port).
/// An IPv6 address cannot be a name in apt's `::`-separated configuration tree: for one, the CA is the one all
/// of apt's https sources are checked with — the node has no other.
fn ca_option(mirror: &str) -> String {
    let rest = mirror.split_once("://").map_or(mirror, |(_, r)| r);
    if rest.starts_with('[') {
        return "Acquire::https::CaInfo".into();
    }
    format!(
        "Acquire::https::{}::CaInfo",
        rest.split(':').next().unwrap_or(rest)
    )
}

/// Every file, as (absolute path, text, mode). `login`: the image's user that a config drive's SSH keys are for.
pub fn render(n: &Node, login: Option<&str>) -> Vec<(String, String, u32)> {
    let ca = if n.ca.is_some() { SITE_CA } else { "" };
    let mut files = vec![
        (
            "/etc/foothold/mirror.env".into(),
            format!(
                "# Read by containerd's start (foothold-agent mirror-config) and the node's ready report; written by\n\
                 # foothold-build.\nFOOTHOLD_MIRROR_ENDPOINT={}\nFOOTHOLD_MIRROR_REGISTRIES={}\nFOOTHOLD_MIRROR_CA={ca}\n\
                 FOOTHOLD_PREFETCH=\"{}\"\n",
                n.mirror,
                n.registries.join(","),
                n.prefetch.join(" "),
            ),
            0o644,
        ),
        (
            "/etc/containerd/config.toml".into(),
            "# containerd on a compute node: every registry mirrored by the appliance's agent (certs.d, written at\n\
             # each start by foothold-agent mirror-config).\nversion = 2\n\n\
             [plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n"
                .into(),
            0o644,
        ),
    ];
    // The live system's root is live-boot's overlay, and overlayfs cannot be the upper layer of another: the
    // containers' snapshots (overlayfs too) need a file system of their own. Memory, as the rest of the node.
    // Installed on disk, the node keeps its images on its root file system, across reboots.
    files.push((
        "/etc/systemd/system/var-lib-containerd.mount".into(),
        "[Unit]\nDescription=containerd's store in memory (the live root is an overlay, which containers' overlays cannot stack on)\n\
         ConditionKernelCommandLine=boot=live\nBefore=containerd.service\n\n\
         [Mount]\nWhat=tmpfs\nWhere=/var/lib/containerd\nType=tmpfs\nOptions=mode=0711\n\n\
         [Install]\nWantedBy=local-fs.target\n"
            .into(),
        0o644,
    ));
    files.push((
        "/etc/systemd/system/containerd.service.d/10-foothold-store.conf".into(),
        "[Unit]\nRequiresMountsFor=/var/lib/containerd\n".into(),
        0o644,
    ));
    // Offline: the Debian mirror the image was built from is out of reach at the site.
    files.push((
        "/etc/apt/sources.list".into(),
        "# A compute node at an offline site: its packages come from the appliance's agent alone\n\
         # (sources.list.d/foothold.sources, fetched at boot by foothold-apt-source.service).\n"
            .into(),
        0o644,
    ));
    files.push((
        "/etc/cloud/cloud.cfg.d/90-foothold.cfg".into(),
        cloud_config(login),
        0o644,
    ));
    if n.mirror.starts_with("https://") && n.ca.is_some() {
        files.push((
            "/etc/apt/apt.conf.d/60foothold-site-ca".into(),
            format!(
                "// The appliance's agent serves apt over TLS with the site CA's certificate.\n{} \"{SITE_CA}\";\n",
                ca_option(&n.mirror)
            ),
            0o644,
        ));
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_pulls_through_the_mirror_with_the_site_ca() {
        let n: Node = serde_saphyr::from_str(
            "mirror: https://172.22.0.1:5000\nca: {path: site-ca.pem}\nregistries: [quay.io]\nprefetch: [docker.io/library/busybox:1.35]\n",
        )
        .unwrap();
        let files = render(&n, Some("foothold"));
        let env = &files[0].1;
        for want in [
            "FOOTHOLD_MIRROR_ENDPOINT=https://172.22.0.1:5000\n",
            "FOOTHOLD_MIRROR_REGISTRIES=quay.io\n",
            "FOOTHOLD_MIRROR_CA=/etc/foothold/site-ca.pem\n",
            "FOOTHOLD_PREFETCH=\"docker.io/library/busybox:1.35\"\n",
        ] {
            assert!(env.contains(want), "{want} in {env}");
        }
        assert!(files[1]
            .1
            .contains("config_path = \"/etc/containerd/certs.d\""));
        // Containers run on a file system of their own, not on the live root's overlay.
        assert!(files
            .iter()
            .any(|f| f.0 == "/etc/systemd/system/var-lib-containerd.mount"
                && f.1.contains("What=tmpfs\nWhere=/var/lib/containerd\n")));
        let file = |path: &str| {
            files
                .iter()
                .find(|f| f.0 == path)
                .map(|f| f.1.clone())
                .unwrap_or_else(|| panic!("no {path}"))
        };
        // apt: no Debian mirror, and the site CA for the agent's host.
        assert!(file("/etc/apt/sources.list")
            .lines()
            .all(|l| l.starts_with('#')));
        assert!(file("/etc/apt/apt.conf.d/60foothold-site-ca")
            .contains("\nAcquire::https::172.22.0.1::CaInfo \"/etc/foothold/site-ca.pem\";\n"));
    }

    #[test]
    fn cloud_init_reads_only_the_config_drive_and_keeps_the_images_choices() {
        let n: Node = serde_saphyr::from_str("mirror: https://172.22.0.1:5000\n").unwrap();
        let files = render(&n, Some("foothold"));
        let text = &files
            .iter()
            .find(|f| f.0 == "/etc/cloud/cloud.cfg.d/90-foothold.cfg")
            .expect("cloud-init's settings")
            .1;
        let cfg: serde_json::Value = serde_saphyr::from_str(text).unwrap();
        // Two local datasources and the fallback: ds-identify searches them, and turns cloud-init off where
        // neither is (with one, it would take that one as found).
        assert_eq!(
            cfg["datasource_list"],
            serde_json::json!(["ConfigDrive", "NoCloud", "None"])
        );
        assert_eq!(cfg["apt"]["preserve_sources_list"], true);
        assert_eq!(cfg["ssh_deletekeys"], false);
        assert_eq!(cfg["ssh_genkeytypes"], serde_json::json!([]));
        assert_eq!(cfg["manage_etc_hosts"], "localhost");
        let system = &cfg["system_info"];
        assert_eq!(system["default_user"]["name"], "foothold");
        assert_eq!(system["default_user"]["lock_passwd"], true);
        assert_eq!(
            system["network"]["renderers"],
            serde_json::json!(["networkd"])
        );
        // No user in the spec: cloud-init's own default user stays.
        let files = render(&n, None);
        let text = &files
            .iter()
            .find(|f| f.0.starts_with("/etc/cloud/"))
            .unwrap()
            .1;
        let cfg: serde_json::Value = serde_saphyr::from_str(text).unwrap();
        assert!(cfg["system_info"].get("default_user").is_none(), "{text}");
        assert!(PACKAGES.contains(&"cloud-init"));
        // containerd's store is in memory on the live ISO only.
        let mount = &files
            .iter()
            .find(|f| f.0 == "/etc/systemd/system/var-lib-containerd.mount")
            .unwrap()
            .1;
        assert!(
            mount.contains("\nConditionKernelCommandLine=boot=live\n"),
            "{mount}"
        );
    }

    #[test]
    fn a_plain_http_mirror_needs_no_ca_for_apt() {
        let n: Node = serde_saphyr::from_str("mirror: http://10.0.0.1:5000\n").unwrap();
        let files = render(&n, Some("foothold"));
        assert!(files.iter().any(|f| f.0 == "/etc/apt/sources.list"));
        assert!(!files
            .iter()
            .any(|f| f.0.starts_with("/etc/apt/apt.conf.d/")));
    }

    #[test]
    fn apt_names_the_mirror_by_its_host_alone() {
        assert_eq!(
            ca_option("https://172.22.0.1:5000"),
            "Acquire::https::172.22.0.1::CaInfo"
        );
        assert_eq!(
            ca_option("https://appliance.site"),
            "Acquire::https::appliance.site::CaInfo"
        );
        assert_eq!(
            ca_option("https://[fd00::1]:5000"),
            "Acquire::https::CaInfo"
        );
    }
}
