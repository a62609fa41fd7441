//! Importing an OCI image layout (as written by `skopeo copy ... oci:DIR:TAG`, `buildah push oci:` or our image
//! builder) into the store. Every blob is re-hashed on the way in; a layout that lies about a digest imports
//! nothing under that digest.

use std::fs::{self, File};
use std::path::Path;

use anyhow::{bail, Context as _};
use serde::Deserialize;

use crate::digest::Digest;
use crate::manifest::{self, RefKind};
use crate::names;
use crate::store::Store;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub repo: String,
    pub tag: Option<String>,
    pub digest: Digest,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    manifests: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    media_type: Option<String>,
    digest: String,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

/// Splits a full reference `repo[:tag][@digest]` into repository and tag.
pub fn split_reference(r: &str) -> (String, Option<String>) {
    let r = r.split('@').next().unwrap_or(r);
    let slash = r.rfind('/').map(|i| i + 1).unwrap_or(0);
    match r[slash..].rfind(':') {
        Some(i) => (
            r[..slash + i].to_owned(),
            Some(r[slash + i + 1..].to_owned()),
        ),
        None => (r.to_owned(), None),
    }
}

/// Imports every manifest in `layout/index.json`. Names come from `io.containerd.image.name` or
/// `org.opencontainers.image.ref.name` (a full reference, or a bare tag when `repo` is given).
pub fn import_layout(
    store: &Store,
    layout: &Path,
    repo: Option<&str>,
) -> anyhow::Result<Vec<Imported>> {
    let marker = layout.join("oci-layout");
    fs::metadata(&marker).with_context(|| {
        format!(
            "{} is not an OCI image layout (no oci-layout file)",
            layout.display()
        )
    })?;
    let index_path = layout.join("index.json");
    let index: Index = serde_json::from_slice(
        &fs::read(&index_path).with_context(|| format!("reading {}", index_path.display()))?,
    )
    .with_context(|| format!("parsing {}", index_path.display()))?;
    if let Some(r) = repo {
        names::validate_name(r).with_context(|| format!("--repo {r:?}"))?;
    }
    let mut out = Vec::new();
    for (i, entry) in index.manifests.iter().enumerate() {
        let digest: Digest = entry
            .digest
            .parse()
            .with_context(|| format!("{}: manifests[{i}].digest", index_path.display()))?;
        let full = entry.annotations.get("io.containerd.image.name");
        let short = entry.annotations.get("org.opencontainers.image.ref.name");
        let (target_repo, tag) = match (repo, full, short) {
            (Some(r), _, Some(s)) if names::validate_tag(s).is_ok() => (r.to_owned(), Some(s.clone())),
            (Some(r), Some(f), _) => (r.to_owned(), split_reference(f).1),
            (Some(r), None, Some(s)) => (r.to_owned(), split_reference(s).1),
            (Some(r), None, None) => (r.to_owned(), None),
            (None, Some(f), _) => split_reference(f),
            (None, None, Some(s)) if s.contains('/') => split_reference(s),
            (None, _, _) => bail!(
                "{}: manifests[{i}] ({digest}) carries no repository name (ref.name is {:?}); pass --repo",
                index_path.display(),
                short
            ),
        };
        names::validate_name(&target_repo).with_context(|| {
            format!(
                "{}: manifests[{i}] repository {target_repo:?}",
                index_path.display()
            )
        })?;
        if let Some(t) = &tag {
            names::validate_tag(t)
                .with_context(|| format!("{}: manifests[{i}] tag {t:?}", index_path.display()))?;
        }
        import_manifest(
            store,
            layout,
            &target_repo,
            &digest,
            entry.media_type.as_deref(),
            tag.as_deref(),
        )
        .with_context(|| format!("importing {target_repo}@{digest}"))?;
        tracing::info!(repo = target_repo, tag, %digest, "imported");
        out.push(Imported {
            repo: target_repo,
            tag,
            digest,
        });
    }
    Ok(out)
}

fn layout_blob(layout: &Path, digest: &Digest) -> std::path::PathBuf {
    layout.join("blobs/sha256").join(digest.hex())
}

fn copy_blob(store: &Store, layout: &Path, repo: &str, digest: &Digest) -> anyhow::Result<u64> {
    let path = layout_blob(layout, digest);
    let file = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let size = store
        .files()
        .put_reader(file, digest)
        .with_context(|| format!("copying {}", path.display()))?;
    store.meta_blocking(|m| m.link_blob(repo, digest, size))?;
    Ok(size)
}

fn import_manifest(
    store: &Store,
    layout: &Path,
    repo: &str,
    digest: &Digest,
    media_type: Option<&str>,
    tag: Option<&str>,
) -> anyhow::Result<()> {
    let path = layout_blob(layout, digest);
    let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let actual = Digest::of_bytes(&bytes);
    if &actual != digest {
        bail!("{} hashes to {actual}", path.display());
    }
    let parsed = manifest::parse(media_type, &bytes)
        .with_context(|| format!("parsing manifest {}", path.display()))?;
    for (child, kind) in &parsed.references {
        match kind {
            RefKind::Blob => {
                copy_blob(store, layout, repo, child)?;
            }
            // Indexes may list platforms the layout does not carry (skopeo copies one unless --all).
            RefKind::Manifest if !layout_blob(layout, child).exists() => {
                bail!("index {digest} lists manifest {child}, which the layout does not contain (copy with --all)")
            }
            RefKind::Manifest => import_manifest(store, layout, repo, child, None, None)?,
        }
    }
    store.files().put_bytes(&bytes)?;
    store.meta_blocking(|m| m.put_manifest(repo, digest, bytes.len() as u64, &parsed, tag))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::split_reference;

    #[test]
    fn references() {
        assert_eq!(
            split_reference("docker.io/library/nginx:1.25"),
            ("docker.io/library/nginx".into(), Some("1.25".into()))
        );
        assert_eq!(
            split_reference("localhost:5000/a/b"),
            ("localhost:5000/a/b".into(), None)
        );
        assert_eq!(
            split_reference("quay.io/x/y:v1@sha256:00"),
            ("quay.io/x/y".into(), Some("v1".into()))
        );
    }
}
