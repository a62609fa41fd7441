//! The BPA reconciler's pure half: which BareMetalHost each Provisioning entry is, whether it fits, and the
//! kubespray inventory for the cluster. No I/O; unit- and property-tested.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::crd::bpa::{HostStatus, ProvisioningSpec};
use crate::crd::metal3::{has_feature, QAT_LABEL, SRIOV_LABEL};

/// What the planner needs of a BareMetalHost.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Host {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub boot_mac: Option<String>,
    /// `(mac, ip)` of every NIC the inspection found.
    pub nics: Vec<(String, Option<String>)>,
    pub cpus: Option<i64>,
    pub ram_mebibytes: Option<i64>,
    /// `status.provisioning.state`.
    pub state: String,
}

/// One entry of the spec, as required.
#[derive(Clone, Debug, PartialEq)]
pub struct Wanted {
    pub label: String,
    pub role: Role,
    pub mac: String,
    pub cpu: Option<i32>,
    pub memory: Option<String>,
    pub sriov: bool,
    pub qat: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Master,
    Worker,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Master => "master",
            Role::Worker => "worker",
        }
    }
}

/// Why an entry cannot be used (yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The spec itself is wrong: fixing it needs a new generation.
    Spec(String),
    /// No host has the MAC address (it may still appear).
    UnknownMac { label: String, mac: String },
    /// More than one host has the MAC address.
    AmbiguousMac {
        label: String,
        mac: String,
        hosts: Vec<String>,
    },
    /// The host does not meet the entry's hardware requirements.
    Unfit {
        label: String,
        host: String,
        reason: String,
    },
    /// The host is not provisioned yet.
    NotProvisioned {
        label: String,
        host: String,
        state: String,
    },
    /// The host is matched and fit but has no IP address to install through.
    NoAddress { label: String, host: String },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Spec(m) => write!(f, "{m}"),
            Problem::UnknownMac { label, mac } => {
                write!(f, "{label}: no BareMetalHost has MAC address {mac}")
            }
            Problem::AmbiguousMac { label, mac, hosts } => write!(
                f,
                "{label}: MAC address {mac} belongs to several BareMetalHosts: {}",
                hosts.join(", ")
            ),
            Problem::Unfit {
                label,
                host,
                reason,
            } => write!(f, "{label}: BareMetalHost {host} is unfit: {reason}"),
            Problem::NotProvisioned { label, host, state } => write!(
                f,
                "{label}: BareMetalHost {host} is {:?}, not provisioned",
                state
            ),
            Problem::NoAddress { label, host } => write!(
                f,
                "{label}: BareMetalHost {host} reports no IP address for the matched NIC"
            ),
        }
    }
}

/// The outcome of matching a spec against the hosts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Every entry, matched or not, in spec order (masters, then workers).
    pub hosts: Vec<HostStatus>,
    pub problems: Vec<Problem>,
    /// The inventory, when every host is matched, fit and provisioned.
    pub inventory: Option<String>,
}

impl Plan {
    /// Whether a problem is the spec's own, which no change of hosts can fix.
    pub fn spec_invalid(&self) -> bool {
        self.problems.iter().any(|p| matches!(p, Problem::Spec(_)))
    }
}

/// `aa:bb:…` in lower case, from `:` or `-` separated input; None when it is not a MAC address.
pub fn normalize_mac(mac: &str) -> Option<String> {
    let parts: Vec<&str> = mac.trim().split([':', '-']).collect();
    if parts.len() != 6
        || parts
            .iter()
            .any(|p| p.len() != 2 || !p.chars().all(|c| c.is_ascii_hexdigit()))
    {
        return None;
    }
    Some(parts.join(":").to_ascii_lowercase())
}

/// A Kubernetes quantity in bytes (`16Gi`, `16384Mi`, `8G`, `1e9`, `512M`); None when malformed.
pub fn quantity_bytes(q: &str) -> Option<u128> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    if num.is_empty() || num.matches('.').count() > 1 || num.starts_with('.') || num.ends_with('.')
    {
        return None;
    }
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let mul: u128 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        s if s.starts_with(['e', 'E']) => 10u128.checked_pow(s[1..].parse().ok()?)?,
        _ => return None,
    };
    let int: u128 = int.parse().ok()?;
    let frac_digits = frac.len() as u32;
    let frac: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    let scale = 10u128.checked_pow(frac_digits)?;
    // Round fractional bytes up: "1.5k" is 1500, "0.0001Ki" is one byte.
    let total = int
        .checked_mul(mul)?
        .checked_add((frac.checked_mul(mul)?).div_ceil(scale))?;
    Some(total)
}

