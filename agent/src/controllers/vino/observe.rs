//! What a ViNO reconcile reads before it plans: the BMC credentials, the selected Nodes, the flavors, the
//! Vino's address pools, the networkData templates, the VNC passwords already given out and which of its
//! BareMetalHosts run a node of a Provisioning's cluster that must be drained before they go. Reading is all
//! here, so [`super::render`] is pure. Reading stops at the first thing that makes the spec unrealisable
//! (`Ok(Err(why))`): nothing after it would be used.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kube::api::{Api, ListParams, ResourceExt};

use super::plan::{AIRSHIP_FLAVORS, OWNERSHIP};
use crate::controllers::bpa::hold;
use crate::controllers::common::{child_name, secrets, Error};
use crate::crd::metal3::BareMetalHost;
use crate::crd::vino::{IPPool, Vino};

/// Where the BMC credentials come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// The Secret the BareMetalHosts' credentials are copied from and the DaemonSet's sushy-tools reads.
    pub secret: String,
    /// Made by the reconciler from the spec's inline `bmcCredentials` (which it then warns about).
    pub inline: bool,
    /// `(username, password)`.
    pub value: (String, String),
}

pub struct Observed {
    pub credentials: Credentials,
    /// The selected nodes, by name.
    pub nodes: Vec<Node>,
    /// The flavors ConfigMap's data (none named: empty).
    pub flavors: BTreeMap<String, String>,
    /// Airship's `vino-flavors` ConfigMap's data, when no `flavorsConfigMap` is named and it exists.
    pub airship_flavors: Option<BTreeMap<String, String>>,
    /// The Vino's IPPools, by name.
    pub pools: BTreeMap<String, IPPool>,
    /// Per node set with a networkData template: the template.
    pub templates: BTreeMap<String, String>,
    /// The VNC passwords given out already, by VM name.
    pub vnc_passwords: BTreeMap<String, String>,
    /// The Vino's BareMetalHosts that may not go before their node is drained (`hold::admit` refuses their
    /// deletion), by name.
    pub held: BTreeSet<String>,
    /// Of those, the ones whose drain was asked (`bpa.akraino.org/drain`).
    pub drain_asked: BTreeSet<String>,
}

/// Vino `name`'s BareMetalHosts that may not go before their node is drained (`hold::admit` refuses their
/// deletion), by name, and of those the ones whose drain was asked.
pub async fn held(
    client: &kube::Client,
    name: &str,
    ns: &str,
) -> Result<(BTreeSet<String>, BTreeSet<String>), Error> {
    let owner = ListParams::default().labels(&format!("{}={name}", OWNERSHIP.owner_label));
    let hosts = Api::<BareMetalHost>::namespaced(client.clone(), ns)
        .list(&owner)
        .await?
        .items;
    let held: Vec<&BareMetalHost> = hosts
        .iter()
        .filter(|h| hold::admit(h, None).is_err())
        .collect();
    let asked = held
        .iter()
        .filter(|h| hold::annotation(h, hold::DRAIN_ANNOTATION).is_some())
        .map(|h| h.name_any())
        .collect();
    Ok((held.iter().map(|h| h.name_any()).collect(), asked))
}

/// Reads everything `vino`'s reconcile needs from namespace `ns` (and the cluster's Nodes).
pub async fn observe(
    client: &kube::Client,
    vino: &Vino,
    ns: &str,
) -> Result<Result<Observed, String>, Error> {
    let name = vino.name_any();
    let spec = &vino.spec;
    let credentials = match (&spec.bmc_credentials_secret, &spec.bmc_credentials) {
        (Some(s), _) => match (
            secrets::read(client, ns, s, "username").await?,
            secrets::read(client, ns, s, "password").await?,
        ) {
            (Ok(u), Ok(p)) => Credentials {
                secret: s.clone(),
                inline: false,
                value: (u, p),
            },
            (Err(why), _) | (_, Err(why)) => return Ok(Err(why)),
        },
        (None, Some(c)) => Credentials {
            secret: child_name(&name, "bmc-credentials"),
            inline: true,
            value: (c.username.clone(), c.password.clone()),
        },
        (None, None) => {
            return Ok(Err(
                "bmcCredentialsSecret (or the inline bmcCredentials) is required".into(),
            ))
        }
    };

    let selector: Vec<String> = spec
        .node_selector
        .as_ref()
        .map(|s| {
            s.match_labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect()
        })
        .unwrap_or_default();
    let mut nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&selector.join(",")))
        .await?
        .items;
    nodes.sort_by_key(|n| n.name_any());

    // Read only when a node set has no flavor of its own to take.
    let flavorless = spec.nodes.iter().any(|n| n.flavor.is_none());
    let airship_flavors = match &spec.flavors_config_map {
        Some(_) => None,
        None if !flavorless => None,
        None => Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_opt(AIRSHIP_FLAVORS)
            .await?
            .map(|c| c.data.unwrap_or_default()),
    };
    let flavors = match &spec.flavors_config_map {
        None => BTreeMap::new(),
        Some(cm) => match Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_opt(cm)
            .await?
        {
            Some(c) => c.data.unwrap_or_default(),
            None => return Ok(Err(format!("flavorsConfigMap {cm} not found"))),
        },
    };

    let owner = ListParams::default().labels(&format!("{}={name}", OWNERSHIP.owner_label));
    let pools = Api::<IPPool>::namespaced(client.clone(), ns)
        .list(&owner)
        .await?
        .items
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect();

    let mut templates = BTreeMap::new();
    for set in &spec.nodes {
        if let Some(r) = &set.network_data_template {
            let sns = r.namespace.clone().unwrap_or_else(|| ns.to_owned());
            match secrets::read(client, &sns, &r.name, "template").await? {
                Ok(t) => templates.insert(set.name.clone(), t),
                Err(why) => return Ok(Err(format!("node set {}: {why}", set.name))),
            };
        }
    }

    // Read only when some VM has VNC: otherwise there is nothing to keep.
    let vnc = match spec.nodes.iter().any(|s| s.enable_vnc) {
        true => {
            Api::<Secret>::namespaced(client.clone(), ns)
                .get_opt(&child_name(&name, "vnc"))
                .await?
        }
        false => None,
    };
    let vnc_passwords = vnc
        .and_then(|s| s.data)
        .unwrap_or_default()
        .into_iter()
        .map(|(vm, v)| (vm, String::from_utf8_lossy(&v.0).into_owned()))
        .filter(|(_, p)| !p.is_empty())
        .collect();

    let (held, drain_asked) = held(client, &name, ns).await?;

    Ok(Ok(Observed {
        credentials,
        nodes,
        flavors,
        airship_flavors,
        pools,
        templates,
        vnc_passwords,
        held,
        drain_asked,
    }))
}
