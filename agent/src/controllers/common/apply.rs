//! The objects a reconciler owns: labelled with their owner and its generation, owned by it (a controller
//! ownerReference), applied server-side by one field manager, and deleted without relying on a garbage
//! collector.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::error::Error;

/// The field manager of every server-side apply by the agent.
pub const MANAGER: &str = "foothold-agent";
/// On every object a reconciler creates: the generation of the owner it was made for.
pub const GENERATION_LABEL: &str = "bpa.akraino.org/generation";

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
