//! ViNO's IP address management, pure: given a network's ranges, what its `IPPool` records and what is wanted
//! now, the new allocations. The reconciler writes the result back with the pool's resourceVersion as a
//! precondition, so two writers never hand out one address.
//!
//! - Static addresses (a VM interface `<bmh>/<network>`, a node bridge `node/<node>`) come from
//!   `staticAllocationStart..=staticAllocationStop`, lowest free first; VM interfaces also get a MAC.
//! - A node's DHCP sub-range is the lowest free aligned block of 2^instanceSubnetBitStep addresses in
//!   `dhcpAllocationStart..=dhcpAllocationStop`.
//! - MACs are `macPrefix` followed by bytes from a hash of the key, probing onward on collision: the same key
//!   gets the same MAC on an empty pool, and once allocated a MAC never changes.
//! - Allocations whose key is still wanted keep their address and MAC; the others are released.
//!
//! IPv4 and IPv6 alike: addresses are handled as 128-bit numbers.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::crd::vino::{AllocatedIp, AllocatedRange};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Addr {
    v6: bool,
    n: u128,
}

impl Addr {
    fn parse(s: &str, what: &str) -> Result<Addr, String> {
        match s.trim().parse::<IpAddr>() {
            Ok(IpAddr::V4(a)) => Ok(Addr {
                v6: false,
                n: u128::from(u32::from(a)),
            }),
            Ok(IpAddr::V6(a)) => Ok(Addr {
                v6: true,
                n: u128::from(a),
            }),
            Err(_) => Err(format!("{what} {s:?} is not an IP address")),
        }
    }

    fn ip(self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(self.n))
        } else {
            IpAddr::V4(Ipv4Addr::from(u32::try_from(self.n).unwrap_or(u32::MAX)))
        }
    }
}

/// A network's address plan, validated.
#[derive(Clone, Debug)]
pub struct Ranges {
    v6: bool,
    static_range: Option<(u128, u128)>,
    dhcp_range: Option<(u128, u128)>,
    block: u128,
    mac_prefix: Vec<u8>,
}

/// What one network's pool should hold.
#[derive(Clone, Debug, Default)]
pub struct Wanted {
    /// VM interfaces (`<bmh>/<network>`): a static address and a MAC each.
    pub interfaces: BTreeSet<String>,
    /// Nodes: a bridge address (`node/<node>`) and a DHCP sub-range each.
    pub nodes: BTreeSet<String>,
}

/// The pool's new content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allocation {
    pub ips: Vec<AllocatedIp>,
    pub ranges: Vec<AllocatedRange>,
    /// Keys whose allocations were released.
    pub released: Vec<String>,
}

fn parse_cidr(cidr: &str) -> Result<(Addr, u32), String> {
    let (addr, len) = cidr
        .split_once('/')
        .ok_or_else(|| format!("subnet {cidr:?} is not a CIDR (address/prefix)"))?;
    let addr = Addr::parse(addr, "subnet")?;
    let bits = if addr.v6 { 128 } else { 32 };
    let len: u32 = len
        .parse()
        .ok()
        .filter(|l| *l <= bits)
        .ok_or_else(|| format!("subnet {cidr:?} has an invalid prefix length"))?;
    Ok((addr, bits - len))
}

/// The bytes every MAC of a network starts with. 1 to 5 bytes as they are; 6 bytes are Airship's zero-padded
/// form (`52:54:00:06:00:00`): its trailing zero bytes, at most three (the OUI stays), are the ones allocated.
fn parse_mac_prefix(p: Option<&str>) -> Result<Vec<u8>, String> {
    let p = p.unwrap_or("52:54:00").trim_end_matches(':');
    let bytes: Result<Vec<u8>, _> = p.split(':').map(|b| u8::from_str_radix(b, 16)).collect();
    let mut b = match bytes {
        Ok(b) if !b.is_empty() && b.len() <= 6 && p.split(':').all(|s| s.len() == 2) => b,
        _ => {
            return Err(format!(
                "macPrefix {p:?} is not 1 to 5 hex bytes, or 6 zero-padded ones, separated by ':'"
            ))
        }
    };
    if b.len() == 6 {
        while b.len() > 3 && b.last() == Some(&0) {
            b.pop();
        }
        if b.len() == 6 {
            return Err(format!(
                "macPrefix {p:?} leaves no byte to allocate: end it in zero bytes (52:54:00:06:00:00) or give 1 to 5 bytes"
            ));
        }
    }
    if b[0] & 1 == 1 {
        return Err(format!("macPrefix {p:?} is a multicast prefix"));
    }
    Ok(b)
}

