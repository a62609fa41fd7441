//! The drains the operator asks for before a host goes (the rules are `hold`'s): each reconcile of a
//! Provisioning runs one round of each host's drain in the workload cluster (cordon, evict through the
//! Eviction API: `installer::remove::drain`), sets `bpa.akraino.org/drained` once no pod a drain moves is left,
//! undoes a drain taken back and forgets hosts that went. A PodDisruptionBudget that allows no eviction holds
//! the drain as long as it does (as `kubectl drain` without a timeout): the host's membership says `Draining`
//! and the agent's log why.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node as KubeNode;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;
use serde_json::json;

use super::hold::{self, Step, DRAINED_ANNOTATION, DRAIN_ANNOTATION};
use super::members::MEMBER;
use crate::controllers::common::{publish, workload, Base, Error};
use crate::crd::bpa::{HostStatus, Provisioning};
use crate::crd::metal3::BareMetalHost;
use crate::installer::remove;

/// A host whose node is being drained.
pub const DRAINING: &str = "Draining";
/// A host whose node is drained: it may go.
pub const DRAINED: &str = "Drained";
/// Between two rounds of a drain under way.
const ROUND: Duration = Duration::from_secs(5);
/// A workload API that does not answer within this is tried again next round.
const API_REQUEST: Duration = Duration::from_secs(10);

/// Does what `hold::step` says for each BareMetalHost `p` claimed, and shows drains in `hosts` (this
/// reconcile's `status.hosts`; `shown`: the last status's). `secret`: the workload cluster's kubeconfig.
/// Returns when to look again while a drain is under way.
pub async fn drains(
    base: &Base,
    p: &Provisioning,
    (ns, secret): (&str, &str),
    bmhs: &[BareMetalHost],
    hosts: &mut [HostStatus],
    shown: &[HostStatus],
) -> Result<Option<Duration>, Error> {
    let api: Api<BareMetalHost> = Api::namespaced(base.client.clone(), ns);
    let name = p.name_any();
    let mut workload_client = None;
    let mut again = None;
    for bmh in bmhs {
        if hold::claimed_by(bmh).and_then(|c| c.name.as_deref()) != Some(name.as_str()) {
            continue;
        }
        let host = bmh.name_any();
        let entry = hosts
            .iter_mut()
            .find(|h| h.bare_metal_host.as_deref() == Some(host.as_str()));
        let label = entry
            .as_ref()
            .map_or_else(|| host.clone(), |h| h.label.clone());
        let member = entry
            .as_ref()
            .is_some_and(|h| h.membership.as_deref() == Some(MEMBER));
        let step = hold::step(bmh, member.then_some(label.as_str()), &label);
        let annotate = |value: serde_json::Value| {
            let api = api.clone();
            let host = host.clone();
            async move {
                api.patch(
                    &host,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": value}})),
                )
                .await
            }
        };
        match step {
            Step::Nothing => {
                if hold::provisioned(bmh)
                    && hold::annotation(bmh, DRAINED_ANNOTATION).is_some_and(|v| !v.is_empty())
                {
                    set(entry, DRAINED);
                }
            }
            Step::Forget => {
                annotate(json!({DRAIN_ANNOTATION: null, DRAINED_ANNOTATION: null})).await?;
            }
            Step::Drained(value) => {
                annotate(json!({DRAINED_ANNOTATION: value})).await?;
                set(entry, DRAINED);
                let note = format!("BareMetalHost {host} runs no node of the cluster: it may go");
                publish(&base.recorder, p, EventType::Normal, "Drained", &note).await;
            }
            Step::Uncordon(node) => {
                let client = connect(base, ns, secret, &mut workload_client).await?;
                match client {
                    Ok(client) => {
                        if let Err(why) = uncordon(&client, &node).await {
                            tracing::warn!(%host, %node, %why, "cannot uncordon");
                            again = Some(ROUND);
                            continue;
                        }
                        annotate(json!({DRAINED_ANNOTATION: null})).await?;
                        let note = format!(
                            "the drain of {node} (BareMetalHost {host}) was taken back: schedulable again"
                        );
                        publish(&base.recorder, p, EventType::Normal, "Uncordoned", &note).await;
                    }
                    Err(why) => {
                        tracing::warn!(%host, %node, %why, "cannot reach the workload cluster to uncordon");
                        again = Some(ROUND);
                    }
                }
            }
            Step::Drain(node) => {
                let started = shown
                    .iter()
                    .any(|h| h.label == label && h.membership.as_deref() == Some(DRAINING));
                set(entry, DRAINING);
                if !started {
                    let note = format!(
                        "draining {node} (BareMetalHost {host}, annotated {DRAIN_ANNOTATION}): cordoned, its \
                         pods evicted; the host may go once it is drained"
                    );
                    publish(&base.recorder, p, EventType::Normal, DRAINING, &note).await;
                }
                again = Some(ROUND);
                let client = match connect(base, ns, secret, &mut workload_client).await? {
                    Ok(client) => client,
                    Err(why) => {
                        tracing::warn!(%host, %node, %why, "cannot reach the workload cluster to drain");
                        continue;
                    }
                };
                let told = |why: String| tracing::info!(%node, %why, "an eviction was refused");
                // One round: cordon, evict what is there, done when nothing a drain moves is left.
                match remove::drain(&client, &node, Duration::ZERO, false, &told).await {
                    Ok(_) => {
                        annotate(json!({DRAINED_ANNOTATION: node})).await?;
                        let hosts_entry = hosts
                            .iter_mut()
                            .find(|h| h.bare_metal_host.as_deref() == Some(host.as_str()));
                        set(hosts_entry, DRAINED);
                        let note = format!("{node} is drained: BareMetalHost {host} may go");
                        publish(&base.recorder, p, EventType::Normal, DRAINED, &note).await;
                    }
                    Err(why) => tracing::info!(%host, %node, %why, "draining"),
                }
            }
        }
    }
    Ok(again)
}

fn set(entry: Option<&mut HostStatus>, membership: &str) {
    if let Some(h) = entry {
        h.membership = Some(membership.into());
    }
}

/// The workload cluster's client, made once per reconcile; why not, if its kubeconfig cannot be read or used.
async fn connect(
    base: &Base,
    ns: &str,
    secret: &str,
    made: &mut Option<kube::Client>,
) -> Result<Result<kube::Client, String>, Error> {
    if let Some(c) = made {
        return Ok(Ok(c.clone()));
    }
    let made_now = workload::from_secret(&base.client, ns, secret, API_REQUEST).await?;
    Ok(made_now.inspect(|c| *made = Some(c.clone())))
}

/// Makes `node` schedulable again; a node that is not there is fine (the host ran none, or it left).
pub(super) async fn uncordon(client: &kube::Client, node: &str) -> Result<(), String> {
    let patch = Patch::Merge(json!({"spec": {"unschedulable": null}}));
    match Api::<KubeNode>::all(client.clone())
        .patch(node, &PatchParams::default(), &patch)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}
