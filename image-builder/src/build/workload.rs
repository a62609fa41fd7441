//! What the appliance gives the workload clusters the BPA's installer (`foothold-agent install-cluster`) makes
//! with kubeadm: the images kubeadm names for the release — kube-apiserver, kube-controller-manager,
//! kube-scheduler and etcd, made here from their binaries, beside the pause and CoreDNS images the appliance's
//! own cluster runs — and `kubernetes-release.json`, which tells the installer where the node binaries
//! (kubeadm, kubelet, kubectl, kube-proxy, served under `/files`) are and what their sha256 is.
//!
//! The appliance serves all of it: the images from its registry, the binaries and the release file under
//! `/files/foothold/kubernetes-<version>/binary_images/`. `foothold-build workload` writes the same for an agent that is not the appliance's (a lab, a test): the
//! images as an OCI layout for `foothold-agent import`, the binaries, and the release file.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use serde_json::json;

use super::context::Settings;
use super::inputs::{self, FileInput};
use crate::built_images::{cached_layout, BuiltImage};
use crate::spec::{Kubernetes, Loaded, WORKLOAD_BINARIES};

/// The release file's name, in `foothold-build workload`'s output and among the files the appliance serves
/// (beside the binaries it names).
pub const RELEASE_FILE: &str = "kubernetes-release.json";

/// One image to make: (record name, reference, the binary's input field, entrypoint, user).
struct Made {
    name: &'static str,
    reference: String,
    field: &'static str,
    entrypoint: String,
    user: &'static str,
}

fn made(k: &Kubernetes) -> Vec<Made> {
    let mut out = vec![
        Made {
            name: "pause",
            reference: k.pause.reference.clone(),
            field: "components.kubernetes.pause.binary",
            entrypoint: "/pause".into(),
            user: "65535:65535",
        },
        Made {
            name: "coredns",
            reference: k.coredns.reference.clone(),
            field: "components.kubernetes.coredns.binary",
            entrypoint: "/coredns".into(),
            user: "0:0",
        },
    ];
    for (name, field, binary) in [
        (
            "kube-apiserver",
            "components.kubernetes.kubeApiserver",
            "kube-apiserver",
        ),
        (
            "kube-controller-manager",
            "components.kubernetes.kubeControllerManager",
            "kube-controller-manager",
        ),
        (
            "kube-scheduler",
            "components.kubernetes.kubeScheduler",
            "kube-scheduler",
        ),
    ] {
        out.push(Made {
            name,
            reference: format!("registry.k8s.io/{binary}:{}", k.version),
            field,
            entrypoint: format!("/usr/local/bin/{binary}"),
            user: "0:0",
        });
    }
    if let Some(etcd) = &k.etcd {
        out.push(Made {
            name: "etcd",
            reference: etcd.reference.clone(),
            field: "components.kubernetes.etcd.binary",
            entrypoint: "/usr/local/bin/etcd".into(),
            user: "0:0",
        });
    }
    out
}

/// The images of `k` as one cached OCI layout (see [`cached_layout`]): its directory, and per image its record
/// name and record.
pub fn images(
    k: &Kubernetes,
    files: &[FileInput],
    cache: &Path,
    epoch: u64,
) -> Result<(PathBuf, Vec<(&'static str, serde_json::Value)>)> {
    let made = made(k);
    let input = |field: &str| {
        files
            .iter()
            .find(|f| f.field == field)
            .with_context(|| format!("{field}: not among the spec's inputs"))
    };
    let mut built = Vec::new();
    for m in &made {
        let f = input(m.field)?;
        built.push(BuiltImage {
            reference: &m.reference,
            binary: &f.src,
            binary_sha256: &f.sha256,
            entrypoint: &m.entrypoint,
            user: m.user,
            cmd: &[],
            extra: &[],
        });
    }
    let (layout, records) = cached_layout(&built, cache, epoch)?;
    Ok((layout, made.iter().map(|m| m.name).zip(records).collect()))
}

/// The images of `k` as the build makes them (see [`images`]), named by tag and digest for the image's own
/// configuration.
pub fn pinned(
    k: &Kubernetes,
    files: &[FileInput],
    cache: &Path,
    epoch: u64,
) -> Result<crate::kube::Pinned> {
    let (_, records) = images(k, files, cache, epoch)?;
    pinned_from(&records)
}

/// [`pinned`] from the records [`images`] gave.
pub fn pinned_from(records: &[(&str, serde_json::Value)]) -> Result<crate::kube::Pinned> {
    Ok(crate::kube::Pinned {
        pause: pinned_reference(records, "pause")?,
        coredns: pinned_reference(records, "coredns")?,
    })
}

/// The image `name` of `records` ([`images`]) by its tag and digest: `registry.k8s.io/pause:3.10.1@sha256:…`.
fn pinned_reference(records: &[(&str, serde_json::Value)], name: &str) -> Result<String> {
    let (_, r) = records
        .iter()
        .find(|(n, _)| *n == name)
        .with_context(|| format!("the {name} image: not among those made"))?;
    let reference = r["reference"].as_str().unwrap_or_default();
    let digest = r["digest"]
        .as_str()
        .with_context(|| format!("the {name} image: no digest in its record"))?;
    Ok(format!("{reference}@{digest}"))
}

/// The images a workload cluster's kubeadm runs, the release file's `images`: kubeadm's name for each, the
/// image the build made by tag and digest.
const KUBEADM_IMAGES: [&str; 5] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
    "coredns",
];

