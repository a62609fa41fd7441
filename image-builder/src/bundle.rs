//! Self-contained bundles for air-gapped builds. `foothold-build fetch <spec> --bundle out.tar` writes one tar
//! holding everything a build reads: the spec (its local paths rewritten into the bundle), the cached root file
//! system, the fetched url inputs, the agent binary, the spec's overlay, image layouts and local files.
//! `foothold-build build --bundle out.tar --offline` unpacks it and builds with no network at all; the image is
//! the same as one built from the original spec (its hash is kept).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::build::{self, Settings};
use crate::cmd::CommandExt as _;
use crate::progress::Progress;
use crate::spec::{self, Loaded, LocalFile};

const INDEX: &str = "foothold-bundle.json";

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    /// The original spec's sha256: UUIDs and seeds derive from it, so the bundle builds the same image.
    spec_sha256: String,
    rootfs_key: String,
    builder: String,
}

/// Writes the bundle of `loaded` to `out` (its url inputs must be fetched already).
pub fn write(loaded: &Loaded, settings: &Settings, out: &Path, progress: &Progress) -> Result<()> {
    let (_, key) = build::rootfs(loaded, settings, progress)?;
    let staging = out.with_extension("staging");
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    fs::create_dir_all(staging.join("local"))?;
    let mut n = 0;
    let mut local = |p: &Path| -> Result<PathBuf> {
        n += 1;
        let name = p
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "input".into());
        let rel = PathBuf::from("local").join(format!("{n}-{name}"));
        // -H: the input itself, when it is a link (third_party/ links to the archives); links inside a tree stay
        // links.
        Command::new("cp")
            .args(["-a", "-H"])
            .arg(p)
            .arg(staging.join(&rel))
            .run()
            .with_context(|| format!("copying {} into the bundle", p.display()))?;
        Ok(rel)
    };
    let mut spec = loaded.spec.clone();
    let agent = build::agent_path(loaded, settings)?;
    spec.components.agent = Some(LocalFile {
        path: local(&agent)?,
    });
    // Foothold's own overlay is part of the builder; the spec's is carried.
    if let Some(overlay) = build::spec_overlay(loaded)? {
        spec.components.overlay = Some(local(&overlay)?);
    }
    for f in &mut spec.components.files {
        if let Some(p) = &f.path {
            f.path = Some(local(&loaded.resolve(p))?);
        }
    }
    let inputs = spec
        .components
        .kubernetes
        .iter_mut()
        .flat_map(|k| k.inputs_mut())
        .chain(spec.components.manifests.iter_mut())
        .chain(
            spec.components
                .metal3
                .iter_mut()
                .flat_map(|m| m.baremetal_operator.inputs_mut()),
        )
        .chain(spec.components.node.iter_mut().flat_map(|n| n.ca.as_mut()));
    for i in inputs {
        if let Some(p) = &i.path {
            i.path = Some(local(&loaded.resolve(p))?);
        }
    }
    for l in &mut spec.components.image_layouts {
        l.path = local(&loaded.resolve(&l.path))?;
    }
    // JSON is YAML: the bundled spec is the parsed one, paths rewritten.
    fs::write(
        staging.join("spec.yaml"),
        serde_json::to_string_pretty(&spec)? + "\n",
    )?;
    let index = Index {
        spec_sha256: loaded.sha256.clone(),
        rootfs_key: key.clone(),
        builder: crate::VERSION.into(),
    };
    fs::write(
        staging.join(INDEX),
        serde_json::to_string_pretty(&index)? + "\n",
    )?;
    let mut cached: Vec<String> = vec![format!("rootfs/{key}")];
    cached.extend(crate::images::cache_paths(loaded, &settings.cache)?);
    for (_, f) in spec.sources() {
        if let (None, Some(hex)) = (&f.path, &f.sha256) {
            cached.push(format!("files/sha256/{hex}"));
            // How it was built, for the manifest of the air-gapped build.
            if f.recipe().is_some()
                && settings
                    .cache
                    .join(format!("files/built/{hex}.txt"))
                    .is_file()
            {
                cached.push(format!("files/built/{hex}.txt"));
            }
        }
    }
    let tmp = out.with_extension("tar.tmp");
    progress.step("bundle", &format!("writing {}", out.display()));
    Command::new("tar")
        .arg("-cf")
        .arg(&tmp)
        // ACLs and extended attributes are part of the root file system (systemd's journal directory has ACLs);
        // holes too (mke2fs counts the bytes it writes in the superblock, so a file that lost its holes would
        // change the image).
        .args([
            "--sparse",
            "--sort=name",
            "--numeric-owner",
            "--acls",
            "--xattrs",
            "--xattrs-include=*",
            "-C",
        ])
        .arg(&staging)
        .args([INDEX, "spec.yaml", "local", "-C"])
        .arg(&settings.cache)
        .args(&cached)
        .run()
        .context("writing the bundle with tar")?;
    crate::files::publish(&tmp, out)?;
    fs::remove_dir_all(&staging)?;
    Ok(())
}

/// Unpacks `bundle` into `dir`; returns the spec (with the original's hash) and the cache inside the bundle.
///
/// `dir` is the build's cache, so the caller holds its lock ([`crate::cache_lock`]) before this unpacks into it:
/// what an earlier build left there is removed, all but the lock file.
pub fn open(bundle: &Path, dir: &Path) -> Result<(Loaded, PathBuf)> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let lock = crate::cache_lock::path(dir);
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path == lock {
            continue;
        }
        if path.is_dir() && !path.is_symlink() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        }
        .with_context(|| format!("removing {}", path.display()))?;
    }
    Command::new("tar")
        .arg("-xf")
        .arg(bundle)
        .args([
            "--same-owner",
            "--numeric-owner",
            "--acls",
            "--xattrs",
            "--xattrs-include=*",
        ])
        .arg("-C")
        .arg(dir)
        .run()
        .with_context(|| format!("unpacking the bundle {}", bundle.display()))?;
    let index: Index = serde_json::from_slice(&fs::read(dir.join(INDEX)).with_context(|| {
        format!(
            "{}: no {INDEX}; not a foothold-build bundle",
            bundle.display()
        )
    })?)
    .with_context(|| format!("{}: {INDEX}", bundle.display()))?;
    let mut loaded = spec::load(&dir.join("spec.yaml"))?;
    loaded.sha256 = index.spec_sha256;
    if !dir
        .join("rootfs")
        .join(&index.rootfs_key)
        .join(".complete")
        .exists()
    {
        bail!(
            "{}: the root file system {} is missing from the bundle",
            bundle.display(),
            index.rootfs_key
        );
    }
    Ok((loaded, dir.to_owned()))
}