impl Ranges {
    /// Validates a network: the ranges lie in the subnet and agree with its family.
    pub fn new(
        subnet: &str,
        static_range: Option<(&str, &str)>,
        dhcp_range: Option<(&str, &str)>,
        bit_step: Option<i32>,
        mac_prefix: Option<&str>,
    ) -> Result<Ranges, String> {
        let (base, host_bits) = parse_cidr(subnet)?;
        let mask = if host_bits >= 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        let network = base.n & !mask;
        let range = |r: Option<(&str, &str)>, what: &str| -> Result<Option<(u128, u128)>, String> {
            let Some((a, b)) = r else { return Ok(None) };
            let (a, b) = (Addr::parse(a, what)?, Addr::parse(b, what)?);
            if a.v6 != base.v6 || b.v6 != base.v6 {
                return Err(format!("{what} mixes IPv4 and IPv6 with subnet {subnet}"));
            }
            if a.n > b.n || a.n & !mask != network || b.n & !mask != network {
                return Err(format!(
                    "{what} {}..{} is not an ascending range inside {subnet}",
                    a.ip(),
                    b.ip()
                ));
            }
            Ok(Some((a.n, b.n)))
        };
        let step = bit_step.unwrap_or(if base.v6 { 8 } else { 4 });
        let step = u32::try_from(step)
            .ok()
            .filter(|s| *s < 64 && *s <= host_bits)
            .ok_or_else(|| format!("instanceSubnetBitStep {step} does not fit {subnet}"))?;
        let ranges = Ranges {
            v6: base.v6,
            static_range: range(static_range, "static allocation range")?,
            dhcp_range: range(dhcp_range, "DHCP allocation range")?,
            block: 1u128 << step,
            mac_prefix: parse_mac_prefix(mac_prefix)?,
        };
        if let (Some(s), Some(d)) = (ranges.static_range, ranges.dhcp_range) {
            if s.0 <= d.1 && d.0 <= s.1 {
                return Err("the static and DHCP allocation ranges overlap".into());
            }
        }
        Ok(ranges)
    }

    fn show(&self, n: u128) -> String {
        Addr { v6: self.v6, n }.ip().to_string()
    }

    fn mac(&self, key: &str, used: &BTreeSet<u64>) -> Option<String> {
        use sha2::Digest as _;
        let free_bytes = 6 - self.mac_prefix.len();
        let space: u64 = 1 << (8 * free_bytes);
        let digest = sha2::Sha256::digest(key.as_bytes());
        let start = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes")) % space;
        let prefix = self
            .mac_prefix
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
            << (8 * free_bytes);
        // Probe onward from the hash; the all-zero and all-one suffixes are skipped.
        for i in 0..space {
            let suffix = (start + i) % space;
            if suffix == 0 || suffix == space - 1 {
                continue;
            }
            let mac = prefix | suffix;
            if !used.contains(&mac) {
                return Some(format_mac(mac));
            }
        }
        None
    }
}

fn format_mac(m: u64) -> String {
    (0..6)
        .rev()
        .map(|i| format!("{:02x}", (m >> (8 * i)) & 0xff))
        .collect::<Vec<_>>()
        .join(":")
}

fn parse_mac(s: &str) -> Option<u64> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return None;
    }
    parts.iter().try_fold(0u64, |acc, p| {
        Some((acc << 8) | u64::from(u8::from_str_radix(p, 16).ok()?))
    })
}

