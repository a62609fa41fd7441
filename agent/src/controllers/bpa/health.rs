//! The BPA's healing at work (the rules are `heal`'s): the workload cluster's Nodes read through the kubeconfig
//! its installer wrote; the node of each remediation `heal::decide` starts cordoned and its pods evicted
//! through the Eviction API (PodDisruptionBudgets hold; a round each look, pods the unanswering kubelet cannot
//! end not waited for), then its host rebooted through BMO once drained or once the drain had its time (the
//! `reboot.metal3.io` annotation: BMO powers the host off, softly first, removes the annotation and powers it
//! on); the node made schedulable again once `Ready`; a worker its reboot did not heal re-provisioned (its image
//! kept, its Node deleted, the host deprovisioned, given its image again once cleaned, the installer Job run
//! again once provisioned, which joins it); the remediations kept in `status.remediations`, each step an
//! Event, and the `Healthy` condition.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node as KubeNode;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;

use super::heal::{self, Outcome, Past, Policy};
use super::{drains, hold};
use crate::controllers::common::{
    delete_ignoring_missing, publish, set_condition, workload, Base, Error,
};
use crate::crd::bpa::{Provisioning, ProvisioningStatus, Remediation};
use crate::crd::metal3::BareMetalHost;
use crate::installer::remove;

/// How often a `Ready` cluster's nodes are read: while one is not `Ready`, and while all are.
const WATCHING: Duration = Duration::from_secs(10);
const QUIET: Duration = Duration::from_secs(30);
/// A workload API that does not answer within this is unreachable for this round.
const API_REQUEST: Duration = Duration::from_secs(10);
/// BMO's annotation asking for a reboot; without a suffix, BMO removes it once the host is off.
pub const REBOOT_ANNOTATION: &str = "reboot.metal3.io";
/// A remediation's drain (`status.remediations[].drain`): under way, done, or given up for the reboot.
const DRAINING: &str = "Draining";
const DRAINED: &str = "Drained";
const TIMED_OUT: &str = "TimedOut";
/// A remediation's re-provisioning (`status.remediations[].reprovision`), step by step.
const DEPROVISIONING: &str = "Deprovisioning";
const PROVISIONING: &str = "Provisioning";
const JOINING: &str = "Joining";

