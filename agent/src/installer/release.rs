//! What `install-cluster` installs: one Kubernetes release as the appliance serves it (`kubernetes-release.json`,
//! written by `foothold-build` beside the binaries it serves). The node binaries come from the agent's `/files`
//! by URL and sha256; the control plane's images keep their upstream names and are pulled by the hosts'
//! containerd through the agent's mirror.
//!
//! ```json
//! {"version": "v1.35.4", "sandboxImage": "registry.k8s.io/pause:3.10.1",
//!  "binaries": [{"name": "kubeadm", "url": "https://172.22.0.1:5000/files/...", "sha256": "…"}, …]}
//! ```

use serde::Deserialize;

use crate::digest::{Algorithm, Digest};

/// The binaries every host needs, by their names in `/usr/local/bin`.
pub const BINARIES: &[&str] = &["kubeadm", "kubelet", "kubectl", "kube-proxy"];

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Release {
    /// `v1.35.4`: kubeadm's `kubernetesVersion`.
    pub version: String,
    /// The pod sandbox containerd starts every pod with (kubeadm's pause image of that release).
    pub sandbox_image: String,
    pub binaries: Vec<Binary>,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Binary {
    pub name: String,
    pub url: String,
    pub sha256: String,
}

/// A URL that may go into a host's shell between single quotes: http(s), no quotes, spaces or shell syntax.
pub fn plain_url(url: &str) -> bool {
    (url.starts_with("https://") || url.starts_with("http://"))
        && url.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b':' | b'/' | b'.' | b'-' | b'_' | b'~' | b'%' | b'+' | b'[' | b']'
                )
        })
}

impl Release {
    /// Parses and checks every value that reaches a host's shell or kubeadm's configuration.
    pub fn parse(text: &str) -> Result<Release, String> {
        let r: Release = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let v = r.version.strip_prefix('v').unwrap_or_default();
        let numeric = v.split('.').count() == 3
            && v.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if !numeric {
            return Err(format!(
                "version {:?}: not a Kubernetes release like v1.35.4",
                r.version
            ));
        }
        let image_ok = |s: &str| {
            s.contains(':')
                && s.bytes().all(|b| {
                    b.is_ascii_alphanumeric()
                        || matches!(b, b'.' | b'/' | b':' | b'-' | b'_' | b'@')
                })
        };
        if !image_ok(&r.sandbox_image) {
            return Err(format!(
                "sandboxImage {:?}: not an image reference with a tag",
                r.sandbox_image
            ));
        }
        for (i, b) in r.binaries.iter().enumerate() {
            if !BINARIES.contains(&b.name.as_str()) {
                return Err(format!(
                    "binaries[{i}]: name {:?} is not one of {}",
                    b.name,
                    BINARIES.join(", ")
                ));
            }
            if Digest::from_parts(Algorithm::Sha256, &b.sha256).is_none() {
                return Err(format!(
                    "binaries[{i}] ({}): sha256 {:?}: not 64 lowercase hex digits",
                    b.name, b.sha256
                ));
            }
            if !plain_url(&b.url) {
                return Err(format!(
                    "binaries[{i}] ({}): url {:?}: not a plain http(s) URL",
                    b.name, b.url
                ));
            }
        }
        for name in BINARIES {
            match r.binaries.iter().filter(|b| b.name == *name).count() {
                1 => {}
                0 => return Err(format!("binaries: {name} is missing")),
                _ => return Err(format!("binaries: {name} is named twice")),
            }
        }
        Ok(r)
    }

    pub fn binary(&self, name: &str) -> &Binary {
        self.binaries
            .iter()
            .find(|b| b.name == name)
            .expect("parse checked every binary is there")
    }
}

/// A release file for tests: v1.35.4, every binary at `<files>/<name>` with sha256 `ab…ab`.
#[cfg(test)]
pub(crate) fn sample(files: &str) -> serde_json::Value {
    let binaries: Vec<_> = BINARIES
        .iter()
        .map(|n| serde_json::json!({"name": n, "url": format!("{files}/{n}"), "sha256": "ab".repeat(32)}))
        .collect();
    serde_json::json!({"version": "v1.35.4", "sandboxImage": "registry.k8s.io/pause:3.10.1", "binaries": binaries})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release() -> serde_json::Value {
        sample("https://172.22.0.1:5000/files/foothold/kubernetes/binary_images")
    }

    #[test]
    fn a_release_reads_and_hostile_values_are_refused() {
        let r = Release::parse(&release().to_string()).unwrap();
        assert_eq!(r.binary("kube-proxy").sha256, "ab".repeat(32));
        for (edit, want) in [
            (
                ("/version", serde_json::json!("1.35")),
                "version \"1.35\": not a Kubernetes release like v1.35.4",
            ),
            (
                ("/sandboxImage", serde_json::json!("pause;reboot")),
                "sandboxImage \"pause;reboot\": not an image reference with a tag",
            ),
            (
                ("/binaries/0/name", serde_json::json!("sh")),
                "binaries[0]: name \"sh\" is not one of kubeadm, kubelet, kubectl, kube-proxy",
            ),
            (
                ("/binaries/1/url", serde_json::json!("https://a/'b")),
                "binaries[1] (kubelet): url \"https://a/'b\": not a plain http(s) URL",
            ),
            (
                ("/binaries/2/sha256", serde_json::json!("00")),
                "binaries[2] (kubectl): sha256 \"00\": not 64 lowercase hex digits",
            ),
            (
                ("/binaries/3/name", serde_json::json!("kubeadm")),
                "binaries: kubeadm is named twice",
            ),
        ] {
            let mut v = release();
            *v.pointer_mut(edit.0).unwrap() = edit.1;
            assert_eq!(Release::parse(&v.to_string()).unwrap_err(), want);
        }
        let mut v = release();
        v["binaries"].as_array_mut().unwrap().pop();
        assert_eq!(
            Release::parse(&v.to_string()).unwrap_err(),
            "binaries: kube-proxy is missing"
        );
    }
}
