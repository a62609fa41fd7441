//! Rendering a node's VM plan into libvirt XML: one network per Vino network, one domain per VM, the storage
//! pool. Pure functions; `super::apply` decides what to define.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use sha2::{Digest, Sha256};

pub use crate::vino_plan::{DiskPlan, InterfacePlan, NetworkPlan, Plan, VmPlan};

/// The XML namespace of the metadata element that marks a domain as ours.
pub const METADATA_NS: &str = "https://foothold.dev/xmlns/vino/1";

/// How this node's domains are rendered, beyond the plan.
#[derive(Clone, Debug)]
pub struct Host {
    /// `<namespace>/<vino>`: the owner recorded in each domain's metadata and in network names.
    pub owner: String,
    /// libvirt domain type: `kvm`, or `qemu` where there is no KVM.
    pub domain_type: String,
    /// The host's online CPUs.
    pub cpus: BTreeSet<u32>,
    /// The storage pool holding the VMs' disks.
    pub pool: String,
    /// Address VNC servers listen on.
    pub vnc_listen: String,
}

/// A disk volume a domain needs in the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Volume {
    pub name: String,
    pub size_gb: u64,
    /// qcow2 allocated on write, or raw allocated in full.
    pub sparse: bool,
}

/// Parses a libvirt/Linux CPU list (`0-3,8,10-11`).
pub fn parse_cpu_list(s: &str) -> Result<BTreeSet<u32>, String> {
    let mut out = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("{s:?} is not a CPU list like 0-3,8 ({part:?})");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (
                    a.trim().parse().map_err(|_| bad())?,
                    b.trim().parse().map_err(|_| bad())?,
                );
                if a > b || b - a > 65_536 {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(part.parse().map_err(|_| bad())?);
            }
        }
    }
    Ok(out)
}

