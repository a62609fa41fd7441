//! Writes that are not an owned object's apply ([`super::owned`] has those): the status and a delete that may
//! find nothing.

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Resource;
use serde_json::json;

use super::error::Error;

/// The field manager of every server-side apply by the agent.
pub const MANAGER: &str = "foothold-agent";

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
