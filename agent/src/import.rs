//! Importing images into the registry from an OCI image layout (as written by `skopeo copy ... oci:DIR:TAG`,
//! `buildah push oci:` or our image builder) or from blobs an archive upload already put in the store
//! (`archive`). Two phases: `plan` reads and checks every manifest and that every blob it needs is present,
//! then `commit` links blobs and writes manifests and tags. A source that is wrong anywhere imports nothing.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::manifest::{self, ParsedManifest, RefKind};
use crate::names;
use crate::store::{BlobFiles, Store};

/// One name an import made visible.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Imported {
    pub repo: String,
    pub tag: Option<String>,
    #[schema(value_type = String, example = "sha256:…")]
    pub digest: Digest,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Index {
    pub manifests: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Entry {
    pub media_type: Option<String>,
    pub digest: String,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// Where blobs come from.
pub(crate) trait BlobSource {
    /// Where the source says this blob is (for messages).
    fn describe(&self, digest: &Digest) -> String;
    /// Its size, None when the source lacks it.
    fn size(&self, digest: &Digest) -> Option<u64>;
    /// Its content, at most `manifest::MAX_MANIFEST_SIZE` bytes, verified against the digest.
    fn read_small(&self, digest: &Digest) -> anyhow::Result<Vec<u8>> {
        let size = self
            .size(digest)
            .with_context(|| format!("{} is missing", self.describe(digest)))?;
        if size > manifest::MAX_MANIFEST_SIZE as u64 {
            bail!(
                "{} is {size} bytes, more than a manifest may be",
                self.describe(digest)
            );
        }
        let bytes = self.read(digest)?;
        let actual = Digest::of_bytes_with(digest.algorithm(), &bytes);
        if &actual != digest {
            bail!("{} hashes to {actual}", self.describe(digest));
        }
        Ok(bytes)
    }
    fn read(&self, digest: &Digest) -> anyhow::Result<Vec<u8>>;
    /// Puts the blob into the store's files (verified); returns its size. Called under the metadata lock.
    fn put(&self, files: &BlobFiles, digest: &Digest) -> anyhow::Result<u64>;
}

/// An OCI image layout directory.
pub(crate) struct Layout<'a>(pub &'a Path);

impl Layout<'_> {
    fn path(&self, digest: &Digest) -> PathBuf {
        self.0
            .join("blobs")
            .join(digest.algorithm().name())
            .join(digest.hex())
    }
}

impl BlobSource for Layout<'_> {
    fn describe(&self, digest: &Digest) -> String {
        self.path(digest).display().to_string()
    }
    fn size(&self, digest: &Digest) -> Option<u64> {
        fs::metadata(self.path(digest)).ok().map(|m| m.len())
    }
    fn read(&self, digest: &Digest) -> anyhow::Result<Vec<u8>> {
        fs::read(self.path(digest)).with_context(|| format!("reading {}", self.describe(digest)))
    }
    fn put(&self, files: &BlobFiles, digest: &Digest) -> anyhow::Result<u64> {
        let path = self.path(digest);
        let file = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        files
            .put_reader(file, digest)
            .with_context(|| format!("copying {}", path.display()))
    }
}

/// What one top-level manifest needs, children first.
#[derive(Debug)]
pub(crate) struct Plan {
    pub repo: String,
    pub tag: Option<String>,
    pub digest: Digest,
    /// Blobs to link, in order.
    blobs: Vec<Digest>,
    /// Manifests to write, children before parents: (digest, bytes, parsed).
    manifests: Vec<(Digest, Vec<u8>, ParsedManifest)>,
}

/// Which manifests an index must bring along.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Children {
    /// Every manifest an index lists must be in the source (a layout written with `skopeo copy --all`).
    All,
    /// Manifests the source lacks are left out: the source carries some platforms of the image (the image
    /// builder writes layouts that way). The index is kept byte for byte, so its digest still resolves.
    Present,
}

