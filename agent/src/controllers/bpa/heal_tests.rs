//! BPA's healing planner, pure: whose remediation starts (drained, then rebooted), when a drain has had its
//! time, when remediations end, and the limits.

use super::heal::*;
use crate::crd::bpa::Healing;
use proptest::prelude::*;

const NOW: i64 = 1_000_000;

fn policy() -> Policy {
    Policy::of(None)
}

fn node(name: &str, control_plane: bool, not_ready_for: Option<i64>) -> Node {
    Node {
        name: name.into(),
        bare_metal_host: Some(format!("bmh-{name}")),
        control_plane,
        not_ready_since: not_ready_for.map(|s| NOW - s),
    }
}

fn under_way(node: &str, started_ago: i64) -> Past {
    Past {
        node: node.into(),
        bare_metal_host: format!("bmh-{node}"),
        started: NOW - started_ago,
        draining: false,
        rebooted: None,
        reprovisioned: None,
        outcome: None,
        recovered: false,
    }
}

fn reboots(d: &Decision) -> Vec<&str> {
    d.start.iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn the_defaults_are_those_the_crd_documents() {
    assert_eq!(
        Policy::of(None),
        Policy {
            enabled: true,
            not_ready: 300,
            reboot_timeout: 900,
            drain_timeout: 120,
            reprovision: true,
            reprovision_timeout: 3600,
            max_unhealthy_percent: 50,
            max_remediations: 3,
            window: 3600,
        }
    );
    let given = Policy::of(Some(&Healing {
        not_ready_seconds: Some(30),
        max_unhealthy_percent: Some(100),
        ..Healing::default()
    }));
    assert_eq!((given.not_ready, given.max_unhealthy_percent), (30, 100));
    assert_eq!(given.reboot_timeout, 900);
}

#[test]
fn a_node_not_ready_past_the_threshold_is_rebooted_through_its_host_and_not_before() {
    let nodes = [
        node("master-0", true, None),
        node("worker-0", false, Some(299)),
    ];
    let d = decide(&policy(), &nodes, &[], NOW);
    assert!(d.start.is_empty());
    assert_eq!((d.healthy, d.reason), (false, "NodeNotReady"));
    assert_eq!(
        d.message,
        "worker-0: NotReady for 299 s (unhealthy after 300 s)"
    );

    let nodes = [
        node("master-0", true, None),
        node("worker-0", false, Some(300)),
    ];
    let d = decide(&policy(), &nodes, &[], NOW);
    assert_eq!(
        d.start,
        [("worker-0".to_owned(), "bmh-worker-0".to_owned())]
    );
    assert_eq!((d.healthy, d.reason), (false, "Remediating"));
    assert!(!d.held);
    assert_eq!(
        d.message,
        "worker-0: drained before its reboot through BareMetalHost bmh-worker-0"
    );
}

#[test]
fn a_drain_has_its_time_then_the_reboot_times_from_when_it_was_asked() {
    let nodes = [node("w", false, Some(1000)), node("x", false, None)];
    let draining = |ago| Past {
        draining: true,
        ..under_way("w", ago)
    };
    // Within its time: draining, not overdue; neither started again nor ended, however long the node is down.
    let d = decide(&policy(), &nodes, &[draining(119)], NOW);
    assert_eq!(d.draining, [(0, false)]);
    assert!(d.start.is_empty() && d.ended.is_empty());
    assert_eq!(d.reason, "Remediating");
    assert_eq!(
        d.message,
        "w: drained before its reboot through BareMetalHost bmh-w"
    );
    // Past it: overdue (the reboot goes ahead). Still not NotHealed, whatever the reboot timeout: no reboot yet.
    let d = decide(&policy(), &nodes, &[draining(5000)], NOW);
    assert_eq!(d.draining, [(0, true)]);
    assert!(d.ended.is_empty());
    // Rebooted 899 s ago after a long drain: still under way; 900 s: not healed.
    let rebooted = |ago| Past {
        rebooted: Some(NOW - ago),
        ..under_way("w", 5000)
    };
    let d = decide(&policy(), &nodes, &[rebooted(899)], NOW);
    assert!(d.ended.is_empty() && d.draining.is_empty());
    assert_eq!(d.message, "w: rebooting through BareMetalHost bmh-w");
    let d = decide(&policy(), &nodes, &[rebooted(900)], NOW);
    assert_eq!((d.ended.clone(), d.reprovision), (vec![], vec![0]));
    // Ready again during its drain: healed, nothing to reboot.
    let back = [node("w", false, None), node("x", false, None)];
    let d = decide(&policy(), &back, &[draining(10)], NOW);
    assert_eq!(d.ended, [(0, Outcome::Healed)]);
    assert!(d.draining.is_empty() && d.start.is_empty());
}

#[test]
fn a_worker_its_reboot_did_not_heal_is_reprovisioned_a_control_plane_is_left() {
    let rebooted = |n: &str| Past {
        rebooted: Some(NOW - 900),
        ..under_way(n, 1000)
    };
    let nodes = [
        node("m", true, Some(2000)),
        node("w", false, Some(2000)),
        node("x", false, None),
        node("y", false, None),
    ];
    let d = decide(&policy(), &nodes, &[rebooted("m"), rebooted("w")], NOW);
    assert_eq!(d.reprovision, [1]);
    assert_eq!(d.ended, [(0, Outcome::NotHealed)]);
    assert!(
        d.message
            .contains("w: re-provisioned through BareMetalHost bmh-w: its reboot did not heal it"),
        "{}",
        d.message
    );
    assert!(
        d.message
            .contains("m: not Ready after its reboot, left to the operator"),
        "{}",
        d.message
    );
    // Off, or too many unhealthy: left to the operator as well.
    let off = Policy {
        reprovision: false,
        ..policy()
    };
    let d = decide(&off, &nodes, &[rebooted("w")], NOW);
    assert_eq!(
        (d.reprovision.len(), d.ended.clone()),
        (0, vec![(0, Outcome::NotHealed)])
    );
    let d = decide(&policy(), &nodes[..2], &[rebooted("w")], NOW);
    assert_eq!(
        (d.reprovision.len(), d.ended.clone()),
        (0, vec![(0, Outcome::NotHealed)])
    );
}

#[test]
fn a_reprovisioning_waits_for_its_node_to_join_within_its_time() {
    let reprovisioning = |ago| Past {
        rebooted: Some(NOW - 5000),
        reprovisioned: Some(NOW - ago),
        ..under_way("w", 6000)
    };
    // Its Node deleted: under way, not gone; the condition says so.
    let others = [node("m", true, None), node("x", false, None)];
    let d = decide(&policy(), &others, &[reprovisioning(100)], NOW);
    assert!(d.ended.is_empty() && d.reprovision.is_empty() && d.start.is_empty());
    assert_eq!((d.healthy, d.reason), (false, "Remediating"));
    assert_eq!(
        d.message,
        "w: re-provisioned through BareMetalHost bmh-w, to join again"
    );
    // Joined, not Ready yet: still under way, and not remediated again.
    let joined = [
        node("m", true, None),
        node("w", false, Some(1000)),
        node("x", false, None),
    ];
    let d = decide(&policy(), &joined, &[reprovisioning(100)], NOW);
    assert!(d.ended.is_empty() && d.start.is_empty());
    // Ready: healed; past its time: not healed.
    let ready = [node("m", true, None), node("w", false, None)];
    let d = decide(&policy(), &ready, &[reprovisioning(100)], NOW);
    assert_eq!(d.ended, [(0, Outcome::Healed)]);
    let d = decide(&policy(), &others, &[reprovisioning(3600)], NOW);
    assert_eq!(d.ended, [(0, Outcome::NotHealed)]);
}

#[test]
fn all_ready_is_healthy() {
    let nodes = [node("master-0", true, None), node("worker-0", false, None)];
    let d = decide(&policy(), &nodes, &[], NOW);
    assert_eq!((d.healthy, d.reason), (true, "NodesReady"));
    assert_eq!(d.message, "all 2 nodes Ready");
    assert!(d.start.is_empty() && d.ended.is_empty());
}

#[test]
fn a_remediation_ends_healed_not_healed_or_with_its_node_gone() {
    let past = [
        under_way("a", 100),
        under_way("b", 899),
        under_way("c", 900),
        under_way("gone", 10),
    ];
    let nodes = [
        node("a", false, None),
        node("b", false, Some(1000)),
        node("c", true, Some(1000)),
        node("d", false, None),
        node("e", false, None),
        node("f", false, None),
    ];
    let d = decide(&policy(), &nodes, &past, NOW);
    assert_eq!(
        d.ended,
        [
            (0, Outcome::Healed),
            (2, Outcome::NotHealed),
            (3, Outcome::NodeGone)
        ]
    );
    // b is still under way, c is left to the operator: neither is rebooted again.
    assert!(d.start.is_empty());
    assert_eq!(d.reason, "NotHealed");
    assert!(
        d.message.contains(
            "c: not Ready after its reboot, left to the operator until it is Ready again"
        ),
        "{}",
        d.message
    );
    assert!(d
        .message
        .contains("b: rebooting through BareMetalHost bmh-b"));
}

#[test]
fn a_node_left_to_the_operator_is_eligible_again_once_it_was_ready() {
    let not_healed = Past {
        outcome: Some(Outcome::NotHealed),
        ..under_way("w", 2000)
    };
    let still_down = [node("w", false, Some(3000)), node("x", false, None)];
    let d = decide(
        &policy(),
        &still_down,
        std::slice::from_ref(&not_healed),
        NOW,
    );
    assert!(d.start.is_empty() && d.recovered.is_empty());
    assert_eq!(d.reason, "NotHealed");

    let ready = [node("w", false, None), node("x", false, None)];
    let d = decide(&policy(), &ready, std::slice::from_ref(&not_healed), NOW);
    assert_eq!(d.recovered, [0]);
    assert!(d.healthy);

    let recovered = Past {
        recovered: true,
        ..not_healed
    };
    let down_again = [node("w", false, Some(400)), node("x", false, None)];
    let d = decide(&policy(), &down_again, &[recovered], NOW);
    assert_eq!(reboots(&d), ["w"]);
}

#[test]
fn more_than_the_share_unhealthy_holds_everything() {
    let nodes = [
        node("master-0", true, Some(600)),
        node("worker-0", false, Some(600)),
    ];
    let d = decide(&policy(), &nodes, &[], NOW);
    assert!(d.start.is_empty());
    assert_eq!((d.healthy, d.reason), (false, "TooManyUnhealthy"));
    assert!(d.held);
    assert!(
        d.message
            .ends_with("2 of 2 nodes unhealthy, more than 50 %: nothing is remediated"),
        "{}",
        d.message
    );
    // One of the two is exactly the share: remediated.
    let nodes = [
        node("master-0", true, None),
        node("worker-0", false, Some(600)),
    ];
    assert_eq!(reboots(&decide(&policy(), &nodes, &[], NOW)), ["worker-0"]);
    // A cluster of one node is healed only with a share of 100 %.
    let alone = [node("master-0", true, Some(600))];
    assert!(decide(&policy(), &alone, &[], NOW).start.is_empty());
    let all = Policy {
        max_unhealthy_percent: 100,
        ..policy()
    };
    assert_eq!(reboots(&decide(&all, &alone, &[], NOW)), ["master-0"]);
}

#[test]
fn the_window_limits_how_many_start_and_moves_on() {
    let nodes: Vec<Node> = (0..8)
        .map(|i| node(&format!("w{i}"), false, (i < 3).then_some(600)))
        .collect();
    let before = [
        Past {
            outcome: Some(Outcome::Healed),
            ..under_way("w5", 3599)
        },
        Past {
            outcome: Some(Outcome::Healed),
            ..under_way("w6", 1000)
        },
    ];
    let d = decide(&policy(), &nodes, &before, NOW);
    assert_eq!(reboots(&d), ["w0"]);
    assert_eq!(d.reason, "RemediationLimit");
    // An hour after the first, it no longer counts.
    let d = decide(&policy(), &nodes, &before, NOW + 1);
    assert_eq!(reboots(&d), ["w0", "w1"]);
}

#[test]
fn one_control_plane_host_at_a_time() {
    let nodes = [
        node("m0", true, Some(600)),
        node("m1", true, Some(600)),
        node("m2", true, None),
        node("w0", false, None),
        node("w1", false, None),
    ];
    let d = decide(&policy(), &nodes, &[], NOW);
    assert_eq!(reboots(&d), ["m0"]);
    assert_eq!(d.reason, "ControlPlaneBusy");
    let d = decide(&policy(), &nodes, &[under_way("m0", 60)], NOW);
    assert!(d.start.is_empty());
    assert_eq!(d.reason, "ControlPlaneBusy");
}

#[test]
fn off_or_without_a_host_nothing_is_rebooted_and_the_condition_says_why() {
    let nodes = [node("m0", true, None), node("w0", false, Some(600))];
    let off = Policy {
        enabled: false,
        ..policy()
    };
    let d = decide(&off, &nodes, &[], NOW);
    assert!(d.start.is_empty());
    assert_eq!(d.reason, "HealingDisabled");
    let mut stray = nodes.clone();
    stray[1].bare_metal_host = None;
    let d = decide(&policy(), &stray, &[], NOW);
    assert!(d.start.is_empty());
    assert_eq!(d.reason, "NoBareMetalHost");
}

fn arb_nodes() -> impl Strategy<Value = Vec<Node>> {
    prop::collection::vec(
        (any::<bool>(), prop::option::of(0i64..2000), any::<bool>()),
        1..9,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (cp, down, has_host))| Node {
                name: format!("n{i}"),
                bare_metal_host: has_host.then(|| format!("bmh-{i}")),
                control_plane: cp,
                not_ready_since: down.map(|s| NOW - s),
            })
            .collect()
    })
}