/// The key of a node's bridge address.
/// The DHCP range Airship's `instanceSubnet` gives: the CIDR without its first four addresses (vino-builder
/// skips them) and, on IPv4, without its broadcast address.
pub fn instance_subnet_range(cidr: &str) -> Result<(String, String), String> {
    let (base, host_bits) = parse_cidr(cidr).map_err(|e| format!("instanceSubnet: {e}"))?;
    let size = if host_bits >= 128 {
        u128::MAX
    } else {
        1u128 << host_bits
    };
    let last_skipped = if base.v6 { 0 } else { 1 };
    if size <= 4 + last_skipped {
        return Err(format!(
            "instanceSubnet {cidr:?} has no address left once its first four are skipped"
        ));
    }
    let first = base.n & !(size - 1);
    let show = |n| Addr { v6: base.v6, n }.ip().to_string();
    Ok((show(first + 4), show(first + (size - 1) - last_skipped)))
}

pub fn bridge_key(node: &str) -> String {
    format!("node/{node}")
}

/// Allocates what `wanted` needs on top of what the pool holds (`ips`, `ranges`), releasing the rest.
pub fn allocate(
    net: &Ranges,
    ips: &[AllocatedIp],
    ranges: &[AllocatedRange],
    wanted: &Wanted,
) -> Result<Allocation, String> {
    let mut keys: BTreeMap<String, bool> = BTreeMap::new(); // key → needs a MAC
    for i in &wanted.interfaces {
        keys.insert(i.clone(), true);
    }
    for n in &wanted.nodes {
        keys.insert(bridge_key(n), false);
    }
    let mut out = Allocation::default();
    let mut used_ips: BTreeSet<u128> = BTreeSet::new();
    let mut used_macs: BTreeSet<u64> = BTreeSet::new();
    let mut kept: BTreeMap<String, AllocatedIp> = BTreeMap::new();
    for a in ips {
        let addr = Addr::parse(&a.ip, "allocated address");
        let keep = keys.get(&a.allocated_to).is_some_and(|needs_mac| {
            addr.as_ref().is_ok_and(|ad| ad.v6 == net.v6)
                && (!needs_mac || a.mac.as_deref().and_then(parse_mac).is_some())
        }) && !kept.contains_key(&a.allocated_to);
        match (keep, addr) {
            (true, Ok(ad)) if used_ips.insert(ad.n) => {
                if let Some(m) = a.mac.as_deref().and_then(parse_mac) {
                    used_macs.insert(m);
                }
                kept.insert(a.allocated_to.clone(), a.clone());
            }
            _ => out.released.push(a.allocated_to.clone()),
        }
    }
    for (key, needs_mac) in &keys {
        if let Some(a) = kept.remove(key) {
            out.ips.push(a);
            continue;
        }
        let (lo, hi) = net
            .static_range
            .ok_or_else(|| format!("no static allocation range for {key}"))?;
        let mut n = lo;
        while used_ips.contains(&n) {
            n += 1;
        }
        if n > hi {
            return Err(format!(
                "the static allocation range {}..{} is exhausted (allocating {key})",
                net.show(lo),
                net.show(hi)
            ));
        }
        used_ips.insert(n);
        let mac = if *needs_mac {
            let m = net
                .mac(key, &used_macs)
                .ok_or_else(|| format!("no MAC address left for {key}"))?;
            used_macs.insert(parse_mac(&m).expect("formatted above"));
            Some(m)
        } else {
            None
        };
        out.ips.push(AllocatedIp {
            ip: net.show(n),
            mac,
            allocated_to: key.clone(),
        });
    }

    // DHCP sub-ranges per node.
    let mut kept_ranges: BTreeMap<String, AllocatedRange> = BTreeMap::new();
    let mut used_blocks: BTreeSet<u128> = BTreeSet::new();
    for r in ranges {
        let start = Addr::parse(&r.start, "allocated range").ok();
        let fits = start.is_some_and(|s| {
            s.v6 == net.v6
                && net
                    .dhcp_range
                    .is_some_and(|(lo, hi)| s.n >= lo && s.n + net.block - 1 <= hi)
        });
        if wanted.nodes.contains(&r.allocated_to)
            && fits
            && !kept_ranges.contains_key(&r.allocated_to)
            && used_blocks.insert(start.expect("fits").n)
        {
            kept_ranges.insert(r.allocated_to.clone(), r.clone());
        } else {
            out.released.push(format!("range/{}", r.allocated_to));
        }
    }
    for node in &wanted.nodes {
        if let Some(r) = kept_ranges.remove(node) {
            out.ranges.push(r);
            continue;
        }
        let (lo, hi) = net
            .dhcp_range
            .ok_or_else(|| format!("no DHCP allocation range for node {node}"))?;
        let mut start = lo;
        while used_blocks.contains(&start) {
            start += net.block;
        }
        if start.checked_add(net.block - 1).is_none_or(|end| end > hi) {
            return Err(format!(
                "the DHCP allocation range {}..{} has no free block of {} addresses for node {node}",
                net.show(lo),
                net.show(hi),
                net.block
            ));
        }
        used_blocks.insert(start);
        out.ranges.push(AllocatedRange {
            start: net.show(start),
            stop: net.show(start + net.block - 1),
            allocated_to: node.clone(),
        });
    }
    out.released.sort();
    out.released.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v4() -> Ranges {
        Ranges::new(
            "192.168.100.0/24",
            Some(("192.168.100.10", "192.168.100.19")),
            Some(("192.168.100.64", "192.168.100.127")),
            Some(4),
            Some("52:54:00"),
        )
        .unwrap()
    }

    fn wanted(interfaces: &[&str], nodes: &[&str]) -> Wanted {
        Wanted {
            interfaces: interfaces.iter().map(|s| s.to_string()).collect(),
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn instance_subnet_skips_its_first_four_addresses_and_the_broadcast() {
        assert_eq!(
            instance_subnet_range("192.168.4.0/22").unwrap(),
            ("192.168.4.4".into(), "192.168.7.254".into())
        );
        assert_eq!(
            instance_subnet_range("192.168.4.9/29").unwrap(),
            ("192.168.4.12".into(), "192.168.4.14".into())
        );
        assert_eq!(
            instance_subnet_range("fd00:1::/120").unwrap(),
            ("fd00:1::4".into(), "fd00:1::ff".into())
        );
        let e = instance_subnet_range("192.168.4.0/30").unwrap_err();
        assert!(e.contains("no address left"), "{e}");
        let e = instance_subnet_range("192.168.4.0").unwrap_err();
        assert!(e.starts_with("instanceSubnet: "), "{e}");
    }

    #[test]
    fn lowest_addresses_first_blocks_per_node_and_stable_macs() {
        let a = allocate(&v4(), &[], &[], &wanted(&["vm-1/oam", "vm-0/oam"], &["n1"])).unwrap();
        let got: Vec<(&str, &str)> = a
            .ips
            .iter()
            .map(|i| (i.allocated_to.as_str(), i.ip.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("node/n1", "192.168.100.10"),
                ("vm-0/oam", "192.168.100.11"),
                ("vm-1/oam", "192.168.100.12")
            ]
        );
        assert!(a.ips[0].mac.is_none());
        assert!(a.ips[1].mac.as_deref().unwrap().starts_with("52:54:00:"));
        assert_eq!(
            a.ranges,
            [AllocatedRange {
                start: "192.168.100.64".into(),
                stop: "192.168.100.79".into(),
                allocated_to: "n1".into()
            }]
        );
        // The same key gets the same MAC on an empty pool, whatever else is allocated.
        let b = allocate(&v4(), &[], &[], &wanted(&["vm-0/oam"], &[])).unwrap();
        assert_eq!(b.ips[0].mac, a.ips[1].mac);
        // A replan keeps everything; dropping vm-0 frees its address for the next VM.
        let again = allocate(
            &v4(),
            &a.ips,
            &a.ranges,
            &wanted(&["vm-1/oam", "vm-0/oam"], &["n1"]),
        )
        .unwrap();
        assert_eq!(again, a);
        let less = allocate(
            &v4(),
            &a.ips,
            &a.ranges,
            &wanted(&["vm-1/oam", "vm-2/oam"], &["n1"]),
        )
        .unwrap();
        assert_eq!(less.released, ["vm-0/oam"]);
        let vm2 = less
            .ips
            .iter()
            .find(|i| i.allocated_to == "vm-2/oam")
            .unwrap();
        assert_eq!(vm2.ip, "192.168.100.11");
    }

    #[test]
    fn exhaustion_and_bad_networks_are_clear_errors() {
        let many: Vec<String> = (0..11).map(|i| format!("vm-{i:02}/oam")).collect();
        let w = Wanted {
            interfaces: many.into_iter().collect(),
            nodes: BTreeSet::new(),
        };
        assert_eq!(
            allocate(&v4(), &[], &[], &w).unwrap_err(),
            "the static allocation range 192.168.100.10..192.168.100.19 is exhausted (allocating vm-10/oam)"
        );
        let nodes = wanted(&[], &["a", "b", "c", "d", "e"]);
        let err = allocate(
            &v4(),
            &[],
            &[],
            &Wanted {
                nodes: nodes.nodes,
                interfaces: BTreeSet::new(),
            },
        )
        .unwrap_err();
        assert!(
            err.contains("no free block of 16 addresses for node e"),
            "{err}"
        );
        for (subnet, s, d, step, mac, want) in [
            ("10.0.0.0", None, None, None, None, "not a CIDR"),
            (
                "10.0.0.0/33",
                None,
                None,
                None,
                None,
                "invalid prefix length",
            ),
            (
                "10.0.0.0/24",
                Some(("10.0.1.1", "10.0.1.5")),
                None,
                None,
                None,
                "not an ascending range inside",
            ),
            (
                "10.0.0.0/24",
                Some(("10.0.0.9", "10.0.0.5")),
                None,
                None,
                None,
                "not an ascending range inside",
            ),
            (
                "10.0.0.0/24",
                Some(("fd00::1", "fd00::2")),
                None,
                None,
                None,
                "mixes IPv4 and IPv6",
            ),
            (
                "10.0.0.0/24",
                Some(("10.0.0.1", "10.0.0.50")),
                Some(("10.0.0.40", "10.0.0.60")),
                None,
                None,
                "overlap",
            ),
            (
                "10.0.0.0/24",
                None,
                None,
                Some(9),
                None,
                "instanceSubnetBitStep 9",
            ),
            ("10.0.0.0/24", None, None, None, Some("53:00"), "multicast"),
            (
                "10.0.0.0/24",
                None,
                None,
                None,
                Some("zz:00"),
                "not 1 to 5 hex bytes",
            ),
            (
                "10.0.0.0/24",
                None,
                None,
                None,
                Some("52:54:00:06:00:01"),
                "leaves no byte to allocate",
            ),
            (
                "10.0.0.0/24",
                None,
                None,
                None,
                Some("52:54:00:06:00:00:00"),
                "6 zero-padded",
            ),
        ] {
            let err = Ranges::new(subnet, s, d, step, mac).unwrap_err();
            assert!(err.contains(want), "{subnet}: {err}");
        }
    }

    #[test]
    fn airships_zero_padded_six_byte_prefix_allocates_its_trailing_zero_bytes() {
        for (prefix, starts) in [
            ("52:54:00:06:00:00", "52:54:00:06:"),
            ("52:54:00:00:00:00", "52:54:00:"),
            ("02:00:00:00:00:00", "02:00:00:"),
        ] {
            let net = Ranges::new(
                "10.0.0.0/24",
                Some(("10.0.0.10", "10.0.0.19")),
                None,
                None,
                Some(prefix),
            )
            .unwrap();
            let a = allocate(&net, &[], &[], &wanted(&["vm-0/oam", "vm-1/oam"], &[])).unwrap();
            let macs: Vec<&str> = a.ips.iter().filter_map(|i| i.mac.as_deref()).collect();
            assert_eq!(macs.len(), 2, "{prefix}");
            assert_ne!(macs[0], macs[1]);
            for m in macs {
                assert!(m.starts_with(starts), "{prefix}: {m}");
                assert_eq!(m.len(), 17, "{m}");
            }
        }
    }

    #[test]
    fn ipv6_networks_work() {
        let net = Ranges::new(
            "fd00:10::/64",
            Some(("fd00:10::100", "fd00:10::1ff")),
            Some(("fd00:10::1:0", "fd00:10::1:ffff")),
            Some(8),
            Some("02:00:00:00"),
        )
        .unwrap();
        let a = allocate(&net, &[], &[], &wanted(&["vm/oam"], &["n"])).unwrap();
        assert_eq!(a.ips[0].ip, "fd00:10::100");
        assert_eq!(a.ips[1].ip, "fd00:10::101");
        assert!(a.ips[1].mac.as_deref().unwrap().starts_with("02:00:00:00:"));
        assert_eq!(
            (a.ranges[0].start.as_str(), a.ranges[0].stop.as_str()),
            ("fd00:10::1:0", "fd00:10::1:ff")
        );
    }

    fn arb_net() -> impl Strategy<Value = Ranges> {
        prop_oneof![
            Just(
                Ranges::new(
                    "10.1.0.0/24",
                    Some(("10.1.0.2", "10.1.0.40")),
                    Some(("10.1.0.128", "10.1.0.255")),
                    Some(3),
                    Some("52:54:00:aa:bb")
                )
                .unwrap()
            ),
            Just(
                Ranges::new(
                    "fd00:1::/120",
                    Some(("fd00:1::2", "fd00:1::30")),
                    Some(("fd00:1::80", "fd00:1::ff")),
                    Some(4),
                    Some("52:54:00:00:00")
                )
                .unwrap()
            ),
        ]
    }

    proptest! {
        #[test]
        fn no_duplicates_stable_across_replans_and_all_freed_at_the_end(
            net in arb_net(),
            steps in proptest::collection::vec(
                (proptest::collection::btree_set(0u8..40, 0..30), proptest::collection::btree_set(0u8..12, 0..6)),
                1..8,
            ),
        ) {
            let (mut ips, mut ranges) = (Vec::new(), Vec::new());
            let mut before: BTreeMap<String, (String, Option<String>)> = BTreeMap::new();
            for (vms, nodes) in steps {
                let w = Wanted {
                    interfaces: vms.iter().map(|v| format!("vm-{v}/net")).collect(),
                    nodes: nodes.iter().map(|n| format!("n{n}")).collect(),
                };
                let a = match allocate(&net, &ips, &ranges, &w) {
                    Ok(a) => a,
                    Err(e) => { prop_assert!(e.contains("exhausted") || e.contains("no free block") || e.contains("no MAC"), "{e}"); continue }
                };
                let addrs: BTreeSet<&str> = a.ips.iter().map(|i| i.ip.as_str()).collect();
                prop_assert_eq!(addrs.len(), a.ips.len(), "duplicate address");
                let macs: Vec<&str> = a.ips.iter().filter_map(|i| i.mac.as_deref()).collect();
                prop_assert_eq!(macs.iter().collect::<BTreeSet<_>>().len(), macs.len(), "duplicate MAC");
                prop_assert_eq!(macs.len(), w.interfaces.len());
                prop_assert_eq!(a.ips.len(), w.interfaces.len() + w.nodes.len());
                prop_assert_eq!(a.ranges.len(), w.nodes.len());
                let starts: BTreeSet<&str> = a.ranges.iter().map(|r| r.start.as_str()).collect();
                prop_assert_eq!(starts.len(), a.ranges.len(), "duplicate block");
                for i in &a.ips {
                    if let Some((ip, mac)) = before.get(&i.allocated_to) {
                        prop_assert_eq!((ip, mac), (&i.ip, &i.mac), "{} moved", i.allocated_to);
                    }
                }
                before = a.ips.iter().map(|i| (i.allocated_to.clone(), (i.ip.clone(), i.mac.clone()))).collect();
                ips = a.ips;
                ranges = a.ranges;
            }
            let end = allocate(&net, &ips, &ranges, &Wanted::default()).unwrap();
            prop_assert!(end.ips.is_empty() && end.ranges.is_empty());
            prop_assert_eq!(end.released.len(), ips.len() + ranges.len());
        }
    }
}
