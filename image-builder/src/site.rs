//! Compute nodes isolated like the appliance, for tests of live media: libvirt domains on qemu user networking with
//! `restrict=on`, their only way out the guest forwards they are given (the appliance's agent, say), so no test
//! traffic reaches the host's interfaces; sushy-tools' configuration as their Redfish BMC. This module writes
//! the documents; it starts nothing. The virtual site on a provisioning network, as `foothold-build site` writes
//! it, is [`crate::virtual_site`].

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use crate::qemu::GuestForward;

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
    /// Its disk (a raw or qcow2 file, by extension), which Ironic deploys an image to and the node then boots
    /// from; None for a node that only ever boots live media.
    pub disk: Option<PathBuf>,
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
    /// (host port on 127.0.0.1, guest port): a lab's or test's way in, e.g. to the node's SSH.
    pub host_forwards: Vec<(u16, u16)>,
    /// A second NIC, on an Ethernet link to one other node: the network a workload cluster's nodes talk on.
    pub link: Option<Link>,
}

/// A point-to-point Ethernet link between two nodes, carried by qemu as UDP datagrams between two ports of
/// 127.0.0.1 (each node's `local` is the other's `peer`): nothing leaves this host's loopback.
#[derive(Clone, Debug)]
pub struct Link {
    pub local: u16,
    pub peer: u16,
    /// The NIC's MAC address, by which the guest's interface is found.
    pub mac: String,
}

pub(crate) fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
        .replace('"', "&quot;")
}

/// A libvirt domain's CPU topology for `vcpus` vCPUs on one socket. Without it libvirt gives each vCPU a socket of
/// its own, and Linux takes the TSCs of a CPU without an invariant TSC (TCG's) on several sockets for
/// unsynchronised: it marks the TSC unstable at boot and keeps time with the emulated HPET, every clock read a trip
/// into qemu's device model. qemu's own command line says the same with [`crate::qemu`]'s `-smp`.
pub fn one_socket(vcpus: u32) -> String {
    format!("<topology sockets='1' dies='1' cores='{vcpus}' threads='1'/>")
}

/// The node's libvirt domain. Why each part:
/// - q35 with `<os firmware='efi'>`, Secure Boot and enrolled keys off: Metal3's live ISOs boot UEFI, and
///   libvirt picks the OVMF build that matches (sushy-tools' boot-mode calls need firmware libvirt knows).
/// - the CPU qemu calls `max` (under TCG every feature it emulates, AES-NI among them), as the appliance runs:
///   the bare `qemu64` leaves a node's TLS and checksums to software AES and SHA (not measured here); its
///   CPUs on one socket, which libvirt would otherwise make one socket each: Linux keeps the TSC as its clock
///   only with one socket (see `qemu::smp`);
/// - an empty SATA CD: sushy-tools' virtual media fills it on InsertMedia and empties it on EjectMedia;
/// - the node's disk, if it has one, on virtio, booted after the CD: what a server with an OS on its disk does
///   once its virtual media is ejected.
/// - the serial console to `console`, where the node's ready marker appears.
/// - the NIC on qemu's command line: libvirt's own `<interface type='user'>` cannot restrict the network or
///   forward from the guest; it sits at `pcie.0` slot 0x10, clear of the root ports libvirt adds.
pub fn domain_xml(node: &ComputeNode, net: &NodeNetwork, console: &Path) -> String {
    let mut netdev = format!("user,id=site,restrict=on,net={}", net.net);
    for (host, guest) in &net.host_forwards {
        let _ = write!(netdev, ",hostfwd=tcp:127.0.0.1:{host}-:{guest}");
    }
    for f in &net.forwards {
        netdev.push_str(&crate::qemu::guestfwd(
            &f.address,
            f.port,
            &net.relay,
            f.host_port,
        ));
    }
    let console = xml_escape(&console.display().to_string());
    let link = net.link.as_ref().map_or(String::new(), |l| {
        format!(
            "    <qemu:arg value='-netdev'/>\n    <qemu:arg value='socket,id=link,udp=127.0.0.1:{peer},localaddr=127.0.0.1:{local}'/>\n    \
             <qemu:arg value='-device'/>\n    <qemu:arg value='virtio-net-pci,netdev=link,mac={mac},bus=pcie.0,addr=0x11'/>\n",
            peer = l.peer,
            local = l.local,
            mac = xml_escape(&l.mac)
        )
    });
    let (disk, boot_disk) = node.disk.as_ref().map_or((String::new(), ""), |path| {
        let format = match path.extension() {
            Some(e) if e == "qcow2" => "qcow2",
            _ => "raw",
        };
        (
            format!(
                "    <disk type='file' device='disk'>\n      <driver name='qemu' type='{format}'/>\n      \
                 <source file='{}'/>\n      <target dev='vda' bus='virtio'/>\n    </disk>\n",
                xml_escape(&path.display().to_string())
            ),
            "\n    <boot dev='hd'/>",
        )
    });
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
    <boot dev='cdrom'/>{boot_disk}
  </os>
  <features><acpi/><apic/></features>
  <cpu mode='maximum' check='none'>{topology}</cpu>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <target dev='sda' bus='sata'/>
      <readonly/>
    </disk>
{disk}    <serial type='file'><source path='{console}'/><target port='0'/></serial>
    <console type='file'><source path='{console}'/><target type='serial' port='0'/></console>
  </devices>
  <qemu:commandline>
    <qemu:arg value='-netdev'/>
    <qemu:arg value='{netdev}'/>
    <qemu:arg value='-device'/>
    <qemu:arg value='virtio-net-pci,netdev=site,mac={mac},bus=pcie.0,addr=0x10'/>
{link}  </qemu:commandline>
</domain>
",
        name = xml_escape(&node.name),
        uuid = xml_escape(&node.uuid),
        memory = node.memory_mib,
        vcpus = node.vcpus,
        topology = one_socket(node.vcpus),
        netdev = xml_escape(&netdev),
        mac = xml_escape(&node.mac),
    );
    x
}

