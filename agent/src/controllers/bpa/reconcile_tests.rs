//! The Provisioning reconcile against a mocked apiserver (see `common::testing`): the exact API calls one
//! reconcile makes. The real apiserver runs in `agent/tests/kube/bpa*.rs`.

use std::sync::Arc;

use axum::http::Method;
use serde_json::json;

use super::{render, Ctx};
use crate::controllers::common::testing::{holds, mock_client, serve, settings, Handle, Step};
use crate::controllers::common::{Base, Reconciler};
use crate::crd::bpa::Provisioning;

const BMHS: &str = "/apis/metal3.io/v1alpha1/namespaces/site/baremetalhosts";
const JOBS: &str = "/apis/batch/v1/namespaces/site/jobs";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/site/events";
const STATUS: &str = "/apis/bpa.akraino.org/v1alpha1/namespaces/site/provisionings/c1/status";

fn ctx() -> (Arc<Ctx>, Handle) {
    let (client, handle) = mock_client();
    let base = Base::new("bpa", client, Arc::new(settings()), Arc::default());
    (Arc::new(Ctx { base }), handle)
}

fn provisioning(spec: serde_json::Value, status: serde_json::Value) -> Provisioning {
    serde_json::from_value(json!({
        "apiVersion": "bpa.akraino.org/v1alpha1", "kind": "Provisioning",
        "metadata": {"name": "c1", "namespace": "site", "uid": "u1", "generation": 1,
                     "labels": {"cluster": "c1", "owner": "alice"}},
        "spec": spec, "status": status,
    }))
    .unwrap()
}

fn list(items: Vec<serde_json::Value>) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})
}

fn step(method: Method, path: &'static str, status: u16, body: serde_json::Value) -> Step {
    Step {
        method,
        path,
        status,
        body,
    }
}

/// An Event created (the reconcile's one).
fn event() -> Step {
    step(
        Method::POST,
        EVENTS,
        201,
        json!({"metadata": {"name": "e"}, "eventTime": null}),
    )
}

/// A master whose MAC is not one: the hosts and this generation's Job are read (there is none), then one Event
/// and one status write, `Failed` with the spec's problem; nothing is claimed or created.
#[tokio::test]
async fn an_invalid_spec_is_one_event_and_one_status_write() {
    let (ctx, handle) = ctx();
    let p = provisioning(
        json!({"masters": [{"master-0": {"mac-address": "not-a-mac"}}]}),
        json!(null),
    );
    let not_found = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                           "message": "jobs.batch \"c1-install-g1\" not found", "code": 404});
    let scenario = tokio::spawn(serve(
        handle,
        vec![
            step(Method::GET, BMHS, 200, list(vec![])),
            step(Method::GET, "/jobs/c1-install-g1", 404, not_found),
            event(),
            step(
                Method::PATCH,
                STATUS,
                200,
                serde_json::to_value(&p).unwrap(),
            ),
        ],
    ));
    ctx.apply(&p, "site").await.unwrap();
    drop(ctx);
    let bodies = scenario.await.unwrap();
    assert_eq!(bodies[2]["reason"], "Failed", "{}", bodies[2]);
    assert_eq!(bodies[3]["status"]["phase"], "Failed", "{}", bodies[3]);
    let failed = holds(&bodies[3], "Failed", "InvalidSpec");
    assert_eq!(
        failed["message"],
        "master-0: \"not-a-mac\" is not a MAC address"
    );
}

