//! Everything generated from the spec into the staged root: host name, fstab, GRUB's menu, networkd, the agent's
//! environment, the Kubernetes bring-up's configuration, users and their keys, the units to enable. [`render`]
//! is pure (the spec in, files and commands out) and tested from strings; [`apply`] writes its result into a
//! root and runs the few commands that need the root's own tools (useradd, chown, systemctl).

use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result};

use super::layout::{kernel_cmdline, Ids};
use crate::cmd::CommandExt as _;
use crate::files::write_file;
use crate::spec::Spec;

/// Units every image enables; Kubernetes adds [`crate::kube::UNITS`], Metal3 [`crate::metal3::UNITS`].
const UNITS: &[&str] = &[
    "systemd-networkd.service",
    "foothold-agent.service",
    "foothold-ready.service",
    "foothold-ssh-host-keys.service",
    "foothold-firstboot.service",
    "foothold-pki.service",
    "foothold-pki.timer",
    "foothold-grow-data.service",
];

/// The units of the agent's service, which a compute node's image does not enable.
const AGENT_UNITS: &[&str] = &[
    "foothold-agent.service",
    "foothold-ready.service",
    "foothold-firstboot.service",
    "foothold-pki.service",
    "foothold-pki.timer",
];

/// A file to write into the root: its absolute path there, its content and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub path: String,
    pub text: String,
    pub mode: u32,
}

/// A user to add: its name, whether it may sudo, and the `/home/<name>` files that must be theirs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub sudo: bool,
    pub has_keys: bool,
}

/// What [`apply`] does to a root.
#[derive(Debug, Default)]
pub struct Configuration {
    /// Users to add before the files are written (their homes hold some of them).
    pub users: Vec<User>,
    /// System users a service runs as (no home, no login, a group of the same name), added with the users.
    pub system_users: Vec<String>,
    pub files: Vec<File>,
    pub units: Vec<String>,
}

impl Configuration {
    /// The file at `path`.
    #[cfg(test)]
    fn file(&self, path: &str) -> Option<&File> {
        self.files.iter().find(|f| f.path == path)
    }

    pub(super) fn add(&mut self, path: impl Into<String>, text: impl Into<String>, mode: u32) {
        self.files.push(File {
            path: path.into(),
            text: text.into(),
            mode,
        });
    }
}

