//! Container images made here from one static binary each (the pause and CoreDNS images of
//! `components.kubernetes`): one gzip layer holding the binary, a config naming it the entrypoint, written as an
//! OCI image layout the agent imports. Every byte derives from the binary, the reference and the epoch, so two
//! builds give the same digests, and the layout is cached under that key ([`cached_layout`]): gzip at its best
//! level takes seconds over CoreDNS, and a rebuild after an agent change should not pay them again.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde_json::json;
use sha2::{Digest, Sha256};

/// One image to make.
pub struct BuiltImage<'a> {
    /// `registry.k8s.io/pause:3.10.1`
    pub reference: &'a str,
    /// The binary's content.
    pub binary: &'a Path,
    /// Its hex sha256, as the build verified it: [`cached_layout`]'s key names the binary by it.
    pub binary_sha256: &'a str,
    /// Its path in the image, which is also the entrypoint: `/pause`.
    pub entrypoint: &'a str,
    /// The user it runs as (`65535:65535` for pause, as upstream's image).
    pub user: &'a str,
    /// The entrypoint's arguments (the config's `Cmd`), if any.
    pub cmd: &'a [&'a str],
    /// More files in the same layer (the libraries a dynamically linked binary needs, a file it reads).
    pub extra: &'a [ImageFile<'a>],
}

/// A file of a [`BuiltImage`] besides its binary.
pub struct ImageFile<'a> {
    /// Its absolute path in the image.
    pub path: String,
    pub source: &'a Path,
    /// Its content's hex sha256 ([`cached_layout`]'s key names it by it).
    pub sha256: String,
    pub mode: u32,
}

/// A reproducible tar: the binary at `path`, mode 0755, then the `extra` files in path order, owned by root, at
/// `epoch`.
fn layer_tar(binary: &[u8], path: &str, extra: &[ImageFile], epoch: u64) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    b.mode(tar::HeaderMode::Deterministic);
    let mut append = |path: &str, data: &[u8], mode: u32| {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(epoch);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, path.trim_start_matches('/'), data)
    };
    append(path, binary, 0o755)?;
    let mut extra: Vec<&ImageFile> = extra.iter().collect();
    extra.sort_by(|a, b| a.path.cmp(&b.path));
    for f in extra {
        let data = fs::read(f.source).with_context(|| format!("reading {}", f.source.display()))?;
        append(&f.path, &data, f.mode)?;
    }
    Ok(b.into_inner()?)
}

fn put(layout: &Path, bytes: &[u8]) -> Result<(String, u64)> {
    let hex = hex::encode(Sha256::digest(bytes));
    let path = layout.join("blobs/sha256").join(&hex);
    fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    Ok((format!("sha256:{hex}"), bytes.len() as u64))
}

/// Writes `images` as one OCI image layout at `layout` (created). Returns, per image, the manifest record for the
/// build manifest: reference, manifest digest, layer digest.
pub fn write_layout(
    images: &[BuiltImage],
    layout: &Path,
    epoch: u64,
) -> Result<Vec<serde_json::Value>> {
    fs::create_dir_all(layout.join("blobs/sha256"))
        .with_context(|| format!("creating {}", layout.display()))?;
    fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    let created = time_of(epoch);
    let mut entries = Vec::new();
    let mut records = Vec::new();
    for im in images {
        let binary =
            fs::read(im.binary).with_context(|| format!("reading {}", im.binary.display()))?;
        let tar = layer_tar(&binary, im.entrypoint, im.extra, epoch)?;
        let diff_id = format!("sha256:{}", hex::encode(Sha256::digest(&tar)));
        let (layer, layer_size) = put(layout, &gzip(&tar))?;
        let mut run = json!({"Entrypoint": [im.entrypoint], "User": im.user, "Env": [PATH]});
        if !im.cmd.is_empty() {
            run["Cmd"] = json!(im.cmd);
        }
        let config = json!({
            "architecture": "amd64",
            "os": "linux",
            "created": created,
            "config": run,
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created": created, "created_by": format!("foothold-build: {} from its source", im.entrypoint)}],
        });
        let (config, config_size) = put(layout, &serde_json::to_vec(&config)?)?;
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": config_size},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer, "size": layer_size}],
        });
        let (manifest, manifest_size) = put(layout, &serde_json::to_vec(&manifest)?)?;
        entries.push(json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest,
            "size": manifest_size,
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"org.opencontainers.image.ref.name": im.reference},
        }));
        records.push(json!({"reference": im.reference, "digest": manifest, "layer": layer}));
    }
    let index = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": entries});
    fs::write(layout.join("index.json"), serde_json::to_vec(&index)?)?;
    Ok(records)
}