/// The spec's entries in order: masters, then workers; masters double as workers when there are none.
pub fn wanted(spec: &ProvisioningSpec) -> Result<Vec<Wanted>, String> {
    let mut out = Vec::new();
    for (i, entry) in spec.masters.iter().enumerate() {
        let (label, m) = entry
            .entry()
            .ok_or_else(|| format!("masters[{i}] must map exactly one host label"))?;
        out.push(Wanted {
            label: label.to_owned(),
            role: Role::Master,
            mac: m.mac_address.clone(),
            cpu: m.cpu,
            memory: m.memory.clone(),
            sriov: false,
            qat: false,
        });
    }
    for (i, entry) in spec.workers.iter().enumerate() {
        let (label, w) = entry
            .entry()
            .ok_or_else(|| format!("workers[{i}] must map exactly one host label"))?;
        out.push(Wanted {
            label: label.to_owned(),
            role: Role::Worker,
            mac: w.mac_address.clone(),
            cpu: w.cpu,
            memory: w.memory.clone(),
            sriov: w.sriov,
            qat: w.qat,
        });
    }
    if out.iter().all(|w| w.role != Role::Master) {
        return Err("a cluster needs at least one master".into());
    }
    Ok(out)
}

/// Host states in which the operating system is installed and reachable.
pub fn is_provisioned(state: &str) -> bool {
    matches!(state, "provisioned" | "externally provisioned")
}

/// Matches the spec against `hosts` and, when everything fits, renders the inventory.
pub fn plan(spec: &ProvisioningSpec, hosts: &[Host]) -> Plan {
    let wanted = match wanted(spec) {
        Ok(w) => w,
        Err(e) => {
            return Plan {
                problems: vec![Problem::Spec(e)],
                ..Plan::default()
            }
        }
    };
    let mut problems = Vec::new();

    // One label, one MAC; one MAC, one label (a host listed as both master and worker keeps one label).
    let mut macs_by_label: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for w in &wanted {
        match normalize_mac(&w.mac) {
            Some(mac) => {
                let seen = macs_by_label.entry(&w.label).or_default();
                if !seen.contains(&mac) {
                    seen.push(mac);
                }
            }
            None => problems.push(Problem::Spec(format!(
                "{}: {:?} is not a MAC address",
                w.label, w.mac
            ))),
        }
    }
    for (label, macs) in &macs_by_label {
        if macs.len() > 1 {
            problems.push(Problem::Spec(format!(
                "label {label} is used for different MAC addresses: {}",
                macs.join(", ")
            )));
        }
    }
    let mut labels_by_mac: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (label, macs) in &macs_by_label {
        for mac in macs {
            labels_by_mac.entry(mac.clone()).or_default().push(label);
        }
    }
    for (mac, labels) in &labels_by_mac {
        if labels.len() > 1 {
            problems.push(Problem::Spec(format!(
                "MAC address {mac} is given several labels: {}",
                labels.join(", ")
            )));
        }
    }
    if !problems.is_empty() {
        return Plan {
            hosts: wanted
                .iter()
                .map(|w| HostStatus {
                    label: w.label.clone(),
                    role: w.role.as_str().into(),
                    mac_address: w.mac.clone(),
                    state: Some("invalid spec".into()),
                    ..HostStatus::default()
                })
                .collect(),
            problems,
            inventory: None,
        };
    }

    let mut statuses = Vec::new();
    let mut ready: Vec<(&Wanted, String)> = Vec::new();
    for w in &wanted {
        let mac = normalize_mac(&w.mac).expect("checked above");
        let mut status = HostStatus {
            label: w.label.clone(),
            role: w.role.as_str().into(),
            mac_address: mac.clone(),
            ..HostStatus::default()
        };
        let matches: Vec<&Host> = hosts.iter().filter(|h| host_has_mac(h, &mac)).collect();
        let host = match matches.as_slice() {
            [] => {
                status.state = Some("no BareMetalHost with this MAC".into());
                problems.push(Problem::UnknownMac {
                    label: w.label.clone(),
                    mac,
                });
                statuses.push(status);
                continue;
            }
            [h] => *h,
            many => {
                let mut names: Vec<String> = many.iter().map(|h| h.name.clone()).collect();
                names.sort();
                status.state = Some("MAC on several BareMetalHosts".into());
                problems.push(Problem::AmbiguousMac {
                    label: w.label.clone(),
                    mac,
                    hosts: names,
                });
                statuses.push(status);
                continue;
            }
        };
        status.bare_metal_host = Some(host.name.clone());
        status.ip = host_ip(host, &mac);
        status.state = Some(host.state.clone());
        if let Some(reason) = unfit(w, host) {
            status.state = Some(format!("unfit: {reason}"));
            problems.push(Problem::Unfit {
                label: w.label.clone(),
                host: host.name.clone(),
                reason,
            });
        } else if !is_provisioned(&host.state) {
            problems.push(Problem::NotProvisioned {
                label: w.label.clone(),
                host: host.name.clone(),
                state: host.state.clone(),
            });
        } else if let Some(ip) = status.ip.clone() {
            ready.push((w, ip));
        } else {
            problems.push(Problem::NoAddress {
                label: w.label.clone(),
                host: host.name.clone(),
            });
        }
        statuses.push(status);
    }
    let inventory = problems.is_empty().then(|| inventory(&ready));
    Plan {
        hosts: statuses,
        problems,
        inventory,
    }
}

