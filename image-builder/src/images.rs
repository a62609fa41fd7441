//! Container images by reference and digest: pulled with `oci-client` into one content-addressed blob store in
//! the cache (`<cache>/oci/blobs/<algorithm>/<hex>`, the blobs directory of an OCI image layout: sha256, or
//! sha512 for content a registry names so), verified against
//! their digests as they stream, resumed by Range after an interruption. From a multi-platform index only the
//! spec's platforms are pulled; the index itself is kept byte for byte so that references by its digest
//! resolve. Whether an image is complete is decided from the cache alone, so a cache hit makes no request.
//!
//! For a build, `write_layout` makes an OCI image layout naming the spec's images (its blobs a link to the
//! cache), which `foothold-agent import --present-platforms` puts into the data partition.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use futures_util::{StreamExt as _, TryStreamExt as _};
use oci_client::client::BlobResponse;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use crate::progress::Progress;
use crate::spec::{is_digest, ImageComponent, Loaded};

mod registries;
pub use registries::PullSettings;
use registries::Registries;

/// Manifest media types asked for; registries answer with what the digest is.
const ACCEPT: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// Blobs of one image pulled at once.
const PARALLEL_BLOBS: usize = 4;

/// The digest algorithms content in the cache may be named by (`spec::is_digest`).
const ALGORITHMS: [&str; 2] = ["sha256", "sha512"];

/// The cache's blob directory for `algorithm`.
fn blobs_dir(cache: &Path, algorithm: &str) -> PathBuf {
    cache.join("oci/blobs").join(algorithm)
}

/// A digest's algorithm and hex (`spec::is_digest` has checked it is one of [`ALGORITHMS`]).
fn split(digest: &str) -> (&str, &str) {
    digest.split_once(':').unwrap_or(("sha256", digest))
}

/// Where the cache keeps the content named `digest`, relative to the cache.
fn blob_rel(digest: &str) -> String {
    let (algorithm, hex) = split(digest);
    format!("oci/blobs/{algorithm}/{hex}")
}

fn blob_path(cache: &Path, digest: &str) -> PathBuf {
    cache.join(blob_rel(digest))
}

/// A hasher for `digest`'s algorithm.
fn hasher_for(digest: &str) -> Result<crate::io::Hasher> {
    crate::io::Hasher::of(split(digest).0)
        .with_context(|| format!("{digest}: not a sha256 or sha512 digest"))
}

/// The name the image is served under: the reference without a digest (`name[:tag]`).
pub fn served_name(im: &ImageComponent) -> String {
    im.reference
        .split_once('@')
        .map_or(im.reference.as_str(), |(n, _)| n)
        .to_owned()
}

/// The registry an image's name belongs to, as containerd's mirror configuration names it (`docker.io` for
/// `busybox`).
pub fn registry_of(im: &ImageComponent) -> String {
    let r: Reference = im.reference.parse().expect("validated");
    r.registry().to_owned()
}

/// Where an image is pulled from: `source`, or the reference's own registry and repository.
fn source(im: &ImageComponent) -> Reference {
    im.source
        .as_deref()
        .unwrap_or(&im.reference)
        .parse()
        .expect("validated")
}

/// The image's pinned digest at its source.
fn source_repo(im: &ImageComponent) -> Reference {
    let r = source(im);
    Reference::with_digest(
        r.registry().to_owned(),
        r.repository().to_owned(),
        im.pinned().to_owned(),
    )
}

/// What fetching one image did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pulled {
    /// Manifests and blobs downloaded (0: everything was in the cache and no request was made).
    pub downloaded: usize,
    pub bytes: u64,
    /// Blobs of the image in all (manifests included).
    pub blobs: usize,
    /// Downloads that went on from a partial file left by an interrupted fetch.
    pub resumed: usize,
}

/// The digests an image needs from the cache, or the first one missing.
enum Walk {
    Complete(Vec<String>),
    Missing(String),
}

