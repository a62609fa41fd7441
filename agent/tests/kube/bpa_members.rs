//! The BPA's hosts in and out of a cluster, against a real kube-apiserver (the agent binary with `--controllers
//! bpa`, genuine Metal3 BareMetalHosts; the test plays the installer): the hosts a Job installs are claimed
//! (`consumerRef`), and another Provisioning naming one is told it is in use; each host is `Joining`, then a
//! `Member`; a worker taken out of the spec is `Removing` while the next Job runs and `Removed` once it finished,
//! its BareMetalHost released (and then free for the other Provisioning); deleting the Provisioning releases
//! the rest.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::bpa::{get_prov, provisioning, start_agent};
use crate::hosts::bmh;
use crate::jobs::job_status;
use crate::support::kube::{env, until};
use foothold_agent::crd::bpa::Provisioning;
use foothold_agent::crd::metal3::BareMetalHost;

/// Each host's `(label, membership)` in `p`'s status.
fn memberships(p: &Provisioning) -> Vec<(String, Option<String>)> {
    p.status
        .iter()
        .flat_map(|s| &s.hosts)
        .map(|h| (h.label.clone(), h.membership.clone()))
        .collect()
}

/// The labels of `p`'s `status.installedHosts`.
fn installed(p: &Provisioning) -> Vec<String> {
    p.status
        .iter()
        .flat_map(|s| &s.installed_hosts)
        .map(|h| h.label.clone())
        .collect()
}

fn of(pairs: &[(&str, &str)]) -> Vec<(String, Option<String>)> {
    pairs
        .iter()
        .map(|(l, m)| (l.to_string(), Some(m.to_string())))
        .collect()
}

/// The name of the object a BareMetalHost's `consumerRef` names, if any.
async fn consumer(hosts: &Api<BareMetalHost>, name: &str) -> Option<String> {
    let h = hosts.get(name).await.unwrap();
    let c = h.spec.consumer_ref?;
    assert_eq!(c.kind.as_deref(), Some("Provisioning"));
    c.name
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_are_claimed_joined_removed_and_released() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "bpa-members").await;
    let tmp = tempfile::tempdir().unwrap();
    let _agent = start_agent(tmp.path(), &ns, "agent-m");
    let (m_mac, w_mac) = ("00:c6:14:04:62:01", "00:c6:14:04:62:02");
    bmh(
        &client,
        &ns,
        ("node-a", m_mac, "10.20.0.11", 4, 4096, "provisioned"),
        json!({}),
    )
    .await;
    bmh(
        &client,
        &ns,
        ("node-b", w_mac, "10.20.0.12", 4, 4096, "provisioned"),
        json!({}),
    )
    .await;
    let provs: Api<Provisioning> = Api::namespaced(client.clone(), &ns);
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    provs
        .create(
            &PostParams::default(),
            &provisioning(
                "c1",
                "c1",
                json!({"masters": [{"m": {"mac-address": m_mac}}], "workers": [{"w": {"mac-address": w_mac}}]}),
            ),
        )
        .await
        .unwrap();
    let status_is = |want: Vec<(String, Option<String>)>, phase: &'static str| {
        let provs = provs.clone();
        move || {
            let (provs, want) = (provs.clone(), want.clone());
            async move {
                get_prov(&provs, "c1").await.filter(|p| {
                    memberships(p) == want
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phase)
                })
            }
        }
    };

    // The first Job: both hosts claimed and joining.
    until(
        "both joining",
        status_is(of(&[("m", "Joining"), ("w", "Joining")]), "Installing"),
    )
    .await;
    for h in ["node-a", "node-b"] {
        assert_eq!(consumer(&hosts, h).await.as_deref(), Some("c1"), "{h}");
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "c1-kubeconfig"}, "stringData": {"kubeconfig": "apiVersion: v1\nkind: Config\n"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    job_status(&client, &ns, "c1-install-g1", true).await;
    let p = until(
        "both members",
        status_is(of(&[("m", "Member"), ("w", "Member")]), "Ready"),
    )
    .await;
    assert_eq!(installed(&p), ["m", "w"]);

    // Another cluster naming the worker's host: it is in use.
    provs
        .create(
            &PostParams::default(),
            &provisioning(
                "c2",
                "c2",
                json!({"masters": [{"m2": {"mac-address": w_mac}}]}),
            ),
        )
        .await
        .unwrap();
    let in_use = until("c2 told the host is in use", || async {
        get_prov(&provs, "c2").await.and_then(|p| {
            p.status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "HostsMatched" && c.reason == "HostInUse")
        })
    })
    .await;
    assert_eq!(
        in_use.message,
        format!("m2: BareMetalHost node-b is used by Provisioning {ns}/c1")
    );

    // The worker taken out: removing while the next Job runs, still claimed.
    provs
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"workers": []}})),
        )
        .await
        .unwrap();
    until(
        "the worker removing",
        status_is(of(&[("m", "Member"), ("w", "Removing")]), "Installing"),
    )
    .await;
    assert_eq!(consumer(&hosts, "node-b").await.as_deref(), Some("c1"));
    job_status(&client, &ns, "c1-install-g2", true).await;
    let p = until(
        "the worker removed",
        status_is(of(&[("m", "Member"), ("w", "Removed")]), "Ready"),
    )
    .await;
    assert_eq!(installed(&p), ["m"]);
    assert_eq!(consumer(&hosts, "node-a").await.as_deref(), Some("c1"));
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    until("the Released event", || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("Released")
                    && e.note.as_deref() == Some("BareMetalHost node-b left cluster c1: released")
            })
    })
    .await;

    // Released, the host is the other cluster's to take.
    until("c2 takes node-b", || async {
        (consumer(&hosts, "node-b").await.as_deref() == Some("c2")).then_some(())
    })
    .await;

    // The Provisioning deleted: its last host released.
    provs.delete("c1", &DeleteParams::default()).await.unwrap();
    until("c1 gone", || async {
        get_prov(&provs, "c1").await.is_none().then_some(())
    })
    .await;
    assert_eq!(consumer(&hosts, "node-a").await, None);
    assert_eq!(consumer(&hosts, "node-b").await.as_deref(), Some("c2"));
}
