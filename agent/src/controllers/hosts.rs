//! The BareMetalHosts the leading agent sees, counted by provisioning state and error type for `/metrics`
//! (`foothold_baremetalhosts`): what an operator's alert on a host in error reads. Runs beside the BPA and SIP
//! controllers, which read the same hosts.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::StreamExt as _;
use kube::runtime::{reflector, watcher, WatchStreamExt as _};
use kube::Api;

use crate::controllers::common::base::scoped_api;
use crate::controllers::settings::Settings;
use crate::crd::metal3::BareMetalHost;
use crate::metrics::Metrics;

/// Keeps the counts current until it is dropped (when the agent stops leading, which clears them).
pub async fn run(client: kube::Client, settings: Arc<Settings>, metrics: Arc<Metrics>) {
    let api: Api<BareMetalHost> = scoped_api(&client, &settings.namespace);
    let (reader, writer) = reflector::store();
    let events = reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            // The store is whole again after a relist only at its end: counting earlier would drop the hosts
            // not yet listed.
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Ok(_) => metrics.set_hosts(count(reader.state().iter().map(|h| h.as_ref()))),
            Err(e) => tracing::warn!(error = %e, "watching BareMetalHosts for /metrics"),
        }
    }
}

/// Hosts by (provisioning state, error type); a host with no status yet counts under the empty state, one
/// without an error under the empty error type.
pub fn count<'a>(
    hosts: impl Iterator<Item = &'a BareMetalHost>,
) -> BTreeMap<(String, String), u64> {
    let mut counts = BTreeMap::new();
    for h in hosts {
        let status = h.status.as_ref();
        let state = status
            .and_then(|s| s.provisioning.as_ref())
            .map(|p| p.state.clone())
            .unwrap_or_default();
        let error = status
            .and_then(|s| s.error_type.clone())
            .unwrap_or_default();
        *counts.entry((state, error)).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(status: serde_json::Value) -> BareMetalHost {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": "h", "namespace": "site"},
            "spec": {},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn hosts_are_counted_by_state_and_error_type() {
        let hosts = [
            host(serde_json::json!({"provisioning": {"state": "available"}})),
            host(serde_json::json!({"provisioning": {"state": "available"}})),
            host(serde_json::json!({"provisioning": {"state": "registering"},
                "errorType": "registration error", "errorMessage": "401"})),
            host(serde_json::json!(null)),
        ];
        let counts = count(hosts.iter());
        let key = |s: &str, e: &str| (s.to_owned(), e.to_owned());
        assert_eq!(
            counts,
            BTreeMap::from([
                (key("", ""), 1),
                (key("available", ""), 2),
                (key("registering", "registration error"), 1),
            ])
        );
    }
}