/// Walks the image from its pinned digest through the cache only.
fn walk_local(cache: &Path, im: &ImageComponent) -> Result<Walk> {
    let mut need = Vec::new();
    let mut stack = vec![im.pinned().to_owned()];
    while let Some(d) = stack.pop() {
        let path = blob_path(cache, &d);
        let Ok(bytes) = fs::read(&path) else {
            return Ok(Walk::Missing(d));
        };
        need.push(d.clone());
        let (manifests, blobs) =
            children(&bytes, &im.platforms).with_context(|| format!("{} ({})", im.reference, d))?;
        stack.extend(manifests);
        let config = blobs.first().cloned();
        for b in blobs {
            if blob_path(cache, &b).is_file() {
                need.push(b);
            } else {
                return Ok(Walk::Missing(b));
            }
        }
        // A single image (not an index's child, chosen by platform already) says its platform in its config.
        if let Some(config) = config.filter(|_| d == im.pinned()) {
            check_platform(cache, &config, &im.platforms)
                .with_context(|| format!("{} ({})", im.reference, d))?;
        }
    }
    Ok(Walk::Complete(need))
}

/// Checks that the cached image config `config` is for one of `platforms`.
fn check_platform(cache: &Path, config: &str, platforms: &[String]) -> Result<()> {
    let v: Value = serde_json::from_slice(&fs::read(blob_path(cache, config))?)
        .with_context(|| format!("the image's config {config} is not JSON"))?;
    let (Some(os), Some(arch)) = (v["os"].as_str(), v["architecture"].as_str()) else {
        bail!("the image's config {config} names no os and architecture");
    };
    let name = platform_name(os, arch, v["variant"].as_str());
    if !is_wanted(platforms, os, arch, &name) {
        bail!(
            "the image is for {name}, not one of the platforms {}",
            platforms.join(", ")
        );
    }
    Ok(())
}

fn platform_name(os: &str, arch: &str, variant: Option<&str>) -> String {
    match variant {
        Some(v) => format!("{os}/{arch}/{v}"),
        None => format!("{os}/{arch}"),
    }
}

/// Whether the platform `name` (of `os` and `arch`) is one of `platforms`; `linux/arm64` takes any variant.
fn is_wanted(platforms: &[String], os: &str, arch: &str, name: &str) -> bool {
    platforms.iter().any(|want| {
        *want == name || (want.matches('/').count() == 1 && *want == format!("{os}/{arch}"))
    })
}

/// The wanted child manifests (of an index) and the blobs (of an image manifest) of a manifest.
fn children(bytes: &[u8], platforms: &[String]) -> Result<(Vec<String>, Vec<String>)> {
    let v: Value = serde_json::from_slice(bytes).context("the manifest is not JSON")?;
    let digest_of = |d: &Value| -> Result<String> {
        let s = d["digest"].as_str().context("a descriptor has no digest")?;
        if !is_digest(s) {
            bail!("descriptor digest {s:?} is not a sha256 or sha512 digest");
        }
        Ok(s.to_owned())
    };
    if let Some(list) = v["manifests"].as_array() {
        let mut wanted = Vec::new();
        let mut offered = BTreeSet::new();
        for m in list {
            let p = &m["platform"];
            let (Some(os), Some(arch)) = (p["os"].as_str(), p["architecture"].as_str()) else {
                continue;
            };
            let name = platform_name(os, arch, p["variant"].as_str());
            if is_wanted(platforms, os, arch, &name) {
                wanted.push(digest_of(m)?);
            }
            offered.insert(name);
        }
        if wanted.is_empty() {
            bail!(
                "the index offers {} and none of the platforms {}",
                offered.into_iter().collect::<Vec<_>>().join(", "),
                platforms.join(", ")
            );
        }
        return Ok((wanted, Vec::new()));
    }
    if v["config"].is_object() {
        let mut blobs = vec![digest_of(&v["config"])?];
        for l in v["layers"].as_array().into_iter().flatten() {
            if l["urls"].is_array() {
                bail!(
                    "layer {} is a foreign layer (urls); it cannot be carried offline",
                    l["digest"]
                );
            }
            blobs.push(digest_of(l)?);
        }
        return Ok((Vec::new(), blobs));
    }
    bail!("neither an image manifest nor an index")
}

