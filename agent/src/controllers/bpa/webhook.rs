//! The ValidatingWebhookConfiguration that sends the API server's changes of BPA hosts to the agent
//! (`--admission-url`, see `hold`), written by the leader with a server-side apply. Its match conditions (CEL)
//! pass on only what may take a node away: a claimed host deleted, its image removed or changed, or powered
//! off. So BMO's own writes (finalizers, the reboot annotation it removes) never wait for the agent, and with
//! the agent down only those changes fail (`failurePolicy: Fail`: a host is not let go undrained because the
//! agent was not there to ask).

use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};

use super::hold::{WEBHOOK_NAME, WEBHOOK_PATH};
use crate::controllers::common::MANAGER;
use crate::controllers::settings::Admission;

/// Only what may take a node away reaches the agent (`hold::departure` decides; this is a coarser filter).
const TAKES_A_NODE: &str = "request.operation == 'DELETE' \
    || (has(oldObject.spec.image) && (!has(object.spec.image) || object.spec.image.url != oldObject.spec.image.url)) \
    || (has(oldObject.spec.online) && oldObject.spec.online && !(has(object.spec.online) && object.spec.online))";
/// Only hosts a Provisioning claimed.
const CLAIMED: &str = "has(oldObject.spec.consumerRef) && has(oldObject.spec.consumerRef.kind) \
    && oldObject.spec.consumerRef.kind == 'Provisioning'";

/// The configuration for `a`; `namespace`: the one namespace the agent serves, if it serves one.
pub fn configuration(a: &Admission, namespace: Option<&str>) -> Value {
    let namespaces = match namespace {
        Some(ns) => json!({"matchLabels": {"kubernetes.io/metadata.name": ns}}),
        None => json!({}),
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_NAME},
        "webhooks": [{
            "name": "drain.bpa.akraino.org",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "clientConfig": {
                "url": format!("{}{WEBHOOK_PATH}", a.url),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(&a.ca_pem),
            },
            "rules": [{
                "apiGroups": ["metal3.io"],
                "apiVersions": ["v1alpha1"],
                "operations": ["UPDATE", "DELETE"],
                "resources": ["baremetalhosts"],
                "scope": "Namespaced",
            }],
            "namespaceSelector": namespaces,
            "matchConditions": [
                {"name": "claimed-by-a-provisioning", "expression": CLAIMED},
                {"name": "takes-a-node-away", "expression": TAKES_A_NODE},
            ],
        }],
    })
}

/// Writes the configuration, trying again every 30 s until it is written (the API server may not answer yet,
/// or refuse the agent's account: both are logged).
pub async fn register(client: &kube::Client, a: &Admission, namespace: Option<&str>) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let config = configuration(a, namespace);
    loop {
        match api
            .patch(
                WEBHOOK_NAME,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&config),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(url = %a.url, "BareMetalHosts of BPA clusters wait for their drain here");
                return;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot write the drain hold's admission webhook; trying again");
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_sends_only_claimed_hosts_departures_to_the_agent_s_path() {
        let a = Admission {
            url: "https://127.0.0.1:5000".into(),
            ca_pem: "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n".into(),
        };
        let c = configuration(&a, Some("site"));
        let w = &c["webhooks"][0];
        assert_eq!(
            w["clientConfig"]["url"],
            "https://127.0.0.1:5000/admission/baremetalhosts"
        );
        let bundle = base64::engine::general_purpose::STANDARD
            .decode(w["clientConfig"]["caBundle"].as_str().unwrap())
            .unwrap();
        assert_eq!(bundle, a.ca_pem.as_bytes());
        assert_eq!(w["rules"][0]["operations"], json!(["UPDATE", "DELETE"]));
        assert_eq!(w["failurePolicy"], "Fail");
        assert_eq!(w["sideEffects"], "None");
        assert_eq!(
            w["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "site"
        );
        assert_eq!(
            configuration(&a, None)["webhooks"][0]["namespaceSelector"],
            json!({})
        );
    }
}