/// sushy-tools driving libvirt's domains as Redfish systems.
#[derive(Clone, Debug)]
pub struct Bmc {
    /// The address it listens on: 127.0.0.1 for a site on this host's loopback (the appliance reaches it through
    /// a guest forward), or its address on a provisioning network inside a namespace.
    pub listen: String,
    /// Its port.
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
         SUSHY_EMULATOR_LISTEN_IP = {listen}\n\
         SUSHY_EMULATOR_LISTEN_PORT = {port}\n\
         SUSHY_EMULATOR_AUTH_FILE = {auth}\n\
         SUSHY_EMULATOR_LIBVIRT_URI = 'qemu:///system'\n\
         SUSHY_EMULATOR_ALLOWED_INSTANCES = [{nodes}]\n\
         SUSHY_EMULATOR_STORAGE_POOL = {pool}\n\
         SUSHY_EMULATOR_VMEDIA_VERIFY_SSL = {verify}\n\
         SUSHY_EMULATOR_STATE_DIR = {state}\n\
         SUSHY_EMULATOR_IGNORE_BOOT_DEVICE = False\n",
        listen = py_str(&bmc.listen),
        port = bmc.port,
        auth = py_str(&bmc.auth_file.display().to_string()),
        nodes = nodes.join(", "),
        pool = py_str(&bmc.pool),
        state = py_str(&bmc.state_dir.display().to_string()),
    )
}

/// One `htpasswd` line for `user` with a bcrypt digest of `password`: what sushy-tools (bcrypt only) and
/// Apache's `htpasswd -B` agree on.
pub fn htpasswd_line(user: &str, password: &str) -> Result<String> {
    let hash = bcrypt::hash(password, bcrypt::DEFAULT_COST).context("hashing the BMC password")?;
    Ok(format!("{user}:{hash}\n"))
}

/// The port the appliance reaches the site's BMC at, on qemu's guest-forward address (`run --guest-forward
/// 8001:<bmc port>`).
pub const BMC_GUEST_PORT: u16 = 8001;

/// The nodes' mirror address: the appliance's address on its provisioning network, which node images are
/// built for (`packages/node.yaml`) and its agent's certificate names.
pub const MIRROR: (&str, u16) = ("172.22.0.1", 5000);

/// A node's network on the site: the provisioning network, its one way out the mirror address, relayed by
/// `relay` to the appliance's agent at 127.0.0.1:`agent_port`.
pub fn site_network(agent_port: u16, relay: PathBuf) -> NodeNetwork {
    NodeNetwork {
        net: "172.22.0.0/24".into(),
        forwards: vec![GuestForward {
            address: MIRROR.0.into(),
            port: MIRROR.1,
            host_port: agent_port,
        }],
        relay,
        host_forwards: Vec::new(),
        link: None,
    }
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
            disk: None,
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
            host_forwards: vec![(40022, 22)],
            link: Some(Link {
                local: 40100,
                peer: 40101,
                mac: "02:00:00:00:31:00".into(),
            }),
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

    /// A network with nothing forwarded and no link.
    fn bare_network() -> NodeNetwork {
        NodeNetwork {
            net: "172.22.0.0/24".into(),
            forwards: vec![],
            relay: "/r".into(),
            host_forwards: vec![],
            link: None,
        }
    }

    #[test]
    fn a_node_with_two_cpus_has_them_on_one_socket() {
        let n = ComputeNode { vcpus: 2, ..node() };
        let net = bare_network();
        let x = domain_xml(&n, &net, Path::new("/c.log"));
        assert!(x.contains("  <vcpu>2</vcpu>\n"), "{x}");
        assert!(
            x.contains("<topology sockets='1' dies='1' cores='2' threads='1'/>"),
            "{x}"
        );
    }

    #[test]
    fn a_node_with_a_disk_boots_it_after_the_cd() {
        let net = bare_network();
        for (file, format) in [("node-0.qcow2", "qcow2"), ("node-0.raw", "raw")] {
            let n = ComputeNode {
                disk: Some(PathBuf::from("/var/lib/libvirt/images/site").join(file)),
                ..node()
            };
            let x = domain_xml(&n, &net, Path::new("/c.log"));
            assert!(
                x.contains(&format!(
                    "<disk type='file' device='disk'>\n      <driver name='qemu' type='{format}'/>\n      \
                     <source file='/var/lib/libvirt/images/site/{file}'/>\n      <target dev='vda' bus='virtio'/>\n"
                )),
                "{x}"
            );
            assert!(
                x.contains("<boot dev='cdrom'/>\n    <boot dev='hd'/>\n  </os>"),
                "{x}"
            );
        }
        // Without one, the CD alone.
        let x = domain_xml(&node(), &net, Path::new("/c.log"));
        assert!(
            !x.contains("device='disk'") && !x.contains("<boot dev='hd'/>"),
            "{x}"
        );
    }

    #[test]
    fn domain_xml_escapes_what_it_quotes() {
        let net = bare_network();
        let x = domain_xml(&node(), &net, Path::new("/tmp/a'b&c.log"));
        assert!(
            x.contains("<source path='/tmp/a&apos;b&amp;c.log'/>"),
            "{x}"
        );
    }

    #[test]
    fn sushy_exposes_only_the_site_nodes_and_verifies_media() {
        let c = sushy_config(&Bmc {
            listen: "127.0.0.1".into(),
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
}
