//! BPA's planner, pure: host matching, inventories and the problems it reports.

use std::collections::BTreeMap;

use super::plan::*;
use crate::crd::bpa::ProvisioningSpec;
use crate::crd::bpa::{Master, OneHost, Worker};
use crate::crd::metal3::{has_feature, SRIOV_LABEL};
use proptest::prelude::*;

fn host(name: &str, mac: &str, ip: &str, cpus: i64, ram_mib: i64, state: &str) -> Host {
    Host {
        name: name.into(),
        boot_mac: Some(mac.to_uppercase()),
        nics: vec![(mac.into(), Some(ip.into()))],
        cpus: Some(cpus),
        ram_mebibytes: Some(ram_mib),
        state: state.into(),
        ..Host::default()
    }
}

fn master(label: &str, mac: &str) -> OneHost<Master> {
    OneHost(BTreeMap::from([(
        label.to_owned(),
        Master {
            mac_address: mac.into(),
            ..Master::default()
        },
    )]))
}

fn worker(label: &str, w: Worker) -> OneHost<Worker> {
    OneHost(BTreeMap::from([(label.to_owned(), w)]))
}

#[test]
fn macs_and_quantities() {
    assert_eq!(
        normalize_mac("00-C6-14-04-61-B2").as_deref(),
        Some("00:c6:14:04:61:b2")
    );
    assert_eq!(normalize_mac("00:c6:14:04:61"), None);
    assert_eq!(normalize_mac("00:c6:14:04:61:bz"), None);
    assert_eq!(quantity_bytes("16Gi"), Some(16 << 30));
    assert_eq!(quantity_bytes("512M"), Some(512_000_000));
    assert_eq!(quantity_bytes("1.5Gi"), Some(3 << 29));
    assert_eq!(quantity_bytes("1e9"), Some(1_000_000_000));
    assert_eq!(quantity_bytes("100"), Some(100));
    assert_eq!(quantity_bytes("lots"), None);
    assert_eq!(quantity_bytes("1.2.3Gi"), None);
    assert_eq!(quantity_bytes("4Xi"), None);
}

#[test]
fn a_fitting_cluster_gets_an_inventory_with_ips_from_the_matching_nic() {
    let spec = ProvisioningSpec {
        masters: vec![master("master-1", "00:c6:14:04:61:b2")],
        workers: vec![worker(
            "worker-1",
            Worker {
                mac_address: "00-C6-14-04-61-B3".into(),
                cpu: Some(8),
                memory: Some("16Gi".into()),
                sriov: true,
                ..Worker::default()
            },
        )],
        ..ProvisioningSpec::default()
    };
    let mut w = host(
        "node-b",
        "00:c6:14:04:61:b3",
        "10.0.0.12",
        16,
        32768,
        "provisioned",
    );
    // The matching NIC is the second one; the first has another address.
    w.nics
        .insert(0, ("00:c6:14:04:61:ff".into(), Some("192.168.1.5".into())));
    w.labels.insert(SRIOV_LABEL.into(), "true".into());
    let hosts = vec![
        host(
            "node-a",
            "00:c6:14:04:61:b2",
            "10.0.0.11",
            4,
            8192,
            "externally provisioned",
        ),
        w,
    ];
    let p = plan(&spec, &hosts);
    assert_eq!(p.problems, vec![]);
    assert_eq!(
        p.inventory.as_deref(),
        Some(
            "[all]\nmaster-1 ansible_host=10.0.0.11 ip=10.0.0.11\nworker-1 ansible_host=10.0.0.12 ip=10.0.0.12\n\
             \n[kube_control_plane]\nmaster-1\n\n[etcd]\nmaster-1\n\n[kube_node]\nworker-1\n\
             \n[k8s_cluster:children]\nkube_control_plane\nkube_node\n"
        )
    );
    assert_eq!(p.hosts[1].bare_metal_host.as_deref(), Some("node-b"));
    assert_eq!(p.hosts[1].ip.as_deref(), Some("10.0.0.12"));
    assert_eq!(p.hosts[1].mac_address, "00:c6:14:04:61:b3");
}

#[test]
fn masters_are_workers_when_there_are_none() {
    let spec = ProvisioningSpec {
        masters: vec![master("m1", "00:00:00:00:00:01")],
        ..ProvisioningSpec::default()
    };
    let hosts = vec![host(
        "a",
        "00:00:00:00:00:01",
        "10.0.0.1",
        1,
        1024,
        "provisioned",
    )];
    let inv = plan(&spec, &hosts).inventory.unwrap();
    assert!(inv.contains("[kube_node]\nm1\n"), "{inv}");
}