/// Reads a manifest (and for an index its children) and checks that every blob it needs is in `src`.
pub(crate) fn plan(
    src: &dyn BlobSource,
    repo: String,
    tag: Option<String>,
    digest: &Digest,
    media_type: Option<&str>,
    children: Children,
) -> anyhow::Result<Plan> {
    let mut p = Plan {
        repo,
        tag,
        digest: digest.clone(),
        blobs: Vec::new(),
        manifests: Vec::new(),
    };
    plan_manifest(src, &mut p, digest, media_type, children, 0)?;
    Ok(p)
}

fn plan_manifest(
    src: &dyn BlobSource,
    p: &mut Plan,
    digest: &Digest,
    media_type: Option<&str>,
    children: Children,
    depth: usize,
) -> anyhow::Result<()> {
    if depth > 4 {
        bail!("manifest {digest}: indexes nest more than 4 deep");
    }
    let bytes = src.read_small(digest)?;
    let parsed = manifest::parse(media_type, &bytes)
        .with_context(|| format!("parsing manifest {}", src.describe(digest)))?;
    for (child, kind, _) in &parsed.references {
        match kind {
            RefKind::Blob if src.size(child).is_none() => bail!(
                "manifest {digest} references blob {child}, which is missing ({})",
                src.describe(child)
            ),
            RefKind::Blob => p.blobs.push(child.clone()),
            // Indexes may list platforms the source does not carry (skopeo copies one unless --all).
            RefKind::Manifest if src.size(child).is_none() => {
                if children == Children::All {
                    bail!(
                        "index {digest} lists manifest {child}, which is missing (copy with --all, or import \
                         with --present-platforms to keep the platforms the layout has)"
                    )
                }
            }
            RefKind::Manifest => plan_manifest(src, p, child, None, children, depth + 1)?,
        }
    }
    p.manifests.push((digest.clone(), bytes, parsed));
    Ok(())
}

/// Links the plan's blobs and writes its manifests, the top one under its tag.
pub(crate) fn commit(src: &dyn BlobSource, store: &Store, p: &Plan) -> anyhow::Result<Imported> {
    // Each file is written and linked under one acquisition of the lock (see `Store::with_meta_blocking`).
    for blob in &p.blobs {
        store.with_meta_blocking(|m, files| -> anyhow::Result<()> {
            let size = src.put(files, blob)?;
            Ok(m.link_blob(&p.repo, blob, size)?)
        })?;
    }
    for (digest, bytes, parsed) in &p.manifests {
        let tag = (digest == &p.digest).then_some(p.tag.as_deref()).flatten();
        store.with_meta_blocking(|m, files| -> anyhow::Result<()> {
            files.put_bytes(digest.algorithm(), bytes)?;
            let tags: Vec<&str> = tag.into_iter().collect();
            // Absent children were allowed by planning (`--present-platforms`) or refused there.
            Ok(m.put_manifest(&p.repo, digest, bytes.len() as u64, parsed, &tags, true)?)
        })?;
    }
    tracing::info!(repo = p.repo, tag = p.tag, digest = %p.digest, "imported");
    Ok(Imported {
        repo: p.repo.clone(),
        tag: p.tag.clone(),
        digest: p.digest.clone(),
    })
}

