//! What the Job controller and the kubelet would write, where nothing runs Jobs or pods: a Job's outcome, a
//! finished attempt's pod with the installer's termination message, and a pod whose installer cannot start.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

pub(crate) async fn job_status(client: &kube::Client, ns: &str, name: &str, success: bool) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = if success {
        json!({"startTime": now, "completionTime": now, "succeeded": 1, "active": 0, "ready": 0, "terminating": 0,
               "conditions": [
                   {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastTransitionTime": now, "lastProbeTime": now},
                   {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastTransitionTime": now, "lastProbeTime": now}]})
    } else {
        json!({"startTime": now, "failed": 3, "active": 0, "ready": 0, "terminating": 0,
               "conditions": [
                   {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastTransitionTime": now, "lastProbeTime": now},
                   {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastTransitionTime": now, "lastProbeTime": now}]})
    };
    Api::<Job>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap_or_else(|e| panic!("patching Job {name} status: {e}"));
}

/// A pod of Job `job` whose `installer` container failed with `message` as its termination message.
pub(crate) async fn failed_attempt(client: &kube::Client, ns: &str, job: &str, message: &str) {
    ended_attempt(client, ns, job, 1, message).await;
}

/// A pod of Job `job` whose `installer` container ended with exit code `code` (0: the pod `Succeeded`, else
/// `Failed`) and `message` as its termination message.
pub(crate) async fn ended_attempt(
    client: &kube::Client,
    ns: &str,
    job: &str,
    code: i32,
    message: &str,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let name = format!("{job}-x7k2p");
    let pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"job-name": job}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "installer", "image": "installer:1"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    pods.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": if code == 0 { "Succeeded" } else { "Failed" }, "containerStatuses": [{
            "name": "installer", "ready": false, "restartCount": 0, "image": "installer:1", "imageID": "",
            "state": {"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }, "startedAt": now, "finishedAt": now,
                "message": message}}}]}})),
    )
    .await
    .unwrap();
}

/// A pod of Job `job` (labelled as the Job controller labels it: `job-name`, and the template's `owner_label`
/// with `owner`) whose `installer` container the kubelet keeps waiting with `reason` and `message`; `None`
/// makes it run instead.
pub(crate) async fn waiting_attempt(
    client: &kube::Client,
    ns: &str,
    job: &str,
    (owner_label, owner): (&str, &str),
    waiting: Option<(&str, &str)>,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let name = format!("{job}-w4h9q");
    if pods.get_opt(&name).await.unwrap().is_none() {
        let pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"job-name": job, owner_label: owner}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "installer", "image": "installer:1"}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let (phase, state) = match waiting {
        Some((reason, message)) => (
            "Pending",
            json!({"waiting": {"reason": reason, "message": message}}),
        ),
        None => ("Running", json!({"running": {"startedAt": now}})),
    };
    pods.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": phase, "containerStatuses": [{
            "name": "installer", "ready": waiting.is_none(), "restartCount": 0, "image": "installer:1",
            "imageID": "", "state": state}]}})),
    )
    .await
    .unwrap();
}
