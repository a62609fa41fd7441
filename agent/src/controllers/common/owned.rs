//! The objects one owner's reconcile wants, applied, and the ones it no longer wants, pruned (the idea of
//! stackable operator-rs's `ClusterResources`). Every owned object is labelled with its owner's name and the
//! owner's generation (each reconciler's own label keys: [`Ownership`]), carries a controller ownerReference,
//! and is applied server-side by one field manager. The tracker remembers, per kind, what this reconcile
//! applied (or [`Owned::keep`]s), so [`Owned::prune`] deletes exactly the owner's objects of that kind it did
//! not: a service removed from the spec, a node set scaled down, a Job of an earlier generation. A tracker
//! that applied nothing prunes everything, which is how a finalizer cleans up without a garbage collector.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::apply::{delete_ignoring_missing, MANAGER};
use super::error::Error;

/// The label keys a reconciler marks its objects with.
#[derive(Clone, Copy, Debug)]
pub struct Ownership {
    /// The owner's name: `sip.airshipit.org/sipcluster=<name>`. Watches and pruning select on it.
    pub owner_label: &'static str,
    /// The owner's generation the object was made for: `sip.airshipit.org/generation=<n>`.
    pub generation_label: &'static str,
}

/// A kind, as the tracker files what was applied: `apps/v1/Deployment`.
fn kind<K: Resource<DynamicType = ()>>() -> String {
    format!("{}/{}", K::api_version(&()), K::kind(&()))
}

/// What one reconcile of `owner` (in namespace `ns`) applied, by kind.
pub struct Owned<'a, O> {
    client: kube::Client,
    ownership: Ownership,
    owner: &'a O,
    ns: String,
    wanted: BTreeMap<String, BTreeSet<String>>,
}

impl<'a, O> Owned<'a, O>
where
    O: Resource<DynamicType = ()>,
{
    pub fn new(client: &kube::Client, ownership: Ownership, owner: &'a O, ns: &str) -> Self {
        Owned {
            client: client.clone(),
            ownership,
            owner,
            ns: ns.to_owned(),
            wanted: BTreeMap::new(),
        }
    }

    /// The object that owns them.
    pub fn owner(&self) -> &'a O {
        self.owner
    }

    /// The namespace the owned objects live in.
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// The metadata of the owned object `name`: namespace, owner and generation labels, controller
    /// ownerReference.
    pub fn meta(&self, name: &str) -> ObjectMeta {
        meta(self.ownership, self.owner, &self.ns, name)
    }

    /// Lays [`Owned::meta`] over `obj`'s metadata: its namespace, the owner's labels over its own, the
    /// ownerReference. For an object written otherwise than by [`Owned::apply`] (a Job, created once).
    pub fn adopt<K: Resource<DynamicType = ()>>(&self, obj: &mut K) {
        let ours = self.meta(&obj.name_any());
        let meta = obj.meta_mut();
        meta.namespace = ours.namespace;
        meta.labels
            .get_or_insert_with(Default::default)
            .extend(ours.labels.unwrap_or_default());
        meta.owner_references = ours.owner_references;
    }

    /// Marks the object `name` of kind `K` as wanted without applying it (one created or replaced otherwise,
    /// under a precondition).
    pub fn keep<K: Resource<DynamicType = ()>>(&mut self, name: &str) {
        self.wanted
            .entry(kind::<K>())
            .or_default()
            .insert(name.to_owned());
    }

    /// Applies `obj` server-side (forcing conflicts: the agent owns these fields), with [`Owned::meta`]'s labels
    /// laid over its own and its ownerReference, and marks it wanted. Returns the object as the apiserver has
    /// it now, status included.
    pub async fn apply<K>(&mut self, mut obj: K) -> Result<K, Error>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + Serialize
            + DeserializeOwned
            + Debug,
    {
        let name = obj.name_any();
        self.adopt(&mut obj);
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.ns);
        let applied = api
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&obj),
            )
            .await?;
        self.keep::<K>(&name);
        Ok(applied)
    }

    /// Deletes every object of kind `K` labelled as the owner's that this reconcile did not apply or keep.
    /// Returns how many went.
    pub async fn prune<K>(&self) -> Result<usize, Error>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.ns);
        let none = BTreeSet::new();
        let wanted = self.wanted.get(&kind::<K>()).unwrap_or(&none);
        let selector = format!("{}={}", self.ownership.owner_label, self.owner.name_any());
        let mut pruned = 0;
        for obj in api
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
        {
            let name = obj.name_any();
            if !wanted.contains(&name) {
                delete_ignoring_missing(&api, &name).await?;
                pruned += 1;
            }
        }
        Ok(pruned)
    }
}

