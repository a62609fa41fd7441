//! The appliance's firewall on the provisioning network (nftables, `foothold-firewall.service`, loaded before
//! any network is up): compute nodes and BMCs reach only what they need of the appliance — DHCP and TFTP when
//! it serves the network's boot, Ironic's HTTP root (iPXE scripts, kernels, virtual media) and API (the deploy
//! ramdisk) when Ironic is on that network, the agent — and nothing else: not the API server, the kubelet, etcd
//! or SSH. Nothing is routed between the provisioning network and any other, but for the cluster's pods (the
//! BPA's installer Jobs log in to the nodes) and the answers to what they open. Every other network is left as
//! it was. Pure: the ruleset rendered from the spec.

use crate::spec::{Spec, StaticInterface};

/// The ruleset, read by `nft -f`.
pub const CONF: &str = "/etc/foothold/firewall.nft";
/// The unit, enabled in appliances with a provisioning network.
pub const UNIT: &str = "foothold-firewall.service";
pub const PACKAGES: &[&str] = &["nftables"];
/// The provisioning interface's name when the spec gives its MAC: a `.link` file names it so, since
/// nftables matches interfaces by name.
pub const NAMED: &str = "provisioning";

/// A port the provisioning network reaches, and who needs it.
#[derive(Debug, PartialEq, Eq)]
pub struct Opening {
    pub protocol: &'static str,
    pub port: u16,
    pub why: &'static str,
}