#[test]
fn problems_name_the_host_and_reason() {
    let spec = ProvisioningSpec {
        masters: vec![master("m1", "00:00:00:00:00:01")],
        workers: vec![
            worker(
                "w1",
                Worker {
                    mac_address: "00:00:00:00:00:02".into(),
                    cpu: Some(32),
                    memory: Some("64Gi".into()),
                    qat: true,
                    ..Worker::default()
                },
            ),
            worker(
                "w2",
                Worker {
                    mac_address: "00:00:00:00:00:09".into(),
                    ..Worker::default()
                },
            ),
        ],
        ..ProvisioningSpec::default()
    };
    let hosts = vec![
        host(
            "a",
            "00:00:00:00:00:01",
            "10.0.0.1",
            4,
            4096,
            "provisioning",
        ),
        host("b", "00:00:00:00:00:02", "10.0.0.2", 4, 4096, "provisioned"),
    ];
    let p = plan(&spec, &hosts);
    assert_eq!(p.inventory, None);
    let text: Vec<String> = p.problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        vec![
            "m1: BareMetalHost a is \"provisioning\", not provisioned",
            "w1: BareMetalHost b is unfit: 4 CPUs, 32 required; 4096Mi of memory, 64Gi required; \
             QAT required, label feature.foothold.io/qat=true missing",
            "w2: no BareMetalHost has MAC address 00:00:00:00:00:09",
        ]
    );
}

#[test]
fn spec_conflicts_are_refused() {
    let spec = ProvisioningSpec {
        masters: vec![
            master("m1", "00:00:00:00:00:01"),
            master("m1", "00:00:00:00:00:02"),
        ],
        ..ProvisioningSpec::default()
    };
    let p = plan(&spec, &[]);
    assert!(p.spec_invalid());
    assert_eq!(
        p.problems[0].to_string(),
        "label m1 is used for different MAC addresses: 00:00:00:00:00:01, 00:00:00:00:00:02"
    );
    // The same host as master and worker under one label is fine (ICN lists it twice).
    let spec = ProvisioningSpec {
        masters: vec![master("m1", "00:00:00:00:00:01")],
        workers: vec![worker(
            "m1",
            Worker {
                mac_address: "00:00:00:00:00:01".into(),
                ..Worker::default()
            },
        )],
        ..ProvisioningSpec::default()
    };
    let hosts = vec![host(
        "a",
        "00:00:00:00:00:01",
        "10.0.0.1",
        1,
        1,
        "provisioned",
    )];
    let p = plan(&spec, &hosts);
    assert_eq!(p.problems, vec![]);
    assert!(p
        .inventory
        .unwrap()
        .starts_with("[all]\nm1 ansible_host=10.0.0.1 ip=10.0.0.1\n\n"));
    // One MAC under two labels is not.
    let spec = ProvisioningSpec {
        masters: vec![master("m1", "00:00:00:00:00:01")],
        workers: vec![worker(
            "w1",
            Worker {
                mac_address: "00:00:00:00:00:01".into(),
                ..Worker::default()
            },
        )],
        ..ProvisioningSpec::default()
    };
    assert!(plan(&spec, &hosts).spec_invalid());
    assert!(plan(&ProvisioningSpec::default(), &hosts).spec_invalid());
}

fn arb_hosts() -> impl Strategy<Value = Vec<Host>> {
    prop::collection::vec(
        (
            (0u8..12, 1i64..64, 1i64..262_144, 0usize..4, any::<bool>()),
            0u8..6,
        ),
        0..12,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, ((mac, cpus, ram, state, sriov), claim))| Host {
                // Most hosts free, some this Provisioning's, one in six another's.
                claim: match claim {
                    0 => Claim::Other("Provisioning site/other".into()),
                    1 | 2 => Claim::Ours,
                    _ => Claim::Free,
                },
                name: format!("h{i}"),
                boot_mac: Some(format!("00:00:00:00:00:{mac:02x}")),
                nics: vec![(
                    format!("00-00-00-00-00-{mac:02X}"),
                    Some(format!("10.0.0.{i}")),
                )],
                cpus: Some(cpus),
                ram_mebibytes: Some(ram),
                state: [
                    "provisioned",
                    "externally provisioned",
                    "available",
                    "inspecting",
                ][state]
                    .into(),
                labels: if sriov {
                    BTreeMap::from([(SRIOV_LABEL.to_owned(), "true".to_owned())])
                } else {
                    BTreeMap::new()
                },
            })
            .collect()
    })
}

fn arb_spec() -> impl Strategy<Value = ProvisioningSpec> {
    let entry = (
        0u8..12,
        prop::option::of(1i32..64),
        prop::option::of(1u32..256),
        any::<bool>(),
    );
    (
        prop::collection::vec(entry.clone(), 1..4),
        prop::collection::vec(entry, 0..5),
    )
        .prop_map(|(masters, workers)| ProvisioningSpec {
            masters: masters
                .into_iter()
                .map(|(mac, cpu, gib, _)| {
                    master_with(format!("n{mac}"), mac, cpu, gib.map(|g| format!("{g}Gi")))
                })
                .collect(),
            workers: workers
                .into_iter()
                .map(|(mac, cpu, gib, sriov)| {
                    worker(
                        &format!("n{mac}"),
                        Worker {
                            mac_address: format!("00:00:00:00:00:{mac:02x}"),
                            cpu,
                            memory: gib.map(|g| format!("{g}Gi")),
                            sriov,
                            ..Worker::default()
                        },
                    )
                })
                .collect(),
            ..ProvisioningSpec::default()
        })
}

