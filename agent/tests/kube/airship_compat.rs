//! Airship's own habits, on the real apiserver through the agent binary: what an operator moving from Airship's
//! SIP brings (its finalizer in a SIPCluster's metadata, hosts that share an address) and what an older
//! Foothold left behind (objects under its former finalizer).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

use crate::sip::{hosts, ipv4, ready, sip_cluster, start_agent};
use crate::support::kube::{env, until};
use foothold_agent::controllers::sip::{FINALIZER, FORMER_FINALIZER};
use foothold_agent::crd::metal3::BareMetalHost;
use foothold_agent::crd::sip::SIPCluster;

/// A SIPCluster as Airship's samples write it: with Airship's finalizer already in its metadata.
fn with_finalizer(mut s: SIPCluster, finalizer: &str) -> SIPCluster {
    s.metadata.finalizers = Some(vec![finalizer.to_owned()]);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_sharing_an_address_get_one_jump_host_alias_and_airships_finalizer_lets_deletion_end()
{
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "airship-sip").await;
    let tmp = tempfile::tempdir().unwrap();
    hosts(&client, &ns, 2, 2).await;
    // node-01's oam-ipv4 address is node-00's, as two of Airship's sample hosts share theirs.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .patch(
            "node-01-network-data",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"networkData": format!(
                "networks:\n- id: oam-ipv4\n  ip_address: {}/24\n", ipv4(0)
            )}})),
        )
        .await
        .unwrap();
    let _agent = start_agent(tmp.path(), &ns, "agent-a");
    let sips: Api<SIPCluster> = Api::namespaced(client.clone(), &ns);
    let services = json!({"jumpHost": [{"image": "quay.io/airshipit/jump-host:latest", "nodePort": 30000,
                                        "nodeInterfaceId": "oam-ipv4"}]});
    sips.create(
        &PostParams::default(),
        &with_finalizer(sip_cluster("shared", (1, 1), (0, 0), services), FINALIZER),
    )
    .await
    .unwrap();
    let s = until("SIPCluster shared Ready", || async {
        let s = sips.get("shared").await.ok()?;
        let (status, reason, message) = ready(&s)?;
        assert_ne!(reason, "InfraServiceFailure", "{message}");
        (status == "True").then_some(s)
    })
    .await;
    assert_eq!(s.finalizers(), [FINALIZER]);
    let pod = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get("shared-jump-host")
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    let aliases: BTreeMap<String, Vec<String>> = pod
        .host_aliases
        .unwrap()
        .into_iter()
        .map(|a| (a.ip, a.hostnames.unwrap()))
        .collect();
    assert_eq!(
        aliases,
        BTreeMap::from([(ipv4(0), vec!["node-00".to_owned(), "node-01".to_owned()])])
    );

    sips.delete("shared", &DeleteParams::default())
        .await
        .unwrap();
    until("SIPCluster shared gone", || async {
        sips.get_opt("shared")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let bmhs: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    for h in ["node-00", "node-01"] {
        let labels = bmhs.get(h).await.unwrap().labels().clone();
        assert!(
            !labels.contains_key("sip.airshipit.org/cluster-name"),
            "{h}: {labels:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_under_the_former_finalizer_are_migrated_or_cleaned_up_and_deleted() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "airship-sip-former").await;
    let tmp = tempfile::tempdir().unwrap();
    hosts(&client, &ns, 2, 2).await;
    let sips: Api<SIPCluster> = Api::namespaced(client.clone(), &ns);
    let bmhs: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    // What an older Foothold left: `old` holding node-00 and then deleted while no agent ran, `kept` alive.
    bmhs.patch(
        "node-00",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {
            "sip.airshipit.org/cluster-name": "old",
            "sip.airshipit.org/cluster-namespace": ns,
            "sip.airshipit.org/node-type": "ControlPlane",
        }}})),
    )
    .await
    .unwrap();
    for name in ["old", "kept"] {
        sips.create(
            &PostParams::default(),
            &with_finalizer(
                sip_cluster(name, (1, 0), (0, 0), json!({})),
                FORMER_FINALIZER,
            ),
        )
        .await
        .unwrap();
    }
    sips.delete("old", &DeleteParams::default()).await.unwrap();
    assert!(sips
        .get("old")
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_some());

    let _agent = start_agent(tmp.path(), &ns, "agent-a");
    until("SIPCluster old cleaned up and gone", || async {
        sips.get_opt("old").await.unwrap().is_none().then_some(())
    })
    .await;
    let labels = bmhs.get("node-00").await.unwrap().labels().clone();
    assert_ne!(
        labels
            .get("sip.airshipit.org/cluster-name")
            .map(String::as_str),
        Some("old"),
        "{labels:?}"
    );
    until("SIPCluster kept under the current finalizer", || async {
        let s = sips.get("kept").await.ok()?;
        (s.finalizers() == [FINALIZER]).then_some(())
    })
    .await;
}
