//! Container image archives uploaded as `container_images`: a docker-archive (`docker save`,
//! `skopeo copy ... docker-archive:x.tar:name:tag`) or an oci-archive (a tarred OCI image layout). The
//! archive is read once, as a stream: every file goes into the content store under the digest of its content
//! (invisible to registry clients until a manifest references it). Then the images are planned — names,
//! manifests, every blob present — and only when all of them check out are they committed to the registry
//! under the names the archive carries (RepoTags, `io.containerd.image.name`, a full
//! `org.opencontainers.image.ref.name`). Entries with absolute paths, `..`, links leading out of the archive,
//! special files, or fewer bytes than their header declares reject the whole archive.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use anyhow::Context as _;
use serde::Deserialize;

use crate::digest::{Algorithm, Digest};
use crate::import::{self, BlobSource, Imported, Index};
use crate::names;
use crate::store::{BlobFiles, Store, StoreError};

/// More entries than any image archive has; a bound on the work a hostile archive can cause.
const MAX_ENTRIES: usize = 100_000;
/// Link chains longer than this are refused (and so are loops).
const MAX_LINK_HOPS: usize = 16;

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The archive itself is wrong; nothing was imported.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn invalid(msg: impl Into<String>) -> ArchiveError {
    ArchiveError::Invalid(msg.into())
}

/// Imports the archive at `path` (a blob of the store, or any file). Blocking: run it off the async runtime.
pub fn import_archive(store: &Store, path: &Path) -> Result<Vec<Imported>, ArchiveError> {
    let mut created = Vec::new();
    let outcome = scan(store, path, &mut created).and_then(|scan| {
        let src = Stored::new(store, &scan)?;
        let plans = if scan.files.contains_key("manifest.json") {
            plan_docker(&scan, &src)?
        } else if scan.files.contains_key("index.json") && scan.files.contains_key("oci-layout") {
            plan_oci(&scan, &src)?
        } else {
            return Err(invalid(
                "the archive is neither a docker-archive (no manifest.json) nor an oci-archive (no oci-layout and index.json)",
            ));
        };
        plans
            .iter()
            .map(|p| {
                import::commit(&src, store, p).map_err(|e| match e.downcast::<io::Error>() {
                    Ok(io) => ArchiveError::Store(io.into()),
                    Err(e) => ArchiveError::Store(StoreError::Import(format!(
                        "importing {}@{}: {e:#}",
                        p.repo, p.digest
                    ))),
                })
            })
            .collect()
    });
    // What this import wrote and nothing references (the archive's own metadata files; everything, after a
    // failure) goes again.
    for digest in created {
        let removed = store.with_meta_blocking(|m, files| -> Result<(), StoreError> {
            if m.blob_unreferenced(&digest)? {
                files.remove(&digest)?;
            }
            Ok(())
        });
        if let Err(e) = removed {
            tracing::warn!(%digest, error = %e, "could not remove a blob left by an archive import");
        }
    }
    outcome
}

/// The archive's files by normalised path, and its links.
/// The algorithm and hex an OCI layout path `blobs/<algorithm>/<hex>` names, for a registered algorithm.
fn layout_blob(path: &str) -> Option<(Algorithm, &str)> {
    let rest = path.strip_prefix("blobs/")?;
    Algorithm::ALL.into_iter().find_map(|a| {
        rest.strip_prefix(a.name())
            .and_then(|r| r.strip_prefix('/'))
            .map(|hex| (a, hex))
    })
}

struct Scan {
    files: HashMap<String, (Digest, u64)>,
    links: HashMap<String, String>,
}

impl Scan {
    fn resolve(&self, path: &str) -> Result<&(Digest, u64), ArchiveError> {
        let mut p = path.to_owned();
        for _ in 0..=MAX_LINK_HOPS {
            if let Some(f) = self.files.get(&p) {
                return Ok(f);
            }
            match self.links.get(&p) {
                Some(next) => p = next.clone(),
                None => return Err(invalid(format!("the archive has no file {path:?}"))),
            }
        }
        Err(invalid(format!(
            "{path:?}: links nest more than {MAX_LINK_HOPS} deep (or loop)"
        )))
    }
}

/// A path inside the archive: relative, no `..`, `.` and empty components dropped.
fn entry_path(raw: &[u8]) -> Result<String, String> {
    let s = std::str::from_utf8(raw).map_err(|_| "is not UTF-8".to_owned())?;
    if s.starts_with('/') {
        return Err("is an absolute path".into());
    }
    let mut parts = Vec::new();
    for c in s.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err("contains `..`".into()),
            c => parts.push(c),
        }
    }
    Ok(parts.join("/"))
}

/// Where a link at `from` pointing at `target` leads, inside the archive. `relative_to_entry`: symlinks
/// resolve against the link's directory, hard links against the archive root.
fn link_target(from: &str, target: &[u8], relative_to_entry: bool) -> Result<String, String> {
    let t = std::str::from_utf8(target)
        .map_err(|_| "has a link target that is not UTF-8".to_owned())?;
    if t.starts_with('/') {
        return Err(format!("links to the absolute path {t:?}"));
    }
    let mut parts: Vec<&str> = if relative_to_entry {
        let mut p: Vec<&str> = from.split('/').collect();
        p.pop();
        p
    } else {
        Vec::new()
    };
    for c in t.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(format!("links out of the archive ({t:?})"));
                }
            }
            c => parts.push(c),
        }
    }
    if parts.is_empty() {
        return Err(format!("links to the archive's root ({t:?})"));
    }
    Ok(parts.join("/"))
}

