//! `install-cluster`'s drain of a host leaving its cluster, on the real apiserver: the node cordoned, its pods
//! evicted through the Eviction API, so a PodDisruptionBudget that allows no disruption holds the drain until
//! it does; a DaemonSet's pod, a static pod's mirror and a finished pod stay, another node's pods are not
//! touched; a drain that the budget holds past its time fails naming the pod and the refusal. There is no
//! disruption controller or kubelet here: the test writes the budget's status as the controller would, and
//! removes an evicted pod as its kubelet would once it stopped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::kube::{env, until};
use foothold_agent::installer::remove;

async fn create<K>(api: &Api<K>, value: serde_json::Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(
        &PostParams::default(),
        &serde_json::from_value(value).unwrap(),
    )
    .await
    .unwrap()
}

/// A pod on `node`, `Running` and `Ready` (or in `phase`), with `meta` merged into its metadata.
async fn pod(pods: &Api<Pod>, name: &str, node: &str, meta: serde_json::Value, phase: &str) {
    let mut metadata = json!({"name": name, "labels": {"app": "web"}});
    for (k, v) in meta.as_object().unwrap() {
        metadata[k] = v.clone();
    }
    create(
        pods,
        json!({
            "metadata": metadata,
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10.1"}]},
        }),
    )
    .await;
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": phase,
            "conditions": [{"type": "Ready", "status": if phase == "Running" { "True" } else { "False" }}]}})),
    )
    .await
    .unwrap();
}

/// The budget's status as the disruption controller would write it.
async fn budget_allows(pdbs: &Api<PodDisruptionBudget>, allowed: i32) {
    let generation = pdbs.get("web").await.unwrap().metadata.generation;
    pdbs.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"observedGeneration": generation, "disruptionsAllowed": allowed,
            "currentHealthy": 2, "desiredHealthy": 2 - allowed, "expectedPods": 2}}),
        ),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_drain_evicts_through_the_budget_and_leaves_what_it_must() {
    let env = env();
    // As the installer's: kube's own retries of a 429 would hold each refused eviction for minutes.
    let client = env.client_without_retries().await;
    let ns = env.namespace(&client, "drain").await;
    let (leaving, staying) = (format!("{ns}-leaving"), format!("{ns}-staying"));
    let nodes: Api<Node> = Api::all(client.clone());
    for n in [&leaving, &staying] {
        create(&nodes, json!({"metadata": {"name": n}})).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let owner = |kind: &str| {
        json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": kind, "name": "x",
            "uid": "00000000-0000-0000-0000-000000000001"}]})
    };
    pod(&pods, "web-a", &leaving, owner("ReplicaSet"), "Running").await;
    pod(&pods, "web-b", &staying, owner("ReplicaSet"), "Running").await;
    pod(&pods, "daemon", &leaving, owner("DaemonSet"), "Running").await;
    pod(
        &pods,
        "mirror",
        &leaving,
        json!({"annotations": {"kubernetes.io/config.mirror": "x"}}),
        "Running",
    )
    .await;
    pod(&pods, "done", &leaving, json!({}), "Succeeded").await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    create(
        &pdbs,
        json!({"metadata": {"name": "web"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
    )
    .await;
    budget_allows(&pdbs, 0).await;

    let refusals = Arc::new(Mutex::new(Vec::<String>::new()));
    let heard = refusals.clone();
    let drain = tokio::spawn({
        let (client, leaving) = (client.clone(), leaving.clone());
        async move {
            let said = move |why: String| heard.lock().unwrap().push(why);
            remove::drain(&client, &leaving, Duration::from_secs(60), false, &said).await
        }
    });
    // Held by the budget: told once, the node cordoned, the pod still there.
    until("the budget's refusal", || async {
        let heard = refusals.lock().unwrap().first().cloned();
        heard.or_else(|| drain.is_finished().then(String::new))
    })
    .await;
    assert!(
        !drain.is_finished(),
        "the drain ended while the budget allows nothing: {:?}",
        drain.await
    );
    let said = refusals.lock().unwrap().clone();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].starts_with(&format!("{ns}/web-a: ")) && said[0].contains("disruption budget"),
        "{said:?}"
    );
    let node = nodes.get(&leaving).await.unwrap();
    assert_eq!(node.spec.unwrap().unschedulable, Some(true));
    assert!(pods
        .get("web-a")
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_none());

    // The budget allows one: the pod is evicted; its kubelet removes it once stopped.
    budget_allows(&pdbs, 1).await;
    until("web-a evicted", || async {
        pods.get_opt("web-a")
            .await
            .unwrap()
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    pods.delete("web-a", &DeleteParams::default().grace_period(0))
        .await
        .ok();
    let drained = drain.await.unwrap().expect("the drain");
    assert_eq!(drained.evicted, [format!("{ns}/web-a")]);
    for kept in ["web-b", "daemon", "mirror", "done"] {
        assert!(
            pods.get(kept)
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_none(),
            "{kept}"
        );
    }
    assert_eq!(
        nodes
            .get(&staying)
            .await
            .unwrap()
            .spec
            .unwrap()
            .unschedulable,
        None
    );

    // web-b's node drained while the budget allows nothing: the drain gives up when its time is up.
    budget_allows(&pdbs, 0).await;
    let quiet = |_: String| {};
    let err = remove::drain(&client, &staying, Duration::from_secs(1), false, &quiet)
        .await
        .expect_err("held past its time");
    assert!(
        err.contains(&format!("{ns}/web-b still on it")) && err.contains("eviction refused"),
        "{err}"
    );

    // Uncordoned, as after a package's drain: schedulable again, and again without harm.
    for _ in 0..2 {
        remove::uncordon(&client, &staying).await.unwrap();
        let node = nodes.get(&staying).await.unwrap();
        assert_eq!(node.spec.unwrap().unschedulable, None);
    }

    // The Node deleted, and deleted again: gone counts as deleted.
    for _ in 0..2 {
        remove::delete(&client, &leaving).await.unwrap();
    }
    assert!(nodes.get_opt(&leaving).await.unwrap().is_none());
    remove::delete(&client, &staying).await.unwrap();
}
