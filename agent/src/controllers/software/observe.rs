//! What a Software reconcile reads before it plans: the Provisionings of its namespace (one of them is its
//! cluster), and the binary images uploaded for that cluster in the agent's own store.

use std::sync::Arc;

use kube::api::{Api, ListParams};

use super::plan::Uploaded;
use crate::controllers::common::Error;
use crate::crd::bpa::Provisioning;
use crate::images::{Images, Kind};
use crate::store::Store;

/// Every Provisioning of `ns`.
pub async fn provisionings(client: &kube::Client, ns: &str) -> Result<Vec<Provisioning>, Error> {
    Ok(Api::<Provisioning>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items)
}

/// The `binary_images` records of `owner`'s `cluster`: the packages' candidates.
pub async fn uploaded(
    store: &Arc<Store>,
    owner: &str,
    cluster: &str,
) -> Result<Vec<Uploaded>, Error> {
    Ok(Images::new(store, u64::MAX)
        .list(owner, cluster, Some(Kind::Binary))
        .await
        .map_err(|e| Error::Store(e.to_string()))?
        .into_iter()
        .map(|r| Uploaded {
            name: r.image_name,
            complete: r.upload_complete,
            sha256: r.sha256.filter(|_| r.upload_complete),
        })
        .collect())
}
