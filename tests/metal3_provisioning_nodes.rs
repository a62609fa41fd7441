//! The compute nodes of `metal3_provisioning.rs`: their BMCs, their libvirt domains, and what their disks hold.

use std::path::{Path, PathBuf};
use std::process::Command;

use foothold_e2e::run;
use foothold_image_builder::virtual_site::{self, BridgedNode, NodeBmc};

/// The BMCs' address on the provisioning network: virtualbmc's IPMI port and sushy-tools' Redfish one, as on
/// the virtual site.
pub(super) use foothold_image_builder::virtual_site::{
    BMC_ADDRESS as BMC, IPMI_PORT, REDFISH_PORT,
};
pub(super) const MEMORY_MIB: u64 = 3072;
pub(super) const DISK_GIB: u64 = 10;

#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Bmc {
    /// virtualbmc: Ironic's `ipmi` hardware type, the ramdisk booted by PXE and iPXE.
    Ipmi,
    /// sushy-tools: `redfish`, the ramdisk booted from the ISO Ironic makes, by virtual media.
    Redfish,
}

/// A compute node: its BareMetalHost's name, its domain and what Ironic finds in it.
pub(super) struct Node {
    pub(super) name: &'static str,
    pub(super) bmc: Bmc,
    pub(super) mac: &'static str,
    pub(super) tap: &'static str,
    pub(super) vcpus: u64,
    pub(super) uuid: String,
    pub(super) domain: String,
    pub(super) disk: PathBuf,
    pub(super) console: PathBuf,
}

impl Node {
    pub(super) fn new(name: &'static str, bmc: Bmc, index: u8, vcpus: u64, vm_dir: &Path) -> Node {
        let pid = std::process::id();
        Node {
            name,
            bmc,
            mac: ["52:54:00:22:10:01", "52:54:00:22:10:02"][index as usize],
            tap: ["m3tap0", "m3tap1"][index as usize],
            vcpus,
            uuid: format!("5e7e0003-0000-4000-8000-{pid:08x}{index:04x}"),
            domain: format!("{name}-{pid}"),
            disk: vm_dir.join(format!("{name}.qcow2")),
            console: vm_dir.join(format!("{name}.console.log")),
        }
    }

    /// The BMC's address, as a BareMetalHost names it.
    pub(super) fn bmc_address(&self) -> String {
        self.bridged().bmc_address()
    }

    /// The node as the virtual site has its nodes.
    fn bridged(&self) -> BridgedNode {
        BridgedNode {
            domain: self.domain.clone(),
            uuid: self.uuid.clone(),
            mac: self.mac.into(),
            tap: self.tap.into(),
            vcpus: u32::try_from(self.vcpus).expect("a node's vCPUs"),
            memory_mib: u32::try_from(MEMORY_MIB).expect("a node's memory"),
            disk: self.disk.clone(),
            console: self.console.clone(),
            bmc: match self.bmc {
                Bmc::Ipmi => NodeBmc::Ipmi { port: IPMI_PORT },
                Bmc::Redfish => NodeBmc::Redfish,
            },
        }
    }
}

/// Where the node image is served: another machine of the provisioning network (the appliance's firewall lets
/// the nodes reach only its own services).
pub(super) const IMAGES: &str = "172.22.0.3";
pub(super) const IMAGES_PORT: u16 = 8080;

/// The node's domain, as the virtual site's (`virtual_site::domain_xml`: UEFI, TCG, its disk, its NIC on the
/// namespace's tap, its console appended to a file across boots).
pub(super) fn domain_xml(node: &Node) -> String {
    virtual_site::domain_xml(&node.bridged())
}

