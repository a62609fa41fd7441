//! Healing a workload cluster's nodes, pure: which unhealthy node's remediation starts now (its node drained,
//! then rebooted through its BareMetalHost), which drain has had its time, which worker its reboot did not heal
//! is re-provisioned and joined again, which remediation under way ended and how, and what holds the others
//! back. The limits follow Metal3's
//! remediation and Kubernetes' node-health-check: a node is unhealthy once `NotReady` (or `Unknown`) past a
//! threshold; nothing starts while more than a share of the nodes is unhealthy (a site-wide outage must not
//! reboot every host, nor re-provision any); at most N remediations start in any window; one control-plane host
//! at a time; a control-plane node its reboot did not heal (re-provisioning the one master would lose the
//! cluster), or a worker its re-provisioning did not, is left to the operator until it is `Ready` again.

use crate::crd::bpa::Healing;

pub const NOT_READY_SECONDS: u32 = 300;
pub const REBOOT_TIMEOUT_SECONDS: u32 = 900;
pub const DRAIN_TIMEOUT_SECONDS: u32 = 120;
pub const REPROVISION_TIMEOUT_SECONDS: u32 = 3600;
pub const MAX_UNHEALTHY_PERCENT: u32 = 50;
pub const MAX_REMEDIATIONS: u32 = 3;
pub const WINDOW_SECONDS: u32 = 3600;

/// `spec.healing` with its defaults; durations in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub enabled: bool,
    pub not_ready: i64,
    pub reboot_timeout: i64,
    pub drain_timeout: i64,
    pub reprovision: bool,
    pub reprovision_timeout: i64,
    pub max_unhealthy_percent: u32,
    pub max_remediations: u32,
    pub window: i64,
}

impl Policy {
    pub fn of(h: Option<&Healing>) -> Policy {
        let h = h.cloned().unwrap_or_default();
        Policy {
            enabled: h.enabled.unwrap_or(true),
            not_ready: i64::from(h.not_ready_seconds.unwrap_or(NOT_READY_SECONDS)),
            reboot_timeout: i64::from(h.reboot_timeout_seconds.unwrap_or(REBOOT_TIMEOUT_SECONDS)),
            drain_timeout: i64::from(h.drain_timeout_seconds.unwrap_or(DRAIN_TIMEOUT_SECONDS)),
            reprovision: h.reprovision.unwrap_or(true),
            reprovision_timeout: i64::from(
                h.reprovision_timeout_seconds
                    .unwrap_or(REPROVISION_TIMEOUT_SECONDS),
            ),
            max_unhealthy_percent: h.max_unhealthy_percent.unwrap_or(MAX_UNHEALTHY_PERCENT),
            max_remediations: h.max_remediations.unwrap_or(MAX_REMEDIATIONS),
            window: i64::from(h.window_seconds.unwrap_or(WINDOW_SECONDS)),
        }
    }
}

/// A node of the workload cluster as its `Ready` condition shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// The BareMetalHost of the Provisioning's host of that label, if it has one.
    pub bare_metal_host: Option<String>,
    pub control_plane: bool,
    /// Since when it is not `Ready` (the condition's last transition); None: `Ready`.
    pub not_ready_since: Option<i64>,
}

/// How a remediation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Healed,
    NotHealed,
    NodeGone,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Healed => "Healed",
            Outcome::NotHealed => "NotHealed",
            Outcome::NodeGone => "NodeGone",
        }
    }

    pub fn parse(s: &str) -> Option<Outcome> {
        [Outcome::Healed, Outcome::NotHealed, Outcome::NodeGone]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// A remediation as the status keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Past {
    pub node: String,
    pub bare_metal_host: String,
    pub started: i64,
    /// Its node is being drained; the reboot is not asked for yet.
    pub draining: bool,
    /// When the reboot was asked for (None for a remediation from before drains, whose reboot was asked at
    /// `started`).
    pub rebooted: Option<i64>,
    /// When its re-provisioning started (its reboot did not heal it).
    pub reprovisioned: Option<i64>,
    /// None: under way.
    pub outcome: Option<Outcome>,
    /// A `NotHealed` one's node was seen `Ready` since.
    pub recovered: bool,
}