/// How [`write_layout`] lays images out: part of the cache key, so a change to its bytes (the tar, the gzip
/// level, the config's fields) must bump it, or builds would keep serving layouts made the old way.
/// `the_layout_format_is_pinned` fails until it is bumped.
const LAYOUT_FORMAT: u32 = 2;
/// Every image's `PATH`, as upstream's images have it: kubeadm's static pods name their binaries
/// (`command: [kube-apiserver, …]`), which the runtime finds through it.
const PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// How many layouts `<cache>/built-images/` keeps (the most recently used); each is about 20 MiB.
const CACHE_KEEP: usize = 3;
/// In a cache entry beside the layout: [`write_layout`]'s records.
const RECORDS: &str = "records.json";

/// The layout of `images` from `<cache>/built-images/<key>/`, written there first when the cache lacks it; the
/// key covers every input of [`write_layout`] (each binary by its sha256). Returns the layout's directory and
/// its records, as [`write_layout`] gives them.
pub fn cached_layout(
    images: &[BuiltImage],
    cache: &Path,
    epoch: u64,
) -> Result<(PathBuf, Vec<serde_json::Value>)> {
    let inputs: Vec<_> = images
        .iter()
        .map(|im| {
            let mut input = json!({"reference": im.reference, "binarySha256": im.binary_sha256,
                   "entrypoint": im.entrypoint, "user": im.user});
            if !im.cmd.is_empty() || !im.extra.is_empty() {
                input["cmd"] = json!(im.cmd);
                input["extra"] = im
                    .extra
                    .iter()
                    .map(|f| json!([f.path, f.sha256, f.mode]))
                    .collect();
            }
            input
        })
        .collect();
    let key = json!({"format": LAYOUT_FORMAT, "epoch": epoch, "images": inputs});
    let key = hex::encode(Sha256::digest(key.to_string().as_bytes()));
    let dir = cache.join("built-images");
    let entry = dir.join(&key);
    if !entry.join(RECORDS).is_file() {
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let tmp = dir.join(format!(".{key}.tmp"));
        if tmp.exists() {
            fs::remove_dir_all(&tmp).with_context(|| format!("removing {}", tmp.display()))?;
        }
        let records = write_layout(images, &tmp, epoch)?;
        fs::write(tmp.join(RECORDS), serde_json::to_vec(&records)?)?;
        crate::files::publish_dir(&tmp, &entry)?;
    }
    crate::files::prune_cache(&dir, &entry, CACHE_KEEP)?;
    let records = fs::read(entry.join(RECORDS))
        .with_context(|| format!("reading {}", entry.join(RECORDS).display()))?;
    let records = serde_json::from_slice(&records).with_context(|| {
        format!(
            "{}: not the records of a layout",
            entry.join(RECORDS).display()
        )
    })?;
    Ok((entry, records))
}