fn scan(store: &Store, path: &Path, created: &mut Vec<Digest>) -> Result<Scan, ArchiveError> {
    let file = File::open(path).map_err(StoreError::from)?;
    let mut archive = tar::Archive::new(io::BufReader::with_capacity(1 << 20, file));
    let mut out = Scan {
        files: HashMap::new(),
        links: HashMap::new(),
    };
    let entries = archive
        .entries()
        .map_err(|e| invalid(format!("reading the archive: {e}")))?;
    for (n, entry) in entries.enumerate() {
        if n >= MAX_ENTRIES {
            return Err(invalid(format!(
                "the archive has more than {MAX_ENTRIES} entries"
            )));
        }
        let mut entry =
            entry.map_err(|e| invalid(format!("the archive is not a valid tar file: {e}")))?;
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let bad = |why: String| invalid(format!("archive entry {shown:?} {why}"));
        let p = entry_path(&raw).map_err(bad)?;
        let kind = entry.header().entry_type();
        use tar::EntryType as T;
        match kind {
            T::Directory | T::XGlobalHeader | T::XHeader => {}
            T::Regular | T::Continuous => {
                if p.is_empty() {
                    return Err(bad("names no file".into()));
                }
                let declared = entry.size();
                // A layout's `blobs/sha512/…` holds content named by sha512; everything else is named by sha256.
                let algorithm = layout_blob(&p).map_or(Algorithm::Sha256, |(a, _)| a);
                let (digest, size, new) =
                    store.stage_blob(&mut entry, algorithm).map_err(
                        |e| match StoreError::from(e) {
                            StoreError::Io(e) => bad(format!("cannot be read: {e}")),
                            other => ArchiveError::Store(other),
                        },
                    )?;
                if new {
                    created.push(digest.clone());
                }
                if size != declared {
                    return Err(bad(format!(
                        "is cut off: its header declares {declared} bytes, the archive holds {size}"
                    )));
                }
                out.links.remove(&p);
                out.files.insert(p, (digest, size));
            }
            T::Symlink | T::Link => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| bad("is a link without a target".into()))?
                    .into_owned();
                let to = link_target(&p, &target, kind == T::Symlink).map_err(bad)?;
                out.files.remove(&p);
                out.links.insert(p, to);
            }
            other => {
                return Err(bad(format!(
                    "is a {other:?}; image archives hold only files, directories and links"
                )))
            }
        }
    }
    Ok(out)
}

/// Blobs the scan put in the store, plus the manifests a docker-archive import writes.
struct Stored<'a> {
    store: &'a Store,
    sizes: HashMap<Digest, u64>,
    made: std::cell::RefCell<HashMap<Digest, Vec<u8>>>,
}

impl<'a> Stored<'a> {
    fn new(store: &'a Store, scan: &Scan) -> Result<Self, ArchiveError> {
        let mut sizes = HashMap::new();
        for (path, (digest, size)) in &scan.files {
            // In an OCI layout the path names the digest: it must be what the content hashes to.
            if let Some((algorithm, hex)) = layout_blob(path) {
                if algorithm != digest.algorithm() || hex != digest.hex() {
                    return Err(invalid(format!(
                        "archive entry {path:?} hashes to {digest}: the archive is corrupt"
                    )));
                }
            }
            sizes.insert(digest.clone(), *size);
        }
        Ok(Stored {
            store,
            sizes,
            made: Default::default(),
        })
    }

    fn make(&self, bytes: Vec<u8>) -> Digest {
        let digest = Digest::of_bytes(&bytes);
        self.made.borrow_mut().insert(digest.clone(), bytes);
        digest
    }
}

impl BlobSource for Stored<'_> {
    fn describe(&self, digest: &Digest) -> String {
        format!("blob {digest} of the archive")
    }
    fn size(&self, digest: &Digest) -> Option<u64> {
        self.sizes
            .get(digest)
            .copied()
            .or_else(|| self.made.borrow().get(digest).map(|b| b.len() as u64))
    }
    fn read(&self, digest: &Digest) -> anyhow::Result<Vec<u8>> {
        if let Some(b) = self.made.borrow().get(digest) {
            return Ok(b.clone());
        }
        let path = self.store.blob_path(digest);
        std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
    }
    fn put(&self, _: &BlobFiles, digest: &Digest) -> anyhow::Result<u64> {
        self.size(digest)
            .with_context(|| format!("{} is missing", self.describe(digest)))
    }
}

