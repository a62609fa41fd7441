//! Hosts leaving a cluster: the nodes the installer made (it labels them [`CLUSTER_LABEL`]) that the inventory
//! no longer lists are cordoned, drained through the Eviction API (so PodDisruptionBudgets hold: an eviction a
//! budget refuses is tried again until the drain's time is up), reset over SSH (`host::reset`) and deleted.
//! A host that cannot be reached is still drained and its Node deleted, and the run says it was not reset. A
//! control-plane host is never removed: the installer makes clusters of one.
//!
//! [`departed`], [`evictable`] and [`waits_for`] are pure; [`drain`] and [`delete`] talk to the cluster's API.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node as KubeNode, Pod};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams};
use russh::keys::PrivateKey;

use crate::controllers::common::delete_ignoring_missing;
use crate::installer::api::retrying;
use crate::installer::host;
use crate::installer::inventory::{Host, Inventory};
use crate::installer::ssh::{Connection, KnownHosts, Target};
use crate::installer::step::{Failure, Node, CONNECT, KUBEADM, NODES};

/// On every node the installer made: the cluster's name. Only nodes with it are ever removed, so a node joined
/// by other means stays.
pub const CLUSTER_LABEL: &str = "bpa.akraino.org/cluster";
/// kubeadm's label on control-plane nodes.
const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";
/// On a static pod's mirror in the API: kubelet owns it, an eviction cannot move it.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Between two rounds of evictions while a drain waits.
const DRAIN_POLL: Duration = Duration::from_secs(5);

/// A node of the cluster that the inventory no longer lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Departed {
    pub name: String,
    /// Its `InternalIP`, where the installer logs in to reset it.
    pub address: Option<String>,
    pub control_plane: bool,
}

/// The nodes labelled as `cluster`'s that `inv` does not list, by name.
pub fn departed(nodes: &[KubeNode], inv: &Inventory, cluster: &str) -> Vec<Departed> {
    let members: BTreeSet<&str> = inv.members().iter().map(|h| h.name.as_str()).collect();
    let mut out: Vec<Departed> = nodes
        .iter()
        .filter_map(|n| {
            let labels = n.metadata.labels.as_ref()?;
            let name = n.metadata.name.as_deref()?;
            (labels.get(CLUSTER_LABEL).map(String::as_str) == Some(cluster)
                && !members.contains(name))
            .then(|| Departed {
                name: name.to_owned(),
                address: internal_ip(n),
                control_plane: labels.contains_key(CONTROL_PLANE_LABEL),
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn internal_ip(n: &KubeNode) -> Option<String> {
    n.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
}

/// Whether a drain evicts `pod`: not a static pod's mirror, not a DaemonSet's (its controller would put it back
/// at once, and tolerates the cordon), not finished.
pub fn evictable(pod: &Pod) -> bool {
    let meta = &pod.metadata;
    let mirror = meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION));
    let daemon = meta
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|r| r.kind == "DaemonSet"));
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    !(mirror || daemon || finished)
}

/// Whether a drain still waits for `pod`: one it evicts ([`evictable`]), and, on a node whose kubelet does not
/// answer (`unreachable`), not one whose eviction was already accepted: nothing there can end it, and its
/// controller has made its replacement elsewhere (Cluster API's drain skips them alike).
pub fn waits_for(pod: &Pod, unreachable: bool) -> bool {
    evictable(pod) && !(unreachable && pod.metadata.deletion_timestamp.is_some())
}

fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// What a drain did: the pods it evicted, by `namespace/name`.
#[derive(Debug, Default)]
pub struct Drained {
    pub evicted: Vec<String>,
}

/// Cordons `node` and evicts its pods until none a drain [`waits_for`] is left (`unreachable`: the node's
/// kubelet does not answer), or `timeout` passes: then the error names the pods still there and what the last
/// refused eviction said (a PodDisruptionBudget's message). `refused_once` hears each pod's first refused eviction. `api` must not retry a 429 by itself
/// (kube's `default_retry` off), or a refused eviction holds the drain for minutes.
pub async fn drain(
    api: &kube::Client,
    node: &str,
    timeout: Duration,
    unreachable: bool,
    refused_once: &(dyn Fn(String) + Sync),
) -> Result<Drained, String> {
    let nodes: Api<KubeNode> = Api::all(api.clone());
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"unschedulable": true}})),
        )
        .await
        .map_err(|e| format!("cordon: {e}"))?;
    let pods: Api<Pod> = Api::all(api.clone());
    let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let deadline = Instant::now() + timeout;
    let mut drained = Drained::default();
    let mut told = BTreeSet::new();
    loop {
        let listed = match pods.list(&on_node).await {
            Ok(l) => l.items,
            // The workload API not answering this once: asked again next round, within the drain's time.
            Err(e) if transient(&e) && Instant::now() < deadline => {
                tokio::time::sleep(DRAIN_POLL).await;
                continue;
            }
            Err(e) => return Err(format!("listing its pods: {e}")),
        };
        let left: Vec<Pod> = listed
            .into_iter()
            .filter(|p| waits_for(p, unreachable))
            .collect();
        if left.is_empty() {
            return Ok(drained);
        }
        let mut refused = None;
        for pod in left
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            let (ns, name) = (
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.name.as_deref().unwrap_or_default(),
            );
            match Api::<Pod>::namespaced(api.clone(), ns)
                .evict(name, &EvictParams::default())
                .await
            {
                Ok(_) => drained.evicted.push(key(pod)),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                // A PodDisruptionBudget that allows no disruption now: tried again next round.
                Err(kube::Error::Api(s)) if s.code == 429 => {
                    let why = format!("{}: {}", key(pod), s.message);
                    if told.insert(key(pod)) {
                        refused_once(why.clone());
                    }
                    refused = Some(why);
                }
                // A dropped connection or a busy API (an emulated master under a drain's load): tried again
                // next round, as a refusal is.
                Err(e) if transient(&e) => refused = Some(format!("{}: {e}", key(pod))),
                Err(e) => return Err(format!("evicting {}: {e}", key(pod))),
            }
        }
        if Instant::now() >= deadline {
            let names: Vec<String> = left.iter().map(key).collect();
            // One round (no time): what is left, without a time it was not drained within.
            let within = if timeout.is_zero() {
                String::new()
            } else {
                format!("not drained within {} s: ", timeout.as_secs())
            };
            return Err(format!(
                "{within}{} still on it{}",
                names.join(", "),
                refused
                    .map(|r| format!(" (eviction refused: {r})"))
                    .unwrap_or_default()
            ));
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
}

