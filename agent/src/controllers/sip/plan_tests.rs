//! SIP's planner, pure: properties over generated pools and the cases that once went wrong.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::plan::*;
use crate::crd::sip::NodeCount;
use crate::crd::sip::{NodeSet, RoleHosts};
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
        let s = sel(json!({"matchExpressions": [{"key": "a", "operator": op, "values": values}]}));
        assert_eq!(matches(Some(&s), &labels), want, "{op}");
    }
    let s = sel(json!({"matchExpressions": [{"key": "zz", "operator": "NotIn", "values": ["1"]}]}));
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