/// Writes verified content into the cache atomically.
fn store_bytes(cache: &Path, digest: &str, bytes: &[u8]) -> Result<()> {
    let mut hasher = hasher_for(digest)?;
    hasher.update(bytes);
    let (algorithm, hex) = split(digest);
    let got = format!("{algorithm}:{}", hasher.hex());
    if got != digest {
        bail!("the registry sent content with digest {got} for {digest}");
    }
    let dir = blobs_dir(cache, algorithm);
    fs::create_dir_all(&dir)?;
    let tmp = dir.join(format!(".{hex}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    crate::files::publish(&tmp, &blob_path(cache, digest))?;
    Ok(())
}

/// Downloads one blob into the cache, resuming a partial download, verifying the digest over the whole content.
/// Returns the bytes downloaded and whether it resumed.
async fn pull_blob(
    client: &Client,
    repo: &Reference,
    cache: &Path,
    digest: &str,
    progress: &Progress,
) -> Result<(u64, bool)> {
    let (algorithm, hex) = split(digest);
    let dir = blobs_dir(cache, algorithm);
    fs::create_dir_all(&dir)?;
    let mut partial =
        crate::io::Partial::open_with(&dir.join(format!(".{hex}.partial")), hasher_for(digest)?)?;
    let have = partial.have();
    let (stream, resumed) = match client
        .pull_blob_stream_partial(repo, digest, have, None)
        .await
        .with_context(|| format!("pulling blob {digest}"))?
    {
        BlobResponse::Partial(s) if have > 0 => (s, true),
        BlobResponse::Partial(s) | BlobResponse::Full(s) => (s, false),
    };
    let mut out = partial.file(resumed)?;
    let have = partial.have();
    let bar = progress.bytes(
        &format!("{}@{}", repo.repository(), &hex[..12]),
        stream.content_length.map(|n| n + have),
    );
    bar.set_position(have);
    let mut stream = stream.stream;
    let mut w = partial.writer(&mut out, &bar);
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => w.write_all(&c)?,
            Err(e) => {
                let bytes = w.written();
                out.sync_all()?;
                bail!(
                    "blob {digest}: interrupted after {} bytes ({e}); fetch again to resume",
                    have + bytes
                );
            }
        }
    }
    let bytes = w.written();
    out.sync_all()?;
    drop(out);
    if let Err(got) = partial.finish(hex, &blob_path(cache, digest))? {
        bail!("blob {digest}: the content has digest {algorithm}:{got}; nothing was cached");
    }
    Ok((bytes, resumed))
}

/// Pulls whatever of the image the cache lacks.
async fn pull_image(
    client: &Client,
    cache: &Path,
    im: &ImageComponent,
    auth: &RegistryAuth,
    progress: &Progress,
) -> Result<Pulled> {
    let repo = source_repo(im);
    let mut pulled = Pulled::default();
    let mut last_missing = None;
    loop {
        let walk = walk_local(cache, im)?;
        if let Walk::Missing(d) = &walk {
            if last_missing.as_ref() == Some(d) {
                bail!("{d} is still missing after pulling it");
            }
            last_missing = Some(d.clone());
        }
        match walk {
            Walk::Complete(need) => {
                pulled.blobs = need.len();
                return Ok(pulled);
            }
            Walk::Missing(digest) => {
                // A manifest (the pinned one or an index's child) or a blob: ask for a manifest when the parent
                // names it as one. The walk finds manifests before their blobs, so try it as a manifest only
                // when no cached manifest lists it as a blob.
                let at = Reference::with_digest(
                    repo.registry().to_owned(),
                    repo.repository().to_owned(),
                    digest.clone(),
                );
                if is_manifest(cache, im, &digest)? {
                    let (bytes, _) = client
                        .pull_manifest_raw(&at, auth, ACCEPT)
                        .await
                        .with_context(|| format!("pulling manifest {}", at.whole()))?;
                    store_bytes(cache, &digest, &bytes)
                        .with_context(|| format!("manifest {}", at.whole()))?;
                    pulled.bytes += bytes.len() as u64;
                    pulled.downloaded += 1;
                } else {
                    // Every missing blob of this manifest, several at a time.
                    let missing = missing_blobs(cache, im)?;
                    client
                        .store_auth_if_needed(repo.resolve_registry(), auth)
                        .await;
                    let got: Vec<(u64, bool)> = futures_util::stream::iter(missing.iter())
                        .map(|d| pull_blob(client, &repo, cache, d, progress))
                        .buffer_unordered(PARALLEL_BLOBS)
                        .try_collect()
                        .await?;
                    pulled.downloaded += got.len();
                    pulled.bytes += got.iter().map(|g| g.0).sum::<u64>();
                    pulled.resumed += got.iter().filter(|g| g.1).count();
                }
            }
        }
    }
}