fn host_has_mac(h: &Host, mac: &str) -> bool {
    h.boot_mac.as_deref().and_then(normalize_mac).as_deref() == Some(mac)
        || h.nics
            .iter()
            .any(|(m, _)| normalize_mac(m).as_deref() == Some(mac))
}

/// The IP of the NIC with `mac` (for a boot MAC the inspection did not list, none).
fn host_ip(h: &Host, mac: &str) -> Option<String> {
    h.nics
        .iter()
        .find(|(m, ip)| normalize_mac(m).as_deref() == Some(mac) && ip.is_some())
        .and_then(|(_, ip)| ip.clone())
}

/// Why `host` does not meet `w`, if it does not.
fn unfit(w: &Wanted, host: &Host) -> Option<String> {
    let mut reasons = Vec::new();
    if let Some(cpu) = w.cpu {
        match host.cpus {
            Some(have) if have >= i64::from(cpu) => {}
            Some(have) => reasons.push(format!("{have} CPUs, {cpu} required")),
            None => reasons.push(format!("CPU count unknown (not inspected), {cpu} required")),
        }
    }
    if let Some(memory) = &w.memory {
        match (quantity_bytes(memory), host.ram_mebibytes) {
            (None, _) => reasons.push(format!("memory {memory:?} is not a quantity")),
            (Some(need), Some(have)) if u128::try_from(have).unwrap_or(0) << 20 >= need => {}
            (Some(_), Some(have)) => reasons.push(format!("{have}Mi of memory, {memory} required")),
            (Some(_), None) => {
                reasons.push(format!("memory unknown (not inspected), {memory} required"))
            }
        }
    }
    if w.sriov && !has_feature(&host.labels, SRIOV_LABEL) {
        reasons.push(format!("SR-IOV required, label {SRIOV_LABEL}=true missing"));
    }
    if w.qat && !has_feature(&host.labels, QAT_LABEL) {
        reasons.push(format!("QAT required, label {QAT_LABEL}=true missing"));
    }
    (!reasons.is_empty()).then(|| reasons.join("; "))
}

/// A kubespray inventory (INI): every host with `ansible_host`, masters in `kube_control_plane` and `etcd`,
/// workers (or the masters, when there are no workers) in `kube_node`.
fn inventory(hosts: &[(&Wanted, String)]) -> String {
    let mut all: BTreeMap<&str, &str> = BTreeMap::new();
    let mut masters = Vec::new();
    let mut workers = Vec::new();
    for (w, ip) in hosts {
        all.insert(&w.label, ip);
        let list = match w.role {
            Role::Master => &mut masters,
            Role::Worker => &mut workers,
        };
        if !list.contains(&w.label.as_str()) {
            list.push(w.label.as_str());
        }
    }
    if workers.is_empty() {
        workers = masters.clone();
    }
    let mut out = String::from("[all]\n");
    for (label, ip) in &all {
        let _ = writeln!(out, "{label} ansible_host={ip} ip={ip}");
    }
    for (group, members) in [
        ("kube_control_plane", &masters),
        ("etcd", &masters),
        ("kube_node", &workers),
    ] {
        let _ = writeln!(out, "\n[{group}]");
        for m in members {
            let _ = writeln!(out, "{m}");
        }
    }
    out.push_str("\n[k8s_cluster:children]\nkube_control_plane\nkube_node\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::bpa::{Master, OneHost, Worker};
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
            (0u8..12, 1i64..64, 1i64..262_144, 0usize..4, any::<bool>()),
            0..12,
        )
        .prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (mac, cpus, ram, state, sriov))| Host {
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
}
