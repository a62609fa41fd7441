//! The SIP reconcile against a mocked apiserver (see `common::testing`): what one reconcile asks and writes.

use std::sync::Arc;

use axum::http::Method;
use serde_json::json;

use super::Ctx;
use crate::controllers::common::testing::{mock_client, serve, settings, Step};
use crate::controllers::common::{Base, Reconciler};
use crate::crd::sip::SIPCluster;

fn secret(name: &str, data: serde_json::Value) -> serde_json::Value {
    use base64::Engine as _;
    let data: serde_json::Map<String, serde_json::Value> = data
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let v = base64::engine::general_purpose::STANDARD.encode(v.as_str().unwrap());
            (k.clone(), json!(v))
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "site"}, "data": data})
}

/// Another writer labelled the host between the read and the claim: the claim's conditional patch gets 409.
/// The reconcile fails (the controller requeues it with backoff) and writes no status: the next one re-plans
/// from what is there now.
#[tokio::test]
async fn a_conflict_on_a_claim_requeues_without_a_status_write() {
    let (client, handle) = mock_client();
    let ctx = Arc::new(Ctx {
        base: Base::new("sip", client, Arc::new(settings()), Arc::default()),
    });
    let sip: SIPCluster = serde_json::from_value(json!({
        "apiVersion": "airship.airshipit.org/v1", "kind": "SIPCluster",
        "metadata": {"name": "edge", "namespace": "site", "uid": "u1", "generation": 1},
        "spec": {"nodes": {"ControlPlane": {"labelSelector": {"matchLabels": {"pool": "sip"}},
                                            "count": {"active": 1, "standby": 0}}},
                 "services": {}},
        // Generation 1 was seen already: no "Progressing" write first.
        "status": {"observedGeneration": 1},
    }))
    .unwrap();
    let bmh = json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "node-00", "namespace": "site", "resourceVersion": "7", "labels": {"pool": "sip"}},
        "spec": {"online": true, "bmc": {"address": "redfish+http://127.0.0.1:8000/redfish/v1/Systems/node-00",
                                         "credentialsName": "node-00-bmc"},
                 "networkData": {"name": "node-00-network-data"}},
        "status": {"provisioning": {"state": "available"}},
    });
    let list = |items: Vec<serde_json::Value>| json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items});
    let scenario = tokio::spawn(serve(
        handle,
        vec![
            Step {
                method: Method::GET,
                path: "/namespaces/site/baremetalhosts",
                status: 200,
                body: list(vec![bmh]),
            },
            Step {
                method: Method::GET,
                path: "/api/v1/namespaces/site/secrets",
                status: 200,
                body: list(vec![
                    secret(
                        "node-00-bmc",
                        json!({"username": "admin", "password": "pw"}),
                    ),
                    secret(
                        "node-00-network-data",
                        json!({"networkData": "{\"networks\": [{\"id\": \"oam\", \"ip_address\": \"10.0.0.10/24\"}]}"}),
                    ),
                ]),
            },
            Step {
                method: Method::PATCH,
                path: "/namespaces/site/baremetalhosts/node-00",
                status: 409,
                body: json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict",
                             "message": "the object has been modified", "code": 409}),
            },
        ],
    ));
    let err = ctx.apply(&sip, "site").await.unwrap_err();
    drop(ctx);
    let bodies = scenario.await.unwrap();
    assert!(
        err.to_string().contains("409") || err.to_string().contains("modified"),
        "{err}"
    );
    // The claim named the version it read, so it could not overwrite the other writer's labels.
    let claim = &bodies[2]["metadata"];
    assert_eq!(claim["resourceVersion"], "7", "{claim}");
    assert_eq!(
        claim["labels"]["sip.airshipit.org/cluster-name"], "edge",
        "{claim}"
    );
}