/// A Provisioning `Installing` with its generation's installer Job, whose state is `job_status` and whose one
/// pod's is `pod_status`; the calls one reconcile makes of it, the hosts listed (none), the Job read, its
/// siblings pruned (none), its outcome and its pod read, to one Event and one status write.
fn installing(
    job_status: serde_json::Value,
    pod_status: serde_json::Value,
) -> (Provisioning, Vec<Step>) {
    let spec = json!({"masters": [{"master-0": {"mac-address": "52:54:00:00:00:01"}}]});
    let p = provisioning(
        spec.clone(),
        json!({"phase": "Installing", "observedGeneration": 1, "jobName": "c1-install-g1"}),
    );
    let installs = render::installs(&serde_json::from_value(spec).unwrap());
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "c1-install-g1", "namespace": "site",
                     "annotations": {render::INSTALLS: installs}},
        "status": job_status,
    });
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "c1-install-g1-x", "namespace": "site",
                     "creationTimestamp": "2026-12-02T10:00:00Z"},
        "status": pod_status,
    });
    let steps = vec![
        step(Method::GET, BMHS, 200, list(vec![])),
        step(Method::GET, "/jobs/c1-install-g1", 200, job.clone()),
        step(Method::GET, JOBS, 200, list(vec![job.clone()])),
        step(Method::GET, "/jobs/c1-install-g1", 200, job),
        step(
            Method::GET,
            "/api/v1/namespaces/site/pods",
            200,
            list(vec![pod]),
        ),
        event(),
        step(
            Method::PATCH,
            STATUS,
            200,
            serde_json::to_value(&p).unwrap(),
        ),
    ];
    (p, steps)
}

/// The generation's installer Job failed: its pod's last words (the installer's termination message) are in the
/// `Failed` condition with the Job's own reason, after one Event; the Job is kept for its logs.
#[tokio::test]
async fn a_failed_job_is_failed_with_the_installers_message() {
    let (ctx, handle) = ctx();
    let (p, steps) = installing(
        json!({"conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy",
                               "message": "Container installer for pod site/c1-install-g1-x failed"}]}),
        json!({"containerStatuses": [{
            "name": "installer", "image": "installer", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 1,
                                     "message": "master-0 kubeadm init: port 6443 is in use\n"}}}]}),
    );
    let scenario = tokio::spawn(serve(handle, steps));
    ctx.apply(&p, "site").await.unwrap();
    drop(ctx);
    let bodies = scenario.await.unwrap();
    assert_eq!(bodies[5]["type"], "Warning", "{}", bodies[5]);
    let status = &bodies[6]["status"];
    assert_eq!(status["phase"], "Failed", "{status}");
    let failed = holds(&bodies[6], "Failed", "JobFailed");
    assert_eq!(
        failed["message"],
        "installer Job c1-install-g1 failed: master-0 kubeadm init: port 6443 is in use \
         (PodFailurePolicy: Container installer for pod site/c1-install-g1-x failed)"
    );
    assert_eq!(status["jobName"], "c1-install-g1");
}

/// The generation's installer Job runs, but its pod cannot pull the installer image: the Provisioning stays
/// `Installing`, and a Warning Event and its conditions say why the installer waits (`InstallerWaiting`, the
/// kubelet's reason).
#[tokio::test]
async fn a_job_whose_pod_cannot_start_says_why() {
    let (ctx, handle) = ctx();
    let (p, steps) = installing(
        json!({"active": 1}),
        json!({"phase": "Pending", "containerStatuses": [{
            "name": "installer", "image": "installer", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff",
                                  "message": "Back-off pulling image \"installer\""}}}]}),
    );
    let scenario = tokio::spawn(serve(handle, steps));
    ctx.apply(&p, "site").await.unwrap();
    drop(ctx);
    let bodies = scenario.await.unwrap();
    assert_eq!(bodies[5]["type"], "Warning", "{}", bodies[5]);
    let note = bodies[5]["note"].as_str().unwrap();
    assert!(note.contains("ImagePullBackOff"), "{note}");
    let status = &bodies[6]["status"];
    assert_eq!(status["phase"], "Installing", "{status}");
    let installing = holds(&bodies[6], "Installing", "InstallerWaiting");
    let message = installing["message"].as_str().unwrap();
    assert!(
        message.starts_with("installer Job c1-install-g1 cannot start: ")
            && message.contains("ImagePullBackOff"),
        "{message}"
    );
}