/// Plans every manifest of an index; `repo` overrides the repository, otherwise names come from
/// `io.containerd.image.name` or a full `org.opencontainers.image.ref.name`, normalised as container runtimes
/// do (`busybox:1` is `docker.io/library/busybox:1`). `hint` ends the error for an unnamed manifest.
pub(crate) fn plan_index(
    src: &dyn BlobSource,
    index: &Index,
    repo: Option<&str>,
    what: &str,
    hint: &str,
    children: Children,
) -> anyhow::Result<Vec<Plan>> {
    let mut plans = Vec::new();
    for (i, entry) in index.manifests.iter().enumerate() {
        let digest: Digest = entry
            .digest
            .parse()
            .with_context(|| format!("{what}: manifests[{i}].digest"))?;
        let full = entry.annotations.get("io.containerd.image.name");
        let short = entry.annotations.get("org.opencontainers.image.ref.name");
        let (target_repo, tag) = match (repo, full, short) {
            (Some(r), _, Some(s)) if names::validate_tag(s).is_ok() => {
                (r.to_owned(), Some(s.clone()))
            }
            (Some(r), Some(f), _) => (r.to_owned(), names::split_reference(f).1),
            (Some(r), None, Some(s)) => (r.to_owned(), names::split_reference(s).1),
            (Some(r), None, None) => (r.to_owned(), None),
            (None, Some(f), _) => names::normalize_reference(f)
                .with_context(|| format!("{what}: manifests[{i}] name {f:?}"))?,
            (None, None, Some(s)) if s.contains(['/', ':']) => names::normalize_reference(s)
                .with_context(|| format!("{what}: manifests[{i}] name {s:?}"))?,
            (None, _, _) => bail!(
                "{what}: manifests[{i}] ({digest}) carries no repository name (ref.name is {short:?}); {hint}"
            ),
        };
        names::validate_name(&target_repo)
            .with_context(|| format!("{what}: manifests[{i}] repository {target_repo:?}"))?;
        if let Some(t) = &tag {
            names::validate_tag(t).with_context(|| format!("{what}: manifests[{i}] tag {t:?}"))?;
        }
        plans.push(
            plan(
                src,
                target_repo,
                tag,
                &digest,
                entry.media_type.as_deref(),
                children,
            )
            .with_context(|| format!("{what}: manifests[{i}]"))?,
        );
    }
    Ok(plans)
}

/// Imports every manifest in `layout/index.json`, or nothing if any of them is wrong.
pub fn import_layout(
    store: &Store,
    layout: &Path,
    repo: Option<&str>,
    children: Children,
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
    let src = Layout(layout);
    let what = index_path.display().to_string();
    let plans = plan_index(&src, &index, repo, &what, "pass --repo", children)?;
    plans
        .iter()
        .map(|p| {
            commit(&src, store, p).with_context(|| format!("importing {}@{}", p.repo, p.digest))
        })
        .collect()
}

/// Records `path` as a completed BPA image record `owner/cluster/kind/name` (binary_images or os_images), so the
/// agent serves it at `/files/<owner>/<cluster>/<kind>/<name>` from its first start (the image builder bakes
/// files in this way). The content must hash to `sha256` when given. An existing record with other content is
/// an error; with the same content, nothing changes.
pub fn add_file(
    store: &Store,
    path: &Path,
    key: crate::store::meta::ImageKey<'_>,
    sha256: Option<&str>,
) -> anyhow::Result<Digest> {
    let (owner, cluster, kind, name) = key;
    // The names and kinds the REST API accepts, by the same rule.
    for (field, v) in [("owner", owner), ("cluster", cluster), ("name", name)] {
        foothold_names::check_name(v).map_err(|why| anyhow::anyhow!("{field} {why}"))?;
    }
    let parsed: foothold_names::ImageKind = kind.parse().map_err(anyhow::Error::msg)?;
    if !parsed.is_file() {
        bail!("kind {kind:?} is not binary_images or os_images (container images are imported as layouts)");
    }
    // SOURCE_DATE_EPOCH (set by foothold-build) makes the record's time, and so the store, reproducible.
    let now = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0)
        });
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // The file is written and its record made under one acquisition of the lock.
    store.with_meta_blocking(|m, files| -> anyhow::Result<Digest> {
        let (digest, length, created) = files
            .put_hashing(file, crate::digest::Algorithm::Sha256)
            .with_context(|| format!("storing {}", path.display()))?;
        let hex = digest.hex().to_owned();
        if let Some(want) = sha256 {
            if want != hex {
                if created {
                    files.remove(&digest)?;
                }
                bail!("{} has sha256 {hex}, expected {want}", path.display());
            }
        }
        if let Some(row) = m.image(key)? {
            if row.digest.as_ref() == Some(&digest) {
                return Ok(digest);
            }
            bail!("{owner}/{cluster}/{kind}/{name} exists with other content");
        }
        let row = crate::store::meta::ImageRow {
            name: name.to_owned(),
            length,
            sha256: Some(hex),
            description: None,
            upload_id: None,
            digest: None,
            updated: now,
            imported: None,
        };
        m.create_image(key, &row)?;
        m.complete_image(key, &digest, now)?;
        Ok(digest)
    })
}
