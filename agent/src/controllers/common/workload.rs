//! A client of a workload cluster's API, from its kubeconfig's text: what the BPA's healing and the installer
//! both talk to.

use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// A client of the cluster `kubeconfig` (YAML) names, each request bounded by `timeout` (connect and read).
/// kube's own retries of 429, 503 and 504 are off: both callers try again by themselves, and kube's would hold
/// a refused eviction or a busy API for minutes (up to 15 tries, backing off to 1,000 s).
pub async fn client(kubeconfig: &str, timeout: Duration) -> Result<kube::Client, String> {
    let kubeconfig = Kubeconfig::from_yaml(kubeconfig).map_err(|e| e.to_string())?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| e.to_string())?;
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    config.default_retry = false;
    kube::Client::try_from(config).map_err(|e| e.to_string())
}

/// The client of the cluster whose kubeconfig is in Secret `secret` of `ns` (key `kubeconfig`), requests bounded
/// by `timeout`; why not, if the Secret cannot be read or its kubeconfig used (an error of the appliance's own
/// API is returned as such).
pub async fn from_secret(
    client: &kube::Client,
    ns: &str,
    secret: &str,
    timeout: Duration,
) -> Result<Result<kube::Client, String>, super::Error> {
    Ok(
        match super::secrets::read(client, ns, secret, "kubeconfig").await? {
            Ok(text) => self::client(&text, timeout).await,
            Err(why) => Err(why),
        },
    )
}
