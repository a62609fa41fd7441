//! `foothold-build build`: a spec into bootable media, in phases that each own one part of the image:
//!
//! - [`inputs`]: the file inputs checked against their pins, the agent binary;
//! - [`layout`]: the disk's partitions and UUIDs, from the spec alone;
//! - [`rootfs`]: Debian's tree for the base (mmdebstrap, cached);
//! - [`root`]: the root partition (that tree, the overlays, the files, the [`configure`]d configuration),
//!   cached without the agent;
//! - [`data`]: the agent's store for the data partition (with [`installer`], the BPA's installer image);
//! - [`boot`]: the ESP, the boot code and the raw disk, written without loop devices or mounts;
//! - [`iso`]: the hybrid ISO;
//! - [`outputs`]: the compressed raw, the qcow2 and every output's manifest;
//! - [`ramdisk`]: instead of all the disk's phases, the kernel and an initramfs holding the root;
//! - [`workload`]: what the appliance gives the workload clusters its BPA installs (images, release file).
//!
//! This module only orders them and hands each what the ones before it made.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, Result};
use serde_json::json;

use crate::cmd::CommandExt as _;
use crate::progress::Progress;
use crate::spec::{Compression, Format, Loaded};

mod agent_conf;
mod boot;
pub mod configure;
mod context;
mod data;
mod inputs;
mod installer;
mod iso;
pub mod layout;
mod outputs;
mod ramdisk;
mod root;
mod rootfs;
pub mod workload;

pub use context::{Build, Record, Settings};
pub use inputs::{agent_path, spec_overlay};
pub use layout::derived_uuid;
pub use rootfs::rootfs;

/// Builds every output of the spec into `settings.out`. Returns the paths written.
pub fn build(loaded: &Loaded, settings: &Settings, progress: &Progress) -> Result<Vec<PathBuf>> {
    let spec = &loaded.spec;
    let wanted = |f: Format| {
        spec.outputs.formats.contains(&f)
            && settings.formats.as_ref().is_none_or(|w| w.contains(&f))
    };
    fs::create_dir_all(&settings.out)
        .with_context(|| format!("creating {}", settings.out.display()))?;
    let work = settings.out.join(format!(".{}.work", spec.name));
    if work.exists() {
        fs::remove_dir_all(&work)?;
    }
    fs::create_dir_all(&work)?;
    let mut record = Record::default();

    // Inputs from the network that the cache lacks (none when it has them all), then every input checked.
    if !settings.offline {
        crate::fetch::fetch_all(loaded, &settings.cache, 4, progress)?;
        crate::images::fetch_all(loaded, &settings.cache, &settings.pull, progress)?;
    }
    let files = inputs::resolve(loaded, settings)?;
    let b = Build {
        loaded,
        settings,
        progress,
        layout: layout::Layout::new(loaded)?,
        work,
    };
    if wanted(Format::Ramdisk) {
        let made = ramdisk::write(&b, &files, &mut record)?;
        outputs::file_manifests(&b, &made, record)?;
        progress.step("clean", "the staging directory");
        fs::remove_dir_all(&b.work)?;
        return Ok(made);
    }
    let agent = agent_path(loaded, settings)?;
    record.inputs.insert(
        "agent".into(),
        json!({"path": agent, "sha256": crate::sparse::sha256(&agent)?}),
    );

    let (root, base) = root::partition(&b, &files, wanted(Format::Iso), &mut record)?;
    let stripped = b.work.join("foothold-agent");
    Command::new("objcopy")
        .arg("--strip-debug")
        .arg(&agent)
        .arg(&stripped)
        .run()
        .context("copying the agent binary without debug information")?;
    let data = data::stage(&b, &files, (&agent, &stripped), &base, &mut record)?;
    let raw = boot::disk(&b, &root, &stripped, &data, &mut record)?;

    // The outputs made from the raw disk, each on a thread of its own and hashed for its manifest as soon as it
    // is whole: the conversions mostly wait on the disk, so on two cores they overlap well.
    let compression = spec.outputs.compression;
    let wanted_compressed =
        (compression != Compression::None && wanted(Format::Raw)).then_some(compression);
    let (made, digests) = std::thread::scope(|s| -> Result<_> {
        let (b, raw) = (&b, raw.as_path());
        fn hashed(path: PathBuf) -> Result<(PathBuf, (String, u64))> {
            let digest = crate::sparse::sha256(&path)?;
            let size = fs::metadata(&path)?.len();
            Ok((path, (digest, size)))
        }
        let raw_hash = s.spawn(move || hashed(raw.to_owned()));
        let compressed = wanted_compressed.map(|c| {
            s.spawn(move || {
                let level = spec.compression_level().expect("compressed");
                let (out, tool) = outputs::compressed(raw, c, level, b.progress)?;
                Ok((hashed(out)?, tool))
            })
        });
        let qcow2 = wanted(Format::Qcow2).then(|| s.spawn(move || hashed(outputs::qcow2(b, raw)?)));
        let iso = wanted(Format::Iso)
            .then(|| {
                progress.step(
                    "iso",
                    "the cached root's squashfs, a layer with the agent and its store, GRUB for BIOS and UEFI, hybrid for CD and USB",
                );
                hashed(iso::write(b, &root, &stripped, &data)?)
            })
            .transpose()?;
        fn join<T>(h: std::thread::ScopedJoinHandle<'_, Result<T>>) -> Result<T> {
            h.join().expect("an output's thread does not panic")
        }
        let mut made = vec![join(raw_hash)?];
        if let Some(h) = compressed {
            let (out, (tool, version)) = join(h)?;
            record.tools.insert(tool, version);
            made.push(out);
        }
        if let Some(h) = qcow2 {
            made.push(join(h)?);
        }
        made.extend(iso);
        let digests: BTreeMap<PathBuf, (String, u64)> = made.iter().cloned().collect();
        Ok((
            made.into_iter().map(|(p, _)| p).collect::<Vec<_>>(),
            digests,
        ))
    })?;
    if wanted(Format::Iso) {
        for (tool, arg) in [("xorriso", "-version"), ("grub-mkimage", "--version")] {
            // A GRUB disk noted grub-mkimage already.
            record
                .tools
                .entry(tool)
                .or_insert_with(|| crate::cmd::tool_version(tool, arg));
        }
    }
    outputs::manifests(&b, &raw, &made, &digests, record)?;
    progress.step("clean", "the staging directory");
    fs::remove_dir_all(&b.work)?;
    Ok(made)
}