fn read_json<T: serde::de::DeserializeOwned>(
    src: &Stored<'_>,
    scan: &Scan,
    path: &str,
) -> Result<T, ArchiveError> {
    let (digest, _) = scan.resolve(path)?;
    let bytes = src
        .read_small(digest)
        .map_err(|e| invalid(format!("{path}: {e:#}")))?;
    serde_json::from_slice(&bytes).map_err(|e| invalid(format!("{path}: {e}")))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerImage {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

#[derive(Deserialize)]
struct DockerConfig {
    rootfs: RootFs,
}

#[derive(Deserialize)]
struct RootFs {
    diff_ids: Vec<String>,
}

/// The layer's media type from its first bytes: docker-archives normally hold plain tars, but newer docker
/// keeps compressed layers as they came.
fn layer_media_type(path: &Path) -> io::Result<&'static str> {
    let mut magic = [0u8; 4];
    let mut f = File::open(path)?;
    let n = f.read(&mut magic)?;
    Ok(match &magic[..n] {
        [0x1f, 0x8b, ..] => "application/vnd.oci.image.layer.v1.tar+gzip",
        [0x28, 0xb5, 0x2f, 0xfd] => "application/vnd.oci.image.layer.v1.tar+zstd",
        _ => "application/vnd.oci.image.layer.v1.tar",
    })
}

/// docker-archive: each manifest.json entry becomes an OCI image manifest over the archive's config and
/// layers, tagged with each of its RepoTags.
fn plan_docker(scan: &Scan, src: &Stored<'_>) -> Result<Vec<import::Plan>, ArchiveError> {
    let images: Vec<DockerImage> = read_json(src, scan, "manifest.json")?;
    if images.is_empty() {
        return Err(invalid("manifest.json lists no images"));
    }
    let mut plans = Vec::new();
    for (i, img) in images.iter().enumerate() {
        let at = |what: String| invalid(format!("manifest.json[{i}]: {what}"));
        let config_path = entry_path(img.config.as_bytes())
            .map_err(|why| at(format!("Config {:?} {why}", img.config)))?;
        let config: DockerConfig = read_json(src, scan, &config_path)?;
        if config.rootfs.diff_ids.len() != img.layers.len() {
            return Err(at(format!(
                "the config lists {} layers, Layers {}",
                config.rootfs.diff_ids.len(),
                img.layers.len()
            )));
        }
        let (config_digest, config_size) = scan.resolve(&config_path)?;
        let mut layers = Vec::new();
        for l in &img.layers {
            let p = entry_path(l.as_bytes()).map_err(|why| at(format!("layer {l:?} {why}")))?;
            let (digest, size) = scan.resolve(&p)?;
            let media_type =
                layer_media_type(&src.store.blob_path(digest)).map_err(StoreError::from)?;
            layers.push(serde_json::json!({"mediaType": media_type, "digest": digest.to_string(), "size": size}));
        }
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": config_digest.to_string(), "size": config_size},
            "layers": layers,
        });
        let digest = src.make(serde_json::to_vec(&manifest).expect("manifest serialises"));
        let tags = img.repo_tags.as_deref().unwrap_or_default();
        if tags.is_empty() {
            return Err(at(
                "has no RepoTags: the archive does not say what to name the image".into(),
            ));
        }
        for t in tags {
            let (repo, tag) =
                names::normalize_reference(t).map_err(|e| at(format!("RepoTag {t:?}: {e}")))?;
            plans.push(
                import::plan(
                    src,
                    repo,
                    tag,
                    &digest,
                    Some(OCI_MANIFEST),
                    import::Children::All,
                )
                .map_err(|e| at(format!("{e:#}")))?,
            );
        }
    }
    Ok(plans)
}

/// oci-archive: the tarred layout's index.json names the images.
fn plan_oci(scan: &Scan, src: &Stored<'_>) -> Result<Vec<import::Plan>, ArchiveError> {
    let index: Index = read_json(src, scan, "index.json")?;
    import::plan_index(
        src,
        &index,
        None,
        "index.json",
        "name images with full references (skopeo copy ... oci-archive:x.tar:registry.example/app:v1)",
        import::Children::All,
    )
    .map_err(|e| invalid(format!("{e:#}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_paths() {
        assert_eq!(entry_path(b"./a/b.tar").unwrap(), "a/b.tar");
        assert_eq!(entry_path(b"manifest.json").unwrap(), "manifest.json");
        assert_eq!(entry_path(b"./").unwrap(), "");
        assert!(entry_path(b"/etc/passwd").is_err());
        assert!(entry_path(b"a/../../x").is_err());
        assert!(entry_path(b"..").is_err());
        assert!(entry_path(b"a/\xff").is_err());
    }

    #[test]
    fn links_stay_inside() {
        assert_eq!(
            link_target("abc/layer.tar", b"../def/layer.tar", true).unwrap(),
            "def/layer.tar"
        );
        assert_eq!(
            link_target("x", b"blobs/sha256/aa", false).unwrap(),
            "blobs/sha256/aa"
        );
        assert!(link_target("abc/layer.tar", b"../../etc/passwd", true).is_err());
        assert!(link_target("layer.tar", b"/etc/passwd", true).is_err());
        assert!(link_target("a", b"..", false).is_err());
        assert!(link_target("a/b", b"..", true).is_err());
    }
}