fn arb_past() -> impl Strategy<Value = Vec<Past>> {
    let one = (0usize..9, 0i64..8000, 0u8..4, any::<bool>(), any::<bool>());
    prop::collection::vec(one, 0..6).prop_map(|v| {
        v.into_iter()
            .map(|(n, ago, outcome, recovered, draining)| Past {
                node: format!("n{n}"),
                bare_metal_host: format!("bmh-{n}"),
                started: NOW - ago,
                draining: draining && outcome == 0,
                rebooted: (!draining).then_some(NOW - ago / 2),
                reprovisioned: (!draining && ago % 3 == 0).then_some(NOW - ago / 3),
                outcome: [
                    None,
                    Some(Outcome::Healed),
                    Some(Outcome::NotHealed),
                    Some(Outcome::NodeGone),
                ][usize::from(outcome)],
                recovered,
            })
            .collect()
    })
}

fn arb_policy() -> impl Strategy<Value = Policy> {
    (any::<bool>(), 1i64..900, 0u32..=100, 0u32..5).prop_map(|(enabled, not_ready, share, max)| {
        Policy {
            enabled,
            not_ready,
            max_unhealthy_percent: share,
            max_remediations: max,
            ..Policy::of(None)
        }
    })
}

proptest! {
    /// Whatever the cluster and the history: only an unhealthy node with a host, not already under way, is
    /// rebooted, each once; never more than the window allows; never while more than the share is unhealthy
    /// or healing is off; never more than one control-plane host under way.
    #[test]
    fn reboots_stay_within_every_limit(policy in arb_policy(), nodes in arb_nodes(), past in arb_past()) {
        let d = decide(&policy, &nodes, &past, NOW);
        let unhealthy: Vec<&Node> = nodes
            .iter()
            .filter(|n| n.not_ready_since.is_some_and(|t| NOW - t >= policy.not_ready))
            .collect();
        let mut names: Vec<&str> = reboots(&d);
        names.dedup();
        prop_assert_eq!(names.len(), d.start.len());
        for (name, bmh) in &d.start {
            let n = unhealthy.iter().find(|n| &n.name == name);
            prop_assert!(n.is_some(), "{} rebooted but not unhealthy", name);
            prop_assert_eq!(n.unwrap().bare_metal_host.as_ref(), Some(bmh));
            let still_under_way = past.iter().enumerate().any(|(i, p)| {
                &p.node == name && p.outcome.is_none() && !d.ended.iter().any(|(e, _)| *e == i)
            });
            prop_assert!(!still_under_way, "{} rebooted twice", name);
            let just_left = d.ended.iter().any(|&(e, o)| o == Outcome::NotHealed && &past[e].node == name);
            prop_assert!(!just_left, "{} left to the operator and started again", name);
        }
        if !d.start.is_empty() {
            prop_assert!(policy.enabled);
            prop_assert!(unhealthy.len() * 100 <= policy.max_unhealthy_percent as usize * nodes.len());
        }
        let in_window = past.iter().filter(|p| NOW - p.started < policy.window).count();
        prop_assert!(
            d.start.is_empty() || in_window + d.start.len() <= policy.max_remediations as usize
        );
        let control_plane = |name: &str| nodes.iter().any(|n| n.name == name && n.control_plane);
        let cp_under_way = past
            .iter()
            .enumerate()
            .filter(|(i, p)| p.outcome.is_none() && !d.ended.iter().any(|(e, _)| e == i))
            .filter(|(_, p)| control_plane(&p.node))
            .count();
        let cp_new = d.start.iter().filter(|(n, _)| control_plane(n)).count();
        prop_assert!(cp_new <= 1);
        prop_assert!(cp_new == 0 || cp_under_way == 0);
        // A drain is only ever of a remediation under way that is draining, and each is looked at.
        for (i, overdue) in &d.draining {
            prop_assert!(past[*i].draining && past[*i].outcome.is_none());
            prop_assert_eq!(*overdue, NOW - past[*i].started >= policy.drain_timeout);
        }
        let draining_now = past.iter().enumerate().filter(|(i, p)| {
            p.draining && p.outcome.is_none() && !d.ended.iter().any(|(e, _)| e == i)
        });
        prop_assert_eq!(draining_now.count(), d.draining.len());
        // A re-provisioning starts only for a worker rebooted past its time, never while too many are unhealthy.
        for &i in &d.reprovision {
            let p = &past[i];
            prop_assert!(p.outcome.is_none() && p.reprovisioned.is_none() && !p.draining);
            prop_assert!(!control_plane(&p.node), "{} is a control plane", p.node);
            prop_assert!(policy.enabled && policy.reprovision);
            prop_assert!(unhealthy.len() * 100 <= policy.max_unhealthy_percent as usize * nodes.len());
            prop_assert!(!d.ended.iter().any(|(e, _)| *e == i));
        }
        // Healthy: every node Ready, and no node away for its re-provisioning.
        let away = past.iter().any(|p| {
            p.outcome.is_none()
                && p.reprovisioned.is_some_and(|t| NOW - t < policy.reprovision_timeout)
                && !nodes.iter().any(|n| n.name == p.node)
        });
        prop_assert_eq!(d.healthy, !away && nodes.iter().all(|n| n.not_ready_since.is_none()));
    }
}
