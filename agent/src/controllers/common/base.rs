//! The context every reconciler holds ([`Base`]) and the loop every controller runs ([`run`]): the finalizer
//! around apply and cleanup, metrics, per-object backoff, and the mapping of other kinds' events to objects.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Error as FinalizerError, Event as Finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use super::error::Error;
use crate::controllers::settings::Settings;
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
    /// with its namespace), and records the outcome. An object that carries one of `former` (finalizers this
    /// reconciler went by before) has them replaced by `finalizer_name` while it lives; once it is being
    /// deleted, it is cleaned up (unless `finalizer_name` is there to see to that) and they are removed, so
    /// that no object made under an old name is left undeletable.
    pub async fn reconcile<K, F, Fut>(
        &self,
        obj: Arc<K>,
        (finalizer_name, former): (&str, &[&str]),
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
        let result = if obj
            .finalizers()
            .iter()
            .any(|f| former.contains(&f.as_str()))
        {
            migrate(&api, obj, (finalizer_name, former), |o| {
                f(Finalizer::Cleanup(o), ns)
            })
            .await
        } else {
            gone_is_removed(finalizer(&api, finalizer_name, obj, |event| f(event, ns)).await)
                .map_err(|e| Error::Finalizer(Box::new(e)))
        };
        self.metrics.reconciled(self.controller, started.elapsed());
        if result.is_ok() {
            self.failures.succeeded(&key);
        }
        result
    }

    /// After a failed reconcile: log, count, and retry with the object's backoff.
    pub fn error_policy<K: ResourceExt>(&self, obj: &K, error: &Error) -> Action {
        if let Some(retry) = error.pending() {
            tracing::info!(controller = self.controller, object = %key(obj), %error, "cleanup waits");
            return Action::requeue(retry);
        }
        tracing::warn!(controller = self.controller, object = %key(obj), %error, "reconcile failed");
        self.metrics.reconcile_error(self.controller, error.cause());
        Action::requeue(self.failures.failed(key(obj)))
    }
}

/// A finalizer whose removal found the object gone (404: another reconcile of the same deletion removed it
/// first, and the API server finished the deletion) is removed: that is what the removal was for, not a
/// failure to log, count and retry.
fn gone_is_removed(
    result: Result<Action, FinalizerError<Error>>,
) -> Result<Action, FinalizerError<Error>> {
    match result {
        Err(FinalizerError::RemoveFinalizer(kube::Error::Api(s))) if s.is_not_found() => {
            Ok(Action::await_change())
        }
        other => other,
    }
}

/// An object with one of the `former` finalizers: while it lives, they become `current`; being deleted, it
/// is cleaned up by `cleanup` first if `current` is not there, then they go. One patch, conditional on the
/// object's resourceVersion; its event brings the object back for the next step.
async fn migrate<K, Fut>(
    api: &Api<K>,
    obj: Arc<K>,
    (current, former): (&str, &[&str]),
    cleanup: impl FnOnce(Arc<K>) -> Fut,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    Fut: Future<Output = Result<Action, Error>>,
{
    let deleting = obj.meta().deletion_timestamp.is_some();
    let has_current = obj.finalizers().iter().any(|f| f == current);
    if deleting && !has_current {
        cleanup(obj.clone()).await?;
    }
    let mut finalizers: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| !former.contains(&f.as_str()))
        .cloned()
        .collect();
    if !deleting && !has_current {
        finalizers.push(current.to_owned());
    }
    // A merge patch replaces the list whole; its resourceVersion makes it conditional (409 if it moved).
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": obj.resource_version(), "finalizers": finalizers,
    }});
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await?;
    Ok(Action::await_change())
}

/// A reconciler: the object it reconciles, its finalizer, and what it does while the object lives (`apply`)
/// and once it is being deleted (`cleanup`), both in the object's namespace.
pub trait Reconciler: Send + Sync + 'static {
    type Object: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static;
    const FINALIZER: &'static str;
    /// Finalizers this reconciler went by before: migrated to [`Self::FINALIZER`], never left to strand an
    /// object.
    const FORMER_FINALIZERS: &'static [&'static str] = &[];
    fn base(&self) -> &Base;
    fn apply(
        &self,
        obj: &Self::Object,
        ns: &str,
    ) -> impl Future<Output = Result<Action, Error>> + Send;
    fn cleanup(
        &self,
        obj: &Self::Object,
        ns: &str,
    ) -> impl Future<Output = Result<Action, Error>> + Send;
}

/// Runs `controller` with `ctx` until it is dropped: every reconcile inside the finalizer, with metrics, and
/// failures retried with the object's backoff.
pub async fn run<R: Reconciler>(controller: Controller<R::Object>, ctx: Arc<R>) {
    let name = ctx.base().controller;
    controller
        .run(
            |obj, ctx: Arc<R>| async move {
                let for_event = ctx.clone();
                ctx.base()
                    .reconcile(
                        obj,
                        (R::FINALIZER, R::FORMER_FINALIZERS),
                        |event, ns| async move {
                            match event {
                                Finalizer::Apply(o) => for_event.apply(&o, &ns).await,
                                Finalizer::Cleanup(o) => for_event.cleanup(&o, &ns).await,
                            }
                        },
                    )
                    .await
            },
            |obj, error, ctx| ctx.base().error_policy(obj.as_ref(), error),
            ctx,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(controller = name, error = %e, "controller stream");
            }
        })
        .await;
}

/// The objects of `store` that `keep` selects, to reconcile again: what a watch of another kind maps an
/// event to ("a host changed: re-plan the Provisionings of its namespace").
pub fn every<K>(store: &Store<K>, keep: impl Fn(&K) -> bool) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .into_iter()
        .filter(|o| keep(o))
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::{backoff, Base, Failures};
    use std::sync::Arc;
    use std::time::Duration;

    use axum::http::Method;
    use kube::runtime::controller::Action;
    use serde_json::json;

    use crate::controllers::common::testing::{mock_client, serve, settings, Step};
    use crate::crd::sip::SIPCluster;

    /// A deletion whose cleanup ran, and whose finalizer removal found the object already gone (another
    /// reconcile of it removed the finalizer first): the reconcile succeeds, nothing to log or retry. Any other
    /// failure of the removal stays one.
    #[tokio::test]
    async fn a_finalizer_removal_that_finds_the_object_gone_is_done() {
        let sip: SIPCluster = serde_json::from_value(json!({
            "apiVersion": "airship.airshipit.org/v1", "kind": "SIPCluster",
            "metadata": {"name": "edge", "namespace": "site", "uid": "u1",
                         "deletionTimestamp": "2026-11-30T00:00:00Z",
                         "finalizers": ["sip.foothold.io/cleanup"]},
            "spec": {"nodes": {}, "services": {}},
        }))
        .unwrap();
        for (status, reason, ok) in [(404, "NotFound", true), (500, "InternalError", false)] {
            let (client, handle) = mock_client();
            let base = Base::new("sip", client, Arc::new(settings()), Arc::default());
            let scenario = tokio::spawn(serve(
                handle,
                vec![Step {
                    method: Method::PATCH,
                    path: "/namespaces/site/sipclusters/edge",
                    status,
                    body: json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "reason": reason, "message": "sipclusters \"edge\" not found", "code": status}),
                }],
            ));
            let r = base
                .reconcile(
                    Arc::new(sip.clone()),
                    ("sip.foothold.io/cleanup", &[]),
                    |_, _| async { Ok(Action::await_change()) },
                )
                .await;
            drop(base);
            scenario.await.unwrap();
            assert_eq!(r.is_ok(), ok, "{status}: {r:?}");
        }
    }

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