/// [`Owned::meta`] without a tracker.
pub fn meta<O: Resource<DynamicType = ()>>(
    ownership: Ownership,
    owner: &O,
    ns: &str,
    name: &str,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(ns.to_owned()),
        labels: Some(
            [
                (ownership.owner_label.to_owned(), owner.name_any()),
                (
                    ownership.generation_label.to_owned(),
                    owner.meta().generation.unwrap_or(0).to_string(),
                ),
            ]
            .into(),
        ),
        owner_references: Some(vec![owner
            .controller_owner_ref(&())
            .expect("a stored object has a uid")]),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    const OWNERSHIP: Ownership = Ownership {
        owner_label: "example.org/owner",
        generation_label: "example.org/generation",
    };

    fn owner() -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("edge".into()),
                namespace: Some("site".into()),
                uid: Some("u1".into()),
                generation: Some(4),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn owned_metadata_names_the_owner_its_generation_under_the_reconcilers_keys_and_a_controller_reference(
    ) {
        let m = meta(OWNERSHIP, &owner(), "site", "edge-lb");
        assert_eq!(
            m.labels.unwrap(),
            BTreeMap::from([
                ("example.org/owner".to_owned(), "edge".to_owned()),
                ("example.org/generation".to_owned(), "4".to_owned()),
            ])
        );
        let r = &m.owner_references.unwrap()[0];
        assert_eq!(
            (
                r.kind.as_str(),
                r.name.as_str(),
                r.uid.as_str(),
                r.controller
            ),
            ("ConfigMap", "edge", "u1", Some(true))
        );
        assert_eq!(
            (m.name.as_deref(), m.namespace.as_deref()),
            (Some("edge-lb"), Some("site"))
        );
    }

    /// One reconcile applies `a` and keeps `b`: pruning deletes only `c`, of the three the owner has. A tracker
    /// that applied nothing (a finalizer's cleanup) deletes them all.
    #[tokio::test]
    async fn prune_deletes_the_owners_objects_this_reconcile_did_not_want() {
        use crate::controllers::common::testing::{mock_client, serve, Step};
        use axum::http::Method;
        use serde_json::json;
        let cm = |name: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": name, "namespace": "site"}})
        };
        let list = json!({"apiVersion": "v1", "kind": "List", "metadata": {},
                          "items": [cm("a"), cm("b"), cm("c")]});
        let deleted = json!({"kind": "Status", "apiVersion": "v1", "status": "Success"});
        let step = |method, path, body: &serde_json::Value| Step {
            method,
            path,
            status: 200,
            body: body.clone(),
        };
        let (client, handle) = mock_client();
        let scenario = tokio::spawn(serve(
            handle,
            vec![
                step(
                    Method::PATCH,
                    "/api/v1/namespaces/site/configmaps/a",
                    &cm("a"),
                ),
                step(Method::GET, "/api/v1/namespaces/site/configmaps", &list),
                step(
                    Method::DELETE,
                    "/api/v1/namespaces/site/configmaps/c",
                    &deleted,
                ),
                step(Method::GET, "/api/v1/namespaces/site/configmaps", &list),
                step(
                    Method::DELETE,
                    "/api/v1/namespaces/site/configmaps/a",
                    &deleted,
                ),
                step(
                    Method::DELETE,
                    "/api/v1/namespaces/site/configmaps/b",
                    &deleted,
                ),
                step(
                    Method::DELETE,
                    "/api/v1/namespaces/site/configmaps/c",
                    &deleted,
                ),
            ],
        ));
        let owner = owner();
        let mut owned = Owned::new(&client, OWNERSHIP, &owner, "site");
        let a = ConfigMap {
            metadata: ObjectMeta {
                name: Some("a".into()),
                labels: Some([("app".to_owned(), "x".to_owned())].into()),
                ..ObjectMeta::default()
            },
            data: Some([("k".to_owned(), "v".to_owned())].into()),
            ..ConfigMap::default()
        };
        owned.apply(a).await.unwrap();
        owned.keep::<ConfigMap>("b");
        assert_eq!(owned.prune::<ConfigMap>().await.unwrap(), 1);
        let cleanup = Owned::new(&client, OWNERSHIP, &owner, "site");
        assert_eq!(cleanup.prune::<ConfigMap>().await.unwrap(), 3);
        let bodies = scenario.await.unwrap();
        // The apply sent the object's own labels and fields with the owner's laid over them.
        assert_eq!(
            bodies[0]["metadata"]["labels"],
            json!({"app": "x", "example.org/owner": "edge", "example.org/generation": "4"})
        );
        assert_eq!(bodies[0]["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(bodies[0]["data"], json!({"k": "v"}));
        assert_eq!(
            (bodies[0]["kind"].as_str(), bodies[0]["apiVersion"].as_str()),
            (Some("ConfigMap"), Some("v1"))
        );
    }

    #[test]
    fn kinds_are_filed_by_group_version_and_kind() {
        assert_eq!(kind::<ConfigMap>(), "v1/ConfigMap");
        assert_eq!(
            kind::<k8s_openapi::api::apps::v1::Deployment>(),
            "apps/v1/Deployment"
        );
    }
}
