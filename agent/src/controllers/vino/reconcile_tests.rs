//! The ViNO reconcile against a mocked apiserver (tower-test, as kube-rs's controller-rs does): the exact API
//! calls one reconcile makes, in milliseconds and without a cluster. The real apiserver runs in
//! `agent/tests/kube`.

use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use kube::runtime::controller::Action;

use super::Ctx;
use crate::controllers::common::testing::{mock_client, serve, settings, Handle, Step};
use crate::controllers::common::{Base, Reconciler};
use crate::crd::vino::Vino;

fn vino(spec: serde_json::Value) -> Vino {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "airship.airshipit.org/v1", "kind": "Vino",
        "metadata": {"name": "v", "namespace": "site", "uid": "1234", "generation": 3},
        "spec": spec,
    }))
    .unwrap()
}

fn ctx() -> (Arc<Ctx>, Handle) {
    let (client, handle) = mock_client();
    let base = Base::new("vino", client, Arc::new(settings()), Arc::default());
    (Arc::new(Ctx { base }), handle)
}

#[tokio::test]
async fn an_invalid_spec_is_one_event_and_one_status_write() {
    let (ctx, handle) = ctx();
    let v = vino(serde_json::json!({"nodes": [], "networks": []}));
    let scenario = tokio::spawn(serve(
        handle,
        vec![
            Step {
                method: Method::POST,
                path: "/apis/events.k8s.io/v1/namespaces/site/events",
                status: 201,
                body: serde_json::json!({"metadata": {"name": "e"}, "eventTime": null}),
            },
            Step {
                method: Method::PATCH,
                path: "/apis/airship.airshipit.org/v1/namespaces/site/vinoes/v/status",
                status: 200,
                body: serde_json::to_value(&v).unwrap(),
            },
        ],
    ));
    let action = ctx.apply(&v, "site").await.unwrap();
    drop(ctx);
    let bodies = scenario.await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(300)));
    assert_eq!(bodies[0]["reason"], "InvalidSpec");
    let ready = &bodies[1]["status"]["conditions"][0];
    assert_eq!(
        (ready["type"].as_str(), ready["status"].as_str()),
        (Some("Ready"), Some("False"))
    );
    assert_eq!(ready["reason"], "InvalidSpec");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("bmcCredentialsSecret"),
        "{ready}"
    );
}

#[tokio::test]
async fn an_unchanged_invalid_spec_writes_nothing() {
    let (ctx, handle) = ctx();
    let mut v = vino(serde_json::json!({"nodes": [], "networks": []}));
    // As the first reconcile left it: the same condition, the same generation.
    let first = {
        let (ctx1, handle1) = self::ctx();
        let v1 = v.clone();
        let scenario = tokio::spawn(serve(
            handle1,
            vec![
                Step {
                    method: Method::POST,
                    path: "/events",
                    status: 201,
                    body: serde_json::json!({}),
                },
                Step {
                    method: Method::PATCH,
                    path: "/vinoes/v/status",
                    status: 200,
                    body: serde_json::to_value(&v1).unwrap(),
                },
            ],
        ));
        ctx1.apply(&v1, "site").await.unwrap();
        drop(ctx1);
        scenario.await.unwrap().remove(1)
    };
    v.status = Some(serde_json::from_value(first["status"].clone()).unwrap());
    let scenario = tokio::spawn(serve(handle, vec![]));
    ctx.apply(&v, "site").await.unwrap();
    drop(ctx);
    assert!(scenario.await.unwrap().is_empty());
}

/// A spec found unrealisable only while rendering (an interface on a network the spec lacks, met once a node
/// is selected): the reconcile reads, then reports, and writes none of the objects it would have wanted —
/// not the inline credentials' Secret, not a pool, not a host.
#[tokio::test]
async fn a_spec_that_cannot_be_rendered_writes_no_object() {
    let (ctx, handle) = ctx();
    let v = vino(serde_json::json!({
        "bmcCredentials": {"username": "admin", "password": "pw"},
        "networks": [],
        "nodes": [{"name": "worker", "count": 1,
                   "networkInterfaces": [{"name": "enp1s0", "network": "storage"}],
                   "flavor": {"vcpus": 1, "memoryMiB": 512, "rootDiskGb": 1}}],
    }));
    let list = |items: serde_json::Value| serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items});
    let node = serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.11"}]}});
    let scenario = tokio::spawn(serve(
        handle,
        vec![
            Step {
                method: Method::GET,
                path: "/api/v1/nodes",
                status: 200,
                body: list(serde_json::json!([node])),
            },
            Step {
                method: Method::GET,
                path: "/namespaces/site/ippools",
                status: 200,
                body: list(serde_json::json!([])),
            },
            Step {
                method: Method::GET,
                path: "/namespaces/site/baremetalhosts",
                status: 200,
                body: list(serde_json::json!([])),
            },
            Step {
                method: Method::POST,
                path: "/events",
                status: 201,
                body: serde_json::json!({}),
            },
            Step {
                method: Method::PATCH,
                path: "/vinoes/v/status",
                status: 200,
                body: serde_json::to_value(&v).unwrap(),
            },
        ],
    ));
    let action = ctx.apply(&v, "site").await.unwrap();
    drop(ctx);
    let bodies = scenario.await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(300)));
    let ready = bodies[4]["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["reason"], "InvalidSpec");
    assert_eq!(
        ready["message"],
        "node set worker: interface enp1s0 names unknown network storage"
    );
}