/// Whether `e` says the API was not reached or could not answer now (a connection dropped or refused, a
/// timeout, 500/503/504), not that it refused the request: a drain asks again next round.
pub fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 500 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Makes `node` schedulable again, after a [`drain`] whose work is done.
pub async fn uncordon(api: &kube::Client, node: &str) -> Result<(), String> {
    Api::<KubeNode>::all(api.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"unschedulable": null}})),
        )
        .await
        .map(|_| ())
        .map_err(|e| format!("uncordon: {e}"))
}

/// Deletes `node`'s Node (gone already counts as deleted).
pub async fn delete(api: &kube::Client, node: &str) -> Result<(), String> {
    delete_ignoring_missing(&Api::<KubeNode>::all(api.clone()), node)
        .await
        .map_err(|e| format!("deleting its Node: {e}"))
}

/// How the installer logs in to a host the inventory no longer lists (one leaving the cluster).
pub struct Reach<'a> {
    pub key: &'a Arc<PrivateKey>,
    pub known: &'a KnownHosts,
    pub user: &'a str,
}

/// Step `remove`: every node of the cluster the inventory no longer lists ([`departed`]), one at a time,
/// is cordoned and drained, reset over SSH (a host that cannot be reached is said to be left as it is) and its
/// Node deleted. A control-plane host cannot leave.
pub(super) async fn departed_hosts(
    inv: &Inventory,
    (cluster, drain_timeout): (&str, Duration),
    api: &kube::Client,
    cp: &Node<'_>,
    reach: &Reach<'_>,
    say: &(dyn Fn(String) + Sync),
) -> Result<(), Failure> {
    const STEP: &str = "remove";
    let deadline = Instant::now() + NODES;
    let nodes: kube::Api<KubeNode> = kube::Api::all(api.clone());
    let every = ListParams::default();
    let listed = retrying(STEP, deadline, || nodes.list(&every))
        .await
        .map_err(|e| cp.fail(STEP, format!("the cluster's API: {e}")))?;
    for d in departed(&listed.items, inv, cluster) {
        let fail = |step: &'static str, reason: String, lasting: bool| Failure {
            host: d.name.clone(),
            step,
            reason,
            lasting,
        };
        if d.control_plane {
            return Err(fail(
                STEP,
                "a control-plane host cannot leave: the installer makes clusters of one \
                 control-plane host (put it back in the Provisioning)"
                    .into(),
                true,
            ));
        }
        let waits = |why: String| {
            say(format!(
                "{} drain: waiting, eviction refused: {why}",
                d.name
            ))
        };
        let drained = drain(api, &d.name, drain_timeout, false, &waits)
            .await
            .map_err(|e| fail("drain", e, false))?;
        say(format!(
            "{} drain: cordoned, {} pod(s) evicted{}",
            d.name,
            drained.evicted.len(),
            if drained.evicted.is_empty() {
                String::new()
            } else {
                format!(" ({})", drained.evicted.join(", "))
            }
        ));
        match &d.address {
            Some(address) => {
                let host = Host {
                    name: d.name.clone(),
                    address: address.clone(),
                    ip: address.clone(),
                    port: 22,
                    user: None,
                };
                let target = Target::of(&host, reach.user);
                match Connection::open(&target, reach.key.clone(), reach.known, CONNECT).await {
                    Ok(conn) => {
                        let leaving = Node {
                            host: &host,
                            conn,
                            target,
                        };
                        let done = leaving.step("reset", &host::reset(cluster), KUBEADM).await;
                        leaving.conn.close().await;
                        say(format!("{} reset: {}", d.name, done?));
                    }
                    Err(e) => say(format!("{} reset: not reset, left as it is: {e}", d.name)),
                }
            }
            None => say(format!(
                "{} reset: not reset, left as it is: its Node has no InternalIP",
                d.name
            )),
        }
        delete(api, &d.name)
            .await
            .map_err(|e| fail(STEP, e, false))?;
        say(format!("{} removed: Node deleted", d.name));
    }
    Ok(())
}

