//! What `install-cluster` installs: one Kubernetes release as the appliance serves it (`kubernetes-release.json`,
//! written by `foothold-build` beside the binaries it serves). The node binaries come from the agent's `/files`
//! by URL and sha256; the cluster's images keep their upstream names, each pinned to the digest of the image
//! the appliance's build made, and are pulled by the hosts' containerd through the agent's mirror: pushing one
//! of those tags again changes nothing a cluster runs.
//!
//! ```json
//! {"version": "v1.35.4", "sandboxImage": "registry.k8s.io/pause:3.10.1@sha256:…",
//!  "images": {"kube-apiserver": "registry.k8s.io/kube-apiserver:v1.35.4@sha256:…", "kube-controller-manager": …,
//!             "kube-scheduler": …, "etcd": "registry.k8s.io/etcd:3.6.6-0@sha256:…",
//!             "coredns": "registry.k8s.io/coredns/coredns:v1.13.1@sha256:…"},
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
    /// The pod sandbox containerd starts every pod with (kubeadm's pause image of that release), pinned.
    pub sandbox_image: String,
    pub images: Images,
    pub binaries: Vec<Binary>,
}

/// The images kubeadm runs the cluster with, each `<repository>/<name>:<tag>@sha256:<hex>`, the name its key's:
/// the control plane's static pods (kubeadm's patches set their images) and CoreDNS and etcd (kubeadm's
/// `dns` and `etcd.local` image fields).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Images {
    #[serde(rename = "kube-apiserver")]
    pub kube_apiserver: String,
    #[serde(rename = "kube-controller-manager")]
    pub kube_controller_manager: String,
    #[serde(rename = "kube-scheduler")]
    pub kube_scheduler: String,
    pub etcd: String,
    pub coredns: String,
}

impl Images {
    /// Each image by its key (kubeadm's name for the component) and reference.
    pub fn all(&self) -> [(&'static str, &str); 5] {
        [
            ("kube-apiserver", &self.kube_apiserver),
            ("kube-controller-manager", &self.kube_controller_manager),
            ("kube-scheduler", &self.kube_scheduler),
            ("etcd", &self.etcd),
            ("coredns", &self.coredns),
        ]
    }
}

/// `reference` split as kubeadm composes an image, `<repository>/<name>:<tag>`: `(repository, tag)`, the tag
/// keeping the digest (kubeadm v1.35.4 takes `imageTag: "v1.13.1@sha256:…"` and names the image so).
/// `None` unless `reference` is a pinned image named `name` ([`pinned`]).
pub fn kubeadm_parts<'a>(reference: &'a str, name: &str) -> Option<(&'a str, &'a str)> {
    let (repository, tag) = pinned(reference)?;
    let (repository, last) = repository.rsplit_once('/')?;
    (last == name).then_some((repository, tag))
}

/// `(repository, tag@digest)` of an image reference with a tag and a sha256 digest, made only of characters
/// that may go into a host's shell and into YAML unquoted.
fn pinned(reference: &str) -> Option<(&str, &str)> {
    let plain = reference
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'/' | b':' | b'-' | b'_' | b'@'));
    let (named, digest) = reference.split_once('@')?;
    let hex = digest.strip_prefix("sha256:")?;
    let (repository, tag) = named.rsplit_once(':')?;
    let ok = plain
        && Digest::from_parts(Algorithm::Sha256, hex).is_some()
        && !repository.is_empty()
        && !tag.is_empty()
        && !tag.contains('/')
        && repository
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    ok.then(|| (repository, &reference[repository.len() + 1..]))
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
        if pinned(&r.sandbox_image).is_none() {
            return Err(format!(
                "sandboxImage {:?}: not an image reference with a tag and a sha256 digest",
                r.sandbox_image
            ));
        }
        for (name, reference) in r.images.all() {
            if kubeadm_parts(reference, name).is_none() {
                return Err(format!(
                    "images.{name} {reference:?}: not an image named {name} with a tag and a sha256 digest"
                ));
            }
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

/// A release file for tests: v1.35.4, every binary at `<files>/<name>` with sha256 `ab…ab`, the images
/// upstream's names with digests `sha256:cd…cd`.
#[cfg(test)]
pub(crate) fn sample(files: &str) -> serde_json::Value {
    let binaries: Vec<_> = BINARIES
        .iter()
        .map(|n| serde_json::json!({"name": n, "url": format!("{files}/{n}"), "sha256": "ab".repeat(32)}))
        .collect();
    let digest = format!("@sha256:{}", "cd".repeat(32));
    let image = |name: &str| format!("registry.k8s.io/{name}{digest}");
    serde_json::json!({
        "version": "v1.35.4",
        "sandboxImage": image("pause:3.10.1"),
        "images": {
            "kube-apiserver": image("kube-apiserver:v1.35.4"),
            "kube-controller-manager": image("kube-controller-manager:v1.35.4"),
            "kube-scheduler": image("kube-scheduler:v1.35.4"),
            "etcd": image("etcd:3.6.6-0"),
            "coredns": image("coredns/coredns:v1.13.1"),
        },
        "binaries": binaries,
    })
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
                "sandboxImage \"pause;reboot\": not an image reference with a tag and a sha256 digest",
            ),
            (
                // Named by its tag only: pushing the tag again would change what the clusters run.
                ("/sandboxImage", serde_json::json!("registry.k8s.io/pause:3.10.1")),
                "sandboxImage \"registry.k8s.io/pause:3.10.1\": not an image reference with a tag and a \
                 sha256 digest",
            ),
            (
                ("/images/etcd", serde_json::json!("registry.k8s.io/etcd:3.6.6-0")),
                "images.etcd \"registry.k8s.io/etcd:3.6.6-0\": not an image named etcd with a tag and a \
                 sha256 digest",
            ),
            (
                (
                    "/images/coredns",
                    serde_json::json!(format!("registry.k8s.io/coredns@sha256:{}", "cd".repeat(32))),
                ),
                format!(
                    "images.coredns \"registry.k8s.io/coredns@sha256:{}\": not an image named coredns with a \
                     tag and a sha256 digest",
                    "cd".repeat(32)
                )
                .as_str(),
            ),
            (
                // kubeadm names its image <repository>/kube-scheduler: another name would not be its.
                (
                    "/images/kube-scheduler",
                    serde_json::json!(format!("registry.k8s.io/other:v1.35.4@sha256:{}", "cd".repeat(32))),
                ),
                format!(
                    "images.kube-scheduler \"registry.k8s.io/other:v1.35.4@sha256:{}\": not an image named \
                     kube-scheduler with a tag and a sha256 digest",
                    "cd".repeat(32)
                )
                .as_str(),
            ),
            (
                (
                    "/images/kube-apiserver",
                    serde_json::json!(format!("registry.k8s.io/kube-apiserver:v1 x@sha256:{}", "cd".repeat(32))),
                ),
                format!(
                    "images.kube-apiserver \"registry.k8s.io/kube-apiserver:v1 x@sha256:{}\": not an image \
                     named kube-apiserver with a tag and a sha256 digest",
                    "cd".repeat(32)
                )
                .as_str(),
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
