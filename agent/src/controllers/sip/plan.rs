//! The pure part of the SIP reconciler: which BareMetalHosts a `SIPCluster` claims for each role, as active or
//! standby, and which claims it gives up. No I/O: the reconciler observes hosts, calls [`plan`], and applies
//! the claims with resourceVersion preconditions.
//!
//! Rules:
//! - A host is a candidate for a role when it matches the role's `labelSelector`, has `spec.networkData`, is
//!   readable (its networkData and BMC credentials could be read), is not claimed by another cluster, and is
//!   `available` or `ready` (or already claimed by this cluster for this role, in any state but failed).
//! - Anti-affinity: no two hosts of one role (active and standby together) share a value of the role's
//!   `topologyKey` label. A host without that label is used only when the role's selector explicitly allows
//!   it with the requirement `{key: <topologyKey>, operator: DoesNotExist}`; such hosts are then each their own
//!   domain. Hosts this cluster already holds count toward the constraint.
//! - A host serves one role of one cluster: control-plane and worker roles never take the same host.
//! - Kept claims come first: a failed or vanished active host is replaced by promoting a standby of the same
//!   role, then new hosts fill the active count, then the standby count, in name order (plans are
//!   reproducible whatever order the hosts were listed in).
//! - If any role cannot be filled, the plan is `Unschedulable`: it claims no free host, releases held hosts that
//!   no earlier successful schedule confirmed (the leftovers of an interrupted apply), and keeps the confirmed
//!   ones that still serve (promoting a standby among them when an active failed).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::controllers::common::Ownership;
use crate::crd::sip::{NodeSet, RoleHosts};

/// On every service object: the SIPCluster's name.
pub const OWNER_LABEL: &str = "sip.airshipit.org/sipcluster";
/// How the service objects are marked: the SIPCluster's name and generation.
pub const OWNERSHIP: Ownership = Ownership {
    owner_label: OWNER_LABEL,
    generation_label: "sip.airshipit.org/generation",
};
pub const CLUSTER_NAMESPACE_LABEL: &str = "sip.airshipit.org/cluster-namespace";
pub const CLUSTER_NAME_LABEL: &str = "sip.airshipit.org/cluster-name";
pub const NODE_TYPE_LABEL: &str = "sip.airshipit.org/node-type";
pub const STANDBY_LABEL: &str = "sip.airshipit.org/standby";

/// A BareMetalHost as the planner sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub has_network_data: bool,
    /// `status.provisioning.state`.
    pub state: String,
    /// The host cannot serve (operational status `error`, provisioning error, being deleted).
    pub failed: bool,
    /// Why its networkData or BMC credentials could not be read; such a host is skipped.
    pub unreadable: Option<String>,
}

/// A claim as the labels record it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Claim {
    pub namespace: String,
    pub cluster: String,
    pub role: String,
    pub standby: bool,
}

impl Host {
    pub fn claim(&self) -> Option<Claim> {
        let get = |k: &str| self.labels.get(k).cloned();
        Some(Claim {
            namespace: get(CLUSTER_NAMESPACE_LABEL)?,
            cluster: get(CLUSTER_NAME_LABEL)?,
            role: get(NODE_TYPE_LABEL).unwrap_or_default(),
            standby: self.labels.get(STANDBY_LABEL).is_some_and(|v| v == "true"),
        })
    }
}

/// The cluster being planned.
#[derive(Clone, Debug)]
pub struct Cluster<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub nodes: &'a BTreeMap<String, NodeSet>,
    /// The hosts by role that an earlier successful schedule recorded in the status.
    pub confirmed: &'a BTreeMap<String, RoleHosts>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Chosen hosts by role (when unschedulable: the confirmed hosts that still serve).
    pub roles: BTreeMap<String, RoleHosts>,
    /// Labels to write: host → claim (new claims, and changed ones such as a promoted standby).
    pub claims: BTreeMap<String, Claim>,
    /// Hosts whose claim labels this cluster removes.
    pub releases: BTreeSet<String>,
    /// Per role, why it cannot be filled (empty: schedulable).
    pub unschedulable: Vec<String>,
    /// Confirmed active hosts that failed or vanished, and the standby promoted in each one's place (if any).
    pub replaced: Vec<(String, Option<String>)>,
    /// Hosts matching some role's selector but skipped, with the reason.
    pub skipped: Vec<(String, String)>,
}