/// Whether `digest` is the pinned manifest or a child an index in the cache lists (else it is a blob).
fn is_manifest(cache: &Path, im: &ImageComponent, digest: &str) -> Result<bool> {
    if digest == im.pinned() {
        return Ok(true);
    }
    let mut stack = vec![im.pinned().to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(bytes) = fs::read(blob_path(cache, &d)) else {
            continue;
        };
        let (manifests, _) = children(&bytes, &im.platforms)?;
        if manifests.iter().any(|m| m == digest) {
            return Ok(true);
        }
        stack.extend(manifests);
    }
    Ok(false)
}

/// The blobs (not manifests) of the image's cached manifests that the cache lacks.
fn missing_blobs(cache: &Path, im: &ImageComponent) -> Result<Vec<String>> {
    let mut missing = BTreeSet::new();
    let mut stack = vec![im.pinned().to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(bytes) = fs::read(blob_path(cache, &d)) else {
            continue;
        };
        let (manifests, blobs) = children(&bytes, &im.platforms)?;
        stack.extend(manifests);
        missing.extend(blobs.into_iter().filter(|b| !blob_path(cache, b).is_file()));
    }
    Ok(missing.into_iter().collect())
}

/// Pulls every image of the spec that the cache lacks; a complete cache makes no request. Errors name the field.
pub fn fetch_all(
    loaded: &Loaded,
    cache: &Path,
    settings: &PullSettings,
    progress: &Progress,
) -> Result<Vec<(String, Pulled)>> {
    let images = &loaded.spec.components.images;
    let mut out = Vec::new();
    let mut todo = Vec::new();
    for (i, im) in images.iter().enumerate() {
        match walk_local(cache, im)
            .with_context(|| format!("{}: components.images[{i}]", loaded.path.display()))?
        {
            Walk::Complete(need) => out.push((
                i,
                Pulled {
                    blobs: need.len(),
                    ..Pulled::default()
                },
            )),
            Walk::Missing(_) => todo.push(i),
        }
    }
    if !todo.is_empty() {
        let reg = Registries::new(settings)?;
        for i in todo {
            let im = &images[i];
            let repo = source_repo(im);
            let (auth, as_user) = reg.auth(&repo);
            progress.step(
                "fetch",
                &format!("pulling {}@{}{as_user}", im.reference, im.pinned()),
            );
            let p = reg
                .rt
                .block_on(pull_image(&reg.client, cache, im, &auth, progress))
                .map_err(|e| {
                    let hint = reg.hint(&auth, &e, &repo);
                    e.context(format!(
                        "{}: components.images[{i}] ({} from {}){hint}",
                        loaded.path.display(),
                        im.reference,
                        repo.whole()
                    ))
                })?;
            progress.step(
                "fetch",
                &format!(
                    "{}: {} of {} blobs downloaded ({} bytes, {} resumed)",
                    im.reference, p.downloaded, p.blobs, p.bytes, p.resumed
                ),
            );
            out.push((i, p));
        }
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out
        .into_iter()
        .map(|(i, p)| (images[i].reference.clone(), p))
        .collect())
}

/// For `pin`: the digest each image's reference resolves to now (`images` are `(spec field, image)`). A
/// reference that names a digest resolves to it without a request; otherwise the tag (default `latest`) is
/// asked of the image's source. The digest is the sha256 of the manifest or index as served, which is checked to
/// be one and to offer the image's platforms; it is kept in the cache for the fetch that follows.
pub fn resolve_all(
    images: &[(String, &ImageComponent)],
    cache: &Path,
    settings: &PullSettings,
    progress: &Progress,
) -> Result<Vec<String>> {
    let mut reg = None;
    let mut out = Vec::new();
    for (field, im) in images {
        let r: Reference = im.reference.parse().expect("validated");
        if let Some(d) = r.digest() {
            out.push(d.to_owned());
            continue;
        }
        let reg = match &mut reg {
            Some(reg) => reg,
            None => reg.insert(Registries::new(settings)?),
        };
        let src = source(im);
        let at = Reference::with_tag(
            src.registry().to_owned(),
            src.repository().to_owned(),
            r.tag().unwrap_or("latest").to_owned(),
        );
        let (auth, as_user) = reg.auth(&at);
        progress.step("pin", &format!("resolving {}{as_user}", at.whole()));
        let found = reg
            .rt
            .block_on(resolve_one(
                &reg.client,
                cache,
                &at,
                &auth,
                &im.platforms,
                progress,
            ))
            .map_err(|e| {
                let hint = reg.hint(&auth, &e, &at);
                e.context(format!(
                    "{field} ({} from {}){hint}",
                    im.reference,
                    at.whole()
                ))
            })?;
        progress.step("pin", &format!("{}: {found}", im.reference));
        out.push(found);
    }
    Ok(out)
}

