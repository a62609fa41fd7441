//! The certificates the agent serves and reports. Every few seconds it looks at their files: when the served
//! certificate or its key changed (`foothold-agent pki` renewed them), the pair is loaded again and new
//! connections get it, without a restart; a pair that does not load (the key written, the certificate not yet)
//! keeps the one served until the files change again. `/metrics` shows each certificate's end of validity as
//! `foothold_certificate_expiry_seconds{name}` (Unix time): the served one as `agent`, the others by the name
//! `--certificate` gives them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum_server::tls_rustls::RustlsConfig;

use crate::metrics::Metrics;
use crate::watched::{stamp, Stamp, CHECK};

/// The name of the served certificate in `/metrics`.
pub const SERVED: &str = "agent";

/// A certificate `/metrics` reports: `name=path`, the name in lower-case letters, digits, `-` and `_`.
pub fn parse_watched(arg: &str) -> Result<(String, PathBuf), String> {
    let (name, path) = arg
        .split_once('=')
        .ok_or_else(|| format!("{arg:?}: expected NAME=FILE"))?;
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "{arg:?}: the name must be lower-case letters, digits, - or _"
        ));
    }
    if name == SERVED {
        return Err(format!(
            "{arg:?}: {SERVED} is the served certificate's name"
        ));
    }
    if path.is_empty() {
        return Err(format!("{arg:?}: no file"));
    }
    Ok((name.to_string(), PathBuf::from(path)))
}

/// The served pair: the rustls configuration connections are accepted with, and its files.
pub struct Served {
    pub config: RustlsConfig,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Reports every certificate's expiry now, then follows their files until the process ends.
pub async fn watch(served: Option<Served>, others: Vec<(String, PathBuf)>, metrics: Arc<Metrics>) {
    let mut pair_seen = served.as_ref().map(|s| (stamp(&s.cert), stamp(&s.key)));
    if let Some(s) = &served {
        report(&metrics, SERVED, &s.cert);
    }
    let mut seen: Vec<Stamp> = others.iter().map(|(_, p)| stamp(p)).collect();
    for (name, path) in &others {
        report(&metrics, name, path);
    }
    let mut tick = tokio::time::interval(CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Some(s) = &served {
            let now = (stamp(&s.cert), stamp(&s.key));
            if Some(now) != pair_seen {
                // Tried once per change of either file: a pair that does not load stays as it was.
                pair_seen = Some(now);
                match s.config.reload_from_pem_file(&s.cert, &s.key).await {
                    Ok(()) => {
                        tracing::info!(cert = %s.cert.display(), "serving the certificate its files now hold");
                        report(&metrics, SERVED, &s.cert);
                    }
                    Err(e) => tracing::warn!(
                        cert = %s.cert.display(),
                        key = %s.key.display(),
                        error = %e,
                        "the certificate's files changed but do not load; still serving the one before"
                    ),
                }
            }
        }
        for ((name, path), seen) in others.iter().zip(seen.iter_mut()) {
            let now = stamp(path);
            if now != *seen {
                *seen = now;
                report(&metrics, name, path);
            }
        }
    }
}

fn report(metrics: &Metrics, name: &str, path: &Path) {
    match crate::pki::read_cert(path) {
        Ok(info) => metrics.set_certificate_expiry(name, Some(info.not_after)),
        // One not made yet (the kubelet's, until it is given one) is not an error; one that does not read is.
        Err(e) if not_there(&e) => {
            tracing::info!(certificate = name, path = %path.display(), "a certificate /metrics reports is not there yet");
            metrics.set_certificate_expiry(name, None);
        }
        Err(e) => {
            tracing::warn!(certificate = name, error = %format!("{e:#}"), "cannot read a certificate /metrics reports");
            metrics.set_certificate_expiry(name, None);
        }
    }
}

fn not_there(e: &anyhow::Error) -> bool {
    e.root_cause()
        .downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watched_certificates_are_named_safely() {
        assert_eq!(
            parse_watched("ironic=/etc/ironic/tls/cert.pem").unwrap(),
            (
                "ironic".to_string(),
                PathBuf::from("/etc/ironic/tls/cert.pem")
            )
        );
        assert_eq!(
            parse_watched("site-ca_2=x").unwrap().0,
            "site-ca_2".to_string()
        );
        for bad in ["ironic", "=x", "Ironic=x", "a\"b=x", "a=", "agent=x"] {
            assert!(parse_watched(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_certificate_not_made_yet_is_told_from_one_that_does_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let missing = crate::pki::read_cert(&dir.path().join("client.pem")).unwrap_err();
        assert!(not_there(&missing), "{missing:#}");
        std::fs::write(dir.path().join("bad.pem"), "not a certificate").unwrap();
        let bad = crate::pki::read_cert(&dir.path().join("bad.pem")).unwrap_err();
        assert!(!not_there(&bad), "{bad:#}");
    }
}
