//! The virtual site: compute nodes as libvirt domains, sushy-tools as their Redfish BMC, and the
//! BareMetalHosts that hand them to the appliance's Metal3 — what a lab or a test needs to run a site on one
//! machine. This module writes the documents (domain XML, sushy's configuration, the manifests); it starts
//! nothing. A node is isolated like the appliance: qemu user networking with `restrict=on`, its only way out the
//! guest forwards it is given (the appliance's agent, say), so no test traffic reaches the host's interfaces.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A compute node: a libvirt domain (`<domain type='qemu'>`, so it runs where KVM does not) that boots UEFI
/// from whatever CD its BMC inserts.
#[derive(Clone, Debug)]
pub struct ComputeNode {
    /// The libvirt domain's name, and the BareMetalHost's.
    pub name: String,
    /// The domain's UUID: its Redfish system id at the BMC.
    pub uuid: String,
    /// Its NIC's MAC: the BareMetalHost's `bootMACAddress`.
    pub mac: String,
    pub memory_mib: u32,
    pub vcpus: u32,
}

/// How a compute node reaches the site: its qemu user network and what it may reach there.
#[derive(Clone, Debug)]
pub struct NodeNetwork {
    /// The user network, e.g. `172.22.0.0/24`, the appliance's provisioning network, so that the address a node
    /// image was built for (`https://172.22.0.1:5000`) and the agent's certificate hold.
    pub net: String,
    /// The guest's connections to (address, port) reach 127.0.0.1:<host port> on this host.
    pub forwards: Vec<GuestForward>,
    /// `foothold-build`, which relays each such connection; qemu runs it as libvirt's qemu user, so it must be
    /// where that user can execute it.
    pub relay: PathBuf,
}

#[derive(Clone, Debug)]
pub struct GuestForward {
    pub address: String,
    pub port: u16,
    pub host_port: u16,
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
        .replace('"', "&quot;")
}

/// The node's libvirt domain. Why each part:
/// - q35 with `<os firmware='efi'>`, Secure Boot and enrolled keys off: Metal3's live ISOs boot UEFI, and
///   libvirt picks the OVMF build that matches (sushy-tools' boot-mode calls need firmware libvirt knows).
/// - an empty SATA CD: sushy-tools' virtual media fills it on InsertMedia and empties it on EjectMedia.
/// - the serial console to `console`, where the node's ready marker appears.
/// - the NIC on qemu's command line: libvirt's own `<interface type='user'>` cannot restrict the network or
///   forward from the guest; it sits at `pcie.0` slot 0x10, clear of the root ports libvirt adds.
pub fn domain_xml(node: &ComputeNode, net: &NodeNetwork, console: &Path) -> String {
    let mut netdev = format!("user,id=site,restrict=on,net={}", net.net);
    for f in &net.forwards {
        netdev.push_str(&crate::qemu::guestfwd(
            &f.address,
            f.port,
            &net.relay,
            f.host_port,
        ));
    }
    let console = xml_escape(&console.display().to_string());
    let mut x = String::new();
    let _ = write!(
        x,
        "<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>{name}</name>
  <uuid>{uuid}</uuid>
  <memory unit='MiB'>{memory}</memory>
  <vcpu>{vcpus}</vcpu>
  <os firmware='efi'>
    <type arch='x86_64' machine='q35'>hvm</type>
    <firmware>
      <feature enabled='no' name='secure-boot'/>
      <feature enabled='no' name='enrolled-keys'/>
    </firmware>
    <boot dev='cdrom'/>
  </os>
  <features><acpi/><apic/></features>
  <cpu mode='custom' match='exact'><model>qemu64</model></cpu>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <target dev='sda' bus='sata'/>
      <readonly/>
    </disk>
    <serial type='file'><source path='{console}'/><target port='0'/></serial>
    <console type='file'><source path='{console}'/><target type='serial' port='0'/></console>
  </devices>
  <qemu:commandline>
    <qemu:arg value='-netdev'/>
    <qemu:arg value='{netdev}'/>
    <qemu:arg value='-device'/>
    <qemu:arg value='virtio-net-pci,netdev=site,mac={mac},bus=pcie.0,addr=0x10'/>
  </qemu:commandline>
</domain>
",
        name = xml_escape(&node.name),
        uuid = xml_escape(&node.uuid),
        memory = node.memory_mib,
        vcpus = node.vcpus,
        netdev = xml_escape(&netdev),
        mac = xml_escape(&node.mac),
    );
    x
}

