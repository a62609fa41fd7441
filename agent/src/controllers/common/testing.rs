//! A mocked apiserver for reconcile-level tests (tower-test, controller-rs's `fixtures.rs` idiom): a client
//! whose requests a scenario answers one by one, failing on any it did not expect.

use std::time::Duration;

use axum::http::{Method, Request, Response};
use kube::client::Body;
use tower_test::mock;

use crate::controllers::settings::Settings;

pub type Handle = mock::Handle<Request<Body>, Response<Body>>;

/// A client of the mocked apiserver (default namespace `site`), and the handle that answers it.
pub fn mock_client() -> (kube::Client, Handle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(service, "site"), handle)
}

pub fn settings() -> Settings {
    Settings {
        kubeconfig: None,
        controllers: vec![],
        namespace: Some("site".into()),
        identity: "test".into(),
        lease_namespace: "site".into(),
        lease_duration: Duration::from_secs(15),
        installer_image: "installer".into(),
        installer_ssh_user: "root".into(),
        drain_timeout_seconds: 600,
        vino_builder_image: "builder".into(),
        ssh_key_secret: "ssh".into(),
        ssh_host_ca: None,
        node_read_token_secret: None,
        approve_kubelet_serving: false,
        advertise_url: None,
        admission: None,
    }
}

/// One expected request: its method, a fragment of its path, and the answer (status and JSON body).
pub struct Step {
    pub method: Method,
    pub path: &'static str,
    pub status: u16,
    pub body: serde_json::Value,
}

/// Serves `steps` in order and fails on anything else; returns the bodies it received.
pub async fn serve(mut handle: Handle, steps: Vec<Step>) -> Vec<serde_json::Value> {
    let mut seen = Vec::new();
    for step in steps {
        let (request, send) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
            .await
            .unwrap_or_else(|_| panic!("no {} {} came", step.method, step.path))
            .expect("the client is alive");
        assert_eq!(request.method(), step.method, "{}", request.uri());
        assert!(
            request.uri().path().contains(step.path),
            "{} {} is not {} …{}…",
            request.method(),
            request.uri(),
            step.method,
            step.path
        );
        let bytes = request.into_body().collect_bytes().await.unwrap();
        seen.push(serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null));
        send.send_response(
            Response::builder()
                .status(step.status)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&step.body).unwrap()))
                .unwrap(),
        );
    }
    // Nothing more: the reconcile has returned, and a late request would be a call the test did not expect.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), handle.next_request())
            .await
            .map_or(true, |r| r.is_none()),
        "an unexpected request after the scenario"
    );
    seen
}

/// The condition `type_` in the status a PATCH sent (`patch`: its body).
pub fn condition<'a>(patch: &'a serde_json::Value, type_: &str) -> &'a serde_json::Value {
    patch["status"]["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no condition {type_} in {patch}"))
}

/// The condition `type_` in the status a PATCH sent, asserted `True` for `reason`.
pub fn holds<'a>(patch: &'a serde_json::Value, type_: &str, reason: &str) -> &'a serde_json::Value {
    let c = condition(patch, type_);
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&"True".into(), &reason.into()),
        "{c}"
    );
    c
}
