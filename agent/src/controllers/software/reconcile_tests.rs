//! The Software reconcile against a mocked apiserver (see `common::testing`): the exact API calls one reconcile
//! makes. The real apiserver runs in `agent/tests/kube/software.rs`.

use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use kube::runtime::controller::Action;
use serde_json::json;

use super::Ctx;
use crate::controllers::common::testing::{
    condition, holds, mock_client, serve, settings, Handle, Step,
};
use crate::controllers::common::{Base, Reconciler};
use crate::crd::bpa::Software;
use crate::store::Store;

const PROVISIONINGS: &str = "/apis/bpa.akraino.org/v1alpha1/namespaces/site/provisionings";

fn ctx(store: &tempfile::TempDir) -> (Arc<Ctx>, Handle) {
    let (client, handle) = mock_client();
    let base = Base::new("software", client, Arc::new(settings()), Arc::default());
    let store = Arc::new(Store::open(store.path()).unwrap());
    (Arc::new(Ctx { base, store }), handle)
}

fn software(spec: serde_json::Value) -> Software {
    serde_json::from_value(json!({
        "apiVersion": "bpa.akraino.org/v1alpha1", "kind": "Software",
        "metadata": {"name": "tools", "namespace": "site", "uid": "u1", "generation": 2,
                     "labels": {"cluster": "c1"}},
        "spec": spec,
    }))
    .unwrap()
}

/// The list of the one Provisioning of cluster `c1`, at `generation`, `Ready` as the BPA saw it at `observed`.
fn provisionings(generation: i64, observed: i64) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": [{
        "apiVersion": "bpa.akraino.org/v1alpha1", "kind": "Provisioning",
        "metadata": {"name": "c1", "namespace": "site", "generation": generation,
                     "labels": {"cluster": "c1", "owner": "alice"}},
        "spec": {},
        "status": {"phase": "Ready", "observedGeneration": observed},
    }]})
}

/// A host was just added to the `Ready` cluster: its Provisioning's status is the BPA's word on the generation
/// before. One list, then nothing: no Job (it would install on the host before it joined), no status write.
#[tokio::test]
async fn a_provisioning_the_bpa_has_not_seen_yet_is_one_read_and_no_write() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, handle) = ctx(&dir);
    let sw = software(json!({"masterSoftware": ["tool"]}));
    let scenario = tokio::spawn(serve(
        handle,
        vec![Step {
            method: Method::GET,
            path: PROVISIONINGS,
            status: 200,
            body: provisionings(7, 6),
        }],
    ));
    let action = ctx.apply(&sw, "site").await.unwrap();
    drop(ctx);
    scenario.await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(60)));
}

/// A package named twice, on a cluster that is ready: its old Jobs pruned (none here), one Event and one status
/// write saying why, `Failed` with `InvalidSpec`.
#[tokio::test]
async fn an_invalid_spec_prunes_its_jobs_and_is_one_event_and_one_status_write() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, handle) = ctx(&dir);
    let sw = software(json!({"masterSoftware": ["y", {"y": {"version": "1"}}]}));
    let scenario = tokio::spawn(serve(
        handle,
        vec![
            Step {
                method: Method::GET,
                path: PROVISIONINGS,
                status: 200,
                body: provisionings(7, 7),
            },
            Step {
                method: Method::GET,
                path: "/apis/batch/v1/namespaces/site/jobs",
                status: 200,
                body: json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": []}),
            },
            Step {
                method: Method::POST,
                path: "/apis/events.k8s.io/v1/namespaces/site/events",
                status: 201,
                body: json!({"metadata": {"name": "e"}, "eventTime": null}),
            },
            Step {
                method: Method::PATCH,
                path: "/apis/bpa.akraino.org/v1alpha1/namespaces/site/softwares/tools/status",
                status: 200,
                body: serde_json::to_value(&sw).unwrap(),
            },
        ],
    ));
    ctx.apply(&sw, "site").await.unwrap();
    drop(ctx);
    let bodies = scenario.await.unwrap();
    assert_eq!(bodies[2]["reason"], "Failed", "{}", bodies[2]);
    let status = &bodies[3]["status"];
    assert_eq!(status["phase"], "Failed", "{status}");
    let failed = holds(&bodies[3], "Failed", "InvalidSpec");
    assert_eq!(
        failed["message"],
        "masterSoftware: package y is listed twice (unversioned and 1)"
    );
    // The cluster it waited for is named with the generation it follows.
    let cluster = condition(&bodies[3], "ClusterReady");
    assert_eq!(
        cluster["message"],
        "Provisioning c1 is Ready (generation 7)"
    );
}
