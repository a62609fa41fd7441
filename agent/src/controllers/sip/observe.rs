//! What a SIP reconcile reads before it plans: every BareMetalHost it may schedule with what its Secrets say
//! (networkData, BMC credentials), and the Secrets the auth services' configuration names (Dex's static users,
//! the LDAP bind password). Reading is all here, so planning and rendering are pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, ResourceExt};

use super::configs;
use super::plan::Host;
use crate::controllers::common::{secrets, Error};
use crate::controllers::settings::Settings;
use crate::crd::metal3::BareMetalHost;
use crate::crd::sip::SIPCluster;

/// A BareMetalHost with what its Secrets say.
pub struct Observed {
    pub bmh: BareMetalHost,
    pub network_data: Result<String, String>,
    pub bmc: Result<Bmc, String>,
}

#[derive(Clone)]
pub struct Bmc {
    pub ip: String,
    pub username: String,
    pub password: String,
}

/// `<namespace>/<name>`: how the plan and the status name a host.
pub fn qualified(bmh: &BareMetalHost) -> String {
    format!("{}/{}", bmh.namespace().unwrap_or_default(), bmh.name_any())
}

/// Every BareMetalHost the agent serves (its namespace, or all), with its Secrets read.
pub async fn hosts(client: &kube::Client, settings: &Settings) -> Result<Vec<Observed>, Error> {
    let (hosts, secrets): (Api<BareMetalHost>, Api<Secret>) = match &settings.namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let hosts = hosts.list(&ListParams::default()).await?.items;
    let namespaces: BTreeSet<String> = hosts.iter().filter_map(|h| h.namespace()).collect();
    let mut by_name: BTreeMap<(String, String), Secret> = BTreeMap::new();
    if !hosts.is_empty() {
        let listed = if namespaces.len() == 1 {
            let only = namespaces.iter().next().expect("one");
            Api::<Secret>::namespaced(client.clone(), only)
                .list(&ListParams::default())
                .await?
                .items
        } else {
            secrets.list(&ListParams::default()).await?.items
        };
        for s in listed {
            by_name.insert((s.namespace().unwrap_or_default(), s.name_any()), s);
        }
    }
    let secret_value = |ns: &str, name: &str, key: &str| {
        secrets::value(
            by_name.get(&(ns.to_owned(), name.to_owned())),
            ns,
            name,
            key,
        )
    };
    Ok(hosts
        .into_iter()
        .map(|bmh| {
            let ns = bmh.namespace().unwrap_or_default();
            let network_data = match bmh.spec.network_data.as_ref().and_then(|r| r.name.clone()) {
                None => Err("no spec.networkData".to_owned()),
                Some(name) => {
                    let sns = bmh
                        .spec
                        .network_data
                        .as_ref()
                        .and_then(|r| r.namespace.clone())
                        .unwrap_or_else(|| ns.clone());
                    secret_value(&sns, &name, "networkData").and_then(|text| {
                        configs::parse_network_data(&text)
                            .map(|_| text)
                            .map_err(|e| format!("Secret {sns}/{name}: {e}"))
                    })
                }
            };
            let bmc = match &bmh.spec.bmc {
                None => Err("no spec.bmc".to_owned()),
                Some(b) => configs::bmc_host(&b.address).and_then(|ip| {
                    Ok(Bmc {
                        ip,
                        username: secret_value(&ns, &b.credentials_name, "username")?,
                        password: secret_value(&ns, &b.credentials_name, "password")?,
                    })
                }),
            };
            Observed {
                bmh,
                network_data,
                bmc,
            }
        })
        .collect())
}

/// The host as the planner sees it.
pub fn planner_host(o: &Observed) -> Host {
    let status = o.bmh.status.clone().unwrap_or_default();
    let state = status.provisioning.map(|p| p.state).unwrap_or_default();
    let failed = status.operational_status.as_deref() == Some("error")
        || state == "deleting"
        || o.bmh.metadata.deletion_timestamp.is_some();
    let has_network_data = o
        .bmh
        .spec
        .network_data
        .as_ref()
        .is_some_and(|r| r.name.is_some());
    let unreadable = match (&o.network_data, &o.bmc) {
        (Err(e), _) if has_network_data => Some(e.clone()),
        (_, Err(e)) => Some(e.clone()),
        _ => None,
    };
    Host {
        name: qualified(&o.bmh),
        labels: o.bmh.labels().clone(),
        has_network_data,
        state,
        failed,
        unreadable,
    }
}

/// What the `auth[i]` service's configuration reads from Secrets: the static connector's users (key `users`)
/// and the LDAP bind password (key `password`), each `Err` naming what is missing.
#[derive(Clone, Debug, Default)]
pub struct AuthSecrets {
    pub users: Option<Result<String, String>>,
    pub bind_password: Option<Result<String, String>>,
}

/// The Secrets of every `auth[i]` service of `sip`, in its namespace.
pub async fn auth_secrets(
    client: &kube::Client,
    sip: &SIPCluster,
    ns: &str,
) -> Result<Vec<AuthSecrets>, Error> {
    let mut out = Vec::new();
    for auth in &sip.spec.services.auth {
        let mut read = AuthSecrets::default();
        if let Some(st) = &auth.static_connector {
            read.users = Some(secrets::read(client, ns, &st.users_secret, "users").await?);
        }
        if let Some(s) = auth
            .ldap
            .as_ref()
            .and_then(|l| l.bind_password_secret.as_ref())
        {
            read.bind_password = Some(secrets::read(client, ns, s, "password").await?);
        }
        out.push(read);
    }
    Ok(out)
}
