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
                path: "/apis/airship.airshipit.org/v1/namespaces/site/vinos/v/status",
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
                    path: "/vinos/v/status",
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
