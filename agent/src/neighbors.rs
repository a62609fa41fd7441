//! The services the appliance runs beside the agent (Ironic, baremetal-operator), probed when `/readyz` is
//! asked, so "is my site up" is one request: `--ready-check ironic=http://127.0.0.1:6385/` makes `/readyz`
//! carry `"services": {"ironic": {"state": "ok", "status": 200}}`, or `{"state": "down", "error": …}` with the
//! reason. Each probe is bounded by [`TIMEOUT`]. A service on HTTPS (Ironic on the provisioning network) is
//! verified against the CA certificates of `--ready-check-ca` and no others: the appliance's services have
//! certificates of its own making.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// How long one probe may take.
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// A service to probe: its name in `/readyz` and the URL that answers 2xx when it is ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub url: hyper::Uri,
}

/// Parses `name=http://host:port/path` (or `https://`); the error says what is wrong.
pub fn parse(s: &str) -> Result<Check, String> {
    let (name, url) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: give name=url, e.g. ironic=http://127.0.0.1:6385/"))?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(format!(
            "{name:?}: a check's name is letters, digits and '-'"
        ));
    }
    let url: hyper::Uri = url.parse().map_err(|e| format!("{url:?}: {e}"))?;
    if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
        return Err(format!(
            "{url}: a check is an http:// or https:// URL with a host (the services beside the agent)"
        ));
    }
    Ok(Check {
        name: name.to_owned(),
        url,
    })
}

/// The checks and the client that probes them.
#[derive(Clone)]
pub struct Neighbors {
    checks: Vec<Check>,
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

impl Neighbors {
    /// `checks`, those on HTTPS verified against the PEM certificates in `ca`: an HTTPS check without `ca`,
    /// or a `ca` that holds no certificate, is an error naming the flag.
    pub fn new(checks: Vec<Check>, ca: Option<&Path>) -> anyhow::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        if let Some(ca) = ca {
            let certs = CertificateDer::pem_file_iter(ca)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| anyhow::anyhow!("--ready-check-ca {}: {e}", ca.display()))?;
            if certs.is_empty() {
                anyhow::bail!(
                    "--ready-check-ca {}: no PEM certificate in it",
                    ca.display()
                );
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| anyhow::anyhow!("--ready-check-ca {}: {e}", ca.display()))?;
            }
        } else if let Some(c) = checks.iter().find(|c| c.url.scheme_str() == Some("https")) {
            anyhow::bail!(
                "--ready-check {}={}: an https:// check needs --ready-check-ca (the PEM certificate its \
                 service's is verified against)",
                c.name,
                c.url
            );
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Self {
            checks,
            client: Client::builder(TokioExecutor::new()).build(connector),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// Every check's state, by name, probed concurrently.
    pub async fn probe_all(&self) -> BTreeMap<String, serde_json::Value> {
        probe_all(&self.client, &self.checks).await
    }
}

impl Default for Neighbors {
    fn default() -> Self {
        Self::new(Vec::new(), None).expect("no checks, no CA")
    }
}

async fn probe_all(
    client: &Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    checks: &[Check],
) -> BTreeMap<String, serde_json::Value> {
    let probes = checks.iter().map(|c| {
        let client = client.clone();
        async move {
            let state = match tokio::time::timeout(TIMEOUT, client.get(c.url.clone())).await {
                Err(_) => serde_json::json!({"state": "down", "error": format!("no answer within {TIMEOUT:?}")}),
                Ok(Err(e)) => serde_json::json!({"state": "down", "error": error_chain(&e)}),
                Ok(Ok(r)) if r.status().is_success() => {
                    serde_json::json!({"state": "ok", "status": r.status().as_u16()})
                }
                Ok(Ok(r)) => serde_json::json!({"state": "down", "status": r.status().as_u16()}),
            };
            (c.name.clone(), state)
        }
    });
    futures_util::future::join_all(probes)
        .await
        .into_iter()
        .collect()
}

/// An error and its causes, on one line (hyper's own says only "client error (Connect)").
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(&format!(": {c}"));
        cause = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_is_a_name_and_an_http_url() {
        let c = parse("baremetal-operator=http://127.0.0.1:9440/readyz").unwrap();
        assert_eq!(c.name, "baremetal-operator");
        assert_eq!(c.url.path(), "/readyz");
        for (bad, why) in [
            ("ironic", "give name=url"),
            ("=http://127.0.0.1:1/", "a check's name"),
            ("a b=http://127.0.0.1:1/", "a check's name"),
            ("ironic=ftp://127.0.0.1:6385/", "http:// or https://"),
            ("ironic=/v1", "http:// or https://"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[tokio::test]
    async fn a_service_that_answers_is_ok_and_one_that_does_not_is_down_with_the_reason() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route("/", axum::routing::get(|| async { "ok" }))
            .route(
                "/readyz",
                axum::routing::get(|| async { axum::http::StatusCode::SERVICE_UNAVAILABLE }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        // A port nothing listens on: bound, then closed.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let checks = [
            parse(&format!("ironic=http://{up}/")).unwrap(),
            parse(&format!("bmo=http://{up}/readyz")).unwrap(),
            parse(&format!("gone=http://{closed}/")).unwrap(),
        ];
        let got = Neighbors::new(checks.into(), None)
            .unwrap()
            .probe_all()
            .await;
        assert_eq!(
            got["ironic"],
            serde_json::json!({"state": "ok", "status": 200})
        );
        assert_eq!(
            got["bmo"],
            serde_json::json!({"state": "down", "status": 503})
        );
        assert_eq!(got["gone"]["state"], "down");
        let error = got["gone"]["error"].as_str().unwrap();
        assert!(error.contains("onnect"), "{error}");
    }

    #[test]
    fn an_https_check_needs_a_ca_that_holds_a_certificate() {
        let https = vec![parse("ironic=https://127.0.0.1:6385/").unwrap()];
        let e = Neighbors::new(https.clone(), None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("needs --ready-check-ca"), "{e}");
        let tmp = tempfile::tempdir().unwrap();
        let empty = tmp.path().join("ca.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = Neighbors::new(https.clone(), Some(&empty))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("ca.pem: no PEM certificate"), "{e}");
        let e = Neighbors::new(https, Some(&tmp.path().join("missing.pem")))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("missing.pem"), "{e}");
    }
}
