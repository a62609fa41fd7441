//! A virtual site that is a site, on one machine (`foothold-build site`, `scripts/virtual-site.sh`): compute nodes
//! as libvirt domains with a disk, whose NICs are taps on the provisioning network's bridge (inside a network
//! namespace the script makes) beside the appliance's provisioning NIC, so they get their addresses from the
//! appliance's DHCP and boot its deploy ramdisk; their BMCs on that network too, at [`BMC_ADDRESS`]: sushy-tools
//! (Redfish, the ramdisk by virtual media) for the even nodes, virtualbmc (IPMI, the ramdisk by PXE and iPXE)
//! for the odd ones; and the BareMetalHosts that hand them to the appliance's Metal3 with inspection and cleaning
//! on, as at a site. This module writes the documents; it starts nothing.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};

use crate::files::{publish_dir, write_file};
use crate::site::{htpasswd_line, one_socket, sushy_config, xml_escape, Bmc};

/// The BMCs' address on the provisioning network (the appliance's is 172.22.0.1).
pub const BMC_ADDRESS: &str = "172.22.0.2";
/// sushy-tools' port there.
pub const REDFISH_PORT: u16 = 8000;
/// virtualbmc's port for the first IPMI node there; the next ones count up.
pub const IPMI_PORT: u16 = 6230;

/// How a node's BMC is reached, and so how its deploy ramdisk boots.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum NodeBmc {
    /// virtualbmc at this port: Ironic's `ipmi` hardware type, the ramdisk booted by PXE and iPXE.
    Ipmi { port: u16 },
    /// sushy-tools: `redfish`, the ramdisk booted from the ISO Ironic makes, by virtual media.
    Redfish,
}

/// A compute node on the provisioning network.
#[derive(Clone, Debug)]
pub struct BridgedNode {
    /// The libvirt domain's name.
    pub domain: String,
    /// Its UUID: its Redfish system id.
    pub uuid: String,
    /// Its NIC's MAC: the BareMetalHost's `bootMACAddress`, and its DHCP identity.
    pub mac: String,
    /// The tap its NIC is on (made on the bridge beforehand; libvirt does not manage it).
    pub tap: String,
    pub vcpus: u32,
    pub memory_mib: u32,
    /// Its qcow2 disk, which Ironic cleans and deploys an image to.
    pub disk: PathBuf,
    /// Its serial console, appended to across boots (the ramdisk's, then the installed system's).
    pub console: PathBuf,
    pub bmc: NodeBmc,
}

impl BridgedNode {
    /// The BMC's address, as a BareMetalHost names it.
    pub fn bmc_address(&self) -> String {
        match self.bmc {
            NodeBmc::Ipmi { port } => format!("ipmi://{BMC_ADDRESS}:{port}"),
            NodeBmc::Redfish => format!(
                "redfish-virtualmedia+http://{BMC_ADDRESS}:{REDFISH_PORT}/redfish/v1/Systems/{}",
                self.uuid
            ),
        }
    }
}

/// A node as `foothold-build site` reports it (`-o json|yaml`: these fields; text: one line each, in this order).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Listed {
    pub domain: String,
    pub uuid: String,
    pub mac: String,
    pub tap: String,
    /// `redfish`, or `ipmi:<port>`.
    pub bmc: String,
}

impl std::fmt::Display for Listed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {} {} {}",
            self.domain, self.uuid, self.mac, self.tap, self.bmc
        )
    }
}

impl BridgedNode {
    /// What `foothold-build site` reports of the node.
    pub fn listed(&self) -> Listed {
        Listed {
            domain: self.domain.clone(),
            uuid: self.uuid.clone(),
            mac: self.mac.clone(),
            tap: self.tap.clone(),
            bmc: match self.bmc {
                NodeBmc::Ipmi { port } => format!("ipmi:{port}"),
                NodeBmc::Redfish => "redfish".into(),
            },
        }
    }
}