/// The digest of what `at` (a tag) names now, checked to be an index offering one of `platforms` or an image
/// manifest for one of them (its config says which). The manifest and a single image's config are cached.
async fn resolve_one(
    client: &Client,
    cache: &Path,
    at: &Reference,
    auth: &RegistryAuth,
    platforms: &[String],
    progress: &Progress,
) -> Result<String> {
    let (bytes, _) = client.pull_manifest_raw(at, auth, ACCEPT).await?;
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
    let (_, blobs) = children(&bytes, platforms)?;
    store_bytes(cache, &digest, &bytes)?;
    if let Some(config) = blobs.first() {
        if !blob_path(cache, config).is_file() {
            pull_blob(client, at, cache, config, progress).await?;
        }
        check_platform(cache, config, platforms)?;
    }
    Ok(digest)
}

/// Every cache path (relative to the cache) the spec's images need, for bundles; an error when one is missing.
pub fn cache_paths(loaded: &Loaded, cache: &Path) -> Result<Vec<String>> {
    let mut paths = BTreeSet::new();
    for (i, im) in loaded.spec.components.images.iter().enumerate() {
        match walk_local(cache, im)? {
            Walk::Complete(need) => {
                paths.extend(need.iter().map(|d| blob_rel(d)));
            }
            Walk::Missing(d) => bail!(
                "{}: components.images[{i}] ({}): {d} is not in the cache; run `foothold-build fetch` first",
                loaded.path.display(),
                im.reference
            ),
        }
    }
    Ok(paths.into_iter().collect())
}

/// Writes an OCI image layout at `dir` naming the spec's images (its blobs a symbolic link to the cache's);
/// each image must be complete in the cache. Returns the manifest's record of each image.
pub fn write_layout(loaded: &Loaded, cache: &Path, dir: &Path) -> Result<Vec<Value>> {
    fs::create_dir_all(dir.join("blobs"))?;
    let mut entries = Vec::new();
    let mut records = Vec::new();
    for (i, im) in loaded.spec.components.images.iter().enumerate() {
        let need = match walk_local(cache, im)? {
            Walk::Complete(need) => need,
            Walk::Missing(d) => bail!(
                "{}: components.images[{i}] ({}): {d} is not in the cache; run `foothold-build fetch` (or build without --offline)",
                loaded.path.display(),
                im.reference
            ),
        };
        let top = fs::read(blob_path(cache, im.pinned()))?;
        let v: Value = serde_json::from_slice(&top)?;
        let media_type = v["mediaType"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| {
                if v["manifests"].is_array() {
                    "application/vnd.oci.image.index.v1+json".into()
                } else {
                    "application/vnd.oci.image.manifest.v1+json".into()
                }
            });
        let name = served_name(im);
        let mut annotations = serde_json::Map::new();
        annotations.insert("io.containerd.image.name".into(), json!(name));
        entries.push(json!({
            "mediaType": media_type,
            "digest": im.pinned(),
            "size": top.len(),
            "annotations": annotations,
        }));
        let bytes: u64 = need
            .iter()
            .map(|d| {
                fs::metadata(blob_path(cache, d))
                    .map(|m| m.len())
                    .unwrap_or(0)
            })
            .sum();
        records.push(json!({
            "reference": im.reference,
            "digest": im.pinned(),
            "source": source_repo(im).whole(),
            "platforms": im.platforms,
            "blobs": need.len(),
            "bytes": bytes,
        }));
    }
    for algorithm in ALGORITHMS {
        let link = dir.join("blobs").join(algorithm);
        if link.symlink_metadata().is_ok() {
            fs::remove_file(&link)?;
        }
        let target = blobs_dir(cache, algorithm);
        fs::create_dir_all(&target)?;
        std::os::unix::fs::symlink(fs::canonicalize(&target)?, &link)?;
    }
    fs::write(
        dir.join("oci-layout"),
        "{\"imageLayoutVersion\":\"1.0.0\"}\n",
    )?;
    fs::write(
        dir.join("index.json"),
        serde_json::to_vec_pretty(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": entries,
        }))?,
    )?;
    Ok(records)
}

#[cfg(test)]
mod tests;
