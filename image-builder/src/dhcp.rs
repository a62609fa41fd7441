//! The provisioning network's DHCP and PXE/iPXE boot (`network.provisioning.dhcp`), served by Debian's dnsmasq
//! on the appliance: leases from the spec's range, and network boot for both firmware kinds, as Metal3's
//! ironic-image sets it up. A machine's firmware PXE (BIOS, or UEFI's client architectures 7 and 9) gets iPXE
//! over TFTP from Debian's `ipxe` (the UNDI build for BIOS, the SNP-only build for UEFI, which drives the NIC
//! through the firmware's own driver); iPXE then asks again, says so (user class `iPXE`, option 175), and is
//! handed Ironic's boot script over HTTP ([`BOOT_SCRIPT_PORT`]). dnsmasq listens on the provisioning address
//! alone, serves no DNS and hands out no router: the network is for booting and for reaching the appliance.
//! Pure: the configuration rendered from the spec; the unit runs `dnsmasq --test` on it before each start.

use std::net::Ipv4Addr;

use crate::spec::{Dhcp, StaticInterface};

/// Where iPXE fetches its boot script, on the appliance's provisioning address: Ironic's HTTP root, on the
/// port Metal3's ironic-image serves it from.
pub const BOOT_SCRIPT_PORT: u16 = 6180;
/// dnsmasq's configuration on the appliance (read by `foothold-dnsmasq.service`).
pub const CONF: &str = "/etc/foothold/dnsmasq.conf";
/// The leases dnsmasq has handed out, one a line: expiry (seconds since the epoch), MAC, address, host name,
/// client id.
pub const LEASES: &str = "/var/lib/foothold-dnsmasq/leases";
/// Debian's iPXE builds, the TFTP root.
pub const TFTP_ROOT: &str = "/usr/lib/ipxe";
/// The unit, enabled in images whose provisioning network has `dhcp`.
pub const UNIT: &str = "foothold-dnsmasq.service";
/// Debian packages: dnsmasq without its own service and configuration (`dnsmasq-base`), and iPXE.
pub const PACKAGES: &[&str] = &["dnsmasq-base", "ipxe"];

/// The provisioning network's address, prefix length and leased range, checked: IPv4, the range inside the
/// subnet (neither its network nor its broadcast address), first ≤ last, the appliance's address outside it.
/// Errors name the field.
pub fn plan(p: &StaticInterface, d: &Dhcp) -> Result<(Ipv4Addr, u8, Ipv4Addr, Ipv4Addr), String> {
    let field = "network.provisioning.dhcp.range";
    let (ip, len) = p
        .address
        .split_once('/')
        .and_then(|(ip, len)| Some((ip.parse::<Ipv4Addr>().ok()?, len.parse::<u8>().ok()?)))
        .filter(|(_, len)| *len <= 30)
        .ok_or_else(|| {
            format!(
                "network.provisioning.dhcp: needs an IPv4 network.provisioning.address with a prefix of /30 or \
                 shorter, not {:?} (DHCPv6 boot is not served)",
                p.address
            )
        })?;
    let (first, last) = d
        .range
        .split_once('-')
        .and_then(|(a, b)| {
            Some((
                a.trim().parse::<Ipv4Addr>().ok()?,
                b.trim().parse::<Ipv4Addr>().ok()?,
            ))
        })
        .ok_or_else(|| {
            format!(
                "{field}: {:?} is not first-last, two IPv4 addresses",
                d.range
            )
        })?;
    let mask = u32::MAX << (32 - len);
    let net = u32::from(ip) & mask;
    let broadcast = net | !mask;
    for a in [first, last] {
        let n = u32::from(a);
        if n & mask != net || n == net || n == broadcast {
            return Err(format!(
                "{field}: {a} is not a host address of the provisioning network {}/{len}",
                Ipv4Addr::from(net)
            ));
        }
    }
    if first > last {
        return Err(format!("{field}: {first} comes after {last}"));
    }
    if (first..=last).contains(&ip) {
        return Err(format!(
            "{field}: {} includes the appliance's own address {ip}",
            d.range
        ));
    }
    if let Some(t) = &d.lease_time {
        let digits = t.strip_suffix(['m', 'h']).unwrap_or(t);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "network.provisioning.dhcp.leaseTime: {t:?} is not seconds or a number with m or h"
            ));
        }
    }
    Ok((ip, len, first, last))
}