/// The node's domain: UEFI without Secure Boot, TCG, its disk, its NIC on its tap, its console appended to a
/// file. virtualbmc sets the boot device by redefining the domain from its XML, which libvirt refuses for a
/// firmware it chose itself: an IPMI node names OVMF. sushy-tools rewrites a named loader when Ironic sets the
/// boot mode (to a Secure Boot build that needs SMM): a Redfish node lets libvirt choose
/// (`../shared/metal3-notes.md`). No CPU model: libvirt gives TCG `qemu64`; qemu's `max`, tried for its AES-NI,
/// did not make a workload cluster faster, and under TCG its processes start slower (docs/results.md,
/// 2026-11-29). Its CPUs on one socket ([`one_socket`]).
pub fn domain_xml(node: &BridgedNode) -> String {
    let firmware = match node.bmc {
        NodeBmc::Ipmi { .. } => format!(
            "<os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n\
             <loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader>\n\
             <nvram template='/usr/share/OVMF/OVMF_VARS_4M.fd'>/var/lib/libvirt/qemu/nvram/{}_VARS.fd</nvram>\n\
             <boot dev='hd'/>\n  </os>",
            xml_escape(&node.domain)
        ),
        NodeBmc::Redfish => "<os firmware='efi'>\n    <type arch='x86_64' machine='q35'>hvm</type>\n    <firmware>\n\
             <feature enabled='no' name='secure-boot'/>\n      <feature enabled='no' name='enrolled-keys'/>\n\
             </firmware>\n    <boot dev='hd'/>\n  </os>"
            .to_owned(),
    };
    format!(
        "<domain type='qemu'>\n  <name>{domain}</name>\n  <uuid>{uuid}</uuid>\n\
         <memory unit='MiB'>{memory}</memory>\n  <vcpu>{vcpus}</vcpu>\n  {firmware}\n\
         <features><acpi/></features>\n\
         <cpu>{topology}</cpu>\n  <devices>\n\
         <disk type='file' device='disk'>\n      <driver name='qemu' type='qcow2'/>\n      <source file='{disk}'/>\n\
         <target dev='vda' bus='virtio'/>\n    </disk>\n\
         <interface type='ethernet'>\n      <mac address='{mac}'/>\n      <target dev='{tap}' managed='no'/>\n\
         <model type='virtio'/>\n    </interface>\n\
         <serial type='file'>\n      <source path='{console}' append='on'/>\n      <target port='0'/>\n    </serial>\n\
         </devices>\n</domain>\n",
        domain = xml_escape(&node.domain),
        uuid = xml_escape(&node.uuid),
        memory = node.memory_mib,
        vcpus = node.vcpus,
        topology = one_socket(node.vcpus),
        disk = xml_escape(&node.disk.display().to_string()),
        mac = xml_escape(&node.mac),
        tap = xml_escape(&node.tap),
        console = xml_escape(&node.console.display().to_string()),
    )
}