/// `epoch` as RFC 3339 UTC.
fn time_of(epoch: u64) -> String {
    chrono::DateTime::from_timestamp(i64::try_from(epoch).unwrap_or(i64::MAX), 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// gzip of `data` by miniz_oxide at level 9, with no name and no time in its header: its bytes depend on the
/// data alone (the header is what flate2's `GzBuilder` writes for `Compression::best()` and mtime 0). Not through
/// flate2: Cargo's feature unification picks flate2's backend, and the agent's `pgp` turns on zlib-rs, so a
/// `foothold-build` built beside the agent made other bytes, and other digests, for the same image.
fn gzip(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 255];
    out.extend(miniz_oxide::deflate::compress_to_vec(data, 9));
    out.extend(crc32fast::hash(data).to_le_bytes());
    // ISIZE: the length modulo 2^32, as RFC 1952 has it.
    out.extend((data.len() as u32).to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_binary_makes_the_same_image() {
        let dir = tempfile::tempdir().unwrap();
        let bin = fixture(dir.path());
        let im = [pause(&bin, "")];
        let a = write_layout(&im, &dir.path().join("a"), 1_767_225_600).unwrap();
        let b = write_layout(&im, &dir.path().join("b"), 1_767_225_600).unwrap();
        assert_eq!(a, b);
        let index: serde_json::Value =
            serde_json::from_slice(&fs::read(dir.path().join("a/index.json")).unwrap()).unwrap();
        assert_eq!(
            index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"],
            "registry.k8s.io/pause:3.10.1"
        );
        // The layer holds the binary, executable, at the entrypoint.
        let layer = a[0]["layer"]
            .as_str()
            .unwrap()
            .trim_start_matches("sha256:");
        let gz = fs::File::open(dir.path().join("a/blobs/sha256").join(layer)).unwrap();
        let mut t = tar::Archive::new(flate2::read::GzDecoder::new(gz));
        let e = t.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(e.path().unwrap().to_str(), Some("pause"));
        assert_eq!(e.header().mode().unwrap(), 0o755);
        assert_eq!(time_of(1_767_225_600), "2026-01-01T00:00:00Z");
        assert_eq!(time_of(0), "1970-01-01T00:00:00Z");
        assert_eq!(time_of(951_782_400), "2000-02-29T00:00:00Z");
    }

    fn fixture(dir: &Path) -> PathBuf {
        let bin = dir.join("pause");
        fs::write(&bin, b"\x7fELF not really").unwrap();
        bin
    }

    /// The pause image of `bin`, whose sha256 is `sha`.
    fn pause<'a>(bin: &'a Path, sha: &'a str) -> BuiltImage<'a> {
        BuiltImage {
            reference: "registry.k8s.io/pause:3.10.1",
            binary: bin,
            binary_sha256: sha,
            entrypoint: "/pause",
            user: "65535:65535",
            cmd: &[],
            extra: &[],
        }
    }

    #[test]
    fn gzip_is_what_flate2_reads_back() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 7 + i / 1000) as u8).collect();
        let gz = gzip(&data);
        assert_eq!(gz[..10], [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 255]);
        let mut back = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut back).unwrap();
        assert!(back == data);
        assert_eq!(gzip(b""), gzip(b""));
    }

    #[test]
    fn the_layout_format_is_pinned() {
        // If this digest changes, write_layout's bytes changed: bump LAYOUT_FORMAT, then update the digest here.
        let dir = tempfile::tempdir().unwrap();
        let bin = fixture(dir.path());
        let im = [pause(&bin, "")];
        let records = write_layout(&im, &dir.path().join("a"), 1_767_225_600).unwrap();
        assert_eq!(
            (LAYOUT_FORMAT, records[0]["digest"].as_str().unwrap()),
            (
                2,
                "sha256:9ee4fe1a9ab76819cf21177f82c792a703480f4269ff1b7d787b1082039e7c59"
            )
        );
    }

    #[test]
    fn a_cached_layout_is_made_once_and_again_when_an_input_changes() {
        let dir = tempfile::tempdir().unwrap();
        let bin = fixture(dir.path());
        let cache = dir.path().join("cache");
        let sha = crate::sparse::sha256(&bin).unwrap();
        let mut im = pause(&bin, &sha);
        let fresh = write_layout(std::slice::from_ref(&im), &dir.path().join("fresh"), 7).unwrap();
        let (entry, records) = cached_layout(std::slice::from_ref(&im), &cache, 7).unwrap();
        assert_eq!(records, fresh);
        assert!(entry.join("index.json").is_file());
        // Served from the cache: a blob removed stays removed, the records stay the same.
        let layer = records[0]["layer"]
            .as_str()
            .unwrap()
            .trim_start_matches("sha256:");
        fs::remove_file(entry.join("blobs/sha256").join(layer)).unwrap();
        let again = cached_layout(std::slice::from_ref(&im), &cache, 7).unwrap();
        assert_eq!(again, (entry.clone(), fresh.clone()));
        assert!(!entry.join("blobs/sha256").join(layer).exists());
        // Every input is part of the key.
        let mut entries = vec![entry];
        let other = dir.path().join("other");
        fs::write(&other, b"\x7fELF another").unwrap();
        let other_sha = crate::sparse::sha256(&other).unwrap();
        for change in 0..4 {
            match change {
                0 => (im.binary, im.binary_sha256) = (&other, &other_sha),
                1 => im.reference = "registry.k8s.io/pause:3.10.2",
                2 => im.entrypoint = "/pause2",
                _ => im.user = "0:0",
            }
            let (e, r) = cached_layout(std::slice::from_ref(&im), &cache, 7).unwrap();
            assert!(!entries.contains(&e), "change {change} made a new entry");
            assert_eq!(
                r,
                write_layout(
                    std::slice::from_ref(&im),
                    &dir.path().join(format!("f{change}")),
                    7
                )
                .unwrap()
            );
            entries.push(e);
        }
        let (e, _) = cached_layout(std::slice::from_ref(&im), &cache, 8).unwrap();
        assert!(!entries.contains(&e), "the epoch made a new entry");
        // The cache keeps the three most recently used entries, and no temporary directory.
        let left: Vec<_> = fs::read_dir(cache.join("built-images"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(left.len(), CACHE_KEEP, "{left:?}");
        assert!(left.contains(&e));
    }
}