/// Formats CPUs as a compact list (`0-3,8`).
pub fn format_cpu_list(cpus: &BTreeSet<u32>) -> String {
    let mut out = Vec::new();
    let mut iter = cpus.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

/// The CPUs VMs may run on: the host's, less `cpuExclude`.
pub fn vm_cpus(host: &BTreeSet<u32>, exclude: Option<&str>) -> Result<BTreeSet<u32>, String> {
    let excluded = match exclude {
        Some(e) => parse_cpu_list(e).map_err(|e| format!("cpuExclude: {e}"))?,
        None => BTreeSet::new(),
    };
    let left: BTreeSet<u32> = host.difference(&excluded).copied().collect();
    if left.is_empty() {
        return Err(format!(
            "cpuExclude {} leaves none of the host's CPUs ({}) for VMs",
            exclude.unwrap_or_default(),
            format_cpu_list(host)
        ));
    }
    Ok(left)
}

/// Escapes text for an XML attribute or element.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&apos;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// A UUID derived from `seed` (name-based, version 8 layout): stable for a name, distinct across names.
pub fn derived_uuid(seed: &str) -> String {
    let mut b: [u8; 16] = Sha256::digest(seed.as_bytes())[..16]
        .try_into()
        .expect("16 bytes");
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    uuid::Uuid::from_bytes(b).to_string()
}

/// The libvirt network name of a Vino network: `vino-<namespace>-<vino>-<network>`, so networks of one owner
/// can be found by prefix.
pub fn network_name(owner: &str, network: &str) -> String {
    format!("{}{network}", network_prefix(owner))
}

pub fn network_prefix(owner: &str) -> String {
    format!("vino-{}-", owner.replace('/', "-"))
}

/// The network's XML: the bridge with the node's address and DHCP range (and on IPv4 the BOOTP file, if any, and a
/// fixed lease per VM interface), routed out through `physicalInterface` when one is given or when the plan
/// says routed (Airship's `management` template), isolated otherwise. Its UUID is derived from
/// the content, so a changed definition has a new UUID (libvirt networks carry no metadata to compare).
pub fn network_xml(host: &Host, net: &NetworkPlan, vms: &[VmPlan]) -> Result<String, String> {
    if net.bridge.is_empty() || net.bridge.len() > 15 || net.bridge.contains(['/', ' ']) {
        return Err(format!(
            "network {}: bridge name {:?} must be 1 to 15 characters without / or space",
            net.network, net.bridge
        ));
    }
    let name = network_name(&host.owner, &net.network);
    let mut body = String::new();
    match &net.physical_interface {
        Some(dev) => {
            let _ = writeln!(body, "  <forward mode='route' dev='{}'/>", esc(dev));
        }
        None if net.routed => {
            let _ = writeln!(body, "  <forward mode='route'/>");
        }
        None => {}
    }
    let _ = writeln!(
        body,
        "  <bridge name='{}' stp='on' delay='0'/>",
        esc(&net.bridge)
    );
    if let Some(ip) = &net.ip {
        let addr: std::net::IpAddr = ip.parse().map_err(|_| {
            format!(
                "network {}: bridge address {ip:?} is not an IP",
                net.network
            )
        })?;
        let prefix = net
            .prefix_length
            .ok_or_else(|| format!("network {}: no prefix length", net.network))?;
        let family = if addr.is_ipv6() { " family='ipv6'" } else { "" };
        let _ = writeln!(body, "  <ip{family} address='{addr}' prefix='{prefix}'>");
        if let (Some(start), Some(stop)) = (&net.dhcp_start, &net.dhcp_stop) {
            let _ = writeln!(body, "    <dhcp>");
            let _ = writeln!(
                body,
                "      <range start='{}' end='{}'/>",
                esc(start),
                esc(stop)
            );
            if let Some(file) = net.bootp_file.as_deref().filter(|_| addr.is_ipv4()) {
                let _ = writeln!(body, "      <bootp file='{}'/>", esc(file));
            }
            if addr.is_ipv4() {
                for vm in vms {
                    for i in vm.interfaces.iter().filter(|i| i.network == net.network) {
                        if let Some(ip) = i.ip.as_deref().filter(|ip| !ip.contains(':')) {
                            let _ = writeln!(
                                body,
                                "      <host mac='{}' name='{}' ip='{}'/>",
                                esc(&i.mac),
                                esc(&vm.name),
                                esc(ip)
                            );
                        }
                    }
                }
            }
            let _ = writeln!(body, "    </dhcp>");
        }
        let _ = writeln!(body, "  </ip>");
    }
    let uuid = derived_uuid(&format!("network\n{name}\n{body}"));
    Ok(format!(
        "<network>\n  <name>{}</name>\n  <uuid>{uuid}</uuid>\n{body}</network>\n",
        esc(&name)
    ))
}

/// The volumes `vm` needs in the pool: `<vm>-root` (qcow2, rootDiskGb) and one per disk drive without a path.
pub fn volumes(vm: &VmPlan) -> Result<Vec<Volume>, String> {
    let mut out = vec![Volume {
        name: format!("{}-root", vm.name),
        size_gb: vm.root_disk_gb,
        sparse: true,
    }];
    for d in vm.disk_drives.iter().filter(|d| d.path.is_none()) {
        let o = d.options.clone().unwrap_or_default();
        let size_gb = o.size_gb.filter(|s| *s > 0).ok_or_else(|| {
            format!(
                "VM {}: disk drive {} needs options.sizeGb (or a path)",
                vm.name, d.name
            )
        })?;
        out.push(Volume {
            name: format!("{}-{}", vm.name, d.name),
            size_gb,
            sparse: o.sparse,
        });
    }
    Ok(out)
}

fn disk_target(i: usize) -> String {
    // vda..vdz, then vdaa..
    let mut n = i;
    let mut s = String::new();
    loop {
        s.insert(0, (b'a' + (n % 26) as u8) as char);
        if n < 26 {
            break;
        }
        n = n / 26 - 1;
    }
    format!("vd{s}")
}

/// The domain's XML, and the hash recorded in its metadata (of everything else in it): `apply` redefines a
/// domain only when the hash differs. `vnc_password` is the VM's own (never the BMC's).
pub fn domain_xml(
    host: &Host,
    vm_cpus: &BTreeSet<u32>,
    vm: &VmPlan,
    vnc_password: Option<&str>,
) -> Result<(String, String), String> {
    if vm.vcpus == 0 || vm.memory_mib == 0 || vm.root_disk_gb == 0 {
        return Err(format!(
            "VM {}: vcpus, memoryMiB and rootDiskGb must be positive",
            vm.name
        ));
    }
    let mut devices = String::new();
    let vols = volumes(vm)?;
    let mut target = 0;
    for (v, sparse) in vols.iter().map(|v| (v, v.sparse)) {
        let format = if sparse { "qcow2" } else { "raw" };
        let _ = write!(
            devices,
            "    <disk type='volume' device='disk'>\n      <driver name='qemu' type='{format}' cache='none' discard='unmap'/>\n      <source pool='{}' volume='{}'/>\n      <target dev='{}' bus='virtio'/>\n    </disk>\n",
            esc(&host.pool),
            esc(&v.name),
            disk_target(target)
        );
        target += 1;
    }
    for d in &vm.disk_drives {
        if let Some(path) = &d.path {
            let _ = write!(
                devices,
                "    <disk type='file' device='disk'>\n      <driver name='qemu' type='raw' cache='none'/>\n      <source file='{}'/>\n      <target dev='{}' bus='virtio'/>\n    </disk>\n",
                esc(path),
                disk_target(target)
            );
            target += 1;
        }
    }
    // An empty CD-ROM drive: sushy-tools inserts Redfish virtual media there.
    devices.push_str(
        "    <disk type='file' device='cdrom'>\n      <driver name='qemu' type='raw'/>\n      <target dev='sda' bus='sata'/>\n      <readonly/>\n    </disk>\n",
    );
    for i in &vm.interfaces {
        let bridge = i
            .bridge
            .clone()
            .unwrap_or_else(|| format!("vino-{}", i.network));
        let (kind, source) = if i.kind.as_deref() == Some("bridge") {
            ("bridge", format!("<source bridge='{}'/>", esc(&bridge)))
        } else {
            (
                "network",
                format!(
                    "<source network='{}'/>",
                    esc(&network_name(&host.owner, &i.network))
                ),
            )
        };
        let _ = write!(
            devices,
            "    <interface type='{kind}'>\n      <mac address='{}'/>\n      {source}\n      <model type='virtio'/>\n",
            esc(&i.mac)
        );
        if let Some(mtu) = i.mtu {
            let _ = writeln!(devices, "      <mtu size='{mtu}'/>");
        }
        devices.push_str("    </interface>\n");
    }
    devices.push_str(
        "    <serial type='pty'>\n      <target port='0'/>\n    </serial>\n    <console type='pty'>\n      <target type='serial' port='0'/>\n    </console>\n",
    );
    if vm.enable_vnc {
        let pw = vnc_password
            .filter(|p| !p.is_empty())
            .ok_or_else(|| format!("VM {}: enableVNC but no VNC password", vm.name))?;
        let _ = write!(
            devices,
            "    <graphics type='vnc' autoport='yes' listen='{}' passwd='{}'/>\n    <video>\n      <model type='vga'/>\n    </video>\n",
            esc(&host.vnc_listen),
            esc(pw)
        );
    }
    devices.push_str("    <memballoon model='virtio'/>\n    <rng model='virtio'>\n      <backend model='random'>/dev/urandom</backend>\n    </rng>\n");
    let backing = if vm.hugepages {
        "  <memoryBacking>\n    <hugepages/>\n  </memoryBacking>\n"
    } else {
        ""
    };
    let body = format!(
        "  <memory unit='MiB'>{mem}</memory>\n{backing}  <vcpu placement='static' cpuset='{cpus}'>{vcpus}</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n    <boot dev='network'/>\n    <boot dev='hd'/>\n  </os>\n  <features>\n    <acpi/>\n    <apic/>\n  </features>\n  <on_poweroff>destroy</on_poweroff>\n  <on_reboot>restart</on_reboot>\n  <on_crash>destroy</on_crash>\n  <devices>\n{devices}  </devices>\n",
        mem = vm.memory_mib,
        cpus = format_cpu_list(vm_cpus),
        vcpus = vm.vcpus,
    );
    let uuid = derived_uuid(&format!("domain\n{}\n{}", host.owner, vm.name));
    let head = format!(
        "<domain type='{}'>\n  <name>{}</name>\n  <uuid>{uuid}</uuid>\n  <title>{}</title>\n",
        esc(&host.domain_type),
        esc(&vm.name),
        esc(&vm.bare_metal_host)
    );
    let hash = hex::encode(Sha256::digest(format!("{head}{body}").as_bytes()));
    let metadata = format!(
        "  <metadata>\n    <foothold:vino xmlns:foothold='{METADATA_NS}' owner='{}' bareMetalHost='{}' hash='{hash}'/>\n  </metadata>\n",
        esc(&host.owner),
        esc(&vm.bare_metal_host)
    );
    Ok((format!("{head}{metadata}{body}</domain>\n"), hash))
}

/// The storage pool's XML: a directory.
pub fn pool_xml(name: &str, dir: &str) -> String {
    format!(
        "<pool type='dir'>\n  <name>{}</name>\n  <target>\n    <path>{}</path>\n  </target>\n</pool>\n",
        esc(name),
        esc(dir)
    )
}

/// The owner and hash from a domain's dumped XML, when it is one of ours.
pub fn domain_marker(xml: &str) -> Option<(String, String)> {
    let at = xml.find(METADATA_NS)?;
    let start = xml[..at].rfind('<')?;
    let end = start + xml[start..].find('>')?;
    let element = &xml[start..end];
    let attr = |name: &str| -> Option<String> {
        let i = element.find(&format!(" {name}="))? + name.len() + 2;
        let quote = element[i..].chars().next()?;
        let rest = &element[i + 1..];
        let value = &rest[..rest.find(quote)?];
        Some(
            value
                .replace("&apos;", "'")
                .replace("&quot;", "\"")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&"),
        )
    };
    Some((attr("owner")?, attr("hash")?))
}

/// Every rendered object of a plan: networks by libvirt name, domains by VM name with their hashes.
pub struct Rendered {
    pub networks: BTreeMap<String, String>,
    pub domains: BTreeMap<String, (String, String)>,
    pub volumes: Vec<Volume>,
}

/// Renders the whole plan; the first problem is the error.
pub fn render(
    host: &Host,
    plan: &Plan,
    vnc: &BTreeMap<String, String>,
) -> Result<Rendered, String> {
    let cpus = vm_cpus(&host.cpus, plan.cpu_exclude.as_deref())?;
    let mut networks = BTreeMap::new();
    for net in &plan.networks {
        networks.insert(
            network_name(&host.owner, &net.network),
            network_xml(host, net, &plan.vms)?,
        );
    }
    let mut domains = BTreeMap::new();
    let mut vols = Vec::new();
    for vm in &plan.vms {
        for i in &vm.interfaces {
            if i.kind.as_deref() != Some("bridge")
                && !plan.networks.iter().any(|n| n.network == i.network)
            {
                return Err(format!(
                    "VM {}: interface {} is on network {}, which the plan lacks",
                    vm.name, i.name, i.network
                ));
            }
        }
        if vm.vcpus as usize > cpus.len() {
            return Err(format!(
                "VM {}: {} vCPUs but only {} host CPUs ({}) are left after cpuExclude",
                vm.name,
                vm.vcpus,
                cpus.len(),
                format_cpu_list(&cpus)
            ));
        }
        domains.insert(
            vm.name.clone(),
            domain_xml(host, &cpus, vm, vnc.get(&vm.name).map(String::as_str))?,
        );
        vols.extend(volumes(vm)?);
    }
    Ok(Rendered {
        networks,
        domains,
        volumes: vols,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8, 10-11").unwrap(),
            [0, 1, 2, 3, 8, 10, 11].into()
        );
        assert_eq!(parse_cpu_list("").unwrap(), BTreeSet::new());
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert_eq!(format_cpu_list(&[0, 1, 2, 5, 7, 8].into()), "0-2,5,7-8");
        let host: BTreeSet<u32> = (0..8).collect();
        assert_eq!(
            format_cpu_list(&vm_cpus(&host, Some("0-1,4")).unwrap()),
            "2-3,5-7"
        );
        let err = vm_cpus(&host, Some("0-7")).unwrap_err();
        assert!(err.contains("leaves none"), "{err}");
    }

    proptest! {
        #[test]
        fn cpu_list_round_trips(cpus in proptest::collection::btree_set(0u32..512, 0..64)) {
            prop_assert_eq!(parse_cpu_list(&format_cpu_list(&cpus)).unwrap(), cpus);
        }

        #[test]
        fn derived_uuids_are_stable_and_distinct(a in "[a-z0-9-]{1,20}", b in "[a-z0-9-]{1,20}") {
            prop_assert_eq!(derived_uuid(&a), derived_uuid(&a));
            prop_assert_eq!(derived_uuid(&a) == derived_uuid(&b), a == b);
            prop_assert!(uuid::Uuid::parse_str(&derived_uuid(&a)).is_ok());
        }
    }

    #[test]
    fn disk_targets() {
        assert_eq!(disk_target(0), "vda");
        assert_eq!(disk_target(25), "vdz");
        assert_eq!(disk_target(26), "vdaa");
    }

    #[test]
    fn marker_round_trip_and_escape() {
        assert_eq!(esc("a<'&\">"), "a&lt;&apos;&amp;&quot;&gt;");
        let xml = "<domain>\n  <metadata>\n    <foothold:vino xmlns:foothold=\"https://foothold.dev/xmlns/vino/1\" owner=\"ns/v&amp;\" bareMetalHost=\"b\" hash=\"abc\"/>\n  </metadata>\n</domain>";
        assert_eq!(domain_marker(xml), Some(("ns/v&".into(), "abc".into())));
        assert_eq!(domain_marker("<domain><name>x</name></domain>"), None);
    }
}