/// The configuration of `spec` for a disk whose file systems have `ids`, naming the images the build makes of
/// Kubernetes' pause and CoreDNS as `pinned` says (None: by the spec's tags).
pub fn render(spec: &Spec, ids: &Ids, pinned: Option<&crate::kube::Pinned>) -> Configuration {
    let mut c = Configuration::default();
    c.add("/etc/hostname", format!("{}\n", spec.hostname), 0o644);
    c.add(
        "/etc/hosts",
        format!(
            "127.0.0.1 localhost\n127.0.1.1 {h}\n::1 localhost ip6-localhost ip6-loopback\n",
            h = spec.hostname
        ),
        0o644,
    );
    // mmdebstrap leaves the build host's resolv.conf in the tree: the image would carry the build machine's
    // resolver (unreachable at the site, so every lookup waited it out) and differ from one build host to the
    // next. No resolver instead: lookups fail at once, and the image is the same wherever it is built.
    c.add(
        "/etc/resolv.conf",
        "# Written by foothold-build: no resolver. The site is offline; names the machine needs are in\n\
         # /etc/hosts, and Kubernetes' names are CoreDNS's.\n",
        0o644,
    );
    let ramdisk = spec.outputs.formats.contains(&crate::spec::Format::Ramdisk);
    c.add(
        "/etc/fstab",
        if ramdisk {
            "# The root is the initramfs, in memory; nothing else is mounted.\n".into()
        } else {
            format!(
                "UUID={} / ext4 defaults,noatime 0 1\nUUID={} /var/lib/foothold ext4 defaults,noatime,x-systemd.growfs 0 2\n",
                ids.root, ids.data
            )
        },
        0o644,
    );
    c.add(
        "/boot/grub/grub.cfg",
        format!(
            "serial --unit=0 --speed=115200\nterminal_input serial console\nterminal_output serial console\nset timeout=1\nmenuentry 'Foothold {name}' {{\n  linux /vmlinuz {cmdline}\n  initrd /initrd.img\n}}\n",
            name = spec.name,
            cmdline = kernel_cmdline(ids)
        ),
        0o644,
    );
    network(spec, &mut c);
    // A compute node or a deploy ramdisk runs no agent service: its environment and TLS names would be read by
    // nothing.
    if spec.components.node.is_none() && spec.components.ipa.is_none() {
        super::agent_conf::agent(spec, &mut c);
    }
    if let Some(k) = &spec.components.kubernetes {
        // containerd pulls through the agent for the usual registries and those of the image's containers.
        let mut registries: Vec<String> = spec
            .components
            .images
            .iter()
            .map(crate::images::registry_of)
            .chain(
                [&k.pause.reference, &k.coredns.reference]
                    .map(|r| r.split('/').next().unwrap_or_default().to_owned()),
            )
            .collect();
        // The BPA's installer image, made by the data phase when the appliance can install workload clusters.
        if installs_workload_clusters(spec) {
            registries.push(
                foothold_names::INSTALLER_IMAGE
                    .split('/')
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
        registries.sort();
        registries.dedup();
        for (path, text, mode) in crate::kube::render(
            spec,
            k,
            &registries,
            spec.components.agent_tls,
            &pinned
                .cloned()
                .unwrap_or_else(|| crate::kube::Pinned::by_tag(k)),
        ) {
            c.add(path, text, mode);
        }
        c.units
            .extend(crate::kube::UNITS.iter().map(|u| u.to_string()));
    }
    if spec.components.metal3.is_some() {
        for (path, text, mode) in crate::metal3::render(spec) {
            c.add(path, text, mode);
        }
        c.system_users.push(crate::metal3::BMO_USER.into());
        c.units
            .extend(crate::metal3::UNITS.iter().map(|u| u.to_string()));
        c.units.extend(
            crate::metal3::extra_units(spec)
                .iter()
                .map(|u| u.to_string()),
        );
    }
    if let Some((p, d)) = provisioning_dhcp(spec) {
        for (path, text, mode) in crate::dhcp::render(p, d) {
            c.add(path, text, mode);
        }
        c.units.push(crate::dhcp::UNIT.into());
    }
    if serves_provisioning(spec) {
        for (path, text, mode) in crate::firewall::render(spec) {
            c.add(path, text, mode);
        }
        c.units.push(crate::firewall::UNIT.into());
    }
    // sshd (Debian's reads sshd_config.d first, and the first value of a setting wins): keys only, never root,
    // only the spec's users.
    let allow = if spec.users.is_empty() {
        String::new()
    } else {
        let names: Vec<&str> = spec.users.iter().map(|u| u.name.as_str()).collect();
        format!("AllowUsers {}\n", names.join(" "))
    };
    c.add(
        "/etc/ssh/sshd_config.d/foothold.conf",
        format!(
            "# Written by foothold-build: keys only, never root, only the users of the image's spec.\n\
             PermitRootLogin no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             AuthenticationMethods publickey\n{allow}"
        ),
        0o644,
    );
    for u in &spec.users {
        // Users log in with keys only (their password is locked): sudo must not ask for one.
        if u.sudo {
            c.add(
                format!("/etc/sudoers.d/foothold-{}", u.name),
                format!("{} ALL=(ALL:ALL) NOPASSWD: ALL\n", u.name),
                0o440,
            );
        }
        if !u.authorized_keys.is_empty() {
            c.add(
                format!("/home/{}/.ssh/authorized_keys", u.name),
                u.authorized_keys.join("\n") + "\n",
                0o600,
            );
        }
        c.users.push(User {
            name: u.name.clone(),
            sudo: u.sudo,
            has_keys: !u.authorized_keys.is_empty(),
        });
    }
    if spec.components.ipa.is_some() {
        for (path, text, mode) in crate::ipa::render() {
            c.add(path, text, mode);
        }
        c.units
            .extend(crate::ipa::UNITS.iter().map(|u| u.to_string()));
    }
    match &spec.components.node {
        // A deploy ramdisk runs the agent of Ironic, not Foothold's.
        _ if spec.components.ipa.is_some() => {}
        // A compute node: the agent is a tool (mirror-config), not a service; containerd and the node's ready
        // report instead of the agent's units.
        Some(n) => {
            // The user the BPA's installer logs in as: the first with sudo, else the first.
            let login = spec
                .users
                .iter()
                .find(|u| u.sudo)
                .or(spec.users.first())
                .map(|u| u.name.as_str());
            for (path, text, mode) in crate::node::render(n, login) {
                c.add(path, text, mode);
            }
            c.units.extend(
                UNITS
                    .iter()
                    .filter(|u| !AGENT_UNITS.contains(u))
                    .chain(crate::node::UNITS)
                    .map(|u| u.to_string()),
            );
        }
        None => c.units.extend(UNITS.iter().map(|u| u.to_string())),
    }
    // Each machine booted from the image is a new one: its own machine-id (and SSH host keys, removed by
    // `apply`), made at first boot.
    c.add("/etc/machine-id", "", 0o444);
    c
}

/// networkd: the provisioning interface static, the external one (or every other en*/eth*) by DHCP. The
/// provisioning network may have no carrier (its compute nodes off) or no NIC yet: boot does not wait for
/// it, and the address is configured regardless.
fn network(spec: &Spec, c: &mut Configuration) {
    let matcher = |iface: &str| {
        if crate::firewall::is_mac(iface) {
            format!("MACAddress={iface}")
        } else {
            format!("Name={iface}")
        }
    };
    if let Some(p) = &spec.network.provisioning {
        c.add(
            "/etc/systemd/network/10-provisioning.network",
            format!(
                "[Match]\n{}\n\n[Link]\nRequiredForOnline=no\n\n[Network]\nAddress={}\nConfigureWithoutCarrier=yes\nLinkLocalAddressing=ipv6\nIPv6AcceptRA=no\n",
                matcher(&p.interface),
                p.address
            ),
            0o644,
        );
    }
    let external = spec
        .network
        .external
        .as_ref()
        .map(|e| matcher(&e.interface))
        .unwrap_or_else(|| "Name=en* eth*".into());
    c.add(
        "/etc/systemd/network/20-external.network",
        format!("[Match]\n{external}\n\n[Network]\nDHCP=yes\n"),
        0o644,
    );
}

/// The provisioning network and its DHCP, if the appliance serves one.
pub fn provisioning_dhcp(
    spec: &Spec,
) -> Option<(&crate::spec::StaticInterface, &crate::spec::Dhcp)> {
    let p = spec.network.provisioning.as_ref()?;
    Some((p, p.dhcp.as_ref()?))
}

/// Whether the image is an appliance on a provisioning network (not a node or a deploy ramdisk, whose
/// networks are the site's): its firewall guards what that network reaches.
pub fn serves_provisioning(spec: &Spec) -> bool {
    spec.network.provisioning.is_some()
        && spec.components.node.is_none()
        && spec.components.ipa.is_none()
}

/// Whether the image's agent can have the BPA install workload clusters: a Kubernetes with etcd for their
/// control planes and a provisioning network the nodes reach the agent on. The data phase then makes the
/// installer image and the release file.
pub fn installs_workload_clusters(spec: &Spec) -> bool {
    spec.components.agent.is_some()
        && spec.network.provisioning.is_some()
        && spec
            .components
            .kubernetes
            .as_ref()
            .is_some_and(|k| k.etcd.is_some())
}

/// The system user `foothold-agent.service` runs as.
pub const AGENT_USER: &str = "foothold-agent";

/// Applies `c` to the staged `root`: adds the users (a locked password, a home), writes the files, gives the
/// users their `.ssh`, enables the units, and removes the SSH host keys Debian's package made.
/// Each file into the tree `root`. A link in the tree where a file goes (a resolv.conf pointing into /run, say)
/// would be followed out of it, onto the build host: the file replaces the link.
fn write_files(root: &Path, files: &[File]) -> Result<()> {
    for f in files {
        let path = root.join(f.path.trim_start_matches('/'));
        if path
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            fs::remove_file(&path)?;
        }
        write_file(&path, &f.text, f.mode)?;
    }
    Ok(())
}

pub fn apply(root: &Path, c: &Configuration) -> Result<()> {
    let chroot = || {
        let mut cmd = Command::new("chroot");
        cmd.arg(root);
        cmd
    };
    fs::create_dir_all(root.join("var/lib/foothold"))?;
    for u in &c.users {
        let groups: &[&str] = if u.sudo { &["--groups", "sudo"] } else { &[] };
        chroot()
            .args(["useradd", "--create-home", "--shell", "/bin/bash"])
            .args(groups)
            .arg(&u.name)
            .run()
            .with_context(|| format!("adding user {}", u.name))?;
    }
    for name in &c.system_users {
        chroot()
            .args(["useradd", "--system", "--user-group", "--no-create-home"])
            .args(["--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin"])
            .arg(name)
            .run()
            .with_context(|| format!("adding system user {name}"))?;
    }
    write_files(root, &c.files)?;
    for u in c.users.iter().filter(|u| u.has_keys) {
        chroot()
            .args(["chown", "-R"])
            .arg(format!("{0}:{0}", u.name))
            .arg(format!("/home/{}/.ssh", u.name))
            .run()?;
    }
    chroot()
        .args(["systemctl", "enable"])
        .args(&c.units)
        .run()?;
    let _ = fs::remove_file(root.join("var/lib/dbus/machine-id"));
    if let Ok(entries) = fs::read_dir(root.join("etc/ssh")) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("ssh_host_") {
                fs::remove_file(e.path())?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> Ids {
        let u = |n: u128| uuid::Uuid::from_u128(n);
        Ids {
            disk: u(1),
            root: u(2),
            data: u(3),
        }
    }

    fn spec(extra: &str) -> Spec {
        let yaml = format!(
            "name: lab\nbase:\n  suite: trixie\nhostname: edge-1\noutputs:\n  formats: [raw]\n  diskSize: 4GiB\n{extra}"
        );
        crate::spec::load_text(Path::new("t.yaml"), &yaml, crate::spec::Pins::Required)
            .unwrap()
            .spec
    }

    #[test]
    fn a_file_replaces_a_link_in_the_tree_and_leaves_its_target_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (root, outside) = (dir.path().join("root"), dir.path().join("host-resolv.conf"));
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(&outside, "nameserver 10.0.0.1\n").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("etc/resolv.conf")).unwrap();
        let files = [File {
            path: "/etc/resolv.conf".into(),
            text: "# none\n".into(),
            mode: 0o644,
        }];
        write_files(&root, &files).unwrap();
        let written = root.join("etc/resolv.conf");
        assert!(!written.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&written).unwrap(), "# none\n");
        assert_eq!(
            std::fs::read_to_string(&outside).unwrap(),
            "nameserver 10.0.0.1\n"
        );
    }

    #[test]
    fn a_minimal_spec_names_the_host_mounts_by_uuid_and_enables_foothold_units() {
        let c = render(&spec(""), &ids(), None);
        assert_eq!(c.file("/etc/hostname").unwrap().text, "edge-1\n");
        // Not the build host's resolver: no nameserver at all.
        let resolv = &c.file("/etc/resolv.conf").unwrap().text;
        assert!(resolv.lines().all(|l| l.starts_with('#')), "{resolv}");
        assert!(c
            .file("/etc/hosts")
            .unwrap()
            .text
            .contains("127.0.1.1 edge-1\n"));
        let fstab = &c.file("/etc/fstab").unwrap().text;
        assert!(
            fstab.starts_with("UUID=00000000-0000-0000-0000-000000000002 / ext4 "),
            "{fstab}"
        );
        assert!(fstab.contains("UUID=00000000-0000-0000-0000-000000000003 /var/lib/foothold ext4 "));
        let grub = &c.file("/boot/grub/grub.cfg").unwrap().text;
        assert!(grub.contains("menuentry 'Foothold lab'"), "{grub}");
        assert!(
            grub.contains("root=UUID=00000000-0000-0000-0000-000000000002 ro "),
            "{grub}"
        );
        assert_eq!(
            c.file("/etc/systemd/network/20-external.network")
                .unwrap()
                .text,
            "[Match]\nName=en* eth*\n\n[Network]\nDHCP=yes\n"
        );
        assert!(c
            .file("/etc/systemd/network/10-provisioning.network")
            .is_none());
        assert_eq!(
            c.file("/etc/foothold/agent.yaml").unwrap().text,
            "# foothold-agent serve's flags by their long names (`foothold-agent serve --help`), written by\n\
             # foothold-build from the appliance spec. A flag's FOOTHOLD_* variable (a drop-in's Environment=) wins\n\
             # over this file.\n\
             listen: \"0.0.0.0:5000\"\ndata: \"/var/lib/foothold\"\ntoken-file: \"/etc/foothold/token\"\n\
             credentials: \"/etc/foothold/credentials.yaml\"\n\
             protected-repositories: \"/var/lib/foothold/protected-repositories\"\n"
        );
        assert_eq!(c.file("/etc/machine-id").unwrap().mode, 0o444);
        assert!(c.units.iter().any(|u| u == "foothold-agent.service"));
        assert!(
            !c.units.iter().any(|u| u.starts_with("kube")),
            "{:?}",
            c.units
        );
        assert!(c.users.is_empty());
    }

    #[test]
    fn provisioning_by_mac_tls_and_users_render_their_files() {
        let c = render(
            &spec(
                "network:\n  provisioning:\n    interface: 52:54:00:12:34:56\n    address: 172.22.0.1/24\n  \
                 external:\n    interface: enp1s0\ncomponents:\n  agentTls: true\n  agentArgs: [--no-controllers]\n\
                 users:\n  - name: ops\n    sudo: true\n    authorizedKeys: [ssh-ed25519 AAAA ops@site]\n  \
                 - name: viewer\n",
            ),
            &ids(),
            None,
        );
        let prov = &c
            .file("/etc/systemd/network/10-provisioning.network")
            .unwrap()
            .text;
        assert!(
            prov.starts_with("[Match]\nMACAddress=52:54:00:12:34:56\n"),
            "{prov}"
        );
        assert!(
            prov.contains("Address=172.22.0.1/24\nConfigureWithoutCarrier=yes\n"),
            "{prov}"
        );
        assert!(c
            .file("/etc/systemd/network/20-external.network")
            .unwrap()
            .text
            .contains("Name=enp1s0\n"));
        let conf = &c.file("/etc/foothold/agent.yaml").unwrap().text;
        assert!(
            conf.contains(
                "tls-cert: \"/etc/foothold/tls/cert.pem\"\ntls-key: \"/etc/foothold/tls/key.pem\"\n\
                 certificate: \"site-ca=/etc/foothold/tls/ca.pem\"\n\
                 advertise-url: \"https://172.22.0.1:5000\"\nno-controllers: true\n"
            ),
            "{conf}"
        );
        assert_eq!(
            c.file("/etc/foothold/tls-names").unwrap().text,
            "IP:172.22.0.1\n"
        );
        let sudoers = c.file("/etc/sudoers.d/foothold-ops").unwrap();
        assert_eq!(
            (sudoers.text.as_str(), sudoers.mode),
            ("ops ALL=(ALL:ALL) NOPASSWD: ALL\n", 0o440)
        );
        assert!(
            c.file("/etc/sudoers.d/foothold-viewer").is_none(),
            "only sudo users may sudo"
        );
        assert_eq!(
            c.file("/etc/ssh/sshd_config.d/foothold.conf").unwrap().text,
            "# Written by foothold-build: keys only, never root, only the users of the image's spec.\n\
             PermitRootLogin no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             AuthenticationMethods publickey\nAllowUsers ops viewer\n"
        );
        let keys = c.file("/home/ops/.ssh/authorized_keys").unwrap();
        assert_eq!(
            (keys.text.as_str(), keys.mode),
            ("ssh-ed25519 AAAA ops@site\n", 0o600)
        );
        assert!(c.file("/home/viewer/.ssh/authorized_keys").is_none());
        assert_eq!(
            c.users,
            [
                User {
                    name: "ops".into(),
                    sudo: true,
                    has_keys: true
                },
                User {
                    name: "viewer".into(),
                    sudo: false,
                    has_keys: false
                },
            ]
        );
    }

    #[test]
    fn metal3_brings_ironic_and_bmo_units_and_the_agent_reports_them() {
        let spec = crate::spec::tests::metal3_spec(|t| t).unwrap();
        let c = render(&spec, &ids(), None);
        for unit in crate::metal3::UNITS {
            assert!(c.units.iter().any(|u| u == unit), "{unit}: {:?}", c.units);
        }
        assert!(c.file("/etc/ironic/ironic.conf").is_some());
        let conf = &c.file("/etc/foothold/agent.yaml").unwrap().text;
        assert!(
            conf.contains("ready-check: [\"ironic=http://127.0.0.1:6385/\", \"baremetal-operator=http://127.0.0.1:9440/readyz\"]\n"),
            "{conf}"
        );
        assert!(
            conf.contains("certificate: [\"kubernetes-ca=/etc/kubernetes/pki/ca.crt\", \"kube-apiserver=/etc/kubernetes/pki/apiserver.crt\", \
                 \"kubelet-client=/run/foothold/kubelet-certs/client.pem\", \"kubelet-serving=/run/foothold/kubelet-certs/server.pem\"]\n"),
            "{conf}"
        );
        assert!(conf.contains("\napprove-kubelet-serving: true\n"), "{conf}");
    }

    #[test]
    fn an_appliance_with_metal3_and_https_holds_bpa_hosts_until_drained() {
        let admission = "\nadmission-url: \"https://127.0.0.1:5000\"\nadmission-ca: \"/etc/foothold/tls/ca.pem\"\n";
        for tls in [true, false] {
            let mut spec = crate::spec::tests::metal3_spec(|t| t).unwrap();
            spec.components.agent_tls = tls;
            let c = render(&spec, &ids(), None);
            let conf = &c.file("/etc/foothold/agent.yaml").unwrap().text;
            // Without HTTPS the API server cannot call the agent: no hold.
            assert_eq!(conf.contains(admission), tls, "{conf}");
        }
    }

    #[test]
    fn a_node_runs_containerd_and_its_ready_report_not_the_agent() {
        let mut spec = crate::spec::parse(
            "name: node\nbase: {suite: trixie}\nhostname: node\ncomponents:\n  node: {mirror: 'https://172.22.0.1:5000', ca: {path: ca.pem}}\noutputs: {formats: [iso], diskSize: 2GiB}\n",
        )
        .unwrap();
        spec.validate().unwrap();
        let c = render(&spec, &ids(), None);
        for unit in [
            "containerd.service",
            "foothold-node-ready.service",
            "systemd-networkd.service",
        ] {
            assert!(c.units.iter().any(|u| u == unit), "{unit}: {:?}", c.units);
        }
        for unit in AGENT_UNITS {
            assert!(!c.units.iter().any(|u| u == unit), "{unit}: {:?}", c.units);
        }
        assert!(c.file("/etc/foothold/mirror.env").is_some());
        assert!(c.file("/etc/foothold/agent.yaml").is_none());
        spec.components.node = None;
        let c = render(&spec, &ids(), None);
        // The appliance: the agent, and the site's certificates renewed at boot and daily.
        for unit in AGENT_UNITS {
            assert!(c.units.iter().any(|u| u == unit), "{unit}: {:?}", c.units);
        }
        assert!(c.units.iter().any(|u| u == "foothold-pki.timer"));
        assert!(c.file("/etc/foothold/mirror.env").is_none());
    }
}
