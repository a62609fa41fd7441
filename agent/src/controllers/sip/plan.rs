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

use crate::crd::sip::{NodeSet, RoleHosts};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::sip::NodeCount;
    use proptest::prelude::*;
    use serde_json::json;

    fn host(name: &str, rack: Option<&str>, pool: &str) -> Host {
        let mut labels = BTreeMap::from([("pool".to_owned(), pool.to_owned())]);
        if let Some(r) = rack {
            labels.insert("rack".into(), r.into());
        }
        Host {
            name: name.into(),
            labels,
            has_network_data: true,
            state: "available".into(),
            ..Host::default()
        }
    }

    fn set(pool: &str, topology: Option<&str>, active: i32, standby: i32) -> NodeSet {
        serde_json::from_value(json!({
            "labelSelector": {"matchLabels": {"pool": pool}},
            "topologyKey": topology,
            "count": {"active": active, "standby": standby},
        }))
        .unwrap()
    }

    fn nodes(cp: NodeSet, worker: NodeSet) -> BTreeMap<String, NodeSet> {
        BTreeMap::from([("ControlPlane".into(), cp), ("Worker".into(), worker)])
    }

    fn rh(active: &[&str], standby: &[&str]) -> RoleHosts {
        RoleHosts {
            active: active.iter().map(|s| s.to_string()).collect(),
            standby: standby.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Writes the plan's labels into `hosts`, as the reconciler would.
    fn apply(hosts: &mut [Host], p: &Plan) {
        for h in hosts.iter_mut() {
            if p.releases.contains(&h.name) {
                for k in [
                    CLUSTER_NAMESPACE_LABEL,
                    CLUSTER_NAME_LABEL,
                    NODE_TYPE_LABEL,
                    STANDBY_LABEL,
                ] {
                    h.labels.remove(k);
                }
            }
            if let Some(c) = p.claims.get(&h.name) {
                h.labels
                    .insert(CLUSTER_NAMESPACE_LABEL.into(), c.namespace.clone());
                h.labels
                    .insert(CLUSTER_NAME_LABEL.into(), c.cluster.clone());
                h.labels.insert(NODE_TYPE_LABEL.into(), c.role.clone());
                if c.standby {
                    h.labels.insert(STANDBY_LABEL.into(), "true".into());
                } else {
                    h.labels.remove(STANDBY_LABEL);
                }
            }
        }
    }

    const NONE: BTreeMap<String, RoleHosts> = BTreeMap::new();

    #[test]
    fn spreads_each_role_over_racks_in_name_order_and_never_shares_a_host() {
        let hosts = vec![
            host("h1", Some("r1"), "a"),
            host("h2", Some("r1"), "a"),
            host("h3", Some("r2"), "a"),
            host("h4", Some("r3"), "a"),
            host("h5", Some("r2"), "a"),
            host("h6", Some("r3"), "a"),
        ];
        let n = nodes(set("a", Some("rack"), 2, 1), set("a", None, 2, 0));
        let c = Cluster {
            namespace: "t",
            name: "c",
            nodes: &n,
            confirmed: &NONE,
        };
        let p = plan(&c, &hosts);
        assert!(p.unschedulable.is_empty(), "{p:?}");
        assert_eq!(p.roles["ControlPlane"], rh(&["h1", "h3"], &["h4"]));
        assert_eq!(p.roles["Worker"], rh(&["h2", "h5"], &[]));
        assert_eq!(p.claims.len(), 5);
        assert!(p.claims["h4"].standby && !p.claims["h1"].standby);
        assert_eq!(p.claims["h2"].role, "Worker");
        assert!(p.releases.is_empty());
    }

    #[test]
    fn too_few_racks_is_unschedulable_with_counts_and_claims_nothing() {
        let mut hosts = vec![
            host("h1", Some("r1"), "a"),
            host("h2", Some("r1"), "a"),
            host("h3", Some("r2"), "a"),
        ];
        // h2 carries a leftover claim of ours from an interrupted apply.
        apply(
            &mut hosts,
            &Plan {
                claims: BTreeMap::from([(
                    "h2".into(),
                    Claim {
                        namespace: "t".into(),
                        cluster: "c".into(),
                        role: "ControlPlane".into(),
                        standby: false,
                    },
                )]),
                ..Plan::default()
            },
        );
        let n = BTreeMap::from([("ControlPlane".to_owned(), set("a", Some("rack"), 3, 0))]);
        let c = Cluster {
            namespace: "t",
            name: "c",
            nodes: &n,
            confirmed: &NONE,
        };
        let p = plan(&c, &hosts);
        assert_eq!(
            p.unschedulable,
            ["ControlPlane: 3 active and 0 standby wanted, 2 and 0 schedulable"]
        );
        assert!(p.claims.is_empty());
        assert_eq!(p.releases, BTreeSet::from(["h2".to_owned()]));
        assert!(p.roles.is_empty());
    }

    #[test]
    fn a_failed_active_is_replaced_by_its_standby_and_a_spare_becomes_standby() {
        let n = BTreeMap::from([("ControlPlane".to_owned(), set("a", Some("rack"), 2, 1))]);
        let mut hosts = vec![
            host("a", Some("r1"), "a"),
            host("b", Some("r2"), "a"),
            host("c", Some("r3"), "a"),
        ];
        let c = Cluster {
            namespace: "t",
            name: "c",
            nodes: &n,
            confirmed: &NONE,
        };
        let first = plan(&c, &hosts);
        apply(&mut hosts, &first);
        let confirmed = first.roles.clone();
        hosts[0].failed = true;
        let c = Cluster {
            confirmed: &confirmed,
            ..c
        };
        // No spare: the standby is still promoted, the failed host released, the role unschedulable.
        let p = plan(&c, &hosts);
        assert_eq!(p.replaced, [("a".to_owned(), Some("c".to_owned()))]);
        assert_eq!(p.roles["ControlPlane"], rh(&["b", "c"], &[]));
        assert!(!p.claims["c"].standby && p.claims.len() == 1);
        assert_eq!(p.releases, BTreeSet::from(["a".to_owned()]));
        assert_eq!(p.unschedulable.len(), 1);
        // With a spare in the failed host's rack, it becomes the new standby.
        hosts.push(host("d", Some("r1"), "a"));
        let p = plan(&c, &hosts);
        assert!(p.unschedulable.is_empty());
        assert_eq!(p.roles["ControlPlane"], rh(&["b", "c"], &["d"]));
        assert_eq!(p.replaced, [("a".to_owned(), Some("c".to_owned()))]);
        // A vanished active is replaced the same way.
        hosts.retain(|h| h.name != "a");
        assert_eq!(
            plan(&c, &hosts).replaced,
            [("a".to_owned(), Some("c".to_owned()))]
        );
    }

    #[test]
    fn hosts_without_the_topology_label_only_when_the_selector_allows_it() {
        let hosts = vec![host("x", None, "a"), host("y", None, "a")];
        let n = BTreeMap::from([("Worker".to_owned(), set("a", Some("rack"), 2, 0))]);
        let c = Cluster {
            namespace: "t",
            name: "c",
            nodes: &n,
            confirmed: &NONE,
        };
        let p = plan(&c, &hosts);
        assert_eq!(
            p.skipped,
            [
                ("x".to_owned(), "no rack label".to_owned()),
                ("y".to_owned(), "no rack label".to_owned())
            ]
        );
        assert_eq!(p.unschedulable.len(), 1);
        let allowing: NodeSet = serde_json::from_value(json!({
            "labelSelector": {"matchLabels": {"pool": "a"},
                              "matchExpressions": [{"key": "rack", "operator": "DoesNotExist"}]},
            "topologyKey": "rack", "count": {"active": 2},
        }))
        .unwrap();
        let n = BTreeMap::from([("Worker".to_owned(), allowing)]);
        let c = Cluster { nodes: &n, ..c };
        assert_eq!(plan(&c, &hosts).roles["Worker"], rh(&["x", "y"], &[]));
    }

    #[test]
    fn other_clusters_busy_unreadable_and_networkless_hosts_are_not_candidates() {
        let mut other = host("a", Some("r1"), "a");
        other.labels.extend([
            (CLUSTER_NAMESPACE_LABEL.to_owned(), "t".to_owned()),
            (CLUSTER_NAME_LABEL.to_owned(), "other".to_owned()),
            (NODE_TYPE_LABEL.to_owned(), "Worker".to_owned()),
        ]);
        let mut busy = host("b", Some("r2"), "a");
        busy.state = "provisioned".into();
        let mut bare = host("c", Some("r3"), "a");
        bare.has_network_data = false;
        let mut secretless = host("d", Some("r4"), "a");
        secretless.unreadable = Some("Secret d-bmc: not found".into());
        let fine = host("e", Some("r5"), "a");
        let n = BTreeMap::from([("Worker".to_owned(), set("a", None, 1, 0))]);
        let c = Cluster {
            namespace: "t",
            name: "c",
            nodes: &n,
            confirmed: &NONE,
        };
        let p = plan(&c, &[other, busy, bare, secretless, fine]);
        assert_eq!(p.roles["Worker"], rh(&["e"], &[]));
        assert_eq!(
            p.skipped,
            [
                ("c".to_owned(), "no spec.networkData".to_owned()),
                ("d".to_owned(), "Secret d-bmc: not found".to_owned())
            ]
        );
    }

    #[test]
    fn selectors_follow_kubernetes_semantics() {
        let labels = BTreeMap::from([
            ("a".to_owned(), "1".to_owned()),
            ("b".to_owned(), "2".to_owned()),
        ]);
        let sel = |v: serde_json::Value| -> LabelSelector { serde_json::from_value(v).unwrap() };
        assert!(matches(None, &labels));
        assert!(matches(
            Some(&sel(json!({"matchLabels": {"a": "1"}}))),
            &labels
        ));
        assert!(!matches(
            Some(&sel(json!({"matchLabels": {"a": "2"}}))),
            &labels
        ));
        for (op, values, want) in [
            ("In", json!(["1", "3"]), true),
            ("In", json!(["3"]), false),
            ("NotIn", json!(["1"]), false),
            ("NotIn", json!(["3"]), true),
            ("Exists", json!(null), true),
            ("DoesNotExist", json!(null), false),
            ("Bogus", json!(null), false),
        ] {
            let s =
                sel(json!({"matchExpressions": [{"key": "a", "operator": op, "values": values}]}));
            assert_eq!(matches(Some(&s), &labels), want, "{op}");
        }
        let s =
            sel(json!({"matchExpressions": [{"key": "zz", "operator": "NotIn", "values": ["1"]}]}));
        assert!(matches(Some(&s), &labels));
    }

    fn arb_hosts() -> impl Strategy<Value = Vec<Host>> {
        proptest::collection::vec(
            (
                proptest::option::weighted(0.9, 0u8..6),
                0u8..2,
                prop_oneof![8 => Just("available"), 1 => Just("ready"), 1 => Just("provisioning")],
                proptest::bool::weighted(0.9),
            ),
            0..40,
        )
        .prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (rack, pool, state, net))| {
                    let rack = rack.map(|r| format!("r{r}"));
                    let mut h = host(&format!("h{i:02}"), rack.as_deref(), &format!("p{pool}"));
                    h.state = state.into();
                    h.has_network_data = net;
                    h
                })
                .collect()
        })
    }

    fn arb_nodes() -> impl Strategy<Value = BTreeMap<String, NodeSet>> {
        (
            (0i32..4, 0i32..3, any::<bool>()),
            (0i32..6, 0i32..3, any::<bool>()),
            any::<bool>(),
        )
            .prop_map(|(cp, w, shared_pool)| {
                let mk = |(a, s, rack): (i32, i32, bool), pool: &str| NodeSet {
                    count: Some(NodeCount {
                        active: a,
                        standby: s,
                    }),
                    topology_key: rack.then(|| "rack".to_owned()),
                    ..set(pool, None, 0, 0)
                };
                // Sometimes both roles select from the same pool: they must still never share a host.
                nodes(mk(cp, "p0"), mk(w, if shared_pool { "p0" } else { "p1" }))
            })
    }

    fn check_role_constraints(
        p: &Plan,
        hosts: &[Host],
        n: &BTreeMap<String, NodeSet>,
    ) -> Result<(), TestCaseError> {
        let mut seen = BTreeSet::new();
        for (role, rh) in &p.roles {
            let mut racks = BTreeSet::new();
            for name in rh.active.iter().chain(&rh.standby) {
                prop_assert!(seen.insert(name.clone()), "{name} serves two roles");
                let h = hosts.iter().find(|h| &h.name == name).unwrap();
                if n[role].topology_key.is_some() {
                    let rack = h
                        .labels
                        .get("rack")
                        .expect("no rack-less host without DoesNotExist");
                    prop_assert!(racks.insert(rack.clone()), "{role} uses {rack} twice");
                }
            }
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn two_clusters_never_share_a_host_and_plans_are_deterministic_and_stable(
            mut hosts in arb_hosts(), na in arb_nodes(), nb in arb_nodes(), seed in any::<u64>(),
        ) {
            let a = Cluster { namespace: "t", name: "a", nodes: &na, confirmed: &NONE };
            let pa = plan(&a, &hosts);
            // Deterministic whatever the listing order.
            let mut shuffled = hosts.clone();
            let len = shuffled.len();
            for i in 0..len { shuffled.swap(i, (seed as usize).wrapping_mul(31).wrapping_add(i * 7) % len.max(1)); }
            prop_assert_eq!(&plan(&a, &shuffled), &pa);
            check_role_constraints(&pa, &hosts, &na)?;
            if pa.unschedulable.is_empty() {
                for (role, rh) in &pa.roles {
                    let c = na[role].count.clone().unwrap();
                    prop_assert_eq!((rh.active.len(), rh.standby.len()), (c.active as usize, c.standby as usize));
                    // A fresh plan fills actives before standbys, in name order.
                    if let (Some(last), Some(first)) = (rh.active.last(), rh.standby.first()) {
                        prop_assert!(last < first, "{:?}", rh);
                    }
                }
            } else {
                prop_assert!(pa.claims.is_empty());
            }
            apply(&mut hosts, &pa);
            // Idempotent: the applied plan plans nothing more.
            let a2 = Cluster { confirmed: &pa.roles, ..a.clone() };
            let again = plan(&a2, &hosts);
            prop_assert!(again.claims.is_empty() && again.releases.is_empty(), "{:?}", again);
            prop_assert_eq!(&again.roles, &pa.roles);
            // A second cluster never takes a host of the first.
            let b = Cluster { namespace: "t", name: "b", nodes: &nb, confirmed: &NONE };
            let pb = plan(&b, &hosts);
            check_role_constraints(&pb, &hosts, &nb)?;
            let of_a: BTreeSet<&String> = pa.claims.keys().collect();
            for name in pb.claims.keys().chain(pb.releases.iter()) {
                prop_assert!(!of_a.contains(name), "b touched a's host {name}");
            }
        }
    }
}