/// Reads the nodes of `p`'s installed cluster (its kubeconfig in Secret `secret`), reboots those `heal`
/// says, and updates `status` (remediations, the `Healthy` condition). `bmhs`: the namespace's
/// BareMetalHosts as this reconcile listed them. Returns when to look again.
pub async fn heal(
    base: &Base,
    p: &Provisioning,
    (ns, secret): (&str, &str),
    bmhs: &[BareMetalHost],
    status: &mut ProvisioningStatus,
) -> Result<Duration, Error> {
    let generation = p.metadata.generation;
    // The object as last written, not as the watcher's cache has it: a reconcile our own annotation started may
    // see it from before the last status write (and would reboot the host again, or lose the remediation under
    // way), or from before the operator turned healing off.
    let fresh = Api::<Provisioning>::namespaced(base.client.clone(), ns)
        .get_status(&p.name_any())
        .await?;
    let policy = Policy::of(fresh.spec.healing.as_ref());
    let fresh = fresh.status.unwrap_or_default();
    status.remediations = fresh.remediations;
    let old = fresh
        .conditions
        .iter()
        .find(|c| c.type_ == "Healthy")
        .map(|c| c.reason.clone());
    let (workload, listed) = match workload_nodes(&base.client, ns, secret).await? {
        Ok(read) => read,
        Err(why) => {
            set_condition(
                &mut status.conditions,
                "Healthy",
                false,
                "ClusterUnreachable",
                &format!("the workload cluster's nodes cannot be read: {why}"),
                generation,
            );
            return Ok(WATCHING);
        }
    };
    let nodes: Vec<heal::Node> = listed
        .iter()
        .map(|n| {
            let name = n.name_any();
            heal::Node {
                bare_metal_host: status
                    .hosts
                    .iter()
                    .find(|h| h.label == name)
                    .and_then(|h| h.bare_metal_host.clone()),
                control_plane: n
                    .labels()
                    .contains_key("node-role.kubernetes.io/control-plane"),
                not_ready_since: not_ready_since(n),
                name,
            }
        })
        .collect();
    let now = Timestamp::now();
    let past: Vec<Past> = status.remediations.iter().map(past_of).collect();
    let d = heal::decide(&policy, &nodes, &past, now.as_second());
    let stamp = now.to_string();
    for &(i, outcome) in &d.ended {
        let r = &mut status.remediations[i];
        r.outcome = Some(outcome.as_str().into());
        r.ended = Some(stamp.clone());
        let (node, bmh) = (&r.node, &r.bare_metal_host);
        let (kind, note) = match (outcome, &r.rebooted) {
            (Outcome::Healed, _) if r.reprovisioned.is_some() => (
                EventType::Normal,
                format!("{node} is Ready again after its re-provisioning through BareMetalHost {bmh}"),
            ),
            (Outcome::Healed, None) if r.drain.as_deref() == Some(DRAINING) => (
                EventType::Normal,
                format!("{node} is Ready again before its reboot through BareMetalHost {bmh}: not rebooted"),
            ),
            (Outcome::Healed, asked) => (
                EventType::Normal,
                format!(
                    "{node} is Ready again after its reboot through BareMetalHost {bmh} (asked at {})",
                    asked.as_ref().unwrap_or(&r.started)
                ),
            ),
            (Outcome::NotHealed, _) if r.reprovisioned.is_some() => (
                EventType::Warning,
                format!(
                    "{node} is not Ready {} s after its re-provisioning through BareMetalHost {bmh} began: left to \
                     the operator until it is Ready again",
                    policy.reprovision_timeout
                ),
            ),
            (Outcome::NotHealed, _) => (
                EventType::Warning,
                format!(
                    "{node} is not Ready {} s after its reboot through BareMetalHost {bmh}: left to the operator \
                     until it is Ready again",
                    policy.reboot_timeout
                ),
            ),
            (Outcome::NodeGone, _) => (
                EventType::Normal,
                format!("{node} left the cluster during its remediation"),
            ),
        };
        publish(&base.recorder, p, kind, outcome.as_str(), &note).await;
    }
    for &i in &d.recovered {
        let r = &mut status.remediations[i];
        r.recovered = Some(stamp.clone());
        let note = format!("{} is Ready again: it may be remediated again", r.node);
        publish(&base.recorder, p, EventType::Normal, "Recovered", &note).await;
    }
    // Ready again (healed, or recovered after it was left to the operator): schedulable again.
    for &(i, outcome) in &d.ended {
        if outcome == Outcome::Healed {
            schedulable_again(&workload, &status.remediations[i]).await;
        }
    }
    for &i in &d.recovered {
        schedulable_again(&workload, &status.remediations[i]).await;
    }
    let mut draining = d.draining.clone();
    for (node, bmh) in &d.start {
        let since = nodes
            .iter()
            .find(|n| &n.name == node)
            .and_then(|n| n.not_ready_since)
            .map_or(0, |t| now.as_second() - t);
        let schedulable = listed
            .iter()
            .find(|n| &n.name_any() == node)
            .is_some_and(|n| {
                !n.spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false)
            });
        publish(
            &base.recorder,
            p,
            EventType::Normal,
            "Remediating",
            &format!(
                "draining {node} before its reboot through BareMetalHost {bmh}: not Ready for {since} s"
            ),
        )
        .await;
        draining.push((status.remediations.len(), policy.drain_timeout == 0));
        status.remediations.push(Remediation {
            node: node.clone(),
            bare_metal_host: bmh.clone(),
            started: stamp.clone(),
            drain: Some(DRAINING.into()),
            cordoned: Some(schedulable),
            ..Remediation::default()
        });
    }
    for &i in &d.reprovision {
        let r = &mut status.remediations[i];
        r.reprovision = Some(DEPROVISIONING.into());
        r.reprovisioned = Some(stamp.clone());
        let note = format!(
            "{} is not Ready {} s after its reboot through BareMetalHost {}: re-provisioning it (its Node \
             deleted, the host deprovisioned and given its image again) to join it again",
            r.node, policy.reboot_timeout, r.bare_metal_host
        );
        publish(
            &base.recorder,
            p,
            EventType::Warning,
            "Reprovisioning",
            &note,
        )
        .await;
    }
    let job = status.job_name.clone();
    for r in status.remediations.iter_mut() {
        if r.outcome.is_none() && r.reprovision.is_some() {
            let host = bmhs.iter().find(|h| h.name_any() == r.bare_metal_host);
            if let Some(note) = reprovision(base, ns, (&workload, host), r, job.as_deref()).await? {
                publish(
                    &base.recorder,
                    p,
                    EventType::Normal,
                    "Reprovisioning",
                    &note,
                )
                .await;
            }
        }
    }
    let hosts: Api<BareMetalHost> = Api::namespaced(base.client.clone(), ns);
    for (i, overdue) in draining {
        let r = &mut status.remediations[i];
        let told = |why: String| tracing::info!(node = %r.node, %why, "an eviction was refused");
        // One round: cordon, evict; pods the node's kubelet cannot end are not waited for.
        let left = match remove::drain(&workload, &r.node, Duration::ZERO, true, &told).await {
            Ok(_) => None,
            Err(why) if overdue => Some(why),
            Err(why) => {
                tracing::info!(node = %r.node, %why, "draining before a reboot");
                continue;
            }
        };
        let annotations = serde_json::json!({"metadata": {"annotations": {REBOOT_ANNOTATION: ""}}});
        hosts
            .patch(
                &r.bare_metal_host,
                &PatchParams::default(),
                &Patch::Merge(annotations),
            )
            .await?;
        let (node, bmh) = (&r.node, &r.bare_metal_host);
        let (kind, drain, note) = match &left {
            None => (
                EventType::Normal,
                DRAINED,
                format!("rebooting {node} through BareMetalHost {bmh}: drained"),
            ),
            Some(why) => (
                EventType::Warning,
                TIMED_OUT,
                format!(
                    "rebooting {node} through BareMetalHost {bmh} undrained: the drain had its {} s \
                     (spec.healing.drainTimeoutSeconds): {why}",
                    policy.drain_timeout
                ),
            ),
        };
        publish(&base.recorder, p, kind, "Rebooting", &note).await;
        r.drain = Some(drain.into());
        r.rebooted = Some(stamp.clone());
    }
    if d.held && old.as_deref() != Some(d.reason) {
        publish(&base.recorder, p, EventType::Warning, d.reason, &d.message).await;
    }
    // The condition as things stand after this round's steps (a drain done, a reboot asked): the same rules
    // over the remediations as now written.
    let past: Vec<Past> = status.remediations.iter().map(past_of).collect();
    let shown = heal::decide(&policy, &nodes, &past, now.as_second());
    set_condition(
        &mut status.conditions,
        "Healthy",
        shown.healthy,
        shown.reason,
        &shown.message,
        generation,
    );
    status.remediations = kept(
        std::mem::take(&mut status.remediations),
        now.as_second(),
        policy.window,
    );
    Ok(if shown.healthy { QUIET } else { WATCHING })
}

