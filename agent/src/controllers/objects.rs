//! What every reconciler does with the objects it owns: label and own them, apply them server-side, delete them
//! without relying on a garbage collector, read a Job's outcome, publish Events, set conditions, and back off
//! per object after errors.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{set_condition, Settings};
use crate::metrics::Metrics;

/// What every reconciler's context holds, and the steps every reconcile shares: the finalizer around apply and
/// cleanup, metrics, and per-object backoff.
pub struct Base {
    /// The `controller` label of the metrics.
    pub controller: &'static str,
    pub failures: Failures,
    pub client: kube::Client,
    pub settings: Arc<Settings>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
}

impl Base {
    pub fn new(
        controller: &'static str,
        client: kube::Client,
        settings: Arc<Settings>,
        metrics: Arc<Metrics>,
    ) -> Base {
        Base {
            recorder: Recorder::new(
                client.clone(),
                Reporter {
                    controller: format!("foothold-{controller}"),
                    instance: Some(settings.identity.clone()),
                },
            ),
            controller,
            failures: Failures::default(),
            client,
            settings,
            metrics,
        }
    }

    /// Runs `f` for the object under `finalizer_name` (apply while it lives, cleanup once it is being deleted,
    /// with its namespace), and records the outcome.
    pub async fn reconcile<K, F, Fut>(
        &self,
        obj: Arc<K>,
        finalizer_name: &str,
        f: F,
    ) -> Result<Action, Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
        F: FnOnce(Finalizer<K>, String) -> Fut,
        Fut: Future<Output = Result<Action, Error>>,
    {
        let started = Instant::now();
        let ns = obj
            .namespace()
            .ok_or_else(|| Error::NoNamespace(obj.name_any()))?;
        let key = key(obj.as_ref());
        let api: Api<K> = Api::namespaced(self.client.clone(), &ns);
        let result = finalizer(&api, finalizer_name, obj, |event| f(event, ns))
            .await
            .map_err(|e| Error::Finalizer(Box::new(e)));
        self.metrics.reconciled(self.controller, started.elapsed());
        if result.is_ok() {
            self.failures.succeeded(&key);
        }
        result
    }

    /// After a failed reconcile: log, count, and retry with the object's backoff.
    pub fn error_policy<K: ResourceExt>(&self, obj: &K, error: &Error) -> Action {
        tracing::warn!(controller = self.controller, object = %key(obj), %error, "reconcile failed");
        self.metrics.reconcile_error(self.controller, error.cause());
        Action::requeue(self.failures.failed(key(obj)))
    }
}

/// An API of `K` in the watched namespace, or in all.
pub fn scoped_api<K>(client: &kube::Client, namespace: &Option<String>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The field manager of every server-side apply by the agent.
pub const MANAGER: &str = "foothold-agent";
/// On every object a reconciler creates: the generation of the owner it was made for.
pub const GENERATION_LABEL: &str = "bpa.akraino.org/generation";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("{0} has no namespace")]
    NoNamespace(String),
    #[error("the agent's store: {0}")]
    Store(String),
}

impl Error {
    /// The `cause` label of `foothold_reconcile_errors_total`.
    pub fn cause(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "transport",
            Error::Finalizer(e) => match e.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.cause(),
                _ => "finalizer",
            },
            Error::NoNamespace(_) => "invalid",
            Error::Store(_) => "store",
        }
    }
}

/// Consecutive failures per object (namespace/name), for exponential backoff.
#[derive(Default)]
pub struct Failures(Mutex<HashMap<String, u32>>);

impl Failures {
    /// Counts one more failure of `key` and returns how long to wait before retrying it.
    pub fn failed(&self, key: String) -> Duration {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(key).or_default();
        *n = n.saturating_add(1);
        backoff(*n)
    }

    /// Forgets the failures of `key` after a successful reconcile.
    pub fn succeeded(&self, key: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

/// `namespace/name` of an object.
pub fn key<K: ResourceExt>(obj: &K) -> String {
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

/// 1 s after the first failure, doubling up to 256 s.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(8))
}

/// A ServiceAccount `name` with a Role of `rules` bound to it, all owned by `owner`: the identity of a Job or
/// DaemonSet a reconciler runs, allowed exactly what it needs.
pub async fn apply_account<K>(
    client: &kube::Client,
    owner: &K,
    owner_label: &str,
    ns: &str,
    name: &str,
    rules: serde_json::Value,
) -> Result<(), Error>
where
    K: Resource<DynamicType = ()>,
{
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let meta = owned_meta(owner, owner_label, ns, name);
    server_side_apply(
        &Api::<ServiceAccount>::namespaced(client.clone(), ns),
        name,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}),
    )
    .await?;
    server_side_apply(
        &Api::<Role>::namespaced(client.clone(), ns),
        name,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
               "rules": rules}),
    )
    .await?;
    server_side_apply(
        &Api::<RoleBinding>::namespaced(client.clone(), ns),
        name,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
    )
    .await?;
    Ok(())
}