fn yaml_str(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// The BareMetalHost of `node` in `namespace`, its BMC's credentials in the Secret `secret`: inspected and
/// cleaned (Metal3's defaults: agent inspection, `metadata` cleaning), UEFI, its root device the virtio disk,
/// on once registered (inspection boots it).
pub fn bare_metal_host(node: &BridgedNode, namespace: &str, secret: &str) -> String {
    format!(
        "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata:\n  name: {name}\n  namespace: {ns}\n\
         spec:\n  online: true\n  bootMode: UEFI\n  bootMACAddress: {mac}\n  \
         rootDeviceHints: {{deviceName: /dev/vda}}\n  bmc:\n    address: {address}\n    credentialsName: {secret}\n",
        name = yaml_str(&node.domain),
        ns = yaml_str(namespace),
        mac = yaml_str(&node.mac),
        address = yaml_str(&node.bmc_address()),
        secret = yaml_str(secret),
    )
}

/// What [`write`] makes a site of.
#[derive(Clone, Debug)]
pub struct SiteOptions {
    pub nodes: u16,
    pub memory_mib: u32,
    pub vcpus: u32,
    /// The BareMetalHosts' namespace.
    pub namespace: String,
}

/// Writes a virtual site into `dir` (which must not exist; the whole directory appears at once): `<name>-node-<i>.xml`
/// (libvirt domains; node i's tap `fhnode<i>`, its disk `<name>-node-<i>.qcow2` here, which the script makes),
/// `sushy.conf` + `bmc.htpasswd` (the Redfish BMC) and `bmc-password` (user `admin`, a random password, which
/// the script gives virtualbmc too), `hosts.yaml` (the Secret and BareMetalHosts for the appliance). Even nodes
/// have the Redfish BMC, odd ones an IPMI BMC each. Returns the nodes.
pub fn write(dir: &Path, o: &SiteOptions) -> Result<Vec<BridgedNode>> {
    use std::os::unix::fs::PermissionsExt as _;
    if dir.exists() {
        bail!(
            "{} exists: a site is written into a new directory",
            dir.display()
        );
    }
    if o.memory_mib < 2048 {
        bail!(
            "--memory {}: a node runs the deploy ramdisk in memory (about 430 MiB unpacked); give it 2048 MiB or more",
            o.memory_mib
        );
    }
    let dir = std::path::absolute(dir).with_context(|| format!("resolving {}", dir.display()))?;
    let name = dir
        .file_name()
        .context("the site's directory needs a name")?
        .to_string_lossy()
        .into_owned();
    let tmp = dir.with_file_name(format!(".{name}.tmp"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).with_context(|| format!("making {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    // 20 characters: IPMI 2.0's limit for a password (ipmitool refuses a longer one).
    let password = uuid::Uuid::new_v4().simple().to_string()[..20].to_owned();
    let nodes: Vec<BridgedNode> = (0..o.nodes)
        .map(|i| {
            let domain = format!("{name}-node-{i}");
            BridgedNode {
                uuid: uuid::Uuid::new_v4().to_string(),
                mac: format!("52:54:00:22:{:02x}:{:02x}", i >> 8, i & 0xff),
                tap: format!("fhnode{i}"),
                vcpus: o.vcpus,
                memory_mib: o.memory_mib,
                disk: dir.join(format!("{domain}.qcow2")),
                console: dir.join(format!("{domain}.console.log")),
                bmc: if i % 2 == 0 {
                    NodeBmc::Redfish
                } else {
                    NodeBmc::Ipmi {
                        port: IPMI_PORT + i / 2,
                    }
                },
                domain,
            }
        })
        .collect();
    let secret = "bmc";
    let mut hosts = vec![format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {secret}\n  namespace: {ns}\ntype: Opaque\n\
         stringData:\n  username: admin\n  password: {password}\n",
        ns = yaml_str(&o.namespace),
    )];
    for n in &nodes {
        write_file(
            &tmp.join(format!("{}.xml", n.domain)),
            &domain_xml(n),
            0o644,
        )?;
        hosts.push(bare_metal_host(n, &o.namespace, secret));
    }
    write_file(&tmp.join("hosts.yaml"), &hosts.join("---\n"), 0o600)?;
    write_file(&tmp.join("bmc-password"), &format!("{password}\n"), 0o600)?;
    write_file(
        &tmp.join("bmc.htpasswd"),
        &htpasswd_line("admin", &password)?,
        0o600,
    )?;
    let config = sushy_config(&Bmc {
        listen: BMC_ADDRESS.into(),
        port: REDFISH_PORT,
        auth_file: dir.join("bmc.htpasswd"),
        nodes: nodes
            .iter()
            .filter(|n| n.bmc == NodeBmc::Redfish)
            .map(|n| n.uuid.clone())
            .collect(),
        pool: "default".into(),
        media_ca: None,
        state_dir: dir.join("bmc-state"),
    });
    write_file(&tmp.join("sushy.conf"), &config, 0o644)?;
    std::fs::create_dir(tmp.join("bmc-state"))?;
    publish_dir(&tmp, &dir)?;
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(bmc: NodeBmc) -> BridgedNode {
        BridgedNode {
            domain: "lab-node-1".into(),
            uuid: "27946b59-9e44-4fa7-8e91-f3527a1ef0a1".into(),
            mac: "52:54:00:22:00:01".into(),
            tap: "fhnode1".into(),
            vcpus: 2,
            memory_mib: 3072,
            disk: "/var/lib/site/lab-node-1.qcow2".into(),
            console: "/var/lib/site/lab-node-1.console.log".into(),
            bmc,
        }
    }

    #[test]
    fn an_ipmi_node_names_its_firmware_and_a_redfish_node_lets_libvirt_choose() {
        let ipmi = domain_xml(&node(NodeBmc::Ipmi { port: 6230 }));
        assert!(ipmi.contains(
            "<loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader>"
        ));
        assert!(ipmi.contains("/var/lib/libvirt/qemu/nvram/lab-node-1_VARS.fd"));
        assert!(!ipmi.contains("firmware='efi'"));
        let redfish = domain_xml(&node(NodeBmc::Redfish));
        assert!(redfish.contains("<os firmware='efi'>"));
        assert!(redfish.contains("<feature enabled='no' name='secure-boot'/>"));
        assert!(!redfish.contains("<loader"));
        for x in [&ipmi, &redfish] {
            assert!(x.contains("<target dev='fhnode1' managed='no'/>"), "{x}");
            assert!(x.contains("<mac address='52:54:00:22:00:01'/>"));
            assert!(x.contains("<source file='/var/lib/site/lab-node-1.qcow2'/>"));
            assert!(x.contains("<topology sockets='1' dies='1' cores='2' threads='1'/>"));
            assert!(x.contains("<source path='/var/lib/site/lab-node-1.console.log' append='on'/>"));
        }
    }

    #[test]
    fn a_host_is_inspected_and_cleaned_through_its_bmc_on_the_network() {
        let y = bare_metal_host(&node(NodeBmc::Ipmi { port: 6231 }), "site", "bmc");
        let host: serde_json::Value = serde_saphyr::from_str(&y).unwrap();
        let spec = &host["spec"];
        assert_eq!(spec["bmc"]["address"], "ipmi://172.22.0.2:6231");
        assert_eq!(spec["bmc"]["credentialsName"], "bmc");
        assert_eq!(spec["bootMACAddress"], "52:54:00:22:00:01");
        assert_eq!(spec["rootDeviceHints"]["deviceName"], "/dev/vda");
        assert_eq!(spec["online"], true);
        // Metal3's defaults: inspected and cleaned.
        assert!(
            spec.get("inspectionMode").is_none() && spec.get("automatedCleaningMode").is_none()
        );
        assert_eq!(
            node(NodeBmc::Redfish).bmc_address(),
            "redfish-virtualmedia+http://172.22.0.2:8000/redfish/v1/Systems/27946b59-9e44-4fa7-8e91-f3527a1ef0a1"
        );
    }

    #[test]
    fn a_site_is_written_whole_into_a_new_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("lab");
        let o = SiteOptions {
            nodes: 3,
            memory_mib: 3072,
            vcpus: 1,
            namespace: "site".into(),
        };
        let nodes = write(&dir, &o).unwrap();
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[1].domain, "lab-node-1");
        assert_eq!(nodes[1].mac, "52:54:00:22:00:01");
        assert_eq!(
            nodes.iter().map(|n| n.bmc).collect::<Vec<_>>(),
            [
                NodeBmc::Redfish,
                NodeBmc::Ipmi { port: 6230 },
                NodeBmc::Redfish
            ]
        );
        let xml = std::fs::read_to_string(dir.join("lab-node-0.xml")).unwrap();
        assert!(xml.contains(&format!("<uuid>{}</uuid>", nodes[0].uuid)));
        assert!(xml.contains(&format!("{}", dir.join("lab-node-0.qcow2").display())));
        let password = std::fs::read_to_string(dir.join("bmc-password")).unwrap();
        assert_eq!(password.trim().len(), 20, "IPMI 2.0's longest password");
        let line = std::fs::read_to_string(dir.join("bmc.htpasswd")).unwrap();
        let hash = line.trim().strip_prefix("admin:").unwrap();
        assert!(bcrypt::verify(password.trim(), hash).unwrap());
        let hosts = std::fs::read_to_string(dir.join("hosts.yaml")).unwrap();
        assert_eq!(hosts.matches("kind: BareMetalHost").count(), 3);
        assert!(hosts.contains(&format!("password: {}", password.trim())));
        // The Redfish BMC exposes the Redfish nodes only, on the network's BMC address.
        let conf = std::fs::read_to_string(dir.join("sushy.conf")).unwrap();
        assert!(
            conf.contains("SUSHY_EMULATOR_LISTEN_IP = '172.22.0.2'\n"),
            "{conf}"
        );
        assert!(conf.contains(&nodes[2].uuid) && !conf.contains(&nodes[1].uuid));
        assert!(dir.join("bmc-state").is_dir());
        // Never over an existing site, and nothing left of the attempt; too little memory is refused.
        let e = write(&dir, &o).unwrap_err();
        assert!(e.to_string().contains("exists"), "{e}");
        let small = SiteOptions {
            memory_mib: 1536,
            ..o
        };
        let e = write(&tmp.path().join("small"), &small).unwrap_err();
        assert!(e.to_string().contains("2048 MiB"), "{e}");
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["lab"]);
    }
}