/// The worker's first image, in the images directory `images`: a 1 MiB qcow2 with a checksum file that is
/// wrong; its URL and the wrong sum. The ramdisk downloads an image (three times) before it finds the sum
/// wrong, so a small one fails the same way without the node image's downloads and hashing under TCG beside
/// the master's install (the CPU both nodes share).
pub(super) fn wrongly_summed_image(images: &Path) -> (String, String) {
    run(Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2"])
        .arg(images.join("small.qcow2"))
        .arg("1M"));
    let wrong = "0".repeat(64);
    std::fs::write(
        images.join("small.qcow2.sha256sum"),
        format!("{wrong}  small.qcow2\n"),
    )
    .unwrap();
    (format!("http://{IMAGES}:{IMAGES_PORT}/small.qcow2"), wrong)
}

/// The first MiB of the node's disk (read while the VM runs: a shared read).
pub(super) fn disk_head(disk: &Path, dir: &Path) -> Vec<u8> {
    let out = dir.join("disk-head.raw");
    let _ = std::fs::remove_file(&out);
    run(Command::new("qemu-img")
        .args(["dd", "-U", "-f", "qcow2", "-O", "raw", "bs=1M", "count=1"])
        .arg(format!("if={}", disk.display()))
        .arg(format!("of={}", out.display())));
    std::fs::read(&out).unwrap()
}

/// Whether a disk's first MiB holds a partition table: the protective MBR's signature, or GPT's header.
pub(super) fn has_partition_table(head: &[u8]) -> bool {
    head[510..512] == [0x55, 0xaa] || &head[512..520] == b"EFI PART"
}

/// The Redfish node's deploy ramdisk ISO was inserted once before its deploy began, by Ironic's log (`log`): the
/// ISO stayed inserted after inspection, so cleaning, which BMO starts once the image is set, used the running
/// ramdisk. The IPMI node boots by iPXE, so every insertion is the Redfish node's; the count stops at its deploy's
/// start (a failed deploy's clean-up boots the ramdisk again, with an error on the node).
pub(super) fn one_ramdisk_boot_before_deploy(log: &Path, name: &str) {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    let (node, inserted) = insertions_before_deploy(&log)
        .unwrap_or_else(|| panic!("{name}: no virtual media inserted in Ironic's log"));
    assert_eq!(
        inserted, 1,
        "{name}: the deploy ramdisk's ISO inserted {inserted} times before its deploy began, not once (Ironic node {node})"
    );
}

/// The Ironic node of the first virtual-media insertion in `log`, and the insertions before that node's deploy.
fn insertions_before_deploy(log: &str) -> Option<(String, usize)> {
    let inserted = |l: &&str| l.contains("Inserted boot media");
    let node = log
        .lines()
        .find(inserted)?
        .split("/redfish/boot-")
        .nth(1)?
        .get(..36)?
        .to_owned();
    let deploying =
        |l: &&str| l.contains(&node) && l.contains("moved to provision state \"deploying\"");
    let count = log
        .lines()
        .take_while(|l| !deploying(l))
        .filter(inserted)
        .count();
    Some((node, count))
}

#[test]
fn insertions_are_counted_up_to_the_deploy() {
    let insert = |n: &str| {
        format!("INFO redfish.boot Inserted boot media http://a:6180/redfish/boot-{n}.iso into CD for node {n}\n")
    };
    let moved = |n: &str, s: &str| {
        format!("INFO Node {n} moved to provision state \"{s}\" from state \"x\"\n")
    };
    let a = "552e49e1-1c12-4816-80f5-e9b051161a3f";
    let b = "c0363a1a-d190-4c35-9d51-1d2c1a7e7d10";
    let once = [
        insert(a),
        moved(b, "deploying"),
        moved(a, "cleaning"),
        moved(a, "deploying"),
        insert(a),
    ]
    .concat();
    assert_eq!(insertions_before_deploy(&once), Some((a.to_owned(), 1)));
    let twice = [
        insert(a),
        moved(a, "cleaning"),
        insert(a),
        moved(a, "deploying"),
    ]
    .concat();
    assert_eq!(insertions_before_deploy(&twice), Some((a.to_owned(), 2)));
    assert_eq!(insertions_before_deploy(&moved(a, "deploying")), None);
}