/// The remediations worth keeping: under way, started within the window (they count against it), and each
/// node's newest (a `NotHealed` one holds its node back).
fn kept(all: Vec<Remediation>, now: i64, window: i64) -> Vec<Remediation> {
    let newest = |i: usize, r: &Remediation| !all[i + 1..].iter().any(|o| o.node == r.node);
    all.iter()
        .enumerate()
        .filter(|(i, r)| r.outcome.is_none() || now - seconds(&r.started) < window || newest(*i, r))
        .map(|(_, r)| r.clone())
        .collect()
}

fn seconds(rfc3339: &str) -> i64 {
    rfc3339.parse::<Timestamp>().map_or(0, |t| t.as_second())
}

fn past_of(r: &Remediation) -> Past {
    Past {
        node: r.node.clone(),
        bare_metal_host: r.bare_metal_host.clone(),
        started: seconds(&r.started),
        draining: r.drain.as_deref() == Some(DRAINING),
        rebooted: r.rebooted.as_deref().map(seconds),
        reprovisioned: r.reprovisioned.as_deref().map(seconds),
        outcome: r.outcome.as_deref().and_then(Outcome::parse),
        recovered: r.recovered.is_some(),
    }
}

/// Since when `n` is not `Ready` (its `Ready` condition's last transition, or now if it has none); None when
/// it is.
fn not_ready_since(n: &KubeNode) -> Option<i64> {
    let ready = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(c) if c.status == "True" => None,
        Some(c) => Some(
            c.last_transition_time
                .as_ref()
                .map_or_else(|| Timestamp::now().as_second(), |t| t.0.as_second()),
        ),
        None => Some(Timestamp::now().as_second()),
    }
}