/// Every file, as (absolute path, text, mode): dnsmasq's configuration and its unit. The spec is validated
/// ([`plan`]) before anything is rendered.
pub fn render(p: &StaticInterface, d: &Dhcp) -> Vec<(String, String, u32)> {
    let (ip, len, first, last) = plan(p, d).expect("a validated spec");
    let mask = Ipv4Addr::from(u32::MAX << (32 - len));
    let lease = d.lease_time.as_deref().unwrap_or("1h");
    let conf = format!(
        "# Written by foothold-build: DHCP and PXE/iPXE boot for the compute nodes on the provisioning network\n\
         # (network.provisioning.dhcp). The appliance's address alone; no DNS, no router handed out.\n\
         port=0\nlisten-address={ip}\nbind-dynamic\nuser=dnsmasq\ngroup=nogroup\n\
         # systemd keeps track of the process: no pid file (/run is read-only to the unit).\n\
         pid-file=\n\
         # The one DHCP server of this network: a node's request for the address it had is answered at once.\n\
         dhcp-authoritative\n\
         # A host is its NIC's MAC: the deploy ramdisk and the OS installed after it (each with a machine id,\n\
         # so a DHCP client id, of its own) get one address, the one inspection recorded, where the BPA reaches it.\n\
         dhcp-ignore-clid\n\
         dhcp-range={first},{last},{mask},{lease}\ndhcp-leasefile={LEASES}\n\
         dhcp-option=option:router\ndhcp-option=option:dns-server\n\
         enable-tftp\ntftp-root={TFTP_ROOT}\n\
         # iPXE says it is iPXE; firmware says BIOS (architecture 0) or UEFI (7, 9).\n\
         dhcp-userclass=set:ipxe,iPXE\ndhcp-match=set:ipxe,175\n\
         dhcp-match=set:efi,option:client-arch,7\ndhcp-match=set:efi,option:client-arch,9\n\
         dhcp-boot=tag:ipxe,http://{ip}:{BOOT_SCRIPT_PORT}/boot.ipxe\n\
         dhcp-boot=tag:!ipxe,tag:efi,snponly.efi\n\
         dhcp-boot=tag:!ipxe,tag:!efi,undionly.kpxe\n"
    );
    let unit = format!(
        "[Unit]\nDescription=DHCP and PXE/iPXE boot for the compute nodes on the provisioning network (dnsmasq)\n\
         Wants=network.target\nAfter=network.target systemd-networkd.service\n\n\
         [Service]\n\
         # The configuration is checked before each start: a bad one fails the unit with dnsmasq's reason.\n\
         ExecStartPre=/usr/sbin/dnsmasq --test --conf-file={CONF}\n\
         ExecStart=/usr/sbin/dnsmasq --keep-in-foreground --log-facility=- --conf-file={CONF}\n\
         StateDirectory=foothold-dnsmasq\nRestart=on-failure\nRestartSec=5\n\
         # Root only to bind DHCP's and TFTP's ports; dnsmasq then runs as its user with these capabilities.\n\
         CapabilityBoundingSet=CAP_NET_BIND_SERVICE CAP_NET_RAW CAP_NET_ADMIN CAP_SETUID CAP_SETGID CAP_CHOWN\n\
         ProtectSystem=strict\nReadWritePaths=/var/lib/foothold-dnsmasq\nProtectHome=yes\nPrivateTmp=yes\n\n\
         [Install]\nWantedBy=multi-user.target\n"
    );
    vec![
        (CONF.into(), conf, 0o644),
        (format!("/etc/systemd/system/{UNIT}"), unit, 0o644),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provisioning(address: &str, range: &str) -> (StaticInterface, Dhcp) {
        let d = Dhcp {
            range: range.into(),
            lease_time: None,
        };
        (
            StaticInterface {
                interface: "ens4".into(),
                address: address.into(),
                dhcp: Some(d.clone()),
            },
            d,
        )
    }

    #[test]
    fn dnsmasq_leases_the_range_and_boots_firmware_then_ipxe() {
        let (p, d) = provisioning("172.22.0.1/24", "172.22.0.10-172.22.0.100");
        let files = render(&p, &d);
        let conf = &files.iter().find(|f| f.0 == CONF).unwrap().1;
        let lines: Vec<&str> = conf.lines().filter(|l| !l.starts_with('#')).collect();
        for want in [
            "port=0",
            "pid-file=",
            "listen-address=172.22.0.1",
            "bind-dynamic",
            "dhcp-range=172.22.0.10,172.22.0.100,255.255.255.0,1h",
            "dhcp-leasefile=/var/lib/foothold-dnsmasq/leases",
            "dhcp-ignore-clid",
            "enable-tftp",
            "tftp-root=/usr/lib/ipxe",
            "dhcp-boot=tag:ipxe,http://172.22.0.1:6180/boot.ipxe",
            "dhcp-boot=tag:!ipxe,tag:efi,snponly.efi",
            "dhcp-boot=tag:!ipxe,tag:!efi,undionly.kpxe",
        ] {
            assert!(lines.contains(&want), "{want} in\n{conf}");
        }
        // Nothing listens elsewhere: no interface= (the provisioning address names it), no DNS.
        assert!(!lines.iter().any(|l| l.starts_with("interface=")), "{conf}");
        let unit = &files.iter().find(|f| f.0.ends_with(UNIT)).unwrap().1;
        assert!(unit.contains(&format!(
            "ExecStartPre=/usr/sbin/dnsmasq --test --conf-file={CONF}\n"
        )));
        assert!(unit.contains("StateDirectory=foothold-dnsmasq\n"));
    }

    #[test]
    fn a_range_off_the_network_or_over_the_appliance_is_refused_by_name() {
        for (address, range, want) in [
            (
                "172.22.0.1/24",
                "172.22.1.10-172.22.1.20",
                "172.22.1.10 is not a host address of the provisioning network 172.22.0.0/24",
            ),
            (
                "172.22.0.1/24",
                "172.22.0.0-172.22.0.20",
                "172.22.0.0 is not a host address",
            ),
            (
                "172.22.0.1/24",
                "172.22.0.10-172.22.0.255",
                "172.22.0.255 is not a host address",
            ),
            (
                "172.22.0.1/24",
                "172.22.0.20-172.22.0.10",
                "172.22.0.20 comes after 172.22.0.10",
            ),
            (
                "172.22.0.50/24",
                "172.22.0.10-172.22.0.100",
                "includes the appliance's own address 172.22.0.50",
            ),
            ("172.22.0.1/24", "172.22.0.10", "is not first-last"),
            (
                "fd00:22::1/64",
                "fd00:22::10-fd00:22::20",
                "needs an IPv4 network.provisioning.address",
            ),
        ] {
            let (p, d) = provisioning(address, range);
            let e = plan(&p, &d).unwrap_err();
            assert!(e.contains(want), "{address} {range}: {e}");
            assert!(e.starts_with("network.provisioning.dhcp"), "{e}");
        }
        let (p, mut d) = provisioning("172.22.0.1/24", "172.22.0.10-172.22.0.20");
        d.lease_time = Some("12 hours".into());
        assert!(plan(&p, &d)
            .unwrap_err()
            .starts_with("network.provisioning.dhcp.leaseTime: "));
        d.lease_time = Some("90m".into());
        let files = render(&p, &d);
        assert!(files[0]
            .1
            .contains("\ndhcp-range=172.22.0.10,172.22.0.20,255.255.255.0,90m\n"));
    }
}