/// sushy-tools driving libvirt's domains as Redfish systems.
#[derive(Clone, Debug)]
pub struct Bmc {
    /// Its port on 127.0.0.1 (the appliance reaches it through a guest forward).
    pub port: u16,
    /// The htpasswd file (bcrypt) of the BMC's users.
    pub auth_file: PathBuf,
    /// The only domains it exposes: the site's nodes, by UUID (never the host's other VMs).
    pub nodes: Vec<String>,
    /// The libvirt storage pool inserted media are copied to.
    pub pool: String,
    /// The CA that virtual media URLs must be signed by (the appliance's certificate); None: verify against
    /// the system's CAs.
    pub media_ca: Option<PathBuf>,
    /// Where it keeps the media's state between requests.
    pub state_dir: PathBuf,
}

fn py_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// sushy-emulator's configuration (a Python file) for `bmc` on libvirt's system daemon.
pub fn sushy_config(bmc: &Bmc) -> String {
    let nodes: Vec<String> = bmc.nodes.iter().map(|u| py_str(u)).collect();
    // A media URL is fetched by the BMC, and it must be the site's agent: verify its certificate.
    let verify = match &bmc.media_ca {
        Some(ca) => py_str(&ca.display().to_string()),
        None => "True".into(),
    };
    format!(
        "# Generated by foothold-build: the site's BMC, sushy-tools on libvirt.\n\
         SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n\
         SUSHY_EMULATOR_LISTEN_PORT = {port}\n\
         SUSHY_EMULATOR_AUTH_FILE = {auth}\n\
         SUSHY_EMULATOR_LIBVIRT_URI = 'qemu:///system'\n\
         SUSHY_EMULATOR_ALLOWED_INSTANCES = [{nodes}]\n\
         SUSHY_EMULATOR_STORAGE_POOL = {pool}\n\
         SUSHY_EMULATOR_VMEDIA_VERIFY_SSL = {verify}\n\
         SUSHY_EMULATOR_STATE_DIR = {state}\n\
         SUSHY_EMULATOR_IGNORE_BOOT_DEVICE = False\n",
        port = bmc.port,
        auth = py_str(&bmc.auth_file.display().to_string()),
        nodes = nodes.join(", "),
        pool = py_str(&bmc.pool),
        state = py_str(&bmc.state_dir.display().to_string()),
    )
}

/// What a BareMetalHost for `node` says, beyond its name.
#[derive(Clone, Debug)]
pub struct HostSpec<'a> {
    pub namespace: &'a str,
    /// The BMC as the appliance reaches it, e.g. `http://10.0.2.100:8000` (no trailing slash).
    pub bmc: &'a str,
    pub user: &'a str,
    pub password: &'a str,
}