fn master_with(
    label: String,
    mac: u8,
    cpu: Option<i32>,
    memory: Option<String>,
) -> OneHost<Master> {
    OneHost(BTreeMap::from([(
        label,
        Master {
            mac_address: format!("00:00:00:00:00:{mac:02x}"),
            cpu,
            memory,
        },
    )]))
}

proptest! {
    /// An inventory exists exactly when there is no problem; it then lists every entry's label once in
    /// `[all]` with the IP of the one host holding its MAC, and that host meets the entry's requirements.
    #[test]
    fn inventory_iff_no_problem_and_every_host_fits(spec in arb_spec(), hosts in arb_hosts()) {
        let p = plan(&spec, &hosts);
        prop_assert_eq!(p.inventory.is_some(), p.problems.is_empty());
        prop_assert_eq!(p.hosts.len(), spec.masters.len() + spec.workers.len());
        if let Some(inv) = &p.inventory {
            let all: Vec<&str> = inv.split("\n\n").next().unwrap().lines().skip(1).collect();
            for w in wanted(&spec).unwrap() {
                let line = all.iter().find(|l| l.starts_with(&format!("{} ", w.label)));
                prop_assert!(line.is_some(), "{} missing from {}", w.label, inv);
                let holders: Vec<&Host> = hosts.iter().filter(|h| host_has_mac(h, &normalize_mac(&w.mac).unwrap())).collect();
                prop_assert_eq!(holders.len(), 1);
                let h = holders[0];
                prop_assert!(is_provisioned(&h.state));
                prop_assert!(!matches!(h.claim, Claim::Other(_)), "another's host in {}", inv);
                prop_assert!(w.cpu.is_none_or(|c| h.cpus.unwrap() >= i64::from(c)));
                prop_assert!(w.memory.as_deref().is_none_or(|m| (h.ram_mebibytes.unwrap() as u128) << 20 >= quantity_bytes(m).unwrap()));
                prop_assert!(!w.sriov || has_feature(&h.labels, SRIOV_LABEL));
                let ip = host_ip(h, &normalize_mac(&w.mac).unwrap()).unwrap();
                prop_assert_eq!(*line.unwrap(), format!("{} ansible_host={ip} ip={ip}", w.label));
            }
        }
        // Planning is a function of its input.
        prop_assert_eq!(plan(&spec, &hosts), p);
    }

    #[test]
    fn quantities_agree_with_integer_arithmetic(n in 0u64..1_000_000, s in 0usize..7) {
        let (suffix, mul) = [("", 1u128), ("Ki", 1024), ("Mi", 1 << 20), ("Gi", 1 << 30), ("k", 1000), ("M", 1_000_000), ("G", 1_000_000_000)][s];
        prop_assert_eq!(quantity_bytes(&format!("{n}{suffix}")), Some(u128::from(n) * mul));
    }
}

#[test]
fn a_host_is_reached_at_its_ipv4_address_else_a_routable_ipv6_one_never_a_link_local_one() {
    let mac = "52:54:00:22:10:01";
    let nics = |ips: &[Option<&str>]| Host {
        nics: ips
            .iter()
            .map(|ip| (mac.to_uppercase(), ip.map(str::to_owned)))
            .chain([("52:54:00:99:99:99".to_owned(), Some("10.9.9.9".to_owned()))])
            .collect(),
        ..Host::default()
    };
    // BMO's order for one NIC with both: IPv4 first, then IPv6; either order gives the IPv4 address.
    for ips in [
        [Some("172.22.0.16"), Some("fe80::5054:ff:fe22:1001")],
        [Some("fe80::5054:ff:fe22:1001"), Some("172.22.0.16")],
    ] {
        assert_eq!(host_ip(&nics(&ips), mac).as_deref(), Some("172.22.0.16"));
    }
    assert_eq!(
        host_ip(&nics(&[Some("fe80::1"), Some("2001:db8::16")]), mac).as_deref(),
        Some("2001:db8::16")
    );
    // Only a link-local address, none, or something that is no address: nothing to install through.
    for ips in [
        &[Some("fe80::5054:ff:fe22:1001")][..],
        &[None],
        &[Some("not-an-address"), Some("0.0.0.0")],
    ] {
        assert_eq!(host_ip(&nics(ips), mac), None, "{ips:?}");
    }
}