/// `kubernetes-release.json` for an agent reached at `endpoint` (`https://172.22.0.1:5000`), the nodes' pod
/// sandbox and kubeadm's images those the build made (`records` of [`images`]), by tag and digest.
pub fn release(
    k: &Kubernetes,
    files: &[FileInput],
    endpoint: &str,
    records: &[(&str, serde_json::Value)],
) -> Result<String> {
    let endpoint = endpoint.trim_end_matches('/');
    let sandbox = pinned_reference(records, "pause")?;
    let mut images = serde_json::Map::new();
    for name in KUBEADM_IMAGES {
        images.insert(name.into(), pinned_reference(records, name)?.into());
    }
    let mut binaries = Vec::new();
    for name in WORKLOAD_BINARIES {
        let field = format!("components.kubernetes.{name}");
        let f = files
            .iter()
            .find(|f| f.field == field)
            .with_context(|| format!("{field}: not among the spec's inputs"))?;
        let s = k.served(name);
        binaries.push(json!({
            "name": s.name,
            "url": format!("{endpoint}{}", s.path()),
            "sha256": f.sha256,
        }));
    }
    Ok(serde_json::to_string_pretty(&json!({
        "version": k.version,
        "sandboxImage": sandbox,
        "images": images,
        "binaries": binaries,
    }))? + "\n")
}

/// `foothold-build workload`: into `out`, the images (`images/`, an OCI layout), the node binaries (`bin/`,
/// each under its served name) and `kubernetes-release.json` for an agent at `endpoint`. Every input must be
/// in the cache (`foothold-build fetch`).
pub fn export(loaded: &Loaded, settings: &Settings, endpoint: &str) -> Result<Vec<PathBuf>> {
    let Some(k) = &loaded.spec.components.kubernetes else {
        bail!(
            "{}: components.kubernetes: the spec has no Kubernetes to give workload clusters",
            loaded.path.display()
        );
    };
    if k.etcd.is_none() {
        bail!(
            "{}: components.kubernetes.etcd: missing; kubeadm's control planes run it (e.g. registry.k8s.io/etcd:3.6.6-0)",
            loaded.path.display()
        );
    }
    let files = inputs::resolve(loaded, settings)?;
    let out = &settings.out;
    fs::create_dir_all(out.join("bin")).with_context(|| format!("creating {}", out.display()))?;
    let (layout, records) = images(k, &files, &settings.cache, settings.source_date_epoch)?;
    let images = out.join("images");
    if images.exists() {
        fs::remove_dir_all(&images).with_context(|| format!("removing {}", images.display()))?;
    }
    crate::files::copy_tree(&layout, &images)?;
    let mut written = vec![images];
    for name in WORKLOAD_BINARIES {
        let field = format!("components.kubernetes.{name}");
        let f = files.iter().find(|f| f.field == field).expect("resolved");
        let to = out.join("bin").join(k.served(name).name);
        let tmp = to.with_extension("part");
        fs::copy(&f.src, &tmp).with_context(|| format!("copying {}", f.src.display()))?;
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))?;
        crate::files::publish(&tmp, &to)?;
        written.push(to);
    }
    let to = out.join(RELEASE_FILE);
    crate::files::write_file(&to, &release(k, &files, endpoint, &records)?, 0o644)?;
    written.push(to);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_and_coredns_are_named_by_tag_and_the_digest_of_the_image_made() {
        let records = [
            (
                "pause",
                json!({"reference": "registry.k8s.io/pause:3.10.1", "digest": "sha256:aa"}),
            ),
            (
                "coredns",
                json!({"reference": "registry.k8s.io/coredns/coredns:v1.13.1", "digest": "sha256:bb"}),
            ),
        ];
        assert_eq!(
            pinned_from(&records).unwrap(),
            crate::kube::Pinned {
                pause: "registry.k8s.io/pause:3.10.1@sha256:aa".into(),
                coredns: "registry.k8s.io/coredns/coredns:v1.13.1@sha256:bb".into(),
            }
        );
        let e = pinned_from(&records[..1]).unwrap_err().to_string();
        assert_eq!(e, "the coredns image: not among those made");
    }
}