/// Metadata of an object `owner` controls: its name under `owner_label`, its generation, and a controller
/// ownerReference.
pub fn owned_meta<K>(owner: &K, owner_label: &str, ns: &str, name: &str) -> serde_json::Value
where
    K: Resource<DynamicType = ()>,
{
    json!({
        "name": name,
        "namespace": ns,
        "labels": {
            owner_label: owner.meta().name.clone().unwrap_or_default(),
            GENERATION_LABEL: owner.meta().generation.unwrap_or(0).to_string(),
        },
        "ownerReferences": [owner.controller_owner_ref(&()).expect("a stored object has a uid")],
    })
}

pub async fn server_side_apply<K>(
    api: &Api<K>,
    name: &str,
    body: serde_json::Value,
) -> Result<(), Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(())
}

/// Writes `status` as the object's whole status with a server-side apply of the status subresource: fields the
/// agent wrote before and `status` leaves out (a cleared reference, a map key gone) are removed, which a merge
/// patch would leave behind.
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    status: &impl serde::Serialize,
) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch_status(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": status,
        })),
    )
    .await?;
    Ok(())
}

pub async fn delete_ignoring_missing<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    // Background propagation: there may be no garbage collector, but where there is one, pods go too.
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes every object of `api` labelled `owner_label=owner`, except the one named `keep`.
pub async fn delete_owned<K>(
    api: &Api<K>,
    owner_label: &str,
    owner: &str,
    keep: Option<&str>,
) -> Result<(), Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + Resource,
{
    for obj in api
        .list(&ListParams::default().labels(&format!("{owner_label}={owner}")))
        .await?
        .items
    {
        if keep != Some(obj.name_any().as_str()) {
            delete_ignoring_missing(api, &obj.name_any()).await?;
        }
    }
    Ok(())
}

pub enum JobOutcome {
    Running,
    Succeeded,
    Failed(String),
}

/// A Job's outcome from its conditions (the Job controller's, or a test's standing in for it).
pub fn job_outcome(job: &Job) -> JobOutcome {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    for c in &conditions {
        if c.status == "True" && (c.type_ == "Complete" || c.type_ == "SuccessCriteriaMet") {
            return JobOutcome::Succeeded;
        }
        if c.status == "True" && (c.type_ == "Failed" || c.type_ == "FailureTarget") {
            return JobOutcome::Failed(format!(
                "{}: {}",
                c.reason.clone().unwrap_or_else(|| "Failed".into()),
                c.message.clone().unwrap_or_default()
            ));
        }
    }
    JobOutcome::Running
}

/// Sets several conditions of one generation: `(type, status, reason, message)` each.
pub fn set_conditions(
    conditions: &mut Vec<Condition>,
    generation: i64,
    updates: &[(&str, bool, &str, &str)],
) {
    for (type_, status, reason, message) in updates {
        set_condition(
            conditions,
            type_,
            *status,
            reason,
            message,
            Some(generation),
        );
    }
}

/// Publishes an Event about `obj`; a failure is logged, never fatal to the reconcile.
pub async fn publish<K>(recorder: &Recorder, obj: &K, type_: EventType, reason: &str, note: &str)
where
    K: Resource<DynamicType = ()>,
{
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &obj.object_ref(&())).await {
        tracing::debug!(error = %e, "publishing an event");
    }
}

#[cfg(test)]
mod tests {
    use super::{backoff, Failures};
    use std::time::Duration;

    #[test]
    fn backoff_doubles_from_one_second_up_to_256_seconds() {
        let secs: Vec<u64> = (1..=11).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 64, 128, 256, 256, 256]);
        assert_eq!(backoff(u32::MAX), Duration::from_secs(256));
    }

    #[test]
    fn failures_count_per_object_and_reset_on_success() {
        let f = Failures::default();
        assert_eq!(f.failed("ns/a".into()), Duration::from_secs(1));
        assert_eq!(f.failed("ns/a".into()), Duration::from_secs(2));
        assert_eq!(f.failed("ns/b".into()), Duration::from_secs(1));
        f.succeeded("ns/a");
        assert_eq!(f.failed("ns/a".into()), Duration::from_secs(1));
        assert_eq!(f.failed("ns/b".into()), Duration::from_secs(2));
    }
}
