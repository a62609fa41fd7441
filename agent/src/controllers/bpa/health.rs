//! The BPA's healing at work (the rules are `heal`'s): the workload cluster's Nodes read through the kubeconfig
//! its installer wrote, the hosts `heal::decide` names rebooted through BMO (the `reboot.metal3.io`
//! annotation: BMO powers the host off, softly first, removes the annotation and powers it on), the
//! remediations kept in `status.remediations`, each step an Event, and the `Healthy` condition.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node as KubeNode;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;

use super::heal::{self, Outcome, Past, Policy};
use crate::controllers::common::{publish, set_condition, workload, Base, Error};
use crate::crd::bpa::{Provisioning, ProvisioningStatus, Remediation};
use crate::crd::metal3::BareMetalHost;

/// How often a `Ready` cluster's nodes are read: while one is not `Ready`, and while all are.
const WATCHING: Duration = Duration::from_secs(10);
const QUIET: Duration = Duration::from_secs(30);
/// A workload API that does not answer within this is unreachable for this round.
const API_REQUEST: Duration = Duration::from_secs(10);
/// BMO's annotation asking for a reboot; without a suffix, BMO removes it once the host is off.
pub const REBOOT_ANNOTATION: &str = "reboot.metal3.io";

/// Reads the nodes of `p`'s installed cluster (its kubeconfig in Secret `secret`), reboots those `heal`
/// says, and updates `status` (remediations, the `Healthy` condition). Returns when to look again.
pub async fn heal(
    base: &Base,
    p: &Provisioning,
    ns: &str,
    secret: &str,
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
    let nodes = match workload_nodes(&base.client, ns, secret).await? {
        Ok(nodes) => nodes,
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
    let nodes: Vec<heal::Node> = nodes
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
        let (node, bmh, started) = (&r.node, &r.bare_metal_host, &r.started);
        let (kind, note) = match outcome {
            Outcome::Healed => (
                EventType::Normal,
                format!("{node} is Ready again after its reboot through BareMetalHost {bmh} (asked at {started})"),
            ),
            Outcome::NotHealed => (
                EventType::Warning,
                format!(
                    "{node} is not Ready {} s after its reboot through BareMetalHost {bmh}: left to the operator \
                     until it is Ready again",
                    policy.reboot_timeout
                ),
            ),
            Outcome::NodeGone => (
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
    let hosts: Api<BareMetalHost> = Api::namespaced(base.client.clone(), ns);
    for (node, bmh) in &d.reboot {
        let annotations = serde_json::json!({"metadata": {"annotations": {REBOOT_ANNOTATION: ""}}});
        hosts
            .patch(bmh, &PatchParams::default(), &Patch::Merge(annotations))
            .await?;
        let since = nodes
            .iter()
            .find(|n| &n.name == node)
            .and_then(|n| n.not_ready_since)
            .map_or(0, |t| now.as_second() - t);
        publish(
            &base.recorder,
            p,
            EventType::Normal,
            "Remediating",
            &format!("rebooting {node} through BareMetalHost {bmh}: not Ready for {since} s"),
        )
        .await;
        status.remediations.push(Remediation {
            node: node.clone(),
            bare_metal_host: bmh.clone(),
            started: stamp.clone(),
            ..Remediation::default()
        });
    }
    if d.held && old.as_deref() != Some(d.reason) {
        publish(&base.recorder, p, EventType::Warning, d.reason, &d.message).await;
    }
    set_condition(
        &mut status.conditions,
        "Healthy",
        d.healthy,
        d.reason,
        &d.message,
        generation,
    );
    status.remediations = kept(
        std::mem::take(&mut status.remediations),
        now.as_second(),
        policy.window,
    );
    Ok(if d.healthy { QUIET } else { WATCHING })
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
        started: seconds(&r.started),
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

/// The workload cluster's Nodes, through the kubeconfig in Secret `secret` (key `kubeconfig`); why not, if
/// they cannot be read (an error of the appliance's own API is returned as such).
async fn workload_nodes(
    client: &kube::Client,
    ns: &str,
    secret: &str,
) -> Result<Result<Vec<KubeNode>, String>, Error> {
    // A busy workload API is read again at the next round.
    let workload = match workload::from_secret(client, ns, secret, API_REQUEST).await? {
        Ok(workload) => workload,
        Err(why) => return Ok(Err(why)),
    };
    Ok(Api::<KubeNode>::all(workload)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| e.to_string()))
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
    fn a_remediation_in_the_status_reads_back_as_the_planner_keeps_it() {
        let mut rem = r("w", "2026-11-30T12:00:00Z", Some("NotHealed"));
        rem.recovered = Some("2026-11-30T12:30:00Z".into());
        assert_eq!(
            past_of(&rem),
            Past {
                node: "w".into(),
                started: 1_796_040_000,
                outcome: Some(Outcome::NotHealed),
                recovered: true,
            }
        );
    }
}
