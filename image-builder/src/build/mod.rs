//! `foothold-build build`: a spec into bootable media, in phases that each own one part of the image:
//!
//! - [`inputs`]: the file inputs checked against their pins, the agent binary;
//! - [`layout`]: the disk's partitions and UUIDs, from the spec alone;
//! - [`rootfs`]: Debian's tree for the base (mmdebstrap, cached);
//! - [`root`]: the root partition (that tree, the overlays, the files, the [`configure`]d configuration),
//!   cached without the agent;
//! - [`data`]: the agent's store for the data partition;
//! - [`boot`]: the ESP, the boot code and the raw disk, written without loop devices or mounts;
//! - [`iso`]: the hybrid ISO;
//! - [`outputs`]: the compressed raw, the qcow2 and every output's manifest.
//!
//! This module only orders them and hands each what the ones before it made.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, Result};
use serde_json::json;

use crate::cmd::CommandExt as _;
use crate::progress::Progress;
use crate::spec::{Compression, Format, Loaded};

mod boot;
pub mod configure;
mod context;
mod data;
mod inputs;
mod iso;
pub mod layout;
mod outputs;
mod root;
mod rootfs;

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
    let agent = agent_path(loaded, settings)?;
    record.inputs.insert(
        "agent".into(),
        json!({"path": agent, "sha256": crate::sparse::sha256(&agent)?}),
    );
    let b = Build {
        loaded,
        settings,
        progress,
        layout: layout::Layout::new(loaded)?,
        work,
    };

    let root = root::partition(&b, &files, wanted(Format::Iso), &mut record)?;
    let stripped = b.work.join("foothold-agent");
    Command::new("objcopy")
        .arg("--strip-debug")
        .arg(&agent)
        .arg(&stripped)
        .run()
        .context("copying the agent binary without debug information")?;
    let data = data::stage(&b, &files, &agent, &mut record)?;
    let raw = boot::disk(&b, &root, &stripped, &data, &mut record)?;
    // The raw image is hashed for its manifest while the conversions run.
    let raw_digest = {
        let raw = raw.clone();
        std::thread::spawn(move || -> Result<(String, u64)> {
            Ok((crate::sparse::sha256(&raw)?, fs::metadata(&raw)?.len()))
        })
    };

    let mut made = vec![raw.clone()];
    let compression = spec.outputs.compression;
    if compression != Compression::None && wanted(Format::Raw) {
        made.push(outputs::compressed(
            &raw,
            compression,
            &mut record,
            progress,
        )?);
    }
    if wanted(Format::Qcow2) {
        made.push(outputs::qcow2(&b, &raw)?);
    }
    if wanted(Format::Iso) {
        progress.step(
            "iso",
            "the cached root's squashfs, a layer with the agent and its store, GRUB for BIOS and UEFI, hybrid for CD and USB",
        );
        made.push(iso::write(&b, &root, &stripped, &data)?);
        for (tool, arg) in [("xorriso", "-version"), ("grub-mkimage", "--version")] {
            // A GRUB disk noted grub-mkimage already.
            record
                .tools
                .entry(tool)
                .or_insert_with(|| crate::cmd::tool_version(tool, arg));
        }
    }
    outputs::manifests(&b, &raw, raw_digest, &made, record)?;
    progress.step("clean", "the staging directory");
    fs::remove_dir_all(&b.work)?;
    Ok(made)
}