/// Whether `interface` is a MAC address (six pairs of hex digits separated by colons) rather than a name.
pub fn is_mac(interface: &str) -> bool {
    let pairs: Vec<&str> = interface.split(':').collect();
    pairs.len() == 6
        && pairs
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The name the provisioning interface has on the appliance.
pub fn interface_name(p: &StaticInterface) -> &str {
    if is_mac(&p.interface) {
        NAMED
    } else {
        &p.interface
    }
}

/// What the provisioning network may reach on an appliance built from `spec`.
pub fn openings(spec: &Spec) -> Vec<Opening> {
    let mut open = Vec::new();
    let serves_boot = crate::build::configure::provisioning_dhcp(spec).is_some();
    if serves_boot {
        open.push(Opening {
            protocol: "udp",
            port: 67,
            why: "DHCP: the nodes' leases (dnsmasq)",
        });
        open.push(Opening {
            protocol: "udp",
            port: 69,
            why: "TFTP: iPXE for the nodes' firmware (dnsmasq)",
        });
    }
    if spec.components.metal3.is_some() && serves_boot {
        open.push(Opening {
            protocol: "tcp",
            port: crate::dhcp::BOOT_SCRIPT_PORT,
            why: "Ironic's HTTP root: iPXE scripts, kernels, the BMCs' virtual media",
        });
        open.push(Opening {
            protocol: "tcp",
            port: crate::metal3::IRONIC_PORT,
            why: "Ironic's API: the deploy ramdisk's heartbeats and inspection data",
        });
    }
    if spec.components.agent.is_some() {
        open.push(Opening {
            protocol: "tcp",
            port: 5000,
            why: "the agent: images, files, packages, the nodes' ready reports",
        });
    }
    open
}

/// The ruleset and the files that name the interface, for an appliance with a provisioning network.
pub fn render(spec: &Spec) -> Vec<(String, String, u32)> {
    let Some(p) = &spec.network.provisioning else {
        return Vec::new();
    };
    let iface = interface_name(p);
    let mut rules = String::new();
    for o in openings(spec) {
        rules.push_str(&format!(
            "\t\t{} dport {} accept comment \"{}\"\n",
            o.protocol, o.port, o.why
        ));
    }
    let pods = spec
        .components
        .kubernetes
        .as_ref()
        .map(|k| {
            format!(
                "\t\toifname \"{iface}\" ip saddr {} accept comment \"the cluster's pods: the BPA's installer Jobs log in to the nodes\"\n",
                k.pod_subnet
            )
        })
        .unwrap_or_default();
    let text = format!(
        "#!/usr/sbin/nft -f\n\
         # Written by foothold-build: the provisioning network ({iface}, {address}) reaches only what compute nodes and\n\
         # BMCs need; nothing is routed between it and another network. Loaded by {UNIT}.\n\
         table inet foothold\n\
         delete table inet foothold\n\
         table inet foothold {{\n\
         \tchain input {{\n\
         \t\ttype filter hook input priority filter; policy accept;\n\
         \t\tiifname \"{iface}\" jump provisioning\n\
         \t}}\n\
         \tchain provisioning {{\n\
         \t\tct state established,related accept\n\
         \t\tct state invalid drop\n\
         \t\ticmp type echo-request accept\n\
         \t\ticmpv6 type {{ nd-neighbor-solicit, nd-neighbor-advert, echo-request }} accept\n\
         {rules}\
         \t\tcounter drop comment \"everything else: the API server, the kubelet, etcd, SSH\"\n\
         \t}}\n\
         \tchain forward {{\n\
         \t\ttype filter hook forward priority filter; policy accept;\n\
         \t\tct state established,related accept\n\
         \t\tiifname \"{iface}\" oifname \"{iface}\" accept comment \"within the network\"\n\
         {pods}\
         \t\tiifname \"{iface}\" counter drop comment \"nothing from the provisioning network is routed\"\n\
         \t\toifname \"{iface}\" counter drop comment \"nor into it\"\n\
         \t}}\n\
         }}\n",
        address = p.address,
    );
    let mut files = vec![(CONF.to_string(), text, 0o644)];
    if is_mac(&p.interface) {
        files.push((
            "/etc/systemd/network/10-provisioning.link".to_string(),
            format!(
                "# Written by foothold-build: the provisioning interface gets a name the firewall ({CONF}) matches.\n\
                 [Match]\nMACAddress={}\n\n[Link]\nName={NAMED}\n",
                p.interface
            ),
            0o644,
        ));
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> Spec {
        let yaml = format!(
            "name: t\nbase:\n  suite: trixie\nhostname: t\noutputs:\n  formats: [raw]\n  diskSize: 4GiB\n{yaml}"
        );
        crate::spec::load_text(
            std::path::Path::new("t.yaml"),
            &yaml,
            crate::spec::Pins::Required,
        )
        .unwrap()
        .spec
    }

    #[test]
    fn the_provisioning_network_reaches_only_what_its_machines_need() {
        let s = spec(
            "network:\n  provisioning:\n    interface: ens4\n    address: 172.22.0.1/24\n    dhcp: {range: 172.22.0.10-172.22.0.100}\n\
             components:\n  agent: {path: /bin/true}\n",
        );
        let ports: Vec<(&str, u16)> = openings(&s).iter().map(|o| (o.protocol, o.port)).collect();
        assert_eq!(ports, [("udp", 67), ("udp", 69), ("tcp", 5000)]);
        let files = render(&s);
        assert_eq!(files.len(), 1, "a named interface needs no .link file");
        let text = &files[0].1;
        assert!(
            text.contains("\t\tiifname \"ens4\" jump provisioning\n"),
            "{text}"
        );
        for port in ["6443", "10250", "22 ", "2379"] {
            assert!(
                !text.contains(&format!("dport {port}")),
                "{port} is open:\n{text}"
            );
        }
        assert!(text.contains("\t\tiifname \"ens4\" counter drop"), "{text}");
        assert!(
            !text.contains("ip saddr"),
            "no cluster, no pods' rule:\n{text}"
        );
        // Without DHCP the network's boot is not served: only the agent.
        let s = spec(
            "network:\n  provisioning:\n    interface: 52:54:00:12:34:56\n    address: 172.22.0.1/24\n\
             components:\n  agent: {path: /bin/true}\n",
        );
        assert_eq!(
            openings(&s),
            [Opening {
                protocol: "tcp",
                port: 5000,
                why: openings(&s)[0].why
            }]
        );
        let files = render(&s);
        assert!(files[0]
            .1
            .contains("iifname \"provisioning\" jump provisioning"));
        assert_eq!(files[1].0, "/etc/systemd/network/10-provisioning.link");
        assert!(files[1]
            .1
            .contains("MACAddress=52:54:00:12:34:56\n\n[Link]\nName=provisioning\n"));
        // No provisioning network: no firewall.
        assert!(render(&spec("components:\n  agent: {path: /bin/true}\n")).is_empty());
    }
}