/// What to do now, and the `Healthy` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// `(node, BareMetalHost)` whose remediation starts now, by node name: the node is drained, then rebooted.
    pub start: Vec<(String, String)>,
    /// Remediations of `past` (by index) whose node is being drained, and whether the drain has had its time
    /// (the reboot goes ahead then, drained or not: a node that does not answer cannot end its pods, and a
    /// PodDisruptionBudget may count the node's own pods as the unhealthy ones).
    pub draining: Vec<(usize, bool)>,
    /// Remediations of `past` (by index) of a worker its reboot did not heal: its re-provisioning starts now
    /// (its Node deleted, its BareMetalHost deprovisioned and given its image again, then joined again).
    pub reprovision: Vec<usize>,
    /// Remediations of `past` (by index) that ended now, and how.
    pub ended: Vec<(usize, Outcome)>,
    /// `NotHealed` remediations of `past` (by index) whose node is `Ready` again.
    pub recovered: Vec<usize>,
    pub healthy: bool,
    /// A limit held a remediation back (`reason` names it).
    pub held: bool,
    pub reason: &'static str,
    pub message: String,
}

/// What to do about `nodes` (the workload cluster's, each once) at `now`, given the remediations `past`.
pub fn decide(policy: &Policy, nodes: &[Node], past: &[Past], now: i64) -> Decision {
    let node = |name: &str| nodes.iter().find(|n| n.name == name);
    let mut ended = Vec::new();
    let mut recovered = Vec::new();
    let mut draining = Vec::new();
    let mut active: Vec<&str> = Vec::new();
    let mut left: Vec<&str> = Vec::new();
    let mut reboot_failed = Vec::new();
    let mut reprovisioning: Vec<&Past> = Vec::new();
    for (i, p) in past.iter().enumerate() {
        let now_ready = node(&p.node).map(|n| n.not_ready_since.is_none());
        let rebooted = p.rebooted.unwrap_or(p.started);
        match (p.outcome, now_ready, p.reprovisioned) {
            // Its Node was deleted for its re-provisioning: it joins again.
            (None, None | Some(false), Some(t)) if now - t >= policy.reprovision_timeout => {
                ended.push((i, Outcome::NotHealed));
                left.push(&p.node);
            }
            (None, None | Some(false), Some(_)) => {
                active.push(&p.node);
                reprovisioning.push(p);
            }
            (None, None, None) => ended.push((i, Outcome::NodeGone)),
            (None, Some(true), _) => ended.push((i, Outcome::Healed)),
            (None, Some(false), None) if p.draining => {
                draining.push((i, now - p.started >= policy.drain_timeout));
                active.push(&p.node);
            }
            (None, Some(false), None) if now - rebooted >= policy.reboot_timeout => {
                reboot_failed.push(i);
            }
            (None, Some(false), None) => active.push(&p.node),
            (Some(Outcome::NotHealed), Some(true), _) if !p.recovered => recovered.push(i),
            (Some(Outcome::NotHealed), Some(false), _) if !p.recovered => left.push(&p.node),
            _ => {}
        }
    }
    let unhealthy = |n: &Node| {
        n.not_ready_since
            .is_some_and(|t| now - t >= policy.not_ready)
    };
    let unhealthy_count = nodes.iter().filter(|n| unhealthy(n)).count();
    let too_many = unhealthy_count * 100
        > usize::try_from(policy.max_unhealthy_percent).unwrap_or(usize::MAX) * nodes.len();
    // A worker its reboot did not heal is re-provisioned, within the same limits as a reboot's (it is the same
    // remediation: the window's count does not change); anything else is left to the operator.
    let mut reprovision = Vec::new();
    for i in reboot_failed {
        let p = &past[i];
        let worker = node(&p.node).is_some_and(|n| !n.control_plane);
        if worker && policy.enabled && policy.reprovision && !too_many {
            reprovision.push(i);
            active.push(&p.node);
        } else {
            ended.push((i, Outcome::NotHealed));
            left.push(&p.node);
        }
    }
    ended.sort_by_key(|(i, _)| *i);
    let mut sorted: Vec<&Node> = nodes.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let candidates: Vec<&Node> = sorted
        .iter()
        .copied()
        .filter(|n| {
            unhealthy(n) && !active.contains(&n.name.as_str()) && !left.contains(&n.name.as_str())
        })
        .collect();

    let started_in_window = past
        .iter()
        .filter(|p| now - p.started < policy.window)
        .count();
    let mut budget = usize::try_from(policy.max_remediations)
        .unwrap_or(usize::MAX)
        .saturating_sub(started_in_window);
    let mut control_plane_busy = active
        .iter()
        .any(|a| node(a).is_some_and(|n| n.control_plane));
    let mut held: Option<(&'static str, String)> = None;
    let mut start = Vec::new();
    let mut without_host = Vec::new();
    for n in candidates {
        let Some(bmh) = &n.bare_metal_host else {
            without_host.push(n.name.as_str());
            continue;
        };
        if !policy.enabled {
            held.get_or_insert((
                "HealingDisabled",
                "healing is off (spec.healing.enabled)".into(),
            ));
        } else if too_many {
            held.get_or_insert((
                "TooManyUnhealthy",
                format!(
                    "{unhealthy_count} of {} nodes unhealthy, more than {} %: nothing is remediated",
                    nodes.len(),
                    policy.max_unhealthy_percent
                ),
            ));
        } else if budget == 0 {
            held.get_or_insert((
                "RemediationLimit",
                format!(
                    "{} remediations started in the last {} s: no more until the window moves",
                    policy.max_remediations, policy.window
                ),
            ));
        } else if n.control_plane && control_plane_busy {
            held.get_or_insert((
                "ControlPlaneBusy",
                "a control-plane host is being remediated: one at a time".into(),
            ));
        } else {
            budget -= 1;
            control_plane_busy |= n.control_plane;
            start.push((n.name.clone(), bmh.clone()));
        }
    }

    let mut said = Vec::new();
    for n in &sorted {
        let Some(since) = n.not_ready_since else {
            continue;
        };
        let name = n.name.as_str();
        let host = n.bare_metal_host.as_deref().unwrap_or_default();
        let drained_first = start.iter().any(|(r, _)| r == name)
            || draining.iter().any(|&(i, _)| past[i].node == name);
        let reprovisioned = reprovision.iter().any(|&i| past[i].node == name)
            || reprovisioning.iter().any(|p| p.node == name);
        said.push(if reprovisioned {
            format!(
                "{name}: re-provisioned through BareMetalHost {host}: its reboot did not heal it"
            )
        } else if drained_first {
            format!("{name}: drained before its reboot through BareMetalHost {host}")
        } else if active.contains(&name) {
            format!("{name}: rebooting through BareMetalHost {host}")
        } else if left.contains(&name) {
            format!(
                "{name}: not Ready after its reboot, left to the operator until it is Ready again"
            )
        } else if without_host.contains(&name) {
            format!("{name}: unhealthy, and no BareMetalHost of this cluster's is it")
        } else if unhealthy(n) {
            format!(
                "{name}: unhealthy (NotReady for {} s), not remediated",
                now - since
            )
        } else {
            format!(
                "{name}: NotReady for {} s (unhealthy after {} s)",
                now - since,
                policy.not_ready
            )
        });
    }
    for p in &reprovisioning {
        if node(&p.node).is_none() {
            said.push(format!(
                "{}: re-provisioned through BareMetalHost {}, to join again",
                p.node, p.bare_metal_host
            ));
        }
    }
    let (healthy, reason, message) = if said.is_empty() {
        let all = match nodes.len() {
            1 => "its one node Ready".to_owned(),
            n => format!("all {n} nodes Ready"),
        };
        (true, "NodesReady", all)
    } else {
        let reason = match &held {
            Some((reason, _)) => reason,
            None if !left.is_empty() => "NotHealed",
            None if !start.is_empty() || !active.is_empty() => "Remediating",
            None if !without_host.is_empty() => "NoBareMetalHost",
            None => "NodeNotReady",
        };
        if let Some((_, why)) = &held {
            said.push(why.clone());
        }
        (false, reason, said.join("; "))
    };
    Decision {
        held: !healthy && held.is_some(),
        start,
        draining,
        reprovision,
        ended,
        recovered,
        healthy,
        reason,
        message,
    }
}