fn yaml_str(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// The node's credentials Secret and BareMetalHost: its BMC by Redfish system UUID with virtual media, no
/// inspection and no cleaning (live ISOs need no IPA ramdisk), UEFI, powered off until Metal3 provisions it.
pub fn bare_metal_host(node: &ComputeNode, h: &HostSpec) -> String {
    let secret = format!("{}-bmc", node.name);
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {secret}\n  namespace: {ns}\ntype: Opaque\n\
         stringData:\n  username: {user}\n  password: {password}\n---\n\
         apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata:\n  name: {name}\n  namespace: {ns}\n\
         spec:\n  online: false\n  bootMode: UEFI\n  bootMACAddress: {mac}\n  inspectionMode: disabled\n  \
         automatedCleaningMode: disabled\n  bmc:\n    address: {address}\n    credentialsName: {secret}\n",
        secret = yaml_str(&secret),
        ns = yaml_str(h.namespace),
        user = yaml_str(h.user),
        password = yaml_str(h.password),
        name = yaml_str(&node.name),
        mac = yaml_str(&node.mac),
        address = yaml_str(&format!(
            "redfish-virtualmedia+{}/redfish/v1/Systems/{}",
            h.bmc, node.uuid
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> ComputeNode {
        ComputeNode {
            name: "node-0".into(),
            uuid: "27946b59-9e44-4fa7-8e91-f3527a1ef0a0".into(),
            mac: "02:00:00:00:20:00".into(),
            memory_mib: 1536,
            vcpus: 1,
        }
    }

    /// The domain XML is reviewed as a whole: a change to it shows in `tests/fixtures/site-node.xml`.
    #[test]
    fn domain_xml_snapshot() {
        let net = NodeNetwork {
            net: "172.22.0.0/24".into(),
            forwards: vec![GuestForward {
                address: "172.22.0.1".into(),
                port: 5000,
                host_port: 41173,
            }],
            relay: "/var/lib/libvirt/images/site/foothold-build".into(),
        };
        let x = domain_xml(
            &node(),
            &net,
            Path::new("/var/lib/libvirt/images/site/node-0.console.log"),
        );
        let want = include_str!("../tests/fixtures/site-node.xml");
        if x != want {
            let out = std::env::temp_dir().join("site-node.xml");
            std::fs::write(&out, &x).unwrap();
            panic!(
                "the domain XML changed: diff {} image-builder/tests/fixtures/site-node.xml, and copy it there if the change is meant",
                out.display()
            );
        }
    }

    #[test]
    fn domain_xml_escapes_what_it_quotes() {
        let net = NodeNetwork {
            net: "172.22.0.0/24".into(),
            forwards: vec![],
            relay: "/r".into(),
        };
        let x = domain_xml(&node(), &net, Path::new("/tmp/a'b&c.log"));
        assert!(
            x.contains("<source path='/tmp/a&apos;b&amp;c.log'/>"),
            "{x}"
        );
    }

    #[test]
    fn sushy_exposes_only_the_site_nodes_and_verifies_media() {
        let c = sushy_config(&Bmc {
            port: 8001,
            auth_file: "/s/htpasswd".into(),
            nodes: vec![node().uuid],
            pool: "default".into(),
            media_ca: Some("/s/site-ca.pem".into()),
            state_dir: "/s/state".into(),
        });
        assert!(c.contains(
            "SUSHY_EMULATOR_ALLOWED_INSTANCES = ['27946b59-9e44-4fa7-8e91-f3527a1ef0a0']\n"
        ));
        assert!(c.contains("SUSHY_EMULATOR_VMEDIA_VERIFY_SSL = '/s/site-ca.pem'\n"));
        assert!(c.contains("SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"));
        assert_eq!(py_str("a'b\\"), "'a\\'b\\\\'");
    }

    #[test]
    fn bare_metal_host_names_the_bmc_by_uuid_with_virtual_media() {
        let y = bare_metal_host(
            &node(),
            &HostSpec {
                namespace: "site",
                bmc: "http://10.0.2.100:8001",
                user: "admin",
                password: "p\"w",
            },
        );
        let docs: Vec<serde_json::Value> = y
            .split("---\n")
            .map(|d| serde_saphyr::from_str(d).unwrap())
            .collect();
        assert_eq!(docs[0]["stringData"]["password"], "p\"w");
        assert_eq!(docs[1]["spec"]["bmc"]["credentialsName"], "node-0-bmc");
        assert_eq!(
            docs[1]["spec"]["bmc"]["address"],
            "redfish-virtualmedia+http://10.0.2.100:8001/redfish/v1/Systems/27946b59-9e44-4fa7-8e91-f3527a1ef0a0"
        );
        assert_eq!(docs[1]["spec"]["bootMACAddress"], "02:00:00:00:20:00");
        assert_eq!(docs[1]["spec"]["inspectionMode"], "disabled");
        assert_eq!(docs[1]["spec"]["automatedCleaningMode"], "disabled");
        assert_eq!(docs[1]["spec"]["online"], false);
    }
}