/// The workload cluster's client, through the kubeconfig in Secret `secret` (key `kubeconfig`), and its Nodes;
/// why not, if they cannot be read (an error of the appliance's own API is returned as such).
async fn workload_nodes(
    client: &kube::Client,
    ns: &str,
    secret: &str,
) -> Result<Result<(kube::Client, Vec<KubeNode>), String>, Error> {
    // A busy workload API is read again at the next round.
    let workload = match workload::from_secret(client, ns, secret, API_REQUEST).await? {
        Ok(workload) => workload,
        Err(why) => return Ok(Err(why)),
    };
    Ok(Api::<KubeNode>::all(workload.clone())
        .list(&ListParams::default())
        .await
        .map(|l| (workload, l.items))
        .map_err(|e| e.to_string()))
}

/// One step of `r`'s re-provisioning, as far as its BareMetalHost got; what it did, for an Event. The host's
/// image is first kept in `r` (written with the status) and only removed at the next look, so that no failure
/// between the two writes loses it. `job`: the installer Job, deleted once the host is provisioned again so that
/// the BPA runs it again and it joins the node (the installer leaves the rest of the cluster as it is).
/// `bmh`: the remediation's host as this reconcile listed it.
async fn reprovision(
    base: &Base,
    ns: &str,
    (workload, bmh): (&kube::Client, Option<&BareMetalHost>),
    r: &mut Remediation,
    job: Option<&str>,
) -> Result<Option<String>, Error> {
    let hosts: Api<BareMetalHost> = Api::namespaced(base.client.clone(), ns);
    // A host gone or renamed: nothing to drive; the remediation's time ends it.
    let Some(bmh) = bmh else {
        return Ok(None);
    };
    let state = bmh
        .status
        .as_ref()
        .and_then(|s| s.provisioning.as_ref())
        .map(|p| p.state.as_str())
        .unwrap_or_default();
    let name = &r.bare_metal_host;
    match r.reprovision.as_deref() {
        Some(DEPROVISIONING) => match (&bmh.spec.image, &r.image) {
            (Some(image), None) => {
                r.image = Some(image.clone());
                Ok(None)
            }
            (Some(_), Some(_)) => {
                let nodes = Api::<KubeNode>::all(workload.clone());
                if let Err(why) = delete_ignoring_missing(&nodes, &r.node).await {
                    tracing::warn!(node = %r.node, %why, "cannot delete the node to re-provision");
                    return Ok(None);
                }
                // Its node is gone: the host may go (the drain hold's two marks, as an operator sets them for a
                // node that cannot be drained; the hold reads the host as it was, so they go first), then it is
                // deprovisioned.
                let marks = serde_json::json!({"metadata": {"annotations": {
                    hold::DRAIN_ANNOTATION: "", hold::DRAINED_ANNOTATION: r.node}}});
                hosts
                    .patch(name, &PatchParams::default(), &Patch::Merge(marks))
                    .await?;
                let deprovision = serde_json::json!({"spec": {"image": null}});
                hosts
                    .patch(name, &PatchParams::default(), &Patch::Merge(deprovision))
                    .await?;
                Ok(Some(format!(
                    "{}'s Node deleted and BareMetalHost {name} deprovisioned, to be cleaned and provisioned again",
                    r.node
                )))
            }
            (None, Some(image)) if state == "available" || state == "ready" => {
                let patch = serde_json::json!({"spec": {"image": image}});
                hosts
                    .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await?;
                r.reprovision = Some(PROVISIONING.into());
                Ok(Some(format!(
                    "BareMetalHost {name} is {state}: provisioning it again with {}",
                    image.url
                )))
            }
            _ => Ok(None),
        },
        Some(PROVISIONING) if state == hold::PROVISIONED => {
            if let Some(job) = job {
                let jobs: Api<Job> = Api::namespaced(base.client.clone(), ns);
                delete_ignoring_missing(&jobs, job).await?;
            }
            r.reprovision = Some(JOINING.into());
            Ok(Some(format!(
                "BareMetalHost {name} is provisioned again: the installer Job {} runs again to join {}",
                job.unwrap_or_default(),
                r.node
            )))
        }
        _ => Ok(None),
    }
}