/// Whether `labels` satisfy `selector` (Kubernetes semantics; no selector matches everything).
pub fn matches(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(sel) = selector else { return true };
    if let Some(ml) = &sel.match_labels {
        if ml.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            return false;
        }
    }
    for r in sel.match_expressions.iter().flatten() {
        let values = r.values.as_deref().unwrap_or_default();
        let value = labels.get(&r.key);
        let ok = match r.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

fn allows_missing_topology(set: &NodeSet, key: &str) -> bool {
    set.label_selector
        .as_ref()
        .and_then(|s| s.match_expressions.as_ref())
        .is_some_and(|rs| {
            rs.iter()
                .any(|r| r.key == key && r.operator == "DoesNotExist")
        })
}

/// The anti-affinity domain of `host` for a role: `Err` when the host lacks the topology label and the role
/// does not allow that; `Ok(None)` when the host constrains nothing.
fn domain(set: &NodeSet, host: &Host) -> Result<Option<String>, String> {
    match &set.topology_key {
        None => Ok(None),
        Some(key) => match host.labels.get(key) {
            Some(v) => Ok(Some(v.clone())),
            None if allows_missing_topology(set, key) => Ok(None),
            None => Err(format!("no {key} label")),
        },
    }
}

fn usable_state(state: &str) -> bool {
    matches!(state, "available" | "ready")
}

/// One role being filled.
#[derive(Default)]
struct Fill {
    active: Vec<String>,
    standby: Vec<String>,
    domains: BTreeSet<String>,
}

impl Fill {
    fn clashes(&self, dom: &Option<String>) -> bool {
        dom.as_ref().is_some_and(|d| self.domains.contains(d))
    }

    fn take(
        &mut self,
        taken: &mut BTreeSet<String>,
        name: &str,
        dom: Option<String>,
        standby: bool,
    ) {
        if let Some(d) = dom {
            self.domains.insert(d);
        }
        taken.insert(name.to_owned());
        if standby {
            self.standby.push(name.to_owned());
        } else {
            self.active.push(name.to_owned());
        }
    }
}

pub fn plan(cluster: &Cluster<'_>, hosts: &[Host]) -> Plan {
    let mut plan = Plan::default();
    let mut sorted: Vec<&Host> = hosts.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let ours = |h: &Host| {
        h.claim()
            .filter(|c| c.namespace == cluster.namespace && c.cluster == cluster.name)
    };
    let held: Vec<&Host> = sorted
        .iter()
        .copied()
        .filter(|h| ours(h).is_some())
        .collect();
    // Hosts taken in this plan, by any role.
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let mut chosen: BTreeMap<String, RoleHosts> = BTreeMap::new();
    let mut claims: BTreeMap<String, Claim> = BTreeMap::new();
    let mut skipped: BTreeMap<String, String> = BTreeMap::new();

    for (role, set) in cluster.nodes {
        let count = set.count.clone().unwrap_or_default();
        let want_active = usize::try_from(count.active).unwrap_or(0);
        let want_standby = usize::try_from(count.standby).unwrap_or(0);
        let selector = set.label_selector.as_ref();
        let mut fill = Fill::default();
        // 1. This role's claims on hosts that still serve: actives stay active, standbys wait for step 2.
        let mut kept_standby: Vec<(&Host, Option<String>)> = Vec::new();
        for h in &held {
            let claim = ours(h).expect("held");
            if claim.role != *role {
                continue;
            }
            let serves = !h.failed
                && h.unreadable.is_none()
                && h.has_network_data
                && matches(selector, &h.labels);
            let Ok(dom) = domain(set, h) else { continue };
            if !serves || fill.clashes(&dom) {
                continue;
            }
            if !claim.standby && fill.active.len() < want_active {
                fill.take(&mut taken, &h.name, dom, false);
            } else {
                kept_standby.push((h, dom));
            }
        }
        // 2. Held standbys fill missing actives first (a promotion), then stay standby up to the count.
        for (h, dom) in kept_standby {
            if fill.clashes(&dom) {
                continue;
            }
            if fill.active.len() < want_active {
                fill.take(&mut taken, &h.name, dom, false);
            } else if fill.standby.len() < want_standby {
                fill.take(&mut taken, &h.name, dom, true);
            }
        }
        // 3. Free hosts, in name order: actives, then standbys. Every matching host is looked at, so the
        // status names each one that could not serve even when the role is full.
        for h in &sorted {
            let full = fill.active.len() >= want_active && fill.standby.len() >= want_standby;
            if taken.contains(&h.name) || h.claim().is_some() || !matches(selector, &h.labels) {
                continue;
            }
            let why = if let Some(u) = &h.unreadable {
                u.clone()
            } else if !h.has_network_data {
                "no spec.networkData".to_owned()
            } else if h.failed {
                "failed".to_owned()
            } else if !usable_state(&h.state) {
                continue; // inspecting, provisioned for something else, …: not free, nothing to report
            } else {
                match domain(set, h) {
                    Err(why) => why,
                    Ok(dom) if full || fill.clashes(&dom) => continue,
                    Ok(dom) => {
                        let standby = fill.active.len() >= want_active;
                        fill.take(&mut taken, &h.name, dom, standby);
                        continue;
                    }
                }
            };
            skipped.entry(h.name.clone()).or_insert(why);
        }
        if fill.active.len() < want_active || fill.standby.len() < want_standby {
            plan.unschedulable.push(format!(
                "{role}: {want_active} active and {want_standby} standby wanted, {} and {} schedulable",
                fill.active.len(),
                fill.standby.len()
            ));
        }
        for (names, standby) in [(&fill.active, false), (&fill.standby, true)] {
            for n in names {
                claims.insert(
                    n.clone(),
                    Claim {
                        namespace: cluster.namespace.to_owned(),
                        cluster: cluster.name.to_owned(),
                        role: role.clone(),
                        standby,
                    },
                );
            }
        }
        chosen.insert(
            role.clone(),
            RoleHosts {
                active: fill.active,
                standby: fill.standby,
            },
        );
    }

    // Replacements: confirmed actives that failed or vanished, paired with the standbys now promoted.
    let serving: BTreeSet<&str> = hosts
        .iter()
        .filter(|h| !h.failed)
        .map(|h| h.name.as_str())
        .collect();
    for (role, before) in cluster.confirmed {
        let now = chosen.get(role).cloned().unwrap_or_default();
        let mut promoted = now.active.iter().filter(|n| before.standby.contains(n));
        for gone in before
            .active
            .iter()
            .filter(|n| !serving.contains(n.as_str()))
        {
            plan.replaced.push((gone.clone(), promoted.next().cloned()));
        }
    }

    // Schedulable: every chosen host is claimed. Unschedulable: no free host is claimed, and of the held hosts
    // only those an earlier successful schedule confirmed stay (a promotion among them still happens);
    // unconfirmed ones are the leftovers of an interrupted apply and are released.
    let confirmed: BTreeSet<&String> = cluster
        .confirmed
        .values()
        .flat_map(|r| r.active.iter().chain(&r.standby))
        .collect();
    let schedulable = plan.unschedulable.is_empty();
    let keep = |name: &String| {
        schedulable || (held.iter().any(|h| &h.name == name) && confirmed.contains(name))
    };
    for h in &held {
        if !claims.contains_key(&h.name) || !keep(&h.name) {
            plan.releases.insert(h.name.clone());
        }
    }
    for (name, claim) in claims {
        if !keep(&name) {
            continue;
        }
        let host = hosts
            .iter()
            .find(|h| h.name == name)
            .expect("chosen from hosts");
        if ours(host).as_ref() != Some(&claim) {
            plan.claims.insert(name, claim);
        }
    }
    for (role, rh) in chosen {
        let rh = RoleHosts {
            active: rh.active.into_iter().filter(|n| keep(n)).collect(),
            standby: rh.standby.into_iter().filter(|n| keep(n)).collect(),
        };
        if !rh.active.is_empty() || !rh.standby.is_empty() {
            plan.roles.insert(role, rh);
        }
    }
    plan.skipped = skipped.into_iter().collect();
    plan
}