/// Puts [`CLUSTER_LABEL`] on every node `inv` lists: only such a node is ever removed ([`departed_hosts`]).
pub(super) async fn label_members(
    inv: &Inventory,
    cluster: &str,
    api: &kube::Client,
    cp: &Node<'_>,
) -> Result<(), Failure> {
    const STEP: &str = "label the nodes";
    let deadline = Instant::now() + NODES;
    for h in inv.members() {
        retrying(STEP, deadline, || label(api, &h.name, cluster))
            .await
            .map_err(|e| cp.fail(STEP, format!("{}: {e}", h.name)))?;
    }
    Ok(())
}

/// Puts [`CLUSTER_LABEL`] on `node` (a merge patch: nothing else changes).
async fn label(api: &kube::Client, node: &str, cluster: &str) -> Result<(), kube::Error> {
    Api::<KubeNode>::all(api.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {CLUSTER_LABEL: cluster}}})),
        )
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: &[(&str, &str)], ip: &str) -> KubeNode {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<std::collections::BTreeMap<_, _>>()},
            "status": {"addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}]},
        }))
        .unwrap()
    }

    #[test]
    fn departed_nodes_are_the_labelled_ones_the_inventory_left() {
        let inv = Inventory::parse(
            "[all]\nmaster-0 ansible_host=10.0.0.5\n[kube_control_plane]\nmaster-0\n[kube_node]\nmaster-0\n",
        )
        .unwrap();
        let nodes = [
            node(
                "master-0",
                &[(CLUSTER_LABEL, "c1"), (CONTROL_PLANE_LABEL, "")],
                "10.0.0.5",
            ),
            node("worker-1", &[(CLUSTER_LABEL, "c1")], "10.0.0.7"),
            node("worker-0", &[(CLUSTER_LABEL, "c1")], "10.0.0.6"),
            // Joined by hand, or another cluster's: never the installer's to remove.
            node("by-hand", &[], "10.0.0.8"),
            node("other", &[(CLUSTER_LABEL, "c2")], "10.0.0.9"),
            node(
                "old-master",
                &[(CLUSTER_LABEL, "c1"), (CONTROL_PLANE_LABEL, "")],
                "10.0.0.4",
            ),
        ];
        let gone = departed(&nodes, &inv, "c1");
        let said: Vec<(&str, Option<&str>, bool)> = gone
            .iter()
            .map(|d| (d.name.as_str(), d.address.as_deref(), d.control_plane))
            .collect();
        assert_eq!(
            said,
            [
                ("old-master", Some("10.0.0.4"), true),
                ("worker-0", Some("10.0.0.6"), false),
                ("worker-1", Some("10.0.0.7"), false),
            ]
        );
    }

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_dropped_connection_or_a_busy_api_is_asked_again_and_a_refusal_is_not() {
        let status = |code: u16| {
            kube::Error::Api(
                serde_json::from_value(serde_json::json!({"status": "Failure", "message": "m", "reason": "r", "code": code}))
                    .unwrap(),
            )
        };
        for code in [500, 503, 504] {
            assert!(transient(&status(code)), "{code}");
        }
        for code in [400, 403, 404, 422] {
            assert!(!transient(&status(code)), "{code}");
        }
        let dropped: tower::BoxError = "client error (SendRequest)".into();
        assert!(transient(&kube::Error::Service(dropped)));
        assert!(!transient(&kube::Error::LinesCodecMaxLineLengthExceeded));
    }

    #[test]
    fn a_drain_leaves_mirrors_daemons_and_finished_pods() {
        assert!(evictable(&pod(serde_json::json!({}))));
        assert!(evictable(&pod(serde_json::json!({
            "metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u"}]},
            "status": {"phase": "Running"},
        }))));
        for kept in [
            serde_json::json!({"metadata": {"annotations": {MIRROR_ANNOTATION: "x"}}}),
            serde_json::json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]}}),
            serde_json::json!({"status": {"phase": "Succeeded"}}),
            serde_json::json!({"status": {"phase": "Failed"}}),
        ] {
            assert!(!evictable(&pod(kept.clone())), "{kept}");
        }
    }

    #[test]
    fn on_a_node_that_does_not_answer_a_pod_whose_eviction_was_accepted_is_not_waited_for() {
        let deleting = pod(serde_json::json!({
            "metadata": {"deletionTimestamp": "2026-12-02T00:00:00Z"},
            "status": {"phase": "Running"},
        }));
        assert!(waits_for(&deleting, false));
        assert!(!waits_for(&deleting, true));
        let running = pod(serde_json::json!({"status": {"phase": "Running"}}));
        assert!(waits_for(&running, true));
        let mirror =
            pod(serde_json::json!({"metadata": {"annotations": {MIRROR_ANNOTATION: "x"}}}));
        assert!(!waits_for(&mirror, false));
    }
}