/// Makes the node of `r` schedulable again if the remediation cordoned it (a node the operator had cordoned
/// stays so). Failing is logged: the node then stays cordoned until the operator uncordons it.
async fn schedulable_again(workload: &kube::Client, r: &Remediation) {
    if r.cordoned != Some(true) {
        return;
    }
    if let Err(why) = drains::uncordon(workload, &r.node).await {
        tracing::warn!(node = %r.node, %why, "cannot make the node schedulable again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(node: &str, started: &str, outcome: Option<&str>) -> Remediation {
        Remediation {
            node: node.into(),
            bare_metal_host: format!("bmh-{node}"),
            started: started.into(),
            outcome: outcome.map(Into::into),
            ..Remediation::default()
        }
    }

    #[test]
    fn kept_are_those_under_way_of_the_window_and_each_nodes_newest() {
        let now = seconds("2026-11-30T12:00:00Z");
        let all = vec![
            r("a", "2026-11-30T09:00:00Z", Some("Healed")),
            r("a", "2026-11-30T10:00:00Z", Some("NotHealed")),
            r("b", "2026-11-30T11:30:00Z", Some("Healed")),
            r("b", "2026-11-30T11:40:00Z", Some("Healed")),
            r("c", "2026-11-30T08:00:00Z", None),
        ];
        let kept: Vec<(String, String)> = kept(all, now, 3600)
            .into_iter()
            .map(|r| (r.node, r.started))
            .collect();
        assert_eq!(
            kept,
            [
                ("a".to_owned(), "2026-11-30T10:00:00Z".to_owned()),
                ("b".to_owned(), "2026-11-30T11:30:00Z".to_owned()),
                ("b".to_owned(), "2026-11-30T11:40:00Z".to_owned()),
                ("c".to_owned(), "2026-11-30T08:00:00Z".to_owned()),
            ]
        );
    }

    #[test]
    fn a_remediation_draining_or_rebooted_reads_back_so() {
        let mut rem = r("w", "2026-11-30T12:00:00Z", None);
        rem.drain = Some(DRAINING.into());
        assert!(past_of(&rem).draining);
        rem.drain = Some(TIMED_OUT.into());
        rem.rebooted = Some("2026-11-30T12:02:00Z".into());
        let p = past_of(&rem);
        assert_eq!((p.draining, p.rebooted), (false, Some(1_796_040_120)));
    }

    #[test]
    fn a_remediation_in_the_status_reads_back_as_the_planner_keeps_it() {
        let mut rem = r("w", "2026-11-30T12:00:00Z", Some("NotHealed"));
        rem.recovered = Some("2026-11-30T12:30:00Z".into());
        assert_eq!(
            past_of(&rem),
            Past {
                node: "w".into(),
                bare_metal_host: "bmh-w".into(),
                started: 1_796_040_000,
                draining: false,
                rebooted: None,
                reprovisioned: None,
                outcome: Some(Outcome::NotHealed),
                recovered: true,
            }
        );
    }
}
