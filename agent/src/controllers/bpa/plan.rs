//! The BPA reconciler's pure half: which BareMetalHost each Provisioning entry is, whether it fits, and the
//! kubespray inventory for the cluster. No I/O; unit- and property-tested.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::controllers::common::Ownership;
use crate::crd::bpa::{HostStatus, ProvisioningSpec};
use crate::crd::metal3::{has_feature, QAT_LABEL, SRIOV_LABEL};

/// On every object the reconciler creates: the Provisioning's name.
pub const OWNER_LABEL: &str = "bpa.akraino.org/provisioning";
/// How the objects are marked: the Provisioning's name and generation.
pub const OWNERSHIP: Ownership = Ownership {
    owner_label: OWNER_LABEL,
    generation_label: "bpa.akraino.org/generation",
};

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
    /// Whose the host is (`spec.consumerRef`).
    pub claim: Claim,
}

/// A BareMetalHost's `spec.consumerRef`, as a Provisioning sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Claim {
    /// No consumer: any Provisioning may take it.
    #[default]
    Free,
    /// This Provisioning's.
    Ours,
    /// Another object's: `Kind namespace/name`.
    Other(String),
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
    /// The host is another object's (its `consumerRef`): a host serves one cluster.
    Claimed {
        label: String,
        host: String,
        by: String,
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
            Problem::Claimed { label, host, by } => {
                write!(f, "{label}: BareMetalHost {host} is used by {by}")
            }
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
        if let Claim::Other(by) = &host.claim {
            status.state = Some(format!("used by {by}"));
            problems.push(Problem::Claimed {
                label: w.label.clone(),
                host: host.name.clone(),
                by: by.clone(),
            });
        } else if let Some(reason) = unfit(w, host) {
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

pub(super) fn host_has_mac(h: &Host, mac: &str) -> bool {
    h.boot_mac.as_deref().and_then(normalize_mac).as_deref() == Some(mac)
        || h.nics
            .iter()
            .any(|(m, _)| normalize_mac(m).as_deref() == Some(mac))
}

/// The address the installer reaches the NIC with `mac` at (for a boot MAC the inspection did not list,
/// none). BMO lists a NIC once per address inspection found on it, IPv4 first, then IPv6: an IPv4 address is
/// taken, else a routable IPv6 one; a link-local IPv6 address (`fe80::/10`) names no host without its
/// interface, and one that does not parse is no address either.
pub(super) fn host_ip(h: &Host, mac: &str) -> Option<String> {
    let addresses = h
        .nics
        .iter()
        .filter(|(m, _)| normalize_mac(m).as_deref() == Some(mac))
        .filter_map(|(_, ip)| ip.as_deref()?.parse::<std::net::IpAddr>().ok());
    let usable = |a: &std::net::IpAddr| match a {
        std::net::IpAddr::V4(v4) => !v4.is_unspecified(),
        std::net::IpAddr::V6(v6) => !v6.is_unspecified() && (v6.segments()[0] & 0xffc0) != 0xfe80,
    };
    let mut usable: Vec<std::net::IpAddr> = addresses.filter(usable).collect();
    usable.sort_by_key(|a| !a.is_ipv4());
    usable.first().map(ToString::to_string)
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
pub(crate) fn inventory(hosts: &[(&Wanted, String)]) -> String {
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
